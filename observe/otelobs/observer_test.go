package otelobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/observe/otelobs"
)

// The tests run on miniredis: they check what the adapter records for the events the core
// library reports, not the lock itself, which the core's tests check on a real Redis.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	m      *miniredis.Miniredis
	client *redis.Client
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	obs    *otelobs.Observer
	gen    *dlock.Generator
}

// newEnv starts a miniredis and a Generator reporting to an Observer on in-memory providers;
// everything is closed when t ends.
func newEnv(t *testing.T, lease time.Duration) *env {
	t.Helper()
	e := &env{m: miniredis.RunT(t), reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	e.client = redis.NewClient(&redis.Options{Addr: e.m.Addr()})
	t.Cleanup(func() { e.client.Close() })
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() {
		mp.Shutdown(context.Background())
		e.tp.Shutdown(context.Background())
	})
	var err error
	if e.obs, err = otelobs.New(otelobs.Options{MeterProvider: mp, TracerProvider: e.tp}); err != nil {
		t.Fatal(err)
	}
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

// metrics collects what the Observer recorded, by instrument name.
func (e *env) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelobs.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs renders a set as k=v,k=v, sorted, to compare with a literal.
func attrs(s attribute.Set) string {
	var out string
	for i, kv := range s.ToSlice() {
		if i > 0 {
			out += ","
		}
		out += string(kv.Key) + "=" + kv.Value.Emit()
	}
	return out
}

// allCounts returns a counter's values by attribute set, 0 entries included.
func allCounts(t *testing.T, ms map[string]metricdata.Metrics, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	if ms[name].Data == nil {
		return out
	}
	sum, ok := ms[name].Data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("%s: %T is not a monotonic int64 sum", name, ms[name].Data)
	}
	for _, dp := range sum.DataPoints {
		out[attrs(dp.Attributes)] = dp.Value
	}
	return out
}

