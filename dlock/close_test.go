package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/internal/redistest"
)

// Close ends the owner contexts with ErrClosed and releases their keys: another process's
// waiter is served. Ports etcd's TestMutexLockSessionExpired and Session.Done (a session that
// ends ends the mutex's hold).
func TestCloseReleasesAndEndsWaiters(t *testing.T) {
	gr, _ := newGen(t)
	c := srv.Client()
	defer c.Close()
	g, _ := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	l, _ := g.Gen("CLOSE", target(t))
	ctx := ctxT(t, 10*time.Second)
	owned, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lr, _ := gr.Gen("CLOSE", target(t))
	remote := lockOnce(ctx, lr)
	errs := make(chan error)
	go func() { _, err := l.Lock(ctx); errs <- err }()
	for !g.Waiters(l.Config().UniqueKey()) {
		time.Sleep(time.Millisecond)
	}
	waitFor(t, func() bool { return len(stateOf(t, lr).Waiting) == 1 })
	holder := stateOf(t, lr).Holder
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("waiter after Close: %v", err)
	}
	if !errors.Is(context.Cause(owned), dlock.ErrClosed) {
		t.Fatalf("owner cause %v", context.Cause(owned))
	}
	if s := stateOf(t, lr); s.Held() && s.Holder == holder {
		t.Fatal("Close left the key held")
	}
	if err := recv(t, remote, "another process's Lock after Close"); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(owned); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Unlock after Close: %v", err)
	}
	if _, err := l.Lock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Lock after Close: %v", err)
	}
	if _, err := g.Gen("CLOSE", "x"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Gen after Close: %v", err)
	}
	if _, err := g.GenRW("CLOSE", "x"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("GenRW after Close: %v", err)
	}
	if _, err := g.Multi(l); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Multi after Close: %v", err)
	}
}

// Close(ctx) is bounded by ctx even when the client does not honour context deadlines
// (go-redis's default): the server is paused for 6 s, and Close with a 200 ms context returns
// well before that, with ctx's error.
func TestCloseBoundedByCtx(t *testing.T) {
	t.Parallel()
	s := ownServer(t) // (it pauses its server's clients)
	c := s.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	var owners []*dlock.Owner // (kept: an Owner dropped is released, perhaps before the pause)
	for i := 0; i < 2; i++ {
		l, _ := g.Gen("RVCLOSE", target(t)+string(rune('a'+i)))
		o, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		owners = append(owners, o)
	}
	admin := s.Client()
	defer admin.Close()
	if err := admin.Do(ctx, "client", "pause", 6000, "all").Err(); err != nil {
		t.Skip(err)
	}
	defer admin.Do(context.Background(), "client", "unpause")
	cctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = g.Close(cctx)
	took := time.Since(start)
	t.Logf("Close(200ms) took %v: %v", took, err)
	if took > 3*time.Second {
		t.Fatalf("Close(ctx 200ms) took %v while the server was paused for 6 s", took)
	}
	if err == nil {
		t.Fatal("Close gave up at its deadline but reported no error")
	}
	for _, o := range owners {
		if !errors.Is(context.Cause(o), dlock.ErrClosed) {
			t.Fatalf("an Owner after Close: %v, want ErrClosed", context.Cause(o))
		}
	}
}

// A Close whose context ends while Redis has not answered a release says that the context
// ended, not that the lease ran out: the lease (30 s here) had most of its time left.
func TestCloseCtxEndingIsNotALeaseRunOut(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	w := newWire(t, c)
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := g.Gen("RVCLOSE", uniqueTarget(t)) // (its key stays held after the test for the 30 s lease)
	o, err := l.Lock(ctxT(t, 20*time.Second)) // (kept: an Owner dropped is released, perhaps before the stall)
	if err != nil {
		t.Fatal(err)
	}
	w.stall("release", 1)
	defer w.unstall()
	cctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = g.Close(cctx)
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "lease") {
		t.Fatalf("Close(200ms) with the release unanswered: %v", err)
	}
	if !errors.Is(context.Cause(o), dlock.ErrClosed) {
		t.Fatalf("the Owner after Close: %v, want ErrClosed", context.Cause(o))
	}
}

// A client closed under the Generator fails every request at once: the give-back and the
// leave that settle a failed acquisition stop at once too, so Close returns without waiting
// for their retries to run out (a lease here), and Lock does not wait for its context.
func TestCloseAfterTheClientClosed(t *testing.T) {
	c := srv.Client()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := g.Gen("RVCLOSED", target(t))
	c.Close()
	if _, ok, err := l.TryLock(ctxT(t, 5*time.Second)); ok || err == nil {
		t.Fatalf("TryLock on a closed client = %v, %v; want an error", ok, err)
	}
	var pe *dlock.RedisProcessError
	if _, err := l.Lock(ctxT(t, 20*time.Second)); !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &pe) ||
		errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a closed client = %v; want ErrNotObtained with the Redis failure, at once", err)
	}
	if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
		t.Fatalf("Close = %v; want nil: nothing can be sent, so nothing is waited for", err)
	}
}

// A Close whose release of a held lock Redis fails says so: for the mutex, the read-write lock
// and the semaphore alike, its error is a *RedisProcessError wrapping the failure (the key
// stays held in Redis until its lease runs out). The family's driver sends the release again
// until the lease ends, at most once a tenth of the lease (50 ms at most) as an Unlock's
// release (TestLastingReleaseFailureIsNoBusyLoop), then reports it. (The lease is long enough
// that a stalled process neither loses the holding before Close nor sees a request's bound, a
// third of the lease, pass before its injected failure is read: either would make Close
// report something else.)
func TestCloseReportsAReleaseRedisFailed(t *testing.T) {
	t.Parallel() // (its own keys and clients; it waits for the leases of the retried releases)
	heldOfEachKind(t, 2*time.Second, isRelease, func(t *testing.T, g *dlock.Generator, owned *dlock.Owner, failing *atomic.Int32) {
		failing.Store(1)
		start := time.Now()
		err := g.Close(ctxT(t, 20*time.Second))
		n, elapsed := int64(failing.Load()-1), time.Since(start)
		if bound := 2 + int64(elapsed/(50*time.Millisecond)); n > bound {
			t.Fatalf("Close sent %d releases in %v while Redis failed them, want at most %d", n, elapsed, bound)
		}
		t.Logf("Close sent %d releases in %v while Redis failed them", n, elapsed)
		var pe *dlock.RedisProcessError
		if !errors.As(err, &pe) || !errors.Is(err, errInjected) {
			t.Fatalf("Close with its release failed by Redis = %v, want a *RedisProcessError wrapping the failure", err)
		}
		if !errors.Is(context.Cause(owned), dlock.ErrClosed) {
			t.Fatalf("the Owner after Close: %v, want ErrClosed", context.Cause(owned))
		}
	})
}

// A Close after a holding was lost (its lease ran out while Redis failed every request) reports
// no failed release of it, for the mutex, the read-write lock and the semaphore alike: its owner
// was told of the loss, and its lease has run out, so nothing it held stays held in Redis.
func TestCloseReportsNoReleaseOfAHoldingLostBefore(t *testing.T) {
	t.Parallel()
	heldOfEachKind(t, 300*time.Millisecond, func([]any) bool { return true }, func(t *testing.T, g *dlock.Generator, owned *dlock.Owner, failing *atomic.Int32) {
		failing.Store(1)
		recv(t, owned.Done(), "the loss of the holding")
		if cause := context.Cause(owned); !errors.Is(cause, dlock.ErrLockLost) {
			t.Fatalf("the holding ended with %v, want lost", cause)
		}
		if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
			t.Fatalf("Close after the holding was lost = %v, want nil: nothing of it is held to report", err)
		}
	})
}

// A release that an Unlock sent before Close and waits for is reported to that Unlock, not by
// Close too, for the read-write lock and the semaphore as for the mutex (whose Unlock's
// release goes on in the background): Close reports the releases it made itself.
func TestCloseLeavesAnUnlocksFailedReleaseToTheUnlock(t *testing.T) {
	t.Parallel()                  // (it waits on its own servers, keys and leases: beside the others)
	const lease = 2 * time.Second // (the Unlock's release is sent again until it runs out)
	heldOfEachKind(t, lease, isRelease, func(t *testing.T, g *dlock.Generator, owned *dlock.Owner, failing *atomic.Int32) {
		failing.Store(1)
		unlocked := make(chan error, 1)
		go func() { unlocked <- owned.Unlock() }()
		waitFor(t, func() bool { return failing.Load() > 1 })
		closed := make(chan error, 1)
		go func() { closed <- g.Close(ctxT(t, 20*time.Second)) }()
		var pe *dlock.RedisProcessError
		if err := recv(t, unlocked, "the Unlock"); !errors.As(err, &pe) || !errors.Is(err, errInjected) {
			t.Fatalf("Unlock with its release failed by Redis = %v, want a *RedisProcessError wrapping the failure", err)
		}
		if err := recv(t, closed, "Close"); err != nil {
			t.Fatalf("Close = %v, want nil: the failed release was the Unlock's, and it said so", err)
		}
	})
}

// A Close whose own release failed once reports what its retry found, for the mutex, the
// read-write lock and the semaphore alike: nothing when the retry let the key go, and nothing
// when it found the key gone (removed before Close: nothing of it stays held). Close waits
// for that retry anyway; the mutex's Close used to report the first failure, saying the key
// stayed held until its lease ran out while it was free as Close returned.
func TestCloseReportsWhatTheRetryOfItsReleaseFound(t *testing.T) {
	t.Parallel()
	admin := rawClient(t)
	for _, found := range []string{"let go", "gone"} {
		t.Run(found, func(t *testing.T) {
			var first atomic.Bool // the release that fails: the first after failing is set
			failFirst := func(args []any) bool {
				if !isRelease(args) || !first.CompareAndSwap(true, false) {
					return false
				}
				if found == "gone" { // the holding was removed before Close's release
					wipeScriptKeys(context.Background(), admin, args)
				}
				return true
			}
			heldOfEachKind(t, 2*time.Second, failFirst, func(t *testing.T, g *dlock.Generator, owned *dlock.Owner, failing *atomic.Int32) {
				first.Store(true)
				failing.Store(1)
				if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
					t.Fatalf("Close = %v, want nil: the retry of its release found the key %s", err, found)
				}
				if failing.Load() != 2 {
					t.Fatalf("setup: %d releases failed, want 1", failing.Load()-1)
				}
			})
		})
	}
}

// An Unlock whose release Redis keeps failing, overtaken by a Close that gives up (its
// context ends first), does not report the holding let go, for the read-write lock and the
// semaphore as for the mutex: the release was never answered, and Redis may hold it until its
// lease runs out.
func TestUnlockCutShortByACloseThatGaveUpSaysSo(t *testing.T) {
	const lease = 10 * time.Second
	heldOfEachKind(t, lease, isRelease, func(t *testing.T, g *dlock.Generator, owned *dlock.Owner, failing *atomic.Int32) {
		failing.Store(1)
		unlocked := make(chan error, 1)
		go func() { unlocked <- owned.Unlock() }()
		waitFor(t, func() bool { return failing.Load() > 1 })
		cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		cerr := g.Close(cctx)
		var pe *dlock.RedisProcessError
		if err := recv(t, unlocked, "the Unlock"); !errors.As(err, &pe) {
			t.Fatalf("Unlock = %v, want a *RedisProcessError: its release was never answered (Close gave up: %v)", err, cerr)
		}
	})
}

