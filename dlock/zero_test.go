package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/redis/go-redis/v9"
)

func TestNewGeneratorRejectsBadInput(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	cases := []struct {
		name string
		opts []dlock.Option
	}{
		{"nil option", []dlock.Option{nil}},
		{"nil logger", []dlock.Option{dlock.WithLogger(nil)}},
		{"short default lease", []dlock.Option{dlock.WithDefaultLease(time.Millisecond)}},
		{"blank type", []dlock.Option{dlock.WithLeases(map[string]time.Duration{"": time.Second})}},
		{"bad lease", []dlock.Option{dlock.WithLeases(map[string]time.Duration{"T": -time.Second})}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := dlock.NewGenerator(c, tc.opts...); !errors.Is(err, dlock.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
	if _, err := dlock.NewGenerator(nil); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("nil client: err = %v", err)
	}
	// Of several bad leases, the first type's is named, every time; the message says what is
	// wrong first, as every ErrInvalidConfig does.
	bad := map[string]time.Duration{"A": 0, "B": time.Millisecond, "C": time.Hour * 1000, "D": time.Second}
	for range 20 {
		_, err := dlock.NewGenerator(c, dlock.WithLeases(bad))
		if want := "dlock: invalid configuration: lease 0s is shorter than the minimum 30ms (type A)"; err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %s", err, want)
		}
	}
}

func TestGenRejectsBadInput(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithLeases(map[string]time.Duration{"ORDER": time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	for _, tc := range []struct{ typ, target string }{
		{"", "x"}, {"OR DER", "x"}, {"ORDER", "   "}, {"ORDER", "a\x00b"}, {"USER", "7"}, {"ORDER", "a}b"},
	} {
		if _, err := g.Gen(tc.typ, tc.target); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("Gen(%q, %q) err = %v, want ErrInvalidConfig", tc.typ, tc.target, err)
		}
	}
	if _, err := g.GenWithLease("ORDER", "x", 5*time.Millisecond); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("short lease: err = %v", err)
	}
	l, err := g.Gen("ORDER", "  42 ")
	if err != nil {
		t.Fatal(err)
	}
	if k := l.Config().UniqueKey(); k != "DLOCK_ORDER_42" {
		t.Fatalf("key %q, want DLOCK_ORDER_42", k)
	}
	if _, err := l.Lock(nil); !errors.Is(err, dlock.ErrInvalidConfig) { //nolint:staticcheck // nil context on purpose
		t.Fatalf("nil ctx: %v", err)
	}
}

func TestNewAPIOnZeroValues(t *testing.T) {
	var l *dlock.DistributedReentrantLock
	ctx := context.Background()
	if _, err := l.State(ctx); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("State: %v", err)
	}
	if _, err := l.ForceRelease(ctx, "x"); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("ForceRelease: %v", err)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("Extend: %v", err)
	}
	var zero dlock.DistributedReentrantLock
	if _, err := zero.State(ctx); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("zero State: %v", err)
	}
	c := srv.Client()
	defer c.Close()
	for _, o := range []dlock.Observer{nil, (*dlock.NopObserver)(nil)} {
		if _, err := dlock.NewGenerator(c, dlock.WithObserver(o)); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Fatalf("nil observer %#v: %v", o, err)
		}
	}
	// (WAIT counts whole milliseconds, and would take a bound under one as none)
	for _, bad := range [][2]any{{0, time.Second}, {1, time.Duration(0)}, {-1, time.Second}, {1, time.Millisecond - 1}} {
		if _, err := dlock.NewGenerator(c, dlock.WithReplicaAck(bad[0].(int), bad[1].(time.Duration))); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Fatalf("WithReplicaAck%v: %v", bad, err)
		}
	}
	// A wait for replicas as long as the client's ReadTimeout: the client would give up
	// reading WAIT's answer first, and the caller get a timeout, never ErrNotReplicated.
	short := redis.NewClient(&redis.Options{Addr: c.Options().Addr, ReadTimeout: 500 * time.Millisecond})
	defer short.Close()
	for _, wait := range []time.Duration{500 * time.Millisecond, 2 * time.Second} {
		if _, err := dlock.NewGenerator(short, dlock.WithReplicaAck(1, wait)); !errors.Is(err, dlock.ErrInvalidConfig) || !strings.Contains(err.Error(), "ReadTimeout") {
			t.Fatalf("WithReplicaAck(1, %v) on a client with a 500 ms ReadTimeout: %v", wait, err)
		}
	}
	if g, err := dlock.NewGenerator(short, dlock.WithReplicaAck(1, 100*time.Millisecond)); err != nil {
		t.Fatalf("WithReplicaAck(1, 100ms) on a client with a 500 ms ReadTimeout: %v", err)
	} else {
		_ = g.Close(context.Background())
	}
}

