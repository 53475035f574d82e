package dlock

import (
	"context"
	"errors"
	"strings"

	dlerrors "github.com/dlockgo/dlock/errors"
)

// The error vocabulary, re-exported from package errors so that users need import only dlock.
// Test with errors.Is and errors.As.
var (
	// ErrOptimisticLocking: Redis answered, but the key was held by another locker, or gone
	// (or, for Semaphore.SetPermits, other changes of the count kept coming first).
	ErrOptimisticLocking = dlerrors.ErrOptimisticLocking
	// ErrNotHeld: an unlock (or ownership question) with a context that does not own the lock.
	ErrNotHeld = dlerrors.ErrNotHeld
	// ErrLockLost: the lock was lost while held (key gone or taken, or renewals failed until
	// the lease ran out). It is the cause of the owner context's cancellation, and what Unlock
	// returns afterwards.
	ErrLockLost = dlerrors.ErrLockLost
	// ErrInvalidConfig: a configuration rejected where it was made.
	ErrInvalidConfig = dlerrors.ErrInvalidConfig
	// ErrNotObtained: Lock gave up without the lock; joined with the context's error.
	ErrNotObtained = dlerrors.ErrNotObtained
	// ErrClosed: the Generator was closed.
	ErrClosed = dlerrors.ErrClosed
	// ErrNotReplicated: fewer replicas than WithReplicaAck asks for acknowledged an
	// acquisition or renewal in time; it comes wrapped in a RedisProcessError.
	ErrNotReplicated = dlerrors.ErrNotReplicated
)

// RedisProcessError reports a failed Redis round trip, naming the operation and the key.
type RedisProcessError = dlerrors.RedisProcessError

// lockError names the lock an error is about, for whoever reads it in a log: ErrNotObtained
// and ErrLockLost come from deep in the library, and most of their causes (a context's end,
// "the key was gone or held by another") do not say which lock. errors.Is and errors.As see
// the error it wraps as before.
type lockError struct {
	err error
	key string
}

func (e *lockError) Error() string { return e.err.Error() + " (lock " + e.key + ")" }
func (e *lockError) Unwrap() error { return e.err }

// named returns err naming the lock key, when it is one of ErrNotObtained, ErrLockLost,
// ErrNotHeld, ErrUpgrade or a context's error and does not name the key already; any other
// error as it is (a *RedisProcessError names its key itself).
func named(err error, key string) error {
	if err == nil || key == "" || strings.Contains(err.Error(), key) {
		return err
	}
	for _, e := range []error{ErrNotObtained, ErrLockLost, ErrNotHeld, ErrUpgrade, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return &lockError{err: err, key: key}
		}
	}
	return err
}
