package explore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// proc is a simulated process: the Go side of package dlock for one key, reduced to what
// decides which requests it sends and what it believes — its waiting goroutines and their
// leases, the phase, the tenure (locker, lease setting, the time it counts the key held until,
// its block of fencing tokens), its owner, whether it is in the Redis line. Each method
// mirrors the lockState method it names; the rules are those of docs/design.md.
type proc struct {
	w    *world
	name string // "A"
	mark string // its locker prefix, the name it stands in the line under
	pr   *processor.RedisLockProcessor
	seq  int // lockers and yield checks issued
	reqs int // requests sent

	waiters []time.Duration // the leases of the goroutines waiting in Lock, first first
	phase   phase
	ten     *tenure
	owner   *holding
	tryer   bool // a TryLock is under way (its request in flight)
	queued  bool // it may stand in the Redis line

	attempt *attempt  // the open attempt it waits with (dlock's line)
	waited  time.Time // the send time of the attempt's last request whose answer showed it waiting ...
	seen    uint64    // ... and what it saw of tokens
	granted *heard    // a grant heard while a request of the attempt was on its way
	// heardFrom holds the lockers named as the sender of a message it heard (a release, a
	// grant on, or an operator's removal of its own).
	heardFrom map[string]bool
	leaveUp   int // the newest number the leave that ran settles

	asking    *request // lock.lua awaited
	taking    *request // renew.lua before a pass, awaited
	extending *request

	stopped     bool          // its last waiter left ...
	stopOrder   int           // ... when this many requests had been sent
	leaveSent   bool          // a leave.lua was sent since it stopped wanting ...
	leaveLanded bool          // ... and ran in Redis,
	leaveStep   int           // at this step
	leaveAt     time.Time     // and time
	leaveLife   time.Duration // how long the settled mark it set lives
	giveBacks   []giveBack
	// unreleased counts the releases retried (retryRelease) whose first try is unanswered: the
	// line is left after it, not beside it; retried are the tenures of such retries while
	// they go on, oldest first: a request meanwhile names their releases (Unreleased).
	unreleased  int
	retried     []*tenure
	restartLeak bool // a request it sent before an empty restart ran after it (the documented window)
	dead        bool // crashed (kill -9)
	closed      bool // Generator.Close ran
	// listening says the process is subscribed to its channel of the key (Redis counts it:
	// a release may grant it the key however old its entry); unlisten ends that. Its requests
	// that stand it in line say so (processor.LockRequest.Listening): Redis hears a live
	// process that listens here, so no answer tells it otherwise (dlock's line.listens).
	// A request that said so, run after its process died, finds it unheard.
	listening bool
	// originOnRelease says its releases name the origin of the holding they let go, as dlock's
	// do; without it (by a bit of the seed), none, as when a take's reply carried no origin (an
	// older version's): the scripts' guards against a stale holding must hold either way.
	originOnRelease bool
	unlisten        func()
	// lingering says it stands in line with no goroutine waiting, after a release that stood
	// in line again (relock): until a goroutine comes, the grant comes, or the linger ends.
	// A TryLock ends it; tryLingered says that the TryLock on its way did, and that it
	// lingers again if it finds the key held elsewhere (its place is kept for a Lock).
	lingering, tryLingered bool
}

type phase uint8

const (
	idle phase = iota
	asking
	held
	free
	renewing
	releasing
)

var phaseNames = [...]string{"idle", "asking", "held", "free", "renewing", "releasing"}

func (p phase) String() string { return phaseNames[p] }

// tenure is the process's hold of the key (dlock's tenure).
type tenure struct {
	locker     string
	until      time.Time     // it counts the key held until then ...
	untilLease time.Duration // ... by a request with this lease
	lease      time.Duration // what renewals use: the setting
	setAt      int           // the order number of the request that made the setting
	truth      struct {      // the oracle's own record of the newest setting that succeeded
		lease time.Duration
		order int
	}
	next, end, last uint64
	since           time.Time
	over            bool
	expanding       *request
	removed         string // why Redis no longer holds it behind its back ("": it does)
	granted         bool   // begun by a grant
	origin          uint64 // the first token of the holding in Redis it began with (0 if unknown): its renewals name it
	wiped           int    // the step of an empty restart that wiped that holding (0: none): no renewal run after it may renew
	releasedBare    bool   // a release of it that named no origin ran (its process's releases name none: originOnRelease)
}

