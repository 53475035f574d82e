package dlock

import dlerrors "github.com/dlockgo/dlock/errors"

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
