package processor

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
)

// Kind is what a shared lock is: a read-write lock or a semaphore. Both are kept in Redis as
// permits (shared.lua): a semaphore's k, or RWPermits for a read-write lock, whose read-hold
// takes one permit and whose write-hold takes all of them.
type Kind string

const (
	// KindRW is a read-write lock.
	KindRW Kind = "rw"
	// KindSem is a semaphore.
	KindSem Kind = "sem"
)

// RWPermits is the permits of a read-write lock: a write-hold asks for all of them, a
// read-hold for one, so a writer excludes everyone and readers exclude only writers.
const RWPermits int64 = 1 << 40

// Suffixes of the keys of a shared lock, beside its unique key: domain's, where they are
// defined.
const (
	SharedHeldSuffix  = domain.SharedHeldSuffix
	SharedExpSuffix   = domain.SharedExpSuffix
	SharedLineSuffix  = domain.SharedLineSuffix
	SharedWantSuffix  = domain.SharedWantSuffix
	SharedGoneSuffix  = domain.SharedGoneSuffix
	SharedFenceSuffix = domain.SharedFenceSuffix
	SharedKindSuffix  = domain.SharedKindSuffix
	// SharedHeardSuffix names what Redis heard of each waiting process as it last renewed its
	// line entry (when, whether it listened on its channel, its lease): a process that
	// listened then and does not now died, and the line passes it. A version before it does
	// not pass this key, and never touches it.
	SharedHeardSuffix = domain.SharedHeardSuffix
)

// SharedKeys returns the keys of cfg's shared lock, in shared.lua's order.
func SharedKeys(cfg domain.DLockConfig) []string {
	return []string{cfg.SideKey(SharedHeldSuffix), cfg.SideKey(SharedExpSuffix), cfg.SideKey(SharedLineSuffix),
		cfg.SideKey(SharedWantSuffix), cfg.SideKey(SharedGoneSuffix), cfg.SideKey(SharedFenceSuffix),
		cfg.SideKey(SharedKindSuffix), cfg.SideKey(SharedHeardSuffix)}
}

// SharedChannel is the channel on which the process owner hears of cfg's shared lock: "F"
// when the permits it waits for in line fit, "W" when another process began to wait.
func SharedChannel(cfg domain.DLockConfig, owner string) string {
	return ReleaseChannel(cfg) + ":" + domain.SharedPrefix + ":" + owner
}

// Shared names a shared lock's kind and, for a semaphore, its permits. A Shared of another
// kind (the zero Shared names none) or of fewer than one permit is refused: every method
// given one returns an error wrapping errors.ErrInvalidConfig and sends nothing.
type Shared struct {
	Kind    Kind
	Permits int64 // a semaphore's k (used when Redis holds none yet); RWPermits for KindRW
}

// TakeRequest asks for permits of a shared lock.
type TakeRequest struct {
	Locker   string // <owner><sequence number>, unique to this holding
	N        int64  // permits asked, 1 ≤ N ≤ k
	Wait     bool   // stand in line (or renew the entry) when they do not fit
	Replaces string // a holding of the same process that this one replaces when taken ("" for none)
	// Listening, with Wait, says that the process counts itself heard on its channel of the
	// lock: its subscription confirmed, and no answer since said Redis does not hear it (as
	// LockRequest.Listening says for the mutex).
	Listening bool
	// Tokens is how many fencing tokens to reserve (0 for one): the holding's token is the
	// first, and no later holding's is at or below the last. A write-hold hands them to the
	// writers it serves in turn.
	Tokens int
	// Last and BlockEnd, with Replaces: the last token the holding replaced handed out, and
	// the end of its block; the rest goes back first (as SharedReleaseBlock). 0: none.
	Last, BlockEnd uint64
	// Origin, with Replaces: the token the holding replaced was taken with (0 if unknown). A
	// holding under Replaces with another token was taken anew by a late copy of its take
	// after an empty restart wiped it, while others may have held the permits: it is let go
	// and the take is Settled, as one whose holding is gone (see SharedRenewOf).
	Origin uint64
}

