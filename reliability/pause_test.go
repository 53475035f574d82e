package reliability_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
	"github.com/redis/go-redis/v9"
)

// A holder process stopped by SIGSTOP for longer than its lease: another process acquires. On
// SIGCONT the old holder's fenced write is rejected, its context ends as lost, and its Unlock
// returns ErrLockLost without deleting the new owner's key.
func TestPausedHolder(t *testing.T) {
	s := realServer(t)
	const lease = 300 * time.Millisecond
	fence := "{DLOCK_HOLD_paused}:store"
	cmd, out := helper(t, "holder", map[string]string{
		"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": "paused", "FENCE": fence,
	})
	oldToken, _ := strconv.ParseUint(expectLine(t, out, "token"), 10, 64)
	expectLine(t, out, "write") // it holds and writes

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The new owner's lease is long: its holding must outlast the checks below on a loaded
	// machine (a lease is per process; the key expires as the stopped holder's says).
	g, c := generator(t, s.Addr, dlock.WithDefaultLease(30*time.Second))
	l, _ := g.Gen("HOLD", "paused")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owned, err := l.Lock(ctx) // acquired once the stopped holder's lease runs out
	if err != nil {
		t.Fatal(err)
	}
	newToken, _ := l.FencingToken(owned)
	if newToken <= oldToken {
		t.Fatalf("new token %d not above the old %d", newToken, oldToken)
	}
	if !fencedWrite(ctx, c, fence, newToken) {
		t.Fatal("the new owner's fenced write was rejected")
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	staleWrites := 0
	for {
		line := expectLine(t, out, "")
		if line == "write "+strconv.FormatUint(oldToken, 10)+" true" {
			// written before the stop, still in the pipe
			continue
		}
		if line == "write "+strconv.FormatUint(oldToken, 10)+" false" {
			staleWrites++
			continue
		}
		if line != "lost true" {
			t.Fatalf("holder said %q, want its context ended with ErrLockLost", line)
		}
		break
	}
	if got := expectLine(t, out, "unlock"); got != "true" {
		t.Fatalf("old holder's Unlock matched ErrLockLost: %s", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if owned.Err() != nil {
		t.Fatalf("the new owner's holding ended: %v", context.Cause(owned))
	}
	if c.Exists(ctx, l.Config().UniqueKey()).Val() != 1 {
		t.Fatal("the old holder's Unlock took the new owner's key")
	}
	if v, _ := c.Get(ctx, fence).Uint64(); v != newToken {
		t.Fatalf("the fenced store holds token %d, want the new owner's %d", v, newToken)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	t.Logf("old token %d, new token %d; %d stale writes rejected after SIGCONT", oldToken, newToken, staleWrites)
}

// A waiting process stopped by SIGSTOP is granted the key by a release (Redis still counts
// its subscription, so it counts as live) and stays stopped past that grant's lease: the
// process behind it in line gets the key once the grant runs out. On SIGCONT the stopped
// process reads the grant's message, long expired: it must not take it as held while the
// other owns the key — its Lock returns only after the other's Unlock, with a larger token.
func TestStoppedGranteeDoesNotTakeAnExpiredGrant(t *testing.T) {
	s := realServer(t)
	const lease = time.Second
	cmd, out := helper(t, "waiter", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": "grantee"})
	// The first holder's lease is long: its holding must outlast the helper's start and the
	// stops below on a loaded machine (the grant's lease is the helper's, not its). So is the
	// third process's: its holding must outlast the checks below.
	gA, cA := generator(t, s.Addr, dlock.WithDefaultLease(30*time.Second))
	gC, _ := generator(t, s.Addr, dlock.WithDefaultLease(30*time.Second))
	lA, _ := gA.Gen("HOLD", "grantee")
	lC, _ := gC.Gen("HOLD", "grantee")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := lA.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := "-" + strconv.Itoa(cmd.Process.Pid) + "-"
	// (expectLine must not run beside the reads below: one goroutine reads the helper.)
	expectLine(t, out, "waiting")
	waitState := func(what string, ok func(dlock.State) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if st, err := lA.State(ctx); err == nil && ok(st) {
				return
			}
			if time.Now().After(deadline) {
				st, err := lA.State(ctx)
				t.Fatalf("%s: state %+v, %v", what, st, err)
			}
		}
	}
	waitState("the helper in line", func(st dlock.State) bool { return len(st.Waiting) == 1 && strings.Contains(st.Waiting[0], pid) })
	type result struct {
		o   *dlock.Owner
		err error
		at  int64
	}
	cGot := make(chan result, 1)
	go func() { o, err := lC.Lock(ctx); cGot <- result{o, err, monoNow()} }()
	waitState("the third process in line behind the helper", func(st dlock.State) bool { return len(st.Waiting) == 2 })

	// The helper is stopped only once the release below grants it the key however long it
	// stays stopped: its entry says it listens (Redis then counts it live by its subscription,
	// which a stopped process keeps; an entry that does not say so counts only a third of a
	// lease after its renewal), and lives on past the release. A busy machine may have kept
	// the helper from asking again: it is resumed, and stopped again once it has.
	stopped := false
	defer func() {
		if stopped {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	for try := 1; ; try++ {
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped = true
		left, listens := entryLeft(ctx, t, cA, lA.Config(), pid)
		if listens && left >= lease {
			t.Logf("stopped at try %d: %v left", try, left)
			break
		}
		t.Logf("try %d: %v left, listens %v", try, left, listens)
		if try == 20 {
			t.Fatalf("the helper's entry never said it listens with %v of its life left: %v left, listens %v", lease, left, listens)
		}
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		stopped = false
		time.Sleep(lease / 4)
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if st, err := lA.State(ctx); err != nil || !strings.Contains(st.Holder, pid) {
		t.Fatalf("after the release: %+v, %v; want the key granted to the stopped helper", st, err)
	}
	var c result
	select {
	case c = <-cGot:
	case <-time.After(20 * time.Second):
		t.Fatal("the process behind the stopped grantee did not get the key once the grant ran out")
	}
	if c.err != nil {
		t.Fatal(c.err)
	}
	cToken, _ := lC.FencingToken(c.o)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	time.Sleep(2 * lease) // the woken helper reads its grant's message, and its poller runs
	if c.o.Err() != nil {
		t.Fatalf("the owner's holding ended: %v", context.Cause(c.o))
	}
	released := monoNow()
	if err := lC.Unlock(c.o); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(expectLine(t, out, "locked"))
	if len(f) != 2 {
		t.Fatalf("helper said locked %v", f)
	}
	bToken, _ := strconv.ParseUint(f[0], 10, 64)
	bAt, _ := strconv.ParseInt(f[1], 10, 64)
	if bAt < released {
		t.Fatalf("the woken helper's Lock returned %v before the owner's Unlock: two owners (tokens %d and %d)",
			time.Duration(released-bAt), bToken, cToken)
	}
	if bToken <= cToken {
		t.Fatalf("the woken helper's token %d is not above the owner's %d", bToken, cToken)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// entryLeft reads the entry in line of the process whose mark contains pid (cfg's lock): how
// long it lives unless renewed, by Redis's clock, and whether the process counts as live
// however long it stays stopped — the entry says it listened on its channel when it renewed
// it, and Redis counts its subscription. It fails t when there is no entry.
func entryLeft(ctx context.Context, t *testing.T, c *redis.Client, cfg domain.DLockConfig, pid string) (time.Duration, bool) {
	t.Helper()
	entries, err := c.HGetAll(ctx, processor.WantKey(cfg)).Result()
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for mark, e := range entries {
		if !strings.Contains(mark, pid) {
			continue
		}
		// <locker>|<lease ms>|<tokens>|<renewed ms>|<expires ms>|<listens>
		f := strings.Split(e, "|")
		if len(f) < 6 {
			t.Fatalf("entry %s = %q", mark, e)
		}
		expires, err := strconv.ParseInt(f[len(f)-2], 10, 64)
		if err != nil {
			t.Fatalf("entry %s = %q: %v", mark, e, err)
		}
		channel := processor.ProcessChannel(cfg, mark)
		subs, err := c.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		return time.UnixMilli(expires).Sub(now), f[len(f)-1] == "1" && subs[channel] > 0
	}
	t.Fatalf("no entry of the process %s in line: %v", pid, entries)
	return 0, false
}

// A process stopped by SIGSTOP past its lease while one goroutine holds and another of its
// goroutines waits for the same lock (the mutex, a permit of a semaphore of one) or would
// share its holding (the read side): another process takes the key meanwhile (the write
// side, for the read side). On SIGCONT the holding goroutine unlocks at once, before the
// lease watchdog may have run: its process must not pass the expired tenure to the other
// goroutine, nor lend it the expired read-hold — that goroutine gets the lock only after
// the other process's Unlock.
func TestStoppedProcessDoesNotPassAnExpiredHolding(t *testing.T) {
	for _, kind := range []string{"mutex", "permit", "read"} {
		t.Run(kind, func(t *testing.T) { stoppedPair(t, kind) })
	}
}

func stoppedPair(t *testing.T, kind string) {
	s := realServer(t)
	const lease = time.Second
	cmd, out := helper(t, "pausedpair", map[string]string{
		"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": "pair-" + kind, "KIND": kind,
	})
	expectLine(t, out, "held")
	time.Sleep(200 * time.Millisecond) // the second goroutine waits
	// The other process's lease is long: its holding must outlast the checks below.
	g, _ := generator(t, s.Addr, dlock.WithDefaultLease(30*time.Second))
	var other dlock.Part
	switch kind {
	case "mutex":
		other, _ = g.Gen("PAIR", "pair-"+kind)
	case "permit":
		sem, _ := g.GenSemaphore("PAIR", "pair-"+kind, 1)
		other = sem.Permits(1)
	case "read":
		rw, _ := g.GenRW("PAIR", "pair-"+kind)
		other = rw.WriteSide()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	owned, err := other.Lock(ctx) // once the stopped process's lease runs out
	if err != nil {
		t.Fatal(err)
	}
	token, _ := other.FencingToken(owned)
	time.Sleep(lease / 2) // stopped past its lease by more than half a lease
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	expectLine(t, out, "woke")
	time.Sleep(2 * lease) // the woken process learns, from its renewal or its watchdog
	if owned.Err() != nil {
		t.Fatalf("the other process's holding ended: %v", context.Cause(owned))
	}
	released := monoNow()
	if err := other.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(expectLine(t, out, "locked"))
	if len(f) != 2 {
		t.Fatalf("helper said locked %v", f)
	}
	bToken, _ := strconv.ParseUint(f[0], 10, 64)
	bAt, _ := strconv.ParseInt(f[1], 10, 64)
	if bAt < released {
		t.Fatalf("the woken process's second goroutine got the %s %v before the other process's Unlock: two owners (tokens %d and %d)",
			kind, time.Duration(released-bAt), bToken, token)
	}
	if kind == "mutex" && bToken <= token {
		t.Fatalf("the woken process's token %d is not above the other's %d", bToken, token)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}
