package dlock_test

// The explorer of the family's Go driver: random, seeded schedules of requests of a read-write
// lock or a semaphore — RLock, Lock, tries, re-entries, downgrades, Acquire and Release of n
// permits (a holding lent on to a waiter of its process for fewer), SetPermits raising and lowering the count (by the operator, or by a process behind
// its faulty network), MultiLocks of a side or permits with a mutex beside the lock, an
// operator's ForceRelease, Close in the middle (and a new process in its place), short and
// already-ended contexts, waits cancelled — by several Generators ("processes") on one Redis,
// each behind a faulty network (chaosHook: copies delivered twice, replies lost, requests kept
// on the wire and run late, requests slowed; now and then every write of one process faulted
// for a lease, a storm). It checks:
//   - after every step, what the processes count held against each other (never a writer
//     beside another holding, never more permits out than the semaphore ever had, at most one
//     process in the mutex) and against Redis (each holding there at least until its process
//     counts it held); in Redis, permits out above the count only once it was lowered below
//     them, and no holding granted until they fit again;
//   - a semaphore's grant: once the count has stood for half a lease, no permits are handed
//     out — from Redis or lent within a process — while more than it are out (SetPermits);
//   - a MultiLock that gave up: its process lends neither part to anyone once Lock returned,
//     and with no fault on the wire keeps nothing of them in Redis once its driver let go
//     what it took as the wait ended;
//   - each fresh acquisition: counted held at least half a lease past the call, held so in
//     Redis, a writer's fencing token above every token released before it asked (unless
//     an operator forced its holding out), never an Owner for a context ended before the call;
//   - errors: only documented ones (ErrClosed only once Close began), an upgrade refused, a
//     re-entry refused only for a holding that ended, a second Unlock ErrNotHeld (or the loss
//     or Close its holding ended with), no loss without a fault, a force or a stall of the
//     machine;
//   - Close: every Owner of the process ended;
//   - progress: with every wait ended, a process that owns nothing gets what fits beside the
//     live owners' holds while they hold on (what they do not use is not kept from it);
//   - at the end: every wait comes home once everyone lets go (none waits its ten seconds in
//     vain), every goroutine ends, no key is left without a time to live, and a new process
//     takes the key whole within seconds.
//
// internal/explore explores the scripts with a model of the Go side; this runs the Go side
// itself. A failure prints the seed: DLOCK_EXPLORE_SEED=<seed> replays the schedule (the same
// steps, faults drawn from the same seeds; the goroutines' interleaving is the machine's).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// famProc is one process of an exploration: a Generator on a client of its own behind a
// chaosHook.
type famProc struct {
	id      int
	g       *dlock.Generator
	h       *chaosHook
	closing atomic.Bool // Close began: ErrClosed is an expected answer
	rw      *dlock.RWLock
	sem     *dlock.Semaphore
	mutex   *dlock.DistributedReentrantLock // beside the lock: only MultiLocks take it
	ops     atomic.Int64                    // acquisitions begun (a MultiLock that gave up knows whether another began)
	close   func()                          // closes the client (after the hook is quiet)
}

// famHeld is an acquisition the schedule holds.
type famHeld struct {
	p     *famProc
	o     *dlock.Owner     // what Unlock releases
	sh    *dlock.Owner     // the lock's own: o, or a MultiLock's part of it
	multi *dlock.MultiLock // o is this MultiLock's (its other part the mutex)
	mtok  uint64           // a MultiLock's mutex token
	write bool
	down  bool // a downgrade's read side (its context carries the write owner too)
	n     int
	count int       // holds not released yet
	tok   uint64    // its fencing token (0: its holding ended before it was read)
	at    time.Time // when it was acquired
}

// token returns o's fencing token.
func (p *famProc) token(o *dlock.Owner) (uint64, bool) {
	if p.sem != nil {
		return p.sem.FencingToken(o)
	}
	return p.rw.FencingToken(o)
}

// famExplorer runs one schedule.
type famExplorer struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand // the scheduler's
	sem   bool
	hoard bool // unlocks half as often
	k     int
	lease time.Duration
	pct   int
	tg    string
	key   string
	mkey  string           // the mutex's, beside the lock
	mtype string           // its lock type (its key sorts before or after the lock's)
	op    *dlock.Generator // the operator's (no faults): State, ForceRelease and SetPermits
	opRW  *dlock.RWLock
	opSem *dlock.Semaphore
	opMu  *dlock.DistributedReentrantLock

	mu      sync.Mutex
	procs   []*famProc // live, by slot
	all     []*famProc // every process made
	held    []*famHeld
	ended   []*dlock.Owner // released to the end: a further Unlock says ErrNotHeld, or the loss
	waits   map[int]context.CancelCauseFunc
	waitOf  map[int]*famProc
	freeing map[*famProc]int // Unlocks on their way beside the steps
	forced  map[string]bool
	steps   []string
	floor   uint64 // the highest token of an owner released to the end without error
	mfloor  uint64 // the same of the mutex
	nextID  int
	waitSeq int

	// the semaphore's count (SetPermits)
	kChanges []kChange
	kSeq     int      // changes begun
	kKnown   int      // Redis's count while no change is on its way (0: not known)
	kCeil    int      // the largest count the semaphore had
	prev     *semRead // the last read of Redis with the count known

	stallMu sync.Mutex
	stalls  []time.Time // when the test process was found held up (stallWatch)

	wg      sync.WaitGroup
	winding atomic.Bool
	fails   atomic.Int64
	stats   famStats
}

type famStats struct {
	steps, checks, acquired, reentered, downgraded, released, forced, closed, cancelled            atomic.Int64
	tries, refused, short, ended, emptyHanded, upgrades, lostSeen, redisErrs, doubleUnlock, storms atomic.Int64
	setPermits, multis, multiGaveUp, noneHeldChecked, grantsOver, overK                            atomic.Int64
	progress, lentOn                                                                               atomic.Int64
}

// kChange is a SetPermits of the schedule.
type kChange struct {
	to    int
	until time.Time // zero while the call runs; then until when its change may still land (a call that failed: a copy on the wire runs up to two leases later)
}

// kSnap is what the schedule knows of the semaphore's count at a moment.
type kSnap struct {
	vals  []int     // the counts Redis may have (nil: any)
	seq   int       // changes begun before it
	open  bool      // a change is on its way
	calm  bool      // none is, and the count is known: vals[0]
	since time.Time // when the last change could last land
}

// semRead is a read of Redis with the count known.
type semRead struct {
	seq     int
	permits int64
	out     int64
	held    map[string]int64 // permits by locker
}

func (x *famExplorer) logf(format string, args ...any) {
	x.mu.Lock()
	x.steps = append(x.steps, fmt.Sprintf("%6dms ", time.Now().UnixMilli()%1000000)+fmt.Sprintf(format, args...))
	x.mu.Unlock()
}

func (x *famExplorer) fail(format string, args ...any) {
	if x.fails.Add(1) <= 10 {
		x.t.Errorf("seed %d: "+format, append([]any{x.seed}, args...)...)
	}
}

// newProc makes a process (slot id).
func (x *famExplorer) newProc() *famProc {
	x.mu.Lock()
	id := x.nextID
	x.nextID++
	x.mu.Unlock()
	h := newChaosHook(x.lease, x.pct, x.seed*131+uint64(id))
	c := srv.Client()
	c.AddHook(h)
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(x.lease))
	if err != nil {
		x.t.Fatal(err)
	}
	p := &famProc{id: id, g: g, h: h, close: func() { h.quiet(); c.Close() }}
	if p.mutex, err = g.Gen(x.mtype, x.tg); err != nil {
		x.t.Fatal(err)
	}
	if x.sem {
		p.sem = semOf(x.t, g, x.tg, x.k)
	} else {
		p.rw = rwOf(x.t, g, x.tg)
	}
	x.mu.Lock()
	x.all = append(x.all, p)
	x.mu.Unlock()
	return p
}

// expected reports whether err is an answer the schedule may get from p: a documented error,
// ErrClosed only once p's Close began.
func (x *famExplorer) expected(p *famProc, err error) bool {
	if err == nil {
		return true
	}
	if errors.Is(err, dlock.ErrClosed) {
		return p.closing.Load()
	}
	var rpe *dlock.RedisProcessError
	if errors.As(err, &rpe) {
		x.stats.redisErrs.Add(1)
	}
	return documentedErr(err) && !errors.Is(err, dlock.ErrInvalidConfig)
}

