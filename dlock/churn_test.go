package dlock_test

// Churn: many short-lived Generators ("processes"), each with a few goroutines that take and
// let go of one lock with tiny deadlines (0-3 ms), abandoned waits and TryLocks, and that are
// closed in the middle of what their goroutines do. After the churn every Generator is
// closed: nothing may have been owned twice at once, every call must have ended promptly
// with an error a user expects, no goroutine may be left, and Redis must keep nothing held,
// nor any key without a time to live.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
)

// churnHold is one owner inside the critical section.
type churnHold struct {
	who   string
	owned context.Context
	write bool  // excludes everyone (a mutex, a writer)
	n     int64 // permits (a semaphore)
}

// churnGuard checks, as owners enter, that no live owner stands beside another in a way the
// lock forbids. An owner counts as inside while its owner context is live.
type churnGuard struct {
	t        testing.TB
	off      bool         // exclusion is not promised (a holder forced out by another process)
	maxK     atomic.Int64 // a semaphore's largest count in effect (0: not a semaphore)
	mu       sync.Mutex
	in       map[*churnHold]struct{}
	bad      int
	entries  int
	maxInUse int64
}

func newChurnGuard(t testing.TB) *churnGuard {
	return &churnGuard{t: t, in: map[*churnHold]struct{}{}}
}

func (g *churnGuard) enter(h *churnHold) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entries++
	if h.owned.Err() != nil || g.off {
		g.in[h] = struct{}{}
		return
	}
	var permits int64 = h.n
	for o := range g.in {
		if o.owned.Err() != nil {
			continue
		}
		switch {
		case g.maxK.Load() > 0:
			permits += o.n
		case h.write || o.write:
			g.bad++
			if g.bad <= 5 {
				g.t.Errorf("%s (write %v) entered beside %s (write %v), both owner contexts live", h.who, h.write, o.who, o.write)
			}
		}
	}
	if k := g.maxK.Load(); k > 0 {
		if permits > g.maxInUse {
			g.maxInUse = permits
		}
		if permits > k {
			g.bad++
			if g.bad <= 5 {
				g.t.Errorf("%s entered with %d permits: %d out of at most %d", h.who, h.n, permits, k)
			}
		}
	}
	g.in[h] = struct{}{}
}

func (g *churnGuard) leave(h *churnHold) {
	g.mu.Lock()
	delete(g.in, h)
	g.mu.Unlock()
}

// churnOps is what a churning goroutine does with one kind of lock.
type churnOps struct {
	lease time.Duration
	// take takes the lock (try: one attempt) and says what it took.
	take func(g *dlock.Generator, ctx context.Context, try bool, r *rand.Rand) (o *dlock.Owner, ok, write bool, n int64, err error)
	// unlock lets o go.
	unlock func(o *dlock.Owner) error
	// reenter takes o's lock once more (hold count + 1), as its kind allows.
	reenter func(g *dlock.Generator, o *dlock.Owner, write bool, n int64) (*dlock.Owner, error)
}

// churnStats counts what the churn saw.
type churnStats struct {
	acquired, tried, gaveUp, closed, lostUnlocks, longTimeouts, slow, late atomic.Int64
	// stalled is when (Unix ns) the last stall of this process ended: a 5 ms ticker that did
	// not run for gap (a loaded machine ran nothing of it); ticked, when it last ran.
	stalled, ticked atomic.Int64
	gap             time.Duration
}

// stalledSince reports whether the process stalled since start, or is coming out of a stall
// that its ticker has not seen end yet.
func (st *churnStats) stalledSince(start time.Time) bool {
	return st.stalled.Load() >= start.UnixNano() || time.Now().UnixNano()-st.ticked.Load() > int64(st.gap)
}

// watchStalls records in st.stalled the end of every stall of the process longer than gap,
// until stop is closed; done is closed once it has stopped.
func (st *churnStats) watchStalls(gap time.Duration, stop <-chan struct{}) (done <-chan struct{}) {
	st.gap = gap
	st.ticked.Store(time.Now().UnixNano())
	d := make(chan struct{})
	go func() {
		defer close(d)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if now := time.Now(); now.Sub(last) > gap {
					st.stalled.Store(now.UnixNano())
				}
				last = time.Now()
				st.ticked.Store(last.UnixNano())
			}
		}
	}()
	return d
}

type churnCfg struct {
	typ, target string
	ops         churnOps
	live        int           // Generators alive at once
	perGen      int           // goroutines per Generator
	life        time.Duration // a Generator's longest life
	dial        func() redis.UniversalClient
	faulty      bool                                   // connections may be cut: Redis errors and losses are expected
	holdLong    bool                                   // some holds last up to two leases
	slots       *forceSlots                            // a mutex's owners by their tenure's locker, for an operator that forces
	force       func(g *dlock.Generator, r *rand.Rand) // what a worker does now and then, if set
	during      func(stop <-chan struct{})
	opts        []dlock.Option // the Generators' options beside their lease
	relock      time.Duration  // if set, every final Unlock relocks and lingers that long (Generator.Relock)
}

