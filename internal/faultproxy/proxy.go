// Package faultproxy is a TCP proxy for tests that puts network faults between a client and a
// server: added latency, a black hole, and abrupt connection resets.
//
// A Proxy listens on a loopback port and forwards every connection it accepts to a target
// address. Its controls are safe for concurrent use and act on current and future connections.
package faultproxy

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"time"
)

// Stats counts what a Proxy has done.
type Stats struct {
	Accepted int // connections accepted
	Active   int // connections open now
	Resets   int // connections closed abruptly by ResetAll
}

// Proxy forwards TCP connections to a target, injecting faults.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // ended by Close; bounds dials to the target
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	mu        sync.Mutex
	latency   time.Duration
	up, down  time.Duration                                   // added to latency: towards the target, back to the client
	shape     func(toTarget bool, chunk []byte) time.Duration // added to both, per chunk; nil for none
	blackhole bool
	subHole   bool          // a black hole on subscription links only (HoldSubscribers)
	cutNext   bool          // the next chunk back to a client is cut halfway (CutNextReply)
	changed   chan struct{} // closed and replaced whenever a black hole is switched
	links     map[*link]struct{}
	closed    bool
	stats     Stats
}

// link is one proxied connection: the accepted client side and the dialled server side.
type link struct {
	client net.Conn
	server net.Conn // nil until dialled; guarded by Proxy.mu
	done   chan struct{}
	closed bool // guarded by Proxy.mu
	sub    bool // guarded by Proxy.mu: the client sent a (P|S|UN)SUBSCRIBE on it
}

// New starts a proxy on 127.0.0.1 with a free port that forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), links: make(map[*link]struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of data by d in each direction (0 removes the delay).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetLatencies delays every chunk of data by up on its way to the target and by down on its
// way back to the client, on top of SetLatency's delay (0 removes each).
func (p *Proxy) SetLatencies(up, down time.Duration) {
	p.mu.Lock()
	p.up, p.down = up, down
	p.mu.Unlock()
}

// SetShaper adds f(toTarget, chunk) to the delay of every chunk from now on: toTarget says the
// chunk goes to the target, chunk is its bytes (not to be kept or changed). nil removes it. A
// chunk waits behind the chunks before it on its connection, as TCP delivers them in order.
func (p *Proxy) SetShaper(f func(toTarget bool, chunk []byte) time.Duration) {
	p.mu.Lock()
	p.shape = f
	p.mu.Unlock()
}

// Blackhole turns the black hole on or off. While on, connections are still accepted and kept,
// but no data is forwarded in either direction, so clients time out. Data sent meanwhile is
// held and delivered once the black hole is off, as TCP delivers it after a partition heals,
// unless the connection is closed or reset first.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = on
	close(p.changed)
	p.changed = make(chan struct{})
}

// ResetAll closes every current connection abruptly on both sides (SO_LINGER 0, so the peers
// see a reset) and drops whatever data it held. New connections are accepted as before.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		if !l.closed {
			p.stats.Resets++
		}
		p.closeLink(l, true)
	}
}

// HoldSubscribers turns on or off a black hole on subscription connections only (those on
// which the client sent a SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE): they stay open, and the server
// still counts their subscribers, but nothing crosses them; the other connections work. What
// was held is delivered when it is turned off, as Blackhole's.
func (p *Proxy) HoldSubscribers(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subHole = on
	close(p.changed)
	p.changed = make(chan struct{})
}

// ResetSubscribers closes the subscription connections abruptly (as ResetAll does) and leaves
// the others open. It returns how many it closed.
func (p *Proxy) ResetSubscribers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if l.sub && !l.closed {
			p.stats.Resets++
			n++
			p.closeLink(l, true)
		}
	}
	return n
}

// CutNextReply arms a cut: the next chunk of two bytes or more that goes back to a client, on
// any connection, is forwarded only in part (its first half), and that connection is then
// closed abruptly on both sides, as a connection that breaks in the middle of a reply.
func (p *Proxy) CutNextReply() {
	p.mu.Lock()
	p.cutNext = true
	p.mu.Unlock()
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Active = len(p.links)
	return s
}

