// Command mutate breaks the Lua scripts one small change at a time and runs the suites that
// must notice: a mutant no suite kills marks a guard no test defends (or a change that makes
// no difference, which its reader judges). It works on a copy of the module, so the scripts
// here are never touched.
//
//	go run ./internal/mutate                      # every script, the default stages
//	go run ./internal/mutate -scripts shared -from 40
//	go run ./internal/mutate -since 5b438ae            # only the lines changed since then
//
// Each mutant changes one line: a comparison turned (< and <=, == and ~=), and/or swapped,
// a not dropped, a +1 or -1 changed, math.max and math.min swapped, a reply's code changed,
// or a statement (a call or an assignment) removed. Stages run in order until one fails; the
// line printed says which stage killed the mutant, or SURVIVED.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A mutant is one line of one script, changed.
type mutant struct {
	script string // file name in processor/lua, without .lua
	line   int    // 1-based
	op     string
	text   string // the changed line
}

// swaps are the textual changes tried at each place they match on a line of code.
var swaps = [][2]string{
	{" < ", " <= "}, {" <= ", " < "}, {" > ", " >= "}, {" >= ", " > "}, {" == ", " ~= "}, {" ~= ", " == "},
	{" and ", " or "}, {" or ", " and "}, {"not ", ""}, {"+ 1", "+ 0"}, {"- 1", "+ 1"},
	{"math.max", "math.min"}, {"math.min", "math.max"}, {"return {1", "return {0"}, {"{-1", "{0"},
}

// statement matches lines whose removal is a mutant: calls and assignments, not declarations.
var statement = regexp.MustCompile(`^([A-Za-z_][A-Za-z_.]*\(|[A-Za-z_][A-Za-z_.\[\]]* = |if .* then [a-z_]+\(.*\) end$)`)

// mutants lists the mutants of script's source.
func mutants(script, src string) []mutant {
	var out []mutant
	inNames := false
	for i, line := range strings.Split(src, "\n") {
		s := strings.TrimSpace(line)
		if s == "" || strings.HasPrefix(s, "--") {
			continue
		}
		if strings.HasPrefix(s, "local A = {") { // the arguments by name: no logic
			inNames = true
		}
		if inNames {
			inNames = s != "}"
			continue
		}
		code, _, _ := strings.Cut(line, " -- ")
		for _, sw := range swaps {
			for at := 0; ; {
				j := strings.Index(code[at:], sw[0])
				if j < 0 {
					break
				}
				j += at
				out = append(out, mutant{script, i + 1, strings.TrimSpace(sw[0]) + " -> " + strings.TrimSpace(sw[1]),
					line[:j] + sw[1] + line[j+len(sw[0]):]})
				at = j + len(sw[0])
			}
		}
		if statement.MatchString(s) && !strings.HasPrefix(s, "local ") {
			indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			out = append(out, mutant{script, i + 1, "delete", indent + "do end"})
		}
	}
	return out
}

