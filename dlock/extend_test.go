package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// Extend renews with the new lease from then on; it never shortens what Redis holds (a shorter
// lease takes effect as the longer one runs down), and refuses a bad lease, a non-owner and a
// released owner. Ports bsm/redislock's TestLock_Refresh (documented difference: its Refresh
// to a shorter TTL shortens it), redsync's TestMutexExtend and TestTryLock.
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
	if err := l.Extend(owned, time.Hour); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, l); s.LeaseLeft <= 30*time.Minute || s.LeaseLeft > time.Hour {
		t.Fatalf("lease left %v after Extend to 1h", s.LeaseLeft)
	}
	if err := l.Extend(owned, time.Minute); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, l); s.LeaseLeft <= time.Minute {
		t.Fatalf("lease left %v: an Extend to 1 min shortened the hour Redis held", s.LeaseLeft)
	}
	for _, bad := range []time.Duration{0, -time.Second, time.Millisecond, domain.MinLease - time.Millisecond} {
		if err := l.Extend(owned, bad); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Fatalf("Extend(%v) = %v, want ErrInvalidConfig", bad, err)
		}
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

// Extend of a key another took fails at once with ErrLockLost, ends the owner context, and
// leaves the new holder's key. Ports bsm/redislock's TestLock_Refresh_expired and
// TestLock_Refresh_retry_failure, redsync's TestMutexExtendExpired and
// TestSetNXOnExtendFailsToAcquireLockWhenKeyIsTaken.
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
	if v := c.Get(ctx, l.Config().UniqueKey()).Val(); v != "someone-else-1" {
		t.Fatalf("the key after the failed Extend: %q, want the new holder's", v)
	}
	if err := l.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock: %v", err)
	}
}

// Every write is safe to arrive late or twice: after Extend has lengthened a holding's lease,
// no copy of an earlier request of that holding — a renewal held up on the way, the acquiring
// request sent again by the client after a lost reply, a shorter Extend that failed — can cut
// the key's life short behind the holder's back. Each case keeps such a request on the wire or
// sends a copy of it after the Extend, waits past the old lease, and checks that another
// process cannot take the key while the holder still believes it holds it.
func TestExtendSurvivesLateAndRepeatedWrites(t *testing.T) {
	t.Parallel()
	const lease, long = 2 * time.Second, 10 * time.Second // (a renewal held on the wire leaves 500 ms for the next, and a stall of the process must not outrun the first)
	setup := func(t *testing.T) (*dlock.DistributedReentrantLock, *dlock.DistributedReentrantLock, *wire) {
		ga, ca := newGen(t)
		preload(t, ca)
		w := newWire(t, ca)
		gb, _ := newGen(t)
		la, _ := ga.GenWithLease("EXT", target(t), lease)
		lb, _ := gb.GenWithLease("EXT", target(t), lease)
		return la, lb, w
	}
	lockA := func(t *testing.T, la *dlock.DistributedReentrantLock) *dlock.Owner {
		owned, err := la.Lock(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = owned.Unlock() })
		return owned
	}
	extend := func(t *testing.T, la *dlock.DistributedReentrantLock, owned *dlock.Owner) {
		if err := la.Extend(owned, long); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	// after the late writes landed, wait past the old lease, counted from the last of them
	settle := func() { time.Sleep(2 * lease) }

	t.Run("a renewal held on the wire lands after Extend", func(t *testing.T) {
		la, lb, w := setup(t)
		w.hold("renew", 1)
		owned := lockA(t, la)
		waitFor(t, func() bool { return w.heldCount() == 1 }) // the first renewal, at 3/4 of the lease
		extend(t, la, owned)
		w.deliverHeld()
		settle()
		checkNoSecondOwner(t, la, owned, lb)
	})

	t.Run("a shorter Extend that failed lands after a longer renewal", func(t *testing.T) {
		la, lb, w := setup(t)
		owned := lockA(t, la)
		extend(t, la, owned)
		w.hold("renew", 1)
		var pe *dlock.RedisProcessError
		if err := la.Extend(owned, 200*time.Millisecond); !errors.As(err, &pe) {
			t.Fatalf("Extend with its request held on the wire: %v, want a *RedisProcessError", err)
		}
		extend(t, la, owned) // a later, longer renewal succeeds
		w.deliverHeld()
		settle()
		checkNoSecondOwner(t, la, owned, lb)
	})

	t.Run("the acquiring request arrives again after Extend", func(t *testing.T) {
		la, lb, w := setup(t)
		owned := lockA(t, la)
		extend(t, la, owned)
		replayLatestFirst(w)
		settle()
		checkNoSecondOwner(t, la, owned, lb)
	})

	t.Run("a local hand-over's requests arrive again after Extend", func(t *testing.T) {
		la, lb, w := setup(t)
		first := lockA(t, la)
		got := lockAsync(t, la, ctxT(t, 10*time.Second))
		waitFor(t, func() bool { s, _ := la.State(ctxT(t, time.Second)); return s.LocalWaiters })
		if err := first.Unlock(); err != nil {
			t.Fatal(err)
		}
		owned := <-got
		if owned == nil {
			return
		}
		t.Cleanup(func() { _ = owned.Unlock() })
		extend(t, la, owned)
		replayLatestFirst(w)
		settle()
		checkNoSecondOwner(t, la, owned, lb)
	})
}

