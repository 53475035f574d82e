package dlock_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/processor"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Within one process the lock passes from goroutine to goroutine with no word to Redis while
// the process holds the key (a tenure): each pass is an acquisition with its own fencing
// token, larger than the last.
func TestLocalPassesCostNoCommand(t *testing.T) {
	g, c := newGen(t)
	cnt := &counter{}
	c.AddHook(cnt)
	l, _ := g.Gen("PASS", target(t))
	ctx := ctxT(t, 30*time.Second)
	const goroutines, acquisitions = 4, 200
	owned, err := l.Lock(ctx) // hold while the others queue up
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var tokens []uint64
	var wg sync.WaitGroup
	var left atomic.Int64 // the goroutines stop together, so the queue does not run dry
	left.Store(acquisitions)
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				o, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				tok, _ := l.FencingToken(o)
				mu.Lock()
				tokens = append(tokens, tok)
				mu.Unlock()
				if err := o.Unlock(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	waitFor(t, func() bool { return g.Waiters(key(l)) })
	before := cnt.n.Load()
	if err := owned.Unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	sent := cnt.n.Load() - before
	t.Logf("%d acquisitions, %d commands sent: %v", acquisitions, sent, cnt)
	// A renewal for a block of tokens, the final release; a release and an attempt each time
	// the queue ran dry for a moment.
	if sent > acquisitions/4 {
		t.Fatalf("%d commands for %d local acquisitions: passes are not free", sent, acquisitions)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d", tokens[i], tokens[i-1])
		}
	}
	waitFor(t, func() bool { return c.Exists(ctx, key(l)).Val() == 0 && g.InUse() == 0 })
}

// A pass to a goroutine whose handle has another lease renews the key with that lease first:
// one command, and the new owner's lease is its handle's.
func TestPassWithAnotherLeaseRenewsFirst(t *testing.T) {
	g, c := newGen(t)
	preload(t, c) // (else the first renewal on a fresh server is an EVALSHA and an EVAL)
	cnt := &counter{}
	c.AddHook(cnt)
	tg := target(t)
	short, _ := g.GenWithLease("PASS", tg, time.Second)
	long, _ := g.GenWithLease("PASS", tg, 20*time.Second)
	ctx := ctxT(t, 30*time.Second)
	owned, err := short.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(t, long, ctx)
	waitFor(t, func() bool { return g.Waiters(key(short)) })
	before := cnt.script("renew")
	if err := owned.Unlock(); err != nil {
		t.Fatal(err)
	}
	o := recv(t, got, "the long-lease waiter")
	if o == nil {
		return
	}
	defer o.Unlock() //nolint:errcheck
	if n := cnt.script("renew") - before; n != 1 {
		t.Fatalf("%d renewals for the pass, want 1", n)
	}
	if ttl := c.PTTL(ctx, key(short)).Val(); ttl < 10*time.Second {
		t.Fatalf("PTTL %v after the pass to a 20 s lease", ttl)
	}
}

// A pass whose renewal fails (Redis refused it: it did not run) keeps the tenure: the waiter
// is told after a pause, renews again, and holds the key under the same locker, which no
// take asked for anew.
func TestPassWhoseRenewalFailsKeepsTheTenure(t *testing.T) {
	g, c := newGen(t)
	preload(t, c)
	cnt := &counter{}
	c.AddHook(cnt)
	var armed, refused atomic.Bool
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) == "renew" && armed.CompareAndSwap(true, false) {
			refused.Store(true)
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}})
	tg := target(t)
	short, _ := g.GenWithLease("PASSFAIL", tg, 2*time.Second)
	long, _ := g.GenWithLease("PASSFAIL", tg, 20*time.Second)
	ctx := ctxT(t, 30*time.Second)
	owned, err := short.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	locker := c.Get(ctx, key(short)).Val()
	got := lockAsync(t, long, ctx)
	waitFor(t, func() bool { return g.Waiters(key(short)) })
	takes := cnt.script("lock")
	armed.Store(true)
	if err := owned.Unlock(); err != nil {
		t.Fatal(err)
	}
	o := recv(t, got, "the long-lease waiter")
	if o == nil {
		return
	}
	defer o.Unlock() //nolint:errcheck
	if !refused.Load() {
		t.Fatal("setup: no renewal of the pass was refused")
	}
	if now := c.Get(ctx, key(short)).Val(); now != locker {
		t.Fatalf("the key holds %q after the pass, want the tenure's %q", now, locker)
	}
	if n := cnt.script("lock") - takes; n != 0 {
		t.Fatalf("%d takes after the refused renewal, want 0 (the tenure kept)", n)
	}
}

// A pass never starts with less than half the new owner's lease left: a holder that kept the
// lock past half its lease passes it on only after a renewal.
func TestPassNeverStartsWithLessThanHalfTheLease(t *testing.T) {
	g, c := newGen(t)
	const lease = 2 * time.Second
	l, _ := g.GenWithLease("HALF", target(t), lease)
	ctx := ctxT(t, 30*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(t, l, ctx)
	waitFor(t, func() bool { return g.Waiters(key(l)) })
	time.Sleep(lease * 6 / 10) // past half the lease (the expander renews at 75 %)
	if err := owned.Unlock(); err != nil {
		t.Fatal(err)
	}
	o := recv(t, got, "the waiter")
	if o == nil {
		return
	}
	defer o.Unlock() //nolint:errcheck
	took := time.Now()
	ttl := c.PTTL(ctx, key(l)).Val()
	// The key's life when the waiter got the lock is at least what is left now plus the time
	// since; it must be at least half the lease.
	if left := ttl + time.Since(took); left < lease/2 {
		t.Fatalf("the pass started with %v of a %v lease left", left, lease)
	}
}

// Processes that always have waiters take turns: once a process has kept the key for the
// hand-off limit while another waits, the key goes to the other. Fencing tokens increase
// strictly across passes and processes, in the order of the holdings.
func TestHandOffLimitServesOtherProcesses(t *testing.T) {
	for _, handOff := range []time.Duration{dlock.DefaultHandOff, 0} {
		t.Run(handOff.String(), func(t *testing.T) {
			gens := []*dlock.Generator{}
			for i := 0; i < 2; i++ {
				g, _ := newGen(t, dlock.WithLocalHandOff(handOff))
				gens = append(gens, g)
			}
			var per [2]atomic.Int64
			var mu sync.Mutex // the holdings' order: exclusion makes it a total one
			inside, last := 0, uint64(0)
			var wg sync.WaitGroup
			ctx := ctxT(t, time.Minute)
			end := time.Now().Add(time.Second)
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					l, _ := gens[p].Gen("YIELD", target(t))
					for time.Now().Before(end) {
						o, err := l.Lock(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						tok, _ := l.FencingToken(o)
						mu.Lock()
						inside++
						if inside != 1 {
							t.Error("two owners at once")
						}
						if tok <= last {
							t.Errorf("token %d after %d", tok, last)
						}
						last = tok
						mu.Unlock()
						time.Sleep(time.Millisecond)
						mu.Lock()
						inside--
						mu.Unlock()
						per[p].Add(1)
						if err := o.Unlock(); err != nil {
							t.Error(err)
						}
					}
				}(i % 2)
			}
			wg.Wait()
			a, b := per[0].Load(), per[1].Load()
			t.Logf("process 0: %d, process 1: %d acquisitions", a, b)
			if a < (a+b)/10 || b < (a+b)/10 {
				t.Fatalf("a process starved: %d against %d", a, b)
			}
		})
	}
}

// A release wakes only the process it gives the key to (the first in line): the others do
// not ask Redis, so the commands per acquisition do not grow with the number of processes.
func TestOneWakeUpPerRelease(t *testing.T) {
	perAcq := map[int]float64{}
	for _, procs := range []int{2, 8} {
		cnt := &counter{}
		var gens []*dlock.Generator
		for i := 0; i < procs; i++ {
			g, c := newGen(t)
			c.AddHook(cnt)
			gens = append(gens, g)
		}
		tg := fmt.Sprintf("%s-%d", target(t), procs)
		ctx := ctxT(t, time.Minute)
		var acquisitions atomic.Int64
		var wg sync.WaitGroup
		stalls := watchStalls(t)
		end := time.Now().Add(time.Second)
		for _, g := range gens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, _ := g.Gen("WAKE", tg)
				for time.Now().Before(end) {
					since := time.Now()
					o, err := l.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					acquisitions.Add(1)
					if err := o.Unlock(); err != nil && !stalls.excused(t, err, since, time.Second, "Unlock") {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		n := acquisitions.Load()
		perAcq[procs] = float64(cnt.n.Load()) / float64(n)
		t.Logf("%d processes: %d acquisitions, %.2f commands each (%v)", procs, n, perAcq[procs], cnt)
	}
	// Each acquisition: the release, which grants the key and stands its process in line
	// again (relock: each goroutine locks again at once); plus the odd attempt, leave,
	// subscription and poll.
	if perAcq[8] > perAcq[2]+1 || perAcq[8] > 4.5 {
		t.Fatalf("commands per acquisition grow with the processes: %.2f with 2, %.2f with 8", perAcq[2], perAcq[8])
	}
}

// Every process is served, wherever it sits on the network: processes behind a latency proxy
// (2 ms each way) get shares of the lock within twice the mean, as the near ones do.
func TestEveryProcessServed(t *testing.T) {
	const procs, goroutines = 4, 3
	tg := target(t)
	var gens []*dlock.Generator
	for i := 0; i < procs; i++ {
		addr := srv.Addr
		if i > 0 { // three of them far from Redis
			p, err := faultproxy.New(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			p.SetLatency(2 * time.Millisecond)
			addr = p.Addr()
		}
		c := redis.NewClient(&redis.Options{Addr: addr})
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close(context.Background()); _ = c.Close() })
		gens = append(gens, g)
	}
	ctx := ctxT(t, time.Minute)
	per := make([]atomic.Int64, procs)
	var maxWait atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for i, g := range gens {
		for j := 0; j < goroutines; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, _ := g.Gen("FAIR", tg)
				for time.Now().Before(end) {
					start := time.Now()
					o, err := l.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if w := int64(time.Since(start)); w > maxWait.Load() {
						maxWait.Store(w)
					}
					per[i].Add(1)
					time.Sleep(200 * time.Microsecond)
					if err := o.Unlock(); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
	var total int64
	shares := make([]int64, procs)
	for i := range per {
		shares[i] = per[i].Load()
		total += shares[i]
	}
	mean := total / procs
	t.Logf("shares %v (the first near Redis, the others 2 ms away each way), longest wait %v",
		shares, time.Duration(maxWait.Load()).Round(time.Millisecond))
	for i, s := range shares {
		if s < mean/2 || s > 2*mean {
			t.Errorf("process %d got %d acquisitions, the mean is %d", i, s, mean)
		}
	}
}

func TestWithLocalHandOffRejectsNegative(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	if _, err := dlock.NewGenerator(c, dlock.WithLocalHandOff(-time.Second)); err == nil {
		t.Fatal("negative hand-off accepted")
	}
}

// A pass whose renewal's reply comes after the lease ran out is not taken: the tenure was lost
// when its lease ran out (the holder and waiters were told), and whoever gets the key next —
// the local waiter or the other process — holds it alone.
func TestPassRenewalReplyAfterTheLease(t *testing.T) {
	t.Parallel() // (keys of its own; mostly waiting)
	ga, ca := newGen(t)
	gb, _ := newGen(t)
	lease := 400 * time.Millisecond // (a loaded machine's renewals keep up with it: 100 ms lost the first holder's)
	la, _ := ga.GenWithLease("RVHO", target(t), lease)
	lb, _ := gb.GenWithLease("RVHO", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	o1, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		owned context.Context
		err   error
		at    time.Time
	}
	a2 := make(chan res, 1)
	go func() {
		o, err := la.Lock(ctx)
		if err == nil {
			tok, ok := la.FencingToken(o)
			t.Logf("A's waiter at return: owner ctx err %v, FencingToken %d ok %v", o.Err(), tok, ok)
		}
		a2 <- res{o, err, time.Now()}
	}()
	b := make(chan res, 1)
	go func() { o, err := lb.Lock(ctx); b <- res{o, err, time.Now()} }()
	for !ga.Waiters(la.Config().UniqueKey()) || !gb.Waiters(lb.Config().UniqueKey()) {
		time.Sleep(time.Millisecond)
	}
	if p, err := processor.NewRedisLockProcessor(ca, processor.Options{}); err != nil || p.Preload(ctx) != nil {
		t.Fatal("preload")
	}
	var delayed atomic.Int32
	ca.AddHook(delayHook{match: scriptIs("renew"), delay: 3 * lease, seen: &delayed})
	defer func() {
		if delayed.Load() == 0 {
			t.Error("no hand-over reply was delayed")
		}
	}()
	// The hand-over's reply comes after its lease: Unlock says the outcome was unknown (the
	// key was given back), and the next waiter must not take it.
	var pe *dlock.RedisProcessError
	if err := la.Unlock(o1); err != nil && !errors.As(err, &pe) {
		t.Fatal(err)
	}
	// Whoever gets the key first, the other must not get it while the first holds it.
	var first, second res
	var firstL, secondL *dlock.DistributedReentrantLock
	var secondC chan res
	select {
	case first = <-a2:
		firstL, secondL, secondC = la, lb, b
	case first = <-b:
		firstL, secondL, secondC = lb, la, a2
	}
	if first.err != nil {
		t.Fatalf("first to return: %v", first.err)
	}
	select {
	case second = <-secondC:
		if second.err == nil && first.owned.Err() == nil {
			t.Fatal("both own the lock: the second acquired while the first's owner context lives")
		}
		t.Skipf("the first holder lost its lease on a loaded machine (%v); nothing to check", context.Cause(first.owned))
	case <-time.After(5 * lease):
	}
	if err := firstL.Unlock(first.owned); err != nil {
		t.Fatalf("first holder's Unlock: %v", err)
	}
	second = <-secondC
	if second.err != nil {
		t.Fatalf("second: %v", second.err)
	}
	_ = secondL.Unlock(second.owned)
}

// A hand-off limit's check (renew, or yield to the first process in line) that Redis runs
// twice — the client sent it again after its reply was lost — is not mistaken for a loss: the
// copy finds the check settled, the tenure ends as after a yield, and every goroutine of both
// processes gets the lock in turn, none told of a loss.
func TestYieldCheckRunTwiceIsNoLoss(t *testing.T) {
	rec := &recorder{}
	core, logs := observer.New(zap.WarnLevel)
	ga, ca := newGen(t, dlock.WithLocalHandOff(time.Millisecond), dlock.WithLogger(zap.New(core)), dlock.WithObserver(rec))
	gb, _ := newGen(t)
	lease := time.Second
	la, _ := ga.GenWithLease("YTWICE", target(t), lease)
	lb, _ := gb.GenWithLease("YTWICE", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	o1, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2, b := waitPastTheLimit(t, ctx, ga, gb, la, lb, 10*time.Millisecond)
	var twice atomic.Int32
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if err == nil && scriptIs("renew")(cmd.Args()) {
			twice.Add(1)
			err = next(ctx, cmd) // the client sends it again (its first reply was lost)
		}
		return err
	}})
	if err := o1.Unlock(); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := recv(t, a2, "A's waiter"); err != nil {
		t.Fatalf("A's waiter: %v", err)
	}
	if err := recv(t, b, "B"); err != nil {
		t.Fatalf("B: %v", err)
	}
	if twice.Load() == 0 {
		t.Fatal("no check was run twice")
	}
	if lost := logs.FilterMessage("dlock: lock lost").All(); len(lost) > 0 {
		t.Fatalf("a loss was logged: %v", lost)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.lost) != 0 {
		t.Fatalf("the Observer was told of losses: %+v", rec.lost)
	}
}

// A renewal of the tenure (the expander's) that reaches Redis just after a hand-off limit's
// check gave the key to the process first in line, and whose answer (settled) comes before the
// check's, is not taken for a loss: nothing was lost, the key was handed over on purpose, and
// no "lock lost" is logged (an operator's false alarm) nor the key given back. Every goroutine
// of both processes gets the lock in turn.
func TestRenewalAfterAYieldIsNoLoss(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	rec := &recorder{}
	ga, ca := newGen(t, dlock.WithLocalHandOff(time.Millisecond), dlock.WithLogger(zap.New(core)), dlock.WithObserver(rec))
	gb, _ := newGen(t)
	const lease = 3 * time.Second
	la, _ := ga.GenWithLease("YRENEW", target(t), lease)
	lb, _ := gb.GenWithLease("YRENEW", target(t), lease)
	ctx := ctxT(t, 20*time.Second)
	o1, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2, b := waitPastTheLimit(t, ctx, ga, gb, la, lb, 0)
	yieldRan, renewed, answer := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var yields, renewals atomic.Int32
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !scriptIs("renew")(cmd.Args()) {
			return next(ctx, cmd)
		}
		c := sentCmd{"renew", cmd.Args()}
		err := next(ctx, cmd)
		switch {
		case err != nil: // (NOSCRIPT: sent again as EVAL)
		case c.arg(t, "yield") == "1" && yields.Add(1) == 1:
			close(yieldRan)
			<-answer // the check ran (and gave the key to B); its answer comes late
		case c.arg(t, "yield") != "1" && yields.Load() == 1 && renewals.Add(1) == 1:
			close(renewed) // the expander's renewal, after the check: answered first
		}
		return err
	}})
	if err := o1.Unlock(); err != nil { // A's waiter takes the tenure: the check first
		t.Fatalf("Unlock: %v", err)
	}
	recv(t, yieldRan, "the hand-off limit's check")
	recv(t, renewed, "the expander's renewal (at three quarters of the lease)")
	time.Sleep(100 * time.Millisecond) // its answer is acted on
	close(answer)
	if err := recv(t, b, "B"); err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := recv(t, a2, "A's waiter"); err != nil {
		t.Fatalf("A's waiter: %v", err)
	}
	if lost := logs.FilterMessage("dlock: lock lost").All(); len(lost) > 0 {
		t.Fatalf("a tenure that yielded was logged lost: %v", lost[0].ContextMap())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.lost) > 0 {
		t.Fatalf("the Observer was told of a loss: %+v", rec.lost)
	}
}

