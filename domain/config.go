// Package domain holds the value types of a distributed lock: its configuration, the entity
// stored in Redis, and their small enumerations. It depends on nothing.
package domain

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	dlerrors "github.com/dlockgo/dlock/errors"
)

const (
	// KeyPrefix starts every lock key, as in Java DLock.
	KeyPrefix = "DLOCK"
	// KeySeparator joins prefix, type and target, as in Java DLock.
	KeySeparator = "_"

	// MinLease is the shortest lease accepted. The poller first runs after lease/10 and then
	// every lease/6, and renewal runs at 75 % of the lease; below 30 ms those timings fall under
	// a few milliseconds and a single slow round trip would cost the lease.
	MinLease = 30 * time.Millisecond
	// MaxLease is the longest lease accepted (one week): longer ones are almost always a
	// unit mistake.
	MaxLease = 7 * 24 * time.Hour

	// MaxTargetLen is the longest lock target accepted, in bytes after trimming: the key is
	// sent with every request and kept in several keys beside the lock, so a target is a
	// name, not a payload (hash a longer one first).
	MaxTargetLen = 1024
	// MaxTypeLen is the longest lock type accepted, in bytes.
	MaxTypeLen = 256
)

// DLockType names a group of locks that share a lease, such as USER_LOCK or ORDER_LOCK.
type DLockType string

// DLockConfig is the validated configuration of one lock: its type, its target, the Redis key
// built from them and the lease. The zero value is not valid; build one with NewDLockConfig.
// A DLockConfig is immutable and safe to share.
type DLockConfig struct {
	lockType   DLockType
	lockTarget string
	uniqueKey  string
	lease      time.Duration
}

// NewDLockConfig validates its arguments and builds the key DLOCK_<type>_<target> exactly as
// Java DLock does, with the target trimmed of leading and trailing white space and control
// characters. It returns an error wrapping errors.ErrInvalidConfig when the type is blank or
// holds white space or control characters, when the trimmed target is empty or holds control
// characters, when the type or target is longer than MaxTypeLen or MaxTargetLen bytes, when
// braces in the key would put the keys kept beside it (fencing counter, release channel) in
// another Redis Cluster slot (such as a target "a}b"), when the key, with a hash tag of its
// own, would be a key kept beside another lock's (such as a target "{acct}a:fence", the
// fencing counter of target "{acct}a": see sideKeyOf), or when the lease is outside
// [MinLease, MaxLease] or not a whole number of milliseconds (Redis keeps leases in
// milliseconds).
func NewDLockConfig(lockType DLockType, lockTarget string, lease time.Duration) (DLockConfig, error) {
	if err := ValidateType(lockType); err != nil {
		return DLockConfig{}, err
	}
	target := TrimTarget(lockTarget)
	if target == "" {
		return DLockConfig{}, fmt.Errorf("%w: blank lock target", dlerrors.ErrInvalidConfig)
	}
	if len(target) > MaxTargetLen {
		return DLockConfig{}, fmt.Errorf("%w: lock target of %d bytes is longer than the maximum %d (hash a longer one)", dlerrors.ErrInvalidConfig, len(target), MaxTargetLen)
	}
	if strings.IndexFunc(target, unicode.IsControl) >= 0 {
		return DLockConfig{}, fmt.Errorf("%w: lock target %q holds a control character", dlerrors.ErrInvalidConfig, target)
	}
	if err := ValidateLease(lease); err != nil {
		return DLockConfig{}, err
	}
	key := UniqueKey(lockType, target)
	if HashTag(SideKey(key, "x")) != HashTag(key) {
		return DLockConfig{}, fmt.Errorf("%w: braces in key %q (type %q, target %q) would put the keys beside it in another Redis Cluster slot (refused on every deployment): hash the target, or leave out braces that do not enclose a hash tag such as {acct}", dlerrors.ErrInvalidConfig, key, lockType, target)
	}
	if other, ok := sideKeyOf(key); ok {
		return DLockConfig{}, fmt.Errorf("%w: key %q, or a key beside it, is a key kept beside lock %q (with a hash tag of its own, a key beside it is the lock key, a colon and a name): with a hash tag in the type or the target, the key must not end in a colon and one of %s, nor hold %s", dlerrors.ErrInvalidConfig, key, other, strings.Join(sideNames[:], ", "), ":"+strings.Join(perProcess[:], ":, :")+":")
	}
	return DLockConfig{
		lockType:   lockType,
		lockTarget: target,
		uniqueKey:  key,
		lease:      lease,
	}, nil
}

