package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

var demoUsage = `
usage: dlock demo [flags]

Shows what the lock is for: the same contention on one key is run twice, once with the usual
hand-written lock (SET NX PX, a retry every 10ms, a compare-and-delete script to release)
and once with dlock (DLOCK_DEMO_order-42), in two shapes:

  hot     --procs simulated processes (each its own Redis client and Generator) with
          --goroutines goroutines each
  cross   --cross-procs processes with one goroutine each: every acquisition goes from
          process to process

Every holder stays --hold inside the critical section. The four runs share --duration; a run
in which nothing was acquired in its share (a machine far too busy) goes on until its first
acquisition, at most 30s more, and its acquisitions/s count the time it took.
With --hold-over, dlock runs with WithHoldOver(true): a process whose goroutine locks again
at once keeps the key for it, and passes it to the next process at the hand-off limit (50ms),
not at every acquisition (the cross shape's throughput, at the cost of a longer wait tail).
--procs and --cross-procs are 1 to 1000, --procs × --goroutines at most 10000, --duration 4ms
to 24h, and --hold at most a quarter of it (one run); other values are usage errors. For
each it prints acquisitions/s, the Redis commands sent per acquisition (counted by a hook on
every client; Pub/Sub traffic excluded) and the acquisitions of the least and the most served
process, then whether exclusion held. Without --redis, $DLOCK_REDIS and $REDIS_URL it starts
an embedded miniredis, so it needs nothing installed.

Exit status: 0 when dlock's exclusion held over at least one acquisition; 1 when two dlock
owners overlapped or dlock acquired nothing (the run proved nothing); 69 when Redis is
unreachable or not the server to lock on (a read-only replica, a Cluster node without
--cluster); 77 when it refuses the user or password, or a command or key to the ACL user (the
naive lock uses the key dlock-demo:naive:order-42, outside dlock's own keys); 2 for a usage
error. Output that cannot be written ends the demo: 141 when nobody reads it (dlock demo |
head), 1, saying so, on another failure (a full disk).
` + redisSection("an embedded miniredis")

// naiveKey is the key of the demo's naive lock, outside dlock's own keys.
const naiveKey = "dlock-demo:naive:order-42"

// demoCommand is "dlock demo".
func demoCommand() *command {
	return &command{
		name:    "demo",
		summary: "show the lock at work against a naive SET NX lock, on one contended key",
		usage:   demoUsage,
		define: func(fs *flagSet) runner {
			var o demoOpts
			o.procs = fs.Int("procs", 4, 1, maxDemoProcs, "hot: simulated processes (separate clients and generators), 1 to 1000")
			o.goroutines = fs.Int("goroutines", 16, 1, maxDemoGoroutines, "hot: goroutines per process, at least 1; --procs × --goroutines at most 10000")
			o.crossProcs = fs.Int("cross-procs", 8, 1, maxDemoProcs, "cross: simulated processes, one goroutine each, 1 to 1000")
			o.duration = fs.Duration("duration", 10*time.Second, "how long to run in all (four runs of a quarter each), 4ms to 24h")
			o.hold = fs.Duration("hold", 100*time.Microsecond, "time spent inside the critical section, at most a run (--duration/4)")
			o.lease = fs.Lease("lease", 2*time.Second, "lock lease")
			o.holdOver = fs.Bool("hold-over", "", "run dlock with WithHoldOver(true)")
			o.redis = addRedisFlags(fs, "default $DLOCK_REDIS, else $REDIS_URL, else an embedded miniredis")
			return func(out cli, args []string) error {
				if _, _, err := fs.parse(args, 0, false); err != nil {
					return err
				}
				return demo(out.stdout, o)
			}
		},
	}
}

// demoOpts are the flags of demo.
type demoOpts struct {
	redis                         redisFlags
	procs, goroutines, crossProcs *int
	duration, hold                *time.Duration
	lease                         *time.Duration
	holdOver                      *bool
}

// The bounds of demo's flags: beyond them a run allocates absurdly (a client per process, a
// goroutine per holder) or never ends in a demo's time.
const (
	maxDemoProcs      = 1000                 // --procs, --cross-procs
	maxDemoGoroutines = 10000                // --procs × --goroutines, and so --goroutines
	minDemoDuration   = 4 * time.Millisecond // four runs of a millisecond
	maxDemoDuration   = 24 * time.Hour
)

