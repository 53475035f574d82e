package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
	"github.com/dlockgo/dlock/threads"
)

// State is a lock as Redis and this Generator see it at one moment (State).
type State struct {
	// Config is the lock's configuration (the handle's).
	Config domain.DLockConfig
	// Holder is the locker of the acquisition that holds the key, "" when nobody does. A
	// locker is <ip>-<pid>-<nonce>-<n>: the process and Generator that made it, and a number.
	Holder string
	// Mine reports whether Holder is an acquisition of this Generator.
	Mine bool
	// ReservedFor is set when a holder released the key to a waiting process that has not
	// taken it yet (see WithLocalHandOff): that process's locker prefix. Nobody else can take
	// the key until the reservation expires.
	ReservedFor string
	// LeaseLeft is how long the holding (or the reservation) lasts unless renewed; 0 when free.
	LeaseLeft time.Duration
	// Fence is the key's fencing counter: the last token handed out, while Redis keeps it
	// (two leases after the last acquisition or renewal); 0 once it expired. The next token
	// is larger than both it and the server clock in microseconds.
	Fence uint64
	// Waiting lists the processes (their locker prefixes) that recorded in Redis that they
	// wait for the key, first in line first; empty when none did. A process that only uses
	// TryLock never waits.
	Waiting []string
	// LocalWaiters reports whether goroutines of this Generator wait for the lock.
	LocalWaiters bool
}

// Held reports whether some acquisition holds the key.
func (s State) Held() bool { return s.Holder != "" }

// State reads the lock's state from Redis in one round trip (a read-only script) and adds
// what this Generator knows. It is safe for concurrent use and changes nothing. It returns a
// *RedisProcessError when Redis fails, and ctx's error (the call abandoned) when ctx ends
// first.
func (l *DistributedReentrantLock) State(ctx context.Context) (State, error) {
	if err := l.check(ctx); err != nil {
		return State{}, err
	}
	var in processor.Inspection
	err, _ := l.g.call(ctx, func(ctx context.Context) error {
		var err error
		in, err = l.g.proc.Inspect(ctx, l.cfg)
		return err
	})
	if err != nil {
		return State{}, err
	}
	s := State{Config: l.cfg, LeaseLeft: in.TTL, Fence: in.Fence}
	if in.Want != "" {
		s.Waiting = []string{in.Want}
	}
	if mark, ok := strings.CutPrefix(in.Holder, processor.ReservedPrefix); ok {
		s.ReservedFor = mark
	} else {
		s.Holder = in.Holder
		s.Mine = in.Holder != "" && strings.HasPrefix(in.Holder, l.g.prefix)
	}
	if st := l.g.lookup(l.cfg.UniqueKey()); st != nil {
		s.LocalWaiters = st.q.HasWaiters()
	}
	return s, nil
}

// Extend renews the lease of the acquisition owned by owned at once, with a new length, and
// keeps renewing it with that length until it is released. It bounds the Redis call by the
// current lease. It returns ErrInvalidConfig for a bad lease, ErrNotHeld when owned does not
// own the lock, an error matching ErrLockLost when the holding was lost (including when this
// renewal finds the key gone or taken: the holding is then lost, as on any renewal), ErrClosed
// after Close, and a *RedisProcessError when Redis failed (the holding keeps its old lease
// and renewals). Safe for concurrent use; concurrent Extends of one holding are applied one
// at a time.
func (l *DistributedReentrantLock) Extend(owned context.Context, lease time.Duration) error {
	if err := domain.ValidateLease(lease); err != nil {
		return err
	}
	h := l.holdingOf(owned)
	if h == nil {
		if l == nil || l.g == nil || l.g.proc == nil {
			return errZeroLock
		}
		return ErrNotHeld
	}
	if err := h.heldErr(); err != nil {
		return err
	}
	h.mu.Lock()
	exp := h.exp
	h.mu.Unlock()
	if exp == nil {
		return h.heldErr()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(owned), h.lease())
	defer cancel()
	// The holding's expander makes the renewal itself, between its own renewals, so that no
	// renewal with the old lease lands after it.
	err := exp.Extend(ctx, lease)
	switch {
	case err == nil:
		h.mu.Lock()
		h.leaseNow = lease
		h.mu.Unlock()
		return h.heldErr()
	case errors.Is(err, threads.ErrExpanderEnded), errors.Is(err, ErrOptimisticLocking):
		if err := h.heldErr(); err != nil {
			return err
		}
		return ErrNotHeld
	case !redisFailed(err):
		err = &RedisProcessError{Op: "renew", Key: h.cfg.UniqueKey(), Err: err}
	}
	return err
}

