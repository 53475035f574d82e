package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
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
	if s.Held() || s.Mine || s.LeaseLeft != 0 || s.ReservedFor != "" {
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
	// a waiter in another Generator leaves its mark
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := l2.Lock(wctx); done <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := l1.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := l2.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Waiting) > 0 && s2.LocalWaiters && !s.LocalWaiters {
			if strings.HasPrefix(s.Holder, s.Waiting[0]) {
				t.Fatalf("waiting mark %q is the holder's own (%q)", s.Waiting, s.Holder)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiting mark or local waiter seen: %+v / %+v", s, s2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if err := l1.Unlock(owned); err != nil {
		t.Fatal(err)
	}
}

func TestExtendRenewsWithTheNewLease(t *testing.T) {
	g, _ := newGen(t)
	l, _ := g.GenWithLease("API", target(t), 300*time.Millisecond)
	ctx := ctxT(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(owned, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	s, err := l.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.LeaseLeft <= 300*time.Millisecond {
		t.Fatalf("lease left %v after Extend to 5s", s.LeaseLeft)
	}
	// the renewals keep the new length: well past the old lease, still far above it
	time.Sleep(time.Second)
	if err := context.Cause(owned); err != nil {
		t.Fatalf("lost after Extend: %v", err)
	}
	if s, err = l.State(ctx); err != nil || s.LeaseLeft <= 300*time.Millisecond || !s.Mine {
		t.Fatalf("after 1s: %+v, %v", s, err)
	}
	if err := l.Extend(owned, time.Millisecond); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("bad lease: %v", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("not the owner: %v", err)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(owned, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("after Unlock: %v", err)
	}
	if s, err = l.State(ctx); err != nil || s.Held() {
		t.Fatalf("after Unlock: %+v, %v", s, err)
	}
}

func TestExtendOfALostLockSaysLost(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.Gen("API", target(t))
	ctx := ctxT(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, l.Config().UniqueKey(), "someone-else-1", time.Second) // taken from outside
	if err := l.Extend(owned, 2*time.Second); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Extend of a taken key: %v", err)
	}
	if !errors.Is(context.Cause(owned), dlock.ErrLockLost) {
		t.Fatalf("owner context: %v", context.Cause(owned))
	}
	if err := l.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock: %v", err)
	}
}

func TestForceReleaseWakesWaitersAndTellsTheHolder(t *testing.T) {
	for _, same := range []bool{true, false} {
		name := "holder elsewhere"
		if same {
			name = "holder in this generator"
		}
		t.Run(name, func(t *testing.T) {
			g1, _ := newGen(t)
			g2, _ := newGen(t)
			l1, _ := g1.GenWithLease("API", target(t), 3*time.Second)
			l2, _ := g2.GenWithLease("API", target(t), 3*time.Second)
			op := l2
			if same {
				op = l1
			}
			ctx := ctxT(t, 20*time.Second)
			owned, err := l1.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			got := make(chan context.Context, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, err := l2.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				got <- o
			}()
			waitFor(t, func() bool { s, _ := l1.State(ctx); return len(s.Waiting) > 0 })
			before, err := op.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			removed, err := op.ForceRelease(ctx, before.Holder)
			if err != nil {
				t.Fatal(err)
			}
			if !removed || before.Holder == "" || before.Mine != same {
				t.Fatalf("ForceRelease returned %v; the state before was %+v", removed, before)
			}
			o2 := <-got // well before the 3 s lease: the release message woke it
			wg.Wait()
			if same && !errors.Is(context.Cause(owned), dlock.ErrLockLost) {
				t.Fatalf("holder in the same generator not told: %v", context.Cause(owned))
			}
			// the old holder learns of the loss at its next renewal, at the latest
			waitFor(t, func() bool { return errors.Is(context.Cause(owned), dlock.ErrLockLost) })
			if err := l1.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("old holder's Unlock: %v", err)
			}
			if err := l2.Unlock(o2); err != nil {
				t.Fatal(err)
			}
			// a second copy of the same request finds that holder gone
			if removed, err := op.ForceRelease(ctx, before.Holder); err != nil || removed {
				t.Fatalf("ForceRelease of a holder already removed: %v, %v", removed, err)
			}
		})
	}
}


type recorder struct {
	dlock.NopObserver
	mu        sync.Mutex
	acquired  []dlock.AcquireEvent
	released  []dlock.ReleaseEvent
	lost      []dlock.LossEvent
	redisErrs []dlock.RedisErrorEvent
}

func (r *recorder) Acquired(e dlock.AcquireEvent) {
	r.mu.Lock()
	r.acquired = append(r.acquired, e)
	r.mu.Unlock()
}
func (r *recorder) Released(e dlock.ReleaseEvent) {
	r.mu.Lock()
	r.released = append(r.released, e)
	r.mu.Unlock()
}
func (r *recorder) Lost(e dlock.LossEvent) { r.mu.Lock(); r.lost = append(r.lost, e); r.mu.Unlock() }
func (r *recorder) RedisError(e dlock.RedisErrorEvent) {
	r.mu.Lock()
	r.redisErrs = append(r.redisErrs, e)
	r.mu.Unlock()
}

