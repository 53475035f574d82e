package processor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/processor"
)

var (
	rw   = processor.Shared{Kind: processor.KindRW, Permits: processor.RWPermits}
	sem3 = processor.Shared{Kind: processor.KindSem, Permits: 3}
)

func (p *proc) take(t *testing.T, lc domain.DLockConfig, s processor.Shared, locker string, n int64, wait bool) processor.SharedResult {
	t.Helper()
	r, err := p.SharedTake(context.Background(), lc, s, processor.TakeRequest{Locker: locker, N: n, Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (p *proc) letGo(t *testing.T, lc domain.DLockConfig, s processor.Shared, locker string) processor.Outcome {
	t.Helper()
	r, err := p.SharedRelease(context.Background(), lc, s, locker)
	if err != nil {
		t.Fatal(err)
	}
	return r.Outcome
}

func TestSharedReadersExcludeWriters(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "rw")
		a, b, w := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "W-")
		ra, rb := a.locker(), b.locker()
		if r := a.take(t, lc, rw, ra, 1, true); r.Outcome != processor.Taken || r.Token == 0 {
			t.Fatalf("first reader: %+v", r)
		}
		if r := b.take(t, lc, rw, rb, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("second reader: %+v", r)
		}
		wl := w.locker()
		if r := w.take(t, lc, rw, wl, processor.RWPermits, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("writer beside readers: %+v", r)
		}
		// a reader that comes after the writer waits behind it
		rc := newProc(t, c, "C-")
		if r := rc.take(t, lc, rw, rc.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("reader behind a writer in line: %+v", r)
		}
		// but the readers already in renew
		if r, _ := a.SharedRenew(context.Background(), lc, rw, ra); r.Outcome != processor.Renewed || !r.Waiting {
			t.Fatalf("renewal of a reader with a writer in line: %+v", r)
		}
		a.letGo(t, lc, rw, ra)
		if r := w.take(t, lc, rw, wl, processor.RWPermits, true); r.Outcome != processor.Held {
			t.Fatalf("writer beside one reader: %+v", r)
		}
		b.letGo(t, lc, rw, rb)
		r := w.take(t, lc, rw, wl, processor.RWPermits, true)
		if r.Outcome != processor.Taken {
			t.Fatalf("writer alone: %+v", r)
		}
		if !r.Waiting {
			t.Fatal("the writer was not told a reader waits")
		}
		if r := a.take(t, lc, rw, a.locker(), 1, false); r.Outcome != processor.Held {
			t.Fatalf("reader beside a writer: %+v", r)
		}
		w2 := newProc(t, c, "X-")
		if r := w2.take(t, lc, rw, w2.locker(), processor.RWPermits, false); r.Outcome != processor.Held {
			t.Fatalf("second writer: %+v", r)
		}
	})
}

func TestSharedSemaphoreCountsPermits(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "sem")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		a1, a2 := a.locker(), a.locker()
		if r := a.take(t, lc, sem3, a1, 2, true); r.Outcome != processor.Taken {
			t.Fatalf("2 of 3: %+v", r)
		}
		if r := a.take(t, lc, sem3, a2, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("a process's second holding: %+v", r)
		}
		b1 := b.locker()
		if r := b.take(t, lc, sem3, b1, 1, true); r.Outcome != processor.Held || r.Rank != 0 || r.Life <= 0 {
			t.Fatalf("a fourth permit: %+v", r)
		}
		// a process not in line does not pass the one in line, even when its permits fit
		if a.letGo(t, lc, sem3, a2) != processor.Released {
			t.Fatal("release")
		}
		if r := a.take(t, lc, sem3, a.locker(), 1, false); r.Outcome != processor.Held {
			t.Fatalf("a newcomer passed the line: %+v", r)
		}
		if r := b.take(t, lc, sem3, b1, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("first in line: %+v", r)
		}
		if _, err := b.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: b.locker(), N: 4}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("4 of 3 permits: %v", err)
		}
		in, err := a.SharedInspect(context.Background(), lc, sem3)
		if err != nil {
			t.Fatal(err)
		}
		if in.Kind != processor.KindSem || in.Permits != 3 || !in.Stored || len(in.Holdings) != 2 || len(in.Waiting) != 0 {
			t.Fatalf("inspection: %+v", in)
		}
		var last uint64
		for _, h := range in.Holdings {
			if h.TTL <= 0 || h.TTL > lc.Lease() || h.Token == 0 {
				t.Fatalf("inspected holding %+v: want its lease left and its token", h)
			}
			last = max(last, h.Token)
		}
		if in.Fence != last {
			t.Fatalf("inspected fencing counter %d, want the last token %d", in.Fence, last)
		}
		// another kind under the same name is refused
		if _, err := b.SharedTake(context.Background(), lc, rw, processor.TakeRequest{Locker: b.locker(), N: 1}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("a read-write lock over a semaphore: %v", err)
		}
	})
}

func TestSharedLateAndRepeatedRequests(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "late")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		l := a.locker()
		first := a.take(t, lc, sem3, l, 3, true)
		again := a.take(t, lc, sem3, l, 3, true)
		if first.Outcome != processor.Taken || again.Outcome != processor.Taken || again.Token != first.Token {
			t.Fatalf("a repeated take: %+v then %+v", first, again)
		}
		if a.letGo(t, lc, sem3, l) != processor.Released {
			t.Fatal("release")
		}
		if a.letGo(t, lc, sem3, l) != processor.Settled {
			t.Fatal("a repeated release")
		}
		if r := a.take(t, lc, sem3, l, 3, true); r.Outcome != processor.Settled {
			t.Fatalf("a late take after its release: %+v", r)
		}
		if r, _ := a.SharedRenew(context.Background(), lc, sem3, l); r.Outcome != processor.Settled {
			t.Fatalf("a late renewal: %+v", r)
		}
		// a take without waiting that did not fit is settled
		hold := b.locker()
		b.take(t, lc, sem3, hold, 3, true)
		tried := a.locker()
		if r := a.take(t, lc, sem3, tried, 1, false); r.Outcome != processor.Held {
			t.Fatalf("try: %+v", r)
		}
		b.letGo(t, lc, sem3, hold)
		if r := a.take(t, lc, sem3, tried, 1, false); r.Outcome != processor.Settled {
			t.Fatalf("a late copy of a failed try: %+v", r)
		}
		// a waiting attempt given back is settled and out of line
		w := a.locker()
		hold = b.locker()
		b.take(t, lc, sem3, hold, 3, true)
		a.take(t, lc, sem3, w, 1, true)
		if a.letGo(t, lc, sem3, w) != processor.Gone {
			t.Fatal("give back")
		}
		if r := a.take(t, lc, sem3, w, 1, true); r.Outcome != processor.Settled {
			t.Fatalf("a late copy of a given-back attempt: %+v", r)
		}
		if in, _ := a.SharedInspect(context.Background(), lc, sem3); len(in.Waiting) != 0 {
			t.Fatalf("still in line: %+v", in.Waiting)
		}
		// an attempt whose place in line a later one of its process took is settled
		before, after := a.locker(), a.locker()
		a.take(t, lc, sem3, before, 1, true)
		if r := a.take(t, lc, sem3, after, 1, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("a later attempt of the process in line: %+v", r)
		}
		b.letGo(t, lc, sem3, hold)
		if r := a.take(t, lc, sem3, before, 1, true); r.Outcome != processor.Settled {
			t.Fatalf("a late copy of the attempt the later one took the place of: %+v", r)
		}
		// and so is its first copy that comes after the later attempt took its permits and left
		// the line
		if r := a.take(t, lc, sem3, after, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("the later attempt: %+v", r)
		}
		a.letGo(t, lc, sem3, after)
		before, after = a.locker(), a.locker()
		hold = b.locker()
		b.take(t, lc, sem3, hold, 3, true)
		a.take(t, lc, sem3, before, 1, true)
		a.take(t, lc, sem3, after, 1, true)
		b.letGo(t, lc, sem3, hold)
		if r := a.take(t, lc, sem3, after, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("the later attempt: %+v", r)
		}
		if r := a.take(t, lc, sem3, before, 1, true); r.Outcome != processor.Settled {
			t.Fatalf("a late copy of the attempt the later one took the place of, once the later one holds: %+v", r)
		}
	})
}

func TestSharedDowngradeIsAtomic(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "down")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		wl := a.locker()
		a.take(t, lc, rw, wl, processor.RWPermits, true)
		bw := b.locker()
		if r := b.take(t, lc, rw, bw, processor.RWPermits, true); r.Outcome != processor.Held {
			t.Fatalf("second writer: %+v", r)
		}
		rl := a.locker()
		r, err := a.SharedTake(context.Background(), lc, rw, processor.TakeRequest{Locker: rl, N: 1, Wait: true, Replaces: wl})
		if err != nil || r.Outcome != processor.Taken {
			t.Fatalf("downgrade with a writer in line: %+v %v", r, err)
		}
		if r, _ := a.SharedRenew(context.Background(), lc, rw, wl); r.Outcome != processor.Settled {
			t.Fatalf("the write-hold after the downgrade: %+v", r)
		}
		if r := b.take(t, lc, rw, bw, processor.RWPermits, true); r.Outcome != processor.Held {
			t.Fatalf("writer beside the downgraded reader: %+v", r)
		}
		// a late copy of the downgrade, after the read-hold was let go, takes nothing
		a.letGo(t, lc, rw, rl)
		r, err = a.SharedTake(context.Background(), lc, rw, processor.TakeRequest{Locker: rl, N: 1, Wait: true, Replaces: wl})
		if err != nil || r.Outcome != processor.Settled {
			t.Fatalf("a late downgrade: %+v %v", r, err)
		}
		if r := b.take(t, lc, rw, bw, processor.RWPermits, true); r.Outcome != processor.Taken {
			t.Fatalf("writer after the reader left: %+v", r)
		}
	})
}

// A release of a holding a downgrade replaced says so (Replaced); a copy of a release that let
// its holding go does not, though both answer Settled: a processor that sends a request again
// within one call (a broken connection) must not make the copy's Settled read as a downgrade's.
func TestSharedReleaseOfAReplacedHoldingSaysReplaced(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "replaced")
		a := newProc(t, c, "A-")
		wl := a.locker()
		w := a.take(t, lc, rw, wl, processor.RWPermits, true)
		rl := a.locker()
		if r, err := a.SharedTake(context.Background(), lc, rw, processor.TakeRequest{Locker: rl, N: 1, Replaces: wl, Origin: w.Token}); err != nil || r.Outcome != processor.Taken {
			t.Fatalf("downgrade: %+v %v", r, err)
		}
		for range 2 { // (and a copy of it)
			if r, err := a.SharedReleaseOf(context.Background(), lc, rw, wl, w.Token, 0, 0); err != nil || r.Outcome != processor.Settled || !r.Replaced {
				t.Fatalf("release of the holding the downgrade replaced: %+v %v; want Settled, Replaced", r, err)
			}
		}
		if r, err := a.SharedReleaseOf(context.Background(), lc, rw, rl, 0, 0, 0); err != nil || r.Outcome != processor.Released {
			t.Fatalf("release of the read-hold: %+v %v", r, err)
		}
		if r, err := a.SharedReleaseOf(context.Background(), lc, rw, rl, 0, 0, 0); err != nil || r.Outcome != processor.Settled || r.Replaced {
			t.Fatalf("a copy of the read-hold's release: %+v %v; want Settled, not Replaced", r, err)
		}
	})
}

func TestSharedHoldingsExpire(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc, err := domain.NewDLockConfig("PROC", fresh("expire"), 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	l := a.locker()
	a.take(t, lc, sem3, l, 3, true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := b.take(t, lc, sem3, b.locker(), 1, false)
		if r.Outcome == processor.Taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a crashed holding's permits never came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if exp := c.ZRange(context.Background(), processor.SharedKeys(lc)[1], 0, -1).Val(); len(exp) != 1 || exp[0] == l {
		t.Fatalf("the holdings' expiries after one ran out: %v, want the new holding's alone", exp)
	}
	if r, _ := a.SharedRenew(context.Background(), lc, sem3, l); r.Outcome != processor.Settled {
		t.Fatalf("renewal of an expired holding: %+v", r)
	}
	if r := a.take(t, lc, sem3, l, 1, true); r.Outcome != processor.Settled {
		t.Fatalf("a late take of an expired holding: %+v", r)
	}
}

// A holding counts through the millisecond its lease ends (as Redis keeps a key through its
// own expiry): at that millisecond an inspection shows it, with nothing left of its lease, and
// its permits hold off a take; from the next it is gone, and its permits are free. (On
// miniredis, whose clock the test stops.)
func TestSharedHoldingCountsThroughItsExpiryMillisecond(t *testing.T) {
	c, tick := stoppedClock(t)
	ctx := context.Background()
	lc := cfg(t, "holdingexpiry") // 1 s
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	la := a.locker()
	if r := a.take(t, lc, sem3, la, 3, true); r.Outcome != processor.Taken {
		t.Fatalf("3 of 3: %+v", r)
	}
	tick(lc.Lease()) // A-'s holding expires at this very millisecond
	if in, err := b.SharedInspect(ctx, lc, sem3); err != nil || len(in.Holdings) != 1 || in.Holdings[0].Locker != la || in.Holdings[0].TTL != 0 {
		t.Fatalf("inspection at the holding's expiry millisecond = %+v, %v; want A-'s holding, with nothing left", in, err)
	}
	if r := b.take(t, lc, sem3, b.locker(), 1, false); r.Outcome != processor.Held {
		t.Fatalf("a permit asked at the expiry millisecond of the holding of all 3: %+v; want held off", r)
	}
	tick(time.Millisecond)
	if in, err := b.SharedInspect(ctx, lc, sem3); err != nil || len(in.Holdings) != 0 {
		t.Fatalf("inspection a millisecond past the holding's expiry = %+v, %v; want no holding", in, err)
	}
	if r := b.take(t, lc, sem3, b.locker(), 3, false); r.Outcome != processor.Taken {
		t.Fatalf("every permit, a millisecond past the holding's expiry: %+v", r)
	}
}

// A holding that ran out stays settled as long as a copy of its own process's take may come
// (that process's mark life), whoever's request finds it run out: processes may give the lock
// type different leases, and a process with a short one, pruning the holding, must not settle
// it for its own short mark life only. Its release answers gone, every copy of it: a loss,
// to a holder that counted its lease longer than Redis kept it. (On miniredis, whose clock the
// test moves.)
func TestSharedExpiredHoldingStaysSettledForItsOwnMarkLife(t *testing.T) {
	c, tick := stoppedClock(t)
	ctx := context.Background()
	base := cfg(t, "expiredlife")
	long, _ := base.WithLease(2 * time.Second)
	short, _ := base.WithLease(200 * time.Millisecond)
	sem1 := processor.Shared{Kind: processor.KindSem, Permits: 1}
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	la := a.locker()
	take := processor.TakeRequest{Locker: la, N: 1}
	first, err := a.SharedTake(ctx, long, sem1, take)
	if err != nil || first.Outcome != processor.Taken {
		t.Fatalf("A's take: %+v, %v", first, err)
	}
	tick(long.Lease() + time.Millisecond) // A crashed: its holding ran out
	lb := b.locker()
	if r := b.take(t, short, sem1, lb, 1, false); r.Outcome != processor.Taken {
		t.Fatalf("B's take, which finds A's holding run out: %+v", r)
	}
	b.letGo(t, short, sem1, lb)
	tick(b.MarkLife(short) + time.Millisecond) // past B's mark life, within A's
	if a.MarkLife(long) <= long.Lease()+b.MarkLife(short)+2*time.Millisecond {
		t.Fatalf("A's mark life %v: the test needs it past the time it moved", a.MarkLife(long))
	}
	if r, err := a.SharedTake(ctx, long, sem1, take); err != nil || r.Outcome != processor.Settled {
		t.Fatalf("a copy of A's take, within A's mark life of its send, after its holding ran out = %+v, %v; want settled", r, err)
	}
	// A's release (had A counted its lease from later than Redis did: a failover that lost a
	// renewal's write) answers gone, and so does a copy of it: settled would read as let go
	for i := range 2 {
		if r, err := a.SharedReleaseOf(ctx, long, sem1, la, first.Token, 0, 0); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("A's release (copy %d) of its holding that ran out = %+v, %v; want gone", i, r, err)
		}
	}
}