// A reply never overwrites a newer setting: a regular renewal whose reply comes after Extend
// succeeded does not bring the old lease back. The renewals after it keep the key alive with
// the lease Extend set.
func TestExtendOutlastsARenewalInFlight(t *testing.T) {
	const lease, long = time.Second, 4 * time.Second // (Extend has a quarter of the lease, 250 ms, while the renewal is held: a stall of a loaded machine outran 75 ms)
	g, c := newGen(t)
	preload(t, c)
	w := newWire(t, c)
	l, _ := g.GenWithLease("EXTFLY", target(t), lease)
	ctx := ctxT(t, 20*time.Second)
	w.stall("renew", 1)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer owned.Unlock()
	waitFor(t, func() bool { return w.stalledCount() == 1 }) // the expander's renewal, at 3/4 of the lease
	if err := l.Extend(owned, long); err != nil {
		t.Fatal(err)
	}
	w.unstall() // its reply comes now, after Extend's
	// The next renewal comes at 3/4 of the new lease; after it, the key lives the new lease.
	renewed := make(chan struct{}, 1)
	w.onSend("renew", func([]any) {
		select {
		case renewed <- struct{}{}:
		default:
		}
	})
	recv(t, renewed, "the next renewal")
	time.Sleep(100 * time.Millisecond) // its reply
	if err := context.Cause(owned); err != nil {
		t.Fatalf("lost: %v", err)
	}
	if ttl := c.PTTL(ctx, key(l)).Val(); ttl <= lease {
		t.Fatalf("after the renewal that followed Extend the key lives %v, the old lease: the late reply undid Extend", ttl)
	}
}

// An Extend whose renewal gets no answer within the lease, nor any other renewal, finds its
// holding lost (its lease ran out) and says why on one line: its error matches ErrLockLost, and the *RedisProcessError of
// the renewal, matching the deadline. The owner context ends too.
func TestExtendUnansweredWithinTheLease(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.GenWithLease("UNANSWERED", target(t), 300*time.Millisecond)
	o, err := l.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var on atomic.Bool
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !on.Load() || processor.ScriptName(cmd.Args()) != "renew" {
			return next(ctx, cmd)
		}
		<-ctx.Done() // every renewal, Extend's and the lease thread's
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}})
	on.Store(true)
	err = l.Extend(o, time.Second)
	var pe *dlock.RedisProcessError
	if !errors.As(err, &pe) || pe.Op != "renew" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Extend without an answer within the lease = %v, want a *RedisProcessError of renew matching the deadline", err)
	}
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Extend without an answer within the lease = %v, want it to match ErrLockLost: the lease ran out", err)
	}
	if !errors.Is(context.Cause(o), dlock.ErrLockLost) {
		t.Fatalf("the owner context after the lease ran out unanswered: %v, want lost", context.Cause(o))
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("Extend's error spans lines: %q", err)
	}
}

// An Extend given a context of the owner's with a deadline waits for Redis no longer than that
// deadline: the renewal's outcome is then unknown, as after a Redis failure — a
// *RedisProcessError matching the deadline, not a loss — and the holding keeps its lease and
// renewals.
func TestExtendWaitsForRedisNoLongerThanItsContextsDeadline(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.GenWithLease("BOUNDED", target(t), 10*time.Second)
	o, err := l.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var on atomic.Bool
	c.AddHook(unanswered("renew", &on)) // (Extend's: the lease thread renews only after 7.5 s)
	on.Store(true)
	bounded, cancel := context.WithTimeout(o, 200*time.Millisecond)
	defer cancel()
	err = l.Extend(bounded, time.Minute)
	var pe *dlock.RedisProcessError
	if !errors.As(err, &pe) || pe.Op != "renew" || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Extend with a deadline of 200 ms, unanswered = %v, want a *RedisProcessError of renew matching the deadline, not a loss", err)
	}
	if strings.Contains(err.Error(), "lease ran out") {
		t.Fatalf("Extend's error after the caller's deadline names the lease: %v", err)
	}
	if l.HoldCount(o) != 1 || context.Cause(o) != nil {
		t.Fatalf("after an Extend cut by its deadline: hold count %d, owner's cause %v; want still held", l.HoldCount(o), context.Cause(o))
	}
	if err := l.Unlock(o); err != nil {
		t.Fatal(err)
	}
}

