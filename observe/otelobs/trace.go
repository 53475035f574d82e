package otelobs

import (
	"context"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlockgo/dlock/dlock"
)

// SpanName is the name of the span Observer.Lock starts.
const SpanName = "dlock.Lock"

// waiting is what Acquired noted for a key while traced Lock calls wait for it.
type waiting struct {
	callers int       // traced Lock calls under way on the key
	token   uint64    // the last acquisition of the key: its fencing token ...
	how     dlock.How // ... and how it was made
	seen    bool      // token and how are set
}

// Lock calls lock.Lock(ctx) inside a span named "dlock.Lock", a child of ctx's span, and
// returns what it returns. The span carries the lock's type (dlock.type) and key (dlock.key)
// and, when it got the lock, the fencing token (dlock.token), the wait in seconds (dlock.wait)
// and how the lock was got (dlock.how: known only if lock's Generator reports to o, see
// dlock.WithObserver); a re-entry is marked dlock.reentry=true and has no dlock.how. An error
// is recorded on the span, whose status is then Error.
//
// Redis commands sent during the wait see the span as current (for a go-redis tracing hook);
// the owner context returned is lock's, with ctx's span put back as its current span, so that
// the work done under the lock is not traced as part of the finished "dlock.Lock" span. It
// works wherever the owner context does (Unlock, HoldCount, FencingToken, re-entry).
//
// Lock is safe for concurrent use and cancels as lock.Lock does.
func (o *Observer) Lock(ctx context.Context, lock *dlock.DistributedReentrantLock) (context.Context, error) {
	if ctx == nil || lock == nil || !o.made() {
		return lock.Lock(ctx) // its ErrInvalidConfig, or an Observer not made by New: nothing to trace
	}
	cfg := lock.Config()
	key := cfg.UniqueKey()
	sctx, span := o.tracer.Start(ctx, SpanName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrType.String(utf8Of(string(cfg.LockType()))), AttrKey.String(utf8Of(key))))
	defer span.End()
	reentry := lock.HoldCount(ctx) > 0

	o.watch(key)
	start := time.Now()
	owned, err := lock.Lock(sctx)
	wait := time.Since(start)
	var token uint64
	var held bool
	if err == nil {
		token, held = lock.FencingToken(owned)
	}
	how, known := o.unwatch(key, token, held && !reentry)

	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return owned, err
	}
	attrs := []attribute.KeyValue{AttrWait.Float64(wait.Seconds())}
	if held {
		attrs = append(attrs, tokenAttr(token))
	}
	if reentry {
		attrs = append(attrs, AttrReentry.Bool(true))
	} else if known {
		attrs = append(attrs, AttrHow.String(how.String()))
	}
	span.SetAttributes(attrs...)
	return trace.ContextWithSpan(owned, trace.SpanFromContext(ctx)), nil
}

// tokenAttr is the token as an int64 attribute (OpenTelemetry has no unsigned one), or as a
// string if it is too large for one.
func tokenAttr(token uint64) attribute.KeyValue {
	if token > math.MaxInt64 {
		return AttrToken.String(strconv.FormatUint(token, 10))
	}
	return AttrToken.Int64(int64(token))
}

// watch records that a traced Lock call on key is under way, so that Acquired notes how the
// key is got.
func (o *Observer) watch(key string) {
	o.traced.Add(1)
	o.mu.Lock()
	w := o.waits[key]
	if w == nil {
		w = &waiting{}
		o.waits[key] = w
	}
	w.callers++
	o.mu.Unlock()
}

// unwatch ends a traced Lock call on key; if want is set, it returns how the acquisition with
// token was made, when Acquired noted it. Acquired for an acquisition runs on the acquiring
// goroutine before Lock returns, and the next acquisition of the key cannot come before this
// one is released, so the note is the caller's unless the holding was lost in between (then
// the token differs and how is unknown).
func (o *Observer) unwatch(key string, token uint64, want bool) (how dlock.How, ok bool) {
	o.mu.Lock()
	w := o.waits[key]
	if want && w.seen && w.token == token {
		how, ok = w.how, true
	}
	if w.callers--; w.callers == 0 {
		delete(o.waits, key)
	}
	o.mu.Unlock()
	o.traced.Add(-1)
	return how, ok
}

// note keeps how e's acquisition was made for a traced Lock call waiting on its key.
func (o *Observer) note(e dlock.AcquireEvent) {
	o.mu.Lock()
	if w := o.waits[e.Config.UniqueKey()]; w != nil {
		w.token, w.how, w.seen = e.Token, e.How, true
	}
	o.mu.Unlock()
}