// A copy of a hand-off limit's check that found nobody in line, arriving after the tenure has
// gone on longer than the check's own mark lives (two leases), cannot give the key away from
// the owner who still holds it: the expander's renewals keep the mark alive with the key.
func TestYieldCheckCopyLateCannotTakeAHeldKey(t *testing.T) {
	ga, ca := newGen(t, dlock.WithLocalHandOff(time.Millisecond))
	gb, _ := newGen(t)
	w := newWire(t, ca)
	const lease = time.Second // (A holds three leases on renewals: a stall of a loaded machine outran a 300 ms one)
	la, _ := ga.GenWithLease("LATECHECK", target(t), lease)
	lb, _ := gb.GenWithLease("LATECHECK", target(t), lease)
	ctx := ctxT(t, 20*time.Second)
	o1, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got2 := make(chan *dlock.Owner, 1)
	go func() {
		o, err := la.Lock(ctx)
		if err != nil {
			t.Errorf("A's second goroutine: %v", err)
		}
		got2 <- o
	}()
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	time.Sleep(5 * time.Millisecond) // past the hand-off limit: the pass is a check
	if err := o1.Unlock(); err != nil {
		t.Fatal(err)
	}
	o2 := recv(t, got2, "A's second goroutine") // the check found nobody in line: renewed
	var check *sentCmd
	for _, c := range w.copies("renew") {
		if c.arg(t, "yield") == "1" {
			check = &c
		}
	}
	if check == nil {
		t.Fatal("no check was sent")
	}
	time.Sleep(3 * lease) // A's owner holds on (the expander renews), past two leases
	gotB := make(chan *dlock.Owner, 1)
	go func() {
		o, err := lb.Lock(ctx)
		if err != nil {
			t.Errorf("B: %v", err)
		}
		gotB <- o
	}()
	waitFor(t, func() bool { s, _ := la.State(ctx); return len(s.Waiting) > 0 })
	w.send(*check) // the copy of the check arrives
	select {
	case <-gotB:
		t.Fatalf("the late copy gave B the key while A's owner held it (A's hold count %d, cause %v)", la.HoldCount(o2), context.Cause(o2))
	case <-time.After(lease):
	}
	if err := o2.Unlock(); err != nil {
		t.Fatalf("A's Unlock: %v", err)
	}
	if ob := recv(t, gotB, "B"); ob != nil {
		_ = ob.Unlock()
	}
}

// A free tenure does not sit idle: a pass that renews first (another lease) and whose reply
// comes after the hand-off limit passed is taken at once (renewing again), not after the
// expander's renewal at 75 % of the lease.
func TestRenewedPassPastTheLimitIsTaken(t *testing.T) {
	g, c := newGen(t)
	var seen atomic.Int32
	c.AddHook(delayHook{match: scriptIs("renew"), delay: 2 * dlock.DefaultHandOff, seen: &seen})
	la, _ := g.GenWithLease("IDLE", target(t), 20*time.Second)
	lb, _ := g.GenWithLease("IDLE", target(t), 30*time.Second) // another lease: renews first
	ctx := ctxT(t, 60*time.Second)
	a, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- <-lockOnce(ctx, lb) }()
	waitFor(t, func() bool { return g.Waiters(key(la)) })
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	select { // an idle tenure would wait for the renewal at 15 s
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the waiter still waits 5 s after the pass (renewals delayed: %d)", seen.Load())
	}
}

// The hand-off limit counts the time a tenure can be passed, not the wait for the renewal its
// first pass needs (another lease here; elsewhere a grant of one token, or a grant counted from
// an old request): a process far from Redis, whose renewal takes longer than the limit, passes
// the key to its waiting goroutine, rather than yielding to the next process in line as the
// renewal's reply comes, with no goroutine served by the renewal.
func TestPassAfterARenewalSlowerThanTheLimitIsTakenFirst(t *testing.T) {
	const handOff = time.Second
	g, c := newGen(t, dlock.WithLocalHandOff(handOff))
	other, _ := newGen(t)
	tg := target(t)
	la, _ := g.GenWithLease("SLOWPASS", tg, 20*time.Second)
	lb, _ := g.GenWithLease("SLOWPASS", tg, 30*time.Second) // another lease: the pass renews first
	lo, _ := other.GenWithLease("SLOWPASS", tg, 20*time.Second)
	ctx := ctxT(t, time.Minute)
	a, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gotOther := lockAsync(t, lo, ctx)
	waitFor(t, func() bool { s, _ := la.State(ctx); return len(s.Waiting) == 1 })
	gotB := lockAsync(t, lb, ctx)
	waitFor(t, func() bool { return g.Waiters(key(la)) })
	var seen atomic.Int32
	c.AddHook(delayHook{match: scriptIs("renew"), delay: 2 * handOff, seen: &seen})
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-gotB:
		if b == nil {
			return
		}
		if err := b.Unlock(); err != nil {
			t.Error(err)
		}
		if o := recv(t, gotOther, "the other process"); o != nil {
			_ = o.Unlock()
		}
	case o := <-gotOther:
		if o != nil {
			_ = o.Unlock()
		}
		t.Fatalf("the other process took the key before the pass its renewal was for (%d renewals)", seen.Load())
	case <-time.After(30 * time.Second):
		t.Fatal("neither took the key within 30 s")
	}
}

// A TryLock that yields the tenure to another process (the hand-off limit passed, another
// process in line) leaves no goroutine of its process stranded: those that queued while the
// tenure was held get the lock in their turn.
func TestTryLockYieldLeavesNoWaiterStranded(t *testing.T) {
	gp, _ := newGen(t)
	gq, _ := newGen(t)
	la, _ := gp.GenWithLease("STRAND", target(t), 2*time.Second)
	lq, _ := gq.GenWithLease("STRAND", target(t), 2*time.Second)
	ctx := ctxT(t, 60*time.Second)
	for round := 0; round < 5; round++ {
		a, err := la.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := lockOnce(ctx, la)
		waitFor(t, func() bool { return gp.Waiters(key(la)) })
		qgot := lockOnce(ctx, lq)
		waitFor(t, func() bool { st, _ := la.State(ctx); return len(st.Waiting) == 1 })
		time.Sleep(2 * dlock.DefaultHandOff)
		if err := a.Unlock(); err != nil {
			t.Fatal(err)
		}
		if o, ok, err := la.TryLock(ctx); ok { // the yield check finds Q in line
			_ = o.Unlock()
		} else if err != nil {
			t.Fatal(err)
		}
		if err := recv(t, qgot, "Q's Lock"); err != nil {
			t.Fatal(err)
		}
		if err := recv(t, got, "the waiter's Lock"); err != nil {
			t.Fatal(err)
		}
	}
}

// Losses of the tenure while passes are under way — the operator force-releases the key over
// and over while goroutines with two leases (so passes renew first) take turns — never crash
// the process and never leave a goroutine hanging.
func TestLossesDuringPasses(t *testing.T) {
	t.Parallel()
	g, _ := newGen(t)
	l2, _ := g.GenWithLease("LOSSES", target(t), 2*time.Second)
	l3, _ := g.GenWithLease("LOSSES", target(t), 3*time.Second)
	ctx := ctxT(t, 60*time.Second)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var passes, forced atomic.Int64
	for i := 0; i < 6; i++ {
		l := l2
		if i%2 == 1 {
			l = l3
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				o, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				passes.Add(1)
				_ = o.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if st, err := l2.State(ctx); err == nil && st.Mine {
				if ok, _ := l2.ForceRelease(ctx, st.Holder); ok {
					forced.Add(1)
				}
			}
		}
	}()
	time.Sleep(soakFor(t))
	stop.Store(true)
	wg.Wait()
	t.Logf("acquisitions %d, tenures removed by force %d", passes.Load(), forced.Load())
	if forced.Load() == 0 {
		t.Fatal("no tenure was removed: the test tested nothing")
	}
}

// Java DLock processes never stand in the line: under continuous contention from this library,
// where every release grants the key to the next process in line, they wait for ever.
// A process whose goroutines never stop wanting the key (passing it among themselves, the
// default hand-off limit) still lets it go for every window of WithForeignWindow: a Java
// DLock-like poller gets it.
func TestForeignWindowOpensUnderOneBusyProcess(t *testing.T) {
	const lease = 300 * time.Millisecond
	g, c := newGen(t, dlock.WithForeignWindow(lease, lease/6))
	l, _ := g.GenWithLease("JAVA1", target(t), lease)
	key := l.Config().UniqueKey()
	ctx := ctxT(t, 30*time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				o, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
				_ = o.Unlock()
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitFor(t, func() bool { s, _ := l.State(ctx); return s.Held() && s.LocalWaiters })
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)
	for n := 0; ; n++ { // Java DLock's poll: SET NX, then every sixth of its lease
		locker := fmt.Sprintf("10.0.0.9-%d", n)
		if ok, err := c.SetNX(ctx, key, locker, lease).Result(); err != nil {
			t.Fatal(err)
		} else if ok {
			release.Run(ctx, c, []string{key}, locker)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the Java-like poller never got the key")
		case <-time.After(lease / 6):
		}
	}
}

// WithForeignWindow leaves the key free for a window, once a period: a poller of Java DLock's
// kind (SET NX, then a poll every sixth of its lease) gets it, and exclusion holds throughout.
// (The row without the window is measured for comparison, not judged.)
func TestForeignWindowServesJavaDLock(t *testing.T) {
	const lease = 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		window bool
	}{{"with-window", true}, {"without", false}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []dlock.Option{dlock.WithLocalHandOff(0)}
			if tc.window {
				opts = append(opts, dlock.WithForeignWindow(lease, lease/6))
			}
			goAcq, javaAcq, overlaps := javaBeside(t, lease, opts)
			t.Logf("FIGURE foreign window %v (every %v, window %v): Java-like poller %d acquisitions, this library %d, in 3 s",
				tc.window, lease, lease/6, javaAcq, goAcq)
			if overlaps > 0 {
				t.Fatalf("%d overlaps", overlaps)
			}
			if goAcq == 0 || (tc.window && javaAcq == 0) {
				t.Fatalf("acquisitions: this library %d, the Java-like poller %d", goAcq, javaAcq)
			}
		})
	}
}

// A mixed fleet under continuous contention: Generators of one goroutine each, or of several,
// with WithForeignWindow, beside a poller of Java DLock's kind. Exclusion holds; no process of
// this library holds the key while a window is open (Redis's clock is the judge); the poller
// gets the key window after window; and every goroutine here finishes. With WithHoldOver a
// process that keeps the key for its goroutine's next Lock still lets it go for the windows.
func TestForeignWindowUnderContention(t *testing.T) {
	const lease = 300 * time.Millisecond
	gapOpen := redis.NewScript(`local g = redis.call('get', KEYS[1]) local t = redis.call('time')
return (g and tonumber(g) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) and 1 or 0`)
	for _, tc := range []struct {
		name             string
		gens, goroutines int
		opts             []dlock.Option
		kept             bool // one goroutine each, with hold-over: some take a key kept for them
	}{
		{"one goroutine each", 4, 1, nil, false},
		{"many goroutines each", 2, 4, nil, false},
		{"many goroutines, no hand-off", 3, 3, []dlock.Option{dlock.WithLocalHandOff(0)}, false},
		{"no notifications", 2, 3, []dlock.Option{dlock.WithNotifications(false)}, false},
		{"hold-over, one goroutine each", 3, 1, []dlock.Option{dlock.WithHoldOver(true)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			hows := &howRecorder{}
			var ins insiders
			var inWindow, javaAcq atomic.Int64
			end := time.Now().Add(3 * time.Second)
			var wg sync.WaitGroup
			var key string
			for range tc.gens {
				g, c := newGen(t, append([]dlock.Option{dlock.WithForeignWindow(lease, lease/6), dlock.WithObserver(hows)}, tc.opts...)...)
				l, _ := g.GenWithLease("JAVA", target(t), lease)
				key = l.Config().UniqueKey()
				for range tc.goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(end) {
							o, err := l.Lock(ctx)
							if err != nil {
								t.Error(err)
								return
							}
							leave := ins.enter(func() bool { return o.Err() == nil })
							if n, _ := gapOpen.Run(ctx, c, []string{processor.GapKey(l.Config())}).Int(); n == 1 && o.Err() == nil {
								inWindow.Add(1) // (not by a holder whose lease ran out on a stalled machine)
							}
							leave()
							if err := o.Unlock(); err != nil {
								t.Log(err) // (a loaded machine may answer after a 300 ms lease: the key expires then)
							}
						}
					}()
				}
			}
			_, c := newGen(t)
			var longest time.Duration
			since := time.Now()
			javaPoller(ctx, c, key, lease, end, func(sent time.Time) {
				longest = max(longest, time.Since(since))
				leave := ins.enter(func() bool { return time.Since(sent) < lease })
				javaAcq.Add(1)
				time.Sleep(10 * time.Millisecond)
				leave()
				since = time.Now()
			})
			wg.Wait()
			t.Logf("the Java-like poller: %d acquisitions, longest wait %v (a window every %v)", javaAcq.Load(), longest, lease)
			if ins.overlaps.Load() > 0 || inWindow.Load() > 0 {
				t.Fatalf("%d overlaps; %d acquisitions here inside a window", ins.overlaps.Load(), inWindow.Load())
			}
			if javaAcq.Load() < 2 {
				t.Fatalf("the Java-like poller got the key %d times in 3 s of windows every %v", javaAcq.Load(), lease)
			}
			if tc.kept {
				hows.mu.Lock()
				kept := slices.Index(hows.how, dlock.HowHandOver) >= 0
				hows.mu.Unlock()
				if !kept {
					t.Fatal("no goroutine took a key kept for it: the hold-over was not tested")
				}
			}
		})
	}
}

