package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/internal/redistest"
	"github.com/dlockgo/dlock/processor"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The owner re-enters (Lock, TryLock, another handle on the key); until its last Unlock
// neither another goroutine nor another process gets the key. Ports Redisson's testReentrancy,
// testGetHoldCount, testRemainTimeToLive2, testIsHeldByCurrentThread and etcd's
// TestMutexSessionRelock.
func TestReentry(t *testing.T) {
	g, c := newGen(t)
	gr, _ := newGen(t)
	l, _ := g.Gen("RE", target(t))
	l2nd, _ := g.Gen("RE", target(t))
	remote, _ := gr.Gen("RE", target(t))
	ctx := ctxT(t, 10*time.Second)
	if n := l.HoldCount(ctx); n != 0 {
		t.Fatalf("HoldCount before Lock = %d", n)
	}
	o1, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := l.Lock(o1)
	if err != nil || o2 != o1 {
		t.Fatalf("re-entry: %v", err)
	}
	if o3, ok, err := l.TryLock(o1); !ok || err != nil || o3 != o1 {
		t.Fatalf("TryLock by the owner = (%v, %v, %v), want the same owner", o3, ok, err)
	}
	if o4, err := l2nd.Lock(o1); err != nil || o4 != o1 {
		t.Fatalf("re-entry through another handle: %v", err)
	}
	// A context of the owner's that ended before the call re-enters nothing: it would return
	// an Owner done at once while the hold it counted lives on.
	ended, cancel := context.WithCancel(o1)
	cancel()
	if o, err := l.Lock(ended); err == nil || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with an ended context of the owner's = %v, %v; want ErrNotObtained and the context's error", o, err)
	}
	if o, ok, err := l.TryLock(ended); ok || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock with an ended context of the owner's = %v, %v, %v; want ErrNotObtained and the context's error", o, ok, err)
	}
	if n := l.HoldCount(o1); n != 4 {
		t.Fatalf("hold count %d, want 4", n)
	}
	for i := 0; i < 3; i++ {
		if err := l.Unlock(o1); err != nil {
			t.Fatal(err)
		}
		for name, l := range map[string]*dlock.DistributedReentrantLock{"another goroutine": l, "another process": remote} {
			if _, ok, err := l.TryLock(context.Background()); ok || err != nil {
				t.Fatalf("%s's TryLock while held %d times = %v, %v", name, 3-i, ok, err)
			}
		}
		if s := stateOf(t, remote); !s.Held() || s.Mine || o1.Err() != nil {
			t.Fatalf("held %d times, from another process: %+v", 3-i, s)
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

// A re-entered holding kept for longer than its lease is renewed: neither its inner Unlock nor
// the lease running out lets the key go, and the last Unlock does. Mirrors DLock's
// DistributedReentrantLockTest.testReentrant (1 s lease, held 1.5 s re-entered, then 1 s);
// the lease here is 2 s, so that a renewal has 500 ms to spare on a loaded machine.
func TestReentryOutlastsTheLease(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	g, c := newGen(t)
	gr, _ := newGen(t)
	l, _ := g.GenWithLease("REENTRY", target(t), lease)
	remote, _ := gr.GenWithLease("REENTRY", target(t), lease)
	ctx := ctxT(t, 30*time.Second)
	key := l.Config().UniqueKey()
	stillHeld := func(when string) {
		t.Helper()
		if _, ok, err := remote.TryLock(ctx); ok || err != nil {
			t.Fatalf("%s: another process's TryLock = %v, %v", when, ok, err)
		}
		if c.Exists(ctx, key).Val() != 1 {
			t.Fatalf("%s: key gone", when)
		}
	}
	owned := mustLock(t, l, ctx)
	token, _ := l.FencingToken(owned)
	if o, err := l.Lock(owned); err != nil || o != owned || l.HoldCount(owned) != 2 {
		t.Fatalf("re-entry: %v, hold count %d", err, l.HoldCount(owned))
	}
	time.Sleep(lease * 5 / 4)
	if owned.Err() != nil || l.HoldCount(owned) != 2 {
		t.Fatalf("after 1.25 leases re-entered: %v, hold count %d", fmtCause(owned), l.HoldCount(owned))
	}
	stillHeld("after 1.25 leases re-entered")
	if err := l.Unlock(owned); err != nil || l.HoldCount(owned) != 1 {
		t.Fatalf("inner Unlock: %v, hold count %d", err, l.HoldCount(owned))
	}
	time.Sleep(lease / 2)
	if owned.Err() != nil || l.HoldCount(owned) != 1 {
		t.Fatalf("half a lease after the inner Unlock: %v, hold count %d", fmtCause(owned), l.HoldCount(owned))
	}
	stillHeld("half a lease after the inner Unlock")
	if tok, ok := l.FencingToken(owned); !ok || tok != token {
		t.Fatalf("fencing token %d (%v) after renewals, want %d", tok, ok, token)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	if owned.Err() == nil || l.HoldCount(owned) != 0 || c.Exists(ctx, key).Val() != 0 {
		t.Fatalf("after the last Unlock: owner %v, hold count %d, key %d", fmtCause(owned), l.HoldCount(owned), c.Exists(ctx, key).Val())
	}
	o := mustLock(t, remote, ctx) // free for the next
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TryLock of a held key answers (nil, false, nil) to another process and another goroutine, and
// the key is free for the next once released. Ports bsm/redislock's TestClient, redsync's
// TestMutexAlreadyLocked and TestValid, Redisson's testTryLockNonDelayed and etcd's
// ExampleMutex_TryLock (dlock answers false where etcd returns ErrLocked, redsync *ErrTaken).
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
	for name, l := range map[string]*dlock.DistributedReentrantLock{"another process": l2, "another goroutine": l1} {
		if o, ok, err := l.TryLock(ctx); ok || o != nil || err != nil {
			t.Fatalf("TryLock held by %s = (%v, %v, %v), want (nil, false, nil)", name, o, ok, err)
		}
	}
	if tok, ok := l1.FencingToken(owned); !ok || tok == 0 {
		t.Fatal("no fencing token")
	}
	l1.Unlock(owned)
	if g2.InUse() != 0 || g1.InUse() != 0 {
		t.Fatal("states kept after failed TryLock")
	}
	o2, ok, err := l2.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock after the release = (%v, %v)", ok, err)
	}
	if err := o2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A Lock whose deadline passes while the key is held, in the holder's process or another,
// says ErrNotObtained and DeadlineExceeded and leaves the line. Ports bsm/redislock's
// TestObtain_retry_failure and TestObtain_retry_context_deadline, and Redisson's
// testTryLockWait.
func TestWaiterDeadline(t *testing.T) {
	g1, _ := newGen(t, dlock.WithDefaultLease(stallProofLease)) // (a stall must not lose what they wait for)
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
	waitFor(t, func() bool { return len(stateOf(t, l2).Waiting) == 0 })
	settled(t, g2)
}

func TestDo(t *testing.T) {
	g, c := newGen(t, dlock.WithDefaultLease(stallProofLease))
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
	// fn's context ends when Do's does (the caller gave up), while fn still owns the lock.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = l.Do(short, func(owned context.Context) error {
		<-owned.Done() // (recv's bound turns a context that never ends into a failure: Do's test times out)
		if cause := context.Cause(owned); !errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("fn's context ended with %v, want the deadline of Do's", cause)
		}
		if l.HoldCount(owned) != 1 {
			t.Error("fn's context does not own the lock")
		}
		return owned.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	// ... and when Do's context is cancelled, with its cause
	why := errors.New("the caller went away")
	gone, cancelGone := context.WithCancelCause(ctx)
	defer cancelGone(nil)
	time.AfterFunc(100*time.Millisecond, func() { cancelGone(why) })
	err = l.Do(gone, func(owned context.Context) error {
		<-owned.Done()
		if cause := context.Cause(owned); !errors.Is(cause, why) {
			t.Errorf("fn's context ended with %v, want Do's cause %v", cause, why)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Exists(ctx, l.Config().UniqueKey()).Val() != 0 {
		t.Fatal("Do left the key behind")
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

// The process first in line takes a key whose holder died as the key expires, not at its next
// poll: its last answer said when the key could expire (counted from the answer's arrival, so
// that the ask does not come just before), and the poller asks then, however soon.
func TestFirstInLineTakesADeadHoldersKeyAsItExpires(t *testing.T) {
	g, c := newGen(t)
	name := target(t)
	l, _ := g.GenWithLease("DEADHOLDER", name, time.Minute)
	ctx := ctxT(t, 30*time.Second)
	// The dead holder: a process that took the key for 200 ms and neither renews nor releases it.
	short, err := domain.NewDLockConfig("DEADHOLDER", name, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := processor.NewRedisLockProcessor(c, processor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := dead.Lock(ctx, short, processor.LockRequest{Locker: "dead-1", Tokens: 1}); err != nil || r.Outcome != processor.Taken {
		t.Fatalf("the holder's lock = %+v, %v", r, err)
	}
	expires := time.Now().Add(200 * time.Millisecond)
	got := lockOnce(ctx, l)
	// The poller's first check comes at lease/10 = 6 s, and the first in line asks every third
	// of the lease (20 s) otherwise: a take within 4 s of the expiry is the ask at the expiry.
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("taken %v after the key expired", time.Since(expires))
	case <-time.After(time.Until(expires) + 4*time.Second):
		t.Fatal("the key of a dead holder was not taken as it expired")
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

// Waiters with random deadlines and random cancels, on two generators, while owners come and
// go: every call returns (acquired, or the context's error), the lock is never held twice,
// and afterwards no state, subscription or key is left.
func TestCancellationStorm(t *testing.T) {
	// A long lease: a key left behind by a waiter that gave up would stay for all of it.
	g1, c := newGen(t, dlock.WithDefaultLease(30*time.Second))
	g2, _ := newGen(t, dlock.WithDefaultLease(30*time.Second))
	gens := []*dlock.Generator{g1, g2}
	var inside, acquired, gaveUp atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	owners := sync.WaitGroup{}
	for i := 0; i < 4; i++ { // owners that keep coming back
		owners.Add(1)
		go func(i int) {
			defer owners.Done()
			l, _ := gens[i%2].Gen("STORM", target(t))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				owned, err := l.Lock(ctx)
				if err == nil {
					if inside.Add(1) != 1 {
						t.Error("two owners at once")
					}
					time.Sleep(200 * time.Microsecond)
					inside.Add(-1)
					if err := l.Unlock(owned); err != nil {
						t.Error(err)
					}
				}
				cancel()
			}
		}(i)
	}
	n := stormSize()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, _ := gens[i%2].Gen("STORM", target(t))
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(50))*time.Millisecond)
			defer cancel()
			if rand.IntN(3) == 0 {
				go func() {
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
					cancel()
				}()
			}
			owned, err := l.Lock(ctx)
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Errorf("Lock: %v", err)
				}
				gaveUp.Add(1)
				return
			}
			if inside.Add(1) != 1 {
				t.Error("two owners at once")
			}
			inside.Add(-1)
			acquired.Add(1)
			if err := l.Unlock(owned); err != nil {
				t.Error(err)
			}
		}(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("a waiter never returned")
	}
	close(stop)
	owners.Wait()
	t.Logf("%d waiters: %d acquired, %d gave up", n, acquired.Load(), gaveUp.Load())
	if acquired.Load()+gaveUp.Load() != int64(n) {
		t.Fatal("calls unaccounted for")
	}
	// Attempts and hand-overs that landed after their waiters had all left are given back in
	// the background, within a round trip or two.
	l, _ := g1.Gen("STORM", target(t))
	for i := 0; c.Exists(context.Background(), l.Config().UniqueKey()).Val() != 0; i++ {
		if i == 500 {
			t.Fatalf("the key is still held by %q: someone acquired after giving up", c.Get(context.Background(), l.Config().UniqueKey()).Val())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, g := range gens {
		settled(t, g)
	}
}

// The read-write lock's two sides and a semaphore's permits under a storm of waits and tries
// cut short at random moments (deadlines, cancels from another goroutine, some before the
// first request is sent), in two processes, while holders come and go: every call returns,
// no writer overlaps anyone and no more than k permits are out, and once the storm ends, with
// both processes still open, nothing is held in Redis: no holding of a call that gave up is
// left behind and renewed, so a third process takes the whole lock at once. Ports Redisson's
// RedissonLockExpirationRenewalTest.testWatchdogDoesNotOutliveInterruptedAcquire and
// testCancelledTryLockAsyncDoesNotLeaveWatchdog (interrupted acquires whose renewal outlived
// them), for the lock family as TestCancellationStorm does for the mutex.
func TestFamilyCancellationStorm(t *testing.T) {
	const k = 2
	for _, kind := range []string{"read-write", "semaphore"} {
		t.Run(kind, func(t *testing.T) {
			// A long lease: a holding left behind would stay for all of it.
			ga, _ := newGen(t, dlock.WithDefaultLease(30*time.Second))
			gb, _ := newGen(t, dlock.WithDefaultLease(30*time.Second))
			gt, _ := newGen(t, dlock.WithDefaultLease(30*time.Second))
			tg := uniqueTarget(t)
			// take returns what worker i takes in round r, and how many permits (k for a writer).
			take := func(g *dlock.Generator, i, r int) (dlock.Part, int) {
				if kind == "semaphore" {
					n := 1 + (i+r)%k
					return semOf(t, g, tg, k).Permits(n), n
				}
				if (i+r)%3 == 0 {
					return rwOf(t, g, tg).WriteSide(), k
				}
				return rwOf(t, g, tg).ReadSide(), 1
			}
			var out atomic.Int64 // permits out; a reader counts 1, a writer 1<<20
			var got, gaveUp, refused atomic.Int64
			end := time.Now().Add(2 * time.Second)
			var wg sync.WaitGroup
			for i := range 8 {
				g := []*dlock.Generator{ga, gb}[i%2]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := 0; time.Now().Before(end); r++ {
						p, n := take(g, i, r)
						weight := int64(n)
						if kind == "read-write" && n == k {
							weight = 1 << 20 // a writer: alone
						}
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(30))*time.Millisecond)
						if rand.IntN(3) == 0 {
							go func() {
								time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
								cancel()
							}()
						}
						var o *dlock.Owner
						var err error
						if r%4 == 0 {
							var ok bool
							o, ok, err = p.TryLock(ctx)
							if err == nil && !ok {
								refused.Add(1)
								cancel()
								continue
							}
						} else {
							o, err = p.Lock(ctx)
						}
						cancel()
						if err != nil {
							if !errors.Is(err, dlock.ErrNotObtained) {
								t.Errorf("worker %d: %v", i, err)
								return
							}
							gaveUp.Add(1)
							continue
						}
						got.Add(1)
						now := out.Add(weight)
						if kind == "semaphore" && now > k {
							t.Errorf("%d permits out of %d", now, k)
						}
						if kind == "read-write" && now > 1<<20 {
							t.Errorf("a writer beside others (weight %d)", now)
						}
						time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
						out.Add(-weight)
						if err := o.Unlock(); err != nil {
							t.Errorf("worker %d's Unlock: %v", i, err)
						}
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("a call never returned")
			}
			t.Logf("%d acquisitions, %d gave up, %d tries refused", got.Load(), gaveUp.Load(), refused.Load())
			// Takes that landed after their callers gave up are given back in the background,
			// within a round trip or two; a holding left behind would keep the third process
			// out for its 30 s lease, renewed.
			all := rwOf(t, gt, tg).WriteSide()
			if kind == "semaphore" {
				all = semOf(t, gt, tg, k).Permits(k)
			}
			var o *dlock.Owner
			if !rgWaitUntil(5*time.Second, func() bool {
				var ok bool
				o, ok, _ = all.TryLock(context.Background())
				return ok
			}) {
				st, err := semOrRWState(t, gt, kind, tg, k)
				t.Fatalf("a third process cannot take the whole lock after the storm: %+v %v", st, err)
			}
			if err := o.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// semOrRWState is the State of the read-write lock, or of the semaphore of k, of target tg.
func semOrRWState(t *testing.T, g *dlock.Generator, kind, tg string, k int) (dlock.SharedState, error) {
	if kind == "semaphore" {
		return semOf(t, g, tg, k).State(context.Background())
	}
	return rwOf(t, g, tg).State(context.Background())
}

func TestExclusionSoak(t *testing.T) {
	cases := []struct {
		name               string
		gens, perGen, keys int
	}{
		{"4gens-2goroutines-1key", 4, 2, 1},
		{"3gens-12goroutines-8keys", 3, 12, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const typ = "RGSOAK"
			gens := make([]*dlock.Generator, tc.gens)
			for i := range gens {
				gens[i] = rgGen(t, nil, nil)
			}
			keys := make([]string, tc.keys)
			for k := range keys {
				keys[k] = rgTarget(t, k)
			}
			gd := newRgGuard(t)
			end := time.Now().Add(soakFor(t))
			var wg sync.WaitGroup
			var locks, tries, gaveUp atomic.Int64
			for gi, g := range gens {
				for w := 0; w < tc.perGen; w++ {
					handles := make([]*dlock.DistributedReentrantLock, len(keys))
					for k, target := range keys {
						handles[k] = mustGen(t, g, typ, target, time.Second)
					}
					wg.Add(1)
					go func(who string) {
						defer wg.Done()
						for time.Now().Before(end) {
							k := rand.IntN(len(keys))
							l := handles[k]
							var owned context.Context
							cancel := func() {}
							if rand.IntN(4) == 0 {
								o, ok, err := l.TryLock(rgBG())
								if err != nil {
									t.Errorf("TryLock: %v", err)
									return
								}
								if !ok {
									continue
								}
								owned = o
								tries.Add(1)
							} else {
								var ctx context.Context
								ctx, cancel = context.WithTimeout(rgBG(), time.Duration(10+rand.IntN(21))*time.Millisecond)
								o, err := l.Lock(ctx)
								if err != nil {
									cancel()
									if !errors.Is(err, dlock.ErrNotObtained) {
										t.Errorf("Lock: %v", err)
										return
									}
									gaveUp.Add(1)
									continue
								}
								owned = o
								locks.Add(1)
							}
							s := gd.enter(keys[k], who, l, owned)
							if d := rand.IntN(2500); d > 500 {
								time.Sleep(time.Duration(d) * time.Microsecond)
							}
							gd.leave(s)
							if err := l.Unlock(owned); err != nil && !errors.Is(err, dlock.ErrLockLost) {
								t.Errorf("Unlock: %v", err)
							}
							cancel()
						}
					}(fmt.Sprintf("gen%d/g%d", gi, w))
				}
			}
			wg.Wait()
			t.Logf("%d Lock and %d TryLock acquisitions, %d timed-out Locks", locks.Load(), tries.Load(), gaveUp.Load())
			for _, k := range keys {
				if gd.count(k) == 0 {
					t.Errorf("key %s was never acquired", k)
				}
			}
		})
	}
}

func TestTryLockExclusive(t *testing.T) {
	t.Run("contended", testTryLockContended)
	t.Run("late-reply-and-new-attempt-of-one-generator", testLateReplyAndNewAttempt)
	t.Run("all-at-once", testTryLockAllAtOnce)
}

// Of many TryLocks of a free lock at once, in several processes, exactly one gets it: a mutex
// (etcd's testMutexTryLock, bsm/redislock's TestObtain_concurrent) and a MultiLock over every
// kind (Redisson's RedissonMultiLockTest.test, Curator's testSomeLocksFailToLock).
func testTryLockAllAtOnce(t *testing.T) {
	gens := make([]*dlock.Generator, 5)
	for i := range gens {
		gens[i], _ = newGen(t, dlock.WithDefaultLease(10*time.Second))
	}
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	for _, kind := range []struct {
		name string
		try  func(g *dlock.Generator) (*dlock.Owner, bool, error)
	}{
		{"mutex", func(g *dlock.Generator) (*dlock.Owner, bool, error) {
			l, _ := g.Gen("TRYALL", tg)
			return l.TryLock(ctx)
		}},
		{"MultiLock", func(g *dlock.Generator) (*dlock.Owner, bool, error) {
			mu, sem, rw := everyKind(t, g, tg, 1)
			m, err := g.MultiOf(mu, sem.Permits(1), rw.WriteSide())
			if err != nil {
				return nil, false, err
			}
			return m.TryLock(ctx)
		}},
	} {
		start := make(chan struct{})
		owners := make(chan *dlock.Owner, 20)
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				o, ok, err := kind.try(gens[i%len(gens)])
				switch {
				case err != nil:
					t.Errorf("%s: TryLock: %v", kind.name, err)
				case ok != (o != nil):
					t.Errorf("%s: TryLock = (%v, %v)", kind.name, o, ok)
				case ok:
					owners <- o
				}
			}()
		}
		close(start)
		wg.Wait()
		close(owners)
		n := 0
		for o := range owners {
			n++
			if err := o.Unlock(); err != nil {
				t.Error(err)
			}
		}
		if n != 1 {
			t.Fatalf("%s: %d TryLocks got the free lock at once, want exactly 1", kind.name, n)
		}
	}
}

// A generator whose lock-script reply comes after its Lock gave up, and which meanwhile
// acquires the same key with a new Lock, must not hold twice (and so must not let the key go
// under its live holder). The first held attempt leaves whatever an attempt on a held key
// leaves; X's release may pass the key to it.
func testLateReplyAndNewAttempt(t *testing.T) {
	const typ = "RGTRY"
	const lease = 10 * time.Second
	target := rgTarget(t, 0)
	key := rgLockKey(typ, target)
	raw := rawClient(t)
	hA := newFaultHook()
	hA.setLate(50 * time.Millisecond)
	x, a, c := rgGen(t, nil, nil), rgGen(t, nil, hA), rgGen(t, nil, nil)
	lX, lA, lC := mustGen(t, x, typ, target, lease), mustGen(t, a, typ, target, lease), mustGen(t, c, typ, target, lease)

	oX, err := lX.Lock(rgCtx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A's attempt on the held key reaches Redis after A gave up.
	hA.cutShort(t, holdOnWire, key, func(ctx context.Context) {
		if o, err := lA.Lock(ctx); err == nil {
			_ = lA.Unlock(o)
			t.Fatal("A got a key X holds")
		}
	})
	hA.awaitLateRun(t)
	if err := lX.Unlock(oX); err != nil {
		t.Fatal(err)
	}

	// A tries again; the reply comes after this Lock gave up too.
	hA.setLate(200 * time.Millisecond)
	hA.cutShort(t, slowReply, key, func(ctx context.Context) {
		if o, err := lA.Lock(ctx); err == nil {
			t.Logf("the slow Lock succeeded")
			_ = lA.Unlock(o)
		}
	})
	// Meanwhile A locks again, and gets the key.
	owned, err := lA.Lock(rgCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tokA, _ := lA.FencingToken(owned)
	if err := rgRecv(t, hA.lateRun, 10*time.Second, "the slow lock script"); err != nil {
		t.Logf("the slow lock script: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // A acts on the slow reply
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		oC, ok, err := lC.TryLock(rgBG())
		if err != nil {
			t.Fatalf("C: TryLock: %v", err)
		}
		if ok {
			tokC, _ := lC.FencingToken(oC)
			if owned.Err() == nil {
				t.Errorf("C got the lock (token %d) while A holds it (token %d) with a live owner context; key holds %s",
					tokC, tokA, holderOf(raw, key))
			}
			_ = lC.Unlock(oC)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if owned.Err() == nil {
		if err := lA.Unlock(owned); err != nil {
			t.Errorf("A: Unlock: %v", err)
		}
	}
}

func testTryLockContended(t *testing.T) {
	const typ = "RGTRY"
	target := rgTarget(t, 0)
	key := rgLockKey(typ, target)
	a := rgGen(t, nil, nil)
	others := []*dlock.Generator{rgGen(t, nil, nil), rgGen(t, nil, nil)}
	lA := mustGen(t, a, typ, target, stallProofLease) // (A holds through phase 1: a stall must not end it)
	gd := newRgGuard(t)

	contenders := func(stop <-chan struct{}, wg *sync.WaitGroup) {
		for i, g := range others {
			for w := 0; w < 3; w++ {
				wg.Add(1)
				go func(who string, l *dlock.DistributedReentrantLock) {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						var owned context.Context
						cancel := func() {}
						if rand.IntN(2) == 0 {
							o, ok, err := l.TryLock(rgBG())
							if err != nil {
								t.Errorf("TryLock: %v", err)
								return
							}
							if !ok {
								continue
							}
							owned = o
						} else {
							var ctx context.Context
							ctx, cancel = context.WithTimeout(rgBG(), time.Duration(1+rand.IntN(5))*time.Millisecond)
							o, err := l.Lock(ctx)
							if err != nil {
								cancel()
								continue
							}
							owned = o
						}
						s := gd.enter(key, who, l, owned)
						time.Sleep(200 * time.Microsecond)
						gd.leave(s)
						_ = l.Unlock(owned)
						cancel()
					}
				}(fmt.Sprintf("gen%d/g%d", i+1, w), mustGen(t, g, typ, target, time.Second))
			}
		}
	}

	// Phase 1: A holds all along; nobody else may get in.
	owned, err := lA.Lock(rgCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s := gd.enter(key, "A(holding)", lA, owned)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	contenders(stop, &wg)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if owned.Err() != nil {
		t.Fatalf("A's owner context ended while A held: %v", context.Cause(owned))
	}
	gd.leave(s)
	if err := lA.Unlock(owned); err != nil {
		t.Fatal(err)
	}

	// Phase 2: A comes and goes, the others try all the time.
	stop = make(chan struct{})
	contenders(stop, &wg)
	end := time.Now().Add(time.Second)
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(rgBG(), 50*time.Millisecond)
		o, err := lA.Lock(ctx)
		if err == nil {
			s := gd.enter(key, "A", lA, o)
			time.Sleep(2 * time.Millisecond)
			gd.leave(s)
			_ = lA.Unlock(o)
		}
		cancel()
	}
	close(stop)
	wg.Wait()
}

func TestLeasePerAcquisition(t *testing.T) {
	const typ = "RGLEASE"
	short, long := time.Second, 3*time.Second // (short renews within holdUnovertaken's 1.5 s, with room for a loaded machine)
	raw := rawClient(t)
	for _, tc := range []struct {
		name         string
		remote       bool
		first, other time.Duration
	}{
		{"local-handover-short-then-long", false, short, long},
		{"local-handover-long-then-short", false, long, short},
		{"across-generators-short-then-long", true, short, long},
		{"across-generators-long-then-short", true, long, short},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := rgTarget(t, 0)
			key := rgLockKey(typ, target)
			hB := newFaultHook()
			hB.watch(key)
			a := rgGen(t, nil, nil)
			b := rgGen(t, nil, hB)
			c := rgGen(t, nil, nil)
			lFirst := mustGen(t, a, typ, target, tc.first)
			waiterGen := a
			if tc.remote {
				waiterGen = b
			}
			lNext := mustGen(t, waiterGen, typ, target, tc.other)
			if lFirst.Config().Lease() != tc.first || lNext.Config().Lease() != tc.other {
				t.Fatalf("Config().Lease() = %v, %v; want %v, %v", lFirst.Config().Lease(), lNext.Config().Lease(), tc.first, tc.other)
			}
			if lFirst.Config().UniqueKey() != key {
				t.Fatalf("key %q, want %q", lFirst.Config().UniqueKey(), key)
			}

			o1, err := lFirst.Lock(rgCtx(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			checkPTTL(t, raw, key, tc.first, true, "first holder")
			got := rgLockAsync(lNext, rgCtx(t, 20*time.Second))
			if tc.remote {
				awaitTry(t, hB, 0)
			}
			time.Sleep(150 * time.Millisecond) // let the waiter queue up (and subscribe)
			if err := lFirst.Unlock(o1); err != nil {
				t.Fatal(err)
			}
			r := rgRecv(t, got, 20*time.Second, "the waiter's Lock")
			if r.err != nil {
				t.Fatal(r.err)
			}
			checkPTTL(t, raw, key, tc.other, tc.remote || tc.other > tc.first, "the waiter that took over")
			holdUnovertaken(t, lNext, r.owned, mustGen(t, c, typ, target, long))
		})
	}
}

func TestOwnerContextOutlivesWaitContext(t *testing.T) {
	const typ = "RGOWNER"
	g := rgGen(t, nil, nil, dlock.WithDefaultLease(10*time.Second))
	l := mustGen(t, g, typ, rgTarget(t, 0), 10*time.Second)
	parent := context.WithValue(rgBG(), rgCtxKey{}, "v")

	for _, how := range []string{"Lock", "TryLock"} {
		ctx, cancel := context.WithTimeout(parent, 200*time.Millisecond)
		var owned context.Context
		var err error
		if how == "Lock" {
			owned, err = l.Lock(ctx)
		} else {
			var ok bool
			owned, ok, err = l.TryLock(ctx)
			if err == nil && !ok {
				err = errors.New("not obtained")
			}
		}
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", how, err)
		}
		cancel()
		if owned.Err() != nil {
			t.Errorf("%s: owner context ended with the wait context: %v", how, context.Cause(owned))
		}
		if n := l.HoldCount(owned); n != 1 {
			t.Errorf("%s: HoldCount = %d after the wait context ended, want 1", how, n)
		}
		if v := owned.Value(rgCtxKey{}); v != "v" {
			t.Errorf("%s: owner context lost the wait context's values: %v", how, v)
		}
		if err := l.Unlock(owned); err != nil {
			t.Errorf("%s: Unlock = %v, want nil", how, err)
		}
		select {
		case <-owned.Done():
		default:
			t.Errorf("%s: owner context not done after Unlock", how)
		}
	}

	owned, err := l.Lock(rgCtx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(rgBG()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-owned.Done():
		if !errors.Is(context.Cause(owned), dlock.ErrClosed) {
			t.Errorf("cause after Close = %v, want ErrClosed", context.Cause(owned))
		}
	default:
		t.Errorf("owner context not done after Close")
	}
}

func TestMixedLeasesOneGenerator(t *testing.T) {
	const typ = "RGMIXED"
	target := rgTarget(t, 0)
	key := rgLockKey(typ, target)
	raw := rawClient(t)
	g := rgGen(t, nil, nil)
	leases := []time.Duration{300 * time.Millisecond, 3 * time.Second}
	var bad atomic.Int64
	gd := newRgGuard(t)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		lease := leases[i%2]
		l := mustGen(t, g, typ, target, lease)
		if l.Config().Lease() != lease {
			t.Fatalf("Config().Lease() = %v, want %v", l.Config().Lease(), lease)
		}
		wg.Add(1)
		go func(who string) {
			defer wg.Done()
			for r := 0; r < 10; r++ {
				o, err := l.Lock(rgCtx(t, 20*time.Second))
				if err != nil {
					t.Errorf("%s: Lock: %v", who, err)
					return
				}
				got := time.Now()
				s := gd.enter(key, who, l, o)
				pttl := raw.PTTL(rgBG(), key).Val()
				// A pass after a longer lease may leave the key a longer life. The time since
				// the Lock returned counts: a loaded machine may read the key late, before the
				// renewal of a short lease is due.
				if pttl+time.Since(got) <= lease/2 {
					if bad.Add(1) <= 5 {
						t.Errorf("%s (Config().Lease() = %v): key PTTL %v right after the acquisition", who, l.Config().Lease(), pttl)
					}
				}
				time.Sleep(5 * time.Millisecond)
				gd.leave(s)
				if err := l.Unlock(o); err != nil {
					t.Errorf("%s: Unlock: %v", who, err)
				}
			}
		}(fmt.Sprintf("g%d(%v)", i, lease))
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d of 40 acquisitions started with less than half their handle's lease", n)
	}
}

func TestAmbiguousReplyLeavesNothingHeld(t *testing.T) {
	const typ = "RGAMBIG"
	const lease = 20 * time.Second
	raw := rawClient(t)
	for _, tc := range []struct {
		name   string
		mode   faultMode
		try    bool
		aHolds bool // A holds the key while B's command is held, and lets it go after the late run
	}{
		{"lost-reply/TryLock", loseReply, true, false},
		{"lost-reply/Lock", loseReply, false, false},
		{"held-on-wire/Lock", holdOnWire, false, false},
		{"held-on-wire/TryLock", holdOnWire, true, false},
		{"held-on-wire/Lock-while-A-holds", holdOnWire, false, true},
		{"held-on-wire/TryLock-while-A-holds", holdOnWire, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := rgTarget(t, 0)
			key := rgLockKey(typ, target)
			hB := newFaultHook()
			a := rgGen(t, nil, nil)
			b := rgGen(t, nil, hB)
			c := rgGen(t, nil, nil)
			lA, lB, lC := mustGen(t, a, typ, target, lease), mustGen(t, b, typ, target, lease), mustGen(t, c, typ, target, lease)
			// Warm up: the scripts are loaded on the server, connections are made.
			warm := mustGen(t, b, typ, target+".warm", lease)
			if o, err := warm.Lock(rgCtx(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			} else if err := warm.Unlock(o); err != nil {
				t.Fatal(err)
			}
			var owned context.Context
			if tc.aHolds {
				var err error
				if owned, err = lA.Lock(rgCtx(t, 10*time.Second)); err != nil {
					t.Fatal(err)
				}
			}

			call := func(ctx context.Context) {
				if tc.try {
					o, ok, err := lB.TryLock(ctx)
					switch {
					case ok:
						t.Errorf("TryLock succeeded though the reply was lost")
						_ = lB.Unlock(o)
					case err == nil && tc.mode == loseReply:
						t.Errorf("TryLock returned (false, nil) though the reply was lost; want an error")
					}
					return
				}
				o, err := lB.Lock(ctx)
				if err == nil {
					t.Logf("Lock succeeded despite the lost reply")
					if err := lB.Unlock(o); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				} else {
					t.Logf("Lock: %v", err)
				}
			}
			if tc.mode == holdOnWire { // B gives up with its request on its way, which runs later
				hB.cutShort(t, holdOnWire, key, call)
				hB.awaitLateRun(t)
			} else {
				hB.arm(tc.mode, key)
				ctx := rgBG()
				if !tc.try {
					ctx = rgCtx(t, 1500*time.Millisecond)
				}
				call(ctx)
				hB.disarm()
				hB.mustHaveFired(t)
			}
			if tc.aHolds {
				if err := lA.Unlock(owned); err != nil {
					t.Fatalf("A: Unlock: %v", err)
				}
			}
			if !becomesFree(t, lC, 3*time.Second) {
				t.Fatalf("the lock stayed held after the ambiguous reply: key holds %s", holderOf(raw, key))
			}
		})
	}
}

// A process whose answers never reach it in time — far from Redis, every reply later than its
// client's ReadTimeout, so that go-redis sends each script again and every copy runs — may
// take the key without learning so, and its later asks with the same attempt find the key its
// own and renew it. The attempt is given back once a lease has passed without an answer (a
// request of it waits no longer, however often its client would send it again), so another
// process gets the key within about a lease; before, the far process kept it from everyone for
// as long as it waited (here 20 s), never owning it. Each kind alike.
func TestAttemptWithoutAnswersDoesNotKeepTheKey(t *testing.T) {
	const lease = 500 * time.Millisecond
	for _, kind := range []string{"mutex", "rw", "semaphore"} {
		t.Run(kind, func(t *testing.T) {
			p, err := faultproxy.New(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			// (go-redis sends each request up to 101 times, without a pause between: one
			// request of the far process's, unbounded, would outlast the near one's wait)
			fc := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 50 * time.Millisecond, MaxRetries: 100, MinRetryBackoff: -1, MaxRetryBackoff: -1})
			t.Cleanup(func() { _ = fc.Close(); _ = p.Close() })
			far := genOn(t, fc, dlock.WithDefaultLease(lease))
			near, _ := newGen(t, dlock.WithDefaultLease(lease))
			tg := uniqueTarget(t)
			lock := func(g *dlock.Generator, ctx context.Context) (*dlock.Owner, error) {
				switch kind {
				case "rw":
					return rwOf(t, g, tg).Lock(ctx)
				case "semaphore":
					return semOf(t, g, tg, 1).Acquire(ctx, 1)
				}
				l, err := g.Gen("NOANSWER", tg)
				if err != nil {
					return nil, err
				}
				return l.Lock(ctx)
			}
			farHolds := func() bool {
				switch kind {
				case "rw", "semaphore":
					var s dlock.SharedState
					var err error
					if kind == "rw" {
						s, err = rwOf(t, near, tg).State(ctxT(t, 5*time.Second))
					} else {
						s, err = semOf(t, near, tg, 1).State(ctxT(t, 5*time.Second))
					}
					return err == nil && len(s.Holds) == 1 && strings.HasPrefix(s.Holds[0].Locker, far.LockerPrefix())
				}
				l, _ := near.Gen("NOANSWER", tg)
				s, err := l.State(ctxT(t, 5*time.Second))
				return err == nil && strings.HasPrefix(s.Holder, far.LockerPrefix())
			}
			// Every reply to a request (a RESP array) comes 200 ms late, past the ReadTimeout.
			p.SetShaper(func(toTarget bool, chunk []byte) time.Duration {
				if !toTarget && len(chunk) > 0 && chunk[0] == '*' {
					return 200 * time.Millisecond
				}
				return 0
			})
			farCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			farDone := make(chan error, 1)
			go func() {
				o, err := lock(far, farCtx)
				if err == nil {
					err = o.Unlock()
				}
				farDone <- err
			}()
			waitFor(t, farHolds)
			o, err := lock(near, ctxT(t, 8*lease)) // (about a lease expected: the bound turns a lockout into a failure)
			if err != nil {
				t.Fatalf("the near process's Lock = %v: the far process's attempt, which never answered, kept the key", err)
			}
			if err := o.Unlock(); err != nil {
				t.Fatal(err)
			}
			cancel()
			<-farDone
			p.SetShaper(nil)
		})
	}
}

// A waiting acquisition whose asks fail at once for longer than a lease (Redis refuses the
// connection) asks again after a pause each time, no busy loop, and asks again when Redis is
// back and takes the key — free from the start, or let go by another process that held it
// through the outage (the waiter stood in line before it). Before, the give-back of an attempt
// without answers came only from an ask that was sent: the next ask's bound lay a lease after
// the first failure, in the past, so every later ask ended before it was sent and none gave
// the attempt back; the process asked Redis nothing for as long as it waited. And a waiter in
// line, its pace of asks past, was woken by the poller at once after each failure: thousands of
// asks a second.
func TestWaiterAsksAgainAfterRedisRefusedItForALease(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	for _, kind := range []string{"mutex", "rw", "semaphore"} {
		for _, heldBefore := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/held=%v", kind, heldBefore), func(t *testing.T) {
				var down atomic.Bool
				var sent, failed atomic.Int64
				c := srv.Client()
				c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
					if name := fmt.Sprint(cmd.Args()[0]); name == "evalsha" || name == "eval" {
						if down.Load() {
							failed.Add(1)
							cmd.SetErr(refused{})
							return cmd.Err()
						}
						sent.Add(1)
					}
					return next(ctx, cmd)
				}})
				g := genOn(t, c, dlock.WithDefaultLease(lease))
				other, _ := newGen(t, dlock.WithDefaultLease(5*time.Second)) // (the holder needs no renewal: a loaded machine may stall one past a short lease)
				tg := uniqueTarget(t)
				lock := func(g *dlock.Generator, ctx context.Context) (*dlock.Owner, error) {
					switch kind {
					case "rw":
						return rwOf(t, g, tg).Lock(ctx)
					case "semaphore":
						return semOf(t, g, tg, 1).Acquire(ctx, 1)
					}
					l, err := g.Gen("REFUSED", tg) // (its Generator's lease)
					if err != nil {
						return nil, err
					}
					return l.Lock(ctx)
				}
				var held *dlock.Owner
				if heldBefore {
					var err error
					if held, err = lock(other, ctxT(t, 10*time.Second)); err != nil {
						t.Fatal(err)
					}
				} else {
					down.Store(true)
				}
				got := make(chan error, 1)
				go func() {
					o, err := lock(g, ctxT(t, 10*time.Second))
					if err == nil {
						err = o.Unlock()
					}
					got <- err
				}()
				if heldBefore {
					waitFor(t, func() bool { return sent.Load() >= 2 }) // it asked, and stands in line
					time.Sleep(lease)                                   // (past its pace of asks)
					down.Store(true)
				}
				time.Sleep(3 * lease)
				down.Store(false)
				// (a pause of a tenth of the lease after each failure: 30 asks; well under a
				// thousand, however the machine is loaded)
				if n := failed.Load(); n > 300 {
					t.Errorf("%d requests failed at once in 3 leases: a busy loop", n)
				}
				if held != nil {
					if err := held.Unlock(); err != nil {
						t.Fatal(err)
					}
				}
				if err := recv(t, got, "the waiting Lock"); err != nil {
					t.Fatalf("Lock = %v once Redis was back (scripts sent since: %d)", err, sent.Load())
				}
			})
		}
	}
}

// refused is a network failure that comes at once, as a refused connection does: no answer.
type refused struct{}

func (refused) Error() string   { return "dial tcp 127.0.0.1:1: connect: connection refused (injected)" }
func (refused) Timeout() bool   { return false }
func (refused) Temporary() bool { return true }

func TestNoLeaseLongLockout(t *testing.T) {
	const typ = "RGLOCKOUT"
	const lease = 20 * time.Second
	const rounds = 40
	raw := rawClient(t)
	for _, notes := range []struct {
		name  string
		aC, b bool // notifications of A and C, and of B
	}{
		{"notify", true, true},
		{"no-notify", false, false},
		{"B-no-notify", true, false},
	} {
		for _, scenario := range []string{"failed-TryLock", "gave-up-Lock", "closed-while-waiting"} {
			t.Run(notes.name+"/"+scenario, func(t *testing.T) {
				a := rgGen(t, nil, nil, dlock.WithNotifications(notes.aC))
				c := rgGen(t, nil, nil, dlock.WithNotifications(notes.aC))
				for r := 0; r < rounds; r++ {
					target := rgTarget(t, r)
					key := rgLockKey(typ, target)
					hB := newFaultHook()
					hB.watch(key)
					b := rgGen(t, nil, hB, dlock.WithNotifications(notes.b))
					lA, lB, lC := mustGen(t, a, typ, target, lease), mustGen(t, b, typ, target, lease), mustGen(t, c, typ, target, lease)
					owned, err := lA.Lock(rgCtx(t, 10*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					switch scenario {
					case "failed-TryLock":
						_, ok, err := lB.TryLock(rgBG())
						if ok || err != nil {
							t.Fatalf("round %d: TryLock on a key another generator holds: %v, %v", r, ok, err)
						}
						if r%2 == 1 {
							hB.setDelay(50 * time.Millisecond) // whatever B does next is slow to arrive
						}
					case "gave-up-Lock":
						ctx, cancel := context.WithTimeout(rgBG(), time.Duration(1+r%5)*time.Millisecond)
						_, err := lB.Lock(ctx)
						cancel()
						if err == nil {
							t.Fatalf("round %d: Lock got a key another generator holds", r)
						}
					case "closed-while-waiting":
						got := rgLockAsync(lB, rgCtx(t, 20*time.Second))
						awaitTry(t, hB, 0)
						time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
						if err := b.Close(rgBG()); err != nil {
							t.Logf("round %d: B.Close: %v", r, err)
						}
						if res := rgRecv(t, got, 10*time.Second, "B's waiting Lock after Close"); res.err == nil {
							t.Fatalf("round %d: B's Lock got a key another generator holds", r)
						}
					}
					if err := lA.Unlock(owned); err != nil {
						t.Fatalf("round %d: A: Unlock: %v", r, err)
					}
					if !becomesFree(t, lC, 3*time.Second) {
						t.Fatalf("round %d (%s): the lock stayed held after A's Unlock: key holds %s", r, scenario, holderOf(raw, key))
					}
					hB.setDelay(0)
					if err := b.Close(rgBG()); err != nil {
						t.Logf("round %d: B.Close: %v", r, err)
					}
				}
			})
		}
	}
}

// Lock never returns a lock with less than half its lease left: when the acquiring reply
// comes late (a slow network, a loaded machine), it renews first. The attempt's reply is held
// back for 60 % of the lease.
func TestLockNeverReturnsNearlyExpired(t *testing.T) {
	g, c := newGen(t)
	preload(t, c)
	const lease = 2 * time.Second
	l, _ := g.GenWithLease("HALFLOCK", target(t), lease)
	cnt := &counter{}
	c.AddHook(cnt)
	var once atomic.Bool
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if scriptIs("lock")(cmd.Args()) && once.CompareAndSwap(false, true) {
			time.Sleep(lease * 6 / 10) // the reply is late; the script ran
		}
		return err
	}})
	ctx := ctxT(t, 20*time.Second)
	o, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Unlock() //nolint:errcheck
	took := time.Now()
	ttl := c.PTTL(ctx, key(l)).Val()
	if left := ttl + time.Since(took); left < lease/2 {
		t.Fatalf("Lock returned with %v of a %v lease left", left, lease)
	}
	if cnt.script("renew") == 0 {
		t.Fatal("no renewal before returning a late acquisition")
	}
}

// A grant to a process whose waiter gave up about when the key was granted to it is passed on
// at once (the process lets it go: its leave, or the grant's own check): the key does not stay
// with a process that no longer waits, for the 20 s lease.
func TestGrantPassedOnWhenTheWaiterGivesUp(t *testing.T) {
	gaveUp := 0
	defer func() { t.Logf("the waiter gave up in %d of 20 rounds", gaveUp) }()
	for round := 0; round < 20; round++ {
		gp, _ := newGen(t)
		gq, cq := newGen(t)
		tg := rgTarget(t, round)
		lp, _ := gp.GenWithLease("GRANTUP", tg, 20*time.Second)
		lq, _ := gq.GenWithLease("GRANTUP", tg, 20*time.Second)
		ctx := ctxT(t, 30*time.Second)
		q, err := lq.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := lockOnce(wctx, lp)
		waitFor(t, func() bool { st, _ := lq.State(ctx); return len(st.Waiting) == 1 })
		waitFor(t, func() bool { return gp.Subscribed() == 1 && gp.Confirmed() >= 1 })
		cq.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			err := next(ctx, cmd)
			if scriptIs("release")(cmd.Args()) {
				time.Sleep(time.Duration(round%5) * 100 * time.Microsecond)
				cancel() // the waiter gives up about when the key is granted
			}
			return err
		}})
		if err := q.Unlock(); err != nil {
			t.Fatal(err)
		}
		err = recv(t, done, "Lock")
		if err == nil {
			continue // it took the key before it gave up
		}
		gaveUp++
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			st, _ := lp.State(ctx)
			if !st.Mine {
				break
			}
			if time.Now().After(deadline) { // left alone, it would last 20 s
				t.Fatalf("round %d: the key is still granted to a process that stopped waiting", round)
			}
		}
	}
}

