package processor

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
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

	lockScript   = redis.NewScript(lockSrc)
	expandScript = redis.NewScript(expandSrc)
	unlockScript = redis.NewScript(unlockSrc)
)

// FenceSuffix and ReleaseSuffix name what is kept beside a lock key; see domain.SideKey.
const (
	FenceSuffix   = "fence"
	ReleaseSuffix = "released"
	// MinFenceTTL is the shortest time a fencing counter is kept after an acquisition. Tokens
	// stay increasing after it expires because they never fall below the server clock.
	MinFenceTTL = time.Hour
)

// RedisLockProcessor keeps locks in Redis through go-redis: SET NX PX inside a script that also
// advances the fencing counter, compare-and-renew and compare-and-delete scripts, all run by
// EVALSHA (EVAL when the server does not have the script yet). It works the same with a single
// server, Sentinel and Cluster clients, and with miniredis.
type RedisLockProcessor struct {
	client  redis.UniversalClient
	publish bool
}

var _ DLockProcessor = (*RedisLockProcessor)(nil)

// NewRedisLockProcessor returns a processor over client. When publish is true a release also
// publishes the releasing locker on the lock's release channel (ReleaseChannel). A nil client
// is an error wrapping errors.ErrInvalidConfig.
func NewRedisLockProcessor(client redis.UniversalClient, publish bool) (*RedisLockProcessor, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", dlerrors.ErrInvalidConfig)
	}
	return &RedisLockProcessor{client: client, publish: publish}, nil
}

// ReleaseChannel is the channel a release of cfg's lock is published on.
func ReleaseChannel(cfg domain.DLockConfig) string { return cfg.SideKey(ReleaseSuffix) }

// FenceKey is the key of cfg's fencing counter.
func FenceKey(cfg domain.DLockConfig) string { return cfg.SideKey(FenceSuffix) }

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
	fenceTTL := max(10*cfg.Lease(), MinFenceTTL)
	token, err := lockScript.Run(ctx, p.client, []string{cfg.UniqueKey(), FenceKey(cfg)},
		e.Locker, cfg.Lease().Milliseconds(), fenceTTL.Milliseconds()).Int64()
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
	channel := ""
	if p.publish {
		channel = ReleaseChannel(cfg)
	}
	n, err := unlockScript.Run(ctx, p.client, []string{cfg.UniqueKey()}, e.Locker, channel).Int64()
	if err != nil {
		return processErr("unlock", cfg.UniqueKey(), err)
	}
	if n != 1 {
		return optimistic("unlock", cfg.UniqueKey(), e.Locker)
	}
	return nil
}

// IsFree implements DLockProcessor with EXISTS.
func (p *RedisLockProcessor) IsFree(ctx context.Context, cfg domain.DLockConfig) (bool, error) {
	n, err := p.client.Exists(ctx, cfg.UniqueKey()).Result()
	if err != nil {
		return false, processErr("is-free", cfg.UniqueKey(), err)
	}
	return n == 0, nil
}

// Preload loads the scripts into the server so that the first acquisition does not pay for an
// EVAL fallback. It is optional.
func (p *RedisLockProcessor) Preload(ctx context.Context) error {
	for _, s := range []*redis.Script{lockScript, expandScript, unlockScript} {
		if err := s.Load(ctx, p.client).Err(); err != nil {
			return processErr("script-load", "", err)
		}
	}
	return nil
}

// ParseToken reads a fencing token written by lock.lua (used by tests and tools).
func ParseToken(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }
