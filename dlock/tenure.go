package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
	"github.com/dlockgo/dlock/threads"
)

// tenure is this process's hold of the key in Redis: one locker, written by the lock.lua of
// the acquisition that started it, renewed by one expander, under which the lock passes from
// goroutine to goroutine (lockState). Its fields are guarded by the state's mu.
type tenure struct {
	st     *lockState
	entity domain.DLockEntity // the locker, and when the acquiring request was sent

	until time.Time          // it counts the key held until then: the latest domain.HeldUntil of a successful write
	cfg   domain.DLockConfig // with the lease renewals use: the newest setting (a taker's, or what Extend set)
	setAt uint64             // the order of the request that made that setting
	sent  uint64             // renewals sent, in order: a reply never overwrites a newer setting
	next  uint64             // the next fencing token to hand out ...
	end   uint64             // ... of the block [next, end) reserved in Redis
	last  uint64             // the last token handed out (the block's first less one: none yet)
	since time.Time          // when the tenure began or last found no other process waiting, less its first renewal's wait
	exp   *threads.Expander
	over  bool // released, yielded or lost: renewals' results are ignored

	origin   uint64 // the first token of the holding in Redis it began with (0 if unknown): its renewals name it
	granted  bool   // granted by a release, and no goroutine took it yet
	checkNow bool   // renew at once: a ForceRelease of its locker may have removed it unheard
	failed   error  // the last renewal's failure, if none succeeded since: a release the lease ends names it
	// kept is the holding whose final Unlock kept the tenure (WithHoldOver), at keptAt, while
	// no goroutine took it since: that Unlock asked Redis nothing, so a loss of the tenure
	// found meanwhile (by its release, or a renewal: loseLocked) is that holding's (keptLost),
	// unless a renewal sent after keptAt found the key still the tenure's (renewed).
	kept   *holding
	keptAt time.Time
}

// keptLost returns what tells the Observer of the loss of t.kept, after its ReleaseEvent, or
// nil when no Unlock kept t. The caller holds mu.
func (t *tenure) keptLost() func(cause error) {
	h := t.kept
	if h == nil {
		return nil
	}
	return func(cause error) {
		<-h.released // (closed by h.release once the ReleaseEvent was reported)
		t.st.g.observer.Lost(h.loss(cause))
	}
}

// startTenure begins a tenure for ent (taken with cfg's lease, tokens reserved from
// ent.Token) and starts renewing it. The caller holds mu, in phase asking.
func (st *lockState) startTenure(ent domain.DLockEntity, cfg domain.DLockConfig, tokens int) *tenure {
	t := &tenure{st: st, entity: ent, cfg: cfg, until: domain.HeldUntil(ent.LockTime, ent.Lease),
		next: ent.Token, end: ent.Token + uint64(tokens), last: ent.Token - 1, since: time.Now()}
	st.ten, st.phase = t, free
	// the attempt took the key: a failure before it is over (a goroutine that gives up names none)
	st.fault = nil
	st.g.hold(st)                                                                            // the tenure keeps the state alive until it ends
	t.exp = threads.StartExpanderAt(st.g.clean, t, &st.g.group, t.until.Add(-cfg.Lease()/4)) // (Schedule's RenewAt)
	if st.forces.hold(ent.Locker) {
		// taken (or granted) as a ForceRelease here of its locker is on its way, or answered
		// without saying it removed it: its answer says nothing of the force, so it asks Redis
		// at once
		t.checkNow = true
		t.exp.Poke()
	}
	return t
}

// nextToken hands out the next token of the block. The caller holds mu.
func (t *tenure) nextToken() uint64 {
	t.last = t.next
	t.next++
	return t.last
}

// taken reports whether a goroutine took t (it handed out a token). The caller holds mu.
func (t *tenure) taken() bool { return t.last+1 != t.entity.Token }

// mustRenew reports whether the tenure must be renewed before it is passed to an acquisition
// made with cfg: another lease, less than half of it left, no token left, or the hand-off
// limit reached (a renewal that yields if another process waits). The caller holds mu.
func (t *tenure) mustRenew(cfg domain.DLockConfig) bool {
	ho := t.st.g.opts.handOff
	return cfg.Lease() != t.cfg.Lease() ||
		time.Until(t.until) < cfg.Lease()/2 ||
		t.next >= t.end ||
		(ho > 0 && time.Since(t.since) >= ho)
}