// counts returns a counter's values by attribute set, 0 entries left out.
func counts(t *testing.T, ms map[string]metricdata.Metrics, name string) map[string]int64 {
	t.Helper()
	out := allCounts(t, ms, name)
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// histCounts returns a histogram's counts by attribute set, and checks its buckets hold them.
func histCounts(t *testing.T, ms map[string]metricdata.Metrics, name string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	if ms[name].Data == nil {
		return out
	}
	h, ok := ms[name].Data.(metricdata.Histogram[float64])
	if !ok || ms[name].Unit != "s" {
		t.Fatalf("%s: %T in %q is not a float64 histogram in seconds", name, ms[name].Data, ms[name].Unit)
	}
	for _, dp := range h.DataPoints {
		var n uint64
		for _, c := range dp.BucketCounts {
			n += c
		}
		if n != dp.Count || dp.Sum < 0 {
			t.Errorf("%s %s: buckets hold %d of %d, sum %v", name, attrs(dp.Attributes), n, dp.Count, dp.Sum)
		}
		out[attrs(dp.Attributes)] = dp.Count
	}
	return out
}

func eq[V comparable](t *testing.T, what string, got, want map[string]V) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestAttemptAndRelease(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	l := e.lock(t, "ORDER", "42")
	owned, ok, err := l.TryLock(ctxT(t, 5*time.Second))
	if err != nil || !ok {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	if _, err := l.Lock(owned); err != nil { // a re-entry is not an acquisition
		t.Fatal(err)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	ms := e.metrics(t)
	eq(t, "acquisitions", counts(t, ms, "dlock.acquisitions"), map[string]int64{"how=attempt,type=ORDER": 1})
	eq(t, "waits", histCounts(t, ms, "dlock.wait"), map[string]uint64{"how=attempt,type=ORDER": 1})
	eq(t, "holds", histCounts(t, ms, "dlock.hold"), map[string]uint64{}) // not released yet

	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	ms = e.metrics(t)
	eq(t, "holds", histCounts(t, ms, "dlock.hold"), map[string]uint64{"type=ORDER": 1})
	eq(t, "losses", counts(t, ms, "dlock.losses"), map[string]int64{})
	eq(t, "redis errors", counts(t, ms, "dlock.redis.errors"), map[string]int64{})
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

// lockHandOver makes two goroutines of one Generator take l one after the other, the second
// waiting while the first holds it, with lockFn; it returns their owner contexts.
func lockHandOver(t *testing.T, l *dlock.DistributedReentrantLock,
	lockFn func(context.Context, *dlock.DistributedReentrantLock) (context.Context, error)) {
	t.Helper()
	first, err := lockFn(ctxT(t, 5*time.Second), l)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		second, err := lockFn(ctxT(t, 5*time.Second), l)
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
}

func plainLock(ctx context.Context, l *dlock.DistributedReentrantLock) (context.Context, error) {
	return l.Lock(ctx)
}

func TestHandOver(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	lockHandOver(t, e.lock(t, "ORDER", "7"), plainLock)
	ms := e.metrics(t)
	want := map[string]int64{"how=attempt,type=ORDER": 1, "how=hand-over,type=ORDER": 1}
	eq(t, "acquisitions", counts(t, ms, "dlock.acquisitions"), want)
	eq(t, "waits", histCounts(t, ms, "dlock.wait"), map[string]uint64{
		"how=attempt,type=ORDER": 1, "how=hand-over,type=ORDER": 1})
	eq(t, "holds", histCounts(t, ms, "dlock.hold"), map[string]uint64{"type=ORDER": 2})
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
	ms := e.metrics(t)
	eq(t, "losses", counts(t, ms, "dlock.losses"), map[string]int64{"type=USER": 1})
	eq(t, "holds", histCounts(t, ms, "dlock.hold"), map[string]uint64{"type=USER": 1})
	eq(t, "redis errors", counts(t, ms, "dlock.redis.errors"), map[string]int64{})
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
	got := counts(t, e.metrics(t), "dlock.redis.errors")
	if got["op=lock"] < 1 {
		t.Errorf("redis errors = %v, want op=lock", got)
	}
	for k := range got {
		if k != "op=lock" && k != "op=unlock" && k != "op=leave" { // the give-back and the leave may fail too
			t.Errorf("unexpected redis error %s", k)
		}
	}
	eq(t, "not obtained", counts(t, e.metrics(t), "dlock.not_obtained"), map[string]int64{"reason=redis,type=ORDER": 1})
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
	ms := e.metrics(t)
	for end := time.Now().Add(5 * time.Second); counts(t, ms, "dlock.losses")["type=JOB"] == 0 && time.Now().Before(end); ms = e.metrics(t) {
		time.Sleep(time.Millisecond)
	}
	if got := counts(t, ms, "dlock.renewal.failures"); got["type=JOB"] < 1 || len(got) != 1 {
		t.Errorf("renewal failures = %v", got)
	}
	if got := counts(t, ms, "dlock.redis.errors"); got["op=renew"] < 1 {
		t.Errorf("redis errors = %v, want op=renew", got)
	}
	eq(t, "losses", counts(t, ms, "dlock.losses"), map[string]int64{"type=JOB": 1})
	eq(t, "holds", histCounts(t, ms, "dlock.hold"), map[string]uint64{}) // never released
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	out := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value
	}
	return out
}

func TestLockSpan(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	l := e.lock(t, "ORDER", "span")
	ctx, parent := e.tp.Tracer("test").Start(ctxT(t, 5*time.Second), "parent")
	owned, err := e.obs.Lock(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if got := trace.SpanFromContext(owned); got != parent {
		t.Errorf("the owner context's span is %v, want the caller's", got.SpanContext().SpanID())
	}
	token, ok := l.FencingToken(owned)
	if !ok {
		t.Fatal("FencingToken: not held")
	}
	if _, err := e.obs.Lock(owned, l); err != nil { // re-entry
		t.Fatal(err)
	}
	if l.HoldCount(owned) != 2 {
		t.Fatalf("hold count %d", l.HoldCount(owned))
	}
	l.Unlock(owned)
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	parent.End()

	ended := e.spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans ended, want 3", len(ended))
	}
	s, re := ended[0], ended[1]
	for _, sp := range []sdktrace.ReadOnlySpan{s, re} {
		if sp.Name() != otelobs.SpanName || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q with parent %v, want %q under the caller's", sp.Name(), sp.Parent().SpanID(), otelobs.SpanName)
		}
		if sp.Status().Code != codes.Unset {
			t.Errorf("status %v", sp.Status())
		}
	}
	a := spanAttrs(s)
	if a["dlock.type"].AsString() != "ORDER" || a["dlock.key"].AsString() != "DLOCK_ORDER_span" ||
		a["dlock.how"].AsString() != "attempt" || a["dlock.token"].AsInt64() != int64(token) ||
		a["dlock.wait"].Type() != attribute.FLOAT64 || a["dlock.wait"].AsFloat64() < 0 {
		t.Errorf("attributes %v", a)
	}
	if _, ok := a["dlock.reentry"]; ok {
		t.Errorf("first Lock marked as re-entry")
	}
	a = spanAttrs(re)
	if !a["dlock.reentry"].AsBool() || a["dlock.token"].AsInt64() != int64(token) {
		t.Errorf("re-entry attributes %v", a)
	}
	if _, ok := a["dlock.how"]; ok {
		t.Errorf("re-entry has a how: %v", a)
	}
}

func TestLockSpanHandOver(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	lockHandOver(t, e.lock(t, "ORDER", "traced"), e.obs.Lock)
	var hows []string
	for _, s := range e.spans.Ended() {
		hows = append(hows, spanAttrs(s)["dlock.how"].AsString())
	}
	if fmt.Sprint(hows) != "[attempt hand-over]" {
		t.Errorf("hows %v, want [attempt hand-over]", hows)
	}
}

func TestLockSpanError(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	l := e.lock(t, "ORDER", "busy")
	owned, err := l.Lock(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(owned)
	other, err := e.gen.Gen("ORDER", "busy")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.obs.Lock(ctxT(t, 20*time.Millisecond), other)
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock = %v, want ErrNotObtained", err)
	}
	ended := e.spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans", len(ended))
	}
	s := ended[0]
	if s.Status().Code != codes.Error || len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Errorf("status %v, events %v", s.Status(), s.Events())
	}
	if _, ok := spanAttrs(s)["dlock.how"]; ok {
		t.Errorf("a failed Lock has a how")
	}
}

