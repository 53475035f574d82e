package explore

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// world is one schedule's universe: the server, the simulated processes and operator, the
// requests on their way to Redis and the replies on their way back, and what the oracle has
// seen. Everything happens in steps the schedule chooses; nothing runs on its own.
type world struct {
	opt   Options
	sw    swarm
	be    backend
	cfg   domain.DLockConfig // the key (the lease is each handle's)
	procs []*proc
	op    *processor.RedisLockProcessor // the operator's (State, ForceRelease)

	flight  []*request // sent, not yet run by Redis (a copy of a request run once may be among them)
	replies []*reply   // run, the reply not yet back
	msgs    []*note    // messages of the key's channel on their way to a process
	order   int        // requests sent, for their order number

	trace []string // what happened, step by step, readably
	step  int

	// The oracle.
	maxToken     uint64          // the largest fencing token any acquisition was given
	forced       map[string]int  // lockers an operator removed, by step
	ended        map[string]end  // acquisitions over by a request Redis ran
	gone         map[string]bool // ended ones seen not holding the key since
	forcedAt     map[string]time.Time
	forcedBy     map[string]bool     // the force requests (by their id) that removed their holder
	revivals     map[string]bool     // lockers that took the key again after they ended: excused or not
	entries      map[string]entry    // when each attempt's entry in the line was last renewed
	restarted    int                 // the last step Redis restarted empty (0: never)
	restartOrder int                 // how many requests had been sent then
	lastWant     map[string]string   // the line's entries after the step before (checkKept)
	reach        Reach               // the rare situations this schedule reached
	tokens       map[uint64]string   // who got each token
	states       map[uint64]struct{} // distinct states seen (shared across schedules)
	chosen       []string            // the keys of the actions taken
	rng          *rand.Rand          // the walk's, once the schedule walks at random: it plans the network
	violation    *Violation
}

// request is one request of a process (or the operator) to Redis: sent at a time, run by
// Redis once, several times (copies), or never.
type request struct {
	id      string // "A3": process A's third request
	p       *proc  // nil for the operator
	purpose purpose
	what    string
	order   int
	sent    time.Time
	run     func(ctx context.Context) outcome
	awaited bool      // its caller waits for the reply
	copy    bool      // a copy sent again by the client: nobody reads its reply
	ranAt   int       // the step Redis last ran it
	ranTime time.Time // and when

	ten    *tenure
	locker string
	lease  time.Duration
	yield  bool
	tokens int
	owner  *holding // Extend: the holding that asked
	wait   bool     // lock: stand in line
	seq    int      // leave: the newest number it settles
	next   string   // yield, or a release that stands in line again (relock): the attempt the process waits with next
	// listening: with wait or next, the request says its process counts itself heard on its
	// channel (processor.LockRequest.Listening)
	listening bool
	back      giveBack               // a give-back, or a try of a release retried
	unrel     []processor.Unreleased // the releases retried it names
	// afterBare says a release of the tenure it releases that named no origin (the first or
	// a try) ran before Redis ran it
	afterBare bool
	bare      bool // a release that names no origin (proc.originOnRelease)

	// its plan, in a random walk
	fate      fate
	due       int // the step from which it may be delivered
	copyDelay int // fateCopy: how many steps later the copy is due
}

// outcome is what Redis answered.
type outcome struct {
	res processor.Result
	err error
}

func (o outcome) String() string {
	switch {
	case o.err != nil:
		return "error: " + o.err.Error()
	case o.res.Outcome != 0:
		s := o.res.Outcome.String()
		if o.res.Token != 0 {
			s += fmt.Sprintf(", token %d", o.res.Token)
		}
		if o.res.Next != "" {
			s += ", granted to " + o.res.Next
		}
		return s
	}
	return "done"
}

type reply struct {
	r    *request
	out  outcome
	due  int  // the step from which it may arrive, in a random walk
	lost bool // its plan, in a random walk
}

// note is a message of the key's channel on its way to one process (pub/sub).
type note struct {
	to   *proc
	m    processor.Message
	at   int // the step it was published
	what string
	due  int
	lost bool
}

// fate is what a random walk plans for a request.
type fate uint8

const (
	fatePrompt fate = iota // run once
	fateCopy               // run, and again later
	fateDrop               // never run
)

// purpose is why a request was sent: what its reply is for.
type purpose uint8