// A window that no process outside the line uses ends on time: the processes in line (told
// "R" with the window's length, or finding it open as they ask) take the key as it ends, not
// at their next poll (here 5 s away), whether they hear of it by message or by asking, and
// the releasing process's own goroutines too.
func TestForeignWindowUnusedEndsOnTime(t *testing.T) {
	const lease, window = 30 * time.Second, 200 * time.Millisecond
	for _, tc := range []struct {
		name       string
		goroutines int
		same       bool // goroutines of the releasing process wait too
		opts       []dlock.Option
	}{
		{"one goroutine each", 1, false, nil},
		{"many goroutines each", 3, false, nil},
		{"the releasing process's own too", 3, true, []dlock.Option{dlock.WithLocalHandOff(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 60*time.Second)
			opts := append([]dlock.Option{dlock.WithForeignWindow(10*time.Second, window)}, tc.opts...)
			ga, ca := newGen(t, opts...)
			la, _ := ga.GenWithLease("UNUSED", target(t), lease)
			ca.Del(ctx, processor.GapKey(la.Config())) // (a window of an earlier run)
			held := mustLock(t, la, ctx)
			ls := []*dlock.DistributedReentrantLock{}
			for range 2 {
				g, _ := newGen(t, opts...)
				l, _ := g.GenWithLease("UNUSED", target(t), lease)
				ls = append(ls, l)
			}
			if tc.same {
				ls = append(ls, la)
			}
			var wg sync.WaitGroup
			var last atomic.Int64
			for _, l := range ls {
				for range tc.goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						o, err := l.Lock(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						last.Store(time.Now().UnixNano())
						_ = o.Unlock()
					}()
				}
			}
			waitFor(t, func() bool { s, _ := la.State(ctx); return len(s.Waiting) == 2 })
			released := time.Now()
			if err := held.Unlock(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if took := time.Unix(0, last.Load()).Sub(released); took < window || took > 3*time.Second {
				t.Fatalf("every waiter had the lock %v after a release that left the key free for %v; want it soon after the window, long before a poll (%v)",
					took, window, lease/6)
			}
		})
	}
}

// A window is opened once per release: a copy of the release that opened it (sent again after
// a lost reply) changes neither the window nor its period, nor takes or grants the key. An
// operator's ForceRelease of a Java DLock holder inside the window lets the key go as any
// release does (the window was used): the first process in line is granted it, and holds it
// alone; a ForceRelease of a holder already gone changes nothing.
func TestForeignWindowCopiesAndForce(t *testing.T) {
	const lease = 5 * time.Second
	ctx := ctxT(t, 60*time.Second)
	opts := []dlock.Option{dlock.WithForeignWindow(20*time.Second, 10*time.Second)}
	ga, ca := newGen(t, opts...)
	w := newWire(t, ca)
	gb, _ := newGen(t, opts...)
	la, _ := ga.GenWithLease("WINDOW", target(t), lease)
	lb, _ := gb.GenWithLease("WINDOW", target(t), lease)
	k, gap := key(la), processor.GapKey(la.Config())
	ca.Del(ctx, gap) // (a window of an earlier run)
	held := mustLock(t, la, ctx)
	got := lockOnce(ctx, lb)
	waitFor(t, func() bool { s, _ := la.State(ctx); return len(s.Waiting) == 1 })
	opened := time.Now()
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	ends, _ := ca.Get(ctx, gap).Result()
	period := ca.PTTL(ctx, gap).Val()
	if ends == "" || ca.Exists(ctx, k).Val() != 0 {
		t.Fatalf("after the release: window %q, key exists %d; want a window and a free key", ends, ca.Exists(ctx, k).Val())
	}
	for _, c := range w.copies("release") {
		w.send(c)
	}
	if e, _ := ca.Get(ctx, gap).Result(); e != ends || ca.PTTL(ctx, gap).Val() > period || ca.Exists(ctx, k).Val() != 0 {
		t.Fatalf("after a copy of the release: window %q (was %q), period %v (was %v), key exists %d", e, ends, ca.PTTL(ctx, gap).Val(), period, ca.Exists(ctx, k).Val())
	}
	if ok, _ := ca.SetNX(ctx, k, "10.0.0.9-1", lease).Result(); !ok {
		t.Fatal("a Java DLock-like SET NX could not take the key inside the window")
	}
	if removed, err := la.ForceRelease(ctx, "10.0.0.8-1"); removed || err != nil {
		t.Fatalf("ForceRelease of a holder not there: %v, %v", removed, err)
	}
	if h, _ := ca.Get(ctx, k).Result(); h != "10.0.0.9-1" {
		t.Fatalf("the Java holder was overtaken: the key holds %q", h)
	}
	if removed, err := la.ForceRelease(ctx, "10.0.0.9-1"); !removed || err != nil {
		t.Fatalf("ForceRelease of the Java holder: %v, %v", removed, err)
	}
	if err := recv(t, got, "the waiter's Lock after the ForceRelease"); err != nil {
		t.Fatal(err)
	}
	t.Logf("the waiter had the key %v after the window opened", time.Since(opened))
	if time.Since(opened) >= 10*time.Second {
		t.Fatal("the waiter had the key only once the window ended, not by the ForceRelease's grant")
	}
}

// javaBeside runs two Generators of two goroutines each in a Lock, hold, Unlock loop beside
// a poller of Java DLock's kind on the same key for 3 s, and counts their acquisitions and the
// moments two holders overlapped.
func javaBeside(t *testing.T, lease time.Duration, opts []dlock.Option) (goAcq, javaAcq, overlaps int64) {
	ctx := ctxT(t, 30*time.Second)
	var ins insiders
	var ga, ja atomic.Int64
	enter := func(live func() bool) {
		leave := ins.enter(live)
		time.Sleep(200 * time.Microsecond)
		leave()
	}
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var key string
	for range 2 {
		g, _ := newGen(t, opts...)
		l, _ := g.GenWithLease("JAVA", target(t), lease)
		key = l.Config().UniqueKey()
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					o, err := l.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					enter(func() bool { return o.Err() == nil })
					ga.Add(1)
					if err := o.Unlock(); err != nil && !errors.As(err, new(*dlock.RedisProcessError)) && !errors.Is(err, dlock.ErrLockLost) {
						t.Error(err) // (a loaded machine may answer, or renew, after a 300 ms lease: the key expires then)
						return
					}
				}
			}()
		}
	}
	_, c := newGen(t)
	wg.Add(1)
	go func() {
		defer wg.Done()
		javaPoller(ctx, c, key, lease, end, func(sent time.Time) {
			enter(func() bool { return time.Since(sent) < lease })
			ja.Add(1)
		})
	}()
	wg.Wait()
	return ga.Load(), ja.Load(), ins.overlaps.Load()
}

// insiders counts the overlaps of holders of one key: one that comes in while another is
// inside and still holds — a holder of this library whose Owner is live (by its clock), or the
// Java-like poller within its lease from its SET NX — is an overlap; one whose lease ran out
// on a stalled machine is not (it was told, and its key expired).
type insiders struct {
	mu       sync.Mutex
	in       map[*func() bool]bool
	overlaps atomic.Int64
}

// enter records a holder that holds while live says so, and returns its leave.
func (s *insiders) enter(live func() bool) (leave func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.in == nil {
		s.in = map[*func() bool]bool{}
	}
	for other := range s.in {
		if (*other)() {
			s.overlaps.Add(1)
			break
		}
	}
	s.in[&live] = true
	return func() {
		s.mu.Lock()
		delete(s.in, &live)
		s.mu.Unlock()
	}
}

// javaPoller polls key as Java DLock's retry thread does until end — SET NX PX with a locker of
// its own, then again every sixth of lease — and on each acquisition runs held (told when its
// SET NX was sent: its key lives at least lease from then), then lets the key go with a
// compare-and-delete and pauses a sixth of lease too: a Java process that wants the key now
// and then (one that takes it again at once keeps it: docs/design.md).
func javaPoller(ctx context.Context, c *redis.Client, key string, lease time.Duration, end time.Time, held func(sent time.Time)) {
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)
	for n := 0; time.Now().Before(end); n++ {
		locker := fmt.Sprintf("10.0.0.9-%d", n)
		sent := time.Now()
		if ok, err := c.SetNX(ctx, key, locker, lease).Result(); err == nil && ok {
			held(sent)
			release.Run(ctx, c, []string{key}, locker)
		}
		time.Sleep(lease / 6)
	}
}

// A grant whose message is never heard (here: a process with notifications off, which hears
// none) costs a poll interval, not a lease: the poller has the first waiter ask again with the
// same attempt, and lock.lua finds the key granted to it.
func TestUnheardGrantIsFoundByThePoller(t *testing.T) {
	const lease = 3 * time.Second // a poll interval is 500 ms; the grant's lease lasts 3 s
	rec := &howRecorder{}
	ga, _ := newGen(t)
	gb, _ := newGen(t, dlock.WithNotifications(false), dlock.WithObserver(rec))
	la, _ := ga.GenWithLease("UNHEARD", target(t), lease)
	lb, _ := gb.GenWithLease("UNHEARD", target(t), lease)
	ctx := ctxT(t, 30*time.Second)
	a, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := lockOnce(ctx, lb)
	waitFor(t, func() bool { st, _ := la.State(ctx); return len(st.Waiting) == 1 })
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if st, err := lb.State(ctx); err != nil || !st.Mine {
		t.Fatalf("after the release: %+v, %v; want the key granted to the waiting process", st, err)
	}
	if err := recv(t, got, "the waiter's Lock"); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.how) != 1 || rec.how[0] != dlock.HowPolled {
		t.Fatalf("the waiter acquired by %v, want by the poller", rec.how)
	}
}

// gateScript holds the reply of the next request of script name that ran, once armed: the
// caller waits until the test opens the gate (ran says Redis has run it).
func gateScript(c *redis.Client, name string) (arm func(), ran <-chan struct{}, open func()) {
	var armed atomic.Bool
	ranc, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if scriptIs(name)(cmd.Args()) && armed.CompareAndSwap(true, false) {
			close(ranc)
			select {
			case <-gate:
			case <-time.After(15 * time.Second):
			}
		}
		return err
	}})
	return func() { armed.Store(true) }, ranc, func() { once.Do(func() { close(gate) }) }
}

// A grant heard while a lone goroutine's first request (a barge: it has not queued) is on its
// way is that goroutine's: the answer to its request came after the grant, and it takes the
// key; the process does not pass the key on as if nobody wanted it, and keeps its place
// ahead of the process behind it.
func TestGrantHeardWhileABargerAsksIsItsOwn(t *testing.T) {
	const lease = 5 * time.Second
	gq, _ := newGen(t)
	gp, cp := newGen(t)
	gr, _ := newGen(t)
	lq := mustGen(t, gq, "BARGEGRANT", target(t), lease)
	lp := mustGen(t, gp, "BARGEGRANT", target(t), lease)
	lr := mustGen(t, gr, "BARGEGRANT", target(t), lease)
	arm, ran, open := gateScript(cp, "lock")
	defer open()
	ctx := ctxT(t, 30*time.Second)
	gp.SetLinger(time.Minute)
	q, err := lq.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// P waits once, so that it is subscribed to the key's channel (and stays so): it hears
	// the grant while its next barge's request is on its way.
	warm := lockAsync(t, lp, ctx)
	waitFor(t, func() bool { st, _ := lq.State(ctx); return len(st.Waiting) == 1 })
	if err := lq.Unlock(q); err != nil {
		t.Fatal(err)
	}
	if err := lp.Unlock(recv(t, warm, "P's first Lock")); err != nil {
		t.Fatal(err)
	}
	if q, err = lq.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	take := func(name string, l *dlock.DistributedReentrantLock) {
		o, err := l.Lock(ctx)
		if err != nil {
			order <- name + ": " + err.Error()
			return
		}
		order <- name
		l.Unlock(o) //nolint:errcheck
	}
	arm()
	go take("P", lp)
	recv(t, ran, "P's request") // P stands first in line; the answer is on its way
	go take("R", lr)
	waitFor(t, func() bool { st, _ := lq.State(ctx); return len(st.Waiting) == 2 })
	heard := gp.Heard()
	if err := lq.Unlock(q); err != nil { // granted to P's attempt
		t.Fatal(err)
	}
	waitFor(t, func() bool { return gp.Heard() > heard })
	open()
	if first := recv(t, order, "the first acquisition"); first != "P" {
		t.Fatalf("first came %q; want P, which stood first in line and was granted the key", first)
	}
	if second := recv(t, order, "the second acquisition"); second != "R" {
		t.Fatalf("second came %q; want R", second)
	}
}

// A process that waits with a shorter lease than the one its lock state was made with keeps
// its entry in the line fresh by its own lease: it is granted the key in its turn, not
// skipped for ever by releases that find its entry stale.
func TestWaiterWithAShorterLeaseIsServed(t *testing.T) {
	gq, _ := newGen(t)
	gr, _ := newGen(t)
	gp, cp := newGen(t)
	tg := target(t)
	lq := mustGen(t, gq, "SHORTWAIT", tg, time.Second)
	lr := mustGen(t, gr, "SHORTWAIT", tg, time.Second)
	long := mustGen(t, gp, "SHORTWAIT", tg, 30*time.Second)
	short := mustGen(t, gp, "SHORTWAIT", tg, time.Second)
	ctx := ctxT(t, 60*time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	turns := func(l *dlock.DistributedReentrantLock) { // Q and R take turns, 300 ms each
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			o, err := l.Lock(ctx)
			if err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond)
			l.Unlock(o) //nolint:errcheck
		}
	}
	wg.Add(2)
	go turns(lq)
	go turns(lr)
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, func() bool { st, _ := lq.State(ctx); return st.Holder != "" })
	// The state is made by a TryLock of the 30 s handle; a Lock of the 1 s handle joins
	// while the TryLock's request is on its way, and then waits with its own lease.
	arm, ran, open := gateScript(cp, "lock")
	defer open()
	arm()
	tried := tryInBackground(ctx, long)
	recv(t, ran, "the TryLock's request")
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second) // (Q and R each hold 300 ms)
		defer cancel()
		o, err := short.Lock(wctx)
		if err == nil {
			short.Unlock(o) //nolint:errcheck
		}
		got <- err
	}()
	waitFor(t, func() bool { return gp.Waiters(key(short)) })
	open()
	<-tried
	if err := recv(t, got, "the short-lease waiter"); err != nil {
		t.Fatalf("the waiter with the shorter lease was never served while two others took turns: %v", err)
	}
}

// A key granted to an attempt its process gave up — whose leave failed — is passed on when
// the process waits again, not held by nobody for its lease.
func TestGrantToAnAbandonedAttemptIsPassedOn(t *testing.T) {
	t.Parallel()
	const lease = 30 * time.Second // (a stranded grant would outlast the waiter's deadline)
	gq, _ := newGen(t)
	gp, cp := newGen(t)
	lq := mustGen(t, gq, "ABANDONED", target(t), lease)
	lp := mustGen(t, gp, "ABANDONED", target(t), lease)
	var failLeave atomic.Bool
	cp.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs("leave")(cmd.Args()) && failLeave.CompareAndSwap(true, false) {
			cmd.SetErr(errors.New("connection reset (injected: the leave never reached Redis)"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}})
	ctx := ctxT(t, 60*time.Second)
	q, err := lq.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failLeave.Store(true)
	wctx, cancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() { _, err := lp.Lock(wctx); gave <- err }()
	waitFor(t, func() bool { st, _ := lq.State(ctx); return len(st.Waiting) == 1 })
	cancel() // P gives up; its leave fails
	recv(t, gave, "the waiter that gives up")
	waitFor(t, func() bool { return !failLeave.Load() })
	if err := lq.Unlock(q); err != nil { // granted to P's abandoned attempt
		t.Fatal(err)
	}
	p, err := lp.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("P's new Lock, with the key granted to the attempt it gave up: %v", err)
	}
	if err := lp.Unlock(p); err != nil {
		t.Fatal(err)
	}
}

