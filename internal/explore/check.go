package explore

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// The invariants of docs/design.md, as the explorer checks them after every step. Each rule
// has a name that a Violation carries.
const (
	ruleExclusion = "exclusion"         // a process believes it holds a key that holds another, outside a documented window
	ruleMargin    = "drift allowance"   // a holder believes past what Redis keeps minus the drift allowance
	ruleFencing   = "fencing"           // a token not above every earlier one
	ruleRevived   = "revived"           // a settled or removed acquisition holds the key again
	ruleLine      = "line"              // a process without a waiter stands in line after it left, or an entry waits with an acquisition that ended
	ruleSetting   = "lease setting"     // the tenure renews with another lease than its newest setting
	ruleTold      = "told first"        // the key let go while its holder still believes it holds it
	ruleTTL       = "every key expires" // a key of the lock without a time to live
	ruleResidue   = "nothing left"      // a key left after everyone left, beyond the documented windows
	ruleLossTold  = "loss told"         // a holder whose key an operator removed is not told at its release, nor one whose key Redis lost at its release's retry
	ruleGrant     = "grant"             // the key granted to an acquisition that ended
	ruleServe     = "served"            // the key let go free while a live process waits in line
	ruleKept      = "kept in line"      // the entry of the attempt a process waits with left the line, or went back to an older one, unserved and unended
	ruleRestart   = "restart told"      // a renewal that ran after an empty restart wiped its tenure's holding renewed it
	ruleForce     = "force answered"    // a copy of a ForceRelease that removed its holder answers gone (not settled) while the marks live, or one that did not, settled
)

// fail records the first violation of a schedule.
func (w *world) fail(rule, format string, args ...any) {
	if w.violation != nil {
		return
	}
	w.violation = &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)}
	w.note("VIOLATION (%s): %s", rule, w.violation.Detail)
}

// acquired checks a new acquisition's fencing token: above every token handed out before,
// unless its tenure was removed behind its back (the documented window: fencing is what
// protects the store then).
func (w *world) acquired(p *proc, t *tenure, h *holding) {
	if t.removed == "" && h.token <= w.maxToken {
		w.fail(ruleFencing, "%s's acquisition got token %d, not above %d (%s)", p.name, h.token, w.maxToken, w.tokens[w.maxToken])
	}
	if h.token > w.maxToken {
		w.maxToken = h.token
	}
	w.tokens[h.token] = fmt.Sprintf("%s at step %d", p.name, w.step)
}

// checkSetting checks that the lease a tenure renews with is its newest setting.
func (w *world) checkSetting(p *proc, t *tenure) {
	if t.lease != t.truth.lease {
		w.fail(ruleSetting, "%s's tenure renews with %v, but its newest setting (request #%d) is %v", p.name, t.lease, t.truth.order, t.truth.lease)
	}
}

// checkToldFirst runs as Redis runs a tenure's release: its owner must have been told.
func (w *world) checkToldFirst(r *request) {
	if p := r.p; p.owner != nil && p.ten == r.ten && !p.dead {
		w.fail(ruleTold, "%s's release of %s ran while its owner (token %d) still held the lock", p.name, r.locker, p.owner.token)
	}
}

// checkRetryTold runs as the retry of a tenure's release ends with out, while the tenure's
// lease lasts by the process's clock (after that, the key would have expired anyway): a
// tenure whose holding an empty restart lost before any release of it ran (another may have
// taken the key since) is told of the loss — the retry answers gone, not settled — and one
// whose holding Redis kept until a release (or a leave) let it go is not told of a loss that
// did not happen. A request that settled its locker meanwhile names it (processor.Unreleased),
// marking it removed only when the key no longer holds it; a release that names its holding's
// origin and finds it gone marks it removed too, so that a copy of it answers gone. A settled
// answer is excused when a release of the tenure that named no origin ran before this try (its
// answer was lost: a release that cannot tell its holding lost from one released); a gone one
// after any empty restart or an operator's removal of it.
func (w *world) checkRetryTold(p *proc, r *request, out outcome) {
	t := r.back.release
	if out.err != nil || !w.now().Before(t.until) {
		return
	}
	_, forced := w.forced[t.locker]
	switch {
	case out.res.Outcome == processor.Settled && !r.afterBare && t.removed == "an empty restart":
		w.fail(ruleLossTold, "%s's retried release of %s, whose holding an empty restart lost before any release of it ran, answered settled: the loss is not told", p.name, t.locker)
	case out.res.Outcome == processor.Gone && t.removed == "" && !forced && w.restarted == 0:
		w.fail(ruleLossTold, "%s's retried release of %s answered gone, though Redis held it until it was let go: a loss told that did not happen", p.name, t.locker)
	}
}