// An Extend whose renewal goes unanswered past the lease it was sent under does not lose a
// holding that another renewal kept alive meanwhile (here a second Extend): the lease it counts
// the key held by did not run out. It returns the *RedisProcessError, not a loss.
func TestExtendUnansweredOutlivedByAnotherRenewal(t *testing.T) {
	g, c := newGen(t)
	w := newWire(t, c)
	l, _ := g.GenWithLease("EXTOUTLIVED", target(t), time.Second)
	owned, err := l.Lock(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer owned.Unlock()
	w.stall("renew", 1)
	defer w.unstall()
	first := make(chan error, 1)
	go func() { first <- l.Extend(owned, time.Second) }()
	waitFor(t, func() bool { return w.stalledCount() == 1 })
	if err := l.Extend(owned, 10*time.Second); err != nil { // renewed now: held 10 s from here
		t.Fatal(err)
	}
	err = recv(t, first, "the unanswered Extend")
	var pe *dlock.RedisProcessError
	if !errors.As(err, &pe) || errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("an Extend unanswered past its lease, after another renewal succeeded = %v, want a *RedisProcessError, not a loss", err)
	}
	if cause := context.Cause(owned); cause != nil {
		t.Fatalf("the holding, renewed for 10 s, was lost by an Extend unanswered past the old lease: %v", cause)
	}
}

// An Extend whose renewal goes unanswered while its holding passes to another goroutine of the
// process does not lose the new holder's tenure, which renewals kept alive: the key stays held.
func TestExtendUnansweredDoesNotLoseTheNextOwner(t *testing.T) {
	g, c := newGen(t)
	w := newWire(t, c)
	l, _ := g.GenWithLease("EXTPASSED", target(t), time.Second)
	ctx := ctxT(t, 20*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := lockAsync(t, l, ctx)
	waitFor(t, func() bool { s, err := l.State(ctx); return err == nil && s.LocalWaiters })
	w.stall("renew", 1)
	defer w.unstall()
	first := make(chan error, 1)
	go func() { first <- l.Extend(owned, time.Second) }()
	waitFor(t, func() bool { return w.stalledCount() == 1 })
	if err := owned.Unlock(); err != nil {
		t.Fatal(err)
	}
	o2 := recv(t, next, "the next owner")
	if o2 == nil {
		t.Fatal("the waiting goroutine did not get the lock")
	}
	defer o2.Unlock()
	if err := l.Extend(o2, 10*time.Second); err != nil { // renewed now: held 10 s from here
		t.Fatal(err)
	}
	err = recv(t, first, "the unanswered Extend")
	if errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("an Extend of a holding let go meanwhile = %v, want no loss", err)
	}
	if cause := context.Cause(o2); cause != nil {
		t.Fatalf("the next owner, renewed for 10 s, was lost by the previous owner's Extend: %v", cause)
	}
}