var errInjected = errors.New("refused: injected")

// isRelease reports whether a is a release: the mutex's release.lua or shared.lua's.
func isRelease(a []any) bool { return scriptIs("release")(a) || sharedArg(a, "op") == "release" }

// heldOfEachKind runs f for each kind — the mutex, the read-write lock's write side, a
// semaphore's permit — with a Generator of lease on a client of its own and an Owner of that
// kind (kept by f: an Owner dropped is released). Once f sets failing, each command that fail
// picks fails with errInjected, and failing counts them (from 1).
func heldOfEachKind(t *testing.T, lease time.Duration, fail func(args []any) bool, f func(t *testing.T, g *dlock.Generator, owned *dlock.Owner, failing *atomic.Int32)) {
	for _, kind := range []string{"mutex", "rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			c := srv.Client()
			var failing atomic.Int32
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if failing.Load() > 0 && fail(cmd.Args()) {
					failing.Add(1)
					cmd.SetErr(errInjected)
					return errInjected
				}
				return next(ctx, cmd)
			}})
			defer c.Close()
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 20*time.Second)
			tg := uniqueTarget(t)
			var owned *dlock.Owner
			switch kind {
			case "mutex":
				owned, err = mustGen(t, g, "CLOSEKINDS", tg, lease).Lock(ctx)
			case "rw":
				owned, err = rwOf(t, g, tg).Lock(ctx)
			default:
				owned, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			f(t, g, owned, &failing)
		})
	}
}

// The read-write lock and the semaphore end a wait on a failing Redis as the mutex's Lock does:
// on a closed client at once, with ErrNotObtained and the client's failure (no later request
// can be sent), even with no deadline; with Redis unreachable at the end of the context, with
// the last Redis failure too. The observer's reason says Redis either way.
func TestFamilyAfterTheClientClosedOrRedisDown(t *testing.T) {
	t.Parallel()
	for _, closed := range []bool{true, false} {
		rec := &notObtainedRecorder{}
		var c *redis.Client
		ctx := context.Background() // a closed client: a wait that does not end is the failure
		if closed {
			c = srv.Client()
		} else {
			c = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
			ctx = ctxT(t, 3*time.Second) // long enough for a take to fail
		}
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second), dlock.WithObserver(rec))
		if err != nil {
			t.Fatal(err)
		}
		tg := uniqueTarget(t)
		reader, writer, sem := rwOf(t, g, tg+"r"), rwOf(t, g, tg+"w"), semOf(t, g, tg, 2)
		if closed {
			c.Close()
		}
		got := make(chan error, 3)
		go func() { _, err := reader.RLock(ctx); got <- err }()
		go func() { _, err := writer.Lock(ctx); got <- err }()
		go func() { _, err := sem.Acquire(ctx, 1); got <- err }()
		for range 3 {
			err := recv(t, got, "an acquisition")
			var pe *dlock.RedisProcessError
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &pe) || errors.Is(err, context.DeadlineExceeded) == closed {
				t.Errorf("client closed %v: %v; want ErrNotObtained with the Redis failure (and the deadline if not closed)", closed, err)
			}
		}
		if got := rec.reasons(); len(got) != 3 || slices.ContainsFunc(got, func(r dlock.Reason) bool { return r != dlock.ReasonRedis }) {
			t.Errorf("client closed %v: reasons %v, want redis", closed, got)
		}
		if err := g.Close(ctxT(t, 10*time.Second)); err != nil {
			t.Error(err)
		}
		c.Close()
	}
}

// A try that Redis refused (nothing listening: no try of its request got a connection; a
// replica: it declined to run the script, READONLY), of any kind of lock, leaves nothing to
// give back: Close returns without waiting, where it used to retry give-backs for about a lease
// (here ten minutes; the close's deadline comes long before). (A Lock whose deadline comes
// while a request is on its way, as it does when Redis refuses every try, still leaves a
// give-back: that request's outcome is not known then.)
func TestCloseAfterTriesRedisRefused(t *testing.T) {
	t.Parallel()
	srv.NeedReal(t)
	replica, err := redistest.StartReal()
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	rc := replica.Client()
	defer rc.Close()
	if err := rc.Do(ctxT(t, 10*time.Second), "replicaof", "127.0.0.1", "1").Err(); err != nil { // (a master that never answers)
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"nothing listening": "127.0.0.1:1", "a replica": replica.Addr} {
		t.Run(name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: addr}) // go-redis's defaults: retries, five dials each
			defer c.Close()
			const lease = 10 * time.Minute
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			tg := uniqueTarget(t)
			l, rw, sem := mustGen(t, g, "REFUSED", tg, lease), rwOf(t, g, tg), semOf(t, g, tg, 2)
			tries := map[string]func(context.Context) (*dlock.Owner, bool, error){
				"TryLock": l.TryLock, "RWLock.TryLock": rw.TryLock, "TryRLock": rw.TryRLock,
				"TryAcquire": func(ctx context.Context) (*dlock.Owner, bool, error) { return sem.TryAcquire(ctx, 1) },
			}
			for name, try := range tries {
				if o, ok, err := try(ctxT(t, 30*time.Second)); err == nil || ok || o != nil {
					t.Fatalf("%s = %v, %v, %v; want an error", name, o, ok, err)
				}
			}
			if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
				t.Fatalf("close after tries Redis refused: %v; want nil (nothing to give back)", err)
			}
		})
	}
}

// Close at any moment of an acquisition (the tenure being started, the owner being made) is
// safe: no panic, no race, no goroutine left.
func TestCloseDuringAcquisition(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	for i := 0; i < 600; i++ {
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := g.Gen("RVOWN", target(t))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if o, err := l.Lock(context.Background()); err == nil {
				_ = l.Unlock(o)
			}
		}()
		d := time.Duration(i%200) * time.Microsecond
		time.Sleep(d)
		_ = g.Close(context.Background())
		<-done
	}
}

// Close ends a Lock whose first request to Redis is on its way (before it queued): it returns
// ErrClosed at once, not when the client gives up on the request; so does a TryLock, of the
// mutex and of the lock family (whose try got the driver's request error, cut short by Close:
// "no answer before the request's deadline or cancellation", matching neither ErrClosed nor
// ErrNotObtained), and a MultiLock over them.
func TestCloseEndsALockWhoseRequestIsOnItsWay(t *testing.T) {
	try := func(f func(context.Context) (*dlock.Owner, bool, error)) func(context.Context) error {
		return func(ctx context.Context) error {
			_, _, err := f(ctx)
			return err
		}
	}
	lock := func(f func(context.Context) (*dlock.Owner, error)) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := f(ctx)
			return err
		}
	}
	for _, tc := range []struct {
		name   string
		script string // the request held on its way
		call   func(k everyLock) func(context.Context) error
	}{
		{"Lock", "lock", func(k everyLock) func(context.Context) error { return lock(k.l.Lock) }},
		{"TryLock", "lock", func(k everyLock) func(context.Context) error { return try(k.l.TryLock) }},
		{"RLock", "shared", func(k everyLock) func(context.Context) error { return lock(k.rw.RLock) }},
		{"TryRLock", "shared", func(k everyLock) func(context.Context) error { return try(k.rw.TryRLock) }},
		{"write Lock", "shared", func(k everyLock) func(context.Context) error { return lock(k.rw.Lock) }},
		{"write TryLock", "shared", func(k everyLock) func(context.Context) error { return try(k.rw.TryLock) }},
		{"Acquire", "shared", func(k everyLock) func(context.Context) error { return lock(k.sem.Permits(2).Lock) }},
		{"TryAcquire", "shared", func(k everyLock) func(context.Context) error { return try(k.sem.Permits(1).TryLock) }},
		{"MultiLock TryLock of permits and a read side", "shared", func(k everyLock) func(context.Context) error {
			m, err := k.g.MultiOf(k.sem.Permits(1), k.rw.ReadSide())
			if err != nil {
				return func(context.Context) error { return err }
			}
			return try(m.TryLock)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newGen(t)
			release := make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free)
			sent := make(chan struct{}, 1)
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if scriptIs(tc.script)(cmd.Args()) {
					select {
					case sent <- struct{}{}:
						<-release // a server that does not answer, a client that waits for it
					default: // (the give-back after Close, once the test let the first go)
					}
				}
				return next(ctx, cmd)
			}})
			k := everyLock{g: g}
			k.l, _ = g.Gen("CLOSEASK", target(t))
			k.rw, _ = g.GenRW("CLOSEASKRW", target(t))
			k.sem, _ = g.GenSemaphore("CLOSEASKSEM", target(t), 3)
			call := tc.call(k)
			got := make(chan error, 1)
			go func() { got <- call(context.Background()) }()
			recv(t, sent, "the request")
			cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_ = g.Close(cctx) // (returns at its ctx: the request is still inside the client)
			cancel()
			if err := recv(t, got, "the acquisition"); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("%v, want ErrClosed", err)
			}
			free()
		})
	}
}

// After Close, Lock and TryLock with the owner context of a closed holding say ErrClosed.
func TestLockAfterCloseWithOwnerCtx(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	g, _ := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	l, _ := g.Gen("R2LC", target(t))
	o, err := l.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Close(context.Background())
	_, err = l.Lock(o)
	_, ok, terr := l.TryLock(o)
	t.Logf("Lock: %v; TryLock: %v %v", err, ok, terr)
	if !errors.Is(err, dlock.ErrClosed) || !errors.Is(terr, dlock.ErrClosed) {
		if strings.Contains(err.Error(), "canceled") {
			t.Errorf("Lock/TryLock with a closed holding's owner ctx after Close: %v / %v, want ErrClosed", err, terr)
		}
	}
}

// Leaving the line of waiting processes is bounded like every Redis call: with a client that
// does not return, Close is bounded by its own ctx, and the background job, which Close
// waits for, lets the state go once Close gives up (not at the end of the entry's life: a
// lease of 20 s).
func TestHungLeaveDoesNotHoldClose(t *testing.T) {
	ga, ca := newGen(t)
	gb, _ := newGen(t)
	lease := 20 * time.Second
	la, _ := ga.GenWithLease("R2UM", target(t), lease)
	lb, _ := gb.GenWithLease("R2UM", target(t), lease)
	ctx := ctxT(t, 10*time.Second)
	ob, err := lb.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Unlock(ob)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	ca.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs("leave")(cmd.Args()) {
			<-release // a hung server, a client that ignores the deadline
		}
		return next(ctx, cmd)
	}})
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := la.Lock(wctx); err == nil {
		t.Fatal("A got a held lock")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	start := time.Now()
	err = ga.Close(cctx)
	took := time.Since(start)
	t.Logf("Close took %v: %v", took, err)
	// Leaving goes through Generator.call, so the job lets the state go as Close gives up;
	// only the goroutine stuck inside the client remains, which Close reports at its ctx.
	waitFor(t, func() bool { return ga.InUse() == 0 })
	free()
	if took > 5*time.Second {
		t.Fatalf("Close(1 s) took %v", took)
	}
}

