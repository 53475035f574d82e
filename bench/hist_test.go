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

// A read-write lock's holds breach it when a write overlaps any hold; reads may overlap each
// other. A semaphore's, when more than k are on at once.
func TestFamilyOverlaps(t *testing.T) {
	rw := []workerResult{
		{SharedHolds: []int64{0, 10, 5, 15}, Holds: []int64{20, 30}}, // reads together, then a write
		{SharedHolds: []int64{25, 26}, Holds: []int64{29, 40}},       // a read in the write; a write in the write
	}
	if n := overlapsRW(rw); n != 2 {
		t.Fatalf("overlapsRW = %d, want 2", n)
	}
	if n := overlapsRW(rw[:1]); n != 0 {
		t.Fatalf("overlapsRW of proper holds = %d", n)
	}
	sem := []workerResult{{Holds: []int64{0, 10, 1, 10, 2, 10}}, {Holds: []int64{3, 5, 10, 12}}}
	if n := overlapsK(sem, 3); n != 1 {
		t.Fatalf("overlapsK(3) = %d, want 1 (the fourth at 3)", n)
	}
	if n := overlapsK(sem, 4); n != 0 {
		t.Fatalf("overlapsK(4) = %d, want 0 (a hold that starts as another ends is not beside it)", n)
	}
}
