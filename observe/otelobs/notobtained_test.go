package otelobs_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/observe/otelobs"
)

// counters are the Observer's counters.
var counters = []string{"dlock.acquisitions", "dlock.not_obtained", "dlock.losses", "dlock.renewal.failures",
	"dlock.redis.errors"}

// atStart returns, by counter, the series that the first event of a lock type typ makes at 0
// (with those of dlock.redis.errors, made by the first event of all).
func atStart(typ string) map[string]map[string]int64 {
	want := map[string]map[string]int64{}
	for _, c := range counters {
		want[c] = map[string]int64{}
	}
	for _, how := range []string{"attempt", "barge", "hand-over", "notified", "polled", "retry"} {
		want["dlock.acquisitions"]["how="+how+",type="+typ] = 0
	}
	for _, r := range []string{"timeout", "canceled", "closed", "redis"} {
		want["dlock.not_obtained"]["reason="+r+",type="+typ] = 0
	}
	want["dlock.losses"]["type="+typ] = 0
	want["dlock.renewal.failures"]["type="+typ] = 0
	for _, op := range []string{"lock", "renew", "unlock", "take", "release", "leave", "load", "inspect",
		"force-release", "subscribe", "probe"} {
		want["dlock.redis.errors"]["op="+op] = 0
	}
	return want
}

func checkCounters(t *testing.T, e *env, want map[string]map[string]int64) {
	t.Helper()
	ms := e.metrics(t)
	for _, c := range counters {
		eq(t, c, allCounts(t, ms, c), want[c])
	}
}

