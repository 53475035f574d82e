package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
	"github.com/dlockgo/dlock/queue"
	"github.com/dlockgo/dlock/threads"
)

// starvation is how long the first waiter may wait before newcomers stop barging (as in
// sync.Mutex).
const starvation = time.Millisecond

// lockState is what one process knows of one key: its local queue, owner and background
// loops. There is at most one per key per Generator (Generator.states), and it lives while
// anyone holds or waits on the key or background work for it runs (refs), so a message, a
// late attempt or a give-back always meets the state that is live.
//
// The claim is the local half of the lock: a goroutine talks to Redis about the key only while
// holding it, and keeps it while it owns the lock. So at most one goroutine per process asks
// Redis at a time, and one that finds the claim taken waits in the queue without a round trip.
// The claim is about local order only: exclusion rests on Redis, where every acquisition
// writes its own locker.
//
// Wake-ups are counted in epoch: every "the key may be free" signal (a local release, a release
// message, a poll that found the key free, a fresh subscription) adds one and wakes the first
// waiter. A waiter that failed in Redis tries again only after the epoch moved, and one that
// failed while a signal arrived passes the wake-up on, so signals are neither lost nor turned
// into extra round trips.
//
// The key reaches a waiter in one of two ways: its own attempt (lock.lua), or a local release
// that handed the key over in Redis to a new locker made for the next waiter (pending; the
// claim passes with it). Nothing else ever puts a locker of this process under the key.
type lockState struct {
	g       *Generator
	cfg     domain.DLockConfig // of the handle that brought the state into use: poll timing and marks
	channel string             // the release channel
	refs    int                // holdings, waiters and background jobs; guarded by g.mu

	q       queue.Queue
	claim   atomic.Bool
	owner   atomic.Pointer[holding]
	pending atomic.Pointer[handedOver] // handed over in Redis, not yet taken by a waiter; the claim stays held
	marked  atomic.Bool                // this process may have a waiting mark beside the key
	epoch   atomic.Uint64
	wokenBy atomic.Int32           // the How of the latest signal
	forced  atomic.Pointer[string] // the locker ForceRelease in this Generator last deleted
	heard   atomic.Int64           // g.now() when this process last learnt the key's state from Redis
	tenure  atomic.Int64           // g.now() when this process took the key from Redis (hand-overs keep it)

	poller *threads.Poller
	sub    *subscription // the release channel's subscription while watching; guarded by the poller's lock
}

// handedOver is a key handed over in Redis to a locker made for the next local waiter.
type handedOver struct {
	entity domain.DLockEntity
	cfg    domain.DLockConfig // with the lease the hand-over set
}

func newLockState(g *Generator, cfg domain.DLockConfig) *lockState {
	st := &lockState{g: g, cfg: cfg, channel: processor.ReleaseChannel(cfg)}
	st.poller = threads.NewPoller(g.done, cfg.Lease()/10, cfg.Lease()/6, st, &g.group)
	return st
}

// mayBarge reports whether a newcomer may try before the queued goroutines.
func (st *lockState) mayBarge() bool {
	if st.g.opts.fifo {
		return !st.q.HasWaiters()
	}
	f := st.q.First()
	return f == nil || time.Since(f.Since()) < starvation
}

// errLateReply reports an acquisition whose reply came after its lease had run out.
var errLateReply = errors.New("the reply came after the lease had run out")

// errBusy is TryLock's answer when a goroutine of this process holds or is taking the lock.
var errBusy = fmt.Errorf("%w: held or being taken by this process", ErrOptimisticLocking)

