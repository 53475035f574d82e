// Package deploy_test runs dlock's public API on the Redis deployments people run in
// production: a Redis Cluster (redis.NewClusterClient), a Sentinel-watched master and replica
// (redis.NewFailoverClient), and both again through redis.NewUniversalClient. It checks
// exclusion, hand-over between Generators, renewal and fencing on each, and what happens to
// holders and waiters when a master is killed (kill -9) or failed over by hand.
//
// Every test starts its redis-servers from PATH (internal/redistest) and skips without them,
// unless DLOCK_REQUIRE_REDIS=1. Runs are short by default; DLOCK_SOAK=<duration> runs the
// workloads that long and repeats the failovers. Measured figures are logged as
// "FIGURE name=value" lines (go test -v ./deploy | grep FIGURE).
//
// No go-redis client option is needed; the tests use go-redis's defaults (one test adds
// ClusterOptions.ClusterStateReloadInterval of 1 s beside them, for comparison):
//
//   - After a Cluster master is killed nothing tells a ClusterClient that the slot moved: the
//     dead node sends no MOVED, and connection errors do not reload the slot map, so left to
//     itself the client sends every command for the slot to the dead address until its
//     periodic reload (60 s by default; measured before the library's fix: waiters stuck
//     57 s). The library asks go-redis to reload the topology after every failed request or
//     subscription error; TestClusterStateReloadInterval checks that default clients, and a
//     UniversalClient (whose options have no reload interval), resume within seconds.
//   - A request to a dead master is retried by go-redis for longer than a renewal of a 5 s
//     lease has left (TestClusterKillMasterOfAnIdleHolder). The library sends its scripts on a
//     Cluster client once and follows a failed connection itself.
//   - A FailoverClient moves its command connections on +switch-master but not its PubSub
//     connections, so after SENTINEL FAILOVER (old master still up) a subscription would stay
//     on the old master and hear no release. The library's subscription probe (a message of
//     its own, published after a second of silence, must be heard within the next second)
//     replaces such a connection.
//
// What no option changes: SENTINEL FAILOVER can give two owners, because a renewal that lands
// on the old master after the promotion is lost; WithReplicaAck closes that case
// (TestSentinelFailoverShortLease measures both).
package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	closeShared()
	if code == 0 {
		// A go-redis pool that failed to dial keeps probing in a goroutine that notices the
		// pool's Close only after its next 1 s sleep: give goroutines a few seconds to end.
		err := goleak.Find()
		for i := 0; err != nil && i < 10; i++ {
			time.Sleep(500 * time.Millisecond)
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// soak returns how long soak workloads run: DLOCK_SOAK, or short when it is unset.
func soak(t testing.TB, short time.Duration) time.Duration {
	v := os.Getenv("DLOCK_SOAK")
	if v == "" {
		return short
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("DLOCK_SOAK=%q: %v", v, err)
	}
	return d
}

// soaking reports whether DLOCK_SOAK is set.
func soaking() bool { return os.Getenv("DLOCK_SOAK") != "" }

// bound turns hangs into failures; it is not a timing expectation.
const bound = 30 * time.Second

// reload is the ClusterStateReloadInterval the cluster clients use (see the package comment).
const reload = time.Second

func clusterOptions(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = reload }

// The deployments shared by the tests that do not break them, started on first use and
// closed by TestMain.
var shared struct {
	mu         sync.Mutex
	cluster    *redistest.Cluster
	clusterErr error
	sentinel   *redistest.Sentinel
	sentErr    error
}

func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster == nil && shared.clusterErr == nil {
		shared.cluster, shared.clusterErr = redistest.StartCluster(3, 1)
	}
	if shared.clusterErr != nil {
		skipOrFail(t, shared.clusterErr)
	}
	return shared.cluster
}

func sharedSentinel(t testing.TB) *redistest.Sentinel {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.sentinel == nil && shared.sentErr == nil {
		shared.sentinel, shared.sentErr = redistest.StartSentinel(3)
	}
	if shared.sentErr != nil {
		skipOrFail(t, shared.sentErr)
	}
	return shared.sentinel
}

func closeShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cluster != nil {
		shared.cluster.Close()
	}
	if shared.sentinel != nil {
		shared.sentinel.Close()
	}
}

