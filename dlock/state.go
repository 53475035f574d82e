package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
	"github.com/dlockgo/dlock/queue"
	"github.com/dlockgo/dlock/threads"
)

// phase is where one key stands in one process. Each transition is one method of lockState
// that checks the phase it starts from, under lockState.mu; Redis calls and parking happen
// outside the lock.
//
//	idle ──ask──▶ asking ──taken──▶ held ◀──take── free ◀──unlock (local waiters)── held
//	  ▲             │                 │                  │
//	  └──held/fail──┘                 │ unlock (no local waiter, or no passes) ──▶ releasing ──▶ idle
//	                  renewing ◀── take (renew first: lease, tokens, half the lease, hand-off limit)
//	                     ├─renewed──▶ held
//	                     └─yielded──▶ idle (in line again)
//
// A loss (renewal found the key gone or taken, the lease ran out, ForceRelease here) moves
// held, free and renewing to idle at once; Close releases what is held.
type phase uint8

const (
	// idle: this process does not hold the key and nobody asks Redis for it. Goroutines may
	// wait: then the process is in the key's line in Redis and watches for its turn.
	idle phase = iota
	// asking: one goroutine's lock.lua is in flight (at most one per process and key).
	asking
	// held: this process holds the key (a tenure) and a goroutine owns the lock.
	held
	// free: this process holds the key but no goroutine owns the lock: the next goroutine to
	// take it does so without a word to Redis (a local pass).
	free
	// renewing: this process holds the key and one goroutine renews it before taking it.
	renewing
	// releasing: the tenure is being let go (release.lua in flight).
	releasing
)

var phaseNames = [...]string{"idle", "asking", "held", "free", "renewing", "releasing"}

func (p phase) String() string { return phaseNames[p] }

// starvation is how long the first waiter may wait before newcomers stop barging (as in
// sync.Mutex).
const starvation = time.Millisecond

// blockSize is how many fencing tokens a tenure reserves when goroutines of this process wait
// (one per local pass); a new block is reserved with a renewal when it runs out.
const blockSize = 1024

// lockState is what one process knows of one key. There is at most one per key per Generator
// (Generator.states), and it lives while anyone holds or waits on the key or background work
// for it runs (refs), so a message, a late attempt or a give-back always meets the state that
// is live.
//
// The process holds the key in Redis for a tenure (one locker, renewed by one expander), and
// within it passes the lock from goroutine to goroutine without a word to Redis, as lock
// cohorting does: each pass is a new acquisition with its own owner context and fencing token
// (from a block the tenure reserved), on its own handle's lease. The tenure ends when no local
// goroutine wants the lock, or when another process waits and the tenure has lasted the
// hand-off limit: the key then goes to the first process in the Redis line.
//
// Rules kept here (the phase machine above is their mechanism):
//   - At most one goroutine talks to Redis about the key at a time (phases asking, renewing,
//     releasing), so a goroutine that finds another doing so waits in the queue without a
//     round trip. Exclusion does not rest on this: it rests on Redis, where each tenure writes
//     its own locker.
//   - A pass never starts with less than half the taker's lease left, nor on another lease
//     than the taker's, nor after the hand-off limit while another process waits, nor
//     without a token: it renews first (phase renewing).
//   - No pass after a loss: a lost tenure leaves the phase at once (loseTenure), before the
//     holder is told.
//   - Wake-ups are counted in epoch: every "the key may be free, or is reserved for us"
//     signal adds one and wakes the first waiter; a waiter that failed in Redis asks again
//     only after the epoch moved, and one that failed while a signal arrived passes the
//     wake-up on, so signals are neither lost nor turned into extra round trips.
type lockState struct {
	g       *Generator
	cfg     domain.DLockConfig // of the handle that brought the state into use: poll timing, line entries
	channel string             // the release channel
	refs    int                // holdings, tenure, waiters and background jobs; guarded by g.mu

	q      queue.Queue // the goroutines that wait, lock-free
	poller *threads.Poller

	mu       sync.Mutex // guards every field below
	phase    phase
	ten      *tenure  // held, free, renewing, releasing
	owner    *holding // held
	epoch    uint64
	wokenBy  How       // what sent the latest signal
	queued   bool      // this process may have an entry in the Redis line
	entryAt  time.Time // when this process last renewed its entry (a failed attempt, a poll)
	heard    time.Time // when this process last learnt the key's state from Redis
	place    int       // this process's place in the line as last learnt (0 first), -1 unknown
	quiet    time.Time // until then the key cannot come free but by a release, which publishes
	watching bool      // the release channel is watched for this state
	forced   string    // the locker ForceRelease in this Generator last removed
}