// heard is a grant heard: the locker and the first of its tokens.
type heard struct {
	locker string
	token  uint64
	server uint64    // Redis's clock (µs) as it ran the grant, as the message says
	heard  time.Time // when the message came
	at     int       // the step it was published
}

// attempt is an acquisition a process waits with: a release grants the key to it.
type attempt struct {
	locker string
	lease  time.Duration
	tokens int
}

// holding is one acquisition: a goroutine that owns the lock.
type holding struct {
	token uint64
	lease time.Duration
}

// giveBack is an acquisition to let go until Redis answers, or its lease is over.
type giveBack struct {
	locker string
	lease  time.Duration
	until  time.Time
	// release is the tenure whose release it retries (retryRelease); nil for an acquisition
	// given back. tried says its first try was answered or failed.
	release *tenure
	tried   bool
}

// block is how many fencing tokens a tenure reserves for passes (dlock's is 1024: a small one
// here, so that schedules run out of it and renew for a new one).
const block = 3

func (p *proc) cfg(lease time.Duration) domain.DLockConfig {
	c, err := p.w.cfg.WithLease(lease)
	if err != nil {
		panic(err) // the explorer's own leases are valid
	}
	return c
}

func (p *proc) newLocker() (string, int) {
	p.seq++
	return p.mark + strconv.Itoa(p.seq), p.seq
}

func (p *proc) request(pur purpose, what string) *request {
	p.reqs++
	return &request{id: p.name + strconv.Itoa(p.reqs), p: p, purpose: pur, what: what}
}

func (p *proc) live() bool { return !p.dead && !p.closed }

// number returns the sequence number of locker if it is one of p's, else -1.
func (p *proc) number(locker string) int {
	owner, seq := processor.SplitLocker(locker)
	if owner != p.mark || seq == "" {
		return -1
	}
	n, err := strconv.Atoi(seq)
	if err != nil {
		return -1
	}
	return n
}

// until is when a lease granted by a request sent at sent is counted out.
func (p *proc) until(sent time.Time, lease time.Duration) time.Time {
	if p.w.opt.Flaws.NoDriftAllowance {
		return sent.Add(lease)
	}
	return domain.HeldUntil(sent, lease)
}

// ---- the requests -------------------------------------------------------------------------

func (p *proc) sendLock(pur purpose, locker string, lease time.Duration, wait bool, tokens int) {
	cfg := p.cfg(lease)
	req := processor.LockRequest{Locker: locker, Wait: wait, Listening: wait && p.listening, Tokens: tokens, Unreleased: p.unreleasedOf(nil)}
	r := p.request(pur, fmt.Sprintf("lock.lua(%s, lease %v, wait %v%s)", locker, lease, wait, naming(req.Unreleased)))
	r.locker, r.lease, r.tokens, r.wait, r.unrel, r.listening = locker, lease, tokens, wait, req.Unreleased, req.Listening
	r.run = func(ctx context.Context) outcome {
		res, err := p.pr.Lock(ctx, cfg, req)
		return outcome{res: res, err: err}
	}
	p.asking = r
	p.w.send(r)
}

func (p *proc) sendRenew(pur purpose, t *tenure, lease time.Duration, tokens int, yield bool) *request {
	req := processor.RenewRequest{Locker: t.locker, Tokens: tokens, Last: t.last, Origin: t.origin}
	if pur != pExtend { // (dlock's Extend names none: it settles only its own holding taken anew, after a take that named it)
		req.Unreleased = p.unreleasedOf(t)
	}
	what := fmt.Sprintf("renew.lua(%s, lease %v%s", t.locker, lease, naming(req.Unreleased))
	if tokens > 0 {
		what += ", tokens"
	}
	if yield {
		req.Yield = true
		req.Check, _ = p.newLocker()
		next, _ := p.newLocker()
		req.Next, req.NextLease, req.NextTokens, req.Listening = next, lease, block, p.listening
		what += ", yield check " + req.Check + ", next " + next
		p.attempt, p.waited, p.seen, p.granted = &attempt{locker: next, lease: lease, tokens: block}, time.Time{}, 0, nil
	}
	cfg := p.cfg(lease)
	r := p.request(pur, what+")")
	r.ten, r.locker, r.lease, r.tokens, r.yield, r.next, r.unrel, r.listening = t, t.locker, lease, tokens, yield, req.Next, req.Unreleased, req.Listening
	r.run = func(ctx context.Context) outcome {
		res, err := p.pr.ExpandLease(ctx, cfg, req)
		return outcome{res: res, err: err}
	}
	p.w.send(r)
	return r
}

