package dlock

import (
	"context"
	"errors"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// observed is a processor that tells an Observer of every failed Redis round trip, but one
// cut short by its caller going away (a context that was cancelled, or one of the caller's
// whose deadline ran out, byCaller) or by Close: that is not Redis failing.
type observed struct {
	processor.DLockProcessor
	o Observer
}

func (p observed) report(ctx context.Context, err error) error {
	var pe *RedisProcessError
	if errors.As(err, &pe) && !errors.Is(pe.Err, context.Canceled) && (ctx.Err() == nil || ctx.Value(callerKey{}) == nil) {
		p.o.RedisError(RedisErrorEvent{Op: pe.Op, Key: pe.Key, Err: pe.Err})
	}
	return err
}

// callerKey marks a request sent under the caller's own context (Lock, TryLock, State,
// ForceRelease), whose deadline bounds it; a request under a bound of the library's own (a
// lease) that gets no answer in time is a failure to report.
type callerKey struct{}

// byCaller marks ctx, the caller's, as the bound of the requests sent under it (callerKey).
func byCaller(ctx context.Context) context.Context { return context.WithValue(ctx, callerKey{}, true) }

func (p observed) Load(ctx context.Context, cfg domain.DLockConfig) (*domain.DLockEntity, error) {
	e, err := p.DLockProcessor.Load(ctx, cfg)
	return e, p.report(ctx, err)
}

func (p observed) Lock(ctx context.Context, cfg domain.DLockConfig, req processor.LockRequest) (processor.Result, error) {
	r, err := p.DLockProcessor.Lock(ctx, cfg, req)
	return r, p.report(ctx, err)
}

func (p observed) ExpandLease(ctx context.Context, cfg domain.DLockConfig, req processor.RenewRequest) (processor.Result, error) {
	r, err := p.DLockProcessor.ExpandLease(ctx, cfg, req)
	return r, p.report(ctx, err)
}

func (p observed) Unlock(ctx context.Context, cfg domain.DLockConfig, req processor.ReleaseRequest) (processor.Result, error) {
	r, err := p.DLockProcessor.Unlock(ctx, cfg, req)
	return r, p.report(ctx, err)
}

func (p observed) Leave(ctx context.Context, cfg domain.DLockConfig, req processor.LeaveRequest) (processor.Result, error) {
	r, err := p.DLockProcessor.Leave(ctx, cfg, req)
	return r, p.report(ctx, err)
}

func (p observed) Inspect(ctx context.Context, cfg domain.DLockConfig) (processor.Inspection, error) {
	in, err := p.DLockProcessor.Inspect(ctx, cfg)
	return in, p.report(ctx, err)
}

func (p observed) ForceRelease(ctx context.Context, cfg domain.DLockConfig, holder string) (processor.Result, error) {
	r, err := p.DLockProcessor.ForceRelease(ctx, cfg, holder)
	return r, p.report(ctx, err)
}
