// Package processor is the storage contract of a distributed lock and its Redis implementation.
package processor

import (
	"context"
	"time"

	"github.com/dlockgo/dlock/domain"
)

// DLockProcessor reads and writes lock records. Every method is safe for concurrent use and
// honours its context. Answers are values (Result, Inspection); an error means the round trip
// failed, and is then a *errors.RedisProcessError: the request's outcome is unknown; or that
// the request was refused before it was sent (bad input, such as a nil context or a zero
// domain.DLockConfig), and then it wraps errors.ErrInvalidConfig and nothing was sent.
//
// Every method that writes is safe to run twice (a client may send a command again after its
// reply was lost) and safe to run late (after its caller gave up): the key only ever holds the
// locker of the acquisition that asked for it, a renewal never shortens a key's life, and an
// acquisition that was released, given back or failed is settled, so no copy of its request
// can take the key afterwards.
type DLockProcessor interface {
	// Load returns the record under the lock's key, or nil when the key is free.
	Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error)
	// Lock takes the key for req.Locker with cfg's lease if it is free, or finds it granted
	// to req.Locker already (Taken, with the first of req.Tokens fencing tokens reserved for
	// it; the key lives at least the lease from this request). Otherwise, with req.Wait, this
	// process stands in the line of waiting processes with req.Locker (or renews its entry),
	// and a release may grant it the key; without, the attempt is settled (Held). Settled:
	// the attempt was settled already, or is older than its owner's holder or entry (a stale
	// copy). A waiting process's retry poller sends Lock again: it renews the entry, and finds
	// a grant whose message went unheard.
	Lock(ctx context.Context, cfg domain.DLockConfig, req LockRequest) (Result, error)
	// ExpandLease renews the key held by req.Locker with cfg's lease, never shortening it
	// (Renewed, with the first of req.Tokens new tokens when asked); with req.Yield and
	// another live process in line it grants the key to that process instead and puts this
	// one back in line with req.Next (Yielded). Gone: the key no longer holds the locker;
	// Settled: it does not because the locker was let go already (this request came late or
	// twice).
	ExpandLease(ctx context.Context, cfg domain.DLockConfig, req RenewRequest) (Result, error)
	// Unlock lets the key go if it still holds req.Locker — granted to the first live process
	// in line (Result.Next), or free — and settles the acquisition either way (Released,
	// Gone, or Settled when this release ran before). It also gives back an acquisition whose
	// outcome is unknown.
	Unlock(ctx context.Context, cfg domain.DLockConfig, req ReleaseRequest) (Result, error)
	// Leave takes this process out of the line and settles every acquisition of the process
	// up to req.Last, so that none of their requests still on the way can put it back in
	// line, take the key or be granted it; a key one of them holds is let go.
	// Released: it let go of a key one of them held (whom it was granted to), else Gone.
	Leave(ctx context.Context, cfg domain.DLockConfig, req LeaveRequest) (Result, error)
	// Inspect reads what the store holds for the lock, changing nothing.
	Inspect(ctx context.Context, cfg domain.DLockConfig) (Inspection, error)
	// ForceRelease lets the key go, as a release does, if it still holds holder (Released,
	// with whom it was granted to), else Gone — or Settled when a copy of this request (sent
	// again after a lost reply) removed holder.
	ForceRelease(ctx context.Context, cfg domain.DLockConfig, holder string) (Result, error)
}

// Outcome is what Redis answered to a write.
type Outcome uint8

const (
	// Taken: the key now holds the request's locker.
	Taken Outcome = iota + 1
	// Held: another locker holds the key (or it is in a window left for processes not in
	// line).
	Held
	// Settled: the request's acquisition was released, given back, failed or left already,
	// or is older than its owner's current one; the request came late or twice and changed
	// nothing.
	Settled
	// Renewed: the lease was renewed.
	Renewed
	// Yielded: the key was granted to the first process in line; this one is back in line.
	Yielded
	// Released: the key was let go (granted to Result.Next, or free).
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
	// asked), or of the block granted with the key (Released, Yielded); 0 otherwise.
	Token uint64
	// Next is the locker the key was granted to (Released, Yielded), "" when it was left free.
	Next string
	// At is Redis's clock (µs) as it ran the grant to Next (what the grant's message tells
	// Next's process); 0 when there was no grant.
	At uint64
	// Origin is the first token of the holding the key is in (Taken): Token unless the key was
	// granted to the request's locker, or taken by an earlier copy of the request; 0 when
	// unknown. A tenure's renewals name it (RenewRequest.Origin).
	Origin uint64
	// Gap is the window the key was left free for processes not in line (Released,
	// Yielded), 0 for none.
	Gap time.Duration
	// Seen is what the request found under the key when it was held (Held): see Sighting.
	// Its Rank, Heard, Holder and Life also tell the place in line of a yield (Yielded) and of a
	// release that stood in line again (Queued), and the key granted.
	Seen Sighting
	// Queued reports a release (Released) that granted the key to another process and put
	// this one in line with ReleaseRequest.Next.
	Queued bool
}

