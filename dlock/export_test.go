package dlock

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnanswered is the cause of a family request's *RedisProcessError when Redis did not answer
// within the request's bound.
var ErrUnanswered = errUnanswered

// ErrLateReply is the cause of a *RedisProcessError when a request's reply did not come before
// the lease ran out.
var ErrLateReply = errLateReply

// InUse reports how many lock states the generator keeps (tests check they are dropped).
func (g *Generator) InUse() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.states)
}

// SharedInUse reports how many read-write lock and semaphore states the generator keeps.
func (g *Generator) SharedInUse() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.shares)
}

// Subscribed reports how many release channels the generator is subscribed to.
func (g *Generator) Subscribed() int {
	if g.notes == nil {
		return 0
	}
	return g.notes.active()
}

// Waiters reports whether goroutines of this generator wait on key.
func (g *Generator) Waiters(key string) bool {
	st := g.lookup(key)
	return st != nil && st.q.HasWaiters()
}

// Confirmed reports how many subscriptions Redis has confirmed to the generator.
func (g *Generator) Confirmed() int {
	if g.notes == nil {
		return 0
	}
	g.notes.mu.Lock()
	defer g.notes.mu.Unlock()
	return g.notes.confirmed
}

// Heard reports how many release messages of watched keys the generator has handled.
func (g *Generator) Heard() int {
	if g.notes == nil {
		return 0
	}
	g.notes.mu.Lock()
	defer g.notes.mu.Unlock()
	return g.notes.heard
}

// ConfirmedNow reports whether the generator counts channel's subscription confirmed.
func (g *Generator) ConfirmedNow(channel string) bool { return g.notes.confirmedNow(channel) }

// SetLinger sets how long the generator's channels stay subscribed after their last watcher.
func (g *Generator) SetLinger(d time.Duration) {
	g.notes.mu.Lock()
	g.notes.linger = d
	g.notes.mu.Unlock()
}

