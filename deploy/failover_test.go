package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// fault fails over the master that serves a key, in one way, on one deployment.
type fault struct {
	name     string
	lossless bool          // no acknowledged write is lost: the holder must keep its locks
	lease    time.Duration // of every lock in the scenario
	client   func() redis.UniversalClient
	targets  func(t testing.TB, round int) (a, b string) // two targets whose keys one master serves
	sync     func(key string) error                      // every write so far reaches the replicas
	trigger  func(key string) (old string, err error)    // kill the master, or ask for a failover
	wait     func(key, old string) (string, error)       // until the failover is visible
	restore  func() error                                // ready for another round
}

// Kill -9 of the master serving the held keys' slot; its replica is promoted.
func TestClusterKillMaster(t *testing.T) {
	c := redistest.NeedCluster(t, 3, 1)
	runFailover(t, clusterFault(c, "cluster-kill", false, c.KillMaster, c.RestartKilled))
}

// CLUSTER FAILOVER on the replica: no write is lost, the holder keeps its lock.
func TestClusterManualFailover(t *testing.T) {
	c := redistest.NeedCluster(t, 3, 1)
	failover := func(key string) (string, error) {
		old := c.MasterFor(key)
		_, err := c.FailoverReplica(key)
		return old, err
	}
	runFailover(t, clusterFault(c, "cluster-manual", true, failover, func() error { return nil }))
}

func clusterFault(c *redistest.Cluster, name string, lossless bool, trigger func(string) (string, error), restore func() error) fault {
	lease := 5 * time.Second
	if lossless {
		lease = 2 * time.Second
	}
	return fault{
		name: name, lossless: lossless, lease: lease,
		client: func() redis.UniversalClient { return c.Client(clusterOptions) },
		targets: func(t testing.TB, round int) (string, string) {
			prefix := unique(fmt.Sprintf("%s-%d", name, round))
			master := c.MasterFor(lockKey("FAILOVER", prefix))
			ts := targetsWith(t, c, master, "FAILOVER", prefix, 2)
			return ts[0], ts[1]
		},
		sync:    func(key string) error { return c.SyncReplicas(key, 10*time.Second) },
		trigger: trigger,
		wait:    func(key, _ string) (string, error) { return c.WaitFailover(key, bound) },
		restore: restore,
	}
}

// Kill -9 of the Sentinel-watched master; the sentinels promote the replica.
func TestSentinelKillMaster(t *testing.T) {
	s := redistest.NeedSentinel(t, 3)
	runFailover(t, sentinelFault(s, "sentinel-kill", false, func(string) (string, error) { return s.KillMaster() }, s.RestartKilled))
}

// SENTINEL FAILOVER: the replica is promoted while the old master is still up.
func TestSentinelFailover(t *testing.T) {
	s := redistest.NeedSentinel(t, 3)
	runFailover(t, sentinelFault(s, "sentinel-failover", true, func(string) (string, error) { return s.Failover() },
		func() error { return s.WaitReplicas(2 * bound) }))
}

func sentinelFault(s *redistest.Sentinel, name string, lossless bool, trigger func(string) (string, error), restore func() error) fault {
	lease := 5 * time.Second
	if lossless {
		lease = 2 * time.Second
	}
	return fault{
		name: name, lossless: lossless, lease: lease,
		client: func() redis.UniversalClient { return s.Client() },
		targets: func(_ testing.TB, round int) (string, string) {
			prefix := unique(fmt.Sprintf("%s-%d", name, round))
			return prefix + "-a", prefix + "-b"
		},
		sync:    func(string) error { return s.SyncReplicas(10 * time.Second) },
		trigger: trigger,
		wait:    func(_, old string) (string, error) { return s.WaitNewMaster(old, bound) },
		restore: restore,
	}
}

