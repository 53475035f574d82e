package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
)

// Network faults between a generator's go-redis client and a real redis-server, injected by
// internal/faultproxy: added latency, a black hole longer than the lease, connection resets.
// The proxied clients have short timeouts so that a fault is felt within a lease.

// netOptions returns the options of a proxied client: a fault is felt within 150-200 ms and no
// command is retried by go-redis (dlock retries itself). ctxTimeouts sets
// ContextTimeoutEnabled, which go-redis leaves off by default.
func netOptions(addr string, ctxTimeouts bool) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		DialTimeout:           200 * time.Millisecond,
		ReadTimeout:           150 * time.Millisecond,
		WriteTimeout:          150 * time.Millisecond,
		PoolTimeout:           300 * time.Millisecond,
		MaxRetries:            -1, // -1, not 0, disables retries in go-redis
		ContextTimeoutEnabled: ctxTimeouts,
	}
}

// netProxy starts a fault proxy to target, closed when t ends (after the generators using it,
// which are created later and so closed earlier).
func netProxy(t testing.TB, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Blackhole(false)
		_ = p.Close()
	})
	return p
}

// netGenerator returns a generator over a new client with opt; both are closed when t ends.
func netGenerator(t testing.TB, opt *redis.Options, opts ...dlock.Option) (*dlock.Generator, *redis.Client) {
	t.Helper()
	c := redis.NewClient(opt)
	g, err := dlock.NewGenerator(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.Close(context.Background())
		_ = c.Close()
	})
	return g, c
}

// netCounts is what a contention run measures.
type netCounts struct {
	inside       atomic.Int32 // owners inside their critical section now (in this test process)
	acquisitions atomic.Int64
	overlaps     atomic.Int64           // entries that found another owner inside
	rejected     atomic.Int64           // fenced writes refused (a stale token)
	lost         atomic.Int64           // owner contexts ended with ErrLockLost while held
	timeouts     atomic.Int64           // Lock calls that ended with their context (ErrNotObtained)
	lockErrs     atomic.Int64           // Lock calls that ended otherwise
	unlockLost   atomic.Int64           // Unlock said ErrLockLost
	unlockErrs   atomic.Int64           // Unlock failed otherwise (Redis unreachable: the key expires)
	maxWait      atomic.Int64           // longest Lock call, ns
	byGen        [2]atomic.Int64        // acquisitions by generator A (the proxied one) and B
	firstErr     atomic.Pointer[string] // the first loss, or other Lock or Unlock error, for the report
}

// otherErr counts err in c and keeps it if it is the first.
func (n *netCounts) otherErr(c *atomic.Int64, what string, err error) {
	c.Add(1)
	s := what + ": " + err.Error()
	n.firstErr.CompareAndSwap(nil, &s)
}

func (n *netCounts) String() string {
	return fmt.Sprintf("acquisitions %d (A %d, B %d), overlaps %d, rejected stale writes %d, "+
		"lost notices %d, Lock timeouts %d, other Lock errors %d, Unlock lost %d, other Unlock errors %d, longest Lock %v",
		n.acquisitions.Load(), n.byGen[0].Load(), n.byGen[1].Load(), n.overlaps.Load(), n.rejected.Load(),
		n.lost.Load(), n.timeouts.Load(), n.lockErrs.Load(), n.unlockLost.Load(), n.unlockErrs.Load(),
		time.Duration(n.maxWait.Load()).Round(time.Millisecond)) + n.firstError()
}

func (n *netCounts) firstError() string {
	if e := n.firstErr.Load(); e != nil {
		return "; the first loss or other error: " + *e
	}
	return ""
}

// contention describes a run: goroutines in each of two generators lock one key until the
// end; every longEvery-th acquisition of a goroutine holds for longHold (so that renewals run),
// the others for up to a millisecond.
type contention struct {
	gens        [2]*dlock.Generator // A (proxied in the network tests), B
	typ, target string
	goroutines  int
	until       time.Time
	lockTimeout time.Duration
	longEvery   int
	longHold    time.Duration
	admin       *redis.Client // for the fenced store; nil for none
	fenceKey    string
}

// run runs the contention and returns when every goroutine has returned.
func (c contention) run(t *testing.T, n *netCounts) {
	t.Helper()
	var wg sync.WaitGroup
	for gi, g := range c.gens {
		l, err := g.Gen(c.typ, c.target)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < c.goroutines; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 1; time.Now().Before(c.until); k++ {
					hold := time.Duration(rand.IntN(1000)) * time.Microsecond
					if c.longEvery > 0 && k%c.longEvery == 0 {
						hold = c.longHold
					}
					c.once(n, gi, l, hold)
				}
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(c.until) + c.lockTimeout + c.longHold + 10*time.Second):
		t.Fatalf("Lock calls did not return within their timeout (%v): %v", c.lockTimeout, n)
	}
}