func (p *proc) sendRelease(pur purpose, locker string, lease time.Duration, last uint64, t *tenure, next string) {
	cfg := p.cfg(lease)
	req := processor.ReleaseRequest{Locker: locker, Last: last, Unreleased: p.unreleasedOf(t)}
	if t != nil && p.originOnRelease {
		req.Origin = t.origin
	}
	what := "release.lua(" + locker
	if next != "" {
		req.Next, req.NextLease, req.NextTokens, req.Listening = next, lease, 1, p.listening
		what += ", next " + next
	}
	r := p.request(pur, what+naming(req.Unreleased)+")")
	r.ten, r.locker, r.lease, r.next, r.unrel, r.bare, r.listening = t, locker, lease, next, req.Unreleased, req.Origin == 0, req.Listening
	r.run = func(ctx context.Context) outcome {
		res, err := p.pr.Unlock(ctx, cfg, req)
		return outcome{res: res, err: err}
	}
	p.w.send(r)
}

func (p *proc) sendLeave() {
	cfg := p.cfg(p.w.opt.Lease)
	last := p.mark + strconv.Itoa(p.seq)
	p.leaveSent = true
	req := processor.LeaveRequest{Last: last, Unreleased: p.unreleasedOf(nil)}
	r := p.request(pLeave, "leave.lua(up to "+last+naming(req.Unreleased)+")")
	r.seq, r.unrel = p.seq, req.Unreleased
	r.run = func(ctx context.Context) outcome {
		res, err := p.pr.Leave(ctx, cfg, req)
		return outcome{res: res, err: err}
	}
	p.w.send(r)
}

// ---- what the process does on its own (the actions a schedule may choose) ----------------

// want: a goroutine calls Lock with a handle of the given lease.
func (p *proc) want(lease time.Duration) {
	p.stopped, p.leaveSent, p.leaveLanded = false, false, false
	p.lingering = false // (the goroutine waits for the grant the linger stood in line for)
	p.waiters = append(p.waiters, lease)
	p.w.note("%s: a goroutine calls Lock (lease %v)", p.name, lease)
}

// giveUp: the first waiting goroutine's context ends. If it was the one asking Redis or
// renewing to take, its request is abandoned (dlock's call returns late).
func (p *proc) giveUp() {
	p.waiters = p.waiters[1:]
	p.w.note("%s: the first waiting goroutine gives up", p.name)
	p.abandon()
	p.left()
}

// abandon: the first waiter, asking Redis or renewing to take, stops waiting for its reply
// (dlock's call returns late); the request may still run.
func (p *proc) abandon() {
	for _, r := range []*request{p.asking, p.taking} {
		if r != nil && r.awaited && r.purpose != pTry {
			r.awaited = false
			p.onReply(r, outcome{err: errTimeout})
		}
	}
}

// left is lockState.left: once nobody waits, a free tenure is let go and the line left.
func (p *proc) left() {
	if len(p.waiters) > 0 || p.tryer || p.lingering {
		return
	}
	if !p.stopped {
		p.stopped, p.stopOrder = true, p.w.order
	}
	switch p.phase {
	case free:
		p.releaseTenure()
	case idle:
		if p.unreleased > 0 {
			return // (left after the retry's first try: a leave beside it would settle its locker)
		}
		if p.queued || p.attempt != nil {
			p.queued = false
			p.closeAttempt()
			p.sendLeave()
		}
	}
}

func (p *proc) closeAttempt() { p.attempt, p.waited, p.seen, p.granted = nil, time.Time{}, 0, nil }

func (p *proc) waiting(sent time.Time, seen uint64) {
	if sent.After(p.waited) {
		p.waited, p.seen = sent, seen
	}
}

// grantUsable reports whether grant g to the open attempt can be counted: a request of the
// attempt showed it waiting before it, and the lease counted from grantStart leaves more than
// half of it.
func (p *proc) grantUsable(a *attempt, g heard) bool {
	return !p.waited.IsZero() && p.seen < g.token && p.until(p.grantStart(g), a.lease).Sub(p.w.now()) >= a.lease/2
}

// grantStart is when grant g's lease is counted from (domain.GrantedFrom).
func (p *proc) grantStart(g heard) time.Time {
	if p.w.opt.Flaws.GrantFromArrival {
		return p.w.now()
	}
	return domain.GrantedFrom(p.waited, p.seen, g.server, g.heard)
}

