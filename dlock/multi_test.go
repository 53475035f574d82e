package dlock_test

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// multiOf makes the MultiLock of g over the targets of type typ, each with lease.
func multiOf(t *testing.T, g *dlock.Generator, typ string, lease time.Duration, targets ...string) (*dlock.MultiLock, []*dlock.DistributedReentrantLock) {
	t.Helper()
	var locks []*dlock.DistributedReentrantLock
	for _, tg := range targets {
		locks = append(locks, mustGen(t, g, typ, tg, lease))
	}
	m, err := g.Multi(locks...)
	if err != nil {
		t.Fatal(err)
	}
	return m, locks
}

// A MultiLock holds all of its parts or none: with one part held elsewhere, TryLock reports it
// held and Lock gives up at its deadline, and neither keeps the parts it took on the way.
func TestMultiLockAllOrNone(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := target(t)
	m, parts := multiOf(t, ga, "MULTI", 5*time.Second, tg+"-a", tg+"-b", tg+"-c")
	other := mustGen(t, gb, "MULTI", tg+"-b", 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	ob, err := other.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	freeOfA := func(what string) {
		t.Helper()
		for _, l := range []*dlock.DistributedReentrantLock{parts[0], parts[2]} {
			st, err := l.State(ctx)
			if err != nil || st.Held() {
				t.Fatalf("%s: %s is %+v, %v; want it free", what, l.Config().UniqueKey(), st, err)
			}
		}
	}
	if o, ok, err := m.TryLock(ctx); err != nil || ok || o != nil {
		t.Fatalf("TryLock with a part held elsewhere = %v, %v, %v; want nil, false, nil", o, ok, err)
	}
	freeOfA("after TryLock")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if o, err := m.Lock(short); !errors.Is(err, dlock.ErrNotObtained) || o != nil {
		t.Fatalf("Lock with a part held elsewhere = %v, %v; want ErrNotObtained", o, err)
	}
	freeOfA("after Lock gave up")
	if err := other.Unlock(ob); err != nil {
		t.Fatal(err)
	}
	// (Lock, not TryLock: the release may have granted the part to the attempt A's Lock gave
	// up, and A passes such a grant on in the background.)
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock once every part is free = %v", err)
	}
	for _, l := range parts {
		if l.HoldCount(o) != 1 {
			t.Fatalf("%s: hold count %d, want 1", l.Config().UniqueKey(), l.HoldCount(o))
		}
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// MultiLocks over the same keys named in opposite orders, in two processes, never deadlock
// (every MultiLock takes its parts in one global order), and never overlap on a key.
func TestMultiLockOppositeOrdersNeverDeadlock(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := target(t)
	ma, _ := multiOf(t, ga, "MULTI", 5*time.Second, tg+"-x", tg+"-y")
	mb, _ := multiOf(t, gb, "MULTI", 5*time.Second, tg+"-y", tg+"-x")
	ctx := ctxT(t, 60*time.Second)
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for _, m := range []*dlock.MultiLock{ma, ma, mb, mb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				err := m.Do(ctx, func(context.Context) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a MultiLock: %v (deadlocked?)", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlaps", n)
	}
}

// A MultiLock taken under a context that holds one of its parts already (the part is
// re-entered) does not end when that wait context ends: its Owner ends when a holding ends, or
// at its own last Unlock.
func TestMultiLockOwnerOutlivesItsWaitContext(t *testing.T) {
	g, _ := newGen(t)
	m, parts := multiOf(t, g, "MULTI", 5*time.Second, target(t)+"-a", target(t)+"-b")
	outer, err := parts[0].Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithTimeout(outer, 10*time.Second)
	owned, err := m.Lock(wait)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-owned.Done():
		t.Fatalf("the MultiLock's Owner ended with its wait context (cause %v), holding %d and %d",
			context.Cause(owned), parts[0].HoldCount(owned), parts[1].HoldCount(owned))
	case <-time.After(50 * time.Millisecond):
	}
	if err := m.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	if owned.Err() == nil {
		t.Fatal("the MultiLock's Owner did not end at its Unlock")
	}
	if parts[0].HoldCount(outer) != 1 {
		t.Fatalf("the outer holding has %d holds, want 1", parts[0].HoldCount(outer))
	}
	if err := outer.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// The global order is by key, whatever part of a key is named: a read-write lock's read side
// and its write side come at the same place among other keys, even a key whose name sorts
// between the sides' kinds ("a|read" < "a|s" < "a|write").
func TestMultiLockOrderIsByKey(t *testing.T) {
	g, _ := newGen(t)
	rw, err := g.GenRW("MULTI", "a")
	if err != nil {
		t.Fatal(err)
	}
	mu := mustGen(t, g, "MULTI", "a|s", 5*time.Second)
	keys := func(m *dlock.MultiLock) []string {
		var out []string
		for _, p := range m.Parts() {
			out = append(out, p.Config().UniqueKey())
		}
		return out
	}
	reading, _ := g.MultiOf(rw.ReadSide(), mu)
	writing, _ := g.MultiOf(mu, rw.WriteSide())
	if r, w := keys(reading), keys(writing); !slices.Equal(r, w) {
		t.Fatalf("the read side's MultiLock takes %v, the write side's %v: two orders can deadlock", r, w)
	}
	// ... and the order is the one of the versions that sorted by key|kind, for every key
	// that is not another followed by "|": processes of both versions agree during an upgrade.
	// ... and the order is the one of the versions that sorted by key|kind, for every
	// MultiLock of mutexes: processes of both versions agree during an upgrade.
	for _, pair := range [][2]string{{"job", "job-2"}, {"order|7", "order|7|item|3"}} {
		a, b := mustGen(t, g, "MULTI", pair[0], 5*time.Second), mustGen(t, g, "MULTI", pair[1], 5*time.Second)
		both, _ := g.Multi(a, b)
		before := []string{a.Config().UniqueKey(), b.Config().UniqueKey()}
		slices.SortFunc(before, func(x, y string) int { return cmp.Compare(x+"|mutex", y+"|mutex") })
		if got := keys(both); !slices.Equal(got, before) {
			t.Fatalf("parts taken in the order %v; the version before takes %v", got, before)
		}
	}
}

// The Owner of a MultiLock ends when any part's holding ends: here an operator removes one
// part, and the Owner's cause matches ErrLockLost. Its Unlock then reports the loss and
// releases the other parts.
func TestMultiLockOwnerEndsWhenAPartIsLost(t *testing.T) {
	g, _ := newGen(t)
	tg := target(t)
	m, parts := multiOf(t, g, "MULTI", 5*time.Second, tg+"-a", tg+"-b")
	ctx := ctxT(t, 30*time.Second)
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := parts[1].State(ctx)
	if err != nil || !st.Mine {
		t.Fatalf("State of a part: %+v, %v", st, err)
	}
	if removed, err := parts[1].ForceRelease(ctx, st.Holder); err != nil || !removed {
		t.Fatalf("ForceRelease: %v, %v", removed, err)
	}
	select {
	case <-o.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the Owner did not end when a part was lost")
	}
	if cause := context.Cause(o); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock after the loss: %v; want the loss reported", err)
	}
	if st, err := parts[0].State(ctx); err != nil || st.Held() {
		t.Fatalf("the other part after Unlock: %+v, %v; want it free", st, err)
	}
}

// A part taken first and lost while Lock waits for a later one (here an operator removes it;
// in a failover, its renewals find it gone or the master down until its lease ran out) is
// not given back as held: Lock returns only once it holds every part, so it takes the lost
// part again, and the Owner it returns has not ended. It returned an Owner already ended by
// the loss, whose FencingTokens said not held, in a newcomer's trial on Sentinel (kill -9 of
// the master while a MultiLock waited).
func TestMultiLockDoesNotReturnAPartLostWhileItWaited(t *testing.T) {
	rec := &recorder{}
	ga, _ := newGen(t, dlock.WithObserver(rec))
	gb, _ := newGen(t)
	tg := target(t)
	m, parts := multiOf(t, ga, "MULTI", 5*time.Second, tg+"-a", tg+"-b")
	other := mustGen(t, gb, "MULTI", tg+"-b", 5*time.Second)
	ctx := ctxT(t, 60*time.Second)
	ob, err := other.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		o   *dlock.Owner
		err error
	}
	got := make(chan result, 1)
	go func() {
		o, err := m.Lock(ctx)
		got <- result{o, err}
	}()
	var holder string
	waitFor(t, func() bool { // A's Lock holds part a and waits for b
		st, err := parts[0].State(ctx)
		holder = st.Holder
		return err == nil && st.Mine
	})
	if removed, err := parts[0].ForceRelease(ctx, holder); err != nil || !removed {
		t.Fatalf("ForceRelease of part a = %v, %v", removed, err)
	}
	waitFor(t, func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.lost) > 0 })
	if err := other.Unlock(ob); err != nil {
		t.Fatal(err)
	}
	r := recv(t, got, "the MultiLock's Lock")
	if r.err != nil {
		t.Fatalf("Lock = %v", r.err)
	}
	defer func() { _ = m.Unlock(r.o) }()
	time.Sleep(50 * time.Millisecond) // (the Owner ends in a goroutine of its own)
	if r.o.Err() != nil {
		t.Fatalf("Lock returned an Owner that had ended: %v", context.Cause(r.o))
	}
	if toks, ok := m.FencingTokens(r.o); !ok || len(toks) != 2 {
		t.Fatalf("FencingTokens of the Owner Lock returned = %v, %v; want both parts", toks, ok)
	}
	for _, l := range parts {
		if st, err := l.State(ctx); err != nil || !st.Mine {
			t.Fatalf("%s after Lock: %+v, %v; want it held by this Generator", l.Config().UniqueKey(), st, err)
		}
	}
}

