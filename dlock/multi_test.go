package dlock_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
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
// part, and the Owner's cause matches ErrLockLost. A re-entry through a context made from the
// Owner (a request's deadline over it), ended with it, reports the loss, as the Owner's own
// does (the parts still held would refuse it as ended before the lost part is reached). Its
// Unlock then reports the loss and releases the other parts.
func TestMultiLockOwnerEndsWhenAPartIsLost(t *testing.T) {
	g, _ := newGen(t)
	tg := target(t)
	m, parts := multiOf(t, g, "MULTI", 5*time.Second, tg+"-a", tg+"-b")
	ctx := ctxT(t, 30*time.Second)
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	derived, cancel := context.WithTimeout(o, time.Hour)
	defer cancel()
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
	for name, c := range map[string]context.Context{"the Owner": o, "a context made from it": derived} {
		if o2, err := m.Lock(c); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("re-entry through %s after a part's loss = %v, %v; want ErrLockLost", name, o2, err)
		}
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock after the loss: %v; want the loss reported", err)
	}
	// (a lost holding stays so for its owner, as each part's does: every further Unlock says so)
	if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("a second Unlock after the loss: %v; want the loss reported again", err)
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
	waitFor(t, func() bool { // A's Lock holds part a (as an owner, not only in Redis) and waits for b
		st, err := parts[0].State(ctx)
		holder = st.Holder
		believed, _, ok := ga.Belief(key(parts[0]))
		return err == nil && st.Mine && ok && believed == holder
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
// MultiLock, a nil context, an Owner of something else; a nil *Owner is a context that owns
// nothing, as for every lock.
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
	var none *dlock.Owner // a context that is never done and owns nothing
	if o, ok, err := m.TryLock(none); !ok || err != nil {
		t.Errorf("TryLock with a nil *Owner as its context = %v, %v", ok, err)
	} else if err := m.Unlock(o); err != nil {
		t.Error(err)
	}
	if o, err := m.Lock(none); err != nil {
		t.Errorf("Lock with a nil *Owner as its context: %v", err)
	} else if err := m.Unlock(o); err != nil {
		t.Error(err)
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
	for _, n := range []int{0, -1} {
		if m, err := ga.MultiOf(mu, sem.Permits(n)); !errors.Is(err, dlock.ErrInvalidConfig) || m != nil {
			t.Fatalf("MultiOf of %d permits = %v, %v; want ErrInvalidConfig", n, m, err)
		}
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

// A MultiLock over a read-write lock's write side, taken with an owner of only its read side,
// is refused as the lock's own Lock refuses the upgrade: ErrUpgrade from Lock and TryLock, at
// once rather than a wait for itself (the test's bound turns one into a failure), with the part
// taken before it let go and the read kept. An owner of the write side taken through a
// MultiLock downgrades as the lock's own does.
func TestMultiLockOverAWriteSideRefusesAnUpgrade(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu := mustGen(t, ga, "A", tg, 5*time.Second) // (its key sorts before the read-write lock's)
	l := rwOf(t, ga, tg)
	m, err := ga.MultiOf(l.WriteSide(), mu)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bounded, cancel := context.WithTimeout(r, 15*time.Second)
	defer cancel()
	if o, err := m.Lock(bounded); !errors.Is(err, dlock.ErrUpgrade) || o != nil {
		t.Fatalf("MultiLock.Lock with an owner of the read side = %v %v, want ErrUpgrade", o, err)
	}
	if o, ok, err := m.TryLock(r); !errors.Is(err, dlock.ErrUpgrade) || ok || o != nil {
		t.Fatalf("MultiLock.TryLock with an owner of the read side = %v %v %v, want ErrUpgrade", o, ok, err)
	}
	if o, ok, err := mustGen(t, gb, "A", tg, 5*time.Second).TryLock(ctx); !ok || err != nil {
		t.Fatalf("another process's TryLock of the mutex the refused MultiLock took first = %v %v %v", o, ok, err)
	} else if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	if r.Err() != nil || l.HoldCount(r) != 1 {
		t.Fatalf("the reader after the refused upgrade: %v, HoldCount %d", context.Cause(r), l.HoldCount(r))
	}
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
	w, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := l.RLock(w)
	if err != nil {
		t.Fatalf("downgrade through the MultiLock's Owner: %v", err)
	}
	if err := m.Unlock(w); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := rwOf(t, gb, tg).TryLock(ctx); ok || err != nil {
		t.Fatalf("another process's writer beside the downgraded read = %v %v %v", o, ok, err)
	}
	if rd.Err() != nil {
		t.Fatalf("the downgraded read ended with the MultiLock: %v", context.Cause(rd))
	}
	if err := rd.Unlock(); err != nil {
		t.Fatal(err)
	}
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
		// Unlocked again, the Owner holds nothing: ErrNotHeld, and the caller's own hold stays
		// (the Owner's values carry it still).
		if err := m.Unlock(o); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("%s: a second Unlock = %v, want ErrNotHeld", name, err)
		}
		if held.Err() != nil {
			t.Fatalf("%s: a second Unlock of the MultiLock's Owner let go of the caller's own hold: %v", name, context.Cause(held))
		}
		if err := held.Unlock(); err != nil {
			t.Fatalf("%s: the caller's own hold: %v", name, err)
		}
	}
}

// A re-entry of a MultiLock that races its Owner's final Unlock either comes first (one more
// hold, released by one more Unlock) or finds the Owner ended and takes nothing: it never
// returns an Owner that has ended while it holds the parts, and no part is left held.
func TestMultiLockReentryRacingTheFinalUnlock(t *testing.T) {
	g, _ := newGen(t)
	tg := uniqueTarget(t)
	a, b := mustGen(t, g, "MULTIRACE", tg+"-a", time.Second), mustGen(t, g, "MULTIRACE", tg+"-b", time.Second)
	m, err := g.Multi(a, b)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 60*time.Second)
	for i := range 300 {
		o, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var lerr, uerr error
		wg.Add(2)
		go func() { defer wg.Done(); uerr = m.Unlock(o) }()
		go func() { defer wg.Done(); _, lerr = m.Lock(o) }()
		wg.Wait()
		if uerr != nil {
			t.Fatalf("round %d: Unlock = %v", i, uerr)
		}
		if lerr == nil {
			if o.Err() != nil {
				t.Fatalf("round %d: the re-entry returned an Owner that had ended (%v), holding the parts %d/%d", i, context.Cause(o), a.HoldCount(o), b.HoldCount(o))
			}
			if err := m.Unlock(o); err != nil {
				t.Fatalf("round %d: the final Unlock = %v", i, err)
			}
		}
		if a.HoldCount(o) != 0 || b.HoldCount(o) != 0 {
			t.Fatalf("round %d: parts left held", i)
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
			stalls := watchStalls(t)
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
							if err := tk.unlock(o); err != nil && !stalls.excused(t, err, start, lease, fmt.Sprintf("process %d: Unlock", i)) {
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
	b, _ := g.Gen("ZMULTI", tg+"-b") // (after the first part in the global order)
	m, err := g.Multi(a, b)
	if err != nil {
		t.Fatal(err)
	}
	ob, _ := other.Gen("ZMULTI", tg+"-b")
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

// A MultiLock taken through an Owner of its first part, whose lease Extend shortened to less
// than half the lease of the handle it was taken with, re-enters that part and takes the
// rest: it does not go round for ever renewing the part (it judged "half its lease" by the
// handle's lease while renewing with the tenure's, so the renewal never sufficed, and Lock let
// go of the other parts and took them again — about a thousand times a second — until its
// context ended).
func TestMultiLockReentersAPartWhoseLeaseExtendShortened(t *testing.T) {
	t.Parallel() // (mostly sleeping, on keys of its own)
	g, _ := newGen(t)
	tg := target(t)
	// (Leases a loaded machine's renewals keep up with: the handle's 3 s, shortened to 1 s.)
	a := mustGen(t, g, "MULTI", tg+"-a", 3*time.Second)
	b := mustGen(t, g, "MULTI", tg+"-b", 3*time.Second)
	m, err := g.Multi(b, a)
	if err != nil {
		t.Fatal(err)
	}
	oa, err := a.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = oa.Unlock() }()
	if err := a.Extend(oa, time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3200 * time.Millisecond) // (the 3 s lease runs down: renewals now give 1 s)
	if oa.Err() != nil {
		t.Fatalf("the holding ended: %v", context.Cause(oa))
	}
	ctx, cancel := context.WithTimeout(oa, 5*time.Second)
	defer cancel()
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("MultiLock through the caller's Owner of a part = %v", err)
	}
	if n := a.HoldCount(o); n != 2 {
		t.Errorf("the re-entered part holds %d, want 2", n)
	}
	if err := m.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if n := a.HoldCount(oa); n != 1 {
		t.Errorf("the caller's part holds %d after the MultiLock's Unlock, want 1", n)
	}
}

// Three processes take MultiLocks over three keys in a cycle — A {x, y}, B {y, z}, C {z, x}
// — of mixed kinds (x a mutex, y a read-write lock's write side, z a semaphore's one permit),
// two goroutines each: every Lock completes (none waits for the others in a cycle), no key
// ever has two owners, and nothing is left held once all are done.
func TestMultiLocksInACycleOfMixedKindsComplete(t *testing.T) {
	tg := uniqueTarget(t)
	type proc struct {
		m *dlock.MultiLock
		k [2]int // the keys it takes (0 x, 1 y, 2 z)
	}
	var procs []proc
	var admin *redis.Client
	for i, ks := range [][2]int{{0, 1}, {1, 2}, {2, 0}} {
		g, c := newGen(t)
		admin = c
		x := mustGen(t, g, "CYC", tg+"-x", 2*time.Second)
		y, err := g.GenRW("CYC", tg+"-y")
		if err != nil {
			t.Fatal(err)
		}
		z, err := g.GenSemaphore("CYC", tg+"-z", 1)
		if err != nil {
			t.Fatal(err)
		}
		parts := []dlock.Part{x, y.WriteSide(), z.Permits(1)}
		// named in the cycle's order, so that a taker in that order would deadlock
		m, err := g.MultiOf(parts[ks[0]], parts[ks[1]])
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
		procs = append(procs, proc{m, ks})
	}
	var inside [3]atomic.Int32
	var overlaps atomic.Int32
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for _, p := range procs {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					err := p.m.Do(ctx, func(context.Context) error {
						for _, k := range p.k {
							if inside[k].Add(1) != 1 {
								overlaps.Add(1)
							}
						}
						time.Sleep(time.Millisecond)
						for _, k := range p.k {
							inside[k].Add(-1)
						}
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a MultiLock: %v (deadlocked?)", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlaps", n)
	}
	waitFor(t, func() bool {
		keys, _ := admin.Keys(context.Background(), "*"+tg+"*").Result()
		for _, k := range keys {
			switch {
			case strings.HasSuffix(k, ":shared:held"), strings.HasSuffix(k, ":shared:line"), strings.HasSuffix(k, ":line"):
				return false
			case strings.HasPrefix(k, "DLOCK_") && admin.Type(context.Background(), k).Val() == "string":
				return false
			}
		}
		return true
	})
}

// A MultiLock whose later part fails for good — a semaphore asked for more permits than it
// has, or for none, a read-write lock whose name a semaphore uses, a key holding a list
// (WRONGTYPE), the Generator closed while it waits — returns that part's error at once and
// holds none of the parts it took before: each is free in Redis (no key, no place in line)
// as Lock returns, and another process takes it at once.
func TestMultiLockLetsGoOfTheEarlierPartsWhenALaterOneFails(t *testing.T) {
	tg := uniqueTarget(t)
	gb, _ := newGen(t)
	cases := []struct {
		name string
		// later returns the failing part (its key sorts after "-a"), and what Lock's error must match
		later func(t *testing.T, g *dlock.Generator, c *redis.Client) (dlock.Part, func(err error) bool)
		close bool // the Generator is closed while Lock waits for the later part
	}{
		{"more permits than the semaphore has", func(t *testing.T, g *dlock.Generator, _ *redis.Client) (dlock.Part, func(error) bool) {
			s, err := g.GenSemaphore("PF", tg+"-b-sem", 1)
			if err != nil {
				t.Fatal(err)
			}
			return s.Permits(2), func(err error) bool { return errors.Is(err, dlock.ErrInvalidConfig) }
		}, false},
		{"a read-write lock named as a semaphore in use", func(t *testing.T, g *dlock.Generator, _ *redis.Client) (dlock.Part, func(error) bool) {
			s, err := gb.GenSemaphore("PF", tg+"-b-kind", 1)
			if err != nil {
				t.Fatal(err)
			}
			held, err := s.Acquire(ctxT(t, 10*time.Second), 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = held.Unlock() })
			rw, err := g.GenRW("PF", tg+"-b-kind")
			if err != nil {
				t.Fatal(err)
			}
			return rw.WriteSide(), func(err error) bool { return errors.Is(err, dlock.ErrInvalidConfig) }
		}, false},
		{"WRONGTYPE", func(t *testing.T, g *dlock.Generator, c *redis.Client) (dlock.Part, func(error) bool) {
			rw, err := g.GenRW("PF", tg+"-b-list")
			if err != nil {
				t.Fatal(err)
			}
			k := "{" + rw.Config().UniqueKey() + "}:shared:kind"
			if err := c.RPush(context.Background(), k, "not a lock").Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rawClient(t).Del(context.Background(), k) })
			return rw.ReadSide(), func(err error) bool {
				return errors.Is(err, dlock.ErrNotObtained) && strings.Contains(err.Error(), "WRONGTYPE")
			}
		}, false},
		{"Close while it waits", func(t *testing.T, g *dlock.Generator, _ *redis.Client) (dlock.Part, func(error) bool) {
			l := mustGen(t, gb, "PF", tg+"-b-close", 5*time.Second)
			held, err := l.Lock(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = held.Unlock() })
			return mustGen(t, g, "PF", tg+"-b-close", 5*time.Second), func(err error) bool { return errors.Is(err, dlock.ErrClosed) }
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newGen(t)
			mu := mustGen(t, g, "PF", tg+"-a", 5*time.Second) // (this and the write side are taken first)
			rw, err := g.GenRW("PF", tg+"-a-rw")
			if err != nil {
				t.Fatal(err)
			}
			later, want := tc.later(t, g, c)
			m, err := g.MultiOf(later, rw.WriteSide(), mu)
			if err != nil {
				t.Fatal(err)
			}
			if ps := m.Parts(); ps[2].Config().UniqueKey() != later.Config().UniqueKey() {
				t.Fatalf("the failing part is not taken last: %v", ps)
			}
			ctx := ctxT(t, 10*time.Second)
			got := make(chan error, 1)
			go func() {
				o, err := m.Lock(ctx)
				if o != nil {
					t.Errorf("Lock returned an Owner %v", o)
				}
				got <- err
			}()
			if tc.close {
				waitFor(t, func() bool { st, err := mu.State(ctx); return err == nil && st.Mine })
				if err := g.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			err = recv(t, got, "the MultiLock's Lock")
			t.Logf("Lock = %v", err)
			if !want(err) {
				t.Fatalf("Lock = %v", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("Lock waited for its context on a failure no wait mends: %v", err)
			}
			// the parts taken before are free in Redis now, not a lease later
			if n := c.Exists(context.Background(), key(mu)).Val(); n != 0 {
				t.Errorf("the mutex taken first is still in Redis (PTTL %v)", c.PTTL(context.Background(), key(mu)).Val())
			}
			rwKeys, _ := c.Keys(context.Background(), "{"+rw.Config().UniqueKey()+"}*").Result()
			for _, k := range rwKeys {
				if strings.HasSuffix(k, ":held") || strings.HasSuffix(k, ":line") {
					t.Errorf("the write side taken first left %s in Redis", k)
				}
			}
			muB := mustGen(t, gb, "PF", tg+"-a", 5*time.Second)
			if o, ok, err := muB.TryLock(ctx); !ok || err != nil {
				t.Errorf("the mutex is not free for another process: %v %v", ok, err)
			} else {
				_ = o.Unlock()
			}
			rwB, _ := gb.GenRW("PF", tg+"-a-rw")
			if o, ok, err := rwB.TryLock(ctx); !ok || err != nil {
				t.Errorf("the write side is not free for another process: %v %v", ok, err)
			} else {
				_ = o.Unlock()
			}
		})
	}
}

// An operator in another process removes one part of a held MultiLock (each kind in turn):
// re-entry with its Owner reports the loss and leaves the other parts' hold counts as they
// were; Unlock reports the loss (ErrLockLost), frees the other parts in Redis, and ends the
// Owner; a second Unlock and a Lock with the ended Owner return errors (the loss, or
// ErrNotHeld), never nil, and nothing panics.
func TestMultiLockAfterAnOperatorRemovedAPart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		lost   string
		atOnce bool
	}{{"mutex", false}, {"permits", false}, {"write side", false}, {"mutex", true}, {"permits", true}, {"write side", true}} {
		lost := c.lost
		name := lost
		if c.atOnce {
			name += ", Unlock before the holder hears"
		}
		t.Run(name, func(t *testing.T) {
			ga, _ := newGen(t)
			gb, _ := newGen(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			mu, sem, rw := everyKind(t, ga, tg, 1)
			m, err := ga.MultiOf(rw.WriteSide(), sem.Permits(1), mu)
			if err != nil {
				t.Fatal(err)
			}
			o, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			muB, semB, rwB := everyKind(t, gb, tg, 1)
			switch lost {
			case "mutex":
				st, err := muB.State(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := muB.ForceRelease(ctx, st.Holder); !ok || err != nil {
					t.Fatalf("ForceRelease = %v %v", ok, err)
				}
			case "permits":
				st, err := semB.State(ctx)
				if err != nil || len(st.Holds) != 1 {
					t.Fatalf("%+v %v", st, err)
				}
				if ok, err := semB.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
					t.Fatalf("ForceRelease = %v %v", ok, err)
				}
			case "write side":
				st, err := rwB.State(ctx)
				if err != nil || len(st.Holds) != 1 {
					t.Fatalf("%+v %v", st, err)
				}
				if ok, err := rwB.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
					t.Fatalf("ForceRelease = %v %v", ok, err)
				}
			}
			if c.atOnce {
				if err := m.Unlock(o); !errors.Is(err, dlock.ErrLockLost) {
					t.Fatalf("Unlock = %v, want ErrLockLost", err)
				}
				if err := m.Unlock(o); err == nil || !(errors.Is(err, dlock.ErrLockLost) || errors.Is(err, dlock.ErrNotHeld)) {
					t.Fatalf("a second Unlock = %v, want the loss or ErrNotHeld", err)
				}
				if o.Err() == nil {
					t.Fatal("the Owner lives on after its Unlock")
				}
				for _, ok := range []func() (bool, error){
					func() (bool, error) { o2, ok, err := muB.TryLock(ctx); _ = o2.Unlock(); return ok, err },
					func() (bool, error) { o2, ok, err := semB.TryAcquire(ctx, 1); _ = o2.Unlock(); return ok, err },
					func() (bool, error) { o2, ok, err := rwB.TryLock(ctx); _ = o2.Unlock(); return ok, err },
				} {
					if ok, err := ok(); !ok || err != nil {
						t.Fatalf("a part is not free after Unlock: %v %v", ok, err)
					}
				}
				return
			}
			// The holder learns of it at its next renewal or release; make sure it learned
			// before re-entry by waiting for the Owner to end (a renewal within 3/4 of 5 s).
			select {
			case <-o.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the Owner did not end after a part was removed")
			}
			if cause := context.Cause(o); !errors.Is(cause, dlock.ErrLockLost) {
				t.Fatalf("the Owner's cause %v, want ErrLockLost", cause)
			}
			counts := func() []int {
				return []int{mu.HoldCount(o), sem.HoldCount(o), rw.HoldCount(o)}
			}
			before := counts()
			if again, err := m.Lock(o); err == nil || !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("re-entry after the loss = %v, %v; want ErrLockLost", again, err)
			}
			if after := counts(); !slices.Equal(before, after) {
				t.Fatalf("hold counts %v before the failed re-entry, %v after", before, after)
			}
			if err := m.Unlock(o); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock = %v, want ErrLockLost", err)
			}
			if err := m.Unlock(o); err == nil || !(errors.Is(err, dlock.ErrLockLost) || errors.Is(err, dlock.ErrNotHeld)) {
				t.Fatalf("a second Unlock = %v, want the loss or ErrNotHeld", err)
			}
			if o2, err := m.Lock(o); err == nil {
				_ = m.Unlock(o2)
				t.Fatal("Lock with an ended Owner returned nil")
			}
			if o2, ok, err := muB.TryLock(ctx); !ok || err != nil {
				t.Fatalf("the mutex is not free: %v %v", ok, err)
			} else {
				_ = o2.Unlock()
			}
			if o2, ok, err := semB.TryAcquire(ctx, 1); !ok || err != nil {
				t.Fatalf("the permit is not free: %v %v", ok, err)
			} else {
				_ = o2.Unlock()
			}
			if o2, ok, err := rwB.TryLock(ctx); !ok || err != nil {
				t.Fatalf("the write side is not free: %v %v", ok, err)
			} else {
				_ = o2.Unlock()
			}
		})
	}
}

