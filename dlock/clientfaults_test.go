package dlock_test

// Every kind of lock together under a faulty client: several Generators ("processes") on one
// Redis, each on a client whose hook (ffHook) loses a script's reply after Redis ran it, runs
// it twice (at once, or a copy up to a lease later), delays it, or fails it before it is
// sent; goroutines of every process take and let go, with random short deadlines, two
// mutexes, a read-write lock and a semaphore, alone and in MultiLocks of mixed parts, with
// re-entries, Extend (to longer and shorter leases), downgrades and refused upgrades, while
// others ForceRelease holdings and SetPermits, and processes are closed in the middle of it
// (a new one takes each one's place). Processes differ in options (FIFO, no notifications, no
// local hand-off, two tokens a write block). It checks, all along:
//   - never a writer (or a mutex owner) beside another holding of its key, never more permits
//     out than the semaphore's count ever was (the holdings of a process whose holding a
//     force may have removed aside, while it may not know — of a force of its own, only
//     those whose call began before the library counted the force: ffOwnForces);
//   - every holding counted held by its process (its Owner live before and after the read)
//     is held in Redis by that process, and its FencingToken(s) says it is held;
//   - each fresh writer's and mutex owner's fencing token above every token of the key handed
//     out to an acquisition that returned before it began;
//   - a ForceRelease of a holding of its own process ends its borrowers there at once;
//   - only documented errors (ErrClosed only once Close began), a re-entry adding one to the
//     hold count and a refused one leaving it as it was, every call back by its deadline plus
//     seconds;
//   - Close: every Owner of the process ended, and Redis holds nothing of it, nor has it in
//     line;
//   - between rounds, with every call returned and every holding let go: Redis holds nothing
//     and has nobody in line within a few leases;
//   - at the end: every key gone within a few leases (settled marks of a force live eight
//     times the forced key's life), no goroutine left.
//
// It runs 3 s, or DLOCK_SOAK; DLOCK_FUZZ_SEED replays a seed's choices (the goroutines'
// interleaving is the machine's), DLOCK_FUZZ_LEASE sets the lease (1 s by default),
// DLOCK_FUZZ_SHAPE varies its shape (ffShape: more processes, a fault rate, a semaphore-,
// MultiLock- or force-heavy mix, no notifications anywhere, Redis restarted empty).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
	"github.com/dlockgo/dlock/processor"
)

// ffHook faults pct percent of the library's scripts (the read-only inspection included): the
// reply lost after Redis ran it, a copy run twice (at once or up to a lease after the original was sent), the
// request delayed before it is sent, or failed before it is sent (as a timeout, or as a dial
// that failed, which the processor counts as never sent).
type ffHook struct {
	lease time.Duration
	pct   int

	mu    sync.Mutex
	rng   *rand.Rand
	stop  bool
	wg    sync.WaitGroup
	count [5]atomic.Int64
}

// ffSeq numbers the faulted client's script requests, for ffTrace.
var ffSeq atomic.Int64

// ffTrace writes a line to the file DLOCK_FUZZ_TRACE names (nothing without it): each shared
// lock request's op and locker, when it was sent and what came back, and each copy's delay
// from its original — to follow a locker's history when a run fails.
var ffTrace = func() func(format string, args ...any) {
	path := os.Getenv("DLOCK_FUZZ_TRACE")
	if path == "" {
		return func(string, ...any) {}
	}
	fl, err := os.Create(path)
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(fl, time.Now().UTC().Format("15:04:05.000000")+" "+format+"\n", args...)
	}
}()

func (h *ffHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *ffHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *ffHook) draw() (int, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop || h.rng.IntN(100) >= h.pct {
		return -1, 0
	}
	f := h.rng.IntN(5)
	if f == 2 {
		h.wg.Add(1)
	}
	return f, time.Duration(h.rng.Int64N(int64(2 * h.lease)))
}

func (h *ffHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if processor.ScriptName(cmd.Args()) == "" && cmd.Name() != "script" { // (not a connection's set-up: a copy of it would race the connection's reader)
			return next(ctx, cmd)
		}
		f, d := h.draw()
		id, sent, all := ffSeq.Add(1), time.Now(), cmd.Args()
		if nk, _ := all[2].(int); processor.ScriptName(all) == "shared" && len(all) >= 7+nk {
			ffTrace("req #%d fault %d d %v: %v %v %v", id, f, d, all[3+nk], all[4+nk], all[6+nk])
			defer func() {
				var v any
				if c, ok := cmd.(interface{ Val() any }); ok {
					v = c.Val()
				}
				ffTrace("req #%d done after %v: %v, err %v", id, time.Since(sent), v, cmd.Err())
			}()
		}
		if f < 0 {
			return next(ctx, cmd)
		}
		h.count[f].Add(1)
		args := append([]any(nil), cmd.Args()...)
		switch f {
		case 0: // reply lost
			if err := next(ctx, cmd); err != nil {
				return err
			}
			cmd.SetErr(injectedTimeout{})
			return cmd.Err()
		case 1: // run twice at once
			err := next(ctx, cmd)
			c := redis.NewCmd(context.WithoutCancel(ctx), args...)
			_ = next(context.WithoutCancel(ctx), c)
			ffTrace("copy of #%d at once done: %v, err %v", id, c.Val(), c.Err())
			return err
		case 2: // a copy later
			// Within a lease of the original's sending, and never past a lease and a half of
			// it (the process may stall): a settled mark lives two leases after the settle
			// (processor.MarkLife), and a copy later than that is the documented limit — it
			// may take its locker anew, unrenewed till it expires (a copy drawn 1.6 leases
			// late woke half a lease later still in a stall of the process, and took anew the
			// locker of a release-then-take whose holding was given back right after: past
			// the mark's life).
			err := next(ctx, cmd)
			go func() {
				defer h.wg.Done()
				time.Sleep(time.Until(sent.Add(d / 2)))
				if late := time.Since(sent); late > 3*h.lease/2 {
					ffTrace("copy of #%d dropped: %v after the original was sent", id, late)
					return
				}
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c := redis.NewCmd(cctx, args...)
				ffTrace("copy of #%d sent %v after the original was sent", id, time.Since(sent))
				_ = next(cctx, c)
				ffTrace("copy of #%d done: %v, err %v", id, c.Val(), c.Err())
			}()
			return err
		case 3: // late
			time.Sleep(d / 6)
			return next(ctx, cmd)
		default: // failed before it is sent: as a timeout (the caller cannot tell), or as a dial that failed (it can)
			if id%2 == 0 {
				cmd.SetErr(injectedTimeout{})
			} else {
				cmd.SetErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
			}
			return cmd.Err()
		}
	}
}