// Each part has its own fencing token, which FencingTokens reports by key; re-entry takes one
// more hold of every part, and the Owner ends with the last Unlock; one more is ErrNotHeld.
func TestMultiLockTokensAndReentry(t *testing.T) {
	g, _ := newGen(t)
	tg := target(t)
	m, parts := multiOf(t, g, "MULTI", 5*time.Second, tg+"-b", tg+"-a")
	ctx := ctxT(t, 30*time.Second)
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tokens, ok := m.FencingTokens(o)
	if !ok || len(tokens) != 2 {
		t.Fatalf("FencingTokens = %v, %v", tokens, ok)
	}
	for _, l := range parts {
		tok, held := l.FencingToken(o)
		if !held || tokens[l.Config().UniqueKey()] != tok || tok == 0 {
			t.Fatalf("%s: token %d (held %v), FencingTokens says %d", l.Config().UniqueKey(), tok, held, tokens[l.Config().UniqueKey()])
		}
	}
	if got := m.Parts(); got[0].Config().UniqueKey() > got[1].Config().UniqueKey() {
		t.Fatalf("parts not in the global order: %v, %v", got[0].Config().UniqueKey(), got[1].Config().UniqueKey())
	}
	again, err := m.Lock(o)
	if err != nil || again != o {
		t.Fatalf("re-entry: %v, %v; want the same Owner", again, err)
	}
	for _, l := range parts {
		if l.HoldCount(o) != 2 {
			t.Fatalf("%s: hold count %d after re-entry, want 2", l.Config().UniqueKey(), l.HoldCount(o))
		}
	}
	if err := m.Unlock(o); err != nil || o.Err() != nil {
		t.Fatalf("first Unlock: %v (owner %v); want it still held", err, o.Err())
	}
	if err := m.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if o.Err() == nil {
		t.Fatal("the Owner lives on after the last Unlock")
	}
	if err := m.Unlock(o); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("one Unlock too many: %v, want ErrNotHeld", err)
	}
}

