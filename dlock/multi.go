package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// The mutex as a Part of a MultiLock.

// Kind returns KindMutex.
func (l *DistributedReentrantLock) Kind() LockKind { return KindMutex }

func (l *DistributedReentrantLock) generator() *Generator {
	if l == nil { // (a nil lock as a Part: MultiOf refuses it)
		return nil
	}
	return l.g
}
func (l *DistributedReentrantLock) order() string { return l.Config().UniqueKey() + "|mutex" }

func (l *DistributedReentrantLock) lostIn(ctx context.Context) error {
	h := l.holdingOf(ctx)
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.state {
	case holdLost:
		return l.named(h.cause)
	case holdClosed:
		return ErrClosed
	}
	return nil
}

// MultiLock is several locks taken together, all or none, as Curator's InterProcessMultiLock
// and Redisson's RedissonMultiLock: Lock returns once it holds every one of them, and holds none
// of them if it gives up. The locks are taken one at a time in one global order — by unique
// key, the same in every process — so two MultiLocks over the same keys never deadlock, and on
// a Redis Cluster no script spans two hash slots. Each part is the lock itself (a mutex, a side
// of a read-write lock, or permits of a semaphore), with its own lease, fencing token and place
// in the key's line, and passes among this process's goroutines as it always does. A
// MultiLock is a cheap handle, safe for concurrent use.
type MultiLock struct {
	parts []Part // in the global order, one per key
}

// Part is one lock to take, with the mutex's calls: a *DistributedReentrantLock,
// RWLock.ReadSide, RWLock.WriteSide or Semaphore.Permits. A MultiLock takes several; any code
// that takes one kind or another can hold a Part.
type Part interface {
	// Config returns the part's lock.
	Config() domain.DLockConfig
	// Kind says what the part takes.
	Kind() LockKind
	// Lock takes the part, waiting while ctx allows (as DistributedReentrantLock.Lock).
	Lock(ctx context.Context) (*Owner, error)
	// TryLock takes the part if it can at once.
	TryLock(ctx context.Context) (*Owner, bool, error)
	// Unlock releases one hold of the part owned holds.
	Unlock(owned context.Context) error
	// FencingToken returns the token of the part owned holds.
	FencingToken(owned context.Context) (uint64, bool)
	generator() *Generator
	order() string // the global order: the unique key, then the kind
	// lostIn returns why the holding of the part that ctx carries was lost or closed
	// (ErrLockLost, ErrClosed), else nil.
	lostIn(ctx context.Context) error
}

// Multi returns the MultiLock over locks, which must be handles of this Generator. The same
// key named twice is taken once (with the lease of its first handle). It returns
// ErrInvalidConfig for no lock, a nil or zero lock, or a lock of another Generator, and
// ErrClosed after Close.
func (g *Generator) Multi(locks ...*DistributedReentrantLock) (*MultiLock, error) {
	parts := make([]Part, len(locks))
	for i, l := range locks {
		if l == nil || l.g == nil {
			return nil, errZeroLock
		}
		parts[i] = l
	}
	return g.MultiOf(parts...)
}

