package promobs

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlockgo/dlock/dlock"
)

// Options configures an Observer. The zero value exports the metrics named in the package doc
// with the default buckets.
type Options struct {
	// Namespace, if set, is put before every metric name: Namespace_dlock_wait_seconds.
	// Default: "" (dlock_wait_seconds).
	Namespace string
	// ConstLabels are added to every metric, such as the service's name. Default: none.
	ConstLabels prometheus.Labels
	// WaitBuckets are the upper bounds, in seconds, of dlock_wait_seconds' buckets, strictly
	// increasing. Default: DefaultWaitBuckets().
	WaitBuckets []float64
	// HoldBuckets are the upper bounds, in seconds, of dlock_hold_seconds' buckets, strictly
	// increasing. Default: DefaultHoldBuckets().
	HoldBuckets []float64
}

// DefaultWaitBuckets returns the default buckets of dlock_wait_seconds: from 100 µs (an
// uncontended acquisition, a local hand-over) to 30 s.
func DefaultWaitBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// DefaultHoldBuckets returns the default buckets of dlock_hold_seconds: from 1 ms to 30 min.
func DefaultHoldBuckets() []float64 {
	return []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800}
}

// Observer is a dlock.Observer and a prometheus.Collector (see the package doc). Its methods
// are safe for concurrent use and do not block: each observes one or two metrics. Make it with
// New; one Observer can serve several Generators.
type Observer struct {
	wait, hold                                      *prometheus.HistogramVec
	acquisitions, losses, renewalFails, redisErrors *prometheus.CounterVec
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
		hold: hist("hold_seconds", "Time from an acquisition to its release by the final Unlock or Close.",
			holdB, "type"),
		acquisitions: counter("acquisitions_total", "Acquisitions of locks, re-entries excluded.", "type", "how"),
		losses:       counter("losses_total", "Holdings that learnt they had lost the lock.", "type"),
		renewalFails: counter("renewal_failures_total",
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

// Acquired implements dlock.Observer: it observes the wait and counts the acquisition.
func (o *Observer) Acquired(e dlock.AcquireEvent) {
	t, how := string(e.Config.LockType()), e.How.String()
	o.wait.WithLabelValues(t, how).Observe(e.Wait.Seconds())
	o.acquisitions.WithLabelValues(t, how).Inc()
}

// Released implements dlock.Observer: it observes how long the holding was held. A holding
// lost while held (a renewal found the key gone) is never released, and is not in
// dlock_hold_seconds; one found lost by its release is.
// NotObtained implements dlock.Observer. (Not counted yet.)
func (o *Observer) NotObtained(dlock.NotObtainedEvent) {}

func (o *Observer) Released(e dlock.ReleaseEvent) {
	o.hold.WithLabelValues(string(e.Config.LockType())).Observe(e.Held.Seconds())
}

// Lost implements dlock.Observer: it counts the loss.
func (o *Observer) Lost(e dlock.LossEvent) {
	o.losses.WithLabelValues(string(e.Config.LockType())).Inc()
}

// RenewalFailed implements dlock.Observer: it counts the failure.
func (o *Observer) RenewalFailed(e dlock.RenewalEvent) {
	o.renewalFails.WithLabelValues(string(e.Config.LockType())).Inc()
}

// RedisError implements dlock.Observer: it counts the error by operation.
func (o *Observer) RedisError(e dlock.RedisErrorEvent) {
	o.redisErrors.WithLabelValues(e.Op).Inc()
}

func (o *Observer) collectors() [6]prometheus.Collector {
	return [6]prometheus.Collector{o.wait, o.hold, o.acquisitions, o.losses, o.renewalFails, o.redisErrors}
}

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range o.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	for _, c := range o.collectors() {
		c.Collect(ch)
	}
}
