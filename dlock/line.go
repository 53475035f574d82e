package dlock

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// line is this process's place in the key's line of waiting processes in Redis: the attempt it
// waits with (the acquisition a release grants the key to), what it learnt from Redis, and the
// watch over the release channel. Its fields are guarded by the state's mu.
//
// While goroutines of the process wait and it holds no tenure, it has one open attempt: every
// request of the waiting period carries that attempt's locker — the first lock.lua, which
// takes a free key or stands in line with it, and the retry poller's, which renew the entry
// and find a grant whose message went unheard. A release grants the key to the first process
// in line that renewed its entry lately, writing the attempt's locker into the key: the
// process holds the key when the grant's message comes, with no further request. The
// waiting period ends with the key (the attempt becomes the tenure), or with a leave, which
// settles the attempt.
type line struct {
	attempt *attempt // the open attempt, nil when none
	// queued says the process may stand in line (an entry of its may be in Redis): it
	// leaves once nobody waits.
	queued bool
	// waited is the send time of the last request of the open attempt whose answer showed it
	// waiting, and seen what that answer said of fencing tokens: a grant whose token is above
	// seen came after Redis ran that request, so its lease is counted from then. (A grant
	// with a token at or below seen came before, and went unheard: it may have expired.)
	// Zero when unknown.
	waited time.Time
	seen   uint64
	// rank is the process's place in line as that answer told it (0 for first, -1 unknown),
	// heard whether Redis saw it listen on its channel of the key then, and holderUntil when
	// the key it found held would expire unless renewed (zero when unknown). They set the
	// pace of asking again (askBy).
	rank        int
	heard       bool
	holderUntil time.Time
	// firstAt is when the process was told it is first in line (F): an answer to a request
	// sent before then may still show it further back, and does not move it back.
	firstAt time.Time
	// granted is a grant heard while a request of the attempt was on its way (phase asking):
	// its answer decides how it is counted.
	granted *grant
	// gapUntil is the end of a window in which the key is left free for processes not in line.
	gapUntil time.Time
	watching bool    // the release channel is watched for this state
	hearing  hearing // whether the process counts itself heard on its channel of the key
	// quiet is the state's epoch + 1 when the last answer about the open attempt was a
	// release that stood in line again with it (relock), and no signal came since: a goroutine
	// that wants the key then waits for the grant without asking Redis. 0 otherwise.
	quiet uint64
	// lingering says the process stands in line with no goroutine waiting (yet), after a
	// release that stood in line again (or a TryLock that ended such a linger and found the
	// key held): until one comes, its grant comes, or lingerFor ends. The linger holds a
	// reference to the state.
	lingering   bool
	linger      *time.Timer // the linger's end (lingerOver), made at the state's first linger and set again at each
	lingerUntil time.Time   // when the linger ends
}

// holdOverPause is how long a process whose goroutine did not come back for a hold-over
// (WithHoldOver) makes none: a process whose goroutines come back only after another process
// took the key (turns between processes) pays a linger of idle key once per pause, not at every
// hand-off.
const holdOverPause = time.Second

// relockWindow is how soon after the key's release in this process a Lock must come for the
// process to count as taking the key again at once (lockState.relock).
const relockWindow = time.Millisecond

// lingerFor is how long a process stands in line after a release that stood in line again,
// with no goroutine waiting, before it leaves (lease is the attempt's): short, since a
// goroutine that takes the key again at once comes within microseconds, and a grant that
// comes first to a process nobody in which wants the key is passed on at a round trip's cost
// to the next process; within a sixth of the lease, the bound on a grant whose message is
// lost (no poller runs while nobody waits: the leave passes such a grant on).
func lingerFor(lease time.Duration) time.Duration { return min(2*time.Millisecond, lease/6) }

// lingerLocked begins the linger after a release that stood in line again with the open
// attempt (or again after a TryLock that ended it, unbarge), unless goroutines wait already,
// another barges, or the Generator closes. The caller holds mu.
func (st *lockState) lingerLocked(lease time.Duration) {
	if st.line.lingering || st.q.HasWaiters() || st.barging > 0 || st.g.isClosed() {
		return
	}
	st.line.lingering = true
	st.g.hold(st)
	d := lingerFor(lease)
	if test := st.g.relockTest.Load(); test > 0 {
		d = time.Duration(test)
	}
	st.line.lingerUntil = time.Now().Add(d)
	if st.line.linger == nil {
		st.line.linger = time.AfterFunc(d, st.lingerOver)
	} else {
		st.line.linger.Reset(d)
	}
}

