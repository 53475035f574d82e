package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
)

// guarded is what exec holds while its command runs: the mutex of TYPE/TARGET, a side of its
// read-write lock, or permits of its semaphore.
type guarded interface {
	Lock(ctx context.Context) (*dlock.Owner, error)
	TryLock(ctx context.Context) (*dlock.Owner, bool, error)
	FencingToken(owned context.Context) (uint64, bool)
	Config() domain.DLockConfig
	// holders says who stands in the way, for the "not obtained" message; "" if nobody or
	// unknown.
	holders(ctx context.Context) string
}

// kindFlags choose the lock of TYPE/TARGET a command works on: the mutex (no flag), the
// read-write lock's read side (--shared) or write side (--exclusive), or a semaphore of K
// permits (--semaphore K), of which exec takes --permits N.
type kindFlags struct {
	shared, exclusive *bool
	semaphore         *int
	permits           *int // nil for commands that take nothing
}

func addKindFlags(fs *flagSet, takes bool) *kindFlags {
	k := &kindFlags{
		shared:    fs.Bool("shared", "s", "the read side of the read-write lock TYPE/TARGET (many readers at once; no writer)"),
		exclusive: fs.Bool("exclusive", "x", "the write side of the read-write lock TYPE/TARGET (no other reader or writer)"),
		semaphore: fs.Int("semaphore", 0, "the semaphore TYPE/TARGET of N permits (N used when Redis keeps none yet)"),
	}
	if takes {
		k.permits = fs.Int("permits", 0, "with --semaphore: the permits to take (default 1)")
	}
	return k
}

// check refuses flags that contradict each other.
func (k *kindFlags) check() error {
	kinds := 0
	for _, b := range []bool{*k.shared, *k.exclusive, *k.semaphore != 0} {
		if b {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return usageErrorf("--shared, --exclusive and --semaphore name different locks: give one")
	case *k.semaphore < 0:
		return usageErrorf("--semaphore %d: a semaphore has at least 1 permit", *k.semaphore)
	case k.permits != nil && *k.permits != 0 && *k.semaphore == 0:
		return usageErrorf("--permits needs --semaphore K (the semaphore's size)")
	case k.permits != nil && (*k.permits < 0 || *k.permits > *k.semaphore):
		return usageErrorf("--permits %d of a semaphore of %d", *k.permits, *k.semaphore)
	}
	return nil
}

// open connects and makes the lock the flags name, with lease.
func (k *kindFlags) open(r redisFlags, typ, target string, lease time.Duration) (*conn, guarded, error) {
	if err := k.check(); err != nil {
		return nil, nil, err
	}
	c, l, err := open(r, typ, target, lease)
	if err != nil {
		return nil, nil, err
	}
	var g guarded = mutexLock{l}
	switch {
	case *k.shared || *k.exclusive:
		rw, err := c.gen.GenRW(typ, target)
		if err != nil {
			c.close()
			return nil, nil, c.classify(err)
		}
		g = rwSide{rw, *k.exclusive}
	case *k.semaphore > 0:
		s, err := c.gen.GenSemaphore(typ, target, *k.semaphore)
		if err != nil {
			c.close()
			return nil, nil, c.classify(err)
		}
		n := 1
		if k.permits != nil && *k.permits > 0 {
			n = *k.permits
		}
		g = semPermits{s, n}
	}
	return c, g, nil
}

// mutexLock is the mutex.
type mutexLock struct {
	*dlock.DistributedReentrantLock
}

func (m mutexLock) holders(ctx context.Context) string {
	st, err := m.State(ctx)
	if err != nil || !st.Held() {
		return ""
	}
	return st.Holder
}

// rwSide is a side of a read-write lock.
type rwSide struct {
	l     *dlock.RWLock
	write bool
}

func (s rwSide) Lock(ctx context.Context) (*dlock.Owner, error) {
	if s.write {
		return s.l.Lock(ctx)
	}
	return s.l.RLock(ctx)
}

func (s rwSide) TryLock(ctx context.Context) (*dlock.Owner, bool, error) {
	if s.write {
		return s.l.TryLock(ctx)
	}
	return s.l.TryRLock(ctx)
}

func (s rwSide) FencingToken(owned context.Context) (uint64, bool) { return s.l.FencingToken(owned) }
func (s rwSide) Config() domain.DLockConfig                        { return s.l.Config() }
func (s rwSide) holders(ctx context.Context) string {
	st, err := s.l.State(ctx)
	if err != nil {
		return ""
	}
	return describeHolds(st)
}

// semPermits is n permits of a semaphore.
type semPermits struct {
	s *dlock.Semaphore
	n int
}

func (p semPermits) Lock(ctx context.Context) (*dlock.Owner, error) { return p.s.Acquire(ctx, p.n) }
func (p semPermits) TryLock(ctx context.Context) (*dlock.Owner, bool, error) {
	return p.s.TryAcquire(ctx, p.n)
}
func (p semPermits) FencingToken(owned context.Context) (uint64, bool) {
	return p.s.FencingToken(owned)
}
func (p semPermits) Config() domain.DLockConfig { return p.s.Config() }
func (p semPermits) holders(ctx context.Context) string {
	st, err := p.s.State(ctx)
	if err != nil {
		return ""
	}
	return describeHolds(st)
}

// describeHolds names the holdings of a read-write lock or semaphore.
func describeHolds(st dlock.SharedState) string {
	var parts []string
	for _, h := range st.Holds {
		switch {
		case st.Kind == "rw" && h.Write:
			parts = append(parts, h.Locker+" (write)")
		case st.Kind == "rw":
			parts = append(parts, h.Locker+" (read)")
		default:
			parts = append(parts, fmt.Sprintf("%s (%d permits)", h.Locker, h.Permits))
		}
	}
	return strings.Join(parts, ", ")
}