// order numbers a renewal about to be sent. The caller holds mu.
func (t *tenure) order() uint64 {
	t.sent++
	return t.sent
}

// renewed records a successful renewal sent at sent with cfg's lease, as the order'th renewal
// of the tenure, which reserved n tokens from first (n = 0: none). A renewal that sets the
// lease the tenure renews with (a taker's, Extend) does so unless a renewal sent after it set
// it first: the reply of an older request never overwrites a newer setting. The caller holds mu.
func (t *tenure) renewed(sent time.Time, cfg domain.DLockConfig, order uint64, setting bool, first uint64, n int) {
	if t.kept != nil && sent.After(t.keptAt) {
		t.kept = nil // (the key was the tenure's after the Unlock that kept it: no loss of that holding)
	}
	t.failed = nil
	if u := domain.HeldUntil(sent, cfg.Lease()); u.After(t.until) {
		t.until = u
	}
	if setting && order > t.setAt {
		t.cfg, t.setAt = cfg, order
	}
	if n > 0 && first >= t.end {
		t.next, t.end = first, first+uint64(n)
	}
	if t.exp != nil {
		t.exp.Poke()
	}
}

// Schedule implements threads.Lease: renew at 75 % of the lease after the last write's send.
func (t *tenure) Schedule() threads.Schedule {
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
	lease := t.cfg.Lease()
	renewAt := t.until.Add(-lease / 4)
	if t.checkNow {
		renewAt = time.Now()
	}
	return threads.Schedule{Until: t.until, RenewAt: renewAt, Retry: lease / 10}
}

// Renew implements threads.Lease: the expander's renewal, with the tenure's lease, and a new
// block of tokens when goroutines wait and the block runs low.
func (t *tenure) Renew(ctx context.Context) error {
	st := t.st
	st.mu.Lock()
	if t.over {
		st.mu.Unlock()
		return nil
	}
	cfg, order, check := t.cfg, t.order(), t.checkNow
	owed := st.forces[t.entity.Locker].owedNow() // (forces answered before it: lockState.forces)
	t.checkNow = false
	req := processor.RenewRequest{Locker: t.entity.Locker, Origin: t.origin, Unreleased: st.unreleasedLocked(t.entity.Locker)}
	if st.q.HasWaiters() && t.next+blockSize/4 >= t.end {
		req.Tokens = blockSize
	}
	st.mu.Unlock()
	sent := time.Now()
	res, err := call(st.g, ctx, func(ctx context.Context) (processor.Result, error) {
		return st.g.proc.ExpandLease(ctx, cfg, req)
	})
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) {
			// (a renewal that got no answer before the lease ran out failed too: without this,
			// a Redis that stops answering made losses with no RenewalFailed before them)
			st.g.observer.RenewalFailed(RenewalEvent{Config: cfg, Err: err})
		}
		st.mu.Lock()
		if !errors.Is(ctx.Err(), context.Canceled) && !t.over {
			t.failed = err // (not one cut short by the tenure's end: an Unlock stops the expander)
		}
		if check {
			t.checkNow = true // the check is still owed: again after the expander's retry pause, not at 75 %
		}
		st.mu.Unlock()
		return st.g.renewalFault(err, sent) // (a loss names it: the lease ran out without a successful renewal: ...)
	}
	if res.Outcome == processor.Settled && t.yielding() {
		// A yield check of the tenure ran first and may have handed the key on, on purpose: its
		// own answer ends the tenure, not as a loss. Tried again after a pause meanwhile.
		return errYielding
	}
	if res.Outcome != processor.Renewed {
		return fmt.Errorf("%w: renew %q: %s", ErrOptimisticLocking, cfg.UniqueKey(), res.Outcome)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !t.over {
		t.renewed(sent, cfg, order, false, res.Token, req.Tokens) // (keeps the lease as set since)
		st.forces.checked(t.entity.Locker, owed)
		if st.phase == free && st.q.HasWaiters() {
			st.signalLocked(HowRetry) // a taker that failed to renew may take it now
		}
	}
	return nil
}