// Every exit path tells the holding before it lets the key go: by the time the request that
// frees the key is sent, the owner context has ended, with the cause of that exit. (Once the
// key is free another process may take it at once: a holder still acting then would be a
// second owner.) So for every kind, a MultiLock's Owner too, whatever its parts.
func TestExitsTellTheHolderBeforeTheKeyGoes(t *testing.T) {
	kinds := []struct {
		name string
		lock func(t *testing.T, g *dlock.Generator, tg string) (*dlock.Owner, error)
	}{
		{"mutex", func(t *testing.T, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return mustGen(t, g, "EXIT", tg, 5*time.Second).Lock(ctxT(t, 10*time.Second))
		}},
		{"read", func(t *testing.T, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return rwOf(t, g, tg).RLock(ctxT(t, 10*time.Second))
		}},
		{"permits", func(t *testing.T, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			return semOf(t, g, tg, 2).Acquire(ctxT(t, 10*time.Second), 1)
		}},
		{"multi", func(t *testing.T, g *dlock.Generator, tg string) (*dlock.Owner, error) {
			m, err := g.MultiOf(mustGen(t, g, "EXIT", tg, 5*time.Second), semOf(t, g, tg+"s", 2).Permits(1))
			if err != nil {
				t.Fatal(err)
			}
			return m.Lock(ctxT(t, 10*time.Second))
		}},
	}
	for _, tc := range []struct {
		name  string
		exit  func(g *dlock.Generator, owned *dlock.Owner) error
		cause error
	}{
		{"Unlock", func(_ *dlock.Generator, owned *dlock.Owner) error { return owned.Unlock() }, context.Canceled},
		{"Close", func(g *dlock.Generator, _ *dlock.Owner) error { return g.Close(context.Background()) }, dlock.ErrClosed},
	} {
		for _, kind := range kinds {
			t.Run(tc.name+"/"+kind.name, func(t *testing.T) {
				for range 20 { // (the Owner of a MultiLock was told by a goroutine of its own, at times after the release)
					g, c := newGen(t)
					preload(t, c)
					w := newWire(t, c)
					owned, err := kind.lock(t, g, uniqueTarget(t))
					if err != nil {
						t.Fatal(err)
					}
					var sent atomic.Int32
					var live atomic.Bool
					check := func([]any) {
						sent.Add(1)
						if owned.Err() == nil {
							live.Store(true)
						}
					}
					w.onSend("release", check)
					w.onSend("shared", func(args []any) {
						if slices.Contains(args, any("release")) {
							check(args)
						}
					})
					if err := tc.exit(g, owned); err != nil {
						t.Fatal(err)
					}
					if sent.Load() == 0 {
						t.Fatal("no release request was sent")
					}
					if live.Load() || !errors.Is(context.Cause(owned), tc.cause) {
						t.Fatalf("a release was sent while the owner context was live: %v; it ended with %v, want %v", live.Load(), context.Cause(owned), tc.cause)
					}
				}
			})
		}
	}
}

// Close of a holding whose lease has run out by the process's own clock, unseen so far (a
// process paused past its lease, closed as it resumes; its timers have not fired yet), tells
// it that it was lost, not closed: its work during the pause ran without the lock. Its Owner
// ends with the loss and its Unlock returns it, for every kind; Close reports no Redis
// failure for it, and gives the key back before it returns (Redis may hold it still: a
// renewal the process did not hear of, a pause within the drift allowance). The Observer has
// heard the loss, once, and no release, by the time Close returns (its Lost is slow here: one
// told by a goroutine of its own would come after).
func TestCloseOfAHoldingLostUnseenSaysLost(t *testing.T) {
	for _, kind := range []string{"mutex", "read", "write", "permits"} {
		t.Run(kind, func(t *testing.T) {
			rec := &slowLoss{}
			g, _ := newGen(t, dlock.WithDefaultLease(5*time.Second), dlock.WithObserver(rec))
			other, _ := newGen(t, dlock.WithDefaultLease(5*time.Second))
			tg := uniqueTarget(t)
			ctx := ctxT(t, 10*time.Second)
			if kind != "mutex" {
				// The family's channel subscribed for good first: its confirmation has a holding
				// renew at once, which would count a lease anew after Lapse.
				g.SetLinger(time.Hour)
				var o *dlock.Owner
				var err error
				if kind == "permits" {
					o, err = semOf(t, g, tg, 1).Acquire(ctx, 1)
				} else {
					o, err = rwOf(t, g, tg).RLock(ctx)
				}
				if err == nil {
					err = o.Unlock()
				}
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, func() bool {
					rec.mu.Lock()
					defer rec.mu.Unlock()
					return g.Confirmed() >= 1 && len(rec.released) == 1 // (the driver tells it)
				})
				rec.mu.Lock()
				rec.released = nil
				rec.mu.Unlock()
			}
			var o *dlock.Owner
			var err error
			var key string
			var free func() bool // another process takes it at once
			switch kind {
			case "mutex":
				l := mustGen(t, g, "CLOSELOST", tg, 5*time.Second)
				key = l.Config().UniqueKey()
				o, err = l.Lock(ctx)
				free = func() bool {
					o, ok, err := mustGen(t, other, "CLOSELOST", tg, 5*time.Second).TryLock(ctx)
					return err == nil && ok && o.Unlock() == nil
				}
			case "read", "write":
				rw := rwOf(t, g, tg)
				key = rw.Config().UniqueKey()
				if kind == "read" {
					o, err = rw.RLock(ctx)
				} else {
					o, err = rw.Lock(ctx)
				}
				free = func() bool {
					o, ok, err := rwOf(t, other, tg).TryLock(ctx)
					return err == nil && ok && o.Unlock() == nil
				}
			case "permits":
				sem := semOf(t, g, tg, 1)
				key = sem.Config().UniqueKey()
				o, err = sem.Acquire(ctx, 1)
				free = func() bool {
					o, ok, err := semOf(t, other, tg, 1).TryAcquire(ctx, 1)
					return err == nil && ok && o.Unlock() == nil
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			g.Lapse(key)
			if err := g.Close(ctx); err != nil {
				t.Errorf("Close = %v, want nil: the holding was lost, Redis did not fail", err)
			}
			rec.mu.Lock()
			lost, released := len(rec.lost), len(rec.released)
			rec.mu.Unlock()
			if lost != 1 || released != 0 {
				t.Errorf("at Close's return the Observer heard %d losses and %d releases, want 1 and 0", lost, released)
			}
			if cause := context.Cause(o); !errors.Is(cause, dlock.ErrLockLost) {
				t.Errorf("the Owner ended with %v, want the loss", cause)
			}
			if err := o.Unlock(); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("Unlock = %v, want the loss", err)
			}
			if !free() {
				t.Error("after Close another process could not take the lock: the key was not given back")
			}
		})
	}
}

// slowLoss is a recorder whose Lost takes a while before it records.
type slowLoss struct{ recorder }

func (r *slowLoss) Lost(e dlock.LossEvent) {
	time.Sleep(100 * time.Millisecond)
	r.recorder.Lost(e)
}

// Close stops the poller of a process that waits in line: no timer of it is left set (it would
// keep the Generator's state until it fired, a third of the lease later).
func TestCloseStopsThePollers(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	const lease = 30 * time.Second
	ga, _ := newGen(t)
	tg := target(t)
	la := mustGen(t, ga, "CLOSEPOLL", tg, lease)
	h, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(h) //nolint:errcheck
	c := srv.Client()
	defer c.Close()
	gb, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lb := mustGen(t, gb, "CLOSEPOLL", tg, lease)
	done := make(chan error, 1)
	go func() { _, err := lb.Lock(ctx); done <- err }()
	var due func() (time.Time, bool)
	waitFor(t, func() bool {
		if due = gb.PollDue(key(lb)); due == nil {
			return false
		}
		at, ok := due()
		return ok && time.Until(at) > 5*time.Second // (an answer that showed it waiting, heard)
	})
	if err := gb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "the waiting Lock"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("the waiting Lock returned %v, want ErrClosed", err)
	}
	if at, ok := due(); ok {
		t.Fatalf("after Close returned, a poll is still set, due in %v", time.Until(at).Round(time.Millisecond))
	}
}

// Close is bounded by its ctx during a partition also while a subscription connection is being
// dialled, which closing the subscriptions waits for: a read lock and a semaphore's permits
// asked during the partition subscribe the process's channel of the lock, and Close with a
// short ctx returns with ctx's error, not once the dial gives up (a minute here).
func TestCloseDuringAPartitionWhileSubscribing(t *testing.T) {
	for _, kind := range []string{"rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			g, p := partitionable(t)
			tg := uniqueTarget(t)
			rw, sem := rwOf(t, g, tg), semOf(t, g, tg, 1)
			p.Blackhole(true)
			asked := make(chan error, 1)
			go func() {
				var err error
				if kind == "rw" {
					_, err = rw.RLock(context.Background())
				} else {
					_, err = sem.Acquire(context.Background(), 1)
				}
				asked <- err
			}()
			waitFor(t, func() bool { return p.Stats().Accepted > 1 }) // the subscription's connection, dialling
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			closed := make(chan error, 1)
			go func() { closed <- g.Close(ctx) }()
			if err := recv(t, closed, "Close"); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Close = %v, want ctx's error", err)
			}
			if err := recv(t, asked, "the waiting acquisition"); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("the waiting acquisition returned %v, want ErrClosed", err)
			}
		})
	}
}

// Close while a request of the lock family is on its way (a waiter's take, a holding's
// renewal) counts no Redis error: RedisError is for Redis failing, not for a request Close
// cancelled, as for the mutex.
func TestFamilyCloseCountsNoRedisError(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"take", "renew"} {
		t.Run(op, func(t *testing.T) {
			tg := uniqueTarget(t)
			ctx := ctxT(t, 30*time.Second)
			other, _ := newGen(t)
			held, err := semOf(t, other, tg, 1).Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock()
			rec := &recorder{}
			var slow atomic.Bool // the requests of op go slowly once set
			var sent atomic.Int32
			c := srv.Client()
			c.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if slow.Load() && sharedArg(cmd.Args(), "op") == op {
					sent.Add(1)
					time.Sleep(300 * time.Millisecond) // (within the request's bound, a third of the lease)
				}
				return next(ctx, cmd)
			}})
			defer c.Close()
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(3*time.Second), dlock.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			var o *dlock.Owner
			if op == "take" {
				slow.Store(true)
				go func() { _, _ = semOf(t, g, tg, 1).Acquire(ctx, 1) }() // it waits
			} else {
				if o, err = semOf(t, g, tg+"-2", 1).Acquire(ctx, 1); err != nil { // (kept: an Owner dropped is released)
					t.Fatal(err)
				}
				slow.Store(true) // its renewal comes at three quarters of the lease
			}
			waitFor(t, func() bool { return sent.Load() > 0 })
			if err := g.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if o != nil && !errors.Is(context.Cause(o), dlock.ErrClosed) {
				t.Fatalf("the Owner after Close: %v, want ErrClosed", context.Cause(o))
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.redisErrs) > 0 {
				t.Fatalf("Close counted Redis errors: %+v", rec.redisErrs)
			}
		})
	}
}

