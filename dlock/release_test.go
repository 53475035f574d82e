package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

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

// A release that fails is retried in the background until the lease runs out, however long
// the lock was held (renewed) before: the key does not stay, unrenewed, locking the other
// processes out for a lease.
func TestFailedReleaseOfALongHoldIsRetried(t *testing.T) {
	ga, ca := newGen(t)
	lease := 300 * time.Millisecond
	la, _ := ga.GenWithLease("R2RL", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	o, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*lease + 100*time.Millisecond) // held (and renewed) for more than two leases
	var fails, answered atomic.Int32
	fails.Store(2) // the release and the first give-back fail; Redis is fine afterwards
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !scriptIs("release")(cmd.Args()) {
			return next(ctx, cmd)
		}
		if fails.Add(-1) >= 0 {
			err := errors.New("dial tcp: connection refused (injected)")
			cmd.SetErr(err)
			return err
		}
		defer answered.Add(1) // (a release that Redis ran)
		return next(ctx, cmd)
	}})
	err = la.Unlock(o)
	t.Logf("Unlock: %v", err)
	if errors.Is(err, dlock.ErrLockLost) {
		t.Skipf("the 300 ms lease ran out on a loaded machine before the release: nothing to retry")
	}
	// The retry comes within a few retry intervals (lease/10); a loaded machine may send it
	// later, and the key expiring meanwhile must not pass for it: wait for it to have run.
	waitFor(t, func() bool { return answered.Load() > 0 })
	admin := srv.Client()
	defer admin.Close()
	n, _ := admin.Exists(ctx, la.Config().UniqueKey()).Result()
	pttl, _ := admin.PTTL(ctx, la.Config().UniqueKey()).Result()
	if n != 0 {
		t.Fatalf("the key is still held after a retried release; it expires in %v", pttl)
	}
}

// A release that Redis keeps failing is sent again at most once a tenth of the lease (at most
// 50 ms apart), for the mutex, the write side and the semaphore: the family's, owed again after
// each try, pauses as long before it is sent again while nothing else is due, not at once. Once Redis answers, the Unlock ends: the release went
// through, or (the mutex's) it said the failure and the retry goes on in the background.
func TestLastingReleaseFailureIsNoBusyLoop(t *testing.T) {
	const lease = 5 * time.Second // (a release is owed for its lease: longer than the count)
	heldOfEachKind(t, lease, isRelease, func(t *testing.T, g *dlock.Generator, owned *dlock.Owner, failing *atomic.Int32) {
		failing.Store(1)
		unlocked := make(chan error, 1)
		go func() { unlocked <- owned.Unlock() }()
		start := time.Now()
		time.Sleep(2 * time.Second)
		n, elapsed := int64(failing.Swap(0)-1), time.Since(start)
		if bound := 2 + int64(elapsed/(50*time.Millisecond)); n > bound || n < 3 {
			t.Fatalf("%d releases in %v while Redis failed them, want 3 to %d", n, elapsed, bound)
		}
		t.Logf("%d releases in %v while Redis failed them", n, elapsed)
		if err := recv(t, unlocked, "the Unlock once Redis answers"); err != nil && !errors.Is(err, errInjected) {
			t.Fatalf("Unlock = %v, want nil or the injected failure", err)
		}
		if err := g.Close(ctxT(t, 10*time.Second)); err != nil {
			t.Fatalf("Close once Redis answers = %v, want nil: the release went through", err)
		}
	})
}

// While Redis fails them, the give-backs of a key go again one a pause between them all, for
// the mutex, the read-write lock and the semaphore, not each one a pause: a TryLock in a loop
// on a failing Redis gives back an attempt each time (its outcome is unknown), and each
// give-back is retried for a lease — one a pause each, they were thousands a second after the
// loop stopped.
func TestGiveBacksRedisFailsGoAgainOneAPauseBetweenThemAll(t *testing.T) {
	const lease = 5 * time.Second // (a give-back is retried for a lease: longer than the count)
	for _, kind := range []string{"mutex", "rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			g, f := failingGen(t, lease)
			tg := uniqueTarget(t)
			pause := giveBackPause(kind, lease)
			ctx := ctxT(t, 20*time.Second)
			const tries = 50
			failedTries(ctx, t, g, f, kind, tg, lease, tries)
			before, start := f.releases.Load(), time.Now()
			time.Sleep(time.Second)
			n, elapsed := f.releases.Load()-before, time.Since(start)
			f.failing.Store(false)
			if bound := 2 + int64(elapsed/pause); n > bound || n < 1 {
				t.Fatalf("%d releases in %v after %d TryLocks that Redis failed, want 1 to %d: one a pause (%v) between them all", n, elapsed, tries, bound, pause)
			}
			t.Logf("%d releases in %v after %d TryLocks that Redis failed", n, elapsed, tries)
			if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
				t.Fatalf("Close once Redis answers = %v", err)
			}
		})
	}
}

// Once Redis answers one of a key's give-backs that it failed, the others go at once, for the
// mutex, the read-write lock and the semaphore, not one a pause: a TryLock whose take Redis ran
// but whose answer was lost holds the key until its give-back goes, and behind two hundred
// failed ones, one a pause, it would go after the lease (the key blocked until it expired);
// Close, which waits for them, would return after the lease.
func TestGiveBacksRedisFailedGoAtOnceWhenItAnswersOne(t *testing.T) {
	const lease = 10 * time.Second // (the mutex's pause is a second)
	for _, kind := range []string{"mutex", "rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			g, mode, releases := modeGen(t, lease)
			g2, _ := newGen(t, dlock.WithDefaultLease(lease))
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			mode.Store(hookFail)
			const tries = 200 // (the family's pause is 50 ms: one a pause, these outlast half the lease)
			for i := range tries + 1 {
				if i == tries {
					mode.Store(hookRunTake) // the last: Redis takes the key for it
				}
				if o, _, err := tryKind(ctx, t, g, kind, tg, lease); o != nil || !errors.Is(err, errInjected) {
					t.Fatalf("TryLock %d while Redis fails = %v, %v; want the failure", i+1, o, err)
				}
			}
			waitFor(t, func() bool { return releases.Load() >= tries+1 }) // (each gives back its attempt once at once)
			if o, ok, err := tryKind(ctx, t, g2, kind, tg, lease); o != nil || ok || err != nil {
				t.Fatalf("another process's TryLock while the lost take holds the key = %v, %v, %v; want it held", o, ok, err)
			}
			recovered := time.Now()
			mode.Store(hookPass)
			waitFor(t, func() bool { o, _, _ := tryKind(ctx, t, g2, kind, tg, lease); return o != nil })
			if took := time.Since(recovered); took >= lease/2 {
				t.Fatalf("the key came free %v after Redis answered again, want well within the lease (%v): the give-backs went one a pause", took, lease)
			} else {
				t.Logf("the key came free %v after Redis answered again", took)
			}
			// Close waits for the give-backs on their way: all of them go at once too.
			if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
				t.Fatalf("Close once Redis answers = %v", err)
			}
			if took := time.Since(recovered); took >= lease/2 {
				t.Fatalf("Close returned %v after Redis answered again, want well within the lease (%v): the give-backs went one a pause", took, lease)
			} else {
				t.Logf("Close returned %v after Redis answered again", took)
			}
		})
	}
}