// Bad input gets a clear error: no lock, a nil lock, a lock of another Generator, a zero
// MultiLock, a nil context, an Owner of something else.
func TestMultiLockZeroValues(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	la := mustGen(t, ga, "MULTI", target(t), time.Second)
	lb := mustGen(t, gb, "MULTI", target(t), time.Second)
	for name, locks := range map[string][]*dlock.DistributedReentrantLock{
		"none": nil, "nil lock": {la, nil}, "zero lock": {{}}, "another Generator's": {la, lb},
	} {
		if m, err := ga.Multi(locks...); !errors.Is(err, dlock.ErrInvalidConfig) || m != nil {
			t.Errorf("Multi(%s) = %v, %v; want ErrInvalidConfig", name, m, err)
		}
	}
	var zero dlock.MultiLock
	if _, err := zero.Lock(context.Background()); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("zero MultiLock's Lock: %v", err)
	}
	if _, ok := zero.FencingTokens(context.Background()); ok {
		t.Error("a zero MultiLock's FencingTokens reports every part held")
	}
	var nilm *dlock.MultiLock
	if _, ok, err := nilm.TryLock(context.Background()); ok || !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("nil MultiLock's TryLock: %v, %v", ok, err)
	}
	m, err := ga.Multi(la)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock(nil); !errors.Is(err, dlock.ErrInvalidConfig) { //nolint:staticcheck // a nil context on purpose
		t.Errorf("Lock(nil): %v", err)
	}
	if err := m.Unlock(nil); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock(nil): %v", err)
	}
	o, err := la.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(o); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of a plain lock's Owner: %v", err)
	}
	if _, ok := m.FencingTokens(context.Background()); ok {
		t.Error("FencingTokens of nothing held reports ok")
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A MultiLock over a mutex, a read-write lock's write side and a semaphore's permits holds
// all three or none, and lets them all go; one lock named as two kinds, or one semaphore with
// two counts, is refused. Ports Redisson's RedissonMultiLockTest.test and testLockUnlock, and
// Curator's TestInterProcessMultiMutex.testSomeLocksFailToLock.
func TestMultiLockOfEveryKind(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu := mustGen(t, ga, "MULTI", tg+"-m", 5*time.Second)
	rw, _ := ga.GenRW("MULTI", tg+"-rw")
	sem, _ := ga.GenSemaphore("MULTI", tg+"-sem", 1)
	m, err := ga.MultiOf(sem.Permits(1), rw.WriteSide(), mu)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ga.MultiOf(rw.ReadSide(), rw.WriteSide()); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("both sides of one lock: %v", err)
	}
	if _, err := ga.MultiOf(sem.Permits(1), sem.Permits(2)); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("one semaphore with two counts: %v", err)
	}
	if _, err := ga.MultiOf(sem.Permits(1), sem.Permits(1)); err != nil {
		t.Fatalf("one semaphore named twice with one count: %v", err)
	}
	if _, err := ga.MultiOf(sem.Permits(2)); err != nil {
		t.Fatal(err) // (refused when taken)
	}
	// the semaphore's one permit is out elsewhere: TryLock takes nothing
	semB, _ := gb.GenSemaphore("MULTI", tg+"-sem", 1)
	held, err := semB.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok, err := m.TryLock(ctx); ok || err != nil || o != nil {
		t.Fatalf("TryLock with a permit out = %v %v %v", o, ok, err)
	}
	rwB, _ := gb.GenRW("MULTI", tg+"-rw")
	if r, ok, _ := rwB.TryRLock(ctx); !ok {
		t.Fatal("the write side was kept after TryLock failed")
	} else {
		_ = r.Unlock()
	}
	muB := mustGen(t, gb, "MULTI", tg+"-m", 5*time.Second)
	if o, ok, _ := muB.TryLock(ctx); !ok {
		t.Fatal("the mutex was kept after TryLock failed")
	} else {
		_ = o.Unlock()
	}
	_ = held.Unlock()
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if toks, ok := m.FencingTokens(o); !ok || len(toks) != 3 {
		t.Fatalf("tokens %v %v", toks, ok)
	}
	if _, ok, _ := rwB.TryRLock(ctx); ok {
		t.Fatal("a reader beside the MultiLock's write side")
	}
	if _, ok, _ := semB.TryAcquire(ctx, 1); ok {
		t.Fatal("a permit beside the MultiLock's")
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	if o.Err() == nil {
		t.Fatal("the Owner lives after its last Unlock")
	}
	r, ok, err := rwB.TryRLock(ctx)
	if !ok || err != nil {
		t.Fatalf("reader after the MultiLock's release: %v %v", ok, err)
	}
	_ = r.Unlock()
	p, ok, err := semB.TryAcquire(ctx, 1)
	if !ok || err != nil {
		t.Fatalf("permit after the MultiLock's release: %v %v", ok, err)
	}
	_ = p.Unlock()
}