// acquire takes the lock for an acquisition made with cfg (its handle's lease), waiting if
// wait is set.
func (st *lockState) acquire(ctx context.Context, cfg domain.DLockConfig, wait bool) (*holding, error) {
	var (
		tried   bool   // this goroutine has failed in Redis ...
		triedAt uint64 // ... at this epoch
		lastErr error
	)
	if (!wait || st.mayBarge()) && st.claim.CompareAndSwap(false, true) {
		how := HowAttempt
		if st.q.HasWaiters() {
			how = HowBarge
		}
		h, e, err := st.tryRemote(ctx, cfg, wait)
		if h != nil {
			h.how = how
		}
		if h != nil || !wait {
			return h, err
		}
		if ctx.Err() != nil {
			return nil, notObtained(ctx.Err(), err)
		}
		tried, triedAt, lastErr = true, e, err
	} else if !wait {
		return nil, errBusy
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
		first := st.q.IsFirst(n)
		if p := st.pending.Load(); p != nil && first && st.pending.CompareAndSwap(p, nil) {
			// handed over by the previous local owner: the claim is ours
			if !expired(&p.entity) {
				st.q.SetHead(n)
				h := st.own(ctx, cfg, p.entity)
				h.how = HowHandOver
				return h, nil
			}
			st.settle(&p.entity, p.cfg) // it waited past its lease: not an acquisition
		}
		if first && (!tried || st.epoch.Load() != triedAt) && st.claim.CompareAndSwap(false, true) {
			how := How(st.wokenBy.Load())
			h, e, err := st.tryRemote(wctx, cfg, true) // a Close ends the attempt too
			if h != nil {
				h.how = how
				st.q.SetHead(n)
				return h, nil
			}
			tried, triedAt, woken = true, e, false
			if redisFault(err) || !redisFault(lastErr) {
				lastErr = err // an attempt cut short by the context does not hide a Redis failure
			}
			continue // the attempt may have ended with the context
		}
		if st.owner.Load() == nil && st.pending.Load() == nil {
			st.watch()
		}
		if n.Park(wctx) != nil {
			break
		}
		woken = true
	}
	st.q.Cancel(n, woken)
	st.abandon()
	if ctx.Err() == nil {
		return nil, ErrClosed
	}
	return nil, notObtained(ctx.Err(), lastErr)
}

func notObtained(ctxErr, last error) error {
	if redisFault(last) {
		return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotObtained, ctxErr, last)
	}
	return fmt.Errorf("%w: %w", ErrNotObtained, ctxErr)
}

// tryRemote asks Redis for the key with a new locker; the caller holds the claim. On success
// the claim stays held by the new owner. It returns the epoch read before asking, so the
// caller knows which signals its failure already accounts for.
//
// An attempt whose outcome is unknown (its reply was lost, or the caller gave up before it
// came back, or came after its own lease had run out) may have taken the key: it is settled
// (given back in the background; no copy of it that reaches Redis later can take the key),
// and the waiters are signalled after that.
func (st *lockState) tryRemote(ctx context.Context, cfg domain.DLockConfig, wait bool) (*holding, uint64, error) {
	e := st.epoch.Load()
	ent := domain.DLockEntity{Locker: st.g.newLocker(), Status: domain.StatusProcessing, LockTime: time.Now(), Lease: cfg.Lease()}
	att := ent // written by the request, which may outlive this call
	err, late := st.call(ctx, func(ctx context.Context) error { return st.g.proc.Lock(ctx, &att, cfg, wait) })
	st.heard.Store(st.g.now())
	if late {
		st.settle(&ent, cfg)
		return nil, e, notTakenErr(ctx.Err(), nil)
	}
	ent = att
	if err == nil && expired(&ent) {
		// The reply came after the lease, counted from the request, had run out: the key may
		// be someone else's by now. Not an acquisition.
		err = &RedisProcessError{Op: "lock", Key: cfg.UniqueKey(), Err: errLateReply}
	}
	switch {
	case err == nil && ctx.Err() == nil:
		if wait {
			st.marked.Store(false) // lock.lua served our mark
		}
		st.tenure.Store(st.g.now())
		return st.own(ctx, cfg, ent), e, nil
	case errors.Is(err, ErrOptimisticLocking):
		if wait {
			st.marked.Store(true)
		}
		st.claim.Store(false)
		if st.epoch.Load() != e {
			st.q.Wake() // a signal came while we were asking: pass it on
		}
		return nil, e, err
	}
	st.g.log.Debug("dlock: attempt given back", zap.String("key", cfg.UniqueKey()),
		zap.String("locker", ent.Locker), zap.NamedError("attempt", err), zap.NamedError("context", ctx.Err()))
	st.settle(&ent, cfg)
	if ctx.Err() != nil {
		return nil, e, notTakenErr(ctx.Err(), err)
	}
	return nil, e, err
}

// call is Generator.call. Every request is safe to reach Redis late: the caller settles what
// it may have done (settle).
func (st *lockState) call(ctx context.Context, f func(context.Context) error) (err error, late bool) {
	return st.g.call(ctx, f)
}