// The first in line goes away (its Generator closed) while a holder holds: its Lock returns
// ErrClosed, and the next waiter still waits for the holder's Unlock, then gets the lock.
// Ports etcd's TestMutexWaitsOnCurrentHolder.
func TestClosedWaiterLeavesTheNextWaitingForTheHolder(t *testing.T) {
	g1, _ := newGen(t)
	victim, _ := newGen(t)
	g3, _ := newGen(t)
	l1, _ := g1.Gen("VANISH", target(t))
	lv, _ := victim.Gen("VANISH", target(t))
	l3, _ := g3.Gen("VANISH", target(t))
	ctx := ctxT(t, 15*time.Second)
	o := mustLock(t, l1, ctx)
	vdone := lockOnce(ctx, lv)
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 1 })
	newOwner := lockAsync(t, l3, ctx)
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 2 })
	if err := victim.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, vdone, "the closed waiter's Lock"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("a waiter whose Generator closed = %v, want ErrClosed", err)
	}
	waitFor(t, func() bool { return len(stateOf(t, l1).Waiting) == 1 })
	notYet(t, newOwner, "the next waiter got the lock before the holder unlocked")
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	o3 := recv(t, newOwner, "the next waiter's Lock")
	if o3 == nil {
		t.FailNow()
	}
	if err := o3.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// closingObserver closes its Generator when it is told of the at'th acquisition after it was
// armed (at > 0). Acquired is called on the acquiring goroutine once the lock is the
// acquisition's and before Lock returns, so Close falls between the two: an Observer calling
// back into the lock, which the Observer's doc forbids, as a test's seam. It counts the
// acquisitions and releases it is told of.
type closingObserver struct {
	dlock.NopObserver
	g                  *dlock.Generator
	at                 atomic.Int32
	acquired, released atomic.Int32
}

func (o *closingObserver) Acquired(dlock.AcquireEvent) {
	o.acquired.Add(1)
	if o.at.Load() > 0 && o.at.Add(-1) == 0 {
		_ = o.g.Close(context.Background())
	}
}

func (o *closingObserver) Released(dlock.ReleaseEvent) { o.released.Add(1) }

// everyLock is a mutex, a semaphore (of 3 permits) and a read-write lock of one Generator.
type everyLock struct {
	g   *dlock.Generator
	l   *dlock.DistributedReentrantLock
	sem *dlock.Semaphore
	rw  *dlock.RWLock
}

// A Lock or TryLock of the lock family that Close overtakes — after the lock became the
// acquisition's, before it returned — returns ErrClosed and no Owner, as the mutex's does (its
// rows here): never nil with an Owner whose holding Close has let go in Redis, where another
// process may take it. So do each side of a read-write lock, a semaphore's permits, a
// downgrade, a process that holds permits asking for more, a re-entry (Close comes as it
// begins: WithReentering) and a MultiLock whose last part is of the family. Close leaves
// nothing in Redis, and the Observer hears every acquisition it was told of released.
func TestFamilyLockThatLosesTheRaceToCloseReturnsErrClosed(t *testing.T) {
	type acquire func(ctx context.Context) (*dlock.Owner, error)
	try := func(f func(context.Context) (*dlock.Owner, bool, error)) acquire {
		return func(ctx context.Context) (*dlock.Owner, error) {
			o, ok, err := f(ctx)
			if err == nil && !ok {
				err = errors.New("TryLock found the lock held")
			}
			return o, err
		}
	}
	for _, tc := range []struct {
		name string
		// prepare takes what the row needs first and returns the acquisition that races Close:
		// the Observer closes at its closeAt'th acquisition, or (closeAt 0) Close comes as its
		// re-entry begins.
		prepare func(ctx context.Context, k everyLock) (acquire, error)
		closeAt int32
	}{
		{"mutex Lock", func(_ context.Context, k everyLock) (acquire, error) { return k.l.Lock, nil }, 1},
		{"mutex TryLock", func(_ context.Context, k everyLock) (acquire, error) { return try(k.l.TryLock), nil }, 1},
		{"RLock", func(_ context.Context, k everyLock) (acquire, error) { return k.rw.RLock, nil }, 1},
		{"Lock", func(_ context.Context, k everyLock) (acquire, error) { return k.rw.Lock, nil }, 1},
		{"Acquire", func(_ context.Context, k everyLock) (acquire, error) { return k.sem.Permits(2).Lock, nil }, 1},
		{"TryRLock", func(_ context.Context, k everyLock) (acquire, error) { return try(k.rw.TryRLock), nil }, 1},
		{"TryLock", func(_ context.Context, k everyLock) (acquire, error) { return try(k.rw.TryLock), nil }, 1},
		{"TryAcquire", func(_ context.Context, k everyLock) (acquire, error) { return try(k.sem.Permits(1).TryLock), nil }, 1},
		{"RLock downgrading the write side", func(ctx context.Context, k everyLock) (acquire, error) {
			w, err := k.rw.Lock(ctx)
			return func(context.Context) (*dlock.Owner, error) { return k.rw.RLock(w) }, err
		}, 1},
		{"Acquire more permits than the process holds", func(ctx context.Context, k everyLock) (acquire, error) {
			held, err := k.sem.Acquire(ctx, 1)
			return func(ctx context.Context) (*dlock.Owner, error) {
				defer runtime.KeepAlive(held) // (an Owner dropped is released: it must hold as the row races)
				return k.sem.Permits(2).Lock(ctx)
			}, err
		}, 1},
		{"RLock re-entered", func(ctx context.Context, k everyLock) (acquire, error) {
			r, err := k.rw.RLock(ctx)
			return func(context.Context) (*dlock.Owner, error) { return k.rw.RLock(r) }, err
		}, 0},
		{"TryLock re-entered", func(ctx context.Context, k everyLock) (acquire, error) {
			w, err := k.rw.Lock(ctx)
			return func(context.Context) (*dlock.Owner, error) { return try(k.rw.TryLock)(w) }, err
		}, 0},
		{"Acquire re-entered", func(ctx context.Context, k everyLock) (acquire, error) {
			p, err := k.sem.Acquire(ctx, 1)
			return func(context.Context) (*dlock.Owner, error) { return k.sem.Acquire(p, 1) }, err
		}, 0},
		{"MultiLock of permits and a read side", func(_ context.Context, k everyLock) (acquire, error) {
			m, err := k.g.MultiOf(k.sem.Permits(1), k.rw.ReadSide())
			if err != nil {
				return nil, err
			}
			return m.Lock, nil
		}, 2},
		{"MultiLock TryLock of a mutex and a write side", func(_ context.Context, k everyLock) (acquire, error) {
			m, err := k.g.MultiOf(k.l, k.rw.WriteSide())
			if err != nil {
				return nil, err
			}
			return try(m.TryLock), nil
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			obs := &closingObserver{}
			var reentering atomic.Bool
			g, _ := newGen(t, dlock.WithObserver(obs), dlock.WithReentering(func() {
				if reentering.CompareAndSwap(true, false) {
					_ = obs.g.Close(context.Background())
				}
			}))
			obs.g = g
			tg := uniqueTarget(t)
			k := everyLock{g: g}
			k.l, k.sem, k.rw = everyKind(t, g, tg, 3)
			race, err := tc.prepare(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if tc.closeAt > 0 {
				obs.at.Store(tc.closeAt)
			} else {
				reentering.Store(true)
			}
			o, err := race(ctx)
			if o != nil || !errors.Is(err, dlock.ErrClosed) {
				cause := "none"
				if o != nil {
					cause = fmtCause(o)
				}
				t.Fatalf("an acquisition Close overtook = %v, %v (its Owner's cause: %s); want ErrClosed and no Owner", o, err, cause)
			}
			if obs.at.Load() > 0 || reentering.Load() {
				t.Fatal("setup: Close was never called")
			}
			other, _ := newGen(t)
			ol, osem, orw := everyKind(t, other, tg, 3)
			if s := stateOf(t, ol); s.Held() || len(s.Waiting) > 0 {
				t.Errorf("the mutex after Close: %+v", s)
			}
			for name, state := range map[string]func(context.Context) (dlock.SharedState, error){"semaphore": osem.State, "read-write lock": orw.State} {
				if s, err := state(ctx); err != nil || len(s.Holds) > 0 || len(s.Waiting) > 0 {
					t.Errorf("the %s after Close: %+v, %v; want nothing held and nobody in line", name, s, err)
				}
			}
			if a, r := obs.acquired.Load(), obs.released.Load(); a != r {
				t.Errorf("the Observer heard of %d acquisitions and %d releases", a, r)
			}
		})
	}
}

// A MultiLock's re-entry that Close overtakes between its parts — the first re-entered, then
// ended by Close, the last still held as it is re-entered — returns ErrClosed and keeps no
// hold, as a part's own re-entry does: never the MultiLock's Owner, one of whose holdings
// Close has let go. The read-write lock's holding outlives the semaphore's: its Close gives
// back first the attempt of a writer of the process in line, whose release stalls here.
func TestMultiLockReentryThatLosesTheRaceToCloseReturnsErrClosed(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	var (
		g        *dlock.Generator
		owned    *dlock.Owner
		reenters atomic.Int32 // re-entries of a part to let by before the test's step
		closed   = make(chan error, 1)
		stall    atomic.Bool
		stalled  = make(chan struct{}, 8)
		goOn     = make(chan struct{})
	)
	free := sync.OnceFunc(func() { close(goOn) })
	t.Cleanup(free)
	g, c := newGen(t, dlock.WithReentering(func() {
		if reenters.Load() == 0 || reenters.Add(-1) > 0 {
			return
		}
		// The last part is about to be re-entered: Close ends the first, and stalls before
		// it ends the last.
		stall.Store(true)
		go func() { closed <- g.Close(context.Background()) }()
		recv(t, stalled, "the release of the semaphore's holding")
		recv(t, stalled, "the give-back of the writer's attempt")
		<-owned.Done() // (the semaphore's holding ended: the read-hold's is live)
	}))
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if stall.Load() && sharedArg(cmd.Args(), "op") == "release" {
			stalled <- struct{}{}
			<-goOn
		}
		return next(ctx, cmd)
	}})
	tg := uniqueTarget(t)
	_, sem, rw := everyKind(t, g, tg, 2)
	m, err := g.MultiOf(sem.Permits(1), rw.ReadSide())
	if err != nil {
		t.Fatal(err)
	}
	if p := m.Parts(); p[1].Kind() != dlock.KindRead {
		t.Fatalf("setup: parts %v %v; want the read side last", p[0].Kind(), p[1].Kind())
	}
	if owned, err = m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	writer := make(chan error, 1)
	go func() { _, err := rw.Lock(ctx); writer <- err }()
	other, _ := newGen(t)
	_, osem, orw := everyKind(t, other, tg, 2)
	waitFor(t, func() bool { s, err := orw.State(ctx); return err == nil && len(s.Waiting) == 1 })

	reenters.Store(2)
	o, err := m.Lock(owned)
	free()
	if o != nil || !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("a re-entry Close overtook = %v, %v (its Owner's cause: %s); want ErrClosed and no Owner", o, err, fmtCause(owned))
	}
	if err := recv(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, writer, "the waiting writer"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("the waiting writer = %v, want ErrClosed", err)
	}
	for name, state := range map[string]func(context.Context) (dlock.SharedState, error){"semaphore": osem.State, "read-write lock": orw.State} {
		if s, err := state(ctx); err != nil || len(s.Holds) > 0 || len(s.Waiting) > 0 {
			t.Errorf("the %s after Close: %+v, %v; want nothing held and nobody in line", name, s, err)
		}
	}
}

