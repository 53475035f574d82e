// Package threads holds the two background loops of a lock: the retry poller, which watches a
// key held by another process while local goroutines wait, and the lease expander, which
// renews the key while it is held. Each loop is started and stopped idempotently by its owner,
// ends promptly, and runs in a Group its owner closes, so none outlives its lock.
package threads

import (
	"context"
	"sync"
	"time"
)

// PollTarget is what a Poller serves.
type PollTarget interface {
	// Waiting reports whether the poller is still needed (waiters remain and no local goroutine
	// owns the lock). It is called with the poller's lock held, so a Start and the loop's
	// decision to exit cannot interleave: a waiter that calls Start after joining the queue
	// never finds a loop that is about to exit without seeing it.
	Waiting() bool
	// Poll checks the lock once and wakes a waiter when it is free. It returns how long to
	// wait before the next poll: 0 for the poller's every (a target whose lease changes with
	// what it waits for sets its own pace).
	Poll(ctx context.Context) time.Duration
}

// Poller is the retry poller: started, it runs Poll after first and then every every (or what
// Poll asks for), for as long as Waiting holds. It is Java DLock's RetryLockThread (lease/10,
// then lease/6).
type Poller struct {
	first, every time.Duration
	target       PollTarget
	ctx          context.Context // ends every loop (the owner is closing)
	group        *Group

	mu    sync.Mutex
	stop  chan struct{}      // non-nil while a loop runs; closed to stop it; guarded by mu
	hurry chan time.Duration // the running loop's: poll no later than this from now; guarded by mu
}

// NewPoller returns a stopped poller. Loops end when ctx ends; each runs in group.
func NewPoller(ctx context.Context, first, every time.Duration, target PollTarget, group *Group) *Poller {
	return &Poller{first: first, every: every, target: target, ctx: ctx, group: group}
}

// Start starts the loop unless one runs, then runs each of also under the poller's lock (for
// state that must change together with the loop's life, such as a subscription). It reports
// whether it started a loop.
func (p *Poller) Start(also ...func()) bool { return p.StartAfter(p.first, also...) }

// StartAfter is Start with the next poll no later than first from now: a loop that runs
// already polls then if it would have polled later (a target whose pace quickened).
func (p *Poller) StartAfter(first time.Duration, also ...func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range also {
		f()
	}
	if p.stop != nil {
		// One hurry waits at a time: the earliest. (Under mu, so no other sender races.)
		select {
		case queued := <-p.hurry:
			first = min(first, queued)
		default:
		}
		p.hurry <- first
		return false
	}
	if p.ctx.Err() != nil {
		return false
	}
	stop, hurry := make(chan struct{}), make(chan time.Duration, 1)
	if !p.group.Go(func() { p.run(stop, hurry, first) }) {
		return false
	}
	p.stop, p.hurry = stop, hurry
	return true
}

// Stop asks the running loop to end; it does not wait (the owner's WaitGroup does).
func (p *Poller) Stop() {
	p.mu.Lock()
	if p.stop != nil {
		close(p.stop)
		p.stop = nil
	}
	p.mu.Unlock()
}

// Locked runs f under the poller's lock; f learns whether a loop is running.
func (p *Poller) Locked(f func(running bool)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p.stop != nil)
}

func (p *Poller) run(stop chan struct{}, hurry chan time.Duration, first time.Duration) {
	t := time.NewTimer(first)
	defer t.Stop()
	due := time.Now().Add(first)
	for {
		select {
		case <-stop:
			return
		case d := <-hurry:
			if at := time.Now().Add(d); at.Before(due) {
				due = at
				t.Reset(d)
			}
			continue
		case <-p.ctx.Done():
			p.Stop()
			return
		case <-t.C:
		}
		p.mu.Lock()
		if p.stop != stop { // stopped, and perhaps started again
			p.mu.Unlock()
			return
		}
		if !p.target.Waiting() {
			p.stop = nil
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		next := p.target.Poll(p.ctx)
		if next <= 0 {
			next = p.every
		}
		due = time.Now().Add(next)
		t.Reset(next)
	}
}
