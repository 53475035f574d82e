package dlock_test

// Ports of the peers' read-write lock, semaphore and multi-lock tests onto dlock's API:
// Redisson (RedissonReadWriteLockTest, RedissonSemaphoreTest,
// RedissonPermitExpirableSemaphoreTest, RedissonMultiLockTest) and Apache Curator
// (TestInterProcessReadWriteLock, TestInterProcessSemaphore, TestInterProcessMultiMutex). Each
// test names the peer test it ports. Bounds in seconds only turn a hang into a failure; a short
// pause before a check only gives a defect the chance to show.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// peerWithin receives from ch, failing t after d (a hang, not a slow machine).
func peerWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing within %v", what, d)
		var zero T
		return zero
	}
}

// peerNotYet fails t if ch already has a value: what must not have happened yet.
func peerNotYet[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // (only gives a defect the chance to show)
	select {
	case v := <-ch:
		t.Fatalf("%s: %v", what, v)
	default:
	}
}

// peerLineEmpty waits until the shared lock of cfg has nobody in its Redis line and no attempt
// waiting ({B}:shared:line and :want), failing t after 15 s.
func peerLineEmpty(t *testing.T, raw *redis.Client, keys []string) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, func() bool {
		return raw.ZCard(ctx, keys[2]).Val() == 0 && raw.HLen(ctx, keys[3]).Val() == 0
	})
}

// ---- read-write lock ----

// Curator TestInterProcessReadWriteLock.testGetParticipantNodes, Redisson
// RedissonReadWriteLockTest.testMultiRead: readers of several processes (and several
// goroutines in each) hold the read side all at once; a writer cannot get in while they do,
// and gets in once they are gone.
func TestPeerRWManyReadersAcrossGenerators(t *testing.T) {
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	const gens, each = 3, 4
	var in atomic.Int32
	exit := make(chan struct{})
	var wg sync.WaitGroup
	for range gens {
		g, _ := newGen(t)
		l := rwOf(t, g, tg)
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, err := l.RLock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				in.Add(1)
				<-exit
				in.Add(-1)
				if err := o.Unlock(); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	waitFor(t, func() bool { return in.Load() == gens*each })
	gw, _ := newGen(t)
	w := rwOf(t, gw, tg)
	st, err := w.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Readers()) != gens || len(st.Writers()) != 0 {
		t.Fatalf("State with %d processes reading: %d read-holds, %d write-holds", gens, len(st.Readers()), len(st.Writers()))
	}
	if o, ok, err := w.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock of the write side among readers = %v %v %v", o, ok, err)
	}
	close(exit)
	wg.Wait()
	o, err := w.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// Redisson RedissonReadWriteLockTest.testWriteLock and testWriteRead, Curator
