package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// holdLock takes CLI/target with lease, with a Generator of its own (another "process"),
// until t ends.
func holdLock(t *testing.T, target string, lease time.Duration) (*dlock.DistributedReentrantLock, context.Context, uint64) {
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
	l, err := g.Gen("CLI", target)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := l.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	token, _ := l.FencingToken(owned)
	return l, owned, token
}

func TestStatusFree(t *testing.T) {
	tg := target(t)
	r := runIn("status", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "state:       free") || !strings.Contains(r.stdout, "key DLOCK_CLI_"+tg) {
		t.Fatal(r)
	}
	st := lockStatusOf(t, tg)
	if st.Held || st.Holder != "" || st.LeaseLeftMS != 0 || st.Key != "DLOCK_CLI_"+tg || st.Type != "CLI" || st.Target != tg {
		t.Fatalf("%+v", st)
	}
}

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

// TestStatusByEnv: $DLOCK_REDIS is the default of --redis.
func TestStatusByEnv(t *testing.T) {
	t.Setenv("DLOCK_REDIS", srv.Addr)
	if r := runIn("status", "CLI", target(t)); r.code != 0 {
		t.Fatal(r)
	}
}

func TestReleaseForce(t *testing.T) {
	tg := target(t)
	l, owned, _ := holdLock(t, tg, time.Second) // a short lease: the loss is noticed soon
	want, err := l.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := runIn("release", "--force", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "removed holder "+want.Holder) {
		t.Fatal(r)
	}
	if st := lockStatusOf(t, tg); st.Held {
		t.Fatalf("held after release --force: %+v", st)
	}
	// The holder learns of the loss at its next renewal.
	select {
	case <-owned.Done():
	case <-time.After(patience):
		t.Fatal("the holder never learnt that its lock was released by force")
	}
	if err := context.Cause(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("owner context ended with %v", err)
	}

	r = runIn("release", "--force", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "was free: nothing removed") {
		t.Fatal(r)
	}
}

// TestReleaseRefusesWithoutForce: without --force nothing is deleted.
func TestReleaseRefusesWithoutForce(t *testing.T) {
	tg := target(t)
	holdLock(t, tg, 5*time.Second)
	r := runIn("release", "--redis", srv.Addr, "CLI", tg)
	if r.code != exitUsage || !strings.Contains(r.stderr, "last resort") {
		t.Fatal(r)
	}
	if st := lockStatusOf(t, tg); !st.Held {
		t.Fatal("release without --force deleted the lock")
	}
}
