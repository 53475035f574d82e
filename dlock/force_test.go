package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
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

// ForceRelease frees the key and wakes the waiters; a holder in this process is told at once,
// one elsewhere at its next renewal. Ports Redisson's testForceUnlock (RedissonLockTest and
// RedissonFairLockTest) and etcd's TestMutexLockSessionExpired (a lost lease ends the hold).
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
			// a second request finds that holder gone
			if removed, err := op.ForceRelease(ctx, before.Holder); err != nil || removed {
				t.Fatalf("ForceRelease of a holder already removed: %v, %v", removed, err)
			}
		})
	}
}

// While a ForceRelease of a process's own tenure is on its way, and after it until a renewal
// shows the key still the tenure's if its answer did not say it removed it, no goroutine of
// that process takes the tenure: the force may have removed the key and granted it to another
// process before this one learns of it. Here the process hears no messages; the holder's
// Unlock comes after the other process got the key from the force, and the goroutine that
// waited here must not take it (the tenure has tokens left for a pass with no renewal):
// whether the force's answer is slow, or comes after its context ended (an unknown outcome,
// with the renewal that checks slow to answer too).
func TestForceReleaseOnItsWayPassesTheTenureToNoGoroutine(t *testing.T) {
	for _, how := range []string{"a slow answer", "an answer after its context ended"} {
		t.Run(how, func(t *testing.T) {
			var slow atomic.Bool
			forceFor := time.Minute
			ga, cla := newGen(t, dlock.WithNotifications(false), dlock.WithLocalHandOff(time.Minute))
			gb, _ := newGen(t)
			cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				err := next(ctx, cmd)
				switch {
				case !slow.Load() || err != nil:
				case scriptIs("force")(cmd.Args()) && how == "a slow answer":
					time.Sleep(1500 * time.Millisecond)
				case scriptIs("force")(cmd.Args()):
					time.Sleep(800 * time.Millisecond) // (past the force's context: the caller hears no answer)
				case scriptIs("renew")(cmd.Args()) && how != "a slow answer":
					time.Sleep(600 * time.Millisecond)
				}
				return err
			}})
			if how != "a slow answer" {
				forceFor = 200 * time.Millisecond
			}
			la := mustGen(t, ga, "FORCE", target(t), 5*time.Second)
			lb := mustGen(t, gb, "FORCE", target(t), 5*time.Second)
			ctx := ctxT(t, 30*time.Second)
			a1 := mustLock(t, la, ctx)
			passed := lockAsync(t, la, ctx)
			waitFor(t, func() bool { return ga.Waiters(key(la)) })
			if err := a1.Unlock(); err != nil { // (passed on: the renewal before the pass brings a block of tokens)
				t.Fatal(err)
			}
			a2 := recv(t, passed, "the pass")
			a3 := lockBriefly(la, ctx, 4*time.Second) // a goroutine of a's process that waits for the lock
			waitFor(t, func() bool { return ga.Waiters(key(la)) })
			bOwner := lockAsync(t, lb, ctx)
			inLine(t, ctx, la, 1)
			holder := rawClient(t).Get(ctx, key(la)).Val()
			slow.Store(true)
			forced := make(chan error, 1)
			go func() {
				fctx, cancel := context.WithTimeout(ctx, forceFor)
				defer cancel()
				_, err := la.ForceRelease(fctx, holder)
				forced <- err
			}()
			b := recv(t, bOwner, "b's Lock") // (granted by the force)
			var ferr error
			if how != "a slow answer" { // (the pass comes after the force gave up its answer, before the renewal that checks answers)
				ferr = recv(t, forced, "the force")
			}
			if err := a2.Unlock(); err != nil {
				t.Logf("a2's Unlock: %v", err)
			}
			if err := recv(t, a3, "a3's Lock"); err == nil {
				t.Fatal("a goroutine of the forcing process took the lock while the force's grantee held it")
			}
			if err := b.Unlock(); err != nil {
				t.Fatal(err)
			}
			if how == "a slow answer" {
				ferr = recv(t, forced, "the force")
			}
			if (ferr != nil) != (how != "a slow answer") {
				t.Fatalf("ForceRelease = %v", ferr)
			}
		})
	}
}

// A ForceRelease of this process on its way holds back what the read-write lock's or the
// semaphore's holding it names would lend, as it holds back the mutex's passes: the force may
// have removed the holding in Redis and served another process before its answer comes. No
// goroutine of the forcing process is lent the holding meanwhile — not a reader that comes
// after the force, not the writer's own read (a downgrade), not a writer or a permit passed on
// at an Unlock — while the process the force served holds.
func TestForceReleaseOnItsWayLendsTheFamilyHoldingToNoGoroutine(t *testing.T) {
	type take func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error)
	rlock := func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
		return rwOf(t, g, tg).RLock(ctx)
	}
	wlock := func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
		return rwOf(t, g, tg).Lock(ctx)
	}
	permit := func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
		return semOf(t, g, tg, 1).Acquire(ctx, 1)
	}
	for _, k := range []struct {
		name        string
		first, more take // a's goroutines: the holding's first borrower, and the one it would lend to next
		other       take // b's, in line as the force serves it
		atUnlock    bool // the holding would be passed on at the first's Unlock (else lent at once)
		own         bool // more is the first's own (its context the first's Owner)
		sem         bool
	}{
		{name: "a reader that comes after the force", first: rlock, more: rlock, other: wlock},
		{name: "the writer's own read", first: wlock, more: rlock, other: wlock, own: true},
		{name: "a writer passed on at an Unlock", first: wlock, more: wlock, other: wlock, atUnlock: true},
		{name: "a permit passed on at an Unlock", first: permit, more: permit, other: permit, atUnlock: true, sem: true},
	} {
		t.Run(k.name, func(t *testing.T) {
			var slow atomic.Bool
			// a's lease is long: no renewal tells it of b in line, or of the removal, in the test
			ga, cla := newGen(t, dlock.WithNotifications(false), dlock.WithDefaultLease(20*time.Second))
			gb, _ := newGen(t, dlock.WithDefaultLease(stallProofLease)) // (b's holding lost in a stall would let a's goroutine take a permit afresh)
			cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				err := next(ctx, cmd)
				if err == nil && slow.Load() && scriptIs("shared")(cmd.Args()) && slices.Contains(cmd.Args(), any("force")) {
					time.Sleep(2 * time.Second) // ran in Redis; the answer is slow
				}
				return err
			}})
			tg := uniqueTarget(t)
			key := rwOf(t, ga, tg).Config().UniqueKey()
			if k.sem {
				key = semOf(t, ga, tg, 1).Config().UniqueKey()
			}
			state := func(ctx context.Context) (dlock.SharedState, error) {
				if k.sem {
					return semOf(t, ga, tg, 1).State(ctx)
				}
				return rwOf(t, ga, tg).State(ctx)
			}
			force := func(ctx context.Context, holder string) (bool, error) {
				if k.sem {
					return semOf(t, ga, tg, 1).ForceRelease(ctx, holder)
				}
				return rwOf(t, ga, tg).ForceRelease(ctx, holder)
			}
			ctx := ctxT(t, 30*time.Second)
			a1, err := k.first(ctx, ga, tg)
			if err != nil {
				t.Fatal(err)
			}
			briefly := func() <-chan error { // a goroutine of a that wants the lock for a while
				got := make(chan error, 1)
				parent := ctx
				if k.own {
					parent = a1
				}
				go func() {
					lctx, cancel := context.WithTimeout(parent, 4*time.Second)
					defer cancel()
					o, err := k.more(lctx, ga, tg)
					if err == nil {
						_ = o.Unlock()
					}
					got <- err
				}()
				return got
			}
			var a2 <-chan error
			if k.atUnlock {
				a2 = briefly()
				waitFor(t, func() bool { return ga.SharedWaiters(key) > 0 })
			}
			bOwner := make(chan *dlock.Owner, 1)
			go func() {
				o, err := k.other(ctx, gb, tg)
				if err != nil {
					t.Error(err)
				}
				bOwner <- o
			}()
			waitFor(t, func() bool { s, _ := state(ctx); return len(s.Waiting) > 0 })
			if ga.SharedWanted(key) {
				t.Fatal("a heard that b waits: it would lend no more anyway")
			}
			s, err := state(ctx)
			if err != nil || len(s.Holds) != 1 {
				t.Fatalf("state before the force: %+v, %v", s, err)
			}
			slow.Store(true)
			forced := make(chan error, 1)
			go func() {
				removed, err := force(ctx, s.Holds[0].Locker)
				if err == nil && !removed {
					err = errors.New("removed nothing")
				}
				forced <- err
			}()
			b := recv(t, bOwner, "b's take (served by the force)")
			if b == nil {
				t.FailNow()
			}
			if k.atUnlock {
				if err := a1.Unlock(); err != nil {
					t.Logf("a1's Unlock: %v", err) // (it may have heard the removal)
				}
			} else {
				a2 = briefly()
			}
			if err := recv(t, a2, "a's other goroutine"); err == nil {
				t.Fatal("a goroutine of the forcing process was lent the holding while the process the force served held")
			}
			if err := b.Unlock(); err != nil {
				t.Fatal(err)
			}
			if err := recv(t, forced, "the force"); err != nil {
				t.Fatalf("ForceRelease: %v", err)
			}
			if !k.atUnlock {
				_ = a1.Unlock()
			}
		})
	}
}

