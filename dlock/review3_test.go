package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// funcHook is a go-redis hook around single commands.
type funcHook struct {
	process func(next redis.ProcessHook, ctx context.Context, cmd redis.Cmder) error
}

func (h funcHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h funcHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h.process(next, ctx, cmd) }
}
func (h funcHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// expandLease returns the lease (ms) of an expand.lua EVALSHA, or -1 for another command.
func expandLease(args []any) int64 {
	if len(args) != expandArgs {
		return -1
	}
	if s, _ := args[0].(string); s != "evalsha" && s != "eval" {
		return -1
	}
	ms, _ := args[6].(int64)
	return ms
}

// preload loads the scripts, so that every script call is one EVALSHA that runs.
func preload(t *testing.T, c *redis.Client) {
	t.Helper()
	p, err := processor.NewRedisLockProcessor(c, processor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// checkNoSecondOwner fails t if the key is held by ga's holding (owned) while gb takes it.
func checkNoSecondOwner(t *testing.T, l *dlock.DistributedReentrantLock, owned context.Context, lb *dlock.DistributedReentrantLock) {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	st, serr := lb.State(ctx)
	t.Logf("state before: %+v %v; owner ctx %v", st, serr, context.Cause(owned))
	ob, ok, err := lb.TryLock(ctx)
	t.Logf("TryLock: %v %v", ok, err)
	if err != nil && !errors.Is(err, dlock.ErrOptimisticLocking) {
		t.Fatalf("TryLock: %v", err)
	}
	if ok {
		defer lb.Unlock(ob) //nolint:errcheck
		if owned.Err() == nil && l.HoldCount(owned) > 0 {
			t.Fatalf("two owners: another process took the key while the first still holds it (HoldCount %d, owner context live)", l.HoldCount(owned))
		}
	}
}

// Extend whose reply is lost (or not acknowledged by replicas) returns a *RedisProcessError
// and, per its doc, "the holding keeps its old lease and renewals"; but Redis ran the
// PEXPIRE with the new, shorter lease. The holder keeps renewing on the old schedule (75 % of
// the old lease), so the key expires long before the holder's next renewal and another
// process takes it while the first still acts as owner.
func TestReview3ExtendUnknownOutcomeShortensLeaseBehindHoldersBack(t *testing.T) {
	ga, ca := newGen(t)
	preload(t, ca)
	gb, _ := newGen(t)
	const short = 200 // ms
	var hit atomic.Int32
	ca.AddHook(funcHook{process: func(next redis.ProcessHook, ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if expandLease(cmd.Args()) == short && err == nil { // (cmd.Err() is set after the hooks)
			hit.Add(1)
			cmd.SetErr(errors.New("i/o timeout (injected: the reply was lost)"))
			return cmd.Err()
		}
		return err
	}})
	la, _ := ga.GenWithLease("RV3", target(t), 10*time.Second)
	lb, _ := gb.GenWithLease("RV3", target(t), 10*time.Second)
	ctx := ctxT(t, 20*time.Second)
	owned, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(owned) //nolint:errcheck
	err = la.Extend(owned, short*time.Millisecond)
	var pe *dlock.RedisProcessError
	if !errors.As(err, &pe) || hit.Load() == 0 {
		t.Fatalf("Extend: %v (hook fired %d)", err, hit.Load())
	}
	time.Sleep(3 * short * time.Millisecond) // well inside the old 10 s lease and its 7.5 s renewal
	checkNoSecondOwner(t, la, owned, lb)
}

// Extend sends its renewal with the new lease while the old expander may be renewing with
// the old one; only afterwards does it stop the old expander. If the old renewal reaches
// Redis after Extend's (it was sent just before Extend stopped the old expander), it sets
// the old, shorter lease while the new expander counts the new, longer one: the key
// expires and another process takes it while the first still acts as owner.
func TestReview3ExtendRacesTheOldRenewal(t *testing.T) {
	ga, ca := newGen(t)
	preload(t, ca)
	gb, _ := newGen(t)
	const oldLease, newLease = 400, 10000 // ms
	oldStarted, extended, oldDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var oldArmed, extArmed atomic.Bool
	oldArmed.Store(true)
	extArmed.Store(true)
	ca.AddHook(funcHook{process: func(next redis.ProcessHook, ctx context.Context, cmd redis.Cmder) error {
		switch expandLease(cmd.Args()) {
		case oldLease:
			if oldArmed.CompareAndSwap(true, false) {
				close(oldStarted)
				select { // the old expander's renewal is on its way...
				case <-extended:
				case <-time.After(5 * time.Second):
				}
				err := next(ctx, cmd) // ... and lands just after Extend's
				close(oldDone)
				return err
			}
		case newLease:
			if extArmed.CompareAndSwap(true, false) {
				err := next(ctx, cmd)
				close(extended)
				select {
				case <-oldDone:
				case <-time.After(5 * time.Second):
				}
				return err
			}
		}
		return next(ctx, cmd)
	}})
	la, _ := ga.GenWithLease("RV3", target(t), oldLease*time.Millisecond)
	lb, _ := gb.GenWithLease("RV3", target(t), oldLease*time.Millisecond)
	ctx := ctxT(t, 20*time.Second)
	owned, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(owned) //nolint:errcheck
	select {
	case <-oldStarted: // the first renewal, at 75 % of the lease
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal")
	}
	// Extend now goes through the expander, after the renewal in flight: it cannot land
	// before it. Here that renewal is held until Extend's lands, so neither lands in time,
	// and the holding is lost with its lease; either way there must be no second owner.
	if err := la.Extend(owned, newLease*time.Millisecond); err != nil {
		t.Logf("Extend: %v", err)
	}
	time.Sleep(3 * oldLease * time.Millisecond) // far inside the new 10 s lease
	checkNoSecondOwner(t, la, owned, lb)
}

// ForceRelease promises that "a holder in this Generator learns of its loss at once", but it
// only compares the deleted locker with st.owner. A key handed over in Redis to the next local
// waiter (in flight, then pending) holds the waiter's new locker while st.owner is still the
// releasing holding (or nil): ForceRelease deletes it, wakes the other processes, one takes
// the key, and the local waiter then takes the pending hand-over with no round trip and
// returns from Lock as owner of a key another process holds.
func TestReview3ForceReleaseDuringHandOverLeavesLocalOwnerUntold(t *testing.T) {
	ga, ca := newGen(t)
	gb, _ := newGen(t)
	preload(t, ca)
	inHandOver, proceed := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	ca.AddHook(funcHook{process: func(next redis.ProcessHook, ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && isHandOver(cmd.Args()) && armed.CompareAndSwap(true, false) {
			close(inHandOver) // the key holds the waiter's new locker; the reply is on its way
			select {
			case <-proceed:
			case <-time.After(5 * time.Second):
			}
		}
		return err
	}})
	lease := 3 * time.Second
	la, _ := ga.GenWithLease("RV3", target(t), lease)
	lb, _ := gb.GenWithLease("RV3", target(t), lease)
	ctx := ctxT(t, 20*time.Second)
	o1, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		owned context.Context
		err   error
	}
	waiter := make(chan res, 1)
	go func() {
		o, err := la.Lock(ctx)
		waiter <- res{o, err}
	}()
	waitFor(t, func() bool { return ga.Waiters(la.Config().UniqueKey()) })
	armed.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- la.Unlock(o1) }()
	select {
	case <-inHandOver:
	case <-time.After(5 * time.Second):
		t.Fatal("no hand-over")
	}
	before, err := la.State(ctx) // the operator, in the same generator
	if err != nil {
		t.Fatal(err)
	}
	holder := before.Holder
	if removed, err := la.ForceRelease(ctx, holder); err != nil || !removed {
		t.Fatalf("ForceRelease(%q): %v, %v", holder, removed, err)
	}
	ob, err := lb.Lock(ctx) // another process takes the freed key
	if err != nil {
		close(proceed)
		t.Fatal(err)
	}
	defer lb.Unlock(ob) //nolint:errcheck
	close(proceed)
	if err := <-unlocked; err != nil {
		t.Logf("Unlock: %v", err)
	}
	r := <-waiter
	if r.err != nil {
		return // the local waiter did not get the deleted key: fine
	}
	defer la.Unlock(r.owned)          //nolint:errcheck
	time.Sleep(50 * time.Millisecond) // "at once"
	if r.owned.Err() == nil && la.HoldCount(r.owned) > 0 && ob.Err() == nil {
		t.Fatalf("two owners: the local waiter holds the key ForceRelease deleted (locker %q), and another process holds it", holder)
	}
}

// startCluster starts a three-master Redis Cluster (no replicas) and returns a seed address.
func startCluster(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server")
	}
	var addrs []string
	for i := 0; i < 3; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		dir := t.TempDir()
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--dir", dir, "--save", "", "--appendonly", "no", "--cluster-node-timeout", "2000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		waitFor(t, func() bool { return c.Ping(context.Background()).Err() == nil })
		c.Close()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	if out, err := exec.Command("redis-cli", append(args, "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		waitFor(t, func() bool {
			s, _ := c.ClusterInfo(context.Background()).Result()
			return strings.Contains(s, "cluster_state:ok")
		})
		c.Close()
	}
	return addrs
}

