package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