// runFailover is the failover scenario. Two Generators have two goroutines each contending
// on keys A and B (served by one master); a third Generator, the holder, takes both and holds
// them while the rest wait. Every write is replicated (WAIT), then the fault strikes. Once the
// failover is visible the holder releases A at once and keeps B for another lease (so B
// must have been renewed on the new master, or the holder told of its loss), then releases
// it. Throughout, the ledger checks that nobody acquires a key whose holder was not told of a
// loss and that fencing tokens rise; every waiter must acquire again after the failover.
func runFailover(t *testing.T, f fault) {
	const typ = "FAILOVER"
	const holderGen = 2
	ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
	defer cancel()
	holder := generatorOn(t, f.client(), f.lease)
	waiters := []*dlock.Generator{generatorOn(t, f.client(), f.lease), generatorOn(t, f.client(), f.lease)}
	end := time.Now().Add(soak(t, 0))
	for round := 0; round == 0 || time.Now().Before(end); round++ {
		if round > 0 {
			if err := f.restore(); err != nil {
				t.Fatal(err)
			}
		}
		ta, tb := f.targets(t, round)
		keyA, keyB := lockKey(typ, ta), lockKey(typ, tb)
		led := newLedger(t)
		wctx, stop := context.WithCancel(ctx)
		var ws []*workload
		var waits []func()
		for _, target := range []string{ta, tb} {
			w := &workload{t: t, gens: waiters, typ: typ, targets: []string{target}, perGen: 2,
				hold: 10 * time.Millisecond, ledger: led, faults: true}
			ws = append(ws, w)
			waits = append(waits, w.start(wctx))
		}
		stopWaiters := func() {
			stop()
			for _, wait := range waits {
				wait()
			}
		}

		// Before: the waiters hand the keys to each other; then the holder takes both.
		before := time.Now()
		time.Sleep(soak(t, time.Second) / 4)
		take := func(target string) (*dlock.DistributedReentrantLock, context.Context, *holding) {
			l, err := holder.Gen(typ, target)
			if err != nil {
				t.Fatal(err)
			}
			lctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			owned, err := l.Lock(lctx)
			if err != nil {
				stopWaiters()
				t.Fatalf("holder: Lock(%s): %v", target, err)
			}
			token, ok := l.FencingToken(owned)
			return l, owned, led.enter(lockKey(typ, target), holderGen, "holder", owned, token, ok)
		}
		la, ownedA, hA := take(ta)
		lb, ownedB, hB := take(tb)
		time.Sleep(200 * time.Millisecond) // the waiters wait behind the holder
		beforeEnd := time.Now()
		for _, key := range []string{keyA, keyB} {
			if err := f.sync(key); err != nil {
				stopWaiters()
				t.Fatal(err)
			}
		}

		t0 := time.Now()
		old, err := f.trigger(keyA)
		if err != nil {
			stopWaiters()
			t.Fatal(err)
		}
		now, err := f.wait(keyA, old)
		if err != nil {
			stopWaiters()
			t.Fatal(err)
		}
		t1 := time.Now()
		t.Logf("round %d: master %s -> %s", round, old, now)
		figure(t, f.name+"_fault_to_failover_visible", round1(t1.Sub(t0)))
		acquiredAt := make([]int64, 0, 8)
		for _, w := range ws {
			for i := range w.perGor {
				acquiredAt = append(acquiredAt, w.perGor[i].Load())
			}
		}

		// A: released as soon as the failover is visible.
		led.leave(hA)
		errA := la.Unlock(ownedA)
		switch {
		case errA == nil:
		case f.lossless:
			t.Errorf("holder: Unlock(A) after a lossless failover: %v", errA)
		case errors.Is(errA, dlock.ErrLockLost):
			t.Logf("holder: A was lost: %v", errA)
		default:
			t.Logf("holder: Unlock(A) right after the failover: %v", errA)
		}
		figure(t, f.name+"_unlock_A_after_failover", outcome(errA))

		// B: kept for another lease, unless the holder is told it lost it.
		select {
		case <-ownedB.Done():
		case <-time.After(f.lease):
		}
		var afterB time.Time
		if ownedB.Err() != nil {
			cause := context.Cause(ownedB)
			if !errors.Is(cause, dlock.ErrLockLost) {
				t.Errorf("holder: B's owner context ended with %v, want ErrLockLost", cause)
			}
			if f.lossless {
				t.Errorf("holder lost B in a failover that loses no write: %v", cause)
			}
			told := time.Unix(0, hB.told.Load())
			afterB = told
			figure(t, f.name+"_B", "lost")
			figure(t, f.name+"_fault_to_B_loss_told", round1(told.Sub(t0)))
			if err := lb.Unlock(ownedB); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("holder: Unlock(B) after the loss = %v, want ErrLockLost", err)
			}
		} else {
			figure(t, f.name+"_B", "kept")
			led.leave(hB)
			afterB = time.Now()
			if err := lb.Unlock(ownedB); err != nil {
				t.Errorf("holder: Unlock(B) held over the failover: %v", err)
			}
		}

		// After: every waiter acquires again, and the keys keep changing hands.
		if err := waitUntil(bound, func() bool {
			i := 0
			for _, w := range ws {
				for j := range w.perGor {
					if w.perGor[j].Load() <= acquiredAt[i] {
						return false
					}
					i++
				}
			}
			return true
		}); err != nil {
			t.Errorf("not every waiter acquired within %v after the failover", bound)
		}
		time.Sleep(soak(t, time.Second) / 2)
		stopWaiters()
		afterEnd := time.Now()

		if a, ok := led.firstAfter(keyA, t1, holderGen); ok {
			figure(t, f.name+"_failover_visible_to_waiter_acquires_A", round1(a.at.Sub(t1)))
		} else {
			t.Errorf("no waiter acquired A after the failover")
		}
		if a, ok := led.firstAfter(keyB, afterB, holderGen); ok {
			if a.afterTold > 0 {
				figure(t, f.name+"_B_loss_told_to_other_acquires", round1(a.afterTold))
			} else {
				figure(t, f.name+"_B_released_to_waiter_acquires", round1(a.at.Sub(afterB)))
			}
		} else {
			t.Errorf("no waiter acquired B after the holder let it go")
		}
		for _, key := range []string{keyA, keyB} {
			checkTokensAcross(t, led, key, t0)
		}
		hBefore := append(led.handoffs(keyA, before, beforeEnd), led.handoffs(keyB, before, beforeEnd)...)
		hAfter := append(led.handoffs(keyA, afterB, afterEnd), led.handoffs(keyB, afterB, afterEnd)...)
		figure(t, f.name+"_handoff_before", hBefore.summary())
		figure(t, f.name+"_handoff_after", hAfter.summary())
		var lost, unlockErr int64
		for _, w := range ws {
			lost += w.lost.Load()
			unlockErr += w.unlockErr.Load()
		}
		figure(t, f.name+"_waiter_losses", lost)
		figure(t, f.name+"_waiter_unlock_errors", unlockErr)
		if t.Failed() {
			return
		}
	}
}

// checkTokensAcross checks that every fencing token of key handed out after at is above every
// one handed out before.
func checkTokensAcross(t *testing.T, led *ledger, key string, at time.Time) {
	t.Helper()
	var before, after uint64
	afterMin := ^uint64(0)
	for _, a := range led.acquisitions(key) {
		if a.token == 0 {
			continue
		}
		if a.at.Before(at) {
			before = max(before, a.token)
		} else {
			after = max(after, a.token)
			afterMin = min(afterMin, a.token)
		}
	}
	if after == 0 {
		t.Errorf("%s: no fencing token after the failover", key)
	} else if afterMin <= before {
		t.Errorf("%s: fencing token %d after the failover, not above %d before it", key, afterMin, before)
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, dlock.ErrLockLost):
		return "lost"
	}
	var re *dlock.RedisProcessError
	if errors.As(err, &re) {
		return "redis-error"
	}
	return "error"
}

// round1 rounds a duration for a FIGURE line.
func round1(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func waitUntil(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}