func (h *ffHook) quiet() {
	h.mu.Lock()
	h.stop = true
	h.mu.Unlock()
	h.wg.Wait()
}

// ffProc is one process: a Generator on a faulty client, with its handles.
type ffProc struct {
	slot   int
	g      *dlock.Generator
	c      *redis.Client
	h      *ffHook
	mA, mD *dlock.DistributedReentrantLock
	rw     *dlock.RWLock
	sem    *dlock.Semaphore
	closed atomic.Bool

	mu     sync.Mutex
	owners []*dlock.Owner // every Owner returned (Close must end them all)
}

const (
	ffMutex = iota
	ffWrite
	ffRead
	ffSem
)

type ffEntry struct {
	id     int
	key    string
	kind   int
	n      int
	o      *dlock.Owner
	p      *ffProc
	at     time.Time // when its call returned
	began  time.Time // when its call began (a downgrade's read: its write's)
	parent int       // a downgrade's read: the write entry it came from
	tok    uint64
	what   string
}

// ffShape varies the fuzz's shape (DLOCK_FUZZ_SHAPE, comma-separated): procs=N, workers=N,
// pct=N (fault rate), mix=sem|multi|force (what workers mostly do), nonotify (no process
// listens for notifications), restart (Redis killed and restarted empty now and then).
type ffShape struct {
	procs, workers, pct int
	mix                 string
	nonotify, restart   bool
}

func parseShape(v string) ffShape {
	s := ffShape{procs: 3, workers: 8}
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(kv), "=")
		n, _ := strconv.Atoi(val)
		switch k {
		case "procs":
			s.procs = n
		case "workers":
			s.workers = n
		case "pct":
			s.pct = n
		case "mix":
			s.mix = val
		case "nonotify":
			s.nonotify = true
		case "restart":
			s.restart = true
		}
	}
	return s
}

type ffFuzz struct {
	t         *testing.T
	shape     ffShape
	srv       *redistest.Server
	restarted time.Time // when Redis was last back from a restart (an hour ahead while it is down)
	seed      uint64
	lease     time.Duration
	pct       int
	tg        string

	mu      sync.Mutex
	procs   []*ffProc
	all     []*ffProc
	live    map[int]*ffEntry
	nextID  int
	maxTok  map[string]uint64
	maxWho  map[string]string
	taint   map[string]time.Time    // by key|prefix: that process's entries acquired before it are exempt (a force may have removed them); only ever put later (exempt)
	pending map[string]int          // by key|prefix: forces and restarts under way (taintedNow)
	unknown map[string]int          // by key|prefix: those of them that the process may not know of (a force from elsewhere, a restart), each exempting all its entries until it ends
	ownMu   sync.Mutex              // guards own (taken under f.mu, and under the library's state mutex: nothing under it)
	own     map[string]*ffOwnForces // by key|prefix: the process's forces of its own holdings
	kCeil   int
	keys    [4]string
	op      *ffProc // the operator's: no faults
	fails   atomic.Int64
	stats   [16]atomic.Int64
	journal []string
}

func (f *ffFuzz) fail(format string, args ...any) {
	if f.fails.Add(1) <= 10 {
		f.t.Errorf("seed %d: "+format, append([]any{f.seed}, args...)...)
	}
}

