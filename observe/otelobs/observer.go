package otelobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
)

// ScopeName is the instrumentation scope of the Observer's meter and tracer.
const ScopeName = "github.com/dlockgo/dlock/observe/otelobs"

// The attribute keys of the metrics. They are short, without a dlock. prefix (the metric name
// says dlock already), so that the OpenTelemetry Prometheus exporter turns them into the labels
// promobs exports: one set of queries, alerts and dashboards serves both adapters.
const (
	LabelType   = attribute.Key("type")   // lock type: every metric but dlock.redis.errors
	LabelHow    = attribute.Key("how")    // dlock.How's name: dlock.wait, dlock.acquisitions
	LabelReason = attribute.Key("reason") // dlock.Reason: dlock.not_obtained, dlock.not_obtained_wait
	LabelOp     = attribute.Key("op")     // the failed operation: dlock.redis.errors
)

// The attribute keys of the "dlock.Lock" span, prefixed as span attributes of a library should
// be: a span carries the attributes of many libraries side by side.
const (
	AttrType    = attribute.Key("dlock.type")    // lock type
	AttrHow     = attribute.Key("dlock.how")     // dlock.How's name
	AttrKey     = attribute.Key("dlock.key")     // Redis key DLOCK_<type>_<target>
	AttrToken   = attribute.Key("dlock.token")   // fencing token
	AttrWait    = attribute.Key("dlock.wait")    // seconds from the call to the acquisition
	AttrReentry = attribute.Key("dlock.reentry") // true when the Lock re-entered
)

// Options configures an Observer. The zero value uses the global providers.
type Options struct {
	// MeterProvider makes the meter of the metrics. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the tracer of Observer.Lock's spans. Default:
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// WaitBuckets are the bucket boundaries, in seconds, of dlock.wait and
	// dlock.not_obtained_wait, strictly increasing. Default: DefaultWaitBuckets().
	WaitBuckets []float64
	// HoldBuckets are the bucket boundaries, in seconds, of dlock.hold, strictly increasing.
	// Default: DefaultHoldBuckets().
	HoldBuckets []float64
}

// DefaultWaitBuckets returns the default bucket boundaries of dlock.wait and
// dlock.not_obtained_wait, in seconds: from 100 µs (an uncontended acquisition, a local
// hand-over) to 30 s. They are promobs.DefaultWaitBuckets.
func DefaultWaitBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// DefaultHoldBuckets returns the default bucket boundaries of dlock.hold, in seconds: from
// 1 ms to 30 min. They are promobs.DefaultHoldBuckets.
func DefaultHoldBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800}
}

// Observer is a dlock.Observer that records OpenTelemetry metrics (see the package doc), and
// traces the Lock calls made through its Lock method. Its methods are safe for concurrent use;
// the dlock.Observer ones do not block: each adds to one or two instruments (the first event
// of a lock type also sets that type's counters to 0), and Acquired also takes a short mutex
// while a traced Lock waits. Make it with New; one Observer can serve several Generators. A
// nil or zero Observer (not made by New) records nothing, its Lock only calls lock.Lock, and
// none of its methods panics.
type Observer struct {
	wait, notObtainedWait, hold                                     metric.Float64Histogram
	acquisitions, notObtained, losses, renewalFailures, redisErrors metric.Int64Counter
	tracer                                                          trace.Tracer

	types   sync.Map  // domain.DLockType → *typeAttrs, made by the type's first event
	byRedis sync.Map  // op string → metric.MeasurementOption
	opsOnce sync.Once // adds 0 to dlock.redis.errors for every op, at the first event of all

	traced atomic.Int64 // traced Lock calls under way: Acquired skips mu when 0
	mu     sync.Mutex   // protects waits
	waits  map[string]*waiting
}

var _ dlock.Observer = (*Observer)(nil)