func TestObserverSeesAcquisitionsReleasesAndLosses(t *testing.T) {
	rec := &recorder{}
	g, c := newGen(t, dlock.WithObserver(rec))
	l, _ := g.Gen("API", target(t))
	ctx := ctxT(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// a second goroutine waits and gets the key by local hand-over
	got := make(chan context.Context, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	waitFor(t, func() bool { s, _ := l.State(ctx); return s.LocalWaiters })
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	o2 := <-got
	c.Del(ctx, l.Config().UniqueKey()) // lost from outside
	if err := l.Unlock(o2); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock after the key was deleted: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.acquired) != 2 || rec.acquired[0].How != dlock.HowAttempt || rec.acquired[1].How != dlock.HowHandOver {
		t.Fatalf("acquired: %+v", rec.acquired)
	}
	if rec.acquired[1].Token <= rec.acquired[0].Token || rec.acquired[0].Config.UniqueKey() != l.Config().UniqueKey() {
		t.Fatalf("acquired: %+v", rec.acquired)
	}
	if len(rec.released) != 2 || rec.released[0].Err != nil || !errors.Is(rec.released[1].Err, dlock.ErrLockLost) {
		t.Fatalf("released: %+v", rec.released)
	}
	if len(rec.lost) != 1 || !errors.Is(rec.lost[0].Cause, dlock.ErrLockLost) {
		t.Fatalf("lost: %+v", rec.lost)
	}
	if dlock.HowNotified.String() != "notified" || dlock.How(99).String() != "unknown" {
		t.Fatal("How names")
	}
}

func TestObserverSeesRedisErrors(t *testing.T) {
	rec := &recorder{}
	c := srv.Client()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second), dlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	l, _ := g.Gen("API", target(t))
	c.Close() // every request fails
	if _, ok, err := l.TryLock(context.Background()); ok || err == nil {
		t.Fatalf("TryLock on a closed client: %v %v", ok, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.redisErrs) == 0 || rec.redisErrs[0].Op != "lock" || rec.redisErrs[0].Key != l.Config().UniqueKey() {
		t.Fatalf("redis errors: %+v", rec.redisErrs)
	}
}

func TestNewAPIOnZeroValues(t *testing.T) {
	var l *dlock.DistributedReentrantLock
	ctx := context.Background()
	if _, err := l.State(ctx); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("State: %v", err)
	}
	if _, err := l.ForceRelease(ctx, "x"); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("ForceRelease: %v", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("Extend: %v", err)
	}
	var zero dlock.DistributedReentrantLock
	if _, err := zero.State(ctx); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("zero State: %v", err)
	}
	c := srv.Client()
	defer c.Close()
	if _, err := dlock.NewGenerator(c, dlock.WithObserver(nil)); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("nil observer: %v", err)
	}
	for _, bad := range [][2]any{{0, time.Second}, {1, time.Duration(0)}, {-1, time.Second}} {
		if _, err := dlock.NewGenerator(c, dlock.WithReplicaAck(bad[0].(int), bad[1].(time.Duration))); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Fatalf("WithReplicaAck%v: %v", bad, err)
		}
	}
}

// Every exported method on zero values and nil receivers returns ErrInvalidConfig (or the
// zero answer for questions) and never panics.
func TestZeroValuesNeverPanic(t *testing.T) {
	ctx := context.Background()
	call := func(name string, f func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panics: %v", name, r)
			}
		}()
		if err := f(); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	var zg dlock.Generator
	var ng *dlock.Generator
	for name, g := range map[string]*dlock.Generator{"zero": &zg, "nil": ng} {
		call(name+" Generator.Gen", func() error { _, err := g.Gen("T", "x"); return err })
		call(name+" Generator.GenWithLease", func() error { _, err := g.GenWithLease("T", "x", time.Second); return err })
		call(name+" Generator.Close", func() error { return g.Close(ctx) })
	}
	var zl dlock.DistributedReentrantLock
	var nl *dlock.DistributedReentrantLock
	for name, l := range map[string]*dlock.DistributedReentrantLock{"zero": &zl, "nil": nl} {
		call(name+" Lock", func() error { _, err := l.Lock(ctx); return err })
		call(name+" TryLock", func() error { _, _, err := l.TryLock(ctx); return err })
		call(name+" Unlock", func() error { return l.Unlock(ctx) })
		call(name+" Do", func() error { return l.Do(ctx, func(context.Context) error { return nil }) })
		call(name+" State", func() error { _, err := l.State(ctx); return err })
		call(name+" Extend", func() error { return l.Extend(ctx, time.Second) })
		call(name+" ForceRelease", func() error { _, err := l.ForceRelease(ctx, "x"); return err })
		call(name+" questions", func() error {
			if l.HoldCount(ctx) != 0 {
				return errors.New("HoldCount")
			}
			if _, ok := l.FencingToken(ctx); ok {
				return errors.New("FencingToken")
			}
			if l.Config().UniqueKey() != "" {
				return errors.New("Config")
			}
			return dlock.ErrInvalidConfig
		})
	}
	// nil contexts
	g, _ := newGen(t)
	l, _ := g.Gen("ZERO", target(t))
	//lint:ignore SA1012 a nil context is the point
	call("Lock(nil)", func() error { _, err := l.Lock(nil); return err })                      //nolint:staticcheck
	call("TryLock(nil)", func() error { _, _, err := l.TryLock(nil); return err })             //nolint:staticcheck
	call("State(nil)", func() error { _, err := l.State(nil); return err })                    //nolint:staticcheck
	call("ForceRelease(nil)", func() error { _, err := l.ForceRelease(nil, "x"); return err }) //nolint:staticcheck
	call("Do(nil fn)", func() error { return l.Do(ctx, nil) })
}
