package dlock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dlockgo/dlock/dlock"
)

// The Owner that Lock returns releases itself, and answers as a context.
func TestOwnerUnlocks(t *testing.T) {
	g, _ := newGen(t)
	l, _ := g.Gen("OWNER", target(t))
	ctx := ctxT(t, 10*time.Second)
	o, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.Err() != nil || l.HoldCount(o) != 1 {
		t.Fatalf("fresh owner: %v, hold count %d", o.Err(), l.HoldCount(o))
	}
	o2, err := l.Lock(o) // re-entry returns the same Owner
	if err != nil || o2 != o || l.HoldCount(o) != 2 {
		t.Fatalf("re-entry: %v, %v, hold count %d", o2 == o, err, l.HoldCount(o))
	}
	if err := o2.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	if o.Err() == nil || context.Cause(o) != context.Canceled {
		t.Fatalf("owner context after the release: %v", context.Cause(o))
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), l.Config().UniqueKey()) {
		t.Fatalf("a second Unlock: %v, want ErrNotHeld naming the lock", err)
	}
	var none *dlock.Owner
	if err := none.Unlock(); err != dlock.ErrNotHeld || none.Err() != nil || none.Done() != nil {
		t.Fatalf("nil Owner: %v", err)
	}
}

// A holding whose Owner the program drops without Unlock is found by the garbage collector and
// released, with an error logged that names the key: the lock is not held for the life of the
// process.
func TestDroppedOwnerIsReleased(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	g, _ := newGen(t, dlock.WithLogger(zap.New(core)))
	other, _ := newGen(t)
	tg := target(t)
	l, _ := g.Gen("LEAK", tg)
	lo, _ := other.Gen("LEAK", tg)
	ctx := ctxT(t, 30*time.Second)
	func() {
		if _, err := l.Lock(ctx); err != nil { // the Owner is dropped at once
			t.Fatal(err)
		}
	}()
	var got *dlock.Owner
	waitFor(t, func() bool {
		runtime.GC()
		o, ok, err := lo.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = o
		return ok
	})
	defer got.Unlock() //nolint:errcheck
	found := false
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if f.Key == "key" && f.String == l.Config().UniqueKey() && strings.Contains(e.Message, "without Unlock") {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("no error log names the leaked key: %v", logs.All())
	}
}

// A program often lets go of an Owner as it calls Unlock (its last use), and the collector may
// find the Owner unreachable while Unlock runs. Unlock still releases the holding itself: nil,
// not ErrNotHeld, and the clean-up of an Owner dropped without Unlock neither runs nor logs —
// for every kind of lock. (Here a collection runs inside Unlock, after it found the holding.)
func TestUnlockOfAnOwnerLetGoMeanwhileReleasesIt(t *testing.T) {
	collect := func() {
		runtime.GC()
		runtime.GC()
		time.Sleep(20 * time.Millisecond) // (clean-ups run on a goroutine of their own)
	}
	core, logs := observer.New(zap.ErrorLevel)
	g, _ := newGen(t, dlock.WithUnlocking(collect), dlock.WithLogger(zap.New(core)))
	ctx := ctxT(t, 30*time.Second)
	tg := target(t)
	l, _ := g.Gen("LETGO", tg)
	rw := rwOf(t, g, tg+".rw")
	sem := semOf(t, g, tg+".sem", 2)
	for _, c := range []struct {
		name string
		take func() (*dlock.Owner, error)
	}{
		{"mutex", func() (*dlock.Owner, error) { return l.Lock(ctx) }},
		{"read", func() (*dlock.Owner, error) { return rw.RLock(ctx) }},
		{"write", func() (*dlock.Owner, error) { return rw.Lock(ctx) }},
		{"semaphore", func() (*dlock.Owner, error) { return sem.Acquire(ctx, 1) }},
	} {
		unlock := func() func() error { // (nothing but the method value keeps the Owner)
			o, err := c.take()
			if err != nil {
				t.Fatal(err)
			}
			return o.Unlock
		}()
		if err := unlock(); err != nil {
			t.Errorf("%s: Unlock of an Owner let go of as it ran = %v, want nil", c.name, err)
		}
	}
	if n := logs.FilterMessageSnippet("without Unlock").Len(); n != 0 {
		t.Errorf("%d holdings released by the garbage collector, behind their Unlock: %v", n, logs.All())
	}
}