// countScript counts the requests of script name sent on c.
func countScript(c *redis.Client, name string) *atomic.Int64 {
	var n atomic.Int64
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs(name)(cmd.Args()) {
			n.Add(1)
		}
		return next(ctx, cmd)
	}})
	return &n
}

// A waiter renews its entry in the line at the pace of the lease it waits with from its first
// wait on, even when the process's poller started with a longer one: here the lock state is
// made by a TryLock of a 10-minute handle (a poll every minute), and a Lock of a 1 s handle
// parks before its own attempt exists. Its entry, fresh for 333 ms and alive for 2 s, must be
// renewed well within the bound below.
func TestWaiterPollsAtItsOwnLeasesPace(t *testing.T) {
	gq, _ := newGen(t)
	gp, cp := newGen(t)
	tg := target(t)
	lq := mustGen(t, gq, "POLLPACE", tg, time.Second)
	long := mustGen(t, gp, "POLLPACE", tg, 10*time.Minute)
	short := mustGen(t, gp, "POLLPACE", tg, time.Second)
	ctx := ctxT(t, 60*time.Second)
	q, err := lq.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lq.Unlock(q) //nolint:errcheck
	asks := countScript(cp, "lock")
	arm, ran, open := gateScript(cp, "lock")
	defer open()
	arm()
	tried := tryInBackground(ctx, long)
	recv(t, ran, "the TryLock's request")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := lockOnce(wctx, short)
	waitFor(t, func() bool { return gp.Waiters(key(short)) })
	open()
	<-tried
	waitFor(t, func() bool { return asks.Load() >= 2 }) // the waiter stands in line with its 1 s attempt
	asked := asks.Load()
	waitFor(t, func() bool { return asks.Load() > asked }) // and renews its entry (15 s: about 90 polls' worth)
	cancel()
	<-got
}

// Processes that wait further back in line ask Redis seldom — a third of their entry's 2 s
// life apart, where the first in line asks every third of the lease; the second also once the
// key it saw held could have expired (once a renewal of the holder's, which keeps it waiting),
// and further back too, but not sooner than backPace (a third of the shortest entry life: with
// this short lease, no sooner than the entry's pace) — and are still served in the order they
// came, each by its grant (they listen on their channels, so a release grants them the key
// however old their entries). The holder is another process (holderProcess): a stall of this
// one (a loaded machine) must not let its short lease run out, which would leave the key free
// for whichever waiter asks first.
func TestProcessesBackInLineAskSeldom(t *testing.T) {
	const lease = 600 * time.Millisecond
	tg := target(t)
	gh, _ := newGen(t)
	lh := mustGen(t, gh, "BACKLINE", tg, lease)
	ctx := ctxT(t, 60*time.Second)
	unlockH := holderProcess(t, "BACKLINE", tg, lease)
	held := stateOf(t, lh).Holder
	// A stall of the whole machine may still let the holder's lease run out: the key is then
	// free, and whichever waiter asks first takes it, out of the line's order. Nothing is
	// judged then (the test is skipped at its end).
	lost := func() bool { st, err := lh.State(ctx); return err == nil && st.Holder != held }
	// what each process in line is told on its channel: the grants to check below
	sub := rawClient(t).PSubscribe(ctx, "{"+key(lh)+"}:released:*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var told sync.Map // channel → []string
	heard := make(chan struct{})
	go func() {
		defer close(heard)
		for m := range sub.Channel() {
			v, _ := told.LoadOrStore(m.Channel, []string(nil))
			told.Store(m.Channel, append(v.([]string), m.Payload))
		}
	}()
	const waiters = 3
	var (
		asks  [waiters]*atomic.Int64
		recs  [waiters]*howRecorder
		locks [waiters]*dlock.DistributedReentrantLock
		gens  [waiters]*dlock.Generator
		names [waiters]string
		got   [waiters]<-chan *dlock.Owner
		order = make(chan int, waiters)
	)
	for i := range waiters {
		recs[i] = &howRecorder{}
		g, c := newGen(t, dlock.WithObserver(recs[i]))
		asks[i] = countScript(c, "lock")
		locks[i], gens[i] = mustGen(t, g, "BACKLINE", tg, lease), g
		got[i] = lockAsync(t, locks[i], ctx)
		waitFor(t, func() bool {
			st, _ := lh.State(ctx)
			if st.Holder != held {
				return true // (lost: see above)
			}
			if len(st.Waiting) != i+1 {
				return false
			}
			names[i] = st.Waiting[i]
			return true
		})
		waitFor(t, func() bool { return g.Subscribed() == 1 && g.Confirmed() >= 1 || lost() })
	}
	time.Sleep(lease / 2) // each has asked since its subscription was confirmed: Redis hears it
	var before [waiters]int64
	for i := range waiters {
		before[i] = asks[i].Load()
	}
	start := time.Now()
	time.Sleep(3 * lease)
	elapsed := time.Since(start)
	entryPace := 2 * time.Second / 3 // a third of the entry's life (processor.EntryTTL: 2 s)
	for i := 1; i < waiters && !lost(); i++ {
		pace := entryPace // (further back than second: backPace at the most, the same)
		if i == 1 {
			pace = lease * 3 / 4 // the holder's renewals
		}
		// and three more for the edges and a subscription replaced under load
		bound := 3 + int64(elapsed/pace)
		if n := asks[i].Load() - before[i]; n > bound {
			t.Errorf("process %d in line asked %d times in %v, want at most %d", i+1, n, elapsed, bound)
		}
	}
	t.Logf("asks in %v: first %d, then %d and %d", elapsed, asks[0].Load()-before[0], asks[1].Load()-before[1], asks[2].Load()-before[2])
	for i := 1; i < waiters && !lost(); i++ {
		// and between its asks its poller sleeps: it polls next when its next ask is due, a
		// third of its entry's life after its last answer (the second: as the holder's key it
		// saw could expire, if sooner), not every sixth of the lease. (Looked at until seen so,
		// for 3 s: a loaded machine sets the poll late after the answer, or is read between
		// the answer and the poll it sets; a wrong pace is never seen so.)
		var after time.Duration
		var ok bool
		lo, hi := entryPace-50*time.Millisecond, entryPace+50*time.Millisecond
		if i == 1 {
			lo = 0 // (the holder's key may have had little left: a renewal late under load)
		}
		if !rgWaitUntil(3*time.Second, func() bool {
			after, ok = gens[i].NextPoll(key(locks[i]))
			return ok && after >= lo && after <= hi
		}) {
			t.Errorf("process %d in line polls next %v after its last answer (%v), want between %v and %v", i+1, after, ok, lo, hi)
		}
	}
	wasLost := lost()
	if err := unlockH(); errors.Is(err, dlock.ErrLockLost) {
		wasLost = true
	} else if err != nil {
		t.Fatalf("the holder process: %v", err)
	}
	for range waiters {
		select {
		case o := <-got[0]:
			order <- 0
			locks[0].Unlock(o) //nolint:errcheck
			got[0] = nil
		case o := <-got[1]:
			order <- 1
			locks[1].Unlock(o) //nolint:errcheck
			got[1] = nil
		case o := <-got[2]:
			order <- 2
			locks[2].Unlock(o) //nolint:errcheck
			got[2] = nil
		case <-ctx.Done():
			t.Fatal("the waiters were not all served")
		}
	}
	if wasLost {
		t.Skip("the holder process's 600 ms lease ran out on a loaded machine: the waiters were served, in no order to judge")
	}
	for want := range waiters {
		if i := <-order; i != want {
			t.Fatalf("process %d served before process %d", i+1, want+1)
		}
		recs[want].mu.Lock()
		how := recs[want].how
		recs[want].mu.Unlock()
		// Each was granted the key by the release before it: Redis told it so on its channel.
		// It takes it from that message, or from its poll when that comes first (a process
		// that stalled as both came due: the poll finds the key its own), never from a key
		// left free for whoever asks (that would be by a message that it was left free, or by
		// a poll, but with no grant told).
		if len(how) != 1 || (how[0] != dlock.HowNotified && how[0] != dlock.HowPolled) {
			t.Errorf("process %d acquired by %v, want by its grant", want+1, how)
		}
		ch := "{" + key(lh) + "}:released:" + names[want]
		var msgs []string
		if !rgWaitUntil(5*time.Second, func() bool {
			v, _ := told.Load(ch)
			msgs, _ = v.([]string)
			return slices.ContainsFunc(msgs, func(m string) bool { return strings.HasPrefix(m, "G|at=") })
		}) {
			t.Errorf("process %d was told %q on its channel, want its grant", want+1, msgs)
		}
	}
	sub.Close()
	<-heard
}

// A waiting process learns when it comes first in line: from a release's grant to the process
// before it, or from that process's leave (F). It then keeps the pace of the first. (With a
// 60 s lease a process back in line asks every 20 s: what it learns within the test's 15 s
// bound, it learns from the message.)
func TestWaiterLearnsItIsFirst(t *testing.T) {
	const lease = time.Minute
	tg := target(t)
	gh, _ := newGen(t)
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	lh := mustGen(t, gh, "FIRSTNOW", tg, lease)
	la := mustGen(t, ga, "FIRSTNOW", tg, lease)
	lb := mustGen(t, gb, "FIRSTNOW", tg, lease)
	ctx := ctxT(t, 60*time.Second)
	h, err := lh.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	gotA := lockOnce(actx, la)
	waitFor(t, func() bool { st, _ := lh.State(ctx); return len(st.Waiting) == 1 })
	gotB := lockAsync(t, lb, ctx)
	waitFor(t, func() bool { st, _ := lh.State(ctx); return len(st.Waiting) == 2 })
	for _, g := range []*dlock.Generator{ga, gb} {
		waitFor(t, func() bool { return g.Subscribed() == 1 && g.Confirmed() >= 1 })
	}
	// (each asks again once its subscription is confirmed: Redis hears it then)
	waitFor(t, func() bool { r, heard, ok := gb.Place(key(lb)); return ok && heard && r == 1 })
	cancelA() // A leaves the line
	if err := recv(t, gotA, "A's Lock"); err == nil {
		t.Fatal("A got the lock")
	}
	waitFor(t, func() bool { r, _, ok := gb.Place(key(lb)); return ok && r == 0 })
	if err := lh.Unlock(h); err != nil {
		t.Fatal(err)
	}
	o := recv(t, gotB, "B's Lock")
	if err := lb.Unlock(o); err != nil {
		t.Fatal(err)
	}
}

// A process told it is first hears with it how long the key has to live, a fresh sighting of
// the holder: told that the key is free (its holder died, and the process before it left), it
// asks at once and takes it — not at its pace as first, half its 60 s lease after its last
// answer, nor when the holder that answer saw would have expired, a minute after it.
func TestFirstToldTheKeyIsFreeTakesIt(t *testing.T) {
	const lease = time.Minute
	g, c := newGen(t)
	l := mustGen(t, g, "FIRSTFREE", target(t), lease)
	ctx := ctxT(t, 60*time.Second)
	if err := c.Set(ctx, key(l), "another-holder", lease).Err(); err != nil {
		t.Fatal(err)
	}
	got := lockAsync(t, l, ctx)
	waitFor(t, func() bool { r, heard, ok := g.Place(key(l)); return ok && heard && r == 0 })
	c.Del(ctx, key(l)) // (its holder died, and its key expired)
	if err := c.Publish(ctx, processor.ProcessChannel(l.Config(), g.LockerPrefix()), "F|life=0|another-holder").Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(recv(t, got, "the Lock told the key is free")); err != nil {
		t.Fatal(err)
	}
}

// A grant the first in line cannot count (here its token is at or below what its last answer
// saw: for all it knows the grant came before that answer, and may have expired) has the first
// waiter ask at once, which finds the key its own — not at its pace, which F, told a moment
// before with the holder's whole lease ahead, put half its 60 s lease away. (The pace counted
// from F leaves a grant whose time is not told or not trusted to this ask: grantUsable.)
func TestUncountedGrantHasTheFirstWaiterAsk(t *testing.T) {
	const lease = time.Minute
	g, c := newGen(t)
	l := mustGen(t, g, "UNCOUNTED", target(t), lease)
	ctx := ctxT(t, 60*time.Second)
	if err := c.Set(ctx, key(l), "another-holder", lease).Err(); err != nil {
		t.Fatal(err)
	}
	got := lockAsync(t, l, ctx)
	waitFor(t, func() bool { r, heard, ok := g.Place(key(l)); return ok && heard && r == 0 })
	ch := processor.ProcessChannel(l.Config(), g.LockerPrefix())
	heard := g.Heard()
	if err := c.Publish(ctx, ch, "F|life=60000|another-holder").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return g.Heard() > heard })
	w, err := c.HGet(ctx, processor.WantKey(l.Config()), g.LockerPrefix()).Result()
	if err != nil {
		t.Fatal(err)
	}
	locker, _, _ := strings.Cut(w, "|")
	// (Redis grants it the key, as the holder's release would; the message's token puts the
	// grant before the process's last answer)
	if err := c.Set(ctx, key(l), locker, lease).Err(); err != nil {
		t.Fatal(err)
	}
	c.ZRem(ctx, processor.LineKey(l.Config()), g.LockerPrefix())
	c.HDel(ctx, processor.WantKey(l.Config()), g.LockerPrefix())
	if err := c.Publish(ctx, ch, "G|at=1|another-holder|"+locker+"|1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(recv(t, got, "the Lock granted a key it cannot count")); err != nil {
		t.Fatal(err)
	}
}

// tryInBackground runs one TryLock of l (unlocking at once if it got the lock) in a goroutine,
// and returns a channel closed when it is done.
func tryInBackground(ctx context.Context, l *dlock.DistributedReentrantLock) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if o, ok, err := l.TryLock(ctx); err == nil && ok {
			l.Unlock(o) //nolint:errcheck
		}
	}()
	return done
}

// A process whose waiters do not listen (WithNotifications(false)) still grants the key to,
// and tells, a process in line that listens: at its release (the waiter is woken by the grant's
// message, not by its poll a third of its 60 s lease later), and at its hand-off limit while
// its own goroutines keep passing the key (before, it found no live process in line and kept
// the key for ever).
func TestProcessesWithAndWithoutNotificationsShareAKey(t *testing.T) {
	const lease = time.Minute
	t.Run("release", func(t *testing.T) {
		tg := target(t)
		gd, _ := newGen(t, dlock.WithNotifications(false))
		rec := &howRecorder{}
		ga, _ := newGen(t, dlock.WithObserver(rec))
		ld, la := mustGen(t, gd, "MIXEDNOTIFY", tg, lease), mustGen(t, ga, "MIXEDNOTIFY", tg, lease)
		ctx := ctxT(t, 30*time.Second) // (its poll would come after 20 s)
		od, err := ld.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := lockAsync(t, la, ctx)
		waitFor(t, func() bool { r, heard, ok := ga.Place(key(la)); return ok && heard && r == 0 })
		if err := ld.Unlock(od); err != nil {
			t.Fatal(err)
		}
		o := recv(t, got, "the listening waiter's Lock")
		defer la.Unlock(o) //nolint:errcheck
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.how) != 1 || rec.how[0] != dlock.HowNotified {
			t.Fatalf("the listening waiter acquired by %v, want by the grant's message", rec.how)
		}
	})
	t.Run("hand-off limit", func(t *testing.T) {
		tg := target(t)
		gd, _ := newGen(t, dlock.WithNotifications(false), dlock.WithLocalHandOff(time.Millisecond))
		ga, _ := newGen(t)
		ld, la := mustGen(t, gd, "MIXEDNOTIFY", tg, lease), mustGen(t, ga, "MIXEDNOTIFY", tg, lease)
		ctx := ctxT(t, 30*time.Second)
		dctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 2 { // the key passes between them, and would stay in their process
			wg.Add(1)
			go func() {
				defer wg.Done()
				for dctx.Err() == nil {
					o, err := ld.Lock(dctx)
					if err != nil {
						if dctx.Err() == nil {
							t.Error(err)
						}
						return
					}
					time.Sleep(time.Millisecond)
					_ = ld.Unlock(o)
				}
			}()
		}
		defer wg.Wait()
		defer stop() // (a waiter of D learns of the key only by its poll, lease/10 later)
		waitFor(t, func() bool { st, _ := ld.State(ctx); return st.Mine })
		o, err := la.Lock(ctx)
		if err != nil {
			t.Fatalf("the listening process never got the key from the one that does not listen: %v", err)
		}
		if err := la.Unlock(o); err != nil {
			t.Fatal(err)
		}
	})
}

