package reliability_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// The history helper: one OS process of TestHistory (history_test.go). It runs GOROUTINES
// goroutines, each looping over random lock calls on KEYS keys of type HIST until END, and
// appends one JSON line per event to its LOG file, unbuffered (one write(2) per line), so that
// what a process killed with kill -9 had logged is kept.

// monoNow reads CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine,
// so the test can put the events of all helpers and its own faults on one time line.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// histCall is one call to the lock: Kind is lock_short, lock_long, trylock (each with the
// deadline D of its context), reenter (Lock with the owner context), unlock_inner (the Unlock
// of the re-entry) or unlock; Start and End are monotonic nanoseconds around the call.
type histCall struct {
	Kind    string `json:"k"`
	D       int64  `json:"d,omitempty"` // the deadline of a Lock, TryLock or force; the lease of an Extend
	Start   int64  `json:"s"`
	End     int64  `json:"e"`
	Outcome string `json:"o"`             // see outcome
	Err     string `json:"err,omitempty"` // the error, if any
	Redis   bool   `json:"re,omitempty"`  // the error has a *RedisProcessError in its chain
}

// histWrite is a holding's write to the fence store.
type histWrite struct {
	Start    int64  `json:"s"`
	End      int64  `json:"e"`
	Accepted bool   `json:"ok"`
	Stored   uint64 `json:"st"` // the token the store held before the write
	Err      string `json:"err,omitempty"`
}

// histRecord is one line of a helper's log. T says which:
//
//	"begin": written right after an acquisition (Key, Token, CallStart, TAcq), so that a holding
//	         of a process killed before it released is known;
//	"op":    one iteration of a goroutine, written at its end: its calls and, if it acquired,
//	         the holding;
//	"start": the helper's first line, with its process id;
//	"force": an operator's ForceRelease of Key (State, then ForceRelease of the holder shown);
//	"stall": the helper's process ran nothing for a while (a ticker's wake-up came late by at
//	         least histStallMin: the machine's load, a long GC pause): From, To;
//	"exit":  the helper's last line, after its generator was closed: Close's error and the
//	         goroutine-leak check.
type histRecord struct {
	T    string `json:"t"`
	Proc string `json:"p"` // slot.incarnation
	G    int    `json:"g,omitempty"`
	Seq  int64  `json:"n,omitempty"`
	Key  string `json:"key,omitempty"`

	Calls []histCall `json:"calls,omitempty"`

	Acquired  bool   `json:"acq,omitempty"`
	Token     uint64 `json:"tok,omitempty"`
	NoToken   bool   `json:"notok,omitempty"` // FencingToken said the owner context does not own the lock
	Side      string `json:"side,omitempty"`  // "" the mutex; "r" or "w" a read-write lock's read or write side; "p" a semaphore's permit
	CallStart int64  `json:"cs,omitempty"`    // start of the acquiring call
	TAcq      int64  `json:"ta,omitempty"`    // right after Lock/TryLock returned
	TRel      int64  `json:"tr,omitempty"`    // right before Unlock was called
	Long      bool   `json:"long,omitempty"`  // a hold meant to outlast the lease

	// The owner context: when it ended (observed by context.AfterFunc) and with what cause.
	TEnd     int64  `json:"te,omitempty"`
	EndCause string `json:"ec,omitempty"` // lost, released, deadline, canceled, closed or the cause
	// EndedBefore: at TRel the owner context had already ended (with EndCause).
	EndedBefore bool       `json:"eb,omitempty"`
	ToldCtx     bool       `json:"tc,omitempty"` // the owner context's cause matched ErrLockLost
	ToldUnlock  bool       `json:"tu,omitempty"` // Unlock returned an error matching ErrLockLost
	UnlockErr   string     `json:"ue,omitempty"`
	Write       *histWrite `json:"w,omitempty"`

	// force: an operator's ForceRelease of Key (Calls[0] spans State and ForceRelease); Forced
	// says whether it removed Holder, the locker State had shown.
	Forced bool   `json:"forced,omitempty"`
	Holder string `json:"holder,omitempty"`

	// start: the helper's first line: its process id (a locker names its process by it).
	Pid int `json:"pid,omitempty"`

	// stall: the last wake-up of the watcher before the stall, and the first after it.
	From int64 `json:"sf,omitempty"`
	To   int64 `json:"sto,omitempty"`

	// exit
	CloseErr string `json:"close,omitempty"`
	Leak     string `json:"leak,omitempty"`
	Iters    int64  `json:"iters,omitempty"`
	Copies   int64  `json:"copies,omitempty"` // writes delivered a second time (dupHook)
}

