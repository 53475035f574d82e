package processor

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
)

var (
	//go:embed lua/lock.lua
	lockSrc string
	//go:embed lua/expand.lua
	expandSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/handover.lua
	handoverSrc string
	//go:embed lua/probe.lua
	probeSrc string
	//go:embed lua/unmark.lua
	unmarkSrc string

	lockScript     = redis.NewScript(lockSrc)
	expandScript   = redis.NewScript(expandSrc)
	releaseScript  = redis.NewScript(releaseSrc)
	handoverScript = redis.NewScript(handoverSrc)
	probeScript    = redis.NewScript(probeSrc)
	unmarkScript   = redis.NewScript(unmarkSrc)
)

// FenceSuffix, ReleaseSuffix, WantSuffix and DoneSuffix name what is kept beside a lock key;
// see domain.SideKey.
const (
	FenceSuffix   = "fence"
	ReleaseSuffix = "released"
	WantSuffix    = "want"
	DoneSuffix    = "done"
)

// RedisLockProcessor keeps locks in Redis through go-redis: SET NX PX inside a script that also
// advances the fencing counter, compare-and-renew, compare-and-delete and hand-over scripts,
// all run by EVALSHA (EVAL when the server does not have the script yet). It works the same
// with a single server, Sentinel and Cluster clients, and with miniredis.
//
// The key only ever holds the locker of the acquisition whose own request wrote it (lock.lua,
// or handover.lua for the next acquisition of the same process): no script hands the key to a
// locker that did not ask, and none adopts a key by anything but the exact locker.
//
// A locker is <owner><sequence number>, the owner ending in '-' (see SplitLocker), numbered in
// the order its owner makes them. Releasing an acquisition settles it: the owner's settled
// mark beside the key ({K}:done:<owner>) rises to its number, and the scripts refuse any
// request of an acquisition at or below the mark. So a request that reaches Redis twice, or
// after its acquisition was released or given back, cannot take the key.
type RedisLockProcessor struct {
	client redis.UniversalClient
	opts   Options
}

// Options configures a RedisLockProcessor.
type Options struct {
	// Publish makes a release publish the releasing locker on the lock's release channel
	// (ReleaseChannel). Default false.
	Publish bool
	// Mark is this process's waiting mark: with Lock(wait) and IsFree, a process that finds
	// the key held leaves it beside the key ({DLOCK_…}:want, for half a lease) as a hint that
	// another process waits, which makes HandOver with yield reserve the key for that process
	// (ReserveTTL), which takes it with its own Lock. A mark confers nothing: a stale one costs
	// at most an early yield and a reservation nobody takes. Default "": no marks.
	Mark string
}

// A release message is "R|<locker>".
const releasedTag = "R|"

// ParseMessage reads a release message: the locker that let the key go.
func ParseMessage(payload string) (locker string, ok bool) {
	if locker, ok = strings.CutPrefix(payload, releasedTag); !ok {
		return "", false
	}
	return locker, true
}

var _ DLockProcessor = (*RedisLockProcessor)(nil)

// NewRedisLockProcessor returns a processor over client. A nil client is an error wrapping
// errors.ErrInvalidConfig.
func NewRedisLockProcessor(client redis.UniversalClient, opts Options) (*RedisLockProcessor, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", dlerrors.ErrInvalidConfig)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: nil redis client (%T)", dlerrors.ErrInvalidConfig, client)
	}
	return &RedisLockProcessor{client: client, opts: opts}, nil
}

// ReleaseChannel is the channel a release of cfg's lock is published on.
func ReleaseChannel(cfg domain.DLockConfig) string { return cfg.SideKey(ReleaseSuffix) }

// FenceKey is the key of cfg's fencing counter.
func FenceKey(cfg domain.DLockConfig) string { return cfg.SideKey(FenceSuffix) }

// WantKey is the key of cfg's waiting mark.
func WantKey(cfg domain.DLockConfig) string { return cfg.SideKey(WantSuffix) }