// Processes that line up one after another behind a holder are served in turn, in arrival
// order, each only after the one before let go. Ports RedissonFairLockTest's
// testConcurrency_MultiInstance_Ordering and testLeaseTimeout, and etcd's testMutexLock
// ("followers did not wait").
func TestProcessesServedInArrivalOrder(t *testing.T) {
	g0, _ := newGen(t)
	l0, _ := g0.GenWithLease("ORDER", target(t), 5*time.Second)
	ctx := ctxT(t, 20*time.Second)
	o := mustLock(t, l0, ctx)
	const n = 5
	served := make(chan int, n)
	var inside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		g, _ := newGen(t)
		l, _ := g.GenWithLease("ORDER", target(t), 5*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.Do(ctx, func(context.Context) error {
				if inside.Add(1) != 1 {
					t.Error("two owners at once")
				}
				served <- i
				inside.Add(-1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
		waitFor(t, func() bool { return len(stateOf(t, l0).Waiting) == i+1 })
	}
	notYet(t, served, "a waiter served while the first holder held")
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	servedInOrder(t, served, n)
}

// servedInOrder checks that served, once its senders are done, holds waiters 0 to n-1 in
// that order.
func servedInOrder(t *testing.T, served chan int, n int) {
	t.Helper()
	close(served)
	next := 0
	for i := range served {
		if i != next {
			t.Fatalf("waiter %d served when waiter %d was due (arrival order)", i, next)
		}
		next++
	}
	if next != n {
		t.Fatalf("%d of %d waiters served", next, n)
	}
}

// The write side and a semaphore's permits serve their waiters in arrival order, as the mutex
// does: goroutines of one process, each queued after the one before, and processes, each in
// line after the one before, get in one after another in that order once the holder (of
// another process) lets go. Ports RedissonFairLockTest's testConcurrency_MultiInstance_Ordering
// to the lock family (RWLock and Semaphore say: processes in their order in the line, the
// goroutines of a process in their order of arrival).
func TestFamilyServesInArrivalOrder(t *testing.T) {
	for _, kind := range []string{"write side", "permits"} {
		for _, where := range []string{"goroutines of one process", "processes"} {
			t.Run(kind+"/"+where, func(t *testing.T) {
				tg := uniqueTarget(t)
				ctx := ctxT(t, 30*time.Second)
				part := func(g *dlock.Generator) (dlock.Part, func() int) {
					if kind == "permits" {
						s := semOf(t, g, tg, 2)
						return s.Permits(2), func() int {
							st, err := s.State(ctx)
							if err != nil {
								t.Fatal(err)
							}
							return len(st.Waiting)
						}
					}
					l := rwOf(t, g, tg)
					return l.WriteSide(), func() int {
						st, err := l.State(ctx)
						if err != nil {
							t.Fatal(err)
						}
						return len(st.Waiting)
					}
				}
				gh, _ := newGen(t)
				h, _ := part(gh)
				held, err := h.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				gw, _ := newGen(t) // the waiters' process, when they are goroutines of one
				const n = 5
				served := make(chan int, n)
				var inside atomic.Int32
				var wg sync.WaitGroup
				for i := range n {
					g := gw
					if where == "processes" {
						g, _ = newGen(t)
					}
					p, inLine := part(g)
					wg.Add(1)
					go func() {
						defer wg.Done()
						o, err := p.Lock(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						if inside.Add(1) != 1 {
							t.Error("two owners at once")
						}
						served <- i
						inside.Add(-1)
						if err := o.Unlock(); err != nil {
							t.Error(err)
						}
					}()
					if where == "processes" {
						waitFor(t, func() bool { return inLine() == i+1 })
					} else {
						waitFor(t, func() bool { return gw.SharedWaiters(p.Config().UniqueKey()) == i+1 })
					}
				}
				notYet(t, served, "a waiter served while the holder held")
				if err := held.Unlock(); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				servedInOrder(t, served, n)
			})
		}
	}
}

// Readers and writers queued in one process, behind another process's writer, are served in
// their order of arrival: a reader queued after a writer never gets in before that writer
// has let go (nor beside it), and readers queued together after it read together. Ports
// Curator's fairness of InterProcessReadWriteLock (its lock nodes are served in sequence
// order) and RedissonFairLockTest's ordering, for goroutines of one process.
func TestRWGoroutinesOfAProcessServedInArrivalOrder(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	held, err := rwOf(t, ga, tg).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lb := rwOf(t, gb, tg)
	writes := []bool{false, true, false, false, true, false}
	type event struct {
		i  int
		in bool // entered, else left
	}
	events := make(chan event, 2*len(writes))
	release := make([]chan struct{}, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		release[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := lockSide(ctx, lb, w)
			if err != nil {
				t.Error(err)
				return
			}
			events <- event{i, true}
			<-release[i]
			events <- event{i, false}
			if err := o.Unlock(); err != nil {
				t.Error(err)
			}
		}()
		waitFor(t, func() bool { return gb.SharedWaiters(lb.Config().UniqueKey()) == i+1 })
	}
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	// Each batch — a reader, a writer, two readers, a writer, a reader — gets in whole, and
	// nobody else until it is let go.
	for _, batch := range [][]int{{0}, {1}, {2, 3}, {4}, {5}} {
		want := map[int]bool{}
		for _, i := range batch {
			want[i] = true
		}
		for range batch {
			e := recv(t, events, "the next batch in arrival order")
			if !e.in || !want[e.i] {
				t.Fatalf("waiter %d (entered %v) when the batch %v was due", e.i, e.in, batch)
			}
		}
		select {
		case e := <-events:
			t.Fatalf("waiter %d (entered %v) while the batch %v held", e.i, e.in, batch)
		case <-time.After(30 * time.Millisecond): // (only gives a defect the chance to show)
		}
		for _, i := range batch {
			close(release[i])
			if e := recv(t, events, "a waiter leaving"); e.in || e.i != i {
				t.Fatalf("waiter %d (entered %v) as %d left", e.i, e.in, i)
			}
		}
	}
	wg.Wait()
}

// A waiting process that dies while first in line (kill -9: its connections close) holds up
// nobody behind it: as the holder lets go, the next process is served, not once the dead one's
// line entry expired. Ports RedissonFairLockTest's testFirstThreadDeathTimeoutDrift and
// testAbandonedTimeoutDrift.
func TestDeadWaiterIsPassedOver(t *testing.T) {
	tg := uniqueTarget(t) // (the dead entry stays in the line, skipped, for its time to live)
	raw := rawClient(t)
	deadWaiterIsPassedOver(t, func(g *dlock.Generator) sharedLock {
		l, _ := g.Gen("DEADW", tg)
		t.Cleanup(func() { raw.Del(context.Background(), processor.LineKey(l.Config())) })
		return sharedLock{cfg: l.Config(), hold: l.Lock, dead: l.Lock, behind: l.Lock,
			line:    func(context.Context) []string { return stateOf(t, l).Waiting },
			channel: func(entry string) string { return processor.ProcessChannel(l.Config(), entry) }}
	})
}

// Waiters that give up in the middle of the line, and the first, leave it without changing the
// order of the others: the holder's release serves the first that still waits, the rest follow
// in their order of arrival, each right after the one before, and a waiter that gave up is
// never served. Ports RedissonFairLockTest's testAcquireFailedTimeoutDrift_Descrete,
// testWaitTimeoutDrift, testLockAcquiredTimeoutDrift, testLockAcquiredTimeoutDrift_Descrete
// and testLockAcquiredBooleanTimeoutDrift_Descrete (Redisson's queue timeouts; here the line's
// order and who it serves).
func TestWaitersThatGiveUpKeepTheLineInOrder(t *testing.T) {
	g0, _ := newGen(t)
	l0, _ := g0.GenWithLease("GIVEUP", target(t), 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	o := mustLock(t, l0, ctx)
	const n = 5
	quits := map[int]bool{0: true, 2: true} // the first and one in the middle give up
	served := make(chan int, n)
	cancels := make([]context.CancelFunc, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		g, _ := newGen(t)
		l, _ := g.GenWithLease("GIVEUP", target(t), 5*time.Second)
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.Do(wctx, func(context.Context) error {
				served <- i
				return nil
			})
			if quits[i] {
				if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
					t.Errorf("waiter %d that gave up: %v, want ErrNotObtained and Canceled", i, err)
				}
			} else if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
		}()
		waitFor(t, func() bool { return len(stateOf(t, l0).Waiting) == i+1 })
	}
	for i := range quits {
		cancels[i]()
	}
	waitFor(t, func() bool { return len(stateOf(t, l0).Waiting) == n-len(quits) })
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, c := range cancels {
		c()
	}
	close(served)
	var order []int
	for i := range served {
		order = append(order, i)
	}
	if fmt.Sprint(order) != "[1 3 4]" {
		t.Fatalf("served %v, want [1 3 4]: those that stayed, in their order", order)
	}
}

// farGen returns a generator whose client reaches Redis through a fault proxy (closed when t
// ends), with lease as its default lease.
func farGen(t testing.TB, lease time.Duration, opts ...dlock.Option) (*dlock.Generator, *faultproxy.Proxy) {
	t.Helper()
	g, _, p := proxiedGen(t, func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	}, append([]dlock.Option{dlock.WithDefaultLease(lease)}, opts...)...)
	return g, p
}

// beliefWatch checks, from a client near Redis, that what a generator believes of a key while
// a goroutine of it owns the lock (its locker, and until when it counts the key held) never
// outlasts what Redis keeps: the key holds that locker, and expires no earlier.
type beliefWatch struct {
	checks, violations atomic.Int64
	minMargin          atomic.Int64 // the least of Redis's expiry less the believed end seen, ns
	mu                 sync.Mutex
	first              string // the first violation
}

func (w *beliefWatch) violate(format string, args ...any) {
	w.violations.Add(1)
	w.mu.Lock()
	if w.first == "" {
		w.first = fmt.Sprintf(format, args...)
	}
	w.mu.Unlock()
}

// run samples g's belief of key every millisecond or two until stop is closed.
func (w *beliefWatch) run(g *dlock.Generator, admin *redis.Client, key string, stop <-chan struct{}) {
	w.minMargin.CompareAndSwap(0, int64(time.Hour))
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
		l0, u0, ok := g.Belief(key)
		if !ok {
			continue
		}
		var get *redis.StringCmd
		var pttl *redis.DurationCmd
		_, _ = admin.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			get, pttl = p.Get(context.Background(), key), p.PTTL(context.Background(), key)
			return nil
		})
		r1 := time.Now()
		l2, _, ok := g.Belief(key)
		if !ok || l2 != l0 || !u0.After(r1) {
			continue // (it ended, or its lease ran out and the watchdog is about to fire)
		}
		// It believed the key its own, until u0, all through Redis's reading, which ran before r1.
		w.checks.Add(1)
		if v := get.Val(); v != l0 {
			w.violate("believed held by %s until %v from now, but the key holds %q", l0, time.Until(u0), v)
			continue
		}
		expiry := r1.Add(pttl.Val() + time.Millisecond) // (PTTL is floored to the millisecond)
		if m := int64(expiry.Sub(u0)); m < w.minMargin.Load() {
			w.minMargin.Store(m)
		}
		if u0.After(expiry) {
			w.violate("believed held until %v after Redis expires the key (PTTL %v)", u0.Sub(expiry), pttl.Val())
		}
	}
}

// farScenario is a run of one far process (two goroutines) against one near one (two
// goroutines) on one key, with the network of the far one shaped by shape as it goes.
type farScenario struct {
	lease      time.Duration
	dur        time.Duration
	goroutines int                                             // in each process (2 if 0)
	longEvery  int                                             // every longEvery-th hold of a goroutine lasts 3/4 of the lease (7 if 0, none if < 0)
	shape      func(p *faultproxy.Proxy, stop <-chan struct{}) // changes the far process's network while the run lasts
}

