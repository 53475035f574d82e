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
	// dialling counts the dials under way, by address: one the call's deadline ended before
	// it returned is one that --timeout cut short
	dialling map[string]int
}

// dialer returns a dialer as go-redis's own (redis.NewDialer) with timeout and tlsConfig, that
// records each dial's outcome in l.
func (l *dialLog) dialer(timeout time.Duration, tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	dial := redis.NewDialer(&redis.Options{DialTimeout: timeout, TLSConfig: tlsConfig})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		l.mu.Lock()
		if l.dialling == nil {
			l.dialling = make(map[string]int)
		}
		l.dialling[addr]++
		l.mu.Unlock()
		start := time.Now()
		c, err := dial(ctx, network, addr)
		var ne net.Error
		timedOut := err != nil && errors.As(err, &ne) && ne.Timeout()
		// (go-redis gives the dial a context bounded by the dial timeout too: only the time
		// taken tells a dial that ran its own timeout from one --timeout cut short)
		own := timedOut && time.Since(start) >= timeout
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.dialling[addr]--; l.dialling[addr] == 0 {
			delete(l.dialling, addr)
		}
		if err == nil {
			l.addr, l.err, l.own = "", nil, false
			return c, nil
		}
		if l.addr != addr {
			l.own = false
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
	for a := range l.dialling { // a dial under way: the call ended before it did
		if a != addr || !l.own {
			addr, cut = a, true
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
