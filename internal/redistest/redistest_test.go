package redistest

import (
	"os/exec"
	"strconv"
	"testing"
)

// A server started on a port another server took first fails to start, rather than handing
// its caller the other server (whose keys another test binary writes).
func TestStartOnATakenPortFails(t *testing.T) {
	first, err := StartReal()
	if err != nil {
		if Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer first.Close()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	second := &Server{Addr: first.Addr, Real: true, port: first.port}
	if err := second.launch(bin); err == nil {
		second.Close()
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
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("the first server after the attempts: %v", err)
	}
}
