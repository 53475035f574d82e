package dlock_test

import (
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

func TestObserverSeesAcquisitionsReleasesAndLosses(t *testing.T) {
	rec := &recorder{}
	g, c := newGen(t, dlock.WithObserver(rec))
	l, _ := g.Gen("API", target(t))
	ctx := ctxT(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// a second goroutine waits and gets the key by local hand-over
	got := make(chan context.Context, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	waitFor(t, func() bool { s, _ := l.State(ctx); return s.LocalWaiters })
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	o2 := <-got
	c.Del(ctx, l.Config().UniqueKey()) // lost from outside
	if err := l.Unlock(o2); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Unlock after the key was deleted: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.acquired) != 2 || rec.acquired[0].How != dlock.HowAttempt || rec.acquired[1].How != dlock.HowHandOver {
		t.Fatalf("acquired: %+v", rec.acquired)
	}
	if rec.acquired[1].Token <= rec.acquired[0].Token || rec.acquired[0].Config.UniqueKey() != l.Config().UniqueKey() {
		t.Fatalf("acquired: %+v", rec.acquired)
	}
	if len(rec.released) != 2 || rec.released[0].Err != nil || !errors.Is(rec.released[1].Err, dlock.ErrLockLost) {
		t.Fatalf("released: %+v", rec.released)
	}
	if len(rec.lost) != 1 || !errors.Is(rec.lost[0].Cause, dlock.ErrLockLost) {
		t.Fatalf("lost: %+v", rec.lost)
	}
	if dlock.HowNotified.String() != "notified" || dlock.How(99).String() != "unknown" {
		t.Fatal("How names")
	}
}

// A holding passed on within the process is a hand-over also when the tenure it passes
// began with another process's release granting it (a message): only the first acquisition
// of such a tenure was notified.
func TestObserverToldAPassAfterAGrantIsAHandOver(t *testing.T) {
	rec := &recorder{}
	ga, _ := newGen(t, dlock.WithDefaultLease(time.Minute), dlock.WithObserver(rec))
	gb, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
	la, _ := ga.Gen("GRANTPASS", target(t))
	lb, _ := gb.Gen("GRANTPASS", target(t))
	ctx := ctxT(t, 30*time.Second)
	held, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Owner, 2)
	for range 2 {
		go func() {
			o, err := la.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- o
		}()
	}
	waitFor(t, func() bool {
		rank, _, ok := ga.Place(key(la))
		s, _ := la.State(ctx)
		return ok && rank == 0 && s.LocalWaiters && ga.Confirmed() > 0
	})
	if err := held.Unlock(); err != nil { // grants the key to A's attempt
		t.Fatal(err)
	}
	for range 2 {
		if o := recv(t, got, "A's Lock"); o != nil {
			if err := o.Unlock(); err != nil {
				t.Error(err)
			}
		}
	}
	if hows := rec.hows(); len(hows) != 2 || hows[1] != dlock.HowHandOver {
		t.Fatalf("acquired how %v; want the second a hand-over", hows)
	}
}

func TestObserverSeesRedisErrors(t *testing.T) {
	rec := &recorder{}
	c := srv.Client()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second), dlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	l, _ := g.Gen("API", target(t))
	c.Close() // every request fails
	if _, ok, err := l.TryLock(context.Background()); ok || err == nil {
		t.Fatalf("TryLock on a closed client: %v %v", ok, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.redisErrs) == 0 || rec.redisErrs[0].Op != "lock" || rec.redisErrs[0].Key != l.Config().UniqueKey() {
		t.Fatalf("redis errors: %+v", rec.redisErrs)
	}
}

// The read-write lock's and the semaphore's failed requests are told as the mutex's are: by
// the operation RedisOps names for them (take, renew, release) and with the failure itself,
// not the *RedisProcessError that Lock returns around it.
func TestObserverSeesFamilyRedisErrorsByTheirOps(t *testing.T) {
	rec := &recorder{}
	g, c := newGen(t, dlock.WithObserver(rec))
	s, err := g.GenSemaphore("API", target(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if failing.Load() && processor.ScriptName(cmd.Args()) != "" {
			cmd.SetErr(injectedTimeout{})
			return cmd.Err()
		}
		return next(ctx, cmd)
	}})
	o, err := s.Acquire(ctxT(t, 10*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	_ = s.Release(o) // (fails: told as a release)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, _, _ = s.TryAcquire(ctx, 2) // (fails: told as a take)
	cancel()
	failing.Store(false)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	ops := map[string]bool{}
	for _, e := range rec.redisErrs {
		ops[e.Op] = true
		var pe *dlock.RedisProcessError
		if !slices.Contains(dlock.RedisOps(), e.Op) || errors.As(e.Err, &pe) || e.Key != s.Config().UniqueKey() {
			t.Errorf("event %+v: want an op of RedisOps, the key, and the failure itself", e)
		}
	}
	if !ops["take"] || !ops["release"] {
		t.Fatalf("ops told: %v, want take and release among them", ops)
	}
}

// A request cut short by its caller's deadline (a Lock whose wait ran out while its attempt
// was on its way) is not Redis failing: RedisError is not told of it, so that short deadlines
// on a busy lock do not raise the alert on dlock_redis_errors_total. One that gets no answer
// within a bound of the library's own (an Unlock's, the lease) is told.
func TestObserverIsNotToldOfTheCallersDeadline(t *testing.T) {
	rec := &recorder{}
	g, c := newGen(t, dlock.WithObserver(rec))
	preload(t, c)
	l, _ := g.Gen("API", target(t))
	ctx := ctxT(t, 20*time.Second)
	o, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var slow atomic.Bool // Redis answers the next script only once the request's context ended
	c.AddHook(unanswered("", &slow))
	slow.Store(true)
	if err := l.Unlock(o); err == nil {
		t.Fatal("Unlock without an answer from Redis returned nil")
	}
	told := 0
	waitFor(t, func() bool { // (told as the abandoned request ends, in the background)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		told = len(rec.redisErrs)
		return told > 0
	})
	waitFor(t, func() bool { return c.Exists(rgBG(), key(l)).Val() == 0 }) // (its lease ran out)
	slow.Store(true)
	slow.Store(true)
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = l.Lock(tctx)
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock whose attempt got no answer before its deadline: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // (the abandoned request ends in the background)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.redisErrs[told:] {
		if e.Op == "lock" {
			t.Fatalf("RedisError told of a Lock's attempt that its caller's deadline cut short: %+v", e)
		}
	}
}

// A request that Redis failed is told even when its caller's deadline ran out first: go-redis
// bounds it by its own timeouts, not by the caller's context (unless ContextTimeoutEnabled),
// so its error (here a read timeout of a Redis that stopped answering) is Redis failing, not
// the caller going away. Else a Redis down under Locks with deadlines shorter than the
// client's timeouts told the Observer of nothing.
func TestObserverIsToldOfRedisFailingAfterTheCallersDeadline(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	rec := &recorder{}
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(5*time.Second), dlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background()) //nolint:errcheck
	l, _ := g.Gen("API", target(t))
	if _, err := l.State(ctxT(t, 5*time.Second)); err != nil { // (scripts loaded, a connection made)
		t.Fatal(err)
	}
	p.Blackhole(true) // Redis stops answering
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with Redis silent: %v", err)
	}
	waitFor(t, func() bool { // (told as the abandoned request fails, in the background)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.redisErrs {
			if e.Op == "lock" {
				return true
			}
		}
		return false
	})
}

