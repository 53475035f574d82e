package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// TestReleaseForceHolder: release --force --holder deletes the holding it names and prints it,
// the holder learns of the loss, and a repeat finds the holder gone and changes nothing.
func TestReleaseForceHolder(t *testing.T) {
	tg := target(t)
	l, owned, _ := holdLock(t, tg, time.Second) // a short lease: the loss is noticed soon
	want, err := l.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := runIn("release", "--force", "--holder", want.Holder, "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || r.stdout != "released CLI/"+tg+" (key DLOCK_CLI_"+tg+"): removed holder "+want.Holder+"\n" {
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

	r = runIn("release", "--force", "--holder", want.Holder, "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "holder "+want.Holder+" not found (already gone, or it never held the lock); the lock is not held: nothing removed") {
		t.Fatal(r)
	}
}

// TestReleaseForceHolderChangedHands: a --holder that no longer holds the key leaves the
// current holder alone, and says who holds it now.
func TestReleaseForceHolderChangedHands(t *testing.T) {
	tg := target(t)
	l, _, _ := holdLock(t, tg, 5*time.Second)
	st, err := l.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	old := st.Holder + "0" // a locker that is not the holder's
	r := runIn("release", "--force", "--holder", old, "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "holder "+old+" not found (already gone, or it never held the lock); the lock is held by "+st.Holder+", left alone: nothing removed") {
		t.Fatal(r)
	}
	if now := lockStatusOf(t, tg); now.Holder != st.Holder {
		t.Fatalf("the current holder was removed: %+v", now)
	}
}

// TestReleaseForceAny: --any removes whoever holds the lock; on a free lock it removes nothing.
func TestReleaseForceAny(t *testing.T) {
	tg := target(t)
	l, _, _ := holdLock(t, tg, 5*time.Second)
	st, err := l.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := runIn("release", "--force", "--any", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || !strings.Contains(r.stdout, "removed holder "+st.Holder) {
		t.Fatal(r)
	}
	if st := lockStatusOf(t, tg); st.Held {
		t.Fatalf("held after release --force --any: %+v", st)
	}
	r = runIn("release", "--force", "--any", "--redis", srv.Addr, "CLI", tg)
	if r.code != 0 || r.stdout != "CLI/"+tg+" (key DLOCK_CLI_"+tg+") is not held: nothing removed\n" {
		t.Fatal(r)
	}
}

// TestReleaseRefuses: without --force, or without saying which holder, nothing is deleted.
func TestReleaseRefuses(t *testing.T) {
	tg := target(t)
	holdLock(t, tg, 5*time.Second)
	for _, args := range [][]string{
		{"release", "--redis", srv.Addr, "CLI", tg},
		{"release", "--any", "--redis", srv.Addr, "CLI", tg},
		{"release", "--force", "--redis", srv.Addr, "CLI", tg},
	} {
		if r := runIn(args...); r.code != exitUsage {
			t.Fatalf("%v: %v", args, r)
		}
		if st := lockStatusOf(t, tg); !st.Held {
			t.Fatalf("%v deleted the lock", args)
		}
	}
}

// TestReleaseUnwritten: a release whose report cannot be written (standard output on a full
// disk, or closed) is not a silent success: exit 1 and one line on standard error saying what
// was done and that it could not be written; the removal itself is done all the same.
func TestReleaseUnwritten(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string // before the Redis flags and TYPE TARGET; "HOLDER" is the holder's locker
		held   bool     // the lock is held before
		stdout io.Writer
		wants  string // in the message
	}{
		{"holder", []string{"--force", "--holder", "HOLDER"}, true, fullDisk{}, "removed holder "},
		{"any", []string{"--force", "--any"}, true, closedPipe{}, "removed holder "},
		{"any of a free lock", []string{"--force", "--any"}, false, fullDisk{}, "is not held: nothing removed"},
		{"holder gone", []string{"--force", "--holder", "HOLDER"}, false, closedPipe{}, "already gone"},
		{"shared any of a free lock", []string{"--force", "--any", "--shared"}, false, fullDisk{}, "is not held: nothing removed"},
		{"shared holder gone", []string{"--force", "--holder", "HOLDER", "--semaphore", "2"}, false, closedPipe{}, "already gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := target(t)
			holder := "10.0.0.9-9-gone-1"
			if tc.held {
				l, _, _ := holdLock(t, tg, 5*time.Second)
				st, err := l.State(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				holder = st.Holder
			}
			args := []string{"release"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "HOLDER", holder))
			}
			args = append(args, "--redis", srv.Addr, "CLI", tg)
			var stderr strings.Builder
			code := run(args, cli{stdout: tc.stdout, stderr: &stderr})
			if code != exitError || !strings.HasPrefix(stderr.String(), "dlock release: ") || !strings.Contains(stderr.String(), tc.wants) ||
				!strings.Contains(stderr.String(), "standard output") || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("%v with standard output %T: exit %d, stderr %q", args, tc.stdout, code, stderr.String())
			}
			if st := lockStatusOf(t, tg); st.Held {
				t.Fatalf("held after release --force: %+v", st)
			}
		})
	}
}