// lingerOver ends the linger once its time has come (the timer of an earlier linger, stopped
// too late, finds a later one not over, or none).
func (st *lockState) lingerOver() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.line.lingering && !time.Now().Before(st.line.lingerUntil) {
		st.endLingerLocked(true)
	}
}

// endLingerLocked ends the linger, if there is one: a goroutine came, or (wasted) none came
// before the grant or the linger's end, and the process stops expecting one (relock off) and
// lets go of what nobody waits for. The caller holds mu.
func (st *lockState) endLingerLocked(wasted bool) {
	if !st.line.lingering {
		return
	}
	st.line.lingering = false
	st.line.linger.Stop()
	if wasted {
		st.relock = false
		if st.phase == free { // a hold-over nobody came for: none again for a while
			st.holdOverBy = time.Now().Add(holdOverPause)
		}
		st.settleLocked()
	}
	st.g.unref(st) // (after settleLocked: its background work holds the state first)
}

// attempt is an acquisition a process waits with.
type attempt struct {
	locker string
	cfg    domain.DLockConfig // with the lease the key will be held with
	tokens int                // fencing tokens it asks for (a block when goroutines queue)
	// sent says that a request of the attempt may have reached Redis; until then there is
	// nothing of it to settle (no entry in line, no key). Guarded by the state's mu.
	sent bool
	// unanswered is the send time of the first of its requests since its last answer that got
	// none (zero when the last one was answered): see abandoned. Guarded by the state's mu.
	unanswered time.Time
	// firstSent is when its first request was sent, or a time before (its first ask, or the
	// release or yield that opened it): a grant to it came after (grantStart). Zero until
	// then. Guarded by the state's mu.
	firstSent time.Time
}

// abandoned records that a request of a, sent at sent, got no answer, and reports whether
// none has come for a lease since the first such request (overdue). A request that was never
// sent (errNotSent) is no such request, but does not stop the count of one before it.
func (a *attempt) abandoned(sent time.Time, notSent bool) bool {
	if a.unanswered.IsZero() && !notSent {
		a.unanswered = sent
	}
	return a.overdue(time.Now())
}

// overdue reports whether no request of a has been answered for a lease since the first that
// got no answer: the attempt is then given back and the process asks with a new one. Each
// request of the attempt that reached Redis may have taken the key, or found it taken by the
// attempt and renewed it, without the process knowing; a process whose answers never reach
// it in time (far from Redis, its client giving up reading before they come and sending each
// request again) would so keep the key from everyone for as long as it waits. The give-back
// settles the attempt: no copy of its requests takes the key after it. The caller holds the
// state's mu.
func (a *attempt) overdue(now time.Time) bool {
	return !a.unanswered.IsZero() && now.Sub(a.unanswered) >= a.cfg.Lease()
}

// deadline is when a request of a sent at sent stops waiting for its answer: a lease after the
// first request since the last answer (this one, when the last was answered). The caller
// holds the state's mu, or owns a.
func (a *attempt) deadline(sent time.Time) time.Time {
	first := sent
	if !a.unanswered.IsZero() {
		first = a.unanswered
	}
	return first.Add(a.cfg.Lease())
}

// grant is a grant of the key to an attempt: the first of its block of fencing tokens,
// Redis's clock (µs) as it ran the grant (0: not told), and when its message came.
type grant struct {
	locker string
	token  uint64
	at     uint64
	heard  time.Time
}

// open returns the open attempt, opening one with a new locker, cfg's lease and tokens when
// none is open. The caller holds mu.
func (st *lockState) open(cfg domain.DLockConfig, tokens int) *attempt {
	if st.line.attempt == nil {
		st.line.attempt = &attempt{locker: st.g.newLocker(), cfg: cfg, tokens: tokens}
		st.line.forget()
	}
	return st.line.attempt
}