// A holding taken for the front waiters while a ForceRelease of this process may have removed
// its locker (here a force of the process's waiting attempt, which removes nothing) keeps its
// place at the front: once Redis says it holds, it serves those waiters, although another
// process waits behind it, and the process does not go back to the end of the line — also
// when the force's answer comes only after the take and the renewal that checks it.
func TestForceReleaseOfAWaitingAttemptLeavesItsTurn(t *testing.T) {
	for _, answer := range []time.Duration{0, 1500 * time.Millisecond} {
		t.Run(fmt.Sprintf("the force answered after %v", answer), func(t *testing.T) {
			ga, cla := newGen(t)
			// (b's holding must not run out: a loaded machine may renew a lease of a second
			// late, and the key left free would go to whichever waiter asks first, c perhaps)
			gb, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
			gc, _ := newGen(t)
			var mu sync.Mutex
			var takes []string // the lockers of a's takes, in order
			cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				args := cmd.Args()
				if i := slices.Index(args, any("take")); scriptIs("shared")(args) && i >= 0 && i+1 < len(args) {
					if l, ok := args[i+1].(string); ok {
						mu.Lock()
						if !slices.Contains(takes, l) {
							takes = append(takes, l)
						}
						mu.Unlock()
					}
				}
				err := next(ctx, cmd)
				if scriptIs("shared")(args) && slices.Contains(args, any("force")) {
					time.Sleep(answer)
				}
				return err
			}})
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			b, err := rwOf(t, gb, tg).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var omu sync.Mutex
			var order []string
			done := make(chan struct{}, 2)
			get := func(g *dlock.Generator, who string) {
				defer func() { done <- struct{}{} }()
				o, err := rwOf(t, g, tg).Lock(ctx)
				if err != nil {
					t.Error(who, err)
					return
				}
				omu.Lock()
				order = append(order, who)
				omu.Unlock()
				_ = o.Unlock()
			}
			go get(ga, "a")
			waitFor(t, func() bool { s, _ := rwOf(t, ga, tg).State(ctx); return len(s.Waiting) == 1 })
			go get(gc, "c")
			waitFor(t, func() bool { s, _ := rwOf(t, ga, tg).State(ctx); return len(s.Waiting) == 2 })
			mu.Lock()
			attempt := takes[len(takes)-1]
			mu.Unlock()
			forced := make(chan error, 1)
			go func() {
				removed, err := rwOf(t, ga, tg).ForceRelease(ctx, attempt)
				if err == nil && removed {
					err = errors.New("it removed the waiting attempt")
				}
				forced <- err
			}()
			if answer > 0 {
				time.Sleep(100 * time.Millisecond) // (it ran in Redis; its answer is on its way)
			} else if err := recv(t, forced, "the force"); err != nil {
				t.Fatal(err)
			}
			if err := b.Unlock(); err != nil {
				t.Fatal(err)
			}
			recv(t, done, "the first waiter")
			recv(t, done, "the second waiter")
			if answer > 0 {
				if err := recv(t, forced, "the force"); err != nil {
					t.Fatal(err)
				}
			}
			if len(order) != 2 || order[0] != "a" {
				t.Fatalf("served in the order %v: a, first in line, lost its turn", order)
			}
		})
	}
}

// A goroutine that a holding held back by a ForceRelease of this process would serve waits
// for it: the process asks Redis for nothing more meanwhile — here a semaphore's holding of
// one permit, taken for its one waiter while the force of that holding is on its way, and no
// second take for the same waiter until the force's answer comes.
func TestForceReleaseOnItsWayAsksForNothingMoreForTheWaiterItHoldsBack(t *testing.T) {
	gp, cp := newGen(t, dlock.WithNotifications(false), dlock.WithDefaultLease(10*time.Second)) // (the slow take's answer is waited for)
	tg := uniqueTarget(t)
	sp := semOf(t, gp, tg, 3)
	ctx := ctxT(t, 30*time.Second)
	var slowTake, slowForce atomic.Bool
	var takes, takesBeforeAnswer atomic.Int64
	ran := make(chan struct{}, 1)
	cp.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if sharedArg(cmd.Args(), "op") == "force" && slowForce.Load() {
			time.Sleep(2 * time.Second) // sent late
			err := next(ctx, cmd)
			takesBeforeAnswer.Store(takes.Load()) // (before this process reads the answer)
			return err
		}
		err := next(ctx, cmd)
		if err == nil && sharedArg(cmd.Args(), "op") == "take" {
			takes.Add(1)
			if slowTake.CompareAndSwap(true, false) {
				ran <- struct{}{}
				time.Sleep(500 * time.Millisecond) // the take's answer is slow: the force is sent meanwhile
			}
		}
		return err
	}})
	slowTake.Store(true)
	got := make(chan error, 1)
	go func() {
		o, err := sp.Acquire(ctx, 1)
		if err == nil {
			_ = o.Unlock()
		}
		got <- err
	}()
	recv(t, ran, "the take")
	s, err := sp.State(ctx)
	if err != nil || len(s.Holds) != 1 {
		t.Fatalf("state after the take: %+v, %v", s, err)
	}
	slowForce.Store(true)
	if removed, err := sp.ForceRelease(ctx, s.Holds[0].Locker); err != nil || !removed {
		t.Fatalf("ForceRelease = %v, %v", removed, err)
	}
	if n := takesBeforeAnswer.Load(); n != 1 {
		t.Fatalf("%d takes before the force's answer came: the waiter the held-back holding serves asked for more", n)
	}
	if err := recv(t, got, "the waiter"); err != nil {
		t.Fatal(err) // (it asks again once the force removed the holding)
	}
}

// A tenure that begins while a ForceRelease of this process naming its locker is on its way
// is given to no goroutine, not even the one whose ask began it: the force may remove the key
// and serve another process before its answer comes. Here the key was granted to a's waiting
// attempt unheard (no notifications), a's force of it is on its way, and a goroutine that
// began after the force was sent asks with that attempt and is answered that it holds.
func TestForceReleaseOnItsWayGivesATenureBegunMeanwhileToNoGoroutine(t *testing.T) {
	var slow atomic.Bool
	sending, once := make(chan struct{}), sync.Once{} // closed as the slow force reaches the client (counted by then)
	ga, cla := newGen(t, dlock.WithNotifications(false))
	gb, _ := newGen(t)
	gc, _ := newGen(t)
	cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if slow.Load() && scriptIs("force")(cmd.Args()) {
			once.Do(func() { close(sending) })
			time.Sleep(1500 * time.Millisecond) // sent late: a's goroutine asks meanwhile
			err := next(ctx, cmd)
			time.Sleep(1500 * time.Millisecond) // and its answer is slow: c takes the key meanwhile
			return err
		}
		return next(ctx, cmd)
	}})
	la := mustGen(t, ga, "FORCE", target(t), 5*time.Second)
	lb := mustGen(t, gb, "FORCE", target(t), 5*time.Second)
	lc := mustGen(t, gc, "FORCE", target(t), 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	_, _ = la.ForceRelease(ctx, "nobody") // (loads the script: the slow force below is sent once)
	b := mustLock(t, lb, ctx)
	ctx1, cancel1 := context.WithCancel(ctx)
	a1 := lockBriefly(la, ctx1, 20*time.Second) // a's first waiter: its attempt stands in line
	inLine(t, ctx, la, 1)
	cOwner := lockAsync(t, lc, ctx)
	inLine(t, ctx, la, 2)
	if err := b.Unlock(); err != nil { // granted to a's attempt; a does not hear it
		t.Fatal(err)
	}
	holder := rawClient(t).Get(ctx, key(la)).Val()
	slow.Store(true)
	forced := make(chan error, 1)
	go func() {
		removed, err := la.ForceRelease(ctx, holder)
		if err == nil && !removed {
			err = errors.New("removed nothing")
		}
		forced <- err
	}()
	recv(t, sending, "the force on its way")
	a2 := lockBriefly(la, ctx, 4*time.Second)
	time.Sleep(100 * time.Millisecond)
	cancel1() // a's first waiter leaves: a2 asks with the attempt
	if err := recv(t, a1, "a1's Lock"); err == nil {
		t.Fatal("a1 took the lock after it left")
	}
	c := recv(t, cOwner, "c's Lock (served by the force)")
	if err := recv(t, a2, "a2's Lock"); err == nil {
		t.Fatal("a goroutine that began after the force was sent took the lock while the process the force served held it")
	}
	if err := c.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, forced, "the force"); err != nil {
		t.Fatal(err)
	}
}

