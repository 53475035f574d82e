package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// A renewal that finds its tenure's key taken anew after an empty restart (a late copy of the
// tenure's own take; another process held the key in between) settles the acquisition, lets the
// key go, answers gone, and remembers the locker as removed (FORCED), as release.lua's same
// branch does: with that reply lost (a read timeout, the expander's bound), a copy of the
// renewal, a later Extend and the holder's release answer gone too — not settled, which the
// release reads as "let go by an earlier copy" (Unlock nil for a lock that was lost).
func TestReleaseAfterARenewalFoundTheKeyTakenAnewAnswersGone(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "advrenorigin")
		take := processor.LockRequest{Locker: a.locker(), Tokens: 1}
		r, err := a.Lock(ctx, lc, take)
		if err != nil || r.Outcome != processor.Taken {
			t.Fatalf("take = %+v, %v", r, err)
		}
		began := r.Origin
		wipeKeys(t, c, lc) // Redis restarts empty
		lb, rb := b.lock(t, lc, false, 1)
		if rb.Outcome != processor.Taken {
			t.Fatalf("pb- after the restart = %+v", rb)
		}
		if rel := b.release(t, lc, lb); rel.Outcome != processor.Released {
			t.Fatalf("pb- release = %+v", rel)
		}
		if again, err := a.Lock(ctx, lc, take); err != nil || again.Outcome != processor.Taken || again.Origin == began {
			t.Fatalf("the late copy of the take = %+v, %v; want taken anew", again, err)
		}
		// The tenure's renewal finds the key taken anew: Gone, the key let go. Its reply is lost.
		renew := processor.RenewRequest{Locker: take.Locker, Origin: began}
		if rn, err := a.ExpandLease(ctx, lc, renew); err != nil || rn.Outcome != processor.Gone {
			t.Fatalf("renewal = %+v, %v; want Gone", rn, err)
		}
		// The client sends the renewal again (its reply was lost): it must not read as settled.
		if rn, err := a.ExpandLease(ctx, lc, renew); err != nil || rn.Outcome != processor.Gone {
			t.Errorf("a copy of the renewal that answered Gone = %+v, %v; want Gone (Settled reads as a yield check's or release's earlier copy)", rn, err)
		}
		// The owner's Unlock: the release of the tenure, naming its origin.
		rel, err := a.Unlock(ctx, lc, processor.ReleaseRequest{Locker: take.Locker, Last: r.Token, Origin: began})
		if err != nil || rel.Outcome != processor.Gone {
			t.Fatalf("the tenure's release after its renewal found the key taken anew (reply lost) = %+v, %v; want Gone: Settled makes Unlock return nil for a lost lock", rel, err)
		}
	})
}