func newLockState(g *Generator, cfg domain.DLockConfig) *lockState {
	st := &lockState{g: g, cfg: cfg, channel: processor.ReleaseChannel(cfg), place: -1}
	st.poller = threads.NewPoller(g.done, cfg.Lease()/10, cfg.Lease()/6, st, &g.group)
	return st
}

// mayBarge reports whether a newcomer may go before the queued goroutines.
func (st *lockState) mayBarge() bool {
	if st.g.opts.fifo {
		return !st.q.HasWaiters()
	}
	f := st.q.First()
	return f == nil || time.Since(f.Since()) < starvation
}

// errBusy is TryLock's answer when a goroutine of this process holds or is taking the lock.
var errBusy = fmt.Errorf("%w: held or being taken by this process", ErrOptimisticLocking)

// errLateReply reports an acquisition whose reply came after its lease had run out.
var errLateReply = errors.New("the reply came after the lease had run out")

// step is what a goroutine that may take the lock does next, decided under mu.
type step uint8

const (
	stepWait  step = iota // park until woken
	stepTaken             // h is the new owner
	stepAsk               // ask Redis (phase asking is ours)
	stepRenew             // renew the tenure before taking it (phase renewing is ours)
)

// next decides, under mu, what a goroutine wanting the lock with cfg does: take a free
// tenure (or renew it first), ask Redis if the key may be free, or wait. tried and triedAt
// say whether, and at which epoch, this goroutine last failed in Redis.
func (st *lockState) next(ctx context.Context, cfg domain.DLockConfig, tried bool, triedAt uint64) (step, *holding, uint64) {
	switch st.phase {
	case free:
		if !st.ten.mustRenew(cfg) {
			return stepTaken, st.take(ctx, cfg), st.epoch
		}
		if !tried || st.epoch != triedAt {
			st.phase = renewing
			return stepRenew, nil, st.epoch
		}
	case idle:
		if !tried || st.epoch != triedAt {
			st.phase = asking
			return stepAsk, nil, st.epoch
		}
	}
	return stepWait, nil, st.epoch
}

