package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

func TestNewGeneratorRejectsBadInput(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	cases := []struct {
		name string
		opts []dlock.Option
	}{
		{"nil option", []dlock.Option{nil}},
		{"nil logger", []dlock.Option{dlock.WithLogger(nil)}},
		{"short default lease", []dlock.Option{dlock.WithDefaultLease(time.Millisecond)}},
		{"blank type", []dlock.Option{dlock.WithLeases(map[string]time.Duration{"": time.Second})}},
		{"bad lease", []dlock.Option{dlock.WithLeases(map[string]time.Duration{"T": -time.Second})}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := dlock.NewGenerator(c, tc.opts...); !errors.Is(err, dlock.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
	if _, err := dlock.NewGenerator(nil); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("nil client: err = %v", err)
	}
}

func TestGenRejectsBadInput(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithLeases(map[string]time.Duration{"ORDER": time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	for _, tc := range []struct{ typ, target string }{
		{"", "x"}, {"OR DER", "x"}, {"ORDER", "   "}, {"ORDER", "a\x00b"}, {"USER", "7"}, {"ORDER", "a}b"},
	} {
		if _, err := g.Gen(tc.typ, tc.target); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("Gen(%q, %q) err = %v, want ErrInvalidConfig", tc.typ, tc.target, err)
		}
	}
	if _, err := g.GenWithLease("ORDER", "x", 5*time.Millisecond); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("short lease: err = %v", err)
	}
	l, err := g.Gen("ORDER", "  42 ")
	if err != nil {
		t.Fatal(err)
	}
	if k := l.Config().UniqueKey(); k != "DLOCK_ORDER_42" {
		t.Fatalf("key %q, want DLOCK_ORDER_42", k)
	}
	if _, err := l.Lock(nil); !errors.Is(err, dlock.ErrInvalidConfig) { //nolint:staticcheck // nil context on purpose
		t.Fatalf("nil ctx: %v", err)
	}
}

func TestReentry(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.Gen("RE", target(t))
	ctx := ctxT(t, 10*time.Second)
	o1, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := l.Lock(o1)
	if err != nil || o2 != o1 {
		t.Fatalf("re-entry: %v", err)
	}
	if ok := func() bool { _, ok, _ := l.TryLock(o1); return ok }(); !ok {
		t.Fatal("TryLock by the owner failed")
	}
	if n := l.HoldCount(o1); n != 3 {
		t.Fatalf("hold count %d, want 3", n)
	}
	for i := 0; i < 2; i++ {
		if err := l.Unlock(o1); err != nil {
			t.Fatal(err)
		}
	}
	if c.Exists(ctx, l.Config().UniqueKey()).Val() != 1 {
		t.Fatal("key released before the last unlock")
	}
	if err := l.Unlock(o1); err != nil {
		t.Fatal(err)
	}
	if o1.Err() == nil {
		t.Fatal("owner context not ended by the release")
	}
	if c.Exists(ctx, l.Config().UniqueKey()).Val() != 0 || l.HoldCount(o1) != 0 {
		t.Fatal("key or hold left after the last unlock")
	}
	if err := l.Unlock(o1); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("extra unlock: %v", err)
	}
	if g.InUse() != 0 {
		t.Fatalf("%d lock states kept after use", g.InUse())
	}
}

func TestUnlockByNonOwnerSendsNothing(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.Gen("NONOWNER", target(t))
	ctx := ctxT(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := g.Gen("NONOWNER", target(t)+"-other")
	before := commands(t, c)
	for _, bad := range []context.Context{ctx, context.Background()} {
		if err := l.Unlock(bad); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("unlock by non-owner: %v", err)
		}
	}
	if err := other.Unlock(owned); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("unlock of another lock: %v", err)
	}
	if n := commands(t, c) - before; n != 1 { // the INFO call itself
		t.Fatalf("non-owner unlocks sent %d commands to Redis", n-1)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
}

func TestTryLockHeldElsewhere(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.Gen("TRY", target(t))
	l2, _ := g2.Gen("TRY", target(t))
	ctx := ctxT(t, 10*time.Second)
	owned, ok, err := l1.TryLock(ctx)
	if err != nil || !ok {
		t.Fatalf("TryLock on a free key: %v %v", ok, err)
	}
	if _, ok, err := l2.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock held by another process: %v %v", ok, err)
	}
	if _, ok, err := l1.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock held by another goroutine: %v %v", ok, err)
	}
	if tok, ok := l1.FencingToken(owned); !ok || tok == 0 {
		t.Fatal("no fencing token")
	}
	l1.Unlock(owned)
	if g2.InUse() != 0 || g1.InUse() != 0 {
		t.Fatal("states kept after failed TryLock")
	}
}