// churn runs the churn for d and returns what it saw. Every Generator it made is closed when
// it returns.
func churn(t *testing.T, c churnCfg, gd *churnGuard, d time.Duration) *churnStats {
	t.Helper()
	st := &churnStats{}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	var closeErrs atomic.Int64
	stop := make(chan struct{})
	halt := make(chan struct{})
	watched := st.watchStalls(c.ops.lease/8, halt)
	defer func() { close(halt); <-watched }()
	if c.during != nil {
		wg.Add(1)
		go func() { defer wg.Done(); c.during(stop) }()
	}
	slots := make(chan struct{}, c.live)
	gen := 0
	for time.Now().Before(end) {
		slots <- struct{}{}
		gen++
		client := c.dial()
		g, err := dlock.NewGenerator(client, append([]dlock.Option{dlock.WithDefaultLease(c.ops.lease)}, c.opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if c.relock > 0 {
			g.Relock(c.relock)
		}
		var closing atomic.Bool
		var gwg sync.WaitGroup
		perGen := c.perGen
		if c.slots != nil && gen%2 == 0 {
			perGen = 1 // a process whose holder cannot pass the lock on without Redis
		}
		for w := range perGen {
			gwg.Add(1)
			who := fmt.Sprintf("gen%d/g%d", gen, w)
			go func() {
				defer gwg.Done()
				churnWorker(t, c, g, who, perGen == 1, gd, st, &closing)
			}()
		}
		life := time.Duration(rand.Int64N(int64(c.life)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			time.Sleep(life)
			closing.Store(true)
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			start := time.Now()
			err := g.Close(cctx)
			cancel()
			if churnLate(err) {
				st.late.Add(1)
			} else if err != nil && !c.faulty {
				closeErrs.Add(1)
				t.Errorf("Close: %v", err)
			}
			if el := time.Since(start); el > 10*time.Second {
				t.Errorf("Close took %v", el)
			}
			gwg.Wait()
			client.Close()
		}()
	}
	close(stop)
	wg.Wait()
	t.Logf("%d Generators; %d acquisitions (%d by TryLock), %d gave up, %d ended by Close, %d Unlocks said lost, %d long waits timed out, %d slow returns, %d releases late",
		gen, st.acquired.Load(), st.tried.Load(), st.gaveUp.Load(), st.closed.Load(), st.lostUnlocks.Load(), st.longTimeouts.Load(), st.slow.Load(), st.late.Load())
	return st
}

// churnWorker takes and lets go of the lock until its Generator closes.
func churnWorker(t *testing.T, c churnCfg, g *dlock.Generator, who string, alone bool, gd *churnGuard, st *churnStats, closing *atomic.Bool) {
	r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for !closing.Load() {
		var ctx context.Context
		var cancel context.CancelFunc
		long := false
		switch r.IntN(6) {
		case 0, 1, 2: // a deadline of 0-3 ms
			ctx, cancel = context.WithTimeout(context.Background(), time.Duration(r.IntN(3001))*time.Microsecond)
		case 3: // a wait abandoned at a random moment
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(time.Duration(r.IntN(5000))*time.Microsecond, cancel)
		default: // a long wait
			ctx, cancel = context.WithTimeout(context.Background(), 20*c.ops.lease)
			long = true
		}
		try := r.IntN(4) == 0
		start := time.Now()
		o, ok, write, n, err := c.ops.take(g, ctx, try, r)
		el := time.Since(start)
		dl, hasDL := ctx.Deadline()
		if (hasDL && time.Since(dl) > 3*time.Second) || (!hasDL && el > 10*time.Second) {
			st.slow.Add(1)
			t.Errorf("%s: take returned %v after it began (deadline %v ago): %v", who, el, time.Since(dl), err)
		}
		cancel()
		if err != nil {
			switch {
			case errors.Is(err, dlock.ErrClosed):
				st.closed.Add(1)
			case errors.Is(err, dlock.ErrNotObtained):
				st.gaveUp.Add(1)
				if long && ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) && !closing.Load() {
					st.longTimeouts.Add(1)
				}
				if !c.faulty && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, dlock.ErrClosed) {
					t.Errorf("%s: take: not obtained without the context's error: %v", who, err)
				}
			case c.faulty:
			case errors.As(err, new(*dlock.RedisProcessError)) && strings.Contains(err.Error(), "no answer"):
				// (a loaded machine's Redis that answered a family's take later than a third
				// of the 150 ms lease: the documented error of a request without an answer)
			default:
				t.Errorf("%s: take: %v", who, err)
			}
			continue
		}
		if !ok {
			continue
		}
		st.acquired.Add(1)
		if try {
			st.tried.Add(1)
		}
		h := &churnHold{who: who, owned: o, write: write, n: n}
		gd.enter(h)
		var slot *forceSlot
		if c.slots != nil {
			slot = c.slots.enter(g, c.typ, c.target, o)
		}
		if c.force != nil && r.IntN(20) == 0 {
			c.force(g, r)
		}
		inner, reentered := o, false
		if r.IntN(5) == 0 && c.ops.reenter != nil {
			if o2, err := c.ops.reenter(g, o, write, n); err == nil {
				inner, reentered = o2, true
			} else if !errors.Is(err, dlock.ErrClosed) && !errors.Is(err, dlock.ErrLockLost) && !c.faulty {
				t.Errorf("%s: re-entry: %v", who, err)
			}
		}
		if d := r.IntN(2000); d > 300 {
			time.Sleep(time.Duration(d) * time.Microsecond)
		}
		if c.holdLong && r.IntN(10) == 0 { // a hold that may outlast a cut connection
			time.Sleep(time.Duration(r.Int64N(int64(2 * c.ops.lease))))
		}
		gd.leave(h)
		var forced, same bool
		if slot != nil {
			forced, same = c.slots.leave(slot)
		}
		lostBefore := errors.Is(context.Cause(o), dlock.ErrLockLost)
		if reentered {
			if err := c.ops.unlock(inner); err != nil {
				churnUnlockErr(t, c, who, st, closing, start, err)
			}
		}
		err = c.ops.unlock(o)
		if err != nil {
			churnUnlockErr(t, c, who, st, closing, start, err)
		}
		// (A holder that passes the lock to another goroutine of its process is not told of a
		// force from another process before its tenure's next renewal: docs/design.md.)
		if forced && (same || alone) && !errors.Is(err, dlock.ErrLockLost) && !closing.Load() {
			t.Errorf("%s: its tenure %s was released by force (by its own Generator: %v) while it owned the lock, yet Unlock returned %v (re-entered %v)", who, slot.locker, same, err, reentered)
		}
		if lostBefore && !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("%s: the owner context ended as lost (%v), yet Unlock returned %v", who, context.Cause(o), err)
		}
	}
}

