package threads_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/threads"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type target struct {
	waiting atomic.Bool
	polls   atomic.Int64
}

func (t *target) Waiting() bool                          { return t.waiting.Load() }
func (t *target) Poll(ctx context.Context) time.Duration { t.polls.Add(1); return 0 }

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPollerRunsWhileWaitingAndExits(t *testing.T) {
	var wg threads.Group
	tg := &target{}
	tg.waiting.Store(true)
	p := threads.NewPoller(context.Background(), time.Millisecond, time.Millisecond, tg, &wg)
	if !p.Start() {
		t.Fatal("first Start did not start")
	}
	if p.Start() {
		t.Fatal("second Start started a second loop")
	}
	eventually(t, "polls", func() bool { return tg.polls.Load() >= 3 })
	tg.waiting.Store(false)
	eventually(t, "exit when not waiting", func() bool {
		running := true
		p.Locked(func(r bool) { running = r })
		return !running
	})
	n := tg.polls.Load()
	tg.waiting.Store(true)
	if !p.Start() {
		t.Fatal("Start after exit did not start")
	}
	eventually(t, "polls after restart", func() bool { return tg.polls.Load() > n })
	p.Stop()
	p.Stop()
	waitFor(t, &wg)
}

// A poller with no pace (every 0, a target that asks for none) polls at most once a
// millisecond rather than in a busy loop.
func TestPollerWithoutPaceDoesNotSpin(t *testing.T) {
	var wg threads.Group
	tg := &target{}
	tg.waiting.Store(true)
	p := threads.NewPoller(context.Background(), 0, 0, tg, &wg)
	p.Start()
	eventually(t, "polls", func() bool { return tg.polls.Load() >= 3 })
	start, n := time.Now(), tg.polls.Load()
	time.Sleep(100 * time.Millisecond)
	polls, ms := tg.polls.Load()-n, time.Since(start).Milliseconds()
	p.Stop()
	waitFor(t, &wg)
	if polls > ms+10 {
		t.Fatalf("%d polls in %d ms", polls, ms)
	}
}

// A StartAfter on a running loop brings its next poll forward.
func TestPollerStartAfterHurriesARunningLoop(t *testing.T) {
	var wg threads.Group
	tg := &target{}
	tg.waiting.Store(true)
	p := threads.NewPoller(context.Background(), time.Hour, time.Hour, tg, &wg)
	if !p.Start() {
		t.Fatal("Start did not start")
	}
	if p.StartAfter(time.Millisecond) {
		t.Fatal("StartAfter started a second loop")
	}
	eventually(t, "a poll brought forward from an hour to a millisecond", func() bool { return tg.polls.Load() >= 1 })
	p.StartAfter(time.Hour) // (later than due: changes nothing)
	p.Stop()
	waitFor(t, &wg)
}

// Of two StartAfter calls in a row on a running loop, the earlier time wins, whichever came
// first (a later hurry still queued does not make an earlier one wait behind it).
func TestPollerKeepsTheEarliestHurry(t *testing.T) {
	var wg threads.Group
	tg := &target{}
	tg.waiting.Store(true)
	p := threads.NewPoller(context.Background(), time.Hour, time.Hour, tg, &wg)
	if !p.Start() {
		t.Fatal("Start did not start")
	}
	for range 100 {
		n := tg.polls.Load()
		p.StartAfter(time.Hour / 2)
		p.StartAfter(time.Millisecond)
		eventually(t, "a poll within a millisecond's hurry", func() bool { return tg.polls.Load() > n })
	}
	p.Stop()
	waitFor(t, &wg)
}

// Between polls a poller is a timer, not a goroutine: a wait that ends before its first poll
// starts none; a StartAfter later than the poll due leaves it, a sooner one brings it forward;
// Reset sets it either way.
func TestPollerIsATimerBetweenPolls(t *testing.T) {
	var wg threads.Group
	tg := &target{}
	tg.waiting.Store(true)
	p := threads.NewPoller(context.Background(), time.Hour, time.Hour, tg, &wg)
	before := runtime.NumGoroutine()
	if !p.StartAfter(time.Hour) {
		t.Fatal("StartAfter did not start")
	}
	due, ok := p.Due()
	if !ok || time.Until(due) < 59*time.Minute {
		t.Fatalf("due in %v (%v), want an hour", time.Until(due), ok)
	}
	if n := runtime.NumGoroutine(); n != before {
		t.Fatalf("%d goroutines while a poll is due, %d before", n, before)
	}
	p.StartAfter(2 * time.Hour)
	if later, _ := p.Due(); !later.Equal(due) {
		t.Fatalf("a later StartAfter moved the poll from %v to %v", due, later)
	}
	p.StartAfter(time.Minute)
	if sooner, _ := p.Due(); time.Until(sooner) > time.Minute {
		t.Fatalf("a sooner StartAfter left the poll %v away", time.Until(sooner))
	}
	p.Reset(func() time.Duration { return 2 * time.Hour }) // (a pace known afresh puts it off)
	if later, _ := p.Due(); time.Until(later) < 119*time.Minute {
		t.Fatalf("Reset left the poll %v away, want two hours", time.Until(later))
	}
	p.Stop()
	if _, ok := p.Due(); ok {
		t.Fatal("a poll is due after Stop")
	}
	if tg.polls.Load() != 0 {
		t.Fatal("polled")
	}
	waitFor(t, &wg)
}

