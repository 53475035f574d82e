package deploy_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// Several Generators (each one "process") contend on one key and on keys in different slots
// (spread over every master of the cluster): no two owners at once, the unprotected counter
// loses no update, fencing tokens rise with every acquisition of a key.
func TestContention(t *testing.T) {
	for _, d := range deployments(t) {
		for _, keys := range []int{1, 6} {
			t.Run(fmt.Sprintf("%s/keys=%d", d.name, keys), func(t *testing.T) {
				// (1 s: an acquisition and its release each some 700 ms late outlived it)
				const lease = 3 * time.Second
				gens := make([]*dlock.Generator, 3)
				for i := range gens {
					gens[i] = generator(t, d, lease)
				}
				targets := targetsOn(t, sharedCluster(t), "CONTEND", unique(d.name), 6)[:keys]
				w := &workload{t: t, gens: gens, typ: "CONTEND", targets: targets, perGen: 3,
					hold: 200 * time.Microsecond, ledger: newLedger(t)}
				run := soak(t, time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), run)
				defer cancel()
				w.start(ctx)()
				n := w.acquired.Load()
				if n == 0 {
					t.Fatal("no acquisitions")
				}
				if c := w.counted(); c != n {
					t.Errorf("unprotected counters say %d, acquisitions %d: critical sections overlapped", c, n)
				}
				perGen := make([]int64, len(gens))
				for i := range w.perGor {
					perGen[i/w.perGen] += w.perGor[i].Load()
				}
				var handoffs durations
				for _, target := range targets {
					handoffs = append(handoffs, w.ledger.handoffs(lockKey("CONTEND", target), time.Time{}, time.Now())...)
				}
				figure(t, fmt.Sprintf("contention_%s_keys%d_acquisitions_per_s", d.name, keys), int(float64(n)/run.Seconds()))
				figure(t, fmt.Sprintf("contention_%s_keys%d_per_generator", d.name, keys), fmt.Sprint(perGen))
				figure(t, fmt.Sprintf("contention_%s_keys%d_handoff", d.name, keys), handoffs.summary())
			})
		}
	}
}

// A release wakes waiters in other Generators: each round one Generator holds the key while
// the two others wait in Lock; its Unlock hands the key to one of them, whose Unlock hands it
// to the last. The hand-off latency is from the releaser's decision to the next owner's Lock
// returning.
func TestHandOver(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			// (1 s: an acquisition and its release each some 700 ms late outlived it)
			const lease = 3 * time.Second
			target := unique("handover")
			key := lockKey("HANDOVER", target)
			locks := make([]*dlock.DistributedReentrantLock, 3)
			for i := range locks {
				l, err := generator(t, d, lease).Gen("HANDOVER", target)
				if err != nil {
					t.Fatal(err)
				}
				locks[i] = l
			}
			led := newLedger(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
			defer cancel()
			take := func(gen int) (context.Context, *holding) {
				lctx, cancel := context.WithTimeout(ctx, bound)
				defer cancel()
				owned, err := locks[gen].Lock(lctx)
				if err != nil {
					t.Errorf("generator %d: Lock: %v", gen, err)
					return nil, nil
				}
				token, ok := locks[gen].FencingToken(owned)
				if !ok {
					t.Errorf("generator %d: no fencing token", gen)
				}
				return owned, led.enter(key, gen, fmt.Sprintf("g%d", gen), owned, token, ok)
			}
			give := func(gen int, owned context.Context, h *holding) {
				led.leave(h)
				if err := locks[gen].Unlock(owned); err != nil {
					t.Errorf("generator %d: Unlock: %v", gen, err)
				}
			}
			var mu sync.Mutex
			var hs durations
			rounds := 10
			if soaking() {
				rounds = 200
			}
			for r := range rounds {
				first := r % 3
				owned, h := take(first)
				if h == nil {
					return
				}
				var wg sync.WaitGroup
				for _, gen := range []int{(first + 1) % 3, (first + 2) % 3} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						owned, h := take(gen)
						if h == nil {
							return
						}
						mu.Lock()
						hs = append(hs, h.handoff)
						mu.Unlock()
						time.Sleep(5 * time.Millisecond)
						give(gen, owned, h)
					}()
				}
				time.Sleep(50 * time.Millisecond) // both wait: their attempts failed, they listen
				give(first, owned, h)
				wg.Wait()
				if t.Failed() {
					return
				}
			}
			for _, h := range hs {
				if h <= 0 {
					t.Fatalf("a waiter acquired without a hand-off from another Generator: %v", hs)
				}
			}
			figure(t, "handoff_"+d.name, hs.summary())
		})
	}
}

// A lock held for several leases is renewed and not lost: the owner context stays live, other
// Generators' TryLock fails all along, Unlock succeeds, and the next owner's token is higher.
func TestRenewal(t *testing.T) {
	for _, d := range deployments(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel() // mostly sleeping
			// (300 ms: a renewal 75 ms late on a loaded machine lost it; 1 s: one 250 ms late)
			const lease = 3 * time.Second
			target := unique("renew")
			holder, err := generator(t, d, lease).Gen("RENEW", target)
			if err != nil {
				t.Fatal(err)
			}
			other, err := generator(t, d, lease).Gen("RENEW", target)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
			defer cancel()
			owned, err := holder.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			token, _ := holder.FencingToken(owned)
			hold := soak(t, 3*lease)
			for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(lease / 3) {
				if owned.Err() != nil {
					t.Fatalf("lock lost after %v of %v held: %v", hold-time.Until(end), hold, context.Cause(owned))
				}
				if _, ok, err := other.TryLock(ctx); ok || err != nil {
					t.Fatalf("another Generator's TryLock = %v, %v while the lock is held", ok, err)
				}
			}
			if err := holder.Unlock(owned); err != nil {
				t.Fatalf("Unlock after %v (%d leases): %v", hold, hold/lease, err)
			}
			o2, ok, err := other.TryLock(ctx)
			if !ok || err != nil {
				t.Fatalf("TryLock after the release = %v, %v", ok, err)
			}
			if t2, _ := other.FencingToken(o2); t2 <= token {
				t.Errorf("next token %d not above %d", t2, token)
			}
			if err := other.Unlock(o2); err != nil {
				t.Fatal(err)
			}
		})
	}
}
