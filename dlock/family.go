package dlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"
	"weak"

	"go.uber.org/zap"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// ErrUpgrade is what RWLock.Lock returns for an owner context that holds only the read side:
// a reader that waits for the write side waits for itself (and two such readers for each
// other), so the upgrade is refused rather than left to deadlock. Release the read side
// first, or take the write side first and downgrade (RLock with the write owner).
var ErrUpgrade = errors.New("dlock: the write side asked by an owner of only the read side")

// RWLock is a read-write lock of a Generator, as Curator's InterProcessReadWriteLock and
// Redisson's RReadWriteLock: any number of readers, or one writer, across all processes.
// Within a process, readers share one read-hold in Redis (one request per tenure, not per
// reader) and writers pass one write-hold among themselves, as the mutex does.
//
// Fairness: processes are served in their order in one Redis line, and a writer in line holds
// off every read-hold asked after it; readers already in only delay it by their own holds and
// the batch of readers that was queued in their process when its read-hold came. Within a
// process, goroutines are served in their order of arrival.
//
// Ownership is carried by contexts, as with the mutex: RLock and Lock return an *Owner;
// passing it (or a context derived from it) re-enters the same side (through a derived
// context, the Owner returned stands for that one hold: its second Unlock is ErrNotHeld, as
// the mutex's). An owner of the write
// side may take the read side (a downgrade: unlock the write side and read on); an owner of
// only the read side asking for the write side gets ErrUpgrade.
type RWLock struct {
	g   *Generator
	cfg domain.DLockConfig
}

// Semaphore is a counting semaphore of a Generator with k permits, as Redisson's
// RPermitExpirableSemaphore and Curator's InterProcessSemaphoreV2: at most k permits are out
// across all processes. Each holding has its own renewed lease, so a crashed process's
// permits come back when its lease runs out. Within a process, permits that one holding
// brought are lent among its goroutines without Redis.
//
// k is set where the semaphore is made (GenSemaphore); Redis keeps the k of the first process
// that uses it while it is in use, and SetPermits changes it for everyone. In use means until
// two leases (at least 2 s) after its last request of any process (a take, refused or not,
// a renewal, a release): Redis keeps the count that long after the last permit comes back,
// and a process made with another k sees Redis's (State) and may ask no more than it. Two
// handles of one key in one Generator made with different k are as two such processes: the
// count of the first one used holds, for both, while the semaphore is in use.
type Semaphore struct {
	g       *Generator
	cfg     domain.DLockConfig
	permits int64
}

// GenRW returns the read-write lock of lockType and lockTarget with the type's lease, as Gen
// does for the mutex. A read-write lock and a mutex (or semaphore) of the same type and
// target are different locks; a read-write lock and a semaphore of one name refuse each
// other's requests with ErrInvalidConfig.
func (g *Generator) GenRW(lockType, lockTarget string) (*RWLock, error) {
	cfg, err := g.config(lockType, lockTarget)
	if err != nil {
		return nil, err
	}
	return &RWLock{g: g, cfg: cfg}, nil
}

// maxPermits is the largest permit count of a semaphore (see processor.MaxPermits).
const maxPermits = processor.MaxPermits

// GenSemaphore returns the semaphore of lockType and lockTarget with permits permits (from 1
// to 2^53 − 1, the counts Redis's scripts keep exactly: any other is ErrInvalidConfig) and the
// type's lease, and fails as Gen does.
func (g *Generator) GenSemaphore(lockType, lockTarget string, permits int) (*Semaphore, error) {
	cfg, err := g.config(lockType, lockTarget)
	if err != nil {
		return nil, err
	}
	if permits < 1 || int64(permits) > maxPermits {
		return nil, fmt.Errorf("%w: a semaphore of %d permits (it has from 1 to 2^53 - 1)", ErrInvalidConfig, permits)
	}
	return &Semaphore{g: g, cfg: cfg, permits: int64(permits)}, nil
}

// config returns the configuration of lockType and lockTarget with the type's lease.
func (g *Generator) config(lockType, lockTarget string) (domain.DLockConfig, error) {
	l, err := g.Gen(lockType, lockTarget)
	if err != nil {
		return domain.DLockConfig{}, err
	}
	return l.cfg, nil
}

var errZeroShared = fmt.Errorf("%w: lock not made by a Generator", ErrInvalidConfig)

func (l *RWLock) spec() processor.Shared {
	return processor.Shared{Kind: processor.KindRW, Permits: processor.RWPermits}
}

func (s *Semaphore) spec() processor.Shared {
	return processor.Shared{Kind: processor.KindSem, Permits: s.permits}
}

// Config returns the lock's configuration.
func (l *RWLock) Config() domain.DLockConfig {
	if l == nil {
		return domain.DLockConfig{}
	}
	return l.cfg
}

// Config returns the semaphore's configuration.
func (s *Semaphore) Config() domain.DLockConfig {
	if s == nil {
		return domain.DLockConfig{}
	}
	return s.cfg
}

// Lock takes the write side, waiting while ctx allows; see DistributedReentrantLock.Lock for
// the owner context and for the errors of a wait that ends without the lock (a Redis failure
// included: on a closed client, or a refusal for good, it returns at once). With an owner of
// the write side it re-enters; with an owner of only the read side it returns ErrUpgrade.
func (l *RWLock) Lock(ctx context.Context) (*Owner, error) {
	return l.WriteSide().Lock(ctx)
}

// TryLock takes the write side if it can at once (one Redis round trip at most; more when this
// process's write-hold has handed out all its fencing tokens and goes back first, or when it
// finds the key held while the process owes releases Redis failed — earlier tries' attempts
// given back, perhaps the holdings in its way — which go first, one request each until Redis
// fails one, and it asks once more): false with a nil error when another holds either side or
// a process waits in line before it. Its errors are DistributedReentrantLock.TryLock's, and
// ErrUpgrade for an owner of only the read side.
func (l *RWLock) TryLock(ctx context.Context) (*Owner, bool, error) {
	return l.WriteSide().TryLock(ctx)
}