// acquire takes the lock for an acquisition made with cfg (its handle's lease), waiting if
// wait is set. The caller holds a reference to st.
func (st *lockState) acquire(ctx context.Context, cfg domain.DLockConfig, wait bool) (*holding, error) {
	var (
		tried   bool   // this goroutine failed in Redis ...
		triedAt uint64 // ... at this epoch
		lastErr error  // the last Redis failure
		how     = HowAttempt
	)
	st.mu.Lock()
	if st.q.HasWaiters() {
		how = HowBarge
	}
	if !wait && !st.mayBarge() {
		// A TryLock goes before no queued goroutine that may not be passed (WithFIFO, or the
		// first has waited over the starvation guard): the lock is busy here.
		st.mu.Unlock()
		return nil, errBusy
	}
	if !wait || st.mayBarge() {
		s, h, e := st.next(ctx, cfg, false, 0)
		t := st.ten
		st.mu.Unlock()
		if s == stepTaken {
			h.how = HowHandOver
			return h, nil
		}
		h, err := st.act(ctx, s, cfg, wait, e, t, &lastErr)
		if h != nil {
			h.how = how
			if s == stepRenew {
				h.how = HowHandOver
			}
			return h, nil
		}
		if !wait {
			if err == nil {
				err = errBusy // held here, or the tenure moved on as we renewed it
			}
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, notObtained(ctx.Err(), lastErr)
		}
		tried, triedAt = s != stepWait, e
	} else {
		st.mu.Unlock()
	}

	// Wait in the queue; a Close ends the wait too.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(st.g.done, stop)()

	n := queue.NewNode()
	n.Lease = cfg.Lease()
	st.q.Enqueue(n)
	woken := false // a wake-up was taken from the permit and not yet acted on
	for wctx.Err() == nil {
		if st.q.IsFirst(n) {
			st.mu.Lock()
			s, h, e := st.next(wctx, cfg, tried, triedAt)
			how, t := st.wokenBy, st.ten
			st.mu.Unlock()
			if s == stepTaken {
				st.q.SetHead(n)
				h.how = HowHandOver
				return h, nil
			}
			if s != stepWait {
				h, _ := st.act(wctx, s, cfg, true, e, t, &lastErr)
				if h != nil {
					st.q.SetHead(n)
					h.how = how
					if s == stepRenew {
						h.how = HowHandOver
					}
					return h, nil
				}
				tried, triedAt = true, e // wait for news before asking or renewing again
				woken = false
				continue // the context may have ended meanwhile, or the phase moved on
			}
		}
		st.watch()
		if n.Park(wctx) != nil {
			break
		}
		woken = true
	}
	st.q.Cancel(n, woken)
	st.left()
	if ctx.Err() == nil {
		return nil, ErrClosed
	}
	return nil, notObtained(ctx.Err(), lastErr)
}

// act carries out a step that talks to Redis (stepAsk, or stepRenew of tenure t, whose phase
// the caller took) and returns the new owner, if it got the lock. A Redis failure is kept in
// lastErr unless it was only the caller's context ending first.
func (st *lockState) act(ctx context.Context, s step, cfg domain.DLockConfig, wait bool, epoch uint64, t *tenure, lastErr *error) (*holding, error) {
	var h *holding
	var err error
	switch s {
	case stepAsk:
		h, err = st.ask(ctx, cfg, wait, epoch)
	case stepRenew:
		h, err = st.renewToTake(ctx, cfg, t)
	default:
		return nil, nil
	}
	if redisFault(err) || (err != nil && !redisFault(*lastErr)) {
		*lastErr = err
	}
	return h, err
}

// errNoAnswer says that an attempt was still waiting for Redis when the caller gave up: not a
// Redis failure (the deadline may simply have been short), but worth saying.
var errNoAnswer = errors.New("the attempt got no answer from Redis in time")

// notObtained is a Lock's error when its context ended: ErrNotObtained and the context's
// error, with the last Redis failure when there was one (or that the last attempt got no
// answer).
func notObtained(ctxErr, last error) error {
	switch {
	case redisFault(last):
		return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotObtained, ctxErr, last)
	case errors.Is(last, errNoAnswer):
		return fmt.Errorf("%w: %w (%v)", ErrNotObtained, ctxErr, errNoAnswer)
	}
	return fmt.Errorf("%w: %w", ErrNotObtained, ctxErr)
}