// A waiter's line entry lives an entry's time (EntryTTL: at least two seconds) unless renewed,
// however short its lease: a request in between keeps it in line. Past that time it holds off
// no one, though its process still listens (it stopped asking).
func TestSharedLineEntriesLiveAnEntrysTime(t *testing.T) {
	c := srv.Client() // real time
	defer c.Close()
	ctx := context.Background()
	lc, _ := domain.NewDLockConfig("PROC", fresh("entrylife"), 150*time.Millisecond)
	long, _ := lc.WithLease(20 * time.Second)
	a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
	listen(t, c, lc, "B-") // (B- listens throughout: its entry counts while it lives)
	la := a.locker()
	if r := a.take(t, long, sem3, la, 3, true); r.Outcome != processor.Taken {
		t.Fatalf("3 of 3: %+v", r)
	}
	if r := b.take(t, lc, sem3, b.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 0 {
		t.Fatalf("1 more: %+v", r)
	}
	time.Sleep(500 * time.Millisecond) // past its lease, well within processor.EntryTTL(lc)
	if r, err := a.SharedRenew(ctx, long, sem3, la); err != nil || r.Outcome != processor.Renewed {
		t.Fatalf("renewal = %+v, %v", r, err)
	}
	if line := c.ZRange(ctx, processor.SharedKeys(lc)[2], 0, -1).Val(); !slices.Equal(line, []string{"B-"}) {
		t.Fatalf("line %v, want B- still in it (its entry lives %v)", line, processor.EntryTTL(lc))
	}
	time.Sleep(processor.EntryTTL(lc)) // past B-'s entry's time, B- unheard since
	a.letGo(t, long, sem3, la)
	if r := d.take(t, lc, sem3, d.locker(), 3, false); r.Outcome != processor.Taken {
		t.Fatalf("every permit, asked past B-'s entry that ran out: %+v", r)
	}
}

// A line entry counts through the millisecond its expiry names (as a holding does, and as
// Redis keeps a key through its own): at that millisecond it still holds off a take that
// does not fit behind it, and an inspection shows it; from the next it is dropped. (On
// miniredis, whose clock the test stops; the waiter listens, so its entry counts however long
// ago it was renewed.)
func TestSharedLineEntryCountsThroughItsExpiryMillisecond(t *testing.T) {
	c, tick := stoppedClock(t)
	ctx := context.Background()
	lc := cfg(t, "entryexpiry") // 1 s: an entry lives 2 s
	long, _ := lc.WithLease(20 * time.Second)
	a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
	listen(t, c, lc, "B-")
	la := a.locker()
	if r := a.take(t, long, sem3, la, 3, true); r.Outcome != processor.Taken {
		t.Fatalf("3 of 3: %+v", r)
	}
	if r := b.take(t, lc, sem3, b.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 0 {
		t.Fatalf("1 more: %+v", r)
	}
	tick(processor.EntryTTL(lc)) // B-'s entry expires at this very millisecond
	a.letGo(t, long, sem3, la)
	if in, err := d.SharedInspect(ctx, lc, sem3); err != nil || len(in.Waiting) != 1 || in.Waiting[0].Owner != "B-" {
		t.Fatalf("inspection at the entry's expiry millisecond = %+v, %v; want B- in line", in, err)
	}
	if r := d.take(t, lc, sem3, d.locker(), 3, false); r.Outcome != processor.Held {
		t.Fatalf("every permit, asked at the expiry millisecond of B-'s entry: %+v; want held off by it", r)
	}
	tick(time.Millisecond)
	if in, err := d.SharedInspect(ctx, lc, sem3); err != nil || len(in.Waiting) != 0 {
		t.Fatalf("inspection a millisecond past the entry's expiry = %+v, %v; want nobody in line", in, err)
	}
	if r := d.take(t, lc, sem3, d.locker(), 3, false); r.Outcome != processor.Taken {
		t.Fatalf("every permit, asked a millisecond past B-'s entry's expiry: %+v", r)
	}
}

// A holding's renewals (and copies of its take) only ever lengthen its life: a late copy of one
// with a shorter lease, after an Extend with a longer one, cuts nothing short.
func TestSharedRenewalsNeverShorten(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "noshorten") // 1 s
		long, _ := lc.WithLease(30 * time.Second)
		a := newProc(t, c, "A-")
		la := a.locker()
		if r := a.take(t, lc, sem3, la, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("take: %+v", r)
		}
		if r, err := a.SharedRenew(ctx, long, sem3, la); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("renewal with 30 s = %+v, %v", r, err)
		}
		if r, err := a.SharedRenew(ctx, lc, sem3, la); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("late renewal with 1 s = %+v, %v", r, err)
		}
		if r := a.take(t, lc, sem3, la, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("late copy of the take: %+v", r)
		}
		in, err := a.SharedInspect(ctx, lc, sem3)
		if err != nil || len(in.Holdings) != 1 || in.Holdings[0].TTL < 20*time.Second {
			t.Fatalf("after the late copies: %+v, %v; want the holding to live about 30 s", in, err)
		}
	})
}

func TestSharedMessages(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "msgs")
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	ps := c.Subscribe(context.Background(), processor.SharedChannel(lc, "A-"), processor.SharedChannel(lc, "B-"))
	defer ps.Close()
	for range 2 {
		if _, err := ps.Receive(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	hold, other := a.locker(), a.locker()
	a.take(t, lc, sem3, hold, 2, true)
	a.take(t, lc, sem3, other, 1, true)
	b.take(t, lc, sem3, b.locker(), 2, true)
	expect := func(channel, payload string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Channel != channel || m.Payload != payload {
			t.Fatalf("heard %q on %s, want %q on %s", m.Payload, m.Channel, payload, channel)
		}
	}
	expect(processor.SharedChannel(lc, "A-"), "W")
	a.letGo(t, lc, sem3, hold)
	expect(processor.SharedChannel(lc, "B-"), "F")
	// a request that frees nothing tells nobody again: the next message is the test's own
	if r, _ := a.SharedRenew(context.Background(), lc, sem3, other); r.Outcome != processor.Renewed {
		t.Fatalf("renewal: %+v", r)
	}
	c.Publish(context.Background(), processor.SharedChannel(lc, "B-"), "mark")
	expect(processor.SharedChannel(lc, "B-"), "mark")
}

// A process standing in line alone (for more permits, beside its own) is told nobody else
// waits; once another process stands in line it is told.
func TestSharedWaitingCountsOtherProcesses(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "waiting")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		held := a.locker()
		if r := a.take(t, lc, sem3, held, 1, true); r.Outcome != processor.Taken || r.Waiting {
			t.Fatalf("1 of 3: %+v", r)
		}
		if r := a.take(t, lc, sem3, a.locker(), 3, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("3 more: %+v", r)
		}
		if r, _ := a.SharedRenew(context.Background(), lc, sem3, held); r.Outcome != processor.Renewed || r.Waiting {
			t.Fatalf("renewal with only its own process in line: %+v", r)
		}
		b.take(t, lc, sem3, b.locker(), 1, true)
		if r, _ := a.SharedRenew(context.Background(), lc, sem3, held); r.Outcome != processor.Renewed || !r.Waiting {
			t.Fatalf("renewal with another process in line: %+v", r)
		}
	})
}

// Holdings above a count lowered under them (SetPermits) are told to give back, with nobody in
// line: a renewal and a take answer waiting until what is held fits the new count.
func TestSharedWaitingWhileMoreThanTheCountIsHeld(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "over")
		a := newProc(t, c, "A-")
		held := a.locker()
		if r := a.take(t, lc, sem3, held, 3, true); r.Outcome != processor.Taken || r.Waiting {
			t.Fatalf("3 of 3: %+v", r)
		}
		if err := a.SetPermits(ctx, lc, 1); err != nil {
			t.Fatal(err)
		}
		if r, _ := a.SharedRenew(ctx, lc, sem3, held); r.Outcome != processor.Renewed || !r.Waiting {
			t.Fatalf("renewal of 3 permits held of 1: %+v; want told to give back", r)
		}
		if r := a.take(t, lc, sem3, a.locker(), 1, false); r.Outcome != processor.Held || !r.Waiting {
			t.Fatalf("a try beside 3 permits held of 1: %+v; want held, and told to give back", r)
		}
	})
}

// A process in line whose permits fit (what is held, and what is asked ahead of it, counted)
// takes them as it asks: the holders are not told to give back for it. (Told so, processes
// that each keep one holding busy gave it back and took it again for ever, each seeing the
// others in line for a moment: a semaphore row made 2 400 acquisitions/s at 2.85 requests
// each, where it makes 19 000 at 0.03.)
func TestSharedWaitingCountsOnlyWhoDoesNotFit(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "fits")
		a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "D-")
		two, one := a.locker(), a.locker()
		a.take(t, lc, sem3, two, 2, true)
		if r := a.take(t, lc, sem3, one, 1, true); r.Outcome != processor.Taken || r.Waiting {
			t.Fatalf("the last of 3, nobody in line: %+v", r)
		}
		if r := b.take(t, lc, sem3, b.locker(), 1, true); r.Outcome != processor.Held {
			t.Fatalf("B beside 3 of 3 held: %+v", r)
		}
		if r, _ := a.SharedRenew(context.Background(), lc, sem3, two); !r.Waiting {
			t.Fatalf("B does not fit, and A is not told: %+v", r)
		}
		a.letGo(t, lc, sem3, one)
		if r, _ := a.SharedRenew(context.Background(), lc, sem3, two); r.Outcome != processor.Renewed || r.Waiting {
			t.Fatalf("B fits now, and A is told to give back: %+v", r)
		}
		// D behind B asks 1: with A's 2 and B's 1 counted it does not fit, and waits
		if r := d.take(t, lc, sem3, d.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("D behind B: %+v", r)
		}
		if r, _ := a.SharedRenew(context.Background(), lc, sem3, two); !r.Waiting {
			t.Fatalf("D does not fit behind B, and A is not told: %+v", r)
		}
	})
}

// What a served attempt and a settled locker leave behind goes: the line entry and what Redis
// heard of its process when the attempt is served, the settled mark once its time ran out, and
// any facts heard once no one is in line.
func TestSharedLeavesNoTrace(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc, err := domain.NewDLockConfig("PROC", fresh("trace"), 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	keys := processor.SharedKeys(lc)
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	la, lb := a.locker(), b.locker()
	sent := time.Now()
	a.take(t, lc, sem3, la, 3, true)
	if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held {
		if took := time.Since(sent); took > lc.Lease() {
			t.Skipf("B- asked %v after A-'s take was sent, past its %v lease (a stall of the machine): %+v", took.Round(time.Millisecond), lc.Lease(), r)
		}
		t.Fatalf("%+v", r)
	}
	a.letGo(t, lc, sem3, la)
	if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Taken {
		t.Fatalf("%+v", r)
	}
	if n, m, h := c.ZCard(ctx, keys[2]).Val(), c.HLen(ctx, keys[3]).Val(), c.HLen(ctx, keys[7]).Val(); n != 0 || m != 0 || h != 0 {
		t.Fatalf("a served attempt left %d line entries, %d wants and %d facts heard", n, m, h)
	}
	if c.ZScore(ctx, keys[4], la).Err() != nil {
		t.Fatal("the release did not settle its locker")
	}
	// what Redis heard of a process whose entry a version before the facts dropped (it leaves
	// them): they go with the line
	c.HSet(ctx, keys[7], "O-", "1|1|150|1|1|O-1")
	time.Sleep(a.MarkLife(lc) + 100*time.Millisecond)
	if r, _ := b.SharedRenew(ctx, lc, sem3, lb); r.Outcome != processor.Settled && r.Outcome != processor.Renewed {
		t.Fatalf("%+v", r)
	}
	if err := c.ZScore(ctx, keys[4], la).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a settled locker kept past its time: %v", err)
	}
	if h := c.HGetAll(ctx, keys[7]).Val(); len(h) != 0 {
		t.Fatalf("facts heard %v kept with no one in line", h)
	}
}

func TestSharedSetPermits(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "permits")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		a.take(t, lc, sem3, a.locker(), 3, true)
		bl := b.locker()
		if r := b.take(t, lc, sem3, bl, 1, true); r.Outcome != processor.Held {
			t.Fatalf("%+v", r)
		}
		if err := a.SetPermits(context.Background(), lc, 4); err != nil {
			t.Fatal(err)
		}
		if r := b.take(t, lc, sem3, bl, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("after raising the permits: %+v", r)
		}
		in, _ := a.SharedInspect(context.Background(), lc, sem3)
		if in.Permits != 4 {
			t.Fatalf("permits %d", in.Permits)
		}
		if err := a.SetPermits(context.Background(), lc, 0); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("0 permits: %v", err)
		}
	})
}

// A lowered count that leaves a process in line without room tells the holders (W), though
// they hold no more than the new count: under the old one its permits fitted, and nobody was
// told to give back for it.
func TestSharedLoweredPermitsTellTheHoldersOfAWaiterLeftWithoutRoom(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "lowered")
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	a1, a2 := a.locker(), a.locker()
	a.take(t, lc, sem3, a1, 1, true)
	a.take(t, lc, sem3, a2, 1, true)
	if r := b.take(t, lc, sem3, b.locker(), 2, true); r.Outcome != processor.Held {
		t.Fatalf("B beside 2 of 3 held: %+v", r)
	}
	h := listen(t, c, lc, "A-")
	a.letGo(t, lc, sem3, a2) // B fits now (it is told F, and has not asked yet)
	if r, _ := a.SharedRenew(context.Background(), lc, sem3, a1); r.Waiting {
		t.Fatalf("B fits, and A is told to give back: %+v", r)
	}
	h.quiet("A-")
	if err := a.SetPermits(context.Background(), lc, 2); err != nil {
		t.Fatal(err)
	}
	h.next("A-", "W")
	if r, _ := a.SharedRenew(context.Background(), lc, sem3, a1); !r.Waiting {
		t.Fatalf("B no longer fits, and A is not told: %+v", r)
	}
}

// A changed count tells the holders what changed for them, and only that: W when more is held
// than the new count or a process in line no longer fits; F when the count was raised (a
// goroutine asking for more, not in line, asks now) or lowered (one asking for more than the
// new count is refused as it asks). A count set to what it is tells them nothing.
func TestSharedPermitsChangeTellsTheHoldersWhatChanged(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc := cfg(t, "holderstold")
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	a.take(t, lc, sem3, a.locker(), 2, true)
	h := listen(t, c, lc, "A-")
	if err := a.SetPermits(ctx, lc, 2); err != nil { // all A holds, and nobody waits
		t.Fatal(err)
	}
	h.next("A-", "F")
	h.quiet("A-")
	if r := b.take(t, lc, sem3, b.locker(), 1, true); r.Outcome != processor.Held {
		t.Fatalf("B beside 2 of 2 held: %+v", r)
	}
	h.next("A-", "W")
	if err := a.SetPermits(ctx, lc, 2); err != nil { // what it is, B waiting
		t.Fatal(err)
	}
	h.quiet("A-")
	if err := a.SetPermits(ctx, lc, 4); err != nil {
		t.Fatal(err)
	}
	h.next("A-", "F")
	h.quiet("A-")
}

// A change of the permits with a locker of its own runs once: a copy of it that comes after a
// later change brought the count back to the one it names changes nothing (3 -> 5, 5 -> 3, then
// a copy of 3 -> 5), and every copy answers as its first did, applied or refused.
func TestSharedPermitsChangeRunsOnce(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "once")
		a := newProc(t, c, "A-")
		a.take(t, lc, sem3, a.locker(), 1, true) // in use: Redis keeps 3
		up, down, stale := a.locker(), a.locker(), a.locker()
		for _, ch := range []struct {
			locker   string
			from, to int64
			changed  bool
			keeps    int64
		}{
			{up, 3, 5, true, 5},
			{down, 5, 3, true, 3},
			{stale, 5, 4, false, 3}, // refused: Redis keeps 3
			{up, 3, 5, true, 3},     // a copy: applied the first time, changes nothing now
			{down, 5, 3, true, 3},
			{stale, 3, 4, false, 3}, // a copy of the refused one, though 3 is kept now
		} {
			changed, _, err := a.ChangePermits(ctx, lc, ch.locker, ch.from, ch.to)
			if err != nil || changed != ch.changed {
				t.Fatalf("%s %d -> %d: changed %v, %v; want changed %v", ch.locker, ch.from, ch.to, changed, err, ch.changed)
			}
			if in, err := a.SharedInspect(ctx, lc, sem3); err != nil || in.Permits != ch.keeps {
				t.Fatalf("after %s %d -> %d Redis keeps %d (%v); want %d", ch.locker, ch.from, ch.to, in.Permits, err, ch.keeps)
			}
		}
	})
}

// A change of the permits that names the count it changes applies to that count only: a late
// copy of a change from 4 to 5, arriving after a change from 5 to 2, changes nothing and says
// what Redis keeps — no more permits go out than the newest count.
func TestSharedPermitsChangeNamesTheCountItChanges(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "change")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		a.take(t, lc, sem3, a.locker(), 1, true) // in use: Redis keeps 3
		for _, ch := range []struct{ from, to int64 }{{3, 4}, {4, 5}, {5, 2}} {
			if changed, _, err := a.ChangePermits(ctx, lc, "", ch.from, ch.to); err != nil || !changed {
				t.Fatalf("%d -> %d: %v, %v", ch.from, ch.to, changed, err)
			}
		}
		if changed, now, err := a.ChangePermits(ctx, lc, "", 4, 5); err != nil || changed || now != 2 {
			t.Fatalf("a late copy of 4 -> 5: changed %v, Redis keeps %d, %v; want nothing changed, 2 kept", changed, now, err)
		}
		held := 1
		for range 3 {
			if r := b.take(t, lc, sem3, b.locker(), 1, false); r.Outcome == processor.Taken {
				held++
			}
		}
		if held != 2 {
			t.Fatalf("%d permits out after the count went to 2", held)
		}
	})
}