// expectedN is expected for an acquisition of n permits begun at s: ErrInvalidConfig too if n
// is more than a count the semaphore may have had meanwhile.
func (x *famExplorer) expectedN(p *famProc, err error, n int, s kSnap) bool {
	if x.sem && errors.Is(err, dlock.ErrInvalidConfig) {
		low := x.kLow(s)
		return low == 0 || n > low
	}
	return x.expected(p, err)
}

// kSnapshot returns what the schedule knows of the semaphore's count now.
func (x *famExplorer) kSnapshot() kSnap {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := time.Now()
	s := kSnap{seq: x.kSeq}
	if x.kKnown > 0 {
		// (and the count the semaphore is made with: a semaphore nobody used for two leases
		// has it again)
		s.vals = []int{x.kKnown, x.k}
	}
	for _, c := range x.kChanges {
		if c.until.IsZero() || c.until.After(now) {
			s.open = true
			if s.vals != nil {
				s.vals = append(s.vals, c.to)
			}
		} else if c.until.After(s.since) {
			s.since = c.until
		}
	}
	s.calm = !s.open && x.kKnown > 0
	return s
}

// kLow returns the lowest count the semaphore may have had since s (0: any).
func (x *famExplorer) kLow(s kSnap) int {
	if s.vals == nil {
		return 0
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	low := slices.Min(s.vals)
	for j := s.seq; j < len(x.kChanges); j++ {
		low = min(low, x.kChanges[j].to)
	}
	return low
}

// setPermits changes the semaphore's count while permits are out and processes wait: as the
// operator (no faults), or through p, whose writes are faulted as all of p's are (a copy may
// land again, or late; a call that failed may still land up to two leases later).
func (x *famExplorer) setPermits(i int, p *famProc) {
	k := 1 + x.rng.IntN(x.k+2)
	byOp := x.rng.IntN(2) == 0
	x.mu.Lock()
	j := len(x.kChanges)
	x.kChanges = append(x.kChanges, kChange{to: k})
	x.kSeq++
	x.kCeil = max(x.kCeil, k)
	x.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	who := "the operator"
	if byOp {
		err = x.opSem.SetPermits(ctx, k)
	} else {
		who = fmt.Sprintf("P%d", p.id)
		err = p.sem.SetPermits(ctx, k)
	}
	x.stats.setPermits.Add(1)
	x.logf("step %d: %s SetPermits(%d): %v", i, who, k, err)
	x.mu.Lock()
	now := time.Now()
	until := now
	if err != nil {
		until = now.Add(2*x.lease + 250*time.Millisecond)
	}
	x.kChanges[j].until = until
	x.kKnown = k
	for jj, c := range x.kChanges {
		if err != nil || jj != j && (c.until.IsZero() || c.until.After(now)) {
			x.kKnown = 0 // (learnt again from Redis once no change is on its way: check)
		}
	}
	x.mu.Unlock()
	switch {
	case err == nil:
	case byOp || errors.Is(err, dlock.ErrOptimisticLocking) || !x.expected(p, err):
		x.fail("%s SetPermits(%d): %v", who, k, err)
	}
}

// checkGrant checks a fresh acquisition of permits asked at start (s: the count then): if the
// count had stood for half a lease by then (time for its holders to be told of it), and stands
// still as Redis is read, Redis has no more permits out than it. More out would have been out
// since the count was set (no take is granted while more than it are out, so once fewer
// were, more never are again), so this acquisition, or another since, was handed permits
// while more than the count were out.
func (x *famExplorer) checkGrant(name string, s kSnap, start time.Time) {
	told := start.Add(-x.lease / 2)
	if !s.calm || s.since.After(told) {
		return
	}
	st, err := x.state()
	after := x.kSnapshot()
	if err != nil || after.seq != s.seq || !after.calm || st.Permits != int64(s.vals[0]) {
		return
	}
	x.stats.grantsOver.Add(1)
	var out int64
	for _, h := range st.Holds {
		out += h.Permits
	}
	if out > st.Permits && !x.stalledSince(told) {
		x.fail("%s: %d permits out of %d after it was granted, with the count standing since %v before the call: %+v",
			name, out, st.Permits, start.Sub(s.since), st.Holds)
	}
}

func (x *famExplorer) mutexState() (dlock.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return x.opMu.State(ctx)
}

// TestFamilyExplore runs random schedules of the family's driver under a faulty network, a
// few seconds' worth (-short too); DLOCK_SOAK=<duration> runs them that long, and
// DLOCK_EXPLORE_SEED=<seed> replays one.
func TestFamilyExplore(t *testing.T) {
	if v := os.Getenv("DLOCK_EXPLORE_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("DLOCK_EXPLORE_SEED=%q: %v", v, err)
		}
		exploreFamily(t, seed)
		return
	}
	d := 4 * time.Second
	if os.Getenv("DLOCK_SOAK") != "" {
		d = soakFor(t)
	}
	base := uint64(time.Now().UnixNano())
	var total famStats
	n := 0
	for end := time.Now().Add(d); n == 0 || time.Now().Before(end); n++ {
		seed := base + uint64(n)
		var st *famStats
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { st = exploreFamily(t, seed) })
		if st != nil {
			total.steps.Add(st.steps.Load())
			total.checks.Add(st.checks.Load())
			total.acquired.Add(st.acquired.Load())
			total.forced.Add(st.forced.Load())
			total.closed.Add(st.closed.Load())
			total.setPermits.Add(st.setPermits.Load())
			total.multis.Add(st.multis.Load())
			total.multiGaveUp.Add(st.multiGaveUp.Load())
			total.noneHeldChecked.Add(st.noneHeldChecked.Load())
			total.grantsOver.Add(st.grantsOver.Load())
			total.progress.Add(st.progress.Load())
			total.lentOn.Add(st.lentOn.Load())
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d schedules, %d steps, %d checks, %d acquisitions, %d forced, %d closed in the middle, %d SetPermits, %d MultiLocks (%d gave up, %d of them checked alone), %d grants checked with the count standing, %d waiters that fit beside the owners got in, %d holdings lent on to a waiter for fewer permits",
		n, total.steps.Load(), total.checks.Load(), total.acquired.Load(), total.forced.Load(), total.closed.Load(),
		total.setPermits.Load(), total.multis.Load(), total.multiGaveUp.Load(), total.noneHeldChecked.Load(), total.grantsOver.Load(), total.progress.Load(), total.lentOn.Load())
}

