package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
	"github.com/dlockgo/dlock/processor"
)

// Every documented error, from the calls that document it, with Redis down where that is the
// cause. Each case must return its error and must not panic.
func TestDocumentedErrors(t *testing.T) {
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	gDown, err := dlock.NewGenerator(down, dlock.WithDefaultLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer gDown.Close(context.Background())
	lDown, _ := gDown.Gen("ERR", "down")
	g, _ := newGen(t)
	l, _ := g.Gen("ERR", target(t))
	var zero dlock.DistributedReentrantLock

	// Long enough for go-redis to give up dialling and report it (a Lock whose context ends
	// with an attempt in flight returns at once, without the attempt's error).
	short := func() context.Context { return ctxT(t, 3*time.Second) }
	cases := []struct {
		name string
		call func() error
		want []error
		text string // the message must contain it
	}{
		{"TryLock with Redis down", func() error { _, _, err := lDown.TryLock(short()); return err },
			nil, `redis lock "DLOCK_ERR_down"`},
		{"Lock with Redis down", func() error { _, err := lDown.Lock(short()); return err },
			[]error{dlock.ErrNotObtained, context.DeadlineExceeded}, "last attempt"},
		{"Lock with an ended context", func() error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := l.Lock(ctx)
			return err
		}, []error{dlock.ErrNotObtained, context.Canceled}, "lock not obtained: context canceled (lock DLOCK_ERR_TestDocumentedErrors)"},
		{"RLock with an ended context", func() error { // (one line, as the mutex's)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			rw, _ := g.GenRW("ERR", target(t))
			_, err := rw.RLock(ctx)
			return err
		}, []error{dlock.ErrNotObtained, context.Canceled}, "lock not obtained: context canceled (lock DLOCK_ERR_TestDocumentedErrors)"},
		{"Acquire with an ended context", func() error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			sem, _ := g.GenSemaphore("ERR", target(t)+"-sem", 2)
			_, err := sem.Acquire(ctx, 1)
			return err
		}, []error{dlock.ErrNotObtained, context.Canceled}, "lock not obtained: context canceled (lock DLOCK_ERR_TestDocumentedErrors-sem)"},
		{"Acquire of no permits", func() error {
			sem, _ := g.GenSemaphore("ERR", target(t)+"-sem", 2)
			_, err := sem.Acquire(context.Background(), 0)
			return err
		}, []error{dlock.ErrInvalidConfig}, "0 permits of semaphore DLOCK_ERR_TestDocumentedErrors-sem"},
		{"Unlock of a holding removed by force", func() error {
			forced, _ := g.Gen("ERR", target(t)+"-forced")
			o, err := forced.Lock(ctxT(t, 5*time.Second))
			if err != nil {
				return err
			}
			st, err := forced.State(ctxT(t, 5*time.Second))
			if err != nil {
				return err
			}
			if _, err := forced.ForceRelease(ctxT(t, 5*time.Second), st.Holder); err != nil {
				return err
			}
			return o.Unlock()
		}, []error{dlock.ErrLockLost}, "(lock DLOCK_ERR_TestDocumentedErrors-forced)"},
		{"Unlock by a non-owner", func() error { return l.Unlock(context.Background()) }, []error{dlock.ErrNotHeld}, ""},
		{"Unlock with nil context", func() error { return l.Unlock(nil) }, []error{dlock.ErrInvalidConfig}, "nil context"}, //nolint:staticcheck
		{"Do with nil function", func() error { return l.Do(context.Background(), nil) }, []error{dlock.ErrInvalidConfig}, ""},
		{"Lock on a zero lock", func() error { _, err := zero.Lock(context.Background()); return err }, []error{dlock.ErrInvalidConfig}, ""},
		{"Unlock on a zero lock", func() error { return zero.Unlock(context.Background()) }, []error{dlock.ErrInvalidConfig}, ""},
		{"Gen of an unconfigured type", func() error {
			c := srv.Client()
			defer c.Close()
			g, _ := dlock.NewGenerator(c)
			defer g.Close(context.Background())
			_, err := g.Gen("NOLEASE", "x")
			return err
		}, []error{dlock.ErrInvalidConfig}, "no lease configured"},
		{"Gen of an unconfigured type with a blank target", func() error { // (the target is named, not the lease)
			c := srv.Client()
			defer c.Close()
			g, _ := dlock.NewGenerator(c)
			defer g.Close(context.Background())
			_, err := g.Gen("NOLEASE", " ")
			return err
		}, []error{dlock.ErrInvalidConfig}, "target"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("%v does not match %v", err, w)
				}
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("%q does not say %q", err, tc.text)
			}
		})
	}
	var pe *dlock.RedisProcessError
	if _, _, err := lDown.TryLock(short()); !errors.As(err, &pe) || pe.Op != "lock" || pe.Key != "DLOCK_ERR_down" {
		t.Fatalf("TryLock with Redis down: %#v", err)
	}
}

// A key of the lock's name that holds another kind of value (a list some other program
// pushed to, say) is a refusal no wait mends, as an ACL refusal is: Lock returns at once with
// ErrNotObtained and Redis's WRONGTYPE reply, for the mutex and for the read-write lock and
// the semaphore; Close does not wait on a give-back that can only fail the same way; and once
// the key is deleted the lock works.
func TestWrongTypeAtTheKeyEndsTheWait(t *testing.T) {
	g, c := newGen(t)
	ctx := context.Background()
	tg := target(t)
	l, _ := g.Gen("WRONGTYPE", tg)
	rw, _ := g.GenRW("WRONGTYPE", tg+"-rw")
	rw2, _ := g.GenRW("WRONGTYPE", tg+"-rw2")
	sem, _ := g.GenSemaphore("WRONGTYPE", tg+"-sem", 2)
	cases := []struct {
		name string
		key  string
		lock func(context.Context) (*dlock.Owner, error)
	}{
		{"mutex", key(l), l.Lock},
		{"read side", "{" + rw.Config().UniqueKey() + "}:shared:kind", rw.RLock},
		{"write side", "{" + rw2.Config().UniqueKey() + "}:shared:kind", rw2.Lock},
		{"semaphore", "{" + sem.Config().UniqueKey() + "}:shared:kind", func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.RPush(ctx, tc.key, "not a lock").Err(); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // turns a hang into a failure
			defer cancel()
			start := time.Now()
			_, err := tc.lock(wctx)
			var pe *dlock.RedisProcessError
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &pe) || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("Lock = %v; want ErrNotObtained with the WRONGTYPE reply", err)
			}
			if wctx.Err() != nil {
				t.Fatalf("Lock waited %v, until its context ended, on a refusal", time.Since(start))
			}
			if err := c.Del(ctx, tc.key).Err(); err != nil {
				t.Fatal(err)
			}
			o, err := tc.lock(ctxT(t, 5*time.Second))
			if err != nil {
				t.Fatalf("Lock once the key is gone: %v", err)
			}
			if err := o.Unlock(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A TryLock's attempt is given back; Close does not wait a lease for it.
	g2, c2 := newGen(t, dlock.WithDefaultLease(10*time.Second))
	l2, _ := g2.Gen("WRONGTYPE", tg+"-try")
	if err := c2.RPush(ctx, key(l2), "not a lock").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rawClient(t).Del(context.Background(), key(l2)) })
	if _, _, err := l2.TryLock(ctx); !strings.Contains(fmt.Sprint(err), "WRONGTYPE") {
		t.Fatalf("TryLock = %v; want the WRONGTYPE reply", err)
	}
	start := time.Now()
	if err := g2.Close(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= 10*time.Second {
		t.Fatalf("Close took %v: it waited out the lease for the give-back", d)
	}
}

