package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every redis-server the tests start runs on ports from freePorts. A port is free only a
// moment: another process (another test binary's server, a Cluster node's bus) may take it
// before the server binds it. The server then exits at start, and its launcher starts it again
// on new ports; and a server counts as up only once it answers with its own process id
// (answersAs), so a stranger on the port never passes for it.

// errExited: the server exited before it answered, most often because a port was taken.
var errExited = errors.New("exited at start")

// freePorts returns n distinct loopback ports that were free a moment ago (each is held until
// all are chosen).
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// spawn starts bin with args in dir, its output to out (nil: discarded), and waits until the
// server that c reaches says it is this process, the process exits (the error wraps
// errExited), or readyTimeout passes (it is killed). It returns the process and a channel
// closed once the process has exited and been waited for.
func spawn(bin, dir string, args []string, out io.Writer, c *redis.Client) (*exec.Cmd, chan struct{}, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := answersAs(c, cmd.Process.Pid)
		if err == nil {
			return cmd, exited, nil
		}
		select {
		case <-exited:
			return nil, nil, fmt.Errorf("%w: %v", errExited, err)
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return nil, nil, fmt.Errorf("no answer within %v: %w", readyTimeout, err)
		}
	}
}

// answersAs returns an error unless the server c reaches is process pid.
func answersAs(c *redis.Client, pid int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	if got := parseInfo(info)["process_id"]; got != strconv.Itoa(pid) {
		return fmt.Errorf("another server (pid %s) answers on %s", got, c.Options().Addr)
	}
	return nil
}

// Launch starts redis-server with the command line that args gives for a directory of its own
// and n distinct loopback ports, waits until the server answers the client that client then
// makes for those ports, and kills it when t ends. A server that exits at start is started again on
// new ports, up to five times; its output is shown when it fails. Without redis-server Launch
// skips t (fails it with DLOCK_REQUIRE_REDIS=1).
func Launch(t testing.TB, n int, args func(dir string, ports []string) []string, client func(ports []string) *redis.Client) []string {
	t.Helper()
	bin, err := redisServer()
	if err != nil {
		if Required() {
			t.Fatal("DLOCK_REQUIRE_REDIS=1 but no redis-server on PATH")
		}
		t.Skip("needs redis-server on PATH")
	}
	for attempt := 1; ; attempt++ {
		nums, err := freePorts(n)
		if err != nil {
			t.Fatal(err)
		}
		ports := make([]string, n)
		for i, p := range nums {
			ports[i] = strconv.Itoa(p)
		}
		dir := t.TempDir()
		log, err := os.Create(filepath.Join(dir, "log"))
		if err != nil {
			t.Fatal(err)
		}
		a := args(dir, ports)
		c := client(ports)
		cmd, exited, err := spawn(bin, dir, a, log, c)
		_ = c.Close()
		if err == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
				_ = log.Close()
			})
			return ports
		}
		_ = log.Close()
		if errors.Is(err, errExited) && attempt < 5 {
			continue
		}
		b, _ := os.ReadFile(log.Name())
		t.Fatalf("redis-server on ports %v, start %d: %v; its output: %s", ports, attempt, err, b)
	}
}