// exploreFamily runs the schedule of seed.
func exploreFamily(t *testing.T, seed uint64) *famStats {
	before := goleak.IgnoreCurrent()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	x := &famExplorer{t: t, seed: seed, rng: rng, waits: map[int]context.CancelCauseFunc{}, waitOf: map[int]*famProc{},
		freeing: map[*famProc]int{}, forced: map[string]bool{}}
	x.sem = rng.IntN(2) == 0
	x.k = 1 + rng.IntN(4)
	x.kKnown, x.kCeil = x.k, x.k
	x.mtype = []string{"MA", "TM"}[rng.IntN(2)] // (DLOCK_MA_… sorts before the lock's key, DLOCK_TM_… after)
	x.lease = []time.Duration{300 * time.Millisecond, 500 * time.Millisecond}[rng.IntN(2)]
	x.pct = []int{0, 5, 10, 20}[rng.IntN(4)]
	x.tg = "explore-" + strconv.FormatUint(seed, 36)
	nprocs := 2 + rng.IntN(3)
	nsteps := 40 + rng.IntN(80)
	x.hoard = rng.IntN(3) == 0
	kind := "rw"
	if x.sem {
		kind = fmt.Sprintf("sem k=%d", x.k)
	}
	t.Logf("seed %d: %s, %d processes, lease %v, %d%% of writes faulted, %d steps, hoarding %v", seed, kind, nprocs, x.lease, x.pct, nsteps, x.hoard)
	defer func() {
		if t.Failed() {
			x.mu.Lock()
			steps := x.steps[max(0, len(x.steps)-60):]
			x.mu.Unlock()
			t.Logf("the schedule's last steps:\n%s", strings.Join(steps, "\n"))
			t.Logf("replay: DLOCK_EXPLORE_SEED=%d go test -race -count=1 -run 'TestFamilyExplore$' ./dlock", seed)
		}
	}()

	c := srv.Client()
	op, err := dlock.NewGenerator(c, dlock.WithDefaultLease(x.lease))
	if err != nil {
		t.Fatal(err)
	}
	x.op = op
	if x.sem {
		x.opSem = semOf(t, op, x.tg, x.k)
		x.key = x.opSem.Config().UniqueKey()
	} else {
		x.opRW = rwOf(t, op, x.tg)
		x.key = x.opRW.Config().UniqueKey()
	}
	if x.opMu, err = op.Gen(x.mtype, x.tg); err != nil {
		t.Fatal(err)
	}
	x.mkey = x.opMu.Config().UniqueKey()
	for range nprocs {
		x.procs = append(x.procs, x.newProc())
	}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() { defer close(watched); x.stallWatch(stopWatch) }()
	var unwatch sync.Once
	endWatch := func() { unwatch.Do(func() { close(stopWatch); <-watched }) }
	defer endWatch()

	for i := range nsteps {
		x.stats.steps.Add(1)
		x.step(i)
		if d := rng.IntN(12); d > 0 {
			time.Sleep(time.Duration(d) * time.Millisecond)
		}
		x.check(fmt.Sprintf("after step %d", i))
		if x.fails.Load() > 0 {
			break
		}
	}
	x.windDown()

	_ = op.Close(context.Background())
	c.Close()
	x.freshTakes()

	endWatch()
	err = goleak.Find(before)
	for i := 0; err != nil && i < 20; i++ {
		time.Sleep(250 * time.Millisecond)
		err = goleak.Find(before)
	}
	if err != nil {
		x.fail("goroutines left: %v", err)
	}
	t.Logf("%d steps, %d checks; %d acquired (%d tries, %d refused), %d re-entered, %d downgraded, %d released, %d forced, %d closed, %d waits cancelled, %d short waits ran out, %d ended contexts refused, %d upgrades refused, %d losses seen, %d Redis errors, %d storms, %d SetPermits (%d reads with more out than the count), %d MultiLocks (%d gave up, %d checked alone), %d grants checked with the count standing; faults: %s",
		x.stats.steps.Load(), x.stats.checks.Load(), x.stats.acquired.Load(), x.stats.tries.Load(), x.stats.refused.Load(), x.stats.reentered.Load(),
		x.stats.downgraded.Load(), x.stats.released.Load(), x.stats.forced.Load(), x.stats.closed.Load(), x.stats.cancelled.Load(),
		x.stats.short.Load(), x.stats.ended.Load(), x.stats.upgrades.Load(), x.stats.lostSeen.Load(), x.stats.redisErrs.Load(), x.stats.storms.Load(),
		x.stats.setPermits.Load(), x.stats.overK.Load(), x.stats.multis.Load(), x.stats.multiGaveUp.Load(), x.stats.noneHeldChecked.Load(), x.stats.grantsOver.Load(), x.faults())
	return &x.stats
}

func (x *famExplorer) faults() string {
	var n [5]int64
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range x.all {
		for i := range n {
			n[i] += p.h.count[i].Load()
		}
	}
	return fmt.Sprintf("dup at once %d, dup later %d, reply lost %d, on the wire %d, slowed %d", n[0], n[1], n[2], n[3], n[4])
}

// step runs step i of the schedule.
func (x *famExplorer) step(i int) {
	rng := x.rng
	x.mu.Lock()
	p := x.procs[rng.IntN(len(x.procs))]
	nheld := len(x.held)
	var r *famHeld
	if nheld > 0 {
		r = x.held[rng.IntN(nheld)]
	}
	inflight := len(x.waits)
	x.mu.Unlock()
	c := rng.IntN(100)
	if r == nil && c >= 35 && c < 74 {
		c = 0 // nothing held: acquire instead
	}
	if x.hoard && c >= 35 && c < 60 && rng.IntN(2) == 0 {
		c = 91 // a hoarding schedule: holders keep longer (a sleep), waiters queue in line
	}
	switch {
	case c < 35 && inflight >= 10:
		x.cancelWait(i)
	case c < 35:
		x.acquire(i, p, rng.IntN(3) == 0)
	case c < 60 && x.sem && r.n > 1 && r.count == 1 && r.multi == nil && rng.IntN(3) == 0:
		x.lendOn(i, r)
	case c < 60:
		x.unlock(i, r)
	case c < 68:
		x.reenter(i, r)
	case c < 74 && r.write:
		x.downgrade(i, r)
	case c < 74:
		x.unlock(i, r)
	case c < 77:
		x.force(i)
	case c < 79:
		x.closeProc(i, p)
	case c < 85:
		x.cancelWait(i)
	case c < 88:
		x.doubleUnlock(i)
	case c < 90:
		x.storm(i, p)
	case c < 91 || c < 93 && r != nil && rng.IntN(2) == 0:
		x.progress(i)
	case c < 93:
		d := x.lease/4 + time.Duration(rng.Int64N(int64(x.lease)))
		x.logf("step %d: sleep %v", i, d)
		time.Sleep(d)
	case c < 98 && x.sem:
		x.setPermits(i, p)
	case inflight < 10:
		x.acquire(i, p, false)
	}
}

// acquire starts an acquisition of p, of the lock or (multi) of a MultiLock of a part of it
// and the mutex: its kind, permits and context are the schedule's.
func (x *famExplorer) acquire(i int, p *famProc, multi bool) {
	rng := x.rng
	try := rng.IntN(4) == 0
	write := !x.sem && rng.IntN(3) == 0
	n := 1
	if x.sem {
		x.mu.Lock()
		n = 1 + rng.IntN(x.kCeil)
		x.mu.Unlock()
	}
	x.start(i, p, multi, try, write, n, rng.IntN(100), time.Duration(rng.IntN(6))*time.Millisecond)
}