// blockingTarget's first Poll blocks until release is closed (a poll that takes a while:
// waiting for the state's mutex, or descheduled).
type blockingTarget struct {
	waiting atomic.Bool
	polls   atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (t *blockingTarget) Waiting() bool { return t.waiting.Load() }
func (t *blockingTarget) Poll(ctx context.Context) time.Duration {
	if t.polls.Add(1) == 1 {
		close(t.entered)
		<-t.release
	}
	return time.Millisecond
}

// A start asked for while a poll runs, after a Stop (the process took the key, then waits in
// Redis again before that poll returned), is kept: the poller polls again.
func TestPollerStartedDuringAPollAfterStopPollsAgain(t *testing.T) {
	for _, how := range []string{"StartAfter", "Reset"} {
		t.Run(how, func(t *testing.T) {
			var wg threads.Group
			tg := &blockingTarget{entered: make(chan struct{}), release: make(chan struct{})}
			tg.waiting.Store(true)
			p := threads.NewPoller(context.Background(), time.Millisecond, time.Millisecond, tg, &wg)
			p.StartAfter(time.Millisecond)
			<-tg.entered // the first poll runs
			p.Stop()     // the process took the key, and waits in Redis again:
			if how == "StartAfter" {
				p.StartAfter(time.Millisecond)
			} else {
				p.Reset(func() time.Duration { return time.Millisecond })
			}
			close(tg.release) // the first poll returns
			eventually(t, "a second poll", func() bool { return tg.polls.Load() >= 2 })
			p.Stop()
			waitFor(t, &wg)
		})
	}
}

// StopIdle keeps a loop whose target waits again (a start asked for since the owner looked).
func TestPollerStopIdleKeepsAWaitingTarget(t *testing.T) {
	var wg threads.Group
	tg := &target{}
	tg.waiting.Store(true)
	p := threads.NewPoller(context.Background(), time.Hour, time.Hour, tg, &wg)
	p.Start()
	p.StopIdle()
	if _, ok := p.Due(); !ok {
		t.Fatal("StopIdle stopped the loop of a waiting target")
	}
	tg.waiting.Store(false)
	p.StopIdle()
	if _, ok := p.Due(); ok {
		t.Fatal("StopIdle kept the loop of a target that does not wait")
	}
	waitFor(t, &wg)
}

func TestPollerEndsWithContext(t *testing.T) {
	var wg threads.Group
	tg := &target{}
	tg.waiting.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	p := threads.NewPoller(ctx, time.Hour, time.Hour, tg, &wg)
	p.Start()
	cancel()
	eventually(t, "exit when the context ends", func() bool {
		running := true
		p.Locked(func(r bool) { running = r })
		return !running
	})
	if p.Start() {
		t.Fatal("Start after the context ended started a loop")
	}
	waitFor(t, &wg)
	if p.Start() {
		t.Fatal("Start on a closed group started a loop")
	}
	if tg.polls.Load() != 0 {
		t.Fatal("polled before its first delay")
	}
}

// fakeLease is a lease whose renewals succeed, fail or hang as the test says.
type fakeLease struct {
	mu    sync.Mutex
	lease time.Duration
	until time.Time
	errs  []error     // what the next renewals return, in order; nil afterwards
	times []time.Time // when each renewal was sent
	ended []time.Time // when each renewal that did not hang returned
	hang  bool        // renewals wait for their context to end
	down  error       // when set, what every renewal returns after errs, with no pause asked (Retry 0)
	lost  chan error
}

func newLease(lease time.Duration, errs ...error) *fakeLease {
	return &fakeLease{lease: lease, until: time.Now().Add(lease), errs: errs, lost: make(chan error, 1)}
}

func (l *fakeLease) Schedule() threads.Schedule {
	l.mu.Lock()
	defer l.mu.Unlock()
	retry := l.lease / 10
	if l.down != nil {
		retry = 0
	}
	return threads.Schedule{Until: l.until, RenewAt: l.until.Add(-l.lease / 4), Retry: retry}
}

func (l *fakeLease) Renew(ctx context.Context) error {
	l.mu.Lock()
	sent := time.Now()
	l.times = append(l.times, sent)
	hang := l.hang
	var err error
	if len(l.errs) > 0 {
		err, l.errs = l.errs[0], l.errs[1:]
	} else if l.down != nil {
		err = l.down
	}
	l.mu.Unlock()
	if hang {
		<-ctx.Done() // Redis does not answer
		return ctx.Err()
	}
	if err == nil {
		l.extend(sent, l.lease)
	}
	l.mu.Lock()
	l.ended = append(l.ended, time.Now())
	l.mu.Unlock()
	return err
}

func (l *fakeLease) extend(sent time.Time, lease time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u := sent.Add(lease); u.After(l.until) {
		l.until = u
	}
}

func (l *fakeLease) Lost(cause error) { l.lost <- cause }

func (l *fakeLease) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.times)
}

