package redistest

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := NeedSentinel(t, 3)
	t.Logf("FIGURE sentinel_start=%v", time.Since(start).Round(time.Millisecond))
	if len(s.SentinelAddrs()) != 3 || s.MasterName() == "" {
		t.Fatalf("sentinels %v, master name %q", s.SentinelAddrs(), s.MasterName())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := s.Client()
	defer cl.Close()
	if err := cl.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncReplicas(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	// kill -9 the master: the sentinels promote the replica, which has the data.
	old, err := s.KillMaster()
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	now, err := s.WaitNewMaster(old, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE sentinel_kill_to_new_master=%v", time.Since(killed).Round(time.Millisecond))
	if addr, _ := s.MasterAddr(); addr != now || now == old {
		t.Fatalf("master %q after killing %q (MasterAddr %q)", now, old, addr)
	}
	if err := waitFor("client writes to the new master", 30*time.Second, func() error {
		return cl.Set(ctx, "k2", "v", 0).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if v, err := cl.Get(ctx, "k").Result(); v != "v" {
		t.Fatalf("after failover GET = %q, %v", v, err)
	}

	// The killed node comes back as a replica of the new master (RestartKilled waits until the
	// sentinels have settled on that); SENTINEL FAILOVER moves the master back to it.
	if err := s.RestartKilled(); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncReplicas(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Master(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if cur != now {
		t.Fatalf("master %s after restarting %s, want %s still", cur, old, now)
	}
	manual := time.Now()
	prev, err := s.Failover()
	if err != nil {
		t.Fatal(err)
	}
	if prev != cur {
		t.Fatalf("Failover says the master was %s, want %s", prev, cur)
	}
	back, err := s.WaitNewMaster(prev, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE sentinel_manual_failover=%v", time.Since(manual).Round(time.Millisecond))
	if err := s.WaitReplicas(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE sentinel_manual_failover_old_master_demoted=%v", time.Since(manual).Round(time.Millisecond))
	if back != old {
		t.Fatalf("SENTINEL FAILOVER went to %s, want the restarted %s", back, old)
	}
	if err := waitFor("client writes after the manual failover", 30*time.Second, func() error {
		return cl.Set(ctx, "k3", "v", 0).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if v, err := cl.Get(ctx, "k2").Result(); v != "v" {
		t.Fatalf("after manual failover GET = %q, %v", v, err)
	}

	pids := s.pids()
	if len(pids) != 5 || slices.Contains(pids, 0) {
		t.Fatalf("pids %v, want 5", pids)
	}
	var dirs []string
	for _, p := range append(slices.Clone(s.sentinels), s.data...) {
		dirs = append(dirs, p.dir)
	}
	s.Close()
	s.Close()
	checkGone(t, pids, dirs)
}
