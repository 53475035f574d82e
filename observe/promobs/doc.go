// Package promobs reports what dlock's locks do as Prometheus metrics. It is a module of its
// own, so that the core library does not depend on the Prometheus client:
//
//	go get github.com/dlockgo/dlock/observe/promobs@<version>
//
// An Observer is both a dlock.Observer, to give to the Generator with dlock.WithObserver, and a
// prometheus.Collector, to register with a prometheus.Registerer. It exports
//
//	dlock_wait_seconds               histogram  type, how     from a Lock or TryLock call to the acquisition
//	dlock_not_obtained_wait_seconds  histogram  type, reason  from a Lock or TryLock call to its failure
//	dlock_hold_seconds               histogram  type          from an acquisition to its final Unlock or Close
//	dlock_acquisitions_total         counter    type, how     acquisitions (re-entries are not)
//	dlock_not_obtained_total         counter    type, reason  Locks that gave up, Locks and TryLocks failed in Redis
//	dlock_losses_total               counter    type          holdings that learnt they had lost the lock
//	dlock_renewal_failures_total     counter    type          renewals that failed and will be retried
//	dlock_redis_errors_total         counter    op            failed Redis round trips, by operation
//
// type is the lock type (such as ORDER); how is dlock.How's name (attempt, barge, hand-over,
// notified, polled, retry); reason is dlock.Reason (timeout, canceled, closed, redis); op is
// the operation of a dlock.RedisErrorEvent (lock, renew, unlock, take, release, leave, load,
// inspect, force-release, subscribe, probe). A TryLock that finds the lock held is not a
// failure and is not counted. Lock targets and keys are never labels: there are as many of
// them as there are orders or users, and a series each would be unbounded. The number of
// series is bounded by the number of lock types.
//
// The counters start at 0: the first event of a lock type (its first acquisition or failure to
// acquire) makes all of that type's counters, for every how and reason, and the first event of
// all makes dlock_redis_errors_total for every op, so that rate() and increase() have data
// before the first loss, timeout or Redis error. Histograms appear with their first
// observation. Nothing is exported before the first event.
//
// otelobs records the same metrics under OpenTelemetry; through the OpenTelemetry Prometheus
// exporter they reach Prometheus under these names and labels, so that one set of alerts and
// dashboards serves both. The repository's docs/observability.md has the alerts and a Grafana
// dashboard.
//
// Usage:
//
//	obs, err := promobs.New(promobs.Options{})
//	if err != nil { ... }
//	prometheus.MustRegister(obs)
//	gen, err := dlock.NewGenerator(client, dlock.WithObserver(obs), dlock.WithDefaultLease(30*time.Second))
package promobs
