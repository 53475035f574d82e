package threads

import (
	"context"
	"fmt"
	"sync"

	dlerrors "github.com/dlockgo/dlock/errors"
)

// Group runs goroutines and waits for them; once closed it refuses new ones, so no goroutine
// can start after Close has begun waiting. The zero value is ready to use. A nil *Group is
// one closed from the start: it runs nothing, and closing it waits for nothing (CloseContext
// returns an error wrapping errors.ErrInvalidConfig).
type Group struct {
	mu     sync.Mutex
	closed bool // guarded by mu
	wg     sync.WaitGroup
}

// Go runs f in a new goroutine unless the group is closed (or nil) or f is nil; it reports
// whether f was started.
func (g *Group) Go(f func()) bool {
	if f == nil || !g.enter() {
		return false
	}
	go func() {
		defer g.leave()
		f()
	}()
	return true
}

// enter counts the calling goroutine (one a timer started) as one of the group's until leave,
// unless the group is closed; it reports whether it did.
func (g *Group) enter() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *Group) leave() { g.wg.Done() }

// isClosed reports whether the group refuses new goroutines.
func (g *Group) isClosed() bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Close refuses new goroutines and waits for the running ones to return. On a nil group it
// does nothing.
func (g *Group) Close() { _ = g.CloseContext(context.Background()) }

// CloseContext is Close that stops waiting when ctx ends, returning ctx's error; the running
// goroutines then end on their own. On a nil group, or with a nil ctx, it returns at once an
// error wrapping errors.ErrInvalidConfig (and a nil ctx leaves the group open).
func (g *Group) CloseContext(ctx context.Context) error {
	if g == nil {
		return fmt.Errorf("%w: CloseContext on a nil Group", dlerrors.ErrInvalidConfig)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", dlerrors.ErrInvalidConfig)
	}
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	if ctx.Done() == nil {
		g.wg.Wait()
		return nil
	}
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
