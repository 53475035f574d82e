package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Row is one measured point; it is printed as one JSON line with --json.
type Row struct {
	Scenario         string  `json:"scenario"` // trip, hot, cross, handoff, rw or sem
	Impl             string  `json:"impl"`
	Procs            int     `json:"procs"`
	Goroutines       int     `json:"goroutines"` // total over the processes
	WorkMs           float64 `json:"work_ms"`
	LeaseMs          int64   `json:"lease_ms"`
	HandOffMs        float64 `json:"hand_off_ms,omitempty"` // dlock rows: the hand-off limit set with --hand-off (absent: dlock's default)
	TPS              float64 `json:"tps"`                   // acquisitions per second in the window
	Efficiency       float64 `json:"efficiency"`            // tps × work seconds; 1.0 is the ceiling
	CmdsPerAcq       float64 `json:"cmds_per_acq"`
	RedisCallsPerAcq float64 `json:"redis_calls_per_acq"`
	WorkerCPUPerAcq  float64 `json:"worker_cpu_us_per_acq,omitempty"` // loop rows: the workers' CPU time (user and system, the work included) in the window, µs per acquisition
	RedisCPUPerAcq   float64 `json:"redis_cpu_us_per_acq,omitempty"`  // loop rows: Redis's CPU time (user and system) in the window, µs per acquisition
	HandoffP50Us     float64 `json:"handoff_p50_us"`
	HandoffP99Us     float64 `json:"handoff_p99_us"`
	WriteWaitP99Us   float64 `json:"write_wait_p99_us,omitempty"` // rw: the p99 wait of the write side's acquisitions
	WriteWaitMaxUs   float64 `json:"write_wait_max_us,omitempty"` // rw: the longest wait of a write-side acquisition
	WaitP99Us        float64 `json:"wait_p99_us"`                 // loop rows: p99 over all processes of the wait of the window's acquisitions, from calling Lock (the first call, if failed calls were retried) to its return
	WaitP50Us        float64 `json:"wait_p50_us,omitempty"`       // loop rows: the same waits' median
	WaitP999Us       float64 `json:"wait_p999_us,omitempty"`      // loop rows: the same waits' 99.9th percentile
	RTTIdleP50Us     float64 `json:"rtt_idle_p50_us,omitempty"`   // handoff: PING round trip after rttIdle of idleness, just before the row
	RTTIdleP99Us     float64 `json:"rtt_idle_p99_us,omitempty"`
	HandoffMeanUs    float64 `json:"handoff_mean_us,omitempty"`
	HandoffMaxUs     float64 `json:"handoff_max_us,omitempty"`
	Handoffs         int     `json:"handoffs,omitempty"`
	MinPerGoroutine  int64   `json:"min_per_goroutine"`
	MaxPerGoroutine  int64   `json:"max_per_goroutine"`
	MinPerProc       int64   `json:"min_per_proc"` // the fewest acquisitions of one process
	MaxPerProc       int64   `json:"max_per_proc"`
	Acquisitions     int64   `json:"acquisitions"` // in the window
	WindowS          float64 `json:"window_s"`
	WorkActualMs     float64 `json:"work_actual_ms,omitempty"` // mean measured work time
	Errors           int64   `json:"errors"`
	Retries          int64   `json:"retries"`  // redsync Lock calls that gave up and were retried
	Overlaps         int64   `json:"overlaps"` // holds that began before another hold (any process) ended; rw: a write beside any hold, a read beside a write; sem: a hold that began while semPermits others were held
	FirstErr         string  `json:"first_err,omitempty"`
	Load1            float64 `json:"load1"` // the machine's 1-minute load average after the row
}

// spec is one row to run.
type spec struct {
	Scenario   string
	Impl       string
	Procs      int
	Goroutines int // total
	Work       time.Duration
	Lease      time.Duration
	Warmup     time.Duration // loop rows: run before the measured window
	Window     time.Duration // loop rows: the measured window; handoff: the time cap
	Handoffs   int
	Reads      int  // rw: the percentage of acquisitions that take the read side
	Idle       bool // the work is spent waiting, not computing
}

// runner runs rows against one Redis server.
type runner struct {
	exe    string
	addr   string
	client *redis.Client // the parent's own client: FLUSHALL and INFO
	// handOff is the dlock rows' hand-off limit (WithLocalHandOff); 0 for dlock's default.
	handOff time.Duration
}

// worker is one started worker process.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func (w *worker) readLine(timeout time.Duration) (string, error) {
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() { s, err := w.out.ReadString('\n'); ch <- line{s, err} }()
	select {
	case l := <-ch:
		return strings.TrimSpace(l.s), l.err
	case <-time.After(timeout):
		return "", fmt.Errorf("worker gave no answer within %v", timeout)
	}
}

