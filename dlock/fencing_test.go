package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

func TestFencingTokensIncrease(t *testing.T) {
	const typ = "RGFENCE"
	const lease = time.Second
	target := rgTarget(t, 0)
	key := rgLockKey(typ, target)
	hA, hB := newFaultHook(), newFaultHook()
	hA.setLate(300 * time.Millisecond)
	hB.watch(key)
	a := rgGen(t, nil, hA)
	b := rgGen(t, nil, hB)
	c := rgGen(t, nil, nil)
	lA, lB, lC := mustGen(t, a, typ, target, lease), mustGen(t, b, typ, target, lease), mustGen(t, c, typ, target, lease)
	gd := newRgGuard(t)
	ctx := rgCtx(t, 60*time.Second)
	stalls := watchStalls(t)

	// A holding in the guard, and when its Lock began.
	type stay struct {
		o     context.Context
		s     *rgStay
		since time.Time
	}
	lockEnter := func(l *dlock.DistributedReentrantLock, who string) stay {
		t.Helper()
		since := time.Now()
		o, err := l.Lock(ctx)
		if err != nil {
			t.Fatalf("%s: Lock: %v", who, err)
		}
		return stay{o, gd.enter(key, who, l, o), since}
	}
	// unlockLeave leaves the guard and unlocks; a holding lost in a stall of the process (its
	// lease of a second ran out) is no failure.
	unlockLeave := func(l *dlock.DistributedReentrantLock, h stay, who string) {
		t.Helper()
		gd.leave(h.s)
		if err := l.Unlock(h.o); err != nil && !stalls.excused(t, err, h.since, lease, who+": Unlock") {
			t.Errorf("%s: Unlock: %v", who, err)
		}
	}
	// A waiter in a goroutine that enters the guard, holds briefly and lets go.
	waiter := func(l *dlock.DistributedReentrantLock, who string, wg *sync.WaitGroup) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			since := time.Now()
			o, err := l.Lock(rgCtx(t, 20*time.Second))
			if err != nil {
				t.Errorf("%s: Lock: %v", who, err)
				return
			}
			h := stay{o, gd.enter(key, who, l, o), since}
			time.Sleep(10 * time.Millisecond)
			unlockLeave(l, h, who)
		}()
	}

	// fired reports whether the fault armed for A's Unlock of h was hit, failing the test when
	// it was not, unless A's holding was lost in a stall of the process first (the Unlock, told
	// ErrLockLost, then sent nothing to fault: the section has nothing of it to check).
	fired := func(h stay, err error, what string) bool {
		t.Helper()
		if errors.Is(err, dlock.ErrLockLost) && stalls.excused(t, err, h.since, lease, what) {
			select {
			case <-hA.fired:
				return true
			default:
				return false
			}
		}
		hA.mustHaveFired(t)
		return true
	}

	// Plain acquisitions by three generators.
	for _, p := range []struct {
		l   *dlock.DistributedReentrantLock
		who string
	}{{lA, "A"}, {lB, "B"}, {lC, "C"}, {lA, "A"}} {
		unlockLeave(p.l, lockEnter(p.l, p.who), p.who)
	}

	// Local hand-overs and a hand-off to another generator.
	{
		h := lockEnter(lA, "A")
		var wg sync.WaitGroup
		waiter(lA, "A-waiter1", &wg)
		waiter(lA, "A-waiter2", &wg)
		waiter(lB, "B-waiter", &wg)
		time.Sleep(150 * time.Millisecond)
		unlockLeave(lA, h, "A")
		wg.Wait()
	}

	// A's Unlock runs on Redis but its reply is lost; B waits in another generator.
	{
		h := lockEnter(lA, "A")
		var wg sync.WaitGroup
		seen := hB.seen.Load()
		waiter(lB, "B-after-lost-unlock-reply", &wg)
		awaitTry(t, hB, seen)
		time.Sleep(100 * time.Millisecond)
		gd.leave(h.s)
		hA.arm(loseReply, key)
		err := lA.Unlock(h.o)
		hA.disarm()
		fired(h, err, "A's Unlock, its reply to be lost")
		t.Logf("Unlock with a lost reply: %v", err)
		wg.Wait()
		unlockLeave(lA, lockEnter(lA, "A-after"), "A-after")
	}

	// A pass to a local waiter whose renewal (for a block of tokens) has its reply lost.
	{
		h := lockEnter(lA, "A")
		var wg sync.WaitGroup
		waiter(lA, "A-waiter-after-lost-renewal-reply", &wg)
		time.Sleep(150 * time.Millisecond)
		gd.leave(h.s)
		hA.arm(loseReply, key)
		err := lA.Unlock(h.o)
		wg.Wait()
		hA.disarm()
		fired(h, err, "A's Unlock, its waiter's renewal reply to be lost")
		t.Logf("Unlock (local waiter) with a lost renewal reply: %v", err)
		unlockLeave(lB, lockEnter(lB, "B-after"), "B-after")
	}

	// A's Unlock is held on the wire until it times out, and reaches Redis later; B waits.
	{
		h := lockEnter(lA, "A")
		seen := hB.seen.Load()
		since := time.Now()
		got := rgLockAsync(lB, rgCtx(t, 20*time.Second))
		awaitTry(t, hB, seen)
		gd.leave(h.s)
		hA.arm(holdOnWire, key)
		err := lA.Unlock(h.o)
		hA.disarm()
		held := fired(h, err, "A's Unlock, to be held on the wire")
		t.Logf("Unlock held on the wire: %v", err)
		r := rgRecv(t, got, 20*time.Second, "B's Lock")
		if r.err != nil {
			t.Fatalf("B: Lock: %v", r.err)
		}
		bStay := stay{r.owned, gd.enter(key, "B-after-held-unlock", lB, r.owned), since}
		if held {
			hA.awaitLateRun(t) // the old unlock reaches Redis while B holds
			time.Sleep(2 * lease)
			// (B's holding lost in a stall of the process is logged; C may then take the key)
			if err := context.Cause(r.owned); r.owned.Err() != nil && !stalls.excused(t, err, bStay.since, lease, "B's holding") {
				t.Errorf("B's holding ended after A's late unlock reached Redis: %v", err)
			}
		}
		o2, ok, err := lC.TryLock(ctx)
		if ok {
			s2 := gd.enter(key, "C-while-B-holds", lC, o2)
			gd.leave(s2)
			_ = lC.Unlock(o2)
		} else if err != nil {
			t.Errorf("C: TryLock: %v", err)
		}
		unlockLeave(lB, bStay, "B-after-held-unlock")
	}

	// And everybody again, concurrently.
	var wg sync.WaitGroup
	for i, l := range []*dlock.DistributedReentrantLock{lA, lA, lB, lB, lC, lC} {
		wg.Add(1)
		go func(who string, l *dlock.DistributedReentrantLock) {
			defer wg.Done()
			for r := 0; r < 15; r++ {
				since := time.Now()
				o, err := l.Lock(ctx)
				if err != nil {
					t.Errorf("%s: Lock: %v", who, err)
					return
				}
				h := stay{o, gd.enter(key, who, l, o), since}
				time.Sleep(time.Millisecond)
				unlockLeave(l, h, who)
			}
		}(fmt.Sprintf("final%d", i), l)
	}
	wg.Wait()
}

