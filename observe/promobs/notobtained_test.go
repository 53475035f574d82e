package promobs_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/observe/promobs"
)

// atStart returns the counter series that the first event of a lock type typ makes at 0
// (with those of dlock_redis_errors_total, made by the first event of all).
func atStart(typ string) map[string]float64 {
	want := map[string]float64{
		"dlock_losses_total{type=" + typ + "}":           0,
		"dlock_renewal_failures_total{type=" + typ + "}": 0,
	}
	for _, how := range []string{"attempt", "barge", "hand-over", "notified", "polled", "retry"} {
		want["dlock_acquisitions_total{how="+how+",type="+typ+"}"] = 0
	}
	for _, r := range []string{"timeout", "canceled", "closed", "redis"} {
		want["dlock_not_obtained_total{reason="+r+",type="+typ+"}"] = 0
	}
	for _, op := range []string{"lock", "renew", "unlock", "take", "release", "leave", "load", "inspect",
		"force-release", "subscribe", "probe"} {
		want["dlock_redis_errors_total{op="+op+"}"] = 0
	}
	return want
}

// TestCountersStartAtZero: the first event of a lock type, here a failure to acquire, makes
// all of its counters at 0, so that an alert on their rate sees their first increase.
func TestCountersStartAtZero(t *testing.T) {
	e := newEnv(t, 10*time.Second)
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
	if got := e.allSamples(t); len(got) != 0 {
		t.Fatalf("series before any event: %v", got)
	}
	if _, err := e.lock(t, "JOB", "nightly").Lock(ctxT(t, 20*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, want a timeout", err)
	}
	want := atStart("JOB")
	want["dlock_not_obtained_total{reason=timeout,type=JOB}"] = 1
	want["dlock_not_obtained_wait_seconds{reason=timeout,type=JOB}"] = 1 // histograms come with their first observation
	eq(t, e.allSamples(t), want)
}

// TestRedisErrorsStartAtZero: the first event of all may be a Redis error (a service that
// starts while Redis is down): every op's series is made at 0 with it, that op's counting it.
func TestRedisErrorsStartAtZero(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	e.obs.RedisError(dlock.RedisErrorEvent{Op: "subscribe", Err: errors.New("connection refused")})
	want := map[string]float64{}
	for k, v := range atStart("X") {
		if strings.HasPrefix(k, "dlock_redis_errors_total") {
			want[k] = v
		}
	}
	want["dlock_redis_errors_total{op=subscribe}"] = 1
	eq(t, e.allSamples(t), want)
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
	want := atStart("ORDER")
	maps.Copy(want, atStart("USER"))
	for _, typ := range []string{"ORDER", "USER"} {
		want["dlock_acquisitions_total{how=attempt,type="+typ+"}"] = 1
		want["dlock_wait_seconds{how=attempt,type="+typ+"}"] = 1
		want["dlock_hold_seconds{type="+typ+"}"] = 1
	}
	eq(t, e.allSamples(t), want)
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
			want["dlock_acquisitions_total{how=attempt,type=ORDER}"] = 1
			want["dlock_wait_seconds{how=attempt,type=ORDER}"] = 1
			want["dlock_not_obtained_total{reason="+tc.reason+",type=ORDER}"] = 1
			want["dlock_not_obtained_wait_seconds{reason="+tc.reason+",type=ORDER}"] = 1
			eq(t, e.allSamples(t), want)
		})
	}
}

// TestFirstUseRace: goroutines report events of new lock types at once, made by hand, so that
// the first event of a type races with others of it; no event is lost to the counters made at
// 0, and every type has all of its counters.
func TestFirstUseRace(t *testing.T) {
	o, err := promobs.New(promobs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(o)
	e := &env{obs: o, reg: reg}
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
	want := map[string]float64{}
	for _, typ := range types {
		maps.Copy(want, atStart(typ))
		n := float64(workers * rounds / len(types))
		want["dlock_not_obtained_total{reason=timeout,type="+typ+"}"] = n
		want["dlock_not_obtained_wait_seconds{reason=timeout,type="+typ+"}"] = n
		want["dlock_acquisitions_total{how=notified,type="+typ+"}"] = n
		want["dlock_wait_seconds{how=notified,type="+typ+"}"] = n
		want["dlock_losses_total{type="+typ+"}"] = n
	}
	eq(t, e.allSamples(t), want)
}
