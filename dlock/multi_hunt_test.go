package dlock_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// A MultiLock taken through an Owner of its first part, whose lease Extend shortened to less
// than half the lease of the handle it was taken with, re-enters that part and takes the
// rest: it does not go round for ever renewing the part (it judged "half its lease" by the
// handle's lease while renewing with the tenure's, so the renewal never sufficed, and Lock let
// go of the other parts and took them again — about a thousand times a second — until its
// context ended).
func TestMultiLockReentersAPartWhoseLeaseExtendShortened(t *testing.T) {
	g, _ := newGen(t)
	tg := target(t)
	a := mustGen(t, g, "MULTI", tg+"-a", time.Second)
	b := mustGen(t, g, "MULTI", tg+"-b", time.Second)
	m, err := g.Multi(b, a)
	if err != nil {
		t.Fatal(err)
	}
	oa, err := a.Lock(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = oa.Unlock() }()
	if err := a.Extend(oa, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // (the 1 s lease runs down: renewals now give 100 ms)
	if oa.Err() != nil {
		t.Fatalf("the holding ended: %v", context.Cause(oa))
	}
	ctx, cancel := context.WithTimeout(oa, 5*time.Second)
	defer cancel()
	o, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("MultiLock through the caller's Owner of a part = %v", err)
	}
	if n := a.HoldCount(o); n != 2 {
		t.Errorf("the re-entered part holds %d, want 2", n)
	}
	if err := m.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if n := a.HoldCount(oa); n != 1 {
		t.Errorf("the caller's part holds %d after the MultiLock's Unlock, want 1", n)
	}
}

