package explore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/internal/explore"
	"github.com/dlockgo/dlock/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	code := redistest.Main(m, func(s *redistest.Server) { srv = s })
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// longRun is the budget DLOCK_EXPLORE gives (say DLOCK_EXPLORE=30m), or 0: CI's short run.
func longRun(t *testing.T) time.Duration {
	v := os.Getenv("DLOCK_EXPLORE")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("DLOCK_EXPLORE=%q: %v", v, err)
	}
	return d
}

// corpusFile keeps the minimal schedules that showed each hole (a fuzzer's crashers).
const corpusFile = "testdata/schedules.txt"

func readCorpus(t *testing.T) []explore.Schedule {
	t.Helper()
	f, err := os.Open(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := explore.ReadSchedules(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func explorer(t *testing.T, opt explore.Options) *explore.Explorer {
	t.Helper()
	e, err := explore.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// atLeast tops rep, a search of opt's whose budget ran out, up to n schedules: on a machine
// loaded far past its CPUs a budget explores few. The schedules after those explored run in
// an explorer of their own, bounded only to turn a hang into a failure.
func atLeast(t *testing.T, opt explore.Options, rep explore.Report, n int) explore.Report {
	t.Helper()
	if rep.Violation != nil || rep.Schedules >= n {
		return rep
	}
	more := opt
	more.Seed = max(opt.Seed, 1) + uint64(rep.Schedules) // (schedule i's seed is Seed + i)
	rest, err := explorer(t, more).Run(context.Background(), 5*time.Minute, n-rep.Schedules)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the budget explored %d schedules; %d more explored after it", rep.Schedules, rest.Schedules)
	rep.Schedules, rep.Steps, rep.Violation = rep.Schedules+rest.Schedules, rep.Steps+rest.Steps, rest.Violation
	rep.Reached.Add(rest.Reached)
	return rep // (its States are the first explorer's: the second's are counted apart)
}

// The scripts as they are: no schedule breaks an invariant. CI explores for 20 s from the
// kept schedules; DLOCK_EXPLORE=30m explores for that long.
func TestScriptsKeepTheInvariants(t *testing.T) {
	budget := 20 * time.Second
	if d := longRun(t); d > 0 {
		budget = d
	}
	opt := explore.Options{Corpus: readCorpus(t)}
	start := time.Now()
	rep, err := explorer(t, opt).Run(context.Background(), budget, 0)
	if err != nil {
		t.Fatal(err)
	}
	rep = atLeast(t, opt, rep, 50)
	t.Logf("FIGURE explored schedules=%d steps=%d distinct_states=%d in %v; reached: stale copies of a holder's own take=%d, renewals of a tenure taken anew after an empty restart=%d, requests naming a release retried whose key was lost=%d (two or more at once=%d)",
		rep.Schedules, rep.Steps, rep.States, time.Since(start).Round(time.Second), rep.Reached.StaleOwnTakes, rep.Reached.RenewalsOfRetaken, rep.Reached.UnreleasedLost, rep.Reached.UnreleasedLostTogether)
	if rep.Violation != nil {
		t.Fatalf("%v", rep.Violation)
	}
	if rep.Schedules < 50 {
		t.Fatalf("only %d schedules explored", rep.Schedules)
	}
}

// The same with a window left free for processes not in line (WithForeignWindow) every
// second and every 300 ms.
func TestScriptsKeepTheInvariantsWithAForeignWindow(t *testing.T) {
	budget := 5 * time.Second
	if d := longRun(t); d > 0 {
		budget = d / 4
	}
	for _, every := range []time.Duration{time.Second, 300 * time.Millisecond} {
		opt := explore.Options{GapEvery: every, GapWindow: 100 * time.Millisecond}
		rep, err := explorer(t, opt).Run(context.Background(), budget, 0)
		if err != nil {
			t.Fatal(err)
		}
		rep = atLeast(t, opt, rep, 20)
		t.Logf("FIGURE window every %v: explored schedules=%d steps=%d distinct_states=%d", every, rep.Schedules, rep.Steps, rep.States)
		if rep.Violation != nil {
			t.Fatalf("window every %v: %v", every, rep.Violation)
		}
		if rep.Schedules < 20 {
			t.Fatalf("window every %v: only %d schedules explored", every, rep.Schedules)
		}
	}
}

// The same scripts on a real redis-server, whose clock the explorer does not own: schedules
// without ticks, so that whatever differs between miniredis's Lua and Redis's shows.
func TestScriptsKeepTheInvariantsOnRedisServer(t *testing.T) {
	srv.NeedReal(t)
	budget := 5 * time.Second
	if d := longRun(t); d > 0 {
		budget = d / 10
	}
	e := explorer(t, explore.Options{Addr: srv.Addr, Seed: 7})
	rep, err := e.Run(context.Background(), budget, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE explored on redis-server schedules=%d steps=%d distinct_states=%d", rep.Schedules, rep.Steps, rep.States)
	if rep.Violation != nil {
		t.Fatalf("%v", rep.Violation)
	}
}

// seeded is one hole the explorer must find: a mutant of the scripts, or a flaw of the Go
// side put back.
type seeded struct {
	name string
	opt  explore.Options
}

func seededHoles(t *testing.T) []seeded {
	var out []seeded
	for _, m := range explore.Mutants {
		scripts, err := m.Scripts()
		if err != nil {
			t.Fatal(err) // the scripts changed under the mutant: mend it
		}
		out = append(out, seeded{m.Name, explore.Options{Scripts: scripts}})
	}
	return append(out,
		seeded{"a renewal's reply undoes Extend (a reply overwrites a newer lease setting)", explore.Options{Flaws: explore.Flaws{ReplyOverwritesSetting: true}}},
		seeded{"Close lets the key go before it tells the owner", explore.Options{Flaws: explore.Flaws{CloseFreesFirst: true}}},
		seeded{"no drift allowance (a lease counted out at send time plus the lease)", explore.Options{Flaws: explore.Flaws{NoDriftAllowance: true}}},
		seeded{"a grant the operator removed is counted (a force heard while a request is on its way keeps the grant)", explore.Options{Flaws: explore.Flaws{ForcedGrantKept: true}}},
		seeded{"a grant counted from its message's arrival", explore.Options{Flaws: explore.Flaws{GrantFromArrival: true}}},
		seeded{"only the newest of two releases of one key retried at once is named", explore.Options{Flaws: explore.Flaws{NewestRetriedOnly: true}}},
	)
}

// Every hole of the late-copy class put back is found. In CI the kept schedule of each is
// replayed (and a hole without one is searched for); DLOCK_EXPLORE=30m searches for each
// afresh, without the kept schedules, and DLOCK_EXPLORE_UPDATE=1 then rewrites the file
// with the schedules found.
func TestExplorerFindsEachHole(t *testing.T) {
	long := longRun(t)
	kept := map[string]explore.Schedule{}
	for _, s := range readCorpus(t) {
		kept[s.Name] = s
	}
	var mu sync.Mutex
	var found []explore.Schedule
	holes := seededHoles(t)
	for _, h := range holes {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			e := explorer(t, h.opt)
			if s, ok := kept[h.name]; ok && long == 0 {
				v, trace, err := e.Replay(s.Seed, s.Steps)
				if err != nil {
					t.Fatal(err)
				}
				if v == nil {
					t.Fatalf("the kept schedule no longer shows the hole; search again (DLOCK_EXPLORE=10m DLOCK_EXPLORE_UPDATE=1):\n%s", strings.Join(trace, "\n"))
				}
				t.Logf("kept schedule (%d steps) breaks %q", len(s.Steps), v.Rule)
				return
			}
			budget := 60 * time.Second
			if long > 0 {
				budget = long / time.Duration(len(holes))
			}
			start := time.Now()
			rep, err := e.Run(context.Background(), budget, 0)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Violation == nil {
				t.Fatalf("not found in %d schedules (%v)", rep.Schedules, budget)
			}
			t.Logf("FIGURE hole %q found after schedules=%d (%v), rule %q, shrunk to %d steps:\n%v", h.name, rep.Schedules,
				time.Since(start).Round(time.Millisecond), rep.Violation.Rule, len(rep.Violation.Steps), rep.Violation)
			mu.Lock()
			found = append(found, rep.Violation.Schedule(h.name))
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		if os.Getenv("DLOCK_EXPLORE_UPDATE") != "1" || t.Failed() {
			return
		}
		for _, s := range readCorpus(t) {
			if !contains(found, s.Name) {
				found = append(found, s)
			}
		}
		var buf bytes.Buffer
		if err := explore.WriteSchedules(&buf, found); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(corpusFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	})
}

func contains(s []explore.Schedule, name string) bool {
	for _, x := range s {
		if x.Name == name {
			return true
		}
	}
	return false
}

// A violation's schedule is shrunk and reads as a sequence of steps; its kept form replays to
// the same rule.
func TestViolationsAreShrunkAndReplay(t *testing.T) {
	scripts, err := explore.Mutants[0].Scripts()
	if err != nil {
		t.Fatal(err)
	}
	e := explorer(t, explore.Options{Scripts: scripts})
	rep, err := e.Run(context.Background(), time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	v := rep.Violation
	if v == nil {
		t.Fatal("no violation")
	}
	if len(v.Steps) > 25 || !strings.Contains(v.String(), "VIOLATION") { // (a walk is 40 steps)
		t.Fatalf("not shrunk or not readable (%d steps):\n%v", len(v.Steps), v)
	}
	var buf bytes.Buffer
	if err := explore.WriteSchedules(&buf, []explore.Schedule{v.Schedule("x")}); err != nil {
		t.Fatal(err)
	}
	back, err := explore.ReadSchedules(&buf)
	if err != nil || len(back) != 1 {
		t.Fatalf("read back %v, %v", back, err)
	}
	again, _, err := e.Replay(back[0].Seed, back[0].Steps)
	if err != nil {
		t.Fatal(err)
	}
	if again == nil || again.Rule != v.Rule {
		t.Fatalf("replayed: %v, want rule %q", again, v.Rule)
	}
}
