package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialLog keeps the outcome of the last dial of an endpoint's clients (its Sentinels', its
// master's, its nodes'), so that a call that ran out of time, or failed, while no connection
// could be made says where and why — go-redis reports a dial that kept failing until the
// context's deadline as a bare "context deadline exceeded", which would read as a Redis that
// did not answer.
type dialLog struct {
	mu   sync.Mutex
	addr string    // the address of the last failed dial, "" when the last dial connected
	err  error     // its error
	cut  bool      // it ended because its context did (--timeout), not by its own timeout
	own  bool      // a dial to addr ended by its own timeout (dial_timeout) since the last connection
	at   time.Time // when it failed
	tls  bool      // it connected, and the TLS handshake failed
	// dialling are the dials under way: one that has gone on for a while when a call ends
	// is one that --timeout cut short
	dialling map[*dialling]bool
}

// dialling is a dial under way.
type dialling struct {
	addr      string
	start     time.Time
	handshake bool // connected: the TLS handshake is under way
}

// hanging is how long a dial goes on before a call that ends meanwhile is taken to have
// waited for it, rather than for an answer: a refused or failed dial ends at once.
const hanging = 100 * time.Millisecond

// dialer returns a dialer as go-redis's own (redis.NewDialer) with timeout and tlsConfig, that
// records each dial's outcome in l.
func (l *dialLog) dialer(timeout time.Duration, tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	dial := redis.NewDialer(&redis.Options{DialTimeout: timeout}) // (TCP: the handshake is below)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		start := time.Now()
		d := &dialling{addr: addr, start: start}
		l.mu.Lock()
		if l.dialling == nil {
			l.dialling = make(map[*dialling]bool)
		}
		l.dialling[d] = true
		l.mu.Unlock()
		c, err := dial(ctx, network, addr)
		handshake := false // the TLS handshake failed
		if err == nil && tlsConfig != nil {
			// As tls.DialWithDialer, which go-redis's dialer calls, within the dial timeout,
			// and the call's context too.
			cfg := tlsConfig
			if cfg.ServerName == "" {
				cfg = cfg.Clone()
				cfg.ServerName, _, _ = net.SplitHostPort(addr)
			}
			l.mu.Lock()
			d.handshake = true
			l.mu.Unlock()
			hctx, cancel := context.WithTimeout(ctx, timeout-time.Since(start))
			tc := tls.Client(c, cfg)
			if err = tc.HandshakeContext(hctx); err != nil {
				c.Close()
				handshake = true
			} else {
				c = tc
			}
			cancel()
		}
		var ne net.Error
		timedOut := err != nil && errors.As(err, &ne) && ne.Timeout()
		// (go-redis gives the dial a context bounded by the dial timeout too: only the time
		// taken tells a dial that ran its own timeout from one --timeout cut short)
		own := timedOut && time.Since(start) >= timeout
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.dialling, d)
		if err == nil {
			l.addr, l.err, l.own = "", nil, false
			return c, nil
		}
		if handshake {
			l.addr, l.err, l.cut, l.own, l.tls, l.at = addr, err, false, false, true, time.Now()
			return nil, &handshakeError{addr: addr, err: err}
		}
		if l.addr != addr {
			l.own = false
		}
		l.tls = false
		if cut := timedOut && !own; cut && time.Since(start) < hanging && l.addr == addr && !l.cut && !l.own {
			// A dial cut short at once (begun at or past the call's deadline, as go-redis
			// may) after one that said why it failed (refused): the reason stays. One that
			// hung until it was cut short is a new failure, named as such.
			l.at = time.Now()
			return c, err
		}
		l.addr, l.err, l.cut, l.at = addr, err, timedOut && !own, time.Now()
		l.own = l.own || own
		return c, err
	}
}

// handshakeError is a TLS handshake that failed on a connection made to addr: a dial's
// failure, though no dial step failed.
type handshakeError struct {
	addr string
	err  error
}

func (e *handshakeError) Error() string { return "TLS handshake with " + e.addr + ": " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// failure returns why e's last dial, if it failed within the last span, made no connection:
// nil if it connected, or failed longer ago.
func (e *endpoint) failure(timeout time.Duration) error {
	l := e.dials
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	addr, cut, handshake, under := l.addr, l.cut, l.tls, false
	for d := range l.dialling { // a dial under way for a while: the call ended before it did
		if time.Since(d.start) >= hanging && (d.addr != addr || !l.own) {
			addr, cut, handshake, under = d.addr, !d.handshake, d.handshake, true
			break
		}
	}
	if addr == "" || !under && time.Since(l.at) > timeout+time.Second {
		return nil
	}
	// The message names addr once: e names it already when it is e's one address.
	said := e.only(addr)
	where := ""
	switch {
	case e.master != "" && slices.Contains(e.sentinels, addr) && said:
		where = "the Sentinel: "
	case e.master != "" && slices.Contains(e.sentinels, addr):
		where = "the Sentinel at " + addr + ": "
	case e.master != "":
		where = fmt.Sprintf("the master %q at %s (as the Sentinels name it; is it reachable from here?): ", e.master, addr)
	case e.kind != "" && !said:
		where = "node " + addr + ": "
	}
	with := "" // the handshake's address, when nothing before names it
	if !said && where == "" {
		with = " with " + addr
	}
	own := addr == l.addr && l.own
	d := e.urlDialTimeout()
	switch {
	case handshake:
		why := "no answer to it" // (a handshake under way)
		var ne net.Error
		var rh tls.RecordHeaderError
		switch {
		case addr != l.addr || !l.tls:
		case errors.Is(l.err, context.DeadlineExceeded) || errors.As(l.err, &ne) && ne.Timeout():
			why = "no answer to it"
		case errors.Is(l.err, io.EOF) || errors.Is(l.err, syscall.ECONNRESET):
			// (a plain service that hangs up on what it cannot read, a proxy without a backend)
			return fmt.Errorf("cannot reach %v: %sTLS handshake%s: the server closed the connection: is it a TLS port? (rediss:// is for TLS, redis:// without)", e, where, with)
		case !errors.As(l.err, &rh):
			// (a certificate refused, say: a TLS server)
			return fmt.Errorf("cannot reach %v: %sTLS handshake%s failed: %s", e, where, with, plain(l.err))
		default:
			why = plain(l.err)
		}
		return fmt.Errorf("cannot reach %v: %sa connection%s, but no TLS handshake (%s): is it a plain port? (rediss:// is for TLS, redis:// without)", e, where, with, why)
	case own && d > 0 && d < timeout:
		return fmt.Errorf("cannot reach %v: %sno connection within its dial_timeout %v", e, where, d)
	case cut || own:
		return fmt.Errorf("cannot reach %v: %sno connection within %v (--timeout)", e, where, timeout)
	}
	return fmt.Errorf("cannot reach %v: %s%s", e, where, plain(l.err))
}

// only reports whether addr is e's one address, which a message naming e names: its server's,
// its one Cluster seed's, its one Sentinel's (not an address Redis gave, nor a port left out).
func (e *endpoint) only(addr string) bool {
	o, err := e.spec.parse()
	var addrs []string
	switch {
	case err != nil:
	case o.single != nil:
		addrs = []string{o.single.Addr}
	case o.cluster != nil:
		addrs = o.cluster.Addrs
	case o.failover != nil:
		addrs = o.failover.SentinelAddrs
	}
	return len(addrs) == 1 && addrs[0] == addr && strings.Contains(e.shown, addr)
}