// closeAttempt forgets the open attempt (it became the tenure, or was settled). The caller
// holds mu.
func (st *lockState) closeAttempt() {
	st.line.attempt = nil
	st.line.forget()
}

// forget forgets what the process learnt of its place in line with an attempt.
func (l *line) forget() {
	l.waited, l.seen, l.granted, l.quiet = time.Time{}, 0, nil, 0
	l.rank, l.heard, l.holderUntil, l.firstAt = -1, false, time.Time{}, time.Time{}
}

// waiting records the answer to a request of the open attempt, sent at sent, that showed it
// waiting, with what it saw of fencing tokens; s, when known, is what the answer said of the
// key and the line; claimed is what the request said of the process (hearing.answered).
func (l *line) waiting(sent time.Time, seen uint64, s *processor.Sighting, claimed hearing) {
	if !sent.After(l.waited) {
		return
	}
	l.waited, l.seen = sent, seen
	l.rank, l.heard, l.holderUntil = -1, false, time.Time{}
	if s != nil {
		l.rank, l.heard = s.Rank, s.Heard
		l.hearing.answered(claimed, s.Heard)
		if s.Rank > 0 && sent.Before(l.firstAt) {
			l.rank = 0 // (it ran before the grant or leave that made this process first)
		}
		if s.Holder != "" && s.Life >= 0 {
			// (counted from the answer's arrival, after Redis ran the request: the key has
			// expired by then, where counting from the send could ask just before the expiry
			// and find the key held still; a life of 0 is under a millisecond)
			l.holderUntil = time.Now().Add(max(s.Life, time.Millisecond))
		}
	}
}

// toldFirst records that the process heard at now that it is first in line, the key having
// life to live as the message was sent (negative: not told). That is a fresh sighting of the
// holder (the one just granted the key, as a rule), counted from the message's arrival as an
// answer's is (waiting): with the sighting of its last answer, a cycle of the line longer
// than the lease would have the process ask as soon as it is told, every time.
func (l *line) toldFirst(now time.Time, life time.Duration) {
	l.rank, l.firstAt = 0, now
	if life >= 0 {
		l.holderUntil = now.Add(max(life, time.Millisecond))
	}
}

// askBy is when a process that waits with an attempt of lease lease, whose entry in line lives
// entryTTL unless renewed, asks Redis again (lock.lua, by its retry poller) after the last
// answer that showed it waiting. It asks a sixth of the lease after that answer unless the
// answer showed Redis that it listens on its channel (it then hears its grant at once, and a
// release grants it the key however old its entry), or processes not in line share the key
// (foreign, Java DLock: their releases publish nothing). Else, first in line, it asks once the
// key it found held may have expired (a holder that died), and half the lease after that answer
// or the message that told it it is first, if later (F: a grant it misses then costs half a
// lease at most), at the latest — but, to keep its entry alive, no later than a third of the
// entry's life after the answer or half the lease, if later. (A grant is counted from an old
// answer by Redis's clock, which the grant tells; one whose time is not told or not trusted
// then leaves too little, and the first waiter asks: grantUsable.) Further back, a third of its entry's
// life after it, which keeps the entry alive: it is told when it becomes first. Wherever it
// stands, it also asks once the key it found held may have expired, if sooner: the holder may
// have died, and every process before it with it (all of a fleet but one killed at once), and
// nobody would tell it (a dead process's entry lives on, and a sixth or a third of a long lease
// is long). Further back than second (heard or not), not sooner than backPace after its last
// answer: a holder's renewals would have every process in line ask at their pace (short
// leases), where the first two are what a death the line does not see costs.
func (l *line) askBy(lease, entryTTL time.Duration, foreign bool) time.Time {
	by := l.waited.Add(entryTTL / 3)
	switch {
	case !l.heard || foreign || l.rank < 0:
		by = l.waited.Add(lease / 6) // (and sooner if the holder's key may expire sooner: it may have died)
	case l.rank == 0:
		by = l.waited.Add(lease / 2)
		if told := l.firstAt.Sub(l.waited); told > 0 {
			by = l.waited.Add(max(lease/2, min(told+lease/2, entryTTL/3)))
		}
	}
	if until := l.holderUntil; !until.IsZero() && until.Before(by) {
		if l.rank > 1 { // (heard or not: told it is first, or finding it out at its pace)
			if floor := l.waited.Add(backPace); until.Before(floor) {
				until = floor
			}
		}
		if until.Before(by) { // (never later than its own pace: a sixth of a short lease unheard)
			by = until
		}
	}
	return by
}