// errYielding says that a renewal found the tenure's locker settled while a yield check of the
// tenure was on its way: the check's answer decides whether it was handed on.
var errYielding = errors.New("dlock: renewal found the tenure settled as its yield check was on its way")

// yielding reports whether a taker renews the tenure t now (phase renewing), which may be a
// yield check: the only request of a live tenure that settles its locker.
func (t *tenure) yielding() bool {
	st := t.st
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ten == t && !t.over && st.phase == renewing
}

// Lost implements threads.Lease.
func (t *tenure) Lost(cause error) {
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
	t.st.loseLocked(t, cause)
}

// endTenureLocked ends t without a word to Redis (the key went elsewhere, or the caller gives
// it back): no more passes, no renewals, and the tenure's reference to the state is dropped.
// The caller holds mu; t is the current tenure.
func (st *lockState) endTenureLocked(t *tenure) {
	t.over = true
	t.exp.Stop()
	st.dropTenureLocked(t)
}

// dropTenureLocked forgets the ended tenure t: the phase goes back to idle, and if nobody
// waits the process leaves the line and stops watching. The caller holds mu.
func (st *lockState) dropTenureLocked(t *tenure) {
	if st.ten != t {
		return
	}
	st.ten, st.owner, st.phase = nil, nil, idle
	st.settleLocked()
	st.g.unref(st)
}

// loseLocked ends t as lost, unless it ended otherwise first: no pass happens after this;
// the owner (if any) is told, with cause; the key is given back in case a renewal whose reply
// was lost kept it; the waiters ask Redis again. The caller holds mu.
func (st *lockState) loseLocked(t *tenure, cause error) {
	if t.over || st.ten != t {
		return
	}
	if st.phase == releasing {
		return // being let go already: the release finds out
	}
	st.g.hold(st) // (the state stays the Generator's until the give-back below holds it: Close waits for that)
	defer st.g.unref(st)
	h := st.owner
	st.endTenureLocked(t)
	if h != nil {
		h.lose(cause)
	} else if tell := t.keptLost(); tell != nil {
		st.background(func() { tell(cause) })
	}
	if t.taken() { // (also when no goroutine holds it now: passed on within the process, it was held as Redis lost it)
		st.g.log.Warn("dlock: lock lost", zap.String("key", t.cfg.UniqueKey()),
			zap.String("locker", t.entity.Locker), zap.Error(cause))
	} else { // (a tenure no goroutine held yet, e.g. a far process's renewing before its take: no holding was lost)
		st.g.log.Debug("dlock: tenure ran out before a goroutine held it", zap.String("key", t.cfg.UniqueKey()),
			zap.String("locker", t.entity.Locker), zap.Error(cause))
	}
	st.giveBackLocked(t.entity.Locker, t.cfg)
	st.signalLocked(HowRetry)
}

// lapse ends the tenure h holds under as lost if its lease ran out by this process's clock
// and its lease thread, running late, has not said so yet: as that thread would, now.
//
// No goroutine is handed, keeps, or is told it has a tenure whose lease ran out by this
// process's clock: a pass needs half the taker's lease left (mustRenew), and every call of an
// owner (Unlock, a re-entry, Extend, HoldCount, FencingToken) finds its holding through
// holdingOf, which checks here before anything else. It then reports the loss, as every later
// call does — not a release sent too late to count, nor one more hold — and nothing is passed
// on.
func (st *lockState) lapse(h *holding) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := h.ten; st.ten == t && st.owner == h && !time.Now().Before(t.until) {
		st.loseLocked(t, errHoldingLapsed)
	}
}

