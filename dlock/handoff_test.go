package dlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
)

// counter is a go-redis hook that counts the commands a client sends.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Within one process a release with local waiters hands the key over in one command, with a
// new fencing token, and the waiters take turns in order.
func TestLocalHandOverCostsOneCommand(t *testing.T) {
	g, c := newGen(t)
	cnt := &counter{}
	c.AddHook(cnt)
	l, _ := g.Gen("HANDOVER", target(t))
	ctx := ctxT(t, 30*time.Second)
	const goroutines, rounds = 4, 25
	owned, err := l.Lock(ctx) // hold while the others queue up
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var tokens []uint64
	var wg sync.WaitGroup
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				o, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				tok, _ := l.FencingToken(o)
				mu.Lock()
				tokens = append(tokens, tok)
				mu.Unlock()
				if err := l.Unlock(o); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for !g.Waiters(l.Config().UniqueKey()) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	before := cnt.n.Load()
	if err := l.Unlock(owned); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	sent := cnt.n.Load() - before
	acquisitions := int64(goroutines * rounds)
	t.Logf("%d acquisitions, %d commands sent", acquisitions, sent)
	// One hand-over per acquisition, one final release; a few more where the queue ran dry
	// for a moment (release, then SET NX).
	if sent > acquisitions+acquisitions/4+2 {
		t.Fatalf("%d commands for %d local acquisitions: hand-over is not one command", sent, acquisitions)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d", tokens[i], tokens[i-1])
		}
	}
	if c.Exists(ctx, l.Config().UniqueKey()).Val() != 0 || g.InUse() != 0 {
		t.Fatal("key or state left behind")
	}
}

// Two processes that both always have waiters take turns: the hand-off limit makes a process
// let the key go once another waits, so neither starves.
func TestHandOverYieldsToAnotherProcess(t *testing.T) {
	for _, handOff := range []time.Duration{dlock.DefaultHandOff, 0} {
		t.Run(handOff.String(), func(t *testing.T) {
			gens := []*dlock.Generator{}
			for i := 0; i < 2; i++ {
				g, _ := newGen(t, dlock.WithLocalHandOff(handOff))
				gens = append(gens, g)
			}
			var per [2]atomic.Int64
			var inside atomic.Int64
			var wg sync.WaitGroup
			ctx := ctxT(t, time.Minute)
			end := time.Now().Add(time.Second)
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					l, _ := gens[p].Gen("YIELD", target(t))
					for time.Now().Before(end) {
						o, err := l.Lock(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						if inside.Add(1) != 1 {
							t.Error("two owners at once")
						}
						time.Sleep(time.Millisecond)
						inside.Add(-1)
						per[p].Add(1)
						if err := l.Unlock(o); err != nil {
							t.Error(err)
						}
					}
				}(i % 2)
			}
			wg.Wait()
			a, b := per[0].Load(), per[1].Load()
			t.Logf("process 0: %d, process 1: %d acquisitions", a, b)
			if a < (a+b)/10 || b < (a+b)/10 {
				t.Fatalf("a process starved: %d against %d", a, b)
			}
		})
	}
}

func TestWithLocalHandOffRejectsNegative(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	if _, err := dlock.NewGenerator(c, dlock.WithLocalHandOff(-time.Second)); err == nil {
		t.Fatal("negative hand-off accepted")
	}
}
