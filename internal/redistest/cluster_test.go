package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
)

// Slot agrees with Redis's CLUSTER KEYSLOT, hash tags included.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{"": 0, "123456789": 0x31C3 % 16384, "{user1000}.following": domain.Slot("user1000"),
		"foo{}{bar}": domain.Slot("foo{}{bar}"), "foo{{bar}}zap": domain.Slot("{bar")} {
		if got := domain.Slot(key); got != want {
			t.Errorf("domain.Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := NeedCluster(t, 3, 1)
	t.Logf("FIGURE cluster_start=%v", time.Since(start).Round(time.Millisecond))
	if got := len(c.Addrs()); got != 6 {
		t.Fatalf("%d nodes, want 6", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Slot agrees with the cluster on keys of every master.
	masters := map[string]bool{}
	for i := range 50 {
		key := fmt.Sprintf("DLOCK_T_k%d", i)
		n, err := c.nodes[0].do("CLUSTER", "KEYSLOT", key).Int()
		if err != nil {
			t.Fatal(err)
		}
		if n != domain.Slot(key) {
			t.Fatalf("domain.Slot(%q) = %d, CLUSTER KEYSLOT %d", key, domain.Slot(key), n)
		}
		masters[c.MasterFor(key)] = true
	}
	if len(masters) != 3 {
		t.Fatalf("50 keys on masters %v, want 3 masters", masters)
	}

	cl := c.Client(func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second })
	defer cl.Close()
	const key = "{DLOCK_T_x}:k"
	if err := cl.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.SyncReplicas(key, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	// kill -9 the master: its replica takes over with the data.
	old, err := c.KillMaster(key)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	now, err := c.WaitFailover(key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE cluster_kill_to_failover=%v", time.Since(killed).Round(time.Millisecond))
	if now == old || now == "" || now != c.MasterFor(key) {
		t.Fatalf("master %q after failover of %q (MasterFor %q)", now, old, c.MasterFor(key))
	}
	if err := waitFor("client sees the new master", 30*time.Second, func() error {
		return cl.Get(ctx, key).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if v, err := cl.Get(ctx, key).Result(); v != "v" {
		t.Fatalf("after failover GET = %q, %v", v, err)
	}

	// The killed node comes back as a replica; a manual failover moves the slot back.
	if err := c.RestartKilled(); err != nil {
		t.Fatal(err)
	}
	if c.MasterFor(key) != now {
		t.Fatalf("restart moved the slot to %s", c.MasterFor(key))
	}
	manual := time.Now()
	back, err := c.FailoverReplica(key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE cluster_manual_failover=%v", time.Since(manual).Round(time.Millisecond))
	if back != old {
		t.Fatalf("manual failover went to %s, want the restarted %s", back, old)
	}
	if err := waitFor("client sees the manual failover", 30*time.Second, func() error {
		v, err := cl.Get(ctx, key).Result()
		if err == nil && v != "v" {
			return errors.New("value lost")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// Close leaves no process and no directory.
	pids := c.pids()
	dirs := []string{}
	for _, p := range c.all() {
		dirs = append(dirs, p.dir)
	}
	c.Close()
	c.Close()
	checkGone(t, pids, dirs)
}

func checkGone(t *testing.T, pids []int, dirs []string) {
	t.Helper()
	if len(pids) == 0 || slices.Contains(pids, 0) {
		t.Fatalf("pids %v", pids)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still there after Close (%v)", pid, err)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("directory %s still there after Close (%v)", d, err)
		}
	}
}
