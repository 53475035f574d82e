package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/processor"
)

// lockSide takes the write side of l if write, else the read side.
func lockSide(ctx context.Context, l *dlock.RWLock, write bool) (*dlock.Owner, error) {
	if write {
		return l.Lock(ctx)
	}
	return l.RLock(ctx)
}

func rwOf(t testing.TB, g *dlock.Generator, tg string) *dlock.RWLock {
	t.Helper()
	l, err := g.GenRW("RW", tg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// rwPair returns a context bounded by 30 s and one read-write lock, unique to the test, as two
// processes make it (their Generators made with opts).
func rwPair(t *testing.T, opts ...dlock.Option) (context.Context, *dlock.RWLock, *dlock.RWLock) {
	ga, _ := newGen(t, opts...)
	gb, _ := newGen(t, opts...)
	tg := uniqueTarget(t)
	return ctxT(t, 30*time.Second), rwOf(t, ga, tg), rwOf(t, gb, tg)
}

// Readers of different processes hold the read side together; a writer waits for them.
func TestRWReadersShareWritersWait(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	gw, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	ra, err := rwOf(t, ga, tg).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := rwOf(t, gb, tg).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := rwOf(t, ga, tg).State(ctx)
	if err != nil || len(st.Readers()) != 2 || len(st.Writers()) != 0 {
		t.Fatalf("state with two readers: %+v %v", st, err)
	}
	w := rwOf(t, gw, tg)
	if o, ok, err := w.TryLock(ctx); ok || err != nil || o != nil {
		t.Fatalf("TryLock beside readers = %v %v %v", o, ok, err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := w.Lock(short); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock beside readers: %v", err)
	}
	got := make(chan *dlock.Owner, 1)
	go func() {
		o, err := w.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	if err := ra.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("the writer got in beside a reader")
	case <-time.After(100 * time.Millisecond):
	}
	if err := rb.Unlock(); err != nil {
		t.Fatal(err)
	}
	ow := recv(t, got, "the writer")
	if o, ok, err := rwOf(t, ga, tg).TryRLock(ctx); ok || err != nil || o != nil {
		t.Fatalf("TryRLock beside a writer = %v %v %v", o, ok, err)
	}
	if tok, ok := w.FencingToken(ow); !ok || tok == 0 {
		t.Fatalf("writer's token %d %v", tok, ok)
	}
	if err := ow.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := ow.Unlock(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v", err)
	}
}

// Once a writer waits in line, readers that come after it — of other processes, and of the
// reader's own — wait behind it, even while the read side is held. Ports Redisson's
// RedissonReadWriteLockTest.testReadLockLeaseTimeoutDiffThreadsRRW and Curator's fairness of
// InterProcessReadWriteLock.
func TestRWWriterInLineHoldsOffNewReaders(t *testing.T) {
	ga, _ := newGen(t)
	gw, _ := newGen(t)
	gc, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	ra, err := rwOf(t, ga, tg).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	wDone := make(chan struct{})
	go func() {
		defer close(wDone)
		o, err := rwOf(t, gw, tg).Lock(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		note("writer")
		time.Sleep(50 * time.Millisecond)
		_ = o.Unlock()
	}()
	waitFor(t, func() bool {
		st, err := rwOf(t, ga, tg).State(ctx)
		return err == nil && len(st.Waiting) == 1
	})
	// (The reader's process lends its read-hold until the writer's message reaches it.)
	waitFor(t, func() bool { return ga.SharedWanted(rwOf(t, ga, tg).Config().UniqueKey()) })
	for name, l := range map[string]*dlock.RWLock{"another process": rwOf(t, gc, tg), "the reader's process": rwOf(t, ga, tg)} {
		if o, ok, err := l.TryRLock(ctx); ok || err != nil {
			t.Fatalf("TryRLock of %s with a writer in line = %v %v %v", name, o, ok, err)
		}
	}
	rDone := make(chan struct{})
	go func() {
		defer close(rDone)
		o, err := rwOf(t, gc, tg).RLock(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		note("reader")
		_ = o.Unlock()
	}()
	waitFor(t, func() bool {
		st, err := rwOf(t, ga, tg).State(ctx)
		return err == nil && len(st.Waiting) == 2
	})
	if err := ra.Unlock(); err != nil {
		t.Fatal(err)
	}
	<-wDone
	<-rDone
	if len(order) != 2 || order[0] != "writer" {
		t.Fatalf("order %v: the reader that came after a waiting writer got in first", order)
	}
}

// Re-entry on both sides, a downgrade that keeps reading while others' writers wait, and the
// upgrade that is refused (ErrUpgrade, at once, by Lock and TryLock) rather than left waiting
// for itself; the reader goes on, and the write side is free once it lets go. Ports Curator's
// TestInterProcessReadWriteLock.testThatUpgradingIsDisallowed.
func TestRWReentryDowngradeAndUpgrade(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	l := rwOf(t, ga, tg)
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w2, err := l.Lock(w); err != nil || w2 != w {
		t.Fatalf("write re-entry: %v %v", w2, err)
	}
	if n := l.HoldCount(w); n != 2 {
		t.Fatalf("HoldCount after a re-entry = %d, want 2", n)
	}
	r, err := l.RLock(w)
	if err != nil {
		t.Fatalf("downgrade: %v", err)
	}
	if n := l.HoldCount(r); n != 1 {
		t.Fatalf("HoldCount of the downgraded reader = %d, want 1", n)
	}
	if _, err := l.Lock(r); err != nil {
		t.Fatalf("the write owner's read context still carries the write side: %v", err)
	}
	_ = l.Unlock(w) // the write re-entry above
	_ = l.Unlock(w)
	if err := w.Unlock(); err != nil {
		t.Fatal(err)
	}
	if w.Err() == nil || r.Err() != nil {
		t.Fatalf("after the write side's last Unlock: write %v, read %v", w.Err(), r.Err())
	}
	if n := l.HoldCount(ctx); n != 0 {
		t.Fatalf("HoldCount of a context that owns nothing = %d", n)
	}
	// another process's reader gets in beside the downgraded reader; its writer does not
	other := rwOf(t, gb, tg)
	ro, err := other.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := other.TryLock(ctx); ok {
		t.Fatal("a writer beside the downgraded reader")
	}
	_ = ro.Unlock()
	if _, err := l.Lock(r); !errors.Is(err, dlock.ErrUpgrade) {
		t.Fatalf("the downgraded reader asked for the write side again: %v, want ErrUpgrade", err)
	}
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
	rr, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := l.Lock(rr); !errors.Is(err, dlock.ErrUpgrade) || o != nil {
		t.Fatalf("upgrade: %v, want ErrUpgrade", err)
	}
	if o, ok, err := l.TryLock(rr); !errors.Is(err, dlock.ErrUpgrade) || ok || o != nil {
		t.Fatalf("TryLock(reader) = %v %v %v, want ErrUpgrade", o, ok, err)
	}
	if rr.Err() != nil || l.HoldCount(rr) != 1 {
		t.Fatalf("the reader after a refused upgrade: %v, HoldCount %d", rr.Err(), l.HoldCount(rr))
	}
	if o, ok, err := other.TryLock(ctx); ok || err != nil {
		t.Fatalf("another process's TryLock beside the reader = %v %v %v", o, ok, err)
	}
	if err := rr.Unlock(); err != nil {
		t.Fatal(err)
	}
	o, err := other.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = o.Unlock()
}

// Many processes, readers and writers: a writer never overlaps anyone, readers are sometimes
// together, and the writers' fencing tokens increase. Ports Curator's
// TestInterProcessReadWriteLock.testBasic and Redisson's
// RedissonReadWriteLockTest.testConcurrency_MultiInstance.
func TestRWExclusion(t *testing.T) {
	tg := uniqueTarget(t)
	ctx := ctxT(t, 60*time.Second)
	var readers, writers, mostReaders atomic.Int64
	var bad atomic.Int64
	var lastTok atomic.Uint64
	var wg sync.WaitGroup
	for p := range 3 {
		g, _ := newGen(t)
		l := rwOf(t, g, tg)
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 40 {
					if (p+i+j)%5 == 0 {
						o, err := l.Lock(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						if writers.Add(1) != 1 || readers.Load() != 0 {
							bad.Add(1)
						}
						tok, _ := l.FencingToken(o)
						if prev := lastTok.Swap(tok); prev >= tok {
							t.Errorf("token %d after %d", tok, prev)
						}
						time.Sleep(200 * time.Microsecond)
						writers.Add(-1)
						_ = o.Unlock()
					} else {
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
						time.Sleep(100 * time.Microsecond)
						readers.Add(-1)
						_ = o.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d overlaps of a writer", bad.Load())
	}
	if mostReaders.Load() < 2 {
		t.Fatalf("at most %d readers at once: reads were serialised", mostReaders.Load())
	}
}

// The writers of one process that pass one write-hold each have a fencing token of their own,
// above the one before, also across the refills that reserve new blocks (4 tokens each here)
// while writers wait; a later holding's token is above all of them, and the tokens the hold
// did not hand out go back with its release. (The counter starts far ahead of the clock, so
// that tokens follow it, not the clock.)
func TestRWWritersPassingOneHoldHaveTokensOfTheirOwn(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	c := srv.Client()
	takes := &opCounter{op: "take"}
	c.AddHook(takes)
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Minute), dlock.WithWriteBlock(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()); _ = c.Close() })
	l := rwOf(t, g, uniqueTarget(t))
	fence := processor.SharedKeys(l.Config())[5]
	ahead := uint64(time.Now().UnixMicro()) + 1_000_000_000_000
	if err := srv.Client().Set(ctx, fence, ahead, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 40 // (ten blocks)
	var mu sync.Mutex
	var tokens []uint64
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := l.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			tok, ok := l.FencingToken(o)
			mu.Lock()
			if !ok || (len(tokens) > 0 && tok <= tokens[len(tokens)-1]) {
				t.Errorf("writer %d: token %d (%v) after %v", len(tokens), tok, ok, tokens)
			}
			tokens = append(tokens, tok)
			mu.Unlock()
			_ = o.Unlock()
		}()
	}
	for g.SharedWaiters(l.Config().UniqueKey()) < writers {
		if ctx.Err() != nil {
			t.Fatal("the writers never all waited")
		}
		time.Sleep(time.Millisecond)
	}
	_ = first.Unlock()
	wg.Wait()
	if len(tokens) != writers {
		t.Fatalf("%d writers got the lock", len(tokens))
	}
	if n := takes.count(); n != 1 { // (refills renew it with new blocks: it never went back)
		t.Fatalf("the write-hold was taken %d times for %d writers", n, writers+1)
	}
	// the hold went back with its last writer: the counter is that writer's token
	for {
		c, err := srv.Client().Get(ctx, fence).Uint64()
		if err != nil {
			t.Fatal(err)
		}
		if c == tokens[len(tokens)-1] {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the counter stays at %d after the writers' %v", c, tokens)
		}
		time.Sleep(time.Millisecond)
	}
	// a holding taken afterwards, in another process, is above all of them
	g2, _ := newGen(t)
	l2 := rwOf(t, g2, l.Config().LockTarget())
	o, err := l2.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := l2.FencingToken(o); tok != tokens[len(tokens)-1]+1 {
		t.Fatalf("a later reader's token %d, after the writers' %v", tok, tokens)
	}
	_ = o.Unlock()
}

// opCounter counts the lockers sent in calls of shared.lua with op (a script sent again after
// NOSCRIPT, or a request sent again, counts once).
type opCounter struct {
	op      string
	mu      sync.Mutex
	lockers map[any]bool
}

func (c *opCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lockers)
}

func (c *opCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *opCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); sharedArg(a, "op") == c.op {
			c.mu.Lock()
			if c.lockers == nil {
				c.lockers = map[any]bool{}
			}
			c.lockers[sharedArg(a, "locker")] = true
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (c *opCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The readers of one process share one read-hold: their Redis requests do not grow with them.
func TestRWReadersOfAProcessShareOneHold(t *testing.T) {
	c := srv.Client()
	cnt := &counter{}
	c.AddHook(cnt)
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()); _ = c.Close() })
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	l := rwOf(t, g, tg)
	first, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := cnt.script("shared")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				o, err := l.RLock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				_ = o.Unlock()
			}
		}()
	}
	wg.Wait()
	// (at most the renewal a fresh subscription asks for)
	if n := cnt.script("shared") - before; n > 2 {
		t.Fatalf("%d requests to Redis for 400 reads under one read-hold", n)
	}
	_ = first.Unlock()
}

