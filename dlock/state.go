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

// lockState is what one process knows of one lock: its local queue, owner and background
// loops. It is shared by every handle with the same key while anyone holds or waits on it.
//
// The claim is the local half of the lock: a goroutine asks Redis only while holding it, and
// keeps it while it owns the lock. So at most one goroutine per process talks to Redis about
// the key at a time, and a goroutine that finds the claim taken waits in the queue without a
// round trip.
//
// Wake-ups are counted in epoch: every "the key may be free" signal (a local release, a release
// message, a poll that found the key free, a fresh subscription) adds one and wakes the first
// waiter. A waiter that failed in Redis tries again only after the epoch moved, and one that
// failed while a signal arrived passes the wake-up on, so signals are neither lost nor turned
// into extra round trips.
//
// The key can also reach this process without an attempt: handed over by a local release
// (pending, with the claim kept for the first waiter) or granted by another process's release
// (grant, taken or given back only by the claim holder). docs/design.md tells the whole story.
type lockState struct {
	g       *Generator
	cfg     domain.DLockConfig // of the handle that brought the lock into use; every acquisition uses its lease
	channel string             // the release channel
	refs    int                // holders and waiters; guarded by g.mu

	q       queue.Queue
	claim   atomic.Bool
	owner   atomic.Pointer[holding]
	pending atomic.Pointer[domain.DLockEntity] // handed over in Redis, not yet taken by a waiter; the claim stays held
	grant   atomic.Pointer[domain.DLockEntity] // granted by another process's release; only the claim holder takes or releases it
	last    atomic.Uint64                      // the largest fencing token this process has owned the key with
	marked  atomic.Bool                        // this process may have a waiting mark beside the key
	epoch   atomic.Uint64
	heard   atomic.Int64 // g.now() when this process last learnt the key's state from Redis
	tenure  atomic.Int64 // g.now() when this process took the key from Redis (hand-overs keep it)

	poller *threads.Poller
	sub    *subscription // the release channel's subscription while watching; guarded by the poller's lock
}

// holding is one acquisition: from the Redis write to the final Unlock.
type holding struct {
	st       *lockState
	entity   domain.DLockEntity
	count    atomic.Int32 // holds; written by the owner context's users
	released atomic.Bool  // set once by whoever releases (Unlock or Close)
	ctx      context.Context
	cancel   context.CancelCauseFunc
	exp      *threads.Expander
}