// A ForceRelease of this process sent while the take that begins the holder's tenure is on its
// way (the key holds the locker in Redis already, so State names it) holds the tenure's passes
// back as one sent after it began does: no goroutine here is passed the tenure while the
// force is on its way, also after the force ran in Redis and granted the key to another
// process.
func TestForceReleaseSentAsTheTenureBeginsPassesItToNoGoroutine(t *testing.T) {
	var slowLock, slowForce, forceHeld, bHolds, violated atomic.Bool
	ga, cla := newGen(t, dlock.WithNotifications(false), dlock.WithLocalHandOff(time.Minute))
	gb, _ := newGen(t)
	cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs("force")(cmd.Args()) && slowForce.Load() {
			if forceHeld.CompareAndSwap(false, true) {
				time.Sleep(1500 * time.Millisecond) // runs in Redis after a2's renewal
			}
			err := next(ctx, cmd)
			if err == nil {
				time.Sleep(2500 * time.Millisecond) // and its answer is slow
			}
			return err
		}
		err := next(ctx, cmd)
		if scriptIs("lock")(cmd.Args()) && err == nil && slowLock.CompareAndSwap(true, false) {
			time.Sleep(800 * time.Millisecond) // the take's answer is slow
		}
		return err
	}})
	la := mustGen(t, ga, "FORCE", target(t), 5*time.Second)
	lb := mustGen(t, gb, "FORCE", target(t), 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	raw := rawClient(t)
	start := time.Now()
	slowLock.Store(true)
	a1c := lockAsync(t, la, ctx)
	waitFor(t, func() bool { return raw.Get(ctx, key(la)).Val() != "" })
	holder := raw.Get(ctx, key(la)).Val()
	bDone := make(chan struct{})
	go func() { // b: granted the key by the force
		defer close(bDone)
		o, err := lb.Lock(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		t.Logf("b took at %v", time.Since(start))
		bHolds.Store(true)
		time.Sleep(1500 * time.Millisecond)
		bHolds.Store(false)
		_ = o.Unlock()
	}()
	inLine(t, ctx, la, 1)
	slowForce.Store(true)
	forced := make(chan error, 1)
	go func() { _, err := la.ForceRelease(ctx, holder); forced <- err }()
	a1 := recv(t, a1c, "a1's Lock") // the tenure begins after the force was sent
	t.Logf("a1 took at %v", time.Since(start))
	here := func(name string, hold time.Duration) <-chan error { // a goroutine of a's process
		got := make(chan error, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			o, err := la.Lock(actx)
			if err == nil {
				t.Logf("%s took at %v (b holds: %v)", name, time.Since(start), bHolds.Load())
				if bHolds.Load() {
					violated.Store(true)
				}
				time.Sleep(hold)
				_ = o.Unlock()
			}
			got <- err
		}()
		return got
	}
	a2 := here("a2", time.Second) // (passed with a renewal, before the force ran in Redis)
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	a3 := here("a3", 0)
	time.Sleep(50 * time.Millisecond)
	if err := a1.Unlock(); err != nil {
		t.Fatal(err)
	}
	t.Logf("a2: %v, a3: %v", recv(t, a2, "a2"), recv(t, a3, "a3"))
	<-bDone
	if err := recv(t, forced, "the force"); err != nil {
		t.Fatal(err)
	}
	if violated.Load() {
		t.Error("a goroutine of the forcing process was passed the tenure while the force's grantee held the key")
	}
}

// A ForceRelease of the process's own tenure that gets no answer holds passes back only until
// the renewal it asks for renews the key: a waiter parked meanwhile is woken and passed the
// tenure then, not at the lease's next renewal.
func TestForceReleaseOfUnknownOutcomeHoldsPassesBackOnlyUntilARenewal(t *testing.T) {
	var slowRenew atomic.Bool
	ga, cla := newGen(t, dlock.WithNotifications(false), dlock.WithLocalHandOff(time.Minute))
	cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs("force")(cmd.Args()) && slowRenew.Load() {
			return context.DeadlineExceeded // (as if sent and its answer lost: runs nothing)
		}
		err := next(ctx, cmd)
		if scriptIs("renew")(cmd.Args()) && slowRenew.Load() {
			time.Sleep(300 * time.Millisecond)
		}
		return err
	}})
	la := mustGen(t, ga, "FORCE", target(t), 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	a1 := mustLock(t, la, ctx)
	a2c := lockAsync(t, la, ctx)
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	if err := a1.Unlock(); err != nil { // (the pass's renewal brings a block of tokens)
		t.Fatal(err)
	}
	a2 := recv(t, a2c, "a2")
	holder := rawClient(t).Get(ctx, key(la)).Val()
	done := lockBriefly(la, ctx, 2*time.Second)
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	slowRenew.Store(true)
	_, ferr := la.ForceRelease(ctx, holder)
	t.Logf("ForceRelease: %v", ferr)
	start := time.Now()
	_ = a2.Unlock() // a3 parks: the force's check renewal is on its way (300 ms)
	if err := recv(t, done, "a3"); err != nil {
		t.Fatalf("a3 was not passed the tenure after the check renewal: %v", err)
	}
	t.Logf("a3 took %v after the Unlock", time.Since(start))
}

// A ForceRelease elsewhere of a key that one of a process's final Unlocks kept (WithHoldOver),
// after a renewal sent after that Unlock renewed the key, removes a key no goroutine holds:
// the holding whose Unlock returned nil was not lost, and no loss of it is told. (A removal
// that nothing places after the Unlock — this process's own force included, whose release
// message may come before its answer — is told as that holding's.)
func TestForceReleaseOfAKeptKeyAfterARenewalTellsNoLossOfTheHoldingThatLetGo(t *testing.T) {
	rec := &recorder{}
	core, logs := observer.New(zap.WarnLevel)
	ca := &counter{}
	ga, cla := newGen(t, dlock.WithHoldOver(true), dlock.WithLocalHandOff(time.Hour), dlock.WithObserver(rec), dlock.WithLogger(zap.New(core)))
	gb, _ := newGen(t)
	preload(t, cla) // (a renewal answered NOSCRIPT and sent again would count twice below)
	cla.AddHook(ca)
	ga.Relock(time.Minute)
	// (renewed at three quarters of it; the quarter left is the renewal's spare time: a stall of
	// the process longer than that, on a loaded machine, runs the kept tenure out before the
	// renewals below are seen, and it is lost, not removed by the force)
	const lease = 4 * time.Second
	la := mustGen(t, ga, "RELOCK", target(t), lease)
	lb := mustGen(t, gb, "RELOCK", target(t), lease)
	ctx := ctxT(t, 30*time.Second)
	a := takeAfterWaiting(t, ctx, la, lb)
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if !ga.Lingering(key(la)) {
		t.Fatal("setup: the Unlock kept nothing")
	}
	st, err := la.State(ctx)
	if err != nil || st.Holder == "" {
		t.Fatalf("State = %+v, %v; want the key held (kept)", st, err)
	}
	renewals := ca.script("renew")
	waitFor(t, func() bool { return ca.script("renew") >= renewals+2 }) // (the first answered: the second is sent after it)
	if removed, err := lb.ForceRelease(ctx, st.Holder); err != nil || !removed {
		t.Fatalf("ForceRelease = %v, %v; want the kept key removed", removed, err)
	}
	for deadline := time.Now().Add(15 * time.Second); logs.FilterMessage("dlock: lock lost").Len() == 0; time.Sleep(2 * time.Millisecond) { // (the process found the removal)
		if time.Now().After(deadline) {
			for _, e := range logs.All() {
				t.Logf("log: %s %v", e.Message, e.ContextMap())
			}
			t.Fatal("the process did not find the removal within 15s")
		}
	}
	if err := ga.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	rec.mu.Lock()
	lost, released := slices.Clone(rec.lost), len(rec.released)
	rec.mu.Unlock()
	if len(lost) != 0 || released == 0 {
		t.Fatalf("losses told %+v after %d releases; want none", lost, released)
	}
}

// ForceRelease names the holder it removes, so a second copy of its request (the client
// sending it again after a lost reply, or a packet delivered late) finds that holder gone and
// cannot remove the key of the process that acquired after it.
// (Redisson's testForceUnlock: after it the lock is not locked, through any handle.)
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
	for _, l := range []*dlock.DistributedReentrantLock{lop, lc} {
		if s := stateOf(t, l); s.Held() {
			t.Fatalf("after ForceRelease: %+v", s)
		}
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

// A holder in this Generator learns of a ForceRelease at once, even while its tenure is between
// owners: a renewal before a pass is in flight (its reply held back) when the operator removes
// the tenure's locker and another process takes the key; the local waiter must not then
// return from Lock as owner of a key another process holds.
func TestForceReleaseDuringAPassRenewal(t *testing.T) {
	t.Parallel()
	ga, ca := newGen(t)
	gb, _ := newGen(t)
	preload(t, ca)
	inHandOver, proceed := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if err == nil && scriptIs("renew")(cmd.Args()) && armed.CompareAndSwap(true, false) {
			close(inHandOver) // the key holds the waiter's new locker; the reply is on its way
			select {
			case <-proceed:
			case <-time.After(5 * time.Second):
			}
		}
		return err
	}})
	lease := 3 * time.Second
	la, _ := ga.GenWithLease("RV3", target(t), lease)
	lb, _ := gb.GenWithLease("RV3", target(t), lease)
	ctx := ctxT(t, 20*time.Second)
	o1, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		owned context.Context
		err   error
	}
	waiter := make(chan res, 1)
	wctx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		o, err := la.Lock(wctx)
		waiter <- res{o, err}
	}()
	waitFor(t, func() bool { return ga.Waiters(la.Config().UniqueKey()) })
	armed.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- la.Unlock(o1) }()
	select {
	case <-inHandOver:
	case <-time.After(5 * time.Second):
		t.Fatal("no hand-over")
	}
	before, err := la.State(ctx) // the operator, in the same generator
	if err != nil {
		t.Fatal(err)
	}
	holder := before.Holder
	if removed, err := la.ForceRelease(ctx, holder); err != nil || !removed {
		t.Fatalf("ForceRelease(%q): %v, %v", holder, removed, err)
	}
	ob, err := lb.Lock(ctx) // another process takes the freed key
	if err != nil {
		close(proceed)
		t.Fatal(err)
	}
	defer lb.Unlock(ob) //nolint:errcheck
	close(proceed)
	if err := <-unlocked; err != nil {
		t.Logf("Unlock: %v", err)
	}
	// The local waiter would take the deleted key as the renewal's reply comes; given that
	// time (2 s, generous), it stops waiting: the other process holds the key for its lease.
	time.AfterFunc(2*time.Second, stopWaiting)
	r := <-waiter
	if r.err != nil {
		return // the local waiter did not get the deleted key: fine
	}
	defer la.Unlock(r.owned)          //nolint:errcheck
	time.Sleep(50 * time.Millisecond) // "at once"
	if r.owned.Err() == nil && la.HoldCount(r.owned) > 0 && ob.Err() == nil {
		t.Fatalf("two owners: the local waiter holds the key ForceRelease deleted (locker %q), and another process holds it", holder)
	}
}