// ForceRelease deletes the lock's key if it is still held by holder — the locker State
// reports in Holder — and wakes the processes that wait, as a release does. It is an
// operator's last resort for a lock stuck in an incident: the holder is not asked. It reports
// whether the key held holder (false when the key is free or held by another acquisition:
// nothing is changed then). Naming the holder makes it safe to repeat: a second copy of the
// request, sent again by the client after a lost reply, finds the holder gone and cannot
// remove the key of whoever acquired after it.
//
// A holder in this Generator learns of its loss at once; one elsewhere learns of it at its
// next renewal (within three quarters of its lease) or release, as of any loss, so until then
// two processes may act as owners — use fencing tokens downstream. It returns ErrInvalidConfig
// for an empty holder, a *RedisProcessError when Redis failed, ctx's error when ctx ended
// first. Safe for concurrent use.
func (l *DistributedReentrantLock) ForceRelease(ctx context.Context, holder string) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if holder == "" {
		return false, fmt.Errorf("%w: ForceRelease needs the holder to remove (State's Holder)", ErrInvalidConfig)
	}
	var removed bool
	err, _ := l.g.call(ctx, func(ctx context.Context) error {
		var err error
		removed, err = l.g.proc.ForceRelease(ctx, l.cfg, holder)
		return err
	})
	if err != nil {
		return false, err
	}
	if st := l.g.lookup(l.cfg.UniqueKey()); st != nil && removed {
		// A holding of this Generator is told at once: the owner, a key handed over to a
		// waiter and not yet taken, or an acquisition becoming the owner just now (it checks
		// forced once it is the owner; of the two checks at least one sees the other).
		st.forced.Store(&holder)
		if h := st.owner.Load(); h != nil && h.entity.Locker == holder {
			st.lose(h, errForced)
		}
		if p := st.pending.Load(); p != nil && p.entity.Locker == holder && st.pending.CompareAndSwap(p, nil) {
			st.settle(&p.entity, p.cfg)
		}
		st.signal()
	}
	return removed, nil
}

var errForced = fmt.Errorf("%w: released by force (ForceRelease)", ErrLockLost)

// checkForced makes h lost if ForceRelease deleted its key as it became the owner.
func (st *lockState) checkForced(h *holding) {
	if f := st.forced.Load(); f != nil && *f == h.entity.Locker {
		st.lose(h, errForced)
	}
}

var errZeroLock = fmt.Errorf("%w: lock not made by a Generator", ErrInvalidConfig)

// check validates a call's receiver and context.
func (l *DistributedReentrantLock) check(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if l == nil || l.g == nil || l.g.proc == nil {
		return errZeroLock
	}
	if l.g.isClosed() {
		return ErrClosed
	}
	return nil
}

// call runs f, a Redis request, bounded by ctx even when the client does not honour it
// (go-redis ignores context deadlines unless ContextTimeoutEnabled is set): if ctx ends first,
// call returns at once with ctx's error and late set, and f finishes in the background.
func (g *Generator) call(ctx context.Context, f func(context.Context) error) (err error, late bool) {
	if ctx.Done() == nil {
		return f(ctx), false
	}
	done := make(chan error, 1)
	if !g.group.Go(func() { done <- f(ctx) }) {
		return f(ctx), false
	}
	select {
	case err := <-done:
		return err, false
	case <-ctx.Done():
		return ctx.Err(), true
	}
}

// startRenewal starts renewing h with cfg's lease, the last write having been sent at sent
// with lease first.
func (st *lockState) startRenewal(h *holding, cfg domain.DLockConfig, sent time.Time, first time.Duration) *threads.Expander {
	lease := cfg.Lease()
	return threads.StartExpander(st.g.clean, threads.ExpanderConfig{
		Lease:      lease,
		Interval:   lease * 3 / 4,
		Retry:      lease / 10,
		Acquired:   sent,
		FirstLease: first,
	}, func(ctx context.Context, lease time.Duration) error {
		c, err := cfg.WithLease(lease) // Extend changes the lease
		if err != nil {
			return err
		}
		err = st.g.proc.ExpandLease(ctx, &h.entity, c)
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrOptimisticLocking) {
			st.g.observer.RenewalFailed(RenewalEvent{Config: c, Err: err})
		}
		return err
	}, func(cause error) { st.lose(h, cause) }, &st.g.group)
}