// ValidateType reports whether t can name a lock type: not blank, no white space, no control
// characters, no invisible format characters (a byte-order mark, a zero-width space: a type
// that looks like another and names other keys). The error wraps errors.ErrInvalidConfig.
func ValidateType(t DLockType) error {
	if t == "" {
		return fmt.Errorf("%w: blank lock type", dlerrors.ErrInvalidConfig)
	}
	if len(t) > MaxTypeLen {
		return fmt.Errorf("%w: lock type of %d bytes is longer than the maximum %d", dlerrors.ErrInvalidConfig, len(t), MaxTypeLen)
	}
	if strings.IndexFunc(string(t), func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("%w: lock type %q holds white space or a control character", dlerrors.ErrInvalidConfig, string(t))
	}
	if strings.IndexFunc(string(t), func(r rune) bool { return unicode.Is(unicode.Cf, r) }) >= 0 {
		return fmt.Errorf("%w: lock type %q holds an invisible format character", dlerrors.ErrInvalidConfig, string(t))
	}
	return nil
}

// ValidateLease reports whether d is a usable lease: within [MinLease, MaxLease] and a whole
// number of milliseconds. The error wraps errors.ErrInvalidConfig.
func ValidateLease(d time.Duration) error {
	switch {
	case d < MinLease:
		return fmt.Errorf("%w: lease %v is shorter than the minimum %v", dlerrors.ErrInvalidConfig, d, MinLease)
	case d > MaxLease:
		return fmt.Errorf("%w: lease %v is longer than the maximum %v", dlerrors.ErrInvalidConfig, d, MaxLease)
	case d%time.Millisecond != 0:
		return fmt.Errorf("%w: lease %v is not a whole number of milliseconds", dlerrors.ErrInvalidConfig, d)
	}
	return nil
}

// TrimTarget trims a lock target as Java's StringUtils.trimToEmpty does: every leading and
// trailing character at or below U+0020 is removed.
func TrimTarget(target string) string {
	return strings.TrimFunc(target, func(r rune) bool { return r <= ' ' })
}

// UniqueKey builds the Redis key of a lock, DLOCK_<type>_<target>, without validating.
// Note that, as in Java DLock, type "A_B" with target "C" and type "A" with target "B_C" give
// the same key.
func UniqueKey(lockType DLockType, trimmedTarget string) string {
	return KeyPrefix + KeySeparator + string(lockType) + KeySeparator + trimmedTarget
}

// LockType returns the lock type.
func (c DLockConfig) LockType() DLockType { return c.lockType }

// LockTarget returns the trimmed lock target.
func (c DLockConfig) LockTarget() string { return c.lockTarget }

// UniqueKey returns the Redis key of the lock, DLOCK_<type>_<target>.
func (c DLockConfig) UniqueKey() string { return c.uniqueKey }

// Lease returns how long the key lives in Redis unless renewed.
func (c DLockConfig) Lease() time.Duration { return c.lease }

// WithLease returns c with another lease, validated as NewDLockConfig does. The zero
// DLockConfig, which names no lock, is refused too.
func (c DLockConfig) WithLease(lease time.Duration) (DLockConfig, error) {
	if c.IsZero() {
		return DLockConfig{}, fmt.Errorf("%w: a zero DLockConfig names no lock (build one with NewDLockConfig)", dlerrors.ErrInvalidConfig)
	}
	if err := ValidateLease(lease); err != nil {
		return DLockConfig{}, err
	}
	c.lease = lease
	return c, nil
}

// IsZero reports whether c is the zero value, which no valid configuration is.
func (c DLockConfig) IsZero() bool { return c.uniqueKey == "" }

// SideKey returns a key kept beside the lock (such as its fencing counter) that Redis Cluster
// places in the lock key's hash slot: the lock key is used as the hash tag, unless the lock key
// already holds a hash tag of its own, in which case that tag is kept.
func (c DLockConfig) SideKey(suffix string) string {
	return SideKey(c.uniqueKey, suffix)
}

// SideKey is DLockConfig.SideKey for a bare key.
func SideKey(key, suffix string) string {
	if HashTag(key) != key {
		return key + ":" + suffix
	}
	return "{" + key + "}:" + suffix
}

// The names of the keys kept beside a lock key (SideKey): processor's scripts keep them, and
// processor names them by these constants. DoneSuffix, CheckSuffix and ForcedSuffix are
// followed by a colon and a process's name, RemovedSuffix by a colon and a locker; the
// read-write lock's and semaphore's begin with SharedPrefix and a colon.
const (
	FenceSuffix   = "fence"    // the fencing counter
	ReleaseSuffix = "released" // the prefix of the processes' release channels
	LineSuffix    = "line"     // the waiting line
	DoneSuffix    = "done"     // a process's settled mark
	CheckSuffix   = "check"    // a process's checked mark
	ForcedSuffix  = "forced"   // a process's lockers removed last
	RemovedSuffix = "removed"  // what an operator's removal of a locker answered
	WantSuffix    = "want"     // what each process in line waits with
	GapSuffix     = "gap"      // the window left free for processes not in line
	FirstSuffix   = "first"    // the first token of the holding

	SharedPrefix      = "shared"
	SharedHeldSuffix  = SharedPrefix + ":held"
	SharedExpSuffix   = SharedPrefix + ":exp"
	SharedLineSuffix  = SharedPrefix + ":line"
	SharedWantSuffix  = SharedPrefix + ":want"
	SharedGoneSuffix  = SharedPrefix + ":gone"
	SharedFenceSuffix = SharedPrefix + ":fence"
	SharedKindSuffix  = SharedPrefix + ":kind"
	SharedHeardSuffix = SharedPrefix + ":heard"
)