func newLockState(g *Generator, cfg domain.DLockConfig) *lockState {
	st := &lockState{g: g, cfg: cfg, channel: processor.ReleaseChannel(cfg)}
	st.poller = threads.NewPoller(g.ctx, cfg.Lease()/10, cfg.Lease()/6, st, &g.group)
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

// acquire takes the lock, waiting if wait is set.
func (st *lockState) acquire(ctx context.Context, wait bool) (*holding, error) {
	var (
		tried   bool   // this goroutine has failed in Redis ...
		triedAt uint64 // ... at this epoch
		lastErr error
	)
	if (!wait || st.mayBarge()) && st.claim.CompareAndSwap(false, true) {
		h, e, err := st.tryRemote(ctx)
		if h != nil || !wait {
			return h, err
		}
		if ctx.Err() != nil {
			return nil, notObtained(ctx.Err(), err)
		}
		tried, triedAt, lastErr = true, e, err
	} else if !wait {
		return nil, fmt.Errorf("%w: held or being taken by this process", ErrOptimisticLocking)
	}

	// Wait in the queue; a Close ends the wait too.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(st.g.ctx, stop)()

	n := queue.NewNode()
	st.q.Enqueue(n)
	woken := false // a wake-up was taken from the permit and not yet acted on
	for wctx.Err() == nil {
		if p := st.pending.Load(); p != nil && st.q.IsFirst(n) && st.pending.CompareAndSwap(p, nil) {
			st.q.SetHead(n) // handed over by the previous local owner: the claim is ours
			return st.own(ctx, *p), nil
		}
		if st.q.IsFirst(n) && (!tried || st.epoch.Load() != triedAt) && st.claim.CompareAndSwap(false, true) {
			h, e, err := st.tryRemote(ctx)
			if h != nil {
				st.q.SetHead(n)
				return h, nil
			}
			tried, triedAt, lastErr, woken = true, e, err, false
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
	var pe *RedisProcessError
	if errors.As(last, &pe) {
		return fmt.Errorf("%w: %w (last attempt: %v)", ErrNotObtained, ctxErr, last)
	}
	return fmt.Errorf("%w: %w", ErrNotObtained, ctxErr)
}

// tryRemote asks Redis for the key; the caller holds the claim. On success the claim stays
// held by the new owner. It returns the epoch read before asking, so the caller knows which
// signals its failure already accounts for.
func (st *lockState) tryRemote(ctx context.Context) (*holding, uint64, error) {
	e := st.epoch.Load()
	if g := st.takeGrant(); g != nil {
		if ctx.Err() == nil {
			st.tenure.Store(st.g.now())
			return st.own(ctx, *g), e, nil
		}
		st.grant.Store(g) // for another waiter, or for settleGrant to release
	}
	ent := domain.DLockEntity{Locker: st.g.newLocker(), Status: domain.StatusProcessing, LockTime: time.Now()}
	late, err := st.attempt(ctx, &ent)
	st.heard.Store(st.g.now())
	if late {
		return nil, e, notTakenErr(ctx.Err(), nil)
	}
	if err == nil && ctx.Err() == nil {
		st.tenure.Store(st.g.now())
		return st.own(ctx, ent), e, nil
	}
	if errors.Is(err, ErrOptimisticLocking) {
		st.marked.Store(true)
		if g := st.takeGrant(); g != nil && ctx.Err() == nil { // granted while we asked
			st.tenure.Store(st.g.now())
			return st.own(ctx, *g), e, nil
		}
	} else if ctx.Err() != nil {
		// Granted as the caller gave up, or the answer was lost with the cancellation: give
		// the key back (the script deletes only our own locker; if it cannot, the key expires
		// with its lease), keeping the claim until then, and tell the waiters.
		if err == nil {
			st.noteToken(ent.Token)
		}
		st.background(func() {
			st.giveUp(&ent)
			st.dropClaim()
			st.signal()
		})
		return nil, e, notTakenErr(ctx.Err(), err)
	}
	st.dropClaim()
	if st.epoch.Load() != e {
		st.q.Wake() // a signal came while we were asking: pass it on
	}
	return nil, e, err
}

// attempt runs lock.lua for ent, honouring ctx even when the client does not (go-redis ignores
// context deadlines unless ContextTimeoutEnabled is set): if ctx ends first, attempt returns at
// once with late set, and the attempt finishes in the background, which gives the key back if
// it was taken and then lets the claim go. The caller holds the claim.
func (st *lockState) attempt(ctx context.Context, ent *domain.DLockEntity) (late bool, err error) {
	if ctx.Done() == nil {
		return false, st.g.proc.Lock(ctx, ent, st.cfg)
	}
	done := make(chan error, 1)
	if !st.g.group.Go(func() { done <- st.g.proc.Lock(ctx, ent, st.cfg) }) {
		return false, st.g.proc.Lock(ctx, ent, st.cfg)
	}
	select {
	case err := <-done:
		return false, err
	case <-ctx.Done():
		st.background(func() {
			err := <-done
			if err == nil {
				st.noteToken(ent.Token) // it may have taken a grant whose message is on its way
			}
			if !errors.Is(err, ErrOptimisticLocking) {
				st.giveUp(ent)
			}
			st.dropClaim()
			st.signal()
		})
		return true, nil
	}
}

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

// own records a successful acquisition and starts renewing it.
func (st *lockState) own(parent context.Context, ent domain.DLockEntity) *holding {
	cfg := st.cfg
	h := &holding{st: st, entity: ent}
	h.count.Store(1)
	st.noteToken(ent.Token)
	var ctx context.Context
	ctx, h.cancel = context.WithCancelCause(parent)
	h.ctx = context.WithValue(ctx, ownerKey{st.g, cfg.UniqueKey()}, h)
	st.owner.Store(h)
	st.poller.Stop()
	lease := cfg.Lease()
	h.exp = threads.StartExpander(st.g.ctx, threads.ExpanderConfig{
		Lease:    lease,
		Interval: lease * 3 / 4,
		Retry:    lease / 10,
		Acquired: ent.LockTime,
	}, func(ctx context.Context) error {
		return st.g.proc.ExpandLease(ctx, &h.entity, cfg)
	}, func(cause error) {
		st.g.log.Warn("dlock: lock lost", zap.String("key", cfg.UniqueKey()),
			zap.String("locker", h.entity.Locker), zap.Error(cause))
		h.cancel(cause)
	}, &st.g.group)
	return h
}

// release ends h: it stops the renewals and either hands the key over to the next local
// waiter in one round trip (handover.lua) or deletes it if it still holds h's locker; it ends
// the owner context (with cause, if not nil) and wakes the next waiter. Only one release of a
// holding happens; a second returns ErrNotHeld.
func (st *lockState) release(ctx context.Context, h *holding, cause error) error {
	if !h.released.CompareAndSwap(false, true) {
		return ErrNotHeld
	}
	h.exp.Stop()
	lost := context.Cause(h.ctx)
	if !errors.Is(lost, ErrLockLost) {
		lost = nil
	}
	rctx, cancel := context.WithTimeout(ctx, st.cfg.Lease())
	defer cancel()
	var err error
	if cause == nil && lost == nil && st.g.opts.handOff > 0 && st.q.HasWaiters() {
		err = st.handOver(rctx, h)
	} else {
		err = st.g.proc.Unlock(rctx, &h.entity, st.cfg)
		h.cancel(cause)
		st.owner.Store(nil)
		st.dropClaim()
		st.signal()
	}
	st.idle()
	st.g.unref(st)
	switch {
	case lost != nil:
		return lost
	case errors.Is(err, ErrOptimisticLocking):
		st.g.log.Warn("dlock: lock lost before release", zap.String("key", st.cfg.UniqueKey()), zap.Error(err))
		return fmt.Errorf("%w: found at release: %w", ErrLockLost, err)
	case err != nil:
		st.g.log.Debug("dlock: release failed; the key expires with its lease", zap.Error(err))
	}
	return err
}

// handOver passes the key from h to a new acquisition that the first local waiter takes
// (pending), unless another process has waited while this one kept the lock for longer than
// the hand-off limit: then the script grants the key to that process.
func (st *lockState) handOver(ctx context.Context, h *holding) error {
	next := domain.DLockEntity{Locker: st.g.newLocker(), Status: domain.StatusProcessing, LockTime: time.Now()}
	yield := st.g.now()-st.tenure.Load() >= int64(st.g.opts.handOff)
	err := st.g.proc.HandOver(ctx, &h.entity, &next, st.cfg, yield)
	h.cancel(nil)
	st.owner.Store(nil)
	switch {
	case err == nil:
		st.pending.Store(&next) // the claim stays held for whoever takes it
		st.q.Wake()
		st.abandon() // in case the waiters left meanwhile
		return nil
	case errors.Is(err, processor.ErrYielded):
		// Granted to the waiting process. Our waiters try once, which fails and leaves
		// our own mark: the lock comes back when that process lets it go.
		st.dropClaim()
		st.signal()
		return nil
	}
	st.dropClaim()
	st.signal()
	return err
}

// abandon releases a key handed over to a local waiter that no waiter is left to take, or
// wakes the waiter that is; then it settles a grant the same way. Waiters call it when they
// leave, hand-overs after they land: of a waiter leaving and a key landing at the same moment,
// at least one sees the other.
func (st *lockState) abandon() {
	if st.pending.Load() != nil {
		if st.q.HasWaiters() {
			st.q.Wake()
		} else if p := st.pending.Load(); p != nil && st.pending.CompareAndSwap(p, nil) {
			st.background(func() { // the claim stays held until the key is given back
				st.giveUp(p)
				st.dropClaim()
				st.signal()
			})
			return
		}
	}
	st.settleGrant()
}

// granted records a grant from another process's release: the key already holds locker. A
// grant older than a token this process has owned the key with is stale (taken already
// through Lock) and ignored.
func (st *lockState) granted(locker string, token uint64) {
	if token <= st.last.Load() {
		return
	}
	st.grant.Store(&domain.DLockEntity{Locker: locker, Token: token, Status: domain.StatusProcessing, LockTime: time.Now()})
	st.heard.Store(st.g.now())
	st.signal()
	st.settleGrant()
}

// noteToken records that this process has taken the key with token, so that a copy of the same
// grant still waiting in the grant slot is known to be stale.
func (st *lockState) noteToken(token uint64) {
	for last := st.last.Load(); token > last && !st.last.CompareAndSwap(last, token); last = st.last.Load() {
	}
}

// takeGrant returns the grant waiting to be taken, unless it is stale. The caller holds the
// claim.
func (st *lockState) takeGrant() *domain.DLockEntity {
	if g := st.grant.Swap(nil); g != nil && g.Token > st.last.Load() {
		return g
	}
	return nil
}

// settleGrant releases a grant that no local waiter will take. Only the claim holder may touch
// a grant; if the claim is held, its holder settles the grant when it lets the claim go.
func (st *lockState) settleGrant() {
	if st.grant.Load() == nil {
		return
	}
	if st.q.HasWaiters() {
		st.q.Wake()
		return
	}
	if !st.claim.CompareAndSwap(false, true) {
		return
	}
	g := st.takeGrant()
	if g == nil {
		st.claim.Store(false)
		return
	}
	st.background(func() { // the claim stays held until the key is given back
		st.giveUp(g)
		st.dropClaim()
		st.signal()
	})
}

// dropClaim lets the claim go without an owner, settling a grant that came meanwhile.
func (st *lockState) dropClaim() {
	st.claim.Store(false)
	st.settleGrant()
}

// giveUp releases a key this process holds but nobody here will use.
func (st *lockState) giveUp(e *domain.DLockEntity) {
	rctx, cancel := context.WithTimeout(st.g.ctx, st.cfg.Lease())
	defer cancel()
	if err := st.g.proc.Unlock(rctx, e, st.cfg); err != nil {
		st.g.log.Debug("dlock: release of an untaken key failed; it expires with its lease", zap.Error(err))
	}
}

// signal says the key may be free: the first waiter will try.
func (st *lockState) signal() {
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

// idle stops watching the key once no goroutine of this process waits on the lock.
func (st *lockState) idle() {
	st.poller.Locked(func(bool) {
		if !st.q.HasWaiters() {
			st.unwatch()
		}
	})
}

// unwatch withdraws this process's waiting mark, then the subscription, in that order: a grant
// made before the mark went is published before the unsubscription takes effect, so it is
// received (and given back). It runs under the poller's lock; the Redis calls run in the
// background, so a waiter that gives up during a partition is not held by them.
func (st *lockState) unwatch() {
	marked, sub := st.marked.Swap(false), st.sub
	st.sub = nil
	if !marked && sub == nil {
		return
	}
	st.background(func() {
		if marked {
			rctx, cancel := context.WithTimeout(st.g.ctx, st.cfg.Lease())
			if err := st.g.proc.Unmark(rctx, st.cfg); err != nil {
				st.g.log.Debug("dlock: unmark failed; the mark expires", zap.Error(err))
			}
			cancel()
		}
		if sub != nil {
			st.g.notes.unsubscribe(sub)
		}
	})
}

// background runs f in the generator's group, or here once the generator is closing.
func (st *lockState) background(f func()) {
	if !st.g.group.Go(f) {
		f()
	}
}

// Waiting implements threads.PollTarget; it runs under the poller's lock.
func (st *lockState) Waiting() bool {
	if !st.q.HasWaiters() {
		st.unwatch()
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
		st.signal()
	} else {
		st.marked.Store(true)
	}
}
