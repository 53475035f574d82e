package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// workerArgs are what the parent passes to a worker process on its command line.
type workerArgs struct {
	Impl       string
	Mode       string // "loop" (trip and hot) or "handoff"
	Redis      string
	Goroutines int
	Work       time.Duration
	Lease      time.Duration
	ID         int           // index of the process within the row
	Handoffs   int           // handoff mode: hand-offs to make
	Reads      int           // loop mode: the percentage of acquisitions that take the read side, where there is one
	Idle       bool          // loop mode: the work is spent waiting (a sleep), not computing
	HandOff    time.Duration // dlock's hand-off limit (WithLocalHandOff); 0 for its default
}

func (a workerArgs) flags() []string {
	return []string{"--worker", "--impl=" + a.Impl, "--mode=" + a.Mode, "--redis=" + a.Redis,
		fmt.Sprint("--goroutines=", a.Goroutines), "--work=" + a.Work.String(),
		"--lease=" + a.Lease.String(), fmt.Sprint("--id=", a.ID), fmt.Sprint("--handoffs=", a.Handoffs),
		fmt.Sprint("--reads=", a.Reads), fmt.Sprint("--idle=", a.Idle), "--hand-off=" + a.HandOff.String()}
}

func parseWorkerArgs(args []string) (workerArgs, error) {
	var a workerArgs
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.Bool("worker", true, "")
	fs.StringVar(&a.Impl, "impl", "", "")
	fs.StringVar(&a.Mode, "mode", "loop", "")
	fs.StringVar(&a.Redis, "redis", "", "")
	fs.IntVar(&a.Goroutines, "goroutines", 1, "")
	fs.DurationVar(&a.Work, "work", 0, "")
	fs.DurationVar(&a.Lease, "lease", 60*time.Millisecond, "")
	fs.IntVar(&a.ID, "id", 0, "")
	fs.IntVar(&a.Handoffs, "handoffs", 0, "")
	fs.IntVar(&a.Reads, "reads", 0, "")
	fs.BoolVar(&a.Idle, "idle", false, "")
	fs.DurationVar(&a.HandOff, "hand-off", 0, "")
	return a, fs.Parse(args)
}

// startSignal is the line the parent writes on every worker's stdin once all are ready: the
// goroutines start at Start, acquisitions are counted from Measure, and everything stops at
// End (the row's overall deadline).
type startSignal struct {
	Start, Measure, End int64 // Unix nanoseconds
}

// workerResult is what a worker prints as one JSON line on its stdout when it is done.
type workerResult struct {
	PerGoroutine []int64    `json:"per_goroutine"` // acquisitions in the measured window
	Total        int64      `json:"total"`         // acquisitions over the whole run
	Cmds         int64      `json:"cmds"`          // commands sent in the measured window
	CPUNs        int64      `json:"cpu_ns"`        // loop: CPU time (user and system) the process spent in the measured window
	CmdsTotal    int64      `json:"cmds_total"`    // commands sent over the whole run
	WorkNs       int64      `json:"work_ns"`       // time spent in work, in the window
	Errors       int64      `json:"errors"`
	Retries      int64      `json:"retries"`
	FirstErr     string     `json:"first_err,omitempty"`
	Holds        []int64    `json:"holds,omitempty"`          // loop: start and end of every hold, Unix ns, flattened
	SharedHolds  []int64    `json:"shared_holds,omitempty"`   // loop: those of the read side, likewise
	Waits        [][2]int64 `json:"waits,omitempty"`          // loop: hist of the waits of the window's acquisitions, as (bucket, count) pairs
	WriteWaits   [][2]int64 `json:"write_waits,omitempty"`    // rw: those of the write side alone
	WriteWaitMax int64      `json:"write_wait_max,omitempty"` // rw: the longest write wait, ns
	T0           []int64    `json:"t0,omitempty"`             // handoff: wall time before Unlock, by hand-off
	T1           []int64    `json:"t1,omitempty"`             // handoff: wall time after Lock, by hand-off
}

// runWorker is the hidden --worker mode: it sets up one implementation on its own client,
// says "ready", waits for the start signal, runs, and prints its result.
func runWorker(args []string) error {
	a, err := parseWorkerArgs(args)
	if err != nil {
		return err
	}
	cnt := &counter{}
	client := redis.NewClient(&redis.Options{Addr: a.Redis})
	client.AddHook(cnt)
	defer client.Close()
	if err := client.Ping(context.Background()).Err(); err != nil {
		return err
	}
	impl, err := newImpl(a.Impl, client, a.Lease, a.HandOff)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()

	var sig startSignal
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for the start signal: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &sig); err != nil {
		return err
	}
	if dir := os.Getenv("DLOCK_BENCH_CPUPROFILE"); dir != "" { // where a worker's time goes
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-g%d-%d.prof", a.Mode, a.Impl, a.Goroutines, os.Getpid())))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if dir := os.Getenv("DLOCK_BENCH_TRACE"); dir != "" && a.ID == 1 { // one worker's execution trace
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-p%d.trace", a.Mode, a.Impl, os.Getpid())))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	var res *workerResult
	if a.Mode == "handoff" {
		res, err = handoffWorker(a, impl, cnt, sig)
	} else {
		res = loopWorker(a, impl, cnt, sig)
	}
	if cerr := impl.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return err
	}
	return out.Flush()
}