// A fencing counter that holds what dlock never writes (set by hand: not a number, or a
// number past 2^53, where tokens would repeat) is a refusal, as a key of another kind is:
// Lock returns at once with ErrNotObtained and an error that names the counter, takes
// nothing, and once the counter is deleted the lock works. It used to fail inside the script
// with a raw Lua error ("bad argument #1 to 'max'"), and Lock retried it until its deadline.
// State names the counter too, rather than report it as absent (it said "no counter kept"
// while every request failed on it, and "dlock status" printed "fence: none kept").
func TestCorruptFencingCounterEndsTheWait(t *testing.T) {
	g, c := newGen(t)
	ctx := context.Background()
	tg := target(t)
	for i, v := range []string{"abc", "9007199254740993", "9007198180999168"} { // (the last: 2^53 - 2^30, no room for a block)
		l, _ := g.Gen("BADFENCE", fmt.Sprint(tg, i))
		rw, _ := g.GenRW("BADFENCE", fmt.Sprint(tg, i, "-rw"))
		sem, _ := g.GenSemaphore("BADFENCE", fmt.Sprint(tg, i, "-sem"), 2)
		cases := []struct {
			name  string
			key   string
			lock  func(context.Context) (*dlock.Owner, error)
			state func(context.Context) error
			lk    string                            // the lock key, whose keys a failed Unlock shows
			token func(*dlock.Owner) (uint64, bool) // the holding's fencing token
		}{
			{"mutex", "{" + key(l) + "}:fence", l.Lock,
				func(ctx context.Context) error { _, err := l.State(ctx); return err },
				key(l), func(o *dlock.Owner) (uint64, bool) { return l.FencingToken(o) }},
			{"read side", "{" + rw.Config().UniqueKey() + "}:shared:fence", rw.RLock,
				func(ctx context.Context) error { _, err := rw.State(ctx); return err },
				rw.Config().UniqueKey(), func(o *dlock.Owner) (uint64, bool) { return rw.FencingToken(o) }},
			{"semaphore", "{" + sem.Config().UniqueKey() + "}:shared:fence", func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) },
				func(ctx context.Context) error { _, err := sem.State(ctx); return err },
				sem.Config().UniqueKey(), func(o *dlock.Owner) (uint64, bool) { return sem.FencingToken(o) }},
		}
		for _, tc := range cases {
			t.Run(tc.name+" "+v, func(t *testing.T) {
				if err := c.Set(ctx, tc.key, v, 0).Err(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rawClient(t).Del(context.Background(), tc.key) })
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // turns a hang into a failure
				defer cancel()
				_, err := tc.lock(wctx)
				var pe *dlock.RedisProcessError
				if !errors.Is(err, dlock.ErrNotObtained) || !errors.As(err, &pe) || !strings.Contains(err.Error(), "fencing counter "+tc.key) {
					t.Fatalf("Lock = %v; want ErrNotObtained with an error naming the counter", err)
				}
				if wctx.Err() != nil {
					t.Fatal("Lock waited until its context ended, on a corrupt counter")
				}
				if got, _ := c.Get(ctx, tc.key).Result(); got != v {
					t.Fatalf("counter %q after the refusal, want it left as it was (%q)", got, v)
				}
				if err := tc.state(ctxT(t, 5*time.Second)); !errors.As(err, &pe) || !strings.Contains(err.Error(), "fencing counter "+tc.key) {
					t.Fatalf("State = %v; want a *RedisProcessError naming the counter", err)
				}
				if tc.name == "mutex" && c.Exists(ctx, key(l)).Val() != 0 {
					t.Fatal("the refused Lock took the key")
				}
				if err := c.Del(ctx, tc.key).Err(); err != nil {
					t.Fatal(err)
				}
				o, err := tc.lock(ctxT(t, 5*time.Second))
				if err != nil {
					t.Fatalf("Lock once the counter is gone: %v", err)
				}
				took := time.Now()
				tok, _ := tc.token(o)
				if err := o.Unlock(); err != nil {
					// (seen once under load: ErrLockLost, found at release. What Redis holds says
					// whether the key expired by Redis's clock — its TIME against the token, which
					// is the server's µs clock at the take with the counter deleted — while this
					// process counted a few ms, or was let go or taken by another.)
					t.Fatalf("Unlock: %v\n%s", err, redisView(c, tc.lk, tok, took))
				}
			})
		}
	}
}

