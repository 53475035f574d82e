package promobs_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/observe/promobs"
)

// promNames lists the metrics: name, type, labels. The same list is in
// ../otelobs/prometheus_test.go, which checks that OpenTelemetry's Prometheus exporter gives
// otelobs' metrics these names, and in docs/observability.md.
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

// TestPrometheusNames: the metrics have the names and labels otelobs' have in Prometheus, and
// the default buckets.
func TestPrometheusNames(t *testing.T) {
	o, err := promobs.New(promobs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(o)
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
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
			if h := m.GetHistogram(); h != nil {
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				want := promobs.DefaultWaitBuckets()
				if mf.GetName() == "dlock_hold_seconds" {
					want = promobs.DefaultHoldBuckets()
				}
				if !slices.Equal(bounds, want) {
					t.Errorf("%s: buckets %v, want %v", mf.GetName(), bounds, want)
				}
			}
		}
		got = append(got, mf.GetName()+" "+strings.ToLower(mf.GetType().String())+" "+
			strings.Join(slices.Sorted(maps.Keys(labels)), ","))
	}
	slices.Sort(got)
	if want := strings.TrimSpace(promNames); strings.Join(got, "\n") != want {
		t.Errorf("Prometheus sees\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
}