// cpuTime returns the CPU time, user and system, this process has spent so far, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// waitUntil sleeps until the Unix time t (nanoseconds).
func waitUntil(t int64) { time.Sleep(time.Until(time.Unix(0, t))) }

// idleWait waits d without computing. Below 2 ms it blocks the goroutine's thread in
// nanosleep: time.Sleep wakes through the runtime's poller, whose timeout has a resolution of
// 1 ms, so in a process with nothing else to do a 100 µs Sleep lasted 1.08 ms here, and in a
// busy one 0.3 ms. The hold would then depend on how busy the implementation keeps its
// process, and the quieter one would be charged for it. (nanosleep of 100 µs: 0.17 ms.)
func idleWait(d time.Duration) {
	if d >= 2*time.Millisecond {
		time.Sleep(d)
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem
	}
}

// preciseWait waits d: it sleeps d-1ms, then yields until d has passed. A plain Sleep
// overshoots by a scheduler tick, which would count as lock hold time.
func preciseWait(d time.Duration) {
	start := time.Now()
	if d > time.Millisecond {
		time.Sleep(d - time.Millisecond)
	}
	for time.Since(start) < d {
		runtime.Gosched()
	}
}

// errs counts failures and keeps the first message, with when it happened.
type errs struct {
	start      time.Time
	n, retries atomic.Int64
	once       sync.Once
	first      string
}

func (e *errs) add(err error) {
	if errors.Is(err, errRetry) {
		e.retries.Add(1)
		return
	}
	e.n.Add(1)
	e.once.Do(func() {
		e.first = fmt.Sprintf("%v after the start: %v", time.Since(e.start).Round(time.Millisecond), err)
	})
}

// maxHolds bounds the holds a worker records for the overlap check.
const maxHolds = 1 << 18

// loopWorker runs trip and hot: every goroutine does Lock, work, Unlock until the end.
func loopWorker(a workerArgs, impl Impl, cnt *counter, sig startSignal) *workerResult {
	measure, end := time.Unix(0, sig.Measure), time.Unix(0, sig.End)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	res := &workerResult{PerGoroutine: make([]int64, a.Goroutines)}
	var (
		e             = errs{start: time.Unix(0, sig.Start)}
		total, workNs atomic.Int64
		wg            sync.WaitGroup
		cmdsFirst     int64
		holdsMu       sync.Mutex
		waits         = newHist()
		writeWaits    = newHist()
	)
	cmdsFirst = cnt.n.Load()
	wg.Add(1)
	go func() { // the command count of the measured window
		defer wg.Done()
		waitUntil(sig.Measure)
		cmdsStart, cpuStart := cnt.n.Load(), cpuTime()
		waitUntil(sig.End)
		res.Cmds = cnt.n.Load() - cmdsStart
		res.CPUNs = cpuTime() - cpuStart
	}()
	for i := range a.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := impl.NewLocker()
			shared, _ := l.(SharedLocker)
			rng := rand.New(rand.NewPCG(uint64(a.ID), uint64(i)))
			var holds, sharedHolds []int64
			myWaits, myWriteWaits := newHist(), newHist()
			var myWriteMax int64
			defer func() {
				holdsMu.Lock()
				if len(res.Holds)+len(holds) <= 2*maxHolds {
					res.Holds = append(res.Holds, holds...)
				}
				if len(res.SharedHolds)+len(sharedHolds) <= 2*maxHolds {
					res.SharedHolds = append(res.SharedHolds, sharedHolds...)
				}
				waits.merge(myWaits)
				writeWaits.merge(myWriteWaits)
				res.WriteWaitMax = max(res.WriteWaitMax, myWriteMax)
				holdsMu.Unlock()
			}()
			waitUntil(sig.Start)
			sp := newSplit(a, i)
			defer sp.write()
			var asked time.Time // when this goroutine began to want the lock: its first Lock call since the last acquisition
			for time.Now().Before(end) {
				if asked.IsZero() {
					asked = time.Now()
				}
				read := shared != nil && rng.IntN(100) < a.Reads
				var unlock func() error
				var err error
				sp.enter()
				reg := trace.StartRegion(ctx, "wait")
				if read {
					unlock, err = shared.RLock(ctx)
				} else {
					unlock, err = l.Lock(ctx)
				}
				reg.End()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					e.add(err)
					time.Sleep(time.Millisecond)
					continue
				}
				t := time.Now()
				sp.leave(t, measure, end)
				wait := t.Sub(asked)
				asked = time.Time{}
				switch {
				case a.Work > 0 && a.Idle:
					idleWait(a.Work)
				case a.Work > 0:
					preciseWait(a.Work)
				}
				w := time.Since(t)
				switch {
				case read && len(sharedHolds) < 2*maxHolds/a.Goroutines:
					sharedHolds = append(sharedHolds, t.UnixNano(), time.Now().UnixNano())
				case !read && len(holds) < 2*maxHolds/a.Goroutines:
					holds = append(holds, t.UnixNano(), time.Now().UnixNano())
				}
				if err := unlock(); err != nil {
					e.add(err)
				}
				total.Add(1)
				if done := time.Now(); !done.Before(measure) && done.Before(end) {
					res.PerGoroutine[i]++
					workNs.Add(int64(w))
					myWaits.add(int64(wait))
					if shared != nil && !read {
						myWriteWaits.add(int64(wait))
						myWriteMax = max(myWriteMax, int64(wait))
					}
				}
			}
		}()
	}
	wg.Wait()
	res.Total, res.WorkNs = total.Load(), workNs.Load()
	res.Waits = waits.sparse()
	res.WriteWaits = writeWaits.sparse()
	res.CmdsTotal = cnt.n.Load() - cmdsFirst
	res.Errors, res.Retries, res.FirstErr = e.n.Load(), e.retries.Load(), e.first
	return res
}