// Place reports this generator's place in key's line as it knows it (0 for first, -1 unknown)
// and whether Redis heard it listen, while it waits with an attempt; ok is false otherwise.
func (g *Generator) Place(key string) (rank int, heard, ok bool) {
	st := g.lookup(key)
	if st == nil {
		return 0, false, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.line.attempt == nil {
		return 0, false, false
	}
	return st.line.rank, st.line.heard, true
}

// Granted reports whether this generator heard a grant of key while a request of its open
// attempt was on its way (kept for that request's answer to take).
func (g *Generator) Granted(key string) bool {
	st := g.lookup(key)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.line.granted != nil
}

// SharedWaiters reports how many goroutines of this generator wait for the read-write lock
// or semaphore of unique key key.
func (g *Generator) SharedWaiters(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for k, st := range g.shares {
		if strings.HasSuffix(k, "|"+key) {
			st.mu.Lock()
			n += len(st.waiters)
			st.mu.Unlock()
		}
	}
	return n
}

// SharedWanted reports whether this generator's read-write lock or semaphore of unique key key
// knows that another process waits for it (it then lends no more).
func (g *Generator) SharedWanted(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, st := range g.shares {
		if strings.HasSuffix(k, "|"+key) {
			st.mu.Lock()
			wanted := st.wanted
			st.mu.Unlock()
			if wanted {
				return true
			}
		}
	}
	return false
}

// WithWriteBlock sets how many fencing tokens a read-write lock's write-hold reserves at a time.
func WithWriteBlock(n uint64) Option {
	return optionFunc(func(o *options) error {
		o.writeBlock = n
		return nil
	})
}

// NextPoll reports how long after the last answer that showed this generator waiting on key
// its poller polls next; ok is false while it waits with no such answer, or no poll is set.
func (g *Generator) NextPoll(key string) (after time.Duration, ok bool) {
	st := g.lookup(key)
	if st == nil {
		return 0, false
	}
	due, set := st.poller.Due()
	st.mu.Lock()
	waited := st.line.waited
	st.mu.Unlock()
	if !set || waited.IsZero() {
		return 0, false
	}
	return due.Sub(waited), true
}

// PollDue returns a function that reports when the poller of key's state polls next, and
// whether a poll is set (it keeps the poller even after the state is dropped); nil when key
// has no state.
func (g *Generator) PollDue(key string) func() (time.Time, bool) {
	st := g.lookup(key)
	if st == nil {
		return nil
	}
	return st.poller.Due
}

// WithReentering runs f as each re-entry of a read-write lock or semaphore begins, once it
// found the owner it re-enters and before it counts the hold: a test can put a Close there.
func WithReentering(f func()) Option {
	return optionFunc(func(o *options) error {
		o.reentering = f
		return nil
	})
}

// WithLent runs f as an acquisition (of any kind) got the lock — taken from Redis or lent
// within the process — before Lock or TryLock makes its Owner: a test can end the holding there.
func WithLent(f func()) Option {
	return optionFunc(func(o *options) error {
		o.lent = f
		return nil
	})
}

// WithUnlocking runs f as an Unlock found its holding, before it takes the holding's mutex.
func WithUnlocking(f func()) Option {
	return optionFunc(func(o *options) error {
		o.unlocking = f
		return nil
	})
}

// WithForceCounted runs f as a ForceRelease of one of this process's lockers is counted
// (from then on no goroutine is passed or lent what the locker holds), with the lock's unique
// key and the locker. It runs under the lock's state mutex: f must not call the library.
func WithForceCounted(f func(key, locker string)) Option {
	return optionFunc(func(o *options) error {
		o.forceCounted = f
		return nil
	})
}

// Belief reports what this generator believes of key while a goroutine owns the lock through
// a tenure: the tenure's locker and until when it counts the key held; ok is false when no
// goroutine owns it (nobody acts on the key then).
func (g *Generator) Belief(key string) (locker string, until time.Time, ok bool) {
	st := g.lookup(key)
	if st == nil {
		return "", time.Time{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.ten
	if st.phase != held || st.owner == nil || t == nil || t.over {
		return "", time.Time{}, false
	}
	return t.entity.Locker, t.until, true
}

// RenewDue reports the schedule of the lease thread of key's tenure while a goroutine owns the
// lock: when it renews next, and until when it counts the key held; ok is false otherwise.
func (g *Generator) RenewDue(key string) (renewAt, until time.Time, ok bool) {
	st := g.lookup(key)
	if st == nil {
		return time.Time{}, time.Time{}, false
	}
	st.mu.Lock()
	t := st.ten
	owned := st.phase == held && st.owner != nil && t != nil && !t.over
	st.mu.Unlock()
	if !owned {
		return time.Time{}, time.Time{}, false
	}
	s := t.Schedule()
	return s.RenewAt, s.Until, true
}

// SharedBelief reports, for the read-write lock or semaphore of unique key key, the live
// holdings this generator lends to at least one goroutine: locker → until when it counts it
// held, and the locker of a downgrade on its way (which replaces it in Redis) or "".
func (g *Generator) SharedBelief(key string) map[string]SharedHeld {
	g.mu.Lock()
	var sts []*sharedState
	for k, st := range g.shares {
		if strings.HasSuffix(k, "|"+key) {
			sts = append(sts, st)
		}
	}
	g.mu.Unlock()
	out := map[string]SharedHeld{}
	for _, st := range sts {
		st.mu.Lock()
		for _, h := range st.holds {
			if h.ctx.Err() == nil && !h.idle() {
				out[h.locker] = SharedHeld{Until: h.valid, RenewAt: h.renewAt, DownTo: h.downTo, N: h.n, DownN: h.downN}
			}
		}
		st.mu.Unlock()
	}
	return out
}

// SharedHeld is what SharedBelief reports of a holding.
type SharedHeld struct {
	Until   time.Time
	RenewAt time.Time // when its next renewal is due
	DownTo  string
	N       int64 // permits it holds in Redis (processor.RWPermits: a write-hold)
	DownN   int64 // with DownTo: the permits of the downgrade on its way (what the holding lends at most meanwhile)
}

// SharedOwned reports, for an Owner of a read-write lock or a semaphore, the holding it borrows:
// its locker, the locker of a downgrade on its way or "", until when its generator counts it
// held, and whether it is live (not ended); ok is false for another Owner.
func SharedOwned(o *Owner) (locker, downTo string, until time.Time, live, ok bool) {
	if o == nil || o.sh == nil {
		return "", "", time.Time{}, false, false
	}
	so := o.sh
	so.st.mu.Lock()
	defer so.st.mu.Unlock()
	h := so.hold
	return h.locker, h.downTo, h.valid, h.ctx.Err() == nil, true
}

// Lapse makes every holding of unique key key in this generator — the mutex's tenure, a
// read-write lock's or semaphore's holdings — count its lease as run out now, by this
// process's clock, without telling its lease thread or expiry timer: as when those run late (a
// busy machine) and have not said so yet (they do at the lease's real end).
func (g *Generator) Lapse(key string) {
	now := time.Now()
	if st := g.lookup(key); st != nil {
		st.mu.Lock()
		if st.ten != nil {
			st.ten.until = now
		}
		st.mu.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, st := range g.shares {
		if strings.HasSuffix(k, "|"+key) {
			st.mu.Lock()
			for _, h := range st.holds {
				h.valid = now
			}
			st.mu.Unlock()
		}
	}
}

// EndSharedHoldings ends every read-write lock's or semaphore's holding of unique key key in
// this generator as its expiry timer does when the lease runs out unrenewed (the driver learns
// of it after).
func (g *Generator) EndSharedHoldings(key string) {
	g.mu.Lock()
	var hs []*shareHold
	for k, st := range g.shares {
		if strings.HasSuffix(k, "|"+key) {
			st.mu.Lock()
			hs = append(hs, st.holds...)
			st.mu.Unlock()
		}
	}
	g.mu.Unlock()
	for _, h := range hs {
		h.cancel(errHoldingLapsed)
	}
}

// MultiParts returns the Owners of a MultiLock's Owner's parts, in the MultiLock's order (nil
// for another Owner).
func MultiParts(o *Owner) []*Owner {
	if o == nil {
		return nil
	}
	return o.parts
}

// LockerPrefix returns what every locker this generator makes begins with: a holding in Redis
// whose locker has it is this process's.
func (g *Generator) LockerPrefix() string { return g.prefix }

// Generator returns the Generator s belongs to.
func (s *Semaphore) Generator() *Generator { return s.g }

// Relock has every final Unlock of the generator stand in line again when it grants the key
// to another process (as if its goroutines locked again at once), lingering that long for a
// goroutine to come.
func (g *Generator) Relock(linger time.Duration) { g.relockTest.Store(int64(linger)) }

// Lingering reports whether the generator stands in key's line with no goroutine waiting,
// after a release that stood in line again.
func (g *Generator) Lingering(key string) bool {
	st := g.lookup(key)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.line.lingering
}

// ReceiveOne is receiveOne.
func ReceiveOne(ctx context.Context, ps *redis.PubSub) (any, error) { return receiveOne(ctx, ps) }

// ExpireTimeoutWarn has the generator take the interval between its warnings that the
// client's read timeout fails its requests as passed.
func (g *Generator) ExpireTimeoutWarn() { g.timeoutWarned.last.Store(0) }

// CutByReadTimeout reports whether the generator takes err, the failure of a request that
// waited that long, for its client's read timeout (the warning's condition).
func (g *Generator) CutByReadTimeout(err error, waited time.Duration) bool {
	return g.cutByReadTimeout(err, waited)
}

// ReadTimeout returns the client's read timeout as the generator read it (0: none).
func (g *Generator) ReadTimeout() time.Duration { return g.readTimeout }

// SharedDispatch returns a func that hands the notifier a message of payload on each shared
// lock channel the generator is subscribed to, as the subscription connection would, and how
// many channels that is.
func (g *Generator) SharedDispatch(payload string) (hear func(), channels int) {
	if g.notes == nil {
		return func() {}, 0
	}
	var conns []*psConn
	var msgs []*redis.Message
	g.notes.mu.Lock()
	for ch, s := range g.notes.byChannel {
		if strings.HasPrefix(s.key, sharedPrefix) && s.conn != nil {
			conns = append(conns, s.conn)
			msgs = append(msgs, &redis.Message{Channel: ch, Payload: payload})
		}
	}
	g.notes.mu.Unlock()
	return func() {
		for i, c := range conns {
			g.notes.handle(c, nil, msgs[i])
		}
	}, len(conns)
}

// Watchers reports how many states watch channel's subscription.
func (g *Generator) Watchers(channel string) int {
	g.notes.mu.Lock()
	defer g.notes.mu.Unlock()
	if sub := g.notes.byChannel[channel]; sub != nil {
		return sub.users
	}
	return 0
}