// churnUnlockErr judges the error of an Unlock of a holding whose take began at start: a loss
// is expected where connections are cut, a force or a Close may have ended it, or the process
// stalled since (its renewal ran late: a loaded machine against a 150 ms lease).
func churnUnlockErr(t *testing.T, c churnCfg, who string, st *churnStats, closing *atomic.Bool, start time.Time, err error) {
	switch {
	case churnLate(err):
		st.late.Add(1)
	case errors.Is(err, dlock.ErrLockLost):
		st.lostUnlocks.Add(1)
		if !c.faulty && c.slots == nil && !closing.Load() && !st.stalledSince(start) {
			t.Errorf("%s: Unlock: %v (nothing was cut and the Generator was not closing)", who, err)
		}
	case errors.Is(err, dlock.ErrClosed):
	case c.faulty:
	default:
		t.Errorf("%s: Unlock: %v", who, err)
	}
}

// churnEnd checks what is left once every Generator closed: nothing held or in line for
// long, every key with a time to live, and the lock free for a new process at once.
func churnEnd(t *testing.T, admin *redis.Client, typ, target string, lease time.Duration, free func(*dlock.Generator) bool) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	pattern := "*DLOCK_" + typ + "_" + target + "*"
	keys, err := admin.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		pttl, err := admin.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl < 0 && pttl != -2*time.Nanosecond && pttl != -2*time.Millisecond {
			typ, _ := admin.Type(ctx, k).Result()
			t.Errorf("key %s (%s) has no time to live (PTTL %v)", k, typ, pttl)
		}
	}
	t.Logf("keys left right after the last Close: %v", keys)
	// What a Generator holds is let go by its Close; a line entry of a closed one within
	// its entry's life (a lease, at least 2 s). Allow both, then some.
	deadline := time.Now().Add(2*time.Second + 4*lease + 2*time.Second)
	for {
		keys, err = admin.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		var held []string
		for _, k := range keys {
			if !strings.HasPrefix(k, "{") || churnHeldSuffix(k) { // a mutex's key, or a side key of a holding or the line
				held = append(held, k)
			}
		}
		if len(held) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, k := range held {
				ty, _ := admin.Type(ctx, k).Result()
				pttl, _ := admin.PTTL(ctx, k).Result()
				var v any
				switch ty {
				case "hash":
					v, _ = admin.HGetAll(ctx, k).Result()
				case "zset":
					v, _ = admin.ZRangeWithScores(ctx, k, 0, -1).Result()
				case "string":
					v, _ = admin.Get(ctx, k).Result()
				case "list":
					v, _ = admin.LRange(ctx, k, 0, -1).Result()
				}
				t.Errorf("%s (%s, PTTL %v) still kept after every Generator closed and its leases passed: %v", k, ty, pttl, v)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new process finds the lock free. (With a lease of its own of 2 s at least: its request
	// is bounded by a third of it, and a stall of this process must not cut it short.)
	c := srv.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(max(lease, 2*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if !free(g) {
		t.Errorf("a new process does not find the lock free after the churn")
	}
	if err := g.Close(context.Background()); err != nil {
		t.Error(err)
	}
}

// churnLeaks fails t if goroutines other than those running before remain.
func churnLeaks(t *testing.T, before goleak.Option) {
	t.Helper()
	var err error
	for range 20 {
		if err = goleak.Find(before); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("goroutines left after every Generator closed: %v", err)
}

func mutexChurnOps(typ, target string, lease time.Duration) churnOps {
	return churnOps{
		lease: lease,
		take: func(g *dlock.Generator, ctx context.Context, try bool, r *rand.Rand) (*dlock.Owner, bool, bool, int64, error) {
			l, err := g.Gen(typ, target)
			if err != nil {
				return nil, false, false, 0, err
			}
			if try {
				o, ok, err := l.TryLock(ctx)
				return o, ok, true, 1, err
			}
			o, err := l.Lock(ctx)
			return o, err == nil, true, 1, err
		},
		unlock: func(o *dlock.Owner) error { return o.Unlock() },
		reenter: func(g *dlock.Generator, o *dlock.Owner, _ bool, _ int64) (*dlock.Owner, error) {
			l, err := g.Gen(typ, target)
			if err != nil {
				return nil, err
			}
			return l.Lock(o)
		},
	}
}

func rwChurnOps(typ, target string, lease time.Duration) churnOps {
	rw := func(g *dlock.Generator) (*dlock.RWLock, error) { return g.GenRW(typ, target) }
	return churnOps{
		lease: lease,
		take: func(g *dlock.Generator, ctx context.Context, try bool, r *rand.Rand) (*dlock.Owner, bool, bool, int64, error) {
			l, err := rw(g)
			if err != nil {
				return nil, false, false, 0, err
			}
			write := r.IntN(3) == 0
			switch {
			case try && write:
				o, ok, err := l.TryLock(ctx)
				return o, ok, true, 0, err
			case try:
				o, ok, err := l.TryRLock(ctx)
				return o, ok, false, 0, err
			case write:
				o, err := l.Lock(ctx)
				return o, err == nil, true, 0, err
			default:
				o, err := l.RLock(ctx)
				return o, err == nil, false, 0, err
			}
		},
		unlock: func(o *dlock.Owner) error { return o.Unlock() },
		reenter: func(g *dlock.Generator, o *dlock.Owner, write bool, _ int64) (*dlock.Owner, error) {
			l, err := rw(g)
			if err != nil {
				return nil, err
			}
			return l.RLock(o) // a writer downgrades, a reader re-enters
		},
	}
}

func semChurnOps(typ, target string, lease time.Duration, k int) churnOps {
	return churnOps{
		lease: lease,
		take: func(g *dlock.Generator, ctx context.Context, try bool, r *rand.Rand) (*dlock.Owner, bool, bool, int64, error) {
			s, err := g.GenSemaphore(typ, target, k)
			if err != nil {
				return nil, false, false, 0, err
			}
			n := 1 + r.IntN(2)
			if try {
				o, ok, err := s.TryAcquire(ctx, n)
				return o, ok, false, int64(n), err
			}
			o, err := s.Acquire(ctx, n)
			return o, err == nil, false, int64(n), err
		},
		unlock: func(o *dlock.Owner) error { return o.Unlock() },
	}
}

// multiChurnOps takes, as one MultiLock, a mutex, a read-write lock's side (each side by
// turns) and one permit of a semaphore of two: the mutex part keeps the owners exclusive.
func multiChurnOps(typ, target string, lease time.Duration) churnOps {
	return churnOps{
		lease: lease,
		take: func(g *dlock.Generator, ctx context.Context, try bool, r *rand.Rand) (*dlock.Owner, bool, bool, int64, error) {
			l, err := g.Gen(typ, target+".m")
			if err != nil {
				return nil, false, false, 0, err
			}
			rw, err := g.GenRW(typ, target+".r")
			if err != nil {
				return nil, false, false, 0, err
			}
			s, err := g.GenSemaphore(typ, target+".s", 2)
			if err != nil {
				return nil, false, false, 0, err
			}
			side := rw.ReadSide()
			if r.IntN(2) == 0 {
				side = rw.WriteSide()
			}
			m, err := g.MultiOf(l, side, s.Permits(1))
			if err != nil {
				return nil, false, false, 0, err
			}
			if try {
				o, ok, err := m.TryLock(ctx)
				return o, ok, true, 1, err
			}
			o, err := m.Lock(ctx)
			return o, err == nil, true, 1, err
		},
		unlock: func(o *dlock.Owner) error { return o.Unlock() },
	}
}

func churnTarget(t *testing.T) string {
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + fmt.Sprint(time.Now().UnixNano())
}

// churnFor is how long each churn runs: 1 s, or DLOCK_SOAK (a Go duration).
func churnFor(t *testing.T) time.Duration {
	if os.Getenv("DLOCK_SOAK") == "" {
		return time.Second
	}
	return soakFor(t)
}

// Many short-lived processes with tiny deadlines, abandoned waits and a Close in the middle of
// their work take one lock of each kind: exclusion holds, every call ends promptly with an
// error a user expects, nothing is left held in Redis or without a time to live, and no
// goroutine is left.
func TestChurn(t *testing.T) {
	srv.NeedReal(t)
	const typ = "CHURN"
	const lease = 150 * time.Millisecond
	for _, kind := range []string{"Mutex", "HoldOver", "RW", "Semaphore", "Multi"} {
		t.Run(kind, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			tg := churnTarget(t)
			gd := newChurnGuard(t)
			admin := rawClient(t)
			cfg := churnCfg{typ: typ, target: tg, live: 4, perGen: 3, life: 200 * time.Millisecond,
				dial: func() redis.UniversalClient { return srv.Client() }}
			var free func(*dlock.Generator) bool
			switch kind {
			case "Mutex", "HoldOver":
				cfg.ops = mutexChurnOps(typ, tg, lease)
				if kind == "HoldOver" { // (final Unlocks that keep the key: WithHoldOver, each a relock, one goroutine a process)
					cfg.opts, cfg.relock, cfg.perGen = []dlock.Option{dlock.WithHoldOver(true)}, 2*time.Millisecond, 1
				}
				free = func(g *dlock.Generator) bool {
					l, _ := g.Gen(typ, tg)
					o, ok, err := l.TryLock(ctxT(t, 5*time.Second))
					if ok {
						_ = o.Unlock()
					}
					return ok && err == nil
				}
			case "RW":
				cfg.ops = rwChurnOps(typ, tg, lease)
				free = func(g *dlock.Generator) bool {
					l, _ := g.GenRW(typ, tg)
					o, ok, err := l.TryLock(ctxT(t, 5*time.Second))
					if ok {
						_ = o.Unlock()
					}
					return ok && err == nil
				}
			case "Multi":
				cfg.ops = multiChurnOps(typ, tg, lease)
				free = func(g *dlock.Generator) bool {
					o, ok, _, _, err := cfg.ops.take(g, ctxT(t, 5*time.Second), true, rand.New(rand.NewPCG(1, 2)))
					if ok {
						_ = o.Unlock()
					}
					return ok && err == nil
				}
			case "Semaphore":
				const k = 3
				gd.maxK.Store(4)
				cfg.ops = semChurnOps(typ, tg, lease, k)
				ks := []int{2, 3, 4, 3}
				cfg.force = func(g *dlock.Generator, r *rand.Rand) {
					s, err := g.GenSemaphore(typ, tg, k)
					if err != nil {
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(3000))*time.Microsecond)
					defer cancel()
					if err := s.SetPermits(ctx, ks[r.IntN(len(ks))]); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, dlock.ErrClosed) {
						t.Errorf("SetPermits by a churning process: %v", err)
					}
				}
				cfg.during = func(stop <-chan struct{}) {
					c := srv.Client()
					defer c.Close()
					g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
					if err != nil {
						t.Error(err)
						return
					}
					defer g.Close(context.Background())
					s, _ := g.GenSemaphore(typ, tg, k)
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						case <-time.After(time.Duration(20+rand.IntN(60)) * time.Millisecond):
						}
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(20))*time.Millisecond)
						err := s.SetPermits(ctx, ks[i%len(ks)])
						cancel()
						if err != nil && !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("SetPermits: %v", err)
						}
					}
				}
				free = func(g *dlock.Generator) bool {
					s, _ := g.GenSemaphore(typ, tg, k)
					o, ok, err := s.TryAcquire(ctxT(t, 5*time.Second), 2)
					if ok {
						_ = o.Unlock()
					}
					if err != nil {
						t.Log(err)
					}
					return ok && err == nil
				}
			}
			st := churn(t, cfg, gd, churnFor(t))
			if st.acquired.Load() == 0 {
				t.Errorf("nothing was acquired")
			}
			if n := st.longTimeouts.Load(); n > 0 {
				t.Errorf("%d waits of 20 leases timed out while holders hold for at most 2 ms", n)
			}
			churnEnd(t, admin, typ, tg, lease, free)
			churnLeaks(t, before)
		})
	}
}

