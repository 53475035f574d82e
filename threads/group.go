package threads

import "sync"

// Group runs goroutines and waits for them; once closed it refuses new ones, so no goroutine
// can start after Close has begun waiting. The zero value is ready to use.
type Group struct {
	mu     sync.Mutex
	closed bool // guarded by mu
	wg     sync.WaitGroup
}

// Go runs f in a new goroutine unless the group is closed; it reports whether f was started.
func (g *Group) Go(f func()) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// Close refuses new goroutines and waits for the running ones to return.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
