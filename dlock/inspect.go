package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// State is a lock as Redis and this Generator see it at one moment (State).
type State struct {
	// Config is the lock's configuration (the handle's).
	Config domain.DLockConfig
	// Holder is the locker of the acquisition that holds the key, "" when nobody does. A
	// locker is <ip>-<pid>-<nonce>-<n>: the process and Generator that made it, and a number.
	Holder string
	// Mine reports whether Holder is an acquisition of this Generator.
	Mine bool
	// LeaseLeft is how long the holding lasts unless renewed; 0 when free, and when the key
	// has no expiry (a value dlock did not write, which never comes free by itself: see
	// ForceRelease).
	LeaseLeft time.Duration
	// Fence is the key's fencing counter: the last token handed out, while Redis keeps it
	// (two leases after the last acquisition or renewal); 0 once it expired. The next token
	// is larger than both it and the server clock in microseconds.
	Fence uint64
	// Waiting lists the processes (their locker prefixes) that recorded in Redis that they
	// wait for the key and that a release would grant it to, first in line first; empty when
	// none did. A process that only uses TryLock never waits. Left out, as a release passes
	// them over: a process that listened for the key's messages when it last renewed its
	// place and does not now (it died: Redis dropped its subscription with its connection),
	// one that did not listen and has not renewed its place within a third of its lease, and
	// one whose place expired. Their places stay in Redis until they expire; a process left
	// out that asks again is listed again.
	Waiting []string
	// LocalWaiters reports whether goroutines of this Generator wait for the lock.
	LocalWaiters bool
}

// Held reports whether some acquisition holds the key.
func (s State) Held() bool { return s.Holder != "" }

// State reads the lock's state from Redis in one round trip (a read-only script) and adds
// what this Generator knows. It is safe for concurrent use and changes nothing; it lists the
// waiting processes a release would grant the key to (State.Waiting), leaving out the dead and
// the expired, as the read-write lock's and the semaphore's State do. It returns a
// *RedisProcessError when Redis fails, ctx's error (the call abandoned) when ctx ends first,
// and ErrClosed after Close. It reads the server the Generator's client sends to: a client
// made with a replica's address reads that replica's copy, which may be behind its master's
// (the CLI's status refuses a replica for that reason).
func (l *DistributedReentrantLock) State(ctx context.Context) (State, error) {
	st, err := l.state(ctx)
	return st, l.named(err)
}

func (l *DistributedReentrantLock) state(ctx context.Context) (State, error) {
	if err := l.check(ctx); err != nil {
		return State{}, err
	}
	in, err := call(l.g, byCaller(ctx), func(ctx context.Context) (processor.Inspection, error) {
		return l.g.proc.Inspect(ctx, l.cfg)
	})
	if err != nil {
		return State{}, unlate(err)
	}
	s := State{Config: l.cfg, Holder: in.Holder, LeaseLeft: in.TTL, Fence: in.Fence, Waiting: in.Waiting}
	s.Mine = in.Holder != "" && strings.HasPrefix(in.Holder, l.g.prefix)
	if st := l.g.lookup(l.cfg.UniqueKey()); st != nil {
		s.LocalWaiters = st.q.HasWaiters()
	}
	return s, nil
}

// Extend renews the lease of the acquisition owned by owned at once, with a new length, and
// keeps renewing it with that length until it is released. A renewal never shortens what
// Redis holds: an Extend to a shorter lease takes effect as the longer one it replaces runs
// down. It bounds the Redis call by the current lease, and by owned's deadline if it has one
// (a context of the owner's made with a timeout: the renewal's outcome is then unknown, as
// after a Redis failure). It returns ErrInvalidConfig for a bad lease (outside
// [domain.MinLease, domain.MaxLease], or not whole milliseconds), ErrNotHeld when owned does
// not own the lock, an error matching ErrLockLost when the holding was lost (including when
// this renewal finds the key gone or taken: the holding is then lost, as on any renewal, or
// when its lease runs out before Redis answers: the error then matches the
// *RedisProcessError too), ErrClosed after Close, and a *RedisProcessError when Redis failed
// within the lease or owned's deadline passed first (the holding keeps its lease and
// renewals). Safe for concurrent use.
func (l *DistributedReentrantLock) Extend(owned context.Context, lease time.Duration) error {
	return l.named(l.extend(owned, lease))
}