// Every exported method on zero values and nil receivers returns ErrInvalidConfig (or the
// zero answer for questions) and never panics.
func TestZeroValuesNeverPanic(t *testing.T) {
	ctx := context.Background()
	call := func(name string, f func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panics: %v", name, r)
			}
		}()
		if err := f(); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	var zg dlock.Generator
	var ng *dlock.Generator
	for name, g := range map[string]*dlock.Generator{"zero": &zg, "nil": ng} {
		call(name+" Generator.Gen", func() error { _, err := g.Gen("T", "x"); return err })
		call(name+" Generator.GenWithLease", func() error { _, err := g.GenWithLease("T", "x", time.Second); return err })
		call(name+" Generator.Close", func() error { return g.Close(ctx) })
	}
	var zl dlock.DistributedReentrantLock
	var nl *dlock.DistributedReentrantLock
	for name, l := range map[string]*dlock.DistributedReentrantLock{"zero": &zl, "nil": nl} {
		call(name+" Lock", func() error { _, err := l.Lock(ctx); return err })
		call(name+" TryLock", func() error { _, _, err := l.TryLock(ctx); return err })
		call(name+" Unlock", func() error { return l.Unlock(ctx) })
		call(name+" Do", func() error { return l.Do(ctx, func(context.Context) error { return nil }) })
		call(name+" State", func() error { _, err := l.State(ctx); return err })
		call(name+" Extend", func() error { return l.Extend(ctx, time.Second) })
		call(name+" ForceRelease", func() error { _, err := l.ForceRelease(ctx, "x"); return err })
		call(name+" questions", func() error {
			if l.HoldCount(ctx) != 0 {
				return errors.New("HoldCount")
			}
			if _, ok := l.FencingToken(ctx); ok {
				return errors.New("FencingToken")
			}
			if l.Config().UniqueKey() != "" {
				return errors.New("Config")
			}
			return dlock.ErrInvalidConfig
		})
	}
	// nil contexts
	g, _ := newGen(t)
	l, _ := g.Gen("ZERO", target(t))
	//lint:ignore SA1012 a nil context is the point
	call("Lock(nil)", func() error { _, err := l.Lock(nil); return err })                      //nolint:staticcheck
	call("TryLock(nil)", func() error { _, _, err := l.TryLock(nil); return err })             //nolint:staticcheck
	call("State(nil)", func() error { _, err := l.State(nil); return err })                    //nolint:staticcheck
	call("ForceRelease(nil)", func() error { _, err := l.ForceRelease(nil, "x"); return err }) //nolint:staticcheck
	call("Do(nil fn)", func() error { return l.Do(ctx, nil) })
	// Part has unexported methods: a type of the program's that embeds one (nil or not) is no
	// handle of this package's, and would skip a MultiLock's checks of its parts.
	type wrapped struct{ dlock.Part }
	call("MultiOf(a type embedding a nil Part)", func() error { _, err := g.MultiOf(wrapped{}); return err })
	call("MultiOf(a type embedding a Part)", func() error { _, err := g.MultiOf(wrapped{l}); return err })
	call("MultiOf(nil)", func() error { _, err := g.MultiOf(nil); return err })

	// the read-write lock, the semaphore and the MultiLock, and the Generator's calls that make
	// them, as the mutex above
	for name, g := range map[string]*dlock.Generator{"zero": &zg, "nil": ng} {
		call(name+" Generator.GenRW", func() error { _, err := g.GenRW("T", "x"); return err })
		call(name+" Generator.GenSemaphore", func() error { _, err := g.GenSemaphore("T", "x", 1); return err })
		call(name+" Generator.Multi", func() error { _, err := g.Multi(l); return err })
		call(name+" Generator.MultiOf", func() error { _, err := g.MultiOf(l); return err })
	}
	var nrw *dlock.RWLock
	for name, rw := range map[string]*dlock.RWLock{"zero": {}, "nil": nrw} {
		call(name+" RWLock.Lock", func() error { _, err := rw.Lock(ctx); return err })
		call(name+" RWLock.RLock", func() error { _, err := rw.RLock(ctx); return err })
		call(name+" RWLock.TryLock", func() error { _, _, err := rw.TryLock(ctx); return err })
		call(name+" RWLock.TryRLock", func() error { _, _, err := rw.TryRLock(ctx); return err })
		call(name+" RWLock.Unlock", func() error { return rw.Unlock(ctx) })
		call(name+" RWLock.State", func() error { _, err := rw.State(ctx); return err })
		call(name+" RWLock.ForceRelease", func() error { _, err := rw.ForceRelease(ctx, "x"); return err })
		call(name+" RWLock questions", func() error {
			if _, ok := rw.FencingToken(ctx); ok || rw.HoldCount(ctx) != 0 || !rw.Config().IsZero() {
				return errors.New("an answer of a held lock")
			}
			return dlock.ErrInvalidConfig
		})
	}
	var nsem *dlock.Semaphore
	for name, s := range map[string]*dlock.Semaphore{"zero": {}, "nil": nsem} {
		call(name+" Semaphore.Acquire", func() error { _, err := s.Acquire(ctx, 1); return err })
		call(name+" Semaphore.TryAcquire", func() error { _, _, err := s.TryAcquire(ctx, 1); return err })
		call(name+" Semaphore.Release", func() error { return s.Release(ctx) })
		call(name+" Semaphore.State", func() error { _, err := s.State(ctx); return err })
		call(name+" Semaphore.SetPermits", func() error { return s.SetPermits(ctx, 2) })
		call(name+" Semaphore.ForceRelease", func() error { _, err := s.ForceRelease(ctx, "x"); return err })
		call(name+" Semaphore questions", func() error {
			if _, ok := s.FencingToken(ctx); ok || s.HoldCount(ctx) != 0 || !s.Config().IsZero() {
				return errors.New("an answer of a held semaphore")
			}
			return dlock.ErrInvalidConfig
		})
	}
	var nm *dlock.MultiLock
	for name, m := range map[string]*dlock.MultiLock{"zero": {}, "nil": nm} {
		call(name+" MultiLock.Lock", func() error { _, err := m.Lock(ctx); return err })
		call(name+" MultiLock.TryLock", func() error { _, _, err := m.TryLock(ctx); return err })
		call(name+" MultiLock.Unlock", func() error { return m.Unlock(&dlock.Owner{}) })
		call(name+" MultiLock.Do", func() error { return m.Do(ctx, func(context.Context) error { return nil }) })
		call(name+" MultiLock questions", func() error {
			if _, ok := m.FencingTokens(ctx); ok || len(m.Parts()) != 0 {
				return errors.New("an answer of a held MultiLock")
			}
			return dlock.ErrInvalidConfig
		})
	}

	// nil contexts, on every kind
	rw, _ := g.GenRW("ZERO", target(t)+"-rw")
	sem, _ := g.GenSemaphore("ZERO", target(t)+"-sem", 2)
	m, _ := g.MultiOf(l, rw.ReadSide(), sem.Permits(1))
	var nilCtx context.Context
	call("Extend(nil)", func() error { return l.Extend(nilCtx, time.Second) })
	call("Do(nil)", func() error { return l.Do(nilCtx, func(context.Context) error { return nil }) })
	call("RWLock.Lock(nil)", func() error { _, err := rw.Lock(nilCtx); return err })
	call("RWLock.RLock(nil)", func() error { _, err := rw.RLock(nilCtx); return err })
	call("RWLock.TryLock(nil)", func() error { _, _, err := rw.TryLock(nilCtx); return err })
	call("RWLock.TryRLock(nil)", func() error { _, _, err := rw.TryRLock(nilCtx); return err })
	call("RWLock.Unlock(nil)", func() error { return rw.Unlock(nilCtx) })
	call("RWLock.State(nil)", func() error { _, err := rw.State(nilCtx); return err })
	call("RWLock.ForceRelease(nil)", func() error { _, err := rw.ForceRelease(nilCtx, "x"); return err })
	call("Semaphore.Acquire(nil)", func() error { _, err := sem.Acquire(nilCtx, 1); return err })
	call("Semaphore.TryAcquire(nil)", func() error { _, _, err := sem.TryAcquire(nilCtx, 1); return err })
	call("Semaphore.Release(nil)", func() error { return sem.Release(nilCtx) })
	call("Semaphore.State(nil)", func() error { _, err := sem.State(nilCtx); return err })
	call("Semaphore.SetPermits(nil)", func() error { return sem.SetPermits(nilCtx, 3) })
	call("Semaphore.ForceRelease(nil)", func() error { _, err := sem.ForceRelease(nilCtx, "x"); return err })
	call("MultiLock.Lock(nil)", func() error { _, err := m.Lock(nilCtx); return err })
	call("MultiLock.TryLock(nil)", func() error { _, _, err := m.TryLock(nilCtx); return err })
	call("MultiLock.Do(nil)", func() error { return m.Do(nilCtx, func(context.Context) error { return nil }) })
	call("MultiLock.Do(nil fn)", func() error { return m.Do(ctx, nil) })
	call("nil context's questions", func() error {
		_, lok := l.FencingToken(nilCtx)
		_, rok := rw.FencingToken(nilCtx)
		_, sok := sem.FencingToken(nilCtx)
		_, mok := m.FencingTokens(nilCtx)
		if lok || rok || sok || mok || l.HoldCount(nilCtx)+rw.HoldCount(nilCtx)+sem.HoldCount(nilCtx) != 0 {
			return errors.New("a nil context owns")
		}
		return dlock.ErrInvalidConfig
	})
}