// Sighting is what a request found under a held key.
type Sighting struct {
	// Life is the key's remaining life: it cannot come free before then but by a release,
	// which publishes (or, with Holder "", how long a window left for processes not in line
	// lasts); negative when the key has no expiry (set by hand: when it comes free is unknown).
	Life time.Duration
	// Holder is the locker under the key; "" inside a window left free for processes not
	// in line.
	Holder string
	// Fence is the server clock in µs as the request ran, or the fencing counter if larger
	// (but not above the first token of the key's holding less one: a release lowers the
	// counter that far): every grant made before the request ran carried a token at or below
	// it, every grant after, a token above. A process that hears a grant tells by it whether
	// its request that showed it waiting ran before that grant.
	Fence uint64
	// Rank is the process's place in line after a waiting attempt (0 for first), -1 when it
	// does not stand in line.
	Rank int
	// Heard reports that Redis saw the process listen on its channel of the key
	// (ProcessChannel) as it ran a waiting attempt: a release may grant the key to it however
	// long ago it renewed its entry, since it hears the grant at once.
	Heard bool
}

// MaxTokens is the most fencing tokens one request may reserve (Tokens, NextTokens): a request
// for more is refused (ErrInvalidConfig) before it is sent, and the scripts count a line entry
// that waits with more (written by no script of dlock's) as expired. With the fencing counter
// below 2^53 − MaxTokens (or refused) it keeps every token below 2^53, where Lua's numbers
// stop being exact.
const MaxTokens = 1 << 30

// LockRequest is an attempt to take the key.
type LockRequest struct {
	Locker string // <owner><sequence number>: unique to this acquisition
	Wait   bool   // stand in line (or renew the entry) when the key is held
	// Listening, with Wait, says that the process counts itself heard on its channel of the
	// key: its subscription confirmed, and no answer since said that Redis does not hear it
	// (Sighting.Heard). When Redis does not hear a process that says so, the process may have
	// died with the request on its way (Redis drops the subscription with the connection, and
	// a client may send a request again after its process died): its entry counts as renewed
	// long ago, and no release grants it the key until it asks again saying otherwise. A live
	// process told so asks again saying otherwise, and is judged as one without notifications.
	// RenewRequest (with Yield) and ReleaseRequest (with Next) say it of the attempt they stand
	// in line with.
	Listening  bool
	Tokens     int          // fencing tokens to reserve (1 to MaxTokens): more than one for passes within this process
	Unreleased []Unreleased // the releases of the same owner retried meanwhile, oldest first
}

// Unreleased names a holding of the request's owner whose release went unanswered and is
// retried, in every request of that owner on the key while the retry goes on (each one
// retried, oldest first). If no release of it ran and the key no longer holds it (or holds it
// anew) when Redis runs the request, Redis lost it from its holder; it is remembered as
// removed, as a ForceRelease does, so that the retried release answers Gone even after a
// newer acquisition's release, yield or leave, or an operator's removal of a newer holding,
// settled it: its holder learns of the loss.
type Unreleased struct {
	Locker string // the holding's locker (one of the request's owner, with its number: "" is refused, ErrInvalidConfig)
	Origin uint64 // the first token it was taken with (0 if unknown)
}

// RenewRequest renews a held key.
type RenewRequest struct {
	Locker string
	Tokens int    // fencing tokens to reserve; 0 for none
	Yield  bool   // grant the key to the first live process in line, if any
	Check  string // with Yield: a fresh locker of the same owner, whose number this check marks
	// With Yield: the attempt this process then waits with in line — a fresh locker of the
	// same owner, its lease and its tokens.
	Next       string
	NextLease  time.Duration
	NextTokens int
	Listening  bool   // with Yield: the process counts itself heard on its channel (LockRequest's)
	Last       uint64 // the last token handed out (for Yield; 0 if unknown)
	// Origin is the first token of the holding the tenure began with (Result.Origin, or a
	// grant's token; 0 if unknown): a key that holds the locker in another holding (taken
	// anew by a late copy of its take after an empty restart) is let go and answers Gone.
	Origin     uint64
	Unreleased []Unreleased // the releases of the same owner retried meanwhile, oldest first
}

// ReleaseRequest lets a held key go.
type ReleaseRequest struct {
	Locker string
	Last   uint64 // the last token handed out (its block's first less one if none; 0 if unknown)
	// Origin is the first token of the holding the tenure began with (as RenewRequest's; 0 if
	// unknown): a key that holds the locker in another holding (taken anew by a late copy of
	// its take after an empty restart) is let go and answers Gone, as a renewal does.
	Origin uint64
	// Next, when set, is a fresh locker of the same owner that this process stands in line
	// with again at the end of the line if the key is granted to another process (not when
	// it is left free), with its lease and tokens: a goroutine of the process is expected to
	// want the key again at once (Result.Queued). Ignored without a mark (Options.Mark).
	Next       string
	NextLease  time.Duration
	NextTokens int
	Listening  bool         // with Next: the process counts itself heard on its channel (LockRequest's)
	Unreleased []Unreleased // the other releases of the same owner retried meanwhile, oldest first
}

// LeaveRequest takes a process out of the line.
type LeaveRequest struct {
	Last       string       // the newest locker this process made (its acquisitions up to it are settled); "" for none
	Unreleased []Unreleased // the releases of this process retried meanwhile, oldest first
}

// Inspection is what Redis holds for a lock, read in one round trip by Inspect.
type Inspection struct {
	// Holder is the locker under the lock key, or "" when the key is free.
	Holder string
	// TTL is the holder's remaining life (0 when free).
	TTL time.Duration
	// Fence is the fencing counter: the last token handed out or reserved, while it is kept
	// (FenceTTL); 0 once it expired.
	Fence uint64
	// Waiting lists the processes in line (their marks), first in line first.
	Waiting []string
}
