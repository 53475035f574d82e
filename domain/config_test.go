package domain_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
)

func TestNewDLockConfig(t *testing.T) {
	cases := []struct {
		typ, target string
		lease       time.Duration
		key         string // "" when invalid
	}{
		{"ORDER", "42", time.Second, "DLOCK_ORDER_42"},
		{"ORDER", "  42\t\n", time.Second, "DLOCK_ORDER_42"},
		{"USER_LOCK", "a b", domain.MinLease, "DLOCK_USER_LOCK_a b"},
		{"T", "{tag}x", domain.MaxLease, "DLOCK_T_{tag}x"},
		{"", "42", time.Second, ""},
		{"OR DER", "42", time.Second, ""},
		{"\ufeffORDER", "42", time.Second, ""}, // a byte-order mark
		{"OR\u200bDER", "42", time.Second, ""}, // a zero-width space
		{"\u8ba2\u5355", "42", time.Second, "DLOCK_\u8ba2\u5355_42"},
		{"ORDER", "", time.Second, ""},
		{"ORDER", " \t ", time.Second, ""},
		{"ORDER", "4\x002", time.Second, ""},
		{"ORDER", "a}b", time.Second, ""},
		{"ORDER", strings.Repeat("x", domain.MaxTargetLen), time.Second, "DLOCK_ORDER_" + strings.Repeat("x", domain.MaxTargetLen)},
		{"ORDER", strings.Repeat("x", domain.MaxTargetLen+1), time.Second, ""},
		{strings.Repeat("T", domain.MaxTypeLen+1), "42", time.Second, ""},
		{"ORDER", "42", 0, ""},
		{"ORDER", "42", domain.MinLease - time.Millisecond, ""},
		{"ORDER", "42", domain.MaxLease + time.Millisecond, ""},
		{"ORDER", "42", time.Second + time.Microsecond, ""},
		{"ORDER", "42", -time.Second, ""},
	}
	for _, tc := range cases {
		c, err := domain.NewDLockConfig(domain.DLockType(tc.typ), tc.target, tc.lease)
		if tc.key == "" {
			if !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Errorf("(%q, %q, %v): err = %v, want ErrInvalidConfig", tc.typ, tc.target, tc.lease, err)
			}
			continue
		}
		if err != nil || c.UniqueKey() != tc.key || c.Lease() != tc.lease || c.LockType() != domain.DLockType(tc.typ) {
			t.Errorf("(%q, %q, %v) = %+v, %v; want key %q", tc.typ, tc.target, tc.lease, c, err, tc.key)
		}
	}
	if !(domain.DLockConfig{}).IsZero() {
		t.Error("zero config not IsZero")
	}
	// WithLease validates as NewDLockConfig does: the lease, and a receiver that names a lock.
	if c, err := (domain.DLockConfig{}).WithLease(time.Second); !errors.Is(err, dlerrors.ErrInvalidConfig) {
		t.Errorf("zero config's WithLease = %+v, %v; want ErrInvalidConfig", c, err)
	}
	c, _ := domain.NewDLockConfig("ORDER", "42", time.Second)
	if _, err := c.WithLease(domain.MinLease - time.Millisecond); !errors.Is(err, dlerrors.ErrInvalidConfig) {
		t.Errorf("WithLease below the minimum = %v; want ErrInvalidConfig", err)
	}
	if c2, err := c.WithLease(2 * time.Second); err != nil || c2.Lease() != 2*time.Second || c2.UniqueKey() != c.UniqueKey() {
		t.Errorf("WithLease(2s) = %+v, %v", c2, err)
	}
}

// A target refused for its braces is refused on every deployment, single servers included:
// the error says what to do instead, not only what a Redis Cluster would make of it.
func TestNewDLockConfigBracesRefusalSaysWhatToDo(t *testing.T) {
	for _, target := range []string{"a}b", "{}", "x}{y"} {
		_, err := domain.NewDLockConfig("ORDER", target, time.Second)
		if !errors.Is(err, dlerrors.ErrInvalidConfig) {
			t.Fatalf("%q: err = %v, want ErrInvalidConfig", target, err)
		}
		if !strings.Contains(err.Error(), "hash the target") {
			t.Errorf("%q: %v; want it to say what to do (hash the target)", target, err)
		}
	}
}

func TestStatusString(t *testing.T) {
	if domain.StatusProcessing.String() != "PROCESSING" || domain.StatusInitial.String() != "INITIAL" || domain.DLockStatus(9).String() != "UNKNOWN" {
		t.Fatal("status names differ from Java DLock's")
	}
}

// FuzzNewDLockConfig: no panic; a valid config has the Java key, a lease in range, and side
// keys in its cluster slot; an invalid one says ErrInvalidConfig.
func FuzzNewDLockConfig(f *testing.F) {
	f.Add("ORDER", "42", int64(1000))
	f.Add("T", " {x}y ", int64(30))
	f.Add("", "", int64(-1))
	f.Add("A_B", "C}{", int64(604800000))
	f.Fuzz(func(t *testing.T, typ, target string, leaseMs int64) {
		lease := time.Duration(leaseMs) * time.Millisecond
		c, err := domain.NewDLockConfig(domain.DLockType(typ), target, lease)
		if err != nil {
			if !errors.Is(err, dlerrors.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		trimmed := domain.TrimTarget(target)
		if c.UniqueKey() != "DLOCK_"+typ+"_"+trimmed || trimmed == "" || strings.TrimSpace(typ) == "" {
			t.Fatalf("key %q from (%q, %q)", c.UniqueKey(), typ, target)
		}
		if c.Lease() < domain.MinLease || c.Lease() > domain.MaxLease {
			t.Fatalf("lease %v accepted", c.Lease())
		}
		if domain.HashTag(c.SideKey("fence")) != domain.HashTag(c.UniqueKey()) {
			t.Fatalf("side key %q outside the slot of %q", c.SideKey("fence"), c.UniqueKey())
		}
	})
}

func TestSlotMatchesRedisCluster(t *testing.T) {
	// values from CLUSTER KEYSLOT
	for key, want := range map[string]int{"foo": 12182, "somekey": 11058, "{foo}bar": 12182, "{}foo": 9500, "": 0} {
		if got := domain.Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// A holder stops counting itself the holder 1 % of its lease plus 2 ms before its lease,
// counted from its request's send, runs out: Redis, counting from when it ran the request by
// its own clock, keeps the key at least that much longer.
func TestHeldUntilKeepsTheDriftAllowance(t *testing.T) {
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ lease, allowance time.Duration }{
		{domain.MinLease, 2300 * time.Microsecond},
		{time.Second, 12 * time.Millisecond},
		{30 * time.Second, 302 * time.Millisecond},
	} {
		if got := domain.DriftAllowance(tc.lease); got != tc.allowance {
			t.Errorf("DriftAllowance(%v) = %v, want %v", tc.lease, got, tc.allowance)
		}
		if got := domain.HeldUntil(sent, tc.lease); !got.Equal(sent.Add(tc.lease - tc.allowance)) {
			t.Errorf("HeldUntil(%v) = %v after the send, want %v", tc.lease, got.Sub(sent), tc.lease-tc.allowance)
		}
	}
}