// MultiOf is Multi over any parts: mutexes, sides of read-write locks, permits of semaphores.
// A lock named twice with the same kind is taken once; one read-write lock's two sides, two
// kinds of lock over one key, or one semaphore with two counts of permits, are refused
// (ErrInvalidConfig): the second would wait for the first, or one count would be dropped; so
// are fewer than one permit of a semaphore, which no Lock could take, and a Part not made by
// this package's handles (a type that embeds Part). More permits than the semaphore's count
// are refused by Lock and TryLock, against the count Redis keeps then (SetPermits may change
// it), with what was taken given back. After Close it returns ErrClosed.
func (g *Generator) MultiOf(parts ...Part) (*MultiLock, error) {
	if g == nil || g.proc == nil {
		return nil, errZeroGenerator
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: a MultiLock of no lock", ErrInvalidConfig)
	}
	if g.isClosed() {
		return nil, ErrClosed
	}
	out := make([]Part, 0, len(parts))
	for _, p := range parts {
		switch p.(type) {
		case *DistributedReentrantLock, sharedPart: // (a type that embeds Part skips their checks)
		default:
			return nil, errZeroLock
		}
		if p.generator() == nil {
			return nil, errZeroLock
		}
		if p.generator() != g {
			return nil, fmt.Errorf("%w: lock %s belongs to another Generator", ErrInvalidConfig, p.Config().UniqueKey())
		}
		if sp, ok := p.(sharedPart); ok {
			if err := sp.check(); err != nil { // (fewer than one permit: no Lock could take it)
				return nil, err
			}
		}
		i := slices.IndexFunc(out, func(q Part) bool { return q.Config().UniqueKey() == p.Config().UniqueKey() })
		switch {
		case i < 0:
			out = append(out, p)
		case out[i].order() != p.order():
			return nil, fmt.Errorf("%w: %s named as %s and as %s", ErrInvalidConfig, p.Config().UniqueKey(), out[i].Kind(), p.Kind())
		case permitsOf(out[i]) != permitsOf(p):
			return nil, fmt.Errorf("%w: semaphore %s named with %d permits and with %d", ErrInvalidConfig, p.Config().UniqueKey(), permitsOf(out[i]), permitsOf(p))
		}
	}
	// By key alone, whatever part of a key is named, so that a read side and a write side do
	// not sort apart around a key named between them; as key|mutex, the order of the versions
	// that sorted by key|kind for a mutex, which processes of both versions must agree on
	// during a rolling upgrade (a key followed by | and more, such as order|7 and
	// order|7|item|3, included).
	slices.SortFunc(out, func(a, b Part) int {
		return cmp.Compare(a.Config().UniqueKey()+"|mutex", b.Config().UniqueKey()+"|mutex")
	})
	return &MultiLock{parts: out}, nil
}

// Parts returns the locks in the order they are taken.
func (m *MultiLock) Parts() []Part {
	if m == nil {
		return nil
	}
	return slices.Clone(m.parts)
}

// Lock takes every part, in the global order, waiting for each while ctx allows, and returns one
// Owner for all of them: a context that carries every part's ownership (so each part's
// FencingToken, HoldCount and Extend work with it) and ends as soon as any part's holding ends —
// lost (its cause matches ErrLockLost), closed, or released. If ctx ends or a part fails, the parts
// taken so far are released (all at once) and the error returned (as a part's Lock returns it);
// Lock waits for those releases up to a sixth of the shortest part's lease past ctx's end, and
// leaves one Redis has not answered by then to go on in the background (retried until that part's
// lease runs out). A part this process knows lost while Lock waits for a later one, or renews an
// earlier one (its renewals failed through a failover, or an operator removed it and the process
// heard of it), is not returned as held: Lock lets go of the parts it took and takes them all
// again, so the Owner it returns holds every part. When a part taken early has less than half its
// lease left (the wait for the later parts used it up), every part is renewed, all at once, before
// Lock returns, so that no part is returned nearly expired, as a part's own Lock never returns one.
// With an Owner of this MultiLock, Lock re-enters every part. A Lock that Close overtakes returns
// ErrClosed and holds none of the parts: never an Owner one of whose parts Close has let go.
func (m *MultiLock) Lock(ctx context.Context) (*Owner, error) {
	return m.acquire(ctx, true, func(l Part, ctx context.Context) (*Owner, bool, error) {
		o, err := l.Lock(ctx)
		return o, err == nil, err
	})
}

// TryLock tries every part once, in the global order: it returns the Owner and true if it got
// them all, and false with a nil error if a part was held, or a part it took was lost before
// it had the rest (the parts it took are released). A Redis failure, an ended ctx and Close are
// returned as a part's TryLock returns them.
func (m *MultiLock) TryLock(ctx context.Context) (*Owner, bool, error) {
	o, err := m.acquire(ctx, false, func(l Part, ctx context.Context) (*Owner, bool, error) {
		return l.TryLock(ctx)
	})
	if errors.Is(err, errPartHeld) {
		return nil, false, nil
	}
	return o, o != nil, err
}

// errPartHeld says a TryLock of a MultiLock found a part held.
var errPartHeld = errors.New("dlock: a part of the MultiLock is held")