// A TryLock that Close overtakes and whose own deadline passes before it returns says
// ErrClosed, or ErrNotObtained with the deadline: Close cut its request short (the error
// reads "context canceled"), and by the time the TryLock looked its caller's deadline had
// passed too. It returned that cancellation alone, matching neither ErrClosed nor
// ErrNotObtained nor the caller's context.DeadlineExceeded (a churn of short-deadline TryLocks
// with Close in the middle met it a few times in a million). The deadline passes, here, as the
// library logs that the attempt got no answer: on the TryLock's goroutine, after Close ended
// the request and before the TryLock decides what it returns.
func TestTryLockOvertakenByCloseAsItsDeadlinePasses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var once sync.Once
	core, _ := zapobserver.New(zap.DebugLevel)
	logger := zap.New(core).WithOptions(zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == "dlock: attempt without an answer" {
			once.Do(func() { <-ctx.Done() })
		}
		return nil
	}))
	g, c := newGen(t, dlock.WithLogger(logger))
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	sent := make(chan struct{}, 1)
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if scriptIs("lock")(cmd.Args()) {
			select {
			case sent <- struct{}{}:
				<-release // a server that does not answer, a client that waits for it
			default:
			}
		}
		return next(ctx, cmd)
	}})
	l, _ := g.Gen("CLOSEDEADLINE", target(t))
	got := make(chan error, 1)
	go func() {
		_, _, err := l.TryLock(ctx)
		got <- err
	}()
	recv(t, sent, "the request")
	cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = g.Close(cctx) // (returns at its ctx: the request is still inside the client)
	ccancel()
	err := recv(t, got, "the TryLock")
	if !errors.Is(err, dlock.ErrClosed) && !(errors.Is(err, dlock.ErrNotObtained) && errors.Is(err, context.DeadlineExceeded)) {
		t.Errorf("TryLock: %v, want ErrClosed (or ErrNotObtained and the deadline)", err)
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

// Close lets go of the locks it holds side by side, not one round trip after another: a
// process holding many keys would otherwise take (keys × round trip) to close, and with a
// bounded ctx leave the keys it did not reach locked for a lease. Each release here waits
// until another one is under way (5 s at most): one at a time, none ever sees another.
func TestCloseReleasesTheHeldLocksSideBySide(t *testing.T) {
	srv.NeedReal(t)
	const held = 4
	var inFlight, peak atomic.Int32
	c := srv.Client()
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !scriptIs("release")(cmd.Args()) {
			return next(ctx, cmd)
		}
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		rgWaitUntil(5*time.Second, func() bool { return peak.Load() >= 2 })
		return next(ctx, cmd)
	}})
	g := genOn(t, c, dlock.WithDefaultLease(time.Minute))
	owners := make([]*dlock.Owner, 0, held)
	for i := range held {
		l := mustGen(t, g, "CLOSEPAR", target(t)+"."+strconv.Itoa(i), time.Minute)
		owners = append(owners, mustLock(t, l, ctxT(t, 5*time.Second)))
	}
	if err := g.Close(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if !errors.Is(context.Cause(o), dlock.ErrClosed) {
			t.Fatalf("an owner context ended with %v, want ErrClosed", context.Cause(o))
		}
	}
	if p := peak.Load(); p < 2 {
		t.Fatalf("Close released its %d held locks one at a time (at most %d release under way at once)", held, p)
	}
	admin := rawClient(t)
	for i := range held {
		if k := rgLockKey("CLOSEPAR", target(t)+"."+strconv.Itoa(i)); admin.Exists(rgBG(), k).Val() != 0 {
			t.Fatalf("%s is still in Redis after Close", k)
		}
	}
}

// A Close after one that gave up (its ctx ended while Redis did not answer) returns the first
// one's error, as does one that waited for it: the mutex the first left held is still held in
// Redis, and a nil would say that everything was let go (it did, before). (The partition
// lasts until the test ends: once it heals, the release held on the wire reaches Redis.)
func TestCloseAfterOneThatGaveUpSaysSo(t *testing.T) {
	g, p := partitionable(t)
	raw := rawClient(t)
	ctx := ctxT(t, 30*time.Second)
	l := mustGen(t, g, "CLOSEAGAIN", target(t), 5*time.Second)
	o := mustLock(t, l, ctx) // (kept: an Owner dropped is released, perhaps before the partition)
	holder := raw.Get(ctx, key(l)).Val()
	p.Blackhole(true)
	first, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- g.Close(first) }()
	waitFor(t, func() bool { _, err := g.Gen("CLOSEAGAIN", "x"); return errors.Is(err, dlock.ErrClosed) })
	if err := g.Close(ctx); err == nil { // (waits for the first)
		t.Error("a Close that waited for one that gave up returned nil")
	}
	if err := recv(t, gaveUp, "Close"); err == nil {
		t.Fatal("Close gave up at its deadline but reported no error")
	}
	if err := g.Close(ctx); err == nil {
		t.Error("a Close after one that gave up returned nil")
	}
	if !errors.Is(context.Cause(o), dlock.ErrClosed) {
		t.Errorf("the Owner after Close: %v, want ErrClosed", context.Cause(o))
	}
	if got, err := raw.Get(ctx, key(l)).Result(); got != holder {
		// (what Redis keeps of the lock tells a release that reached it from an expiry)
		var kept []string
		for _, k := range raw.Keys(ctx, "*"+key(l)+"*").Val() {
			kept = append(kept, fmt.Sprintf("%s (%s, ttl %v)", k, raw.Type(ctx, k).Val(), raw.PTTL(ctx, k).Val()))
		}
		t.Fatalf("the key holds %q (%v), want %q still (left by the Close that gave up); the lock's keys: %v; proxy: %+v",
			got, err, holder, kept, p.Stats())
	}
}

// A Close of a process waiting for a mutex while Redis does not answer takes it out of the
// key's line once Redis answers again, before it returns nil, as it does for the read-write
// lock and the semaphore: its leave was tried once and dropped, so its entry stayed in line
// (without notifications the holder's release then granted the key to the closed process,
// and a process behind it waited a lease).
func TestCloseLeavesTheLineWhenRedisComesBack(t *testing.T) {
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	short := 200 * time.Millisecond
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: short, ReadTimeout: short, WriteTimeout: short})
	defer c.Close()
	const lease = 3 * time.Second
	ga, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease), dlock.WithNotifications(false))
	if err != nil {
		t.Fatal(err)
	}
	gb, _ := newGen(t)
	ctx := ctxT(t, 30*time.Second)
	la, lb := mustGen(t, ga, "CLOSELEAVE", target(t), lease), mustGen(t, gb, "CLOSELEAVE", target(t), lease)
	ob := mustLock(t, lb, ctx)
	defer ob.Unlock()
	waited := make(chan error, 1)
	go func() { _, err := la.Lock(ctx); waited <- err }()
	waitFor(t, func() bool { return len(stateOf(t, lb).Waiting) == 1 })
	a := stateOf(t, lb).Waiting[0]
	p.Blackhole(true)
	go func() { time.Sleep(4 * short); p.Blackhole(false) }()
	if err := ga.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := recv(t, waited, "A's Lock"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("A's Lock: %v, want ErrClosed", err)
	}
	if w := stateOf(t, lb).Waiting; slices.Contains(w, a) {
		t.Fatalf("after A's Close returned nil A (%s) still waits in line: %v", a, w)
	}
}

