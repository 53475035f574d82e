// Package queue is a lock-free, CLH-style wait queue of parked goroutines, after the sync queue
// of Java's AbstractQueuedSynchronizer that Baidu DLock uses.
//
// The queue starts with a dummy head node. Waiters join at the tail by compare-and-swap, and the
// waiter whose live predecessor is the head is the first waiter: the one allowed to try the
// lock. When it gets the lock it becomes the new head (SetHead). A waiter parks on its own
// one-slot permit channel and on its context; Wake puts a permit in the first live waiter's
// slot, so a wake-up given before the waiter parks is not lost. A waiter that gives up marks
// itself cancelled and is skipped; if it had been woken it passes the wake-up on.
//
// Nothing here panics on nil or zero values: a nil *Queue is an empty queue that keeps
// nothing (Enqueue, SetHead, Wake and Cancel do nothing; IsFirst and HasWaiters report false;
// First returns nil), a nil *Node is in no queue (the methods given one do nothing or report
// false; its Since is the zero time; its Park returns an error wrapping
// errors.ErrInvalidConfig), and the zero Node works as NewNode's once enqueued.
package queue

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	dlerrors "github.com/dlockgo/dlock/errors"
)

// Node is one waiter's place in a Queue. A Node is used by one waiter for one wait. The zero
// Node is ready to use: Enqueue gives it the wake-up slot NewNode makes.
type Node struct {
	prev      atomic.Pointer[Node] // written by the node's own waiter (skipping cancelled nodes), and by Enqueue
	next      atomic.Pointer[Node] // a hint: may lag behind prev; Wake falls back to a scan from the tail
	cancelled atomic.Bool
	permit    chan struct{} // one slot: an unpark given before the park is kept
	since     time.Time     // when the node was enqueued (monotonic)

	// Lease is what the waiter asks for, for whoever hands it the lock; the queue does not
	// read it. Set it before Enqueue.
	Lease time.Duration
}

// NewNode returns a node for one wait.
func NewNode() *Node { return &Node{permit: make(chan struct{}, 1)} }

// Since returns when the node was enqueued (the zero time for a nil node, or one never
// enqueued).
func (n *Node) Since() time.Time {
	if n == nil {
		return time.Time{}
	}
	return n.since
}

// errCannotPark is Park's error for a node that nothing can wake, or a nil context.
var errCannotPark = fmt.Errorf("%w: Park on a nil node, a zero node never enqueued, or with a nil context", dlerrors.ErrInvalidConfig)