func (m *MultiLock) acquire(ctx context.Context, retry bool, take func(Part, context.Context) (*Owner, bool, error)) (*Owner, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if m == nil || len(m.parts) == 0 {
		return nil, fmt.Errorf("%w: MultiLock not made by Generator.Multi", ErrInvalidConfig)
	}
	if ctx.Err() != nil {
		// An ended context takes and re-enters nothing (each part refuses it); one that
		// carries a part lost or closed says so, as a part's own Lock would.
		for _, l := range m.parts {
			if cause := l.lostIn(ctx); cause != nil {
				return nil, cause
			}
		}
	}
	if o, ok := ctx.(*Owner); ok && o != nil && o.multi == m { // re-entry: one more hold of every part (a nil *Owner is a context that owns nothing)
		for i, l := range m.parts {
			if _, err := l.Lock(o); err != nil {
				for j := i - 1; j >= 0; j-- {
					_ = m.parts[j].Unlock(o)
				}
				return nil, err
			}
		}
		// Each part was held as it was re-entered, but Close may have ended one re-entered
		// before the last: Close ends parts only once it began, so none had ended if it has
		// not begun now. (A first acquisition needs no such check: its last part makes it.)
		if m.parts[0].generator().isClosed() {
			for j := len(m.parts) - 1; j >= 0; j-- {
				_ = m.parts[j].Unlock(o)
			}
			return nil, ErrClosed
		}
		for { // one more hold, unless its final Unlock ran meanwhile (the Owner has ended)
			n := o.holds.Load()
			if n <= 0 {
				for j := len(m.parts) - 1; j >= 0; j-- {
					_ = m.parts[j].Unlock(o)
				}
				return nil, notObtained(context.Cause(o), nil)
			}
			if o.holds.CompareAndSwap(n, n+1) {
				return o, nil
			}
		}
	}
	for {
		owners, values, err := m.takeParts(ctx, retry, take)
		if err != nil {
			return nil, err
		}
		if owners != nil {
			return newMultiOwner(m, owners, values), nil
		}
		if !retry {
			return nil, errPartHeld
		}
	}
}

// takeParts takes every part in order. It returns nil Owners and no error if a part taken
// before was lost while a later one was waited for (removed by an operator, or its renewals
// failed through a failover; the Generator's Close is returned as the error): then it has let
// go of them all, and Lock, which returns only once it holds every part, takes them again (a
// lost part re-entered through the caller's Owner then returns its loss), while TryLock
// reports the parts not obtained (or returns the Redis failure of a renewal, retry unset).
func (m *MultiLock) takeParts(ctx context.Context, retry bool, take func(Part, context.Context) (*Owner, bool, error)) ([]*Owner, context.Context, error) {
	owners := make([]*Owner, 0, len(m.parts))
	values := context.Context(ctx) // carries the parts taken so far
	letGo := func() {
		bound, cancel := m.giveUpBound(ctx)
		defer cancel()
		atOnce(len(owners), func(i int) error { return owners[i].unlockWithin(bound) })
	}
	// startOver lets go of every part taken, because of cause (a part lost, or closed, or a
	// renewal that failed): Lock takes them all again, but after Close (returned).
	startOver := func(cause error) error {
		letGo()
		if errors.Is(cause, ErrClosed) {
			return cause
		}
		return nil
	}
	// ended returns why a part taken so far has ended (lost, or closed), or nil.
	ended := func() error {
		for _, taken := range owners {
			if cause := partEnded(taken); cause != nil {
				return cause
			}
		}
		return nil
	}
	for _, l := range m.parts {
		o, ok, err := take(l, withValues{Context: ctx, values: values})
		if err == nil && !ok {
			err = errPartHeld
		}
		if err != nil {
			letGo()
			return nil, nil, err
		}
		owners = append(owners, o)
		// (the holding's own context, for its own lock's keys: nothing the library keeps
		// refers to an Owner; over the parts before, which a part re-entered through the
		// caller's own Owner does not carry — and which the values of the context the holding
		// was first taken with, that its context carries too, must not hide)
		values = newPartValues(values, o.ctx, l)
		if cause := ended(); cause != nil {
			return nil, nil, startOver(cause)
		}
	}
	// A part taken before the last may have waited for the later ones past half its lease:
	// it is renewed now, as a pass is, so that no part is returned nearly expired. If that
	// fails, all are let go (and Lock takes them again).
	if err := freshen(ctx, m.parts, owners); err != nil {
		if ctx.Err() != nil { // (the caller's deadline bounds the wait, the renewal included)
			letGo()
			return nil, nil, notObtained(ctx.Err(), nil)
		}
		var failed *RedisProcessError
		if !retry && errors.As(err, &failed) && !errors.Is(err, ErrLockLost) {
			letGo()
			return nil, nil, err // (TryLock: the renewal failed in Redis, as a part's TryLock returns it)
		}
		return nil, nil, startOver(err)
	}
	// A renewal is a round trip to Redis, during which another part may have been lost (an
	// operator removed it, or Close began): checked again, as after each part's take.
	if cause := ended(); cause != nil {
		return nil, nil, startOver(cause)
	}
	if err := ctx.Err(); err != nil { // (a Lock never returns the parts after its deadline)
		letGo()
		return nil, nil, notObtained(err, nil)
	}
	return owners, values, nil
}

