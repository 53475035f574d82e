// Command bench compares this module's DLock port with the usual SET NX lock, bsm/redislock
// and go-redsync on one Redis server, across real OS processes.
//
//	go run . [--quick] [--json] [--redis host:port] [--out DIR] [--lease 60ms]
//	         [--scenarios trip,hot,cross,handoff,rw,sem] [--procs 2,4,8,16] [--hand-off 50ms]
//	         [--impls dlock,dlock-poll,dlock-hold,tradition,redislock,redsync,dlock-rw,redisson-rw,dlock-sem,redisson-sem,local-rw,floor]
//	go run . --plot results.jsonl --out DIR   # redraw plots and tables from saved results
//
// Two rows are ceilings, not locks: local-rw (the rw scenario in one process on a
// sync.RWMutex) and floor (the cross and handoff scenarios on the leanest fair grant this
// bench knows: floor.go).
//
// Without --redis it starts its own redis-server on a free port and stops it at the end.
// Each row's processes are this program run again in a hidden --worker mode; they connect,
// say "ready" on stdout, and all start at a time the parent writes on their stdin.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultLease is the lease of every lock in every scenario unless --lease sets another: short,
// so that the trip rows show the pace of the retry poller and the renewals.
const defaultLease = 60 * time.Millisecond

// crossHold is the work inside the lock in the cross scenario: a short hold.
const crossHold = 100 * time.Microsecond

// familyHold is the hold of the rw rows, a tenth of it the sem rows': spent waiting, as on a
// call to another service.
const familyHold = time.Millisecond

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--worker" {
		if err := runWorker(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		quick     = flag.Bool("quick", false, "short rows and a coarse grid (under 3 minutes)")
		jsonOut   = flag.Bool("json", false, "print one JSON object per row on stdout instead of tables")
		addr      = flag.String("redis", "", "use this Redis (host:port) instead of starting one; it is FLUSHALLed between rows")
		outDir    = flag.String("out", "", "write results.jsonl and the plots in this directory")
		scenarios = flag.String("scenarios", "trip,hot,cross,handoff,rw,sem", "scenarios to run")
		impls     = flag.String("impls", strings.Join(allImpls, ","), "implementations to run")
		plotFrom  = flag.String("plot", "", "only redraw plots (into --out) and print tables from this results.jsonl")
		lease     = flag.Duration("lease", defaultLease, "the lease of every lock")
		procs     = flag.String("procs", "2,4,8,16", "cross: the numbers of processes")
		handOff   = flag.Duration("hand-off", 0, "dlock's hand-off limit (WithLocalHandOff) in every dlock row; 0 for its default")
	)
	flag.Parse()
	if *plotFrom != "" {
		rows, err := readRows(*plotFrom)
		if err != nil {
			return err
		}
		if *outDir != "" {
			if err := os.MkdirAll(*outDir, 0o755); err != nil {
				return err
			}
			if err := drawPlots(rows, *outDir); err != nil {
				return err
			}
		}
		printTables(os.Stdout, rows)
		return nil
	}
	for _, name := range split(*impls) {
		if !slices.Contains(allImpls, name) {
			return fmt.Errorf("unknown implementation %q (want some of %v)", name, allImpls)
		}
	}
	if *lease <= 0 {
		return fmt.Errorf("--lease %v: want a positive duration", *lease)
	}
	if *handOff < 0 {
		return fmt.Errorf("--hand-off %v: want a duration, 0 or more", *handOff)
	}
	var crossProcs []int
	for _, f := range split(*procs) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			return fmt.Errorf("--procs %q: want numbers of processes, 2 or more", *procs)
		}
		crossProcs = append(crossProcs, n)
	}
	specs, err := plan(*quick, *lease, split(*scenarios), split(*impls), crossProcs)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if *addr == "" {
		a, stopRedis, err := startRedis(ctx)
		if err != nil {
			return err
		}
		defer stopRedis()
		*addr = a
	}
	client := redis.NewClient(&redis.Options{Addr: *addr})
	defer client.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		return err
	}
	describeMachine(ctx, client)

	var results io.Writer = io.Discard
	if *outDir != "" {
		if err := os.MkdirAll(*outDir, 0o755); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(*outDir, "results.jsonl"))
		if err != nil {
			return err
		}
		defer f.Close()
		results = f
	}
	r := &runner{exe: exe, addr: *addr, client: client, handOff: *handOff}
	began := time.Now()
	var rows []Row
	for i, s := range specs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		row, err := r.run(ctx, s)
		if err != nil {
			return fmt.Errorf("%s %s procs=%d goroutines=%d: %w", s.Scenario, s.Impl, s.Procs, s.Goroutines, err)
		}
		row.Load1 = load1()
		rows = append(rows, row)
		line, _ := json.Marshal(row)
		fmt.Fprintf(results, "%s\n", line)
		if *jsonOut {
			fmt.Printf("%s\n", line)
		}
		fmt.Fprintf(os.Stderr, "[%3d/%d %5.0fs] %-7s %-10s procs=%d g=%-3d tps=%8.1f eff=%.3f cmds/acq=%.2f redis/acq=%.2f p50=%.0fus p99=%.0fus wait99=%.0fus min/max=%d/%d err=%d retries=%d overlaps=%d load=%.2f\n",
			i+1, len(specs), time.Since(began).Seconds(), row.Scenario, row.Impl, row.Procs, row.Goroutines,
			row.TPS, row.Efficiency, row.CmdsPerAcq, row.RedisCallsPerAcq, row.HandoffP50Us, row.HandoffP99Us, row.WaitP99Us,
			row.MinPerGoroutine, row.MaxPerGoroutine, row.Errors, row.Retries, row.Overlaps, row.Load1)
	}
	if *outDir != "" {
		if err := drawPlots(rows, *outDir); err != nil {
			return err
		}
	}
	if !*jsonOut {
		printTables(os.Stdout, rows)
	}
	fmt.Fprintf(os.Stderr, "done: %d rows in %.0fs\n", len(rows), time.Since(began).Seconds())
	return nil
}