// New returns an Observer recording on opts.MeterProvider's meter ScopeName. It returns an
// error if bucket boundaries are not strictly increasing, or if the meter cannot make an
// instrument.
func New(opts Options) (*Observer, error) {
	mp, tp := opts.MeterProvider, opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	waitB, holdB := opts.WaitBuckets, opts.HoldBuckets
	if waitB == nil {
		waitB = DefaultWaitBuckets()
	}
	if holdB == nil {
		holdB = DefaultHoldBuckets()
	}
	if err := increasing(waitB); err != nil {
		return nil, fmt.Errorf("otelobs: wait buckets: %w", err)
	}
	if err := increasing(holdB); err != nil {
		return nil, fmt.Errorf("otelobs: hold buckets: %w", err)
	}
	m := mp.Meter(ScopeName)
	o := &Observer{tracer: tp.Tracer(ScopeName), waits: make(map[string]*waiting)}
	hist := func(name, desc string, b []float64) (metric.Float64Histogram, error) {
		return m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(slices.Clone(b)...))
	}
	counter := func(name, unit, desc string) (metric.Int64Counter, error) {
		return m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	}
	// The names and units are chosen for the Prometheus exporter: dots become underscores,
	// "s" appends _seconds, a unit in braces appends nothing and a counter gets _total.
	var errs [8]error
	o.wait, errs[0] = hist("dlock.wait", "Time from a Lock or TryLock call to the acquisition of the lock.", waitB)
	o.notObtainedWait, errs[1] = hist("dlock.not_obtained_wait",
		"Time from a Lock or TryLock call to its failure to acquire the lock.", waitB)
	o.hold, errs[2] = hist("dlock.hold", "Time from an acquisition to its release by the final Unlock or Close.", holdB)
	o.acquisitions, errs[3] = counter("dlock.acquisitions", "{acquisition}", "Acquisitions of locks, re-entries excluded.")
	o.notObtained, errs[4] = counter("dlock.not_obtained", "{call}",
		"Lock calls that gave up (deadline, cancellation, Close) and Lock or TryLock calls that failed in Redis.")
	o.losses, errs[5] = counter("dlock.losses", "{loss}", "Holdings that learnt they had lost the lock.")
	o.renewalFailures, errs[6] = counter("dlock.renewal.failures", "{failure}",
		"Lease renewals that failed and are retried until the lease runs out.")
	o.redisErrors, errs[7] = counter("dlock.redis.errors", "{error}", "Failed Redis round trips, by operation.")
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("otelobs: %w", err)
	}
	return o, nil
}

func increasing(b []float64) error {
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) {
			return fmt.Errorf("boundaries %v are not strictly increasing", b)
		}
	}
	return nil
}

// The values of how, reason and op the core names: the first event of a lock type sets the
// counters of all of them to 0.
var (
	hows     = dlock.Hows()
	reasons  = dlock.Reasons()
	redisOps = dlock.RedisOps()
)

// typeAttrs holds the attribute sets of one lock type, made once: a set is sorted and hashed
// when made, which the hot path should not pay for every event. Apart from unknown, it is
// read-only once made.
type typeAttrs struct {
	typ     metric.MeasurementOption
	how     map[dlock.How]metric.MeasurementOption
	reason  map[dlock.Reason]metric.MeasurementOption
	t       attribute.KeyValue
	unknown sync.Map // how or reason the core added after this adapter → metric.MeasurementOption
}

func set(kvs ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kvs...))
}

// ofType returns t's attribute sets. The first event of a type makes them and adds 0 to each
// of the type's counters, so that they are exported before anything happens to them and
// rate() or increase() over them has data: an alert on losses sees the first loss.
// made reports whether o was made by New: a nil or zero Observer records nothing.
func (o *Observer) made() bool { return o != nil && o.wait != nil }

func (o *Observer) ofType(t domain.DLockType) *typeAttrs {
	if v, ok := o.types.Load(t); ok {
		return v.(*typeAttrs)
	}
	ta := &typeAttrs{
		t:      LabelType.String(utf8Of(string(t))),
		how:    make(map[dlock.How]metric.MeasurementOption, len(hows)),
		reason: make(map[dlock.Reason]metric.MeasurementOption, len(reasons)),
	}
	ta.typ = set(ta.t)
	for _, h := range hows {
		ta.how[h] = set(ta.t, LabelHow.String(h.String()))
	}
	for _, r := range reasons {
		ta.reason[r] = set(ta.t, LabelReason.String(string(r)))
	}
	v, loaded := o.types.LoadOrStore(t, ta)
	if loaded {
		return v.(*typeAttrs)
	}
	// Another goroutine may count an event of t before these additions: adding 0 after it
	// changes nothing.
	ctx := context.Background()
	for _, a := range ta.how {
		o.acquisitions.Add(ctx, 0, a)
	}
	for _, a := range ta.reason {
		o.notObtained.Add(ctx, 0, a)
	}
	o.losses.Add(ctx, 0, ta.typ)
	o.renewalFailures.Add(ctx, 0, ta.typ)
	o.makeOps(ctx)
	return ta
}

