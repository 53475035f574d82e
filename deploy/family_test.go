package deploy_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// The read-write lock, the semaphore and a MultiLock over them and a mutex, on every
// deployment: on a Cluster their keys sit on different masters, their messages go by sharded
// pub/sub, and the MultiLock takes them one slot at a time. No writer beside anyone, never
// more than the permits out.
func TestLockFamily(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			const lease = time.Second
			targets := targetsOn(t, sharedCluster(t), "FAMILY", unique(d.name), 3)
			var readers, writers, permits atomic.Int64
			var bad atomic.Int64
			var served atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), soak(t, time.Second))
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
						for j := 0; ctx.Err() == nil; j++ {
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
								continue // (the run's end)
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
				t.Fatal("nothing acquired")
			}
			figure(t, "family_"+d.name+"_acquisitions", served.Load())
		})
	}
}
