package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// State says whether the key is held (isLocked, from anywhere), whether by this process (Mine),
// the lease left, and who waits; HoldCount says whether a goroutine's context owns it
// (isHeldByCurrentThread). Ports bsm/redislock's TestClient and TestObtain, redsync's
// TestMutex, Redisson's testLockUnlock, testIsLocked, testIsLockedOtherThread,
// testIsHeldByCurrentThread, testIsHeldByCurrentThreadOtherThread and testRemainTimeToLive,
// and etcd's testMutexLock.
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
	if l1.HoldCount(owned) != 1 || l1.HoldCount(ctx) != 0 {
		t.Fatalf("HoldCount of the owner %d, of another goroutine %d", l1.HoldCount(owned), l1.HoldCount(ctx))
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
	for _, l := range []*dlock.DistributedReentrantLock{l1, l2} {
		if s := stateOf(t, l); s.Held() || s.Mine || s.LeaseLeft != 0 {
			t.Fatalf("released: %+v", s)
		}
	}
}

// The read-write lock's and the semaphore's State, and SetPermits, end with their context when
// Redis does not answer (a client that ignores the deadline waits its read timeout), and return
// ErrClosed after Close.
func TestSharedStateAndSetPermitsEndWithTheirContext(t *testing.T) {
	g, c := newGen(t)
	stuck := make(chan struct{})
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if op := sharedArg(cmd.Args(), "op"); op == "inspect" || op == "permits" {
			<-stuck // no answer, whatever the context says
		}
		return next(ctx, cmd)
	}})
	t.Cleanup(func() { close(stuck) }) // (before the Generator's Close)
	rw, err := g.GenRW("RW", uniqueTarget(t))
	if err != nil {
		t.Fatal(err)
	}
	s := semOf(t, g, uniqueTarget(t), 2)
	for _, call := range []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"RWLock.State", func(ctx context.Context) error { _, err := rw.State(ctx); return err }},
		{"Semaphore.State", func(ctx context.Context) error { _, err := s.State(ctx); return err }},
		{"Semaphore.SetPermits", func(ctx context.Context) error { return s.SetPermits(ctx, 3) }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- call.run(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s with Redis silent: %v, want the context's deadline", call.name, err)
			}
		case <-time.After(10 * time.Second): // (a hang made a failure)
			t.Fatalf("%s did not end with its context", call.name)
		}
		cancel()
	}

	g2, _ := newGen(t)
	rw2, _ := g2.GenRW("RW", uniqueTarget(t))
	s2 := semOf(t, g2, uniqueTarget(t), 2)
	if err := g2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	if _, err := rw2.State(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("RWLock.State after Close: %v", err)
	}
	if _, err := s2.State(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Semaphore.State after Close: %v", err)
	}
	if err := s2.SetPermits(ctx, 3); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("SetPermits after Close: %v", err)
	}
}
