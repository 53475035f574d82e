package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// ledger is the test's own record of who holds each key. It fails the test when a Generator
// acquires a key while the previous holder has not been told of a loss (two owners), and when
// a fencing token does not rise above the one handed out before it. It also times hand-offs
// between Generators and the gap between a holder being told of a loss and the next owner.
type ledger struct {
	t        testing.TB
	mu       sync.Mutex
	keys     map[string]*keyRecord // guarded by mu
	tolerate bool                  // count overlaps instead of failing; guarded by mu
	overlaps int                   // guarded by mu
}

type keyRecord struct {
	holder  *holding // the current holder, nil when free
	token   uint64   // the highest token so far
	leftAt  time.Time
	leftGen int
	acqs    []acquisition
}

// acquisition is one Lock or TryLock that returned an owner context.
type acquisition struct {
	who       string
	gen       int
	token     uint64
	at        time.Time
	handoff   time.Duration // from the release by another Generator, if the key was free
	afterTold time.Duration // from the loss told to the previous holder, if it was told
}

// holding is one acquisition as the ledger sees it.
type holding struct {
	key   string
	who   string
	gen   int
	owned context.Context
	stop  func() bool
	told  atomic.Int64 // unix nanoseconds when the owner context ended, 0 before

	handoff time.Duration // as in acquisition
}

// tolerateOverlaps makes the ledger count two owners (overlaps) instead of failing the test:
// for measuring a window the test expects.
func (l *ledger) tolerateOverlaps() { l.mu.Lock(); l.tolerate = true; l.mu.Unlock() }

// overlapCount returns the number of two-owner overlaps counted.
func (l *ledger) overlapCount() int { l.mu.Lock(); defer l.mu.Unlock(); return l.overlaps }

func newLedger(t testing.TB) *ledger {
	return &ledger{t: t, keys: make(map[string]*keyRecord)}
}

// enter records that who, of Generator gen, acquired key with owner context owned.
func (l *ledger) enter(key string, gen int, who string, owned context.Context, token uint64, tokenOK bool) *holding {
	now := time.Now()
	h := &holding{key: key, who: who, gen: gen, owned: owned}
	h.stop = context.AfterFunc(owned, func() { h.told.Store(time.Now().UnixNano()) })
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := l.keys[key]
	if rec == nil {
		rec = &keyRecord{}
		l.keys[key] = rec
	}
	a := acquisition{who: who, gen: gen, token: token, at: now}
	if prev := rec.holder; prev != nil {
		if prev.owned.Err() == nil && l.tolerate {
			l.overlaps++
		} else if prev.owned.Err() == nil {
			l.t.Errorf("two owners of %s: %s acquired while %s held it and had not been told of a loss", key, who, prev.who)
		} else {
			told := time.Unix(0, prev.told.Load())
			if prev.told.Load() == 0 {
				told = now
			}
			a.afterTold = max(now.Sub(told), 1)
		}
	} else if !rec.leftAt.IsZero() && rec.leftGen != gen {
		a.handoff = now.Sub(rec.leftAt)
	}
	if tokenOK {
		if token <= rec.token {
			l.t.Errorf("fencing token of %s by %s is %d, not above the %d before it", key, who, token, rec.token)
		}
		rec.token = max(rec.token, token)
	}
	h.handoff = a.handoff
	rec.holder = h
	rec.acqs = append(rec.acqs, a)
	return h
}

// leave records that h lets its key go; call it before Unlock.
func (l *ledger) leave(h *holding) {
	h.stop()
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if rec := l.keys[h.key]; rec.holder == h {
		rec.holder, rec.leftAt, rec.leftGen = nil, now, h.gen
	}
}

// acquisitions returns key's acquisitions, oldest first.
func (l *ledger) acquisitions(key string) []acquisition {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rec := l.keys[key]; rec != nil {
		return append([]acquisition(nil), rec.acqs...)
	}
	return nil
}