// RLock takes the read side, waiting while ctx allows, and fails as Lock does. With an owner of
// the read side it re-enters; with an owner of the write side it takes the read side without
// waiting for anyone (a downgrade), after one renewal when the write-hold has less than half
// its lease left (then a failed or late renewal is ErrNotObtained, with its cause).
func (l *RWLock) RLock(ctx context.Context) (*Owner, error) {
	return l.ReadSide().Lock(ctx)
}

// TryRLock takes the read side if it can at once, as TryLock takes the write side, with its
// errors.
func (l *RWLock) TryRLock(ctx context.Context) (*Owner, bool, error) {
	return l.ReadSide().TryLock(ctx)
}

// Unlock releases one hold of the side that owned (an owner context of this lock) holds, the
// innermost when it carries both: ErrNotHeld if none (ErrClosed once the Generator closed;
// ErrInvalidConfig for a nil context or on a lock not made by a Generator), or the cause
// (ErrLockLost, ErrClosed) if the holding ended — every Unlock of a lost holding says so, also
// when its lease ran out by this process's clock before its timer said so, as the mutex's. When
// the hold it gives up is the last of its holding's, it returns once the holding is let go in
// Redis (or lent again), as the mutex's Unlock does — and a writer's, once the readers of its
// downgrade hold only the read side in Redis, unless a writer of this process waits for the
// write side and none elsewhere: a TryRLock elsewhere then gets in, as after the write side's
// Unlock of any other read-write lock. It returns a *RedisProcessError when Redis could not let
// it go while its lease lasted (the local hold is released all the same; the holding expires in
// Redis with its lease), or before owned's deadline, if it has one (the release then goes on in
// the background), or before a Close meanwhile gave up waiting for it (its ctx ended: the
// error says so).
func (l *RWLock) Unlock(owned context.Context) error {
	return l.WriteSide().Unlock(owned) // (either side's: the innermost owner of this lock)
}

// FencingToken returns the fencing token of owned's holding: tokens increase across every
// holding of the lock, of either side, in every process. Each writer has a token of its own,
// above the writer's before it, also when writers of one process pass one write-hold; the
// readers that share a holding share its token.
func (l *RWLock) FencingToken(owned context.Context) (uint64, bool) {
	return l.WriteSide().FencingToken(owned)
}

// HoldCount returns how many times ctx holds the innermost side of the lock it owns (the one
// Unlock releases): 0 if it owns neither side, or its holding was released, lost or closed.
func (l *RWLock) HoldCount(ctx context.Context) int { return l.side(true).holdCount(ctx) }

// HoldCount returns how many times ctx holds its permits of the semaphore: 0 if it owns none,
// or its holding was released, lost or closed.
func (s *Semaphore) HoldCount(ctx context.Context) int { return s.part(1).holdCount(ctx) }

// holdCount returns how many times ctx holds the innermost owner of p's lock.
func (p sharedPart) holdCount(ctx context.Context) int {
	if p.g == nil || ctx == nil {
		return 0
	}
	so := ownerIn(ctx, p.g, sharedKey(p.cfg.UniqueKey(), p.spec.Kind), 2)
	if so == nil {
		return 0
	}
	so.st.mu.Lock()
	defer so.st.mu.Unlock()
	if so.done || so.hold.ctx.Err() != nil {
		return 0
	}
	return so.count
}

// State reads what Redis holds for the lock, in one round trip that changes nothing. It returns
// ErrInvalidConfig when Redis keeps the name as a semaphore (as the lock's requests do; the
// semaphore's State, for a read-write lock), ErrClosed after Close, a *RedisProcessError when
// Redis fails, and ctx's error when ctx ends first.
func (l *RWLock) State(ctx context.Context) (SharedState, error) {
	if l == nil || l.g == nil {
		return SharedState{}, errZeroShared
	}
	st, err := l.g.sharedState(ctx, l.cfg, l.spec())
	return st, named(err, l.cfg.UniqueKey())
}

// Acquire takes n permits (1 ≤ n ≤ k, Redis's k while the semaphore is in use: more is
// ErrInvalidConfig), waiting while ctx allows, and returns their Owner. A wait that ends
// without them fails as DistributedReentrantLock.Lock's does. Waiting processes are served in
// order; within a process, goroutines in their order of arrival. A process that holds permits
// already asks for more without standing in line, and no release of another process tells it
// (its own releases do): it asks again every sixth of the lease, and stands in line once its
// first waiter has waited half the lease, so permits that another process lets go can take up
// to a sixth of the lease to reach it (SetPermits raising the count tells it at once). With an
// owner of this semaphore it re-enters the same permits: no more are taken, so it refuses n
// above the permits the owner holds (ErrInvalidConfig, the holding kept as it was).
func (s *Semaphore) Acquire(ctx context.Context, n int) (*Owner, error) {
	return s.Permits(n).Lock(ctx)
}

// TryAcquire takes n permits if they are free at once and no process waits before it: false
// with a nil error otherwise. It refuses n as Acquire does, and fails as
// DistributedReentrantLock.TryLock does. Permits that another process's holding keeps beyond
// what its goroutines use now are not free: a holding gives them back only once a process waits
// in line, which TryAcquire does not, so it may find them taken for as long as that holding
// lasts, where Acquire gets them.
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (*Owner, bool, error) {
	return s.Permits(n).TryLock(ctx)
}