// A holding through a Redis that stops answering (a black hole, go-redis's default timeouts,
// longer than the time a renewal has) is told as RenewalFailed before or as it is lost, for
// the mutex, the read-write lock and the semaphore: a renewal that got no answer before the
// lease ran out failed. Before, the mutex's Observer heard only the loss, and an alert on
// renewals failing never fired during a partition (the family's renewals are bounded by a
// third of the lease, and were told).
func TestObserverToldOfRenewalsUnansweredBeforeTheLoss(t *testing.T) {
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	rec := &renewalRecorder{}
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second), dlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background()) //nolint:errcheck
	tg := uniqueTarget(t)
	m := mustGen(t, g, "API", tg, time.Second)
	rw, sem := rwOf(t, g, tg), semOf(t, g, tg, 2)
	ctx := ctxT(t, 10*time.Second)
	var owners []*dlock.Owner
	for _, lock := range []func(context.Context) (*dlock.Owner, error){
		m.Lock, rw.Lock, func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) },
	} {
		o, err := lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		owners = append(owners, o)
	}
	p.Blackhole(true)
	defer p.Blackhole(false)
	for _, o := range owners {
		select {
		case <-o.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("a holding outlived a Redis that does not answer")
		}
	}
	keys := []string{m.Config().UniqueKey(), rw.Config().UniqueKey(), sem.Config().UniqueKey()}
	waitFor(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, k := range keys {
			if !rec.failed[k] {
				return false
			}
		}
		return true
	})
}