// A MultiLock's Owner that the program drops without Unlock is collected and every part is
// released (nothing the library keeps refers to it or to its parts' Owners), for every kind
// of part, the re-entered one included.
func TestDroppedMultiLockOwnerIsReleased(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu, sem, rw := everyKind(t, ga, tg, 1)
	m, err := ga.MultiOf(mu, sem.Permits(1), rw.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	func() {
		if _, err := m.Lock(ctx); err != nil { // the Owner is dropped at once
			t.Fatal(err)
		}
	}()
	muB, semB, rwB := everyKind(t, gb, tg, 1)
	for name, try := range map[string]func() (*dlock.Owner, bool, error){
		"mutex":      func() (*dlock.Owner, bool, error) { return muB.TryLock(ctx) },
		"permits":    func() (*dlock.Owner, bool, error) { return semB.TryAcquire(ctx, 1) },
		"write side": func() (*dlock.Owner, bool, error) { return rwB.TryLock(ctx) },
	} {
		waitFor(t, func() bool {
			runtime.GC()
			o, ok, err := try()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if ok {
				_ = o.Unlock()
			}
			return ok
		})
	}
}

// Under a faulty network (writes delivered twice, at once or late; replies lost; requests
// kept on the wire; requests overtaken), three processes take MultiLocks over three keys in a
// cycle, of mixed kinds (a mutex, a read-write lock's write side, a semaphore's one permit):
// no key has two live owners at once (a span counts if its Owner was still live at its end),
// every Lock completes within 10 leases, fails only with documented errors, and nothing is
// left without a time to live.
func TestMultiLocksUnderDuplicatedLateAndLostWrites(t *testing.T) {
	const lease = 300 * time.Millisecond
	tg := uniqueTarget(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var hooks []*chaosHook
	var ms []*dlock.MultiLock
	var ks [][2]int
	for i, pair := range [][2]int{{0, 1}, {1, 2}, {2, 0}} {
		h := newChaosHook(lease, 10, seed+uint64(i))
		hooks = append(hooks, h)
		g := chaosGen(t, h)
		x := mustGen(t, g, "CHM", tg+"-x", lease)
		y, _ := g.GenRW("CHM", tg+"-y")
		z, _ := g.GenSemaphore("CHM", tg+"-z", 1)
		parts := []dlock.Part{x, y.WriteSide(), z.Permits(1)}
		m, err := g.MultiOf(parts[pair[0]], parts[pair[1]])
		if err != nil {
			t.Fatal(err)
		}
		ms, ks = append(ms, m), append(ks, pair)
	}
	defer func() {
		for i, h := range hooks {
			t.Logf("process %d: %v", i, h)
		}
	}()
	ctx := ctxT(t, time.Minute)
	var ledgers [3]spanLedger
	var bad, notObtained, acquired atomic.Int64
	fail := func(format string, args ...any) {
		if bad.Add(1) <= 10 {
			t.Errorf(format, args...)
		}
	}
	stopAt := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for p, m := range ms {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(stopAt); i++ {
					actx, cancel := context.WithTimeout(ctx, 10*lease)
					o, err := m.Lock(actx)
					cancel()
					if err != nil {
						if errors.Is(err, dlock.ErrNotObtained) {
							notObtained.Add(1)
						}
						if !documentedErr(err) || errors.Is(err, dlock.ErrInvalidConfig) {
							fail("Lock: %v", err)
						}
						continue
					}
					acquired.Add(1)
					from := time.Now()
					time.Sleep(time.Duration(1+i%5) * time.Millisecond)
					if i%4 == 0 {
						if _, err := m.Lock(o); err == nil {
							if err := m.Unlock(o); err != nil && !documentedErr(err) {
								fail("Unlock of a re-entry: %v", err)
							}
						} else if !documentedErr(err) {
							fail("re-entry: %v", err)
						}
					}
					to := time.Now()
					live := o.Err() == nil
					if err := m.Unlock(o); err != nil && !documentedErr(err) {
						fail("Unlock: %v", err)
					}
					if live {
						for _, k := range ks[p] {
							ledgers[k].add(heldSpan{from, to, 1})
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	for k := range ledgers {
		for _, s := range ledgers[k].spans {
			if out := ledgers[k].outAt(s.from); out > 1 {
				fail("key %d: %d owners at %v", k, out, s.from)
			}
		}
	}
	t.Logf("%d acquisitions, %d gave up", acquired.Load(), notObtained.Load())
	if n := notObtained.Load(); n > 0 {
		t.Errorf("%d of %d Locks waited 10 leases in vain", n, n+acquired.Load())
	}
	for _, h := range hooks {
		h.quiet()
	}
	c := rawClient(t)
	for _, k := range keysWithoutTTL(t, c) {
		if strings.Contains(k, tg) {
			t.Errorf("a key without a time to live: %s", k)
		}
	}
}

// In two processes, goroutines take MultiLocks over a mutex, a read-write lock's write side
// and a semaphore's one permit, beside goroutines that take each lock alone (readers of the
// read-write lock among them): no key ever has a writer beside another owner, and every Lock
// completes.
func TestMultiLocksBesideSinglePartLocks(t *testing.T) {
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	const (
		kx = iota
		ky
		kz
	)
	var writers [3]atomic.Int32
	var readers atomic.Int32
	var overlaps atomic.Int32
	enter := func(k int) {
		if writers[k].Add(1) != 1 || (k == ky && readers.Load() != 0) {
			overlaps.Add(1)
		}
	}
	leave := func(k int) { writers[k].Add(-1) }
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	run := func(rounds int, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 2 {
		g, _ := newGen(t)
		x := mustGen(t, g, "MIX", tg+"-x", 2*time.Second)
		y, _ := g.GenRW("MIX", tg+"-y")
		z, _ := g.GenSemaphore("MIX", tg+"-z", 1)
		m, err := g.MultiOf(z.Permits(1), y.WriteSide(), x)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			run(10, func() error {
				return m.Do(ctx, func(context.Context) error {
					enter(kx)
					enter(ky)
					enter(kz)
					time.Sleep(time.Millisecond)
					leave(kz)
					leave(ky)
					leave(kx)
					return nil
				})
			})
		}
		run(10, func() error {
			return x.Do(ctx, func(context.Context) error { enter(kx); time.Sleep(time.Millisecond); leave(kx); return nil })
		})
		run(10, func() error {
			o, err := y.RLock(ctx)
			if err != nil {
				return err
			}
			readers.Add(1)
			if writers[ky].Load() != 0 {
				overlaps.Add(1)
			}
			time.Sleep(time.Millisecond)
			readers.Add(-1)
			return o.Unlock()
		})
		run(10, func() error {
			o, err := z.Acquire(ctx, 1)
			if err != nil {
				return err
			}
			enter(kz)
			time.Sleep(time.Millisecond)
			leave(kz)
			return o.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a lock: %v", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlaps", n)
	}
}

// A part lost while Lock renews a mutex part taken earlier (the wait for the later parts used
// half its lease) is not given back as held either: here the last part, a semaphore's permit,
// is removed by an operator of this Generator while the renewal of the first part is on its
// way. Lock let go of nothing and returned an Owner that had ended already.
func TestMultiLockDoesNotReturnAPartLostWhileItRenewedAnother(t *testing.T) {
	const lease = 2 * time.Second
	c := srv.Client()
	w := newWire(t, c)
	g := genOn(t, c, dlock.WithDefaultLease(lease))
	other, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	a := mustGen(t, g, "FRESH", tg+"-a", lease)
	sem, _ := g.GenSemaphore("FRESH", tg+"-c", 1)
	m, err := g.MultiOf(sem.Permits(1), a)
	if err != nil {
		t.Fatal(err)
	}
	semB, _ := other.GenSemaphore("FRESH", tg+"-c", 1)
	ctx := ctxT(t, 20*time.Second)
	held, err := semB.Acquire(ctx, 1)
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
	waitFor(t, func() bool { st, err := a.State(ctx); return err == nil && st.Mine })
	// Less than half a's lease left: Lock renews it once it has the permit, before a's own
	// renewal at three quarters (the renewal stalled must be Lock's).
	time.Sleep(lease * 57 / 100)
	w.stall("renew", 1)
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return w.stalledCount() == 1 }) // a's renewal, on its way
	st, err := sem.State(ctx)
	if err != nil || len(st.Holds) != 1 {
		t.Fatalf("the semaphore while Lock renews a: %+v, %v", st, err)
	}
	if ok, err := sem.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	w.unstall()
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
}

// A MultiLock taken through the caller's Owner of its first part (of each kind) that gives up
// on a later part (held elsewhere, its context's deadline passes) gives back only the hold it
// re-entered: the caller still holds its part once, live, and one Unlock frees it in Redis.
func TestMultiLockThatGivesUpLeavesTheCallersPartAsItWas(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 20*time.Second)
	mu, sem, rw := everyKind(t, ga, tg, 1)
	last := mustGen(t, ga, "PMZ", tg, 5*time.Second) // (its key sorts after every kind's)
	lastB := mustGen(t, gb, "PMZ", tg, 5*time.Second)
	held, err := lastB.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Unlock() }()
	muB, semB, rwB := everyKind(t, gb, tg, 1)
	for _, k := range []struct {
		name  string
		part  dlock.Part
		count func(context.Context) int
		free  func() (*dlock.Owner, bool, error)
	}{
		{"mutex", mu, mu.HoldCount, func() (*dlock.Owner, bool, error) { return muB.TryLock(ctx) }},
		{"permits", sem.Permits(1), sem.HoldCount, func() (*dlock.Owner, bool, error) { return semB.TryAcquire(ctx, 1) }},
		{"write side", rw.WriteSide(), rw.HoldCount, func() (*dlock.Owner, bool, error) { return rwB.TryLock(ctx) }},
		{"read side", rw.ReadSide(), rw.HoldCount, func() (*dlock.Owner, bool, error) { return rwB.TryLock(ctx) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			own, err := k.part.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ga.MultiOf(last, k.part)
			if err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(own, 200*time.Millisecond)
			o, err := m.Lock(short)
			cancel()
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || o != nil {
				t.Fatalf("Lock with its last part held elsewhere = %v, %v", o, err)
			}
			if o, ok, err := m.TryLock(own); ok || err != nil || o != nil {
				t.Fatalf("TryLock with its last part held elsewhere = %v, %v, %v", o, ok, err)
			}
			if n := k.count(own); n != 1 || own.Err() != nil {
				t.Fatalf("the caller's part holds %d (ended: %v), want 1, live", n, own.Err())
			}
			if err := own.Unlock(); err != nil {
				t.Fatal(err)
			}
			if o, ok, err := k.free(); !ok || err != nil {
				t.Fatalf("the part is not free after the caller's Unlock: %v %v", ok, err)
			} else {
				_ = o.Unlock()
			}
		})
	}
}

// A part re-entered on its own through the MultiLock's Owner (a.Lock(owned)) returns an Owner
// whose Unlock releases that one hold of that part, as every Lock's Owner does: not the
// MultiLock's Owner, whose Unlock lets go of every part (the other parts were let go, the
// MultiLock's Owner ended, while the caller still meant to hold them).
func TestMultiLockPartReenteredThroughItsOwnerUnlocksOnlyThatPart(t *testing.T) {
	g, _ := newGen(t)
	tg := target(t)
	m, parts := multiOf(t, g, "MULTI", 5*time.Second, tg+"-a", tg+"-b")
	ctx := ctxT(t, 30*time.Second)
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := parts[0].Lock(o)
	if err != nil {
		t.Fatal(err)
	}
	if parts[0].HoldCount(o) != 2 {
		t.Fatalf("hold count %d after the part's re-entry, want 2", parts[0].HoldCount(o))
	}
	if err := again.Unlock(); err != nil {
		t.Fatalf("Unlock of the part's re-entry: %v", err)
	}
	if o.Err() != nil {
		t.Fatalf("the MultiLock's Owner ended (%v) when one re-entry of one part was released", context.Cause(o))
	}
	for _, l := range parts {
		if l.HoldCount(o) != 1 {
			t.Fatalf("%s: hold count %d after the part's re-entry was released, want 1", key(l), l.HoldCount(o))
		}
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	for _, l := range parts {
		if st, err := l.State(ctx); err != nil || st.Held() {
			t.Fatalf("%s after the MultiLock's Unlock: %+v, %v; want it free", key(l), st, err)
		}
	}
}

// A MultiLock whose context ends at any moment of its Lock (deadlines of 0 to 5 ms, with
// another process taking and releasing the parts meanwhile) leaves no part held: once the
// loop is over every part is free in Redis, for another process's TryLock, and the
// Generator keeps no lock state.
func TestMultiLockCancelledAtEveryMomentLeavesNothingHeld(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 60*time.Second)
	mu, sem, rw := everyKind(t, ga, tg, 1)
	m, err := ga.MultiOf(rw.WriteSide(), mu, sem.Permits(1))
	if err != nil {
		t.Fatal(err)
	}
	muB, semB, rwB := everyKind(t, gb, tg, 1)
	mb, err := gb.MultiOf(muB, semB.Permits(1), rwB.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // B takes one part or another, now and then, so that A waits at every part
		defer wg.Done()
		parts := mb.Parts()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			o, ok, err := parts[i%len(parts)].TryLock(ctx)
			if err != nil && errors.As(err, new(*dlock.RedisProcessError)) {
				continue // (a reply that came after the request's bound on a loaded machine: B only disturbs A)
			}
			if err != nil {
				t.Errorf("B: %v", err)
				return
			}
			if ok {
				time.Sleep(time.Duration(i%3) * time.Millisecond)
				_ = o.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	got := 0
	for i := range 300 {
		wait, cancel := context.WithTimeout(ctx, time.Duration(i%6)*time.Millisecond+time.Duration(i%7)*150*time.Microsecond)
		o, err := m.Lock(wait)
		cancel()
		if err == nil {
			got++
			if err := o.Unlock(); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		} else if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("Lock: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d of 300 Locks got every part", got)
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, ok, err := mb.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			_ = o.Unlock()
			break
		}
		if time.Now().After(deadline) {
			for _, p := range m.Parts() {
				t.Logf("%s: %+v", p.Config().UniqueKey(), p)
			}
			st, _ := mu.State(ctx)
			ss, _ := sem.State(ctx)
			rs, _ := rw.State(ctx)
			t.Fatalf("a part is still held 10 s after every Lock returned: mutex %+v, semaphore %+v, rw %+v", st, ss, rs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, func() bool { return ga.InUse() == 0 })
}

// A MultiLock far from Redis (replies slow on their way back) never returns with less than
// half of a part's lease left as Redis counts it: taking four mutexes one after the other
// uses up more than half the first one's lease, and each part renewed before Lock returns
// costs a round trip that the parts after it (and the last part taken) spend too. PTTL of
// every part's key, read from a client near Redis as Lock returns, is at least half the lease.
func TestMultiLockFarFromRedisNeverReturnsAPartNearlyExpired(t *testing.T) {
	const lease = time.Second
	g, p := farGen(t, lease)
	p.SetLatencies(5*time.Millisecond, 150*time.Millisecond)
	admin := rawClient(t)
	tg := target(t)
	m, locks := multiOf(t, g, "FARMULTI", lease, tg+"-a", tg+"-b", tg+"-c", tg+"-d")
	ctx := ctxT(t, 30*time.Second)
	for round := range 2 {
		o, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Now()
		cmds := make([]*redis.DurationCmd, len(locks))
		_, _ = admin.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for i, l := range locks {
				cmds[i] = pl.PTTL(ctx, key(l))
			}
			return nil
		})
		since := time.Since(took)
		for i, l := range locks {
			if left := cmds[i].Val() + since; left < lease/2 {
				t.Errorf("round %d: MultiLock returned with %v of %s's %v lease left in Redis", round, left, key(l), lease)
			}
		}
		// (a loaded machine may run a renewal, or the release's reply, after a part's 1 s lease:
		// a loss told, not what this test is about)
		if err := m.Unlock(o); err != nil && !errors.Is(err, dlock.ErrLockLost) && !(errors.As(err, new(*dlock.RedisProcessError)) && errors.Is(err, context.DeadlineExceeded)) {
			t.Fatal(err)
		}
	}
}

// A MultiLock's Lock never returns its parts after its context's deadline: the renewal of a
// part that waited for the later ones past half its lease is bounded by it too (here its
// replies come 600 ms late: the Lock returned its parts 400 ms after its deadline before).
func TestMultiLockReturnsNothingAfterItsDeadline(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mutex", "write side"} {
		t.Run(kind, func(t *testing.T) {
			const lease = 2 * time.Second
			var slow atomic.Bool
			c := srv.Client()
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				err := next(ctx, cmd)
				if name := fmt.Sprint(cmd.Args()[0]); slow.Load() && (name == "evalsha" || name == "eval") {
					select { // the reply comes late; the request's own bound still cuts it
					case <-time.After(600 * time.Millisecond):
					case <-ctx.Done():
						cmd.SetErr(ctx.Err())
						return ctx.Err()
					}
				}
				return err
			}})
			g := genOn(t, c, dlock.WithDefaultLease(lease))
			other, _ := newGen(t, dlock.WithDefaultLease(lease))
			tg := uniqueTarget(t)
			var first dlock.Part = mustGen(t, g, "MULTIDL", tg+"-a", lease)
			if kind == "write side" {
				first = rwOf(t, g, tg+"-a").WriteSide()
			}
			m, err := g.MultiOf(first, mustGen(t, g, "MULTIDL", tg+"-b", lease))
			if err != nil {
				t.Fatal(err)
			}
			held, err := mustGen(t, other, "MULTIDL", tg+"-b", lease).Lock(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1400*time.Millisecond)
			defer cancel()
			type result struct {
				owned   *dlock.Owner
				err     error
				expired bool // ctx had ended as Lock returned
			}
			got := make(chan result, 1)
			go func() {
				o, err := m.Lock(ctx)
				got <- result{o, err, ctx.Err() != nil}
			}()
			time.Sleep(1200 * time.Millisecond) // the first part has less than half its lease left
			slow.Store(true)
			if err := held.Unlock(); err != nil {
				t.Fatal(err)
			}
			r := recv(t, got, "the MultiLock's Lock")
			slow.Store(false)
			switch {
			case r.err == nil:
				_ = m.Unlock(r.owned)
				if r.expired {
					t.Fatal("Lock returned the parts after its deadline")
				}
			case !errors.Is(r.err, dlock.ErrNotObtained) || !errors.Is(r.err, context.DeadlineExceeded):
				t.Fatalf("Lock = %v, want ErrNotObtained and the deadline", r.err)
			}
		})
	}
}

