// Package otelobs reports what dlock's locks do as OpenTelemetry metrics, and traces waiting
// Lock calls as spans. It is a module of its own, so that the core library does not depend on
// OpenTelemetry:
//
//	go get github.com/dlockgo/dlock/observe/otelobs@<version>
//
// An Observer is a dlock.Observer: give it to the Generator with dlock.WithObserver. It records
// these instruments (right: the name the OpenTelemetry Prometheus exporter gives them, which
// is the name promobs exports)
//
//	dlock.wait               histogram, s  type, how     dlock_wait_seconds
//	dlock.not_obtained_wait  histogram, s  type, reason  dlock_not_obtained_wait_seconds
//	dlock.hold               histogram, s  type          dlock_hold_seconds
//	dlock.acquisitions       counter       type, how     dlock_acquisitions_total
//	dlock.not_obtained       counter       type, reason  dlock_not_obtained_total
//	dlock.losses             counter       type          dlock_losses_total
//	dlock.renewal.failures   counter       type          dlock_renewal_failures_total
//	dlock.redis.errors       counter       op            dlock_redis_errors_total
//
// dlock.wait is the time from a Lock or TryLock call to the acquisition, dlock.not_obtained_wait
// the time to its failure, dlock.hold the time from an acquisition to its final Unlock or Close.
// dlock.acquisitions counts acquisitions (re-entries are not); dlock.not_obtained counts Lock
// calls that gave up and Lock or TryLock calls that failed in Redis (a TryLock that finds the
// lock held is not a failure); dlock.losses counts holdings that learnt they had lost the
// lock, dlock.renewal.failures renewals that failed and will be retried, dlock.redis.errors
// failed Redis round trips.
//
// The attributes: type (LabelType) is the lock type (such as ORDER); how (LabelHow) is
// dlock.How's name (attempt, barge, hand-over, notified, polled, retry); reason (LabelReason)
// is dlock.Reason (timeout, canceled, closed, redis); op (LabelOp) is the operation of a
// dlock.RedisErrorEvent (lock, renew, unlock, take, release, leave, load, inspect,
// force-release, subscribe, probe). They carry no dlock. prefix so that Prometheus sees the
// labels promobs exports. Lock targets and keys are never metric attributes: there are as many
// of them as there are orders or users, and a time series each would be unbounded. The number
// of series is bounded by the number of lock types.
//
// The counters start at 0: the first event of a lock type (its first acquisition or failure to
// acquire) adds 0 to all of that type's counters, for every how and reason, and the first
// event of all adds 0 to dlock.redis.errors for every op, so that rate() and increase() have
// data before the first loss, timeout or Redis error. Histograms appear with their first
// recording.
//
// The Prometheus names above hold for the exporter go.opentelemetry.io/otel/exporters/prometheus
// with its default translation strategy (UnderscoreEscapingWithSuffixes: dots become
// underscores, the unit "s" appends _seconds, a unit in braces appends nothing, a counter gets
// _total) and no WithNamespace; the exporter adds the labels otel_scope_name, otel_scope_version
// and otel_scope_schema_url (unless WithoutScopeInfo), which queries that aggregate by type, how,
// reason or op do not see. The repository's docs/observability.md has the alerts and a Grafana
// dashboard.
//
// Metrics cannot see a span: the Observer learns of an acquisition after the fact, with no
// context. For tracing, call Observer.Lock instead of lock.Lock: it runs lock.Lock inside a
// span "dlock.Lock" that carries the type, key, how, fencing token and wait of the acquisition
// (span attributes are prefixed: dlock.type, dlock.key, ...).
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
