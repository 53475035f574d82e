package dlock_test

// Regression tests for defects found by independent testing. They use only the public API,
// a raw go-redis client on the same server, and go-redis hooks on the lock's own client. Each
// Generator stands for one process.
//
// Time bounds below only turn hangs and lease-long lockouts into failures: leases are long
// (10-30 s) wherever "blocked for the lease" must be told apart from "free within seconds".

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

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// ---------------------------------------------------------------------------------------------
// Helpers

// rgGen returns a generator ("a process") on a fresh client of server s (srv if nil), with hook
// h (if not nil) on that client. Generator, hook and client are closed, in that order, when t
// ends.
func rgGen(t testing.TB, s *redistest.Server, h *faultHook, opts ...dlock.Option) *dlock.Generator {
	t.Helper()
	if s == nil {
		s = srv
	}
	c := s.Client()
	if h != nil {
		c.AddHook(h)
	}
	g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithDefaultLease(time.Second)}, opts...)...)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Logf("Close: %v", err)
		}
		if h != nil {
			h.wait()
		}
		c.Close()
	})
	return g
}

// rawClient returns a plain client on srv, closed when t ends.
func rawClient(t testing.TB) *redis.Client {
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	return c
}

// lockKey is the Redis key of a lock: DLOCK_<type>_<target>.
func rgLockKey(typ, target string) string { return "DLOCK_" + typ + "_" + target }

// rgTarget is a lock target unique to the test (and round).
func rgTarget(t testing.TB, round int) string {
	return strings.ReplaceAll(t.Name(), "/", ".") + "." + fmt.Sprint(round)
}

func mustGen(t testing.TB, g *dlock.Generator, typ, target string, lease time.Duration) *dlock.DistributedReentrantLock {
	t.Helper()
	l, err := g.GenWithLease(typ, target, lease)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func rgBG() context.Context { return context.Background() }

// rgCtx returns a context with timeout d, cancelled when t ends.
func rgCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(rgBG(), d)
	t.Cleanup(cancel)
	return ctx
}

// rgWaitUntil polls cond until it holds or d passes; it reports whether it held.
func rgWaitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// becomesFree reports whether l (another generator's handle) gets the lock with TryLock within
// d; it lets it go again at once.
func becomesFree(t testing.TB, l *dlock.DistributedReentrantLock, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		owned, ok, err := l.TryLock(rgBG())
		if ok {
			if err := l.Unlock(owned); err != nil {
				t.Errorf("Unlock after the freedom probe: %v", err)
			}
			return true
		}
		if err != nil {
			t.Logf("freedom probe: TryLock: %v", err)
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holderOf describes what Redis holds under key, for failure messages.
func holderOf(c *redis.Client, key string) string {
	v, err := c.Get(rgBG(), key).Result()
	if err != nil {
		return fmt.Sprintf("(GET: %v)", err)
	}
	return fmt.Sprintf("%q with PTTL %v", v, c.PTTL(rgBG(), key).Val())
}

// recv waits for a value on ch for at most d.
func rgRecv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
	var zero T
	return zero
}

type rgLockResult struct {
	owned context.Context
	err   error
	at    time.Time
}

// rgLockAsync runs l.Lock(ctx) in a goroutine.
func rgLockAsync(l *dlock.DistributedReentrantLock, ctx context.Context) <-chan rgLockResult {
	ch := make(chan rgLockResult, 1)
	go func() {
		o, err := l.Lock(ctx)
		ch <- rgLockResult{o, err, time.Now()}
	}()
	return ch
}

// ---------------------------------------------------------------------------------------------
// faultHook: a go-redis hook that injects ambiguous replies into one lock-script call.

type faultMode int32

const (
	passThrough faultMode = iota
	// loseReply lets the command run on Redis, then returns a network timeout to the caller.
	loseReply
	// holdOnWire holds the command until the caller's context ends (at most holdCap), returns
	// the context's error (or a timeout) to the caller, and runs the command on Redis `late`
	// after that, as a request stuck in the network that arrives after the caller gave up.
	holdOnWire
	// slowReply holds the command until the caller's context ends (at most holdCap), waits
	// `late` more, then runs it on Redis and returns Redis's real reply to the caller: a
	// reply that comes after the caller's deadline.
	slowReply
)

// holdCap bounds how long holdOnWire waits for the caller's context to end.
const holdCap = 2 * time.Second

// injectedTimeout is a net.Error timeout.
type injectedTimeout struct{}

func (injectedTimeout) Error() string   { return "i/o timeout (injected by faultHook)" }
func (injectedTimeout) Timeout() bool   { return true }
func (injectedTimeout) Temporary() bool { return true }

// faultHook affects, once armed, the first EVALSHA/EVAL sent after arming whose first key
// (Args()[3]) is the armed key, then disarms. It also counts the script calls on the watched
// key, and can delay every command of its client.
type faultHook struct {
	late atomic.Int64 // nanoseconds; see holdOnWire and slowReply

	mode  atomic.Int32
	key   atomic.Pointer[string]
	delay atomic.Int64 // nanoseconds every command waits before it is sent

	seen    atomic.Int64  // EVALSHA/EVAL calls on key that got an answer
	fired   chan struct{} // one value per faulted command (after its fault)
	lateRun chan error    // the outcome of a held command's late run on Redis

	wg sync.WaitGroup
}

func newFaultHook() *faultHook {
	h := &faultHook{fired: make(chan struct{}, 16), lateRun: make(chan error, 16)}
	h.setLate(200 * time.Millisecond)
	return h
}

func (h *faultHook) setLate(d time.Duration) { h.late.Store(int64(d)) }

// watch sets the key whose script calls are counted (and faulted when armed).
func (h *faultHook) watch(key string) { h.key.Store(&key) }

// arm faults the next script call on key.
func (h *faultHook) arm(mode faultMode, key string) {
	h.watch(key)
	h.mode.Store(int32(mode))
}

func (h *faultHook) disarm() { h.mode.Store(int32(passThrough)) }

func (h *faultHook) setDelay(d time.Duration) { h.delay.Store(int64(d)) }

func (h *faultHook) wait() { h.wg.Wait() }

func (h *faultHook) scriptOnKey(cmd redis.Cmder) bool {
	k := h.key.Load()
	if k == nil {
		return false
	}
	args := cmd.Args()
	if len(args) < 4 {
		return false
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	return (name == "evalsha" || name == "eval") && fmt.Sprint(args[3]) == *k
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if d := h.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		return next(ctx, cmds)
	}
}

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d := h.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		if !h.scriptOnKey(cmd) {
			return next(ctx, cmd)
		}
		m := faultMode(h.mode.Load())
		if m == passThrough || !h.mode.CompareAndSwap(int32(m), int32(passThrough)) {
			err := next(ctx, cmd)
			h.seen.Add(1)
			return err
		}
		switch m {
		case loseReply:
			err := next(ctx, cmd)
			h.seen.Add(1)
			if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				h.mode.Store(int32(loseReply)) // nothing ran; go-redis retries with EVAL: fault that
				return err
			}
			h.fired <- struct{}{}
			return injectedTimeout{}
		case holdOnWire:
			h.fired <- struct{}{}
			select {
			case <-ctx.Done():
			case <-time.After(holdCap):
			}
			clone := redis.NewCmd(context.WithoutCancel(ctx), cmd.Args()...)
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				time.Sleep(time.Duration(h.late.Load()))
				err := next(context.WithoutCancel(ctx), clone)
				if err == nil {
					err = clone.Err()
				}
				h.lateRun <- err
			}()
			if err := ctx.Err(); err != nil {
				return err
			}
			return injectedTimeout{}
		case slowReply:
			h.fired <- struct{}{}
			select {
			case <-ctx.Done():
			case <-time.After(holdCap):
			}
			time.Sleep(time.Duration(h.late.Load()))
			err := next(context.WithoutCancel(ctx), cmd)
			h.lateRun <- err
			return err
		}
		return next(ctx, cmd)
	}
}

