package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startReal starts a redis-server for the test, or skips without one (fails with
// DLOCK_REQUIRE_REDIS=1).
func startReal(t *testing.T) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil && !Required() {
		t.Skip("no redis-server on PATH")
	}
	s, err := StartReal()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A replica writes the data it receives from its master to dump.rdb in its working directory,
// which a redis-server started there loads. The servers started here shared one (the system's
// temporary directory), so a server started, or restarted "empty", after a replica had synced
// came up with that replica's keys: another test's, or another package's. Each now has its own.
func TestRestartIsEmptyAfterAReplicaSynced(t *testing.T) {
	ctx := context.Background()
	master, replica := startReal(t), startReal(t)
	mc, rc := master.Client(), replica.Client()
	defer mc.Close()
	defer rc.Close()
	if err := mc.Set(ctx, "redistest:synced", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(master.Addr, ":")
	if err := rc.Do(ctx, "replicaof", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); rc.Get(ctx, "redistest:synced").Val() != "1"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not sync")
		}
	}
	other := startReal(t)
	other.Kill()
	if err := other.Restart(); err != nil {
		t.Fatal(err)
	}
	oc := other.Client()
	defer oc.Close()
	if n, err := oc.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("a restarted server holds %d keys (%v), want none", n, err)
	}
}

// A server started on a port another server took first fails to start, rather than handing
// its caller the other server (whose keys another test binary writes).
func TestStartOnATakenPortFails(t *testing.T) {
	first := startReal(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	second := &Server{Addr: first.Addr, Real: true, port: first.port, dir: t.TempDir()}
	if err := second.launch(bin); err == nil {
		second.Kill()
		t.Fatalf("a second server on %s started, sharing the first one's", first.Addr)
	}
	p := &proc{bin: bin, dir: t.TempDir(), port: first.port, addr: first.Addr,
		args: []string{"--port", strconv.Itoa(first.port), "--bind", "127.0.0.1", "--save", ""}}
	if err := p.start(); err == nil {
		p.kill()
		t.Fatalf("a second process on %s started, sharing the first one's", first.Addr)
	}
	c := first.Client()
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the first server after the attempts: %v", err)
	}
}

// TestLaunchMovesOffATakenPort: a redis-server whose port another process took before it bound
// it exits, and Launch starts it again on new ports, which it returns; the stranger on the
// taken port never passes for it.
func TestLaunchMovesOffATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	go func() { // a stranger that hangs up on everyone
		for {
			c, err := taken.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	takenPort := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	starts := 0
	port := Launch(t, 1, func(dir string, ports []string) []string {
		starts++
		if starts == 1 {
			ports = []string{takenPort}
		}
		return []string{"--port", ports[0], "--bind", "127.0.0.1", "--save", "", "--dir", dir}
	}, func(ports []string) *redis.Client {
		if starts == 1 {
			ports = []string{takenPort}
		}
		return redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + ports[0], MaxRetries: -1})
	})[0]
	if starts != 2 || port == takenPort {
		t.Fatalf("started %d times, on port %s (taken %s); want a second start on a free port", starts, port, takenPort)
	}
}
