package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

func TestStateSaysWhoHoldsAndWhoWaits(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.Gen("API", target(t))
	l2, _ := g2.Gen("API", target(t))
	ctx := ctxT(t, 10*time.Second)

	s, err := l1.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Held() || s.Mine || s.LeaseLeft != 0 {
		t.Fatalf("free lock: %+v", s)
	}
	owned, err := l1.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	token, _ := l1.FencingToken(owned)
	s1, err := l1.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := l2.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !s1.Held() || !s1.Mine || s2.Mine || s1.Holder != s2.Holder {
		t.Fatalf("held: from the holder %+v, from another %+v", s1, s2)
	}
	if s1.LeaseLeft <= 0 || s1.LeaseLeft > time.Second {
		t.Fatalf("lease left %v, lease 1s", s1.LeaseLeft)
	}
	if s1.Fence != token {
		t.Fatalf("fence %d, token %d", s1.Fence, token)
	}
	// waiters in two other Generators join the line, in order
	g3, _ := newGen(t)
	l3, _ := g3.Gen("API", target(t))
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { _, err := l2.Lock(wctx); done <- err }()
	waitFor(t, func() bool { s, _ := l1.State(ctx); return len(s.Waiting) == 1 })
	go func() { _, err := l3.Lock(wctx); done <- err }()
	waitFor(t, func() bool { s, _ := l1.State(ctx); return len(s.Waiting) == 2 })
	s, err = l1.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2, err = l2.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Holder != s.Holder || s.LocalWaiters || !s2.LocalWaiters {
		t.Fatalf("from the holder %+v, from a waiter %+v", s, s2)
	}
	for _, w := range s.Waiting {
		if strings.HasPrefix(s.Holder, w) {
			t.Fatalf("the holder %q is in line: %v", s.Holder, s.Waiting)
		}
	}
	if s.Waiting[0] == s.Waiting[1] {
		t.Fatalf("line %v: one entry per process", s.Waiting)
	}
	cancel()
	for range 2 {
		if err := <-done; !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("cancelled waiter: %v", err)
		}
	}
	// the waiters left the line
	waitFor(t, func() bool { s, _ := l1.State(ctx); return len(s.Waiting) == 0 })
	if err := l1.Unlock(owned); err != nil {
		t.Fatal(err)
	}
}