// Park blocks until the node is woken or ctx ends. It returns nil when woken, else ctx.Err().
// When both happen, either may be reported; a caller that gets an error must call Cancel,
// which passes on a wake-up the node had received. On a nil node, on a zero Node that was never
// enqueued (nothing could wake it), or with a nil ctx it returns at once an error wrapping
// errors.ErrInvalidConfig.
func (n *Node) Park(ctx context.Context) error {
	if n == nil || n.permit == nil || ctx == nil {
		return errCannotPark
	}
	select {
	case <-n.permit:
		return nil
	default:
	}
	select {
	case <-n.permit:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) unpark() {
	select {
	case n.permit <- struct{}{}:
	default:
	}
}

// Queue is the wait queue. The zero value is an empty queue ready to use; a Queue must not be
// copied after first use. Every method is safe for concurrent use.
type Queue struct {
	head atomic.Pointer[Node]
	tail atomic.Pointer[Node]
}

// Enqueue adds n at the tail. A nil n, or a nil q, is not added: nothing is done.
func (q *Queue) Enqueue(n *Node) {
	if q == nil || n == nil {
		return
	}
	if n.permit == nil { // a zero Node: nobody sees it before the swap below publishes it
		n.permit = make(chan struct{}, 1)
	}
	n.since = time.Now()
	for {
		t := q.tail.Load()
		if t == nil {
			dummy := NewNode()
			if q.head.CompareAndSwap(nil, dummy) {
				q.tail.Store(dummy)
			}
			continue
		}
		n.prev.Store(t)
		if q.tail.CompareAndSwap(t, n) {
			t.next.Store(n)
			return
		}
	}
}

// livePrev returns n's nearest predecessor that is not cancelled, shortening n's link to it.
// Only n's own waiter may call it.
func (q *Queue) livePrev(n *Node) *Node {
	p := n.prev.Load()
	for p != nil && p.cancelled.Load() && p != q.head.Load() {
		p = p.prev.Load()
		n.prev.Store(p)
	}
	return p
}

// IsFirst reports whether n is the first live waiter: its nearest live predecessor is the head.
// Only n's own waiter may call it. It reports false for a nil q or n, and for a node that is
// not queued (one never enqueued, or the head).
func (q *Queue) IsFirst(n *Node) bool {
	if q == nil || n == nil {
		return false
	}
	p := q.livePrev(n)
	return p != nil && p == q.head.Load()
}

// SetHead makes n, the first waiter, the new head once it holds the lock; n leaves the queue.
// Only n's own waiter may call it, right after IsFirst(n) held and the lock was taken. With a
// nil q or n, or on an empty zero Queue (n is in no queue), it does nothing.
func (q *Queue) SetHead(n *Node) {
	if q == nil || n == nil {
		return
	}
	old := q.head.Load()
	if old == nil {
		return
	}
	q.head.Store(n)
	n.prev.Store(nil)
	old.next.Store(nil) // help the collector; nobody walks forward from an old head
}

// first returns the first live waiter, or nil.
func (q *Queue) first() *Node {
	h := q.head.Load()
	if h == nil {
		return nil
	}
	if s := h.next.Load(); s != nil && !s.cancelled.Load() {
		return s
	}
	// next links lag behind tail swaps and point at cancelled nodes; prev links are exact.
	var s *Node
	for t := q.tail.Load(); t != nil && t != h; t = t.prev.Load() {
		if !t.cancelled.Load() {
			s = t
		}
	}
	return s
}

// First returns the first live waiter, or nil when there is none (or q is nil).
func (q *Queue) First() *Node {
	if q == nil {
		return nil
	}
	return q.first()
}

// Wake gives a wake-up to the first live waiter, if any. If that waiter cancels at the same
// moment, either it passes the wake-up on (Cancel) or Wake tries the next first waiter. On a
// nil q it does nothing.
func (q *Queue) Wake() {
	if q == nil {
		return
	}
	for {
		s := q.first()
		if s == nil {
			return
		}
		s.unpark()
		if !s.cancelled.Load() {
			return
		}
	}
}

// HasWaiters reports whether any live waiter is queued (false for a nil q).
func (q *Queue) HasWaiters() bool {
	if q == nil {
		return false
	}
	h := q.head.Load()
	for t := q.tail.Load(); t != nil && t != h; t = t.prev.Load() {
		if !t.cancelled.Load() {
			return true
		}
	}
	return false
}

// Cancel takes n out of the queue after its wait ended without the lock. If n had been woken
// (woken is true, or a wake-up is still in its slot) the wake-up is passed to the next first
// waiter, so it is never lost. Only n's own waiter may call it, once. With a nil q or n it does
// nothing.
func (q *Queue) Cancel(n *Node, woken bool) {
	if q == nil || n == nil {
		return
	}
	n.cancelled.Store(true)
	select {
	case <-n.permit:
		woken = true
	default:
	}
	// Unlink n: as the tail, move the tail back so a queue of cancelled nodes reads as empty
	// cheaply; otherwise point the live predecessor's next past n, so Wake rarely has to scan.
	if p := q.livePrev(n); p != nil {
		if q.tail.CompareAndSwap(n, p) {
			p.next.CompareAndSwap(n, nil)
		} else if nx := n.next.Load(); nx != nil && !nx.cancelled.Load() {
			p.next.CompareAndSwap(n, nx)
		}
	}
	if woken {
		q.Wake()
	}
}