// forcedGrant sets the scene for a grant an operator removes before its process counts it:
// B's lock.lua has run (B stands in line) and its answer is held back; A releases, which grants
// the key to B's attempt; an operator (in A's Generator) removes that grant; B has heard both
// messages. It returns A's lock, B's Lock (on its way) and what lets B's answer come.
func forcedGrant(t *testing.T, lease time.Duration) (la *dlock.DistributedReentrantLock, got <-chan error, open func()) {
	ga, _ := newGen(t)
	gb, cb := newGen(t)
	la = mustGen(t, ga, "FORCEDGRANT", target(t), lease)
	lb := mustGen(t, gb, "FORCEDGRANT", target(t), lease)
	ctx := ctxT(t, 60*time.Second)
	gb.SetLinger(time.Minute)
	a, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// B waits once, so that it is subscribed to the key's channel (and stays so).
	warm := lockAsync(t, lb, ctx)
	waitFor(t, func() bool { st, _ := la.State(ctx); return len(st.Waiting) == 1 })
	if err := la.Unlock(a); err != nil {
		t.Fatal(err)
	}
	if err := lb.Unlock(recv(t, warm, "B's first Lock")); err != nil {
		t.Fatal(err)
	}
	if a, err = la.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	arm, ran, open := gateScript(cb, "lock")
	t.Cleanup(open)
	arm()
	res := make(chan error, 1)
	go func() {
		o, err := lb.Lock(ctx)
		if err == nil {
			if o.Err() == nil && holderOfLock(t, la) != "" && !ownedBy(t, lb) {
				err = fmt.Errorf("B came out of Lock holding a grant the operator removed, while %s holds the key", holderOfLock(t, la))
			}
			_ = lb.Unlock(o)
		}
		res <- err
	}()
	recv(t, ran, "B's request") // B stands in line; its answer ("held") is on its way
	heard := gb.Heard()
	if err := la.Unlock(a); err != nil { // granted to B's attempt
		t.Fatal(err)
	}
	st, err := lb.State(ctx)
	if err != nil || !st.Mine {
		t.Fatalf("after the release: %+v, %v; want the key granted to B's attempt", st, err)
	}
	if removed, err := la.ForceRelease(ctx, st.Holder); err != nil || !removed {
		t.Fatalf("ForceRelease(%q): %v, %v", st.Holder, removed, err)
	}
	waitFor(t, func() bool { return gb.Heard() >= heard+2 }) // the grant's message, then the force's
	return la, res, open
}

// holderOfLock returns the key's holder as State reads it.
func holderOfLock(t *testing.T, l *dlock.DistributedReentrantLock) string {
	st, err := l.State(context.Background())
	if err != nil {
		t.Error(err)
	}
	return st.Holder
}

// ownedBy reports whether the key holds an acquisition of l's Generator.
func ownedBy(t *testing.T, l *dlock.DistributedReentrantLock) bool {
	st, err := l.State(context.Background())
	if err != nil {
		t.Error(err)
	}
	return st.Mine
}

// A grant an operator removes before its process could count it is never counted, and the
// waiter, told by the removal's message, asks again at once. Here the grant's message and the
// force's come while the waiter's request is on its way (its answer, from before the grant,
// would make the grant usable).
func TestForceReleaseOfAnUncountedGrant(t *testing.T) {
	t.Run("another process takes the key", func(t *testing.T) {
		const lease = 3 * time.Second
		la, got, open := forcedGrant(t, lease)
		ctx := ctxT(t, 30*time.Second)
		a2, err := la.Lock(ctx) // A takes the freed key
		if err != nil {
			t.Fatal(err)
		}
		open()
		select {
		case err := <-got:
			t.Fatalf("B's Lock returned (%v) while A holds the key; want it waiting", err)
		case <-time.After(lease / 2): // (B asks again, and waits behind A)
		}
		if err := la.Unlock(a2); err != nil {
			t.Fatal(err)
		}
		if err := recv(t, got, "B's Lock"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the key is left free", func(t *testing.T) {
		const lease = time.Minute // (a poll comes every 10 s: too late for the bound below)
		_, got, open := forcedGrant(t, lease)
		open()
		if err := recv(t, got, "B's Lock, the only waiter, with the key free"); err != nil {
			t.Fatal(err)
		}
	})
}

// ForceRelease of a read-write lock's or a semaphore's holding lets the process in line in,
// tells the holder (at once in the same Generator, at its next renewal elsewhere), and
// removes nothing when repeated.
func TestForceReleaseOfTheLockFamily(t *testing.T) {
	type family struct {
		name  string
		hold  func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error)
		wait  func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error)
		state func(ctx context.Context, g *dlock.Generator, tg string) (dlock.SharedState, error)
		force func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error)
	}
	kinds := []family{{
		name: "write side",
		hold: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return rwOf(t, g, tg).Lock(ctx)
		},
		wait: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return rwOf(t, g, tg).RLock(ctx)
		},
		state: func(ctx context.Context, g *dlock.Generator, tg string) (dlock.SharedState, error) {
			return rwOf(t, g, tg).State(ctx)
		},
		force: func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error) {
			return rwOf(t, g, tg).ForceRelease(ctx, holder)
		},
	}, {
		name: "permits",
		hold: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return semOf(t, g, tg, 2).Acquire(ctx, 2)
		},
		wait: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return semOf(t, g, tg, 2).Acquire(ctx, 1)
		},
		state: func(ctx context.Context, g *dlock.Generator, tg string) (dlock.SharedState, error) {
			return semOf(t, g, tg, 2).State(ctx)
		},
		force: func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error) {
			return semOf(t, g, tg, 2).ForceRelease(ctx, holder)
		},
	}}
	for _, k := range kinds {
		for _, same := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, holder in this generator %v", k.name, same), func(t *testing.T) {
				// With a minute's lease the holder's renewal comes after waitFor gives up: only
				// the Generator that forced tells its own holder in time.
				g1, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
				g2, _ := newGen(t)
				op, tg := g2, uniqueTarget(t)
				if same {
					op = g1
				}
				ctx := ctxT(t, 30*time.Second)
				owned, err := k.hold(ctx, g1, tg)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *dlock.Owner, 1)
				go func() {
					o, err := k.wait(ctx, g2, tg)
					if err != nil {
						t.Error(err)
					}
					got <- o
				}()
				waitFor(t, func() bool { s, _ := k.state(ctx, op, tg); return len(s.Waiting) > 0 })
				before, err := k.state(ctx, op, tg)
				if err != nil || len(before.Holds) != 1 {
					t.Fatalf("state before: %+v, %v", before, err)
				}
				holder := before.Holds[0].Locker
				if removed, err := k.force(ctx, op, tg, holder); err != nil || !removed {
					t.Fatalf("ForceRelease = %v, %v", removed, err)
				}
				o2 := <-got
				if o2 == nil {
					return
				}
				if same {
					waitFor(t, func() bool { return errors.Is(context.Cause(owned), dlock.ErrLockLost) })
				} else {
					// elsewhere: it learns at its renewal, 45 s on; an Unlock asks Redis now
					if err := owned.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
						t.Fatalf("the removed holder's Unlock: %v", err)
					}
					return
				}
				if err := owned.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
					t.Fatalf("the removed holder's Unlock: %v", err)
				}
				if removed, err := k.force(ctx, op, tg, holder); err != nil || removed {
					t.Fatalf("ForceRelease again = %v, %v", removed, err)
				}
				if err := o2.Err(); err != nil {
					t.Fatalf("a second ForceRelease of the removed holder ended the next: %v", err)
				}
				if err := o2.Unlock(); err != nil {
					t.Fatal(err)
				}
				if _, err := k.force(ctx, op, tg, ""); !errors.Is(err, dlock.ErrInvalidConfig) {
					t.Fatalf("ForceRelease of no holder: %v", err)
				}
			})
		}
	}
	var zero dlock.RWLock
	if _, err := zero.ForceRelease(context.Background(), "x"); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("ForceRelease of a zero RWLock: %v", err)
	}
	var zs *dlock.Semaphore
	if _, err := zs.ForceRelease(context.Background(), "x"); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("ForceRelease of a nil Semaphore: %v", err)
	}
}

