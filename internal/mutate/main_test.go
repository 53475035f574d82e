package main

import (
	"strings"
	"testing"
)

// Each line of code yields its swaps and, for a statement, its removal; comments, blank
// lines, declarations and the argument names yield nothing.
func TestMutants(t *testing.T) {
	src := strings.Join([]string{
		"-- a comment: if a < b then",
		"local NAMES = {",
		"    'op', -- x < y",
		"}",
		"local n = 1",
		"if n < k and not gone then",
		"    settle(A.locker)",
		"    return {1}",
		"end",
	}, "\n")
	var got []string
	for _, m := range mutants("s", src) {
		got = append(got, strings.TrimSpace(m.text))
	}
	want := []string{
		"if n <= k and not gone then",
		"if n < k or not gone then",
		"if n < k and gone then",
		"do end",
		"return {0}",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("mutants:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