// TryLock goes before no goroutine of its process that queues for the lock: with WithFIFO
// never, and by default not once the first has waited past the starvation guard (1 ms), as
// Lock does. Each round one goroutine holds, one queues and waits past the guard; the holder
// unlocks and a TryLock follows at once, as the waiter is being woken.
func TestTryLockDoesNotJumpTheQueue(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []dlock.Option
	}{{"fifo", []dlock.Option{dlock.WithFIFO()}}, {"default", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newGen(t, tc.opts...)
			l, _ := g.GenWithLease("TRYQ", target(t), 5*time.Second)
			ctx := ctxT(t, 60*time.Second)
			for round := 0; round < 20; round++ {
				a, err := l.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := lockAsync(t, l, ctx)
				waitFor(t, func() bool { return g.Waiters(key(l)) })
				time.Sleep(3 * time.Millisecond) // past the starvation guard
				if err := a.Unlock(); err != nil {
					t.Fatal(err)
				}
				if o, ok, err := l.TryLock(ctx); ok || err != nil {
					t.Fatalf("round %d: TryLock went before a queued goroutine (ok %v, err %v)", round, ok, err)
					_ = o.Unlock()
				}
				o := recv(t, got, "the queued goroutine's Lock")
				if o == nil {
					t.FailNow()
				}
				if err := o.Unlock(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A Redis that keeps failing a waiter's requests (out of memory, a user not allowed a
// command) is asked again after a pause — not in a busy loop, and not only at the retry
// poller's pace (with a 30 s lease, a poll every 5 s) — and the waiter gets the lock once
// Redis answers again.
func TestLastingRedisFailureIsNoBusyLoop(t *testing.T) {
	const lease = 30 * time.Second
	gh, _ := newGen(t)
	gw, cw := newGen(t)
	tg := target(t)
	lh := mustGen(t, gh, "OOM", tg, lease)
	lw := mustGen(t, gw, "OOM", tg, lease)
	ctx := ctxT(t, 30*time.Second)
	h, err := lh.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	var asks atomic.Int64
	failing.Store(true)
	cw.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs("lock")(cmd.Args()) && failing.Load() {
			asks.Add(1)
			err := errors.New("OOM command not allowed when used memory > 'maxmemory'")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}})
	got := lockAsync(t, lw, ctx)
	start := time.Now()
	time.Sleep(time.Second)
	n, elapsed := asks.Load(), time.Since(start)
	failing.Store(false)
	// a pause of a tenth of the lease, at most 50 ms, between asks (and the poller's, here
	// none after its first at lease/10)
	if bound := 2 + 2*int64(elapsed/(50*time.Millisecond)); n > bound || n < 3 {
		t.Fatalf("%d requests in %v while Redis failed them, want 3 to %d", n, elapsed, bound)
	}
	t.Logf("%d requests in %v while Redis failed them", n, elapsed)
	if err := lh.Unlock(h); err != nil {
		t.Fatal(err)
	}
	o := recv(t, got, "the waiter's Lock")
	if err := lw.Unlock(o); err != nil {
		t.Fatal(err)
	}
}

// A key held without an expiry (an operator's SET, a PERSIST) keeps the first waiter asking
// at its pace, not at once again and again: the holder's time to live is unknown, not under
// a millisecond. The waiter gets the lock once the key is gone, by its poll.
func TestKeyWithoutExpiryIsNoBusyLoop(t *testing.T) {
	const lease = 600 * time.Millisecond
	gw, cw := newGen(t)
	lw := mustGen(t, gw, "NOTTL", target(t), lease)
	admin := rawClient(t)
	if err := admin.Set(context.Background(), key(lw), "set-by-hand", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var asks atomic.Int64
	cw.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs("lock")(cmd.Args()) {
			asks.Add(1)
		}
		return next(ctx, cmd)
	}})
	got := lockAsync(t, lw, ctxT(t, 30*time.Second))
	start := time.Now()
	time.Sleep(1500 * time.Millisecond)
	n, elapsed := asks.Load(), time.Since(start)
	// at most one ask a sixth of the lease (before Redis hears it listen), and a few besides
	if bound := 3 + int64(elapsed/(lease/6)); n > bound {
		t.Fatalf("%d requests in %v while the key was held without an expiry, want at most %d", n, elapsed, bound)
	}
	t.Logf("%d requests in %v while the key was held without an expiry", n, elapsed)
	if err := admin.Del(context.Background(), key(lw)).Err(); err != nil {
		t.Fatal(err)
	}
	o := recv(t, got, "the waiter's Lock once the key is gone")
	if err := lw.Unlock(o); err != nil {
		t.Fatal(err)
	}
}