// A MultiLock taken with a context that holds one of its parts already re-enters that part
// and takes the others: its Owner carries every part, whichever of them was re-entered, so
// FencingTokens reports them all and Unlock lets go of the parts it took (a semaphore's
// permits re-entered after a mutex taken fresh lost the mutex's ownership).
func TestMultiLockReentersAPartTheCallerHolds(t *testing.T) {
	g, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu := mustGen(t, g, "MULTI", tg+"-a", 5*time.Second)
	sem := semOf(t, g, tg+"-z", 1)
	rw, _ := g.GenRW("MULTI", tg+"-y")
	for name, part := range map[string]dlock.Part{"semaphore": sem.Permits(1), "read side": rw.ReadSide(), "write side": rw.WriteSide()} {
		held, err := part.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := g.MultiOf(part, mu) // (the mutex's key sorts first)
		if err != nil {
			t.Fatal(err)
		}
		o, err := m.Lock(held)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if toks, ok := m.FencingTokens(o); !ok || len(toks) != 2 {
			t.Fatalf("%s: FencingTokens = %v, %v; want both parts", name, toks, ok)
		}
		if err := o.Unlock(); err != nil {
			t.Fatalf("%s: Unlock: %v", name, err)
		}
		if st, err := mu.State(ctx); err != nil || st.Held() {
			t.Fatalf("%s: the mutex after the MultiLock's Unlock: %+v, %v; want it free", name, st, err)
		}
		if err := held.Unlock(); err != nil {
			t.Fatalf("%s: the caller's own hold: %v", name, err)
		}
	}
}

