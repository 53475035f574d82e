package dlock_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

type howRecorder struct {
	dlock.NopObserver
	mu  sync.Mutex
	how []dlock.How
}

func (r *howRecorder) Acquired(e dlock.AcquireEvent) {
	r.mu.Lock()
	r.how = append(r.how, e.How)
	r.mu.Unlock()
}

// A subscription connection that hears nothing of what releases publish (here: dialled to
// another server, as after a Sentinel failover leaves it on the old master) must be replaced,
// so that a release still wakes the waiter by message. The lease is long, so the poller (every
// 5 s, and skipped while the subscription is fresh) would come too late to pass for it: the
// waiter must be woken by the release message.
func TestDeafSubscriptionIsReplaced(t *testing.T) {
	srv.NeedReal(t)
	other, err := redistest.StartReal() // where the first subscription goes: nobody publishes there
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	var deafNext atomic.Bool
	var dials, deafDials atomic.Int32
	d := &net.Dialer{Timeout: 5 * time.Second}
	c := redis.NewClient(&redis.Options{
		Addr: srv.Addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			if deafNext.CompareAndSwap(true, false) {
				deafDials.Add(1)
				return d.DialContext(ctx, network, other.Addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	defer c.Close()
	ctx := ctxT(t, 30*time.Second)
	if err := c.Ping(ctx).Err(); err != nil { // the command connection, dialled to srv
		t.Fatal(err)
	}
	rec := &howRecorder{}
	gWait, err := dlock.NewGenerator(c, dlock.WithDefaultLease(30*time.Second), dlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer gWait.Close(context.Background())
	gHold, ch := newGen(t, dlock.WithDefaultLease(30*time.Second))
	lh, _ := gHold.Gen("DEAF", target(t))
	lw, _ := gWait.Gen("DEAF", target(t))

	owned, err := lh.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deafNext.Store(true) // the next connection the waiter's client dials is the subscription's
	got := make(chan error, 1)
	go func() {
		o, err := lw.Lock(ctx)
		if err == nil {
			err = lw.Unlock(o)
		}
		got <- err
	}()
	// the deaf subscription is noticed and replaced: a dial after the deaf one
	waitFor(t, func() bool { return deafDials.Load() == 1 && dials.Load() >= 3 && gWait.Confirmed() >= 2 })
	// The new subscription's confirmation woke the waiter, whose attempt fails (held) and
	// leaves its waiting mark: wait for that attempt, so that only the release message can
	// wake it next.
	ch.Del(ctx, "{"+lw.Config().UniqueKey()+"}:want")
	waitFor(t, func() bool { s, err := lw.State(ctx); return err == nil && len(s.Waiting) > 0 })
	if err := lh.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.how) != 1 || rec.how[0] != dlock.HowNotified {
		t.Fatalf("the waiter acquired by %v, want by a release message", rec.how)
	}
}