// TestCountersStartAtZero: the first event of a lock type, here a failure to acquire, makes
// all of its counters at 0, so that an alert on their rate sees their first increase.
func TestCountersStartAtZero(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	if ms := e.metrics(t); len(ms) != 0 {
		t.Errorf("metrics before any event: %v", ms)
	}
	other := newGen(t, e.client, dlock.NopObserver{}, 10*time.Second) // its events are not e.obs's
	busy, err := other.Gen("JOB", "nightly")
	if err != nil {
		t.Fatal(err)
	}
	owned, err := busy.Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Unlock(owned)
	if _, err := e.lock(t, "JOB", "nightly").Lock(ctxT(t, 20*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, want a timeout", err)
	}
	want := atStart("JOB")
	want["dlock.not_obtained"]["reason=timeout,type=JOB"] = 1
	checkCounters(t, e, want)
	ms := e.metrics(t)
	eq(t, "failed waits", histCounts(t, ms, "dlock.not_obtained_wait"), map[string]uint64{"reason=timeout,type=JOB": 1})
	eq(t, "waits", histCounts(t, ms, "dlock.wait"), map[string]uint64{}) // histograms come with their first recording
	eq(t, "holds", histCounts(t, ms, "dlock.hold"), map[string]uint64{})
}

// TestRedisErrorsStartAtZero: the first event of all may be a Redis error (a service that
// starts while Redis is down): every op's series starts at 0 with it, that op's counting it.
func TestRedisErrorsStartAtZero(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	e.obs.RedisError(dlock.RedisErrorEvent{Op: "subscribe", Err: errors.New("connection refused")})
	want := map[string]map[string]int64{}
	for _, c := range counters {
		want[c] = map[string]int64{}
	}
	want["dlock.redis.errors"] = atStart("X")["dlock.redis.errors"]
	want["dlock.redis.errors"]["op=subscribe"] = 1
	checkCounters(t, e, want)
}

// TestCountersStartAtZeroOnAcquisition: so does a first acquisition; a second type gets its
// own.
func TestCountersStartAtZeroOnAcquisition(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	for _, typ := range []string{"ORDER", "USER"} {
		if err := e.lock(t, typ, "1").Do(ctxT(t, 5*time.Second), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	want, user := atStart("ORDER"), atStart("USER")
	for c, series := range user {
		for k, v := range series {
			want[c][k] = v
		}
	}
	want["dlock.acquisitions"]["how=attempt,type=ORDER"] = 1
	want["dlock.acquisitions"]["how=attempt,type=USER"] = 1
	checkCounters(t, e, want)
}

// TestNotObtained: a Lock that gives up is counted by reason, with its wait.
func TestNotObtained(t *testing.T) {
	for _, tc := range []struct {
		reason string
		// wait makes l wait for a lock held in e's Generator and end without it
		wait func(t *testing.T, e *env, l *dlock.DistributedReentrantLock) error
	}{
		{"timeout", func(t *testing.T, e *env, l *dlock.DistributedReentrantLock) error {
			_, err := l.Lock(ctxT(t, 20*time.Millisecond))
			return err
		}},
		{"canceled", func(t *testing.T, e *env, l *dlock.DistributedReentrantLock) error {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := l.Lock(ctx)
				done <- err
			}()
			waitQueued(t, l)
			cancel()
			return <-done
		}},
		{"closed", func(t *testing.T, e *env, _ *dlock.DistributedReentrantLock) error {
			g := newGen(t, e.client, e.obs, 10*time.Second)
			l, err := g.Gen("ORDER", "busy")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := l.Lock(ctxT(t, 5*time.Second))
				done <- err
			}()
			waitQueued(t, l)
			if err := g.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			return <-done
		}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			e := newEnv(t, 10*time.Second)
			holder := e.lock(t, "ORDER", "busy")
			owned, err := holder.Lock(ctxT(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Unlock(owned)
			if err := tc.wait(t, e, e.lock(t, "ORDER", "busy")); err == nil {
				t.Fatal("got the lock")
			}
			want := atStart("ORDER")
			want["dlock.acquisitions"]["how=attempt,type=ORDER"] = 1
			want["dlock.not_obtained"]["reason="+tc.reason+",type=ORDER"] = 1
			checkCounters(t, e, want)
			eq(t, "failed waits", histCounts(t, e.metrics(t), "dlock.not_obtained_wait"),
				map[string]uint64{"reason=" + tc.reason + ",type=ORDER": 1})
		})
	}
}

// TestFirstUseRace: goroutines report events of new lock types at once, made by hand, so that
// the first event of a type races with others of it; no event is lost to the zeros added, and
// every type has all of its counters.
func TestFirstUseRace(t *testing.T) {
	e := &env{reader: sdkmetric.NewManualReader()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	defer mp.Shutdown(context.Background())
	o, err := otelobs.New(otelobs.Options{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	types := []string{"A", "B", "C"}
	const workers, rounds = 8, 51 // rounds: a multiple of len(types)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				cfg, err := domain.NewDLockConfig(domain.DLockType(types[i%len(types)]), fmt.Sprint(w), time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				o.NotObtained(dlock.NotObtainedEvent{Config: cfg, Reason: dlock.ReasonTimeout})
				o.Acquired(dlock.AcquireEvent{Config: cfg, How: dlock.HowNotified})
				o.Lost(dlock.LossEvent{Config: cfg})
			}
		})
	}
	wg.Wait()
	want := map[string]map[string]int64{}
	const n = workers * rounds / 3
	for _, typ := range types {
		for c, series := range atStart(typ) {
			if want[c] == nil {
				want[c] = map[string]int64{}
			}
			maps.Copy(want[c], series)
		}
		want["dlock.not_obtained"]["reason=timeout,type="+typ] = n
		want["dlock.acquisitions"]["how=notified,type="+typ] = n
		want["dlock.losses"]["type="+typ] = n
	}
	checkCounters(t, e, want)
	ms := e.metrics(t)
	for _, h := range []string{"dlock.not_obtained_wait", "dlock.wait"} {
		got := histCounts(t, ms, h)
		if len(got) != len(types) {
			t.Errorf("%s: %v, want a series per type", h, got)
		}
		for k, v := range got {
			if v != n {
				t.Errorf("%s %s: %d recorded, want %d", h, k, v, n)
			}
		}
	}
}
