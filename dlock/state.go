package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
//	idle ──ask──▶ asking ──taken──▶ free ──take──▶ held ──unlock (local waiters)──▶ free
//	  ▲  ◀─held/unknown─┘                            │
//	  │ ◀── grant heard (the key is this process's) ─┼─▶ free
//	  └──────────────── releasing ◀── unlock (no local waiter, or no passes) ┘
//	                    renewing ◀── take (renew first: lease, tokens, half the lease, hand-off limit)
//	                       ├─renewed──▶ held
//	                       └─yielded──▶ idle (in line again)
//
// A loss (renewal found the key gone or taken, the lease ran out, ForceRelease here) moves
// held, free and renewing to idle at once; Close releases what is held.
type phase uint8

const (
	// idle: this process does not hold the key and nobody asks Redis for it. Goroutines may
	// wait: then the process has an open attempt, stands in the key's line in Redis and
	// watches for its grant.
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
// hand-off limit: the key is then granted to the first process in the Redis line.
//
// Rules kept here (the phase machine above is their mechanism):
//   - At most one goroutine talks to Redis about the key at a time (phases asking, renewing,
//     releasing), so a goroutine that finds another doing so waits in the queue without a
//     round trip. Exclusion does not rest on this: it rests on Redis, where each tenure holds
//     its own locker.
//   - A pass never starts with less than half the taker's lease left, nor on another lease
//     than the taker's, nor after the hand-off limit while another process waits, nor
//     without a token: it renews first (phase renewing).
//   - No pass after a loss: a lost tenure leaves the phase at once (loseLocked), before the
//     holder is told.
//   - Wake-ups are counted in epoch: every "the key may be this process's" signal adds one and
//     wakes the first waiter; a waiter that failed in Redis asks again only after the epoch
//     moved, and one that failed while a signal arrived passes the wake-up on, so signals are
//     neither lost nor turned into extra round trips.
type lockState struct {
	g       *Generator
	cfg     domain.DLockConfig // of the handle that brought the state into use: poll timing, line entries
	channel string             // this process's release channel of the key
	key     any                // ownerKey{g, the unique key}, boxed once: the key of its holdings in their owner contexts
	refs    int                // holdings, tenure, waiters and background jobs; guarded by g.mu

	q      queue.Queue // the goroutines that wait, lock-free
	poller *threads.Poller

	mu       sync.Mutex // guards every field below
	phase    phase
	ten      *tenure  // held, free, renewing, releasing
	owner    *holding // held
	epoch    uint64
	wokenBy  How    // what sent the latest signal
	line     line   // this process's place in the Redis line
	forced   string // the locker ForceRelease in this Generator last removed, or that a message said was let go as it was being taken
	asking   string // the locker of the lock.lua in flight (phase asking)
	barging  int    // goroutines in Lock or TryLock that have not queued (yet): they may take a grant
	retrying bool   // a retry after a Redis failure is due (retryLaterLocked)
	forces   forces // ForceRelease calls here of this process's lockers: no pass meanwhile
	// unreleased counts the releases retried in the background (retryReleaseLocked) whose
	// first try is on its way: the line is left after it, not beside it (settleLocked).
	unreleased int
	// retried holds the holdings of such retries while they go on, oldest first: every request
	// of the process meanwhile names them (processor.Unreleased), so that one that settles one
	// does not hide a removal of the key that a later try of its retry would have found
	// (answered settled). A request carries a copy (unreleasedLocked).
	retried []processor.Unreleased
	// failing is when the last try of a give-back that Redis failed went or failed (zero once
	// Redis answers one), and answered is closed when Redis answers one (retryWait).
	failing  time.Time
	answered chan struct{}
	// relock says that goroutines of this process take the key again at once after it lets
	// it go (a Lock came within relockWindow of the last release, relockBy): an Unlock that
	// grants the key to another process then stands in line again in the same script, so
	// that the next Lock waits for its grant without a request (line.lingering). It turns
	// off when no goroutine came for such a place in line.
	relock   bool
	relockBy time.Time
	// holdOverBy is when an Unlock may keep the tenure for a goroutine that comes back again
	// (WithHoldOver): holdOverPause after a hold-over no goroutine came for.
	holdOverBy time.Time
	slow       bool // a renewal before a take took more than half the lease (warned once)
	far        bool // an attempt had no answer for a lease and was given back (warned once)
	// fault is the last Redis failure of an ask or renewal to take (answered since, or a
	// tenure begun: nil), and faultAt when it came: a goroutine that gives up names it if it
	// came after the goroutine did — its own ask's, or one it waited behind in the queue
	// (Lock's doc).
	fault   error
	faultAt time.Time
}

func newLockState(g *Generator, cfg domain.DLockConfig) *lockState {
	st := &lockState{g: g, cfg: cfg, channel: processor.ProcessChannel(cfg, g.prefix), key: ownerKey{g, cfg.UniqueKey()}}
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

// errLateReply reports a request whose reply did not come (or came late) before its lease ran
// out.
var errLateReply = errors.New("no reply came before the lease ran out")

// step is what a goroutine that may take the lock does next, decided under mu.
type step uint8

const (
	stepWait  step = iota // park until woken
	stepTaken             // h is the new owner
	stepAsk               // ask Redis (phase asking is ours)
	stepRenew             // renew the tenure before taking it (phase renewing is ours)
)

// next decides, under mu, what a goroutine wanting the lock with cfg does: take a free
// tenure (or renew it first), ask Redis if the key may be this process's, or wait. tried and
// triedAt say whether, and at which epoch, this goroutine last failed in Redis; wait, that
// it waits (Lock) rather than tries (TryLock).
func (st *lockState) next(ctx context.Context, cfg domain.DLockConfig, tried bool, triedAt uint64, wait bool) (step, *holding, uint64) {
	switch st.phase {
	case free:
		if st.forces.hold(st.ten.entity.Locker) {
			break // (a ForceRelease of this process may have removed it: forces)
		}
		if !st.ten.mustRenew(cfg) {
			return stepTaken, st.take(ctx, cfg), st.epoch
		}
		if !tried || st.epoch != triedAt {
			st.phase = renewing
			return stepRenew, nil, st.epoch
		}
	case idle:
		if wait && st.line.attempt != nil && st.line.quiet == st.epoch+1 {
			break // a release just put this process in line: it waits for the grant (a TryLock asks: it may have come)
		}
		if (!tried || st.epoch != triedAt) && !time.Now().Before(st.line.gapUntil) {
			st.phase = asking
			return stepAsk, nil, st.epoch
		}
	}
	return stepWait, nil, st.epoch
}

// acquire takes the lock for an acquisition made with cfg (its handle's lease), waiting if
// wait is set. It is one loop: the first pass is the barge (no place in the queue yet, when
// the queue may be passed), the others wait their turn in the queue. held reports a TryLock
// that found the lock held, here or elsewhere. The caller holds a reference to st.
func (st *lockState) acquire(ctx context.Context, cfg domain.DLockConfig, wait bool) (h *holding, held bool, err error) {
	start := time.Now()
	var (
		n       *queue.Node // this goroutine's place in the queue; nil while it barges
		tried   bool        // this goroutine failed in Redis ...
		triedAt uint64      // ... at this epoch
		lastErr error       // the last Redis failure
		again   bool        // a TryLock asked again after a give-back of this process (ownHeld)
		woken   bool        // a wake-up was taken from the permit and not yet acted on
		wctx    = ctx       // the wait and its requests, which a Close ends too ...
		unbind  func()      // ... once made (a pass within the process makes none)
	)
	// However it returns (the lock, a TryLock's "held", giving up), once nobody here waits the
	// retry poller stops: it ran for this goroutine or for others that left, and its timer
	// would hold the state (and the Generator) until it fires, after the state is dropped and
	// after Close. (Run last, after the barge's settle; outside mu: the poller's lock comes
	// first.)
	defer st.poller.StopIdle()
	st.mu.Lock()
	lingered := st.line.lingering
	st.endLingerLocked(false) // (the caller holds a reference to st)
	if !st.relock && st.ten == nil && time.Now().Before(st.relockBy) {
		st.relock = true
	}
	barge := st.mayBarge()
	how := HowAttempt
	if st.q.HasWaiters() {
		how = HowBarge
	}
	if barge {
		st.barging++
	}
	st.mu.Unlock()
	if !barge && !wait {
		// A TryLock goes before no queued goroutine that may not be passed (WithFIFO, or
		// the first has waited over the starvation guard): the lock is held here.
		return nil, true, nil
	}
	barging := barge // counted in st.barging until it queues or returns
	if barging {
		// (A TryLock that ended the linger and found the key held keeps the place in line
		// for a Lock that follows: it lingers again.)
		defer func() { st.unbarge(&barging, lingered && held) }()
	}
	bind := func() {
		if unbind == nil {
			wctx, unbind = st.g.closable(ctx)
		}
	}
	defer func() {
		if unbind != nil {
			unbind()
		}
	}()
	for {
		if n == nil && !barge {
			// Wait in the queue from now on.
			bind()
			n = queue.NewNode()
			n.Lease = cfg.Lease()
			st.q.Enqueue(n)
			st.unbarge(&barging, false)
		}
		if wctx.Err() != nil {
			break
		}
		if n == nil || st.q.IsFirst(n) {
			st.mu.Lock()
			s, h, e := st.next(wctx, cfg, tried, triedAt, wait)
			if n != nil {
				how = st.wokenBy
			}
			if s == stepTaken && barging { // (held: nothing to settle)
				st.barging--
				barging = false
			}
			t := st.ten
			st.mu.Unlock()
			if s == stepTaken {
				return st.won(n, h), false, nil
			}
			if s != stepWait {
				bind()
				h, err := st.act(wctx, s, cfg, wait, e, t, &lastErr)
				if h != nil {
					if s != stepRenew { // (a renewal's take says how it came)
						h.how = how
					}
					return st.won(n, h), false, nil
				}
				if !wait {
					if back := (*ownHeld)(nil); errors.As(err, &back) {
						if !again { // the key is given back: ask once more after it
							again = true
							select {
							case <-back.done:
							case <-wctx.Done():
							}
							continue
						}
						err = nil
					}
					if err != nil && st.g.done.Err() != nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
						return nil, false, ErrClosed // Close, not the caller's context, cut it short
					}
					return nil, err == nil, err // held elsewhere (or the tenure moved on as we renewed it)
				}
				if processor.ClientClosed(err) || processor.Refused(err) {
					break // no later attempt can be sent, or succeed
				}
				tried, triedAt, woken = true, e, false // wait for news before asking or renewing again
				barge = false
				continue // the context may have ended meanwhile, or the phase moved on
			}
		}
		if n == nil { // the phase is busy: the barge is over
			if !wait {
				return nil, true, nil
			}
			barge = false
			continue
		}
		st.watch()
		if n.Park(wctx) != nil {
			break
		}
		woken = true
	}
	if n != nil {
		st.q.Cancel(n, woken)
	}
	st.left()
	switch {
	case processor.ClientClosed(lastErr), processor.Refused(lastErr):
		return nil, false, fmt.Errorf("%w: %w", ErrNotObtained, lastErr)
	case ctx.Err() == nil:
		return nil, false, ErrClosed
	}
	// The last failure of the process's asks since it came (its own, or of those it waited
	// behind), unless Redis answered one since: then none (st.fault, which act keeps).
	if redisFault(lastErr) {
		lastErr = nil
	}
	st.mu.Lock()
	if st.fault != nil && st.faultAt.After(start) {
		lastErr = st.fault
	}
	st.mu.Unlock()
	return nil, false, st.g.faultSince(notObtained(ctx.Err(), lastErr), start)
}

// unbarge ends a barge that *barging says is still counted: the goroutine queued, or is about
// to return. With linger (a TryLock that ended a linger found the key held), the process
// lingers again while it still waits in line as the linger did: with its attempt, heard by
// Redis, and with nothing new since the release that stood it there (quiet; a grant heard and
// found unusable, for one, is news, and the leave passes it on at once). What nobody wants
// once no goroutine barges, waits or lingers is let go (settleLocked).
func (st *lockState) unbarge(barging *bool, linger bool) {
	if !*barging {
		return
	}
	*barging = false
	st.mu.Lock()
	defer st.mu.Unlock()
	st.barging--
	if linger && st.phase == idle && st.line.attempt != nil && st.line.heard && st.line.quiet == st.epoch+1 {
		st.lingerLocked(st.line.attempt.cfg.Lease())
	}
	st.settleLocked()
}

// won makes the goroutine at n (nil for a barge) the queue's head as it returns h. (The process
// holds the key: acquire's deferred StopIdle stops the poller as it returns.)
func (st *lockState) won(n *queue.Node, h *holding) *holding {
	if n != nil {
		st.q.SetHead(n)
	}
	return h
}

// act carries out a step that talks to Redis (stepAsk, or stepRenew of tenure t, whose phase
// the caller took) and returns the new owner, if it got the lock. A Redis failure is kept in
// lastErr (and in st.fault, for the goroutines queued behind) unless it was only the caller's
// context ending first; an answer clears both.
func (st *lockState) act(ctx context.Context, s step, cfg domain.DLockConfig, wait bool, epoch uint64, t *tenure, lastErr *error) (*holding, error) {
	var h *holding
	var err error
	var back *ownHeld // a TryLock's ask found the key held by a give-back of this process
	switch s {
	case stepAsk:
		h, err = st.ask(ctx, cfg, wait, epoch)
		if errors.As(err, &back) {
			err = nil // (an answer: counted below as one)
		}
	case stepRenew:
		h, err = st.renewToTake(ctx, cfg, t)
	default:
		return nil, nil
	}
	if redisFault(err) || err == nil || !redisFault(*lastErr) {
		*lastErr = err // (an answer ends the failure before it)
	}
	switch {
	case redisFault(err):
		st.mu.Lock()
		if st.ten == nil || st.ten == t { // (not when a tenure began since: a grant heard as it failed)
			st.fault, st.faultAt = err, time.Now()
		}
		st.mu.Unlock()
	case err == nil:
		st.mu.Lock()
		st.fault = nil
		st.mu.Unlock()
	}
	if back != nil {
		return nil, back
	}
	return h, err
}

// errNoAnswer says that an attempt was still waiting for Redis when the caller gave up: not a
// Redis failure (the deadline may simply have been short), but worth saying.
var errNoAnswer = errors.New("the attempt got no answer from Redis in time")

// errCloseGaveUp says that Close gave up (its context ended) before a release it waited for
// was answered: the holding may stay in Redis until its lease runs out.
var errCloseGaveUp = errors.New("Close gave up before the release was answered")

// errReleaseInBackground says that a release was not waited for (the deadline of its Unlock's
// context passed first, or a MultiLock gave up): it goes on in the background.
var errReleaseInBackground = errors.New("not waited for: the release goes on in the background")

// notObtained is a Lock's error when its context ended: ErrNotObtained and the context's
// error, with the last Redis failure when there was one (or that the last attempt got no
// answer).
func notObtained(ctxErr, last error) error {
	switch {
	case redisFault(last):
		return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotObtained, ctxErr, last)
	case errors.Is(last, errNoAnswer):
		return fmt.Errorf("%w: %w (%w)", ErrNotObtained, ctxErr, errNoAnswer)
	}
	return fmt.Errorf("%w: %w", ErrNotObtained, ctxErr)
}