// histLog appends records to a file, one write per line.
type histLog struct {
	mu  sync.Mutex
	f   *os.File
	err error
}

func (l *histLog) put(r *histRecord) {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(b); err != nil && l.err == nil {
		l.err = err
	}
}

// fenceScript is the fence store's write: it keeps per key the largest token written and
// accepts a write only with a larger one. It returns {accepted, the token stored before}.
var fenceScript = redis.NewScript(`
local stored = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) > stored then
    redis.call('set', KEYS[1], ARGV[1])
    return {1, stored}
end
return {0, stored}`)

// historyHelper runs the history workload on g (over c, which goes through this process's own
// fault proxy) and the fence store FENCE_ADDR. Parameters: PROC (its name in the logs), LOG,
// END (monotonic ns), GOROUTINES, KEYS, LEASE.
func historyHelper(g *dlock.Generator, c *redis.Client) int {
	dup := &dupHook{lease: envDuration("LEASE")}
	c.AddHook(dup)
	f, err := os.OpenFile(env("LOG"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	defer f.Close()
	end, _ := strconv.ParseInt(env("END"), 10, 64)
	fence := redis.NewClient(&redis.Options{Addr: env("FENCE_ADDR")})
	w := histWorkload{
		g: g, fence: fence, log: &histLog{f: f}, proc: env("PROC"),
		keys: envInt("KEYS"), lease: envDuration("LEASE"),
	}
	if env("HOLDOVER") == "true" {
		w.again = make([]string, envInt("GOROUTINES")+1)
	}
	w.log.put(&histRecord{T: "start", Proc: w.proc, Pid: os.Getpid()})
	stopWatch := watchStalls(w.log, w.proc)
	warmUp(c, envInt("GOROUTINES"))
	var wg sync.WaitGroup
	iters := make([]int64, envInt("GOROUTINES"))
	for i := range iters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for monoNow() < end {
				iters[i]++
				w.iteration(i+1, iters[i])
			}
		}()
	}
	wg.Wait()
	stopWatch()
	exit := &histRecord{T: "exit", Proc: w.proc}
	for _, n := range iters {
		exit.Iters += n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := g.Close(ctx); err != nil {
		exit.CloseErr = err.Error()
	}
	cancel()
	exit.Copies = dup.wait()
	_ = fence.Close()
	_ = c.Close() // runHelper closes it again; a second Close only returns an error
	// Goroutine leaks, with a retry window: what Close stopped may take a moment to return.
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
	w.log.put(exit)
	if w.log.err != nil {
		fmt.Fprintln(os.Stderr, "history helper: log:", w.log.err)
		return 2
	}
	return 0
}

// warmUp readies a new helper before its workload, as a long-running process is: it loads the
// scripts into the lock's Redis and opens a connection (with its handshake) for each of its n
// goroutines, at once. The workload's first calls otherwise paid for this process's start-up
// — dials through the fault proxy, a NOSCRIPT and the EVAL of shared.lua, four -race helpers
// starting together — within the family's request bound (a third of the lease, 133 ms):
// under load a first TryRLock got no answer within it, though no stall of 50 ms was logged
// (redis-error-without-fault). Best effort: a call that fails here is made again in the
// workload, where rule (4) judges it. (A restart empties the server again; the requests after
// it still take the EVAL fallback.)
func warmUp(c *redis.Client, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p, err := processor.NewRedisLockProcessor(c, processor.Options{}); err == nil {
		_ = p.Preload(ctx)
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { _ = c.Ping(ctx).Err() })
	}
	wg.Wait()
}

// watchStalls logs a "stall" record whenever a ticker of histStallTick wakes up at least
// histStallMin after its previous wake-up: the process ran nothing meanwhile, the lease
// watchdog included. It returns a function that stops the watcher and waits for it.
func watchStalls(log *histLog, proc string) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
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
			if now-last >= int64(histStallMin) {
				log.put(&histRecord{T: "stall", Proc: proc, From: last, To: now})
			}
			last = now
		}
	}()
	return func() { close(done); <-stopped }
}