// A mutex give-back that Redis failed goes again as soon as Redis answers another give-back of
// the key, in its own pause too, not when that pause ends: here the give-back of a take whose
// answer was lost (it holds the key) failed just before Redis answered again, and the key was
// held a pause (lease/10) more.
func TestGiveBackInItsPauseGoesWhenRedisAnswersAnother(t *testing.T) {
	const lease = 40 * time.Second // (the mutex's pause: 4 s)
	g, mode, releases := modeGen(t, lease)
	g2, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mode.Store(hookRunTake)
	if o, _, err := mustGen(t, g, "GIVEBACKS", tg, lease).TryLock(ctx); o != nil || !errors.Is(err, errInjected) {
		t.Fatalf("TryLock whose answer is lost = %v, %v; want the failure", o, err)
	}
	waitFor(t, func() bool { return releases.Load() >= 1 }) // its give-back's first try failed
	if o, _, err := mustGen(t, g2, "GIVEBACKS", tg, lease).TryLock(ctx); o != nil || err != nil {
		t.Fatalf("another process's TryLock while the lost take holds the key = %v, %v; want it held", o, err)
	}
	mode.Store(hookFailTake) // Redis answers releases again
	if o, _, err := mustGen(t, g, "GIVEBACKS", tg, lease).TryLock(ctx); o != nil || !errors.Is(err, errInjected) {
		t.Fatalf("second TryLock = %v, %v; want the failure", o, err)
	}
	waitFor(t, func() bool { return releases.Load() >= 2 }) // its give-back, answered
	answered := time.Now()
	mode.Store(hookPass)
	waitFor(t, func() bool { o, _, _ := mustGen(t, g2, "GIVEBACKS", tg, lease).TryLock(ctx); return o != nil })
	if took := time.Since(answered); took >= lease/20 {
		t.Fatalf("the key came free %v after Redis answered a give-back of it, want at once, not after the pause (%v)", took, lease/10)
	} else {
		t.Logf("the key came free %v after Redis answered a give-back of it", took)
	}
	if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
		t.Fatalf("Close = %v", err)
	}
}

// A mutex give-back whose try Redis fails goes again at once when Redis answered another
// give-back of the key while that try was on its way, not after its pause: the wake-up is
// taken before the try is sent. (Taken as the give-back began to wait, one that came in
// between was missed, and the key, held by a lost take, stayed held for the pause.)
func TestGiveBackOnItsWayGoesWhenRedisAnswersAnother(t *testing.T) {
	const lease = 40 * time.Second // (the mutex's pause: 4 s)
	c := srv.Client()
	defer c.Close()
	var mode atomic.Int32 // hookPass, hookRunTake (then hookFailTake), hookFailTake
	var releases, answered atomic.Int64
	onWay, gate := make(chan struct{}), make(chan struct{})
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		a := cmd.Args()
		m := mode.Load()
		switch {
		case m == hookPass || processor.ScriptName(a) == "":
			return next(ctx, cmd)
		case isRelease(a):
			if releases.Add(1) == 1 { // the lost take's give-back: on its way until the gate opens, then failed
				close(onWay)
				<-gate
				break
			}
			err := next(ctx, cmd)
			answered.Add(1)
			return err
		case m == hookRunTake && scriptIs("lock")(a):
			if err := next(ctx, cmd); err != nil {
				return err // (NOSCRIPT: go-redis sends the script itself next)
			}
			mode.Store(hookFailTake)
		}
		cmd.SetErr(errInjected)
		return errInjected
	}})
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	g2, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mode.Store(hookRunTake)
	if o, _, err := tryKind(ctx, t, g, "mutex", tg, lease); o != nil || !errors.Is(err, errInjected) {
		t.Fatalf("TryLock whose answer is lost = %v, %v; want the failure", o, err)
	}
	recv(t, onWay, "the give-back's try")
	if o, _, err := tryKind(ctx, t, g2, "mutex", tg, lease); o != nil || err != nil {
		t.Fatalf("another process's TryLock while the lost take holds the key = %v, %v; want it held", o, err)
	}
	if o, _, err := tryKind(ctx, t, g, "mutex", tg, lease); o != nil || !errors.Is(err, errInjected) {
		t.Fatalf("second TryLock = %v, %v; want the failure", o, err)
	}
	waitFor(t, func() bool { return answered.Load() >= 1 }) // its give-back, answered
	time.Sleep(100 * time.Millisecond)                      // (and heard, before the first one's failure comes)
	mode.Store(hookPass)
	failed := time.Now()
	close(gate)
	waitFor(t, func() bool { o, _, _ := tryKind(ctx, t, g2, "mutex", tg, lease); return o != nil })
	if took := time.Since(failed); took >= lease/20 {
		t.Fatalf("the key came free %v after its give-back's try failed, want at once: Redis had answered another meanwhile", took)
	} else {
		t.Logf("the key came free %v after its give-back's try failed", took)
	}
}

