package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// TestExecShared: two --shared execs hold the read side together; an --exclusive exec is
// not obtained beside them; status --shared shows both read-holds.
func TestExecShared(t *testing.T) {
	needReal(t)
	tg := target(t)
	d1, d2 := t.TempDir(), t.TempDir()
	a := holder(t, d1, tg, "--shared")
	b := holder(t, d2, tg, "-s")
	r := runBin(t, nil, "exec", "--redis", srv.Addr, "-x", "-n", "CLI", tg, "--", "true")
	if r.code != exitNotObtained || !strings.Contains(r.stderr, "(read)") {
		t.Fatalf("--exclusive beside two readers: %v", r)
	}
	s := runBin(t, nil, "status", "--redis", srv.Addr, "--shared", "--json", "CLI", tg)
	var st sharedJSON
	if err := json.Unmarshal([]byte(s.stdout), &st); err != nil || st.Kind != "rw" || len(st.Holds) != 2 || st.Holds[0].Write {
		t.Fatalf("status --shared: %v %+v %v", s, st, err)
	}
	for _, d := range []string{d1, d2} {
		if err := os.WriteFile(filepath.Join(d, "go"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*proc{a, b} {
		if r := p.wait(t); r.code != 7 {
			t.Fatal(r)
		}
	}
	if r := runBin(t, nil, "exec", "--redis", srv.Addr, "-x", "-n", "CLI", tg, "--", "true"); r.code != 0 {
		t.Fatalf("--exclusive once the readers left: %v", r)
	}
}

// TestExecPermits: a semaphore of 2 lets two execs in and not a third; status shows them.
func TestExecPermits(t *testing.T) {
	needReal(t)
	tg := target(t)
	d1, d2 := t.TempDir(), t.TempDir()
	a := holder(t, d1, tg, "--semaphore", "2")
	b := holder(t, d2, tg, "--semaphore", "2", "--permits", "1")
	r := runBin(t, nil, "exec", "--redis", srv.Addr, "--semaphore", "2", "-n", "CLI", tg, "--", "true")
	if r.code != exitNotObtained || !strings.Contains(r.stderr, "(1 permit)") {
		t.Fatalf("a third permit of 2: %v", r)
	}
	s := runBin(t, nil, "status", "--redis", srv.Addr, "--semaphore", "2", "CLI", tg)
	// (it names the keys the semaphore is kept in: none under DLOCK_CLI_<target> itself)
	if s.code != 0 || !strings.Contains(s.stdout, "semaphore of 2 permits, keys {DLOCK_CLI_"+tg+"}:shared:*") || strings.Count(s.stdout, "holding:") != 2 {
		t.Fatalf("status --semaphore: %v", s)
	}
	for _, d := range []string{d1, d2} {
		if err := os.WriteFile(filepath.Join(d, "go"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*proc{a, b} {
		if r := p.wait(t); r.code != 7 {
			t.Fatal(r)
		}
	}
}

// TestKindFlagsContradict: flags naming two locks, permits without a semaphore, a semaphore of
// no permits, or fewer than one permit to take, are usage errors, and nothing runs.
func TestKindFlagsContradict(t *testing.T) {
	for _, args := range [][]string{
		{"--shared", "--exclusive"},
		{"--shared", "--semaphore", "2"},
		{"--permits", "2"},
		{"--permits", "0"},
		{"--semaphore", "2", "--permits", "3"},
		{"--semaphore", "2", "--permits", "0"}, // (it took 1 permit, as if --permits were not given)
		{"--semaphore", "2", "--permits", "-1"},
		{"--semaphore", "-1"},
		{"--semaphore", "0"}, // (not the mutex: a release --force of it would remove the mutex's holder)
	} {
		r := runBin(t, nil, append(append([]string{"exec", "--redis", srv.Addr}, args...), "CLI", "x", "--", "true")...)
		if r.code != exitUsage {
			t.Errorf("%v: %v", args, r)
		}
	}
}

// TestKindMismatchIsRefused: a read-write lock asked for as a semaphore, or a semaphore as a
// read-write lock, is refused alike by exec, status (--json too) and release --force (--holder
// and --any), with the same message and usage status (2) — also once nothing holds it, while
// Redis still keeps what it is; nothing runs and nothing is removed.
func TestKindMismatchIsRefused(t *testing.T) {
	tg := target(t)
	g, _, _ := heldReadWriteAndSemaphore(t, tg)
	ctx := context.Background()
	idle, err := g.GenRW("CLI", tg+"-idle")
	if err != nil {
		t.Fatal(err)
	}
	o, err := idle.Lock(ctx) // let go at once: Redis keeps its kind
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Unlock(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target      string
		kept, asked string
		flags       []string
	}{
		{tg + "-rw", "rw", "sem", []string{"--semaphore", "2"}},
		{tg + "-sem", "sem", "rw", []string{"--shared"}},
		{tg + "-sem", "sem", "rw", []string{"--exclusive"}},
		{tg + "-idle", "rw", "sem", []string{"--semaphore", "3"}}, // nothing held, the kind kept
	} {
		for _, cmd := range [][]string{
			{"exec", "-n"},
			{"status"},
			{"status", "--json"},
			{"release", "--force", "--holder", "192.0.2.1-1-0-1"},
			{"release", "--force", "--any"},
		} {
			args := append(append(append([]string{}, cmd...), tc.flags...), "--redis", srv.Addr, "CLI", tc.target)
			if cmd[0] == "exec" {
				args = append(args, "--", "true")
			}
			r := runIn(args...)
			want := fmt.Sprintf("dlock %[1]s: DLOCK_CLI_%[2]s is a %[3]s lock in Redis, not a %[4]s\nrun 'dlock %[1]s --help' for usage\n",
				cmd[0], tc.target, tc.kept, tc.asked)
			if r.code != exitUsage || r.stderr != want || r.stdout != "" {
				t.Errorf("%v: %v, want status %d and %q", args, r, exitUsage, want)
			}
		}
	}
	for _, tc := range []struct {
		target string
		flags  []string
		holds  int
	}{
		{tg + "-rw", []string{"--shared"}, 1},
		{tg + "-sem", []string{"--semaphore", "2"}, 1},
		{tg + "-idle", []string{"--exclusive"}, 0},
	} {
		r := runIn(append(append([]string{"status", "--json"}, tc.flags...), "--redis", srv.Addr, "CLI", tc.target)...)
		var st sharedJSON
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 || len(st.Holds) != tc.holds {
			t.Errorf("%s %v afterwards: %v %+v %v", tc.target, tc.flags, r, st, err)
		}
	}
}

// TestOtherKindIsNamed: status and release --force (--any, or --holder naming a holder it
// does not find) of a lock that is free as asked but whose name Redis keeps as another kind (a
// read-write lock or semaphore asked for as a lock, a lock asked for as a read-write lock) say
// which, and the flags that ask for it; they still report it free (status 0) and remove
// nothing. (An operator who forgot --semaphore is not told only that the holder is gone.)
func TestOtherKindIsNamed(t *testing.T) {
	tg := target(t)
	g, rw, _ := heldReadWriteAndSemaphore(t, tg)
	ctx := context.Background()
	mutex, err := g.Gen("CLI", tg+"-mutex")
	if err != nil {
		t.Fatal(err)
	}
	o, err := mutex.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Unlock() })
	for _, tc := range []struct {
		target string
		flags  []string
		says   string
	}{
		{tg + "-rw", nil, "Redis keeps a read-write lock of that name (give --shared or --exclusive)"},
		{tg + "-sem", nil, "Redis keeps a semaphore of that name (give --semaphore 2)"},
		{tg + "-mutex", []string{"--shared"}, "a lock of that name (taken with neither --shared, --exclusive nor --semaphore) is held"},
		{tg + "-none", nil, ""},
	} {
		for _, cmd := range [][]string{{"status"}, {"status", "--json"}, {"release", "--force", "--any"}, {"release", "--force", "--holder", "someone"}} {
			args := append(append(append([]string{}, cmd...), tc.flags...), "--redis", srv.Addr, "CLI", tc.target)
			r := runIn(args...)
			said := r.stderr
			if cmd[0] == "release" {
				said = r.stdout
			}
			free := map[string]string{"status": "state:       free", "status --json": `"held":false`, "release --force --any": "is not held: nothing removed",
				"release --force --holder someone": "holder someone not found (already gone, or it never held the lock)"}[strings.Join(cmd, " ")]
			if tc.flags != nil && len(cmd) == 2 && cmd[1] == "--json" {
				free = `"holds":[]`
			}
			if r.code != 0 || !strings.Contains(said, tc.says) || (tc.says == "" && strings.Contains(r.stdout+r.stderr, "but ")) || !strings.Contains(r.stdout, free) {
				t.Errorf("%v: %v; want status 0, the lock free and nothing removed, and %q said", args, r, tc.says)
			}
		}
	}
	if st, err := rw.State(ctx); err != nil || len(st.Holds) != 1 {
		t.Fatalf("the read-write lock after: %+v, %v; want its read-hold kept", st, err)
	}
}

// heldReadWriteAndSemaphore makes a Generator on srv, closed when t ends, and holds through it
// a read-hold of the read-write lock CLI/tg-rw and one permit of the semaphore CLI/tg-sem of 2
// permits, let go when t ends.
func heldReadWriteAndSemaphore(t *testing.T, tg string) (*dlock.Generator, *dlock.RWLock, *dlock.Semaphore) {
	t.Helper()
	g := testGenerator(t, 5*time.Second)
	ctx := context.Background()
	rw, err := g.GenRW("CLI", tg+"-rw")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := g.GenSemaphore("CLI", tg+"-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, take := range []func() (*dlock.Owner, error){
		func() (*dlock.Owner, error) { return rw.RLock(ctx) },
		func() (*dlock.Owner, error) { return sem.Acquire(ctx, 1) },
	} {
		o, err := take()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = o.Unlock() })
	}
	return g, rw, sem
}

// TestStatusSharedWriteCountsOne: status --json of a read-write lock gives a write-hold and a
// writer in line 1 permit each, as a read-hold, not the library's internal weight of a write
// (2^40), which a script summing permits would take for a count.
func TestStatusSharedWriteCountsOne(t *testing.T) {
	needReal(t)
	tg := target(t)
	gens := make([]*dlock.Generator, 2)
	for i := range gens {
		gens[i] = testGenerator(t, 5*time.Second)
	}
	ctx := context.Background()
	rw, err := gens[0].GenRW("CLI", tg)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owned.Unlock() })
	other, err := gens[1].GenRW("CLI", tg)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if o, err := other.Lock(wctx); err == nil {
			_ = o.Unlock()
		}
	}()
	t.Cleanup(func() { stop(); <-waited })
	var st sharedJSON
	waitFor(t, "the second writer to stand in line", func() bool {
		r := runIn("status", "--json", "--exclusive", "--redis", srv.Addr, "CLI", tg)
		st = sharedJSON{}
		return json.Unmarshal([]byte(r.stdout), &st) == nil && len(st.Waiting) == 1
	})
	if len(st.Holds) != 1 || !st.Holds[0].Write || st.Holds[0].Permits != 1 || !st.Waiting[0].Write || st.Waiting[0].Permits != 1 {
		t.Fatalf("status --exclusive --json: %+v, want the write-hold and the writer in line at 1 permit each", st)
	}
}

