package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/internal/redistest"
)

// The credentials of authRedis: the default user's password, and an ACL user allowed only
// what dlock needs (README, "Least privilege").
const (
	authPassword    = "s3cret-cli-test"
	aclUser, aclPwd = "dlockcli", "acl-pw-cli-test"
)

// aclRules are the README's least-privilege rules for the ACL user.
var aclRules = redistest.ACLRules(aclPwd, redistest.ACLCommands)

// authServer is a password-protected redis-server started by a test.
type authServer struct {
	addr string
}

// url returns a redis:// URL for the server with userinfo (e.g. ":PASSWORD", "USER:PASSWORD").
func (s authServer) url(userinfo string) string {
	return "redis://" + userinfo + "@" + s.addr + "/0"
}

// startAuthRedis starts a redis-server on a free loopback port whose default user needs
// authPassword and which knows the ACL user aclUser; it is killed when t ends.
func startAuthRedis(t *testing.T) authServer {
	t.Helper()
	port := launchRedis(t, 1, func(ports []string) []string { return []string{"--port", ports[0], "--requirepass", authPassword} },
		func(ports []string) *redis.Client {
			return redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + ports[0], Password: authPassword, MaxRetries: -1})
		})[0]
	s := authServer{addr: "127.0.0.1:" + port}
	admin := redis.NewClient(&redis.Options{Addr: s.addr, Password: authPassword, MaxRetries: -1})
	defer admin.Close()
	if err := admin.ACLSetUser(context.Background(), aclUser, aclRules...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	return s
}

// launchRedis starts redis-server on loopback with no persistence and the args that args gives
// for n distinct free ports, as redistest.Launch does, and returns those ports.
func launchRedis(t *testing.T, n int, args func(ports []string) []string, client func(ports []string) *redis.Client) []string {
	t.Helper()
	return redistest.Launch(t, n, func(dir string, ports []string) []string {
		return append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, args(ports)...)
	}, client)
}

