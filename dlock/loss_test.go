package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
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

// A renewal that gets no answer before the lease runs out loses the lock, and the cause says
// what happened without blaming a caller's context: no caller's context bounds a renewal.
func TestLossByAnUnansweredRenewalSaysSo(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.GenWithLease("UNANSWERED", target(t), 2*time.Second) // (its renewal, at 75 %, is sent by a stalled process too: 300 ms, and 1 s, let a stall outrun it)
	ctx := ctxT(t, 10*time.Second)
	var on atomic.Bool
	c.AddHook(unanswered("renew", &on))
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	on.Store(true)
	select {
	case <-owned.Done():
	case <-ctx.Done():
		t.Fatal("the holding outlived its lease without a renewal answered")
	}
	cause := context.Cause(owned)
	if !errors.Is(cause, dlock.ErrLockLost) || !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("cause = %v, want ErrLockLost and the deadline", cause)
	}
	if strings.Contains(cause.Error(), "caller") {
		t.Fatalf("the loss blames a caller: %q", cause)
	}
}

// A holding kept longer than its lease is renewed: the key stays and the Owner stays live.
func TestRenewalKeepsTheLock(t *testing.T) {
	g, c := newGen(t)
	const lease = 3 * time.Second // (its renewal, at 75 %, has 750 ms to spare on a loaded machine)
	l, _ := g.GenWithLease("RENEW", target(t), lease)
	ctx := ctxT(t, 20*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease * 5 / 2) // two and a half leases
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

// A holder whose process stalls — every renewal it sends hangs on its way, and in the second
// case its Unlock's release too — loses the key once its lease has run out, and another
// process gets it: the stalled holder's owner context has ended with ErrLockLost (its Unlock
// says so), or its stalled Unlock says its release came too late (a *RedisProcessError,
// documented: the holding was released, not lost, when Unlock was called); the requests it
// sent, delivered late, leave the new holder's key alone. Ports Redisson's testAutoExpire and
// testExpire, RedissonFairLockTest's testLeaseTimeout, bsm/redislock's TestLock_Release_expired
// and TestLock_Release_not_own, and redsync's TestMutexUnlockExpired.
func TestStalledHolderLeavesTheNextHolderAlone(t *testing.T) {
	for _, releaseStalls := range []bool{false, true} {
		t.Run(map[bool]string{false: "renewals stall", true: "release stalls"}[releaseStalls], func(t *testing.T) {
			g1, c1 := newGen(t)
			g2, _ := newGen(t)
			l1, _ := g1.GenWithLease("STALL", target(t), 300*time.Millisecond)
			l2, _ := g2.GenWithLease("STALL", target(t), 5*time.Second)
			ctx := ctxT(t, 20*time.Second)
			w := newWire(t, c1)
			t.Cleanup(w.unstallAll) // before Close, which waits for the stalled calls
			o1 := mustLock(t, l1, ctx)
			w.stall("renew", 1000)
			unlocked := make(chan error, 1)
			if releaseStalls {
				w.stall("release", 1000)
				go func() { unlocked <- o1.Unlock() }()
			}
			o2 := mustLock(t, l2, ctx) // waits for the lease to run out
			if releaseStalls {
				var pe *dlock.RedisProcessError
				if err := recv(t, unlocked, "the stalled Unlock"); !errors.As(err, &pe) {
					t.Fatalf("Unlock whose release outlived the lease = %v, want a *RedisProcessError", err)
				}
			} else {
				if !errors.Is(context.Cause(o1), dlock.ErrLockLost) {
					t.Fatalf("another process holds the key while the stalled holder's owner context is %s", fmtCause(o1))
				}
				checkLost(t, l1, o1)
			}
			w.unstallAll()
			waitFor(t, func() bool { return g1.InUse() == 0 })
			if s := stateOf(t, l2); !s.Mine || o2.Err() != nil || s.LeaseLeft <= 2500*time.Millisecond {
				t.Fatalf("the new holder after the old one's late requests: %+v, owner %s", s, fmtCause(o2))
			}
			if err := o2.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A holder whose key expired unseen and was taken by another process, and that has not noticed
// yet, unlocks: ErrLockLost, again on a second Unlock, and the new holder's key is left alone;
// giving up a re-entry sends nothing, the loss shows on the last Unlock. Ports bsm/redislock's
// TestLock_Release_not_own and Redisson's testExpire.
func TestUnlockBeforeTheLossWasNoticedSaysLost(t *testing.T) {
	g1, c := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.GenWithLease("UNSEEN", target(t), 5*time.Second)
	l2, _ := g2.GenWithLease("UNSEEN", target(t), 5*time.Second)
	ctx := ctxT(t, 10*time.Second)
	for _, reentered := range []bool{false, true} {
		o1 := mustLock(t, l1, ctx)
		if reentered {
			mustLock(t, l1, o1)
		}
		c.Del(ctx, key(l1)) // its lease ran out unseen
		o2, ok, err := l2.TryLock(ctx)
		if !ok || err != nil {
			t.Fatalf("TryLock of the expired key = %v, %v", ok, err)
		}
		if reentered {
			if err := o1.Unlock(); err != nil && !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("first Unlock of a re-entered, taken key = %v", err)
			}
		}
		for range 2 { // a lost lock stays lost
			if err := o1.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock after another took the key = %v, want ErrLockLost", err)
			}
		}
		if s := stateOf(t, l2); !s.Mine || o2.Err() != nil {
			t.Fatalf("the old holder's Unlock released the new holder's key: %+v, owner %s", s, fmtCause(o2))
		}
		if err := o2.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

// A holding whose lease ran out by its process's own clock before its lease thread (or the
// family's expiry timer) said so — a busy machine runs them late — is lost, of every kind, for
// every call of its owner: its Unlock returns an error matching ErrLockLost (not a
// *RedisProcessError about a release it never sent, nor nil), also the Unlock of a re-entry, and
// so does every later Unlock; a re-entry (Lock, TryLock), a downgrade (RLock with the write
// owner) and the mutex's Extend return the loss too, counting no hold and lending the holding to
// no new Owner; HoldCount says 0 and FencingToken ok false; the owner context ends with that
// cause; and the key, which Redis keeps a little longer than the holder counts it held, is
// given back: another process gets it at once.
func TestUnlockAfterTheLeaseRanOutUnseenSaysLost(t *testing.T) {
	g, _ := newGen(t, dlock.WithDefaultLease(5*time.Second)) // (its lease thread renews at 3.75 s)
	other, _ := newGen(t, dlock.WithDefaultLease(5*time.Second))
	tg := uniqueTarget(t)
	mu, sem, rw := everyKind(t, g, tg, 1)
	omu, osem, orw := everyKind(t, other, tg, 1)
	ctx := ctxT(t, 60*time.Second)
	// The family's channels subscribed for good first: a confirmation has the holdings renew
	// at once, which would count a lease anew after Lapse.
	g.SetLinger(time.Hour)
	for _, p := range []dlock.Part{rw.ReadSide(), sem.Permits(1)} {
		o, err := p.Lock(ctx)
		if err == nil {
			err = o.Unlock()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return g.Confirmed() >= 2 })
	// noOwner says what is wrong with a call that should have returned the loss.
	noOwner := func(x *dlock.Owner, err error) error {
		if x != nil || !errors.Is(err, dlock.ErrLockLost) {
			return fmt.Errorf("%v, %v; want no Owner and ErrLockLost", x, err)
		}
		return nil
	}
	type call struct {
		name string
		do   func(o *dlock.Owner) error // nil when the call reported the loss
	}
	for _, c := range []struct {
		name       string
		part, shut dlock.Part // the lock, and what another process can take once it is let go
		count      func(context.Context) int
		more       []call // calls of this kind only
	}{
		{"mutex", mu, omu, mu.HoldCount, []call{{"Extend", func(o *dlock.Owner) error {
			if err := mu.Extend(o, 5*time.Second); !errors.Is(err, dlock.ErrLockLost) {
				return fmt.Errorf("%v, want ErrLockLost", err)
			}
			return nil
		}}}},
		{"read side", rw.ReadSide(), orw.WriteSide(), rw.HoldCount, nil},
		{"write side", rw.WriteSide(), orw.ReadSide(), rw.HoldCount, []call{{"downgrade", func(o *dlock.Owner) error {
			return noOwner(rw.RLock(o))
		}}}},
		{"permits", sem.Permits(1), osem.Permits(1), sem.HoldCount, nil},
	} {
		// What the owner calls first after the lapse, before its Unlocks.
		firsts := append([]call{
			{"Unlock", nil},
			{"Lock", func(o *dlock.Owner) error { return noOwner(c.part.Lock(o)) }},
			{"TryLock", func(o *dlock.Owner) error {
				x, _, err := c.part.TryLock(o)
				return noOwner(x, err)
			}},
			{"Err", func(o *dlock.Owner) error {
				if err := o.Err(); err == nil {
					return fmt.Errorf("nil, want the owner context ended")
				}
				return nil
			}},
			{"HoldCount", func(o *dlock.Owner) error {
				if n := c.count(o); n != 0 {
					return fmt.Errorf("%d, want 0", n)
				}
				return nil
			}},
			{"FencingToken", func(o *dlock.Owner) error {
				if tok, ok := c.part.FencingToken(o); ok {
					return fmt.Errorf("%d, true; want false", tok)
				}
				return nil
			}},
		}, c.more...)
		for _, first := range firsts {
			for _, reentered := range []bool{false, true} {
				name := fmt.Sprintf("%s (re-entered %v, then %s)", c.name, reentered, first.name)
				o, err := c.part.Lock(ctx)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if reentered {
					if _, err := c.part.Lock(o); err != nil {
						t.Fatalf("%s: re-entry: %v", name, err)
					}
				}
				g.Lapse(c.part.Config().UniqueKey())
				if first.do != nil {
					if err := first.do(o); err != nil {
						t.Fatalf("%s: %s after the lease ran out unseen = %v", name, first.name, err)
					}
				}
				for i := range 3 { // a lost holding stays lost
					if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
						t.Fatalf("%s: Unlock %d after the lease ran out unseen = %v, want ErrLockLost", name, i+1, err)
					}
				}
				if !errors.Is(context.Cause(o), dlock.ErrLockLost) {
					t.Fatalf("%s: the owner's cause = %v, want ErrLockLost", name, context.Cause(o))
				}
				if !rgWaitUntil(3*time.Second, func() bool {
					x, ok, err := c.shut.TryLock(ctx)
					if ok {
						err = x.Unlock()
					}
					if err != nil {
						t.Errorf("%s: the other process: %v", name, err)
					}
					return ok
				}) {
					t.Fatalf("%s: the key was not given back after the loss", name)
				}
			}
		}
	}
}

// A read-write lock's or semaphore's Owner, and a MultiLock's Owner made of it, ends as its
// holding is found lost — on the goroutine that finds it (the expiry timer), not a goroutine's
// hop later, which would eat into the drift allowance the lease is counted with — with a
// cause that matches ErrLockLost.
func TestFamilyOwnerEndsAsItsHoldingIsLost(t *testing.T) {
	for _, kind := range []string{"read", "write", "permits", "multi"} {
		t.Run(kind, func(t *testing.T) {
			g, _ := newGen(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 10*time.Second)
			var o *dlock.Owner
			var err error
			key := ""
			switch kind {
			case "read", "write":
				rw := rwOf(t, g, tg)
				key = rw.Config().UniqueKey()
				if kind == "read" {
					o, err = rw.RLock(ctx)
				} else {
					o, err = rw.Lock(ctx)
				}
			case "permits", "multi":
				sem := semOf(t, g, tg, 2)
				key = sem.Config().UniqueKey()
				if kind == "permits" {
					o, err = sem.Acquire(ctx, 1)
				} else {
					var m *dlock.MultiLock
					if m, err = g.MultiOf(sem.Permits(1)); err == nil {
						o, err = m.Lock(ctx)
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			defer o.Unlock() //nolint:errcheck
			g.EndSharedHoldings(key)
			if !errors.Is(context.Cause(o), dlock.ErrLockLost) {
				t.Fatalf("just after the holding ended its Owner says %v, want a loss", context.Cause(o))
			}
		})
	}
}

// A read-write lock's or a semaphore's holding whose renewals keep failing until its lease runs
// out is lost, and the cause names the last failure, as a mutex's does: "the lease ran out
// without a successful renewal" alone tells an operator nothing of what Redis did (a Cluster
// shard down, say, CLUSTERDOWN).
func TestFamilyLossByFailedRenewalsNamesTheFailure(t *testing.T) {
	for _, kind := range []string{"read", "write", "permits"} {
		t.Run(kind, func(t *testing.T) {
			g, c := newGen(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			const failure = "the renewal failed on purpose"
			var on atomic.Bool
			defer on.Store(false)
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if on.Load() && sharedArg(cmd.Args(), "op") == "renew" {
					err := errors.New(failure)
					cmd.SetErr(err)
					return err
				}
				return next(ctx, cmd)
			}})
			var o *dlock.Owner
			var err error
			switch kind {
			case "read":
				o, err = rwOf(t, g, tg).RLock(ctx)
			case "write":
				o, err = rwOf(t, g, tg).Lock(ctx)
			default:
				o, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer o.Unlock() //nolint:errcheck
			on.Store(true)
			select {
			case <-o.Done():
			case <-ctx.Done():
				t.Fatal("the holding outlived its lease with every renewal failing")
			}
			cause := context.Cause(o)
			if !errors.Is(cause, dlock.ErrLockLost) || !strings.Contains(cause.Error(), failure) {
				t.Fatalf("cause = %v, want ErrLockLost naming the renewals' failure (%q)", cause, failure)
			}
		})
	}
}

// A read-write lock's or a semaphore's holding whose lease runs out while its renewal is on its
// way unanswered (a Cluster master killed: the dial hangs or is refused again and again) says
// so, as the mutex's does ("no answer"), rather than the bare "the lease ran out".
func TestFamilyLossWithARenewalUnansweredSaysSo(t *testing.T) {
	for _, kind := range []string{"read", "permits"} {
		t.Run(kind, func(t *testing.T) {
			g, c := newGen(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			var on atomic.Bool
			defer on.Store(false)
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if on.Load() && sharedArg(cmd.Args(), "op") == "renew" {
					<-ctx.Done() // (the driver's bound of a third of the lease)
					cmd.SetErr(ctx.Err())
					return ctx.Err()
				}
				return next(ctx, cmd)
			}})
			var o *dlock.Owner
			var err error
			if kind == "read" {
				o, err = rwOf(t, g, tg).RLock(ctx)
			} else {
				o, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer o.Unlock() //nolint:errcheck
			// The renewal due at three quarters of the 1 s lease is on its way as the lease runs
			// out; any sent before half the lease is answered. (On a machine so slow that the
			// take's own answer comes after this, that renewal's failure is named instead.)
			time.AfterFunc(500*time.Millisecond, func() { on.Store(true) })
			select {
			case <-o.Done():
			case <-ctx.Done():
				t.Fatal("the holding outlived its lease without a renewal answered")
			}
			cause := context.Cause(o)
			if !errors.Is(cause, dlock.ErrLockLost) || !strings.Contains(cause.Error(), "no answer") {
				t.Fatalf("cause = %v, want ErrLockLost saying the renewal got no answer", cause)
			}
		})
	}
}

// A holding lost because its renewals got no answer before its lease ran out names, besides,
// the failure of this process's way to Redis meanwhile (here: other requests' connections
// refused, as when a Cluster master dies), for the mutex as for the family: "no answer" alone
// reads as a slow Redis.
func TestLossWithARenewalUnansweredNamesTheFailureMeanwhile(t *testing.T) {
	for _, kind := range []string{"mutex", "read", "permits"} {
		t.Run(kind, func(t *testing.T) {
			g, c := newGen(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			var on atomic.Bool
			defer on.Store(false)
			renewing := make(chan struct{}, 1)
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if !on.Load() {
					return next(ctx, cmd)
				}
				if sharedArg(cmd.Args(), "op") == "renew" || processor.ScriptName(cmd.Args()) == "renew" {
					select {
					case renewing <- struct{}{}:
					default:
					}
					<-ctx.Done() // (no answer)
					cmd.SetErr(ctx.Err())
					return ctx.Err()
				}
				err := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
				cmd.SetErr(err)
				return err
			}})
			var o *dlock.Owner
			var err error
			var state func() error
			switch kind {
			case "mutex":
				l, _ := g.Gen("LOSS", tg)
				o, err = l.Lock(ctx)
				state = func() error { _, err := l.State(ctx); return err }
			case "read":
				rw := rwOf(t, g, tg)
				o, err = rw.RLock(ctx)
				state = func() error { _, err := rw.State(ctx); return err }
			default:
				s := semOf(t, g, tg, 2)
				o, err = s.Acquire(ctx, 1)
				state = func() error { _, err := s.State(ctx); return err }
			}
			if err != nil {
				t.Fatal(err)
			}
			defer o.Unlock() //nolint:errcheck
			on.Store(true)
			recv(t, renewing, "a renewal")
			// Other requests of the process keep failing, as every dial does once a master died
			// (a renewal that got no answer may be tried again meanwhile: the failure named is
			// one that came after the last renewal was sent).
			for done := false; !done; {
				if err := state(); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("State with connections refused = %v", err)
				}
				select {
				case <-o.Done():
					done = true
				case <-ctx.Done():
					t.Fatal("the holding outlived its lease without a renewal answered")
				case <-time.After(10 * time.Millisecond):
				}
			}
			if cause := context.Cause(o); !errors.Is(cause, dlock.ErrLockLost) || !strings.Contains(cause.Error(), "connection refused") {
				t.Fatalf("cause = %v, want ErrLockLost naming the connection refused meanwhile", cause)
			}
		})
	}
}

// Leases under MinLease (30 ms) or not whole milliseconds are refused with ErrInvalidConfig;
// a 30 ms lease works: taken, renewed, released (on a loaded machine a loss is reported as
// ErrLockLost, a release that came too late as a *RedisProcessError; never silently). A
// regression test of the lease bounds. Ports bsm/redislock's quickObtain with 5 ms and 20 ms
// TTLs and TestObtain_retry_success, and redsync's 500 ms expiry.
func TestShortestLeaseIsKeptAndShorterRefused(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	for _, bad := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, domain.MinLease - time.Millisecond, 30*time.Millisecond + 500*time.Microsecond} {
		if _, err := g1.GenWithLease("SHORT", target(t), bad); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("GenWithLease(%v) = %v, want ErrInvalidConfig", bad, err)
		}
	}
	if _, err := dlock.NewGenerator(rawClient(t), dlock.WithDefaultLease(20*time.Millisecond)); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("WithDefaultLease(20ms) = %v, want ErrInvalidConfig", err)
	}
	ctx := ctxT(t, 20*time.Second)
	var wg sync.WaitGroup
	for _, g := range []*dlock.Generator{g1, g2} {
		l, err := g.GenWithLease("SHORT", target(t), domain.MinLease)
		if err != nil {
			t.Fatalf("GenWithLease(MinLease): %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 10; r++ {
				o, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if s, err := l.State(ctx); err != nil || s.LeaseLeft > domain.MinLease {
					t.Errorf("State = %+v, %v: more than the 30 ms lease left", s, err)
				}
				time.Sleep(40 * time.Millisecond) // over a lease: renewed meanwhile
				var pe *dlock.RedisProcessError
				if err := o.Unlock(); err != nil && !errors.Is(err, dlock.ErrLockLost) && !errors.As(err, &pe) {
					t.Errorf("Unlock: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	l, _ := g1.Gen("SHORT", target(t))
	waitFor(t, func() bool { return !stateOf(t, l).Held() })
}

// After a restart that lost the key, a late copy of the holder's own take (go-redis sends a
// request again after a read timeout) takes the key anew for the holder's locker, though
// another process held it in between: the holder's next renewal names the holding its tenure
// began with, finds another, and ends the tenure as lost; that new holding is let go, and the
// other process takes the key again.
func TestKeyTakenAnewForTheHolderIsALoss(t *testing.T) {
	for _, granted := range []bool{false, true} {
		t.Run(map[bool]string{false: "taken", true: "granted"}[granted], func(t *testing.T) {
			keyTakenAnewIsALoss(t, granted)
		})
	}
}

// keyTakenAnewIsALoss is TestKeyTakenAnewForTheHolderIsALoss for a holder that took the key,
// or that waited in line and was granted it (its tenure's origin is then the grant's token).
func keyTakenAnewIsALoss(t *testing.T, granted bool) {
	g, c := newGen(t) // a 1 s lease
	gb, _ := newGen(t)
	w := newWire(t, c)
	l, _ := g.Gen("ANEW", target(t))
	lb, _ := gb.Gen("ANEW", target(t))
	ctx := ctxT(t, 30*time.Second)
	var o *dlock.Owner
	if granted {
		ob := mustLock(t, lb, ctx)
		got := make(chan *dlock.Owner, 1)
		go func() { got <- mustLock(t, l, ctx) }()
		// in line, heard by Redis, and no request on its way: the grant's message starts the tenure
		waitFor(t, func() bool { _, heard, ok := g.Place(key(l)); return ok && heard })
		if err := ob.Unlock(); err != nil { // granted to the holder-to-be in line
			t.Fatal(err)
		}
		o = recv(t, got, "the granted Lock")
	} else {
		o = mustLock(t, l, ctx)
	}
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
	select {
	case <-o.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the holder was never told it lost the key")
	}
	if !errors.Is(context.Cause(o), dlock.ErrLockLost) {
		t.Fatalf("the holder's cause = %v, want ErrLockLost", context.Cause(o))
	}
	if got := rc.Get(ctx, key).Val(); got == holder {
		t.Fatalf("the key still holds %q after the loss", got)
	}
	ob = mustLock(t, lb, ctx)
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("the holder's Unlock = %v, want ErrLockLost", err)
	}
}

// A holder still subscribed to its key (it waited for it, and the subscription lingers) whose
// subscription drops as Redis restarts empty renews as soon as it is subscribed again: it
// learns that its holding is gone then, not at its next renewal (three quarters of a minute
// here), and another process takes the free key.
func TestHolderRenewsOnceSubscribedAgain(t *testing.T) {
	s := ownServer(t)
	if !s.CanRestart() {
		t.Skip("needs a redis-server it can restart")
	}
	ga := genOn(t, s.Client(), dlock.WithDefaultLease(time.Minute))
	gb := genOn(t, s.Client(), dlock.WithDefaultLease(time.Minute))
	ga.SetLinger(time.Hour)
	la, _ := ga.Gen("RESUB", target(t))
	lb, _ := gb.Gen("RESUB", target(t))
	ctx := ctxT(t, 60*time.Second)
	b, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners := make(chan *dlock.Owner, 1)
	go func() {
		o, err := la.Lock(ctx)
		if err != nil {
			t.Errorf("Lock: %v", err)
			return
		}
		owners <- o
	}()
	waitFor(t, func() bool { return ga.Confirmed() > 0 })
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	a := recv(t, owners, "a to get the key")
	if ga.Subscribed() != 1 {
		t.Fatalf("a holds the key subscribed to %d channels, want 1 (the lingering one)", ga.Subscribed())
	}
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
		if !errors.Is(context.Cause(a), dlock.ErrLockLost) {
			t.Fatalf("the holder's cause: %v", context.Cause(a))
		}
	case <-time.After(20 * time.Second): // (its next renewal: 45 s after it got the key)
		t.Fatal("the holder was not told, once subscribed again, that Redis no longer had its key")
	}
	_ = a.Unlock()
	o, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A holding lost when Redis restarts empty — a mutex's, a read-hold, a write-hold, a
// semaphore's — is told to its holder (its Unlock says ErrLockLost, or names the Redis failure
// of a release sent as Redis came back), and the same process takes the lock again at once,
// keeps it past two leases, renewed, and lets it go cleanly; and again. Ports Redisson's
// RedissonLockExpirationRenewalTest.testLockAfterTimeout, testReadLockAfterTimeout and
// testWriteLockAfterTimeout, and RedissonExpirationRenewalTest.testExpirationRenewal (the
// renewal failed by a restart, then the lock held anew past its watchdog timeout).
func TestEveryKindHeldAgainAfterARestartLostIt(t *testing.T) {
	t.Parallel()
	s := ownServer(t)
	if !s.CanRestart() {
		t.Skip("needs a redis-server it can restart")
	}
	const lease = time.Second // (a renewal has 250 ms to spare on a loaded machine)
	g := genOn(t, s.Client(), dlock.WithDefaultLease(lease))
	other := genOn(t, s.Client(), dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	_, sem, rw := everyKind(t, g, tg, 1)
	_, osem, orw := everyKind(t, other, tg, 1)
	mu, omu := mustGen(t, g, "PMA", tg, lease), mustGen(t, other, "PMA", tg, lease)
	ctx := ctxT(t, 60*time.Second)
	for _, c := range []struct {
		name       string
		part, shut dlock.Part // the lock, and what another process could take beside no holder
	}{
		{"mutex", mu, omu},
		{"read side", rw.ReadSide(), orw.WriteSide()},
		{"write side", rw.WriteSide(), orw.ReadSide()},
		{"permits", sem.Permits(1), osem.Permits(1)},
	} {
		held, err := c.part.Lock(ctx)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		s.Kill()
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-held.Done():
			if !errors.Is(context.Cause(held), dlock.ErrLockLost) {
				t.Fatalf("%s: the holder's cause: %v", c.name, context.Cause(held))
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the holder was never told that the restart took its holding", c.name)
		}
		var rpe *dlock.RedisProcessError
		if err := held.Unlock(); !errors.Is(err, dlock.ErrLockLost) && !errors.As(err, &rpe) {
			t.Fatalf("%s: the lost holder's Unlock = %v, want ErrLockLost", c.name, err)
		}
		for round, hold := range []time.Duration{5 * lease / 2, 0} {
			o, err := c.part.Lock(ctx)
			if err != nil {
				t.Fatalf("%s, round %d after the restart: %v", c.name, round, err)
			}
			if !keptThrough(t, o, hold, lease, fmt.Sprintf("%s, round %d", c.name, round)) { // renewed all along
				_ = o.Unlock()
				continue
			}
			if x, ok, err := c.shut.TryLock(ctx); ok || err != nil {
				if ok && o.Err() != nil && strings.Contains(fmt.Sprint(context.Cause(o)), "the lease ran out") {
					// (the holding's lease ran out, seen by its holder, in a stall of the process
					// after keptThrough: Redis's expiry is never before the holder's, so no
					// second owner; any other end of it is no excuse)
					t.Logf("%s, round %d: the holding lapsed before the try: %v", c.name, round, context.Cause(o))
					_, _ = x.Unlock(), o.Unlock()
					continue
				}
				t.Fatalf("%s, round %d: another process's try beside the holding = %v %v %v (the holding: err %v, cause %v)",
					c.name, round, x, ok, err, o.Err(), context.Cause(o))
			}
			if err := o.Unlock(); err != nil {
				t.Fatalf("%s, round %d: Unlock: %v", c.name, round, err)
			}
		}
		x, ok, err := c.shut.TryLock(ctx)
		if !ok || err != nil {
			t.Fatalf("%s: another process's try once it was let go = %v %v %v", c.name, x, ok, err)
		}
		_ = x.Unlock()
	}
}

// An Unlock of a holding Redis lost (an empty restart, unnoticed yet: no renewal was due)
// whose release's reply is lost to a broken connection says lost, of every kind: the client
// sends the release again, and that copy answers gone as the first did, not "let go already".
func TestUnlockOfAHoldingRedisLostWhoseReplyIsLostSaysLost(t *testing.T) {
	const lease = 20 * time.Second // (no renewal before the Unlock)
	for _, kind := range []string{"mutex", "read side", "write side", "permits"} {
		t.Run(kind, func(t *testing.T) {
			g, c, p := proxiedGen(t, func(addr string) *redis.Options {
				return &redis.Options{Addr: addr, ReadTimeout: 5 * time.Second}
			}, dlock.WithDefaultLease(lease), dlock.WithNotifications(false))
			ctx := ctxT(t, 30*time.Second)
			held, tg := holdOfKind(t, ctx, g, kind, lease)
			raw := rawClient(t)
			keys, err := raw.Keys(ctx, "*"+tg+"*").Result()
			if err != nil || len(keys) == 0 {
				t.Fatalf("the holding's keys: %v, %v", keys, err)
			}
			raw.Del(ctx, keys...) // (Redis restarts empty)
			sent := &counter{}
			c.AddHook(sent)
			p.CutNextReply()
			if err := held.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock of a holding Redis lost, its release's reply cut = %v; want ErrLockLost", err)
			}
			if n := sent.script("release") + sent.script("shared"); n < 2 {
				t.Fatalf("%d releases sent; the cut reply's release was not sent again", n)
			}
		})
	}
}

// holdOfKind takes, through g, a holding of kind ("mutex", "read side", "write side" or
// "permits") with lease on a target of its own, which it returns.
func holdOfKind(t *testing.T, ctx context.Context, g *dlock.Generator, kind string, lease time.Duration) (*dlock.Owner, string) {
	t.Helper()
	tg := uniqueTarget(t)
	_, sem, rw := everyKind(t, g, tg, 1)
	part := map[string]dlock.Part{"mutex": mustGen(t, g, "PMA", tg, lease), "read side": rw.ReadSide(),
		"write side": rw.WriteSide(), "permits": sem.Permits(1)}[kind]
	held, err := part.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return held, tg
}

// An Unlock of a holding Redis ran out before the holder's own count of its lease (a failover
// to a replica that missed the last renewal's write; a clock stepped forward) says lost, of
// every kind, as no renewal found it yet: the read-write lock's and the semaphore's release
// finds the holding settled as it prunes it, and must not read that as let go.
func TestUnlockOfAHoldingRedisRanOutEarlySaysLost(t *testing.T) {
	const lease = 20 * time.Second // (no renewal before the Unlock)
	for _, kind := range []string{"mutex", "read side", "write side", "permits"} {
		t.Run(kind, func(t *testing.T) {
			g, _ := newGen(t, dlock.WithDefaultLease(lease), dlock.WithNotifications(false))
			ctx := ctxT(t, 30*time.Second)
			held, tg := holdOfKind(t, ctx, g, kind, lease)
			raw := rawClient(t)
			now, err := raw.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			keys, _ := raw.Keys(ctx, "*"+tg+"*").Result()
			ran := 0
			for _, k := range keys { // the holding's expiry moved to a millisecond ago
				switch {
				case kind == "mutex" && !strings.Contains(k, "}:") && !strings.Contains(k, ":"):
					ran += int(raw.Del(ctx, k).Val()) // (an expired key is gone)
				case kind != "mutex" && strings.HasSuffix(k, ":shared:exp"):
					for _, m := range raw.ZRange(ctx, k, 0, -1).Val() {
						ran += int(raw.ZAddXX(ctx, k, redis.Z{Score: float64(now.UnixMilli() - 1), Member: m}).Val()) + 1
					}
				}
			}
			if ran == 0 {
				t.Fatalf("no holding's expiry found among %v", keys)
			}
			if err := held.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock of a holding Redis ran out early = %v; want ErrLockLost", err)
			}
		})
	}
}

// A holding taken right after a re-entered one was let go, of every kind, is renewed past
// two leases: the re-entries left nothing that stops or confuses its renewals. The next holding
// is a goroutine's that queued behind the re-entered one, so that it comes by a pass within
// the process (a reader, which would get in beside it, takes the read side afterwards). Ports
// Redisson's RedissonLockExpirationRenewalTest.testLockReentrantRenew.
func TestRenewedAfterAReenteredHoldingWasLetGo(t *testing.T) {
	t.Parallel()              // (it waits on its own servers, keys and leases: beside the others)
	const lease = time.Second // (a renewal has 250 ms to spare on a loaded machine)
	g, _ := newGen(t, dlock.WithDefaultLease(lease))
	other, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	_, sem, rw := everyKind(t, g, tg, 1)
	_, osem, orw := everyKind(t, other, tg, 1)
	mu, omu := mustGen(t, g, "PMA", tg, lease), mustGen(t, other, "PMA", tg, lease)
	ctx := ctxT(t, 60*time.Second)
	for _, c := range []struct {
		name       string
		part, shut dlock.Part
		queues     bool // the next holder can queue behind the re-entered one
	}{
		{"mutex", mu, omu, true},
		{"read side", rw.ReadSide(), orw.WriteSide(), false},
		{"write side", rw.WriteSide(), orw.ReadSide(), true},
		{"permits", sem.Permits(1), osem.Permits(1), true},
	} {
		first, err := c.part.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if o, err := c.part.Lock(first); err != nil || o != first {
				t.Fatalf("%s: re-entry = %v %v", c.name, o, err)
			}
		}
		next := make(chan *dlock.Owner, 1)
		take := func() {
			o, err := c.part.Lock(ctx)
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			next <- o
		}
		key := c.part.Config().UniqueKey()
		if c.queues {
			go take()
			waitFor(t, func() bool { return g.Waiters(key) || g.SharedWaiters(key) == 1 })
		}
		for range 3 {
			if err := first.Unlock(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		if !c.queues {
			go take()
		}
		o := recv(t, next, "the next holding")
		if o == nil {
			t.FailNow()
		}
		if !keptThrough(t, o, 5*lease/2, lease, c.name) {
			_ = o.Unlock()
			continue
		}
		if x, ok, err := c.shut.TryLock(ctx); ok || err != nil {
			t.Fatalf("%s: another process's try beside the renewed holding = %v %v %v", c.name, x, ok, err)
		}
		if err := o.Unlock(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
}

// A holding lost as Lock got it — between the take (from Redis, or a pass within the process)
// and its Owner: here an operator's ForceRelease in this Generator — is not returned: Lock takes
// the lock again and returns an Owner that is live, and TryLock reports the lock not obtained.
func TestHoldingLostAsItIsTakenIsNotReturned(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	var (
		l   *dlock.DistributedReentrantLock
		arm atomic.Bool
	)
	force := func() {
		if !arm.CompareAndSwap(true, false) {
			return
		}
		s, err := l.State(ctx)
		if err != nil || !s.Mine {
			t.Errorf("State as the lock was taken: %+v %v", s, err)
			return
		}
		if ok, err := l.ForceRelease(ctx, s.Holder); !ok || err != nil {
			t.Errorf("ForceRelease = %v %v", ok, err)
		}
	}
	g, _ := newGen(t, dlock.WithLent(force))
	l, _ = g.GenWithLease("API", target(t), 3*time.Second)
	live := func(o *dlock.Owner, what string) {
		t.Helper()
		if o.Err() != nil || l.HoldCount(o) != 1 {
			t.Fatalf("%s returned an Owner that had ended: %v (HoldCount %d)", what, context.Cause(o), l.HoldCount(o))
		}
		if s, err := l.State(ctx); err != nil || !s.Mine {
			t.Fatalf("%s returned, and the key is not this process's: %+v %v", what, s, err)
		}
	}

	arm.Store(true)
	o, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live(o, "Lock (from Redis)")

	// a pass within the process
	got := lockAsync(t, l, ctx)
	waitFor(t, func() bool { return g.Waiters(key(l)) })
	arm.Store(true)
	if err := l.Unlock(o); err != nil {
		t.Fatal(err)
	}
	o = rgRecv(t, got, 10*time.Second, "the waiter's Lock")
	live(o, "Lock (a pass)")
	if err := l.Unlock(o); err != nil {
		t.Fatal(err)
	}

	arm.Store(true)
	o, ok, err := l.TryLock(ctx)
	if err != nil || ok || o != nil {
		t.Fatalf("TryLock of a holding lost as it was taken = %v %v %v, want nil false nil", o, ok, err)
	}
	if arm.Load() {
		t.Fatal("the hook did not run")
	}
}

// An Unlock whose release failed (never sent: the outcome unknown, a *RedisProcessError) and
// whose retry in the background then finds the key gone before its lease ran out reports the
// loss once it is known, as a release that found it gone at once does: a LossEvent of the
// holding (after its ReleaseEvent) and "lock lost before release" logged at Warn. A retry that
// comes after the lease ran out and finds the key expired is no loss: the key went with its
// lease, as it would have had the release gone through, and nothing is reported. A retry that
// finds the key taken anew for its locker (after an empty restart, a late copy of the tenure's
// take took it again, in a holding the tenure did not begin with) names the holding its tenure
// began with, as the release did: the key is let go as lost, and the loss reported. So does a
// retry after a release that ran and found the key gone, its answer lost: the release marked
// the locker removed, and the retry answers gone, not settled.
func TestReleaseRetryThatFindsTheKeyGoneReportsTheLoss(t *testing.T) {
	for _, when := range []string{"within the lease", "after the lease", "taken anew", "found gone, its answer lost"} {
		t.Run(when, func(t *testing.T) {
			c := srv.Client()
			defer c.Close()
			admin := rawClient(t)
			var k, first string
			var armed atomic.Bool
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if !scriptIs("release")(cmd.Args()) || !armed.Load() {
					return next(ctx, cmd)
				}
				if when == "within the lease" { // removed behind its back, then the release fails once
					admin.Del(ctx, k)
					armed.Store(false)
				} else if when == "taken anew" { // FIRST names another first token for the locker
					admin.Set(ctx, first, "1|"+admin.Get(ctx, k).Val(), time.Minute)
					armed.Store(false)
				} else if when == "found gone, its answer lost" { // removed behind its back; the release runs, its answer is lost
					admin.Del(ctx, k)
					armed.Store(false)
					_ = next(ctx, cmd)
				} else if n, _ := admin.Exists(ctx, k).Result(); n == 0 { // failed until the key expired
					armed.Store(false)
				}
				cmd.SetErr(errInjected)
				return errInjected
			}})
			rec := &recorder{}
			core, logs := zapobserver.New(zap.WarnLevel)
			lease := 2 * time.Second
			if when == "after the lease" {
				lease = 300 * time.Millisecond
			}
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease), dlock.WithObserver(rec), dlock.WithLogger(zap.New(core)))
			if err != nil {
				t.Fatal(err)
			}
			l, _ := g.Gen("RETRYGONE", uniqueTarget(t))
			k, first = key(l), processor.FirstKey(l.Config())
			o, err := l.Lock(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			token, _ := l.FencingToken(o)
			armed.Store(true)
			var pe *dlock.RedisProcessError
			if err := l.Unlock(o); !errors.As(err, &pe) || !errors.Is(err, errInjected) {
				t.Fatalf("Unlock with its release failed = %v, want a *RedisProcessError wrapping the failure", err)
			}
			if err := g.Close(ctxT(t, 20*time.Second)); err != nil { // (it waits for the retry)
				t.Fatalf("Close = %v", err)
			}
			if armed.Load() {
				t.Fatal("setup: the release was never retried")
			}
			lost, warned := lossesBeforeRelease(rec, logs, k)
			if when == "after the lease" {
				if len(lost) != 0 || warned != 0 {
					t.Fatalf("a retry that found the key expired with its lease reported %d losses (%v), %d warnings; want none", len(lost), lost, warned)
				}
				return
			}
			if len(lost) != 1 || lost[0].Token != token || !errors.Is(lost[0].Cause, dlock.ErrLockLost) || lost[0].Kind != dlock.KindMutex {
				t.Fatalf("losses reported: %+v; want one of the holding (token %d), matching ErrLockLost", lost, token)
			}
			if warned != 1 {
				t.Fatalf("%d warnings %q of the key; want 1", warned, "dlock: lock lost before release")
			}
		})
	}
}

// A release retried in the background whose request was sent while the lease lasted but ran in
// Redis only after the key had expired with it (held up on its way: a slow network, a busy
// server, a connection being dialled) finds the key gone: that is no loss — the key went with
// its lease, as it would have had the release gone through — and nothing is reported. Only an
// answer that came before the lease ran out tells that the key was taken from the holding.
func TestReleaseRetryThatRanAfterTheLeaseRanOutReportsNoLoss(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	admin := rawClient(t)
	var k string
	var releases atomic.Int32
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !scriptIs("release")(cmd.Args()) {
			return next(ctx, cmd)
		}
		switch releases.Add(1) {
		case 1: // the Unlock's: it fails after a while (the retry is sent with half the lease left)
			time.Sleep(time.Second)
			cmd.SetErr(errInjected)
			return errInjected
		case 2: // the retry: on its way until the key has expired with its lease
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				if n, _ := admin.Exists(context.Background(), k).Result(); n == 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		return next(ctx, cmd)
	}})
	rec := &recorder{}
	core, logs := zapobserver.New(zap.WarnLevel)
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(2*time.Second), dlock.WithObserver(rec), dlock.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := g.Gen("RETRYLATE", uniqueTarget(t))
	k = key(l)
	o, err := l.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var pe *dlock.RedisProcessError
	if err := l.Unlock(o); !errors.As(err, &pe) || !errors.Is(err, errInjected) {
		t.Fatalf("Unlock with its release failed = %v, want a *RedisProcessError wrapping the failure", err)
	}
	if err := g.Close(ctxT(t, 20*time.Second)); err != nil { // (it waits for the retry)
		t.Fatalf("Close = %v", err)
	}
	if n := releases.Load(); n != 2 {
		t.Fatalf("setup: %d releases sent, want 2 (the Unlock's and its retry)", n)
	}
	lost, warned := lossesBeforeRelease(rec, logs, k)
	if len(lost) != 0 || warned != 0 {
		t.Fatalf("a retry that ran after the key expired with its lease reported %d losses (%+v), %d warnings; want none", len(lost), lost, warned)
	}
}