// A take may replace only a holding of its own process that is there: one naming another's,
// or none, is settled and takes nothing.
func TestSharedTakeReplacesOnlyItsOwn(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "replace")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		al := a.locker()
		a.take(t, lc, rw, al, 1, true)
		bl := b.locker()
		r, err := b.SharedTake(context.Background(), lc, rw, processor.TakeRequest{Locker: bl, N: processor.RWPermits, Replaces: al})
		if err != nil || r.Outcome != processor.Settled {
			t.Fatalf("a take replacing another's holding: %+v %v", r, err)
		}
		if r, _ := a.SharedRenew(context.Background(), lc, rw, al); r.Outcome != processor.Renewed {
			t.Fatalf("the other's holding after it: %+v", r)
		}
		// one naming a holding that is not there is settled too: a copy of it that comes once
		// that holding is taken takes nothing
		early, later := a.locker(), a.locker()
		for i, want := range []string{"before", "after"} {
			if i == 1 {
				a.take(t, lc, rw, early, 1, true)
			}
			r, err := a.SharedTake(context.Background(), lc, rw, processor.TakeRequest{Locker: later, N: 1, Replaces: early})
			if err != nil || r.Outcome != processor.Settled {
				t.Fatalf("a take replacing a holding not there, %s that holding was taken: %+v %v", want, r, err)
			}
		}
	})
}

// A take that replaces a holding of its own skips the line unless it grows it (it shrinks it,
// or keeps its size): one that grows it waits behind the processes in line like any other.
func TestSharedReplacingTakeSkipsTheLineOnlyToShrink(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "grow")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		al := a.locker()
		a.take(t, lc, sem3, al, 1, true)
		if r := b.take(t, lc, sem3, b.locker(), 3, true); r.Outcome != processor.Held {
			t.Fatalf("3 beside 1: %+v", r)
		}
		same := a.locker()
		r, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: same, N: 1, Wait: true, Replaces: al})
		if err != nil || r.Outcome != processor.Taken {
			t.Fatalf("replacing 1 by 1 past a process in line: %+v %v", r, err)
		}
		r, err = a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: a.locker(), N: 2, Wait: true, Replaces: same})
		if err != nil || r.Outcome != processor.Held {
			t.Fatalf("growing 1 to 2 past a process in line: %+v %v", r, err)
		}
	})
}

// A take that replaces a holding of its own by fewer permits (a semaphore's downgrade) is taken
// whatever the count: lowered below what is held, or below the permits it keeps. It takes
// none, and what is held comes nearer the count. One that would grow past the count is not.
func TestSharedDowngradeFitsUnderALoweredCount(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "shrink")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		al := a.locker()
		a.take(t, lc, sem3, al, 2, true)
		b.take(t, lc, sem3, b.locker(), 1, true)
		if err := a.SetPermits(context.Background(), lc, 1); err != nil {
			t.Fatal(err)
		}
		two := a.locker()
		if r, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: two, N: 2, Replaces: al}); err != nil || r.Outcome != processor.Taken {
			t.Fatalf("replacing 2 by 2 under a count of 1: %+v %v", r, err)
		}
		// a copy of that downgrade (its reply lost, sent again) finds what it replaced gone and
		// itself holding: the same holding, under the lowered count too (not refused, nor settled)
		if r, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: two, N: 2, Replaces: al}); err != nil || r.Outcome != processor.Taken {
			t.Fatalf("a copy of the downgrade that ran, under a count of 1: %+v %v, want taken", r, err)
		}
		one := a.locker()
		if r, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: one, N: 1, Replaces: two}); err != nil || r.Outcome != processor.Taken {
			t.Fatalf("replacing 2 by 1 under a count of 1 with another's 1 held: %+v %v", r, err)
		}
		in, err := a.SharedInspect(context.Background(), lc, sem3)
		if err != nil || len(in.Holdings) != 2 {
			t.Fatalf("held after the downgrades: %+v %v", in, err)
		}
		for _, h := range in.Holdings {
			if h.Permits != 1 {
				t.Fatalf("held after the downgrades: %+v", in)
			}
		}
		if _, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: a.locker(), N: 2, Replaces: one}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("replacing 1 by 2 under a count of 1: %v, want ErrInvalidConfig", err)
		}
		// a downgrade whose holding is gone (let go by a copy of its release, removed by an
		// operator, expired) is settled, as under any count: its process learns of the loss now,
		// not a refusal it would send again until the lease ran out
		a.letGo(t, lc, sem3, one)
		if r, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: a.locker(), N: 2, Replaces: one}); err != nil || r.Outcome != processor.Settled {
			t.Fatalf("replacing a gone holding by 2 under a count of 1: %+v %v, want settled", r, err)
		}
	})
}

// A copy of a take that ran, delivered late or twice after the count was lowered below its
// permits, answers with the holding it took, as under any count: it is not refused as asking
// too many, and the holding is not settled (its renewals go on; only its release ends it).
func TestSharedTakeCopyUnderALoweredCountFindsItsHolding(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "copy")
		a := newProc(t, c, "A-")
		l := a.locker()
		first := a.take(t, lc, sem3, l, 3, true)
		if first.Outcome != processor.Taken {
			t.Fatalf("the take of 3: %+v", first)
		}
		if err := a.SetPermits(context.Background(), lc, 1); err != nil {
			t.Fatal(err)
		}
		if r, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: l, N: 3, Wait: true}); err != nil || r.Outcome != processor.Taken || r.Token != first.Token {
			t.Fatalf("a copy of the take of 3 under a count of 1: %+v %v, want its holding (token %d)", r, err, first.Token)
		}
		if r, err := a.SharedRenew(context.Background(), lc, sem3, l); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("the holding's renewal after the copy: %+v %v", r, err)
		}
		if got := a.letGo(t, lc, sem3, l); got != processor.Released {
			t.Fatalf("its release: %v", got)
		}
	})
}

// Every key of a shared lock lives as long as its settled lockers (MarkLife), longer than a
// line entry: a late copy of a released take is refused for all that time.
func TestSharedKeysLiveAsLongAsTheSettledLockers(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc, err := domain.NewDLockConfig("PROC", fresh("life"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := newProc(t, c, "A-")
	l := a.locker()
	a.take(t, lc, sem3, l, 1, true)
	a.letGo(t, lc, sem3, l)
	keys := processor.SharedKeys(lc)
	life := a.MarkLife(lc)
	for _, k := range []string{keys[4], keys[6]} { // the settled lockers, the kind
		if ttl := c.PTTL(context.Background(), k).Val(); ttl <= processor.EntryTTL(lc) || ttl > life {
			t.Fatalf("%s lives %v; want more than an entry's %v, up to %v", k, ttl, processor.EntryTTL(lc), life)
		}
	}
}

// The mark that an operator removed a locker lives as long as the locker's own settled mark:
// the removed holder's release, which settles the locker for its own (longer) mark life,
// lengthens both, so every copy of that release answers gone (its owners learn of the loss)
// rather than "settled already" once the operator's shorter mark ran out.
func TestSharedForcedMarkLivesWithTheLockersMark(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		short := cfg(t, "forcedmark") // 1 s: the operator's lease
		long, _ := short.WithLease(20 * time.Second)
		a, op := newProc(t, c, "A-"), newProc(t, c, "OP-")
		la := a.locker()
		if r := a.take(t, long, sem3, la, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("take: %+v", r)
		}
		keys := processor.SharedKeys(long)
		// its renewal is late: a second of its lease is left as the operator removes it
		c.ZAdd(ctx, keys[1], redis.Z{Score: float64(time.Now().Add(time.Second).UnixMilli()), Member: la})
		if r, err := op.SharedForce(ctx, short, sem3, la); err != nil || r.Outcome != processor.Released {
			t.Fatalf("force = %+v, %v", r, err)
		}
		if o := a.letGo(t, long, sem3, la); o != processor.Gone {
			t.Fatalf("the removed holder's release: %v, want gone", o)
		}
		mark, forced := c.ZScore(ctx, keys[4], la).Val(), c.ZScore(ctx, keys[4], la+"|forced").Val()
		if forced < mark {
			t.Fatalf("the removal's mark ends %.0f ms before the locker's", mark-forced)
		}
	})
}

// An operator's force lets one named holding go and tells the line; it changes nothing when
// the locker holds nothing, and no copy of the removed holder's requests takes it back.
func TestSharedForceRemovesOnlyTheNamedHolding(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		short := cfg(t, "force") // 1 s: the operator's lease
		long, _ := short.WithLease(20 * time.Second)
		a, b, op := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "OP-")
		la, lb := a.locker(), b.locker()
		if r := a.take(t, long, sem3, la, 3, true); r.Outcome != processor.Taken {
			t.Fatalf("3 of 3: %+v", r)
		}
		if r := b.take(t, long, sem3, lb, 2, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("2 more: %+v", r)
		}
		sub := c.Subscribe(ctx, processor.SharedChannel(long, "B-"))
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if r, err := op.SharedForce(ctx, short, sem3, lb); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("force of a waiter = %+v, %v (a force removes holdings only)", r, err)
		}
		if in, _ := op.SharedInspect(ctx, long, sem3); len(in.Waiting) != 1 || len(in.Holdings) != 1 {
			t.Fatalf("a force of no holding changed the lock: %+v", in)
		}
		if r, err := op.SharedForceAs(ctx, short, sem3, la, "op-force"); err != nil || r.Outcome != processor.Released {
			t.Fatalf("force = %+v, %v", r, err)
		}
		hear, cancel := context.WithTimeout(ctx, 10*time.Second) // (a hang made a failure)
		defer cancel()
		if m, err := sub.ReceiveMessage(hear); err != nil || m.Payload != "F" {
			t.Fatalf("the first in line heard %v, %v; want F", m, err)
		}
		if r, err := op.SharedForce(ctx, short, sem3, la); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("force again = %+v, %v; want gone (another request)", r, err)
		}
		if r, err := op.SharedForceAs(ctx, short, sem3, la, "op-force"); err != nil || r.Outcome != processor.Settled {
			t.Fatalf("a copy of the force = %+v, %v; want settled (removed by it)", r, err)
		}
		for _, bad := range []string{"", "z|removed|q"} { // (a '|' would make one removal's mark another's)
			if _, err := op.SharedForceAs(ctx, short, sem3, la, bad); !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Fatalf("SharedForceAs named %q: %v", bad, err)
			}
		}
		if exp := c.ZRange(ctx, processor.SharedKeys(long)[1], 0, -1).Val(); len(exp) != 0 {
			t.Fatalf("leases kept after the force: %v", exp)
		}
		// the removed holder's renewal and a late copy of its take find it settled ...
		if r, _ := a.SharedRenew(ctx, long, sem3, la); r.Outcome != processor.Settled {
			t.Fatalf("the removed holder's renewal: %+v", r)
		}
		if r := a.take(t, long, sem3, la, 3, true); r.Outcome != processor.Settled {
			t.Fatalf("a late copy of the removed holder's take: %+v", r)
		}
		if o := a.letGo(t, long, sem3, la); o != processor.Gone {
			t.Fatalf("the removed holder's release: %v, want gone (its owners learn of the loss)", o)
		}
		// ... for eight times what was left of its lease, not the operator's short mark life
		if ttl := c.ZScore(ctx, processor.SharedKeys(long)[4], la).Val() - float64(time.Now().UnixMilli()); ttl < float64(7*long.Lease().Milliseconds()) {
			t.Fatalf("the removed locker stays settled %.0f ms; want about 8 × its 20 s lease", ttl)
		}
		if ttl := c.PTTL(ctx, processor.SharedKeys(long)[4]).Val(); ttl < 7*long.Lease() {
			t.Fatalf("the settled lockers' key lives %v; want about 8 × 20 s", ttl)
		}
		if r := b.take(t, long, sem3, lb, 2, true); r.Outcome != processor.Taken {
			t.Fatalf("the waiter after the force: %+v", r)
		}
		// a copy of the force that comes now says it removed its holding and leaves the new
		// one; a force of a holding let go by its release answers gone
		if r, err := op.SharedForceAs(ctx, short, sem3, la, "op-force"); err != nil || r.Outcome != processor.Settled {
			t.Fatalf("a late copy of the force = %+v, %v; want settled", r, err)
		}
		if in, _ := op.SharedInspect(ctx, long, sem3); len(in.Holdings) != 1 || in.Holdings[0].Locker != lb {
			t.Fatalf("a late copy of the force changed the lock: %+v", in)
		}
		if o := b.letGo(t, long, sem3, lb); o != processor.Released {
			t.Fatalf("the new holder's release: %v", o)
		}
		if r, err := op.SharedForce(ctx, short, sem3, lb); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("a force of a holding its holder released = %+v, %v; want gone", r, err)
		}
		if r := b.take(t, long, sem3, b.locker(), 2, true); r.Outcome != processor.Taken {
			t.Fatalf("a take after the forces: %+v", r)
		}
		if _, err := op.SharedForce(ctx, short, rw, lb); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("a read-write lock's force on a semaphore: %v", err)
		}
		// on a lock nobody used, a force makes no key
		unused := cfg(t, "unused")
		if r, err := op.SharedForce(ctx, unused, sem3, "A-1"); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("force on an unused lock = %+v, %v", r, err)
		}
		for _, k := range processor.SharedKeys(unused) {
			if c.Exists(ctx, k).Val() != 0 {
				t.Fatalf("a force on an unused lock made %s", k)
			}
		}
	})
}

// hearer listens on processes' channels of a shared lock (on the server: its messages are
// delivered in the order they were published).
type hearer struct {
	t  *testing.T
	c  redis.UniversalClient
	lc domain.DLockConfig
	ps *redis.PubSub
}

// listen listens on owners' channels as their processes do on c (by SSUBSCRIBE on a Cluster
// client).
func listen(t *testing.T, c redis.UniversalClient, lc domain.DLockConfig, owners ...string) *hearer {
	t.Helper()
	var chans []string
	for _, o := range owners {
		chans = append(chans, processor.SharedChannel(lc, o))
	}
	var ps *redis.PubSub
	if _, sharded := c.(*redis.ClusterClient); sharded {
		ps = c.SSubscribe(context.Background(), chans...)
	} else {
		ps = c.Subscribe(context.Background(), chans...)
	}
	t.Cleanup(func() { _ = ps.Close() })
	for range chans {
		if _, err := ps.Receive(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return &hearer{t: t, c: c, lc: lc, ps: ps}
}

// next expects payload to be the next message heard, on owner's channel.
func (h *hearer) next(owner, payload string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // (a hang made a failure)
	defer cancel()
	m, err := h.ps.ReceiveMessage(ctx)
	if err != nil {
		h.t.Fatalf("waiting for %q to %s: %v", payload, owner, err)
	}
	if want := processor.SharedChannel(h.lc, owner); m.Channel != want || m.Payload != payload {
		h.t.Fatalf("heard %q on %s, want %q on %s", m.Payload, m.Channel, payload, want)
	}
}

// quiet expects nothing more to have been told to the listened processes: a mark the test
// publishes now to owner is the next message heard.
func (h *hearer) quiet(owner string) {
	h.t.Helper()
	if _, sharded := h.c.(*redis.ClusterClient); sharded {
		h.c.SPublish(context.Background(), processor.SharedChannel(h.lc, owner), "mark")
	} else {
		h.c.Publish(context.Background(), processor.SharedChannel(h.lc, owner), "mark")
	}
	h.next(owner, "mark")
}

// A release tells the processes at the front of the line whose permits fit, and no further.
func TestSharedReleaseTellsOnlyWhoFits(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "fits")
	a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
	la := a.locker()
	a.take(t, lc, sem3, la, 3, true)
	b.take(t, lc, sem3, b.locker(), 2, true)
	d.take(t, lc, sem3, d.locker(), 2, true)
	h := listen(t, c, lc, "B-", "C-")
	a.letGo(t, lc, sem3, la)
	h.next("B-", "F")
	h.quiet("C-")
}

// A waiter that leaves the line (its attempt given back) lets the one behind it in, and tells
// it; so does a raised permit count.
func TestSharedLeavingTheLineTellsWhoIsBehind(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "leave")
	a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
	a.take(t, lc, sem3, a.locker(), 2, true)
	lb := b.locker()
	b.take(t, lc, sem3, lb, 3, true)
	d.take(t, lc, sem3, d.locker(), 1, true)
	h := listen(t, c, lc, "C-")
	if o := b.letGo(t, lc, sem3, lb); o != processor.Gone {
		t.Fatalf("giving back an attempt in line: %v", o)
	}
	h.next("C-", "F")

	lc = cfg(t, "raise")
	a.take(t, lc, sem3, a.locker(), 3, true)
	b.take(t, lc, sem3, b.locker(), 1, true)
	h = listen(t, c, lc, "B-")
	if err := a.SetPermits(context.Background(), lc, 4); err != nil {
		t.Fatal(err)
	}
	h.next("B-", "F")
}