// redisFailed reports whether err is a failed Redis round trip: the request's outcome is
// unknown, unlike an answer such as ErrOptimisticLocking.
func redisFailed(err error) bool {
	var pe *RedisProcessError
	return errors.As(err, &pe)
}

// redisFault reports whether err says that Redis failed — not merely that the caller's
// context ended before the answer came, which is the caller's deadline, not a fault.
func redisFault(err error) bool {
	var pe *RedisProcessError
	return errors.As(err, &pe) && !errors.Is(pe.Err, context.DeadlineExceeded) && !errors.Is(pe.Err, context.Canceled)
}

// expired reports whether e's lease, counted from its request, has run out.
func expired(e *domain.DLockEntity) bool { return time.Since(e.LockTime) >= e.Lease }

// notTakenErr is an attempt's error when the caller's context ended: the context's error, with
// the attempt's own error if it says more.
func notTakenErr(ctxErr, err error) error {
	if err == nil || errors.Is(err, ctxErr) {
		if err != nil {
			return err
		}
		return ctxErr
	}
	return fmt.Errorf("%w (attempt: %w)", ctxErr, err)
}

// own records a successful acquisition made with cfg and starts renewing it with cfg's lease.
// The owner context keeps parent's values but not its deadline or cancellation.
func (st *lockState) own(parent context.Context, cfg domain.DLockConfig, ent domain.DLockEntity) *holding {
	h := &holding{st: st, cfg: cfg, entity: ent, count: 1, leaseNow: cfg.Lease()}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	h.ctx, h.cancel = context.WithValue(ctx, ownerKey{st.g, cfg.UniqueKey()}, h), cancel
	st.owner.Store(h) // before the expander starts, so that a loss finds h as the owner
	st.poller.Stop()
	exp := st.startRenewal(h, cfg, ent.LockTime, ent.Lease)
	h.mu.Lock()
	h.exp = exp
	ended := h.state != holdHeld
	h.mu.Unlock()
	if ended { // released or closed already (Close ran meanwhile)
		exp.Stop()
	}
	return h
}

// lose ends h as lost, unless it ended otherwise first: the owner context is cancelled with
// cause, the local queue moves on, and the key is given back in case a renewal whose answer
// was lost kept it.
func (st *lockState) lose(h *holding, cause error) {
	if !h.end(holdLost, cause) {
		return
	}
	st.g.log.Warn("dlock: lock lost", zap.String("key", h.cfg.UniqueKey()),
		zap.String("locker", h.entity.Locker), zap.Error(cause))
	cur := h.current()
	st.g.observer.Lost(LossEvent{Config: cur, Token: h.entity.Token, Held: time.Since(h.entity.LockTime), Cause: cause})
	h.cancel(cause)
	st.owner.CompareAndSwap(h, nil)
	st.settle(&h.entity, cur) // frees the claim; signals once the key is given back
	st.signal()
	st.idle()
	st.g.unref(st)
}

// release lets h go after its final Unlock (cause nil) or a Close (cause ErrClosed); the caller
// has ended h. It stops the renewals and either hands the key over to the next local waiter
// in one round trip (handover.lua) or deletes it if it still holds h's locker; it ends the
// owner context and wakes the next waiter. The Redis call is bounded by ctx and the lease.
func (st *lockState) release(ctx context.Context, h *holding, cause error) error {
	h.stopRenewal()
	h.cancel(cause)    // the holding is told before the key can go to anyone else
	cur := h.current() // with the lease Extend set
	rctx, cancel := context.WithTimeout(ctx, cur.Lease())
	defer cancel()
	var err error
	if cause == nil && st.g.opts.handOff > 0 && st.q.HasWaiters() {
		err = st.handOver(rctx, h)
	} else {
		var late bool
		ent := h.entity
		err, late = st.call(rctx, func(ctx context.Context) error { return st.g.proc.Unlock(ctx, &ent, cur) })
		st.owner.CompareAndSwap(h, nil)
		if late || redisFailed(err) {
			st.settle(&h.entity, cur) // perhaps not run: try again in the background
		} else {
			st.claim.Store(false)
			st.signal()
		}
		if late {
			err = &RedisProcessError{Op: "unlock", Key: h.cfg.UniqueKey(), Err: err}
		}
	}
	if errors.Is(err, ErrOptimisticLocking) {
		st.g.log.Warn("dlock: lock lost before release", zap.String("key", h.cfg.UniqueKey()), zap.Error(err))
		err = fmt.Errorf("%w: found at release: %w", ErrLockLost, err)
		h.foundLost(err)
		st.g.observer.Lost(LossEvent{Config: cur, Token: h.entity.Token, Held: time.Since(h.entity.LockTime), Cause: err})
	}
	st.g.observer.Released(ReleaseEvent{Config: cur, Token: h.entity.Token, Held: time.Since(h.entity.LockTime), Err: err})
	st.idle()
	st.g.unref(st)
	if err != nil && !errors.Is(err, ErrLockLost) {
		st.g.log.Debug("dlock: release failed; retried in the background, else the key expires with its lease", zap.Error(err))
	}
	return err
}