// backPace is how often a process further back than second in line asks at the most, as the
// key it found held may expire: a third of the shortest life of a line entry, the pace of
// processes further back whose leases are short.
const backPace = processor.MinEntryTTL / 3

// grantUsable reports whether grant g to the open attempt a can be counted from what the
// process knows (grantStart): the grant came after a request of the attempt that showed it
// waiting, or, when no answer showed it waiting yet, after the attempt's first request; and
// the lease counted from then leaves more than half of it (else the first waiter asks again,
// which finds the key its own and renews it for its lease, or finds the grant gone).
func (l *line) grantUsable(a *attempt, g grant) bool {
	from := l.grantStart(a, g)
	return !from.IsZero() && l.seen < g.token && time.Until(domain.HeldUntil(from, a.cfg.Lease())) >= a.cfg.Lease()/2
}

// grantStart is when the lease of grant g to attempt a is counted from: from the last request
// of a that showed it waiting (domain.GrantedFrom), or, when none did (every answer was lost:
// a client whose read timeout cuts them), from the send of a's first request (firstSent) —
// Redis learns a's locker from a request of a, so a grant to it came after that request ran,
// and set the key to live a lease from then. Zero when neither is known.
func (l *line) grantStart(a *attempt, g grant) time.Time {
	if l.waited.IsZero() {
		return a.firstSent
	}
	return domain.GrantedFrom(l.waited, l.seen, g.at, g.heard)
}

// beginGrantLocked begins the tenure the key granted to the open attempt a (from token) gives
// this process, if it can be counted: from the send of the last request of the attempt that
// showed it waiting, and not removed by a ForceRelease of this Generator. Otherwise it returns
// nil, and the first waiter asks again (lock.lua finds the key its own and renews it for its
// lease, or finds the attempt settled). With WithReplicaAck a grant is never used as heard:
// the script of another process wrote it and no replica was waited for, so the first waiter
// asks, and that renewal of the key, its own, holds only once replicas acknowledged it. The
// caller holds mu, in phase idle.
func (st *lockState) beginGrantLocked(a *attempt, g grant) *tenure {
	if !st.line.grantUsable(a, g) || st.forced == a.locker || st.g.opts.replicas > 0 {
		st.line.granted = nil
		st.signalLocked(HowNotified)
		return nil
	}
	start := st.line.grantStart(a, g)
	st.closeAttempt()
	st.line.queued = false
	ent := domain.DLockEntity{Locker: a.locker, Status: domain.StatusProcessing, LockTime: start, Lease: a.cfg.Lease(), Token: g.token}
	t := st.startTenure(ent, a.cfg, a.tokens)
	t.origin, t.granted = g.token, true
	return t
}

// startGrantLocked begins the tenure of a grant heard with no goroutine asking: the first
// waiter takes it; a grant nobody here waits for any more is passed on at once — except one
// heard while the relocking release that stood in line for it was on its way (keep): the
// goroutine whose Unlock sent that release has not returned yet, and takes the key again
// within microseconds, as relock expects. That tenure stays free while the linger lasts (a
// lingering process settles nothing): a goroutine that comes takes it with no request (a
// pass), and the linger's end lets it go (settleLocked), at most lingerFor after the
// release's answer. The caller holds mu, in phase idle.
func (st *lockState) startGrantLocked(a *attempt, g grant, keep bool) {
	t := st.beginGrantLocked(a, g)
	if st.line.lingering && keep && t != nil {
		return
	}
	if st.line.lingering {
		// No goroutine came for the key the release stood in line for: the grant is passed
		// on (or, unusable, left with the line), and the process stops expecting one.
		st.endLingerLocked(true)
		return
	}
	if t == nil {
		return
	}
	if !st.q.HasWaiters() && st.barging == 0 {
		st.releaseInBackground() // nobody wants it now: granted on to the next in line
		return
	}
	st.signalLocked(HowNotified)
}

