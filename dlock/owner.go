package dlock

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Owner is what Lock and TryLock return: the owner context of one acquisition, which can
// release itself. It is a context.Context that carries the ownership (pass it, or a context
// derived from it, to Lock for re-entry, to Unlock, HoldCount, FencingToken and Extend); it
// keeps the values of the context given to Lock but not its deadline or cancellation, and it
// ends when the lock is released (context.Cause is context.Canceled), lost (the cause matches
// ErrLockLost) or closed (the cause is ErrClosed).
//
// An Owner that the program drops without its final Unlock is found by the garbage collector
// and released, with an error logged that names the key (WithLogger; by default nothing is
// logged): a forgotten Unlock costs the lock until the next collection, not for the life of
// the process. (A context derived from an Owner and never cancelled keeps it reachable, so
// cancel what you derive.)
//
// A nil *Owner, or a zero one, is a context that is never done and owns nothing.
type Owner struct {
	ctx context.Context // the holding's context, or a context derived from it
	l   *DistributedReentrantLock

	// A MultiLock's Owner: the Owner of each part, what ends its own context, and how many
	// times it holds them (it ends when its last hold is released).
	multi *MultiLock
	parts []*Owner
	stops []func()
	end   context.CancelCauseFunc
	holds atomic.Int32

	sh *shareOwner // an Owner of a read-write lock's side or of a semaphore's permits

	one *oneHold // an Owner of one re-entry hold (nil for one that stands for all its holds)
	// vals, for an Owner of one hold: the context given to Lock, whose values it keeps (it
	// carries the holding, and what the program added since the holding was taken); ctx, the
	// holding's, gives its deadline, cancellation and cause.
	vals context.Context
}