// ask sends lock.lua with a new locker; the caller took phase asking at epoch. It returns the
// new owner, or nil with why not: ErrOptimisticLocking when the key is held (and, with wait,
// this process joined the line), a *RedisProcessError or the context's error when the outcome
// is unknown (the attempt is then given back in the background: no copy of it can take the
// key afterwards).
func (st *lockState) ask(ctx context.Context, cfg domain.DLockConfig, wait bool, epoch uint64) (*holding, error) {
	tokens := 1
	if wait && st.q.HasWaiters() {
		tokens = blockSize // for passes to the goroutines that queue; the unused are given back at release
	}
	ent := domain.DLockEntity{Locker: st.g.newLocker(), Status: domain.StatusProcessing, LockTime: time.Now(), Lease: cfg.Lease()}
	var res processor.Result
	err, late := st.g.call(ctx, func(ctx context.Context) error {
		r, err := st.g.proc.Lock(ctx, cfg, processor.LockRequest{Locker: ent.Locker, Wait: wait, Tokens: tokens})
		if err == nil {
			res = r // read only when the call returned in time (late is false)
		}
		return err
	})
	if err == nil && res.Outcome == processor.Taken && expired(&ent) {
		// The reply came after the lease, counted from the request, had run out: the key may
		// be someone else's by now. Not an acquisition.
		err = &RedisProcessError{Op: "lock", Key: cfg.UniqueKey(), Err: errLateReply}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.phase = idle
	switch {
	case late || err != nil || ctx.Err() != nil:
		// Unknown outcome, or the caller is gone: the attempt may hold the key. Give it back.
		if wait {
			st.queued = true // it may have joined the line
		}
		st.g.log.Debug("dlock: attempt given back", zap.String("key", cfg.UniqueKey()),
			zap.String("locker", ent.Locker), zap.NamedError("attempt", err), zap.NamedError("context", ctx.Err()))
		st.giveBackLocked(ent.Locker, cfg)
		if late {
			return nil, fmt.Errorf("%w: %w", ctx.Err(), errNoAnswer)
		}
		if ctx.Err() != nil {
			return nil, notTakenErr(ctx.Err(), err)
		}
		return nil, err
	case res.Outcome != processor.Taken: // held, or settled already (cannot be: a fresh locker)
		if wait {
			st.queued, st.entryAt = true, time.Now()
		}
		st.heard = time.Now()
		st.sighted(res.Seen, ent.LockTime)
		if st.epoch != epoch || !wait {
			// a signal came while we were asking, or a TryLock asked while goroutines queued
			// behind it that have not asked themselves: pass it on
			st.q.Wake()
		}
		return nil, fmt.Errorf("%w: lock %q held by another", ErrOptimisticLocking, cfg.UniqueKey())
	}
	ent.Token = res.Token
	st.queued, st.place = false, -1 // lock.lua took this process out of the line
	t := st.startTenure(ent, cfg, tokens)
	if st.forced == ent.Locker { // ForceRelease removed it as the reply came
		st.loseLocked(t, errForced)
		return nil, fmt.Errorf("%w: lock %q released by force as it was taken", ErrOptimisticLocking, cfg.UniqueKey())
	}
	if t.mustRenew(cfg) { // the reply came late: not with less than half the lease left
		st.phase = renewing
		st.mu.Unlock()
		h, err := st.renewToTake(ctx, cfg, t)
		st.mu.Lock()
		return h, err
	}
	return st.take(ctx, cfg), nil
}

// take makes a new owner of the free tenure, with the next token of its block. The caller
// holds mu and checked that the tenure need not be renewed first.
func (st *lockState) take(ctx context.Context, cfg domain.DLockConfig) *holding {
	t := st.ten
	h := newHolding(st, t, cfg, ctx, t.nextToken())
	st.phase, st.owner = held, h
	return h
}

// renewToTake renews the tenure before taking it (phase renewing is the caller's): with the
// taker's lease, a new block of tokens if the block ran out, and, once the tenure has lasted
// the hand-off limit, yielding to the first process in line if there is one. It returns the
// new owner, or nil when the tenure ended meanwhile (yielded, lost) or the renewal failed:
// the caller goes back to waiting, and asks Redis when told.
func (st *lockState) renewToTake(ctx context.Context, cfg domain.DLockConfig, t *tenure) (*holding, error) {
	st.mu.Lock()
	if st.ten != t || st.phase != renewing {
		st.mu.Unlock()
		return nil, nil // lost as this goroutine took the phase: the loss moved it on
	}
	req, order := processor.RenewRequest{Locker: t.entity.Locker, Last: t.last}, t.order()
	if t.next+blockSize/4 >= t.end {
		req.Tokens = blockSize
	}
	if st.g.opts.handOff > 0 && time.Since(t.since) >= st.g.opts.handOff {
		req.Yield, req.Check = true, st.g.newLocker()
		st.queued = true // a yield may put this process back in line, whatever becomes of its reply
	}
	st.mu.Unlock()

	sent := time.Now()
	var res processor.Result
	err, late := st.g.call(ctx, func(ctx context.Context) error {
		r, err := st.g.proc.ExpandLease(ctx, cfg, req)
		if err == nil {
			res = r
		}
		return err
	})
	if err != nil || late {
		if !redisFault(err) {
			err = notTakenErr(ctx.Err(), err)
		}
		st.g.observer.RenewalFailed(RenewalEvent{Config: cfg, Err: err})
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ten != t || st.phase != renewing {
		return nil, err // lost meanwhile: the loss moved the phase on
	}
	switch {
	case (late || err != nil || res.Outcome == processor.Settled) && req.Yield:
		// (Settled: this very check ran before and its reply was lost: it renewed or yielded.)
		// Perhaps yielded: the key may be reserved for another process now. End the tenure
		// and give the key back if it is still ours.
		st.queued = true
		st.endTenureLocked(t)
		st.giveBackLocked(t.entity.Locker, t.cfg)
		return nil, err
	case late || err != nil:
		// Try again shortly (the waiters are told then), or when the expander renews.
		st.phase = free
		time.AfterFunc(min(t.cfg.Lease()/10, 50*time.Millisecond), func() { st.signal(HowRetry) })
		return nil, err
	}
	switch res.Outcome {
	case processor.Renewed:
		t.renewed(sent, cfg, order, true, res.Token, req.Tokens)
		if req.Yield {
			t.since = time.Now() // nobody else waits: the hand-off limit starts again
			st.queued = false    // and this process left the line
		}
		if t.mustRenew(cfg) { // the reply came late: renew again
			st.phase = free
			st.signalLocked(HowRetry)
			return nil, nil
		}
		return st.take(ctx, cfg), nil
	case processor.Yielded:
		st.g.log.Debug("dlock: yielded to the next process in line", zap.String("key", cfg.UniqueKey()))
		st.queued, st.entryAt, st.heard = true, time.Now(), time.Now()
		st.endTenureLocked(t)
		st.q.Wake() // the waiters watch for this process's turn (a TryLock does not)
		return nil, nil
	}
	st.loseLocked(t, fmt.Errorf("%w: renewal found the key gone or taken", ErrLockLost))
	return nil, nil
}

// left runs after a waiter left the queue without the lock, and after a final Unlock: once
// no goroutine waits, a free tenure is let go, and a process that waited in Redis stops
// watching and leaves the line.
func (st *lockState) left() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.settleLocked()
}

// settleLocked lets go what nobody waits for any more: a free tenure, the process's entry in
// the line, the watch. The caller holds mu.
func (st *lockState) settleLocked() {
	if st.q.HasWaiters() {
		return
	}
	switch st.phase {
	case free:
		st.releaseInBackground()
	case idle:
		if st.queued {
			st.queued = false
			// Every attempt of this process on the key was numbered by now (none is under
			// way in phase idle); later ones are not the leave's to settle.
			last := st.g.lastLocker()
			st.background(func() { st.leave(last) })
		}
		if st.watching {
			st.watching = false
			if st.g.notes != nil {
				st.g.notes.unwatch(st.channel)
			}
		}
	}
}

// leave takes this process out of the Redis line (leave.lua), passing on a key reserved for
// it, and settles its attempts up to last. A Redis failure is retried every lease/10 while nobody waits, for as long as the entry
// would live (EntryTTL), and not once Close has begun (the entry expires by then); should
// goroutines wait again meanwhile, the process counts itself in line and leaves when they are
// gone.
func (st *lockState) leave(last string) {
	lease := st.cfg.Lease()
	until := time.Now().Add(processor.EntryTTL(st.cfg))
	req := processor.LeaveRequest{Last: last}
	for {
		rctx, cancel := context.WithTimeout(st.g.clean, lease)
		err, _ := st.g.call(rctx, func(ctx context.Context) error { return st.g.proc.Leave(ctx, st.cfg, req) })
		cancel()
		if err == nil {
			return
		}
		st.g.log.Debug("dlock: leaving the line failed", zap.String("key", st.cfg.UniqueKey()), zap.Error(err))
		select {
		case <-st.g.done.Done():
			return
		case <-time.After(lease / 10):
		}
		st.mu.Lock()
		waiters := st.q.HasWaiters()
		if waiters {
			st.queued = true // they wait in line; the process leaves once they are gone
		}
		st.mu.Unlock()
		if waiters || !time.Now().Before(until) {
			return // (by then the entry has expired)
		}
	}
}

// signal says the key may be free (or is reserved for this process): the first waiter will
// ask. how says what sent it.
func (st *lockState) signal(how How) {
	st.mu.Lock()
	st.signalLocked(how)
	st.mu.Unlock()
}

func (st *lockState) signalLocked(how How) {
	st.wokenBy = how
	st.epoch++
	st.q.Wake()
}

// watch makes sure a process that waits in Redis hears of its turn: the retry poller runs
// and, with notifications on, the release channel is watched. A process that holds the key
// needs neither: its goroutines wait for passes.
func (st *lockState) watch() {
	st.mu.Lock()
	if st.ten != nil {
		st.mu.Unlock()
		return
	}
	if !st.watching && st.g.notes != nil {
		st.watching = true
		st.g.notes.watch(st.channel, st.cfg.UniqueKey())
	}
	st.mu.Unlock()
	st.poller.Start()
}

// background runs f in the generator's group (inline once the group is closed), keeping the
// state alive until f returns. It may be called with mu held.
func (st *lockState) background(f func()) {
	st.g.hold(st)
	if !st.g.group.Go(func() {
		defer st.g.unref(st)
		f()
	}) {
		go func() { // the group is closed: Close is done waiting; run f anyway, unbounded by it
			defer st.g.unref(st)
			f()
		}()
	}
}

// Waiting implements threads.PollTarget: the poller runs while goroutines wait and this
// process does not hold the key.
func (st *lockState) Waiting() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ten == nil && st.q.HasWaiters()
}