func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if !redistest.Required() && errors.Is(err, redistest.ErrNoRedisServer) {
		t.Skipf("needs redis-server: %v", err)
	}
	t.Fatal(err)
}

// deployment makes clients of one Redis deployment: one per Generator, as separate processes
// would have.
type deployment struct {
	name      string
	newClient func() redis.UniversalClient
}

// deployments returns the four ways of reaching the shared deployments.
func deployments(t testing.TB) []deployment {
	c, s := sharedCluster(t), sharedSentinel(t)
	return []deployment{
		{"cluster", func() redis.UniversalClient { return c.Client() }},
		{"sentinel", func() redis.UniversalClient { return s.Client() }},
		{"universal-cluster", func() redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: c.Addrs()})
		}},
		{"universal-sentinel", func() redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{MasterName: s.MasterName(), Addrs: s.SentinelAddrs()})
		}},
	}
}

// generator returns a Generator (one "process") over a new client of d; both are closed when
// t ends.
func generator(t testing.TB, d deployment, lease time.Duration) *dlock.Generator {
	t.Helper()
	return generatorOn(t, d.newClient(), lease)
}

// generatorOn returns a Generator over client; both are closed when t ends.
func generatorOn(t testing.TB, client redis.UniversalClient, lease time.Duration, opts ...dlock.Option) *dlock.Generator {
	t.Helper()
	g, err := dlock.NewGenerator(client, append([]dlock.Option{dlock.WithDefaultLease(lease)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = client.Close()
	})
	return g
}

// lockKey is the Redis key of a lock (DLOCK_<type>_<target>).
func lockKey(typ, target string) string { return "DLOCK_" + typ + "_" + target }

// unique returns a target no earlier test used.
func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()) }

// targetsOn returns n targets of lock type typ whose keys are served by distinct slots, spread
// evenly over the cluster's masters (n a multiple of the masters, which must be 3).
func targetsOn(t testing.TB, c *redistest.Cluster, typ, prefix string, n int) []string {
	t.Helper()
	perMaster := map[string]int{}
	slots := map[int]bool{}
	var targets []string
	for i := 0; len(targets) < n && i < 10000; i++ {
		target := fmt.Sprintf("%s-%d", prefix, i)
		key := lockKey(typ, target)
		m := c.MasterFor(key)
		if m == "" || perMaster[m] >= n/3 || slots[domain.Slot(key)] {
			continue
		}
		perMaster[m]++
		slots[domain.Slot(key)] = true
		targets = append(targets, target)
	}
	if len(targets) != n || len(perMaster) != 3 {
		t.Fatalf("found targets %v on masters %v", targets, perMaster)
	}
	return targets
}

// targetsWith returns n targets of lock type typ whose keys are served by master (distinct
// slots).
func targetsWith(t testing.TB, c *redistest.Cluster, master, typ, prefix string, n int) []string {
	t.Helper()
	var targets []string
	slots := map[int]bool{}
	for i := 0; len(targets) < n && i < 10000; i++ {
		target := fmt.Sprintf("%s-%d", prefix, i)
		key := lockKey(typ, target)
		if c.MasterFor(key) == master && !slots[domain.Slot(key)] {
			slots[domain.Slot(key)] = true
			targets = append(targets, target)
		}
	}
	if len(targets) != n {
		t.Fatalf("found %d targets on %s", len(targets), master)
	}
	return targets
}

// durations summarizes latencies for FIGURE lines.
type durations []time.Duration

func (d durations) summary() string {
	if len(d) == 0 {
		return "n=0"
	}
	s := append(durations(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))] }
	return fmt.Sprintf("n=%d p50=%v p90=%v max=%v", len(s), round(q(0.5)), round(q(0.9)), round(s[len(s)-1]))
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// figure logs one measured figure in the form docs/deployments.md collects.
func figure(t testing.TB, name string, value any) {
	t.Helper()
	t.Logf("FIGURE %s=%v", name, value)
}