// releaseThenLoss is an Observer whose Released takes its time (an exporter, say): up to wait,
// or until a loss is reported meanwhile. It records what it was told, in order, each event
// once its call returned.
type releaseThenLoss struct {
	recorder
	wait     time.Duration
	lostCame chan struct{}
	once     sync.Once
	mu2      sync.Mutex
	order    []string
}

func (o *releaseThenLoss) Released(e dlock.ReleaseEvent) {
	select {
	case <-o.lostCame:
	case <-time.After(o.wait):
	}
	o.recorder.Released(e)
	o.mu2.Lock()
	o.order = append(o.order, "released")
	o.mu2.Unlock()
}

func (o *releaseThenLoss) Lost(e dlock.LossEvent) {
	o.once.Do(func() { close(o.lostCame) })
	o.recorder.Lost(e)
	o.mu2.Lock()
	o.order = append(o.order, "lost")
	o.mu2.Unlock()
}

// The loss that the background retry of an Unlock's failed release finds is reported after
// that Unlock's ReleaseEvent, as LossEvent's doc says, even when the Observer takes its time
// over the release: the retry does not tell the Observer of the loss while it is still being
// told of the release (an Observer that keeps a holding's events in order would see the loss
// of a holding it has not seen released yet).
func TestReleaseRetryReportsTheLossAfterTheRelease(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	admin := rawClient(t)
	var k string
	var armed atomic.Bool
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !scriptIs("release")(cmd.Args()) || !armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		admin.Del(ctx, k) // removed behind its back, then the release fails once
		cmd.SetErr(errInjected)
		return errInjected
	}})
	obs := &releaseThenLoss{wait: 2 * time.Second, lostCame: make(chan struct{})}
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(5*time.Second), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := g.Gen("RETRYORDER", uniqueTarget(t))
	k = key(l)
	o, err := l.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	var pe *dlock.RedisProcessError
	if err := l.Unlock(o); !errors.As(err, &pe) {
		t.Fatalf("Unlock with its release failed = %v, want a *RedisProcessError", err)
	}
	if err := g.Close(ctxT(t, 20*time.Second)); err != nil { // (it waits for the retry)
		t.Fatalf("Close = %v", err)
	}
	obs.mu2.Lock()
	defer obs.mu2.Unlock()
	if !slices.Equal(obs.order, []string{"released", "lost"}) {
		t.Fatalf("the Observer was told %v; want the release, then the loss its retry found", obs.order)
	}
}