// ForceRelease removes the one holding it names and nothing else: on a free read-write lock
// or semaphore it reports false; of two processes' read-holds, the one named goes (its holder
// in this Generator is told at once) and the other stays, still keeping writers out; a locker
// that holds nothing now (the removed one, or one let go by its release) removes nothing and
// answers false, and a write-hold taken since stays. Ports Redisson's RedissonReadWriteLockTest.testForceUnlock (a
// forced unlock of the side not held leaves the held side locked) and testMultiRead (a forced
// unlock of a free lock reports false).
func TestForceReleaseRemovesOnlyTheHoldingItNames(t *testing.T) {
	ga, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	gb, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	gc, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	la, lb, lc := rwOf(t, ga, tg), rwOf(t, gb, tg), rwOf(t, gc, tg)
	sem := semOf(t, ga, tg, 2)
	for name, force := range map[string]func(string) (bool, error){
		"read-write lock": func(h string) (bool, error) { return la.ForceRelease(ctx, h) },
		"semaphore":       func(h string) (bool, error) { return sem.ForceRelease(ctx, h) },
	} {
		if removed, err := force("127.0.0.1-1-0123456789ab-1"); removed || err != nil {
			t.Fatalf("ForceRelease on a free %s = %v %v, want false", name, removed, err)
		}
	}
	ra, err := la.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := lb.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := lc.State(ctx)
	if err != nil || len(st.Readers()) != 2 {
		t.Fatalf("State with two processes reading = %+v %v", st, err)
	}
	var lockerA, lockerB string
	for _, h := range st.Holds {
		if _, mine := ga.SharedBelief(la.Config().UniqueKey())[h.Locker]; mine {
			lockerA = h.Locker
		} else {
			lockerB = h.Locker
		}
	}
	if lockerA == "" {
		t.Fatalf("no holding of State %+v is the first process's", st)
	}
	if removed, err := la.ForceRelease(ctx, lockerA); !removed || err != nil {
		t.Fatalf("ForceRelease of the first process's read-hold = %v %v", removed, err)
	}
	waitFor(t, func() bool { return errors.Is(context.Cause(ra), dlock.ErrLockLost) })
	if rb.Err() != nil {
		t.Fatalf("the other process's reader ended with the first's holding: %v", context.Cause(rb))
	}
	if o, ok, err := lc.TryLock(ctx); ok || err != nil {
		t.Fatalf("a writer got in beside the read-hold left = %v %v %v", o, ok, err)
	}
	if removed, err := la.ForceRelease(ctx, lockerA); removed || err != nil {
		t.Fatalf("ForceRelease of the removed holding again = %v %v, want false", removed, err)
	}
	if o, ok, err := lc.TryLock(ctx); ok || err != nil || rb.Err() != nil {
		t.Fatalf("after the second ForceRelease: a writer got in (%v %v %v) or the other reader ended (%v)", o, ok, err, rb.Err())
	}
	if err := ra.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("the removed reader's Unlock = %v, want ErrLockLost", err)
	}
	if err := rb.Unlock(); err != nil {
		t.Fatal(err)
	}
	w, err := lc.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := lc.ForceRelease(ctx, lockerB); removed || err != nil {
		t.Fatalf("ForceRelease of a reader that let go, beside a writer = %v %v, want false", removed, err)
	}
	if removed, err := lc.ForceRelease(ctx, lockerA); removed || err != nil {
		t.Fatalf("ForceRelease of a reader removed before, beside a writer = %v %v, want false", removed, err)
	}
	if o, ok, err := la.TryRLock(ctx); ok || err != nil || w.Err() != nil {
		t.Fatalf("after a ForceRelease that named no holding: a reader got in (%v %v %v) or the writer ended (%v)", o, ok, err, w.Err())
	}
	if err := w.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// An operator's ForceRelease whose reply is lost (the script ran) answers true when the
// processor sends its request again after a broken connection (the copy finds the holder
// gone, removed by itself), and an error after a timeout, after which a call of the caller's
// finds the holder gone (false). Either way it tells a holder of the same Generator at once,
// as a ForceRelease that was answered does: not at its next renewal (45 s on, with a minute's
// lease), while another process may hold the lock.
func TestForceReleaseWhoseReplyIsLostStillTellsTheHolderAtOnce(t *testing.T) {
	isForce := func(args []any) bool {
		switch processor.ScriptName(args) {
		case "force":
			return true
		case "shared":
			keys, _ := strconv.Atoi(fmt.Sprint(args[2]))
			return len(args) > 3+keys && fmt.Sprint(args[3+keys]) == "force"
		}
		return false
	}
	kinds := []lostForceKind{{
		name: "mutex",
		hold: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return mustGen(t, g, "FORCE", tg, time.Minute).Lock(ctx)
		},
		who: func(ctx context.Context, g *dlock.Generator, tg string) (string, error) {
			s, err := mustGen(t, g, "FORCE", tg, time.Minute).State(ctx)
			return s.Holder, err
		},
		force: func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error) {
			return mustGen(t, g, "FORCE", tg, time.Minute).ForceRelease(ctx, holder)
		},
	}, {
		name: "write side",
		hold: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return rwOf(t, g, tg).Lock(ctx)
		},
		who: func(ctx context.Context, g *dlock.Generator, tg string) (string, error) {
			s, err := rwOf(t, g, tg).State(ctx)
			if len(s.Holds) != 1 {
				return "", fmt.Errorf("holds %+v", s.Holds)
			}
			return s.Holds[0].Locker, err
		},
		force: func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error) {
			return rwOf(t, g, tg).ForceRelease(ctx, holder)
		},
	}, {
		name: "permits",
		hold: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return semOf(t, g, tg, 2).Acquire(ctx, 2)
		},
		who: func(ctx context.Context, g *dlock.Generator, tg string) (string, error) {
			s, err := semOf(t, g, tg, 2).State(ctx)
			if len(s.Holds) != 1 {
				return "", fmt.Errorf("holds %+v", s.Holds)
			}
			return s.Holds[0].Locker, err
		},
		force: func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error) {
			return semOf(t, g, tg, 2).ForceRelease(ctx, holder)
		},
	}}
	// The reply is lost to an error the library does not send again after (the caller calls
	// again), or to a broken connection, after which the processor sends the same request
	// again itself.
	for _, lost := range []struct {
		name   string
		err    error
		resent bool
	}{{"lost to a timeout", injectedTimeout{}, false}, {"lost to a broken connection", io.EOF, true}} {
		for _, k := range kinds {
			t.Run(lost.name+"/"+k.name, func(t *testing.T) {
				forceWhoseReplyIsLost(t, k, isForce, lost.err, lost.resent)
			})
		}
	}
}

// lostForceKind is a kind of lock TestForceReleaseWhoseReplyIsLostStillTellsTheHolderAtOnce
// runs on: how it is held, who holds it, and how it is forced.
type lostForceKind struct {
	name  string
	hold  func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error)
	who   func(ctx context.Context, g *dlock.Generator, tg string) (string, error)
	force func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error)
}

// forceWhoseReplyIsLost runs TestForceReleaseWhoseReplyIsLostStillTellsTheHolderAtOnce for one
// kind and one loss.
func forceWhoseReplyIsLost(t *testing.T, k lostForceKind, isForce func([]any) bool, lostTo error, resent bool) {
	c := srv.Client()
	var lose atomic.Int32
	lose.Store(1)
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if err == nil && isForce(cmd.Args()) && lose.Add(-1) == 0 {
			cmd.SetErr(lostTo) // the script ran; its reply is lost
			return cmd.Err()
		}
		return err
	}})
	g := genOn(t, c, dlock.WithDefaultLease(time.Minute))
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	owned, err := k.hold(ctx, g, tg)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := k.who(ctx, g, tg)
	if err != nil || holder == "" {
		t.Fatalf("holder %q, %v", holder, err)
	}
	removed, err := k.force(ctx, g, tg, holder)
	switch {
	case resent && (err != nil || !removed):
		t.Fatalf("ForceRelease whose reply was lost to a broken connection (sent again) = %v, %v; want true", removed, err)
	case resent:
	case err == nil:
		t.Fatalf("setup: the ForceRelease whose reply was lost returned %v, nil", removed)
	case !documentedErr(err):
		t.Fatalf("ForceRelease whose reply was lost: %v", err)
	}
	if lose.Load() > 0 {
		t.Fatal("setup: no reply was lost")
	}
	if removed, err := k.force(ctx, g, tg, holder); err != nil || removed {
		t.Fatalf("ForceRelease called again = %v, %v; want false (the first call removed it)", removed, err)
	}
	if !rgWaitUntil(5*time.Second, func() bool { return errors.Is(context.Cause(owned), dlock.ErrLockLost) }) {
		t.Fatalf("the holder in the Generator that forced it was not told within 5 s (cause %v)", context.Cause(owned))
	}
	if err := owned.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("the removed holder's Unlock: %v", err)
	}
}

