package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// TestReleaseForce: release --force deletes a held lock and prints its holder, the holder
// learns of the loss, and a second release finds the lock free.
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
