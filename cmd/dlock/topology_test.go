package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/internal/redistest"
)

// TestCluster: Cluster nodes named as a list, as one node with --cluster, or as a URL with
// addr= parameters all reach the lock; a single node without --cluster is told to add it.
func TestCluster(t *testing.T) {
	c := redistest.NeedCluster(t, 3, 0)
	addrs := c.Addrs()
	// A target whose key lives on another node than the first.
	var tg string
	for i := 0; ; i++ {
		tg = target(t) + strconv.Itoa(i)
		if m := c.MasterFor("DLOCK_CLI_" + tg); m != "" && m != addrs[0] {
			break
		}
	}
	for _, redisArgs := range [][]string{
		{"--redis", strings.Join(addrs, ",")},
		{"--cluster", "--redis", addrs[0]},
		{"--redis", "redis://" + addrs[0] + "?addr=" + addrs[1]},
	} {
		t.Run(strings.Join(redisArgs, " "), func(t *testing.T) {
			p := start(t, nil, append(append([]string{"lock"}, redisArgs...), "CLI", tg)...)
			f := holdingLine(t, waitLine(t, p))
			r := runBin(t, nil, append(append([]string{"status", "--json"}, redisArgs...), "CLI", tg)...)
			if r.code != 0 || !strings.Contains(r.stdout, `"holder":"`+f["DLOCK_HOLDER"]+`"`) {
				t.Fatal(r)
			}
			if r := runBin(t, nil, append(append([]string{"exec", "-n"}, redisArgs...), "CLI", tg, "true")...); r.code != exitNotObtained {
				t.Fatal(r)
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if r := p.wait(t); r.code != 0 {
				t.Fatal(r)
			}
		})
	}
	// A single node named without --cluster is refused whichever node holds the key: one that
	// holds it would answer, on plain channels where the Cluster's processes use sharded ones.
	var here string // a target whose key lives on the first node
	for i := 0; ; i++ {
		here = target(t) + "here" + strconv.Itoa(i)
		if c.MasterFor("DLOCK_CLI_"+here) == addrs[0] {
			break
		}
	}
	for _, tg := range []string{tg, here} {
		for _, cmd := range [][]string{{"status"}, {"exec", "-n"}} {
			args := append(append([]string{}, cmd...), "--redis", addrs[0], "CLI", tg)
			if cmd[0] == "exec" {
				args = append(args, "true")
			}
			r := runBin(t, nil, args...)
			if r.code != exitUnavailable || !strings.Contains(r.stderr, "is part of a Redis Cluster") || !strings.Contains(r.stderr, "--cluster") {
				t.Fatalf("%v on %s: %+v", cmd, tg, r)
			}
		}
	}
}

// TestClusterShardDown: with one master of a Cluster down (cluster-require-full-coverage no,
// so that the others serve their slots), a lock on another shard is taken, and a wait for one
// on the dead shard ends as Redis unavailable (69), not as a lock held elsewhere (75): the
// ping that tells an outage from a busy lock may go to a live master.
func TestClusterShardDown(t *testing.T) {
	c := redistest.NeedCluster(t, 3, 0)
	addrs := c.Addrs()
	for _, a := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: a})
		err := rc.ConfigSet(context.Background(), "cluster-require-full-coverage", "no").Err()
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	down, live := target(t)+"down", ""
	dead, err := c.KillMaster("DLOCK_CLI_" + down)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if live = target(t) + strconv.Itoa(i); c.MasterFor("DLOCK_CLI_"+live) != dead {
			break
		}
	}
	nodes := strings.Join(addrs, ",")
	if r := runBin(t, nil, "exec", "-n", "--redis", nodes, "CLI", live, "true"); r.code != 0 {
		t.Fatalf("a lock on a live shard beside a dead master: %+v", r)
	}
	if r := runBin(t, nil, "exec", "-w", "1s", "--timeout", "2s", "--redis", nodes, "CLI", down, "true"); r.code != exitUnavailable {
		t.Fatalf("a wait for a lock on the dead shard: %+v; want exit %d", r, exitUnavailable)
	}
}

