package dlock_test

// Ports of peers' lock tests onto dlock's API: bsm/redislock (redislock_test.go),
// go-redsync/redsync (mutex_test.go), etcd's client/v3/concurrency Mutex
// (tests/integration/clientv3/concurrency/mutex_test.go and
// tests/integration/clientv3/experimental/recipes/v3_lock_test.go) and Redisson's
// RedissonLockTest and RedissonFairLockTest (translated from Java: a thread is a goroutine, a
// RedissonClient a Generator). Each test names the peer tests it ports. The behaviours are
// the peers'; where dlock documents a different answer the test checks dlock's and says so.
// A Generator stands for a process. No test measures time: the bounds only turn a hang into a
// failure.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// unstallAll lets every stalled request go on and stalls no more.
func (w *wire) unstallAll() {
	w.mu.Lock()
	clear(w.stallN)
	w.mu.Unlock()
	w.unstall()
}

// mustLock locks l or fails t.
func mustLock(t *testing.T, l *dlock.DistributedReentrantLock, ctx context.Context) *dlock.Owner {
	t.Helper()
	o, err := l.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return o
}

// stateOf reads l's State or fails t.
func stateOf(t *testing.T, l *dlock.DistributedReentrantLock) dlock.State {
	t.Helper()
	s, err := l.State(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return s
}

// --- obtain and release ---

// bsm TestClient and TestObtain; redsync TestMutex; Redisson testLockUnlock, testIsLocked,
// testRemainTimeToLive (the lease left, and none once released), etcd testMutexLock: take,
// see it held with about its lease left, release, see it free, take it again.
func TestPeerObtainRelease(t *testing.T) {
	g, _ := newGen(t)
	const lease = 10 * time.Second
	l, _ := g.GenWithLease("PEER", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	if s := stateOf(t, l); s.Held() || s.LeaseLeft != 0 {
		t.Fatalf("before any Lock: %+v", s)
	}
	for round := 0; round < 2; round++ {
		o := mustLock(t, l, ctx)
		s := stateOf(t, l)
		if !s.Held() || !s.Mine || s.LeaseLeft <= lease/2 || s.LeaseLeft > lease {
			t.Fatalf("round %d, held: %+v, want held, mine, lease left in (%v, %v]", round, s, lease/2, lease)
		}
		if err := o.Unlock(); err != nil {
			t.Fatalf("round %d: Unlock: %v", round, err)
		}
		if s := stateOf(t, l); s.Held() || s.Mine || s.LeaseLeft != 0 {
			t.Fatalf("round %d, released: %+v", round, s)
		}
	}
}

// --- obtain while held ---

// bsm TestClient ("try to obtain again": ErrNotObtained), TestObtain_retry_failure and
// TestObtain_retry_context_deadline (ErrNotObtained and context.DeadlineExceeded); redsync
// TestMutexAlreadyLocked and TestValid; Redisson testTryLockNonDelayed and testTryLockWait
// (a timed tryLock gives up; the key is free for the next once released); etcd's "TryLock
// returns ErrLocked" (ExampleMutex_TryLock). dlock's TryLock answers (nil, false, nil) where
// etcd returns ErrLocked and redsync *ErrTaken (documented).
func TestPeerObtainWhileHeld(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.Gen("PEER", target(t))
	l2, _ := g2.Gen("PEER", target(t))
	ctx := ctxT(t, 10*time.Second)
	o := mustLock(t, l1, ctx)
	for name, l := range map[string]*dlock.DistributedReentrantLock{"another process": l2, "another goroutine": l1} {
		if o2, ok, err := l.TryLock(ctx); ok || o2 != nil || err != nil {
			t.Fatalf("%s: TryLock on a held key = (%v, %v, %v), want (nil, false, nil)", name, o2, ok, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		o2, err := l.Lock(wctx)
		cancel()
		if o2 != nil || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: timed Lock on a held key = (%v, %v), want ErrNotObtained and DeadlineExceeded", name, o2, err)
		}
	}
	// The timed-out waiters left nothing: the line empties, and the key is free once released.
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 0 })
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	o2, ok, err := l2.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock after the release = (%v, %v)", ok, err)
	}
	if err := o2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// etcd testMutexTryLock (five sessions TryLock one key: one gets it, the others ErrLocked) and
// bsm TestObtain_concurrent (100 goroutines, exactly one obtains): here five processes with
// four goroutines each, all at once.
func TestPeerTryLockExactlyOne(t *testing.T) {
	gens := make([]*dlock.Generator, 5)
	for i := range gens {
		gens[i], _ = newGen(t, dlock.WithDefaultLease(10*time.Second))
	}
	ctx := ctxT(t, 10*time.Second)
	var wg sync.WaitGroup
	start := make(chan struct{})
	owners := make(chan *dlock.Owner, 20)
	for i := 0; i < 20; i++ {
		l, _ := gens[i%len(gens)].Gen("PEER", target(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o, ok, err := l.TryLock(ctx)
			switch {
			case err != nil:
				t.Errorf("TryLock: %v", err)
			case ok != (o != nil):
				t.Errorf("TryLock = (%v, %v)", o, ok)
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
		t.Fatalf("%d TryLocks got the free key at once, want exactly 1", n)
	}
}

// --- release by a non-owner, double release ---

// bsm TestLock_Release_not_held (a lock not obtained releases with ErrLockNotHeld); redsync's
// unlock of a mutex that does not hold; Redisson testUnlockFail and
// testIsHeldByCurrentThreadOtherThread (another thread's unlock throws
// IllegalMonitorStateException and the lock stays held); etcd TestMutexUnlock (Unlock before
// Lock, and a second Unlock, return ErrLockReleased).
func TestPeerReleaseByNonOwnerAndTwice(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.Gen("PEER", target(t))
	l1b, _ := g1.Gen("PEER", target(t)) // another handle on the key, same process
	l2, _ := g2.Gen("PEER", target(t))
	other, _ := g1.Gen("PEER", target(t)+"-other")
	ctx := ctxT(t, 10*time.Second)
	if err := l1.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock before any Lock = %v, want ErrNotHeld", err)
	}
	o := mustLock(t, l1, ctx)
	oo := mustLock(t, other, ctx)
	for name, try := range map[string]func() error{
		"a context that owns nothing":         func() error { return l1.Unlock(ctx) },
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

// --- re-entrancy ---

// Redisson testReentrancy (tryLock twice, another thread's tryLock fails, unlock twice),
// testGetHoldCount, testRemainTimeToLive2 (lock three times, unlock twice: the lease is still
// there), testIsHeldByCurrentThread; etcd TestMutexSessionRelock (a second Mutex on the same
// session and key does not deadlock: here a second handle re-enters with the owner context).
func TestPeerReentrancy(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	const lease = 10 * time.Second
	l, _ := g1.GenWithLease("PEER", target(t), lease)
	l2nd, _ := g1.GenWithLease("PEER", target(t), lease)
	remote, _ := g2.Gen("PEER", target(t))
	ctx := ctxT(t, 10*time.Second)
	if n := l.HoldCount(ctx); n != 0 {
		t.Fatalf("HoldCount before Lock = %d", n)
	}
	o, ok, err := l.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	o2, ok, err := l.TryLock(o)
	if !ok || err != nil || o2 != o {
		t.Fatalf("re-entrant TryLock = (%v, %v, %v), want the same owner", o2, ok, err)
	}
	o3, err := l2nd.Lock(o) // another handle, same process and key
	if err != nil || l.HoldCount(o3) != 3 {
		t.Fatalf("re-entry through a second handle = %v, hold count %d", err, l.HoldCount(o3))
	}
	for want := 2; want >= 1; want-- {
		if err := l.Unlock(o); err != nil {
			t.Fatal(err)
		}
		if n := l.HoldCount(o); n != want {
			t.Fatalf("HoldCount = %d, want %d", n, want)
		}
		if _, ok, err := l.TryLock(context.Background()); ok || err != nil {
			t.Fatalf("another goroutine's TryLock while held %d times = %v, %v", want, ok, err)
		}
		if _, ok, err := remote.TryLock(ctx); ok || err != nil {
			t.Fatalf("another process's TryLock while held %d times = %v, %v", want, ok, err)
		}
		if s := stateOf(t, remote); !s.Held() || s.Mine || s.LeaseLeft <= lease/2 {
			t.Fatalf("held %d times, from another process: %+v", want, s)
		}
	}
	if o.Err() != nil {
		t.Fatal("the owner context ended before the last Unlock")
	}
	if err := l.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if l.HoldCount(o) != 0 || o.Err() == nil || stateOf(t, remote).Held() {
		t.Fatal("held after the last Unlock")
	}
}

// --- isLocked / isHeldByCurrentThread ---

// Redisson testIsLockedOtherThread, testIsHeldByCurrentThreadOtherThread, testIsLocked,
// testIsHeldByCurrentThread: State.Held is isLocked from anywhere, State.Mine says the holder
// is this process (Generator), and HoldCount with a goroutine's own context is
// isHeldByCurrentThread.
func TestPeerIsLockedIsHeld(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.Gen("PEER", target(t))
	l2, _ := g2.Gen("PEER", target(t))
	ctx := ctxT(t, 10*time.Second)
	o := mustLock(t, l1, ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // another goroutine of the holding process
		defer wg.Done()
		if s, err := l1.State(ctx); err != nil || !s.Held() || !s.Mine {
			t.Errorf("another goroutine of the holder: %+v, %v", s, err)
		}
		if n := l1.HoldCount(ctx); n != 0 {
			t.Errorf("another goroutine's HoldCount = %d", n)
		}
	}()
	wg.Wait()
	if s := stateOf(t, l2); !s.Held() || s.Mine {
		t.Fatalf("another process: %+v, want held, not mine", s)
	}
	if l1.HoldCount(o) != 1 {
		t.Fatal("the owner's HoldCount is not 1")
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*dlock.DistributedReentrantLock{l1, l2} {
		if s := stateOf(t, l); s.Held() || s.Mine {
			t.Fatalf("released: %+v", s)
		}
	}
}

// --- lease and extend ---

// bsm TestLock_Refresh (refresh to a new TTL), redsync TestMutexExtend (the expiry moves
// later), TestTryLock (Extend right after TryLock). Documented difference: a renewal never
// shortens what Redis holds, so bsm's Refresh from an hour to a minute (TTL then a minute) is
// here an Extend whose shorter lease takes effect as the longer one runs down.
func TestPeerExtend(t *testing.T) {
	g, _ := newGen(t)
	l, _ := g.GenWithLease("PEER", target(t), 2*time.Second)
	ctx := ctxT(t, 10*time.Second)
	o, ok, err := l.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	if err := l.Extend(o, time.Hour); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if s := stateOf(t, l); s.LeaseLeft <= 30*time.Minute || s.LeaseLeft > time.Hour {
		t.Fatalf("lease left %v after Extend to 1h", s.LeaseLeft)
	}
	if err := l.Extend(o, time.Minute); err != nil {
		t.Fatalf("Extend to a shorter lease: %v", err)
	}
	if s := stateOf(t, l); s.LeaseLeft <= time.Minute {
		t.Fatalf("lease left %v: an Extend to 1 min shortened the hour Redis held (documented: it does not)", s.LeaseLeft)
	}
	for _, bad := range []time.Duration{0, -time.Second, time.Millisecond, domain.MinLease - time.Millisecond} {
		if err := l.Extend(o, bad); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("Extend(%v) = %v, want ErrInvalidConfig", bad, err)
		}
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend by a non-owner = %v, want ErrNotHeld", err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(o, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after Unlock = %v, want ErrNotHeld", err)
	}
	if s := stateOf(t, l); s.Held() {
		t.Fatalf("Extend after Unlock left the key held: %+v", s)
	}
}

// bsm TestLock_Refresh_expired and TestLock_Refresh_retry_failure (refresh of a lost lock
// fails at once, without retrying), redsync TestMutexExtendExpired and
// TestSetNXOnExtendFailsToAcquireLockWhenKeyIsTaken (the key expired and another took it:
// Extend fails and does not take it back).
func TestPeerExtendAfterTheKeyWasTaken(t *testing.T) {
	g1, c := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.GenWithLease("PEER", target(t), 5*time.Second)
	l2, _ := g2.GenWithLease("PEER", target(t), 5*time.Second)
	ctx := ctxT(t, 10*time.Second)
	o := mustLock(t, l1, ctx)
	c.Del(ctx, key(l1)) // as if it expired unseen
	o2 := mustLock(t, l2, ctx)
	if err := l1.Extend(o, time.Minute); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Extend of a taken key = %v, want ErrLockLost", err)
	}
	if !errors.Is(context.Cause(o), dlock.ErrLockLost) {
		t.Fatalf("owner context after the failed Extend: %s", fmtCause(o))
	}
	if s := stateOf(t, l2); !s.Mine || o2.Err() != nil {
		t.Fatalf("the new holder lost the key to the old one's Extend: %+v", s)
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock of the lost holding = %v, want ErrLockLost", err)
	}
	if err := o2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// --- a stalled holder's lease runs out ---

// Redisson testAutoExpire and testExpire (a holder that stops renewing loses the lock within a
// lease; its unlock then throws), bsm TestLock_Release_expired and TestLock_Release_not_own,
// redsync TestMutexUnlockExpired (an Unlock after the lease ran out fails), Redisson
// RedissonFairLockTest testLeaseTimeout (the waiter gets the expired key). The holder's
// process stalls: every renewal it sends hangs on its way. The waiter in another process gets
// the key once the lease has run out; the holder's owner context has ended with ErrLockLost
// by then, its Unlock says ErrLockLost and leaves the new holder's key alone, and the stalled
// renewals, delivered late, do not touch it either.
func TestPeerStalledHolderExpires(t *testing.T) {
	g1, c1 := newGen(t)
	g2, _ := newGen(t)
	const lease = 300 * time.Millisecond
	l1, _ := g1.GenWithLease("PEER", target(t), lease)
	l2, _ := g2.GenWithLease("PEER", target(t), 5*time.Second)
	ctx := ctxT(t, 20*time.Second)
	w := newWire(t, c1)
	t.Cleanup(w.unstallAll) // before Close, which waits for the stalled calls
	o1 := mustLock(t, l1, ctx)
	w.stall("renew", 1000)
	o2 := mustLock(t, l2, ctx) // waits for the lease to run out
	if o1.Err() == nil || !errors.Is(context.Cause(o1), dlock.ErrLockLost) {
		t.Fatalf("another process holds the key while the stalled holder's owner context is %s", fmtCause(o1))
	}
	checkLost(t, l1, o1)
	w.unstallAll()
	if s := stateOf(t, l2); !s.Mine || o2.Err() != nil || s.LeaseLeft <= 2500*time.Millisecond {
		t.Fatalf("the new holder after the old one's Unlock and late renewals: %+v, owner %s", s, fmtCause(o2))
	}
	if err := o2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// redsync TestMutexUnlockExpired and Redisson testExpire, with the holder's Unlock itself
// stalled on its way until the lease has run out and another process took the key: the
// Unlock reports that its release came too late (a *RedisProcessError, documented: the
// holding was released, not lost, when Unlock was called), and the late release, delivered
// afterwards, leaves the new holder's key alone.
func TestPeerStalledReleaseLeavesTheNextHolder(t *testing.T) {
	g1, c1 := newGen(t)
	g2, _ := newGen(t)
	const lease = 300 * time.Millisecond
	l1, _ := g1.GenWithLease("PEER", target(t), lease)
	l2, _ := g2.GenWithLease("PEER", target(t), 5*time.Second)
	ctx := ctxT(t, 20*time.Second)
	w := newWire(t, c1)
	t.Cleanup(w.unstallAll)
	o1 := mustLock(t, l1, ctx)
	w.stall("release", 1000)
	w.stall("renew", 1000)
	unlocked := make(chan error, 1)
	go func() { unlocked <- o1.Unlock() }()
	o2 := mustLock(t, l2, ctx)
	var pe *dlock.RedisProcessError
	if err := recv(t, unlocked, "the stalled Unlock"); !errors.As(err, &pe) {
		t.Fatalf("Unlock whose release outlived the lease = %v, want a *RedisProcessError", err)
	}
	w.unstallAll()
	waitFor(t, func() bool { return g1.InUse() == 0 })
	if s := stateOf(t, l2); !s.Mine || o2.Err() != nil {
		t.Fatalf("the new holder after the old one's late release: %+v, owner %s", s, fmtCause(o2))
	}
	if err := o2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// bsm TestLock_Release_not_own (the key was handed to another behind the holder's back; its
// Release says not held and leaves the other's key), Redisson testExpire: here the holder has
// not noticed yet when it unlocks.
func TestPeerUnlockAfterAnotherTookTheKey(t *testing.T) {
	g1, c := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.GenWithLease("PEER", target(t), 5*time.Second)
	l2, _ := g2.GenWithLease("PEER", target(t), 5*time.Second)
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
			// Giving up a re-entry sends nothing; the holding's loss shows on the last Unlock.
			if err := o1.Unlock(); err != nil && !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("first Unlock of a re-entered, taken key = %v", err)
			}
		}
		if err := o1.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Unlock after another took the key = %v, want ErrLockLost", err)
		}
		if err := o1.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Unlock again = %v, want ErrLockLost (a lost lock stays lost)", err)
		}
		if s := stateOf(t, l2); !s.Mine || o2.Err() != nil {
			t.Fatalf("the old holder's Unlock released the new holder's key: %+v, owner %s", s, fmtCause(o2))
		}
		if err := o2.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

// --- force unlock ---

// Redisson testForceUnlock (RedissonLockTest and RedissonFairLockTest): after forceUnlock the
// lock is not locked, also seen through a new handle. dlock's ForceRelease names the holder
// (documented), tells a holder in the same process at once and is safe to repeat.
func TestPeerForceRelease(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	l1, _ := g1.Gen("PEER", target(t))
	ctx := ctxT(t, 10*time.Second)
	o := mustLock(t, l1, ctx)
	holder := stateOf(t, l1).Holder
	removed, err := l1.ForceRelease(ctx, holder)
	if !removed || err != nil {
		t.Fatalf("ForceRelease = %v, %v", removed, err)
	}
	fresh, _ := g2.Gen("PEER", target(t))
	for _, l := range []*dlock.DistributedReentrantLock{l1, fresh} {
		if s := stateOf(t, l); s.Held() {
			t.Fatalf("after ForceRelease: %+v", s)
		}
	}
	checkLost(t, l1, o)
	if removed, err := l1.ForceRelease(ctx, holder); removed || err != nil {
		t.Fatalf("ForceRelease again = %v, %v, want false, nil", removed, err)
	}
	o2, ok, err := fresh.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock after ForceRelease = %v, %v", ok, err)
	}
	if removed, err := l1.ForceRelease(ctx, holder); removed || err != nil || o2.Err() != nil {
		t.Fatalf("a late copy of ForceRelease = %v, %v; new owner %s", removed, err, fmtCause(o2))
	}
	if err := o2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// --- cancelled waits leave nothing behind ---

// Redisson testLockIsNotRenewedAfterInterruptedTryLock (a tryLock interrupted after its
// request went out leaves the lock unlocked, with nothing renewing it) and
// testLockUninterruptibly; bsm TestObtain_retry_context_deadline; etcd TestMutexLockSessionExpired
// (a waiter whose session ends stops waiting; the holder's Unlock then works). A Lock cancelled
// while waiting in line leaves the line, and a TryLock cancelled while its request is on the way
// leaves the key free once that request has run; both say ErrNotObtained and the context's error
// (bsm's Obtain that gives up says ErrNotObtained and context.DeadlineExceeded).
func TestPeerCancelledWaitLeavesNothing(t *testing.T) {
	g1, _ := newGen(t)
	g2, c2 := newGen(t)
	g3, _ := newGen(t)
	l1, _ := g1.Gen("PEER", target(t))
	l2, _ := g2.Gen("PEER", target(t))
	l3, _ := g3.Gen("PEER", target(t))
	ctx := ctxT(t, 15*time.Second)
	o := mustLock(t, l1, ctx)

	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		o, err := l2.Lock(wctx)
		if err == nil {
			_ = o.Unlock()
		}
		got <- err
	}()
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 1 })
	cancel()
	if err := recv(t, got, "the cancelled Lock"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v, want ErrNotObtained and context.Canceled", err)
	}
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 0 })
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, l3); s.Held() {
		t.Fatalf("the cancelled waiter got the key: %+v", s)
	}

	// A TryLock cancelled while its request is on its way.
	w := newWire(t, c2)
	t.Cleanup(w.unstall)
	w.stall("lock", 1)
	tctx, tcancel := context.WithCancel(ctx)
	tried := make(chan error, 1)
	go func() {
		o, ok, err := l2.TryLock(tctx)
		if ok {
			_ = o.Unlock()
			err = errors.New("TryLock got the lock after its context was cancelled")
		}
		tried <- err
	}()
	waitFor(t, func() bool { return w.stalledCount() == 1 })
	tcancel()
	// As Lock's, and as a TryLock's whose context had ended before the call: ErrNotObtained
	// and the context's error.
	if err := recv(t, tried, "the cancelled TryLock"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Errorf("TryLock cancelled on its way = %v, want ErrNotObtained and context.Canceled", err)
	}
	if _, _, err := l2.TryLock(tctx); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Errorf("TryLock with a cancelled context = %v, want ErrNotObtained and context.Canceled", err)
	}
	w.unstall()
	waitFor(t, func() bool { return !stateOf(t, l3).Held() && g2.InUse() == 0 })
	o3, ok, err := l3.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock after the cancelled attempts = %v, %v", ok, err)
	}
	if err := o3.Unlock(); err != nil {
		t.Fatal(err)
	}
	settled(t, g2)
}

