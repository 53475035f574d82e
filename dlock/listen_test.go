package dlock_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/processor"
)

// askHook records the listening argument of every lock.lua request, with how many
// subscriptions the generator had confirmed as it was sent; the ask armed by hold runs in Redis
// at once, but its reply is handed back only after the next confirmation (a reply that comes
// after the SUBSCRIBE's confirmation, from a request Redis ran before it).
type askHook struct {
	t       *testing.T
	g       func() *dlock.Generator
	mu      sync.Mutex
	asks    []askSeen
	holdNth int
}

type askSeen struct {
	listening string
	confirmed int
}

func (h *askHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *askHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *askHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if processor.ScriptName(cmd.Args()) != "lock" {
			return next(ctx, cmd)
		}
		g := h.g()
		before := g.Confirmed()
		h.mu.Lock()
		h.asks = append(h.asks, askSeen{sentCmd{args: cmd.Args()}.arg(h.t, "listening"), before})
		hold := len(h.asks) == h.holdNth
		h.mu.Unlock()
		err := next(ctx, cmd) // (Redis runs it now)
		if hold {
			for deadline := time.Now().Add(20 * time.Second); g.Confirmed() == before && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // the confirmation handled, then this reply
		}
		return err
	}
}

// A process's subscription is confirmed while an ask of its, which Redis ran before the
// SUBSCRIBE, is on its way back: that answer ("not heard", to an ask that did not say it
// listens) tells nothing of the subscription since, and every ask sent after the confirmation
// says the process counts itself heard (processor.LockRequest.Listening). (Were the answer to
// end the claim, a process that died with its next request and a client's copy on their way
// would be renewed as of now, and a release could grant it the key for a lease.)
func TestAskAfterTheSubscriptionsConfirmationSaysItListens(t *testing.T) {
	srv.NeedReal(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The SUBSCRIBE reaches Redis 800 ms late (after the poller's second ask, at lease/6).
	p.SetShaper(func(toTarget bool, chunk []byte) time.Duration {
		if toTarget && bytes.Contains(bytes.ToLower(chunk), []byte("\r\nsubscribe\r\n")) {
			return 800 * time.Millisecond
		}
		return 0
	})
	const lease = 3 * time.Second
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	var ga *dlock.Generator
	h := &askHook{t: t, g: func() *dlock.Generator { return ga }, holdNth: 2}
	c.AddHook(h)
	ga = genOn(t, c, dlock.WithDefaultLease(lease))
	gb, _ := newGen(t, dlock.WithDefaultLease(lease))
	ctx := ctxT(t, 30*time.Second)
	lb, _ := gb.Gen("HOLD", target(t))
	ob, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	la, _ := ga.Gen("HOLD", target(t))
	done := make(chan error, 1)
	go func() {
		o, err := la.Lock(ctx)
		if err == nil {
			err = o.Unlock()
		}
		done <- err
	}()
	// Wait for two more asks after the confirmation.
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		n := 0
		for _, a := range h.asks {
			if a.confirmed > 0 {
				n++
			}
		}
		return n >= 2
	})
	_ = ob.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Logf("asks (listening, confirmed subscriptions as sent): %+v", h.asks)
	for _, a := range h.asks {
		if a.confirmed > 0 && a.listening != "1" {
			t.Fatalf("an ask sent after the subscription was confirmed (and no failure since) says the process does not count itself heard: %+v", h.asks)
		}
	}
}
