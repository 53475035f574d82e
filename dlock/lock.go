// Package dlock is a re-entrant distributed lock kept in Redis, a Go port of Baidu DLock.
//
// Goroutines of one process that want the same lock wait in a lock-free local queue, so only
// one of them at a time asks Redis; waiting processes stand in a line in Redis, a release
// grants the key to the first of them and tells it, and a retry poller covers holders that do
// not publish (Java DLock). Ownership travels in the context an acquire returns; that context
// ends if the lock is lost.
//
// Bad input, for every handle: a Generator, lock, read-write lock, semaphore or MultiLock not
// made by a Generator (nil or zero), or a nil context, is refused with ErrInvalidConfig (but
// Generator.Close takes a nil context as context.Background()), and the ownership questions
// (HoldCount, FencingToken) answer that nothing is held. An acquisition (Try* included), State,
// ForceRelease or SetPermits given a context that has already ended returns its error (with
// ErrNotObtained from an acquisition) and leaves nothing held or in line; Unlock and Extend work
// with a cancelled context derived from an Owner (Unlock waits for Redis no longer than a
// deadline it carries, and lets go in the background after it). Once the Generator is closed,
// every call of its handles returns ErrClosed, whatever context it is given, but one with the
// Owner of a holding lost before Close, which says ErrLockLost (arguments bad in themselves,
// such as a lease out of range, may be refused with ErrInvalidConfig first). Nothing panics on
// bad input.
package dlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
)

// DistributedReentrantLock is a handle on one lock (type and target) of a Generator. Handles
// with the same unique key share one local queue within their Generator, but each acquisition
// runs on the lease of the handle it was made with. A handle is safe for concurrent use and
// cheap; keep it or ask the Generator again.
//
// Ownership is carried by contexts: Lock and TryLock return an owner context. Locking again
// with that context (or one derived from it) re-enters and raises the hold count; Unlock with
// it lowers the count, and the key is let go in Redis when the count reaches zero.
//
// The owner context keeps the values of the context given to Lock but not its deadline or
// cancellation (that context bounds only the wait). It ends when the lock is released
// (context.Cause is context.Canceled), lost (the cause matches ErrLockLost) or closed (the cause
// is ErrClosed).
//
// A lost lock stays lost: from the moment the loss is known (a lease that ran out by this
// process's clock is, whether or not its lease thread has said so yet), every call with its
// owner context reports it — Lock, TryLock, Unlock and Extend return an error matching
// ErrLockLost, HoldCount returns 0 and FencingToken returns ok false — and no other lock
// inherits it.
type DistributedReentrantLock struct {
	g   *Generator
	cfg domain.DLockConfig
	key any // ownerKey{g, the unique key}, boxed once: what holdingOf looks up
}

// Config returns the lock's configuration: type, target, key and the lease every acquisition
// made with this handle runs on.
func (l *DistributedReentrantLock) Config() domain.DLockConfig {
	if l == nil {
		return domain.DLockConfig{}
	}
	return l.cfg
}

type ownerKey struct {
	g   *Generator
	key string
}

// holdState is where a holding is in its life: held, then released, lost or closed, once.
type holdState int

const (
	holdHeld holdState = iota
	holdReleased
	holdLost
	holdClosed
)

// holding is one acquisition: from the moment it got the lock (from Redis, or passed within
// this process under the same tenure) to its final Unlock, its loss or Close. Whoever moves
// it out of held (the final Unlock, a loss, Close, the garbage collector finding its Owner
// dropped) tells its owner context first and drops its reference to the state.
type holding struct {
	st       *lockState
	ten      *tenure            // the tenure it was acquired under
	cfg      domain.DLockConfig // of the handle it was made with
	token    uint64
	at       time.Time // when it got the lock
	endsWith           // its owner context

	how How // how it was acquired; set before the acquiring call returns

	mu    sync.Mutex
	state holdState // guarded by mu
	count int       // holds while held; guarded by mu
	cause error     // why it was lost; guarded by mu

	// released, set by its final Unlock's release (lockState.unlock) on the goroutine that
	// runs release, is closed once the ReleaseEvent was reported: a loss the release's
	// background retry finds is reported after it.
	released chan struct{}
}