func (l *DistributedReentrantLock) extend(owned context.Context, lease time.Duration) error {
	if owned == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if err := domain.ValidateLease(lease); err != nil {
		return err
	}
	h := l.holdingOf(owned)
	if h == nil {
		if l == nil || l.g == nil || l.g.proc == nil {
			return errZeroLock
		}
		if l.g.isClosed() {
			return ErrClosed
		}
		return ErrNotHeld
	}
	if err := h.heldErr(); err != nil {
		return err
	}
	cfg, err := h.cfg.WithLease(lease)
	if err != nil {
		return err
	}
	st := h.st
	st.mu.Lock()
	t := h.ten
	if st.ten != t || st.owner != h {
		st.mu.Unlock()
		if err := h.heldErr(); err != nil {
			return err
		}
		return ErrNotHeld
	}
	req, until, order := processor.RenewRequest{Locker: t.entity.Locker, Origin: t.origin}, t.until, t.order()
	st.mu.Unlock()

	bound := until
	if d, ok := owned.Deadline(); ok && d.Before(until) {
		bound = d // (the caller's deadline: the renewal's outcome is then unknown, the holding kept)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(owned), bound)
	defer cancel()
	sent := time.Now()
	res, err := call(l.g, ctx, func(ctx context.Context) (processor.Result, error) {
		return l.g.proc.ExpandLease(ctx, cfg, req)
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case errors.Is(err, errLate) && bound.Before(until):
		err = &RedisProcessError{Op: "renew", Key: cfg.UniqueKey(), Err: unlate(err)}
	case errors.Is(err, errLate):
		err = &RedisProcessError{Op: "renew", Key: cfg.UniqueKey(), Err: fmt.Errorf("%w (%w)", errLateReply, unlate(err))}
	}
	switch {
	case st.ten != t:
		// lost (or ended) meanwhile
	case err != nil:
		if time.Now().Before(t.until) { // (a renewal may have lengthened it meanwhile)
			return err
		}
		// The lease ran out by this process's clock before an answer came: the holding is
		// lost, as its lease thread is about to say, whatever Redis did with the renewal.
		st.loseLocked(t, errHoldingLapsed)
	case res.Outcome == processor.Renewed:
		// The renewals go on with the new lease, unless the lock passed on meanwhile (the
		// next owner's lease stays) or a newer setting was made since this one was sent.
		t.renewed(sent, cfg, order, st.owner == h, 0, 0)
	default:
		st.loseLocked(t, fmt.Errorf("%w: renewal found the key gone or taken (Extend)", ErrLockLost))
	}
	if herr := h.heldErr(); herr != nil {
		if err != nil {
			return fmt.Errorf("%w (Extend: %w)", herr, err)
		}
		return herr
	}
	return err
}

// ForceRelease lets the lock's key go if it is still held by holder — the locker State
// reports in Holder — as a release does: to the first live process in line, which is told, or
// free. It is an
// operator's last resort for a lock stuck in an incident: the holder is not asked. It reports
// whether this call removed holder (false when the key is free or held by another
// acquisition: nothing is changed then). Naming the holder makes it safe to repeat: a copy
// of the request, sent again after a lost reply (by go-redis, or by the library after a
// broken connection), finds the holder gone, cannot remove the key of whoever acquired after
// it, and answers true when the first copy removed holder. (A call of the caller's after an
// error is another request: it answers false when the first removed holder; State then shows
// holder gone, as after a true.)
//
// A holder in this Generator learns of its loss at once (when the force's outcome is unknown —
// Redis failed, ctx ended — it asks Redis at once, after any answer of its own on its way, and
// so does a holding an answer on its way begins with holder), and no goroutine here is given
// the holding's tenure (passed it, or as its first owner when it begins meanwhile) while the
// force is on its way, nor, after an answer that does not say it
// removed the holder, until a renewal finds the key still the tenure's (a force that Redis runs
// only after its answer was given up for lost is as one from elsewhere). A holder elsewhere
// learns of its loss at its next renewal (within three quarters of its lease) or release, as of
// any loss, so until then two processes may act as owners — use fencing tokens downstream. It
// returns ErrInvalidConfig for an empty holder, a *RedisProcessError when Redis failed, ctx's
// error when ctx ended first, and ErrClosed after Close. Safe for concurrent use.
func (l *DistributedReentrantLock) ForceRelease(ctx context.Context, holder string) (bool, error) {
	removed, err := l.forceRelease(ctx, holder)
	return removed, l.named(err)
}

func (l *DistributedReentrantLock) forceRelease(ctx context.Context, holder string) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if holder == "" {
		return false, fmt.Errorf("%w: ForceRelease needs the holder to remove (State's Holder)", ErrInvalidConfig)
	}
	var counted *lockState // where this force is counted (forces)
	if st := l.g.lookup(l.cfg.UniqueKey()); st != nil {
		st.mu.Lock()
		if t := st.ten; t != nil && t.entity.Locker == holder || st.mayBegin(holder) {
			st.forces.sent(holder)
			counted = st
			if f := l.g.opts.forceCounted; f != nil {
				f(l.cfg.UniqueKey(), holder)
			}
		}
		st.mu.Unlock()
	}
	res, err := call(l.g, byCaller(ctx), func(ctx context.Context) (processor.Result, error) {
		return l.g.proc.ForceRelease(ctx, l.cfg, holder)
	})
	removed := err == nil && (res.Outcome == processor.Released || res.Outcome == processor.Settled) // (Settled: by a copy of this request)
	st := l.g.lookup(l.cfg.UniqueKey())
	if st != nil {
		st.mu.Lock()
		if counted == st {
			st.forces.answered(holder, removed)
		}
		if removed {
			// A tenure of this Generator is told at once, or, if it is being taken just now,
			// as soon as its reply comes (ask checks forced).
			st.forced = holder
			if g := st.line.granted; g != nil && g.locker == holder {
				st.line.granted = nil // a grant not yet counted
			}
			if t := st.ten; t != nil && t.entity.Locker == holder {
				st.loseLocked(t, errForced)
			}
			st.signalLocked(HowRetry)
		}
		st.mu.Unlock()
	}
	if !removed {
		// The outcome is unknown (a reply lost), or the holder was gone already, perhaps
		// removed by an earlier copy of this request whose reply was lost: a tenure here under
		// holder renews at once and learns whether it still holds (one that begins later does
		// so as it begins: startTenure asks forces).
		l.g.checkTenure(l.cfg.UniqueKey(), holder)
	}
	if err != nil {
		return false, unlate(err)
	}
	return removed, nil
}

// forces counts, by locker of this process (its tenure's, or an attempt's or an ask's that
// may begin one), the ForceRelease calls here of that locker on their way, and, as owed of
// them, those whose answer did not say they removed it, until a renewal of the tenure sent
// after that answer renews the key (checked: the force asks for one at once). Meanwhile no
// goroutine takes a tenure under that locker (hold): the force may have removed the key and
// granted it elsewhere before its answer, its release message or a renewal tells. A force
// that answers removed ends the tenure. The read-write lock's and the semaphore's state keep
// one as well, for a holding (or its downgrade's locker): it lends to no goroutine new while
// held (sharedState.held). Guarded by the state's mutex.
type forces map[string]*forceCount

type forceCount struct{ on, owed int }

// sent counts a force of locker about to be sent.
func (f *forces) sent(locker string) {
	if *f == nil {
		*f = forces{}
	}
	c := (*f)[locker]
	if c == nil {
		c = &forceCount{}
		(*f)[locker] = c
	}
	c.on++
}

// answered ends the count of a force of locker that sent counted: at once if it removed the
// locker, else once a renewal checks it.
func (f forces) answered(locker string, removed bool) {
	if !removed {
		f[locker].owed++
		return
	}
	if f[locker].on--; f[locker].on == 0 {
		delete(f, locker)
	}
}

// checked ends the count of n owed forces of locker (owedNow as a renewal was sent, which
// renewed the key).
func (f forces) checked(locker string, n int) {
	if c := f[locker]; c != nil && n > 0 {
		c.on, c.owed = c.on-n, c.owed-n
		if c.on == 0 {
			delete(f, locker)
		}
	}
}

// hold reports whether a tenure under locker must not be passed on.
func (f forces) hold(locker string) bool { return f[locker] != nil }

// owedNow returns how many forces a renewal sent now checks.
func (c *forceCount) owedNow() int {
	if c == nil {
		return 0
	}
	return c.owed
}

// mayBegin reports whether locker is the open attempt's, or the ask's on its way: a tenure
// may begin under it. The caller holds mu.
func (st *lockState) mayBegin(locker string) bool {
	a := st.line.attempt
	return a != nil && a.locker == locker || st.phase == asking && st.asking == locker
}

// checkTenure has the tenure of key under locker, if this Generator holds one, renew at once.
func (g *Generator) checkTenure(key, locker string) {
	if st := g.lookup(key); st != nil {
		st.renewNow(locker)
	}
}

var errForced = fmt.Errorf("%w: released by force (ForceRelease)", ErrLockLost)

var errZeroLock = fmt.Errorf("%w: lock not made by a Generator", ErrInvalidConfig)

// check validates a call's receiver and context.
func (l *DistributedReentrantLock) check(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if l == nil || l.g == nil || l.g.proc == nil {
		return errZeroLock
	}
	if l.g.isClosed() {
		return ErrClosed
	}
	return nil
}

// errLate says that the request's context ended before Redis answered — its caller's, Close,
// or a bound of the library's own such as a renewal's lease: the request may still run, or
// have run, in Redis.
var errLate = errors.New("dlock: no answer before the request's deadline or cancellation")

// errNotSent says that a request was never handed to the client: its caller's context ended
// while it waited for the Generator's gate. Nothing of it can reach Redis.
var errNotSent = errors.New("the request was not sent: every connection of the client's pool was busy with this Generator's requests")

// call runs f, a Redis request, bounded by ctx even when the client does not honour it
// (go-redis ignores context deadlines unless ContextTimeoutEnabled is set): if ctx ends first,
// call returns at once with an error matching errLate and ctx's error, and f finishes in the
// background. It first waits for a token of the Generator's gate, so that its requests do not
// queue for the client's connections, where a request abandoned by its caller may or may not
// have been sent: if ctx ends there, f never runs, and the error matches errNotSent as well (a
// caller that cannot use that knowledge treats it as any answer that came late).
func call[T any](g *Generator, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	return callUnless(g, ctx, nil, f)
}

// errUnwanted says that a request was dropped at the Generator's gate, unsent, because what
// it asked for was no longer wanted (callUnless's drop).
var errUnwanted = errors.New("dlock: request dropped unsent: no longer wanted")

// callUnless is call whose request, while it waits for the gate, is also dropped unsent when
// drop is closed (an error matching errNotSent and errUnwanted); past the gate drop changes
// nothing, so that no answer is made unknown by it.
func callUnless[T any](g *Generator, ctx context.Context, drop <-chan struct{}, f func(context.Context) (T, error)) (T, error) {
	r := &request[T]{g: g, ctx: ctx, f: f}
	if g.gate != nil {
		if err := ctx.Err(); err != nil {
			var zero T
			return zero, fmt.Errorf("%w: %w: %w", errLate, errNotSent, err)
		}
		select {
		case g.gate <- struct{}{}:
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("%w: %w: %w", errLate, errNotSent, ctx.Err())
		case <-drop:
			var zero T
			return zero, fmt.Errorf("%w: %w", errNotSent, errUnwanted)
		}
		r.gated = true
	}
	if ctx.Done() == nil {
		v, err := r.send()
		g.noteFault(err)
		return v, err
	}
	r.done = make(chan struct{})
	if !g.send.run(g, r) {
		return r.send()
	}
	select {
	case <-r.done:
		return r.v, r.err
	case <-ctx.Done():
		if !r.leave() { // (an answer that came as the context ended is an answer)
			return r.v, r.err
		}
		var zero T
		return zero, fmt.Errorf("%w: %w", errLate, ctx.Err())
	}
}

// request is one request of call's: what it runs, and its answer once done is closed. (One
// allocation for all, and a channel, per request.)
type request[T any] struct {
	g     *Generator
	ctx   context.Context
	f     func(context.Context) (T, error)
	gated bool // it holds a token of the Generator's gate, given back once f returns
	v     T
	err   error
	done  chan struct{}
	left  atomic.Int32 // running, then left (by its caller, before its answer: counted late) or answered
}

// The phases of a request run on a sender (request.left).
const (
	reqRunning int32 = iota
	reqLeft
	reqAnswered
)

// leave has r's caller stop waiting for its answer: r counts among the Generator's late
// requests until f returns. It returns false, and r is not left, when the answer is in (done
// is closed).
func (r *request[T]) leave() bool {
	r.g.late.add()
	if r.left.CompareAndSwap(reqRunning, reqLeft) {
		return true
	}
	r.g.late.done()
	<-r.done
	return false
}

// send runs f, then gives the gate's token back if it holds one.
func (r *request[T]) send() (T, error) {
	if r.gated {
		defer func() { <-r.g.gate }()
	}
	sent := time.Now()
	v, err := r.f(r.ctx)
	if err != nil {
		r.g.warnReadTimeout(err, time.Since(sent))
	}
	return v, err
}

// run runs the request on a sender, and closes done with its answer.
func (r *request[T]) run() {
	r.v, r.err = r.send()
	r.g.noteFault(r.err)
	if !r.left.CompareAndSwap(reqRunning, reqAnswered) {
		r.g.late.done()
	}
	close(r.done)
}

// lateRequests counts the requests whose callers left them running (request.leave): their
// outcome is nobody's to see.
type lateRequests struct {
	mu   sync.Mutex
	n    int
	none chan struct{} // closed while n is 0 (made so at first use); guarded by mu
}

func (l *lateRequests) add() {
	l.mu.Lock()
	if l.n == 0 {
		l.none = make(chan struct{})
	}
	l.n++
	l.mu.Unlock()
}

func (l *lateRequests) done() {
	l.mu.Lock()
	if l.n--; l.n == 0 {
		close(l.none)
	}
	l.mu.Unlock()
}

// ended returns a channel closed once no late request runs: closed already when none runs now.
func (l *lateRequests) ended() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.none == nil {
		l.none = make(chan struct{})
		close(l.none)
	}
	return l.none
}