// cancelCtxKey is the key under which package context finds a context's cancellation
// (context.Cause and a derived context look it up through Value): an Owner of one hold looks
// it up in its holding's context, not in vals. Found once by asking Cause of a context that
// records the key it is asked for.
var cancelCtxKey = func() any {
	p := &keyProbe{Context: context.Background()}
	_ = context.Cause(p)
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Err() error { return context.Canceled }

func (p *keyProbe) Value(key any) any {
	p.key = key
	return nil
}

// oneHold is what an Owner of one hold carries: the Owner that Lock returns when it re-enters
// through a context other than the lock's own Owner (one derived from it, or another lock's
// Owner that carries the holding) stands for that one hold, and for the holds of re-entries
// through it, so that an Unlock through it once too often is ErrNotHeld rather than the
// release of a hold of the Owner outside it. Only the Owner itself counts so: a context
// derived from it, passed to Lock and then to Unlock, re-enters and releases as any context
// that carries the holding does.
type oneHold struct {
	of    any    // the holding (*holding) or shared owner (*shareOwner) it holds
	outer *Owner // the family's holding's own Owner, kept reachable (its collection lets the holding go)
	holds int    // its holds not released yet; guarded by the holding's mutex (holding.mu, sharedState.mu)
}

// oneHoldOf returns the oneHold of ctx when ctx is an Owner of one hold of of, else nil.
func oneHoldOf(ctx context.Context, of any) *oneHold {
	if o, ok := ctx.(*Owner); ok && o.one != nil && o.one.of == of {
		return o.one
	}
	return nil
}

// add counts one more hold through oh; false if it holds none (released already), or is nil.
// The caller holds the holding's mutex.
func (oh *oneHold) add() bool {
	if oh == nil || oh.holds <= 0 {
		return false
	}
	oh.holds++
	return true
}

// spend releases one hold of oh; false if it holds none. A nil oneHold has any number. The
// caller holds the holding's mutex.
func (oh *oneHold) spend() bool {
	if oh == nil {
		return true
	}
	if oh.holds <= 0 {
		return false
	}
	oh.holds--
	return true
}

// newOwner returns the Owner of a fresh acquisition h, made through l, and arranges for h
// to be released if the program drops it without Unlock. Nothing the library keeps refers
// to the Owner, so it becomes unreachable exactly when the program lets go of it.
//
// unlockAlive: a program that unlocks an Owner often lets go of it as it calls Unlock, and the
// collector may find it unreachable once Unlock has read what it needs from it, before Unlock
// took the holding's mutex: the clean-up then released the holding first, logged it dropped
// without Unlock, and Unlock said ErrNotHeld. Every Unlock keeps the Owner (or the context it
// was given) reachable until it returns (runtime.KeepAlive).
func newOwner(l *DistributedReentrantLock, h *holding) *Owner {
	o := &Owner{ctx: h.ctx, l: l}
	runtime.AddCleanup(o, func(h *holding) { h.st.dropped(h) }, h)
	return o
}

// Deadline implements context.Context: an owner context has no deadline.
func (o *Owner) Deadline() (time.Time, bool) {
	if o == nil || o.ctx == nil { // (a zero Owner: a context that never ends)
		return time.Time{}, false
	}
	return o.ctx.Deadline()
}

// Done implements context.Context: it is closed when the holding is released, lost or closed.
func (o *Owner) Done() <-chan struct{} {
	if o == nil || o.ctx == nil {
		return nil
	}
	return o.ctx.Done()
}

// Err implements context.Context. A holding whose lease ran out by this process's clock is
// found lost here, as by every call of its owner, also before its timer says so (a loaded
// machine runs it late): a holder that asks Err before it acts is not told "held" past its
// lease.
func (o *Owner) Err() error {
	if o == nil || o.ctx == nil {
		return nil
	}
	if err := o.ctx.Err(); err != nil || !o.lapsed() {
		return err
	}
	return context.Canceled // (as o.ctx says once the loss reaches it)
}

// lapsed finds the holding of o lost if its lease ran out unseen, and reports whether it has
// ended.
func (o *Owner) lapsed() bool {
	switch {
	case o.multi != nil:
		for _, p := range o.parts {
			if p.Err() != nil {
				return true
			}
		}
		return false
	case o.sh != nil:
		st := o.sh.st
		st.mu.Lock()
		defer st.mu.Unlock()
		st.lapseLocked(o.sh.hold)
		return o.sh.hold.ctx.Err() != nil
	case o.l != nil:
		h := o.l.holdingOf(o)
		return h != nil && h.ctx.Err() != nil
	}
	return false
}

// Value implements context.Context.
func (o *Owner) Value(key any) any {
	if o == nil || o.ctx == nil {
		return nil
	}
	if o.vals != nil && cancelCtxKey != nil && key != cancelCtxKey { // (no key found: the holding's values, and a test fails)
		return o.vals.Value(key)
	}
	return o.ctx.Value(key)
}

// Unlock releases one hold of the lock: it is the lock's Unlock(o), with the same errors (a
// MultiLock's Owner: MultiLock.Unlock; a read-write lock's: RWLock.Unlock; a semaphore's:
// Semaphore.Release).
func (o *Owner) Unlock() error {
	if o == nil || (o.ctx == nil && o.multi == nil && o.sh == nil) {
		return ErrNotHeld
	}
	if o.multi != nil {
		return o.multi.Unlock(o)
	}
	if o.sh != nil {
		return o.sh.unlock(o)
	}
	return o.l.Unlock(o)
}

// unlockWithin is Unlock, waiting for what its final hold lets go of only while bound lasts:
// the release goes on in the background (retried until its lease runs out), and the error
// says so. A MultiLock that gives up lets go of its parts so, within the caller's deadline.
func (o *Owner) unlockWithin(bound context.Context) error {
	defer runtime.KeepAlive(o) // (see unlockAlive)
	switch {
	case o == nil || (o.ctx == nil && o.multi == nil && o.sh == nil):
		return ErrNotHeld
	case o.multi != nil:
		return o.multi.Unlock(o)
	case o.sh != nil:
		return named(o.sh.unlock1(oneHoldOf(o, o.sh), bound), o.sh.st.cfg.UniqueKey())
	}
	return o.l.unlock(o, bound)
}

// deadlineOf returns the bound of an Unlock given ctx: ctx's deadline, if it has one (a context
// of the owner's made with a timeout), else nil (the lease bounds the wait). Not ctx's
// cancellation: the final Unlock ends its owner context, and every context made from it,
// before it lets go in Redis.
func deadlineOf(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		return nil, func() {}
	}
	d, ok := ctx.Deadline()
	if !ok {
		return nil, func() {}
	}
	return context.WithDeadline(context.WithoutCancel(ctx), d)
}