// A zero Owner (not one Lock returned) is a context that never ends and owns nothing: as a
// context it takes the lock like context.Background; as an Owner it holds nothing.
func TestZeroOwner(t *testing.T) {
	g, _ := newGen(t)
	l, _ := g.Gen("ZERO", target(t))
	var zero dlock.Owner
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a zero Owner panics: %v", r)
		}
	}()
	if zero.Err() != nil || zero.Done() != nil || zero.Value("k") != nil || zero.String() == "" {
		t.Fatalf("a zero Owner as a context: Err %v, Done %v", zero.Err(), zero.Done())
	}
	if _, ok := zero.Deadline(); ok {
		t.Fatal("a zero Owner has a deadline")
	}
	ctx, cancel := context.WithCancel(&zero)
	cancel()
	if ctx.Err() == nil {
		t.Fatal("a context made from a zero Owner does not end")
	}
	if err := zero.Unlock(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("zero Owner's Unlock = %v, want ErrNotHeld", err)
	}
	if err := l.Unlock(&zero); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock(zero Owner) = %v, want ErrNotHeld", err)
	}
	if err := l.Extend(&zero, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend(zero Owner) = %v, want ErrNotHeld", err)
	}
	if n := l.HoldCount(&zero); n != 0 {
		t.Fatalf("HoldCount(zero Owner) = %d", n)
	}
	o, err := l.Lock(&zero)
	if err != nil {
		t.Fatalf("Lock(zero Owner) = %v", err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// Bad input never panics.
func TestNilInputsDoNotPanic(t *testing.T) {
	check := func(name string, f func()) {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panics: %v", name, r)
			}
		}()
		f()
	}
	check("ParseLeases(nil)", func() { _, _ = dlock.ParseLeases(nil) })
	check("(*DistributedReentrantLock)(nil).Config()", func() {
		var l *dlock.DistributedReentrantLock
		_ = l.Config()
	})
}

