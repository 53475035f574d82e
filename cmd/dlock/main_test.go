package main

import (
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	var out strings.Builder
	if err := demo([]string{"--procs", "2", "--goroutines", "4", "--duration", "500ms"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "exclusion:        held") {
		t.Fatalf("demo output:\n%s", out.String())
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	var out strings.Builder
	if err := demo([]string{"--procs", "0"}, &out); err == nil {
		t.Fatal("--procs 0 accepted")
	}
}