type histWorkload struct {
	g     *dlock.Generator
	fence *redis.Client
	log   *histLog
	proc  string
	keys  int
	lease time.Duration
	// again is, in a helper with WithHoldOver, the mutex key each goroutine (from 1) took
	// last, which half of its mutex iterations take again (see TestHistory); nil elsewhere.
	again []string
}

func randDuration(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rand.Int64N(int64(hi-lo)+1))
}

// Deadlines of the calls.
const (
	histShortMin, histShortMax = 5 * time.Millisecond, 50 * time.Millisecond
	histLongMin, histLongMax   = 200 * time.Millisecond, time.Second
	histTryDeadline            = 500 * time.Millisecond
)

// dupHook delivers some of the library's writes a second time, a while later, as a client
// that sends a script again after a read timeout, or a network that delivers a packet late,
// would: every script but the read-only inspection, dupPercent of the time, after 0 to half
// a lease. The copy's reply is read by nobody.
type dupHook struct {
	lease  time.Duration
	mu     sync.Mutex
	done   bool           // under mu: wait has begun, no more copies
	wg     sync.WaitGroup // copies on their way; Add only under mu while !done, so never beside Wait
	copies atomic.Int64
}

const dupPercent = 3

func (d *dupHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (d *dupHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (d *dupHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := processor.ScriptName(cmd.Args()); name != "" && name != "inspect" && rand.IntN(100) < dupPercent {
			args := append([]any(nil), cmd.Args()...)
			delay := randDuration(0, d.lease/2)
			d.mu.Lock()
			if d.done {
				d.mu.Unlock()
				return err
			}
			d.copies.Add(1)
			d.wg.Add(1)
			d.mu.Unlock()
			go func() {
				defer d.wg.Done()
				time.Sleep(delay)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = next(ctx, redis.NewCmd(ctx, args...))
			}()
		}
		return err
	}
}

// wait waits for the copies still on their way and returns how many were sent.
func (d *dupHook) wait() int64 {
	d.mu.Lock()
	d.done = true
	d.mu.Unlock()
	d.wg.Wait()
	return d.copies.Load()
}

// iteration: pick a key and a call; if it acquired: maybe re-enter, write the token to the
// fence store (right after acquiring or right before releasing), hold, unlock.
func (w *histWorkload) iteration(gi int, seq int64) {
	// Most iterations take a mutex ("k" keys); some a side of a read-write lock ("r" keys, 4
	// reads in 5) or a permit of a semaphore of histSemPermits ("s" keys).
	kind := "k"
	switch r := rand.IntN(100); {
	case r < 15:
		kind = "r"
	case r < 25:
		kind = "s"
	}
	key := kind + strconv.Itoa(rand.IntN(w.keys))
	if w.again != nil && kind == "k" {
		if k := w.again[gi]; k != "" && rand.IntN(2) == 0 {
			key = k
		}
		w.again[gi] = key
	}
	rec := &histRecord{T: "op", Proc: w.proc, G: gi, Seq: seq, Key: key}
	defer w.log.put(rec)
	var l dlock.Part
	var mutex *dlock.DistributedReentrantLock
	var err error
	switch kind {
	case "k":
		mutex, err = w.g.Gen("HIST", key)
		l = mutex
	case "r":
		var rw *dlock.RWLock
		rw, err = w.g.GenRW("HIST", key)
		rec.Side = "w"
		if rand.IntN(5) != 0 {
			rec.Side = "r"
		}
		if l = rw.ReadSide(); rec.Side == "w" {
			l = rw.WriteSide()
		}
	case "s":
		var sem *dlock.Semaphore
		sem, err = w.g.GenSemaphore("HIST", key, histSemPermits)
		rec.Side = "p"
		l = sem.Permits(1)
	}
	if err != nil {
		rec.Calls = append(rec.Calls, histCall{Kind: "gen", Outcome: "error", Err: err.Error()})
		time.Sleep(time.Millisecond)
		return
	}
	if mutex != nil && rand.IntN(200) == 0 {
		w.force(mutex, rec)
		return
	}

	var call histCall
	switch r := rand.IntN(100); {
	case r < 40:
		call = histCall{Kind: "lock_short", D: int64(randDuration(histShortMin, histShortMax))}
	case r < 75:
		call = histCall{Kind: "lock_long", D: int64(randDuration(histLongMin, histLongMax))}
	default:
		call = histCall{Kind: "trylock", D: int64(histTryDeadline)}
	}
	// The context's cancel runs only after Unlock: the owner context may end only when the
	// lock is released, lost or closed.
	lctx, lcancel := context.WithTimeout(context.Background(), time.Duration(call.D))
	defer lcancel()
	var owned context.Context
	ok := false
	call.Start = monoNow()
	if call.Kind == "trylock" {
		owned, ok, err = l.TryLock(lctx)
	} else {
		owned, err = l.Lock(lctx)
		ok = err == nil
	}
	call.End = monoNow()
	call.Outcome, call.Err, call.Redis = outcome(call.Kind, ok, err)
	rec.Calls = append(rec.Calls, call)
	if !ok {
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		}
		return
	}

	rec.Acquired, rec.CallStart, rec.TAcq = true, call.Start, call.End
	token, tokOK := l.FencingToken(owned)
	rec.Token, rec.NoToken = token, !tokOK
	type ended struct {
		at    int64
		cause error
	}
	endc := make(chan ended, 1)
	stopWatch := context.AfterFunc(owned, func() { endc <- ended{monoNow(), context.Cause(owned)} })
	w.log.put(&histRecord{T: "begin", Proc: w.proc, G: gi, Seq: seq, Key: key, Token: token, Side: rec.Side,
		CallStart: rec.CallStart, TAcq: rec.TAcq})

	// Re-entry, sometimes.
	if rand.IntN(5) == 0 {
		rc := histCall{Kind: "reenter", Start: monoNow()}
		o2, err := l.Lock(owned)
		rc.End = monoNow()
		rc.Outcome, rc.Err, rc.Redis = outcome("reenter", err == nil, err)
		rec.Calls = append(rec.Calls, rc)
		if err == nil {
			uc := histCall{Kind: "unlock_inner", Start: monoNow()}
			err := l.Unlock(o2)
			uc.End = monoNow()
			uc.Outcome, uc.Err, uc.Redis = outcome("unlock_inner", err == nil, err)
			rec.Calls = append(rec.Calls, uc)
		}
	}

	// Fenced writes by the mutex's holders and a read-write lock's writers, each with a token
	// of its own (readers and a semaphore's owners share their holding's).
	fenced := mutex != nil || rec.Side == "w"
	writeFirst := rand.IntN(2) == 0 && fenced
	if writeFirst {
		rec.Write = w.fencedWrite(key, token)
	}
	var hold time.Duration
	switch r := rand.IntN(100); {
	case r < 80:
		hold = randDuration(0, 5*time.Millisecond)
	case r < 95:
		hold = randDuration(5*time.Millisecond, 50*time.Millisecond)
	default:
		hold, rec.Long = randDuration(w.lease/2, w.lease*5/2), true
		// Announce the hold on the fence store's server, so that the test can aim a fault at it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		w.fence.Set(ctx, fmt.Sprintf("hold:%s:%d", w.proc, gi), monoNow()+int64(hold), hold)
		cancel()
	}
	if mutex != nil && rand.IntN(6) == 0 { // Extend, to a lease between half and three times the configured one
		to := randDuration(w.lease/2, 3*w.lease).Round(time.Millisecond)
		ec := histCall{Kind: "extend", D: int64(to), Start: monoNow()}
		err := mutex.Extend(owned, to)
		ec.End = monoNow()
		ec.Outcome, ec.Err, ec.Redis = outcome("extend", err == nil, err)
		rec.Calls = append(rec.Calls, ec)
	}
	if hold > 0 {
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-owned.Done(): // lost (or ended otherwise): stop holding
			t.Stop()
		}
	}
	if !writeFirst && fenced {
		rec.Write = w.fencedWrite(key, token)
	}

	uc := histCall{Kind: "unlock"}
	rec.TRel = monoNow()
	uc.Start = rec.TRel
	if owned.Err() != nil {
		rec.EndedBefore = true
	}
	err = l.Unlock(owned)
	uc.End = monoNow()
	uc.Outcome, uc.Err, uc.Redis = outcome("unlock", err == nil, err)
	rec.Calls = append(rec.Calls, uc)
	if err != nil {
		rec.UnlockErr = err.Error()
	}
	rec.ToldUnlock = errors.Is(err, dlock.ErrLockLost)
	// The owner context ended if it is done now, or if it ended after that check and before
	// stopWatch (which then returns false). Once it is done, the AfterFunc is sure to run, so
	// stopWatch must not be called then: it could still stop it.
	if owned.Err() != nil || !stopWatch() { // the owner context ended: when, and why
		e := <-endc
		rec.TEnd = e.at
		switch {
		case errors.Is(e.cause, dlock.ErrLockLost):
			rec.EndCause, rec.ToldCtx = "lost", true
		case errors.Is(e.cause, dlock.ErrClosed):
			rec.EndCause = "closed"
		case errors.Is(e.cause, context.DeadlineExceeded):
			rec.EndCause = "deadline"
		case errors.Is(e.cause, context.Canceled) && !rec.EndedBefore:
			rec.EndCause = "released"
		case errors.Is(e.cause, context.Canceled):
			rec.EndCause = "canceled"
		default:
			rec.EndCause = e.cause.Error()
		}
	}
}