const (
	pAsk      purpose = iota // lock.lua of a waiting goroutine (joins the line)
	pTry                     // lock.lua of a TryLock
	pTake                    // renew.lua before a pass (with yield at the hand-off limit)
	pExpand                  // the expander's renewal
	pExtend                  // Extend
	pRelease                 // release.lua of a tenure
	pGiveBack                // release.lua of an acquisition not used or of unknown outcome
	pLeave                   // leave.lua
	pForce                   // the operator's force.lua
)

// send puts a request on the wire.
func (w *world) send(r *request) {
	w.order++
	r.order, r.sent, r.awaited = w.order, w.now(), true
	w.flight = append(w.flight, r)
	w.plan(r)
	w.note("%s sends %s [%s]", r.who(), r.what, r.id)
}

func (r *request) who() string {
	if r.p == nil {
		return "operator"
	}
	return r.p.name
}

func (w *world) now() time.Time { return w.be.now() }

func (w *world) note(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%3d. ", w.step)+fmt.Sprintf(format, args...))
}

// deliver has Redis run r; with keep a copy of it stays on the wire (the client sends it again
// after a read timeout, or it simply arrives twice). The reply goes back to the caller if it
// still waits.
func (w *world) deliver(i int, keep bool) {
	r := w.flight[i]
	w.flight = append(w.flight[:i:i], w.flight[i+1:]...)
	prior := w.entryBefore(r)
	w.reached(r, prior)
	out := r.run(context.Background())
	if r.p != nil && r.order <= w.restartOrder {
		r.p.restartLeak = true // a request from before an empty restart ran after it: its marks are gone
	}
	r.ranAt, r.ranTime = w.step, w.now()
	if t := released(r); t != nil {
		r.afterBare = t.releasedBare
		t.releasedBare = t.releasedBare || r.bare
	}
	copyNote := ""
	if r.copy {
		copyNote = " (a copy)"
	}
	w.note("Redis runs %s %s%s: %v", r.id, r.what, copyNote, out)
	if r.purpose == pForce && out.err == nil {
		removed := w.forcedBy[r.id]
		switch {
		case out.res.Outcome == processor.Settled && !removed:
			w.fail(ruleForce, "%s answered settled (removed by a copy of it) though no copy of it removed %s", r.id, r.locker)
		case out.res.Outcome == processor.Gone && removed && w.forced[r.locker] > w.restarted && w.now().Sub(w.forcedAt[r.locker]) < w.lifeOf(w.op):
			w.fail(ruleForce, "%s, a copy of a force that removed %s, answered gone: its caller would be told nothing was removed", r.id, r.locker)
		case out.res.Outcome == processor.Released:
			w.forcedBy[r.id] = true
			w.forcedRemoved(r.locker)
		}
	}
	w.renewedEntry(r, out, prior)
	w.checkRenewal(r, out)
	w.published(r, out)
	if r.p != nil && r.purpose == pLeave && r.p.stopped && r.order > r.p.stopOrder {
		r.p.leaveLanded, r.p.leaveStep, r.p.leaveAt, r.p.leaveUp = true, w.step, w.now(), r.seq
		r.p.leaveLife = w.markLife(r)
	}
	w.endedBy(r, out)
	if r.p != nil && r.purpose == pRelease && !r.copy {
		w.checkToldFirst(r)
	}
	if keep {
		c := *r
		c.copy, c.awaited = true, false
		c.fate, c.due = fatePrompt, w.step+r.copyDelay
		w.flight = append(w.flight, &c)
		w.note("  a copy of %s stays on the wire", r.id)
	}
	if !r.copy && r.awaited {
		rp := &reply{r: r, out: out}
		w.planReply(rp)
		w.replies = append(w.replies, rp)
	}
}

// released returns the tenure r releases (a release, or a try of one retried), else nil.
func released(r *request) *tenure {
	switch r.purpose {
	case pRelease:
		return r.ten
	case pGiveBack:
		return r.back.release
	}
	return nil
}

// reached counts the situations that few schedules reach, as Redis is about to run r (prior
// is its process's entry in line, as entryBefore reads it): a copy of the take of the very
// acquisition that holds the key, whose process waits in line with a newer attempt (it
// counted that tenure lost); a renewal of a tenure whose holding an empty restart wiped,
// while the key holds its locker again; a request naming a release retried that no request
// Redis ran has ended, while the key does not hold it.
func (w *world) reached(r *request, prior string) {
	if r.p == nil || !w.be.owned() {
		return
	}
	holder, _ := w.be.client().Get(context.Background(), w.cfg.UniqueKey()).Result()
	lost := 0
	for _, u := range r.unrel {
		if _, ended := w.ended[u.Locker]; holder != u.Locker && !ended {
			lost++
		}
	}
	w.reach.UnreleasedLost += lost
	if lost > 1 {
		w.reach.UnreleasedLostTogether++
	}
	switch r.purpose {
	case pAsk, pTry, pExpand, pExtend, pTake:
	default:
		return
	}
	if holder != r.locker {
		return
	}
	switch r.purpose {
	case pAsk, pTry:
		if prior != "" && entryExpires(prior) > w.now().UnixMilli() && r.p.number(entryLocker(prior)) > r.p.number(r.locker) {
			w.reach.StaleOwnTakes++
		}
	default:
		if t := r.ten; t != nil && t.wiped != 0 && t.wiped < w.step {
			w.reach.RenewalsOfRetaken++
		}
	}
}

