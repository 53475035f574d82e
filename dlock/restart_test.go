package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// ownServer starts a redis-server of the test's own, which it may kill and restart.
func ownServer(t *testing.T) *redistest.Server {
	s, err := redistest.StartReal()
	if err != nil {
		if redistest.Required() {
			t.Fatal(err)
		}
		t.Skipf("needs a redis-server it can restart: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Fencing tokens keep increasing when Redis restarts empty (the counter is lost; the server
// clock is not).
func TestTokensIncreaseAcrossRestart(t *testing.T) {
	s := ownServer(t)
	c := s.Client()
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	l, _ := g.Gen("RESTART", "fence")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token := func() uint64 {
		owned, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := l.FencingToken(owned)
		if err := l.Unlock(owned); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	var last uint64
	for i := 0; i < 3; i++ {
		for j := 0; j < 5; j++ {
			tok := token()
			if tok <= last {
				t.Fatalf("restart %d: token %d after %d", i, tok, last)
			}
			last = tok
		}
		s.Kill()
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		if n := c.DBSize(ctx).Val(); n != 0 {
			t.Fatalf("restarted server holds %d keys, want an empty one", n)
		}
	}
}
