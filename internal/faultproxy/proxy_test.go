package faultproxy_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/internal/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes every connection until the test ends; it waits for its goroutines.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *faultproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads it back within timeout.
func roundTrip(c net.Conn, msg []byte, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs")
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyForwards(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p)
	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)
	if err := roundTrip(c, big, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, []byte("ping"), time.Second); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Accepted != 1 || s.Active != 1 || s.Resets != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestProxyLatency(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p)
	const d = 40 * time.Millisecond
	p.SetLatency(d)
	start := time.Now()
	if err := roundTrip(c, []byte("slow"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v with %v each way", rtt, d)
	}
	p.SetLatency(0)
	start = time.Now()
	if err := roundTrip(c, []byte("fast"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt >= d {
		t.Fatalf("round trip %v after the latency was removed", rtt)
	}
}

func TestProxyBlackhole(t *testing.T) {
	p := newProxy(t, echoServer(t))
	before := dial(t, p)
	if err := roundTrip(before, []byte("hello"), time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	// An open connection hears nothing back.
	if err := roundTrip(before, []byte("lost?"), 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("through the black hole: %v, want a timeout", err)
	}
	// A new connection is accepted, and hears nothing either.
	during := dial(t, p)
	if err := roundTrip(during, []byte("anyone"), 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection in the black hole: %v, want a timeout", err)
	}
	if s := p.Stats(); s.Active != 2 {
		t.Fatalf("connections not kept: %+v", s)
	}
	// Lifted: what was held arrives, in order, and traffic flows again.
	p.Blackhole(false)
	for _, tc := range []struct {
		c    net.Conn
		want string
	}{{before, "lost?"}, {during, "anyone"}} {
		_ = tc.c.SetReadDeadline(time.Now().Add(2 * time.Second))
		got := make([]byte, len(tc.want))
		if _, err := io.ReadFull(tc.c, got); err != nil || string(got) != tc.want {
			t.Fatalf("held data: %q, %v; want %q", got, err, tc.want)
		}
		if err := roundTrip(tc.c, []byte("again"), time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func TestProxyResetAll(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p)
	if err := roundTrip(c, []byte("hello"), time.Second); err != nil {
		t.Fatal(err)
	}
	p.ResetAll()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetAll: %v, want a connection reset", err)
	}
	if s := p.Stats(); s.Resets != 1 {
		t.Fatalf("stats %+v", s)
	}
	// New connections work.
	if err := roundTrip(dial(t, p), []byte("again"), time.Second); err != nil {
		t.Fatal(err)
	}
	waitActive(t, p, 1)
}

// ResetAll during a black hole drops what was held: nothing arrives later.
func TestProxyResetDropsHeldData(t *testing.T) {
	addr := echoServer(t)
	p := newProxy(t, addr)
	c := dial(t, p)
	if err := roundTrip(c, []byte("hello"), time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // let the proxy read it
	p.ResetAll()
	p.Blackhole(false)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 8)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("after reset: %d bytes, %v; want nothing and a reset", n, err)
	}
	waitActive(t, p, 0)
}

func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p := newProxy(t, addr)
	c := dial(t, p)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read with the target down: %v, want the connection closed", err)
	}
}

func TestProxyClose(t *testing.T) {
	addr := echoServer(t)
	before := goleak.IgnoreCurrent()
	p := newProxy(t, addr)
	c := dial(t, p)
	held := dial(t, p)
	if err := roundTrip(c, []byte("hello"), time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(true)
	_, _ = held.Write([]byte("stuck")) // a pump waits in the black hole
	time.Sleep(20 * time.Millisecond)
	done := make(chan struct{})
	go func() { _ = p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	_ = p.Close() // idempotent
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read after Close: %v, want the connection closed", err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond); err == nil {
		_ = c.Close()
		t.Fatal("the proxy still accepts after Close")
	}
	if s := p.Stats(); s.Active != 0 {
		t.Fatalf("stats after Close %+v", s)
	}
	goleak.VerifyNone(t, before) // the proxy's goroutines, and the echo server's for its connections
}

// Controls used concurrently with traffic (run with -race): clients reconnect after resets and
// every one of them gets through once the faults stop.
func TestProxyConcurrentControls(t *testing.T) {
	p := newProxy(t, echoServer(t))
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			defer func() {
				if c != nil {
					_ = c.Close()
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c == nil {
					var err error
					if c, err = net.DialTimeout("tcp", p.Addr(), time.Second); err != nil {
						failed.Add(1)
						continue
					}
				}
				if err := roundTrip(c, []byte("x"), 50*time.Millisecond); err != nil {
					failed.Add(1)
					_ = c.Close()
					c = nil
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			switch i % 4 {
			case 0:
				p.SetLatency(time.Duration(i%3) * time.Millisecond)
			case 1:
				p.Blackhole(true)
			case 2:
				p.Blackhole(false)
			case 3:
				p.ResetAll()
				_ = p.Stats()
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	p.Blackhole(false)
	p.SetLatency(0)
	for i := 0; i < 8; i++ {
		if err := roundTrip(dial(t, p), []byte("after"), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	s := p.Stats()
	t.Logf("round trips ok %d, failed %d; %+v", ok.Load(), failed.Load(), s)
	if ok.Load() == 0 || s.Resets == 0 {
		t.Fatalf("no traffic or no resets: ok %d, %+v", ok.Load(), s)
	}
}

func waitActive(t *testing.T, p *faultproxy.Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for p.Stats().Active != n {
		if time.Now().After(deadline) {
			t.Fatalf("active connections %d, want %d", p.Stats().Active, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// HoldSubscribers and ResetSubscribers act on the connections that sent a SUBSCRIBE only.
func TestProxySubscribersOnly(t *testing.T) {
	p := newProxy(t, echoServer(t))
	sub, cmd := dial(t, p), dial(t, p)
	if err := roundTrip(sub, []byte("*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nx\r\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	// A script whose text names the command, even on a line of its own, is no subscription.
	if err := roundTrip(cmd, []byte("*3\r\n$4\r\nEVAL\r\n$33\r\n--[[\r\nsubscribe\r\n]] return 'PING'\r\n$1\r\n0\r\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	p.HoldSubscribers(true)
	if err := roundTrip(sub, []byte("deaf?"), 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("held subscription connection: %v, want a timeout", err)
	}
	if err := roundTrip(cmd, []byte("PING"), time.Second); err != nil {
		t.Fatalf("the command connection while subscribers are held: %v", err)
	}
	p.HoldSubscribers(false)
	_ = sub.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, 5)
	if _, err := io.ReadFull(sub, got); err != nil || string(got) != "deaf?" {
		t.Fatalf("held data: %q, %v", got, err)
	}
	if n := p.ResetSubscribers(); n != 1 {
		t.Fatalf("ResetSubscribers closed %d connections, want 1", n)
	}
	_ = sub.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := sub.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetSubscribers: %v, want a connection reset", err)
	}
	if err := roundTrip(cmd, []byte("PING"), time.Second); err != nil {
		t.Fatalf("the command connection after ResetSubscribers: %v", err)
	}
}

// CutNextReply forwards half of the next reply and then resets its connection.
func TestProxyCutNextReply(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p)
	p.CutNextReply()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("12345678")); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if string(got) != "1234" || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("cut reply: %q, %v; want \"1234\" and a connection reset", got, err)
	}
	if err := roundTrip(dial(t, p), []byte("whole"), time.Second); err != nil {
		t.Fatalf("the next connection: %v", err)
	}
}