// drop loses a request on its way: Redis never runs it. Its caller sees no reply in time.
func (w *world) drop(i int) {
	r := w.flight[i]
	w.flight = append(w.flight[:i:i], w.flight[i+1:]...)
	w.note("%s is lost on the way", r.id)
	if !r.copy && r.awaited {
		w.replies = append(w.replies, &reply{r: r, out: outcome{err: errLost}})
	}
}

var (
	errLost    = fmt.Errorf("no reply (request lost)")
	errNoReply = fmt.Errorf("no reply (reply lost)")
	errTimeout = fmt.Errorf("the caller gave up waiting")
)

// receive hands reply i to its process.
func (w *world) receive(i int, lost bool) {
	rp := w.replies[i]
	w.replies = append(w.replies[:i:i], w.replies[i+1:]...)
	out := rp.out
	if lost {
		out = outcome{err: errNoReply}
		w.note("the reply to %s is lost", rp.r.id)
	} else {
		w.note("%s hears the reply to %s: %v", rp.r.who(), rp.r.id, out)
	}
	if rp.r.p != nil && rp.r.awaited {
		rp.r.awaited = false
		rp.r.p.onReply(rp.r, out)
	}
}

// tick lets time pass on every clock; leases that ran out end (each process's watchdog).
func (w *world) tick(d time.Duration) {
	w.be.advance(d)
	w.note("%v pass", d)
	for _, p := range w.procs {
		p.watchdog()
	}
}

// restart empties Redis: a restart with nothing persisted, or a failover to an empty replica.
func (w *world) restart() {
	w.be.flush()
	w.be.advance(time.Millisecond) // a restart takes time: the server clock moves on
	w.restarted, w.restartOrder = w.step, w.order
	w.note("Redis restarts empty")
	for _, p := range w.procs {
		if p.ten != nil && p.ten.removed == "" {
			p.ten.removed = "an empty restart"
		}
		if p.ten != nil {
			p.ten.wiped = w.step
		}
	}
}

// markLife is how long a settled mark that r sets lives: its processor's MarkLife (two of the
// longest lease it sent on the key; every lease of the model is at least half the base one).
func (w *world) markLife(r *request) time.Duration {
	if r.p != nil {
		return w.lifeOf(r.p.pr)
	}
	return w.lifeOf(w.op)
}

func (w *world) lifeOf(pr *processor.RedisLockProcessor) time.Duration {
	short, _ := w.cfg.WithLease(w.opt.Lease / 2)
	return pr.MarkLife(short)
}

// force is the operator's ForceRelease of the holder it reads now (State, then ForceRelease).
func (w *world) force() {
	s, _ := w.be.snapshot()
	holder, ok := s.get(w.cfg.UniqueKey())
	if !ok {
		return
	}
	id := fmt.Sprintf("op%d", w.order+1)
	r := &request{id: id, purpose: pForce, locker: holder, what: "force.lua(" + holder + ")"}
	r.run = func(ctx context.Context) outcome {
		res, err := w.op.ForceReleaseAs(ctx, w.cfg, holder, id) // (every copy under the same name)
		return outcome{res: res, err: err}
	}
	w.send(r)
}

// forcedRemoved records that an operator removed locker: its holder, if one believes it
// holds, is inside the documented window until its next renewal or release.
func (w *world) forcedRemoved(locker string) {
	if _, ok := w.forced[locker]; !ok {
		w.forced[locker], w.forcedAt[locker] = w.step, w.now()
	}
	for _, p := range w.procs {
		if p.ten != nil && p.ten.locker == locker && p.ten.removed == "" {
			p.ten.removed = "an operator's ForceRelease"
		}
	}
}

