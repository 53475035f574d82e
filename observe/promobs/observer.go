package promobs

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
)

// Options configures an Observer. The zero value exports the metrics named in the package doc
// with the default buckets.
type Options struct {
	// Namespace, if set, is put before every metric name: Namespace_dlock_wait_seconds.
	// Default: "" (dlock_wait_seconds).
	Namespace string
	// ConstLabels are added to every metric, such as the service's name. Default: none.
	ConstLabels prometheus.Labels
	// WaitBuckets are the upper bounds, in seconds, of the buckets of dlock_wait_seconds and
	// dlock_not_obtained_wait_seconds, strictly increasing. Default: DefaultWaitBuckets().
	WaitBuckets []float64
	// HoldBuckets are the upper bounds, in seconds, of dlock_hold_seconds' buckets, strictly
	// increasing. Default: DefaultHoldBuckets().
	HoldBuckets []float64
}

// DefaultWaitBuckets returns the default buckets of dlock_wait_seconds and
// dlock_not_obtained_wait_seconds: from 100 µs (an uncontended acquisition, a local
// hand-over) to 30 s. They are otelobs.DefaultWaitBuckets.
func DefaultWaitBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// DefaultHoldBuckets returns the default buckets of dlock_hold_seconds: from 1 ms to 30 min.
// They are otelobs.DefaultHoldBuckets.
func DefaultHoldBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800}
}

// Observer is a dlock.Observer and a prometheus.Collector (see the package doc). Its methods
// are safe for concurrent use and do not block: each observes one or two metrics (the first
// event of a lock type also makes that type's counters, at 0). Make it with New; one Observer
// can serve several Generators. A nil or zero Observer (not made by New) records and exports
// nothing, and never panics.
type Observer struct {
	wait, notObtainedWait, hold                                     *prometheus.HistogramVec
	acquisitions, notObtained, losses, renewalFailures, redisErrors *prometheus.CounterVec

	types   sync.Map  // domain.DLockType → *typeMetrics, made by the type's first event
	opsOnce sync.Once // makes dlock_redis_errors_total for every op, at the first event of all
}

var (
	_ dlock.Observer       = (*Observer)(nil)
	_ prometheus.Collector = (*Observer)(nil)
)

// New returns an Observer with opts. It returns an error if bucket bounds are not strictly
// increasing; invalid names or labels are reported when the Observer is registered.
func New(opts Options) (*Observer, error) {
	waitB, holdB := opts.WaitBuckets, opts.HoldBuckets
	if waitB == nil {
		waitB = DefaultWaitBuckets()
	}
	if holdB == nil {
		holdB = DefaultHoldBuckets()
	}
	waitB, holdB = slices.Clone(waitB), slices.Clone(holdB) // kept: the caller may reuse its slices
	if err := increasing(waitB); err != nil {
		return nil, fmt.Errorf("promobs: wait buckets: %w", err)
	}
	if err := increasing(holdB); err != nil {
		return nil, fmt.Errorf("promobs: hold buckets: %w", err)
	}
	hist := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: opts.Namespace, Subsystem: "dlock", Name: name, Help: help,
			ConstLabels: opts.ConstLabels, Buckets: buckets,
		}, labels)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: opts.Namespace, Subsystem: "dlock", Name: name, Help: help,
			ConstLabels: opts.ConstLabels,
		}, labels)
	}
	return &Observer{
		wait: hist("wait_seconds", "Time from a Lock or TryLock call to the acquisition of the lock.",
			waitB, "type", "how"),
		notObtainedWait: hist("not_obtained_wait_seconds",
			"Time from a Lock or TryLock call to its failure to acquire the lock.", waitB, "type", "reason"),
		hold: hist("hold_seconds", "Time from an acquisition to its release by the final Unlock or Close.",
			holdB, "type"),
		acquisitions: counter("acquisitions_total", "Acquisitions of locks, re-entries excluded.", "type", "how"),
		notObtained: counter("not_obtained_total",
			"Lock calls that gave up (deadline, cancellation, Close) and Lock or TryLock calls that failed in Redis.",
			"type", "reason"),
		losses: counter("losses_total", "Holdings that learnt they had lost the lock.", "type"),
		renewalFailures: counter("renewal_failures_total",
			"Lease renewals that failed and are retried until the lease runs out.", "type"),
		redisErrors: counter("redis_errors_total", "Failed Redis round trips, by operation.", "op"),
	}, nil
}

func increasing(b []float64) error {
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) {
			return fmt.Errorf("bounds %v are not strictly increasing", b)
		}
	}
	return nil
}

// The values of how, reason and op the core names: the first event of a lock type makes the
// counters of all of them, at 0.
var (
	hows     = dlock.Hows()
	reasons  = dlock.Reasons()
	redisOps = dlock.RedisOps()
)