// handoffHold is how long the holder keeps the lock in the handoff scenario, so that the
// other process is surely parked inside Lock when it releases.
const handoffHold = 3 * time.Millisecond

// handoffWorker plays one side of the ping-pong. Hand-off h is released by process h%2 and
// taken by the other. fd 3 reads the peer's "I have it" notes, fd 4 writes ours; a releaser
// waits for the note before calling Lock again, so the lock strictly alternates.
func handoffWorker(a workerArgs, impl Impl, cnt *counter, sig startSignal) (*workerResult, error) {
	peerIn, peerOut := os.NewFile(3, "peer-in"), os.NewFile(4, "peer-out")
	defer peerIn.Close()
	defer peerOut.Close()
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, sig.End))
	defer cancel()
	res := &workerResult{PerGoroutine: make([]int64, 1), T0: make([]int64, a.Handoffs), T1: make([]int64, a.Handoffs)}
	e := errs{start: time.Unix(0, sig.Start)}
	l := impl.NewLocker()
	note := make([]byte, 1)
	tell := func(b byte) error { _, err := peerOut.Write([]byte{b}); return err }
	hear := func() (bool, error) { // true when the peer took the lock
		if _, err := io.ReadFull(peerIn, note); err != nil {
			return false, err
		}
		return note[0] == 'a', nil
	}
	lock := func() (func() error, error) {
		for {
			unlock, err := l.Lock(ctx)
			if err == nil || ctx.Err() != nil {
				return unlock, err
			}
			e.add(err)
		}
	}
	cmds0 := cnt.n.Load()
	waitUntil(sig.Start)
	var unlock func() error
	if a.ID == 0 { // the first holder
		u, err := lock()
		if err != nil {
			_ = tell('x')
			return nil, err
		}
		unlock = u
		res.Total++
		if err := tell('a'); err != nil {
			return nil, err
		}
	} else if ok, err := hear(); err != nil || !ok {
		return nil, fmt.Errorf("the first holder did not start: %v", err)
	}
	done := 0
	for h := 0; h < a.Handoffs; h++ {
		if h%2 == a.ID { // release
			preciseWait(handoffHold)
			res.T0[h] = time.Now().UnixNano()
			if err := unlock(); err != nil {
				e.add(err)
			}
			unlock = nil
			ok, err := hear()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
		} else { // take
			u, err := lock()
			res.T1[h] = time.Now().UnixNano()
			if err != nil {
				_ = tell('x')
				break
			}
			unlock = u
			res.Total++
			res.PerGoroutine[0]++
			if err := tell('a'); err != nil {
				return nil, err
			}
		}
		done = h + 1
	}
	if unlock != nil {
		if err := unlock(); err != nil {
			e.add(err)
		}
	}
	res.T0, res.T1 = res.T0[:done], res.T1[:done]
	res.Cmds = cnt.n.Load() - cmds0
	res.CmdsTotal = res.Cmds
	res.Errors, res.Retries, res.FirstErr = e.n.Load(), e.retries.Load(), e.first
	return res, nil
}
