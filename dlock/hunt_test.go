package dlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// fencedStore is a downstream store that checks fencing tokens: a write with a token below the
// largest it accepted is refused.
type fencedStore struct {
	mu    sync.Mutex
	max   uint64
	value int64 // a counter the holders read, then write back plus one
}

// write accepts tok if it is at least the largest seen, and returns whether it did.
func (s *fencedStore) write(tok uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok < s.max {
		return false
	}
	s.max = tok
	return true
}

func (s *fencedStore) read() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value
}

func (s *fencedStore) set(v int64) {
	s.mu.Lock()
	s.value = v
	s.mu.Unlock()
}

// distanceHook delays every command of its client by d before it is sent: a process farther
// from Redis.
func distanceHook(d time.Duration) fnHook {
	return fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		time.Sleep(d)
		return next(ctx, cmd)
	}}
}

// Processes at different distances from Redis, each under a faulty network (writes delivered
// twice, late, replies lost, requests overtaken), take the mutex with deadlines from 0 to 3 ms
// and with long ones, TryLocks and re-entries: a holder whose owner context is live after its
// write never finds its fencing token refused by a fenced store (a later acquisition wrote
// with a larger one), a counter mutated under the lock by holders that stay live loses no
// update, and no long wait gives up.
func TestMutexUnderChaosAndDistance(t *testing.T) {
	// Process 0 passes the lock within itself, 1 and 3 (FIFO) release at every Unlock, 2
	// hears no messages, 4 yields after 5 ms.
	huntChaos(t, 20, 2, 1500*time.Millisecond, func(i int) []dlock.Option {
		switch i {
		case 1:
			return []dlock.Option{dlock.WithLocalHandOff(0)}
		case 2:
			return []dlock.Option{dlock.WithNotifications(false)}
		case 3:
			return []dlock.Option{dlock.WithFIFO(), dlock.WithLocalHandOff(0)}
		case 4:
			return []dlock.Option{dlock.WithLocalHandOff(5 * time.Millisecond)}
		}
		return nil
	})
}

