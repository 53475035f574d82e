package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/processor"
)

// chunkGate holds every chunk through a proxy that goes one way (toTarget: to Redis) and
// carries word, while it is shut (its shaper waits, and the chunks behind it on that
// connection wait with it).
type chunkGate struct {
	toTarget bool
	word     string

	mu   sync.Mutex
	shut chan struct{} // nil while open
}

// subscribeGate holds every SUBSCRIBE sent; unsubscribedGate every reply to an UNSUBSCRIBE.
func subscribeGate() *chunkGate { return &chunkGate{toTarget: true, word: "\r\nsubscribe\r\n"} }
func unsubscribedGate() *chunkGate {
	return &chunkGate{toTarget: false, word: "\r\nunsubscribe\r\n"}
}

func (g *chunkGate) close() {
	g.mu.Lock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *chunkGate) open() {
	g.mu.Lock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
	g.mu.Unlock()
}

func (g *chunkGate) shaper(toTarget bool, chunk []byte) time.Duration {
	if toTarget != g.toTarget || !bytes.Contains(bytes.ToLower(chunk), []byte(g.word)) {
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
// (an ask: lock.lua, or a shared.lua take that waits; a relock: release.lua or shared.lua's
// release with next; a yield check: renew.lua with yield), with how many subscriptions the
// generator had confirmed as it was sent. The first request for which hold returns true is run by before (which runs it in Redis and returns its reply), then its reply
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

	// deaf makes every ask's answer say that Redis does not hear the process on its channel
	// (as a Redis that does not count its subscription would).
	deaf atomic.Bool
}

type askSeen struct {
	what      string // ask, relock, yield
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
		c := sentCmd{args: args}
		var what string
		switch processor.ScriptName(args) {
		case "lock":
			what = "ask"
		case "release":
			if c.arg(h.t, "next") != "" {
				what = "relock" // (a release that stands in line again)
			}
		case "renew":
			if c.arg(h.t, "yield") == "1" {
				what = "yield"
			}
		case "shared":
			switch {
			case sharedArg(args, "wait") == "1":
				what = "ask" // (a take that stands in line)
			case sharedArg(args, "op") == "release" && sharedArg(args, "next") != "":
				what = "relock" // (a release that stands in line again: SharedReleaseThenTake)
			}
		}
		if what == "" {
			return next(ctx, cmd)
		}
		said := c.arg(h.t, "listening")
		if processor.ScriptName(args) == "shared" {
			said = sharedArg(args, "listening")
		}
		g := h.g()
		a := askSeen{what, said, g.Confirmed()}
		h.mu.Lock()
		h.asks = append(h.asks, a)
		hold := !h.held && h.hold(len(h.asks), a)
		h.held = h.held || hold
		h.mu.Unlock()
		if !hold {
			err := next(ctx, cmd)
			if vals, ok := replyList(cmd); ok && what == "ask" && h.deaf.Load() {
				switch i := len(vals) - 1; {
				case processor.ScriptName(args) == "shared" && len(vals) > 4:
					vals[4] = int64(0) // (processor.SharedResult.Heard)
				case processor.ScriptName(args) == "lock" && len(vals) >= 6:
					vals[i] = int64(0) // (processor.Sighting.Heard)
				}
			}
			return err
		}
		err := h.before(func() error { return next(ctx, cmd) })
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			// The script ran nothing: go-redis sends it again by EVAL, which is held instead.
			h.mu.Lock()
			h.held = false
			h.mu.Unlock()
			return err
		}
		for deadline := time.Now().Add(20 * time.Second); g.Confirmed() == a.confirmed && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the confirmation handled, then this reply
		h.t.Logf("held the %s request (listening %q): confirmations %d -> %d", a.what, a.listening, a.confirmed, g.Confirmed())
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
		// first says whether the gate is shut from the start (the first subscription is held):
		// the held ask is then run, and the gate opened.
		first bool
		hold  func(n int, a askSeen) bool
		// minLast is the least number of confirmations the asks checked follow.
		minLast int
	}{{
		// The ask, which claims nothing, runs before the first SUBSCRIBE.
		name:    "sent before the first confirmation",
		first:   true,
		hold:    func(n int, a askSeen) bool { return n >= 2 && a.confirmed == 0 },
		minLast: 1,
	}, {
		// The ask claims, and runs after Redis dropped the subscription and before the
		// resubscription (runUnheard): its answer is "not heard", to a claim.
		name:    "run between a dropped subscription and its resubscription",
		hold:    func(_ int, a askSeen) bool { return a.what == "ask" && a.confirmed >= 1 && a.listening == "1" },
		minLast: 2,
	}} {
		for _, kind := range []string{"mutex", "semaphore"} {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				const lease = 3 * time.Second
				var r *listenRig
				var channel func() string
				r = newListenRig(t, c.hold, func() string { return channel() }, dlock.WithDefaultLease(lease))
				if c.first {
					r.gate.close()
					r.h.before = func(run func() error) error {
						err := run()
						r.gate.open()
						return err
					}
				}
				ctx := ctxT(t, 40*time.Second)
				hold, wait, ch := r.contenders(t, ctx, kind)
				channel = func() string { return ch }
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
				waitFor(t, func() bool { return r.h.asked(c.minLast) })
				_ = unlockB()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				r.h.claimed(t)
			})
		}
	}
}