// giveUpBound returns the context within which a Lock or TryLock that gives up waits for the
// releases of the parts it took: ctx while it lasts; once it has ended, a sixth of the
// shortest part's lease more (the pace at which a waiter polls). A release Redis answers is
// waited for, so the parts are free when the call returns; one it does not answer goes on in
// the background (retried until the part's lease runs out), and the call returns — not a lease
// after its deadline.
func (m *MultiLock) giveUpBound(ctx context.Context) (context.Context, context.CancelFunc) {
	grace := m.parts[0].Config().Lease()
	for _, l := range m.parts[1:] {
		grace = min(grace, l.Config().Lease())
	}
	// (ctx may end during the releases, not only before them: the grace runs from its end; a
	// timer that fires after the releases cancels a bound that has ended already)
	bound, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	unwatch := context.AfterFunc(ctx, func() {
		time.AfterFunc(grace/6, func() { cancel(context.Cause(ctx)) })
	})
	return bound, func() { unwatch(); cancel(context.Canceled) }
}

// freshen renews the parts of a MultiLock, held by owners, when one of them has less than
// half the lease of its handle left (the wait for the later parts used it up), as a pass
// renews before it is taken. They are renewed together, every part at once, so that the round
// trip of one renewal is not spent from the lease of the parts renewed before it or of the
// part taken last: renewed one after the other, a MultiLock far from Redis returned a part
// with less than half its lease left. A mutex is renewed with its tenure's own lease setting,
// which Extend keeps; a read-write lock's or semaphore's holding by its driver. It returns
// nil when at least half of every part's lease is left, else why not. Half the lease the
// renewal gives is enough when that is shorter: a holding the caller's context carries, whose
// lease Extend shortened, never has half its handle's lease again (Lock took its parts again
// and again until its context ended). The wait for the renewals ends with ctx: ctx's error.
func freshen(ctx context.Context, parts []Part, owners []*Owner) error {
	type part struct {
		key   string
		left  func() (left, half time.Duration, err error)
		renew func() error
	}
	ps := make([]part, 0, len(parts))
	stale := false
	for i, p := range parts {
		owned := owners[i]
		pt := part{key: p.Config().UniqueKey()}
		switch l := p.(type) {
		case *DistributedReentrantLock:
			_, _, lease, err := l.leaseLeft(owned)
			if err != nil {
				return err
			}
			pt.left = func() (time.Duration, time.Duration, error) {
				d, half, _, err := l.leaseLeft(owned)
				return d, half, err
			}
			pt.renew = func() error { return l.Extend(owned, lease) }
		case sharedPart:
			if owned.sh == nil {
				return ErrNotHeld
			}
			st, h := owned.sh.st, owned.sh.hold
			pt.left = func() (time.Duration, time.Duration, error) {
				d, err := st.left(h)
				return d, st.cfg.Lease() / 2, err
			}
			pt.renew = func() error { return st.freshen(ctx, h) }
		default:
			continue
		}
		d, half, err := pt.left()
		if err != nil {
			return err
		}
		stale = stale || d < half
		ps = append(ps, pt)
	}
	if !stale {
		return nil
	}
	renewed := make(chan []error, 1)
	go func() { renewed <- atOnce(len(ps), func(i int) error { return ps[i].renew() }) }()
	var errs []error
	select {
	case errs = <-renewed:
	case <-ctx.Done(): // (a mutex's renewal is bounded by its lease only: it goes on, and ends)
		return ctx.Err()
	}
	for i, p := range ps {
		if errs[i] != nil {
			return errs[i]
		}
		d, half, err := p.left()
		if err != nil {
			return err
		}
		if d < half {
			return fmt.Errorf("%w: %s", errLateReply, p.key) // (the renewal failed, or its reply came late)
		}
	}
	return nil
}