// once makes one Lock call and, if it got the lock, runs the critical section and unlocks.
func (c contention) once(n *netCounts, gi int, l *dlock.DistributedReentrantLock, hold time.Duration) {
	// The timeout bounds the wait only: the owner context must not inherit it.
	lctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.AfterFunc(c.lockTimeout, cancel)
	start := time.Now()
	owned, err := l.Lock(lctx)
	stopped := timer.Stop()
	for w, m := int64(time.Since(start)), n.maxWait.Load(); w > m && !n.maxWait.CompareAndSwap(m, w); m = n.maxWait.Load() {
	}
	switch {
	case err == nil && !stopped:
		// Granted as the timer fired: the owner context may be ending; count and release.
	case errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, context.Canceled):
		n.timeouts.Add(1)
		return
	case err != nil:
		n.otherErr(&n.lockErrs, "Lock", err)
		fmt.Fprintln(os.Stderr, "network test: Lock:", err)
		return
	}
	n.acquisitions.Add(1)
	n.byGen[gi].Add(1)
	if n.inside.Add(1) > 1 {
		n.overlaps.Add(1)
	}
	token, _ := l.FencingToken(owned)
	if c.admin != nil && !fencedWrite(context.Background(), c.admin, c.fenceKey, token) {
		n.rejected.Add(1)
	}
	t := time.NewTimer(hold)
	select {
	case <-t.C:
	case <-owned.Done():
		t.Stop()
	}
	if cause := context.Cause(owned); errors.Is(cause, dlock.ErrLockLost) {
		n.lost.Add(1)
		s := "lost while held: " + cause.Error() // (its cause, for the report)
		n.firstErr.CompareAndSwap(nil, &s)
	}
	n.inside.Add(-1)
	switch err := l.Unlock(owned); {
	case errors.Is(err, dlock.ErrLockLost):
		n.unlockLost.Add(1)
	case err != nil:
		n.otherErr(&n.unlockErrs, "Unlock", err)
	}
}

// Added latency (3 ms each way) on one generator's link: it contends with a direct generator;
// every acquisition succeeds, no two owners overlap, no fenced write is refused, and renewals
// through the slow link keep the long holds. Run with the default local hand-off (passes within
// a process) and without it (WithLocalHandOff(0): every Unlock releases in Redis).
func TestLatencyContention(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []dlock.Option
	}{{"DefaultHandOff", nil}, {"NoHandOff", []dlock.Option{dlock.WithLocalHandOff(0)}}} {
		t.Run(tc.name, func(t *testing.T) {
			s := realServer(t)
			p := netProxy(t, s.Addr)
			p.SetLatency(3 * time.Millisecond)
			// (a renewal or release has 500 ms to spare: a stall of this process, or a renewal
			// run late on a loaded machine, must not lose a long hold nor fail its Unlock, as
			// 250 ms did; what is checked is that renewals through the slow link keep them)
			const lease = 2 * time.Second
			opts := append([]dlock.Option{dlock.WithDefaultLease(lease)}, tc.opts...)
			// (no fault here to feel soon: timeouts that a stall of the process does not
			// outrun, where 150 ms made a release read in a stall fail its Unlock)
			opt := netOptions(p.Addr(), false)
			opt.ReadTimeout, opt.WriteTimeout = time.Second, time.Second
			gp, _ := netGenerator(t, opt, opts...)
			gd, admin := generator(t, s.Addr, opts...)

			var n netCounts
			dur := soak(t, 3*time.Second)
			contention{
				gens: [2]*dlock.Generator{gp, gd}, typ: "NETLAT", target: "k", goroutines: 4,
				// (up to 8 long holds, one after another, before a Lock call's turn)
				until: time.Now().Add(dur), lockTimeout: 10 * lease,
				longEvery: 50, longHold: lease * 9 / 10,
				admin: admin, fenceKey: "fence:netlat",
			}.run(t, &n)
			t.Logf("latency 3ms each way, lease %v, 4+4 goroutines, %v: %v; renewals (PEXPIRE) %s; proxy %+v",
				lease, dur, &n, commandStats(t, admin)["pexpire"], p.Stats())
			if n.overlaps.Load() != 0 || n.rejected.Load() != 0 || n.lost.Load() != 0 {
				t.Errorf("exclusion broken: %v", &n)
			}
			if n.lockErrs.Load() != 0 || n.unlockErrs.Load() != 0 || n.unlockLost.Load() != 0 {
				t.Errorf("errors: %v", &n)
			}
			if v := admin.Exists(context.Background(), "DLOCK_NETLAT_k").Val(); v != 0 {
				t.Errorf("EXISTS of the lock key after the run = %d", v)
			}
			if n.timeouts.Load() != 0 || n.byGen[0].Load() == 0 || n.byGen[1].Load() == 0 {
				t.Errorf("not every Lock call succeeded, or a generator never acquired: %v", &n)
			}
		})
	}
}