// A release that names the take that follows it (SharedReleaseThenTake) lets its holding go and
// stands in line again in one script: each half answers as it would alone (a late copy is a
// copy of each), the take takes at once when its permits fit, a take of more than k is refused
// after the release ran (Let says so), and a pair of the wrong kind is refused.
func TestSharedReleaseStandsInLineAgain(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "requeue")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		held := a.locker()
		if r := a.take(t, lc, rw, held, processor.RWPermits, true); r.Outcome != processor.Taken {
			t.Fatalf("A's write: %+v", r)
		}
		bl := b.locker()
		if r := b.take(t, lc, rw, bl, processor.RWPermits, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("B in line: %+v", r)
		}
		// A lets its write go and stands in line again, behind B, in one request
		next := processor.TakeRequest{Locker: a.locker(), N: processor.RWPermits}
		r, err := a.SharedReleaseThenTake(ctx, lc, rw, held, 0, 0, 0, next)
		if err != nil || r.Let != processor.Released || r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("release that stands in line again: %+v %v", r, err)
		}
		// a copy of it, late: the release is settled, the take renews its entry where it stands
		if r, err := a.SharedReleaseThenTake(ctx, lc, rw, held, 0, 0, 0, next); err != nil || r.Let != processor.Settled || r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("a copy: %+v %v", r, err)
		}
		// B goes first; A's place holds
		if r := b.take(t, lc, rw, bl, processor.RWPermits, true); r.Outcome != processor.Taken {
			t.Fatalf("B after A let go: %+v", r)
		}
		if r := a.take(t, lc, rw, next.Locker, processor.RWPermits, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("A behind B's write: %+v", r)
		}
		b.letGo(t, lc, rw, bl)
		if r := a.take(t, lc, rw, next.Locker, processor.RWPermits, true); r.Outcome != processor.Taken {
			t.Fatalf("A after B: %+v", r)
		}
		a.letGo(t, lc, rw, next.Locker)
		// once the attempt is settled, no copy of the pair puts it in line or takes with it
		if r, err := a.SharedReleaseThenTake(ctx, lc, rw, held, 0, 0, 0, next); err != nil || r.Let != processor.Settled || r.Outcome != processor.Settled {
			t.Fatalf("a copy after both settled: %+v %v", r, err)
		}
		if in, err := a.SharedInspect(ctx, lc, rw); err != nil || len(in.Holdings) != 0 || len(in.Waiting) != 0 {
			t.Fatalf("left: %+v %v", in, err)
		}
		h := a.locker()
		if r, err := a.SharedReleaseThenTake(ctx, lc, sem3, h, 0, 0, 0, processor.TakeRequest{Locker: a.locker(), N: 3}); !errors.Is(err, dlerrors.ErrInvalidConfig) || !strings.Contains(err.Error(), "is a rw lock in Redis") {
			t.Fatalf("a semaphore's release then take on a read-write lock's keys: %+v %v", r, err)
		}
		// with nobody in the way the take takes at once (a semaphore's permits that fit)
		lc2 := cfg(t, "requeue-sem")
		if r := a.take(t, lc2, sem3, h, 2, true); r.Outcome != processor.Taken {
			t.Fatalf("semaphore: %+v", r)
		}
		h3 := a.locker()
		r, err = a.SharedReleaseThenTake(ctx, lc2, sem3, h, 0, 0, 0, processor.TakeRequest{Locker: h3, N: 3, Tokens: 4})
		if err != nil || r.Let != processor.Released || r.Outcome != processor.Taken || r.Token == 0 {
			t.Fatalf("semaphore's release then take, nobody in line: %+v %v", r, err)
		}
		if in, err := a.SharedInspect(ctx, lc2, sem3); err != nil || in.Fence != r.Token+3 {
			t.Fatalf("the take reserved tokens up to %d, want its block of 4 from %d (%v)", in.Fence, r.Token, err)
		}
		// a take of more than k is refused, but its release ran: the error says so (Let)
		if r, err := a.SharedReleaseThenTake(ctx, lc2, sem3, h3, 0, 0, 0, processor.TakeRequest{Locker: a.locker(), N: 4}); !errors.Is(err, dlerrors.ErrInvalidConfig) || r.Let != processor.Released {
			t.Fatalf("more than k: %+v %v", r, err)
		}
		if in, err := a.SharedInspect(ctx, lc2, sem3); err != nil || len(in.Holdings) != 0 || len(in.Waiting) != 0 {
			t.Fatalf("left after a refused take: %+v %v", in, err)
		}
		if _, err := a.SharedReleaseThenTake(ctx, lc2, sem3, h, 0, 0, 0, processor.TakeRequest{}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("a zero take: %v", err)
		}
	})
}

// A holding's renewals name the token it was taken with: a holding under the same locker
// with another token — taken anew by a late copy of its take after an empty restart wiped it,
// while others may have held the permits — is let go and answers Gone; a copy of a take that
// was answered keeps the holding's token, and a renewal naming none (an older version's) is
// not checked.
func TestSharedRenewalNamesTheTokenItWasTakenWith(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc, _ := cfg(t, "origin").WithLease(5 * time.Second) // (no holding runs out in a stall)
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		l := a.locker()
		r := a.take(t, lc, sem3, l, 2, true)
		if r.Outcome != processor.Taken {
			t.Fatalf("take = %+v", r)
		}
		if again := a.take(t, lc, sem3, l, 2, true); again.Outcome != processor.Taken || again.Token != r.Token {
			t.Fatalf("a copy of the take = %+v; want the same holding, token %d", again, r.Token)
		}
		if got, err := a.SharedRenewOf(ctx, lc, sem3, l, r.Token, 0); err != nil || got.Outcome != processor.Renewed {
			t.Fatalf("renewal naming its token = %+v, %v", got, err)
		}
		c.Del(ctx, c.Keys(ctx, "*"+lc.UniqueKey()+"*").Val()...) // an empty restart
		anew := a.take(t, lc, sem3, l, 2, true)                  // a late copy of the take
		if anew.Outcome != processor.Taken || anew.Token == r.Token {
			t.Fatalf("the late copy after the restart = %+v; want taken anew", anew)
		}
		h := listen(t, c, lc, "B-")
		lb := b.locker()
		if got := b.take(t, lc, sem3, lb, 3, true); got.Outcome != processor.Held {
			t.Fatalf("B- = %+v, want in line behind the 2 permits taken anew", got)
		}
		time.Sleep(100 * time.Millisecond) // (the keys' lives run down: the renewal that settles must lengthen them)
		if got, err := a.SharedRenewOf(ctx, lc, sem3, l, r.Token, 0); err != nil || got.Outcome != processor.Gone {
			t.Fatalf("the holder's renewal after its holding was taken anew = %+v, %v; want Gone", got, err)
		}
		h.next("B-", "F") // the permits it let go fit the line now
		keysOutlive(t, c, lc, "the renewal that let the holding go")
		if got := b.take(t, lc, sem3, lb, 3, true); got.Outcome != processor.Taken {
			t.Fatalf("all 3 permits after the new holding was let go: %+v", got)
		}
		if got := a.take(t, lc, sem3, l, 2, true); got.Outcome != processor.Settled {
			t.Fatalf("another copy of the take = %+v; want it settled", got)
		}
		if got, err := b.SharedRenew(ctx, lc, sem3, lb); err != nil || got.Outcome != processor.Renewed {
			t.Fatalf("a renewal naming no token = %+v, %v", got, err)
		}
	})
}

// A take that replaces a holding (a downgrade) names the token that holding was taken with,
// as a renewal does: a holding under that locker taken anew by a late copy of its take after an
// empty restart is let go, and the downgrade is settled as one whose holding is gone — the
// process did not hold the write side while another did, and learns so; a downgrade naming
// the right token, or none (an older version's), replaces the holding.
func TestSharedReplacingTakeNamesTheTokenItReplaces(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "downorigin")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		lw := a.locker()
		take := processor.TakeRequest{Locker: lw, N: processor.RWPermits, Tokens: 4}
		r, err := a.SharedTake(ctx, lc, rw, take)
		if err != nil || r.Outcome != processor.Taken {
			t.Fatalf("A's write-hold: %+v, %v", r, err)
		}
		wipeKeys(t, c, lc) // an empty restart
		lb := b.locker()
		if got := b.take(t, lc, rw, lb, processor.RWPermits, false); got.Outcome != processor.Taken {
			t.Fatalf("B's write-hold after the restart: %+v", got)
		}
		b.letGo(t, lc, rw, lb)
		time.Sleep(2 * time.Millisecond)             // (the clock moves: tokens are the server's µs)
		anew, err := a.SharedTake(ctx, lc, rw, take) // a late copy of A's take
		if err != nil || anew.Outcome != processor.Taken || anew.Token == r.Token {
			t.Fatalf("the late copy after the restart = %+v, %v; want taken anew", anew, err)
		}
		ld := a.locker()
		down := processor.TakeRequest{Locker: ld, N: 1, Replaces: lw, Origin: r.Token, Last: r.Token, BlockEnd: r.Token + 3}
		if got, err := a.SharedTake(ctx, lc, rw, down); err != nil || got.Outcome != processor.Settled {
			t.Fatalf("the downgrade of %s (taken with token %d, held under %d since the copy) = %+v, %v; want settled",
				lw, r.Token, anew.Token, got, err)
		}
		if in, err := a.SharedInspect(ctx, lc, rw); err != nil || len(in.Holdings) != 0 {
			t.Fatalf("after the downgrade: %+v, %v; want the holding taken anew let go", in, err)
		}
		// the write-hold's release (its downgrade's answer lost) answers gone, as after a renewal that found it so
		if got, err := a.SharedReleaseOf(ctx, lc, rw, lw, r.Token, 0, 0); err != nil || got.Outcome != processor.Gone {
			t.Fatalf("the release of the write-hold the downgrade found taken anew = %+v, %v; want gone", got, err)
		}
		// the same downgrade of a holding that is its own goes through, with its token or none
		for i, origin := range []func(uint64) uint64{func(tok uint64) uint64 { return tok }, func(uint64) uint64 { return 0 }} {
			lw := a.locker()
			w, err := a.SharedTake(ctx, lc, rw, processor.TakeRequest{Locker: lw, N: processor.RWPermits, Tokens: 4})
			if err != nil || w.Outcome != processor.Taken {
				t.Fatalf("write-hold %d: %+v, %v", i, w, err)
			}
			ld := a.locker()
			down := processor.TakeRequest{Locker: ld, N: 1, Replaces: lw, Origin: origin(w.Token), Last: w.Token, BlockEnd: w.Token + 3}
			if got, err := a.SharedTake(ctx, lc, rw, down); err != nil || got.Outcome != processor.Taken {
				t.Fatalf("downgrade %d (origin %d) = %+v, %v; want taken", i, down.Origin, got, err)
			}
			a.letGo(t, lc, rw, ld)
		}
	})
}

// A holding renewed for longer than its keys were last set to live keeps them, and with them
// itself.
func TestSharedRenewalsKeepTheKeys(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	// (a lease long enough that a loaded machine's stall between two renewals, up to 1.2 s, does
	// not end it)
	lc, err := domain.NewDLockConfig("PROC", fresh("renewkeys"), 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a := newProc(t, c, "A-")
	l := a.locker()
	a.take(t, lc, sem3, l, 1, true)
	for end := time.Now().Add(processor.EntryTTL(lc) + 2*lc.Lease()); time.Now().Before(end); { // (keys live at least an entry's time)
		time.Sleep(lc.Lease() / 5)
		if r, err := a.SharedRenew(context.Background(), lc, sem3, l); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("renewal: %+v, %v", r, err)
		}
	}
}

// State lists only live holdings and line entries, though no request pruned the rest yet.
func TestSharedInspectShowsOnlyTheLive(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc, err := domain.NewDLockConfig("PROC", fresh("inspectlive"), 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	a.take(t, lc, sem3, a.locker(), 3, true)
	b.take(t, lc, sem3, b.locker(), 1, true)
	time.Sleep(lc.Lease() + 100*time.Millisecond) // (B-'s entry keeps the keys: no request since)
	if in, err := a.SharedInspect(context.Background(), lc, sem3); err != nil || len(in.Holdings) != 0 {
		t.Fatalf("inspection after the lease ran out: %+v, %v", in, err)
	}
	time.Sleep(processor.EntryTTL(lc))
	in, err := a.SharedInspect(context.Background(), lc, sem3)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Holdings) != 0 || len(in.Waiting) != 0 {
		t.Fatalf("inspection after every lease and entry ran out: %+v", in)
	}
}

// An inspection fails when a key of the lock's holds another kind of value (as the requests
// that use the key do): State does not show a lock free that no one can take. For the mutex,
// the keys an acquisition reads too (not the first token's, which a take sets whatever it
// held, nor a process's marks, which the inspection does not name); for the family, all.
func TestInspectionFailsOnAKeyOfAnotherKind(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		p := newProc(t, c, "pa-")
		for i := range 5 {
			lc := cfg(t, "mutexkind"+strconv.Itoa(i))
			key := []string{lc.UniqueKey(), processor.FenceKey(lc), processor.LineKey(lc), processor.WantKey(lc), processor.GapKey(lc)}[i]
			if err := c.RPush(ctx, key, "not dlock's").Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Inspect(ctx, lc); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("%s holding a list: the mutex's inspection %v; want WRONGTYPE", key, err)
			}
			if _, err := p.Lock(ctx, lc, processor.LockRequest{Locker: "pa-1", Tokens: 1}); err == nil {
				t.Fatalf("%s holding a list: an acquisition did not fail", key)
			}
		}
	})
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		p := newProc(t, c, "A-")
		for i, key := range processor.SharedKeys(cfg(t, "x")) {
			lc := cfg(t, "kind"+strconv.Itoa(i))
			key = processor.SharedKeys(lc)[i]
			if err := c.RPush(ctx, key, "not dlock's").Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := p.SharedInspect(ctx, lc, sem3); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("%s holding a list: inspection %v; want WRONGTYPE", key, err)
			}
		}
	})
}

// A take asking more than k (lowered while it waited) is refused and settled, leaves the line,
// and the process behind it is told.
func TestSharedRefusedTakeLeavesTheLine(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc := cfg(t, "refused")
	a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
	a.take(t, lc, sem3, a.locker(), 1, true)
	lb := b.locker()
	if r := b.take(t, lc, sem3, lb, 3, true); r.Outcome != processor.Held || r.Rank != 0 {
		t.Fatalf("3 beside 1 of 3: %+v", r)
	}
	if r := d.take(t, lc, sem3, d.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 1 {
		t.Fatalf("1 behind a waiter of 3: %+v", r)
	}
	h := listen(t, c, lc, "C-")
	if err := a.SetPermits(ctx, lc, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: lb, N: 3, Wait: true}); !errors.Is(err, dlerrors.ErrInvalidConfig) {
		t.Fatalf("3 of 2 permits: %v", err)
	}
	h.next("C-", "F")
	if err := a.SetPermits(ctx, lc, 4); err != nil {
		t.Fatal(err)
	}
	if r := b.take(t, lc, sem3, lb, 3, true); r.Outcome != processor.Settled {
		t.Fatalf("a copy of the refused take once 3 fit: %+v", r)
	}
}

// A downgrade gives the readers in line their turn: they are told, and only the read-hold's
// lease is kept.
func TestSharedDowngradeTellsTheReadersInLine(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc := cfg(t, "downtell")
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	wl := a.locker()
	a.take(t, lc, rw, wl, processor.RWPermits, true)
	b.take(t, lc, rw, b.locker(), 1, true)
	h := listen(t, c, lc, "B-")
	rl := a.locker()
	if r, err := a.SharedTake(ctx, lc, rw, processor.TakeRequest{Locker: rl, N: 1, Replaces: wl}); err != nil || r.Outcome != processor.Taken {
		t.Fatalf("downgrade: %+v %v", r, err)
	}
	h.next("B-", "F")
	if exp := c.ZRange(ctx, processor.SharedKeys(lc)[1], 0, -1).Val(); len(exp) != 1 || exp[0] != rl {
		t.Fatalf("the holdings' leases after a downgrade: %v, want the read-hold's alone", exp)
	}
}

// A take that replaces a holding of its process by as many permits frees none: it tells no
// one in line (a process whose permits fit was told as they came free, and is not told again).
func TestSharedReplacingTakeOfAsManyPermitsTellsNobody(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc, _ := cfg(t, "sametell").WithLease(10 * time.Second) // (no holding runs out, freeing permits, in a stall)
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	la, lx := a.locker(), a.locker()
	a.take(t, lc, sem3, la, 2, true)
	a.take(t, lc, sem3, lx, 1, true)
	h := listen(t, c, lc, "B-")
	if r := b.take(t, lc, sem3, b.locker(), 1, true); r.Outcome != processor.Held {
		t.Fatalf("B- beside 3 of 3 held: %+v", r)
	}
	a.letGo(t, lc, sem3, lx)
	h.next("B-", "F") // its permit fits now
	if r, err := a.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: a.locker(), N: 2, Replaces: la}); err != nil || r.Outcome != processor.Taken {
		t.Fatalf("A-'s 2 permits replaced by 2: %+v, %v", r, err)
	}
	h.quiet("B-")
}