// A MultiLock never returns a read-write lock's or a semaphore's part with less than half its
// lease left, as their Lock does not: a part taken first and held while the MultiLock waits
// for a later one (here 70 % of the lease, before its renewal at 75 %) is renewed before Lock
// returns. Its lease in Redis (the holding's expiry, by the server's clock), read as Lock
// returns, is at least half the lease.
func TestMultiLockNeverReturnsAFamilyPartNearlyExpired(t *testing.T) {
	const lease = time.Second
	for _, kind := range []string{"Semaphore", "Read", "Write"} {
		t.Run(kind, func(t *testing.T) {
			g, admin := newGen(t, dlock.WithDefaultLease(lease))
			other, _ := newGen(t, dlock.WithDefaultLease(lease))
			tg := target(t)
			var first dlock.Part
			switch kind {
			case "Semaphore":
				s, err := g.GenSemaphore("HALFMULTI", tg+"-a", 2)
				if err != nil {
					t.Fatal(err)
				}
				first = s.Permits(1)
			case "Read":
				first = rwOf(t, g, tg+"-a").ReadSide()
			default:
				first = rwOf(t, g, tg+"-a").WriteSide()
			}
			b, _ := g.Gen("ZMULTI", tg+"-b") // (after the first part in the global order)
			m, err := g.MultiOf(b, first)
			if err != nil {
				t.Fatal(err)
			}
			if m.Parts()[0] != first {
				t.Fatalf("parts in the order %v", m.Parts())
			}
			ob, _ := other.GenWithLease("ZMULTI", tg+"-b", 10*time.Second) // (the blocker: no renewal of it is due in the test)
			ctx := ctxT(t, 20*time.Second)
			held, err := ob.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			exp := first.Config().SideKey(processor.SharedExpSuffix)
			done := make(chan *dlock.Owner, 1)
			go func() {
				o, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
				}
				done <- o
			}()
			waitFor(t, func() bool { return admin.ZCard(ctx, exp).Val() == 1 })
			time.Sleep(lease * 7 / 10)
			if err := held.Unlock(); err != nil {
				t.Fatal(err)
			}
			o := recv(t, done, "the MultiLock")
			took := time.Now()
			var scores *redis.ZSliceCmd
			var now *redis.TimeCmd
			_, _ = admin.Pipelined(ctx, func(p redis.Pipeliner) error {
				scores, now = p.ZRangeWithScores(ctx, exp, 0, -1), p.Time(ctx)
				return nil
			})
			for _, z := range scores.Val() {
				left := time.UnixMilli(int64(z.Score)).Sub(now.Val()) + time.Since(took)
				if left < lease/2 {
					t.Errorf("MultiLock returned with %v of the %s part's %v lease left", left, kind, lease)
				}
			}
			if len(scores.Val()) == 0 {
				t.Errorf("the %s part is not held in Redis", kind)
			}
			if o != nil {
				_ = m.Unlock(o)
			}
		})
	}
}

