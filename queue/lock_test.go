package queue_test

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"

	"github.com/dlockgo/dlock/queue"
)

// clhLock is a local lock built the way dlock uses the queue: a claim taken by CAS, the
// first waiter trying it, a wake-up on release.
type clhLock struct {
	q    queue.Queue
	held atomic.Bool
	fifo bool // newcomers queue behind waiters instead of barging
}

func (l *clhLock) Lock(ctx context.Context) error {
	if (!l.fifo || !l.q.HasWaiters()) && l.held.CompareAndSwap(false, true) {
		return nil
	}
	n := queue.NewNode()
	l.q.Enqueue(n)
	for {
		if l.q.IsFirst(n) && l.held.CompareAndSwap(false, true) {
			l.q.SetHead(n)
			return nil
		}
		if err := n.Park(ctx); err != nil {
			l.q.Cancel(n, false)
			return err
		}
	}
}

func (l *clhLock) Unlock() {
	l.held.Store(false)
	l.q.Wake()
}

// listLock is the reference: a mutex and a list of ready channels, the shape of
// golang.org/x/sync/semaphore, with direct hand-off to the first waiter.
type listLock struct {
	mu      sync.Mutex
	held    bool      // guarded by mu
	waiters list.List // of chan struct{}; guarded by mu
}

func (l *listLock) Lock(ctx context.Context) error {
	l.mu.Lock()
	if !l.held && l.waiters.Len() == 0 {
		l.held = true
		l.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	elem := l.waiters.PushBack(ready)
	l.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		select {
		case <-ready: // handed over just now: pass it on
			l.mu.Unlock()
			l.Unlock()
		default:
			l.waiters.Remove(elem)
			l.mu.Unlock()
		}
		return ctx.Err()
	}
}

func (l *listLock) Unlock() {
	l.mu.Lock()
	if front := l.waiters.Front(); front != nil {
		close(l.waiters.Remove(front).(chan struct{}))
	} else {
		l.held = false
	}
	l.mu.Unlock()
}

type locker interface {
	Lock(context.Context) error
	Unlock()
}