// An Unlock that relocks (its release stands the process in line again with a new attempt,
// next) and whose release fails, its outcome unknown, reports the loss that the release's
// retry then finds as a plain Unlock's does: a LossEvent after its ReleaseEvent, and "lock
// lost before release" at Warn. The process leaves the line once nobody waits — after the
// retry was answered, not beside it: a leave that came first settled the tenure's locker, and
// the retry, answered settled, told nothing. Here the leave is let go first whenever it is
// sent beside the retry.
func TestRelockReleaseRetryThatFindsTheKeyGoneReportsTheLoss(t *testing.T) {
	rec := &recorder{}
	core, logs := zapobserver.New(zap.WarnLevel)
	admin := rawClient(t)
	ga, cla := newGen(t, dlock.WithObserver(rec), dlock.WithLogger(zap.New(core)))
	gb, _ := newGen(t)
	var k string
	var armed atomic.Bool
	var releases atomic.Int32
	var next atomic.Value       // the first release's next attempt ("" for none)
	left := make(chan struct{}) // closed once a leave of a's was answered
	var leftOnce sync.Once
	cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, nextHook redis.ProcessHook) error {
		switch processor.ScriptName(cmd.Args()) {
		case "leave":
			err := nextHook(ctx, cmd)
			leftOnce.Do(func() { close(left) })
			return err
		case "release":
			if !armed.Load() {
				return nextHook(ctx, cmd)
			}
			switch releases.Add(1) {
			case 1: // the Unlock's: the key is removed behind its back, then the release fails unsent
				next.Store(sentCmd{args: cmd.Args()}.arg(t, "next"))
				admin.Del(ctx, k)
				cmd.SetErr(errInjected)
				return errInjected
			case 2: // its retry: a leave sent beside it goes first
				select {
				case <-left:
				case <-time.After(time.Second):
				}
			}
		}
		return nextHook(ctx, cmd)
	}})
	ga.Relock(10 * time.Second)
	la := mustGen(t, ga, "RELOCKGONE", target(t), 5*time.Second)
	lb := mustGen(t, gb, "RELOCKGONE", target(t), 5*time.Second)
	k = key(la)
	ctx := ctxT(t, 30*time.Second)
	a := takeAfterWaiting(t, ctx, la, lb) // (a watches its channel: its Unlock relocks)
	token, _ := la.FencingToken(a)
	armed.Store(true)
	var pe *dlock.RedisProcessError
	if err := a.Unlock(); !errors.As(err, &pe) || !errors.Is(err, errInjected) {
		t.Fatalf("Unlock with its release failed = %v, want a *RedisProcessError wrapping the failure", err)
	}
	if n, _ := next.Load().(string); n == "" {
		t.Fatal("setup: the Unlock's release did not stand in line again (no next)")
	}
	waitFor(t, func() bool { return releases.Load() >= 2 && ga.InUse() == 0 }) // retried, and let go of the key
	if st, err := la.State(ctx); err != nil || len(st.Waiting) != 0 || st.Holder != "" {
		t.Fatalf("after the retry: %+v, %v; want the key free and nobody in line", st, err)
	}
	lost, warned := lossesBeforeRelease(rec, logs, k)
	if len(lost) != 1 || lost[0].Token != token || !errors.Is(lost[0].Cause, dlock.ErrLockLost) {
		t.Fatalf("losses reported: %+v; want one of the holding (token %d), matching ErrLockLost", lost, token)
	}
	if warned != 1 {
		t.Fatalf("%d warnings %q of the key; want 1", warned, "dlock: lock lost before release")
	}
}