// A semaphore waiter whose process asked for it before, by an attempt that ended, and is
// served by a later attempt, says what sent that one — the pace of a process's asks for more
// (polled), a raised count's message (notified), its own release standing in line again
// (retry) — never "attempt", which is a first ask.
func TestObserverToldHowASemaphoreWaiterAskedAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		want dlock.How
		let  func(t *testing.T, mine, other *dlock.Owner, otherSem *dlock.Semaphore) // what frees the permits
		n    int                                                                     // the waiter's ask
	}{
		{"more-at-the-pace-of-asks", dlock.HowPolled, func(t *testing.T, _, other *dlock.Owner, _ *dlock.Semaphore) { _ = other.Unlock() }, 1},
		{"a-raised-count", dlock.HowNotified, func(t *testing.T, _, _ *dlock.Owner, s *dlock.Semaphore) {
			if err := s.SetPermits(context.Background(), 3); err != nil {
				t.Error(err)
			}
		}, 1},
		{"its-own-release-in-line-again", dlock.HowRetry, func(t *testing.T, mine, other *dlock.Owner, _ *dlock.Semaphore) {
			_ = other.Unlock() // (nothing tells a process asking for more of it)
			_ = mine.Unlock()  // its last holding goes: the release stands in line again for the waiter's 2
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			ga, ca := newGen(t, dlock.WithObserver(rec), dlock.WithDefaultLease(10*time.Second)) // (patience 5 s: the waiter asks for more at its pace)
			var takes atomic.Int64                                                               // answered
			ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				err := next(ctx, cmd)
				if sharedArg(cmd.Args(), "op") == "take" {
					takes.Add(1)
				}
				return err
			}})
			gb, _ := newGen(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			sa, sb := semOf(t, ga, tg, 2), semOf(t, gb, tg, 2)
			mine, err := sa.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			other, err := sb.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				o, err := sa.Acquire(ctx, tc.n)
				if err == nil {
					err = o.Unlock()
				}
				got <- err
			}()
			waitFor(t, func() bool { return takes.Load() >= 2 }) // its process asked for it, and was refused
			time.Sleep(20 * time.Millisecond)                    // (the answer applied)
			tc.let(t, mine, other, sb)
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			_ = mine.Unlock()
			_ = other.Unlock()
			if hows := rec.hows(); len(hows) != 2 || hows[1] != tc.want {
				t.Fatalf("acquired how %v, want the waiter's %v", hows, tc.want)
			}
		})
	}
}

// A waiter that gives up while the renewal before its hand-over is on its way (its handle's
// lease differs from the holding's, so the holding renews first) is not a failed renewal:
// Redis failed nothing, and nothing is retried; the waiter's own NotObtained tells it.
func TestObserverNotToldOfARenewalItsWaiterCutShort(t *testing.T) {
	s := ownServer(t) // (its writes are paused)
	rec := &renewalRecorder{}
	g := genOn(t, s.Client(), dlock.WithObserver(rec))
	tg := uniqueTarget(t)
	la := mustGen(t, g, "RTCUT", tg, time.Second)
	lb := mustGen(t, g, "RTCUT", tg, 3*time.Second)
	ctx := ctxT(t, 20*time.Second)
	o, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() { _, err := lb.Lock(wctx); got <- err }()
	waitFor(t, func() bool { return g.Waiters(la.Config().UniqueKey()) })
	admin := s.Client()
	defer admin.Close()
	if err := admin.Do(ctx, "client", "pause", 1500, "write").Err(); err != nil {
		t.Skip(err)
	}
	if err := la.Unlock(o); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // (the hand-over's renewal is on its way, held by the pause)
	cancel()
	if err := <-got; !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v", err)
	}
	_ = admin.Do(ctx, "client", "unpause").Err()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.failed[la.Config().UniqueKey()] {
		t.Fatal("told of a renewal failure: the waiter gave up while the renewal before its hand-over was on its way")
	}
}