// Poll implements threads.PollTarget. It checks the key (poll.lua), which also renews this
// process's entry in the line, unless the check can wait: with notifications on and the
// process in line, and its entry renewed within a third of its life, a check is skipped when
// this process is not first in line (it is told when its turn comes), when it heard of the key
// within the last poll interval, or when the key cannot have come free but by a release (which
// publishes) since it last saw it: held by a tenure of this library, or reserved, within the
// life it had then. Holders that never publish (Java DLock) are checked every poll interval.
// It signals when the key is free or reserved for this process, and when this process is no
// longer in line (so that its next attempt puts it back).
func (st *lockState) Poll(ctx context.Context) {
	every := st.cfg.Lease() / 6
	st.mu.Lock()
	now := time.Now()
	fresh := now.Sub(st.entryAt) < processor.EntryTTL(st.cfg)/3
	skip := st.g.notes != nil && st.queued && fresh &&
		(st.place > 0 || now.Sub(st.heard) < every || now.Before(st.quiet))
	st.mu.Unlock()
	if skip {
		return
	}
	sent := time.Now()
	res, err := st.g.proc.IsFree(ctx, st.cfg)
	if err != nil {
		st.g.log.Debug("dlock: poll failed", zap.Error(err))
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.heard = time.Now()
	switch res.State {
	case processor.PollQueued:
		st.queued, st.entryAt = true, time.Now()
		st.sighted(res.Seen, sent)
	case processor.PollNotQueued:
		// The next attempt joins the line again. (queued stays: an attempt sent after this
		// poll may have joined it, and this process must leave then.)
		st.place = -1
		st.signalLocked(HowPolled)
	default:
		st.signalLocked(HowPolled)
	}
}

// sighted records what a request sent at sent found under the held key: this process's place
// in line, and how long the key cannot come free but by a release that publishes (none for a
// holder that does not look like one of this library's: it may let go silently). The caller
// holds mu.
func (st *lockState) sighted(seen processor.Sighting, sent time.Time) {
	st.place = seen.Place
	st.quiet = time.Time{}
	if strings.HasPrefix(seen.Holder, processor.ReservedPrefix) || isLocker(seen.Holder) {
		st.quiet = sent.Add(seen.Life)
	}
}

// isLocker reports whether v has the shape of a locker of this library,
// <host>-<pid>-<12 hex digits>-<number>, whose holder publishes when it lets the key go.
func isLocker(v string) bool {
	parts := strings.Split(v, "-")
	n := len(parts)
	if n < 4 || len(parts[n-2]) != 12 {
		return false
	}
	digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
	return digits(parts[n-1]) && digits(parts[n-3]) && strings.Trim(parts[n-2], "0123456789abcdef") == ""
}

// heardRelease handles a release message of another process (notifier): the key went to
// next ("" when it was left free).
func (st *lockState) heardRelease(next string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.heard = time.Now()
	if next == st.g.prefix || next == "" {
		// (queued stays set: should the waiters leave before one takes the key, leave.lua
		// passes the reservation on)
		st.signalLocked(HowNotified)
		return
	}
	// The key went to the first in line, another process: this one moves up, and the key
	// cannot come free before that process takes it or its reservation ends.
	if st.place > 0 {
		st.place--
	}
	st.quiet = st.heard.Add(processor.ReserveTTL(st.cfg))
}

// heardTaken handles a message that another process took the key reserved for it, for life
// at least: the key cannot come free before then but by a release, which publishes.
func (st *lockState) heardTaken(life time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.heard = time.Now()
	st.quiet = st.heard.Add(life)
}

// heardOwn handles a release message naming a locker of this process (notifier). Its own
// releases it ignores (the phase has moved on by then); but a message about the tenure this
// process still holds and passes on means somebody else let the key go: an operator's
// ForceRelease. The tenure ends at once, as on any loss.
func (st *lockState) heardOwn(from string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.ten; t != nil && t.entity.Locker == from && (st.phase == held || st.phase == free) {
		st.loseLocked(t, errForced)
	}
}

// redisFault reports whether err says that Redis failed — not merely that the caller's
// context ended before the answer came, which is the caller's deadline, not a fault.
func redisFault(err error) bool {
	var pe *RedisProcessError
	return errors.As(err, &pe) && !errors.Is(pe.Err, context.DeadlineExceeded) && !errors.Is(pe.Err, context.Canceled)
}

// expired reports whether e's lease, counted from its request less the drift allowance, has
// run out.
func expired(e *domain.DLockEntity) bool {
	return !time.Now().Before(domain.HeldUntil(e.LockTime, e.Lease))
}

// notTakenErr is an attempt's error when the caller's context ended: the context's error, with
// the attempt's own error if it says more.
func notTakenErr(ctxErr, err error) error {
	if ctxErr == nil {
		return err
	}
	if err == nil || errors.Is(err, ctxErr) {
		if err != nil {
			return err
		}
		return ctxErr
	}
	return fmt.Errorf("%w (attempt: %w)", ctxErr, err)
}
