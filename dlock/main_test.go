package dlock_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	if os.Getenv("DLOCK_TEST_HOLDER") != "" { // (this binary run by holderProcess)
		os.Exit(runHolder())
	}
	// The tests that call t.Parallel use only their own keys (or servers) and wait on leases,
	// servers and other processes, not on the CPU: four at a time unless -parallel says
	// otherwise (its default is GOMAXPROCS, 2 on a small CI machine).
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", "4")
	}
	code := redistest.Main(m, func(s *redistest.Server) { srv = s })
	if code == 0 {
		// A go-redis pool that failed to dial retries in a goroutine that notices the pool's
		// Close only after its next 1 s sleep: give goroutines a few seconds to end.
		err := goleak.Find()
		for i := 0; err != nil && i < 10; i++ {
			time.Sleep(500 * time.Millisecond)
			err = goleak.Find()
		}
		if err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// newGen returns a generator on a fresh client; both are closed when t ends.
func newGen(t testing.TB, opts ...dlock.Option) (*dlock.Generator, *redis.Client) {
	t.Helper()
	c := srv.Client()
	return genOn(t, c, opts...), c
}

// genOn returns a generator on c (a one-second default lease, then opts); both are closed when
// t ends. That Close must succeed, unless the test closed the generator itself with a ctx
// that ended first: a later Close returns that Close's error.
func genOn(t testing.TB, c *redis.Client, opts ...dlock.Option) *dlock.Generator {
	t.Helper()
	g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithDefaultLease(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close: %v", err)
		}
		c.Close()
	})
	return g
}

// target returns a lock target unique to the test.
func target(t testing.TB) string { return t.Name() }

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
