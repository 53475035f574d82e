package reliability_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// A process killed with kill -9 while it holds a semaphore's permits and a read-write lock's
// write side: both come back when its lease runs out, for the processes waiting on them (one
// waiting for all the permits, one reader), and nothing of it is left in line.
func TestKilledHolderOfTheLockFamily(t *testing.T) {
	s := realServer(t)
	// (A loaded machine may run the helper's renewals late or not at all for a while: its
	// lease leaves it 750 ms to spare, so that the key is still held at the check below.)
	const lease = 3 * time.Second
	target := "killed-" + time.Now().Format("150405.000000")
	cmd, out := helper(t, "family", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": target})
	expectLine(t, out, "held")
	g, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	sem, rw, err := familyOf(g, target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang, not a slow machine
	defer cancel()
	if _, ok, err := sem.TryAcquire(ctx, 1); ok || err != nil {
		t.Fatalf("a permit while the helper holds both: %v %v", ok, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	p, err := sem.Acquire(ctx, 2)
	if err != nil {
		t.Fatalf("both permits after the holder was killed: %v", err)
	}
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatalf("the read side after the writer was killed: %v", err)
	}
	for _, o := range []*dlock.Owner{p, r} {
		if err := o.Unlock(); err != nil && !errors.Is(err, dlock.ErrLockLost) {
			t.Fatal(err)
		}
	}
	st, err := sem.State(ctx)
	if err != nil || len(st.Holds) != 0 || len(st.Waiting) != 0 {
		t.Fatalf("the semaphore afterwards: %+v %v", st, err)
	}
}

// A process killed with kill -9 while it waits, first in line, for both of a semaphore's
// permits and for a read-write lock's write side costs the processes behind it nothing once
// Redis has seen its connection close: it listened when it last renewed its entries, and does
// not now, so the next request drops them. The one behind it, waiting for the one permit free
// and for a read beside the read-hold held, gets both while the holder keeps them, though the
// killed process's entries would count for a minute (its lease) otherwise.
func TestKilledWaiterOfTheLockFamily(t *testing.T) {
	s := realServer(t)
	const lease = time.Minute // the killed process's: its entries live that long
	target := "killedwaiter-" + time.Now().Format("150405.000000")
	// The holder's lease is long: its holdings must outlast the helper's start and the waits
	// below on a loaded machine (a short one's renewal may come after it ran out, and the
	// permit and the read side go to whichever process asks first).
	g, _ := generator(t, s.Addr, dlock.WithDefaultLease(30*time.Second))
	sem, rw, err := familyOf(g, target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd, out := helper(t, "familywaiter", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": target})
	expectLine(t, out, "waiting")
	raw := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer raw.Close()
	var dead string
	for _, cfg := range []domain.DLockConfig{sem.Config(), rw.Config()} {
		heard := processor.SharedKeys(cfg)[7]
		waitUntil(t, func() bool { // its entry says it listens (it asked again once subscribed)
			for owner, facts := range raw.HGetAll(ctx, heard).Val() {
				if strings.Contains(facts, "|1|") {
					dead = owner
					return true
				}
			}
			return false
		})
	}

	// the process behind it: from a Generator of its own, waiting until the kill
	gb, _ := generator(t, s.Addr, dlock.WithDefaultLease(600*time.Millisecond))
	semB, rwB, err := familyOf(gb, target)
	if err != nil {
		t.Fatal(err)
	}
	bound, cancelB := context.WithTimeout(ctx, 15*time.Second) // a fourth of what the dead entries would cost
	defer cancelB()
	got := make(chan error, 2)
	go func() { _, err := semB.Acquire(bound, 1); got <- err }()
	go func() { _, err := rwB.RLock(bound); got <- err }()
	waitUntil(t, func() bool {
		a, _ := sem.State(ctx)
		b, _ := rw.State(ctx)
		return len(a.Waiting) == 2 && len(b.Waiting) == 2
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for range 2 {
		if err := <-got; err != nil {
			t.Fatalf("behind a waiter killed first in line: %v", err)
		}
	}
	for _, lock := range []interface {
		State(context.Context) (dlock.SharedState, error)
	}{sem, rw} {
		st, err := lock.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range st.Waiting {
			if w.Process == dead {
				t.Fatalf("the killed process %s is still in line: %+v", dead, st.Waiting)
			}
		}
	}
	for _, o := range []*dlock.Owner{p, r} {
		if err := o.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

// The holder of a semaphore's permits and of a read-write lock's write side, and the process
// waiting first in line for them, both killed (kill -9): nobody releases, nobody tells the
// second in line that it is first now. It gets both once the holder's lease runs out (the
// first's entry no longer counts: Redis saw its connection close) — not a sixth of its own
// lease later (here 20 s: its lease is 2 minutes).
func TestKilledHolderAndFirstWaiterOfTheLockFamilyCostTheHoldersLease(t *testing.T) {
	s := realServer(t)
	// The holder's renewals have 750 ms to spare: a loaded machine may run them late, and
	// holdings that ran out before the kill left the permits and the write side to the first
	// waiter, alive then. (The waiter's lease is a second: its entries live 2 s.)
	const lease, waiterLease = 3 * time.Second, time.Second
	target := "killedboth-" + time.Now().Format("150405.000000")
	holder, hout := helper(t, "family", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": target})
	expectLine(t, hout, "held")
	waiter, wout := helper(t, "familywaiter", map[string]string{"ADDR": s.Addr, "LEASE": waiterLease.String(), "TARGET": target})
	expectLine(t, wout, "waiting")
	g, _ := generator(t, s.Addr, dlock.WithDefaultLease(2*time.Minute))
	sem, rw, err := familyOf(g, target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitUntil(t, func() bool {
		a, _ := sem.State(ctx)
		b, _ := rw.State(ctx)
		return len(a.Waiting) == 1 && len(b.Waiting) == 1
	})
	got := make(chan error, 2)
	go func() { _, err := sem.Acquire(ctx, 2); got <- err }()
	go func() { _, err := rw.Lock(ctx); got <- err }()
	waitUntil(t, func() bool {
		a, _ := sem.State(ctx)
		b, _ := rw.State(ctx)
		return len(a.Waiting) == 2 && len(b.Waiting) == 2
	})
	time.Sleep(lease / 2) // (each asked again since: its answers showed it second)
	for _, cmd := range []*exec.Cmd{waiter, holder} {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	killed := time.Now()
	for range 2 {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the process second in line did not get the semaphore's permits and the write side within 10 s of the holder's death (its lease %v)", lease)
		}
	}
	t.Logf("FIGURE killed_family_holder_and_first: the second in line got both %v after both were killed (holder's lease %v)", time.Since(killed).Round(time.Millisecond), lease)
}
