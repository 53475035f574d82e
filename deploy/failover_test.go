package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	lease    time.Duration // of the locks in the scenario, but for the short-lease holder's
	client   func() redis.UniversalClient
	targets  func(t testing.TB, round int) []string   // three targets whose keys one master serves
	sync     func(key string) error                   // every write so far reaches the replicas
	trigger  func(key string) (old string, err error) // kill the master, or ask for a failover
	wait     func(key, old string) (string, error)    // until the failover is visible
	restore  func() error                             // ready for another round
	settled  func() error                             // optional: until the old master follows the new one

	// shortLease, if set, is the lease of a third holder's lock (C), shorter than a failover.
	shortLease time.Duration
}

// Kill -9 of the master serving the held keys' slot; its replica is promoted.
func TestClusterKillMaster(t *testing.T) {
	t.Parallel() // each on a deployment of its own; mostly waiting
	c := redistest.NeedCluster(t, 3, 1)
	runFailover(t, clusterFault(c, "cluster-kill", false, c.KillMaster, c.RestartKilled))
}

// CLUSTER FAILOVER on the replica: no write is lost, the holder keeps its lock.
func TestClusterManualFailover(t *testing.T) {
	t.Parallel() // each on a deployment of its own; mostly waiting
	c := redistest.NeedCluster(t, 3, 1)
	failover := func(key string) (string, error) {
		old := c.MasterFor(key)
		_, err := c.FailoverReplica(key)
		return old, err
	}
	runFailover(t, clusterFault(c, "cluster-manual", true, failover, func() error { return nil }))
}