// renewalRecorder records which keys RenewalFailed was told of.
type renewalRecorder struct {
	dlock.NopObserver
	mu     sync.Mutex
	failed map[string]bool
}

func (r *renewalRecorder) RenewalFailed(e dlock.RenewalEvent) {
	r.mu.Lock()
	if r.failed == nil {
		r.failed = map[string]bool{}
	}
	r.failed[e.Config.UniqueKey()] = true
	r.mu.Unlock()
}

// notObtainedRecorder records NotObtained events.
type notObtainedRecorder struct {
	dlock.NopObserver
	mu     sync.Mutex
	events []dlock.NotObtainedEvent
}

func (r *notObtainedRecorder) NotObtained(e dlock.NotObtainedEvent) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *notObtainedRecorder) reasons() []dlock.Reason {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []dlock.Reason
	for _, e := range r.events {
		out = append(out, e.Reason)
	}
	return out
}

// An acquisition that did not happen is reported with a bounded reason: a Lock that timed out
// or was cancelled, one ended by Close, a TryLock that Redis failed. A TryLock that found the
// lock held is its answer, not a failure, and an upgrade refused (ErrUpgrade) a call refused.
func TestObserverSeesWhatWasNotObtained(t *testing.T) {
	rec := &notObtainedRecorder{}
	g, _ := newGen(t, dlock.WithObserver(rec))
	other, _ := newGen(t)
	tg := target(t)
	l, _ := g.Gen("NOTOBT", tg)
	lo, _ := other.Gen("NOTOBT", tg)
	ctx := ctxT(t, 20*time.Second)
	held, err := lo.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock() //nolint:errcheck
	if _, ok, err := l.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	// Nor is an upgrade refused: a call refused, not an acquisition that failed.
	rw := rwOf(t, g, tg)
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Lock(r); !errors.Is(err, dlock.ErrUpgrade) {
		t.Fatalf("upgrade: %v, want ErrUpgrade", err)
	}
	if err := r.Unlock(); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = l.Lock(tctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a deadline: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := l.Lock(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock cancelled: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Lock(ctx); done <- err }()
	waitFor(t, func() bool { return g.Waiters(key(l)) })
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "the Lock ended by Close"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Lock ended by Close: %v", err)
	}
	want := []dlock.Reason{dlock.ReasonTimeout, dlock.ReasonCanceled, dlock.ReasonClosed}
	if got := rec.reasons(); !slices.Equal(got, want) {
		t.Fatalf("reasons %v, want %v", got, want)
	}

	// Redis down: a TryLock fails with a Redis error.
	c := srv.Client()
	g2, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second), dlock.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close(context.Background()) //nolint:errcheck
	l2, _ := g2.Gen("NOTOBT", tg)
	c.Close()
	if _, _, err := l2.TryLock(ctx); err == nil {
		t.Fatal("TryLock on a closed client")
	}
	if got := rec.reasons(); len(got) != 4 || got[3] != dlock.ReasonRedis {
		t.Fatalf("reasons %v, want a fourth, redis", got)
	}
}