// Close ends holders (ErrClosed) and waiters, and leaves nothing held in Redis.
func TestRWClose(t *testing.T) {
	ga, err := dlock.NewGenerator(srv.Client(), dlock.WithDefaultLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	la := rwOf(t, ga, tg)
	r, err := la.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := rwOf(t, gb, tg).TryLock(ctx); ok || err != nil {
		t.Fatalf("a writer beside a reader: %v %v", ok, err)
	}
	done := make(chan error, 1)
	go func() {
		o, err := rwOf(t, gb, tg).Lock(ctx)
		if err == nil {
			err = o.Unlock()
		}
		done <- err
	}()
	waitFor(t, func() bool {
		st, err := rwOf(t, gb, tg).State(ctx)
		return err == nil && len(st.Waiting) == 1
	})
	if err := ga.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(r), dlock.ErrClosed) {
		t.Fatalf("reader's cause after Close: %v", context.Cause(r))
	}
	if err := r.Unlock(); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Unlock after Close: %v", err)
	}
	if err := recv(t, done, "the writer after the reader's Close"); err != nil {
		t.Fatalf("writer: %v", err)
	}
	if _, err := la.RLock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("RLock after Close: %v", err)
	}
}

// A holding lost (its Redis keys gone) ends its owners with ErrLockLost, and stays lost for
// them: re-entry and Unlock say so. (A lease of 2 s: the renewal that finds the keys gone, due
// at three quarters of it, may run late on a loaded machine, and the holding would then end by
// its lease running out first, saying so.)
func TestRWLossIsToldAndStays(t *testing.T) {
	g, c := newGen(t, dlock.WithDefaultLease(2*time.Second))
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	l := rwOf(t, g, tg)
	r, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := c.Keys(ctx, "{DLOCK_RW_"+tg+"}:shared:*").Result()
	if len(keys) == 0 {
		t.Fatal("no keys of the read-write lock")
	}
	c.Del(ctx, keys...)
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the loss was never told")
	}
	if cause := context.Cause(r); !errors.Is(cause, dlock.ErrLockLost) || !strings.Contains(cause.Error(), "renewal found the holding gone") {
		t.Fatalf("cause %v, want ErrLockLost saying why", cause)
	}
	if _, err := l.RLock(r); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("re-entry of a lost holding: %v", err)
	}
	if err := r.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock of a lost holding: %v", err)
	}
	w, err := l.Lock(ctx) // the lock itself goes on
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Unlock()
}

// blockingLoss is an Observer whose Lost blocks until unblock is closed, after saying, on
// entered, whether the owner context of the holding it reports had ended by then.
type blockingLoss struct {
	dlock.NopObserver
	owner   atomic.Pointer[dlock.Owner]
	entered chan error // the owner context's cause as Lost was called
	unblock chan struct{}
}

func (b *blockingLoss) Lost(dlock.LossEvent) {
	b.entered <- context.Cause(b.owner.Load())
	<-b.unblock
}

// The loss of a read-write lock's or a semaphore's holding ends the owner context before the
// Observer hears of it, as the mutex's does (Observer.Lost: "a slow observer never delays the
// holder's notice"); an Unlock while the observer is still busy answers the loss and leaves the
// owner context ended with it, not with context.Canceled. (Lost was called first, and until
// it returned the owner was not told; an Unlock meanwhile ended it with context.Canceled: a
// holding of a Cluster slot whose master was killed reported "context canceled".)
func TestSharedLossEndsTheOwnerBeforeTheObserver(t *testing.T) {
	for _, kind := range []string{"read", "permits"} {
		t.Run(kind, func(t *testing.T) {
			obs := &blockingLoss{entered: make(chan error, 1), unblock: make(chan struct{})}
			g, c := newGen(t, dlock.WithDefaultLease(300*time.Millisecond), dlock.WithObserver(obs))
			defer close(obs.unblock) // (before Close, which the cleanup runs)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			var o *dlock.Owner
			var err error
			pattern := "{DLOCK_RW_" + tg + "}:shared:*"
			if kind == "read" {
				o, err = rwOf(t, g, tg).RLock(ctx)
			} else {
				o, err = semOf(t, g, tg, 2).Acquire(ctx, 2)
				pattern = "{DLOCK_SEM_" + tg + "}:shared:*"
			}
			if err != nil {
				t.Fatal(err)
			}
			obs.owner.Store(o)
			keys, _ := c.Keys(ctx, pattern).Result()
			if len(keys) == 0 {
				t.Fatal("no keys of the lock")
			}
			c.Del(ctx, keys...)
			cause := recv(t, obs.entered, "the observer's Lost")
			if !errors.Is(cause, dlock.ErrLockLost) {
				t.Errorf("the owner context's cause as the observer heard of the loss: %v, want ErrLockLost", cause)
			}
			if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("Unlock while the observer is busy: %v, want ErrLockLost", err)
			}
			if cause := context.Cause(o); !errors.Is(cause, dlock.ErrLockLost) {
				t.Errorf("the owner context ended with %v, want ErrLockLost", cause)
			}
		})
	}
}

// A writer is not starved by readers that keep coming (two goroutines in each of two processes,
// each taking the read side again as soon as it let it go): a writer of a third process, or of
// one of theirs, gets in, as Curator's and Redisson's does, and the readers go on after it. (A
// starved writer fails at the generous bound; nothing here is timed.)
func TestRWWriterNotStarvedByOverlappingReaders(t *testing.T) {
	for _, writerOf := range []string{"another process", "a reading process"} {
		t.Run(writerOf, func(t *testing.T) {
			ga, _ := newGen(t)
			gb, _ := newGen(t)
			gw, _ := newGen(t)
			if writerOf == "a reading process" {
				gw = ga
			}
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			stop := make(chan struct{})
			var reads atomic.Int64
			var wg sync.WaitGroup
			stalls := watchStalls(t)
			for _, g := range []*dlock.Generator{ga, gb} {
				l := rwOf(t, g, tg)
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							since := time.Now()
							r, err := l.RLock(ctx)
							if err != nil {
								t.Error(err)
								return
							}
							reads.Add(1)
							time.Sleep(20 * time.Millisecond)
							if err := r.Unlock(); err != nil && !stalls.excused(t, err, since, time.Second, "a reader's Unlock") {
								t.Error(err)
							}
						}
					}()
				}
			}
			waitFor(t, func() bool { return reads.Load() >= 8 })
			since := time.Now()
			w, err := rwOf(t, gw, tg).Lock(ctxT(t, 15*time.Second))
			if err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("the writer among overlapping readers: %v", err)
			}
			before := reads.Load()
			if err := w.Unlock(); err != nil && !stalls.excused(t, err, since, time.Second, "the writer's Unlock") {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return reads.Load() > before }) // the readers go on after it
			close(stop)
			wg.Wait()
		})
	}
}

// A writer waiting for its own process's readers holds off that process's new readers too, as
// Curator's and Redisson's writer in line does: the read-hold is live, and lending it on would
// starve the writer. A new reader's TryRLock is false, its RLock gets in after the writer.
func TestRWWriterWaitingForItsOwnReadersHoldsOffItsNewReaders(t *testing.T) {
	ga, _ := newGen(t)
	ctx := ctxT(t, 30*time.Second)
	l := rwOf(t, ga, uniqueTarget(t))
	r, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writerIn, writerOut := make(chan struct{}), make(chan struct{})
	writer := make(chan error, 1)
	go func() {
		w, err := l.Lock(ctx)
		if err == nil {
			close(writerIn)
			<-writerOut
			err = w.Unlock()
		}
		writer <- err
	}()
	waitFor(t, func() bool { return ga.SharedWaiters(l.Config().UniqueKey()) == 1 })
	if o, ok, err := l.TryRLock(ctx); ok || err != nil {
		t.Fatalf("a new reader's TryRLock with its process's writer waiting = %v %v %v", o, ok, err)
	}
	var writing atomic.Bool
	writing.Store(true)
	reader := make(chan error, 1)
	go func() {
		o, err := l.RLock(ctx)
		if err == nil {
			select {
			case <-writerIn:
			default:
				err = errors.New("the new reader got in before the writer that waited first")
			}
			if writing.Load() {
				err = errors.Join(err, errors.New("the new reader got in while the writer held"))
			}
			err = errors.Join(err, o.Unlock())
		}
		reader <- err
	}()
	waitFor(t, func() bool { return ga.SharedWaiters(l.Config().UniqueKey()) == 2 })
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
	recv(t, writerIn, "the writer")
	notYet(t, reader, "the new reader returned while the writer held")
	writing.Store(false)
	close(writerOut)
	if err := recv(t, writer, "the writer's Unlock"); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, reader, "the new reader"); err != nil {
		t.Fatal(err)
	}
}

// A writer queued behind its own process's readers stands in line at once, so that the other
// processes stop letting readers in while its own finish (rather than after).
func TestRWWriterBehindItsOwnReadersStandsInLineAtOnce(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	la, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	ra, err := la.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := lb.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := la.Lock(ctx)
		if err == nil {
			err = w.Unlock()
		}
		got <- err
	}()
	waitFor(t, func() bool {
		st, err := la.State(ctx)
		return err == nil && len(st.Waiting) == 1 && st.Waiting[0].Write && len(st.Readers()) == 2
	})
	waitFor(t, func() bool { return gb.SharedWanted(lb.Config().UniqueKey()) }) // (the W message reaches B after Redis shows the writer)
	// B, told that a writer waits, lends no more: its new reader waits behind the writer
	second := make(chan time.Time, 1)
	go func() {
		r, err := lb.RLock(ctx)
		if err == nil {
			second <- time.Now()
			_ = r.Unlock()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-second:
		t.Fatal("a reader of B got in past A's waiting writer")
	default:
	}
	_ = ra.Unlock()
	_ = rb.Unlock()
	if err := recv(t, got, "A's writer"); err != nil {
		t.Fatal(err)
	}
	recv(t, second, "B's second reader")
}

// A writer of B that waited behind A's read-hold and gave up leaves A's readers free to share
// the read side again: A's next reader gets in at once, not at A's next renewal (three
// quarters of a 60 s lease; A heard "W" as the writer stood in line, and a waiter that leaves
// tells no holder).
func TestRWReaderGetsInOnceAnotherProcesssWriterGaveUp(t *testing.T) {
	ga, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	gb, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	tg := uniqueTarget(t)
	la, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	r1, err := la.RLock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Unlock()
	wctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := lb.Lock(wctx)
		gaveUp <- err
	}()
	waitFor(t, func() bool { return ga.SharedWanted(la.Config().UniqueKey()) })
	cancel()
	if err := recv(t, gaveUp, "B's writer"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("B's writer: %v, want it to give up", err)
	}
	waitFor(t, func() bool { st, err := la.State(context.Background()); return err == nil && len(st.Waiting) == 0 })
	r2, err := la.RLock(ctxT(t, 10*time.Second)) // (well before A renews, 45 s on)
	if err != nil {
		t.Fatalf("A's second reader, nobody else waiting: %v", err)
	}
	_ = r2.Unlock()
}

// A lost holding whose owners have not unlocked yet stands in nobody's way: the process's other
// goroutines take the lock afresh (the mutex does the same).
func TestRWLostHoldingDoesNotBlockTheProcess(t *testing.T) {
	for _, write := range []bool{false, true} {
		g, c := newGen(t, dlock.WithDefaultLease(300*time.Millisecond))
		tg := uniqueTarget(t)
		ctx := ctxT(t, 30*time.Second)
		l := rwOf(t, g, tg)
		take := l.RLock
		if write {
			take = l.Lock
		}
		o, err := take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keys, _ := c.Keys(ctx, "{DLOCK_RW_"+tg+"}:shared:*").Result()
		c.Del(ctx, keys...)
		select {
		case <-o.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the loss was never told")
		}
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		o2, err := take(short) // o not unlocked yet
		cancel()
		if err != nil {
			t.Fatalf("write %v: another goroutine beside a lost, not yet unlocked holding: %v", write, err)
		}
		_ = o2.Unlock()
		_ = o.Unlock()
	}
}

// Unlock reports a loss only when its release finds the holding gone: a release whose first
// reply was lost, sent again and answered "settled already", is no loss.
func TestRWUnlockAfterALostReleaseReply(t *testing.T) {
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	var lost atomic.Int32
	c.AddHook(lostReplyHook{match: func(a []any) bool {
		return sharedArg(a, "op") == "release" && lost.Add(1) == 1
	}})
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	ctx := ctxT(t, 30*time.Second)
	l := rwOf(t, g, uniqueTarget(t))
	o, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); err != nil || lost.Load() < 2 {
		t.Fatalf("Unlock after a lost release reply = %v (release sent %d times)", err, lost.Load())
	}
}

// An Unlock whose holding was lent again before it went back learns nothing of what later
// became of the holding: readers come and go on one read-hold, every Unlock returns nil.
func TestRWUnlocksOfReadersTakingTurns(t *testing.T) {
	g, _ := newGen(t)
	ctx := ctxT(t, 30*time.Second)
	l := rwOf(t, g, uniqueTarget(t))
	for range 200 {
		a, err := l.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Unlock() }()
		b, err := l.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- b.Unlock() }()
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A writer's process that dies (kill -9: its connections close) while it waits in line holds
// up no reader behind it: as the holder lets go, the reader is served, not once the dead
// writer's line entry expired.
func TestRWDeadWriterInLineIsPassedOver(t *testing.T) {
	t.Parallel()
	tg := uniqueTarget(t)
	deadWaiterIsPassedOver(t, func(g *dlock.Generator) sharedLock {
		l := rwOf(t, g, tg)
		return sharedLock{cfg: l.Config(), hold: l.Lock, dead: l.Lock, behind: l.RLock}
	})
}

