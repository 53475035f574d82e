package main

import (
	"context"
	"encoding/json"
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

// TestStatusFree: a free lock, in text and JSON.
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

// TestStatusByEnv: $DLOCK_REDIS is the default of --redis.
func TestStatusByEnv(t *testing.T) {
	t.Setenv("DLOCK_REDIS", srv.Addr)
	if r := runIn("status", "CLI", target(t)); r.code != 0 {
		t.Fatal(r)
	}
}