// The release of a holding that Redis fails goes again for a lease after the Unlock, for every
// kind, not only until the holding's lease by this process's clock: a renewal that ran in Redis
// but whose answer was lost keeps the holding there past that, up to the renewal's send and a
// lease. Once Redis answers again, the release lets it go (the family's Unlock, which waits for
// it, returns nil); the lock family gave it up at the holding's lease, and the key stayed held
// with nobody holding it until the renewal's lease ran out.
func TestReleaseOfAHoldingAnUnansweredRenewalKeptGoesAgainPastItsLease(t *testing.T) {
	const lease = 2 * time.Second
	for _, kind := range []string{"mutex", "rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			c := srv.Client()
			defer c.Close()
			var failing, recovered atomic.Bool
			var renewed, releasedAfter atomic.Int64
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				a := cmd.Args()
				if processor.ScriptName(a) == "" {
					return next(ctx, cmd)
				}
				if !failing.Load() {
					if recovered.Load() && isRelease(a) {
						releasedAfter.Add(1)
					}
					return next(ctx, cmd)
				}
				switch {
				case scriptIs("renew")(a) || sharedArg(a, "op") == "renew":
					if err := next(ctx, cmd); err != nil {
						return err
					}
					renewed.Add(1) // it ran in Redis; its answer is lost
				case !isRelease(a):
					return next(ctx, cmd)
				}
				cmd.SetErr(errInjected)
				return errInjected
			}})
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			var owned *dlock.Owner
			switch kind {
			case "mutex":
				owned, err = mustGen(t, g, "GIVEBACKS", tg, lease).Lock(ctx)
			case "rw":
				owned, err = rwOf(t, g, tg).Lock(ctx)
			default:
				owned, err = semOf(t, g, tg, 1).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			locked := time.Now()
			time.Sleep(lease / 2) // (past any renewal right after the take)
			failing.Store(true)
			waitFor(t, func() bool { return renewed.Load() >= 1 })
			unlocked := make(chan error, 1)
			go func() { unlocked <- owned.Unlock() }()
			time.Sleep(time.Until(locked.Add(lease + 150*time.Millisecond))) // past the lease by this process's clock
			recovered.Store(true)
			failing.Store(false)
			for deadline := time.Now().Add(lease); releasedAfter.Load() == 0; time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no release went within a lease once Redis answered again: given up while the renewal kept the holding")
				}
			}
			// (The mutex's Unlock returns the first failure, its release going on in the
			// background; the family's waits for what became of it.)
			if err := recv(t, unlocked, "the Unlock"); err != nil && (kind != "mutex" || !errors.Is(err, errInjected)) {
				t.Fatalf("Unlock = %v, want nil: its release went again once Redis answered, and let the holding go", err)
			}
			g2, _ := newGen(t, dlock.WithDefaultLease(lease))
			waitFor(t, func() bool { o, _, err := tryKind(ctx, t, g2, kind, tg, lease); return o != nil && err == nil })
			if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
				t.Fatalf("Close = %v", err)
			}
		})
	}
}

// Give-backs that Redis failed until their life ran out (the mutex's lease, the lock family's
// line entry's) do not go all at once, each a last time, to a Redis that still fails: the
// key's releases keep going one a pause between them all. Nor are they kept, to go once Redis
// answers: what they let go has expired, and Close, once Redis answers, has none left to send.
func TestExpiredGiveBacksAreNotSentAgainAtAFailingRedis(t *testing.T) {
	const lease = time.Second // (a family give-back lives processor.MinEntryTTL, 2 s: within the count)
	for _, kind := range []string{"mutex", "rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			g, f := failingGen(t, lease)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			const tries = 200 // (more than the pauses in the count: unsettled, some would be left)
			failedTries(ctx, t, g, f, kind, tg, lease, tries)
			before, start := f.releases.Load(), time.Now()
			time.Sleep(processor.MinEntryTTL + time.Second)
			n, elapsed := f.releases.Load()-before, time.Since(start)
			f.failing.Store(false)
			if bound := 2 + int64(elapsed/giveBackPause(kind, lease)); n > bound {
				t.Fatalf("%d releases in %v, past the give-backs' life, want at most %d: one a pause between them all", n, elapsed, bound)
			}
			t.Logf("%d releases in %v after %d TryLocks that Redis failed", n, elapsed, tries)
			if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
				t.Fatalf("Close once Redis answers = %v", err)
			}
			if n := f.answered.Load(); n > 0 {
				t.Fatalf("Close, once Redis answers, sent %d releases of give-backs that had expired", n)
			}
		})
	}
}

// A Close while Redis fails every request waits for the give-backs on their way no longer than
// their life, and returns nil: nothing of its own was left. (Each family give-back that had
// expired went once more, and Close waited a pause for each: 12 s for 200.)
func TestCloseAtAFailingRedisWaitsForGiveBacksNoLongerThanTheirLife(t *testing.T) {
	const lease = time.Second
	for _, kind := range []string{"mutex", "rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			g, f := failingGen(t, lease)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			const tries = 200
			failedTries(ctx, t, g, f, kind, tg, lease, tries)
			start := time.Now()
			bound := processor.MinEntryTTL + lease + time.Second // (every give-back has expired by then)
			err := g.Close(ctxT(t, bound+5*time.Second))
			took := time.Since(start)
			if err != nil {
				t.Fatalf("Close at a failing Redis = %v after %v, want nil: nothing of its own was left", err, took)
			}
			if took > bound {
				t.Fatalf("Close at a failing Redis took %v, want at most %v: every give-back had expired", took, bound)
			}
			t.Logf("Close at a failing Redis returned after %v", took)
		})
	}
}

// The modes of modeGen's client.
const (
	hookPass     = iota
	hookFail     // every script fails before it runs
	hookRunTake  // the next take (a TryLock's) runs and its answer is lost; then hookFail
	hookFailTake // takes fail before they run; releases pass
)

// modeGen returns a Generator of lease on a client of its own that does as mode says (hookPass
// first), and counts the releases sent in the other modes. The Generator is closed, and then
// the client, when t ends.
func modeGen(t *testing.T, lease time.Duration) (*dlock.Generator, *atomic.Int32, *atomic.Int64) {
	t.Helper()
	var mode atomic.Int32
	var releases atomic.Int64
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		m := mode.Load()
		if m == hookPass || processor.ScriptName(cmd.Args()) == "" {
			return next(ctx, cmd)
		}
		if isRelease(cmd.Args()) {
			releases.Add(1)
			if m == hookFailTake {
				return next(ctx, cmd)
			}
		} else if m == hookRunTake && (scriptIs("lock")(cmd.Args()) || sharedArg(cmd.Args(), "op") == "take") {
			if err := next(ctx, cmd); err != nil {
				return err // (NOSCRIPT: go-redis sends the script itself next)
			}
			mode.Store(hookFail)
		}
		cmd.SetErr(errInjected)
		return errInjected
	}})
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mode.Store(hookPass); _ = g.Close(context.Background()) })
	return g, &mode, &releases
}

// failSwitch is what failingGen's client does: while failing is set it fails every script
// before it runs, counting the releases it fails (releases); otherwise it counts the releases
// that pass (answered).
type failSwitch struct {
	failing            atomic.Bool
	releases, answered atomic.Int64
}