// --- fairness ---

// Redisson RedissonFairLockTest testConcurrency_MultiInstance_Ordering and testLeaseTimeout
// (waiters are served in the order they arrived), etcd testMutexLock (each waiter gets the lock
// only after the one before released it: "followers did not wait"). Five processes line up one
// after another behind a holder; each is served in turn, in arrival order.
func TestPeerFairOrderAcrossGenerators(t *testing.T) {
	g0, _ := newGen(t)
	l0, _ := g0.GenWithLease("PEER", target(t), 5*time.Second)
	ctx := ctxT(t, 20*time.Second)
	o := mustLock(t, l0, ctx)
	const n = 5
	served := make(chan int, n)
	var inside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		g, _ := newGen(t)
		l, _ := g.GenWithLease("PEER", target(t), 5*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := l.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if inside.Add(1) != 1 {
				t.Error("two owners at once")
			}
			served <- i
			inside.Add(-1)
			if err := o.Unlock(); err != nil {
				t.Error(err)
			}
		}()
		waitFor(t, func() bool { return len(stateOf(t, l0).Waiting) == i+1 })
	}
	select {
	case i := <-served:
		t.Fatalf("waiter %d served while the first holder held", i)
	default:
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(served)
	next := 0
	for i := range served {
		if i != next {
			t.Fatalf("waiter %d served when waiter %d was due (arrival order)", i, next)
		}
		next++
	}
	if next != n {
		t.Fatalf("%d of %d waiters served", next, n)
	}
}

