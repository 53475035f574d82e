package main

import (
	"strings"
	"testing"
)

// TestHelp: --help and -h, on dlock and on every command, print the usage on stdout and exit 0.
func TestHelp(t *testing.T) {
	cases := [][]string{
		{"--help"}, {"-h"}, {"-help"}, {"help"},
		{"help", "exec"}, {"help", "status"}, {"help", "release"}, {"help", "demo"},
	}
	for _, c := range commands() {
		cases = append(cases, []string{c.name, "--help"}, []string{c.name, "-h"})
	}
	cases = append(cases,
		[]string{"exec", "CLI", "x", "--help"},   // after the positional arguments
		[]string{"status", "CLI", "x", "--help"}, // likewise
		[]string{"release", "--help"},            // before --force is checked
	)
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runBin(t, nil, args...)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "usage: dlock") || r.stderr != "" {
				t.Fatal(r)
			}
			if len(args) > 1 && args[0] != "help" && !strings.HasPrefix(r.stdout, "usage: dlock "+args[0]) {
				t.Fatalf("not the usage of %s: %v", args[0], r)
			}
		})
	}
}

// TestHelpIsTheManual: the usage lists every command, exit status and flag it documents.
func TestHelpIsTheManual(t *testing.T) {
	top := runIn("--help").stdout
	for _, want := range []string{"exec", "status", "release", "demo", "DLOCK_REDIS", " 69 ", " 75 ", " 76 ", " 126 ", " 127 "} {
		if !strings.Contains(top, want) {
			t.Errorf("dlock --help lacks %q:\n%s", want, top)
		}
	}
	ex := runIn("exec", "--help").stdout
	for _, want := range []string{"--redis ADDR", "--timeout D", "--lease D", "--wait D", "--grace D",
		"DLOCK_KEY", "DLOCK_FENCING_TOKEN", "(default forever)", "(default 30s)", "(default 10s)", "(default localhost:6379)"} {
		if !strings.Contains(ex, want) {
			t.Errorf("dlock exec --help lacks %q:\n%s", want, ex)
		}
	}
}

// TestUsageErrors: a bad command line prints what is wrong and the usage on stderr, exit 2.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"status", "--bogus", "CLI", "x"}, "-bogus"},
		{[]string{"status", "CLI"}, "2 arguments expected"},
		{[]string{"status", "CLI", "x", "y"}, `unexpected argument "y"`},
		{[]string{"status", "a b", "x"}, "white space"},
		{[]string{"status", "CLI", " "}, "blank lock target"},
		{[]string{"release", "CLI", "x"}, "last resort"},
		{[]string{"exec", "CLI", "x"}, "no command given"},
		{[]string{"exec", "CLI", "x", "--"}, "no command given"},
		{[]string{"exec", "--lease", "1ms", "CLI", "x", "true"}, "lease"},
		{[]string{"exec", "--wait", "-1s", "CLI", "x", "true"}, "negative"},
		{[]string{"exec", "--wait", "soon", "CLI", "x", "true"}, "forever"},
		{[]string{"exec", "--grace", "-1s", "CLI", "x", "true"}, "--grace"},
		{[]string{"exec", "--timeout", "0", "CLI", "x", "true"}, "--timeout"},
		{[]string{"demo", "--procs", "0"}, "--procs"},
		{[]string{"demo", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runIn(tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "usage: dlock") || r.stdout != "" {
				t.Fatalf("want exit 2 and %q in stderr; %v", tc.want, r)
			}
		})
	}
}

// TestUnreachable: with nothing listening at --redis (or $DLOCK_REDIS) every command says so
// in one line naming the address, and exits 69; exec runs nothing.
func TestUnreachable(t *testing.T) {
	dir := t.TempDir()
	ran := dir + "/ran"
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"status", "--redis", unreachableAddr, "CLI", "x"}},
		{nil, []string{"status", "--json", "CLI", "x"}},
		{nil, []string{"release", "--force", "--redis", unreachableAddr, "CLI", "x"}},
		{nil, []string{"exec", "--redis", unreachableAddr, "CLI", "x", "--", "touch", ran}},
		{nil, []string{"exec", "--redis", unreachableAddr, "--wait", "0", "CLI", "x", "--", "touch", ran}},
		{nil, []string{"demo", "--redis", unreachableAddr}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			env := append([]string{"DLOCK_REDIS=" + unreachableAddr}, tc.env...)
			r := runBin(t, env, tc.args...)
			if r.code != exitUnavailable || !strings.Contains(r.stderr, unreachableAddr) ||
				strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || strings.Contains(r.stdout, "VIOLATED") {
				t.Fatal(r)
			}
			if exists(ran) {
				t.Fatal("exec ran its command without the lock")
			}
		})
	}
}
