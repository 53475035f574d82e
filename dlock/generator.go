package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
	"github.com/dlockgo/dlock/threads"
)

// Generator makes locks, as Java DLock's DLockGenerator does: it knows the lease of each lock
// type and, within this process, gives every lock with the same unique key the same shared
// state (one local queue, one poller, one subscription), so that only one of its goroutines at
// a time asks Redis for the key. That state exists while some goroutine holds or waits on the
// lock and is dropped afterwards, so a million distinct targets do not grow memory for ever.
//
// One Generator stands for one process in the lock's eyes: two Generators, even in one process
// and on one client, compete for a key exactly as two processes would. A Generator is safe for
// concurrent use. Close it to stop its background goroutines.
type Generator struct {
	client   redis.UniversalClient
	proc     processor.DLockProcessor
	redis    *processor.RedisLockProcessor // proc, or what it observes
	observer Observer
	opts     options
	log      *zap.Logger
	prefix   string        // locker prefix, unique to this generator
	seq      atomic.Uint64 // acquisitions, for unique lockers
	// gate holds a token for each request of this Generator handed to the client (call),
	// as many as the client's pool has connections; nil for clients whose pool it cannot
	// tell (Cluster, Ring). A request whose caller leaves while it waits here was never
	// sent: it has no outcome to settle.
	gate chan struct{}
	// fault is the last failure of a request of this Generator's that Redis, or the way to
	// it, made (call): a Lock whose attempt got no answer before it gave up names it.
	fault atomic.Pointer[fault]
	// readTimeout is the client's read timeout (0: none, or a client whose options it cannot
	// read): cutByReadTimeout tells by it whether a request failed by that timeout.
	readTimeout time.Duration
	// timeoutWarned paces the warnings that the client's read timeout fails its requests
	// (warnReadTimeout); releaseWarned those that a release failed (releaseFailed).
	timeoutWarned, releaseWarned warnPace

	done        context.Context // ended by Close: waits, pollers and the subscription end
	stop        context.CancelFunc
	clean       context.Context // ended only when Close gives up: renewals and background clean-up
	cancelClean context.CancelFunc
	group       threads.Group // every background goroutine
	send        senders       // the goroutines that run requests (call)
	late        lateRequests  // requests run on senders whose callers left them (call's errLate)
	notes       *notifier     // nil when notifications are off

	mu     sync.Mutex
	states map[string]*lockState // by unique key, while in use; guarded by mu
	// relockBy keeps, by unique key, a dropped state's lockState.relockBy and holdOverBy
	// while one is to come, for the key's next state; guarded by mu.
	relockBy map[string]relockMemo
	// relockTest, when positive (tests only), has every Unlock relock and linger that long.
	relockTest atomic.Int64
	shares     map[string]*sharedState // read-write locks and semaphores by sharedKey, while in use; guarded by mu
	closed     bool                    // guarded by mu
	drained    chan struct{}           // closed when Close waits and the last state is dropped; guarded by mu
	shut       chan struct{}           // closed when Close has finished
	shutErr    error                   // what the first Close returned; written before shut is closed
}

// NewGenerator returns a Generator over client. A nil client or an invalid option is an error
// wrapping ErrInvalidConfig; so is a client of the user's that embeds a nil client, even one
// that overrides the commands dlock sends (wrap a client made by go-redis's constructor instead,
// or keep it in a named field). Defaults: no logging, barging allowed (with a starvation guard),
// release notifications on, no lease configured for any type.
func NewGenerator(client redis.UniversalClient, opts ...Option) (*Generator, error) {
	o := options{logger: zap.NewNop(), notify: true, handOff: DefaultHandOff, leases: map[domain.DLockType]time.Duration{}, observer: NopObserver{}, writeBlock: writeBlock}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidConfig)
		}
		if err := opt.apply(&o); err != nil {
			return nil, err
		}
	}
	prefix := lockerPrefix()
	var g *Generator // (set before any request: the processor sends none until asked)
	rp, err := processor.NewRedisLockProcessor(client, processor.Options{
		// (Publish even without notifications: a release still grants the key to, and tells,
		// the processes in line that listen, and checks that they do.)
		Publish: true, Mark: prefix, Replicas: o.replicas, ReplicaTimeout: o.replicaWait,
		GapEvery: o.gapEvery, GapWindow: o.gapWindow,
		Tried: func(err error, began time.Time) { g.noteTry(err, began) }, // (a Lock that gives up before the last try names its failure)
	})
	if err != nil {
		return nil, err
	}
	var proc processor.DLockProcessor = rp
	if _, nop := o.observer.(NopObserver); !nop {
		proc = observed{rp, o.observer, boundsByContext(client)}
	}
	g = &Generator{
		client:      client,
		proc:        proc,
		redis:       rp,
		observer:    o.observer,
		opts:        o,
		log:         o.logger,
		prefix:      prefix,
		states:      make(map[string]*lockState),
		shares:      make(map[string]*sharedState),
		gate:        gateFor(client),
		readTimeout: processor.ReadTimeout(client),
	}
	g.shut = make(chan struct{})
	g.done, g.stop = context.WithCancel(context.Background())
	g.clean, g.cancelClean = context.WithCancel(context.Background())
	if o.notify {
		g.notes = newNotifier(g)
	}
	return g, nil
}