// waitKind is a lock as one process makes it, for the cancelled-wait tests: the holder's
// acquisition, the wait that gives up, a try of the same, a try that fits beside the holder
// (nil: none), and how many processes stand in the lock's Redis line.
type waitKind struct {
	hold, wait func(ctx context.Context) (*dlock.Owner, error)
	try        func(ctx context.Context) (*dlock.Owner, bool, error)
	beside     func(ctx context.Context) (*dlock.Owner, bool, error)
	inLine     func(ctx context.Context) int
}

// A wait ended by its context — for a mutex, the read side, the write side, permits, or a
// MultiLock's shared part; in another process than the holder's or beside the holder's own
// holding — says ErrNotObtained and the context's error and leaves nothing in the Redis line:
// the holder goes on, what fits beside it gets in, and once it lets go another process's try
// gets in at once. Ports Redisson's testLockIsNotRenewedAfterInterruptedTryLock,
// testLockUninterruptibly and its interrupted acquires, etcd's TestMutexLockSessionExpired,
// Curator's TestInterProcessSemaphore.testInterruptAcquire and testNoOrphanedNodes,
// TestInterProcessReadWriteLock.testThatUpgradingIsDisallowed's timed write acquire, and
// RedissonMultiLockTest.testWaitAndLeaseTimeouts and testMultiThreads.
func TestCancelledWaitLeavesNothing(t *testing.T) {
	raw := rawClient(t)
	sharedLine := func(cfg domain.DLockConfig) func(ctx context.Context) int {
		keys := processor.SharedKeys(cfg)
		return func(ctx context.Context) int {
			return int(raw.ZCard(ctx, keys[2]).Val() + raw.HLen(ctx, keys[3]).Val())
		}
	}
	rw := func(g *dlock.Generator, tg string, readWaits bool) waitKind {
		l := rwOf(t, g, tg)
		k := waitKind{hold: l.RLock, wait: l.Lock, try: l.TryLock, beside: l.TryRLock, inLine: sharedLine(l.Config())}
		if readWaits {
			k = waitKind{hold: l.Lock, wait: l.RLock, try: l.TryRLock, inLine: k.inLine}
		}
		return k
	}
	for _, c := range []struct {
		name        string
		sameProcess bool // the wait is made by a goroutine of the holder's process
		mk          func(g *dlock.Generator, tg string) waitKind
	}{
		{"mutex", false, func(g *dlock.Generator, tg string) waitKind {
			l, _ := g.Gen("CWAIT", tg)
			return waitKind{hold: l.Lock, wait: l.Lock, try: l.TryLock,
				inLine: func(context.Context) int { return len(stateOf(t, l).Waiting) }}
		}},
		{"read side", false, func(g *dlock.Generator, tg string) waitKind { return rw(g, tg, true) }},
		{"write side", false, func(g *dlock.Generator, tg string) waitKind { return rw(g, tg, false) }},
		{"write side beside its own reader", true, func(g *dlock.Generator, tg string) waitKind { return rw(g, tg, false) }},
		{"permits", false, func(g *dlock.Generator, tg string) waitKind { return permits(t, g, tg, sharedLine) }},
		{"permits beside its own", true, func(g *dlock.Generator, tg string) waitKind { return permits(t, g, tg, sharedLine) }},
		{"MultiLock", false, func(g *dlock.Generator, tg string) waitKind {
			mu, sem, rw := everyKind(t, g, tg, 1)
			m, err := g.MultiOf(mu, sem.Permits(1), rw.WriteSide())
			if err != nil {
				t.Fatal(err)
			}
			rest, err := g.MultiOf(mu, sem.Permits(1)) // the parts before the held one: free again
			if err != nil {
				t.Fatal(err)
			}
			// (every part's line: a part let go as others of the process still waited for it
			// stood in line again, and leaves it as they give up, in the background)
			semLine, rwLine := sharedLine(sem.Config()), sharedLine(rw.Config())
			inLine := func(ctx context.Context) int { return len(stateOf(t, mu).Waiting) + semLine(ctx) + rwLine(ctx) }
			return waitKind{hold: rw.RLock, wait: m.Lock, try: m.TryLock, beside: rest.TryLock, inLine: inLine}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const lease = 20 * time.Second // (a left entry would outlive the test's bounds)
			gh, _ := newGen(t, dlock.WithDefaultLease(lease))
			gw, _ := newGen(t, dlock.WithDefaultLease(lease))
			gt, _ := newGen(t, dlock.WithDefaultLease(lease))
			if c.sameProcess {
				gw = gh
			}
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			h, w, other := c.mk(gh, tg), c.mk(gw, tg), c.mk(gt, tg)
			held, err := h.hold(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			waited := make(chan error, 3)
			for range 3 { // goroutines of one process wait together
				go func() {
					o, err := w.wait(wctx)
					if err == nil {
						_ = o.Unlock()
					}
					waited <- err
				}()
			}
			waitFor(t, func() bool { return w.inLine(ctx) >= 1 })
			cancel()
			for range 3 {
				if err := recv(t, waited, "the cancelled wait"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
					t.Fatalf("a cancelled wait = %v, want ErrNotObtained and context.Canceled", err)
				}
			}
			waitFor(t, func() bool { return w.inLine(ctx) == 0 })
			if held.Err() != nil {
				t.Fatalf("the holder after the wait was cancelled: %v", context.Cause(held))
			}
			for _, k := range []waitKind{h, other} { // in the holder's process and another
				if k.beside == nil {
					continue
				}
				if o, ok, err := k.beside(ctx); !ok || err != nil {
					t.Fatalf("a try that fits beside the holder, after the wait gave up = %v %v %v", o, ok, err)
				} else {
					_ = o.Unlock()
				}
			}
			if err := held.Unlock(); err != nil {
				t.Fatal(err)
			}
			o, ok, err := other.try(ctx)
			if !ok || err != nil {
				t.Fatalf("another process's try once the holder let go = %v %v: the cancelled wait left something behind", ok, err)
			}
			if err := o.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// permits is waitKind for a semaphore of 2: the holder takes 1, the wait asks for 2.
func permits(t *testing.T, g *dlock.Generator, tg string, line func(domain.DLockConfig) func(context.Context) int) waitKind {
	s := semOf(t, g, tg, 2)
	take := func(n int) func(ctx context.Context) (*dlock.Owner, error) {
		return func(ctx context.Context) (*dlock.Owner, error) { return s.Acquire(ctx, n) }
	}
	try := func(n int) func(ctx context.Context) (*dlock.Owner, bool, error) {
		return func(ctx context.Context) (*dlock.Owner, bool, error) { return s.TryAcquire(ctx, n) }
	}
	return waitKind{hold: take(1), wait: take(2), try: try(2), beside: try(1), inLine: line(s.Config())}
}

// A TryLock whose context ends while its request is on its way says ErrNotObtained and the
// context's error, as Lock's does and as a TryLock's whose context had ended before the call,
// and leaves the key free once that request has run (a regression test). Ports bsm/redislock's
// TestObtain_retry_context_deadline.
func TestTryLockCancelledOnItsWay(t *testing.T) {
	g, c := newGen(t)
	gt, _ := newGen(t)
	l, _ := g.Gen("TRYWAY", target(t))
	lt, _ := gt.Gen("TRYWAY", target(t))
	ctx := ctxT(t, 15*time.Second)
	w := newWire(t, c)
	t.Cleanup(w.unstall)
	w.stall("lock", 1)
	tctx, cancel := context.WithCancel(ctx)
	tried := make(chan error, 1)
	go func() {
		o, ok, err := l.TryLock(tctx)
		if ok {
			_ = o.Unlock()
			err = errors.New("TryLock got the lock after its context was cancelled")
		}
		tried <- err
	}()
	waitFor(t, func() bool { return w.stalledCount() == 1 })
	cancel()
	if err := recv(t, tried, "the cancelled TryLock"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Errorf("TryLock cancelled on its way = %v, want ErrNotObtained and context.Canceled", err)
	}
	if _, _, err := l.TryLock(tctx); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Errorf("TryLock with a cancelled context = %v, want ErrNotObtained and context.Canceled", err)
	}
	w.unstall()
	waitFor(t, func() bool { return !stateOf(t, lt).Held() && g.InUse() == 0 })
	o, ok, err := lt.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock after the cancelled attempt = %v, %v", ok, err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	settled(t, g)
}

// A TryLock right after one whose outcome was unknown (its reply lost after Redis ran it)
// finds the key held by that attempt, whose give-back is still on its way: it waits for a
// give-back of its own and asks once more, and gets the lock, rather than answer held for a
// key nobody who wants it holds. The first give-back, when it comes, leaves the new holding
// alone.
func TestTryLockRightAfterAnUnknownOutcomeGetsTheKey(t *testing.T) {
	g, c := newGen(t)
	l, _ := g.GenWithLease("TRYBACK", target(t), 10*time.Second)
	ctx := ctxT(t, 15*time.Second)
	preload(t, c) // (each request one EVALSHA: the stalls below catch the ones that matter)
	var lose atomic.Bool
	var released, left atomic.Int32 // release.lua and leave.lua requests answered (or failed)
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		switch processor.ScriptName(cmd.Args()) {
		case "release":
			released.Add(1)
		case "leave":
			left.Add(1)
		case "lock":
			if err == nil && lose.CompareAndSwap(true, false) {
				err = errors.New("i/o timeout (reply lost)") // the script ran; the reply is lost
				cmd.SetErr(err)
			}
		}
		return err
	}})
	w := newWire(t, c)
	t.Cleanup(w.unstall)
	lose.Store(true)
	w.stall("release", 1) // the first give-back stays on its way ...
	w.stall("leave", 1)   // ... and so does the leave that settles the attempt
	if _, ok, err := l.TryLock(ctx); ok || err == nil {
		t.Fatalf("TryLock whose reply was lost = %v, %v; want an error", ok, err)
	}
	waitFor(t, func() bool { return w.stalledCount() == 2 })
	o, ok, err := l.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock right after = %v, %v; want the lock", ok, err)
	}
	w.unstall()
	waitFor(t, func() bool { return released.Load() == 2 && left.Load() == 1 })
	if err := o.Unlock(); err != nil {
		t.Fatalf("Unlock after the first give-back and the leave came: %v", err)
	}
	settled(t, g)
}

