// Package otelobs reports what dlock's locks do as OpenTelemetry metrics, and traces waiting
// Lock calls as spans. It is a module of its own, so that the core library does not depend on
// OpenTelemetry.
//
// An Observer is a dlock.Observer: give it to the Generator with dlock.WithObserver. It records
//
//	dlock.wait.duration      histogram, s    dlock.type, dlock.how   acquisitions: from the call to the acquisition
//	dlock.hold.duration      histogram, s    dlock.type              holdings let go by their final Unlock or Close
//	dlock.acquisitions       counter         dlock.type, dlock.how   acquisitions (re-entries are not)
//	dlock.losses             counter         dlock.type              holdings that learnt they had lost the lock
//	dlock.renewal.failures   counter         dlock.type              renewals that failed and will be retried
//	dlock.redis.errors       counter         dlock.redis.op          failed Redis round trips, by operation
//
// dlock.type is the lock type (such as ORDER); dlock.how is dlock.How's name (attempt, barge,
// hand-over, notified, polled, retry); dlock.redis.op is the operation of a
// dlock.RedisErrorEvent (lock, expand, unlock, hand-over, ...). Lock targets and keys are never
// metric attributes: there are as many of them as there are orders or users, and a time series
// each would be unbounded. The number of series is bounded by the number of lock types.
//
// Metrics cannot see a span: the Observer learns of an acquisition after the fact, with no
// context. For tracing, call Observer.Lock instead of lock.Lock: it runs lock.Lock inside a
// span "dlock.Lock" that carries the type, key, how, fencing token and wait of the acquisition.
//
// Usage:
//
//	obs, err := otelobs.New(otelobs.Options{}) // otel.GetMeterProvider(), otel.GetTracerProvider()
//	if err != nil { ... }
//	gen, err := dlock.NewGenerator(client, dlock.WithObserver(obs), dlock.WithDefaultLease(30*time.Second))
//	if err != nil { ... }
//	lock, err := gen.Gen("ORDER", id)
//	if err != nil { ... }
//	owned, err := obs.Lock(ctx, lock) // lock.Lock(ctx) in a span "dlock.Lock"
//	if err != nil { ... }
//	defer lock.Unlock(owned)
package otelobs