// leaseLeft returns how long the tenure under the acquisition owned holds counts the key held
// still, half the lease it must have left (its handle's, or its tenure's when that is
// shorter), and the tenure's lease; or why owned holds nothing.
func (l *DistributedReentrantLock) leaseLeft(owned context.Context) (left, half, lease time.Duration, err error) {
	h := l.holdingOf(owned)
	if h == nil {
		return 0, 0, 0, ErrNotHeld
	}
	st := h.st
	st.mu.Lock()
	t := h.ten
	held := st.ten == t && st.owner == h
	if held {
		left, lease = time.Until(t.until), t.cfg.Lease()
	}
	st.mu.Unlock()
	if !held {
		if err := h.heldErr(); err != nil {
			return 0, 0, 0, err
		}
		return 0, 0, 0, ErrNotHeld
	}
	return left, min(h.cfg.Lease(), lease) / 2, lease, nil
}

// partEnded returns why the holding of a part's Owner has ended (lost or closed), or nil.
func partEnded(p *Owner) error {
	held := p.ctx
	if h := p.l.holdingOf(p); h != nil {
		held = h.ctx
	}
	if p.sh != nil && p.sh.hold.ctx.Err() != nil { // (its own context ends in a goroutine after)
		return context.Cause(p.sh.hold.ctx)
	}
	if held.Err() == nil {
		return nil
	}
	return context.Cause(held)
}

// layered is a context whose values are its own, then under's, and whose cancellation is its
// own: the ownership of a part over that of the parts taken before it; a family owner's
// context, a child of its holding's with the values of the context it was asked with.
type layered struct {
	context.Context
	under context.Context
}

func (l layered) Value(key any) any {
	if v := l.Context.Value(key); v != nil {
		return v
	}
	return l.under.Value(key)
}

// partValues is the ownership of a MultiLock's part (part, its holding's context) over that of
// the parts taken before it (the embedded context): the keys of the part's own lock (key)
// (its configuration's UniqueKey) are found in part, every other value below.
type partValues struct {
	context.Context
	part   context.Context
	g      *Generator
	shared string // the part's sharedKey ("" for a mutex)
	key    string // the part's unique key, for a mutex
}

func newPartValues(under, part context.Context, l Part) partValues {
	p := partValues{Context: under, part: part, g: l.generator()}
	if sp, ok := l.(sharedPart); ok {
		p.shared = sharedKey(sp.cfg.UniqueKey(), sp.spec.Kind)
	} else {
		p.key = l.Config().UniqueKey()
	}
	return p
}

func (p partValues) Value(k any) any {
	switch k := k.(type) {
	case ownKey:
		if p.shared != "" && k.g == p.g && k.key == p.shared {
			return p.part.Value(k)
		}
	case ownerKey:
		if p.shared == "" && k.g == p.g && k.key == p.key {
			return p.part.Value(k)
		}
	}
	return p.Context.Value(k)
}

// withValues is ctx (its deadline and cancellation) with the values of values: a part is
// taken with the wait's deadline and the ownership of the parts taken before it, so that its
// Owner carries them all.
type withValues struct {
	context.Context
	values context.Context
}

func (w withValues) Value(key any) any { return w.values.Value(key) }

// newMultiOwner makes the one Owner of a MultiLock's parts: it carries values (every part's
// ownership), and ends when any part's holding ends. (A
// mutex that the caller's context held already is re-entered: its Owner is that context, so
// its holding's own context is watched instead.)
//
// Only the holdings' own contexts are referred to by what the library keeps, never an Owner:
// an Owner the program drops is collected, and its parts are released (see Owner).
func newMultiOwner(m *MultiLock, parts []*Owner, values context.Context) *Owner {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(values))
	o := &Owner{ctx: ctx, multi: m, parts: parts, end: cancel}
	o.holds.Store(1)
	for _, p := range parts {
		var stop func()
		if p.sh != nil { // (its holding's loss ends it as a child: not through its cancel)
			stopOwner, stopHold := p.sh.alsoEnd(cancel), p.sh.hold.alsoEnd(cancel)
			stop = func() { stopOwner(); stopHold() }
		} else if h := p.l.holdingOf(p); h != nil {
			stop = h.alsoEnd(cancel)
		} else { // (a part that ended already)
			held := p.ctx
			f := context.AfterFunc(held, func() { cancel(context.Cause(held)) })
			stop = func() { f() }
		}
		o.stops = append(o.stops, stop)
	}
	return o
}