// Permits that came free when a holding's lease ran out are told to the line by whatever
// request notices it first, of any kind.
func TestSharedFreedPermitsAreToldByAnyRequest(t *testing.T) {
	short, err := domain.NewDLockConfig("PROC", "x", 500*time.Millisecond) // (long enough that B- stands in line before it runs out, on a loaded machine too)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []struct {
		name string
		run  func(t *testing.T, p *proc, lc domain.DLockConfig, copyOf, settled string)
	}{
		{"a take that fits", func(t *testing.T, p *proc, lc domain.DLockConfig, _, _ string) {
			p.take(t, lc, sem3, p.locker(), 1, true)
		}},
		{"a take that waits", func(t *testing.T, p *proc, lc domain.DLockConfig, _, _ string) {
			p.take(t, lc, sem3, p.locker(), 3, true)
		}},
		{"a try that fails", func(t *testing.T, p *proc, lc domain.DLockConfig, _, _ string) {
			p.take(t, lc, sem3, p.locker(), 3, false)
		}},
		{"a copy of an answered take", func(t *testing.T, p *proc, lc domain.DLockConfig, copyOf, _ string) {
			p.take(t, lc, sem3, copyOf, 1, true)
		}},
		{"a settled copy", func(t *testing.T, p *proc, lc domain.DLockConfig, _, settled string) {
			p.take(t, lc, sem3, settled, 1, true)
		}},
		{"a take replacing what is gone", func(t *testing.T, p *proc, lc domain.DLockConfig, _, _ string) {
			_, _ = p.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: p.locker(), N: 1, Replaces: "C-gone"})
		}},
		{"a take of more than k", func(t *testing.T, p *proc, lc domain.DLockConfig, _, _ string) {
			_, _ = p.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: p.locker(), N: 4})
		}},
		{"a renewal", func(t *testing.T, p *proc, lc domain.DLockConfig, held, _ string) {
			_, _ = p.SharedRenew(context.Background(), lc, sem3, held)
		}},
		{"a renewal of what is let go", func(t *testing.T, p *proc, lc domain.DLockConfig, _, settled string) {
			_, _ = p.SharedRenew(context.Background(), lc, sem3, settled)
		}},
		{"a release of nothing", func(t *testing.T, p *proc, lc domain.DLockConfig, _, _ string) { p.letGo(t, lc, sem3, p.locker()) }},
		{"a force of nothing", func(t *testing.T, p *proc, lc domain.DLockConfig, _, _ string) {
			_, _ = p.SharedForce(context.Background(), lc, sem3, "C-nobody")
		}},
		{"a copy of a change of the permits", func(t *testing.T, p *proc, lc domain.DLockConfig, _, settled string) {
			// a change whose locker is settled ran before: it changes nothing
			if changed, now, err := p.ChangePermits(context.Background(), lc, settled, 3, 4); err != nil || changed || now != 3 {
				t.Fatalf("a copy of a change: %v, %d, %v", changed, now, err)
			}
		}},
		{"a refused change of the permits", func(t *testing.T, p *proc, lc domain.DLockConfig, _, _ string) {
			// a late copy of a change 5 -> 4, or a SetPermits that read 5: Redis keeps 3
			if changed, now, err := p.ChangePermits(context.Background(), lc, "", 5, 4); err != nil || changed || now != 3 {
				t.Fatalf("refused change: %v, %d, %v", changed, now, err)
			}
		}},
	} {
		t.Run(path.name, func(t *testing.T) {
			c := srv.Client()
			defer c.Close()
			lc := cfg(t, "freed")
			lcShort, _ := lc.WithLease(short.Lease())
			a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
			sent := time.Now()
			a.take(t, lcShort, sem3, a.locker(), 2, true) // runs out unrenewed
			held := d.locker()
			d.take(t, lc, sem3, held, 1, true)
			settled := d.locker()
			d.take(t, lc, sem3, settled, 1, false) // fails: settled
			// B- listens before it stands in line: its entry counts while it listens, however long
			// a loaded machine takes to the request under test
			h := listen(t, c, lc, "B-")
			if r := b.take(t, lc, sem3, b.locker(), 1, true); r.Outcome != processor.Held {
				if took := time.Since(sent); took > short.Lease() {
					t.Skipf("B- asked %v after A-'s take was sent, past its %v lease (a stall of the machine): %+v", took.Round(time.Millisecond), short.Lease(), r)
				}
				t.Fatalf("%+v", r)
			}
			time.Sleep(short.Lease() + 100*time.Millisecond)
			path.run(t, d, lc, held, settled)
			h.next("B-", "F")
			keysOutlive(t, c, lc, path.name) // (the expired holding is settled for d's mark life)
		})
	}
}

// Every key of a shared lock expires, and lives at least as long as what it keeps: the
// holdings' leases, the line entries' and the settled lockers' times — after every kind of
// request, each run when the keys' lives set before have shortened, and after a request whose
// lease is shorter than a holding's (SET rewrites the kind key's life: it must not come down
// to the request's times, or the lock forgets its kind and count while the holding lives).
func TestSharedKeysOutliveWhatTheyKeep(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	lc := cfg(t, "lives")
	long, _ := lc.WithLease(20 * time.Second) // past every time a request of lc's sets
	a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
	la := a.locker()
	lb, ld := b.locker(), d.locker()
	steps := []struct {
		name string
		run  func()
	}{
		{"a take that fits", func() { a.take(t, lc, sem3, la, 2, true) }},
		{"a take that waits", func() { b.take(t, lc, sem3, lb, 2, true) }},
		{"a try that fails", func() { d.take(t, lc, sem3, ld, 3, false) }},
		{"a settled copy", func() { d.take(t, lc, sem3, ld, 3, false) }},
		{"a copy of an answered take", func() { a.take(t, lc, sem3, la, 2, true) }},
		{"a take replacing what is gone", func() {
			_, _ = d.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: d.locker(), N: 1, Replaces: "C-gone"})
		}},
		{"a take of more than k", func() { _, _ = d.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: d.locker(), N: 4}) }},
		{"a renewal", func() { _, _ = a.SharedRenew(ctx, lc, sem3, la) }},
		{"a renewal of the line entry", func() { b.take(t, lc, sem3, lb, 2, true) }},
		{"a force of nothing", func() { _, _ = d.SharedForce(ctx, lc, sem3, "C-nobody") }},
		{"a release", func() { a.letGo(t, lc, sem3, la) }},
		{"a setting of k", func() { _ = a.SetPermits(ctx, lc, 3) }},
		{"a refused change of k", func() { _, _, _ = a.ChangePermits(ctx, lc, "", 5, 4) }},
		{"a force", func() { _, _ = d.SharedForce(ctx, lc, sem3, lb) }},
		{"a take with a longer lease", func() { a.take(t, long, sem3, a.locker(), 1, true) }},
		{"a request with a shorter lease than a holding's", func() { d.take(t, lc, sem3, d.locker(), 3, false) }},
	}
	for _, s := range steps {
		time.Sleep(60 * time.Millisecond) // the lives set before shorten
		s.run()
		keysOutlive(t, c, lc, s.name)
	}
}

// keysOutlive checks that every key of lc's shared lock that exists expires, and no sooner
// than what it keeps: the holdings' leases, the line entries' and the settled lockers' times.
func keysOutlive(t *testing.T, c *redis.Client, lc domain.DLockConfig, step string) {
	t.Helper()
	ctx := context.Background()
	keys := processor.SharedKeys(lc)
	// One snapshot, taken by Redis in one script: each key's remaining life (-2 when absent) and
	// its clock (ms) read after them. Read one by one, a busy machine could spend the slack
	// between the reads and fail a key that was right. Within the script, too, Redis 7.0 counts
	// PTTL from the moment it runs: a server descheduled between a TIME read first and the PTTLs
	// (for 130 ms, once, on a loaded machine) would shorten every life against the marks' need.
	// With the clock read last, a life is never counted from an instant later than the clock's.
	snap, err := keysLives.Run(ctx, c, keys).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	now := snap[0]
	need := int64(0)
	for _, k := range []string{keys[1], keys[4]} { // EXP, GONE
		for _, z := range c.ZRangeWithScores(ctx, k, 0, -1).Val() {
			need = max(need, int64(z.Score)-now)
		}
	}
	for _, v := range c.HVals(ctx, keys[3]).Val() { // WANT: <n>|<expires>|<locker>
		var n, expires int64
		if _, err := fmt.Sscanf(v, "%d|%d|", &n, &expires); err == nil {
			need = max(need, expires-now)
		}
	}
	for i, k := range keys {
		switch ttl := snap[i+1]; {
		case ttl == -2:
		case ttl < 0:
			t.Fatalf("after %s: %s lives for ever", step, k)
		case ttl < need-20:
			t.Fatalf("after %s: %s lives %d ms, less than what it keeps (%d ms)", step, k, ttl, need)
		}
	}
}

// keysLives returns the server clock in ms, then the remaining life of each of KEYS in ms: the
// clock read after the lives (Redis 7.2 counts PTTL from the script's start, 7.0 from each
// call; either way no later than the clock), so that a stall between the reads can only
// lengthen a life against the clock, never fail a key that was right.
var keysLives = redis.NewScript(`local out = {0}
for i, k in ipairs(KEYS) do
    out[i + 1] = redis.call('pttl', k)
end
local t = redis.call('time')
out[1] = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return out`)

// A copy of a take that was answered renews the holding it finds.
func TestSharedCopyOfATakeRenewsIt(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "copyrenews")
		a := newProc(t, c, "A-")
		l := a.locker()
		a.take(t, lc, sem3, l, 1, true)
		exp := processor.SharedKeys(lc)[1]
		before := c.ZScore(ctx, exp, l).Val()
		time.Sleep(20 * time.Millisecond)
		if r := a.take(t, lc, sem3, l, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("a copy of an answered take: %+v", r)
		}
		if after := c.ZScore(ctx, exp, l).Val(); after <= before {
			t.Fatalf("the copy left the lease to run out at %v (it was %v)", after, before)
		}
	})
}

// A fencing counter near its bound (2^53 - 2^30, set there by hand) leaves no room for a block
// that would reach it: a take or a renewal asking for one is refused before it writes, naming
// the counter; a take whose block fits exactly gets the last tokens, and a renewal that asks
// for none goes through.
func TestSharedFencingCounterWithNoRoomLeft(t *testing.T) {
	srv.NeedReal(t)
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	a := newProc(t, c, "A-")
	lc := cfg(t, "shared-full-fence")
	fence := processor.SharedKeys(lc)[5]
	held := a.locker()
	if r := a.take(t, lc, sem3, held, 1, true); r.Outcome != processor.Taken {
		t.Fatalf("take: %+v", r)
	}
	set := func(v string) {
		if err := c.Set(ctx, fence, v, redis.KeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set("9007198180999165") // room for two tokens
	for name, do := range map[string]func() (processor.SharedResult, error){
		"a take of three tokens": func() (processor.SharedResult, error) {
			return a.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: a.locker(), N: 1, Wait: true, Tokens: 3})
		},
		"a renewal asking for three": func() (processor.SharedResult, error) {
			return a.SharedRefill(ctx, lc, sem3, held, 3)
		},
	} {
		if r, err := do(); !processor.Refused(err) || !strings.Contains(err.Error(), "fencing counter "+fence) || !strings.Contains(err.Error(), "no room for 3 more tokens") || !strings.Contains(err.Error(), "set it lower or delete it") {
			t.Fatalf("%s with room for two = %+v, %v; want the refusal naming the counter, saying there is no room and what to do", name, r, err)
		}
		if got := c.Get(ctx, fence).Val(); got != "9007198180999165" {
			t.Fatalf("%s left the counter at %s", name, got)
		}
	}
	if r, err := a.SharedRenew(ctx, lc, sem3, held); err != nil || r.Outcome != processor.Renewed {
		t.Fatalf("a renewal asking for no tokens = %+v, %v; want renewed", r, err)
	}
	if r, err := a.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: a.locker(), N: 1, Wait: true, Tokens: 2}); err != nil || r.Outcome != processor.Taken || r.Token != 9007198180999166 {
		t.Fatalf("a take of the last two tokens = %+v, %v; want taken from 9007198180999166", r, err)
	}
	// a release that stands in line again (a take after it in the same script) whose take has
	// no room is refused before the release writes: the holding is still held
	set("9007198180999167")
	if r, err := a.SharedReleaseThenTake(ctx, lc, sem3, held, 0, 0, 0, processor.TakeRequest{Locker: a.locker(), N: 1, Tokens: 1}); !processor.Refused(err) {
		t.Fatalf("a release and take with no room left = %+v, %v; want the refusal", r, err)
	}
	if r, err := a.SharedRenew(ctx, lc, sem3, held); err != nil || r.Outcome != processor.Renewed {
		t.Fatalf("the holding after the refused release and take = %+v, %v; want it still held", r, err)
	}
	// a counter that holds no number: such a release is refused by name too, before it writes
	set("abc")
	if r, err := a.SharedReleaseThenTake(ctx, lc, sem3, held, 0, 0, 0, processor.TakeRequest{Locker: a.locker(), N: 1, Tokens: 1}); !processor.Refused(err) || !strings.Contains(err.Error(), "fencing counter "+fence) {
		t.Fatalf("a release and take with a counter of %q = %+v, %v; want the refusal naming the counter", "abc", r, err)
	}
}

// A fencing counter that holds what no script writes (a word, or 2^53 - 2^30 itself: a whole
// number, but past the last token a script hands out), or a kind key that holds no kind and
// permits (a word, a semaphore of 0 permits), is refused by every request of the family,
// before it writes, the refusal naming the key and what it should hold: a renewal and a
// release that reserve nothing, an operator's force, a change of the count and an inspection
// too, not only what reserves tokens. Every key is left as it was.
func TestSharedCorruptKeyRefusesBeforeAnyWrite(t *testing.T) {
	srv.NeedReal(t)
	for _, tc := range []struct {
		key  int // in SharedKeys
		v    string
		says string
	}{
		{5, "abc", "not a fencing token"},
		{5, "9007198180999168", "not a fencing token"},
		{6, "weird", "not a lock kind and its permits"},
		{6, "sem|0", "not a lock kind and its permits"},
		{6, "rw|", "not a lock kind and its permits"},
	} {
		t.Run(tc.v, func(t *testing.T) {
			c := srv.Client()
			defer c.Close()
			ctx := context.Background()
			lc, _ := cfg(t, "shared-corrupt").WithLease(10 * time.Second) // (no key runs out in a stall)
			a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
			la, lb := a.locker(), b.locker()
			if r := a.take(t, lc, sem3, la, 2, true); r.Outcome != processor.Taken {
				t.Fatalf("A's take: %+v", r)
			}
			if r := b.take(t, lc, sem3, lb, 2, true); r.Outcome != processor.Held {
				t.Fatalf("B's take: %+v", r)
			}
			key := processor.SharedKeys(lc)[tc.key]
			if err := c.Set(ctx, key, tc.v, redis.KeepTTL).Err(); err != nil {
				t.Fatal(err)
			}
			type state struct {
				dump string
				pttl time.Duration
			}
			snapshot := func() map[string]state {
				out := map[string]state{}
				for _, k := range processor.SharedKeys(lc) {
					out[k] = state{c.Dump(ctx, k).Val(), c.PTTL(ctx, k).Val()}
				}
				return out
			}
			before := snapshot()
			for _, op := range []struct {
				name string
				do   func() error
			}{
				{"renew", func() error { _, err := a.SharedRenew(ctx, lc, sem3, la); return err }},
				{"release", func() error { _, err := a.SharedRelease(ctx, lc, sem3, la); return err }},
				{"take", func() error {
					_, err := b.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: lb, N: 2, Wait: true})
					return err
				}},
				{"force", func() error { _, err := b.SharedForce(ctx, lc, sem3, la); return err }},
				{"set permits", func() error { return b.SetPermits(ctx, lc, 4) }},
				{"inspect", func() error { _, err := b.SharedInspect(ctx, lc, sem3); return err }},
			} {
				err := op.do()
				if !processor.Refused(err) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("%s with %s holding %q: %v; want the refusal naming the key, %q", op.name, key, tc.v, err, tc.says)
				}
				for k, s := range before {
					if got := snapshot()[k]; got.dump != s.dump || got.pttl > s.pttl {
						t.Fatalf("%s changed %s: %+v, before %+v", op.name, k, got, s)
					}
				}
			}
		})
	}
}