// The context Do gives its function, like the Owner, says the holding is lost once its lease
// ran out by this process's clock, also before its lease thread says so (a loaded machine
// runs it late): a function that asks its context before it acts is not told "held" past
// the lease. Do then returns the loss.
func TestDoContextAfterTheLeaseRanOutUnseenSaysLost(t *testing.T) {
	g, _ := newGen(t, dlock.WithDefaultLease(5*time.Second)) // (its lease thread renews at 3.75 s)
	l, _ := g.Gen("DOLAPSE", uniqueTarget(t))
	var inside error
	err := l.Do(ctxT(t, 30*time.Second), func(ctx context.Context) error {
		if err := ctx.Err(); err != nil {
			t.Fatalf("the context of Do's function ended at once: %v", err)
		}
		g.Lapse(key(l))
		inside = ctx.Err()
		return nil
	})
	if inside == nil {
		t.Errorf("the context of Do's function said nothing after its lease ran out by the clock (the Owner's Err says the loss)")
	}
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Do = %v, want ErrLockLost", err)
	}
}

// A Close that lets go of a read-write lock's holding whose downgrade's answer was lost (the
// downgrade ran: the holding is the read-hold it made, under its new locker, which the process
// does not know yet) and finds that read-hold removed behind its back (an operator's
// ForceRelease from another process) reports the loss of the downgraded reader, as it does for
// any holding it finds gone: a LossEvent after the reader's release (ErrClosed), and a Warn.
// A read-hold that was not removed, or a downgrade that never ran (its request failed unsent),
// or ran twice (a copy), is no loss: nothing is reported. A write holding removed before its
// downgrade ran (which then never does) is the loss Close reports, once.
func TestCloseThatFindsADowngradeWhoseAnswerWasLostRemovedReportsTheLoss(t *testing.T) {
	for _, how := range []string{"removed", "kept", "never ran", "copied", "writer removed", "never ran, release's reply lost", "never ran, release's reply lost to a broken connection"} {
		t.Run(how, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			c := srv.Client()
			defer c.Close()
			var armed atomic.Int32
			var releases atomic.Int32
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if strings.HasPrefix(how, "never ran, release's reply lost") && armed.Load() == 2 && sharedArg(cmd.Args(), "op") == "release" && releases.Add(1) == 1 {
					// Close's release of the writer's holding runs, its reply lost: the retry's
					// Settled is that release's doing, not a downgrade's (which never ran)
					if err := next(ctx, cmd); err != nil {
						return err
					}
					err := errors.New("i/o timeout (reply lost)")
					if how == "never ran, release's reply lost to a broken connection" {
						// (the processor sends it again within the same send: the copy's
						// Settled comes at the release's first send)
						err = fmt.Errorf("reply lost: %w", io.EOF)
					}
					cmd.SetErr(err)
					return err
				}
				if !isSharedTake(cmd.Args()) || sharedArg(cmd.Args(), "replaces") == "" {
					return next(ctx, cmd)
				}
				switch armed.Load() {
				case 1: // the downgrade runs; its reply is lost
					if how == "never ran" || how == "writer removed" || strings.HasPrefix(how, "never ran, release's reply lost") {
						armed.Store(2)
						cmd.SetErr(errInjected)
						return errInjected
					}
					err := next(ctx, cmd)
					if err == nil && how == "copied" { // (go-redis sends it again: the copy runs too)
						err = next(ctx, cmd)
					}
					if err == nil {
						armed.Store(2)
						err = errors.New("i/o timeout (reply lost)")
						cmd.SetErr(err)
					}
					return err
				case 2: // sent again: it fails unsent, its outcome stays unknown
					cmd.SetErr(errInjected)
					return errInjected
				}
				return next(ctx, cmd)
			}})
			obs := &releaseThenLoss{lostCame: make(chan struct{})}
			core, logs := zapobserver.New(zap.WarnLevel)
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Minute), dlock.WithObserver(obs), dlock.WithLogger(zap.New(core)))
			if err != nil {
				t.Fatal(err)
			}
			operator, _ := newGen(t)
			tg := uniqueTarget(t)
			l := rwOf(t, g, tg)
			w, err := l.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r, err := l.RLock(w) // a read of the write owner's: no request yet
			if err != nil {
				t.Fatal(err)
			}
			tok, _ := l.FencingToken(r)
			armed.Store(1)
			unlocked := unlockInBackground(l, w) // the holding shrinks to the read: the downgrade is sent
			var downTo string
			waitFor(t, func() bool {
				_, downTo, _, _, _ = dlock.SharedOwned(r)
				return downTo != "" && armed.Load() == 2
			})
			switch how {
			case "removed":
				if ok, err := rwOf(t, operator, tg).ForceRelease(ctx, downTo); !ok || err != nil {
					t.Fatalf("setup: ForceRelease(%q) = %v, %v", downTo, ok, err)
				}
			case "writer removed": // the holding the downgrade (which never ran) would replace
				held, _, _, _, _ := dlock.SharedOwned(r)
				if ok, err := rwOf(t, operator, tg).ForceRelease(ctx, held); !ok || err != nil {
					t.Fatalf("setup: ForceRelease(%q) = %v, %v", held, ok, err)
				}
			}
			if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
				t.Fatalf("Close = %v, want nil: nothing of the holding stays held", err)
			}
			if err := recv(t, unlocked, "the writer's Unlock"); err != nil {
				t.Fatal(err)
			}
			if cause := context.Cause(r); !errors.Is(cause, dlock.ErrClosed) {
				t.Fatalf("setup: the reader's context ended with %v, want ErrClosed (Close, not a loss found before)", cause)
			}
			if st, err := rwOf(t, operator, tg).State(ctx); err != nil || len(st.Holds) != 0 {
				t.Fatalf("after Close: %+v, %v; want nothing held", st, err)
			}
			obs.mu2.Lock()
			order := slices.Clone(obs.order)
			obs.mu2.Unlock()
			obs.mu.Lock()
			lost := slices.Clone(obs.lost)
			obs.mu.Unlock()
			warned := logs.FilterMessage("dlock: shared holding lost").Len()
			if how != "removed" && how != "writer removed" {
				if !slices.Equal(order, []string{"released", "released"}) || warned != 0 {
					t.Fatalf("the Observer was told %v (losses %+v), %d warnings; want the writer's and the reader's releases, no loss", order, lost, warned)
				}
				return
			}
			if !slices.Equal(order, []string{"released", "released", "lost"}) || lost[0].Token != tok || !errors.Is(lost[0].Cause, dlock.ErrLockLost) {
				t.Fatalf("the Observer was told %v (losses %+v); want the writer's and the reader's releases, then the reader's loss (token %d) matching ErrLockLost", order, lost, tok)
			}
			if warned != 1 {
				t.Fatalf("%d warnings %q; want 1", warned, "dlock: shared holding lost")
			}
		})
	}
}

