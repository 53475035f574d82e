// Package promobs reports what dlock's locks do as Prometheus metrics. It is a module of its
// own, so that the core library does not depend on the Prometheus client.
//
// An Observer is both a dlock.Observer, to give to the Generator with dlock.WithObserver, and a
// prometheus.Collector, to register with a prometheus.Registerer. It exports
//
//	dlock_wait_seconds             histogram  type, how  from a Lock or TryLock call to the acquisition
//	dlock_hold_seconds             histogram  type       from an acquisition to its final Unlock or Close
//	dlock_acquisitions_total       counter    type, how  acquisitions (re-entries are not)
//	dlock_losses_total             counter    type       holdings that learnt they had lost the lock
//	dlock_renewal_failures_total   counter    type       renewals that failed and will be retried
//	dlock_redis_errors_total       counter    op         failed Redis round trips, by operation
//
// type is the lock type (such as ORDER); how is dlock.How's name (attempt, barge, hand-over,
// notified, polled, retry); op is the operation of a dlock.RedisErrorEvent (lock, expand,
// unlock, hand-over, ...). Lock targets and keys are never labels: there are as many of them
// as there are orders or users, and a series each would be unbounded. The number of series is
// bounded by the number of lock types.
//
// Usage:
//
//	obs, err := promobs.New(promobs.Options{})
//	if err != nil { ... }
//	prometheus.MustRegister(obs)
//	gen, err := dlock.NewGenerator(client, dlock.WithObserver(obs), dlock.WithDefaultLease(30*time.Second))
package promobs
