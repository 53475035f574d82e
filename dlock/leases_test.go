package dlock_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
)

func TestParseLeases(t *testing.T) {
	m, err := dlock.ParseLeases(strings.NewReader("# DLock leases\n! also a comment\n\nORDER=30000\n USER_LOCK : 500 \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["ORDER"] != 30*time.Second || m["USER_LOCK"] != 500*time.Millisecond {
		t.Fatalf("leases %v", m)
	}
	for _, bad := range []string{"ORDER", "ORDER=", "ORDER=abc", "ORDER=0", "ORDER=-5", "ORDER=5", "=100", "OR DER=100", "A=100\nA=200", "A=99999999999999999999"} {
		if _, err := dlock.ParseLeases(strings.NewReader(bad)); !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("%q: err = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

func TestLoadLeases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config-dlock.properties")
	if err := os.WriteFile(path, []byte("ORDER=1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := dlock.LoadLeases(path)
	if err != nil || m["ORDER"] != time.Second {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := dlock.LoadLeases(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzParseLeases: no panic; what parses is valid, and printing it back parses to the same.
func FuzzParseLeases(f *testing.F) {
	f.Add([]byte("ORDER=30000\nUSER=500\n"))
	f.Add([]byte("# c\n!c\nA:100\r\n"))
	f.Add([]byte("A=1e3"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := dlock.ParseLeases(strings.NewReader(string(data)))
		if err != nil {
			if !errors.Is(err, dlock.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		var lines []string
		for typ, d := range m {
			if domain.ValidateType(domain.DLockType(typ)) != nil || domain.ValidateLease(d) != nil {
				t.Fatalf("accepted %q=%v", typ, d)
			}
			lines = append(lines, fmt.Sprintf("%s=%d", typ, d.Milliseconds()))
		}
		sort.Strings(lines)
		again, err := dlock.ParseLeases(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil || len(again) != len(m) {
			t.Fatalf("round trip: %v, %v", again, err)
		}
		for k, v := range m {
			if again[k] != v {
				t.Fatalf("round trip changed %s: %v -> %v", k, v, again[k])
			}
		}
	})
}
