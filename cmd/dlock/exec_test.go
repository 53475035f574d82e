package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/internal/redistest"
)

// holder starts "dlock exec" on CLI/tg with a command that writes its environment, says it
// is ready, waits for dir/go and exits 7; dir/a-done is its last act.
func holder(t *testing.T, dir, tg string, flags ...string) *proc {
	t.Helper()
	script := fmt.Sprintf(`echo "$DLOCK_KEY $DLOCK_FENCING_TOKEN $DLOCK_TYPE $DLOCK_TARGET" > %[1]s/env
touch %[1]s/ready
while [ ! -e %[1]s/go ] && [ -d %[1]s ]; do sleep 0.02; done
touch %[1]s/a-done
exit 7`, dir)
	args := append([]string{"exec", "--redis", srv.Addr}, flags...)
	p := start(t, nil, append(args, "CLI", tg, "--", "sh", "-c", script)...)
	waitFile(t, filepath.Join(dir, "ready"))
	return p
}

// TestExecHoldsLock: the command runs with the lock held and its environment set; a second
// exec waits until the first command has exited; the command's exit status is passed on and
// the lock released.
func TestExecHoldsLock(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	a := holder(t, dir, tg, "--lease", "5s")

	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(env))
	if len(f) != 4 || f[0] != "DLOCK_CLI_"+tg || f[2] != "CLI" || f[3] != tg {
		t.Fatalf("command environment: %q", env)
	}
	token, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || token == 0 {
		t.Fatalf("DLOCK_FENCING_TOKEN %q: %v", f[1], err)
	}
	st := lockStatusOf(t, tg)
	if !st.Held || st.Fence != token {
		t.Fatalf("while the command runs: %+v, want held with fence %d", st, token)
	}

	// b waits (its mark shows it), and runs only once a's command has finished.
	b := start(t, nil, "exec", "--redis", srv.Addr, "--wait", "1m", "CLI", tg, "--",
		"sh", "-c", fmt.Sprintf(`test -e %[1]s/a-done && touch %[1]s/b-ran`, dir))
	waitFor(t, "the second exec to wait", func() bool { return len(lockStatusOf(t, tg).Waiting) > 0 })
	if exists(filepath.Join(dir, "b-ran")) {
		t.Fatal("the second command ran while the first held the lock")
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.wait(t); r.code != 7 || r.stderr != "" {
		t.Fatalf("first exec: %v", r)
	}
	if r := b.wait(t); r.code != 0 || !exists(filepath.Join(dir, "b-ran")) {
		t.Fatalf("second exec: %v", r)
	}
	if st := lockStatusOf(t, tg); st.Held {
		t.Fatalf("held after both commands exited: %+v", st)
	}
}

// TestExecStatus: dlock exits with the command's status, 128+signal for a killed command, 127
// for a missing one, 126 for one that cannot run (a script whose interpreter is missing, named
// so); a script without "#!" is run by the shell, as execvp(3) and flock(1) do; the lock is
// released after each.
func TestExecStatus(t *testing.T) {
	needReal(t)
	dir := t.TempDir()
	script := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noShebang := script("no-shebang", "test -n \"$DLOCK_KEY\" && exit \"$1\"\n")
	badInterpreter := script("bad-interpreter", "#!/no/such/interpreter\nexit 0\n")
	script("relative", "#!/bin/sh\nexit 4\n")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, dir) // (a PATH entry that is not absolute, as "." is)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		argv []string
		code int
		says string
	}{
		{"script without #!", []string{noShebang, "5"}, 5, ""},
		{"missing interpreter", []string{badInterpreter}, exitCannotExec, "interpreter"},
		{"success", []string{"true"}, 0, ""},
		{"exit 3", []string{"sh", "-c", "exit 3"}, 3, ""},
		{"SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM), ""},
		{"SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, 128 + int(syscall.SIGKILL), ""},
		{"leading dash", []string{"--", "-no-such-command"}, exitNotFound, ""},
		{"not found", []string{"/no/such/command"}, exitNotFound, ""},
		{"not executable", []string{"/dev/null"}, exitCannotExec, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := target(t)
			args := []string{"exec", "--redis", srv.Addr, "--wait", "0", "CLI", tg}
			if tc.argv[0] != "--" {
				args = append(args, "--")
			}
			r := runBin(t, nil, append(args, tc.argv...)...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.says) {
				t.Fatalf("want exit status %d and a message saying %q; %v", tc.code, tc.says, r)
			}
			checkFreed(t, tg)
		})
	}
	// a command found by a PATH entry that is not absolute ("."), run as a shell runs it
	r := runBin(t, []string{"PATH=" + rel + ":" + os.Getenv("PATH")}, "exec", "--redis", srv.Addr, "--wait", "0", "CLI", target(t), "relative")
	if r.code != 4 {
		t.Fatalf("a command found by a relative PATH entry: want exit status 4; %v", r)
	}
}