// A fencing counter just below the bound a script accepts (2^53 - 2^30), set there by hand,
// leaves no room for the next token. No script hands one out there: the counter it would write
// is one every later script refuses, so the key would be held by a holding that can neither
// renew nor release it, and the lock refused until the counter expired. A take is refused at
// once, naming the counter, with nothing written (a release then grants nothing either:
// TestFencingCounterWithNoRoomLeftReservesNothing).
func TestFencingCounterWithNoRoomLeftRefusesBeforeTaking(t *testing.T) {
	const full = "9007198180999167" // 2^53 - 2^30 - 1: a token, but the last one
	g, c := newGen(t)
	ctx := context.Background()
	tg := target(t)
	l, _ := g.Gen("FULLFENCE", tg)
	rw, _ := g.GenRW("FULLFENCE", tg+"-rw")
	sem, _ := g.GenSemaphore("FULLFENCE", tg+"-sem", 2)
	for _, tc := range []struct {
		name, key string
		lock      func(context.Context) (*dlock.Owner, error)
	}{
		{"mutex", "{" + key(l) + "}:fence", l.Lock},
		{"read side", "{" + rw.Config().UniqueKey() + "}:shared:fence", rw.RLock},
		{"write side", "{" + rw.Config().UniqueKey() + "}:shared:fence", rw.Lock},
		{"semaphore", "{" + sem.Config().UniqueKey() + "}:shared:fence", func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.Set(ctx, tc.key, full, 0).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rawClient(t).Del(context.Background(), tc.key) })
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // turns a hang into a failure
			defer cancel()
			o, err := tc.lock(wctx)
			if err == nil {
				_ = o.Unlock()
				t.Fatalf("Lock took a token past the last one (counter now %s)", c.Get(ctx, tc.key).Val())
			}
			if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "fencing counter "+tc.key) || wctx.Err() != nil {
				t.Fatalf("Lock = %v; want ErrNotObtained at once, naming the counter", err)
			}
			if got := c.Get(ctx, tc.key).Val(); got != full {
				t.Fatalf("counter %q after the refusal, want it left as it was", got)
			}
			if tc.name == "mutex" && c.Exists(ctx, key(l)).Val() != 0 {
				t.Fatal("the refused Lock took the key")
			}
		})
	}
}

// A nil *RedisProcessError (as errors.As leaves its target when nothing matches) prints and
// unwraps without a panic, as a nil error would; one without a key names none ("" read as a
// key of that name).
func TestNilRedisProcessError(t *testing.T) {
	var pe *dlock.RedisProcessError
	if errors.As(errors.New("not a Redis failure"), &pe) {
		t.Fatal("matched")
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a nil *RedisProcessError panics: %v", r)
		}
	}()
	if msg := pe.Error(); msg != "<nil>" {
		t.Errorf("Error() = %q", msg)
	}
	if err := pe.Unwrap(); err != nil {
		t.Errorf("Unwrap() = %v", err)
	}
	// One that names no key (a request of the servers', not of a lock) names none.
	cause := errors.New("dial tcp: connection refused")
	if msg := (&dlock.RedisProcessError{Op: "command-info", Err: cause}).Error(); msg != "dlock: redis command-info: dial tcp: connection refused" {
		t.Errorf("Error() without a key = %q", msg)
	}
	if msg := (&dlock.RedisProcessError{Op: "lock", Key: "DLOCK_A_b", Err: cause}).Error(); msg != `dlock: redis lock "DLOCK_A_b": dial tcp: connection refused` {
		t.Errorf("Error() = %q", msg)
	}
}

// replicaKind is a lock of one kind on a read-only replica, as a try and as a wait.
type replicaKind struct {
	name string
	try  func(context.Context) (*dlock.Owner, bool, error)
	lock func(context.Context) (*dlock.Owner, error)
}

// onReplica returns a lock of each kind (a mutex, a read side, a write side, a semaphore's
// permit) of a Generator with lease on a read-only replica.
func onReplica(t *testing.T, lease time.Duration) []replicaKind {
	t.Helper()
	_, replica := masterAndReplica(t, ctxT(t, 60*time.Second))
	g := genOn(t, replica.Client(), dlock.WithDefaultLease(lease))
	tg := target(t)
	l, _ := g.Gen("RO", tg)
	rw, _ := g.GenRW("RO", tg+"-rw")
	rw2, _ := g.GenRW("RO", tg+"-rw2")
	sem, _ := g.GenSemaphore("RO", tg+"-sem", 2)
	return []replicaKind{
		{"mutex", l.TryLock, l.Lock},
		{"read side", rw.TryRLock, rw.RLock},
		{"write side", rw2.TryLock, rw2.Lock},
		{"semaphore", func(ctx context.Context) (*dlock.Owner, bool, error) { return sem.TryAcquire(ctx, 1) },
			func(ctx context.Context) (*dlock.Owner, error) { return sem.Acquire(ctx, 1) }},
	}
}

// A waiter that gives up while Redis fails every request names the failure (a
// *RedisProcessError), for the read-write lock and the semaphore as for the mutex — also after
// a TryLock whose outcome Redis left unknown, whose give-back keeps failing beside the
// waiter's takes (here: a read-only replica).
func TestWaiterGivingUpNamesTheRedisFailure(t *testing.T) {
	t.Parallel()
	// (each request's bound is a third of the lease: go-redis retries on READONLY)
	for _, tc := range onReplica(t, 6*time.Second) {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := tc.try(ctxT(t, 5*time.Second)); !strings.Contains(fmt.Sprint(err), "READONLY") {
				t.Fatalf("TryLock on a replica: %v", err)
			}
			_, err := tc.lock(ctxT(t, 2*time.Second))
			var pe *dlock.RedisProcessError
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &pe) ||
				!strings.Contains(err.Error(), "READONLY") {
				t.Fatalf("Lock on a replica = %v; want ErrNotObtained naming the READONLY failure", err)
			}
		})
	}
}