func (f *ffFuzz) logf(format string, args ...any) {
	f.mu.Lock()
	f.journal = append(f.journal, fmt.Sprintf("%6dms ", time.Now().UnixMilli()%1000000)+fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *ffFuzz) newProc(slot int) *ffProc {
	f.mu.Lock()
	n := len(f.all)
	f.mu.Unlock()
	h := &ffHook{lease: f.lease, pct: f.pct, rng: rand.New(rand.NewPCG(f.seed, uint64(n)+77))}
	c := f.srv.Client()
	c.AddHook(h)
	opts := []dlock.Option{dlock.WithDefaultLease(f.lease), dlock.WithForceCounted(func(key, locker string) {
		owner, _ := processor.SplitLocker(locker)
		f.ownMu.Lock()
		f.ownForce(key + "|" + owner).counted = time.Now()
		f.ownMu.Unlock()
	})}
	if f.shape.nonotify {
		opts = append(opts, dlock.WithNotifications(false))
	}
	var kinds []string
	r := rand.New(rand.NewPCG(f.seed, uint64(n)+1000))
	if slot >= 0 { // (the operator's is plain)
		for i, o := range []dlock.Option{dlock.WithFIFO(), dlock.WithNotifications(false), dlock.WithLocalHandOff(0), dlock.WithWriteBlock(2), dlock.WithHoldOver(true)} {
			if r.IntN(4) == 0 {
				opts = append(opts, o)
				kinds = append(kinds, []string{"fifo", "no notifications", "no local hand-off", "write block 2", "hold-over"}[i])
			}
		}
	}
	g, err := dlock.NewGenerator(c, opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	if slot >= 0 && r.IntN(4) == 0 {
		g.Relock(2 * time.Millisecond) // every release stands in line again (relock), and a hold-over keeps the key
		kinds = append(kinds, "relock")
	}
	p := &ffProc{slot: slot, g: g, c: c, h: h}
	if len(kinds) > 0 {
		f.logf("proc%d: %s", slot, strings.Join(kinds, ", "))
	}
	f.logf("proc%d is %s", slot, g.LockerPrefix())
	if p.mA, err = g.GenWithLease("FZA", f.tg, f.lease); err != nil {
		f.t.Fatal(err)
	}
	if p.mD, err = g.GenWithLease("FZD", f.tg, f.lease); err != nil {
		f.t.Fatal(err)
	}
	if p.rw, err = g.GenRW("FZB", f.tg); err != nil {
		f.t.Fatal(err)
	}
	if p.sem, err = g.GenSemaphore("FZC", f.tg, 3); err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.all = append(f.all, p)
	f.mu.Unlock()
	return p
}

// register records a fresh holding and checks it against the others.
func (f *ffFuzz) register(e *ffEntry) int {
	f.mu.Lock()
	f.nextID++
	e.id = f.nextID
	f.live[e.id] = e
	f.mu.Unlock()
	e.p.mu.Lock()
	e.p.owners = append(e.p.owners, e.o)
	e.p.mu.Unlock()
	f.check("acquired " + e.what)
	return e.id
}

func (f *ffFuzz) drop(id int) {
	f.mu.Lock()
	delete(f.live, id)
	f.mu.Unlock()
}

// check: never a writer beside another holding (per key), never more permits than the count.
func (f *ffFuzz) check(when string) {
	f.mu.Lock()
	var es []*ffEntry
	for _, e := range f.live {
		if f.tainted(e) {
			continue
		}
		es = append(es, e)
	}
	kCeil := f.kCeil
	f.mu.Unlock()
	byKey := map[string][]*ffEntry{}
	for _, e := range es {
		if e.o.Err() == nil {
			byKey[e.key] = append(byKey[e.key], e)
		}
	}
	for key, es := range byKey {
		permits := 0
		var ws, rs []*ffEntry
		for _, e := range es {
			switch e.kind {
			case ffSem:
				permits += e.n
			case ffRead:
				rs = append(rs, e)
			default:
				ws = append(ws, e)
			}
		}
		if permits > kCeil {
			f.fail("%s: %d permits of %s out, the count was never above %d: %s", when, permits, key, kCeil, describe(es))
		}
		if len(ws) > 1 {
			f.fail("%s: %d writers of %s at once: %s", when, len(ws), key, describe(es))
		}
		if len(ws) == 1 {
			for _, r := range rs {
				if r.parent != ws[0].id {
					f.fail("%s: a writer and a reader of %s at once: %s", when, key, describe(es))
					break
				}
			}
		}
	}
}

// tainted reports whether a force may have removed e's holding (under f.mu).
func (f *ffFuzz) tainted(e *ffEntry) bool {
	tk := e.key + "|" + e.p.g.LockerPrefix()
	if f.unknown[tk] > 0 || e.at.Before(f.taint[tk]) {
		return true
	}
	f.ownMu.Lock()
	defer f.ownMu.Unlock()
	o := f.own[tk]
	return o != nil && e.began.Before(o.counted) && (o.flying > 0 || e.at.Before(o.doneAt))
}

// ffOwnForces is what the fuzz knows of a process's forces of its own holdings of a key. The
// library holds back what a force's locker holds from the moment it counts the force (before
// it sends it) until the force's answer or a renewal tells: the entries whose call began before
// the last such count are exempt while a force is on its way and, of the others, those acquired
// before the last one returned.
type ffOwnForces struct {
	counted time.Time // when the library last counted one (dlock.WithForceCounted)
	flying  int       // the fuzz's calls under way
	doneAt  time.Time // when the last call returned
}

// ownForce returns tk's ffOwnForces, made if need be (under f.ownMu).
func (f *ffFuzz) ownForce(tk string) *ffOwnForces {
	o := f.own[tk]
	if o == nil {
		o = &ffOwnForces{}
		f.own[tk] = o
	}
	return o
}

// exempt makes the entries of tk acquired before until exempt (under f.mu). It never shortens
// an exemption: a force of a process's own holding, which its holders learn at once, comes
// while another process's force of its holding of the key may still be unknown to it.
func (f *ffFuzz) exempt(tk string, until time.Time) {
	if until.After(f.taint[tk]) {
		f.taint[tk] = until
	}
}

// taintedNow reports whether a force of p's holding of key may still be unknown to p.
func (f *ffFuzz) taintedNow(key string, p *ffProc) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	tk := key + "|" + p.g.LockerPrefix()
	return f.pending[tk] > 0 || time.Now().Before(f.taint[tk])
}

func describe(es []*ffEntry) string {
	var b []string
	for _, e := range es {
		b = append(b, fmt.Sprintf("#%d %s proc%d at %dms", e.id, e.what, e.p.slot, e.at.UnixMilli()%1000000))
	}
	return strings.Join(b, "; ")
}

func (f *ffFuzz) tokFloor(key string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxTok[key]
}

func (f *ffFuzz) sawTok(key string, tok uint64, who string) {
	f.logf("%s: token %d of %s", who, tok, key)
	f.mu.Lock()
	if tok > f.maxTok[key] {
		f.maxTok[key] = tok
		f.maxWho[key] = who
	}
	f.mu.Unlock()
}

func (f *ffFuzz) whoOf(key string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxWho[key]
}

// expected reports whether err is one the library documents.
func (f *ffFuzz) expected(p *ffProc, err error, what string) {
	if err == nil {
		return
	}
	if errors.Is(err, dlock.ErrInvalidConfig) && !errors.Is(err, dlock.ErrNotObtained) {
		if strings.Contains(err.Error(), "permits") {
			return // (n above the count Redis keeps: SetPermits lowered it)
		}
		f.fail("%s: %v", what, err)
		return
	}
	if errors.Is(err, dlock.ErrClosed) && !p.closed.Load() {
		f.fail("%s: ErrClosed before Close: %v", what, err)
	}
	if !documentedErr(err) && !errors.Is(err, dlock.ErrUpgrade) && !errors.Is(err, dlock.ErrOptimisticLocking) {
		f.fail("%s: undocumented error %v", what, err)
	}
}

// timed runs fn and fails if it returns later than bound past its start.
func (f *ffFuzz) timed(what string, bound time.Duration, fn func()) {
	start := time.Now()
	fn()
	if el := time.Since(start); el > bound {
		f.fail("%s returned after %v (bound %v)", what, el, bound)
	}
}

func (f *ffFuzz) proc(rng *rand.Rand) *ffProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[rng.IntN(len(f.procs))]
}