// runUnheard runs a held request in Redis between a dropped subscription and its
// resubscription: it shuts the gate, resets the subscription's connection, and runs the request
// once Redis no longer counts the process on channel.
func runUnheard(t *testing.T, p *faultproxy.Proxy, gate *chunkGate, channel func() string, raw *redis.Client) func(run func() error) error {
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

// listenRig is a process A whose requests stand it in line through an askHook and a proxy
// whose SUBSCRIBEs a gate holds while shut (and the replies to its UNSUBSCRIBEs another),
// beside a process B on Redis directly; its hook holds the first request hold accepts and
// runs it unheard (runUnheard) on channel.
type listenRig struct {
	h            *askHook
	gate, unsubd *chunkGate
	p            *faultproxy.Proxy
	raw          *redis.Client
	ga, gb       *dlock.Generator
}

func newListenRig(t *testing.T, hold func(int, askSeen) bool, channel func() string, opts ...dlock.Option) *listenRig {
	t.Helper()
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	gate, unsubd := subscribeGate(), unsubscribedGate()
	p.SetShaper(func(toTarget bool, chunk []byte) time.Duration {
		return gate.shaper(toTarget, chunk) + unsubd.shaper(toTarget, chunk)
	})
	raw := srv.Client()
	t.Cleanup(func() { raw.Close() })
	r := &listenRig{gate: gate, unsubd: unsubd, p: p, raw: raw}
	r.h = &askHook{t: t, g: func() *dlock.Generator { return r.ga }, hold: hold, before: runUnheard(t, p, gate, channel, raw)}
	cl := redis.NewClient(&redis.Options{Addr: p.Addr()})
	cl.AddHook(r.h)
	r.ga = genOn(t, cl, opts...)
	r.gb, _ = newGen(t, opts...)
	t.Cleanup(gate.open) // (first: the Generators' Close may subscribe)
	t.Cleanup(unsubd.open)
	return r
}

// contenders returns B's hold of a key of kind (a mutex, or a semaphore of one permit), A's
// wait for it (each returns its unlock), and A's channel of the key.
func (r *listenRig) contenders(t *testing.T, ctx context.Context, kind string) (hold, wait func() (func() error, error), channel string) {
	t.Helper()
	if kind == "mutex" {
		lb, _ := r.gb.Gen("HOLD", target(t))
		la, _ := r.ga.Gen("HOLD", target(t))
		hold = func() (func() error, error) { o, err := lb.Lock(ctx); return func() error { return o.Unlock() }, err }
		wait = func() (func() error, error) { o, err := la.Lock(ctx); return func() error { return o.Unlock() }, err }
		return hold, wait, processor.ProcessChannel(la.Config(), r.ga.LockerPrefix())
	}
	sb, err := r.gb.GenSemaphore("HOLD", target(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := r.ga.GenSemaphore("HOLD", target(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	hold = func() (func() error, error) {
		o, err := sb.Acquire(ctx, 1)
		return func() error { return o.Unlock() }, err
	}
	wait = func() (func() error, error) {
		o, err := sa.Acquire(ctx, 1)
		return func() error { return o.Unlock() }, err
	}
	return hold, wait, processor.SharedChannel(sa.Config(), r.ga.LockerPrefix())
}

// asked reports whether the held request's reply came, and A then sent two asks after the
// subscription's last confirmation, which is at least the minLast-th.
func (h *askHook) asked(minLast int) bool {
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
		if a.confirmed == last && a.what == "ask" {
			n++
		}
	}
	return n >= 2 && last >= minLast
}

// claimed fails t unless every request sent after the subscription's last confirmation says
// the process counts itself heard.
func (h *askHook) claimed(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Logf("requests (what, listening, confirmed subscriptions as sent): %+v", h.asks)
	last := h.asks[len(h.asks)-1].confirmed
	for _, a := range h.asks {
		if a.confirmed == last && a.listening != "1" {
			t.Fatalf("a request sent after the subscription was last confirmed (and no failure since) says the process does not count itself heard: %+v", h.asks)
		}
	}
}

// What a process says of itself in its asks after a request that stood it in line again ran
// between a dropped subscription and its resubscription, its answer "not heard" coming back
// after the resubscription's confirmation: every request sent after that confirmation says it
// counts itself heard. The request is a relocking release (it grants the key to the next
// process and stands this one in line again), a semaphore's release that stands it in line
// again (SharedReleaseThenTake: its other goroutine still wants the permit while another
// process waits), or a yield check at the hand-off limit.
func TestAskAfterARequestThatStoodItInLineAgainAnsweredAcrossAResubscriptionSaysItListens(t *testing.T) {
	srv.NeedReal(t)
	const lease = 3 * time.Second
	t.Run("mutex/relock", func(t *testing.T) {
		var r *listenRig
		var la *dlock.DistributedReentrantLock
		r = newListenRig(t, func(_ int, a askSeen) bool { return a.what == "relock" && a.listening == "1" },
			func() string { return processor.ProcessChannel(la.Config(), r.ga.LockerPrefix()) }, dlock.WithDefaultLease(lease))
		r.ga.Relock(time.Minute) // (every Unlock of A's stands it in line again, if another process waits)
		unheard := r.h.before
		r.h.before = func(run func() error) error {
			err := unheard(run)
			// The reply comes once A's next Lock waits: else the process leaves the line, and
			// its next Lock begins anew, claiming nothing until an answer says Redis heard it.
			for deadline := time.Now().Add(15 * time.Second); !r.ga.Waiters(la.Config().UniqueKey()) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			return err
		}
		ctx := ctxT(t, 40*time.Second)
		lb, _ := r.gb.Gen("HOLD", target(t))
		la, _ = r.ga.Gen("HOLD", target(t))

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
		inLine(t, ctx, lb, 1) // (A)
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
		inLine(t, ctx, la, 1) // (B)
		unlocked := make(chan error, 1)
		go func() { unlocked <- oa.Unlock() }() // (it returns with the release's reply, which the hook holds)
		if err := recv(t, second, "B's holding"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { // A wants the key again
			o, err := la.Lock(ctx)
			if err == nil {
				err = o.Unlock()
			}
			done <- err
		}()
		if err := recv(t, unlocked, "A's Unlock"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return r.h.asked(2) })
		if err := ob.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := recv(t, done, "A's second holding"); err != nil {
			t.Fatal(err)
		}
		r.h.claimed(t)
	})

	t.Run("semaphore/release then take", func(t *testing.T) {
		var r *listenRig
		var sa *dlock.Semaphore
		r = newListenRig(t, func(_ int, a askSeen) bool { return a.what == "relock" && a.listening == "1" },
			func() string { return processor.SharedChannel(sa.Config(), r.ga.LockerPrefix()) }, dlock.WithDefaultLease(lease))
		ctx := ctxT(t, 40*time.Second)
		sb, err := r.gb.GenSemaphore("HOLD", target(t), 1)
		if err != nil {
			t.Fatal(err)
		}
		sa, err = r.ga.GenSemaphore("HOLD", target(t), 1)
		if err != nil {
			t.Fatal(err)
		}
		waits := func(s *dlock.Semaphore, g *dlock.Generator) func() bool {
			return func() bool {
				st, err := s.State(ctx)
				return err == nil && len(st.Waiting) == 1 && strings.HasPrefix(st.Waiting[0].Process, g.LockerPrefix())
			}
		}

		ob, err := sb.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *dlock.Owner, 2)
		for range 2 { // A's two goroutines: the first served holds, the other waits on
			go func() {
				o, err := sa.Acquire(ctx, 1)
				if err != nil {
					t.Error(err)
				}
				got <- o
			}()
		}
		waitFor(t, waits(sb, r.ga))
		if err := ob.Unlock(); err != nil {
			t.Fatal(err)
		}
		oa := recv(t, got, "A's first holding")
		if oa == nil {
			t.FailNow()
		}
		second := make(chan error, 1)
		go func() { // B waits for the permit; A's release gives it to B and stands A in line again
			o, err := sb.Acquire(ctx, 1)
			if err == nil {
				ob = o
			}
			second <- err
		}()
		waitFor(t, waits(sa, r.gb))
		waitFor(t, func() bool { return r.ga.SharedWanted(sa.Config().UniqueKey()) }) // (A heard that B waits: it lends no more)
		if err := oa.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := recv(t, second, "B's holding"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return r.h.asked(2) })
		if err := ob.Unlock(); err != nil {
			t.Fatal(err)
		}
		if o := recv(t, got, "A's second holding"); o == nil || o.Unlock() != nil {
			t.Fatal("A's second holding failed")
		}
		r.h.claimed(t)
	})

	t.Run("mutex/yield", func(t *testing.T) {
		var r *listenRig
		var la, lb *dlock.DistributedReentrantLock
		ctx := ctxT(t, 40*time.Second)
		// Only a yield check that finds B in line (a check before finds nobody: the tenure
		// goes on); B stays in line until the key is its.
		bInLine := func() bool { st, err := lb.State(ctx); return err == nil && len(st.Waiting) == 1 }
		r = newListenRig(t, func(_ int, a askSeen) bool { return a.what == "yield" && a.listening == "1" && bInLine() },
			func() string { return processor.ProcessChannel(la.Config(), r.ga.LockerPrefix()) },
			dlock.WithDefaultLease(lease), dlock.WithLocalHandOff(20*time.Millisecond))
		lb, _ = r.gb.Gen("HOLD", target(t))
		la, _ = r.ga.Gen("HOLD", target(t))

		ob, err := lb.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		turns := make(chan struct{}, 1)
		done := make(chan error, 2)
		for range 2 { // A's goroutines take turns with the key, passing it between them
			go func() {
				for !stop.Load() {
					o, err := la.Lock(ctx)
					if err != nil {
						done <- err
						return
					}
					select {
					case turns <- struct{}{}:
					default:
					}
					time.Sleep(time.Millisecond)
					if err := o.Unlock(); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
		}
		inLine(t, ctx, lb, 1) // (A)
		if err := ob.Unlock(); err != nil {
			t.Fatal(err)
		}
		recv(t, turns, "A's first holding")
		second := make(chan error, 1)
		go func() { // B waits for the key; A's yield check gives it to B
			o, err := lb.Lock(ctx)
			if err == nil {
				ob = o
			}
			second <- err
		}()
		if err := recv(t, second, "B's holding"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return r.h.asked(2) })
		stop.Store(true)
		if err := ob.Unlock(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := recv(t, done, "A's goroutines"); err != nil {
				t.Fatal(err)
			}
		}
		r.h.claimed(t)
	})
}

// What a process says of itself in its first request for a key whose state it made anew while
// the key's channel was still subscribed (the channel lingers after the last state watching it
// was dropped, and the new state watches it again without a new confirmation): that it counts
// itself heard, from the first request (the barge) on, as the dropped state would have. (Were
// it to claim nothing until an answer said Redis heard it, a process that died with that
// request on its way could be granted the key for a lease.) Once the lingering subscription
// dropped, or once its linger ended (its UNSUBSCRIBE run, its reply not yet heard), or once an
// answer said Redis did not hear the process on it (a Redis that does not count it), a state
// made anew claims nothing until it is confirmed again.
func TestAskOfAStateMadeWhileItsChannelLingersSaysItListens(t *testing.T) {
	srv.NeedReal(t)
	const lease = 3 * time.Second
	for _, kind := range []string{"mutex", "semaphore"} {
		t.Run(kind, func(t *testing.T) {
			r := newListenRig(t, func(int, askSeen) bool { return false }, nil, dlock.WithDefaultLease(lease))
			r.ga.SetLinger(time.Minute)
			ctx := ctxT(t, 40*time.Second)
			hold, wait, channel := r.contenders(t, ctx, kind)
			inUse := r.ga.InUse
			if kind == "semaphore" {
				inUse = r.ga.SharedInUse
			}
			asks := func() []askSeen {
				r.h.mu.Lock()
				defer r.h.mu.Unlock()
				return append([]askSeen(nil), r.h.asks...)
			}
			// A waits behind B, listening (its subscription confirmed), and takes the key; its
			// state is dropped once it let go. asked runs once A's first request was sent.
			round := func(asked func()) {
				unlockB, err := hold()
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				n := len(asks())
				go func() {
					unlock, err := wait()
					if err == nil {
						err = unlock()
					}
					done <- err
				}()
				waitFor(t, func() bool { return len(asks()) > n })
				asked()
				// (B lets go once A watches its channel: A then stops watching as it lets go,
				// rather than taking the key with its first request, never watching.)
				waitFor(t, func() bool { return r.ga.Confirmed() >= 1 && r.ga.Watchers(channel) > 0 })
				if err := unlockB(); err != nil {
					t.Fatal(err)
				}
				if err := recv(t, done, "A's holding"); err != nil {
					t.Fatal(err)
				}
				waitFor(t, func() bool { return inUse() == 0 })
			}
			round(func() {})
			if r.ga.Subscribed() == 0 {
				t.Fatal("A's channel is no longer subscribed: it should linger for a minute")
			}
			before, confirmed := len(asks()), r.ga.Confirmed()
			round(func() {}) // with a state made anew, on the lingering subscription
			all := asks()
			t.Logf("requests (what, listening, confirmed subscriptions as sent): %+v", all)
			if len(all) == before {
				t.Fatal("A's second holding stood it in line with no request")
			}
			if r.ga.Confirmed() != confirmed {
				t.Logf("the subscription was confirmed again meanwhile (%d -> %d): the claim may come from that", confirmed, r.ga.Confirmed())
			}
			for _, a := range all[before:] {
				if a.listening != "1" {
					t.Fatalf("a request of a state made while its channel lingered, subscribed, says the process does not count itself heard: %+v", all[before:])
				}
			}

			// The lingering subscription drops (its SUBSCRIBE again held), and A's state made
			// anew asks: unclaimed.
			r.gate.close()
			r.p.ResetSubscribers()
			for deadline := time.Now().Add(15 * time.Second); r.ga.ConfirmedNow(channel); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("A counts its channel's subscription confirmed 15 s after its connection dropped")
				}
			}
			before = len(asks())
			round(r.gate.open)
			if a := asks()[before]; a.listening == "1" {
				t.Fatalf("the first request of a state made while its channel's subscription was down says the process counts itself heard: %+v", asks()[before:])
			}

			// The linger ends: Redis runs the UNSUBSCRIBE, whose reply is held, and A's state
			// made anew asks: unclaimed.
			r.ga.SetLinger(time.Millisecond)
			r.unsubd.close()
			round(func() {}) // (its state's unwatch sets the short linger)
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(time.Millisecond) {
				n, err := r.raw.PubSubNumSub(ctx, channel).Result()
				if err == nil && n[channel] == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("Redis still counts A on its channel 15 s after its linger")
				}
			}
			before = len(asks())
			round(r.unsubd.open)
			if a := asks()[before]; a.listening == "1" {
				t.Fatalf("the first request of a state made after its channel's linger ended says the process counts itself heard: %+v", asks()[before:])
			}

			// The answers say Redis does not hear A, subscribed: its claim ends, and the key's
			// next state, made while the channel lingers, claims nothing.
			r.ga.SetLinger(time.Minute)
			r.h.deaf.Store(true)
			before = len(asks())
			round(func() {
				waitFor(t, func() bool { // a claim, then an ask that no longer claims
					all := asks()[before:]
					i := slices.IndexFunc(all, func(a askSeen) bool { return a.listening == "1" })
					return i >= 0 && slices.ContainsFunc(all[i:], func(a askSeen) bool { return a.listening != "1" })
				})
			})
			r.h.deaf.Store(false)
			if r.ga.Subscribed() == 0 || r.ga.ConfirmedNow(channel) {
				t.Fatalf("after the answers that said Redis did not hear A, A is subscribed to %d channels, its confirmed %v: want it lingering, unconfirmed", r.ga.Subscribed(), r.ga.ConfirmedNow(channel))
			}
			before = len(asks())
			round(func() {})
			if a := asks()[before]; a.listening == "1" {
				t.Fatalf("the first request of a state made after Redis said it did not hear the process on its lingering channel says the process counts itself heard: %+v", asks()[before:])
			}
		})
	}
}
