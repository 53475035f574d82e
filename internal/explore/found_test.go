package explore_test

import (
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
}, {
	// An empty restart wipes A's holding pa-1; its release gets no answer and is retried, the
	// retry's first try held up on its way. A goroutine of A takes the key with pa-2 and
	// releases it, which settles every acquisition of A numbered up to 2, pa-1 included; the
	// retry then answered settled, and the loss was never told. Every request that settles
	// now names the retried release (processor.Unreleased), which marks it removed.
	Name: "a release retried of a holding an empty restart lost answers settled past a newer release",
	Seed: 1,
	Steps: []string{"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A1", "the reply to A1 arrives",
		"Redis restarts empty", "A: the owner unlocks", "A stops waiting for A2", "A2 is lost on the way",
		"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A4", "the reply to A4 arrives",
		"A: the owner unlocks", "Redis runs A5", "Redis runs A3", "the reply to A3 arrives"},
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