// A take reserves the block of fencing tokens it asks for: its token is the first, a copy of it
// answers the same, and the next holding's token is above the whole block; a refill (a renewal
// with tokens) reserves another above it. A release, or a downgrade, gives back the tokens after
// the last one handed out (all of it when none was) when no holding reserved any since — once:
// a copy gives back nothing.
// (The counter is set far ahead of the clock, so that tokens follow it.)
func TestSharedBlocksOfTokens(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "block")
		fence := processor.SharedKeys(lc)[5]
		ahead := uint64(time.Now().UnixMicro()) + 1_000_000_000_000
		if err := c.Set(ctx, fence, ahead, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		counter := func() uint64 {
			t.Helper()
			n, err := c.Get(ctx, fence).Uint64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		w, r := newProc(t, c, "W-"), newProc(t, c, "R-")
		wl := w.locker()
		req := processor.TakeRequest{Locker: wl, N: processor.RWPermits, Wait: true, Tokens: 5}
		got, err := w.SharedTake(ctx, lc, rw, req)
		if err != nil || got.Outcome != processor.Taken || got.Token != ahead+1 {
			t.Fatalf("write take = %+v, %v; want taken with token %d", got, err, ahead+1)
		}
		if again, err := w.SharedTake(ctx, lc, rw, req); err != nil || again.Token != got.Token || counter() != ahead+5 {
			t.Fatalf("its copy = %+v, %v, counter %d; want the same token %d, the counter at %d", again, err, counter(), got.Token, ahead+5)
		}
		// a refill: a second block, above the first
		if f, err := w.SharedRefill(ctx, lc, rw, wl, 5); err != nil || f.Outcome != processor.Renewed || f.Token != ahead+6 || counter() != ahead+10 {
			t.Fatalf("refill = %+v, %v, counter %d; want a block from %d", f, err, counter(), ahead+6)
		}
		// (a block of more than MaxTokens is refused before it is sent)
		if _, err := w.SharedRefill(ctx, lc, rw, wl, processor.MaxTokens+1); !errors.Is(err, dlerrors.ErrInvalidConfig) || counter() != ahead+10 {
			t.Fatalf("a refill of MaxTokens+1 tokens = %v, counter %d; want ErrInvalidConfig, the counter at %d", err, counter(), ahead+10)
		}
		if f, err := w.SharedRenew(ctx, lc, rw, wl); err != nil || f.Outcome != processor.Renewed || f.Token != 0 || counter() != ahead+10 {
			t.Fatalf("renewal = %+v, %v, counter %d; want no block", f, err, counter())
		}
		// the release gives back what was not handed out (up to ahead+7), once
		if o, err := w.SharedReleaseBlock(ctx, lc, rw, wl, ahead+7, ahead+10); err != nil || o.Outcome != processor.Released || counter() != ahead+7 {
			t.Fatalf("release = %+v, %v, counter %d; want released, the counter at %d", o, err, counter(), ahead+7)
		}
		if o, err := w.SharedReleaseBlock(ctx, lc, rw, wl, ahead+2, ahead+7); err != nil || o.Outcome != processor.Settled || counter() != ahead+7 {
			t.Fatalf("its copy = %+v, %v, counter %d; want settled, the counter left at %d", o, err, counter(), ahead+7)
		}
		rl := r.locker()
		if next := r.take(t, lc, rw, rl, 1, false); next.Outcome != processor.Taken || next.Token != ahead+8 {
			t.Fatalf("the next take = %+v; want token %d", next, ahead+8)
		}
		r.letGo(t, lc, rw, rl)
		// a downgrade gives back first, then takes its one token
		wl = w.locker()
		if got := w.take(t, lc, rw, wl, processor.RWPermits, true); got.Outcome != processor.Taken || got.Token != ahead+9 {
			t.Fatalf("write take = %+v; want token %d", got, ahead+9)
		} // (a block of one: the counter at ahead+9)
		dl := w.locker()
		down := processor.TakeRequest{Locker: dl, N: 1, Replaces: wl, Last: ahead + 9, BlockEnd: ahead + 9}
		if d, err := w.SharedTake(ctx, lc, rw, down); err != nil || d.Outcome != processor.Taken || d.Token != ahead+10 {
			t.Fatalf("downgrade = %+v, %v; want token %d", d, err, ahead+10)
		}
		w.letGo(t, lc, rw, dl)
		wl = w.locker()
		if got, err := w.SharedTake(ctx, lc, rw, processor.TakeRequest{Locker: wl, N: processor.RWPermits, Tokens: 4}); err != nil || got.Token != ahead+11 {
			t.Fatalf("write take = %+v, %v; want token %d", got, err, ahead+11)
		}
		dl = w.locker()
		down = processor.TakeRequest{Locker: dl, N: 1, Replaces: wl, Last: ahead + 11, BlockEnd: ahead + 14}
		if d, err := w.SharedTake(ctx, lc, rw, down); err != nil || d.Outcome != processor.Taken || d.Token != ahead+12 {
			t.Fatalf("downgrade that gives back = %+v, %v; want token %d", d, err, ahead+12)
		}
		w.letGo(t, lc, rw, dl)
		// a holding that handed out none of its block gives it all back
		wl = w.locker()
		if got, err := w.SharedTake(ctx, lc, rw, processor.TakeRequest{Locker: wl, N: processor.RWPermits, Tokens: 3}); err != nil || got.Token != ahead+13 {
			t.Fatalf("write take = %+v, %v; want token %d", got, err, ahead+13)
		}
		if o, err := w.SharedReleaseBlock(ctx, lc, rw, wl, ahead+12, ahead+15); err != nil || o.Outcome != processor.Released || counter() != ahead+12 {
			t.Fatalf("release of an unused block = %+v, %v, counter %d; want released, the counter at %d", o, err, counter(), ahead+12)
		}
		// and so does a downgrade of one: its read holding's token is the write holding's first
		wl = w.locker()
		if got, err := w.SharedTake(ctx, lc, rw, processor.TakeRequest{Locker: wl, N: processor.RWPermits, Tokens: 3}); err != nil || got.Token != ahead+13 {
			t.Fatalf("write take = %+v, %v; want token %d", got, err, ahead+13)
		}
		dl = w.locker()
		down = processor.TakeRequest{Locker: dl, N: 1, Replaces: wl, Last: ahead + 12, BlockEnd: ahead + 15}
		if d, err := w.SharedTake(ctx, lc, rw, down); err != nil || d.Outcome != processor.Taken || d.Token != ahead+13 || counter() != ahead+13 {
			t.Fatalf("downgrade of an unused block = %+v, %v, counter %d; want token %d, the counter at it", d, err, counter(), ahead+13)
		}
		w.letGo(t, lc, rw, dl)
		// nothing goes back once another holding reserved since (two holdings of a semaphore)
		sl := cfg(t, "block-sem")
		sfence := processor.SharedKeys(sl)[5]
		if err := c.Set(ctx, sfence, ahead, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		al, bl := w.locker(), r.locker()
		if a, err := w.SharedTake(ctx, sl, sem3, processor.TakeRequest{Locker: al, N: 1, Tokens: 5}); err != nil || a.Token != ahead+1 {
			t.Fatalf("first holding = %+v, %v", a, err)
		}
		if b := r.take(t, sl, sem3, bl, 1, false); b.Token != ahead+6 {
			t.Fatalf("second holding = %+v; want token %d", b, ahead+6)
		}
		if o, err := w.SharedReleaseBlock(ctx, sl, sem3, al, ahead+1, ahead+5); err != nil || o.Outcome != processor.Released {
			t.Fatalf("release = %+v, %v", o, err)
		}
		if n, err := c.Get(ctx, sfence).Uint64(); err != nil || n != ahead+6 {
			t.Fatalf("counter %d, %v after a release behind a later holding; want %d", n, err, ahead+6)
		}
	})
}

// A refill waits for the replicas asked for, as a take does: without them it reports
// ErrNotReplicated (its block is not handed out); so does a plain renewal, as the mutex's
// does (WithReplicaAck promises every renewal: a holding counts its lease only from renewals
// a replica has). (One server, no replica: each WAIT finds none.)
func TestSharedRefillWaitsForReplicas(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "refill-ack")
		w := newProc(t, c, "W-")
		wl := w.locker()
		if got := w.take(t, lc, rw, wl, processor.RWPermits, true); got.Outcome != processor.Taken {
			t.Fatalf("take = %+v", got)
		}
		acked, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: true, Mark: "W-", Replicas: 1, ReplicaTimeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := acked.SharedRefill(ctx, lc, rw, wl, 4); !errors.Is(err, dlerrors.ErrNotReplicated) {
			t.Fatalf("refill without a replica: %v; want ErrNotReplicated", err)
		}
		if _, err := acked.SharedRenew(ctx, lc, rw, wl); !errors.Is(err, dlerrors.ErrNotReplicated) {
			t.Fatalf("renewal without a replica: %v; want ErrNotReplicated", err)
		}
	})
}

// A waiting process that listened on its channel when it renewed its line entry, and does not
// listen any more (its connection closed: it died, kill -9), is passed over and dropped: as
// the holder lets go, the process behind it is told and takes, rather than waiting for the
// dead entry to expire (a minute here). A read-write lock's dead writer before a reader, a
// semaphore's dead waiter for every permit before a waiter for one; on a Cluster client too,
// where processes listen by sharded pub/sub (SSUBSCRIBE). So too when requests of the dead
// process run after Redis dropped its subscription (on its way as it died, and a client's
// copies of it): each says the process counts itself heard (TakeRequest.Listening), or, sent
// before its subscription was confirmed, does not, while its entry says it listened; the entry
// counts only once the live process asks again, told Redis does not hear it.
func TestSharedLinePassesAProcessThatStoppedListening(t *testing.T) {
	for _, s := range []struct {
		name string
		spec processor.Shared
		all  int64 // what the holder holds and the dead process asks: every permit
	}{
		{"rw", rw, processor.RWPermits},
		{"sem", sem3, 3},
	} {
		t.Run(s.name, func(t *testing.T) {
			for late := range 3 {
				t.Run(fmt.Sprint("late asks ", late), func(t *testing.T) {
					backends(t, func(t *testing.T, c *redis.Client) { passesTheDead(t, c, s.spec, s.all, late) })
				})
			}
			t.Run("sharded", func(t *testing.T) {
				srv.NeedReal(t)
				cc := shardedClient()
				defer cc.Close()
				passesTheDead(t, cc, s.spec, s.all, 2)
			})
		})
	}
}

func passesTheDead(t *testing.T, c redis.UniversalClient, spec processor.Shared, all int64, late int) {
	x := deadAhead(t, c, spec, all, all)
	for i := range late {
		// (the first a copy sent before its subscription was confirmed: it says it does not
		// listen, and its entry, which said so, still counts it dead)
		r, err := x.d.SharedTake(context.Background(), x.lc, spec, processor.TakeRequest{Locker: x.ld, N: all, Wait: true, Listening: i > 0})
		if err != nil || r.Outcome != processor.Held || r.Heard {
			t.Fatalf("the dead D-'s late ask: %+v, %v; want held, not heard", r, err)
		}
	}
	if o := x.a.letGo(t, x.lc, spec, x.la); o != processor.Released {
		t.Fatalf("release: %v", o)
	}
	x.h.next("B-", "F")
	if r := x.b.take(t, x.lc, spec, x.lb, 1, true); r.Outcome != processor.Taken {
		t.Fatalf("B- past the dead D-: %+v", r)
	}
	if in, _ := x.a.SharedInspect(context.Background(), x.lc, spec); len(in.Waiting) != 0 {
		t.Fatalf("the dead process is still in line: %+v", in.Waiting)
	}
}

// deadLine is a line with a process in it that died: A- holds, D- (it listened) waits first in
// line, and B- (it listens, h hears it) waits for one permit behind it; D- has died as
// deadAhead returns (Redis counts no subscriber of its channel).
type deadLine struct {
	lc      domain.DLockConfig
	a, d, b *proc
	la, ld  string
	lb      string
	h       *hearer
}

// A force of a holding whose process died while it waited in line for more drops that
// process's entry too (Redis no longer hears it), before it tells the front of the line: the
// waiter behind it, whose permits the freed ones fit, is told at once, not passed over for the
// dead one (which asked for every permit).
func TestSharedForceDropsTheDeadOwnersEntry(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc, err := domain.NewDLockConfig("PROC", fresh("force-dead-"+t.Name()), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		d, b, op := newProc(t, c, "D-"), newProc(t, c, "B-"), newProc(t, c, "op-")
		held := d.locker()
		if r := d.take(t, lc, sem3, held, 3, true); r.Outcome != processor.Taken {
			t.Fatalf("D- takes 3: %+v", r)
		}
		dies := subscribe(t, c, processor.SharedChannel(lc, "D-"))
		if r, err := d.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: d.locker(), N: 3, Wait: true, Listening: true}); err != nil || r.Outcome != processor.Held || r.Rank != 0 || !r.Heard {
			t.Fatalf("D- (it listens) asks 3 more: %+v, %v; want held first in line, heard", r, err)
		}
		h := listen(t, c, lc, "B-")
		if r := b.take(t, lc, sem3, b.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("B- behind D-: %+v", r)
		}
		dies()
		if r, err := op.SharedForce(ctx, lc, sem3, held); err != nil || r.Outcome != processor.Released {
			t.Fatalf("force of D-'s holding: %+v, %v", r, err)
		}
		h.next("B-", "F")
		if in, _ := op.SharedInspect(ctx, lc, sem3); len(in.Waiting) != 1 || in.Waiting[0].Owner != "B-" {
			t.Fatalf("line after the force: %+v; want B- alone", in.Waiting)
		}
	})
}

// deadAhead makes a deadLine on a fresh lock of spec with a minute's lease: A- holds held
// permits, D- asks asked.
func deadAhead(t *testing.T, c redis.UniversalClient, spec processor.Shared, held, asked int64) deadLine {
	t.Helper()
	lc, err := domain.NewDLockConfig("PROC", fresh("dead-"+t.Name()), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	x := deadLine{lc: lc, a: newProc(t, c, "A-"), d: newProc(t, c, "D-"), b: newProc(t, c, "B-")}
	x.la, x.ld, x.lb = x.a.locker(), x.d.locker(), x.b.locker()
	if r := x.a.take(t, lc, spec, x.la, held, true); r.Outcome != processor.Taken {
		t.Fatalf("A- takes %d: %+v", held, r)
	}
	dies := subscribe(t, c, processor.SharedChannel(lc, "D-"))
	r, err := x.d.SharedTake(context.Background(), lc, spec, processor.TakeRequest{Locker: x.ld, N: asked, Wait: true, Listening: true})
	if err != nil || r.Outcome != processor.Held || r.Rank != 0 || !r.Heard {
		t.Fatalf("D- (it listens) asks %d: %+v, %v; want held first in line, heard", asked, r, err)
	}
	x.h = listen(t, c, lc, "B-")
	if r := x.b.take(t, lc, spec, x.lb, 1, true); r.Outcome != processor.Held || r.Rank != 1 {
		t.Fatalf("B- behind D-: %+v", r)
	}
	dies()
	return x
}

// subscribe listens on channel as a process does on c (by SSUBSCRIBE on a Cluster client) and
// returns what ends it: the listener closes, and Redis no longer counts it.
func subscribe(t *testing.T, c redis.UniversalClient, channel string) (closeIt func()) {
	t.Helper()
	ctx := context.Background()
	var ps *redis.PubSub
	if _, sharded := c.(*redis.ClusterClient); sharded {
		ps = c.SSubscribe(ctx, channel)
	} else {
		ps = c.Subscribe(ctx, channel)
	}
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		_ = ps.Close()
		waitForNoSubscriber(t, c, channel)
	}
}

// A live process whose subscription dropped (a reconnect) keeps its place in line as it asks
// again, though it looks dead to Redis until it listens again; once it asked without
// listening, it is judged by its renewals, as a process that does not listen is.
func TestSharedAProcessKeepsItsPlaceAsItAsks(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		x := deadAhead(t, c, sem3, 3, 3) // (D- lives: only its subscription dropped)
		if r := x.d.take(t, x.lc, sem3, x.ld, 3, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("D- asks again, its subscription dropped: %+v, want first in line still", r)
		}
		if r := x.b.take(t, x.lc, sem3, x.lb, 1, true); r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("B- asks after D- renewed its entry without listening: %+v, want behind D-", r)
		}
	})
}

// The process behind a dead one is told as the dead entry is dropped, by whatever request
// drops it (here the holder's renewal), when its permits fit without the dead one's: no
// release needs to come.
func TestSharedDroppingTheDeadTellsWhoIsBehind(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		x := deadAhead(t, c, sem3, 1, 3) // D- asks every permit beside a holding of one
		if r, err := x.a.SharedRenew(context.Background(), x.lc, sem3, x.la); err != nil || r.Outcome != processor.Renewed {
			t.Fatalf("renewal: %+v %v", r, err)
		}
		x.h.next("B-", "F")
		if r := x.b.take(t, x.lc, sem3, x.lb, 1, true); r.Outcome != processor.Taken {
			t.Fatalf("B- told: %+v", r)
		}
	})
}

// State lists the live waiters only: not an entry whose process died (it listened and does not
// now), nor one that expired, though no request dropped them yet.
func TestSharedInspectHidesTheDead(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		x := deadAhead(t, c, sem3, 3, 2)
		lcShort, err := x.lc.WithLease(150 * time.Millisecond) // X-'s entry: it runs out
		if err != nil {
			t.Fatal(err)
		}
		newProc(t, c, "X-").take(t, lcShort, sem3, "X-1", 1, true)
		time.Sleep(processor.EntryTTL(lcShort) + 100*time.Millisecond)
		in, err := x.a.SharedInspect(context.Background(), x.lc, sem3)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Waiting) != 1 || in.Waiting[0].Owner != "B-" {
			t.Fatalf("line %+v, want B- alone (D- died, X-'s entry ran out)", in.Waiting)
		}
	})
}

