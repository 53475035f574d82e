package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExecNonblock: as flock -n, exec -n on a held lock exits 75 (or -E's status) at once
// without running its command, and says so on stderr (with -E 0 it says nothing: a success,
// for cron, which mails what a job says); on a free lock it runs it.
func TestExecNonblock(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	a := holder(t, dir, tg)
	ran := filepath.Join(dir, "b-ran")
	for _, tc := range []struct {
		flags []string
		code  int
	}{
		{[]string{"-n"}, exitNotObtained},
		{[]string{"--nonblock"}, exitNotObtained},
		{[]string{"-n", "-E", "9"}, 9},
		{[]string{"-n", "-E0"}, 0},
		{[]string{"-nonblock", "--conflict-exit-code", "1"}, 1},
		{[]string{"-n", "--wait", "0"}, exitNotObtained}, // the same thing said twice
	} {
		args := append(append([]string{"exec", "--redis", srv.Addr}, tc.flags...), "CLI", tg, "touch", ran)
		r := runBin(t, nil, args...)
		said := strings.Contains(r.stderr, "not obtained in one attempt") && strings.Count(r.stderr, "\n") == 1
		if tc.code == 0 {
			said = r.stderr == "" // (-E 0: a success, said by nothing)
		}
		if r.code != tc.code || !said {
			t.Fatalf("%v: want status %d; %v", tc.flags, tc.code, r)
		}
		if exists(ran) {
			t.Fatalf("%v: the command ran without the lock", tc.flags)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.wait(t); r.code != 7 {
		t.Fatal(r)
	}
	if r := runBin(t, nil, "exec", "-n", "--redis", srv.Addr, "CLI", tg, "touch", ran); r.code != 0 || !exists(ran) {
		t.Fatal(r)
	}
}

// TestExecWaitSeconds: as flock -w, a plain number is seconds: -w 1 waits a second for a held
// lock (not a nanosecond), then gives up with 75; -wN and --wait=N are the same flag.
func TestExecWaitSeconds(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	a := holder(t, dir, tg)
	for _, tc := range []struct {
		flag string
		want string
		min  time.Duration
	}{
		{"-w 1", "within --wait 1s", time.Second},
		{"-w0.5", "within --wait 500ms", 500 * time.Millisecond},
		{"--wait=1.5", "within --wait 1.5s", 1500 * time.Millisecond},
		{"--wait 1s", "within --wait 1s", time.Second},
	} {
		args := append(append([]string{"exec", "--redis", srv.Addr}, strings.Fields(tc.flag)...), "CLI", tg, "true")
		began := time.Now()
		r := runBin(t, nil, args...)
		// A lower bound only: the wait cannot end before its deadline, however loaded the machine.
		if took := time.Since(began); took < tc.min {
			t.Errorf("%s gave up after %v", tc.flag, took)
		}
		if r.code != exitNotObtained || !strings.Contains(r.stderr, tc.want) {
			t.Fatalf("%s: %v", tc.flag, r)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.wait(t); r.code != 7 {
		t.Fatal(r)
	}
}