// unlock lets the lock go after h's final Unlock (h has ended and its owner context has been
// told): to the next goroutine of this process that waits, with no word to Redis, if the
// tenure may go on; else the key is let go in Redis (release.lua: to the first process in
// line, or free), bounded by ctx and the lease. It returns an error matching ErrLockLost when
// the tenure was lost before h let go, a *RedisProcessError when the release's outcome is
// unknown (it is retried in the background until the lease runs out; a loss the retry finds
// is told then: retryReleaseLocked).
func (st *lockState) unlock(ctx context.Context, h *holding) error {
	st.mu.Lock()
	if st.owner != h || st.ten != h.ten {
		st.mu.Unlock()
		if st.g.isClosed() {
			return ErrClosed
		}
		return fmt.Errorf("%w: found at release", ErrLockLost)
	}
	st.owner = nil
	if st.g.opts.handOff > 0 && st.q.HasWaiters() {
		st.phase = free
		st.signalLocked(HowHandOver) // a waiter that failed in Redis before may take it now
		st.mu.Unlock()
		return nil
	}
	// (Only a process that watches its channel of the key hears its grant at once.)
	relock := (st.relock || st.g.relockTest.Load() > 0) && st.line.watching && st.g.opts.handOff > 0
	if relock && st.g.opts.holdOver && time.Since(h.ten.since) < st.g.opts.handOff && !time.Now().Before(st.holdOverBy) && !st.g.isClosed() {
		// Hold-over: the tenure is kept, free, for the goroutine expected back (it takes it
		// as a pass: next), for as long as a linger, whose end lets it go (settleLocked). A
		// goroutine that barges already takes it, or lets it go as it settles.
		st.phase = free
		h.ten.kept, h.ten.keptAt, h.released = h, time.Now(), make(chan struct{})
		st.lingerLocked(h.cfg.Lease())
		st.mu.Unlock()
		return nil
	}
	var stay *domain.DLockConfig
	if relock {
		stay = &h.cfg // (its handle's lease, not one an Extend set for the tenure: the goroutine that comes back takes it anew)
	}
	release := st.releaseLocked(stay)
	released := make(chan struct{})
	h.released = released              // (closed by h.release once the ReleaseEvent was reported)
	release.lost = func(cause error) { // (h has ended: no call of its owner reads it any more)
		<-released // after the ReleaseEvent, which the Unlock reports once this release returns
		st.g.observer.Lost(h.loss(cause))
	}
	st.mu.Unlock()
	return release.run(ctx)
}

// releaseLocked begins letting the tenure go (phase releasing: no renewal, no pass) and
// returns the Redis part, to run once mu is unlocked. With stay (relock), a release that
// grants the key to another process also puts this one back in line with a new attempt of
// stay's lease. The caller holds mu, in phase held (its owner gone) or free.
func (st *lockState) releaseLocked(stay *domain.DLockConfig) releaseJob {
	t := st.ten
	st.phase, st.owner = releasing, nil
	t.over = true
	t.exp.Stop()
	req := processor.ReleaseRequest{Locker: t.entity.Locker, Last: t.last, Origin: t.origin, Unreleased: st.unreleasedLocked(t.entity.Locker)}
	var next *attempt
	claim := st.line.hearing
	if stay != nil {
		// The grant brings a block of tokens when the tenure passed the lock among goroutines
		// (several are expected back: no renewal for tokens at the first pass), else one (no
		// tokens to give back at the next release).
		tokens := 1
		if t.last > t.entity.Token {
			tokens = blockSize
		}
		next = &attempt{locker: st.g.newLocker(), cfg: *stay, tokens: tokens, sent: true, firstSent: time.Now()} // (release.lua may put it in line)
		req.Next, req.NextLease, req.NextTokens, req.Listening = next.locker, stay.Lease(), next.tokens, claim.on
		// The release may put this process back in line with next, whatever becomes of its
		// reply (an answer other than released counts it in line: release).
		st.line.attempt = next
		st.line.forget()
	}
	return releaseJob{st: st, t: t, cfg: t.cfg, req: req, claim: claim, until: t.until, next: next, epoch: st.epoch, lost: t.keptLost()}
}

// releaseJob is the Redis part of a release (releaseLocked): st.release with what the
// release began with.
type releaseJob struct {
	st    *lockState
	t     *tenure
	cfg   domain.DLockConfig
	req   processor.ReleaseRequest
	claim hearing // what req says of the process (req.Listening), for the answer
	until time.Time
	next  *attempt
	epoch uint64
	// lost, if set (the release of a holding: an Unlock's, Close's, or of a tenure an Unlock
	// kept), tells the Observer of the holding's loss when the release, or its retry, found
	// the key gone (after the holding's ReleaseEvent).
	lost func(cause error)
	// retried, if set (Close's release), is told what became of a release that failed: its
	// retry's outcome (retryReleaseLocked).
	retried chan error
}