// TestSentinel: the master that Sentinels watch, named by --sentinel-master and their
// addresses or by a URL with master_name=, holds the lock.
func TestSentinel(t *testing.T) {
	s := redistest.NeedSentinel(t, 2)
	sa := s.SentinelAddrs()
	tg := target(t)
	for _, redisArgs := range [][]string{
		{"--sentinel-master", s.MasterName(), "--redis", strings.Join(sa, ",")},
		{"--redis", "redis://" + sa[0] + "/0?master_name=" + s.MasterName() + "&addr=" + sa[1]},
	} {
		t.Run(strings.Join(redisArgs, " "), func(t *testing.T) {
			p := start(t, nil, append(append([]string{"lock"}, redisArgs...), "CLI", tg)...)
			f := holdingLine(t, waitLine(t, p))
			r := runBin(t, nil, append(append([]string{"status"}, redisArgs...), "CLI", tg)...)
			if r.code != 0 || !strings.Contains(r.stdout, "holder:      "+f["DLOCK_HOLDER"]) {
				t.Fatal(r)
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if r := p.wait(t); r.code != 0 {
				t.Fatal(r)
			}
		})
	}
}

// TestSentinelOneMute: a Sentinel that takes connections and never answers (a stopped one,
// here a socket nobody accepts on) beside one that answers does not stop a command within its
// default --timeout, whichever comes first (go-redis's first lookup of the master waits for
// every Sentinel, up to the client's read timeout).
func TestSentinelOneMute(t *testing.T) {
	s := redistest.NeedSentinel(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // (the kernel completes each dial; nothing reads)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	mute, live := ln.Addr().String(), s.SentinelAddrs()[0]
	for _, addrs := range []string{mute + "," + live, live + "," + mute} {
		r := runBin(t, nil, "status", "--sentinel-master", s.MasterName(), "--redis", addrs, "CLI", target(t))
		if r.code != 0 || !strings.Contains(r.stdout, "state:") {
			t.Fatalf("status with Sentinels %s: %v", addrs, r)
		}
	}
}

// TestMisdirectedAddress: an address that reaches no usable master because it names another
// kind of server than the flags say — Sentinels asked for a master they do not watch, a plain
// server named as Sentinels or as a Cluster, a Sentinel named as the server — is told in one
// line saying what is wrong (instead of go-redis's "all sentinels ... are unreachable"), and
// every command exits 69, as for a Cluster node named as a single server (TestCluster).
func TestMisdirectedAddress(t *testing.T) {
	s := redistest.NeedSentinel(t, 2)
	sa := s.SentinelAddrs()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sentinel-master", "no-such-master", "--redis", strings.Join(sa, ",")}, `watch no master named "no-such-master"`},
		{[]string{"--redis", "redis://" + sa[0] + "?master_name=no-such-master"}, `watch no master named "no-such-master"`},
		{[]string{"--sentinel-master", s.MasterName(), "--redis", srv.Addr}, "not a Sentinel"},
		{[]string{"--cluster", "--redis", srv.Addr}, "not a Cluster node"},
		{[]string{"--redis", sa[0]}, "a Sentinel is named with --sentinel-master"},
	} {
		for _, cmd := range [][]string{{"status"}, {"lock"}, {"exec", "-n"}, {"exec", "-w", "1"}} {
			t.Run(strings.Join(append(cmd, tc.args...), " "), func(t *testing.T) {
				args := append(append(append([]string(nil), cmd...), tc.args...), "CLI", target(t))
				if cmd[0] == "exec" {
					args = append(args, "--", "true")
				}
				r := runBin(t, nil, args...)
				if r.code != exitUnavailable || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "unreachable") ||
					strings.Contains(r.stderr, "with args") || // (not the script's arguments)
					strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
					t.Fatal(r)
				}
			})
		}
	}
}