// doCtx returns the context Do runs its function with: one of owned (it owns what owned
// holds, and ends when owned does, with its cause) that also ends when ctx does — at ctx's
// deadline with DeadlineExceeded (on a timer of its own, which may fire before ctx's: ctx's
// own cause for it is not known yet), else with ctx's cause — so the caller's deadline bounds
// the function as it bounded the wait. Its Err, as owned's, finds the holding lost once its
// lease ran out by this process's clock. stop lets it go.
func doCtx(ctx context.Context, owned *Owner) (fctx context.Context, stop func()) {
	fctx, cancel := context.WithCancelCause(owned)
	cancelAt := func() {}
	if d, ok := ctx.Deadline(); ok { // (Err then says DeadlineExceeded, as ctx's does)
		fctx, cancelAt = context.WithDeadline(fctx, d)
	}
	unwatch := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) { // (else fctx's own deadline ends it, at the same time)
			cancel(context.Cause(ctx))
		}
	})
	return doContext{fctx, owned}, func() { unwatch(); cancelAt(); cancel(context.Canceled) }
}

// doContext is the context of Do's function: its Err asks owned first whether the holding
// lapsed (Owner.Err), so that a function that asks before it acts is not told "held" past its
// lease while the lease thread runs late.
type doContext struct {
	context.Context
	owned *Owner
}

func (c doContext) Err() error {
	if err := c.Context.Err(); err != nil || !c.owned.lapsed() {
		return err
	}
	return context.Canceled // (as the context says once the loss reaches it)
}

// String names the context, for logs.
func (o *Owner) String() string {
	if o == nil {
		return "dlock.Owner(nil)"
	}
	if o.multi != nil {
		keys := make([]string, len(o.multi.parts))
		for i, p := range o.multi.parts {
			keys[i] = p.Config().UniqueKey()
		}
		return "dlock.Owner(" + strings.Join(keys, ", ") + ")"
	}
	if o.sh != nil {
		return "dlock.Owner(" + o.sh.st.key + ")"
	}
	if o.l == nil {
		return "dlock.Owner(zero)"
	}
	return "dlock.Owner(" + o.l.cfg.UniqueKey() + ")"
}

// dropped runs when the Owner of h was collected. If h is still held, the program lost it
// without its final Unlock: it is released as Unlock would, and the leak is logged.
func (st *lockState) dropped(h *holding) {
	if !h.end(holdReleased, nil) {
		return
	}
	st.g.log.Error("dlock: lock released by the garbage collector: its owner was dropped without Unlock",
		zap.String("key", h.cfg.UniqueKey()), zap.Uint64("token", h.token))
	st.background(func() { _ = h.release(st.g.clean, context.Canceled) })
}

// endsWith is an acquisition's owner context, its cancellation and what ends with it on the
// same goroutine: the Owners of the MultiLocks it is a part of. (context.AfterFunc would tell
// them a goroutine's hop later: after the release that follows had been sent.)
type endsWith struct {
	ctx       context.Context // the owner context
	cancelCtx context.CancelCauseFunc

	endMu sync.Mutex
	also  []*context.CancelCauseFunc // guarded by endMu
	ended bool                       // guarded by endMu
}

// cancel ends the owner context with cause (the first cause stays) and, before it returns,
// what ends with it.
func (e *endsWith) cancel(cause error) {
	e.cancelCtx(cause)
	e.endMu.Lock()
	also := e.also
	e.also, e.ended = nil, true
	e.endMu.Unlock()
	for _, f := range also {
		(*f)(context.Cause(e.ctx))
	}
}

// alsoEnd makes f end with the owner context (at once if it has ended), until the returned
// function is called.
func (e *endsWith) alsoEnd(f context.CancelCauseFunc) (remove func()) {
	e.endMu.Lock()
	if e.ended {
		e.endMu.Unlock()
		f(context.Cause(e.ctx))
		return func() {}
	}
	p := &f
	e.also = append(e.also, p)
	e.endMu.Unlock()
	return func() {
		e.endMu.Lock()
		e.also = slices.DeleteFunc(e.also, func(q *context.CancelCauseFunc) bool { return q == p })
		e.endMu.Unlock()
	}
}