// check refuses flags out of their bounds, as usage errors naming the flag.
func (o demoOpts) check() error {
	switch {
	case *o.goroutines > maxDemoGoroutines / *o.procs:
		return usageErrorf("invalid --goroutines %d: --procs × --goroutines is at most %d goroutines in all (%d each with --procs %d)",
			*o.goroutines, maxDemoGoroutines, maxDemoGoroutines / *o.procs, *o.procs)
	case *o.duration < minDemoDuration || *o.duration > maxDemoDuration:
		return usageErrorf("invalid --duration %s: from %v (four runs of 1ms) to %s", shortDuration(*o.duration), minDemoDuration, shortDuration(maxDemoDuration))
	case *o.hold > *o.duration/4:
		return usageErrorf("invalid --hold %s: at most one run, a quarter of --duration %s (%v)", shortDuration(*o.hold), shortDuration(*o.duration), *o.duration/4)
	}
	return nil
}

// demoShape is one contention pattern: procs processes of goroutines goroutines each.
type demoShape struct {
	name              string
	procs, goroutines int
}

// demoResult is what one run measured.
type demoResult struct {
	shape        demoShape
	impl         string // "naive" or "dlock"
	elapsed      time.Duration
	perProc      []int64 // acquisitions by process
	cmds         int64   // commands sent by all clients during the run
	errs         int64
	overlaps     int64 // acquisitions that began while another owner was inside
	firstErr     error
	acquisitions int64
}

// demo runs the demonstration; it returns an error when Redis cannot be reached, when dlock's
// exclusion did not hold, or when dlock acquired nothing.
func demo(w io.Writer, o demoOpts) error {
	out := &stickyWriter{w: w}
	if err := o.check(); err != nil {
		return err
	}
	ep, err := o.redis.endpoint("")
	if err != nil {
		return err
	}
	timeout := *o.redis.timeout
	if ep == nil {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		if ep, err = resolveRedis(m.Addr(), true, false, "", ""); err != nil {
			return err
		}
		fmt.Fprintf(out, "embedded miniredis on %s\n", m.Addr())
	} else {
		// Without this check an unreachable Redis, a replica or a Cluster node named as a
		// single server would look like a run with no acquisitions.
		c := ep.client(timeout)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := checkServer(ctx, c, ep, timeout)
		if err == nil {
			// (and the naive lock's key, which the README's ACL for dlock leaves out: refused
			// before the table begins, not after its header)
			if gerr := c.Get(ctx, naiveKey).Err(); gerr != redis.Nil && isRedisReply(gerr) {
				err = naiveRefused(redisFailure(ep, timeout, gerr))
			}
		}
		cancel()
		c.Close()
		if err != nil {
			return err
		}
	}

	shapes := []demoShape{{"hot", *o.procs, *o.goroutines}, {"cross", *o.crossProcs, 1}}
	each := *o.duration / time.Duration(2*len(shapes))
	fmt.Fprintf(out, "one key, hold %v, lease %v, %v per run; naive = SET NX PX, retry every %v, compare-and-delete release\n",
		*o.hold, *o.lease, each.Round(time.Millisecond), naiveRetry)
	if *o.holdOver {
		fmt.Fprintln(out, "dlock with WithHoldOver(true): a process keeps the key for its goroutine that comes back, up to the hand-off limit")
	}
	fmt.Fprintln(out)
	const row = "%-6s %-9s %-6s %14s %13s %23s %7s\n"
	fmt.Fprintf(out, row, "shape", "processes", "lock", "acquisitions/s", "commands/acq", "least–most per process", "errors")
	var results []demoResult
	for _, s := range shapes {
		for _, impl := range []string{"naive", "dlock"} {
			if out.err != nil { // nobody reads what demo says (demo | head): no more runs
				return unwritten(out.err)
			}
			r, err := demoRun(ep, timeout, s, impl, each, *o.hold, *o.lease, *o.holdOver)
			if isRedisReply(err) {
				err = redisFailure(ep, timeout, err) // a refused key or command (ACL): 77
				if impl == "naive" {
					return naiveRefused(err)
				}
				return err
			} else if err != nil {
				return err
			}
			results = append(results, r)
			least, most := minMax(r.perProc)
			fmt.Fprintf(out, row, s.name, fmt.Sprintf("%d × %d", s.procs, s.goroutines), impl,
				fmt.Sprintf("%.0f", r.rate()), perAcq(r.cmds, r.acquisitions), fmt.Sprintf("%d–%d", least, most), strconv.FormatInt(r.errs, 10))
		}
	}

	fmt.Fprintln(out)
	var n, overlaps, naiveOverlaps int64
	for i, r := range results {
		if r.impl == "dlock" {
			n += r.acquisitions
			overlaps += r.overlaps
			continue
		}
		naiveOverlaps += r.overlaps
		if i+1 < len(results) && results[i+1].impl == "dlock" && results[i+1].shape == r.shape && r.rate() > 0 {
			d := results[i+1]
			fmt.Fprintf(out, "%-6s dlock makes %.2f× the acquisitions/s of naive, %s\n", r.shape.name+":",
				d.rate()/r.rate(), fewerCommands(d, r))
		}
	}
	for _, r := range results {
		if r.firstErr != nil {
			fmt.Fprintf(out, "first error (%s, %s): %v\n", r.shape.name, r.impl, plain(r.firstErr))
		}
	}
	if naiveOverlaps > 0 {
		fmt.Fprintf(out, "naive lock:       %d overlaps (its lease ran out inside the critical section)\n", naiveOverlaps)
	}
	switch {
	case overlaps > 0:
		fmt.Fprintf(out, "exclusion:        VIOLATED (%d overlaps in %d dlock acquisitions)\n", overlaps, n)
		return fmt.Errorf("exclusion did not hold: %d overlaps", overlaps)
	case n == 0:
		fmt.Fprintf(out, "exclusion:        untested (no dlock acquisitions)\n")
		return errors.New("no acquisitions: the run proved nothing")
	}
	fmt.Fprintf(out, "exclusion:        held (dlock never had two owners at once, over %d acquisitions)\n", n)
	if out.err != nil { // the verdict is not shown: no success
		return unwritten(out.err)
	}
	return nil
}

