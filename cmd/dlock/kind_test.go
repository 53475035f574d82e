package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if r.code != exitNotObtained || !strings.Contains(r.stderr, "1 permits") {
		t.Fatalf("a third permit of 2: %v", r)
	}
	s := runBin(t, nil, "status", "--redis", srv.Addr, "--semaphore", "2", "CLI", tg)
	if s.code != 0 || !strings.Contains(s.stdout, "semaphore of 2 permits") || strings.Count(s.stdout, "holding:") != 2 {
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

// TestKindFlagsContradict: flags naming two locks, or permits without a semaphore, are usage
// errors, and nothing runs.
func TestKindFlagsContradict(t *testing.T) {
	for _, args := range [][]string{
		{"--shared", "--exclusive"},
		{"--shared", "--semaphore", "2"},
		{"--permits", "2"},
		{"--semaphore", "2", "--permits", "3"},
		{"--semaphore", "-1"},
	} {
		r := runBin(t, nil, append(append([]string{"exec", "--redis", srv.Addr}, args...), "CLI", "x", "--", "true")...)
		if r.code != exitUsage {
			t.Errorf("%v: %v", args, r)
		}
	}
}