// A MultiLock whose read-write part is lent from a write-hold whose downgrade Redis keeps
// failing (the write-hold is not renewed meanwhile: the downgrade renews it) returns once it
// has renewed what it could, as with a renewal that failed: the part's holding has most of
// its lease left, so Lock returns it (a regression test: Lock waited for the downgrade, up to
// the write-hold's whole lease, past its own context).
func TestMultiLockReturnsWhileAPartsDowngradeIsUnresolved(t *testing.T) {
	const short = 4 * time.Second // the mutex parts' lease: stale from 2 s, renewed at 3 s
	var failDown, downFailed atomic.Bool
	c := srv.Client()
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		a := cmd.Args()
		if failDown.Load() && sharedArg(a, "op") == "take" && sharedArg(a, "replaces") != "" {
			downFailed.Store(true)
			err := errors.New("read: connection reset by peer (injected)")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}})
	g := genOn(t, c, dlock.WithLeases(map[string]time.Duration{"FRC": 30 * time.Second}))
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	a, b := mustGen(t, g, "FRA", tg+"-a", short), mustGen(t, g, "FRA", tg+"-b", short)
	rw, err := g.GenRW("FRC", tg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.MultiOf(a, b, rw.ReadSide())
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 60*time.Second)
	// a reader borrows this process's write-hold, whose downgrade Redis fails
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failDown.Store(true)
	read := make(chan *dlock.Owner, 1)
	go func() {
		r, err := rw.RLock(ctx)
		if err != nil {
			t.Error(err)
		}
		read <- r
	}()
	waitFor(t, func() bool { return g.SharedWaiters(rw.Config().UniqueKey()) > 0 })
	if err := rw.Unlock(w); err != nil {
		t.Fatal(err)
	}
	r := <-read
	waitFor(t, downFailed.Load)
	// b is held elsewhere until a, taken first, has less than half its lease left
	ob, err := mustGen(t, gb, "FRA", tg+"-b", short).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(short * 5 / 8)
		_ = ob.Unlock()
	}()
	o, err := m.Lock(ctxT(t, 10*time.Second)) // (a hang made a failure: the write-hold lives 30 s)
	if err != nil {
		t.Fatalf("MultiLock whose part's downgrade is unresolved: %v", err)
	}
	failDown.Store(false)
	if err := m.Unlock(o); err != nil {
		t.Error(err)
	}
	if err := rw.Unlock(r); err != nil {
		t.Error(err)
	}
}

