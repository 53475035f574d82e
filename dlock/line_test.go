package dlock

import (
	"testing"
	"time"
)

// A waiting process asks again at the pace its last answer sets: a sixth of the lease unless
// Redis heard it listen (or Java processes share the key, or its place is unknown); first in
// line, a third of the lease, or as soon as the key it saw held may have expired; further
// back, a third of its entry's life.
func TestAskPace(t *testing.T) {
	const lease, entryTTL = 600 * time.Millisecond, 2 * time.Second
	waited := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	soon, late := waited.Add(50*time.Millisecond), waited.Add(time.Hour)
	for _, c := range []struct {
		name    string
		l       line
		foreign bool
		want    time.Time
	}{
		{"not heard", line{rank: 0, heard: false}, false, waited.Add(lease / 6)},
		{"place unknown", line{rank: -1, heard: true}, false, waited.Add(lease / 6)},
		{"Java processes beside", line{rank: 0, heard: true}, true, waited.Add(lease / 6)},
		{"first", line{rank: 0, heard: true, holderUntil: late}, false, waited.Add(lease / 3)},
		{"first, the holder's key may expire sooner", line{rank: 0, heard: true, holderUntil: soon}, false, soon},
		{"further back", line{rank: 2, heard: true, holderUntil: soon}, false, waited.Add(entryTTL / 3)},
	} {
		c.l.waited = waited
		if got := c.l.askBy(lease, entryTTL, c.foreign); !got.Equal(c.want) {
			t.Errorf("%s: asks at +%v, want +%v", c.name, got.Sub(waited), c.want.Sub(waited))
		}
	}
}