// Release gives back the permits of owned (an Owner of this semaphore), one hold of them, and
// fails as the read-write lock's Unlock does. An Owner's permits go back together, never part
// of them: permits that go back apart are taken by separate Acquires.
func (s *Semaphore) Release(owned context.Context) error {
	return s.Permits(1).Unlock(owned)
}

// FencingToken returns the fencing token of owned's holding.
func (s *Semaphore) FencingToken(owned context.Context) (uint64, bool) {
	return s.Permits(1).FencingToken(owned)
}

// SetPermits changes the semaphore's permit count to k in Redis, for every process, for as
// long as the semaphore is in use (afterwards the k it is made with counts again). A raise
// serves at once the waiters it makes room for, in line or in a process that holds permits. Permits
// held beyond a lowered k stay out until released; Redis hands none out until fewer than k
// are, and the processes that hold more than k are told (W), lend no more from their holdings
// and give them back as they come free. A process hears of the change by that message (at once
// with notifications, and without, at its holding's next renewal: within three quarters of
// the lease); until then it may still lend permits it holds already to its own goroutines, as
// under the old count.
// The change names the count it replaces, read first, and runs once: a copy of it (or of an
// earlier SetPermits) that reaches Redis late cannot set an older count again, even when the
// count went back to the one it names — but for a copy that comes after Redis restarted empty
// (which forgets what ran) and finds the count the change names (the processes' own k, or one
// set since): it sets its count again; SetPermits calls made at once from several places still
// leave whichever ran last.
// It returns ErrInvalidConfig for k < 1 or k > 2^53 − 1, ErrClosed after Close, a *RedisProcessError when
// Redis fails, ctx's error when ctx ends first (the change may then still reach Redis), and an
// error matching ErrOptimisticLocking when other changes of the count kept landing between its
// read and its change (ten times in a row): it changed nothing, and the count is theirs.
func (s *Semaphore) SetPermits(ctx context.Context, k int) error {
	if s == nil || s.g == nil {
		return errZeroShared
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	if k < 1 || int64(k) > maxPermits {
		return fmt.Errorf("%w: %d permits for %s (a semaphore has from 1 to 2^53 - 1)", ErrInvalidConfig, k, s.cfg.UniqueKey())
	}
	for range 10 {
		st, err := s.State(ctx)
		if err != nil {
			return err
		}
		type change struct {
			changed bool
			now     int64
		}
		c, err := call(s.g, ctx, func(ctx context.Context) (change, error) {
			changed, now, err := s.g.redis.ChangePermits(ctx, s.cfg, s.g.newLocker(), st.Permits, int64(k))
			return change{changed, now}, err
		})
		if err != nil || c.changed || c.now == int64(k) {
			return named(unlate(err), s.cfg.UniqueKey())
		}
		if err := ctx.Err(); err != nil {
			return named(err, s.cfg.UniqueKey())
		}
	}
	return fmt.Errorf("%w: the permits of %s kept changing under SetPermits", ErrOptimisticLocking, s.cfg.UniqueKey())
}

// State reads what Redis holds for the semaphore, as the read-write lock's State does.
func (s *Semaphore) State(ctx context.Context) (SharedState, error) {
	if s == nil || s.g == nil {
		return SharedState{}, errZeroShared
	}
	st, err := s.g.sharedState(ctx, s.cfg, s.spec())
	return st, named(err, s.cfg.UniqueKey())
}

// ForceRelease lets the holding of holder go — a locker State reports in Holds — and tells
// the processes in line whose permits now fit, as a release does: the mutex's ForceRelease,
// for one holding of the read-write lock (a process's read-hold or its write-hold). It
// reports whether this call removed holder (a copy of its request sent again after a lost
// reply answers as the first did); when it did not, nothing is changed. Naming the holder
// makes it safe to repeat, and no copy of the holder's own requests takes the holding back.
// (As the mutex's, a call of the caller's after an error answers false when the first
// removed holder.)
//
// The holding's borrowers in this Generator lose it at once (their contexts end with
// ErrLockLost), also when holder is the locker of the holding's downgrade (a write-hold
// becoming a read-hold, or permits given back) whose answer is on its way or was lost; a
// holding whose take's answer is on its way is dropped as the answer comes (its waiters ask
// again). When ForceRelease's own answer is lost, the holding asks Redis whether it still
// holds: at once, or at its downgrade's next try (a moment later) — also one whose take, renewal
// or downgrade was answered after, which says nothing of the force. While the force is on its
// way, and after an answer that does not say it removed the holding until Redis says it still
// holds, the holding lends to no goroutine new (a try it would serve reports not obtained):
// the force may have removed it and served another process before its answer comes. One that
// Redis runs only after this process gave its answer up for lost (ctx ended first) is as a
// force from elsewhere. A holder elsewhere learns of it at its next renewal (within three
// quarters of its lease), its downgrade's next try, or its release, so until then it may act
// as if it held — use fencing tokens downstream.
// It returns ErrInvalidConfig for an empty holder, a *RedisProcessError when Redis failed,
// ctx's error when ctx ended first, and ErrClosed after Close.
func (l *RWLock) ForceRelease(ctx context.Context, holder string) (bool, error) {
	p := l.side(true)
	ok, err := p.forceRelease(ctx, holder)
	return ok, named(err, p.cfg.UniqueKey())
}

// ForceRelease lets the holding of holder go — a locker State reports in Holds — and gives
// its permits to the processes in line, as the read-write lock's ForceRelease does (see
// there for what it guarantees and what it cannot).
func (s *Semaphore) ForceRelease(ctx context.Context, holder string) (bool, error) {
	p := s.part(1)
	ok, err := p.forceRelease(ctx, holder)
	return ok, named(err, p.cfg.UniqueKey())
}

// forceRelease removes holder's holding of p's lock (either kind's ForceRelease).
func (p sharedPart) forceRelease(ctx context.Context, holder string) (bool, error) {
	g, cfg, spec := p.g, p.cfg, p.spec
	switch {
	case g == nil:
		return false, errZeroShared
	case ctx == nil:
		return false, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	case holder == "":
		return false, fmt.Errorf("%w: ForceRelease needs the holder to remove (a Locker of State's Holds)", ErrInvalidConfig)
	case g.isClosed():
		return false, ErrClosed
	}
	key := sharedKey(cfg.UniqueKey(), spec.Kind)
	st := g.lookupShared(key)
	counted := st != nil && st.forceSent(holder)
	res, err := call(g, ctx, func(ctx context.Context) (processor.SharedResult, error) {
		return g.redis.SharedForce(ctx, cfg, spec, holder)
	})
	removed := err == nil && (res.Outcome == processor.Released || res.Outcome == processor.Settled) // (Settled: by a copy of this request)
	if !counted {
		st = g.lookupShared(key)
	}
	if st != nil {
		// A holding of this Generator under holder (or whose downgrade's take, its answer on
		// its way or lost, is holder's) ends at once if it was removed; if the
		// outcome is unknown (a reply lost), or the holding was gone already — perhaps removed
		// by an earlier copy of this request whose reply was lost — it renews at once, and
		// learns whether it still holds (a holding its take makes meanwhile does too: took).
		st.mu.Lock()
		now := time.Now()
		if counted {
			st.forces.answered(holder, removed)
		}
		if removed && st.attempt != nil && st.attempt.locker == holder {
			st.forced = holder // taken, its answer on its way: took drops it
		}
		for _, h := range st.holds {
			switch {
			case h.ctx.Err() != nil || h.locker != holder && h.downTo != holder:
			case removed:
				h.stop(errForced) // (or the read-hold of its downgrade, whose answer is on its way or was lost)
			default:
				// also after the answer of a renewal (or of its downgrade) sent before, which
				// may have run before the force and says nothing of it
				h.check = true
				if h.renewAt.After(now) {
					h.renewAt = now
				}
			}
		}
		st.mu.Unlock()
		st.poke()
	}
	if err != nil {
		return false, unlate(err)
	}
	return removed, nil
}

// ReadSide returns the read side as a Part: a lock whose Lock is RLock (for a MultiLock, or any
// code that takes a Part).
func (l *RWLock) ReadSide() Part { return l.side(false) }

// WriteSide returns the write side as a Part.
func (l *RWLock) WriteSide() Part { return l.side(true) }

// Permits returns n permits as a Part: a lock whose Lock is Acquire(ctx, n).
func (s *Semaphore) Permits(n int) Part { return s.part(n) }

// side is a side of the lock (for a nil lock, a sharedPart with no Generator that still
// says which side it is).
func (l *RWLock) side(write bool) sharedPart {
	if l == nil {
		return sharedPart{write: write}
	}
	if write {
		return sharedPart{g: l.g, cfg: l.cfg, spec: l.spec(), n: processor.RWPermits, write: true}
	}
	return sharedPart{g: l.g, cfg: l.cfg, spec: l.spec(), n: 1}
}

// part is n permits of the semaphore (for a nil semaphore, a sharedPart with no Generator
// that still says it is permits).
func (s *Semaphore) part(n int) sharedPart {
	if s == nil {
		return sharedPart{spec: processor.Shared{Kind: processor.KindSem}, n: int64(n)}
	}
	return sharedPart{g: s.g, cfg: s.cfg, spec: s.spec(), n: int64(n)}
}

// sharedPart is a side of a read-write lock or permits of a semaphore, as a Part.
type sharedPart struct {
	g     *Generator
	cfg   domain.DLockConfig
	spec  processor.Shared
	n     int64
	write bool
}

// Config returns the lock's configuration.
func (p sharedPart) Config() domain.DLockConfig { return p.cfg }

// Kind says what the part takes: KindRead, KindWrite or KindPermits.
func (p sharedPart) Kind() LockKind { return kindOf(p.spec, p.write) }

func (p sharedPart) generator() *Generator { return p.g }
func (p sharedPart) order() string         { return p.cfg.UniqueKey() + "|" + string(p.Kind()) }

func (p sharedPart) lostIn(ctx context.Context) error {
	if p.g == nil {
		return nil
	}
	side := 0
	if p.write {
		side = 1
	}
	if so := ownerIn(ctx, p.g, sharedKey(p.cfg.UniqueKey(), p.spec.Kind), side); so != nil {
		return named(so.lostCause(), p.cfg.UniqueKey())
	}
	return nil
}

// Lock takes the side or the permits, waiting while ctx allows.
func (p sharedPart) Lock(ctx context.Context) (*Owner, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	o, _, err := p.g.acquireShared(ctx, p.cfg, p.spec, p.n, p.write, false)
	return o, named(err, p.cfg.UniqueKey())
}

// TryLock takes the side or the permits if it can at once.
func (p sharedPart) TryLock(ctx context.Context) (*Owner, bool, error) {
	if err := p.check(); err != nil {
		return nil, false, err
	}
	o, ok, err := p.g.acquireShared(ctx, p.cfg, p.spec, p.n, p.write, true)
	return o, ok, named(err, p.cfg.UniqueKey())
}
func (p sharedPart) check() error {
	if p.g == nil {
		return errZeroShared
	}
	if p.spec.Kind == processor.KindSem && p.n < 1 {
		return fmt.Errorf("%w: %d permits of semaphore %s", ErrInvalidConfig, p.n, p.cfg.UniqueKey())
	}
	return nil
}

// Unlock releases one hold of what owned holds of this lock.
func (p sharedPart) Unlock(owned context.Context) error {
	if p.g == nil {
		return errZeroShared
	}
	return named(p.g.unlockShared(owned, sharedKey(p.cfg.UniqueKey(), p.spec.Kind)), p.cfg.UniqueKey())
}

// FencingToken returns the token of owned's holding.
func (p sharedPart) FencingToken(owned context.Context) (uint64, bool) {
	if p.g == nil {
		return 0, false
	}
	return tokenOf(owned, p.g, sharedKey(p.cfg.UniqueKey(), p.spec.Kind))
}

// SharedState is what Redis holds for a read-write lock or a semaphore.
type SharedState struct {
	Kind    string       // "rw" or "sem"
	Permits int64        // a semaphore's k (Redis's while in use); 0 for a read-write lock
	Holds   []SharedHold // one per holding (a process's read tenure, write-hold, or permits)
	// Waiting lists the processes in line that a release would serve, first first: not one
	// that died (it listened for the lock's messages and does not now), nor one that does not
	// listen and has not renewed its place within a third of its lease, nor one whose place
	// expired. One that stopped renewing keeps its place until it expires, and is listed
	// again once it asks again.
	Waiting []SharedWaits
	Fence   uint64 // the last fencing token reserved (a write-hold reserves a block)
}

// Writers returns the holdings of the write side.
func (s SharedState) Writers() []SharedHold { return s.filter(true) }

// Readers returns the holdings of the read side.
func (s SharedState) Readers() []SharedHold { return s.filter(false) }

func (s SharedState) filter(write bool) []SharedHold {
	var out []SharedHold
	for _, h := range s.Holds {
		if h.Write == write && s.Kind == string(processor.KindRW) {
			out = append(out, h)
		}
	}
	return out
}

// SharedHold is one holding.
type SharedHold struct {
	Locker  string
	Permits int64  // a semaphore's permits; 1 for a read-hold, processor.RWPermits (2^40) for a write-hold
	Write   bool   // a write-hold
	Token   uint64 // the holding's: a write-hold's first (its writers have the next ones of its block)
	TTL     time.Duration
	Mine    bool // a holding of this Generator (as State.Mine says of the mutex)
}

// SharedWaits is a process in line.
type SharedWaits struct {
	Process string
	Permits int64 // the permits it asks for: a semaphore's; 1 for a reader, processor.RWPermits (2^40) for a writer
	Write   bool
}

func (g *Generator) sharedState(ctx context.Context, cfg domain.DLockConfig, spec processor.Shared) (SharedState, error) {
	switch {
	case ctx == nil:
		return SharedState{}, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	case g.isClosed():
		return SharedState{}, ErrClosed
	}
	in, err := call(g, ctx, func(ctx context.Context) (processor.SharedInspection, error) {
		return g.redis.SharedInspect(ctx, cfg, spec)
	})
	if err != nil {
		return SharedState{}, unlate(err)
	}
	if in.Kind != spec.Kind { // (kept so in Redis: its requests are refused too)
		return SharedState{}, processor.KindMismatch(cfg, in.Kind, spec.Kind)
	}
	st := SharedState{Kind: string(in.Kind), Fence: in.Fence}
	rw := in.Kind == processor.KindRW
	if !rw {
		st.Permits = in.Permits
	}
	for _, h := range in.Holdings {
		st.Holds = append(st.Holds, SharedHold{Locker: h.Locker, Permits: h.Permits, Write: rw && h.Permits == processor.RWPermits, Token: h.Token, TTL: h.TTL,
			Mine: strings.HasPrefix(h.Locker, g.prefix)})
	}
	for _, w := range in.Waiting {
		st.Waiting = append(st.Waiting, SharedWaits{Process: w.Owner, Permits: w.Permits, Write: rw && w.Permits == processor.RWPermits})
	}
	return st, nil
}

// shareOwner is one acquisition of a shared lock: the permits it borrows from a holding.
type shareOwner struct {
	st       *sharedState
	hold     *shareHold
	n        int64
	write    bool
	token    uint64
	count    int  // holds (re-entries), guarded by st.mu
	done     bool // released or ended, guarded by st.mu
	slot     int  // its index in hold.owners, -1 when not there; guarded by st.mu
	fresh    bool // not reported to the Observer yet (set by the acquiring goroutine only)
	how      How  // how it was acquired (Observer): a holding passed on within the process, or what sent the take of its own
	at       time.Time
	endsWith // its owner context
	stop     func() bool
	public   weak.Pointer[Owner]
}

// ownKey finds a shared owner in a context: by Generator, lock and side (last: the innermost).
type ownKey struct {
	g    *Generator
	key  string
	side int // 0 read, 1 write, 2 the innermost
}

// ownerIn returns the owner of the lock of key (in g) that ctx carries, of side, or nil.
// Every call of an owner finds it here, and a holding whose lease ran out unseen is found
// lost (lapse).
func ownerIn(ctx context.Context, g *Generator, key string, side int) *shareOwner {
	so, _ := ctx.Value(ownKey{g, key, side}).(*shareOwner)
	if so != nil {
		so.st.lapse(so.hold)
	}
	return so
}

// lostCause returns why so's holding ended if it was lost or closed under so (ErrLockLost,
// ErrClosed), else nil.
func (so *shareOwner) lostCause() error {
	so.st.mu.Lock()
	defer so.st.mu.Unlock()
	return so.lostLocked()
}

// lostLocked is lostCause; the caller holds st.mu.
func (so *shareOwner) lostLocked() error { return lossOf(so.hold.ctx) }

// lossOf returns why ctx ended if it was lost or closed (ErrLockLost, ErrClosed), else nil.
func lossOf(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrLockLost) || errors.Is(cause, ErrClosed) {
		return cause
	}
	return nil
}

