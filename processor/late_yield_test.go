package processor_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/processor"
)

// A yield check of a tenure that its process gave up (the check's reply was given up: the
// process gave the key back and waits with the check's next), run after the process's own
// lock.lua of next put it in line, and finding nobody else live in line, leaves the process
// in line with next — it must not take it out of line (renew.lua dequeues the process before
// it looks for someone to pass to, and stands it again only when it passes). Found by the
// explorer's rule "kept in line" (internal/explore TestFoundDefectsStayMended); renew.lua
// lets a process that waits with next already keep its place.
func TestLateYieldCheckKeepsItsProcessInLine(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		lc := cfg(t, "lateyield")
		held, _ := a.lock(t, lc, true, 1)
		check, next := a.locker(), a.locker()
		if r := a.lockWith(t, lc, next, true, 1); r.Outcome != processor.Held {
			t.Fatalf("lock.lua(%s) = %+v, want held (by %s)", next, r, held)
		}
		r, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: held, Yield: true, Check: check, Next: next, NextLease: lc.Lease(), NextTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		if e := entryOf(t, c, lc, "pa-"); e != next {
			t.Fatalf("after the late yield check (%+v) the entry is %q, want %s: its process waits with it, told it is in line", r, e, next)
		}
		// nobody else is in line: the check renews, and the key stays the holder's
		if h := c.Get(ctx, lc.UniqueKey()).Val(); r.Outcome != processor.Renewed || h != held {
			t.Fatalf("late yield check with nobody else in line = %+v, key holds %q; want renewed, %s", r, h, held)
		}
	})
}

// A yield check whose number its owner has settled since (an attempt of the process numbered
// above it was refused) is refused, even while the tenure's locker still holds the key: a
// copy of it that comes late does not hand the key to the next process.
func TestSettledYieldCheckIsRefused(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "settledcheck")
		held, _ := a.lock(t, lc, true, 1)
		check := a.locker()
		if _, r := a.lock(t, lc, false, 1); r.Outcome != processor.Held { // (settles a number above check)
			t.Fatalf("a try while the process holds = %+v, want held", r)
		}
		b.lock(t, lc, true, 1)
		r, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: held, Yield: true, Check: check, Next: a.locker(), NextLease: lc.Lease(), NextTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		if h := c.Get(ctx, lc.UniqueKey()).Val(); h != held {
			t.Fatalf("settled yield check = %+v, key holds %q; want it refused, %s still holding", r, h, held)
		}
	})
}
