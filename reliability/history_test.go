package reliability_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/internal/redistest"
)

// TestHistory is a randomized, multi-process history checker. P helper OS processes (the test
// binary in mode "history", history_helper_test.go) × G goroutines lock K keys at random
// (Lock with a short deadline, Lock with a long one, TryLock; sometimes a re-entry), hold for
// a random time (mostly 0–5 ms, 5 % of holds 0.5–2.5 leases; one hold in six calls Extend with
// a lease between half and three times the configured one), write their fencing token to a
// fence store (a second redis-server, never faulted) during the hold, and unlock. One
// iteration in 200 plays an operator instead: State, then ForceRelease of the holder it
// showed. Every helper's client delivers 3 % of the library's writes a second time, 0 to half
// a lease later (as go-redis does after a read timeout, or a network that delivers late). Every call
// and every holding is logged with CLOCK_MONOTONIC times, which all processes share. Meanwhile
// the test injects faults, one at a time, at random intervals:
//
//	restart:   the lock's redis-server killed and started again, empty, on the same port;
//	stop:      a helper SIGSTOPped for 1.5–2.5 leases, then SIGCONT;
//	kill:      a helper killed with kill -9, and a new one started in its place;
//	latency:   20 ms – lease/2 added each way on one helper's link for 0.5–1.5 s;
//	blackhole: one helper's link black-holed for 1.5–3 leases;
//	reset:     one helper's connections reset 1–5 times, 20–60 ms apart.
//
// Each helper talks to the lock's Redis through a fault proxy of its own, so a network fault
// hits one process; the helpers use go-redis's default client options (ReadTimeout 3 s,
// ContextTimeoutEnabled off, 3 retries), as most users do. Three in four stop, latency,
// black-hole and reset faults are aimed at a process in the middle of a long hold (helpers
// announce their long holds on the fence store's server), because a lost lease is what they
// test; the others hit whatever the process is doing. No fault is injected in the last few
// leases, so that the end is clean. Then the merged log is checked against the rules
// below; the test fails on any violation and prints the first examples of each kind.
//
// The helpers of odd slots run with WithHoldOver (a final Unlock whose goroutine comes back at
// once keeps the key for it; the process yields to the line at the hand-off limit), and half
// of their goroutines' mutex iterations take the key they took last again at once, so that
// hold-overs happen: about 130 in the 30-second run.
//
// One iteration in seven takes a side of a read-write lock instead ("r" keys: 4 reads in 5),
// and one in ten a permit of a semaphore of histSemPermits ("s" keys); they make no Extend and
// no ForceRelease, and only writers make fenced writes (the readers that share a holding share
// its token). For
// them rule (1) judges a writer beside anyone (readers share), and a semaphore's holding
// beside histSemPermits others at once (permits); rule (2) across processes, and between two
// writers of one process.

// Definitions. A holding H is one successful Lock/TryLock up to its Unlock. CallStart is when
// the acquiring call began, TAcq when it returned (read right after), TRel when Unlock was
// called (read right before). Its span is [CallStart, TRel]. It was told of a loss if its
// owner context's cause matched ErrLockLost (ToldCtx, at TLost: when context.AfterFunc saw it
// end) or its Unlock returned an error matching ErrLockLost (ToldUnlock). Its belief interval
// is [TAcq, E]: E = min(TLost, TRel) − noticeSlack if the owner context had ended with
// ErrLockLost by TRel, else E = TRel. That is, a holding believes it holds the lock until it
// is told, through its context, that it lost it, or until it unlocks; being told only by
// Unlock does not shorten it, since the holder acted as owner until then. noticeSlack (100 ms)
// is there because the lease watchdog has no margin (it ends the owner context when
// sent + lease has passed, and the key expires in Redis at arrival + lease, so another
// process may acquire at that same instant) and TLost is read in a goroutine that may run
// late on a loaded machine under -race; the measured lateness is reported. TAcq is read after
// the call returned and TRel before Unlock is called, so every error in those readings hides
// an overlap rather than inventing one.
//
// Excuses: an overlap with a holding whose tenure an operator's ForceRelease may have removed
// (a force that removed a locker of the holding's process, ended after the holding's call
// began and began before the overlap: the holder — and the goroutines its process passes the
// lock to, which may never be told — acts as owner until the tenure's next renewal or
// release, as the contract says); a holding of a process killed
// (kill -9) before it logged its release (its "begin"
// line has no "op" line); a holding whose process was SIGSTOPped during its span, the stop
// having begun no later than the overlap or write in question; the earlier of two holdings,
// told of its loss by its owner context, whose process stalled (ran nothing for histStallMin
// or more: a loaded machine's scheduler or a GC pause, logged by the helper's watchStalls)
// from no later than the overlap's start into the noticeSlack before it, for at least as long
// as the overlap lasted — its lease watchdog, stalled with the rest, told it late (the overlap
// a SIGSTOP makes, made by the machine); a holding that straddles a
// restart of the lock's Redis (the restart began during its span and no later than the
// overlap), provided it was told of the loss (ToldCtx or ToldUnlock) or released within a
// lease of the restart (or what remains of a lease an Extend set just before it, see
// untoldFor): the restart wiped its key, and its process learns of it at its tenure's next
// renewal (or release; a holding that passed the lock on within its process before then is
// not told); a holding passed the lock within its process under a tenure that a restart wiped
// (the process held the key when the restart began), acquired and overlapping within that
// bound.
//
// Rules:
//
//	(1) overlap: two holdings of one key whose belief intervals intersect, neither excused.
//	    restart-untold: a holding that acquired before a restart (TAcq < the kill), was never
//	    told of a loss, released later than that bound after the restart, and overlaps a holding
//	    that acquired after the kill; its process was
//	    not killed. (A holding whose acquiring call spans the kill and that returned after it
//	    may hold a key of either server: it is excused, and counted as ambiguous.)
//	(2) token-order: for holdings A, B of one key with A.TAcq < B.CallStart (A's token was
//	    handed out before B's call began), A's token < B's; token-repeated: two holdings of
//	    one key with the same token. Strict, across restarts too: tokens are
//	    max(counter + 1, server clock in µs) — but for a holding passed within its process
//	    (or lent a shared holding) under a tenure that an operator removed or a restart wiped,
//	    before that tenure's next renewal could tell the process: its token comes from the old
//	    tenure's block (forcedBetween, passedUnderRestart), and the fence refuses its writes.
//	    (Ordering by TAcq alone would be wrong: a holder
//	    SIGSTOPped inside Lock returns after a later holder.) no-token: FencingToken said the
//	    owner context of a successful Lock did not own the lock (unless the owner was told of
//	    a loss as it was taken: an operator's removal that landed as the reply came; or its
//	    process was stopped as Lock returned, and told of the loss after).
//	(3) fence-accepted-stale: the fence store accepted a token not above one it had accepted
//	    in a write that ended before this one began (the script rules it out: this checks
//	    the store and the log); stale-write-while-owner: a holding's write was refused (a
//	    newer token was already stored) surely while the holding held the lock: the write
//	    returned (so was refused) before E and before CallStart + lease/2 (Lock never returns
//	    a lock with less than half its lease left, counted from a request sent after
//	    CallStart), not excused: a witness of two owners. A write refused later may have
//	    waited on a loaded machine until the lease ran out: fencing doing its job. An overlap
//	    where both holdings' writes were accepted (the fence did not catch it) is marked in
//	    the example.
//	(4) slow-call: a Lock or TryLock with deadline d that returned after d + callSlack; a
//	    re-entry after callSlack; an Unlock after lease + callSlack (its Redis call is bounded
//	    by the lease); calls of a process SIGSTOPped during the call are excused, and so is a
//	    call whose process logged stalls (it ran nothing: an overloaded machine) after the
//	    call's deadline (its start plus the lease for an Unlock, its start for a re-entry or an
//	    inner Unlock) that add up to at least the time it took beyond the bound: a stall
//	    before the deadline excuses nothing.
//	    lock-error, trylock-error, reenter-error, unlock-error: an outcome the API does not
//	    allow (Lock: only success, or ErrNotObtained + DeadlineExceeded; TryLock: success,
//	    busy, the deadline or a *RedisProcessError; re-entry: success or ErrLockLost; Unlock:
//	    nil, ErrLockLost or a *RedisProcessError; Extend: success, ErrLockLost or a
//	    *RedisProcessError, its deadline included (a reply after the lease ran out); an operator's ForceRelease: success, a *RedisProcessError or its
//	    deadline). owner-ended-early: the owner context ended
//	    before Unlock with a cause other than ErrLockLost (it must not inherit the Lock
//	    context's deadline). unlock-not-lost: the owner context ended with ErrLockLost but
//	    Unlock did not say so. redis-error-without-fault: a call failed because Redis did (a
//	    *RedisProcessError in its chain, a Lock's last attempt included, whose cause is not the
//	    call's own deadline running out first on a loaded machine) although no restart
//	    and no fault aimed at its process was under way from two leases before the call to
//	    its end, nor — for an answer that came too late — a stall of its process, or of the
//	    way to Redis (this process's proxies, redis-server: watchPath), during the call.
//	    no-progress: a helper that ran 5 s or more without acquiring once. hang: a
//	    helper still running endSlack (25 s) after the end (it gets SIGQUIT, so its goroutines
//	    are dumped, then SIGKILL); helper-failed: a helper that exited with an error or without
//	    its exit line; close-error: its Generator's Close failed.
//	(5) left-behind: 3 leases after every helper closed its generator and exited, a key is in
//	    the lock's Redis that allowedLater does not allow (fencing counters with a TTL, which
//	    by design may outlive the lease, and settled and yield-check marks about to expire);
//	    goroutine-leak: a helper's goleak.Find (after Close, retried for 5 s) found one.
//	    What was left right after the exit (lock keys and line entries expire with the lease)
//	    is reported, not failed.
//
// Reported, not failed: long Lock calls that timed out while no holding of their key was
// logged during the whole call and no fault was under way (a key blocked with nobody holding
// it); loss notices that came after another holding had acquired, and by how much.
//
// callSlack (2 s) is far above the overrun measured (a Lock abandons its attempt at its
// deadline even with the default client), so only a hang, not a slow machine, trips it; the
// measured worst overruns are reported.
//
// Short by default (30 s of workload; about 35 s in all with -race); DLOCK_SOAK=<duration> runs the
// workload that long; DLOCK_HISTORY_LOGS=<dir> keeps the helpers' logs (JSON lines) there.
func TestHistory(t *testing.T) {
	dur := soak(t, 30*time.Second)
	r := &histRun{
		t: t, lease: histLease, procs: histProcs, goroutines: histGoroutines, keys: histKeys,
		dir: t.TempDir(), lockSrv: realServer(t), fenceSrv: realServer(t),
	}
	if d := os.Getenv("DLOCK_HISTORY_LOGS"); d != "" { // keep the logs there
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		r.dir = d
	}
	r.lockSrv.NeedReal(t)
	if !r.lockSrv.CanRestart() {
		t.Skip("needs a redis-server started by the test (REDIS_ADDR is set)")
	}
	for range r.procs {
		r.proxies = append(r.proxies, netProxy(t, r.lockSrv.Addr))
	}
	r.fence = r.fenceSrv.Client()
	t.Cleanup(func() { _ = r.fence.Close() })
	t.Cleanup(r.killAll)
	r.t0 = monoNow()
	r.end = r.t0 + int64(dur)
	r.current = make([]*histProc, r.procs)
	r.incarnations = make([]int, r.procs)
	stopPath := r.watchPath()
	for slot := range r.procs {
		r.start(slot)
	}
	r.injectFaults()
	r.waitHelpers()
	stopPath()
	r.checkLeftovers()
	r.analyse()
	r.report()
}