// typeMetrics holds the counters of one lock type, looked up once: a lookup by label values
// hashes them, which the hot path should not pay for every event. It is read-only once made.
type typeMetrics struct {
	t                         string
	losses, renewalFailures   prometheus.Counter
	acquisitions, notObtained map[string]prometheus.Counter // by how, by reason
}

// ofType returns t's counters. The first event of a type makes them, so that they are
// exported at 0 before anything happens to them and rate() or increase() over them has data:
// an alert on losses sees the first loss. Histograms are made by their first observation: a
// histogram series per how and reason at 0 would cost some twenty series each. The type label
// is t with bytes that are not UTF-8 replaced by U+FFFD: dlock accepts them in a type, a
// Prometheus label value does not (WithLabelValues panics).
func (o *Observer) ofType(t domain.DLockType) *typeMetrics {
	if v, ok := o.types.Load(t); ok {
		return v.(*typeMetrics)
	}
	s := strings.ToValidUTF8(string(t), "\uFFFD")
	tm := &typeMetrics{
		t:               s,
		losses:          o.losses.WithLabelValues(s),
		renewalFailures: o.renewalFailures.WithLabelValues(s),
		acquisitions:    make(map[string]prometheus.Counter, len(hows)),
		notObtained:     make(map[string]prometheus.Counter, len(reasons)),
	}
	for _, h := range hows {
		tm.acquisitions[h.String()] = o.acquisitions.WithLabelValues(s, h.String())
	}
	for _, r := range reasons {
		tm.notObtained[string(r)] = o.notObtained.WithLabelValues(s, string(r))
	}
	o.makeOps()
	v, _ := o.types.LoadOrStore(t, tm)
	return v.(*typeMetrics)
}

// Acquired implements dlock.Observer: it observes the wait in dlock_wait_seconds and counts
// the acquisition.
func (o *Observer) Acquired(e dlock.AcquireEvent) {
	if !o.made() {
		return
	}
	tm, how := o.ofType(e.Config.LockType()), e.How.String()
	o.wait.WithLabelValues(tm.t, how).Observe(e.Wait.Seconds())
	if c, ok := tm.acquisitions[how]; ok {
		c.Inc()
	} else { // a how the core added after this adapter
		o.acquisitions.WithLabelValues(tm.t, how).Inc()
	}
}

// NotObtained implements dlock.Observer: it observes the wait until the failure in
// dlock_not_obtained_wait_seconds and counts the failure by reason.
func (o *Observer) NotObtained(e dlock.NotObtainedEvent) {
	if !o.made() {
		return
	}
	tm, reason := o.ofType(e.Config.LockType()), string(e.Reason)
	o.notObtainedWait.WithLabelValues(tm.t, reason).Observe(e.Wait.Seconds())
	if c, ok := tm.notObtained[reason]; ok {
		c.Inc()
	} else { // a reason the core added after this adapter
		o.notObtained.WithLabelValues(tm.t, reason).Inc()
	}
}

// Released implements dlock.Observer: it observes how long the holding was held. A holding
// lost while held (a renewal found the key gone) is never released, and is not in
// dlock_hold_seconds; one found lost by its release is.
func (o *Observer) Released(e dlock.ReleaseEvent) {
	if !o.made() {
		return
	}
	o.hold.WithLabelValues(o.ofType(e.Config.LockType()).t).Observe(e.Held.Seconds())
}

// Lost implements dlock.Observer: it counts the loss.
func (o *Observer) Lost(e dlock.LossEvent) {
	if !o.made() {
		return
	}
	o.ofType(e.Config.LockType()).losses.Inc()
}

// RenewalFailed implements dlock.Observer: it counts the failure.
func (o *Observer) RenewalFailed(e dlock.RenewalEvent) {
	if !o.made() {
		return
	}
	o.ofType(e.Config.LockType()).renewalFailures.Inc()
}

// RedisError implements dlock.Observer: it counts the error by operation.
func (o *Observer) RedisError(e dlock.RedisErrorEvent) {
	if !o.made() {
		return
	}
	o.makeOps() // (the first event of all may be a Redis error: every op's series is born at 0 first)
	o.redisErrors.WithLabelValues(e.Op).Inc()
}

// makeOps makes dlock_redis_errors_total for every op, once.
func (o *Observer) makeOps() {
	o.opsOnce.Do(func() {
		for _, op := range redisOps {
			o.redisErrors.WithLabelValues(op)
		}
	})
}

// made reports whether o was made by New: a nil or zero Observer records nothing.
func (o *Observer) made() bool { return o != nil && o.wait != nil }

func (o *Observer) collectors() [8]prometheus.Collector {
	return [8]prometheus.Collector{o.wait, o.notObtainedWait, o.hold,
		o.acquisitions, o.notObtained, o.losses, o.renewalFailures, o.redisErrors}
}

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	if !o.made() {
		return
	}
	for _, c := range o.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	if !o.made() {
		return
	}
	for _, c := range o.collectors() {
		c.Collect(ch)
	}
}
