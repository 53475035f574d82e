package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/internal/redistest"
)

// TestProcessesAtDistancesUnderFaults: four helper OS processes (the test binary in mode
// "distance"), each of distGoroutines goroutines that take one mutex again and again, reach
// the lock's Redis through a fault proxy of their own, each at its own distance: 0, 1, 5 and
// 20 ms one way, with a jitter of up to half that (a tenth of a millisecond for the nearest)
// on every chunk; the 5 ms one runs WithNotifications(false) (it learns every grant by its
// poll). Two more goroutines per process take a side of a read-write lock or a permit of a
// semaphore of distPermits. Each mutex holding and each write holding writes its fencing
// token to a fenced register on a second redis-server (never faulted): a script that refuses
// a token not above the last it took, and that keeps who holds, so that the exit of a holding
// tells whether another entered meanwhile; it logs every entry and exit with the register's
// clock. Meanwhile the test injects, one at a time, every kind in turn in a random order:
//
//	stop-holder:  the process that holds (in a long hold, when one is announced) SIGSTOPped
//	              for 1.5–2.5 leases, then SIGCONT;
//	stop-granted: the process named by the next grant message SIGSTOPped as it is sent, for
//	              0.5–2 leases;
//	kill-holder:  the holder killed (kill -9), a new process started in its slot;
//	kill-first:   the first process in the key's line in Redis killed;
//	kill-granted: the process named by the next grant message killed as it is sent;
//	cut-reply:    one process's next reply cut in the middle, its connection reset;
//	cut-replies:  the same 5–10 times, 5–30 ms apart;
//	cut-sub:      the first in line's subscription connection reset, its command
//	              connection left alone;
//	deaf-sub:     the first in line's subscription connection black-holed for 1–3 s (Redis
//	              still counts it listening, so grants go to it unheard), its command
//	              connection left alone;
//	deaf-all:     every process's subscription connection black-holed for 2–4 s;
//	restart:      the lock's redis-server killed and restarted empty.
//
// Rules, checked from what the helpers report (CLOCK_MONOTONIC, one clock for all processes)
// and the registers' logs (two-owners, refused-owner and not-told for the write side's
// register too):
//
//	overlap: two holdings of the mutex, or of the write side and either side, or more than
//	  distPermits of the semaphore, at once within the half lease after their Lock returned
//	  (see checkWindows);
//	two-owners: a holding saw another enter the register (its exit or a check in a long hold
//	  found another holder) less than half a lease after its Lock returned (Lock never returns
//	  with less than half a lease left), no restart since its Lock began;
//	refused-owner: the register refused a holding's token less than half a lease after its
//	  Lock returned (a newer token was already in: two owners), no restart since;
//	not-told: a holding that the register found stale (refused, or another entered) whose
//	  owner context did not end with ErrLockLost within 2 leases + 1 s, or whose Unlock did
//	  not say ErrLockLost (a Redis error excepted), its process not stopped meanwhile;
//	lock-failed: a Lock (deadline distLockWait) that failed;
//	blocked: the register went longer than 2 leases + 2 s without an entry, after a
//	  holding's exit, or entry, while processes wanted the key (the time Redis was down
//	  excepted; the register's gaps are the mutex's);
//	starved: a process slot that had fewer turns of the mutex than a third of the mean, a turn
//	  being a run of the register's entries by one process (the line's promise: a turn each;
//	  not acquisitions, whose count a turn ends at random: one holding in 30 is long, and a
//	  slot's few turns may each end at its first holding);
//	left-behind, goroutine-leak, close-error, helper-failed: as TestHistory's.
//
// Excused, in every rule but not-told: a process SIGSTOPped, and a restart of Redis, between
// the Lock call's start and what the rule judges. The longest gaps between holdings, each
// slot's acquisitions and its longest wait (less the long holds meanwhile) are reported. Short
// by default (20 s, about 30 s in all); DLOCK_SOAK=<duration> runs it that long;
// DLOCK_DISTANCE_LOGS=<dir> keeps the helpers' output, the register's log and the faults there.
func TestProcessesAtDistancesUnderFaults(t *testing.T) {
	dur := soak(t, 20*time.Second)
	r := &distRun{t: t, lease: distLease, dir: t.TempDir(), lockSrv: realServer(t), fenceSrv: realServer(t)}
	r.lockSrv.NeedReal(t)
	if !r.lockSrv.CanRestart() {
		t.Skip("needs a redis-server started by the test (REDIS_ADDR is set)")
	}
	if d := os.Getenv("DLOCK_DISTANCE_LOGS"); d != "" { // keep the helpers' output there
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		r.dir = d
	}
	r.fence = r.fenceSrv.Client()
	t.Cleanup(func() { _ = r.fence.Close() })
	r.admin = r.lockSrv.Client()
	t.Cleanup(func() { _ = r.admin.Close() })
	for i, d := range distDistances {
		p := netProxy(t, r.lockSrv.Addr)
		t.Cleanup(func() { p.HoldSubscribers(false) })
		p.SetLatency(d)
		jitter := max(d/2, 100*time.Microsecond)
		p.SetShaper(func(bool, []byte) time.Duration { return time.Duration(rand.Int64N(int64(jitter))) })
		r.proxies = append(r.proxies, p)
		s := &distSlot{distance: d}
		if i == distNoNotify {
			s.notify = "off"
		}
		r.slots = append(r.slots, s)
	}
	t.Cleanup(r.killAll)
	r.end = monoNow() + int64(dur)
	for slot := range r.slots {
		r.start(slot)
	}
	r.injectFaults()
	r.waitHelpers()
	r.checkLeftovers()
	r.analyse()
}