// SharedResult is the answer to a write of a shared lock.
type SharedResult struct {
	Outcome Outcome // Taken, Held, Settled, Renewed, Released or Gone
	Token   uint64  // Taken: the holding's fencing token
	Waiting bool    // Taken, Renewed, Held: another process stands in line whose permits do not fit, or more than k are held
	Rank    int     // Held: the process's place in line (0 for first), -1 when not in line
	Life    time.Duration
	// Life (Held) is how long until the first holding expires, -1 when none is held.
	// Heard (Held, with Wait) reports that Redis saw the process listen on its channel of the
	// lock as it ran the take (as Sighting.Heard says for the mutex).
	Heard bool
	Let   Outcome // SharedReleaseThenTake: what became of the holding let go (Released, Settled or Gone)
	// Replaced (SharedReleaseOf, Settled) reports that the holding was let go by a take that
	// replaced it (a downgrade), not by an earlier copy of the release
	Replaced bool
}

// SharedInspection is what Redis holds for a shared lock.
type SharedInspection struct {
	Kind     Kind
	Permits  int64 // k
	Stored   bool  // Kind and Permits are Redis's (else the asker's, nothing being kept)
	Holdings []SharedHolding
	Waiting  []SharedWaiter // first in line first
	Fence    uint64
}

// SharedHolding is one holding of a shared lock.
type SharedHolding struct {
	Locker  string
	Permits int64
	Token   uint64
	TTL     time.Duration
}

// SharedWaiter is a process in a shared lock's line.
type SharedWaiter struct {
	Owner   string
	Permits int64
}

// sharedOp is one call of shared.lua: its op and what it carries (the rest is the lock's).
type sharedOp struct {
	op, locker string
	n          int64
	wait       bool
	replaces   string
	tokens     int          // take, renew: fencing tokens to reserve
	last, end  uint64       // release, or a take that replaces: the last token the holding let go handed out, and its block's last
	from       int64        // permits: the count the change applies to (0 for whatever it is)
	origin     uint64       // renew, and a take that replaces: the token the holding (replaced) was taken with (0 if unknown)
	next       *TakeRequest // release: the take that stands in line as it lets go (nil for none)
	listening  bool         // with wait or next: the process counts itself heard (TakeRequest.Listening)
	request    string       // force: the request's name
}

func (p *RedisLockProcessor) shared(ctx context.Context, cfg domain.DLockConfig, s Shared, o sharedOp) ([]any, int64, error) {
	pub, err := p.publishCommand(ctx, cfg)
	if err != nil {
		return nil, 0, err
	}
	channel := ""
	if p.opts.Publish {
		channel = SharedChannel(cfg, "")
	}
	owner, _ := SplitLocker(o.locker)
	last, end := "", ""
	if o.end > 0 {
		last, end = strconv.FormatUint(o.last, 10), strconv.FormatUint(o.end, 10)
	}
	from, origin := "", ""
	if o.from > 0 {
		from = strconv.FormatInt(o.from, 10)
	}
	if o.origin > 0 {
		origin = strconv.FormatUint(o.origin, 10)
	}
	// Takes and renewals wait for the replicas WithReplicaAck asks for, as the mutex's do: a
	// holding counts its lease only from writes a replica has, and a refill's block of tokens
	// must be replicated.
	ack := o.op == "take" || o.op == "renew" || o.next != nil
	args := []any{o.op, o.locker, owner, o.n, ms(cfg.Lease()), flag(o.wait), o.replaces, string(s.Kind), s.Permits,
		ms(EntryTTL(cfg)), ms(p.MarkLife(cfg)), ms(FenceTTL(cfg)), channel, pub, o.tokens, last, end, from, origin}
	listening := o.wait
	if o.next != nil {
		args = append(args, o.next.Locker, o.next.N, o.next.Tokens)
		listening = true
	}
	if listening && o.listening || o.request != "" {
		if o.next == nil {
			args = append(args, "", "", "")
		}
		args = append(args, flagOrNone(listening && o.listening))
	}
	if o.request != "" {
		args = append(args, o.request)
	}
	script, keys := p.scripts.run["shared"], SharedKeys(cfg)
	res, acked, err := p.run(ctx, script, ack, keys, append(command(script, keys, nil, len(args)), args...))
	if err != nil {
		return nil, 0, err
	}
	vals, err := res.Slice()
	if err == nil && len(vals) == 0 {
		err = fmt.Errorf("shared.lua returned nothing")
	}
	return vals, acked, err
}