// TestSentinelMasterUnreachable: Sentinels that answer with a master address no connection
// can be made to (a master down, or announced at an address not reachable from here) are told
// apart from Sentinels that do not answer and from a master that does not answer: the message
// names the master's address and the cause — the refusal, the URL's dial_timeout, or --timeout
// spent dialling it — whatever --timeout allows; and with no Sentinel listening, a short
// --timeout does not turn their refusals into "did not answer". Exit 69 in each case.
func TestSentinelMasterUnreachable(t *testing.T) {
	s := redistest.NeedSentinel(t, 1)
	sentinel := s.SentinelAddrs()[0]
	silent := silentAddr(t)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	ctx := context.Background()
	for name, addr := range map[string]string{"refusing": unreachableAddr, "silent": silent} {
		host, port, _ := net.SplitHostPort(addr)
		if err := sc.Monitor(ctx, name, host, port, "1").Err(); err != nil {
			t.Fatal(err)
		}
		defer sc.Remove(ctx, name)
	}
	for _, tc := range []struct {
		args []string
		want []string // in the message, all of them
	}{
		{[]string{"--sentinel-master", "refusing", "--redis", sentinel}, []string{"master", unreachableAddr, "connection refused"}},
		{[]string{"--sentinel-master", "refusing", "--redis", sentinel, "--timeout", "300ms"}, []string{"master", unreachableAddr, "connection refused"}},
		// (--timeout well past go-redis's tries: each of its retries dials twice, 300 ms each,
		// and with 3s a loaded machine spent --timeout first)
		{[]string{"--redis", "redis://" + sentinel + "?master_name=silent&dial_timeout=300ms", "--timeout", "15s"}, []string{"master", silent, "dial_timeout 300ms"}},
		{[]string{"--sentinel-master", "silent", "--redis", sentinel, "--timeout", "1s"}, []string{"master", silent, "no connection", "1s (--timeout)"}},
		{[]string{"--sentinel-master", "m", "--redis", unreachableAddr + ",127.0.0.1:2", "--timeout", "300ms"}, []string{"Sentinel", unreachableAddr, "127.0.0.1:2", "connection refused"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runBin(t, nil, append(append([]string{"status"}, tc.args...), "CLI", "x")...)
			ok := r.code == exitUnavailable && strings.Count(strings.TrimSpace(r.stderr), "\n") == 0 && !strings.Contains(r.stderr, "did not answer")
			for _, w := range tc.want {
				ok = ok && strings.Contains(r.stderr, w)
			}
			if !ok {
				t.Fatalf("want exit 69 and one line with %q, got %v", tc.want, r)
			}
		})
	}
}

// silentAddr returns the address of a listening socket whose backlog is full for as long as t
// runs: a dial there neither connects nor is refused, as to a host that drops packets.
func silentAddr(t *testing.T) string {
	t.Helper()
	return silentAddrAt(t, 0)
}

// silentAddrAt is silentAddr on loopback port port (0: any free port).
func silentAddrAt(t *testing.T, port int) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: port}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	for i := 0; ; i++ { // fill the backlog: until a dial no longer connects
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
		if i == 16 {
			t.Fatal("the backlog of a listen(0) socket does not fill")
		}
	}
	return addr
}

// TestClusterNodeRefusedUnderLeastPrivilege: under the README's least-privilege user with its
// Cluster rules (no INFO), a Cluster node named as a single server is refused as it is without
// the ACL, whichever node it is — also the one that holds the slot of the probe's key.
func TestClusterNodeRefusedUnderLeastPrivilege(t *testing.T) {
	c := redistest.NeedCluster(t, 3, 0)
	rules := redistest.ACLRules(aclPwd, redistest.ACLCommands, redistest.ACLClusterCommands)
	for _, addr := range c.Addrs() {
		admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		err := admin.ACLSetUser(context.Background(), aclUser, rules...).Err()
		admin.Close()
		if err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", addr, err)
		}
	}
	// (a lock whose key lives on each node in turn: a status that reads the key of another
	// node's slot is refused MOVED whatever the probe found)
	for _, addr := range c.Addrs() {
		var tg string
		for i := 0; ; i++ {
			if tg = target(t) + strconv.Itoa(i); c.MasterFor("DLOCK_CLI_"+tg) == addr {
				break
			}
		}
		url := "redis://" + aclUser + ":" + aclPwd + "@" + addr + "/0"
		r := runBin(t, nil, "status", "--redis", url, "CLI", tg)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "is part of a Redis Cluster") || !strings.Contains(r.stderr, "--cluster") {
			t.Errorf("status on node %s, without --cluster: %+v", addr, r)
		}
	}
	// and with --cluster the same user locks
	url := "redis://" + aclUser + ":" + aclPwd + "@" + c.Addrs()[0] + "/0"
	if r := runBin(t, nil, "exec", "-n", "--cluster", "--redis", url, "CLI", target(t), "true"); r.code != 0 {
		t.Fatalf("exec --cluster under the least-privilege user: %+v", r)
	}
}