// live reports whether so still holds.
func (so *shareOwner) live() bool {
	so.st.mu.Lock()
	defer so.st.mu.Unlock()
	return !so.done && so.hold.ctx.Err() == nil
}

// kindOf names what an acquisition of spec takes, for the Observer.
func kindOf(spec processor.Shared, write bool) LockKind {
	switch {
	case spec.Kind == processor.KindSem:
		return KindPermits
	case write:
		return KindWrite
	}
	return KindRead
}

// acquireShared is the Lock (try false) and TryLock of n permits of a shared lock, the write
// side if write: it returns the Owner and true, false with a nil error for a TryLock that found
// them held, or why not. An acquisition that Close overtook before it returned — its holding
// ended by Close, or about to be — returns ErrClosed, as the mutex's does, never an Owner
// that Close let go; one whose holding was lost as it was lent is not returned either (Lock
// waits on, TryLock reports false, a downgrade the loss: lostAsLent).
func (g *Generator) acquireShared(ctx context.Context, cfg domain.DLockConfig, spec processor.Shared, n int64, write, try bool) (*Owner, bool, error) {
	if ctx == nil {
		return nil, false, fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	start := time.Now()
	kind := kindOf(spec, write)
	o, ok, err := g.acquireShared1(ctx, cfg, spec, n, write, try)
	switch {
	case errors.Is(err, ErrUpgrade): // (a call refused, no acquisition: not counted as one that failed)
	case err != nil:
		g.observer.NotObtained(NotObtainedEvent{Kind: kind, Config: cfg, Wait: time.Since(start), Reason: reasonOf(err), Err: err})
	case ok && o.sh.fresh:
		o.sh.fresh = false
		g.observer.Acquired(AcquireEvent{Kind: kind, Config: cfg, Wait: time.Since(start), How: o.sh.how, Token: o.sh.token})
		if o.sh.closedMeanwhile() { // taken as Close ran: given back (as the mutex's acquire does)
			return nil, false, ErrClosed
		}
	}
	return o, ok, named(err, cfg.UniqueKey())
}

// closedMeanwhile reports whether Close began before so, a fresh acquisition, could be
// returned; if so it ends so. Its holding goes back with Close, which ended it already or
// ends it next (the driver gives back every holding once Close began), and so is reported
// released once: by Close's driver or newOwner when the holding ended first, else here.
// Checked under mu, which Close's driver takes to end a holding: an acquisition that passes
// is live when it is returned, and Close ends it as any other.
func (so *shareOwner) closedMeanwhile() bool {
	st := so.st
	st.mu.Lock()
	if st.g.done.Err() == nil {
		st.mu.Unlock()
		return false
	}
	tell := so.hold.ctx.Err() == nil // (ended: reported released already, or lost)
	if !so.done {
		so.end(ErrClosed)
	}
	st.mu.Unlock()
	st.poke()
	if tell {
		st.g.observer.Released(so.event(ErrClosed))
	}
	return true
}

func (g *Generator) acquireShared1(ctx context.Context, cfg domain.DLockConfig, spec processor.Shared, n int64, write, try bool) (*Owner, bool, error) {
	key := sharedKey(cfg.UniqueKey(), spec.Kind)
	side := 0
	if write {
		side = 1
	}
	if so := ownerIn(ctx, g, key, side); so != nil {
		if cause := so.lostCause(); cause != nil {
			return nil, false, cause // a lost (or closed) holding stays lost for its owner
		}
		if spec.Kind == processor.KindSem && n > so.n {
			// a re-entry takes no more permits: one that asks for more than the owner holds
			// would count permits nobody took
			return nil, false, fmt.Errorf("%w: a re-entry of %d permits of %s through an owner of %d (a re-entry takes no more)", ErrInvalidConfig, n, cfg.UniqueKey(), so.n)
		}
		if err := ctx.Err(); err != nil {
			if cause := lossOf(ctx); cause != nil {
				return nil, false, cause // (an Owner ended as its holding was lost or closed meanwhile)
			}
			return nil, false, fmt.Errorf("%w: %w", ErrNotObtained, err) // (an ended context counts no hold)
		}
		if o := so.reenter(ctx); o != nil {
			return o, true, nil
		}
		if cause := so.lostCause(); cause != nil {
			return nil, false, cause
		}
	}
	var down *shareOwner
	if spec.Kind == processor.KindRW {
		other := ownerIn(ctx, g, key, 1-side)
		if other != nil {
			if cause := other.lostCause(); cause != nil {
				return nil, false, cause // a lost (or closed) owner of the other side stays lost too
			}
		}
		switch {
		case other == nil || !other.live():
		case write:
			return nil, false, ErrUpgrade
		default:
			down = other
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrNotObtained, err) // (a downgrade lends no hold to it either)
	}
	if down != nil {
		o, err := down.st.downgrade1(ctx, down)
		if err != nil {
			return nil, false, err
		}
		if o != nil && !o.sh.lostAsLent() {
			return o, true, nil
		}
		if cause := down.lostCause(); cause != nil || o != nil {
			return nil, false, cause // (the write side lost as it was lent, or before: lost it stays)
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrNotObtained, err)
		}
		st, err := g.shared(cfg, spec)
		if err != nil {
			return nil, false, err
		}
		w := &shareWaiter{n: n, write: write, try: try, done: make(chan struct{})}
		err = st.wait(ctx, w)
		switch {
		case errors.Is(err, errStateDropped):
			continue
		case err != nil:
			return nil, false, err
		case w.err != nil:
			return nil, false, w.err
		case w.hold == nil:
			if try {
				return nil, false, nil
			}
			return nil, false, ErrNotObtained
		}
		if f := g.opts.lent; f != nil {
			f()
		}
		o := st.newOwner(ctx, w.hold, w.token, n, write)
		if o.sh.lostAsLent() {
			if try {
				return nil, false, nil
			}
			continue
		}
		o.sh.how = w.how()
		return o, true, nil
	}
}