// plan lists the rows of the chosen scenarios and implementations.
func plan(quick bool, lease time.Duration, scenarios, impls []string, crossProcs []int) ([]spec, error) {
	warmup, window := 500*time.Millisecond, 5*time.Second
	concs := []int{}
	for c := 8; c <= 128; c += 8 {
		concs = append(concs, c)
	}
	handoffs, handoffCap := 3000, 40*time.Second
	if quick {
		warmup, window = 250*time.Millisecond, 1750*time.Millisecond
		concs = []int{8, 64, 128}
		handoffs, handoffCap = 1000, 12*time.Second
	}
	var specs []spec
	for _, sc := range scenarios {
		switch sc {
		case "trip":
			for _, procs := range []int{1, 2, 4} {
				for _, c := range concs {
					for _, impl := range impls {
						if !runs(sc, impl) {
							continue
						}
						if quick && impl == "dlock-poll" && len(impls) == len(allImpls) {
							continue // time: by default --quick covers dlock-poll in hot and handoff only
						}
						specs = append(specs, spec{Scenario: sc, Impl: impl, Procs: procs, Goroutines: c,
							Work: 10 * time.Millisecond, Lease: lease, Warmup: warmup, Window: window})
					}
				}
			}
		case "hot":
			for _, pg := range [][2]int{{1, 64}, {4, 16}, {16, 4}} {
				for _, impl := range impls {
					if runs(sc, impl) {
						specs = append(specs, spec{Scenario: sc, Impl: impl, Procs: pg[0], Goroutines: pg[0] * pg[1],
							Lease: lease, Warmup: warmup, Window: window})
					}
				}
			}
		case "cross":
			// One goroutine per process: every acquisition goes from process to process.
			for _, procs := range crossProcs {
				for _, impl := range impls {
					if runs(sc, impl) {
						specs = append(specs, spec{Scenario: sc, Impl: impl, Procs: procs, Goroutines: procs,
							Work: crossHold, Lease: lease, Warmup: warmup, Window: window})
					}
				}
			}
		case "handoff":
			for _, impl := range impls {
				if runs(sc, impl) {
					specs = append(specs, spec{Scenario: sc, Impl: impl, Procs: 2, Goroutines: 2,
						Lease: lease, Window: handoffCap, Handoffs: handoffs})
				}
			}
		case "rw", "sem":
			// rw: 95 % reads; sem: semPermits permits. The hold is spent waiting (a call to
			// another service), so it is the lock that bounds what runs at once.
			reads, hold := map[string]int{"rw": 95, "sem": 0}[sc], map[string]time.Duration{"rw": familyHold, "sem": familyHold / 10}[sc]
			for _, pg := range [][2]int{{4, 16}} {
				for _, impl := range impls {
					if runs(sc, impl) {
						procs := pg[0]
						if impl == "local-rw" {
							procs = 1 // the ceiling: every goroutine in one process, no Redis
						}
						specs = append(specs, spec{Scenario: sc, Impl: impl, Procs: procs, Goroutines: pg[0] * pg[1],
							Work: hold, Idle: true, Reads: reads, Lease: lease, Warmup: warmup, Window: window})
					}
				}
			}
		default:
			return nil, fmt.Errorf("unknown scenario %q (want trip, hot, cross, handoff, rw, sem)", sc)
		}
	}
	return specs, nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// startRedis starts a throw-away redis-server on a free loopback port.
func startRedis(ctx context.Context) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting redis-server: %w", err)
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	addr := "127.0.0.1:" + port
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c.Ping(ctx).Err() == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", nil, fmt.Errorf("redis-server on port %s did not answer", port)
		}
	}
	fmt.Fprintf(os.Stderr, "started redis-server on %s (pid %d)\n", addr, cmd.Process.Pid)
	return addr, stop, nil
}

// describeMachine logs the machine, the Go and Redis versions, and how plain and precise
// sleeps of 10 ms overshoot here.
func describeMachine(ctx context.Context, c *redis.Client) {
	version := "?"
	if info, err := c.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				version = v
			}
		}
	}
	model := "?"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	over := func(wait func()) time.Duration {
		const n = 20
		var sum time.Duration
		for range n {
			t := time.Now()
			wait()
			sum += time.Since(t) - 10*time.Millisecond
		}
		return sum / n
	}
	plain := over(func() { time.Sleep(10 * time.Millisecond) })
	precise := over(func() { preciseWait(10 * time.Millisecond) })
	fmt.Fprintf(os.Stderr, "machine: %d CPUs (%s), %s, Redis %s, load %.2f; 10ms overshoot: time.Sleep %v, preciseWait %v\n",
		runtime.NumCPU(), model, runtime.Version(), version, load1(), plain, precise)
	rtt := func(idle time.Duration) time.Duration {
		d := make([]time.Duration, 100)
		for i := range d {
			time.Sleep(idle)
			t := time.Now()
			_ = c.Ping(ctx).Err()
			d[i] = time.Since(t)
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	fmt.Fprintf(os.Stderr, "PING round trip p50: back to back %v, after 10ms idle %v\n", rtt(0), rtt(10*time.Millisecond))
}

// load1 returns the one-minute load average (0 if unknown).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// readRows reads a results.jsonl file.
func readRows(path string) ([]Row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []Row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rows = append(rows, r)
	}
	return rows, sc.Err()
}