// Readers of several processes, several goroutines in each, hold the read side all at once (one
// hold a process); a writer cannot get in while they do, and gets in once they are gone. Ports
// Curator's TestInterProcessReadWriteLock.testGetParticipantNodes and Redisson's
// RedissonReadWriteLockTest.testMultiRead.
func TestRWReadersOfManyProcessesHoldTogether(t *testing.T) {
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

// A writer shuts out the readers and writers of every process, its own other goroutines
// included (a timed RLock of another goroutine gives up); the readers waiting for it all get in
// once it lets go. Ports Redisson's RedissonReadWriteLockTest.testWriteLock and testWriteRead,
// and Curator's TestInterProcessReadWriteLock.testThatDowngradingRespectsThreads.
func TestRWWriterShutsOutEveryone(t *testing.T) {
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

// A writer takes the read side and lets the write side go; no writer — of another process, or
// of the writer's own, already waiting — gets in while that read lasts, nor does a try; another
// goroutine's read does not get in while the write side is still held. Once the read goes, the
// write side is free. Ports Curator's TestInterProcessReadWriteLock.testDowngrading and
// testContendingDowngrading, and Redisson's RedissonReadWriteLockTest.testWriteReadReentrancy.
func TestRWDowngradeKeepsWritersOut(t *testing.T) {
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
	notYet(t, same, "the same process's waiting writer returned while the downgraded read lasts")
	notYet(t, other, "another process's waiting writer returned while the downgraded read lasts")
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
		if err := recv(t, c, "waiting writer"); err != nil {
			t.Fatal(err)
		}
	}
	o, ok, err := la.TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock once everyone let go = %v %v %v", o, ok, err)
	}
	_ = o.Unlock()
}