const (
	histProcs, histGoroutines, histKeys = 4, 3, 4
	histLease                           = 400 * time.Millisecond
	histCallSlack                       = 2 * time.Second
	histNoticeSlack                     = 100 * time.Millisecond
	histStallTick                       = 5 * time.Millisecond
	histStallMin                        = 50 * time.Millisecond // a helper that ran nothing this long stalled (see watchStalls)
	histEndSlack                        = 25 * time.Second
	histExamples                        = 3
)

// histProc is one helper process (one incarnation of a slot).
type histProc struct {
	id      string // slot.incarnation
	slot    int
	cmd     *exec.Cmd
	log     string
	out     string // its stdout and stderr
	done    chan struct{}
	err     error // Wait's, once done is closed
	started int64 // when it was started
	killed  int64 // when a kill fault began, or 0
	hung    bool
}

// histFault is one injected fault: Start just before it began, End just after it ended.
type histFault struct {
	Kind       string
	Proc       string // the helper it hit ("" for a restart)
	Start, End int64
	Detail     string
}

type histRun struct {
	t                       *testing.T
	lease                   time.Duration
	procs, goroutines, keys int
	dir                     string
	lockSrv, fenceSrv       *redistest.Server
	fence                   *redis.Client // to the fence store's server, for the hold announcements
	proxies                 []*faultproxy.Proxy
	t0, end                 int64

	all          []*histProc
	current      []*histProc // by slot
	incarnations []int
	faults       []histFault
	stalls       map[string][]histFault // by helper: the stalls it logged (see watchStalls)
	pathStalls   []histFault            // stalls of the way to the lock's Redis (see watchPath)

	// Leftovers in the lock's Redis: right after the helpers exited, and 3 leases later.
	leftNow, leftLater []string
	leftBad            []string // of leftLater, the keys rule (5) does not allow
	leftChecked        bool

	// Analysis.
	stats     histStats
	viol      map[string][]string       // kind -> descriptions
	forces    map[string][]histForce    // by key: ForceRelease calls that removed a holder
	byProcKey map[string][]*histHolding // by "proc key"
	restarts  []histFault               // Redis's restarts (it came back empty)
}

// histForce is an operator's ForceRelease that removed a holder: the call, and the helper
// whose locker it removed.
type histForce struct {
	histCall
	victim string
}

type histStats struct {
	iters, acquisitions, unfinished, long int
	toldCtx, toldUnlock                   int
	calls                                 map[string]map[string]int // kind -> outcome -> n
	overlapsTold                          int                       // full intervals overlapped, belief intervals did not
	excused                               map[string]int
	bothWritesAccepted                    int
	writes, writesRefused, writesStale    int
	maxLateNotice                         time.Duration
	lateNotices                           int // notices that came after another holding acquired
	maxOverrun                            map[string]time.Duration
	slowStalled                           int // slow calls whose overrun their process's stalls explain
	leaks                                 int
	blocked                               int
	maxBlocked                            time.Duration
	blockedEx                             []string
	badLines                              int
	perKey                                map[string]int
	forces, forced, copies                int // operators' ForceRelease calls, those that removed a holder; writes sent twice
	stalls                                int // stalls the helpers logged, and the longest
	maxStall                              time.Duration
}