// call runs op and reads its code: an error is the kind's refusal (-2, -3: ErrInvalidConfig)
// or a *RedisProcessError naming op.
func (p *RedisLockProcessor) call(ctx context.Context, cfg domain.DLockConfig, s Shared, o sharedOp) (int64, []any, int64, error) {
	if err := p.checkShared(ctx, cfg, s); err != nil {
		return 0, nil, 0, err
	}
	next := 0
	if o.next != nil {
		next = o.next.Tokens
	}
	if err := checkTokens(o.tokens, next); err != nil {
		return 0, nil, 0, err
	}
	if o.locker == "" && o.op != "permits" {
		return 0, nil, 0, fmt.Errorf("%w: an empty locker for %s's %s", dlerrors.ErrInvalidConfig, cfg.UniqueKey(), o.op)
	}
	if o.n > MaxPermits {
		return 0, nil, 0, fmt.Errorf("%w: %d permits asked (at most 2^53 - 1)", dlerrors.ErrInvalidConfig, o.n)
	}
	vals, acked, err := p.shared(ctx, cfg, s, o)
	if err != nil {
		return 0, nil, 0, processErr(o.op, cfg.UniqueKey(), err)
	}
	code, _ := vals[0].(int64)
	var said any // what the script said after a refusal's code (nothing when it had only nil to say)
	if len(vals) > 1 {
		said = vals[1]
	}
	switch code {
	case -2:
		kept, _ := said.(string)
		return 0, nil, 0, KindMismatch(cfg, Kind(kept), s.Kind)
	case -3:
		return 0, nil, 0, tooManyPermits(cfg, said)
	}
	return code, vals, acked, nil
}

// tooManyPermits is the refusal of a take of more permits than k, which the script said: the
// k that Redis keeps, which may not be the one this process made the semaphore with.
func tooManyPermits(cfg domain.DLockConfig, k any) error {
	return fmt.Errorf("%w: more permits asked of %s than its %v, the count Redis keeps while the semaphore is in use (the first user's, or the last SetPermits's)",
		dlerrors.ErrInvalidConfig, cfg.UniqueKey(), k)
}

// checkShared is check that also refuses a Shared that names no kind or no permits.
func (p *RedisLockProcessor) checkShared(ctx context.Context, cfg domain.DLockConfig, s Shared) error {
	if err := p.check(ctx, cfg); err != nil {
		return err
	}
	if (s.Kind != KindRW && s.Kind != KindSem) || s.Permits < 1 || s.Permits > MaxPermits {
		return fmt.Errorf("%w: a shared lock of kind %q and %d permits (from 1 to 2^53 - 1)", dlerrors.ErrInvalidConfig, s.Kind, s.Permits)
	}
	return nil
}

// MaxPermits is the largest permit count of a semaphore, and the most a take may ask for:
// shared.lua counts in Lua numbers (doubles), which hold every whole number up to 2^53 and
// lose units above it. A count of 2^53 itself would let permits out past it (2^53 + 1 rounds
// to 2^53, which fits); below it, a sum that passes the count never rounds down to it.
const MaxPermits int64 = 1<<53 - 1

// KindMismatch is the error of a request for cfg's shared lock as the kind asked when Redis
// keeps it as another kind, kept (a read-write lock asked for as a semaphore, or the other way
// round): it matches ErrInvalidConfig and names the key and both kinds.
func KindMismatch(cfg domain.DLockConfig, kept, asked Kind) error {
	return fmt.Errorf("%w: %s is a %v lock in Redis, not a %s", dlerrors.ErrInvalidConfig, cfg.UniqueKey(), kept, asked)
}

func uintOf(v any) uint64 {
	switch v := v.(type) {
	case string:
		n, _ := strconv.ParseUint(v, 10, 64)
		return n
	case int64:
		return uint64(max(v, 0))
	}
	return 0
}

// SharedTake asks for req.N permits of cfg's shared lock (shared.lua, one EVALSHA): Taken with
// the holding's token, else Held (standing in line with req.Wait), or Settled when req.Locker
// was settled already (a late or repeated copy, or what it replaces is gone). A copy of a take
// that was answered finds the same holding, renewed. A take without Wait that does not fit
// settles its locker, so that no copy of it takes permits later. req.N below 1 (the zero
// TakeRequest's) is refused with an error wrapping errors.ErrInvalidConfig.
func (p *RedisLockProcessor) SharedTake(ctx context.Context, cfg domain.DLockConfig, s Shared, req TakeRequest) (SharedResult, error) {
	if err := p.checkShared(ctx, cfg, s); err != nil {
		return SharedResult{}, err
	}
	if req.N < 1 {
		return SharedResult{}, fmt.Errorf("%w: %d permits asked", dlerrors.ErrInvalidConfig, req.N)
	}
	p.raise(cfg)
	code, vals, acked, err := p.call(ctx, cfg, s, sharedOp{op: "take", locker: req.Locker, n: req.N, wait: req.Wait, replaces: req.Replaces, tokens: req.Tokens, last: req.Last, end: req.BlockEnd, origin: req.Origin, listening: req.Listening})
	if err != nil {
		return SharedResult{}, err
	}
	return p.taken(cfg, code, vals, acked)
}