// A reader of another process that waits while the write owner reads on under its write gets
// in as soon as the write side lets go, while the downgraded read lasts: the write-hold that
// only its downgraded readers borrow is turned into a read-hold even though someone waits (a
// process that kept it until they let go would keep a waiting reader out for as long as they
// read, for ever if they wait for it). Curator's testThatDowngradingRespectsThreads and
// Redisson's testReadLockIsLocked, with the reader already waiting.
func TestRWDowngradeLetsInAReaderThatWaitedElsewhere(t *testing.T) {
	for _, ownWriter := range []bool{false, true} {
		t.Run(fmt.Sprintf("a writer of its own waits too=%v", ownWriter), func(t *testing.T) {
			ctx, la, lb := rwPair(t)
			w, err := la.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r, err := la.RLock(w)
			if err != nil {
				t.Fatalf("downgrade: %v", err)
			}
			var reading atomic.Int32 // the downgraded reader and the other process's
			reading.Store(1)
			var own <-chan error
			if ownWriter {
				done := make(chan error, 1)
				own = done
				go func() {
					o, err := la.Lock(ctx)
					if err == nil {
						if n := reading.Load(); n != 0 {
							err = fmt.Errorf("this process's writer got in beside %d readers", n)
						}
						err = errors.Join(err, o.Unlock())
					}
					done <- err
				}()
				time.Sleep(20 * time.Millisecond) // (it queues: only gives a defect the chance to show)
			}
			in := make(chan error, 1)
			go func() {
				o, err := lb.RLock(ctx)
				if err == nil {
					reading.Add(1)
					if r.Err() != nil {
						err = errors.New("the downgraded read ended before the other reader got in")
					}
					reading.Add(-1)
					err = errors.Join(err, o.Unlock())
				}
				in <- err
			}()
			waitFor(t, func() bool { st, err := lb.State(ctx); return err == nil && len(st.Waiting) == 1 })
			notYet(t, in, "another process's reader got in beside the write")
			if err := w.Unlock(); err != nil {
				t.Fatal(err)
			}
			if err := recv(t, in, "the other process's reader"); err != nil {
				t.Fatal(err)
			}
			if ownWriter {
				notYet(t, own, "this process's writer got in while its downgraded read lasts")
			}
			reading.Add(-1)
			if err := r.Unlock(); err != nil {
				t.Fatal(err)
			}
			if ownWriter {
				if err := recv(t, own, "this process's writer"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A try of a read-write lock or a semaphore right after tries whose outcome was unknown (their
// takes' replies lost after Redis ran them), whose give-backs Redis failed (releases the process
// owes, paused before they are sent again), finds the key held by those attempts: the owed
// releases go at once, all of them, and the try asks once more, and gets the lock, rather than
// answer held for a key nobody who wants it holds (as the mutex's TryLock,
// TestTryLockRightAfterAnUnknownOutcomeGetsTheKey).
func TestFamilyTryRightAfterAnUnknownOutcomeGetsTheKey(t *testing.T) {
	type try = func(context.Context) (*dlock.Owner, bool, error)
	for _, tc := range []struct {
		name  string
		lost  int                                       // tries whose replies are lost first
		tries func(*dlock.Generator, string) (try, try) // the lost ones', the last one's
	}{
		{"rw write after a write", 1, func(g *dlock.Generator, tg string) (try, try) {
			l := rwOf(t, g, tg)
			return l.TryLock, l.TryLock
		}},
		{"rw write after two reads", 2, func(g *dlock.Generator, tg string) (try, try) {
			l := rwOf(t, g, tg)
			return l.TryRLock, l.TryLock
		}},
		{"sem one of one after one", 1, func(g *dlock.Generator, tg string) (try, try) {
			sem := semOf(t, g, tg, 1)
			return func(ctx context.Context) (*dlock.Owner, bool, error) { return sem.TryAcquire(ctx, 1) },
				func(ctx context.Context) (*dlock.Owner, bool, error) { return sem.TryAcquire(ctx, 1) }
		}},
		{"sem two of two after two ones", 2, func(g *dlock.Generator, tg string) (try, try) {
			sem := semOf(t, g, tg, 2)
			return func(ctx context.Context) (*dlock.Owner, bool, error) { return sem.TryAcquire(ctx, 1) },
				func(ctx context.Context) (*dlock.Owner, bool, error) { return sem.TryAcquire(ctx, 2) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := srv.Client()
			preload(t, c) // (each request one EVALSHA that runs: the hook counts takes)
			var takes, failed atomic.Int32
			var failing atomic.Bool
			failing.Store(true)
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				switch sharedArg(cmd.Args(), "op") {
				case "release":
					if failing.Load() { // Redis fails it, as it would a script it refused
						failed.Add(1)
						err := next(ctx, redis.NewCmd(ctx, "eval", "return redis.error_reply('ERR injected: the release fails')", 0))
						cmd.SetErr(err)
						return err
					}
				case "take":
					n := takes.Add(1)
					if n == int32(tc.lost)+1 {
						failing.Store(false) // (the last try's: the owed releases go through from now on)
					}
					err := next(ctx, cmd)
					if n <= int32(tc.lost) && err == nil {
						err = errors.New("i/o timeout (reply lost)") // the script ran; the reply is lost
						cmd.SetErr(err)
					}
					return err
				}
				return next(ctx, cmd)
			}})
			g := genOn(t, c, dlock.WithDefaultLease(10*time.Second))
			ctx := ctxT(t, 15*time.Second)
			lostTry, lastTry := tc.tries(g, uniqueTarget(t))
			for i := range tc.lost {
				if _, ok, err := lostTry(ctx); ok || err == nil {
					t.Fatalf("try %d, whose reply was lost = %v, %v; want an error", i, ok, err)
				}
				waitFor(t, func() bool { return failed.Load() > int32(i) })
			}
			o, ok, err := lastTry(ctx)
			if !ok || err != nil {
				t.Fatalf("try right after = %v, %v; want the lock (takes %d, failed releases %d)", ok, err, takes.Load(), failed.Load())
			}
			if err := o.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A process that owes many give-backs Redis keeps failing, and polls TryAcquire on a semaphore
// another process holds, sends them no faster for its tries: each try that finds the key held
// sends those that may be in its way at once, but the first that Redis fails again pauses the
// others (they go one a pause, as before). (It sent every one of them at each try: 20 owed, 10
// tries, 200 releases to a Redis failing them, each try waiting for all.)
func TestFamilyTryLoopWhileRedisFailsTheReleasesSendsThemPaced(t *testing.T) {
	const lost, loop, lease = 20, 10, 30 * time.Second
	c := srv.Client()
	preload(t, c)
	var takes, releases atomic.Int32
	var healed atomic.Bool
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		switch sharedArg(cmd.Args(), "op") {
		case "release":
			if healed.Load() {
				break
			}
			releases.Add(1)
			err := next(ctx, redis.NewCmd(ctx, "eval", "return redis.error_reply('ERR injected: the release fails')", 0))
			cmd.SetErr(err)
			return err
		case "take":
			n := takes.Add(1)
			err := next(ctx, cmd)
			if n <= lost && err == nil {
				err = errors.New("i/o timeout (reply lost)") // the script ran; the reply is lost
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmd)
	}})
	tg := uniqueTarget(t)
	ctx := ctxT(t, 60*time.Second)
	other, ok, err := semOf(t, genOn(t, srv.Client(), dlock.WithDefaultLease(lease)), tg, 1).TryAcquire(ctx, 1)
	if !ok || err != nil {
		t.Fatalf("the other process's TryAcquire = %v, %v", ok, err)
	}
	defer other.Unlock() //nolint:errcheck
	sem := semOf(t, genOn(t, c, dlock.WithDefaultLease(lease)), tg, 1)
	for i := range lost {
		if _, ok, err := sem.TryAcquire(ctx, 1); ok || err == nil {
			t.Fatalf("try %d, whose reply was lost = %v, %v; want an error", i, ok, err)
		}
	}
	waitFor(t, func() bool { return releases.Load() >= lost }) // (each give-back failed once)
	before, began := releases.Load(), time.Now()
	for i := range loop {
		if _, ok, err := sem.TryAcquire(ctx, 1); ok || err != nil {
			t.Fatalf("try %d beside the other's holding = %v, %v; want held", i, ok, err)
		}
	}
	// one urged per try, and those the pause lets go while they ran (counted from how long
	// they took, so that a loaded machine changes the bound, not the outcome)
	most := int32(loop) + int32(time.Since(began)/giveBackPause("sem", lease)) + 2
	if sent := releases.Load() - before; sent > most {
		t.Fatalf("%d tries owing %d give-backs Redis fails sent %d releases in %v; want at most %d", loop, lost, sent, time.Since(began).Round(time.Millisecond), most)
	}
	healed.Store(true) // (the give-backs go through: Close does not wait a lease for them)
}

// Once the write side of a downgrade is unlocked, Redis holds only the read side: another
// process's TryRLock, which stands in no line, gets in at once and State shows no writer, as
// after the write side's Unlock of Redisson's or the JDK's read-write lock (Redisson's
// testWriteReadReentrancy, with the reader in another process).
func TestRWDowngradeUnlockedLetsInATryElsewhere(t *testing.T) {
	ctx, la, lb := rwPair(t)
	for i := 0; i < 5; i++ {
		w, err := la.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := la.RLock(w)
		if err != nil {
			t.Fatalf("downgrade: %v", err)
		}
		if err := w.Unlock(); err != nil {
			t.Fatal(err)
		}
		if st, err := lb.State(ctx); err != nil || len(st.Writers()) != 0 || len(st.Readers()) != 1 {
			t.Fatalf("turn %d: after the write side's Unlock Redis holds writers %v, readers %v (%v); want the downgraded reader alone", i, st.Writers(), st.Readers(), err)
		}
		o, ok, err := lb.TryRLock(ctx)
		if err != nil || !ok {
			t.Fatalf("turn %d: another process's TryRLock beside a downgraded reader: %v %v", i, ok, err)
		}
		if err := errors.Join(o.Unlock(), r.Unlock()); err != nil {
			t.Fatal(err)
		}
	}
}

// A writer of the same process waiting for the write side keeps it for that writer: the write
// side's Unlock returns at once, with the downgraded read still held on the same goroutine (an
// Unlock that waited for a downgrade that is not sent would wait for that read: for ever), and
// the waiting writer gets in once the read goes.
func TestRWDowngradeUnlockedKeepsTheWriteSideForAWriterOfItsOwn(t *testing.T) {
	g, _ := newGen(t)
	l := rwOf(t, g, uniqueTarget(t))
	ctx := ctxT(t, 30*time.Second)
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.RLock(w)
	if err != nil {
		t.Fatalf("downgrade: %v", err)
	}
	var reading atomic.Bool
	reading.Store(true)
	own := make(chan error, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err == nil {
			if reading.Load() {
				err = errors.New("the waiting writer got in beside the downgraded read")
			}
			err = errors.Join(err, o.Unlock())
		}
		own <- err
	}()
	waitFor(t, func() bool { return g.SharedWaiters(l.Config().UniqueKey()) == 1 })
	if err := recv(t, unlockInBackground(l, w), "the write side's Unlock, with a writer of its own waiting"); err != nil {
		t.Fatal(err)
	}
	notYet(t, own, "the waiting writer got in while the downgraded read lasts")
	reading.Store(false)
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, own, "the waiting writer"); err != nil {
		t.Fatal(err)
	}
}

// A writer that reads on under its write (a downgrade) keeps both past two leases, renewed;
// once it lets the write side go its read goes on, renewed past two more leases, keeping other
// processes' writers out but not their readers, and its Unlock then frees the lock. Ports
// Redisson's RedissonReadWriteLockTest.testReadWriteTTL (both sides keep their time to live
// while held, the read side after the write side's unlock).
func TestRWDowngradedReadIsRenewedPastTheWrite(t *testing.T) {
	t.Parallel()
	const lease = time.Second // (a renewal has 250 ms to spare on a loaded machine)
	ga, _ := newGen(t, dlock.WithDefaultLease(lease))
	gb, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	la, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	stalls, start := watchStalls(t), time.Now()
	w, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := la.RLock(w)
	if err != nil {
		t.Fatal(err)
	}
	// stalled skips the test when err, or the end of one of the holdings, is what a stall of
	// the process past the lease gives: there is nothing left to check.
	stalled := func(err error, what string) {
		t.Helper()
		for _, e := range []error{err, context.Cause(w), context.Cause(r)} {
			if e != nil && stalls.excused(t, e, start, lease, what) {
				t.Skip("lost in a stall of the process")
			}
		}
	}
	check := func(when string, readersIn bool) {
		t.Helper()
		if o, ok, err := lb.TryLock(ctx); ok || err != nil {
			stalled(err, when+": another process's TryLock")
			t.Fatalf("%s: another process's writer got in = %v %v %v", when, o, ok, err)
		}
		o, ok, err := lb.TryRLock(ctx)
		if err != nil || ok != readersIn {
			stalled(err, when+": another process's TryRLock")
			t.Fatalf("%s: another process's TryRLock = %v %v, want %v", when, ok, err, readersIn)
		}
		if ok {
			_ = o.Unlock()
		}
		st, err := lb.State(ctx)
		if err != nil || len(st.Holds) == 0 {
			stalled(err, when+": State")
			t.Fatalf("%s: State = %+v %v, want a holding", when, st, err)
		}
		for _, h := range st.Holds {
			if h.TTL <= 0 {
				t.Fatalf("%s: a holding with no time to live: %+v", when, h)
			}
		}
	}
	stalled(nil, "the write and the read")
	if !keptThrough(t, w, 5*lease/2, lease, "the write") {
		t.Skip("lost in a stall of the process")
	}
	if r.Err() != nil {
		stalled(nil, "the read under the write")
		t.Fatalf("the read under the write ended: %v", context.Cause(r))
	}
	check("write and read held", false)
	if err := w.Unlock(); err != nil {
		stalled(err, "the write's Unlock")
		t.Fatal(err)
	}
	stalled(nil, "the downgraded read")
	if !keptThrough(t, r, 5*lease/2, lease, "the downgraded read") {
		t.Skip("lost in a stall of the process")
	}
	if la.HoldCount(r) != 1 {
		t.Fatalf("the downgraded read, two leases after the write's Unlock: HoldCount %d", la.HoldCount(r))
	}
	check("the downgraded read held", true)
	if err := r.Unlock(); err != nil {
		stalled(err, "the read's Unlock")
		t.Fatal(err)
	}
	o, ok, err := lb.TryLock(ctx)
	if !ok || err != nil {
		stalled(err, "another process's TryLock once the read was let go")
		t.Fatalf("another process's TryLock once the read was let go = %v %v %v", o, ok, err)
	}
	_ = o.Unlock()
}

// Both sides re-enter, and a writer reads on under its write; each Unlock gives up one hold of
// the innermost side, and the lock is free after the last. Ports Redisson's
// RedissonReadWriteLockTest.testReentrancy, testHoldCount and testWR.
func TestRWUnlockGivesUpTheInnermostHold(t *testing.T) {
	ctx, l, lb := rwPair(t, dlock.WithDefaultLease(stallProofLease))
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

// crashedRW returns a read-write lock of a process whose renewals will fail once crash is
// called (its client closed: a process gone without a word), on a 300 ms lease.
func crashedRW(t *testing.T, tg string) (l *dlock.RWLock, crash func()) {
	t.Helper()
	c := srv.Client()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return rwOf(t, g, tg), func() { _ = c.Close() }
}

// A holding whose process crashed (it stops renewing) is gone once its lease runs out: a
// crashed reader's read-hold, held beside a live reader's, no longer keeps a writer out once
// the live reader lets go; a crashed writer's write-hold lets the readers of two processes in
// together; the crashed holder's Unlock then says ErrLockLost. Ports Redisson's
// RedissonReadWriteLockTest.testMultiInstanceReadLockZombieCleanup, testAutoExpire,
// testExpireRead, testExpireWrite and testReadLockLeaseTimeoutDiffThreadsWRR (Redisson's
// leaseTime: here the lease of a holder that stopped renewing).
func TestRWCrashedHoldersLeaseFreesTheLock(t *testing.T) {
	for _, write := range []bool{false, true} {
		t.Run(map[bool]string{false: "crashed reader", true: "crashed writer"}[write], func(t *testing.T) {
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			dead, crash := crashedRW(t, tg)
			ga, _ := newGen(t)
			gb, _ := newGen(t)
			la, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
			zombie, err := lockSide(ctx, dead, write)
			if err != nil {
				t.Fatal(err)
			}
			var live *dlock.Owner
			if !write {
				if live, err = la.RLock(ctx); err != nil { // beside the reader that will crash
					t.Fatal(err)
				}
			}
			crash()
			select {
			case <-zombie.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the crashed holder was not told of its loss")
			}
			if !errors.Is(context.Cause(zombie), dlock.ErrLockLost) {
				t.Fatalf("the crashed holder's cause: %v", context.Cause(zombie))
			}
			if write {
				// the readers of two processes get in once the writer's lease ran out
				ra, err := la.RLock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rb, err := lb.RLock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st, err := lb.State(ctx); err != nil || len(st.Readers()) != 2 || len(st.Writers()) != 0 {
					t.Fatalf("state with the crashed writer gone and two readers: %+v %v", st, err)
				}
				_ = ra.Unlock()
				_ = rb.Unlock()
			} else {
				if err := live.Unlock(); err != nil {
					t.Fatal(err)
				}
			}
			w, err := lb.Lock(ctx) // nothing of the crashed holder keeps the writer out
			if err != nil {
				t.Fatalf("a writer after the crashed holder's lease: %v", err)
			}
			if err := zombie.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("the crashed holder's Unlock = %v, want ErrLockLost", err)
			}
			if w.Err() != nil {
				t.Fatalf("the writer lost its hold by the crashed holder's Unlock: %v", context.Cause(w))
			}
			if err := w.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An Unlock by anyone but the holder — a context that owns nothing, a reader's owner given to
// another process's handle, a holder of the other side, another key's owner — is refused with
// ErrNotHeld, sends nothing that frees the lock, and the holding stays; HoldCount is 0 for
// them. Ports Redisson's RedissonReadWriteLockTest.testUnlockFail,
// testIsHeldByCurrentThreadOtherThread, testIsHeldByCurrentThread, testIsLocked and
// testIsLockedOtherThread.
func TestRWUnlockByNonOwnerIsRefused(t *testing.T) {
	ctx, la, lb := rwPair(t, dlock.WithDefaultLease(stallProofLease))
	gc, _ := newGen(t)
	other, err := rwOf(t, gc, uniqueTarget(t)+"-other").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unlock()
	for _, write := range []bool{false, true} {
		o, err := lockSide(ctx, la, write)
		if err != nil {
			t.Fatal(err)
		}
		for name, try := range map[string]func() error{
			"a bare context":                   func() error { return la.Unlock(ctx) },
			"the holder's owner, other handle": func() error { return lb.Unlock(o) },
			"an owner of another lock":         func() error { return la.Unlock(other) },
		} {
			if err := try(); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("write %v: Unlock with %s = %v, want ErrNotHeld", write, name, err)
			}
		}
		if la.HoldCount(ctx) != 0 || lb.HoldCount(o) != 0 || la.HoldCount(o) != 1 {
			t.Fatalf("write %v: HoldCount bare %d, other handle %d, holder %d; want 0, 0, 1", write, la.HoldCount(ctx), lb.HoldCount(o), la.HoldCount(o))
		}
		if o.Err() != nil {
			t.Fatalf("write %v: the holder ended: %v", write, context.Cause(o))
		}
		if st, err := lb.State(ctx); err != nil || len(st.Holds) != 1 || st.Holds[0].Write != write {
			t.Fatalf("write %v: the state after refused Unlocks: %+v %v", write, st, err)
		}
		if _, ok, err := lb.TryLock(ctx); ok || err != nil {
			t.Fatalf("write %v: a writer got in after refused Unlocks: %v %v", write, ok, err)
		}
		if err := o.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := la.Unlock(o); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("write %v: a second Unlock = %v, want ErrNotHeld", write, err)
		}
	}
	if st, err := lb.State(ctx); err != nil || len(st.Holds) != 0 {
		t.Fatalf("the state at the end: %+v %v", st, err)
	}
}

// Re-entry never waits, not even behind a writer in line: an owner's TryRLock, RLock, TryLock
// and Lock re-enter its side at once while another process's writer waits for it (waiting
// would deadlock: the writer waits for this very hold), and a writer's TryRLock downgrades at
// once; each re-entry is one more hold to Unlock. Ports Redisson's
// RedissonReadWriteLockTest.testReentrancy (tryLock twice) and Curator's
// TestInterProcessReadWriteLock re-entrant reads while a writer waits.
func TestRWReentryNeverWaitsBehindAWriterInLine(t *testing.T) {
	ctx, la, lb := rwPair(t)
	for _, write := range []bool{false, true} {
		o, err := lockSide(ctx, la, write)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *dlock.Owner, 1)
		go func() { // another process's writer stands in line behind the holder
			w, err := lb.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		waitFor(t, func() bool { st, err := la.State(ctx); return err == nil && len(st.Waiting) == 1 })
		short, cancel := context.WithTimeout(o, 5*time.Second) // a re-entry must not wait
		stack := []context.Context{o}
		r, ok, err := la.TryRLock(short)
		if !ok || err != nil || r == nil {
			t.Fatalf("write %v: TryRLock by the owner behind a writer in line = %v %v", write, ok, err)
		}
		stack = append(stack, r)
		r2, err := la.RLock(r)
		if err != nil {
			t.Fatalf("write %v: RLock by the owner behind a writer in line = %v", write, err)
		}
		stack = append(stack, r2)
		if write {
			w1, ok, err := la.TryLock(short)
			if !ok || err != nil {
				t.Fatalf("TryLock by the writer behind a writer in line = %v %v", ok, err)
			}
			w2, err := la.Lock(w1)
			if err != nil {
				t.Fatalf("Lock by the writer behind a writer in line = %v", err)
			}
			stack = append(stack, w1, w2)
		}
		cancel()
		if write {
			if n := la.HoldCount(o); n != 3 {
				t.Fatalf("the writer's HoldCount = %d, want 3 (its Lock, TryLock, Lock)", n)
			}
		} else if n := la.HoldCount(r2); n != 3 {
			t.Fatalf("the reader's HoldCount = %d, want 3 (its RLock, TryRLock, RLock)", n)
		}
		for i := len(stack) - 1; i >= 0; i-- {
			select {
			case <-got:
				t.Fatalf("write %v: the writer in line got in with %d holds left", write, i+1)
			default:
			}
			if err := la.Unlock(stack[i]); err != nil {
				t.Fatalf("write %v: Unlock %d of %d: %v", write, len(stack)-i, len(stack), err)
			}
		}
		w := recv(t, got, "the writer in line")
		if w == nil {
			t.FailNow()
		}
		if err := w.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

// sharedBeliefWatch checks, from a client near Redis, that no holding of a read-write lock or
// semaphore that a generator lends to a goroutine is counted held beyond what Redis keeps: the
// holding is in Redis, and its lease there (server ms, on this host's clock) ends no earlier.
func (w *beliefWatch) runShared(g *dlock.Generator, admin *redis.Client, cfg domain.DLockConfig, stop <-chan struct{}) {
	w.minMargin.CompareAndSwap(0, int64(time.Hour))
	held, exp := cfg.SideKey(processor.SharedHeldSuffix), cfg.SideKey(processor.SharedExpSuffix)
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
		before := g.SharedBelief(cfg.UniqueKey())
		if len(before) == 0 {
			continue
		}
		type reading struct {
			held *redis.BoolCmd
			exp  *redis.FloatCmd
		}
		rs := map[string]reading{}
		_, _ = admin.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			for l, b := range before {
				rs[l] = reading{p.HExists(context.Background(), held, l), p.ZScore(context.Background(), exp, l)}
				if b.DownTo != "" {
					rs[b.DownTo] = reading{p.HExists(context.Background(), held, b.DownTo), p.ZScore(context.Background(), exp, b.DownTo)}
				}
			}
			return nil
		})
		r1 := time.Now()
		after := g.SharedBelief(cfg.UniqueKey())
		for l, b := range before {
			u0 := b.Until
			if a, still := after[l]; !still || !u0.After(r1) || a.DownTo != b.DownTo {
				continue // (a downgrade begun during the reading: which locker Redis has then is unknown here)
			}
			w.checks.Add(1)
			r := rs[l]
			if !r.held.Val() && b.DownTo != "" {
				r = rs[b.DownTo] // (the downgrade ran: the holding lives on under its new locker)
			}
			if !r.held.Val() {
				w.violate("holding %s lent, believed held for %v more, is not in Redis", l, time.Until(u0))
				continue
			}
			end := time.UnixMilli(int64(r.exp.Val()))
			if m := int64(end.Sub(u0)); m < w.minMargin.Load() {
				w.minMargin.Store(m)
			}
			if u0.After(end.Add(time.Millisecond)) {
				w.violate("holding %s believed held until %v after its lease in Redis ends", l, u0.Sub(end))
			}
		}
	}
}

// latencyWalk changes p's latency each way among 0-150 ms every 100-600 ms until stop, and
// delays the messages of shared locks (W, F) by up to 300 ms.
func latencyWalk(p *faultproxy.Proxy, stop <-chan struct{}) {
	p.SetShaper(func(toTarget bool, chunk []byte) time.Duration {
		if !toTarget && bytes.Contains(chunk, []byte(":shared:")) {
			return time.Duration(rand.IntN(300)) * time.Millisecond
		}
		return 0
	})
	ms := []time.Duration{0, 20 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond}
	for {
		p.SetLatencies(ms[rand.IntN(len(ms))], ms[rand.IntN(len(ms))])
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(100+rand.IntN(500)) * time.Millisecond):
		}
	}
}

// A process far from Redis takes its turns beside near ones: each kind's process stands in
// line again as it lets the lock go while its goroutines still want it (the mutex's yield
// check, the family's release that stands in line again), rather than a round trip later,
// behind every near process that went round meanwhile.
func TestFarProcessTakesItsTurns(t *testing.T) {
	for _, kind := range []string{"Mutex", "RW", "Semaphore"} {
		t.Run(kind, func(t *testing.T) {
			const lease = time.Second
			far, p := farGen(t, lease)
			p.SetLatencies(20*time.Millisecond, 20*time.Millisecond)
			near1, _ := newGen(t, dlock.WithDefaultLease(lease))
			near2, _ := newGen(t, dlock.WithDefaultLease(lease))
			tg := target(t)
			var (
				turns  [3]atomic.Int64
				inside atomic.Int64
				wg     sync.WaitGroup
			)
			stalls := watchStalls(t)
			end := time.Now().Add(3 * time.Second)
			for i, g := range []*dlock.Generator{far, near1, near2} {
				var lock func(ctx context.Context) (*dlock.Owner, error)
				switch kind {
				case "Mutex":
					l, err := g.Gen("M", tg)
					if err != nil {
						t.Fatal(err)
					}
					lock = l.Lock
				case "RW":
					lock = rwOf(t, g, tg).Lock
				default:
					s, err := g.GenSemaphore("SEM", tg, 2)
					if err != nil {
						t.Fatal(err)
					}
					lock = s.Permits(2).Lock
				}
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(end) {
							ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
							start := time.Now()
							o, err := lock(ctx)
							cancel()
							if err != nil {
								t.Errorf("process %d: Lock: %v", i, err)
								return
							}
							if inside.Add(1) != 1 {
								t.Errorf("process %d: two owners inside", i)
							}
							turns[i].Add(1)
							time.Sleep(time.Millisecond)
							inside.Add(-1)
							if err := o.Unlock(); err != nil && !stalls.excused(t, err, start, lease, fmt.Sprintf("process %d: Unlock", i)) {
								t.Errorf("process %d: Unlock: %v", i, err)
							}
						}
					}()
				}
			}
			wg.Wait()
			f, n1, n2 := turns[0].Load(), turns[1].Load(), turns[2].Load()
			t.Logf("turns: far %d, near %d and %d", f, n1, n2)
			if f < 3 || 6*f < min(n1, n2) {
				t.Errorf("the far process took %d turns beside %d and %d: less than a sixth of a near one's", f, n1, n2)
			}
		})
	}
}

// A process far from Redis, whose latency each way comes and goes (0-150 ms) and whose W and F
// messages come late, shares a read-write lock and a semaphore with a near one: no holding is
// believed beyond what Redis keeps, no writer is beside anyone and no more permits are out
// than the semaphore has, writers' tokens strictly increase, the far process's writers and
// acquirers are served, and nothing is left held once everyone stops.
func TestFarProcessFamily(t *testing.T) {
	for _, kind := range []string{"RW", "Semaphore"} {
		t.Run(kind, func(t *testing.T) {
			const lease, k = time.Second, 2
			far, p := farGen(t, lease)
			near, admin := newGen(t, dlock.WithDefaultLease(lease))
			tg := target(t)
			type side struct {
				write, read dlock.Part
			}
			var sides [2]side
			var cfg domain.DLockConfig
			for i, g := range []*dlock.Generator{far, near} {
				if kind == "RW" {
					l := rwOf(t, g, tg)
					sides[i], cfg = side{l.WriteSide(), l.ReadSide()}, l.Config()
				} else {
					s, err := g.GenSemaphore("SEM", tg, k)
					if err != nil {
						t.Fatal(err)
					}
					sides[i], cfg = side{s.Permits(2), s.Permits(1)}, s.Config()
				}
			}
			fence := "{" + cfg.UniqueKey() + "}:fenced"
			stop := make(chan struct{})
			var bg sync.WaitGroup
			var watches [2]beliefWatch
			for i, g := range []*dlock.Generator{far, near} {
				bg.Add(1)
				go func() { defer bg.Done(); watches[i].runShared(g, admin, cfg, stop) }()
			}
			bg.Add(1)
			go func() { defer bg.Done(); latencyWalk(p, stop) }()

			var (
				writers, readers atomic.Int64 // inside: writers (all permits), readers (one each)
				bad, stale       atomic.Int64
				acq              [2][2]atomic.Int64 // [process][write]
				maxWait          [2][2]atomic.Int64
				wg               sync.WaitGroup
			)
			end := time.Now().Add(4 * time.Second)
			for i := range sides {
				for j := 0; j < 3; j++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for n := 0; time.Now().Before(end); n++ {
							write := j == 0 && n%2 == 0 || n%3 == 0
							part := sides[i].read
							if write {
								part = sides[i].write
							}
							ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
							start := time.Now()
							o, err := part.Lock(ctx)
							cancel()
							if err != nil {
								t.Errorf("process %d (write %v): Lock: %v", i, write, err)
								return
							}
							w := 0
							if write {
								w = 1
							}
							if d := int64(time.Since(start)); d > maxWait[i][w].Load() {
								maxWait[i][w].Store(d)
							}
							acq[i][w].Add(1)
							if write {
								if writers.Add(1) > 1 || readers.Load() > 0 {
									bad.Add(1)
								}
								tok, _ := part.FencingToken(o)
								same := 0 // (the owners of one semaphore holding share its token: equal is in order)
								if kind == "Semaphore" {
									same = 1
								}
								if n, err := fencedScript.Run(context.Background(), admin, []string{fence}, tok, same).Int(); err == nil && n != 1 {
									stale.Add(1)
								}
							} else if r := readers.Add(1); writers.Load() > 0 || (kind == "Semaphore" && r > k) {
								bad.Add(1)
							}
							hold := time.Duration(rand.IntN(5000)) * time.Microsecond
							if n%9 == 8 {
								hold = lease * 3 / 4
							}
							select {
							case <-time.After(hold):
							case <-o.Done():
							}
							if write {
								writers.Add(-1)
							} else {
								readers.Add(-1)
							}
							// (a far process's release that got no answer while its lease lasted is
							// unconfirmed, as documented: a *RedisProcessError)
							var unconfirmed *dlock.RedisProcessError
							if err := o.Unlock(); err != nil && !errors.Is(err, dlock.ErrLockLost) && !(i == 0 && errors.As(err, &unconfirmed)) {
								t.Errorf("process %d: Unlock: %v", i, err)
							}
						}
					}()
				}
			}
			wg.Wait()
			close(stop)
			bg.Wait()
			for i := range watches {
				w := &watches[i]
				t.Logf("process %d (%s): writes %d (longest wait %v), reads %d (longest wait %v); belief checks %d, least margin %v, violations %d %s",
					i, []string{"far", "near"}[i], acq[i][1].Load(), time.Duration(maxWait[i][1].Load()).Round(time.Millisecond),
					acq[i][0].Load(), time.Duration(maxWait[i][0].Load()).Round(time.Millisecond),
					w.checks.Load(), time.Duration(w.minMargin.Load()).Round(time.Millisecond), w.violations.Load(), w.first)
				if w.violations.Load() != 0 {
					t.Errorf("process %d believed a holding beyond what Redis keeps: %d times; first: %s", i, w.violations.Load(), w.first)
				}
			}
			if bad.Load() != 0 || stale.Load() != 0 {
				t.Errorf("exclusion broken: %d entries beside a writer or beyond k, %d stale fenced writes", bad.Load(), stale.Load())
			}
			if acq[0][1].Load() == 0 || acq[0][0].Load() == 0 {
				t.Errorf("the far process was not served: writes %d, reads %d", acq[0][1].Load(), acq[0][0].Load())
			}
			held := cfg.SideKey(processor.SharedHeldSuffix)
			waitFor(t, func() bool { return admin.HLen(context.Background(), held).Val() == 0 })
		})
	}
}

// A holding of the read-write lock with less than half its lease left is renewed before it
// serves another goroutine, so that every acquisition starts with at least half its lease, as
// a mutex's Lock does: a second reader on a read-hold, a reader on an idle write-hold that
// its writer lets go, and the writer's own reader (a downgrade). (The semaphore lends its
// holdings through the same step.)
func TestRWLendsNoHoldingWithLessThanHalfItsLease(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	left := func(g *dlock.Generator, l *dlock.RWLock) time.Duration {
		var least time.Duration = -1
		for _, b := range g.SharedBelief(l.Config().UniqueKey()) {
			if d := time.Until(b.Until); least < 0 || d < least {
				least = d
			}
		}
		return least
	}
	for _, first := range []string{"reader", "writer", "downgrade"} {
		t.Run(first, func(t *testing.T) {
			g, _ := newGen(t, dlock.WithDefaultLease(lease))
			l := rwOf(t, g, target(t))
			// The first holding is let go past half its lease: a stall of the machine longer than
			// its renewal's spare time loses it, and the test then checks the rest only.
			stalls, since := watchStalls(t), time.Now()
			var o1 *dlock.Owner
			var err error
			if first == "reader" {
				o1, err = l.RLock(context.Background())
			} else {
				o1, err = l.Lock(context.Background())
			}
			if err != nil {
				t.Fatal(err)
			}
			type got struct {
				o   *dlock.Owner
				err error
			}
			second := make(chan got, 1)
			rlock := func() {
				o, err := l.RLock(context.Background())
				second <- got{o, err}
			}
			if first == "writer" {
				go rlock() // waits while the writer holds
			}
			// Past half the lease, before the renewal at three quarters of it.
			waitFor(t, func() bool { d := left(g, l); return d > 0 && d < lease/2-300*time.Millisecond })
			switch first {
			case "reader":
				go rlock()
			case "writer":
				if err := l.Unlock(o1); err != nil && !stalls.excused(t, err, since, lease, "the writer's Unlock") {
					t.Fatal(err)
				}
			case "downgrade":
				o, err := l.RLock(o1)
				second <- got{o, err}
			}
			r := recv(t, second, "the second acquisition")
			if r.err != nil {
				t.Fatal(r.err)
			}
			if d := left(g, l); d < lease/2-150*time.Millisecond {
				t.Fatalf("the reader was lent a holding with %v of its %v lease left; want at least half", d, lease)
			}
			if err := l.Unlock(r.o); err != nil {
				t.Fatal(err)
			}
			if first != "writer" {
				if err := l.Unlock(o1); err != nil && !stalls.excused(t, err, since, lease, "the first holding's Unlock") {
					t.Fatal(err)
				}
			}
		})
	}
}

// A downgrade whose renewal (the write-hold had less than half its lease) finds the write-hold
// gone reports the loss, as a downgrade of an owner known lost does, through the owner or a
// context that keeps its values but not its end: it takes no read side afresh.
func TestRWDowngradeThatFindsTheWriteHoldLostSaysSo(t *testing.T) {
	for _, mode := range []string{"owner", "without its end"} {
		t.Run(mode, func(t *testing.T) {
			const lease = 2 * time.Second
			g, c := newGen(t, dlock.WithDefaultLease(lease))
			tg := uniqueTarget(t)
			l := rwOf(t, g, tg)
			ctx := context.Background()
			w, err := l.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			left := func() time.Duration {
				var least time.Duration = -1
				for _, b := range g.SharedBelief(l.Config().UniqueKey()) {
					if d := time.Until(b.Until); least < 0 || d < least {
						least = d
					}
				}
				return least
			}
			waitFor(t, func() bool { d := left(); return d > 0 && d < lease/2-300*time.Millisecond })
			keys, _ := c.Keys(ctx, "{"+l.Config().UniqueKey()+"}:shared:*").Result()
			c.Del(ctx, keys...) // the write-hold is gone in Redis: its renewal says so
			rctx := context.Context(w)
			if mode != "owner" {
				rctx = context.WithoutCancel(w)
			}
			r, err := l.RLock(rctx)
			if err == nil {
				_ = l.Unlock(r)
				t.Fatalf("the downgrade took a read side (the write side: %v), want ErrLockLost", context.Cause(w))
			}
			if !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("downgrade = %v, want ErrLockLost", err)
			}
		})
	}
}