// Three processes take MultiLocks over three keys in a cycle — A {x, y}, B {y, z}, C {z, x}
// — of mixed kinds (x a mutex, y a read-write lock's write side, z a semaphore's one permit),
// two goroutines each: every Lock completes (none waits for the others in a cycle), no key
// ever has two owners, and nothing is left held once all are done.
func TestMultiLocksInACycleOfMixedKindsComplete(t *testing.T) {
	tg := uniqueTarget(t)
	type proc struct {
		m *dlock.MultiLock
		k [2]int // the keys it takes (0 x, 1 y, 2 z)
	}
	var procs []proc
	var admin *redis.Client
	for i, ks := range [][2]int{{0, 1}, {1, 2}, {2, 0}} {
		g, c := newGen(t)
		admin = c
		x := mustGen(t, g, "CYC", tg+"-x", 2*time.Second)
		y, err := g.GenRW("CYC", tg+"-y")
		if err != nil {
			t.Fatal(err)
		}
		z, err := g.GenSemaphore("CYC", tg+"-z", 1)
		if err != nil {
			t.Fatal(err)
		}
		parts := []dlock.Part{x, y.WriteSide(), z.Permits(1)}
		// named in the cycle's order, so that a taker in that order would deadlock
		m, err := g.MultiOf(parts[ks[0]], parts[ks[1]])
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
		procs = append(procs, proc{m, ks})
	}
	var inside [3]atomic.Int32
	var overlaps atomic.Int32
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for _, p := range procs {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					err := p.m.Do(ctx, func(context.Context) error {
						for _, k := range p.k {
							if inside[k].Add(1) != 1 {
								overlaps.Add(1)
							}
						}
						time.Sleep(time.Millisecond)
						for _, k := range p.k {
							inside[k].Add(-1)
						}
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a MultiLock: %v (deadlocked?)", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlaps", n)
	}
	waitFor(t, func() bool {
		keys, _ := admin.Keys(context.Background(), "*"+tg+"*").Result()
		for _, k := range keys {
			switch {
			case strings.HasSuffix(k, ":shared:held"), strings.HasSuffix(k, ":shared:line"), strings.HasSuffix(k, ":line"):
				return false
			case strings.HasPrefix(k, "DLOCK_") && admin.Type(context.Background(), k).Val() == "string":
				return false
			}
		}
		return true
	})
}

// A MultiLock whose later part fails for good — a semaphore asked for more permits than it
// has, or for none, a read-write lock whose name a semaphore uses, a key holding a list
// (WRONGTYPE), the Generator closed while it waits — returns that part's error at once and
// holds none of the parts it took before: each is free in Redis (no key, no place in line)
// as Lock returns, and another process takes it at once.
func TestMultiLockLetsGoOfTheEarlierPartsWhenALaterOneFails(t *testing.T) {
	tg := uniqueTarget(t)
	gb, _ := newGen(t)
	cases := []struct {
		name string
		// later returns the failing part (its key sorts after "-a"), and what Lock's error must match
		later func(t *testing.T, g *dlock.Generator, c *redis.Client) (dlock.Part, func(err error) bool)
		close bool // the Generator is closed while Lock waits for the later part
	}{
		{"more permits than the semaphore has", func(t *testing.T, g *dlock.Generator, _ *redis.Client) (dlock.Part, func(error) bool) {
			s, err := g.GenSemaphore("PF", tg+"-b-sem", 1)
			if err != nil {
				t.Fatal(err)
			}
			return s.Permits(2), func(err error) bool { return errors.Is(err, dlock.ErrInvalidConfig) }
		}, false},
		{"no permits", func(t *testing.T, g *dlock.Generator, _ *redis.Client) (dlock.Part, func(error) bool) {
			s, err := g.GenSemaphore("PF", tg+"-b-zero", 1)
			if err != nil {
				t.Fatal(err)
			}
			return s.Permits(0), func(err error) bool { return errors.Is(err, dlock.ErrInvalidConfig) }
		}, false},
		{"a read-write lock named as a semaphore in use", func(t *testing.T, g *dlock.Generator, _ *redis.Client) (dlock.Part, func(error) bool) {
			s, err := gb.GenSemaphore("PF", tg+"-b-kind", 1)
			if err != nil {
				t.Fatal(err)
			}
			held, err := s.Acquire(ctxT(t, 10*time.Second), 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = held.Unlock() })
			rw, err := g.GenRW("PF", tg+"-b-kind")
			if err != nil {
				t.Fatal(err)
			}
			return rw.WriteSide(), func(err error) bool { return errors.Is(err, dlock.ErrInvalidConfig) }
		}, false},
		{"WRONGTYPE", func(t *testing.T, g *dlock.Generator, c *redis.Client) (dlock.Part, func(error) bool) {
			rw, err := g.GenRW("PF", tg+"-b-list")
			if err != nil {
				t.Fatal(err)
			}
			k := "{" + rw.Config().UniqueKey() + "}:shared:kind"
			if err := c.RPush(context.Background(), k, "not a lock").Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rawClient(t).Del(context.Background(), k) })
			return rw.ReadSide(), func(err error) bool {
				return errors.Is(err, dlock.ErrNotObtained) && strings.Contains(err.Error(), "WRONGTYPE")
			}
		}, false},
		{"Close while it waits", func(t *testing.T, g *dlock.Generator, _ *redis.Client) (dlock.Part, func(error) bool) {
			l := mustGen(t, gb, "PF", tg+"-b-close", 5*time.Second)
			held, err := l.Lock(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = held.Unlock() })
			return mustGen(t, g, "PF", tg+"-b-close", 5*time.Second), func(err error) bool { return errors.Is(err, dlock.ErrClosed) }
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newGen(t)
			mu := mustGen(t, g, "PF", tg+"-a", 5*time.Second) // (this and the write side are taken first)
			rw, err := g.GenRW("PF", tg+"-a-rw")
			if err != nil {
				t.Fatal(err)
			}
			later, want := tc.later(t, g, c)
			m, err := g.MultiOf(later, rw.WriteSide(), mu)
			if err != nil {
				t.Fatal(err)
			}
			if ps := m.Parts(); ps[2].Config().UniqueKey() != later.Config().UniqueKey() {
				t.Fatalf("the failing part is not taken last: %v", ps)
			}
			ctx := ctxT(t, 10*time.Second)
			got := make(chan error, 1)
			go func() {
				o, err := m.Lock(ctx)
				if o != nil {
					t.Errorf("Lock returned an Owner %v", o)
				}
				got <- err
			}()
			if tc.close {
				waitFor(t, func() bool { st, err := mu.State(ctx); return err == nil && st.Mine })
				if err := g.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			err = recv(t, got, "the MultiLock's Lock")
			t.Logf("Lock = %v", err)
			if !want(err) {
				t.Fatalf("Lock = %v", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("Lock waited for its context on a failure no wait mends: %v", err)
			}
			// the parts taken before are free in Redis now, not a lease later
			if n := c.Exists(context.Background(), key(mu)).Val(); n != 0 {
				t.Errorf("the mutex taken first is still in Redis (PTTL %v)", c.PTTL(context.Background(), key(mu)).Val())
			}
			rwKeys, _ := c.Keys(context.Background(), "{"+rw.Config().UniqueKey()+"}*").Result()
			for _, k := range rwKeys {
				if strings.HasSuffix(k, ":held") || strings.HasSuffix(k, ":line") {
					t.Errorf("the write side taken first left %s in Redis", k)
				}
			}
			muB := mustGen(t, gb, "PF", tg+"-a", 5*time.Second)
			if o, ok, err := muB.TryLock(ctx); !ok || err != nil {
				t.Errorf("the mutex is not free for another process: %v %v", ok, err)
			} else {
				_ = o.Unlock()
			}
			rwB, _ := gb.GenRW("PF", tg+"-a-rw")
			if o, ok, err := rwB.TryLock(ctx); !ok || err != nil {
				t.Errorf("the write side is not free for another process: %v %v", ok, err)
			} else {
				_ = o.Unlock()
			}
		})
	}
}