// taken reads a take's reply: its code and values.
func (p *RedisLockProcessor) taken(cfg domain.DLockConfig, code int64, vals []any, acked int64) (SharedResult, error) {
	switch {
	case code == 1 && len(vals) == 3:
		if err := p.acked("take", cfg.UniqueKey(), acked); err != nil {
			return SharedResult{}, err
		}
		return SharedResult{Outcome: Taken, Token: uintOf(vals[1]), Waiting: vals[2] == int64(1)}, nil
	case code == -1:
		return SharedResult{Outcome: Settled}, nil
	case code == 0 && len(vals) >= 3:
		r := SharedResult{Outcome: Held, Rank: -1, Life: -1, Waiting: len(vals) > 3 && vals[3] == int64(1), Heard: len(vals) > 4 && vals[4] == int64(1)}
		if rank, ok := vals[1].(int64); ok {
			r.Rank = int(rank)
		}
		if life, ok := vals[2].(int64); ok && life >= 0 {
			r.Life = time.Duration(life) * time.Millisecond
		}
		return r, nil
	}
	return SharedResult{}, processErr("take", cfg.UniqueKey(), fmt.Errorf("shared.lua answered %v", vals))
}

// SharedRenew renews the holding of locker with cfg's lease, never shortening it: Renewed
// (and whether another process waits), Gone, or Settled when it was let go already. It names
// no origin: a holding taken anew under locker after an empty restart is renewed as the one
// taken before (the library renews with SharedRenewOf, which is told of the loss).
func (p *RedisLockProcessor) SharedRenew(ctx context.Context, cfg domain.DLockConfig, s Shared, locker string) (SharedResult, error) {
	return p.SharedRefill(ctx, cfg, s, locker, 0)
}

// SharedRefill is SharedRenew that also reserves a new block of `tokens` fencing tokens (none
// for 0) for the holding to hand out: Renewed with the block's first in Token.
func (p *RedisLockProcessor) SharedRefill(ctx context.Context, cfg domain.DLockConfig, s Shared, locker string, tokens int) (SharedResult, error) {
	return p.SharedRenewOf(ctx, cfg, s, locker, 0, tokens)
}

// SharedRenewOf is SharedRefill of the holding of locker that was taken with the fencing token
// origin (the take's Token; 0 if unknown): a holding under locker with another token — taken
// anew by a late copy of its take after an empty restart wiped it, while others may have held
// the permits — is let go and answers Gone.
func (p *RedisLockProcessor) SharedRenewOf(ctx context.Context, cfg domain.DLockConfig, s Shared, locker string, origin uint64, tokens int) (SharedResult, error) {
	code, vals, acked, err := p.call(ctx, cfg, s, sharedOp{op: "renew", locker: locker, tokens: tokens, origin: origin})
	if err != nil {
		return SharedResult{}, err
	}
	switch code {
	case 1:
		if err := p.acked("renew", cfg.UniqueKey(), acked); err != nil {
			return SharedResult{}, err
		}
		r := SharedResult{Outcome: Renewed, Waiting: len(vals) > 1 && vals[1] == int64(1)}
		if len(vals) > 2 {
			r.Token = uintOf(vals[2])
		}
		return r, nil
	case -1:
		return SharedResult{Outcome: Settled}, nil
	case 0:
		return SharedResult{Outcome: Gone}, nil
	}
	return SharedResult{}, processErr("renew", cfg.UniqueKey(), unknownCode("shared", code))
}

// SharedRelease lets the holding of locker go, or takes its attempt out of line, and settles
// it either way (it also gives back a take whose outcome is unknown): Released when it let a
// holding go, Settled when the locker was settled already (a copy of this release ran), else
// Gone — also when an operator forced the holding away (SharedForce), and when a take of the
// locker was refused before anything settled it (a late copy of the take of a holding an
// empty restart wiped; or a give-back of an attempt that never took). The processes at the
// front of the line whose permits now fit are told.
func (p *RedisLockProcessor) SharedRelease(ctx context.Context, cfg domain.DLockConfig, s Shared, locker string) (SharedResult, error) {
	return p.SharedReleaseBlock(ctx, cfg, s, locker, 0, 0)
}