// newHolding makes the holding of an acquisition made with cfg under t, with token. The
// owner context keeps parent's values but not its deadline or cancellation.
func newHolding(st *lockState, t *tenure, cfg domain.DLockConfig, parent context.Context, token uint64) *holding {
	h := &holding{st: st, ten: t, cfg: cfg, token: token, at: time.Now(), count: 1}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	h.ctx, h.cancelCtx = context.WithValue(ctx, st.key, h), cancel // (st.key: ownerKey{st.g, cfg.UniqueKey()})
	return h
}

// heldErr returns nil while h is held, else what a call on it reports: the loss's cause,
// ErrClosed, or ErrNotHeld once released.
func (h *holding) heldErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.state {
	case holdHeld:
		return nil
	case holdLost:
		return h.cause
	case holdClosed:
		return ErrClosed
	}
	return ErrNotHeld
}

// end moves h from held to s (holdLost with its cause); it reports whether h was held.
func (h *holding) end(s holdState, cause error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != holdHeld {
		return false
	}
	h.state, h.cause, h.count = s, cause, 0
	return true
}

// lose ends h as lost, unless it ended otherwise first: its owner context is cancelled with
// cause. The caller holds the state's mu (no pass can follow).
func (h *holding) lose(cause error) {
	if !h.end(holdLost, cause) {
		return
	}
	h.cancel(cause)
	h.st.g.observer.Lost(h.loss(cause))
	h.st.g.unref(h.st)
}

// loss is the LossEvent of h's loss with cause.
func (h *holding) loss(cause error) LossEvent {
	return LossEvent{Kind: KindMutex, Config: h.cfg, Token: h.token, Held: time.Since(h.at), Cause: cause}
}

// foundLost records that the final release found the key gone or taken: the holding is lost.
func (h *holding) foundLost(cause error) {
	h.mu.Lock()
	h.state, h.cause = holdLost, cause
	h.mu.Unlock()
}

// status returns h's state, hold count and loss cause.
func (h *holding) status() (holdState, int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state, h.count, h.cause
}

// release lets h go after its final hold was given up (released) or Close (closed): the
// owner context is told first, then the lock passes on or the key is let go, and the
// holding's reference is dropped.
func (h *holding) release(ctx context.Context, cause error) error {
	st := h.st
	h.cancel(cause)
	err := st.unlock(ctx, h)
	if errors.Is(err, ErrLockLost) {
		st.g.log.Warn("dlock: lock lost before release", zap.String("key", h.cfg.UniqueKey()), zap.String("locker", h.ten.entity.Locker), zap.Error(err))
		h.foundLost(err)
		st.g.observer.Lost(h.loss(err))
	}
	st.g.observer.Released(ReleaseEvent{Kind: KindMutex, Config: h.cfg, Token: h.token, Held: time.Since(h.at), Err: err})
	if h.released != nil {
		close(h.released)
	}
	st.g.unref(st)
	if err != nil && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrClosed) { // (ErrClosed: Close let it go)
		st.g.releaseFailed("dlock: release failed; retried in the background, else the key expires with its lease", zap.String("key", h.cfg.UniqueKey()), zap.Error(err))
	}
	return err
}

// sameKey reports whether o is a handle on l's lock (of its Generator, with its unique key).
func (l *DistributedReentrantLock) sameKey(o *DistributedReentrantLock) bool {
	return o != nil && o.g == l.g && o.cfg.UniqueKey() == l.cfg.UniqueKey()
}

// holdingOf returns the acquisition of l's key that ctx carries, or nil. Every call of an
// owner finds its holding here, and a holding whose lease ran out unseen is found lost
// (lapse).
func (l *DistributedReentrantLock) holdingOf(ctx context.Context) *holding {
	if ctx == nil || l == nil || l.g == nil {
		return nil
	}
	key := l.key
	if key == nil {
		key = ownerKey{l.g, l.cfg.UniqueKey()}
	}
	h, _ := ctx.Value(key).(*holding)
	if h != nil {
		h.st.lapse(h)
	}
	return h
}