// churnHeldSuffix reports whether k is a side key that keeps a holding or a place in line.
func churnHeldSuffix(k string) bool {
	for _, s := range []string{":line", ":want", ":first", ":shared:held", ":shared:exp", ":shared:line", ":shared:want", ":shared:heard"} {
		if strings.HasSuffix(k, s) {
			return true
		}
	}
	return false
}

// The churn again, the processes' connections to Redis cut now and then (every connection
// reset at once, or a black hole for up to 700 ms, over two leases): still no two owners at once, a lost
// holding's Unlock says so, every call ends promptly, and nothing is left.
func TestChurnWithCutConnections(t *testing.T) {
	srv.NeedReal(t)
	const typ = "CHURNCUT"
	const lease = 300 * time.Millisecond
	for _, kind := range []string{"Mutex", "RW", "Semaphore"} {
		t.Run(kind, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			tg := churnTarget(t)
			gd := newChurnGuard(t)
			admin := rawClient(t)
			p, err := faultproxy.New(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			cfg := churnCfg{typ: typ, target: tg, live: 4, perGen: 3, life: 400 * time.Millisecond, faulty: true, holdLong: true,
				dial: func() redis.UniversalClient {
					return redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: 200 * time.Millisecond,
						ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
				},
				during: func(stop <-chan struct{}) {
					for {
						select {
						case <-stop:
							p.Blackhole(false)
							return
						case <-time.After(time.Duration(50+rand.IntN(250)) * time.Millisecond):
						}
						if rand.IntN(2) == 0 {
							p.ResetAll()
						} else {
							p.Blackhole(true)
							time.Sleep(time.Duration(rand.IntN(700)) * time.Millisecond)
							p.Blackhole(false)
						}
					}
				}}
			var free func(*dlock.Generator) bool
			switch kind {
			case "Mutex":
				cfg.ops = mutexChurnOps(typ, tg, lease)
				free = func(g *dlock.Generator) bool {
					l, _ := g.Gen(typ, tg)
					o, ok, err := l.TryLock(ctxT(t, 5*time.Second))
					if ok {
						_ = o.Unlock()
					}
					return ok && err == nil
				}
			case "RW":
				cfg.ops = rwChurnOps(typ, tg, lease)
				free = func(g *dlock.Generator) bool {
					l, _ := g.GenRW(typ, tg)
					o, ok, err := l.TryLock(ctxT(t, 5*time.Second))
					if ok {
						_ = o.Unlock()
					}
					return ok && err == nil
				}
			case "Semaphore":
				const k = 3
				gd.maxK.Store(k)
				cfg.ops = semChurnOps(typ, tg, lease, k)
				free = func(g *dlock.Generator) bool {
					s, _ := g.GenSemaphore(typ, tg, k)
					o, ok, err := s.TryAcquire(ctxT(t, 5*time.Second), 3)
					if ok {
						_ = o.Unlock()
					}
					return ok && err == nil
				}
			}
			st := churn(t, cfg, gd, churnFor(t))
			p.Close()
			if st.acquired.Load() == 0 {
				t.Errorf("nothing was acquired")
			}
			churnEnd(t, admin, typ, tg, lease, free)
			churnLeaks(t, before)
		})
	}
}