// handOver passes the key from h to a new locker made for the first local waiter (pending),
// with that waiter's lease, unless another process has waited while this one kept the lock
// for longer than the hand-off limit: then the key is reserved for that process, which takes
// it with its own attempt, and this process's mark is left in its place; its waiters wait for
// the next release (or the poller, should the reservation go untaken).
func (st *lockState) handOver(ctx context.Context, h *holding) error {
	next := domain.DLockEntity{Locker: st.g.newLocker(), Status: domain.StatusProcessing, LockTime: time.Now(), Lease: h.cfg.Lease()}
	ncfg := h.cfg
	if f := st.q.First(); f != nil && f.Lease != ncfg.Lease() {
		if c, err := ncfg.WithLease(f.Lease); err == nil {
			ncfg, next.Lease = c, f.Lease
		}
	}
	yield := st.g.now()-st.tenure.Load() >= int64(st.g.opts.handOff)
	to := next // written by the request, which may outlive this call
	err, late := st.call(ctx, func(ctx context.Context) error {
		return st.g.proc.HandOver(ctx, &h.entity, &to, ncfg, yield)
	})
	if !late {
		next = to
	}
	if err == nil && expired(&next) {
		late = true // the new lease ran out before the reply came: as good as unknown
	}
	st.owner.CompareAndSwap(h, nil)
	switch {
	case late || redisFailed(err):
		// Unknown outcome: the key holds h's locker, or next's, or neither. Settle both
		// (a late hand-over is then refused, and a key it wrote is deleted).
		from, fromCfg := h.entity, h.current()
		st.claim.Store(false)
		st.background(func() {
			st.giveBack(&next, ncfg)
			st.giveBack(&from, fromCfg)
			st.signal()
		})
		if err == nil || late {
			err = &RedisProcessError{Op: "hand-over", Key: h.cfg.UniqueKey(), Err: errors.Join(err, errLateReply)}
		}
		return err
	case err == nil:
		st.pending.Store(&handedOver{entity: next, cfg: ncfg}) // the claim stays held for whoever takes it
		st.q.Wake()
		st.abandon() // in case the waiters left meanwhile
		return nil
	case errors.Is(err, processor.ErrYielded):
		st.g.log.Debug("dlock: released to a waiting process", zap.String("key", h.cfg.UniqueKey()))
		st.heard.Store(st.g.now()) // we know who the key is for: no poll needed just now
		st.marked.Store(true)
		st.claim.Store(false)
		st.watch()
		if !st.q.HasWaiters() { // the waiters left meanwhile: the last one may have missed the watch
			st.idle()
		}
		return nil
	}
	st.claim.Store(false)
	st.signal()
	return err
}

// abandon gives back a key handed over to a local waiter that no waiter is left to take, or
// wakes the waiter that is. Waiters call it when they leave, hand-overs after they land: of a
// waiter leaving and a key landing at the same moment, at least one sees the other.
func (st *lockState) abandon() {
	if st.pending.Load() == nil {
		return
	}
	if st.q.HasWaiters() {
		st.q.Wake()
		return
	}
	if p := st.pending.Load(); p != nil && st.pending.CompareAndSwap(p, nil) {
		st.settle(&p.entity, p.cfg)
	}
}

// settle gives e back in the background — an acquisition this process will not use, or whose
// outcome is unknown — and lets the claim go at once (the caller holds it); the waiters are
// signalled once e is settled. Exclusion does not wait for it: the key only ever holds e's
// own locker, and no request of e can take the key once e is settled.
func (st *lockState) settle(e *domain.DLockEntity, cfg domain.DLockConfig) {
	ent := *e
	st.claim.Store(false)
	st.background(func() {
		st.giveBack(&ent, cfg)
		st.signal()
	})
}

