package threads

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	dlerrors "github.com/dlockgo/dlock/errors"
)

// ExpanderConfig says when an Expander renews.
type ExpanderConfig struct {
	// Lease is how long one renewal (or the acquisition) keeps the key.
	Lease time.Duration
	// Interval is the time between renewals; Java DLock uses 75 % of the lease. The first
	// renewal comes one Interval after Acquired (Java's comes 1 ms after acquiring).
	Interval time.Duration
	// Retry is the time between attempts after a renewal failed for a reason other than an
	// optimistic-locking failure (Redis unreachable), until the lease runs out.
	Retry time.Duration
	// Acquired is when the acquiring request was sent (monotonic clock): the lease is counted
	// from there, never from when the answer came.
	Acquired time.Time
	// FirstLease is the lease the acquiring request set. When it differs from Lease (a local
	// hand-over made for another waiter) the first renewal comes at once, so the key runs on
	// Lease from then on. Zero means Lease.
	FirstLease time.Duration
}

// Expander is the lease thread: it renews a held key until stopped, and reports a loss.
// Renewals, and changes of the lease (Extend), are made one at a time by its own goroutine,
// so no renewal with an old lease can land after a change.
type Expander struct {
	cancel  context.CancelFunc
	ended   chan struct{}  // closed when the loop returns
	extends chan extendReq // Extend's requests to the loop

	mu       sync.Mutex
	stopped  bool // guarded by mu; once set, no loss is reported
	reported bool // guarded by mu; a loss is reported once
}

// extendReq asks the loop to renew at once with a new lease.
type extendReq struct {
	lease time.Duration
	reply chan error
}

// StartExpander starts renewing with renew, which renews the key for the lease it is given.
// The loop ends when Stop is called, when ctx ends, or when the lock is lost, in which case
// onLost runs (in the loop's goroutine) with a cause wrapping errors.ErrLockLost: the renewal
// found the key gone or taken (errors.ErrOptimisticLocking), or renewals kept failing until
// the lease had run out. The loop runs in group; a closed group runs nothing.
func StartExpander(ctx context.Context, cfg ExpanderConfig, renew func(ctx context.Context, lease time.Duration) error, onLost func(cause error), group *Group) *Expander {
	ctx, cancel := context.WithCancel(ctx)
	e := &Expander{cancel: cancel, ended: make(chan struct{}), extends: make(chan extendReq)}
	if !group.Go(func() {
		defer close(e.ended)
		e.run(ctx, cfg, renew, onLost)
	}) {
		close(e.ended)
	}
	return e
}

// ErrExpanderEnded is Extend's answer once the expander has stopped (or the lock was lost).
var ErrExpanderEnded = errors.New("threads: expander ended")

// Extend renews at once with a new lease and, if that succeeds, goes on renewing with it
// (the interval and retry time scale with it). It returns the renewal's error:
// errors.ErrOptimisticLocking ends the lock as lost (onLost runs first); another error leaves
// the old lease in force, except that the lease is counted as if the renewal had set the new
// one when that is shorter (the renewal may have run, its reply lost). ErrExpanderEnded
// when the loop has ended; ctx bounds only the wait for the loop to take the request.
func (e *Expander) Extend(ctx context.Context, lease time.Duration) error {
	req := extendReq{lease: lease, reply: make(chan error, 1)}
	select {
	case e.extends <- req:
	case <-e.ended:
		return ErrExpanderEnded
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-req.reply // the loop always answers a request it took
}

func (e *Expander) run(ctx context.Context, cfg ExpanderConfig, renew func(context.Context, time.Duration) error, onLost func(error)) {
	first := cfg.FirstLease
	if first <= 0 {
		first = cfg.Lease
	}
	validUntil := cfg.Acquired.Add(first)
	// The watchdog ends the lock when the lease runs out without a successful renewal, even
	// while a renewal is still waiting for Redis: a client may not honour the renewal's
	// deadline (go-redis ignores context deadlines unless ContextTimeoutEnabled is set).
	var lastErr error // guarded by e.mu
	watchdog := time.AfterFunc(time.Until(validUntil), func() {
		e.mu.Lock()
		err := lastErr
		e.mu.Unlock()
		cause := fmt.Errorf("%w: the lease ran out without a successful renewal", dlerrors.ErrLockLost)
		if err != nil {
			cause = fmt.Errorf("%w: %w", cause, err)
		}
		e.lost(onLost, cause)
		e.cancel()
	})
	defer watchdog.Stop()
	firstAt := cfg.Acquired.Add(cfg.Interval)
	if first != cfg.Lease {
		firstAt = time.Now()
	}
	t := time.NewTimer(time.Until(firstAt))
	defer t.Stop()
	for {
		lease := cfg.Lease
		var req *extendReq
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case r := <-e.extends:
			e.mu.Lock()
			ended := e.stopped || e.reported // the watchdog may have fired
			e.mu.Unlock()
			if ended {
				r.reply <- ErrExpanderEnded
				continue
			}
			req, lease = &r, r.lease
		}
		sent := time.Now()
		rctx, rcancel := context.WithDeadline(ctx, validUntil)
		err := renew(rctx, lease)
		rcancel()
		if ctx.Err() != nil {
			if req != nil {
				req.reply <- ErrExpanderEnded
			}
			return // stopped, or the watchdog fired: what the renewal found no longer matters
		}
		switch {
		case err == nil:
			if req != nil {
				cfg.Interval = scale(cfg.Interval, cfg.Lease, lease)
				cfg.Retry = scale(cfg.Retry, cfg.Lease, lease)
				cfg.Lease = lease
				req.reply <- nil
			}
			validUntil = sent.Add(cfg.Lease)
			watchdog.Reset(time.Until(validUntil))
			t.Reset(cfg.Interval) // a pending expiry is discarded (Go 1.23 timers)
			continue
		case errors.Is(err, dlerrors.ErrOptimisticLocking):
			e.lost(onLost, fmt.Errorf("%w: renewal found the key gone or taken: %w", dlerrors.ErrLockLost, err))
			if req != nil {
				req.reply <- err
			}
			return
		}
		e.mu.Lock()
		lastErr = err
		e.mu.Unlock()
		if req != nil {
			// The renewal may have run with its reply lost: a shorter lease may be in force.
			if until := sent.Add(lease); until.Before(validUntil) {
				validUntil = until
				watchdog.Reset(time.Until(validUntil))
			}
			req.reply <- err
			continue // the timer keeps its schedule
		}
		t.Reset(cfg.Retry) // until a renewal succeeds or the watchdog ends the lock
	}
}

// scale returns d × to / from.
func scale(d, from, to time.Duration) time.Duration {
	if from <= 0 {
		return d
	}
	return time.Duration(float64(d) * float64(to) / float64(from))
}

// lost reports a loss once, unless the expander was stopped.
func (e *Expander) lost(onLost func(error), cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.stopped && !e.reported {
		e.reported = true
		onLost(cause)
	}
}

// Stop ends the loop without waiting for it (the group does): a renewal in flight is
// abandoned, and no loss is reported once Stop has returned. Stop is idempotent.
func (e *Expander) Stop() {
	e.mu.Lock()
	e.stopped = true
	e.mu.Unlock()
	e.cancel()
}