// forceSlots tracks the owner of a mutex by the locker of the tenure it owns through, so that
// an operator that forces a holder out knows whose Unlock must then say the lock was lost.
type forceSlots struct {
	family bool // a read-write lock or semaphore: holdings, not tenures
	mu     sync.Mutex
	by     map[string]*forceSlot
	forced atomic.Int64
}

type forceSlot struct {
	g      *dlock.Generator
	locker string
	forced bool
	same   bool // forced by its own Generator
}

func newForceSlots() *forceSlots { return &forceSlots{by: map[string]*forceSlot{}} }

// enter records that o owns the lock through the tenure (or holding) g holds now.
func (f *forceSlots) enter(g *dlock.Generator, typ, target string, o *dlock.Owner) *forceSlot {
	var locker string
	if f.family {
		held := g.SharedBelief(rgLockKey(typ, target))
		if len(held) != 1 {
			return nil
		}
		for l := range held {
			locker = l
		}
	} else {
		l, _, ok := g.Belief(rgLockKey(typ, target))
		if !ok {
			return nil
		}
		locker = l
	}
	if o.Err() != nil {
		return nil
	}
	s := &forceSlot{g: g, locker: locker}
	f.mu.Lock()
	f.by[locker] = s
	f.mu.Unlock()
	return s
}