// A Close that lets go of a read-write lock's holding whose downgrade's answer was lost, and
// finds the read-hold the downgrade made gone only after its lease ran out (its release held
// up on its way; an empty restart after the lease), reports no loss: the downgraded holding's
// loss is judged by the lease of the holding it replaced (the downgrade ran after that
// holding's last renewal), not by how long a release of it is owed.
func TestCloseThatFindsADowngradedHoldingGoneAfterItsLeaseReportsNoLoss(t *testing.T) {
	const lease = 6 * time.Second
	ctx := ctxT(t, 30*time.Second)
	c := srv.Client()
	defer c.Close()
	admin := rawClient(t)
	var armed atomic.Int32
	var downTo atomic.Pointer[string]
	var releasedAfter atomic.Int64 // the downgraded holding's release runs after then (unix ns)
	var gone atomic.Bool           // ... and found nothing of it
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		args := cmd.Args()
		if d := downTo.Load(); d != nil && sharedArg(args, "op") == "release" && sharedArg(args, "locker") == *d {
			if releasedAfter.Load() != 0 {
				time.Sleep(time.Until(time.Unix(0, releasedAfter.Swap(0))))
				wipeScriptKeys(context.Background(), admin, args) // Redis restarts empty, after the lease
			}
			err := next(ctx, cmd)
			if v, ok := reply(cmd); ok && err == nil && fmt.Sprint(v) == "[0]" {
				gone.Store(true)
			}
			return err
		}
		if !isSharedTake(args) || sharedArg(args, "replaces") == "" {
			return next(ctx, cmd)
		}
		switch armed.Load() {
		case 1: // the downgrade runs; its reply is lost
			err := next(ctx, cmd)
			if err == nil {
				armed.Store(2)
				err = errors.New("i/o timeout (reply lost)")
				cmd.SetErr(err)
			}
			return err
		case 2: // sent again: it fails unsent, its outcome stays unknown
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}})
	obs := &recorder{}
	core, logs := zapobserver.New(zap.WarnLevel)
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease), dlock.WithObserver(obs), dlock.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	l := rwOf(t, g, uniqueTarget(t))
	r, unlocked := readerOfADowngrade(t, ctx, l, &armed)
	var valid time.Time
	waitFor(t, func() bool {
		_, d, until, _, _ := dlock.SharedOwned(r)
		if d == "" || armed.Load() != 2 {
			return false
		}
		downTo.Store(&d)
		valid = until
		return true
	})
	ranOut := time.Now().Add(lease) // (the downgrade ran before now: its holding's lease ends before then)
	releasedAfter.Store(ranOut.Add(100 * time.Millisecond).UnixNano())
	time.Sleep(time.Until(valid.Add(-time.Second))) // Close with less than a third of the lease left (a request's bound)
	_ = g.Close(ctxT(t, 20*time.Second))
	if err := recv(t, unlocked, "the writer's Unlock"); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(r); !errors.Is(cause, dlock.ErrClosed) {
		t.Fatalf("setup: the reader's context ended with %v, want ErrClosed (Close, not a loss found before)", cause)
	}
	if !gone.Load() {
		t.Fatal("setup: the downgraded holding's release did not find it gone")
	}
	noLossTold(t, obs, logs, "the release came after the lease")
}