// A release of a holding that names its origin and finds the key gone, no release of it run
// (Redis lost it: an empty restart), answers gone and remembers the locker as removed: a copy of
// it (go-redis sends a script again after a read timeout; dlock retries a release whose answer
// was lost) answers gone too, not settled, which reads as a release that ran. The mutex's
// give-back (no origin: an acquisition whose outcome is unknown) leaves no such mark: its
// copies answer settled, and the few removed lockers kept are left for the holdings. The same
// for the read-write lock's and the semaphore's release, but their give-backs mark the locker
// too (their marks are not capped, and Close lets go of a downgrade's locker without its
// token: TestSharedReleaseWithoutOriginOfAHoldingAnEmptyRestartWipedAnswersGoneEveryCopy).
func TestRepeatedReleaseOfAHoldingRedisLostAnswersGone(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a := newProc(t, c, "pa-")
		for _, how := range []string{"a holding's release", "a give-back"} {
			lc := cfg(t, "lostrepeat")
			la, r := a.lock(t, lc, false, 1)
			if r.Outcome != processor.Taken {
				t.Fatalf("take = %+v", r)
			}
			wipeKeys(t, c, lc) // Redis restarts empty
			req := processor.ReleaseRequest{Locker: la, Last: r.Token, Origin: r.Origin}
			want := processor.Gone
			if how == "a give-back" {
				req, want = processor.ReleaseRequest{Locker: la}, processor.Settled
			}
			if rel, err := a.Unlock(ctx, lc, req); err != nil || rel.Outcome != processor.Gone {
				t.Fatalf("%s = %+v, %v; want gone", how, rel, err)
			}
			if rel, err := a.Unlock(ctx, lc, req); err != nil || rel.Outcome != want {
				t.Fatalf("a copy of %s = %+v, %v; want %v", how, rel, err, want)
			}
		}
		for _, s := range []processor.Shared{sem3, rw} { // (shared.lua)
			for _, how := range []string{"a shared holding's release", "a shared give-back"} {
				lc := cfg(t, "lostrepeat")
				la := a.locker()
				r := a.take(t, lc, s, la, 1, false)
				if r.Outcome != processor.Taken {
					t.Fatalf("%s take = %+v", s.Kind, r)
				}
				wipeKeys(t, c, lc)
				origin, want := r.Token, processor.Gone
				if how == "a shared give-back" {
					origin = 0
				}
				if rel, err := a.SharedReleaseOf(ctx, lc, s, la, origin, 0, 0); err != nil || rel.Outcome != processor.Gone {
					t.Fatalf("%s of %s = %+v, %v; want gone", how, s.Kind, rel, err)
				}
				if rel, err := a.SharedReleaseOf(ctx, lc, s, la, origin, 0, 0); err != nil || rel.Outcome != want {
					t.Fatalf("a copy of %s of %s = %+v, %v; want %v", how, s.Kind, rel, err, want)
				}
			}
		}
	})
}

// A mutex holding's take may have a late copy (go-redis sends a script again after a read
// timeout) that reaches Redis after an empty restart wiped the holding and another process took
// the key: refused, as a try that finds the key held or as a stale copy behind the process's
// newer attempt, it is the first request to settle the acquisition. The holder's release, and
// a copy of it, must answer gone, not settled, which Unlock reads as let go by an earlier copy:
// it would return nil for a lock another process held meanwhile. The read-write lock's and the
// semaphore's: TestSharedReleaseOfAHoldingWhoseLateTakeWasRefusedIsALoss.
func TestReleaseOfAHoldingWhoseLateTakeWasRefusedIsALoss(t *testing.T) {
	for _, way := range []string{"try that finds the key held", "stale copy"} {
		t.Run(way, func(t *testing.T) {
			backends(t, func(t *testing.T, c *redis.Client) {
				ctx := context.Background()
				lc := cfg(t, "refusedlate")
				a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
				take := processor.LockRequest{Locker: a.locker(), Tokens: 1}
				r, err := a.Lock(ctx, lc, take)
				if err != nil || r.Outcome != processor.Taken {
					t.Fatalf("pa-'s take = %+v, %v", r, err)
				}
				wipeKeys(t, c, lc) // Redis restarts empty
				if _, rb := b.lock(t, lc, false, 1); rb.Outcome != processor.Taken {
					t.Fatalf("pb- after the restart = %+v", rb)
				}
				if way == "stale copy" {
					if _, rn := a.lock(t, lc, true, 1); rn.Outcome != processor.Held {
						t.Fatalf("pa-'s newer attempt = %+v, want in line", rn)
					}
				}
				if late, err := a.Lock(ctx, lc, take); err != nil || late.Outcome == processor.Taken {
					t.Fatalf("the late copy of pa-'s take = %+v, %v; want refused", late, err)
				}
				rel := processor.ReleaseRequest{Locker: take.Locker, Last: r.Token, Origin: r.Origin}
				for _, copy := range []string{"pa-'s release (naming its origin)", "a copy of it"} {
					if got, err := a.Unlock(ctx, lc, rel); err != nil || got.Outcome != processor.Gone {
						t.Fatalf("%s of a holding an empty restart wiped, its take's late copy refused since = %+v, %v; want gone (settled reads as let go)", copy, got, err)
					}
				}
			})
		})
	}
}

