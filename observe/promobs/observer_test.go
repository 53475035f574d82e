package promobs_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/observe/promobs"
)

// The tests run on miniredis: they check what the adapter exports for the events the core
// library reports, not the lock itself, which the core's tests check on a real Redis.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	m      *miniredis.Miniredis
	client *redis.Client
	obs    *promobs.Observer
	reg    *prometheus.Registry
	gen    *dlock.Generator
}

// newEnv starts a miniredis and a Generator reporting to an Observer registered on a pedantic
// registry (which checks what is collected against what is described); everything is closed
// when t ends.
func newEnv(t *testing.T, lease time.Duration) *env {
	t.Helper()
	e := &env{m: miniredis.RunT(t), reg: prometheus.NewPedanticRegistry()}
	e.client = redis.NewClient(&redis.Options{Addr: e.m.Addr()})
	t.Cleanup(func() { e.client.Close() })
	var err error
	if e.obs, err = promobs.New(promobs.Options{}); err != nil {
		t.Fatal(err)
	}
	e.reg.MustRegister(e.obs)
	e.gen = newGen(t, e.client, e.obs, lease)
	return e
}

func newGen(t *testing.T, c *redis.Client, o dlock.Observer, lease time.Duration) *dlock.Generator {
	t.Helper()
	g, err := dlock.NewGenerator(c, dlock.WithObserver(o), dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}

func (e *env) lock(t *testing.T, typ, target string) *dlock.DistributedReentrantLock {
	t.Helper()
	l, err := e.gen.Gen(typ, target)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// allSamples gathers the registry: name{l=v,...} → a counter's value or a histogram's count.
func (e *env) allSamples(t *testing.T) map[string]float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(labels)
			name := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// samples is allSamples without the series at 0.
func (e *env) samples(t *testing.T) map[string]float64 {
	t.Helper()
	out := e.allSamples(t)
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

func eq(t *testing.T, got, want map[string]float64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("samples\n got %v\nwant %v", got, want)
	}
}

func TestAttemptAndRelease(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	if n := testutil.CollectAndCount(e.obs); n != 0 {
		t.Errorf("%d series before any event", n)
	}
	l := e.lock(t, "ORDER", "42")
	owned, ok, err := l.TryLock(ctxT(t, 5*time.Second))
	if err != nil || !ok {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	if _, err := l.Lock(owned); err != nil { // a re-entry is not an acquisition
		t.Fatal(err)
	}
	l.Unlock(owned)
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP dlock_acquisitions_total Acquisitions of locks, re-entries excluded.
# TYPE dlock_acquisitions_total counter
dlock_acquisitions_total{how="attempt",type="ORDER"} 1
dlock_acquisitions_total{how="barge",type="ORDER"} 0
dlock_acquisitions_total{how="hand-over",type="ORDER"} 0
dlock_acquisitions_total{how="notified",type="ORDER"} 0
dlock_acquisitions_total{how="polled",type="ORDER"} 0
dlock_acquisitions_total{how="retry",type="ORDER"} 0
`), "dlock_acquisitions_total", "dlock_hold_seconds"); err != nil {
		t.Error(err)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	eq(t, e.samples(t), map[string]float64{
		"dlock_acquisitions_total{how=attempt,type=ORDER}": 1,
		"dlock_wait_seconds{how=attempt,type=ORDER}":       1,
		"dlock_hold_seconds{type=ORDER}":                   1,
	})
	if n := testutil.CollectAndCount(e.obs, "dlock_wait_seconds", "dlock_hold_seconds"); n != 2 {
		t.Errorf("%d histogram series, want 2", n)
	}
	problems, err := testutil.CollectAndLint(e.obs)
	if err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// A lock type that is not valid UTF-8 (dlock accepts any bytes but white space and control
// characters) is exported with its invalid bytes replaced by U+FFFD: a Prometheus label value
// must be UTF-8, and WithLabelValues panics on one that is not, inside Lock (or a background
// goroutine of the library, which ends the process).
func TestLockTypeNotUTF8(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	l := e.lock(t, "ORDER\xff", "42")
	owned, err := l.Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	eq(t, e.samples(t), map[string]float64{
		"dlock_acquisitions_total{how=attempt,type=ORDER\uFFFD}": 1,
		"dlock_wait_seconds{how=attempt,type=ORDER\uFFFD}":       1,
		"dlock_hold_seconds{type=ORDER\uFFFD}":                   1,
	})
}

// waitQueued waits until a goroutine of this process waits for l.
func waitQueued(t *testing.T, l *dlock.DistributedReentrantLock) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s, err := l.State(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.LocalWaiters {
			return
		}
	}
	t.Fatal("no local waiter")
}

func TestHandOver(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	l := e.lock(t, "ORDER", "7")
	first, err := l.Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		second, err := l.Lock(ctxT(t, 5*time.Second))
		if err == nil {
			err = l.Unlock(second)
		}
		done <- err
	}()
	waitQueued(t, l)
	if err := l.Unlock(first); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eq(t, e.samples(t), map[string]float64{
		"dlock_acquisitions_total{how=attempt,type=ORDER}":   1,
		"dlock_acquisitions_total{how=hand-over,type=ORDER}": 1,
		"dlock_wait_seconds{how=attempt,type=ORDER}":         1,
		"dlock_wait_seconds{how=hand-over,type=ORDER}":       1,
		"dlock_hold_seconds{type=ORDER}":                     2,
	})
}

func TestLossFoundAtRelease(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	l := e.lock(t, "USER", "u1")
	owned, err := l.Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.Del(context.Background(), l.Config().UniqueKey()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock = %v, want ErrLockLost", err)
	}
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP dlock_losses_total Holdings that learnt they had lost the lock.
# TYPE dlock_losses_total counter
dlock_losses_total{type="USER"} 1
`), "dlock_losses_total"); err != nil {
		t.Error(err)
	}
	for k, v := range e.allSamples(t) {
		if strings.HasPrefix(k, "dlock_redis_errors_total{") && v != 0 {
			t.Errorf("%s = %v, want 0", k, v)
		}
	}
	if got := e.samples(t)["dlock_hold_seconds{type=USER}"]; got != 1 {
		t.Errorf("%v holds released, want 1", got)
	}
}

func TestRedisError(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	c := redis.NewClient(&redis.Options{Addr: e.m.Addr(), MaxRetries: -1})
	c.Close()
	g := newGen(t, c, e.obs, 10*time.Second)
	l, err := g.Gen("ORDER", "closed")
	if err != nil {
		t.Fatal(err)
	}
	var pe *dlock.RedisProcessError
	if _, ok, err := l.TryLock(ctxT(t, 5*time.Second)); ok || !errors.As(err, &pe) {
		t.Fatalf("TryLock on a closed client = %v, %v; want a *RedisProcessError", ok, err)
	}
	got := e.samples(t)
	if got["dlock_redis_errors_total{op=lock}"] < 1 {
		t.Errorf("samples %v, want a redis error of op lock", got)
	}
	for k := range got {
		switch k {
		case "dlock_redis_errors_total{op=lock}", "dlock_redis_errors_total{op=unlock}", "dlock_redis_errors_total{op=leave}":
			// (the give-back and the leave that settle the attempt fail too)
		case "dlock_not_obtained_total{reason=redis,type=ORDER}", "dlock_not_obtained_wait_seconds{reason=redis,type=ORDER}":
			if got[k] != 1 {
				t.Errorf("%s = %v, want 1", k, got[k])
			}
		default:
			t.Errorf("unexpected sample %s", k)
		}
	}
	if got["dlock_not_obtained_total{reason=redis,type=ORDER}"] != 1 {
		t.Errorf("samples %v, want one failure to acquire for redis", got)
	}
}

func TestRenewalFailedThenLost(t *testing.T) {
	e := newEnv(t, 100*time.Millisecond)
	l := e.lock(t, "JOB", "nightly")
	owned, err := l.Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.m.SetError("ERR injected failure") // every command fails (not retried by go-redis, as LOADING is)
	select {
	case <-owned.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("holding not lost")
	}
	e.m.SetError("")
	if !errors.Is(context.Cause(owned), dlock.ErrLockLost) {
		t.Fatalf("cause %v", context.Cause(owned))
	}
	// (the loss is reported just after the owner's context ends)
	got := e.samples(t)
	for end := time.Now().Add(5 * time.Second); got["dlock_losses_total{type=JOB}"] == 0 && time.Now().Before(end); got = e.samples(t) {
		time.Sleep(time.Millisecond)
	}
	if got["dlock_renewal_failures_total{type=JOB}"] < 1 || got["dlock_redis_errors_total{op=renew}"] < 1 ||
		got["dlock_losses_total{type=JOB}"] != 1 {
		t.Errorf("samples %v, want renewal failures, renew errors and one loss", got)
	}
	if _, ok := got["dlock_hold_seconds{type=JOB}"]; ok {
		t.Errorf("a holding lost while held was released: %v", got)
	}
}

// TestHammer has goroutines of two Generators take a few locks, for the race detector; every
// acquisition is counted once.
func TestHammer(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	gens := []*dlock.Generator{e.gen, newGen(t, e.client, e.obs, 10*time.Second)}
	const workers, rounds = 8, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			l, err := gens[w%2].Gen("HAMMER", fmt.Sprint(w%3))
			if err != nil {
				t.Error(err)
				return
			}
			for range rounds {
				if err := l.Do(ctxT(t, 10*time.Second), func(context.Context) error { return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var acquired, waits, holds float64
	for k, v := range e.samples(t) {
		switch {
		case strings.HasPrefix(k, "dlock_acquisitions_total{"):
			acquired += v
		case strings.HasPrefix(k, "dlock_wait_seconds{"):
			waits += v
		case strings.HasPrefix(k, "dlock_hold_seconds{"):
			holds += v
		}
	}
	if acquired != workers*rounds || waits != acquired || holds != acquired {
		t.Errorf("%v acquisitions, %v waits, %v holds; want %d each", acquired, waits, holds, workers*rounds)
	}
}

func TestOptions(t *testing.T) {
	if _, err := promobs.New(promobs.Options{WaitBuckets: []float64{1, 1}}); err == nil {
		t.Error("equal wait bounds accepted")
	}
	if _, err := promobs.New(promobs.Options{HoldBuckets: []float64{2, 1}}); err == nil {
		t.Error("decreasing hold bounds accepted")
	}
	o, err := promobs.New(promobs.Options{Namespace: "shop", ConstLabels: prometheus.Labels{"service": "orders"},
		WaitBuckets: []float64{.1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := domain.NewDLockConfig("ORDER", "x", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o.Acquired(dlock.AcquireEvent{Config: cfg, Wait: 500 * time.Millisecond, How: dlock.HowPolled}) // made by hand
	if err := testutil.CollectAndCompare(o, strings.NewReader(`
# HELP shop_dlock_wait_seconds Time from a Lock or TryLock call to the acquisition of the lock.
# TYPE shop_dlock_wait_seconds histogram
shop_dlock_wait_seconds_bucket{how="polled",service="orders",type="ORDER",le="0.1"} 0
shop_dlock_wait_seconds_bucket{how="polled",service="orders",type="ORDER",le="1"} 1
shop_dlock_wait_seconds_bucket{how="polled",service="orders",type="ORDER",le="+Inf"} 1
shop_dlock_wait_seconds_sum{how="polled",service="orders",type="ORDER"} 0.5
shop_dlock_wait_seconds_count{how="polled",service="orders",type="ORDER"} 1
`), "shop_dlock_wait_seconds"); err != nil {
		t.Error(err)
	}
}

// An Observer not made by New — nil (New's result when its error went unchecked) or zero —
// records and exports nothing, and never panics: given to a Generator, the locks work.
func TestObserverNotMadeByNew(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	for name, o := range map[string]*promobs.Observer{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			l, err := newGen(t, c, o, time.Second).Gen("ORDER", name)
			if err != nil {
				t.Fatal(err)
			}
			owned, err := l.Lock(ctxT(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := owned.Unlock(); err != nil {
				t.Fatal(err)
			}
			o.NotObtained(dlock.NotObtainedEvent{Reason: dlock.ReasonTimeout})
			o.Lost(dlock.LossEvent{})
			o.RenewalFailed(dlock.RenewalEvent{})
			o.RedisError(dlock.RedisErrorEvent{Op: "lock"})
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(o); err != nil {
				t.Fatal(err)
			}
			if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
				t.Fatalf("gathered %d metrics, err %v", n, err)
			}
		})
	}
}