// Lock blocks until it holds the lock or ctx ends, and returns the owner context. A deadline
// on ctx gives a timed acquisition; it bounds the wait only, not the holding. If ctx already
// owns the lock, Lock re-enters: it raises the hold count and returns ctx itself when ctx is
// this lock's Owner, else an Owner of this one hold — with ctx's values, and the holding's
// deadline (none) and end — whose Unlock releases that hold (an error matching ErrLockLost if
// the holding was lost), once: its second Unlock is ErrNotHeld (re-entries through that Owner
// itself return it, and it counts them as this one does).
//
// A Lock that gives up returns an error that matches both ErrNotObtained and the context's
// error (context.DeadlineExceeded or context.Canceled), and leaves nothing behind: it has left
// the queue, and an attempt still under way is given back in the background. While Redis
// is unreachable Lock keeps waiting (until ctx ends); the error then also wraps the last
// Redis failure (errors.As finds the *RedisProcessError). On a closed Redis client, or when
// Redis refuses the request for good — an ACL refusal (of a key, a channel, or a command a
// script calls), a command the server does not know, a key of the lock's that holds
// another kind of value (WRONGTYPE), or a fencing counter that holds what dlock never writes
// (docs/fencing.md) — it returns at once, with ErrNotObtained and that failure. A client
// closed while the process waits in line ends the wait as the subscription's connection
// closes with it (at the next ask with WithNotifications(false)); a wait behind a holding of
// this process ends once that holding is passed on or lost. After Close it returns ErrClosed.
// Lock is safe for concurrent use.
func (l *DistributedReentrantLock) Lock(ctx context.Context) (*Owner, error) {
	owned, _, err := l.acquire(ctx, true)
	return owned, l.named(err)
}

// named returns err naming l's key, when it is one of ErrNotObtained and ErrLockLost.
func (l *DistributedReentrantLock) named(err error) error {
	if err == nil || l == nil {
		return err
	}
	return named(err, l.cfg.UniqueKey())
}

// TryLock makes one attempt: it returns an owner context and true if it got the lock (or
// re-entered it), and false with a nil error if the lock is held, by another process or by
// another goroutine of this one, or if goroutines of this process queue for it and may not be
// passed (WithFIFO, or the first has waited over 1 ms, as for Lock) — then without asking
// Redis — or if the lock it got was lost before it could return it, or may be: a ForceRelease
// in this Generator naming the acquisition it got is on its way (Lock then waits on: neither
// returns an Owner whose holding was lost as it was taken). It leaves no trace for other
// processes to see (a place in line that the process held already, after a release that
// expected a goroutine back, is kept for that release's short linger). A Redis failure is
// returned as a *RedisProcessError (an attempt whose reply was lost is given back in the
// background, and a TryLock that finds the key held by such an attempt of this process waits
// for a give-back — until its first try is answered or fails, or ctx ends — and asks once
// more: two attempts then); re-entry on a lost holding returns an error matching
// ErrLockLost. When ctx ends before the attempt's answer (or had ended before
// the call), the error matches both ErrNotObtained and the context's error, as Lock's does.
// After Close it returns ErrClosed.
func (l *DistributedReentrantLock) TryLock(ctx context.Context) (*Owner, bool, error) {
	owned, held, err := l.acquire(ctx, false)
	switch {
	case err == nil && !held:
		return owned, true, nil
	case errors.Is(err, ErrOptimisticLocking) && !errors.Is(err, ErrLockLost):
		return nil, false, nil // (taken, and removed by ForceRelease as it was)
	}
	return nil, false, l.named(err)
}