// MultiOf refuses a nil or zero part of any kind with ErrInvalidConfig, as Multi does, and
// never panics (a nil *DistributedReentrantLock as a Part did).
func TestMultiOfZeroParts(t *testing.T) {
	g, _ := newGen(t)
	var nl *dlock.DistributedReentrantLock
	var nrw *dlock.RWLock
	var nsem *dlock.Semaphore
	for name, p := range map[string]dlock.Part{
		"nil mutex": nl, "zero mutex": &dlock.DistributedReentrantLock{}, "nil read-write lock's side": nrw.WriteSide(),
		"zero read-write lock's side": (&dlock.RWLock{}).ReadSide(), "nil semaphore's permits": nsem.Permits(1), "nil Part": nil,
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("MultiOf(%s) panics: %v", name, r)
				}
			}()
			if m, err := g.MultiOf(p); !errors.Is(err, dlock.ErrInvalidConfig) || m != nil {
				t.Errorf("MultiOf(%s) = %v, %v; want ErrInvalidConfig", name, m, err)
			}
		}()
	}
}

// Unlock of a MultiLock over every kind whose permit was lost (an operator removed it) says
// ErrLockLost and frees the other parts. Ports Redisson's RedissonMultiLockTest.testLockUnlock
// and Curator's TestInterProcessMultiMutex.testSomeReleasesFail.
func TestMultiLockOfEveryKindLetsGoOfTheRestWhenAPartIsLost(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu, sem, rw := everyKind(t, ga, tg, 1)
	m, err := ga.MultiOf(mu, sem.Permits(1), rw.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	muB, semB, rwB := everyKind(t, gb, tg, 1)
	free := func(when string) {
		if o, ok, err := muB.TryLock(ctx); !ok || err != nil {
			t.Fatalf("%s: the mutex is not free: %v %v", when, ok, err)
		} else {
			_ = o.Unlock()
		}
		if o, ok, err := semB.TryAcquire(ctx, 1); !ok || err != nil {
			t.Fatalf("%s: the permit is not free: %v %v", when, ok, err)
		} else {
			_ = o.Unlock()
		}
		if o, ok, err := rwB.TryLock(ctx); !ok || err != nil {
			t.Fatalf("%s: the write side is not free: %v %v", when, ok, err)
		} else {
			_ = o.Unlock()
		}
	}
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sem.State(ctx)
	if err != nil || len(st.Holds) != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	if ok, err := semB.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
		t.Fatalf("ForceRelease = %v %v", ok, err)
	}
	if err := m.Unlock(o); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock with a part lost = %v, want ErrLockLost", err)
	}
	free("after an Unlock with a part lost")
}

