// End-to-end tests of the whole library through its public API, against a real redis-server
// started by the tests (or REDIS_ADDR), with the scenarios of Java DLock's own test suite.
package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	if os.Getenv("DLOCK_HELPER") != "" {
		os.Exit(helperProcess())
	}
	code := redistest.Main(m, func(s *redistest.Server) { srv = s })
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server is one simulated DLock server: its own client and generator.
func server(t testing.TB, opts ...dlock.Option) *dlock.Generator {
	t.Helper()
	c := srv.Client()
	g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithLeases(map[string]time.Duration{
		"ORDER": time.Second,
	})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		c.Close()
	})
	return g
}

func deadline(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// (a) Nested lock and unlock: the hold count returns to zero and the key is gone.
func TestNestedLockUnlock(t *testing.T) {
	g := server(t)
	l, err := g.Gen("ORDER", "nested")
	if err != nil {
		t.Fatal(err)
	}
	ctx := deadline(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for depth := 2; depth <= 5; depth++ {
		if _, err := l.Lock(owned); err != nil {
			t.Fatal(err)
		}
		if l.HoldCount(owned) != depth {
			t.Fatalf("hold count %d, want %d", l.HoldCount(owned), depth)
		}
	}
	c := srv.Client()
	defer c.Close()
	for depth := 5; depth > 0; depth-- {
		if c.Exists(ctx, l.Config().UniqueKey()).Val() != 1 {
			t.Fatalf("key gone at depth %d", depth)
		}
		if err := l.Unlock(owned); err != nil {
			t.Fatal(err)
		}
	}
	if l.HoldCount(owned) != 0 || c.Exists(ctx, l.Config().UniqueKey()).Val() != 0 {
		t.Fatal("hold count or key left after the last unlock")
	}
}

// critical runs goroutines spread over servers, each holding the lock once for up to maxHold
// (the servers' lease is 1 s, so longer holds need renewals). No two owners whose holdings are
// live are ever inside at once, and no holding is lost — unless the whole test process stalled
// for a fifth of the lease or more during the earlier hold (a machine loaded far past its CPUs
// can stop the timers of renewals and of the lease's end for longer than their spare time, as
// README's first Limit says): such a loss is logged, and its owner stops working at once, as a
// user's code would.
func critical(t *testing.T, servers []*dlock.Generator, target string, goroutines int, maxHold time.Duration) {
	const lease = time.Second
	stalls := watchStalls(t, lease/5)
	var (
		mu      sync.Mutex
		inside  = map[context.Context]time.Time{} // owner context: when it came in
		trips   atomic.Int64
		stalled atomic.Int64
		wg      sync.WaitGroup
	)
	ctx := deadline(t, 10*time.Minute)
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, err := servers[i%len(servers)].Gen("ORDER", target)
			if err != nil {
				t.Error(err)
				return
			}
			err = l.Do(ctx, func(owned context.Context) error {
				from := time.Now()
				mu.Lock()
				for other, since := range inside {
					if other.Err() == nil && owned.Err() == nil && !stalls.since(since) {
						t.Error("two owners inside at once, both live")
					}
				}
				inside[owned] = from
				mu.Unlock()
				defer func() {
					mu.Lock()
					delete(inside, owned)
					mu.Unlock()
				}()
				select {
				case <-time.After(rand.N(maxHold)):
				case <-owned.Done():
				}
				if owned.Err() == nil {
					trips.Add(1)
					return nil
				}
				if stalls.since(from) {
					t.Logf("lost in a stall of the process: %v", context.Cause(owned))
					stalled.Add(1)
					return errStalled
				}
				t.Errorf("lock lost while held: %v", context.Cause(owned))
				return nil
			})
			if err != nil && !errors.Is(err, errStalled) {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if trips.Load()+stalled.Load() != int64(goroutines) {
		t.Fatalf("%d trips and %d losses in stalls, want %d in all", trips.Load(), stalled.Load(), goroutines)
	}
}

// errStalled is what critical's holders return for a holding lost in a stall of the process.
var errStalled = errors.New("lost in a stall")

// stallWatch notes when the test process last stopped running for at least its threshold.
type stallWatch struct {
	threshold  time.Duration
	tick, last atomic.Int64 // the watch's last tick and the end of the last stall, in Unix ns
}

// watchStalls watches the process's timers until t ends.
func watchStalls(t *testing.T, threshold time.Duration) *stallWatch {
	w := &stallWatch{threshold: threshold}
	w.tick.Store(time.Now().UnixNano())
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if now.Sub(last) >= threshold {
					w.last.Store(now.UnixNano())
				}
				last = now
				w.tick.Store(now.UnixNano())
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return w
}

// since reports whether a stall ended at or after from, or one is under way now.
func (w *stallWatch) since(from time.Time) bool {
	return w.last.Load() >= from.UnixNano() || time.Since(time.Unix(0, w.tick.Load())) >= w.threshold
}

// (b) One process, 50 goroutines, holds up to 2 s under a 1 s lease (renewals needed).
func TestOneServerFiftyGoroutines(t *testing.T) {
	t.Parallel()
	critical(t, []*dlock.Generator{server(t)}, "one-server", 50, 2*time.Second)
}

// (c) Two servers, 50 goroutines each, one key.
func TestTwoServers(t *testing.T) {
	t.Parallel()
	critical(t, []*dlock.Generator{server(t), server(t)}, "two-servers", 100, 2*time.Second)
}

// A key held by a raw SET NX PX writer (as a Java DLock process holds it) blocks us until it
// is deleted, without a release message; then the poller finds it free.
func TestJavaDLockHolder(t *testing.T) {
	g := server(t)
	l, _ := g.GenWithLease("ORDER", "java-held", 600*time.Millisecond)
	c := srv.Client()
	defer c.Close()
	ctx := deadline(t, 30*time.Second)
	if !c.SetNX(ctx, l.Config().UniqueKey(), "10.0.0.1-42", time.Minute).Val() {
		t.Fatal("raw SET NX failed")
	}
	got := make(chan error, 1)
	var acquired time.Time
	go func() {
		owned, err := l.Lock(ctx)
		acquired = time.Now()
		if err == nil {
			err = l.Unlock(owned)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("acquired a key held by another writer: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	deleted := time.Now()
	c.Del(ctx, l.Config().UniqueKey())
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// One poll interval is lease/6 = 100 ms (plus one skipped when the process heard of the
	// key within the interval); report it, the benchmark measures it properly.
	t.Logf("acquired %v after the raw DEL", acquired.Sub(deleted))
}

func TestFencingTokensAcrossServers(t *testing.T) {
	servers := []*dlock.Generator{server(t), server(t)}
	ctx := deadline(t, 30*time.Second)
	var last uint64
	for i := 0; i < 20; i++ {
		l, _ := servers[i%2].Gen("ORDER", "fenced")
		owned, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := l.FencingToken(owned)
		if tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		}
		last = tok
		if err := l.Unlock(owned); err != nil {
			t.Fatal(err)
		}
	}
}

// Exclusion across real OS processes: the test binary runs itself as helpers.
func TestExclusionAcrossProcesses(t *testing.T) {
	const procs, goroutines, rounds = 3, 8, 15
	c := srv.Client()
	defer c.Close()
	ctx := deadline(t, 5*time.Minute)
	target := fmt.Sprintf("procs-%d", time.Now().UnixNano())
	c.Del(ctx, "{"+target+"}:counter", "{"+target+"}:inside")
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for p := 0; p < procs; p++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "DLOCK_HELPER=1", "DLOCK_HELPER_ADDR="+srv.Addr,
			"DLOCK_HELPER_TARGET="+target, "DLOCK_HELPER_GOROUTINES="+strconv.Itoa(goroutines),
			"DLOCK_HELPER_ROUNDS="+strconv.Itoa(rounds))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
	}
	n, err := c.Get(ctx, "{"+target+"}:counter").Int()
	if err != nil || n != procs*goroutines*rounds {
		t.Fatalf("counter %d (%v), want %d: an unprotected read-modify-write was lost", n, err, procs*goroutines*rounds)
	}
}

// helperProcess is one OS process of TestExclusionAcrossProcesses: goroutines × rounds trips,
// each doing a non-atomic GET, pause, SET on a Redis counter and an INCR/DECR overlap check.
func helperProcess() int {
	addr := os.Getenv("DLOCK_HELPER_ADDR")
	target := os.Getenv("DLOCK_HELPER_TARGET")
	goroutines, _ := strconv.Atoi(os.Getenv("DLOCK_HELPER_GOROUTINES"))
	rounds, _ := strconv.Atoi(os.Getenv("DLOCK_HELPER_ROUNDS"))
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer g.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, _ := g.Gen("ORDER", target)
			for r := 0; r < rounds; r++ {
				err := l.Do(ctx, func(owned context.Context) error {
					if n := c.Incr(owned, "{"+target+"}:inside").Val(); n != 1 {
						return errors.New("overlap: " + strconv.FormatInt(n, 10) + " inside")
					}
					v, _ := c.Get(owned, "{"+target+"}:counter").Int()
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					c.Set(owned, "{"+target+"}:counter", v+1, 0)
					c.Decr(owned, "{"+target+"}:inside")
					return nil
				})
				if err != nil {
					fmt.Println("helper:", err)
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		return 1
	}
	return 0
}

// tokenStore is a downstream store that honours fencing tokens.
type tokenStore struct {
	mu    sync.Mutex
	last  uint64
	value string
}

func (s *tokenStore) write(token uint64, value string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.last {
		return false
	}
	s.last, s.value = token, value
	return true
}

// A holder paused past its lease has its write rejected by a token-checking store while the
// new owner's write goes through. The pause is played by expiring the key from outside, which
// is what Redis does to the key of a holder that stops renewing.
func TestFencingRejectsStaleWriter(t *testing.T) {
	a, _ := server(t).GenWithLease("ORDER", "stale-writer", 200*time.Millisecond)
	b, _ := server(t).GenWithLease("ORDER", "stale-writer", 200*time.Millisecond)
	c := srv.Client()
	defer c.Close()
	ctx := deadline(t, 30*time.Second)
	db := &tokenStore{}

	ownedA, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tokenA, _ := a.FencingToken(ownedA)
	c.PExpire(ctx, a.Config().UniqueKey(), time.Millisecond) // A's lease runs out while it is paused

	ownedB, err := b.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tokenB, _ := b.FencingToken(ownedB)
	if !db.write(tokenB, "B") {
		t.Fatal("the new owner's write was rejected")
	}
	if db.write(tokenA, "A") {
		t.Fatalf("the stale holder's write (token %d) went through after token %d", tokenA, tokenB)
	}
	<-ownedA.Done()
	if !errors.Is(context.Cause(ownedA), dlock.ErrLockLost) || !errors.Is(a.Unlock(ownedA), dlock.ErrLockLost) {
		t.Fatal("the stale holder was not told it lost the lock")
	}
	if err := b.Unlock(ownedB); err != nil || db.value != "B" {
		t.Fatalf("B's unlock %v, store %q", err, db.value)
	}
}
