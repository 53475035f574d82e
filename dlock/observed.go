package dlock

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// observed is a processor that tells an Observer of every failed Redis round trip, but one
// cut short by its caller going away (a context that was cancelled, or one of the caller's
// whose deadline ran out, byCaller) or by Close: that is not Redis failing.
type observed struct {
	processor.DLockProcessor
	o Observer
	// ctxBounds: the client bounds reads and writes by the request's context too
	// (ContextTimeoutEnabled), so that a read or write that timed out under a caller's context
	// that ended may be that context's doing; else only a dial (which go-redis bounds by the
	// context always) or a wait for a connection can be.
	ctxBounds bool
}

func (p observed) report(ctx context.Context, err error) error {
	var pe *RedisProcessError
	if errors.As(err, &pe) && !errors.Is(pe.Err, context.Canceled) && !p.callerCut(ctx, pe.Err) {
		p.o.RedisError(RedisErrorEvent{Op: pe.Op, Key: pe.Key, Err: pe.Err})
	}
	return err
}

// callerCut reports whether err, a request's failure under ctx, may be only its caller's
// deadline: the caller's context (byCaller) ended, and err is what that makes of a request (the
// context's error, or a timeout the context set). A failure that came after the caller's
// deadline but not of it (a timeout of the client's own, a refused or broken connection, an
// error reply; a Cluster request waits for the slot map after the first) is Redis failing.
func (p observed) callerCut(ctx context.Context, err error) bool {
	if ctx.Err() == nil || ctx.Value(callerKey{}) == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	var op *net.OpError
	return p.ctxBounds || (errors.As(err, &op) && op.Op == "dial")
}

// boundsByContext reports whether client bounds its reads and writes by a request's context
// (ContextTimeoutEnabled); true when it cannot tell.
func boundsByContext(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return true
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