// start starts an acquisition of p as acquire chose it: a MultiLock with the mutex (multi), a
// try, the write side, n permits, the context's kind (below 15 ended before the call, below 35
// short: it ends after short, else long: ten seconds).
func (x *famExplorer) start(i int, p *famProc, multi, try, write bool, n, ctxKind int, short time.Duration) {
	var ctx context.Context
	var cancel context.CancelCauseFunc
	what := "long"
	switch {
	case ctxKind < 15: // already ended
		ctx, cancel = context.WithCancelCause(context.Background())
		cancel(errors.New("ended before the call"))
		what = "ended"
	case ctxKind < 35:
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(context.Background(), short)
		ctx, cancel = context.WithCancelCause(ctx)
		cancel = func(c context.CancelCauseFunc, c2 context.CancelFunc) context.CancelCauseFunc {
			return func(e error) { c(e); c2() }
		}(cancel, c2)
		what = "short " + short.String()
	default:
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(context.Background(), 10*time.Second) // ends only a hang
		ctx, cancel = context.WithCancelCause(ctx)
		cancel = func(c context.CancelCauseFunc, c2 context.CancelFunc) context.CancelCauseFunc {
			return func(e error) { c(e); c2() }
		}(cancel, c2)
	}
	name := fmt.Sprintf("P%d ", p.id)
	var part dlock.Part
	switch {
	case x.sem && try:
		name += fmt.Sprintf("TryAcquire(%d)", n)
		part = p.sem.Permits(n)
	case x.sem:
		name += fmt.Sprintf("Acquire(%d)", n)
		part = p.sem.Permits(n)
	case write && try:
		name += "TryLock"
		part = p.rw.WriteSide()
	case write:
		name += "Lock"
		part = p.rw.WriteSide()
	case try:
		name += "TryRLock"
		part = p.rw.ReadSide()
	default:
		name += "RLock"
		part = p.rw.ReadSide()
	}
	var m *dlock.MultiLock
	if multi {
		name += " with the mutex"
		var err error
		if m, err = p.g.MultiOf(part, p.mutex); err != nil {
			x.logf("step %d: %s: %v", i, name, err)
			if !x.expected(p, err) {
				x.fail("%s: MultiOf: %v", name, err)
			}
			cancel(nil)
			return
		}
		x.stats.multis.Add(1)
	}
	x.mu.Lock()
	x.waitSeq++
	id := x.waitSeq
	x.waits[id] = cancel
	alone := !x.busyLocked(p)
	x.waitOf[id] = p
	x.mu.Unlock()
	ops := p.ops.Add(1)
	snap := x.kSnapshot()
	x.logf("step %d: %s (%s ctx) as wait %d", i, name, what, id)
	ended := ctx.Err() != nil
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		defer func() {
			x.mu.Lock()
			delete(x.waits, id)
			delete(x.waitOf, id)
			x.mu.Unlock()
			cancel(nil)
		}()
		x.mu.Lock()
		floor, mfloor := x.floor, x.mfloor
		x.mu.Unlock()
		start := time.Now()
		var o *dlock.Owner
		var ok = true
		var err error
		switch {
		case multi && try:
			o, ok, err = m.TryLock(ctx)
		case multi:
			o, err = m.Lock(ctx)
		case try:
			o, ok, err = part.TryLock(ctx)
		default:
			o, err = part.Lock(ctx)
		}
		if try {
			x.stats.tries.Add(1)
		}
		if multi && (err != nil || !ok) {
			x.stats.multiGaveUp.Add(1)
			x.noneHeld(name, p, alone, ops)
		}
		switch {
		case err != nil:
			x.logf("wait %d (%s): %v", id, name, err)
			if !x.expectedN(p, err, n, snap) {
				x.fail("%s: unexpected error %v", name, err)
			}
			if ended {
				x.stats.ended.Add(1)
			} else if what != "long" {
				x.stats.short.Add(1)
			} else if errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, context.DeadlineExceeded) {
				x.fail("%s: a wait of 10 s in vain: %v", name, err)
			} else {
				x.stats.emptyHanded.Add(1)
			}
			return
		case !ok:
			x.stats.refused.Add(1)
			x.logf("wait %d (%s): refused", id, name)
			return
		case o == nil:
			x.fail("%s: no Owner and no error", name)
			return
		}
		x.stats.acquired.Add(1)
		if ended {
			x.fail("%s with a context ended before the call returned an Owner", name)
		}
		hr := &famHeld{p: p, o: o, sh: o, write: write, n: n, count: 1, at: start}
		if multi {
			hr.multi = m
			x.multiOwned(name, hr, start, mfloor)
		}
		x.checkOwned(name, hr.sh, start)
		if x.sem {
			x.checkGrant(name, snap, start)
		}
		// tokens rise: a writer's is above every token of an owner released before it asked
		// (a reader's or permits' may be an older holding's, which it shares; and a holding
		// an operator forced out is lent on with its own tokens until its process learns of
		// it, at its next renewal or release, as ForceRelease says)
		tok, _ := p.token(hr.sh)
		locker, _, _, _, _ := dlock.SharedOwned(hr.sh)
		if write && tok > 0 && tok <= floor && !x.isForced(locker) {
			x.fail("%s: fencing token %d, not above %d of an owner released before it asked", name, tok, floor)
		}
		hr.tok = tok
		x.logf("wait %d (%s): got %s", id, name, x.ownedString(hr))
		if x.winding.Load() {
			x.release(hr, "wind-down")
			return
		}
		x.mu.Lock()
		x.held = append(x.held, hr)
		x.mu.Unlock()
	}()
}

// busyLocked reports whether anything of the schedule's borrows from p: a holding, a wait or
// an Unlock on its way. The caller holds mu.
func (x *famExplorer) busyLocked(p *famProc) bool {
	for _, q := range x.waitOf {
		if q == p {
			return true
		}
	}
	return x.freeing[p] > 0 || slices.ContainsFunc(x.held, func(h *famHeld) bool { return h.p == p })
}

// multiOwned checks a fresh MultiLock acquisition r asked at start: its Owner carries the
// lock's part (r.sh, checked as any acquisition is) and the mutex, which p counts held at least
// half a lease past start, and Redis holds so, with a token above every one of an owner
// released before it asked (mfloor).
func (x *famExplorer) multiOwned(name string, r *famHeld, start time.Time, mfloor uint64) {
	parts := dlock.MultiParts(r.o)
	var mo *dlock.Owner
	for j, pt := range r.multi.Parts() {
		if j >= len(parts) {
			x.fail("%s: the Owner has %d parts, the MultiLock %d", name, len(parts), len(r.multi.Parts()))
			return
		}
		if pt.Kind() == dlock.KindMutex {
			mo = parts[j]
		} else {
			r.sh = parts[j]
		}
	}
	if mo == nil || r.sh == r.o {
		x.fail("%s: the Owner lacks a part (%v)", name, parts)
		return
	}
	tok, ok := r.p.mutex.FencingToken(r.o)
	if !ok {
		if r.o.Err() == nil && !rgWaitUntil(time.Second, func() bool { return r.o.Err() != nil }) {
			x.fail("%s: no mutex token while the Owner is live", name)
		}
		return
	}
	r.mtok = tok
	if tok <= mfloor {
		x.fail("%s: mutex token %d, not above %d of an owner released before it asked", name, tok, mfloor)
	}
	locker, until, ok := r.p.g.Belief(x.mkey)
	if !ok || mo.Err() != nil {
		return // (lost already)
	}
	if until.Before(start.Add(x.lease / 2)) {
		x.fail("%s: returned with the mutex counted held until %v after the call began (less than half the lease %v)", name, until.Sub(start), x.lease)
	}
	ms, err := x.mutexState()
	got := time.Now()
	if err != nil || mo.Err() != nil || !until.After(got) {
		return
	}
	if ms.Holder != locker {
		x.fail("%s: its mutex holding %s is not in Redis (holder %q)", name, locker, ms.Holder)
	} else if exp := got.Add(ms.LeaseLeft + 5*time.Millisecond); exp.Before(until) {
		x.fail("%s: Redis keeps the mutex %v less than P%d counts it held", name, until.Sub(exp), r.p.id)
	}
}

// noneHeld checks p after a MultiLock of it gave up. If nothing else of the schedule's borrowed
// from p as the MultiLock began (alone), and no acquisition of p's began since (ops), p lends
// neither part to anyone now that Lock returned: the parts it took are let go, and the part it
// waited for was given back as the wait ended. With no fault on the wire, nothing of p's is
// left in Redis either once its driver gave back what a take whose answer was on its way got
// (the parts Lock let go were released in Redis before it returned).
func (x *famExplorer) noneHeld(name string, p *famProc, alone bool, ops int64) {
	quiet := func() bool { return p.ops.Load() == ops && !p.closing.Load() && !x.winding.Load() }
	if !alone || !quiet() {
		return
	}
	lent := p.g.SharedBelief(x.key)
	_, _, mine := p.g.Belief(x.mkey)
	if !quiet() {
		return // (read after: an acquisition that began meanwhile may lend)
	}
	x.stats.noneHeldChecked.Add(1)
	if len(lent) > 0 || mine {
		x.fail("%s gave up, yet its process, which nothing else borrowed from, lends %v of the lock, the mutex %v", name, lent, mine)
		return
	}
	if x.pct > 0 || x.stats.storms.Load() > 0 {
		return
	}
	prefix := p.g.LockerPrefix()
	var left []string
	kept := func() bool {
		left = nil
		st, err := x.state()
		ms, merr := x.mutexState()
		if err != nil || merr != nil {
			return true
		}
		for _, h := range st.Holds {
			if strings.HasPrefix(h.Locker, prefix) {
				left = append(left, h.Locker)
			}
		}
		if strings.HasPrefix(ms.Holder, prefix) {
			left = append(left, ms.Holder)
		}
		return len(left) > 0
	}
	if !rgWaitUntil(2*time.Second, func() bool { return !quiet() || !kept() }) {
		x.fail("%s gave up, and 2 s on, with no fault on the wire, its process keeps %v in Redis", name, left)
	}
}

func (x *famExplorer) ownedString(r *famHeld) string {
	locker, downTo, until, live, _ := dlock.SharedOwned(r.sh)
	s := fmt.Sprintf("%s (down to %q) until +%v live %v", locker, downTo, time.Until(until).Round(time.Millisecond), live)
	if r.multi != nil {
		s += fmt.Sprintf(", with the mutex (token %d, live %v)", r.mtok, r.o.Err() == nil)
	}
	return s
}