// A process a few milliseconds further from Redis than the holder's is not starved. This was a
// library bug at 84bf8d6 (local hand-over, before grants): the holder's process handed the key
// over locally and, after the hand-off limit with another process waiting, released it, but its
// own waiters tried again after max(2 x its own round trip, 100 us), long before the slower
// process's message and attempt (3 ms each way here) arrived; the slower process never got the
// lock (0 of 11,403 acquisitions in 2 minutes, 44 Lock calls timed out after 10 s), while with
// WithLocalHandOff(0) it got 674. Fixed at 75d562d (a release grants the key to a waiting
// process's mark). Here one proxied goroutine asks for the lock with a 3 s deadline, again and
// again, while four direct goroutines churn on it.
func TestLatencyRemoteProcessNotStarved(t *testing.T) {
	s := realServer(t)
	p := netProxy(t, s.Addr)
	p.SetLatency(3 * time.Millisecond)
	const lease = 500 * time.Millisecond
	gp, _ := netGenerator(t, netOptions(p.Addr(), false), dlock.WithDefaultLease(lease))
	gd, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	end := time.Now().Add(soak(t, 4*time.Second))
	var wg sync.WaitGroup
	var local atomic.Int64
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, _ := gd.Gen("NETSTARVE", "k")
			for time.Now().Before(end) {
				o, err := l.Lock(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				local.Add(1)
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
				_ = l.Unlock(o)
			}
		}()
	}
	l, _ := gp.Gen("NETSTARVE", "k")
	var remote, timeouts int
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		o, err := l.Lock(ctx)
		if err == nil {
			remote++
			_ = l.Unlock(o)
		} else {
			timeouts++
		}
		cancel()
	}
	wg.Wait()
	t.Logf("direct acquisitions %d; proxied (3 ms each way) acquisitions %d, Lock calls that waited 3 s in vain %d",
		local.Load(), remote, timeouts)
	if timeouts != 0 || remote == 0 {
		t.Errorf("the proxied process starved: %d acquisitions, %d Lock calls timed out after 3 s, against %d direct acquisitions",
			remote, timeouts, local.Load())
	}
}

// blackholeRound is what one round of the black-hole scenario saw.
type blackholeRound struct {
	lossAfter   time.Duration // from the black hole's start to the old owner's context ending
	handoff     time.Duration // from the black hole's start to the new owner's acquisition
	overlap     bool          // the new owner acquired while the old owner's context was alive
	overlapFor  time.Duration // for how long, at least
	staleWrites int64         // the old owner's fenced writes refused
}

