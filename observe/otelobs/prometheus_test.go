package otelobs_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/observe/otelobs"
)

// promNames lists the metrics as Prometheus sees them: name, type, labels. The same list is in
// ../promobs/prometheus_test.go and in docs/observability.md: both adapters export the same.
const promNames = `
dlock_acquisitions_total counter how,type
dlock_hold_seconds histogram type
dlock_losses_total counter type
dlock_not_obtained_total counter reason,type
dlock_not_obtained_wait_seconds histogram reason,type
dlock_redis_errors_total counter op
dlock_renewal_failures_total counter type
dlock_wait_seconds histogram how,type
`

// TestPrometheusNames: through the OpenTelemetry Prometheus exporter, with its defaults, the
// metrics have the names and labels promobs exports, and the default buckets.
func TestPrometheusNames(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())
	o, err := otelobs.New(otelobs.Options{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := domain.NewDLockConfig("ORDER", "x", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("injected")
	// One event of each kind, made by hand.
	o.Acquired(dlock.AcquireEvent{Config: cfg, Wait: time.Millisecond, How: dlock.HowAttempt, Token: 1})
	o.NotObtained(dlock.NotObtainedEvent{Config: cfg, Wait: time.Second, Reason: dlock.ReasonTimeout, Err: failed})
	o.Released(dlock.ReleaseEvent{Config: cfg, Token: 1, Held: time.Second})
	o.Lost(dlock.LossEvent{Config: cfg, Token: 2, Held: time.Second, Cause: dlock.ErrLockLost})
	o.RenewalFailed(dlock.RenewalEvent{Config: cfg, Err: failed})
	o.RedisError(dlock.RedisErrorEvent{Op: "renew", Key: cfg.UniqueKey(), Err: failed})

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	scope := map[string]string{} // the exporter's labels, as docs/observability.md names them
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if strings.HasPrefix(lp.GetName(), "otel_scope_") {
					scope[lp.GetName()] = lp.GetValue()
				} else {
					labels[lp.GetName()] = true
				}
			}
			if h := m.GetHistogram(); h != nil {
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				want := otelobs.DefaultWaitBuckets()
				if mf.GetName() == "dlock_hold_seconds" {
					want = otelobs.DefaultHoldBuckets()
				}
				if !slices.Equal(bounds, want) {
					t.Errorf("%s: buckets %v, want %v", mf.GetName(), bounds, want)
				}
			}
		}
		got = append(got, mf.GetName()+" "+strings.ToLower(mf.GetType().String())+" "+
			strings.Join(slices.Sorted(maps.Keys(labels)), ","))
	}
	if want := map[string]string{"otel_scope_name": otelobs.ScopeName, "otel_scope_version": "",
		"otel_scope_schema_url": ""}; !maps.Equal(scope, want) {
		t.Errorf("scope labels %v, want %v", scope, want)
	}
	slices.Sort(got)
	if want := strings.TrimSpace(promNames); strings.Join(got, "\n") != want {
		t.Errorf("Prometheus sees\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
}

// A lock type that is not valid UTF-8 (dlock accepts any bytes but white space and control
// characters) is exported with its invalid bytes replaced by U+FFFD: the Prometheus exporter
// refuses a label value that is not UTF-8, and a Gather that meets one fails, so that the
// whole scrape answered an error.
func TestPrometheusTypeNotUTF8(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())
	o, err := otelobs.New(otelobs.Options{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := domain.NewDLockConfig("ORDER\xff", "x", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o.Acquired(dlock.AcquireEvent{Config: cfg, Wait: time.Millisecond, How: dlock.HowAttempt, Token: 1})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var types []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "type" && !slices.Contains(types, lp.GetValue()) {
					types = append(types, lp.GetValue())
				}
			}
		}
	}
	if want := []string{"ORDER\uFFFD"}; !slices.Equal(types, want) {
		t.Errorf("type labels %q, want %q", types, want)
	}
}
