// Package processor is the storage contract of a distributed lock and its Redis implementation.
package processor

import (
	"context"
	"time"

	"github.com/dlockgo/dlock/domain"
)

// DLockProcessor reads and writes lock records. Every method is safe for concurrent use and
// honours its context. Answers are values (Result, PollResult); an error means the round trip
// failed, and is then a *errors.RedisProcessError: the request's outcome is unknown.
//
// Every method that writes is safe to run twice (a client may send a command again after its
// reply was lost) and safe to run late (after its caller gave up): the key only ever holds the
// locker of the acquisition that asked for it, a renewal never shortens a key's life, and an
// acquisition that was released, given back or failed is settled, so no copy of its request
// can take the key afterwards.
type DLockProcessor interface {
	// Load returns the record under the lock's key, or nil when the key is free.
	Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error)
	// Lock takes the key for req.Locker with cfg's lease if it is free or reserved for this
	// process (Taken, with the first of req.Tokens fencing tokens reserved for it); otherwise
	// the attempt is settled (Held) and, with req.Wait, this process joins the line of
	// waiting processes. Settled: the attempt was settled already (a late copy).
	Lock(ctx context.Context, cfg domain.DLockConfig, req LockRequest) (Result, error)
	// ExpandLease renews the key held by req.Locker with cfg's lease, never shortening it
	// (Renewed, with the first of req.Tokens new tokens when asked); with req.Yield and
	// another process in line it gives the key to that process instead and puts this one back
	// in line (Yielded). Gone: the key no longer holds the locker; Settled: it does not
	// because the locker was let go already (this request came late or twice).
	ExpandLease(ctx context.Context, cfg domain.DLockConfig, req RenewRequest) (Result, error)
	// Unlock lets the key go if it still holds req.Locker — reserved for the first process in
	// line (Result.Next), or free — and settles the acquisition either way (Released, Gone,
	// or Settled when this release ran before). It also gives back an acquisition whose
	// outcome is unknown.
	Unlock(ctx context.Context, cfg domain.DLockConfig, req ReleaseRequest) (Result, error)
	// IsFree is the retry poller's check: the key is free, reserved for this process, or held
	// (this process's entry in the line renewed, if it has one; what it found under the key).
	IsFree(ctx context.Context, cfg domain.DLockConfig) (PollResult, error)
	// Leave takes this process out of the line, passing on a key reserved for it, and settles
	// every acquisition of the process up to req.Last, so that none of their requests still
	// on the way can put it back in line.
	Leave(ctx context.Context, cfg domain.DLockConfig, req LeaveRequest) error
	// Inspect reads what the store holds for the lock, changing nothing.
	Inspect(ctx context.Context, cfg domain.DLockConfig) (Inspection, error)
	// ForceRelease lets the key go, as a release does, if it still holds holder, and reports
	// whether it did.
	ForceRelease(ctx context.Context, cfg domain.DLockConfig, holder string) (bool, error)
}

// Outcome is what Redis answered to a write.
type Outcome uint8

const (
	// Taken: the key now holds the request's locker.
	Taken Outcome = iota + 1
	// Held: another locker holds the key (or it is reserved for another process).
	Held
	// Settled: the request's acquisition was released, given back or failed already; the
	// request came late or twice and changed nothing.
	Settled
	// Renewed: the lease was renewed.
	Renewed
	// Yielded: the key was given to the first process in line; this one is back in line.
	Yielded
	// Released: the key was let go (reserved for Result.Next, or free).
	Released
	// Gone: the key no longer holds the request's locker.
	Gone
)

var outcomeNames = [...]string{"", "taken", "held", "settled", "renewed", "yielded", "released", "gone"}

// String names the outcome.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o > 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Result is the answer to a write.
type Result struct {
	Outcome Outcome
	// Token is the first of the fencing tokens reserved (Taken, or Renewed with tokens
	// asked); 0 otherwise.
	Token uint64
	// Next is the process the key was reserved for (Released), "" when it was left free.
	Next string
	// Seen is what the request found under the key when it was held (Held): see Sighting.
	Seen Sighting
}

// Sighting is what a request found under a held key.
type Sighting struct {
	// Place is this process's place in the line of waiting processes (0: first), -1 when it
	// is not in line.
	Place int
	// Life is the key's remaining life: it cannot come free before then but by a release,
	// which publishes.
	Life time.Duration
	// Holder is the value under the key: a locker, or ReservedPrefix and a process.
	Holder string
}

// LockRequest is an attempt to take the key.
type LockRequest struct {
	Locker string // <owner><sequence number>: unique to this acquisition
	Wait   bool   // join the line of waiting processes when the key is held
	Tokens int    // fencing tokens to reserve (≥ 1): more than one for passes within this process
}

// RenewRequest renews a held key.
type RenewRequest struct {
	Locker string
	Tokens int    // fencing tokens to reserve; 0 for none
	Yield  bool   // give the key to the first process in line, if any
	Check  string // with Yield: a fresh locker of the same owner, whose number this check settles
	Last   uint64 // the last token handed out (for Yield; 0 if unknown)
}

// ReleaseRequest lets a held key go.
type ReleaseRequest struct {
	Locker string
	Last   uint64 // the last token handed out (0 if unknown)
}

// LeaveRequest takes a process out of the line.
type LeaveRequest struct {
	Last string // the newest locker this process made (its acquisitions up to it are settled); "" for none
}

// PollResult is the retry poller's finding.
type PollResult struct {
	State PollState
	Seen  Sighting // when the key is held
}

// PollState says whether the key is free, reserved for this process, or held.
type PollState uint8

const (
	// PollFree: nobody holds the key.
	PollFree PollState = iota + 1
	// PollReserved: the key is reserved for this process.
	PollReserved
	// PollQueued: the key is held and this process is in line (its entry renewed).
	PollQueued
	// PollNotQueued: the key is held and this process is not in line.
	PollNotQueued
)

// Inspection is what Redis holds for a lock, read in one round trip by Inspect.
type Inspection struct {
	// Holder is the value under the lock key: a locker, ReservedPrefix and the mark of the
	// process the key waits for, or "" when the key is free.
	Holder string
	// TTL is the holder's remaining life (0 when free).
	TTL time.Duration
	// Fence is the fencing counter: the last token handed out or reserved, while it is kept
	// (FenceTTL); 0 once it expired.
	Fence uint64
	// Waiting lists the processes in line (their marks), first in line first.
	Waiting []string
}