// Fencing tokens keep increasing when Redis restarts empty (the counter is lost; the server
// clock is not).
func TestTokensIncreaseAcrossRestart(t *testing.T) {
	s := ownServer(t)
	c := s.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	l, _ := g.Gen("RESTART", "fence")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token := func() uint64 {
		owned, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := l.FencingToken(owned)
		if err := l.Unlock(owned); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	var last uint64
	for i := 0; i < 3; i++ {
		for j := 0; j < 5; j++ {
			tok := token()
			if tok <= last {
				t.Fatalf("restart %d: token %d after %d", i, tok, last)
			}
			last = tok
		}
		s.Kill()
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		if n := c.DBSize(ctx).Val(); n != 0 {
			t.Fatalf("restarted server holds %d keys, want an empty one", n)
		}
	}
}

// A pass within the process hands out only tokens that Redis reserved for it (the fencing
// counter holds the largest token handed out or reserved): a holding taken alone reserved one
// token, so the pass to a goroutine that queued after its ask renews for a block of tokens
// first. (An unreserved token is larger than the counter: the next take elsewhere within the
// same microsecond of the server's clock would be handed it too.)
func TestPassAfterALoneHoldingHasATokenRedisReserved(t *testing.T) {
	g, c := newGen(t, dlock.WithDefaultLease(time.Minute))
	l, _ := g.Gen("FENCEPASS", target(t))
	ctx := ctxT(t, 30*time.Second)
	first, err := l.Lock(ctx) // alone: its ask reserves one token
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(t, l, ctx)
	waitFor(t, func() bool { return g.Waiters(key(l)) })
	t1, _ := l.FencingToken(first)
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	second := recv(t, got, "the pass")
	if second == nil {
		t.FailNow()
	}
	defer second.Unlock() //nolint:errcheck
	t2, _ := l.FencingToken(second)
	fence, err := c.Get(ctx, "{"+key(l)+"}:fence").Uint64()
	if err != nil {
		t.Fatal(err)
	}
	if t1 >= t2 || t2 > fence {
		t.Fatalf("tokens %d, then %d (passed), with the fencing counter at %d: want increasing, and none past the counter", t1, t2, fence)
	}
}