// A Cluster client on a server without Cluster (a newcomer's mistake) fails each request at
// the question asked before it, whether the servers have sharded pub/sub (COMMAND INFO):
// nothing of the attempt is sent, so Close has no line to leave and nothing to give back, for
// any kind. It waited for leaves and give-backs that failed the same way until the entry would
// have expired: a lease (20 s in a trial; here its 10 s bound ended it first).
func TestCloseAfterAttemptsNeverSent(t *testing.T) {
	if !srv.Real {
		t.Skip(srv.Why)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	defer c.Close()
	const lease = time.Minute
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	const cause = "cluster support disabled"
	m := mustGen(t, g, "NEVERSENT", target(t), lease)
	if _, err := m.Lock(short()); !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(fmt.Sprint(err), cause) {
		t.Errorf("Lock: %v, want ErrNotObtained naming %q", err, cause)
	}
	if _, ok, err := m.TryLock(ctx); ok || !strings.Contains(fmt.Sprint(err), cause) {
		t.Errorf("TryLock: %v, %v, want an error naming %q", ok, err, cause)
	}
	rw, err := g.GenRW("NEVERSENT", target(t)+"rw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Lock(short()); !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(fmt.Sprint(err), cause) {
		t.Errorf("RWLock.Lock: %v, want ErrNotObtained naming %q", err, cause)
	}
	sem, err := g.GenSemaphore("NEVERSENT", target(t)+"sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := sem.TryAcquire(ctx, 1); ok || !strings.Contains(fmt.Sprint(err), cause) {
		t.Errorf("TryAcquire: %v, %v, want an error naming %q", ok, err, cause)
	}
	if _, err := sem.Acquire(short(), 1); !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(fmt.Sprint(err), cause) {
		t.Errorf("Acquire: %v, want ErrNotObtained naming %q", err, cause)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := g.Close(cctx); err != nil {
		t.Fatalf("Close: %v, want nil: no request of the Generator was sent", err)
	}
}

// So it does when the attempt's first request outlived its caller — a Lock's context ended, or
// Close came, while the client still dialled, or while the failure's reply was on its way —
// and failed the same way: nothing of it was sent. (It gave the attempt back until its lease
// ran out: a minute here.) A request whose reply is still on its way runs on after its caller
// left (go-redis gives up waiting for a dial with the context, not for a reply): the Generator
// waits for it to end before it finds that nothing was sent.
func TestCloseAfterLateAttemptsNeverSent(t *testing.T) {
	if !srv.Real {
		t.Skip(srv.Why)
	}
	const lease = time.Minute
	const cause = "cluster support disabled"
	// open makes a Generator whose client holds every dial until dial is closed, telling of
	// its first on dialing.
	open := func(t *testing.T) (g *dlock.Generator, dialing <-chan struct{}, dial chan struct{}) {
		first, dial := make(chan struct{}), make(chan struct{})
		var once sync.Once
		var d net.Dialer
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr},
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				once.Do(func() { close(first) })
				<-dial
				return d.DialContext(ctx, network, addr)
			}})
		t.Cleanup(func() { c.Close() })
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		return g, first, dial
	}
	closeNil := func(t *testing.T, g *dlock.Generator) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			return fmt.Errorf("Close: %w, want nil: no request of the Generator was sent", err)
		}
		return nil
	}
	t.Run("lock's context ends", func(t *testing.T) {
		g, dialing, dial := open(t)
		m := mustGen(t, g, "LATENEVERSENT", target(t), lease)
		ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
		got := make(chan error, 1)
		go func() { _, err := m.Lock(ctx); got <- err }()
		<-dialing
		cancel()
		if err := recv(t, got, "Lock"); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("Lock: %v, want ErrNotObtained", err)
		}
		close(dial) // (the request failed unsent as its context ended)
		if _, ok, err := m.TryLock(ctxT(t, 30*time.Second)); ok || !strings.Contains(fmt.Sprint(err), cause) {
			t.Fatalf("TryLock: %v, %v, want an error naming %q", ok, err, cause)
		}
		if err := closeNil(t, g); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("lock's reply on its way", func(t *testing.T) {
		p, err := faultproxy.New(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		var held atomic.Bool
		p.SetShaper(func(toTarget bool, chunk []byte) time.Duration {
			if !toTarget && strings.Contains(string(chunk), cause) && held.CompareAndSwap(false, true) {
				return 2 * time.Second // the first failure's reply comes after the Lock gave up
			}
			return 0
		})
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{p.Addr()}})
		t.Cleanup(func() { c.Close() })
		const lease = 2 * time.Minute // (a retry's pause, a tenth, past Close's bound)
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		m := mustGen(t, g, "LATENEVERSENT", target(t), lease)
		ctx, cancel := context.WithTimeout(ctxT(t, 30*time.Second), 300*time.Millisecond)
		defer cancel()
		if _, err := m.Lock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("Lock: %v, want ErrNotObtained", err)
		}
		if err := closeNil(t, g); err != nil {
			t.Fatal(err)
		}
	})
	for _, kind := range []string{"read-write lock", "semaphore"} {
		t.Run("close during a take of a "+kind, func(t *testing.T) {
			g, dialing, dial := open(t)
			var take func(context.Context) error
			if kind == "semaphore" {
				sem, err := g.GenSemaphore("LATENEVERSENT", target(t), 2)
				if err != nil {
					t.Fatal(err)
				}
				take = func(ctx context.Context) error { _, err := sem.Acquire(ctx, 1); return err }
			} else {
				rw, err := g.GenRW("LATENEVERSENT", target(t))
				if err != nil {
					t.Fatal(err)
				}
				take = func(ctx context.Context) error { _, err := rw.Lock(ctx); return err }
			}
			got := make(chan error, 1)
			go func() { got <- take(ctxT(t, 30*time.Second)) }()
			<-dialing
			closed := make(chan error, 1)
			go func() { closed <- closeNil(t, g) }()
			if err := recv(t, got, "the take"); !errors.Is(err, dlock.ErrClosed) {
				t.Errorf("take: %v, want ErrClosed", err)
			}
			close(dial) // (the take failed unsent as Close ended its context)
			if err := recv(t, closed, "Close"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Lock that gives up stops its process's retry poller once nobody there waits: its timer
// does not keep the dropped state, nor fire after Close.
func TestGivenUpLockLeavesNoPollerTimer(t *testing.T) {
	const lease = time.Hour
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	la := mustGen(t, ga, "POLLSTOP", target(t), lease)
	lb := mustGen(t, gb, "POLLSTOP", target(t), lease)
	b := mustLock(t, lb, ctxT(t, 5*time.Second))
	defer lb.Unlock(b) //nolint:errcheck
	got := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, err := la.Lock(ctx); got <- err }()
	waitFor(t, func() bool { _, ok := ga.NextPoll(key(la)); return ok })
	due := ga.PollDue(key(la))
	cancel()
	if err := recv(t, got, "a's Lock"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a's Lock: %v", err)
	}
	waitFor(t, func() bool { return ga.InUse() == 0 })
	if err := ga.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if at, set := due(); set {
		t.Errorf("after the state was dropped and its Generator closed, its poller's timer is still set to fire in %v", time.Until(at).Round(time.Second))
	}
}

// A process told it is first in line (F) while no goroutine of it waits — it lingers in line
// after a release that stood it there again — starts no retry poller: its timer would keep
// the state, dropped as the linger ends, and fire after Close (up to half a lease later).
func TestFirstInLineWhileLingeringStartsNoPoller(t *testing.T) {
	srv.NeedReal(t)
	const lease = 6 * time.Second
	gA, _ := newGen(t, dlock.WithDefaultLease(lease))
	gB, _ := newGen(t, dlock.WithDefaultLease(lease))
	gC, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := target(t)
	lA, _ := gA.Gen("POLLSTOP", tg)
	lB, _ := gB.Gen("POLLSTOP", tg)
	lC, _ := gC.Gen("POLLSTOP", tg)
	k := key(lA)
	bg := context.Background()
	// C holds; A waits in Redis, then is granted the key; B, then C, wait behind A.
	oC := mustLock(t, lC, ctxT(t, 5*time.Second))
	chA := lockAsync(t, lA, ctxT(t, 10*time.Second))
	waitFor(t, func() bool { s, _ := lA.State(bg); return len(s.Waiting) == 1 })
	if err := oC.Unlock(); err != nil {
		t.Fatal(err)
	}
	oA := recv(t, chA, "A's lock")
	chB := lockAsync(t, lB, ctxT(t, 10*time.Second))
	waitFor(t, func() bool { s, _ := lA.State(bg); return len(s.Waiting) == 1 })
	cctx, ccancel := context.WithCancel(bg)
	defer ccancel()
	cDone := make(chan error, 1)
	go func() { _, err := lC.Lock(cctx); cDone <- err }()
	waitFor(t, func() bool { s, _ := lA.State(bg); return len(s.Waiting) == 2 })
	gA.Relock(400 * time.Millisecond) // A's Unlock stands in line again (after C) and lingers
	if err := oA.Unlock(); err != nil {
		t.Fatal(err)
	}
	oB := recv(t, chB, "B's lock (granted by A's release)")
	defer oB.Unlock() //nolint:errcheck
	if !gA.Lingering(k) {
		t.Fatal("A does not linger after its release")
	}
	due := gA.PollDue(k)
	heard := gA.Heard()
	ccancel() // C gives up: its leave tells A, first in line now, F
	<-cDone
	waitFor(t, func() bool { return gA.Heard() > heard })
	if at, set := due(); set && gA.Lingering(k) {
		t.Errorf("A lingers with no goroutine waiting, and its poller is set to fire in %v", time.Until(at).Round(time.Millisecond))
	}
	waitFor(t, func() bool { return gA.InUse() == 0 }) // the linger ends, A leaves the line
	if err := gA.Close(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if at, set := due(); set {
		t.Errorf("after A's state was dropped and its Generator closed, its poller is set to fire in %v", time.Until(at).Round(time.Millisecond))
	}
}

// A Close whose release Redis never answers (nor the retries of it, until its lease ran out)
// reports a *RedisProcessError naming the key, for the mutex, the read-write lock and the
// semaphore alike: not a bare deadline, which says nothing of Redis and reads as Close's own
// context ending.
func TestCloseReportsAReleaseRedisNeverAnswered(t *testing.T) {
	for _, kind := range []string{"mutex", "rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			c := srv.Client()
			defer c.Close()
			var silent atomic.Bool
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if !silent.Load() || !isRelease(cmd.Args()) {
					return next(ctx, cmd)
				}
				<-ctx.Done() // no answer, and the client gives up a little after the request's context
				time.Sleep(50 * time.Millisecond)
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}})
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 30*time.Second)
			tg := uniqueTarget(t)
			var owned *dlock.Owner
			switch kind {
			case "mutex":
				owned, err = mustGen(t, g, "CLOSESILENT", tg, time.Second).Lock(ctx)
			case "rw":
				owned, err = rwOf(t, g, tg).Lock(ctx)
			default:
				owned, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			silent.Store(true)
			err = g.Close(ctx)
			var pe *dlock.RedisProcessError
			if !errors.As(err, &pe) || ctx.Err() != nil {
				t.Fatalf("Close with its release never answered = %v (%T), want a *RedisProcessError", err, err)
			}
			if !errors.Is(context.Cause(owned), dlock.ErrClosed) {
				t.Fatalf("the Owner after Close: %v, want ErrClosed", context.Cause(owned))
			}
		})
	}
}

// A Close that finds the holding it closes gone from Redis before its lease ran out (removed
// behind its back: an operator's removal, an empty restart) reports the loss as an Unlock that
// finds it does, whether its release finds it at once or when sent again after a failure, for
// the mutex, the read-write lock and the semaphore alike: the Observer is told of the loss
// after the holding's release (ErrClosed), and the loss is logged at Warn. Close itself
// returns nil: nothing of the holding stays held.
func TestCloseThatFindsTheHoldingGoneReportsTheLoss(t *testing.T) {
	for _, kind := range []string{"mutex", "rw", "sem"} {
		for _, when := range []string{"at once", "when retried"} {
			t.Run(kind+" "+when, func(t *testing.T) {
				c := srv.Client()
				defer c.Close()
				admin := rawClient(t)
				var armed atomic.Bool
				c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
					args := cmd.Args()
					if !isRelease(args) || !armed.CompareAndSwap(true, false) {
						return next(ctx, cmd)
					}
					wipeScriptKeys(ctx, admin, args) // removed behind its back as Close lets it go
					if when == "when retried" {
						cmd.SetErr(errInjected) // (unsent: sent again)
						return errInjected
					}
					return next(ctx, cmd)
				}})
				obs := &releaseThenLoss{lostCame: make(chan struct{})}
				core, logs := zapobserver.New(zap.WarnLevel)
				g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(5*time.Second), dlock.WithObserver(obs), dlock.WithLogger(zap.New(core)))
				if err != nil {
					t.Fatal(err)
				}
				ctx := ctxT(t, 10*time.Second)
				tg := uniqueTarget(t)
				var o *dlock.Owner
				var token func() (uint64, bool)
				switch kind {
				case "mutex":
					l := mustGen(t, g, "CLOSEGONE", tg, 5*time.Second)
					if o, err = l.Lock(ctx); err == nil {
						token = func() (uint64, bool) { return l.FencingToken(o) }
					}
				case "rw":
					rw := rwOf(t, g, tg)
					if o, err = rw.Lock(ctx); err == nil {
						token = func() (uint64, bool) { return rw.FencingToken(o) }
					}
				default:
					sem := semOf(t, g, tg, 2)
					if o, err = sem.Acquire(ctx, 1); err == nil {
						token = func() (uint64, bool) { return sem.FencingToken(o) }
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				tok, _ := token()
				armed.Store(true)
				if err := g.Close(ctxT(t, 20*time.Second)); err != nil {
					t.Fatalf("Close = %v, want nil: nothing of the holding stays held", err)
				}
				if armed.Load() {
					t.Fatal("setup: Close sent no release")
				}
				if cause := context.Cause(o); !errors.Is(cause, dlock.ErrClosed) {
					t.Fatalf("the owner context ended with %v, want ErrClosed", cause)
				}
				obs.mu2.Lock()
				order := slices.Clone(obs.order)
				obs.mu2.Unlock()
				obs.mu.Lock()
				lost := slices.Clone(obs.lost)
				obs.mu.Unlock()
				if !slices.Equal(order, []string{"released", "lost"}) || lost[0].Token != tok || !errors.Is(lost[0].Cause, dlock.ErrLockLost) {
					t.Fatalf("the Observer was told %v (losses %+v); want the release, then the loss of the holding (token %d) matching ErrLockLost", order, lost, tok)
				}
				warning := "dlock: lock lost before release"
				if kind != "mutex" {
					warning = "dlock: shared holding lost"
				}
				if n := namingLocker(logs.FilterMessage(warning)).Len(); n != 1 {
					t.Fatalf("%d warnings %q naming the locker; want 1", n, warning)
				}
			})
		}
	}
}

