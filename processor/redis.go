package processor

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
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

	lockScript     = redis.NewScript(lockSrc)
	expandScript   = redis.NewScript(expandSrc)
	unlockScript   = redis.NewScript(unlockSrc)
	handoverScript = redis.NewScript(handoverSrc)
	probeScript    = redis.NewScript(probeSrc)
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
}

// Options configures a RedisLockProcessor.
type Options struct {
	// Publish makes a release publish the releasing locker on the lock's release channel
	// (ReleaseChannel). Default false.
	Publish bool
	// Process names this process in the waiting mark ({DLOCK_…}:want) that a failed attempt
	// or a probe leaves beside a held key, so that the holder's process can tell that another
	// process waits (see HandOver). Default "": no marks.
	Process string
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

// Lock implements DLockProcessor with lock.lua (one EVALSHA).
func (p *RedisLockProcessor) Lock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	token, err := lockScript.Run(ctx, p.client, []string{cfg.UniqueKey(), FenceKey(cfg), WantKey(cfg)},
		e.Locker, cfg.Lease().Milliseconds(), fenceTTL(cfg).Milliseconds(), p.opts.Process).Int64()
	if err != nil {
		return processErr("lock", cfg.UniqueKey(), err)
	}
	if token <= 0 {
		return optimistic("lock", cfg.UniqueKey(), e.Locker)
	}
	e.Token = uint64(token)
	e.Status = domain.StatusProcessing
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

// Unlock implements DLockProcessor with unlock.lua (one EVALSHA).
func (p *RedisLockProcessor) Unlock(ctx context.Context, e *domain.DLockEntity, cfg domain.DLockConfig) error {
	n, err := unlockScript.Run(ctx, p.client, []string{cfg.UniqueKey()}, e.Locker, p.channel(cfg)).Int64()
	if err != nil {
		return processErr("unlock", cfg.UniqueKey(), err)
	}
	if n != 1 {
		return optimistic("unlock", cfg.UniqueKey(), e.Locker)
	}
	return nil
}

// IsFree implements DLockProcessor with probe.lua (one EVALSHA), which also leaves the
// waiting mark when the key is held.
func (p *RedisLockProcessor) IsFree(ctx context.Context, cfg domain.DLockConfig) (bool, error) {
	n, err := probeScript.Run(ctx, p.client, []string{cfg.UniqueKey(), WantKey(cfg)},
		p.opts.Process, cfg.Lease().Milliseconds()).Int64()
	if err != nil {
		return false, processErr("is-free", cfg.UniqueKey(), err)
	}
	return n == 1, nil
}

// ErrYielded reports a hand-over that released the key instead, because another process waits.
var ErrYielded = errors.New("dlock: released to a waiting process")

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
	for _, s := range []*redis.Script{lockScript, expandScript, unlockScript, handoverScript, probeScript} {
		if err := s.Load(ctx, p.client).Err(); err != nil {
			return processErr("script-load", "", err)
		}
	}
	return nil
}