// DoneKey is the key of owner's settled mark.
func DoneKey(cfg domain.DLockConfig, owner string) string {
	return cfg.SideKey(DoneSuffix + ":" + owner)
}

// SplitLocker splits a locker into its owner (up to and including the last '-') and its
// sequence number (the decimal digits after it). A locker of another form has no number:
// its requests are not guarded by a settled mark.
func SplitLocker(locker string) (owner, seq string) {
	i := strings.LastIndexByte(locker, '-')
	if i < 0 || i == len(locker)-1 || len(locker)-i > 16 {
		return locker, ""
	}
	for _, c := range locker[i+1:] {
		if c < '0' || c > '9' {
			return locker, ""
		}
	}
	return locker[:i+1], locker[i+1:]
}

// FenceTTL is how long the fencing counter is kept after the key's last acquisition or
// renewal: two leases. Tokens never fall below the server clock in microseconds, so the
// counter only matters within that window (many acquisitions in a microsecond, or the server
// clock stepping back); beyond it tokens rest on the server clock alone.
func FenceTTL(cfg domain.DLockConfig) time.Duration { return 2 * cfg.Lease() }

// DoneTTL is how long a settled mark lasts after the owner's last release of the key: two
// leases. A request delayed on its way to Redis for longer than that could still take the
// key, which then expires with its lease.
func DoneTTL(cfg domain.DLockConfig) time.Duration { return 2 * cfg.Lease() }

// ReserveTTL is how long a key yielded to a waiting process stays reserved for it: a quarter
// of a lease, far longer than a release message and a round trip, and so the longest a key
// can stay idle when the waiting process died or stopped waiting.
func ReserveTTL(cfg domain.DLockConfig) time.Duration { return cfg.Lease() / 4 }

// MarkTTL is how long a waiting mark lasts: half a lease. A waiting process renews it with
// every failed attempt and every probe (at most two poll intervals, lease/3, apart), and
// removes it when it stops waiting.
func MarkTTL(cfg domain.DLockConfig) time.Duration { return cfg.Lease() / 2 }

func (p *RedisLockProcessor) channel(cfg domain.DLockConfig) string {
	if p.opts.Publish {
		return ReleaseChannel(cfg)
	}
	return ""
}

func processErr(op, key string, err error) error {
	return &dlerrors.RedisProcessError{Op: op, Key: key, Err: err}
}

func optimistic(op, key, locker string) error {
	return fmt.Errorf("%w: %s %q: locker %q", dlerrors.ErrOptimisticLocking, op, key, locker)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Load implements DLockProcessor with GET.
func (p *RedisLockProcessor) Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error) {
	locker, err := p.client.Get(ctx, cfg.UniqueKey()).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, processErr("load", cfg.UniqueKey(), err)
	}
	return &domain.DLockEntity{Locker: locker, Status: domain.StatusProcessing}, nil
}

// Lock implements DLockProcessor with lock.lua (one EVALSHA). It sets e.Token and e.Lease.
func (p *RedisLockProcessor) Lock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig, wait bool) error {
	leave := "0"
	if wait {
		leave = "1"
	}
	owner, seq := SplitLocker(e.Locker)
	token, err := lockScript.Run(ctx, p.client,
		[]string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg), DoneKey(cfg, owner)},
		e.Locker, ms(cfg.Lease()), ms(FenceTTL(cfg)), p.opts.Mark, ms(MarkTTL(cfg)), seq, leave).Int64()
	if err != nil {
		return processErr("lock", cfg.UniqueKey(), err)
	}
	if token <= 0 {
		return optimistic("lock", cfg.UniqueKey(), e.Locker)
	}
	e.Token, e.Lease, e.Status = uint64(token), cfg.Lease(), domain.StatusProcessing
	return nil
}

