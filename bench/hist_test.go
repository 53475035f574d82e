package main

import (
	"math"
	"testing"
)

// TestHistQuantile: quantiles come back within the histogram's 1% resolution, after a round
// trip through the sparse form that workers print, and an empty histogram gives 0.
func TestHistQuantile(t *testing.T) {
	a, b := newHist(), newHist()
	for i := int64(1); i <= 1000; i++ { // 1..1000 µs, split over two "workers"
		h := a
		if i%2 == 0 {
			h = b
		}
		h.add(i * 1000)
	}
	m := newHist()
	m.addSparse(a.sparse())
	m.addSparse(b.sparse())
	for _, c := range []struct{ p, want float64 }{{0.5, 500}, {0.99, 990}, {1, 1000}} {
		if got := m.quantile(c.p); math.Abs(got-c.want)/c.want > 0.011 {
			t.Errorf("p%v = %.1f µs, want %v ± 1%%", c.p*100, got, c.want)
		}
	}
	if got := newHist().quantile(0.99); got != 0 {
		t.Errorf("empty p99 = %v", got)
	}
	h := newHist()
	h.add(0)
	h.add(math.MaxInt64)
	if h[0] != 1 || h[histBuckets-1] != 1 {
		t.Error("extreme values not clamped into the first and last buckets")
	}
}