// SharedReleaseBlock is SharedRelease of a holding that reserved a block of fencing tokens
// ending at end (0: none to give back), of which it handed out up to last: when it lets the
// holding go and no holding reserved tokens since, the counter goes back to last, so that the
// counter runs ahead of the clock only as far as holdings use tokens.
func (p *RedisLockProcessor) SharedReleaseBlock(ctx context.Context, cfg domain.DLockConfig, s Shared, locker string, last, end uint64) (SharedResult, error) {
	return p.SharedReleaseOf(ctx, cfg, s, locker, 0, last, end)
}

// SharedReleaseOf is SharedReleaseBlock of the holding of locker that was taken with the
// fencing token origin (0 if unknown): a holding under locker with another token — taken anew
// by a late copy of its take after an empty restart — is let go and answers Gone, as
// SharedRenewOf finds it; and one that finds no holding of locker, no release of it run,
// answers Gone and has its copies answer Gone too (not Settled, which reads as let go by an
// earlier copy): a loss Redis made is told even when the first answer is lost.
func (p *RedisLockProcessor) SharedReleaseOf(ctx context.Context, cfg domain.DLockConfig, s Shared, locker string, origin, last, end uint64) (SharedResult, error) {
	code, vals, _, err := p.call(ctx, cfg, s, sharedOp{op: "release", locker: locker, last: last, end: end, origin: origin})
	if err != nil {
		return SharedResult{}, err
	}
	switch code {
	case 1:
		return SharedResult{Outcome: Released}, nil
	case -1:
		return SharedResult{Outcome: Settled, Replaced: len(vals) > 1 && vals[1] == int64(1)}, nil
	case 0:
		return SharedResult{Outcome: Gone}, nil
	}
	return SharedResult{}, processErr("release", cfg.UniqueKey(), unknownCode("shared", code))
}

// SharedReleaseThenTake is SharedReleaseOf locker followed, in the same script, by
// SharedTake of next with Wait: a process whose goroutines still want permits that no holding
// of theirs serves stands in line again as it lets go, as close to its turn as a process next
// to Redis would. The result is the take's, with Let the release's outcome (Released, Settled
// or Gone). A late or repeated copy is a copy of each half. When the release ran and the take
// then failed (its permits above k: ErrInvalidConfig, or a reply of the take's not understood,
// or the replicas WithReplicaAck asks for not acknowledging it), the error comes with Let set:
// the release is not owed again. Let is zero when the release did not run, or when its outcome
// is unknown.
func (p *RedisLockProcessor) SharedReleaseThenTake(ctx context.Context, cfg domain.DLockConfig, s Shared, locker string, origin, last, end uint64, next TakeRequest) (SharedResult, error) {
	if err := p.checkShared(ctx, cfg, s); err != nil {
		return SharedResult{}, err
	}
	if next.N < 1 || next.Locker == "" {
		return SharedResult{}, fmt.Errorf("%w: a take of %d permits by %q", dlerrors.ErrInvalidConfig, next.N, next.Locker)
	}
	p.raise(cfg)
	next.Wait = true
	code, vals, acked, err := p.call(ctx, cfg, s, sharedOp{op: "release", locker: locker, origin: origin, last: last, end: end, next: &next, listening: next.Listening})
	if err != nil {
		return SharedResult{}, err
	}
	var let Outcome
	switch code {
	case 1:
		let = Released
	case -1:
		let = Settled
	case 0:
		let = Gone
	default:
		return SharedResult{}, processErr("release", cfg.UniqueKey(), unknownCode("shared", code))
	}
	take, ok := vals[len(vals)-1].([]any)
	if len(vals) != 2 || !ok || len(take) == 0 {
		return SharedResult{Let: let}, processErr("release", cfg.UniqueKey(), fmt.Errorf("shared.lua answered %v", vals))
	}
	tcode, _ := take[0].(int64)
	if tcode == -3 && len(take) > 1 {
		return SharedResult{Let: let}, tooManyPermits(cfg, take[1])
	}
	r, err := p.taken(cfg, tcode, take, acked)
	r.Let = let
	return r, err
}