// An operator in another process removes one part of a held MultiLock (each kind in turn):
// re-entry with its Owner reports the loss and leaves the other parts' hold counts as they
// were; Unlock reports the loss (ErrLockLost), frees the other parts in Redis, and ends the
// Owner; a second Unlock and a Lock with the ended Owner return errors (the loss, or
// ErrNotHeld), never nil, and nothing panics.
func TestMultiLockAfterAnOperatorRemovedAPart(t *testing.T) {
	for _, c := range []struct {
		lost   string
		atOnce bool
	}{{"mutex", false}, {"permits", false}, {"write side", false}, {"mutex", true}, {"permits", true}, {"write side", true}} {
		lost := c.lost
		name := lost
		if c.atOnce {
			name += ", Unlock before the holder hears"
		}
		t.Run(name, func(t *testing.T) {
			ga, _ := newGen(t)
			gb, _ := newGen(t)
			tg := uniqueTarget(t)
			ctx := ctxT(t, 20*time.Second)
			mu, sem, rw := everyKind(t, ga, tg, 1)
			m, err := ga.MultiOf(rw.WriteSide(), sem.Permits(1), mu)
			if err != nil {
				t.Fatal(err)
			}
			o, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			muB, semB, rwB := everyKind(t, gb, tg, 1)
			switch lost {
			case "mutex":
				st, err := muB.State(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := muB.ForceRelease(ctx, st.Holder); !ok || err != nil {
					t.Fatalf("ForceRelease = %v %v", ok, err)
				}
			case "permits":
				st, err := semB.State(ctx)
				if err != nil || len(st.Holds) != 1 {
					t.Fatalf("%+v %v", st, err)
				}
				if ok, err := semB.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
					t.Fatalf("ForceRelease = %v %v", ok, err)
				}
			case "write side":
				st, err := rwB.State(ctx)
				if err != nil || len(st.Holds) != 1 {
					t.Fatalf("%+v %v", st, err)
				}
				if ok, err := rwB.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
					t.Fatalf("ForceRelease = %v %v", ok, err)
				}
			}
			if c.atOnce {
				if err := m.Unlock(o); !errors.Is(err, dlock.ErrLockLost) {
					t.Fatalf("Unlock = %v, want ErrLockLost", err)
				}
				if err := m.Unlock(o); err == nil || !(errors.Is(err, dlock.ErrLockLost) || errors.Is(err, dlock.ErrNotHeld)) {
					t.Fatalf("a second Unlock = %v, want the loss or ErrNotHeld", err)
				}
				if o.Err() == nil {
					t.Fatal("the Owner lives on after its Unlock")
				}
				for _, ok := range []func() (bool, error){
					func() (bool, error) { o2, ok, err := muB.TryLock(ctx); _ = o2.Unlock(); return ok, err },
					func() (bool, error) { o2, ok, err := semB.TryAcquire(ctx, 1); _ = o2.Unlock(); return ok, err },
					func() (bool, error) { o2, ok, err := rwB.TryLock(ctx); _ = o2.Unlock(); return ok, err },
				} {
					if ok, err := ok(); !ok || err != nil {
						t.Fatalf("a part is not free after Unlock: %v %v", ok, err)
					}
				}
				return
			}
			// The holder learns of it at its next renewal or release; make sure it learned
			// before re-entry by waiting for the Owner to end (a renewal within 3/4 of 5 s).
			select {
			case <-o.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the Owner did not end after a part was removed")
			}
			if cause := context.Cause(o); !errors.Is(cause, dlock.ErrLockLost) {
				t.Fatalf("the Owner's cause %v, want ErrLockLost", cause)
			}
			counts := func() []int {
				return []int{mu.HoldCount(o), sem.HoldCount(o), rw.HoldCount(o)}
			}
			before := counts()
			if again, err := m.Lock(o); err == nil || !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("re-entry after the loss = %v, %v; want ErrLockLost", again, err)
			}
			if after := counts(); !slices.Equal(before, after) {
				t.Fatalf("hold counts %v before the failed re-entry, %v after", before, after)
			}
			if err := m.Unlock(o); !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("Unlock = %v, want ErrLockLost", err)
			}
			if err := m.Unlock(o); err == nil || !(errors.Is(err, dlock.ErrLockLost) || errors.Is(err, dlock.ErrNotHeld)) {
				t.Fatalf("a second Unlock = %v, want the loss or ErrNotHeld", err)
			}
			if o2, err := m.Lock(o); err == nil {
				_ = m.Unlock(o2)
				t.Fatal("Lock with an ended Owner returned nil")
			}
			if o2, ok, err := muB.TryLock(ctx); !ok || err != nil {
				t.Fatalf("the mutex is not free: %v %v", ok, err)
			} else {
				_ = o2.Unlock()
			}
			if o2, ok, err := semB.TryAcquire(ctx, 1); !ok || err != nil {
				t.Fatalf("the permit is not free: %v %v", ok, err)
			} else {
				_ = o2.Unlock()
			}
			if o2, ok, err := rwB.TryLock(ctx); !ok || err != nil {
				t.Fatalf("the write side is not free: %v %v", ok, err)
			} else {
				_ = o2.Unlock()
			}
		})
	}
}

