package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// The read-write lock, the semaphore and a MultiLock over them and a mutex, on every
// deployment: on a Cluster their keys sit on different masters, their messages go by sharded
// pub/sub, and the MultiLock takes them one slot at a time. No writer beside anyone, never
// more than the permits out.
func TestLockFamily(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			// (1 s: an acquisition and its release each some 700 ms late outlived it)
			const lease = 3 * time.Second
			targets := targetsOn(t, sharedCluster(t), "FAMILY", unique(d.name), 3)
			var readers, writers, permits atomic.Int64
			var bad atomic.Int64
			var served atomic.Int64
			var failed atomic.Pointer[error] // the last error of a Lock, for a run that took nothing
			// The run lasts its time, and until something was taken (a loaded machine may take
			// that long to reach the deployment); bound turns a hang into a failure.
			run, stop := context.WithTimeout(context.Background(), soak(t, time.Second))
			defer stop()
			ctx, cancel := context.WithTimeout(context.Background(), soak(t, time.Second)+bound)
			defer cancel()
			var wg sync.WaitGroup
			for range 3 {
				g := generator(t, d, lease)
				rw, err := g.GenRW("FAMILY", targets[0])
				if err != nil {
					t.Fatal(err)
				}
				sem, err := g.GenSemaphore("FAMILY", targets[1], 2)
				if err != nil {
					t.Fatal(err)
				}
				mu, err := g.Gen("FAMILY", targets[2])
				if err != nil {
					t.Fatal(err)
				}
				multi, err := g.MultiOf(rw.WriteSide(), sem.Permits(1), mu)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for j := 0; ctx.Err() == nil && (run.Err() == nil || served.Load() == 0); j++ {
							var o *dlock.Owner
							var err error
							write := (i+j)%4 == 0
							switch {
							case j%5 == 4:
								o, err = multi.Lock(ctx)
								write = true
							case write:
								o, err = rw.Lock(ctx)
							default:
								o, err = rw.RLock(ctx)
							}
							if err != nil {
								failed.Store(&err)
								continue // (the bound's end, or a fault of the deployment: tried again)
							}
							if write {
								if writers.Add(1) != 1 || readers.Load() != 0 {
									bad.Add(1)
								}
							} else if readers.Add(1); writers.Load() != 0 {
								bad.Add(1)
							}
							if j%5 == 4 && permits.Add(1) > 2 {
								bad.Add(1)
							}
							time.Sleep(200 * time.Microsecond)
							if j%5 == 4 {
								permits.Add(-1)
							}
							if write {
								writers.Add(-1)
							} else {
								readers.Add(-1)
							}
							if err := o.Unlock(); err != nil {
								t.Errorf("Unlock: %v", err)
							}
							served.Add(1)
						}
					}()
				}
			}
			wg.Wait()
			if bad.Load() != 0 {
				t.Fatalf("%d overlaps", bad.Load())
			}
			if served.Load() == 0 {
				var last error
				if e := failed.Load(); e != nil {
					last = *e
				}
				t.Fatalf("nothing acquired within %v (the last Lock's error: %v)", bound, last)
			}
			figure(t, "family_"+d.name+"_acquisitions", served.Load())
		})
	}
}