// startGrant begins the tenure a grant to the open attempt gives, counted from the last request
// that showed it waiting plus Redis's time from it to the grant; one nobody waits for any more is
// passed on at once. An unusable grant is left for the next attempt (lock.lua finds the key
// its own).
func (p *proc) startGrant(a *attempt, g heard) {
	lingered := p.lingering
	p.lingering = false
	if !p.grantUsable(a, g) {
		p.granted = nil
		if lingered {
			p.left() // nobody waits: the leave lets the grant go
		}
		return
	}
	start, token, at := p.grantStart(g), g.token, g.at
	p.closeAttempt()
	p.queued = false
	t := &tenure{locker: a.locker, until: p.until(start, a.lease), untilLease: a.lease, lease: a.lease,
		next: token, end: token + uint64(a.tokens), last: token - 1, since: p.w.now(), granted: true, origin: token}
	t.truth.lease = a.lease
	// (removed behind its back, unless the process had heard of the removal: then counting
	// the grant is the process's own mistake, with no excuse)
	if _, ok := p.w.forced[a.locker]; ok && !p.heardFrom[a.locker] {
		t.removed = "an operator's ForceRelease"
	} else if p.w.restarted >= at {
		t.removed = "an empty restart"
	}
	if p.w.restarted >= at {
		t.wiped = p.w.restarted
	}
	p.ten, p.phase = t, free
	p.w.note("%s: the key is granted to %s (counted from %v ago)", p.name, a.locker, p.w.now().Sub(start))
	if len(p.waiters) == 0 {
		p.releaseTenure()
	}
}

// hear handles a message of the key's channel (dlock's notifier).
func (p *proc) hear(m processor.Message, at int) {
	p.heardFrom[m.From] = true
	if g := p.granted; g != nil && g.locker == m.From && !p.w.opt.Flaws.ForcedGrantKept {
		p.granted = nil // an operator removed the grant before it was counted
	}
	if t := p.ten; t != nil && t.locker == m.From && (p.phase == held || p.phase == free) {
		p.lose(t, "a release of its own locker was heard (ForceRelease)")
	}
	switch {
	case m.Granted:
		if p.attempt == nil || p.attempt.locker != m.Locker {
			return
		}
		switch p.phase {
		case asking, renewing, releasing:
			p.granted = &heard{locker: m.Locker, token: m.Token, server: m.At, heard: p.w.now(), at: at}
		case idle:
			p.startGrant(p.attempt, heard{locker: m.Locker, token: m.Token, server: m.At, heard: p.w.now(), at: at})
		}
	}
}

// grantedNow acts on a grant to a heard while a request was on its way, once the phase is idle.
func (p *proc) grantedNow(a *attempt) {
	if g := p.granted; g != nil && a != nil && p.attempt == a && p.phase == idle {
		p.startGrant(a, *g)
	}
}

// ask: the first waiter asks Redis (lockState.next → ask).
func (p *proc) ask() {
	p.phase = asking
	if p.attempt == nil {
		tokens := 1
		if len(p.waiters) > 1 {
			tokens = block
		}
		locker, _ := p.newLocker()
		p.attempt = &attempt{locker: locker, lease: p.waiters[0], tokens: tokens}
	}
	a := p.attempt
	p.sendLock(pAsk, a.locker, a.lease, true, a.tokens)
}

// try: a goroutine calls TryLock: with the open attempt if the process waits, else with one
// of its own, settled if the key is held.
func (p *proc) try() {
	p.phase, p.tryer = asking, true
	p.tryLingered, p.lingering = p.lingering, false // (dlock's TryLock ends a linger)
	if a := p.attempt; a != nil {
		p.sendLock(pTry, a.locker, a.lease, true, a.tokens)
		return
	}
	locker, _ := p.newLocker()
	p.sendLock(pTry, locker, p.w.opt.Lease, false, 1)
}

// unlock: the owner's final Unlock. It is told first (its holding ends), then the lock is
// passed on within the process or the key let go.
func (p *proc) unlock() {
	p.w.note("%s: the owner (token %d) unlocks", p.name, p.owner.token)
	p.owner = nil
	if p.w.sw.handOff > 0 && len(p.waiters) > 0 {
		p.phase = free
		return
	}
	p.releaseTenure()
}