// etcd TestMutexWaitsOnCurrentHolder: the first in line goes away (its session closed) while a
// holder holds; the next waiter must still wait for the holder's Unlock, then get the lock,
// and the one that went away must have returned.
func TestPeerWaiterBehindAVanishedWaiterWaitsForTheHolder(t *testing.T) {
	g1, _ := newGen(t)
	victim, _ := newGen(t)
	g3, _ := newGen(t)
	l1, _ := g1.Gen("PEER", target(t))
	lv, _ := victim.Gen("PEER", target(t))
	l3, _ := g3.Gen("PEER", target(t))
	ctx := ctxT(t, 15*time.Second)
	o := mustLock(t, l1, ctx)
	vdone := make(chan error, 1)
	go func() {
		o, err := lv.Lock(ctx)
		if err == nil {
			_ = o.Unlock()
		}
		vdone <- err
	}()
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 1 })
	newOwner := make(chan *dlock.Owner, 1)
	go func() {
		o, err := l3.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		newOwner <- o
	}()
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 2 })
	if err := victim.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, vdone, "the closed waiter's Lock"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("a waiter whose Generator closed = %v, want ErrClosed", err)
	}
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 1 })
	select {
	case <-newOwner:
		t.Fatal("the new owner got the lock before the holder unlocked")
	default:
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	o3 := recv(t, newOwner, "the next waiter's Lock")
	if o3 == nil {
		t.Fatal("no owner")
	}
	if err := o3.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// Redisson RedissonFairLockTest testFirstThreadDeathTimeoutDrift and
// testAbandonedTimeoutDrift (a waiter that dies while first in line must not hold up the
// ones behind it for long): the first waiting process dies (its connections close, as with
// kill -9); once the holder lets go, the process behind it is served, well before the dead
// one's line entry would expire (a 30 s lease).
func TestPeerDeadFirstWaiterHoldsUpNobody(t *testing.T) {
	const lease = 30 * time.Second
	ctx := ctxT(t, 2*lease)
	raw := rawClient(t)
	gh, _ := newGen(t, dlock.WithDefaultLease(lease))
	// A target of this run's own: the dead process's entry stays in the line (skipped) for its
	// time to live, a lease (documented); the test removes it as it ends.
	name := target(t) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	lh, _ := gh.Gen("PEER", name)
	t.Cleanup(func() { raw.Del(context.Background(), processor.LineKey(lh.Config())) })
	o := mustLock(t, lh, ctx)
	cd := srv.Client() // the dying process's own connections
	gd, err := dlock.NewGenerator(cd, dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gd.Close(cctx) // (its client is closed: it gives back nothing)
	}()
	ld, _ := gd.Gen("PEER", name)
	go func() { _, _ = ld.Lock(ctx) }() // (ends with gd)
	var channel string
	waitFor(t, func() bool { // in line, and listening on its channel
		w := stateOf(t, lh).Waiting
		if len(w) != 1 {
			return false
		}
		channel = processor.ProcessChannel(lh.Config(), w[0])
		n, err := raw.PubSubNumSub(ctx, channel).Result()
		return err == nil && n[channel] > 0
	})
	gb, _ := newGen(t, dlock.WithDefaultLease(lease))
	lb, _ := gb.Gen("PEER", name)
	served := lockOnce(ctx, lb)
	waitFor(t, func() bool { return len(stateOf(t, lh).Waiting) == 2 })
	_ = cd.Close() // the first waiter dies
	waitFor(t, func() bool {
		n, err := raw.PubSubNumSub(ctx, channel).Result()
		return err == nil && n[channel] == 0
	})
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(lease / 3): // (a hang made a failure)
		t.Fatal("the process behind a dead first waiter was not served once the holder let go")
	}
}