// downgrade1 lends the read side of down's write-hold to a new owner (it does not queue: the
// writer's own read must not wait behind the writers it holds off), once the holding has half
// its lease left, as every new borrower has: it renews it first when it has less (freshen),
// and waits while a ForceRelease here may have removed it (held). It returns nil when down or
// its holding ended, and an error when ctx ended or the renewal failed or came late first
// (nothing is lent then).
func (st *sharedState) downgrade1(ctx context.Context, down *shareOwner) (*Owner, error) {
	for renewed := false; ; {
		st.mu.Lock()
		if down.done || down.hold.ctx.Err() != nil {
			st.mu.Unlock()
			return nil, nil
		}
		if st.held(down.hold) {
			st.mu.Unlock()
			// the force's answer ends the holding or has it renewed: wait for that renewal
			if err := st.nextAnswer(ctx, down.hold, false); err != nil && down.hold.ctx.Err() == nil {
				return nil, fmt.Errorf("%w: %w", ErrNotObtained, err)
			}
			continue
		}
		if !renewed && st.stale(down.hold, time.Now()) {
			st.mu.Unlock()
			if err := st.freshen(ctx, down.hold); err != nil && down.hold.ctx.Err() == nil {
				return nil, fmt.Errorf("%w: %w", ErrNotObtained, err)
			}
			renewed = true
			continue
		}
		down.hold.readers++
		token := down.hold.token
		st.mu.Unlock()
		if f := st.g.opts.lent; f != nil {
			f()
		}
		return st.newOwner(ctx, down.hold, token, 1, false), nil
	}
}