// failingGen returns a Generator of lease on a client of its own that fails as f says. The
// Generator is closed, and then the client, when t ends.
func failingGen(t *testing.T, lease time.Duration) (*dlock.Generator, *failSwitch) {
	t.Helper()
	f := &failSwitch{}
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) == "" {
			return next(ctx, cmd)
		}
		if !f.failing.Load() {
			if isRelease(cmd.Args()) {
				f.answered.Add(1)
			}
			return next(ctx, cmd)
		}
		if isRelease(cmd.Args()) {
			f.releases.Add(1)
		}
		cmd.SetErr(errInjected)
		return errInjected
	}})
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.failing.Store(false); _ = g.Close(context.Background()) })
	return g, f
}

// failedTries sets f failing and makes tries TryLocks of kind on tg, each of which must fail
// with it; it returns once each gave its attempt back once (its outcome was unknown).
func failedTries(ctx context.Context, t *testing.T, g *dlock.Generator, f *failSwitch, kind, tg string, lease time.Duration, tries int) {
	t.Helper()
	f.failing.Store(true)
	for i := range tries {
		if o, _, err := tryKind(ctx, t, g, kind, tg, lease); o != nil || !errors.Is(err, errInjected) {
			t.Fatalf("TryLock %d while Redis fails = %v, %v; want the failure", i+1, o, err)
		}
	}
	waitFor(t, func() bool { return f.releases.Load() >= int64(tries) }) // (perhaps after it returned)
}

// tryKind is a TryLock of kind (mutex, rw: the write side, sem: the permit of a semaphore of
// one) on tg.
func tryKind(ctx context.Context, t testing.TB, g *dlock.Generator, kind, tg string, lease time.Duration) (*dlock.Owner, bool, error) {
	switch kind {
	case "mutex":
		return mustGen(t, g, "GIVEBACKS", tg, lease).TryLock(ctx)
	case "rw":
		return rwOf(t, g, tg).TryLock(ctx)
	}
	return semOf(t, g, tg, 1).TryAcquire(ctx, 1)
}

// giveBackPause is the pause between a key's give-backs while Redis fails them: the mutex's
// lease/10, the family's at most 50 ms.
func giveBackPause(kind string, lease time.Duration) time.Duration {
	if kind == "mutex" {
		return lease / 10
	}
	return min(lease/10, 50*time.Millisecond)
}

// An Unlock whose release gets no answer within the lease returns a *RedisProcessError that
// says so on one line (a log line stays one line), matching the deadline.
func TestUnlockUnansweredWithinTheLease(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.GenWithLease("UNANSWERED", target(t), 300*time.Millisecond)
	o, err := l.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var on atomic.Bool
	c.AddHook(unanswered("release", &on))
	on.Store(true)
	err = l.Unlock(o)
	var pe *dlock.RedisProcessError
	if !errors.As(err, &pe) || pe.Op != "unlock" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock without an answer within the lease = %v, want a *RedisProcessError of unlock matching the deadline", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("Unlock's error spans lines: %q", err)
	}
}

// An Unlock whose release gets no answer before the lease runs out while the renewals failed
// names the renewals' failure: what went wrong is Redis refusing them (a Cluster's CLUSTERDOWN,
// say), not the release, which had only what was left of the lease. (A lease of 4 s: the
// Unlock comes right after the first renewal failed, a second before the lease runs out.)
func TestUnlockAsTheLeaseEndsNamesTheRenewalsFailure(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.GenWithLease("UNANSWERED", target(t), 4*time.Second)
	o, err := l.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var failedRenewals atomic.Int32
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) != "renew" {
			return next(ctx, cmd)
		}
		failedRenewals.Add(1)
		err := errors.New("CLUSTERDOWN injected: the renewal is refused")
		cmd.SetErr(err)
		return err
	}})
	var on atomic.Bool
	c.AddHook(unanswered("release", &on))
	waitFor(t, func() bool { return failedRenewals.Load() > 0 })
	on.Store(true)
	err = l.Unlock(o)
	if errors.Is(err, dlock.ErrLockLost) {
		t.Skipf("the lease ran out before the Unlock (a stall of the loaded machine): %v", err)
	}
	var pe *dlock.RedisProcessError
	if !errors.As(err, &pe) || pe.Op != "unlock" || !errors.Is(err, dlock.ErrLateReply) || !strings.Contains(err.Error(), "CLUSTERDOWN injected") {
		t.Fatalf("Unlock unanswered as the lease ends, its renewals refused = %v; want a *RedisProcessError of unlock naming the renewals' failure", err)
	}
	t.Log(err)
}

// An Unlock that comes while a renewal hangs (Redis stopped answering) stops that renewal; its
// release, unanswered before the lease runs out, says so, and does not name the renewal it
// cut short as the renewals' failure (it matched context.Canceled, which nobody caused).
func TestUnlockWhileItsRenewalHangsNamesNoCancellation(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.GenWithLease("UNANSWERED", target(t), 4*time.Second)
	o, err := l.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var renewing atomic.Int32
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		switch processor.ScriptName(cmd.Args()) {
		case "renew", "release": // (never answered)
			if processor.ScriptName(cmd.Args()) == "renew" {
				renewing.Add(1)
			}
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}})
	waitFor(t, func() bool { return renewing.Load() > 0 })
	err = l.Unlock(o)
	if errors.Is(err, dlock.ErrLockLost) {
		t.Skipf("the lease ran out before the Unlock (a stall of the loaded machine): %v", err)
	}
	if err == nil || errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "renewals failed") {
		t.Fatalf("Unlock while its renewal hung = %v; want an error naming no cancelled renewal", err)
	}
}

// A semaphore's Release that never gets an answer (each try bounded by a third of the
// lease, tried again until the lease ran out) returns a *RedisProcessError that names the
// bound and the lease it comes from: a lease too short for a slow Redis reads as such. (A
// lease of 3 s: a stall of the loaded machine does not lose the holding before the Release.)
func TestFamilyReleaseUnansweredNamesTheBound(t *testing.T) {
	g, c := newGen(t, dlock.WithDefaultLease(3*time.Second))
	s := semOf(t, g, uniqueTarget(t), 1)
	o, err := s.Acquire(ctxT(t, 10*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	var on atomic.Bool
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !on.Load() || sharedArg(cmd.Args(), "op") != "release" {
			return next(ctx, cmd)
		}
		<-ctx.Done() // (never answered)
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}})
	on.Store(true)
	err = s.Release(o)
	var pe *dlock.RedisProcessError
	if !errors.As(err, &pe) || !errors.Is(err, dlock.ErrUnanswered) || !strings.Contains(err.Error(), "(1s, a third of the 3s lease)") {
		t.Fatalf("Release without an answer = %v; want a *RedisProcessError naming the request's bound and the lease", err)
	}
	t.Log(err)
}

