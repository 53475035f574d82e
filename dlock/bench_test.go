package dlock_test

import (
	"context"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// BenchmarkLockUnlock is one process's hot loop: parallel Lock and Unlock of one key with no
// work inside. It reports Redis commands per acquisition (server side, scripts' inner commands
// included).
func BenchmarkLockUnlock(b *testing.B) {
	g, c := newGen(b)
	l, _ := g.Gen("BENCH", b.Name())
	ctx := context.Background()
	before := commandsB(b, c)
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() && lockUnlock(ctx, b, l) {
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(commandsB(b, c)-before-1)/float64(b.N), "redis-calls/op")
}

// BenchmarkLostNotice measures how long after the key is taken over the old owner's context
// ends. The bound is one renewal interval (75 % of the lease, here 45 ms).
func BenchmarkLostNotice(b *testing.B) {
	g, c := newGen(b)
	l, _ := g.GenWithLease("LOSTNOTICE", b.Name(), 60*time.Millisecond)
	ctx := context.Background()
	var total, worst time.Duration
	for i := 0; i < b.N; i++ {
		owned, err := l.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Duration(i%45) * time.Millisecond) // take over at varied points of the renewal cycle
		taken := time.Now()
		c.Set(ctx, l.Config().UniqueKey(), "usurper", time.Minute)
		<-owned.Done()
		d := time.Since(taken)
		total += d
		worst = max(worst, d)
		_ = l.Unlock(owned)
		c.Del(ctx, l.Config().UniqueKey())
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "mean-ms")
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
}

// BenchmarkHandOff is the bench's cross cycle between two Generators (two processes) in one
// test process: each has one goroutine that takes the lock and lets it go in a loop, so every
// acquisition is a grant from the other. It reports per acquisition the goroutines both
// started and the Redis commands (server side, scripts' inner commands included); with
// -benchmem, the allocations.
func BenchmarkHandOff(b *testing.B) {
	g1, c := newGen(b)
	g2, _ := newGen(b)
	var locks []*dlock.DistributedReentrantLock
	for _, g := range []*dlock.Generator{g1, g2} {
		l, err := g.Gen("BENCH", b.Name())
		if err != nil {
			b.Fatal(err)
		}
		locks = append(locks, l)
	}
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	ctx := context.Background()
	var n atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	goroutines, cmds := created(), commandsB(b, c)
	for _, l := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n.Add(1) <= int64(b.N) && lockUnlock(ctx, b, l) {
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(created()-goroutines-2)/float64(b.N), "goroutines/op")
	b.ReportMetric(float64(commandsB(b, c)-cmds-1)/float64(b.N), "redis-calls/op")
}

// lockUnlock takes l and lets it go, reporting an error to b; it says whether both succeeded.
func lockUnlock(ctx context.Context, b *testing.B, l *dlock.DistributedReentrantLock) bool {
	owned, err := l.Lock(ctx)
	if err == nil {
		err = l.Unlock(owned)
	}
	if err != nil {
		b.Error(err)
	}
	return err == nil
}

// BenchmarkMultiLockCycle is one goroutine's Lock and Unlock of a MultiLock of four mutexes,
// none contended: the parts are taken one after the other (the global order), and let go of
// all at once. It reports Redis commands per cycle.
func BenchmarkMultiLockCycle(b *testing.B) {
	g, c := newGen(b)
	var locks []*dlock.DistributedReentrantLock
	for _, tg := range []string{"a", "b", "c", "d"} {
		l, err := g.Gen("BENCHMULTI", b.Name()+"-"+tg)
		if err != nil {
			b.Fatal(err)
		}
		locks = append(locks, l)
	}
	m, err := g.Multi(locks...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	before := commandsB(b, c)
	b.ResetTimer()
	for range b.N {
		o, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(o); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(commandsB(b, c)-before-1)/float64(b.N), "redis-calls/op")
}

// BenchmarkMultiLockContended is two Generators (processes), two goroutines each, locking and
// unlocking MultiLocks of three mutexes out of four keys, a..c and b..d, so that every cycle
// contends with the others on two keys. It reports Redis commands per cycle.
func BenchmarkMultiLockContended(b *testing.B) {
	ctx := context.Background()
	var ms []*dlock.MultiLock
	_, c := newGen(b) // (its client counts the server's commands)
	for range 2 {
		g, _ := newGen(b)
		var locks []*dlock.DistributedReentrantLock
		for _, tg := range []string{"a", "b", "c", "d"} {
			l, err := g.Gen("BENCHMULTI", b.Name()+"-"+tg)
			if err != nil {
				b.Fatal(err)
			}
			locks = append(locks, l)
		}
		for _, parts := range [][]*dlock.DistributedReentrantLock{locks[:3], locks[1:]} {
			m, err := g.Multi(parts...)
			if err != nil {
				b.Fatal(err)
			}
			ms = append(ms, m)
		}
	}
	before := commandsB(b, c)
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				o, err := m.Lock(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := m.Unlock(o); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(commandsB(b, c)-before-1)/float64(b.N), "redis-calls/op")
}

// BenchmarkAcquisitionNowAndThen is a lock taken now and then by one goroutine: Lock, Unlock,
// then a pause longer than the channels' linger, so that each acquisition begins with no
// subscription left — a key a process locks once in a while. It reports what an acquisition
// sends Redis: scripts (EVALSHA, EVAL) and channel subscriptions (SUBSCRIBE, UNSUBSCRIBE),
// counted by the server (INFO commandstats).
func BenchmarkAcquisitionNowAndThen(b *testing.B) {
	const pause = 20 * time.Millisecond
	for _, c := range []struct {
		name string
		take func(g *dlock.Generator, ctx context.Context) (*dlock.Owner, error)
	}{
		{"mutex", func(g *dlock.Generator, ctx context.Context) (*dlock.Owner, error) {
			l, _ := g.Gen("BENCHSPARSE", "mutex")
			return l.Lock(ctx)
		}},
		{"read", func(g *dlock.Generator, ctx context.Context) (*dlock.Owner, error) {
			l, _ := g.GenRW("BENCHSPARSE", "rw")
			return l.RLock(ctx)
		}},
		{"write", func(g *dlock.Generator, ctx context.Context) (*dlock.Owner, error) {
			l, _ := g.GenRW("BENCHSPARSE", "rw")
			return l.Lock(ctx)
		}},
		{"semaphore", func(g *dlock.Generator, ctx context.Context) (*dlock.Owner, error) {
			s, _ := g.GenSemaphore("BENCHSPARSE", "sem", 2)
			return s.Acquire(ctx, 1)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			g, rc := newGen(b)
			g.SetLinger(pause / 4)
			ctx := context.Background()
			before := commandCalls(b, rc)
			b.ResetTimer()
			for range b.N {
				o, err := c.take(g, ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := o.Unlock(); err != nil {
					b.Fatal(err)
				}
				time.Sleep(pause)
			}
			b.StopTimer()
			after := commandCalls(b, rc)
			per := func(names ...string) float64 {
				var n int64
				for _, name := range names {
					n += after[name] - before[name]
				}
				return float64(n) / float64(b.N)
			}
			b.ReportMetric(per("evalsha", "eval"), "scripts/op")
			b.ReportMetric(per("subscribe", "unsubscribe", "ssubscribe", "sunsubscribe"), "subscriptions/op")
		})
	}
}

// commandCalls returns the calls of each command the server has run (INFO commandstats).
func commandCalls(t testing.TB, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		calls[name] = n
	}
	return calls
}
