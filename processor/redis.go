package processor

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
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
	//go:embed lua/unlock.lua
	unlockSrc string
	//go:embed lua/handover.lua
	handoverSrc string
	//go:embed lua/probe.lua
	probeSrc string
	//go:embed lua/unmark.lua
	unmarkSrc string

	lockScript     = redis.NewScript(lockSrc)
	expandScript   = redis.NewScript(expandSrc)
	unlockScript   = redis.NewScript(unlockSrc)
	handoverScript = redis.NewScript(handoverSrc)
	probeScript    = redis.NewScript(probeSrc)
	unmarkScript   = redis.NewScript(unmarkSrc)
)

// FenceSuffix and ReleaseSuffix name what is kept beside a lock key; see domain.SideKey.
const (
	FenceSuffix   = "fence"
	ReleaseSuffix = "released"
	WantSuffix    = "want"
	// MinFenceTTL is the shortest time a fencing counter is kept after an acquisition. Tokens
	// stay increasing after it expires because they never fall below the server clock.
	MinFenceTTL = time.Hour
)

// RedisLockProcessor keeps locks in Redis through go-redis: SET NX PX inside a script that also
// advances the fencing counter, compare-and-renew, compare-and-delete and hand-over scripts,
// all run by EVALSHA (EVAL when the server does not have the script yet). It works the same
// with a single server, Sentinel and Cluster clients, and with miniredis.
type RedisLockProcessor struct {
	client redis.UniversalClient
	opts   Options
	marks  atomic.Uint64 // numbers the lockers left as waiting marks
}

// Options configures a RedisLockProcessor.
type Options struct {
	// Publish makes a release publish the releasing locker on the lock's release channel
	// (ReleaseChannel). Default false.
	Publish bool
	// Process is this process's locker prefix: every locker it writes starts with it. With a
	// prefix, a failed attempt or a probe leaves a waiting mark ({DLOCK_…}:want) beside the
	// held key: a locker of this process (Process + "w" + a number) that a release may grant
	// the lock to (with Publish), and that tells the holder's process another process waits
	// (see HandOver). Default "": no marks.
	Process string
}

// markPrefix starts the lockers this process leaves as waiting marks, and so the lockers
// granted to it; acquisition lockers never start with it.
func (p *RedisLockProcessor) markPrefix() string {
	if p.opts.Process == "" {
		return ""
	}
	return p.opts.Process + "w"
}

// mark returns a new locker to leave as a waiting mark.
func (p *RedisLockProcessor) mark() string {
	if p.opts.Process == "" {
		return ""
	}
	return p.markPrefix() + strconv.FormatUint(p.marks.Add(1), 10)
}

// A release message is "R|<locker>" (deleted) or "G|<grantee locker>|<token>" (granted).
const (
	releasedTag = "R|"
	grantedTag  = "G|"
)

// ParseMessage reads a release message: the locker named in it, and for a grant the token.
func ParseMessage(payload string) (locker string, token uint64, granted bool, ok bool) {
	if rest, found := strings.CutPrefix(payload, releasedTag); found {
		return rest, 0, false, true
	}
	rest, found := strings.CutPrefix(payload, grantedTag)
	if !found {
		return "", 0, false, false
	}
	i := strings.LastIndexByte(rest, '|')
	if i < 0 {
		return "", 0, false, false
	}
	token, err := strconv.ParseUint(rest[i+1:], 10, 64)
	if err != nil {
		return "", 0, false, false
	}
	return rest[:i], token, true, true
}

var _ DLockProcessor = (*RedisLockProcessor)(nil)

// NewRedisLockProcessor returns a processor over client. A nil client is an error wrapping
// errors.ErrInvalidConfig.
func NewRedisLockProcessor(client redis.UniversalClient, opts Options) (*RedisLockProcessor, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", dlerrors.ErrInvalidConfig)
	}
	return &RedisLockProcessor{client: client, opts: opts}, nil
}

// ReleaseChannel is the channel a release of cfg's lock is published on.
func ReleaseChannel(cfg domain.DLockConfig) string { return cfg.SideKey(ReleaseSuffix) }

// FenceKey is the key of cfg's fencing counter.
func FenceKey(cfg domain.DLockConfig) string { return cfg.SideKey(FenceSuffix) }

// WantKey is the key of cfg's waiting mark.
func WantKey(cfg domain.DLockConfig) string { return cfg.SideKey(WantSuffix) }

func fenceTTL(cfg domain.DLockConfig) time.Duration { return max(10*cfg.Lease(), MinFenceTTL) }

