package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/internal/redistest"
)

// testGenerator returns a Generator of its own (another "process") on srv with lease as its
// default, closed with its client when t ends.
func testGenerator(t *testing.T, lease time.Duration) *dlock.Generator {
	t.Helper()
	c := srv.Client()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.Close(context.Background())
		_ = c.Close()
	})
	return g
}

// holdLock takes CLI/target with lease, with a Generator of its own (another "process"),
// until t ends.
func holdLock(t *testing.T, target string, lease time.Duration) (*dlock.DistributedReentrantLock, *dlock.Owner, uint64) {
	t.Helper()
	l, err := testGenerator(t, lease).Gen("CLI", target)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := l.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The cleanup keeps the Owner reachable: a dropped Owner is released by the garbage
	// collector, and callers that ignore it still mean to hold the lock until t ends.
	t.Cleanup(func() { _ = owned.Unlock() })
	token, _ := l.FencingToken(owned)
	return l, owned, token
}

// TestStatusFree: a free lock, in text and JSON.
func TestStatusFree(t *testing.T) {
	tg := target(t)
	r := runIn("status", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "state:       free") || !strings.Contains(r.stdout, "key DLOCK_CLI_"+tg) {
		t.Fatal(r)
	}
	// A key never used keeps no fencing counter: the text says why that loses nothing.
	if !strings.Contains(r.stdout, "fence:       none kept (it expires two leases after its last use;") {
		t.Fatalf("a free key's fence line: %v", r)
	}
	st := lockStatusOf(t, tg)
	if st.Held || st.Holder != "" || st.LeaseLeftMS != 0 || st.Key != "DLOCK_CLI_"+tg || st.Type != "CLI" || st.Target != tg {
		t.Fatalf("%+v", st)
	}
}

// TestStatusUnwritten: a status that cannot be written (a full disk) is a failure, in text as
// in JSON, for every kind of lock: exit 1 and one line saying why, not exit 0 with nothing
// written.
func TestStatusUnwritten(t *testing.T) {
	tg := target(t)
	for _, args := range [][]string{
		{"status"}, {"status", "--json"},
		{"status", "--shared"}, {"status", "--shared", "--json"},
		{"status", "--semaphore", "2"}, {"status", "--semaphore", "2", "--json"},
	} {
		args := append(args, "--redis", srv.Addr, "CLI", tg)
		var stderr strings.Builder
		code := run(args, cli{stdout: fullDisk{}, stderr: &stderr})
		if code != exitError || !strings.HasPrefix(stderr.String(), "dlock status: ") || !strings.Contains(stderr.String(), "no space left") ||
			strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v with standard output full: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}

// fullDisk is standard output on a full disk.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestStatusHeldWithoutExpiry: a key of the lock's name set without an expiry (not by dlock)
// is shown held with no expiry, which never comes free by itself, not held with no word on
// its lease.
func TestStatusHeldWithoutExpiry(t *testing.T) {
	tg := target(t)
	c := srv.Client()
	defer c.Close()
	if err := c.Set(context.Background(), "DLOCK_CLI_"+tg, "set-by-hand", 0).Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Del(context.Background(), "DLOCK_CLI_"+tg)
	r := runIn("status", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "holder:      set-by-hand") || !strings.Contains(r.stdout, "lease left:  none: the key has no expiry") {
		t.Fatal(r)
	}
}

// TestStatusHeld: a lock held by another process shows its holder, lease and fence, in text
// and in JSON with stable field names.
func TestStatusHeld(t *testing.T) {
	tg := target(t)
	l, owned, token := holdLock(t, tg, 5*time.Second)
	want, err := l.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	r := runIn("status", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "state:       held") || !strings.Contains(r.stdout, "holder:      "+want.Holder) ||
		!strings.Contains(r.stdout, "lease left:") {
		t.Fatal(r)
	}

	// The JSON keeps its field names: parse it as a map, not only into lockStatus.
	r = runIn("status", "CLI", tg, "--json", "--redis", srv.Addr) // flags after the arguments too
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("%v\n%v", err, r)
	}
	for _, k := range []string{"type", "target", "key", "held", "holder", "mine", "reserved_for", "lease_left_ms", "fence", "waiting", "local_waiters"} {
		if _, ok := m[k]; !ok {
			t.Errorf("status --json lacks %q: %s", k, r.stdout)
		}
	}
	st := lockStatusOf(t, tg)
	if !st.Held || st.Holder != want.Holder || st.Mine || st.Fence != token ||
		st.LeaseLeftMS <= 0 || st.LeaseLeftMS > 5000 {
		t.Fatalf("%+v, want holder %s fence %d", st, want.Holder, token)
	}
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	if st := lockStatusOf(t, tg); st.Held {
		t.Fatalf("held after Unlock: %+v", st)
	}
}