// newOwner makes the Owner of a fresh acquisition lent from h.
func (st *sharedState) newOwner(ctx context.Context, h *shareHold, token uint64, n int64, write bool) *Owner {
	so := &shareOwner{st: st, hold: h, n: n, write: write, token: token, count: 1, fresh: true, at: time.Now(), slot: -1}
	var cctx context.Context
	// (a child of the holding's context, with ctx's values: it ends with the holding on the
	// goroutine that ends it, as a mutex's owner does, not a goroutine's hop later)
	cctx, so.cancelCtx = context.WithCancelCause(layered{Context: h.ctx, under: context.WithoutCancel(ctx)})
	so.stop = context.AfterFunc(h.ctx, func() {
		cause := context.Cause(h.ctx)
		so.cancel(cause) // first: a slow observer must not delay the owner's notice
		if errors.Is(cause, ErrLockLost) {
			st.g.observer.Lost(LossEvent{Kind: kindOf(st.spec, write), Config: st.cfg, Token: token, Held: time.Since(so.at), Cause: cause})
		}
	})
	st.mu.Lock()
	closed := errors.Is(context.Cause(h.ctx), ErrClosed)
	if h.ctx.Err() == nil {
		so.slot = len(h.owners)
		h.owners = append(h.owners, so) // (Close reports it released; a holding lost already was told Lost)
	}
	st.mu.Unlock()
	if closed { // Close ended the holding as it was lent
		st.g.observer.Released(so.event(ErrClosed))
	}
	side := 0
	if write {
		side = 1
	}
	cctx = context.WithValue(cctx, ownKey{st.g, st.key, side}, so)
	so.ctx = context.WithValue(cctx, ownKey{st.g, st.key, 2}, so)
	o := &Owner{ctx: so.ctx, sh: so}
	so.public = weak.Make(o)
	runtime.AddCleanup(o, func(so *shareOwner) { so.dropped() }, so)
	return o
}

