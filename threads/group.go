package threads

import (
	"context"
	"sync"
)

// Group runs goroutines and waits for them; once closed it refuses new ones, so no goroutine
// can start after Close has begun waiting. The zero value is ready to use.
type Group struct {
	mu     sync.Mutex
	closed bool // guarded by mu
	wg     sync.WaitGroup
}

// Go runs f in a new goroutine unless the group is closed; it reports whether f was started.
func (g *Group) Go(f func()) bool {
	if !g.enter() {
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
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Close refuses new goroutines and waits for the running ones to return.
func (g *Group) Close() { _ = g.CloseContext(context.Background()) }

// CloseContext is Close that stops waiting when ctx ends, returning ctx's error; the running
// goroutines then end on their own.
func (g *Group) CloseContext(ctx context.Context) error {
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