// An Unlock given a context of the owner's with a deadline waits for Redis no longer than
// that deadline, for every kind: it then says the release was not waited for, and the
// release goes on — the key is let go once Redis answers, long before the lease of a minute
// runs out, and another process takes it.
func TestUnlockWaitsForRedisNoLongerThanItsContextsDeadline(t *testing.T) {
	for _, kind := range []string{"mutex", "rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			slow, _, p := proxiedGen(t, func(addr string) *redis.Options {
				return &redis.Options{Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
			}, dlock.WithDefaultLease(time.Minute))
			other, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			take := func(g *dlock.Generator) (*dlock.Owner, error) {
				switch kind {
				case "rw":
					return rwOf(t, g, tg).Lock(ctx)
				case "sem":
					return semOf(t, g, tg, 1).Acquire(ctx, 1)
				}
				l, err := g.Gen("BOUNDED", tg)
				if err != nil {
					t.Fatal(err)
				}
				return l.Lock(ctx)
			}
			o, err := take(slow)
			if err != nil {
				t.Fatal(err)
			}
			p.SetLatency(2 * time.Second) // (each way: the release's answer comes 4 s after it is sent)
			bounded, cancel := context.WithTimeout(o, 200*time.Millisecond)
			defer cancel()
			switch kind {
			case "rw":
				err = rwOf(t, slow, tg).Unlock(bounded)
			case "sem":
				err = semOf(t, slow, tg, 1).Release(bounded)
			default:
				l, _ := slow.Gen("BOUNDED", tg)
				err = l.Unlock(bounded)
			}
			var pe *dlock.RedisProcessError
			if !errors.As(err, &pe) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "in the background") {
				t.Fatalf("Unlock with a deadline of 200 ms, Redis 4 s away = %v, want a *RedisProcessError matching the deadline that says the release goes on", err)
			}
			if _, err := take(other); err != nil {
				t.Fatalf("another process's Lock after the bounded Unlock = %v: the release did not go on", err)
			}
		})
	}
}

// After Extend to a longer lease, a release whose reply is lost is retried in the background
// until the extended lease runs out, not only for the handle's original lease: once Redis
// answers again the key is let go.
func TestReleaseRetriesLastTheExtendedLease(t *testing.T) {
	ga, ca := newGen(t)
	gb, _ := newGen(t)
	preload(t, ca)
	var down atomic.Bool
	var failed atomic.Int32
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if down.Load() && scriptIs("release")(cmd.Args()) {
			failed.Add(1)
			return errors.New("dial tcp: connection refused (injected)")
		}
		return next(ctx, cmd)
	}})
	la, _ := ga.GenWithLease("RV3", target(t), 500*time.Millisecond)
	lb, _ := gb.GenWithLease("RV3", target(t), 500*time.Millisecond)
	ctx := ctxT(t, 30*time.Second)
	owned, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Extend(owned, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	if err := la.Unlock(owned); err == nil {
		t.Fatal("Unlock succeeded with Redis down")
	}
	time.Sleep(1500 * time.Millisecond) // Redis unreachable for 1.5 s, well inside the 10 s lease
	down.Store(false)
	if failed.Load() == 0 {
		t.Fatal("hook did not fire")
	}
	lctx, cancel := context.WithTimeout(ctx, 4*time.Second) // retries come every lease/10 at most
	defer cancel()
	ob, err := lb.Lock(lctx)
	if err != nil {
		s, _ := lb.State(ctx)
		t.Fatalf("released key still held %v after Redis came back (release retries gave up after %d tries): %v; state %+v", 4*time.Second, failed.Load(), err, s)
	}
	_ = lb.Unlock(ob)
}

func TestNoResidue(t *testing.T) {
	const typ = "RGRESIDUE"
	t.Run("2000-targets", func(t *testing.T) {
		const lease = time.Second // (an Unlock's request is bounded by the lease: a loaded machine's Redis answers 2000 of them late)
		s := ownRedis(t)
		raw := s.Client()
		defer raw.Close()
		gens := []*dlock.Generator{rgGen(t, s, nil), rgGen(t, s, nil)}
		var wg sync.WaitGroup
		var next atomic.Int64
		ctx := rgCtx(t, time.Minute)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(g *dlock.Generator) {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > 2000 {
						return
					}
					l, err := g.GenWithLease(typ, fmt.Sprintf("t%d", i), lease)
					if err != nil {
						t.Errorf("GenWithLease: %v", err)
						return
					}
					o, err := l.Lock(ctx)
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					if err := l.Unlock(o); errors.Is(err, context.DeadlineExceeded) {
						// (a loaded machine's Redis answered late: the release goes on in the
						// background, and what it leaves is what this test checks)
						t.Logf("Unlock: %v", err)
					} else if err != nil {
						t.Errorf("Unlock: %v", err)
					}
				}
			}(gens[w%2])
		}
		wg.Wait()
		for _, g := range gens {
			if err := g.Close(rgBG()); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		expectEmpty(t, raw, 5*lease+2*time.Second)
	})

	t.Run("after-waiters-gave-up", func(t *testing.T) {
		const lease = time.Second // (A holds on renewals while B and C wait 600 ms: a stall of a loaded machine outran a 500 ms lease)
		s := ownRedis(t)
		raw := s.Client()
		defer raw.Close()
		a, b, c := rgGen(t, s, nil), rgGen(t, s, nil), rgGen(t, s, nil, dlock.WithNotifications(false))
		target := rgTarget(t, 0)
		lA, lB, lC := mustGen(t, a, typ, target, lease), mustGen(t, b, typ, target, lease), mustGen(t, c, typ, target, lease)
		owned, err := lA.Lock(rgCtx(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := lB.TryLock(rgBG()); ok {
			t.Fatal("TryLock got a held key")
		}
		for _, l := range []*dlock.DistributedReentrantLock{lB, lC} {
			ctx, cancel := context.WithTimeout(rgBG(), 300*time.Millisecond)
			if _, err := l.Lock(ctx); err == nil {
				t.Fatal("Lock got a held key")
			}
			cancel()
		}
		gotC := rgLockAsync(lC, rgCtx(t, 10*time.Second)) // still waiting when everything closes
		time.Sleep(100 * time.Millisecond)
		if err := lA.Unlock(owned); err != nil {
			t.Fatal(err)
		}
		if r := rgRecv(t, gotC, 10*time.Second, "C's Lock"); r.err == nil {
			_ = lC.Unlock(r.owned)
		}
		for _, g := range []*dlock.Generator{a, b, c} {
			if err := g.Close(rgBG()); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		expectEmpty(t, raw, 5*lease+2*time.Second)
	})
}

// A release that finds the key gone reports the loss (and logs it, naming the locker), also
// after a hand-off limit's check renewed the tenure (the check's number is marked apart from
// the tenure's locker, so the release still tells "let go before" from "gone").
func TestReleaseReportsALossAfterAYieldCheck(t *testing.T) {
	for _, pause := range []time.Duration{0, 2 * dlock.DefaultHandOff} {
		t.Run(pause.String(), func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			g, c := newGen(t, dlock.WithNotifications(false), dlock.WithLogger(zap.New(core)))
			l, _ := g.GenWithLease("YLOSS", target(t), 5*time.Second)
			ctx := ctxT(t, 30*time.Second)
			a, err := l.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := lockAsync(t, l, ctx)
			waitFor(t, func() bool { return g.Waiters(key(l)) })
			time.Sleep(pause) // past the hand-off limit: the pass is a yield check (nobody else waits)
			if err := a.Unlock(); err != nil {
				t.Fatal(err)
			}
			b := recv(t, got, "B's Lock")
			if b == nil {
				t.FailNow()
			}
			if err := c.Del(ctx, key(l)).Err(); err != nil { // lost from outside
				t.Fatal(err)
			}
			if err := b.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock = %v after the key was deleted, want ErrLockLost", err)
			}
			if n := namingLocker(logs.FilterMessage("dlock: lock lost before release")).Len(); n != 1 {
				t.Fatalf("%d warnings of the loss naming the locker; want 1: %v", n, logs.All())
			}
		})
	}
}