// A typed nil client is refused, or at least never panics.
func TestTypedNilClient(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("typed nil client panics: %v", r)
		}
	}()
	var c *redis.Client
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		return
	}
	l, _ := g.Gen("R2NIL", target(t))
	_, _, _ = l.TryLock(context.Background())
	_ = g.Close(context.Background())
}

// TestNilPartsSayTheirKind: the Part of a nil read-write lock's write side says KindWrite, and
// a nil semaphore's permits KindPermits, as the Parts of real ones do (they said KindRead);
// using them is still refused with ErrInvalidConfig.
func TestNilPartsSayTheirKind(t *testing.T) {
	var rw *dlock.RWLock
	var sem *dlock.Semaphore
	for _, tc := range []struct {
		part dlock.Part
		want dlock.LockKind
	}{
		{rw.ReadSide(), dlock.KindRead},
		{rw.WriteSide(), dlock.KindWrite},
		{sem.Permits(1), dlock.KindPermits},
		{(&dlock.RWLock{}).WriteSide(), dlock.KindWrite},
		{(&dlock.Semaphore{}).Permits(1), dlock.KindPermits},
	} {
		if got := tc.part.Kind(); got != tc.want {
			t.Errorf("Kind() = %v, want %v", got, tc.want)
		}
		if _, err := tc.part.Lock(context.Background()); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("%v: Lock err = %v, want ErrInvalidConfig", tc.want, err)
		}
	}
}