// giveBack deletes the key if it holds e's locker, and settles e (release.lua): a request of
// e that reaches Redis later cannot take the key. A Redis failure is retried every lease/10
// for a lease (by then the key has expired, since every request of e was sent before); once
// Close has begun it is not retried.
func (st *lockState) giveBack(e *domain.DLockEntity, cfg domain.DLockConfig) {
	lease := cfg.Lease()
	until := time.Now().Add(lease)
	for {
		rctx, cancel := context.WithTimeout(st.g.clean, lease)
		ent := *e
		err, _ := st.call(rctx, func(ctx context.Context) error { return st.g.proc.Unlock(ctx, &ent, cfg) })
		cancel()
		if err == nil || errors.Is(err, ErrOptimisticLocking) {
			return
		}
		if time.Now().After(until) {
			st.g.log.Debug("dlock: give-back failed; the key expires with its lease", zap.Error(err))
			return
		}
		select {
		case <-st.g.done.Done():
			return
		case <-time.After(lease / 10):
		}
	}
}

// signal says the key may be free: the first waiter will try.
func (st *lockState) signal() { st.signalBy(HowRetry) }

// signalBy is signal, saying what sent it.
func (st *lockState) signalBy(how How) {
	st.wokenBy.Store(int32(how))
	st.epoch.Add(1)
	st.q.Wake()
}

// watch makes sure a waiting process hears of releases: the retry poller runs and, with
// notifications on, the release channel is subscribed.
func (st *lockState) watch() {
	st.poller.Start(func() {
		if st.g.notes != nil && st.sub == nil {
			st.sub = st.g.notes.subscribe(st)
		}
	})
}

// idle stops watching the key once no goroutine of this process waits on the lock. Every
// waiter and holding calls it before it lets its reference to the state go.
func (st *lockState) idle() {
	st.poller.Locked(func(bool) {
		if !st.q.HasWaiters() {
			st.unwatch()
		}
	})
}

// unwatch withdraws this process's waiting mark and the subscription. It runs under the
// poller's lock; the Redis calls run in the background (keeping the state alive), so a waiter
// that gives up during a partition is not held by them.
func (st *lockState) unwatch() {
	marked, sub := st.marked.Swap(false), st.sub
	st.sub = nil
	if !marked && sub == nil {
		return
	}
	st.background(func() {
		if marked {
			rctx, cancel := context.WithTimeout(st.g.clean, st.cfg.Lease())
			if err, _ := st.call(rctx, func(ctx context.Context) error { return st.g.proc.Unmark(ctx, st.cfg) }); err != nil {
				st.g.log.Debug("dlock: unmark failed; the mark expires", zap.Error(err))
			}
			cancel()
		}
		if sub != nil {
			st.g.notes.unsubscribe(sub)
		}
	})
}

// background runs f in the generator's group (inline once the group is closed), keeping the
// state alive until f returns.
func (st *lockState) background(f func()) {
	st.g.hold(st)
	if !st.g.group.Go(func() {
		defer st.g.unref(st)
		f()
	}) {
		f()
		st.g.unref(st)
	}
}

// Waiting implements threads.PollTarget; it runs under the poller's lock.
func (st *lockState) Waiting() bool {
	if !st.q.HasWaiters() {
		if st.g.lookup(st.cfg.UniqueKey()) == st { // a dropped state's mark is the live one's
			st.unwatch()
		}
		return false
	}
	return st.owner.Load() == nil && st.pending.Load() == nil
}

// Poll implements threads.PollTarget: it checks the key unless this process heard of it within
// the last poll interval (a failed attempt or a release message, when notifications are on),
// and signals when the key is free.
func (st *lockState) Poll(ctx context.Context) {
	if st.g.notes != nil && st.g.now()-st.heard.Load() < int64(st.cfg.Lease()/6) {
		return
	}
	free, err := st.g.proc.IsFree(ctx, st.cfg)
	if err != nil {
		st.g.log.Debug("dlock: poll failed", zap.Error(err))
		return
	}
	st.heard.Store(st.g.now())
	if free {
		st.signalBy(HowPolled)
	} else {
		st.marked.Store(true)
	}
}