// check runs the invariants on the state after a step.
func (w *world) check(s snapshot) {
	key := w.cfg.UniqueKey()
	now := s.now
	holder, held := s.get(key)

	for k, v := range s.keys {
		if v.ttl < 0 {
			w.fail(ruleTTL, "key %s has no time to live", k)
		}
	}

	// Exclusion and the margin: every tenure that counts the key held, whether a goroutine owns
	// it now or it is free to pass on. Only the tenure's own yield check, awaited, may give
	// the key away under it.
	for _, p := range w.procs {
		t := p.ten
		if t == nil || t.over || p.dead || !now.Before(t.until) {
			continue
		}
		if r := p.taking; r != nil && r.yield && r.awaited && p.owner == nil {
			continue
		}
		switch {
		case t.removed != "":
			// removed behind its back (and perhaps taken again by a late copy of its own
			// request after an empty restart): it learns at its next renewal or release
		case held && holder == t.locker:
			margin := domain.DriftAllowance(t.untilLease) - w.be.slack()
			if exp := s.expiry(key); exp.Before(t.until.Add(margin)) {
				w.fail(ruleMargin, "%s counts %s held %v more, Redis keeps it %v more: less than the drift allowance %v apart",
					p.name, t.locker, t.until.Sub(now), exp.Sub(now), margin)
			}
		default:
			w.fail(ruleExclusion, "%s counts the key held by %s for %v more, but Redis holds %q", p.name, t.locker, t.until.Sub(now), holder)
		}
	}

	// No acquisition that ended (released, given back, failed, left, removed by an operator,
	// yielded) takes the key again once it lost it, unless that was longer ago than a
	// settled mark lives, or Redis restarted empty since: the documented window.
	if held && w.gone[holder] {
		if _, decided := w.revivals[holder]; !decided {
			e := w.ended[holder]
			excused := w.outlived(e.step, e.at, e.life)
			w.revivals[holder] = excused
			if !excused {
				w.fail(ruleRevived, "%s, which ended at step %d (%s), holds the key again", holder, e.step, e.why)
			}
		}
	}
	for l := range w.ended {
		if !held || holder != l {
			w.gone[l] = true
		}
	}

	// No entry in the line waits with an acquisition that ended (outside the documented
	// window): a grant would go to it.
	want := s.keys[processor.WantKey(w.cfg)]
	for mark, v := range want.hash {
		if entryExpires(v) <= now.UnixMilli() {
			continue
		}
		l := entryLocker(v)
		if e, ok := w.ended[l]; ok && !w.outlived(e.step, e.at, e.life) {
			w.fail(ruleLine, "%s waits in line with %s, which ended at step %d (%s)", mark, l, e.step, e.why)
		}
	}

	// The line: a process whose waiters all left, and whose leave ran, neither stands in
	// line nor has the key reserved for it.
	for _, p := range w.procs {
		if p.dead || len(p.waiters) > 0 || p.tryer || !p.leaveLanded || w.outlived(p.leaveStep, p.leaveAt, p.leaveLife) || p.restartLeak {
			continue // (a request later than its process's settled mark lives: the documented window)
		}
		if e, ok := want.hash[p.mark]; ok && entryExpires(e) > now.UnixMilli() {
			w.fail(ruleLine, "%s stands in line with no goroutine waiting, after its leave.lua ran", p.name)
		}
		if owner, seq := processor.SplitLocker(holder); held && owner == p.mark {
			if n, _ := strconv.Atoi(seq); n <= p.leaveUp {
				w.fail(ruleLine, "the key holds %s, an acquisition of %s, which has no goroutine waiting and left", holder, p.name)
			}
		}
	}
}

// checkKept checks that the entry of the attempt a process waits with stays in the line (or
// gives way to a newer attempt of its process) from one step to the next, unless the step
// served it (the key holds its locker now: taken, or granted), ended it (a request of its
// process settled an acquisition numbered at or above it), its time ran out, or Redis
// restarted empty. A late copy of an older request of the process — the take of a tenure the
// process counted lost, say — must not take it out of line, nor put the older one in its place.
func (w *world) checkKept(s snapshot, prev map[string]string) {
	if w.restarted == w.step {
		return
	}
	holder, _ := s.get(w.cfg.UniqueKey())
	want := s.keys[processor.WantKey(w.cfg)].hash
	for _, p := range w.procs {
		v, ok := prev[p.mark]
		if !ok || !p.live() || p.attempt == nil || entryExpires(v) <= s.now.UnixMilli() {
			continue
		}
		l := entryLocker(v)
		if l != p.attempt.locker || holder == l {
			continue
		}
		n := p.number(l)
		if now, ok := want[p.mark]; ok {
			if p.number(entryLocker(now)) >= n {
				continue
			}
			w.fail(ruleKept, "%s waits with %s, but its entry in line waits with %s now", p.name, l, entryLocker(now))
			continue
		}
		if w.settledUpTo(p) >= n {
			continue
		}
		w.fail(ruleKept, "%s waits with %s, whose entry left the line though it was neither served (the key holds %q) nor ended", p.name, l, holder)
	}
}