var ffWaits = []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 30 * time.Millisecond, 200 * time.Millisecond, 800 * time.Millisecond, 2 * time.Second}

// acquisition is one thing a worker may take.
type ffTake struct {
	key   string
	kind  int
	n     int
	part  dlock.Part
	token func(context.Context) (uint64, bool)
}

func (f *ffFuzz) takes(p *ffProc, rng *rand.Rand) []ffTake {
	all := []ffTake{
		{key: f.keys[0], kind: ffMutex, part: p.mA, token: p.mA.FencingToken},
		{key: f.keys[3], kind: ffMutex, part: p.mD, token: p.mD.FencingToken},
		{key: f.keys[1], kind: ffWrite, part: p.rw.WriteSide(), token: p.rw.FencingToken},
		{key: f.keys[1], kind: ffRead, part: p.rw.ReadSide(), token: p.rw.FencingToken},
	}
	reps := 1
	if f.shape.mix == "sem" {
		reps = 6
	}
	for range reps {
		n := 1 + rng.IntN(3)
		all = append(all, ffTake{key: f.keys[2], kind: ffSem, n: n, part: p.sem.Permits(n), token: p.sem.FencingToken})
	}
	return all
}

func kindName(k, n int) string {
	return [...]string{"mutex", "write", "read", fmt.Sprintf("sem(%d)", n)}[k]
}

// work is one worker's loop.
func (f *ffFuzz) work(rng *rand.Rand, until time.Time) {
	for time.Now().Before(until) && f.fails.Load() == 0 {
		p := f.proc(rng)
		r := rng.IntN(40)
		switch f.shape.mix {
		case "multi":
			r = []int{0, 30, 30, 30, 36, 38}[rng.IntN(6)]
		case "force":
			r = []int{0, 30, 36, 36, 36, 38}[rng.IntN(6)]
		}
		switch {
		case r < 26:
			f.single(p, rng)
		case r < 35:
			f.multi(p, rng)
		case r < 37:
			f.force(p, rng)
		default:
			f.setPermits(p, rng)
		}
	}
}

func (f *ffFuzz) waitCtx(rng *rand.Rand, parent context.Context) (context.Context, context.CancelFunc, time.Duration) {
	d := ffWaits[rng.IntN(len(ffWaits))]
	ctx, cancel := context.WithTimeout(parent, d)
	return ctx, cancel, d
}

func (f *ffFuzz) single(p *ffProc, rng *rand.Rand) {
	ts := f.takes(p, rng)
	tk := ts[rng.IntN(len(ts))]
	try := rng.IntN(4) == 0
	ctx, cancel, d := f.waitCtx(rng, context.Background())
	defer cancel()
	floor := f.tokFloor(tk.key)
	what := fmt.Sprintf("proc%d %s %s", p.slot, map[bool]string{true: "try", false: "lock"}[try], kindName(tk.kind, tk.n))
	var o *dlock.Owner
	var ok bool
	var err error
	began := time.Now()
	f.timed(what, d+5*time.Second, func() {
		if try {
			o, ok, err = tk.part.TryLock(ctx)
		} else {
			o, err = tk.part.Lock(ctx)
			ok = err == nil
		}
	})
	f.expected(p, err, what)
	if err != nil || !ok {
		if o != nil {
			f.fail("%s: an Owner with err %v ok %v", what, err, ok)
		}
		f.stats[1].Add(1)
		return
	}
	f.stats[0].Add(1)
	at := time.Now()
	tok, held := tk.token(o)
	if !held && o.Err() == nil {
		f.fail("%s: FencingToken says not held while its Owner is live", what)
	}
	if held && (tk.kind == ffMutex || tk.kind == ffWrite) && tok <= floor && o.Err() == nil && !f.taintedNow(tk.key, p) {
		f.fail("%s: token %d not above %d, the largest of an acquisition that returned before it began (now %s)", what, tok, floor, f.whoOf(tk.key))
	}
	e := &ffEntry{key: tk.key, kind: tk.kind, n: tk.n, o: o, p: p, at: at, began: began, what: what, tok: tok}
	id := f.register(e)
	if held {
		f.sawTok(tk.key, tok, what)
	}
	f.hold(p, rng, tk, o, e, id)
}