// CLUSTER FAILOVER: a waiter's sharded subscription, which the old master drops, is made
// again on the slot's new master — not on the old one, a replica now, which hears nothing
// published on the new master until it syncs (a release made then went unheard until the
// waiter's poll) — and the holder's release reaches it there.
func TestClusterFailoverSubscriptionFollowsTheMaster(t *testing.T) {
	t.Parallel() // on a deployment of its own; mostly waiting
	c := redistest.NeedCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
	defer cancel()
	w := holdWithWaiter(t, ctx, generatorOn(t, c.Client(), 30*time.Second), generatorOn(t, c.Client(), 30*time.Second), "FOLLOW")
	key := w.key
	old := c.MasterFor(key)
	eventually(t, "the waiter to listen on the master", func() bool { return w.listensOn(old) })
	if err := c.SyncReplicas(key, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FailoverReplica(key); err != nil {
		t.Fatal(err)
	}
	now, err := c.WaitFailover(key, bound)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the waiter to listen on the new master "+now, func() bool { return w.listensOn(now) })
	if err := w.l.Unlock(w.held); err != nil {
		t.Fatalf("the holder's Unlock after the failover: %v", err)
	}
	w.waiterGets()
}

// A resharding moves the lock's slot, keys and all, to another master while a process holds
// the lock and another waits (CLUSTER SETSLOT MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE).
// The old master drops the waiter's sharded subscription as the slot leaves it; the waiter
// subscribes again on the new master, and the holder's release there reaches it by its
// message (or the ask it sends as that subscription is confirmed comes after the release and
// finds the key granted to it). A lease of 30 s: a waiter left deaf would be woken only by its
// poll (HowPolled).
func TestClusterSlotMigration(t *testing.T) {
	t.Parallel() // on a deployment of its own; mostly waiting
	c := redistest.NeedCluster(t, 3, 1)
	rec := &howRecorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
	defer cancel()
	w := holdWithWaiter(t, ctx, generatorOn(t, c.Client(), 30*time.Second), generatorOn(t, c.Client(), 30*time.Second, dlock.WithObserver(rec)), "MIGRATE")
	key := w.key
	old := c.MasterFor(key)
	eventually(t, "the waiter to listen on the master", func() bool { return w.listensOn(old) })
	m, err := c.BeginMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the waiter to listen on the slot's new master "+m.To(), func() bool { return w.listensOn(m.To()) })
	if err := w.l.Extend(w.held, 30*time.Second); err != nil {
		t.Fatalf("the holder's Extend on the new master: %v", err)
	}
	if err := w.l.Unlock(w.held); err != nil {
		t.Fatalf("the holder's Unlock on the new master: %v", err)
	}
	w.waiterGets()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// (HowRetry: the ask the waiter sends as its new subscription is confirmed, which may reach
	// Redis after the release granted it the key; a waiter left deaf is woken by its poll)
	if hows := rec.how; len(hows) != 1 || (hows[0] != dlock.HowNotified && hows[0] != dlock.HowRetry) {
		t.Fatalf("the waiter acquired by %v, want by the release message (or the ask of its new subscription)", hows)
	}
}

// The same resharding for a read-write lock and a semaphore: one process holds the read side
// and every permit, another waits for the write side and a permit, and the holder lets go
// while the slot is MIGRATING. Unlike the mutex's Unlock (which returns the TRYAGAIN error and
// releases in the background), their Unlocks wait, sending the release again, until it goes
// through on the slot's new master (or their lease ends): they return nil once the slot has
// moved, and the waiter, subscribed again there, gets both without its poll.
func TestClusterSlotMigrationFamily(t *testing.T) {
	t.Parallel() // on a deployment of its own; mostly waiting
	c := redistest.NeedCluster(t, 3, 1)
	const typ, lease = "MIGFAM", 30 * time.Second
	rec := &howRecorder{}
	ga, gb := generatorOn(t, c.Client(), lease), generatorOn(t, c.Client(), lease, dlock.WithObserver(rec))
	tag := "{" + unique("migfam") + "}"
	ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	rwa, err := ga.GenRW(typ, tag+"rw")
	must(err)
	sema, err := ga.GenSemaphore(typ, tag+"sem", 2)
	must(err)
	rwb, err := gb.GenRW(typ, tag+"rw")
	must(err)
	semb, err := gb.GenSemaphore(typ, tag+"sem", 2)
	must(err)
	read, err := rwa.RLock(ctx)
	must(err)
	permits, err := sema.Acquire(ctx, 2)
	must(err)
	got := make(chan error, 2)
	wait := func(lock func(context.Context) (*dlock.Owner, error)) {
		go func() {
			o, err := lock(ctx)
			if err == nil {
				err = o.Unlock()
			}
			got <- err
		}()
	}
	wait(rwb.Lock)
	wait(func(ctx context.Context) (*dlock.Owner, error) { return semb.Acquire(ctx, 1) })
	key := lockKey(typ, tag+"rw")
	listening := func(addr string) bool {
		node := redis.NewClient(&redis.Options{Addr: addr})
		defer node.Close()
		chans, err := node.Do(ctx, "pubsub", "shardchannels", "*"+tag+"*").StringSlice()
		return err == nil && len(chans) > 0
	}
	eventually(t, "the waiter to listen on the master", func() bool { return listening(c.MasterFor(key)) })
	m, err := c.BeginMigration(key)
	must(err)
	unlocked := make(chan error, 2)
	for _, o := range []*dlock.Owner{read, permits} {
		go func() { unlocked <- o.Unlock() }()
	}
	time.Sleep(300 * time.Millisecond) // the releases meet TRYAGAIN
	must(m.Finish())
	for range 2 {
		select {
		case err := <-unlocked:
			if err != nil {
				t.Errorf("the holder's Unlock during the migration: %v, want nil once the slot moved", err)
			}
		case <-time.After(bound):
			t.Fatalf("the holder's Unlock did not return within %v of the slot's move", bound)
		}
	}
	for range 2 {
		select {
		case err := <-got:
			if err != nil {
				t.Errorf("the waiter: %v", err)
			}
		case <-time.After(bound):
			t.Fatalf("the waiter did not get the lock within %v of the release", bound)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if slices.Contains(rec.how, dlock.HowPolled) {
		t.Fatalf("the waiter acquired by %v: its poll, not the release", rec.how)
	}
}

// holdAndWait is a lock of a Cluster that one process holds while another waits for it.
type holdAndWait struct {
	t    *testing.T
	ctx  context.Context
	key  string
	l    *dlock.DistributedReentrantLock // the holder's handle
	held *dlock.Owner
	got  chan error // the waiter's Lock, then its Unlock
}

// holdWithWaiter has ga take the lock typ/a fresh target and gb wait for it, within ctx.
func holdWithWaiter(t *testing.T, ctx context.Context, ga, gb *dlock.Generator, typ string) *holdAndWait {
	t.Helper()
	target := unique(strings.ToLower(typ))
	la, _ := ga.Gen(typ, target)
	lb, _ := gb.Gen(typ, target)
	held, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ob, err := lb.Lock(ctx)
		if err == nil {
			err = lb.Unlock(ob)
		}
		got <- err
	}()
	return &holdAndWait{t: t, ctx: ctx, key: lockKey(typ, target), l: la, held: held, got: got}
}

// listensOn reports whether the node at addr has a subscriber to the key's sharded channels.
func (w *holdAndWait) listensOn(addr string) bool {
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	chans, err := node.Do(w.ctx, "pubsub", "shardchannels", "{"+w.key+"}:released:*").StringSlice()
	return err == nil && len(chans) > 0
}

// waiterGets checks that the waiter got the lock within bound of now (the holder let go).
func (w *holdAndWait) waiterGets() {
	w.t.Helper()
	select {
	case err := <-w.got:
		if err != nil {
			w.t.Fatalf("the waiter: %v", err)
		}
	case <-time.After(bound):
		w.t.Fatalf("the waiter did not get the lock within %v of the release", bound)
	}
}

// eventually waits up to bound for cond, what it is waiting for.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", bound, what)
		}
	}
}