// state hashes what the world is now, for counting distinct states.
func (w *world) stateHash(s snapshot) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s.canonical()))
	for _, p := range w.procs {
		h.Write([]byte(p.canonical()))
	}
	for _, r := range w.flight {
		fmt.Fprintf(h, "f%d/%s/%v;", r.purpose, r.who(), r.copy)
	}
	for _, rp := range w.replies {
		fmt.Fprintf(h, "r%d/%s;", rp.r.purpose, rp.r.who())
	}
	for _, n := range w.msgs {
		fmt.Fprintf(h, "m%s/%v;", n.to.name, n.m.Granted)
	}
	return h.Sum64()
}

// end is when and why an acquisition ended in Redis.
type end struct {
	step int
	at   time.Time
	why  string
	life time.Duration // how long the settled mark set then lives
}

// endedBy records the acquisitions that r, run by Redis with outcome out, ended: what the
// process no longer holds or asks for, whatever the scripts keep of it.
func (w *world) endedBy(r *request, out outcome) {
	mark := func(l, why string) {
		if _, ok := w.ended[l]; !ok {
			w.ended[l] = end{step: w.step, at: w.now(), why: why, life: w.markLife(r)}
		}
	}
	if out.err != nil {
		return
	}
	switch r.purpose {
	case pRelease, pGiveBack:
		mark(r.locker, "released or given back")
	case pAsk, pTry:
		if out.res.Outcome == processor.Settled || (out.res.Outcome == processor.Held && !r.wait) {
			mark(r.locker, "failed")
		}
	case pTake:
		if out.res.Outcome == processor.Yielded {
			mark(r.locker, "yielded")
		}
	case pLeave:
		for n := 1; n <= r.seq; n++ {
			mark(r.p.mark+strconv.Itoa(n), "its process left")
		}
	case pForce:
		if out.res.Outcome == processor.Released {
			mark(r.locker, "removed by an operator")
		}
	}
}

// published sends every process the message a request that let the key go published: the
// grant (to the locker it went to, with its first token) or that the key was left free.
// (On a redis-server the explorer hears no messages: processes learn by asking again.)
func (w *world) published(r *request, out outcome) {
	if out.err != nil || !w.be.owned() {
		return
	}
	res := out.res
	var m processor.Message
	switch {
	case res.Next != "" && (res.Outcome == processor.Released || res.Outcome == processor.Yielded):
		m = processor.Message{Granted: true, From: r.locker, Locker: res.Next, Token: res.Token, At: res.At}
		w.granted(r, res.Next)
	case res.Outcome == processor.Released:
		m = processor.Message{Released: true, From: r.locker, Gap: res.Gap}
		if res.Gap == 0 {
			w.leftFree(r)
		}
	default:
		return
	}
	what := fmt.Sprintf("%+v", m)
	if m.Granted {
		what = fmt.Sprintf("G|at=%d|%s|%s|%d", m.At, m.From, m.Locker, m.Token)
	} else {
		what = fmt.Sprintf("R|%s|%d", m.From, m.Gap.Milliseconds())
	}
	told := w.toldOf(r, m)
	for _, p := range w.procs {
		if p.dead || !told[p.mark] {
			continue
		}
		n := &note{to: p, m: m, what: what, at: w.step}
		if w.rng != nil {
			n.lost = w.rng.Float64() < w.sw.loseReply
			if w.rng.Float64() < w.sw.lateReply {
				n.due = w.later()
			}
		}
		w.msgs = append(w.msgs, n)
	}
}

// toldOf returns the marks of the processes that hear m, as the scripts publish it (each
// process on a channel of its own): a grant the process it goes to, a key left free the
// processes in line after it ran; a leave's or an operator's pass the process of the locker
// it let go too.
func (w *world) toldOf(r *request, m processor.Message) map[string]bool {
	told := map[string]bool{}
	if m.Granted {
		owner, _ := processor.SplitLocker(m.Locker)
		told[owner] = true
	} else {
		marks, err := w.be.client().ZRange(context.Background(), processor.LineKey(w.cfg), 0, -1).Result()
		if err != nil {
			w.note("reading the line failed: %v (nobody in line is told)", err)
		}
		for _, mk := range marks {
			told[mk] = true
		}
	}
	if r.purpose == pLeave || r.purpose == pForce {
		owner, _ := processor.SplitLocker(m.From)
		told[owner] = true
	}
	return told
}

// hear hands message i to its process, or loses it.
func (w *world) hear(i int, lost bool) {
	n := w.msgs[i]
	w.msgs = append(w.msgs[:i:i], w.msgs[i+1:]...)
	if lost {
		w.note("%s does not hear %s", n.to.name, n.what)
		return
	}
	w.note("%s hears %s", n.to.name, n.what)
	if !n.to.dead {
		n.to.hear(n.m, n.at)
	}
}