// utf8Of returns s with the bytes that are not UTF-8 replaced by U+FFFD. dlock accepts them in
// a lock type (and target); the Prometheus exporter refuses such a label value, failing the
// whole Gather, and an OTLP exporter such a string, failing the whole batch.
func utf8Of(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func (ta *typeAttrs) ofHow(h dlock.How) metric.MeasurementOption {
	if a, ok := ta.how[h]; ok {
		return a
	}
	return ta.other(h, LabelHow.String(h.String()))
}

func (ta *typeAttrs) ofReason(r dlock.Reason) metric.MeasurementOption {
	if a, ok := ta.reason[r]; ok {
		return a
	}
	return ta.other(r, LabelReason.String(string(r)))
}

func (ta *typeAttrs) other(k any, kv attribute.KeyValue) metric.MeasurementOption {
	if v, ok := ta.unknown.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := ta.unknown.LoadOrStore(k, set(ta.t, kv))
	return v.(metric.MeasurementOption)
}

func (o *Observer) opAttrs(op string) metric.MeasurementOption {
	if v, ok := o.byRedis.Load(op); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := o.byRedis.LoadOrStore(op, set(LabelOp.String(op)))
	return v.(metric.MeasurementOption)
}

// Acquired implements dlock.Observer: it records the wait in dlock.wait and counts the
// acquisition.
func (o *Observer) Acquired(e dlock.AcquireEvent) {
	if !o.made() {
		return
	}
	attrs := o.ofType(e.Config.LockType()).ofHow(e.How)
	ctx := context.Background()
	o.wait.Record(ctx, e.Wait.Seconds(), attrs)
	o.acquisitions.Add(ctx, 1, attrs)
	if o.traced.Load() > 0 {
		o.note(e)
	}
}

// NotObtained implements dlock.Observer: it records the wait until the failure in
// dlock.not_obtained_wait and counts the failure by reason.
func (o *Observer) NotObtained(e dlock.NotObtainedEvent) {
	if !o.made() {
		return
	}
	attrs := o.ofType(e.Config.LockType()).ofReason(e.Reason)
	ctx := context.Background()
	o.notObtainedWait.Record(ctx, e.Wait.Seconds(), attrs)
	o.notObtained.Add(ctx, 1, attrs)
}

// Released implements dlock.Observer: it records how long the holding was held. A holding lost
// while held (a renewal found the key gone) is never released, and is not in dlock.hold; one
// found lost by its release is.
func (o *Observer) Released(e dlock.ReleaseEvent) {
	if !o.made() {
		return
	}
	o.hold.Record(context.Background(), e.Held.Seconds(), o.ofType(e.Config.LockType()).typ)
}

// Lost implements dlock.Observer: it counts the loss.
func (o *Observer) Lost(e dlock.LossEvent) {
	if !o.made() {
		return
	}
	o.losses.Add(context.Background(), 1, o.ofType(e.Config.LockType()).typ)
}

// RenewalFailed implements dlock.Observer: it counts the failure.
func (o *Observer) RenewalFailed(e dlock.RenewalEvent) {
	if !o.made() {
		return
	}
	o.renewalFailures.Add(context.Background(), 1, o.ofType(e.Config.LockType()).typ)
}

// RedisError implements dlock.Observer: it counts the error by operation.
func (o *Observer) RedisError(e dlock.RedisErrorEvent) {
	if !o.made() {
		return
	}
	o.makeOps(context.Background()) // (the first event of all may be a Redis error: every op's series starts at 0 first)
	o.redisErrors.Add(context.Background(), 1, o.opAttrs(e.Op))
}

// makeOps adds 0 to dlock.redis.errors for every op, once.
func (o *Observer) makeOps(ctx context.Context) {
	o.opsOnce.Do(func() {
		for _, op := range redisOps {
			o.redisErrors.Add(ctx, 0, o.opAttrs(op))
		}
	})
}