// Goroutines of three processes increment a counter kept in Redis, a read and a write under
// the lock (Do): no increment is lost. Ports Redisson's testConcurrency_SingleInstance,
// testConcurrency_MultiInstance, testConcurrencyLoop_MultiInstance and RedissonFairLockTest's
// testMultipleLocks.
func TestNoUpdateLostUnderTheLock(t *testing.T) {
	gens := make([]*dlock.Generator, 3)
	for i := range gens {
		gens[i], _ = newGen(t)
	}
	rc := rawClient(t)
	counter := "counter:" + uniqueTarget(t)
	t.Cleanup(func() { rc.Del(context.Background(), counter) })
	ctx := ctxT(t, 60*time.Second)
	const goroutines, rounds = 12, 20
	var wg sync.WaitGroup
	for i := 0; i < goroutines; i++ {
		l, _ := gens[i%len(gens)].Gen("COUNTER", target(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				if err := l.Do(ctx, func(owned context.Context) error {
					v, err := rc.Get(owned, counter).Int()
					if err != nil && !errors.Is(err, redis.Nil) {
						return err
					}
					return rc.Set(owned, counter, v+1, time.Minute).Err()
				}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if v, err := rc.Get(ctx, counter).Int(); err != nil || v != goroutines*rounds {
		t.Fatalf("counter = %d, %v; want %d", v, err, goroutines*rounds)
	}
}

// Goroutines of one process, or of two, share one handle per process and take the lock in
// turn, some holding it past its lease: no two live owners at once, none loses it while it
// works, each Owner's hold count is 1 while held and 0 once unlocked, and when all are done
// nothing is left: no key, no waiter, no lock state or subscription in either process.
// Mirrors DLock's DistributedReentrantLockTest.testSingleServer and testMultiServer with
// their checkHoldCnt (threads sharing one lock instance per server, work up to twice the
// lease, hold count 0 at the end). The lease is 2 s, so that a renewal has 500 ms to spare on
// a loaded machine; the first goroutine of each process holds it 1.25 leases, the others 50 ms.
func TestContendedHoldsPastTheLeaseLeaveNothingHeld(t *testing.T) {
	t.Parallel()
	const lease, perProcess = 2 * time.Second, 4
	for name, processes := range map[string]int{"one-process": 1, "two-processes": 2} {
		t.Run(name, func(t *testing.T) {
			var gens []*dlock.Generator
			var handles []*dlock.DistributedReentrantLock
			var c *redis.Client
			for p := 0; p < processes; p++ {
				g, gc := newGen(t)
				l, err := g.GenWithLease("CONTENDED", target(t), lease)
				if err != nil {
					t.Fatal(err)
				}
				gens, handles, c = append(gens, g), append(handles, l), gc
			}
			key := handles[0].Config().UniqueKey()
			ctx := ctxT(t, 2*time.Minute)
			gd := newRgGuard(t)
			var pastTheLease atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < processes*perProcess; i++ {
				l := handles[i%processes]
				hold := 50 * time.Millisecond
				if i < processes {
					hold = lease * 5 / 4
				}
				wg.Add(1)
				go func(who string) {
					defer wg.Done()
					owned, err := l.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					s := gd.enter(key, who, l, owned)
					if n := l.HoldCount(owned); n != 1 {
						t.Errorf("%s: hold count %d while held, want 1", who, n)
					}
					time.Sleep(hold)
					if owned.Err() != nil {
						t.Errorf("%s: lost after holding %v of a %v lease: %v", who, hold, lease, fmtCause(owned))
					} else if hold > lease {
						pastTheLease.Add(1)
					}
					gd.leave(s)
					if err := l.Unlock(owned); err != nil {
						t.Errorf("%s: Unlock: %v", who, err)
					}
					if n := l.HoldCount(owned); n != 0 || owned.Err() == nil {
						t.Errorf("%s: after Unlock: hold count %d, owner %s", who, n, fmtCause(owned))
					}
				}(fmt.Sprintf("process %d goroutine %d", i%processes, i/processes))
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			if pastTheLease.Load() == 0 {
				t.Fatal("no goroutine held the lock past its lease")
			}
			if c.Exists(ctx, key).Val() != 0 {
				t.Fatal("key left after every goroutine unlocked")
			}
			for p, l := range handles {
				if s := stateOf(t, l); s.Held() || len(s.Waiting) != 0 || s.LocalWaiters {
					t.Fatalf("process %d sees %+v after every goroutine unlocked", p, s)
				}
			}
			for _, g := range gens {
				settled(t, g)
			}
		})
	}
}

// Holding one key neither blocks nor is released by another key's lock, in one process or
// two. Ports bsm/redislock's TestLock_ObtainMulti and Redisson's testMultipleLocks.
func TestKeysAreIndependent(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	ctx := ctxT(t, 10*time.Second)
	var owners []*dlock.Owner
	var locks []*dlock.DistributedReentrantLock
	for i, g := range []*dlock.Generator{g1, g1, g2, g2} {
		l, _ := g.Gen("KEYS", fmt.Sprintf("%s-%d", target(t), i))
		o, ok, err := l.TryLock(ctx)
		if !ok || err != nil {
			t.Fatalf("TryLock of key %d while others are held = %v, %v", i, ok, err)
		}
		owners, locks = append(owners, o), append(locks, l)
	}
	if err := owners[0].Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := locks[1].Unlock(owners[0]); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of key 1 with key 0's owner = %v, want ErrNotHeld", err)
	}
	for i := 1; i < len(owners); i++ {
		if s := stateOf(t, locks[i]); !s.Mine || owners[i].Err() != nil {
			t.Fatalf("key %d after key 0's release: %+v", i, s)
		}
		if err := owners[i].Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

// An attempt whose caller leaves while every connection of the client's pool is taken by the
// Generator's other requests was never sent: it sends nothing afterwards either (no give-back,
// no leave) and leaves nothing in Redis. Under overload such clean-ups of attempts that never
// reached Redis crowded out new work until nothing succeeded.
func TestAttemptNeverSentSendsNothing(t *testing.T) {
	const typ = "NEVERSENT"
	tgt, stuck := target(t)+".abandoned", target(t)+".stuck"
	entered := make(chan struct{})
	unstick := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var mine []string // the scripts issued on the key under test
	hook := fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		args := cmd.Args()
		if name := processor.ScriptName(args); name != "" && len(args) > 3 {
			switch k := fmt.Sprint(args[3]); {
			case k == rgLockKey(typ, stuck):
				if name == "lock" {
					once.Do(func() {
						close(entered)
						<-unstick // holds the Generator's one turn, as a slow request does
					})
				}
			case strings.Contains(k, tgt): // (the mutex's key, or a read-write lock's or semaphore's)
				mu.Lock()
				mine = append(mine, name)
				mu.Unlock()
			}
		}
		return next(ctx, cmd)
	}}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1})
	c.AddHook(hook)
	g := genOn(t, c)
	var unstuck sync.Once
	release := func() { unstuck.Do(func() { close(unstick) }) }
	t.Cleanup(release) // (before Close, which waits for the stuck request)
	ls, _ := g.Gen(typ, stuck)
	l, _ := g.Gen(typ, tgt)

	got := make(chan error, 1)
	go func() {
		o, ok, err := ls.TryLock(context.Background())
		if ok {
			err = ls.Unlock(o)
		}
		got <- err
	}()
	recv(t, entered, "the stuck request")

	rw, err := g.GenRW(typ, tgt+".rw")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := g.GenSemaphore(typ, tgt+".sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		try  func(context.Context) (bool, error)
	}{
		{"mutex TryLock", func(ctx context.Context) (bool, error) { _, ok, err := l.TryLock(ctx); return ok, err }},
		{"mutex Lock", func(ctx context.Context) (bool, error) { _, err := l.Lock(ctx); return false, err }},
		{"write TryLock", func(ctx context.Context) (bool, error) { _, ok, err := rw.TryLock(ctx); return ok, err }},
		{"write Lock", func(ctx context.Context) (bool, error) { _, err := rw.Lock(ctx); return false, err }},
		{"read Lock", func(ctx context.Context) (bool, error) { _, err := rw.RLock(ctx); return false, err }},
		{"TryAcquire", func(ctx context.Context) (bool, error) { _, ok, err := sem.TryAcquire(ctx, 1); return ok, err }},
		{"Acquire", func(ctx context.Context) (bool, error) { _, err := sem.Acquire(ctx, 1); return false, err }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		ok, err := c.try(ctx)
		cancel()
		if ok {
			t.Fatalf("%s took the lock: its attempt went past the Generator's full gate", c.name)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(c.name, "TryAcquire") && !strings.Contains(c.name, "TryLock") && !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("%s: err = %v; want DeadlineExceeded (and ErrNotObtained from a blocking call)", c.name, err)
		}
	}
	release()
	if err := recv(t, got, "the stuck TryLock"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return g.InUse() == 0 }) // every background request is done

	mu.Lock()
	defer mu.Unlock()
	if len(mine) != 0 {
		t.Errorf("scripts sent on the key after its attempts were abandoned unsent: %v; want none", mine)
	}
	raw := rawClient(t)
	if keys, err := raw.Keys(context.Background(), "*"+tgt+"*").Result(); err != nil {
		t.Fatal(err)
	} else if len(keys) != 0 {
		t.Errorf("Redis keeps %v; want nothing of the key", keys)
	}
}

// Redis killed while a goroutine holds the lock and others wait — in its process and in
// another — and started again, empty: every call returns, the holder learns that its holding
// ended (or its Unlock reports the failure), and each waiter gets the lock in turn, one at a
// time, once Redis is back, and again afterwards. For the mutex, the write side of a
// read-write lock and a one-permit semaphore. Ports Curator's
// TestInterProcessMutexBase.testWaitingProcessKilledServer and testKilledSession (Curator's
// session expiry: here the holding's loss), and TestInterProcessSemaphore.
// testAcquireAfterLostServer (acquisitions go on as normal once the server is back).
func TestWaitersServedAfterRedisRestarts(t *testing.T) {
	s := ownServer(t)
	if !s.CanRestart() {
		t.Skip("needs a redis-server it can restart")
	}
	for _, kind := range []string{"mutex", "semaphore", "write side"} {
		t.Run(kind, func(t *testing.T) {
			ga := genOn(t, s.Client())
			gb := genOn(t, s.Client())
			tg := uniqueTarget(t)
			part := func(g *dlock.Generator) dlock.Part {
				switch kind {
				case "mutex":
					l, err := g.Gen("RESTART", tg)
					if err != nil {
						t.Fatal(err)
					}
					return l
				case "semaphore":
					return semOf(t, g, tg, 1).Permits(1)
				}
				return rwOf(t, g, tg).WriteSide()
			}
			pa, pb := part(ga), part(gb)
			ctx := ctxT(t, 60*time.Second)
			holder, err := pa.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var inside, most atomic.Int32
			var wg sync.WaitGroup
			served := make(chan string, 2)
			stalls := watchStalls(t)
			for name, p := range map[string]dlock.Part{"its own process's": pa, "another process's": pb} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for round := range 3 { // the first round waits through the restart
						since := time.Now()
						o, err := p.Lock(ctx)
						if err != nil {
							t.Errorf("%s waiter, round %d: %v", name, round, err)
							return
						}
						if n := inside.Add(1); n > most.Load() {
							most.Store(n)
						}
						time.Sleep(20 * time.Millisecond)
						inside.Add(-1)
						if err := o.Unlock(); err != nil && !errors.Is(err, dlock.ErrLockLost) && !stalls.excused(t, err, since, time.Second, fmt.Sprintf("%s waiter's Unlock, round %d", name, round)) {
							t.Errorf("%s waiter's Unlock, round %d: %v", name, round, err)
						}
					}
					served <- name
				}()
			}
			time.Sleep(100 * time.Millisecond) // the waiters wait
			s.Kill()
			time.Sleep(300 * time.Millisecond)
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-holder.Done():
				if !errors.Is(context.Cause(holder), dlock.ErrLockLost) {
					t.Fatalf("the holder's cause: %v", context.Cause(holder))
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the holder was never told that its holding was gone")
			}
			var rpe *dlock.RedisProcessError
			if err := holder.Unlock(); !errors.Is(err, dlock.ErrLockLost) && !errors.As(err, &rpe) {
				t.Fatalf("the holder's Unlock = %v, want ErrLockLost", err)
			}
			for range 2 {
				recv(t, served, "a waiter served three times after the restart")
			}
			wg.Wait()
			if most.Load() > 1 {
				t.Fatalf("%d owners at once after the restart", most.Load())
			}
		})
	}
}