// runBlackholeRound runs one round: the proxied generator gp takes key; a waiter of the direct
// generator gd queues; the black hole starts hold after the acquisition and lasts blackhole
// (what the proxied client sent meanwhile is delivered when it lifts, as TCP would). It checks
// what a lost lease must do and returns the measurements.
func runBlackholeRound(t *testing.T, p *faultproxy.Proxy, gp, gd *dlock.Generator, admin *redis.Client,
	key string, hold, blackhole time.Duration) blackholeRound {
	t.Helper()
	var r blackholeRound
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // turns a hang into a failure
	defer cancel()
	fence := "fence:" + key
	old, _ := gp.Gen("NETBH", key)
	neu, _ := gd.Gen("NETBH", key)
	lockKey := old.Config().UniqueKey()

	owned, err := old.Lock(ctx)
	if err != nil {
		t.Fatalf("proxied Lock: %v", err)
	}
	oldToken, _ := old.FencingToken(owned)
	if !fencedWrite(ctx, admin, fence, oldToken) {
		t.Fatal("the first fenced write was refused")
	}
	// The direct waiter, queued (and subscribed) before the black hole.
	type result struct {
		owned   context.Context
		err     error
		at      time.Time
		overlap bool
	}
	got := make(chan result, 1)
	go func() {
		o, err := neu.Lock(ctx)
		r := result{owned: o, err: err, at: time.Now()}
		r.overlap = err == nil && owned.Err() == nil // granted while the old owner's context lives
		got <- r
	}()

	time.Sleep(hold)
	start := time.Now()
	p.Blackhole(true)
	lifted := make(chan struct{})
	time.AfterFunc(blackhole, func() { p.Blackhole(false); close(lifted) })
	defer func() { <-lifted }()

	select {
	case <-owned.Done():
		r.lossAfter = time.Since(start)
	case <-time.After(5 * time.Second):
		t.Fatal("the proxied holder was not told within 5s that its lease ran out")
	}
	if cause := context.Cause(owned); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("old owner's cause %v, want ErrLockLost", cause)
	}
	var nr result
	select {
	case nr = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the direct waiter did not acquire within 5s of the black hole")
	}
	if nr.err != nil {
		t.Fatalf("direct Lock: %v", nr.err)
	}
	r.handoff, r.overlap = nr.at.Sub(start), nr.overlap
	if r.overlap {
		r.overlapFor = r.lossAfter - r.handoff
	}
	newToken, _ := neu.FencingToken(nr.owned)
	if newToken <= oldToken {
		t.Fatalf("new token %d not above the old %d", newToken, oldToken)
	}
	if !fencedWrite(ctx, admin, fence, newToken) {
		t.Fatal("the new owner's fenced write was refused")
	}

	<-lifted
	// The old owner's Unlock says the lock was lost and leaves the new owner's key alone.
	if err := old.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("old owner's Unlock = %v, want ErrLockLost", err)
	}
	if n := admin.Exists(ctx, lockKey).Val(); n != 1 {
		t.Fatalf("the old owner's Unlock deleted the new owner's key (EXISTS %d)", n)
	}
	if nr.owned.Err() != nil {
		t.Fatalf("the new owner's context ended: %v", context.Cause(nr.owned))
	}
	// The old owner, still acting, is fenced off.
	if fencedWrite(ctx, admin, fence, oldToken) {
		t.Fatal("the old owner's fenced write with its old token was accepted after the new owner wrote")
	}
	r.staleWrites++
	if err := neu.Unlock(nr.owned); err != nil {
		t.Fatalf("new owner's Unlock: %v", err)
	}
	if n := admin.Exists(ctx, lockKey).Val(); n != 0 {
		t.Fatalf("EXISTS %s after the last Unlock = %d", lockKey, n)
	}
	// The proxied generator works again.
	o, err := old.Lock(ctx)
	if err != nil {
		t.Fatalf("proxied Lock after the black hole: %v", err)
	}
	if err := old.Unlock(o); err != nil {
		t.Fatalf("proxied Unlock after the black hole: %v", err)
	}
	return r
}

// A black hole (1 s) longer than the lease (300 ms) cuts off a proxied holder: its owner context
// ends with ErrLockLost, before a direct waiter is granted the lock; the old Unlock reports the
// loss without touching the new owner's key, and the old token is fenced off. With and without
// ContextTimeoutEnabled on the proxied client (see TestBlackholeLossNoticeDefaultClient).
func TestBlackholeHolderLosesLease(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ctxTimeouts bool
	}{{"ContextTimeoutEnabled", true}, {"GoRedisDefault", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := realServer(t)
			p := netProxy(t, s.Addr)
			const lease, blackhole = 300 * time.Millisecond, time.Second
			gp, _ := netGenerator(t, netOptions(p.Addr(), tc.ctxTimeouts), dlock.WithDefaultLease(lease))
			gd, admin := generator(t, s.Addr, dlock.WithDefaultLease(10*lease)) // (the new owner holds through the black hole and the checks after it, on a loaded machine too)

			var rounds, overlaps, stale int
			var maxLoss, maxHandoff, maxOverlap time.Duration
			end := time.Now().Add(soak(t, 0))
			for i := 0; i == 0 || time.Now().Before(end); i++ {
				hold := time.Duration(rand.IntN(int(lease))) // anywhere in the renewal cycle
				r := runBlackholeRound(t, p, gp, gd, admin, fmt.Sprintf("r%d", i), hold, blackhole)
				rounds++
				stale += int(r.staleWrites)
				if r.overlap {
					overlaps++
					t.Errorf("round %d: the new owner was granted the lock %v after the black hole started, while the old owner's context lived (until %v)",
						i, r.handoff.Round(time.Millisecond), r.lossAfter.Round(time.Millisecond))
				}
				maxLoss, maxHandoff, maxOverlap = max(maxLoss, r.lossAfter), max(maxHandoff, r.handoff), max(maxOverlap, r.overlapFor)
			}
			t.Logf("lease %v, black hole %v, %d rounds: lost notices %d, longest from black hole to loss %v, "+
				"to the new owner %v; rounds where the new owner was granted while the old owner's context lived: %d (longest %v); "+
				"rejected stale writes %d; proxy %+v",
				lease, blackhole, rounds, rounds, maxLoss.Round(time.Millisecond), maxHandoff.Round(time.Millisecond),
				overlaps, maxOverlap.Round(time.Millisecond), stale, p.Stats())
		})
	}
}

