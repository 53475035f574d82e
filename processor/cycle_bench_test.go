package processor_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// BenchmarkGrantCycle runs the scripts of the cross-process cycle, with no lock around them:
// four processes, each listening on its channel of the key, take turns; each turn is a
// release that grants the key to the first in line, then the releaser standing in line
// again. It reports what Redis spends per turn (the scripts' running time, from INFO
// commandstats, and the server's CPU time, from INFO cpu), so that the scripts' cost can be
// compared across versions without the noise of whole processes.
func BenchmarkGrantCycle(b *testing.B) {
	b.Run("release+lock", func(b *testing.B) { grantCycle(b, false) })
	b.Run("relock", func(b *testing.B) { grantCycle(b, true) })
}

// grantCycle runs BenchmarkGrantCycle; with relock, each turn is one script: the release
// that grants the key also stands the releaser in line again (ReleaseRequest.Next), as a
// process whose goroutine wants the key again at once does.
func grantCycle(b *testing.B, relock bool) {
	ctx := context.Background()
	c := srv.Client()
	defer c.Close()
	cfg, err := domain.NewDLockConfig("CYCLE", fresh("cycle"+strconv.FormatInt(time.Now().UnixNano(), 36)), time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	const n = 4
	procs := make([]*processor.RedisLockProcessor, n)
	open := make([]string, n) // each process's locker: the one it holds or waits with
	seq := 0
	locker := func(i int) string { seq++; return "cycle" + strconv.Itoa(i) + "-" + strconv.Itoa(seq) }
	for i := range procs {
		mark := "cycle" + strconv.Itoa(i) + "-"
		p, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: mark})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Preload(ctx); err != nil {
			b.Fatal(err)
		}
		procs[i] = p
		ps := c.Subscribe(ctx, processor.ProcessChannel(cfg, mark))
		if _, err := ps.Receive(ctx); err != nil {
			b.Fatal(err)
		}
		defer ps.Close()
		go func() { // drain the messages
			for range ps.Channel() {
			}
		}()
	}
	ask := func(i int) processor.Result {
		open[i] = locker(i)
		r, err := procs[i].Lock(ctx, cfg, processor.LockRequest{Locker: open[i], Wait: true, Tokens: 1})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	holder := -1
	for i := range procs {
		if ask(i).Outcome == processor.Taken {
			holder = i
		}
	}
	if holder < 0 {
		b.Fatal("nobody took the key")
	}
	b.ResetTimer()
	script0, cpu0 := redisUsec(b, c)
	for range b.N {
		req := processor.ReleaseRequest{Locker: open[holder]}
		if relock {
			req.Next, req.NextLease, req.NextTokens = locker(holder), cfg.Lease(), 1
		}
		r, err := procs[holder].Unlock(ctx, cfg, req)
		if err != nil || r.Outcome != processor.Released || r.Next == "" {
			b.Fatalf("release: %+v %v", r, err)
		}
		if relock {
			if !r.Queued {
				b.Fatalf("the releaser did not stand in line again: %+v", r)
			}
			open[holder] = req.Next
		} else if ask(holder).Outcome != processor.Held {
			b.Fatal("the releaser took the key back")
		}
		next := -1
		for i := range open {
			if open[i] == r.Next {
				next = i
			}
		}
		holder = next
	}
	script1, cpu1 := redisUsec(b, c)
	b.StopTimer()
	b.ReportMetric((script1-script0)/float64(b.N), "script-us/turn")
	b.ReportMetric((cpu1-cpu0)/float64(b.N), "redis-cpu-us/turn")
}

// redisUsec returns the time Redis has spent running scripts (EVALSHA, from INFO
// commandstats) and its CPU time (from INFO cpu), in µs.
func redisUsec(b *testing.B, c *redis.Client) (script, cpu float64) {
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		name, v, _ := strings.Cut(strings.TrimSpace(l), ":")
		switch name {
		case "cmdstat_evalsha":
			for _, f := range strings.Split(v, ",") {
				if u, ok := strings.CutPrefix(f, "usec="); ok {
					script, _ = strconv.ParseFloat(u, 64)
				}
			}
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f * 1e6
		}
	}
	return script, cpu
}

// BenchmarkTryLockMiss runs a TryLock that misses, again and again: one process holds the key,
// and another asks for it without waiting, each time with a fresh acquisition — the mutex's
// lock.lua, and a one-permit semaphore's shared.lua. Each refusal settles its acquisition and
// remembers it as removed (so that a holding an earlier copy of the request took, which Redis
// then lost, is told at its release: lock.lua's and shared.lua's refuse). It reports what
// Redis spends per try, as BenchmarkGrantCycle does per turn.
func BenchmarkTryLockMiss(b *testing.B) {
	ctx := context.Background()
	c := srv.Client()
	defer c.Close()
	for _, kind := range []string{"mutex", "semaphore"} {
		b.Run(kind, func(b *testing.B) {
			cfg, err := domain.NewDLockConfig("TRYMISS", fresh(kind+strconv.FormatInt(time.Now().UnixNano(), 36)), time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			var procs [2]*processor.RedisLockProcessor
			for i := range procs {
				if procs[i], err = processor.NewRedisLockProcessor(c, processor.Options{Mark: "trymiss" + strconv.Itoa(i) + "-"}); err != nil {
					b.Fatal(err)
				}
				if err := procs[i].Preload(ctx); err != nil {
					b.Fatal(err)
				}
			}
			sem := processor.Shared{Kind: processor.KindSem, Permits: 1}
			try := func(i, n int) processor.Outcome {
				locker := "trymiss" + strconv.Itoa(i) + "-" + strconv.Itoa(n)
				if kind == "mutex" {
					r, err := procs[i].Lock(ctx, cfg, processor.LockRequest{Locker: locker, Tokens: 1})
					if err != nil {
						b.Fatal(err)
					}
					return r.Outcome
				}
				r, err := procs[i].SharedTake(ctx, cfg, sem, processor.TakeRequest{Locker: locker, N: 1})
				if err != nil {
					b.Fatal(err)
				}
				return r.Outcome
			}
			if got := try(0, 0); got != processor.Taken {
				b.Fatalf("the holder's take: %v", got)
			}
			b.ResetTimer()
			script0, cpu0 := redisUsec(b, c)
			for n := range b.N {
				if got := try(1, n); got != processor.Held {
					b.Fatalf("a try of the held key: %v, want held", got)
				}
			}
			script1, cpu1 := redisUsec(b, c)
			b.StopTimer()
			b.ReportMetric((script1-script0)/float64(b.N), "script-us/try")
			b.ReportMetric((cpu1-cpu0)/float64(b.N), "redis-cpu-us/try")
		})
	}
}