// The read-write lock's and the semaphore's acquisitions, releases and failures are reported,
// each with its kind.
func TestObserverSeesTheLockFamilyByKind(t *testing.T) {
	rec := &recorder{}
	g, _ := newGen(t, dlock.WithObserver(rec))
	tg := uniqueTarget(t)
	ctx := ctxT(t, 10*time.Second)
	rw, _ := g.GenRW("API", tg)
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.RLock(w) // a downgrade
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Unlock()
	_ = r.Unlock()
	sem, _ := g.GenSemaphore("API", tg+"-sem", 1)
	p, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := sem.Acquire(short, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a second permit of 1: %v", err)
	}
	// a goroutine that waits in this process is lent the permit its release passes on
	passed := make(chan *dlock.Owner, 1)
	go func() {
		o, err := sem.Acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		passed <- o
	}()
	waitFor(t, func() bool { return g.SharedWaiters(sem.Config().UniqueKey()) == 1 })
	_ = p.Unlock()
	if o := <-passed; o != nil {
		_ = o.Unlock()
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var kinds []dlock.LockKind
	var hows []dlock.How
	for _, e := range rec.acquired {
		kinds = append(kinds, e.Kind)
		hows = append(hows, e.How)
	}
	if !slices.Equal(kinds, []dlock.LockKind{dlock.KindWrite, dlock.KindRead, dlock.KindPermits, dlock.KindPermits}) {
		t.Fatalf("acquired kinds %v", kinds)
	}
	// taken from Redis (or lent at once, the downgrade): attempts; passed on: a hand-over
	if !slices.Equal(hows, []dlock.How{dlock.HowAttempt, dlock.HowAttempt, dlock.HowAttempt, dlock.HowHandOver}) {
		t.Fatalf("acquired how %v", hows)
	}
	if len(rec.released) != 4 || rec.released[0].Kind != dlock.KindWrite || rec.released[2].Kind != dlock.KindPermits {
		t.Fatalf("released: %+v", rec.released)
	}
}

// A read-write lock's or semaphore's waiter served by a take of its own after waiting on
// another process says what sent that take, as the mutex's does: the release's message
// (notified) or, without notifications, the pace of its asks (polled) — not "attempt".
func TestObserverToldHowTheFamilyWaitedOnAnotherProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []dlock.Option
		want dlock.How
	}{
		{"notified", nil, dlock.HowNotified},
		{"polled", []dlock.Option{dlock.WithNotifications(false)}, dlock.HowPolled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			holder, _ := newGen(t, tc.opts...)
			waiter, wc := newGen(t, append([]dlock.Option{dlock.WithObserver(rec)}, tc.opts...)...)
			var answered atomic.Int64 // the waiter's takes answered
			wc.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				err := next(ctx, cmd)
				if sharedArg(cmd.Args(), "op") == "take" {
					answered.Add(1)
				}
				return err
			}})
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			rw, sem := rwOf(t, holder, tg), semOf(t, holder, tg+"-sem", 1)
			kinds := map[string]struct {
				hold, wait func(ctx context.Context) (*dlock.Owner, error)
				state      func(ctx context.Context) (dlock.SharedState, error)
			}{
				"write": {rw.Lock, rwOf(t, waiter, tg).Lock, rw.State},
				"permits": {func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) },
					func(ctx context.Context) (*dlock.Owner, error) { return semOf(t, waiter, tg+"-sem", 1).Acquire(ctx, 1) }, sem.State},
			}
			for name, k := range kinds {
				held, err := k.hold(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				before := answered.Load()
				go func() {
					o, err := k.wait(ctx)
					if err == nil {
						err = o.Unlock()
					}
					got <- err
				}()
				// it stands in line, and has asked again since (as its subscription was made, or
				// at its pace): no take of it is on its way as the holder lets go
				waitFor(t, func() bool { st, err := k.state(ctx); return err == nil && len(st.Waiting) == 1 })
				waitFor(t, func() bool { return answered.Load() >= before+2 })
				time.Sleep(20 * time.Millisecond) // (its answer applied)
				if err := held.Unlock(); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				rec.mu.Lock()
				last := rec.acquired[len(rec.acquired)-1]
				rec.mu.Unlock()
				if last.How != tc.want {
					t.Errorf("%s: the waiter served after another process's release was acquired by %v, want %v", name, last.How, tc.want)
				}
			}
		})
	}
}

