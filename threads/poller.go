// Package threads holds the two background loops of a lock: the retry poller, which watches a
// key held by another process while local goroutines wait, and the lease expander, which
// renews the key while it is held. Each loop is started and stopped idempotently by its owner,
// ends promptly, and runs in a Group its owner closes, so none outlives its lock.
package threads

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
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

// Poller is the retry poller: started (only while Waiting holds), it runs Poll after first and
// then every every (or what Poll asks for), for as long as Waiting holds. It is Java DLock's
// RetryLockThread (lease/10, then lease/6). Between polls it is a timer, not a goroutine: a wait that ends before its
// first poll, as most waits for a key passed on by a release do, starts no goroutine and wakes
// none.
//
// A Poller made with a nil ctx, target or group, and the zero Poller, never start: Start,
// StartAfter and Reset start nothing (Start and StartAfter still run their also functions and
// report false, as with a closed group). A nil *Poller does nothing at all: Start and
// StartAfter report false without running also, Locked does not run f, Due reports none.
// Nil functions given to Start, StartAfter, Reset or Locked are not run. At its own pace (Poll
// returned 0) the poller waits at least a millisecond, whatever every is.
type Poller struct {
	first, every time.Duration
	target       PollTarget
	ctx          context.Context // ends every loop (the owner is closing)
	group        *Group

	mu      sync.Mutex
	armed   bool        // a loop runs: a poll is due (timer) or running; guarded by mu
	running atomic.Bool // armed, read without mu
	timer   *time.Timer // fires the next poll (fire); made at the first, set again for each; guarded by mu
	set     bool        // the timer is set for the next poll, at due (armed and not polling); guarded by mu
	due     time.Time   // when it fires; guarded by mu
	polling bool        // a poll runs now; guarded by mu
	hurry   time.Time   // while polling: the next poll is due no later than this (zero: none); guarded by mu
}

// minPollPause is the least pause between two polls at the poller's own pace: a Poller made
// with every <= 0 whose target asks for no pace of its own polls once a millisecond, not in a
// busy loop.
const minPollPause = time.Millisecond

// NewPoller returns a stopped poller. Loops end when ctx ends; each poll runs in group. With a
// nil ctx, target (a nil pointer in a target too) or group the poller never starts.
func NewPoller(ctx context.Context, first, every time.Duration, target PollTarget, group *Group) *Poller {
	if isNil(target) {
		target = nil
	}
	return &Poller{first: first, every: every, target: target, ctx: ctx, group: group}
}

// isNil reports whether v is nil, or an interface holding a nil pointer, map, slice, channel or
// function: a value whose methods may dereference it.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func:
		return rv.IsNil()
	}
	return false
}

// Start starts the loop unless one runs, then runs each of also under the poller's lock (for
// state that must change together with the loop's life, such as a subscription). It reports
// whether it started a loop.
func (p *Poller) Start(also ...func()) bool {
	if p == nil {
		return false
	}
	return p.StartAfter(p.first, also...)
}

// StartAfter is Start with the next poll no later than first from now: a loop that runs
// already polls then if it would have polled later (a target whose pace quickened), and is
// not disturbed otherwise.
func (p *Poller) StartAfter(first time.Duration, also ...func()) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range also {
		if f != nil {
			f()
		}
	}
	return p.setLocked(time.Now().Add(first), false)
}

// Reset sets the next poll pace() from now, sooner or later than the one set, starting the
// loop if none runs: a target whose pace is known afresh (an answer). pace runs under the
// poller's lock, so that what changes the pace in the meantime (and brings a poll forward) is
// not undone by a pace read before it.
func (p *Poller) Reset(pace func() time.Duration) {
	if p == nil || pace == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setLocked(time.Now().Add(pace()), true)
}

// setLocked sets the next poll at at: only sooner than the one set unless either, starting
// the loop if none runs (a poll running then polls again by at) and the target waits: a loop
// started for nobody would keep its timer, and what the timer holds, until it fires. It
// reports whether it started a loop. The caller holds mu.
func (p *Poller) setLocked(at time.Time, either bool) bool {
	started := !p.armed
	if started && (p.ctx == nil || p.target == nil || p.group == nil || p.ctx.Err() != nil || p.group.isClosed() || !p.target.Waiting()) {
		return false
	}
	p.armed = true
	p.running.Store(true)
	switch {
	case p.polling: // (the poll running sets the next one, no later than at)
		if p.hurry.IsZero() || at.Before(p.hurry) || either {
			p.hurry = at
		}
	case started || either || at.Before(p.due):
		p.armLocked(at)
	}
	return started
}

// armLocked sets the timer of the next poll at at. The caller holds mu.
func (p *Poller) armLocked(at time.Time) {
	p.set, p.due = true, at
	if p.timer == nil {
		p.timer = time.AfterFunc(time.Until(at), p.fire)
	} else {
		p.timer.Reset(time.Until(at))
	}
}

// Stop ends the loop; a poll running finishes, and none follows unless the loop is started
// again. Its owner calls it once the loop is not needed (Waiting is false): the timer would
// find that out, but only as it fires.
func (p *Poller) Stop() {
	if p == nil || !p.running.Load() {
		return
	}
	p.mu.Lock()
	p.stopLocked()
	p.mu.Unlock()
}

// StopIdle is Stop when the target is not waiting, as the poller's lock sees it (a start
// asked for since the owner last looked is kept).
func (p *Poller) StopIdle() {
	if p == nil || !p.running.Load() {
		return
	}
	p.mu.Lock()
	if !p.target.Waiting() {
		p.stopLocked()
	}
	p.mu.Unlock()
}

func (p *Poller) stopLocked() {
	if p.timer != nil {
		p.timer.Stop()
	}
	p.set = false
	p.armed, p.hurry = false, time.Time{}
	p.running.Store(false)
}

// Due reports when the next poll runs, and whether one is set (false while none is, and while
// a poll runs).
func (p *Poller) Due() (time.Time, bool) {
	if p == nil {
		return time.Time{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.armed || p.polling {
		return time.Time{}, false
	}
	return p.due, true
}

// Locked runs f under the poller's lock; f learns whether a loop is running.
func (p *Poller) Locked(f func(running bool)) {
	if p == nil || f == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p.armed && p.ctx.Err() == nil)
}

// fire runs the poll the timer was set for, and sets the next one. A firing of an earlier
// setting, stopped or set again as it fired, does nothing: none is set, or the one set is not
// due yet (the timer is set for it).
func (p *Poller) fire() {
	if !p.group.enter() {
		return // (closed: the owner stopped waiting for its goroutines)
	}
	defer p.group.leave()
	p.mu.Lock()
	if !p.set || !p.armed {
		p.mu.Unlock()
		return // stopped, or polling already, as it fired
	}
	if d := time.Until(p.due); d > 0 {
		p.timer.Reset(d) // (set again for later as it fired: the timer is set for it already, and stays so)
		p.mu.Unlock()
		return
	}
	p.set = false
	if p.ctx.Err() != nil || !p.target.Waiting() {
		p.stopLocked()
		p.mu.Unlock()
		return
	}
	p.polling = true
	p.mu.Unlock()
	next := p.target.Poll(p.ctx)
	if next <= 0 {
		next = max(p.every, minPollPause)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.polling = false
	if !p.armed {
		return // stopped while it polled (and not started again)
	}
	at := time.Now().Add(next)
	if !p.hurry.IsZero() && p.hurry.Before(at) {
		at = p.hurry
	}
	p.hurry = time.Time{}
	p.armLocked(at)
}