// A Close whose release finds a read-write lock's or semaphore's holding gone only after the
// holding's lease ran out reports no loss: the release, held up on its way, ran after the
// lease, and what Redis kept of the holding could have gone with it then (here an empty
// restart after the lease; Close stopped the renewals; a try cut short by its bound finds it
// gone when sent again). Nothing is told to the Observer or logged as a loss, as the mutex's
// retried release judges it (by its answer's arrival). Every renewal fails, and Close comes a
// second before the lease's end, less than a third of the lease (a family request's bound), so
// that its release is answered within its bound, after the lease.
func TestCloseThatFindsTheHoldingGoneAfterItsLeaseReportsNoLoss(t *testing.T) {
	const lease = 6 * time.Second
	for _, kind := range []string{"rw", "sem"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c := srv.Client()
			defer c.Close()
			admin := rawClient(t)
			var armed atomic.Bool
			var heldUntil atomic.Int64 // the lease's end, by the time the take returned (unix ns)
			var gone atomic.Bool       // the release, late, ran and found nothing of the holding
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				args := cmd.Args()
				switch {
				case armed.Load() && sharedArg(args, "op") == "renew":
					cmd.SetErr(errInjected) // (unsent)
					return errInjected
				case isRelease(args):
					if armed.CompareAndSwap(true, false) {
						// held up on its way until the lease has run out, and Redis restarts
						// empty before it runs (a try it cut short is sent again)
						time.Sleep(time.Until(time.Unix(0, heldUntil.Load()).Add(50 * time.Millisecond)))
						wipeScriptKeys(context.Background(), admin, args)
					}
					err := next(ctx, cmd)
					if v, ok := reply(cmd); ok && err == nil && fmt.Sprint(v) == "[0]" { // (gone)
						gone.Store(true)
					}
					return err
				}
				return next(ctx, cmd)
			}})
			obs := &recorder{}
			core, logs := zapobserver.New(zap.WarnLevel)
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease), dlock.WithObserver(obs), dlock.WithLogger(zap.New(core)))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 30*time.Second)
			tg := uniqueTarget(t)
			var o *dlock.Owner // (kept: an Owner dropped is released)
			switch kind {
			case "rw":
				o, err = rwOf(t, g, tg).Lock(ctx)
			default:
				o, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			heldUntil.Store(time.Now().Add(lease).UnixNano()) // (the take was sent and ran before now)
			armed.Store(true)
			time.Sleep(time.Until(time.Unix(0, heldUntil.Load()).Add(-time.Second))) // (its release is cut at a third of the lease)
			_ = g.Close(ctxT(t, 20*time.Second))                                     // (a release answered after the lease may be reported failed)
			if armed.Load() {
				t.Fatal("setup: Close sent no release")
			}
			if cause := context.Cause(o); !errors.Is(cause, dlock.ErrClosed) {
				t.Fatalf("the owner context ended with %v, want ErrClosed", cause)
			}
			if !gone.Load() {
				t.Fatal("setup: no release found the holding gone")
			}
			noLossTold(t, obs, logs, "the release came after the lease")
		})
	}
}

// A Generator made and Closed hundreds of times in one process, each taking a lock once (a
// mutex, a read-write lock's write side, a semaphore's permits; some with a context that has
// already ended): nothing is left of them — no goroutine, no subscription (no channel of the
// locks has a subscriber), no connection beyond the client's pool.
func TestGeneratorsMadeAndClosedInALoopLeaveNothing(t *testing.T) {
	srv.NeedReal(t)
	const poolSize = 4
	before := goleak.IgnoreCurrent()
	name := fmt.Sprintf("genloop-%d", time.Now().UnixNano())
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: poolSize, ClientName: name})
	defer c.Close()
	raw := rawClient(t)
	ctx := ctxT(t, 2*time.Minute) // a hang, not a slow machine
	conns := func() int {
		n := 0
		for _, line := range strings.Split(raw.ClientList(ctx).Val(), "\n") {
			if strings.Contains(line, " name="+name+" ") {
				n++
			}
		}
		return n
	}
	tg := target(t)
	// another process holds the lock for a moment in every other round: the round's
	// Generator waits in line, and subscribes to hear its grant
	gh, _ := newGen(t)
	parts := func(g *dlock.Generator, i int) (dlock.Part, error) {
		switch i % 3 {
		case 0:
			return g.Gen("GENLOOP", tg)
		case 1:
			l, err := g.GenRW("GENLOOP", tg+".rw")
			if err != nil {
				return nil, err
			}
			return l.WriteSide(), nil
		}
		s, err := g.GenSemaphore("GENLOOP", tg+".sem", 3)
		if err != nil {
			return nil, err
		}
		return s.Permits(3), nil
	}
	subscribed := 0
	for i := range 300 {
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithCancel(ctx)
		if i%5 == 4 {
			cancel() // a context that ends at once
		}
		var o *dlock.Owner
		if i%2 == 0 {
			ph, err := parts(gh, i)
			if err != nil {
				t.Fatal(err)
			}
			h, err := ph.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(time.Duration(1+i%5)*time.Millisecond, func() {
				if err := ph.Unlock(h); err != nil {
					t.Errorf("the other process's Unlock: %v", err)
				}
			})
		}
		p, err := parts(g, i)
		if err == nil {
			o, err = p.Lock(lctx)
		}
		cancel()
		if g.Subscribed() > 0 {
			subscribed++
		}
		switch {
		case err == nil:
			if i%7 != 0 { // (else Close lets it go)
				if err := o.Unlock(); err != nil {
					t.Fatalf("round %d: Unlock: %v", i, err)
				}
			}
		case i%5 == 4 && errors.Is(err, dlock.ErrNotObtained):
		default:
			t.Fatalf("round %d: %v", i, err)
		}
		if err := g.Close(ctx); err != nil {
			t.Fatalf("round %d: Close: %v", i, err)
		}
	}
	if err := gh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(raw.PubSubChannels(ctx, "*"+tg+"*").Val()) == 0 })
	if n := conns(); n > poolSize {
		t.Errorf("%d connections of the client after every Generator closed, its pool holds at most %d", n, poolSize)
	}
	churnLeaks(t, before)
	// (what a Close let go is gone at once; a side key may outlive it by its short life)
	held := func() (ks []string) {
		for _, k := range raw.Keys(ctx, "*GENLOOP_"+tg+"*").Val() {
			if strings.HasPrefix(k, "DLOCK_") || churnHeldSuffix(k) {
				ks = append(ks, fmt.Sprintf("%s (PTTL %v)", k, raw.PTTL(ctx, k).Val()))
			}
		}
		return ks
	}
	t.Logf("%d of 300 Generators subscribed as they closed; %d connections of the client left; right after the last Close: %v", subscribed, conns(), held())
	if subscribed == 0 {
		t.Errorf("no Generator waited in line: the rounds test nothing of subscriptions")
	}
	waitFor(t, func() bool { return len(held()) == 0 })
}

// After Close every call of every handle of the Generator says ErrClosed — with a context that
// owned a holding Close ended, and with one that owns nothing, as Unlock's doc says and as
// every call documents "ErrClosed after Close" — the questions answer "nothing held", the
// Generator makes no handle, and nothing Close ended is left held or in line in Redis. (Bad
// arguments are still refused as such, with ErrInvalidConfig.)
func TestEveryCallAfterCloseSaysClosed(t *testing.T) {
	g, _ := newGen(t)
	ctx := ctxT(t, 10*time.Second)
	tg := uniqueTarget(t)
	l, _ := g.Gen("CLOSED", tg)
	rw := rwOf(t, g, tg+"-rw")
	sem := semOf(t, g, tg+"-sem", 3)
	m, err := g.MultiOf(l, rw.WriteSide(), sem.Permits(1))
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := g.Gen("CLOSED", tg+"-2")
	rw2, sem2 := rwOf(t, g, tg+"-rw2"), semOf(t, g, tg+"-sem2", 3)
	o, err := l2.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := rw2.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	so, err := sem2.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	mo, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	_, err = g.Gen("CLOSED", tg)
	closed("Gen", err)
	_, err = g.GenWithLease("CLOSED", tg, time.Second)
	closed("GenWithLease", err)
	_, err = g.GenRW("CLOSED", tg)
	closed("GenRW", err)
	_, err = g.GenSemaphore("CLOSED", tg, 2)
	closed("GenSemaphore", err)
	_, err = g.Multi(l)
	closed("Multi", err)
	_, err = g.MultiOf(rw.ReadSide())
	closed("MultiOf", err)

	for name, owned := range map[string]context.Context{"a context that owns nothing": ctx, "the Owner Close ended": o} {
		_, err = l2.Lock(owned)
		closed("Lock with "+name, err)
		_, _, err = l2.TryLock(owned)
		closed("TryLock with "+name, err)
		closed("Unlock with "+name, l2.Unlock(owned))
		closed("Extend with "+name, l2.Extend(owned, time.Second))
	}
	closed("Do", l.Do(ctx, func(context.Context) error { t.Error("Do ran fn after Close"); return nil }))
	_, err = l.State(ctx)
	closed("State", err)
	_, err = l.ForceRelease(ctx, "x-1")
	closed("ForceRelease", err)
	if _, ok := l2.FencingToken(o); ok || l2.HoldCount(o) != 0 {
		t.Error("a holding Close ended answers held")
	}

	for name, owned := range map[string]context.Context{"a context that owns nothing": ctx, "the Owner Close ended": ro} {
		_, err = rw2.Lock(owned)
		closed("RWLock.Lock with "+name, err)
		_, err = rw2.RLock(owned)
		closed("RWLock.RLock with "+name, err)
		_, _, err = rw2.TryLock(owned)
		closed("RWLock.TryLock with "+name, err)
		_, _, err = rw2.TryRLock(owned)
		closed("RWLock.TryRLock with "+name, err)
		closed("RWLock.Unlock with "+name, rw2.Unlock(owned))
	}
	_, err = rw.State(ctx)
	closed("RWLock.State", err)
	_, err = rw.ForceRelease(ctx, "x-1")
	closed("RWLock.ForceRelease", err)

	for name, owned := range map[string]context.Context{"a context that owns nothing": ctx, "the Owner Close ended": so} {
		_, err = sem2.Acquire(owned, 1)
		closed("Semaphore.Acquire with "+name, err)
		_, _, err = sem2.TryAcquire(owned, 1)
		closed("Semaphore.TryAcquire with "+name, err)
		closed("Semaphore.Release with "+name, sem2.Release(owned))
	}
	_, err = sem.State(ctx)
	closed("Semaphore.State", err)
	closed("Semaphore.SetPermits", sem.SetPermits(ctx, 2))
	_, err = sem.ForceRelease(ctx, "x-1")
	closed("Semaphore.ForceRelease", err)
	_, rok := rw2.FencingToken(ro)
	_, sok := sem2.FencingToken(so)
	_, mok := m.FencingTokens(mo)
	if rok || sok || mok || rw2.HoldCount(ro) != 0 || sem2.HoldCount(so) != 0 {
		t.Error("a family holding Close ended answers held")
	}

	for name, p := range map[string]dlock.Part{"write side": rw.WriteSide(), "read side": rw.ReadSide(), "permits": sem.Permits(1), "mutex": l} {
		_, err = p.Lock(ctx)
		closed(name+" Part.Lock", err)
		_, _, err = p.TryLock(ctx)
		closed(name+" Part.TryLock", err)
		closed(name+" Part.Unlock", p.Unlock(ctx))
	}
	_, err = m.Lock(ctx)
	closed("MultiLock.Lock", err)
	_, _, err = m.TryLock(ctx)
	closed("MultiLock.TryLock", err)
	_, err = m.Lock(mo)
	closed("MultiLock.Lock with its Owner", err)
	closed("MultiLock.Do", m.Do(ctx, func(context.Context) error { t.Error("Do ran fn after Close"); return nil }))
	closed("MultiLock.Unlock", m.Unlock(mo))
	closed("MultiLock.Unlock of a nil Owner", m.Unlock(nil))
	closed("the MultiLock Owner's Unlock", mo.Unlock())

	// bad arguments are bad arguments still
	if err := l2.Extend(o, 0); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("Extend of a zero lease after Close: %v", err)
	}
	if _, err := sem.Acquire(ctx, 0); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("Acquire of no permits after Close: %v", err)
	}

	g2, _ := newGen(t)
	for _, k := range []string{tg, tg + "-2"} {
		if st := stateOf(t, mustGen(t, g2, "CLOSED", k, time.Second)); st.Held() || len(st.Waiting) != 0 {
			t.Errorf("%s after Close: %+v", k, st)
		}
	}
	for _, k := range []string{tg + "-rw", tg + "-rw2"} {
		if st, err := rwOf(t, g2, k).State(ctx); err != nil || len(st.Holds) != 0 || len(st.Waiting) != 0 {
			t.Errorf("%s after Close: %+v, %v", k, st, err)
		}
	}
	for _, k := range []string{tg + "-sem", tg + "-sem2"} {
		if st, err := semOf(t, g2, k, 3).State(ctx); err != nil || len(st.Holds) != 0 || len(st.Waiting) != 0 {
			t.Errorf("%s after Close: %+v, %v", k, st, err)
		}
	}
}

