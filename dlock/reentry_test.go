package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// Redisson's write → read → write re-entrancy, unlocked through RWLock.Unlock as the doc
// says: each Unlock gives up the innermost hold of the Owner it is given. The Owner the
// write re-entry returned is the write side taken last; RWLock.Unlock(w2) must give up that
// write hold, not the read hold under it: otherwise the read's own Unlock finds nothing and a
// write hold is left behind, which keeps every other process out for as long as the process lives.
func TestRWUnlockOfAWriteReentryThroughAReadOwner(t *testing.T) {
	tg := uniqueTarget(t)
	ga, _ := newGen(t)
	gb, _ := newGen(t)
	ctx := ctxT(t, 30*time.Second)
	la, _ := ga.GenRW("RW", tg)
	lb, _ := gb.GenRW("RW", tg)
	w, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := la.RLock(w)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := la.Lock(r)
	if err != nil {
		t.Fatalf("write re-entry through the read owner: %v", err)
	}
	if c := la.HoldCount(w2); c != 2 {
		t.Errorf("HoldCount of the write re-entry's Owner = %d, want 2 (the write side it holds twice)", c)
	}
	if err := la.Unlock(w2); err != nil {
		t.Fatalf("Unlock(w2): %v", err)
	}
	if err := la.Unlock(r); err != nil {
		t.Errorf("Unlock(r) after Unlock(w2): %v (the read hold was given up by Unlock(w2))", err)
	}
	if err := la.Unlock(w); err != nil {
		t.Fatalf("Unlock(w): %v", err)
	}
	// every Lock was matched by one Unlock: the lock is free
	if !writerGetsIn(ctx, lb, 3*time.Second) {
		st, _ := la.State(ctx)
		t.Fatalf("after an Unlock for each Lock, another process still cannot write: %+v", st)
	}
}

type ctxKeyReentry struct{}

// Random nests of RLock/Lock through earlier Owners (and contexts derived from them), each
// Owner unlocked by RWLock.Unlock in reverse order: every Unlock succeeds and the lock is free
// after the last (a write re-entered through an Owner whose innermost hold is a read included).
func TestRWRandomReentriesUnlockedInReverse(t *testing.T) {
	g, _ := newGen(t)
	gb, _ := newGen(t)
	ctx := ctxT(t, 60*time.Second)
	fails := 0
	for seed := range 30 {
		tg := uniqueTarget(t) + fmt.Sprint(seed)
		l, _ := g.GenRW("RW", tg)
		lb, _ := gb.GenRW("RW", tg)
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		type ent struct {
			o    *dlock.Owner
			desc string
		}
		var stack []ent
		var log []string
		bad := ""
		for step := 0; step < 8 && bad == ""; step++ {
			var base context.Context = ctx
			bdesc := "bg"
			if len(stack) > 0 && r.IntN(4) > 0 {
				i := len(stack) - 1
				if r.IntN(3) == 0 {
					i = r.IntN(len(stack))
				}
				base, bdesc = stack[i].o, stack[i].desc
			}
			if r.IntN(3) == 0 {
				base = context.WithValue(base, ctxKeyReentry{}, step)
				bdesc = "derived(" + bdesc + ")"
			}
			var o *dlock.Owner
			var err error
			var desc string
			if r.IntN(2) == 0 {
				desc = fmt.Sprintf("w%d", step)
				c, cancel := context.WithTimeout(base, 50*time.Millisecond) // (a wait that cannot be served ends soon: only the outcome counts)
				o, err = l.Lock(c)
				cancel()
			} else {
				desc = fmt.Sprintf("r%d", step)
				c, cancel := context.WithTimeout(base, 50*time.Millisecond) // (a wait that cannot be served ends soon: only the outcome counts)
				o, err = l.RLock(c)
				cancel()
			}
			if errors.Is(err, dlock.ErrUpgrade) || errors.Is(err, dlock.ErrNotObtained) {
				log = append(log, fmt.Sprintf("%s=%s(%s)->%v", desc, desc[:1], bdesc, err))
				continue
			}
			if err != nil {
				bad = fmt.Sprintf("%s: %v", desc, err)
				break
			}
			log = append(log, fmt.Sprintf("%s=%s(%s)", desc, desc[:1], bdesc))
			stack = append(stack, ent{o, desc})
		}
		for i := len(stack) - 1; i >= 0 && bad == ""; i-- {
			if err := l.Unlock(stack[i].o); err != nil {
				bad = fmt.Sprintf("Unlock(%s): %v", stack[i].desc, err)
			}
		}
		if bad == "" {
			if !writerGetsIn(ctx, lb, 2*time.Second) {
				bad = "left held"
			}
		}
		if bad != "" {
			fails++
			t.Errorf("seed %d: %v: %v", seed, log, bad)
			for _, e := range stack {
				_ = e.o.Unlock()
			}
		}
	}
	t.Logf("%d fails", fails)
}

