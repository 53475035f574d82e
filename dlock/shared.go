package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// sharedState is this process's side of one shared lock, a read-write lock or a semaphore,
// which Redis keeps as permits (processor.Shared, shared.lua): the holdings this process keeps
// there, the goroutines waiting, and its attempt in the Redis line. One goroutine, the driver,
// sends every request of the lock, one at a time; it runs while anything is held, waited for
// or asked, and the state is dropped when it ends.
//
// The cohort. A holding's permits are lent to this process's goroutines in their order of
// arrival, without Redis: a read-hold to any number of readers, a write-hold to one writer at a
// time (and to the readers of a downgrade), a semaphore's holding to owners whose permits fit
// in what it has free. Lending stops at the first waiter that cannot be served, so a writer
// is never passed by the readers that came after it. Once another process waits in line
// (a "W" message, or a reply's waiting flag: wanted), nothing more is lent but what a holding
// taken for the front waiters serves at once: each holding goes back to Redis as soon as its
// last borrower returns it. A process in line therefore waits at most for the borrowers
// already in, plus the batch that was queued when a holding arrived.
type sharedState struct {
	g       *Generator
	cfg     domain.DLockConfig
	spec    processor.Shared
	key     string // in g.shares
	channel string // this process's channel of the lock
	kick    chan struct{}

	mu       sync.Mutex
	phase    sharedPhase    // guarded by mu
	holds    []*shareHold   // in Redis, lent or not; guarded by mu
	waiters  []*shareWaiter // first come first; guarded by mu
	closed   []ReleaseEvent // Close's, for the driver to tell the Observer; guarded by mu
	lost     []LossEvent    // losses Close found, for the driver to tell the Observer before Close returns; guarded by mu
	wanted   bool           // another process waits in line: lend no more; guarded by mu
	heardW   uint64         // W messages heard: a reply to a request sent before the last does not clear wanted; guarded by mu
	heardF   uint64         // F messages heard (and subscriptions confirmed): likewise for the attempt's pace; guarded by mu
	subAt    time.Time      // when the channel was last subscribed: a holding renewed by a request sent before renews again at once; guarded by mu
	hearing  hearing        // whether the process counts itself heard on its channel; guarded by mu
	attempt  *shareAttempt  // this process's request for permits, if any; guarded by mu
	forced   string         // the attempt's locker a ForceRelease here removed while its take's answer was on its way; guarded by mu
	forces   forces         // the ForceRelease calls here of this process's lockers, on their way or owed a check: their holdings lend to nobody new (held); guarded by mu
	growAt   time.Time      // sem: when a process holding permits may ask for more again; guarded by mu
	growN    int64          // sem: the permits the ask refused that set growAt: a front waiter asking fewer may ask before it; guarded by mu
	growWake How            // what lets the next attempt after growAt be sent (Observer): polled, notified, or retry; guarded by mu
	owed     []owedRelease  // releases to send: of holdings let go, and of lockers that may hold in Redis unknown to this process; guarded by mu
	failing  time.Time      // after a release Redis failed: no release it failed goes again before then (sent, due); guarded by mu
	lapsed   []error        // Close's releases of holdings given up (Redis failed them till their lease ran out, or refused them): Close reports them; guarded by mu
	exited   chan struct{}  // closed when the driver ended
}

// sharedPhase is where a sharedState is in its life.
type sharedPhase uint8

const (
	sharedIdle    sharedPhase = iota // made, no driver yet
	sharedRunning                    // the driver runs
	sharedDropped                    // the driver ended and the state left g.shares: make another
)

// shareHold is one holding in Redis and what it lends.
type shareHold struct {
	locker   string
	n        int64     // permits held in Redis
	token    uint64    // fencing token of its last writer, else of the holding (a downgrade keeps its owners' tokens)
	origin   uint64    // the token Redis keeps the holding with (its take's): renewals name it
	next     uint64    // rw write-hold: the token the next writer it serves gets, from the block reserved ...
	tokEnd   uint64    // ... up to this one
	spare    uint64    // rw write-hold: the first token of a block a refill reserved, to use next (0: none)
	refillAt time.Time // rw write-hold: a refill may be sent from then (after one Redis failed)
	readers  int       // rw: read borrowers; sem: borrowers
	how      How       // what sent the take that made it (Observer)
	writers  int       // rw: write borrowers (0 or 1)
	lent     int64     // sem: permits lent
	fresh    bool      // taken for the front waiters and not lent yet: it serves them even when wanted
	downAt   time.Time // a downgrade may be tried from then (after one Redis failed)
	downing  bool      // a downgrade is on its way or unresolved: nobody may borrow what it gives back (a writer, permits)
	downTo   string    // the locker of a downgrade whose outcome is unknown, sent again until known ...
	downN    int64     // ... and the permits it keeps (see shrinkTo)
	renewAt  time.Time
	check    bool            // a ForceRelease here may have removed it unheard: renew at once, also after the answer of a renewal (or downgrade) sent before
	soonest  time.Time       // a renewal to lend it (stale) may be sent from then
	valid    time.Time       // the lease runs out (from the send time of the last take or renewal)
	expiry   *time.Timer     // ends the holding at valid, whatever the driver is doing
	answered []chan struct{} // closed by the next renewal's (or downgrade's) answer (freshen waits for it)
	fate     []chan error    // told once an idle holding is let go in Redis or lent again (Unlock waits)
	owners   []*shareOwner   // its borrowers' owners, for Close to report released
	closed   []*shareOwner   // those Close ended (reported released): told of a loss its release finds
	endsWith                 // its context: its owners' contexts are children of it

	// the cause it ends with when its lease runs out: errHoldingLapsed with the last renewal's
	// failure since one was answered (nil: errHoldingLapsed alone); expiry reads it without mu
	lapse atomic.Pointer[error]
	// the send time (unix ns) of its renewal on its way unanswered, 0 when none: a lease that
	// runs out meanwhile says so (lapsedCause)
	renewing atomic.Int64
}

func (h *shareHold) write() bool { return h.n == processor.RWPermits }

// takeFate returns the channels of the Unlocks waiting for h's fate, forgetting them.
func (h *shareHold) takeFate() []chan error {
	f := h.fate
	h.fate = nil
	return f
}

// tell gives the Unlocks waiting on cs what became of the holding they let go: err is nil
// when it was let go in Redis or lent again, errGone when its release found it gone, else the
// Redis failure of its release.
func tell(cs []chan error, err error) {
	for _, c := range cs {
		c <- err // (each has room for one)
	}
}
func (h *shareHold) idle() bool { return h.readers == 0 && h.writers == 0 }

// writeBlock is how many fencing tokens a write-hold reserves at a time, each writer it serves
// having one of its own. Once half are used while writers wait, a refill (a renewal) reserves
// another block, used when this one is; a writer waits only when both are used up. The tokens
// a hold did not hand out go back with its release.
const writeBlock = blockSize // (as many as a mutex tenure's)

// tokens returns how many fencing tokens a holding of n permits reserves.
func (st *sharedState) tokens(n int64) int {
	if st.spec.Kind == processor.KindRW && n == processor.RWPermits {
		return int(st.g.opts.writeBlock)
	}
	return 1
}

// shareWaiter is a goroutine waiting for permits.
type shareWaiter struct {
	n      int64 // permits: 1 to read, processor.RWPermits to write, or a semaphore's n
	write  bool
	try    bool          // TryLock: one request (two with again), no line
	done   chan struct{} // closed when decided: hold set (lent), or err, or neither (not obtained)
	hold   *shareHold
	token  uint64    // the holding's token when lent
	queued bool      // it was not served at once
	passed bool      // lent a holding that had been lent before (a hand-over within the process), not one taken for it
	asked  bool      // an attempt was made for it before (a new one is not its first ask)
	again  bool      // a try that found the key held asks once more, after the releases of its process that Redis failed
	since  time.Time // when it began to wait
	err    error
	fault  error // the last Redis failure of a take of its process's attempt (or of a renewal it waits on) as it waited, unless Redis answered one since, which its error names if it gives up; guarded by st.mu
}

// subscriptionFailed makes f, a failure of the subscription to the lock's releases
// (notifier.failed), the fault of its waiters while the process waits in Redis: one that
// gives up names it, unless Redis answered since (a take, a renewal, the subscription again).
func (st *sharedState) subscriptionFailed(f error) {
	st.mu.Lock()
	st.hearing.failed()
	if st.attempt != nil { // (the process waits in Redis)
		st.faultLocked(f, nil)
	}
	st.mu.Unlock()
}

// faultLocked makes err (a Redis failure of a take of this process's attempt, or of the
// renewal of of) the fault of the waiters that wait on it: all of them, or those that of
// would serve once renewed. A nil err (Redis answered a take or a renewal) clears the fault of
// all: a Lock that gives up then names no failure (as the mutex's). The caller holds mu.
func (st *sharedState) faultLocked(err error, of *shareHold) {
	for _, w := range st.waiters {
		if err == nil || of == nil || st.holdFor(w, time.Time{}) == of {
			w.fault = err
		}
	}
}

// how is how w was served, for the Observer: at once (HowAttempt), by a holding passed on
// within the process (HowHandOver), or by one taken for it — by what sent that take.
func (w *shareWaiter) how() How {
	switch {
	case !w.queued:
		return HowAttempt
	case w.passed:
		return HowHandOver
	}
	return w.hold.how
}

// woken records what sends a's next take (Observer). A try's take is its first ask, however
// often sent.
func (a *shareAttempt) woken(how How) {
	if !a.try {
		a.wake = how
	}
}