const (
	distLease      = time.Second
	distGoroutines = 2
	distNoNotify   = 2 // the slot whose process runs WithNotifications(false)
	distFamily     = 2 // goroutines on the read-write lock and the semaphore
	distPermits    = 2
	distLockWait   = 30 * time.Second
	// distWindowSlack: how late a helper may read the clock after its Lock returned (a
	// loaded machine, -race), taken from the half lease a holding surely holds.
	distWindowSlack = 100 * time.Millisecond
	distKey         = "DLOCK_DIST_k"
)

var distDistances = []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}

// distRecord is a line a distance helper writes: "hold" at the end of each holding, "fail" for
// a Lock that failed, "exit" last.
type distRecord struct {
	T    string `json:"t"`
	Kind string `json:"k,omitempty"` // k the mutex, r and w the read-write lock's sides, s a permit
	Proc string `json:"p"`
	G    int    `json:"g,omitempty"`

	CallStart int64  `json:"cs,omitempty"` // the Lock call began
	TAcq      int64  `json:"ta,omitempty"` // it returned
	Token     uint64 `json:"tok,omitempty"`
	In        bool   `json:"in,omitempty"` // the register took the token
	TEnter    int64  `json:"te,omitempty"` // the register's answer came
	Long      bool   `json:"long,omitempty"`
	Foreign   int64  `json:"fo,omitempty"`  // when a check or the exit found another holder
	TStale    int64  `json:"tst,omitempty"` // when the holding learnt from the register that it is stale
	TTold     int64  `json:"tt,omitempty"`  // when its owner context ended
	Cause     string `json:"c,omitempty"`   // with what: lost, or the cause
	Unlock    string `json:"u,omitempty"`   // Unlock's outcome: ok, lost, redis or the error
	TRel      int64  `json:"tr,omitempty"`
	Err       string `json:"err,omitempty"`

	CloseErr string `json:"close,omitempty"`
	Leak     string `json:"leak,omitempty"`
}

// The register (on the fence server): d:last the largest token taken, d:holder "<proc>|<token>"
// while a holding is in, d:ev the log of "enter|exit|refused|<proc>|<token>|<µs>".
var distEnter = redis.NewScript(`
local t = redis.call('time')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local last = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[2]) <= last then
    redis.call('rpush', KEYS[3], 'refused|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. now)
    return 0
end
redis.call('set', KEYS[1], ARGV[2])
redis.call('set', KEYS[2], ARGV[1] .. '|' .. ARGV[2])
redis.call('rpush', KEYS[3], 'enter|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. now)
return 1`)

// distExit: ARGV[3] "exit" takes the holding out (and logs it) if it is still the register's
// holder; "check" only asks. 1: it was the holder.
var distExit = redis.NewScript(`
local me = ARGV[1] .. '|' .. ARGV[2]
if redis.call('get', KEYS[2]) ~= me then return 0 end
if ARGV[3] == 'exit' then
    local t = redis.call('time')
    redis.call('del', KEYS[2])
    redis.call('rpush', KEYS[3], 'exit|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. t[1] .. string.format('%06d', tonumber(t[2])))
end
return 1`)