// TestInterProcessReadWriteLock.testThatDowngradingRespectsThreads: a writer shuts out the
// readers and writers of every process, its own other goroutines included (a timed RLock of
// another goroutine gives up); the readers waiting for it all get in once it lets go.
func TestPeerRWWriterExcludesEveryone(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	la, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	w, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, try := range map[string]func() (*dlock.Owner, bool, error){
		"another goroutine's TryRLock":   func() (*dlock.Owner, bool, error) { return la.TryRLock(ctx) },
		"another goroutine's TryLock":    func() (*dlock.Owner, bool, error) { return la.TryLock(ctx) },
		"another process's TryRLock":     func() (*dlock.Owner, bool, error) { return lb.TryRLock(ctx) },
		"another process's TryLock":      func() (*dlock.Owner, bool, error) { return lb.TryLock(ctx) },
		"a new handle's TryRLock (same)": func() (*dlock.Owner, bool, error) { return rwOf(t, ga, tg).TryRLock(ctx) },
	} {
		if o, ok, err := try(); ok || err != nil {
			t.Fatalf("%s beside a writer = %v %v %v", name, o, ok, err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	o, err := la.RLock(short)
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) || o != nil {
		t.Fatalf("a timed RLock of another goroutine beside the writer = %v %v, want ErrNotObtained", o, err)
	}
	// readers of both processes wait for the writer, then all read together
	const readers = 10
	var in atomic.Int32
	var writing atomic.Bool
	writing.Store(true)
	exit := make(chan struct{})
	var wg sync.WaitGroup
	for i := range readers {
		l := la
		if i%2 == 1 {
			l = lb
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.RLock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if writing.Load() {
				t.Error("a reader got in while the writer held")
			}
			in.Add(1)
			<-exit
			_ = r.Unlock()
		}()
	}
	time.Sleep(50 * time.Millisecond) // (only gives a defect the chance to show)
	writing.Store(false)
	if err := w.Unlock(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return in.Load() == readers })
	close(exit)
	wg.Wait()
}

// Redisson RedissonReadWriteLockTest.testReadLockLeaseTimeoutDiffThreadsRRW (a writer gets in
// between readers), Curator's fairness of InterProcessReadWriteLock: a writer waiting behind a
// reader holds off the readers that come after it, of its own process and of others; it gets
// the lock before them.
func TestPeerRWWaitingWriterHoldsOffNewReaders(t *testing.T) {
	ga, _ := newGen(t)
	gw, _ := newGen(t)
	gc, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	ra, err := rwOf(t, ga, tg).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	lw := rwOf(t, gw, tg)
	wDone := make(chan error, 1)
	go func() {
		o, err := lw.Lock(ctx)
		if err == nil {
			note("writer")
			err = o.Unlock()
		}
		wDone <- err
	}()
	waitFor(t, func() bool { st, err := lw.State(ctx); return err == nil && len(st.Waiting) == 1 })
	// a new reader of another process, and one of the reader's own process: neither passes
	for name, l := range map[string]*dlock.RWLock{"another process": rwOf(t, gc, tg), "the reader's process": rwOf(t, ga, tg)} {
		if o, ok, err := l.TryRLock(ctx); ok || err != nil {
			t.Fatalf("TryRLock of %s with a writer in line = %v %v %v", name, o, ok, err)
		}
	}
	rDone := make(chan error, 1)
	go func() {
		o, err := rwOf(t, gc, tg).RLock(ctx)
		if err == nil {
			note("reader")
			err = o.Unlock()
		}
		rDone <- err
	}()
	waitFor(t, func() bool { st, err := lw.State(ctx); return err == nil && len(st.Waiting) == 2 })
	if err := ra.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := peerWithin(t, wDone, 15*time.Second, "writer"); err != nil {
		t.Fatal(err)
	}
	if err := peerWithin(t, rDone, 15*time.Second, "reader"); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "writer" {
		t.Fatalf("order %v: a reader that came after a waiting writer got in first", order)
	}
}

// Curator TestInterProcessReadWriteLock.testDowngrading and testContendingDowngrading,
// Redisson RedissonReadWriteLockTest.testWriteReadReentrancy: a writer takes the read side and
// lets the write side go; no writer — of another process, or of the writer's own process,
// already waiting — gets in while that read lasts, nor does a try; another goroutine's read
// does not get in while the write side is still held. Once the read goes, the write side is
// free.
func TestPeerRWDowngradeKeepsExclusion(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	la, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	w, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var reading atomic.Bool
	reading.Store(true)
	writer := func(l *dlock.RWLock) <-chan error {
		done := make(chan error, 1)
		go func() {
			o, err := l.Lock(ctx)
			if err == nil {
				if reading.Load() {
					err = errors.New("a writer got in while the downgraded reader read")
				}
				err = errors.Join(err, o.Unlock())
			}
			done <- err
		}()
		return done
	}
	same := writer(rwOf(t, ga, tg))
	other := writer(lb)
	waitFor(t, func() bool { st, err := lb.State(ctx); return err == nil && len(st.Waiting) == 1 })
	time.Sleep(20 * time.Millisecond) // (the same process's writer queues: only gives a defect the chance to show)
	r, err := la.RLock(w)             // the downgrade
	if err != nil {
		t.Fatalf("downgrade: %v", err)
	}
	if o, ok, err := la.TryRLock(ctx); ok || err != nil {
		t.Fatalf("another goroutine's TryRLock while the write side is held (and read by its owner) = %v %v %v", o, ok, err)
	}
	if err := w.Unlock(); err != nil {
		t.Fatal(err)
	}
	if r.Err() != nil {
		t.Fatalf("the downgraded read ended with the write side: %v", context.Cause(r))
	}
	for name, l := range map[string]*dlock.RWLock{"the same process": rwOf(t, ga, tg), "another process": lb} {
		if o, ok, err := l.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock of %s while the downgraded read lasts = %v %v %v", name, o, ok, err)
		}
	}
	peerNotYet(t, same, "the same process's waiting writer returned while the downgraded read lasts")
	peerNotYet(t, other, "another process's waiting writer returned while the downgraded read lasts")
	st, err := lb.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holds) == 0 {
		t.Fatalf("nothing held in Redis while the downgraded read lasts: %+v", st)
	}
	reading.Store(false)
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []<-chan error{same, other} {
		if err := peerWithin(t, c, 15*time.Second, "waiting writer"); err != nil {
			t.Fatal(err)
		}
	}
	o, ok, err := la.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock once everyone let go = %v %v %v", o, ok, err)
	}
	_ = o.Unlock()
}

// Redisson RedissonReadWriteLockTest.testReentrancy, testHoldCount and testWR: both sides
// re-enter, and a writer reads on under its write (write then read in one owner); each Unlock
// gives up one hold of the innermost side, and the lock is free after the last.
func TestPeerRWReentryAndWriteThenRead(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	l, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	r, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := l.RLock(r); err != nil || r2 != r || l.HoldCount(r) != 2 {
		t.Fatalf("read re-entry: %v %v, HoldCount %d", r2, err, l.HoldCount(r))
	}
	_ = l.Unlock(r)
	if l.HoldCount(r) != 1 || r.Err() != nil {
		t.Fatalf("after one of two read Unlocks: HoldCount %d, %v", l.HoldCount(r), r.Err())
	}
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := r.Unlock(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("a third read Unlock = %v, want ErrNotHeld", err)
	}
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w2, ok, err := l.TryLock(w); !ok || err != nil || w2 != w || l.HoldCount(w) != 2 {
		t.Fatalf("write re-entry by TryLock: %v %v %v, HoldCount %d", w2, ok, err, l.HoldCount(w))
	}
	wr, err := l.RLock(w)
	if err != nil {
		t.Fatalf("read under the write: %v", err)
	}
	if _, ok, _ := lb.TryRLock(ctx); ok {
		t.Fatal("another process read while the writer held (and read)")
	}
	if err := l.Unlock(wr); err != nil { // the read, innermost
		t.Fatal(err)
	}
	if wr.Err() == nil || w.Err() != nil || l.HoldCount(w) != 2 {
		t.Fatalf("after the read's Unlock: read %v, write %v, write HoldCount %d", wr.Err(), w.Err(), l.HoldCount(w))
	}
	_ = l.Unlock(w)
	if _, ok, _ := lb.TryRLock(ctx); ok {
		t.Fatal("another process read while one write hold remained")
	}
	if err := l.Unlock(w); err != nil {
		t.Fatal(err)
	}
	o, ok, err := lb.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("another process's TryLock after the last Unlock = %v %v %v", o, ok, err)
	}
	_ = o.Unlock()
}