// grantedLocked acts on a grant to a that was heard while a request was on its way, now that
// its answer came and the phase is idle. The caller holds mu.
func (st *lockState) grantedLocked(a *attempt, keep bool) {
	if g := st.line.granted; g != nil && a != nil && st.line.attempt == a && st.phase == idle {
		st.startGrantLocked(a, *g, keep)
	}
}

// heardGrant handles a grant of the key (notifier): g. Only the process whose open attempt it
// is acts on it.
func (st *lockState) heardGrant(g grant) {
	st.mu.Lock()
	defer st.mu.Unlock()
	a := st.line.attempt
	if a == nil || a.locker != g.locker {
		return // not ours, or not any more (a leave on its way lets it go)
	}
	switch st.phase {
	case asking, renewing, releasing: // a request of the attempt (or the yield or release that opened it) is on its way: its answer decides
		kept := g // (a copy: g itself stays on the stack in the other cases)
		st.line.granted = &kept
	case idle:
		st.startGrantLocked(a, g, false)
	}
}

// heardFirst handles a message that this process is first in line now (notifier), which
// said the key had life to live as it was sent (negative: not said): it asks again when its
// pace as first says (askBy), at once if the key was free.
func (st *lockState) heardFirst(life time.Duration) {
	st.mu.Lock()
	if st.line.attempt == nil {
		st.mu.Unlock()
		return
	}
	st.line.toldFirst(time.Now(), life)
	d, _ := st.askInLocked()
	st.mu.Unlock()
	st.poller.StartAfter(d)
}

// heardRelease handles a message that the key was left free (notifier), or left free for a
// window of gap in which only processes not in line may take it.
func (st *lockState) heardRelease(gap time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if gap > 0 {
		st.gapLocked(gap)
		return
	}
	st.signalLocked(HowNotified)
}

// gapLocked keeps this process from asking until a window of gap left for processes not in
// line ends, and wakes the first waiter then. The caller holds mu.
func (st *lockState) gapLocked(gap time.Duration) {
	st.line.gapUntil = time.Now().Add(gap)
	time.AfterFunc(gap, func() { st.signal(HowNotified) })
}

// leave takes this process out of the Redis line (leave.lua) and settles its attempts up to
// last: a key granted to one of them is passed on. cfg is the lease its entry was made with. A
// Redis failure is retried every lease/10 for as long as the entry would live (EntryTTL) — even
// when goroutines wait again meanwhile, since a grant to an attempt it settles would otherwise
// hold the key for a lease (a late leave is harmless: it settles only what it numbered) — and
// during Close, which waits for it (a closed process no longer asks, and its entry may still be
// granted the key), but not once Close gives up, nor on a closed client or a refusal (ACL, a
// key of another kind), which no second try mends, nor when nothing of the Generator's was
// ever sent (nothingSent). Should goroutines wait again, the process counts itself in line and
// leaves again when they are gone. unreleased are the releases of the process's retried in the
// background meanwhile, which the leave names.
func (st *lockState) leave(last string, cfg domain.DLockConfig, unreleased []processor.Unreleased) {
	lease := cfg.Lease()
	until := time.Now().Add(processor.EntryTTL(cfg))
	req := processor.LeaveRequest{Last: last, Unreleased: unreleased}
	for {
		rctx, cancel := context.WithTimeout(st.g.clean, lease)
		_, err := call(st.g, rctx, func(ctx context.Context) (processor.Result, error) {
			return st.g.proc.Leave(ctx, cfg, req)
		})
		cancel()
		if err == nil || processor.ClientClosed(err) || processor.Refused(err) || st.g.nothingSent(err) {
			return
		}
		st.g.log.Debug("dlock: leaving the line failed", zap.String("key", cfg.UniqueKey()), zap.Error(err))
		select {
		case <-st.g.clean.Done():
			return
		case <-time.After(lease / 10):
		case <-st.g.lateEnd(err):
		}
		st.mu.Lock()
		if st.q.HasWaiters() {
			st.line.queued = true // they wait in line; the process leaves again once they are gone
		}
		st.mu.Unlock()
		if !time.Now().Before(until) {
			return // (by then the entry has expired)
		}
	}
}