// nothingSent reports whether err, the failure of a request that gives back what an attempt
// may hold or leaves the line, shows that there is nothing to give back: it failed before it
// was sent (processor.Unsent), no script of the Generator's was ever handed to the client, and
// no request its caller left runs still (one that may yet send one). So a Close of a
// Generator whose Cluster client never reached a server does not wait a lease for give-backs
// that can only fail.
func (g *Generator) nothingSent(err error) bool {
	return processor.Unsent(err) && isClosed(g.late.ended()) && !g.redis.Sent()
}

// lateEnd returns, for err a failure before sending while nothing was sent, a channel closed
// once no request left by its caller runs (closed already if none does: the next try, failing
// so, finds nothingSent), so that a retry waits for them rather than a pause; nil otherwise.
func (g *Generator) lateEnd(err error) <-chan struct{} {
	if !processor.Unsent(err) || g.redis.Sent() {
		return nil
	}
	return g.late.ended()
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// fault is a failure of a request (Generator.fault) and when it came.
type fault struct {
	err error
	at  time.Time
}

// noteFault keeps err as the Generator's last fault when it is one of Redis's, or of the way
// to it: not an answer — a refusal of what a request asked (ErrInvalidConfig: more permits
// than the count, a lock of another kind) included, which a waiter of another request that
// names the fault would then match — nor a context's end.
func (g *Generator) noteFault(err error) {
	if err == nil || answered(err) || errors.Is(err, ErrInvalidConfig) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	var pe *RedisProcessError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	g.fault.Store(&fault{err: err, at: time.Now()})
}

// noteTry keeps the outcome of a try of a request of the Generator's, which began then: a
// failure as its last fault (noteFault); an answer of Redis drops a last fault that came
// before the try began, which is then no longer Redis's state (faultSince names none).
func (g *Generator) noteTry(err error, began time.Time) {
	if err == nil || errors.Is(err, redis.Nil) || answered(err) {
		if f := g.fault.Load(); f != nil && f.at.Before(began) {
			g.fault.CompareAndSwap(f, nil)
		}
		return
	}
	g.noteFault(err)
}

// warnEvery is how often at most a Generator logs a Warn that a condition which repeats with
// every request (a read timeout, a failed release) persists: one line tells the operator, and
// a line a request would flood the log (the others are at Debug, or not logged).
const warnEvery = time.Minute

// warnPace lets one Warn through every warnEvery: it holds when the last went, in Unix
// nanoseconds (0: never).
type warnPace struct{ last atomic.Int64 }

// due reports whether a Warn may be logged now, counting it as logged if so. It is safe for
// concurrent use: of calls at the same moment, one is due.
func (p *warnPace) due() bool {
	now := time.Now().UnixNano()
	last := p.last.Load()
	return now-last >= int64(warnEvery) && p.last.CompareAndSwap(last, now)
}

// releaseFailed logs the failure of a release, of any kind of lock, in Redis: at Warn at most
// once every warnEvery per Generator, else at Debug. A holding whose release fails is released
// again while its lease lasts, and else expires with it: an operator needs to hear of the
// outage, not of every try of every holding.
func (g *Generator) releaseFailed(msg string, fields ...zap.Field) {
	if g.releaseWarned.due() {
		g.log.Warn(msg, fields...)
	} else {
		g.log.Debug(msg, fields...)
	}
}

// warnReadTimeout warns, at most once every warnEvery, that the client's read timeout fails
// the requests when it failed err, a request that waited that long: an operator would else see
// only Lock failing, or rarely succeeding (README, Limits: go-redis closes the connection at
// each read timeout and dials the next under the same timeout, so a timeout near the round
// trip lets few requests through).
func (g *Generator) warnReadTimeout(err error, waited time.Duration) {
	if !g.cutByReadTimeout(err, waited) || !g.timeoutWarned.due() {
		return
	}
	g.log.Warn("dlock: requests to Redis fail by the client's read timeout, and go-redis closes the connection at each one: "+
		"unless Redis is unreachable, give the client a ReadTimeout of about twice this process's p99 round trip to Redis",
		zap.Duration("read_timeout", g.readTimeout), zap.Duration("waited", waited), zap.Error(err))
}

// cutByReadTimeout reports whether err, the failure of a request that waited that long, is the
// client's read timeout: a timeout of the network after the request waited the read timeout at
// least — not a dial's, which DialTimeout bounds, nor a context's end (go-redis returns the
// context's error when a deadline of the request's context cut it; a client with
// ContextTimeoutEnabled reads up to that deadline when it comes first, and the request then
// waited less). A write cut by WriteTimeout looks the same.
func (g *Generator) cutByReadTimeout(err error, waited time.Duration) bool {
	var ne net.Error
	var op *net.OpError
	return g.readTimeout > 0 && waited >= g.readTimeout && errors.As(err, &ne) && ne.Timeout() &&
		!errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &op) && op.Op == "dial")
}

