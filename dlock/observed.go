package dlock

import (
	"context"
	"errors"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// observed is a processor that tells an Observer of every failed Redis round trip.
type observed struct {
	processor.DLockProcessor
	o Observer
}

func (p observed) report(err error) error {
	var pe *RedisProcessError
	if errors.As(err, &pe) && !errors.Is(pe.Err, context.Canceled) { // (a caller that went away, or Close: not Redis failing)
		p.o.RedisError(RedisErrorEvent{Op: pe.Op, Key: pe.Key, Err: pe.Err})
	}
	return err
}

func (p observed) Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error) {
	e, err := p.DLockProcessor.Load(ctx, cfg)
	return e, p.report(err)
}

func (p observed) Lock(ctx context.Context, cfg domain.DLockConfig, req processor.LockRequest) (processor.Result, error) {
	r, err := p.DLockProcessor.Lock(ctx, cfg, req)
	return r, p.report(err)
}

func (p observed) ExpandLease(ctx context.Context, cfg domain.DLockConfig, req processor.RenewRequest) (processor.Result, error) {
	r, err := p.DLockProcessor.ExpandLease(ctx, cfg, req)
	return r, p.report(err)
}

func (p observed) Unlock(ctx context.Context, cfg domain.DLockConfig, req processor.ReleaseRequest) (processor.Result, error) {
	r, err := p.DLockProcessor.Unlock(ctx, cfg, req)
	return r, p.report(err)
}

func (p observed) Leave(ctx context.Context, cfg domain.DLockConfig, req processor.LeaveRequest) (processor.Result, error) {
	r, err := p.DLockProcessor.Leave(ctx, cfg, req)
	return r, p.report(err)
}

func (p observed) Inspect(ctx context.Context, cfg domain.DLockConfig) (processor.Inspection, error) {
	in, err := p.DLockProcessor.Inspect(ctx, cfg)
	return in, p.report(err)
}

func (p observed) ForceRelease(ctx context.Context, cfg domain.DLockConfig, holder string) (processor.Result, error) {
	r, err := p.DLockProcessor.ForceRelease(ctx, cfg, holder)
	return r, p.report(err)
}