// skipIfRetryDueAfter skips t when the retry of l's first failed renewal was due, a tenth of
// the lease after its answer, only once the lease (until) had ended: a stall of the machine
// made the renewal or its answer late, and a loss is then right. With no renewal answered,
// the first one, due at three quarters of the lease, came late.
func skipIfRetryDueAfter(t *testing.T, l *fakeLease, until time.Time) {
	t.Helper()
	answered := until
	l.mu.Lock()
	if len(l.ended) > 0 {
		answered = l.ended[0]
	}
	l.mu.Unlock()
	if retry := l.lease / 10; !answered.Add(retry).Before(until) {
		t.Skipf("the failed renewal was answered %v before the lease's end, within the %v pause before a retry (a stall of the machine)", until.Sub(answered).Round(time.Millisecond), retry)
	}
}

// noLoss fails t if a loss was reported.
func noLoss(t *testing.T, l *fakeLease) {
	t.Helper()
	select {
	case err := <-l.lost:
		t.Fatalf("loss reported: %v", err)
	default:
	}
}

// awaitLoss waits for a loss and checks its cause.
func awaitLoss(t *testing.T, l *fakeLease, wrapped error) {
	t.Helper()
	select {
	case err := <-l.lost:
		if !errors.Is(err, dlerrors.ErrLockLost) || (wrapped != nil && !errors.Is(err, wrapped)) {
			t.Fatalf("cause %v, want ErrLockLost wrapping %v", err, wrapped)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("loss never reported")
	}
}

// The lease is renewed at three quarters of it (not right after acquiring), again and again,
// until stopped; nothing is reported after Stop.
func TestExpanderRenewsAndStops(t *testing.T) {
	var wg threads.Group
	// (a lease long enough that a loaded machine's late wake-up, up to a quarter of it, 750 ms,
	// does not let it run out)
	l := newLease(3 * time.Second)
	start := time.Now()
	e := threads.StartExpander(context.Background(), l, &wg)
	eventually(t, "three renewals", func() bool { return l.count() >= 3 })
	e.Stop()
	e.Stop()
	waitFor(t, &wg)
	if first := l.times[0].Sub(start); first < l.lease*3/4 {
		t.Fatalf("first renewal after %v, want three quarters of the lease", first)
	}
	noLoss(t, l)
}

// A renewal that finds the key taken ends the lease at once; one that cannot reach Redis is
// retried until the lease runs out.
func TestExpanderReportsLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"taken", fmt.Errorf("%w: key taken", dlerrors.ErrOptimisticLocking)},
		{"unreachable", errors.New("connection refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var wg threads.Group
			errs := []error{tc.err}
			if tc.name == "unreachable" {
				errs = []error{tc.err, tc.err, tc.err, tc.err, tc.err, tc.err, tc.err, tc.err, tc.err, tc.err, tc.err, tc.err}
			}
			// (a lease of seconds: its renewal at three quarters, and the retries a tenth of it
			// apart, have half a second to run before it ends, on a loaded machine too)
			l := newLease(2*time.Second, errs...)
			until := l.Schedule().Until // (failed renewals leave it)
			threads.StartExpander(context.Background(), l, &wg)
			awaitLoss(t, l, tc.err)
			waitFor(t, &wg)
			if tc.name == "unreachable" && l.count() < 2 {
				skipIfRetryDueAfter(t, l, until)
				t.Fatalf("%d renewals: a failed renewal was not retried before the lease ran out", l.count())
			}
		})
	}
}