// TestStatusJSONNotUTF8: a target, key or holder that is not valid UTF-8 (a lock a Go program
// named so, a key set by hand) leaves --json valid JSON, and dlock says on standard error
// which fields it could not give byte for byte (JSON strings are Unicode: each invalid byte
// shows as U+FFFD), rather than hand a script a key or holder that is not Redis's; the text
// form shows the bytes as they are (a holder quoted as a Go string).
func TestStatusJSONNotUTF8(t *testing.T) {
	tg := target(t) + "\xff"
	key := "DLOCK_CLI_" + tg
	c := srv.Client()
	defer c.Close()
	if err := c.Set(context.Background(), key, "holder-\xfe", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Del(context.Background(), key)
	for _, tc := range []struct {
		args   []string
		fields []string // named on stderr
	}{
		{[]string{"status", "--json"}, []string{"target", "key", "holder"}},
		{[]string{"status", "--json", "--shared"}, []string{"target", "key"}},
		{[]string{"status", "--json", "--semaphore", "2"}, []string{"target", "key"}},
	} {
		r := runIn(append(tc.args, "--redis", srv.Addr, "CLI", tg)...)
		if r.code != 0 || !json.Valid([]byte(r.stdout)) || !strings.Contains(r.stdout, `\ufffd`) {
			t.Errorf("%v: want exit 0 and valid JSON, got %v", tc.args, r)
			continue
		}
		// (besides, for the read-write lock and the semaphore, a line on the lock of that name)
		if !strings.HasPrefix(r.stderr, "dlock status: ") || strings.Count(r.stderr, "U+FFFD") != 1 || strings.Count(r.stderr, "\ndlock status: ") != strings.Count(r.stderr, "\n")-1 {
			t.Errorf("%v: want one line on stderr saying what the JSON replaced, got %v", tc.args, r)
		}
		for _, f := range tc.fields {
			if !strings.Contains(r.stderr, f) {
				t.Errorf("%v: stderr does not name %s: %q", tc.args, f, r.stderr)
			}
		}
	}
	r := runIn("status", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, `holder:      "holder-\xfe"`+"\n") || !strings.Contains(r.stdout, "key "+key+")") || r.stderr != "" {
		t.Errorf("text status: want the bytes as they are (the holder quoted), got %q", r)
	}
	r = runIn("status", "--json", "--redis", srv.Addr, "CLI", "valid")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("status --json of a valid name says something on stderr: %v", r)
	}
}

// TestStatusTextQuotesAHolderWithControlCharacters: a holder that no locker has — a key set by
// hand holding control characters (a newline, a terminal's escape sequence), or bytes that
// are not UTF-8 — is shown quoted as a Go string, byte for byte, in status's text and
// release's report, rather than written to the operator's terminal as it is, where it could
// forge lines ("state: free") or drive the terminal.
func TestStatusTextQuotesAHolderWithControlCharacters(t *testing.T) {
	tg := target(t)
	key := "DLOCK_CLI_" + tg
	holder := "evil\nstate:       free\x1b[2J"
	c := srv.Client()
	defer c.Close()
	if err := c.Set(context.Background(), key, holder, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Del(context.Background(), key)
	r := runIn("status", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "holder:      "+strconv.Quote(holder)+"\n") || strings.Contains(r.stdout, "\x1b") ||
		strings.Contains(r.stdout, "\nstate:       free") {
		t.Errorf("status: want the holder quoted, got %q", r)
	}
	r = runIn("release", "--force", "--any", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "removed holder "+strconv.Quote(holder)) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("release --force --any: want the holder quoted, got %q", r)
	}
}