// lostAsLent reports whether the holding so, a fresh acquisition, borrows from was lost
// before so could be returned (it was told Lost); if so it ends so, giving its permits back.
// An acquisition is returned only if its holding was live then, as Close's is (closedMeanwhile).
func (so *shareOwner) lostAsLent() bool {
	st := so.st
	st.mu.Lock()
	cause := so.lostLocked()
	if cause == nil || errors.Is(cause, ErrClosed) {
		st.mu.Unlock()
		return false
	}
	so.end(cause)
	st.mu.Unlock()
	st.poke()
	return true
}

// reenter counts one more hold of so, through ctx, and returns its Owner: so's own when ctx
// is it, ctx when it is an Owner of one hold of so that still holds (it counts one more), else
// an Owner of this one hold (oneHold); nil when so no longer holds (released,
// lost, or ended by Close). It checks and counts under mu, which Close's driver takes to end
// a holding: a re-entry comes wholly before Close ends the holding (and the Owner it returns
// ends with it), or after it (nil).
func (so *shareOwner) reenter(ctx context.Context) *Owner {
	if f := so.st.g.opts.reentering; f != nil {
		f()
	}
	so.st.mu.Lock()
	defer so.st.mu.Unlock() // (an Owner of one hold counts under mu too, as its Unlock spends)
	if so.done || so.hold.ctx.Err() != nil {
		return nil
	}
	so.count++
	o := so.public.Value()
	if o == nil { // (collected, its clean-up not run yet: this Owner takes its place, and its clean-up the other's, which finds it and does nothing)
		o = &Owner{ctx: so.ctx, sh: so}
		so.public = weak.Make(o)
		runtime.AddCleanup(o, func(so *shareOwner) { so.dropped() }, so)
		return o
	}
	if ctx == context.Context(o) {
		return o
	}
	if one := oneHoldOf(ctx, so); one != nil && one.add() {
		return ctx.(*Owner)
	}
	// (its values are ctx's, but for the lock's own keys: so is its side's owner and the
	// innermost, whatever hold of the lock ctx carries — a write re-entered through a read
	// Owner unlocks the write)
	side := 0
	if so.write {
		side = 1
	}
	vals := context.WithValue(context.WithValue(ctx, ownKey{so.st.g, so.st.key, side}, so), ownKey{so.st.g, so.st.key, 2}, so)
	return &Owner{ctx: so.ctx, vals: vals, sh: so, one: &oneHold{of: so, outer: o, holds: 1}}
}