// An Extend that Redis fails (a transient error) returns a *RedisProcessError and changes
// nothing: the holding stays, with its lease and its renewals, and the next Extend renews it
// with the new lease. Ports bsm/redislock's TestLock_Refresh_retry_transient_error and
// TestLock_Refresh_retry_transient_error_exhausted (dlock does not retry an Extend itself:
// the caller calls it again).
func TestExtendThroughATransientRedisFailure(t *testing.T) {
	c := srv.Client()
	var fails atomic.Int32
	errFlaky := errors.New("flaky: injected")
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) == "renew" && fails.Add(-1) >= 0 {
			cmd.SetErr(errFlaky)
			return errFlaky
		}
		return next(ctx, cmd)
	}})
	fails.Store(-1 << 20)
	g := genOn(t, c)
	gb, _ := newGen(t)
	l, _ := g.GenWithLease("FLAKY", target(t), 2*time.Second)
	lb, _ := gb.GenWithLease("FLAKY", target(t), 2*time.Second)
	ctx := ctxT(t, 20*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fails.Store(2)
	for i := range 2 {
		err := l.Extend(owned, time.Minute)
		var rpe *dlock.RedisProcessError
		if !errors.As(err, &rpe) || !errors.Is(err, errFlaky) {
			t.Fatalf("Extend %d through a failing Redis = %v, want a *RedisProcessError wrapping the failure", i+1, err)
		}
		if owned.Err() != nil || l.HoldCount(owned) != 1 {
			t.Fatalf("the holding after a failed Extend: %v, HoldCount %d", context.Cause(owned), l.HoldCount(owned))
		}
		if s, err := lb.State(ctx); err != nil || !s.Held() || s.LeaseLeft > 2*time.Second {
			t.Fatalf("the key after a failed Extend: %+v %v (want held, on its 2 s lease)", s, err)
		}
		if _, ok, err := lb.TryLock(ctx); ok || err != nil {
			t.Fatalf("another process got the key after a failed Extend: %v %v", ok, err)
		}
	}
	if err := l.Extend(owned, time.Minute); err != nil {
		t.Fatalf("the Extend after the failures: %v", err)
	}
	if s, err := lb.State(ctx); err != nil || s.LeaseLeft <= 2*time.Second {
		t.Fatalf("the key after the Extend: %+v %v (want a minute's lease)", s, err)
	}
	if err := owned.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A holding is counted held from the send of the request that took it, for its lease less the
// drift allowance, and its renewal is due when a quarter of the lease is left (at 75 % of it:
// the lease thread's schedule) — the mutex's tenure as a read-write lock's and a semaphore's
// holdings. (A lease of a minute keeps any renewal from running meanwhile.)
func TestRenewalIsDueAtThreeQuartersOfTheLease(t *testing.T) {
	const lease = time.Minute
	g, _ := newGen(t, dlock.WithDefaultLease(lease))
	ctx := ctxT(t, 10*time.Second)
	check := func(what string, before, after, renewAt, until time.Time) {
		t.Helper()
		if lo, hi := domain.HeldUntil(before, lease), domain.HeldUntil(after, lease); until.Before(lo) || until.After(hi) {
			t.Errorf("%s: counted held until %v, outside its lease from the take's send (%v to %v)", what, until, lo, hi)
		}
		if left := until.Sub(renewAt); left != lease/4 {
			t.Errorf("%s: its renewal is due %v before its lease ends, want a quarter of the lease (%v)", what, left, lease/4)
		}
	}

	l, err := g.Gen("RENEW", target(t))
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	renewAt, until, ok := g.RenewDue(l.Config().UniqueKey())
	if !ok {
		t.Fatal("the mutex: no tenure owned after Lock")
	}
	check("the mutex", before, after, renewAt, until)
	if err := owned.Unlock(); err != nil {
		t.Fatal(err)
	}

	rw, err := g.GenRW("RENEW", target(t)+".rw")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := g.GenSemaphore("RENEW", target(t)+".sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		cfg  domain.DLockConfig
		take func() (*dlock.Owner, error)
	}{
		{"a write-hold", rw.Config(), func() (*dlock.Owner, error) { return rw.Lock(ctx) }},
		{"a read-hold", rw.Config(), func() (*dlock.Owner, error) { return rw.RLock(ctx) }},
		{"a semaphore's holding", sem.Config(), func() (*dlock.Owner, error) { return sem.Acquire(ctx, 1) }},
	} {
		// (the first take subscribes the process to the lock's channel, and a holding taken
		// by a request sent before Redis confirmed that renews at once: a message may have
		// gone unheard)
		owned, err := c.take()
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		channel := processor.SharedChannel(c.cfg, g.LockerPrefix())
		for !g.ConfirmedNow(channel) {
			if ctx.Err() != nil {
				t.Fatalf("%s: the channel's subscription never confirmed", c.what)
			}
			time.Sleep(time.Millisecond)
		}
		if err := owned.Unlock(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		before := time.Now()
		owned, err = c.take()
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		after := time.Now()
		locker, _, _, _, _ := dlock.SharedOwned(owned)
		h, ok := g.SharedBelief(c.cfg.UniqueKey())[locker]
		if !ok {
			t.Fatalf("%s: %q not lent after its take", c.what, locker)
		}
		check(c.what, before, after, h.RenewAt, h.Until)
		if err := owned.Unlock(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
	}
}
