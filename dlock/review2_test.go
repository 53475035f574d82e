package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// fnHook wraps every command with f.
type fnHook struct {
	f func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error
}

func (h fnHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h fnHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h.f(ctx, cmd, next) }
}
func (h fnHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func isScr2(args []any, words int) bool {
	if len(args) != words {
		return false
	}
	s, _ := args[0].(string)
	return s == "evalsha" || s == "eval"
}

const unmarkArgs = 3 + 1 + 1

// Found in the second review (1): rule 2 says handover.lua is safe to run twice. A yielding hand-over that runs twice
// (go-redis sends it again after a lost reply: read timeout, connection reset) finds the key
// gone on the second run and answers 0, which release reports as a loss: Unlock returns
// ErrLockLost and the owner context's cause says the lock was lost, although the first run
// released it properly.
func TestReview2YieldingHandOverRunTwiceIsReportedLost(t *testing.T) {
	ga, ca := newGen(t, dlock.WithLocalHandOff(time.Millisecond))
	gb, _ := newGen(t)
	lease := time.Second
	la, _ := ga.GenWithLease("R2Y", target(t), lease)
	lb, _ := gb.GenWithLease("R2Y", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	o1, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2 := make(chan error, 1)
	go func() {
		o, err := la.Lock(ctx)
		if err == nil {
			_ = la.Unlock(o)
		}
		a2 <- err
	}()
	b := make(chan error, 1)
	go func() {
		o, err := lb.Lock(ctx)
		if err == nil {
			time.Sleep(10 * time.Millisecond)
			_ = lb.Unlock(o)
		}
		b <- err
	}()
	for !ga.Waiters(la.Config().UniqueKey()) || !gb.Waiters(lb.Config().UniqueKey()) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // past the hand-off limit
	var twice atomic.Int32
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if err == nil && isScr2(cmd.Args(), handOverArgs) {
			twice.Add(1)
			err = next(ctx, cmd) // the client sends it again (its first reply was lost)
		}
		return err
	}})
	err = la.Unlock(o1)
	t.Logf("hand-overs run twice: %d; Unlock: %v; owner cause: %v", twice.Load(), err, context.Cause(o1))
	if <-a2 != nil || <-b != nil {
		t.Fatal("waiters failed")
	}
	if twice.Load() == 0 {
		t.Fatal("no hand-over was run twice")
	}
	if errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("a yielding hand-over run twice is reported as a loss: %v", err)
	}
}

// Found in the second review (2): a release whose reply is lost is said to be retried in the background until the lease
// runs out, but giveBack bounds its retries by 2 leases counted from the acquisition's
// LockTime. For a lock held longer than two leases (renewed), a failed release is not retried
// at all: the key stays, unrenewed, until its lease runs out, and every other process is
// locked out meanwhile.
func TestReview2FailedReleaseOfLongHoldNotRetried(t *testing.T) {
	ga, ca := newGen(t)
	lease := 300 * time.Millisecond
	la, _ := ga.GenWithLease("R2RL", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	o, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*lease + 100*time.Millisecond) // held (and renewed) for more than two leases
	var fails atomic.Int32
	fails.Store(2) // the release and the first give-back fail; Redis is fine afterwards
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if isScr2(cmd.Args(), releaseArgs) && fails.Add(-1) >= 0 {
			err := errors.New("dial tcp: connection refused (injected)")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}})
	err = la.Unlock(o)
	t.Logf("Unlock: %v", err)
	time.Sleep(lease / 3) // several retry intervals (lease/10)
	admin := srv.Client()
	defer admin.Close()
	n, _ := admin.Exists(ctx, la.Config().UniqueKey()).Result()
	pttl, _ := admin.PTTL(ctx, la.Config().UniqueKey()).Result()
	if n != 0 {
		t.Fatalf("the key is still held %v after a release that failed once; it expires in %v (no retry)", lease/3, pttl)
	}
}

