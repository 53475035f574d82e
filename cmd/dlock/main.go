// Command dlock shows the lock at work.
//
//	dlock demo [--redis host:port] [--procs 4] [--goroutines 16] [--duration 3s] [--hold 200us]
//
// demo runs several simulated processes (each its own Redis client and Generator) whose
// goroutines all want one key, with a short critical section, and prints acquisitions,
// throughput, the most waiters seen at once and whether exclusion held. Without --redis it
// starts an embedded miniredis, so it needs nothing installed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "demo" {
		fmt.Fprintln(os.Stderr, "usage: dlock demo [--redis host:port] [--procs N] [--goroutines N] [--duration D] [--hold D] [--lease D]")
		os.Exit(2)
	}
	if err := demo(os.Args[2:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dlock demo:", err)
		os.Exit(1)
	}
}

// demo runs the demonstration; it returns an error when exclusion did not hold.
func demo(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	addr := fs.String("redis", "", "Redis host:port (default: an embedded miniredis)")
	procs := fs.Int("procs", 4, "simulated processes (separate clients and generators)")
	goroutines := fs.Int("goroutines", 16, "goroutines per process")
	duration := fs.Duration("duration", 3*time.Second, "how long to run")
	hold := fs.Duration("hold", 200*time.Microsecond, "time spent inside the critical section")
	lease := fs.Duration("lease", 2*time.Second, "lock lease")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *procs < 1 || *goroutines < 1 || *duration <= 0 || *hold < 0 {
		return errors.New("--procs and --goroutines must be at least 1, --duration positive, --hold not negative")
	}
	where := *addr
	if where == "" {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		where = m.Addr()
		fmt.Fprintf(out, "embedded miniredis on %s\n", where)
	}

	var (
		inside, overlaps, acquisitions, waiting, maxWaiting atomic.Int64
		errs                                                atomic.Int64
		wg                                                  sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	start := time.Now()
	for p := 0; p < *procs; p++ {
		c := redis.NewClient(&redis.Options{Addr: where})
		defer c.Close()
		g, err := dlock.NewGenerator(c, dlock.WithLeases(map[string]time.Duration{"DEMO": *lease}))
		if err != nil {
			return err
		}
		defer g.Close(context.Background())
		l, err := g.Gen("DEMO", "order-42")
		if err != nil {
			return err
		}
		for i := 0; i < *goroutines; i++ {
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
					time.Sleep(*hold)
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
		*procs, *goroutines, duration.Round(time.Millisecond), *hold, *lease)
	fmt.Fprintf(out, "acquisitions:     %d\n", n)
	fmt.Fprintf(out, "throughput:       %.0f acquisitions/s\n", float64(n)/elapsed.Seconds())
	fmt.Fprintf(out, "most waiters:     %d\n", maxWaiting.Load())
	fmt.Fprintf(out, "errors:           %d\n", errs.Load())
	if overlaps.Load() > 0 || n == 0 {
		fmt.Fprintf(out, "exclusion:        VIOLATED (%d overlaps, %d acquisitions)\n", overlaps.Load(), n)
		return errors.New("exclusion did not hold")
	}
	fmt.Fprintf(out, "exclusion:        held (never two owners at once)\n")
	return nil
}
