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
		"local A = {",
		"    op = ARGV[1] or '', -- x < y",
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

// The changed lines are read from a diff's hunk headers: a hunk of n lines from k, a hunk of
// one line (no count), and a deletion (count 0) that marks nothing.
func TestChangedLines(t *testing.T) {
	diff := "@@ -3,0 +4,2 @@ x\n+a\n+b\n@@ -10 +12 @@\n-c\n+d\n@@ -20,2 +21,0 @@\n-e\n-f\n"
	got := linesOfDiff(diff)
	want := map[int]bool{4: true, 5: true, 12: true}
	if len(got) != len(want) {
		t.Fatalf("changed lines %v, want %v", got, want)
	}
	for l := range want {
		if !got[l] {
			t.Fatalf("changed lines %v, want %v", got, want)
		}
	}
}

func TestQuotedStagesAreRefused(t *testing.T) {
	if err := checkStages([]string{"go test -run 'A|B' ./processor"}); err == nil {
		t.Fatal("a stage with quotes was accepted: go test would get them as part of the pattern")
	}
	if err := checkStages([]string{"go test -count=1 -skip Shared|Cluster ./processor", "env X=1 go test ./dlock"}); err != nil {
		t.Fatal(err)
	}
}