// A MultiLock's Owner that the program drops without Unlock is collected and every part is
// released (nothing the library keeps refers to it or to its parts' Owners), for every kind
// of part, the re-entered one included.
func TestDroppedMultiLockOwnerIsReleased(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	mu, sem, rw := everyKind(t, ga, tg, 1)
	m, err := ga.MultiOf(mu, sem.Permits(1), rw.WriteSide())
	if err != nil {
		t.Fatal(err)
	}
	func() {
		if _, err := m.Lock(ctx); err != nil { // the Owner is dropped at once
			t.Fatal(err)
		}
	}()
	muB, semB, rwB := everyKind(t, gb, tg, 1)
	for name, try := range map[string]func() (*dlock.Owner, bool, error){
		"mutex":      func() (*dlock.Owner, bool, error) { return muB.TryLock(ctx) },
		"permits":    func() (*dlock.Owner, bool, error) { return semB.TryAcquire(ctx, 1) },
		"write side": func() (*dlock.Owner, bool, error) { return rwB.TryLock(ctx) },
	} {
		waitFor(t, func() bool {
			runtime.GC()
			o, ok, err := try()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if ok {
				_ = o.Unlock()
			}
			return ok
		})
	}
}

// Under a faulty network (writes delivered twice, at once or late; replies lost; requests
// kept on the wire; requests overtaken), three processes take MultiLocks over three keys in a
// cycle, of mixed kinds (a mutex, a read-write lock's write side, a semaphore's one permit):
// no key has two live owners at once (a span counts if its Owner was still live at its end),
// every Lock completes within 10 leases, fails only with documented errors, and nothing is
// left without a time to live.
func TestMultiLocksUnderDuplicatedLateAndLostWrites(t *testing.T) {
	const lease = 300 * time.Millisecond
	tg := uniqueTarget(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var hooks []*chaosHook
	var ms []*dlock.MultiLock
	var ks [][2]int
	for i, pair := range [][2]int{{0, 1}, {1, 2}, {2, 0}} {
		h := newChaosHook(lease, 10, seed+uint64(i))
		hooks = append(hooks, h)
		g := chaosGen(t, h)
		x := mustGen(t, g, "CHM", tg+"-x", lease)
		y, _ := g.GenRW("CHM", tg+"-y")
		z, _ := g.GenSemaphore("CHM", tg+"-z", 1)
		parts := []dlock.Part{x, y.WriteSide(), z.Permits(1)}
		m, err := g.MultiOf(parts[pair[0]], parts[pair[1]])
		if err != nil {
			t.Fatal(err)
		}
		ms, ks = append(ms, m), append(ks, pair)
	}
	defer func() {
		for i, h := range hooks {
			t.Logf("process %d: %v", i, h)
		}
	}()
	ctx := ctxT(t, time.Minute)
	var ledgers [3]spanLedger
	var bad, notObtained, acquired atomic.Int64
	fail := func(format string, args ...any) {
		if bad.Add(1) <= 10 {
			t.Errorf(format, args...)
		}
	}
	stopAt := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for p, m := range ms {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(stopAt); i++ {
					actx, cancel := context.WithTimeout(ctx, 10*lease)
					o, err := m.Lock(actx)
					cancel()
					if err != nil {
						if errors.Is(err, dlock.ErrNotObtained) {
							notObtained.Add(1)
						}
						if !documentedErr(err) || errors.Is(err, dlock.ErrInvalidConfig) {
							fail("Lock: %v", err)
						}
						continue
					}
					acquired.Add(1)
					from := time.Now()
					time.Sleep(time.Duration(1+i%5) * time.Millisecond)
					if i%4 == 0 {
						if _, err := m.Lock(o); err == nil {
							if err := m.Unlock(o); err != nil && !documentedErr(err) {
								fail("Unlock of a re-entry: %v", err)
							}
						} else if !documentedErr(err) {
							fail("re-entry: %v", err)
						}
					}
					to := time.Now()
					live := o.Err() == nil
					if err := m.Unlock(o); err != nil && !documentedErr(err) {
						fail("Unlock: %v", err)
					}
					if live {
						for _, k := range ks[p] {
							ledgers[k].add(heldSpan{from, to, 1})
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	for k := range ledgers {
		for _, s := range ledgers[k].spans {
			if out := ledgers[k].outAt(s.from); out > 1 {
				fail("key %d: %d owners at %v", k, out, s.from)
			}
		}
	}
	t.Logf("%d acquisitions, %d gave up", acquired.Load(), notObtained.Load())
	if n := notObtained.Load(); n > 0 {
		t.Errorf("%d of %d Locks waited 10 leases in vain", n, n+acquired.Load())
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

// In two processes, goroutines take MultiLocks over a mutex, a read-write lock's write side
// and a semaphore's one permit, beside goroutines that take each lock alone (readers of the
// read-write lock among them): no key ever has a writer beside another owner, and every Lock
// completes.
func TestMultiLocksBesideSinglePartLocks(t *testing.T) {
	tg := uniqueTarget(t)
	ctx := ctxT(t, 30*time.Second)
	const (
		kx = iota
		ky
		kz
	)
	var writers [3]atomic.Int32
	var readers atomic.Int32
	var overlaps atomic.Int32
	enter := func(k int) {
		if writers[k].Add(1) != 1 || (k == ky && readers.Load() != 0) {
			overlaps.Add(1)
		}
	}
	leave := func(k int) { writers[k].Add(-1) }
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	run := func(rounds int, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 2 {
		g, _ := newGen(t)
		x := mustGen(t, g, "MIX", tg+"-x", 2*time.Second)
		y, _ := g.GenRW("MIX", tg+"-y")
		z, _ := g.GenSemaphore("MIX", tg+"-z", 1)
		m, err := g.MultiOf(z.Permits(1), y.WriteSide(), x)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			run(10, func() error {
				return m.Do(ctx, func(context.Context) error {
					enter(kx)
					enter(ky)
					enter(kz)
					time.Sleep(time.Millisecond)
					leave(kz)
					leave(ky)
					leave(kx)
					return nil
				})
			})
		}
		run(10, func() error {
			return x.Do(ctx, func(context.Context) error { enter(kx); time.Sleep(time.Millisecond); leave(kx); return nil })
		})
		run(10, func() error {
			o, err := y.RLock(ctx)
			if err != nil {
				return err
			}
			readers.Add(1)
			if writers[ky].Load() != 0 {
				overlaps.Add(1)
			}
			time.Sleep(time.Millisecond)
			readers.Add(-1)
			return o.Unlock()
		})
		run(10, func() error {
			o, err := z.Acquire(ctx, 1)
			if err != nil {
				return err
			}
			enter(kz)
			time.Sleep(time.Millisecond)
			leave(kz)
			return o.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a lock: %v", err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d overlaps", n)
	}
}

// A part lost while Lock renews a mutex part taken earlier (the wait for the later parts used
// half its lease) is not given back as held either: here the last part, a semaphore's permit,
// is removed by an operator of this Generator while the renewal of the first part is on its
// way. Lock let go of nothing and returned an Owner that had ended already.
func TestMultiLockDoesNotReturnAPartLostWhileItRenewedAnother(t *testing.T) {
	const lease = 2 * time.Second
	c := srv.Client()
	w := newWire(t, c)
	g := genOn(t, c, dlock.WithDefaultLease(lease))
	other, _ := newGen(t, dlock.WithDefaultLease(lease))
	tg := uniqueTarget(t)
	a := mustGen(t, g, "FRESH", tg+"-a", lease)
	sem, _ := g.GenSemaphore("FRESH", tg+"-c", 1)
	m, err := g.MultiOf(sem.Permits(1), a)
	if err != nil {
		t.Fatal(err)
	}
	semB, _ := other.GenSemaphore("FRESH", tg+"-c", 1)
	ctx := ctxT(t, 20*time.Second)
	held, err := semB.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		o   *dlock.Owner
		err error
	}
	got := make(chan result, 1)
	go func() {
		o, err := m.Lock(ctx)
		got <- result{o, err}
	}()
	waitFor(t, func() bool { st, err := a.State(ctx); return err == nil && st.Mine })
	// Less than half a's lease left: Lock renews it once it has the permit, before a's own
	// renewal at three quarters (the renewal stalled must be Lock's).
	time.Sleep(lease * 57 / 100)
	w.stall("renew", 1)
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return w.stalledCount() == 1 }) // a's renewal, on its way
	st, err := sem.State(ctx)
	if err != nil || len(st.Holds) != 1 {
		t.Fatalf("the semaphore while Lock renews a: %+v, %v", st, err)
	}
	if ok, err := sem.ForceRelease(ctx, st.Holds[0].Locker); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	w.unstall()
	r := recv(t, got, "the MultiLock's Lock")
	if r.err != nil {
		t.Fatalf("Lock = %v", r.err)
	}
	defer func() { _ = m.Unlock(r.o) }()
	time.Sleep(50 * time.Millisecond) // (the Owner ends in a goroutine of its own)
	if r.o.Err() != nil {
		t.Fatalf("Lock returned an Owner that had ended: %v", context.Cause(r.o))
	}
	if toks, ok := m.FencingTokens(r.o); !ok || len(toks) != 2 {
		t.Fatalf("FencingTokens of the Owner Lock returned = %v, %v; want both parts", toks, ok)
	}
}

// A MultiLock taken through the caller's Owner of its first part (of each kind) that gives up
// on a later part (held elsewhere, its context's deadline passes) gives back only the hold it
// re-entered: the caller still holds its part once, live, and one Unlock frees it in Redis.
func TestMultiLockThatGivesUpLeavesTheCallersPartAsItWas(t *testing.T) {
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	tg := uniqueTarget(t)
	ctx := ctxT(t, 20*time.Second)
	mu, sem, rw := everyKind(t, ga, tg, 1)
	last := mustGen(t, ga, "PMZ", tg, 5*time.Second) // (its key sorts after every kind's)
	lastB := mustGen(t, gb, "PMZ", tg, 5*time.Second)
	held, err := lastB.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Unlock() }()
	muB, semB, rwB := everyKind(t, gb, tg, 1)
	for _, k := range []struct {
		name  string
		part  dlock.Part
		count func(context.Context) int
		free  func() (*dlock.Owner, bool, error)
	}{
		{"mutex", mu, mu.HoldCount, func() (*dlock.Owner, bool, error) { return muB.TryLock(ctx) }},
		{"permits", sem.Permits(1), sem.HoldCount, func() (*dlock.Owner, bool, error) { return semB.TryAcquire(ctx, 1) }},
		{"write side", rw.WriteSide(), rw.HoldCount, func() (*dlock.Owner, bool, error) { return rwB.TryLock(ctx) }},
		{"read side", rw.ReadSide(), rw.HoldCount, func() (*dlock.Owner, bool, error) { return rwB.TryLock(ctx) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			own, err := k.part.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ga.MultiOf(last, k.part)
			if err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(own, 200*time.Millisecond)
			o, err := m.Lock(short)
			cancel()
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || o != nil {
				t.Fatalf("Lock with its last part held elsewhere = %v, %v", o, err)
			}
			if o, ok, err := m.TryLock(own); ok || err != nil || o != nil {
				t.Fatalf("TryLock with its last part held elsewhere = %v, %v, %v", o, ok, err)
			}
			if n := k.count(own); n != 1 || own.Err() != nil {
				t.Fatalf("the caller's part holds %d (ended: %v), want 1, live", n, own.Err())
			}
			if err := own.Unlock(); err != nil {
				t.Fatal(err)
			}
			if o, ok, err := k.free(); !ok || err != nil {
				t.Fatalf("the part is not free after the caller's Unlock: %v %v", ok, err)
			} else {
				_ = o.Unlock()
			}
		})
	}
}