// After a restart that lost a read-write lock's holding, a late copy of its take (go-redis
// sends a request again after a read timeout) takes it anew under the same locker, though a
// writer of another process held the lock in between: the holder's next renewal names the
// token the holding was taken with, finds another, and ends the holding as lost, letting the
// new one go; the writer takes the lock again.
func TestRWHoldingTakenAnewIsALoss(t *testing.T) {
	g, c := newGen(t) // a 1 s lease
	gb, _ := newGen(t)
	w := newWire(t, c)
	tg := uniqueTarget(t)
	l, lb := rwOf(t, g, tg), rwOf(t, gb, tg)
	ctx := ctxT(t, 30*time.Second)
	o, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var take *sentCmd
	for _, s := range w.copies("shared") {
		if sharedArg(s.args, "op") == "take" {
			take = &s
		}
	}
	if take == nil {
		t.Fatal("no take sent")
	}
	rc := rawClient(t)
	rc.Del(ctx, rc.Keys(ctx, "*"+l.Config().UniqueKey()+"*").Val()...) // an empty restart
	ob, err := lb.Lock(ctx)                                            // a writer holds it meanwhile
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	w.send(*take) // the late copy of the reader's take
	select {
	case <-o.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the reader was never told it lost the lock")
	}
	if !errors.Is(context.Cause(o), dlock.ErrLockLost) {
		t.Fatalf("the reader's cause = %v, want ErrLockLost", context.Cause(o))
	}
	ob, err = lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("the reader's Unlock = %v, want ErrLockLost", err)
	}
}