// The old owner's context ends before another process is granted the lock even when its client
// ignores context deadlines (go-redis's default options: ContextTimeoutEnabled off, ReadTimeout
// 5 s). This was a library bug up to ceb7d3c: the renewal loop reported the loss only when the
// renewal in flight returned, and that client returned after ReadTimeout (or, here, when the
// black hole lifted), well after the key had expired in Redis: in every round of a 2-minute run
// the new owner was granted the lock while the old owner's context was alive, for up to 66 ms
// with ReadTimeout 150 ms (TestBlackholeHolderLosesLease/GoRedisDefault) and for 687 ms with the
// default options here. Fixed at d4d0b5e (a lease watchdog). The black hole starts soon after
// the acquisition, before the first renewal.
func TestBlackholeLossNoticeDefaultClient(t *testing.T) {
	s := realServer(t)
	p := netProxy(t, s.Addr)
	const lease, blackhole = 300 * time.Millisecond, time.Second
	gp, _ := netGenerator(t, &redis.Options{Addr: p.Addr()}, dlock.WithDefaultLease(lease))
	gd, admin := generator(t, s.Addr, dlock.WithDefaultLease(10*lease)) // (as above)
	for i := 0; i < 2; i++ {
		r := runBlackholeRound(t, p, gp, gd, admin, fmt.Sprintf("late%d", i), 20*time.Millisecond, blackhole)
		t.Logf("round %d: ErrLockLost %v after the black hole started, the new owner granted after %v",
			i, r.lossAfter.Round(time.Millisecond), r.handoff.Round(time.Millisecond))
		if r.overlap {
			t.Errorf("round %d: the new owner was granted the lock %v after the black hole started, "+
				"and the old owner's context stayed alive %v longer (ErrLockLost at %v)",
				i, r.handoff.Round(time.Millisecond), r.overlapFor.Round(time.Millisecond), r.lossAfter.Round(time.Millisecond))
		}
	}
}

// Waiters of a proxied generator with a 300 ms deadline, some queued before the black hole
// (behind a direct holder) and some arriving during it, return errors matching ErrNotObtained
// and context.DeadlineExceeded within a bounded time (5 s, to turn a hang into a failure); the
// generator recovers when the black hole lifts, and closing everything leaves no goroutine.
func TestBlackholeWaitersHonourDeadline(t *testing.T) {
	rounds, waiters, worst := runDeadlineWaiters(t, netOptions, soak(t, 0), 5*time.Second)
	t.Logf("deadline %v, %d rounds, %d waiters: all ended with ErrNotObtained+DeadlineExceeded, the slowest after %v",
		waiterDeadline, rounds, waiters, worst.Round(time.Millisecond))
}

// A Lock with a 300 ms deadline returns within 1 s during a partition even when its client
// ignores context deadlines (go-redis's default options). This was a library bug up to ceb7d3c:
// a Lock whose context ended returned only when the Redis calls it made on its way out (the
// attempt in flight, leaving the line) returned, after ReadTimeout: 5.3 s here.
// Fixed at d4d0b5e (attempts abandoned at the deadline, clean-up off the caller's path).
func TestBlackholeWaiterDeadlineDefaultClient(t *testing.T) {
	defaults := func(addr string, _ bool) *redis.Options { return &redis.Options{Addr: addr} }
	rounds, waiters, worst := runDeadlineWaiters(t, defaults, 0, time.Second)
	t.Logf("deadline %v, %d rounds, %d waiters, the slowest after %v", waiterDeadline, rounds, waiters, worst.Round(time.Millisecond))
}

const waiterDeadline = 300 * time.Millisecond