func (r releaseJob) run(ctx context.Context) error {
	return r.st.release(ctx, r)
}

// releaseInBackground lets the tenure go without waiting (a free tenure: no holding is left to
// tell, but the one whose Unlock kept it, tenure.kept). A loss its release finds is logged at
// Warn, as its retry's (foundLostLater), or a renewal's of the free tenure (loseLocked). The
// caller holds mu.
func (st *lockState) releaseInBackground() {
	release := st.releaseLocked(nil)
	st.background(func() { st.foundLostLater(release, release.run(st.g.clean)) })
}

// release sends release.lua for t, bounded by ctx and the lease, then leaves phase releasing.
// A release whose outcome is unknown is retried in the background until the lease runs out.
// next is the attempt the release may stand in line with again (nil for none), epoch the
// state's epoch as the release was sent.
func (st *lockState) release(ctx context.Context, r releaseJob) error {
	t, cfg, req, until, next, epoch := r.t, r.cfg, r.req, r.until, r.next, r.epoch
	rctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	sent := time.Now()
	res, err := call(st.g, rctx, func(ctx context.Context) (processor.Result, error) {
		return st.g.proc.Unlock(ctx, cfg, req)
	})
	callerEnded := ctx.Err() != nil // (asked before mu: an Owner's or a Do's Err takes its own lock's state mutex)
	st.mu.Lock()
	defer st.mu.Unlock()
	// A signal while the release was on its way (a new subscription, a message that the key
	// was let go, a ForceRelease) is news the release's answer does not cover: the waiters
	// then ask, rather than wait for the grant without a request (quiet).
	news := st.epoch != epoch
	st.relockBy = time.Now().Add(relockWindow)
	if err == nil && res.Outcome != processor.Released {
		// The key left this tenure before its release (or Redis restarted empty): a copy of
		// the request that took it may have found it held since and put this process in line.
		st.line.queued = true
	}
	queued := false // in line again with next, as the answer says
	if next != nil && st.line.attempt == next && err == nil && res.Outcome == processor.Released {
		// (Only this answer tells: a release answered settled or gone may have run before,
		// and put the process in line; the attempt then stays open, and is left.)
		if res.Queued {
			// It ran before any grant to next could (whose token is above the one it granted).
			st.line.queued = true
			st.line.waiting(sent, res.Token, &res.Seen, r.claim)
			// Redis heard the process listen: it hears its grant, and may wait for it without
			// asking (else it asks, or leaves if nobody waits).
			if queued = res.Seen.Heard; queued {
				st.lingerLocked(st.line.attempt.cfg.Lease())
			}
		} else {
			st.closeAttempt() // nothing of next reached Redis, nor can a copy of the release put it there
		}
	}
	if err != nil {
		st.retryReleaseLocked(r) // signals once done (first: the settle below leaves the line only after it)
	}
	st.dropTenureLocked(t)
	switch {
	case err != nil:
		switch {
		case errors.Is(err, errLate) && callerEnded && r.retried != nil:
			// Close's context ended first, not the lease (Close says what became of the retry).
			err = &RedisProcessError{Op: "unlock", Key: cfg.UniqueKey(), Err: unlate(err)}
		case errors.Is(err, errLate) && callerEnded:
			// The deadline of the Unlock's context passed first.
			err = &RedisProcessError{Op: "unlock", Key: cfg.UniqueKey(), Err: fmt.Errorf("%w: %w", errReleaseInBackground, unlate(err))}
		case errors.Is(err, errLate) && t.failed != nil:
			// (the lease ran out as the renewals failed: their failure is what went wrong)
			err = &RedisProcessError{Op: "unlock", Key: cfg.UniqueKey(), Err: fmt.Errorf("%w (%w), and the renewals failed: %v", errLateReply, unlate(err), t.failed)}
		case errors.Is(err, errLate):
			err = &RedisProcessError{Op: "unlock", Key: cfg.UniqueKey(), Err: fmt.Errorf("%w (%w)", errLateReply, unlate(err))}
		}
		return err
	case res.Outcome == processor.Gone:
		st.signalLocked(HowRetry)
		return fmt.Errorf("%w: found at release: the key was gone or held by another", ErrLockLost)
	}
	st.signalLocked(HowRetry)
	if queued {
		if !news {
			st.line.quiet = st.epoch + 1 // the waiters wait for the grant, unless news comes
		}
		st.grantedLocked(next, true) // (the caller, still in Unlock, takes it again at once)
	}
	st.settleLocked()
	return nil
}

