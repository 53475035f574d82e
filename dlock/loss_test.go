package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

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

func TestLossIsAFactOfTheHolding(t *testing.T) {
	const typ = "RGLOST"
	const lease = 300 * time.Millisecond
	raw := rawClient(t)

	t.Run("plain", func(t *testing.T) {
		g := rgGen(t, nil, nil)
		target := rgTarget(t, 0)
		l := mustGen(t, g, typ, target, lease)
		owned, err := l.Lock(rgCtx(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		loseIt(t, raw, rgLockKey(typ, target))
		rgRecv(t, owned.Done(), 5*time.Second, "the owner context (after the loss)")
		checkLost(t, l, owned)
		if v := raw.Get(rgBG(), rgLockKey(typ, target)).Val(); v != "someone-else" {
			t.Errorf("the new holder's key was touched: %q", v)
		}
	})

	t.Run("lock-deadline-passed-first", func(t *testing.T) {
		g := rgGen(t, nil, nil)
		target := rgTarget(t, 0)
		l := mustGen(t, g, typ, target, lease)
		ctx, cancel := context.WithTimeout(rgBG(), 200*time.Millisecond)
		defer cancel()
		owned, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		loseIt(t, raw, rgLockKey(typ, target))
		if !rgWaitUntil(5*time.Second, func() bool { return errors.Is(context.Cause(owned), dlock.ErrLockLost) }) {
			t.Errorf("the loss never showed in the owner context: cause %v", context.Cause(owned))
		}
		checkLost(t, l, owned)
	})

	t.Run("nested-other-key", func(t *testing.T) {
		g := rgGen(t, nil, nil)
		lX := mustGen(t, g, typ, rgTarget(t, 0), lease)
		lY := mustGen(t, g, typ, rgTarget(t, 1), 10*time.Second)
		outer, err := lX.Lock(rgCtx(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		inner, err := lY.Lock(outer)
		if err != nil {
			t.Fatal(err)
		}
		loseIt(t, raw, rgLockKey(typ, rgTarget(t, 0)))
		rgRecv(t, outer.Done(), 5*time.Second, "the outer owner context (after the loss)")
		if !errors.Is(context.Cause(outer), dlock.ErrLockLost) {
			t.Errorf("outer cause %v, want ErrLockLost", context.Cause(outer))
		}
		if inner.Err() != nil {
			t.Errorf("the inner lock's owner context ended with the outer loss: %v", context.Cause(inner))
		}
		if n := lY.HoldCount(inner); n != 1 {
			t.Errorf("HoldCount(inner) = %d, want 1", n)
		}
		if err := lY.Unlock(inner); err != nil {
			t.Errorf("Unlock(inner) = %v, want nil", err)
		}
		if inner.Err() == nil {
			t.Errorf("inner owner context not done after its Unlock")
		}
		if err := lX.Unlock(outer); !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("Unlock(outer) = %v, want ErrLockLost", err)
		}
	})
}

// After a loss the key is given back, and the give-back wakes the local waiter once it is done
// (this process ignores its own release messages), so a waiter whose attempt ran before the
// give-back does not wait for the poller. Renewal replies are lost, so the lease runs out
// (loss); the give-back is slowed so the waiter's attempt fails first.
func TestGiveBackAfterALossWakesTheWaiter(t *testing.T) {
	g, c := newGen(t)
	lease := 600 * time.Millisecond
	l, _ := g.GenWithLease("RVLOSE", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	if p, err := processor.NewRedisLockProcessor(c, processor.Options{}); err != nil || p.Preload(ctx) != nil {
		t.Fatal("preload")
	}
	c.AddHook(lostReplyHook{match: scriptIs("renew")})
	slow := &slowHook{match: scriptIs("release"), delay: 20 * time.Millisecond}
	c.AddHook(slow)
	o1, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err == nil {
			err = l.Unlock(o)
		}
		got <- err
	}()
	<-o1.Done()
	probes := slow.probe.Load()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(o1), dlock.ErrLockLost) {
		t.Fatalf("first holder's cause %v", context.Cause(o1))
	}
	if slow.seen.Load() == 0 {
		t.Fatal("no give-back was seen")
	}
	if n := slow.probe.Load() - probes; n != 0 {
		t.Errorf("the waiter needed %d polls to learn of the give-back", n)
	}
}

// No pass after a loss: once the tenure is known to be lost (a renewal found the key gone), the
// holder is told, and the goroutine waiting in the same process gets the lock only from Redis,
// under a new locker, never by a pass under the lost one.
func TestNoPassAfterALoss(t *testing.T) {
	g, c := newGen(t)
	const lease = 300 * time.Millisecond
	l, _ := g.GenWithLease("NOPASS", target(t), lease)
	ctx := ctxT(t, 20*time.Second)
	o, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := l.State(ctx)
	if err != nil || !before.Mine {
		t.Fatalf("State: %+v, %v", before, err)
	}
	got := lockAsync(t, l, ctx)
	waitFor(t, func() bool { return g.Waiters(key(l)) })
	c.Del(ctx, key(l)) // lost from outside
	<-o.Done()         // the next renewal finds it gone
	if !errors.Is(context.Cause(o), dlock.ErrLockLost) {
		t.Fatalf("holder's cause %v", context.Cause(o))
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("holder's Unlock: %v", err)
	}
	w := recv(t, got, "the waiter")
	if w == nil {
		return
	}
	defer w.Unlock() //nolint:errcheck
	after, err := l.State(ctx)
	if err != nil || !after.Mine || after.Holder == before.Holder {
		t.Fatalf("the waiter holds under %q (%v), the lost tenure was %q", after.Holder, err, before.Holder)
	}
}

// A tenure that ends by a loss (here found at release) lets the subscription go, as a clean
// release does: nothing of the key's stays in the process.
func TestLossLetsTheSubscriptionGo(t *testing.T) {
	g, c := newGen(t)
	g2, _ := newGen(t)
	l, _ := g.GenWithLease("SUBLOSS", target(t), 2*time.Second)
	l2, _ := g2.GenWithLease("SUBLOSS", target(t), 2*time.Second)
	ctx := ctxT(t, 30*time.Second)
	o2, err := l2.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(t, l, ctx)
	waitFor(t, func() bool { return g.Subscribed() == 1 }) // it waits, and watches
	if err := o2.Unlock(); err != nil {
		t.Fatal(err)
	}
	o := recv(t, got, "Lock")
	if o == nil {
		t.FailNow()
	}
	if err := c.Del(ctx, key(l)).Err(); err != nil { // lost
		t.Fatal(err)
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock: %v", err)
	}
	waitFor(t, func() bool { return g.InUse() == 0 && g.Subscribed() == 0 }) // after the linger
}