func main() {
	scripts := flag.String("scripts", "prelude,lock,renew,release,leave,force,shared", "scripts to mutate (processor/lua/NAME.lua)")
	stages := flag.String("stages",
		"go test -count=1 -failfast ./processor;"+
			"env DLOCK_EXPLORE=12s go test -count=1 -failfast -run TestScriptsKeepTheInvariants$|TestSharedScriptKeepsTheInvariants$ ./internal/explore;"+
			"go test -count=1 -failfast -run RW|Semaphore|Multi|Force|Extend|Fencing ./dlock",
		"the suites run on each mutant, in order, separated by ';'")
	from := flag.Int("from", 0, "skip the first mutants (to resume)")
	since := flag.String("since", "", "mutate only the lines changed since this git revision")
	timeout := flag.Duration("timeout", 5*time.Minute, "a stage that runs longer kills the mutant")
	flag.Parse()
	if err := run(strings.Split(*scripts, ","), strings.Split(*stages, ";"), *from, *since, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func run(scripts, stages []string, from int, since string, timeout time.Duration) error {
	if err := checkStages(stages); err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "dlock-mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.CopyFS(work, noGit{os.DirFS(root)}); err != nil {
		return fmt.Errorf("copying the module: %w", err)
	}
	var all []mutant
	sources := map[string]string{}
	for _, s := range scripts {
		b, err := os.ReadFile(filepath.Join(root, "processor", "lua", s+".lua"))
		if err != nil {
			return err
		}
		sources[s] = string(b)
		ms := mutants(s, string(b))
		if since != "" {
			changed, err := changedLines(root, since, filepath.Join("processor", "lua", s+".lua"))
			if err != nil {
				return err
			}
			ms = slices.DeleteFunc(ms, func(m mutant) bool { return !changed[m.line] })
		}
		all = append(all, ms...)
	}
	fmt.Printf("%d mutants of %s; stages:\n", len(all), strings.Join(scripts, ", "))
	for i, s := range stages {
		fmt.Printf("  %d: %s\n", i, s)
	}
	survived := 0
	for i, m := range all[min(from, len(all)):] {
		path := filepath.Join(work, "processor", "lua", m.script+".lua")
		lines := strings.Split(sources[m.script], "\n")
		lines[m.line-1] = m.text
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			return err
		}
		killer := "SURVIVED"
		for j, stage := range stages {
			if !passes(work, stage, timeout) {
				killer = fmt.Sprintf("killed by %d", j)
				break
			}
		}
		if killer == "SURVIVED" {
			survived++
		}
		fmt.Printf("%3d %s.lua:%d %-12s %-11s %s\n", from+i, m.script, m.line, m.op, killer, strings.TrimSpace(m.text))
		if err := os.WriteFile(path, []byte(sources[m.script]), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%d of %d survived\n", survived, len(all)-min(from, len(all)))
	return nil
}

// hunk matches a hunk header of a diff without context: the new side's first line and count.
var hunk = regexp.MustCompile(`^@@ -\S+ \+(\d+)(?:,(\d+))? @@`)

// changedLines returns the lines of file (in the working tree) that changed since rev.
func changedLines(root, rev, file string) (map[int]bool, error) {
	cmd := exec.Command("git", "diff", "-U0", rev, "--", file)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git diff %s -- %s: %w", rev, file, err)
	}
	return linesOfDiff(string(out)), nil
}

// linesOfDiff returns the new side's lines of a diff made without context (-U0).
func linesOfDiff(diff string) map[int]bool {
	changed := map[int]bool{}
	for _, l := range strings.Split(diff, "\n") {
		m := hunk.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		first, _ := strconv.Atoi(m[1])
		n := 1
		if m[2] != "" {
			n, _ = strconv.Atoi(m[2])
		}
		for i := first; i < first+n; i++ {
			changed[i] = true
		}
	}
	return changed
}

// checkStages refuses a stage with quotes: passes splits a stage at spaces, without a shell,
// so a quoted pattern (-run 'A|B') would reach go test with its quotes, match no test, and
// the stage would pass whatever the mutant.
func checkStages(stages []string) error {
	for _, s := range stages {
		if strings.ContainsAny(s, `'"`) {
			return fmt.Errorf("stage %q: stages are split at spaces, without a shell: write patterns unquoted (-run A|B)", s)
		}
	}
	return nil
}

// passes runs one stage in dir and reports whether it passed within timeout.
func passes(dir, stage string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	f := strings.Fields(stage)
	var env []string
	for len(f) > 0 && (f[0] == "env" || strings.Contains(f[0], "=")) {
		if f[0] != "env" {
			env = append(env, f[0])
		}
		f = f[1:]
	}
	cmd := exec.CommandContext(ctx, f[0], f[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return cmd.Run() == nil
}

// moduleRoot finds the directory of go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			line, _ := bufio.NewReader(f).ReadString('\n')
			f.Close()
			if strings.Contains(line, "github.com/dlockgo/dlock") && !strings.Contains(line, "/dlock/") {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the dlock module")
		}
		dir = parent
	}
}

// noGit is the module's files without .git.
type noGit struct{ fs.FS }

func (n noGit) ReadDir(name string) ([]fs.DirEntry, error) {
	es, err := fs.ReadDir(n.FS, name)
	var out []fs.DirEntry
	for _, e := range es {
		if e.Name() != ".git" {
			out = append(out, e)
		}
	}
	return out, err
}