// A lost holding stays lost for its owner across the sides too: a downgrade (RLock) by the
// owner of a write-hold that was lost, and a Lock by the owner of a lost read-hold, return the
// loss (ErrLockLost), as a re-entry of the same side and the mutex's Lock with a lost owner
// do; they returned ErrNotObtained with context.Canceled (the owner context's own end), as if
// the owner were a caller's context that had ended. Found by TestChurnWithForceRelease.
func TestRWLossStaysLostForTheOtherSide(t *testing.T) {
	g, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	l := rwOf(t, g, tg)
	for _, write := range []bool{true, false} {
		o, err := lockSide(ctx, l, write)
		if err != nil {
			t.Fatal(err)
		}
		st, err := l.State(ctx)
		if err != nil || len(st.Holds) != 1 {
			t.Fatalf("State: %+v, %v", st, err)
		}
		if ok, err := l.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
			t.Fatalf("ForceRelease = %v, %v", ok, err)
		}
		select {
		case <-o.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("the loss was never told")
		}
		if cause := context.Cause(o); !errors.Is(cause, dlock.ErrLockLost) {
			t.Fatalf("write %v: owner context %v after a ForceRelease, want ErrLockLost", write, cause)
		}
		if _, err := lockSide(o, l, !write); !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("write %v: taking the other side with the lost owner: %v, want ErrLockLost", write, err)
		}
		if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("write %v: Unlock of the lost owner: %v", write, err)
		}
	}
}

// A ForceRelease of the read-hold a downgrade made, while the downgrade's answer is lost (its
// outcome unknown to the process, sent again until known), ends the downgraded reader: at
// once when this process forces it, as it ends any holding it names (the holding's pending
// locker is the one removed); when another process does, as the downgrade, sent again, finds
// its locker settled. Either way the reader's Unlock says ErrLockLost, also one that comes
// before the downgrade is answered (the holding it lets go is the downgrade's, found gone).
func TestRWForceOfADowngradeWhoseAnswerWasLostEndsItsReader(t *testing.T) {
	for _, elsewhere := range []bool{false, true} {
		t.Run(fmt.Sprint("elsewhere=", elsewhere), func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			c := srv.Client()
			armed, open := loseThenHoldTakes(c) // the downgrade's reply lost, its re-sends held back
			var opened sync.Once
			defer opened.Do(open)
			g := genOn(t, c, dlock.WithDefaultLease(time.Minute)) // renewals 45 s apart: the test's 15 s see none
			tg := uniqueTarget(t)
			l, op := rwOf(t, g, tg), rwOf(t, g, tg)
			if elsewhere {
				other, _ := newGen(t)
				op = rwOf(t, other, tg)
			}
			r, unlocked := readerOfADowngrade(t, ctx, l, armed)
			var downTo string
			waitFor(t, func() bool {
				_, downTo, _, _, _ = dlock.SharedOwned(r)
				return downTo != "" && armed.Load() == 2
			})
			st, err := op.State(ctx)
			if err != nil || len(st.Holds) != 1 || st.Holds[0].Locker != downTo {
				t.Fatalf("State %+v, %v: want the downgrade's read-hold under %q", st, err, downTo)
			}
			if ok, err := op.ForceRelease(ctx, downTo); !ok || err != nil {
				t.Fatalf("ForceRelease(%q) = %v, %v", downTo, ok, err)
			}
			if elsewhere {
				done := make(chan error, 1)
				go func() { done <- l.Unlock(r) }()
				opened.Do(open) // (the downgrade's re-sends go: its answer comes, before or after the Unlock)
				if err := recv(t, done, "the Unlock"); !errors.Is(err, dlock.ErrLockLost) {
					t.Fatalf("Unlock of the reader whose downgrade's holding was removed elsewhere: %v, want ErrLockLost", err)
				}
				if err := recv(t, unlocked, "the writer's Unlock"); err != nil {
					t.Fatal(err)
				}
				return
			}
			select {
			case <-r.Done():
			case <-time.After(15 * time.Second):
				t.Fatal("the downgraded reader was not told its holding was removed")
			}
			if cause := context.Cause(r); !errors.Is(cause, dlock.ErrLockLost) {
				t.Fatalf("the reader's context ended with %v, want ErrLockLost", cause)
			}
			if err := l.Unlock(r); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("Unlock of the removed reader: %v, want ErrLockLost", err)
			}
			if err := recv(t, unlocked, "the writer's Unlock"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A process whose ask does not fit gets in beside processes that each keep their holding busy
// (a goroutine on it, another queued: no holding ever goes idle unless its process is told that
// someone waits). Holders that do not listen hear no W: only the waiting flag of their renewals'
// and takes' replies tells them, which counts a process in line only while its permits do not
// fit (a holder that ignored its renewals' flag kept lending to the end: the wait ran out). A
// waiter that does not listen is told nothing either, and asks every sixth of the lease.
func TestFamilyWaiterGetsInBesideBusyHolders(t *testing.T) {
	type parts struct {
		name      string
		hold, ask func(g *dlock.Generator, tg string) dlock.Part
	}
	sem := func(n int) func(g *dlock.Generator, tg string) dlock.Part {
		return func(g *dlock.Generator, tg string) dlock.Part { return semOf(t, g, tg, 3).Permits(n) }
	}
	read := func(g *dlock.Generator, tg string) dlock.Part { return rwOf(t, g, tg).ReadSide() }
	write := func(g *dlock.Generator, tg string) dlock.Part { return rwOf(t, g, tg).WriteSide() }
	for _, p := range []parts{{"Semaphore", sem(1), sem(2)}, {"WriterBesideReaders", read, write}, {"ReaderBesideWriters", write, read}} {
		for _, deafHolders := range []bool{true, false} {
			t.Run(p.name+map[bool]string{true: "/DeafHolders", false: "/DeafWaiter"}[deafHolders], func(t *testing.T) {
				tg := uniqueTarget(t)
				ctx := ctxT(t, 60*time.Second)
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var turns atomic.Int64
				for range 3 {
					g, _ := newGen(t, dlock.WithNotifications(!deafHolders))
					part := p.hold(g, tg)
					for range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								select {
								case <-stop:
									return
								default:
								}
								o, err := part.Lock(ctx)
								if err != nil {
									t.Errorf("a holder: %v", err)
									return
								}
								turns.Add(1)
								time.Sleep(2 * time.Millisecond)
								_ = o.Unlock()
							}
						}()
					}
				}
				defer func() { close(stop); wg.Wait() }()
				waitFor(t, func() bool { return turns.Load() >= 20 })
				g, _ := newGen(t, dlock.WithNotifications(deafHolders))
				wctx, cancel := context.WithTimeout(ctx, 15*time.Second) // 15 leases
				defer cancel()
				o, err := p.ask(g, tg).Lock(wctx)
				if err != nil {
					t.Fatalf("the waiter beside busy holders: %v", err)
				}
				_ = o.Unlock()
			})
		}
	}
}

// Every process is served by the family in its turn, as by the mutex (TestEveryProcessServed):
// over two seconds of contention (and at least 40 turns a process), processes that do the
// same get shares of the turns within a quarter of their mean — writers passing one write-hold
// among several goroutines of their process, readers and writers of three processes side by
// side, a process that asks 3 of 4 permits among processes that ask 1 (the line serves
// processes in order: the smaller asks behind it wait), MultiLocks of a permit and the write
// side beside single-part callers on the same keys — and no wait outlasts the test (a hang).
// Shares compare turns, not speed.
func TestFamilyEveryProcessServed(t *testing.T) {
	type proc struct {
		role       string // processes of one role are compared
		goroutines int
		lock       func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error)
	}
	write := func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error) {
		return rwOf(t, g, tg).Lock
	}
	read := func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error) {
		return rwOf(t, g, tg).RLock
	}
	permits := func(k, n int) func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error) {
		return func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error) {
			s := semOf(t, g, tg, k)
			return func(ctx context.Context) (*dlock.Owner, error) { return s.Acquire(ctx, n) }
		}
	}
	multi := func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error) {
		m, err := g.MultiOf(semOf(t, g, tg+"-s", 1).Permits(1), rwOf(t, g, tg+"-r").WriteSide())
		if err != nil {
			t.Fatal(err)
		}
		return m.Lock
	}
	onKey := func(suffix string, f func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error)) func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error) {
		return func(g *dlock.Generator, tg string) func(ctx context.Context) (*dlock.Owner, error) {
			return f(g, tg+suffix)
		}
	}
	cases := []struct {
		name  string
		procs [][]proc // each process's goroutines
	}{
		{"Writers", [][]proc{{{"w", 2, write}}, {{"w", 2, write}}, {{"w", 2, write}}, {{"w", 2, write}}}},
		{"ReadersAndWriters", [][]proc{
			{{"r", 2, read}, {"w", 1, write}}, {{"r", 2, read}, {"w", 1, write}}, {{"r", 2, read}, {"w", 1, write}},
		}},
		{"ThreeOfFourPermitsAmongOnes", [][]proc{
			{{"p", 1, permits(4, 3)}}, {{"p", 2, permits(4, 1)}}, {{"p", 2, permits(4, 1)}}, {{"p", 2, permits(4, 1)}},
		}},
		{"MultiLocksBesideSingleParts", [][]proc{
			{{"p", 1, multi}}, {{"p", 1, multi}}, {{"p", 1, onKey("-s", permits(1, 1))}}, {{"p", 1, onKey("-r", write)}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg := uniqueTarget(t)
			ctx := ctxT(t, 40*time.Second)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			type count struct {
				role  string
				turns atomic.Int64
			}
			var counts []*count
			stalls := watchStalls(t)
			for _, p := range c.procs {
				g, _ := newGen(t)
				for _, r := range p {
					n := &count{role: r.role}
					counts = append(counts, n)
					lock := r.lock(g, tg)
					for range r.goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								select {
								case <-stop:
									return
								default:
								}
								since := time.Now()
								o, err := lock(ctx)
								if err != nil {
									t.Errorf("a %s of a process: %v", r.role, err)
									return
								}
								n.turns.Add(1)
								time.Sleep(time.Millisecond)
								if err := o.Unlock(); err != nil && !stalls.excused(t, err, since, time.Second, "Unlock") {
									t.Errorf("Unlock: %v", err)
								}
							}
						}()
					}
				}
			}
			// two seconds, and on a loaded machine until each role has had 40 turns a
			// process (a share of a handful of turns says little), 15 s at most
			for start := time.Now(); time.Since(start) < 15*time.Second; {
				time.Sleep(100 * time.Millisecond)
				total, procs := map[string]int64{}, map[string]int64{}
				for _, n := range counts {
					total[n.role] += n.turns.Load()
					procs[n.role]++
				}
				enough := time.Since(start) >= 2*time.Second
				for role := range total {
					enough = enough && total[role] >= 40*procs[role]
				}
				if enough {
					break
				}
			}
			close(stop)
			wg.Wait()
			total, procs := map[string]int64{}, map[string]int64{}
			var shares []string
			for _, n := range counts {
				total[n.role] += n.turns.Load()
				procs[n.role]++
				shares = append(shares, n.role+"="+strconv.FormatInt(n.turns.Load(), 10))
			}
			t.Logf("turns by process: %v", shares)
			for _, n := range counts {
				if mean := total[n.role] / procs[n.role]; n.turns.Load() < mean/4 || mean == 0 {
					t.Errorf("a process had %d turns as %s, the mean is %d", n.turns.Load(), n.role, mean)
				}
			}
		})
	}
}