// Two MultiLocks of read sides and permits hold together; one with a write side waits for
// them, keeping no permit while it does; a key named three times is taken once. Ports
// RedissonMultiLock over any RLock (read locks included) and Curator's InterProcessMultiLock
// over any InterProcessLock (one read-write lock's two sides are refused: in
// TestMultiLockOfEveryKind).
func TestMultiLocksOfReadSidesHoldTogether(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	gc, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	reading := func(g *dlock.Generator) *dlock.MultiLock {
		_, sem, rw := everyKind(t, g, tg, 3)
		m, err := g.MultiOf(rw.ReadSide(), sem.Permits(1))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb := reading(ga), reading(gb)
	oa, err := ma.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ob, ok, err := mb.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("a second reading MultiLock = %v %v %v", ob, ok, err)
	}
	_, semC, rwC := everyKind(t, gc, tg, 3)
	mc, err := gc.MultiOf(semC.Permits(1), rwC.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	if o, ok, err := mc.TryLock(ctx); ok || err != nil {
		t.Fatalf("a writing MultiLock beside readers = %v %v %v", o, ok, err)
	}
	if st, err := semC.State(ctx); err != nil || len(st.Holds) != 2 {
		t.Fatalf("the semaphore after the writing MultiLock failed: %+v %v (it kept a permit?)", st, err)
	}
	wrote := make(chan error, 1)
	go func() { wrote <- mc.Do(ctx, func(context.Context) error { return nil }) }()
	waitFor(t, func() bool { st, err := rwC.State(ctx); return err == nil && len(st.Waiting) == 1 })
	_ = ma.Unlock(oa)
	_ = mb.Unlock(ob)
	if err := recv(t, wrote, "the writing MultiLock"); err != nil {
		t.Fatal(err)
	}
	// duplicates
	mu := mustGen(t, ga, "PMA", tg, 5*time.Second)
	twice, err := ga.Multi(mu, mu, mustGen(t, ga, "PMA", tg, 5*time.Second))
	if err != nil || len(twice.Parts()) != 1 {
		t.Fatalf("one key named three times: %v, parts %v", err, twice)
	}
	o, err := twice.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := mu.HoldCount(o); n != 1 {
		t.Fatalf("HoldCount of a key named three times = %d, want 1", n)
	}
	if err := twice.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if o2, ok, _ := mustGen(t, gb, "PMA", tg, 5*time.Second).TryLock(ctx); !ok {
		t.Fatal("a key named three times is still held after one Unlock")
	} else {
		_ = o2.Unlock()
	}
}

// One process far from Redis (40 ms to it, 5 ms back, then the reverse halfway) contends with
// two near ones under continuous contention, for every kind — a read-write lock's writers, a
// semaphore's acquirers, a MultiLock of mutexes, and one of a write side and permits: every
// process is served within a bounded wait (a Lock that waits 15 s fails the test), the far one
// gets a share, and nothing is left held or in line once everyone stops.
func TestFarProcessServedByEveryKind(t *testing.T) {
	type taker struct {
		lock   func(ctx context.Context) (*dlock.Owner, error)
		unlock func(o *dlock.Owner) error
	}
	kinds := []struct {
		name  string
		turns bool // the line gives each process its turn
		make  func(t *testing.T, g *dlock.Generator, tg string) taker
	}{
		{"Mutex", true, func(t *testing.T, g *dlock.Generator, tg string) taker {
			l, _ := g.Gen("MUTEX", tg)
			return taker{l.Lock, func(o *dlock.Owner) error { return o.Unlock() }}
		}},
		{"RWWriters", false, func(t *testing.T, g *dlock.Generator, tg string) taker {
			l := rwOf(t, g, tg)
			return taker{l.Lock, func(o *dlock.Owner) error { return o.Unlock() }}
		}},
		{"Semaphore", false, func(t *testing.T, g *dlock.Generator, tg string) taker {
			s, err := g.GenSemaphore("SEM", tg, 2)
			if err != nil {
				t.Fatal(err)
			}
			return taker{func(ctx context.Context) (*dlock.Owner, error) { return s.Acquire(ctx, 1) }, func(o *dlock.Owner) error { return o.Unlock() }}
		}},
		{"MultiMutexes", true, func(t *testing.T, g *dlock.Generator, tg string) taker {
			a, _ := g.Gen("MULTI", tg+"-a")
			b, _ := g.Gen("MULTI", tg+"-b")
			m, err := g.Multi(b, a)
			if err != nil {
				t.Fatal(err)
			}
			return taker{m.Lock, m.Unlock}
		}},
		{"MultiOfKinds", false, func(t *testing.T, g *dlock.Generator, tg string) taker {
			l := rwOf(t, g, tg+"-rw")
			s, err := g.GenSemaphore("SEM", tg+"-sem", 1)
			if err != nil {
				t.Fatal(err)
			}
			m, err := g.MultiOf(s.Permits(1), l.WriteSide())
			if err != nil {
				t.Fatal(err)
			}
			return taker{m.Lock, m.Unlock}
		}},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			const lease, procs, goroutines = time.Second, 3, 2
			far, p := farGen(t, lease)
			p.SetLatencies(40*time.Millisecond, 5*time.Millisecond)
			gens := []*dlock.Generator{far}
			var admin *redis.Client
			for i := 1; i < procs; i++ {
				g, c := newGen(t, dlock.WithDefaultLease(lease))
				gens, admin = append(gens, g), c
			}
			tg := target(t)
			var per, maxWait [procs]atomic.Int64
			var turnMu sync.Mutex
			var turns [procs]int64 // acquisitions that followed another process's
			last := -1
			var wg sync.WaitGroup
			dur := 4 * time.Second
			end := time.Now().Add(dur)
			time.AfterFunc(dur/2, func() { p.SetLatencies(5*time.Millisecond, 40*time.Millisecond) })
			for i, g := range gens {
				tk := kind.make(t, g, tg)
				for j := 0; j < goroutines; j++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(end) {
							ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
							start := time.Now()
							o, err := tk.lock(ctx)
							cancel()
							if err != nil {
								t.Errorf("process %d: Lock: %v", i, err)
								return
							}
							if w := int64(time.Since(start)); w > maxWait[i].Load() {
								maxWait[i].Store(w)
							}
							per[i].Add(1)
							turnMu.Lock()
							if last != i {
								turns[i]++
								last = i
							}
							turnMu.Unlock()
							time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
							if err := tk.unlock(o); err != nil {
								t.Errorf("process %d: Unlock: %v", i, err)
							}
						}
					}()
				}
			}
			wg.Wait()
			var shares [procs]int64
			var waits [procs]time.Duration
			var total int64
			for i := range per {
				shares[i], waits[i] = per[i].Load(), time.Duration(maxWait[i].Load()).Round(time.Millisecond)
				total += shares[i]
			}
			t.Logf("shares %v, turns %v (the first far from Redis), longest waits %v", shares, turns, waits)
			if shares[0] == 0 {
				t.Errorf("the far process got none of %d acquisitions", total)
			}
			// A mutex's process goes back in line as it yields (renew.lua stands it in line
			// with its next attempt), so the line gives each process its turn. A read-write
			// lock's or semaphore's holding goes back by a release, and the process stands in
			// line again only with its next take, a round trip later: meanwhile the near
			// processes take turns among themselves (about 10 to 1 here), which is logged,
			// not checked.
			if kind.turns && turns[0] < min(turns[1], turns[2])/3 {
				t.Errorf("the far process got %d of %d acquisitions, in %d turns of %v", shares[0], total, turns[0], turns)
			}
			// Nothing left held or in line.
			waitFor(t, func() bool {
				keys, _ := admin.Keys(context.Background(), "*"+tg+"*").Result()
				for _, k := range keys {
					typ := admin.Type(context.Background(), k).Val()
					switch {
					case strings.HasSuffix(k, ":shared:held"), strings.HasSuffix(k, ":shared:line"), strings.HasSuffix(k, ":line"):
						if n := admin.Exists(context.Background(), k).Val(); n != 0 {
							return false
						}
					case strings.HasPrefix(k, "DLOCK_") && typ == "string":
						return false // a mutex key
					}
				}
				return true
			})
		})
	}
}