// A MultiLock's errors name the part they are about, once: Unlock after a part's key was
// removed by hand (the loss found at release), and Lock with an Owner one of whose parts was
// lost (as the part's own Lock says it).
func TestMultiLockErrorsNameThePartOnce(t *testing.T) {
	g, c := newGen(t, dlock.WithDefaultLease(10*time.Second))
	tg := uniqueTarget(t)
	a, _ := g.Gen("MULTINAME", tg+"-a")
	b, _ := g.Gen("MULTINAME", tg+"-b")
	m, err := g.Multi(a, b)
	if err != nil {
		t.Fatal(err)
	}
	o, err := m.Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Del(context.Background(), key(a)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(o); !errors.Is(err, dlock.ErrLockLost) || strings.Count(err.Error(), key(a)) != 1 {
		t.Fatalf("Unlock after a's key was removed = %v; want ErrLockLost naming %s once", err, key(a))
	}

	o, err = m.Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.State(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := a.ForceRelease(ctxT(t, 5*time.Second), s.Holder); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	waitFor(t, func() bool { return o.Err() != nil })
	_, partErr := a.Lock(o)
	_, multiErr := m.Lock(o)
	for _, err := range []error{partErr, multiErr} {
		if !errors.Is(err, dlock.ErrLockLost) || strings.Count(err.Error(), key(a)) != 1 {
			t.Fatalf("Lock with an Owner whose part %s was lost = %v; want ErrLockLost naming it once", key(a), err)
		}
	}
	_ = m.Unlock(o)
}

// A MultiLock taken through an Owner of one hold of a part (a re-entry through a derived
// context), and re-entered: its Unlocks release its own holds of the part, not the caller's
// one hold, and every Unlock after them balances (nothing left held).
func TestMultiLockOverAnOwnerOfOneHold(t *testing.T) {
	g, _ := newGen(t)
	other, _ := newGen(t)
	tg := uniqueTarget(t)
	a, ao := mustGen(t, g, "MONE", tg+"a", 5*time.Second), mustGen(t, other, "MONE", tg+"a", 5*time.Second)
	b := mustGen(t, g, "MONE", tg+"b", 5*time.Second)
	ml, err := g.Multi(a, b)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := a.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d, cancel := context.WithCancel(outer)
	defer cancel()
	one, err := a.Lock(d) // an Owner of one hold
	if err != nil {
		t.Fatal(err)
	}
	mo, err := ml.Lock(one)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ml.Lock(mo); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(mo.Unlock(), mo.Unlock()); err != nil || a.HoldCount(outer) != 2 {
		t.Fatalf("the MultiLock's two Unlocks: %v; a held %d times, want 2", err, a.HoldCount(outer))
	}
	if err := errors.Join(one.Unlock(), outer.Unlock()); err != nil {
		t.Fatal(err)
	}
	o, ok, err := ao.TryLock(context.Background())
	if !ok || err != nil {
		t.Fatalf("another process's TryLock after every Unlock = %v, %v; want the key free", ok, err)
	}
	_ = o.Unlock()
}

// A MultiLock that gives up returns by its deadline, as a part's own Lock does, also when
// Redis stops answering once it holds a part: it lets go of the parts it took in the
// background (it waited for each release, up to the part's lease), and the part is free
// again soon after Redis answers, not only once its lease runs out.
func TestMultiLockThatGivesUpInABlackHoleReturnsByItsDeadline(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"mutex", "write side", "permit"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const lease = 20 * time.Second
			g, p := farGen(t, lease)
			other, _ := newGen(t, dlock.WithDefaultLease(lease))
			tg := uniqueTarget(t)
			part := func(g *dlock.Generator) dlock.Part {
				switch kind {
				case "write side":
					return rwOf(t, g, tg+"-a").WriteSide()
				case "permit":
					return semOf(t, g, tg+"-a", 1).Permits(1)
				}
				return mustGen(t, g, "MULTIBH", tg+"-a", lease)
			}
			held, err := mustGen(t, other, "ZMULTIBH", tg+"-b", lease).Lock(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock()
			m, err := g.MultiOf(part(g), mustGen(t, g, "ZMULTIBH", tg+"-b", lease)) // (the part of "-a" comes first in the global order)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				o, err := m.Lock(ctx)
				if err == nil {
					_ = o.Unlock()
				}
				got <- err
			}()
			// Once the first part is held (the other process finds it taken), Redis stops
			// answering this process.
			first := part(other)
			waitFor(t, func() bool {
				o, ok, err := first.TryLock(ctxT(t, 5*time.Second))
				if ok {
					_ = o.Unlock()
				}
				return err == nil && !ok
			})
			p.Blackhole(true)
			err = rgRecv(t, got, lease/2, "the MultiLock's Lock (a give-up waiting for its releases takes the lease)")
			p.Blackhole(false)
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock = %v, want ErrNotObtained and the deadline", err)
			}
			o, err := first.Lock(ctxT(t, lease*3/4))
			if err != nil {
				t.Fatalf("the first part after the give-up: %v (its release waits for its lease)", err)
			}
			_ = o.Unlock()
		})
	}
}