// A holding Redis kept until its own release ran: its process's release of it went unanswered
// (retried: Unreleased), and the process asks again, in line behind its own holding (attempt
// N). A late copy of the holding's take arrives: stale (the process waits with N), it is
// refused and settled — but not remembered as removed (FORCED): the key still holds it. The
// release then runs (released, its reply lost); its retry must answer settled, not gone
// (tenure.go's giveBack reads gone as errLostBeforeRelease: a loss that did not happen).
func TestRefusedStaleCopyOfTheHoldersOwnTakeIsNoLoss(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "staleheld")
		a := newProc(t, c, "pa-")
		take := processor.LockRequest{Locker: a.locker(), Tokens: 1}
		r, err := a.Lock(ctx, lc, take)
		if err != nil || r.Outcome != processor.Taken {
			t.Fatalf("take = %+v, %v", r, err)
		}
		u := []processor.Unreleased{{Locker: take.Locker, Origin: r.Origin}}
		// the release R1 is on its way (it timed out; the library retries it), and a goroutine asks again
		n, err := a.Lock(ctx, lc, processor.LockRequest{Locker: a.locker(), Wait: true, Tokens: 1, Unreleased: u})
		if err != nil || n.Outcome != processor.Held {
			t.Fatalf("newer attempt = %+v, %v; want held (in line behind its own holding)", n, err)
		}
		// the late copy of the holding's take
		if late, err := a.Lock(ctx, lc, take); err != nil || late.Outcome != processor.Settled {
			t.Fatalf("the late copy of the take = %+v, %v; want refused as stale (settled)", late, err)
		}
		rel := processor.ReleaseRequest{Locker: take.Locker, Last: r.Token, Origin: r.Origin}
		first, err := a.Unlock(ctx, lc, rel) // R1 runs: the key held the locker until now
		if err != nil || first.Outcome != processor.Released {
			t.Fatalf("R1 = %+v, %v; want released", first, err)
		}
		rel.Unreleased = nil
		again, err := a.Unlock(ctx, lc, rel) // the retry, or go-redis's copy
		if err != nil || again.Outcome == processor.Gone {
			t.Fatalf("the retried release of a holding Redis kept until R1 = %+v, %v; want settled (Gone: ErrLockLost, a false loss)", again, err)
		}
	})
}

// The same for the read-write lock's and semaphore's script: shared.lua's renew that finds the
// holding taken anew under its locker settles it with its '|forced' mark, so that the holder's
// release, after that renewal's reply was lost, answers gone, not settled.
func TestSharedReleaseAfterARenewalFoundTheHoldingTakenAnewAnswersGone(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		lc := cfg(t, "advshrenorigin")
		sem1 := processor.Shared{Kind: processor.KindSem, Permits: 1}
		a, b := newProc(t, c, "A-"), newProc(t, c, "B-")
		la := a.locker()
		take := processor.TakeRequest{Locker: la, N: 1}
		first, err := a.SharedTake(ctx, lc, sem1, take)
		if err != nil || first.Outcome != processor.Taken {
			t.Fatalf("A's take: %+v, %v", first, err)
		}
		wipeKeys(t, c, lc) // Redis restarts empty
		lb := b.locker()
		if r := b.take(t, lc, sem1, lb, 1, false); r.Outcome != processor.Taken {
			t.Fatalf("B after the restart: %+v", r)
		}
		b.letGo(t, lc, sem1, lb)
		if r, err := a.SharedTake(ctx, lc, sem1, take); err != nil || r.Outcome != processor.Taken || r.Token == first.Token {
			t.Fatalf("the late copy of A's take: %+v, %v; want taken anew", r, err)
		}
		// A's renewal (naming its take's token) finds the holding taken anew: gone. Its reply is lost.
		if r, err := a.SharedRenewOf(ctx, lc, sem1, la, first.Token, 0); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("A's renewal = %+v, %v; want gone", r, err)
		}
		if r, err := a.SharedReleaseOf(ctx, lc, sem1, la, first.Token, 0, 0); err != nil || r.Outcome != processor.Gone {
			t.Fatalf("A's release after its renewal found the holding taken anew (reply lost) = %+v, %v; want gone (settled reads as let go: the owners are never told)", r, err)
		}
	})
}

