package threads_test

import (
	"context"
	"errors"
	"testing"
	"time"

	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/threads"
)

// Every exported function and method on nil receivers, zero values and nil arguments neither
// panics (in the caller or in a goroutine it starts, which would crash the process) nor starts
// anything: an error matches ErrInvalidConfig, and the rest is the harmless answer (false,
// nothing run).
func TestZeroValuesNeverPanic(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	call := func(t *testing.T, name string, f func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panics: %v", name, r)
			}
		}()
		if err := f(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	refused := func(err error) error {
		if !errors.Is(err, dlerrors.ErrInvalidConfig) {
			return errors.New("err = " + errString(err) + ", want ErrInvalidConfig")
		}
		return nil
	}
	yes := func(what string, ok bool) error {
		if !ok {
			return errors.New(what)
		}
		return nil
	}

	t.Run("Group", func(t *testing.T) {
		var ng *threads.Group
		var zg threads.Group
		defer zg.Close()
		call(t, "nil Group.Go", func() error { return yes("started", !ng.Go(func() { t.Error("ran") })) })
		call(t, "nil Group.Close", func() error { ng.Close(); return nil })
		call(t, "nil Group.CloseContext", func() error { return refused(ng.CloseContext(ctx)) })
		// Go(nil) would start a goroutine that panics: nothing can recover that.
		call(t, "Group.Go(nil)", func() error { return yes("Go(nil) reported started", !zg.Go(nil)) })
		call(t, "Group.CloseContext(nil)", func() error { return refused(zg.CloseContext(nilCtx)) })
		call(t, "zero Group still works", func() error {
			done := make(chan struct{})
			if !zg.Go(func() { close(done) }) {
				return errors.New("a zero Group refused f after the refusals above")
			}
			<-done
			return nil
		})
	})

	t.Run("Expander", func(t *testing.T) {
		var g threads.Group
		defer g.Close()
		l := newLease(time.Second)
		var ne *threads.Expander
		var ze threads.Expander
		call(t, "nil Expander.Poke", func() error { ne.Poke(); return nil })
		call(t, "nil Expander.Stop", func() error { ne.Stop(); return nil })
		call(t, "zero Expander.Poke", func() error { ze.Poke(); return nil })
		call(t, "zero Expander.Stop", func() error { ze.Stop(); return nil })
		for _, tc := range []struct {
			name  string
			ctx   context.Context
			l     threads.Lease
			g     *threads.Group
			first time.Time
		}{
			{"StartExpander(ctx, nil, nil)", ctx, nil, nil, time.Time{}},
			{"StartExpander(nil, l, g)", nilCtx, l, &g, time.Time{}},
			{"StartExpander(ctx, nil, g)", ctx, nil, &g, time.Time{}},
			{"StartExpander(ctx, l, nil)", ctx, l, nil, time.Time{}},
			// begun by a timer: a panic there crashes the process
			{"StartExpanderAt(nil, l, g, soon)", nilCtx, l, &g, time.Now().Add(time.Millisecond)},
			{"StartExpanderAt(ctx, nil, g, soon)", ctx, nil, &g, time.Now().Add(time.Millisecond)},
			{"StartExpanderAt(ctx, nil *Lease, g, soon)", ctx, (*fakeLease)(nil), &g, time.Now().Add(time.Millisecond)},
		} {
			call(t, tc.name, func() error {
				e := threads.StartExpanderAt(tc.ctx, tc.l, tc.g, tc.first)
				if e == nil {
					return errors.New("nil Expander")
				}
				time.Sleep(5 * time.Millisecond) // (the timer's time)
				e.Poke()
				e.Stop()
				return nil
			})
		}
		if n := l.count(); n != 0 {
			t.Errorf("%d renewals by expanders that should not have started", n)
		}
	})

	t.Run("Poller", func(t *testing.T) {
		var g threads.Group
		defer g.Close()
		tg := &target{}
		tg.waiting.Store(true)
		var np *threads.Poller
		var zp threads.Poller
		for name, p := range map[string]*threads.Poller{"nil": np, "zero": &zp} {
			call(t, name+" Poller.Start", func() error { return yes("started", !p.Start()) })
			call(t, name+" Poller.StartAfter", func() error { return yes("started", !p.StartAfter(time.Millisecond)) })
			call(t, name+" Poller.Reset", func() error { p.Reset(func() time.Duration { return time.Millisecond }); return nil })
			call(t, name+" Poller.Stop", func() error { p.Stop(); return nil })
			call(t, name+" Poller.StopIdle", func() error { p.StopIdle(); return nil })
			call(t, name+" Poller.Due", func() error { _, ok := p.Due(); return yes("a poll is due", !ok) })
			call(t, name+" Poller.Locked", func() error {
				p.Locked(func(running bool) {
					if running {
						t.Errorf("%s Poller runs a loop", name)
					}
				})
				return nil
			})
		}
		for _, tc := range []struct {
			name   string
			ctx    context.Context
			target threads.PollTarget
			g      *threads.Group
		}{
			{"NewPoller(nil ctx)", nilCtx, tg, &g},
			{"NewPoller(nil target)", ctx, nil, &g}, // its poll would run in a timer's goroutine
			{"NewPoller(nil *target)", ctx, (*target)(nil), &g},
			{"NewPoller(nil group)", ctx, tg, nil},
		} {
			call(t, tc.name, func() error {
				p := threads.NewPoller(tc.ctx, time.Millisecond, time.Millisecond, tc.target, tc.g)
				started := p.Start()
				p.Reset(func() time.Duration { return time.Millisecond })
				time.Sleep(5 * time.Millisecond) // (a poll's time)
				p.StopIdle()
				p.Stop()
				return yes("started", !started)
			})
		}
		if n := tg.polls.Load(); n != 0 {
			t.Errorf("%d polls by pollers that should not have started", n)
		}
		// nil functions given to a working poller are not run
		p := threads.NewPoller(ctx, time.Hour, time.Hour, tg, &g)
		call(t, "Start(nil)", func() error { p.Start(nil); return nil })
		call(t, "Reset(nil)", func() error { p.Reset(nil); return nil })
		call(t, "Locked(nil)", func() error { p.Locked(nil); return nil })
		p.Stop()
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