// TestStatusByEnv: $DLOCK_REDIS is the default of --redis.
func TestStatusByEnv(t *testing.T) {
	t.Setenv("DLOCK_REDIS", srv.Addr)
	if r := runIn("status", "CLI", target(t)); r.code != 0 {
		t.Fatal(r)
	}
}

// TestStatusWaitingList: status prints every waiting process, first in line first, and
// --json gives them as a list ([] when none).
func TestStatusWaitingList(t *testing.T) {
	cfg, err := domain.NewDLockConfig("CLI", "x", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		waiting []string
		text    string
		json    string
	}{
		{nil, "waiting:     none recorded\n", `"waiting":[]`},
		{[]string{"10.0.0.1-1-a-"}, "waiting:     1 process: 10.0.0.1-1-a-\n", `"waiting":["10.0.0.1-1-a-"]`},
		{[]string{"10.0.0.1-1-a-", "10.0.0.2-2-b-", "10.0.0.3-3-c-"},
			"waiting:     3 processes, first in line first:\n             1. 10.0.0.1-1-a-\n             2. 10.0.0.2-2-b-\n             3. 10.0.0.3-3-c-\n",
			`"waiting":["10.0.0.1-1-a-","10.0.0.2-2-b-","10.0.0.3-3-c-"]`},
	} {
		st := dlock.State{Config: cfg, Holder: "10.0.0.9-9-z-1", Waiting: tc.waiting}
		var text, js strings.Builder
		printStatus(&text, st)
		if err := printStatusJSON(&js, st); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(text.String(), tc.text) || !strings.Contains(js.String(), tc.json) {
			t.Errorf("waiting %q:\n%s%s", tc.waiting, text.String(), js.String())
		}
	}
}

// TestStatusShowsWaiter: a process waiting for the lock shows in status, text and JSON.
func TestStatusShowsWaiter(t *testing.T) {
	needReal(t)
	tg := target(t)
	holdLock(t, tg, 5*time.Second)
	w := start(t, nil, "lock", "--redis", srv.Addr, "CLI", tg)
	waitFor(t, "the waiting process to show", func() bool { return len(lockStatusOf(t, tg).Waiting) == 1 })
	if r := runIn("status", "--redis", srv.Addr, "CLI", tg); !strings.Contains(r.stdout, "waiting:     1 process: ") {
		t.Fatal(r)
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.wait(t)
}

// TestStatusAndReleaseOnAReplica: a replica named as the server — here one cut off from its
// master, as before its first sync or after a split, whose copy says the lock is free while
// the master holds it — is refused by status (every kind) and release --force, 69, saying it
// is a read-only replica: a replica's reads may be behind, and a forced release that finds
// nothing to remove there writes nothing, so no READONLY would tell of it. So too under the
// README's least-privilege user, who may not read INFO.
func TestStatusAndReleaseOnAReplica(t *testing.T) {
	needReal(t)
	rep, err := redistest.StartReal()
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	rc := rep.Client()
	defer rc.Close()
	if err := rc.ACLSetUser(context.Background(), aclUser, aclRules...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Do(context.Background(), "replicaof", "127.0.0.1", "1").Err(); err != nil { // a master that is not there
		t.Fatal(err)
	}
	tg := target(t)
	p := start(t, nil, "lock", "--redis", srv.Addr, "CLI", tg)
	holder := holdingLine(t, waitLine(t, p))["DLOCK_HOLDER"]
	for _, server := range []string{rep.Addr, "redis://" + aclUser + ":" + aclPwd + "@" + rep.Addr + "/0"} {
		for _, args := range [][]string{
			{"status", "--redis", server, "CLI", tg},
			{"status", "--semaphore", "2", "--redis", server, "CLI", tg},
			{"status", "-s", "--redis", server, "CLI", tg},
			{"release", "--force", "--holder", holder, "--redis", server, "CLI", tg},
		} {
			if r := runBin(t, nil, args...); r.code != exitUnavailable || !strings.Contains(r.stderr, "read-only replica") {
				t.Errorf("%v: %+v, want 69 naming a read-only replica (the master holds the lock: %s)", args, r, holder)
			}
		}
	}
	if r := runBin(t, nil, "status", "--redis", srv.Addr, "CLI", tg); r.code != 0 || !strings.Contains(r.stdout, holder) {
		t.Errorf("status on the master: %+v, want %s", r, holder)
	}
}