// A MultiLock that gives up while its context still lasts (a part found held), whose context
// ends while it lets go of the parts it took, waits for those releases up to a sixth of the
// shortest part's lease past the context's end, as it does when the context had ended first:
// a release Redis answers 200 ms after the context's end (a sixth of the lease: 1 s) is
// waited for, and the part is free in Redis when TryLock returns.
func TestMultiLockThatGivesUpWaitsForItsReleasesPastItsContextsEnd(t *testing.T) {
	t.Parallel()
	const lease = 18 * time.Second // (a sixth: 3 s, room for a loaded machine's stalls past the shaper's 300 ms)
	g, p := farGen(t, lease)
	other, _ := newGen(t)
	tg := uniqueTarget(t)
	a := mustGen(t, g, "MULTIGU", tg+"-a", lease)
	b := mustGen(t, g, "ZMULTIGU", tg+"-b", lease)
	held, err := mustGen(t, other, "ZMULTIGU", tg+"-b", lease).Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock()
	m, err := g.MultiOf(a, b)
	if err != nil {
		t.Fatal(err)
	}
	keyA, keyB := []byte(a.Config().UniqueKey()), []byte(b.Config().UniqueKey())
	var seenA atomic.Int32 // (the second request naming part A is its release)
	p.SetShaper(func(toTarget bool, chunk []byte) time.Duration {
		if !toTarget {
			return 0
		}
		switch {
		case bytes.Contains(chunk, keyB):
			return 200 * time.Millisecond // part B's TryLock: found held at about 200 ms
		case bytes.Contains(chunk, keyA) && seenA.Add(1) == 2:
			return 300 * time.Millisecond // part A's release: answered about 200 ms after ctx's end
		}
		return 0
	})
	defer p.SetShaper(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	o, ok, err := m.TryLock(ctx)
	took := time.Since(start)
	if ok {
		_ = o.Unlock()
		t.Fatal("TryLock took every part; part B is held by another process")
	}
	direct := srv.Client()
	defer direct.Close()
	v, gerr := direct.Get(context.Background(), string(keyA)).Result()
	if gerr != redis.Nil {
		t.Fatalf("TryLock returned (%v, err %v) after %v, its context ending at 300 ms, with part A still held in Redis (%q, %v): "+
			"its release, answered within a sixth of the lease (%v) past the context's end, was not waited for",
			ok, err, took.Round(time.Millisecond), v, gerr, lease/6)
	}
}

// An Unlock of a MultiLock while Redis does not answer releases every part at once: each
// part's release is bounded by its own lease, and none waits for another's. Released one
// after the other (the last part's release used up its lease), the parts released after the
// first reported their holdings lost (ErrLockLost) rather than Redis's failure, and Unlock took
// a lease per part. Every part's error names Redis's failure; once Redis answers again, every
// part is free.
func TestMultiLockUnlockInABlackHoleReleasesEveryPartAtOnce(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	g, p := farGen(t, lease)
	tg := uniqueTarget(t)
	parts := []dlock.Part{
		mustGen(t, g, "MULTIUB", tg+"-a", lease),
		rwOf(t, g, tg+"-b").WriteSide(),
		semOf(t, g, tg+"-c", 2).Permits(1),
		mustGen(t, g, "MULTIUB", tg+"-d", lease),
	}
	m, err := g.MultiOf(parts...)
	if err != nil {
		t.Fatal(err)
	}
	o, err := m.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	got := make(chan error, 1)
	go func() { got <- m.Unlock(o) }()
	err = rgRecv(t, got, 20*lease, "the MultiLock's Unlock in a black hole")
	p.Blackhole(false)
	if err == nil {
		t.Fatal("Unlock in a black hole returned no error")
	}
	if errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock in a black hole = %v; a part reported its holding lost: its release waited for another's", err)
	}
	for _, part := range parts {
		if key := part.Config().UniqueKey(); !strings.Contains(err.Error(), key) {
			t.Errorf("Unlock in a black hole = %v; nothing about part %s", err, key)
		}
	}
	var failed *dlock.RedisProcessError
	if !errors.As(err, &failed) {
		t.Errorf("Unlock in a black hole = %v; want Redis's failure", err)
	}
	if !errors.Is(context.Cause(o), context.Canceled) {
		t.Errorf("the Owner after its Unlock: %v; want context.Canceled", context.Cause(o))
	}
	other, _ := newGen(t, dlock.WithDefaultLease(lease))
	for i, part := range []dlock.Part{
		mustGen(t, other, "MULTIUB", tg+"-a", lease),
		rwOf(t, other, tg+"-b").WriteSide(),
		semOf(t, other, tg+"-c", 2).Permits(2),
		mustGen(t, other, "MULTIUB", tg+"-d", lease),
	} {
		o, err := part.Lock(ctxT(t, 3*lease))
		if err != nil {
			t.Fatalf("part %d after the Unlock and Redis's return: %v; want it free by its lease's end", i, err)
		}
		_ = o.Unlock()
	}
}