// A MultiLock never returns with less than half of a part's lease left, as a mutex's Lock
// does not: a part taken first and held while the MultiLock waits for a later one (here 70 %
// of the lease, before its renewal at 75 %) is renewed before Lock returns. PTTL of every
// part's key, read as Lock returns, is at least half the lease.
func TestMultiLockNeverReturnsAPartNearlyExpired(t *testing.T) {
	const lease = time.Second
	g, admin := newGen(t, dlock.WithDefaultLease(lease))
	other, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := target(t)
	a, _ := g.Gen("HALFMULTI", tg+"-a")
	b, _ := g.Gen("HALFMULTI", tg+"-b")
	m, err := g.Multi(a, b)
	if err != nil {
		t.Fatal(err)
	}
	ob, _ := other.Gen("HALFMULTI", tg+"-b")
	ctx := ctxT(t, 20*time.Second)
	held, err := ob.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *dlock.Owner, 1)
	go func() {
		o, err := m.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	waitFor(t, func() bool { st, err := a.State(ctx); return err == nil && st.Held() && st.Mine })
	time.Sleep(lease * 7 / 10)
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	o := recv(t, done, "the MultiLock")
	took := time.Now()
	for _, l := range []*dlock.DistributedReentrantLock{a, b} {
		if left := admin.PTTL(ctx, key(l)).Val() + time.Since(took); left < lease/2 {
			t.Errorf("MultiLock returned with %v of %s's %v lease left", left, key(l), lease)
		}
	}
	if o != nil {
		_ = m.Unlock(o)
	}
}
