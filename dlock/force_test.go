package dlock_test

import (
	"testing"
	"time"
)

// ForceRelease names the holder it removes, so a second copy of its request (the client
// sending it again after a lost reply, or a packet delivered late) finds that holder gone and
// cannot remove the key of the process that acquired after it.
func TestForceReleaseRepeatedLeavesTheNextHolder(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	gc, _ := newGen(t)
	gop, cop := newGen(t) // the operator
	preload(t, cop)
	w := newWire(t, cop)
	const lease = 5 * time.Second
	tg := target(t)
	la, _ := ga.GenWithLease("FRC", tg, lease)
	lb, _ := gb.GenWithLease("FRC", tg, lease)
	lc, _ := gc.GenWithLease("FRC", tg, lease)
	lop, _ := gop.GenWithLease("FRC", tg, lease)
	ctx := ctxT(t, 20*time.Second)

	oa, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer oa.Unlock() //nolint:errcheck
	st, err := lop.State(ctx)
	if err != nil || !st.Held() {
		t.Fatalf("State: %+v, %v", st, err)
	}
	if removed, err := lop.ForceRelease(ctx, st.Holder); err != nil || !removed {
		t.Fatalf("ForceRelease(%q): %v, %v", st.Holder, removed, err)
	}
	ob, err := lb.Lock(ctx) // the next holder
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Unlock() //nolint:errcheck
	force := w.copies("force")
	if len(force) != 1 {
		t.Fatalf("%d force requests sent, want 1", len(force))
	}
	w.send(force[0]) // the same request again

	if _, ok, err := lc.TryLock(ctx); ok || err != nil {
		t.Fatalf("a third process took the lock while the next holder holds it (TryLock: %v, %v)", ok, err)
	}
	if ob.Err() != nil || lb.HoldCount(ob) != 1 {
		t.Fatalf("the next holder lost its lock: %v", ob.Err())
	}
}