// hold does things with a holding, then lets it go.
func (f *ffFuzz) hold(p *ffProc, rng *rand.Rand, tk ffTake, o *dlock.Owner, e *ffEntry, id int) {
	var extra []func()
	for range rng.IntN(3) {
		switch r := rng.IntN(4); {
		case r == 0: // re-entry
			ctx, cancel, d := f.waitCtx(rng, o)
			var before int
			hc := func() int {
				switch tk.kind {
				case ffMutex:
					return tk.part.(*dlock.DistributedReentrantLock).HoldCount(o)
				case ffSem:
					return p.sem.HoldCount(o)
				}
				return p.rw.HoldCount(o)
			}
			before = hc()
			var ro *dlock.Owner
			var err error
			f.timed(e.what+" re-entry", d+5*time.Second, func() { ro, err = tk.part.Lock(ctx) })
			cancel()
			f.expected(p, err, e.what+" re-entry")
			if err != nil {
				if after := hc(); after != before && after != 0 {
					f.fail("%s: a refused re-entry (%v) changed the hold count %d -> %d", e.what, err, before, after)
				}
				continue
			}
			f.stats[2].Add(1)
			if after := hc(); after != before+1 && ro.Err() == nil {
				f.fail("%s: a re-entry took the hold count from %d to %d", e.what, before, after)
			}
			extra = append(extra, func() { f.unlock(p, ro, e.what+" re-entry unlock") })
		case r == 1 && tk.kind == ffMutex: // Extend
			l := tk.part.(*dlock.DistributedReentrantLock)
			lease := f.lease + time.Duration(rng.IntN(4)-1)*f.lease/2
			var err error
			f.timed(e.what+" extend", f.lease+5*time.Second, func() { err = l.Extend(o, lease) })
			f.expected(p, err, e.what+" extend")
			f.stats[3].Add(1)
		case r == 1 && tk.kind == ffWrite: // downgrade
			ctx, cancel, d := f.waitCtx(rng, o)
			var ro *dlock.Owner
			var err error
			f.timed(e.what+" downgrade", d+5*time.Second, func() { ro, err = p.rw.RLock(ctx) })
			cancel()
			f.expected(p, err, e.what+" downgrade")
			if err != nil {
				continue
			}
			f.stats[4].Add(1)
			re := &ffEntry{key: tk.key, kind: ffRead, o: ro, p: p, at: time.Now(), began: e.began, parent: id, what: e.what + " downgraded"}
			re.tok, _ = p.rw.FencingToken(ro)
			rid := f.register(re)
			if rt, ok := p.rw.FencingToken(ro); ok {
				f.sawTok(tk.key, rt, re.what)
			}
			if len(extra) == 0 && rng.IntN(2) == 0 { // the write side goes first: a reader on
				f.drop(id)
				f.unlock(p, o, e.what+" unlock of the write side")
				id = -1
				time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
				f.drop(rid)
				f.unlock(p, ro, e.what+" unlock of the downgrade")
				break
			}
			extra = append(extra, func() { f.drop(rid); f.unlock(p, ro, e.what+" unlock of the downgrade") })
		case r == 2 && tk.kind == ffRead: // an upgrade: refused
			ctx, cancel, d := f.waitCtx(rng, o)
			var err error
			var wo *dlock.Owner
			f.timed(e.what+" upgrade", d+5*time.Second, func() { wo, err = p.rw.Lock(ctx) })
			cancel()
			if err == nil {
				f.fail("%s: an upgrade was granted", e.what)
				_ = wo.Unlock()
			} else if !errors.Is(err, dlock.ErrUpgrade) {
				f.expected(p, err, e.what+" upgrade")
			}
		default:
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
		}
		f.check("holding " + e.what)
		if id < 0 {
			return
		}
	}
	for i := len(extra) - 1; i >= 0; i-- {
		extra[i]()
	}
	f.drop(id)
	f.unlock(p, o, e.what+" unlock")
}

func (f *ffFuzz) unlock(p *ffProc, o *dlock.Owner, what string) {
	var err error
	f.timed(what, 2*f.lease+5*time.Second, func() { err = o.Unlock() })
	f.logf("%s: %v", what, err)
	if err != nil && (errors.Is(err, dlock.ErrNotHeld) && !errors.Is(err, dlock.ErrLockLost)) && o.Err() == nil {
		f.fail("%s: %v for a live owner", what, err)
	}
	f.expected(p, err, what)
}

func (f *ffFuzz) multi(p *ffProc, rng *rand.Rand) {
	ts := f.takes(p, rng)
	rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	var parts []dlock.Part
	var chosen []ffTake
	seen := map[string]bool{}
	for _, tk := range ts[:2+rng.IntN(3)] {
		if seen[tk.key] {
			continue
		}
		seen[tk.key] = true
		parts = append(parts, tk.part)
		chosen = append(chosen, tk)
	}
	m, err := p.g.MultiOf(parts...)
	if err != nil {
		f.expected(p, err, "MultiOf")
		return
	}
	var names []string
	floors := map[string]uint64{}
	for _, tk := range chosen {
		names = append(names, kindName(tk.kind, tk.n))
		floors[tk.key] = f.tokFloor(tk.key)
	}
	what := fmt.Sprintf("proc%d multi[%s]", p.slot, strings.Join(names, ","))
	try := rng.IntN(4) == 0
	ctx, cancel, d := f.waitCtx(rng, context.Background())
	defer cancel()
	var o *dlock.Owner
	ok := false
	began := time.Now()
	f.timed(what, d+5*time.Second, func() {
		if try {
			o, ok, err = m.TryLock(ctx)
		} else {
			o, err = m.Lock(ctx)
			ok = err == nil
		}
	})
	f.expected(p, err, what)
	if err != nil || !ok {
		f.stats[6].Add(1)
		return
	}
	f.stats[5].Add(1)
	at := time.Now()
	toks, held := m.FencingTokens(o)
	if !held && o.Err() == nil {
		f.fail("%s: FencingTokens says not held while its Owner is live", what)
	}
	var ids []int
	for _, tk := range chosen {
		if held && (tk.kind == ffMutex || tk.kind == ffWrite) && toks[tk.key] <= floors[tk.key] && o.Err() == nil && !f.taintedNow(tk.key, p) {
			f.fail("%s: token %d of %s not above %d (now %s)", what, toks[tk.key], tk.key, floors[tk.key], f.whoOf(tk.key))
		}
		ids = append(ids, f.register(&ffEntry{key: tk.key, kind: tk.kind, n: tk.n, o: o, p: p, at: at, began: began, what: what, tok: toks[tk.key]}))
		if held {
			f.sawTok(tk.key, toks[tk.key], what)
		}
	}
	if rng.IntN(3) == 0 { // re-entry of the MultiLock
		rctx, rcancel, d := f.waitCtx(rng, o)
		var ro *dlock.Owner
		f.timed(what+" re-entry", d+5*time.Second, func() { ro, err = m.Lock(rctx) })
		rcancel()
		f.expected(p, err, what+" re-entry")
		if err == nil {
			f.unlock(p, ro, what+" re-entry unlock")
		}
	}
	time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
	f.check("holding " + what)
	for _, id := range ids {
		f.drop(id)
	}
	f.unlock(p, o, what+" unlock")
}

