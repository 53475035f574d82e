package reliability_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// A process killed with kill -9 while it holds a semaphore's permits and a read-write lock's
// write side: both come back when its lease runs out, for the processes waiting on them (one
// waiting for all the permits, one reader), and nothing of it is left in line.
func TestKilledHolderOfTheLockFamily(t *testing.T) {
	s := realServer(t)
	const lease = 500 * time.Millisecond
	target := "killed-" + time.Now().Format("150405.000000")
	cmd, out := helper(t, "family", map[string]string{"ADDR": s.Addr, "LEASE": lease.String(), "TARGET": target})
	expectLine(t, out, "held")
	g, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	sem, err := g.GenSemaphore("FAMILY", target+"-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := g.GenRW("FAMILY", target+"-rw")
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
