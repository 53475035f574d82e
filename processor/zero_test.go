package processor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/processor"
	"github.com/redis/go-redis/v9"
)

// requests calls every exported method of p that sends a request with ctx, lc and s: each
// returns its error.
func requests(p *processor.RedisLockProcessor, ctx context.Context, lc domain.DLockConfig, s processor.Shared) map[string]func() error {
	const locker = "zero-1"
	return map[string]func() error{
		"Sharded":      func() error { _, err := p.Sharded(ctx); return err },
		"Preload":      func() error { return p.Preload(ctx) },
		"Load":         func() error { _, err := p.Load(ctx, lc); return err },
		"Lock":         func() error { _, err := p.Lock(ctx, lc, processor.LockRequest{Locker: locker, Wait: true}); return err },
		"ExpandLease":  func() error { _, err := p.ExpandLease(ctx, lc, processor.RenewRequest{Locker: locker}); return err },
		"Unlock":       func() error { _, err := p.Unlock(ctx, lc, processor.ReleaseRequest{Locker: locker}); return err },
		"Leave":        func() error { _, err := p.Leave(ctx, lc, processor.LeaveRequest{Last: locker}); return err },
		"Inspect":      func() error { _, err := p.Inspect(ctx, lc); return err },
		"ForceRelease": func() error { _, err := p.ForceRelease(ctx, lc, locker); return err },
		"SharedTake": func() error {
			_, err := p.SharedTake(ctx, lc, s, processor.TakeRequest{Locker: locker, N: 1})
			return err
		},
		"SharedRenew":    func() error { _, err := p.SharedRenew(ctx, lc, s, locker); return err },
		"SharedRefill":   func() error { _, err := p.SharedRefill(ctx, lc, s, locker, 2); return err },
		"SharedRelease":  func() error { _, err := p.SharedRelease(ctx, lc, s, locker); return err },
		"SharedReleaseB": func() error { _, err := p.SharedReleaseBlock(ctx, lc, s, locker, 1, 2); return err },
		"SharedForce":    func() error { _, err := p.SharedForce(ctx, lc, s, locker); return err },
		"SharedInspect":  func() error { _, err := p.SharedInspect(ctx, lc, s); return err },
		"SetPermits":     func() error { return p.SetPermits(ctx, lc, 3) },
		"ChangePermits":  func() error { _, _, err := p.ChangePermits(ctx, lc, locker, 0, 3); return err },
	}
}

// Every exported method on a processor NewRedisLockProcessor did not make (nil or zero), and
// every request with a nil context, a zero DLockConfig or a zero Shared, never panics and
// sends nothing: those that return an error return one matching ErrInvalidConfig (not a
// RedisProcessError: nothing is unknown about it), the others answer as for a processor with
// no Cluster client.
func TestZeroValuesNeverPanic(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	lc := cfg(t, "zero")
	sem := processor.Shared{Kind: processor.KindSem, Permits: 3}
	call := func(t *testing.T, name string, f func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panics: %v", name, r)
			}
		}()
		err := f()
		var pe *dlerrors.RedisProcessError
		if !errors.Is(err, dlerrors.ErrInvalidConfig) || errors.As(err, &pe) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
	answers := func(t *testing.T, name string, p *processor.RedisLockProcessor) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s: a question panics: %v", name, r)
			}
		}()
		if m := p.MasterOf(ctx, lc.UniqueKey()); m != "" {
			t.Errorf("%s MasterOf = %q", name, m)
		}
		if m := p.MasterOf(nilCtx, lc.UniqueKey()); m != "" {
			t.Errorf("%s MasterOf(nil) = %q", name, m)
		}
		p.Reload()
		if d := p.MarkLife(lc); d < processor.DoneTTL(lc) {
			t.Errorf("%s MarkLife = %v, below DoneTTL", name, d)
		}
	}

	t.Run("processor not made by New", func(t *testing.T) {
		var np *processor.RedisLockProcessor
		zp := &processor.RedisLockProcessor{}
		for name, p := range map[string]*processor.RedisLockProcessor{"nil": np, "zero": zp} {
			for m, f := range requests(p, ctx, lc, sem) {
				call(t, name+" "+m, f)
			}
			answers(t, name, p)
		}
	})

	c := srv.Client()
	defer c.Close()
	p := newProc(t, c, "zero-")
	t.Run("nil context", func(t *testing.T) {
		for m, f := range requests(p.RedisLockProcessor, nilCtx, lc, sem) {
			call(t, m, f)
		}
		answers(t, "nil ctx", p.RedisLockProcessor)
	})
	t.Run("zero DLockConfig", func(t *testing.T) {
		for m, f := range requests(p.RedisLockProcessor, ctx, domain.DLockConfig{}, sem) {
			if m != "Sharded" && m != "Preload" { // (they take no configuration)
				call(t, m, f)
			}
		}
	})
	t.Run("zero Shared", func(t *testing.T) {
		for m, f := range requests(p.RedisLockProcessor, ctx, lc, processor.Shared{}) {
			switch m {
			case "SharedTake", "SharedRenew", "SharedRefill", "SharedRelease", "SharedReleaseB", "SharedForce", "SharedInspect":
				call(t, m, f)
			}
		}
		call(t, "SharedTake of no permits", func() error {
			_, err := p.SharedTake(ctx, lc, sem, processor.TakeRequest{Locker: "zero-2"})
			return err
		})
		if in, err := p.SharedInspect(ctx, lc, sem); err != nil || len(in.Holdings) != 0 || in.Stored {
			t.Errorf("a refused request wrote: %+v, %v", in, err)
		}
	})
	t.Run("empty locker", func(t *testing.T) { // (a key holding one would read as free)
		call(t, "Lock", func() error {
			_, err := p.Lock(ctx, lc, processor.LockRequest{Tokens: 1})
			return err
		})
		call(t, "ForceRelease", func() error {
			_, err := p.ForceRelease(ctx, lc, "")
			return err
		})
		if in, err := p.Inspect(ctx, lc); err != nil || in.Holder != "" || in.Fence != 0 {
			t.Errorf("a refused request wrote: %+v, %v", in, err)
		}
	})

	// A refusal whose reason the script could not name (Lua drops a trailing nil: {-2, nil}
	// arrives as {-2}) is an error, not an index out of range.
	t.Run("refusal without its reason", func(t *testing.T) {
		for _, code := range []string{"-2", "-3"} {
			q, err := processor.NewRedisLockProcessor(c, processor.Options{Scripts: map[string]string{"shared": "return {" + code + "}"}})
			if err != nil {
				t.Fatal(err)
			}
			call(t, "SharedRenew answered {"+code+"}", func() error { _, err := q.SharedRenew(ctx, lc, sem, "zero-3"); return err })
		}
	})

	// the processor still works after all that
	if r, err := p.Lock(ctx, lc, processor.LockRequest{Locker: p.locker()}); err != nil || r.Outcome != processor.Taken {
		t.Fatalf("Lock after refusals: %v, %v", r, err)
	}
}