// An Unlock that relocks and whose release fails, its outcome unknown, reports the loss that a
// later try of the release's retry finds when the retry's first try failed too: the process
// left the line after that first try (nobody waits), and its leave settled the tenure's locker
// before the later try ran — which then finds the key removed behind its back while the lease
// lasted (by an operator's ForceRelease, or lost by Redis: a failover, an empty restart), not
// a release that ran before. The loss is reported as the first try's would be: a LossEvent of
// the holding after its ReleaseEvent, and "lock lost before release" at Warn. A key that was
// not taken from it (the leave let it go) is no loss: nothing is reported.
func TestRelockReleaseRetryWhoseFirstTryFailedReportsTheLossALaterTryFinds(t *testing.T) {
	for _, how := range []string{"force released", "lost by Redis", "kept"} {
		t.Run(how, func(t *testing.T) {
			rec := &recorder{}
			core, logs := zapobserver.New(zap.WarnLevel)
			admin := rawClient(t)
			ga, cla := newGen(t, dlock.WithObserver(rec), dlock.WithLogger(zap.New(core)))
			gb, _ := newGen(t)
			var k string
			var lb *dlock.DistributedReentrantLock
			var armed atomic.Bool
			var releases atomic.Int32
			var setupErr atomic.Value
			left := make(chan struct{}) // closed once a leave of a's was answered
			var leftOnce sync.Once
			cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, nextHook redis.ProcessHook) error {
				switch processor.ScriptName(cmd.Args()) {
				case "leave":
					err := nextHook(ctx, cmd)
					leftOnce.Do(func() { close(left) })
					return err
				case "release":
					if !armed.Load() {
						return nextHook(ctx, cmd)
					}
					switch releases.Add(1) {
					case 1: // the Unlock's: it fails unsent
						cmd.SetErr(errInjected)
						return errInjected
					case 2: // the retry's first try: the key is removed behind its back, then it fails unsent
						switch how {
						case "force released":
							if ok, err := lb.ForceRelease(context.Background(), admin.Get(ctx, k).Val()); !ok || err != nil {
								setupErr.Store(fmt.Sprintf("ForceRelease = %v, %v", ok, err))
							}
						case "lost by Redis":
							admin.Del(ctx, k)
						}
						cmd.SetErr(errInjected)
						return errInjected
					case 3: // a later try: the leave sent after the first goes first
						select {
						case <-left:
						case <-time.After(5 * time.Second):
							setupErr.Store("no leave was answered before the retry's later try")
						}
					}
				}
				return nextHook(ctx, cmd)
			}})
			ga.Relock(10 * time.Second)
			la := mustGen(t, ga, "RELOCKLATER", target(t), 5*time.Second)
			lb = mustGen(t, gb, "RELOCKLATER", target(t), 5*time.Second)
			k = key(la)
			ctx := ctxT(t, 30*time.Second)
			a := takeAfterWaiting(t, ctx, la, lb) // (a watches its channel: its Unlock relocks)
			token, _ := la.FencingToken(a)
			armed.Store(true)
			var pe *dlock.RedisProcessError
			if err := a.Unlock(); !errors.As(err, &pe) || !errors.Is(err, errInjected) {
				t.Fatalf("Unlock with its release failed = %v, want a *RedisProcessError wrapping the failure", err)
			}
			waitFor(t, func() bool { return releases.Load() >= 3 && ga.InUse() == 0 }) // retried, and let go of the key
			if e, _ := setupErr.Load().(string); e != "" {
				t.Fatal("setup: " + e)
			}
			if st, err := la.State(ctx); err != nil || len(st.Waiting) != 0 || st.Holder != "" {
				t.Fatalf("after the retry: %+v, %v; want the key free and nobody in line", st, err)
			}
			lost, warned := lossesBeforeRelease(rec, logs, k)
			if how == "kept" {
				if len(lost) != 0 || warned != 0 {
					t.Fatalf("a key the leave let go reported %d losses (%+v), %d warnings; want none", len(lost), lost, warned)
				}
				return
			}
			if len(lost) != 1 || lost[0].Token != token || !errors.Is(lost[0].Cause, dlock.ErrLockLost) {
				t.Fatalf("losses reported: %+v; want one of the holding (token %d), matching ErrLockLost", lost, token)
			}
			if warned != 1 {
				t.Fatalf("%d warnings %q of the key; want 1", warned, "dlock: lock lost before release")
			}
		})
	}
}

