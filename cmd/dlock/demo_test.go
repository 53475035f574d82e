package main

import (
	"context"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/internal/redistest"
)

// runDemo runs "dlock demo args" in this process.
func runDemo(args []string, out io.Writer) error {
	fs := newFlagSet("demo")
	return demoCommand().define(fs)(cli{stdout: out, stderr: io.Discard}, args)
}

// TestDemo: the demo on its embedded miniredis runs both locks in both shapes, each row with
// acquisitions, and finds exclusion held.
func TestDemo(t *testing.T) {
	var out strings.Builder
	if err := runDemo([]string{"--procs", "2", "--goroutines", "4", "--cross-procs", "3", "--duration", "800ms"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "exclusion:        held") {
		t.Fatalf("demo output:\n%s", out.String())
	}
	checkDemoRows(t, out.String(), "2 × 4", "3 × 1")
}

// TestDemoRunsUntilItsFirstAcquisition: a run in which nothing was acquired in its share of
// --duration (1ms each here; a machine far too busy for a longer one) goes on until its first
// acquisition, so that no row shows nothing.
func TestDemoRunsUntilItsFirstAcquisition(t *testing.T) {
	var out strings.Builder
	if err := runDemo([]string{"--procs", "2", "--goroutines", "2", "--cross-procs", "2", "--duration", "4ms"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	checkDemoRows(t, out.String(), "2 × 2", "2 × 1")
}

// TestDemoWithHoldOver: with --hold-over, dlock's runs use WithHoldOver and say so, and
// exclusion still holds.
func TestDemoWithHoldOver(t *testing.T) {
	var out strings.Builder
	if err := runDemo([]string{"--hold-over", "--procs", "1", "--goroutines", "2", "--cross-procs", "3", "--duration", "800ms"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "exclusion:        held") || !strings.Contains(out.String(), "WithHoldOver(true)") {
		t.Fatalf("demo output:\n%s", out.String())
	}
	checkDemoRows(t, out.String(), "1 × 2", "3 × 1")
}

// TestDemoWithNobodyReading: once nobody reads what demo writes (dlock demo | head), it runs
// no more rows and ends as a write to a closed pipe ends a program (status 141).
func TestDemoWithNobodyReading(t *testing.T) {
	done := make(chan error, 1)
	go func() { done <- runDemo([]string{"--duration", "1h"}, closedPipe{}) }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 128+int(syscall.SIGPIPE) {
			t.Fatalf("demo = %v (status %d), want status %d", err, code, 128+int(syscall.SIGPIPE))
		}
	case <-time.After(patience):
		t.Fatalf("demo still runs %v after its first write failed", patience)
	}
}

// TestDemoUnwritten: a demo whose report cannot be written is no success: a write that
// fails for another reason than a closed pipe (a full disk), from the first line or only at
// the verdict, ends it with status 1 and one line saying so; a closed pipe at the verdict
// ends it with 141, as at any other line.
func TestDemoUnwritten(t *testing.T) {
	args := []string{"demo", "--procs", "1", "--goroutines", "2", "--cross-procs", "2", "--duration", "200ms"}
	for _, tc := range []struct {
		name   string
		stdout io.Writer
		code   int
		stderr string // in stderr; "" for nothing at all
	}{
		{"full disk", fullDisk{}, exitError, "no space left"},
		{"full disk at the verdict", &failingAt{text: "exclusion:", err: syscall.ENOSPC}, exitError, "no space left"},
		{"closed pipe at the verdict", &failingAt{text: "exclusion:", err: syscall.EPIPE}, 128 + int(syscall.SIGPIPE), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			code := run(args, cli{stdout: tc.stdout, stderr: &stderr})
			ok := code == tc.code
			if tc.stderr == "" {
				ok = ok && stderr.Len() == 0
			} else {
				ok = ok && strings.HasPrefix(stderr.String(), "dlock demo: ") && strings.Contains(stderr.String(), tc.stderr) &&
					strings.Count(stderr.String(), "\n") == 1
			}
			if !ok {
				t.Fatalf("exit %d, stderr %q; want exit %d, stderr with %q", code, stderr.String(), tc.code, tc.stderr)
			}
		})
	}
}

// failingAt is standard output that takes every write until one holding text, and fails that
// and every later one with err.
type failingAt struct {
	text   string
	err    error
	failed bool
}

func (f *failingAt) Write(p []byte) (int, error) {
	if f.failed || strings.Contains(string(p), f.text) {
		f.failed = true
		return 0, f.err
	}
	return len(p), nil
}

// closedPipe is standard output whose reader has gone.
type closedPipe struct{}

func (closedPipe) Write([]byte) (int, error) { return 0, syscall.EPIPE }

// checkDemoRows checks that out has a row for each shape and lock, with the shape's layout,
// some acquisitions, commands counted and no errors.
func checkDemoRows(t *testing.T, out, hot, cross string) {
	t.Helper()
	for _, shape := range []struct{ name, layout string }{{"hot", hot}, {"cross", cross}} {
		for _, impl := range []string{"naive", "dlock"} {
			var row []string
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) == 9 && f[0] == shape.name && f[4] == impl {
					row = f
				}
			}
			// shape, P, ×, G, lock, acquisitions/s, commands/acq, least–most, errors
			if row == nil || strings.Join(row[1:4], " ") != shape.layout || row[5] == "0" || row[6] == "–" || row[8] != "0" {
				t.Errorf("no good %s %s row %q in:\n%s", shape.name, impl, row, out)
			}
		}
	}
}