// --- no lost updates ---

// Redisson testConcurrency_SingleInstance, testConcurrency_MultiInstance and
// testConcurrencyLoop_MultiInstance, RedissonFairLockTest testMultipleLocks (every lock is
// obtained and released): goroutines in three processes increment a counter kept in Redis
// with a read and a write under the lock; no increment is lost.
func TestPeerCounterUnderTheLock(t *testing.T) {
	gens := make([]*dlock.Generator, 3)
	for i := range gens {
		gens[i], _ = newGen(t)
	}
	rc := rawClient(t)
	counter := "peer-counter:" + target(t)
	t.Cleanup(func() { rc.Del(context.Background(), counter) })
	ctx := ctxT(t, 60*time.Second)
	const goroutines, rounds = 12, 20
	var inside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < goroutines; i++ {
		l, _ := gens[i%len(gens)].Gen("PEER", target(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				err := l.Do(ctx, func(owned context.Context) error {
					if inside.Add(1) != 1 {
						t.Error("two owners at once")
					}
					defer inside.Add(-1)
					v, err := rc.Get(owned, counter).Int()
					if err != nil && err.Error() != "redis: nil" {
						return err
					}
					return rc.Set(owned, counter, strconv.Itoa(v+1), time.Minute).Err()
				})
				if err != nil {
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

// --- different keys ---

// bsm TestLock_ObtainMulti (locks on other keys are independent), Redisson testMultipleLocks:
// holding one key neither blocks nor is released by another key's lock, in one process or
// two.
func TestPeerDifferentKeysIndependent(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	ctx := ctxT(t, 10*time.Second)
	var owners []*dlock.Owner
	var locks []*dlock.DistributedReentrantLock
	for i, g := range []*dlock.Generator{g1, g1, g2, g2} {
		l, _ := g.Gen("PEER", fmt.Sprintf("%s-%d", target(t), i))
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

// --- very short leases ---

// bsm quickObtain with 5 ms and 20 ms TTLs, TestObtain_retry_success (a 20 ms lock);
// redsync's 500 ms expiry. Documented difference: dlock refuses leases under MinLease (30 ms)
// and leases that are not whole milliseconds; a 30 ms lease works: taken, renewed, released
// (on a loaded machine a loss is reported as ErrLockLost, a release that came too late as a
// *RedisProcessError; never silently).
func TestPeerVeryShortLease(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	for _, bad := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, domain.MinLease - time.Millisecond, 30*time.Millisecond + 500*time.Microsecond} {
		if _, err := g1.GenWithLease("PEER", target(t), bad); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("GenWithLease(%v) = %v, want ErrInvalidConfig", bad, err)
		}
	}
	if _, err := dlock.NewGenerator(rawClient(t), dlock.WithDefaultLease(20*time.Millisecond)); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("WithDefaultLease(20ms) = %v, want ErrInvalidConfig", err)
	}
	ctx := ctxT(t, 20*time.Second)
	var wg sync.WaitGroup
	for _, g := range []*dlock.Generator{g1, g2} {
		l, err := g.GenWithLease("PEER", target(t), domain.MinLease)
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
				// A loss, or (a loaded machine) a release whose reply came after the lease,
				// are said; nothing else.
				var pe *dlock.RedisProcessError
				if err := o.Unlock(); err != nil && !errors.Is(err, dlock.ErrLockLost) && !errors.As(err, &pe) {
					t.Errorf("Unlock: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	l, _ := g1.Gen("PEER", target(t))
	waitFor(t, func() bool { return !stateOf(t, l).Held() })
}

// --- the owner context ends with the session ---

// etcd TestMutexLockSessionExpired and its Session's Done (a session that ends — closed or its
// lease lost — ends the mutex's hold): here the Generator's Close ends the owner context with
// ErrClosed and frees the key for others, and a lease lost to an operator's ForceRelease in
// another process ends it with ErrLockLost at the holder's next renewal.
func TestPeerSessionLossEndsTheOwner(t *testing.T) {
	g1, _ := newGen(t)
	g2, _ := newGen(t)
	g3, _ := newGen(t)
	ctx := ctxT(t, 15*time.Second)

	l1, _ := g1.Gen("PEER", target(t))
	l2, _ := g2.Gen("PEER", target(t))
	o := mustLock(t, l1, ctx)
	waiting := lockOnce(ctx, l2)
	if err := g1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-o.Done():
	default:
		t.Fatal("the owner context is live after Close")
	}
	if cause := context.Cause(o); !errors.Is(cause, dlock.ErrClosed) {
		t.Fatalf("owner context's cause after Close = %v, want ErrClosed", cause)
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Unlock after Close = %v, want ErrClosed", err)
	}
	if err := recv(t, waiting, "the other process's Lock after Close"); err != nil {
		t.Fatal(err)
	}

	l3, _ := g3.GenWithLease("PEER", target(t)+"-lost", 300*time.Millisecond)
	l2x, _ := g2.Gen("PEER", target(t)+"-lost")
	o3 := mustLock(t, l3, ctx)
	if removed, err := l2x.ForceRelease(ctx, stateOf(t, l2x).Holder); !removed || err != nil {
		t.Fatalf("ForceRelease = %v, %v", removed, err)
	}
	select {
	case <-o3.Done():
	case <-ctx.Done():
		t.Fatal("the owner context outlived its lease's loss")
	}
	checkLost(t, l3, o3)
}