// Every kind of call, from a dozen goroutines, while Close runs: none panics, each returns
// nil or a documented error (ErrClosed only once Close began), Close succeeds, and nothing is
// left held or in line in Redis. (A goroutine left running fails TestMain's goleak check.)
func TestEveryCallBesideClose(t *testing.T) {
	for round := range 6 {
		lease := 5 * time.Second // (a stall of the process must not outlast a release's bound)
		g, c := newGen(t, dlock.WithDefaultLease(lease))
		tg := fmt.Sprintf("%s-%d", uniqueTarget(t), round)
		l := mustGen(t, g, "BESIDE", tg, lease)
		rw := rwOf(t, g, tg+"-rw")
		sem := semOf(t, g, tg+"-sem", 2)
		m, err := g.MultiOf(l, rw.ReadSide(), sem.Permits(1))
		if err != nil {
			t.Fatal(err)
		}
		var closing atomic.Bool
		var mu sync.Mutex
		bad := map[string]int{}
		note := func(what string, err error) {
			var pe *dlock.RedisProcessError
			switch {
			case err == nil, errors.Is(err, dlock.ErrClosed) && closing.Load(),
				errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrNotObtained),
				errors.Is(err, dlock.ErrLockLost), errors.As(err, &pe):
				return // (lost: the ForceRelease below; Redis: a request cut short by Close)
			}
			mu.Lock()
			bad[what+": "+err.Error()]++
			mu.Unlock()
		}
		calls := []func(ctx context.Context){
			func(ctx context.Context) {
				o, err := l.Lock(ctx)
				if note("Lock", err); err != nil {
					return
				}
				if _, err := l.Lock(o); err == nil {
					note("Unlock of a re-entry", l.Unlock(o))
				} else {
					note("re-entry", err)
				}
				note("Extend", l.Extend(o, lease))
				_, err = l.State(ctx)
				note("State", err)
				note("Unlock", o.Unlock())
			},
			func(ctx context.Context) {
				st, err := l.State(ctx)
				if note("State", err); err == nil && st.Holder != "" {
					_, err = l.ForceRelease(ctx, st.Holder)
					note("ForceRelease", err)
				}
			},
			func(ctx context.Context) {
				o, ok, err := rw.TryRLock(ctx)
				if note("TryRLock", err); ok {
					note("RUnlock", o.Unlock())
				}
			},
			func(ctx context.Context) {
				o, err := rw.Lock(ctx)
				if note("RWLock.Lock", err); err != nil {
					return
				}
				if r, err := rw.RLock(o); err == nil {
					note("Unlock of a downgrade", r.Unlock())
				} else {
					note("downgrade", err)
				}
				note("RWLock.Unlock", o.Unlock())
			},
			func(ctx context.Context) {
				o, err := sem.Acquire(ctx, 1)
				if note("Acquire", err); err == nil {
					_, err = sem.State(ctx)
					note("Semaphore.State", err)
					note("Release", sem.Release(o))
				}
			},
			func(ctx context.Context) { note("SetPermits", sem.SetPermits(ctx, 2)) },
			func(ctx context.Context) {
				o, err := m.Lock(ctx)
				if note("MultiLock.Lock", err); err == nil {
					note("MultiLock.Unlock", m.Unlock(o))
				}
			},
			func(ctx context.Context) { note("MultiLock.Do", m.Do(ctx, func(context.Context) error { return nil })) },
			func(context.Context) {
				_, err := g.GenRW("BESIDE", tg)
				note("GenRW", err)
				_, err = g.MultiOf(l)
				note("MultiOf", err)
			},
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				for n := i; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					calls[n%len(calls)](ctx)
					cancel()
				}
			})
		}
		time.Sleep(time.Duration(20+40*round) * time.Millisecond) // (Close at another moment each round)
		closing.Store(true)
		if err := g.Close(ctxT(t, 30*time.Second)); err != nil {
			t.Errorf("round %d: Close: %v", round, err)
		}
		close(stop)
		wg.Wait()
		for what, n := range bad {
			t.Errorf("round %d: %d× %s", round, n, what)
		}
		if v, err := c.Get(context.Background(), l.Config().UniqueKey()).Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("round %d: the mutex's key after Close: %q, %v", round, v, err)
		}
		ctx := ctxT(t, 10*time.Second)
		gb, _ := newGen(t)
		if st, err := rwOf(t, gb, tg+"-rw").State(ctx); err != nil || len(st.Holds) != 0 || len(st.Waiting) != 0 {
			t.Errorf("round %d: the read-write lock after Close: %+v, %v", round, st, err)
		}
		if st, err := semOf(t, gb, tg+"-sem", 2).State(ctx); err != nil || len(st.Holds) != 0 || len(st.Waiting) != 0 {
			t.Errorf("round %d: the semaphore after Close: %+v, %v", round, st, err)
		}
		if st := stateOf(t, mustGen(t, gb, "BESIDE", tg, lease)); len(st.Waiting) != 0 {
			t.Errorf("round %d: the mutex's line after Close: %v", round, st.Waiting)
		}
	}
}

// A Close whose context has already ended returns at once, but not before every holding's
// Owner has ended with ErrClosed, of every kind, as a Close with time to spare does: an Owner
// that Close returned past still said "held" (the read-write lock's and the semaphore's, whose
// drivers ended them a moment later), and its Unlock sent a release.
func TestCloseWithAnEndedContextEndsEveryOwner(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := ctxT(t, 10*time.Second)
	tg := uniqueTarget(t)
	owners := map[string]*dlock.Owner{}
	ended, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, what := range []string{"mutex", "read side", "write side", "permits"} {
		g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(5*time.Second)) // (one each: Close lets go of one kind)
		if err != nil {
			t.Fatal(err)
		}
		var o *dlock.Owner
		switch what {
		case "mutex":
			o, err = mustGen(t, g, "ENDEDCLOSE", tg, 5*time.Second).Lock(ctx)
		case "read side":
			o, err = rwOf(t, g, tg+"-r").RLock(ctx)
		case "write side":
			o, err = rwOf(t, g, tg+"-w").Lock(ctx)
		case "permits":
			o, err = semOf(t, g, tg+"-sem", 2).Acquire(ctx, 1)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Close(ended); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close with an ended context: %v", err)
		}
		owners[what] = o
		if cause := context.Cause(o); o.Err() == nil || !errors.Is(cause, dlock.ErrClosed) {
			t.Errorf("the %s's Owner as Close returned: Err %v, cause %v; want ended with ErrClosed", what, o.Err(), cause)
		}
	}
	for what, o := range owners {
		if err := o.Unlock(); !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("the %s's Unlock after Close: %v, want ErrClosed", what, err)
		}
	}
}

// An Owner of the lock family that Close ended, unlocked as Close returns (its context ended:
// Close waits for no driver), is reported released once, with ErrClosed, as every other Owner
// Close ends, whether its Unlock comes before or after its driver's turn: the Unlock says
// ErrClosed and leaves the report to Close. (Rounds: the Unlock races the driver.)
func TestCloseReportsAnOwnerUnlockedAsCloseReturns(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ended, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, what := range []string{"read side", "write side", "permits"} {
		for round := range 10 {
			rec := &recorder{}
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(2*time.Second), dlock.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 10*time.Second)
			tg := uniqueTarget(t)
			var o *dlock.Owner
			switch what {
			case "read side":
				o, err = rwOf(t, g, tg).RLock(ctx)
			case "write side":
				o, err = rwOf(t, g, tg).Lock(ctx)
			case "permits":
				o, err = semOf(t, g, tg, 2).Acquire(ctx, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			// (nil when the driver was done before Close looked at the context: Go's select
			// picks either of two ready cases)
			if err := g.Close(ended); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the %s, round %d: Close with an ended context: %v", what, round, err)
			}
			if err := o.Unlock(); !errors.Is(err, dlock.ErrClosed) {
				t.Fatalf("the %s, round %d: Unlock after Close: %v, want ErrClosed", what, round, err)
			}
			waitFor(t, func() bool { return g.SharedInUse() == 0 }) // its driver ended
			rec.mu.Lock()
			released, lost := rec.released, rec.lost
			rec.mu.Unlock()
			if len(released) != 1 || !errors.Is(released[0].Err, dlock.ErrClosed) || len(lost) != 0 {
				t.Fatalf("the %s, round %d: reported released %d times (%+v), lost %d times; want released once, with ErrClosed",
					what, round, len(released), released, len(lost))
			}
		}
	}
}

// A final Unlock that would keep the key (WithHoldOver) racing Close keeps nothing once the
// Generator closes: Close may have found the holding ended by that Unlock and left the key to
// it, so a key the Unlock kept, free, would be let go by nobody (Close waiting for the state
// until its context ends, the key held and renewed). Every round, Close returns nil, and the
// key is let go and the state dropped. (Rounds: the Unlock races Close; with unlock's check of
// Close removed, about one round in six hung.)
func TestCloseRacingAnUnlockThatWouldKeepTheKey(t *testing.T) {
	for round := range 60 {
		la, _, ga, _, a := relockPair(t, time.Minute, dlock.WithHoldOver(true), dlock.WithLocalHandOff(time.Hour))
		ctx := ctxT(t, 30*time.Second)
		unlocked := make(chan error, 1)
		go func() { unlocked <- a.Unlock() }()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // (only to turn a hang into a failure)
		err := ga.Close(cctx)
		cancel()
		if uerr := <-unlocked; uerr != nil && !errors.Is(uerr, dlock.ErrClosed) {
			t.Fatalf("round %d: Unlock racing Close: %v", round, uerr)
		}
		if v := rawClient(t).Get(ctx, key(la)).Val(); err != nil || v != "" || ga.InUse() != 0 {
			t.Fatalf("round %d: Close = %v, the key holds %q, %d states in use; want nil, let go, none", round, err, v, ga.InUse())
		}
	}
}