// relock: the owner's final Unlock in a process whose goroutines take the key again at once
// (lockState.relock): with no goroutine waiting, the release stands in line again with a new
// attempt if it grants the key to another process.
func (p *proc) relock() {
	p.w.note("%s: the owner (token %d) unlocks, expecting to lock again", p.name, p.owner.token)
	p.owner = nil
	if len(p.waiters) > 0 {
		p.phase = free
		return
	}
	t := p.ten
	p.phase, p.owner = releasing, nil
	t.over = true
	p.stopped, p.leaveSent, p.leaveLanded = false, false, false // (it means to want the key again)
	locker, _ := p.newLocker()
	p.attempt, p.waited, p.seen, p.granted = &attempt{locker: locker, lease: t.lease, tokens: 1}, time.Time{}, 0, nil
	p.sendRelease(pRelease, t.locker, t.lease, t.last, t, locker)
}

// endLinger: no goroutine came before the linger's end: the process leaves the line.
func (p *proc) endLinger() {
	p.w.note("%s: the linger ends", p.name)
	p.lingering = false
	p.left()
}

// take: the first waiter takes the free tenure, or renews it first.
func (p *proc) take() {
	t, lease := p.ten, p.waiters[0]
	if !p.mustRenew(t, lease) {
		p.takeNow(lease)
		return
	}
	p.phase = renewing
	tokens := 0
	if t.next+1 >= t.end {
		tokens = block
	}
	yield := p.w.sw.handOff > 0 && p.w.now().Sub(t.since) >= p.w.sw.handOff
	if yield {
		p.queued = true // a yield may put the process back in line, whatever becomes of its reply
	}
	p.taking = p.sendRenew(pTake, t, lease, tokens, yield)
}

// takeNow makes the first waiter the owner, with the next token of the block.
func (p *proc) takeNow(lease time.Duration) {
	t := p.ten
	h := &holding{token: t.next, lease: lease}
	t.last = t.next
	t.next++
	p.waiters = p.waiters[1:]
	p.owner, p.phase = h, held
	p.w.note("%s: a goroutine holds the lock, token %d", p.name, h.token)
	p.w.acquired(p, t, h)
}

func (p *proc) mustRenew(t *tenure, lease time.Duration) bool {
	now := p.w.now()
	return lease != t.lease || t.until.Sub(now) < lease/2 || t.next >= t.end ||
		(p.w.sw.handOff > 0 && now.Sub(t.since) >= p.w.sw.handOff)
}

// expand: the expander renews at 75 % of the lease.
func (p *proc) expand() {
	t := p.ten
	tokens := 0
	if len(p.waiters) > 0 && t.next+1 >= t.end {
		tokens = block
	}
	t.expanding = p.sendRenew(pExpand, t, t.lease, tokens, false)
}

// extend: the owner calls Extend with a new lease.
func (p *proc) extend(lease time.Duration) {
	r := p.sendRenew(pExtend, p.ten, lease, 0, false)
	r.owner = p.owner
	p.extending = r
}

// watchdog ends a tenure whose lease ran out (the expander's Lost).
func (p *proc) watchdog() {
	if t := p.ten; t != nil && !t.over && p.live() && !p.w.now().Before(t.until) {
		p.lose(t, "the lease ran out")
	}
}

// crash: the process dies (kill -9). Its requests on the wire may still arrive.
func (p *proc) crash() {
	p.w.note("%s crashes", p.name)
	p.dead, p.lingering = true, false
	p.owner, p.ten, p.waiters = nil, nil, nil
	p.deaf() // Redis drops the subscription with the connection
}

// deaf ends the process's subscription (a crash, a Close).
func (p *proc) deaf() {
	if p.listening {
		p.unlisten()
		p.listening = false
	}
}

// close: Generator.Close. The owner is told, the waiters end, the tenure is released.
func (p *proc) close() {
	p.w.note("%s closes its Generator", p.name)
	if p.w.opt.Flaws.CloseFreesFirst && p.owner != nil && p.ten != nil && (p.phase == held || p.phase == free) {
		// The flaw of the second review: the key let go before the owner is told.
		t := p.ten
		p.phase, t.over = releasing, true
		p.sendRelease(pRelease, t.locker, t.lease, t.last, t, "")
		p.closed = true
		return
	}
	p.owner = nil
	p.closed, p.lingering = true, false
	if p.ten != nil && (p.phase == held || p.phase == free) {
		p.releaseTenure()
	}
	p.waiters = nil
	p.abandon()
	p.left()
	p.deaf()
}

// tellOwner is the second half of a Close with the flaw CloseFreesFirst.
func (p *proc) tellOwner() {
	p.w.note("%s: Close tells the owner", p.name)
	p.owner = nil
	p.waiters = nil
	p.left()
}

