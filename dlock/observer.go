package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockgo/dlock/domain"
)

// Observer is told what the locks of a Generator do, for metrics and tracing (WithObserver;
// adapters for OpenTelemetry and Prometheus live in modules of their own). Its methods are called
// synchronously, on the goroutine that did the thing (a MultiLock releases its parts on goroutines
// of its own) and often while a lock's local state is busy, concurrently from many goroutines: they
// must be safe for concurrent use, fast, and must not block, panic or call back into the lock (a
// panic on a goroutine of dlock's — a renewal, a background release, a MultiLock's part — ends
// the process, as any goroutine's does). Embed NopObserver to implement only some of them.
type Observer interface {
	// Acquired: a Lock or TryLock got the lock (not a re-entry).
	Acquired(AcquireEvent)
	// NotObtained: a Lock gave up (deadline, cancellation, Close), or a Lock or TryLock
	// failed because of Redis. A TryLock that found the lock held is not reported: that is
	// its answer, not a failure; nor is a write side asked by an owner of the read side
	// (ErrUpgrade): a call refused, not an acquisition.
	NotObtained(NotObtainedEvent)
	// Released: a holding's final Unlock, or Close, let it go.
	Released(ReleaseEvent)
	// Lost: a holding learnt it had lost the lock. It is reported just after the owner's
	// context ends (a slow observer never delays the holder's notice), or, for a loss found
	// only when a mutex's failed release was retried in the background, or by the release of
	// a holding Close ended, once that release finds it (see LossEvent).
	Lost(LossEvent)
	// RenewalFailed: a renewal could not be made (Redis failed or did not answer in time); it
	// is retried until the lease runs out.
	RenewalFailed(RenewalEvent)
	// RedisError: a Redis round trip failed, whatever the operation (renewals included); not
	// one cut short by Close or by its caller's context ending (cancelled, or its deadline
	// reached while the request was on its way).
	RedisError(RedisErrorEvent)
}

// NopObserver does nothing; embed it in an Observer to implement only some methods.
type NopObserver struct{}

// Acquired implements Observer.
func (NopObserver) Acquired(AcquireEvent) {}

// NotObtained implements Observer.
func (NopObserver) NotObtained(NotObtainedEvent) {}

// Released implements Observer.
func (NopObserver) Released(ReleaseEvent) {}

// Lost implements Observer.
func (NopObserver) Lost(LossEvent) {}

// RenewalFailed implements Observer.
func (NopObserver) RenewalFailed(RenewalEvent) {}

// RedisError implements Observer.
func (NopObserver) RedisError(RedisErrorEvent) {}

// How says how an acquisition got the lock.
type How int

const (
	// HowAttempt: the caller's first request to Redis, with no other goroutine of this
	// process waiting (or a TryLock).
	HowAttempt How = iota
	// HowBarge: the caller's first request, made ahead of goroutines of this process that
	// were already waiting (see WithFIFO).
	HowBarge
	// HowHandOver: a goroutine of this process that released the lock passed it to this
	// waiter within the process, with no Redis command or after a renewal (see
	// WithLocalHandOff).
	HowHandOver
	// HowNotified: a waiter woken by another process's release message (cross-process
	// hand-off).
	HowNotified
	// HowPolled: a waiter woken by the retry poller, which found the key free.
	HowPolled
	// HowRetry: a waiter woken otherwise: a release of this process that let the key go, a
	// give-back, a fresh subscription; or one that took the key its process got for a
	// goroutine that did not take it (held back while a ForceRelease of the process's own was
	// on its way).
	HowRetry
)

var howNames = [...]string{"attempt", "barge", "hand-over", "notified", "polled", "retry"}

// String returns the kind's name: attempt, barge, hand-over, notified, polled or retry.
func (h How) String() string {
	if h >= 0 && int(h) < len(howNames) {
		return howNames[h]
	}
	return "unknown"
}

// LockKind says which kind of lock an event is about, for metrics that tell them apart.
type LockKind string

const (
	// KindMutex: a DistributedReentrantLock (or a part of a MultiLock).
	KindMutex LockKind = "mutex"
	// KindRead: the read side of an RWLock.
	KindRead LockKind = "read"
	// KindWrite: the write side of an RWLock.
	KindWrite LockKind = "write"
	// KindPermits: permits of a Semaphore.
	KindPermits LockKind = "permits"
)