// sideNames are the names a key kept beside a lock key ends in; perProcess, those followed by
// a colon and a process's name or a locker (and SharedPrefix, by a colon and a name).
var (
	sideNames = [...]string{FenceSuffix, ReleaseSuffix, LineSuffix, WantSuffix, GapSuffix, FirstSuffix,
		SharedHeldSuffix, SharedExpSuffix, SharedLineSuffix, SharedWantSuffix, SharedGoneSuffix, SharedFenceSuffix,
		SharedKindSuffix, SharedHeardSuffix, SharedPrefix, DoneSuffix, CheckSuffix, ForcedSuffix, RemovedSuffix}
	perProcess = [...]string{DoneSuffix, CheckSuffix, ForcedSuffix, RemovedSuffix}
)

// sideKeyOf reports whether key, one with a hash tag of its own, is a key kept beside another
// such lock key (SideKey), or has keys beside it that are, and that lock key. Such a lock's
// keys beside it are the lock key, a colon and a name: the processor's fencing counter,
// release channel, line, want, gap and first keys, one per process (done:<owner>,
// check:<owner>, forced:<owner>), one per locker an operator removed (removed:<locker>), and
// the read-write lock's and semaphore's (shared:<name>). So key may not end in a colon and
// one of those names, nor hold a per-process one followed by a colon, nor end in a colon and
// the first part of a two-part name (shared, done, check, forced, removed: its own keys would
// then be another's). An untagged key's keys beside it begin
// with a brace, which no lock key does.
func sideKeyOf(key string) (string, bool) {
	if HashTag(key) == key {
		return "", false
	}
	tagged := func(lock string) bool { return HashTag(lock) != lock }
	for _, name := range sideNames {
		if lock, ok := strings.CutSuffix(key, ":"+name); ok && tagged(lock) {
			return lock, true
		}
	}
	for _, name := range perProcess {
		sep := ":" + name + ":"
		for at, from := 0, 0; ; from = at + 1 {
			i := strings.Index(key[from:], sep)
			if i < 0 {
				break
			}
			if at = from + i; tagged(key[:at]) {
				return key[:at], true
			}
		}
	}
	return "", false
}

// HashTag returns the part of key that Redis Cluster hashes: the text between the first '{'
// and the first '}' after it when that is not empty, else the whole key.
func HashTag(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open+1 : open+1+end]
		}
	}
	return key
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag, modulo
// 16384.
func Slot(key string) int {
	var crc uint16
	for _, b := range []byte(HashTag(key)) {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// DriftAllowance is how much sooner than Redis a holder stops counting itself the holder of a
// lease: 1 % of the lease plus 2 ms, as Redlock allows. A holder counts a lease from the send
// time of a request of its own on its own clock, and Redis expires the key by its clock; the
// allowance covers the two clocks running at rates up to 1 % apart over one lease (NTP slews
// up to 0.05 %) and the 2 ms of resolution and scheduling between reading the clock and
// sending. Clocks further apart than that are outside what the lock promises.
func DriftAllowance(lease time.Duration) time.Duration {
	return lease/100 + 2*time.Millisecond
}

// HeldUntil is until when a holder counts itself the holder of a lease granted by a request it
// sent at sent: sent + lease − DriftAllowance(lease).
func HeldUntil(sent time.Time, lease time.Duration) time.Time {
	return sent.Add(lease - DriftAllowance(lease))
}

// GrantedFrom is when a process counts a key granted to it from (its lease then runs as from
// a request sent at that time, HeldUntil): waited, the send time of its last request whose
// answer showed it waiting, plus the time Redis's clock ran from that request to the grant,
// less 1 % of it for the clocks' rates. seen is what that answer carried (Redis's clock in µs,
// or the fencing counter where it runs ahead: no earlier than the request ran), at is Redis's clock in
// µs as it ran the grant (0: not told), and heard when the grant's message came. A grant that
// Redis's clock puts further from the request than has passed here by the message's arrival
// is counted from waited: that clock ran fast or jumped, or the two readings came from two
// servers (a failover, a slot that moved) whose clocks differ, and the time is not trusted.
func GrantedFrom(waited time.Time, seen, at uint64, heard time.Time) time.Time {
	if at <= seen {
		return waited
	}
	d := time.Duration(at-seen) * time.Microsecond
	d -= d / 100
	if heard.Sub(waited) < d {
		return waited
	}
	return waited.Add(d)
}