// giveBackLocked lets go, in the background, an acquisition this process will not use or
// whose outcome is unknown (release.lua with its locker: released if it holds the key,
// settled either way, so no copy of its request can take the key afterwards); the waiters are
// signalled once it is done. Exclusion does not wait for it: the key only ever holds that
// acquisition's own locker. The caller holds mu, in phase idle.
func (st *lockState) giveBackLocked(locker string, cfg domain.DLockConfig) {
	// A copy of the acquisition's lock.lua may still reach Redis and find the key held: this
	// process may stand in line without knowing it. Count it in line, so that it leaves once
	// nobody waits (leave.lua settles the acquisition first, so that no copy comes after).
	st.line.queued = true
	st.background(func() {
		_ = st.giveBack(locker, 0, cfg, time.Time{}, nil) // (its caller was told the outcome was unknown; Gone tells nothing)
		st.signal(HowRetry)
	})
	st.settleLocked()
}

// retryReleaseLocked gives back, in the background, the tenure of r, whose release failed
// (its outcome unknown). The retry's outcome is told where it matters: a key found gone while
// its lease lasted is a loss — logged at Warn and, for a holding's release (an Unlock's,
// Close's), told to the Observer after the holding's ReleaseEvent (which the Unlock reported
// with the failure, Close with ErrClosed) —
// and Close's release is told the outcome (retried). The line is left once the retry's first
// try is answered or failed, not beside it (unreleased): a leave that came first would settle
// the locker, and the retry, answered settled, could not tell a loss; nor later, while tries
// keep failing: the process would stay in line, and a grant to it that nobody here wants
// could not be counted (its place unknown: the release's reply was lost) nor passed on but by
// the leave. A leave while later tries go on names the release (st.retried): it settles the
// locker too, but a key it finds taken from the locker it marks as removed, so that a later
// try answers gone, not settled. The caller holds mu, in phase releasing, before the tenure is
// dropped and the release's end settles.
func (st *lockState) retryReleaseLocked(r releaseJob) {
	locker, cfg, until := r.req.Locker, r.cfg, r.until
	st.unreleased++
	st.retried = append(st.retried, processor.Unreleased{Locker: locker, Origin: r.req.Origin}) // (every request that settles while it goes on names it)
	tried := func() {
		st.mu.Lock()
		st.unreleased--
		st.settleLocked()
		st.mu.Unlock()
	}
	st.background(func() {
		err := st.giveBack(locker, r.req.Origin, cfg, until, tried) // (naming its holding, as the release did: one taken anew is a loss)
		st.foundLostLater(r, err)
		if r.retried != nil {
			var pe *RedisProcessError
			switch {
			case errors.Is(err, errLate): // (no answer within a lease: Close's error names Redis and the key)
				err = &RedisProcessError{Op: "unlock", Key: cfg.UniqueKey(), Err: fmt.Errorf("%w (%w)", errLateReply, unlate(err))}
			case err != nil && !errors.Is(err, ErrLockLost) && !errors.As(err, &pe):
				err = &RedisProcessError{Op: "unlock", Key: cfg.UniqueKey(), Err: err}
			}
			r.retried <- err
		}
		st.mu.Lock()
		st.retried = slices.DeleteFunc(st.retried, func(u processor.Unreleased) bool { return u.Locker == locker })
		st.line.queued = true // (as giveBackLocked: a copy of a request of the tenure may have put the process in line)
		st.settleLocked()
		st.signalLocked(HowRetry)
		st.mu.Unlock()
	})
}

