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
}

// Expander is the lease thread: it renews a held key until stopped, and reports a loss.
type Expander struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool // guarded by mu; once set, no loss is reported
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
	validUntil := cfg.Acquired.Add(cfg.Lease)
	t := time.NewTimer(time.Until(cfg.Acquired.Add(cfg.Interval)))
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
			return // stopped: what the renewal found no longer matters
		}
		switch {
		case err == nil:
			validUntil = sent.Add(cfg.Lease)
			t.Reset(cfg.Interval)
			continue
		case errors.Is(err, dlerrors.ErrOptimisticLocking):
			e.lost(onLost, fmt.Errorf("%w: renewal found the key gone or taken: %w", dlerrors.ErrLockLost, err))
			return
		}
		left := time.Until(validUntil)
		if left <= 0 {
			e.lost(onLost, fmt.Errorf("%w: renewals failed until the lease ran out: %w", dlerrors.ErrLockLost, err))
			return
		}
		t.Reset(min(cfg.Retry, left))
	}
}

// lost reports a loss unless the expander was stopped.
func (e *Expander) lost(onLost func(error), cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.stopped {
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
