package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/dlockgo/dlock/dlock"
)

var demoUsage = `
usage: dlock demo [flags]

Shows the lock at work: several simulated processes (each its own Redis client and
Generator) whose goroutines all want one key (DLOCK_DEMO_order-42), with a short critical
section. It prints acquisitions, throughput, the most waiters seen at once and whether
exclusion held. Without --redis, $DLOCK_REDIS and $REDIS_URL it starts an embedded miniredis,
so it needs nothing installed.

Exit status: 0 when exclusion held over at least one acquisition; 1 when two owners overlapped
or nothing was acquired (the run proved nothing); 69 when Redis is unreachable; 77 when it
refuses the user or password.
` + redisSection("an embedded miniredis")

// demoCommand is "dlock demo".
func demoCommand() *command {
	return &command{
		name:    "demo",
		summary: "show the lock at work: processes and goroutines competing for one key",
		usage:   demoUsage,
		define: func(fs *flagSet) runner {
			var o demoOpts
			o.procs = fs.Int("procs", 4, "simulated processes (separate clients and generators)")
			o.goroutines = fs.Int("goroutines", 16, "goroutines per process")
			o.duration = fs.Duration("duration", 3*time.Second, "how long to run")
			o.hold = fs.Duration("hold", 200*time.Microsecond, "time spent inside the critical section")
			o.lease = fs.Lease("lease", 2*time.Second, "lock lease")
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
	redis             redisFlags
	procs, goroutines *int
	duration, hold    *time.Duration
	lease             *time.Duration
}

// demo runs the demonstration; it returns an error when Redis cannot be reached, when
// exclusion did not hold, or when nothing was acquired.
func demo(out io.Writer, o demoOpts) error {
	if *o.procs < 1 || *o.goroutines < 1 || *o.duration <= 0 {
		return usageErrorf("--procs and --goroutines must be at least 1, --duration more than 0")
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
		// Without this check an unreachable Redis would look like a run with no acquisitions.
		c := ep.client(timeout)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := c.Ping(ctx).Err()
		cancel()
		c.Close()
		if err != nil {
			return redisFailure(ep, timeout, err)
		}
	}

	var (
		inside, overlaps, acquisitions, waiting, maxWaiting atomic.Int64
		errs                                                atomic.Int64
		wg                                                  sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), *o.duration)
	defer cancel()
	start := time.Now()
	for p := 0; p < *o.procs; p++ {
		c := ep.client(timeout)
		defer c.Close()
		g, err := dlock.NewGenerator(c, dlock.WithLeases(map[string]time.Duration{"DEMO": *o.lease}))
		if err != nil {
			return withStatus(exitUsage, err)
		}
		defer g.Close(context.Background())
		l, err := g.Gen("DEMO", "order-42")
		if err != nil {
			return err
		}
		for i := 0; i < *o.goroutines; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					w := waiting.Add(1)
					for m := maxWaiting.Load(); w > m && !maxWaiting.CompareAndSwap(m, w); m = maxWaiting.Load() {
					}
					owned, err := l.Lock(ctx)
					waiting.Add(-1)
					if err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						}
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(*o.hold)
					inside.Add(-1)
					acquisitions.Add(1)
					if err := l.Unlock(owned); err != nil {
						errs.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := acquisitions.Load()
	fmt.Fprintf(out, "%d processes x %d goroutines on one key for %v (hold %v, lease %v)\n",
		*o.procs, *o.goroutines, o.duration.Round(time.Millisecond), *o.hold, *o.lease)
	fmt.Fprintf(out, "acquisitions:     %d\n", n)
	fmt.Fprintf(out, "throughput:       %.0f acquisitions/s\n", float64(n)/elapsed.Seconds())
	fmt.Fprintf(out, "most waiters:     %d\n", maxWaiting.Load())
	fmt.Fprintf(out, "errors:           %d\n", errs.Load())
	switch {
	case overlaps.Load() > 0:
		fmt.Fprintf(out, "exclusion:        VIOLATED (%d overlaps in %d acquisitions)\n", overlaps.Load(), n)
		return fmt.Errorf("exclusion did not hold: %d overlaps", overlaps.Load())
	case n == 0:
		fmt.Fprintf(out, "exclusion:        untested (no acquisitions)\n")
		return errors.New("no acquisitions: the run proved nothing")
	}
	fmt.Fprintf(out, "exclusion:        held (never two owners at once)\n")
	return nil
}
