package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedisServer: redis-server is not on PATH. The Need* helpers skip on it unless
// DLOCK_REQUIRE_REDIS=1.
var ErrNoRedisServer = errors.New("redistest: redis-server not on PATH")

// Generous bounds for the launchers: they only turn a hang into an error, so they are set for a
// loaded 2-core CI machine running several test binaries at once.
const (
	readyTimeout  = 60 * time.Second // a started process answers
	settleTimeout = 60 * time.Second // a deployment agrees on its topology
	pollEvery     = 50 * time.Millisecond
)

func redisServer() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNoRedisServer
	}
	return bin, nil
}

// proc is one redis-server process started here, in a temporary directory of its own that
// outlives restarts (a cluster node keeps its nodes.conf there). A restart reuses the ports.
type proc struct {
	bin  string
	dir  string
	port int
	addr string
	args []string // the command line after the binary
	log  string   // the log file

	id string // cluster node id, set once at start

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while not running; guarded by mu
	exited chan struct{} // closed once cmd has been waited for; guarded by mu
	admin  *redis.Client // nil while not running; guarded by mu
}

// startProc makes a temporary directory and starts a redis-server in it. args builds the
// command line for the process's directory and n distinct free ports, the first its client
// port; a process that exits before it answers (a port taken meanwhile by someone else) is
// started again on new ports.
func startProc(bin, name string, n int, args func(dir string, ports []int) ([]string, error)) (*proc, error) {
	dir, err := os.MkdirTemp("", "redistest-"+name+"-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		ports, err := freePorts(n)
		if err != nil {
			last = err
			continue
		}
		a, err := args(dir, ports)
		if err != nil {
			last = err
			continue
		}
		p := &proc{bin: bin, dir: dir, port: ports[0], addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
			args: a, log: filepath.Join(dir, "redis.log")}
		if last = p.start(); last == nil {
			return p, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: start %s: %w", name, last)
}

// start runs the process (which must not be running) and waits until it answers.
func (p *proc) start(extra ...string) error {
	admin := redis.NewClient(&redis.Options{Addr: p.addr, Protocol: 2, DisableIdentity: true,
		MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, PoolSize: 2})
	cmd, exited, err := spawn(p.bin, p.dir, append(append([]string(nil), p.args...), extra...), nil, admin)
	if err != nil {
		_ = admin.Close()
		return fmt.Errorf("redis-server on %s: %w; %s", p.addr, err, p.logTail())
	}
	p.mu.Lock()
	p.cmd, p.exited, p.admin = cmd, exited, admin
	p.mu.Unlock()
	return nil
}

// running reports whether the process was started and not killed.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	_ = p.admin.Close()
	p.cmd, p.admin = nil, nil
}

// remove kills the process and deletes its directory.
func (p *proc) remove() {
	p.kill()
	_ = os.RemoveAll(p.dir)
}

// do runs one admin command with a bounded context.
func (p *proc) do(args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.mu.Lock()
	admin := p.admin
	p.mu.Unlock()
	if admin == nil {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(fmt.Errorf("redistest: %s is not running", p.addr))
		return cmd
	}
	cmd := redis.NewCmd(ctx, args...)
	_ = admin.Process(ctx, cmd)
	return cmd
}

// info returns the fields of INFO section (or of CLUSTER INFO, with section "cluster info").
func (p *proc) info(section ...any) (map[string]string, error) {
	s, err := p.do(section...).Text()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

func parseInfo(s string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// logTail returns the last lines of the process's log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "no log: " + err.Error()
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "log of " + p.addr + ": " + string(bytes.Join(lines, []byte(" | ")))
}

// pid returns the process id, or 0 when not running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// waitFor polls cond until it returns nil or timeout passes; the error then names what was
// awaited and cond's last complaint.
func waitFor(what string, timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s: not done after %v: %w", what, timeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// dataArgs are the settings every data node (not a sentinel) runs with: no persistence, quick
// replication.
func dataArgs(dir string, port int) []string {
	return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"}
}

func contextFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