// LockKinds lists every LockKind, for metrics that start each series at zero.
func LockKinds() []LockKind { return []LockKind{KindMutex, KindRead, KindWrite, KindPermits} }

// AcquireEvent describes an acquisition.
type AcquireEvent struct {
	Kind   LockKind
	Config domain.DLockConfig // the lock, with the lease of the handle used
	Wait   time.Duration      // from the call to the acquisition
	How    How
	Token  uint64 // the fencing token
}

// NotObtainedEvent describes an acquisition that did not happen.
type NotObtainedEvent struct {
	Kind   LockKind
	Config domain.DLockConfig // the lock, with the lease of the handle used
	Wait   time.Duration      // from the call to the failure
	Reason Reason
	Err    error // what the call returned
}

// Reason says why an acquisition did not happen; there are only these few, so that metrics
// can use it as a label.
type Reason string

const (
	// ReasonTimeout: the context's deadline ran out first.
	ReasonTimeout Reason = "timeout"
	// ReasonCanceled: the context was cancelled.
	ReasonCanceled Reason = "canceled"
	// ReasonClosed: the Generator was closed.
	ReasonClosed Reason = "closed"
	// ReasonRedis: Redis failed (a TryLock's attempt, or a Lock that gave up while its last
	// attempt had failed in Redis).
	ReasonRedis Reason = "redis"
)

// reasonOf classifies what a failed acquisition returned.
func reasonOf(err error) Reason {
	switch {
	case errors.Is(err, ErrClosed):
		return ReasonClosed
	case redisFault(err):
		return ReasonRedis
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	}
	return ReasonCanceled
}

// ReleaseEvent describes a holding let go by its final Unlock or by Close.
type ReleaseEvent struct {
	Kind   LockKind
	Config domain.DLockConfig
	Token  uint64        // the acquisition's fencing token, as in its AcquireEvent
	Held   time.Duration // from the acquisition to the release
	Err    error         // the release's error, if any (ErrLockLost when it found the key gone)
}

// LossEvent describes a holding that learnt it had lost the lock. A loss found by the final
// Unlock is followed by a ReleaseEvent; one found otherwise (a renewal, the lease running out,
// ForceRelease in this Generator) is not. A mutex's final Unlock whose release failed (its
// ReleaseEvent carries the *RedisProcessError) has the release retried in the background: if
// the retry finds the key gone or another's before the lease ran out, the loss is reported
// then, after that ReleaseEvent (a retry after the lease ran out that finds the key expired
// is no loss). So is a holding of any kind that Close ended (its ReleaseEvent carries
// ErrClosed) whose release, or its retry, finds it gone from Redis before the lease ran out.
type LossEvent struct {
	Kind   LockKind
	Config domain.DLockConfig
	Token  uint64        // the acquisition's fencing token, as in its AcquireEvent
	Held   time.Duration // from the acquisition to the notice
	Cause  error         // matches ErrLockLost
}

// RenewalEvent describes a renewal that failed and will be retried.
type RenewalEvent struct {
	Config domain.DLockConfig
	Err    error
}

// RedisErrorEvent describes a failed Redis round trip.
type RedisErrorEvent struct {
	Op  string // one of RedisOps()
	Key string
	Err error
}

// Hows lists every How, for metrics that start each series at zero.
func Hows() []How { return []How{HowAttempt, HowBarge, HowHandOver, HowNotified, HowPolled, HowRetry} }

// Reasons lists every Reason, for metrics that start each series at zero.
func Reasons() []Reason { return []Reason{ReasonTimeout, ReasonCanceled, ReasonClosed, ReasonRedis} }

// RedisOps lists the operations a RedisErrorEvent names, for metrics that start each series at
// zero: lock (an attempt or a poll), renew, unlock, take and release (the read-write lock's and
// the semaphore's), leave (the line), load, inspect (State), force-release, subscribe and probe
// (the release channel's).
func RedisOps() []string {
	return []string{"lock", "renew", "unlock", "take", "release", "leave", "load", "inspect", "force-release", "subscribe", "probe"}
}