// run runs one row: it starts the workers, waits until all are ready, starts them together,
// samples Redis's command statistics and gathers the workers' results.
func (r *runner) run(ctx context.Context, s spec) (Row, error) {
	if err := r.client.FlushAll(ctx).Err(); err != nil {
		return Row{}, err
	}
	mode := "loop"
	var rtt50, rtt99 float64
	if s.Scenario == "handoff" {
		mode = "handoff"
		var err error
		if rtt50, rtt99, err = idleRTT(ctx, r.addr, rttSamples, rttIdle); err != nil {
			return Row{}, err
		}
	}
	total := s.Warmup + s.Window
	wctx, cancel := context.WithTimeout(ctx, total+time.Minute)
	defer cancel()
	var extra [][]*os.File
	if mode == "handoff" { // pipes for the two players' notes: files[i] = {in, out} of worker i
		r01, w01, err := os.Pipe()
		if err != nil {
			return Row{}, err
		}
		r10, w10, err := os.Pipe()
		if err != nil {
			return Row{}, err
		}
		extra = [][]*os.File{{r10, w01}, {r01, w10}}
		defer func() {
			for _, f := range []*os.File{r01, w01, r10, w10} {
				f.Close()
			}
		}()
	}
	workers := make([]*worker, s.Procs)
	defer func() {
		for _, w := range workers {
			if w != nil && w.cmd.ProcessState == nil {
				_ = w.cmd.Process.Kill()
				_ = w.cmd.Wait()
			}
		}
	}()
	for i := range workers {
		a := workerArgs{Impl: s.Impl, Mode: mode, Redis: r.addr, Goroutines: s.Goroutines / s.Procs,
			Work: s.Work, Lease: s.Lease, ID: i, Handoffs: s.Handoffs, Reads: s.Reads, Idle: s.Idle,
			HandOff: r.handOff}
		cmd := exec.CommandContext(wctx, r.exe, a.flags()...)
		cmd.Stderr = os.Stderr
		if extra != nil {
			cmd.ExtraFiles = extra[i]
		}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return Row{}, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return Row{}, err
		}
		if err := cmd.Start(); err != nil {
			return Row{}, err
		}
		workers[i] = &worker{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	}
	for _, files := range extra { // the workers have their own copies now
		for _, f := range files {
			f.Close()
		}
	}
	for i, w := range workers {
		if l, err := w.readLine(30 * time.Second); err != nil || l != "ready" {
			return Row{}, fmt.Errorf("worker %d not ready: %q %v", i, l, err)
		}
	}
	start := time.Now().Add(20 * time.Millisecond)
	sig := startSignal{Start: start.UnixNano(), Measure: start.Add(s.Warmup).UnixNano(), End: start.Add(total).UnixNano()}
	line, _ := json.Marshal(sig)
	var before, after int64
	var cpuBefore, cpuAfter float64
	var err error
	if mode == "handoff" {
		before, err = r.commandCalls(ctx)
		if err != nil {
			return Row{}, err
		}
	}
	for _, w := range workers {
		if _, err := fmt.Fprintf(w.stdin, "%s\n", line); err != nil {
			return Row{}, err
		}
	}
	if mode == "loop" {
		waitUntil(sig.Measure)
		if before, err = r.commandCalls(ctx); err != nil {
			return Row{}, err
		}
		if cpuBefore, err = r.cpu(ctx); err != nil {
			return Row{}, err
		}
		waitUntil(sig.End)
		if after, err = r.commandCalls(ctx); err != nil {
			return Row{}, err
		}
		if cpuAfter, err = r.cpu(ctx); err != nil {
			return Row{}, err
		}
	}
	results := make([]workerResult, len(workers))
	for i, w := range workers {
		l, err := w.readLine(total + 30*time.Second)
		if err != nil {
			return Row{}, fmt.Errorf("worker %d: %w", i, err)
		}
		if err := json.Unmarshal([]byte(l), &results[i]); err != nil {
			return Row{}, fmt.Errorf("worker %d: bad result %q: %w", i, l, err)
		}
		if err := w.cmd.Wait(); err != nil {
			return Row{}, fmt.Errorf("worker %d: %w", i, err)
		}
	}
	if mode == "handoff" {
		if after, err = r.commandCalls(ctx); err != nil {
			return Row{}, err
		}
	}
	row := summarize(s, results, after-before, time.Duration(sig.End-sig.Measure))
	if s.Impl == "dlock" || s.Impl == "dlock-poll" || s.Impl == "dlock-hold" {
		row.HandOffMs = ms(r.handOff)
	}
	row.RTTIdleP50Us, row.RTTIdleP99Us = rtt50, rtt99
	if mode == "loop" && row.Acquisitions > 0 {
		row.RedisCPUPerAcq = (cpuAfter - cpuBefore) * 1e6 / float64(row.Acquisitions)
	}
	return row, nil
}

