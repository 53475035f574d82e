package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/redistest"
)

// TestHelp: --help and -h, on dlock and on every command, print the usage on stdout and exit 0.
func TestHelp(t *testing.T) {
	cases := [][]string{
		{"--help"}, {"-h"}, {"-help"}, {"help"},
		{"help", "exec"}, {"help", "lock"}, {"help", "status"}, {"help", "release"}, {"help", "demo"},
		{"help", "--help"}, {"help", "-h"}, {"help", "help"}, // help is a command too (the usage lists it)
		{"--help", "exec"}, {"-h", "status"}, // as "dlock help COMMAND"
	}
	for _, c := range commands() {
		cases = append(cases, []string{c.name, "--help"}, []string{c.name, "-h"})
	}
	cases = append(cases,
		[]string{"exec", "CLI", "x", "--help"},   // after the positional arguments
		[]string{"status", "CLI", "x", "--help"}, // likewise
		[]string{"release", "--help"},            // before --force is checked
		[]string{"lock", "-h", "CLI", "x"},
	)
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runBin(t, nil, args...)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "usage: dlock") || r.stderr != "" {
				t.Fatal(r)
			}
			if len(args) > 1 && lookup(args[0]) != nil && !strings.HasPrefix(r.stdout, "usage: dlock "+args[0]) {
				t.Fatalf("not the usage of %s: %v", args[0], r)
			}
			if len(args) > 1 && lookup(args[0]) == nil && lookup(args[1]) != nil && !strings.HasPrefix(r.stdout, "usage: dlock "+args[1]) {
				t.Fatalf("not the usage of %s: %v", args[1], r)
			}
		})
	}
}

// TestVersion: version (and --version) prints one line, the version and the Go toolchain,
// without Redis; the line names the commit a build recorded, and the library's version when
// dlock is built within another module.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := runBin(t, nil, args...)
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "dlock ") || !strings.Contains(r.stdout, " (go1.") ||
			strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("dlock %s: %v", args[0], r)
		}
	}
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, "dlock (unknown version: built without module information)\n"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: libraryPath, Version: "v1.4.0"}}, "dlock v1.4.0 (go1.26.0)\n"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: libraryPath, Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fe19759abcdef0123456789"}, {Key: "vcs.modified", Value: "true"}}},
			"dlock (devel) fe19759abcde+modified (go1.26.0)\n"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: libraryPath, Version: "v0.0.0-20261207210301-fe19759abcde+dirty"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fe19759abcdef0123456789"}, {Key: "vcs.modified", Value: "true"}}},
			"dlock v0.0.0-20261207210301-fe19759abcde+dirty (go1.26.0)\n"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/tools", Version: "v0.3.0"},
			Deps: []*debug.Module{{Path: "github.com/redis/go-redis/v9", Version: "v9.23.0"}, {Path: libraryPath, Version: "v1.4.0"}}},
			"dlock v0.3.0, library v1.4.0 (go1.26.0)\n"},
	} {
		if got := versionLine(tc.info); got != tc.want {
			t.Errorf("versionLine = %q, want %q", got, tc.want)
		}
	}
}