// Curator TestInterProcessReadWriteLock.testThatUpgradingIsDisallowed: an owner of only the
// read side asking for the write side is refused (ErrUpgrade, at once, by Lock and TryLock)
// rather than left waiting for itself; its read goes on, and the write side is free once it
// lets go.
func TestPeerRWUpgradeRefused(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	l := rwOf(t, ga, tg)
	r, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := l.Lock(r); !errors.Is(err, dlock.ErrUpgrade) || o != nil {
		t.Fatalf("Lock(reader) = %v %v, want ErrUpgrade", o, err)
	}
	if o, ok, err := l.TryLock(r); !errors.Is(err, dlock.ErrUpgrade) || ok || o != nil {
		t.Fatalf("TryLock(reader) = %v %v %v, want ErrUpgrade", o, ok, err)
	}
	if r.Err() != nil || l.HoldCount(r) != 1 {
		t.Fatalf("the reader after a refused upgrade: %v, HoldCount %d", r.Err(), l.HoldCount(r))
	}
	if o, ok, err := rwOf(t, gb, tg).TryLock(ctx); ok || err != nil {
		t.Fatalf("another process's TryLock beside the reader = %v %v %v", o, ok, err)
	}
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
	o, err := rwOf(t, gb, tg).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = o.Unlock()
}