// howRecorder records how each acquisition came about.
type howRecorder struct {
	dlock.NopObserver
	mu  sync.Mutex
	how []dlock.How
}

func (r *howRecorder) Acquired(e dlock.AcquireEvent) {
	r.mu.Lock()
	r.how = append(r.how, e.How)
	r.mu.Unlock()
}

func clusterFault(c *redistest.Cluster, name string, lossless bool, trigger func(string) (string, error), restore func() error) fault {
	lease := 5 * time.Second
	if lossless {
		lease = 2 * time.Second
	}
	return fault{
		name: name, lossless: lossless, lease: lease, shortLease: time.Second,
		client: func() redis.UniversalClient { return c.Client() }, // go-redis's defaults
		targets: func(t testing.TB, round int) []string {
			prefix := unique(fmt.Sprintf("%s-%d", name, round))
			return targetsWith(t, c, c.MasterFor(lockKey("FAILOVER", prefix)), "FAILOVER", prefix, 3)
		},
		sync:    func(key string) error { return c.SyncReplicas(key, 10*time.Second) },
		trigger: trigger,
		wait:    func(key, _ string) (string, error) { return c.WaitFailover(key, bound) },
		restore: restore,
	}
}

// Kill -9 of the Sentinel-watched master; the sentinels promote the replica.
func TestSentinelKillMaster(t *testing.T) {
	t.Parallel() // each on a deployment of its own; mostly waiting
	s := redistest.NeedSentinel(t, 3)
	f := sentinelFault(s, "sentinel-kill", func(string) (string, error) { return s.KillMaster() }, s.RestartKilled)
	f.shortLease = time.Second
	runFailover(t, f)
}

// SENTINEL FAILOVER: the replica is promoted while the old master is still up. The old
// master keeps taking writes from clients that have not yet heard of the switch, and those
// writes are lost; a renewal that lands there is lost too (see
// TestSentinelFailoverShortLease). With a 5 s lease no renewal of this scenario falls in that
// window, so there is no short-lease holder here.
func TestSentinelFailover(t *testing.T) {
	t.Parallel() // each on a deployment of its own; mostly waiting
	s := redistest.NeedSentinel(t, 3)
	f := sentinelFault(s, "sentinel-failover", func(string) (string, error) { return s.Failover() },
		func() error { return s.WaitReplicas(2 * bound) })
	if soaking() {
		// The sentinels demote the old master some 10 s after the failover; until then it
		// still takes subscriptions and commands from clients connected to it. The soak run
		// times hand-offs before and after that separately.
		f.settled = f.restore
	}
	runFailover(t, f)
}

func sentinelFault(s *redistest.Sentinel, name string, trigger func(string) (string, error), restore func() error) fault {
	return fault{
		name: name, lease: 5 * time.Second,
		client: func() redis.UniversalClient { return s.Client() },
		targets: func(_ testing.TB, round int) []string {
			prefix := unique(fmt.Sprintf("%s-%d", name, round))
			return []string{prefix + "-a", prefix + "-b", prefix + "-c"}
		},
		sync:    func(string) error { return s.SyncReplicas(10 * time.Second) },
		trigger: trigger,
		wait:    func(_, old string) (string, error) { return s.WaitNewMaster(old, bound) },
		restore: restore,
	}
}