// A schedule that asks for no pause between failed renewals gets one of a millisecond: no
// busy loop while Redis is unreachable.
func TestExpanderPausesBetweenFailedRenewals(t *testing.T) {
	var wg threads.Group
	l := newLease(time.Second) // (its first renewal, at 750 ms, has 250 ms to run on a loaded machine)
	l.down = errors.New("connection refused")
	threads.StartExpander(context.Background(), l, &wg)
	awaitLoss(t, l, l.down)
	waitFor(t, &wg)
	if n := l.count(); n > 500 { // (a quarter of the lease, 250 ms, at one a millisecond: 250)
		t.Fatalf("%d renewals in the last quarter of a 1s lease", n)
	}
}

func TestExpanderRecoversFromOneError(t *testing.T) {
	var wg threads.Group
	// (A lease of seconds: the error, at three quarters of it, leaves 500 ms for its retry a
	// tenth of it later; a loss that a longer stall explains is told apart below.)
	l := newLease(2*time.Second, errors.New("blip"))
	until := l.Schedule().Until // (the failed renewal leaves it)
	e := threads.StartExpander(context.Background(), l, &wg)
	eventually(t, "renewals after the error, or a loss", func() bool { return l.count() >= 3 || len(l.lost) > 0 })
	if len(l.lost) > 0 {
		skipIfRetryDueAfter(t, l, until)
	}
	e.Stop()
	waitFor(t, &wg)
	noLoss(t, l)
}

// waitFor waits for the group's goroutines; a group can be closed once, so it is closed here
// and the test makes a new one when it goes on.
func waitFor(t *testing.T, g *threads.Group) {
	t.Helper()
	done := make(chan struct{})
	go func() { g.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("goroutines did not end")
	}
}

// A renewal that Redis never answers does not delay the loss: its context ends when the
// lease runs out, and the loss is reported then.
func TestExpanderLossWhileRenewalHangs(t *testing.T) {
	var wg threads.Group
	l := newLease(200 * time.Millisecond)
	l.hang = true
	threads.StartExpander(context.Background(), l, &wg)
	awaitLoss(t, l, nil)
	waitFor(t, &wg)
}

// Renewals made by others (a renewal before a hand-over, an Extend) move the schedule: after
// a Poke the expander waits for the new one instead of renewing on the old.
func TestExpanderFollowsOthersRenewals(t *testing.T) {
	var wg threads.Group
	l := newLease(400 * time.Millisecond)
	e := threads.StartExpander(context.Background(), l, &wg)
	l.extend(time.Now(), 10*time.Second) // someone renewed with a long lease
	e.Poke()
	time.Sleep(600 * time.Millisecond) // past the old 75 % and the old lease
	if n := l.count(); n != 0 {
		t.Fatalf("%d renewals on the old schedule", n)
	}
	e.Stop()
	waitFor(t, &wg)
	noLoss(t, l)
}

// An expander that begins at the first renewal's time runs nothing before then: stopped
// before it, it never renews nor reports a loss; otherwise it renews as StartExpander's does.
// A Poke (the schedule changed) begins it at once.
func TestExpanderBeginsAtTheFirstRenewal(t *testing.T) {
	ctx := context.Background()
	t.Run("stopped before", func(t *testing.T) {
		var wg threads.Group
		l := newLease(200 * time.Millisecond)
		e := threads.StartExpanderAt(ctx, l, &wg, time.Now().Add(150*time.Millisecond))
		e.Stop()
		time.Sleep(400 * time.Millisecond) // past the first renewal's time and the lease
		if n := l.count(); n != 0 {
			t.Fatalf("%d renewals after Stop", n)
		}
		noLoss(t, l)
		waitFor(t, &wg)
	})
	t.Run("renews", func(t *testing.T) {
		var wg threads.Group
		l := newLease(1200 * time.Millisecond)
		e := threads.StartExpanderAt(ctx, l, &wg, time.Now().Add(900*time.Millisecond))
		eventually(t, "two renewals", func() bool { return l.count() >= 2 })
		e.Stop()
		waitFor(t, &wg)
		noLoss(t, l)
	})
	t.Run("poked before", func(t *testing.T) {
		var wg threads.Group
		l := newLease(10 * time.Second)
		e := threads.StartExpanderAt(ctx, l, &wg, time.Now().Add(time.Hour))
		l.mu.Lock()
		l.until = time.Now().Add(time.Second) // due now: less than a quarter of the lease left
		l.mu.Unlock()
		e.Poke()
		eventually(t, "a renewal", func() bool { return l.count() >= 1 })
		e.Stop()
		waitFor(t, &wg)
		noLoss(t, l)
	})
}