// With a Cluster client the sender makes a PubSub and starts its receiver before sending the
// first SSUBSCRIBE. The receiver's ReceiveTimeout dials at once when it wins the PubSub's
// mutex: with no channel yet, go-redis's ClusterClient.pubSub dials a random node
// (nodes.Random), and the SSUBSCRIBE that follows goes to that connection and gets MOVED. The
// subscription then hears nothing until the probe replaces it two seconds later (and the
// replacement runs the same race). Healthy cluster, nothing moves: no subscription should end
// on the wrong node.
func TestReview3ClusterSubscriptionDialsARandomNode(t *testing.T) {
	addrs := startCluster(t)
	core, logs := observer.New(zap.DebugLevel)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	ctx := ctxT(t, 60*time.Second)
	holder, err := dlock.NewGenerator(cc, dlock.WithDefaultLease(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background()) //nolint:errcheck
	const n = 30
	for i := 0; i < n; i++ {
		g, err := dlock.NewGenerator(cc, dlock.WithDefaultLease(20*time.Second), dlock.WithLogger(zap.New(core)))
		if err != nil {
			t.Fatal(err)
		}
		lh, _ := holder.Gen("RV3C", fmt.Sprintf("%s-%d", target(t), i))
		lw, _ := g.Gen("RV3C", fmt.Sprintf("%s-%d", target(t), i))
		oh, err := lh.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if o, err := lw.Lock(wctx); err == nil {
				_ = lw.Unlock(o)
			}
		}()
		waitFor(t, func() bool { return g.Subscribed() == 1 })
		time.Sleep(300 * time.Millisecond) // the subscription is sent (or fails) well within this
		cancel()
		<-done
		_ = lh.Unlock(oh)
		if err := g.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	moved := 0
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if f.Key == "error" {
				if err, ok := f.Interface.(error); ok && strings.Contains(err.Error(), "MOVED") {
					moved++
				}
			}
		}
	}
	if moved > 0 {
		t.Fatalf("%d MOVED replies to SSUBSCRIBE on %d fresh subscription connections: dialled a node that does not own the slot", moved, n)
	}
}

