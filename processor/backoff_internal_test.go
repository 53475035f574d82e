package processor

import (
	"testing"
	"time"
)

// The pause between tries stays within go-redis's bounds for every option, none, negative or
// the wrong way round included (a panic here would end a request).
func TestBackoffStaysWithinTheClientsBounds(t *testing.T) {
	for _, b := range [][2]time.Duration{{0, 0}, {-1, -1}, {10 * time.Millisecond, 0}, {10 * time.Millisecond, time.Second},
		{time.Second, 10 * time.Millisecond}, {time.Millisecond, time.Millisecond}, {1, 1 << 62}} {
		lo, hi := b[0], b[1]
		for n := 1; n < 70; n++ {
			d := backoff(n, lo, hi)
			if d < 0 || lo > 0 && hi > 0 && (d > hi || d < min(lo, hi)) || (lo <= 0 || hi <= 0) && d != 0 {
				t.Fatalf("backoff(%d, %v, %v) = %v", n, lo, hi, d)
			}
		}
	}
}