// A TryLock of a MultiLock whose first part must be renewed before it returns (taking the
// second used up more than half its lease) returns the renewal's Redis failure, as a part's own
// TryLock returns one, and holds none of the parts: it does not report them held elsewhere.
// The first part is of each kind.
func TestMultiLockTryLockReturnsTheRedisFailureOfItsRenewal(t *testing.T) {
	const lease = 2 * time.Second
	for _, kind := range []string{"mutex", "semaphore", "write side"} {
		t.Run(kind, func(t *testing.T) {
			c := srv.Client()
			preload(t, c) // (a NOSCRIPT reply would double the slow take)
			tg := uniqueTarget(t)
			var armed atomic.Bool
			var failed atomic.Int32
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				args := cmd.Args()
				name, op := processor.ScriptName(args), sharedArg(args, "op")
				switch {
				case !armed.Load():
				case name == "lock" && strings.Contains(fmt.Sprint(args[3]), tg+"-b"):
					// The first part's reply and the second part's take are each slow by 30 %
					// of the lease: each part's own TryLock returns it with 70 % left, but the
					// first has 40 % left once the second is taken.
					time.Sleep(lease * 3 / 10)
				case name == "lock" || op == "take":
					err := next(ctx, cmd)
					if err == nil {
						time.Sleep(lease * 3 / 10)
					}
					return err
				case name == "renew" || op == "renew": // (every one, while armed)
					failed.Add(1)
					err := errors.New("connection refused (injected)")
					cmd.SetErr(err)
					return err
				}
				return next(ctx, cmd)
			}})
			g := genOn(t, c, dlock.WithDefaultLease(lease))
			var first dlock.Part
			var free func(ctx context.Context) bool
			switch kind {
			case "mutex":
				l := mustGen(t, g, "ATRY", tg+"-a", lease)
				first = l
				free = func(ctx context.Context) bool { st, err := l.State(ctx); return err == nil && !st.Held() }
			case "semaphore":
				sem, err := g.GenSemaphore("ATRY", tg+"-a", 1)
				if err != nil {
					t.Fatal(err)
				}
				first = sem.Permits(1)
				free = func(ctx context.Context) bool {
					o, ok, err := sem.TryAcquire(ctx, 1)
					if ok {
						_ = o.Unlock()
					}
					return ok && err == nil
				}
			default:
				rw, err := g.GenRW("ATRY", tg+"-a")
				if err != nil {
					t.Fatal(err)
				}
				first = rw.WriteSide()
				free = func(ctx context.Context) bool {
					o, ok, err := rw.TryLock(ctx)
					if ok {
						_ = o.Unlock()
					}
					return ok && err == nil
				}
			}
			second := mustGen(t, g, "ZTRY", tg+"-b", lease)
			m, err := g.MultiOf(first, second)
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 10*time.Second)
			armed.Store(true)
			o, ok, err := m.TryLock(ctx)
			armed.Store(false)
			var pe *dlock.RedisProcessError
			if ok || o != nil || !errors.As(err, &pe) {
				t.Fatalf("TryLock = %v, %v, %v; want the renewal's *RedisProcessError", o, ok, err)
			}
			if failed.Load() == 0 {
				t.Fatal("no renewal was sent")
			}
			if !free(ctx) {
				t.Errorf("the first part is held after the TryLock")
			}
			if st, err := second.State(ctx); err != nil || st.Held() {
				t.Errorf("the second part after the TryLock: %+v, %v; want free", st, err)
			}
		})
	}
}