// foundLostLater reports a loss that r, a release that went on after its holding's
// ReleaseEvent (a retry, Close's) or a free tenure's, found (err matches ErrLockLost): logged
// at Warn and told to the Observer (r.lost, if a holding is left to tell).
func (st *lockState) foundLostLater(r releaseJob, err error) {
	if !errors.Is(err, ErrLockLost) {
		return
	}
	st.g.log.Warn("dlock: lock lost before release", zap.String("key", r.cfg.UniqueKey()),
		zap.String("locker", r.req.Locker), zap.Error(err))
	if r.lost != nil {
		r.lost(err)
	}
}

// unreleasedLocked names the releases retried meanwhile (st.retried) for a request of a
// locker other than theirs (own), which may settle them. The caller holds mu.
func (st *lockState) unreleasedLocked(own string) []processor.Unreleased {
	return slices.DeleteFunc(slices.Clone(st.retried), func(u processor.Unreleased) bool { return u.Locker == own })
}

// errLostBeforeRelease is what a retried release that found the key gone while its lease
// lasted returns (giveBack).
var errLostBeforeRelease = fmt.Errorf("%w: found when its release was retried: the key was gone or held by another before its lease ran out", ErrLockLost)

// giveBack runs release.lua for locker until Redis answers, every lease/10 for a lease (by
// then the key has expired, since every request of the locker was sent before; while Redis
// fails them, paced with the key's other give-backs: retryWait), and not on a closed client.
// Close waits for it, unless Close's own context ends first. It returns nil when Redis
// answered (the key let go, or not the locker's), the last failure when it gave up, and
// errLostBeforeRelease when the locker held the key until held by this process's clock (a
// tenure whose release failed; zero for none) and an answer that came before then found the
// key gone or another's (Redis ran it while the lease lasted). tried, if set, runs once the
// first try was answered or failed. origin is the first token of the holding that locker's
// tenure began with (0 if unknown, for an acquisition given back): a key that holds locker in
// another holding (taken anew by a late copy of its take) is let go as gone, not released.
func (st *lockState) giveBack(locker string, origin uint64, cfg domain.DLockConfig, held time.Time, tried func()) error {
	lease := cfg.Lease()
	until := time.Now().Add(lease)
	for {
		st.mu.Lock()
		req := processor.ReleaseRequest{Locker: locker, Origin: origin, Unreleased: st.unreleasedLocked(locker)}
		answered := st.answeredLocked() // (before the try: an answer to another while it is on its way counts)
		st.mu.Unlock()
		rctx, cancel := context.WithTimeout(st.g.clean, lease)
		res, err := call(st.g, rctx, func(ctx context.Context) (processor.Result, error) {
			return st.g.proc.Unlock(ctx, cfg, req)
		})
		cancel()
		if tried != nil {
			tried()
			tried = nil
		}
		if err == nil {
			st.mu.Lock()
			st.failing = time.Time{} // (Redis answers: the others waiting go: retryWait)
			if st.answered != nil {
				close(st.answered)
				st.answered = nil
			}
			st.mu.Unlock()
			// (Judged by the answer's arrival, not the request's send: a request sent in time
			// may have run after the key expired with its lease, held up on its way.)
			if res.Outcome == processor.Gone && time.Now().Before(held) {
				return errLostBeforeRelease
			}
			return nil
		}
		if time.Now().After(until) || processor.ClientClosed(err) || processor.Refused(err) || st.g.nothingSent(err) {
			st.g.log.Debug("dlock: give-back failed; the key expires with its lease", zap.String("key", cfg.UniqueKey()),
				zap.String("locker", locker), zap.Error(err))
			return err
		}
		if !st.retryWait(err, lease/10, until, answered) {
			return err
		}
	}
}