// A ForceRelease in the holder's own Generator whose reply is lost (the script ran) tells the
// holding at once also when a renewal of it is on its way that ran before the force: that
// renewal's answer (renewed) says nothing of the force, and the holding must still ask Redis
// again, not believe itself held until its next renewal (45 s on, with a minute's lease) while
// another process takes what the force let go. The renewal here is the one a first
// ForceRelease sends for, whose request failed before it reached Redis.
func TestForceReleaseWhoseReplyIsLostTellsAHolderWhoseRenewalWasOnItsWay(t *testing.T) {
	type kind struct {
		name  string
		hold  func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error)
		state func(ctx context.Context, g *dlock.Generator, tg string) (dlock.SharedState, error)
		force func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error)
		other func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, bool, error)
	}
	kinds := []kind{{
		name: "read side",
		hold: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return rwOf(t, g, tg).RLock(ctx)
		},
		state: func(ctx context.Context, g *dlock.Generator, tg string) (dlock.SharedState, error) {
			return rwOf(t, g, tg).State(ctx)
		},
		force: func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error) {
			return rwOf(t, g, tg).ForceRelease(ctx, holder)
		},
		other: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, bool, error) {
			return rwOf(t, g, tg).TryLock(ctx)
		},
	}, {
		name: "permits",
		hold: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return semOf(t, g, tg, 2).Acquire(ctx, 2)
		},
		state: func(ctx context.Context, g *dlock.Generator, tg string) (dlock.SharedState, error) {
			return semOf(t, g, tg, 2).State(ctx)
		},
		force: func(ctx context.Context, g *dlock.Generator, tg, holder string) (bool, error) {
			return semOf(t, g, tg, 2).ForceRelease(ctx, holder)
		},
		other: func(ctx context.Context, g *dlock.Generator, tg string) (*dlock.Owner, bool, error) {
			return semOf(t, g, tg, 2).TryAcquire(ctx, 2)
		},
	}}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			c := srv.Client()
			var forces atomic.Int32
			var holdRenewal atomic.Bool
			renewalRan := make(chan struct{}, 1)
			gate := make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(gate) }) }
			defer open()
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				switch {
				case sharedArg(cmd.Args(), "op") == "force":
					if forces.Add(1) == 1 {
						cmd.SetErr(injectedTimeout{}) // the first never reaches Redis
						return cmd.Err()
					}
					if err := next(ctx, cmd); err != nil {
						return err
					}
					cmd.SetErr(injectedTimeout{}) // the second ran; its reply is lost
					return cmd.Err()
				case sharedArg(cmd.Args(), "op") == "renew" && holdRenewal.CompareAndSwap(true, false):
					err := next(ctx, cmd) // the renewal ran; its reply is on its way
					renewalRan <- struct{}{}
					select {
					case <-gate:
					case <-ctx.Done():
					}
					return err
				}
				return next(ctx, cmd)
			}})
			g := genOn(t, c, dlock.WithDefaultLease(time.Minute)) // renewals 45 s apart
			g2, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
			tg := uniqueTarget(t)
			ctx := ctxT(t, 40*time.Second)
			owned, err := k.hold(ctx, g, tg)
			if err != nil {
				t.Fatal(err)
			}
			// (subscribed first: a subscription confirmed while the renewal is on its way
			// would renew the holding again at once)
			waitFor(t, func() bool { return g.Confirmed() >= 1 })
			st, err := k.state(ctx, g, tg)
			if err != nil || len(st.Holds) != 1 {
				t.Fatalf("State %+v, %v: want one holding", st, err)
			}
			holder := st.Holds[0].Locker
			holdRenewal.Store(true)
			if _, err := k.force(ctx, g, tg, holder); err == nil { // unknown outcome: the holding renews at once
				t.Fatal("setup: the first ForceRelease did not fail")
			}
			recv(t, renewalRan, "the renewal the first ForceRelease asked for")
			if _, err := k.force(ctx, g, tg, holder); err == nil {
				t.Fatal("setup: the second ForceRelease's reply was not lost")
			}
			if st, err := k.state(ctx, g, tg); err != nil || len(st.Holds) != 0 {
				t.Fatalf("State %+v, %v: want the holding removed", st, err)
			}
			o2, ok, err := k.other(ctx, g2, tg) // another process takes what the force let go
			if err != nil || !ok {
				t.Fatalf("the other process's try = %v, %v", ok, err)
			}
			defer o2.Unlock()
			open() // the renewal's answer (renewed: it ran before the force) comes now
			if !rgWaitUntil(15*time.Second, func() bool { return errors.Is(context.Cause(owned), dlock.ErrLockLost) }) {
				t.Fatalf("the holding removed by its own Generator's ForceRelease still counts itself held beside another process's (cause %v)", context.Cause(owned))
			}
			if err := owned.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("the removed holder's Unlock: %v", err)
			}
		})
	}
}

// A ForceRelease in this Generator whose reply is lost (the script ran) of the locker of a take
// whose answer is on its way (taken: it ran before the force) has the holding that answer makes
// ask Redis at once whether it still holds, as a holding already made does: it is not lent, or
// its owner is told, rather than counted held until its first renewal (45 s on) while another
// process holds the write side the force let go.
func TestForceReleaseWhoseReplyIsLostTellsAHoldingWhoseTakeWasOnItsWay(t *testing.T) {
	c := srv.Client()
	preload(t, c) // (each request one EVALSHA that runs)
	var forces atomic.Int32
	var holdTake atomic.Bool
	takeRan := make(chan struct{}, 1)
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		switch {
		case sharedArg(cmd.Args(), "op") == "force" && forces.Add(1) == 1:
			if err := next(ctx, cmd); err != nil {
				return err
			}
			cmd.SetErr(injectedTimeout{}) // it ran; its reply is lost
			return cmd.Err()
		case isSharedTake(cmd.Args()) && holdTake.CompareAndSwap(true, false):
			err := next(ctx, cmd) // the take ran; its answer is on its way
			takeRan <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return err
		}
		return next(ctx, cmd)
	}})
	g := genOn(t, c, dlock.WithDefaultLease(time.Minute)) // renewals 45 s apart
	g2, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	tg := uniqueTarget(t)
	l, l2 := rwOf(t, g, tg), rwOf(t, g2, tg)
	ctx := ctxT(t, 40*time.Second)
	// The process reads once, so that it is subscribed to its channel (and stays so): a
	// subscription confirmed while the take is on its way would renew the holding at once.
	g.SetLinger(time.Minute)
	r0, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return g.Confirmed() >= 1 })
	if err := r0.Unlock(); err != nil {
		t.Fatal(err)
	}
	holdTake.Store(true)
	type res struct {
		o   *dlock.Owner
		ok  bool
		err error
	}
	got := make(chan res, 1)
	go func() {
		o, ok, err := l.TryRLock(ctx)
		got <- res{o, ok, err}
	}()
	recv(t, takeRan, "the reader's take")
	st, err := l.State(ctx)
	if err != nil || len(st.Holds) != 1 {
		t.Fatalf("State %+v, %v: want the reader's holding", st, err)
	}
	if _, err := l.ForceRelease(ctx, st.Holds[0].Locker); err == nil {
		t.Fatal("setup: the ForceRelease's reply was not lost")
	}
	w2, ok, err := l2.TryLock(ctx) // another process takes the write side the force let go
	if err != nil || !ok {
		t.Fatalf("the other process's TryLock = %v, %v", ok, err)
	}
	defer w2.Unlock()
	open() // the take's answer (taken: it ran before the force) comes now
	r := recv(t, got, "the reader's TryRLock")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.ok {
		return // (the holding was found removed before it was lent)
	}
	if !rgWaitUntil(15*time.Second, func() bool { return errors.Is(context.Cause(r.o), dlock.ErrLockLost) }) {
		t.Fatalf("a reader holds beside another process's writer: its holding, removed by its own Generator's ForceRelease, still counts itself held (cause %v)", context.Cause(r.o))
	}
	if err := r.o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("the removed reader's Unlock: %v", err)
	}
}

// The mutex's counterpart: a ForceRelease in this Generator whose reply is lost (the script
// ran), of the locker of a take whose answer is on its way (it ran before the force), has the
// tenure that answer begins ask Redis at once, not count the key its own until its first
// renewal (45 s on) while another process holds it — also when a ForceRelease of another
// locker of the key (one that holds nothing: an operator forcing a stale holder) is answered
// between that force and the take's answer.
func TestForceReleaseWhoseReplyIsLostTellsATenureWhoseTakeWasOnItsWay(t *testing.T) {
	for _, staleForce := range []bool{false, true} {
		name := "alone"
		if staleForce {
			name = "then-a-force-of-another-locker"
		}
		t.Run(name, func(t *testing.T) { forceOfATakeOnItsWay(t, staleForce) })
	}
}