// A TryLock of a MultiLock whose first part is lost before it has the second reports the parts
// not obtained, false with a nil error, as its doc says: it returns a Redis failure only of the
// renewal it sends itself, and a loss outweighs that failure. The part is lost while the second
// is taken (its renewals failed in Redis and its lease ran out: the loss wraps a renewal's
// *RedisProcessError), or lapses during the renewal TryLock sends itself (taking the second used
// up more than half the first's lease, and the renewal got no answer before the lease ran out:
// Extend reports the loss joined with the renewal's *RedisProcessError).
func TestMultiLockTryLockOfAPartLostBeforeItHasTheRestReportsNotObtained(t *testing.T) {
	for _, c := range []struct {
		name       string
		leaseA     time.Duration // the first part's lease
		takeB      time.Duration // how long the second part's take is held up
		unanswered bool          // the first part's renewals get no answer until given up, else fail at once
	}{
		{"lost as it takes the next", 600 * time.Millisecond, 1500 * time.Millisecond, false},
		{"lapsing in its own renewal", 2 * time.Second, 1200 * time.Millisecond, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := srv.Client()
			preload(t, cl)
			var armed atomic.Bool
			var renewals atomic.Int32
			cl.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if !armed.Load() || len(cmd.Args()) < 4 {
					return next(ctx, cmd)
				}
				k := fmt.Sprint(cmd.Args()[3])
				switch processor.ScriptName(cmd.Args()) {
				case "lock":
					if strings.HasSuffix(k, "-b") {
						time.Sleep(c.takeB)
					}
				case "renew":
					if strings.HasSuffix(k, "-a") {
						renewals.Add(1)
						if c.unanswered { // (its bound is the lease's end: it fails after the holding lapsed)
							select {
							case <-ctx.Done():
							case <-time.After(5 * c.leaseA):
							}
						}
						err := errors.New("connection refused (injected)")
						cmd.SetErr(err)
						return err
					}
				}
				return next(ctx, cmd)
			}})
			g := genOn(t, cl, dlock.WithDefaultLease(c.leaseA))
			tg := uniqueTarget(t)
			m, err := g.Multi(mustGen(t, g, "TRYLOST", tg+"-a", c.leaseA), mustGen(t, g, "TRYLOST", tg+"-b", 6*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 20*time.Second)
			armed.Store(true)
			o, ok, err := m.TryLock(ctx)
			armed.Store(false)
			if ok || o != nil || err != nil {
				t.Fatalf("TryLock = %v, %v, %v; want false, nil (its doc: a part it took was lost before it had the rest)", o, ok, err)
			}
			if c.unanswered && renewals.Load() == 0 {
				t.Fatal("no renewal of the first part was sent")
			}
		})
	}
}
