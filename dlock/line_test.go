package dlock

import (
	"testing"
	"time"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// A waiting process asks again at the pace its last answer sets: a sixth of the lease unless
// Redis heard it listen (or Java processes share the key, or its place is unknown), or as soon
// as the key it saw held may have expired; first in
// line, half the lease, or as soon as the key it saw held may have expired; second, a third of
// its entry's life, or as soon as that key may have expired (the first may have died with the
// holder); further back, the same (all before it may have died with the holder), but not
// sooner than backPace after its last answer.
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
		{"not heard, the holder's key may expire sooner", line{rank: 0, heard: false, holderUntil: soon}, false, soon},
		{"not heard, further back, the holder's key may expire sooner", line{rank: 2, heard: false, holderUntil: soon}, false, waited.Add(lease / 6)},
		{"place unknown", line{rank: -1, heard: true}, false, waited.Add(lease / 6)},
		{"Java processes beside", line{rank: 0, heard: true}, true, waited.Add(lease / 6)},
		{"first", line{rank: 0, heard: true, holderUntil: late}, false, waited.Add(lease / 2)},
		{"first, the holder's key may expire sooner", line{rank: 0, heard: true, holderUntil: soon}, false, soon},
		{"first, told so after its answer", line{rank: 0, heard: true, holderUntil: late, firstAt: waited.Add(100 * time.Millisecond)}, false, waited.Add(100*time.Millisecond + lease/2)},
		{"first, told so long after its answer", line{rank: 0, heard: true, holderUntil: late, firstAt: waited.Add(time.Second)}, false, waited.Add(entryTTL / 3)},
		{"first, told so before its answer", line{rank: 0, heard: true, holderUntil: late, firstAt: waited.Add(-time.Second)}, false, waited.Add(lease / 2)},
		{"second", line{rank: 1, heard: true, holderUntil: late}, false, waited.Add(entryTTL / 3)},
		{"second, the holder's key may expire sooner", line{rank: 1, heard: true, holderUntil: soon}, false, soon},
		{"second, the holder's expiry unknown", line{rank: 1, heard: true}, false, waited.Add(entryTTL / 3)},
		{"further back", line{rank: 2, heard: true, holderUntil: late}, false, waited.Add(entryTTL / 3)},
		{"further back, the holder's key may expire sooner", line{rank: 2, heard: true, holderUntil: soon}, false, waited.Add(backPace)},
	} {
		c.l.waited = waited
		if got := c.l.askBy(lease, entryTTL, c.foreign); !got.Equal(c.want) {
			t.Errorf("%s: asks at +%v, want +%v", c.name, got.Sub(waited), c.want.Sub(waited))
		}
	}
	// Told it is first, a process whose entry lives no longer than its lease (a lease of 3 s)
	// asks no sooner than half the lease after its answer, as before it was told: a third of
	// its entry's life is sooner than that.
	l := line{rank: 0, heard: true, waited: waited, firstAt: waited.Add(100 * time.Millisecond), holderUntil: late}
	if got := l.askBy(3*time.Second, 3*time.Second, false); !got.Equal(waited.Add(1500 * time.Millisecond)) {
		t.Errorf("first, a 3 s lease, told so after its answer: asks at +%v, want +1.5s", got.Sub(waited))
	}
	// A long lease of its own (an entry of 2 minutes) does not hold a process further back
	// past the holder's expiry, nor the second, nor (as late as backPace) the first.
	for rank := 0; rank < 3; rank++ {
		l := line{rank: rank, heard: true, holderUntil: waited.Add(time.Second), waited: waited}
		if got := l.askBy(2*time.Minute, 2*time.Minute, false); !got.Equal(waited.Add(time.Second)) {
			t.Errorf("rank %d, a 2-minute lease, the holder's key expiring in 1s: asks at +%v, want +1s", rank, got.Sub(waited))
		}
	}
}