// rwSpan is a time an owner of a read-write lock held it, live from start to end.
type rwSpan struct {
	from, to time.Time
	write    bool
	token    uint64
	proc     int
}

// Under a faulty network — writes delivered twice, replies lost, requests kept on the wire
// and run late — with waits of a few milliseconds, tries, downgrades and one process closed
// in the middle, the read-write lock never has a writer beside another live owner, its
// writers' tokens rise in the order they held it, it fails only with the documented errors,
// and it leaves nothing behind.
func TestRWUnderDuplicatedLateAndLostWrites(t *testing.T) {
	const lease = 300 * time.Millisecond
	tg := uniqueTarget(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var hooks []*chaosHook
	var gens []*dlock.Generator
	var locks []*dlock.RWLock
	for i := range 4 {
		h := newChaosHook(lease, 10, seed+uint64(i))
		hooks = append(hooks, h)
		g := chaosGen(t, h)
		gens = append(gens, g)
		locks = append(locks, rwOf(t, g, tg))
	}
	var mu sync.Mutex
	var spans []rwSpan
	var bad atomic.Int64
	fail := func(format string, args ...any) {
		if bad.Add(1) <= 10 {
			t.Errorf(format, args...)
		}
	}
	check := func(err error, what string, p int) {
		if err != nil && (!documentedErr(err) || errors.Is(err, dlock.ErrInvalidConfig) || errors.Is(err, dlock.ErrNotHeld)) {
			fail("process %d: %s: %v", p, what, err)
		}
		if errors.Is(err, dlock.ErrClosed) && p != 3 {
			fail("process %d (not closed): %s: %v", p, what, err)
		}
	}
	record := func(p int, o *dlock.Owner, from time.Time, write bool, token uint64) {
		to := time.Now()
		if o.Err() == nil {
			mu.Lock()
			spans = append(spans, rwSpan{from, to, write, token, p})
			mu.Unlock()
		}
	}
	stopAt := time.Now().Add(2 * time.Second)
	var closed atomic.Bool
	var acquired, short atomic.Int64
	var wg sync.WaitGroup
	for p, l := range locks {
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(p*10+w)))
				for i := 0; time.Now().Before(stopAt); i++ {
					if p == 3 && closed.Load() {
						return
					}
					write := rng.IntN(3) == 0
					d := 3 * time.Second
					if rng.IntN(4) == 0 {
						d = time.Duration(rng.IntN(4)) * time.Millisecond // 0-3 ms
					}
					ctx, cancel := context.WithTimeout(context.Background(), d)
					var o *dlock.Owner
					var err error
					switch ok := true; rng.IntN(5) {
					case 0:
						if write {
							o, ok, err = l.TryLock(ctx)
						} else {
							o, ok, err = l.TryRLock(ctx)
						}
						if err == nil && !ok {
							cancel()
							continue
						}
					default:
						o, err = lockSide(ctx, l, write)
					}
					cancel()
					if err != nil {
						if d < time.Second && errors.Is(err, dlock.ErrNotObtained) {
							short.Add(1)
						} else if d >= time.Second && errors.Is(err, dlock.ErrNotObtained) {
							fail("process %d: a wait of %v in vain: %v", p, d, err)
						}
						check(err, "Lock", p)
						continue
					}
					acquired.Add(1)
					from := time.Now()
					tok, _ := l.FencingToken(o)
					time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
					if write && rng.IntN(3) == 0 {
						// a downgrade: read on, then let the write side go
						r, err := l.RLock(o)
						if err != nil {
							check(err, "RLock of a write owner", p)
							record(p, o, from, true, tok)
							check(l.Unlock(o), "Unlock", p)
							continue
						}
						record(p, o, from, true, tok)
						check(l.Unlock(o), "Unlock of the write side", p) // (o's innermost: the write side)
						from = time.Now()
						rtok, _ := l.FencingToken(r)
						time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
						record(p, r, from, false, rtok)
						check(l.Unlock(r), "Unlock of the downgrade's read side", p)
						continue
					}
					record(p, o, from, write, tok)
					check(l.Unlock(o), "Unlock", p)
				}
			}()
		}
	}
	time.Sleep(time.Second)
	closed.Store(true)
	if err := gens[3].Close(context.Background()); err != nil {
		t.Errorf("Close in the middle: %v", err)
	}
	wg.Wait()
	for _, h := range hooks {
		h.quiet()
	}
	// exclusion: a writer's span overlaps no other live owner's span
	for i, a := range spans {
		if !a.write {
			continue
		}
		for j, b := range spans {
			if i != j && a.from.Before(b.to) && b.from.Before(a.to) {
				fail("writer of process %d (token %d) held %v..%v beside a %s of process %d (token %d) %v..%v",
					a.proc, a.token, a.from.Sub(spans[0].from), a.to.Sub(spans[0].from),
					map[bool]string{true: "writer", false: "reader"}[b.write], b.proc, b.token, b.from.Sub(spans[0].from), b.to.Sub(spans[0].from))
			}
		}
	}
	// tokens rise with the order of the writers
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.write && b.write && (a.from.Before(b.from) != (a.token < b.token)) {
				fail("writers out of token order: %d from %v, %d from %v", a.token, a.from, b.token, b.from)
			}
		}
	}
	t.Logf("%d acquisitions (%d short waits ran out), %d live spans checked", acquired.Load(), short.Load(), len(spans))
	admin := rawClient(t)
	cfg := locks[0].Config()
	waitFor(t, func() bool {
		return admin.Exists(context.Background(), cfg.SideKey(processor.SharedHeldSuffix), cfg.SideKey(processor.SharedLineSuffix)).Val() == 0
	})
	if ks := keysWithoutTTL(t, admin); len(ks) > 0 {
		t.Errorf("keys without a time to live: %v", ks)
	}
}

// giveBackHold watches a client's family requests: the write-take's locker (the writer's
// attempt), the renewals, and the give-backs of that locker that reach Redis; once armed, the
// next give-back is held (after a word on blocked, if given) until its context ends, as a
// request waiting for a connection is, and so never sent (a word on cut then).
type giveBackHold struct {
	mu        sync.Mutex
	writer    string    // the writer's attempt's locker
	lastRenew time.Time // when a renewal was last sent
	cut       chan struct{}
	armed     atomic.Bool
	giveBacks atomic.Int64 // of the writer's locker, that reached Redis
}

func holdGiveBack(c *redis.Client, blocked chan<- struct{}) *giveBackHold {
	h := &giveBackHold{cut: make(chan struct{}, 1)}
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		a := cmd.Args()
		h.mu.Lock()
		switch sharedArg(a, "op") {
		case "take":
			if sharedArg(a, "n") == strconv.FormatInt(processor.RWPermits, 10) {
				h.writer = sharedArg(a, "locker")
			}
		case "renew":
			h.lastRenew = time.Now()
		case "release":
			if sharedArg(a, "locker") == h.writer {
				h.mu.Unlock()
				if h.armed.CompareAndSwap(true, false) {
					if blocked != nil {
						blocked <- struct{}{}
					}
					<-ctx.Done()
					h.cut <- struct{}{}
					cmd.SetErr(ctx.Err())
					return ctx.Err()
				}
				h.giveBacks.Add(1)
				return next(ctx, cmd)
			}
		}
		h.mu.Unlock()
		return next(ctx, cmd)
	}})
	return h
}

// renewed marks a renewal (or a take) sent now.
func (h *giveBackHold) renewed() {
	h.mu.Lock()
	h.lastRenew = time.Now()
	h.mu.Unlock()
}

// sinceRenewal is the time since the last renewal marked.
func (h *giveBackHold) sinceRenewal() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Since(h.lastRenew)
}

// A writer that gives up takes its process out of line even when the give-back's request is
// cut short for a renewal due and never reaches Redis (it waited for a connection): the
// give-back is sent again after the renewal, as a release cut short is (a regression test: it
// was dropped, and the process's writer entry held off every other process's readers until it
// expired).
func TestRWWriterThatGivesUpLeavesTheLineWhenItsGiveBackIsCutShort(t *testing.T) {
	const lease = 3 * time.Second
	c := srv.Client()
	gb := holdGiveBack(c, nil)
	g := genOn(t, c, dlock.WithDefaultLease(lease))
	l := rwOf(t, g, uniqueTarget(t))
	ctx := ctxT(t, 30*time.Second)
	r, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gb.renewed() // (the read-hold's take)
	wctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gaveUp := make(chan error, 1)
	go func() {
		_, err := l.Lock(wctx) // behind its own reader: it stands in line at once
		gaveUp <- err
	}()
	waitFor(t, func() bool {
		st, err := l.State(ctx)
		return err == nil && len(st.Waiting) == 1 && st.Waiting[0].Write
	})
	// The writer gives up half a lease after the read-hold's last renewal: the next is due in
	// a quarter of the lease, sooner than a request's own bound (a third), so the give-back
	// is cut short to make way for it.
	waitFor(t, func() bool {
		since := gb.sinceRenewal()
		return since >= lease*45/100 && since <= lease*55/100
	})
	gb.armed.Store(true)
	giveUp()
	if err := recv(t, gaveUp, "the writer giving up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the writer after its context ended: %v", err)
	}
	recv(t, gb.cut, "the give-back cut short")
	if !rgWaitUntil(15*time.Second, func() bool { return gb.giveBacks.Load() > 0 }) {
		t.Fatal("the give-back cut short was never sent again")
	}
	st, err := l.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Waiting) != 0 {
		t.Fatalf("the process of a writer that gave up is still in line: %+v", st.Waiting)
	}
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A writer that gave up is taken out of line even when Close cuts its give-back short before
// it reaches Redis (it waited for a connection): the give-back goes again with Close's
// clean-up, as a holding's release cut short by Close does (a regression test: it was
// dropped, and the process's writer entry stayed in line after Close, until it expired).
func TestRWWriterThatGivesUpLeavesTheLineWhenCloseCutsItsGiveBackShort(t *testing.T) {
	const lease = 30 * time.Second // (no request's own bound, nor a renewal, cuts the give-back short first)
	c := srv.Client()
	blocked := make(chan struct{}, 1)
	gb := holdGiveBack(c, blocked)
	g := genOn(t, c, dlock.WithDefaultLease(lease))
	l := rwOf(t, g, uniqueTarget(t))
	ctx := ctxT(t, 60*time.Second)
	r, err := l.RLock(ctx) // (kept: an Owner dropped is released, and the writer would not wait)
	if err != nil {
		t.Fatal(err)
	}
	wctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gaveUp := make(chan error, 1)
	go func() {
		_, err := l.Lock(wctx) // behind its own reader: it stands in line at once
		gaveUp <- err
	}()
	waitFor(t, func() bool {
		st, err := l.State(ctx)
		return err == nil && len(st.Waiting) == 1 && st.Waiting[0].Write
	})
	gb.armed.Store(true)
	giveUp()
	if err := recv(t, gaveUp, "the writer giving up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the writer after its context ended: %v", err)
	}
	recv(t, blocked, "the give-back on its way")
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(r), dlock.ErrClosed) {
		t.Fatalf("the reader after Close: %v, want ErrClosed", context.Cause(r))
	}
	recv(t, gb.cut, "the give-back cut short")
	if gb.giveBacks.Load() == 0 {
		t.Fatal("the give-back that Close cut short was not sent again")
	}
	line := "{" + l.Config().UniqueKey() + "}:shared:line"
	if n, err := rawClient(t).ZCard(context.Background(), line).Result(); err != nil || n != 0 {
		t.Fatalf("after Close, %d processes in line (%v), want none", n, err)
	}
}