// TestExecFlock: as with flock, the command may follow TYPE TARGET without "--"; and with it
// ("[--] COMMAND"), also when a "--" before TYPE TARGET ended the flags (a type that starts
// with "-").
func TestExecFlock(t *testing.T) {
	needReal(t)
	tg := target(t)
	for _, args := range [][]string{
		{"exec", "CLI", tg, "--redis", srv.Addr},
		{"exec", "--redis", srv.Addr, "--", "CLI", tg, "--"},
		{"exec", "--redis", srv.Addr, "--", "-CLI", tg, "--"},
	} {
		out := filepath.Join(t.TempDir(), "out")
		r := runBin(t, nil, append(args, "sh", "-c", `echo "$DLOCK_KEY" > `+out)...)
		if r.code != 0 || !exists(out) {
			t.Fatalf("%q: %v", args, r)
		}
	}
}

// TestExecNotObtained: while the lock is held, exec with a short --wait (or --wait 0) exits 75
// and does not run its command.
func TestExecNotObtained(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	a := holder(t, dir, tg)
	ran := filepath.Join(dir, "b-ran")
	for _, wait := range []string{"200ms", "0"} {
		r := runBin(t, nil, "exec", "--redis", srv.Addr, "--wait", wait, "CLI", tg, "--", "touch", ran)
		if r.code != exitNotObtained || !strings.Contains(r.stderr, "not obtained") || !strings.Contains(r.stderr, "held by") {
			t.Fatalf("--wait %s: %v", wait, r)
		}
		if exists(ran) {
			t.Fatalf("--wait %s: the command ran without the lock", wait)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.wait(t); r.code != 7 {
		t.Fatal(r)
	}
}

// TestExecWaitShorterThanARoundTrip: a wait shorter than an attempt's round trip obtains
// nothing, even of a free lock (documented with --wait), and the message says so rather than
// leave the operator to look for a holder; the attempt that took the key is given back.
func TestExecWaitShorterThanARoundTrip(t *testing.T) {
	needReal(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetLatency(25 * time.Millisecond)
	dir, tg := t.TempDir(), target(t)
	ran := filepath.Join(dir, "ran")
	r := runBin(t, nil, "exec", "--redis", p.Addr(), "--wait", "0.005", "CLI", tg, "--", "touch", ran)
	if r.code != exitNotObtained || !strings.Contains(r.stderr, "no other holder found (let go as the wait ran out, or the wait was shorter than an attempt's round trip to Redis)") {
		t.Fatalf("a 5 ms wait, 50 ms from Redis: %v", r)
	}
	if exists(ran) {
		t.Fatal("the command ran without the lock")
	}
	checkFreed(t, tg)
}

// TestNotObtainedNamesOnlyOthers: the holders a "not obtained" message names are other
// processes': a wait of a few milliseconds on a free lock may run out as exec's own attempt
// takes the key, which exec then gives back, and an operator would take that attempt for
// another process's. For every kind of lock, a process's own holding is left out, another's
// named.
func TestNotObtainedNamesOnlyOthers(t *testing.T) {
	needReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mine, other := testGenerator(t, time.Minute), testGenerator(t, time.Minute)
	for i, kind := range []struct {
		name string
		of   func(g *dlock.Generator, tg string) (guarded, error)
	}{
		{"mutex", func(g *dlock.Generator, tg string) (guarded, error) {
			l, err := g.Gen("CLI", tg)
			return mutexLock(l), err
		}},
		{"write", func(g *dlock.Generator, tg string) (guarded, error) {
			rw, err := g.GenRW("CLI", tg)
			return sharedLock(rw.WriteSide(), rw.State, rw.ForceRelease), err
		}},
		{"read", func(g *dlock.Generator, tg string) (guarded, error) {
			rw, err := g.GenRW("CLI", tg)
			return sharedLock(rw.ReadSide(), rw.State, rw.ForceRelease), err
		}},
		{"semaphore", func(g *dlock.Generator, tg string) (guarded, error) {
			s, err := g.GenSemaphore("CLI", tg, 2)
			return sharedLock(s.Permits(1), s.State, s.ForceRelease), err
		}},
	} {
		tg := fmt.Sprintf("%s.%d", target(t), i) // (a read-write lock and a semaphore are two locks)
		a, err := kind.of(mine, tg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := kind.of(other, tg)
		if err != nil {
			t.Fatal(err)
		}
		o, err := a.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h := a.holders(ctx); h != "" {
			t.Errorf("%s: the holder's own process names %q in its way, want nobody", kind.name, h)
		}
		if h := b.holders(ctx); h == "" {
			t.Errorf("%s: another process names nobody in its way while the lock is held", kind.name)
		}
		if err := o.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExecOnAReplica: a replica's address given for the master (a mistyped address) answers
// the first attempt with READONLY: exec exits 69 at once (Redis not serving writes), whatever
// --wait allows, forever included, saying it is a read-only replica, not 75 as for a busy lock
// (nobody holds it), with no "still waiting" notice, and runs nothing; for every kind of lock.
// (READONLY later in a wait may be a managed failover behind one address: the wait goes on.)
func TestExecOnAReplica(t *testing.T) {
	needReal(t)
	replica, err := redistest.StartReal()
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	host, port, _ := strings.Cut(srv.Addr, ":")
	rc := replica.Client()
	defer rc.Close()
	if err := rc.Do(context.Background(), "replicaof", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	dir, tg := t.TempDir(), target(t)
	ran := filepath.Join(dir, "ran")
	for _, kind := range [][]string{nil, {"-s"}, {"-x"}, {"--semaphore", "3"}} {
		for _, wait := range []string{"forever", "1", "0"} {
			args := append(append([]string{"exec"}, kind...), "--redis", replica.Addr, "--wait", wait, "CLI", tg, "--", "touch", ran)
			r := runBin(t, nil, args...)
			if r.code != exitUnavailable || !strings.Contains(r.stderr, "read-only replica") || strings.Contains(r.stderr, "not obtained") {
				t.Fatalf("%v: %v", args, r)
			}
			if strings.Contains(r.stderr, "failed while waiting") {
				t.Fatalf("%v: a notice that the wait goes on: %v", args, r)
			}
			if exists(ran) {
				t.Fatalf("%v: the command ran", args)
			}
		}
	}
}

// TestExecWaitBoundsEveryAttempt: --wait bounds the first attempt too: with Redis holding back
// writes longer than the wait, exec gives up at the wait (75, or 69 if Redis no longer
// answers), and the command does not run when the attempt lands later.
func TestExecWaitBoundsEveryAttempt(t *testing.T) {
	needReal(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	ctx := context.Background()
	ran := filepath.Join(t.TempDir(), "ran")
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "3000", "WRITE").Err(); err != nil { // a slow Redis
		t.Fatal(err)
	}
	defer admin.Do(ctx, "CLIENT", "UNPAUSE")
	r := runBin(t, nil, "exec", "--wait", "0.5", "--timeout", "10s", "--redis", srv.Addr, "CLI", target(t), "--", "touch", ran)
	if r.code != exitNotObtained && r.code != exitUnavailable || exists(ran) {
		t.Fatalf("exec --wait 0.5 with writes held back 3 s: %v; the command ran: %v", r, exists(ran))
	}
}

// TestExecSignalWhileWaiting: a signal ends the wait; nothing runs; status 128+signal.
func TestExecSignalWhileWaiting(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	a := holder(t, dir, tg)
	ran := filepath.Join(dir, "b-ran")
	b := start(t, nil, "exec", "--redis", srv.Addr, "CLI", tg, "--", "touch", ran)
	waitFor(t, "the second exec to wait", func() bool { return len(lockStatusOf(t, tg).Waiting) > 0 })
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := b.wait(t); r.code != 128+int(syscall.SIGTERM) || !strings.Contains(r.stderr, "while waiting") || exists(ran) {
		t.Fatal(r)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.wait(t); r.code != 7 {
		t.Fatal(r)
	}
}

// TestExecWaitThroughAnOutageIsTold: Redis dying while exec waits (by default for ever) is
// told on stderr once, in a line starting "dlock exec: ", and the wait goes on until it ends (here by a signal): nothing runs.
func TestExecWaitThroughAnOutageIsTold(t *testing.T) {
	needReal(t)
	s, err := redistest.StartReal()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir, tg := t.TempDir(), target(t)
	killLater(t, filepath.Join(dir, "pids"))
	script := fmt.Sprintf("echo $$ > %[1]s/pids; touch %[1]s/ready; while :; do sleep 0.02; done", dir)
	// (A lease of seconds: a stall of the loaded machine does not lose it before the outage,
	// which would leave the key to the second exec.)
	a := start(t, nil, "exec", "--redis", s.Addr, "--lease", "4s", "CLI", tg, "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "ready"))
	ran := filepath.Join(dir, "b-ran")
	b := start(t, nil, "exec", "--redis", s.Addr, "--timeout", "1s", "CLI", tg, "--", "touch", ran)
	c := s.Client()
	defer c.Close()
	waitFor(t, "the second exec to wait", func() bool {
		n, _ := c.ZCard(context.Background(), "{DLOCK_CLI_"+tg+"}:line").Result()
		return n > 0
	})
	s.Kill()
	// (one line starting "dlock exec: ", as every message of exec's)
	told := "dlock exec: Redis at " + s.Addr + " failed while waiting for lock CLI/" + tg
	waitFor(t, "the outage to be told", func() bool { return strings.Contains(b.stderr.String(), told) })
	if r := a.wait(t); r.code != exitLost {
		t.Fatalf("the holder: %v", r)
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := b.wait(t)
	if r.code != 128+int(syscall.SIGTERM) || strings.Count(r.stderr, told) != 1 || exists(ran) {
		t.Fatalf("%v; ran: %v", r, exists(ran))
	}
	checkGone(t, readPIDs(t, filepath.Join(dir, "pids")))
}

// TestExecForwardsSignals: SIGINT and SIGTERM sent to dlock reach the command, a stopped one
// too (it is continued, as kill(1) continues a stopped job); dlock exits with the command's
// status and releases the lock.
func TestExecForwardsSignals(t *testing.T) {
	needReal(t)
	for _, tc := range []struct {
		sig     syscall.Signal
		name    string // as trap knows it
		trap    string // the command's trap for sig, "" for none
		stopped bool   // the command has stopped itself (SIGSTOP) when the signal comes
		code    int
	}{
		{syscall.SIGINT, "INT", `echo INT > %[1]s/got; exit 5`, false, 5},
		{syscall.SIGTERM, "TERM", ``, false, 128 + int(syscall.SIGTERM)},
		{syscall.SIGTERM, "TERM", `echo TERM > %[1]s/got; exit 6`, true, 6},
	} {
		t.Run(fmt.Sprintf("%v/stopped=%v", tc.sig, tc.stopped), func(t *testing.T) {
			dir, tg := t.TempDir(), target(t)
			stop := ""
			if tc.stopped {
				stop = "kill -STOP $$\n"
			}
			script := fmt.Sprintf(`echo $$ > %[1]s/pids
touch %[1]s/ready
`+stop+`while :; do sleep 0.02; done`, dir)
			if tc.trap != "" {
				script = fmt.Sprintf(`trap '`+tc.trap+`' `+tc.name+"\n", dir) + script
			}
			killLater(t, filepath.Join(dir, "pids"))
			p := start(t, nil, "exec", "--redis", srv.Addr, "CLI", tg, "--", "sh", "-c", script)
			waitFile(t, filepath.Join(dir, "ready"))
			if tc.stopped {
				pid := readPIDs(t, filepath.Join(dir, "pids"))[0]
				waitFor(t, "the command to stop", func() bool { return state(pid) == "T" })
			}
			if err := p.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			r := p.wait(t)
			if r.code != tc.code {
				t.Fatalf("want exit status %d; %v", tc.code, r)
			}
			if tc.trap != "" && !exists(filepath.Join(dir, "got")) {
				t.Fatal("the command's trap did not run")
			}
			checkGone(t, readPIDs(t, filepath.Join(dir, "pids")))
			checkFreed(t, tg)
		})
	}
}

// TestExecLostTerm: "dlock release --force" takes the lock away; the holder's command gets
// SIGTERM, a stopped one too (it is continued), and dlock exits 76.
func TestExecLostTerm(t *testing.T) {
	needReal(t)
	for _, stopped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stopped=%v", stopped), func(t *testing.T) { lostTerm(t, stopped) })
	}
}

// lostTerm is TestExecLostTerm with a command that has stopped itself (SIGSTOP), or not, when
// the lock is lost.
func lostTerm(t *testing.T, stopped bool) {
	dir, tg := t.TempDir(), target(t)
	killLater(t, filepath.Join(dir, "pids"))
	stop := ""
	if stopped {
		stop = "kill -STOP $$\n"
	}
	script := fmt.Sprintf(`trap 'echo TERM > %[1]s/got; exit 9' TERM
echo $$ > %[1]s/pids
touch %[1]s/ready
`+stop+`while :; do sleep 0.02; done`, dir)
	// A long grace: dlock ending proves the command heeded SIGTERM. (A lease of seconds: a
	// stall of the loaded machine does not lose it before the release --force below.)
	p := start(t, nil, "exec", "--redis", srv.Addr, "--lease", "4s", "--grace", "1m", "CLI", tg, "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "ready"))
	if stopped {
		pid := readPIDs(t, filepath.Join(dir, "pids"))[0]
		waitFor(t, "the command to stop", func() bool { return state(pid) == "T" })
	}
	holder := lockStatusOf(t, tg).Holder

	r := runIn("release", "--force", "--holder", holder, "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || holder == "" || !strings.Contains(r.stdout, "removed holder "+holder) {
		t.Fatalf("release --force (holder %q): %v", holder, r)
	}
	r = p.wait(t)
	if r.code != exitLost || !strings.Contains(r.stderr, "lost while the command ran") || strings.Contains(r.stderr, "SIGKILL after --grace") {
		t.Fatal(r)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "got")); string(b) != "TERM\n" {
		t.Fatalf("the command did not get SIGTERM (%q); %v", b, r)
	}
	checkGone(t, readPIDs(t, filepath.Join(dir, "pids")))
}

// TestExecLostWithNobodyReadingItsErrors: the same when nobody reads dlock's standard error any
// more (a log shipper that died, "dlock exec ... 2>&1 | head"): writing the loss's message must
// not kill dlock (SIGPIPE) before it stops the command, which would run on without the lock.
func TestExecLostWithNobodyReadingItsErrors(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	killLater(t, filepath.Join(dir, "pids"))
	script := fmt.Sprintf(`exec 2>/dev/null # (sh's own notices would die of the broken pipe)
trap 'touch %[1]s/got; exit 9' TERM
echo $$ > %[1]s/pids
touch %[1]s/ready
while :; do sleep 0.02; done`, dir)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // nobody reads dlock's standard error
	// (A lease of seconds: a stall of the loaded machine does not lose it before the release
	// --force below.)
	cmd := exec.Command(bin, "exec", "--redis", srv.Addr, "--lease", "4s", "--grace", "1m", "CLI", tg, "--", "sh", "-c", script)
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	waitFile(t, filepath.Join(dir, "ready"))
	holder := lockStatusOf(t, tg).Holder
	if res := runIn("release", "--force", "--holder", holder, "--redis", srv.Addr, "CLI", tg); res.code != 0 {
		t.Fatal(res)
	}
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatalf("dlock exec did not end within %v of the loss", patience)
	}
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() || cmd.ProcessState.ExitCode() != exitLost {
		t.Errorf("dlock exec ended with %v, want exit status %d", cmd.ProcessState, exitLost)
	}
	if !exists(filepath.Join(dir, "got")) {
		t.Errorf("the command never got SIGTERM")
	}
	checkGone(t, readPIDs(t, filepath.Join(dir, "pids")))
}

// TestExecLostKill: the key is deleted from outside; a command (and its child) that ignore
// SIGTERM are killed after --grace, and dlock exits 76 leaving no process behind.
func TestExecLostKill(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	killLater(t, filepath.Join(dir, "pids"))
	script := fmt.Sprintf(`trap '' TERM
echo $$ > %[1]s/pids
sleep 60 &
echo $! >> %[1]s/pids
touch %[1]s/ready
wait`, dir)
	// (A lease of seconds: a stall of the loaded machine does not lose it before the DEL below.)
	p := start(t, nil, "exec", "--redis", srv.Addr, "--lease", "4s", "--grace", "300ms", "CLI", tg, "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "ready"))
	pids := readPIDs(t, filepath.Join(dir, "pids"))
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}

	c := srv.Client()
	defer c.Close()
	if n, err := c.Del(context.Background(), "DLOCK_CLI_"+tg).Result(); err != nil || n != 1 {
		t.Fatalf("DEL: %d, %v", n, err)
	}
	r := p.wait(t)
	if r.code != exitLost || !strings.Contains(r.stderr, "lost while the command ran") ||
		!strings.Contains(r.stderr, "sending SIGKILL") || !strings.Contains(r.stderr, "SIGKILL sent after --grace") {
		t.Fatal(r)
	}
	checkGone(t, pids)
}

// TestExecRedisDies: when Redis goes away, renewals fail until the lease runs out; the lock is
// lost, the command stopped and dlock exits 76 without hanging on the dead Redis, saying why
// the renewals failed (Redis refused the connection), not only that they found no answer
// before their deadline.
func TestExecRedisDies(t *testing.T) {
	needReal(t)
	if !srv.CanRestart() {
		t.Skip("needs a redis-server started by the test")
	}
	dir, tg := t.TempDir(), target(t)
	killLater(t, filepath.Join(dir, "pids"))
	script := fmt.Sprintf(`echo $$ > %[1]s/pids
touch %[1]s/ready
while :; do sleep 0.02; done`, dir)
	p := start(t, nil, "exec", "--redis", srv.Addr, "--lease", "1s", "--timeout", "1s", "CLI", tg, "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "ready"))
	srv.Kill()
	defer func() {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	}()
	r := p.wait(t)
	if r.code != exitLost || !strings.Contains(r.stderr, "lost while the command ran") || !strings.Contains(r.stderr, "connection refused") {
		t.Fatal(r)
	}
	checkGone(t, readPIDs(t, filepath.Join(dir, "pids")))
}

// TestExecFoundLostAtRelease: a key removed by hand while the command ran is found lost at the
// release: exec exits 76 and says so, naming the lock once (as TYPE/TARGET).
func TestExecFoundLostAtRelease(t *testing.T) {
	needReal(t)
	dir, tg := t.TempDir(), target(t)
	a := holder(t, dir, tg, "--lease", "20s")
	c := srv.Client()
	defer c.Close()
	if err := c.Del(context.Background(), "DLOCK_CLI_"+tg).Err(); err != nil { // an operator removes it by hand
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := a.wait(t)
	if r.code != exitLost || !strings.Contains(r.stderr, "lock CLI/"+tg+" was found lost at release") || strings.Contains(r.stderr, "DLOCK_CLI_"+tg) || strings.Count(r.stderr, "at release") != 1 {
		t.Fatalf("exec whose key was removed: want status %d and the lock named once; %v", exitLost, r)
	}
}
