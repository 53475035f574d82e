package queue_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/queue"
)

func TestWakeBeforeParkIsKept(t *testing.T) {
	var q queue.Queue
	n := queue.NewNode()
	q.Enqueue(n)
	if !q.IsFirst(n) || q.First() != n || !q.HasWaiters() {
		t.Fatal("a lone waiter is not first")
	}
	q.Wake()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Park(ctx); err != nil {
		t.Fatalf("Park after Wake: %v", err)
	}
}

func TestOrderAndSkipCancelled(t *testing.T) {
	var q queue.Queue
	a, b, c := queue.NewNode(), queue.NewNode(), queue.NewNode()
	q.Enqueue(a)
	q.Enqueue(b)
	q.Enqueue(c)
	if !q.IsFirst(a) || q.IsFirst(b) || q.IsFirst(c) {
		t.Fatal("only the oldest waiter is first")
	}
	q.Cancel(b, false)
	q.SetHead(a) // a took the lock
	if !q.IsFirst(c) || q.First() != c {
		t.Fatal("c is not first after a left and b cancelled")
	}
	q.Cancel(c, false)
	if q.HasWaiters() || q.First() != nil {
		t.Fatal("queue of cancelled nodes reports waiters")
	}
}

// A waiter cancelled after being woken passes the wake-up on (STYLE lesson 4 and 5).
func TestCancelledWakePassesOn(t *testing.T) {
	var q queue.Queue
	a, b := queue.NewNode(), queue.NewNode()
	q.Enqueue(a)
	q.Enqueue(b)
	q.Wake() // goes to a
	q.Cancel(a, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Park(ctx); err != nil {
		t.Fatalf("b was not given a's wake-up: %v", err)
	}
	if !q.IsFirst(b) {
		t.Fatal("b is not first after a cancelled")
	}
}

func TestCancelledAfterConsumingWakePassesOn(t *testing.T) {
	var q queue.Queue
	a, b := queue.NewNode(), queue.NewNode()
	q.Enqueue(a)
	q.Enqueue(b)
	q.Wake()
	if err := a.Park(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.Cancel(a, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Park(ctx); err != nil {
		t.Fatalf("b was not woken: %v", err)
	}
}

func TestParkHonoursContext(t *testing.T) {
	n := queue.NewNode()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Park(ctx); err != context.Canceled {
		t.Fatalf("Park = %v", err)
	}
}

// hammer runs goroutines through l with random cancellations and checks exclusion, that every
// call returns, and (for the CLH lock) that the queue ends empty.
func hammer(t *testing.T, l locker, goroutines, rounds int) {
	var inside, entered, gaveUp atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			for i := 0; i < rounds; i++ {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if r.IntN(3) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(200))*time.Microsecond)
				}
				if err := l.Lock(ctx); err != nil {
					cancel()
					gaveUp.Add(1)
					continue
				}
				if inside.Add(1) != 1 {
					t.Error("two goroutines inside at once")
				}
				entered.Add(1)
				if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(50)) * time.Microsecond)
				}
				inside.Add(-1)
				l.Unlock()
				cancel()
			}
		}(uint64(g))
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("a waiter never returned (lost wake-up)")
	}
	if entered.Load()+gaveUp.Load() != int64(goroutines*rounds) {
		t.Fatalf("%d entered + %d gave up != %d calls", entered.Load(), gaveUp.Load(), goroutines*rounds)
	}
	if entered.Load() == 0 {
		t.Fatal("nobody entered")
	}
	t.Logf("%d entered, %d gave up", entered.Load(), gaveUp.Load())
}

func TestHammerCLH(t *testing.T) {
	l := &clhLock{}
	hammer(t, l, 64, 300)
	if l.q.HasWaiters() {
		t.Fatal("waiters left in the queue")
	}
}

func TestHammerCLHFIFO(t *testing.T) {
	l := &clhLock{fifo: true}
	hammer(t, l, 64, 300)
	if l.q.HasWaiters() {
		t.Fatal("waiters left in the queue")
	}
}

func TestHammerList(t *testing.T) {
	hammer(t, &listLock{}, 64, 300)
}