// A writer that gives up lets go of what its attempt took even when Redis fails its give-back
// for a while: the take ran and its reply was lost, the process's link to Redis then failed
// (every request errs at once) until the waiter's context ended and the give-back's tries
// were spent. The give-back goes again until Redis answers, as the mutex's does (a regression
// test: it was dropped, and the write-hold nobody had stayed in Redis for its lease, shutting
// out every other process).
func TestRWWriterThatGivesUpLetsGoWhenItsGiveBackFails(t *testing.T) {
	const lease = 30 * time.Second // (the write-hold nobody has outlives the test)
	const (
		healthy  = iota
		loseTake // the next take runs, its reply is lost, and the link fails
		linkDown // every request of the lock fails at once, without reaching Redis
	)
	var mode atomic.Int32
	var failedGiveBacks atomic.Int64
	c := srv.Client()
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		a := cmd.Args()
		op := sharedArg(a, "op")
		switch {
		case op == "":
		case mode.Load() == loseTake && op == "take":
			if err := next(ctx, cmd); err != nil {
				return err
			}
			mode.Store(linkDown)
			cmd.SetErr(injectedTimeout{}) // the write-hold is taken; the reply is lost
			return cmd.Err()
		case mode.Load() == linkDown:
			if op == "release" {
				failedGiveBacks.Add(1)
			}
			err := errors.New("read: connection reset by peer (injected)")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}})
	ga := genOn(t, c, dlock.WithDefaultLease(lease))
	gb, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	la, lb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	ctx := ctxT(t, 60*time.Second)
	warm, err := la.RLock(ctx) // (the script loaded, a connection made)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(); err != nil {
		t.Fatal(err)
	}
	mode.Store(loseTake)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second) // (room for a loaded machine to send the take first)
	defer cancel()
	if _, err := la.Lock(wctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the writer whose take's reply was lost, its link down: %v", err)
	}
	if mode.Load() != linkDown {
		t.Fatal("setup: the writer's take never ran")
	}
	waitFor(t, func() bool { return failedGiveBacks.Load() >= 3 }) // (its tries spent)
	mode.Store(healthy)
	o, err := lb.Lock(ctxT(t, 10*time.Second)) // (a hang made a failure: the write-hold lives a lease)
	if err != nil {
		st, _ := lb.State(ctx)
		t.Fatalf("another process's writer, once the link is back: %v (holdings %+v)", err, st.Holds)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A context of the write owner's that ended re-enters nothing: neither the write side nor,
// through a downgrade, the read side (which would lend a hold to an Owner done at once).
func TestRWDowngradeWithAnEndedContextLendsNothing(t *testing.T) {
	g, _ := newGen(t)
	rw, err := g.GenRW("REV", target(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rw.Unlock(w) }()
	ended, cancel := context.WithCancel(w)
	cancel()
	if _, err := rw.Lock(ended); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("write re-entry with an ended context = %v; want ErrNotObtained", err)
	}
	r, err := rw.RLock(ended)
	if err == nil {
		defer func() { _ = rw.Unlock(r) }()
		t.Fatalf("RLock (downgrade) with an ended context of the write owner's succeeded (Owner ended at once: %v); re-entry with the same context is refused", r.Err() != nil)
	}
}

// A fresh write-hold that serves a reader of its process first (the writer it was asked for
// gave up while its take was on its way) gives that reader its first token; the writer it
// serves next must not get the same one: every acquisition's token is above every earlier
// one's (fencing.md), and a reader that noted its token must see a later write as later.
func TestRWWriterAfterAReaderOfAFreshWriteHoldHasALargerToken(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	c := srv.Client()
	var armed atomic.Bool
	ran, gate := make(chan struct{}), make(chan struct{})
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !isSharedTake(cmd.Args()) || !armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd) // the write-hold is taken in Redis; its answer held back
		close(ran)
		<-gate
		return err
	}})
	g := genOn(t, c, dlock.WithDefaultLease(time.Minute))
	l := rwOf(t, g, uniqueTarget(t))

	armed.Store(true)
	wctx, wcancel := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() {
		o, err := l.Lock(wctx)
		if err == nil {
			_ = o.Unlock()
		}
		werr <- err
	}()
	<-ran
	wcancel() // the writer gives up while its take's answer is on its way
	if err := <-werr; err == nil {
		t.Fatal("the writer got the lock after its context ended")
	}
	type got struct {
		o   *dlock.Owner
		err error
	}
	reader := make(chan got, 1)
	go func() {
		o, err := l.RLock(ctx)
		reader <- got{o, err}
	}()
	for g.SharedWaiters(l.Config().UniqueKey()) < 1 {
		if ctx.Err() != nil {
			t.Fatal("the reader never waited")
		}
		time.Sleep(time.Millisecond)
	}
	writer := make(chan got, 1)
	go func() {
		o, err := l.Lock(ctx)
		writer <- got{o, err}
	}()
	for g.SharedWaiters(l.Config().UniqueKey()) < 2 {
		if ctx.Err() != nil {
			t.Fatal("the second writer never waited")
		}
		time.Sleep(time.Millisecond)
	}
	close(gate) // the write-hold comes: to the reader, first in the process's queue
	r := <-reader
	if r.err != nil {
		t.Fatal(r.err)
	}
	rtok, ok := l.FencingToken(r.o)
	if !ok {
		t.Fatal("the reader holds no token")
	}
	if err := r.o.Unlock(); err != nil {
		t.Fatal(err)
	}
	w := <-writer
	if w.err != nil {
		t.Fatal(w.err)
	}
	defer w.o.Unlock()
	wtok, _ := l.FencingToken(w.o)
	if wtok <= rtok {
		t.Fatalf("the writer after the reader has token %d, the reader had %d", wtok, rtok)
	}
}

// The same when the force lands while the downgrade's answer is on its way (it ran in Redis):
// the reader is told at once, the answer that comes after (taken) takes nothing back, and
// once the reader lets go nothing of the process is left in Redis: a writer elsewhere gets in.
func TestRWForceOfADowngradeWhoseAnswerIsOnItsWayEndsItsReaderAndLeavesNothingHeld(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c := srv.Client()
	var armed atomic.Int32 // 1: hold back the next take's reply (it ran); 2: done
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !isSharedTake(cmd.Args()) || !armed.CompareAndSwap(1, 2) {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		select { // the downgrade ran; its reply is on its way
		case <-gate:
		case <-ctx.Done():
		}
		return err
	}})
	g := genOn(t, c, dlock.WithDefaultLease(time.Minute))
	g2, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	tg := uniqueTarget(t)
	l, l2 := rwOf(t, g, tg), rwOf(t, g2, tg)
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.RLock(w)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(1)
	unlocked := unlockInBackground(l, w) // (it waits for the downgrade's answer)
	var downTo string
	waitFor(t, func() bool {
		_, downTo, _, _, _ = dlock.SharedOwned(r)
		return downTo != "" && armed.Load() == 2
	})
	waitFor(t, func() bool { // (the take ran before the hook holds its reply)
		st, err := l.State(ctx)
		return err == nil && len(st.Holds) == 1 && st.Holds[0].Locker == downTo
	})
	if ok, err := l.ForceRelease(ctx, downTo); !ok || err != nil {
		t.Fatalf("ForceRelease(%q) = %v, %v", downTo, ok, err)
	}
	select {
	case <-r.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the downgraded reader was not told its holding was removed")
	}
	open() // the downgrade's answer (taken) comes after the force
	if err := l.Unlock(r); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock of the removed reader: %v, want ErrLockLost", err)
	}
	if err := recv(t, unlocked, "the writer's Unlock"); err != nil {
		t.Fatal(err)
	}
	w2, err := l2.Lock(ctx) // nothing of the first process is left in Redis
	if err != nil {
		t.Fatal(err)
	}
	if st, err := l.State(ctx); err != nil || len(st.Holds) != 1 || st.Holds[0].Locker == downTo {
		t.Fatalf("State %+v, %v: want the other process's write-hold only", st, err)
	}
	if err := l2.Unlock(w2); err != nil {
		t.Fatal(err)
	}
}

// A ForceRelease in this Generator whose reply is lost (the script ran), of the read-hold a
// downgrade made while the downgrade's answer (taken: it ran before the force) is on its way,
// has the downgraded holding ask Redis at once once that answer comes: the answer says nothing
// of the force, and the reader must not count itself held until the holding's next renewal
// (45 s on) beside a writer of another process.
func TestRWForceWhoseReplyIsLostOfADowngradeWhoseAnswerIsOnItsWayEndsItsReader(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	c := srv.Client()
	var armed atomic.Int32 // 1: hold back the next take's reply (it ran); 2: done
	var forces atomic.Int32
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if sharedArg(cmd.Args(), "op") == "force" && forces.Add(1) == 1 {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			cmd.SetErr(injectedTimeout{}) // it ran; its reply is lost
			return cmd.Err()
		}
		if !isSharedTake(cmd.Args()) || !armed.CompareAndSwap(1, 2) {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		select { // the downgrade ran; its reply is on its way
		case <-gate:
		case <-ctx.Done():
		}
		return err
	}})
	g := genOn(t, c, dlock.WithDefaultLease(time.Minute))
	g2, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	tg := uniqueTarget(t)
	l, l2 := rwOf(t, g, tg), rwOf(t, g2, tg)
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return g.Confirmed() >= 1 }) // (a confirmation later would renew at once)
	r, err := l.RLock(w)
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(1)
	unlocked := unlockInBackground(l, w) // (it waits for the downgrade's answer)
	var downTo string
	waitFor(t, func() bool {
		_, downTo, _, _, _ = dlock.SharedOwned(r)
		return downTo != "" && armed.Load() == 2
	})
	waitFor(t, func() bool { // (the take ran before the hook holds its reply)
		st, err := l.State(ctx)
		return err == nil && len(st.Holds) == 1 && st.Holds[0].Locker == downTo
	})
	if _, err := l.ForceRelease(ctx, downTo); err == nil {
		t.Fatal("setup: the ForceRelease's reply was not lost")
	}
	w2, ok, err := l2.TryLock(ctx) // a writer of another process gets in
	if err != nil || !ok {
		t.Fatalf("the other process's TryLock = %v, %v", ok, err)
	}
	defer w2.Unlock()
	open() // the downgrade's answer (taken) comes after the force
	if !rgWaitUntil(15*time.Second, func() bool { return errors.Is(context.Cause(r), dlock.ErrLockLost) }) {
		t.Fatalf("the downgraded reader still counts itself held beside another process's writer (cause %v)", context.Cause(r))
	}
	if err := l.Unlock(r); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock of the removed reader: %v, want ErrLockLost", err)
	}
	if err := recv(t, unlocked, "the writer's Unlock"); err != nil {
		t.Fatal(err)
	}
}

// A writer elsewhere that began to wait while a reader's take was on its way (the take ran
// before it, so the reply says nobody waits) still stops the reader's process from lending
// its read holding to more readers: the W heard meanwhile counts. A TryRLock of that process
// then finds the writer first in line.
func TestRWReaderTakeAnsweredAfterAWriterWaitsLendsNoMore(t *testing.T) {
	tg := uniqueTarget(t)
	ran, proceed := make(chan struct{}), make(chan struct{})
	var gated atomic.Bool
	ca := srv.Client()
	ca.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if sharedArg(cmd.Args(), "op") != "take" || !gated.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		close(ran)
		select { // the reply comes once the writer waits
		case <-proceed:
		case <-time.After(20 * time.Second):
		}
		return err
	}})
	ga := genOn(t, ca, dlock.WithDefaultLease(time.Minute))
	ga.SetLinger(time.Hour) // (its channel stays subscribed between its holdings)
	gb, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	ra, rb := rwOf(t, ga, tg), rwOf(t, gb, tg)
	key := ra.Config().UniqueKey()
	ctx := ctxT(t, 30*time.Second)
	o, err := ra.RLock(ctx) // A subscribes to its channel
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return ga.Confirmed() > 0 && ga.SharedInUse() == 0 })
	gated.Store(true)
	read := make(chan *dlock.Owner, 1)
	go func() {
		o, err := ra.RLock(ctx)
		if err != nil {
			t.Error(err)
		}
		read <- o
	}()
	recv(t, ran, "A's read take")
	wrote := make(chan error, 1)
	go func() {
		o, err := rb.Lock(ctx)
		if err == nil {
			err = o.Unlock()
		}
		wrote <- err
	}()
	for deadline := time.Now().Add(15 * time.Second); !ga.SharedWanted(key) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // until A heard B's W
	}
	heard := ga.SharedWanted(key)
	close(proceed)
	if !heard {
		t.Fatal("A did not hear that B waits")
	}
	o = recv(t, read, "A's RLock")
	if o == nil {
		t.FailNow()
	}
	if other, ok, err := ra.TryRLock(ctx); ok || err != nil {
		t.Errorf("A's second reader = %v, %v; want refused: a writer waits elsewhere", ok, err)
		if ok {
			_ = other.Unlock()
		}
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, wrote, "B's write Lock"); err != nil {
		t.Fatal(err)
	}
}