// A MultiLock over a read side and a semaphore's permits, taken through an Owner of those
// permits that was itself taken under the write side (w → permits → MultiLock(read, permits)):
// the read part is a downgrade, the permits a re-entry. MultiLock.Unlock gives up what the
// MultiLock took — the downgraded read and the permits' re-entry — and leaves the caller's write
// and permits as they were (the permits' holding context carries the write owner it was taken
// under, which must not shadow the read part): the write's own Unlock then lets go, and no
// read-hold is left held by nobody.
func TestMultiLockUnlockGivesUpWhatItTookNotAnOuterOwnersSide(t *testing.T) {
	tg := uniqueTarget(t)
	g, _ := newGen(t)
	gb, _ := newGen(t)
	ctx := ctxT(t, 30*time.Second)
	l, _ := g.GenRW("RW", tg)
	lb, _ := gb.GenRW("RW", tg)
	s := semOf(t, g, tg, 2)
	ml, err := g.MultiOf(l.ReadSide(), s.Permits(1))
	if err != nil {
		t.Fatal(err)
	}
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Acquire(w, 1) // permits taken under the write
	if err != nil {
		t.Fatal(err)
	}
	mo, err := ml.Lock(p)
	if err != nil {
		t.Fatalf("MultiLock through the permits' owner: %v", err)
	}
	if err := ml.Unlock(mo); err != nil {
		t.Fatalf("MultiLock.Unlock: %v", err)
	}
	if w.Err() != nil || l.HoldCount(w) != 1 {
		t.Errorf("the caller's write after the MultiLock's Unlock: %v, HoldCount %d; want held once", w.Err(), l.HoldCount(w))
	}
	if err := p.Unlock(); err != nil {
		t.Errorf("the caller's permits: %v", err)
	}
	if err := w.Unlock(); err != nil {
		t.Errorf("the caller's write: %v", err)
	}
	// one Unlock for each Lock: everything is free
	if !writerGetsIn(ctx, lb, 3*time.Second) {
		st, _ := l.State(ctx)
		t.Fatalf("every Lock unlocked, yet no writer elsewhere gets in: %+v", st)
	}
}

// The same with a mutex part taken under the write side (its key sorts after the read-write
// lock's, as the permits' did): MultiLock.Unlock gives up the caller's write, not the read it took.
func TestMultiLockUnlockWithAMutexPartTakenUnderTheWrite(t *testing.T) {
	tg := uniqueTarget(t)
	g, _ := newGen(t)
	gb, _ := newGen(t)
	ctx := ctxT(t, 30*time.Second)
	l, _ := g.GenRW("RW", tg)
	lb, _ := gb.GenRW("RW", tg)
	m := mustGen(t, g, "Z", tg, time.Second) // DLOCK_Z_… sorts after DLOCK_RW_…
	ml, err := g.MultiOf(l.ReadSide(), m)
	if err != nil {
		t.Fatal(err)
	}
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mo, err := m.Lock(w)
	if err != nil {
		t.Fatal(err)
	}
	o, err := ml.Lock(mo)
	if err != nil {
		t.Fatal(err)
	}
	if err := ml.Unlock(o); err != nil {
		t.Fatal(err)
	}
	if w.Err() != nil || l.HoldCount(w) != 1 {
		t.Errorf("the caller's write after the MultiLock's Unlock: %v, HoldCount %d; want held once", w.Err(), l.HoldCount(w))
	}
	if err := m.Unlock(mo); err != nil {
		t.Errorf("the caller's mutex: %v", err)
	}
	if err := w.Unlock(); err != nil {
		t.Errorf("the caller's write: %v", err)
	}
	if !writerGetsIn(ctx, lb, 15*time.Second) {
		t.Fatal("every Lock unlocked, yet no writer elsewhere gets in")
	}
}

