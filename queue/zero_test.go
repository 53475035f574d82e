package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/queue"
)

// Every exported method on nil receivers, zero values and nil arguments never panics: Park,
// the one that returns an error, returns one matching ErrInvalidConfig (at once: nothing could
// wake it), and the others do nothing or answer false / nil. A queue given nil nodes stays
// usable, and the zero Node works once enqueued.
func TestZeroValuesNeverPanic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var nilCtx context.Context
	call := func(t *testing.T, name string, f func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panics: %v", name, r)
			}
		}()
		if err := f(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	refused := func(err error) error {
		if !errors.Is(err, dlerrors.ErrInvalidConfig) {
			return errors.New("Park's err = " + errString(err) + ", want ErrInvalidConfig")
		}
		return nil
	}
	not := func(what string, bad bool) error {
		if bad {
			return errors.New(what)
		}
		return nil
	}
	// usable checks that q still queues and wakes a waiter.
	usable := func(q *queue.Queue) error {
		n := queue.NewNode()
		q.Enqueue(n)
		defer q.Cancel(n, false)
		if !q.IsFirst(n) || q.First() != n || !q.HasWaiters() {
			return errors.New("a lone waiter is not first")
		}
		q.Wake()
		return n.Park(ctx)
	}

	t.Run("nil Queue does nothing", func(t *testing.T) {
		var q *queue.Queue
		n := queue.NewNode()
		call(t, "Enqueue", func() error { q.Enqueue(n); return not("Since set", !n.Since().IsZero()) })
		call(t, "IsFirst", func() error { return not("true", q.IsFirst(n)) })
		call(t, "First", func() error { return not("a waiter", q.First() != nil) })
		call(t, "HasWaiters", func() error { return not("true", q.HasWaiters()) })
		call(t, "Wake", func() error { q.Wake(); return nil })
		call(t, "SetHead", func() error { q.SetHead(n); return nil })
		call(t, "Cancel", func() error { q.Cancel(n, true); return nil })
	})

	t.Run("nil Node is in no queue", func(t *testing.T) {
		var n *queue.Node
		var q queue.Queue
		call(t, "Since", func() error { return not("not zero", !n.Since().IsZero()) })
		call(t, "Park", func() error { return refused(n.Park(ctx)) })
		call(t, "Enqueue(nil)", func() error { q.Enqueue(n); return not("waiters", q.HasWaiters() || q.First() != nil) })
		call(t, "IsFirst(nil)", func() error { return not("true", q.IsFirst(n)) })
		call(t, "SetHead(nil)", func() error { q.SetHead(n); return nil })
		call(t, "Cancel(nil)", func() error { q.Cancel(n, true); return nil })
		call(t, "queue still usable", func() error { return usable(&q) })
	})

	t.Run("zero Queue has no waiters", func(t *testing.T) {
		var q queue.Queue
		n := queue.NewNode() // never enqueued
		call(t, "IsFirst", func() error { return not("a node not enqueued is first", q.IsFirst(n)) })
		call(t, "First", func() error { return not("a waiter", q.First() != nil) })
		call(t, "HasWaiters", func() error { return not("true", q.HasWaiters()) })
		call(t, "Wake", func() error { q.Wake(); return nil })
		call(t, "SetHead", func() error { q.SetHead(n); return nil })
		call(t, "Cancel", func() error { q.Cancel(n, true); return nil })
		call(t, "queue still usable", func() error { return usable(&q) })
	})

	t.Run("zero Node", func(t *testing.T) {
		var q queue.Queue
		var idle queue.Node // never enqueued: nothing can wake it
		call(t, "Park before Enqueue", func() error { return refused(idle.Park(ctx)) })
		var n queue.Node
		call(t, "Enqueue, Wake, Park", func() error {
			q.Enqueue(&n)
			if !q.IsFirst(&n) || n.Since().IsZero() {
				return errors.New("an enqueued zero Node is not first")
			}
			q.Wake()
			return n.Park(ctx)
		})
		call(t, "SetHead", func() error { q.SetHead(&n); return not("waiters after SetHead", q.HasWaiters()) })
		call(t, "queue still usable", func() error { return usable(&q) })
	})

	t.Run("nil context", func(t *testing.T) {
		var q queue.Queue
		n := queue.NewNode()
		q.Enqueue(n)
		call(t, "Park(nil)", func() error { return refused(n.Park(nilCtx)) })
		q.Cancel(n, false)
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
