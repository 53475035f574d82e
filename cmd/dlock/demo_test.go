package main

import (
	"io"
	"strings"
	"testing"
)

// runDemo runs "dlock demo args" in this process.
func runDemo(args []string, out io.Writer) error {
	fs := newFlagSet("demo")
	return demoCommand().define(fs)(cli{stdout: out, stderr: io.Discard}, args)
}

// TestDemo: the demo on its embedded miniredis finds exclusion held.
func TestDemo(t *testing.T) {
	var out strings.Builder
	if err := runDemo([]string{"--procs", "2", "--goroutines", "4", "--duration", "500ms"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "exclusion:        held") {
		t.Fatalf("demo output:\n%s", out.String())
	}
}

// TestDemoRejectsBadFlags: nonsense flags are refused.
func TestDemoRejectsBadFlags(t *testing.T) {
	var out strings.Builder
	if err := runDemo([]string{"--procs", "0"}, &out); err == nil {
		t.Fatal("--procs 0 accepted")
	}
}

// TestDemoRealRedis runs the demo against the test's redis-server, named by $DLOCK_REDIS.
func TestDemoRealRedis(t *testing.T) {
	needReal(t)
	t.Setenv("DLOCK_REDIS", srv.Addr)
	r := runIn("demo", "--procs", "2", "--goroutines", "4", "--duration", "300ms")
	if r.code != 0 || !strings.Contains(r.stdout, "exclusion:        held") || strings.Contains(r.stdout, "embedded") {
		t.Fatal(r)
	}
}

// TestDemoUnreachable: an unreachable Redis is an error naming it, never a verdict.
func TestDemoUnreachable(t *testing.T) {
	r := runBin(t, nil, "demo", "--redis", unreachableAddr, "--duration", "200ms")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, unreachableAddr) ||
		strings.Contains(r.stdout, "VIOLATED") || strings.Contains(r.stdout, "exclusion") {
		t.Fatal(r)
	}
}