// An Unlock whose release fails, its outcome unknown, of a holding Redis lost (an empty restart
// wiped the key), reports the loss that its retry finds — also when, while the retry waits to
// try again, goroutines of the same process take the key with newer acquisitions and release
// them, or an operator removes them: each settles every older acquisition of the process, the
// lost one included, and the retry, finding it settled, would answer as after a release that
// ran. The newer requests name every retried release, so the loss stays known however many
// newer holdings were removed (the process's removed lockers, {K}:forced:<owner>, keep the
// newest FORCED_KEPT: the retried ones are made the newest again by each request that names
// them), and when two such holdings' releases are retried at once: one LossEvent of each lost
// holding, matching ErrLockLost.
func TestReleaseRetryReportsTheLossPastNewerHoldingsOfItsProcess(t *testing.T) {
	for _, c := range []struct {
		name         string
		lost         int // holdings lost, one after another, whose releases are retried at once
		newer        int
		removedByOps bool // the newer holdings removed by an operator, else released
	}{
		{"a newer release", 1, 1, false},
		{"3 newer removals", 1, 3, true},
		{"4 newer removals", 1, 4, true},
		{"6 newer removals", 1, 6, true},
		{"two lost in a row, 4 newer removals", 2, 4, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			core, logs := zapobserver.New(zap.WarnLevel)
			admin := rawClient(t)
			g, cl := newGen(t, dlock.WithObserver(rec), dlock.WithLogger(zap.New(core)))
			op, _ := newGen(t) // the operator's process
			tg := target(t)
			l := mustGen(t, g, "RETRYPAST", tg, 5*time.Second)
			lo := mustGen(t, op, "RETRYPAST", tg, 5*time.Second)
			k := key(l)
			var tries sync.Map // the lost holdings' lockers: the tries of their releases (*atomic.Int32)
			var setupErr atomic.Value
			newer := make(chan struct{}) // closed once the newer holdings ended
			cl.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, nextHook redis.ProcessHook) error {
				if processor.ScriptName(cmd.Args()) != "release" {
					return nextHook(ctx, cmd)
				}
				n, ok := tries.Load((sentCmd{args: cmd.Args()}).arg(t, "locker"))
				if !ok {
					return nextHook(ctx, cmd)
				}
				switch n.(*atomic.Int32).Add(1) {
				case 1, 2: // the Unlock's, and the retry's first try: they fail unsent
					cmd.SetErr(errInjected)
					return errInjected
				default: // a later try of the retry: after the newer holdings ended
					select {
					case <-newer:
					case <-time.After(10 * time.Second):
						setupErr.Store("the newer holdings did not end before the retry's later try")
					}
				}
				return nextHook(ctx, cmd)
			}})
			triedAtLeast := func(n int32) bool {
				all := true
				tries.Range(func(_, v any) bool {
					all = v.(*atomic.Int32).Load() >= n
					return all
				})
				return all
			}
			ctx := ctxT(t, 30*time.Second)
			tokens := make(map[uint64]bool)
			for range c.lost {
				a := mustLock(t, l, ctx)
				token, _ := l.FencingToken(a)
				tokens[token] = true
				tries.Store(admin.Get(ctx, k).Val(), new(atomic.Int32))
				admin.Del(ctx, k) // Redis restarts empty
				var pe *dlock.RedisProcessError
				if err := a.Unlock(); !errors.As(err, &pe) || !errors.Is(err, errInjected) {
					t.Fatalf("Unlock with its release failed = %v, want a *RedisProcessError wrapping the failure", err)
				}
				waitFor(t, func() bool { return triedAtLeast(2) })
			}
			for i := range c.newer { // newer acquisitions of the same process, while the retries wait
				b := mustLock(t, l, ctx)
				if c.removedByOps {
					holder := admin.Get(ctx, k).Val()
					if ok, err := lo.ForceRelease(ctx, holder); err != nil || !ok {
						t.Fatalf("ForceRelease of newer holding %d (%q) = %v, %v", i, holder, ok, err)
					}
				}
				if err := b.Unlock(); err != nil && !(c.removedByOps && errors.Is(err, dlock.ErrLockLost)) {
					t.Fatalf("the newer holding %d's Unlock: %v", i, err)
				}
			}
			close(newer) // (a later try waits in the hook, unsent, until now)
			waitFor(t, func() bool { return triedAtLeast(3) && g.InUse() == 0 })
			if e, _ := setupErr.Load().(string); e != "" {
				t.Fatal("setup: " + e)
			}
			found := func() map[uint64]int {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				n := make(map[uint64]int)
				for _, e := range rec.lost {
					if tokens[e.Token] && errors.Is(e.Cause, dlock.ErrLockLost) {
						n[e.Token]++
					}
				}
				return n
			}
			rgWaitUntil(2*time.Second, func() bool { return len(found()) == len(tokens) })
			lost, warned := lossesBeforeRelease(rec, logs, k)
			for token := range tokens {
				if n := found()[token]; n != 1 {
					t.Fatalf("losses of the lost holding with token %d reported: %d; want 1 (all: %+v, %d warnings)", token, n, lost, warned)
				}
			}
			if !c.removedByOps && (len(lost) != 1 || warned != 1) {
				t.Fatalf("losses %+v and %d warnings %q of the key; want one of each", lost, warned, "dlock: lock lost before release")
			}
		})
	}
}