// During a partition the read-write lock's and the semaphore's Unlock reports that its holding
// could not be let go, as the mutex's does: a *RedisProcessError once the holding's lease is
// out, not nil, and not after the client's read timeout (a minute here).
func TestFamilyUnlockDuringAPartition(t *testing.T) {
	for _, kind := range []string{"rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			g, p := partitionable(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 10*time.Second)
			var o *dlock.Owner
			var err error
			if kind == "rw" {
				o, err = rwOf(t, g, tg).RLock(ctx)
			} else {
				o, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			p.Blackhole(true)
			got := make(chan error, 1)
			go func() { got <- o.Unlock() }()
			var pe *dlock.RedisProcessError
			if err := recv(t, got, "Unlock"); !errors.As(err, &pe) {
				t.Fatalf("Unlock during a partition = %v, want a *RedisProcessError", err)
			}
		})
	}
}

// Every Unlock of a lost holding of the lock family reports the loss, as the mutex's does,
// also one that gives up a re-entry (it returned nil while holds remained).
func TestFamilyUnlockOfALostReentryReportsTheLoss(t *testing.T) {
	g, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	ctx := ctxT(t, 30*time.Second)
	sem := semOf(t, g, uniqueTarget(t), 2)
	o, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.Acquire(o, 1); err != nil {
		t.Fatal(err)
	}
	st, err := sem.State(ctx)
	if err != nil || len(st.Holds) != 1 {
		t.Fatalf("State: %+v, %v", st, err)
	}
	if removed, err := sem.ForceRelease(ctx, st.Holds[0].Locker); err != nil || !removed {
		t.Fatalf("ForceRelease = %v, %v", removed, err)
	}
	waitFor(t, func() bool { return o.Err() != nil })
	for i := range 2 {
		if err := sem.Release(o); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Release %d of the lost holding: %v; want ErrLockLost", i+1, err)
		}
	}
}

// An Unlock by anyone but the owner — before any Lock, a context that owns nothing, another
// process's handle or another key's with the owner, a nil or zero Owner — and a second Unlock
// are refused with ErrNotHeld, and the holding stays. Ports bsm/redislock's
// TestLock_Release_not_held, redsync's unlock of a mutex that does not hold, Redisson's
// testUnlockFail and testIsHeldByCurrentThreadOtherThread, and etcd's TestMutexUnlock.
func TestUnlockByNonOwnerOrTwiceIsRefused(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.Gen("NONOWNER", target(t))
	l1b, _ := g1.Gen("NONOWNER", target(t)) // another handle on the key, same process
	l2, _ := g2.Gen("NONOWNER", target(t))
	other, _ := g1.Gen("NONOWNER", target(t)+"-other")
	ctx := ctxT(t, 10*time.Second)
	if err := l1.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock before any Lock = %v, want ErrNotHeld", err)
	}
	o := mustLock(t, l1, ctx)
	oo := mustLock(t, other, ctx)
	for name, try := range map[string]func() error{
		"another goroutine's fresh context":   func() error { return l1b.Unlock(context.Background()) },
		"another process with the owner":      func() error { return l2.Unlock(o) },
		"the owner of another key":            func() error { return l1.Unlock(oo) },
		"another process with its own ctx":    func() error { return l2.Unlock(ctx) },
		"a nil *Owner":                        func() error { var n *dlock.Owner; return n.Unlock() },
		"a zero Owner":                        func() error { return (&dlock.Owner{}).Unlock() },
		"another key's handle with the owner": func() error { return other.Unlock(o) },
	} {
		if err := try(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Unlock by %s = %v, want ErrNotHeld", name, err)
		}
	}
	if o.Err() != nil || l1.HoldCount(o) != 1 || !stateOf(t, l2).Held() {
		t.Fatalf("after the non-owners' Unlocks: owner %v, hold count %d", fmtCause(o), l1.HoldCount(o))
	}
	if err := oo.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock = %v, want ErrNotHeld", err)
	}
	if err := l1b.Unlock(o); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("third Unlock, through another handle = %v, want ErrNotHeld", err)
	}
	if s := stateOf(t, l2); s.Held() {
		t.Fatalf("after the release: %+v", s)
	}
}