// runDeadlineWaiters runs rounds for dur (at least one) of 16 proxied waiters with a deadline
// of waiterDeadline through a black hole, each of which must return within bound, and returns
// the rounds, the waiters, the slowest waiter's time, and how many locks taken after the black
// hole were found not held at Unlock.
func runDeadlineWaiters(t *testing.T, opt func(addr string, ctxTimeouts bool) *redis.Options,
	dur, bound time.Duration) (rounds, waiters int, worst time.Duration) {
	baseline := goleak.IgnoreCurrent()
	s := realServer(t)
	p, err := faultproxy.New(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	const lease = 500 * time.Millisecond
	pc := redis.NewClient(opt(p.Addr(), false))
	gp, err := dlock.NewGenerator(pc, dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	dc := redis.NewClient(&redis.Options{Addr: s.Addr})
	gd, err := dlock.NewGenerator(dc, dlock.WithDefaultLease(10*lease)) // (the holder holds through a round, on a loaded machine too)
	if err != nil {
		t.Fatal(err)
	}
	closeAll := func() {
		p.Blackhole(false)
		if err := gp.Close(context.Background()); err != nil {
			t.Error(err)
		}
		if err := gd.Close(context.Background()); err != nil {
			t.Error(err)
		}
		_ = pc.Close()
		_ = dc.Close()
		_ = p.Close()
	}
	defer func() {
		if t.Failed() {
			closeAll()
		}
	}()

	end := time.Now().Add(dur)
	for i := 0; i == 0 || time.Now().Before(end); i++ {
		rounds++
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		held, _ := gd.Gen("NETDL", fmt.Sprintf("held%d", i))
		owned, err := held.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		type out struct {
			err  error
			took time.Duration
		}
		outs := make(chan out, 16)
		wait := func(target string) {
			l, _ := gp.Gen("NETDL", target)
			wctx, wcancel := context.WithTimeout(context.Background(), waiterDeadline)
			defer wcancel()
			start := time.Now()
			o, err := l.Lock(wctx)
			if err == nil {
				_ = l.Unlock(o)
			}
			outs <- out{err, time.Since(start)}
		}
		// Queued before the black hole, on the held key.
		for j := 0; j < 6; j++ {
			go wait(fmt.Sprintf("held%d", i))
		}
		time.Sleep(50 * time.Millisecond)
		p.Blackhole(true)
		// Arriving during it: on the held key and on a free one.
		for j := 0; j < 10; j++ {
			go wait(fmt.Sprintf([]string{"held%d", "free%d"}[j%2], i))
		}
		timeout := time.After(bound)
		for j := 0; j < 16; j++ {
			select {
			case o := <-outs:
				waiters++
				if !errors.Is(o.err, dlock.ErrNotObtained) || !errors.Is(o.err, context.DeadlineExceeded) {
					t.Errorf("waiter: %v, want ErrNotObtained and DeadlineExceeded", o.err)
				}
				worst = max(worst, o.took)
			case <-timeout:
				// Measure how late the rest are (the black hole stays), up to 30 s.
				left := 16 - j
				for hang := time.After(30 * time.Second); left > 0; left-- {
					select {
					case o := <-outs:
						worst = max(worst, o.took)
						continue
					case <-hang:
					}
					break
				}
				p.Blackhole(false)
				t.Fatalf("round %d: waiters with a %v deadline did not return within %v: the slowest returned after %v; %d still waiting after 30 s",
					i, waiterDeadline, bound, worst.Round(time.Millisecond), left)
			}
		}
		p.Blackhole(false)
		if err := held.Unlock(owned); err != nil {
			t.Fatal(err)
		}
		// Recovered: the proxied generator takes both keys.
		for _, target := range []string{"held%d", "free%d"} {
			l, _ := gp.Gen("NETDL", fmt.Sprintf(target, i))
			o, err := l.Lock(ctx)
			if err != nil {
				t.Fatalf("proxied Lock after the black hole: %v", err)
			}
			if err := l.Unlock(o); err != nil {
				t.Fatalf("proxied Unlock after the black hole: %v", err)
			}
		}
		cancel()
	}
	closeAll()
	goleak.VerifyNone(t, baseline)
	return rounds, waiters, worst
}

// An attempt abandoned at its caller's deadline lands late: it must be given back, and must
// not hand anyone a key somebody else owns. Found with grants (since removed): a release
// handed the key to the waiting process's mark, a late attempt of that process took the grant
// and its clean-up deleted it while another waiter of the process owned it — two owners.
// Here, through the fault proxy: B holds; a black hole starts; W1 of the proxied generator A
// calls TryLock with a 200 ms deadline, so its lock.lua is held in the black hole and the
// attempt is abandoned at the deadline (it finishes in the background); W0 of A then waits,
// its attempt in the black hole too; B unlocks, which deletes the key; the black hole lifts.
// W1's late lock.lua may take the key before W0's attempt; it is then given back, and W0 takes
// the key. At the end W0 owns the lock and B's TryLock fails.
func TestBlackholeLateAttemptIsGivenBack(t *testing.T) {
	s := realServer(t)
	p := netProxy(t, s.Addr)
	const lease = time.Second
	ga, _ := netGenerator(t, &redis.Options{Addr: p.Addr(), ReadTimeout: 2 * time.Second, MaxRetries: -1},
		dlock.WithDefaultLease(lease))
	gb, admin := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	la, _ := ga.Gen("NETGRANT", "k")
	lb, _ := gb.Gen("NETGRANT", "k")
	key := la.Config().UniqueKey()

	ob, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		owned context.Context
		err   error
	}

	// W1 tries first (a TryLock goes to Redis only while no goroutine of its process queues),
	// then W0 waits; both attempts go into the black hole.
	p.Blackhole(true)
	tctx, tcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	o1, ok, err := la.TryLock(tctx)
	tcancel()
	if ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("W1's TryLock in the black hole = %v, %v, %v; want the deadline", o1, ok, err)
	}
	w0 := make(chan result, 1)
	go func() {
		o, err := la.Lock(ctx)
		w0 <- result{o, err}
	}()
	time.Sleep(100 * time.Millisecond)
	if err := lb.Unlock(ob); err != nil {
		t.Fatal(err)
	}
	if st, err := lb.State(ctx); err == nil && st.Held() && st.Mine {
		t.Fatalf("B's release left %q, want the key deleted or granted to A", st.Holder)
	}
	p.Blackhole(false)

	var r result
	select {
	case r = <-w0:
	case <-time.After(5 * time.Second):
		t.Fatal("W0 did not acquire within 5s of the release")
	}
	if r.err != nil {
		t.Fatalf("W0: %v", r.err)
	}
	time.Sleep(200 * time.Millisecond) // W1's attempt finishes in the background
	held := admin.Get(ctx, key).Val()
	ob2, ok, err := lb.TryLock(ctx)
	t.Logf("W0 owns the lock (context alive: %v); the key holds %q; B's TryLock: %v, %v",
		r.owned.Err() == nil, held, ok, err)
	if ok && r.owned.Err() == nil {
		t.Errorf("two owners: W0 of A holds the lock (its context is alive) and B's TryLock succeeded; the key W0 owns was deleted (GET %q)", held)
	}
	if ok {
		_ = lb.Unlock(ob2)
	}
	_ = la.Unlock(r.owned)
}

