package dlock_test

import (
	"context"
	"testing"
	"time"
)

// A MultiLock taken through an Owner of its first part, whose lease Extend shortened to less
// than half the lease of the handle it was taken with, re-enters that part and takes the
// rest: it does not go round for ever renewing the part (it judged "half its lease" by the
// handle's lease while renewing with the tenure's, so the renewal never sufficed, and Lock let
// go of the other parts and took them again — about a thousand times a second — until its
// context ended).
func TestMultiLockReentersAPartWhoseLeaseExtendShortened(t *testing.T) {
	g, _ := newGen(t)
	tg := target(t)
	a := mustGen(t, g, "MULTI", tg+"-a", time.Second)
	b := mustGen(t, g, "MULTI", tg+"-b", time.Second)
	m, err := g.Multi(b, a)
	if err != nil {
		t.Fatal(err)
	}
	oa, err := a.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = oa.Unlock() }()
	if err := a.Extend(oa, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // (the 1 s lease runs down: renewals now give 100 ms)
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
