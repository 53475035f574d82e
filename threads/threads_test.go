package threads_test

import (
	"context"
	"errors"
	"fmt"
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

func (t *target) Waiting() bool            { return t.waiting.Load() }
func (t *target) Poll(ctx context.Context) { t.polls.Add(1) }

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

// renewals records renewal times and answers with the errors it is given.
type renewals struct {
	mu    sync.Mutex
	times []time.Time
	errs  []error
}

func (r *renewals) renew(context.Context, time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.times = append(r.times, time.Now())
	if len(r.errs) > 0 {
		err := r.errs[0]
		if len(r.errs) > 1 {
			r.errs = r.errs[1:]
		}
		return err
	}
	return nil
}

func (r *renewals) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.times)
}

func TestExpanderRenewsAndStops(t *testing.T) {
	var wg threads.Group
	r := &renewals{}
	lost := make(chan error, 1)
	start := time.Now()
	e := threads.StartExpander(context.Background(), threads.ExpanderConfig{
		Lease: 40 * time.Millisecond, Interval: 30 * time.Millisecond, Retry: 4 * time.Millisecond, Acquired: start,
	}, r.renew, func(err error) { lost <- err }, &wg)
	eventually(t, "three renewals", func() bool { return r.count() >= 3 })
	e.Stop()
	e.Stop()
	waitFor(t, &wg)
	if first := r.times[0].Sub(start); first < 30*time.Millisecond {
		t.Fatalf("first renewal after %v, want one interval (not right after acquiring)", first)
	}
	select {
	case err := <-lost:
		t.Fatalf("loss reported: %v", err)
	default:
	}
}

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
			r := &renewals{errs: []error{tc.err}}
			lost := make(chan error, 1)
			threads.StartExpander(context.Background(), threads.ExpanderConfig{
				Lease: 40 * time.Millisecond, Interval: 30 * time.Millisecond, Retry: 4 * time.Millisecond, Acquired: time.Now(),
			}, r.renew, func(err error) { lost <- err }, &wg)
			select {
			case err := <-lost:
				if !errors.Is(err, dlerrors.ErrLockLost) || !errors.Is(err, tc.err) {
					t.Fatalf("cause %v, want ErrLockLost wrapping %v", err, tc.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("loss never reported")
			}
			waitFor(t, &wg)
			if tc.name == "unreachable" && r.count() < 2 {
				t.Fatalf("%d renewals: a failed renewal was not retried before the lease ran out", r.count())
			}
		})
	}
}

func TestExpanderRecoversFromOneError(t *testing.T) {
	var wg threads.Group
	r := &renewals{errs: []error{errors.New("blip"), nil}}
	lost := make(chan error, 1)
	e := threads.StartExpander(context.Background(), threads.ExpanderConfig{
		Lease: 60 * time.Millisecond, Interval: 20 * time.Millisecond, Retry: 5 * time.Millisecond, Acquired: time.Now(),
	}, r.renew, func(err error) { lost <- err }, &wg)
	eventually(t, "renewals after the error", func() bool { return r.count() >= 5 })
	e.Stop()
	waitFor(t, &wg)
	select {
	case err := <-lost:
		t.Fatalf("one failed renewal lost the lock: %v", err)
	default:
	}
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

// A renewal that hangs past the lease (a client that ignores the context's deadline, a
// partition) does not delay the loss: it is reported when the lease runs out.
func TestExpanderLossWhileRenewalHangs(t *testing.T) {
	var wg threads.Group
	unblock := make(chan struct{})
	lost := make(chan error, 1)
	threads.StartExpander(context.Background(), threads.ExpanderConfig{
		Lease: 60 * time.Millisecond, Interval: 30 * time.Millisecond, Retry: 5 * time.Millisecond, Acquired: time.Now(),
	}, func(context.Context, time.Duration) error {
		<-unblock // ignores its context, as go-redis does without ContextTimeoutEnabled
		return nil
	}, func(err error) { lost <- err }, &wg)
	select {
	case err := <-lost:
		if !errors.Is(err, dlerrors.ErrLockLost) {
			t.Fatalf("cause %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("loss not reported while the renewal hung")
	}
	close(unblock)
	waitFor(t, &wg)
}

// Extend renews at once with the new lease, and the renewals go on with it; an Extend whose
// outcome is unknown (an error) to a shorter lease counts the lease as the shorter one.
func TestExpanderExtend(t *testing.T) {
	var wg threads.Group
	var mu sync.Mutex
	var leases []time.Duration
	fail := false
	lost := make(chan error, 1)
	e := threads.StartExpander(context.Background(), threads.ExpanderConfig{
		Lease: 10 * time.Second, Interval: 7500 * time.Millisecond, Retry: time.Second, Acquired: time.Now(),
	}, func(_ context.Context, lease time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		leases = append(leases, lease)
		if fail {
			return errors.New("reply lost")
		}
		return nil
	}, func(err error) { lost <- err }, &wg)
	ctx := context.Background()
	if err := e.Extend(ctx, 80*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// renewals now come every 60 ms, with the new lease
	eventually(t, "renewals with the new lease", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(leases) >= 3 && leases[len(leases)-1] == 80*time.Millisecond
	})
	if err := e.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	// an Extend to 50 ms whose reply is lost: the lease is counted as 50 ms, so the loss comes
	// long before the 10 s lease would end
	if err := e.Extend(ctx, 50*time.Millisecond); err == nil {
		t.Fatal("Extend succeeded")
	}
	select {
	case err := <-lost:
		if !errors.Is(err, dlerrors.ErrLockLost) {
			t.Fatalf("cause %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no loss after an unknown Extend to a shorter lease")
	}
	if err := e.Extend(ctx, time.Second); !errors.Is(err, threads.ErrExpanderEnded) {
		t.Fatalf("Extend after the loss: %v", err)
	}
	waitFor(t, &wg)
}