// A lock re-entered through the Owner of another lock that carries its holding (b taken with
// a's Owner, then a.Lock(ownerB)) returns an Owner whose Unlock releases that hold of a, not
// b's Owner, whose Unlock would let go of b.
// That Owner ends with a's holding, not with b's: b's loss (an operator removed it) is not a
// loss of a.
func TestReentryThroughAnotherLocksOwnerUnlocksThisLock(t *testing.T) {
	g, _ := newGen(t)
	a := mustGen(t, g, "OWNER", target(t)+"-a", 5*time.Second)
	b := mustGen(t, g, "OWNER", target(t)+"-b", 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	oa, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := b.Lock(oa)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.Lock(ob)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Unlock(); err != nil {
		t.Fatal(err)
	}
	if a.HoldCount(oa) != 1 || b.HoldCount(ob) != 1 {
		t.Fatalf("after Unlock of a's re-entry: a holds %d, b holds %d; want 1 and 1", a.HoldCount(oa), b.HoldCount(ob))
	}
	inA, err := a.Lock(ob)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ForceRelease(ctx, st.Holder); err != nil {
		t.Fatal(err)
	}
	<-ob.Done()
	if inA.Err() != nil || a.HoldCount(oa) != 2 {
		t.Fatalf("a's re-entry through b's Owner after b was lost: %v, a holds %d; want it live, and 2", context.Cause(inA), a.HoldCount(oa))
	}
	if err := errors.Join(inA.Unlock(), oa.Unlock()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(inA), context.Canceled) {
		t.Fatalf("a's re-entry Owner after a's release: %v, want ended with it", context.Cause(inA))
	}
}

// An Owner that Lock returns for a re-entry through a context other than the lock's own Owner
// (one derived from it) stands for that one hold, and for the re-entries made through it: an
// Unlock through it once too often is ErrNotHeld and lets go of nothing, so the outer holding
// stays held (the early Unlock and the deferred one of a re-entry). A context derived from
// it, passed to Lock and then to Unlock, re-enters and releases as any context that carries
// the holding does. For the mutex, the read-write lock's two sides and the semaphore alike.
func TestReentryOwnerUnlocksItsOneHoldOnce(t *testing.T) {
	kinds := reentryKinds(t, "ONEHOLD")
	for name, k := range kinds {
		t.Run(name, func(t *testing.T) {
			outer, err := k.lock(ctxT(t, 20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer outer.Unlock() //nolint:errcheck // (released below; this only if the test fails first)
			derived, cancel := context.WithCancel(outer)
			defer cancel()
			inner, err := k.lock(derived)
			if err != nil {
				t.Fatal(err)
			}
			if inner == outer {
				t.Fatal("re-entry through a derived context returned the outer Owner")
			}
			again, err := k.lock(inner) // through the Owner of one hold: it counts one more
			if err != nil || again != inner || k.holds(outer) != 3 {
				t.Fatalf("re-entry through an Owner of one hold = %v, %v (the same: %v); %d holds, want it, and 3", again, err, again == inner, k.holds(outer))
			}
			// a helper that re-enters and releases with the context it was given
			ofInner, cancelInner := context.WithCancel(inner)
			defer cancelInner()
			if _, err := k.lock(ofInner); err != nil {
				t.Fatal(err)
			}
			if err := k.unlock(ofInner); err != nil || k.holds(outer) != 3 {
				t.Fatalf("Lock and Unlock with a context of the Owner of one hold: %v, %d holds, want 3", err, k.holds(outer))
			}
			if err := errors.Join(again.Unlock(), k.unlock(inner)); err != nil {
				t.Fatal(err)
			}
			for i, second := range []func() error{inner.Unlock, func() error { return k.unlock(inner) }} {
				if err := second(); !errors.Is(err, dlock.ErrNotHeld) {
					t.Fatalf("Unlock (%d) of an Owner of one hold once too often = %v, want ErrNotHeld", i, err)
				}
			}
			if n := k.holds(outer); n != 1 || outer.Err() != nil {
				t.Fatalf("the outer Owner after its re-entries' Unlocks: %d holds, %v; want 1, live", n, context.Cause(outer))
			}
			if k.free() {
				t.Fatal("another process got in while the outer Owner holds")
			}
			if err := outer.Unlock(); err != nil {
				t.Fatal(err)
			}
			if !k.free() {
				t.Fatal("another process did not get in after the outer Unlock")
			}
		})
	}
}

type ownerTestKey struct{}

// An Owner of one hold keeps the values of the context it re-entered through — what the
// program added to the owner context since, as every Owner keeps its context's — but not its
// deadline or cancellation: it lives and ends with the holding (a helper's timeout around a
// re-entry does not end it). For every kind.
func TestReentryOwnerKeepsTheValuesNotTheDeadline(t *testing.T) {
	for name, k := range reentryKinds(t, "ONEVALUES") {
		t.Run(name, func(t *testing.T) {
			outer, err := k.lock(ctxT(t, 20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer outer.Unlock() //nolint:errcheck // (released below; this only if the test fails first)
			given, cancel := context.WithDeadline(context.WithValue(outer, ownerTestKey{}, "trace"), time.Now().Add(time.Hour))
			inner, err := k.lock(given)
			if err != nil {
				t.Fatal(err)
			}
			if v := inner.Value(ownerTestKey{}); v != "trace" {
				t.Errorf("the re-entry's Owner has the value %v, want the given context's", v)
			}
			if d, ok := inner.Deadline(); ok {
				t.Errorf("the re-entry's Owner has the given context's deadline %v", d)
			}
			cancel()
			if inner.Err() != nil || k.holds(outer) != 2 {
				t.Fatalf("the re-entry's Owner after its given context was cancelled: %v, %d holds; want it live, and 2", context.Cause(inner), k.holds(outer))
			}
			if again, err := k.lock(inner); err != nil || again != inner {
				t.Fatalf("re-entry through it after its given context was cancelled: %v, %v (itself: %v)", again, err, again == inner)
			}
			if err := errors.Join(inner.Unlock(), inner.Unlock(), outer.Unlock()); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(context.Cause(inner), context.Canceled) {
				t.Fatalf("the re-entry's Owner after the final Unlock: %v, want ended", context.Cause(inner))
			}
		})
	}
}

// A re-entry through an Owner of one hold racing that Owner's final Unlock either counts one
// more hold on it (and returns it) or comes after the holding went: never a new Owner that
// keeps the key held for ever; a re-entry through a context derived from an Owner racing its
// final Unlock is never a fresh acquisition that holds the key after every call returned (the
// mutex's was, 1 round in 300: the holding was released before its context ended). For
// every kind.
func TestReentryThroughAnOwnerOfOneHoldRacingItsFinalUnlock(t *testing.T) {
	kinds := reentryKinds(t, "ONERACE")
	delete(kinds, "read") // (the write side's lock)
	for name, k := range kinds {
		t.Run(name, func(t *testing.T) {
			for i := range 150 {
				outer, err := k.lock(ctxT(t, 20*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				one, err := k.lock(context.WithValue(outer, ownerTestKey{}, i))
				if err != nil {
					t.Fatal(err)
				}
				if err := outer.Unlock(); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- one.Unlock() }()
				if again, err := k.lock(one); err == nil {
					if again != one {
						t.Fatalf("round %d: re-entry through an Owner of one hold returned another Owner", i)
					}
					if err := again.Unlock(); err != nil {
						t.Fatalf("round %d: %v", i, err)
					}
				}
				if err := <-done; err != nil {
					t.Fatalf("round %d: the final Unlock = %v", i, err)
				}
				if !k.free() {
					t.Fatalf("round %d: the key stayed held after every Unlock", i)
				}
				// and through a context derived from the Owner: it counts one more hold, or is
				// refused as the Owner ended — not a fresh acquisition in between
				outer, err = k.lock(ctxT(t, 20*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				derived, cancel := context.WithCancel(outer)
				go func() { done <- outer.Unlock() }()
				if again, err := k.lock(derived); err == nil {
					if err := again.Unlock(); err != nil {
						t.Fatalf("round %d: %v", i, err)
					}
				} else if !errors.Is(err, dlock.ErrNotObtained) {
					t.Fatalf("round %d: re-entry through a context of an Owner racing its final Unlock = %v", i, err)
				}
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("round %d: the final Unlock = %v", i, err)
				}
				if !k.free() {
					t.Fatalf("round %d: the key stayed held after every Unlock and re-entry returned", i)
				}
			}
		})
	}
}

// reentryKind is one kind of lock the re-entry tests run on: its Lock, its Unlock and
// HoldCount, and whether another process gets in now (free).
type reentryKind struct {
	lock   func(ctx context.Context) (*dlock.Owner, error)
	unlock func(ctx context.Context) error
	holds  func(ctx context.Context) int
	free   func() bool
}

// reentryKinds returns the mutex, the read-write lock's two sides and a semaphore of one
// permit, on one target of typ, with another process's handles for free.
func reentryKinds(t *testing.T, typ string) map[string]reentryKind {
	g, _ := newGen(t)
	other, _ := newGen(t)
	tg := uniqueTarget(t)
	m, mo := mustGen(t, g, typ, tg, 5*time.Second), mustGen(t, other, typ, tg, 5*time.Second)
	rw, rwo := rwOf(t, g, tg), rwOf(t, other, tg)
	sem, semo := semOf(t, g, tg, 1), semOf(t, other, tg, 1)
	bg := context.Background()
	free := func(o *dlock.Owner, ok bool, _ error) bool {
		if ok {
			_ = o.Unlock()
		}
		return ok
	}
	return map[string]reentryKind{
		"mutex": {m.Lock, m.Unlock, m.HoldCount, func() bool { return free(mo.TryLock(bg)) }},
		"write": {rw.Lock, rw.Unlock, rw.HoldCount, func() bool { return free(rwo.TryRLock(bg)) }},
		"read":  {rw.RLock, rw.Unlock, rw.HoldCount, func() bool { return free(rwo.TryLock(bg)) }},
		"permits": {func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) }, sem.Release, sem.HoldCount,
			func() bool { return free(semo.TryAcquire(bg, 1)) }},
	}
}