// gateFor returns the gate of a Generator over client (Generator.gate): a token for each
// connection of a single server's or Sentinel client's pool, nil for any other client.
func gateFor(client redis.UniversalClient) chan struct{} {
	if c, ok := client.(*redis.Client); ok && c.Options().PoolSize > 0 {
		return make(chan struct{}, c.Options().PoolSize)
	}
	return nil
}

// Gen returns the lock of lockType and lockTarget with the lease configured for lockType
// (WithLeases, WithDefaultLease). It returns ErrInvalidConfig for a bad type or target or an
// unconfigured type, and ErrClosed after Close. The returned value is a cheap handle: calling
// Gen again with the same key gives a handle to the same shared lock.
func (g *Generator) Gen(lockType, lockTarget string) (*DistributedReentrantLock, error) {
	if g == nil || g.proc == nil {
		return nil, errZeroGenerator
	}
	lease, ok := g.opts.leases[domain.DLockType(lockType)]
	if !ok {
		lease = g.opts.defaultLease
	}
	if lease == 0 {
		if _, err := domain.NewDLockConfig(domain.DLockType(lockType), lockTarget, domain.MinLease); err != nil {
			return nil, err // (a bad type or target is named first, as with a lease)
		}
		return nil, fmt.Errorf("%w: no lease configured for lock type %s", ErrInvalidConfig, lockType)
	}
	return g.GenWithLease(lockType, lockTarget, lease)
}

// GenWithLease is Gen with an explicit lease, which must lie within [domain.MinLease,
// domain.MaxLease] (30 ms to a week) and be a whole number of milliseconds: any other returns
// ErrInvalidConfig.
func (g *Generator) GenWithLease(lockType, lockTarget string, lease time.Duration) (*DistributedReentrantLock, error) {
	if g == nil || g.proc == nil {
		return nil, errZeroGenerator
	}
	cfg, err := domain.NewDLockConfig(domain.DLockType(lockType), lockTarget, lease)
	if err != nil {
		return nil, err
	}
	if g.isClosed() {
		return nil, ErrClosed
	}
	return &DistributedReentrantLock{g: g, cfg: cfg, key: ownerKey{g, cfg.UniqueKey()}}, nil
}

var errZeroGenerator = fmt.Errorf("%w: Generator not made by NewGenerator", ErrInvalidConfig)

func (g *Generator) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// closable returns ctx ended by Close too, and what lets it go: a waiting Lock, and the Redis
// requests it sends, end when either does.
func (g *Generator) closable(ctx context.Context) (context.Context, func()) {
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.done, cancel)
	return c, func() {
		stop()
		cancel()
	}
}

// newLocker returns a locker value unique to this generator and acquisition.
func (g *Generator) newLocker() string {
	return g.prefix + strconv.FormatUint(g.seq.Add(1), 10)
}

// lastLocker returns the newest locker this generator made (acquisitions and yield checks
// share one sequence).
func (g *Generator) lastLocker() string {
	return g.prefix + strconv.FormatUint(g.seq.Load(), 10)
}

// ref returns the state of cfg's key, creating it, and counts one more user.
func (g *Generator) ref(cfg domain.DLockConfig) (*lockState, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, ErrClosed
	}
	st := g.states[cfg.UniqueKey()]
	if st == nil {
		st = newLockState(g, cfg)
		if g.notes != nil && g.notes.confirmedNow(st.channel) {
			st.line.hearing.subscribed() // (nobody else has st yet)
		}
		g.states[cfg.UniqueKey()] = st
		if m, ok := g.relockBy[cfg.UniqueKey()]; ok {
			delete(g.relockBy, cfg.UniqueKey())
			st.relockBy, st.holdOverBy = m.relockBy, m.holdOverBy // (nobody else has st yet)
		}
	}
	st.refs++
	return st, nil
}

// hold counts one more user of st, which a current user keeps alive (even after Close).
func (g *Generator) hold(st *lockState) {
	g.mu.Lock()
	st.refs++
	g.mu.Unlock()
}

// unref counts one user less and drops the state when nobody holds or waits on it and no
// background work for it runs.
func (g *Generator) unref(st *lockState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st.refs--; st.refs == 0 && g.states[st.cfg.UniqueKey()] == st {
		delete(g.states, st.cfg.UniqueKey())
		g.keepRelockLocked(st)
		if len(g.states) == 0 && len(g.shares) == 0 && g.drained != nil {
			close(g.drained)
			g.drained = nil
		}
	}
}

// relockMemo is what a dropped state keeps for the key's next state: its relockBy and
// holdOverBy.
type relockMemo struct{ relockBy, holdOverBy time.Time }

// past reports whether nothing of m is to come at now.
func (m relockMemo) past(now time.Time) bool {
	return !now.Before(m.relockBy) && !now.Before(m.holdOverBy)
}

