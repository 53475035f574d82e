package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/processor"
)

// subscribeGate holds every SUBSCRIBE sent through a proxy while it is shut (its shaper waits,
// and the chunks behind it on that connection wait with it).
type subscribeGate struct {
	mu   sync.Mutex
	shut chan struct{} // nil while open
}

func (g *subscribeGate) close() {
	g.mu.Lock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *subscribeGate) open() {
	g.mu.Lock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
	g.mu.Unlock()
}

func (g *subscribeGate) shaper(toTarget bool, chunk []byte) time.Duration {
	if !toTarget || !bytes.Contains(bytes.ToLower(chunk), []byte("\r\nsubscribe\r\n")) {
		return 0
	}
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut != nil {
		select {
		case <-shut:
		case <-time.After(20 * time.Second): // (a test that failed: let its Close end)
		}
	}
	return 0
}

// askHook records the listening argument of every request that stands the process in line
// (lock.lua, a relocking release.lua, a shared.lua take that waits), with how many
// subscriptions the generator had confirmed as it was sent. The first ask for which hold
// returns true is run by before (which runs it in Redis and returns its reply), then its reply
// is handed back only after the next confirmation: a reply that comes after the SUBSCRIBE's
// confirmation, from a request Redis ran before it.
type askHook struct {
	t      *testing.T
	g      func() *dlock.Generator
	hold   func(n int, a askSeen) bool
	before func(run func() error) error

	mu   sync.Mutex
	asks []askSeen
	held bool
}

type askSeen struct {
	script    string
	listening string
	confirmed int
}

func (h *askHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *askHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *askHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		var said string
		switch processor.ScriptName(args) {
		case "lock":
			said = sentCmd{args: args}.arg(h.t, "listening")
		case "release":
			if (sentCmd{args: args}).arg(h.t, "next") == "" { // (a release that stands in line again: relock)
				return next(ctx, cmd)
			}
			said = sentCmd{args: args}.arg(h.t, "listening")
		case "shared":
			if sharedArg(args, "wait") != "1" { // (a take that stands in line)
				return next(ctx, cmd)
			}
			said = sharedArg(args, "listening")
		default:
			return next(ctx, cmd)
		}
		g := h.g()
		a := askSeen{processor.ScriptName(args), said, g.Confirmed()}
		h.mu.Lock()
		h.asks = append(h.asks, a)
		hold := !h.held && h.hold(len(h.asks), a)
		h.held = h.held || hold
		h.mu.Unlock()
		if !hold {
			return next(ctx, cmd)
		}
		err := h.before(func() error { return next(ctx, cmd) })
		for deadline := time.Now().Add(20 * time.Second); g.Confirmed() == a.confirmed && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the confirmation handled, then this reply
		h.t.Logf("held a %s request (listening %q): confirmations %d -> %d", a.script, a.listening, a.confirmed, g.Confirmed())
		return err
	}
}