// fencedStore is a downstream store that checks fencing tokens: a write with a token below the
// largest it accepted is refused.
type fencedStore struct {
	mu    sync.Mutex
	max   uint64
	value int64 // a counter the holders read, then write back plus one
}

// write accepts tok if it is at least the largest seen, and returns whether it did.
func (s *fencedStore) write(tok uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok < s.max {
		return false
	}
	s.max = tok
	return true
}

func (s *fencedStore) read() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}

func (s *fencedStore) set(v int64) {
	s.mu.Lock()
	s.value = v
	s.mu.Unlock()
}

// distanceHook delays every command of its client by d before it is sent: a process farther
// from Redis.
func distanceHook(d time.Duration) fnHook {
	return fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		time.Sleep(d)
		return next(ctx, cmd)
	}}
}

// Processes at different distances from Redis, each under a faulty network (writes delivered
// twice, late, replies lost, requests overtaken), take the mutex with deadlines from 0 to 3 ms
// and with long ones, TryLocks and re-entries: a holder whose owner context is live after its
// write never finds its fencing token refused by a fenced store (a later acquisition wrote
// with a larger one), a counter mutated under the lock by holders that stay live loses no
// update, and no long wait gives up.
func TestMutexUnderChaosAndDistance(t *testing.T) {
	// Process 0 passes the lock within itself, 1 and 3 (FIFO) release at every Unlock, 2
	// hears no messages, 4 yields after 5 ms.
	chaosAtDistance(t, 20, 2, 1500*time.Millisecond, func(i int) []dlock.Option {
		switch i {
		case 1:
			return []dlock.Option{dlock.WithLocalHandOff(0)}
		case 2:
			return []dlock.Option{dlock.WithNotifications(false)}
		case 3:
			return []dlock.Option{dlock.WithFIFO(), dlock.WithLocalHandOff(0)}
		case 4:
			return []dlock.Option{dlock.WithLocalHandOff(5 * time.Millisecond)}
		}
		return nil
	})
}