func (f *ffFuzz) force(p *ffProc, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	i := rng.IntN(4)
	key := f.keys[i]
	var holder, desc string
	var htok uint64
	var hwrite bool
	stateAt := time.Now()
	switch i {
	case 0, 3:
		l := p.mA
		if i == 3 {
			l = p.mD
		}
		st, err := l.State(ctx)
		if err != nil {
			f.expected(p, err, "State")
			return
		}
		holder = st.Holder
	default:
		var st dlock.SharedState
		var err error
		if i == 1 {
			st, err = p.rw.State(ctx)
		} else {
			st, err = p.sem.State(ctx)
		}
		if err != nil {
			f.expected(p, err, "State")
			return
		}
		if len(st.Holds) > 0 {
			h := st.Holds[rng.IntN(len(st.Holds))]
			holder, htok, hwrite = h.Locker, h.Token, h.Write
			desc = fmt.Sprintf("token %d write %v permits %d", h.Token, h.Write, h.Permits)
		}
	}
	if holder == "" {
		return
	}
	owner, _ := processor.SplitLocker(holder)
	tk := key + "|" + owner
	mine := owner == p.g.LockerPrefix() // (a force of its own holds back what its locker holds: ffOwnForces)
	f.mu.Lock()
	f.pending[tk]++
	if mine {
		f.ownMu.Lock()
		f.ownForce(tk).flying++
		f.ownMu.Unlock()
	} else {
		f.unknown[tk]++
	}
	f.mu.Unlock()
	var err error
	var removed bool
	f.timed("force", 6*time.Second, func() {
		switch i {
		case 0:
			removed, err = p.mA.ForceRelease(ctx, holder)
		case 3:
			removed, err = p.mD.ForceRelease(ctx, holder)
		case 1:
			removed, err = p.rw.ForceRelease(ctx, holder)
		default:
			removed, err = p.sem.ForceRelease(ctx, holder)
		}
	})
	f.expected(p, err, "force")
	f.mu.Lock()
	// Its own holders lose it at once (a downgrade's or a shrink's read-hold too, its answer
	// on its way or lost). A force of its own whose reply was lost has them ask Redis at once,
	// after any answer on its way: told within a round trip or two, not at once.
	f.pending[tk]--
	if mine {
		f.ownMu.Lock()
		o := f.ownForce(tk)
		o.flying--
		o.doneAt = time.Now()
		f.ownMu.Unlock()
	} else {
		f.unknown[tk]--
	}
	if !mine || err != nil { // (a force of its own that answered: its holders were told, or a renewal tells them before a goroutine is lent the holding)
		f.exempt(tk, time.Now().Add(3*f.lease+time.Second)) // (copies run up to a lease and a half later; the holder learns within 3/4 of its lease)
	}
	f.mu.Unlock()
	f.logf("proc%d (%s) forced %s (%s) of %s: %v %v", p.slot, p.g.LockerPrefix(), holder, desc, key, removed, err)
	if mine && removed && err == nil {
		// Its borrowers in this Generator lose it at once.
		f.mu.Lock()
		var es []*ffEntry
		for _, e := range f.live {
			if e.p != p || e.key != key || !e.at.Before(stateAt) || e.parent != 0 {
				continue
			}
			switch {
			case i == 0 || i == 3, e.kind == ffWrite && hwrite && e.tok >= htok, e.kind != ffWrite && !hwrite && e.tok == htok:
				es = append(es, e)
			}
		}
		f.mu.Unlock()
		for _, e := range es {
			if e.o.Err() == nil {
				f.fail("proc%d forced its own holding %s (%s) of %s, and its borrower %s (token %d) is live after", p.slot, holder, desc, key, e.what, e.tok)
			}
		}
	}
	f.stats[7].Add(1)
}

func (f *ffFuzz) setPermits(p *ffProc, rng *rand.Rand) {
	k := 1 + rng.IntN(4)
	f.mu.Lock()
	f.kCeil = max(f.kCeil, k)
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var err error
	f.timed("SetPermits", 6*time.Second, func() { err = p.sem.SetPermits(ctx, k) })
	f.expected(p, err, "SetPermits")
	f.stats[8].Add(1)
}

// closer closes a process now and then and puts a new one in its slot.
func (f *ffFuzz) closer(rng *rand.Rand, until time.Time) {
	for time.Now().Before(until) && f.fails.Load() == 0 {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		f.mu.Lock()
		slot := rng.IntN(len(f.procs))
		old := f.procs[slot]
		f.mu.Unlock()
		np := f.newProc(slot)
		f.mu.Lock()
		f.procs[slot] = np
		f.mu.Unlock()
		f.closeProc(old)
		f.stats[9].Add(1)
	}
}

// restart kills Redis after d and starts it again, empty: every holding of every process
// may be gone, each learning it at its tenure's next renewal (3/4 of its lease, Extend's
// longer leases included) or by its Unlock.
func (f *ffFuzz) restart(d time.Duration) {
	time.Sleep(d)
	f.mu.Lock()
	f.restarted = time.Now().Add(time.Hour) // (until it is back)
	var down []string
	for _, p := range f.all {
		for _, k := range f.keys {
			down = append(down, k+"|"+p.g.LockerPrefix())
			f.pending[down[len(down)-1]]++
			f.unknown[down[len(down)-1]]++
		}
	}
	f.mu.Unlock()
	f.logf("redis killed")
	f.srv.Kill()
	time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
	if err := f.srv.Restart(); err != nil {
		f.fail("restart: %v", err)
	}
	f.logf("redis restarted")
	f.mu.Lock()
	f.restarted = time.Now()
	for _, tk := range down {
		f.pending[tk]--
		f.unknown[tk]--
	}
	for _, p := range f.all { // (processes made while it was down too)
		for _, k := range f.keys {
			f.exempt(k+"|"+p.g.LockerPrefix(), time.Now().Add(3*f.lease+time.Second))
		}
	}
	f.mu.Unlock()
	f.stats[12].Add(1)
}