// TestZeroValueClient: a zero go-redis client (not made by redis.NewClient, NewClusterClient
// or NewRing) is bad input like a nil one: NewGenerator refuses it with ErrInvalidConfig. It
// panicked with a nil pointer dereference (processor.readTimeout reads its Options, nil).
func TestZeroValueClient(t *testing.T) {
	for _, c := range []redis.UniversalClient{&redis.Client{}, &redis.ClusterClient{}, &redis.Ring{}} {
		t.Run(fmt.Sprintf("%T", c), func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("NewGenerator(zero %T) panics: %v", c, r)
				}
			}()
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
			if !errors.Is(err, dlock.ErrInvalidConfig) {
				if g != nil {
					_ = g.Close(context.Background())
				}
				t.Fatalf("NewGenerator(zero %T) = %v, want ErrInvalidConfig", c, err)
			}
		})
	}
}

// TestWrappedNilClient: a user's type that wraps a nil client (an embedded nil interface or
// pointer) is bad input like a nil one: NewGenerator refuses it with ErrInvalidConfig, and
// nothing panics.
func TestWrappedNilClient(t *testing.T) {
	type wrapsAny struct{ redis.UniversalClient }
	type wrapsClient struct{ *redis.Client }
	type wrapsCluster struct{ *redis.ClusterClient }
	type byValue struct{ wrapsAny }
	type ext interface {
		redis.UniversalClient
		Unwrap() redis.UniversalClient
	}
	type wrapsExt struct{ ext }
	for _, c := range []redis.UniversalClient{wrapsAny{}, wrapsClient{}, wrapsCluster{}, &wrapsAny{},
		wrapsAny{wrapsAny{}}, &wrapsAny{&wrapsAny{wrapsClient{}}}, byValue{}, &byValue{}, wrapsExt{},
		wrapsAny{(*redis.Client)(nil)}, wrapsAny{(*wrapsAny)(nil)}, wrapsAny{&redis.Client{}},
		wrapsAny{&redis.ClusterClient{}}, wrapsAny{&redis.Ring{}}} {
		t.Run(fmt.Sprintf("%T", c), func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("a %T wrapping nil panics: %v", c, r)
				}
			}()
			g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
			if !errors.Is(err, dlock.ErrInvalidConfig) {
				if g != nil {
					l, _ := g.Gen("R2NIL", target(t))
					_, _, _ = l.TryLock(context.Background())
					_ = g.Close(context.Background())
				}
				t.Fatalf("NewGenerator(%T wrapping nil) = %v, want ErrInvalidConfig", c, err)
			}
		})
	}
	t.Run("set", func(t *testing.T) { // (a wrapper of a wrapper, set: taken, and none of its methods is called to find out)
		c := srv.Client()
		defer c.Close()
		w := &strictWrapper{UniversalClient: wrapsAny{c}} // (its nil fmt.Stringer is no client)
		g, err := dlock.NewGenerator(w, dlock.WithDefaultLease(time.Second))
		if err != nil {
			t.Fatalf("NewGenerator(a wrapper of a set client) = %v", err)
		}
		if err := g.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if w.poolStats.Load() != 0 {
			t.Fatalf("NewGenerator called the wrapper's PoolStats %d times", w.poolStats.Load())
		}
		type pinger interface {
			Ping(context.Context) *redis.StatusCmd
		}
		p := struct { // (its nil pinger carries no command dlock sends)
			*redis.Client
			pinger
		}{Client: c}
		if g, err = dlock.NewGenerator(byValue{wrapsAny{p}}, dlock.WithDefaultLease(time.Second)); err != nil {
			t.Fatalf("NewGenerator(a wrapper of a set client beside a nil Ping) = %v", err)
		}
		if err := g.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// strictWrapper is a client of the user's that counts the calls of one method a check made
// at construction might call, and embeds an interface it leaves nil that is not a client's.
type strictWrapper struct {
	redis.UniversalClient
	fmt.Stringer // (left nil: an embedded interface that is not a client's)
	poolStats    atomic.Int32
}

func (w *strictWrapper) PoolStats() *redis.PoolStats {
	w.poolStats.Add(1)
	return w.UniversalClient.PoolStats()
}

// TestPanickingClient: a user's client whose methods panic (a wrapper around a nil field of its
// own, say) makes the calls that reach it fail with an error — in the caller's goroutine as in
// dlock's own, for scripts, subscriptions and notices — and nothing panics; once it stops, the
// lock works again and Close returns.
func TestPanickingClient(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	w := &panickingClient{UniversalClient: c}
	w.panics.Store(true)
	g, err := dlock.NewGenerator(w, dlock.WithDefaultLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tg := target(t)
	l, _ := g.Gen("PANIC", tg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if o, err := l.Lock(ctx); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("Lock through a client that panics = %v, %v; want an error naming the panic", o, err)
	}
	if _, ok, err := l.TryLock(context.Background()); ok || err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("TryLock through a client that panics = %v, %v; want an error naming the panic", ok, err)
	}
	w.panics.Store(false)
	lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer lcancel()
	o, err := l.Lock(lctx)
	if err != nil {
		t.Fatalf("Lock once the client stopped panicking: %v", err)
	}
	// The holder's release fails through the client while it panics again (it may have been
	// sent: retried in the background); a waiter of another Generator still gets the lock.
	g2, _ := newGen(t, dlock.WithDefaultLease(2*time.Second))
	l2, _ := g2.Gen("PANIC", tg)
	got := lockAsync(t, l2, lctx)
	waitFor(t, func() bool { return len(stateOf(t, l2).Waiting) > 0 })
	w.panics.Store(true)
	if err := o.Unlock(); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("Unlock through a client that panics = %v; want an error naming the panic", err)
	}
	w.panics.Store(false)
	o2 := recv(t, got, "the other Generator's waiter")
	if o2 == nil {
		t.FailNow()
	}
	if err := o2.Unlock(); err != nil {
		t.Fatalf("the other Generator's waiter: %v", err)
	}
	// A waiter's subscription, silent for a while, publishes a probe (notify.go) through the
	// client, which panics; the waiter still gets the lock when the other Generator lets go.
	o3, err := l2.Lock(lctx)
	if err != nil {
		t.Fatalf("the other Generator's Lock: %v", err)
	}
	got = lockAsync(t, l, lctx)
	waitFor(t, func() bool { return len(stateOf(t, l).Waiting) > 0 })
	w.publishPanics.Store(true)
	waitFor(t, func() bool { return w.publishPanicked.Load() > 0 })
	if err := o3.Unlock(); err != nil {
		t.Fatalf("the other Generator's Unlock: %v", err)
	}
	if o := recv(t, got, "the waiter whose probe panicked"); o == nil {
		t.FailNow()
	} else if err := o.Unlock(); err != nil {
		t.Fatalf("the waiter whose probe panicked: %v", err)
	}
	w.publishPanics.Store(false)
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if err := g.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if w.panicked.Load() == 0 {
		t.Fatal("the client never panicked")
	}
}

// panickingClient is a user's client whose Process, Subscribe and Publish panic while panics
// is set, and whose Publish alone panics while publishPanics is, counting the panics.
type panickingClient struct {
	redis.UniversalClient
	panics, publishPanics     atomic.Bool
	panicked, publishPanicked atomic.Int32
}

func (p *panickingClient) check() {
	if p.panics.Load() {
		p.panicked.Add(1)
		var m map[string]int
		m["nil"]++ // a nil field of the user's
	}
}

func (p *panickingClient) Process(ctx context.Context, cmd redis.Cmder) error {
	p.check()
	return p.UniversalClient.Process(ctx, cmd)
}

func (p *panickingClient) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	p.check()
	return p.UniversalClient.Subscribe(ctx, channels...)
}

func (p *panickingClient) Publish(ctx context.Context, channel string, message any) *redis.IntCmd {
	if p.publishPanics.Load() {
		p.publishPanicked.Add(1)
		panic("publish: a nil field of the user's")
	}
	p.check()
	return p.UniversalClient.Publish(ctx, channel, message)
}