func TestWaiterDeadline(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.Gen("DEADLINE", target(t))
	l2, _ := g2.Gen("DEADLINE", target(t))
	owned, err := l1.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Unlock(owned)
	for _, gen := range []*dlock.Generator{g1, g2} { // a local and a remote waiter
		l, _ := gen.Gen("DEADLINE", target(t))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := l.Lock(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("err = %v, want DeadlineExceeded and ErrNotObtained", err)
		}
		if gen.Waiters(l.Config().UniqueKey()) {
			t.Fatal("the waiter is still queued")
		}
	}
	_ = l2
	settled(t, g2)
}

func TestDo(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.Gen("DO", target(t))
	ctx := ctxT(t, 10*time.Second)
	boom := errors.New("boom")
	err := l.Do(ctx, func(owned context.Context) error {
		if l.HoldCount(owned) != 1 {
			t.Error("fn does not own the lock")
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v", err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = l.Do(ctx, func(context.Context) error { panic("fn panics") })
	}()
	if c.Exists(ctx, l.Config().UniqueKey()).Val() != 0 {
		t.Fatal("Do left the key behind")
	}
}

func TestLostLease(t *testing.T) {
	for _, how := range []string{"deleted", "overwritten"} {
		t.Run(how, func(t *testing.T) {
			g, c := newGen(t)
			l, _ := g.GenWithLease("LOST", target(t), 200*time.Millisecond)
			ctx := ctxT(t, 10*time.Second)
			owned, err := l.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			key := l.Config().UniqueKey()
			t.Cleanup(func() { c.Del(context.Background(), key) })
			if how == "deleted" {
				c.Del(ctx, key)
			} else {
				c.Set(ctx, key, "someone-else", time.Minute)
			}
			select {
			case <-owned.Done():
			case <-ctx.Done():
				t.Fatal("owner context not ended after the key was taken")
			}
			if cause := context.Cause(owned); !errors.Is(cause, dlock.ErrLockLost) {
				t.Fatalf("cause = %v, want ErrLockLost", cause)
			}
			if _, err := l.Lock(owned); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("re-entry after loss: %v", err)
			}
			if err := l.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock after loss = %v, want ErrLockLost", err)
			}
			if how == "overwritten" && c.Get(ctx, key).Val() != "someone-else" {
				t.Fatal("the old owner deleted the new owner's key")
			}
		})
	}
}

func TestRenewalKeepsTheLock(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.GenWithLease("RENEW", target(t), 100*time.Millisecond)
	ctx := ctxT(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // five leases
	if owned.Err() != nil || c.Exists(ctx, l.Config().UniqueKey()).Val() != 1 {
		t.Fatal("lock not kept by renewals")
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
}

func TestCloseReleasesAndEndsWaiters(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	g, _ := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	l, _ := g.Gen("CLOSE", target(t))
	ctx := ctxT(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error)
	go func() { _, err := l.Lock(ctx); errs <- err }()
	for !g.Waiters(l.Config().UniqueKey()) {
		time.Sleep(time.Millisecond)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("waiter after Close: %v", err)
	}
	if !errors.Is(context.Cause(owned), dlock.ErrClosed) {
		t.Fatalf("owner cause %v", context.Cause(owned))
	}
	if c.Exists(ctx, l.Config().UniqueKey()).Val() != 0 {
		t.Fatal("Close left the key held")
	}
	if err := l.Unlock(owned); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Unlock after Close: %v", err)
	}
	if _, err := l.Lock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Lock after Close: %v", err)
	}
	if _, err := g.Gen("CLOSE", "x"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Gen after Close: %v", err)
	}
}

