package explore_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/explore"
	"github.com/dlockgo/dlock/processor"
)

// The read-write lock's and the semaphore's script as it is: no schedule breaks an invariant.
// CI explores each of three shapes for 5 s; DLOCK_EXPLORE=30m for a tenth of that each.
func TestSharedScriptKeepsTheInvariants(t *testing.T) {
	budget := 5 * time.Second
	if d := longRun(t); d > 0 {
		budget = d / 10
	}
	for _, opt := range []explore.SharedOptions{
		{Kind: processor.KindRW},
		{Kind: processor.KindSem, Permits: 2},
		{Kind: processor.KindSem, Permits: 3, Procs: 2, Steps: 80},
	} {
		t.Run(string(opt.Kind), func(t *testing.T) {
			rep, err := explore.RunShared(context.Background(), opt, budget, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("FIGURE shared %s explored schedules=%d steps=%d", opt.Kind, rep.Schedules, rep.Steps)
			if rep.Violation != nil {
				t.Fatalf("%v", rep.Violation)
			}
			if rep.Schedules < 50 {
				t.Fatalf("only %d schedules explored", rep.Schedules)
			}
		})
	}
}

// Every guard of shared.lua broken is found.
func TestSharedExplorerFindsEachMutant(t *testing.T) {
	budget := 60 * time.Second
	for _, m := range explore.SharedMutants {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			scripts, err := m.Scripts()
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []processor.Kind{processor.KindRW, processor.KindSem} {
				start := time.Now()
				rep, err := explore.RunShared(context.Background(), explore.SharedOptions{Kind: kind, Scripts: scripts}, budget, 0)
				if err != nil {
					t.Fatal(err)
				}
				if rep.Violation != nil {
					t.Logf("FIGURE mutant %q found (%s) after schedules=%d (%v), rule %q", m.Name, kind, rep.Schedules, time.Since(start).Round(time.Millisecond), rep.Violation.Rule)
					return
				}
			}
			t.Fatalf("not found in %v per kind", budget)
		})
	}
}