func (f *ffFuzz) closeProc(p *ffProc) {
	p.closed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*f.lease+5*time.Second)
	defer cancel()
	var err error
	ffTrace("Close of proc%d (%s) begins", p.slot, p.g.LockerPrefix())
	defer func() { ffTrace("Close of proc%d (%s) returned %v", p.slot, p.g.LockerPrefix(), err) }()
	f.timed(fmt.Sprintf("Close of proc%d", p.slot), 3*f.lease+6*time.Second, func() { err = p.g.Close(ctx) })
	if err != nil && !documentedErr(err) {
		f.fail("Close: %v", err)
	}
	p.mu.Lock()
	owners := append([]*dlock.Owner(nil), p.owners...)
	p.mu.Unlock()
	for _, o := range owners {
		if o.Err() == nil {
			f.fail("an Owner of proc%d (%v) live after Close", p.slot, o)
		}
	}
	f.logf("closed proc%d (%s): %v", p.slot, p.g.LockerPrefix(), err)
	f.mu.Lock()
	// (a copy of a request sent before an empty restart, delivered after it, may put the
	// process back in line or take a key for it: nothing in Redis tells it from a new one)
	recent := !f.restarted.IsZero() && time.Since(f.restarted) < 3*f.lease+6*time.Second
	f.mu.Unlock()
	if err == nil && !recent {
		f.heldByNone(p, "after its Close")
	}
}

// marksOnly reports whether every key of left is a settled or forced mark, or a force's answer
// ({K}:removed:<locker>), with a time to live (a ForceRelease makes them live eight times what
// the forced key had left: force.lua).
func marksOnly(c *redis.Client, left []string) bool {
	for _, l := range left {
		k, _, _ := strings.Cut(l, " ")
		if !strings.Contains(k, ":done:") && !strings.Contains(k, ":forced:") && !strings.Contains(k, ":removed:") {
			return false
		}
		if ttl := c.PTTL(context.Background(), k).Val(); ttl < 0 || ttl > 16*time.Second {
			return false
		}
	}
	return true
}

