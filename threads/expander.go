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
type Expander struct {
	cancel context.CancelFunc

	mu       sync.Mutex
	stopped  bool // guarded by mu; once set, no loss is reported
	reported bool // guarded by mu; a loss is reported once
}

// StartExpander starts renewing with renew. The loop ends when Stop is called, when ctx ends,
// or when the lock is lost, in which case onLost runs (in the loop's goroutine) with a cause
// wrapping errors.ErrLockLost: the renewal found the key gone or taken
// (errors.ErrOptimisticLocking), or renewals kept failing until the lease had run out. The
// loop runs in group; a closed group runs nothing.
func StartExpander(ctx context.Context, cfg ExpanderConfig, renew func(context.Context) error, onLost func(cause error), group *Group) *Expander {
	ctx, cancel := context.WithCancel(ctx)
	e := &Expander{cancel: cancel}
	group.Go(func() { e.run(ctx, cfg, renew, onLost) })
	return e
}

func (e *Expander) run(ctx context.Context, cfg ExpanderConfig, renew func(context.Context) error, onLost func(error)) {
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
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		rctx, rcancel := context.WithDeadline(ctx, validUntil)
		err := renew(rctx)
		rcancel()
		if ctx.Err() != nil {
			return // stopped, or the watchdog fired: what the renewal found no longer matters
		}
		switch {
		case err == nil:
			validUntil = sent.Add(cfg.Lease)
			watchdog.Reset(time.Until(validUntil))
			t.Reset(cfg.Interval)
			continue
		case errors.Is(err, dlerrors.ErrOptimisticLocking):
			e.lost(onLost, fmt.Errorf("%w: renewal found the key gone or taken: %w", dlerrors.ErrLockLost, err))
			return
		}
		e.mu.Lock()
		lastErr = err
		e.mu.Unlock()
		t.Reset(cfg.Retry) // until a renewal succeeds or the watchdog ends the lock
	}
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
