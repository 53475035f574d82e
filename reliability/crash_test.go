package reliability_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// kill -9 the redis-server mid-run and restart it empty on the same port: holders' contexts end
// as lost and their Unlock says so; waiters recover and acquire after the restart; nothing
// panics and no goroutine is left (TestMain runs goleak).
func TestRedisCrashAndRestart(t *testing.T) {
	s := realServer(t)
	const lease = 300 * time.Millisecond // the waiters'
	g1, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	g2, _ := generator(t, s.Addr, dlock.WithDefaultLease(lease))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The holder's lease is long: it must hold until the kill on a loaded machine too, where a
	// renewal of a short one may come after it ran out, and a waiter then hold at the kill (whose
	// Unlock, late in a stall, says lost). Its loss is told when it runs out with Redis down.
	holder, _ := g1.GenWithLease("CRASH", "held", 3*time.Second)
	owned, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Waiters on the held key in both generators.
	var acquired atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, _ := []*dlock.Generator{g1, g2}[i%2].Gen("CRASH", "held")
			o, err := l.Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			acquired.Add(1)
			time.Sleep(time.Millisecond)
			if err := l.Unlock(o); err != nil {
				t.Errorf("waiter %d unlock: %v", i, err)
			}
		}(i)
	}
	time.Sleep(100 * time.Millisecond) // let them queue and subscribe

	s.Kill()
	select {
	case <-owned.Done():
	case <-ctx.Done():
		t.Fatal("the holder was not told that its lock is gone")
	}
	if !errors.Is(context.Cause(owned), dlock.ErrLockLost) {
		t.Fatalf("holder's cause %v, want ErrLockLost", context.Cause(owned))
	}
	time.Sleep(lease) // down for a while longer
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("holder's Unlock = %v, want ErrLockLost", err)
	}
	wg.Wait()
	if acquired.Load() != 8 {
		t.Fatalf("%d of 8 waiters acquired after the restart", acquired.Load())
	}
	// And the lock works as before.
	l, _ := g2.Gen("CRASH", "after")
	o, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(o); err != nil {
		t.Fatal(err)
	}
}