// distanceHelper: GOROUTINES goroutines take the mutex DIST/k until END, and FAMILY more take
// at random the read side (3 in 5) or the write side of the read-write lock DIST/rw, or a
// permit of the semaphore DIST/s of distPermits. Each mutex holding and each write holding
// writes its token to its register on FENCE_ADDR; one such holding in 30 is long (1.5
// leases, announced as long:<proc> on the register's server) and checks its register every
// 50 ms.
func distanceHelper(g *dlock.Generator, c *redis.Client) int {
	lease := envDuration("LEASE")
	end, _ := strconv.ParseInt(env("END"), 10, 64)
	proc := env("PROC")
	fence := redis.NewClient(&redis.Options{Addr: env("FENCE_ADDR")})
	var outMu sync.Mutex
	put := func(r *distRecord) {
		b, _ := json.Marshal(r)
		outMu.Lock()
		_, _ = os.Stdout.Write(append(b, '\n'))
		outMu.Unlock()
	}
	mutex, err := g.Gen("DIST", "k")
	var rw *dlock.RWLock
	var sem *dlock.Semaphore
	if err == nil {
		rw, err = g.GenRW("DIST", "rw")
	}
	if err == nil {
		sem, err = g.GenSemaphore("DIST", "s", distPermits)
	}
	if err != nil {
		put(&distRecord{T: "fail", Proc: proc, Err: err.Error()})
		return 2
	}
	var wg sync.WaitGroup
	for gi := 1; gi <= envInt("GOROUTINES")+envInt("FAMILY"); gi++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for monoNow() < end {
				kind, part := "k", dlock.Part(mutex)
				if gi > envInt("GOROUTINES") {
					switch r := rand.IntN(5); {
					case r < 3:
						kind, part = "r", rw.ReadSide()
					case r < 4:
						kind, part = "w", rw.WriteSide()
					default:
						kind, part = "s", sem.Permits(1)
					}
				}
				distHolding(part, kind, fence, proc, gi, lease, put)
			}
		}()
	}
	wg.Wait()
	exit := &distRecord{T: "exit", Proc: proc}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := g.Close(ctx); err != nil {
		exit.CloseErr = err.Error()
	}
	cancel()
	_ = fence.Close()
	_ = c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := goleak.Find()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			exit.Leak = err.Error()
			break
		}
	}
	put(exit)
	return 0
}

// distRegisters: the mutex's register and the write side's.
var distRegisters = map[string][]string{
	"k": {"d:last", "d:holder", "d:ev"},
	"w": {"w:last", "w:holder", "w:ev"},
}

func distHolding(l dlock.Part, kind string, fence *redis.Client, proc string, gi int, lease time.Duration, put func(*distRecord)) {
	bg := context.Background()
	rec := &distRecord{T: "hold", Kind: kind, Proc: proc, G: gi, CallStart: monoNow()}
	ctx, cancel := context.WithTimeout(bg, distLockWait)
	defer cancel()
	owned, err := l.Lock(ctx)
	rec.TAcq = monoNow()
	if err != nil {
		rec.T, rec.Err = "fail", err.Error()
		put(rec)
		time.Sleep(10 * time.Millisecond)
		return
	}
	rec.Token, _ = l.FencingToken(owned)
	tok := strconv.FormatUint(rec.Token, 10)
	hold := time.Duration(rand.IntN(2000)) * time.Microsecond
	stale := false
	if reg := distRegisters[kind]; reg != nil {
		in, err := distEnter.Run(bg, fence, reg, proc, tok).Int()
		rec.TEnter = monoNow()
		rec.In = err == nil && in == 1
		if err != nil {
			rec.Err = "register: " + err.Error()
		}
		stale = err == nil && in == 0
		if rec.In {
			if rand.IntN(30) == 0 {
				rec.Long, hold = true, lease*3/2
				fence.Set(bg, "long:"+proc, monoNow()+int64(hold), hold)
			}
			for until := time.Now().Add(hold); rec.Long && time.Now().Before(until) && owned.Err() == nil; time.Sleep(50 * time.Millisecond) {
				if n, err := distExit.Run(bg, fence, reg, proc, tok, "check").Int(); err == nil && n == 0 {
					rec.Foreign = monoNow()
					break
				}
			}
			if !rec.Long {
				time.Sleep(hold)
			}
			n, err := distExit.Run(bg, fence, reg, proc, tok, "exit").Int()
			if err == nil && n == 0 && rec.Foreign == 0 {
				rec.Foreign = monoNow()
			}
			stale = rec.Foreign != 0
		}
	} else {
		time.Sleep(hold)
	}
	if stale { // it must learn, from its owner context, that it lost the lock
		rec.TStale = monoNow()
		select {
		case <-owned.Done():
		case <-time.After(2*lease + time.Second):
		}
	}
	if owned.Err() != nil {
		rec.TTold, rec.Cause = monoNow(), fmt.Sprint(context.Cause(owned))
		if errors.Is(context.Cause(owned), dlock.ErrLockLost) {
			rec.Cause = "lost"
		}
	}
	rec.TRel = monoNow()
	var pe *dlock.RedisProcessError
	switch err := l.Unlock(owned); {
	case err == nil:
		rec.Unlock = "ok"
	case errors.Is(err, dlock.ErrLockLost):
		rec.Unlock = "lost"
	case errors.As(err, &pe):
		rec.Unlock = "redis"
	default:
		rec.Unlock = err.Error()
	}
	put(rec)
}