// A Lock that gives up while Redis refuses connections names the refusal, not only that its
// last attempt got no answer in time, for the mutex, the read-write lock and the semaphore:
// go-redis retries a dial for longer than an attempt's bound (here a dial hangs after the
// first second), so the attempt in flight as the Lock gives up has no answer, and the error
// said only that ("no answer in time" reads as a slow Redis, not a down one). So does one that
// gives up while its first request waits to be tried again, its first try refused (dlock makes
// the client's tries; here the next is thirty seconds away, and no subscription fails: the
// refused try is all there is to name).
func TestWaiterGivingUpNamesARefusedConnection(t *testing.T) {
	t.Parallel()
	kinds := map[string]func(g *dlock.Generator, ctx context.Context) error{
		"mutex": func(g *dlock.Generator, ctx context.Context) error {
			l, _ := g.Gen("REFUSED", target(t))
			_, err := l.Lock(ctx)
			return err
		},
		"read": func(g *dlock.Generator, ctx context.Context) error {
			_, err := rwOf(t, g, target(t)).RLock(ctx)
			return err
		},
		"permits": func(g *dlock.Generator, ctx context.Context) error {
			_, err := semOf(t, g, target(t), 2).Acquire(ctx, 1)
			return err
		},
	}
	for name, lock := range kinds {
		t.Run(name, func(t *testing.T) {
			// Dials are refused until a request failed by a refusal; from then on they hang.
			var refused atomic.Bool
			hung := make(chan struct{})
			c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, // (nothing listens there)
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					if !refused.Load() {
						var d net.Dialer
						return d.DialContext(ctx, network, addr)
					}
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-hung:
						return nil, errors.New("test over")
					}
				}})
			defer c.Close()
			defer close(hung)
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				err := next(ctx, cmd)
				if errors.Is(err, syscall.ECONNREFUSED) {
					refused.Store(true)
				}
				return err
			}})
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close(context.Background()) //nolint:errcheck
			err = lock(g, ctxT(t, 5*time.Second))
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("Lock with Redis refusing connections = %v; want ErrNotObtained naming the refusal", err)
			}
		})
		t.Run(name+" between tries", func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialerRetries: 1, // (nothing listens there)
				MaxRetries: 3, MinRetryBackoff: 30 * time.Second, MaxRetryBackoff: 30 * time.Second})
			defer c.Close()
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Minute), dlock.WithNotifications(false))
			if err != nil {
				t.Fatal(err)
			}
			err = lock(g, ctxT(t, 2*time.Second))
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(fmt.Sprint(err), "connection refused") {
				t.Fatalf("Lock whose first try Redis refused = %v; want ErrNotObtained naming the refusal", err)
			}
			closing, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_ = g.Close(closing) // (its leave waits for the late request: not this test's concern)
		})
	}
}

// A waiter that gives up behind another of its process, whose take Redis has not answered,
// sent no request of its own: its error does not say that its attempt got no answer (the
// front waiter's does).
func TestWaiterGivingUpBehindAnUnansweredTakeSaysNoAnswerOfItsOwn(t *testing.T) {
	tg := target(t)
	ga, _ := newGen(t, dlock.WithDefaultLease(10*time.Second))
	if _, err := semOf(t, ga, tg, 3).Acquire(ctxT(t, 5*time.Second), 1); err != nil { // (another process holds 1)
		t.Fatal(err)
	}
	c := srv.Client()
	var held atomic.Bool
	release := make(chan struct{})
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) == "shared" && held.CompareAndSwap(false, true) {
			select { // (the front waiter's take: no answer until the test is done)
			case <-release:
			case <-ctx.Done():
			}
		}
		return next(ctx, cmd)
	}})
	g := genOn(t, c, dlock.WithDefaultLease(30*time.Second)) // (a take's bound, a third of it, comes after the front's deadline)
	defer close(release)
	s := semOf(t, g, tg, 3)
	front := make(chan error, 1)
	fctx, giveUp := context.WithCancel(ctxT(t, 9*time.Second)) // (it gives up once the one behind it did)
	defer giveUp()
	go func() {
		_, err := s.Acquire(fctx, 3)
		front <- err
	}()
	waitFor(t, func() bool { return held.Load() && g.SharedWaiters(s.Config().UniqueKey()) == 1 })
	_, err := s.Acquire(ctxT(t, 500*time.Millisecond), 1) // behind it: the front asks for all 3
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrUnanswered) || strings.Contains(err.Error(), "no answer") {
		t.Fatalf("a waiter behind another's unanswered take gave up with %v; want ErrNotObtained, no \"no answer\"", err)
	}
	giveUp()
	if err := recv(t, front, "the front waiter's Acquire"); !strings.Contains(fmt.Sprint(err), "no answer") {
		t.Fatalf("the front waiter gave up with %v; want it to say its attempt got no answer", err)
	}
}

// A TryLock is one attempt, for the read-write lock and the semaphore as for the mutex: on a
// read-only replica each TryLock returns the READONLY failure at once, also when an earlier
// one's give-back (its outcome was unknown) keeps failing too.
func TestTryLockOnAReplicaFailsAtOnceEveryTime(t *testing.T) {
	t.Parallel()                                      // (it waits on its own servers, keys and leases: beside the others)
	for _, tc := range onReplica(t, 30*time.Second) { // (a give-back is owed for a lease)
		t.Run(tc.name, func(t *testing.T) {
			for i := range 3 {
				if _, _, err := tc.try(ctxT(t, 20*time.Second)); !strings.Contains(fmt.Sprint(err), "READONLY") || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("TryLock %d on a replica: %v; want the READONLY failure", i+1, err)
				}
			}
		})
	}
}

// Errors a call returns about one lock name its key, so that the log line of a service with
// many locks says which (errors.Is sees what they wrap).
func TestErrorsNameTheLock(t *testing.T) {
	g, _ := newGen(t)
	ctx := ctxT(t, 5*time.Second)
	tg := target(t)
	mu := mustGen(t, g, "ERRNAME", tg, time.Second)
	rw, _ := g.GenRW("ERRNAME", tg+"-rw")
	sem, _ := g.GenSemaphore("ERRNAME", tg+"-sem", 2)
	o, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = o.Unlock()
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, upErr := rw.Lock(r)
	_ = r.Unlock()
	so, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = so.Unlock()
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	_, stErr := mu.State(expired)
	for name, e := range map[string]struct {
		err error
		key string
	}{
		"mutex Unlock twice":            {o.Unlock(), mu.Config().UniqueKey()},
		"mutex Unlock by a non-owner":   {mu.Unlock(ctx), mu.Config().UniqueKey()},
		"mutex Extend by a non-owner":   {mu.Extend(ctx, time.Second), mu.Config().UniqueKey()},
		"rw upgrade":                    {upErr, rw.Config().UniqueKey()},
		"rw Unlock twice":               {r.Unlock(), rw.Config().UniqueKey()},
		"sem Release twice":             {so.Unlock(), sem.Config().UniqueKey()},
		"sem Acquire of more than k":    {func() error { _, err := sem.Acquire(ctx, 3); return err }(), sem.Config().UniqueKey()},
		"sem SetPermits(0)":             {sem.SetPermits(ctx, 0), sem.Config().UniqueKey()},
		"mutex State, ctx ended":        {stErr, mu.Config().UniqueKey()},
		"mutex ForceRelease, ctx ended": {func() error { _, err := mu.ForceRelease(expired, "a-1-b-1"); return err }(), mu.Config().UniqueKey()},
		"sem SetPermits, ctx ended":     {sem.SetPermits(expired, 3), sem.Config().UniqueKey()},
	} {
		if e.err == nil {
			t.Errorf("%s: nil error", name)
			continue
		}
		if !strings.Contains(e.err.Error(), strings.TrimPrefix(strings.TrimPrefix(e.key, "{"), "}")) {
			t.Errorf("%s: %q does not name %s", name, e.err, e.key)
		}
	}
}