// Every kind reports a holding's end once, as the mutex does: a holding lost while held is
// reported lost, and its later Unlock reports nothing more; a holding Close ends is reported
// released with ErrClosed.
func TestObserverSeesEveryKindEndOnce(t *testing.T) {
	for _, kind := range []string{"mutex", "read", "permits"} {
		t.Run(kind, func(t *testing.T) {
			for _, end := range []string{"lost", "closed"} {
				rec := &recorder{}
				g, c := newGen(t, dlock.WithDefaultLease(300*time.Millisecond), dlock.WithObserver(rec))
				tg := uniqueTarget(t)
				ctx := ctxT(t, 30*time.Second)
				var o *dlock.Owner
				var err error
				pattern := "*" + tg + "*"
				switch kind {
				case "mutex":
					l, _ := g.Gen("OBSEND", tg)
					o, err = l.Lock(ctx)
				case "read":
					o, err = rwOf(t, g, tg).RLock(ctx)
				default:
					o, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
				}
				if err != nil {
					t.Fatal(err)
				}
				if end == "lost" {
					keys, _ := c.Keys(ctx, pattern).Result()
					c.Del(ctx, keys...)
					select {
					case <-o.Done():
					case <-time.After(10 * time.Second):
						t.Fatal("the loss was never told")
					}
					if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
						t.Fatalf("Unlock of a lost holding: %v", err)
					}
				} else if err := g.Close(ctx); err != nil {
					t.Fatal(err)
				}
				waitFor(t, func() bool {
					rec.mu.Lock()
					defer rec.mu.Unlock()
					return len(rec.lost)+len(rec.released) > 0
				})
				time.Sleep(50 * time.Millisecond) // (an event told twice would come by now)
				rec.mu.Lock()
				lost, released := len(rec.lost), len(rec.released)
				var closed bool
				if released == 1 {
					closed = errors.Is(rec.released[0].Err, dlock.ErrClosed)
				}
				rec.mu.Unlock()
				if end == "lost" && (lost != 1 || released != 0) || end == "closed" && (lost != 0 || released != 1 || !closed) {
					t.Fatalf("%s: lost %d, released %d (ErrClosed %v)", end, lost, released, closed)
				}
			}
		})
	}
}

// A loss that the final Unlock's release finds (the holding removed from Redis unseen) is
// reported as a loss and a release, for every kind as for the mutex: one LossEvent and one
// ReleaseEvent carrying the loss, so that dlock_losses_total counts it (docs/observability.md:
// "one whose loss its release found is in both"). The read-write lock and the semaphore
// reported the release only.
func TestObserverToldOfALossTheReleaseFound(t *testing.T) {
	for _, kind := range []string{"mutex", "read", "write", "permits"} {
		t.Run(kind, func(t *testing.T) {
			rec := &recorder{}
			g, c := newGen(t, dlock.WithDefaultLease(time.Minute), dlock.WithObserver(rec))
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			hold := func() (*dlock.Owner, error) {
				switch kind {
				case "mutex":
					l, _ := g.Gen("OBSFOUND", tg)
					return l.Lock(ctx)
				case "read":
					return rwOf(t, g, tg).RLock(ctx)
				case "write":
					return rwOf(t, g, tg).Lock(ctx)
				default:
					return semOf(t, g, tg, 2).Acquire(ctx, 1)
				}
			}
			if kind != "mutex" {
				// The process is subscribed (and stays so) before the holding is taken: a
				// subscription confirmed after its take was sent renews the holding at once,
				// and under load that renewal found the keys deleted below before the Unlock
				// did — a loss while held (a LossEvent only), not the one the release finds.
				g.SetLinger(time.Minute)
				o, err := hold()
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, func() bool { return g.Confirmed() >= 1 })
				if err := o.Unlock(); err != nil {
					t.Fatal(err)
				}
				rec.mu.Lock()
				rec.lost, rec.released = nil, nil
				rec.mu.Unlock()
			}
			o, err := hold()
			if err != nil {
				t.Fatal(err)
			}
			keys, _ := c.Keys(ctx, "*"+tg+"*").Result()
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock of a holding removed from Redis = %v, want ErrLockLost", err)
			}
			if err := g.Close(ctx); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.lost) != 1 || len(rec.released) != 1 || !errors.Is(rec.lost[0].Cause, dlock.ErrLockLost) || !errors.Is(rec.released[0].Err, dlock.ErrLockLost) {
				t.Fatalf("lost %d, released %d (%+v); want one loss and one release, both matching ErrLockLost", len(rec.lost), len(rec.released), rec.released)
			}
		})
	}
}

// slowObserver takes its time over every release (an exporter, say).
type slowObserver struct{ recorder }

func (r *slowObserver) Released(e dlock.ReleaseEvent) {
	time.Sleep(100 * time.Millisecond)
	r.recorder.Released(e)
}