// unreleasedOf names the releases retried meanwhile (p.retried) for a request of another
// tenure than t (dlock names each one in every request that settles while its retry goes on).
func (p *proc) unreleasedOf(t *tenure) []processor.Unreleased {
	var u []processor.Unreleased
	for _, r := range p.retried {
		if r != t {
			u = append(u, processor.Unreleased{Locker: r.locker, Origin: r.origin})
		}
	}
	if p.w.opt.Flaws.NewestRetriedOnly && len(u) > 1 {
		u = u[len(u)-1:]
	}
	return u
}

// naming is how a request's description names the releases retried that it carries.
func naming(u []processor.Unreleased) string {
	s := ""
	for _, r := range u {
		s += ", unreleased " + r.Locker
	}
	return s
}

// retryGiveBack sends a give-back again after it got no answer.
func (p *proc) retryGiveBack(i int) {
	g := p.giveBacks[i]
	p.giveBacks = append(p.giveBacks[:i:i], p.giveBacks[i+1:]...)
	p.sendGiveBack(g)
}

func (p *proc) sendGiveBack(g giveBack) {
	req, what := processor.ReleaseRequest{Locker: g.locker, Unreleased: p.unreleasedOf(g.release)}, "release.lua(%s%s) to give it back"
	if g.release != nil {
		req.Origin, what = g.release.origin, "release.lua(%s%s) again (its release unanswered)"
	}
	r := p.request(pGiveBack, fmt.Sprintf(what, g.locker, naming(req.Unreleased)))
	cfg := p.cfg(g.lease)
	r.locker, r.lease, r.back, r.unrel = g.locker, g.lease, g, req.Unreleased
	r.run = func(ctx context.Context) outcome {
		res, err := p.pr.Unlock(ctx, cfg, req)
		return outcome{res: res, err: err}
	}
	p.w.send(r)
}

// retryRelease is lockState.retryReleaseLocked: the release of t got no answer; it is sent
// again until Redis answers or t's lease is over, and the line is left only after its first
// try, naming it while it goes on.
func (p *proc) retryRelease(t *tenure) {
	p.unreleased++
	p.retried = append(p.retried, t)
	p.sendGiveBack(giveBack{locker: t.locker, lease: t.lease, until: p.w.now().Add(t.lease), release: t})
}

// onGiveBack handles the answer to a give-back, or to a try of a release retried: once the
// retry's first try is answered or failed, the process may leave (naming the release); once the
// retry ends, it counts itself in line (a copy of a request of the tenure may have put it
// there) and leaves.
func (p *proc) onGiveBack(r *request, out outcome) {
	g := r.back
	if g.release != nil && !g.tried {
		g.tried = true
		p.unreleased--
		p.left()
	}
	if out.err != nil && p.w.now().Before(g.until) {
		p.giveBacks = append(p.giveBacks, g)
		return
	}
	t := g.release
	if t == nil {
		return
	}
	p.w.checkRetryTold(p, r, out)
	p.retried = slices.DeleteFunc(p.retried, func(r *tenure) bool { return r == t })
	p.queued = true
	p.left()
}

// ---- tenures ------------------------------------------------------------------------------

func (p *proc) startTenure(r *request, token uint64) *tenure {
	now := p.w.now()
	t := &tenure{locker: r.locker, until: p.until(r.sent, r.lease), untilLease: r.lease, lease: r.lease, setAt: r.order,
		next: token, end: token + uint64(max(r.tokens, 1)), last: token - 1, since: now}
	// removed before its holder heard it was taken: the oracle's record of the window
	if _, ok := p.w.forced[r.locker]; ok {
		t.removed = "an operator's ForceRelease"
	} else if p.w.restarted >= r.ranAt {
		t.removed = "an empty restart"
	}
	if p.w.restarted >= r.ranAt {
		t.wiped = p.w.restarted
	}
	t.truth.lease, t.truth.order = r.lease, r.order
	p.ten, p.phase = t, free
	return t
}

// renewed is tenure.renewed: the key lives at least until the request's send time plus its
// lease; a request that sets the lease renewals use (a taker's, Extend) does so only when no
// newer setting was made (the reply of an older request never overwrites a newer setting).
func (p *proc) renewed(t *tenure, r *request, first uint64, setting bool) {
	if u := p.until(r.sent, r.lease); u.After(t.until) {
		t.until, t.untilLease = u, r.lease
	}
	if setting || p.w.opt.Flaws.ReplyOverwritesSetting {
		if r.order > t.setAt || p.w.opt.Flaws.ReplyOverwritesSetting {
			t.lease, t.setAt = r.lease, r.order
		}
	}
	if setting && r.order > t.truth.order {
		t.truth.lease, t.truth.order = r.lease, r.order
	}
	if r.tokens > 0 && first >= t.end {
		t.next, t.end = first, first+uint64(r.tokens)
	}
	p.w.checkSetting(p, t)
}