// Connection resets every 20-50 ms during contention between a proxied and a direct generator:
// no overlap, every Lock call returns, locks keep being acquired after the resets stop, and no
// key is left held.
func TestResetsDuringContention(t *testing.T) {
	s := realServer(t)
	p := netProxy(t, s.Addr)
	const lease = 500 * time.Millisecond
	gp, _ := netGenerator(t, netOptions(p.Addr(), false), dlock.WithDefaultLease(lease))
	gd, admin := generator(t, s.Addr, dlock.WithDefaultLease(lease))

	dur := soak(t, 4*time.Second)
	stop := make(chan struct{})
	var resetter sync.WaitGroup
	resetter.Add(1)
	go func() {
		defer resetter.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rand.IntN(31)) * time.Millisecond):
				p.ResetAll()
			}
		}
	}()
	var n netCounts
	c := contention{
		gens: [2]*dlock.Generator{gp, gd}, typ: "NETRST", target: "k", goroutines: 4,
		until: time.Now().Add(dur), lockTimeout: 5 * time.Second,
		longEvery: 25, longHold: lease * 9 / 10,
		admin: admin, fenceKey: "fence:netrst",
	}
	c.run(t, &n)
	close(stop)
	resetter.Wait()
	t.Logf("resets every 20-50ms, lease %v, 4+4 goroutines, %v: %v; renewals (PEXPIRE) %s; proxy %+v",
		lease, dur, &n, commandStats(t, admin)["pexpire"], p.Stats())
	if n.overlaps.Load() != 0 || n.rejected.Load() != 0 {
		t.Errorf("exclusion broken: %v", &n)
	}
	if n.lockErrs.Load() != 0 {
		t.Errorf("Lock calls ended with errors other than their context's: %v", &n)
	}
	if n.byGen[0].Load() == 0 || n.byGen[1].Load() == 0 {
		t.Errorf("a generator never acquired during the resets: %v", &n)
	}

	// After the resets: everybody acquires, and the last Unlock leaves the key free.
	var after netCounts
	c.until = time.Now().Add(time.Second)
	c.longEvery = 0
	c.run(t, &after)
	t.Logf("after the resets, 1s: %v", &after)
	if after.acquisitions.Load() == 0 || after.timeouts.Load() != 0 || after.lockErrs.Load() != 0 ||
		after.overlaps.Load() != 0 || after.rejected.Load() != 0 || after.unlockErrs.Load() != 0 {
		t.Errorf("after the resets stopped: %v", &after)
	}
	if after.byGen[0].Load() == 0 || after.byGen[1].Load() == 0 {
		t.Errorf("a generator never acquired after the resets: %v", &after)
	}
	// The last Unlock may have granted the key to the other process's release that stood in
	// line again for a goroutine of its that does not come (a relock): that process passes
	// the grant on, or lets it go, at the end of its linger (2 ms), after every call returned.
	// A key left held for its lease (half of it is waited for here) is a failure.
	holder, ttl := "", time.Duration(0)
	for end := time.Now().Add(lease / 2); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if holder = admin.Get(context.Background(), "DLOCK_NETRST_k").Val(); holder == "" {
			break
		}
		ttl = admin.PTTL(context.Background(), "DLOCK_NETRST_k").Val()
	}
	if holder != "" {
		t.Errorf("the lock key is held by %q (PTTL %v) %v after everyone unlocked", holder, ttl, lease/2)
	}
}