// Close reports a holding it ends released before it returns, for every kind: the Observer is
// not called afterwards, from a goroutine Close did not wait for.
func TestObserverHearsCloseBeforeItReturns(t *testing.T) {
	for _, kind := range []string{"mutex", "read", "permits"} {
		t.Run(kind, func(t *testing.T) {
			rec := &slowObserver{}
			g, _ := newGen(t, dlock.WithObserver(rec))
			tg := uniqueTarget(t)
			ctx := ctxT(t, 10*time.Second)
			var err error
			switch kind {
			case "mutex":
				l, _ := g.Gen("OBSCLOSE", tg)
				_, err = l.Lock(ctx)
			case "read":
				_, err = rwOf(t, g, tg).RLock(ctx)
			default:
				_, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			n := len(rec.released)
			rec.mu.Unlock()
			if n != 1 {
				t.Fatalf("%d releases reported as Close returned; want 1", n)
			}
		})
	}
}

// A read-write lock's or semaphore's holding lost before Close is reported lost only: Close
// does not report it released too, and its Unlock still says it was lost.
func TestObserverHearsALossBeforeCloseOnce(t *testing.T) {
	for _, kind := range []string{"read", "write", "permits"} {
		t.Run(kind, func(t *testing.T) {
			rec := &recorder{}
			g, _ := newGen(t, dlock.WithObserver(rec), dlock.WithDefaultLease(time.Minute))
			tg := uniqueTarget(t)
			ctx := ctxT(t, 10*time.Second)
			rw, sem := rwOf(t, g, tg), semOf(t, g, tg, 2)
			var o *dlock.Owner
			var err error
			state, force := rw.State, rw.ForceRelease
			switch kind {
			case "read":
				o, err = rw.RLock(ctx)
			case "write":
				o, err = rw.Lock(ctx)
			default:
				o, err = sem.Acquire(ctx, 1)
				state, force = sem.State, sem.ForceRelease
			}
			if err != nil {
				t.Fatal(err)
			}
			st, err := state(ctx)
			if err != nil || len(st.Holds) != 1 {
				t.Fatalf("state %+v, %v", st, err)
			}
			if removed, err := force(ctx, st.Holds[0].Locker); err != nil || !removed {
				t.Fatalf("ForceRelease: %v, %v", removed, err)
			}
			<-o.Done()
			waitFor(t, func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.lost) == 1 })
			if err := g.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("Unlock of a lost holding after Close: %v", err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.lost) != 1 || len(rec.released) != 0 {
				t.Fatalf("lost %d, released %d; want one loss and no release", len(rec.lost), len(rec.released))
			}
		})
	}
}

// A waiter that takes a tenure its process held back for a ForceRelease of its own (the
// force found the key another's, and the tenure began under the same locker before a renewal
// checked it) is told HowRetry: no goroutine passed it the lock (not HowHandOver).
func TestObserverToldHowAWaiterTookATenureHeldBackForAForce(t *testing.T) {
	rec := &howRecorder{}
	ga, _ := newGen(t, dlock.WithObserver(rec), dlock.WithNotifications(false))
	gb, _ := newGen(t)
	la := mustGen(t, ga, "HOWHELD", target(t), 1200*time.Millisecond) // (polls every 200 ms)
	lb := mustGen(t, gb, "HOWHELD", target(t), 5*time.Second)
	ctx := ctxT(t, 20*time.Second)
	b := mustLock(t, lb, ctx)
	got := lockAsync(t, la, ctx)
	inLine(t, ctx, la, 1)
	want := rawClient(t).HVals(ctx, "{"+key(la)+"}:want").Val()
	if len(want) != 1 {
		t.Fatalf("the line's entries: %q", want)
	}
	locker, _, _ := strings.Cut(want[0], "|")
	if removed, err := la.ForceRelease(ctx, locker); err != nil || removed {
		t.Fatalf("ForceRelease of the waiting attempt = %v, %v; want false (the key is b's)", removed, err)
	}
	if err := b.Unlock(); err != nil { // grants the key to a's attempt: a's poll finds it
		t.Fatal(err)
	}
	o := recv(t, got, "a's Lock")
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.Equal(rec.how, []dlock.How{dlock.HowRetry}) {
		t.Fatalf("acquisitions told %v; want [retry]", rec.how)
	}
}