// checkOwned checks a fresh acquisition asked at start: its holding's lease, as its process
// counts it, runs at least half a lease past start, and Redis holds it at least that long
// (unless an operator forced it out meanwhile, or it was lost already).
func (x *famExplorer) checkOwned(name string, o *dlock.Owner, start time.Time) {
	locker, downTo, until, live, ok := dlock.SharedOwned(o)
	if !ok {
		x.fail("%s: the Owner is not a shared lock's", name)
		return
	}
	if !live {
		x.stats.lostSeen.Add(1)
		return
	}
	if until.Before(start.Add(x.lease / 2)) {
		x.fail("%s: returned with its holding counted held until %v after the call began (less than half the lease %v)", name, until.Sub(start), x.lease)
	}
	st, err := x.state()
	got := time.Now()
	if err != nil {
		x.t.Logf("State: %v", err)
		return
	}
	// (a downgrade may have replaced the holding's locker meanwhile: any of them)
	locker2, downTo2, _, live, _ := dlock.SharedOwned(o)
	names := []string{locker, downTo, locker2, downTo2}
	if !live || x.isForced(names...) || !until.After(got) {
		return // (past its lease but not told yet: a late timer of a stalled machine)
	}
	i := slices.IndexFunc(st.Holds, func(h dlock.SharedHold) bool { return h.Locker != "" && slices.Contains(names, h.Locker) })
	if i < 0 {
		x.fail("%s: its holding %s is not in Redis (holds %v)", name, locker, st.Holds)
		return
	}
	if exp := got.Add(st.Holds[i].TTL + 5*time.Millisecond); exp.Before(until) {
		x.fail("%s: Redis keeps %s until %v before its process counts it held", name, locker, until.Sub(exp))
	}
}

func (x *famExplorer) state() (dlock.SharedState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if x.sem {
		return x.opSem.State(ctx)
	}
	return x.opRW.State(ctx)
}

func (x *famExplorer) isForced(lockers ...string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, l := range lockers {
		if l != "" && x.forced[l] {
			return true
		}
	}
	return false
}

// holdLive reports whether o's holding is live.
func (x *famExplorer) holdLive(o *dlock.Owner) bool {
	_, _, _, live, _ := dlock.SharedOwned(o)
	return live
}

// stallWatch records when this process was held up — its sleeps overran by a tenth of the
// lease — until stop is closed: a holding lost then, with no fault on the wire, is the
// machine's doing (its renewal was late), not the driver's.
func (x *famExplorer) stallWatch(stop <-chan struct{}) {
	for {
		t0 := time.Now()
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		if over := time.Since(t0) - 5*time.Millisecond; over > x.lease/10 {
			x.stallMu.Lock()
			x.stalls = append(x.stalls, time.Now())
			x.stallMu.Unlock()
		}
	}
}

// stalledSince reports whether this process was held up since t.
func (x *famExplorer) stalledSince(t time.Time) bool {
	x.stallMu.Lock()
	defer x.stallMu.Unlock()
	return len(x.stalls) > 0 && x.stalls[len(x.stalls)-1].After(t)
}

// lossExplained checks a loss of an owner's holding (locker, down): with no fault on the wire
// (none drawn, no storm) and no force of it, only a stall of the machine explains it.
func (x *famExplorer) lossExplained(what string, locker, down string, since time.Time) {
	if x.pct > 0 || x.stats.storms.Load() > 0 || x.isForced(locker, down) || x.stalledSince(since) {
		return
	}
	x.fail("%s: holding %s lost with no fault on the wire, no force and no stall of the machine", what, locker)
}

// take removes r from the held ones.
func (x *famExplorer) take(r *famHeld) {
	x.mu.Lock()
	x.held = slices.DeleteFunc(x.held, func(h *famHeld) bool { return h == r })
	x.mu.Unlock()
}

// release releases every hold of r.
func (x *famExplorer) release(r *famHeld, why string) {
	for r.count > 0 {
		x.unlockOnce(r, why)
	}
}

// unlockOnce releases one hold of r (held by the caller alone).
func (x *famExplorer) unlockOnce(r *famHeld, why string) {
	locker, down, _, _, _ := dlock.SharedOwned(r.sh)
	err := r.o.Unlock()
	if errors.Is(err, dlock.ErrLockLost) {
		x.lossExplained(fmt.Sprintf("P%d Unlock", r.p.id), locker, down, r.at.Add(-x.lease))
	}
	r.count--
	x.logf("%s: P%d Unlock (%d left): %v", why, r.p.id, r.count, err)
	if !x.expected(r.p, err) || errors.Is(err, dlock.ErrNotHeld) {
		x.fail("P%d Unlock: unexpected error %v", r.p.id, err)
	}
	if r.count == 0 && err == nil {
		x.mu.Lock()
		x.floor = max(x.floor, r.tok)
		x.mfloor = max(x.mfloor, r.mtok)
		x.mu.Unlock()
	}
	if r.count == 0 {
		x.stats.released.Add(1)
		if r.o.Err() == nil {
			x.fail("P%d: the Owner is not done after its last Unlock (%v)", r.p.id, err)
		}
		x.mu.Lock()
		x.ended = append(x.ended, r.o)
		if len(x.ended) > 16 {
			x.ended = x.ended[1:]
		}
		x.mu.Unlock()
	}
}

func (x *famExplorer) unlock(i int, r *famHeld) {
	x.logf("step %d: unlock a hold of P%d (%s)", i, r.p.id, x.ownedString(r))
	if r.count > 1 {
		x.unlockOnce(r, fmt.Sprintf("step %d", i))
		return
	}
	x.take(r)
	if x.rng.IntN(3) > 0 {
		x.unlockOnce(r, fmt.Sprintf("step %d", i))
		return
	}
	x.mu.Lock()
	x.freeing[r.p]++
	x.mu.Unlock()
	x.wg.Add(1) // (the last hold, released beside the next steps: a Close may come in the middle)
	go func() {
		defer x.wg.Done()
		x.unlockOnce(r, fmt.Sprintf("step %d (async)", i))
		x.mu.Lock()
		x.freeing[r.p]--
		x.mu.Unlock()
	}()
}

// reenter takes r's side again through its owner context (for a reader, now and then the
// write side: an upgrade, refused).
func (x *famExplorer) reenter(i int, r *famHeld) {
	ctx, cancel := context.WithTimeout(r.o, 3*time.Second)
	defer cancel()
	var o *dlock.Owner
	var err error
	upgrade := false
	switch {
	case r.multi != nil: // (with the Owner itself: one more hold of every part)
		o, err = r.multi.Lock(r.o)
	case x.sem:
		o, err = r.p.sem.Acquire(ctx, r.n)
	case r.write:
		o, err = r.p.rw.Lock(ctx)
	case !r.down && x.rng.IntN(3) == 0:
		upgrade = true
		o, err = r.p.rw.Lock(ctx)
	default:
		o, err = r.p.rw.RLock(ctx)
	}
	x.logf("step %d: P%d re-enter (upgrade %v): %v", i, r.p.id, upgrade, err)
	switch {
	case upgrade:
		x.stats.upgrades.Add(1)
		if err == nil {
			x.fail("P%d: a reader's Lock returned an Owner (an upgrade)", r.p.id)
			_ = o.Unlock()
		} else if !errors.Is(err, dlock.ErrUpgrade) && !x.expected(r.p, err) {
			x.fail("P%d: upgrade: %v", r.p.id, err)
		}
	case err == nil:
		x.stats.reentered.Add(1)
		r.count++
		if o != r.o && r.multi != nil {
			x.fail("P%d: a MultiLock's re-entry returned another Owner", r.p.id)
		}
	case !x.expected(r.p, err) || errors.Is(err, dlock.ErrNotObtained):
		x.fail("P%d: re-entry: %v", r.p.id, err)
	case r.multi != nil:
		// a part's holding ended (lost, or closed): the Owner ends with it
		if !rgWaitUntil(time.Second, func() bool { return r.o.Err() != nil }) {
			x.fail("P%d: a MultiLock's re-entry failed (%v) while its Owner is live", r.p.id, err)
		}
	case x.holdLive(r.sh):
		x.fail("P%d: re-entry failed (%v) while the owner's holding is live", r.p.id, err)
	}
}