// releaseTenure is lockState.releaseLocked: no more passes or renewals; release.lua.
func (p *proc) releaseTenure() {
	t := p.ten
	p.phase, p.owner = releasing, nil
	t.over = true
	p.sendRelease(pRelease, t.locker, t.lease, t.last, t, "")
}

// endTenure ends t without a word to Redis: the phase goes back to idle.
func (p *proc) endTenure(t *tenure) {
	t.over = true
	if p.ten == t {
		p.ten, p.owner, p.phase = nil, nil, idle
		p.left()
	}
}

// lose is lockState.loseLocked: no pass after it; the owner is told; the key is given back.
func (p *proc) lose(t *tenure, why string) {
	if t.over || p.ten != t || p.phase == releasing {
		return
	}
	p.w.note("%s: the tenure of %s is lost (%s)", p.name, t.locker, why)
	p.endTenure(t)
	p.giveBack(t.locker, t.lease)
}

// giveBack is lockState.giveBackLocked. The process may stand in line now without knowing it
// (a copy of the acquisition's lock.lua may still arrive and find the key held), so it counts
// itself in line: once nobody waits, it leaves.
func (p *proc) giveBack(locker string, lease time.Duration) {
	p.queued = true
	p.sendGiveBack(giveBack{locker: locker, lease: lease, until: p.w.now().Add(lease)})
	p.left()
}

// ---- replies ------------------------------------------------------------------------------

func (p *proc) onReply(r *request, out outcome) {
	if p.dead {
		return
	}
	switch r.purpose {
	case pAsk, pTry:
		p.onAsk(r, out)
	case pTake:
		p.onTake(r, out)
	case pExpand:
		if r.ten.expanding == r {
			r.ten.expanding = nil
		}
		t := r.ten
		if t.over || p.ten != t || out.err != nil {
			return
		}
		if out.res.Outcome == processor.Renewed {
			p.renewed(t, r, out.res.Token, false)
			return
		}
		p.lose(t, "a renewal found the key "+out.res.Outcome.String())
	case pExtend:
		p.extending = nil
		t := r.ten
		if p.ten != t || out.err != nil {
			return
		}
		if out.res.Outcome != processor.Renewed {
			p.lose(t, "Extend found the key "+out.res.Outcome.String())
			return
		}
		if p.owner == r.owner {
			p.renewed(t, r, 0, true)
		} else if u := p.until(r.sent, r.lease); u.After(t.until) {
			t.until, t.untilLease = u, r.lease
		}
	case pRelease:
		t := r.ten
		if out.err == nil && out.res.Outcome != processor.Released {
			p.queued = true // a copy of the lock.lua that took it may have put it in line since
		}
		next := p.attempt
		stood := false // in line again with r.next (relock), as the answer says
		if r.next != "" && next != nil && next.locker == r.next && out.err == nil && out.res.Outcome == processor.Released {
			if stood = out.res.Queued; stood {
				p.queued = true
				p.waiting(r.sent, out.res.Token)
				p.lingering = len(p.waiters) == 0 && p.live()
			} else {
				p.closeAttempt()
			}
		}
		// (its tombstone lives as long as a settled mark: a release later than that is the
		// documented window of requests later than their marks)
		// (nor is a release after an empty restart since: its marks are gone)
		if out.err == nil && out.res.Outcome == processor.Settled && t.removed == "an operator's ForceRelease" &&
			r.ranTime.Sub(p.w.forcedAt[t.locker]) < p.w.lifeOf(p.w.op) && p.w.forced[t.locker] > p.w.restarted {
			p.w.fail(ruleLossTold, "%s's release of %s, which an operator removed, answered settled: its Unlock does not report the loss", p.name, t.locker)
		}
		// (nothing of the tenure settles its acquisition after an empty restart wiped its
		// holding, but a refused late copy of its take, which remembers it as removed too)
		if out.err == nil && out.res.Outcome == processor.Settled && t.removed == "an empty restart" && !r.afterBare && r.sent.Before(t.until) {
			p.w.fail(ruleLossTold, "%s's release of %s, whose holding an empty restart wiped before any release of it ran, answered settled: its Unlock does not report the loss", p.name, t.locker)
		}
		if p.ten == t {
			p.ten, p.owner, p.phase = nil, nil, idle
		}
		if out.err != nil {
			p.retryRelease(t)
		}
		if stood {
			p.grantedNow(next)
		}
		p.left()
	case pLeave:
		if out.err != nil {
			p.queued = true // perhaps still in line: leave again (now, if nobody waits)
			p.left()
		}
	case pGiveBack:
		p.onGiveBack(r, out)
	}
}