// After Extend to a longer lease, a release whose reply is lost is retried in the background
// only for the handle's original lease (settle and giveBack use h.cfg), not "until the lease
// runs out": once Redis answers again nobody deletes the key, and other processes are locked
// out for the rest of the extended lease although the holder released it.
func TestReview3ReleaseRetriesStopBeforeTheExtendedLeaseEnds(t *testing.T) {
	ga, ca := newGen(t)
	gb, _ := newGen(t)
	preload(t, ca)
	var down atomic.Bool
	var failed atomic.Int32
	ca.AddHook(funcHook{process: func(next redis.ProcessHook, ctx context.Context, cmd redis.Cmder) error {
		if down.Load() && len(cmd.Args()) == releaseArgs {
			failed.Add(1)
			return errors.New("dial tcp: connection refused (injected)")
		}
		return next(ctx, cmd)
	}})
	la, _ := ga.GenWithLease("RV3", target(t), 500*time.Millisecond)
	lb, _ := gb.GenWithLease("RV3", target(t), 500*time.Millisecond)
	ctx := ctxT(t, 30*time.Second)
	owned, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Extend(owned, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	if err := la.Unlock(owned); err == nil {
		t.Fatal("Unlock succeeded with Redis down")
	}
	time.Sleep(1500 * time.Millisecond) // Redis unreachable for 1.5 s, well inside the 10 s lease
	down.Store(false)
	if failed.Load() == 0 {
		t.Fatal("hook did not fire")
	}
	lctx, cancel := context.WithTimeout(ctx, 4*time.Second) // retries come every lease/10 at most
	defer cancel()
	ob, err := lb.Lock(lctx)
	if err != nil {
		s, _ := lb.State(ctx)
		t.Fatalf("released key still held %v after Redis came back (release retries gave up after %d tries): %v; state %+v", 4*time.Second, failed.Load(), err, s)
	}
	_ = lb.Unlock(ob)
}
