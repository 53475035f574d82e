package processor_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/processor"
)

// knownDefect skips a test of a defect found but not yet mended, unless DLOCK_KNOWN_DEFECTS=1:
// such a test fails on the scripts as they are. Remove the call once the defect is mended.
func knownDefect(t *testing.T) {
	t.Helper()
	if os.Getenv("DLOCK_KNOWN_DEFECTS") != "1" {
		t.Skip("a known defect, not yet mended (DLOCK_KNOWN_DEFECTS=1 runs it)")
	}
}

// A late copy of a waiting take of an attempt its process gave up — the process waits in line
// with a newer attempt, the give-back of the old one not run yet (a release that failed goes
// after any take due) — is refused, as lock.lua refuses a copy older than its process's entry:
// it must not take the newer attempt's place in line, settling it (the process's next ask
// answers settled), nor take the process out of line as the old attempt's give-back runs
// (the process would stand in line again at the end, behind those that came after it).
// Found by the family explorer's rule kept in line.
func TestSharedStaleCopyOfAnOlderTakeKeepsTheLine(t *testing.T) {
	knownDefect(t)
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