// wrappedClient is a client wrapped to add behaviour, as instrumentation wrappers are.
type wrappedClient struct{ *redis.Client }

// A replica wait not below the ReadTimeout the client reads WAIT's answer with is refused: the
// client would give up first, and the caller get a timeout, never ErrNotReplicated. The
// ReadTimeout is read from a client, a Cluster client, a Ring (whose options keep 0 for
// go-redis's default, 5 s, that its shards read with) and a type that embeds one of them.
func TestReplicaWaitBelowTheReadTimeout(t *testing.T) {
	short := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 100 * time.Millisecond})
	defer short.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: 100 * time.Millisecond})
	defer cluster.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		wait   time.Duration
		ok     bool
	}{
		{"client", short, time.Second, false},
		{"client, below", short, 50 * time.Millisecond, true},
		{"wrapped client", wrappedClient{short}, time.Second, false},
		{"cluster", cluster, time.Second, false},
		{"ring of defaults", ring, 6 * time.Second, false},
		{"ring of defaults, below", ring, time.Second, true},
	} {
		_, err := processor.NewRedisLockProcessor(tc.client, processor.Options{Replicas: 1, ReplicaTimeout: tc.wait})
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, dlerrors.ErrInvalidConfig)) {
			t.Errorf("%s, a replica wait of %v: %v", tc.name, tc.wait, err)
		}
	}
}

// A client of the user's that panics (a wrapper whose own field is nil) makes every request
// that reaches it fail with an error naming the panic; none panics.
func TestPanickingClientIsAnError(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	p, err := processor.NewRedisLockProcessor(panicking{c}, processor.Options{Publish: true, Mark: "zero-"}) // (the requests' locker's: Leave sends)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range requests(p, context.Background(), cfg(t, "panics"), processor.Shared{Kind: processor.KindSem, Permits: 3}) {
		if name == "Sharded" { // (asks nothing of a client that is not a Cluster's)
			continue
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s panics: %v", name, r)
				}
			}()
			if err := f(); err == nil || !strings.Contains(err.Error(), "the Redis client panicked") {
				t.Errorf("%s: err = %v, want one naming the client's panic", name, err)
			}
		}()
	}
}

// panicking is a client of the user's whose every command panics.
type panicking struct{ redis.UniversalClient }

func (panicking) Process(context.Context, redis.Cmder) error { panic("a nil field of the user's") }
func (panicking) Get(context.Context, string) *redis.StringCmd {
	panic("a nil field of the user's")
}
func (panicking) ScriptLoad(context.Context, string) *redis.StringCmd {
	panic("a nil field of the user's")
}
func (panicking) Pipelined(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	panic("a nil field of the user's")
}