// downgrade takes the read side through r, a writer.
func (x *famExplorer) downgrade(i int, r *famHeld) {
	d := 3 * time.Second
	if x.rng.IntN(3) == 0 { // a short one: it may end at any point of the downgrade (a renewal first, on its way)
		d = time.Duration(x.rng.IntN(6)) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(r.o, d)
	defer cancel()
	o, err := r.p.rw.RLock(ctx)
	x.logf("step %d: P%d downgrade (%v): %v", i, r.p.id, d, err)
	if err != nil && r.multi == nil && context.Cause(r.o) == nil { // (a MultiLock's Owner hears of its part's end a goroutine's hop later)
		// a downgrade that failed leaves the write side as it was: held, its holds counted
		x.mu.Lock()
		want := r.count
		x.mu.Unlock()
		if n := r.p.rw.HoldCount(r.o); n != want && context.Cause(r.o) == nil {
			x.fail("P%d: a failed downgrade (%v) left the write side with %d holds, not %d", r.p.id, err, n, want)
		}
	}
	switch {
	case err == nil:
		x.stats.downgraded.Add(1)
		x.mu.Lock()
		tok, _ := r.p.token(o)
		x.held = append(x.held, &famHeld{p: r.p, o: o, sh: o, down: true, n: 1, count: 1, tok: tok, at: time.Now()})
		x.mu.Unlock()
	case !x.expected(r.p, err):
		x.fail("P%d: downgrade: %v", r.p.id, err)
	}
}

// progress checks that a waiter gets in when it fits beside what the live owners use, however
// long they hold: with every wait of the schedule ended and nothing on its way, a process that
// owns nothing asks for what fits (a reader beside readers, anything beside nobody, permits
// within the lowest count the semaphore may have), while every owner keeps its hold. It must
// get in within 10 s (Redis may keep what owners let go, or what a closed process held, for a
// lease; a wait behind the faults polls every sixth of one), unless the machine stalled.
func (x *famExplorer) progress(i int) {
	for _, c := range x.waitsNow() {
		c(errors.New("ended for a progress check"))
	}
	calm := rgWaitUntil(5*time.Second, func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		busy := len(x.waits) > 0
		for _, n := range x.freeing {
			busy = busy || n > 0
		}
		return !busy
	})
	if !calm {
		x.logf("step %d: progress: waits or Unlocks still on their way", i)
		return
	}
	s := x.kSnapshot()
	x.mu.Lock()
	var write, read bool
	var used int
	owners := map[*famProc]bool{}
	for _, r := range x.held {
		if r.sh.Err() != nil {
			continue
		}
		owners[r.p] = true
		write = write || r.write
		read = read || !r.write
		used += r.n
	}
	var q *famProc
	for _, p := range x.procs {
		if !owners[p] && !p.closing.Load() {
			q = p
			break
		}
	}
	x.mu.Unlock()
	if q == nil || (!x.sem && write) || (x.sem && !s.calm) {
		x.logf("step %d: progress: nothing fits, or nobody to ask", i)
		return
	}
	var part, more dlock.Part // what fits, and what does not
	name := fmt.Sprintf("P%d ", q.id)
	switch {
	case x.sem:
		room := slices.Min(s.vals) - used
		if room < 1 {
			x.logf("step %d: progress: no permit free beside %d used", i, used)
			return
		}
		n := 1 + x.rng.IntN(room)
		part, name = q.sem.Permits(n), name+fmt.Sprintf("Acquire(%d)", n)
		if used > 0 {
			more = q.sem.Permits(slices.Min(s.vals))
		}
	case read || x.rng.IntN(2) == 0:
		part, name = q.rw.ReadSide(), name+"RLock"
		if read {
			more = q.rw.WriteSide()
		}
	default:
		part, name = q.rw.WriteSide(), name+"Lock"
	}
	if more != nil && x.rng.IntN(2) == 0 {
		// first it waits a while for what does not fit: the owners' processes learn that
		// someone waits (and, the wait given up, only at their next renewal that nobody does)
		ctx, cancel := context.WithTimeout(context.Background(), x.lease/2)
		o, err := more.Lock(ctx)
		cancel()
		x.logf("step %d: progress: P%d first waits for what does not fit: %v", i, q.id, err)
		if err == nil { // (an owner's holding was forced out, or lost unseen)
			_ = o.Unlock()
			return
		}
		if !errors.Is(err, dlock.ErrNotObtained) && !x.expected(q, err) {
			x.fail("P%d, waiting for what does not fit: %v", q.id, err)
		}
	}
	x.logf("step %d: progress: %s beside %d owners (write %v, read %v, %d permits)", i, name, len(owners), write, read, used)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	o, err := part.Lock(ctx)
	x.logf("step %d: progress: %s: %v after %v", i, name, err, time.Since(start).Round(time.Millisecond))
	switch {
	case err == nil:
		x.stats.progress.Add(1)
		if err := o.Unlock(); !x.expected(q, err) {
			x.fail("%s: Unlock: %v", name, err)
		}
	case errors.Is(err, context.DeadlineExceeded) && !x.stalledSince(start):
		st, serr := x.state()
		x.fail("%s, which fits beside the live owners' holds, did not get in within 10 s: %v; Redis: %+v %v", name, err, st, serr)
	case !x.expected(q, err):
		x.fail("%s: %v", name, err)
	}
}

// lendOn has a goroutine of r's process wait for fewer permits than r holds, then lets r go:
// the waiter borrows from r's holding (unless someone waits elsewhere, or the holding went
// back first), which is then lent in part — the case a holding's give-back (shrinkTo) is for,
// which later progress checks meet.
func (x *famExplorer) lendOn(i int, r *famHeld) {
	n := 1 + x.rng.IntN(r.n-1)
	key := r.p.sem.Config().UniqueKey()
	before := r.p.g.SharedWaiters(key)
	x.logf("step %d: P%d lends its %d permits on to a waiter for %d", i, r.p.id, r.n, n)
	x.start(i, r.p, false, false, false, n, 99, 0)
	if rgWaitUntil(time.Second, func() bool { return r.p.g.SharedWaiters(key) > before || x.lent(r.p, n) }) {
		x.stats.lentOn.Add(1)
	}
	x.unlock(i, r)
}

// lent reports whether the schedule holds an acquisition of n permits of p.
func (x *famExplorer) lent(p *famProc, n int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.ContainsFunc(x.held, func(h *famHeld) bool { return h.p == p && h.n == n && h.count == 1 })
}

// waitsNow returns the cancel functions of the waits on their way.
func (x *famExplorer) waitsNow() []context.CancelCauseFunc {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]context.CancelCauseFunc, 0, len(x.waits))
	for _, c := range x.waits {
		out = append(out, c)
	}
	return out
}

// force has the operator force out a holding Redis reports.
func (x *famExplorer) force(i int) {
	st, err := x.state()
	if err != nil || len(st.Holds) == 0 {
		x.logf("step %d: force: nothing held (%v)", i, err)
		return
	}
	h := st.Holds[x.rng.IntN(len(st.Holds))]
	x.mu.Lock()
	x.forced[h.Locker] = true
	x.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var ok bool
	if x.sem {
		ok, err = x.opSem.ForceRelease(ctx, h.Locker)
	} else {
		ok, err = x.opRW.ForceRelease(ctx, h.Locker)
	}
	x.stats.forced.Add(1)
	x.logf("step %d: force %s: %v %v", i, h.Locker, ok, err)
	if err != nil && !documentedErr(err) {
		x.fail("ForceRelease: %v", err)
	}
}

// releaseFailed reports whether err, Close's, says that Redis failed a release of the mutex or
// of a holding of the lock (one that its driver sent until the holding's lease ran out).
func (x *famExplorer) releaseFailed(err error) bool {
	var rpe *dlock.RedisProcessError
	return errors.As(err, &rpe) && (strings.Contains(err.Error(), x.mkey) || strings.Contains(err.Error(), x.key))
}