// retryWait waits after a give-back's try that Redis failed with err, for its next: pause on
// (lease/10: its own), and while Redis fails them, pause after the key's last try of any
// give-back (failing), not pause after its own only: a TryLock in a loop on a failing Redis
// leaves a give-back per try, each retried for a lease, and they were thousands a second
// after the loop stopped. A give-back that Redis answers lets every other go at once
// (answered, taken before its try), in its own pause too. One whose until passed makes its
// last try then (giveBack), unless another give-back tried within the pause: Redis still
// fails them, and the give-backs made together would all make their last try together. A failure before sending while
// nothing was sent waits for the requests still running instead (lateEnd). It returns false
// when Close ended the wait, or when the give-back is to make no more tries.
func (st *lockState) retryWait(err error, pause time.Duration, until time.Time, answered <-chan struct{}) bool {
	st.mu.Lock()
	if now := time.Now(); now.After(st.failing) {
		st.failing = now
	}
	st.mu.Unlock()
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-st.g.clean.Done():
		return false
	case <-st.g.lateEnd(err):
		return true
	case <-answered:
		return true
	case <-t.C:
	}
	for {
		now := time.Now()
		st.mu.Lock()
		if st.failing.IsZero() || !now.Before(st.failing.Add(pause)) {
			st.failing = now // (this try's: the others wait a pause after it)
			st.mu.Unlock()
			return true
		}
		if now.After(until) {
			st.mu.Unlock()
			return false
		}
		d := min(st.failing.Add(pause).Sub(now), until.Sub(now)+time.Millisecond)
		answered := st.answeredLocked()
		st.mu.Unlock()
		t.Reset(d)
		select {
		case <-st.g.clean.Done():
			return false
		case <-answered:
			return true
		case <-t.C:
		}
	}
}

// answeredLocked returns the channel closed when Redis next answers a give-back of the key
// (retryWait). The caller holds mu.
func (st *lockState) answeredLocked() <-chan struct{} {
	if st.answered == nil {
		st.answered = make(chan struct{})
	}
	return st.answered
}

// close ends what this process holds of the key as the Generator closes: the owner is told
// (ErrClosed) before the key is let go, bounded by ctx — unless the lease has run out by this
// process's clock (a process paused past it, closed as it resumed): that holding was lost, and
// is told so, as every call of its owner would find (lapse). A release (or its retry) that
// finds the key gone or another's while the lease lasted is a loss: logged at Warn and told to
// the Observer after the holding's ReleaseEvent, not returned. It returns the release's failure
// and, when the release failed while ctx lasts, retried: where its retry in the background
// tells what it came to (giveBack: nil when Redis answered it), for Close to wait for — not
// here, so that the other keys' releases are not held up.
func (st *lockState) close(ctx context.Context) (retried <-chan error, err error) {
	st.poller.Stop() // (its timer would find the Generator closed, but only as it fires)
	st.mu.Lock()
	if t := st.ten; t != nil && !time.Now().Before(t.until) {
		st.loseLocked(t, errHoldingLapsed)
	}
	h := st.owner
	if h != nil {
		if !h.end(holdClosed, nil) { // its final Unlock runs just now: that lets the tenure go
			st.mu.Unlock()
			return nil, nil
		}
		h.cancel(ErrClosed)
		st.g.observer.Released(ReleaseEvent{Kind: KindMutex, Config: h.cfg, Token: h.token, Held: time.Since(h.at), Err: ErrClosed})
		defer st.g.unref(st) // the holding's reference, once the release is done
	}
	st.endLingerLocked(st.phase != free) // (the waiters have ended: nobody will take what the linger waits for; a tenure kept for one is let go below)
	if st.ten == nil || (st.phase != held && st.phase != free) {
		st.mu.Unlock()
		return nil, nil // nothing held, or a goroutine of this process is at work on it and will see Close
	}
	release := st.releaseLocked(nil)
	release.retried = make(chan error, 1)
	if h != nil {
		release.lost = func(cause error) { // (after its ReleaseEvent, reported above)
			st.g.observer.Lost(h.loss(cause))
		}
	}
	st.mu.Unlock()
	err = release.run(ctx)
	st.foundLostLater(release, err) // (as a loss its retry finds: retryReleaseLocked)
	var pe *RedisProcessError
	if errors.As(err, &pe) && ctx.Err() == nil {
		return release.retried, err // (retried in the background: retryReleaseLocked)
	}
	if err != nil && !errors.Is(err, ErrLockLost) {
		return nil, err
	}
	return nil, nil
}