// The owner releases through any handle of the key in its Generator (made again by Gen, or by
// GenWithLease with another lease): the lock is let go, and another process takes it. Through a
// handle of another Generator it is refused (ErrNotHeld: ownership is the owner context, not a
// value anyone may present). Ports redsync's TestMutexLockUnlockSplit (a second Mutex with the
// first's value unlocks it).
func TestUnlockThroughAnotherHandleOfTheKey(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	ctx := ctxT(t, 10*time.Second)
	l1, _ := g1.Gen("SPLIT", target(t))
	l2, _ := g2.Gen("SPLIT", target(t))
	for _, other := range []func() (*dlock.DistributedReentrantLock, error){
		func() (*dlock.DistributedReentrantLock, error) { return g1.Gen("SPLIT", target(t)) },
		func() (*dlock.DistributedReentrantLock, error) { return g1.GenWithLease("SPLIT", target(t), time.Hour) },
	} {
		o, err := l1.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l2.Unlock(o); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Unlock through another process's handle = %v, want ErrNotHeld", err)
		}
		h, err := other()
		if err != nil {
			t.Fatal(err)
		}
		if h.HoldCount(o) != 1 {
			t.Fatalf("HoldCount through another handle = %d, want 1", h.HoldCount(o))
		}
		if err := h.Unlock(o); err != nil {
			t.Fatalf("Unlock through another handle of the key: %v", err)
		}
		if o.Err() == nil {
			t.Fatal("the owner did not end with its Unlock through another handle")
		}
		o2, ok, err := l2.TryLock(ctx)
		if err != nil || !ok {
			t.Fatalf("another process after the release: %v %v", ok, err)
		}
		if err := o2.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

// Every kind's Unlock — the mutex's, the read-write lock's, the semaphore's Release and the
// MultiLock's — answers alike what it cannot release, and never panics: ErrInvalidConfig for a
// nil context or on a lock not made by a Generator (a zero or nil one), ErrNotHeld for what
// owns nothing of it (a bare context, a nil or zero Owner, another lock's Owner), and
// ErrClosed for that once the Generator closed.
func TestEveryUnlockRefusesAlike(t *testing.T) {
	g, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 10*time.Second)
	mu, sem, rw := everyKind(t, g, tg, 2)
	m, err := g.MultiOf(mu, sem.Permits(1))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := mustLock(t, mustGen(t, g, "OTHER", tg, time.Second), ctx) // another lock's Owner
	var (
		zmu dlock.DistributedReentrantLock
		nrw *dlock.RWLock
		zs  dlock.Semaphore
		zm  dlock.MultiLock
		nm  *dlock.MultiLock
	)
	kinds := []struct {
		name   string
		unlock func(*dlock.Owner) error
		zero   map[string]func(*dlock.Owner) error // of a zero or a nil lock
	}{
		{"mutex", func(o *dlock.Owner) error { return mu.Unlock(o) },
			map[string]func(*dlock.Owner) error{"zero": func(o *dlock.Owner) error { return zmu.Unlock(o) }}},
		{"read-write lock", func(o *dlock.Owner) error { return rw.Unlock(o) },
			map[string]func(*dlock.Owner) error{"nil": func(o *dlock.Owner) error { return nrw.Unlock(o) }}},
		{"semaphore", func(o *dlock.Owner) error { return sem.Release(o) },
			map[string]func(*dlock.Owner) error{"zero": func(o *dlock.Owner) error { return zs.Release(o) }}},
		{"MultiLock", m.Unlock, map[string]func(*dlock.Owner) error{"zero": zm.Unlock, "nil": nm.Unlock}},
	}
	owners := map[string]*dlock.Owner{"a nil Owner": nil, "a zero Owner": {}, "another lock's Owner": elsewhere}
	check := func(what string, f func() error, want error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panics: %v", what, r)
			}
		}()
		if err := f(); !errors.Is(err, want) {
			t.Errorf("%s = %v, want %v", what, err, want)
		}
	}
	for _, closed := range []bool{false, true} {
		notHeld := dlock.ErrNotHeld
		if closed {
			if err := g.Close(ctx); err != nil {
				t.Fatal(err)
			}
			notHeld = dlock.ErrClosed
		}
		for _, k := range kinds {
			for name, o := range owners {
				check(fmt.Sprintf("%s's Unlock of %s (closed %v)", k.name, name, closed), func() error { return k.unlock(o) }, notHeld)
				for which, zero := range k.zero {
					check(fmt.Sprintf("a %s %s's Unlock of %s (closed %v)", which, k.name, name, closed), func() error { return zero(o) }, dlock.ErrInvalidConfig)
				}
			}
		}
		for name, unlock := range map[string]func(context.Context) error{"mutex": mu.Unlock, "read-write lock": rw.Unlock, "semaphore": sem.Release} {
			check(fmt.Sprintf("%s's Unlock of a bare context (closed %v)", name, closed), func() error { return unlock(context.Background()) }, notHeld)
			check(fmt.Sprintf("%s's Unlock of a nil context (closed %v)", name, closed), func() error { return unlock(nil) }, dlock.ErrInvalidConfig) //nolint:staticcheck // a nil context is what is tested
		}
	}
}

// A release retried in the background after a failure (an Unlock's, or Close's own) that Redis
// then refuses for good (here a fencing counter set by hand to what dlock never writes) stops
// at once, and says so: the refusal is reported to the Observer as a Redis error of the
// unlock, Close's own retry comes back from Close as a *RedisProcessError naming it, and
// nothing waits for the lease (a minute) to run out. No loss is reported: the key stays held
// until its lease runs out.
func TestReleaseRetryRefusedByRedisStopsAndSaysSo(t *testing.T) {
	for _, by := range []string{"Unlock", "Close"} {
		t.Run(by, func(t *testing.T) {
			c := srv.Client()
			defer c.Close()
			admin := rawClient(t)
			var fence string
			var armed atomic.Bool
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if !scriptIs("release")(cmd.Args()) || !armed.CompareAndSwap(true, false) {
					return next(ctx, cmd)
				}
				admin.Set(ctx, fence, "abc", 0) // the retry is refused
				cmd.SetErr(errInjected)
				return errInjected
			}})
			rec := &recorder{}
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Minute), dlock.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			l, _ := g.Gen("RETRYREFUSED", uniqueTarget(t))
			fence = "{" + key(l) + "}:fence"
			t.Cleanup(func() { admin.Del(context.Background(), key(l), fence) })
			o, err := l.Lock(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			var pe *dlock.RedisProcessError
			if by == "Unlock" {
				if err := l.Unlock(o); !errors.As(err, &pe) || !errors.Is(err, errInjected) {
					t.Fatalf("Unlock with its release failed = %v, want a *RedisProcessError wrapping the failure", err)
				}
			}
			cctx := ctxT(t, 20*time.Second) // (turns a retry that waits for the lease into a failure)
			err = g.Close(cctx)
			if cctx.Err() != nil {
				t.Fatalf("Close = %v: it waited for a retry Redis refused", err)
			}
			if by == "Unlock" && err != nil {
				t.Fatalf("Close = %v, want nil: the failed release was the Unlock's, and it said so", err)
			}
			if by == "Close" && (!errors.As(err, &pe) || !strings.Contains(err.Error(), "fencing counter "+fence)) {
				t.Fatalf("Close = %v, want a *RedisProcessError naming the refused counter", err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			refused := 0
			for _, e := range rec.redisErrs {
				if e.Op == "unlock" && strings.Contains(e.Err.Error(), "fencing counter "+fence) {
					refused++
				}
			}
			if refused != 1 || len(rec.lost) != 0 {
				t.Fatalf("the Observer was told of %d refused unlocks (%+v) and %d losses; want 1 and none", refused, rec.redisErrs, len(rec.lost))
			}
		})
	}
}