// awaitLateRun waits for the held command to have run on Redis and fails t if it did not
// really run (which would make the test vacuous).
func (h *faultHook) awaitLateRun(t testing.TB) {
	t.Helper()
	err := rgRecv(t, h.lateRun, 10*time.Second, "the held command's late run")
	if err != nil && (strings.HasPrefix(err.Error(), "NOSCRIPT") || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("setup: the held command did not run on Redis: %v", err)
	}
}

// awaitTry waits (at most 2 s) until the hook has seen an answered lock-script call on its key
// beyond since. It only orders events (a waiter has asked Redis once), so a miss is logged.
func awaitTry(t testing.TB, h *faultHook, since int64) {
	t.Helper()
	if !rgWaitUntil(2*time.Second, func() bool { return h.seen.Load() > since }) {
		t.Logf("no script call on the key seen from the waiting generator; going on")
	}
}

func (h *faultHook) mustHaveFired(t testing.TB) {
	t.Helper()
	select {
	case <-h.fired:
	case <-time.After(5 * time.Second):
		t.Fatal("setup: the fault hook was never hit (no lock script call on the key)")
	}
}

// ---------------------------------------------------------------------------------------------
// guard: a shared in-memory record of who holds which key, checking exclusion and tokens.

type rgStay struct {
	key, who string
	owned    context.Context
	tok      uint64
	hasTok   bool
}

type rgGuard struct {
	t      testing.TB
	mu     sync.Mutex
	in     map[string][]*rgStay
	max    map[string]uint64
	n      map[string]int
	errors int
}

func newRgGuard(t testing.TB) *rgGuard {
	return &rgGuard{t: t, in: map[string][]*rgStay{}, max: map[string]uint64{}, n: map[string]int{}}
}

func (g *rgGuard) fail(format string, args ...any) {
	g.errors++
	if g.errors <= 10 {
		g.t.Errorf(format, args...)
	}
}