// TestSemaphoreZeroIsUsage: --semaphore 0 names no lock in any command: status and release
// refuse it too, and the mutex of the same name keeps its holder.
func TestSemaphoreZeroIsUsage(t *testing.T) {
	tg := target(t)
	holdLock(t, tg, 5*time.Second)
	before := lockStatusOf(t, tg).Holder
	for _, args := range [][]string{
		{"status", "--semaphore", "0"},
		{"release", "--force", "--any", "--semaphore", "0"},
	} {
		r := runIn(append(append(args, "--redis", srv.Addr), "CLI", tg)...)
		if r.code != exitUsage {
			t.Errorf("%v: %v", args, r)
		}
	}
	if now := lockStatusOf(t, tg).Holder; now != before || now == "" {
		t.Fatalf("the mutex's holder was %q, is %q", before, now)
	}
}

// TestReleaseForceShared: release --force --holder removes the holding it names of a
// read-write lock (the holder learns of the loss), a repeat removes nothing, and --any
// removes every holding of a semaphore.
func TestReleaseForceShared(t *testing.T) {
	tg := target(t)
	gens := make([]*dlock.Generator, 3)
	for i := range gens {
		gens[i] = testGenerator(t, time.Second)
	}
	ctx := context.Background()
	rw, err := gens[0].GenRW("CLI", tg)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owned.Unlock() })
	st, err := rw.State(ctx)
	if err != nil || len(st.Writers()) != 1 {
		t.Fatalf("state: %+v, %v", st, err)
	}
	locker := st.Writers()[0].Locker
	r := runIn("release", "--force", "--holder", locker, "--exclusive", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "removed holder "+locker) {
		t.Fatal(r)
	}
	select {
	case <-owned.Done():
	case <-time.After(patience):
		t.Fatal("the holder never learnt that its write side was released by force")
	}
	if err := context.Cause(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("owner context ended with %v", err)
	}
	r = runIn("release", "--force", "--holder", locker, "--shared", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "holder "+locker+" not found (already gone, or it never held the lock): nothing removed") {
		t.Fatal(r)
	}

	sem := tg + "-sem"
	for _, g := range gens[1:] {
		s, err := g.GenSemaphore("CLI", sem, 2)
		if err != nil {
			t.Fatal(err)
		}
		o, err := s.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = o.Unlock() })
	}
	r = runIn("release", "--force", "--any", "--semaphore", "2", "--redis", srv.Addr, "CLI", sem)
	if r.code != 0 || strings.Count(r.stdout, "removed holder") != 2 {
		t.Fatal(r)
	}
	r = runIn("release", "--force", "--any", "--semaphore", "2", "--redis", srv.Addr, "CLI", sem)
	if r.code != 0 || !strings.Contains(r.stdout, "is not held: nothing removed") {
		t.Fatal(r)
	}
}