func chaosAtDistance(t *testing.T, pct, workers int, dur time.Duration, opts func(i int) []dlock.Option) {
	const lease = 300 * time.Millisecond
	tg := uniqueTarget(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var hooks []*chaosHook
	var locks []*dlock.DistributedReentrantLock
	for i, d := range []time.Duration{0, 0, time.Millisecond, 3 * time.Millisecond, 8 * time.Millisecond} {
		h := newChaosHook(lease, pct, seed+uint64(i))
		hooks = append(hooks, h)
		c := srv.Client()
		c.AddHook(distanceHook(d))
		c.AddHook(h)
		g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithDefaultLease(lease)}, opts(i)...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := g.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
			h.quiet()
			c.Close()
		})
		locks = append(locks, mustGen(t, g, "HUNT", tg, lease))
	}
	defer func() {
		for i, h := range hooks {
			t.Logf("process %d: %v", i, h)
		}
	}()
	var store fencedStore
	var ledger spanLedger
	var bad, acquired, gaveUp, longGaveUp, liveIncrements, sets atomic.Int64
	fail := func(format string, args ...any) {
		if bad.Add(1) <= 10 {
			t.Errorf(format, args...)
		}
	}
	stopAt := time.Now().Add(dur)
	var wg sync.WaitGroup
	for p, l := range locks {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(p*10+w)))
				for i := 0; time.Now().Before(stopAt); i++ {
					long := r.IntN(3) == 0
					d := time.Duration(r.IntN(4)) * time.Millisecond
					if long {
						d = 10 * lease
					}
					actx, cancel := context.WithTimeout(context.Background(), d)
					var o *dlock.Owner
					var err error
					if r.IntN(5) == 0 {
						var ok bool
						o, ok, err = l.TryLock(actx)
						if err == nil && !ok {
							cancel()
							continue
						}
					} else {
						o, err = l.Lock(actx)
					}
					cancel()
					if err != nil {
						gaveUp.Add(1)
						if long && errors.Is(err, dlock.ErrNotObtained) {
							longGaveUp.Add(1)
						}
						if !documentedErr(err) || errors.Is(err, dlock.ErrInvalidConfig) {
							fail("Lock: %v", err)
						}
						continue
					}
					acquired.Add(1)
					from := time.Now()
					tok, ok := l.FencingToken(o)
					if !ok && o.Err() == nil {
						fail("FencingToken says not held while the owner context is live")
					}
					v := store.read()
					written := store.write(tok)
					time.Sleep(time.Duration(r.IntN(2)) * time.Millisecond)
					if i%4 == 0 {
						if _, err := l.Lock(o); err == nil {
							if err := l.Unlock(o); err != nil && !documentedErr(err) {
								fail("Unlock of a re-entry: %v", err)
							}
						} else if !documentedErr(err) {
							fail("re-entry: %v", err)
						}
					}
					if written && o.Err() == nil {
						store.set(v + 1)
						sets.Add(1)
					}
					to := time.Now()
					live := o.Err() == nil
					if !written && live {
						fail("token %d refused by the fenced store (a later holder wrote) while its owner context is live", tok)
					}
					if live {
						liveIncrements.Add(1)
						ledger.add(heldSpan{from, to, 1})
					}
					if err := l.Unlock(o); err != nil && !documentedErr(err) {
						fail("Unlock: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, s := range ledger.spans {
		if out := ledger.outAt(s.from); out > 1 {
			fail("%d owners at %v", out, s.from)
		}
	}
	t.Logf("%d acquisitions, %d gave up (%d long waits), counter %d, live increments %d",
		acquired.Load(), gaveUp.Load(), longGaveUp.Load(), store.read(), liveIncrements.Load())
	if store.read() != sets.Load() {
		t.Errorf("the counter mutated under the lock is %d after %d increments: updates were lost", store.read(), sets.Load())
	}
	if n := longGaveUp.Load(); n > 0 {
		t.Errorf("%d Locks waited 10 leases in vain", n)
	}
	for _, h := range hooks {
		h.quiet()
	}
	c := rawClient(t)
	for _, k := range keysWithoutTTL(t, c) {
		if strings.Contains(k, tg) {
			t.Errorf("a key without a time to live: %s", k)
		}
	}
}

// A process farther from Redis than half its lease never takes the lock (README, Limits: a
// Lock returns only with half its lease left) — and says why, once, in a warning naming the
// key, the round trip and the lease, rather than waiting silently until its deadline. The
// Lock waits for the warning and for 3 renewals after it (which say nothing more) however long
// they take: a new client's connection set-up and the scripts' first load take several round
// trips, which asks cut at a lease wait out over seconds, longer on a loaded machine.
func TestLockFartherThanHalfTheLeaseSaysWhy(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	const lease = 400 * time.Millisecond
	g, p := farGen(t, lease, dlock.WithLogger(zap.New(core)))
	p.SetLatency(130 * time.Millisecond) // (a round trip of 260 ms: more than half the lease)
	renewals := sentThrough(p, "renew")
	l := mustGen(t, g, "FARHALF", uniqueTarget(t), lease)
	warned := func() *observer.ObservedLogs { // (a filter is a copy of the logs so far)
		return logs.FilterMessageSnippet("more than half the lease").FilterField(zap.String("key", l.Config().UniqueKey()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err == nil {
			err = fmt.Errorf("Lock succeeded (Unlock: %v)", o.Unlock())
		}
		done <- err
	}()
	after := int64(-1) // renewals when the warning was seen
	waitFor(t, func() bool {
		if after < 0 && warned().Len() > 0 {
			after = renewals.Load()
		}
		return len(done) > 0 || after >= 0 && renewals.Load() >= after+3
	})
	cancel()
	if err := recv(t, done, "Lock once cancelled"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock = %v, want ErrNotObtained", err)
	}
	if n := warned().Len(); n != 1 {
		t.Fatalf("%d warnings that a renewal took more than half the lease, want 1: %v", n, logs.All())
	}
	f := warned().All()[0].ContextMap()
	if rtt, _ := f["round_trip"].(time.Duration); f["lease"] != lease || rtt <= lease/2 {
		t.Fatalf("the warning says %v, want the lease (%v) and a round trip over half of it", f, lease)
	}
	// Its tenures, begun and run out before any goroutine held them, lost no holding: an
	// operator is not told of a lost lock.
	if lost := logs.FilterMessage("dlock: lock lost").All(); len(lost) > 0 {
		t.Fatalf("%d warnings of a lost lock, though nothing held it: %v", len(lost), lost)
	}
}

// A process whose round trip to Redis is longer than the lease never takes the lock: each
// attempt is given back once it had no answer for a lease (the bound on its unheard takes),
// and the next asks anew. Lock's error says so to its caller; the Generator says why at Warn,
// naming the key and the lease — once, not at each attempt.
func TestLockFartherThanTheLeaseSaysWhy(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	const lease = 200 * time.Millisecond
	g, p := farGen(t, lease, dlock.WithLogger(zap.New(core)))
	p.SetLatency(150 * time.Millisecond) // (a round trip of 300 ms: more than the lease)
	asks := sentThrough(p, "lock")
	l := mustGen(t, g, "FARLEASE", uniqueTarget(t), lease)
	warned := func() *observer.ObservedLogs {
		return logs.FilterMessageSnippet("no answer from Redis within its lease").FilterField(zap.String("key", l.Config().UniqueKey()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := lockOnce(ctx, l) // (nil if it took the lock)
	after := int64(-1)       // asks when the warning was seen
	waitFor(t, func() bool {
		if after < 0 && warned().Len() > 0 {
			after = asks.Load()
		}
		return len(done) > 0 || after >= 0 && asks.Load() >= after+3 // (three attempts more, each cut)
	})
	p.SetLatency(0) // (its give-backs and leave go through)
	cancel()
	if err := recv(t, done, "Lock once cancelled"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock = %v, want ErrNotObtained (nil: it took the lock)", err)
	}
	if n := warned().Len(); n != 1 {
		t.Fatalf("%d warnings that an attempt had no answer within its lease, want 1: %v", n, logs.All())
	}
	if f := warned().All()[0].ContextMap(); f["lease"] != lease {
		t.Fatalf("the warning says %v, want the lease (%v)", f, lease)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	o, err := l.Lock(ctx2) // (near again: it takes the lock)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A process whose client's read timeout is shorter than its round trip to Redis gets few
// turns or none (README, Limits): go-redis cuts every request at the timeout. Its callers'
// errors name an i/o timeout, and the Generator says why at Warn, naming the client's read
// timeout and how long the failed request waited — at most once an interval (a minute), and
// again once the interval has passed.
func TestReadTimeoutShorterThanTheRoundTripIsWarned(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	const readTimeout = 100 * time.Millisecond
	g, _, p := proxiedGen(t, func(addr string) *redis.Options { return &redis.Options{Addr: addr, ReadTimeout: readTimeout} },
		dlock.WithDefaultLease(2*time.Second), dlock.WithLogger(zap.New(core)))
	p.SetLatency(readTimeout) // (each way: every reply comes a read timeout too late)
	l := mustGen(t, g, "FARREAD", uniqueTarget(t), 2*time.Second)
	warnings := func() []observer.LoggedEntry { return logs.FilterMessageSnippet("read timeout").All() }
	tryLock := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		o, ok, err := l.TryLock(ctx)
		if o != nil || ok || err == nil {
			t.Fatalf("TryLock through a read timeout shorter than the round trip = %v, %v, %v; want a failure", o, ok, err)
		}
		var pe *dlock.RedisProcessError
		var ne net.Error
		if !errors.As(err, &pe) || !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "i/o timeout") {
			t.Fatalf("TryLock = %v, want a *RedisProcessError naming an i/o timeout", err)
		}
	}
	for range 3 {
		tryLock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if o, err := l.Lock(ctx); err == nil {
		_ = o.Unlock()
		t.Fatal("Lock succeeded through a read timeout shorter than the round trip")
	} else if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "i/o timeout") {
		t.Fatalf("Lock = %v, want ErrNotObtained naming the i/o timeout of its last attempt", err)
	}
	w := warnings()
	if len(w) != 1 {
		t.Fatalf("%d warnings that the read timeout cuts the requests after 4 calls that failed by it, want 1 (once a minute): %v", len(w), logs.All())
	}
	f := w[0].ContextMap()
	if f["read_timeout"] != readTimeout {
		t.Errorf("the warning names read_timeout %v, want the client's %v: %v", f["read_timeout"], readTimeout, f)
	}
	if waited, ok := f["waited"].(time.Duration); !ok || waited < readTimeout {
		t.Errorf("the warning says the request waited %v, want at least the read timeout %v: %v", f["waited"], readTimeout, f)
	}
	if !strings.Contains(w[0].Message, "ReadTimeout") || !strings.Contains(w[0].Message, "round trip") {
		t.Errorf("the warning %q does not say what to do (ReadTimeout beside the round trip)", w[0].Message)
	}

	g.ExpireTimeoutWarn() // (as if the interval had passed)
	tryLock()
	if w := warnings(); len(w) != 2 {
		t.Fatalf("%d warnings that the read timeout cuts the requests once the interval had passed, want 2: %v", len(w), logs.All())
	}
}

// Requests that fail otherwise than by the client's read timeout — a refused connection, a
// caller's deadline that a client with ContextTimeoutEnabled applies to its reads — are not
// taken for it: no warning names the read timeout.
func TestFailuresOtherThanTheReadTimeoutAreNotWarnedAsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opts    func(addr string) *redis.Options
		latency time.Duration // each way, through the proxy
		bound   time.Duration // each call's deadline
	}{
		{"ConnectionRefused", func(string) *redis.Options {
			return &redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 100 * time.Millisecond, DialTimeout: 100 * time.Millisecond, MaxRetries: -1} // (nothing listens there)
		}, 0, 2 * time.Second},
		{"CallersDeadline", func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, ReadTimeout: 10 * time.Second, ContextTimeoutEnabled: true}
		}, 100 * time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zap.WarnLevel)
			g, _, p := proxiedGen(t, tc.opts, dlock.WithDefaultLease(2*time.Second), dlock.WithLogger(zap.New(core)))
			p.SetLatency(tc.latency)
			l := mustGen(t, g, "NOTREAD", uniqueTarget(t), 2*time.Second)
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), tc.bound)
				o, ok, err := l.TryLock(ctx)
				cancel()
				if o != nil || ok || err == nil {
					t.Fatalf("TryLock = %v, %v, %v; want a failure", o, ok, err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.bound)
			defer cancel()
			if o, err := l.Lock(ctx); err == nil {
				_ = o.Unlock()
				t.Fatal("Lock succeeded")
			}
			if w := logs.FilterMessageSnippet("read timeout"); w.Len() != 0 {
				t.Fatalf("%d warnings naming the read timeout for failures that are not its: %v", w.Len(), w.All())
			}
		})
	}
}