// TestHammer has goroutines of two Generators take a few locks through Observer.Lock, for
// the race detector; every acquisition is counted once and every span knows how it was made.
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
				owned, err := e.obs.Lock(ctxT(t, 10*time.Second), l)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Unlock(owned); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for _, n := range counts(t, e.metrics(t), "dlock.acquisitions") {
		total += n
	}
	if total != workers*rounds {
		t.Errorf("%d acquisitions counted, want %d", total, workers*rounds)
	}
	for _, s := range e.spans.Ended() {
		if _, ok := spanAttrs(s)["dlock.how"]; !ok {
			t.Errorf("span without how: %v", spanAttrs(s))
		}
	}
}

func TestNewRejectsBadBuckets(t *testing.T) {
	if _, err := otelobs.New(otelobs.Options{WaitBuckets: []float64{1, 1}}); err == nil {
		t.Error("equal wait boundaries accepted")
	}
	if _, err := otelobs.New(otelobs.Options{HoldBuckets: []float64{2, 1}}); err == nil {
		t.Error("decreasing hold boundaries accepted")
	}
	if _, err := otelobs.New(otelobs.Options{}); err != nil { // the global no-op providers
		t.Error(err)
	}
}

// An Observer not made by New — nil (New's result when its error went unchecked) or zero —
// records nothing and never panics: given to a Generator, the locks work, and its Lock takes
// the lock untraced.
func TestObserverNotMadeByNew(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	for name, o := range map[string]*otelobs.Observer{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			l, err := newGen(t, c, o, time.Second).Gen("ORDER", name)
			if err != nil {
				t.Fatal(err)
			}
			owned, err := o.Lock(ctxT(t, 5*time.Second), l)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(owned); err != nil {
				t.Fatal(err)
			}
			o.NotObtained(dlock.NotObtainedEvent{Reason: dlock.ReasonTimeout})
			o.Lost(dlock.LossEvent{})
			o.RenewalFailed(dlock.RenewalEvent{})
			o.RedisError(dlock.RedisErrorEvent{Op: "lock"})
		})
	}
}

// The span of a Lock on a type that is not valid UTF-8 carries the type and key with the
// invalid bytes replaced by U+FFFD: an OTLP exporter refuses a string that is not UTF-8, and
// with it the whole batch of spans.
func TestLockSpanTypeNotUTF8(t *testing.T) {
	e := newEnv(t, 10*time.Second)
	l := e.lock(t, "ORDER\xff", "span")
	owned, err := e.obs.Lock(ctxT(t, 5*time.Second), l)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	ended := e.spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	a := spanAttrs(ended[0])
	if a["dlock.type"].AsString() != "ORDER\uFFFD" || a["dlock.key"].AsString() != "DLOCK_ORDER\uFFFD_span" {
		t.Errorf("attributes %v", a)
	}
}