// closeProc closes p in the middle and puts a new process in its place.
func (x *famExplorer) closeProc(i int, p *famProc) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	short := x.rng.IntN(3) == 0
	if short { // a Close that gives up at once: what is left expires, or is given back meanwhile
		ctx, cancel = context.WithTimeout(ctx, time.Duration(x.rng.IntN(20))*time.Millisecond)
		defer cancel()
	}
	x.logf("step %d: Close P%d (short %v)", i, p.id, short)
	p.closing.Store(true)
	done := make(chan error, 1)
	go func() { done <- p.g.Close(ctx) }()
	select {
	case err := <-done:
		if err != nil && !(short && errors.Is(err, context.DeadlineExceeded)) && !x.releaseFailed(err) {
			x.fail("Close of P%d: %v", p.id, err)
		}
	case <-time.After(20 * time.Second):
		x.fail("Close of P%d did not return within 20 s", p.id)
		return
	}
	x.stats.closed.Add(1)
	np := x.newProc()
	x.mu.Lock()
	var mine []*famHeld
	x.held = slices.DeleteFunc(x.held, func(h *famHeld) bool {
		if h.p == p {
			mine = append(mine, h)
			return true
		}
		return false
	})
	for j, q := range x.procs {
		if q == p {
			x.procs[j] = np
		}
	}
	x.mu.Unlock()
	for _, h := range mine {
		if !short && x.holdLive(h.sh) || !rgWaitUntil(5*time.Second, func() bool { return !x.holdLive(h.sh) && h.o.Err() != nil }) {
			x.fail("P%d: an Owner is live after Close returned", p.id)
		}
		if err := h.o.Unlock(); err != nil && !errors.Is(err, dlock.ErrClosed) && !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrNotHeld) {
			x.fail("P%d: Unlock after Close: %v", p.id, err)
		}
	}
	x.logf("step %d: P%d closed, P%d in its place", i, p.id, np.id)
}

// storm faults every write of p for up to a lease and a half: its renewals fail, and its
// holdings may lapse.
func (x *famExplorer) storm(i int, p *famProc) {
	d := x.lease/2 + time.Duration(x.rng.Int64N(int64(x.lease)))
	x.logf("step %d: storm on P%d for %v", i, p.id, d)
	x.stats.storms.Add(1)
	p.h.setPct(100)
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		time.Sleep(d)
		p.h.setPct(x.pct)
		x.logf("storm on P%d over", p.id)
	}()
}