// forceOfATakeOnItsWay runs TestForceReleaseWhoseReplyIsLostTellsATenureWhoseTakeWasOnItsWay.
func forceOfATakeOnItsWay(t *testing.T, staleForce bool) {
	c := srv.Client()
	preload(t, c) // (each request one EVALSHA that runs)
	arm, ran, open := gateScript(c, "lock")
	defer open()
	var forces atomic.Int32
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if err == nil && scriptIs("force")(cmd.Args()) && forces.Add(1) == 1 {
			cmd.SetErr(injectedTimeout{}) // it ran; its reply is lost
			return cmd.Err()
		}
		return err
	}})
	g := genOn(t, c, dlock.WithDefaultLease(time.Minute)) // renewals 45 s apart
	g2, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	tg := uniqueTarget(t)
	l, l2 := mustGen(t, g, "FORCE", tg, time.Minute), mustGen(t, g2, "FORCE", tg, time.Minute)
	ctx := ctxT(t, 40*time.Second)
	arm()
	got := rgLockAsync(l, ctx)
	recv(t, ran, "the take")
	st, err := l.State(ctx)
	if err != nil || st.Holder == "" {
		t.Fatalf("State %+v, %v: want the key held", st, err)
	}
	if _, err := l.ForceRelease(ctx, st.Holder); err == nil {
		t.Fatal("setup: the ForceRelease's reply was not lost")
	}
	if staleForce {
		if removed, err := l.ForceRelease(ctx, st.Holder+"-stale"); removed || err != nil {
			t.Fatalf("setup: the force of a locker that holds nothing = %v, %v", removed, err)
		}
	}
	o2, ok, err := l2.TryLock(ctx) // another process takes the key the force let go
	if err != nil || !ok {
		t.Fatalf("the other process's TryLock = %v, %v", ok, err)
	}
	defer o2.Unlock()
	open() // the take's answer (taken: it ran before the force) comes now
	// The tenure that answer begins asks Redis before its first owner takes it, or after.
	// Either the Lock returns (a holding, told below) or, the check having come first (so
	// under load), it finds the tenure removed and waits again in line for the key the other
	// process holds: it does not return then (its deadline is 25 s away), so the test waits
	// for either, not for a return.
	var r rgLockResult
	returned := false
	if !rgWaitUntil(15*time.Second, func() bool {
		select {
		case r = <-got:
			returned = true
			return true
		default:
		}
		st, err := l2.State(ctx)
		return err == nil && st.Mine && len(st.Waiting) > 0 // (the other process holds; this one is in line)
	}) {
		t.Fatal("the Lock neither returned nor waited again in line within 15s")
	}
	if !returned {
		t.Log("the tenure was found removed before the Lock returned: it waits again in line")
		return
	}
	if r.err != nil {
		return // (refused: the tenure found removed before Lock returned)
	}
	if !rgWaitUntil(15*time.Second, func() bool { return errors.Is(context.Cause(r.owned), dlock.ErrLockLost) }) {
		t.Fatalf("two owners: the tenure removed by its own Generator's ForceRelease still counts the key held beside another process (cause %v)", context.Cause(r.owned))
	}
}

// A process told that an operator removed its acquisition (ForceRelease from another
// process, whose message names the acquisition's locker) while the request that took the key
// for it is still on its way back does not count the key its own when the answer comes: the
// key went to the process in line meanwhile. Here P's lone goroutine takes the free key; its
// answer is held back while the operator removes P's locker and the key is granted to C.
func TestForceReleaseHeardWhileTheTakeIsOnItsWay(t *testing.T) {
	const lease = 10 * time.Second // (P's next renewal would come long after the checks)
	for _, try := range []bool{false, true} {
		name := "Lock"
		if try {
			name = "TryLock"
		}
		t.Run(name, func(t *testing.T) {
			gp, cp := newGen(t)
			gc, _ := newGen(t)
			gop, _ := newGen(t)
			tg := uniqueTarget(t)
			lp, lc, lop := mustGen(t, gp, "FORCEDTAKE", tg, lease), mustGen(t, gc, "FORCEDTAKE", tg, lease), mustGen(t, gop, "FORCEDTAKE", tg, lease)
			ctx := ctxT(t, 30*time.Second)
			gp.SetLinger(time.Minute)
			// P waits once, so that it is subscribed to the key's channel (and stays so).
			o := mustLock(t, lop, ctx)
			warm := lockAsync(t, lp, ctx)
			waitFor(t, func() bool { return len(stateOf(t, lop).Waiting) == 1 })
			waitFor(t, func() bool { return gp.Confirmed() >= 1 })
			if err := o.Unlock(); err != nil {
				t.Fatal(err)
			}
			if err := recv(t, warm, "P's first Lock").Unlock(); err != nil {
				t.Fatal(err)
			}
			arm, ran, open := gateScript(cp, "lock")
			t.Cleanup(open)
			arm()
			type res struct {
				o   *dlock.Owner
				err error
			}
			pres := make(chan res, 1)
			go func() {
				var r res
				if try {
					var ok bool
					r.o, ok, r.err = lp.TryLock(ctx)
					if r.err == nil && !ok {
						r.o = nil
					}
				} else {
					r.o, r.err = lp.Lock(ctx)
				}
				pres <- r
			}()
			recv(t, ran, "P's take") // the key is P's; the answer is on its way
			st := stateOf(t, lop)
			if st.Holder == "" {
				t.Fatal("the key is free after P's take")
			}
			cdone := rgLockAsync(lc, ctx)
			waitFor(t, func() bool { return len(stateOf(t, lop).Waiting) == 1 })
			waitFor(t, func() bool { r, heard, ok := gc.Place(key(lc)); return ok && heard && r == 0 })
			heard := gp.Heard()
			if removed, err := lop.ForceRelease(ctx, st.Holder); err != nil || !removed {
				t.Fatalf("ForceRelease(%q) = %v, %v", st.Holder, removed, err)
			}
			rc := rgRecv(t, cdone, 5*time.Second, "C's Lock")
			if rc.err != nil {
				t.Fatal(rc.err)
			}
			waitFor(t, func() bool { return gp.Heard() > heard }) // P heard that its locker was let go
			open()
			if try {
				r := rgRecv(t, pres, 5*time.Second, "P's TryLock")
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.o != nil {
					if r.o.Err() == nil && rc.owned.Err() == nil {
						t.Errorf("P came out of TryLock owning the key (owner context live) while C holds it")
					}
					_ = r.o.Unlock()
				}
				if err := lc.Unlock(rc.owned); err != nil {
					t.Fatal(err)
				}
				return
			}
			notYet(t, pres, "P's Lock returned while C holds the key") // (it waits behind C)
			if err := lc.Unlock(rc.owned); err != nil {
				t.Fatal(err)
			}
			r := rgRecv(t, pres, 5*time.Second, "P's Lock after C let go")
			if r.err != nil {
				t.Fatal(r.err)
			}
			_ = r.o.Unlock()
		})
	}
}

// A process told that an operator elsewhere removed its tenure's locker while a renewal
// before a pass is on its way (a goroutine of the process is about to take the lock from
// another) does not pass the lock on when the renewal's answer comes: the key went to the
// process in line meanwhile. (A ForceRelease in the same Generator: TestForceReleaseDuringAPassRenewal.)
func TestForceReleaseElsewhereHeardDuringAPassRenewal(t *testing.T) {
	const lease = 10 * time.Second // (the holder's next renewal would come long after the checks)
	ga, ca := newGen(t, dlock.WithLocalHandOff(time.Hour))
	gc, _ := newGen(t)
	gop, _ := newGen(t)
	tg := uniqueTarget(t)
	la, lc, lop := mustGen(t, ga, "FORCEDPASS", tg, lease), mustGen(t, gc, "FORCEDPASS", tg, lease), mustGen(t, gop, "FORCEDPASS", tg, lease)
	la2 := mustGen(t, ga, "FORCEDPASS", tg, lease/2) // another lease: a pass to it renews first
	ctx := ctxT(t, 30*time.Second)
	preload(t, ca) // (the renewal runs as it is stalled: no NOSCRIPT, then EVAL)
	ga.SetLinger(time.Minute)
	// A waits once, so that it is subscribed to the key's channel (and stays so).
	o := mustLock(t, lop, ctx)
	warm := lockAsync(t, la, ctx)
	waitFor(t, func() bool { return len(stateOf(t, lop).Waiting) == 1 })
	waitFor(t, func() bool { return ga.Confirmed() >= 1 })
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	a1 := recv(t, warm, "A's first Lock")
	if a1 == nil {
		t.FailNow()
	}
	waiter := rgLockAsync(la2, ctx)
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	arm, ran, open := gateScript(ca, "renew")
	t.Cleanup(open)
	arm()
	if err := a1.Unlock(); err != nil { // the waiter renews the tenure with its lease before it takes it
		t.Fatal(err)
	}
	recv(t, ran, "the renewal before the pass")
	st := stateOf(t, lop)
	cdone := rgLockAsync(lc, ctx)
	waitFor(t, func() bool { r, heard, ok := gc.Place(key(lc)); return ok && heard && r == 0 })
	heard := ga.Heard()
	if removed, err := lop.ForceRelease(ctx, st.Holder); err != nil || !removed {
		t.Fatalf("ForceRelease(%q) = %v, %v", st.Holder, removed, err)
	}
	rc := rgRecv(t, cdone, 5*time.Second, "C's Lock")
	if rc.err != nil {
		t.Fatal(rc.err)
	}
	waitFor(t, func() bool { return ga.Heard() > heard }) // A heard that its locker was let go
	open()
	select {
	case r := <-waiter:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.owned.Err() == nil && rc.owned.Err() == nil {
			t.Errorf("A's waiter came out of Lock owning the key (owner context live) while C holds it")
		}
		_ = la2.Unlock(r.owned)
		_ = lc.Unlock(rc.owned)
	case <-time.After(100 * time.Millisecond): // it waits behind C
		if err := lc.Unlock(rc.owned); err != nil {
			t.Fatal(err)
		}
		r := rgRecv(t, waiter, 5*time.Second, "A's waiter after C let go")
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = la2.Unlock(r.owned)
	}
}