// launchSentinel starts redis-server --sentinel with a config file, in a directory of its own,
// holding the lines that lines gives for one free port, as redistest.Launch does, and returns
// that port.
func launchSentinel(t *testing.T, lines func(port string) []string, client func(port string) *redis.Client) string {
	t.Helper()
	return redistest.Launch(t, 1, func(dir string, ports []string) []string {
		conf := filepath.Join(dir, "sentinel.conf")
		all := append([]string{"bind 127.0.0.1", "dir " + dir}, lines(ports[0])...)
		if err := os.WriteFile(conf, []byte(strings.Join(all, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{conf, "--sentinel"}
	}, func(ports []string) *redis.Client { return client(ports[0]) })[0]
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestAuthEndToEnd: with a password (default user) or an ACL user with the least privilege,
// given by --redis or by $REDIS_URL, status, exec, lock and release work end to end.
func TestAuthEndToEnd(t *testing.T) {
	s := startAuthRedis(t)
	for _, tc := range []struct {
		name string
		url  string
	}{
		{"password", s.url(":" + authPassword)},
		{"ACL user", s.url(aclUser + ":" + aclPwd)},
	} {
		for _, via := range []string{"--redis", "REDIS_URL"} {
			t.Run(tc.name+" via "+via, func(t *testing.T) {
				var env, flags []string
				if via == "REDIS_URL" {
					env = []string{"REDIS_URL=" + tc.url}
				} else {
					flags = []string{"--redis", tc.url}
				}
				dlock := func(args ...string) result {
					t.Helper()
					return runBin(t, env, append(append([]string{args[0]}, flags...), args[1:]...)...)
				}
				tg := target(t)
				dir := t.TempDir()

				// lock holds it and names its holder; status shows that holder. (A lease of
				// seconds: a stall of the loaded machine does not lose it before the release
				// --force below, which would let exec -n have it.)
				p := start(t, env, append(append([]string{"lock"}, flags...), "--lease", "4s", "CLI", tg)...)
				line := waitLine(t, p)
				f := holdingLine(t, line)
				if f["DLOCK_KEY"] != "DLOCK_CLI_"+tg || f["DLOCK_HOLDER"] == "" {
					t.Fatalf("dlock lock printed %q", line)
				}
				if r := dlock("status", "CLI", tg); r.code != 0 || !strings.Contains(r.stdout, "holder:      "+f["DLOCK_HOLDER"]) {
					t.Fatal(r)
				}
				// exec cannot have it meanwhile; release --force --holder takes it away, so
				// lock exits 76; then exec gets it.
				ran := filepath.Join(dir, "ran")
				if r := dlock("exec", "-n", "CLI", tg, "touch", ran); r.code != exitNotObtained || exists(ran) {
					t.Fatal(r)
				}
				if r := dlock("release", "--force", "--holder", f["DLOCK_HOLDER"], "CLI", tg); r.code != 0 || !strings.Contains(r.stdout, "removed holder") {
					t.Fatal(r)
				}
				if r := p.wait(t); r.code != exitLost {
					t.Fatalf("dlock lock after release --force: %v", r)
				}
				if r := dlock("exec", "-n", "CLI", tg, "sh", "-c", `test "$DLOCK_KEY" = DLOCK_CLI_`+tg+` && touch `+ran); r.code != 0 || !exists(ran) {
					t.Fatal(r)
				}
				if r := dlock("release", "--force", "--any", "CLI", tg); r.code != 0 || !strings.Contains(r.stdout, "is not held: nothing removed") {
					t.Fatal(r)
				}
			})
		}
	}
}

// TestAuthRefused: a wrong password, an unknown user or no password is refused in one line
// that names the server, never shows the password, and exits 77; exec runs nothing.
func TestAuthRefused(t *testing.T) {
	s := startAuthRedis(t)
	const wrong = "wrong-pw-must-not-show"
	ran := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"status", "--redis", s.url(":" + wrong), "CLI", "x"}, "refused the user or password (WRONGPASS"},
		{nil, []string{"status", "--redis", s.url(aclUser + ":" + wrong), "CLI", "x"}, "refused the user or password (WRONGPASS"},
		{nil, []string{"status", "--redis", s.url("nobody:" + wrong), "CLI", "x"}, "refused the user or password (WRONGPASS"},
		{nil, []string{"status", "--redis", s.addr, "CLI", "x"}, "needs a password (NOAUTH"},
		{nil, []string{"status", "--redis", s.url(wrong), "CLI", "x"}, "a user name alone"}, // (redis-cli's way to give a password)
		{[]string{"REDIS_URL=" + s.url(":"+wrong)}, []string{"status", "CLI", "x"}, "refused the user or password"},
		{[]string{"DLOCK_REDIS=" + s.url(":"+wrong)}, []string{"exec", "CLI", "x", "touch", ran}, "refused the user or password"},
		{[]string{"REDIS_URL=" + s.url(":"+wrong)}, []string{"lock", "CLI", "x"}, "refused the user or password"},
		{[]string{"REDIS_URL=" + s.url(":"+wrong)}, []string{"release", "--force", "--any", "CLI", "x"}, "refused the user or password"},
	} {
		t.Run(strings.Join(append(tc.env, tc.args...), " "), func(t *testing.T) {
			r := runBin(t, tc.env, tc.args...)
			if r.code != exitNoPerm || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, s.addr) ||
				strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
				t.Fatal(r)
			}
			if strings.Contains(r.stderr, wrong) || strings.Contains(r.stderr, authPassword) {
				t.Fatalf("a password shows in the message: %v", r)
			}
			if exists(ran) {
				t.Fatal("exec ran its command without the lock")
			}
		})
	}
}

// TestAuthRefusedBySentinel: Sentinels that refuse the URL's password are told so, exit 77,
// also when another Sentinel the URL names is down: its refused connection is not the cause.
func TestAuthRefusedBySentinel(t *testing.T) {
	host, mport, _ := net.SplitHostPort(srv.Addr)
	port := launchSentinel(t, func(port string) []string {
		return []string{"port " + port, "requirepass " + authPassword, "sentinel monitor m " + host + " " + mport + " 1"}
	}, func(port string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, Password: authPassword, MaxRetries: -1})
	})
	sc := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + port, Password: authPassword, MaxRetries: -1})
	defer sc.Close()
	waitFor(t, "the password-protected Sentinel to name the master", func() bool {
		return sc.GetMasterAddrByName(context.Background(), "m").Err() == nil
	})
	const wrong = "wrong-pw-must-not-show"
	for _, url := range []string{
		"redis://:" + wrong + "@127.0.0.1:" + port + "?master_name=m",
		"redis://:" + wrong + "@127.0.0.1:" + port + "?master_name=m&addr=" + unreachableAddr,
	} {
		r := runBin(t, nil, "status", "--redis", url, "CLI", "x")
		if r.code != exitNoPerm || !strings.Contains(r.stderr, "the Sentinels refused the user or password (") || !strings.Contains(r.stderr, "WRONGPASS") ||
			!strings.Contains(r.stderr, "the master's goes in the username= and password= parameters") ||
			strings.Contains(r.stderr, wrong) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: want exit 77 naming the refused password, got %v", redact(url), r)
		}
	}
}

