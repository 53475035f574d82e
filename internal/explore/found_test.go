package explore_test

import (
	"os"
	"testing"

	"github.com/dlockgo/dlock/internal/explore"
)

// foundDefects are schedules that broke an invariant on the scripts of their time: defects of
// the scripts the explorer found, mended since (the kept schedules of testdata are seeded
// holes instead).
var foundDefects = []explore.Schedule{{
	// A's pass renewal yields (the hand-off limit passed) with next pa-3; its goroutine gives
	// up, so A gives pa-1 back and its next goroutine waits with pa-3, whose lock.lua puts A
	// in line; the yield check then ran late, found nobody else in line, renewed pa-1 and
	// left A out of line (renew.lua dequeued A before it looked for someone to pass to).
	Name: "a late yield check of a tenure its process gave up takes the process out of line",
	Seed: 1,
	Steps: []string{"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A1", "the reply to A1 arrives",
		"A: a goroutine calls Lock", "100ms pass", "A: the owner unlocks", "A: the first waiter takes the free tenure",
		"A: a goroutine calls Lock", "A: the first waiter gives up", "A: the first waiter asks Redis", "Redis runs A4", "Redis runs A2"},
}}

// The defects found, replayed on the scripts as they are: each keeps every invariant now.
func TestFoundDefectsStayMended(t *testing.T) {
	e := explorer(t, explore.Options{})
	for _, s := range foundDefects {
		v, _, err := e.Replay(s.Seed, s.Steps)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil {
			t.Errorf("%s:\n%v", s.Name, v)
		}
	}
}

// A release retried (its answer lost) of a holding an empty restart lost tells the loss, though
// the process took and released a newer acquisition while the retry's first try was on its way:
// that release settles every acquisition of its process numbered up to its own, the older one
// included, so the retry must still answer gone, not settled.
//
// A known defect, not mended yet (docs/reliability.md, "What it found"): the retry answers
// settled and the loss is never told. Its mend needs the newer release to name the retried one,
// as a leave does (LeaveRequest.Unreleased), in release.lua. The test runs, and fails, with
// DLOCK_KNOWN_DEFECTS set; without it, it is skipped, so that CI stays green until the mend.
func TestRetriedReleaseTellsALossPastANewerRelease(t *testing.T) {
	if os.Getenv("DLOCK_KNOWN_DEFECTS") == "" {
		t.Skip("a known defect, not mended yet: set DLOCK_KNOWN_DEFECTS=1 to run it (docs/reliability.md)")
	}
	e := explorer(t, explore.Options{})
	v, _, err := e.Replay(1, []string{"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A1", "the reply to A1 arrives",
		"Redis restarts empty", "A: the owner unlocks", "A stops waiting for A2", "A2 is lost on the way",
		"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A4", "the reply to A4 arrives",
		"A: the owner unlocks", "Redis runs A5", "Redis runs A3", "the reply to A3 arrives"})
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		t.Errorf("%v", v)
	}
}