// A Lock that gives up with its last attempt unanswered names the last failure of a request
// of its process (of any key), but not a refusal Redis answered — a take of more permits than
// a semaphore's count, a lock of another kind: that is an answer, not the way to Redis
// failing, and a Lock whose error matched ErrInvalidConfig for a request it never made would
// tell its caller to fix a configuration that is fine.
func TestWaiterGivingUpUnansweredNamesNoRefusalOfAnotherRequest(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	g, c := newGen(t)                                       // a 1 s lease: a take gets no answer within 333 ms
	gq, _ := newGen(t, dlock.WithDefaultLease(time.Minute)) // (a stall of this process must not end its holding)
	w := newWire(t, c)
	tg := uniqueTarget(t)
	// another process holds both permits: the waiter's takes are answered held
	q, err := semOf(t, gq, tg, 2).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Unlock() //nolint:errcheck
	// a semaphore Redis keeps with 2 permits, asked for 3 by a handle made with 3
	if err := semOf(t, gq, tg+"-small", 2).SetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	big := semOf(t, g, tg+"-small", 3)

	w.stall("shared", 1) // the waiter's first take: no answer within its bound
	defer w.unstall()
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := semOf(t, g, tg, 2).Acquire(wctx, 1)
		got <- err
	}()
	waitFor(t, func() bool { return w.stalledCount() == 1 })
	if _, err := big.Acquire(ctx, 3); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("Acquire of 3 permits of 2: %v; want ErrInvalidConfig", err)
	}
	err = recv(t, got, "the waiter's Acquire")
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("a waiter that gave up: %v; want ErrNotObtained and the deadline, not ErrInvalidConfig", err)
	}
}

// A Lock that gives up names a Redis failure of its process's attempt only if Redis answered
// no later request: once a later one was answered (the key held elsewhere), Redis was
// reachable again, and a waiter that gives up after that names nothing, as a wait with no
// failure at all — the goroutine the failed request was for, and one queued behind it alike,
// of a mutex and of a semaphore; here with the attempt's next request on its way (it says it
// got no answer, and no more).
func TestWaiterGivingUpAfterRedisAnsweredAgainNamesNoEarlierFailure(t *testing.T) {
	for _, kind := range []string{"mutex", "permits"} {
		t.Run(kind, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			g, c := newGen(t)
			gq, _ := newGen(t, dlock.WithDefaultLease(stallProofLease)) // (a stall must not lose what the waiters wait for)
			tg := uniqueTarget(t)
			injected := errors.New("connection reset by peer (injected)")
			var armed, hold atomic.Bool
			var after atomic.Int32 // the process's requests of its attempt answered after the failure
			fired, held, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
			defer close(release)
			ours := func(args []any) bool {
				if kind == "mutex" {
					return processor.ScriptName(args) == "lock"
				}
				return isSharedTake(args)
			}
			c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if !ours(cmd.Args()) {
					return next(ctx, cmd)
				}
				if armed.CompareAndSwap(true, false) { // not sent: the connection broke
					cmd.SetErr(injected)
					close(fired)
					return injected
				}
				if hold.CompareAndSwap(true, false) { // on its way as the waiters give up
					close(held)
					select {
					case <-ctx.Done():
					case <-release:
					}
				}
				err := next(ctx, cmd)
				select {
				case <-fired:
					if err == nil {
						after.Add(1)
					}
				default:
				}
				return err
			}})
			var take func(context.Context) error
			var waiting func() int
			switch kind {
			case "mutex":
				lq, _ := gq.Gen("ERR", tg)
				o, err := lq.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer lq.Unlock(o) //nolint:errcheck
				l, _ := g.Gen("ERR", tg)
				take = func(ctx context.Context) error { _, err := l.Lock(ctx); return err }
				waiting = func() int {
					if s, err := l.State(ctx); err == nil && s.LocalWaiters {
						return 2 // (at least one: the second was started after the first queued)
					}
					return 0
				}
			default:
				q, err := semOf(t, gq, tg, 2).Acquire(ctx, 2)
				if err != nil {
					t.Fatal(err)
				}
				defer q.Unlock() //nolint:errcheck
				s := semOf(t, g, tg, 2)
				take = func(ctx context.Context) error { _, err := s.Acquire(ctx, 1); return err }
				waiting = func() int { return g.SharedWaiters(s.Config().UniqueKey()) }
			}
			got := make(chan error, 2)
			var cancels []context.CancelFunc
			for i := range 2 {
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				cancels = append(cancels, cancel)
				go func() { got <- take(wctx) }()
				waitFor(t, func() bool { return waiting() > i })
			}
			armed.Store(true) // the next request of the attempt fails ...
			recv(t, fired, "the failed request")
			// ... and a later one is answered: the second answered is sent once the first's
			// answer was taken in (one request of the attempt at a time)
			waitFor(t, func() bool { return after.Load() > 1 })
			hold.Store(true)
			recv(t, held, "the next request")
			for _, cancel := range cancels {
				cancel()
			}
			for i := range 2 {
				err := recv(t, got, "a waiter's Lock")
				if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) || errors.Is(err, injected) {
					t.Errorf("a waiter that gave up after Redis answered again (%d): %v; want ErrNotObtained and Canceled, not the earlier failure", i, err)
				}
			}
		})
	}
}