// faultSince returns err naming the Generator's last fault, when one came after since and err
// says only that an attempt got no answer in time (errNoAnswer, errUnanswered, errLate): a
// Redis that refuses connections is not then taken for a slow one. The fault is the client's,
// of any key (only failures of the way to Redis are kept, not its answers).
func (g *Generator) faultSince(err error, since time.Time) error {
	if errors.Is(err, errNoAnswer) || errors.Is(err, errUnanswered) || errors.Is(err, errLate) {
		return g.nameFault(err, since)
	}
	return err
}

// nameFault returns err naming the Generator's last fault, when one came after since.
func (g *Generator) nameFault(err error, since time.Time) error {
	if f := g.fault.Load(); f != nil && f.at.After(since) {
		return fmt.Errorf("%w (meanwhile a request of this process to Redis, perhaps of another key, failed %v before: %w)", err, time.Since(f.at).Round(time.Millisecond), f.err)
	}
	return err
}

// renewalFault is faultSince for a renewal sent at sent that failed with err: one that ran
// out of its own deadline (Redis did not answer in time) is a request that got no answer too.
func (g *Generator) renewalFault(err error, sent time.Time) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return g.nameFault(err, sent)
	}
	return g.faultSince(err, sent)
}

// unlate returns what a caller of the API sees of an error of call: the context's error alone
// when the answer came late.
func unlate(err error) error {
	if errors.Is(err, errLate) {
		if errors.Is(err, context.DeadlineExceeded) {
			return context.DeadlineExceeded
		}
		return context.Canceled
	}
	return err
}
