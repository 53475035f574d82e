// Package redistest gives tests a Redis to talk to: the server named by REDIS_ADDR, else a
// redis-server started on a free loopback port with no persistence, else (unless
// DLOCK_REQUIRE_REDIS=1) an in-process miniredis.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is a Redis for tests.
type Server struct {
	// Addr is host:port.
	Addr string
	// Real is true for a real redis-server (started here or named by REDIS_ADDR).
	Real bool
	// Why says why the server is not real, for skip messages.
	Why string

	external bool
	port     int
	dir      string // the server's own working directory, removed by Close
	cmd      *exec.Cmd
	mini     *miniredis.Miniredis
}

// Required reports whether DLOCK_REQUIRE_REDIS=1 is set.
func Required() bool { return os.Getenv("DLOCK_REQUIRE_REDIS") == "1" }

// Start returns a Redis: REDIS_ADDR, else a started redis-server, else miniredis. With
// DLOCK_REQUIRE_REDIS=1 and no real server it returns an error instead of miniredis.
func Start() (*Server, error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return &Server{Addr: addr, Real: true, external: true}, nil
	}
	s, err := StartReal()
	if err == nil {
		return s, nil
	}
	if Required() {
		return nil, fmt.Errorf("DLOCK_REQUIRE_REDIS=1 but no real Redis: %w", err)
	}
	m, merr := miniredis.Run()
	if merr != nil {
		return nil, merr
	}
	return &Server{Addr: m.Addr(), mini: m, Why: "no real Redis (" + err.Error() + "); using miniredis"}, nil
}

// StartReal starts redis-server from PATH on a free loopback port.
func StartReal() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not on PATH and REDIS_ADDR not set")
	}
	var last error
	for range 5 {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), Real: true, port: ports[0], dir: dir}
		if last = s.launch(bin); last == nil {
			return s, nil
		}
		s.Close()
	}
	return nil, last
}

// launch starts redis-server in the server's own directory, with no data: a replica writes
// the data it receives from its master to dump.rdb there, which a redis-server started in that
// directory would load (in a shared one, such as /tmp, any server's start or Restart). Unlike
// spawn, it leaves no goroutine waiting for the process, which lives as long as the test binary
// or until Kill: tests that check for leaked goroutines run while it restarts.
func (s *Server) launch(bin string) error {
	if err := os.Remove(filepath.Join(s.dir, "dump.rdb")); err != nil && !os.IsNotExist(err) {
		return err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--protected-mode", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c.Ping(context.Background()).Err() == nil {
			if err := answersAs(c, cmd.Process.Pid); err != nil {
				s.Close()
				return err
			}
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Close()
	return fmt.Errorf("redis-server on %s did not answer within 10s", s.Addr)
}

// Kill ends a started redis-server with SIGKILL (it keeps nothing).
func (s *Server) Kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Restart starts the killed redis-server again, empty, on the same port.
func (s *Server) Restart() error {
	if s.cmd != nil || s.port == 0 {
		return fmt.Errorf("redistest: Restart needs a started server that was killed")
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	return s.launch(bin)
}

// Close stops what Start started.
func (s *Server) Close() {
	s.Kill()
	if s.mini != nil {
		s.mini.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// Client returns a new client for the server; the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr})
}

// NeedReal skips t when the server is not a real redis-server, saying why; with
// DLOCK_REQUIRE_REDIS=1 it fails t instead.
func (s *Server) NeedReal(t testing.TB) {
	t.Helper()
	if s.Real {
		return
	}
	if Required() {
		t.Fatalf("needs a real redis-server: %s", s.Why)
	}
	t.Skipf("needs a real redis-server: %s", s.Why)
}

// CanRestart reports whether Kill and Restart work (a redis-server started here).
func (s *Server) CanRestart() bool { return s.port != 0 }

// Main starts a server for a test binary, runs the tests with it and stops it. It prints why
// the server is not real, if it is not.
func Main(m *testing.M, use func(*Server)) int {
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		return 1
	}
	defer s.Close()
	if !s.Real {
		fmt.Fprintln(os.Stderr, "redistest:", s.Why)
	}
	use(s)
	return m.Run()
}
