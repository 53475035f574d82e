package reliability_test

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
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