// handoffs returns the hand-off latencies between Generators of key, for acquisitions made in
// [from, to).
func (l *ledger) handoffs(key string, from, to time.Time) durations {
	var d durations
	for _, a := range l.acquisitions(key) {
		if a.handoff > 0 && !a.at.Before(from) && a.at.Before(to) {
			d = append(d, a.handoff)
		}
	}
	return d
}

// firstAfter returns the first acquisition of key at or after from, by a Generator other than
// not (-1: any).
func (l *ledger) firstAfter(key string, from time.Time, not int) (acquisition, bool) {
	for _, a := range l.acquisitions(key) {
		if !a.at.Before(from) && a.gen != not {
			return a, true
		}
	}
	return acquisition{}, false
}

// workload is goroutines of several Generators taking locks of one type on some targets, each
// holding it briefly with an unprotected read-modify-write of a per-key counter.
type workload struct {
	t       testing.TB
	gens    []*dlock.Generator
	typ     string
	targets []string
	perGen  int           // goroutines per Generator
	hold    time.Duration // time inside the critical section
	ledger  *ledger
	faults  bool // a failover happens: losses and failed releases are expected outcomes

	counters  sync.Map // key -> *atomic.Int64, the unprotected counters
	acquired  atomic.Int64
	lost      atomic.Int64 // holdings told of a loss
	unlockErr atomic.Int64 // Unlocks that failed otherwise (faults only)
	perGor    []atomic.Int64
}

// start runs the workload until ctx ends; wait waits for its goroutines.
func (w *workload) start(ctx context.Context) (wait func()) {
	var wg sync.WaitGroup
	w.perGor = make([]atomic.Int64, len(w.gens)*w.perGen)
	for gi, g := range w.gens {
		locks := make([]*dlock.DistributedReentrantLock, len(w.targets))
		for i, target := range w.targets {
			l, err := g.Gen(w.typ, target)
			if err != nil {
				w.t.Fatal(err)
			}
			locks[i] = l
		}
		for j := range w.perGen {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.loop(ctx, gi, gi*w.perGen+j, locks)
			}()
		}
	}
	return wg.Wait
}

func (w *workload) loop(ctx context.Context, gen, id int, locks []*dlock.DistributedReentrantLock) {
	who := fmt.Sprintf("g%d/w%d", gen, id)
	for ctx.Err() == nil {
		i := rand.IntN(len(locks))
		lock, key := locks[i], lockKey(w.typ, w.targets[i])
		lctx, cancel := context.WithTimeout(ctx, bound)
		owned, err := lock.Lock(lctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.t.Errorf("%s: Lock(%s) did not succeed within %v: %v", who, key, bound, err)
			}
			return
		}
		token, ok := lock.FencingToken(owned)
		if !ok && !w.faults {
			w.t.Errorf("%s: no fencing token right after Lock(%s)", who, key)
		}
		h := w.ledger.enter(key, gen, who, owned, token, ok)
		w.acquired.Add(1)
		w.perGor[id].Add(1)
		c, _ := w.counters.LoadOrStore(key, new(atomic.Int64))
		v := c.(*atomic.Int64).Load()
		time.Sleep(w.hold)
		c.(*atomic.Int64).Store(v + 1)
		w.ledger.leave(h)
		switch err := lock.Unlock(owned); {
		case err == nil:
		case w.faults && errors.Is(err, dlock.ErrLockLost):
			w.lost.Add(1)
		case w.faults:
			w.unlockErr.Add(1)
			w.t.Logf("%s: Unlock(%s) during a failover: %v", who, key, err)
		default:
			w.t.Errorf("%s: Unlock(%s): %v", who, key, err)
		}
	}
}

// counted returns the sum of the unprotected counters: equal to acquired unless two
// holders overlapped.
func (w *workload) counted() int64 {
	var n int64
	w.counters.Range(func(_, v any) bool {
		n += v.(*atomic.Int64).Load()
		return true
	})
	return n
}