// keepRelockLocked keeps the relockBy and holdOverBy of st, a state being dropped, for the
// key's next state, if one is to come; entries past are pruned as others are kept. The caller
// holds mu, and st has no user left (they are not written any more).
func (g *Generator) keepRelockLocked(st *lockState) {
	now := time.Now()
	m := relockMemo{st.relockBy, st.holdOverBy}
	if m.past(now) {
		return
	}
	if g.relockBy == nil {
		g.relockBy = make(map[string]relockMemo)
	}
	for k, old := range g.relockBy {
		if old.past(now) {
			delete(g.relockBy, k)
		}
	}
	g.relockBy[st.cfg.UniqueKey()] = m
}

// lookup returns the state of key if it is in use.
func (g *Generator) lookup(key string) *lockState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.states[key]
}

// Close releases every lock still held through this generator (their owner contexts end with
// ErrClosed as the cause), ends every waiting Lock call with ErrClosed, waits for the
// background clean-up (attempts given back, the line left) and stops every
// goroutine. It does not close the Redis client. Close is idempotent and safe for concurrent
// use: a second call waits for the first (or for its own ctx) and returns what the first
// returned, so that a Close that gave up is never followed by one that says all went well.
// A release of Close's own that Redis failed is reported in Close's error, as a
// *RedisProcessError, once it was sent again until its lease ran out or Redis refused it for
// good (every kind of lock alike): the lock stayed held in Redis until its lease ran out. One
// that a later try got through, or that found the key gone (lost before Close: logged at
// Warn), is not reported. (One an Unlock waits for is that Unlock's error; a holding lost
// before Close is not reported again.)
// ctx bounds the releases and the waits: if it ends first, Close returns ctx's error at once;
// what is left expires in Redis with its lease, and goroutines still waiting for a Redis reply
// (or for a connection being dialled) end when the client returns it. A nil ctx is taken as
// context.Background(): unlike other calls, Close does not refuse it, so that a Generator is
// never left open by it.
func (g *Generator) Close(ctx context.Context) error {
	if g == nil || g.proc == nil {
		return errZeroGenerator
	}
	if ctx == nil {
		ctx = context.Background()
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		select {
		case <-g.shut:
			return g.shutErr
		case <-ctx.Done():
			return fmt.Errorf("dlock: close: %w", ctx.Err())
		}
	}
	g.closed = true
	states := make([]*lockState, 0, len(g.states))
	for _, st := range g.states {
		states = append(states, st)
	}
	shares := make([]*sharedState, 0, len(g.shares))
	for _, st := range g.shares {
		shares = append(shares, st)
	}
	g.mu.Unlock()
	defer close(g.shut)
	g.shutErr = g.close(ctx, states, shares)
	return g.shutErr
}

// close does Close's work, once: states and shares are those in use as it began.
func (g *Generator) close(ctx context.Context, states []*lockState, shares []*sharedState) error {
	g.stop() // waiters return ErrClosed; pollers end

	errs := closeStates(ctx, states)
	for _, st := range shares {
		st.closeHolds()
	}
	for _, st := range shares { // their drivers give back what they hold, then end
		select {
		case <-st.exited:
			st.mu.Lock()
			errs = append(errs, st.lapsed...)
			st.mu.Unlock()
		case <-ctx.Done():
		}
	}
	g.mu.Lock()
	var drained chan struct{}
	if len(g.states) > 0 || len(g.shares) > 0 {
		g.drained = make(chan struct{})
		drained = g.drained
	}
	g.mu.Unlock()
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("dlock: close: %w", ctx.Err()))
		}
	}
	g.cancelClean()
	if g.notes != nil {
		// In the group, so that ctx bounds it: closing a subscription connection waits for
		// its dial, which a partition holds up for the client's dial and read timeouts.
		g.group.Go(g.notes.close)
	}
	if err := g.group.CloseContext(ctx); err != nil && ctx.Err() != nil && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("dlock: close: %w", err))
	}
	return errors.Join(errs...)
}

// closeParallel bounds how many states Close lets go of at once.
const closeParallel = 64

// closeStates closes states side by side (at most closeParallel at once, and no more requests
// than the gate lets through): one after another, a process holding many keys would take a
// round trip per key to close, and with a bounded ctx leave the keys it did not reach locked
// for a lease. It returns their errors: of a release that failed and is retried in the
// background, what the retry comes to (nil once Redis answered it: the key was let go, or
// was not this process's any more), or the first failure if ctx ends first.
func closeStates(ctx context.Context, states []*lockState) []error {
	type retry struct {
		first error
		out   <-chan error
	}
	var (
		mu      sync.Mutex
		errs    []error
		retries []retry
		wg      sync.WaitGroup
		next    = make(chan *lockState)
	)
	for range min(len(states), closeParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for st := range next {
				retried, err := st.close(ctx)
				mu.Lock()
				if retried != nil {
					retries = append(retries, retry{err, retried})
				} else if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, st := range states {
		next <- st
	}
	close(next)
	wg.Wait()
	for _, r := range retries {
		select {
		case err := <-r.out:
			if err != nil && !errors.Is(err, ErrLockLost) { // (a holding found lost is not Close's to report)
				errs = append(errs, err)
			}
		case <-ctx.Done():
			errs = append(errs, r.first)
		}
	}
	return errs
}