func huntChaos(t *testing.T, pct, workers int, dur time.Duration, opts func(i int) []dlock.Option) {
	const lease = 300 * time.Millisecond
	tg := uniqueTarget(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var hooks []*chaosHook
	var locks []*dlock.DistributedReentrantLock
	for i, d := range []time.Duration{0, 0, time.Millisecond, 3 * time.Millisecond, 8 * time.Millisecond} {
		h := newChaosHook(lease, pct, seed+uint64(i))
		hooks = append(hooks, h)
		c := srv.Client()
		c.AddHook(distanceHook(d))
		c.AddHook(h)
		g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithDefaultLease(lease)}, opts(i)...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := g.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
			h.quiet()
			c.Close()
		})
		locks = append(locks, mustGen(t, g, "HUNT", tg, lease))
	}
	defer func() {
		for i, h := range hooks {
			t.Logf("process %d: %v", i, h)
		}
	}()
	var store fencedStore
	var ledger spanLedger
	var bad, acquired, gaveUp, longGaveUp, liveIncrements, sets atomic.Int64
	fail := func(format string, args ...any) {
		if bad.Add(1) <= 10 {
			t.Errorf(format, args...)
		}
	}
	stopAt := time.Now().Add(dur)
	var wg sync.WaitGroup
	for p, l := range locks {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(p*10+w)))
				for i := 0; time.Now().Before(stopAt); i++ {
					long := r.IntN(3) == 0
					d := time.Duration(r.IntN(4)) * time.Millisecond
					if long {
						d = 10 * lease
					}
					actx, cancel := context.WithTimeout(context.Background(), d)
					var o *dlock.Owner
					var err error
					if r.IntN(5) == 0 {
						var ok bool
						o, ok, err = l.TryLock(actx)
						if err == nil && !ok {
							cancel()
							continue
						}
					} else {
						o, err = l.Lock(actx)
					}
					cancel()
					if err != nil {
						gaveUp.Add(1)
						if long && errors.Is(err, dlock.ErrNotObtained) {
							longGaveUp.Add(1)
						}
						if !documentedErr(err) || errors.Is(err, dlock.ErrInvalidConfig) {
							fail("Lock: %v", err)
						}
						continue
					}
					acquired.Add(1)
					from := time.Now()
					tok, ok := l.FencingToken(o)
					if !ok && o.Err() == nil {
						fail("FencingToken says not held while the owner context is live")
					}
					v := store.read()
					written := store.write(tok)
					time.Sleep(time.Duration(r.IntN(2)) * time.Millisecond)
					if i%4 == 0 {
						if _, err := l.Lock(o); err == nil {
							if err := l.Unlock(o); err != nil && !documentedErr(err) {
								fail("Unlock of a re-entry: %v", err)
							}
						} else if !documentedErr(err) {
							fail("re-entry: %v", err)
						}
					}
					if written && o.Err() == nil {
						store.set(v + 1)
						sets.Add(1)
					}
					to := time.Now()
					live := o.Err() == nil
					if !written && live {
						fail("token %d refused by the fenced store (a later holder wrote) while its owner context is live", tok)
					}
					if live {
						liveIncrements.Add(1)
						ledger.add(heldSpan{from, to, 1})
					}
					if err := l.Unlock(o); err != nil && !documentedErr(err) {
						fail("Unlock: %v", err)
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, s := range ledger.spans {
		if out := ledger.outAt(s.from); out > 1 {
			fail("%d owners at %v", out, s.from)
		}
	}
	t.Logf("%d acquisitions, %d gave up (%d long waits), counter %d, live increments %d",
		acquired.Load(), gaveUp.Load(), longGaveUp.Load(), store.read(), liveIncrements.Load())
	if store.read() != sets.Load() {
		t.Errorf("the counter mutated under the lock is %d after %d increments: updates were lost", store.read(), sets.Load())
	}
	if n := longGaveUp.Load(); n > 0 {
		t.Errorf("%d Locks waited 10 leases in vain", n)
	}
	for _, h := range hooks {
		h.quiet()
	}
	c := rawClient(t)
	for _, k := range keysWithoutTTL(t, c) {
		if strings.Contains(k, tg) {
			t.Errorf("a key without a time to live: %s", k)
		}
	}
}

// killPubSub closes, from Redis's side, every subscription connection of the server: the
// processes that listened stop hearing until go-redis reconnects.
func killPubSub(t testing.TB, c *redis.Client) {
	t.Helper()
	if err := c.Do(context.Background(), "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
}

// A process first in line whose subscription is dropped just before the holder lets go is
// passed over by the release (it does not listen); it gets the key, free or granted on, once
// it listens again, not a poll interval later.
func TestDeafFirstInLineIsServedOnceItListensAgain(t *testing.T) {
	const lease = 20 * time.Second // (first in line, it would ask again half a lease later)
	for round := range 6 {
		raw := rawClient(t)
		ga, _ := newGen(t)
		gb, _ := newGen(t)
		gc, _ := newGen(t)
		tg := rgTarget(t, round)
		la, lb, lc := mustGen(t, ga, "DEAF", tg, lease), mustGen(t, gb, "DEAF", tg, lease), mustGen(t, gc, "DEAF", tg, lease)
		ctx := ctxT(t, 30*time.Second)
		a := mustLock(t, la, ctx)
		bdone := rgLockAsync(lb, ctx)
		waitFor(t, func() bool { r, heard, ok := gb.Place(key(lb)); return ok && r == 0 && heard })
		var cdone <-chan rgLockResult
		if round%2 == 1 { // a process behind it, which the release grants the key to
			cdone = rgLockAsync(lc, ctx)
			waitFor(t, func() bool { return len(stateOf(t, la).Waiting) == 2 })
			waitFor(t, func() bool { r, heard, ok := gc.Place(key(lc)); return ok && r == 1 && heard })
		}
		killPubSub(t, raw)
		if round%3 == 2 {
			time.Sleep(20 * time.Millisecond)
		}
		start := time.Now()
		if err := a.Unlock(); err != nil {
			t.Fatal(err)
		}
		if cdone != nil {
			// Either got it first; the other follows once it is let go.
			select {
			case r := <-bdone:
				if r.err != nil {
					t.Fatal(r.err)
				}
				_ = lb.Unlock(r.owned)
				r = rgRecv(t, cdone, 3*time.Second, "C's Lock")
				if r.err != nil {
					t.Fatal(r.err)
				}
				_ = lc.Unlock(r.owned)
			case r := <-cdone:
				if r.err != nil {
					t.Fatal(r.err)
				}
				_ = lc.Unlock(r.owned)
				r = rgRecv(t, bdone, 3*time.Second, "B's Lock")
				if r.err != nil {
					t.Fatal(r.err)
				}
				_ = lb.Unlock(r.owned)
			case <-time.After(3 * time.Second):
				t.Fatalf("round %d: neither waiter got the key within 3 s of its release", round)
			}
			continue
		}
		r := rgRecv(t, bdone, 3*time.Second, "B's Lock")
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("round %d: B got the key %v after the release", round, time.Since(start))
		_ = lb.Unlock(r.owned)
	}
}

// A process told that an operator removed its acquisition (ForceRelease from another
// process, whose message names the acquisition's locker) while the request that took the key
// for it is still on its way back does not count the key its own when the answer comes: the
// key went to the process in line meanwhile. Here P's lone goroutine takes the free key; its
// answer is held back while the operator removes P's locker and the key is granted to C.
func TestForceReleaseHeardWhileTheTakeIsOnItsWay(t *testing.T) {
	const lease = 10 * time.Second // (P's next renewal would come long after the checks)
	for _, try := range []bool{false, true} {
		name := "Lock"
		if try {
			name = "TryLock"
		}
		t.Run(name, func(t *testing.T) {
			gp, cp := newGen(t)
			gc, _ := newGen(t)
			gop, _ := newGen(t)
			tg := uniqueTarget(t)
			lp, lc, lop := mustGen(t, gp, "FORCEDTAKE", tg, lease), mustGen(t, gc, "FORCEDTAKE", tg, lease), mustGen(t, gop, "FORCEDTAKE", tg, lease)
			ctx := ctxT(t, 30*time.Second)
			gp.SetLinger(time.Minute)
			// P waits once, so that it is subscribed to the key's channel (and stays so).
			o := mustLock(t, lop, ctx)
			warm := lockAsync(t, lp, ctx)
			waitFor(t, func() bool { return len(stateOf(t, lop).Waiting) == 1 })
			waitFor(t, func() bool { return gp.Confirmed() >= 1 })
			if err := o.Unlock(); err != nil {
				t.Fatal(err)
			}
			if err := recv(t, warm, "P's first Lock").Unlock(); err != nil {
				t.Fatal(err)
			}
			arm, ran, open := gateScript(cp, "lock")
			t.Cleanup(open)
			arm()
			type res struct {
				o   *dlock.Owner
				err error
			}
			pres := make(chan res, 1)
			go func() {
				var r res
				if try {
					var ok bool
					r.o, ok, r.err = lp.TryLock(ctx)
					if r.err == nil && !ok {
						r.o = nil
					}
				} else {
					r.o, r.err = lp.Lock(ctx)
				}
				pres <- r
			}()
			recv(t, ran, "P's take") // the key is P's; the answer is on its way
			st := stateOf(t, lop)
			if st.Holder == "" {
				t.Fatal("the key is free after P's take")
			}
			cdone := rgLockAsync(lc, ctx)
			waitFor(t, func() bool { return len(stateOf(t, lop).Waiting) == 1 })
			waitFor(t, func() bool { r, heard, ok := gc.Place(key(lc)); return ok && heard && r == 0 })
			heard := gp.Heard()
			if removed, err := lop.ForceRelease(ctx, st.Holder); err != nil || !removed {
				t.Fatalf("ForceRelease(%q) = %v, %v", st.Holder, removed, err)
			}
			rc := rgRecv(t, cdone, 5*time.Second, "C's Lock")
			if rc.err != nil {
				t.Fatal(rc.err)
			}
			waitFor(t, func() bool { return gp.Heard() > heard }) // P heard that its locker was let go
			open()
			if try {
				r := rgRecv(t, pres, 5*time.Second, "P's TryLock")
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.o != nil {
					if r.o.Err() == nil && rc.owned.Err() == nil {
						t.Errorf("P came out of TryLock owning the key (owner context live) while C holds it")
					}
					_ = r.o.Unlock()
				}
				if err := lc.Unlock(rc.owned); err != nil {
					t.Fatal(err)
				}
				return
			}
			notYet(t, pres, "P's Lock returned while C holds the key") // (it waits behind C)
			if err := lc.Unlock(rc.owned); err != nil {
				t.Fatal(err)
			}
			r := rgRecv(t, pres, 5*time.Second, "P's Lock after C let go")
			if r.err != nil {
				t.Fatal(r.err)
			}
			_ = r.o.Unlock()
		})
	}
}

// A process told that an operator elsewhere removed its tenure's locker while a renewal
// before a pass is on its way (a goroutine of the process is about to take the lock from
// another) does not pass the lock on when the renewal's answer comes: the key went to the
// process in line meanwhile. (A ForceRelease in the same Generator: TestForceReleaseDuringAPassRenewal.)
func TestForceReleaseElsewhereHeardDuringAPassRenewal(t *testing.T) {
	const lease = 10 * time.Second // (the holder's next renewal would come long after the checks)
	ga, ca := newGen(t, dlock.WithLocalHandOff(time.Hour))
	gc, _ := newGen(t)
	gop, _ := newGen(t)
	tg := uniqueTarget(t)
	la, lc, lop := mustGen(t, ga, "FORCEDPASS", tg, lease), mustGen(t, gc, "FORCEDPASS", tg, lease), mustGen(t, gop, "FORCEDPASS", tg, lease)
	la2 := mustGen(t, ga, "FORCEDPASS", tg, lease/2) // another lease: a pass to it renews first
	ctx := ctxT(t, 30*time.Second)
	preload(t, ca) // (the renewal runs as it is stalled: no NOSCRIPT, then EVAL)
	ga.SetLinger(time.Minute)
	// A waits once, so that it is subscribed to the key's channel (and stays so).
	o := mustLock(t, lop, ctx)
	warm := lockAsync(t, la, ctx)
	waitFor(t, func() bool { return len(stateOf(t, lop).Waiting) == 1 })
	waitFor(t, func() bool { return ga.Confirmed() >= 1 })
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	a1 := recv(t, warm, "A's first Lock")
	if a1 == nil {
		t.FailNow()
	}
	waiter := rgLockAsync(la2, ctx)
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	arm, ran, open := gateScript(ca, "renew")
	t.Cleanup(open)
	arm()
	if err := a1.Unlock(); err != nil { // the waiter renews the tenure with its lease before it takes it
		t.Fatal(err)
	}
	recv(t, ran, "the renewal before the pass")
	st := stateOf(t, lop)
	cdone := rgLockAsync(lc, ctx)
	waitFor(t, func() bool { r, heard, ok := gc.Place(key(lc)); return ok && heard && r == 0 })
	heard := ga.Heard()
	if removed, err := lop.ForceRelease(ctx, st.Holder); err != nil || !removed {
		t.Fatalf("ForceRelease(%q) = %v, %v", st.Holder, removed, err)
	}
	rc := rgRecv(t, cdone, 5*time.Second, "C's Lock")
	if rc.err != nil {
		t.Fatal(rc.err)
	}
	waitFor(t, func() bool { return ga.Heard() > heard }) // A heard that its locker was let go
	open()
	select {
	case r := <-waiter:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.owned.Err() == nil && rc.owned.Err() == nil {
			t.Errorf("A's waiter came out of Lock owning the key (owner context live) while C holds it")
		}
		_ = la2.Unlock(r.owned)
		_ = lc.Unlock(rc.owned)
	case <-time.After(100 * time.Millisecond): // it waits behind C
		if err := lc.Unlock(rc.owned); err != nil {
			t.Fatal(err)
		}
		r := rgRecv(t, waiter, 5*time.Second, "A's waiter after C let go")
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = la2.Unlock(r.owned)
	}
}

// A waiting process closed about when the holder's release grants it the key (before, as, or
// after its grant's message comes) leaves the key to the process behind it at once, not a
// lease later; its Lock returns ErrClosed, or an Owner that Close ended.
func TestCloseAsTheKeyIsGrantedPassesItOn(t *testing.T) {
	const lease = 20 * time.Second
	for round := range 12 {
		ga, ca := newGen(t)
		cb := srv.Client()
		gb, err := dlock.NewGenerator(cb, dlock.WithDefaultLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		gc, _ := newGen(t)
		tg := rgTarget(t, round)
		la, lb, lc := mustGen(t, ga, "CLOSEGRANT", tg, lease), mustGen(t, gb, "CLOSEGRANT", tg, lease), mustGen(t, gc, "CLOSEGRANT", tg, lease)
		ctx := ctxT(t, 30*time.Second)
		a := mustLock(t, la, ctx)
		bdone := rgLockAsync(lb, ctx)
		waitFor(t, func() bool { r, heard, ok := gb.Place(key(lb)); return ok && r == 0 && heard })
		cdone := rgLockAsync(lc, ctx)
		waitFor(t, func() bool { r, heard, ok := gc.Place(key(lc)); return ok && r == 1 && heard })
		closed := make(chan error, 1)
		delay := time.Duration(round%6) * 200 * time.Microsecond
		ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if scriptIs("release")(cmd.Args()) && round%2 == 1 {
				go func() { time.Sleep(delay); closed <- gb.Close(context.Background()) }() // as the release goes
			}
			err := next(ctx, cmd)
			if scriptIs("release")(cmd.Args()) && round%2 == 0 {
				go func() { time.Sleep(delay); closed <- gb.Close(context.Background()) }() // once it ran
			}
			return err
		}})
		if err := a.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := rgRecv(t, closed, 10*time.Second, "B's Close"); err != nil {
			t.Errorf("round %d: B's Close: %v", round, err)
		}
		rb := rgRecv(t, bdone, 5*time.Second, "B's Lock")
		if rb.err == nil {
			if rb.owned.Err() == nil || !errors.Is(context.Cause(rb.owned), dlock.ErrClosed) {
				t.Errorf("round %d: B's Lock returned an Owner (%v) that Close did not end", round, fmtCause(rb.owned))
			}
		} else if !errors.Is(rb.err, dlock.ErrClosed) {
			t.Errorf("round %d: B's Lock: %v, want ErrClosed", round, rb.err)
		}
		rc := rgRecv(t, cdone, 3*time.Second, "C's Lock once B closed")
		if rc.err != nil {
			t.Fatal(rc.err)
		}
		if err := lc.Unlock(rc.owned); err != nil {
			t.Fatal(err)
		}
		cb.Close()
	}
}
