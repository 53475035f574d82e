package dlock

import "sync"

// senders keeps a few goroutines that run requests for call, parked between requests. A
// goroutine started for each request grows its stack through go-redis's calls every time (the
// runtime copies it two or three times on the way down); one kept for the next request has
// grown it once. It changes nothing of what call guarantees: the request still runs on a
// goroutine of its own, in the Generator's group, and the caller still waits for its answer
// or its context, whichever comes first.
type senders struct {
	mu   sync.Mutex
	idle []chan runner // parked senders, each waiting on its own channel; guarded by mu
}

// runner is a request a sender runs (call's).
type runner interface{ run() }

// maxIdleSenders is how many senders stay parked between requests: beyond it a sender that
// finishes its request ends.
const maxIdleSenders = 4

// run runs f on a parked sender, or on a new one in the Generator's group; it reports false,
// running nothing, when the group is closed.
func (s *senders) run(g *Generator, f runner) bool {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		ch := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		ch <- f // (buffered: the sender, taken out of idle, receives it whatever else it sees)
		return true
	}
	s.mu.Unlock()
	return g.group.Go(func() { s.loop(g, f) })
}

// loop runs f, then parks for the next request until the Generator's background work ends
// (Close is done with it, or gave up), unless enough senders are parked already.
func (s *senders) loop(g *Generator, f runner) {
	ch := make(chan runner, 1)
	for {
		f.run()
		s.mu.Lock()
		if len(s.idle) >= maxIdleSenders || g.clean.Err() != nil {
			s.mu.Unlock()
			return
		}
		s.idle = append(s.idle, ch)
		s.mu.Unlock()
		select {
		case f = <-ch:
			continue
		case <-g.clean.Done():
		}
		s.mu.Lock()
		parked := false
		for i, c := range s.idle {
			if c == ch {
				s.idle = append(s.idle[:i], s.idle[i+1:]...)
				parked = true
				break
			}
		}
		s.mu.Unlock()
		if parked {
			return
		}
		f = <-ch // (taken out of idle by run, which sends it a request)
	}
}