// shareAttempt is this process's request for permits: in the Redis line (wait), or one try.
type shareAttempt struct {
	locker string
	n      int64
	wait   bool
	try    bool         // for a TryLock: its answer is the try's ...
	w      *shareWaiter // ... that one's (a try asks for itself: another's answer may be older than it)
	pollAt time.Time    // when to ask again (it renews the line entry) ...
	wake   How          // ... and what that ask is for the Observer: the first (HowAttempt), a message (notified), the pace (polled), a failure's pause (retry)
	sent   bool         // asked at least once: its outcome may be a holding
	// unanswered is the send time of the first of its takes since its last answer that got
	// none (zero when the last one was answered); abandoned, that none came for a lease since:
	// it is given back, and the waiters ask with a new attempt (as the mutex's, attempt.abandoned).
	unanswered time.Time
	abandoned  bool
	// drop, closed by unwantedLocked when the waiters it served left, drops its take on its
	// way if that still waits for the Generator's gate (callUnless): never sent. nil when no
	// take is on its way; guarded by mu.
	drop chan struct{}
}

// unwantedLocked drops the attempt's take on its way, if it still waits for the Generator's
// gate, when the attempt serves no waiter any more: never sent, and an attempt never sent has
// nothing to give back (under overload such give-backs crowded out new work, as the mutex's
// did). The caller holds mu.
func (st *sharedState) unwantedLocked() {
	if a := st.attempt; a != nil && a.drop != nil && !a.serves(st.front()) {
		close(a.drop)
		a.drop = nil
	}
}

// serves reports whether a asks for what w waits for, so that its answer is w's: the same
// permits, and for a try, w's own request (a try that came while an older one's request was on
// its way asks anew, or it would be answered from before it began).
func (a *shareAttempt) serves(w *shareWaiter) bool {
	return w != nil && w.n == a.n && w.try == a.try && (!a.try || w == a.w)
}

// sharedKey returns g.shares's key of the shared lock of unique key key and kind kind.
func sharedKey(key string, kind processor.Kind) string {
	return string(kind) + "|" + key
}

// shared returns the live state of cfg's shared lock, starting its driver.
func (g *Generator) shared(cfg domain.DLockConfig, spec processor.Shared) (*sharedState, error) {
	key := sharedKey(cfg.UniqueKey(), spec.Kind)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, ErrClosed
	}
	st := g.shares[key]
	if st == nil {
		st = &sharedState{g: g, cfg: cfg, spec: spec, key: key, kick: make(chan struct{}, 1),
			channel: processor.SharedChannel(cfg, g.prefix), exited: make(chan struct{})}
		g.shares[key] = st
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.phase == sharedIdle {
		st.phase = sharedRunning
		if g.notes != nil {
			g.notes.watch(st.channel, sharedPrefix+cfg.UniqueKey()) // (of either kind: lookupShared)
			if st.hearing == (hearing{}) && g.notes.confirmedNow(st.channel) {
				st.hearing.subscribed() // a new state, on a channel that lingered
			}
		}
		if !g.group.Go(st.drive) {
			st.phase = sharedDropped
			delete(g.shares, key)
			close(st.exited)
			return nil, ErrClosed
		}
	}
	return st, nil
}

// sharedPrefix marks a notifier subscription of a shared lock.
const sharedPrefix = "shared|"

// lookupShared returns the live state of a shared lock by its g.shares key.
func (g *Generator) lookupShared(key string) *sharedState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shares[key]
}

// poke wakes the driver.
func (st *sharedState) poke() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// hear handles a message on this process's channel: "W" another process began to wait, "F"
// the permits this process waits for fit now, or that SetPermits changed the count (a raise, to
// a holder; a lowering, to a holder or a process in line for more than the new count): a
// goroutine waiting for more than the process holds asks again at once, and is served, or
// refused when it asks for more than the count.
func (st *sharedState) hear(payload string) {
	st.mu.Lock()
	switch payload {
	case "W":
		st.wanted = true
		st.heardW++
	case "F":
		st.heardF++
		if st.attempt != nil {
			st.attempt.pollAt = time.Time{}
			st.attempt.woken(HowNotified)
		}
		st.growAt, st.growWake = time.Time{}, HowNotified // (a raised count: a holder's waiter asks for more now)
	}
	st.mu.Unlock()
	st.poke()
}

// askNow has the process's attempt, and a holder's waiter for more permits, ask at once
// (notifier.askAll): counted as an F, so that the reply to a take on its way does not put
// the next ask off again.
func (st *sharedState) askNow() {
	st.mu.Lock()
	st.heardF++
	if st.attempt != nil {
		st.attempt.pollAt = time.Time{}
		st.attempt.woken(HowRetry)
	}
	st.growAt, st.growWake = time.Time{}, HowRetry
	st.mu.Unlock()
	st.poke()
}

// subscribed runs when this process's channel of the lock is (again) subscribed: a message
// published before went unheard, so the attempt asks again at once (an F, counted as one: the
// reply to a take on its way then does not put the next ask off) and the holdings renew at
// once (a W: the renewal's reply says whether anyone waits) — also one whose renewal (or take)
// is on its way, once it is answered (subAt): that request may have run before the W.
func (st *sharedState) subscribed() {
	st.mu.Lock()
	for _, w := range st.waiters {
		if subscriptionFault(w.fault) { // (Redis answered since)
			w.fault = nil
		}
	}
	now := time.Now()
	st.heardF++
	st.subAt = now
	st.hearing.subscribed()
	if st.attempt != nil {
		st.attempt.pollAt = time.Time{}
		st.attempt.woken(HowRetry)
	}
	for _, h := range st.holds {
		if h.ctx.Err() == nil && h.renewAt.After(now) {
			h.renewAt = now
		}
	}
	st.mu.Unlock()
	st.poke()
}

// wait queues w and waits until it is decided or ctx ends: then it returns ErrClosed, or
// ErrNotObtained with ctx's error and the last Redis failure of a take for w, or of a renewal
// it waited on, unless Redis answered one since (notObtained).
// Permits lent to w as ctx ended are given back (lent to the next) and w is not obtained.
func (st *sharedState) wait(ctx context.Context, w *shareWaiter) error {
	st.mu.Lock()
	if st.phase == sharedDropped {
		st.mu.Unlock()
		return errStateDropped
	}
	w.since = time.Now()
	st.waiters = append(st.waiters, w)
	st.lendLocked()
	w.queued = w.hold == nil
	if w.try && w.hold == nil && st.front() != w { // a try does not wait behind others
		st.waiters = slices.DeleteFunc(st.waiters, func(x *shareWaiter) bool { return x == w })
		close(w.done)
	}
	st.mu.Unlock()
	st.poke()
	select {
	case <-w.done:
		if ctx.Err() == nil {
			return nil
		}
	case <-ctx.Done():
	case <-st.g.done.Done():
	}
	// (asked before mu: the Err of an Owner's context, or of Do's, takes its lock's state mutex
	// to find a lapsed lease — a waiter nested the other way round would hold that one and wait
	// for this one)
	live := ctx.Err() == nil
	st.mu.Lock()
	onItsWay := false // w's own take, which Redis has not answered yet
	select {
	case <-w.done: // decided meanwhile
		if w.hold == nil || live {
			st.mu.Unlock()
			return nil
		}
		// lent as ctx ended: given back and passed on, as the mutex's Lock does (STYLE 4)
		st.unlend(&shareOwner{hold: w.hold, n: w.n, write: w.write})
		w.hold = nil
	default:
		onItsWay = st.attempt != nil && st.attempt.drop != nil && st.attempt.serves(w)
		st.waiters = slices.DeleteFunc(st.waiters, func(x *shareWaiter) bool { return x == w })
		st.unwantedLocked()
	}
	st.lendLocked() // the next may be served now
	fault := w.fault
	if fault == nil && onItsWay {
		fault = errNoAnswer // (as the mutex's: the error says so, and names a failure meanwhile)
	}
	st.mu.Unlock()
	st.poke()
	if st.g.done.Err() != nil {
		return ErrClosed
	}
	return st.g.faultSince(notObtained(ctx.Err(), fault), w.since)
}

var errStateDropped = errors.New("dlock: shared state dropped")

// lendLocked serves the front waiters from the holdings, in order, up to the first that none
// can serve. The caller holds mu.
func (st *sharedState) lendLocked() {
	now := time.Now()
	for len(st.waiters) > 0 {
		w := st.waiters[0]
		h := st.holdFor(w, now)
		if h == nil {
			break
		}
		st.lend(h, w)
		st.waiters = st.waiters[1:]
		w.hold, w.token, w.passed = h, h.token, !h.fresh
		close(w.done)
	}
	for _, h := range st.holds {
		if !st.held(h) { // (one held back stays fresh: it serves the front waiters once its check is done)
			h.fresh = false
		}
	}
}

// holdFor returns a holding that can serve w at now, or nil. A holding with less than half its
// lease left at now serves nobody new, as a mutex's Lock never returns with less (the driver
// renews it first: stale), nor does one a ForceRelease here may have removed (held); with now
// zero, holdFor tells the holding that would serve w if it were renewed.
func (st *sharedState) holdFor(w *shareWaiter, now time.Time) *shareHold {
	for _, h := range st.holds {
		if h.ctx.Err() != nil || (st.wanted && !h.fresh) || (!now.IsZero() && (st.stale(h, now) || st.held(h))) {
			continue
		}
		switch {
		case st.spec.Kind == processor.KindSem:
			if h.n-h.lent >= w.n && !h.downing {
				return h
			}
		case w.write:
			if h.write() && h.idle() && !h.downing && (h.next <= h.tokEnd || h.spare > 0) {
				return h
			}
		case !h.write() || h.writers == 0: // a reader: a read-hold, or an idle write-hold
			return h
		}
	}
	return nil
}

func (st *sharedState) lend(h *shareHold, w *shareWaiter) {
	tell(h.takeFate(), nil)
	switch {
	case st.spec.Kind == processor.KindSem:
		h.readers++
		h.lent += w.n
	case w.write:
		h.writers++
		if h.next > h.tokEnd { // (holdFor saw a spare block)
			h.next, h.tokEnd, h.spare = h.spare, h.spare+st.g.opts.writeBlock-1, 0
		}
		h.token = h.next // each writer a token of its own
		h.next++
	default:
		h.readers++
		if h.write() && h.next == h.token { // a fresh write-hold's first token, now a reader's: the next writer's is above it
			h.next++
		}
	}
}