// Found in the second review (3): the settled mark's TTL is set by whichever release raises it last. Two handles of one
// key with different leases: an attempt of the long-lease handle whose outcome was unknown is
// given back (mark = n, 2 x 10 s); then an acquisition of the short-lease handle is released
// (mark = m > n, PX 2 x 30 ms). 60 ms later the mark is gone, and a late copy of the given-back
// attempt takes the key for 10 s, renewed by nobody.
func TestReview2SettledMarkShortenedByShortLease(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	p, _ := processor.NewRedisLockProcessor(c, processor.Options{})
	long, _ := domain.NewDLockConfig("R2TTL", target(t), 10*time.Second)
	short, _ := long.WithLease(30 * time.Millisecond)
	owner := "10.0.0.9-1-abcdef-"
	n := &domain.DLockEntity{Locker: owner + "1"}
	m := &domain.DLockEntity{Locker: owner + "2"}
	// attempt n's outcome is unknown: given back (settled)
	if err := p.Unlock(ctx, n, long); err != nil && !errors.Is(err, dlock.ErrOptimisticLocking) {
		t.Fatal(err)
	}
	t.Logf("after give-back of n: done TTL %v", c.PTTL(ctx, processor.DoneKey(long, owner)).Val())
	if err := p.Lock(ctx, m, short, true); err != nil {
		t.Fatal(err)
	}
	if err := p.Unlock(ctx, m, short); err != nil {
		t.Fatal(err)
	}
	t.Logf("after release of m: done TTL %v", c.PTTL(ctx, processor.DoneKey(long, owner)).Val())
	time.Sleep(100 * time.Millisecond)
	late := &domain.DLockEntity{Locker: n.Locker}
	if err := p.Lock(ctx, late, long, true); err == nil {
		t.Fatalf("a late copy of given-back attempt n took the key %v after its give-back (PTTL %v)",
			100*time.Millisecond, c.PTTL(ctx, long.UniqueKey()).Val())
	}
}

// Found in the second review: the waiting mark's withdrawal (unwatch) called the processor
// directly, not through lockState.call: with a client that does not return, the background
// job kept its reference on the state for ever.
func TestReview2UnmarkNotBoundedBlocksClose(t *testing.T) {
	ga, ca := newGen(t)
	gb, _ := newGen(t)
	lease := 300 * time.Millisecond
	la, _ := ga.GenWithLease("R2UM", target(t), lease)
	lb, _ := gb.GenWithLease("R2UM", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	ob, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock(ob)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if isScr2(cmd.Args(), unmarkArgs) {
			<-release // a hung server, a client that ignores the deadline
		}
		return next(ctx, cmd)
	}})
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := la.Lock(wctx); err == nil {
		t.Fatal("A got a held lock")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	start := time.Now()
	err = ga.Close(cctx)
	took, inUse := time.Since(start), ga.InUse()
	t.Logf("Close took %v: %v (states in use %d)", took, err, inUse)
	free()
	// The unmark goes through lockState.call, so the job lets the state go at its deadline;
	// only the goroutine stuck inside the client remains, which Close reports at its ctx.
	if inUse != 0 {
		t.Fatalf("a hung unmark kept %d states alive", inUse)
	}
	if took > 5*time.Second {
		t.Fatalf("Close(1 s) took %v", took)
	}
}

// Found in the second review (5): bad input must never panic.
func TestReview2NilInputsDoNotPanic(t *testing.T) {
	check := func(name string, f func()) {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panics: %v", name, r)
			}
		}()
		f()
	}
	check("ParseLeases(nil)", func() { _, _ = dlock.ParseLeases(nil) })
	check("(*DistributedReentrantLock)(nil).Config()", func() {
		var l *dlock.DistributedReentrantLock
		_ = l.Config()
	})
}

// Found in the second review (6): after Close, Lock with the owner context of a closed holding says ErrNotObtained
// (context canceled), not ErrClosed as documented.
func TestReview2LockAfterCloseWithOwnerCtx(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	g, _ := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	l, _ := g.Gen("R2LC", target(t))
	o, err := l.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Close(context.Background())
	_, err = l.Lock(o)
	_, ok, terr := l.TryLock(o)
	t.Logf("Lock: %v; TryLock: %v %v", err, ok, terr)
	if !errors.Is(err, dlock.ErrClosed) || !errors.Is(terr, dlock.ErrClosed) {
		if strings.Contains(err.Error(), "canceled") {
			t.Errorf("Lock/TryLock with a closed holding's owner ctx after Close: %v / %v, want ErrClosed", err, terr)
		}
	}
}

// Found in the second review (7): a typed nil client passes NewGenerator's nil check and panics on first use.
func TestReview2TypedNilClient(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("typed nil client panics: %v", r)
		}
	}()
	var c *redis.Client
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		return
	}
	l, _ := g.Gen("R2NIL", target(t))
	_, _, _ = l.TryLock(context.Background())
	_ = g.Close(context.Background())
}
