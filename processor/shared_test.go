package processor_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
		b.take(t, lc, sem3, b.locker(), 3, true)
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
	if r, _ := a.SharedRenew(context.Background(), lc, sem3, l); r.Outcome != processor.Settled {
		t.Fatalf("renewal of an expired holding: %+v", r)
	}
	if r := a.take(t, lc, sem3, l, 1, true); r.Outcome != processor.Settled {
		t.Fatalf("a late take of an expired holding: %+v", r)
	}
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
	hold := a.locker()
	a.take(t, lc, sem3, hold, 3, true)
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

// A take may replace only a holding of its own process: one naming another's is settled and
// takes nothing.
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
	})
}

// A take that replaces a holding of its own skips the line only when it shrinks it: one that
// grows it waits behind the processes in line like any other.
func TestSharedReplacingTakeSkipsTheLineOnlyToShrink(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		lc := cfg(t, "grow")
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		al := a.locker()
		a.take(t, lc, sem3, al, 1, true)
		if r := b.take(t, lc, sem3, b.locker(), 3, true); r.Outcome != processor.Held {
			t.Fatalf("3 beside 1: %+v", r)
		}
		r, err := a.SharedTake(context.Background(), lc, sem3, processor.TakeRequest{Locker: a.locker(), N: 2, Wait: true, Replaces: al})
		if err != nil || r.Outcome != processor.Held {
			t.Fatalf("growing 1 to 2 past a process in line: %+v %v", r, err)
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
		if r, err := op.SharedForce(ctx, short, sem3, la); err != nil || r.Outcome != processor.Released {
			t.Fatalf("force = %+v, %v", r, err)
		}
		hear, cancel := context.WithTimeout(ctx, 10*time.Second) // (a hang made a failure)
		defer cancel()
		if m, err := sub.ReceiveMessage(hear); err != nil || m.Payload != "F" {
			t.Fatalf("the first in line heard %v, %v; want F", m, err)
		}
		if r, err := op.SharedForce(ctx, short, sem3, la); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("force again = %+v, %v", r, err)
		}
		// the removed holder's renewal and a late copy of its take find it settled ...
		if r, _ := a.SharedRenew(ctx, long, sem3, la); r.Outcome != processor.Settled {
			t.Fatalf("the removed holder's renewal: %+v", r)
		}
		if r := a.take(t, long, sem3, la, 3, true); r.Outcome != processor.Settled {
			t.Fatalf("a late copy of the removed holder's take: %+v", r)
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
		if _, err := op.SharedForce(ctx, short, rw, lb); !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("a read-write lock's force on a semaphore: %v", err)
		}
	})
}