// TestCommandRefused: a user that Redis refuses a key the lock needs (an ACL without the lock's
// side keys), or a command a script calls (HGET), is told so and exits 77 at once, from exec and
// lock, waiting or not — no wait mends a refusal — and exec runs nothing.
func TestCommandRefused(t *testing.T) {
	s := startAuthRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: s.addr, Password: authPassword})
	defer admin.Close()
	for user, drop := range map[string]string{"partial": "~{DLOCK_*}:*", "nohget": "+hget"} {
		rules := slices.DeleteFunc(slices.Clone(aclRules), func(r string) bool { return r == drop || strings.HasPrefix(r, ">") })
		if err := admin.ACLSetUser(context.Background(), user, append(rules, ">"+user+"-pw")...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ran := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		{"partial", "exec", "CLI", "refused", "touch", ran},
		{"partial", "exec", "-w", "30", "CLI", "refused", "touch", ran},
		{"partial", "exec", "-n", "CLI", "refused", "touch", ran},
		{"partial", "lock", "CLI", "refused"},
		{"nohget", "exec", "CLI", "refused", "touch", ran},
		{"nohget", "exec", "-n", "CLI", "refused", "touch", ran},
		{"nohget", "lock", "CLI", "refused"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			user := args[0]
			r := runBin(t, nil, append([]string{args[1], "--redis", s.url(user + ":" + user + "-pw")}, args[2:]...)...)
			if r.code != exitNoPerm || !strings.Contains(r.stderr, "refused a command") {
				t.Fatal(r)
			}
			if exists(ran) {
				t.Fatal("exec ran its command without the lock")
			}
		})
	}
}

// waitLine waits for p's first line on stdout.
func waitLine(t *testing.T, p *proc) string {
	t.Helper()
	var line string
	waitFor(t, "dlock lock's line", func() bool {
		select {
		case <-p.done:
			t.Fatalf("dlock lock ended: %v", p.res)
		default:
		}
		out := p.out()
		i := strings.IndexByte(out, '\n')
		if i < 0 {
			return false
		}
		line = out[:i]
		return true
	})
	return line
}

// holdingLine parses dlock lock's line: KEY=VALUE fields.
func holdingLine(t *testing.T, line string) map[string]string {
	t.Helper()
	f := map[string]string{}
	for _, kv := range strings.Fields(line) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("dlock lock's line %q: field %q", line, kv)
		}
		f[k] = v
	}
	if len(f) != 3 || f["DLOCK_FENCING_TOKEN"] == "" {
		t.Fatalf("dlock lock's line %q", line)
	}
	return f
}

// TestDemoACLRefusal: demo run as an ACL user with dlock's least-privilege rules, which do not
// cover the naive lock's key, is refused by Redis: that is 77 with one line naming Redis and
// the refusal, as for the other commands, not 1 — and the naive lock's key, which the README's
// rules leave out.
func TestDemoACLRefusal(t *testing.T) {
	s := startAuthRedis(t)
	r := runBin(t, nil, "demo", "--redis", s.url(aclUser+":"+aclPwd), "--duration", "200ms")
	if r.code != exitNoPerm || !strings.Contains(r.stderr, "NOPERM") || !strings.Contains(r.stderr, s.addr) ||
		!strings.Contains(r.stderr, "the key "+naiveKey) ||
		strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || strings.Contains(r.stderr, aclPwd) || r.stdout != "" {
		t.Fatal(r)
	}
}
