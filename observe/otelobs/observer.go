package otelobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// The attribute keys of the metrics and of the "dlock.Lock" span.
const (
	AttrType    = attribute.Key("dlock.type")     // lock type: metrics and spans
	AttrHow     = attribute.Key("dlock.how")      // dlock.How's name: metrics and spans
	AttrRedisOp = attribute.Key("dlock.redis.op") // the failed operation: dlock.redis.errors
	AttrKey     = attribute.Key("dlock.key")      // Redis key DLOCK_<type>_<target>: spans only
	AttrToken   = attribute.Key("dlock.token")    // fencing token: spans only
	AttrWait    = attribute.Key("dlock.wait")     // seconds from the call to the acquisition: spans only
	AttrReentry = attribute.Key("dlock.reentry")  // true when the Lock re-entered: spans only
)

// Options configures an Observer. The zero value uses the global providers.
type Options struct {
	// MeterProvider makes the meter of the metrics. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the tracer of Observer.Lock's spans. Default:
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// WaitBuckets are the bucket boundaries, in seconds, of dlock.wait.duration, strictly
	// increasing. Default: DefaultWaitBuckets().
	WaitBuckets []float64
	// HoldBuckets are the bucket boundaries, in seconds, of dlock.hold.duration, strictly
	// increasing. Default: DefaultHoldBuckets().
	HoldBuckets []float64
}

// DefaultWaitBuckets returns the default bucket boundaries of dlock.wait.duration, in
// seconds: from 100 µs (an uncontended acquisition, a local hand-over) to 30 s.
func DefaultWaitBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// DefaultHoldBuckets returns the default bucket boundaries of dlock.hold.duration, in seconds:
// from 1 ms to 30 min.
func DefaultHoldBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800}
}

// Observer is a dlock.Observer that records OpenTelemetry metrics (see the package doc), and
// traces the Lock calls made through its Lock method. Its methods are safe for concurrent use;
// the dlock.Observer ones do not block: each adds to one or two instruments, and Acquired also
// takes a short mutex while a traced Lock waits. Make it with New.
type Observer struct {
	wait, hold                           metric.Float64Histogram
	acquired, lost, renewFailed, redisEr metric.Int64Counter
	tracer                               trace.Tracer

	byType  sync.Map // domain.DLockType → metric.MeasurementOption
	byHow   sync.Map // typeHow → metric.MeasurementOption
	byRedis sync.Map // op string → metric.MeasurementOption

	traced atomic.Int64 // traced Lock calls under way: Acquired skips mu when 0
	mu     sync.Mutex   // protects waits
	waits  map[string]*waiting
}

var _ dlock.Observer = (*Observer)(nil)

type typeHow struct {
	t   domain.DLockType
	how dlock.How
}

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
	var errs [6]error
	o.wait, errs[0] = m.Float64Histogram("dlock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a Lock or TryLock call to the acquisition of the lock."),
		metric.WithExplicitBucketBoundaries(slices.Clone(waitB)...))
	o.hold, errs[1] = m.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from an acquisition to its release by the final Unlock or Close."),
		metric.WithExplicitBucketBoundaries(slices.Clone(holdB)...))
	o.acquired, errs[2] = m.Int64Counter("dlock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions of locks, re-entries excluded."))
	o.lost, errs[3] = m.Int64Counter("dlock.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Holdings that learnt they had lost the lock."))
	o.renewFailed, errs[4] = m.Int64Counter("dlock.renewal.failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Lease renewals that failed and are retried until the lease runs out."))
	o.redisEr, errs[5] = m.Int64Counter("dlock.redis.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed Redis round trips, by operation."))
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

// cached returns the measurement option of attrs under k, made once: attribute sets are
// sorted and hashed when made, which the hot path should not pay for every event.
func cached(m *sync.Map, k any, attrs ...attribute.KeyValue) metric.MeasurementOption {
	if v, ok := m.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := m.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return v.(metric.MeasurementOption)
}

func (o *Observer) typeAttrs(t domain.DLockType) metric.MeasurementOption {
	return cached(&o.byType, t, AttrType.String(string(t)))
}

// Acquired implements dlock.Observer: it records the wait and counts the acquisition.
func (o *Observer) Acquired(e dlock.AcquireEvent) {
	t := e.Config.LockType()
	attrs := cached(&o.byHow, typeHow{t, e.How}, AttrType.String(string(t)), AttrHow.String(e.How.String()))
	ctx := context.Background()
	o.wait.Record(ctx, e.Wait.Seconds(), attrs)
	o.acquired.Add(ctx, 1, attrs)
	if o.traced.Load() > 0 {
		o.note(e)
	}
}

// Released implements dlock.Observer: it records how long the holding was held. A holding lost
// while held (a renewal found the key gone) is never released, and is not in
// dlock.hold.duration; one found lost by its release is.
// NotObtained implements dlock.Observer. (Not counted yet.)
func (o *Observer) NotObtained(dlock.NotObtainedEvent) {}

func (o *Observer) Released(e dlock.ReleaseEvent) {
	o.hold.Record(context.Background(), e.Held.Seconds(), o.typeAttrs(e.Config.LockType()))
}

// Lost implements dlock.Observer: it counts the loss.
func (o *Observer) Lost(e dlock.LossEvent) {
	o.lost.Add(context.Background(), 1, o.typeAttrs(e.Config.LockType()))
}

// RenewalFailed implements dlock.Observer: it counts the failure.
func (o *Observer) RenewalFailed(e dlock.RenewalEvent) {
	o.renewFailed.Add(context.Background(), 1, o.typeAttrs(e.Config.LockType()))
}

// RedisError implements dlock.Observer: it counts the error by operation.
func (o *Observer) RedisError(e dlock.RedisErrorEvent) {
	o.redisEr.Add(context.Background(), 1, cached(&o.byRedis, e.Op, AttrRedisOp.String(e.Op)))
}
