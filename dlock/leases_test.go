package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
		_, err := dlock.ParseLeases(strings.NewReader(bad))
		if !errors.Is(err, dlock.ErrInvalidConfig) {
			t.Errorf("%q: err = %v, want ErrInvalidConfig", bad, err)
			continue
		}
		// One prefix, at the start, then the line: "line 1: dlock: invalid configuration: ..."
		// read as two messages run together.
		if msg := err.Error(); !strings.HasPrefix(msg, "dlock: invalid configuration: line ") || strings.Count(msg, "dlock:") != 1 {
			t.Errorf("%q: message %q, want one prefix and then the line", bad, msg)
		}
	}
}

// TestParseLeasesReadsJavaProperties: what java.util.Properties.load reads in the common
// cases — a white-space separator, comments indented or starting with '!', a line continued
// by a trailing backslash (not a comment's), escapes (\uXXXX, \=, \:), lines ended by CR
// alone, a comment longer than a buffer — gives the leases Java DLock would take.
func TestParseLeasesReadsJavaProperties(t *testing.T) {
	in := "# DLock leases \\\n" + // (a comment is not continued)
		"A=100\n" +
		"   ! an indented comment\n" +
		"ORDER 30000\n" +
		"USER_LOCK\t:\t500\n" +
		"BATCH = \\\n" +
		"    60000\n" +
		"LONG_\\\n" +
		"  TYPE=1000\n" +
		"\\u8BA2\\u5355=2000\n" +
		"EQ\\=SIGN=300\r" +
		"CR=400\r\n" +
		"#" + strings.Repeat("-", 100000) + "\n" +
		"LAST 50"
	m, err := dlock.ParseLeases(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{"A": 100 * time.Millisecond, "ORDER": 30 * time.Second, "USER_LOCK": 500 * time.Millisecond,
		"BATCH": time.Minute, "LONG_TYPE": time.Second, "\u8ba2\u5355": 2 * time.Second, "EQ=SIGN": 300 * time.Millisecond,
		"CR": 400 * time.Millisecond, "LAST": 50 * time.Millisecond}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Fatalf("leases %v, want %v", m, want)
	}
	// A byte-order mark that starts the input is skipped (ORDER is ORDER); one inside a type
	// is refused, as other invisible characters are.
	m, err = dlock.ParseLeases(strings.NewReader("\ufeffORDER=30000\nPAY=5000"))
	if err != nil || len(m) != 2 || m["ORDER"] != 30*time.Second || m["PAY"] != 5*time.Second {
		t.Errorf("leases after a byte-order mark = %q, %v; want ORDER 30s and PAY 5s", m, err)
	}
	if _, err := dlock.ParseLeases(strings.NewReader("ORDER=30000\n\ufeffPAY=5000")); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Errorf("a byte-order mark in a later type: err = %v, want ErrInvalidConfig", err)
	}
	// Errors name the line the entry starts on, and why.
	for _, tc := range []struct{ in, want string }{
		{"A=100\nB \\\n  x", "line 2: lease \"x\""},
		{"A=100\n\n\\uZZ=1", `line 3: malformed \uXXXX escape`},
		{"# c\nORDER", "line 2: lease \"\""},
		{"A=100\rB=2x", "line 2: lease \"2x\""},
	} {
		_, err := dlock.ParseLeases(strings.NewReader(tc.in))
		if !errors.Is(err, dlock.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want ErrInvalidConfig naming %q", tc.in, err, tc.want)
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
	if _, err := dlock.LoadLeases(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, dlock.ErrInvalidConfig) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzParseLeases: no panic; an error names the line; what parses is valid, and printing it
// back parses to the same.
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
			if !strings.HasPrefix(err.Error(), "dlock: invalid configuration: line ") {
				t.Fatalf("error %v does not name the line", err)
			}
			return
		}
		var lines []string
		for typ, d := range m {
			if domain.ValidateType(domain.DLockType(typ)) != nil || domain.ValidateLease(d) != nil {
				t.Fatalf("accepted %q=%v", typ, d)
			}
			lines = append(lines, fmt.Sprintf("%s=%d", propertiesKey(typ), d.Milliseconds()))
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

// Gen gives a lock the lease its type has in config-dlock.properties, GenWithLease the lease
// it is given, also for a type the file does not name, and each acquisition holds the key in
// Redis for that lease. Mirrors DLock's DLockGeneratorTest.testLockGenerate (which reads the
// lease back from the lock's config); Gen of a type without a lease is refused, as DLock's
// gen asserts, in TestGenRejectsBadInput.
func TestGenTakesTheLeaseOfItsType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config-dlock.properties")
	if err := os.WriteFile(path, []byte("CUSTOMER_LOCK=1000"), 0o600); err != nil {
		t.Fatal(err)
	}
	leases, err := dlock.LoadLeases(path)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithLeases(leases)) // no default lease
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	ctx := ctxT(t, 10*time.Second)
	suffix := t.Name()
	for _, tc := range []struct {
		name, typ string
		gen       func(typ, target string) (*dlock.DistributedReentrantLock, error)
		lease     time.Duration
	}{
		{"the type's lease", "CUSTOMER_LOCK", g.Gen, time.Second},
		{"an explicit lease", "CUSTOMER_LOCK", func(typ, target string) (*dlock.DistributedReentrantLock, error) {
			return g.GenWithLease(typ, target, 500*time.Millisecond)
		}, 500 * time.Millisecond},
		{"a type the file does not name", "FAKE_LOCK", func(typ, target string) (*dlock.DistributedReentrantLock, error) {
			return g.GenWithLease(typ, target, time.Second)
		}, time.Second},
	} {
		l, err := tc.gen(tc.typ, " 12345-"+suffix+" ")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := l.Config().Lease(); got != tc.lease {
			t.Errorf("%s: Config().Lease() = %v, want %v", tc.name, got, tc.lease)
		}
		key := "DLOCK_" + tc.typ + "_12345-" + suffix
		if got := l.Config().UniqueKey(); got != key {
			t.Errorf("%s: key %q, want %q", tc.name, got, key)
		}
		sent := time.Now()
		owned, err := l.Lock(ctx)
		if err != nil {
			t.Fatalf("%s: Lock: %v", tc.name, err)
		}
		// The key was written with the lease after sent, and is read before now: its time to
		// live lies within the lease and the lease less the time since sent (a millisecond
		// spared for rounding), however slow the machine.
		pttl := c.PTTL(ctx, key).Val()
		if least := tc.lease - time.Since(sent) - time.Millisecond; pttl < least || pttl > tc.lease {
			t.Errorf("%s: key's PTTL %v right after Lock, want within [%v, %v]", tc.name, pttl, least, tc.lease)
		}
		if err := owned.Unlock(); err != nil {
			t.Fatalf("%s: Unlock: %v", tc.name, err)
		}
		if c.Exists(ctx, key).Val() != 0 {
			t.Errorf("%s: key left after Unlock", tc.name)
		}
	}
	if _, err := g.Gen("FAKE_LOCK", "A_TARGET"); !errors.Is(err, dlock.ErrInvalidConfig) {
		t.Fatalf("Gen of a type without a lease = %v, want ErrInvalidConfig", err)
	}
}

// propertiesKey escapes typ as a key of a properties file, as java.util.Properties.store does:
// '\\', '=', ':', and a leading '#' or '!'.
func propertiesKey(typ string) string {
	var b strings.Builder
	for i := 0; i < len(typ); i++ { // (bytes: a type need not be UTF-8)
		if c := typ[i]; strings.IndexByte(`\=:`, c) >= 0 || i == 0 && (c == '#' || c == '!') {
			b.WriteByte('\\')
		}
		b.WriteByte(typ[i])
	}
	return b.String()
}