// markTTL is how long a waiting mark lasts. A waiting process renews it with every failed
// attempt and every probe (at most two poll intervals, lease/3, apart), and removes it when it
// stops waiting; a mark left by a process that died lasts this long at most.
func markTTL(cfg domain.DLockConfig) time.Duration { return cfg.Lease() / 2 }

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

// Lock implements DLockProcessor with lock.lua (one EVALSHA). When a release granted the key to
// this process (see Options.Process) and the grant was not yet taken, Lock takes it: e.Locker
// becomes the granted locker, its lease is renewed and e.Token is the grant's token.
func (p *RedisLockProcessor) Lock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	res, err := lockScript.Run(ctx, p.client, []string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg)},
		e.Locker, cfg.Lease().Milliseconds(), fenceTTL(cfg).Milliseconds(), p.markPrefix(), p.mark(), markTTL(cfg).Milliseconds()).Slice()
	if err != nil {
		return processErr("lock", cfg.UniqueKey(), err)
	}
	token, _ := res[0].(int64)
	if token <= 0 || len(res) < 2 {
		return optimistic("lock", cfg.UniqueKey(), e.Locker)
	}
	locker, ok := res[1].(string)
	if !ok {
		return processErr("lock", cfg.UniqueKey(), fmt.Errorf("unexpected reply %v", res))
	}
	e.Locker, e.Token, e.Status = locker, uint64(token), domain.StatusProcessing
	return nil
}

// ExpandLease implements DLockProcessor with expand.lua (one EVALSHA).
func (p *RedisLockProcessor) ExpandLease(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	n, err := expandScript.Run(ctx, p.client, []string{cfg.UniqueKey()},
		e.Locker, cfg.Lease().Milliseconds()).Int64()
	if err != nil {
		return processErr("expand", cfg.UniqueKey(), err)
	}
	if n != 1 {
		return optimistic("expand", cfg.UniqueKey(), e.Locker)
	}
	return nil
}

// Unlock implements DLockProcessor with unlock.lua (one EVALSHA): with Publish, the lock is
// granted to another process's waiting mark if there is one, else deleted.
func (p *RedisLockProcessor) Unlock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	n, err := unlockScript.Run(ctx, p.client, []string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg)},
		e.Locker, p.channel(cfg), p.opts.Process, cfg.Lease().Milliseconds(), fenceTTL(cfg).Milliseconds()).Int64()
	if err != nil {
		return processErr("unlock", cfg.UniqueKey(), err)
	}
	if n == 0 {
		return optimistic("unlock", cfg.UniqueKey(), e.Locker)
	}
	return nil
}

// IsFree implements DLockProcessor with probe.lua (one EVALSHA), which also leaves the
// waiting mark when the key is held by another process. A key granted to this process counts
// as free: Lock takes it.
func (p *RedisLockProcessor) IsFree(ctx context.Context, cfg domain.DLockConfig) (bool, error) {
	n, err := probeScript.Run(ctx, p.client, []string{cfg.UniqueKey(), WantKey(cfg)},
		p.markPrefix(), p.mark(), markTTL(cfg).Milliseconds()).Int64()
	if err != nil {
		return false, processErr("is-free", cfg.UniqueKey(), err)
	}
	return n == 1, nil
}

// ErrYielded reports a hand-over that let the key go to a waiting process instead.
var ErrYielded = errors.New("dlock: released to a waiting process")

// Unmark removes this process's waiting mark, if the mark beside the key is one of its own.
func (p *RedisLockProcessor) Unmark(ctx context.Context, cfg domain.DLockConfig) error {
	if p.opts.Process == "" {
		return nil
	}
	if err := unmarkScript.Run(ctx, p.client, []string{WantKey(cfg)}, p.opts.Process).Err(); err != nil {
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
	token, err := handoverScript.Run(ctx, p.client, []string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg)},
		from.Locker, to.Locker, cfg.Lease().Milliseconds(), fenceTTL(cfg).Milliseconds(), p.channel(cfg), p.opts.Process, y).Int64()
	switch {
	case err != nil:
		return processErr("hand-over", cfg.UniqueKey(), err)
	case token == 0:
		return optimistic("hand-over", cfg.UniqueKey(), from.Locker)
	case token < 0:
		return ErrYielded
	}
	to.Token = uint64(token)
	to.Status = domain.StatusProcessing
	return nil
}

// Preload loads the scripts into the server so that the first acquisition does not pay for an
// EVAL fallback. It is optional.
func (p *RedisLockProcessor) Preload(ctx context.Context) error {
	for _, s := range []*redis.Script{lockScript, expandScript, unlockScript, handoverScript, probeScript, unmarkScript} {
		if err := s.Load(ctx, p.client).Err(); err != nil {
			return processErr("script-load", "", err)
		}
	}
	return nil
}
