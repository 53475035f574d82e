package deploy_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// After a completed failover (the master killed, its replica promoted and agreed on by every
// node) Redis is reachable: only the slot map of a ClusterClient that used the old master
// still names it, and go-redis retries a refused dial on that same address and never reloads
// the map for it. Every call of the API on such a client must work as on the new master: a
// holder's Unlock returns nil (it released the key, it did not fall back on the background
// give-back) and the process waiting gets the key without waiting out the holder's lease, for
// the mutex, the read-write lock and the semaphore; Extend renews; TryLock and Lock acquire.
// Each "process" has a client of its own that used the old master before the kill and made no
// request since. The leases are long (two minutes), so a waiter served only by the lease running
// out fails the bound.
func TestClusterCallsAfterCompletedFailover(t *testing.T) {
	t.Parallel() // on a cluster of its own; mostly waiting
	c := redistest.NeedCluster(t, 3, 1)
	const lease = 2 * time.Minute
	prefix := unique("stale")
	master := c.MasterFor(lockKey("STALE", prefix))
	targets := targetsWith(t, c, master, "STALE", prefix, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
	defer cancel()
	gen := func() *dlock.Generator { return generatorOn(t, c.Client(), lease) } // go-redis's defaults

	// Holders, one per process: a mutex, a read-write lock's write side, a semaphore's permit,
	// and a mutex to Extend.
	mu, err := gen().Gen("STALE", targets[0])
	if err != nil {
		t.Fatal(err)
	}
	rw, err := gen().GenRW("STALE", targets[1])
	if err != nil {
		t.Fatal(err)
	}
	sem, err := gen().GenSemaphore("STALE", targets[2], 1)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := gen().Gen("STALE", targets[3])
	if err != nil {
		t.Fatal(err)
	}
	oMu, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oRW, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oSem, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	oExt, err := ext.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// A process waiting for each of the first three, in a process of its own.
	type waited struct {
		name string
		at   time.Time
		err  error
	}
	got := make(chan waited, 3)
	wait := func(name string, take func(context.Context) (*dlock.Owner, error)) {
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 3*bound) // less than the lease
			defer cancel()
			o, err := take(wctx)
			w := waited{name: name, at: time.Now(), err: err}
			if err == nil {
				w.err = o.Unlock()
			}
			got <- w
		}()
	}
	wMu, err := gen().Gen("STALE", targets[0])
	if err != nil {
		t.Fatal(err)
	}
	wRW, err := gen().GenRW("STALE", targets[1])
	if err != nil {
		t.Fatal(err)
	}
	wSem, err := gen().GenSemaphore("STALE", targets[2], 1)
	if err != nil {
		t.Fatal(err)
	}
	wait("mutex", wMu.Lock)
	wait("rwlock", wRW.RLock)
	wait("semaphore", func(ctx context.Context) (*dlock.Owner, error) { return wSem.Acquire(ctx, 1) })

	// Processes that will TryLock and Lock after the failover; each uses the old master first.
	try, err := gen().Gen("STALE", targets[4])
	if err != nil {
		t.Fatal(err)
	}
	lock, err := gen().Gen("STALE", targets[5])
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*dlock.DistributedReentrantLock{try, lock} {
		if err := l.Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}

	time.Sleep(300 * time.Millisecond) // the waiters wait
	for _, target := range targets[:4] {
		if err := c.SyncReplicas(lockKey("STALE", target), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.KillMaster(lockKey("STALE", targets[0])); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFailover(lockKey("STALE", targets[0]), bound); err != nil {
		t.Fatal(err)
	}

	released := time.Now()
	var wg sync.WaitGroup
	call := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				t.Errorf("%s after the failover: %v", name, err)
			}
		}()
	}
	call("mutex Unlock", oMu.Unlock)
	call("rwlock Unlock", oRW.Unlock)
	call("semaphore Release", oSem.Unlock)
	call("Extend", func() error {
		if err := ext.Extend(oExt, lease); err != nil {
			return err
		}
		return oExt.Unlock()
	})
	call("TryLock", func() error {
		o, ok, err := try.TryLock(ctx)
		if err != nil || !ok {
			return errors.Join(err, errors.New("not obtained"))
		}
		return o.Unlock()
	})
	call("Lock", func() error {
		lctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		o, err := lock.Lock(lctx)
		if err != nil {
			return err
		}
		return o.Unlock()
	})
	wg.Wait()
	for range 3 {
		select {
		case w := <-got:
			if w.err != nil {
				t.Errorf("the %s waiter: %v", w.name, w.err)
				continue
			}
			figure(t, "stale_"+w.name+"_release_to_waiter", round(w.at.Sub(released)))
		case <-time.After(4 * bound):
			t.Fatal("a waiter neither acquired nor gave up")
		}
	}
}