// histSemPermits is the permits of the history's semaphores.
const histSemPermits = 2

// force plays an operator: it reads who holds l's key and force-releases that holder.
func (w *histWorkload) force(l *dlock.DistributedReentrantLock, rec *histRecord) {
	rec.T = "force"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := histCall{Kind: "force", D: int64(2 * time.Second), Start: monoNow()}
	st, err := l.State(ctx)
	if err == nil && st.Holder != "" {
		rec.Holder = st.Holder
		rec.Forced, err = l.ForceRelease(ctx, st.Holder)
	}
	c.End = monoNow()
	c.Outcome, c.Err, c.Redis = outcome("force", err == nil, err)
	rec.Calls = append(rec.Calls, c)
}

// fencedWrite writes token to the fence store's key for key.
func (w *histWorkload) fencedWrite(key string, token uint64) *histWrite {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wr := &histWrite{Start: monoNow()}
	res, err := fenceScript.Run(ctx, w.fence, []string{"fence:" + key}, strconv.FormatUint(token, 10)).Int64Slice()
	wr.End = monoNow()
	if err != nil || len(res) != 2 {
		wr.Err = fmt.Sprintf("%v %v", res, err)
		return wr
	}
	wr.Accepted, wr.Stored = res[0] == 1, uint64(res[1])
	return wr
}