// runFailover is the failover scenario. Two Generators have two goroutines each contending
// on keys A, B and C (served by one master). A third Generator, the holder, takes A and B; a
// fourth, with a lease shorter than a failover (if f.shortLease is set; else there is no C),
// takes C; they hold them while the rest wait.
// Every write is replicated (WAIT), then the fault strikes. Once the failover is visible the
// holder releases A at once and keeps B for another lease (so B must have been renewed on the
// new master, or the holder told of its loss), then releases it; C is kept as long as it is
// not lost (after a kill it is: its lease runs out during the failover). Throughout, the
// ledger checks that nobody acquires a key whose holder was not told of a loss and that
// fencing tokens rise; every waiter must acquire again after the failover.
func runFailover(t *testing.T, f fault) {
	const typ = "FAILOVER"
	const holderGen, shortGen = 2, 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
	defer cancel()
	holder := generatorOn(t, f.client(), f.lease)
	var short *dlock.Generator
	if f.shortLease > 0 {
		short = generatorOn(t, f.client(), f.shortLease)
	}
	waiters := []*dlock.Generator{generatorOn(t, f.client(), f.lease), generatorOn(t, f.client(), f.lease)}
	end := time.Now().Add(soak(t, 0)) // rounds of failovers until then
	for round := 0; round == 0 || time.Now().Before(end); round++ {
		if round > 0 {
			if err := f.restore(); err != nil {
				t.Fatal(err)
			}
		}
		targets := f.targets(t, round)
		keys := make([]string, len(targets))
		for i, target := range targets {
			keys[i] = lockKey(typ, target)
		}
		if short == nil {
			targets, keys = targets[:2], keys[:2]
		}
		keyA, keyB := keys[0], keys[1]
		led := newLedger(t)
		wctx, stop := context.WithCancel(ctx)
		var ws []*workload
		var waits []func()
		for _, target := range targets {
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
		fatal := func(args ...any) {
			t.Helper()
			stopWaiters()
			t.Fatal(args...)
		}

		// Before: the waiters hand the keys to each other; then the holders take them.
		before := time.Now()
		time.Sleep(phase(250 * time.Millisecond))
		type held struct {
			lock  *dlock.DistributedReentrantLock
			owned context.Context
			h     *holding
		}
		take := func(g *dlock.Generator, gen int, who, target string) held {
			l, err := g.Gen(typ, target)
			if err != nil {
				fatal(err)
			}
			lctx, cancel := context.WithTimeout(ctx, bound)
			defer cancel()
			owned, err := l.Lock(lctx)
			if err != nil {
				fatal(who, ": Lock(", target, "): ", err)
			}
			token, ok := l.FencingToken(owned)
			return held{l, owned, led.enter(lockKey(typ, target), gen, who, owned, token, ok)}
		}
		a := take(holder, holderGen, "holder", targets[0])
		b := take(holder, holderGen, "holder", targets[1])
		var c held
		if short != nil {
			c = take(short, shortGen, "short-lease holder", targets[2])
		}
		time.Sleep(200 * time.Millisecond) // the waiters wait behind the holders
		beforeEnd := time.Now()
		for _, key := range keys {
			if err := f.sync(key); err != nil {
				fatal(err)
			}
		}

		t0 := time.Now()
		old, err := f.trigger(keyA)
		if err != nil {
			fatal(err)
		}
		now, err := f.wait(keyA, old)
		if err != nil {
			fatal(err)
		}
		t1 := time.Now()
		t.Logf("round %d: master %s -> %s", round, old, now)
		figure(t, f.name+"_fault_to_failover_visible", round1(t1.Sub(t0)))
		var settled time.Time
		settledDone := make(chan struct{})
		go func() {
			defer close(settledDone)
			if f.settled != nil && f.settled() == nil {
				settled = time.Now()
			}
		}()
		var counts []int64 // acquisitions per waiter goroutine at the failover
		for _, w := range ws {
			for i := range w.perGor {
				counts = append(counts, w.perGor[i].Load())
			}
		}

		// A: released as soon as the failover is visible.
		led.leave(a.h)
		errA := a.lock.Unlock(a.owned)
		switch {
		case errA == nil:
		case f.lossless:
			t.Errorf("holder: Unlock(A) after a lossless failover: %v", errA)
		default:
			t.Logf("holder: Unlock(A) right after the failover: %v", errA)
		}
		figure(t, f.name+"_unlock_A_after_failover", outcome(errA))

		// B: kept for another lease, unless the holder is told it lost it.
		select {
		case <-b.owned.Done():
		case <-time.After(f.lease):
		}
		keep := func(name string, x held, lossless bool) (released time.Time) {
			if x.owned.Err() != nil {
				cause := context.Cause(x.owned)
				if !errors.Is(cause, dlock.ErrLockLost) {
					t.Errorf("%s's owner context ended with %v, want ErrLockLost", name, cause)
				}
				if lossless {
					t.Errorf("%s lost in a failover that loses no write: %v", name, cause)
				}
				told := time.Unix(0, x.h.told.Load())
				figure(t, f.name+"_"+name, "lost")
				figure(t, f.name+"_fault_to_"+name+"_loss_told", round1(told.Sub(t0)))
				if err := x.lock.Unlock(x.owned); !errors.Is(err, dlock.ErrLockLost) {
					t.Errorf("Unlock(%s) after the loss = %v, want ErrLockLost", name, err)
				}
				return told
			}
			figure(t, f.name+"_"+name, "kept")
			led.leave(x.h)
			released = time.Now()
			if err := x.lock.Unlock(x.owned); err != nil {
				t.Errorf("Unlock(%s) held over the failover: %v", name, err)
			}
			return released
		}
		afterB := keep("B", b, f.lossless)
		var afterC time.Time
		if short != nil {
			afterC = keep("C", c, false)
		}

		// After: every waiter acquires again, and the keys keep changing hands.
		if err := waitUntil(bound, func() bool {
			i := 0
			for _, w := range ws {
				for j := range w.perGor {
					if w.perGor[j].Load() <= counts[i] {
						return false
					}
					i++
				}
			}
			return true
		}); err != nil {
			t.Errorf("not every waiter acquired within %v after the failover", bound)
		}
		time.Sleep(phase(500 * time.Millisecond))
		stopWaiters()
		afterEnd := time.Now()

		if a, ok := led.firstAfter(keyA, t1, holderGen); ok {
			figure(t, f.name+"_failover_visible_to_waiter_acquires_A", round1(a.at.Sub(t1)))
		} else {
			t.Errorf("no waiter acquired A after the failover")
		}
		type kept struct {
			name, key string
			after     time.Time
			gen       int
		}
		check := []kept{{"B", keyB, afterB, holderGen}}
		if short != nil {
			check = append(check, kept{"C", keys[2], afterC, shortGen})
		}
		for _, k := range check {
			a, ok := led.firstAfter(k.key, k.after, k.gen)
			switch {
			case !ok:
				t.Errorf("no waiter acquired %s after its holder let it go", k.name)
			case a.afterTold > 0:
				figure(t, f.name+"_"+k.name+"_loss_told_to_other_acquires", round1(a.afterTold))
			default:
				figure(t, f.name+"_"+k.name+"_released_to_waiter_acquires", round1(a.at.Sub(k.after)))
			}
		}
		for _, key := range keys {
			checkTokensAcross(t, led, key, t0)
		}
		handoffs := func(from, to time.Time) durations {
			var d durations
			for _, key := range keys {
				d = append(d, led.handoffs(key, from, to)...)
			}
			return d
		}
		afterFrom := afterB
		if afterC.After(afterFrom) {
			afterFrom = afterC
		}
		figure(t, f.name+"_handoff_before", handoffs(before, beforeEnd).summary())
		<-settledDone
		if f.settled != nil && !settled.IsZero() && settled.Before(afterEnd) {
			figure(t, f.name+"_settled_after_failover", round1(settled.Sub(t1)))
			figure(t, f.name+"_handoff_after_unsettled", handoffs(afterFrom, settled).summary())
			figure(t, f.name+"_handoff_after_settled", handoffs(settled, afterEnd).summary())
		} else {
			figure(t, f.name+"_handoff_after", handoffs(afterFrom, afterEnd).summary())
		}
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

// phase is how long the waiters run before and after a failover: short, or 8 times that when
// soaking (the soak repeats failovers until DLOCK_SOAK has passed).
func phase(short time.Duration) time.Duration {
	if soaking() {
		return 8 * short
	}
	return short
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

// Two owners after SENTINEL FAILOVER, and WithReplicaAck. The sentinels promote the replica
// (REPLICAOF NO ONE) and only then, up to a second later, announce +switch-master; until a
// client hears it, it keeps writing to the old master, which is still a master (it is demoted
// some 10 s later) and no longer replicates to the promoted one. A holder's renewal that lands
// there succeeds, so the holder counts its lease from it, but the key on the new master keeps
// the expiry of the last replicated renewal: it expires, another Generator takes it on the new
// master, and the holder learns of it only at its next renewal. With a 1 s lease (renewal
// every 750 ms) this happens in nearly every run without replica acknowledgement: the window
// is measured, not failed. With WithReplicaAck(1, …) a renewal that no replica acknowledged
// does not count, so the holder is told of the loss before the key can expire on the new
// master: there must be no second owner.
func TestSentinelFailoverShortLease(t *testing.T) {
	for _, ack := range []bool{false, true} {
		name := "no-ack"
		if ack {
			name = "replica-ack"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sentinelFailoverShortLease(t, name, ack)
		})
	}
}

func sentinelFailoverShortLease(t *testing.T, name string, ack bool) {
	s := redistest.NeedSentinel(t, 3)
	const lease = time.Second
	target := unique("split")
	var opts []dlock.Option
	if ack {
		opts = append(opts, dlock.WithReplicaAck(1, 100*time.Millisecond))
	}
	holder, err := generatorOn(t, s.Client(), lease, opts...).Gen("SPLIT", target)
	if err != nil {
		t.Fatal(err)
	}
	key := lockKey("SPLIT", target)
	waiter, err := generatorOn(t, s.Client(), lease, opts...).Gen("SPLIT", target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	owned, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	led := newLedger(t)
	if !ack {
		led.tolerateOverlaps()
	}
	token, ok := holder.FencingToken(owned)
	h := led.enter(key, 0, "holder", owned, token, ok)
	got := make(chan time.Time, 1)
	go func() {
		o, err := waiter.Lock(ctx)
		if err != nil {
			t.Errorf("waiter: %v", err)
			got <- time.Time{}
			return
		}
		at := time.Now()
		tok, ok := waiter.FencingToken(o)
		wh := led.enter(key, 1, "waiter", o, tok, ok)
		led.leave(wh)
		_ = waiter.Unlock(o)
		got <- at
	}()
	time.Sleep(300 * time.Millisecond)
	if err := s.SyncReplicas(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	old, err := s.Failover()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitNewMaster(old, bound); err != nil {
		t.Fatal(err)
	}
	at := <-got
	select {
	case <-owned.Done():
	case <-time.After(bound):
	}
	t.Logf("waiter acquired %v after the fault; holder's owner context: %v", at.Sub(t0), context.Cause(owned))
	figure(t, "sentinel-failover-short-"+name+"_two_owners", led.overlapCount())
	if told := h.told.Load(); told != 0 && !at.IsZero() {
		figure(t, "sentinel-failover-short-"+name+"_waiter_acquired_after_fault", round1(at.Sub(t0)))
		figure(t, "sentinel-failover-short-"+name+"_holder_told_after_fault", round1(time.Unix(0, told).Sub(t0)))
		// positive: the waiter acquired before the holder was told (two owners for that long)
		figure(t, "sentinel-failover-short-"+name+"_two_owner_window", round1(time.Unix(0, told).Sub(at)))
	}
	led.leave(h)
	_ = holder.Unlock(owned)
}

// Kill -9 of the master of a key that a holder holds and never waited for (so its Generator
// listens on no channel there, and sends nothing between renewals): its next renewal must
// reach the promoted replica in time. With go-redis's defaults a request to the dead master is
// retried by the client for longer than the quarter of a lease the renewal has left (four tries
// of five dials each, then the same again for the Cluster's redirections), and the holder
// lost a 5 s lease in five of five trials of a newcomer's, the failover visible 2.1–2.7 s after
// the kill.
func TestClusterKillMasterOfAnIdleHolder(t *testing.T) {
	t.Parallel() // on a deployment of its own; mostly waiting
	c := redistest.NeedCluster(t, 3, 1)
	const lease = 5 * time.Second
	target := unique("idle")
	key := lockKey("IDLE", target)
	l, err := generatorOn(t, c.Client(), lease).Gen("IDLE", target) // go-redis's defaults
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SyncReplicas(key, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	old, err := c.KillMaster(key)
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.WaitFailover(key, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("master %s -> %s, visible after %v", old, now, time.Since(t0).Round(time.Millisecond))
	// Past two renewals after the failover (one at 75 % of the lease, the next 75 % after it).
	select {
	case <-owned.Done():
		t.Fatalf("the holder lost a key that survived the failover: %v", context.Cause(owned))
	case <-time.After(2 * lease):
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatalf("Unlock after the failover: %v", err)
	}
}
