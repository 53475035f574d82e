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
	if err := o.Unlock(); err != dlock.ErrNotHeld {
		t.Fatalf("a second Unlock: %v", err)
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

// A lock re-entered through the Owner of another lock that carries its holding (b taken with
// a's Owner, then a.Lock(ownerB)) returns an Owner whose Unlock releases that hold of a, not
// b's Owner, whose Unlock would let go of b.
func TestReentryThroughAnotherLocksOwnerUnlocksThisLock(t *testing.T) {
	g, _ := newGen(t)
	a := mustGen(t, g, "OWNER", target(t)+"-a", 5*time.Second)
	b := mustGen(t, g, "OWNER", target(t)+"-b", 5*time.Second)
	oa, err := a.Lock(ctxT(t, 30*time.Second))
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
	if err := errors.Join(ob.Unlock(), oa.Unlock()); err != nil {
		t.Fatal(err)
	}
}