// Unlock releases one hold of every part of owned, all at once, and returns their errors joined,
// the last part's first (as each part's Unlock returns them). The Owner ends with context.Canceled
// once the last hold is released. As a part's Unlock, it returns ErrNotHeld, releasing nothing,
// when owned is not an Owner of this MultiLock (a nil Owner included) or holds nothing any more
// (its last hold released: a part the caller held itself stays held), ErrClosed then once the
// Generator closed, and ErrInvalidConfig on a MultiLock not made by Generator.Multi. An Owner that
// ended lost (or closed) says so at every further Unlock, as each part's does.
func (m *MultiLock) Unlock(owned *Owner) error {
	if m == nil || len(m.parts) == 0 {
		return fmt.Errorf("%w: MultiLock not made by Generator.Multi", ErrInvalidConfig)
	}
	if owned == nil || owned.multi != m {
		if m.parts[0].generator().isClosed() {
			return ErrClosed
		}
		return ErrNotHeld
	}
	switch n := owned.holds.Add(-1); {
	case n < 0: // released already: its values still carry the parts the caller holds itself
		owned.holds.Add(1)
		if cause := lossOf(owned.ctx); cause != nil {
			return cause // a lost (or closed) MultiLock stays so for its owner, as each part does
		}
		return ErrNotHeld
	case n == 0: // told before any part is let go
		for _, stop := range owned.stops {
			stop()
		}
		owned.end(context.Canceled)
	}
	errs := atOnce(len(m.parts), func(i int) error { return m.parts[i].Unlock(owned) })
	var out []error
	for i := len(m.parts) - 1; i >= 0; i-- { // (reported last part first)
		if err := errs[i]; err != nil {
			if key := m.parts[i].Config().UniqueKey(); !strings.Contains(err.Error(), key) {
				err = fmt.Errorf("%s: %w", key, err)
			}
			out = append(out, err)
		}
	}
	return errors.Join(out...)
}

// atOnce runs f(0) … f(n-1) at once and returns their errors, by index, once all have
// returned. A MultiLock renews its parts so (freshen), and lets go of them so: each release is
// bounded by its own part's lease (and the caller's bound), and none waits for another's — one
// after the other, a release Redis did not answer used up the leases of the parts after it,
// which then reported their holdings lost, and a release cost a round trip per part.
func atOnce(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	if n > 0 {
		errs[0] = f(0)
	}
	wg.Wait()
	return errs
}

// FencingTokens returns the fencing token of every part owned holds, by unique key; ok is
// false when owned does not hold them all.
func (m *MultiLock) FencingTokens(owned context.Context) (tokens map[string]uint64, ok bool) {
	if m == nil || len(m.parts) == 0 {
		return nil, false
	}
	tokens = make(map[string]uint64, len(m.parts))
	for _, l := range m.parts {
		t, held := l.FencingToken(owned)
		if !held {
			return nil, false
		}
		tokens[l.Config().UniqueKey()] = t
	}
	return tokens, true
}

// Do runs fn while holding every part and always releases them, even if fn panics. fn
// receives a context of the Owner's that also ends when ctx ends, as the mutex's Do gives. It
// returns Lock's error, or fn's error joined with Unlock's; a nil fn is ErrInvalidConfig.
func (m *MultiLock) Do(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	owned, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, m.Unlock(owned))
	}()
	fctx, stop := doCtx(ctx, owned)
	defer stop()
	return fn(fctx)
}

// permitsOf returns the permits a semaphore's part asks for, 0 for any other part.
func permitsOf(p Part) int64 {
	if sp, ok := p.(sharedPart); ok && sp.spec.Kind == processor.KindSem {
		return sp.n
	}
	return 0
}