// A process whose writer stands in line behind its own read-hold, which an operator elsewhere
// removes, is granted the write side: Redis gives a write-hold only when nothing else is held,
// so the read-hold is gone, and its readers must not go on beside the process's own writer
// until the read-hold's next renewal (three quarters of a lease on).
func TestForceReleaseElsewhereOfAReadHoldBehindItsOwnWriter(t *testing.T) {
	gx, _ := newGen(t, dlock.WithDefaultLease(10*time.Second))
	op, _ := newGen(t)
	tg := uniqueTarget(t)
	lx, lop := rwOf(t, gx, tg), rwOf(t, op, tg)
	ctx := ctxT(t, 30*time.Second)
	reader, err := lx.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Owner, 1)
	go func() {
		o, err := lx.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	// the writer stands in line behind its own process's read-hold
	waitFor(t, func() bool { s, _ := lop.State(ctx); return len(s.Waiting) == 1 && s.Waiting[0].Write })
	s, err := lop.State(ctx)
	if err != nil || len(s.Readers()) != 1 {
		t.Fatalf("state: %+v, %v", s, err)
	}
	if removed, err := lop.ForceRelease(ctx, s.Readers()[0].Locker); err != nil || !removed {
		t.Fatalf("ForceRelease = %v, %v", removed, err)
	}
	writer := rgRecv(t, got, 5*time.Second, "the writer")
	if writer == nil {
		return
	}
	defer func() { _ = lx.Unlock(writer) }()
	if n := lx.HoldCount(reader); n != 0 {
		t.Errorf("the writer was lent the write side while the process's reader still holds the read side (HoldCount %d, context %s)", n, fmtCause(reader))
	}
	waitFor(t, func() bool { return errors.Is(context.Cause(reader), dlock.ErrLockLost) })
	if err := lx.Unlock(reader); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the removed reader's Unlock: %v", err)
	}
}

// A semaphore process that holds permits and waits for more gets them after an operator
// elsewhere removed the holding it has: more permits than the count would be out in this one
// process, so the process checks its other holdings at once (a renewal) rather than at their
// next renewal, three quarters of a lease on, and their owners learn of the loss.
func TestForceReleaseElsewhereOfPermitsOfAProcessThatGetsMore(t *testing.T) {
	const k = 3
	gx, _ := newGen(t, dlock.WithDefaultLease(10*time.Second))
	op, _ := newGen(t)
	tg := uniqueTarget(t)
	sx, sop := semOf(t, gx, tg, k), semOf(t, op, tg, k)
	ctx := ctxT(t, 30*time.Second)
	first, err := sx.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Owner, 1)
	go func() {
		o, err := sx.Acquire(ctx, 2)
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	// the second waits (one permit is free): once it stands in line, the first's holding goes
	waitFor(t, func() bool { s, _ := sop.State(ctx); return len(s.Waiting) == 1 })
	s, err := sop.State(ctx)
	if err != nil || len(s.Holds) != 1 {
		t.Fatalf("state: %+v, %v", s, err)
	}
	if removed, err := sop.ForceRelease(ctx, s.Holds[0].Locker); err != nil || !removed {
		t.Fatalf("ForceRelease = %v, %v", removed, err)
	}
	second := rgRecv(t, got, 5*time.Second, "the second acquisition")
	if second == nil {
		return
	}
	defer func() { _ = sx.Release(second) }()
	if !rgWaitUntil(3*time.Second, func() bool { return errors.Is(context.Cause(first), dlock.ErrLockLost) }) {
		t.Errorf("4 permits of %d believed out in one process: the removed holding's owner is %s", k, fmtCause(first))
	}
	if err := sx.Release(first); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the removed owner's Release: %v", err)
	}
}

// An operator's ForceRelease in the holder's own Generator, of a read-write lock's holding whose
// take is still on its way back, ends it when the answer comes: the writer does not come out
// of Lock owning the key while the process in line holds it; it waits behind it. (The mutex's
// case: TestForceReleaseHeardWhileTheTakeIsOnItsWay.)
func TestForceReleaseHereOfAFamilyHoldingWhoseTakeIsOnItsWay(t *testing.T) {
	gp, cp := newGen(t, dlock.WithDefaultLease(10*time.Second)) // (P's next renewal comes long after the checks)
	gc, _ := newGen(t)
	tg := uniqueTarget(t)
	lp, lc := rwOf(t, gp, tg), rwOf(t, gc, tg)
	ctx := ctxT(t, 30*time.Second)
	// the answer of P's take (the shared script with op take) is held until open
	ranc, gate := make(chan struct{}), make(chan struct{})
	var once, opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(open)
	cp.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if err == nil && scriptIs("shared")(cmd.Args()) && slices.Contains(cmd.Args(), any("take")) { // (not a NOSCRIPT)
			once.Do(func() {
				close(ranc)
				select {
				case <-gate:
				case <-time.After(15 * time.Second):
				}
			})
		}
		return err
	}})
	ran := (<-chan struct{})(ranc)
	got := make(chan rgLockResult, 1)
	go func() {
		o, err := lp.Lock(ctx)
		got <- rgLockResult{owned: o, err: err}
	}()
	recv(t, ran, "P's take") // the write side is P's; the answer is on its way
	s, err := lp.State(ctx)
	if err != nil || len(s.Holds) != 1 || !s.Holds[0].Write {
		t.Fatalf("state after P's take: %+v, %v", s, err)
	}
	cdone := make(chan rgLockResult, 1)
	go func() {
		o, err := lc.Lock(ctx)
		cdone <- rgLockResult{owned: o, err: err}
	}()
	waitFor(t, func() bool { s, _ := lp.State(ctx); return len(s.Waiting) == 1 })
	if removed, err := lp.ForceRelease(ctx, s.Holds[0].Locker); err != nil || !removed {
		t.Fatalf("ForceRelease(%q) = %v, %v", s.Holds[0].Locker, removed, err)
	}
	rc := rgRecv(t, cdone, 5*time.Second, "C's Lock")
	if rc.err != nil {
		t.Fatal(rc.err)
	}
	open()
	notYet(t, got, "P's Lock returned while C holds the write side") // (it waits behind C)
	if err := lc.Unlock(rc.owned); err != nil {
		t.Fatal(err)
	}
	r := rgRecv(t, got, 5*time.Second, "P's Lock after C let go")
	if r.err != nil {
		t.Fatal(r.err)
	}
	_ = lp.Unlock(r.owned)
}

// A read-write lock's or semaphore's holding removed as it is lent to an acquisition — between
// the lending and the Owner: here an operator's ForceRelease in this Generator — is not
// returned, as the mutex's is not: Lock takes the lock again and returns an Owner that is live,
// TryLock reports it not obtained, and a downgrade whose write-hold went reports the loss.
func TestFamilyHoldingLostAsItIsLentIsNotReturned(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	var (
		holders func() []dlock.SharedHold
		force   func(string) (bool, error)
		arm     atomic.Bool
	)
	hook := func() {
		if !arm.CompareAndSwap(true, false) {
			return
		}
		hs := holders()
		if len(hs) != 1 {
			t.Errorf("holdings as one was lent: %+v", hs)
			return
		}
		if ok, err := force(hs[0].Locker); !ok || err != nil {
			t.Errorf("ForceRelease = %v %v", ok, err)
		}
	}
	g, _ := newGen(t, dlock.WithLent(hook))
	rw, err := g.GenRW("API", target(t)+"-rw")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := g.GenSemaphore("API", target(t)+"-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	live := func(o *dlock.Owner, what string) {
		t.Helper()
		if o.Err() != nil {
			t.Fatalf("%s returned an Owner that had ended: %v", what, context.Cause(o))
		}
		if len(holders()) != 1 {
			t.Fatalf("%s returned, and Redis holds %+v", what, holders())
		}
	}
	for _, c := range []struct {
		name  string
		state func(context.Context) (dlock.SharedState, error)
		force func(context.Context, string) (bool, error)
		lock  func(context.Context) (*dlock.Owner, error)
		try   func(context.Context) (*dlock.Owner, bool, error)
		free  func(context.Context) error
	}{
		{"read", rw.State, rw.ForceRelease, rw.RLock, rw.TryRLock, rw.Unlock},
		{"write", rw.State, rw.ForceRelease, rw.Lock, rw.TryLock, rw.Unlock},
		{"permits", sem.State, sem.ForceRelease,
			func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) },
			func(ctx context.Context) (*dlock.Owner, bool, error) { return sem.TryAcquire(ctx, 1) }, sem.Release},
	} {
		holders = func() []dlock.SharedHold {
			s, err := c.state(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return s.Holds
		}
		force = func(h string) (bool, error) { return c.force(ctx, h) }
		arm.Store(true)
		o, err := c.lock(ctx)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		live(o, c.name)
		if err := c.free(o); err != nil {
			t.Fatalf("%s: Unlock: %v", c.name, err)
		}
		arm.Store(true)
		o, ok, err := c.try(ctx)
		if err != nil || ok || o != nil {
			t.Fatalf("%s: TryLock of a holding lost as it was lent = %v %v %v, want nil false nil", c.name, o, ok, err)
		}
		if arm.Load() {
			t.Fatalf("%s: the hook did not run", c.name)
		}
	}

	// a downgrade: the write-hold goes as the writer's read is lent on it
	holders = func() []dlock.SharedHold {
		s, err := rw.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.Holds
	}
	force = func(h string) (bool, error) { return rw.ForceRelease(ctx, h) }
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	arm.Store(true)
	r, err := rw.RLock(w)
	if !errors.Is(err, dlock.ErrLockLost) || r != nil {
		t.Fatalf("downgrade of a write-hold removed as it was lent = %v %v, want the loss", r, err)
	}
	if err := rw.Unlock(w); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock of the writer = %v, want the loss", err)
	}
}