// With WithReplicaAck a Cluster client sends the script and its WAIT to the master node
// itself, which follows no redirection. After CLUSTER FAILOVER (no write lost) the old master,
// a replica now, answers MOVED, and a client whose slot map still names it must follow, as
// go-redis does for every other request: Extend renews, TryLock answers (held or taken), a
// semaphore's TryAcquire takes its permit, Unlock releases, each on its first call since the
// failover. Each "process" has a client of its own that used the old master before.
func TestClusterReplicaAckAfterManualFailover(t *testing.T) {
	t.Parallel() // on a cluster of its own; mostly waiting
	replicaAckAfterFailover(t, reloadsTell)
}

// As TestClusterReplicaAckAfterManualFailover, with each client's first reload of the slot map
// after the failover answered without the moved slots, as a node answers that heard the old
// master turn replica before it heard the new master claim its slots (it drops them until
// then); go-redis sends a slot missing from its map to a random node. The MOVED answer names
// the new master: the request goes there, not to whatever node the map names next.
func TestClusterReplicaAckFollowsMovedPastAMapWithoutTheSlot(t *testing.T) {
	t.Parallel() // on a cluster of its own; mostly waiting
	replicaAckAfterFailover(t, reloadDropsSlot)
}

// As TestClusterReplicaAckAfterManualFailover, with a reload of each client under way as its
// request meets MOVED, answered (50 ms after) with the map from before the failover, as a node
// answers that had not heard of it yet. go-redis drops a reload asked for while another runs:
// the request asks again until the map names the new master.
func TestClusterReplicaAckFollowsMovedPastAReloadUnderWay(t *testing.T) {
	t.Parallel() // on a cluster of its own; mostly waiting
	replicaAckAfterFailover(t, reloadUnderWay)
}

// afterFailover says what a client's reloads of the slot map answer after the failover.
type afterFailover int

const (
	reloadsTell     afterFailover = iota // what the nodes say
	reloadDropsSlot                      // the first: the map without the new master's slots
	reloadUnderWay                       // one asked at once: the map before the failover, once a request met MOVED
)

