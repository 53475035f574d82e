package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// Helpers shared by the tests of this package: waiting for a condition, the server's command
// count, loading the scripts, and the check that nobody else holds what a holder believes it
// holds.

// waitFor polls cond until it holds, failing t after 15 s (a hang, not a slow machine).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 15s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// recv receives from ch, failing t after 15 s.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: nothing within 15s", what)
		var zero T
		return zero
	}
}

// commands returns how many commands the server has processed (a script counts once).
func commands(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no total_commands_processed in INFO")
	return 0
}

// commandsB is commands, for benchmarks.
func commandsB(t testing.TB, c *redis.Client) int64 { return commands(t, c) }

// preload loads the scripts, so that every script call is one EVALSHA that runs.
func preload(t testing.TB, c *redis.Client) {
	t.Helper()
	p, err := processor.NewRedisLockProcessor(c, processor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// checkNoSecondOwner fails t if another process (lb, another Generator) can take the key
// while l's holding owned still believes it holds it.
func checkNoSecondOwner(t testing.TB, l *dlock.DistributedReentrantLock, owned context.Context, lb *dlock.DistributedReentrantLock) {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	st, serr := lb.State(ctx)
	t.Logf("state before: holder %q reserved for %q, lease left %v, waiting %v (%v); owner context %v",
		st.Holder, st.ReservedFor, st.LeaseLeft, st.Waiting, serr, context.Cause(owned))
	ob, ok, err := lb.TryLock(ctx)
	if err != nil && !errors.Is(err, dlock.ErrOptimisticLocking) {
		t.Fatalf("TryLock: %v", err)
	}
	if ok {
		defer ob.Unlock() //nolint:errcheck
		if owned.Err() == nil && l.HoldCount(owned) > 0 {
			t.Fatalf("two owners: another process took the key while the first still holds it (HoldCount %d, owner context live)", l.HoldCount(owned))
		}
	}
}

// key returns l's Redis key.
func key(l *dlock.DistributedReentrantLock) string { return l.Config().UniqueKey() }
