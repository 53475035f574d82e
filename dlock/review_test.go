package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

type delayHook struct {
	match func(args []any) bool
	delay time.Duration
	seen  *atomic.Int32 // counts the delayed replies
}

func (h delayHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Err() == nil && h.match(cmd.Args()) {
			h.seen.Add(1)
			time.Sleep(h.delay) // the reply is late; the script already ran
		}
		return err
	}
}
func (h delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// scriptArgs counts the words of an EVALSHA of each script: EVALSHA, sha, numkeys, keys, args.
const (
	handOverArgs = 3 + 4 + 13
	expandArgs   = 3 + 2 + 3
	releaseArgs  = 3 + 2 + 5
	probeArgs    = 3 + 2 + 2
)

// isHandOver matches handover.lua.
func isHandOver(args []any) bool {
	if len(args) != handOverArgs {
		return false
	}
	s, _ := args[0].(string)
	return s == "evalsha" || s == "eval"
}

// Found in review: a local hand-over whose reply came after the lease it set had run out was
// still taken by the next local waiter, whose Lock returned success while another process
// held the key. Such a hand-over is now an unknown outcome, given back.
func TestReviewLateHandOverReplyGivesTwoOwners(t *testing.T) {
	ga, ca := newGen(t)
	gb, _ := newGen(t)
	lease := 100 * time.Millisecond
	la, _ := ga.GenWithLease("RVHO", target(t), lease)
	lb, _ := gb.GenWithLease("RVHO", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	o1, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		owned context.Context
		err   error
		at    time.Time
	}
	a2 := make(chan res, 1)
	go func() {
		o, err := la.Lock(ctx)
		if err == nil {
			tok, ok := la.FencingToken(o)
			t.Logf("A's waiter at return: owner ctx err %v, FencingToken %d ok %v", o.Err(), tok, ok)
		}
		a2 <- res{o, err, time.Now()}
	}()
	b := make(chan res, 1)
	go func() { o, err := lb.Lock(ctx); b <- res{o, err, time.Now()} }()
	for !ga.Waiters(la.Config().UniqueKey()) || !gb.Waiters(lb.Config().UniqueKey()) {
		time.Sleep(time.Millisecond)
	}
	if p, err := processor.NewRedisLockProcessor(ca, processor.Options{}); err != nil || p.Preload(ctx) != nil {
		t.Fatal("preload")
	}
	var delayed atomic.Int32
	ca.AddHook(delayHook{match: isHandOver, delay: 3 * lease, seen: &delayed})
	defer func() {
		if delayed.Load() == 0 {
			t.Error("no hand-over reply was delayed")
		}
	}()
	// The hand-over's reply comes after its lease: Unlock says the outcome was unknown (the
	// key was given back), and the next waiter must not take it.
	var pe *dlock.RedisProcessError
	if err := la.Unlock(o1); err != nil && !errors.As(err, &pe) {
		t.Fatal(err)
	}
	// Whoever gets the key first, the other must not get it while the first holds it.
	var first, second res
	var firstL, secondL *dlock.DistributedReentrantLock
	var secondC chan res
	select {
	case first = <-a2:
		firstL, secondL, secondC = la, lb, b
	case first = <-b:
		firstL, secondL, secondC = lb, la, a2
	}
	if first.err != nil {
		t.Fatalf("first to return: %v", first.err)
	}
	select {
	case second = <-secondC:
		if second.err == nil && first.owned.Err() == nil {
			t.Fatal("both own the lock: the second acquired while the first's owner context lives")
		}
		t.Skipf("the first holder lost its lease on a loaded machine (%v); nothing to check", context.Cause(first.owned))
	case <-time.After(5 * lease):
	}
	if err := firstL.Unlock(first.owned); err != nil {
		t.Fatalf("first holder's Unlock: %v", err)
	}
	second = <-secondC
	if second.err != nil {
		t.Fatalf("second: %v", second.err)
	}
	_ = secondL.Unlock(second.owned)
}

// Found in review: Close(ctx) was not bounded by ctx when the client does not honour context
// deadlines (go-redis's default): releases and the goroutine wait waited for the client. The
// server is paused for 6 s; Close with a 200 ms context must return well before that.
func TestReviewCloseBoundedByCtx(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	for i := 0; i < 2; i++ {
		l, _ := g.Gen("RVCLOSE", target(t)+string(rune('a'+i)))
		if _, err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	admin := srv.Client()
	defer admin.Close()
	if err := admin.Do(ctx, "client", "pause", 6000, "all").Err(); err != nil {
		t.Skip(err)
	}
	defer admin.Do(context.Background(), "client", "unpause")
	cctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = g.Close(cctx)
	took := time.Since(start)
	t.Logf("Close(200ms) took %v: %v", took, err)
	if took > 3*time.Second {
		t.Fatalf("Close(ctx 200ms) took %v while the server was paused for 6 s", took)
	}
	if err == nil {
		t.Fatal("Close gave up at its deadline but reported no error")
	}
}

// Found in review: own() published the holding before it set its expander; a Close that read
// the owner in between called Stop on a nil expander (panic; a data race under -race).
func TestReviewCloseDuringOwn(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	for i := 0; i < 600; i++ {
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := g.Gen("RVOWN", target(t))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if o, err := l.Lock(context.Background()); err == nil {
				_ = l.Unlock(o)
			}
		}()
		d := time.Duration(i%200) * time.Microsecond
		time.Sleep(d)
		_ = g.Close(context.Background())
		<-done
	}
}

type lostReplyHook struct{ match func(args []any) bool }

func (h lostReplyHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h lostReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && h.match(cmd.Args()) {
			err = errors.New("i/o timeout (reply lost)") // the script ran; the reply is lost
			cmd.SetErr(err)
		}
		return err
	}
}
func (h lostReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func isScript(n int) func(args []any) bool {
	return func(args []any) bool {
		s, _ := args[0].(string)
		return len(args) == n && (s == "evalsha" || s == "eval")
	}
}

type slowHook struct {
	match func(args []any) bool
	delay time.Duration
	seen  atomic.Int64 // matching commands
	probe atomic.Int64 // probe.lua calls
}

func (h *slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(probeArgs)(cmd.Args()) {
			h.probe.Add(1)
		}
		if h.match(cmd.Args()) {
			h.seen.Add(1)
			time.Sleep(h.delay) // slow on its way to Redis
		}
		return next(ctx, cmd)
	}
}
func (h *slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Found in review: after a loss the key is given back, but nothing woke the local waiter once
// it was (this process ignores its own release message), so a waiter whose attempt ran before
// the give-back waited for the poller. Renewal replies are lost, so the lease runs out (loss);
// the give-back is slowed so the waiter's attempt fails first. The waiter must then acquire
// with no poll (notifications are on, and its failed attempt makes the poller skip for lease/6).
func TestReviewLoseGiveBackSignals(t *testing.T) {
	g, c := newGen(t)
	lease := 600 * time.Millisecond
	l, _ := g.GenWithLease("RVLOSE", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	if p, err := processor.NewRedisLockProcessor(c, processor.Options{}); err != nil || p.Preload(ctx) != nil {
		t.Fatal("preload")
	}
	c.AddHook(lostReplyHook{match: isScript(expandArgs)})
	slow := &slowHook{match: isScript(releaseArgs), delay: 20 * time.Millisecond}
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
