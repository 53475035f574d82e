// Package errors is the error vocabulary of dlock. Every value here works with the standard
// errors.Is and errors.As. Users of the dlock package find the same sentinels re-exported there.
package errors

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrOptimisticLocking reports that Redis answered but not as hoped: the key is held by
	// another locker (on acquire), or is gone or holds another locker (on renew or release),
	// or a semaphore's count kept changing under SetPermits.
	ErrOptimisticLocking = errors.New("dlock: optimistic locking failure")
	// ErrNotHeld reports an unlock, or a question about ownership, with a context that does not
	// own the lock.
	ErrNotHeld = errors.New("dlock: lock not held by this context")
	// ErrLockLost reports that a lock was lost while held: a renewal found the key gone or
	// taken, or renewals failed until the lease ran out.
	ErrLockLost = errors.New("dlock: lock lost")
	// ErrInvalidConfig reports a configuration rejected where it was made.
	ErrInvalidConfig = errors.New("dlock: invalid configuration")
	// ErrNotObtained reports that an acquire gave up without the lock; it is joined with the
	// reason (the context's error, or the last Redis error).
	ErrNotObtained = errors.New("dlock: lock not obtained")
	// ErrClosed reports a call on a generator that has been closed.
	ErrClosed = errors.New("dlock: generator closed")

	// ErrNotReplicated reports that Redis ran an acquisition or renewal but fewer replicas
	// than asked for acknowledged it in time (WithReplicaAck); it comes wrapped in a
	// RedisProcessError, since the write may not survive a failover.
	ErrNotReplicated = errors.New("dlock: not acknowledged by enough replicas in time")
)

// RedisProcessError reports a failed Redis round trip: the operation, the key and the cause.
type RedisProcessError struct {
	Op  string // the operation: "lock", "renew", "unlock", "take", "release", "leave", "subscribe", …
	Key string
	Err error
}

// Error describes the failure; a nil *RedisProcessError says "<nil>". An ACL's refusal (a
// NOPERM, or a command a script calls: a Redis before 7.2 does not name it) is followed by
// where the rules dlock needs are listed.
func (e *RedisProcessError) Error() string {
	if e == nil {
		return "<nil>"
	}
	hint := ""
	if e.Err != nil {
		if msg := e.Err.Error(); strings.Contains(msg, "NOPERM") || strings.Contains(msg, "The user executing the script can't") {
			hint = " (an ACL refusal: README's \"Least privilege\" lists the commands, keys and channels dlock needs)"
		}
	}
	if e.Key == "" { // (a request of no one key: the servers' COMMAND INFO)
		return fmt.Sprintf("dlock: redis %s: %v%s", e.Op, e.Err, hint)
	}
	return fmt.Sprintf("dlock: redis %s %q: %v%s", e.Op, e.Key, e.Err, hint)
}

// Unwrap returns the cause (nil for a nil *RedisProcessError).
func (e *RedisProcessError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}
