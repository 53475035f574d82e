package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestLockHoldsUntilSignal: dlock lock prints its holding, holds the lock (renewed past its
// lease) until SIGTERM or SIGINT, then releases it and exits 0.
func TestLockHoldsUntilSignal(t *testing.T) {
	needReal(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			tg := target(t)
			p := start(t, nil, "lock", "--redis", srv.Addr, "--lease", "4s", "CLI", tg)
			f := holdingLine(t, waitLine(t, p))
			st := lockStatusOf(t, tg)
			token, err := strconv.ParseUint(f["DLOCK_FENCING_TOKEN"], 10, 64)
			// The counter holds the last token of the holding's block: its own token, or the end
			// of a block for passes within the process (1 024 tokens), which an ask reserves when
			// a goroutine queues for the key as it asks (seen on a machine loaded past its CPUs).
			if err != nil || !st.Held || st.Holder != f["DLOCK_HOLDER"] || st.Fence < token || st.Fence-token >= 1024 || f["DLOCK_KEY"] != "DLOCK_CLI_"+tg {
				t.Fatalf("line %v; status %+v", f, st)
			}
			// Renewed: its lease left grows again (which nothing but a renewal does) while it
			// still holds. (A lease of seconds: a stall of the loaded machine does not lose it.)
			last := st.LeaseLeftMS
			waitFor(t, "a renewal", func() bool {
				st := lockStatusOf(t, tg)
				if st.Holder != f["DLOCK_HOLDER"] {
					t.Fatalf("not renewed: %+v", st)
				}
				renewed := st.LeaseLeftMS > last
				last = st.LeaseLeftMS
				return renewed
			})
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if r := p.wait(t); r.code != 0 || r.stderr != "" {
				t.Fatal(r)
			}
			if st := lockStatusOf(t, tg); st.Held {
				t.Fatalf("held after dlock lock ended: %+v", st)
			}
		})
	}
}