// leave reports whether s's tenure was released by force while it was inside.
func (f *forceSlots) leave(s *forceSlot) (forced, same bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by[s.locker] == s {
		delete(f.by, s.locker)
	}
	return s.forced, s.same
}

// forcer is a lock an operator forces holders out of.
type forcer interface {
	holder(ctx context.Context, r *rand.Rand) (string, error) // one holder now, "" for none
	ForceRelease(ctx context.Context, holder string) (bool, error)
}

type mutexForcer struct {
	*dlock.DistributedReentrantLock
}

func (m mutexForcer) holder(ctx context.Context, _ *rand.Rand) (string, error) {
	st, err := m.State(ctx)
	return st.Holder, err
}

type semForcer struct{ *dlock.Semaphore }

func (m semForcer) holder(ctx context.Context, r *rand.Rand) (string, error) {
	st, err := m.State(ctx)
	if err != nil || len(st.Holds) == 0 {
		return "", err
	}
	return st.Holds[r.IntN(len(st.Holds))].Locker, nil
}

type rwForcer struct{ *dlock.RWLock }

func (m rwForcer) holder(ctx context.Context, r *rand.Rand) (string, error) {
	st, err := m.State(ctx)
	if err != nil || len(st.Holds) == 0 {
		return "", err
	}
	return st.Holds[r.IntN(len(st.Holds))].Locker, nil
}