// What a waiting process says of itself in each ask (processor.LockRequest.Listening; a
// semaphore's take, processor.TakeRequest.Listening) when an ask's answer, which Redis ran before the process's subscription was (again) confirmed, comes
// back after that confirmation: "not heard", which tells nothing of the subscription since.
// Every ask sent after the confirmation says the process counts itself heard. (Were the answer
// to end the claim, a process that died with its next request and a client's copy on their way
// would be renewed as of now, and a release could grant it the key for a lease.)
func TestAskAfterTheSubscriptionsConfirmationSaysItListens(t *testing.T) {
	srv.NeedReal(t)
	for _, c := range []struct {
		name string
		// first says whether the gate is shut from the start (the first subscription is held).
		first bool
		hold  func(n int, a askSeen) bool
		// before runs the held ask in Redis while Redis does not hear the process.
		before func(t *testing.T, p *faultproxy.Proxy, gate *subscribeGate, channel func() string, raw *redis.Client) func(run func() error) error
	}{{
		// The ask, which claims nothing, runs before the first SUBSCRIBE.
		name:  "sent before the first confirmation",
		first: true,
		hold:  func(n int, a askSeen) bool { return n >= 2 && a.confirmed == 0 },
		before: func(_ *testing.T, _ *faultproxy.Proxy, gate *subscribeGate, _ func() string, _ *redis.Client) func(run func() error) error {
			return func(run func() error) error {
				err := run()
				gate.open()
				return err
			}
		},
	}, {
		// The ask claims, and runs after Redis dropped the subscription and before the
		// resubscription: its answer is "not heard", to a claim.
		name:   "run between a dropped subscription and its resubscription",
		hold:   func(_ int, a askSeen) bool { return a.confirmed >= 1 && a.listening == "1" },
		before: runUnheard,
	}} {
		for _, kind := range []string{"mutex", "semaphore"} {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				p, err := faultproxy.New(srv.Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				gate := &subscribeGate{}
				defer gate.open()
				if c.first {
					gate.close()
				}
				p.SetShaper(gate.shaper)
				const lease = 3 * time.Second
				raw := srv.Client()
				defer raw.Close()
				cl := redis.NewClient(&redis.Options{Addr: p.Addr()})
				var ga *dlock.Generator
				var channel func() string
				h := &askHook{t: t, g: func() *dlock.Generator { return ga }, hold: c.hold, before: c.before(t, p, gate, func() string { return channel() }, raw)}
				cl.AddHook(h)
				ga = genOn(t, cl, dlock.WithDefaultLease(lease))
				gb, _ := newGen(t, dlock.WithDefaultLease(lease))
				ctx := ctxT(t, 40*time.Second)
				var hold, wait func() (func() error, error) // gb's, then ga's
				if kind == "mutex" {
					lb, _ := gb.Gen("HOLD", target(t))
					la, _ := ga.Gen("HOLD", target(t))
					channel = func() string { return processor.ProcessChannel(la.Config(), ga.LockerPrefix()) }
					hold = func() (func() error, error) { o, err := lb.Lock(ctx); return func() error { return o.Unlock() }, err }
					wait = func() (func() error, error) { o, err := la.Lock(ctx); return func() error { return o.Unlock() }, err }
				} else {
					sb, err := gb.GenSemaphore("HOLD", target(t), 1)
					if err != nil {
						t.Fatal(err)
					}
					sa, err := ga.GenSemaphore("HOLD", target(t), 1)
					if err != nil {
						t.Fatal(err)
					}
					channel = func() string { return processor.SharedChannel(sa.Config(), ga.LockerPrefix()) }
					hold = func() (func() error, error) {
						o, err := sb.Acquire(ctx, 1)
						return func() error { return o.Unlock() }, err
					}
					wait = func() (func() error, error) {
						o, err := sa.Acquire(ctx, 1)
						return func() error { return o.Unlock() }, err
					}
				}
				unlockB, err := hold()
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					unlock, err := wait()
					if err == nil {
						err = unlock()
					}
					done <- err
				}()
				// Wait for two asks sent after the held one's reply came.
				waitFor(t, func() bool {
					h.mu.Lock()
					defer h.mu.Unlock()
					if !h.held {
						return false
					}
					last, n := 0, 0
					for _, a := range h.asks {
						last = max(last, a.confirmed)
					}
					for _, a := range h.asks {
						if a.confirmed == last {
							n++
						}
					}
					return n >= 2 && last > 0 && (c.first || last >= 2)
				})
				_ = unlockB()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				h.mu.Lock()
				defer h.mu.Unlock()
				t.Logf("asks (listening, confirmed subscriptions as sent): %+v", h.asks)
				last := h.asks[len(h.asks)-1].confirmed
				for _, a := range h.asks {
					if a.confirmed == last && a.listening != "1" {
						t.Fatalf("an ask sent after the subscription was last confirmed (and no failure since) says the process does not count itself heard: %+v", h.asks)
					}
				}
			})
		}
	}
}