// A grant keeps {K}:first (the holding's first token) for at least the grantee's lease, however
// short the releaser's lease (whose fencing counter's life a script writes it with): a grantee
// that did not hear its grant and finds the key its own by its next lock.lua is told the
// holding's origin, so that its tenure's renewals and release name it, and a late copy of that
// lock.lua taking the key anew after an empty restart (another process having held it in
// between) is found a loss by the tenure's next renewal.
func TestTakeOfAnUnheardGrantKeepsItsOrigin(t *testing.T) {
	c := srv.Client() // (a redis-server: {K}:first must expire in real time, which miniredis's clock does not)
	defer c.Close()
	u := grantUnheard(t, c, 2*time.Second)
	time.Sleep(150 * time.Millisecond) // pa- did not hear the grant; it asks again later
	r, err := u.a.Lock(context.Background(), u.long, u.take)
	if err != nil || r.Outcome != processor.Taken {
		t.Fatalf("pa-'s ask = %+v, %v; want the key its own", r, err)
	}
	if r.Origin != u.grant.Token {
		t.Errorf("pa-'s ask found the granted key its own with origin %d; want the grant's first token %d (0 turns off the restart check for the tenure)", r.Origin, u.grant.Token)
	}
	u.restartIsTold(t, c, r.Origin)
}

// An ask that finds the key granted to its own locker (lock.lua) lengthens {K}:first with the
// key: a grantee whose first such ask had its reply lost (go-redis sends it again after a read
// timeout, or the attempt asks again at its next poll) asks again after the first {K}:first
// would have expired, while the key, lengthened by the first ask, still holds its locker — and
// is still told the holding's origin, so that its tenure's restart check stays on. (The grant's
// lease is 4 s: the first ask comes 2 s before the grant runs out, the second just after the
// grant's {K}:first would have, by the server's clock, 2 s before the key the first ask
// lengthened does.)
func TestAskAfterAnUnansweredAskKeepsTheGrantsOrigin(t *testing.T) {
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	const lease = 4 * time.Second
	u := grantUnheard(t, c, lease)
	firstEnds := expiresAt(t, c, processor.FirstKey(u.long)) // the grant's {K}:first (and key) run out then
	time.Sleep(time.Until(firstEnds.Add(-lease / 2)))        // pa- did not hear the grant; it asks at its poll
	first, err := u.a.Lock(ctx, u.long, u.take)
	if err != nil || first.Outcome != processor.Taken || first.Origin != u.grant.Token {
		t.Fatalf("pa-'s first ask = %+v, %v; want taken with origin %d", first, err, u.grant.Token)
	}
	// That reply is lost; the request is sent again after {K}:first's life (the grantee's
	// lease from the grant) but within the key's, which the first ask lengthened.
	time.Sleep(time.Until(firstEnds.Add(10 * time.Millisecond)))
	r, err := u.a.Lock(ctx, u.long, u.take)
	if err != nil || r.Outcome != processor.Taken {
		t.Fatalf("pa-'s ask again = %+v, %v; want the key its own", r, err)
	}
	if r.Origin != u.grant.Token {
		t.Errorf("pa-'s second ask found the granted key its own with origin %d; want the grant's first token %d (0 turns off the restart check for the tenure)", r.Origin, u.grant.Token)
	}
	u.restartIsTold(t, c, r.Origin)
}

// unheardGrant is a grant to pa-, waiting in line with lease long, by pb-'s release with a
// 50 ms lease: pa- has not heard it, and finds the key its own by asking again (take).
type unheardGrant struct {
	a, x  *proc
	long  domain.DLockConfig
	take  processor.LockRequest
	grant processor.Result
}