// forceHolder has l force out a holder its State shows, and marks its owner forced if that
// owner was inside all along.
func (f *forceSlots) forceHolder(g *dlock.Generator, l forcer, ctx context.Context, r *rand.Rand) error {
	holder, err := l.holder(ctx, r)
	if err != nil || holder == "" {
		return err
	}
	st := struct{ Holder string }{holder}
	f.mu.Lock()
	s := f.by[st.Holder]
	f.mu.Unlock()
	ok, err := l.ForceRelease(ctx, st.Holder)
	if ok {
		f.forced.Add(1)
		f.mu.Lock()
		if s != nil && f.by[st.Holder] == s {
			s.forced = true
			s.same = s.g == g
		}
		f.mu.Unlock()
	}
	return err
}

// An operator's Generator, and now and then a churning process itself, forces out whoever
// holds a lock that short-lived processes churn over (the mutex's tenure, a read-write lock's
// or a semaphore's holding): every owner whose holding was forced out while it owned it is
// told so by its Unlock (ErrLockLost) — when it is its process's only goroutine or its own
// Generator forced it (docs/design.md: a pass within a process before the loss is heard
// cannot tell) — every call ends promptly, and nothing is left held in Redis, nor any
// goroutine.
func TestChurnWithForceRelease(t *testing.T) {
	srv.NeedReal(t)
	const typ = "CHURNFORCE"
	const lease = 150 * time.Millisecond
	const k = 3
	for _, kind := range []string{"Mutex", "RW", "Semaphore"} {
		t.Run(kind, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			tg := churnTarget(t)
			gd := newChurnGuard(t)
			gd.off = true // a holder forced out by another process may still believe it holds
			admin := rawClient(t)
			slots := newForceSlots()
			slots.family = kind != "Mutex"
			var ops churnOps
			lockOf := func(g *dlock.Generator) (forcer, error) {
				switch kind {
				case "RW":
					l, err := g.GenRW(typ, tg)
					return rwForcer{l}, err
				case "Semaphore":
					s, err := g.GenSemaphore(typ, tg, k)
					return semForcer{s}, err
				}
				l, err := g.Gen(typ, tg)
				return mutexForcer{l}, err
			}
			switch kind {
			case "Mutex":
				ops = mutexChurnOps(typ, tg, lease)
			case "RW":
				ops = rwChurnOps(typ, tg, lease)
			case "Semaphore":
				ops = semChurnOps(typ, tg, lease, k)
			}
			forceCtx := func(r *rand.Rand) (context.Context, context.CancelFunc) {
				if r.IntN(3) == 0 {
					return context.WithTimeout(context.Background(), time.Duration(r.IntN(3000))*time.Microsecond)
				}
				return context.WithTimeout(context.Background(), 5*time.Second)
			}
			cfg := churnCfg{typ: typ, target: tg, live: 4, perGen: 3, life: 200 * time.Millisecond, holdLong: true, slots: slots,
				dial: func() redis.UniversalClient { return srv.Client() },
				ops:  ops,
				force: func(g *dlock.Generator, r *rand.Rand) {
					l, err := lockOf(g)
					if err != nil {
						return
					}
					ctx, cancel := forceCtx(r)
					defer cancel()
					if err := slots.forceHolder(g, l, ctx, r); err != nil && ctx.Err() == nil && !errors.Is(err, dlock.ErrClosed) {
						t.Errorf("a process's ForceRelease: %v", err)
					}
				},
				during: func(stop <-chan struct{}) {
					c := srv.Client()
					defer c.Close()
					g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
					if err != nil {
						t.Error(err)
						return
					}
					defer g.Close(context.Background())
					l, _ := lockOf(g)
					r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
					for {
						select {
						case <-stop:
							return
						case <-time.After(time.Duration(r.IntN(3000)) * time.Microsecond):
						}
						ctx, cancel := forceCtx(r)
						if err := slots.forceHolder(g, l, ctx, r); err != nil && ctx.Err() == nil {
							t.Errorf("the operator's ForceRelease: %v", err)
						}
						cancel()
					}
				}}
			st := churn(t, cfg, gd, churnFor(t))
			t.Logf("%d holders forced out", slots.forced.Load())
			if st.acquired.Load() == 0 || slots.forced.Load() == 0 {
				t.Errorf("nothing was acquired or forced")
			}
			churnEnd(t, admin, typ, tg, lease, func(g *dlock.Generator) bool {
				o, ok, _, _, err := ops.take(g, ctxT(t, 5*time.Second), true, rand.New(rand.NewPCG(1, 2)))
				if ok {
					_ = o.Unlock()
				}
				return ok && err == nil
			})
			churnLeaks(t, before)
		})
	}
}