// watch makes sure a process that waits in Redis hears of its grant: the retry poller runs
// and, with notifications on, the release channel is watched. A process that holds the key
// needs neither: its goroutines wait for passes.
func (st *lockState) watch() {
	st.mu.Lock()
	if st.ten != nil {
		st.mu.Unlock()
		return
	}
	if !st.line.watching && st.g.notes != nil {
		st.line.watching = true
		st.g.notes.watch(st.channel, st.cfg.UniqueKey())
	}
	first := st.waitLeaseLocked() / 10
	if d, ok := st.askInLocked(); ok && !st.line.waited.IsZero() {
		first = d // (an answer showed it waiting: it asks again at its pace, told by what changes it)
	}
	st.mu.Unlock()
	st.poller.StartAfter(first)
}

// waitLeaseLocked is the lease the process waits with: its open attempt's (which its entry in
// the line is judged by), else the state's. The caller holds mu.
func (st *lockState) waitLeaseLocked() time.Duration {
	if a := st.line.attempt; a != nil {
		return a.cfg.Lease()
	}
	return st.cfg.Lease()
}

// Waiting implements threads.PollTarget: the poller runs while goroutines wait and this
// process does not hold the key.
func (st *lockState) Waiting() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ten == nil && st.q.HasWaiters()
}

// Poll implements threads.PollTarget. It runs when the pace askBy sets is due, and the first
// waiter asks Redis again (lock.lua with the open attempt) then — without notifications every
// sixth of the lease the process waits with, as Java DLock's poller does, and sooner once the
// key it found held may have expired: that keeps the entry alive, and fresh enough to be
// granted the key (GrantFresh), finds a grant whose message went unheard, and takes a key that
// came free without a message (a crashed holder, Java DLock). Everything that changes the pace
// (an answer, F) tells the poller when it is due, so that between asks it wakes nobody.
func (st *lockState) Poll(context.Context) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	every := st.waitLeaseLocked() / 6
	if st.retrying { // an ask failed in Redis just now: the end of its pause asks again (retryLaterLocked)
		return every
	}
	if d, ok := st.askInLocked(); ok && d > 0 {
		return d
	}
	st.signalLocked(HowPolled)
	return every
}

// askIn is askInLocked for a caller that does not hold mu.
func (st *lockState) askIn() time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	d, _ := st.askInLocked()
	return d
}

// askInLocked returns how long from now the first waiter asks again at the pace askBy sets
// (without notifications: a sixth of the lease after its last answer, or once the key that
// answer found held may have expired, if sooner). The caller holds mu.
func (st *lockState) askInLocked() (time.Duration, bool) {
	entryTTL := processor.EntryTTL(st.cfg)
	if a := st.line.attempt; a != nil {
		entryTTL = processor.EntryTTL(a.cfg)
	}
	return max(time.Until(st.line.askBy(st.waitLeaseLocked(), entryTTL, st.g.opts.gapEvery > 0)), 0), true
}

// hearing is whether a process counts itself heard on its channel of a key (a mutex's or a
// family's), which every request that stands it in line says (processor.LockRequest.Listening,
// processor.TakeRequest.Listening): a request that says so, run by Redis after the process
// died, does not make its entry live again. It is on from the subscription's confirmation, or
// an answer that Redis heard the process, until the subscription fails or an answer to a
// request that said so says Redis does not hear it.
//
// Each confirmation and failure of the subscription starts a new generation: an answer to a
// request sent in an older one tells nothing of the subscription now (Redis may have run the
// request before the subscription dropped, or before it was made again), and changes nothing.
// A value of hearing is also what a request said as it was sent (its claim).
type hearing struct {
	on  bool
	gen uint64
}

// subscribed records the subscription's confirmation.
func (h *hearing) subscribed() { h.on, h.gen = true, h.gen+1 }

// failed records the subscription's failure.
func (h *hearing) failed() { h.on, h.gen = false, h.gen+1 }

// answered records an answer, to a request that claimed c, saying whether Redis heard the
// process: "not heard" ends the claim only if the request made it (an older request, sent
// before the subscription was confirmed, says nothing of the subscription since).
func (h *hearing) answered(c hearing, heard bool) {
	if c.gen == h.gen && (heard || c.on) {
		h.on = heard
	}
}