// unlock releases one hold of so, through ctx: an Owner of one hold (oneHold) releases only
// the holds it counts.
func (so *shareOwner) unlock(ctx context.Context) error {
	defer runtime.KeepAlive(ctx) // (an Owner: see unlockAlive)
	bound, stop := deadlineOf(ctx)
	defer stop()
	one := oneHoldOf(ctx, so)
	if f := so.st.g.opts.unlocking; f != nil {
		f()
	}
	return named(so.unlock1(one, bound), so.st.cfg.UniqueKey())
}

// unlock1 releases one hold; the final one waits until what it let go is free in Redis, or
// lent again — or bound (if not nil) ends: the driver goes on releasing it.
func (so *shareOwner) unlock1(one *oneHold, bound context.Context) error {
	st := so.st
	st.mu.Lock()
	st.lapseLocked(so.hold) // (its Owner's Unlock comes here without ownerIn)
	if so.done {
		st.mu.Unlock()
		if cause := lossOf(so.ctx); cause != nil {
			return cause // a lost (or closed) holding stays so for its owner, as the mutex's does
		}
		return ErrNotHeld
	}
	if !one.spend() { // (an Owner of one hold, released already)
		cause := so.lostLocked()
		st.mu.Unlock()
		if cause != nil {
			return cause
		}
		return ErrNotHeld
	}
	if so.count--; so.count > 0 {
		cause := so.lostLocked() // (every Unlock of a lost holding says so, as the mutex's)
		st.mu.Unlock()
		return cause
	}
	if so.hold.ctx.Err() != nil {
		// lost or closed before this Unlock: that was told then (Lost, or Released by Close's
		// driver; the holding's callback, started as its context ended, tells the loss)
		cause := context.Cause(so.hold.ctx)
		so.end(cause) // (the owner context may not have heard yet: it ends with the loss, not Canceled)
		st.mu.Unlock()
		st.poke()
		return cause
	}
	cause := error(nil)
	downgraded := so.write && so.hold.readers > 0 // (readers borrow beside a writer only by its downgrade)
	so.end(context.Canceled)
	var fate chan error
	if h := so.hold; h.idle() && h.ctx.Err() == nil {
		// as the mutex's: Unlock returns once what it let go is free in Redis (or lent again)
		fate = make(chan error, 1)
		h.fate = append(h.fate, fate)
	}
	st.mu.Unlock()
	st.poke()
	var gaveUp <-chan struct{}
	if bound != nil {
		gaveUp = bound.Done()
	}
	if fate != nil {
		select {
		case err := <-fate:
			if cause == nil {
				cause = err
			}
		case <-gaveUp:
			cause = &RedisProcessError{Op: "release", Key: st.cfg.UniqueKey(), Err: fmt.Errorf("%w: %w", errReleaseInBackground, context.Cause(bound))}
		case <-st.g.clean.Done():
			select {
			case cause = <-fate:
			default: // Close gave up before the release was answered: Redis may hold it still
				cause = &RedisProcessError{Op: "release", Key: st.cfg.UniqueKey(), Err: errCloseGaveUp}
			}
		}
	}
	if downgraded && fate == nil {
		st.writeLetGo(so.hold, gaveUp)
	}
	if errors.Is(cause, ErrLockLost) { // found by the release: a loss, then the release, as the mutex's
		st.g.observer.Lost(so.loss(cause))
	}
	st.g.observer.Released(so.event(cause))
	return cause
}

// event is the ReleaseEvent of so's end with err.
func (so *shareOwner) event(err error) ReleaseEvent {
	return ReleaseEvent{Kind: kindOf(so.st.spec, so.write), Config: so.st.cfg, Token: so.token, Held: time.Since(so.at), Err: err}
}

// loss is the LossEvent of so's loss with cause.
func (so *shareOwner) loss(cause error) LossEvent {
	return LossEvent{Kind: kindOf(so.st.spec, so.write), Config: so.st.cfg, Token: so.token, Held: time.Since(so.at), Cause: cause}
}

// end ends so with cause and returns its borrowing. The caller holds st.mu.
func (so *shareOwner) end(cause error) {
	so.done = true
	if o := so.hold.owners; so.slot >= 0 && so.slot < len(o) && o[so.slot] == so { // (in O(1): a read-hold may have thousands)
		last := o[len(o)-1]
		o[so.slot], last.slot = last, so.slot
		o[len(o)-1] = nil
		so.hold.owners = o[:len(o)-1]
	}
	so.slot = -1
	so.st.unlend(so)
	so.st.lendLocked()
	so.stop()
	so.cancel(cause)
}

// dropped runs when so's Owner was collected without its final Unlock.
func (so *shareOwner) dropped() {
	so.st.mu.Lock()
	if so.done || so.public.Value() != nil {
		so.st.mu.Unlock()
		return
	}
	so.end(context.Canceled)
	so.st.mu.Unlock()
	so.st.poke()
	so.st.g.log.Error("dlock: shared lock released by the garbage collector: its owner was dropped without Unlock",
		zap.String("key", so.st.cfg.UniqueKey()))
}

func (g *Generator) unlockShared(owned context.Context, key string) error {
	if owned == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidConfig)
	}
	so := ownerIn(owned, g, key, 2)
	if so == nil {
		if g.isClosed() {
			return ErrClosed
		}
		return ErrNotHeld
	}
	return so.unlock(owned)
}

func tokenOf(owned context.Context, g *Generator, key string) (uint64, bool) {
	if owned == nil {
		return 0, false
	}
	so := ownerIn(owned, g, key, 2)
	if so == nil || !so.live() {
		return 0, false
	}
	return so.token, true
}