// distSlot is one place for a helper: its distance, its incarnations.
type distSlot struct {
	distance time.Duration
	notify   string // "off": WithNotifications(false)
	procs    []*distProc
}

type distProc struct {
	id      string
	slot    int
	cmd     *exec.Cmd
	out     string
	done    chan struct{}
	err     error
	started int64
	killed  bool
	hung    bool
}

// distFault is an injected fault, in monotonic ns and in the register's clock (µs).
type distFault struct {
	kind, proc           string
	start, end           int64
	startSrv, endSrv     int64
	detail               string
	stoppedPid, killedID string
}

type distRun struct {
	t                 *testing.T
	lease             time.Duration
	dir               string
	lockSrv, fenceSrv *redistest.Server
	fence, admin      *redis.Client
	proxies           []*faultproxy.Proxy
	slots             []*distSlot
	end               int64
	faults            []distFault
	left              []string
}

func (r *distRun) start(slot int) {
	s := r.slots[slot]
	id := fmt.Sprintf("%d.%d", slot, len(s.procs)+1)
	p := &distProc{id: id, slot: slot, done: make(chan struct{}), started: monoNow(),
		out: filepath.Join(r.dir, "p"+id+".out")}
	out, err := os.Create(p.out)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_RELIABILITY_HELPER=distance")
	for k, v := range map[string]string{
		"ADDR": r.proxies[slot].Addr(), "FENCE_ADDR": r.fenceSrv.Addr, "LEASE": r.lease.String(),
		"PROC": id, "END": strconv.FormatInt(r.end, 10), "GOROUTINES": strconv.Itoa(distGoroutines),
		"FAMILY": strconv.Itoa(distFamily), "NOTIFY": r.slots[slot].notify,
	} {
		cmd.Env = append(cmd.Env, "DLOCK_H_"+k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		r.t.Fatal(err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
}

func (r *distRun) current(slot int) *distProc { s := r.slots[slot]; return s.procs[len(s.procs)-1] }

func (r *distRun) killAll() {
	for _, s := range r.slots {
		for _, p := range s.procs {
			select {
			case <-p.done:
			default:
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	}
}

// byProcID returns the slot of the current helper named id ("slot.incarnation"), or -1.
func (r *distRun) byProcID(id string) int {
	for slot := range r.slots {
		if r.current(slot).id == id {
			return slot
		}
	}
	return -1
}

// byLocker returns the slot of the current helper whose process a locker or line entry
// (<ip>-<pid>-<nonce>-…) names, or -1.
func (r *distRun) byLocker(locker string) int {
	f := strings.Split(locker, "-")
	if len(f) < 3 {
		return -1
	}
	pid, _ := strconv.Atoi(f[1])
	for slot := range r.slots {
		if r.current(slot).cmd.Process.Pid == pid {
			return slot
		}
	}
	return -1
}

// srvNow reads the register's clock in µs.
func (r *distRun) srvNow() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	tm, err := r.fence.Time(ctx).Result()
	if err != nil {
		return 0
	}
	return tm.UnixMicro()
}

func (r *distRun) injectFaults() {
	kinds := []string{"stop-holder", "stop-granted", "kill-holder", "kill-first", "kill-granted", "cut-reply", "cut-replies", "cut-sub", "deaf-sub", "deaf-all", "restart"}
	quiet := int64(4 * r.lease)
	var order []string
	for {
		gap := int64(randDuration(300*time.Millisecond, 800*time.Millisecond))
		if monoNow()+gap+int64(4*time.Second) > r.end-quiet { // (no fault lasts longer than 4 s)
			return
		}
		sleepUntil(monoNow() + gap)
		if len(order) == 0 {
			order = slices.Clone(kinds)
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		kind := order[0]
		order = order[1:]
		if !r.fault(kind) {
			return
		}
	}
}

// holderSlot returns the slot of a helper in a long hold, else of the register's holder, else
// -1.
func (r *distRun) holderSlot() int {
	ctx := context.Background()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		keys, _ := r.fence.Keys(ctx, "long:*").Result()
		for _, k := range keys {
			if until, err := r.fence.Get(ctx, k).Int64(); err == nil && until-monoNow() > int64(r.lease/2) {
				if slot := r.byProcID(strings.TrimPrefix(k, "long:")); slot >= 0 {
					return slot
				}
			}
		}
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		h, _ := r.fence.Get(ctx, "d:holder").Result()
		id, _, _ := strings.Cut(h, "|")
		if slot := r.byProcID(id); slot >= 0 {
			return slot
		}
	}
	return -1
}

// firstSlot returns the slot of the first process in the key's line in Redis, or -1.
func (r *distRun) firstSlot() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for range 20 {
		first, _ := r.admin.ZRange(ctx, "{"+distKey+"}:line", 0, 0).Result()
		if len(first) == 1 {
			return r.byLocker(first[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

func (r *distRun) kill(slot int, f *distFault) {
	p := r.current(slot)
	f.proc = p.id
	p.killed = true
	_ = p.cmd.Process.Kill()
	<-p.done
	r.start(slot)
	f.detail += " replaced by " + r.current(slot).id
}

// nextGranted waits up to 2 s for a grant's message ("G|…|…|locker") to a process of the run,
// and returns its slot and the locker granted, or -1 if none came.
func (r *distRun) nextGranted() (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ps := r.admin.PSubscribe(ctx, "{"+distKey+"}:released:*")
	defer ps.Close()
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			return -1, ""
		}
		parts := strings.Split(m.Payload, "|")
		if parts[0] != "G" || len(parts) < 4 {
			continue
		}
		if slot := r.byLocker(parts[3]); slot >= 0 {
			return slot, parts[3]
		}
	}
}

func (r *distRun) fault(kind string) bool {
	f := distFault{kind: kind, start: monoNow(), startSrv: r.srvNow()}
	defer func() {
		f.end, f.endSrv = monoNow(), r.srvNow()
		r.faults = append(r.faults, f)
	}()
	switch kind {
	case "stop-holder":
		slot := r.holderSlot()
		if slot < 0 {
			f.detail = "no holder"
			return true
		}
		p := r.current(slot)
		f.proc = p.id
		d := randDuration(r.lease*3/2, r.lease*5/2)
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(d)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		f.detail = d.Round(time.Millisecond).String()
	case "stop-granted":
		slot, locker := r.nextGranted()
		if slot < 0 {
			f.detail = "no grant heard"
			return true
		}
		p := r.current(slot)
		d := randDuration(r.lease/2, r.lease*2)
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(d)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		f.proc, f.detail = p.id, fmt.Sprintf("granted %s, stopped %v", locker, d.Round(time.Millisecond))
	case "kill-holder":
		if slot := r.holderSlot(); slot >= 0 {
			r.kill(slot, &f)
		}
	case "kill-first":
		if slot := r.firstSlot(); slot >= 0 {
			r.kill(slot, &f)
		}
	case "kill-granted":
		slot, locker := r.nextGranted()
		if slot < 0 {
			f.detail = "no grant heard"
			return true
		}
		f.detail = "granted " + locker
		r.kill(slot, &f)
	case "cut-reply":
		slot := rand.IntN(len(r.slots))
		f.proc = r.current(slot).id
		r.proxies[slot].CutNextReply()
		time.Sleep(100 * time.Millisecond)
	case "cut-replies":
		slot := rand.IntN(len(r.slots))
		f.proc = r.current(slot).id
		n := 5 + rand.IntN(6)
		for range n {
			r.proxies[slot].CutNextReply()
			time.Sleep(randDuration(5*time.Millisecond, 30*time.Millisecond))
		}
		f.detail = fmt.Sprintf("%d cuts", n)
	case "deaf-all":
		d := randDuration(2*time.Second, 4*time.Second)
		for _, p := range r.proxies {
			p.HoldSubscribers(true)
		}
		time.Sleep(d)
		for _, p := range r.proxies {
			p.HoldSubscribers(false)
		}
		f.detail = d.Round(time.Millisecond).String()
	case "cut-sub":
		slot := r.firstSlot()
		if slot < 0 {
			slot = rand.IntN(len(r.slots))
		}
		f.proc = r.current(slot).id
		f.detail = fmt.Sprintf("%d reset", r.proxies[slot].ResetSubscribers())
	case "deaf-sub":
		slot := r.firstSlot()
		if slot < 0 {
			slot = rand.IntN(len(r.slots))
		}
		f.proc = r.current(slot).id
		d := randDuration(time.Second, 3*time.Second)
		r.proxies[slot].HoldSubscribers(true)
		time.Sleep(d)
		r.proxies[slot].HoldSubscribers(false)
		f.detail = d.Round(time.Millisecond).String()
	case "restart":
		down := randDuration(0, r.lease/2)
		r.lockSrv.Kill()
		time.Sleep(down)
		if err := r.lockSrv.Restart(); err != nil {
			r.t.Errorf("restart of the lock's redis-server: %v", err)
			return false
		}
		f.detail = "down " + down.Round(time.Millisecond).String()
	}
	return true
}

func (r *distRun) waitHelpers() {
	deadline := time.Now().Add(time.Duration(r.end-monoNow()) + distLockWait + 15*time.Second)
	for slot := range r.slots {
		p := r.current(slot)
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			p.hung = true
			_ = p.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	}
}

// checkLeftovers lists the keys left in the lock's Redis 3 leases after every helper exited
// that allowedLater does not allow.
func (r *distRun) checkLeftovers() {
	time.Sleep(3 * r.lease)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := r.admin.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if ttl := r.admin.PTTL(ctx, k).Val(); !allowedLater(k, ttl, r.lease) {
			r.left = append(r.left, k+" (TTL "+ttl.String()+")")
		}
	}
	if err := iter.Err(); err != nil {
		r.t.Errorf("SCAN of the lock's Redis: %v", err)
	}
}

// during returns the faults of kind that overlap [from, to] (monotonic ns), of proc if it is
// not "".
func (r *distRun) during(kind, proc string, from, to int64) []distFault {
	var out []distFault
	for _, f := range r.faults {
		if (f.kind == kind || kind == "stop-holder" && f.kind == "stop-granted") && (proc == "" || f.proc == proc) && f.start <= to && f.end >= from {
			out = append(out, f)
		}
	}
	return out
}

func (r *distRun) analyse() {
	t := r.t
	viol := map[string][]string{}
	violate := func(kind, format string, args ...any) {
		viol[kind] = append(viol[kind], fmt.Sprintf(format, args...))
	}
	rel := r.rel
	half := int64(r.lease / 2)
	var holds []distHold
	for slot, s := range r.slots {
		for _, p := range s.procs {
			b, err := os.ReadFile(p.out)
			if err != nil {
				t.Fatal(err)
			}
			exited := false
			for _, line := range strings.Split(string(b), "\n") {
				if !strings.HasPrefix(line, "{") {
					continue
				}
				var rec distRecord
				if json.Unmarshal([]byte(line), &rec) != nil {
					continue
				}
				switch rec.T {
				case "exit":
					exited = true
					if rec.CloseErr != "" {
						violate("close-error", "%s: %s", p.id, rec.CloseErr)
					}
					if rec.Leak != "" {
						violate("goroutine-leak", "%s: %s", p.id, rec.Leak)
					}
				case "fail":
					if len(r.during("stop-holder", p.id, rec.CallStart, rec.TAcq)) == 0 {
						violate("lock-failed", "%s g%d: Lock from %s to %s: %s", p.id, rec.G, rel(rec.CallStart), rel(rec.TAcq), rec.Err)
					}
				case "hold":
					holds = append(holds, distHold{distRecord: rec, slot: slot})
				}
			}
			if !exited && !p.killed {
				violate("helper-failed", "%s: no exit line (%v); last output: %s", p.id, p.err, tail(p.out, 5))
			} else if !p.killed && p.err != nil {
				violate("helper-failed", "%s: %v; last output: %s", p.id, p.err, tail(p.out, 5))
			}
			if p.hung {
				violate("hang", "%s did not end", p.id)
			}
		}
	}
	acq := make([]int, len(r.slots))                   // of the mutex
	longestWait := make([]time.Duration, len(r.slots)) // of the mutex, less others' long holds
	waitEx := make([]string, len(r.slots))
	perKind := map[string]int{}
	var stale, told int
	var longs [][2]int64
	for _, h := range holds {
		if h.Long && h.Kind == "k" {
			longs = append(longs, [2]int64{h.TAcq, h.TRel})
		}
	}
	for _, h := range holds {
		perKind[h.Kind]++
		// (a stop between the return of Lock and the reading of the clock makes TAcq late)
		restarted := len(r.during("restart", "", h.CallStart, max(h.TEnter, h.Foreign))) > 0 ||
			len(r.during("stop-holder", h.Proc, h.CallStart, max(h.TEnter, h.Foreign))) > 0
		desc := r.describe(h.distRecord)
		if h.Kind == "k" {
			acq[h.slot]++
			w := time.Duration(h.TAcq - h.CallStart)
			for _, l := range longs {
				if o := min(l[1], h.TAcq) - max(l[0], h.CallStart); o > 0 {
					w -= time.Duration(o)
				}
			}
			if w > longestWait[h.slot] {
				longestWait[h.slot], waitEx[h.slot] = w, desc
			}
		}
		if distRegisters[h.Kind] != nil {
			if !h.In && h.Err == "" && h.TEnter-h.TAcq < half && !restarted {
				violate("refused-owner", "%s", desc)
			}
			if h.Foreign != 0 && h.Foreign-h.TAcq < half && !restarted {
				violate("two-owners", "%s", desc)
			}
		}
		if h.TStale != 0 {
			stale++
			stopped := len(r.during("stop-holder", h.Proc, h.TAcq, h.TRel)) > 0
			switch {
			case h.Cause == "lost" && (h.Unlock == "lost" || h.Unlock == "redis"):
				told++
			case stopped:
			default:
				violate("not-told", "%s", desc)
			}
		}
	}
	r.checkWindows(holds, violate)
	ctx := context.Background()
	evs, err := r.fence.LRange(ctx, "d:ev", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Starvation: turns by slot, a turn being a run of the register's entries by one process.
	turns := make([]int, len(r.slots))
	prevProc := ""
	for _, e := range evs {
		f := strings.Split(e, "|")
		if len(f) != 4 || f[0] != "enter" || f[1] == prevProc {
			continue
		}
		prevProc = f[1]
		if s, _, ok := strings.Cut(f[1], "."); ok {
			if slot, err := strconv.Atoi(s); err == nil && slot >= 0 && slot < len(turns) {
				turns[slot]++
			}
		}
	}
	total := 0
	for _, n := range turns {
		total += n
	}
	mean := float64(total) / float64(len(turns))
	for slot, n := range turns {
		if float64(n) < mean/3 {
			violate("starved", "slot %d (%v away) had %d turns (%d acquisitions), the mean %.1f", slot, r.slots[slot].distance, n, acq[slot], mean)
		}
	}
	// Gaps in the register's log.
	_ = os.WriteFile(filepath.Join(r.dir, "register.log"), []byte(strings.Join(evs, "\n")+"\n"), 0o644)
	type gap struct {
		d          time.Duration
		from, to   int64
		after, why string
	}
	var gaps []gap
	var last int64
	lastWhat := ""
	for _, e := range evs {
		f := strings.Split(e, "|")
		if len(f) != 4 {
			continue
		}
		at, _ := strconv.ParseInt(f[3], 10, 64)
		if f[0] == "enter" && last != 0 {
			d := time.Duration(at-last) * time.Microsecond
			for _, ft := range r.faults { // Redis down is no blocked key
				if ft.kind == "restart" && ft.startSrv < at && ft.endSrv > last {
					d -= time.Duration(min(ft.endSrv, at)-max(ft.startSrv, last)) * time.Microsecond
				}
			}
			gaps = append(gaps, gap{d: d, from: last, to: at, after: lastWhat, why: r.faultsBetweenSrv(last, at)})
		}
		if f[0] == "enter" || f[0] == "exit" {
			last, lastWhat = at, f[0]+" "+f[1]
		}
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i].d > gaps[j].d })
	bound := 2*r.lease + 2*time.Second
	for _, g := range gaps {
		if g.d > bound {
			violate("blocked", "no entry for %v after %s; faults: %s", g.d.Round(time.Millisecond), g.after, g.why)
		}
	}
	var top []string
	for _, g := range gaps[:min(5, len(gaps))] {
		top = append(top, fmt.Sprintf("%v after %s [%s]", g.d.Round(time.Millisecond), g.after, g.why))
	}
	if len(r.left) > 0 {
		violate("left-behind", "%s", strings.Join(r.left, ", "))
	}
	var fs []string
	for _, f := range r.faults {
		fs = append(fs, fmt.Sprintf("%s %s %s at %s", f.kind, f.proc, f.detail, rel(f.start)))
	}
	var flog []string
	for _, f := range r.faults {
		flog = append(flog, fmt.Sprintf("%d %d %s %s %s", f.startSrv, f.endSrv, f.kind, f.proc, f.detail))
	}
	_ = os.WriteFile(filepath.Join(r.dir, "faults.log"), []byte(strings.Join(flog, "\n")+"\n"), 0o644)
	t.Logf("holdings by kind %v, %d found stale by a register and %d of them told; of the mutex by slot (0, 1, 5, 20 ms away): %v acquisitions in %v turns, longest waits (less others' long holds) %v", perKind, stale, told, acq, turns, longestWait)
	t.Logf("the longest waits: %s", strings.Join(waitEx, "; "))
	t.Logf("longest gaps between holdings: %s", strings.Join(top, "; "))
	t.Logf("faults: %s", strings.Join(fs, "; "))
	kinds := slices.Sorted(func(yield func(string) bool) {
		for k := range viol {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range kinds {
		t.Errorf("%s: %d, e.g. %s", k, len(viol[k]), firstN(viol[k], histExamples))
	}
}

// distHold is a holding a helper reported, and its helper's slot.
type distHold struct {
	distRecord
	slot int
}

func (r *distRun) rel(ns int64) string {
	return time.Duration(ns - r.faults0()).Round(time.Millisecond).String()
}

func (r *distRun) describe(h distRecord) string {
	d := fmt.Sprintf("%s g%d %s token %d: Lock %s–%s, register %s, foreign %s, told %s (%s), unlock %s at %s",
		h.Proc, h.G, h.Kind, h.Token, r.rel(h.CallStart), r.rel(h.TAcq), relOr(r.rel, h.TEnter), relOr(r.rel, h.Foreign),
		relOr(r.rel, h.TTold), h.Cause, h.Unlock, r.rel(h.TRel))
	if h.Err != "" {
		d += " (" + h.Err + ")"
	}
	return d
}

// checkWindows: a holding surely holds from its Lock's return for half a lease (Lock never
// returns with less left), less distWindowSlack for the reading of the clock, or until its
// Unlock. Two holdings of the mutex, or of the write side and either side, whose windows
// meet, or more than distPermits holdings of the semaphore at once, are two owners (unless
// Redis restarted meanwhile: it came back empty, or either was SIGSTOPped: its clock reading
// may be late).
func (r *distRun) checkWindows(holds []distHold, violate func(kind, format string, args ...any)) {
	window := func(h distHold) (int64, int64) {
		return h.TAcq, min(h.TRel, h.TAcq+int64(r.lease/2-distWindowSlack))
	}
	conflict := func(a, b string) bool {
		return a == "k" && b == "k" || (a == "w" || b == "w") && (a == "w" || a == "r") && (b == "w" || b == "r")
	}
	sorted := slices.Clone(holds)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].TAcq < sorted[j].TAcq })
	for i, a := range sorted {
		a0, a1 := window(a)
		var sems []distHold
		for _, b := range sorted[i+1:] {
			b0, b1 := window(b)
			if b0 >= a1 {
				break
			}
			restarted := len(r.during("restart", "", min(a.CallStart, b.CallStart), max(a1, b1))) > 0
			stopped := len(r.during("stop-holder", a.Proc, a.CallStart, a1)) > 0 ||
				len(r.during("stop-holder", b.Proc, b.CallStart, b1)) > 0
			if restarted || stopped {
				continue
			}
			if conflict(a.Kind, b.Kind) {
				violate("overlap", "%s; and %s", r.describe(a.distRecord), r.describe(b.distRecord))
			}
			if a.Kind == "s" && b.Kind == "s" {
				sems = append(sems, b)
			}
		}
		_ = a0
		// Permits: the holdings that began within a's window and whose windows meet each
		// other at one instant: count those alive at the latest start among them.
		for j := range sems {
			at := sems[j].TAcq
			n := 1
			for _, c := range sems[:j+1] {
				if _, c1 := window(c); c1 > at {
					n++
				}
			}
			if n > distPermits {
				violate("overlap", "%d permits held at %s: %s and %d others", n, r.rel(at), r.describe(a.distRecord), n-1)
				break
			}
		}
	}
}

func relOr(rel func(int64) string, ns int64) string {
	if ns == 0 {
		return "-"
	}
	return rel(ns)
}

// faults0 is the time the first helper started.
func (r *distRun) faults0() int64 { return r.slots[0].procs[0].started }

// faultsBetweenSrv names the faults under way between from and to (the register's µs).
func (r *distRun) faultsBetweenSrv(from, to int64) string {
	var out []string
	for _, f := range r.faults {
		if f.startSrv <= to && f.endSrv >= from-int64(2*r.lease/time.Microsecond) {
			out = append(out, f.kind+" "+f.proc+" "+f.detail)
		}
	}
	return strings.Join(out, ", ")
}