// TestDemoRejectsBadFlags: counts and durations out of range — none or less (no process, no
// run), or so large that the demo would allocate absurdly (a million clients, a billion
// goroutines) or hang (a run of centuries, a holder that outstays its run) — are refused as
// any other usage error: one line naming the flag, where the usage is, exit 2, before Redis
// is contacted (an unreachable one here: 69 would say the values were taken).
func TestDemoRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string // the flag the message names
	}{
		{[]string{"--procs", "0"}, "--procs"},
		{[]string{"--procs", "-1"}, "--procs"},
		{[]string{"--procs", "1000000"}, "--procs"},
		{[]string{"--goroutines", "0"}, "--goroutines"},
		{[]string{"--goroutines", "2000000000"}, "--goroutines"},
		{[]string{"--procs", "1000", "--goroutines", "1000"}, "--goroutines"}, // a million goroutines in all
		{[]string{"--cross-procs", "0"}, "--cross-procs"},
		{[]string{"--cross-procs", "1000000"}, "--cross-procs"},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--duration", "1ns"}, "--duration"},      // four runs of no time
		{[]string{"--duration", "2000000h"}, "--duration"}, // centuries
		{[]string{"--hold", "1h"}, "--hold"},               // longer than a run (--duration 10s: 2.5s each)
		{[]string{"--duration", "1s", "--hold", "300ms"}, "--hold"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runIn(append([]string{"demo", "--redis", unreachableAddr}, tc.args...)...)
			if r.code != exitUsage || !strings.HasPrefix(r.stderr, "dlock demo: ") || !strings.Contains(r.stderr, tc.flag) ||
				!strings.HasSuffix(r.stderr, "\nrun 'dlock demo --help' for usage\n") || strings.Count(r.stderr, "\n") != 2 || r.stdout != "" {
				t.Fatalf("want a usage error naming %s, got %v", tc.flag, r)
			}
		})
	}
}

// TestDemoRealRedis runs the demo against the test's redis-server, named by $DLOCK_REDIS.
func TestDemoRealRedis(t *testing.T) {
	needReal(t)
	t.Setenv("DLOCK_REDIS", srv.Addr)
	r := runIn("demo", "--procs", "2", "--goroutines", "4", "--cross-procs", "2", "--duration", "600ms")
	if r.code != 0 || !strings.Contains(r.stdout, "exclusion:        held") || strings.Contains(r.stdout, "embedded") {
		t.Fatal(r)
	}
	checkDemoRows(t, r.stdout, "2 × 4", "2 × 1")
}

// TestDemoUnreachable: an unreachable Redis is an error naming it, never a verdict.
func TestDemoUnreachable(t *testing.T) {
	r := runBin(t, nil, "demo", "--redis", unreachableAddr, "--duration", "200ms")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, unreachableAddr) ||
		strings.Contains(r.stdout, "VIOLATED") || strings.Contains(r.stdout, "exclusion") {
		t.Fatal(r)
	}
}

// TestDemoOnAMisdirectedServer: demo, like every other command, refuses with 69 and one line
// saying what is wrong a read-only replica named as the server, or a Cluster node named as a
// single server — not a run whose dlock rows show no acquisitions and no errors (each Lock
// waits through READONLY or MOVED replies until the run ends) and "the run proved nothing"
// (status 1).
func TestDemoOnAMisdirectedServer(t *testing.T) {
	needReal(t)
	rep, err := redistest.StartReal()
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	rc := rep.Client()
	defer rc.Close()
	if err := rc.Do(context.Background(), "replicaof", "127.0.0.1", "1").Err(); err != nil { // a master that is not there
		t.Fatal(err)
	}
	demoArgs := []string{"--procs", "1", "--goroutines", "2", "--cross-procs", "1", "--duration", "400ms"}
	r := runBin(t, nil, append([]string{"demo", "--redis", rep.Addr}, demoArgs...)...)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "read-only replica") {
		t.Errorf("demo on a replica: %+v, want 69 naming a read-only replica", r)
	}
	c := redistest.NeedCluster(t, 3, 0)
	r = runBin(t, nil, append([]string{"demo", "--redis", c.Addrs()[0]}, demoArgs...)...)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "--cluster") {
		t.Errorf("demo on one Cluster node without --cluster: %+v, want 69 saying to add --cluster", r)
	}
}