// ask sends lock.lua; the caller took phase asking at epoch. A waiting goroutine (wait) asks
// with the process's open attempt, opening one if none is; a TryLock of a process where
// nobody waits asks with an attempt of its own, settled if the key is held. It returns the new
// owner, or nil: with a nil error when the key is held by another (the process then stands in
// line, if waiting), with the context's error or a *RedisProcessError when the outcome is
// unknown (a waiting attempt stays open and is asked again; a TryLock's is given back in the
// background: no copy of it can take the key afterwards).
func (st *lockState) ask(ctx context.Context, cfg domain.DLockConfig, wait bool, epoch uint64) (*holding, error) {
	st.mu.Lock()
	var a *attempt
	if wait || st.line.attempt != nil {
		wait = true // (a TryLock of a process that waits asks with its open attempt)
		tokens := 1
		if st.q.HasWaiters() {
			tokens = blockSize // for passes to the goroutines that queue
		}
		a = st.open(cfg, tokens)
		if a.overdue(time.Now()) && st.line.granted == nil {
			// The last ask ended early without an answer (Redis refused the connection, the
			// client gave up) and a lease has passed since the first unanswered one: this ask
			// would be cut before it is sent. The attempt is given back; the ask opens a new one.
			st.closeAttempt()
			st.giveBackLocked(a.locker, a.cfg)
			a = st.open(cfg, tokens)
		}
	} else {
		a = &attempt{locker: st.g.newLocker(), cfg: cfg, tokens: 1}
	}
	st.asking = a.locker
	unreleased, claim := st.unreleasedLocked(a.locker), st.line.hearing // (see processor.Unreleased)
	sent := time.Now()
	if a.firstSent.IsZero() {
		a.firstSent = sent
	}
	until := a.deadline(sent)
	st.mu.Unlock()

	actx := byCaller(ctx)
	if wait {
		// A waiting attempt's ask ends a lease after its first request since the last answer
		// at the latest: its client may send it again and again (each copy may take or renew
		// the key unheard), and the attempt is given back once a lease has passed (abandoned).
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadlineCause(actx, until, errAskBound)
		defer cancel()
	}
	res, err := call(st.g, actx, func(ctx context.Context) (processor.Result, error) {
		return st.g.proc.Lock(ctx, a.cfg, processor.LockRequest{Locker: a.locker, Wait: wait, Listening: claim.on, Tokens: a.tokens, Unreleased: unreleased})
	})
	if errors.Is(err, errLate) && ctx.Err() == nil { // (the bound above, not the caller)
		cause := errNoAnswer
		if errors.Is(err, errNotSent) {
			cause = fmt.Errorf("%w: %w", errNoAnswer, errNotSent)
		}
		err = &RedisProcessError{Op: "lock", Key: cfg.UniqueKey(), Err: cause}
	}
	if err == nil && res.Outcome == processor.Taken && !time.Now().Before(domain.HeldUntil(sent, a.cfg.Lease())) {
		// The reply came after the lease, counted from the request, had run out: the key may
		// be someone else's by now. Not an acquisition.
		err = &RedisProcessError{Op: "lock", Key: cfg.UniqueKey(), Err: errLateReply}
	}
	paced := false // the answer sets when the next ask is due: the poller polls then
	var back error // a TryLock's own attempt found the key held by a give-back of this process: *ownHeld
	defer func() {
		if paced {
			st.poller.Reset(st.askIn) // (after mu: the poller's lock comes first)
		}
	}()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.phase = idle
	if unsent := processor.Unsent(err); (unsent || errors.Is(err, errNotSent)) && !a.sent {
		// Nothing of the attempt reached Redis: nothing to give back and no line to leave (an
		// open attempt never sent is closed without a leave, settleLocked).
		switch {
		case !unsent:
			err = fmt.Errorf("%w: %w", errNoAnswer, errNotSent)
		case ctx.Err() == nil:
			st.retryLaterLocked(a.cfg.Lease()) // (Redis failed: a lasting failure is no busy loop)
			return nil, err
		}
		st.signalLocked(HowRetry) // the next waiter, if the caller leaves, asks again
		return nil, notTakenErr(ctx.Err(), err)
	}
	a.sent = true
	if err == nil || answered(err) {
		a.unanswered = time.Time{}
	}
	if err != nil || ctx.Err() != nil {
		// Unknown outcome, or the caller is gone: the attempt may hold the key or stand in line.
		st.line.queued = true
		st.g.log.Debug("dlock: attempt without an answer", zap.String("key", cfg.UniqueKey()),
			zap.String("locker", a.locker), zap.NamedError("attempt", err), zap.NamedError("context", ctx.Err()))
		if st.line.attempt != a {
			st.giveBackLocked(a.locker, a.cfg) // a TryLock's own attempt
		} else if g := st.line.granted; g != nil && st.line.grantUsable(a, *g) {
			// Granted meanwhile: counted from the last answer that showed it waiting (grantStart). The
			// caller takes it if it still wants it; else the first waiter does, or it is passed on.
			if ctx.Err() != nil {
				st.startGrantLocked(a, *g, false)
				return nil, errors.Join(err, ctx.Err())
			}
			if t := st.beginGrantLocked(a, *g); t != nil {
				if h, err := st.takeNew(ctx, cfg, t); h != nil || err != nil {
					return h, err
				}
				// (held back by a ForceRelease of this process: the caller waits, or a
				// TryLock reports it not obtained, with this request's failure)
			}
		}
		if st.line.attempt == a && err != nil && !answered(err) && a.abandoned(sent, errors.Is(err, errNotSent)) {
			st.closeAttempt()
			st.giveBackLocked(a.locker, a.cfg) // (the next ask opens a new attempt, at the back of the line)
			if errors.Is(err, errNoAnswer) && !errors.Is(err, errNotSent) && !st.far {
				// Cut by the bound above after it waited a lease: a process this far from Redis
				// never takes the lock, and its callers' errors say only that it got no answer.
				st.far = true
				st.g.log.Warn("dlock: an attempt got no answer from Redis within its lease and was given back: this process takes the lock only while Redis answers within the lease",
					zap.String("key", cfg.UniqueKey()), zap.Duration("lease", a.cfg.Lease()))
			}
		}
		if redisFault(err) && ctx.Err() == nil {
			// Redis failed (down, out of memory, a user not allowed a command): the first
			// waiter asks again after a pause, so that a lasting failure is no busy loop.
			st.retryLaterLocked(a.cfg.Lease())
		} else {
			st.signalLocked(HowRetry) // the next waiter, if the caller leaves, asks again
		}
		if errors.Is(err, errLate) {
			return nil, fmt.Errorf("%w: %w", ctx.Err(), errNoAnswer)
		}
		if ctx.Err() != nil {
			return nil, notTakenErr(ctx.Err(), err)
		}
		return nil, err
	}
	switch res.Outcome {
	case processor.Taken:
		st.closeAttempt()
		st.line.queued = false // lock.lua took this process out of the line
		ent := domain.DLockEntity{Locker: a.locker, Status: domain.StatusProcessing, LockTime: sent, Lease: a.cfg.Lease(), Token: res.Token}
		t := st.startTenure(ent, a.cfg, a.tokens)
		t.origin = res.Origin
		if st.forced == a.locker { // ForceRelease removed it as the reply came
			st.loseLocked(t, errForced)
			return nil, fmt.Errorf("%w: lock %q released by force as it was taken", ErrOptimisticLocking, cfg.UniqueKey())
		}
		return st.takeNew(ctx, cfg, t)
	case processor.Held:
		if h := res.Seen.Holder; h != "" && h != a.locker && strings.HasPrefix(h, st.g.prefix) {
			// The key holds an acquisition this process gave up (granted to an attempt whose
			// leave failed, taken by a late copy, or a TryLock's whose outcome was unknown and
			// whose give-back is still on its way): it is given back, not left for a lease. A
			// TryLock of its own attempt waits for that give-back and asks once more
			// (ownHeld): nobody who wants the key holds it.
			done := make(chan struct{})
			st.background(func() {
				_ = st.giveBack(h, 0, st.cfg, time.Time{}, func() { close(done) })
				st.signal(HowRetry)
			})
			if st.line.attempt != a {
				back = &ownHeld{done}
			}
		}
		if st.line.attempt == a {
			st.line.queued = true
			st.line.waiting(sent, res.Seen.Fence, &res.Seen, claim)
			paced = true // the next ask is due by the answer's pace (the key it found held may expire)

			if res.Seen.Holder == "" && res.Seen.Life > 0 { // a window for processes not in line
				st.gapLocked(res.Seen.Life)
			}
			if g := st.line.granted; g != nil { // granted after this request ran: the caller takes it
				if t := st.beginGrantLocked(a, *g); t != nil {
					return st.takeNew(ctx, cfg, t)
				}
				return nil, nil
			}
		}
	case processor.Settled:
		// Stale, or settled by a leave or a ForceRelease that crossed it: the attempt is
		// over; the next is new, and asks at once (it is the newest: it cannot be settled).
		if st.line.attempt == a {
			st.closeAttempt()
			if wait {
				st.signalLocked(HowRetry)
			}
		}
	}
	if st.epoch != epoch || !wait {
		// A signal came while we were asking, or a TryLock asked with an acquisition of its
		// own while goroutines queued behind it that have not asked themselves: pass it on.
		// (A TryLock that asked with the open attempt asked for them too: wait was set.)
		st.q.Wake()
	}
	return nil, back
}