// A tenure that no goroutine holds (free: its last owner passed it on to a waiter of its
// process, which then gave up) is let go in the background; a release that finds the key gone
// or another's before the lease ran out (lost by Redis, removed behind its back) reports the
// loss at Warn, as its retry, or a renewal of the free tenure, would: the holding before may
// have held it unknowingly lost (its Unlock, which passed it on without Redis, said nothing),
// and no holding is left to tell.
func TestFreeTenureReleaseThatFindsTheKeyGoneSaysSo(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	admin := rawClient(t)
	var armed atomic.Bool
	var renewals atomic.Int32
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !scriptIs("renew")(cmd.Args()) || !armed.Load() {
			return next(ctx, cmd)
		}
		renewals.Add(1)
		cmd.SetErr(errInjected) // (unsent)
		return errInjected
	}})
	core, logs := zapobserver.New(zap.WarnLevel)
	g := genOn(t, c, dlock.WithLogger(zap.New(core)), dlock.WithLocalHandOff(time.Hour)) // (no yield check: the pass renews only)
	tg := uniqueTarget(t)
	la, _ := g.GenWithLease("FREEGONE", tg, 10*time.Second)
	lb, _ := g.GenWithLease("FREEGONE", tg, 12*time.Second) // (another lease: a pass to it renews first)
	k := key(la)
	ctx := ctxT(t, 30*time.Second)
	a := mustLock(t, la, ctx)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := lockOnce(bctx, lb)
	waitFor(t, func() bool { return g.Waiters(k) })
	admin.Del(ctx, k) // lost by Redis while a holds it
	armed.Store(true) // b's renewals fail: it never takes the tenure
	if err := a.Unlock(); err != nil {
		t.Fatalf("a's Unlock (passed on within the process) = %v", err)
	}
	waitFor(t, func() bool { return renewals.Load() > 0 }) // b tried to renew the tenure to take it
	cancel()
	if err := recv(t, b, "b's Lock"); err == nil {
		t.Fatal("setup: b took the lock")
	}
	waitFor(t, func() bool { return g.InUse() == 0 }) // the free tenure was let go
	if n := logs.FilterMessage("dlock: lock lost before release").FilterField(zap.String("key", k)).Len(); n != 1 {
		t.Fatalf("%d warnings %q of the key; want 1", n, "dlock: lock lost before release")
	}
}

// A holding lost in Redis while its goroutine held it, and found lost only once the tenure
// passed on within the process (the Unlock handed it on with no word to Redis, and the next
// taker's renewal found the key gone), is a lost lock: logged as one at Warn, though no
// goroutine holds the tenure as the loss is found.
func TestLossFoundAsTheTenurePassesIsWarned(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	admin := rawClient(t)
	core, logs := zapobserver.New(zap.DebugLevel)
	g := genOn(t, c, dlock.WithLogger(zap.New(core)), dlock.WithLocalHandOff(time.Hour)) // (no yield check: the pass renews only)
	tg := uniqueTarget(t)
	la, _ := g.GenWithLease("PASSGONE", tg, 10*time.Second)
	lb, _ := g.GenWithLease("PASSGONE", tg, 12*time.Second) // (another lease: a pass to it renews first)
	k := key(la)
	ctx := ctxT(t, 30*time.Second)
	a := mustLock(t, la, ctx)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := lockOnce(bctx, lb)
	waitFor(t, func() bool { return g.Waiters(k) })
	admin.Del(ctx, k) // lost by Redis while a holds it
	if err := a.Unlock(); err != nil {
		t.Fatalf("a's Unlock (passed on within the process) = %v", err)
	}
	ended := func() *zapobserver.ObservedLogs {
		return logs.Filter(func(e zapobserver.LoggedEntry) bool {
			return strings.Contains(e.Message, "lost") || strings.Contains(e.Message, "ran out")
		}).FilterField(zap.String("key", k))
	}
	waitFor(t, func() bool { return ended().Len() > 0 }) // b's renewal found the key gone
	cancel()
	recv(t, b, "b's Lock") // (it took the key anew, or gave up)
	if w := ended().FilterMessage("dlock: lock lost").FilterLevelExact(zap.WarnLevel); w.Len() != 1 {
		t.Fatalf("%d warnings %q of the key; want 1 (logged: %v)", w.Len(), "dlock: lock lost", ended().All())
	}
}