// acquire is Lock (wait) and TryLock: it returns the new Owner, or held for a TryLock that
// found the lock held, or why not.
func (l *DistributedReentrantLock) acquire(ctx context.Context, wait bool) (*Owner, bool, error) {
	if ctx == nil {
		return nil, false, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if l == nil || l.g == nil || l.g.proc == nil {
		return nil, false, errZeroLock
	}
	if h := l.holdingOf(ctx); h != nil {
		reenter := ctx.Err() == nil // (an ended context counts no hold: refused below)
		one := oneHoldOf(ctx, h)
		h.mu.Lock()
		state, cause := h.state, h.cause
		reenter = reenter && state == holdHeld
		if reenter {
			h.count++
			if !one.add() {
				one = nil // (released already: a context that carries the holding)
			}
		}
		h.mu.Unlock()
		switch {
		case reenter:
			// ctx itself only if it is this lock's own Owner, or an Owner of one hold of it
			// that still holds: the Owner of a MultiLock, of a shared lock or of another key
			// that carries this holding would, on its Unlock, let go of what it holds itself
			// rather than this one hold.
			if one != nil {
				return ctx.(*Owner), false, nil
			}
			if o, ok := ctx.(*Owner); ok && o.multi == nil && o.sh == nil && o.one == nil && l.sameKey(o.l) {
				return o, false, nil
			}
			return &Owner{ctx: h.ctx, vals: ctx, l: l, one: &oneHold{of: h, holds: 1}}, false, nil
		case state == holdLost:
			return nil, false, cause
		case state == holdClosed:
			return nil, false, ErrClosed
		}
		// released: acquire anew (with a context that is still live)
	}
	start := time.Now()
	if err := ctx.Err(); err != nil {
		err = fmt.Errorf("%w: %w", ErrNotObtained, err)
		l.g.observer.NotObtained(NotObtainedEvent{Kind: KindMutex, Config: l.cfg, Reason: reasonOf(err), Err: err})
		return nil, false, err
	}
	for { // (again only when the lock was lost as it was taken)
		st, err := l.g.ref(l.cfg)
		if err != nil {
			l.g.observer.NotObtained(NotObtainedEvent{Kind: KindMutex, Config: l.cfg, Reason: reasonOf(err), Err: err})
			return nil, false, err
		}
		h, held, err := st.acquire(ctx, l.cfg, wait)
		if held {
			st.left()
			l.g.unref(st)
			return nil, true, nil
		}
		if err != nil {
			st.left()
			l.g.unref(st)
			if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) && !errors.Is(err, ErrNotObtained) {
				err = fmt.Errorf("%w: %w", ErrNotObtained, err) // (a try whose context ended on its way, as above)
			}
			if wait && errors.Is(err, ErrNotObtained) {
				l.g.log.Debug("dlock: lock not obtained", zap.String("key", l.cfg.UniqueKey()),
					zap.Duration("waited", time.Since(start)), zap.Error(err))
			}
			if wait || !errors.Is(err, ErrOptimisticLocking) {
				l.g.observer.NotObtained(NotObtainedEvent{Kind: KindMutex, Config: l.cfg, Wait: time.Since(start), Reason: reasonOf(err), Err: err})
			}
			return nil, false, err
		}
		if f := l.g.opts.lent; f != nil {
			f()
		}
		if errors.Is(h.heldErr(), ErrLockLost) {
			// Lost as it was taken, before its Owner was made (told Lost): not returned, so that
			// an Owner that Lock or TryLock returns was live as it returned. Lock waits on; a
			// TryLock reports the lock not obtained.
			if !wait {
				return nil, true, nil
			}
			continue
		}
		l.g.observer.Acquired(AcquireEvent{Kind: KindMutex, Config: l.cfg, Wait: time.Since(start), How: h.how, Token: h.token})
		if l.g.isClosed() { // taken as Close ran: give it back
			if h.end(holdClosed, nil) {
				_ = h.release(context.WithoutCancel(ctx), ErrClosed)
			}
			return nil, false, ErrClosed
		}
		return newOwner(l, h), false, nil
	}
}