// Kill -9 of the Sentinel master while one process holds a read-write lock's write side, every
// permit of a semaphore and a mutex, and another process waits for each of them and for a
// MultiLock over the mutex, the read side and a permit (failover_test.go takes the mutex alone
// through the failovers). Once a replica is promoted every waiter gets what it waited for,
// whatever the holder's releases say; the MultiLock's Owner holds every part when Lock
// returns; and every token handed out after the fault is above the holder's before it.
func TestSentinelKillMasterFamily(t *testing.T) {
	t.Parallel() // on a deployment of its own; mostly waiting
	s := redistest.NeedSentinel(t, 3)
	// (2 s: a waiter's acquisition and release each some 700 ms late outlived it)
	const typ, lease = "FAMKILL", 5 * time.Second
	tg := unique("famkill")
	holder, waiter := generatorOn(t, s.Client(), lease), generatorOn(t, s.Client(), lease)
	ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	hrw, err := holder.GenRW(typ, tg+"-rw")
	must(err)
	hsem, err := holder.GenSemaphore(typ, tg+"-sem", 2)
	must(err)
	hmu, err := holder.Gen(typ, tg+"-mu")
	must(err)
	wrw, err := waiter.GenRW(typ, tg+"-rw")
	must(err)
	wsem, err := waiter.GenSemaphore(typ, tg+"-sem", 2)
	must(err)
	wmu, err := waiter.Gen(typ, tg+"-mu")
	must(err)
	multi, err := waiter.MultiOf(wmu, wrw.ReadSide(), wsem.Permits(1))
	must(err)

	before := map[string]uint64{} // by key: the holder's token
	var held []*dlock.Owner
	take := func(key string, o *dlock.Owner, err error, token func(context.Context) (uint64, bool)) {
		t.Helper()
		must(err)
		tok, ok := token(o)
		if !ok {
			t.Fatalf("%s: no token", key)
		}
		before[key], held = tok, append(held, o)
	}
	o, err := hrw.Lock(ctx)
	take(lockKey(typ, tg+"-rw"), o, err, hrw.FencingToken)
	o, err = hsem.Acquire(ctx, 2)
	take(lockKey(typ, tg+"-sem"), o, err, hsem.FencingToken)
	o, err = hmu.Lock(ctx)
	take(lockKey(typ, tg+"-mu"), o, err, hmu.FencingToken)

	type got struct {
		what   string
		tokens map[string]uint64
		err    error
	}
	results := make(chan got, 4)
	wait := func(what string, lock func(context.Context) (*dlock.Owner, error), tokens func(*dlock.Owner) (map[string]uint64, bool)) {
		go func() {
			o, err := lock(ctx)
			if err != nil {
				results <- got{what, nil, err}
				return
			}
			r := got{what: what}
			if cause := context.Cause(o); cause != nil {
				r.err = fmt.Errorf("returned an Owner that had ended: %w", cause)
			} else if toks, ok := tokens(o); !ok {
				r.err = errors.New("returned an Owner whose tokens say not held")
			} else {
				r.tokens = toks
			}
			if err := o.Unlock(); err != nil && r.err == nil {
				r.err = fmt.Errorf("Unlock: %w", err)
			}
			results <- r
		}()
	}
	one := func(key string, token func(context.Context) (uint64, bool)) func(*dlock.Owner) (map[string]uint64, bool) {
		return func(o *dlock.Owner) (map[string]uint64, bool) {
			tok, ok := token(o)
			return map[string]uint64{key: tok}, ok
		}
	}
	wait("write side", wrw.Lock, one(lockKey(typ, tg+"-rw"), wrw.FencingToken))
	wait("permit", func(ctx context.Context) (*dlock.Owner, error) { return wsem.Acquire(ctx, 1) }, one(lockKey(typ, tg+"-sem"), wsem.FencingToken))
	wait("mutex", wmu.Lock, one(lockKey(typ, tg+"-mu"), wmu.FencingToken))
	wait("MultiLock", multi.Lock, func(o *dlock.Owner) (map[string]uint64, bool) { return multi.FencingTokens(o) })

	time.Sleep(300 * time.Millisecond) // the waiters stand in line
	must(s.SyncReplicas(10 * time.Second))
	old, err := s.KillMaster()
	must(err)
	_, err = s.WaitNewMaster(old, bound)
	must(err)
	for _, o := range held { // lost, or let go on the new master: either way it is let go
		if err := o.Unlock(); err != nil {
			t.Logf("the holder's Unlock after the failover: %v", err)
		}
	}
	for range 4 {
		select {
		case r := <-results:
			if r.err != nil {
				t.Errorf("%s: %v", r.what, r.err)
				continue
			}
			for key, tok := range r.tokens {
				if tok <= before[key] {
					t.Errorf("%s: token %d of %s after the failover, not above the holder's %d", r.what, tok, key, before[key])
				}
			}
		case <-time.After(bound):
			t.Fatalf("not every waiter got its lock within %v of the failover", bound)
		}
	}
}