// An answer read while another request failed drops no failure noted after it was sent: a
// waiter that gives up with its next take on its way names the failure that came while its
// process's last answered take was out (Redis answered that one, but not since the failure).
func TestWaiterGivingUpNamesAFailureThatCameWhileAnAnsweredTakeWasOut(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	g, c := newGen(t)
	gq, _ := newGen(t, dlock.WithDefaultLease(stallProofLease)) // (a stall must not lose what the waiters wait for)
	tg := uniqueTarget(t)
	other := mustGen(t, g, "ERR", tg+"-other", time.Second)
	injected := errors.New("connection reset by peer (injected)")
	var holdAnswer, holdNext, failOther atomic.Bool
	answerHeld, faulted, nextHeld, release := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(release)
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		switch {
		case failOther.Load() && strings.Contains(fmt.Sprint(cmd.Args()), other.Config().UniqueKey()): // (every request of other's, not sent)
			cmd.SetErr(injected)
			return injected
		case !isSharedTake(cmd.Args()):
			return next(ctx, cmd)
		case holdNext.CompareAndSwap(true, false): // on its way as the waiter gives up
			close(nextHeld)
			select {
			case <-ctx.Done():
			case <-release:
			}
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		if holdAnswer.CompareAndSwap(true, false) { // answered; the process learns it after the failure
			close(answerHeld)
			select {
			case <-faulted:
			case <-release:
			}
		}
		return err
	}})
	q, err := semOf(t, gq, tg, 2).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Unlock() //nolint:errcheck
	s := semOf(t, g, tg, 2)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { _, err := s.Acquire(wctx, 1); got <- err }()
	waitFor(t, func() bool { return g.SharedWaiters(s.Config().UniqueKey()) == 1 })
	holdAnswer.Store(true)
	recv(t, answerHeld, "an answered take")
	failOther.Store(true)
	if _, _, err := other.TryLock(ctx); !errors.Is(err, injected) {
		t.Fatalf("the other lock's TryLock: %v; want the injected failure", err)
	}
	holdNext.Store(true)
	close(faulted)
	recv(t, nextHeld, "the next take")
	cancel()
	if err := recv(t, got, "the waiter's Acquire"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, injected) {
		t.Fatalf("a waiter that gave up after a failure newer than its last answered take's sending: %v; want ErrNotObtained naming the failure", err)
	}
}

// A goroutine queued behind its process's failing asks, which the key is then granted to
// (heard on its channel: no ask answered), waits from then on behind a goroutine of its own
// process that holds the key: if it gives up, it names no failure — the attempt that failed
// took the key.
func TestWaiterGivingUpAfterItsProcessWasGrantedTheKeyNamesNoEarlierFailure(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	g, c := newGen(t)
	gq, _ := newGen(t, dlock.WithDefaultLease(stallProofLease)) // (a stall must not lose what the waiters wait for)
	tg := uniqueTarget(t)
	injected := errors.New("connection reset by peer (injected)")
	var failing atomic.Int32 // 1: the next ask runs and its reply is lost; 2: asks fail unsent
	fired := make(chan struct{})
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if processor.ScriptName(cmd.Args()) != "lock" {
			return next(ctx, cmd)
		}
		switch {
		case failing.CompareAndSwap(1, 2): // (it ran: the entry in line is fresh for the grant)
			if err := next(ctx, cmd); err != nil {
				failing.Store(1)
				return err
			}
			cmd.SetErr(injected)
			close(fired)
			return injected
		case failing.Load() == 2:
			cmd.SetErr(injected)
			return injected
		}
		return next(ctx, cmd)
	}})
	defer failing.Store(0)
	lq, _ := gq.Gen("ERR", tg)
	oq, err := lq.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := g.Gen("ERR", tg)
	first := make(chan *dlock.Owner, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		first <- o
	}()
	waitFor(t, func() bool { return g.Waiters(key(l)) })
	got := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, err := l.Lock(wctx); got <- err }()
	time.Sleep(50 * time.Millisecond) // (the second queues: it is not the one that asks)
	failing.Store(1)
	recv(t, fired, "the failed ask")
	if err := lq.Unlock(oq); err != nil { // granted to the process in line
		t.Fatal(err)
	}
	o := recv(t, first, "the first waiter's Lock")
	defer l.Unlock(o) //nolint:errcheck
	cancel()
	if err := recv(t, got, "the queued waiter's Lock"); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) || errors.Is(err, injected) {
		t.Fatalf("a waiter that gave up behind its process's holding: %v; want ErrNotObtained and Canceled, not the failure before the grant", err)
	}
}

// A waiter that gives up while Redis is down names the failure also when it sent no request
// during the outage: it stood in line, listening for its grant (its next ask a while off),
// when the server went away, and only its subscription's reconnection failed. (Its error
// said only "context deadline exceeded": nothing told that Redis was unreachable.) The
// Observer is told of the failed connection as it happens (op "subscribe"), not only at the
// waiter's next ask (the CLI's "failed while waiting" notice came half a lease late).
func TestWaiterGivingUpWhileOnlyItsSubscriptionFailsNamesTheFailure(t *testing.T) {
	for name, k := range subscriberKinds() {
		t.Run(name, func(t *testing.T) {
			s := ownServer(t)
			rec := &recorder{}
			gaveUp, _ := standInLine(t, s, k, dlock.WithObserver(rec))
			s.Kill()
			defer func() { // (A's holding is gone with the server: its Close then finds nothing to release)
				if err := s.Restart(); err != nil {
					t.Error(err)
				}
			}()
			err := recv(t, gaveUp, "B's wait")
			var pe *dlock.RedisProcessError
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &pe) ||
				!errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, io.EOF) {
				t.Fatalf("wait that gave up while Redis was down = %v; want ErrNotObtained naming the failure (the dropped or refused connection)", err)
			}
			if errors.Is(err, dlock.ErrInvalidConfig) {
				t.Fatalf("wait that gave up while Redis was down = %v; names ErrInvalidConfig", err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if !slices.ContainsFunc(rec.redisErrs, func(e dlock.RedisErrorEvent) bool { return e.Op == "subscribe" }) {
				t.Fatalf("the Observer was told of %v; want the subscription's failure (op subscribe)", rec.redisErrs)
			}
		})
	}
}

