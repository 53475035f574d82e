// Package reliability_test is the fault-injection and soak suite: each test breaks something a
// distributed lock must survive (the Redis server, the network, a paused holder, a storm of
// cancellations) and checks that no promise was broken. Every test runs short by default;
// DLOCK_SOAK=<duration> (for example DLOCK_SOAK=10m) makes the long-running ones run that long.
package reliability_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	if helper := os.Getenv("DLOCK_RELIABILITY_HELPER"); helper != "" {
		os.Exit(runHelper(helper))
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// soak returns how long soak tests run: DLOCK_SOAK, or short when it is unset.
func soak(t testing.TB, short time.Duration) time.Duration {
	v := os.Getenv("DLOCK_SOAK")
	if v == "" {
		return short
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("DLOCK_SOAK=%q: %v", v, err)
	}
	return d
}

// realServer starts a redis-server of the test's own (tests here kill, restart and proxy it).
func realServer(t testing.TB) *redistest.Server {
	t.Helper()
	s, err := redistest.StartReal()
	if err != nil {
		if redistest.Required() {
			t.Fatal(err)
		}
		t.Skipf("needs redis-server: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// generator returns a generator over a new client of addr with the given options; both are
// closed when t ends.
func generator(t testing.TB, addr string, opts ...dlock.Option) (*dlock.Generator, *redis.Client) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithDefaultLease(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.Close(context.Background())
		_ = c.Close()
	})
	return g, c
}
