package threads

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	dlerrors "github.com/dlockgo/dlock/errors"
)

// Schedule is when a lease is due for renewal and when it runs out, on the monotonic clock.
type Schedule struct {
	// Until is how long the lease is known to last: the send time of the last successful
	// renewal (or of the acquisition) plus the lease it set.
	Until time.Time
	// RenewAt is when to renew: Java DLock renews at 75 % of the lease.
	RenewAt time.Time
	// Retry is the time between attempts after a renewal failed for a reason other than an
	// optimistic-locking failure (Redis unreachable), until the lease runs out; at least
	// minPollPause (a millisecond), whatever it says.
	Retry time.Duration
}

// Lease is what an Expander keeps alive. It owns its validity: a successful Renew moves its
// Schedule, and so may renewals made by others (a renewal before a hand-over, an Extend),
// after which the owner calls Poke.
type Lease interface {
	// Schedule returns the lease's current schedule.
	Schedule() Schedule
	// Renew sends one renewal, bounded by ctx (whose deadline is the schedule's Until), and
	// records its success itself. errors.ErrOptimisticLocking means the key is gone or taken.
	Renew(ctx context.Context) error
	// Lost is told, once, that the lease ended: the cause wraps errors.ErrLockLost.
	Lost(cause error)
}

// Expander is the lease thread: it renews a lease at its RenewAt until stopped, and reports a
// loss when a renewal finds the key gone or taken, or when the lease runs out without a
// successful renewal (every attempt failing until Until, or a renewal still waiting for Redis
// then: its context ends at Until).
//
// A nil *Expander, and the zero Expander, are stopped ones: Poke and Stop do nothing.
type Expander struct {
	poke chan struct{} // made as the loop begins (under mu, before it runs)

	mu       sync.Mutex
	stopped  bool            // guarded by mu; once set, no loss is reported
	reported bool            // guarded by mu; a loss is reported once
	pending  bool            // guarded by mu; the loop is to begin, and has not begun nor been stopped
	ctx      context.Context // guarded by mu; while pending: what the loop begins with ...
	l        Lease           // ...
	group    *Group          // ... and where it runs
	timer    *time.Timer     // guarded by mu; begins the loop at the first renewal's time
	cancel   func()          // guarded by mu; ends the loop, once it began
}

// StartExpander starts keeping l alive. The loop ends when Stop is called, when ctx ends, or
// when the lease is lost (l.Lost runs in the loop's goroutine). It runs in group; a closed
// group runs nothing. With a nil ctx, l (a nil pointer in l too) or group nothing runs: the
// Expander returned is stopped.
func StartExpander(ctx context.Context, l Lease, group *Group) *Expander {
	return StartExpanderAt(ctx, l, group, time.Time{})
}

// StartExpanderAt is StartExpander whose loop begins at the time first (a timer until then),
// or at a Poke before it: a lease let go before its first renewal is due, as most are, costs
// no goroutine. first must be no later than the schedule's first RenewAt (it is read at the
// start: until then nothing watches the lease).
func StartExpanderAt(ctx context.Context, l Lease, group *Group, first time.Time) *Expander {
	e := &Expander{}
	if ctx == nil || isNil(l) || group == nil {
		e.stopped = true
		return e
	}
	e.pending, e.ctx, e.l, e.group = true, ctx, l, group
	e.mu.Lock()
	defer e.mu.Unlock()
	if d := time.Until(first); d > 0 {
		e.timer = time.AfterFunc(d, e.start)
	} else {
		e.startLocked()
	}
	return e
}

// start begins the loop unless it began or was stopped.
func (e *Expander) start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.startLocked()
}

func (e *Expander) startLocked() {
	if !e.pending {
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	l, group := e.l, e.group
	e.pending, e.ctx, e.l, e.group = false, nil, nil, nil
	e.cancel = cancel
	e.poke = make(chan struct{}, 1)
	if !group.Go(func() { e.run(ctx, l) }) {
		cancel()
	}
}

// Poke tells the loop that the lease's schedule changed (renewed by someone else, or due
// sooner): it reads it again, beginning now if it had not yet. On a nil Expander it does
// nothing.
func (e *Expander) Poke() {
	if e == nil {
		return
	}
	e.mu.Lock()
	waiting := e.pending
	if waiting && e.timer != nil {
		e.timer.Stop()
	}
	e.startLocked()
	e.mu.Unlock()
	if !waiting {
		select {
		case e.poke <- struct{}{}:
		default:
		}
	}
}

func (e *Expander) run(ctx context.Context, l Lease) {
	var (
		lastErr     error     // the last failed renewal's error
		failedUntil time.Time // the schedule's Until when a renewal last failed
		retryAt     time.Time // when to try again after that failure
	)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s := l.Schedule()
		now := time.Now()
		if !now.Before(s.Until) {
			cause := fmt.Errorf("%w: the lease ran out without a successful renewal", dlerrors.ErrLockLost)
			if lastErr != nil {
				cause = fmt.Errorf("%w: %w", cause, lastErr)
			}
			e.lost(l, cause)
			return
		}
		at := s.RenewAt
		if s.Until.Equal(failedUntil) && retryAt.After(at) {
			at = retryAt // nobody renewed since the failure: wait before trying again
		}
		if d := at.Sub(now); d > 0 {
			t.Reset(min(d, s.Until.Sub(now)))
			select {
			case <-ctx.Done():
				return
			case <-e.poke:
			case <-t.C:
			}
			continue
		}
		rctx, cancel := context.WithDeadline(ctx, s.Until)
		err := l.Renew(rctx)
		cancel()
		if ctx.Err() != nil {
			return // stopped: what the renewal found no longer matters
		}
		switch {
		case err == nil:
			lastErr, failedUntil = nil, time.Time{}
		case errors.Is(err, dlerrors.ErrOptimisticLocking):
			e.lost(l, fmt.Errorf("%w: renewal found the key gone or taken: %w", dlerrors.ErrLockLost, err))
			return
		default:
			lastErr, failedUntil, retryAt = err, s.Until, time.Now().Add(max(s.Retry, minPollPause))
		}
	}
}

// lost reports a loss once, unless the expander was stopped.
func (e *Expander) lost(l Lease, cause error) {
	e.mu.Lock()
	report := !e.stopped && !e.reported
	e.reported = true
	e.mu.Unlock()
	if report {
		l.Lost(cause)
	}
}

// Stop ends the loop without waiting for it (the group does): a renewal in flight is
// abandoned, and no loss is reported that had not begun to be as Stop was called (Lost is not
// called under the expander's lock, so that its owner may call Stop under its own: the owner
// ignores a loss of a lease it has ended). Stop is idempotent; on a nil Expander it does
// nothing.
func (e *Expander) Stop() {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped, e.pending, e.ctx, e.l, e.group = true, false, nil, nil, nil
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.cancel != nil {
		e.cancel()
	}
}
