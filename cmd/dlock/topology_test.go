package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

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
	r := runBin(t, nil, "status", "--redis", addrs[0], "CLI", tg)
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "is part of a Redis Cluster") || !strings.Contains(r.stderr, "--cluster") {
		t.Fatal(r)
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

// TestSentinelMisnamed: Sentinels asked for a master they do not watch, or a plain server
// named as a Sentinel, answer; the message says what is wrong (no master of that name, not a
// Sentinel) instead of go-redis's "all sentinels ... are unreachable", and exits 1.
func TestSentinelMisnamed(t *testing.T) {
	s := redistest.NeedSentinel(t, 2)
	sa := s.SentinelAddrs()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sentinel-master", "no-such-master", "--redis", strings.Join(sa, ",")}, `watch no master named "no-such-master"`},
		{[]string{"--redis", "redis://" + sa[0] + "?master_name=no-such-master"}, `watch no master named "no-such-master"`},
		{[]string{"--sentinel-master", s.MasterName(), "--redis", srv.Addr}, "not a Sentinel"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runBin(t, nil, append(append([]string{"status"}, tc.args...), "CLI", target(t))...)
			if r.code != exitError || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "unreachable") ||
				strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Fatal(r)
			}
		})
	}
}