// TestLockLineEvals: the line dlock lock prints is safe to eval in a shell, as its usage shows,
// whatever the target holds (white space, quotes, ; $ ` and the like are quoted), and eval sets
// DLOCK_KEY to the lock's key; a plain key is printed as it is.
func TestLockLineEvals(t *testing.T) {
	needReal(t)
	for _, suffix := range []string{"", " b;echo INJECTED", " $(echo INJECTED) `echo INJECTED` 'q' \"x\" \\"} {
		tg := target(t) + suffix
		p := start(t, nil, "lock", "--redis", srv.Addr, "CLI", tg)
		line := waitLine(t, p)
		if suffix == "" && !strings.HasPrefix(line, "DLOCK_KEY=DLOCK_CLI_"+tg+" ") {
			t.Fatalf("a plain key is quoted: %q", line)
		}
		out, err := exec.Command("sh", "-c", `eval "$1" && printf '%s|%s|%s' "$DLOCK_KEY" "$DLOCK_HOLDER" "$DLOCK_FENCING_TOKEN"`, "sh", line).CombinedOutput()
		st := lockStatusOf(t, tg)
		want := "DLOCK_CLI_" + tg + "|" + st.Holder + "|" + strconv.FormatUint(st.Fence, 10)
		if err != nil || string(out) != want {
			t.Fatalf("eval %q: %v\n got %q\nwant %q", line, err, out, want)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if r := p.wait(t); r.code != 0 {
			t.Fatal(r)
		}
	}
}

// TestLockScriptThatExitsEarlyReleases: the script of lock's usage, its steps replaced by one
// that fails and exits, lets the lock go as it exits (its trap), rather than leave dlock
// holding it in the background.
func TestLockScriptThatExitsEarlyReleases(t *testing.T) {
	needReal(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash for coproc")
	}
	var script []string
	for _, l := range strings.Split(lockUsage, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "coproc ") || strings.HasPrefix(l, "trap ") || strings.HasPrefix(l, "read ") || strings.HasPrefix(l, "eval ") {
			script = append(script, l)
		}
	}
	if len(script) != 4 {
		t.Fatalf("the usage's script has changed: %q", script)
	}
	tg := target(t)
	script[0] = strings.Replace(script[0], "DEPLOY prod", "--redis "+srv.Addr+" --lease 2s CLI "+tg, 1)
	script = append(script, `echo "$COPROC_PID $DLOCK_HOLDER"`, "false || exit 1 # a step fails")
	cmd := exec.Command("bash", "-c", strings.Join(script, "\n"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout // (not its standard error: a dlock left behind would keep that pipe open)
	err := cmd.Run()
	out := stdout.Bytes()
	if pid, err := strconv.Atoi(strings.Fields(string(out) + " 0")[0]); err == nil && pid > 0 {
		defer syscall.Kill(pid, syscall.SIGKILL) // a dlock left behind, if the trap failed
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.TrimSpace(string(out)) == "" { // (it held the lock: its holder was set)
		t.Fatalf("the script: %v, output %q", err, out)
	}
	waitFor(t, "the lock to be let go after its script exited", func() bool { return !lockStatusOf(t, tg).Held })
}

// TestLockLost: when another operator releases the lock by force, naming its holder, dlock
// lock says so and exits 76.
func TestLockLost(t *testing.T) {
	needReal(t)
	tg := target(t)
	// (A lease of seconds: a stall of the loaded machine does not lose it before the release
	// --force below.)
	p := start(t, nil, "lock", "--redis", srv.Addr, "--lease", "4s", "CLI", tg)
	f := holdingLine(t, waitLine(t, p))
	r := runBin(t, nil, "release", "--force", "--holder", f["DLOCK_HOLDER"], "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "removed holder "+f["DLOCK_HOLDER"]) {
		t.Fatal(r)
	}
	r = p.wait(t)
	if r.code != exitLost || !strings.HasPrefix(r.stderr, "dlock lock: lock CLI/"+tg+" lost while held: ") ||
		strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "dlock: ") {
		t.Fatal(r)
	}
}

// TestLockNotObtained: on a held lock, dlock lock -n (or a short -w) exits 75, or the status
// -E gives, and holds nothing; a signal while it waits ends the wait with 128+signal.
func TestLockNotObtained(t *testing.T) {
	needReal(t)
	tg := target(t)
	holder := start(t, nil, "lock", "--redis", srv.Addr, "CLI", tg)
	f := holdingLine(t, waitLine(t, holder))
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-n"}, exitNotObtained},
		{[]string{"--nonblock", "-E", "3"}, 3},
		{[]string{"-w", "0.2", "--conflict-exit-code=0"}, 0},
	} {
		r := runBin(t, nil, append(append([]string{"lock", "--redis", srv.Addr}, tc.args...), "CLI", tg)...)
		said := strings.Contains(r.stderr, "not obtained") && strings.Contains(r.stderr, "held by "+f["DLOCK_HOLDER"])
		if tc.code == 0 {
			said = r.stderr == "" // (-E 0: a success, said by nothing)
		}
		if r.code != tc.code || r.stdout != "" || !said {
			t.Fatalf("%v: want status %d; %v", tc.args, tc.code, r)
		}
	}
	w := start(t, nil, "lock", "--redis", srv.Addr, "CLI", tg)
	waitFor(t, "the second dlock lock to wait", func() bool { return len(lockStatusOf(t, tg).Waiting) > 0 })
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := w.wait(t); r.code != 128+int(syscall.SIGTERM) || r.stdout != "" || !strings.Contains(r.stderr, "while waiting") {
		t.Fatal(r)
	}
	if st := lockStatusOf(t, tg); st.Holder != f["DLOCK_HOLDER"] {
		t.Fatalf("%+v", st)
	}
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := holder.wait(t); r.code != 0 {
		t.Fatal(r)
	}
}

// TestLockQuitReleases: SIGQUIT (Ctrl-\ at a terminal) ends dlock lock as SIGINT, SIGTERM and
// SIGHUP do, as it ends exec: while held, the lock is released and dlock exits 0; while
// waiting, the wait ends with 128+SIGQUIT; never a Go stack dump, never a lock left to expire.
func TestLockQuitReleases(t *testing.T) {
	needReal(t)
	tg := target(t)
	p := start(t, nil, "lock", "--redis", srv.Addr, "CLI", tg)
	f := holdingLine(t, waitLine(t, p))
	w := start(t, nil, "lock", "--redis", srv.Addr, "CLI", tg)
	waitFor(t, "the second dlock lock to wait", func() bool { return len(lockStatusOf(t, tg).Waiting) > 0 })
	if err := w.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	if r := w.wait(t); r.code != 128+int(syscall.SIGQUIT) || r.stdout != "" || !strings.Contains(r.stderr, "while waiting") || strings.Contains(r.stderr, "goroutine") {
		t.Fatal(r)
	}
	if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	if r := p.wait(t); r.code != 0 || r.stderr != "" {
		t.Fatal(r)
	}
	if st := lockStatusOf(t, tg); st.Held {
		t.Fatalf("held by %s after dlock lock ended on SIGQUIT: %+v", f["DLOCK_HOLDER"], st)
	}
}