// unlend returns what owner borrowed. The caller holds mu.
func (st *sharedState) unlend(o *shareOwner) {
	h := o.hold
	switch {
	case st.spec.Kind == processor.KindSem:
		h.readers--
		h.lent -= o.n
	case o.write:
		h.writers--
	default:
		h.readers--
	}
}

// action is what the driver does next.
type action struct {
	do      func(ctx context.Context) // a request, sent without mu
	renewAt time.Time                 // a request but a renewal: the next renewal due, which it must not hold up
	again   bool                      // else: plan again at once
	wait    time.Time                 // else: sleep until then (zero: until poked)
	exit    bool
	closing bool       // do runs with the clean-up context
	renews  *shareHold // a refill of this holding: the other holdings' renewals bound it
}

// drive is the driver: it sends the lock's requests, one at a time, until nothing is held,
// waited for or asked.
func (st *sharedState) drive() {
	defer close(st.exited)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		a := st.plan()
		st.mu.Lock()
		closed, lost := st.closed, st.lost
		st.closed, st.lost = nil, nil
		st.mu.Unlock()
		for _, e := range lost {
			st.g.observer.Lost(e)
		}
		for _, e := range closed {
			st.g.observer.Released(e)
		}
		switch {
		case a.exit:
			return
		case a.do != nil:
			ctx := st.g.clean
			if !a.closing {
				ctx = st.g.done
			}
			d, cause := requestTimeout(st.cfg), errUnanswered
			if !a.renewAt.IsZero() && time.Until(a.renewAt) < d {
				d, cause = max(time.Until(a.renewAt), time.Millisecond), errMakeWay
			}
			ctx, cancel := context.WithTimeoutCause(ctx, d, cause)
			a.do(ctx)
			cancel()
		case a.again:
		default:
			d := time.Hour
			if !a.wait.IsZero() {
				d = max(time.Until(a.wait), 0)
			}
			timer.Reset(d)
			select {
			case <-st.kick:
			case <-timer.C:
			case <-st.g.done.Done():
			}
			timer.Stop()
		}
	}
}

// plan decides the driver's next step. Whether the Generator closed is asked under mu: Close
// ends holdings with ErrClosed (closeHolds) under mu once it closed, and a step planned as if
// it had not would take such a holding, idle, for one given back (no release is sent).
func (st *sharedState) plan() action {
	st.mu.Lock()
	if st.g.done.Err() != nil {
		st.mu.Unlock()
		return st.planClose()
	}
	defer st.mu.Unlock()
	now := time.Now()
	st.holds = slices.DeleteFunc(st.holds, func(h *shareHold) bool {
		if h.ctx.Err() == nil || !h.idle() {
			return false
		}
		lost := errors.Is(context.Cause(h.ctx), ErrLockLost)
		if lost {
			tell(h.takeFate(), context.Cause(h.ctx)) // (lost as its last Unlock waited: it says so)
		} else {
			tell(h.takeFate(), nil)
		}
		if h.downTo != "" {
			st.owe(h.downTo)
		}
		if lost {
			// its lease ran out here, but a renewal may have run in Redis unheard: give it
			// back rather than leave its permits out for another lease
			st.owe(h.locker)
		}
		return true
	})
	st.lendLocked()
	// renewals first: a holding's lease is the one thing that cannot wait
	for _, h := range st.holds {
		if h.ctx.Err() == nil && h.downTo == "" && (!now.Before(h.renewAt) || st.stale(h, now) && !now.Before(h.soonest) && st.awaited(h)) {
			return action{do: st.renew(h)}
		}
	}
	a := st.planOther(now)
	if a.do != nil && !a.closing {
		for _, h := range st.holds {
			if h.ctx.Err() == nil && h.downTo == "" && h != a.renews {
				a.renewAt = earliest(a.renewAt, h.renewAt)
			}
		}
	}
	return a
}

// planOther decides a step that is not a renewal. The caller holds mu.
func (st *sharedState) planOther(now time.Time) action {
	g := st.g
	lease := st.cfg.Lease()
	if i := slices.IndexFunc(st.owed, func(o owedRelease) bool { return o.retryAt.IsZero() }); i >= 0 { // (none that Redis failed)
		return st.payOwed(i)
	}
	// a holding nobody borrows goes back, unless it serves the front waiter; one that lends
	// less than it holds may keep just that (shrinkTo)
	for _, h := range st.holds {
		if h.downTo != "" && h.ctx.Err() == nil {
			if now.Before(h.downAt) {
				continue
			}
			return action{do: st.downgrade(h)} // resolve the unknown first
		}
		if st.mustRefill(h, now) {
			return action{do: st.refill(h), renews: h}
		}
		if h.idle() && h.ctx.Err() == nil && !(h.fresh && st.held(h)) { // (one taken for the front waiters serves them once a force's check is done)
			return st.releaseAction(h) // (never with downTo: a downgrade of unknown outcome is resolved first, above)
		}
		if n := st.shrinkTo(h, now); n > 0 {
			h.downTo, h.downN = st.g.newLocker(), n
			return action{do: st.downgrade(h)}
		}
	}
	if a := st.attempt; a != nil {
		front := st.front()
		if !a.serves(front) || a.abandoned {
			return st.giveBack(a) // nobody wants what it asks for any more, or it got no answer for a lease
		}
		if !now.Before(a.pollAt) {
			return action{do: st.take(a)}
		}
	} else if front := st.front(); front != nil && st.mayAsk(front) && !st.heldServes(front) {
		a := &shareAttempt{locker: g.newLocker(), n: front.n, wait: !front.try, try: front.try}
		if front.try {
			a.w = front
		}
		// A process that holds permits first asks for more without standing in line: in line
		// it would make every holder give its permits back (W) while its own permits, going
		// from goroutine to goroutine, may serve its waiter soon. Once its first waiter has
		// waited growPatience, it stands in line like any other, so that it is not passed
		// for ever by processes that keep their permits busy.
		if st.spec.Kind == processor.KindSem && len(st.holds) > 0 && !front.try && now.Sub(front.since) < growPatience(st.cfg) {
			a.wait = false
		}
		// (The pause after a refused ask for more is for as many permits: the waiter that asked
		// may have given up, and a smaller ask behind it may fit now.)
		if a.wait || a.try || !now.Before(st.growAt) || front.n < st.growN {
			if front.asked && !front.try {
				a.wake = st.growWake // (its first ask was an earlier attempt's: what lets this one be sent)
			}
			front.asked, st.growWake = true, HowRetry
			st.attempt = a
			return action{do: st.take(a)}
		}
	} else if front != nil && front.try {
		// a try that this process's own holdings stand in the way of
		st.waiters = st.waiters[1:]
		close(front.done)
		return action{again: true}
	}
	if act, ok := st.settleLapsed(now); ok {
		return act
	}
	if i := slices.IndexFunc(st.owed, func(o owedRelease) bool { return !now.Before(st.due(o)) }); i >= 0 {
		// releases that Redis failed go again once nothing else is due: a take is never
		// held up by them (it goes, and fails or not on its own, as the mutex's does while
		// its give-back is retried in the background)
		return st.payOwed(i)
	}
	next := time.Time{}
	for _, o := range st.owed {
		next = earliest(next, st.due(o))
	}
	if st.attempt == nil && len(st.waiters) > 0 && st.growAt.After(now) {
		next = earliest(next, st.growAt)
	}
	if st.attempt == nil && st.spec.Kind == processor.KindSem && len(st.waiters) > 0 {
		// (past it, the front asked above unless a holding held back by a force serves it:
		// the force's answer pokes the driver, which must not spin meanwhile)
		if at := st.waiters[0].since.Add(growPatience(st.cfg)); at.After(now) {
			next = earliest(next, at)
		}
	}
	for _, h := range st.holds {
		if h.ctx.Err() != nil {
			continue
		}
		if h.downTo != "" {
			next = earliest(next, h.downAt)
			continue
		}
		next = earliest(next, h.renewAt)
		if h.refillAt.After(now) {
			next = earliest(next, h.refillAt) // (a refill that failed is tried again then)
		}
	}
	if st.attempt != nil {
		next = earliest(next, st.attempt.pollAt)
	}
	if len(st.holds) == 0 && len(st.waiters) == 0 && st.attempt == nil && len(st.owed) == 0 {
		return st.drop()
	}
	if next.IsZero() && len(st.waiters) > 0 {
		next = now.Add(lease / 6) // waiting for borrowers; look again anyway
	}
	return action{wait: next}
}

// stale reports whether h has less than half its lease left at now: it is renewed before it
// serves another borrower. The caller holds mu.
func (st *sharedState) stale(h *shareHold, now time.Time) bool {
	return h.valid.Sub(now) < st.cfg.Lease()/2
}

// held reports whether a ForceRelease here may have removed h (see forces): it lends to
// nobody new until the force's answer or a renewal tells. The caller holds mu.
func (st *sharedState) held(h *shareHold) bool {
	return st.forces.hold(h.locker) || h.downTo != "" && st.forces.hold(h.downTo)
}

// heldServes reports whether a holding held back (held) would serve w once checked: w waits
// for it, rather than this process asking Redis for more (and holding twice what it needs, or
// standing in line behind others again). The caller holds mu.
func (st *sharedState) heldServes(w *shareWaiter) bool {
	h := st.holdFor(w, time.Time{})
	return h != nil && st.held(h)
}

// forceSent counts a ForceRelease of locker about to be sent, if locker is this process's
// (its attempt's, a holding's or a downgrade's), and reports whether it did.
func (st *sharedState) forceSent(locker string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.attempt != nil && st.attempt.locker == locker ||
		slices.ContainsFunc(st.holds, func(h *shareHold) bool { return h.locker == locker || h.downTo == locker }) {
		st.forces.sent(locker)
		if f := st.g.opts.forceCounted; f != nil {
			f(st.cfg.UniqueKey(), locker)
		}
		return true
	}
	return false
}