// A release of the lock family that Redis fails again and again, owed and sent again, logs
// each failed try with its number over all of them: 1, 2, 3, 4, ... — not a count that starts
// again at 1 with every time it is owed.
func TestFamilyReleaseRetriesLogTheirTryNumber(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel) // (at Warn once a minute, else at Debug)
	g, c := newGen(t, dlock.WithLogger(zap.New(core)), dlock.WithDefaultLease(5*time.Second))
	const failures = 5 // (owed again after each)
	var fails atomic.Int32
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs("shared")(cmd.Args()) && slices.Contains(cmd.Args(), any("release")) && fails.Add(-1) >= 0 {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}})
	o, err := rwOf(t, g, uniqueTarget(t)).RLock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fails.Store(failures)
	if err := o.Unlock(); err != nil {
		t.Fatalf("Unlock, its release failed %d times and then let go: %v", failures, err)
	}
	var tries []int64
	for _, e := range logs.FilterMessage("dlock: shared release failed").All() {
		try, _ := e.ContextMap()["try"].(int64)
		tries = append(tries, try)
	}
	// (a try cut short before it reached Redis, on a machine too busy to send it within its
	// bound, is counted and not logged: numbers may be skipped, never repeated)
	increasing := len(tries) == failures && tries[0] == 1
	for i := 1; increasing && i < len(tries); i++ {
		increasing = tries[i] > tries[i-1]
	}
	if !increasing {
		t.Fatalf("the failed tries of the release were logged as tries %v, want %d increasing numbers from 1", tries, failures)
	}
}

// Releases that Redis fails, of every kind (a mutex's, a read-write lock's, a semaphore's, and
// each retried try of them), are said at Warn at most once a minute per Generator, the others
// at Debug, each naming its key and error: a Redis outage while many locks are held does not
// flood the log with a Warn per try, and an operator still learns of it.
func TestFailedReleasesWarnOnceAMinute(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	g, p := partitionable(t, dlock.WithLogger(zap.New(core)))
	ctx := ctxT(t, 10*time.Second)
	var owners []*dlock.Owner
	for i := range 3 {
		tg := fmt.Sprintf("%s-%d", uniqueTarget(t), i)
		rw, err := rwOf(t, g, tg).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sem, err := semOf(t, g, tg, 2).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		mu, err := mustGen(t, g, "WARNMU", tg, time.Second).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		owners = append(owners, rw, sem, mu)
	}
	_ = p.Close() // Redis refuses every connection: every try of every release fails at once
	got := make(chan error, len(owners))
	for _, o := range owners {
		go func() { got <- o.Unlock() }()
	}
	for range owners {
		if err := recv(t, got, "Unlock"); err == nil {
			t.Fatal("Unlock with Redis refusing = nil, want its failure")
		}
	}
	failed := logs.FilterMessageSnippet("release failed")
	warns := failed.FilterLevelExact(zap.WarnLevel).All()
	debugs := failed.FilterLevelExact(zap.DebugLevel).All()
	if len(warns) != 1 || len(debugs) < len(owners)-1 {
		t.Fatalf("%d releases failing gave %d Warn lines and %d Debug lines of a failed release, want 1 Warn (once a minute) and the rest at Debug: %v",
			len(owners), len(warns), len(debugs), failed.All())
	}
	for _, e := range failed.All() {
		if f := e.ContextMap(); f["key"] == nil || f["error"] == nil {
			t.Fatalf("the line %q does not name the key and the error: %v", e.Message, f)
		}
	}
}

// A release of the lock family that Redis fails goes again after the take of a TryLock that
// came meanwhile: the try waits for one request of the release, not for its tries and the
// pauses between them (a release of the read-write lock or the semaphore retried within one
// driver step held a TryLock up by two pauses with fast failures, by a third of the lease
// with failures that come late).
func TestFamilyReleaseThatRedisFailsHoldsUpATryByOneRequest(t *testing.T) {
	for _, kind := range []string{"rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			c := srv.Client()
			defer c.Close()
			var failing atomic.Bool
			var mu sync.Mutex
			var ops []string
			firstFailed, goOn := make(chan struct{}), make(chan struct{})
			var once sync.Once
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				op := sharedArg(cmd.Args(), "op")
				if op == "" {
					return next(ctx, cmd)
				}
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
				if op != "release" || !failing.Load() {
					return next(ctx, cmd)
				}
				once.Do(func() {
					close(firstFailed)
					<-goOn // (Redis's failure comes once the TryLock waits)
				})
				cmd.SetErr(errInjected)
				return errInjected
			}})
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close(context.Background())
			ctx := ctxT(t, 20*time.Second)
			tg := uniqueTarget(t)
			rw, sem := rwOf(t, g, tg), semOf(t, g, tg, 2)
			var owned *dlock.Owner
			var unique string
			if kind == "rw" {
				owned, err = rw.Lock(ctx)
				unique = rw.Config().UniqueKey()
			} else {
				owned, err = sem.Acquire(ctx, 1)
				unique = sem.Config().UniqueKey()
			}
			if err != nil {
				t.Fatal(err)
			}
			failing.Store(true)
			unlocked := make(chan error, 1)
			go func() { unlocked <- owned.Unlock() }()
			recv(t, firstFailed, "the release")
			type try struct {
				o   *dlock.Owner
				err error
			}
			tried := make(chan try, 1)
			go func() {
				var r try
				if kind == "rw" {
					r.o, _, r.err = rw.TryLock(ctx)
				} else {
					r.o, _, r.err = sem.TryAcquire(ctx, 1)
				}
				tried <- r
			}()
			waitFor(t, func() bool { return g.SharedWaiters(unique) == 1 })
			close(goOn)
			r := recv(t, tried, "the TryLock")
			failing.Store(false)
			if r.err != nil {
				t.Fatalf("TryLock while a release failed = %v, want an answer of its own take", r.err)
			}
			if r.o != nil {
				if err := r.o.Unlock(); err != nil {
					t.Fatalf("Unlock of what the TryLock took = %v", err)
				}
			}
			if err := recv(t, unlocked, "the Unlock once Redis answers"); err != nil {
				t.Fatalf("Unlock once Redis answers = %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			at := slices.Index(ops, "release")
			if at < 0 || at+1 >= len(ops) || ops[at+1] != "take" {
				t.Fatalf("the shared requests were %v: after the first release Redis failed, want the TryLock's take, not the release again", ops)
			}
		})
	}
}
