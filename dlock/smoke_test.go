package dlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

func TestSmoke(t *testing.T) {
	g1, c := newGen(t)
	g2, _ := newGen(t)
	tg := target(t)
	l1, _ := g1.Gen("SMOKE", tg)
	l2, _ := g2.Gen("SMOKE", tg)
	ctx := ctxT(t, 30*time.Second)
	var inside atomic.Int32
	var n atomic.Int64
	var last atomic.Uint64
	var bad atomic.Int32
	var wg sync.WaitGroup
	before := commands(t, c)
	for _, l := range []*dlock.DistributedReentrantLock{l1, l2} {
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 100; j++ {
					o, err := l.Lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						bad.Add(1)
					}
					tok, _ := l.FencingToken(o)
					if p := last.Swap(tok); p >= tok {
						t.Errorf("token %d after %d", tok, p)
					}
					n.Add(1)
					inside.Add(-1)
					if err := o.Unlock(); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d acquisitions, %d commands, overlaps %d", n.Load(), commands(t, c)-before, bad.Load())
	if bad.Load() != 0 {
		t.Fatal("overlap")
	}
	_ = context.Background
}