// granted checks a grant as Redis made it: only to an acquisition that asked and did not end,
// whose process listens on its channel if it did when it last renewed its entry, and else
// renewed it within a third of its lease (it may have died).
func (w *world) granted(r *request, locker string) {
	if e, ok := w.ended[locker]; ok && !w.outlived(e.step, e.at, e.life) {
		w.fail(ruleGrant, "%s granted the key to %s, which ended at step %d (%s)", r.id, locker, e.step, e.why)
	}
	e, ok := w.entries[locker]
	switch {
	case !ok:
		w.fail(ruleGrant, "%s granted the key to %s, which has no entry in line", r.id, locker)
	case e.listened && !w.listens(locker):
		w.fail(ruleGrant, "%s granted the key to %s, whose process listened when it renewed its entry and does not now (it died)", r.id, locker)
	case !e.listened && e.at.IsZero():
		w.fail(ruleGrant, "%s granted the key to %s, whose process does not listen, and has not asked since saying it is not heard (it may have died with its requests on their way)", r.id, locker)
	case !e.listened && w.now().Sub(e.at).Milliseconds() > e.lease.Milliseconds()/3:
		w.fail(ruleGrant, "%s granted the key to %s, whose entry was last renewed %v ago (lease %v) and whose process did not listen", r.id, locker, w.now().Sub(e.at), e.lease)
	}
}

// leftFree checks a key r let go with no grant and no window for processes not in line:
// nobody in line was live (as granted judges it), but r's own process (a release or a leave
// passes over it; an operator's removal, over the removed holder's).
func (w *world) leftFree(r *request) {
	self, _ := processor.SplitLocker(r.locker)
	if r.p != nil {
		self = r.p.mark
	}
	want, err := w.be.client().HGetAll(context.Background(), processor.WantKey(w.cfg)).Result()
	if err != nil {
		w.fail(ruleServe, "reading the line: %v", err)
		return
	}
	for mark, v := range want {
		locker := entryLocker(v)
		e, ok := w.entries[locker]
		if mark == self || !ok || entryExpires(v) <= w.now().UnixMilli() {
			continue
		}
		if (e.listened && w.listens(locker)) || (!e.listened && !e.at.IsZero() && w.now().Sub(e.at).Milliseconds() <= e.lease.Milliseconds()/3) {
			w.fail(ruleServe, "%s let the key go free while %s waits in line with %s, live", r.id, mark, locker)
			return
		}
	}
}

// listens reports whether the process of locker listens on its channel now.
func (w *world) listens(locker string) bool {
	owner, _ := processor.SplitLocker(locker)
	for _, p := range w.procs {
		if p.mark == owner {
			return p.listening
		}
	}
	return false
}

// entry is when an attempt's entry in the line was last renewed, its lease, and whether its
// process listened on its channel then.
type entry struct {
	at       time.Time
	lease    time.Duration
	listened bool
}

// renewedEntry records that r, run by Redis with outcome out, made or renewed an entry in the
// line: a waiting attempt that found the key held, or a yield or a release (relock) with the
// attempt it waits with next. prior is the process's entry as r found it (entryBefore). The
// entry of a process that does not listen now is renewed as of long ago when r says the
// process counts itself heard (r.listening), or prior is alive and says the process listened:
// the process may have died with r on its way, and no grant may go to it until it asks again
// saying otherwise.
func (w *world) renewedEntry(r *request, out outcome, prior string) {
	var locker string
	switch {
	case out.err != nil:
		return
	case (r.purpose == pAsk || r.purpose == pTry) && r.wait && out.res.Outcome == processor.Held:
		locker = r.locker
	case r.purpose == pTake && r.yield && out.res.Outcome == processor.Yielded,
		r.purpose == pRelease && r.next != "" && out.res.Queued:
		locker = r.next
	default:
		return
	}
	e := entry{w.now(), r.lease, w.listens(locker)}
	if !e.listened && (r.listening || strings.HasSuffix(prior, "|1") && entryExpires(prior) > w.now().UnixMilli()) {
		e.at = time.Time{}
	}
	w.entries[locker] = e
}

// entryBefore returns the entry of r's process in the line as r finds it (empty for none).
func (w *world) entryBefore(r *request) string {
	if r.p == nil || !w.be.owned() {
		return ""
	}
	v, _ := w.be.client().HGet(context.Background(), processor.WantKey(w.cfg), r.p.mark).Result()
	return v
}