func (sc farScenario) run(t *testing.T) {
	far, p := farGen(t, sc.lease)
	near, admin := newGen(t, dlock.WithDefaultLease(sc.lease))
	tg := target(t)
	lf, _ := far.Gen("FAR", tg)
	ln, _ := near.Gen("FAR", tg)
	key := lf.Config().UniqueKey()
	fence := "{" + key + "}:fenced"
	stop := make(chan struct{})
	var bg sync.WaitGroup
	var watches [2]beliefWatch
	for i, g := range []*dlock.Generator{far, near} {
		bg.Add(1)
		go func() { defer bg.Done(); watches[i].run(g, admin, key, stop) }()
	}
	if sc.shape != nil {
		bg.Add(1)
		go func() { defer bg.Done(); sc.shape(p, stop) }()
	}
	var (
		acq          [2]atomic.Int64
		inside       atomic.Int32
		overlaps     atomic.Int64
		stale        atomic.Int64
		shortReturns atomic.Int64
		minLeft      [2]atomic.Int64
		maxWait      [2]atomic.Int64
		errs         atomic.Int64
	)
	minLeft[0].Store(int64(time.Hour))
	minLeft[1].Store(int64(time.Hour))
	var wg sync.WaitGroup
	end := time.Now().Add(sc.dur)
	for i, l := range []*dlock.DistributedReentrantLock{lf, ln} {
		g := []*dlock.Generator{far, near}[i]
		for j := 0; j < cmp.Or(sc.goroutines, 2); j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 1; time.Now().Before(end); k++ {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					start := time.Now()
					o, err := l.Lock(ctx)
					ret := time.Now()
					cancel()
					if err != nil {
						errs.Add(1)
						t.Errorf("process %d: Lock: %v", i, err)
						return
					}
					if w := int64(ret.Sub(start)); w > maxWait[i].Load() {
						maxWait[i].Store(w)
					}
					if _, u, ok := g.Belief(key); ok {
						// u can only have grown since Lock returned
						left := u.Sub(ret)
						if int64(left) < minLeft[i].Load() {
							minLeft[i].Store(int64(left))
						}
						if left < sc.lease/2-sc.lease/20 {
							shortReturns.Add(1)
							t.Errorf("process %d: Lock returned with %v of a %v lease left", i, left, sc.lease)
						}
					}
					acq[i].Add(1)
					if inside.Add(1) > 1 {
						overlaps.Add(1)
					}
					tok, _ := l.FencingToken(o)
					if n, err := fencedScript.Run(context.Background(), admin, []string{fence}, tok).Int(); err == nil && n != 1 {
						stale.Add(1)
					}
					hold := time.Duration(rand.IntN(3000)) * time.Microsecond
					if every := cmp.Or(sc.longEvery, 7); every > 0 && k%every == 0 {
						hold = sc.lease * 3 / 4 // renewals run
					}
					select {
					case <-time.After(hold):
					case <-o.Done():
					}
					inside.Add(-1)
					// (a release whose reply comes after the lease ran out — latency that rose
					// after the last renewal — is unconfirmed, as documented: a *RedisProcessError)
					var late *dlock.RedisProcessError
					if err := o.Unlock(); err != nil && !errors.Is(err, dlock.ErrLockLost) &&
						!(errors.As(err, &late) && errors.Is(err, context.DeadlineExceeded)) {
						t.Errorf("process %d: Unlock: %v", i, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	t.Logf("grant messages delayed so far: %d", grantsDelayed.Load())
	for i := range watches {
		w := &watches[i]
		t.Logf("process %d (%s): %d acquisitions, longest wait %v, least lease left at return %v; belief checks %d, least margin %v, violations %d %s",
			i, []string{"far", "near"}[i], acq[i].Load(), time.Duration(maxWait[i].Load()).Round(time.Millisecond),
			time.Duration(minLeft[i].Load()).Round(time.Millisecond), w.checks.Load(),
			time.Duration(w.minMargin.Load()).Round(time.Millisecond), w.violations.Load(), w.first)
		if w.violations.Load() != 0 {
			t.Errorf("process %d believed the key its own beyond what Redis keeps: %d times; first: %s", i, w.violations.Load(), w.first)
		}
	}
	if overlaps.Load() != 0 || stale.Load() != 0 {
		t.Errorf("two owners: %d overlaps, %d stale fenced writes", overlaps.Load(), stale.Load())
	}
	if acq[0].Load() == 0 {
		t.Errorf("the far process never got the lock in %v", sc.dur)
	}
	waitFor(t, func() bool { return admin.Exists(context.Background(), key).Val() == 0 })
}

// fencedScript accepts a token (ARGV[1]) only above the last it accepted at KEYS[1] (or equal
// to it, with ARGV[2] = 1).
var fencedScript = redis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(ARGV[1])
if tok < last or (tok == last and ARGV[2] ~= '1') then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
return 1`)

// grantsDelayed counts the grant messages grantDelay delayed.
var grantsDelayed atomic.Int64

// grantDelay delays, by d(), every chunk back to a client that carries a grant's message.
func grantDelay(d func() time.Duration) func(toTarget bool, chunk []byte) time.Duration {
	return func(toTarget bool, chunk []byte) time.Duration {
		if !toTarget && bytes.Contains(chunk, []byte("G|at=")) {
			grantsDelayed.Add(1)
			return d()
		}
		return 0
	}
}

// A process far from Redis — slow requests and quick replies, the reverse, latency that comes
// and goes as it waits, and grant messages that come late — never believes the key its own
// beyond what Redis keeps (read from a client near Redis while a goroutine of it owns the
// lock), Lock never returns with less than half the lease, fencing tokens strictly increase,
// and the far process is served.
func TestFarProcessBeliefWithinRedis(t *testing.T) {
	fixed := func(up, down time.Duration) func(*faultproxy.Proxy, <-chan struct{}) {
		return func(p *faultproxy.Proxy, _ <-chan struct{}) { p.SetLatencies(up, down) }
	}
	for _, tc := range []struct {
		name string
		sc   farScenario
	}{
		{"SlowRequests", farScenario{lease: 600 * time.Millisecond, shape: fixed(120*time.Millisecond, 2*time.Millisecond)}},
		{"SlowReplies", farScenario{lease: 600 * time.Millisecond, shape: fixed(2*time.Millisecond, 120*time.Millisecond)}},
		{"ChangingLatency", farScenario{lease: time.Second, shape: func(p *faultproxy.Proxy, stop <-chan struct{}) {
			ms := []time.Duration{0, 20 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond}
			for {
				p.SetLatencies(ms[rand.IntN(len(ms))], ms[rand.IntN(len(ms))])
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(100+rand.IntN(500)) * time.Millisecond):
				}
			}
		}}},
		{"LateGrants", farScenario{lease: 600 * time.Millisecond, goroutines: 1, longEvery: -1, shape: func(p *faultproxy.Proxy, _ <-chan struct{}) {
			p.SetLatencies(20*time.Millisecond, 20*time.Millisecond)
			p.SetShaper(grantDelay(func() time.Duration { return time.Duration(100+rand.IntN(400)) * time.Millisecond }))
		}}},
		{"ShortLeaseLateGrants", farScenario{lease: 300 * time.Millisecond, goroutines: 1, longEvery: -1, shape: func(p *faultproxy.Proxy, _ <-chan struct{}) {
			p.SetLatencies(50*time.Millisecond, 5*time.Millisecond)
			p.SetShaper(grantDelay(func() time.Duration { return time.Duration(50+rand.IntN(250)) * time.Millisecond }))
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.sc.dur = 3 * time.Second
			tc.sc.run(t)
		})
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

// A waiting process that Redis does not count as listening, though its subscription is
// confirmed and hears what is published (plain pub/sub on a Cluster after a failover: PUBSUB
// NUMSUB on the key's new master counts none of it), says in its first ask that it counts
// itself heard; the answer says Redis does not hear it, and its next ask says otherwise, so
// its entry counts as renewed as it asks: the line serves it while two other processes take
// the key in turn, each holding it longer than a third of the lease (what an entry of a
// process that does not listen counts for), not passes it over for good.
func TestLineServesAProcessRedisDoesNotCount(t *testing.T) {
	const lease = 2 * time.Second // (it asks a sixth of it after an answer that it is not heard)
	gx, cx := newGen(t)
	gy, _ := newGen(t)
	gz, _ := newGen(t)
	lx, ly, lz := mustGen(t, gx, "UNCOUNTED", target(t), lease), mustGen(t, gy, "UNCOUNTED", target(t), lease), mustGen(t, gz, "UNCOUNTED", target(t), lease)
	servedUncounted(t, cx, lease, "lock", "listening", processor.ReleaseChannel(lx.Config()),
		func(ctx context.Context) (func(), error) {
			o, err := lx.Lock(ctx)
			return func() { _ = o.Unlock() }, err
		},
		func(ctx context.Context) (func(), error) {
			o, err := ly.Lock(ctx)
			return func() { _ = o.Unlock() }, err
		},
		func(ctx context.Context) (func(), error) {
			o, err := lz.Lock(ctx)
			return func() { _ = o.Unlock() }, err
		})
}

// servedUncounted has X, whose requests of script that stand it in line (they carry a claim of
// its, the argument named claim) go through cx and name channel (the prefix of the processes'
// channels) as another, so that Redis counts none of X's subscription, acquire once (x) while two other processes
// (others) take turns, each holding for half the lease. It fails unless X acquires within
// 20 s, and its requests said it listens (once its subscription was confirmed), then not
// (once told Redis does not hear it). Each acquisition returns its release.
func servedUncounted(t *testing.T, cx *redis.Client, lease time.Duration, script, claim, channel string, x func(context.Context) (func(), error), others ...func(context.Context) (func(), error)) {
	t.Helper()
	var mu sync.Mutex
	var claims []string // what X's requests said
	cx.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		args := cmd.Args()
		if processor.ScriptName(args) == script && (script != "shared" || sharedArg(args, "wait") == "1") {
			said := sharedArg(args, claim) // (a take that stands in line, or an ask)
			if script != "shared" {
				said = sentCmd{args: args}.arg(t, claim)
			}
			mu.Lock()
			claims = append(claims, said)
			mu.Unlock()
			for i, a := range args {
				if a == any(channel) { // (Redis counts the subscribers of other channels)
					args[i] = channel + "-elsewhere-"
				}
			}
		}
		return next(ctx, cmd)
	}})
	ctx := ctxT(t, time.Minute)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var turns atomic.Int64
	for _, take := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				release, err := take(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				turns.Add(1)
				time.Sleep(lease / 2)
				release()
			}
		}()
	}
	waitFor(t, func() bool { return turns.Load() > 0 })
	xctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	release, err := x(xctx)
	if err == nil {
		release()
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		t.Fatalf("X, which Redis does not count as listening, got no turn while the others took %d: %v (its requests said %q)", turns.Load(), err, claims)
	}
	if i := slices.Index(claims, "1"); i < 0 || !slices.Contains(claims[i:], "") {
		t.Fatalf("X's requests said %q: want one that said it counts itself heard (its subscription confirmed), then one that said otherwise (told it is not heard)", claims)
	}
	t.Logf("X acquired after %d turns of the others; its requests said %q", turns.Load(), claims)
}

// waitPastTheLimit starts a second goroutine of A (ga's la, whose first goroutine holds the
// lock) and one of B (gb's lb), each taking the lock once, holding it for hold and letting it
// go, and returns once B stands in line and A's hand-off limit (1 ms) has passed: their
// errors come on the channels returned, A's first (a lock lost while held counts as one).
func waitPastTheLimit(t *testing.T, ctx context.Context, ga, gb *dlock.Generator, la, lb *dlock.DistributedReentrantLock, hold time.Duration) (a2, b chan error) {
	t.Helper()
	lockUnlock := func(l *dlock.DistributedReentrantLock, errs chan<- error) {
		o, err := l.Lock(ctx)
		if err == nil {
			time.Sleep(hold)
			if err = o.Unlock(); err == nil && errors.Is(context.Cause(o), dlock.ErrLockLost) {
				err = context.Cause(o)
			}
		}
		errs <- err
	}
	a2, b = make(chan error, 1), make(chan error, 1)
	go lockUnlock(la, a2)
	go lockUnlock(lb, b)
	waitFor(t, func() bool { return ga.Waiters(key(la)) && gb.Waiters(key(lb)) })
	waitFor(t, func() bool { s, _ := la.State(ctx); return len(s.Waiting) > 0 }) // B is in line
	time.Sleep(20 * time.Millisecond)                                            // past the hand-off limit
	return a2, b
}

// A process with WithHoldOver whose goroutine locks again at once keeps the key for it: its
// final Unlock lets nothing go in Redis while the goroutine comes back within the linger, so
// the goroutine takes the lock again at once, though another process waits in line — until
// the hand-off limit (here an hour) or until it does not come back: then, at the linger's end,
// the key goes to the process in line.
func TestHoldOverKeepsTheKeyForTheGoroutineThatComesBack(t *testing.T) {
	la, lb, _, _, a := relockPair(t, time.Second, dlock.WithHoldOver(true), dlock.WithLocalHandOff(time.Hour))
	ctx := ctxT(t, 30*time.Second)
	bOwner := lockAsync(t, lb, ctx)
	inLine(t, ctx, la, 1)
	last, _ := la.FencingToken(a)
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second) // (were the key granted to b, who holds on, this would wait)
		o, err := la.Lock(actx)
		cancel()
		if err != nil {
			t.Fatalf("lock %d of the goroutine that came back: %v; want it at once (the key kept for it)", i+2, err)
		}
		select {
		case <-bOwner:
			t.Fatalf("b took the key as a's goroutine came back for it (lock %d)", i+2)
		default:
		}
		tok, _ := la.FencingToken(o)
		if tok <= last {
			t.Fatalf("token %d after %d: want it larger", tok, last)
		}
		last = tok
		if err := o.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	b := recv(t, bOwner, "b's Lock, once a's goroutine no longer came back")
	if tok, _ := lb.FencingToken(b); tok <= last {
		t.Fatalf("b's token %d after a's %d: want it larger", tok, last)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// WithHoldOver beside WithFIFO: no goroutine of the process queues when the one that comes back
// locks again, so it takes the key kept for it as without WithFIFO, while the other process
// waits in line; at the linger's end the key goes to that process.
func TestHoldOverWithFIFO(t *testing.T) {
	la, lb, _, _, a := relockPair(t, time.Second, dlock.WithHoldOver(true), dlock.WithFIFO(), dlock.WithLocalHandOff(time.Hour))
	ctx := ctxT(t, 30*time.Second)
	bOwner := lockAsync(t, lb, ctx)
	inLine(t, ctx, la, 1)
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second) // (were the key granted to b, who holds on, this would wait)
	o, err := la.Lock(actx)
	cancel()
	if err != nil {
		t.Fatalf("the goroutine that came back: %v; want the key kept for it", err)
	}
	select {
	case <-bOwner:
		t.Fatal("b took the key as a's goroutine came back for it")
	default:
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, bOwner, "b's Lock, once a's goroutine no longer came back").Unlock(); err != nil {
		t.Fatal(err)
	}
}

// A process with WithHoldOver whose goroutine never stops locking again still lets the key go
// to the process in line at the hand-off limit, and the two never hold it at once.
func TestHoldOverYieldsToTheLineAtTheHandOffLimit(t *testing.T) {
	la, lb, _, _, a := relockPair(t, time.Second, dlock.WithHoldOver(true), dlock.WithLocalHandOff(20*time.Millisecond))
	ctx := ctxT(t, 30*time.Second)
	var inside atomic.Int32
	bOwner := lockAsync(t, lb, ctx)
	inLine(t, ctx, la, 1)
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			o, err := la.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if inside.Add(1) != 1 {
				t.Error("two owners: a holds the lock while b does")
			}
			n++
			inside.Add(-1)
			if err := o.Unlock(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	b := recv(t, bOwner, "b's Lock while a's goroutine keeps coming back")
	if inside.Add(1) != 1 {
		t.Error("two owners: b holds the lock while a does")
	}
	time.Sleep(5 * time.Millisecond) // (a's goroutine waits meanwhile)
	inside.Add(-1)
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	if n := <-done; n == 0 {
		t.Fatal("a's goroutine never took the lock again")
	}
}

// An Unlock past the hand-off limit (WithHoldOver) keeps nothing: its release grants the key to
// the process in line at once, not at the end of a linger (here a minute) nobody comes back for.
func TestHoldOverPastTheHandOffLimitLetsTheKeyGoAtUnlock(t *testing.T) {
	la, lb, ga, _, a := relockPair(t, time.Minute, dlock.WithHoldOver(true), dlock.WithLocalHandOff(30*time.Millisecond))
	ctx := ctxT(t, 30*time.Second)
	bOwner := lockAsync(t, lb, ctx)
	inLine(t, ctx, la, 1)
	time.Sleep(40 * time.Millisecond) // (past a's tenure's hand-off limit)
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-bOwner:
		if err := b.Unlock(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("b waited on after a's Unlock past the hand-off limit (a kept the key: %v)", ga.Lingering(key(la)))
	}
}

// The key a process with WithHoldOver keeps after its final Unlock is let go when no goroutine
// comes back within the linger (and the process keeps none for a while after), and at once
// when the Generator closes.
func TestHoldOverLetsTheKeyGoWhenNobodyComesBack(t *testing.T) {
	for _, how := range []string{"the linger ends", "Close"} {
		t.Run(how, func(t *testing.T) {
			linger := 300 * time.Millisecond
			if how == "Close" {
				linger = time.Minute
			}
			la, lb, ga, _, a := relockPair(t, linger, dlock.WithHoldOver(true), dlock.WithLocalHandOff(time.Hour))
			ctx := ctxT(t, 30*time.Second)
			admin := rawClient(t)
			if err := a.Unlock(); err != nil {
				t.Fatal(err)
			}
			if admin.Get(ctx, key(la)).Val() == "" || !ga.Lingering(key(la)) {
				t.Fatal("the final Unlock let the key go; want it kept for a goroutine that comes back")
			}
			if how == "Close" {
				if err := ga.Close(ctx); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if v := admin.Get(ctx, key(la)).Val(); v != "" {
					t.Fatalf("after Close the key holds %q; want it let go", v)
				}
				return
			}
			waitFor(t, func() bool { return admin.Get(ctx, key(la)).Val() == "" })
			// Nobody came: the next Unlock, within holdOverPause, keeps nothing (its process
			// watching its channel again: it waited in line).
			o := takeAfterWaiting(t, ctx, la, lb)
			if err := o.Unlock(); err != nil {
				t.Fatal(err)
			}
			if v := admin.Get(ctx, key(la)).Val(); v != "" {
				t.Fatalf("the Unlock after a hold-over nobody came for left the key holding %q; want it let go", v)
			}
		})
	}
}

// An Unlock that keeps the key (WithHoldOver) asks Redis nothing, so it cannot find that the
// key was removed behind its back before it: the release that lets the kept key go finds it,
// or the renewal of a goroutine that comes back for it, and that is the loss of the holding
// the Unlock let go, as a retried release's is: logged at Warn and told to the Observer after
// the holding's ReleaseEvent — whether the linger's end, Close or a goroutine's renewal (one
// of another lease) finds it, or the give-back of the kept tenure after a goroutine that came
// back past the hand-off limit got no answer to its yield check (given back as that holding's
// release is retried).
func TestHoldOverTellsTheLossItsReleaseFinds(t *testing.T) {
	for _, how := range []string{"the linger ends", "Close", "a goroutine renews", "a yield check gets no answer"} {
		t.Run(how, func(t *testing.T) {
			// (The Unlock below keeps the key only within the hand-off limit of the take: a
			// limit of an hour, or of a second where the test goes past it, leaves room for a
			// busy machine between the two.)
			linger, limit := 100*time.Millisecond, time.Hour
			if how != "the linger ends" {
				linger = time.Minute
			}
			if how == "a yield check gets no answer" {
				limit = time.Second
			}
			opts := []dlock.Option{dlock.WithHoldOver(true), dlock.WithLocalHandOff(limit)}
			rec := &recorder{}
			core, logs := observer.New(zap.WarnLevel)
			var mute atomic.Bool
			ga, cla := newGen(t, append(opts, dlock.WithObserver(rec), dlock.WithLogger(zap.New(core)))...)
			gb, _ := newGen(t)
			cla.AddHook(unanswered("renew", &mute))
			ga.Relock(linger)
			la := mustGen(t, ga, "RELOCK", target(t), 5*time.Second)
			lb := mustGen(t, gb, "RELOCK", target(t), 5*time.Second)
			ctx := ctxT(t, 30*time.Second)
			a := takeAfterWaiting(t, ctx, la, lb)
			tok, _ := la.FencingToken(a)
			rawClient(t).Del(ctx, key(la)) // (no message: nothing tells the process)
			if err := a.Unlock(); err != nil {
				t.Fatalf("Unlock = %v; want nil (the key kept, nothing asked)", err)
			}
			if !ga.Lingering(key(la)) {
				t.Fatal("setup: the Unlock kept nothing")
			}
			warning := "dlock: lock lost before release"
			switch how {
			case "the linger ends":
				waitFor(t, func() bool { return logs.FilterMessage(warning).Len() > 0 })
			case "a goroutine renews":
				warning = "dlock: lock lost"
				o := mustLock(t, mustGen(t, ga, "RELOCK", target(t), 3*time.Second), ctx) // (its lease: it renews first, then asks anew)
				if err := o.Unlock(); err != nil {
					t.Fatal(err)
				}
			case "a yield check gets no answer":
				time.Sleep(limit + 100*time.Millisecond) // past the hand-off limit: the goroutine that comes back renews with a yield check
				mute.Store(true)
				lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				_, err := la.Lock(lctx)
				cancel()
				if err == nil || mute.Load() {
					t.Fatalf("setup: Lock = %v, renewal sent %v; want the yield check sent and unanswered", err, !mute.Load())
				}
			}
			if err := ga.Close(ctx); err != nil { // (it waits for the release's background work)
				t.Fatalf("Close = %v", err)
			}
			if n := logs.FilterMessage(warning).Len(); n != 1 {
				t.Fatalf("%d warnings %q; want 1", n, warning)
			}
			rec.mu.Lock()
			lost, released := slices.Clone(rec.lost), slices.Clone(rec.released)
			rec.mu.Unlock()
			if len(lost) != 1 || lost[0].Token != tok || !errors.Is(lost[0].Cause, dlock.ErrLockLost) {
				t.Fatalf("the Observer was told of losses %+v; want one, of the holding the Unlock let go (token %d)", lost, tok)
			}
			if i := slices.IndexFunc(released, func(e dlock.ReleaseEvent) bool { return e.Token == tok }); i < 0 || released[i].Err != nil {
				t.Fatalf("ReleaseEvents %+v; want the holding's, without error (its Unlock returned nil)", released)
			}
		})
	}
}

// relockPair gives two processes on one key, a with a counter of its scripts; a holds the
// key and relocks: its final Unlock stands in line again when it grants the key, and lingers
// up to linger for a goroutine to come.
func relockPair(t *testing.T, linger time.Duration, opts ...dlock.Option) (la, lb *dlock.DistributedReentrantLock, ga *dlock.Generator, ca *counter, a *dlock.Owner) {
	t.Helper()
	ca = &counter{}
	ga, cla := newGen(t, opts...)
	gb, _ := newGen(t)
	cla.AddHook(ca)
	ga.Relock(linger)
	la = mustGen(t, ga, "RELOCK", target(t), 5*time.Second)
	lb = mustGen(t, gb, "RELOCK", target(t), 5*time.Second)
	return la, lb, ga, ca, takeAfterWaiting(t, ctxT(t, 30*time.Second), la, lb)
}

// takeAfterWaiting has a's process take the key after it waited for it behind b's (so that
// it watches its channel, as a relock needs), and returns a's Owner.
func takeAfterWaiting(t *testing.T, ctx context.Context, la, lb *dlock.DistributedReentrantLock) *dlock.Owner {
	t.Helper()
	b := mustLock(t, lb, ctx)
	aOwner := lockAsync(t, la, ctx)
	inLine(t, ctx, la, 1)
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	return recv(t, aOwner, "a's Lock")
}

// relockTo has b's process wait for the key, then a let it go: the key is granted to b, and
// a's process stands in line again. It returns b's Owner.
func relockTo(t *testing.T, ctx context.Context, la, lb *dlock.DistributedReentrantLock, a *dlock.Owner) *dlock.Owner {
	t.Helper()
	bOwner := lockAsync(t, lb, ctx)
	inLine(t, ctx, la, 1)
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	return recv(t, bOwner, "b's Lock")
}

// A process whose goroutines passed the lock among themselves stands in line again for a
// block of fencing tokens: when several of them come back for the grant, the tenure passes
// the lock among them without renewing the key for tokens. (A process whose goroutine takes
// single turns stands in line for one token: nothing to give back at its next release.)
func TestRelockForSeveralGoroutinesBringsABlockOfTokens(t *testing.T) {
	la, lb, ga, ca, a := relockPair(t, 10*time.Second, dlock.WithLocalHandOff(time.Hour))
	ctx := ctxT(t, 30*time.Second)
	passed := lockAsync(t, la, ctx) // a second goroutine of a's process: a passes the lock to it
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	b := relockTo(t, ctx, la, lb, recv(t, passed, "the pass"))
	renewals := ca.script("renew")
	got := []<-chan *dlock.Owner{lockAsync(t, la, ctx), lockAsync(t, la, ctx)} // two come back
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	for range got {
		var o *dlock.Owner
		select { // (whichever took the grant; the other waits for the pass)
		case o = <-got[0]:
			got[0] = nil
		case o = <-got[1]:
			got[1] = nil
		case <-ctx.Done():
			t.Fatal("a's goroutines did not get the lock")
		}
		if o == nil {
			t.FailNow() // (Lock failed; lockAsync reported it)
		}
		if err := o.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	if n := ca.script("renew") - renewals; n != 0 {
		t.Fatalf("a renewed the key %d times to pass the lock between its two goroutines; want 0 (%v)", n, ca)
	}
}

// inLine waits until n processes stand in l's line.
func inLine(t *testing.T, ctx context.Context, l *dlock.DistributedReentrantLock, n int) {
	t.Helper()
	waitFor(t, func() bool { st, _ := l.State(ctx); return len(st.Waiting) == n })
}

// A process whose goroutines lock again at once stands in line again in the release that
// grants the key to the next process: its next Lock waits for the grant without a request of
// its own, and gets the key after the other process.
func TestRelockWaitsForItsGrantWithoutARequest(t *testing.T) {
	la, lb, ga, ca, a := relockPair(t, 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	b := relockTo(t, ctx, la, lb, a)
	if st, err := la.State(ctx); err != nil || st.Mine || len(st.Waiting) != 1 || !ga.Lingering(key(la)) {
		t.Fatalf("after a's release: %+v, %v, lingering %v; want the key granted to b and a in line, lingering", st, err, ga.Lingering(key(la)))
	}
	asked := ca.script("lock")
	got := lockOnce(ctx, la)
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, got, "a's second Lock"); err != nil {
		t.Fatal(err)
	}
	if n := ca.script("lock") - asked; n != 0 {
		t.Fatalf("a's second Lock sent %d lock.lua; want none (its release put it in line)", n)
	}
	waitFor(t, func() bool { st, _ := la.State(ctx); return st.Holder == "" && len(st.Waiting) == 0 })
}

// A process that stood in line in its release, and whose goroutines do not come back, leaves
// the line when its linger ends: the next release leaves the key free.
func TestRelockNobodyComesLeavesTheLine(t *testing.T) {
	la, lb, ga, _, a := relockPair(t, 50*time.Millisecond)
	ctx := ctxT(t, 30*time.Second)
	bGot := lockOnce(ctx, lb)
	inLine(t, ctx, la, 1)
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { st, _ := la.State(ctx); return len(st.Waiting) == 0 && ga.InUse() == 0 })
	if err := recv(t, bGot, "b's Lock"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { st, _ := lb.State(ctx); return st.Holder == "" })
}

// A grant to a process that stood in line in its release, and in which no goroutine came, is
// passed on at once to the next in line, not held for a lease.
func TestRelockGrantNobodyWantsIsPassedOn(t *testing.T) {
	la, lb, ga, _, a := relockPair(t, 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	b := relockTo(t, ctx, la, lb, a)
	gc, _ := newGen(t)
	lc := mustGen(t, gc, "RELOCK", target(t), 5*time.Second)
	cGot := lockOnce(ctx, lc)
	inLine(t, ctx, la, 2) // a (lingering), then c
	if !ga.Lingering(key(la)) {
		t.Fatal("a does not linger in line")
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, cGot, "c's Lock"); err != nil {
		t.Fatal(err)
	}
	if ga.Lingering(key(la)) {
		t.Fatal("a still lingers in line after it passed its grant on")
	}
	waitFor(t, func() bool { return ga.InUse() == 0 })
}

// Close ends a linger: the process leaves the line, and the next release leaves the key free.
func TestRelockCloseLeavesTheLine(t *testing.T) {
	la, lb, ga, _, a := relockPair(t, 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	b := relockTo(t, ctx, la, lb, a)
	if !ga.Lingering(key(la)) {
		t.Fatal("a does not linger in line")
	}
	closed := make(chan error, 1)
	go func() { closed <- ga.Close(ctx) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second): // (the linger lasts 10 s)
		t.Fatal("Close waits for the linger to end")
	}
	if st, err := lb.State(ctx); err != nil || len(st.Waiting) != 0 {
		t.Fatalf("after a's Close: %+v, %v; want nobody in line", st, err)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	if st, err := lb.State(ctx); err != nil || st.Holder != "" {
		t.Fatalf("after b let go: %+v, %v; want the key free", st, err)
	}
}

// heldReply returns a hook under which, once armed, the next release.lua runs in Redis and its
// reply is held back until gate is closed; ran is closed as soon as the script has run.
func heldReply(armed *atomic.Bool, ran, gate chan struct{}) fnHook {
	return fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) != "release" || !armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		close(ran)
		<-gate
		return err
	}}
}

// wipeKey removes every Redis key of l's lock (as a restart that lost the data does).
func wipeKey(t *testing.T, c *redis.Client, l *dlock.DistributedReentrantLock) {
	t.Helper()
	ctx := context.Background()
	k := key(l)
	ks, err := c.Keys(ctx, "{"+k+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, append(ks, k)...).Err(); err != nil {
		t.Fatal(err)
	}
}

// A release that stands in line again makes the process's goroutines wait for the grant
// without asking; but news that came while the release was on its way (here: Redis lost the
// key and the line, and the process's channel was subscribed again, which tells it to ask)
// must not be swallowed by that rule: the waiter asks, and takes the free key at once, not
// half a lease later at its poller's pace.
func TestRelockNewsDuringTheReleaseIsNotSwallowed(t *testing.T) {
	const lease = 60 * time.Second // (a quiet waiter first in line asks again half a lease after the release)
	raw := rawClient(t)
	ga, cla := newGen(t)
	gb, _ := newGen(t)
	var armed atomic.Bool
	ran, gate := make(chan struct{}), make(chan struct{})
	cla.AddHook(heldReply(&armed, ran, gate))
	ga.Relock(10 * time.Second)
	la := mustGen(t, ga, "RELOCK", target(t), lease)
	lb := mustGen(t, gb, "RELOCK", target(t), lease)
	ctx := ctxT(t, 60*time.Second)

	a := takeAfterWaiting(t, ctx, la, lb)
	bOwner := lockAsync(t, lb, ctx)
	inLine(t, ctx, la, 1)

	armed.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- a.Unlock() }()
	recv(t, ran, "a's release") // granted to b; a stands in line again, heard
	b := recv(t, bOwner, "b's Lock")
	defer runtime.KeepAlive(b) // (a dropped Owner is released: b holds the key until Redis loses it)
	got := lockOnce(ctx, la)   // a goroutine of a comes back while the release's reply is on its way
	waitFor(t, func() bool { return ga.Waiters(key(la)) })

	wipeKey(t, raw, la) // Redis restarts empty: the key and the line are gone ...
	confirmed := ga.Confirmed()
	killPubSub(t, raw) // ... and the subscriptions dropped: a subscribes again, and is told to ask
	waitFor(t, func() bool { return ga.Confirmed() > confirmed })

	close(gate)
	if err := recv(t, unlocked, "a's Unlock"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // (the key is free: a asks and takes it within milliseconds)
		t.Fatal("a's goroutine still waits for a grant that cannot come: the signal of its new subscription was swallowed")
	}
}

// A release that stands in line again does so with the lease of the handle that let go, not
// one an Extend set for that holding: the goroutine that comes back is granted the key for
// its own lease, and a process that dies holding it does not keep the key for the extended
// one (a grant is an acquisition from Redis: the key lives at most its lease).
func TestRelockStandsInLineWithTheHandlesLease(t *testing.T) {
	const lease, extended = 5 * time.Second, 10 * time.Minute
	raw := rawClient(t)
	la, lb, ga, _, a := relockPair(t, 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	if la.Config().Lease() != lease {
		t.Fatalf("relockPair's lease is %v", la.Config().Lease())
	}
	if err := la.Extend(a, extended); err != nil {
		t.Fatal(err)
	}
	b := relockTo(t, ctx, la, lb, a)
	wOwner := lockAsync(t, la, ctx) // a goroutine of a comes back, with the handle's lease
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	w := recv(t, wOwner, "a's second Lock")
	defer la.Unlock(w) //nolint:errcheck
	checkPTTL(t, raw, key(la), lease, true, "a's grant after its release stood in line again")
}

// A process that stood in line in its release learns from that release when the key it
// granted expires: if the new holder dies, the waiter that came asks once that holder's lease
// has run out, not at its own slower pace (half its own lease, first in line).
func TestRelockWaiterAsksWhenTheGrantedKeyExpires(t *testing.T) {
	t.Parallel()
	const long, short = 60 * time.Second, 2 * time.Second
	ga, _ := newGen(t)
	gb, clb := newGen(t)
	ga.Relock(10 * time.Second)
	var dead atomic.Bool
	clb.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if dead.Load() && processor.ScriptName(cmd.Args()) != "" {
			return errors.New("b died")
		}
		return next(ctx, cmd)
	}})
	la := mustGen(t, ga, "RELOCK", target(t), long)
	lb := mustGen(t, gb, "RELOCK", target(t), short)
	ctx := ctxT(t, 60*time.Second)
	b := relockTo(t, ctx, la, lb, takeAfterWaiting(t, ctx, la, lb))
	defer runtime.KeepAlive(b) // (a dropped Owner is released: b holds the key until it dies)
	dead.Store(true)           // b dies holding the key: it neither renews nor lets go
	got := lockOnce(ctx, la)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second): // (b's key expires 2 s after its grant; a asks once it may have)
		t.Fatal("a's goroutine still waits: it did not learn when the key it granted expires")
	}
}

// A TryLock while the process stands in line after its release asks Redis (the key may have
// been granted to it already); it finds the key held by the other process.
func TestRelockTryLockAsks(t *testing.T) {
	la, lb, ga, ca, a := relockPair(t, 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	b := relockTo(t, ctx, la, lb, a)
	defer lb.Unlock(b) //nolint:errcheck
	if !ga.Lingering(key(la)) {
		t.Fatal("a does not linger in line")
	}
	asked := ca.script("lock")
	if o, ok, err := la.TryLock(ctx); err != nil || ok || o != nil {
		t.Fatalf("TryLock while b holds = %v, %v, %v; want not obtained", o, ok, err)
	}
	if n := ca.script("lock") - asked; n != 1 {
		t.Fatalf("the TryLock sent %d lock.lua; want 1", n)
	}
}

// A TryLock that finds the key held while its process lingers in line after a release keeps
// the process's place: it lingers again, and a Lock that follows gets the key after the
// holder, with no leave and no new place at the end of the line.
func TestRelockTryLockKeepsThePlaceInLine(t *testing.T) {
	la, lb, ga, ca, a := relockPair(t, 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	b := relockTo(t, ctx, la, lb, a)
	if o, ok, err := la.TryLock(ctx); err != nil || ok || o != nil {
		t.Fatalf("TryLock while b holds = %v, %v, %v; want not obtained", o, ok, err)
	}
	if !ga.Lingering(key(la)) {
		t.Fatal("after the TryLock a's process no longer lingers in line: it left its place")
	}
	gc, _ := newGen(t)
	lc := mustGen(t, gc, "RELOCK", target(t), 5*time.Second)
	cGot := lockOnce(ctx, lc)
	inLine(t, ctx, la, 2) // a (lingering), then c
	left := ca.script("leave")
	aGot := lockAsync(t, la, ctx)
	waitFor(t, func() bool { return ga.Waiters(key(la)) })
	if err := lb.Unlock(b); err != nil {
		t.Fatal(err)
	}
	o := recv(t, aGot, "a's Lock")
	select {
	case err := <-cGot:
		t.Fatalf("c got the key (%v) before a, which stood before it in line", err)
	default:
	}
	if n := ca.script("leave") - left; n != 0 {
		t.Fatalf("a's process sent %d leave.lua; want none (it kept its place)", n)
	}
	if err := la.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, cGot, "c's Lock"); err != nil {
		t.Fatal(err)
	}
}

// A TryLock that asks with the process's open attempt (its place in line after a relock
// release) and finds the key held leaves no retry poller running: nobody in the process waits.
func TestRelockTryLockLeavesNoPollerRunning(t *testing.T) {
	la, lb, ga, _, a := relockPair(t, 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	b := relockTo(t, ctx, la, lb, a)
	defer lb.Unlock(b) //nolint:errcheck
	if o, ok, err := la.TryLock(ctx); err != nil || ok || o != nil {
		t.Fatalf("TryLock while b holds = %v, %v, %v; want not obtained", o, ok, err)
	}
	if at, set := ga.PollDue(key(la))(); set {
		t.Fatalf("after the TryLock, with no goroutine waiting, the poller is set to ask in %v", time.Until(at).Round(time.Millisecond))
	}
}

// A relocking release whose reply is lost (it ran: the key went to the next process, and this
// one stood in line again) is retried in the background; while the retry's replies keep
// being lost, the process, in which no goroutine wants the key, leaves the line at once (the
// release's end settles the attempt it stood in line with), not once the retry is answered:
// else the key would be granted to its place when the next holder lets go, and nobody would
// pass it on until the retry gave up — a lease (30 s here) in which the process after it
// waits for a key nobody holds.
func TestRelockWhoseReleaseReplyIsLostLeavesTheLine(t *testing.T) {
	const lease = 30 * time.Second
	ga, cla := newGen(t)
	gb, _ := newGen(t)
	gc, _ := newGen(t)
	ga.Relock(10 * time.Second)
	la := mustGen(t, ga, "RELOCK", target(t), lease)
	lb := mustGen(t, gb, "RELOCK", target(t), 5*time.Second)
	lc := mustGen(t, gc, "RELOCK", target(t), 5*time.Second)
	ctx := ctxT(t, 60*time.Second)
	a := takeAfterWaiting(t, ctx, la, lb)
	bOwner := lockAsync(t, lb, ctx)
	inLine(t, ctx, la, 1)

	var lost atomic.Bool // a's releases run, and their replies are lost
	cla.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if err == nil && lost.Load() && scriptIs("release")(cmd.Args()) {
			err = errors.New("i/o timeout (reply lost)")
			cmd.SetErr(err)
		}
		return err
	}})
	lost.Store(true)
	defer lost.Store(false) // (so that the Generator's Close at the end finds the retry answered)
	var pe *dlock.RedisProcessError
	if err := a.Unlock(); !errors.As(err, &pe) {
		t.Fatalf("a's Unlock with its reply lost = %v, want a *RedisProcessError", err)
	}
	b := recv(t, bOwner, "b's Lock") // granted to b by a's release, which stood a in line again
	cGot := lockOnce(ctx, lc)
	waitFor(t, func() bool {
		st, _ := lc.State(ctx)
		return slices.Contains(st.Waiting, gc.LockerPrefix())
	})
	if err := lb.Unlock(b); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cGot:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // (within milliseconds when a is out of line)
		st, _ := la.State(ctx)
		t.Fatalf("c still waits: the key was granted to a's place in line (holder %q, a's prefix %q), which nobody in a wants", st.Holder, ga.LockerPrefix())
	}
}

// Processes without notifications that wait further back than second in line ask Redis a
// sixth of their lease apart, or once the key they saw held could have expired, but no sooner
// than backPace after their last answer, as processes that listen do: a holder's renewals of
// a short lease would else have every process in line ask at their pace.
func TestProcessesWithoutNotificationsBackInLineAskSeldomBehindAShortLease(t *testing.T) {
	tg := target(t)
	gh, _ := newGen(t)
	lh := mustGen(t, gh, "BACKNONOTE", tg, 300*time.Millisecond) // (renewed every 225 ms)
	ctx := ctxT(t, 60*time.Second)
	h, err := lh.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 3
	var (
		asks [waiters]*atomic.Int64
		got  [waiters]<-chan *dlock.Owner
		ls   [waiters]*dlock.DistributedReentrantLock
	)
	for i := range waiters {
		g, c := newGen(t, dlock.WithNotifications(false))
		asks[i] = countScript(c, "lock")
		ls[i] = mustGen(t, g, "BACKNONOTE", tg, 6*time.Second) // (a sixth: 1 s)
		got[i] = lockAsync(t, ls[i], ctx)
		// (A holding of the short lease lost under load leaves the key to a waiter: the line
		// is then shorter than the test needs, and the count below would be of no short lease.)
		waitFor(t, func() bool { st, _ := lh.State(ctx); return len(st.Waiting) == i+1 || h.Err() != nil })
	}
	skip := lastInLineAsksSeldom(t, asks[:], h)
	if err := lh.Unlock(h); err != nil && !errors.Is(err, dlock.ErrLockLost) {
		t.Fatal(err)
	}
	// Served in any order: a holding of the short lease lost under load (its Unlock's
	// ErrLockLost) leaves the key free, and whichever waiter asks first takes it. Each lets
	// it go at once, so that the others are served.
	served := make(chan bool, waiters)
	for i := range waiters {
		go func() {
			o := <-got[i] // (lockAsync sends once Lock returns; its context ends it)
			served <- o != nil && ls[i].Unlock(o) == nil
		}()
	}
	for range waiters {
		if !<-served {
			st, err := lh.State(context.Background())
			t.Fatalf("a waiter was not served, or its Unlock failed (holder %q, waiting %q, %v)", st.Holder, st.Waiting, err)
		}
	}
	if skip {
		t.Skipf("the holder's 300 ms lease ran out on a loaded machine (%v): nothing was counted behind it", context.Cause(h))
	}
}

// inLineAndListening waits until lb's process (of Generator gb) stands in la's key's line and
// listens on its channel (counted through c): a grant's message will be heard.
func inLineAndListening(t *testing.T, ctx context.Context, c *redis.Client, la, lb *dlock.DistributedReentrantLock, gb *dlock.Generator) {
	t.Helper()
	channel := processor.ProcessChannel(lb.Config(), gb.LockerPrefix())
	waitFor(t, func() bool {
		st, _ := la.State(ctx)
		n, err := c.PubSubNumSub(ctx, channel).Result()
		return slices.Contains(st.Waiting, gb.LockerPrefix()) && err == nil && n[channel] > 0
	})
}

// A process whose every lock.lua reply is lost (a client far from Redis whose read timeout
// cuts them: the requests run, the answers never come) stands in line all the same, and the
// grant its turn brings, whose message it hears, is its own: it takes the key with no answer
// to any of its requests, counting the lease from the first request of its attempt (the grant
// came after that request ran). It neither asks on until it gives the attempt back, nor leaves
// the key granted to it unused meanwhile.
func TestWaiterWhoseAnswersAreLostTakesItsGrant(t *testing.T) {
	const lease = 4 * time.Second
	ga, _ := newGen(t)
	gb, cb := newGen(t)
	la := mustGen(t, ga, "LOSTANSWERS", target(t), lease)
	lb := mustGen(t, gb, "LOSTANSWERS", target(t), lease)
	ctx := ctxT(t, 30*time.Second)
	a, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cb.AddHook(lostReplyHook{match: scriptIs("lock")})
	bctx, cancel := context.WithTimeout(ctx, 3*lease) // (within milliseconds of a's Unlock when the grant is taken)
	defer cancel()
	bGot := make(chan error, 1)
	var b *dlock.Owner
	go func() {
		var err error
		b, err = lb.Lock(bctx)
		bGot <- err
	}()
	inLineAndListening(t, ctx, cb, la, lb, gb)
	if err := la.Unlock(a); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, bGot, "b's Lock"); err != nil {
		st, _ := la.State(ctx)
		t.Fatalf("b's Lock = %v; the key granted to it (holder now %q, b's prefix %q) was not taken", err, st.Holder, gb.LockerPrefix())
	}
	st, err := la.State(ctx)
	if err != nil || !strings.HasPrefix(st.Holder, gb.LockerPrefix()) {
		t.Fatalf("b took the lock, but Redis holds %q (err %v), not an acquisition of b's (%q)", st.Holder, err, gb.LockerPrefix())
	}
	if o, ok, _ := la.TryLock(ctx); ok {
		t.Fatalf("a took the lock b holds (%v)", o)
	}
	if err := lb.Unlock(b); err != nil {
		t.Fatal(err)
	}
}

// A process in line whose ask Redis then refuses (its dial refused on every try: the ask fails
// Unsent, no copy of it ran) still takes the grant heard while that ask was on its way: its
// attempt was sent before, stands in line, and is granted the key; the refused ask changes
// none of that. Every later ask of it is refused too, so the grant is its only way in.
func TestWaiterWhoseAskRedisRefusesTakesItsGrant(t *testing.T) {
	const lease = 4 * time.Second
	ga, c := newGen(t)
	gb, cb := newGen(t)
	la := mustGen(t, ga, "REFUSEDASK", target(t), lease)
	lb := mustGen(t, gb, "REFUSEDASK", target(t), lease)
	ctx := ctxT(t, 30*time.Second)
	a, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var refuse atomic.Bool
	asking := make(chan struct{}, 1)
	heard := make(chan struct{})
	cb.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) != "lock" || !refuse.Load() {
			return next(ctx, cmd)
		}
		select {
		case asking <- struct{}{}: // (the first refused ask waits for the grant's message)
			select {
			case <-heard:
			case <-ctx.Done(): // (the test failed before it heard)
			}
		default:
		}
		cmd.SetErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
		return cmd.Err()
	}})
	bctx, cancel := context.WithTimeout(ctx, 3*lease)
	defer cancel()
	bGot := make(chan error, 1)
	var b *dlock.Owner
	go func() {
		var err error
		b, err = lb.Lock(bctx)
		bGot <- err
	}()
	inLineAndListening(t, ctx, c, la, lb, gb)
	refuse.Store(true)
	recv(t, asking, "b's next ask")
	if err := la.Unlock(a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return gb.Granted(key(lb)) })
	close(heard)
	if err := recv(t, bGot, "b's Lock"); err != nil {
		st, _ := la.State(ctx)
		t.Fatalf("b's Lock = %v; the key granted to it (holder now %q, b's prefix %q) was not taken", err, st.Holder, gb.LockerPrefix())
	}
	if st, err := la.State(ctx); err != nil || !strings.HasPrefix(st.Holder, gb.LockerPrefix()) {
		t.Fatalf("b took the lock, but Redis holds %q (err %v), not an acquisition of b's (%q)", st.Holder, err, gb.LockerPrefix())
	}
	if err := lb.Unlock(b); err != nil {
		t.Fatal(err)
	}
}

// A grant heard by a process none of whose requests was answered is counted from the attempt's
// first request, not from a later one: a request sent after the grant ran, which never reached
// Redis, neither took nor renewed the key, whose lease runs from the grant. Here the first ask
// of b runs (its reply lost), a's Unlock grants b the key while the grant's message is held
// back, every later ask of b is lost on its way, and none of its renewals reaches Redis: when
// the key expires, a's process takes it, and b's holding must have ended by then (by its own
// clock, counting from its first ask, which ran before the grant). Counting from its last ask
// (sent half a second after the grant) b would still hold for nearly that long: two owners.
func TestGrantHeardWithEveryAnswerLostCountsFromTheFirstRequest(t *testing.T) {
	const lease = 4 * time.Second
	ga, c := newGen(t)
	la := mustGen(t, ga, "LOSTASKS", target(t), lease)
	gb, cb, p := proxiedGen(t, func(addr string) *redis.Options { return &redis.Options{Addr: addr} })
	lb := mustGen(t, gb, "LOSTASKS", target(t), lease)
	preload(t, c)
	ctx := ctxT(t, 30*time.Second)
	a, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Bool      // a lock.lua of b ran (its reply lost): every later one is lost on its way
	var dropped atomic.Int64 // when the last lost one was sent (unix ns)
	var renewals atomic.Bool // b's renewals are lost on their way
	cb.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		switch processor.ScriptName(cmd.Args()) {
		case "lock":
			if ran.Load() {
				dropped.Store(time.Now().UnixNano())
				cmd.SetErr(injectedTimeout{})
				return cmd.Err()
			}
			err := next(ctx, cmd)
			if err == nil {
				ran.Store(true)
				cmd.SetErr(injectedTimeout{}) // the script ran; the reply is lost
				err = cmd.Err()
			}
			return err
		case "renew":
			if renewals.Load() {
				cmd.SetErr(injectedTimeout{})
				return cmd.Err()
			}
		}
		return next(ctx, cmd)
	}})
	bGot := make(chan error, 1)
	var b *dlock.Owner
	go func() {
		var err error
		b, err = lb.Lock(ctx)
		bGot <- err
	}()
	waitFor(t, ran.Load) // (its first lock.lua ran)
	inLineAndListening(t, ctx, c, la, lb, gb)
	p.HoldSubscribers(true) // the grant's message waits
	renewals.Store(true)
	granted := time.Now()
	if err := la.Unlock(a); err != nil {
		t.Fatal(err)
	}
	if st, err := la.State(ctx); err != nil || !strings.HasPrefix(st.Holder, gb.LockerPrefix()) {
		t.Fatalf("a's Unlock left the key to %q (%v), not granted to b (%q)", st.Holder, err, gb.LockerPrefix())
	}
	waitFor(t, func() bool { return time.Unix(0, dropped.Load()).Sub(granted) > lease/8 }) // b asked again, after the grant
	p.HoldSubscribers(false)
	if err := recv(t, bGot, "b's Lock"); err != nil {
		t.Fatalf("b's Lock = %v; the key granted to it was not taken", err)
	}
	waitFor(t, func() bool { return c.Exists(ctx, key(la)).Val() == 0 }) // the grant's lease ran out in Redis
	checkNoSecondOwner(t, lb, b, la)
}
