package deploy_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/internal/redistest"
)

// After kill -9 of a master, a ClusterClient left to itself learns the new owner of the slot
// only from its periodic reload of the slot map (ClusterStateReloadInterval, 60 s by default):
// the dead node sends no MOVED, and connection errors do not trigger a reload. The library asks
// for a reload after every failed request, so no client option is needed. Three Generators
// wait for a key of the killed master: over a ClusterClient reloading every second, over a
// ClusterClient with go-redis's defaults, and over redis.NewUniversalClient (whose options have
// no such field). Each must acquire within seconds of the failover.
func TestClusterStateReloadInterval(t *testing.T) {
	t.Parallel() // on a cluster of its own; mostly waiting
	c := redistest.NeedCluster(t, 3, 1)
	const lease = 2 * time.Second
	target := unique("reload")
	key := lockKey("RELOAD", target)
	waiters := []struct {
		name   string
		client redis.UniversalClient
	}{
		{"reload-1s", c.Client(clusterOptions)},
		{"reload-default", c.Client()},
		{"universal", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: c.Addrs()})},
	}
	holder, err := generatorOn(t, c.Client(clusterOptions), lease).Gen("RELOAD", target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*bound)
	defer cancel()
	owned, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	led := newLedger(t)
	token, _ := holder.FencingToken(owned)
	hHolder := led.enter(key, len(waiters), "holder", owned, token, true)

	watch := 6 * time.Second
	if soaking() {
		watch = 90 * time.Second
	}
	var failedOver time.Time
	var mu sync.Mutex // guards failedOver
	acquired := make([]time.Duration, len(waiters))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, w := range waiters {
		lock, err := generatorOn(t, w.client, lease).Gen("RELOAD", target)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, 3*bound+watch)
			defer cancel()
			go func() {
				<-start
				mu.Lock()
				deadline := failedOver.Add(watch)
				mu.Unlock()
				select {
				case <-time.After(time.Until(deadline)):
					cancel()
				case <-lctx.Done():
				}
			}()
			owned, err := lock.Lock(lctx)
			if err != nil {
				if !errors.Is(err, dlock.ErrNotObtained) {
					t.Errorf("%s: Lock: %v", w.name, err)
				}
				return
			}
			mu.Lock()
			acquired[i] = time.Since(failedOver)
			mu.Unlock()
			tok, ok := lock.FencingToken(owned)
			h := led.enter(key, i, w.name, owned, tok, ok)
			time.Sleep(10 * time.Millisecond)
			led.leave(h)
			if err := lock.Unlock(owned); err != nil && !errors.Is(err, dlock.ErrLockLost) {
				t.Logf("%s: Unlock: %v", w.name, err)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the waiters wait
	if err := c.SyncReplicas(key, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := c.KillMaster(key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFailover(key, bound); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	failedOver = time.Now()
	mu.Unlock()
	close(start)
	figure(t, "reload_kill_to_failover_visible", round1(failedOver.Sub(t0)))
	led.leave(hHolder)
	if err := holder.Unlock(owned); err != nil {
		t.Logf("holder: Unlock after the failover: %v", err)
	}
	wg.Wait()
	for i, w := range waiters {
		if acquired[i] == 0 {
			figure(t, "reload_"+w.name+"_failover_to_acquire", "none within "+watch.String())
			t.Errorf("%s: no acquisition within %v of the failover", w.name, watch)
			continue
		}
		figure(t, "reload_"+w.name+"_failover_to_acquire", round1(acquired[i]))
	}
}
