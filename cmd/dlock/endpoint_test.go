package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedact: every password is masked, in URLs no parser accepts too.
func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"localhost:6379", "localhost:6379"},
		{"redis://localhost:6379/0", "redis://localhost:6379/0"},
		{"redis://s3cret@localhost:6379", "redis://xxxxx@localhost:6379"}, // (a user name to go-redis, a password to redis-cli)
		{"s3cret@localhost:6379", "xxxxx@localhost:6379"},
		{"redis://:s3cret@localhost:6379/0", "redis://:xxxxx@localhost:6379/0"},
		{"rediss://user:s3cret@h:6380/2?dial_timeout=3", "rediss://user:xxxxx@h:6380/2?dial_timeout=3"},
		{"redis://user:pa:ss@h:1", "redis://user:xxxxx@h:1"},
		{"redis://user:p@ss/w?rd@h:1", "redis://user:xxxxx@h:1"},
		{"user:s3cret@h:1", "user:xxxxx@h:1"},
		{"redis://s:1?master_name=m&password=s3cret&addr=s:2", "redis://s:1?master_name=m&password=xxxxx&addr=s:2"},
		{"redis://s:1?PASSWORD=s3cret", "redis://s:1?PASSWORD=xxxxx"},
		{"redis://s:1?master_name=m&pass%77ord=s3cret&sentinel_pass%77ord=s3cret2", "redis://s:1?master_name=m&pass%77ord=xxxxx&sentinel_pass%77ord=xxxxx"},
		{"redis://s:1?passwords=x&dial_timeout=3", "redis://s:1?passwords=x&dial_timeout=3"},
	} {
		if got := redact(tc.in); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRedisPrecedence: --redis, else $DLOCK_REDIS, else $REDIS_URL, else the default.
func TestRedisPrecedence(t *testing.T) {
	for _, tc := range []struct {
		flag               string
		given              bool
		dlockRedis, redURL string
		want               string
	}{
		{"", false, "", "", defaultRedis},
		{"", false, "", "redis://u:p@r:1", "redis://u:xxxxx@r:1"},
		{"", false, "d:1", "redis://u:p@r:1", "d:1"},
		{"f:1", true, "d:1", "redis://u:p@r:1", "f:1"},
	} {
		t.Setenv("DLOCK_REDIS", tc.dlockRedis)
		t.Setenv("REDIS_URL", tc.redURL)
		e, err := resolveRedis(tc.flag, tc.given, false, "", defaultRedis)
		if err != nil || e.shown != tc.want {
			t.Errorf("%+v: %v, %v", tc, e, err)
		}
	}
	t.Setenv("DLOCK_REDIS", "")
	t.Setenv("REDIS_URL", "redis://:p@h:bad")
	if _, err := resolveRedis("", false, false, "", defaultRedis); err == nil ||
		err.Error() != `invalid $REDIS_URL "redis://:xxxxx@h:bad": not a valid URL: check the host and port, and percent-encode any of : / ? # @ in the user or password` {
		t.Fatalf("bad $REDIS_URL: %v", err)
	}
}

// TestRedisForms: each form of address gives the client, address, credentials, database and
// TLS it names.
func TestRedisForms(t *testing.T) {
	type want struct {
		kind, addrs, user, pass string
		db                      int
		tls                     bool
		master, sentUser        string
	}
	for _, tc := range []struct {
		value   string
		cluster bool
		master  string
		want    want
	}{
		{"localhost:6379", false, "", want{kind: "single", addrs: "localhost:6379"}},
		{"redis://localhost", false, "", want{kind: "single", addrs: "localhost:6379"}},
		{"redis://[::1]:7/1", false, "", want{kind: "single", addrs: "[::1]:7", db: 1}},
		{"redis://u:p@h:7/3", false, "", want{kind: "single", addrs: "h:7", user: "u", pass: "p", db: 3}},
		{"redis://:p%40ss@h:7", false, "", want{kind: "single", addrs: "h:7", pass: "p@ss"}},
		{"rediss://:p@h:7?skip_verify=true", false, "", want{kind: "single", addrs: "h:7", pass: "p", tls: true}},
		{"unix:///run/r.sock?db=2", false, "", want{kind: "single", addrs: "/run/r.sock", db: 2}},
		{"h:7000,h:7001", false, "", want{kind: "cluster", addrs: "h:7000,h:7001"}},
		{"h:7000", true, "", want{kind: "cluster", addrs: "h:7000"}},
		{"redis://u:p@h:7000?addr=h:7001", false, "", want{kind: "cluster", addrs: "h:7000,h:7001", user: "u", pass: "p"}},
		{"rediss://:p@h:7000/0", true, "", want{kind: "cluster", addrs: "h:7000", pass: "p", tls: true}},
		{"s:26379,s:26380", false, "mymaster", want{kind: "sentinel", addrs: "s:26379,s:26380", master: "mymaster"}},
		{"redis://su:sp@s:26379/1?master_name=m&addr=s:26380&password=p", false, "", want{kind: "sentinel",
			addrs: "s:26379,s:26380", pass: "p", db: 1, master: "m", sentUser: "su"}},
		{"redis://s:26379?addr=s:26380", false, "m", want{kind: "sentinel", addrs: "s:26379,s:26380", master: "m"}},
	} {
		o, err := redisSpec{value: tc.value, cluster: tc.cluster, master: tc.master}.parse()
		if err != nil {
			t.Errorf("%s: %v", tc.value, err)
			continue
		}
		var got want
		switch {
		case o.single != nil:
			s := o.single
			got = want{kind: "single", addrs: s.Addr, user: s.Username, pass: s.Password, db: s.DB, tls: s.TLSConfig != nil}
		case o.cluster != nil:
			c := o.cluster
			got = want{kind: "cluster", addrs: strings.Join(c.Addrs, ","), user: c.Username, pass: c.Password, tls: c.TLSConfig != nil}
		case o.failover != nil:
			f := o.failover
			addrs := append([]string(nil), f.SentinelAddrs...)
			if len(addrs) == 2 && addrs[0] > addrs[1] { // go-redis does not keep the order
				addrs[0], addrs[1] = addrs[1], addrs[0]
			}
			got = want{kind: "sentinel", addrs: strings.Join(addrs, ","), user: f.Username, pass: f.Password, db: f.DB,
				tls: f.TLSConfig != nil, master: f.MasterName, sentUser: f.SentinelUsername}
		}
		if got != tc.want {
			t.Errorf("%s (cluster %v, master %q):\n got %+v\nwant %+v", tc.value, tc.cluster, tc.master, got, tc.want)
		}
	}
}

// TestClientSendsNoIdentity: the command's clients do not name their library to Redis (CLIENT
// SETINFO, which go-redis sends on every new connection, a round trip of its own that Redis
// 7.0 refuses): a run of the command is short-lived, and far from Redis each round trip before
// its first answer counts. Each kind of client; the single server's by what it sends.
func TestClientSendsNoIdentity(t *testing.T) {
	for _, tc := range []struct {
		value   string
		cluster bool
		master  string
	}{{srv.Addr, false, ""}, {srv.Addr, true, ""}, {srv.Addr, false, "m"}} {
		e, err := resolveRedis(tc.value, true, tc.cluster, tc.master, "")
		if err != nil {
			t.Fatal(err)
		}
		c := e.client(5 * time.Second)
		var off bool
		switch c := c.(type) {
		case *redis.Client:
			off = c.Options().DisableIdentity
		case *redis.ClusterClient:
			off = c.Options().DisableIdentity
		}
		if !off {
			t.Errorf("%s (cluster %v, master %q): a %T with identity on", tc.value, tc.cluster, tc.master, c)
		}
		_ = c.Close()
	}
	e, err := resolveRedis(srv.Addr, true, false, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c := e.client(5 * time.Second)
	defer c.Close()
	var mu sync.Mutex
	var sent []string
	c.AddHook(sentHook(func(cmd redis.Cmder) {
		mu.Lock()
		sent = append(sent, strings.TrimSpace(fmt.Sprint(cmd.Args()[0], " ", cmd.Args()[1:min(2, len(cmd.Args()))])))
		mu.Unlock()
	}))
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range sent {
		if strings.HasPrefix(strings.ToLower(s), "client [setinfo") {
			t.Fatalf("sent %q", sent)
		}
	}
	if !slices.ContainsFunc(sent, func(s string) bool { return strings.HasPrefix(s, "hello") }) {
		t.Fatalf("sent %q: the hook saw no connection's set-up", sent)
	}
}

// sentHook calls itself with each command a client sends, the connection's set-up included.
type sentHook func(redis.Cmder)

func (h sentHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h(cmd)
		return next(ctx, cmd)
	}
}
func (h sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h(cmd)
		}
		return next(ctx, cmds)
	}
}