// Curator TestInterProcessReadWriteLock.testBasic, Redisson
// RedissonReadWriteLockTest.testConcurrency_MultiInstance: processes mixing reads and writes;
// a writer is always alone, readers are sometimes together.
func TestPeerRWBasic(t *testing.T) {
	tg := uniqueTarget(t)
	ctx := ctxT(t, 60*time.Second)
	var readers, writers, mostReaders, bad atomic.Int32
	var wg sync.WaitGroup
	for p := range 3 {
		g, _ := newGen(t)
		l := rwOf(t, g, tg)
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range 20 {
					if (p+i+n)%7 == 0 {
						o, err := l.Lock(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						if writers.Add(1) != 1 || readers.Load() != 0 {
							bad.Add(1)
						}
						time.Sleep(200 * time.Microsecond)
						writers.Add(-1)
						_ = o.Unlock()
						continue
					}
					o, err := l.RLock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					now := readers.Add(1)
					if writers.Load() != 0 {
						bad.Add(1)
					}
					for m := mostReaders.Load(); now > m && !mostReaders.CompareAndSwap(m, now); m = mostReaders.Load() {
					}
					time.Sleep(200 * time.Microsecond)
					readers.Add(-1)
					_ = o.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("a writer overlapped someone %d times", bad.Load())
	}
	if mostReaders.Load() < 2 {
		t.Fatalf("at most %d readers at once: reads were serialised", mostReaders.Load())
	}
}

// ---- semaphore ----

// Curator TestInterProcessSemaphore.testReleaseInChunks and testMaxPerSession, Redisson
// RedissonSemaphoreTest.testConcurrencyLoopMax_MultiInstance: many holders across processes,
// let go a few at a time; never more than k out, and k out whenever enough wait.
func TestPeerSemNeverExceedsKReleasedInChunks(t *testing.T) {
	tg := uniqueTarget(t)
	ctx := ctxT(t, 60*time.Second)
	const k, gens, each = 4, 3, 5
	var cur, bad atomic.Int32
	release := make(chan struct{}, gens*each)
	var wg sync.WaitGroup
	for range gens {
		g, _ := newGen(t)
		s := semOf(t, g, tg, k)
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, err := s.Acquire(ctx, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if cur.Add(1) > k {
					bad.Add(1)
				}
				<-release
				cur.Add(-1)
				if err := o.Unlock(); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	left := gens * each
	for chunk := 1; left > 0; chunk = chunk%3 + 1 {
		want := int32(min(k, left))
		waitFor(t, func() bool { return cur.Load() == want || bad.Load() != 0 })
		if bad.Load() != 0 {
			t.Fatalf("more than %d permits out", k)
		}
		n := min(chunk, left)
		for range n {
			release <- struct{}{}
		}
		left -= n
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("more than %d permits out", k)
	}
}

// Redisson RedissonSemaphoreTest.testBlockingNAcquire and testTryNAcquire,
// RedissonPermitExpirableSemaphoreTest.testBlockingAcquireMany and testTryAcquireMany: n > 1
// permits at once; a try for more than are free fails at once and takes none; asking for more
// than k is refused.
func TestPeerSemAcquireMany(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	sa, sb := semOf(t, ga, tg, 10), semOf(t, gb, tg, 10)
	six, err := sa.Acquire(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok, err := sb.TryAcquire(ctx, 5); ok || err != nil {
		t.Fatalf("TryAcquire(5) with 4 free = %v %v %v", o, ok, err)
	}
	four, ok, err := sb.TryAcquire(ctx, 4)
	if !ok || err != nil {
		t.Fatalf("TryAcquire(4) with 4 free = %v %v %v", four, ok, err)
	}
	st, err := sa.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := int64(0)
	for _, h := range st.Holds {
		held += h.Permits
	}
	if held != 10 {
		t.Fatalf("State after 6 and 4 taken: %d permits held (%+v)", held, st.Holds)
	}
	if o, ok, err := sa.TryAcquire(ctx, 1); ok || err != nil {
		t.Fatalf("TryAcquire(1) with none free = %v %v %v", o, ok, err)
	}
	if _, err := sa.Acquire(ctx, 11); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("Acquire(11) of 10 = %v, want ErrInvalidConfig", err)
	}
	// a waiter for 5 gets them once the 6 come back
	got := make(chan error, 1)
	go func() {
		o, err := sb.Acquire(ctx, 5)
		if err == nil {
			err = o.Unlock()
		}
		got <- err
	}()
	waitFor(t, func() bool { st, err := sa.State(ctx); return err == nil && len(st.Waiting) == 1 })
	if err := six.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := peerWithin(t, got, 15*time.Second, "Acquire(5)"); err != nil {
		t.Fatal(err)
	}
	if err := four.Unlock(); err != nil {
		t.Fatal(err)
	}
	all, ok, err := sa.TryAcquire(ctx, 10)
	if !ok || err != nil {
		t.Fatalf("TryAcquire(10) once all came back = %v %v %v", all, ok, err)
	}
	_ = all.Unlock()
}

// Redisson RedissonPermitExpirableSemaphoreTest.testTryAcquire and testBlockingAcquire,
// RedissonSemaphoreTest.testReleaseAcquire: with no permit free a try returns false at once
// (in the holder's process and in another); a blocking Acquire waits, and gets the permit the
// holder releases; released permits are free again.
func TestPeerSemTryWithNoPermitsAndRelease(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	sa, sb := semOf(t, ga, tg, 1), semOf(t, gb, tg, 1)
	o, err := sa.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*dlock.Semaphore{"the holder's process": sa, "another process": sb} {
		tried := make(chan bool, 1)
		go func() { _, ok, _ := s.TryAcquire(ctx, 1); tried <- ok }()
		if peerWithin(t, tried, 5*time.Second, "TryAcquire of "+name+" with no permit free") {
			t.Fatalf("TryAcquire of %s with no permit free succeeded", name)
		}
	}
	got := make(chan *dlock.Owner, 1)
	go func() {
		o, err := sb.Acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	waitFor(t, func() bool { st, err := sa.State(ctx); return err == nil && len(st.Waiting) == 1 })
	if err := sa.Release(o); err != nil {
		t.Fatal(err)
	}
	ob := peerWithin(t, got, 15*time.Second, "the blocked Acquire")
	if ob == nil {
		t.FailNow()
	}
	if _, ok, _ := sa.TryAcquire(ctx, 1); ok {
		t.Fatal("TryAcquire while the released permit is held by the waiter")
	}
	if err := sb.Release(ob); err != nil {
		t.Fatal(err)
	}
	st, err := sa.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holds) != 0 || len(st.Waiting) != 0 {
		t.Fatalf("State after every permit came back: %+v", st)
	}
	again, ok, err := sa.TryAcquire(ctx, 1)
	if !ok || err != nil {
		t.Fatalf("TryAcquire after release = %v %v %v", again, ok, err)
	}
	_ = again.Unlock()
}

// RedissonPermitExpirableSemaphoreTest.testSetPermits (lowering with holders: permits in use
// stay out, none is handed out until fewer than k are), RedissonSemaphoreTest.testAddPermits
// and testReducePermits.
func TestPeerSemLowerPermitsWithHolders(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	gc, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	sa, sb, sc := semOf(t, ga, tg, 5), semOf(t, gb, tg, 5), semOf(t, gc, tg, 5)
	var held []*dlock.Owner
	for _, s := range []*dlock.Semaphore{sa, sa, sb} {
		o, ok, err := s.TryAcquire(ctx, 1)
		if !ok || err != nil {
			t.Fatalf("TryAcquire of 5 = %v %v %v", o, ok, err)
		}
		held = append(held, o)
	}
	permits := func() int64 {
		st, err := sc.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Permits
	}
	if err := sc.SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if p := permits(); p != 3 {
		t.Fatalf("Permits after SetPermits(3) = %d", p)
	}
	for _, s := range []*dlock.Semaphore{sa, sc} {
		if _, ok, err := s.TryAcquire(ctx, 1); ok || err != nil {
			t.Fatalf("TryAcquire with 3 of 3 out = %v %v", ok, err)
		}
	}
	if err := sc.SetPermits(ctx, 2); err != nil { // below what is out
		t.Fatal(err)
	}
	if p := permits(); p != 2 {
		t.Fatalf("Permits after SetPermits(2) = %d", p)
	}
	for _, o := range held {
		if o.Err() != nil {
			t.Fatalf("a holder lost its permit to a lowered count: %v", context.Cause(o))
		}
	}
	if err := held[2].Unlock(); err != nil { // 2 of 2 out
		t.Fatal(err)
	}
	for _, s := range []*dlock.Semaphore{sa, sb, sc} {
		if _, ok, err := s.TryAcquire(ctx, 1); ok || err != nil {
			t.Fatalf("TryAcquire with 2 of 2 out = %v %v", ok, err)
		}
	}
	if err := held[0].Unlock(); err != nil { // 1 of 2 out
		t.Fatal(err)
	}
	var got *dlock.Owner
	waitFor(t, func() bool {
		o, ok, err := sc.TryAcquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		got = o
		return ok
	})
	if _, ok, _ := sb.TryAcquire(ctx, 1); ok {
		t.Fatal("a third permit out of 2")
	}
	_ = got.Unlock()
	_ = held[1].Unlock()
}

// Curator TestInterProcessSemaphore.testThreadedLeaseIncrease: with the one permit held, a
// goroutine of the holder's own process and one of another process wait; raising k serves
// them both, without the holder letting go.
func TestPeerSemRaisePermitsServesWaiters(t *testing.T) {
	// slow polls: the raise itself must serve them (a holder's waiter asks for more again a
	// sixth of the lease after it last found no room, 10 s here)
	const lease = 60 * time.Second
	ga, _ := newGen(t, dlock.WithDefaultLease(lease))
	gb, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	sa, sb := semOf(t, ga, tg, 1), semOf(t, gb, tg, 1)
	o, err := sa.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(s *dlock.Semaphore) <-chan *dlock.Owner {
		c := make(chan *dlock.Owner, 1)
		go func() {
			o, err := s.Acquire(ctx, 1)
			if err != nil {
				t.Error(err)
			}
			c <- o
		}()
		return c
	}
	same := wait(sa)
	other := wait(sb)
	waitFor(t, func() bool { st, err := sb.State(ctx); return err == nil && len(st.Waiting) >= 1 })
	time.Sleep(20 * time.Millisecond) // (the same process's waiter queues)
	if err := sb.SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]<-chan *dlock.Owner{"the holder's process": same, "another process": other} {
		w := peerWithin(t, c, 5*time.Second, "a waiter of "+name+" after k was raised")
		if w == nil {
			t.FailNow()
		}
		_ = w.Unlock()
	}
	if o.Err() != nil {
		t.Fatalf("the holder after the raise: %v", context.Cause(o))
	}
	_ = o.Unlock()
}

// RedissonSemaphoreTest.testBlockingAcquire, in a process that holds a permit already: its
// goroutine blocked in Acquire gets the permit another process releases. A documented
// difference: such a process does not stand in line at first and no release tells it, so it
// gets the permit at its next ask (within a sixth of the lease; Redisson's waiters are told by
// the release), and a try of a third process meanwhile may take it first.
func TestPeerSemHoldersWaiterGetsAReleasedPermit(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	sa, sb := semOf(t, ga, tg, 2), semOf(t, gb, tg, 2)
	oa, err := sa.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := sb.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Owner, 1)
	go func() {
		o, err := sa.Acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	peerNotYet(t, got, "a third permit of 2")
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	o := peerWithin(t, got, 15*time.Second, "the holder's waiter after another process's release")
	if o == nil {
		t.FailNow()
	}
	_ = o.Unlock()
	_ = oa.Unlock()
}

// RedissonPermitExpirableSemaphoreTest.testExpire and testReleaseExpired, Curator
// TestInterProcessSemaphore.testClientClose: a holder whose process dies (no more renewals)
// gives its permits back when its lease runs out, and its release then reports the loss; a
// holder whose Generator closes gives them back at once.
func TestPeerSemDeadHolderGivesPermitsBack(t *testing.T) {
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	cd := srv.Client()
	gd, err := dlock.NewGenerator(cd, dlock.WithDefaultLease(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := newGen(t)
	sb := semOf(t, gb, tg, 2)
	od, err := semOf(t, gd, tg, 2).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	_ = cd.Close() // the holder's process can no longer renew
	ob, err := sb.Acquire(ctx, 2)
	if err != nil {
		t.Fatalf("after the dead holder's lease: %v", err)
	}
	if err := od.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("the dead holder's release after its lease = %v, want ErrLockLost", err)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = gd.Close(closeCtx)
	cancel()
	// Close gives back what a live process holds
	gc, err := dlock.NewGenerator(srv.Client(), dlock.WithDefaultLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	if _, err := semOf(t, gc, tg, 2).Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		o, err := sb.Acquire(ctx, 1)
		if err == nil {
			err = o.Unlock()
		}
		got <- err
	}()
	waitFor(t, func() bool { st, err := sb.State(ctx); return err == nil && len(st.Waiting) == 1 })
	if err := gc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := peerWithin(t, got, 10*time.Second, "Acquire after the holder's Close (its lease is 30s)"); err != nil {
		t.Fatal(err)
	}
}

// Curator's InterProcessSemaphoreV2 fairness (its waiters queue as sequential nodes), Redisson
// RedissonSemaphoreTest's blocking acquires: processes are served in their order of waiting;
// one asking for fewer permits does not pass one ahead of it that asks for more.
func TestPeerSemFairnessAcrossProcesses(t *testing.T) {
	ga, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	sa := semOf(t, ga, tg, 2)
	first, err := sa.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err := semOf(t, newGenT(t), tg, 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	wait := func(name string, n int) <-chan error {
		s := semOf(t, newGenT(t), tg, 2)
		done := make(chan error, 1)
		go func() {
			o, err := s.Acquire(ctx, n)
			if err == nil {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				err = o.Unlock()
			}
			done <- err
		}()
		return done
	}
	big := wait("two", 2)
	waitFor(t, func() bool { st, err := sa.State(ctx); return err == nil && len(st.Waiting) == 1 })
	small := wait("one", 1)
	waitFor(t, func() bool { st, err := sa.State(ctx); return err == nil && len(st.Waiting) == 2 })
	if err := first.Unlock(); err != nil { // one permit free: it fits the second in line only
		t.Fatal(err)
	}
	peerNotYet(t, small, "the process asking for 1 passed the one ahead asking for 2")
	if err := second.Unlock(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []<-chan error{big, small} {
		if err := peerWithin(t, c, 15*time.Second, "a waiter"); err != nil {
			t.Fatal(err)
		}
	}
	if len(order) != 2 || order[0] != "two" {
		t.Fatalf("served in order %v, want [two one]", order)
	}
}

// newGenT is newGen's Generator alone.
func newGenT(t *testing.T) *dlock.Generator { g, _ := newGen(t); return g }

// RedissonSemaphoreTest.testReleaseWithoutPermits, RedissonPermitExpirableSemaphoreTest
// .testReleaseWithoutPermits: a release by one that holds nothing of the semaphore — a bare
// context, an owner of another lock, the holder's owner given to another process's handle, an
// owner already released — is refused with ErrNotHeld and changes nothing.
func TestPeerSemReleaseByNonOwner(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	sa, sb := semOf(t, ga, tg, 1), semOf(t, gb, tg, 1)
	o, err := sa.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	other, err := semOf(t, ga, tg+"-other", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := rwOf(t, ga, tg).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, owned := range map[string]context.Context{
		"a bare context":                     ctx,
		"an owner of another semaphore":      other,
		"an owner of a read-write lock":      rw,
		"the holder's owner, another handle": nil, // below
	} {
		s := sa
		if owned == nil {
			s, owned = sb, o
		}
		if err := s.Release(owned); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Release with %s = %v, want ErrNotHeld", name, err)
		}
	}
	if o.Err() != nil || sa.HoldCount(o) != 1 {
		t.Fatalf("the holder after refused releases: %v, HoldCount %d", o.Err(), sa.HoldCount(o))
	}
	if _, ok, _ := sb.TryAcquire(ctx, 1); ok {
		t.Fatal("a permit came free by a refused release")
	}
	if err := sa.Release(o); err != nil {
		t.Fatal(err)
	}
	if err := sa.Release(o); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("a second release = %v, want ErrNotHeld", err)
	}
	_ = other.Unlock()
	_ = rw.Unlock()
}

// ---- multi-lock ----

// multiParts returns a mutex, a semaphore's permit (of k) and a read-write lock's write side
// of g, in that key order, named by tg.
func multiParts(t *testing.T, g *dlock.Generator, tg string, k int) (*dlock.DistributedReentrantLock, *dlock.Semaphore, *dlock.RWLock) {
	t.Helper()
	mu := mustGen(t, g, "PMA", tg, 5*time.Second)
	sem, err := g.GenSemaphore("PMB", tg, k)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := g.GenRW("PMC", tg)
	if err != nil {
		t.Fatal(err)
	}
	return mu, sem, rw
}

// Redisson RedissonMultiLockTest.test and testWaitAndLeaseTimeouts, Curator
// TestInterProcessMultiMutex.testSomeLocksFailToLock: with the last part held elsewhere a
// TryLock over parts of every kind is false and leaves nothing held; of many goroutines of two
// processes trying at once exactly one gets them all.
func TestPeerMultiTryLockAllOrNothing(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu, sem, rw := multiParts(t, ga, tg, 2)
	m, err := ga.MultiOf(rw.WriteSide(), sem.Permits(1), mu)
	if err != nil {
		t.Fatal(err)
	}
	_, _, rwB := multiParts(t, gb, tg, 2)
	reader, err := rwB.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok, err := m.TryLock(ctx); ok || err != nil || o != nil {
		t.Fatalf("TryLock with a part held elsewhere = %v %v %v", o, ok, err)
	}
	muB, semB, _ := multiParts(t, gb, tg, 2)
	if o, ok, err := muB.TryLock(ctx); !ok || err != nil {
		t.Fatalf("the mutex after a failed TryLock: %v %v %v", o, ok, err)
	} else {
		_ = o.Unlock()
	}
	if st, err := semB.State(ctx); err != nil || len(st.Holds) != 0 {
		t.Fatalf("the semaphore after a failed TryLock: %+v %v", st, err)
	}
	if err := reader.Unlock(); err != nil {
		t.Fatal(err)
	}
	// many try at once, nobody lets go: one wins
	var wins atomic.Int32
	var owners sync.Map
	var wg sync.WaitGroup
	for i := range 10 {
		g := ga
		if i%2 == 1 {
			g = gb
		}
		mu, sem, rw := multiParts(t, g, tg, 1)
		mi, err := g.MultiOf(mu, sem.Permits(1), rw.WriteSide())
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, ok, err := mi.TryLock(ctx)
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
				owners.Store(o, mi)
			}
		}()
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of 10 TryLocks got every part", n)
	}
	owners.Range(func(o, mi any) bool {
		if err := mi.(*dlock.MultiLock).Unlock(o.(*dlock.Owner)); err != nil {
			t.Error(err)
		}
		return true
	})
}

// Redisson RedissonMultiLockTest.testWaitAndLeaseTimeouts (tryLock with a wait) and
// testMultiThreads, Curator TestInterProcessMultiMutex's timed acquire: a Lock whose deadline
// passes while a part is held elsewhere gives up holding nothing and standing in no line, so
// that once the part comes free another MultiLock gets everything at once.
func TestPeerMultiLockDeadlineLeavesNothing(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	gc, _ := newGen(t)
	raw := rawClient(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu, sem, rw := multiParts(t, ga, tg, 1)
	m, err := ga.MultiOf(mu, sem.Permits(1), rw.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	_, _, rwB := multiParts(t, gb, tg, 1)
	held, err := rwB.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	o, err := m.Lock(short)
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) || o != nil {
		t.Fatalf("Lock past its deadline = %v %v, want ErrNotObtained", o, err)
	}
	peerLineEmpty(t, raw, processor.SharedKeys(rw.Config()))
	muC, semC, rwC := multiParts(t, gc, tg, 1)
	if o, ok, err := muC.TryLock(ctx); !ok || err != nil {
		t.Fatalf("the mutex after the MultiLock gave up: %v %v %v", o, ok, err)
	} else {
		_ = o.Unlock()
	}
	if o, ok, err := semC.TryAcquire(ctx, 1); !ok || err != nil {
		t.Fatalf("the semaphore after the MultiLock gave up: %v %v %v", o, ok, err)
	} else {
		_ = o.Unlock()
	}
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	mc, err := gc.MultiOf(muC, semC.Permits(1), rwC.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	oc, ok, err := mc.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("another MultiLock's TryLock once the part came free = %v %v %v", oc, ok, err)
	}
	if err := mc.Unlock(oc); err != nil {
		t.Fatal(err)
	}
}

// Redisson RedissonMultiLockTest.testLockUnlock, Curator
// TestInterProcessMultiMutex.testSomeReleasesFail: Unlock releases every part, also when one
// part's release fails (the part was lost): that failure is returned, the others are free.
func TestPeerMultiUnlockReleasesEveryPart(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu, sem, rw := multiParts(t, ga, tg, 1)
	m, err := ga.MultiOf(mu, sem.Permits(1), rw.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	muB, semB, rwB := multiParts(t, gb, tg, 1)
	free := func(when string) {
		t.Helper()
		if o, ok, err := muB.TryLock(ctx); !ok || err != nil {
			t.Fatalf("%s: the mutex is not free: %v %v", when, ok, err)
		} else {
			_ = o.Unlock()
		}
		if o, ok, err := semB.TryAcquire(ctx, 1); !ok || err != nil {
			t.Fatalf("%s: the permit is not free: %v %v", when, ok, err)
		} else {
			_ = o.Unlock()
		}
		if o, ok, err := rwB.TryLock(ctx); !ok || err != nil {
			t.Fatalf("%s: the write side is not free: %v %v", when, ok, err)
		} else {
			_ = o.Unlock()
		}
	}
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if o.Err() == nil {
		t.Fatal("the MultiLock's owner lives on after Unlock")
	}
	free("after Unlock")
	// one part lost: Unlock says so and frees the others
	o, err = m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sem.State(ctx)
	if err != nil || len(st.Holds) != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	if ok, err := semB.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
		t.Fatalf("ForceRelease = %v %v", ok, err)
	}
	if err := m.Unlock(o); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock with a part lost = %v, want ErrLockLost", err)
	}
	free("after an Unlock with a part lost")
}

// Redisson RedissonMultiLockTest over locks of several kinds (RedissonMultiLock takes any
// RLock, read locks included), Curator InterProcessMultiLock over any InterProcessLock: two
// MultiLocks of read sides and permits hold together; one with a write side waits for them;
// a key named twice is taken once, and one read-write lock's two sides are refused.
func TestPeerMultiMixedKindsAndDuplicates(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	gc, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	reading := func(g *dlock.Generator) *dlock.MultiLock {
		_, sem, rw := multiParts(t, g, tg, 3)
		m, err := g.MultiOf(rw.ReadSide(), sem.Permits(1))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb := reading(ga), reading(gb)
	oa, err := ma.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ob, ok, err := mb.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("a second reading MultiLock = %v %v %v", ob, ok, err)
	}
	_, semC, rwC := multiParts(t, gc, tg, 3)
	mc, err := gc.MultiOf(semC.Permits(1), rwC.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	if o, ok, err := mc.TryLock(ctx); ok || err != nil {
		t.Fatalf("a writing MultiLock beside readers = %v %v %v", o, ok, err)
	}
	if st, err := semC.State(ctx); err != nil || len(st.Holds) != 2 {
		t.Fatalf("the semaphore after the writing MultiLock failed: %+v %v (it kept a permit?)", st, err)
	}
	wrote := make(chan error, 1)
	go func() { wrote <- mc.Do(ctx, func(context.Context) error { return nil }) }()
	waitFor(t, func() bool { st, err := rwC.State(ctx); return err == nil && len(st.Waiting) == 1 })
	_ = ma.Unlock(oa)
	_ = mb.Unlock(ob)
	if err := peerWithin(t, wrote, 15*time.Second, "the writing MultiLock"); err != nil {
		t.Fatal(err)
	}
	// duplicates
	mu := mustGen(t, ga, "PMA", tg, 5*time.Second)
	twice, err := ga.Multi(mu, mu, mustGen(t, ga, "PMA", tg, 5*time.Second))
	if err != nil || len(twice.Parts()) != 1 {
		t.Fatalf("one key named three times: %v, parts %v", err, twice)
	}
	o, err := twice.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := mu.HoldCount(o); n != 1 {
		t.Fatalf("HoldCount of a key named three times = %d, want 1", n)
	}
	if err := twice.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if o2, ok, _ := mustGen(t, gb, "PMA", tg, 5*time.Second).TryLock(ctx); !ok {
		t.Fatal("a key named three times is still held after one Unlock")
	} else {
		_ = o2.Unlock()
	}
	_, _, rw := multiParts(t, ga, tg, 3)
	if _, err := ga.MultiOf(rw.WriteSide(), rw.ReadSide()); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("both sides of one read-write lock: %v, want ErrInvalidConfig", err)
	}
}

// ---- cancellation ----

// Curator TestInterProcessSemaphore.testInterruptAcquire (and testNoOrphanedNodes), Redisson's
// acquire interrupted: a wait for the read side, the write side, permits, or a MultiLock's
// shared part, ended by its context, leaves nothing in the Redis line; once the holder lets go
// a try of another process gets in at once.
func TestPeerFamilyCancelledWaitLeavesNothing(t *testing.T) {
	for _, c := range []struct {
		name string
		hold func(g *dlock.Generator, tg string) (context.Context, func() error, error)
		wait func(g *dlock.Generator, tg string, ctx context.Context) error
		try  func(g *dlock.Generator, tg string, ctx context.Context) (bool, error)
		keys func(g *dlock.Generator, tg string) []string
	}{
		{
			name: "read side",
			hold: func(g *dlock.Generator, tg string) (context.Context, func() error, error) {
				o, err := rwOf(t, g, tg).Lock(context.Background())
				return o, func() error { return o.Unlock() }, err
			},
			wait: func(g *dlock.Generator, tg string, ctx context.Context) error {
				_, err := rwOf(t, g, tg).RLock(ctx)
				return err
			},
			try: func(g *dlock.Generator, tg string, ctx context.Context) (bool, error) {
				o, ok, err := rwOf(t, g, tg).TryRLock(ctx)
				if ok {
					_ = o.Unlock()
				}
				return ok, err
			},
			keys: func(g *dlock.Generator, tg string) []string { return processor.SharedKeys(rwOf(t, g, tg).Config()) },
		},
		{
			name: "write side",
			hold: func(g *dlock.Generator, tg string) (context.Context, func() error, error) {
				o, err := rwOf(t, g, tg).RLock(context.Background())
				return o, func() error { return o.Unlock() }, err
			},
			wait: func(g *dlock.Generator, tg string, ctx context.Context) error {
				_, err := rwOf(t, g, tg).Lock(ctx)
				return err
			},
			try: func(g *dlock.Generator, tg string, ctx context.Context) (bool, error) {
				o, ok, err := rwOf(t, g, tg).TryLock(ctx)
				if ok {
					_ = o.Unlock()
				}
				return ok, err
			},
			keys: func(g *dlock.Generator, tg string) []string { return processor.SharedKeys(rwOf(t, g, tg).Config()) },
		},
		{
			name: "permits",
			hold: func(g *dlock.Generator, tg string) (context.Context, func() error, error) {
				o, err := semOf(t, g, tg, 2).Acquire(context.Background(), 1)
				return o, func() error { return o.Unlock() }, err
			},
			wait: func(g *dlock.Generator, tg string, ctx context.Context) error {
				_, err := semOf(t, g, tg, 2).Acquire(ctx, 2)
				return err
			},
			try: func(g *dlock.Generator, tg string, ctx context.Context) (bool, error) {
				o, ok, err := semOf(t, g, tg, 2).TryAcquire(ctx, 2)
				if ok {
					_ = o.Unlock()
				}
				return ok, err
			},
			keys: func(g *dlock.Generator, tg string) []string { return processor.SharedKeys(semOf(t, g, tg, 2).Config()) },
		},
		{
			name: "MultiLock",
			hold: func(g *dlock.Generator, tg string) (context.Context, func() error, error) {
				_, _, rw := multiParts(t, g, tg, 1)
				o, err := rw.RLock(context.Background())
				return o, func() error { return o.Unlock() }, err
			},
			wait: func(g *dlock.Generator, tg string, ctx context.Context) error {
				mu, sem, rw := multiParts(t, g, tg, 1)
				m, err := g.MultiOf(mu, sem.Permits(1), rw.WriteSide())
				if err != nil {
					return err
				}
				_, err = m.Lock(ctx)
				return err
			},
			try: func(g *dlock.Generator, tg string, ctx context.Context) (bool, error) {
				mu, sem, rw := multiParts(t, g, tg, 1)
				m, err := g.MultiOf(mu, sem.Permits(1), rw.WriteSide())
				if err != nil {
					return false, err
				}
				o, ok, err := m.TryLock(ctx)
				if ok {
					_ = m.Unlock(o)
				}
				return ok, err
			},
			keys: func(g *dlock.Generator, tg string) []string {
				_, _, rw := multiParts(t, g, tg, 1)
				return processor.SharedKeys(rw.Config())
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			const lease = 20 * time.Second // (a left entry would outlive the test's bounds)
			gh, _ := newGen(t, dlock.WithDefaultLease(lease))
			gw, _ := newGen(t, dlock.WithDefaultLease(lease))
			gt, _ := newGen(t, dlock.WithDefaultLease(lease))
			raw := rawClient(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			held, unlock, err := c.hold(gh, tg)
			if err != nil {
				t.Fatal(err)
			}
			keys := c.keys(gw, tg)
			wctx, cancel := context.WithCancel(ctx)
			waited := make(chan error, 1)
			for range 3 { // goroutines of one process wait together
				go func() { waited <- c.wait(gw, tg, wctx) }()
			}
			waitFor(t, func() bool { return raw.ZCard(ctx, keys[2]).Val() == 1 })
			cancel()
			for range 3 {
				if err := peerWithin(t, waited, 15*time.Second, "the cancelled wait"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
					t.Fatalf("a cancelled wait = %v, want ErrNotObtained and context.Canceled", err)
				}
			}
			peerLineEmpty(t, raw, keys)
			if held.Err() != nil {
				t.Fatalf("the holder after the wait was cancelled: %v", context.Cause(held))
			}
			if err := unlock(); err != nil {
				t.Fatal(err)
			}
			ok, err := c.try(gt, tg, ctx)
			if !ok || err != nil {
				t.Fatalf("another process's try once the holder let go = %v %v: the cancelled wait left something behind (line %v, want %v, held %v)",
					ok, err, raw.ZRange(ctx, keys[2], 0, -1).Val(), raw.HGetAll(ctx, keys[3]).Val(), raw.HGetAll(ctx, keys[0]).Val())
			}
		})
	}
}

// Curator TestInterProcessReadWriteLock.testThatUpgradingIsDisallowed's timed write acquire,
// made by another goroutine of the reader's process, and TestInterProcessSemaphore
// .testInterruptAcquire made by a holder's own goroutine: the wait gives up and leaves nothing
// behind — the process's own readers (or permits) go on being lent, and another process gets
// in as soon as the holder lets go.
func TestPeerCancelledWaitBesideOwnHolding(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	raw := rawClient(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	la, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	r, err := la.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if o, err := la.Lock(short); !errors.Is(err, dlock.ErrNotObtained) || o != nil {
		t.Fatalf("a timed Lock beside the process's own reader = %v %v", o, err)
	}
	cancel()
	peerLineEmpty(t, raw, processor.SharedKeys(la.Config()))
	r2, err := la.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rb, ok, err := lb.TryRLock(ctx)
	if !ok || err != nil {
		t.Fatalf("another process's TryRLock after the writer gave up = %v %v %v", rb, ok, err)
	}
	_ = rb.Unlock()
	_ = r2.Unlock()
	_ = r.Unlock()
	if o, ok, err := lb.TryLock(ctx); !ok || err != nil {
		t.Fatalf("another process's TryLock once the readers let go = %v %v %v", o, ok, err)
	} else {
		_ = o.Unlock()
	}

	sa, sb := semOf(t, ga, tg, 2), semOf(t, gb, tg, 2)
	o, err := sa.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, 500*time.Millisecond) // (past growPatience: in line)
	if o2, err := sa.Acquire(short, 2); !errors.Is(err, dlock.ErrNotObtained) || o2 != nil {
		t.Fatalf("a timed Acquire(2) beside the process's own permit = %v %v", o2, err)
	}
	cancel()
	peerLineEmpty(t, raw, processor.SharedKeys(sa.Config()))
	ob, ok, err := sb.TryAcquire(ctx, 1)
	if !ok || err != nil {
		t.Fatalf("another process's TryAcquire(1) after the wait gave up = %v %v %v", ob, ok, err)
	}
	_ = ob.Unlock()
	_ = o.Unlock()
	if all, ok, err := sb.TryAcquire(ctx, 2); !ok || err != nil {
		t.Fatalf("TryAcquire(2) once all let go = %v %v %v", all, ok, err)
	} else {
		_ = all.Unlock()
	}
}