// Unlock releases one hold of the lock owned by ctx. When the hold count reaches zero it ends the
// owner context, then passes the lock to the next goroutine of this process that waits (no Redis
// command), or lets the key go in Redis, only if it still holds this acquisition's locker: granted
// to the first live process in line, which is told, or left free (with WithHoldOver, a process
// whose goroutines take the lock again at once keeps it a moment for the one that comes back,
// with no Redis command: see there). Unlock works with an owner context that has been
// cancelled; the Redis call is bounded by the lease, and by ctx's deadline if it has one (a
// context of the owner's made with a timeout): once that passes Unlock returns a
// *RedisProcessError matching context.DeadlineExceeded, and the release goes on in the
// background until the lease runs out.
//
// It returns ErrNotHeld, sending nothing to Redis, when ctx does not own the lock (or holds no
// more holds), ErrClosed for that once the Generator closed (Close released what ctx held); an
// error matching ErrLockLost when the holding was lost (every Unlock of a lost holding says so,
// but one that keeps the key, WithHoldOver, for a loss nothing told the process of yet),
// also when its lease ran out by this process's clock before its lease thread said so (nothing is
// sent then but the give-back of the key, which Redis may keep a little longer); a
// *RedisProcessError when Redis could not be reached (the local hold is released all the same, and
// the release is retried in the background until the lease runs out; on a Cluster client whose
// master was replaced by a completed failover the release goes to the new master within the call
// instead); ErrInvalidConfig for a nil context or on a lock not made by a Generator. Safe for
// concurrent use.
func (l *DistributedReentrantLock) Unlock(ctx context.Context) error {
	bound, stop := deadlineOf(ctx)
	defer stop()
	return l.named(l.unlock(ctx, bound))
}

// unlock is Unlock; with bound, the final release to Redis is waited for only while bound
// lasts (then it goes on in the background, retried until the lease runs out).
func (l *DistributedReentrantLock) unlock(ctx, bound context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	defer runtime.KeepAlive(ctx) // (an Owner: see unlockAlive)
	if l == nil || l.g == nil || l.g.proc == nil {
		return errZeroLock
	}
	h := l.holdingOf(ctx)
	if h == nil {
		if l.g.isClosed() {
			return ErrClosed
		}
		return ErrNotHeld
	}
	one := oneHoldOf(ctx, h)
	if f := l.g.opts.unlocking; f != nil {
		f()
	}
	h.mu.Lock()
	switch h.state {
	case holdLost:
		cause := h.cause
		h.mu.Unlock()
		return l.named(cause)
	case holdClosed:
		h.mu.Unlock()
		return ErrClosed
	case holdReleased:
		h.mu.Unlock()
		return ErrNotHeld
	}
	if !one.spend() { // (an Owner of one hold, released already)
		h.mu.Unlock()
		return ErrNotHeld
	}
	if h.count--; h.count > 0 {
		h.mu.Unlock()
		return nil
	}
	h.state = holdReleased
	h.cancelCtx(context.Canceled) // (with the state: a re-entry through a context of the Owner finds it ended, not free to acquire anew)
	h.mu.Unlock()
	rctx := context.WithoutCancel(ctx)
	if bound != nil {
		rctx = withValues{Context: bound, values: ctx}
	}
	return l.named(h.release(rctx, context.Canceled))
}

// Do runs fn while holding the lock and always releases it, even if fn panics. fn receives a
// context of the owner's — it owns the lock (FencingToken, re-entry) — that ends if the lock is
// lost (its cause matches ErrLockLost) or when ctx ends (at its deadline, DeadlineExceeded;
// cancelled, ctx's cause): ctx bounds fn as it bounds the wait. Do returns Lock's error, or
// fn's error joined with Unlock's; a nil fn is ErrInvalidConfig.
func (l *DistributedReentrantLock) Do(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	owned, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, l.Unlock(owned))
	}()
	fctx, stop := doCtx(ctx, owned)
	defer stop()
	return fn(fctx)
}

// HoldCount returns how many times ctx holds the lock: 0 if it does not own it, or if its
// holding was released, lost or closed.
func (l *DistributedReentrantLock) HoldCount(ctx context.Context) int {
	if h := l.holdingOf(ctx); h != nil {
		if state, count, _ := h.status(); state == holdHeld {
			return count
		}
	}
	return 0
}

// FencingToken returns the fencing token of the acquisition ctx owns: a number larger than
// every token handed out before for this key, to be checked by a downstream store (see
// docs/fencing.md). ok is false when ctx does not own the lock, or its holding was released,
// lost or closed.
func (l *DistributedReentrantLock) FencingToken(ctx context.Context) (token uint64, ok bool) {
	if h := l.holdingOf(ctx); h != nil {
		if state, _, _ := h.status(); state == holdHeld {
			return h.token, true
		}
	}
	return 0, false
}