// replicaAckAfterFailover runs the calls of TestClusterReplicaAckAfterManualFailover, with each
// client's reloads after the failover answered as mode says.
func replicaAckAfterFailover(t *testing.T, mode afterFailover) {
	c := redistest.NeedCluster(t, 3, 1)
	const lease = 2 * time.Minute
	prefix := unique("ackmoved")
	master := c.MasterFor(lockKey("ACKMOVED", prefix))
	targets := targetsWith(t, c, master, "ACKMOVED", prefix, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*bound)
	defer cancel()
	seed := redis.NewClient(&redis.Options{Addr: master})
	defer seed.Close()
	var (
		before   []redis.ClusterSlot // the map before the failover
		promoted string              // the new master, set when the failover is done (with armed)
		armed    atomic.Bool
		reloads  []func() // reloadUnderWay: starts each client's reload under way
	)
	gen := func() *dlock.Generator {
		var once sync.Once
		answer := make(chan struct{}) // reloadUnderWay: the reload under way answers
		client := c.Client(func(o *redis.ClusterOptions) {
			if mode == reloadsTell {
				return
			}
			o.ClusterSlots = func(ctx context.Context) ([]redis.ClusterSlot, error) {
				if !armed.Load() {
					return seed.ClusterSlots(ctx).Result()
				}
				first := false
				once.Do(func() { first = true })
				switch {
				case !first:
					return seed.ClusterSlots(ctx).Result()
				case mode == reloadDropsSlot:
					slots, err := seed.ClusterSlots(ctx).Result()
					return slices.DeleteFunc(slots, func(s redis.ClusterSlot) bool { return s.Nodes[0].Addr == promoted }), err
				}
				<-answer
				return before, nil
			}
		})
		var met sync.Once
		if mode == reloadUnderWay {
			client.OnNewNode(func(node *redis.Client) {
				node.AddHook(onMoved(func() { met.Do(func() { time.AfterFunc(50*time.Millisecond, func() { close(answer) }) }) }))
			})
			reloads = append(reloads, func() { client.ReloadState(ctx) })
		}
		// (a replica wait below the client's ReadTimeout, 5 s)
		g := generatorOn(t, client, lease, dlock.WithReplicaAck(1, 4*time.Second))
		t.Cleanup(func() { met.Do(func() { close(answer) }) }) // (before the client closes)
		return g
	}
	holder, err := gen().Gen("ACKMOVED", targets[0])
	if err != nil {
		t.Fatal(err)
	}
	other, err := gen().Gen("ACKMOVED", targets[0])
	if err != nil {
		t.Fatal(err)
	}
	sem, err := gen().GenSemaphore("ACKMOVED", targets[1], 1)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := other.TryLock(ctx); ok || err != nil { // uses the old master
		t.Fatalf("TryLock of a held lock before the failover = %v, %v", ok, err)
	}
	o, err := sem.Acquire(ctx, 1) // uses the old master
	if err == nil {
		err = o.Unlock()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range targets {
		if err := c.SyncReplicas(lockKey("ACKMOVED", target), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if before, err = seed.ClusterSlots(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	if promoted, err = c.FailoverReplica(lockKey("ACKMOVED", targets[0])); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	for _, reload := range reloads {
		reload()
	}

	if err := holder.Extend(owned, lease); err != nil {
		t.Errorf("Extend after the failover: %v", err)
	}
	if _, ok, err := other.TryLock(ctx); ok || err != nil {
		t.Errorf("TryLock of the held lock after the failover = %v, %v; want false, nil", ok, err)
	}
	if o, ok, err := sem.TryAcquire(ctx, 1); err != nil || !ok {
		t.Errorf("the semaphore's TryAcquire after the failover = %v, %v; want true, nil", ok, err)
	} else if err := o.Unlock(); err != nil {
		t.Errorf("the semaphore's Release: %v", err)
	}
	if err := holder.Unlock(owned); err != nil {
		t.Errorf("Unlock after the failover: %v", err)
	}
	if o, ok, err := other.TryLock(ctx); err != nil || !ok {
		t.Errorf("TryLock of the released lock = %v, %v; want true, nil", ok, err)
	} else if err := o.Unlock(); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// onMoved is a hook that calls f after a pipeline that met a MOVED answer.
type onMoved func()

func (onMoved) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (onMoved) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f onMoved) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if _, moved := redis.IsMovedError(cmd.Err()); moved {
				f()
				break
			}
		}
		return err
	}
}

// A waiting process's first subscription after a resharding, dialled from its client's stale
// slot map, reaches the slot's old owner, which refuses it (MOVED) and keeps the connection:
// the notifier dials again once the map names the new owner, and the waiters hear their
// grants. Before, the refusal counted as a failed connection that go-redis would mend (it
// does not, for an error reply); the connection stayed deaf until its probe went unheard, two
// seconds later, while the holder kept the key from processes it could not tell were there.
// No process's probe of its subscription goes unheard here: none sat deaf. (On a loaded
// machine a wait may outlast the probe interval: a probe that reaches its subscriber is fine.)
func TestClusterWaitersSubscribedFromAStaleMapHearTheirGrants(t *testing.T) {
	c := redistest.NeedCluster(t, 3, 1)
	const typ, lease = "STALESUB", 10 * time.Second
	target := unique("stalesub")
	key := lockKey(typ, target)
	var probes atomic.Int64
	locks := make([]*dlock.DistributedReentrantLock, 4)
	for p := range locks {
		client := c.Client()
		client.AddHook(hookFunc(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			err := next(ctx, cmd)
			if c, ok := cmd.(*redis.IntCmd); ok && (cmd.Name() == "spublish" || cmd.Name() == "publish") && err == nil && c.Val() == 0 {
				probes.Add(1) // (a probe nobody heard; releases publish inside their scripts)
			}
			return err
		}))
		locks[p], _ = generatorOn(t, client, lease).Gen(typ, target)
		o, err := locks[p].Lock(context.Background()) // (the slot map loaded; the subscription lingers a second)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // every lingering subscription gone
	m, err := c.BeginMigration(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	held, err := locks[0].Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	probes.Store(0)
	got := make(chan error, 3)
	for _, l := range locks[1:] {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			o, err := l.Lock(ctx)
			if err == nil {
				err = o.Unlock()
			}
			got <- err
		}()
	}
	time.Sleep(300 * time.Millisecond) // (they subscribe, and stand in line)
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if n := probes.Load(); n > 0 {
		t.Fatalf("%d probes unheard while the processes waited: a subscription sat deaf after the resharding", n)
	}
}

// hookFunc is a go-redis hook that runs f around each command.
type hookFunc func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error

func (hookFunc) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return f(ctx, cmd, next) }
}
func (hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
