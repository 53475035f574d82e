package processor_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/processor"
)

// A waiting attempt (Lock with Wait) whose locker is not one of the processor's Mark (Mark "pa",
// locker "pa-1", whose owner is "pa-") is refused with ErrInvalidConfig, as ExpandLease and
// Unlock refuse such a next: its line entry would be the Mark's while every settle (a give-back,
// a failed attempt, a leave) looks under the locker's owner, so the entry would stay in line
// given up, for a release to grant the key to a settled acquisition.
func TestGrantNeverGoesToASettledLockerWhateverTheMark(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa") // a mark without the owner's trailing '-'
		b := newProc(t, c, "pb-")
		lc := cfg(t, "advmark")
		lb, rb := b.lock(t, lc, false, 1)
		if rb.Outcome != processor.Taken {
			t.Fatalf("pb- = %+v", rb)
		}
		la := "pa-1"
		r, err := a.Lock(ctx, lc, processor.LockRequest{Locker: la, Wait: true, Tokens: 1})
		if errors.Is(err, dlerrors.ErrInvalidConfig) {
			return // refused: the locker is not one of the mark's
		} else if err != nil {
			t.Fatal(err)
		}
		if r.Outcome != processor.Held {
			t.Fatalf("pa's attempt = %+v, want in line", r)
		}
		// pa gives the attempt up: its give-back settles it, and its leave settles everything.
		if g, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: la}); err != nil {
			t.Fatal(err)
		} else {
			t.Logf("give-back = %+v", g)
		}
		if _, err := a.Leave(ctx, lc, processor.LeaveRequest{Last: la}); err != nil {
			t.Fatal(err)
		}
		if again, _ := a.Lock(ctx, lc, processor.LockRequest{Locker: la, Wait: true, Tokens: 1}); again.Outcome != processor.Settled {
			t.Fatalf("a copy of the given-up attempt = %+v, want settled", again)
		}
		g := b.release(t, lc, lb)
		if g.Next == la {
			t.Fatalf("pb-'s release granted the key to %s, an attempt given back and left (settled): %+v", la, g)
		}
	})
}