// The first in line asks again once the key it found held could have expired, counted from
// the answer's arrival (Redis ran the request before it; counting from the send could ask just
// before the expiry and find the key held still), and at once when the key had under a
// millisecond to live.
func TestAskPaceFollowsTheHoldersExpiry(t *testing.T) {
	const lease, entryTTL = 6 * time.Second, 6 * time.Second
	sent := time.Now().Add(-50 * time.Millisecond) // the request went out 50 ms ago
	var l line
	l.forget()
	l.waiting(sent, 1, &processor.Sighting{Holder: "h1", Life: 0, Rank: 0, Heard: true}, hearing{on: true})
	if by := l.askBy(lease, entryTTL, false); !by.Before(sent.Add(lease / 2)) {
		t.Fatalf("a key expiring now: asks at +%v after the send, want before half the lease", by.Sub(sent))
	}
	arrived := time.Now()
	l.waiting(sent.Add(time.Millisecond), 1, &processor.Sighting{Holder: "h1", Life: 100 * time.Millisecond, Rank: 0, Heard: true}, hearing{on: true})
	if by := l.askBy(lease, entryTTL, false); by.Before(arrived.Add(100 * time.Millisecond)) {
		t.Fatalf("asks %v after the answer came, before the key it saw could have expired (100 ms)", by.Sub(arrived))
	}
}

// Told that it is first, with the life of the key just granted to the process before it, a
// process whose last answer is older than its pace as first, and than the holder that answer
// saw, asks again only once that grant may have expired or half its lease after the message
// (keeping its entry alive): not at once. Told that the key is free, it asks at once; told
// nothing of the key's life, it keeps what its answer saw.
func TestAskPaceAfterToldFirst(t *testing.T) {
	const lease, entryTTL = 600 * time.Millisecond, 2 * time.Second
	waited := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	told := waited.Add(400 * time.Millisecond) // (a cycle of the line longer than half the lease)
	for _, c := range []struct {
		name string
		life time.Duration
		want time.Time
	}{
		{"the lease just granted", lease, waited.Add(entryTTL / 3)}, // (told + lease/2 is later: the entry's pace)
		{"a grant of 100 ms", 100 * time.Millisecond, told.Add(100 * time.Millisecond)},
		{"the key free", 0, told.Add(time.Millisecond)},
		{"not told", -1, waited.Add(10 * time.Millisecond)}, // (its answer's holder: expired)
	} {
		l := line{waited: waited, rank: 1, heard: true, holderUntil: waited.Add(10 * time.Millisecond)}
		l.toldFirst(told, c.life)
		if got := l.askBy(lease, entryTTL, false); !got.Equal(c.want) {
			t.Errorf("%s: asks at +%v after its answer, want +%v", c.name, got.Sub(waited), c.want.Sub(waited))
		}
	}
}