// churnLate reports a release that Redis did not answer in time on a loaded machine — the
// mutex's within the holding's lease, the family's within its request's bound (a third of the
// lease): its outcome is unknown, and it is retried in the background, as documented.
func churnLate(err error) bool {
	var rpe *dlock.RedisProcessError
	return errors.As(err, &rpe) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrUnanswered))
}

// Hundreds of processes come and go on one client while one holds the family's locks: each
// waits in line for what a holding keeps it from (the write side behind a reader, every permit
// behind one, a MultiLock of both) and ends its wait as a user may — its wait is cancelled and
// its Generator left open, its Generator closes as it waits, or both. Under a 30 s lease, so
// that nothing they leave could pass for a slow moment: once the holder lets go, a new process
// gets in at once (within 10 s, a hang otherwise); the Generators keep no state or
// subscription of the locks once done with them; and once every Generator is closed no
// goroutine is left. (A Generator closed with a context that has ended sends no give-back:
// its entry goes at once only if its process listened when it last asked, else a third of a
// lease later, as a process's without notifications; docs/design.md.)
func TestChurnOfWaitingProcessesLeavesNothingInTheWay(t *testing.T) {
	srv.NeedReal(t)
	const lease = 30 * time.Second
	for _, kind := range []string{"RW", "Semaphore", "Multi"} {
		t.Run(kind, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			tg := churnTarget(t)
			// locks returns what stands in the way (hold) and what waits for it (want) on process
			// g's target i of 8
			locks := func(g *dlock.Generator, i int) (hold, want func(context.Context) (*dlock.Owner, error), err error) {
				tg := fmt.Sprint(tg, i%8)
				switch kind {
				case "RW":
					l, err := g.GenRW("CHURNWAIT", tg)
					if err != nil {
						return nil, nil, err
					}
					return l.RLock, l.Lock, nil
				case "Semaphore":
					s, err := g.GenSemaphore("CHURNWAIT", tg, 4)
					if err != nil {
						return nil, nil, err
					}
					return s.Permits(1).Lock, s.Permits(4).Lock, nil
				}
				s, err := g.GenSemaphore("CHURNWAIT", tg+".s", 1)
				if err != nil {
					return nil, nil, err
				}
				l, err := g.GenRW("CHURNWAIT", tg+".r")
				if err != nil {
					return nil, nil, err
				}
				m, err := g.MultiOf(l.WriteSide(), s.Permits(1))
				if err != nil {
					return nil, nil, err
				}
				return s.Permits(1).Lock, m.Lock, nil
			}
			hold := func(g *dlock.Generator, ctx context.Context, i int) (*dlock.Owner, error) {
				h, _, err := locks(g, i)
				if err != nil {
					return nil, err
				}
				return h(ctx)
			}
			want := func(g *dlock.Generator, ctx context.Context, i int) (*dlock.Owner, error) {
				_, w, err := locks(g, i)
				if err != nil {
					return nil, err
				}
				return w(ctx)
			}
			c := srv.Client()
			defer c.Close()
			holder, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close(context.Background())
			ctx := ctxT(t, time.Minute)
			var held []*dlock.Owner
			for i := range 8 {
				o, err := hold(holder, ctx, i)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, o)
			}
			var left []*dlock.Generator // left open
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 240 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
					if err != nil {
						t.Error(err)
						return
					}
					wctx, cancel := context.WithCancel(ctx)
					defer cancel()
					got := make(chan error, 1)
					go func() {
						o, err := want(g, wctx, i)
						if err == nil {
							err = fmt.Errorf("got in beside the holder: %v", o.Unlock())
						}
						got <- err
					}()
					time.Sleep(time.Duration(20+i%100) * time.Millisecond) // (in line, mostly)
					switch i % 3 {
					case 0:
						cancel()
						mu.Lock()
						left = append(left, g)
						mu.Unlock()
					case 1:
						if err := g.Close(context.Background()); err != nil {
							t.Errorf("Close: %v", err)
						}
					case 2:
						cancel()
						if err := g.Close(context.Background()); err != nil {
							t.Errorf("Close: %v", err)
						}
					}
					if err := <-got; !errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, dlock.ErrClosed) {
						t.Errorf("a waiter that gave up or was closed: %v", err)
					}
				}()
			}
			wg.Wait()
			for _, o := range held {
				if err := o.Unlock(); err != nil {
					t.Fatal(err)
				}
			}
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 8 {
				o, err := want(g, ctxT(t, 10*time.Second), i)
				if err != nil {
					t.Fatalf("a new process after the churn: %v", err)
				}
				if err := o.Unlock(); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, func() bool { return holder.SharedInUse() == 0 && holder.Subscribed() == 0 && g.SharedInUse() == 0 })
			for _, g := range append(left, g, holder) {
				if err := g.Close(context.Background()); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			churnLeaks(t, before)
		})
	}
}