// A waiting process whose subscription connection goes deaf (it stays open: Redis counts it
// listening, or, once the notifier has replaced it, hears a SUBSCRIBE that never arrives)
// while its command connection works is granted the key by a release, or told it is free,
// and hears neither: its poll finds the key its own or free, within about half a lease
// (lease/2 is the pace of the first in line), and it takes the key before the process behind
// it in line — the line is not blocked, and the deaf process keeps its turn.
func TestDeafSubscriptionGrantIsTakenByThePoll(t *testing.T) {
	for _, tc := range []struct {
		held, deaf time.Duration
		local      bool
	}{{0, 0, false}, {0, 3 * time.Second, false}, {time.Second, 500 * time.Millisecond, false}, {time.Second, 500 * time.Millisecond, true}} {
		name := fmt.Sprintf("held-%v-deaf-%v-before-the-release", tc.held, tc.deaf)
		if tc.local {
			name += "-a-local-waiter"
		}
		t.Run(name, func(t *testing.T) { deafGrantRounds(t, tc.held, tc.deaf, tc.local) })
	}
}

// deafGrantRounds: the holder holds for held once two processes wait, then the first's
// subscription goes deaf for deafBefore before the release.
func deafGrantRounds(t *testing.T, held, deafBefore time.Duration, localWaiter bool) {
	s := realServer(t)
	const lease = time.Second
	p := netProxy(t, s.Addr)
	t.Cleanup(func() { p.HoldSubscribers(false) })
	// (the holder's lease is three: renewed with 750 ms to spare, it is not lost to a late
	// renewal over its holds of up to 3 s, which would leave the key free for C; two, with
	// 500 ms to spare, lost it to a renewal 600 ms late)
	gA, _ := generator(t, s.Addr, dlock.WithDefaultLease(3*lease))
	gB, _ := netGenerator(t, &redis.Options{Addr: p.Addr()}, dlock.WithDefaultLease(lease))
	gC, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	lA, _ := gA.Gen("DEAF", "grant")
	lB, _ := gB.Gen("DEAF", "grant")
	lC, _ := gC.Gen("DEAF", "grant")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		o   *dlock.Owner
		err error
		at  time.Time
	}
	lockAt := func(l *dlock.DistributedReentrantLock) chan result {
		got := make(chan result, 1)
		go func() { o, err := l.Lock(ctx); got <- result{o, err, time.Now()} }()
		return got
	}
	inLine := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if st, err := lA.State(ctx); err == nil && len(st.Waiting) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d processes not in line", n)
			}
		}
	}
	rounds := 4
	if held > 0 || deafBefore > 0 {
		rounds = 2 // (long rounds)
	}
	for round := range rounds {
		a, err := lA.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gotB := lockAt(lB)
		inLine(1)
		gotC := lockAt(lC)
		inLine(2)
		var gotA2 chan result
		if localWaiter { // a goroutine of the holder's process waits: the release is a yield
			gotA2 = lockAt(lA)
		}
		time.Sleep(held + time.Duration(round)*lease/8) // its ask and the holder's renewal at various points
		p.HoldSubscribers(true)
		time.Sleep(deafBefore)
		released := time.Now()
		if err := a.Unlock(); err != nil {
			t.Fatal(err)
		}
		var b, c result
		select {
		case b = <-gotB:
		case c = <-gotC:
			t.Fatalf("round %d: the process behind the deaf one took the key first, %v after the release (%v)",
				round, c.at.Sub(released).Round(time.Millisecond), c.err)
		case <-time.After(20 * time.Second):
			t.Fatal("the deaf waiter never took the key")
		}
		p.HoldSubscribers(false)
		if b.err != nil {
			t.Fatal(b.err)
		}
		t.Logf("round %d: the deaf waiter took the key %v after the release (lease %v)", round, b.at.Sub(released).Round(time.Millisecond), lease)
		if err := b.o.Unlock(); err != nil {
			t.Fatal(err)
		}
		select {
		case c = <-gotC:
		case <-time.After(20 * time.Second):
			t.Fatal("the process behind never took the key")
		}
		if c.err != nil {
			t.Fatal(c.err)
		}
		if err := c.o.Unlock(); err != nil {
			t.Fatal(err)
		}
		if gotA2 != nil {
			a2 := <-gotA2
			if a2.err != nil {
				t.Fatal(a2.err)
			}
			if err := a2.o.Unlock(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
