package main

import "math"

// A hist is a log-scale histogram of durations with about 1% resolution: bucket i holds
// the values from histBase^i to histBase^(i+1) nanoseconds. It is a fixed size whatever the
// number of samples, so a worker keeps one per goroutine and the parent merges them.
type hist []int64

const (
	histBase = 1.01
	// histBuckets reaches histBase^histBuckets ns, about 1000 s; longer values land in the
	// last bucket.
	histBuckets = 2800
)

var lnHistBase = math.Log(histBase)

func newHist() hist { return make(hist, histBuckets) }

// add records one duration of ns nanoseconds.
func (h hist) add(ns int64) {
	i := 0
	if ns > 1 {
		i = int(math.Log(float64(ns)) / lnHistBase)
	}
	h[min(i, histBuckets-1)]++
}

// merge adds o's counts to h.
func (h hist) merge(o hist) {
	for i, n := range o {
		h[i] += n
	}
}

// sparse returns the non-empty buckets as (index, count) pairs, for the worker's JSON line.
func (h hist) sparse() [][2]int64 {
	var out [][2]int64
	for i, n := range h {
		if n > 0 {
			out = append(out, [2]int64{int64(i), n})
		}
	}
	return out
}

// addSparse adds (index, count) pairs made by sparse; indices out of range are ignored.
func (h hist) addSparse(pairs [][2]int64) {
	for _, p := range pairs {
		if p[0] >= 0 && p[0] < int64(len(h)) {
			h[p[0]] += p[1]
		}
	}
}

// quantile returns the p-quantile (nearest rank) in microseconds, as the geometric middle of
// its bucket; 0 if h is empty.
func (h hist) quantile(p float64) float64 {
	var total int64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := max(int64(math.Ceil(p*float64(total))), 1)
	var seen int64
	for i, n := range h {
		if seen += n; seen >= rank {
			return math.Pow(histBase, float64(i)+0.5) / 1e3
		}
	}
	return 0 // not reached
}
