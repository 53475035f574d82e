package otelobs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/observe/otelobs"
)

func Example() {
	m, _ := miniredis.Run() // any Redis will do; miniredis keeps the example self-contained
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()

	// In a service, leave the providers out to use the global ones (otel.SetMeterProvider).
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	obs, err := otelobs.New(otelobs.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	if err != nil {
		panic(err)
	}
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
	owned, err := obs.Lock(ctx, lock) // lock.Lock(ctx) in a span "dlock.Lock"
	if err != nil {
		panic(err)
	}
	lock.Unlock(owned)

	for _, s := range spans.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == otelobs.AttrKey || kv.Key == otelobs.AttrHow {
				fmt.Printf("span %s: %s=%s\n", s.Name(), kv.Key, kv.Value.Emit())
			}
		}
	}
	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, dp := range sum.DataPoints {
				if dp.Value == 0 { // ORDER's other counters, made at 0 by its first event
					continue
				}
				how, _ := dp.Attributes.Value(otelobs.LabelHow)
				fmt.Printf("%s{how=%s} %d\n", m.Name, how.Emit(), dp.Value)
			}
		}
	}
	// Output:
	// span dlock.Lock: dlock.key=DLOCK_ORDER_42
	// span dlock.Lock: dlock.how=attempt
	// dlock.acquisitions{how=attempt} 1
}