// rate returns the run's acquisitions per second.
func (r demoResult) rate() float64 { return float64(r.acquisitions) / r.elapsed.Seconds() }

// perAcq formats commands per acquisition, with two significant digits below 0.1.
func perAcq(cmds, acq int64) string {
	if acq == 0 {
		return "–"
	}
	v := float64(cmds) / float64(acq)
	if v > 0 && v < 0.1 {
		return fmt.Sprintf("%.2g", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// fewerCommands compares the commands per acquisition of run d with those of run r.
func fewerCommands(d, r demoResult) string {
	if d.acquisitions == 0 || r.acquisitions == 0 || r.cmds == 0 {
		return "commands not comparable"
	}
	x := float64(d.cmds) / float64(d.acquisitions) / (float64(r.cmds) / float64(r.acquisitions))
	word := "fewer"
	switch {
	case x == 0:
		return "with no commands at all"
	case x > 1:
		word = "more"
	default:
		x = 1 / x
	}
	f := "%.2f"
	if x >= 10 {
		f = "%.0f"
	}
	return fmt.Sprintf("with "+f+"× %s commands per acquisition", x, word)
}

// minMax returns the least and the greatest of v.
func minMax(v []int64) (lo, hi int64) {
	for i, x := range v {
		if i == 0 || x < lo {
			lo = x
		}
		hi = max(hi, x)
	}
	return lo, hi
}

// demoLocker is one simulated process's lock: Lock blocks until it holds the lock or ctx
// ends and returns the release.
type demoLocker interface {
	Lock(ctx context.Context) (unlock func() error, err error)
	Close() error
}

// demoRun runs one shape with one implementation for d and reports what it measured.
func demoRun(ep *endpoint, timeout time.Duration, s demoShape, impl string, d, hold, lease time.Duration, holdOver bool) (demoResult, error) {
	r := demoResult{shape: s, impl: impl, perProc: make([]int64, s.procs)}
	counters := make([]*cmdCounter, s.procs)
	lockers := make([]demoLocker, s.procs)
	defer func() {
		for _, l := range lockers {
			if l != nil {
				_ = l.Close()
			}
		}
	}()
	for p := range lockers {
		c := ep.client(timeout)
		counters[p] = &cmdCounter{}
		var err error
		if lockers[p], err = newDemoLocker(impl, c, lease, p, holdOver); err != nil {
			c.Close()
			return r, err
		}
		c.AddHook(counters[p]) // after the set-up, which is not counted
	}

	var (
		inside, errs, overlaps atomic.Int64
		acquired               atomic.Int64 // in all processes
		overdue                atomic.Bool  // d has passed
		firstErr               error
		errOnce                sync.Once
		wg                     sync.WaitGroup
		start                  = make(chan struct{})
		perProc                = make([]atomic.Int64, s.procs)
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := func(err error) {
		errs.Add(1)
		errOnce.Do(func() { firstErr = err })
	}
	for p, l := range lockers {
		for range s.goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for ctx.Err() == nil {
					unlock, err := l.Lock(ctx)
					if err != nil {
						if ctx.Err() == nil {
							fail(err)
						}
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					holdFor(hold)
					inside.Add(-1)
					perProc[p].Add(1)
					if acquired.Add(1) == 1 && overdue.Load() {
						cancel() // (the run's first acquisition came after its time)
					}
					if err := unlock(); err != nil {
						fail(err)
					}
				}
			}()
		}
	}
	began := time.Now()
	close(start)
	// A run lasts d, or, on a machine so slow that nothing was acquired in d, until its first
	// acquisition, at most demoOvertime more: a row of none would show nothing.
	time.AfterFunc(d, func() {
		if overdue.Store(true); acquired.Load() > 0 {
			cancel()
		}
	})
	overtime := time.AfterFunc(d+demoOvertime, cancel)
	defer overtime.Stop()
	wg.Wait()
	r.elapsed = time.Since(began)
	for p := range perProc {
		r.perProc[p] = perProc[p].Load()
		r.acquisitions += r.perProc[p]
		r.cmds += counters[p].n.Load()
	}
	r.errs, r.overlaps, r.firstErr = errs.Load(), overlaps.Load(), firstErr
	return r, nil
}

// demoOvertime bounds how long a run waits for its first acquisition after its time is up.
const demoOvertime = 30 * time.Second

// holdFor stays d in the critical section. A plain Sleep of less than a millisecond would
// often last a millisecond or more.
func holdFor(d time.Duration) {
	start := time.Now()
	if d > time.Millisecond {
		time.Sleep(d - time.Millisecond)
	}
	for time.Since(start) < d {
		runtime.Gosched()
	}
}

// newDemoLocker sets up simulated process p's lock over its own client c, which it closes
// (dlock's with WithHoldOver when holdOver is set).
func newDemoLocker(impl string, c redis.UniversalClient, lease time.Duration, p int, holdOver bool) (demoLocker, error) {
	if impl == "dlock" {
		g, err := dlock.NewGenerator(c, dlock.WithLeases(map[string]time.Duration{"DEMO": lease}), dlock.WithHoldOver(holdOver))
		if err != nil {
			return nil, withStatus(exitUsage, err)
		}
		l, err := g.Gen("DEMO", "order-42")
		if err != nil {
			_ = g.Close(context.Background())
			return nil, err
		}
		return &dlockDemo{c: c, g: g, l: l}, nil
	}
	n := &naiveLock{c: c, key: naiveKey, lease: lease,
		prefix: fmt.Sprintf("%d-%d-%d-", os.Getpid(), time.Now().UnixNano(), p)}
	// Load the release script now (EVALSHA fails, EVAL loads it) rather than in the run.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := naiveRelease.Run(ctx, c, []string{n.key}, "warm-up").Err(); err != nil {
		return nil, err
	}
	return n, nil
}

// dlockDemo is a simulated process's dlock: its Generator and the lock's handle, which its
// goroutines share.
type dlockDemo struct {
	c redis.UniversalClient
	g *dlock.Generator
	l *dlock.DistributedReentrantLock
}

func (d *dlockDemo) Lock(ctx context.Context) (func() error, error) {
	owned, err := d.l.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func() error { return d.l.Unlock(owned) }, nil
}

func (d *dlockDemo) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := d.g.Close(ctx)
	return errors.Join(err, d.c.Close())
}

// naiveRetry is how long the naive lock sleeps between attempts.
const naiveRetry = 10 * time.Millisecond

// naiveRelease deletes the key only if it still holds the caller's value.
var naiveRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0`)

// naiveLock is the usual hand-written lock: SET NX PX with a unique value, a sleep of
// naiveRetry between attempts, and a compare-and-delete script to release.
type naiveLock struct {
	c      redis.UniversalClient
	key    string
	lease  time.Duration
	prefix string
	seq    atomic.Uint64
}

func (n *naiveLock) Lock(ctx context.Context) (func() error, error) {
	val := n.prefix + strconv.FormatUint(n.seq.Add(1), 10)
	for {
		// Not ctx: a SET that Redis ran but ctx's end cut short would leave the key held.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := n.c.SetNX(sctx, n.key, val, n.lease).Result()
		cancel()
		if err != nil {
			return nil, err
		}
		if ok {
			return func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				k, err := naiveRelease.Run(ctx, n.c, []string{n.key}, val).Int64()
				if err == nil && k != 1 {
					err = errors.New("naive lock: the lease ran out before the release")
				}
				return err
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(naiveRetry):
		}
	}
}

func (n *naiveLock) Close() error { return n.c.Close() }

// cmdCounter is a go-redis hook that counts the commands a client sends; a pipeline counts
// its commands. Pub/Sub commands do not pass through hooks.
type cmdCounter struct{ n atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// stickyWriter writes to w until a write fails, and fails every write after.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// naiveRefused names the naive lock's key in a refusal of it (77): the README's ACL is
// dlock's, and the naive lock's key is the demo's own.
func naiveRefused(err error) error {
	if exitCode(err) != exitNoPerm {
		return err
	}
	return withStatus(exitNoPerm, fmt.Errorf("%w; the demo's naive lock uses the key %s besides (~dlock-demo:* in the ACL)", err, naiveKey))
}