// contend runs goroutines × rounds lock trips on handles from gens and fails on overlap.
func contend(t *testing.T, gens []*dlock.Generator, typ string, goroutines, rounds int, hold time.Duration) {
	t.Helper()
	var inside, done atomic.Int64
	var wg sync.WaitGroup
	ctx := ctxT(t, 2*time.Minute)
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, _ := gens[i%len(gens)].Gen(typ, target(t))
			for r := 0; r < rounds; r++ {
				owned, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two owners at once")
				}
				time.Sleep(hold)
				inside.Add(-1)
				done.Add(1)
				if err := l.Unlock(owned); err != nil {
					t.Error(err)
				}
			}
		}(i)
	}
	wg.Wait()
	if done.Load() != int64(goroutines*rounds) {
		t.Fatalf("%d trips, want %d", done.Load(), goroutines*rounds)
	}
	for _, g := range gens {
		settled(t, g)
	}
}

func TestContendedFIFO(t *testing.T) {
	g1, _ := newGen(t, dlock.WithFIFO())
	g2, _ := newGen(t, dlock.WithFIFO())
	contend(t, []*dlock.Generator{g1, g2}, "FIFO", 16, 20, 100*time.Microsecond)
}

func TestContendedWithoutNotifications(t *testing.T) {
	g1, _ := newGen(t, dlock.WithNotifications(false))
	g2, _ := newGen(t, dlock.WithNotifications(false))
	contend(t, []*dlock.Generator{g1, g2}, "POLLONLY", 8, 10, time.Millisecond)
}

// settled waits until g keeps no lock state and no subscription: unsubscribing runs in the
// background, after the last waiter left. The bound (5 s) only turns a leak into a failure.
func settled(t *testing.T, g *dlock.Generator) {
	t.Helper()
	for i := 0; g.InUse() != 0 || g.Subscribed() != 0; i++ {
		if i == 500 {
			t.Fatalf("left behind: %d states, %d subscriptions", g.InUse(), g.Subscribed())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockOnce locks and unlocks l in a goroutine and reports the outcome.
func lockOnce(ctx context.Context, l *dlock.DistributedReentrantLock) <-chan error {
	got := make(chan error, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err == nil {
			err = l.Unlock(o)
		}
		got <- err
	}()
	return got
}

// A release notification, not the poller, wakes a waiting process: with a long lease the
// poller would need seconds.
func TestNotificationWakesRemoteWaiter(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.GenWithLease("NOTIFY", target(t), time.Minute)
	l2, _ := g2.GenWithLease("NOTIFY", target(t), time.Minute)
	ctx := ctxT(t, 30*time.Second)
	owned, err := l1.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockOnce(ctx, l2)
	for g2.Subscribed() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the subscription take effect
	start := time.Now()
	l1.Unlock(owned)
	// The poller's first check comes at lease/10 = 6 s; a wake-up before 5 s can only be the
	// notification.
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("hand-off took %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the remote waiter was not woken by the release notification")
	}
}

// A release that happens while the waiter's subscription is being set up is caught by the
// check made once the subscription is confirmed, not by the poller.
func TestReleaseRacingSubscription(t *testing.T) {
	for i := 0; i < 20; i++ {
		g1, _ := newGen(t)
		g2, _ := newGen(t)
		l1, _ := g1.GenWithLease("RACE", target(t), time.Minute)
		l2, _ := g2.GenWithLease("RACE", target(t), time.Minute)
		ctx := ctxT(t, 30*time.Second)
		owned, err := l1.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := lockOnce(ctx, l2)
		for !g2.Waiters(l2.Config().UniqueKey()) {
			time.Sleep(10 * time.Microsecond)
		}
		l1.Unlock(owned) // at about the moment l2 subscribes
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: waiter missed a release that raced its subscription", i)
		}
	}
}

// commands returns the server's total_commands_processed.