// settledUpTo is the largest number of an acquisition of p that a request Redis ran ended (-1
// for none): every acquisition of p numbered up to it is settled.
func (w *world) settledUpTo(p *proc) int {
	top := -1
	for l := range w.ended {
		if n := p.number(l); n > top {
			top = n
		}
	}
	return top
}

// checkRenewal runs as Redis runs a renewal r of a tenure: once an empty restart wiped the
// holding the tenure began with, no renewal that runs after it renews the tenure — the key
// may hold its locker again (a late copy of its take, or a grant to the entry such a copy
// made), in a holding it did not begin with, and others may have held the key in between. The
// tenure learns of the loss at that renewal (renew.lua compares the holding's first token with
// the renewal's origin). A tenure whose origin is unknown (0) is not checked: its renewals
// name none.
func (w *world) checkRenewal(r *request, out outcome) {
	t := r.ten
	if t == nil || t.wiped == 0 || t.wiped >= w.step || t.origin == 0 || out.err != nil || out.res.Outcome != processor.Renewed {
		return
	}
	switch r.purpose {
	case pExpand, pExtend, pTake:
		w.fail(ruleRestart, "%s renewed %s, though Redis restarted empty at step %d, after its tenure's holding began (token %d): the tenure is not told of the loss",
			r.id, t.locker, t.wiped, t.origin)
	}
}

// residue checks, after everyone left and every request ran, that nothing of the lock stays
// but what expires on its own within the documented windows; on a server whose clock the
// explorer owns, it lets that time pass and checks that nothing is left at all.
func (w *world) residue() {
	s, err := w.be.snapshot()
	if err != nil {
		w.fail(ruleResidue, "snapshot: %v", err)
		return
	}
	key := w.cfg.UniqueKey()
	if holder, ok := s.get(key); ok {
		owner, _ := processor.SplitLocker(holder)
		excused := false
		for _, p := range w.procs {
			if p.dead && owner == p.mark {
				excused = true // a crashed holder, or a grant to a crashed process
			}
			if !p.dead && owner == p.mark && ((p.leaveSent && !p.leaveLanded) || (p.leaveLanded && w.outlived(p.leaveStep, p.leaveAt, p.leaveLife)) || p.restartLeak) {
				excused = true // its leave was lost, or a request outlived its mark: the key expires by itself
			}
		}
		if w.revivals[holder] {
			excused = true // a copy later than its settled mark lives: expires with its lease
		}
		if !excused {
			w.fail(ruleResidue, "after everyone left, the key holds %q (%v to live)", holder, s.keys[key].ttl)
		}
	}
	want := s.keys[processor.WantKey(w.cfg)]
	for _, m := range s.zmembers(processor.LineKey(w.cfg)) {
		// (an entry made by a copy that came after its acquisition's settled mark expired:
		// the documented window; it expires on its own)
		locker, _, _ := strings.Cut(want.hash[m], "|")
		if e, ok := w.ended[locker]; ok && w.outlived(e.step, e.at, e.life) {
			continue
		}
		for _, p := range w.procs {
			if p.mark == m && !p.dead && !(p.leaveSent && !p.leaveLanded) && !(p.leaveLanded && w.outlived(p.leaveStep, p.leaveAt, p.leaveLife)) && !p.restartLeak {
				w.fail(ruleResidue, "after everyone left, %s stands in line", p.name)
			}
		}
	}
	if !w.be.owned() {
		return
	}
	longest := 2 * w.opt.Lease // the longest lease a handle or Extend uses
	// (the longest-lived keys: an operator's marks, eight of the removed key's remaining life)
	w.be.advance(8*longest + processor.EntryTTL(w.procs[0].cfg(longest)) + time.Second)
	s, _ = w.be.snapshot()
	for k := range s.keys {
		w.fail(ruleResidue, "key %s is still there long after everyone left", k)
	}
}

// outlived reports whether a request that ran at step (at time at) is beyond the documented
// window of late requests: Redis restarted empty since, or the settled mark it set, which
// lives life, would have expired by now.
func (w *world) outlived(step int, at time.Time, life time.Duration) bool {
	return step <= w.restarted || w.now().Sub(at) >= life
}

// entryLocker reads the locker an entry of the want hash ("<locker>|<lease>|<tokens>|<renewed
// ms>|<expires ms>|<listened>") waits with.
func entryLocker(v string) string {
	f := strings.Split(v, "|")
	if len(f) < 6 {
		return ""
	}
	return strings.Join(f[:len(f)-5], "|")
}

// entryExpires reads when an entry of the want hash ("...|<expires ms>|<listened>") expires.
func entryExpires(v string) int64 {
	f := strings.Split(v, "|")
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[len(f)-2], 10, 64)
	return n
}
