package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
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
	// dialling are the dials under way: one that has gone on for a while when a call ends
	// is one that --timeout cut short
	dialling map[*dialling]bool
}

// dialling is a dial under way.
type dialling struct {
	addr  string
	start time.Time
}

// hanging is how long a dial goes on before a call that ends meanwhile is taken to have
// waited for it, rather than for an answer: a refused or failed dial ends at once.
const hanging = 100 * time.Millisecond

// dialer returns a dialer as go-redis's own (redis.NewDialer) with timeout and tlsConfig, that
// records each dial's outcome in l.
func (l *dialLog) dialer(timeout time.Duration, tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	dial := redis.NewDialer(&redis.Options{DialTimeout: timeout, TLSConfig: tlsConfig})
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
		if l.addr != addr {
			l.own = false
		}
		if cut := timedOut && !own; cut && l.addr == addr && !l.cut && !l.own {
			// A dial cut short (or begun past the call's deadline, as go-redis may) after
			// one that said why it failed (refused): the reason stays.
			l.at = time.Now()
			return c, err
		}
		l.addr, l.err, l.cut, l.at = addr, err, timedOut && !own, time.Now()
		l.own = l.own || own
		return c, err
	}
}

// failure returns why e's last dial, if it failed within the last span, made no connection:
// nil if it connected, or failed longer ago.
func (e *endpoint) failure(timeout time.Duration) error {
	l := e.dials
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	addr, cut := l.addr, l.cut
	for d := range l.dialling { // a dial under way for a while: the call ended before it did
		if time.Since(d.start) >= hanging && (d.addr != addr || !l.own) {
			addr, cut = d.addr, true
			break
		}
	}
	if addr == "" || addr == l.addr && !cut && time.Since(l.at) > timeout+time.Second {
		return nil
	}
	where := ""
	switch {
	case e.master != "" && slices.Contains(e.sentinels, addr):
		where = "the Sentinel at " + addr + ": "
	case e.master != "":
		where = fmt.Sprintf("the master %q at %s (as the Sentinels name it; is it reachable from here?): ", e.master, addr)
	case e.kind != "":
		where = "node " + addr + ": "
	}
	own := addr == l.addr && l.own
	d := e.urlDialTimeout()
	switch {
	case own && d > 0 && d < timeout:
		return fmt.Errorf("cannot reach %v: %sno connection within its dial_timeout %v", e, where, d)
	case cut || own:
		return fmt.Errorf("cannot reach %v: %sno connection within %v (--timeout)", e, where, timeout)
	}
	return fmt.Errorf("cannot reach %v: %s%s", e, where, plain(l.err))
}