// ownHeld is what ask returns, instead of a nil error, when a TryLock's own attempt found the
// key held by an acquisition this process gave up: done is closed once Redis answered (or
// failed) the give-back ask began.
type ownHeld struct{ done <-chan struct{} }

func (*ownHeld) Error() string {
	return "the key holds an acquisition of this process that is given back"
}

// takeNew makes the caller the first owner of t, a tenure that just began (phase free): at
// once, or after renewing it when its lease is not the caller's or less than half of it is
// left; or not, while a ForceRelease of this process may have removed it. The caller holds
// mu, which takeNew may release and take again.
func (st *lockState) takeNew(ctx context.Context, cfg domain.DLockConfig, t *tenure) (*holding, error) {
	if st.forces.hold(t.entity.Locker) {
		// A ForceRelease of this process may have removed it (forces): it stays free, and the
		// caller waits with the others for the force's answer or the renewal that checks it.
		// (News: a caller that barged and queues only now, after that renewal signalled
		// nobody, asks or renews again rather than park until the next one.)
		st.signalLocked(HowRetry)
		return nil, nil
	}
	if t.mustRenew(cfg) {
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
	first := !t.taken()
	h := newHolding(st, t, cfg, ctx, t.nextToken())
	t.kept = nil // (a loss found from now on is this holding's)
	switch {
	case t.granted:
		h.how, t.granted = HowNotified, false // the first acquisition of a tenure granted by a message
	case first:
		h.how = HowRetry // the first, of a tenure no goroutine passed on: its asker did not take it (held back: takeNew)
	default:
		h.how = HowHandOver
	}
	st.phase, st.owner = held, h
	return h
}

// renewToTake renews the tenure before taking it (phase renewing is the caller's): with the
// taker's lease, a new block of tokens if the block ran out, and, once the tenure has lasted
// the hand-off limit, yielding to the first live process in line if there is one (and waiting
// again in line with a new attempt). It returns the new owner, or nil when the tenure ended
// meanwhile (yielded, lost) or the renewal failed: the caller goes back to waiting.
func (st *lockState) renewToTake(ctx context.Context, cfg domain.DLockConfig, t *tenure) (*holding, error) {
	st.mu.Lock()
	if st.ten != t || st.phase != renewing {
		st.mu.Unlock()
		return nil, nil // lost as this goroutine took the phase: the loss moved it on
	}
	req, order := processor.RenewRequest{Locker: t.entity.Locker, Last: t.last, Origin: t.origin, Unreleased: st.unreleasedLocked(t.entity.Locker)}, t.order()
	if t.next+blockSize/4 >= t.end {
		req.Tokens = blockSize
	}
	var next *attempt
	claim := st.line.hearing
	if st.g.opts.handOff > 0 && time.Since(t.since) >= st.g.opts.handOff {
		next = &attempt{locker: st.g.newLocker(), cfg: cfg, tokens: blockSize, sent: true, firstSent: time.Now()} // (renew.lua may put it in line)
		req.Yield, req.Check = true, st.g.newLocker()
		req.Next, req.NextLease, req.NextTokens, req.Listening = next.locker, cfg.Lease(), next.tokens, claim.on
		// A yield may put this process back in line with next, whatever becomes of its reply.
		st.line.attempt, st.line.queued = next, true
		st.line.forget()
	}
	st.mu.Unlock()

	sent := time.Now()
	res, err := call(st.g, byCaller(ctx), func(ctx context.Context) (processor.Result, error) {
		return st.g.proc.ExpandLease(ctx, cfg, req)
	})
	if err != nil {
		if !redisFault(err) {
			err = notTakenErr(ctx.Err(), err)
		}
		if redisFault(err) || ctx.Err() == nil { // (not when the waiter gave up: its own NotObtained tells that)
			st.g.observer.RenewalFailed(RenewalEvent{Config: cfg, Err: err})
		}
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	if rtt := time.Since(sent); err == nil && rtt > cfg.Lease()/2-domain.DriftAllowance(cfg.Lease()) && ctx.Err() == nil && !st.slow {
		// A process whose round trip is this long renews for ever and never takes the lock
		// (README, Limits: Lock returns only with half its lease left, counted less the drift
		// allowance); nothing else says why — its tenures are lost, or renewed again. Said once.
		st.slow = true
		st.g.log.Warn("dlock: a renewal before a take took more than half the lease (less the drift allowance): this process takes the lock only while Redis answers faster",
			zap.String("key", cfg.UniqueKey()), zap.Duration("round_trip", rtt), zap.Duration("lease", cfg.Lease()))
	}
	if st.ten != t || st.phase != renewing {
		return nil, err // lost meanwhile: the loss moved the phase on
	}
	switch {
	case (err != nil || res.Outcome == processor.Settled) && req.Yield:
		// (Settled: this very check ran before and its reply was lost: it renewed or yielded.)
		// Perhaps yielded: the key may be another process's now. End the tenure and give the
		// key back if it is still ours; the waiters go on with next. A tenure an Unlock kept
		// is given back as that holding's release is retried, which tells its loss.
		if lost := t.keptLost(); lost != nil {
			st.retryReleaseLocked(releaseJob{st: st, t: t, cfg: t.cfg, until: t.until, lost: lost,
				req: processor.ReleaseRequest{Locker: t.entity.Locker, Origin: t.origin}})
			st.endTenureLocked(t)
		} else {
			st.endTenureLocked(t)
			st.giveBackLocked(t.entity.Locker, t.cfg)
		}
		st.grantedLocked(next, false)
		return nil, err
	case err != nil:
		st.phase = free
		if redisFault(err) && ctx.Err() == nil {
			st.retryLaterLocked(t.cfg.Lease()) // Redis failed: the waiters are told after a pause, no busy loop
		} else {
			st.signalLocked(HowRetry) // the taker gave up: the next waiter, if it leaves, takes the key at once
		}
		return nil, err
	}
	switch res.Outcome {
	case processor.Renewed:
		t.renewed(sent, cfg, order, true, res.Token, req.Tokens)
		switch {
		case req.Yield:
			t.since = time.Now() // nobody else waits: the hand-off limit starts again
			if st.line.attempt == next {
				st.closeAttempt() // and this process is not in line
				st.line.queued = false
			}
		case order == 1:
			// The wait for the tenure's first renewal, which its first pass needed (a grant of
			// one token, or counted from an old request; another lease), is no time of the
			// turn: else a process whose round trip is longer than the hand-off limit would
			// yield as the reply comes, its waiting goroutine unserved. (Once a tenure: its
			// turn lasts the limit and a round trip at most.)
			t.since = t.since.Add(time.Since(sent))
		}
		if t.mustRenew(cfg) || st.forces.hold(t.entity.Locker) { // the reply came late (renew again), or a force of this process may have removed it
			st.phase = free
			st.signalLocked(HowRetry)
			return nil, nil
		}
		return st.take(ctx, cfg), nil
	case processor.Yielded:
		st.g.log.Debug("dlock: yielded to the next process in line", zap.String("key", cfg.UniqueKey()))
		if st.line.attempt == next {
			st.line.waiting(sent, res.Token, &res.Seen, claim) // it ran before any grant to next could (whose token is above the one it granted)
		}
		st.endTenureLocked(t)
		if res.Gap > 0 { // it opened a window for processes not in line
			st.gapLocked(res.Gap)
		}
		st.grantedLocked(next, false)
		st.q.Wake() // the waiters watch for this process's grant (a TryLock does not)
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

// settleLocked lets go what nobody waits for any more: a free tenure, the process's place in
// the line (its open attempt settled), the watch. The caller holds mu.
func (st *lockState) settleLocked() {
	if st.q.HasWaiters() || st.barging > 0 || st.line.lingering {
		return // (a barging goroutine settles when it queues or returns; a linger when it ends)
	}
	switch st.phase {
	case free:
		st.releaseInBackground()
	case idle:
		if st.unreleased > 0 {
			return // (settled after the retry's first try: a leave that came first would settle its locker, and the retry could not tell a loss)
		}
		if a := st.line.attempt; a != nil && !a.sent && !st.line.queued {
			st.closeAttempt() // never sent: nothing of it in Redis
		}
		if st.line.queued || st.line.attempt != nil {
			// Every attempt of this process on the key was numbered by now (none is under way
			// in phase idle); later ones are not the leave's to settle.
			last, cfg := st.g.lastLocker(), st.cfg
			if a := st.line.attempt; a != nil {
				cfg = a.cfg
			}
			st.line.queued = false
			st.closeAttempt()
			unreleased := st.unreleasedLocked("")
			st.background(func() { st.leave(last, cfg, unreleased) })
		}
		if st.line.watching {
			st.line.watching = false
			if st.g.notes != nil {
				st.g.notes.unwatch(st.channel, st.line.hearing.on)
			}
		}
	}
}

// signal says the key may be this process's: the first waiter will ask. how says what sent it.
func (st *lockState) signal(how How) {
	st.mu.Lock()
	st.signalLocked(how)
	st.mu.Unlock()
}

// subscribed runs when this process's channel of the key is (again) subscribed: a message
// published before went unheard. The first waiter asks again (a release's grant), and a tenure
// renews at once (the connection may have dropped as Redis restarted empty, or an operator's
// ForceRelease went by): its owner learns of a loss then, not at its next renewal.
func (st *lockState) subscribed() {
	st.mu.Lock()
	st.line.hearing.subscribed()
	if subscriptionFault(st.fault) { // (Redis answered since)
		st.fault = nil
	}
	st.mu.Unlock()
	st.signal(HowRetry)
	st.renewNow("")
}

// subscriptionFailed makes f, a failure of the subscription to the key's releases
// (notifier.failed), the fault of the goroutines that wait while the process waits in Redis:
// one that gives up names it, unless Redis answered since (an ask, the subscription again).
func (st *lockState) subscriptionFailed(f error) {
	st.mu.Lock()
	st.line.hearing.failed()
	if st.ten == nil && st.q.HasWaiters() {
		st.fault, st.faultAt = f, time.Now()
	}
	st.mu.Unlock()
}

// subscriptionFault reports whether err is a failure of a subscription (subscriptionFailed).
func subscriptionFault(err error) bool {
	var pe *RedisProcessError
	return errors.As(err, &pe) && pe.Op == "subscribe"
}

// renewNow has the tenure (under locker, when given) renew at once, if this process holds
// one: it may have been removed unheard.
func (st *lockState) renewNow(locker string) {
	st.mu.Lock()
	t := st.ten
	if t == nil || t.over || locker != "" && t.entity.Locker != locker {
		st.mu.Unlock()
		return
	}
	t.checkNow = true
	st.mu.Unlock()
	t.exp.Poke()
}

func (st *lockState) signalLocked(how How) {
	st.wokenBy = how
	st.epoch++
	st.q.Wake()
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

// heardOwn handles a release message naming a locker of this process (notifier). Its own
// releases it ignores (the phase has moved on by then); but a message about the tenure this
// process still holds and passes on (or renews to pass on) means somebody else let the key
// go: an operator's ForceRelease. The tenure ends at once, as on any loss; a grant heard while a request
// was on its way, which the operator removed before the process could count it, is dropped
// (the attempt's next request finds it settled); and so is a take whose answer is on its way
// (ask checks forced, as after a ForceRelease in this Generator).
func (st *lockState) heardOwn(from string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.phase == asking && st.asking == from {
		st.forced = from
	}
	if g := st.line.granted; g != nil && g.locker == from {
		st.line.granted = nil
		st.signalLocked(HowRetry) // the key was let go: ask again (the attempt is settled)
	}
	if t := st.ten; t != nil && t.entity.Locker == from && (st.phase == held || st.phase == free || st.phase == renewing) {
		st.loseLocked(t, errForced)
	}
}

// retryLaterLocked wakes the first waiter to try again after a Redis failure, after a pause:
// a tenth of lease, at most 50 ms. Failures while a retry is due add none. The caller holds mu.
func (st *lockState) retryLaterLocked(lease time.Duration) {
	if st.retrying {
		return
	}
	st.retrying = true
	time.AfterFunc(min(lease/10, 50*time.Millisecond), func() {
		st.mu.Lock()
		st.retrying = false
		st.signalLocked(HowRetry)
		st.mu.Unlock()
	})
}

// errAskBound ends a waiting attempt's ask that got no answer for a lease (attempt.deadline).
var errAskBound = errors.New("dlock: no answer for a lease")

// answered reports whether err is an answer of Redis's: its own error reply (the script did
// not run, or failed), or WAIT's count of too few replicas (ErrNotReplicated: the process
// learnt the outcome, which it does not rely on) — not none.
func answered(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || errors.Is(err, ErrNotReplicated)
}

// redisFault reports whether err says that Redis failed — not merely that the caller's
// context ended before the answer came, which is the caller's deadline, not a fault.
func redisFault(err error) bool {
	var pe *RedisProcessError
	return errors.As(err, &pe) && !errors.Is(pe.Err, context.DeadlineExceeded) && !errors.Is(pe.Err, context.Canceled)
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