// A wait whose Redis client is closed under it (not by the Generator's Close) ends at once,
// with ErrNotObtained and the client's error, also when it stood in line listening for its
// grant, its next ask a sixth of its lease off, or held permits and waited for more: the
// subscription's connection, closed with the client, has it ask. (It ended at that ask, or
// with its context.)
func TestWaitEndsWhenItsClientIsClosed(t *testing.T) {
	for name, k := range subscriberKinds() {
		t.Run(name, func(t *testing.T) {
			s := ownServer(t)
			gaveUp, cb := standInLine(t, s, k)
			cb.Close()
			err := recv(t, gaveUp, "B's wait")
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, redis.ErrClosed) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait whose client was closed = %v; want ErrNotObtained with the client's error, before its context ended", err)
			}
		})
	}
	t.Run("semaphore, more for a holder", func(t *testing.T) {
		var sent, answered atomic.Int64 // B's scripts
		cb := srv.Client()
		cb.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			counted := processor.ScriptName(cmd.Args()) != ""
			if counted {
				sent.Add(1)
			}
			err := next(ctx, cmd)
			if counted {
				answered.Add(1)
			}
			return err
		}})
		ctx := ctxT(t, 30*time.Second)
		gb, err := dlock.NewGenerator(cb, dlock.WithDefaultLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer gb.Close(ctx) //nolint:errcheck // (its release of B's permit fails: the client is closed)
		ga, _ := newGen(t, dlock.WithDefaultLease(time.Minute))
		tg := uniqueTarget(t)
		sb, sa := semOf(t, gb, tg, 3), semOf(t, ga, tg, 3)
		held, err := sb.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer runtime.KeepAlive(held) // (an Owner dropped is let go)
		other, err := sa.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Unlock() //nolint:errcheck
		before := answered.Load()
		gaveUp := make(chan error, 1)
		go func() { _, err := sb.Acquire(ctxT(t, 5*time.Second), 2); gaveUp <- err }() // (one permit free)
		waitFor(t, func() bool { return answered.Load() > before && sent.Load() == answered.Load() })
		cb.Close()
		err = recv(t, gaveUp, "B's wait for more")
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, redis.ErrClosed) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait for more whose client was closed = %v; want ErrNotObtained with the client's error, before its context ended", err)
		}
	})
}

// A failure of a waiter's subscription is not named once Redis answered since: its
// connection dropped (CLIENT KILL) and was subscribed again at once, and the waiter that gives
// up later says only that its context ended. Nor is the Observer told of a Redis error: a drop
// that reconnects at once (a proxy's idle timeout) is no failure of the way to Redis.
func TestWaiterGivingUpAfterItsSubscriptionWasConfirmedAgainNamesNoFailure(t *testing.T) {
	for name, k := range subscriberKinds() {
		t.Run(name, func(t *testing.T) {
			s := ownServer(t)
			rec := &recorder{}
			gaveUp, _ := standInLine(t, s, k, dlock.WithObserver(rec))
			c := s.Client()
			defer c.Close()
			if err := c.Do(context.Background(), "client", "kill", "type", "pubsub").Err(); err != nil {
				t.Fatal(err)
			}
			err := recv(t, gaveUp, "B's wait")
			var pe *dlock.RedisProcessError
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &pe) || errors.Is(err, io.EOF) {
				t.Fatalf("wait that gave up after its subscription was confirmed again = %v; want ErrNotObtained naming no failure", err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.redisErrs) != 0 {
				t.Fatalf("the Observer was told of %v after one drop that reconnected; want no Redis error", rec.redisErrs)
			}
		})
	}
}

// subscriberKind is a way for process A to take a whole key and for process B to wait for
// it, for the tests of a waiter whose subscription fails.
type subscriberKind struct {
	hold func(g *dlock.Generator) (*dlock.Owner, error)      // takes the whole key in process A
	wait func(g *dlock.Generator, ctx context.Context) error // waits for it in process B
	// first subscribes B to the lock's channel, and returns nil if it ended as it should
	// (nil: a wait, given up)
	first func(g *dlock.Generator) error
}

// subscriberKinds returns the kinds of lock whose waiters' subscriptions the tests fail.
func subscriberKinds() map[string]subscriberKind {
	return map[string]subscriberKind{
		"mutex": {
			func(g *dlock.Generator) (*dlock.Owner, error) {
				l, _ := g.Gen("DOWN", "mutex")
				return l.Lock(context.Background())
			},
			func(g *dlock.Generator, ctx context.Context) error {
				l, _ := g.Gen("DOWN", "mutex")
				_, err := l.Lock(ctx)
				return err
			},
			nil,
		},
		"read": {
			func(g *dlock.Generator) (*dlock.Owner, error) {
				l, _ := g.GenRW("DOWN", "rw")
				return l.Lock(context.Background())
			},
			func(g *dlock.Generator, ctx context.Context) error {
				l, _ := g.GenRW("DOWN", "rw")
				_, err := l.RLock(ctx)
				return err
			},
			nil,
		},
		"write": {
			func(g *dlock.Generator) (*dlock.Owner, error) {
				l, _ := g.GenRW("DOWN", "rw")
				return l.RLock(context.Background())
			},
			func(g *dlock.Generator, ctx context.Context) error {
				l, _ := g.GenRW("DOWN", "rw")
				_, err := l.Lock(ctx)
				return err
			},
			nil,
		},
		"semaphore": {
			func(g *dlock.Generator) (*dlock.Owner, error) {
				s, _ := g.GenSemaphore("DOWN", "sem", 2)
				return s.Acquire(context.Background(), 2)
			},
			func(g *dlock.Generator, ctx context.Context) error {
				s, _ := g.GenSemaphore("DOWN", "sem", 2)
				_, err := s.Acquire(ctx, 1)
				return err
			},
			nil,
		},
		// A read-write lock and a semaphore of one name share their channel in a process: the
		// one that counts here waits on the subscription the other made (refused, its state
		// gone, its channel kept).
		"read after a semaphore of its name": {
			func(g *dlock.Generator) (*dlock.Owner, error) {
				l, _ := g.GenRW("DOWN", "both")
				return l.Lock(context.Background())
			},
			func(g *dlock.Generator, ctx context.Context) error {
				l, _ := g.GenRW("DOWN", "both")
				_, err := l.RLock(ctx)
				return err
			},
			func(g *dlock.Generator) error {
				s, _ := g.GenSemaphore("DOWN", "both", 2)
				if _, err := s.Acquire(context.Background(), 1); !errors.Is(err, dlock.ErrInvalidConfig) {
					return fmt.Errorf("a semaphore's Acquire of a read-write lock = %v; want ErrInvalidConfig", err)
				}
				return nil
			},
		},
	}
}

