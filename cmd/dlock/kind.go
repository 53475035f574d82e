package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

// guarded is what exec holds while its command runs: the mutex of TYPE/TARGET, a side of its
// read-write lock, or permits of its semaphore, and how to say who stands in its way.
type guarded struct {
	dlock.Part
	// holders says who stands in the way, for the "not obtained" message; "" if nobody or
	// unknown. Never this process: an attempt of its own that took the key as the wait ran
	// out is being given back.
	holders func(ctx context.Context) string
	// shared reads a read-write lock's or semaphore's state (nil for the mutex).
	shared func(ctx context.Context) (dlock.SharedState, error)
	// force removes one holding of a read-write lock or semaphore (nil for the mutex).
	force func(ctx context.Context, holder string) (bool, error)
}

// kindFlags choose the lock of TYPE/TARGET a command works on: the mutex (no flag), the
// read-write lock's read side (--shared) or write side (--exclusive), or a semaphore of K
// permits (--semaphore K), of which exec takes --permits N.
type kindFlags struct {
	shared, exclusive *bool
	semaphore         *int
	semaphoreDef      *flagDef // whether --semaphore was given (0 is refused, not "the mutex")
	permits           *int     // nil for commands that take nothing
	permitsDef        *flagDef // whether --permits was given (0 is refused, not "the default")
}

func addKindFlags(fs *flagSet, takes bool) *kindFlags {
	sem := &intValue{min: 1, max: processor.MaxPermits}
	k := &kindFlags{
		shared:       fs.Bool("shared", "s", "the read side of the read-write lock TYPE/TARGET (many readers at once; no writer)"),
		exclusive:    fs.Bool("exclusive", "x", "the write side of the read-write lock TYPE/TARGET (no other reader or writer)"),
		semaphore:    &sem.n,
		semaphoreDef: fs.Var(sem, "semaphore", "", "N", "the semaphore TYPE/TARGET of N permits (N used when Redis keeps none yet)"),
	}
	if takes {
		n := &intValue{n: 1, min: 1, max: processor.MaxPermits}
		k.permits = &n.n
		k.permitsDef = fs.Var(n, "permits", "", "N", "with --semaphore: the permits to take")
	}
	return k
}

// named reports whether the flags name a read-write lock's side or a semaphore (else the
// mutex), once check has passed.
func (k *kindFlags) named() bool { return *k.shared || *k.exclusive || k.semaphoreDef.seen }

// check refuses flags that contradict each other.
func (k *kindFlags) check() error {
	kinds := 0
	for _, b := range []bool{*k.shared, *k.exclusive, k.semaphoreDef.seen} {
		if b {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return usageErrorf("--shared, --exclusive and --semaphore name different locks: give one")
	case k.permitsDef != nil && k.permitsDef.seen && !k.semaphoreDef.seen:
		return usageErrorf("--permits needs --semaphore K (the semaphore's size)")
	case k.permitsDef != nil && k.permitsDef.seen && *k.permits > *k.semaphore:
		return usageErrorf("--permits %d of a semaphore of %d", *k.permits, *k.semaphore)
	}
	return nil
}

// open connects and makes the lock the flags name, with lease.
func (k *kindFlags) open(r redisFlags, typ, target string, lease time.Duration) (*conn, guarded, error) {
	if err := k.check(); err != nil {
		return nil, guarded{}, err
	}
	c, l, err := open(r, typ, target, lease)
	if err != nil {
		return nil, guarded{}, err
	}
	g := mutexLock(l)
	switch {
	case *k.shared || *k.exclusive:
		rw, err := c.gen.GenRW(typ, target)
		if err != nil {
			c.close()
			return nil, guarded{}, c.classify(err)
		}
		side := rw.ReadSide()
		if *k.exclusive {
			side = rw.WriteSide()
		}
		g = sharedLock(side, rw.State, rw.ForceRelease)
	case *k.semaphore > 0:
		s, err := c.gen.GenSemaphore(typ, target, *k.semaphore)
		if err != nil {
			c.close()
			return nil, guarded{}, c.classify(err)
		}
		n := 1 // status and release take nothing
		if k.permits != nil {
			n = *k.permits
		}
		g = sharedLock(s.Permits(n), s.State, s.ForceRelease)
	}
	if g.shared != nil {
		c.keys = sharedKeys(g.Config())
	}
	return c, g, nil
}

// sharedLock is a side of a read-write lock, or permits of a semaphore, as exec holds them:
// state reads the lock's state, force removes one holding.
func sharedLock(p dlock.Part, state func(ctx context.Context) (dlock.SharedState, error), force func(ctx context.Context, holder string) (bool, error)) guarded {
	return guarded{Part: p, shared: state, force: force, holders: func(ctx context.Context) string {
		st, err := state(ctx)
		if err != nil {
			return ""
		}
		return describeHolds(st)
	}}
}

// mutexLock is the mutex as exec holds it.
func mutexLock(l *dlock.DistributedReentrantLock) guarded {
	return guarded{Part: l, holders: func(ctx context.Context) string {
		st, err := l.State(ctx)
		if err != nil || !st.Held() || st.Mine {
			return ""
		}
		return shown(st.Holder)
	}}
}

// describeHolds names the holdings of a read-write lock or semaphore, but this process's.
func describeHolds(st dlock.SharedState) string {
	var parts []string
	for _, h := range st.Holds {
		switch {
		case h.Mine:
		case st.Kind == "rw" && h.Write:
			parts = append(parts, shown(h.Locker)+" (write)")
		case st.Kind == "rw":
			parts = append(parts, shown(h.Locker)+" (read)")
		default:
			parts = append(parts, fmt.Sprintf("%s (%s)", shown(h.Locker), nPermits(h.Permits)))
		}
	}
	return strings.Join(parts, ", ")
}

// nPermits says n permits: "1 permit", "2 permits".
func nPermits(n int64) string {
	if n == 1 {
		return "1 permit"
	}
	return fmt.Sprintf("%d permits", n)
}
