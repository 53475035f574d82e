// Package dlock is a re-entrant distributed lock kept in Redis, a Go port of Baidu DLock.
//
// Goroutines of one process that want the same lock wait in a lock-free local queue, so only
// one of them at a time asks Redis; a release publishes a message that wakes the waiting
// processes, and a retry poller covers holders that do not publish (Java DLock). Ownership
// travels in the context an acquire returns; that context ends if the lock is lost.
package dlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlockgo/dlock/domain"
)

// DistributedReentrantLock is a handle on one lock (type and target) of a Generator. Handles
// with the same unique key share one lock within their Generator. A handle is safe for
// concurrent use and cheap; keep it or ask the Generator again.
//
// Ownership is carried by contexts: Lock and TryLock return a context that owns the lock.
// Locking again with that context (or one derived from it) re-enters and raises the hold
// count; Unlock with it lowers the count, and the key is deleted from Redis when the count
// reaches zero. The owner context is cancelled when the lock is released, and cancelled with
// ErrLockLost as its cause (context.Cause) when the lock is lost while held.
type DistributedReentrantLock struct {
	g   *Generator
	cfg domain.DLockConfig
}

// Config returns the lock's configuration: type, target, key and lease.
func (l *DistributedReentrantLock) Config() domain.DLockConfig { return l.cfg }

type ownerKey struct {
	g   *Generator
	key string
}

// holdingOf returns the acquisition ctx owns, or nil.
func (l *DistributedReentrantLock) holdingOf(ctx context.Context) *holding {
	if ctx == nil || l == nil || l.g == nil {
		return nil
	}
	h, _ := ctx.Value(ownerKey{l.g, l.cfg.UniqueKey()}).(*holding)
	if h == nil || h.st.owner.Load() != h {
		return nil
	}
	return h
}

// Lock blocks until it holds the lock or ctx ends, and returns a context that owns it.
// A deadline on ctx gives a timed acquisition. If ctx already owns the lock, Lock re-enters:
// it raises the hold count and returns ctx itself (or ErrLockLost if the lock was lost).
//
// A Lock that gives up returns an error that matches both ErrNotObtained and the context's
// error (context.DeadlineExceeded or context.Canceled), and leaves nothing behind: it has left
// the queue, and a lock granted at the moment of cancellation has been given back. While Redis
// is unreachable Lock keeps waiting (until ctx ends); the error then names the last Redis
// failure too. After Close it returns ErrClosed.
func (l *DistributedReentrantLock) Lock(ctx context.Context) (context.Context, error) {
	return l.acquire(ctx, true)
}

// TryLock makes one attempt: it returns an owning context and true if it got the lock (or
// re-entered it), and false with a nil error if the lock is held, by another process or by
// another goroutine of this one (then without asking Redis). A Redis failure is returned as a
// *RedisProcessError.
func (l *DistributedReentrantLock) TryLock(ctx context.Context) (context.Context, bool, error) {
	owned, err := l.acquire(ctx, false)
	switch {
	case err == nil:
		return owned, true, nil
	case errors.Is(err, ErrOptimisticLocking):
		return nil, false, nil
	}
	return nil, false, err
}

func (l *DistributedReentrantLock) acquire(ctx context.Context, wait bool) (context.Context, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if l == nil || l.g == nil {
		return nil, fmt.Errorf("%w: lock not made by a Generator", ErrInvalidConfig)
	}
	if h := l.holdingOf(ctx); h != nil {
		if cause := context.Cause(h.ctx); errors.Is(cause, ErrLockLost) {
			return nil, cause
		}
		for {
			c := h.count.Load()
			if c <= 0 {
				break // released meanwhile: acquire anew
			}
			if h.count.CompareAndSwap(c, c+1) {
				return ctx, nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotObtained, err)
	}
	st, err := l.g.ref(l.cfg)
	if err != nil {
		return nil, err
	}
	h, err := st.acquire(ctx, wait)
	if err != nil {
		st.idle()
		l.g.unref(st)
		return nil, err
	}
	if l.g.ctx.Err() != nil { // taken as Close ran: give it back
		_ = st.release(context.WithoutCancel(ctx), h, ErrClosed)
		return nil, ErrClosed
	}
	return h.ctx, nil
}

// Unlock releases one hold of the lock owned by ctx. When the hold count reaches zero it lets
// the key go in Redis, only if it still holds this acquisition's locker: handed over to the
// next goroutine of this process that waits, granted to another process that waits, or
// deleted; then it cancels the owner context and wakes the next waiter. Unlock works with an owner context that has been
// cancelled; the Redis call is bounded by the lease.
//
// It returns ErrNotHeld, sending nothing to Redis, when ctx does not own the lock; an error
// matching ErrLockLost when the lock was lost while held (the local hold is released all the
// same); a *RedisProcessError when Redis could not be reached (the key then expires with its
// lease, and the local hold is released).
func (l *DistributedReentrantLock) Unlock(ctx context.Context) error {
	h := l.holdingOf(ctx)
	if h == nil {
		if l != nil && l.g != nil && l.g.isClosed() {
			return ErrClosed
		}
		return ErrNotHeld
	}
	for {
		c := h.count.Load()
		if c <= 0 {
			return ErrNotHeld
		}
		if h.count.CompareAndSwap(c, c-1) {
			if c > 1 {
				return nil
			}
			break
		}
	}
	return h.st.release(context.WithoutCancel(ctx), h, nil)
}

// Do runs fn while holding the lock and always releases it, even if fn panics. fn receives the
// owner context, which ends if the lock is lost. Do returns Lock's error, or fn's error joined
// with Unlock's.
func (l *DistributedReentrantLock) Do(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	owned, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, l.Unlock(owned))
	}()
	return fn(owned)
}

// HoldCount returns how many times ctx holds the lock (0 if it does not own it).
func (l *DistributedReentrantLock) HoldCount(ctx context.Context) int {
	if h := l.holdingOf(ctx); h != nil {
		return int(h.count.Load())
	}
	return 0
}

// FencingToken returns the fencing token of the acquisition ctx owns: a number larger than
// every token handed out before for this key, to be checked by a downstream store (see
// docs/fencing.md). ok is false when ctx does not own the lock.
func (l *DistributedReentrantLock) FencingToken(ctx context.Context) (token uint64, ok bool) {
	if h := l.holdingOf(ctx); h != nil {
		return h.entity.Token, true
	}
	return 0, false
}