// inRedis checks that every holding its process counts held (its Owner live before and after
// the read) is held in Redis by that process, unless a force may have removed it.
func (f *ffFuzz) inRedis() {
	f.mu.Lock()
	var es []*ffEntry
	for _, e := range f.live {
		es = append(es, e)
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	holders := map[string][]string{} // by key: prefixes (with ":w" for a write-hold)
	for i, l := range []*dlock.DistributedReentrantLock{f.op.mA, f.op.mD} {
		st, err := l.State(ctx)
		if err != nil {
			if !f.shape.restart { // (Redis may be down)
				f.fail("State: %v", err)
			}
			return
		}
		if st.Holder != "" {
			o, _ := processor.SplitLocker(st.Holder)
			holders[f.keys[i*3]] = append(holders[f.keys[i*3]], o+":w")
		}
	}
	for i, get := range []func(context.Context) (dlock.SharedState, error){f.op.rw.State, f.op.sem.State} {
		st, err := get(ctx)
		if err != nil {
			if !f.shape.restart { // (Redis may be down)
				f.fail("State: %v", err)
			}
			return
		}
		for _, h := range st.Holds {
			o, _ := processor.SplitLocker(h.Locker)
			if h.Write {
				o += ":w"
			}
			holders[f.keys[1+i]] = append(holders[f.keys[1+i]], o)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range es {
		if f.live[e.id] != e || e.o.Err() != nil || f.tainted(e) {
			continue
		}
		want := e.p.g.LockerPrefix()
		if e.kind == ffMutex || e.kind == ffWrite {
			want += ":w"
		}
		found := false
		for _, h := range holders[e.key] {
			found = found || h == want || (e.kind == ffRead && h == want+":w") // (a write-hold lends to its readers)
		}
		if !found {
			f.fail("%s (#%d, token %d) is live, and Redis does not hold %s for its process: %v", e.what, e.id, e.tok, e.key, holders[e.key])
		}
	}
	f.stats[11].Add(1)
}

// quiesced checks, with every call returned and every holding let go, that Redis comes to
// hold nothing and have nobody in line within two of the longest leases (Extend's) and a second.
func (f *ffFuzz) quiesced() {
	f.mu.Lock()
	n := len(f.live)
	f.mu.Unlock()
	if n != 0 {
		f.fail("%d holdings still registered with every worker done", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bound := 4*f.lease + time.Second
	start := time.Now()
	for {
		var left []string
		for _, l := range []*dlock.DistributedReentrantLock{f.op.mA, f.op.mD} {
			st, err := l.State(ctx)
			if err != nil {
				f.fail("State: %v", err)
				return
			}
			if st.Holder != "" {
				left = append(left, fmt.Sprintf("%s held by %s (%v left)", l.Config().UniqueKey(), st.Holder, st.LeaseLeft))
			}
		}
		for _, get := range []func(context.Context) (dlock.SharedState, error){f.op.rw.State, f.op.sem.State} {
			st, err := get(ctx)
			if err != nil {
				f.fail("State: %v", err)
				return
			}
			for _, h := range st.Holds {
				left = append(left, fmt.Sprintf("%s held %+v", st.Kind, h))
			}
			for _, w := range st.Waiting {
				left = append(left, fmt.Sprintf("%s waiting %+v", st.Kind, w))
			}
		}
		if len(left) == 0 {
			f.stats[10].Add(1)
			f.logf("quiet after %v", time.Since(start))
			return
		}
		if time.Since(start) > bound {
			f.fail("with nobody holding or waiting for %v, Redis still has %v", bound, left)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// heldByNone checks, through the operator's Generator (no faults), that Redis holds nothing of p.
func (f *ffFuzz) heldByNone(p *ffProc, when string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pre := p.g.LockerPrefix()
	for _, l := range []*dlock.DistributedReentrantLock{f.op.mA, f.op.mD} {
		st, err := l.State(ctx)
		if err != nil {
			if !f.shape.restart { // (Redis may be down)
				f.fail("State: %v", err)
			}
			return
		}
		if strings.HasPrefix(st.Holder, pre) {
			f.fail("proc%d %s: Redis holds %s for it (%s)", p.slot, when, l.Config().UniqueKey(), st.Holder)
		}
	}
	for _, get := range []func(context.Context) (dlock.SharedState, error){f.op.rw.State, f.op.sem.State} {
		st, err := get(ctx)
		if err != nil {
			if !f.shape.restart { // (Redis may be down)
				f.fail("State: %v", err)
			}
			return
		}
		for _, h := range st.Holds {
			if strings.HasPrefix(h.Locker, pre) {
				f.fail("proc%d %s: Redis holds %+v of %s for it", p.slot, when, h, st.Kind)
			}
		}
		for _, w := range st.Waiting {
			if strings.HasPrefix(w.Process, pre) {
				f.fail("proc%d %s: in line in Redis for %s: %+v", p.slot, when, st.Kind, w)
			}
		}
	}
}

func TestLockFamilyAndMutexUnderLostAndRepeatedReplies(t *testing.T) {
	d := 3 * time.Second
	if os.Getenv("DLOCK_SOAK") != "" {
		d = soakFor(t)
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("DLOCK_FUZZ_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	lease := time.Second
	if v := os.Getenv("DLOCK_FUZZ_LEASE"); v != "" {
		lease, _ = time.ParseDuration(v)
	}
	shape := parseShape(os.Getenv("DLOCK_FUZZ_SHAPE"))
	s := srv
	if shape.restart {
		s = ownServer(t)
	}
	before := goleak.IgnoreCurrent()
	rng := rand.New(rand.NewPCG(seed, 1))
	f := &ffFuzz{t: t, seed: seed, lease: lease, pct: []int{3, 10, 25}[rng.IntN(3)], tg: "ff-" + strconv.FormatUint(seed, 36),
		live: map[int]*ffEntry{}, maxTok: map[string]uint64{}, maxWho: map[string]string{}, taint: map[string]time.Time{}, pending: map[string]int{}, unknown: map[string]int{}, own: map[string]*ffOwnForces{}, kCeil: 3,
		shape: shape, srv: s}
	if shape.pct > 0 {
		f.pct = shape.pct
	}
	t.Logf("seed %d, %d%% of commands faulted, for %v, shape %+v", seed, f.pct, d, shape)
	defer func() {
		if t.Failed() {
			f.mu.Lock()
			t.Logf("journal:\n%s", strings.Join(f.journal[max(0, len(f.journal)-150):], "\n"))
			f.mu.Unlock()
		}
	}()
	f.op = f.newProc(-1)
	f.op.h.pct = 0
	f.mu.Lock()
	f.all = f.all[:0]
	f.mu.Unlock()
	for i := range shape.procs {
		f.procs = append(f.procs, f.newProc(i))
	}
	f.keys = [4]string{f.procs[0].mA.Config().UniqueKey(), f.procs[0].rw.Config().UniqueKey(), f.procs[0].sem.Config().UniqueKey(), f.procs[0].mD.Config().UniqueKey()}
	stop := make(chan struct{})
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				f.check("checker")
				f.inRedis()
			}
		}
	}()
	var rngs []*rand.Rand
	for w := range shape.workers {
		rngs = append(rngs, rand.New(rand.NewPCG(seed, uint64(w))))
	}
	crng := rand.New(rand.NewPCG(seed, 99))
	// Rounds of about a second and a half, each followed by a moment when nobody holds or
	// waits: then Redis holds nothing and nobody is in line, within two of the longest leases.
	for end := time.Now().Add(d); time.Now().Before(end) && f.fails.Load() == 0; {
		until := time.Now().Add(1500 * time.Millisecond)
		var wg sync.WaitGroup
		for _, rng := range rngs {
			wg.Add(1)
			go func() { defer wg.Done(); f.work(rng, until) }()
		}
		if shape.restart && crng.IntN(3) == 0 {
			wg.Add(1)
			d := time.Duration(crng.IntN(1200)) * time.Millisecond
			go func() { defer wg.Done(); f.restart(d) }()
		}
		wg.Add(1)
		go func() { defer wg.Done(); f.closer(crng, until) }()
		wg.Wait()
		f.quiesced()
	}
	close(stop)
	<-checked
	// Wind down: every process closed, every copy delivered.
	f.mu.Lock()
	procs := append([]*ffProc(nil), f.procs...)
	all := append([]*ffProc(nil), f.all...)
	f.mu.Unlock()
	for _, p := range procs {
		f.closeProc(p)
	}
	if err := f.op.g.Close(context.Background()); err != nil {
		f.fail("operator's Close: %v", err)
	}
	f.op.c.Close()
	var counts [5]int64
	for _, p := range all {
		p.h.quiet()
		p.c.Close()
		for i := range counts {
			counts[i] += p.h.count[i].Load()
		}
	}
	t.Logf("acquired %d (%d not), re-entries %d, extends %d, downgrades %d, multis %d (%d not), forces %d, SetPermits %d, closes %d, restarts %d; faults: lost %d, dup %d, dup later %d, late %d, failed %d",
		f.stats[0].Load(), f.stats[1].Load(), f.stats[2].Load(), f.stats[3].Load(), f.stats[4].Load(), f.stats[5].Load(), f.stats[6].Load(),
		f.stats[7].Load(), f.stats[8].Load(), f.stats[9].Load(), f.stats[12].Load(), counts[0], counts[1], counts[2], counts[3], counts[4])
	// Every key of the locks gone within a few leases.
	c := f.srv.Client()
	defer c.Close()
	deadline := time.Now().Add(6*f.lease + 3*time.Second)
	for {
		var left []string
		for _, k := range keysOf(t, c) {
			if strings.Contains(k, f.tg) {
				left = append(left, fmt.Sprintf("%s (pttl %v)", k, c.PTTL(context.Background(), k).Val()))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) && marksOnly(c, left) {
			t.Logf("settled marks left after a force (they live 8 times the forced key's life): %v", left)
			break
		}
		if time.Now().After(deadline) {
			f.fail("keys left %v after the end: %v", 6*f.lease+3*time.Second, left)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := goleak.Find(before)
	for i := 0; err != nil && i < 20; i++ {
		time.Sleep(250 * time.Millisecond)
		err = goleak.Find(before)
	}
	if err != nil {
		f.fail("goroutines left: %v", err)
	}
}