// standInLine has process B wait, with k, for the key that process A holds on s, and returns
// once B stands in line, listening for its grant, and waits for no answer from Redis (its next
// ask after its give-up, 5 s later): the channel of the wait's outcome.
func standInLine(t *testing.T, s *redistest.Server, k subscriberKind, opts ...dlock.Option) (<-chan error, *redis.Client) {
	t.Helper()
	var sent, answered atomic.Int64 // B's scripts
	cb := s.Client()
	cb.AddHook(fnHook{func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		counted := processor.ScriptName(cmd.Args()) != ""
		if counted {
			sent.Add(1)
		}
		err := next(ctx, cmd)
		if counted {
			answered.Add(1)
		}
		return err
	}})
	// A holds for long; B waits with a long lease, so that its next ask (a while after the
	// answer that stood it in line) comes after it gives up.
	ga := genOn(t, s.Client(), dlock.WithDefaultLease(60*time.Second))
	gb := genOn(t, cb, append([]dlock.Option{dlock.WithDefaultLease(60 * time.Second)}, opts...)...)
	gb.SetLinger(time.Hour)
	held, err := k.hold(ga)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runtime.KeepAlive(held) }) // (an Owner dropped is let go)
	// A first wait (or k.first) subscribes B to the key's releases (kept after it: the
	// linger), so that the confirmation, which has the waiter ask again, is over before the
	// one that counts.
	first := k.first
	if first == nil {
		first = func(g *dlock.Generator) error {
			if err := k.wait(g, ctxT(t, time.Second)); !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("first wait: %w", err)
			}
			return nil
		}
	}
	if err := first(gb); err != nil {
		t.Fatal(err)
	}
	// Its state is dropped (the attempt given back, in Redis too) before the wait that counts
	// begins: a wait that found the first one's attempt still open would stand in line on it
	// without a request of its own (the barrier below then met only by its own give-back,
	// once it had given up).
	waitFor(t, func() bool {
		return gb.Confirmed() > 0 && gb.InUse() == 0 && gb.SharedInUse() == 0 && sent.Load() == answered.Load()
	})
	before := answered.Load()
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- k.wait(gb, ctxT(t, 5*time.Second)) }()
	waitFor(t, func() bool { return answered.Load() > before && sent.Load() == answered.Load() })
	return gaveUp, cb
}

// Every call given a context that has already ended returns its error (context.Canceled; and
// ErrNotObtained from every acquisition, Try* included), runs no fn, and leaves nothing behind:
// no holding, no place in line, the lock free for another process.
func TestEveryCallWithAnEndedContext(t *testing.T) {
	g, _ := newGen(t)
	tg := uniqueTarget(t)
	l, _ := g.Gen("ENDED", tg)
	rw := rwOf(t, g, tg+"-rw")
	sem := semOf(t, g, tg+"-sem", 2)
	m, err := g.MultiOf(l, rw.WriteSide(), sem.Permits(1))
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	fn := func(context.Context) error { t.Error("Do ran fn with an ended context"); return nil }
	acquisitions := map[string]func() error{
		"Lock":                 func() error { _, err := l.Lock(ended); return err },
		"TryLock":              func() error { _, _, err := l.TryLock(ended); return err },
		"Do":                   func() error { return l.Do(ended, fn) },
		"RWLock.Lock":          func() error { _, err := rw.Lock(ended); return err },
		"RWLock.TryLock":       func() error { _, _, err := rw.TryLock(ended); return err },
		"RWLock.RLock":         func() error { _, err := rw.RLock(ended); return err },
		"RWLock.TryRLock":      func() error { _, _, err := rw.TryRLock(ended); return err },
		"Semaphore.Acquire":    func() error { _, err := sem.Acquire(ended, 1); return err },
		"Semaphore.TryAcquire": func() error { _, _, err := sem.TryAcquire(ended, 1); return err },
		"MultiLock.Lock":       func() error { _, err := m.Lock(ended); return err },
		"MultiLock.TryLock":    func() error { _, _, err := m.TryLock(ended); return err },
		"MultiLock.Do":         func() error { return m.Do(ended, fn) },
	}
	others := map[string]func() error{
		"State":                  func() error { _, err := l.State(ended); return err },
		"ForceRelease":           func() error { _, err := l.ForceRelease(ended, "x-1"); return err },
		"RWLock.State":           func() error { _, err := rw.State(ended); return err },
		"RWLock.ForceRelease":    func() error { _, err := rw.ForceRelease(ended, "x-1"); return err },
		"Semaphore.State":        func() error { _, err := sem.State(ended); return err },
		"Semaphore.ForceRelease": func() error { _, err := sem.ForceRelease(ended, "x-1"); return err },
		"Semaphore.SetPermits":   func() error { return sem.SetPermits(ended, 3) },
	}
	for name, call := range acquisitions {
		if err := call(); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s with an ended context: %v, want ErrNotObtained and context.Canceled", name, err)
		}
	}
	for name, call := range others {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with an ended context: %v, want context.Canceled", name, err)
		}
	}

	ctx := ctxT(t, 10*time.Second)
	gb, _ := newGen(t)
	if st := stateOf(t, mustGen(t, gb, "ENDED", tg, time.Second)); st.Held() || len(st.Waiting) != 0 {
		t.Errorf("the mutex after calls with an ended context: %+v", st)
	}
	if st, err := rwOf(t, gb, tg+"-rw").State(ctx); err != nil || len(st.Holds) != 0 || len(st.Waiting) != 0 {
		t.Errorf("the read-write lock after calls with an ended context: %+v, %v", st, err)
	}
	if st, err := semOf(t, gb, tg+"-sem", 2).State(ctx); err != nil || len(st.Holds) != 0 || len(st.Waiting) != 0 {
		t.Errorf("the semaphore after calls with an ended context: %+v, %v", st, err)
	}
	mb, err := gb.MultiOf(mustGen(t, gb, "ENDED", tg, time.Second), rwOf(t, gb, tg+"-rw").WriteSide(), semOf(t, gb, tg+"-sem", 2).Permits(2))
	if err != nil {
		t.Fatal(err)
	}
	if o, ok, err := mb.TryLock(ctx); !ok || err != nil {
		t.Errorf("another process's TryLock of every part: %v, %v", ok, err)
	} else if err := o.Unlock(); err != nil {
		t.Error(err)
	}
}
