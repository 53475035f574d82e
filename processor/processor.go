// Package processor is the storage contract of a distributed lock and its Redis implementation.
package processor

import (
	"context"

	"github.com/dlockgo/dlock/domain"
)

// DLockProcessor reads and writes lock records. Every method is safe for concurrent use and
// honours its context. Failures of the store are returned as *errors.RedisProcessError; answers
// that are not the hoped-for ones (held by another, gone, taken) as errors.ErrOptimisticLocking.
type DLockProcessor interface {
	// Load returns the record under the lock's key, or nil when the key is free.
	Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error)
	// Lock writes e.Locker under the key with the lease if the key is free, and sets e.Token
	// to the acquisition's fencing token. A held key gives ErrOptimisticLocking.
	Lock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error
	// ExpandLease renews the lease if the key still holds e.Locker, else ErrOptimisticLocking.
	ExpandLease(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error
	// Unlock lets the key go if it still holds e.Locker (deleted, or granted to a process
	// that waits for it), else ErrOptimisticLocking.
	Unlock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error
	// IsFree reports whether the key is absent; when it is held, the store may note that this
	// process waits.
	IsFree(ctx context.Context, cfg domain.DLockConfig) (bool, error)
	// HandOver passes the lock held by from to the new acquisition to (setting to.Token),
	// without letting it go free. With yield set and another process waiting, it releases the
	// key instead and returns ErrYielded. If the key no longer holds from.Locker it returns
	// ErrOptimisticLocking.
	HandOver(ctx context.Context, from, to *domain.DLockEntity, cfg domain.DLockConfig, yield bool) error
	// Unmark withdraws this process's note that it waits for the key.
	Unmark(ctx context.Context, cfg domain.DLockConfig) error
}