func (x *famExplorer) cancelWait(i int) {
	x.mu.Lock()
	ids := make([]int, 0, len(x.waits))
	for id := range x.waits {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var cancel context.CancelCauseFunc
	id := 0
	if len(ids) > 0 {
		id = ids[x.rng.IntN(len(ids))]
		cancel = x.waits[id]
	}
	x.mu.Unlock()
	if cancel != nil {
		x.logf("step %d: cancel wait %d", i, id)
		x.stats.cancelled.Add(1)
		cancel(errors.New("cancelled by the schedule"))
	}
}

// doubleUnlock releases an owner released to the end already: ErrNotHeld, or the loss (or
// Close) its holding ended with.
func (x *famExplorer) doubleUnlock(i int) {
	x.mu.Lock()
	var o *dlock.Owner
	if len(x.ended) > 0 {
		o = x.ended[x.rng.IntN(len(x.ended))]
	}
	x.mu.Unlock()
	if o == nil {
		return
	}
	ended := func(cause error) bool {
		return errors.Is(cause, dlock.ErrLockLost) || errors.Is(cause, dlock.ErrClosed)
	}
	before := context.Cause(o)
	err := o.Unlock()
	x.stats.doubleUnlock.Add(1)
	x.logf("step %d: Unlock of a released owner: %v", i, err)
	switch {
	case ended(before):
		if !errors.Is(err, before) {
			x.fail("Unlock of an owner released to the end: %v, want %v", err, before) // a lost (or closed) holding stays so for its owner
		}
	case errors.Is(err, dlock.ErrNotHeld):
		// (an Owner of one re-entry hold whose holding goes on for the others: it may be lost
		// just after this answer, and its context end with the loss)
	case ended(err):
		// lost or closed as it was unlocked: its owner context ends with that cause too
		select {
		case <-o.Done():
		case <-time.After(5 * time.Second):
		}
		if cause := context.Cause(o); !errors.Is(err, cause) {
			x.fail("Unlock of an owner released to the end: %v, its owner context's cause %v", err, cause)
		}
	default:
		x.fail("Unlock of an owner released to the end: %v, want %v or the loss its holding ended with", err, dlock.ErrNotHeld)
	}
}

// check compares what the processes believe with each other and with Redis. Each process's
// beliefs are read twice, in order and then in reverse, around one read of Redis's state: a
// holding seen live in both reads of its process was live throughout (a holding never comes
// back), so all those were live together when Redis was read. They must not conflict (a
// writer beside another holding, more permits than the semaphore ever had, two processes in
// the mutex), and Redis must hold each (unless forced out) at least until its process counts
// it held.
func (x *famExplorer) check(when string) {
	x.stats.checks.Add(1)
	x.mu.Lock()
	procs := slices.Clone(x.procs)
	k := int64(x.kCeil) // (permits held together were all out at the last one's grant, under a count the semaphore had)
	x.mu.Unlock()
	type mutexBelief struct {
		locker string
		until  time.Time
		ok     bool
	}
	fwd := make([]map[string]dlock.SharedHeld, len(procs))
	fwdAt := make([]time.Time, len(procs))
	mfwd := make([]mutexBelief, len(procs))
	for i, p := range procs {
		fwd[i] = p.g.SharedBelief(x.key)
		fwdAt[i] = time.Now()
		mfwd[i].locker, mfwd[i].until, mfwd[i].ok = p.g.Belief(x.mkey)
	}
	s1 := x.kSnapshot()
	st, err := x.state()
	got := time.Now()
	s2 := x.kSnapshot()
	ms, merr := x.mutexState()
	mgot := time.Now()
	rev := make([]map[string]dlock.SharedHeld, len(procs))
	mrev := make([]mutexBelief, len(procs))
	for i := len(procs) - 1; i >= 0; i-- {
		mrev[i].locker, mrev[i].until, mrev[i].ok = procs[i].g.Belief(x.mkey)
		rev[i] = procs[i].g.SharedBelief(x.key)
	}
	if merr != nil {
		x.t.Logf("%s: the mutex's State: %v", when, merr)
	} else {
		var in []int
		for i := range procs {
			if f, r := mfwd[i], mrev[i]; f.ok && r.ok && f.locker == r.locker && f.until.After(mgot) {
				in = append(in, procs[i].id)
				if ms.Holder != f.locker {
					x.fail("%s: P%d counts the mutex held by %s (until +%v), Redis by %q", when, procs[i].id, f.locker, time.Until(f.until), ms.Holder)
				} else if exp := mgot.Add(ms.LeaseLeft + 5*time.Millisecond); exp.Before(f.until) {
					x.fail("%s: Redis keeps the mutex %v less than P%d counts it held", when, f.until.Sub(exp), procs[i].id)
				}
			}
		}
		if len(in) > 1 {
			x.fail("%s: processes %v all count the mutex held", when, in)
		}
	}
	if err != nil {
		x.t.Logf("%s: State: %v", when, err)
		return
	}
	if x.sem {
		x.checkCount(when, st, s1, s2)
	}
	type belief struct {
		p      int
		locker string
		h      dlock.SharedHeld
	}
	var live []belief
	for i := range procs {
		// within a process a read is one instant: its holdings do not conflict
		if b := conflict(fwd[i], x.sem, k, func(l string, h dlock.SharedHeld) bool {
			return x.isForced(l, h.DownTo) || !h.Until.After(fwdAt[i])
		}); b != "" {
			x.fail("%s: P%d believes %s", when, procs[i].id, b)
		}
		for l, h := range fwd[i] {
			// (one past its lease but not told yet — a late timer of a stalled machine — is
			// no longer counted held by its process)
			if r, ok := rev[i][l]; ok && h.Until.After(got) && !x.isForced(l, h.DownTo, r.DownTo) {
				live = append(live, belief{i, l, r})
				if j := slices.IndexFunc(st.Holds, func(s dlock.SharedHold) bool {
					return s.Locker == l || (h.DownTo != "" && s.Locker == h.DownTo) || (r.DownTo != "" && s.Locker == r.DownTo)
				}); j < 0 {
					x.fail("%s: P%d lends %s (until +%v) that Redis does not hold (holds %+v)", when, procs[i].id, l, time.Until(h.Until), st.Holds)
				} else if exp := got.Add(st.Holds[j].TTL + 5*time.Millisecond); exp.Before(h.Until) {
					x.fail("%s: Redis keeps %s %v less than P%d counts it held", when, l, h.Until.Sub(exp), procs[i].id)
				}
			}
		}
	}
	all := map[string]dlock.SharedHeld{}
	owner := map[string]int{}
	for _, b := range live {
		all[b.locker] = b.h
		owner[b.locker] = procs[b.p].id
	}
	if b := conflict(all, x.sem, k, nil); b != "" {
		x.fail("%s: the processes together believe %s (by process: %v)", when, b, owner)
	}
	// Redis itself
	if !x.sem && len(st.Writers()) > 0 && len(st.Holds) > 1 {
		x.fail("%s: Redis has a writer beside another holding: %+v", when, st.Holds)
	}
}

// checkCount checks the semaphore's permits out in Redis, read as st between s1 and s2, against
// its count. While the count stands (no change on its way from the last read to this one),
// no more than it are out, but for permits out beyond a lowered count, which stay out until
// released while none is granted: so more are out than the count only if they were at the
// last read too, and every holding now was there then or replaced one of its process's that
// was, for no more permits (a downgrade: shared.lua takes none for it).
func (x *famExplorer) checkCount(when string, st dlock.SharedState, s1, s2 kSnap) {
	var out int64
	held := map[string]int64{}
	for _, h := range st.Holds {
		out += h.Permits
		held[h.Locker] = h.Permits
	}
	if out > st.Permits {
		x.stats.overK.Add(1)
	}
	still := !s1.open && !s2.open && s1.seq == s2.seq
	x.mu.Lock()
	prev, known := x.prev, x.kKnown
	x.prev = nil
	if still {
		x.kKnown = int(st.Permits)
		x.prev = &semRead{seq: s2.seq, permits: st.Permits, out: out, held: held}
	}
	x.mu.Unlock()
	// with no change on its way, the count is the last one set (a copy of a change that
	// landed, or of an older one, sets nothing), or, on a semaphore nobody used for two
	// leases, the one it is made with
	if still && s1.calm && known > 0 && st.Permits != int64(known) && st.Permits != int64(x.k) {
		x.fail("%s: Redis has a count of %d, with none on its way since it was %d", when, st.Permits, known)
	}
	switch {
	case out <= st.Permits:
	case s2.seq == 0 && !s2.open && st.Permits == int64(x.k): // (never changed)
		x.fail("%s: Redis has %d permits out of %d: %+v", when, out, st.Permits, st.Holds)
	case !still || prev == nil || prev.seq != s2.seq || prev.permits != st.Permits:
	case prev.out <= st.Permits:
		x.fail("%s: Redis has %d permits out of %d, with the count standing since the last read, which had %d out: %+v", when, out, st.Permits, prev.out, st.Holds)
	default:
		// (a downgrade replaces a holding by one of its process for no more permits: it takes
		// none, and may leave more out than a lowered count, fewer than before)
		gone := map[string]bool{}
		for l := range prev.held {
			if _, ok := held[l]; !ok {
				gone[l] = true
			}
		}
	next:
		for l, n := range held {
			if _, ok := prev.held[l]; ok {
				continue
			}
			for m := range gone {
				if prev.held[m] >= n && processOf(m) == processOf(l) {
					delete(gone, m)
					continue next
				}
			}
			x.fail("%s: Redis granted %s with %d permits out of %d (standing since the last read, with no holding of its process it replaces): %+v", when, l, out, st.Permits, st.Holds)
		}
	}
}

// processOf returns the process part of a locker (all but its last "-N").
func processOf(locker string) string {
	if i := strings.LastIndexByte(locker, '-'); i >= 0 {
		return locker[:i]
	}
	return locker
}

// conflict describes holdings held together that conflict, or returns "".
func conflict(hs map[string]dlock.SharedHeld, sem bool, k int64, skip func(l string, h dlock.SharedHeld) bool) string {
	var sum int64
	var writers []string
	n := 0
	for l, h := range hs {
		if skip != nil && skip(l, h) {
			continue
		}
		n++
		if h.DownTo != "" && h.DownN > 0 && h.DownN < h.N {
			// a holding shrinking to DownN permits (its downgrade's take may have run in Redis
			// already) lends no more than those meanwhile: its process uses at most DownN
			sum += h.DownN
		} else {
			sum += h.N
		}
		if h.N == processor.RWPermits && h.DownTo == "" { // (a write-hold being downgraded lends to readers only)
			writers = append(writers, l)
		}
	}
	switch {
	case sem && sum > k:
		return fmt.Sprintf("%d permits of %d held: %+v", sum, k, hs)
	case !sem && len(writers) > 0 && n > 1:
		return fmt.Sprintf("a writer (%v) beside another holding: %+v", writers, hs)
	}
	return ""
}

// windDown stops the schedule: every hold is released, every wait must come home (a wait
// of the ten seconds in vain is a lost wake-up), the processes close.
func (x *famExplorer) windDown() {
	x.winding.Store(true)
	x.logf("wind-down")
	x.mu.Lock()
	held := x.held
	x.held = nil
	x.mu.Unlock()
	for _, r := range held {
		x.release(r, "wind-down")
	}
	done := make(chan struct{})
	go func() { x.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		x.fail("waits still out 30 s after the wind-down began")
		x.mu.Lock()
		for _, c := range x.waits {
			c(errors.New("wind-down gave up"))
		}
		x.mu.Unlock()
		<-done
	}
	x.mu.Lock()
	held = x.held // (none: acquisitions of the wind-down release at once)
	x.mu.Unlock()
	for _, r := range held {
		x.release(r, "wind-down")
	}
	x.check("after the wind-down")
	for _, p := range x.procs {
		p.closing.Store(true)
		if err := p.g.Close(context.Background()); err != nil && !x.releaseFailed(err) {
			x.fail("Close of P%d: %v", p.id, err)
		}
	}
	for _, p := range x.all {
		p.close()
	}
	if x.sem && x.kSeq > 0 { // (every copy on its way delivered: the count goes back to the one the semaphore is made with)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := x.opSem.SetPermits(ctx, x.k); err != nil {
			x.fail("SetPermits(%d) after the wind-down: %v", x.k, err)
		}
	}
}

// freshTakes checks that a new process takes the key within a few seconds of everyone's
// Close, whole (the write side; every permit), and the mutex, and that no key is left without
// a time to live.
func (x *famExplorer) freshTakes() {
	c := srv.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(x.lease))
	if err != nil {
		x.t.Fatal(err)
	}
	defer g.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	var o *dlock.Owner
	if x.sem {
		o, err = semOf(x.t, g, x.tg, x.k).Acquire(ctx, x.k)
	} else {
		o, err = rwOf(x.t, g, x.tg).Lock(ctx)
	}
	if err != nil {
		x.fail("a new process could not take the key whole within 5 s of everyone's Close: %v", err)
		st, _ := x.stateOf(g)
		x.t.Logf("state: %+v", st)
		return
	}
	x.logf("a new process took it in %v", time.Since(start))
	_ = o.Unlock()
	mu, err := g.Gen(x.mtype, x.tg)
	if err == nil {
		o, err = mu.Lock(ctx)
	}
	if err != nil {
		x.fail("a new process could not take the mutex within 5 s of everyone's Close: %v", err)
		return
	}
	_ = o.Unlock()
	var left []string
	for _, k := range keysWithoutTTL(x.t, c) {
		if strings.Contains(k, x.tg) {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		x.fail("keys without a time to live: %v", left)
	}
}

func (x *famExplorer) stateOf(g *dlock.Generator) (dlock.SharedState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if x.sem {
		return semOf(x.t, g, x.tg, x.k).State(ctx)
	}
	return rwOf(x.t, g, x.tg).State(ctx)
}