// runUnheard runs a held request in Redis between a dropped subscription and its
// resubscription: it shuts the gate, resets the subscription's connection, and runs the request
// once Redis no longer counts the process on channel.
func runUnheard(t *testing.T, p *faultproxy.Proxy, gate *subscribeGate, channel func() string, raw *redis.Client) func(run func() error) error {
	return func(run func() error) error {
		gate.close()
		defer gate.open()
		p.ResetSubscribers()
		ctx := context.Background()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			n, err := raw.PubSubNumSub(ctx, channel()).Result()
			if err == nil && n[channel()] == 0 {
				break
			}
			if time.Now().After(deadline) { // (on a goroutine of dlock's: no t.Fatal here)
				t.Errorf("Redis still counts the process on %s 15 s after its subscription was reset", channel())
				return errors.New("the subscription was not dropped")
			}
		}
		return run()
	}
}

// What a process says of itself in the asks after a relocking release (one that grants the key
// to the next process and stands this one in line again) ran between a dropped subscription
// and its resubscription, its answer "not heard" coming back after the resubscription's
// confirmation: every ask sent after that confirmation says it counts itself heard.
func TestAskAfterARelockAnsweredAcrossAResubscriptionSaysItListens(t *testing.T) {
	srv.NeedReal(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	gate := &subscribeGate{}
	defer gate.open()
	p.SetShaper(gate.shaper)
	const lease = 3 * time.Second
	raw := srv.Client()
	defer raw.Close()
	cl := redis.NewClient(&redis.Options{Addr: p.Addr()})
	var ga *dlock.Generator
	var la *dlock.DistributedReentrantLock
	channel := func() string { return processor.ProcessChannel(la.Config(), ga.LockerPrefix()) }
	h := &askHook{t: t, g: func() *dlock.Generator { return ga },
		hold:   func(_ int, a askSeen) bool { return a.script == "release" && a.listening == "1" },
		before: runUnheard(t, p, gate, channel, raw)}
	cl.AddHook(h)
	ga = genOn(t, cl, dlock.WithDefaultLease(lease))
	ga.Relock(time.Minute) // (every Unlock of ga's stands it in line again, if another process waits)
	gb, _ := newGen(t, dlock.WithDefaultLease(lease))
	ctx := ctxT(t, 40*time.Second)
	lb, _ := gb.Gen("HOLD", target(t))
	la, _ = ga.Gen("HOLD", target(t))

	ob, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan *dlock.Owner, 1)
	go func() {
		o, err := la.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		first <- o
	}()
	waitFor(t, func() bool { // A stands in line, heard
		st, err := lb.State(ctx)
		return err == nil && len(st.Waiting) == 1 && strings.HasPrefix(st.Waiting[0], ga.LockerPrefix())
	})
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	oa := recv(t, first, "A's first holding")
	if oa == nil {
		t.FailNow()
	}
	second := make(chan error, 1)
	go func() { // B waits for the key; A's relocking release grants it
		o, err := lb.Lock(ctx)
		if err == nil {
			ob = o
		}
		second <- err
	}()
	waitFor(t, func() bool {
		st, err := la.State(ctx)
		return err == nil && len(st.Waiting) == 1 && strings.HasPrefix(st.Waiting[0], gb.LockerPrefix())
	})
	if err := oa.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, second, "B's holding"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { // A wants the key again: it waits in the place the relock kept
		o, err := la.Lock(ctx)
		if err == nil {
			err = o.Unlock()
		}
		done <- err
	}()
	// Two asks of A sent after the held release's reply came.
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.held {
			return false
		}
		last, n := 0, 0
		for _, a := range h.asks {
			last = max(last, a.confirmed)
		}
		for _, a := range h.asks {
			if a.confirmed == last && a.script == "lock" {
				n++
			}
		}
		return n >= 2 && last >= 2
	})
	if err := ob.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "A's second holding"); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Logf("requests (script, listening, confirmed subscriptions as sent): %+v", h.asks)
	last := h.asks[len(h.asks)-1].confirmed
	for _, a := range h.asks {
		if a.confirmed == last && a.listening != "1" {
			t.Fatalf("a request sent after the subscription was last confirmed (and no failure since) says the process does not count itself heard: %+v", h.asks)
		}
	}
}
