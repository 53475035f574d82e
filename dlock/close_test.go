package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

// Every exit path tells the holding before it lets the key go: by the time the request that
// frees the key is sent, the owner context has ended, with the cause of that exit. (Once the
// key is free another process may take it at once: a holder still acting then would be a
// second owner.)
func TestExitsTellTheHolderBeforeTheKeyGoes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		exit  func(g *dlock.Generator, owned *dlock.Owner) error
		cause error
	}{
		{"Unlock", func(_ *dlock.Generator, owned *dlock.Owner) error { return owned.Unlock() }, context.Canceled},
		{"Close", func(g *dlock.Generator, _ *dlock.Owner) error { return g.Close(context.Background()) }, dlock.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newGen(t)
			preload(t, c)
			w := newWire(t, c)
			l, _ := g.GenWithLease("EXIT", target(t), 5*time.Second)
			owned, err := l.Lock(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var sent atomic.Int32
			var causeAtSend atomic.Value
			w.onSend("release", func([]any) {
				sent.Add(1)
				causeAtSend.Store(fmtCause(owned))
			})
			if err := tc.exit(g, owned); err != nil {
				t.Fatal(err)
			}
			if sent.Load() == 0 {
				t.Fatal("no release request was sent")
			}
			if got := causeAtSend.Load().(string); got != fmtCause(owned) || !errors.Is(context.Cause(owned), tc.cause) {
				t.Fatalf("when the release was sent the owner context's cause was %s; it ended with %v, want %v", got, context.Cause(owned), tc.cause)
			}
		})
	}
}

// fmtCause describes a context's state: "live", or its cause.
func fmtCause(ctx context.Context) string {
	if ctx.Err() == nil {
		return "live"
	}
	return context.Cause(ctx).Error()
}