// ExpandLease implements DLockProcessor with expand.lua (one EVALSHA).
func (p *RedisLockProcessor) ExpandLease(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	n, err := expandScript.Run(ctx, p.client, []string{cfg.UniqueKey(), FenceKey(cfg)},
		e.Locker, ms(cfg.Lease()), ms(FenceTTL(cfg))).Int64()
	if err != nil {
		return processErr("expand", cfg.UniqueKey(), err)
	}
	if n != 1 {
		return optimistic("expand", cfg.UniqueKey(), e.Locker)
	}
	return nil
}

// Unlock implements DLockProcessor with release.lua (one EVALSHA).
func (p *RedisLockProcessor) Unlock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	owner, seq := SplitLocker(e.Locker)
	n, err := releaseScript.Run(ctx, p.client, []string{cfg.UniqueKey(), DoneKey(cfg, owner)},
		e.Locker, p.channel(cfg), seq, ms(DoneTTL(cfg))).Int64()
	if err != nil {
		return processErr("unlock", cfg.UniqueKey(), err)
	}
	if n == 0 { // 2: released already, by this same request sent before
		return optimistic("unlock", cfg.UniqueKey(), e.Locker)
	}
	return nil
}

// IsFree implements DLockProcessor with probe.lua (one EVALSHA), which also leaves the
// waiting mark when the key is held.
func (p *RedisLockProcessor) IsFree(ctx context.Context, cfg domain.DLockConfig) (bool, error) {
	n, err := probeScript.Run(ctx, p.client, []string{cfg.UniqueKey(), WantKey(cfg)},
		p.opts.Mark, ms(MarkTTL(cfg))).Int64()
	if err != nil {
		return false, processErr("is-free", cfg.UniqueKey(), err)
	}
	return n == 1, nil
}

// ErrYielded reports a hand-over that reserved the key for a waiting process instead.
var ErrYielded = errors.New("dlock: released to a waiting process")

// Unmark implements DLockProcessor with unmark.lua (one EVALSHA).
func (p *RedisLockProcessor) Unmark(ctx context.Context, cfg domain.DLockConfig) error {
	if p.opts.Mark == "" {
		return nil
	}
	if err := unmarkScript.Run(ctx, p.client, []string{WantKey(cfg)}, p.opts.Mark).Err(); err != nil {
		return processErr("unmark", cfg.UniqueKey(), err)
	}
	return nil
}

// HandOver implements DLockProcessor with handover.lua (one EVALSHA).
func (p *RedisLockProcessor) HandOver(ctx context.Context, from, to *domain.DLockEntity, cfg domain.DLockConfig, yield bool) error {
	y := "0"
	if yield {
		y = "1"
	}
	owner, fromSeq := SplitLocker(from.Locker)
	toOwner, toSeq := SplitLocker(to.Locker)
	if toOwner != owner {
		return fmt.Errorf("%w: hand-over between owners %q and %q", dlerrors.ErrInvalidConfig, owner, toOwner)
	}
	token, err := handoverScript.Run(ctx, p.client,
		[]string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg), DoneKey(cfg, owner)},
		from.Locker, to.Locker, ms(cfg.Lease()), ms(FenceTTL(cfg)), p.channel(cfg), p.opts.Mark, y,
		fromSeq, toSeq, ms(DoneTTL(cfg)), ms(ReserveTTL(cfg)), ms(MarkTTL(cfg))).Int64()
	switch {
	case err != nil:
		return processErr("hand-over", cfg.UniqueKey(), err)
	case token == 0:
		return optimistic("hand-over", cfg.UniqueKey(), from.Locker)
	case token < 0:
		return ErrYielded
	}
	to.Token, to.Lease, to.Status = uint64(token), cfg.Lease(), domain.StatusProcessing
	return nil
}

// Preload loads the scripts into the server so that the first acquisition does not pay for an
// EVAL fallback. It is optional.
func (p *RedisLockProcessor) Preload(ctx context.Context) error {
	for _, s := range []*redis.Script{lockScript, expandScript, releaseScript, handoverScript, probeScript, unmarkScript} {
		if err := s.Load(ctx, p.client).Err(); err != nil {
			return processErr("script-load", "", err)
		}
	}
	return nil
}