// SharedForce lets the holding of locker go on an operator's word (ForceRelease): Released
// when it did, Settled when a copy of this request did (sent again after a lost reply, by
// go-redis or the processor; while the locker stays settled), Gone when locker held nothing;
// when it answers other than Released nothing is changed (a line entry of locker stays). The locker stays settled for at least eight times what was left of its
// lease, so no copy of its process's requests takes it back; the processes at the front of
// the line whose permits now fit are told.
func (p *RedisLockProcessor) SharedForce(ctx context.Context, cfg domain.DLockConfig, s Shared, locker string) (SharedResult, error) {
	return p.SharedForceAs(ctx, cfg, s, locker, requestName())
}

// SharedForceAs is SharedForce under request, the caller's name for this removal (a fresh one
// for every call, without '|'): a call under the name of one that removed locker is taken for
// a copy of it, and answers Settled.
func (p *RedisLockProcessor) SharedForceAs(ctx context.Context, cfg domain.DLockConfig, s Shared, locker, request string) (SharedResult, error) {
	if err := checkRequestName(request); err != nil {
		return SharedResult{}, err
	}
	code, _, _, err := p.call(ctx, cfg, s, sharedOp{op: "force", locker: locker, request: request})
	if err != nil {
		return SharedResult{}, err
	}
	switch code {
	case 1:
		return SharedResult{Outcome: Released}, nil
	case -1:
		return SharedResult{Outcome: Settled}, nil
	}
	return SharedResult{Outcome: Gone}, nil
}

// SetPermits sets a semaphore's permit count to k in Redis, where it outlives the processes'
// configuration for as long as the semaphore is in use (its keys live). Permits held beyond
// a lowered k stay held until released; no new ones are taken until the count is below k.
func (p *RedisLockProcessor) SetPermits(ctx context.Context, cfg domain.DLockConfig, k int64) error {
	_, _, err := p.ChangePermits(ctx, cfg, "", 0, k)
	return err
}

// ChangePermits sets a semaphore's permit count to k, as SetPermits does, only if Redis keeps
// from (or keeps none; from 0 changes any count): a late or repeated copy of a change, or of an
// older one, finds the count changed since and changes nothing. A change with a locker of its
// own (a fresh one, as a take's: "" for none) is settled as it runs, so that a copy of it that
// comes later changes nothing even when the count went back to from meanwhile, and answers
// as the first copy did. It reports whether it changed the count, and the count Redis keeps
// when it did not.
func (p *RedisLockProcessor) ChangePermits(ctx context.Context, cfg domain.DLockConfig, locker string, from, k int64) (changed bool, now int64, err error) {
	if k < 1 {
		return false, 0, fmt.Errorf("%w: %d permits", dlerrors.ErrInvalidConfig, k)
	}
	code, vals, _, err := p.call(ctx, cfg, Shared{Kind: KindSem, Permits: k}, sharedOp{op: "permits", locker: locker, from: from})
	if err != nil || code == 1 {
		return err == nil, k, err
	}
	if len(vals) > 1 {
		now = int64(uintOf(vals[1]))
	}
	return false, now, nil
}

// SharedInspect reads what Redis holds for cfg's shared lock, changing nothing. s is what the
// asker knows of it, reported when Redis holds nothing.
func (p *RedisLockProcessor) SharedInspect(ctx context.Context, cfg domain.DLockConfig, s Shared) (SharedInspection, error) {
	if err := p.checkShared(ctx, cfg, s); err != nil {
		return SharedInspection{}, err
	}
	vals, _, err := p.shared(ctx, cfg, s, sharedOp{op: "inspect"})
	if err == nil && len(vals) != 6 {
		err = fmt.Errorf("shared.lua inspect returned %d values", len(vals))
	}
	if err != nil {
		return SharedInspection{}, processErr("inspect", cfg.UniqueKey(), err)
	}
	kind, _ := vals[0].(string)
	in := SharedInspection{Kind: Kind(kind), Permits: int64(uintOf(vals[1])), Fence: uintOf(vals[4]), Stored: vals[5] == int64(1)}
	held, _ := vals[2].([]any)
	for i := 0; i+3 < len(held); i += 4 {
		locker, _ := held[i].(string)
		ttl, _ := held[i+3].(int64)
		in.Holdings = append(in.Holdings, SharedHolding{Locker: locker, Permits: int64(uintOf(held[i+1])),
			Token: uintOf(held[i+2]), TTL: time.Duration(ttl) * time.Millisecond})
	}
	line, _ := vals[3].([]any)
	for i := 0; i+1 < len(line); i += 2 {
		owner, _ := line[i].(string)
		in.Waiting = append(in.Waiting, SharedWaiter{Owner: owner, Permits: int64(uintOf(line[i+1]))})
	}
	return in, nil
}
