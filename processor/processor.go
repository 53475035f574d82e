// Package processor is the storage contract of a distributed lock and its Redis implementation.
package processor

import (
	"context"

	"github.com/dlockgo/dlock/domain"
)

// DLockProcessor reads and writes lock records. Every method is safe for concurrent use and
// honours its context. Failures of the store are returned as *errors.RedisProcessError; answers
// that are not the hoped-for ones (held by another, gone, taken) as errors.ErrOptimisticLocking.
//
// Every method that writes is safe to run twice (a client may send a command again after its
// reply was lost) and safe to run late (after its caller gave up): the key only ever holds the
// locker of the acquisition that asked for it.
type DLockProcessor interface {
	// Load returns the record under the lock's key, or nil when the key is free.
	Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error)
	// Lock writes e.Locker under the key with cfg's lease if the key is free, and sets e.Token
	// (the acquisition's fencing token) and e.Lease. A held key, or an attempt already given
	// back, gives ErrOptimisticLocking; with wait set, a held key also gets this process's
	// waiting mark.
	Lock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig, wait bool) error
	// ExpandLease renews the lease if the key still holds e.Locker, else ErrOptimisticLocking.
	ExpandLease(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error
	// Unlock deletes the key if it still holds e.Locker (else ErrOptimisticLocking), and
	// settles the acquisition either way: a request of it that reaches the store later cannot
	// take the key. It also gives back an acquisition whose outcome is unknown.
	Unlock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error
	// IsFree reports whether the key is absent; when it is held, the store may note that this
	// process waits.
	IsFree(ctx context.Context, cfg domain.DLockConfig) (bool, error)
	// HandOver passes the lock held by from to the new acquisition to (setting to.Token and
	// to.Lease; cfg carries to's lease), without letting it go free. With yield set and
	// another process waiting, it reserves the key for that process instead (only that process's
	// own Lock can take it, for ReserveTTL) and returns ErrYielded. If the key no
	// longer holds from.Locker it returns ErrOptimisticLocking.
	HandOver(ctx context.Context, from, to *domain.DLockEntity, cfg domain.DLockConfig, yield bool) error
	// Unmark withdraws this process's note that it waits for the key.
	Unmark(ctx context.Context, cfg domain.DLockConfig) error
	// Inspect reads what the store holds for the lock, changing nothing.
	Inspect(ctx context.Context, cfg domain.DLockConfig) (Inspection, error)
	// ForceRelease deletes the key if it still holds holder (and settles that acquisition),
	// wakes the waiters as a release does, and reports whether the key held holder.
	ForceRelease(ctx context.Context, cfg domain.DLockConfig, holder string) (bool, error)
}