// Close stops accepting, closes every connection and waits for all the proxy's goroutines.
// It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.cancel()
		_ = p.ln.Close()
		for l := range p.links {
			p.closeLink(l, false)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.links[l] = struct{}{}
		p.stats.Accepted++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve dials the target for l and pumps both directions until either ends.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		p.closeLink(l, false)
		delete(p.links, l)
		p.mu.Unlock()
	}()
	var d net.Dialer
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	s, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		return
	}
	p.mu.Lock()
	if l.closed { // reset or closed while dialling
		p.mu.Unlock()
		_ = s.Close()
		return
	}
	l.server = s
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.pump(l, s, l.client, true) }()
	p.pump(l, l.client, s, false)
	wg.Wait()
}

// pump copies src to dst, chunk by chunk, as the faults allow (toTarget: dst is the target's
// side); when either side ends it closes the link. A chunk is read as soon as it arrives and
// stamped, and each is forwarded its latency after its own arrival, in order: chunks sent back
// to back arrive back to back, as over a real link, rather than each waiting behind the
// latency of the one before.
func (p *Proxy) pump(l *link, dst, src net.Conn, toTarget bool) {
	type chunk struct {
		data []byte
		at   time.Time
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if toTarget && subscribes(c.data) {
			p.mu.Lock()
			l.sub = true
			p.mu.Unlock()
		}
		if !p.pass(l, toTarget, c.data, c.at) {
			break
		}
		if !toTarget && len(c.data) >= 2 && p.takeCut() {
			_, _ = dst.Write(c.data[:len(c.data)/2])
			p.mu.Lock()
			p.stats.Resets++
			p.closeLink(l, true)
			p.mu.Unlock()
			break
		}
		if _, werr := dst.Write(c.data); werr != nil {
			break
		}
	}
	p.mu.Lock()
	p.closeLink(l, false)
	p.mu.Unlock()
	for range chunks { // (the reader ends as the link closes)
	}
}

// takeCut reports whether a cut is armed (CutNextReply), and disarms it.
func (p *Proxy) takeCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cut := p.cutNext
	p.cutNext = false
	return cut
}

// pass waits until chunk, which arrived at at, may be forwarded on l (towards the target if
// toTarget): the black hole is off and the latency has passed since at, or since the black
// hole that held it was turned off. It returns false when l was closed meanwhile.
func (p *Proxy) pass(l *link, toTarget bool, chunk []byte, at time.Time) bool {
	p.mu.Lock()
	shape := p.shape
	p.mu.Unlock()
	var extra time.Duration // the shaper's, asked once per chunk
	if shape != nil {
		extra = shape(toTarget, chunk)
	}
	for {
		p.mu.Lock()
		hole, changed, lat := p.blackhole || (p.subHole && l.sub), p.changed, p.latency+extra
		if toTarget {
			lat += p.up
		} else {
			lat += p.down
		}
		p.mu.Unlock()
		if hole {
			select {
			case <-changed:
				at = time.Now() // (held by the black hole: it crosses the link once it heals)
				continue
			case <-l.done:
				return false
			}
		}
		wait := time.Until(at.Add(lat))
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C: // the black hole may have come on meanwhile: look again
		case <-l.done:
			t.Stop()
			return false
		}
	}
}

// closeLink closes both sides of l, abruptly (a reset) if abort is set; p.mu is held.
func (p *Proxy) closeLink(l *link, abort bool) {
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	for _, c := range []net.Conn{l.client, l.server} {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && abort {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// subscribes reports whether data, sent to the server, holds a (P|S)SUBSCRIBE or UNSUBSCRIBE
// command: the name as a whole RESP bulk string, not the word inside a script's text (EVAL).
func subscribes(data []byte) bool {
	lower := bytes.ToLower(data)
	for _, name := range [...]string{"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe"} {
		if bytes.Contains(lower, []byte("$"+strconv.Itoa(len(name))+"\r\n"+name+"\r\n")) {
			return true
		}
	}
	return false
}