// writerGetsIn reports whether lb's TryLock (a writer of another process) gets in within d,
// letting go at once.
func writerGetsIn(ctx context.Context, lb *dlock.RWLock, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if o, ok, _ := lb.TryLock(ctx); ok {
			_ = o.Unlock()
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// A MultiLock's Owner keeps the values of the context given to Lock (Owner's doc): a lock the
// caller's context carries that is not one of the MultiLock's parts — a read-write lock of a
// mutex part's name (a different lock, GenRW's doc), another Generator's mutex of that name —
// stays carried by the MultiLock's Owner when the part of that name is a re-entry (its
// holding's context was taken without them): only the part's own lock's keys are the part's.
func TestMultiLockOwnerKeepsTheCallersOtherLocksOfAPartsName(t *testing.T) {
	t.Run("rw lock of the mutex part's name", func(t *testing.T) {
		g, _ := newGen(t)
		tg := uniqueTarget(t)
		ctx := ctxT(t, 30*time.Second)
		m := mustGen(t, g, "PV", tg, 5*time.Second)
		n := mustGen(t, g, "PV", tg+"n", 5*time.Second)
		rw, err := g.GenRW("PV", tg) // the same unique key as m: a different lock
		if err != nil {
			t.Fatal(err)
		}
		ml, err := g.Multi(m, n)
		if err != nil {
			t.Fatal(err)
		}
		om, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := rw.RLock(om) // carries the mutex
		if err != nil {
			t.Fatal(err)
		}
		mo, err := ml.Lock(r) // m re-entered through r, n taken
		if err != nil {
			t.Fatal(err)
		}
		if c := rw.HoldCount(mo); c != 1 {
			t.Errorf("rw.HoldCount(MultiLock Owner taken through the read Owner) = %d, want 1 (the read the caller's context carries)", c)
		}
		if _, ok := rw.FencingToken(mo); !ok {
			t.Errorf("rw.FencingToken(MultiLock Owner) not ok: the Owner lost the read hold of the context it was taken with")
		}
		if err := ml.Unlock(mo); err != nil {
			t.Fatal(err)
		}
		if err := r.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := om.Unlock(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("another Generator's mutex of the same name", func(t *testing.T) {
		g, c := newGen(t)
		// another Redis database: the same name is another lock
		g2 := genOn(t, redis.NewClient(&redis.Options{Addr: c.Options().Addr, DB: 3}))
		tg := uniqueTarget(t)
		ctx := ctxT(t, 30*time.Second)
		m := mustGen(t, g, "PV", tg, 5*time.Second)
		n := mustGen(t, g, "PV", tg+"n", 5*time.Second)
		m2 := mustGen(t, g2, "PV", tg, 5*time.Second)
		ml, err := g.Multi(m, n)
		if err != nil {
			t.Fatal(err)
		}
		om, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		om2, err := m2.Lock(om) // carries m
		if err != nil {
			t.Fatal(err)
		}
		mo, err := ml.Lock(om2) // m re-entered through om2, n taken
		if err != nil {
			t.Fatal(err)
		}
		if c := m2.HoldCount(mo); c != 1 {
			t.Errorf("g2's mutex HoldCount(MultiLock Owner taken through its Owner) = %d, want 1", c)
		}
		// a re-entry through the MultiLock's Owner of the mutex its caller holds: not found, it
		// waits for the caller's own holding (a self-deadlock until the context ends)
		if o, ok, err := m2.TryLock(mo); err != nil || !ok {
			t.Errorf("g2's mutex TryLock(MultiLock Owner) = %v, %v: want a re-entry of the hold the caller's context carries", ok, err)
		} else {
			_ = o.Unlock()
		}
		if err := ml.Unlock(mo); err != nil {
			t.Fatal(err)
		}
		_ = om2.Unlock()
		_ = om.Unlock()
	})
}

var _ = dlock.KindMutex
