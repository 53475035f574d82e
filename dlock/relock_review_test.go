package dlock_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// heldReply returns a hook under which, once armed, the next release.lua runs in Redis and its
// reply is held back until gate is closed; ran is closed as soon as the script has run.
func heldReply(armed *atomic.Bool, ran, gate chan struct{}) fnHook {
	return fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) != "release" || !armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		close(ran)
		<-gate
		return err
	}}
}

// wipeKey removes every Redis key of l's lock (as a restart that lost the data does).
func wipeKey(t *testing.T, c *redis.Client, l *dlock.DistributedReentrantLock) {
	t.Helper()
	ctx := context.Background()
	k := key(l)
	ks, err := c.Keys(ctx, "{"+k+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, append(ks, k)...).Err(); err != nil {
		t.Fatal(err)
	}
}

// A release that stands in line again makes the process's goroutines wait for the grant
// without asking; but news that came while the release was on its way (here: Redis lost the
// key and the line, and the process's channel was subscribed again, which tells it to ask)
// must not be swallowed by that rule: the waiter asks, and takes the free key at once, not
// half a lease later at its poller's pace.
func TestRelockNewsDuringTheReleaseIsNotSwallowed(t *testing.T) {
	const lease = 60 * time.Second // (a quiet waiter first in line asks again half a lease after the release)
	raw := rawClient(t)
	ga, cla := newGen(t)
	gb, _ := newGen(t)
	var armed atomic.Bool
	ran, gate := make(chan struct{}), make(chan struct{})
	cla.AddHook(heldReply(&armed, ran, gate))
	ga.Relock(10 * time.Second)
	la := mustGen(t, ga, "RELOCK", target(t), lease)
	lb := mustGen(t, gb, "RELOCK", target(t), lease)
	ctx := ctxT(t, 60*time.Second)

	b := mustLock(t, lb, ctx)
	aOwner := lockLater(t, ctx, la)
	inLine(t, ctx, la, 1)
	if err := b.Unlock(); err != nil { // a waited: it watches its channel
		t.Fatal(err)
	}
	a := recv(t, aOwner, "a's Lock")
	bOwner := lockLater(t, ctx, lb)
	inLine(t, ctx, la, 1)

	armed.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- a.Unlock() }()
	recv(t, ran, "a's release") // granted to b; a stands in line again, heard
	b = recv(t, bOwner, "b's Lock")
	defer runtime.KeepAlive(b) // (a dropped Owner is released: b holds the key until Redis loses it)
	got := lockOnce(ctx, la)   // a goroutine of a comes back while the release's reply is on its way
	waitFor(t, func() bool { return ga.Waiters(key(la)) })

	wipeKey(t, raw, la) // Redis restarts empty: the key and the line are gone ...
	confirmed := ga.Confirmed()
	killPubSub(t, raw) // ... and the subscriptions dropped: a subscribes again, and is told to ask
	waitFor(t, func() bool { return ga.Confirmed() > confirmed })

	close(gate)
	if err := recv(t, unlocked, "a's Unlock"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // (the key is free: a asks and takes it within milliseconds)
		t.Fatal("a's goroutine still waits for a grant that cannot come: the signal of its new subscription was swallowed")
	}
}

// A release that stands in line again does so with the lease of the handle that let go, not
// one an Extend set for that holding: the goroutine that comes back is granted the key for
// its own lease, and a process that dies holding it does not keep the key for the extended
// one (a grant is an acquisition from Redis: the key lives at most its lease).
func TestRelockStandsInLineWithTheHandlesLease(t *testing.T) {
	const lease, extended = 5 * time.Second, 10 * time.Minute
	raw := rawClient(t)
	la, lb, ga, _, a := relockPair(t, 10*time.Second)
	_ = lb
	ctx := ctxT(t, 30*time.Second)
	if la.Config().Lease() != lease {
		t.Fatalf("relockPair's lease is %v", la.Config().Lease())
	}
	if err := la.Extend(a, extended); err != nil {
		t.Fatal(err)
	}
	bOwner := lockLater(t, ctx, lb)
	inLine(t, ctx, la, 1)
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	b := recv(t, bOwner, "b's Lock")
	wOwner := lockLater(t, ctx, la) // a goroutine of a comes back, with the handle's lease
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	w := recv(t, wOwner, "a's second Lock")
	defer la.Unlock(w) //nolint:errcheck
	checkPTTL(t, raw, key(la), lease, true, "a's grant after its release stood in line again")
}