// rttSamples PINGs, each sent after rttIdle without traffic, measure the idle round trip
// that a handoff row's latency is compared with; rttIdle matches handoffHold.
const (
	rttSamples = 200
	rttIdle    = 3 * time.Millisecond
)

// idleRTT times n PINGs on a fresh client to the Redis at addr, each sent idle after the
// previous one answered, and returns the p50 and p99 round trip in microseconds.
func idleRTT(ctx context.Context, addr string, n int, idle time.Duration) (p50, p99 float64, err error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil { // dial before the first sample
		return 0, 0, err
	}
	d := make([]float64, n)
	for i := range d {
		time.Sleep(idle)
		t := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return 0, 0, err
		}
		d[i] = float64(time.Since(t)) / 1e3
	}
	slices.Sort(d)
	return percentile(d, 0.50), percentile(d, 0.99), nil
}

// summarize turns the workers' results into a row. calls is the change of Redis's total
// command count over the window (handoff: over the run).
func summarize(s spec, results []workerResult, calls int64, window time.Duration) Row {
	row := Row{Scenario: s.Scenario, Impl: s.Impl, Procs: s.Procs, Goroutines: s.Goroutines,
		WorkMs: ms(s.Work), LeaseMs: s.Lease.Milliseconds(), MinPerGoroutine: -1, MinPerProc: -1}
	var acq, cmds, cpuNs, workNs int64
	waits, writeWaits := newHist(), newHist()
	for _, r := range results {
		waits.addSparse(r.Waits)
		writeWaits.addSparse(r.WriteWaits)
		row.WriteWaitMaxUs = max(row.WriteWaitMaxUs, float64(r.WriteWaitMax)/1e3)
		var proc int64
		for _, n := range r.PerGoroutine {
			acq += n
			proc += n
			if row.MinPerGoroutine < 0 || n < row.MinPerGoroutine {
				row.MinPerGoroutine = n
			}
			row.MaxPerGoroutine = max(row.MaxPerGoroutine, n)
		}
		if row.MinPerProc < 0 || proc < row.MinPerProc {
			row.MinPerProc = proc
		}
		row.MaxPerProc = max(row.MaxPerProc, proc)
		cmds += r.Cmds
		cpuNs += r.CPUNs
		workNs += r.WorkNs
		row.Errors += r.Errors
		row.Retries += r.Retries
		if row.FirstErr == "" {
			row.FirstErr = r.FirstErr
		}
	}
	row.MinPerGoroutine, row.MinPerProc = max(row.MinPerGoroutine, 0), max(row.MinPerProc, 0)
	switch s.Scenario {
	case "rw":
		row.Overlaps = overlapsRW(results)
	case "sem":
		row.Overlaps = overlapsK(results, semPermits)
	default:
		row.Overlaps = overlaps(results)
	}
	row.WaitP99Us = waits.quantile(0.99)
	row.WaitP50Us, row.WaitP999Us = waits.quantile(0.50), waits.quantile(0.999)
	if s.Scenario == "rw" {
		row.WriteWaitP99Us = writeWaits.quantile(0.99)
	}
	if s.Scenario == "handoff" { // every acquisition of the run, including the first
		acq, cmds = 0, 0
		for _, r := range results {
			acq += r.Total
			cmds += r.CmdsTotal
		}
		lat := handoffLatencies(results)
		row.Handoffs = len(lat)
		if len(lat) > 0 {
			row.HandoffP50Us = percentile(lat, 0.50)
			row.HandoffP99Us = percentile(lat, 0.99)
			row.HandoffMaxUs = lat[len(lat)-1]
			var sum float64
			for _, v := range lat {
				sum += v
			}
			row.HandoffMeanUs = sum / float64(len(lat))
		}
		window = time.Duration(0)
		if len(results) == 2 && len(results[0].T0) > 0 {
			last := max(lastNonZero(results[0].T1), lastNonZero(results[1].T1))
			window = time.Duration(last - results[0].T0[0])
		}
	}
	row.Acquisitions = acq
	row.WindowS = window.Seconds()
	if window > 0 {
		row.TPS = float64(acq) / window.Seconds()
	}
	if s.Scenario == "trip" {
		row.Efficiency = row.TPS * s.Work.Seconds()
	}
	if acq > 0 {
		row.CmdsPerAcq = float64(cmds) / float64(acq)
		row.RedisCallsPerAcq = float64(calls) / float64(acq)
		row.WorkerCPUPerAcq = float64(cpuNs) / 1e3 / float64(acq)
		if s.Work > 0 {
			row.WorkActualMs = float64(workNs) / float64(acq) / 1e6
		}
	}
	return row
}