// lapse ends h as lost if its lease ran out by this process's clock and its expiry timer,
// running late, has not said so yet: as the timer would, now (the driver then gives it back).
//
// No goroutine is lent, keeps, or is told it has a holding whose lease ran out by this
// process's clock: a new borrower needs half the lease left (holdFor, stale), and every call of
// an owner (Unlock, a re-entry, a downgrade, HoldCount, FencingToken) finds its owner through
// ownerIn, which checks here before anything else (an Owner's own Unlock, through unlock). It
// then reports the loss, as every later call does.
func (st *sharedState) lapse(h *shareHold) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lapseLocked(h)
}

// lapseLocked is lapse; the caller holds mu.
func (st *sharedState) lapseLocked(h *shareHold) {
	if h.ranOut(time.Now()) {
		h.stop(st.lapsedCause(h))
		st.poke()
	}
}

// ranOut reports whether h, not ended yet, counts its lease as run out at now by this
// process's clock. The caller holds mu.
func (h *shareHold) ranOut(now time.Time) bool {
	return h.ctx.Err() == nil && !now.Before(h.valid)
}

// awaited reports whether h would serve a waiter if it were renewed. The caller holds mu.
func (st *sharedState) awaited(h *shareHold) bool {
	return slices.ContainsFunc(st.waiters, func(w *shareWaiter) bool { return st.holdFor(w, time.Time{}) == h })
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (st *sharedState) front() *shareWaiter {
	if len(st.waiters) == 0 {
		return nil
	}
	return st.waiters[0]
}

// mayAsk reports whether this process may ask Redis for the front waiter's permits: a
// semaphore whenever none of its holdings serves the front; a read-write lock once its own
// holdings are back, but for a writer behind its own read-holds, which stands in line at once
// (Redis counts the process's read-hold against it until it goes back, as its readers finish):
// the other processes are told (W) and let their readers finish meanwhile, instead of after;
// and for a reader whose read-holds lend nothing because another process waited (wanted): it
// asks as a reader of another process does, and stands in line behind that waiter, or takes
// the key if the waiter has gone meanwhile (the answer then clears wanted, which a W set and
// only an answer clears: a waiter that left tells no holder).
func (st *sharedState) mayAsk(front *shareWaiter) bool {
	live := func(h *shareHold) bool { return h.ctx.Err() == nil } // (a lost one is not in Redis, or not for long)
	if st.spec.Kind == processor.KindSem || !slices.ContainsFunc(st.holds, live) {
		return true
	}
	writeHeld := slices.ContainsFunc(st.holds, func(h *shareHold) bool { return live(h) && h.write() })
	if !front.write {
		return st.wanted && !writeHeld
	}
	return !front.try && !writeHeld
}

// drop ends the driver: the state leaves g.shares (a later user makes a new one). The caller
// holds st.mu; g.mu is taken after it only through TryLock, never waited for, so the lock
// order (g.mu before st.mu) holds.
func (st *sharedState) drop() action {
	if !st.g.mu.TryLock() {
		return action{wait: time.Now().Add(time.Millisecond)}
	}
	defer st.g.mu.Unlock()
	st.phase = sharedDropped
	if st.g.shares[st.key] == st {
		delete(st.g.shares, st.key)
		if len(st.g.shares) == 0 && len(st.g.states) == 0 && st.g.drained != nil {
			close(st.g.drained)
			st.g.drained = nil
		}
	}
	if st.g.notes != nil {
		st.g.notes.unwatch(st.channel, st.hearing.on)
	}
	return action{exit: true}
}

// closeHolds ends, on Close's goroutine, every holding whose lease has not run out: its owners'
// contexts end with ErrClosed before Close returns, also when Close's ctx leaves it no time to
// wait for the driver, which reports them and gives the holdings back (planClose). One whose
// lease ran out was lost, not closed: the driver tells its owners so.
func (st *sharedState) closeHolds() {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	for _, h := range st.holds {
		if !h.ranOut(now) {
			st.closeHoldLocked(h)
		}
	}
}

// closeHoldLocked ends h with ErrClosed, unless it ended lost before (its owners were told):
// its owners' contexts end and each is reported released, with ErrClosed, once, as it is
// ended (the driver sends the reports), so that an Unlock after it, which says ErrClosed,
// leaves the report to Close; its release tells them of a loss it finds (h.closed). The
// caller holds mu.
func (st *sharedState) closeHoldLocked(h *shareHold) {
	h.stop(ErrClosed)
	if !errors.Is(context.Cause(h.ctx), ErrClosed) {
		return
	}
	for _, so := range h.owners { // as the mutex's Close: released, with ErrClosed
		so.cancel(ErrClosed) // (its context ends before Close returns; the hold's callback would end it later)
		st.closed = append(st.closed, so.event(ErrClosed))
	}
	h.closed = append(h.closed, h.owners...)
	h.owners = nil
}

// planClose is the driver's step once the Generator closes: waiters end with ErrClosed, every
// holding ends (its owners' contexts with ErrClosed) and goes back, and the attempt is given
// back, with the Generator's clean-up context.
func (st *sharedState) planClose() action {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, w := range st.waiters {
		w.err = ErrClosed
		close(w.done)
	}
	st.waiters = nil
	if a := st.attempt; a != nil {
		act := st.giveBack(a)
		act.closing = true
		return act
	}
	for _, h := range st.holds {
		// A holding whose lease ran out by this process's clock was lost, not closed: its
		// owners are told here, by the driver before Close returns, not by their callbacks
		// (stopped first: ending the holding starts them).
		var unseen []*shareOwner
		if h.ranOut(time.Now()) {
			for _, so := range h.owners {
				if so.stop() {
					unseen = append(unseen, so)
				}
			}
		}
		st.lapseLocked(h)
		st.closeHoldLocked(h) // (closeHolds did, but for one taken since; a lost one stays lost)
		for _, so := range unseen {
			cause := context.Cause(h.ctx)
			so.cancel(cause)
			st.lost = append(st.lost, so.loss(cause))
		}
		h.owners = nil // (a holding lost before: its owners were told Lost)
	}
	if act, ok := st.settleLapsed(time.Now()); ok {
		act.closing = true
		return act
	}
	if len(st.owed) > 0 {
		o := st.owed[0]
		st.owed = st.owed[1:]
		pay, due := st.pay(o), st.due(o)
		return action{closing: true, do: func(ctx context.Context) {
			sleep(ctx, time.Until(due)) // (its pause, as plan keeps it; an ended ctx sends nothing)
			pay(ctx)
		}}
	}
	if len(st.holds) > 0 {
		h := st.holds[0]
		st.holds = st.holds[1:]
		o := st.letGo(h)
		o.byClose = !errors.Is(context.Cause(h.ctx), ErrLockLost) // (not one lost before: its owners were told)
		o.closed = h.closed
		o.downTo = h.downTo // (let go after it: pay)
		return action{closing: true, do: st.pay(o)}
	}
	return st.drop()
}

// stop ends the holding with cause (its owners' contexts end with it).
func (h *shareHold) stop(cause error) {
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.cancel(cause)
}

// releaseAction takes h out of the holdings and returns the request that gives it back.
func (st *sharedState) releaseAction(h *shareHold) action {
	st.holds = slices.DeleteFunc(st.holds, func(x *shareHold) bool { return x == h })
	h.stop(context.Canceled)
	o := st.letGo(h)
	if front := st.front(); front != nil && !front.try && len(st.holds) == 0 && st.attempt == nil && st.g.done.Err() == nil {
		// its goroutines still want permits (another process waits, or the holding cannot
		// serve them): the process stands in line again as it lets go, in the same request
		a := &shareAttempt{locker: st.g.newLocker(), n: front.n, wait: true, wake: HowRetry}
		front.asked = true
		st.attempt = a
		return action{do: st.payThenTake(o, a)}
	}
	return action{do: st.pay(o)}
}

// owedRelease is a release the driver owes Redis: of a holding let go, whose Unlocks wait on
// fate, or of a locker that may hold in Redis unknown to this process (mayHold).
type owedRelease struct {
	locker    string
	origin    uint64        // the token the holding was taken with, as its renewals name it (0 if unknown)
	last, end uint64        // the tokens it gives back (unused)
	until     time.Time     // a release that failed is owed again until then: what it lets go may live in Redis that long
	retryAt   time.Time     // set when Redis failed it: it goes after any take due, and not before then (reowe)
	urged     bool          // failed before, sent at once for a try it may stand in the way of (payFailedNow)
	byClose   bool          // Close lets go of a holding this process held to the end: a failure is Close's to report
	closed    []*shareOwner // with byClose: the owners Close ended, told of a loss the release finds
	fate      []chan error  // told what became of it
	// downTo is the locker of a downgrade of the holding whose outcome is unknown (Close's),
	// let go once the holding's release is done. A release of the holding found settled (the
	// downgrade ran and replaced it) makes the downgrade's holding the one Close lets go: its
	// release tells closed of a loss it finds before the holding's lease ran out (heldUntil).
	downTo    string
	heldUntil time.Time // a release found gone is a loss only before then (zero: until)
	// tries counts its sends (a release-then-take's too), of which each but the last failed or
	// went unanswered (the warning of a failed one names it)
	tries int
	// failed is the last failure Redis made of it: what its Unlock is told when Close gives up
	// on it before a later try is answered
	failed error
}

// heldBy returns when what o lets go stopped being held by this process's clock: a release
// that finds it gone before then found a loss.
func (o owedRelease) heldBy() time.Time {
	if o.heldUntil.IsZero() {
		return o.until
	}
	return o.heldUntil
}

// letGo returns the release of h, which left the holdings. The caller holds mu.
func (st *sharedState) letGo(h *shareHold) owedRelease {
	last, end := st.unused(h)
	// (Retried for a lease from now, as the mutex's release: a renewal that ran in Redis
	// unanswered keeps the holding there past h.valid, up to its own send and a lease.)
	return owedRelease{locker: h.locker, origin: h.origin, last: last, end: end, until: time.Now().Add(st.cfg.Lease()),
		heldUntil: h.valid, fate: h.takeFate()}
}

// owe adds a release of locker, which may hold in Redis unknown to this process. The caller
// holds mu.
func (st *sharedState) owe(locker string) { st.owed = append(st.owed, st.mayHold(locker)) }

// mayHold returns the release of locker, which may hold in Redis unknown to this process (an
// attempt whose outcome is unknown, a lost holding that a renewal may have kept, a downgrade's
// take): one that fails is owed again for as long as what it lets go may live there (a line
// entry's time to live, at least the lease, since every request of locker was sent before),
// as the mutex's give-back is retried.
func (st *sharedState) mayHold(locker string) owedRelease {
	return owedRelease{locker: locker, until: time.Now().Add(processor.EntryTTL(st.cfg))}
}

// pay returns the request that sends o. One that fails while o's lease lasts is owed again (the
// renewals due go first), as the mutex's release is retried until its lease runs out; else its
// Unlocks are told the outcome: nil, errGone, or the failure (what is left in Redis expires
// with its lease).
func (st *sharedState) pay(o owedRelease) func(ctx context.Context) {
	return func(ctx context.Context) {
		replaced, err := st.release(ctx, &o)
		if st.oweAgain(o, err) {
			st.mu.Lock()
			st.reowe(o, err)
			st.mu.Unlock()
			return
		}
		st.settle(o, replaced, err)
	}
}

// settle ends o, owed no more, with err, the outcome of its last send (replaced: it found the
// holding let go otherwise, by its downgrade): its downgrade's locker is let go next, and its
// Unlocks, Close and the Observer are told.
func (st *sharedState) settle(o owedRelease, replaced bool, err error) {
	if st.cut(err) && st.g.clean.Err() != nil {
		// Close gave up before Redis answered it (perhaps before it was sent again after
		// a failure): said so, as the Unlock that waits for it says it, with the failure
		// Redis made of it before if any — not as the cut request's error
		err = o.failed
		if err == nil {
			err = &RedisProcessError{Op: "release", Key: st.cfg.UniqueKey(), Err: errCloseGaveUp}
		}
	}
	if o.downTo != "" {
		d := st.mayHold(o.downTo)
		if replaced {
			d.byClose, d.closed, d.heldUntil = o.byClose, o.closed, o.heldBy()
		}
		st.mu.Lock()
		st.owed = append(st.owed, d)
		st.mu.Unlock()
	}
	if err != nil && o.byClose && len(o.fate) == 0 && !errors.Is(err, errGone) {
		// (one an Unlock waits for is that Unlock's to report, as the mutex's)
		var pe *RedisProcessError
		if !errors.As(err, &pe) {
			err = &RedisProcessError{Op: "release", Key: st.cfg.UniqueKey(), Err: err}
		}
		st.mu.Lock()
		st.lapsed = append(st.lapsed, err)
		st.mu.Unlock()
	}
	if errors.Is(err, errGone) && len(o.closed) > 0 && time.Now().Before(o.heldBy()) {
		// A loss, as one an Unlock's release finds (an answer after the lease ran out
		// finds the holding expired: no loss): told after the owners' release (ErrClosed).
		st.g.log.Warn("dlock: shared holding lost", zap.String("key", st.cfg.UniqueKey()), zap.String("locker", o.locker), zap.Error(err))
		st.mu.Lock()
		for _, so := range o.closed {
			st.lost = append(st.lost, so.loss(err))
		}
		st.mu.Unlock()
	}
	if err == nil || errors.Is(err, errGone) {
		// permits of this process are free in Redis: a goroutine of it waiting for more
		// than its holdings serve asks now (no release tells it, but it knows of its own)
		st.mu.Lock()
		st.growAt, st.growWake = time.Time{}, HowRetry
		st.mu.Unlock()
	}
	tell(o.fate, err)
}

// oweAgain reports whether o, whose release failed with err (nil: it did not), is owed again:
// until o.until (while what it lets go may live in Redis), or whenever it was cut short
// before its bound and so perhaps never sent — by the driver for a renewal due, or by Close
// (whose clean-up sends it again) — unless no second try changes the answer (it ran and found
// nothing: errGone), nothing of the Generator's was ever sent (nothingSent), or the
// Generator's clean-up is over.
func (st *sharedState) oweAgain(o owedRelease, err error) bool {
	return err != nil && !errors.Is(err, errGone) && !refusedForGood(err) && !st.g.nothingSent(err) && (time.Now().Before(o.until) || st.cut(err)) && st.g.clean.Err() == nil
}

// cut reports whether err says that a request was cut short before its bound, not failed by
// Redis: by the driver for a renewal due (errMakeWay), or by Close.
func (st *sharedState) cut(err error) bool {
	return errors.Is(err, errMakeWay) || (errors.Is(err, context.Canceled) && st.g.done.Err() != nil)
}

// refusedForGood reports whether a request failed in a way no second try changes: the client
// is closed, Redis refuses the request (ACL, WRONGTYPE), or the lock's keys hold another kind
// (ErrInvalidConfig). A release that failed so is not owed again: it would be sent over and
// over until its lease ran out.
func refusedForGood(err error) bool {
	return processor.ClientClosed(err) || processor.Refused(err) || errors.Is(err, ErrInvalidConfig)
}

// unused returns what a release of h gives back: a write-hold's tokens after the last it
// handed out (h.token: its last writer's, or the holding's first, which readers had), up to
// the end of its block, or of its spare one; none (0, 0) for other holdings. The caller holds
// mu.
func (st *sharedState) unused(h *shareHold) (last, end uint64) {
	if st.spec.Kind != processor.KindRW || !h.write() {
		return 0, 0
	}
	if h.spare > 0 {
		return h.token, h.spare + st.g.opts.writeBlock - 1
	}
	return h.token, h.tokEnd
}

// giveBack drops the attempt and returns the request that takes it out of line (and gives
// back a holding it may have taken unheard).
func (st *sharedState) giveBack(a *shareAttempt) action {
	st.attempt = nil
	if !a.sent {
		return action{again: true}
	}
	o := st.mayHold(a.locker)
	return action{do: func(ctx context.Context) {
		if _, err := st.release(ctx, &o); st.oweAgain(o, err) {
			// failed, or cut short (for a renewal due, or by Close) and perhaps never sent:
			// owed, as a holding's release is
			st.mu.Lock()
			st.reowe(o, err)
			st.mu.Unlock()
		}
	}}
}

// payOwed takes the i-th owed release out of owed and returns the action that pays it. The
// caller holds mu.
func (st *sharedState) payOwed(i int) action {
	o := st.owed[i]
	st.owed = slices.Delete(st.owed, i, i+1)
	return action{do: st.pay(o)}
}

// reowe owes o again, whose release failed with err (oweAgain). One cut short (for a renewal
// due, or by Close) goes first again, at once; one that Redis failed goes after any take due,
// so that a release that keeps failing never holds up the takes (a TryLock is one request: it
// would wait for the release's whole lease, and a Lock would give up naming no failure of its
// own), and after a pause: a release that Redis keeps failing is sent at most once a
// retryPause, not at once again and again while nothing else is due. The caller holds mu.
//
// While Redis fails them, the releases it failed go again one a pause between them all, not
// each one a pause (failing, due): a TryLock in a loop on a failing Redis gives back an
// attempt each time, and each give-back is owed for a line entry's life — sent again each on
// its own pause, they were tens of thousands a second after the loop stopped. One that Redis
// answers lets the others go at once (sent). One whose lease ran out meanwhile is settled
// unsent (settleLapsed): what it lets go has expired, and sent each once more, they would go
// all at once, to a Redis that still fails.
func (st *sharedState) reowe(o owedRelease, err error) {
	o.retryAt, o.urged = time.Time{}, false
	if !st.cut(err) {
		o.retryAt = time.Now().Add(retryPause(st.cfg))
	}
	st.owed = append(st.owed, o)
}

// settleLapsed settles, unsent, an owed release that Redis failed and whose life ran out while
// Redis still fails them (reowe), if there is one, for plan and for Close alike: Close would
// otherwise send each such once more, one a pause, and wait a pause for each. The caller holds mu.
func (st *sharedState) settleLapsed(now time.Time) (action, bool) {
	i := slices.IndexFunc(st.owed, func(o owedRelease) bool {
		return o.failed != nil && !o.retryAt.IsZero() && now.After(o.until) && st.failing.After(now)
	})
	if i < 0 {
		return action{}, false
	}
	o := st.owed[i]
	st.owed = slices.Delete(st.owed, i, i+1)
	return action{do: func(context.Context) { st.settle(o, false, o.failed) }}, true
}

// payFailedNow has the owed releases that Redis failed (paused by reowe) and whose holdings
// may still live go at once (urged), and reports whether there was one. One that Redis fails
// again pauses the others again (sent): a Redis that still fails them gets one more, not all.
// The caller holds mu.
func (st *sharedState) payFailedNow(now time.Time) bool {
	paid := false
	for i, o := range st.owed {
		if !o.retryAt.IsZero() && now.Before(o.until) {
			st.owed[i].retryAt, st.owed[i].urged, paid = time.Time{}, true, true
		}
	}
	return paid
}

// due returns when o, owed, may be sent (reowe). The caller holds mu.
func (st *sharedState) due(o owedRelease) time.Time {
	if o.retryAt.IsZero() || o.retryAt.After(st.failing) {
		return o.retryAt // (one cut short goes at once)
	}
	return st.failing
}

// sent records what Redis made of a send of o's release (err: nil if it answered): one it
// failed holds back the others it failed (failing) and is what o's Unlocks are told if Close
// gives up on it (failed); one it answered lets them go. The caller holds mu.
func (st *sharedState) sent(o *owedRelease, err error) {
	switch {
	case err == nil:
		st.failing = time.Time{}
	case redisFault(err):
		o.failed, st.failing = err, time.Now().Add(retryPause(st.cfg))
		for i := range st.owed {
			if st.owed[i].urged { // (payFailedNow's: paused again)
				st.owed[i].retryAt, st.owed[i].urged = st.failing, false
			}
		}
	}
}

// release sends the release of o's locker to Redis once, and counts the send in o.tries: a
// release that Redis failed is owed again (reowe) and goes after any take due, so that a take
// that comes meanwhile (a TryLock is one request) waits for one request of it, not for its
// tries and their pauses. A holding that reserved a block of tokens up to o.end, of which it
// handed out up to o.last, gives back the rest; one taken with the token o.origin is let go
// only as that holding (processor.SharedReleaseOf). It returns errGone when Redis held nothing
// of the locker (removed by force, lost by Redis, or taken anew by a late copy of its take
// after Redis lost it), nil when it let go — also when a copy of this release ran before and
// its reply was lost, or the holding was let go otherwise (Settled), with replaced set when a
// take that replaced the holding (a downgrade) let it go — else the failure.
func (st *sharedState) release(ctx context.Context, o *owedRelease) (replaced bool, err error) {
	o.tries++
	r, err := st.request(ctx, "release", func(ctx context.Context) (processor.SharedResult, error) {
		return st.g.redis.SharedReleaseOf(ctx, st.cfg, st.spec, o.locker, o.origin, o.last, o.end)
	})
	st.mu.Lock()
	st.sent(o, err)
	st.mu.Unlock()
	switch {
	case err == nil && r.Outcome == processor.Gone:
		return false, errGone
	case err == nil:
		return r.Outcome == processor.Settled && r.Replaced, nil // (the script tells: a copy's settled, the processor's own try after a broken connection included, is not a downgrade's)
	case redisFault(err):
		st.g.releaseFailed("dlock: shared release failed", zap.String("key", st.cfg.UniqueKey()), zap.Int("try", o.tries), zap.Error(err))
		st.redisError("release", err)
	}
	return false, err // (else Close ended ctx, or the driver cut it short for a renewal: no failure of Redis's)
}

var errGone = fmt.Errorf("%w: the holding was gone from Redis when let go (removed by ForceRelease, lost by Redis, or expired before the release ran: its renewals got no answer in time, or the process stalled past its lease)", ErrLockLost)

// The causes a holding ends with when it is lost, as the mutex's say them.
var (
	errHoldingLapsed = fmt.Errorf("%w: the lease ran out without a successful renewal", ErrLockLost)
	errHoldingGone   = fmt.Errorf("%w: a renewal found the holding gone from Redis (removed by ForceRelease, lost by Redis, or expired before the renewal ran: a process stalled past its lease)", ErrLockLost)
	// errHoldingOutTaken ends a read-hold whose process was granted the write side: Redis
	// grants it only when nothing else is held.
	errHoldingOutTaken = fmt.Errorf("%w: the holding was gone from Redis when its process was granted the write side (removed by ForceRelease, or lost by Redis)", ErrLockLost)
)

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// growPatience is how long a semaphore process's first waiter waits for the process's own
// permits before the process stands in line for more: half the lease. Its waiters take turns
// on the process's permits, so the first one's wait grows with their number and with a busy
// CPU; at a sixth of the lease (10 ms with the bench's 60 ms lease) processes that each held
// their share stood in line by turns, each telling every holder to give its permits back, and
// the semaphore row ran at a fifth of its speed in most runs (docs/benchmarks.md).
func growPatience(cfg domain.DLockConfig) time.Duration { return cfg.Lease() / 2 }

// requestTimeout bounds each request of the driver: a reply lost (and sent again)
// must not hold up the renewals of the lock's other holdings.
func requestTimeout(cfg domain.DLockConfig) time.Duration {
	return max(cfg.Lease()/3, 10*time.Millisecond)
}

// request runs f, a request of the driver, bounded by ctx even when the client does not honour
// it, as the mutex's requests are (call): f may finish in the background. A request that got no
// answer within its bound is a *RedisProcessError of op (errUnanswered): Redis, or the way to
// it, failed to answer in a third of the lease (or before the next renewal due), whatever error
// the client made of it; a waiter that gives up then names that failure, as the mutex's does.
// A request that the driver cut short so that a renewal due goes first (errMakeWay) is no
// failure of Redis's: it matches errMakeWay, and its request is sent again after the renewal.
func (st *sharedState) request(ctx context.Context, op string, f func(context.Context) (processor.SharedResult, error)) (processor.SharedResult, error) {
	return st.requestUnless(ctx, nil, op, f)
}

// requestUnless is request dropped unsent at the gate when drop is closed (callUnless).
func (st *sharedState) requestUnless(ctx context.Context, drop <-chan struct{}, op string, f func(context.Context) (processor.SharedResult, error)) (processor.SharedResult, error) {
	r, err := callUnless(st.g, ctx, drop, f)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && unanswered(err) {
		if errors.Is(context.Cause(ctx), errMakeWay) {
			if errors.Is(err, errNotSent) { // (cut at the gate: nothing to give back)
				return r, fmt.Errorf("%w: %w", errMakeWay, errNotSent)
			}
			return r, errMakeWay
		}
		cause := fmt.Errorf("%w (%v, a third of the %v lease)", errUnanswered, requestTimeout(st.cfg), st.cfg.Lease())
		if errors.Is(err, errNotSent) {
			cause = fmt.Errorf("%w: %w", cause, errNotSent)
		}
		err = &RedisProcessError{Op: op, Key: st.cfg.UniqueKey(), Err: cause}
	}
	return r, err
}

// unanswered reports whether err, a request's failure once its bound passed, is what the bound
// made of it (the context's error, a timeout): not an answer or a failure that came before.
func unanswered(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

var (
	// errUnanswered says that a request of the driver got no answer within its bound; it may
	// still run in Redis.
	errUnanswered = errors.New("no answer within the request's bound")
	// errMakeWay says that the driver cut a request short, before its bound, for a renewal
	// due; it may still run in Redis.
	errMakeWay = errors.New("dlock: request cut short for a renewal due")
)

// retryPause is how long a request that Redis failed waits before it is sent again.
func retryPause(cfg domain.DLockConfig) time.Duration {
	return min(cfg.Lease()/10, 50*time.Millisecond)
}

// newHold records a holding of n permits taken at sent, with the block of fencing tokens from
// token.
func (st *sharedState) newHold(locker string, n int64, token uint64, sent time.Time) *shareHold {
	h := &shareHold{locker: locker, n: n, token: token, origin: token, next: token, tokEnd: token + uint64(st.tokens(n)) - 1, fresh: true}
	h.ctx, h.cancelCtx = context.WithCancelCause(context.Background())
	st.renewed(h, sent)
	return h
}

// renewed counts h's lease from sent, the send time of a request that found it held, less the
// drift allowance. The next renewal is due a quarter of the lease before that end, as the
// mutex's (three quarters of the lease less the allowance: at 30 ms, 7.5 ms before the lease
// runs out by this process's clock, not 5.2), or at once when the channel was subscribed
// again after sent (a W may have gone unheard after the request ran). The caller holds mu.
func (st *sharedState) renewed(h *shareHold, sent time.Time) {
	h.answer()
	h.lapse.Store(nil)
	lease := st.cfg.Lease()
	h.valid = domain.HeldUntil(sent, lease) // (the drift allowance, as the mutex's tenure)
	h.renewAt = h.valid.Add(-lease / 4)
	if st.subAt.After(sent) || h.check {
		h.renewAt = time.Now()
	}
	if h.expiry != nil {
		h.expiry.Stop()
	}
	h.expiry = time.AfterFunc(time.Until(h.valid), func() {
		h.cancel(st.lapsedCause(h)) // not renewed in time: lost before anyone else can get in
		st.poke()
	})
}

// lapsedCause is the cause h ends with when its lease runs out unrenewed: errHoldingLapsed,
// with the last renewal's failure since one was answered, or that the renewal on its way got
// no answer (and the Generator's last failure to reach Redis since it was sent), as the
// mutex's loss says. It takes no lock (h's expiry timer calls it).
func (st *sharedState) lapsedCause(h *shareHold) error {
	if p := h.lapse.Load(); p != nil {
		return *p
	}
	if ns := h.renewing.Load(); ns != 0 {
		sent := time.Unix(0, ns)
		return st.g.faultSince(fmt.Errorf("%w: the renewal sent %v before: %w", errHoldingLapsed, time.Since(sent).Round(time.Millisecond), errUnanswered), sent)
	}
	return errHoldingLapsed
}

// answer tells those waiting for h's next renewal (freshen) that one was answered. The
// caller holds mu.
func (h *shareHold) answer() {
	for _, c := range h.answered {
		close(c)
	}
	h.answered = nil
}

// freshen renews h at once and waits for the answer (or for h to end, at the latest as its
// lease runs out, or for ctx to end): a MultiLock's part taken before the last, whose lease
// the wait for the later parts used up, is renewed before Lock returns, as a mutex part is,
// and a write-hold before a downgrade lends its read side. It returns nil when h has half its
// lease left after the renewal, else why not.
func (st *sharedState) freshen(ctx context.Context, h *shareHold) error {
	if err := st.nextAnswer(ctx, h, true); err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stale(h, time.Now()) {
		var failed *RedisProcessError
		if p := h.lapse.Load(); p != nil && errors.As(*p, &failed) { // (the renewal failed: why)
			return fmt.Errorf("%w: %s: %w", errLateReply, st.cfg.UniqueKey(), failed)
		}
		return fmt.Errorf("%w: %s", errLateReply, st.cfg.UniqueKey()) // (its reply came late)
	}
	return nil
}

// nextAnswer waits for the answer of h's next renewal or downgrade — asked for at once when
// now is set — or for h to end, or ctx. It returns why h ended, ctx's error, or nil.
func (st *sharedState) nextAnswer(ctx context.Context, h *shareHold, now bool) error {
	st.mu.Lock()
	if h.ctx.Err() != nil {
		st.mu.Unlock()
		return context.Cause(h.ctx)
	}
	answered := make(chan struct{})
	h.answered = append(h.answered, answered)
	if t := time.Now(); now && h.renewAt.After(t) {
		h.renewAt = t
	}
	st.mu.Unlock()
	st.poke()
	select {
	case <-answered:
	case <-h.ctx.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if h.ctx.Err() != nil {
		return context.Cause(h.ctx)
	}
	return nil
}

// left returns how long h counts itself held still. The caller does not hold mu.
func (st *sharedState) left(h *shareHold) (time.Duration, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if h.ctx.Err() != nil {
		return 0, context.Cause(h.ctx)
	}
	return time.Until(h.valid), nil
}

// take returns the request that asks for a's permits.
func (st *sharedState) take(a *shareAttempt) func(ctx context.Context) {
	w, f, how, claim := st.heardW, st.heardF, a.wake, st.hearing // (the caller holds mu)
	return func(ctx context.Context) {
		drop := make(chan struct{})
		st.mu.Lock()
		a.drop = drop
		st.unwantedLocked() // (its waiter may have left since the plan)
		st.mu.Unlock()
		sent := time.Now()
		r, err := st.requestUnless(ctx, drop, "take", func(ctx context.Context) (processor.SharedResult, error) {
			return st.g.redis.SharedTake(ctx, st.cfg, st.spec, processor.TakeRequest{Locker: a.locker, N: a.n, Wait: a.wait, Listening: claim.on, Tokens: st.tokens(a.n)})
		})
		st.mu.Lock()
		defer st.mu.Unlock()
		a.drop = nil
		st.took(a, r, err, sent, w, f, how, claim)
	}
}

// took applies the answer to a's take, sent at sent when the W and F counts were w and f,
// for the reason how, saying claimed of the process (hearing.answered). The caller holds mu.
func (st *sharedState) took(a *shareAttempt, r processor.SharedResult, err error, sent time.Time, w, f uint64, how How, claimed hearing) {
	a.sent = a.sent || !processor.Unsent(err) && !errors.Is(err, errNotSent) // (one that failed before it was sent: nothing to give back)
	if st.attempt != a {
		return
	}
	if err == nil || answered(err) {
		a.unanswered = time.Time{}
	}
	if err == nil {
		st.faultLocked(nil, nil) // Redis answered: a failure before is over
	}
	if err == nil && r.Outcome == processor.Held && r.Rank >= 0 { // (it stands in line: the answer tells whether Redis hears it)
		st.hearing.answered(claimed, r.Heard)
	}
	lease := st.cfg.Lease()
	switch {
	case err != nil && errors.Is(err, ErrInvalidConfig):
		st.attempt = nil
		if a.serves(st.front()) { // (another waiter asks for itself)
			st.fail(err)
		}
	case errors.Is(err, errMakeWay):
		a.pollAt = time.Time{} // sent again once the renewal is done (a copy that ran answers the same)
	case errors.Is(err, errUnwanted):
		// dropped at the gate, as its waiters left (unwantedLocked): no failure of Redis's;
		// the next plan gives the attempt up (sent before, it is given back)
	case err != nil:
		st.redisError("take", err)
		if !answered(err) {
			if a.unanswered.IsZero() {
				a.unanswered = sent
			}
			a.abandoned = time.Since(a.unanswered) >= lease
		}
		front := st.front()
		switch {
		case front != nil && front.try && a.serves(front):
			st.waiters = st.waiters[1:]
			if st.g.done.Err() != nil && errors.Is(err, context.Canceled) {
				err = ErrClosed // Close cut the request short (as the mutex's TryLock says)
			}
			front.err = err
			close(front.done)
			return // the next plan gives the attempt back (its outcome is unknown)
		case processor.ClientClosed(err), processor.Refused(err):
			// as the mutex's Lock: no later request can be sent, or succeed, so the wait
			// ends now (and nothing was sent to give back, or taken)
			st.attempt = nil
			st.fail(fmt.Errorf("%w: %w", ErrNotObtained, err))
			return
		default:
			// every waiter waits behind this process's attempt: its failure is theirs, and a
			// Lock that gives up names it (not only the front's, which the attempt asked for)
			st.faultLocked(err, nil)
		}
		a.pollAt = time.Now().Add(retryPause(st.cfg))
		a.woken(HowRetry)
	case r.Outcome == processor.Taken && a.locker == st.forced:
		// An operator's ForceRelease in this Generator removed the holding as this answer
		// came: nothing to lend; the waiters ask again, with a new attempt.
		st.attempt, st.forced = nil, ""
	case r.Outcome == processor.Taken:
		st.attempt = nil
		st.wanted = r.Waiting || st.heardW != w
		if st.spec.Kind == processor.KindRW && a.n == processor.RWPermits {
			// Redis grants a write-hold only when nothing else is held: a read-hold of this
			// process still believed held (its writer stood in line behind it) was removed
			// (an operator's ForceRelease elsewhere, or lost by Redis). Its readers end now,
			// not beside the writer until its next renewal.
			for _, h := range st.holds {
				if h.ctx.Err() == nil {
					st.g.log.Warn("dlock: shared holding lost", zap.String("key", st.cfg.UniqueKey()), zap.String("locker", h.locker))
					h.stop(errHoldingOutTaken)
				}
			}
		}
		if st.spec.Kind == processor.KindSem {
			// more permits in this process than its count: a holding of it was removed (an
			// operator's ForceRelease elsewhere, or lost by Redis) — or another process raised
			// the count. Its holdings renew now, and learn which, not three quarters of a
			// lease on.
			held, now := a.n, time.Now()
			for _, h := range st.holds {
				if h.ctx.Err() == nil {
					held += h.n
				}
			}
			for _, h := range st.holds {
				if held > st.spec.Permits && h.ctx.Err() == nil && h.renewAt.After(now) {
					h.renewAt = now
				}
			}
		}
		h := st.newHold(a.locker, a.n, r.Token, sent)
		h.how = how
		if st.forces.hold(a.locker) { // (a ForceRelease here on its way, or whose answer did not say it removed it: ask Redis at once)
			h.check, h.renewAt = true, time.Now()
		}
		st.holds = append(st.holds, h)
		st.lendLocked()
	case r.Outcome == processor.Held && !a.wait:
		st.attempt = nil
		st.heldAnswer(r, w)
		if !a.try && st.heardF == f {
			st.growAt, st.growWake, st.growN = time.Now().Add(lease/6), HowPolled, a.n // no room to grow: ask again later
		} else if front := st.front(); front != nil && front.try && a.serves(front) {
			if !front.again && st.payFailedNow(time.Now()) {
				// The key may be held by what this process gives back (earlier tries' attempts
				// whose releases Redis failed, paused by reowe): those releases go now, before
				// any take (planOther), and the try asks once more after them, as a mutex's
				// TryLock does (ownHeld).
				front.again = true
			} else {
				st.waiters = st.waiters[1:]
				close(front.done)
			}
		}
	case r.Outcome == processor.Held:
		st.heldAnswer(r, w)
		// (first or further back: those before it may have died with the holder, and nobody
		// would tell it, so it asks once the first holding may have expired; further back than
		// second, not sooner than backPace, as a mutex's: a holder's renewals of a short lease
		// would have every process in line ask at their pace)
		pace := lease / 6
		if r.Life >= 0 {
			life := r.Life + time.Millisecond
			if r.Rank > 1 {
				life = max(life, backPace)
			}
			pace = min(pace, life)
		}
		a.woken(HowPolled)
		if st.heardF != f {
			pace = 0 // told the permits fit after this request was sent
			a.woken(HowNotified)
		}
		a.pollAt = time.Now().Add(pace)
	default: // settled: a fresh attempt next
		st.attempt = nil
	}
}

// payThenTake returns the request that sends o and, in the same script, a's take with wait
// (processor.SharedReleaseThenTake): the process stands in line again as it lets go. Each half's
// answer goes where its own request's would; when the request fails, o is owed again and a's
// take goes again, each on its own (a copy of either that ran answers the same) — but for a
// release that ran and a take that then failed (its permits above a lowered k): o's Unlocks
// are told the release's outcome, and only the take's failure is the take's.
func (st *sharedState) payThenTake(o owedRelease, a *shareAttempt) func(ctx context.Context) {
	w, f, how, claim := st.heardW, st.heardF, a.wake, st.hearing // (the caller holds mu)
	return func(ctx context.Context) {
		sent := time.Now()
		o.tries++
		r, err := st.request(ctx, "take", func(ctx context.Context) (processor.SharedResult, error) {
			return st.g.redis.SharedReleaseThenTake(ctx, st.cfg, st.spec, o.locker, o.origin, o.last, o.end,
				processor.TakeRequest{Locker: a.locker, N: a.n, Listening: claim.on, Tokens: st.tokens(a.n)})
		})
		var fate error
		switch {
		case r.Let == processor.Gone:
			fate = errGone
		case r.Let == 0: // the release did not run, or its outcome is unknown
			fate = err
			if pe := (*RedisProcessError)(nil); errors.As(err, &pe) && pe.Op == "take" {
				fate = &RedisProcessError{Op: "release", Key: pe.Key, Err: pe.Err} // (the Unlock's is the release's half)
			}
		}
		st.mu.Lock()
		if r.Let != 0 { // (the release ran)
			st.sent(&o, nil)
		} else {
			st.sent(&o, err)
		}
		owed := r.Let == 0 && st.oweAgain(o, err)
		if owed {
			st.reowe(o, err)
		}
		st.took(a, r, err, sent, w, f, how, claim)
		st.mu.Unlock()
		if !owed {
			tell(o.fate, fate)
		}
	}
}

// heldAnswer takes what a take's Held answer says of the line (r.Waiting) as the notice that
// another process waits (wanted), as Taken and Renewed answers do, unless a W came after the
// request was sent (w, the W count then): a W that a waiter left behind (it gave up, or died),
// or a lowered count raised back, no longer keeps the process's holdings from lending. The
// caller holds mu.
func (st *sharedState) heldAnswer(r processor.SharedResult, w uint64) {
	if st.wanted = r.Waiting || st.heardW != w; !st.wanted {
		st.lendLocked()
	}
}

// redisError tells the Observer that a request of op (take, renew or release: RedisOps)
// failed with err, unless Close cancelled it (not Redis failing), as the mutex's requests are
// told: with the failure itself, not the *RedisProcessError that wraps it. It reports whether
// it told.
func (st *sharedState) redisError(op string, err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	if pe := (*RedisProcessError)(nil); errors.As(err, &pe) {
		err = pe.Err
	}
	st.g.observer.RedisError(RedisErrorEvent{Op: op, Key: st.cfg.UniqueKey(), Err: err})
	return true
}

// fail ends the front waiter with err (a request Redis refused for what it asks, or a client
// closed: no request can be sent).
func (st *sharedState) fail(err error) {
	if front := st.front(); front != nil {
		st.waiters = st.waiters[1:]
		front.err = err
		close(front.done)
	}
}

// mustRefill reports whether the write-hold h has handed out half its block of tokens, with no
// spare one, while a writer of this process waits, nobody waits elsewhere and no refill failed
// lately: it renews with a spare block, rather than going back and being taken again once the
// block is used up. The caller holds mu.
func (st *sharedState) mustRefill(h *shareHold, now time.Time) bool {
	return st.spec.Kind == processor.KindRW && h.write() && h.spare == 0 && h.next+st.g.opts.writeBlock/2 > h.tokEnd+1 && h.ctx.Err() == nil &&
		h.downTo == "" && !h.downing && !st.wanted && !now.Before(h.refillAt) &&
		slices.ContainsFunc(st.waiters, func(x *shareWaiter) bool { return x.write })
}

// refill returns the request that renews the write-hold h with a new block of tokens.
func (st *sharedState) refill(h *shareHold) func(ctx context.Context) {
	locker, origin := h.locker, h.origin
	h.check = false                     // (the caller holds mu)
	owed := st.forces[locker].owedNow() // (the forces answered before it is sent: checked if it renews)
	w := st.heardW                      // (the caller holds mu)
	return func(ctx context.Context) {
		sent := time.Now()
		r, err := st.request(ctx, "renew", func(ctx context.Context) (processor.SharedResult, error) {
			return st.g.redis.SharedRenewOf(ctx, st.cfg, st.spec, locker, origin, int(st.g.opts.writeBlock))
		})
		st.mu.Lock()
		defer st.mu.Unlock()
		switch {
		case h.ctx.Err() != nil || h.locker != locker:
		case err != nil:
			h.refillAt = time.Now().Add(retryPause(st.cfg)) // (meanwhile it goes back once idle)
			st.redisError("renew", err)
		case r.Outcome == processor.Renewed:
			if h.spare = r.Token; r.Token == 0 { // (a script that reserves none: no refill for a lease)
				h.refillAt = time.Now().Add(st.cfg.Lease())
			}
			st.forces.checked(locker, owed)
			st.renewed(h, sent)
			st.wanted = r.Waiting || st.heardW != w
			st.lendLocked()
		default:
			st.g.log.Warn("dlock: shared holding lost", zap.String("key", st.cfg.UniqueKey()), zap.String("locker", locker))
			h.stop(errHoldingGone)
		}
	}
}

// renew returns the request that renews h.
func (st *sharedState) renew(h *shareHold) func(ctx context.Context) {
	locker, origin := h.locker, h.origin
	h.check = false                     // (the caller holds mu)
	owed := st.forces[locker].owedNow() // (as refill's)
	w := st.heardW                      // (the caller holds mu)
	return func(ctx context.Context) {
		sent := time.Now()
		h.renewing.Store(sent.UnixNano())
		r, err := st.request(ctx, "renew", func(ctx context.Context) (processor.SharedResult, error) {
			return st.g.redis.SharedRenewOf(ctx, st.cfg, st.spec, locker, origin, 0)
		})
		st.mu.Lock()
		defer st.mu.Unlock()
		h.renewing.CompareAndSwap(sent.UnixNano(), 0)
		defer h.answer()                         // (whatever it found)
		h.soonest = sent.Add(st.cfg.Lease() / 4) // (for a waiter, no renewal right after another)
		lapsed := errors.Is(context.Cause(h.ctx), errHoldingLapsed)
		switch {
		case err != nil && h.locker == locker && (h.ctx.Err() == nil || lapsed):
			// (told also when the lease ran out meanwhile: a Redis that stops answering made
			// losses with no RenewalFailed before them)
			if !lapsed {
				h.renewAt = time.Now().Add(retryPause(st.cfg))
			}
			if st.redisError("renew", err) {
				cause := fmt.Errorf("%w: %w", errHoldingLapsed, st.g.renewalFault(err, sent)) // (a lease that runs out now says why, as the mutex's)
				h.lapse.Store(&cause)
				st.g.observer.RenewalFailed(RenewalEvent{Config: st.cfg, Err: err})
				// the waiters it would serve once renewed (stale) wait on it: its failure
				// is theirs, as a take's is (a Lock that gives up names it)
				st.faultLocked(err, h)
			}
		case h.ctx.Err() != nil || h.locker != locker:
		case r.Outcome == processor.Renewed:
			st.faultLocked(nil, nil)
			st.forces.checked(locker, owed)
			st.renewed(h, sent)
			st.wanted = r.Waiting || st.heardW != w
		default:
			st.g.log.Warn("dlock: shared holding lost", zap.String("key", st.cfg.UniqueKey()), zap.String("locker", locker))
			h.stop(errHoldingGone)
		}
	}
}

// shrinkTo returns the permits that h, in use, is to keep in Redis in place of all it holds
// (0: all). Its owners may keep what they borrow for as long as they like, perhaps until a
// waiter of another process gets in, so what they do not use goes back whenever it may serve
// one: a write-hold that only readers borrow becomes a read-hold (a downgrade), unless a
// writer of this process waits for it and nobody waits elsewhere (wanted, it lends to no new
// writer); a semaphore's holding keeps the permits it lends once another process waits, or a
// waiter of this process that no holding serves (starved). The caller holds mu.
func (st *sharedState) shrinkTo(h *shareHold, now time.Time) int64 {
	if h.ctx.Err() != nil || h.idle() || now.Before(h.downAt) {
		return 0
	}
	switch {
	case st.spec.Kind == processor.KindRW:
		if h.write() && h.writers == 0 && (st.wanted || !slices.ContainsFunc(st.waiters, func(x *shareWaiter) bool { return x.write })) {
			return 1
		}
	case h.lent < h.n && (st.wanted || st.starved()):
		return h.lent
	}
	return 0
}

// writeLetGo waits, after a writer's final Unlock left h lent to the readers of its downgrade,
// until h holds only the read side in Redis (its downgrade was answered: shrinkTo), or shrinkTo
// keeps the write side for a writer of this process, or h ended, or gaveUp or the Generator's
// clean-up did. It asks nothing itself: the driver sends the downgrade.
func (st *sharedState) writeLetGo(h *shareHold, gaveUp <-chan struct{}) {
	for {
		st.mu.Lock()
		if h.ctx.Err() != nil || !h.write() || h.writers > 0 || h.idle() || (h.downTo == "" && st.shrinkTo(h, time.Now()) == 0) {
			st.mu.Unlock()
			return
		}
		answered := make(chan struct{})
		h.answered = append(h.answered, answered)
		st.mu.Unlock()
		select { // (the Unlock poked the driver; it wakes itself for a downgrade's retry: downAt)
		case <-answered:
		case <-h.ctx.Done():
		case <-gaveUp:
			return
		case <-st.g.clean.Done():
			return
		}
	}
}

// starved reports whether this process's front waiter (one that waits: not a try) is served
// by none of its holdings, however fresh: what a holding keeps beyond what it lends may be
// just what that waiter needs from Redis. The caller holds mu.
func (st *sharedState) starved() bool {
	w := st.front()
	return w != nil && !w.try && st.holdFor(w, time.Time{}) == nil
}

// downgrade returns the request that replaces h, in use, with a holding of h.downN permits
// under h.downTo, in one step: nobody can come between. h lends to nobody new until its
// outcome is known.
func (st *sharedState) downgrade(h *shareHold) func(ctx context.Context) {
	old, origin, locker, n := h.locker, h.origin, h.downTo, h.downN
	h.downing = true
	w := st.heardW // (the caller holds mu)
	last, end := st.unused(h)
	return func(ctx context.Context) {
		sent := time.Now()
		r, err := st.request(ctx, "take", func(ctx context.Context) (processor.SharedResult, error) {
			return st.g.redis.SharedTake(ctx, st.cfg, st.spec, processor.TakeRequest{Locker: locker, N: n, Replaces: old, Origin: origin, Last: last, BlockEnd: end})
		})
		st.mu.Lock()
		defer st.mu.Unlock()
		defer h.answer() // (whatever it found: h is not renewed otherwise while its downgrade is unresolved)
		switch {
		case h.locker != old:
		case err != nil:
			// its outcome unknown: the same request goes again (a copy that ran answers the
			// same holding); no writer borrows h meanwhile
			h.downAt = time.Now().Add(retryPause(st.cfg))
			if h.ctx.Err() != nil {
				st.owe(locker) // lost meanwhile: give back what may have been taken
			}
		case r.Outcome == processor.Taken && h.ctx.Err() == nil:
			h.locker, h.n, h.token, h.origin, h.downTo, h.downing = locker, n, r.Token, r.Token, "", false // (next, tokEnd and spare are a write-hold's)
			// what it gave back is free in Redis: a goroutine of this process waiting for more
			// than its holdings serve asks now, as after a release of its own (pay)
			st.growAt, st.growWake = time.Time{}, HowRetry
			st.renewed(h, sent)
			st.wanted = r.Waiting || st.heardW != w
			st.lendLocked()
		case r.Outcome == processor.Taken:
			st.owe(locker)
		default:
			h.downTo, h.downing = "", false
			h.stop(errHoldingGone) // the holding was gone already (under any count)
		}
	}
}