// A process that does not listen on its channel (notifications off) keeps its place in line
// while it renews its entry (it asks every sixth of its lease), however long it waits; once it
// has not renewed it for more than a third of its lease, the process behind it passes it, and
// it keeps its place. An entry without what Redis heard of its process (written by a version
// before it) counts until it expires, however old, as that version counts it.
func TestSharedLineJudgesAProcessThatDoesNotListenByItsRenewals(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lease := 1500 * time.Millisecond // an entry lives 2 s; renewed within 500 ms it counts
		quiet, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: false, Mark: "Q-"})
		if err != nil {
			t.Fatal(err)
		}
		a, q, b := newProc(t, c, "A-"), &proc{RedisLockProcessor: quiet, mark: "Q-"}, newProc(t, c, "B-")
		setUp := func(name string) (lc domain.DLockConfig, la, lq, lb string) {
			t.Helper()
			lc, err := domain.NewDLockConfig("PROC", fresh(name+"-"+t.Name()), lease)
			if err != nil {
				t.Fatal(err)
			}
			la, lq, lb = a.locker(), q.locker(), b.locker()
			a.take(t, lc, sem3, la, 3, true)
			if r := q.take(t, lc, sem3, lq, 3, true); r.Outcome != processor.Held || r.Rank != 0 {
				t.Fatalf("Q-: %+v", r)
			}
			if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held || r.Rank != 1 {
				t.Fatalf("B- behind Q-: %+v", r)
			}
			return lc, la, lq, lb
		}

		// Q- renews its entry at its pace for longer than a third of its lease
		lc, la, lq, lb := setUp("renews")
		var renewed time.Time
		for end := time.Now().Add(lease / 2); time.Now().Before(end); {
			time.Sleep(lease / 10)
			renewed = time.Now()
			if r := q.take(t, lc, sem3, lq, 3, true); r.Outcome != processor.Held || r.Rank != 0 {
				t.Fatalf("Q- renews: %+v", r)
			}
		}
		a.letGo(t, lc, sem3, la)
		if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held {
			if since := time.Since(renewed); since > lease/3 {
				t.Skipf("B- asked %v after Q- last renewed its entry, past a third of its lease (a stall of the machine): %+v", since.Round(time.Millisecond), r)
			}
			t.Fatalf("B- passed Q-, which renews its entry: %+v", r)
		}
		if r := q.take(t, lc, sem3, lq, 3, true); r.Outcome != processor.Taken {
			t.Fatalf("Q- first in line: %+v", r)
		}

		// Q- stops renewing (it died): passed over, though its entry is alive
		lc, la, lq, lb = setUp("stale")
		time.Sleep(lease/3 + 100*time.Millisecond)
		h := listen(t, c, lc, "B-")
		if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("B- renews its entry, listening: %+v", r)
		}
		a.letGo(t, lc, sem3, la)
		h.next("B-", "F") // (told past Q-)
		if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Taken || r.Waiting {
			t.Fatalf("B- behind Q-, which stopped renewing (and is not waited for): %+v", r)
		}
		if err := c.ZScore(ctx, processor.SharedKeys(lc)[2], "Q-").Err(); err != nil {
			t.Fatalf("Q-'s place in line: %v, want it kept", err)
		}
		if in, _ := a.SharedInspect(ctx, lc, sem3); len(in.Waiting) != 0 {
			t.Fatalf("line %+v, want Q- left out (a release passes it over)", in.Waiting)
		}
		b.letGo(t, lc, sem3, lb)
		if r := q.take(t, lc, sem3, lq, 3, true); r.Outcome != processor.Taken {
			t.Fatalf("Q- asks again: %+v", r)
		}

		// the entry of a version before the facts: counted however old
		lc, err = domain.NewDLockConfig("PROC", fresh("before-"+t.Name()), lease)
		if err != nil {
			t.Fatal(err)
		}
		keys := processor.SharedKeys(lc)
		la, lb = a.locker(), b.locker()
		a.take(t, lc, sem3, la, 3, true)
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		c.ZAdd(ctx, keys[2], redis.Z{Score: float64(now.UnixMicro()), Member: "O-"})
		c.HSet(ctx, keys[3], "O-", fmt.Sprintf("3|%d|O-1", now.UnixMilli()+10_000))
		if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("B- behind O-: %+v", r)
		}
		time.Sleep(lease/3 + 100*time.Millisecond)
		a.letGo(t, lc, sem3, la)
		if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held {
			t.Fatalf("B- passed the entry of a version before the facts: %+v", r)
		}
	})
}

// An entry of a process that does not listen counts through the very millisecond a third of
// its lease after it was renewed (within a third of its lease, counts): at that millisecond it
// still holds off a process behind it, and an inspection shows it; from the next it is passed
// over. (On miniredis, whose clock the test stops.)
func TestSharedUnheardEntryCountsThroughAThirdOfItsLease(t *testing.T) {
	c, tick := stoppedClock(t)
	ctx := context.Background()
	lc, err := domain.NewDLockConfig("PROC", fresh("third-"+t.Name()), 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	long, _ := lc.WithLease(20 * time.Second)
	quiet, err := processor.NewRedisLockProcessor(c, processor.Options{Publish: false, Mark: "Q-"})
	if err != nil {
		t.Fatal(err)
	}
	a, q, b := newProc(t, c, "A-"), &proc{RedisLockProcessor: quiet, mark: "Q-"}, newProc(t, c, "B-")
	listen(t, c, lc, "B-") // (B- listens: its own entry counts throughout)
	la := a.locker()
	if r := a.take(t, long, sem3, la, 3, true); r.Outcome != processor.Taken {
		t.Fatalf("3 of 3: %+v", r)
	}
	if r := q.take(t, lc, sem3, q.locker(), 3, true); r.Outcome != processor.Held || r.Rank != 0 {
		t.Fatalf("Q-: %+v", r)
	}
	tick(time.Millisecond) // (B- joins the line after Q-)
	lb := b.locker()
	if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held || r.Rank != 1 {
		t.Fatalf("B- behind Q-: %+v", r)
	}
	tick(499 * time.Millisecond) // exactly a third of Q-'s lease since it renewed its entry
	a.letGo(t, long, sem3, la)
	if in, err := b.SharedInspect(ctx, lc, sem3); err != nil || len(in.Waiting) != 2 || in.Waiting[0].Owner != "Q-" {
		t.Fatalf("inspection a third of Q-'s lease after its renewal = %+v, %v; want Q- first in line", in, err)
	}
	if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held {
		t.Fatalf("B- a third of Q-'s lease after Q- renewed: %+v; want held behind Q-", r)
	}
	tick(time.Millisecond)
	if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Taken {
		t.Fatalf("B- a millisecond later: %+v; want Q- passed over", r)
	}
}

// A lowered count tells F to each process in line that asks for more than the new count (it
// asks at once and is refused), and to no one else: not to one in line whose permits still
// can fit, and not again when the count is set to what it is.
func TestSharedLoweredPermitsTellOnlyWhoAsksForMore(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "lowertells")
	a, b, d := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
	h := listen(t, c, lc, "B-", "C-")
	a.take(t, lc, sem3, a.locker(), 1, true)
	if r := b.take(t, lc, sem3, b.locker(), 3, true); r.Outcome != processor.Held {
		t.Fatalf("B asking 3 beside 1 of 3 held: %+v", r)
	}
	if r := d.take(t, lc, sem3, d.locker(), 2, true); r.Outcome != processor.Held {
		t.Fatalf("C asking 2 behind B: %+v", r)
	}
	h.quiet("B-")
	h.quiet("C-")
	if err := a.SetPermits(context.Background(), lc, 2); err != nil {
		t.Fatal(err)
	}
	h.next("B-", "F")
	h.quiet("C-")
	if err := a.SetPermits(context.Background(), lc, 2); err != nil {
		t.Fatal(err)
	}
	h.quiet("B-")
}

// A holding an operator forced away stays settled as long as one that ran out does: until
// KEPT, the latest a copy of a take or renewal that ran may still come by its own process's
// mark life — not only the operator's mark life or eight times the lease it had left (the
// operator's lease may be far shorter than the holder's). A copy of its take 2.8 s after it
// was sent (the holder's mark life 4 s, the operator's 400 ms, forced with 100 ms left) is
// refused, as it is when the holding ran out.
func TestSharedForcedHoldingStaysSettledForItsOwnMarkLife(t *testing.T) {
	for _, force := range []bool{false, true} {
		name := "expired"
		if force {
			name = "forced"
		}
		t.Run(name, func(t *testing.T) {
			c, tick := stoppedClock(t)
			ctx := context.Background()
			base := cfg(t, "forcekept")
			long, _ := base.WithLease(2 * time.Second)         // the holder's: mark life 4 s
			short, _ := base.WithLease(200 * time.Millisecond) // the operator's: mark life 400 ms
			sem1 := processor.Shared{Kind: processor.KindSem, Permits: 1}
			a, op := newProc(t, c, "A-"), newProc(t, c, "OP-")
			la := a.locker()
			take := processor.TakeRequest{Locker: la, N: 1}
			if r, err := a.SharedTake(ctx, long, sem1, take); err != nil || r.Outcome != processor.Taken {
				t.Fatalf("A's take: %+v, %v", r, err)
			}
			tick(long.Lease() - 100*time.Millisecond) // A paused: 100 ms of its lease left
			if force {
				if r, err := op.SharedForce(ctx, short, sem1, la); err != nil || r.Outcome != processor.Released {
					t.Fatalf("force = %+v, %v", r, err)
				}
			}
			tick(900 * time.Millisecond) // 2.8 s after the take: within A's mark life (4 s) of its send
			r, err := a.SharedTake(ctx, long, sem1, take)
			if err != nil || r.Outcome != processor.Settled {
				t.Fatalf("a copy of A's take, 2.8 s after it was sent (A's mark life 4 s) = %+v, %v; want settled", r, err)
			}
		})
	}
}

// The same on the real server, with real time: A's holding (10 s lease, 20 s mark life) is
// made to run out 1 s from now by the server's clock (A paused 9 s, as if) and forced at once by
// an operator whose lease is 200 ms (mark life 400 ms), which settles it for eight times the
// second at most left of its lease, not for A's mark life; a copy of A's take that comes a
// second after those 8 s (about 9 s after the take was sent, within A's mark life) is refused.
// (The force has the second left to come while the holding lives, the copy a second after what
// the operator's force settles on its own and some 10 s before A's mark life ends.)
func TestSharedForcedHoldingStaysSettledForItsOwnMarkLifeOnTheServer(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	base := cfg(t, "forcekeptsrv")
	long, _ := base.WithLease(10 * time.Second)
	short, _ := base.WithLease(200 * time.Millisecond)
	sem1 := processor.Shared{Kind: processor.KindSem, Permits: 1}
	a, op := newProc(t, c, "A-"), newProc(t, c, "OP-")
	la := a.locker()
	take := processor.TakeRequest{Locker: la, N: 1}
	sent := time.Now()
	if r, err := a.SharedTake(ctx, long, sem1, take); err != nil || r.Outcome != processor.Taken {
		t.Fatalf("A's take: %+v, %v", r, err)
	}
	const left = time.Second // of A's lease, as the force comes
	if changed, err := c.Eval(ctx, `local now = redis.call('time')
return redis.call('zadd', KEYS[1], 'XX', 'CH', string.format('%.0f', now[1] * 1000 + math.floor(now[2] / 1000) + tonumber(ARGV[2])), ARGV[1])`,
		[]string{processor.SharedKeys(long)[1]}, la, left.Milliseconds()).Int(); err != nil || changed != 1 {
		t.Fatalf("moving A's expiry: %v, %v; want 1 (its holding's expiry changed)", changed, err)
	}
	if r, err := op.SharedForce(ctx, short, sem1, la); err != nil || r.Outcome != processor.Released {
		t.Fatalf("force = %+v, %v", r, err)
	}
	time.Sleep(8*left + time.Second) // past the 8 s at most the force settles A's holding for on its own
	if r, err := a.SharedTake(ctx, long, sem1, take); err != nil || r.Outcome != processor.Settled {
		t.Fatalf("a copy of A's forced take, %v after it was sent (A's mark life %v) = %+v, %v; want settled", time.Since(sent).Round(time.Millisecond), a.MarkLife(long), r, err)
	}
}

// A release names the token of the holding it lets go, as a renewal does: after an empty
// restart, a late copy of the holder's take that took its permit anew (another process held it
// in between) is let go, and the release answers Gone — the loss its Unlock must report, not
// a silent success.
func TestSharedReleaseOfAHoldingTakenAnewIsALoss(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "shrelorigin")
		sem1 := processor.Shared{Kind: processor.KindSem, Permits: 1}
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		la := a.locker()
		take := processor.TakeRequest{Locker: la, N: 1}
		first, err := a.SharedTake(ctx, lc, sem1, take)
		if err != nil || first.Outcome != processor.Taken {
			t.Fatalf("A's take: %+v, %v", first, err)
		}
		wipeKeys(t, c, lc) // Redis restarts empty
		lb := b.locker()
		if r := b.take(t, lc, sem1, lb, 1, false); r.Outcome != processor.Taken {
			t.Fatalf("B after the restart: %+v", r)
		}
		b.letGo(t, lc, sem1, lb)
		if r, err := a.SharedTake(ctx, lc, sem1, take); err != nil || r.Outcome != processor.Taken || r.Token == first.Token {
			t.Fatalf("the late copy of A's take: %+v, %v; want taken anew", r, err)
		}
		if r, err := a.SharedReleaseOf(ctx, lc, sem1, la, first.Token, 0, 0); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("A's release (naming its take's token) of a holding wiped and taken anew by a late copy (B held in between) = %+v, %v; want gone, as its renewal answers", r, err)
		}
		if r, err := a.SharedReleaseOf(ctx, lc, sem1, la, first.Token, 0, 0); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("a copy of that release = %+v, %v; want gone, as the first (settled would read as let go)", r, err)
		}
		// and the permit the late copy took is let go: another process takes it
		if r := b.take(t, lc, sem1, b.locker(), 1, false); r.Outcome != processor.Taken {
			t.Fatalf("B after A's release answered gone: %+v, want the permit", r)
		}
	})
}

// A holding that an empty restart wiped, whose take's late copy is then refused (it does not
// fit, it is older than the attempt its process waits with, its count was lowered, or it stood
// in line and a newer attempt took its place), is a loss its release must tell: the refusal
// settles the locker, and a settled release reads as let go by an earlier copy of itself — the
// holder's Unlock would say nil though others held the permit meanwhile. Found by the family
// explorer's rule restart told (seed 754 of the read-write lock's shape, 278 of the
// semaphore's), once a release's first settled answer counted too.
func TestSharedReleaseOfAHoldingWhoseLateTakeWasRefusedIsALoss(t *testing.T) {
	for _, way := range []string{"try that does not fit", "stale copy", "downgrade of a holding gone", "more than the count", "replaced in line"} {
		t.Run(way, func(t *testing.T) {
			backends(t, func(t *testing.T, c *redis.Client) {
				ctx := context.Background()
				lc := cfg(t, "shrefused")
				sem := processor.Shared{Kind: processor.KindSem, Permits: 2}
				a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
				la := a.locker()
				take := processor.TakeRequest{Locker: la, N: 2, Wait: way != "try that does not fit"}
				if way == "downgrade of a holding gone" { // (the holding the release names is the downgrade's)
					held := a.take(t, lc, sem, la, 2, false)
					take = processor.TakeRequest{Locker: a.locker(), N: 1, Replaces: la, Origin: held.Token}
					la = take.Locker
				}
				first, err := a.SharedTake(ctx, lc, sem, take)
				if err != nil || first.Outcome != processor.Taken {
					t.Fatalf("A's take: %+v, %v", first, err)
				}
				wipeKeys(t, c, lc) // Redis restarts empty
				if r := b.take(t, lc, sem, b.locker(), 1, false); r.Outcome != processor.Taken {
					t.Fatalf("B after the restart: %+v", r)
				}
				switch way {
				case "stale copy":
					if r := a.take(t, lc, sem, a.locker(), 2, true); r.Outcome != processor.Held {
						t.Fatalf("A's newer attempt: %+v, want in line", r)
					}
				case "more than the count":
					if changed, _, err := b.ChangePermits(ctx, lc, "", 2, 1); err != nil || !changed {
						t.Fatalf("the count lowered to 1: %v, %v", changed, err)
					}
				}
				late, err := a.SharedTake(ctx, lc, sem, take)
				switch {
				case way == "more than the count":
					if err == nil {
						t.Fatalf("the late copy of A's take of 2 under a count of 1: %+v, want refused", late)
					}
				case err != nil:
					t.Fatal(err)
				case way == "replaced in line":
					if late.Outcome != processor.Held {
						t.Fatalf("the late copy of A's take: %+v, want in line (B holds a permit)", late)
					}
					if r := a.take(t, lc, sem, a.locker(), 2, true); r.Outcome != processor.Held {
						t.Fatalf("A's newer attempt: %+v, want in line in the late copy's place", r)
					}
				case late.Outcome == processor.Taken:
					t.Fatalf("the late copy of A's take: %+v, want refused", late)
				}
				for _, copy := range []string{"A's release (naming its take's token)", "a copy of it"} {
					if r, err := a.SharedReleaseOf(ctx, lc, sem, la, first.Token, 0, 0); err != nil || r.Outcome != processor.Gone {
						t.Fatalf("%s of a holding an empty restart wiped, its take's late copy refused since = %+v, %v; want gone (settled reads as let go)", copy, r, err)
					}
				}
			})
		})
	}
}