// The warning's condition, failure by failure: only a timeout of the network that came after
// the request waited the client's read timeout is that timeout's, whichever kind of client
// the Generator has (its read timeout read from its options, go-redis's default included).
func TestReadTimeoutIsToldApartFromOtherFailures(t *testing.T) {
	const rt = 100 * time.Millisecond
	g := genOn(t, redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: rt}))
	read := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name   string
		err    error
		waited time.Duration
		want   bool
	}{
		{"ReadTimeout", &dlock.RedisProcessError{Op: "lock", Key: "K", Err: os.ErrDeadlineExceeded}, rt, true},
		{"ReadTimeoutOfAConnection", &dlock.RedisProcessError{Op: "renew", Key: "K", Err: read}, 3 * rt, true},
		{"TimeoutBeforeTheReadTimeout", &dlock.RedisProcessError{Op: "lock", Key: "K", Err: read}, rt - time.Millisecond, false},
		{"ContextDeadline", &dlock.RedisProcessError{Op: "lock", Key: "K", Err: context.DeadlineExceeded}, 2 * rt, false},
		{"DialTimeout", &dlock.RedisProcessError{Op: "lock", Key: "K", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}}, 2 * rt, false},
		{"ConnectionRefused", &dlock.RedisProcessError{Op: "lock", Key: "K", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, 2 * rt, false},
		{"ConnectionReset", &dlock.RedisProcessError{Op: "lock", Key: "K", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, 2 * rt, false},
		{"ConnectionClosed", &dlock.RedisProcessError{Op: "lock", Key: "K", Err: io.EOF}, 2 * rt, false},
		{"PoolTimeout", &dlock.RedisProcessError{Op: "lock", Key: "K", Err: redis.ErrPoolTimeout}, 2 * rt, false},
	} {
		if got := g.CutByReadTimeout(tc.err, tc.waited); got != tc.want {
			t.Errorf("%s: %v after %v taken for the read timeout: %v, want %v", tc.name, tc.err, tc.waited, got, tc.want)
		}
	}
	none := genOn(t, redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: -1}))
	if none.CutByReadTimeout(os.ErrDeadlineExceeded, time.Hour) {
		t.Error("a timeout taken for the read timeout of a client that has none")
	}

	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   time.Duration
	}{
		{"Client", redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 250 * time.Millisecond}), 250 * time.Millisecond},
		{"ClientDefault", redis.NewClient(&redis.Options{Addr: srv.Addr}), 5 * time.Second},
		{"ClientNone", redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: -2}), 0},
		{"Cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}, ReadTimeout: 250 * time.Millisecond}), 250 * time.Millisecond},
		{"Failover", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{srv.Addr}, ReadTimeout: 250 * time.Millisecond}), 250 * time.Millisecond},
		{"Ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, ReadTimeout: 250 * time.Millisecond}), 250 * time.Millisecond},
		{"RingDefault", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}}), 5 * time.Second},
	} {
		g, err := dlock.NewGenerator(tc.client, dlock.WithDefaultLease(time.Second))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := g.ReadTimeout(); got != tc.want {
			t.Errorf("%s: the generator reads a read timeout of %v, want %v", tc.name, got, tc.want)
		}
		_ = g.Close(context.Background())
		_ = tc.client.Close()
	}
}