// A grant is counted from the last request that showed the process waiting plus the time
// Redis's clock ran from that request (no earlier than the clock or counter its answer
// carried) to the grant, less 1 %: usable although that request went out more than half a
// lease ago. Without that time (the form told to a releaser's process, or a version before
// it), or with one longer than had passed here when the message came (Redis's clock ran fast,
// or the readings came from two servers), it is counted from the request alone; a grant at or
// below what the answer saw came before the request, and is not counted.
func TestGrantCountsRedisTimeFromTheRequest(t *testing.T) {
	cfg, err := domain.NewDLockConfig("AT", "1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := &attempt{locker: "p-1", cfg: cfg, tokens: 1}
	var l line
	l.forget()
	sent := time.Now().Add(-600 * time.Millisecond)
	const seen = 1_700_000_000_000_000 // µs: what the answer carried
	l.waiting(sent, seen, &processor.Sighting{Holder: "h-1", Rank: 0, Heard: true}, hearing{on: true})
	heard := time.Now()
	after := 550 * time.Millisecond // Redis's clock from the request to the grant
	at := seen + uint64(after.Microseconds())
	g := grant{locker: a.locker, token: at + 1, at: at, heard: heard}
	if want := sent.Add(after - after/100); !l.grantStart(a, g).Equal(want) {
		t.Fatalf("counted from +%v after the request, want +%v", l.grantStart(a, g).Sub(sent), want.Sub(sent))
	}
	if !l.grantUsable(a, g) {
		t.Fatal("a grant 550 ms after the request by Redis's clock, heard 600 ms after it: not usable")
	}
	for _, c := range []struct {
		name string
		g    grant
	}{
		{"no time", grant{locker: a.locker, token: at + 1, heard: heard}},
		{"a time further than has passed", grant{locker: a.locker, token: at + 1, at: seen + 700_000, heard: heard}},
		{"a time further than had passed when the message came", grant{locker: a.locker, token: at + 1, at: at, heard: sent.Add(500 * time.Millisecond)}},
		{"a grant before the request", grant{locker: a.locker, token: seen, at: at, heard: heard}},
	} {
		if l.grantUsable(a, c.g) {
			t.Errorf("%s: usable, want counted from the request (less than half the lease left) or not at all", c.name)
		}
	}
}

// What the process says in its requests that stand it in line (hearing): it counts itself
// heard from its subscription's confirmation, or an answer that Redis heard it, until the
// subscription fails or an answer to a request that said so tells it that Redis does not. An
// answer to a request that did not say so (sent before the confirmation), or that was sent
// before the subscription last failed or was confirmed, tells nothing of the subscription now.
func TestLineHearingFollowsItsSubscriptionAndTheAnswersToItsClaims(t *testing.T) {
	var l line
	l.forget()
	sent := time.Now()
	answer := func(claim hearing, heard bool) {
		sent = sent.Add(time.Millisecond)
		l.waiting(sent, 1, &processor.Sighting{Holder: "h1", Rank: 0, Heard: heard}, claim)
	}
	early := l.hearing // sent before the subscription was confirmed: claims nothing
	l.hearing.subscribed()
	answer(early, false)
	if !l.hearing.on {
		t.Fatal("an answer to a request sent before the confirmation ended the claim")
	}
	answer(l.hearing, false)
	if l.hearing.on {
		t.Fatal("an answer that Redis does not hear the process, to a request that claimed, left the claim on")
	}
	answer(l.hearing, true)
	if !l.hearing.on {
		t.Fatal("an answer that Redis heard the process did not turn the claim on")
	}

	// A claimed request runs after the subscription dropped, and its answer comes after the
	// subscription was confirmed again.
	dropped := l.hearing
	l.hearing.failed()
	l.hearing.subscribed()
	answer(dropped, false)
	if !l.hearing.on {
		t.Fatal("an answer to a request sent before the subscription failed and was confirmed again ended the claim")
	}
	// A request ran before the subscription dropped, and its answer comes after the failure.
	before := l.hearing
	l.hearing.failed()
	answer(before, true)
	if l.hearing.on {
		t.Fatal("an answer to a request sent before the subscription failed turned the claim on again")
	}

	// A claimed request runs after Redis dropped the subscription unnoticed, and its answer
	// comes after the subscription was made again with no failure seen (the probe found it
	// deaf, or its slot moved).
	l.hearing.subscribed()
	replaced := l.hearing
	l.hearing.subscribed()
	answer(replaced, false)
	if !l.hearing.on {
		t.Fatal("an answer to a request sent before the subscription was made again (no failure seen) ended the claim")
	}
	// An answer that Redis does not hear the process, to a request that claimed nothing, ends
	// no claim made since in the same generation.
	l.hearing.failed()
	unclaimed := l.hearing
	answer(unclaimed, true)
	answer(unclaimed, false)
	if !l.hearing.on {
		t.Fatal("an answer to a request that claimed nothing ended the claim")
	}

	l.hearing.subscribed()
	l.forget()
	if !l.hearing.on {
		t.Fatal("a new attempt forgot that the process listens (the subscription is the key's, not the attempt's)")
	}
}

// A leave or give-back that failed before it was sent waits for the requests whose callers
// left them running (lateRequests.ended) before it tries again: the channel it waits on is
// closed once none runs — already when none runs as it looks, so that a request that ended
// between its check (nothingSent) and its wait wakes it, rather than a tenth of the lease.
func TestLateRequestsEnded(t *testing.T) {
	var l lateRequests
	if !isClosed(l.ended()) {
		t.Fatal("with no late request, ended is not closed")
	}
	l.add()
	l.add()
	ch := l.ended()
	l.done()
	if isClosed(ch) || isClosed(l.ended()) {
		t.Fatal("ended is closed while a late request runs")
	}
	l.done()
	if !isClosed(ch) || !isClosed(l.ended()) {
		t.Fatal("ended is not closed once the last late request ended")
	}
	l.add()
	if isClosed(l.ended()) {
		t.Fatal("ended is closed while a new late request runs")
	}
}