// Close lets go of a holding whose downgrade's answer was lost: the holding's release finds it
// replaced, and the downgrade's locker is let go next without its token (dlock's settle, its
// downTo). When an empty restart wiped the downgrade's holding between the two, that release
// answers gone, and so must a copy of it (its reply lost, sent again): settled would read as
// let go by the first copy, and Close would hide the loss. (Found by a review, 2026-12-06.)
func TestSharedReleaseWithoutOriginOfAHoldingAnEmptyRestartWipedAnswersGoneEveryCopy(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "shdownlost")
		sem := processor.Shared{Kind: processor.KindSem, Permits: 2}
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		la := a.locker()
		held := a.take(t, lc, sem, la, 2, false)
		d := a.locker()
		down, err := a.SharedTake(ctx, lc, sem, processor.TakeRequest{Locker: d, N: 1, Replaces: la, Origin: held.Token})
		if err != nil || down.Outcome != processor.Taken {
			t.Fatalf("the downgrade: %+v, %v", down, err)
		} // (its answer lost: the process still counts la, to be replaced by d)
		if r, err := a.SharedReleaseOf(ctx, lc, sem, la, held.Token, 0, 0); err != nil || r.Outcome != processor.Settled || !r.Replaced {
			t.Fatalf("the release of the holding the downgrade replaced: %+v, %v; want settled, replaced", r, err)
		}
		wipeKeys(t, c, lc) // Redis restarts empty
		if r := b.take(t, lc, sem, b.locker(), 2, false); r.Outcome != processor.Taken {
			t.Fatalf("B after the restart: %+v", r)
		}
		for _, copy := range []string{"the release of the downgrade's locker (its token unknown)", "a copy of it"} {
			if r, err := a.SharedReleaseOf(ctx, lc, sem, d, 0, 0, 0); err != nil || r.Outcome != processor.Gone {
				t.Fatalf("%s = %+v, %v; want gone", copy, r, err)
			}
		}
	})
}

// No refusal makes a holding that Redis kept until its release look lost: its release
// answers released and a copy of it settled, whatever takes were refused around it — copies of
// its own take before and after the release, a try that does not fit, a stale copy, an attempt
// replaced in line, a take of more than a lowered count — for a downgrade's holding, a holding
// under a lowered count, and a release that stands in line again (a refused take marks its
// locker forced only when nothing settled it: it never held, or Redis lost it).
func TestSharedRefusalsNeverMakeAKeptHoldingsReleaseAnswerGone(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		sem := processor.Shared{Kind: processor.KindSem, Permits: 3}
		take := func(t *testing.T, p *proc, lc domain.DLockConfig, req processor.TakeRequest) processor.SharedResult {
			t.Helper()
			r, err := p.SharedTake(ctx, lc, sem, req)
			if err != nil {
				t.Fatalf("%+v: %v", req, err)
			}
			return r
		}
		release := func(t *testing.T, p *proc, lc domain.DLockConfig, l string, tok uint64) {
			t.Helper()
			for i, want := range []processor.Outcome{processor.Released, processor.Settled} {
				if r, err := p.SharedReleaseOf(ctx, lc, sem, l, tok, 0, 0); err != nil || r.Outcome != want {
					t.Fatalf("release %d of %s: %+v, %v; want %v", i+1, l, r, err, want)
				}
			}
		}
		t.Run("a downgrade's holding", func(t *testing.T) {
			lc := cfg(t, "shkeptdown")
			a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
			la := a.locker()
			h := a.take(t, lc, sem, la, 2, false)
			req := processor.TakeRequest{Locker: a.locker(), N: 1, Replaces: la, Origin: h.Token}
			first, again := take(t, a, lc, req), take(t, a, lc, req)
			if first.Outcome != processor.Taken || again.Token != first.Token {
				t.Fatalf("the downgrade and its copy: %+v, %+v", first, again)
			}
			b.take(t, lc, sem, b.locker(), 2, false)
			if r := a.take(t, lc, sem, a.locker(), 3, true); r.Outcome != processor.Held {
				t.Fatalf("A's newer attempt: %+v, want in line", r)
			}
			a.take(t, lc, sem, la, 2, true)  // a stale copy of the replaced holding's take
			a.take(t, lc, sem, la, 2, false) // and a try's
			take(t, a, lc, req)              // a copy of the downgrade
			release(t, a, lc, req.Locker, first.Token)
			take(t, a, lc, req) // a copy of the downgrade after its release
			if r, err := a.SharedReleaseOf(ctx, lc, sem, req.Locker, first.Token, 0, 0); err != nil || r.Outcome != processor.Settled {
				t.Fatalf("a late copy of the release: %+v, %v; want settled", r, err)
			}
		})
		t.Run("a holding under a lowered count", func(t *testing.T) {
			lc := cfg(t, "shkeptcount")
			a := newProc(t, c, "A-")
			la := a.locker()
			h := a.take(t, lc, sem, la, 2, true)
			if changed, _, err := a.ChangePermits(ctx, lc, "", 3, 1); err != nil || !changed {
				t.Fatalf("the count lowered to 1: %v, %v", changed, err)
			}
			if r := a.take(t, lc, sem, la, 2, true); r.Outcome != processor.Taken || r.Token != h.Token {
				t.Fatalf("a copy of the take under the lowered count: %+v, want its holding", r)
			}
			if r, err := a.SharedTake(ctx, lc, sem, processor.TakeRequest{Locker: a.locker(), N: 2, Wait: true}); err == nil {
				t.Fatalf("a take of more than the count: %+v, want refused", r)
			}
			release(t, a, lc, la, h.Token)
		})
		t.Run("a release that stands in line again", func(t *testing.T) {
			lc := cfg(t, "shkeptrelock")
			a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
			la := a.locker()
			h := a.take(t, lc, sem, la, 2, false)
			b.take(t, lc, sem, b.locker(), 1, false)
			next := processor.TakeRequest{Locker: a.locker(), N: 3}
			r, err := a.SharedReleaseThenTake(ctx, lc, sem, la, h.Token, 0, 0, next)
			if err != nil || r.Let != processor.Released || r.Outcome != processor.Held {
				t.Fatalf("the release, then the take in line: %+v, %v", r, err)
			}
			a.take(t, lc, sem, a.locker(), 3, true) // takes the next attempt's place in line
			r, err = a.SharedReleaseThenTake(ctx, lc, sem, la, h.Token, 0, 0, next)
			if err != nil || r.Let != processor.Settled {
				t.Fatalf("a copy of the pair: %+v, %v; want the release settled", r, err)
			}
		})
	})
}

// A late copy of a waiting take of an attempt its process gave up — the process waits in line
// with a newer attempt, the give-back of the old one not run yet (a release that failed goes
// after any take due) — is refused, as lock.lua refuses a copy older than its process's entry:
// it must not take the newer attempt's place in line, settling it (the process's next ask
// answers settled), nor take the process out of line as the old attempt's give-back runs
// (the process would stand in line again at the end, behind those that came after it).
// Found by the family explorer's rule kept in line (seed 263 of the semaphore's default shape).
func TestSharedStaleCopyOfAnOlderTakeKeepsTheLine(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "shstale")
		sem1 := processor.Shared{Kind: processor.KindSem, Permits: 1}
		a, b, h := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "H-")
		if r := h.take(t, lc, sem1, h.locker(), 1, false); r.Outcome != processor.Taken {
			t.Fatalf("H's take: %+v", r)
		}
		old := a.locker() // A's first attempt: its take is on its way, unanswered; A gives it up
		newer := a.locker()
		if r := a.take(t, lc, sem1, newer, 1, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("A's newer attempt: %+v, want first in line", r)
		}
		if r := b.take(t, lc, sem1, b.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("B asks after A: %+v, want behind A", r)
		}
		if r := a.take(t, lc, sem1, old, 1, true); r.Outcome != processor.Settled {
			t.Errorf("the late copy of A's given-up attempt's take, A in line with a newer one: %+v, want settled (stale)", r)
		}
		if o := a.letGo(t, lc, sem1, old); o == processor.Released {
			t.Errorf("the give-back of A's old attempt: %v, want nothing let go", o)
		}
		in, err := a.SharedInspect(context.Background(), lc, sem1)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Waiting) != 2 || in.Waiting[0].Owner != "A-" || in.Waiting[1].Owner != "B-" {
			t.Errorf("the line after the give-back of A's old attempt: %+v, want A- then B-", in.Waiting)
		}
		if r := a.take(t, lc, sem1, newer, 1, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Errorf("A asks again with the attempt it waits with: %+v, want held, first in line", r)
		}
	})
}

// stoppedClock returns a client of a miniredis whose clock stands still until tick moves it on
// by d (TIME and key expiries alike), for checks at an exact millisecond; both end with t.
func stoppedClock(t *testing.T) (c *redis.Client, tick func(d time.Duration)) {
	m := miniredis.RunT(t)
	now := time.UnixMilli(1_800_000_000_000)
	m.SetTime(now)
	c = redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return c, func(d time.Duration) { now = now.Add(d); m.SetTime(now); m.FastForward(d) }
}

// The lock family's counterpart of TestGrantToAProcessRedisCannotCountHeedsNoClaim: a user
// not allowed PUBSUB NUMSUB, whose takes say the process counts itself heard, stands in line
// as a process without notifications (live: it asked just now), not as one that died.
func TestSharedLineRedisCannotCountHeedsNoClaim(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	c := srv.Client()
	defer c.Close()
	user := "nonumsubsh" + strconv.FormatInt(runs.Add(1), 10)
	if err := c.Do(ctx, "acl", "setuser", user, "on", ">pw", "~*", "&*", "+@all", "-pubsub|numsub").Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Do(ctx, "acl", "deluser", user)
	uc := redis.NewClient(&redis.Options{Addr: c.Options().Addr, Username: user, Password: "pw"})
	defer uc.Close()
	a, d, b := newProc(t, c, "A-"), newProc(t, uc, "D-"), newProc(t, c, "B-")
	lc, _ := domain.NewDLockConfig("PROC", fresh("nonumsubsh-"+t.Name()), time.Minute)
	la, ld, lb := a.locker(), d.locker(), b.locker()
	if r := a.take(t, lc, sem3, la, 3, true); r.Outcome != processor.Taken {
		t.Fatalf("A- takes 3: %+v", r)
	}
	for range 2 {
		r, err := d.SharedTake(ctx, lc, sem3, processor.TakeRequest{Locker: ld, N: 3, Wait: true, Listening: true})
		if err != nil || r.Outcome != processor.Held || r.Rank != 0 || r.Heard {
			t.Fatalf("D- asks 3: %+v, %v; want held first in line, not heard (Redis cannot tell)", r, err)
		}
	}
	if o := a.letGo(t, lc, sem3, la); o != processor.Released {
		t.Fatalf("release: %v", o)
	}
	// D- is live (it asked just now) and asks every permit: B- does not go before it.
	if r := b.take(t, lc, sem3, lb, 1, true); r.Outcome != processor.Held {
		t.Fatalf("B- took a permit past D-, which asked just now: %+v (D-'s entry counts as renewed long ago: its claim was not ignored)", r)
	}
}

// lineOf returns the owners in a shared lock's line, first first.
func lineOf(t *testing.T, p *proc, lc domain.DLockConfig, s processor.Shared) []string {
	t.Helper()
	in, err := p.SharedInspect(context.Background(), lc, s)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, w := range in.Waiting {
		out = append(out, w.Owner)
	}
	return out
}

// A take of a process that fits (a try of another of its goroutines) leaves the attempt the
// process waits with in line, in its place: only the take's own entry is dropped.
func TestSharedTakeThatFitsKeepsItsProcesssOtherAttemptInLine(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "keepother")
		a, b, cp := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "C-")
		b.take(t, lc, sem3, b.locker(), 2, true)
		a2 := a.locker()
		if r := a.take(t, lc, sem3, a2, 2, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("A's attempt of 2: %+v", r)
		}
		if r := cp.take(t, lc, sem3, cp.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 1 {
			t.Fatalf("C behind A: %+v", r)
		}
		if r := a.take(t, lc, sem3, a.locker(), 1, false); r.Outcome != processor.Taken {
			t.Fatalf("A's try of the one permit left: %+v", r)
		}
		if got := lineOf(t, a, lc, sem3); len(got) != 2 || got[0] != "A-" || got[1] != "C-" {
			t.Fatalf("line after A's try: %v, want [A- C-] (A's attempt keeps its place)", got)
		}
	})
}

// A take that asks for more than a lowered count (refused, -3) leaves the attempt its process
// waits with (another locker) in line.
func TestSharedTakeOverALoweredCountKeepsItsProcesssOtherAttemptInLine(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "overother")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		b.take(t, lc, sem3, b.locker(), 2, true)
		if err := b.SetPermits(context.Background(), lc, 2); err != nil {
			t.Fatal(err)
		}
		if r := a.take(t, lc, sem3, a.locker(), 1, true); r.Outcome != processor.Held || r.Rank != 0 {
			t.Fatalf("A's attempt of 1: %+v", r)
		}
		if _, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: a.locker(), N: 3}); err == nil {
			t.Fatal("3 permits of 2 taken")
		}
		if got := lineOf(t, a, lc, sem3); len(got) != 1 || got[0] != "A-" {
			t.Fatalf("line after A's refused take: %v, want [A-]", got)
		}
	})
}

// A take that does not fit says how long until the first holding expires (the soonest), not
// the last: a waiter paces its asks by it, and a holder that dies frees its permits then.
func TestSharedLifeIsTheFirstHoldingsToExpire(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		base := cfg(t, "life")
		short, _ := base.WithLease(time.Second)
		long, _ := base.WithLease(20 * time.Second)
		a, b, w := newProc(t, c, "A-"), newProc(t, c, "B-"), newProc(t, c, "W-")
		b.take(t, long, sem3, b.locker(), 2, true)
		a.take(t, short, sem3, a.locker(), 1, true)
		r := w.take(t, short, sem3, w.locker(), 1, true)
		if r.Outcome != processor.Held || r.Life <= 0 || r.Life > time.Second {
			t.Fatalf("a fourth permit: %+v, want life within the short lease", r)
		}
	})
}

// A process that stands in line for more permits beside its own holdings is not told to give
// back (W): the line's only other process is itself.
func TestSharedStandingInLineTellsOnlyOtherHolders(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "selfw")
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	h := listen(t, c, lc, "A-", "B-")
	a.take(t, lc, sem3, a.locker(), 1, true)
	b.take(t, lc, sem3, b.locker(), 1, true)
	if r := a.take(t, lc, sem3, a.locker(), 2, true); r.Outcome != processor.Held {
		t.Fatalf("A's attempt of 2 more: %+v", r)
	}
	h.next("B-", "W")
	h.quiet("A-")
}

// A change that names the count it changes applies to a lock that keeps no count (nobody used
// it, or its keys ran out): Redis keeps none, so from is not compared.
func TestSharedPermitsChangeAppliesToALockThatKeepsNoCount(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "nocount")
		a := newProc(t, c, "A-")
		if changed, now, err := a.ChangePermits(ctx, lc, "", 3, 5); err != nil || !changed {
			t.Fatalf("3 -> 5 on a lock that keeps no count: changed %v, Redis keeps %d, %v", changed, now, err)
		}
		in, err := a.SharedInspect(ctx, lc, sem3)
		if err != nil || in.Permits != 5 || !in.Stored {
			t.Fatalf("after 3 -> 5: %+v, %v", in, err)
		}
	})
}

// A process that asks again from its place in line tells the holders nothing again: they were
// told (W) as it joined the line.
func TestSharedAskingAgainInLineTellsTheHoldersOnce(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	lc := cfg(t, "wonce")
	a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
	h := listen(t, c, lc, "A-")
	a.take(t, lc, sem3, a.locker(), 3, true)
	bl := b.locker()
	if r := b.take(t, lc, sem3, bl, 1, true); r.Outcome != processor.Held {
		t.Fatalf("B's attempt: %+v", r)
	}
	h.next("A-", "W")
	if r := b.take(t, lc, sem3, bl, 1, true); r.Outcome != processor.Held || r.Rank != 0 {
		t.Fatalf("B's attempt asked again: %+v", r)
	}
	h.quiet("A-")
}