// A read-write lock's take that waited at the Generator's gate until the driver cut it short
// for a renewal due (a read-hold of the process's own) was never sent: nothing is given back
// for it once its writer gave up.
func TestTakeCutAtTheGateForARenewalIsNotGivenBack(t *testing.T) {
	srv.NeedReal(t)
	const typ = "CUTFORRENEWAL"
	tgt := target(t)
	var mu sync.Mutex
	var log [][2]string // (op, locker) of every shared request sent
	block := make(chan struct{})
	var blocking atomic.Bool
	entered := make(chan struct{}, 1)
	hook := fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		args := cmd.Args()
		if processor.ScriptName(args) == "lock" && len(args) > 3 && strings.Contains(fmt.Sprint(args[3]), ".stuck") && blocking.Load() {
			entered <- struct{}{}
			<-block
		}
		if op := sharedArg(args, "op"); op != "" {
			mu.Lock()
			log = append(log, [2]string{op, sharedArg(args, "locker")})
			mu.Unlock()
		}
		return next(ctx, cmd)
	}}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1}) // a gate of one
	defer c.Close()
	c.AddHook(hook)
	const lease = 3 * time.Second // (the gate is closed past its renewal's time, with room for a stall of the machine)
	g := genOn(t, c, dlock.WithDefaultLease(lease))
	rw, err := g.GenRW(typ, tgt)
	if err != nil {
		t.Fatal(err)
	}
	stalls := watchStalls(t)
	r, err := rw.RLock(ctxT(t, 10*time.Second)) // its renewal is due at 75 % of the lease
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(lease * 45 / 100)
	blocking.Store(true)
	ls, _ := g.Gen(typ, tgt+".stuck")
	go func() {
		if o, ok, _ := ls.TryLock(context.Background()); ok {
			_ = ls.Unlock(o)
		}
	}()
	recv(t, entered, "the request that holds the gate")
	blocking.Store(false)
	ctx, cancel := context.WithDeadline(context.Background(), t0.Add(lease*82/100))
	defer cancel()
	if _, err := rw.Lock(ctx); err == nil { // behind its own read-hold: its take waits at the gate
		t.Fatal("the writer took the lock its own process holds to read")
	}
	time.Sleep(40 * time.Millisecond)
	close(block)
	time.Sleep(300 * time.Millisecond)
	// (what is checked is which requests were sent, whether the read-hold outlived a stall or not)
	if err := r.Unlock(); err != nil && !stalls.excused(t, err, t0, lease, "the read-hold's Unlock") {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return g.SharedInUse() == 0 })
	mu.Lock()
	defer mu.Unlock()
	took := map[string]bool{}
	for _, l := range log {
		if l[0] == "take" {
			took[l[1]] = true
		}
	}
	for _, l := range log {
		if l[0] == "release" && !took[l[1]] {
			t.Errorf("a release of %s, whose take was never sent: %v", l[1], log)
		}
	}
}

// An attempt left while its first request still asks a Cluster's servers whether they have
// sharded pub/sub (COMMAND INFO), before any script of the Generator's was sent, may yet send
// its take once the answer comes, on a client that sends under an ended context (a hook that
// detaches it, here: call does not count on the client to honour it). The leave or give-back
// that fails meanwhile at the same question waits for that request (lateRequests) before it
// finds that nothing was sent: it is sent once the take ran and lets the key go, rather than
// leave it held for a lease.
func TestAttemptLeftWhileAskingIsGivenBackOnceItSends(t *testing.T) {
	cl := redistest.NeedCluster(t, 3, 0)
	const lease = 3 * time.Second // (a shared take's request is left after a third of it)
	sharedOp := func(op string) func(args []any) bool {
		return func(args []any) bool {
			n, _ := args[2].(int) // (EVALSHA sha numkeys keys... op ...)
			return processor.ScriptName(args) == "shared" && len(args) > 3+n && args[3+n] == op
		}
	}
	script := func(name string) func(args []any) bool {
		return func(args []any) bool { return processor.ScriptName(args) == name }
	}
	for _, c := range []struct {
		name          string
		tries         int                   // the clean-up's failures before it decides (a leave: one; a shared release: three)
		take, cleanUp func(args []any) bool // their scripts
		lock          func(g *dlock.Generator, tg string) func(context.Context) error
		try           func(g *dlock.Generator, tg string) func(context.Context) (*dlock.Owner, bool, error)
	}{
		{"mutex", 1, script("lock"), script("leave"),
			func(g *dlock.Generator, tg string) func(context.Context) error {
				l := mustGen(t, g, "LEFTASKING", tg, lease)
				return func(ctx context.Context) error { _, err := l.Lock(ctx); return err }
			},
			func(g *dlock.Generator, tg string) func(context.Context) (*dlock.Owner, bool, error) {
				return mustGen(t, g, "LEFTASKING", tg, lease).TryLock
			}},
		{"write side", 3, sharedOp("take"), sharedOp("release"),
			func(g *dlock.Generator, tg string) func(context.Context) error {
				l := rwOf(t, g, tg)
				return func(ctx context.Context) error { _, err := l.Lock(ctx); return err }
			},
			func(g *dlock.Generator, tg string) func(context.Context) (*dlock.Owner, bool, error) {
				return rwOf(t, g, tg).TryLock
			}},
		{"semaphore", 3, sharedOp("take"), sharedOp("release"),
			func(g *dlock.Generator, tg string) func(context.Context) error {
				s := semOf(t, g, tg, 1)
				return func(ctx context.Context) error { _, err := s.Acquire(ctx, 1); return err }
			},
			func(g *dlock.Generator, tg string) func(context.Context) (*dlock.Owner, bool, error) {
				s := semOf(t, g, tg, 1)
				return func(ctx context.Context) (*dlock.Owner, bool, error) { return s.TryAcquire(ctx, 1) }
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			asking, answer, took, cleaned := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
			failed := make(chan struct{}, 16)
			var first, tookOnce, cleanedOnce sync.Once
			var answered, taken atomic.Bool // answer is closed; took is
			stop := make(chan struct{})     // the test is over
			client, clientT := cl.Client(), cl.Client()
			// Until the clean-up decided, every question fails but the first that bears a
			// deadline, the take's, held until then (the notifier's bears none: its failures are
			// retried, and the poller covers meanwhile); then the take goes first.
			client.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				_, bounded := ctx.Deadline()
				ctx = context.WithoutCancel(ctx)
				args := cmd.Args()
				question := len(args) >= 2 && strings.EqualFold(fmt.Sprint(args[0]), "command")
				if answered.Load() && !taken.Load() && !c.take(args) && (question || processor.ScriptName(args) != "") {
					select { // (the clean-up retried at once goes after the take)
					case <-took:
					case <-stop:
					}
				}
				if question && !answered.Load() {
					held := false
					if bounded {
						first.Do(func() { held = true })
					}
					if !held {
						err := errors.New("dial tcp: connect: connection refused (injected)")
						cmd.SetErr(err)
						if bounded {
							select {
							case failed <- struct{}{}:
							default:
							}
						}
						return err
					}
					close(asking)
					select {
					case <-answer:
					case <-stop:
					}
				}
				err := next(ctx, cmd)
				switch {
				case err != nil || !answered.Load():
				case c.take(args):
					taken.Store(true)
					tookOnce.Do(func() { close(took) })
				case c.cleanUp(args):
					cleanedOnce.Do(func() { close(cleaned) })
				}
				return err
			}})
			g, err := dlock.NewGenerator(client, dlock.WithDefaultLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			gt, err := dlock.NewGenerator(clientT, dlock.WithDefaultLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				close(stop)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for _, g := range []*dlock.Generator{g, gt} {
					if err := g.Close(ctx); err != nil {
						t.Errorf("Close: %v", err)
					}
				}
				client.Close()
				clientT.Close()
			})
			tg := uniqueTarget(t)
			ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
			got := make(chan error, 1)
			go func() { got <- c.lock(g, tg)(ctx) }()
			recv(t, asking, "the take's question")
			cancel()
			if err := recv(t, got, "the take"); !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("the take left: %v, want ErrNotObtained", err)
			}
			for range c.tries {
				recv(t, failed, "the clean-up's failure")
			}
			answered.Store(true)
			close(answer)
			recv(t, took, "the take, sent once its question was answered")
			recv(t, cleaned, "the clean-up, sent once the take ran")
			other, octx := c.try(gt, tg), ctxT(t, 30*time.Second)
			waitFor(t, func() bool {
				o, ok, err := other(octx)
				if ok {
					err = o.Unlock()
				}
				if err != nil {
					t.Fatal(err)
				}
				return ok
			})
		})
	}
}

// A waiting process one of whose asks got no reply (Redis ran it; the reply was lost) keeps
// its place in line while its later asks are answered: a lease after the lost one it neither
// gives its attempt back nor opens a new one at the back of the line (only an attempt none of
// whose requests were answered for a lease is given back), and it is granted the key before a
// process that came after it.
func TestWaiterWhoseOneReplyWasLostKeepsItsPlace(t *testing.T) {
	const lease = 1200 * time.Millisecond // (A asks every sixth of it as it waits first in line)
	h := newFaultHook()
	var mu sync.Mutex
	var after []string // the scripts A sent on the key after the lost reply
	lost := make(chan struct{})
	ca := srv.Client()
	ca.AddHook(h)
	ca.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if name := processor.ScriptName(cmd.Args()); name != "" && h.scriptOnKey(cmd) {
			select {
			case <-lost:
				mu.Lock()
				after = append(after, name)
				mu.Unlock()
			default:
			}
		}
		return next(ctx, cmd)
	}})
	ga := genOn(t, ca, dlock.WithDefaultLease(lease))
	gb, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	gc, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	la, _ := ga.Gen("ONELOST", target(t))
	lb, _ := gb.Gen("ONELOST", target(t))
	lc, _ := gc.Gen("ONELOST", target(t))
	ctx := ctxT(t, 60*time.Second)
	held, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.arm(loseReply, key(la))
	first := make(chan string, 2)
	lockThen := func(l *dlock.DistributedReentrantLock, who string) {
		o, err := l.Lock(ctx)
		first <- who // (before the Unlock that lets the other have it)
		if err != nil {
			t.Errorf("%s: %v", who, err)
		} else {
			_ = l.Unlock(o)
		}
	}
	go lockThen(la, "A")
	recv(t, h.fired, "A's ask whose reply is lost")
	close(lost)
	waitFor(t, func() bool { rank, _, ok := ga.Place(key(la)); return ok && rank == 0 })
	go lockThen(lc, "C")
	waitFor(t, func() bool { rank, _, ok := gc.Place(key(lc)); return ok && rank == 1 })
	since := time.Now()
	asked := h.seen.Load()
	waitFor(t, func() bool { return time.Since(since) > 2*lease && h.seen.Load() > asked+3 })
	mu.Lock()
	for _, name := range after {
		if name != "lock" {
			t.Errorf("A sent %v after its lost reply, as its later asks were answered; want asks only", after)
			break
		}
	}
	mu.Unlock()
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	if who := recv(t, first, "the first granted"); who != "A" {
		t.Fatalf("%s was granted the key first; want A, first in line", who)
	}
	recv(t, first, "the second granted")
}

// A read-write lock's writer in line whose takes lost two replies more than a lease apart,
// its takes between them answered, keeps its place as the mutex's waiter does (an attempt is
// given back only when none of its takes was answered for a lease): no release of it is sent,
// and it gets the key before a process that came after it.
func TestFamilyWaiterWhoseRepliesWereLostALeaseApartKeepsItsPlace(t *testing.T) {
	const lease = 1200 * time.Millisecond // (A asks every sixth of it as it waits first in line)
	tg := uniqueTarget(t)
	h := newFaultHook()
	var mu sync.Mutex
	var ops []string // the ops of A's scripts on the lock after the first lost reply
	var lost atomic.Bool
	ca := srv.Client()
	ca.AddHook(h)
	ca.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if op := sharedArg(cmd.Args(), "op"); op != "" && lost.Load() && h.scriptOnKey(cmd) {
			mu.Lock()
			ops = append(ops, op)
			mu.Unlock()
		}
		return next(ctx, cmd)
	}})
	var cAnswered atomic.Int64
	cc := srv.Client()
	cc.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if sharedArg(cmd.Args(), "op") == "take" {
			cAnswered.Add(1)
		}
		return err
	}})
	ga := genOn(t, ca, dlock.WithDefaultLease(lease))
	gb, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	gc := genOn(t, cc, dlock.WithDefaultLease(time.Minute))
	ra, rb, rc := rwOf(t, ga, tg), rwOf(t, gb, tg), rwOf(t, gc, tg)
	held := "{" + ra.Config().UniqueKey() + "}:shared:held"
	ctx := ctxT(t, 60*time.Second)
	ob, err := rb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 2)
	lockThen := func(rw *dlock.RWLock, who string) {
		o, err := rw.Lock(ctx)
		first <- who // (before the Unlock that lets the other have it)
		if err != nil {
			t.Errorf("%s: %v", who, err)
		} else {
			_ = o.Unlock()
		}
	}
	h.arm(loseReply, held)
	go lockThen(ra, "A")
	recv(t, h.fired, "A's take whose reply is lost")
	lost.Store(true)
	go lockThen(rc, "C")
	waitFor(t, func() bool { return cAnswered.Load() > 0 }) // C stands in line behind A
	since, asked := time.Now(), h.seen.Load()
	waitFor(t, func() bool { return time.Since(since) > lease+lease/2 && h.seen.Load() > asked+3 })
	h.arm(loseReply, held)
	recv(t, h.fired, "A's take whose reply is lost, a lease after the first")
	asked = h.seen.Load()
	waitFor(t, func() bool { return h.seen.Load() > asked+2 })
	mu.Lock()
	if slices.ContainsFunc(ops, func(op string) bool { return op != "take" }) {
		t.Errorf("A sent %v after its first lost reply, its takes between the two answered; want takes only", ops)
	}
	mu.Unlock()
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	if who := recv(t, first, "the first served"); who != "A" {
		t.Fatalf("%s got the key first; want A, first in line", who)
	}
	recv(t, first, "the second served")
}