// outcome names what a call returned: ok; busy (TryLock: held); timeout (its context's
// deadline: for Lock, an error matching ErrNotObtained and DeadlineExceeded); lost (matches
// ErrLockLost); redis (a *RedisProcessError, or a deadline with one in the chain); closed;
// error (anything else, which the checker counts as unexpected for that kind of call). It also
// returns the error's text and whether Redis failed: a *RedisProcessError is in its chain
// whose cause is not the caller's own deadline or cancellation (a request cut short by the
// caller's deadline on a loaded machine is not a fault of Redis).
func outcome(kind string, ok bool, err error) (string, string, bool) {
	if ok && err == nil {
		return "ok", "", false
	}
	if err == nil {
		return "busy", "", false
	}
	var pe *dlock.RedisProcessError
	redisFault := errors.As(err, &pe) && !errors.Is(pe, context.DeadlineExceeded) && !errors.Is(pe, context.Canceled)
	o := "error"
	switch {
	case errors.Is(err, dlock.ErrLockLost):
		o = "lost"
	case errors.Is(err, dlock.ErrClosed):
		o = "closed"
	case (kind == "trylock" || kind == "force" || kind == "extend") && errors.Is(err, context.DeadlineExceeded):
		o = "timeout"
	case kind != "trylock" && errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, context.DeadlineExceeded):
		o = "timeout"
	case errors.As(err, &pe):
		o = "redis"
	}
	return o, err.Error(), redisFault
}
