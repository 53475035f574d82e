package promobs_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/observe/promobs"
)

func Example() {
	m, _ := miniredis.Run() // any Redis will do; miniredis keeps the example self-contained
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()

	obs, err := promobs.New(promobs.Options{})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry() // in a service: prometheus.MustRegister(obs), served by promhttp
	reg.MustRegister(obs)
	gen, err := dlock.NewGenerator(client, dlock.WithObserver(obs),
		dlock.WithLeases(map[string]time.Duration{"ORDER": 30 * time.Second}))
	if err != nil {
		panic(err)
	}
	defer gen.Close(context.Background())

	lock, err := gen.Gen("ORDER", "42")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = lock.Do(ctx, func(owned context.Context) error { return nil })
	if err != nil {
		panic(err)
	}

	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP dlock_acquisitions_total Acquisitions of locks, re-entries excluded.
# TYPE dlock_acquisitions_total counter
dlock_acquisitions_total{how="attempt",type="ORDER"} 1
dlock_acquisitions_total{how="barge",type="ORDER"} 0
dlock_acquisitions_total{how="hand-over",type="ORDER"} 0
dlock_acquisitions_total{how="notified",type="ORDER"} 0
dlock_acquisitions_total{how="polled",type="ORDER"} 0
dlock_acquisitions_total{how="retry",type="ORDER"} 0
`), "dlock_acquisitions_total")
	fmt.Println("acquisitions as expected:", err == nil)
	// ORDER's first acquisition made its counters of losses, renewal failures and failures to
	// acquire (one per reason), at 0, so that alerts on their rate see the first one.
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP dlock_not_obtained_total Lock calls that gave up (deadline, cancellation, Close) and Lock or TryLock calls that failed in Redis.
# TYPE dlock_not_obtained_total counter
dlock_not_obtained_total{reason="canceled",type="ORDER"} 0
dlock_not_obtained_total{reason="closed",type="ORDER"} 0
dlock_not_obtained_total{reason="redis",type="ORDER"} 0
dlock_not_obtained_total{reason="timeout",type="ORDER"} 0
`), "dlock_not_obtained_total")
	fmt.Println("failures to acquire as expected:", err == nil)
	fmt.Println("series of losses:", testutil.CollectAndCount(obs, "dlock_losses_total"))
	// Output:
	// acquisitions as expected: true
	// failures to acquire as expected: true
	// series of losses: 1
}
