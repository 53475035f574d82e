package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/internal/redistest"
)

var (
	// bin is the dlock binary built by TestMain, run as a subprocess where signals matter.
	bin string
	// srv is the Redis of the tests (a real redis-server unless none could be started).
	srv *redistest.Server
	// raceEnabled is set when the tests run with -race; the binary is then built with it too.
	raceEnabled bool
)

// patience turns a hang into a failure; no test expects to come near it.
const patience = 60 * time.Second

// unreachableAddr is an address where nothing listens.
const unreachableAddr = "127.0.0.1:1"

func TestMain(m *testing.M) {
	os.Unsetenv("DLOCK_REDIS")
	os.Unsetenv("REDIS_URL")
	dir, err := os.MkdirTemp("", "dlock-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "dlock")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := redistest.Main(m, func(s *redistest.Server) { srv = s })
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// result is how a dlock run ended.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runIn runs dlock in this process (for what involves no signals).
func runIn(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(args, cli{stdout: &stdout, stderr: &stderr})
	return result{code, stdout.String(), stderr.String()}
}

// proc is a dlock binary running as a subprocess.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	res            result
}

// out returns what p has written on stdout so far.
func (p *proc) out() string { return p.stdout.String() }

// syncBuffer is a bytes.Buffer that a test may read while a process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the dlock binary with args; env is added to the environment.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	// The race detector waits a second at exit unless told not to.
	p.cmd.Env = append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second // a grandchild keeping the pipes open must not hang the test
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		_ = p.cmd.Wait()
		p.res = result{p.cmd.ProcessState.ExitCode(), p.stdout.String(), p.stderr.String()}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		// SIGTERM first: dlock passes it on to its command's process group, which SIGKILL
		// would leave running.
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for p to end.
func (p *proc) wait(t *testing.T) result {
	t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(patience):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("dlock %v did not end within %v\n%v", p.cmd.Args[1:], patience, p.res)
		return result{}
	}
}

// runBin runs the dlock binary to its end.
func runBin(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return start(t, env, args...).wait(t)
}

// waitFor polls cond until it holds, failing t after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", patience, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	waitFor(t, path, func() bool { _, err := os.Stat(path); return err == nil })
}

// exists reports whether path exists.
func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// target returns a lock target unique to t.
func target(t *testing.T) string {
	return strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + "." + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// needReal skips (or, with DLOCK_REQUIRE_REDIS=1, fails) t without a real redis-server.
func needReal(t *testing.T) { t.Helper(); srv.NeedReal(t) }

// checkFreed fails t if CLI/target's lock is still held once exec ended.
func checkFreed(t *testing.T, target string) {
	t.Helper()
	if st := lockStatusOf(t, target); st.Held {
		t.Fatalf("held after exec ended: %+v", st)
	}
}

// lockStatusOf returns "dlock status --json" of CLI/target.
func lockStatusOf(t *testing.T, target string) lockStatus {
	t.Helper()
	r := runIn("status", "--redis", srv.Addr, "--json", "CLI", target)
	if r.code != 0 {
		t.Fatalf("status: %v", r)
	}
	var st lockStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return st
}

// gone reports whether process pid has ended (a zombie counts: it runs no more).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// readPIDs reads the process ids a child script wrote into path, one a line.
func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		pids = append(pids, n)
	}
	return pids
}

// killLater kills the listed processes when t ends, in case a failing test left them.
func killLater(t *testing.T, path string) {
	t.Cleanup(func() {
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil && n > 1 {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
	})
}

// checkGone fails t unless every listed process ends (dlock must leave none behind).
func checkGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		waitFor(t, fmt.Sprintf("process %d to end", pid), func() bool { return gone(pid) })
	}
}