func (p *proc) onAsk(r *request, out outcome) {
	if p.asking == r {
		p.asking = nil
	}
	try := r.purpose == pTry
	if try {
		p.tryer = false
	}
	p.phase = idle
	a := p.attempt
	mine := a != nil && a.locker == r.locker // a request of the open attempt
	taken := out.err == nil && out.res.Outcome == processor.Taken
	if taken && !p.w.now().Before(p.until(r.sent, r.lease)) {
		taken, out.err = false, fmt.Errorf("no reply came before the lease ran out")
	}
	switch {
	case out.err != nil:
		p.queued = true // it may stand in line, or hold the key
		if !mine {
			p.giveBack(r.locker, r.lease) // a TryLock's own attempt
		} else {
			p.grantedNow(a)
		}
		p.left()
		return
	case !taken:
		if mine && out.res.Outcome == processor.Held {
			p.queued = true
			p.waiting(r.sent, out.res.Seen.Fence)
			news := p.granted != nil // (a grant heard on the way: taken, or found unusable, it is news)
			p.grantedNow(a)
			if try && p.tryLingered && !news && out.res.Seen.Heard && p.attempt == a && p.phase == idle && len(p.waiters) == 0 && p.live() {
				p.lingering = true // found held: it lingers again in its place (unbarge)
			}
		} else if mine && out.res.Outcome == processor.Settled {
			p.closeAttempt()
		}
		p.left()
		return
	}
	if mine {
		p.closeAttempt()
	}
	p.queued = false
	t := p.startTenure(r, out.res.Token)
	t.origin = out.res.Origin
	if p.closed {
		p.releaseTenure() // taken as Close ran: given back
		return
	}
	if try {
		if p.mustRenew(t, r.lease) {
			// (dlock renews first; the model lets the TryLock go: it got the key but not the lock)
			p.releaseTenure()
			return
		}
		h := &holding{token: t.next, lease: r.lease}
		t.last = t.next
		t.next++
		p.owner, p.phase = h, held
		p.w.note("%s: the TryLock holds the lock, token %d", p.name, h.token)
		p.w.acquired(p, t, h)
		return
	}
	if len(p.waiters) == 0 {
		p.left()
		return
	}
	p.take()
}

func (p *proc) onTake(r *request, out outcome) {
	if p.taking == r {
		p.taking = nil
	}
	t := r.ten
	if p.ten != t || p.phase != renewing {
		return
	}
	uncertain := out.err != nil || (out.res.Outcome == processor.Settled && r.yield)
	next := p.attempt
	switch {
	case uncertain && r.yield:
		p.queued = true
		p.endTenure(t)
		p.giveBack(t.locker, t.lease)
		p.grantedNow(next)
	case uncertain:
		p.phase = free
		p.left()
	case out.res.Outcome == processor.Renewed:
		p.renewed(t, r, out.res.Token, true)
		if r.yield {
			t.since, p.queued = p.w.now(), false
			p.closeAttempt() // (nobody waited: it is not in line)
		}
		p.phase = free
		if len(p.waiters) == 0 {
			p.left()
		} else if !p.mustRenew(t, p.waiters[0]) {
			p.takeNow(p.waiters[0])
		}
	case out.res.Outcome == processor.Yielded:
		p.queued = true
		if next != nil {
			p.waiting(r.sent, out.res.Token) // it ran before any grant to next could
		}
		p.endTenure(t)
		p.grantedNow(next)
	default:
		p.lose(t, "a renewal before a pass found the key "+out.res.Outcome.String())
	}
}

// canonical writes the process's state with times relative to now, for counting states.
func (p *proc) canonical() string {
	now := p.w.now()
	s := fmt.Sprintf("%s/%v/%v/%d/%v/%v/%v/%v/%v/%d/%v;", p.name, p.phase, p.queued, len(p.waiters), p.owner != nil, p.dead, p.closed, p.tryer, p.attempt != nil,
		p.unreleased, len(p.retried))
	if t := p.ten; t != nil {
		s += fmt.Sprintf("t%v/%v/%d/%v;", t.until.Sub(now).Milliseconds(), t.lease, t.end-t.next, t.over)
	}
	return s
}