// start starts a helper in slot.
func (r *histRun) start(slot int) {
	t := r.t
	r.incarnations[slot]++
	id := fmt.Sprintf("%d.%d", slot, r.incarnations[slot])
	p := &histProc{id: id, slot: slot, done: make(chan struct{}), started: monoNow(),
		log: filepath.Join(r.dir, "p"+id+".jsonl"), out: filepath.Join(r.dir, "p"+id+".out")}
	out, err := os.Create(p.out)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_RELIABILITY_HELPER=history")
	for k, v := range map[string]string{
		"ADDR": r.proxies[slot].Addr(), "FENCE_ADDR": r.fenceSrv.Addr, "LEASE": r.lease.String(),
		"PROC": id, "LOG": p.log, "END": strconv.FormatInt(r.end, 10),
		"GOROUTINES": strconv.Itoa(r.goroutines), "KEYS": strconv.Itoa(r.keys),
		"HOLDOVER": strconv.FormatBool(slot%2 == 1),
	} {
		cmd.Env = append(cmd.Env, "DLOCK_H_"+k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatal(err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	r.all = append(r.all, p)
	r.current[slot] = p
}

// killAll ends every helper still running (when the test ends early) and waits for it.
func (r *histRun) killAll() {
	for _, p := range r.all {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func sleepUntil(ns int64) {
	if d := time.Duration(ns - monoNow()); d > 0 {
		time.Sleep(d)
	}
}

// injectFaults injects faults one at a time, each kind in turn in a random order, with random
// gaps, until a few leases before the end.
func (r *histRun) injectFaults() {
	quiet := int64(max(4*r.lease, 2*time.Second))
	longest := int64(2 * time.Second) // no fault lasts longer
	kinds := []string{"restart", "stop", "kill", "latency", "blackhole", "reset"}
	var order []string
	for {
		gap := int64(randDuration(500*time.Millisecond, 1500*time.Millisecond))
		if monoNow()+gap+longest > r.end-quiet {
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

// fault injects one fault of kind and records it; false stops the injection.
func (r *histRun) fault(kind string) bool {
	slot := rand.IntN(r.procs)
	if kind != "restart" && kind != "kill" && rand.IntN(4) != 0 {
		slot = r.holder(slot)
	}
	p, px := r.current[slot], r.proxies[slot]
	f := histFault{Kind: kind, Proc: p.id}
	switch kind {
	case "restart":
		f.Proc = ""
		down := randDuration(0, r.lease*3/4)
		f.Start = monoNow()
		r.lockSrv.Kill()
		time.Sleep(down)
		err := r.lockSrv.Restart()
		f.End = monoNow()
		f.Detail = "down " + down.Round(time.Millisecond).String()
		if err != nil {
			r.faults = append(r.faults, f)
			r.t.Errorf("restart of the lock's redis-server: %v", err)
			return false
		}
	case "stop":
		d := randDuration(r.lease*3/2, r.lease*5/2)
		f.Start = monoNow()
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(d)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		f.End = monoNow()
		f.Detail = d.Round(time.Millisecond).String()
	case "kill":
		f.Start = monoNow()
		p.killed = f.Start
		_ = p.cmd.Process.Kill()
		<-p.done
		f.End = monoNow()
		r.start(slot)
		f.Detail = "replaced by " + r.current[slot].id
	case "latency":
		lat, d := randDuration(20*time.Millisecond, r.lease/2), randDuration(500*time.Millisecond, 1500*time.Millisecond)
		f.Start = monoNow()
		px.SetLatency(lat)
		time.Sleep(d)
		px.SetLatency(0)
		f.End = monoNow()
		f.Detail = fmt.Sprintf("%v each way for %v", lat.Round(time.Millisecond), d.Round(time.Millisecond))
	case "blackhole":
		d := randDuration(r.lease*3/2, r.lease*3)
		f.Start = monoNow()
		px.Blackhole(true)
		time.Sleep(d)
		px.Blackhole(false)
		f.End = monoNow()
		f.Detail = d.Round(time.Millisecond).String()
	case "reset":
		n := 1 + rand.IntN(5)
		f.Start = monoNow()
		for i := 0; i < n; i++ {
			if i > 0 {
				time.Sleep(randDuration(20*time.Millisecond, 60*time.Millisecond))
			}
			px.ResetAll()
		}
		f.End = monoNow()
		f.Detail = fmt.Sprintf("%d resets", n)
	}
	r.faults = append(r.faults, f)
	return true
}

// holder waits up to a second for a helper that has announced a long hold with at least 3/4
// of a lease still to go, and returns its slot; else it returns fallback. Faults aimed at long
// holders test what a lost lease does; the others (a quarter of them, and kills) hit whatever
// the process is doing, waiting most likely.
func (r *histRun) holder(fallback int) int {
	ctx := context.Background()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		keys, _ := r.fence.Keys(ctx, "hold:*").Result()
		rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, k := range keys {
			until, err := r.fence.Get(ctx, k).Int64()
			if err != nil || until-monoNow() < int64(r.lease*3/4) {
				continue
			}
			for slot, p := range r.current {
				if strings.HasPrefix(k, "hold:"+p.id+":") {
					return slot
				}
			}
		}
	}
	return fallback
}

// waitHelpers waits for every running helper to exit on its own, up to endSlack after the end;
// a helper still running then is reported as hung: SIGQUIT (Go dumps its goroutines to its
// output), then SIGKILL.
func (r *histRun) waitHelpers() {
	deadline := time.Now().Add(time.Duration(r.end-monoNow()) + histEndSlack)
	for _, p := range r.current {
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

// checkLeftovers lists the keys in the lock's Redis right after the helpers exited and 3
// leases later, if every helper exited on its own.
func (r *histRun) checkLeftovers() {
	for _, p := range r.current {
		if p.hung {
			return
		}
	}
	c := r.lockSrv.Client()
	defer c.Close()
	scan := func(later bool) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out []string
		iter := c.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			ttl := c.PTTL(ctx, k).Val()
			out = append(out, k+" (TTL "+ttl.String()+")")
			if later && !allowedLater(k, ttl, r.lease) {
				r.leftBad = append(r.leftBad, out[len(out)-1])
			}
		}
		if err := iter.Err(); err != nil {
			r.t.Errorf("SCAN of the lock's Redis: %v", err)
		}
		sort.Strings(out)
		return out
	}
	r.leftNow = scan(false)
	time.Sleep(3 * r.lease)
	r.leftLater = scan(true)
	sort.Strings(r.leftBad)
	r.leftChecked = true
}

// allowedLater reports whether key k, found with time to live ttl 3 leases after the helpers
// exited, may be there: a fencing counter with a TTL (kept for two leases after its key's last
// acquisition or renewal, of the longest lease an Extend set, and the first token of the
// holding beside it), or a settled mark ({…}:done:…), yield-check mark ({…}:check:…), forced
// mark ({…}:forced:…) or force's answer ({…}:removed:…) that expires within 24 more leases
// (they last 2 × the longest lease, and an operator's ForceRelease sets them for 8 × the
// removed key's remaining life, which an Extend makes up to 3 leases), or a read-write lock's
// or semaphore's key ({…}:shared:…), all of which live as long as its settled lockers.
func allowedLater(k string, ttl, lease time.Duration) bool {
	switch {
	case ttl == -2: // (go-redis's PTTL of a key that is gone: it expired between SCAN and PTTL)
		return true
	case ttl < 0:
		return false // no TTL (-1; a PTTL of 0 is a key that expires within this millisecond)
	case strings.HasSuffix(k, "}:fence"), strings.HasSuffix(k, "}:first"):
		return true
	case strings.Contains(k, "}:done:"), strings.Contains(k, "}:check:"), strings.Contains(k, "}:forced:"), strings.Contains(k, "}:removed:"):
		return ttl <= 24*lease
	case strings.Contains(k, "}:shared:"):
		// a read-write lock's or semaphore's keys all live as long as its settled lockers
		// after its last write (2 × the longest lease of the type, as the settled marks)
		return ttl <= 24*lease
	}
	return false
}

// histHolding is a holding from the logs.
type histHolding struct {
	*histRecord
	proc       *histProc
	unfinished bool  // begin line only: its process was killed (or hung)
	belief     int64 // E
}

func (r *histRun) rel(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fs", float64(ns-r.t0)/1e9)
}

func (r *histRun) hold(h *histHolding) string {
	s := fmt.Sprintf("[proc %s g%d #%d %s token %d: call %s, acquired %s, ", h.Proc, h.G, h.Seq, h.Key, h.Token,
		r.rel(h.CallStart), r.rel(h.TAcq))
	if h.Long {
		s += "long hold, "
	}
	if h.unfinished {
		return s + fmt.Sprintf("not released when its process was killed at %s]", r.rel(h.proc.killed))
	}
	s += fmt.Sprintf("released %s, belief until %s; ", r.rel(h.TRel), r.rel(h.belief))
	if h.TEnd != 0 {
		s += fmt.Sprintf("owner context ended %s (%s)", r.rel(h.TEnd), h.EndCause)
	} else {
		s += "owner context never ended"
	}
	s += fmt.Sprintf(", told ctx=%v unlock=%v", h.ToldCtx, h.ToldUnlock)
	if h.UnlockErr != "" {
		s += fmt.Sprintf(", Unlock: %q", h.UnlockErr)
	}
	if w := h.Write; w != nil {
		s += fmt.Sprintf("; fenced write %s–%s accepted=%v (stored before: %d)", r.rel(w.Start), r.rel(w.End), w.Accepted, w.Stored)
	}
	if len(h.Calls) > 1 {
		var ks []string
		for _, c := range h.Calls {
			ks = append(ks, c.Kind+"="+c.Outcome)
		}
		s += "; calls " + strings.Join(ks, " ")
	}
	return s + "]"
}

func (r *histRun) violate(kind, format string, args ...any) {
	r.viol[kind] = append(r.viol[kind], fmt.Sprintf(format, args...))
}

// analyse reads every helper's log and applies the rules.
func (r *histRun) analyse() {
	r.viol = map[string][]string{}
	st := &r.stats
	st.calls = map[string]map[string]int{}
	st.excused = map[string]int{}
	st.maxOverrun = map[string]time.Duration{}
	st.perKey = map[string]int{}

	pauses := map[string][]histFault{}
	var restarts []histFault
	for _, f := range r.faults {
		switch f.Kind {
		case "stop":
			pauses[f.Proc] = append(pauses[f.Proc], f)
		case "restart":
			restarts = append(restarts, f)
		}
	}
	pausedDuring := func(proc string, from, to, notAfter int64) bool {
		for _, w := range pauses[proc] {
			if w.Start < to && w.End > from && w.Start <= notAfter {
				return true
			}
		}
		return false
	}
	r.stalls = map[string][]histFault{}
	for _, p := range r.all {
		lines, _ := readHistLog(p.log)
		for _, rec := range lines {
			if rec.T == "stall" {
				r.stalls[p.id] = append(r.stalls[p.id], histFault{Kind: "stall", Proc: p.id, Start: rec.From, End: rec.To})
				st.stalls++
				st.maxStall = max(st.maxStall, time.Duration(rec.To-rec.From))
			}
		}
	}

	// Read the logs.
	type gid struct {
		proc string
		g    int
		seq  int64
	}
	var holdings []*histHolding
	var waits []*histRecord // long Lock calls that timed out
	r.forces = map[string][]histForce{}
	procOfPid := map[int]string{}
	var forceRecs []*histRecord
	for _, p := range r.all {
		begins := map[gid]*histRecord{}
		finished := map[gid]bool{}
		var exit *histRecord
		lines, bad := readHistLog(p.log)
		if bad > 0 && (p.killed == 0 && !p.hung || bad > 1) {
			r.violate("checker: bad log line", "%s: %d unreadable lines", p.id, bad)
		}
		st.badLines += bad
		for _, rec := range lines {
			switch rec.T {
			case "begin":
				begins[gid{rec.Proc, rec.G, rec.Seq}] = rec
			case "exit":
				exit = rec
			case "start":
				procOfPid[rec.Pid] = rec.Proc
			case "force":
				st.forces++
				r.checkCalls(p, rec, pausedDuring)
				if rec.Forced {
					st.forced++
					forceRecs = append(forceRecs, rec)
				}
			case "op":
				st.iters++
				r.checkCalls(p, rec, pausedDuring)
				if c := rec.Calls[0]; c.Kind == "lock_long" && c.Outcome == "timeout" {
					waits = append(waits, rec)
				}
				if rec.Acquired {
					finished[gid{rec.Proc, rec.G, rec.Seq}] = true
					holdings = append(holdings, &histHolding{histRecord: rec, proc: p})
				}
			}
		}
		for id, b := range begins {
			if finished[id] {
				continue
			}
			h := &histHolding{histRecord: b, proc: p, unfinished: true}
			h.TRel = p.killed
			if p.killed == 0 {
				h.TRel = r.end + int64(histEndSlack)
				if !p.hung {
					r.violate("helper-failed", "proc %s exited on its own with a holding never released: %s", p.id, r.hold(h))
				}
			}
			holdings = append(holdings, h)
		}
		acquired := 0
		for _, rec := range lines {
			if rec.T == "begin" {
				acquired++
			}
		}
		until := r.end
		if p.killed != 0 {
			until = p.killed
		}
		if life := until - p.started; acquired == 0 && life >= int64(5*time.Second) {
			r.violate("no-progress", "proc %s ran %v without acquiring once", p.id, time.Duration(life).Round(time.Millisecond))
		}
		switch {
		case p.killed != 0:
		case p.hung:
			r.violate("hang", "proc %s still running %v after the end; its goroutines (SIGQUIT):\n%s", p.id, histEndSlack, tail(p.out, 60))
		case p.err != nil || exit == nil:
			r.violate("helper-failed", "proc %s: exit %v, exit line %v; output:\n%s", p.id, p.err, exit != nil, tail(p.out, 40))
		default:
			if exit.Leak != "" {
				st.leaks++
				r.violate("goroutine-leak", "proc %s: %s", p.id, exit.Leak)
			}
			st.copies += int(exit.Copies)
			if exit.CloseErr != "" {
				r.violate("close-error", "proc %s: Close: %s", p.id, exit.CloseErr)
			}
		}
	}

	for _, rec := range forceRecs { // the process whose tenure each force removed
		parts := strings.Split(rec.Holder, "-")
		pid := -1
		if len(parts) >= 2 {
			pid, _ = strconv.Atoi(parts[len(parts)-3])
		}
		r.forces[rec.Key] = append(r.forces[rec.Key], histForce{histCall: rec.Calls[0], victim: procOfPid[pid]})
	}

	// Belief intervals and per-holding checks.
	byKey := map[string][]*histHolding{}
	for _, h := range holdings {
		st.acquisitions++
		st.perKey[h.Key]++
		byKey[h.Key] = append(byKey[h.Key], h)
		if h.unfinished {
			st.unfinished++
			h.belief = h.TRel
			continue
		}
		if h.Long {
			st.long++
		}
		h.belief = h.TRel
		if h.ToldCtx && (h.EndedBefore || h.TEnd < h.TRel) {
			h.belief = max(h.TAcq, min(h.TEnd, h.TRel)-int64(histNoticeSlack))
		}
		if h.ToldCtx {
			st.toldCtx++
		}
		if h.ToldUnlock {
			st.toldUnlock++
		}
		// (FencingToken runs as Lock returns: an owner told of a loss by then is not owned, and
		// so is one whose process was stopped as Lock returned until its lease ran out)
		toldAsTaken := h.ToldCtx && h.EndedBefore && h.TEnd <= h.TAcq+int64(histNoticeSlack)
		stoppedAsTaken := h.ToldCtx && h.EndedBefore && pausedDuring(h.Proc, h.TAcq, h.TEnd, h.TAcq+int64(histNoticeSlack))
		if h.NoToken && !toldAsTaken && !stoppedAsTaken {
			r.violate("no-token", "FencingToken of a fresh owner context said not owned: %s", r.hold(h))
		}
		if h.EndedBefore && !h.ToldCtx {
			r.violate("owner-ended-early", "the owner context ended before Unlock with %q (not ErrLockLost): %s", h.EndCause, r.hold(h))
		}
		if h.ToldCtx && h.EndedBefore && !h.ToldUnlock {
			r.violate("unlock-not-lost", "the owner context ended with ErrLockLost before Unlock, but Unlock returned %q: %s", h.UnlockErr, r.hold(h))
		}
	}

	r.byProcKey = map[string][]*histHolding{}
	for _, h := range holdings {
		r.byProcKey[h.Proc+" "+h.Key] = append(r.byProcKey[h.Proc+" "+h.Key], h)
	}
	r.restarts = restarts
	for key, hs := range byKey {
		r.checkOverlaps(key, hs, pausedDuring, restarts)
		r.checkTokens(key, hs)
		r.checkFence(key, hs, pausedDuring, restarts)
	}
	r.checkBlocked(byKey, waits)
}

// checkBlocked looks for keys blocked with nobody holding them (reported, not failed): a long
// Lock call that timed out although no holding of its key was logged during the whole call
// (spans [CallStart, TRel]) and no fault of any kind was under way from two leases before the
// call to its end (a killed holder's key, a black-holed attempt's key, a restart all block a
// key for a while by design).
func (r *histRun) checkBlocked(byKey map[string][]*histHolding, waits []*histRecord) {
	st := &r.stats
	spans := map[string][]*histHolding{}
	reach := map[string][]int64{} // prefix maximum of TRel, in CallStart order
	for k, hs := range byKey {
		s := slices.Clone(hs)
		sort.Slice(s, func(i, j int) bool { return s[i].CallStart < s[j].CallStart })
		m := make([]int64, len(s))
		for i, h := range s {
			m[i] = h.TRel
			if i > 0 {
				m[i] = max(m[i], m[i-1])
			}
		}
		spans[k], reach[k] = s, m
	}
	for _, w := range waits {
		c := w.Calls[0]
		faulty := false
		for _, f := range r.faults {
			if f.Start < c.End && f.End+int64(2*r.lease) > c.Start {
				faulty = true
			}
		}
		if faulty {
			continue
		}
		s := spans[w.Key]
		n := sort.Search(len(s), func(i int) bool { return s[i].CallStart >= c.End })
		if n > 0 && reach[w.Key][n-1] > c.Start {
			continue // some holding's span met the call
		}
		st.blocked++
		st.maxBlocked = max(st.maxBlocked, time.Duration(c.End-c.Start))
		if len(st.blockedEx) < histExamples {
			st.blockedEx = append(st.blockedEx, fmt.Sprintf("proc %s g%d #%d %s: Lock with deadline %v, %s–%s, timed out; no holding of %s in that time, no fault",
				w.Proc, w.G, w.Seq, w.Key, time.Duration(c.D).Round(time.Millisecond), r.rel(c.Start), r.rel(c.End), w.Key))
		}
	}
}

// readHistLog reads a helper's log; a line that does not parse (the last one of a process
// killed while writing) is counted.
func readHistLog(path string) (recs []*histRecord, bad int) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0 // killed before it wrote anything
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec histRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			bad++
			continue
		}
		recs = append(recs, &rec)
	}
	return recs, bad
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkCalls applies rule (4) to an iteration's calls.
func (r *histRun) checkCalls(p *histProc, rec *histRecord, pausedDuring func(string, int64, int64, int64) bool) {
	st := &r.stats
	for _, c := range rec.Calls {
		if st.calls[c.Kind] == nil {
			st.calls[c.Kind] = map[string]int{}
		}
		st.calls[c.Kind][c.Outcome]++
		allowed := map[string][]string{
			"lock_short":   {"ok", "timeout"},
			"lock_long":    {"ok", "timeout"},
			"trylock":      {"ok", "busy", "timeout", "redis"},
			"reenter":      {"ok", "lost"},
			"unlock_inner": {"ok"},
			"unlock":       {"ok", "lost", "redis"},
			"extend":       {"ok", "lost", "redis", "timeout"}, // (timeout: a renewal whose reply came after the lease ran out)
			"force":        {"ok", "redis", "timeout"},
		}[c.Kind]
		if !slices.Contains(allowed, c.Outcome) {
			kind := strings.TrimSuffix(strings.TrimSuffix(c.Kind, "_short"), "_long")
			kind = strings.TrimSuffix(kind, "_inner")
			r.violate(kind+"-error", "proc %s g%d #%d %s: %s returned %s: %s (call %s–%s)",
				rec.Proc, rec.G, rec.Seq, rec.Key, c.Kind, c.Outcome, c.Err, r.rel(c.Start), r.rel(c.End))
		}
		var bound time.Duration
		switch c.Kind {
		case "lock_short", "lock_long", "trylock", "force":
			bound = time.Duration(c.D) + histCallSlack
		case "unlock":
			bound = r.lease + histCallSlack
		case "extend": // bounded by the holding's lease, which an earlier Extend may have tripled
			bound = 3*r.lease + histCallSlack
		default:
			bound = histCallSlack
		}
		if c.Redis && !r.faultNear(p.id, c.Start, c.End) && !(timeError(c.Err) && (r.stalledDuring(p.id, c.Start, c.End) || r.pathStalledDuring(c.Start, c.End))) {
			r.violate("redis-error-without-fault", "proc %s g%d #%d %s: %s returned a Redis error with no fault on its process or restart in the two leases before: %s (call %s–%s)",
				rec.Proc, rec.G, rec.Seq, rec.Key, c.Kind, c.Err, r.rel(c.Start), r.rel(c.End))
		}
		took := time.Duration(c.End - c.Start)
		if pausedDuring(p.id, c.Start, c.End, c.End) {
			continue
		}
		over := took - (bound - histCallSlack)
		if over > st.maxOverrun[c.Kind] {
			st.maxOverrun[c.Kind] = over
		}
		if took > bound && took-r.stalledFor(p.id, c.Start+int64(bound-histCallSlack), c.End) <= bound {
			st.slowStalled++ // (after its deadline its process ran nothing for as long as it overran: the machine's, not the library's)
			continue
		}
		if took > bound {
			r.violate("slow-call", "proc %s g%d #%d %s: %s (deadline %v) took %v, bound %v (call %s–%s, %s)",
				rec.Proc, rec.G, rec.Seq, rec.Key, c.Kind, time.Duration(c.D), took.Round(time.Millisecond), bound,
				r.rel(c.Start), r.rel(c.End), c.Outcome)
		}
	}
}

// faultNear reports whether a fault that can make proc's Redis calls fail (a restart, or a
// fault aimed at proc) was under way between two leases before from and to.
func (r *histRun) faultNear(proc string, from, to int64) bool {
	for _, f := range r.faults {
		if (f.Kind == "restart" || f.Proc == proc) && f.Start < to && f.End+int64(2*r.lease) > from {
			return true
		}
	}
	return false
}

// timeError reports whether a call's error text says a reply came too late (a stall of the
// caller can make it so), not that Redis refused or failed the request.
func timeError(err string) bool {
	for _, s := range []string{"no answer", "timeout", "deadline", "late"} {
		if strings.Contains(err, s) {
			return true
		}
	}
	return false
}

// pathStalledDuring reports whether the way to the lock's Redis stalled between from and to.
func (r *histRun) pathStalledDuring(from, to int64) bool {
	for _, w := range r.pathStalls {
		if w.Start < to && w.End > from {
			return true
		}
	}
	return false
}

// watchPath logs the stalls of the helpers' way to the lock's Redis, which their own
// watchStalls does not see: this process (it runs their fault proxies) running nothing for
// histStallMin or more, or the lock's redis-server taking that long to answer a PING sent
// from here every histStallTick. On a loaded machine a family request (bounded by a third of
// the lease, 133 ms) got no answer in time while its helper ran on: rule (4) took it for a
// Redis error without a fault. It returns a function that stops the watcher and waits for it.
func (r *histRun) watchPath() (stop func()) {
	c := redis.NewClient(&redis.Options{Addr: r.lockSrv.Addr, MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	done, stopped := make(chan struct{}), make(chan struct{})
	var stalls []histFault
	go func() {
		defer close(stopped)
		tick := time.NewTicker(histStallTick)
		defer tick.Stop()
		last := monoNow()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			now := monoNow()
			if now-last >= int64(histStallMin) { // this process, the proxies with it, ran nothing
				stalls = append(stalls, histFault{Kind: "stall", Start: last, End: now})
			}
			err := c.Ping(context.Background()).Err()
			last = monoNow()
			if err == nil && last-now >= int64(histStallMin) { // Redis (or the way to it) was slow
				stalls = append(stalls, histFault{Kind: "stall", Start: now, End: last})
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			<-stopped
			_ = c.Close()
			r.pathStalls = stalls
		})
	}
	r.t.Cleanup(stop) // (also on a Fatal before the test stops it)
	return stop
}

// stalledFor returns how long proc logged it stalled between from and to.
func (r *histRun) stalledFor(proc string, from, to int64) time.Duration {
	var d int64
	for _, w := range r.stalls[proc] {
		if o := min(w.End, to) - max(w.Start, from); o > 0 {
			d += o
		}
	}
	return time.Duration(d)
}

// stalledDuring reports whether proc logged a stall between from and to.
func (r *histRun) stalledDuring(proc string, from, to int64) bool {
	for _, w := range r.stalls[proc] {
		if w.Start < to && w.End > from {
			return true
		}
	}
	return false
}

// stalledAsLost reports whether x's process stalled as x's lease may have run out before
// another's acquisition at start: a stall that began during x's span, no later than start,
// lasted into the noticeSlack before start and at least as long as the overlap (start to
// end) — its lease watchdog, held up with the rest, told x of the loss late — and x was told
// of a loss by its owner context.
func (r *histRun) stalledAsLost(x *histHolding, start, end int64) bool {
	if !x.ToldCtx {
		return false // (told by Unlock only: it acted as owner up to its Unlock, stall or not)
	}
	for _, w := range r.stalls[x.Proc] {
		// ... and the overlap (start to end) is no longer than the stall: the notice came late
		// by no more than the stall held the watchdog up
		if w.Start < x.TRel && w.End > x.CallStart && w.Start <= start && w.End >= start-int64(histNoticeSlack) && end-start <= w.End-w.Start {
			return true
		}
	}
	return false
}

// checkOverlaps applies rule (1) to the holdings of one key.
func (r *histRun) checkOverlaps(key string, hs []*histHolding, pausedDuring func(string, int64, int64, int64) bool, restarts []histFault) {
	sort.Slice(hs, func(i, j int) bool { return hs[i].TAcq < hs[j].TAcq })
	var active []*histHolding
	for _, b := range hs {
		// Keep the holdings whose span reaches past b's acquisition.
		kept := active[:0]
		for _, a := range active {
			if a.TRel > b.TAcq {
				kept = append(kept, a)
			}
		}
		active = kept
		switch {
		case strings.HasPrefix(key, "s"): // a semaphore: more than its permits at once
			var with []*histHolding
			for _, a := range active {
				if r.checkPair(a, b, pausedDuring, restarts, false) {
					with = append(with, a)
				}
			}
			if len(with) >= histSemPermits {
				lines := []string{r.hold(b)}
				for _, a := range with {
					lines = append(lines, r.hold(a))
				}
				r.violate("permits", "%d holders of %s's %d permits at %s:\n    %s", len(with)+1, key, histSemPermits,
					r.rel(b.TAcq), strings.Join(lines, "\n    "))
			}
		default:
			for _, a := range active {
				if a.Side == "r" && b.Side == "r" {
					continue // readers share
				}
				r.checkPair(a, b, pausedDuring, restarts, true)
			}
		}
		active = append(active, b)
	}
}

// checkPair judges holdings a and b of one key, a.TAcq <= b.TAcq < a.TRel: it reports
// whether they were owners at once, excused by nothing, and with report it reports that as a
// violation (and counts the excuses).
func (r *histRun) checkPair(a, b *histHolding, pausedDuring func(string, int64, int64, int64) bool, restarts []histFault, report bool) bool {
	st := &r.stats
	if !report {
		st = &histStats{excused: map[string]int{}}
	}
	start := b.TAcq // the overlap begins
	if a.unfinished || b.unfinished {
		st.excused["killed"]++
		return false
	}
	for _, x := range []*histHolding{a, b} {
		if pausedDuring(x.Proc, x.CallStart, x.TRel, start) {
			st.excused["paused"]++
			return false
		}
		if x == a && r.stalledAsLost(x, start, min(a.belief, b.belief)) { // (the earlier holder's over-belief: b's stall explains none)
			st.excused["stalled as its lease ran out"]++
			return false
		}
	}
	if r.forcedBetween(a, start) {
		st.excused["forced"]++
		return false
	}
	if r.passedUnderForced(b, a) {
		st.excused["forced, passed on within the process"]++
		return false
	}
	told := func(x *histHolding) bool { return x.ToldCtx || x.ToldUnlock }
	for _, w := range restarts {
		if w.Start > start {
			continue // the overlap began before this restart
		}
		for _, x := range []*histHolding{a, b} {
			renewal := r.untoldFor(x, w)
			if x.TAcq >= w.Start && r.tenureAcross(x, w) && x.TAcq <= w.End+renewal && start <= w.End+renewal {
				// x was passed the lock within its process under a tenure that the restart
				// wiped, before the tenure's next renewal could tell the process
				st.excused["restart, same tenure"]++
				return false
			}
			if !(w.Start < x.TRel && x.CallStart < w.End) {
				continue // x's span misses the restart
			}
			switch {
			case told(x) && (x.TAcq < w.Start || x.CallStart < w.Start+int64(10*time.Millisecond)):
				st.excused["restart, told"]++
				return false
			case x == a && x.TAcq < w.Start && x.TRel <= w.End+renewal+int64(histNoticeSlack):
				// released (passed on within its process) before its tenure's next renewal
				// could tell it
				st.excused["restart, released before the next renewal"]++
				return false
			case x == a && x.TAcq < w.Start:
				if !report {
					return true
				}
				r.violate("restart-untold", "a holding from before the restart at %s (its key wiped) was never told of the loss, and overlapped a later one:\n    %s\n    %s",
					r.rel(w.Start), r.hold(a), r.hold(b))
				return true
			case x.CallStart < w.Start+int64(10*time.Millisecond) && x.TAcq >= w.Start:
				st.excused["restart, ambiguous"]++
				return false
			}
		}
	}
	if min(a.belief, b.belief) <= start {
		st.overlapsTold++
		if a.ToldCtx && a.TEnd > start && a.TAcq < start {
			st.lateNotices++
			st.maxLateNotice = max(st.maxLateNotice, time.Duration(a.TEnd-start))
		}
		return false
	}
	if !report {
		return true
	}
	both := a.Write != nil && b.Write != nil && a.Write.Accepted && b.Write.Accepted
	note := ""
	if both {
		st.bothWritesAccepted++
		note = " (both fenced writes were accepted: the fence did not catch it)"
	}
	r.violate("overlap", "two owners of %s for %v%s (forces of the key in the second before: %s):\n    %s\n    %s", a.Key,
		time.Duration(min(a.belief, b.belief)-start).Round(time.Microsecond), note, r.forcesNear(a.Key, start), r.hold(a), r.hold(b))
	return true
}

// tenureAcross reports whether x's process held x's key when restart w began: one of its
// holdings of the key spans w's start. Then the process's later holdings of the key may be
// passes under the tenure the restart wiped.
// untoldFor returns how long after restart w x's process may go on under a tenure the restart
// wiped before its next renewal tells it: a tenure renews at the latest 3/4 of its lease after
// its last renewal, and an Extend to d just before the restart (by a holding of that process
// and key that ended less than a lease before it, so possibly of the same tenure) is a renewal
// whose next one comes 3/4 of d later. The bound is a lease, or what remains of d.
func (r *histRun) untoldFor(x *histHolding, w histFault) int64 {
	bound := int64(r.lease)
	for _, h := range r.byProcKey[x.Proc+" "+x.Key] {
		if h.TRel <= w.Start-int64(r.lease) || h.TAcq >= w.Start {
			continue
		}
		for _, c := range h.Calls {
			if c.Kind == "extend" && c.Outcome == "ok" && c.Start < w.Start {
				bound = max(bound, c.End+c.D-w.End)
			}
		}
	}
	return bound
}

func (r *histRun) tenureAcross(x *histHolding, w histFault) bool {
	for _, h := range r.byProcKey[x.Proc+" "+x.Key] {
		if h.TAcq < w.Start && w.Start < h.TRel {
			return true
		}
	}
	return false
}

// forcedBetween reports whether a may be a holding under a tenure that an operator's
// ForceRelease removed before until: a force of a's key that removed a locker of a's process,
// began before until and before a's release, and ended after a's call began — or up to a lease
// before: a grant to the process's attempt, made before the force and heard after it (its
// message comes first), is counted for up to a lease from the process's last request. The
// contract lets a holder in another process act as owner until its tenure next renews or
// lets go — and with it the goroutines its process passes the lock to meanwhile, which may
// never be told (their releases are passes within the process, with no word to Redis).
func (r *histRun) forcedBetween(a *histHolding, until int64) bool {
	for _, f := range r.forces[a.Key] {
		if f.victim == a.Proc && f.End > a.CallStart-int64(r.lease) && f.Start < min(until, a.TRel) {
			return true
		}
	}
	return false
}

// passedUnderForced reports whether b, which acquired after a, was passed the lock within its
// process under a tenure that an operator's ForceRelease removed before a acquired: b's token
// is below a's (so it was handed out before a's tenure began, from the block of an older
// tenure of b's process, which must have ended for a to take the key), a force removed a
// locker of b's process before b acquired, and b acquired before that tenure's next renewal
// could tell the process (untoldFor).
func (r *histRun) passedUnderForced(b, a *histHolding) bool {
	if b.NoToken || a.NoToken || b.Token >= a.Token {
		return false
	}
	for _, f := range r.forces[b.Key] {
		if f.victim == b.Proc && f.Start < b.TAcq && b.TAcq <= f.End+r.untoldFor(b, histFault{Start: f.Start, End: f.End}) {
			return true
		}
	}
	return false
}

// passedUnderRestart reports whether b, whose token is below a's, was passed the lock (or lent
// a holding) within its process under a tenure that a restart of Redis wiped, before that
// tenure's next renewal could tell the process: a holding of b's process spans the restart's
// start, a acquired after it (its token is the restarted server's), and b acquired after the
// restart began, within untoldFor of its end. b's token comes from the wiped tenure's block,
// handed out before the restart; its writes are refused by the fence (rule 3).
func (r *histRun) passedUnderRestart(b, a *histHolding) bool {
	if b.NoToken || a.NoToken || b.Token >= a.Token {
		return false
	}
	for _, w := range r.restarts {
		if a.TAcq >= w.Start && b.TAcq >= w.Start && r.tenureAcross(b, w) && b.TAcq <= w.End+r.untoldFor(b, w) {
			return true
		}
	}
	return false
}

// forcesNear lists the operators' ForceRelease calls on key that removed a holder in the
// second before at, for the examples of a violation.
func (r *histRun) forcesNear(key string, at int64) string {
	var out []string
	for _, f := range r.forces[key] {
		if f.End > at-int64(time.Second) && f.Start < at {
			out = append(out, fmt.Sprintf("%s–%s of proc %s", r.rel(f.Start), r.rel(f.End), f.victim))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// checkTokens applies rule (2) to the holdings of one key.
func (r *histRun) checkTokens(key string, hs []*histHolding) {
	if !strings.HasPrefix(key, "k") {
		r.checkSharedTokens(key, hs)
		return
	}
	seen := map[uint64]*histHolding{}
	for _, h := range hs {
		if h.NoToken {
			continue
		}
		if o := seen[h.Token]; o != nil {
			r.violate("token-repeated", "two holdings of %s with token %d:\n    %s\n    %s", key, h.Token, r.hold(o), r.hold(h))
			continue
		}
		seen[h.Token] = h
	}
	byAcq := slices.Clone(hs)
	sort.Slice(byAcq, func(i, j int) bool { return byAcq[i].TAcq < byAcq[j].TAcq })
	byCall := slices.Clone(hs)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].CallStart < byCall[j].CallStart })
	var top *histHolding
	i := 0
	for _, b := range byCall {
		for ; i < len(byAcq) && byAcq[i].TAcq < b.CallStart; i++ {
			if a := byAcq[i]; !a.NoToken && (top == nil || a.Token > top.Token) {
				top = a
			}
		}
		if top != nil && !b.NoToken && b.Token < top.Token && !r.forcedBetween(b, b.TRel) && !r.passedUnderRestart(b, top) {
			r.violate("token-order", "%s: a holding whose call began after another had acquired has a lower token:\n    earlier %s\n    later   %s",
				key, r.hold(top), r.hold(b))
		}
	}
}

// checkSharedTokens applies rule (2) to a read-write lock's or a semaphore's holdings, whose
// readers and permit holders share their process's holding's token (a reader on a write-hold,
// its last writer's), while each writer has its own: two processes, or two writers, never
// share a token, and for a read-write lock, a holding whose call began after another holding
// acquired, one of them a writer, has a larger token, unless both are of one process and one
// reads. Readers of different processes, and a semaphore's holders, hold at once under tokens
// in no order.
func (r *histRun) checkSharedTokens(key string, hs []*histHolding) {
	seen := map[uint64]*histHolding{}
	for _, h := range hs {
		if h.NoToken {
			continue
		}
		if o := seen[h.Token]; o != nil && (o.Proc != h.Proc || (o.Side == "w" && h.Side == "w")) {
			r.violate("token-repeated", "two holdings of %s with token %d, of two processes or two writers:\n    %s\n    %s", key, h.Token, r.hold(o), r.hold(h))
			continue
		}
		if seen[h.Token] == nil || h.Side == "w" {
			seen[h.Token] = h
		}
	}
	if !strings.HasPrefix(key, "r") {
		return
	}
	for _, a := range hs {
		for _, b := range hs {
			if (a.Proc == b.Proc && (a.Side != "w" || b.Side != "w")) || a.NoToken || b.NoToken || a.TAcq >= b.CallStart || (a.Side != "w" && b.Side != "w") {
				continue
			}
			if b.Token <= a.Token && !r.forcedBetween(b, b.TRel) && !r.passedUnderRestart(b, a) && !a.unfinished && !b.unfinished {
				r.violate("token-order", "%s: a holding whose call began after another had acquired, one of them writing, has a token not above it:\n    earlier %s\n    later   %s",
					key, r.hold(a), r.hold(b))
			}
		}
	}
}

// checkFence applies rule (3) to the holdings of one key.
func (r *histRun) checkFence(key string, hs []*histHolding, pausedDuring func(string, int64, int64, int64) bool, restarts []histFault) {
	st := &r.stats
	var ws []*histHolding
	for _, h := range hs {
		if h.Write == nil {
			continue
		}
		st.writes++
		if h.Write.Err != "" {
			r.violate("checker: fence store error", "%s: %s", r.hold(h), h.Write.Err)
			continue
		}
		ws = append(ws, h)
		if h.Write.Accepted {
			continue
		}
		st.writesRefused++
		if h.Write.Stored < h.Token {
			r.violate("fence-accepted-stale", "the fence store refused token %d while holding %d: %s", h.Token, h.Write.Stored, r.hold(h))
		}
		// Refused: a newer token was stored. Was it refused while the holding still held the
		// lock? The refusal happened at the latest when the write returned (Write.End); the
		// holding believed it held the lock until its belief ended, and its lease lasted at
		// least until CallStart + lease/2 (Lock never returns with less than half a lease
		// left, counted from a request sent after CallStart). Only a refusal surely before both
		// is a violation: a write that waited on a loaded machine until the lease had run out is
		// fencing doing its job.
		ws0 := h.Write.Start
		if h.Write.End >= min(h.belief, h.CallStart+int64(r.lease/2)) {
			st.writesStale++ // told first, or refused when the lease may have run out: rightly refused
			continue
		}
		if r.forcedBetween(h, h.Write.End) {
			st.writesStale++
			st.excused["forced (write)"]++
			continue
		}
		if pausedDuring(h.Proc, h.CallStart, h.TRel, ws0) {
			st.writesStale++
			st.excused["paused (write)"]++
			continue
		}
		excused := false
		for _, w := range restarts {
			if w.Start <= ws0 && h.CallStart < w.End+int64(10*time.Millisecond) && w.Start < h.TRel {
				excused = true
			}
		}
		if excused {
			st.writesStale++
			st.excused["restart (write)"]++
			continue
		}
		r.violate("stale-write-while-owner", "%s: token %d refused by the fence (it held %d) while the holding believed it held the lock: %s",
			key, h.Token, h.Write.Stored, r.hold(h))
	}
	// fence-accepted-stale: an accepted write not above every write accepted before it began.
	byStart := slices.Clone(ws)
	sort.Slice(byStart, func(i, j int) bool { return byStart[i].Write.Start < byStart[j].Write.Start })
	byEnd := slices.Clone(ws)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].Write.End < byEnd[j].Write.End })
	var top *histHolding
	i := 0
	for _, h := range byStart {
		for ; i < len(byEnd) && byEnd[i].Write.End < h.Write.Start; i++ {
			if a := byEnd[i]; a.Write.Accepted && (top == nil || a.Token > top.Token) {
				top = a
			}
		}
		if h.Write.Accepted && top != nil && h.Token <= top.Token {
			r.violate("fence-accepted-stale", "%s: token %d accepted after %d had been:\n    %s\n    %s", key, h.Token, top.Token, r.hold(top), r.hold(h))
		}
	}
}

// report logs the totals and fails the test on any violation.
func (r *histRun) report() {
	t, st := r.t, &r.stats
	var b strings.Builder
	fmt.Fprintf(&b, "history: %d processes × %d goroutines, %d keys, lease %v, workload %v\n",
		r.procs, r.goroutines, r.keys, r.lease, time.Duration(r.end-r.t0))
	fmt.Fprintf(&b, "  helper processes run: %d (incl. replacements); iterations %d; acquisitions %d (%d long holds, %d of killed processes never released); per key %v\n",
		len(r.all), st.iters, st.acquisitions, st.long, st.unfinished, st.perKey)
	kinds := slices.Sorted(maps.Keys(st.calls))
	for _, k := range kinds {
		fmt.Fprintf(&b, "  calls %-12s %v\n", k, st.calls[k])
	}
	faults := map[string]int{}
	for _, f := range r.faults {
		faults[f.Kind]++
	}
	fmt.Fprintf(&b, "  faults: %d %v; operators' ForceRelease calls %d (%d removed a holder); writes delivered twice %d\n",
		len(r.faults), faults, st.forces, st.forced, st.copies)
	fmt.Fprintf(&b, "  helpers' stalls of %v or more: %d, the longest %v\n", histStallMin, st.stalls, st.maxStall.Round(time.Millisecond))
	var maxPath time.Duration
	for _, w := range r.pathStalls {
		maxPath = max(maxPath, time.Duration(w.End-w.Start))
	}
	fmt.Fprintf(&b, "  stalls of the way to the lock's Redis (this process, redis-server) of %v or more: %d, the longest %v\n", histStallMin, len(r.pathStalls), maxPath.Round(time.Millisecond))
	fmt.Fprintf(&b, "  told of a loss: by the owner context %d, by Unlock %d; overlaps after a loss notice %d; excused overlaps %v\n",
		st.toldCtx, st.toldUnlock, st.overlapsTold, st.excused)
	fmt.Fprintf(&b, "  loss notices later than another's acquisition: %d, the latest by %v (slack %v)\n",
		st.lateNotices, st.maxLateNotice.Round(time.Microsecond), histNoticeSlack)
	fmt.Fprintf(&b, "  fenced writes %d, refused %d (stale, after a loss or excused: %d)\n", st.writes, st.writesRefused, st.writesStale)
	var ov []string
	for _, k := range slices.Sorted(maps.Keys(st.maxOverrun)) {
		ov = append(ov, fmt.Sprintf("%s %v", k, st.maxOverrun[k].Round(time.Millisecond)))
	}
	fmt.Fprintf(&b, "  worst time beyond the deadline (Lock, TryLock), the lease (Unlock) or 0: %s (slack %v); beyond the slack by no more than their process stalled meanwhile: %d\n", strings.Join(ov, ", "), histCallSlack, st.slowStalled)
	fmt.Fprintf(&b, "  long Lock calls that timed out on a key nobody held, away from faults: %d (longest %v)\n",
		st.blocked, st.maxBlocked.Round(time.Millisecond))
	for _, e := range st.blockedEx {
		fmt.Fprintf(&b, "    %s\n", e)
	}
	if r.leftChecked {
		fmt.Fprintf(&b, "  left in the lock's Redis right after the exit: %d keys %s; 3 leases later: %d\n",
			len(r.leftNow), firstN(r.leftNow, 8), len(r.leftLater))
		for _, k := range r.leftBad {
			r.violate("left-behind", "%s", k)
		}
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(r.viol)) {
		total += len(r.viol[k])
	}
	fmt.Fprintf(&b, "  violations: %d (overlaps where both fenced writes were accepted: %d)", total, st.bothWritesAccepted)
	for _, k := range slices.Sorted(maps.Keys(r.viol)) {
		fmt.Fprintf(&b, "\n    %s: %d", k, len(r.viol[k]))
	}
	t.Log(b.String())
	var fs []string
	for _, f := range r.faults {
		fs = append(fs, fmt.Sprintf("%-9s %-4s %s–%s %s", f.Kind, f.Proc, r.rel(f.Start), r.rel(f.End), f.Detail))
	}
	t.Logf("faults (times from the start):\n  %s", strings.Join(fs, "\n  "))
	if total == 0 {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(r.viol)) {
		ex := r.viol[k]
		t.Errorf("%s: %d; first %d:\n  %s", k, len(ex), min(len(ex), histExamples), strings.Join(ex[:min(len(ex), histExamples)], "\n  "))
	}
	if os.Getenv("DLOCK_HISTORY_LOGS") == "" {
		t.Log("set DLOCK_HISTORY_LOGS=<dir> to keep the helpers' logs")
	}
}

func firstN(s []string, n int) string {
	if len(s) > n {
		return fmt.Sprint(s[:n]) + "…"
	}
	return fmt.Sprint(s)
}

// TestHistoryRules checks the checker: made-up histories, each with the violations the rules
// must find in it (and no others).
func TestHistoryRules(t *testing.T) {
	const ms = int64(time.Millisecond)
	type opt func(*histRecord)
	// hold makes a finished holding: Lock called at cs, returned at ta, Unlock called at tr (ms).
	hold := func(proc string, key string, tok uint64, cs, ta, tr int64, opts ...opt) *histRecord {
		rec := &histRecord{T: "op", Proc: proc, G: 1, Key: key, Acquired: true, Token: tok,
			CallStart: cs * ms, TAcq: ta * ms, TRel: tr * ms, TEnd: (tr + 1) * ms, EndCause: "released",
			Calls: []histCall{
				{Kind: "lock_long", D: int64(time.Second), Start: cs * ms, End: ta * ms, Outcome: "ok"},
				{Kind: "unlock", Start: tr * ms, End: (tr + 1) * ms, Outcome: "ok"},
			}}
		for _, o := range opts {
			o(rec)
		}
		return rec
	}
	lostAt := func(at int64) opt { // the owner context ended with ErrLockLost at at, before Unlock
		return func(r *histRecord) {
			r.TEnd, r.EndCause, r.EndedBefore, r.ToldCtx, r.ToldUnlock = at*ms, "lost", true, true, true
			r.Calls[1].Outcome = "lost"
		}
	}
	toldByUnlock := func(r *histRecord) { r.ToldUnlock, r.Calls[1].Outcome = true, "lost" }
	side := func(sd string) opt { return func(r *histRecord) { r.Side = sd } }
	extended := func(at, to int64) opt { // a successful Extend to a lease of to ms at at
		return func(r *histRecord) {
			r.Calls = append(r.Calls, histCall{Kind: "extend", D: to * ms, Start: at * ms, End: (at + 1) * ms, Outcome: "ok"})
		}
	}
	write := func(at int64, accepted bool, stored uint64) opt {
		return func(r *histRecord) {
			r.Write = &histWrite{Start: at * ms, End: (at + 1) * ms, Accepted: accepted, Stored: stored}
		}
	}
	forceAt := func(proc, key string, at int64) *histRecord { // an operator's ForceRelease that removed a holder of process "a" (pid 1)
		return &histRecord{T: "force", Proc: proc, G: 1, Key: key, Forced: true, Holder: "192.0.2.1-1-abcdef-7",
			Calls: []histCall{{Kind: "force", D: int64(2 * time.Second), Start: at * ms, End: (at + 1) * ms, Outcome: "ok"}}}
	}
	slowUnlock := func(r *histRecord) { r.Calls[1].End, r.TEnd = 2510*ms, 2510*ms } // (lease 400 ms + callSlack 2 s + 100 ms)
	restart := histFault{Kind: "restart", Start: 100 * ms, End: 150 * ms}
	stall := func(proc string, from, to int64) *histRecord {
		return &histRecord{T: "stall", Proc: proc, From: from * ms, To: to * ms}
	}
	pause := func(proc string, from, to int64) histFault {
		return histFault{Kind: "stop", Proc: proc, Start: from * ms, End: to * ms}
	}
	for _, tc := range []struct {
		name   string
		recs   []*histRecord
		faults []histFault
		killed map[string]int64 // proc -> kill time (ms)
		want   []string
	}{
		{"clean", []*histRecord{hold("a", "k", 1, 0, 1, 10), hold("b", "k", 2, 2, 12, 20)}, nil, nil, nil},
		{"readers share", []*histRecord{hold("a", "r", 1, 0, 1, 10, side("r")), hold("b", "r", 2, 2, 5, 15, side("r"))}, nil, nil, nil},
		{"a reader beside a writer", []*histRecord{hold("a", "r", 1, 0, 1, 10, side("r")), hold("b", "r", 2, 2, 5, 15, side("w"))}, nil, nil, []string{"overlap"}},
		{"writers of one process, each with its own token", []*histRecord{hold("a", "r", 5, 0, 1, 10, side("w")), hold("a", "r", 6, 2, 11, 15, side("w"))}, nil, nil, nil},
		{"two writers of one process share a token", []*histRecord{hold("a", "r", 5, 0, 1, 10, side("w")), hold("a", "r", 5, 2, 11, 15, side("w"))}, nil, nil, []string{"token-order", "token-repeated"}},
		{"a reader on its process's write-hold shares its writer's token", []*histRecord{hold("a", "r", 5, 0, 1, 10, side("w")), hold("a", "r", 5, 2, 11, 15, side("r"))}, nil, nil, nil},
		{"a writer after another process's reader with a lower token", []*histRecord{hold("a", "r", 5, 0, 1, 10, side("r")), hold("b", "r", 4, 2, 11, 15, side("w"))}, nil, nil, []string{"token-order"}},
		{"two processes' holdings share a token", []*histRecord{hold("a", "r", 5, 0, 1, 10, side("r")), hold("b", "r", 5, 2, 5, 15, side("r"))}, nil, nil, []string{"token-repeated"}},
		{"two of a semaphore's two permits", []*histRecord{hold("a", "s", 1, 0, 1, 10, side("p")), hold("b", "s", 2, 2, 5, 15, side("p"))}, nil, nil, nil},
		{"three of a semaphore's two permits", []*histRecord{hold("a", "s", 1, 0, 1, 10, side("p")), hold("b", "s", 2, 2, 5, 15, side("p")), hold("c", "s", 3, 3, 6, 15, side("p"))}, nil, nil, []string{"permits"}},
		{"three of two permits, one told in time", []*histRecord{hold("a", "s", 1, 0, 1, 400, side("p"), lostAt(300)), hold("b", "s", 2, 2, 5, 500, side("p")), hold("c", "s", 3, 3, 301, 500, side("p"))}, nil, nil, nil},
		{"other keys", []*histRecord{hold("a", "k", 1, 0, 1, 10), hold("b", "j", 1, 2, 5, 20)}, nil, nil, nil},
		{"overlap", []*histRecord{hold("a", "k", 1, 0, 1, 10), hold("b", "k", 2, 2, 5, 15)}, nil, nil, []string{"overlap"}},
		{"same process", []*histRecord{hold("a", "k", 1, 0, 1, 10), hold("a", "k", 2, 2, 5, 15)}, nil, nil, []string{"overlap"}},
		{"told in time", []*histRecord{hold("a", "k", 1, 0, 1, 400, lostAt(300)), hold("b", "k", 2, 2, 301, 500)}, nil, nil, nil},
		{"told late", []*histRecord{hold("a", "k", 1, 0, 1, 401, lostAt(400)), hold("b", "k", 2, 2, 150, 500)}, nil, nil, []string{"overlap"}},
		{"told by Unlock only", []*histRecord{hold("a", "k", 1, 0, 1, 10, toldByUnlock), hold("b", "k", 2, 2, 5, 15)}, nil, nil, []string{"overlap"}},
		{"paused", []*histRecord{hold("a", "k", 1, 0, 1, 1000, lostAt(950)), hold("b", "k", 2, 2, 500, 600)},
			[]histFault{pause("a", 100, 900)}, nil, nil},
		{"paused after the overlap began", []*histRecord{hold("a", "k", 1, 0, 1, 1000, lostAt(950)), hold("b", "k", 2, 2, 500, 600)},
			[]histFault{pause("a", 600, 900)}, nil, []string{"overlap"}},
		{"stalled as the lease ran out, told late", []*histRecord{hold("a", "k", 1, 0, 1, 401, lostAt(400)), hold("b", "k", 2, 2, 150, 500), stall("a", 100, 380)}, nil, nil, nil},
		{"stalled, never told", []*histRecord{hold("a", "k", 1, 0, 1, 401), hold("b", "k", 2, 2, 150, 500), stall("a", 100, 380)}, nil, nil, []string{"overlap"}},
		{"stalled long before the overlap", []*histRecord{hold("a", "k", 1, 0, 1, 401, lostAt(400)), hold("b", "k", 2, 2, 150, 500), stall("a", 10, 40)}, nil, nil, []string{"overlap"}},
		// a 60 ms stall as b took the key excuses a 1.75 s overlap: the notice came
		// 1.84 s after the stall ended, so the stall did not make it late
		{"stalled briefly, told long after the stall", []*histRecord{hold("a", "k", 1, 0, 1, 2001, lostAt(2000)), hold("b", "k", 2, 2, 150, 2500), stall("a", 100, 160)}, nil, nil, []string{"overlap"}},
		// the later holder's stall does not explain the earlier holder's belief
		{"the later holder stalled", []*histRecord{hold("a", "k", 1, 0, 1, 1000), hold("b", "k", 2, 2, 150, 1200, lostAt(1100)), stall("b", 100, 160)}, nil, nil, []string{"overlap"}},
		// told only by Unlock: it acted as owner to the end, whatever the stall
		{"stalled, told by Unlock only", []*histRecord{hold("a", "k", 1, 0, 1, 1000, toldByUnlock), hold("b", "k", 2, 2, 150, 1200), stall("a", 100, 160)}, nil, nil, []string{"overlap"}},
		{"stalled after the overlap began", []*histRecord{hold("a", "k", 1, 0, 1, 401, lostAt(400)), hold("b", "k", 2, 2, 150, 500), stall("a", 160, 380)}, nil, nil, []string{"overlap"}},
		{"paused in Lock", []*histRecord{hold("a", "k", 1, 0, 950, 1000, lostAt(951)), hold("b", "k", 2, 2, 500, 960)},
			[]histFault{pause("a", 10, 900)}, nil, nil},
		{"restart, told", []*histRecord{hold("a", "k", 1, 0, 1, 300, lostAt(290)), hold("b", "k", 2, 160, 200, 310)},
			[]histFault{restart}, nil, nil},
		{"restart, told by Unlock", []*histRecord{hold("a", "k", 1, 0, 1, 300, toldByUnlock), hold("b", "k", 2, 160, 200, 310)},
			[]histFault{restart}, nil, nil},
		{"restart, untold", []*histRecord{hold("a", "k", 1, 0, 1, 700), hold("b", "k", 2, 160, 200, 710)},
			[]histFault{restart}, nil, []string{"restart-untold"}},
		{"restart, released before the next renewal", []*histRecord{hold("a", "k", 1, 0, 1, 300), hold("b", "k", 2, 160, 200, 310)},
			[]histFault{restart}, nil, nil},
		{"restart, extended, released before the next renewal", []*histRecord{hold("a", "k", 1, 0, 1, 700, extended(2, 1200)), hold("b", "k", 2, 160, 200, 710)},
			[]histFault{restart}, nil, nil},
		{"restart, extended, untold past the renewal", []*histRecord{hold("a", "k", 1, 0, 1, 1400, extended(2, 1200)), hold("b", "k", 2, 160, 200, 1410)},
			[]histFault{restart}, nil, []string{"restart-untold"}},
		{"restart, same tenure", []*histRecord{hold("a", "k", 1, 0, 1, 120), hold("a", "k", 2, 110, 121, 300), hold("b", "k", 3, 160, 200, 310)},
			[]histFault{restart}, nil, nil},
		{"restart, another tenure", []*histRecord{hold("a", "k", 2, 160, 170, 300), hold("b", "k", 3, 160, 200, 310)},
			[]histFault{restart}, nil, []string{"overlap"}},
		{"restart, passed on within the wiped tenure after another took the key", []*histRecord{hold("a", "k", 1, 0, 1, 190), hold("b", "k", 5, 160, 170, 180), hold("a", "k", 2, 175, 190, 300)},
			[]histFault{restart}, nil, nil},
		{"restart, a reader lent the wiped read-hold after a writer", []*histRecord{hold("a", "r", 1, 0, 1, 190, side("r")), hold("b", "r", 5, 160, 170, 180, side("w")), hold("a", "r", 1, 175, 185, 300, side("r"))},
			[]histFault{restart}, nil, nil},
		{"a lower token passed on after another took the key, no restart", []*histRecord{hold("a", "k", 1, 0, 1, 190), hold("b", "k", 5, 160, 170, 180), hold("a", "k", 2, 175, 190, 300)},
			nil, nil, []string{"overlap", "token-order"}},
		{"restart after the overlap began", []*histRecord{hold("a", "k", 1, 0, 1, 300, lostAt(290)), hold("b", "k", 2, 2, 50, 310)},
			[]histFault{restart}, nil, []string{"overlap"}},
		{"killed", []*histRecord{{T: "begin", Proc: "a", G: 1, Key: "k", Token: 1, CallStart: 0, TAcq: ms}, hold("b", "k", 2, 2, 5, 15)},
			nil, map[string]int64{"a": 100}, nil},
		{"token order", []*histRecord{hold("a", "k", 5, 0, 1, 10), hold("b", "k", 3, 20, 21, 30)}, nil, nil, []string{"token-order"}},
		{"token order across a pause", []*histRecord{hold("a", "k", 1, 0, 950, 1000, lostAt(951)), hold("b", "k", 2, 2, 500, 960)},
			[]histFault{pause("a", 10, 900)}, nil, nil},
		{"token repeated", []*histRecord{hold("a", "k", 5, 0, 1, 10), hold("b", "k", 5, 20, 21, 30)}, nil, nil, []string{"token-repeated"}},
		{"stale write while owner", []*histRecord{hold("a", "k", 5, 0, 1, 10, write(5, false, 9))}, nil, nil, []string{"stale-write-while-owner"}},
		{"stale write after the notice", []*histRecord{hold("a", "k", 5, 0, 1, 400, lostAt(200), write(390, false, 9))}, nil, nil, nil},
		{"stale write refused once the lease may have run out", []*histRecord{hold("a", "k", 5, 0, 1, 400, write(300, false, 9))}, nil, nil, nil},
		{"forced", []*histRecord{hold("a", "k", 1, 0, 1, 400, toldByUnlock), hold("b", "k", 2, 120, 150, 500), forceAt("op", "k", 100)}, nil, nil, nil},
		{"forced after the overlap began", []*histRecord{hold("a", "k", 1, 0, 1, 400, toldByUnlock), hold("b", "k", 2, 2, 150, 500), forceAt("op", "k", 200)}, nil, nil, []string{"overlap"}},
		{"forced, never told", []*histRecord{hold("a", "k", 1, 0, 1, 400), hold("b", "k", 2, 120, 150, 500), forceAt("op", "k", 100)}, nil, nil, nil},
		{"another process forced", []*histRecord{hold("b", "k", 1, 0, 1, 400), hold("a", "k", 2, 120, 150, 500), forceAt("op", "k", 100)}, nil, nil, []string{"overlap"}},
		{"forced, passed on within the process", []*histRecord{hold("a", "k", 5, 0, 1, 110), forceAt("op", "k", 100), hold("b", "k", 10, 102, 130, 300), hold("a", "k", 6, 50, 140, 200)},
			nil, nil, nil},
		{"forced, a new tenure after it", []*histRecord{hold("a", "k", 5, 0, 1, 110), forceAt("op", "k", 100), hold("b", "k", 10, 102, 130, 300), hold("a", "k", 11, 50, 140, 200)},
			nil, nil, []string{"overlap"}},
		{"forced a lease before the holding's call", []*histRecord{hold("a", "k", 1, 605, 610, 900, toldByUnlock), hold("b", "k", 2, 620, 650, 1000), forceAt("op", "k", 100)}, nil, nil, []string{"overlap"}},
		{"forced just before the holding's call (a grant heard after the force)", []*histRecord{hold("a", "k", 1, 105, 110, 400, toldByUnlock), hold("b", "k", 2, 120, 150, 500), forceAt("op", "k", 100)}, nil, nil, nil},
		{"extend outcomes", []*histRecord{hold("a", "k", 1, 0, 1, 10, func(r *histRecord) {
			r.Calls = append(r.Calls, histCall{Kind: "extend", Start: 2 * ms, End: 3 * ms, Outcome: "ok"},
				histCall{Kind: "extend", Start: 4 * ms, End: 5 * ms, Outcome: "error", Err: "not held"})
		})}, nil, nil, []string{"extend-error"}},
		{"extend past the lease", []*histRecord{hold("a", "k", 1, 0, 1, 10, func(r *histRecord) {
			r.Calls = append(r.Calls, histCall{Kind: "extend", Start: 2 * ms, End: 9 * ms, Outcome: "timeout", Err: "no reply came before the lease ran out"})
		})}, nil, nil, nil},
		{"no token", []*histRecord{hold("a", "k", 1, 0, 1, 10, func(r *histRecord) { r.NoToken = true })}, nil, nil, []string{"no-token"}},
		{"no token: lost as it was taken", []*histRecord{hold("a", "k", 1, 0, 1, 10, lostAt(1), func(r *histRecord) { r.NoToken = true })}, nil, nil, nil},
		{"no token: stopped as it was taken", []*histRecord{hold("a", "k", 1, 0, 1, 1000, lostAt(700), func(r *histRecord) { r.NoToken = true })},
			[]histFault{pause("a", 1, 650)}, nil, nil},
		{"no token: stopped later", []*histRecord{hold("a", "k", 1, 0, 1, 1000, lostAt(700), func(r *histRecord) { r.NoToken = true })},
			[]histFault{pause("a", 300, 650)}, nil, []string{"no-token"}},
		{"fence accepted stale", []*histRecord{hold("a", "k", 5, 0, 1, 10, write(5, true, 0)), hold("b", "k", 3, 0, 20, 30, write(25, true, 5))},
			nil, nil, []string{"fence-accepted-stale"}},
		{"owner ended early", []*histRecord{hold("a", "k", 1, 0, 1, 10, func(r *histRecord) { r.EndedBefore, r.EndCause, r.TEnd = true, "deadline", 5*ms })},
			nil, nil, []string{"owner-ended-early"}},
		{"slow Lock", []*histRecord{hold("a", "k", 1, 0, 3100, 3110)}, nil, nil, []string{"slow-call"}},
		{"slow Lock, paused", []*histRecord{hold("a", "k", 1, 0, 3100, 3110)}, []histFault{pause("a", 10, 2900)}, nil, nil},
		{"slow Lock, its process stalled after the deadline as long as it overran", []*histRecord{hold("a", "k", 1, 0, 3100, 3110), stall("a", 1500, 1650)}, nil, nil, nil},
		{"slow Lock, its process stalled as long before the deadline", []*histRecord{hold("a", "k", 1, 0, 3100, 3110), stall("a", 500, 650)}, nil, nil, []string{"slow-call"}},
		{"slow Lock, its process stalled across the deadline, less after it than it overran", []*histRecord{hold("a", "k", 1, 0, 3100, 3110), stall("a", 850, 1090)}, nil, nil, []string{"slow-call"}},
		{"slow Lock, its process stalled across the deadline, as long after it as it overran", []*histRecord{hold("a", "k", 1, 0, 3100, 3110), stall("a", 850, 1150)}, nil, nil, nil},
		// an Unlock's deadline is its start plus the lease (410 ms here): it overran its bound by 100 ms
		{"slow Unlock, its process stalled after the deadline as long as it overran", []*histRecord{hold("a", "k", 1, 0, 1, 10, slowUnlock), stall("a", 1000, 1150)}, nil, nil, nil},
		{"slow Unlock, its process stalled as long before the deadline", []*histRecord{hold("a", "k", 1, 0, 1, 10, slowUnlock), stall("a", 100, 250)}, nil, nil, []string{"slow-call"}},
		{"slow Lock, its process stalled for less", []*histRecord{hold("a", "k", 1, 0, 3100, 3110), stall("a", 1500, 1550)}, nil, nil, []string{"slow-call"}},
		{"slow Lock, another process stalled", []*histRecord{hold("a", "k", 1, 0, 3100, 3110), stall("b", 500, 700)}, nil, nil, []string{"slow-call"}},
		{"Lock error", []*histRecord{{T: "op", Proc: "a", G: 1, Key: "k", Calls: []histCall{{Kind: "lock_short", D: 10 * ms, Start: 0, End: 10 * ms, Outcome: "error", Err: "boom"}}}},
			nil, nil, []string{"lock-error"}},
		{"Redis error without a fault", []*histRecord{hold("a", "k", 1, 0, 1, 10, func(r *histRecord) { r.Calls[1].Outcome, r.Calls[1].Redis = "redis", true })},
			nil, nil, []string{"redis-error-without-fault"}},
		{"Redis error in a black hole", []*histRecord{hold("a", "k", 1, 0, 1, 10, func(r *histRecord) { r.Calls[1].Outcome, r.Calls[1].Redis = "redis", true })},
			[]histFault{{Kind: "blackhole", Proc: "a", Start: 0, End: 5 * ms}}, nil, nil},
		{"Redis error in a stall", []*histRecord{hold("a", "k", 1, 0, 1, 10, func(r *histRecord) {
			r.Calls[1].Outcome, r.Calls[1].Redis, r.Calls[1].Err = "redis", true, "dlock: redis release \"k\": no answer within the request's bound"
		}), stall("a", 8, 70)},
			nil, nil, nil},
		// a 60 ms stall cannot time out a call bounded by seconds: a Redis error that
		// is not about time (a script's runtime error) is not excused by it
		{"a script error in a long Lock that a stall crossed", []*histRecord{hold("a", "k", 1, 0, 1, 3000, func(r *histRecord) {
			r.Calls[1].Outcome, r.Calls[1].Redis, r.Calls[1].Start, r.Calls[1].End = "redis", true, 2000*ms, 2900*ms
			r.Calls[1].Err = "dlock: unlock \"k\": ERR user_script:40: attempt to compare nil with number"
		}), stall("a", 2500, 2560)}, nil, nil, []string{"redis-error-without-fault"}},
		{"Unlock not held", []*histRecord{hold("a", "k", 1, 0, 1, 10, func(r *histRecord) { r.Calls[1].Outcome = "error" })}, nil, nil, []string{"unlock-error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &histRun{t: t, lease: histLease, dir: t.TempDir(), faults: tc.faults, end: int64(4 * time.Second)}
			byProc := map[string][]*histRecord{}
			for _, rec := range tc.recs {
				rec.Seq = int64(len(byProc[rec.Proc]) + 1)
				byProc[rec.Proc] = append(byProc[rec.Proc], rec)
			}
			for _, id := range slices.Sorted(maps.Keys(byProc)) {
				p := &histProc{id: id, log: filepath.Join(r.dir, id+".jsonl"), done: make(chan struct{}), killed: tc.killed[id] * ms}
				close(p.done)
				var b []byte
				start := &histRecord{T: "start", Proc: id, Pid: int(id[0])}
				if id == "a" {
					start.Pid = 1
				}
				for _, rec := range append(append([]*histRecord{start}, byProc[id]...), &histRecord{T: "exit", Proc: id}) {
					line, _ := json.Marshal(rec)
					b = append(append(b, line...), '\n')
				}
				if err := os.WriteFile(p.log, b, 0o644); err != nil {
					t.Fatal(err)
				}
				r.all = append(r.all, p)
			}
			r.analyse()
			got := slices.Sorted(maps.Keys(r.viol))
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations %v, want %v: %v", got, tc.want, r.viol)
			}
		})
	}
}

// Rule (5)'s judgement of a key found 3 leases after the helpers exited.
func TestHistoryLeftoverRule(t *testing.T) {
	lease := 400 * time.Millisecond
	for _, c := range []struct {
		key  string
		ttl  time.Duration
		want bool
	}{
		{"{DLOCK_HIST_r3}:shared:kind", -1, false},         // a shared key without a TTL
		{"{DLOCK_HIST_r3}:shared:kind", -2, true},          // gone between SCAN and PTTL
		{"{DLOCK_HIST_r3}:shared:gone", 0, true},           // expiring within the millisecond
		{"DLOCK_HIST_k0", 0, false},                        // a lock key, whatever its TTL
		{"{DLOCK_HIST_r3}:shared:kind", 5 * lease, true},   // living as long as its settled lockers
		{"{DLOCK_HIST_r3}:shared:kind", 30 * lease, false}, // longer than any of them
		{"{DLOCK_HIST_k0}:fence", time.Hour, true},
		{"{DLOCK_HIST_k0}:done:p-", 30 * lease, false},
		{"{DLOCK_HIST_k0}:removed:p-7", 8 * lease, true}, // a force's answer, as long as the marks
		{"{DLOCK_HIST_k0}:removed:p-7", -1, false},
		{"DLOCK_HIST_k0", time.Second, false}, // a lock key still held
	} {
		if got := allowedLater(c.key, c.ttl, lease); got != c.want {
			t.Errorf("allowedLater(%s, %v) = %v, want %v", c.key, c.ttl, got, c.want)
		}
	}
}