// handoffLatencies pairs each hand-off's release time with its take time and returns the
// latencies in microseconds, sorted.
func handoffLatencies(results []workerResult) []float64 {
	if len(results) != 2 {
		return nil
	}
	var lat []float64
	for h := 0; h < len(results[0].T0) && h < len(results[1].T0); h++ {
		rel, take := results[h%2].T0[h], results[1-h%2].T1[h]
		if rel > 0 && take > 0 {
			lat = append(lat, float64(take-rel)/1e3)
		}
	}
	slices.Sort(lat)
	return lat
}

// overlaps counts the recorded holds, over all processes, that began before an earlier hold
// ended: breaches of mutual exclusion. Holds run from Lock returning to just before Unlock,
// stamped with the wall clock, which all processes of this machine share.
func overlaps(results []workerResult) int64 {
	var holds [][2]int64
	for _, r := range results {
		for i := 0; i+1 < len(r.Holds); i += 2 {
			holds = append(holds, [2]int64{r.Holds[i], r.Holds[i+1]})
		}
	}
	slices.SortFunc(holds, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var n, end int64
	for _, h := range holds {
		if h[0] < end {
			n++
		}
		end = max(end, h[1])
	}
	return n
}

// overlapsRW counts the breaches of a read-write lock over all processes: a write hold that
// began while any hold was on or during which a read began, and a read that began while a
// write was on.
func overlapsRW(results []workerResult) int64 {
	type hold struct {
		start, end int64
		write      bool
	}
	var holds []hold
	for _, r := range results {
		for i := 0; i+1 < len(r.Holds); i += 2 {
			holds = append(holds, hold{r.Holds[i], r.Holds[i+1], true})
		}
		for i := 0; i+1 < len(r.SharedHolds); i += 2 {
			holds = append(holds, hold{r.SharedHolds[i], r.SharedHolds[i+1], false})
		}
	}
	slices.SortFunc(holds, func(a, b hold) int { return cmp.Compare(a.start, b.start) })
	var n, anyEnd, writeEnd int64
	for _, h := range holds {
		if h.start < writeEnd || (h.write && h.start < anyEnd) {
			n++
		}
		anyEnd = max(anyEnd, h.end)
		if h.write {
			writeEnd = max(writeEnd, h.end)
		}
	}
	return n
}

// overlapsK counts the holds, over all processes, that began while k others were on: more
// than k holders of a semaphore's k permits at once.
func overlapsK(results []workerResult, k int) int64 {
	type event struct {
		at    int64
		delta int
	}
	var events []event
	for _, r := range results {
		for i := 0; i+1 < len(r.Holds); i += 2 {
			events = append(events, event{r.Holds[i], 1}, event{r.Holds[i+1], -1})
		}
	}
	// (an end and a start at the same instant: the end first)
	slices.SortFunc(events, func(a, b event) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	var n int64
	on := 0
	for _, e := range events {
		on += e.delta
		if e.delta > 0 && on > k {
			n++
		}
	}
	return n
}

func lastNonZero(ts []int64) int64 {
	for i := len(ts) - 1; i >= 0; i-- {
		if ts[i] != 0 {
			return ts[i]
		}
	}
	return 0
}

// percentile returns the p-quantile of sorted values (nearest rank).
func percentile(sorted []float64, p float64) float64 {
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// info returns the fields of one section of INFO, as name and value.
func (r *runner) info(ctx context.Context, section string) ([][2]string, error) {
	text, err := r.client.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, l := range strings.Split(text, "\n") {
		if name, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			out = append(out, [2]string{name, v})
		}
	}
	return out, nil
}

// cpu returns the CPU time, user and system, the Redis server has spent so far, in seconds
// (INFO cpu; its resolution is Redis's, a microsecond here).
func (r *runner) cpu(ctx context.Context) (float64, error) {
	fields, err := r.info(ctx, "cpu")
	var sum float64
	for _, f := range fields {
		if f[0] == "used_cpu_sys" || f[0] == "used_cpu_user" {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return 0, err
			}
			sum += v
		}
	}
	return sum, err
}

// commandCalls returns the number of commands Redis has run, from INFO commandstats,
// commands run by scripts included, the parent's own INFO calls excluded.
func (r *runner) commandCalls(ctx context.Context) (int64, error) {
	fields, err := r.info(ctx, "commandstats")
	var sum int64
	for _, f := range fields {
		if !strings.HasPrefix(f[0], "cmdstat_") || f[0] == "cmdstat_info" {
			continue // workers never send INFO, so cmdstat_info is only the parent's
		}
		for _, kv := range strings.Split(f[1], ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, err
				}
				sum += n
			}
		}
	}
	return sum, err
}