// TestHelpUnwritten: a usage that cannot be written is not shown with status 0: on a full
// disk, status 1 and one line on standard error; to a closed pipe, 141 and nothing said, as a
// write to a closed pipe ends a program (and demo).
func TestHelpUnwritten(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"help", "exec"}, {"status", "--help"}, {"release", "-h"}, {"version"}} {
		var stderr strings.Builder
		code := run(args, cli{stdout: fullDisk{}, stderr: &stderr})
		if code != exitError || !strings.HasPrefix(stderr.String(), "dlock") || !strings.Contains(stderr.String(), "no space left") ||
			strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v with standard output full: exit %d, stderr %q", args, code, stderr.String())
		}
		stderr.Reset()
		code = run(args, cli{stdout: closedPipe{}, stderr: &stderr})
		if code != 128+int(syscall.SIGPIPE) || stderr.Len() != 0 {
			t.Errorf("%v with standard output closed: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}

// TestHelpIsTheManual: the usage lists every command, exit status and flag it documents, and
// shows no value taken from the environment (it may hold a password).
func TestHelpIsTheManual(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://:env-secret@127.0.0.1:1")
	top := runIn("--help").stdout
	for _, want := range []string{"exec", "lock", "status", "release", "demo", "version", "DLOCK_REDIS", "REDIS_URL", "--sentinel-master",
		" 69 ", " 75 ", " 76 ", " 77 ", " 126 ", " 127 "} {
		if !strings.Contains(top, want) {
			t.Errorf("dlock --help lacks %q:\n%s", want, top)
		}
	}
	ex := runIn("exec", "--help").stdout
	for _, want := range []string{"--redis ADDR", "--timeout D", "--lease D", "-w, --wait SECONDS", "-n, --nonblock",
		"-E, --conflict-exit-code N", "--grace D", "--cluster", "--sentinel-master NAME", "redis://[USER]:PASSWORD@HOST:PORT/DB",
		"rediss://", "master_name=", "DLOCK_KEY", "DLOCK_FENCING_TOKEN", "(default forever)", "(default 30s)", "(default 10s)", "(default 75)"} {
		if !strings.Contains(ex, want) {
			t.Errorf("dlock exec --help lacks %q:\n%s", want, ex)
		}
	}
	lk := runIn("lock", "--help").stdout
	for _, want := range []string{"DLOCK_HOLDER=", "SIGTERM", "-n, --nonblock", " 76 "} {
		if !strings.Contains(lk, want) {
			t.Errorf("dlock lock --help lacks %q:\n%s", want, lk)
		}
	}
	rel := runIn("release", "--help").stdout
	for _, want := range []string{"--holder LOCKER", "--any", "two processes may act as owners", "Fencing tokens"} {
		if !strings.Contains(rel, want) {
			t.Errorf("dlock release --help lacks %q:\n%s", want, rel)
		}
	}
	for _, c := range commands() {
		if h := runIn(c.name, "--help").stdout; strings.Contains(h, "env-secret") {
			t.Errorf("dlock %s --help shows $REDIS_URL's password", c.name)
		}
	}
}

// TestDocNamesEveryFlag: the package documentation (the manual "go doc" shows) names every
// flag of every command, as its --help does.
func TestDocNamesEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands() {
		fs := newFlagSet(c.name)
		c.define(fs)
		for _, d := range fs.defs {
			if !strings.Contains(string(doc), "--"+d.long) {
				t.Errorf("doc.go does not name dlock %s --%s", c.name, d.long)
			}
		}
	}
}

// TestUsageErrors: a bad command line prints what is wrong in one line, naming flags as the
// usage does, then where the usage is; exit 2, nothing on stdout, one prefix.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the whole first line, after the prefix
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "exec", "extra"}, `unexpected argument "extra"`},
		// --help with arguments reads them as help does, rather than ignoring them
		{[]string{"--help", "extra"}, `unknown command "extra"`},
		// a flag before the command is named as such, not as a command
		{[]string{"--redis", "h:1", "status", "CLI", "x"}, "flag --redis before the command: flags follow it (dlock COMMAND [flags] ARGS...)"},
		{[]string{"-w", "5", "exec", "CLI", "x", "true"}, "flag -w before the command: flags follow it (dlock COMMAND [flags] ARGS...)"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"-h", "exec", "extra"}, `unexpected argument "extra"`},
		{[]string{"status", "--bogus", "CLI", "x"}, "unknown flag --bogus"},
		{[]string{"status", "-bogus=1", "CLI", "x"}, "unknown flag -bogus"},
		{[]string{"lock", "-s", "CLI", "x"}, "unknown flag -s: lock holds the mutex only; for the read-write lock or the semaphore, run the command under it with dlock exec"},
		{[]string{"lock", "--semaphore=3", "CLI", "x"}, "unknown flag --semaphore: lock holds the mutex only; for the read-write lock or the semaphore, run the command under it with dlock exec"},
		{[]string{"status", "CLI"}, "2 arguments expected (TYPE TARGET), got 1"},
		{[]string{"status", "CLI", "x", "y"}, `unexpected argument "y"`},
		{[]string{"status", "a b", "x"}, `lock type "a b" holds white space or a control character`},
		{[]string{"status", "CLI", " "}, "blank lock target"},
		{[]string{"status", "CLI", "x", "--timeout"}, "--timeout needs a value (D)"},
		{[]string{"status", "--json=maybe", "CLI", "x"}, `invalid --json="maybe": --json takes no value`},
		{[]string{"release", "CLI", "x"}, `refusing without --force: deleting a lock that someone holds is an operator's last resort (the holder goes on until its next renewal, so two may act as owners); look with "dlock status" first`},
		{[]string{"release", "--force", "CLI", "x"}, `say what to remove: --holder LOCKER (as "dlock status" shows it; removes only that holding) or --any (whoever holds it now, perhaps a healthy holder that just acquired)`},
		{[]string{"release", "--force", "--any", "--holder", "h", "CLI", "x"}, "give --holder LOCKER or --any, not both"},
		// an empty --holder ("$HOLDER" unset in a script) is named, not taken for no --holder
		{[]string{"release", "--force", "--holder", "", "CLI", "x"}, `--holder is empty: give the LOCKER to remove (as "dlock status" shows it)`},
		{[]string{"release", "--force", "--any", "--holder=", "CLI", "x"}, `--holder is empty: give the LOCKER to remove (as "dlock status" shows it)`},
		{[]string{"release", "--force", "--holder", " \t", "CLI", "x"}, `--holder is empty: give the LOCKER to remove (as "dlock status" shows it)`},
		{[]string{"exec", "CLI", "x"}, "no command given"},
		{[]string{"exec", "CLI", "x", "--"}, "no command given"},
		{[]string{"exec", "--lease", "1", "CLI", "x", "true"}, `invalid --lease "1": a duration needs a unit, e.g. 30s`},
		{[]string{"exec", "-lease", "1", "CLI", "x", "true"}, `invalid --lease "1": a duration needs a unit, e.g. 30s`},
		{[]string{"exec", "--lease=1ms", "CLI", "x", "true"}, `invalid --lease "1ms": a lease must be from 30ms to 168h (7 days), in whole milliseconds`},
		{[]string{"exec", "--lease", "8d", "CLI", "x", "true"}, `invalid --lease "8d": not a duration: a number and a unit, e.g. 500ms, 30s or 2m`},
		// a duration past time.Duration's range is too long, not "not a duration"
		{[]string{"exec", "--lease", "99999999999999h", "CLI", "x", "true"}, `invalid --lease "99999999999999h": a lease must be from 30ms to 168h (7 days), in whole milliseconds`},
		{[]string{"exec", "--grace", "99999999999999h", "CLI", "x", "true"}, `invalid --grace "99999999999999h": too long: a duration is at most 2562047h (about 292 years)`},
		{[]string{"exec", "--grace", "-99999999999999h", "CLI", "x", "true"}, `invalid --grace "-99999999999999h": must not be negative`},
		{[]string{"exec", "-w", "99999999999999h", "CLI", "x", "true"}, `invalid -w "99999999999999h": too long (use "forever")`},
		{[]string{"exec", "--wait", "-1s", "CLI", "x", "true"}, `invalid --wait "-1s": must not be negative`},
		{[]string{"exec", "-w", "-3", "CLI", "x", "true"}, `invalid -w "-3": seconds must be 0 or more`},
		{[]string{"exec", "-w", "NaN", "CLI", "x", "true"}, `invalid -w "NaN": seconds must be a number, 0 or more`},
		{[]string{"exec", "-w", "99999999999", "CLI", "x", "true"}, `invalid -w "99999999999": too many seconds (use "forever")`},
		{[]string{"exec", "-w", "soon", "CLI", "x", "true"}, `invalid -w "soon": want seconds (e.g. 10 or 0.5; 0 tries once), a duration (e.g. 1m) or "forever"`},
		{[]string{"exec", "-n", "-w", "5", "CLI", "x", "true"}, "-n (--nonblock) and --wait 5s contradict each other: -n makes one attempt"},
		{[]string{"exec", "-E", "256", "CLI", "x", "true"}, `invalid -E "256": too large (at most 255)`},
		{[]string{"exec", "--conflict-exit-code", "x", "CLI", "x", "true"}, `invalid --conflict-exit-code "x": not a whole number`},
		{[]string{"exec", "--grace", "-1s", "CLI", "x", "true"}, `invalid --grace "-1s": must not be negative`},
		{[]string{"exec", "--timeout", "0", "CLI", "x", "true"}, "invalid --timeout 0s: must be more than 0"},
		// a positive wait or timeout too short for any answer from Redis: not rounded to one
		// attempt (1e-12 s is 0 ns), nor a sure "not obtained" or "did not answer"
		{[]string{"exec", "-w", "1e-12", "CLI", "x", "true"}, `invalid -w "1e-12": a wait is 0 (one attempt) or at least 1ms: no attempt is answered within less`},
		{[]string{"exec", "--wait", "1ns", "CLI", "x", "true"}, `invalid --wait "1ns": a wait is 0 (one attempt) or at least 1ms: no attempt is answered within less`},
		{[]string{"lock", "-w0.0005", "CLI", "x"}, `invalid -w "0.0005": a wait is 0 (one attempt) or at least 1ms: no attempt is answered within less`},
		{[]string{"status", "--timeout", "1ns", "CLI", "x"}, "invalid --timeout 1ns: must be at least 1ms: no call is answered within less"},
		{[]string{"release", "--force", "--any", "--timeout", "999us", "CLI", "x"}, "invalid --timeout 999µs: must be at least 1ms: no call is answered within less"},
		{[]string{"lock", "--lease", "1", "CLI", "x"}, `invalid --lease "1": a duration needs a unit, e.g. 30s`},
		{[]string{"lock", "CLI", "x", "sleep"}, `unexpected argument "sleep"`},
		{[]string{"demo", "--procs", "0"}, `invalid --procs "0": too small (at least 1)`},
		{[]string{"demo", "extra"}, `unexpected argument "extra"`},
		// a count past what the flag takes, or past what an int holds, is too large (or too
		// small), naming the bound: not "not a whole number", and refused before Redis is asked
		{[]string{"exec", "--semaphore", "99999999999999999999", "CLI", "x", "true"}, `invalid --semaphore "99999999999999999999": too large (at most 9007199254740991)`},
		{[]string{"status", "--semaphore", "9007199254740992", "CLI", "x"}, `invalid --semaphore "9007199254740992": too large (at most 9007199254740991)`},
		{[]string{"release", "--force", "--any", "--semaphore", "-99999999999999999999", "CLI", "x"}, `invalid --semaphore "-99999999999999999999": too small (at least 1)`},
		{[]string{"exec", "--semaphore", "2", "--permits", "99999999999999999999", "CLI", "x", "true"}, `invalid --permits "99999999999999999999": too large (at most 9007199254740991)`},
		{[]string{"exec", "-E", "99999999999999999999", "CLI", "x", "true"}, `invalid -E "99999999999999999999": too large (at most 255)`},
		{[]string{"demo", "--procs", "99999999999999999999"}, `invalid --procs "99999999999999999999": too large (at most 1000)`},
		{[]string{"demo", "--goroutines", "99999999999999999999"}, `invalid --goroutines "99999999999999999999": too large (at most 10000)`},
		{[]string{"demo", "--cross-procs", "-99999999999999999999"}, `invalid --cross-procs "-99999999999999999999": too small (at least 1)`},
		{[]string{"status", "--redis", "", "CLI", "x"}, "--redis is empty"},
		{[]string{"status", "--redis", "redis://localhost:6379:bad", "CLI", "x"}, `invalid --redis "redis://localhost:6379:bad": not a valid URL: invalid port ":bad" after host`},
		{[]string{"status", "--redis", "redis://u:pw@127.0.0.1:6379,127.0.0.1:6380", "CLI", "x"}, `invalid --redis "redis://u:xxxxx@127.0.0.1:6379,127.0.0.1:6380": a URL names one host: more nodes go in addr= parameters (redis://USER:PASSWORD@HOST:PORT?addr=HOST2:PORT2&addr=HOST3:PORT3)`},
		{[]string{"status", "--redis", "redis://127.0.0.1:6379:0", "CLI", "x"}, `invalid --redis "redis://127.0.0.1:6379:0": the host "127.0.0.1:6379" holds a colon: one :PORT only (an IPv6 address goes in brackets)`},
		{[]string{"status", "--redis", "rediss://:pw@h:0/0", "CLI", "x"}, `invalid --redis "rediss://:xxxxx@h:0/0": port "0" is not a number from 1 to 65535`},
		{[]string{"status", "--redis", "http://localhost:6379", "CLI", "x"}, `invalid --redis "http://localhost:6379": the scheme must be redis://, rediss:// (TLS) or unix://, not http://`},
		{[]string{"status", "--redis", "redis://localhost:6379/x", "CLI", "x"}, `invalid --redis "redis://localhost:6379/x": the path must be a database number, e.g. redis://localhost:6379/0`},
		{[]string{"status", "--redis", "local\nhost:6379", "CLI", "x"}, `invalid --redis "local\nhost:6379": it holds a control character (a line break pasted with it?)`},
		{[]string{"status", "--redis", "redis://localhost:6379?bogus=1", "CLI", "x"}, `invalid --redis "redis://localhost:6379?bogus=1": unknown URL parameter bogus (go-redis's ParseURL lists the known ones)`},
		// more nodes or Sentinels in one addr= (as --redis takes them) are not go-redis's form
		{[]string{"status", "--redis", "redis://h:1?master_name=m&addr=h:2,h:3", "CLI", "x"}, `invalid --redis "redis://h:1?master_name=m&addr=h:2,h:3": addr=h:2,h:3: one HOST:PORT per addr= parameter; repeat it for more: addr=HOST:PORT&addr=HOST:PORT`},
		{[]string{"status", "--redis", "redis://h:1?addr=h:2,h:3", "CLI", "x"}, `invalid --redis "redis://h:1?addr=h:2,h:3": addr=h:2,h:3: one HOST:PORT per addr= parameter; repeat it for more: addr=HOST:PORT&addr=HOST:PORT`},
		// a negative database, with which go-redis sends no SELECT (database 0 was used, without
		// a word), and one past what SELECT takes, are refused as a bad database is
		{[]string{"status", "--redis", "redis://h:1/-1", "CLI", "x"}, `invalid --redis "redis://h:1/-1": database -1 is negative: a database is a number from 0, e.g. redis://localhost:6379/0`},
		{[]string{"status", "--redis", "redis://h:1?db=-2", "CLI", "x"}, `invalid --redis "redis://h:1?db=-2": database -2 is negative: a database is a number from 0, e.g. redis://localhost:6379/0`},
		{[]string{"status", "--redis", "unix:///run/r.sock?db=-1", "CLI", "x"}, `invalid --redis "unix:///run/r.sock?db=-1": database -1 is negative: a database is a number from 0, e.g. redis://localhost:6379/0`},
		{[]string{"status", "--redis", "redis://h:1/-1?master_name=m", "CLI", "x"}, `invalid --redis "redis://h:1/-1?master_name=m": database -1 is negative: a database is a number from 0, e.g. redis://localhost:6379/0`},
		{[]string{"status", "--redis", "redis://h:1/99999999999999999999", "CLI", "x"}, `invalid --redis "redis://h:1/99999999999999999999": database 99999999999999999999: too large (at most 2147483647)`},
		{[]string{"status", "--redis", "redis://h:1?pool_size=99999999999999999999", "CLI", "x"}, `invalid --redis "redis://h:1?pool_size=99999999999999999999": pool_size 99999999999999999999 is not a number from 0 (go-redis's default) to 65535`},
		{[]string{"status", "--redis", "localhost", "CLI", "x"}, `invalid --redis "localhost": not host:port (e.g. localhost:6379), nor a redis:// URL`},
		{[]string{"status", "--redis", "h:1,h:x", "CLI", "x"}, `invalid --redis "h:1,h:x": "h:x": port "x" is not a number from 1 to 65535`},
		{[]string{"status", "--cluster", "--redis", "redis://h:1/2", "CLI", "x"}, `invalid --redis "redis://h:1/2": a Redis Cluster has only database 0, not "2"`},
		{[]string{"status", "--cluster", "--sentinel-master", "m", "CLI", "x"}, "--cluster and --sentinel-master exclude each other: a Sentinel watches one master, a Cluster has many"},
		{[]string{"status", "--redis", "redis-sentinel://h:26379", "CLI", "x"}, `invalid --redis "redis-sentinel://h:26379": go-redis has no redis-sentinel:// URLs: for Sentinel give redis://SENTINEL:PORT?master_name=NAME, or --sentinel-master NAME with the Sentinels' addresses`},
		{[]string{"status", "--sentinel-master", "a", "--redis", "redis://h:1?master_name=b", "CLI", "x"}, `invalid --redis "redis://h:1?master_name=b": its master_name "b" differs from --sentinel-master "a"`},
		// the Sentinels' addresses after --sentinel-master NAME without --redis, as the README
		// once showed it (and doc.go a node after --cluster): taken for TYPE, they named another
		// lock on localhost:6379
		{[]string{"status", "--cluster", "h:7000", "CLI", "x"}, `TYPE "h:7000" looks like the Cluster nodes' addresses: name them with --redis (--cluster --redis h:7000 TYPE TARGET)`},
		{[]string{"status", "--sentinel-master", "m", "h:26379,h2:26380", "CLI", "x"}, `TYPE "h:26379,h2:26380" looks like the Sentinels' addresses: name them with --redis (--sentinel-master m --redis h:26379,h2:26380 TYPE TARGET)`},
		{[]string{"exec", "--sentinel-master", "m", "h:26379", "CLI", "x", "--", "true"}, `TYPE "h:26379" looks like the Sentinels' addresses: name them with --redis (--sentinel-master m --redis h:26379 TYPE TARGET)`},
		{[]string{"lock", "--sentinel-master", "m", "h:26379", "CLI", "x"}, `TYPE "h:26379" looks like the Sentinels' addresses: name them with --redis (--sentinel-master m --redis h:26379 TYPE TARGET)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runIn(tc.args...)
			cmd := "dlock"
			if len(tc.args) > 0 && lookup(tc.args[0]) != nil {
				cmd = "dlock " + tc.args[0]
			} else if len(tc.args) > 0 && tc.args[0] == "help" {
				cmd = "dlock help"
			}
			hint := "run 'dlock --help' for usage"
			if len(tc.args) > 0 && lookup(tc.args[0]) != nil {
				hint = "run '" + cmd + " --help' for usage"
			}
			want := cmd + ": " + tc.want + "\n" + hint + "\n"
			if r.code != exitUsage || r.stderr != want || r.stdout != "" {
				t.Fatalf("want exit 2 and stderr\n%s%v", want, r)
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
		{nil, []string{"release", "--force", "--any", "--redis", unreachableAddr, "CLI", "x"}},
		{nil, []string{"release", "--force", "--holder", "h", "CLI", "x"}},
		{nil, []string{"lock", "-n", "CLI", "x"}},
		{[]string{"REDIS_URL=redis://:secret@" + unreachableAddr}, []string{"lock", "CLI", "x"}}, // DLOCK_REDIS comes first
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

// TestUnreachableNamesTheLatestCause: a dial that --timeout cuts short after it hung is named
// as such, not by the reason an earlier dial to the same address failed for: a Redis that
// refused connections (restarting, say), then whose host stopped answering (a partition), is
// not said to refuse them.
func TestUnreachableNamesTheLatestCause(t *testing.T) {
	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	e, err := resolveRedis(addr, true, false, "", "")
	if err != nil {
		t.Fatal(err)
	}
	dial := e.dials.dialer(5*time.Second, nil)
	if c, err := dial(context.Background(), "tcp", addr); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("want a refusal with nothing listening, got %v, %v", c, err)
	}
	silentAddrAt(t, port) // the host no longer answers
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if c, err := dial(ctx, "tcp", addr); err == nil {
		c.Close()
		t.Fatal("a dial to a full backlog connected")
	}
	if f := e.failure(5 * time.Second); f == nil || strings.Contains(f.Error(), "refused") || !strings.Contains(f.Error(), "no connection within") {
		t.Fatalf("want the dial --timeout cut short named, got %v", f)
	}
}

// TestURLDialTimeoutIsNamed: a URL's dial_timeout too short to connect is named as what gave
// up (exit 69), not reported as "did not answer within 5s (--timeout)" half a second after the
// start, for one server as for Sentinels (whose dial failures go-redis reports as a bare
// "context deadline exceeded"); a negative dial_timeout, which no dial can meet, is a usage
// error.
func TestURLDialTimeoutIsNamed(t *testing.T) {
	for _, redisArgs := range [][]string{
		{"--redis", "redis://" + srv.Addr + "?dial_timeout=1ns"},
		{"--redis", "redis://" + srv.Addr + "?master_name=m&dial_timeout=1ns"},
		{"--sentinel-master", "m", "--redis", "redis://" + srv.Addr + "?dial_timeout=1ns"},
	} {
		r := runBin(t, nil, append(append([]string{"status"}, redisArgs...), "CLI", "x")...)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "dial_timeout 1ns") || strings.Contains(r.stderr, "--timeout") ||
			strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: want exit 69 naming the URL's dial_timeout, got %v", redisArgs, r)
		}
	}
	url := "redis://" + srv.Addr + "?dial_timeout=-1s"
	r := runBin(t, nil, "status", "--redis", url, "CLI", "x")
	if r.code != exitUsage || !strings.HasPrefix(r.stderr, `dlock status: invalid --redis "`+url+`": dial_timeout -1s `) {
		t.Fatalf("want a usage error naming dial_timeout, got %v", r)
	}
}

// TestQuitNeverDumps: SIGQUIT (Ctrl-\ at a terminal) ends status, release and demo as it ends
// exec and lock, with status 128+SIGQUIT and never a Go stack dump (whose exit status, 2,
// would read as a usage error), here while each waits for a Redis that does not answer.
func TestQuitNeverDumps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- c: // held open, never answered
			default:
				c.Close()
			}
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	silent := ln.Addr().String()
	for _, args := range [][]string{
		{"status", "--redis", silent, "--timeout", "1m", "CLI", "x"},
		{"release", "--force", "--any", "--redis", silent, "--timeout", "1m", "CLI", "x"},
		{"demo", "--redis", silent, "--timeout", "1m"},
	} {
		t.Run(args[0], func(t *testing.T) {
			p := start(t, nil, args...)
			select {
			case c := <-accepted:
				defer c.Close()
			case <-time.After(patience):
				t.Fatal("dlock never connected")
			}
			if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
				t.Fatal(err)
			}
			if r := p.wait(t); r.code != 128+int(syscall.SIGQUIT) || strings.Contains(r.stderr, "goroutine") {
				t.Fatalf("want exit %d without a stack dump, got %v", 128+int(syscall.SIGQUIT), r)
			}
		})
	}
}

// TestRedisErrorReply: a Redis that answers with an error is not reported unreachable. A key
// of the lock's that holds another kind of value (WRONGTYPE) is an error no wait mends: every
// command says what Redis answered, naming the lock's keys for the operator to look at, and
// exits 1 at once, waiting or not, and exec runs nothing. A Redis out of memory (maxmemory
// reached) is not serving: 69 at once, naming the reply.
func TestRedisErrorReply(t *testing.T) {
	needReal(t)
	admin := srv.Client()
	defer admin.Close()
	ctx := context.Background()
	tg := target(t)
	if err := admin.RPush(ctx, "DLOCK_CLI_"+tg, "not a lock").Err(); err != nil {
		t.Fatal(err)
	}
	// a semaphore's: its holdings' key holds another kind of value
	sem := tg + "sem"
	if err := admin.RPush(ctx, "{DLOCK_CLI_"+sem+"}:shared:held", "not a lock").Err(); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		{"status", "--semaphore", "2", "CLI", sem},
		{"exec", "-n", "--semaphore", "2", "CLI", sem, "touch", ran},
		{"status", "CLI", tg},
		{"status", "--json", "CLI", tg},
		{"release", "--force", "--any", "CLI", tg},
		{"release", "--force", "--holder", "h", "CLI", tg},
		{"lock", "-n", "CLI", tg},
		{"lock", "-w", "30", "CLI", tg},
		{"exec", "-n", "CLI", tg, "touch", ran},
		{"exec", "CLI", tg, "touch", ran},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			start := time.Now()
			r := runBin(t, []string{"DLOCK_REDIS=" + srv.Addr}, args...)
			key := "DLOCK_CLI_" + tg
			if slices.Contains(args, sem) {
				key = "DLOCK_CLI_" + sem
			}
			if r.code != exitError || !strings.Contains(r.stderr, "WRONGTYPE") || !strings.Contains(r.stderr, key) || strings.Contains(r.stderr, "cannot reach") ||
				strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || r.stdout != "" {
				t.Fatal(r)
			}
			if d := time.Since(start); d > 15*time.Second { // (half the -w: it did not wait for the key)
				t.Fatalf("took %v: it waited for the key Redis refused", d)
			}
			if exists(ran) {
				t.Fatal("exec ran its command without the lock")
			}
		})
	}
	t.Run("out of memory", func(t *testing.T) {
		s, err := redistest.StartReal()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		oom := s.Client()
		defer oom.Close()
		if err := oom.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := oom.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		// The refused attempt wrote nothing (a script out of memory is refused at its first
		// write): exec exits without giving it back, not once its lease (here a minute) or
		// --timeout ran out.
		start := time.Now()
		r := runBin(t, nil, "exec", "-n", "--timeout", "1m", "--lease", "1m", "--redis", s.Addr, "CLI", tg, "touch", ran)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "OOM") || strings.Contains(r.stderr, "cannot reach") || exists(ran) {
			t.Fatal(r)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("exec took %v: it waited to give back an attempt Redis refused", d)
		}
	})
}

// TestEmptySentinelMaster: an empty --sentinel-master (say "$MASTER" unset in a script) is a
// usage error, as an empty --redis is — not taken for no flag at all, after which the
// Sentinels' addresses are dialled as one server and the user who gave --sentinel-master is
// told "a Sentinel is named with --sentinel-master" (exit 69). The address here need not
// answer: the flag is refused before Redis is asked.
func TestEmptySentinelMaster(t *testing.T) {
	for _, cmd := range [][]string{{"status"}, {"lock", "-n"}, {"exec", "-n"}, {"release", "--force", "--any"}} {
		args := append(append([]string{}, cmd...), "--sentinel-master", "", "--redis", unreachableAddr, "CLI", "x")
		if cmd[0] == "exec" {
			args = append(args, "--", "true")
		}
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runIn(args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "--sentinel-master") || !strings.Contains(r.stderr, "empty") {
				t.Fatalf("want exit 2 saying --sentinel-master is empty, got %v", r)
			}
		})
	}
}

// TestUnreachableSentinels: with none of several Sentinels listening, every command says so in
// one line naming them and exits 69, as with one unreachable address (TestUnreachable).
// go-redis joins one dial error per Sentinel with newlines, and its message came out on two
// lines.
func TestUnreachableSentinels(t *testing.T) {
	two := unreachableAddr + ",127.0.0.1:2"
	for _, redisArgs := range [][]string{
		{"--sentinel-master", "m", "--redis", two},
		{"--redis", "redis://" + unreachableAddr + "?master_name=m&addr=127.0.0.1:2"},
	} {
		// (two commands: go-redis takes about 5 s to give up on the Sentinels; every command
		// reports through the one redisFailure)
		for _, cmd := range [][]string{{"status"}, {"exec", "-n"}} {
			args := append(append(append([]string{}, cmd...), redisArgs...), "CLI", "x")
			if cmd[0] == "exec" {
				args = append(args, "--", "true")
			}
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				r := runIn(args...)
				if r.code != exitUnavailable || !strings.Contains(r.stderr, unreachableAddr) ||
					strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
					t.Fatalf("want exit 69 and one line naming the Sentinels, got %v", r)
				}
			})
		}
	}
}

// TestURLPoolSizesOutOfRange: a URL's pool_size below 0, or a connection count parameter past
// what a pool can be made with, is a usage error naming the parameter, for every kind of URL —
// not a Go panic from go-redis (exit 2 with a stack trace) for a negative pool_size or one past
// 2^31 - 1, nor minutes of filling a pool of 2^31 - 1 before --timeout applies.
func TestURLPoolSizesOutOfRange(t *testing.T) {
	for _, param := range []string{"pool_size=-1", "pool_size=2147483647", "pool_size=2147483648", "min_idle_conns=99999999999",
		"max_idle_conns=99999999999", "max_active_conns=99999999999", "pipeline_pool_size=2147483647"} {
		name, _, _ := strings.Cut(param, "=")
		for _, url := range []string{
			"redis://" + unreachableAddr + "?" + param,
			"redis://" + unreachableAddr + "?addr=127.0.0.1:2&" + param,
			"redis://" + unreachableAddr + "?master_name=m&" + param,
		} {
			if strings.HasSuffix(param, "=2147483647") && strings.Contains(url, "&") {
				continue // (one hang, of patience, is enough)
			}
			t.Run(url, func(t *testing.T) {
				r := runBin(t, nil, "status", "--redis", url, "--timeout", "1s", "CLI", "x")
				if r.code != exitUsage || !strings.HasPrefix(r.stderr, `dlock status: invalid --redis "`+url+`": `+name+" ") ||
					strings.Contains(r.stderr, "goroutine") || strings.Count(r.stderr, "\n") != 2 {
					t.Fatalf("want a usage error naming %s, got %v", name, r)
				}
			})
		}
	}
}