// enter records that who acquired key with owned. It fails the test when another holder of
// key is inside with its owner context alive (neither released, lost nor closed), when the
// token equals a present holder's, and when the token is not larger than every earlier one.
func (g *rgGuard) enter(key, who string, l *dlock.DistributedReentrantLock, owned context.Context) *rgStay {
	s := &rgStay{key: key, who: who, owned: owned}
	s.tok, s.hasTok = l.FencingToken(owned)
	alive := owned.Err() == nil
	if alive && !s.hasTok {
		g.t.Errorf("%s: %s holds %s but FencingToken says it does not", key, who, key)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n[key]++
	for _, o := range g.in[key] {
		if o.owned.Err() == nil {
			g.fail("%s: %s acquired (token %d) while %s holds it (token %d) with a live owner context", key, who, s.tok, o.who, o.tok)
		}
		if s.hasTok && o.hasTok && o.tok == s.tok {
			g.fail("%s: %s and %s hold with the same fencing token %d", key, who, o.who, s.tok)
		}
	}
	if s.hasTok && alive && len(g.in[key]) == 0 && s.tok <= g.max[key] {
		g.fail("%s: %s got fencing token %d, not larger than an earlier %d", key, who, s.tok, g.max[key])
	}
	if s.tok > g.max[key] {
		g.max[key] = s.tok
	}
	g.in[key] = append(g.in[key], s)
	return s
}

func (g *rgGuard) leave(s *rgStay) {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := g.in[s.key]
	for i, o := range in {
		if o == s {
			g.in[s.key] = append(in[:i:i], in[i+1:]...)
			return
		}
	}
}

func (g *rgGuard) count(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[key]
}

// soakFor is how long the exclusion soaks run: 3 s, or DLOCK_SOAK (a Go duration).
func soakFor(t testing.TB) time.Duration {
	v := os.Getenv("DLOCK_SOAK")
	if v == "" {
		return 3 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Logf("DLOCK_SOAK=%q is not a Go duration; soaking 30s", v)
		return 30 * time.Second
	}
	return d
}

// ---------------------------------------------------------------------------------------------
// 1. Exclusion across generators while states are made and dropped constantly.

func TestRegressExclusionSoak(t *testing.T) {
	cases := []struct {
		name               string
		gens, perGen, keys int
	}{
		{"4gens-2goroutines-1key", 4, 2, 1},
		{"3gens-12goroutines-8keys", 3, 12, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const typ = "RGSOAK"
			gens := make([]*dlock.Generator, tc.gens)
			for i := range gens {
				gens[i] = rgGen(t, nil, nil)
			}
			keys := make([]string, tc.keys)
			for k := range keys {
				keys[k] = rgTarget(t, k)
			}
			gd := newRgGuard(t)
			end := time.Now().Add(soakFor(t))
			var wg sync.WaitGroup
			var locks, tries, gaveUp atomic.Int64
			for gi, g := range gens {
				for w := 0; w < tc.perGen; w++ {
					handles := make([]*dlock.DistributedReentrantLock, len(keys))
					for k, target := range keys {
						handles[k] = mustGen(t, g, typ, target, time.Second)
					}
					wg.Add(1)
					go func(who string) {
						defer wg.Done()
						for time.Now().Before(end) {
							k := rand.IntN(len(keys))
							l := handles[k]
							var owned context.Context
							cancel := func() {}
							if rand.IntN(4) == 0 {
								o, ok, err := l.TryLock(rgBG())
								if err != nil {
									t.Errorf("TryLock: %v", err)
									return
								}
								if !ok {
									continue
								}
								owned = o
								tries.Add(1)
							} else {
								var ctx context.Context
								ctx, cancel = context.WithTimeout(rgBG(), time.Duration(10+rand.IntN(21))*time.Millisecond)
								o, err := l.Lock(ctx)
								if err != nil {
									cancel()
									if !errors.Is(err, dlock.ErrNotObtained) {
										t.Errorf("Lock: %v", err)
										return
									}
									gaveUp.Add(1)
									continue
								}
								owned = o
								locks.Add(1)
							}
							s := gd.enter(keys[k], who, l, owned)
							if d := rand.IntN(2500); d > 500 {
								time.Sleep(time.Duration(d) * time.Microsecond)
							}
							gd.leave(s)
							if err := l.Unlock(owned); err != nil && !errors.Is(err, dlock.ErrLockLost) {
								t.Errorf("Unlock: %v", err)
							}
							cancel()
						}
					}(fmt.Sprintf("gen%d/g%d", gi, w))
				}
			}
			wg.Wait()
			t.Logf("%d Lock and %d TryLock acquisitions, %d timed-out Locks", locks.Load(), tries.Load(), gaveUp.Load())
			for _, k := range keys {
				if gd.count(k) == 0 {
					t.Errorf("key %s was never acquired", k)
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 2. TryLock never succeeds on a key another generator holds.

func TestRegressTryLockExclusive(t *testing.T) {
	t.Run("contended", testTryLockContended)
	t.Run("late-reply-and-new-attempt-of-one-generator", testLateReplyAndNewAttempt)
}

// A generator whose lock-script reply comes after its Lock gave up, and which meanwhile
// acquires the same key with a new Lock, must not hold twice (and so must not let the key go
// under its live holder). The first held attempt leaves whatever an attempt on a held key
// leaves; X's release may pass the key to it.
func testLateReplyAndNewAttempt(t *testing.T) {
	const typ = "RGTRY"
	const lease = 10 * time.Second
	target := rgTarget(t, 0)
	key := rgLockKey(typ, target)
	raw := rawClient(t)
	hA := newFaultHook()
	hA.setLate(50 * time.Millisecond)
	x, a, c := rgGen(t, nil, nil), rgGen(t, nil, hA), rgGen(t, nil, nil)
	lX, lA, lC := mustGen(t, x, typ, target, lease), mustGen(t, a, typ, target, lease), mustGen(t, c, typ, target, lease)

	oX, err := lX.Lock(rgCtx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A's attempt on the held key reaches Redis after A gave up.
	hA.arm(holdOnWire, key)
	ctx, cancel := context.WithTimeout(rgBG(), 20*time.Millisecond)
	if o, err := lA.Lock(ctx); err == nil {
		_ = lA.Unlock(o)
		t.Fatal("A got a key X holds")
	}
	cancel()
	hA.mustHaveFired(t)
	hA.awaitLateRun(t)
	if err := lX.Unlock(oX); err != nil {
		t.Fatal(err)
	}

	// A tries again; the reply comes after this Lock gave up too.
	hA.setLate(200 * time.Millisecond)
	hA.arm(slowReply, key)
	ctx, cancel = context.WithTimeout(rgBG(), 20*time.Millisecond)
	o, err := lA.Lock(ctx)
	cancel()
	hA.mustHaveFired(t)
	if err == nil {
		t.Logf("the slow Lock succeeded")
		_ = lA.Unlock(o)
	}
	// Meanwhile A locks again, and gets the key.
	owned, err := lA.Lock(rgCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tokA, _ := lA.FencingToken(owned)
	if err := rgRecv(t, hA.lateRun, 10*time.Second, "the slow lock script"); err != nil {
		t.Logf("the slow lock script: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // A acts on the slow reply
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		oC, ok, err := lC.TryLock(rgBG())
		if err != nil {
			t.Fatalf("C: TryLock: %v", err)
		}
		if ok {
			tokC, _ := lC.FencingToken(oC)
			if owned.Err() == nil {
				t.Errorf("C got the lock (token %d) while A holds it (token %d) with a live owner context; key holds %s",
					tokC, tokA, holderOf(raw, key))
			}
			_ = lC.Unlock(oC)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if owned.Err() == nil {
		if err := lA.Unlock(owned); err != nil {
			t.Errorf("A: Unlock: %v", err)
		}
	}
}

func testTryLockContended(t *testing.T) {
	const typ = "RGTRY"
	target := rgTarget(t, 0)
	key := rgLockKey(typ, target)
	a := rgGen(t, nil, nil)
	others := []*dlock.Generator{rgGen(t, nil, nil), rgGen(t, nil, nil)}
	lA := mustGen(t, a, typ, target, time.Second)
	gd := newRgGuard(t)

	contenders := func(stop <-chan struct{}, wg *sync.WaitGroup) {
		for i, g := range others {
			for w := 0; w < 3; w++ {
				wg.Add(1)
				go func(who string, l *dlock.DistributedReentrantLock) {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						var owned context.Context
						cancel := func() {}
						if rand.IntN(2) == 0 {
							o, ok, err := l.TryLock(rgBG())
							if err != nil {
								t.Errorf("TryLock: %v", err)
								return
							}
							if !ok {
								continue
							}
							owned = o
						} else {
							var ctx context.Context
							ctx, cancel = context.WithTimeout(rgBG(), time.Duration(1+rand.IntN(5))*time.Millisecond)
							o, err := l.Lock(ctx)
							if err != nil {
								cancel()
								continue
							}
							owned = o
						}
						s := gd.enter(key, who, l, owned)
						time.Sleep(200 * time.Microsecond)
						gd.leave(s)
						_ = l.Unlock(owned)
						cancel()
					}
				}(fmt.Sprintf("gen%d/g%d", i+1, w), mustGen(t, g, typ, target, time.Second))
			}
		}
	}

	// Phase 1: A holds all along; nobody else may get in.
	owned, err := lA.Lock(rgCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s := gd.enter(key, "A(holding)", lA, owned)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	contenders(stop, &wg)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if owned.Err() != nil {
		t.Fatalf("A's owner context ended while A held: %v", context.Cause(owned))
	}
	gd.leave(s)
	if err := lA.Unlock(owned); err != nil {
		t.Fatal(err)
	}

	// Phase 2: A comes and goes, the others try all the time.
	stop = make(chan struct{})
	contenders(stop, &wg)
	end := time.Now().Add(time.Second)
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(rgBG(), 50*time.Millisecond)
		o, err := lA.Lock(ctx)
		if err == nil {
			s := gd.enter(key, "A", lA, o)
			time.Sleep(2 * time.Millisecond)
			gd.leave(s)
			_ = lA.Unlock(o)
		}
		cancel()
	}
	close(stop)
	wg.Wait()
}

// ---------------------------------------------------------------------------------------------
// 3. Leases per acquisition; a holder with a live owner context is never overtaken.

// checkPTTL checks that key's remaining time to live is close to lease: in (lease/2, lease].
func checkPTTL(t testing.TB, c *redis.Client, key string, lease time.Duration, what string) {
	t.Helper()
	pttl, err := c.PTTL(rgBG(), key).Result()
	if err != nil {
		t.Errorf("%s: PTTL: %v", what, err)
		return
	}
	if pttl <= lease/2 || pttl > lease {
		t.Errorf("%s: key %s has PTTL %v right after the acquisition, want the handle's lease %v (in (%v, %v])",
			what, key, pttl, lease, lease/2, lease)
	}
}

// holdUnovertaken holds owned for 1.5 s while other (another generator's handle) tries Lock
// with a 2 s deadline: other must not get the lock before owned is unlocked.
func holdUnovertaken(t *testing.T, l *dlock.DistributedReentrantLock, owned context.Context, other *dlock.DistributedReentrantLock) {
	t.Helper()
	var releasing atomic.Bool
	octx, cancel := context.WithTimeout(rgBG(), 2*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		o, err := other.Lock(octx)
		if err == nil {
			if !releasing.Load() && owned.Err() == nil {
				err = fmt.Errorf("another generator took the lock while its holder (owner context alive) held it")
			}
			_ = other.Unlock(o)
		} else if errors.Is(err, dlock.ErrNotObtained) {
			err = nil
		}
		got <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	if owned.Err() != nil {
		t.Errorf("the holder's owner context ended while it held: %v", context.Cause(owned))
	}
	releasing.Store(true)
	if err := l.Unlock(owned); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if err := rgRecv(t, got, 10*time.Second, "the other generator's Lock"); err != nil {
		t.Error(err)
	}
}

func TestRegressLeasePerAcquisition(t *testing.T) {
	const typ = "RGLEASE"
	short, long := 300*time.Millisecond, 3*time.Second
	raw := rawClient(t)
	for _, tc := range []struct {
		name         string
		remote       bool
		first, other time.Duration
	}{
		{"local-handover-short-then-long", false, short, long},
		{"local-handover-long-then-short", false, long, short},
		{"across-generators-short-then-long", true, short, long},
		{"across-generators-long-then-short", true, long, short},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := rgTarget(t, 0)
			key := rgLockKey(typ, target)
			hB := newFaultHook()
			hB.watch(key)
			a := rgGen(t, nil, nil)
			b := rgGen(t, nil, hB)
			c := rgGen(t, nil, nil)
			lFirst := mustGen(t, a, typ, target, tc.first)
			waiterGen := a
			if tc.remote {
				waiterGen = b
			}
			lNext := mustGen(t, waiterGen, typ, target, tc.other)
			if lFirst.Config().Lease() != tc.first || lNext.Config().Lease() != tc.other {
				t.Fatalf("Config().Lease() = %v, %v; want %v, %v", lFirst.Config().Lease(), lNext.Config().Lease(), tc.first, tc.other)
			}
			if lFirst.Config().UniqueKey() != key {
				t.Fatalf("key %q, want %q", lFirst.Config().UniqueKey(), key)
			}

			o1, err := lFirst.Lock(rgCtx(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			checkPTTL(t, raw, key, tc.first, "first holder")
			got := rgLockAsync(lNext, rgCtx(t, 20*time.Second))
			if tc.remote {
				awaitTry(t, hB, 0)
			}
			time.Sleep(150 * time.Millisecond) // let the waiter queue up (and subscribe)
			if err := lFirst.Unlock(o1); err != nil {
				t.Fatal(err)
			}
			r := rgRecv(t, got, 20*time.Second, "the waiter's Lock")
			if r.err != nil {
				t.Fatal(r.err)
			}
			checkPTTL(t, raw, key, tc.other, "the waiter that took over")
			holdUnovertaken(t, lNext, r.owned, mustGen(t, c, typ, target, long))
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 4. Fencing tokens keep increasing across generators, hand-overs and failed unlocks.

func TestRegressFencingTokensIncrease(t *testing.T) {
	const typ = "RGFENCE"
	const lease = time.Second
	target := rgTarget(t, 0)
	key := rgLockKey(typ, target)
	hA, hB := newFaultHook(), newFaultHook()
	hA.setLate(300 * time.Millisecond)
	hB.watch(key)
	a := rgGen(t, nil, hA)
	b := rgGen(t, nil, hB)
	c := rgGen(t, nil, nil)
	lA, lB, lC := mustGen(t, a, typ, target, lease), mustGen(t, b, typ, target, lease), mustGen(t, c, typ, target, lease)
	gd := newRgGuard(t)
	ctx := rgCtx(t, 60*time.Second)

	lockEnter := func(l *dlock.DistributedReentrantLock, who string) (context.Context, *rgStay) {
		t.Helper()
		o, err := l.Lock(ctx)
		if err != nil {
			t.Fatalf("%s: Lock: %v", who, err)
		}
		return o, gd.enter(key, who, l, o)
	}
	unlockLeave := func(l *dlock.DistributedReentrantLock, o context.Context, s *rgStay, who string) {
		t.Helper()
		gd.leave(s)
		if err := l.Unlock(o); err != nil {
			t.Errorf("%s: Unlock: %v", who, err)
		}
	}
	// A waiter in a goroutine that enters the guard, holds briefly and lets go.
	waiter := func(l *dlock.DistributedReentrantLock, who string, wg *sync.WaitGroup) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := l.Lock(rgCtx(t, 20*time.Second))
			if err != nil {
				t.Errorf("%s: Lock: %v", who, err)
				return
			}
			s := gd.enter(key, who, l, o)
			time.Sleep(10 * time.Millisecond)
			gd.leave(s)
			if err := l.Unlock(o); err != nil {
				t.Errorf("%s: Unlock: %v", who, err)
			}
		}()
	}

	// Plain acquisitions by three generators.
	for _, p := range []struct {
		l   *dlock.DistributedReentrantLock
		who string
	}{{lA, "A"}, {lB, "B"}, {lC, "C"}, {lA, "A"}} {
		o, s := lockEnter(p.l, p.who)
		unlockLeave(p.l, o, s, p.who)
	}

	// Local hand-overs and a hand-off to another generator.
	{
		o, s := lockEnter(lA, "A")
		var wg sync.WaitGroup
		waiter(lA, "A-waiter1", &wg)
		waiter(lA, "A-waiter2", &wg)
		waiter(lB, "B-waiter", &wg)
		time.Sleep(150 * time.Millisecond)
		unlockLeave(lA, o, s, "A")
		wg.Wait()
	}

	// A's Unlock runs on Redis but its reply is lost; B waits in another generator.
	{
		o, s := lockEnter(lA, "A")
		var wg sync.WaitGroup
		seen := hB.seen.Load()
		waiter(lB, "B-after-lost-unlock-reply", &wg)
		awaitTry(t, hB, seen)
		time.Sleep(100 * time.Millisecond)
		gd.leave(s)
		hA.arm(loseReply, key)
		err := lA.Unlock(o)
		hA.disarm()
		hA.mustHaveFired(t)
		t.Logf("Unlock with a lost reply: %v", err)
		wg.Wait()
		o, s = lockEnter(lA, "A-after")
		unlockLeave(lA, o, s, "A-after")
	}

	// The same with a local waiter (a hand-over whose reply is lost).
	{
		o, s := lockEnter(lA, "A")
		var wg sync.WaitGroup
		waiter(lA, "A-waiter-after-lost-handover-reply", &wg)
		time.Sleep(150 * time.Millisecond)
		gd.leave(s)
		hA.arm(loseReply, key)
		err := lA.Unlock(o)
		hA.disarm()
		hA.mustHaveFired(t)
		t.Logf("Unlock (local waiter) with a lost reply: %v", err)
		wg.Wait()
		o, s = lockEnter(lB, "B-after")
		unlockLeave(lB, o, s, "B-after")
	}

	// A's Unlock is held on the wire until it times out, and reaches Redis later; B waits.
	{
		o, s := lockEnter(lA, "A")
		seen := hB.seen.Load()
		got := rgLockAsync(lB, rgCtx(t, 20*time.Second))
		awaitTry(t, hB, seen)
		gd.leave(s)
		hA.arm(holdOnWire, key)
		err := lA.Unlock(o)
		hA.disarm()
		hA.mustHaveFired(t)
		t.Logf("Unlock held on the wire: %v", err)
		r := rgRecv(t, got, 20*time.Second, "B's Lock")
		if r.err != nil {
			t.Fatalf("B: Lock: %v", r.err)
		}
		sB := gd.enter(key, "B-after-held-unlock", lB, r.owned)
		hA.awaitLateRun(t) // the old unlock reaches Redis while B holds
		time.Sleep(2 * lease)
		if r.owned.Err() != nil {
			t.Errorf("B's holding ended after A's late unlock reached Redis: %v", context.Cause(r.owned))
		}
		o2, ok, err := lC.TryLock(ctx)
		if ok {
			s2 := gd.enter(key, "C-while-B-holds", lC, o2)
			gd.leave(s2)
			_ = lC.Unlock(o2)
		} else if err != nil {
			t.Errorf("C: TryLock: %v", err)
		}
		unlockLeave(lB, r.owned, sB, "B-after-held-unlock")
	}

	// And everybody again, concurrently.
	var wg sync.WaitGroup
	for i, l := range []*dlock.DistributedReentrantLock{lA, lA, lB, lB, lC, lC} {
		wg.Add(1)
		go func(who string, l *dlock.DistributedReentrantLock) {
			defer wg.Done()
			for r := 0; r < 15; r++ {
				o, err := l.Lock(ctx)
				if err != nil {
					t.Errorf("%s: Lock: %v", who, err)
					return
				}
				s := gd.enter(key, who, l, o)
				time.Sleep(time.Millisecond)
				gd.leave(s)
				if err := l.Unlock(o); err != nil {
					t.Errorf("%s: Unlock: %v", who, err)
				}
			}
		}(fmt.Sprintf("final%d", i), l)
	}
	wg.Wait()
}

// ---------------------------------------------------------------------------------------------
// 5. No lease-long lockout after a failed TryLock, a Lock that gave up, or a Close while
// waiting.

func TestRegressNoLeaseLongLockout(t *testing.T) {
	const typ = "RGLOCKOUT"
	const lease = 20 * time.Second
	const rounds = 40
	raw := rawClient(t)
	for _, notes := range []struct {
		name  string
		aC, b bool // notifications of A and C, and of B
	}{
		{"notify", true, true},
		{"no-notify", false, false},
		{"B-no-notify", true, false},
	} {
		for _, scenario := range []string{"failed-TryLock", "gave-up-Lock", "closed-while-waiting"} {
			t.Run(notes.name+"/"+scenario, func(t *testing.T) {
				a := rgGen(t, nil, nil, dlock.WithNotifications(notes.aC))
				c := rgGen(t, nil, nil, dlock.WithNotifications(notes.aC))
				for r := 0; r < rounds; r++ {
					target := rgTarget(t, r)
					key := rgLockKey(typ, target)
					hB := newFaultHook()
					hB.watch(key)
					b := rgGen(t, nil, hB, dlock.WithNotifications(notes.b))
					lA, lB, lC := mustGen(t, a, typ, target, lease), mustGen(t, b, typ, target, lease), mustGen(t, c, typ, target, lease)
					owned, err := lA.Lock(rgCtx(t, 10*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					switch scenario {
					case "failed-TryLock":
						_, ok, err := lB.TryLock(rgBG())
						if ok || err != nil {
							t.Fatalf("round %d: TryLock on a key another generator holds: %v, %v", r, ok, err)
						}
						if r%2 == 1 {
							hB.setDelay(50 * time.Millisecond) // whatever B does next is slow to arrive
						}
					case "gave-up-Lock":
						ctx, cancel := context.WithTimeout(rgBG(), time.Duration(1+r%5)*time.Millisecond)
						_, err := lB.Lock(ctx)
						cancel()
						if err == nil {
							t.Fatalf("round %d: Lock got a key another generator holds", r)
						}
					case "closed-while-waiting":
						got := rgLockAsync(lB, rgCtx(t, 20*time.Second))
						awaitTry(t, hB, 0)
						time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
						if err := b.Close(rgBG()); err != nil {
							t.Logf("round %d: B.Close: %v", r, err)
						}
						if res := rgRecv(t, got, 10*time.Second, "B's waiting Lock after Close"); res.err == nil {
							t.Fatalf("round %d: B's Lock got a key another generator holds", r)
						}
					}
					if err := lA.Unlock(owned); err != nil {
						t.Fatalf("round %d: A: Unlock: %v", r, err)
					}
					if !becomesFree(t, lC, 3*time.Second) {
						t.Fatalf("round %d (%s): the lock stayed held after A's Unlock: key holds %s", r, scenario, holderOf(raw, key))
					}
					hB.setDelay(0)
					if err := b.Close(rgBG()); err != nil {
						t.Logf("round %d: B.Close: %v", r, err)
					}
				}
			})
		}
	}
}

// ---------------------------------------------------------------------------------------------
// 6. Ambiguous replies to the lock script leave nothing held.

func TestRegressAmbiguousReplyLeavesNothingHeld(t *testing.T) {
	const typ = "RGAMBIG"
	const lease = 20 * time.Second
	raw := rawClient(t)
	for _, tc := range []struct {
		name   string
		mode   faultMode
		try    bool
		aHolds bool // A holds the key while B's command is held, and lets it go after the late run
	}{
		{"lost-reply/TryLock", loseReply, true, false},
		{"lost-reply/Lock", loseReply, false, false},
		{"held-on-wire/Lock", holdOnWire, false, false},
		{"held-on-wire/TryLock", holdOnWire, true, false},
		{"held-on-wire/Lock-while-A-holds", holdOnWire, false, true},
		{"held-on-wire/TryLock-while-A-holds", holdOnWire, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := rgTarget(t, 0)
			key := rgLockKey(typ, target)
			hB := newFaultHook()
			a := rgGen(t, nil, nil)
			b := rgGen(t, nil, hB)
			c := rgGen(t, nil, nil)
			lA, lB, lC := mustGen(t, a, typ, target, lease), mustGen(t, b, typ, target, lease), mustGen(t, c, typ, target, lease)
			// Warm up: the scripts are loaded on the server, connections are made.
			warm := mustGen(t, b, typ, target+".warm", lease)
			if o, err := warm.Lock(rgCtx(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			} else if err := warm.Unlock(o); err != nil {
				t.Fatal(err)
			}
			var owned context.Context
			if tc.aHolds {
				var err error
				if owned, err = lA.Lock(rgCtx(t, 10*time.Second)); err != nil {
					t.Fatal(err)
				}
			}

			hB.arm(tc.mode, key)
			var ctx context.Context = rgBG()
			if tc.mode == holdOnWire {
				ctx = rgCtx(t, 20*time.Millisecond)
			} else if !tc.try {
				ctx = rgCtx(t, 1500*time.Millisecond)
			}
			if tc.try {
				o, ok, err := lB.TryLock(ctx)
				hB.disarm()
				hB.mustHaveFired(t)
				switch {
				case ok:
					t.Errorf("TryLock succeeded though the reply was lost")
					_ = lB.Unlock(o)
				case err == nil && tc.mode == loseReply:
					t.Errorf("TryLock returned (false, nil) though the reply was lost; want an error")
				}
			} else {
				o, err := lB.Lock(ctx)
				hB.disarm()
				hB.mustHaveFired(t)
				if err == nil {
					t.Logf("Lock succeeded despite the lost reply")
					if err := lB.Unlock(o); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				} else {
					t.Logf("Lock: %v", err)
				}
			}
			if tc.mode == holdOnWire {
				hB.awaitLateRun(t)
			}
			if tc.aHolds {
				if err := lA.Unlock(owned); err != nil {
					t.Fatalf("A: Unlock: %v", err)
				}
			}
			if !becomesFree(t, lC, 3*time.Second) {
				t.Fatalf("the lock stayed held after the ambiguous reply: key holds %s", holderOf(raw, key))
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 7. Loss is a fact of the holding.

// loseIt overwrites key so that the next renewal finds it taken.
func loseIt(t testing.TB, c *redis.Client, key string) {
	t.Helper()
	if err := c.Set(rgBG(), key, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(rgBG(), key) })
}

// checkLost checks every answer about a lost holding.
func checkLost(t testing.TB, l *dlock.DistributedReentrantLock, owned context.Context) {
	t.Helper()
	if owned.Err() == nil {
		t.Errorf("owner context not done after the loss")
	}
	if cause := context.Cause(owned); !errors.Is(cause, dlock.ErrLockLost) {
		t.Errorf("context.Cause(owned) = %v, want ErrLockLost", cause)
	}
	if n := l.HoldCount(owned); n != 0 {
		t.Errorf("HoldCount(owned) = %d after the loss, want 0", n)
	}
	if tok, ok := l.FencingToken(owned); ok {
		t.Errorf("FencingToken(owned) = %d, true after the loss, want ok == false", tok)
	}
	if o, err := l.Lock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Lock(owned) = %v after the loss, want ErrLockLost", err)
		if err == nil && o != nil {
			_ = l.Unlock(o)
		}
	}
	if o, ok, err := l.TryLock(owned); o != nil || ok || !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("TryLock(owned) = (%v, %v, %v) after the loss, want (nil, false, ErrLockLost)", o, ok, err)
		if ok {
			_ = l.Unlock(o)
		}
	}
	if n := l.HoldCount(owned); n != 0 {
		t.Errorf("HoldCount(owned) = %d after the loss and the calls above, want 0", n)
	}
	if err := l.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock(owned) = %v after the loss, want ErrLockLost", err)
	}
}

func TestRegressLossIsAFactOfTheHolding(t *testing.T) {
	const typ = "RGLOST"
	const lease = 300 * time.Millisecond
	raw := rawClient(t)

	t.Run("plain", func(t *testing.T) {
		g := rgGen(t, nil, nil)
		target := rgTarget(t, 0)
		l := mustGen(t, g, typ, target, lease)
		owned, err := l.Lock(rgCtx(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		loseIt(t, raw, rgLockKey(typ, target))
		rgRecv(t, owned.Done(), 5*time.Second, "the owner context (after the loss)")
		checkLost(t, l, owned)
		if v := raw.Get(rgBG(), rgLockKey(typ, target)).Val(); v != "someone-else" {
			t.Errorf("the new holder's key was touched: %q", v)
		}
	})

	t.Run("lock-deadline-passed-first", func(t *testing.T) {
		g := rgGen(t, nil, nil)
		target := rgTarget(t, 0)
		l := mustGen(t, g, typ, target, lease)
		ctx, cancel := context.WithTimeout(rgBG(), 200*time.Millisecond)
		defer cancel()
		owned, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		loseIt(t, raw, rgLockKey(typ, target))
		if !rgWaitUntil(5*time.Second, func() bool { return errors.Is(context.Cause(owned), dlock.ErrLockLost) }) {
			t.Errorf("the loss never showed in the owner context: cause %v", context.Cause(owned))
		}
		checkLost(t, l, owned)
	})

	t.Run("nested-other-key", func(t *testing.T) {
		g := rgGen(t, nil, nil)
		lX := mustGen(t, g, typ, rgTarget(t, 0), lease)
		lY := mustGen(t, g, typ, rgTarget(t, 1), 10*time.Second)
		outer, err := lX.Lock(rgCtx(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		inner, err := lY.Lock(outer)
		if err != nil {
			t.Fatal(err)
		}
		loseIt(t, raw, rgLockKey(typ, rgTarget(t, 0)))
		rgRecv(t, outer.Done(), 5*time.Second, "the outer owner context (after the loss)")
		if !errors.Is(context.Cause(outer), dlock.ErrLockLost) {
			t.Errorf("outer cause %v, want ErrLockLost", context.Cause(outer))
		}
		if inner.Err() != nil {
			t.Errorf("the inner lock's owner context ended with the outer loss: %v", context.Cause(inner))
		}
		if n := lY.HoldCount(inner); n != 1 {
			t.Errorf("HoldCount(inner) = %d, want 1", n)
		}
		if err := lY.Unlock(inner); err != nil {
			t.Errorf("Unlock(inner) = %v, want nil", err)
		}
		if inner.Err() == nil {
			t.Errorf("inner owner context not done after its Unlock")
		}
		if err := lX.Unlock(outer); !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("Unlock(outer) = %v, want ErrLockLost", err)
		}
	})
}

// ---------------------------------------------------------------------------------------------
// 8. The owner context does not inherit the wait context.

type rgCtxKey struct{}

func TestRegressOwnerContextOutlivesWaitContext(t *testing.T) {
	const typ = "RGOWNER"
	g := rgGen(t, nil, nil, dlock.WithDefaultLease(10*time.Second))
	l := mustGen(t, g, typ, rgTarget(t, 0), 10*time.Second)
	parent := context.WithValue(rgBG(), rgCtxKey{}, "v")

	for _, how := range []string{"Lock", "TryLock"} {
		ctx, cancel := context.WithTimeout(parent, 200*time.Millisecond)
		var owned context.Context
		var err error
		if how == "Lock" {
			owned, err = l.Lock(ctx)
		} else {
			var ok bool
			owned, ok, err = l.TryLock(ctx)
			if err == nil && !ok {
				err = errors.New("not obtained")
			}
		}
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", how, err)
		}
		cancel()
		if owned.Err() != nil {
			t.Errorf("%s: owner context ended with the wait context: %v", how, context.Cause(owned))
		}
		if n := l.HoldCount(owned); n != 1 {
			t.Errorf("%s: HoldCount = %d after the wait context ended, want 1", how, n)
		}
		if v := owned.Value(rgCtxKey{}); v != "v" {
			t.Errorf("%s: owner context lost the wait context's values: %v", how, v)
		}
		if err := l.Unlock(owned); err != nil {
			t.Errorf("%s: Unlock = %v, want nil", how, err)
		}
		select {
		case <-owned.Done():
		default:
			t.Errorf("%s: owner context not done after Unlock", how)
		}
	}

	owned, err := l.Lock(rgCtx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(rgBG()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-owned.Done():
		if !errors.Is(context.Cause(owned), dlock.ErrClosed) {
			t.Errorf("cause after Close = %v, want ErrClosed", context.Cause(owned))
		}
	default:
		t.Errorf("owner context not done after Close")
	}
}

// ---------------------------------------------------------------------------------------------
// 9. Handles with different leases in one generator: each acquisition has its handle's lease.

func TestRegressMixedLeasesOneGenerator(t *testing.T) {
	const typ = "RGMIXED"
	target := rgTarget(t, 0)
	key := rgLockKey(typ, target)
	raw := rawClient(t)
	g := rgGen(t, nil, nil)
	leases := []time.Duration{300 * time.Millisecond, 3 * time.Second}
	var bad atomic.Int64
	gd := newRgGuard(t)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		lease := leases[i%2]
		l := mustGen(t, g, typ, target, lease)
		if l.Config().Lease() != lease {
			t.Fatalf("Config().Lease() = %v, want %v", l.Config().Lease(), lease)
		}
		wg.Add(1)
		go func(who string) {
			defer wg.Done()
			for r := 0; r < 10; r++ {
				o, err := l.Lock(rgCtx(t, 20*time.Second))
				if err != nil {
					t.Errorf("%s: Lock: %v", who, err)
					return
				}
				s := gd.enter(key, who, l, o)
				pttl := raw.PTTL(rgBG(), key).Val()
				if pttl <= lease/2 || pttl > lease {
					if bad.Add(1) <= 5 {
						t.Errorf("%s (Config().Lease() = %v): key PTTL %v right after the acquisition", who, l.Config().Lease(), pttl)
					}
				}
				time.Sleep(5 * time.Millisecond)
				gd.leave(s)
				if err := l.Unlock(o); err != nil {
					t.Errorf("%s: Unlock: %v", who, err)
				}
			}
		}(fmt.Sprintf("g%d(%v)", i, lease))
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d of 40 acquisitions had another handle's lease", n)
	}
}

// ---------------------------------------------------------------------------------------------
// 10. No residue in Redis once everything is unlocked and closed.

func ownRedis(t *testing.T) *redistest.Server {
	t.Helper()
	s, err := redistest.StartReal()
	if err != nil {
		if redistest.Required() {
			t.Fatal(err)
		}
		t.Skipf("needs a redis-server of its own: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// keysOf lists the keys s holds (SCAN skips expired ones).
func keysOf(t testing.TB, c *redis.Client) []string {
	t.Helper()
	var all []string
	var cursor uint64
	for {
		keys, next, err := c.Scan(rgBG(), cursor, "*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, keys...)
		if cursor = next; cursor == 0 {
			return all
		}
	}
}

func expectEmpty(t *testing.T, c *redis.Client, within time.Duration) {
	t.Helper()
	var left []string
	if rgWaitUntil(within, func() bool { left = keysOf(t, c); return len(left) == 0 }) {
		return
	}
	show := left
	if len(show) > 5 {
		show = show[:5]
	}
	var desc []string
	for _, k := range show {
		desc = append(desc, fmt.Sprintf("%s (PTTL %v)", k, c.PTTL(rgBG(), k).Val()))
	}
	t.Fatalf("%d keys left %v after everything was closed, e.g. %s", len(left), within, strings.Join(desc, ", "))
}

func TestRegressNoResidue(t *testing.T) {
	const typ = "RGRESIDUE"
	t.Run("2000-targets", func(t *testing.T) {
		const lease = 200 * time.Millisecond
		s := ownRedis(t)
		raw := s.Client()
		defer raw.Close()
		gens := []*dlock.Generator{rgGen(t, s, nil), rgGen(t, s, nil)}
		var wg sync.WaitGroup
		var next atomic.Int64
		ctx := rgCtx(t, time.Minute)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(g *dlock.Generator) {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > 2000 {
						return
					}
					l, err := g.GenWithLease(typ, fmt.Sprintf("t%d", i), lease)
					if err != nil {
						t.Errorf("GenWithLease: %v", err)
						return
					}
					o, err := l.Lock(ctx)
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					if err := l.Unlock(o); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				}
			}(gens[w%2])
		}
		wg.Wait()
		for _, g := range gens {
			if err := g.Close(rgBG()); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		expectEmpty(t, raw, 5*lease+2*time.Second)
	})

	t.Run("after-waiters-gave-up", func(t *testing.T) {
		const lease = 500 * time.Millisecond
		s := ownRedis(t)
		raw := s.Client()
		defer raw.Close()
		a, b, c := rgGen(t, s, nil), rgGen(t, s, nil), rgGen(t, s, nil, dlock.WithNotifications(false))
		target := rgTarget(t, 0)
		lA, lB, lC := mustGen(t, a, typ, target, lease), mustGen(t, b, typ, target, lease), mustGen(t, c, typ, target, lease)
		owned, err := lA.Lock(rgCtx(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := lB.TryLock(rgBG()); ok {
			t.Fatal("TryLock got a held key")
		}
		for _, l := range []*dlock.DistributedReentrantLock{lB, lC} {
			ctx, cancel := context.WithTimeout(rgBG(), 300*time.Millisecond)
			if _, err := l.Lock(ctx); err == nil {
				t.Fatal("Lock got a held key")
			}
			cancel()
		}
		gotC := rgLockAsync(lC, rgCtx(t, 10*time.Second)) // still waiting when everything closes
		time.Sleep(100 * time.Millisecond)
		if err := lA.Unlock(owned); err != nil {
			t.Fatal(err)
		}
		if r := rgRecv(t, gotC, 10*time.Second, "C's Lock"); r.err == nil {
			_ = lC.Unlock(r.owned)
		}
		for _, g := range []*dlock.Generator{a, b, c} {
			if err := g.Close(rgBG()); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		expectEmpty(t, raw, 5*lease+2*time.Second)
	})
}
