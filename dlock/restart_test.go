package dlock_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// After an empty restart a late copy of the holder's own take takes the key anew (another
// process held it in between); the holder's next renewal — here an Extend, as the expander's
// would — finds that and lets the key go, and its reply is lost (a read timeout). Unlock then
// reports the loss (ErrLockLost), not nil: the renewal remembered the locker as removed
// (TestKeyTakenAnewForTheHolderIsALoss covers the same restart with the renewal's reply heard).
func TestUnlockAfterALostRenewalReplyReportsTheKeyTakenAnew(t *testing.T) {
	g, c := newGen(t) // a 1 s lease
	gb, _ := newGen(t)
	preload(t, c)
	w := newWire(t, c)
	l, _ := g.Gen("ADVANEW", target(t))
	lb, _ := gb.Gen("ADVANEW", target(t))
	ctx := ctxT(t, 30*time.Second)
	o := mustLock(t, l, ctx)
	takes := w.copies("lock")
	if len(takes) == 0 {
		t.Fatal("no take sent")
	}
	rc := rawClient(t)
	key := l.Config().UniqueKey()
	holder := rc.Get(ctx, key).Val()
	rc.Del(ctx, rc.Keys(ctx, "*"+key+"*").Val()...) // an empty restart
	ob := mustLock(t, lb, ctx)                      // the other process holds it meanwhile
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	w.send(takes[len(takes)-1]) // the late copy of the holder's take
	if got := rc.Get(ctx, key).Val(); got != holder {
		t.Fatalf("the late copy left %q under the key, want the holder's %q taken anew", got, holder)
	}
	w.hold("renew", 1) // the renewal runs in Redis, but its reply is lost
	if err := l.Extend(o, time.Second); err == nil {
		t.Fatal("Extend whose reply was lost returned nil")
	}
	w.deliverHeld() // it reaches Redis: it finds the key taken anew and lets it go
	if got := rc.Get(ctx, key).Val(); got == holder {
		t.Fatalf("the renewal left the key taken anew (%q)", got)
	}
	err := o.Unlock()
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock of the holding whose key was wiped, taken by another process, taken anew and let go = %v; want ErrLockLost (the release answered settled)", err)
	}
}

// The Go side of processor's TestTakeOfAnUnheardGrantKeepsItsOrigin: a process without
// notifications (it learns its grants by its poll, a sixth of its lease) waits with a 2 s lease
// behind a holder of a 50 ms handle; the release grants it the key, and its poll finds the key
// its own after two of the releaser's leases. After an empty restart, another process's holding
// and a late copy of that poll (which takes the key anew under the tenure's locker), the
// holder is told it lost the key (TestKeyTakenAnewForTheHolderIsALoss, same leases).
func TestTenureFoundByAPollAfterAShortGrantIsToldOfARestart(t *testing.T) {
	g, c := newGen(t, dlock.WithNotifications(false))
	gb, _ := newGen(t)
	preload(t, c)
	w := newWire(t, c)
	tg := target(t) + strconv.FormatInt(time.Now().UnixNano(), 36) // (a fresh key: a counter left by an earlier run keeps {K}:first alive)
	l, _ := g.GenWithLease("ADVFIRST", tg, 2*time.Second)
	lb, _ := gb.GenWithLease("ADVFIRST", tg, 50*time.Millisecond)
	ctx := ctxT(t, 30*time.Second)
	ob := mustLock(t, lb, ctx)
	got := make(chan *dlock.Owner, 1)
	go func() { got <- mustLock(t, l, ctx) }()
	rc := rawClient(t)
	key := l.Config().UniqueKey()
	waitFor(t, func() bool { return rc.ZCard(ctx, processor.LineKey(l.Config())).Val() > 0 }) // in line
	if err := ob.Unlock(); err != nil {                                                       // granted to the waiter, which hears nothing: its poll finds it
		t.Fatal(err)
	}
	o := recv(t, got, "the Lock that waited")
	takes := w.copies("lock")
	holder := rc.Get(ctx, key).Val()
	rc.Del(ctx, rc.Keys(ctx, "*"+key+"*").Val()...) // an empty restart
	ob = mustLock(t, lb, ctx)                       // the other process holds it meanwhile
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	w.send(takes[len(takes)-1]) // the late copy of the poll that found the key its own
	if got := rc.Get(ctx, key).Val(); got != holder {
		t.Fatalf("the late copy left %q under the key, want the holder's %q taken anew", got, holder)
	}
	if err := l.Extend(o, 2*time.Second); err == nil && o.Err() == nil {
		t.Fatalf("the holder renewed a key wiped by a restart, held by another process and taken anew by a late copy: Extend = nil, never told of the loss (the tenure's origin was 0: {K}:first had expired)")
	}
}