func grantUnheard(t *testing.T, c *redis.Client, lease time.Duration) unheardGrant {
	t.Helper()
	a, b, x := newProc(t, c, "pa-"), newProc(t, c, "pb-"), newProc(t, c, "px-")
	target := fresh("first-" + t.Name())
	long, err := domain.NewDLockConfig("PROC", target, lease)
	if err != nil {
		t.Fatal(err)
	}
	short, err := domain.NewDLockConfig("PROC", target, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// pb- holds for seconds (a loaded machine's stall before pa- stands in line does not free
	// the key); its fencing counter lives as a 50 ms holding's would, and it releases with that
	// lease: the releaser's short lease is the point
	held, err := short.WithLease(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lb, rb := b.lock(t, held, false, 1)
	if rb.Outcome != processor.Taken {
		t.Fatalf("pb- = %+v", rb)
	}
	la := a.locker()
	if r := a.lockWith(t, long, la, true, 1); r.Outcome != processor.Held {
		t.Fatalf("pa- = %+v, want in line", r)
	}
	if err := c.PExpire(context.Background(), processor.FenceKey(short), processor.FenceTTL(short)).Err(); err != nil {
		t.Fatal(err)
	}
	g := b.release(t, short, lb)
	if g.Next != la {
		t.Fatalf("pb-'s release = %+v, want granted to %s", g, la)
	}
	return unheardGrant{a: a, x: x, long: long, take: processor.LockRequest{Locker: la, Wait: true, Tokens: 1}, grant: g}
}

// restartIsTold checks the consequence: after an empty restart, another process's holding and
// a late copy of the ask that takes the key anew, the tenure's renewal naming origin answers gone.
func (u unheardGrant) restartIsTold(t *testing.T, c *redis.Client, origin uint64) {
	t.Helper()
	ctx := context.Background()
	wipeKeys(t, c, u.long)
	lx, rx := u.x.lock(t, u.long, false, 1)
	if rx.Outcome != processor.Taken {
		t.Fatalf("px- after the restart = %+v", rx)
	}
	u.x.release(t, u.long, lx)
	if again, err := u.a.Lock(ctx, u.long, u.take); err != nil || again.Outcome != processor.Taken {
		t.Fatalf("late copy = %+v, %v", again, err)
	}
	if rn, err := u.a.ExpandLease(ctx, u.long, processor.RenewRequest{Locker: u.take.Locker, Origin: origin}); err != nil || rn.Outcome != processor.Gone {
		t.Fatalf("the tenure's renewal after its key was wiped, held by px- and taken anew = %+v, %v; want Gone", rn, err)
	}
}

// A locker found taken anew is remembered as removed (FORCED) for as long as its owner's
// settled mark lives, not only for the request's own mark life: a mark that an earlier request
// of the owner set for longer (another handle of the key, with a longer lease) keeps the
// acquisition settled that long, and its release must answer gone for as long.
func TestRemovedLockerIsRememberedAsLongAsItsSettledMark(t *testing.T) {
	backends(t, func(t *testing.T, c *redis.Client) {
		ctx := context.Background()
		a, b := newProc(t, c, "pa-"), newProc(t, c, "pb-")
		lc := cfg(t, "forcedlife")
		long, err := lc.WithLease(10 * time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		given := a.locker() // given back below, by a handle of the same owner with the long lease
		take := processor.LockRequest{Locker: a.locker(), Tokens: 1}
		r, err := a.Lock(ctx, lc, take)
		if err != nil || r.Outcome != processor.Taken {
			t.Fatalf("take = %+v, %v", r, err)
		}
		wipeKeys(t, c, lc) // Redis restarts empty
		lb, _ := b.lock(t, lc, false, 1)
		b.release(t, lc, lb)
		longHandle := newProc(t, c, "pa-") // (a processor of its own: its mark life follows its own leases)
		if _, err := longHandle.Unlock(ctx, long, processor.ReleaseRequest{Locker: given}); err != nil {
			t.Fatal(err)
		}
		if again, err := a.Lock(ctx, lc, take); err != nil || again.Outcome != processor.Taken {
			t.Fatalf("the late copy of the take = %+v, %v; want taken anew", again, err)
		}
		if rn, err := a.ExpandLease(ctx, lc, processor.RenewRequest{Locker: take.Locker, Origin: r.Origin}); err != nil || rn.Outcome != processor.Gone {
			t.Fatalf("renewal = %+v, %v; want Gone", rn, err)
		}
		done := c.PTTL(ctx, processor.DoneKey(lc, "pa-")).Val()
		forced := c.PTTL(ctx, processor.ForcedKey(lc, "pa-")).Val()
		if done < 10*time.Minute || forced < done-time.Minute {
			t.Fatalf("the settled mark lives %v, the removed locker's %v: want as long", done, forced)
		}
	})
}
