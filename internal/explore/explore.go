// Package explore is a deterministic explorer of schedules over the real Lua scripts of
// package processor. Two or three simulated processes — each the Go side of package dlock
// for one key, reduced to what decides its requests and beliefs (model.go) — and an operator
// send the library's requests; the explorer decides, step by step, what happens to each: run
// by Redis in order, late (after later requests of its own process), twice, after its caller
// gave up, or never; its reply heard, or lost. It owns the server clock (miniredis), so keys
// expire exactly when a schedule lets time pass, and Redis may restart empty. After every
// step it checks the invariants of docs/design.md (check.go); a schedule that breaks one is
// shrunk to a minimal one and printed as a readable sequence.
//
// Schedules are random walks, each from its own seed, with a swarm configuration (which kinds
// of fault it may use, how many processes, whether the lock passes within a process): the
// same seed gives the same schedule, so every failure replays. On a redis-server (whose clock
// the explorer does not own) schedules have no ticks and long leases, and check that the
// scripts behave there as on miniredis.
package explore

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/processor"
)

// Options configures an Explorer.
type Options struct {
	// Lease is the handles' lease (a second handle of each process has twice as long).
	// Default: 1 s on miniredis, 60 s on a redis-server.
	Lease time.Duration
	// Steps is the length of a schedule before everyone leaves. Default 40.
	Steps int
	// Scripts replaces scripts by name (processor.Options.Scripts): a mutant to be caught.
	Scripts map[string]string
	// Flaws puts known flaws back into the Go side of the simulated processes.
	Flaws Flaws
	// Addr is a redis-server to run on instead of miniredis. Default "": miniredis.
	Addr string
	// Seed is the first schedule's seed; schedule i uses Seed + i. Default 1.
	Seed uint64
	// Corpus are schedules a search starts from besides its own seed corpus (kept ones).
	Corpus []Schedule
	// GapEvery and GapWindow, when set, are every processor's window for processes not in
	// line (WithForeignWindow).
	GapEvery, GapWindow time.Duration
}

// Flaws are defects of the Go side that the explorer can put back, to show that it finds them.
type Flaws struct {
	// ReplyOverwritesSetting lets the reply of any renewal set the lease the tenure renews
	// with, even one sent before a newer setting (Extend).
	ReplyOverwritesSetting bool
	// CloseFreesFirst makes Close let the key go before it tells the owner.
	CloseFreesFirst bool
	// NoDriftAllowance counts a lease out at exactly its request's send time plus the lease.
	NoDriftAllowance bool
	// ForcedGrantKept keeps a grant heard while a request was on its way when the operator's
	// removal of it is heard before the request's answer: the answer then counts it.
	ForcedGrantKept bool
	// GrantFromArrival counts a granted lease from the grant message's arrival, not from the
	// process's last request that showed it waiting plus Redis's time from it to the grant.
	GrantFromArrival bool
	// NewestRetriedOnly names only the newest release retried in a request, as one slot did
	// before processor.Unreleased was a list: an older retry of another holding is not named.
	NewestRetriedOnly bool
}

// Report is what a run found.
type Report struct {
	Schedules int        // schedules explored
	Steps     int        // steps taken in all
	States    int        // distinct states seen (server, processes, requests in flight)
	Violation *Violation // the first violation found, shrunk; nil when none
	Reached   Reach      // how often the schedules reached situations that few reach
}

// Reach counts how often schedules reached situations that a random walk seldom does, and
// that a guard of the scripts is there for (on miniredis; a redis-server's are not counted).
type Reach struct {
	// StaleOwnTakes counts copies of the take of the very acquisition that holds the key that
	// Redis ran while its process waited in line with a newer attempt: the process had counted
	// that tenure lost (lock.lua must refuse the copy, or it takes the process out of line).
	StaleOwnTakes int
	// RenewalsOfRetaken counts renewals Redis ran of a tenure whose holding an empty restart
	// wiped, while the key held the tenure's locker again (a late copy of its take, or a grant
	// to the entry such a copy made): renew.lua must find the holding is not the one the
	// tenure began with. RunShared counts the renewals, releases and downgrades of a holding
	// an empty restart wiped that Redis ran while it held the holding's locker again (a late
	// copy of its take): shared.lua must find the holding's token is not the one they name.
	RenewalsOfRetaken int
	// UnreleasedLost counts requests Redis ran that named a release retried
	// (processor.Unreleased) whose locker no request run had ended, while the key did not
	// hold it: the script must mark it removed as it settles it, so that the retry tells the
	// loss.
	UnreleasedLost int
	// UnreleasedLostTogether counts those requests that named two or more such releases: the
	// script must mark each removed, not only the newest.
	UnreleasedLostTogether int
	// CountsSetAgain counts copies of a semaphore's count change (RunShared) that an empty
	// restart let set their count again: the known gap of SetPermits, exempt from the rule
	// permits once.
	CountsSetAgain int
}

// Violation is a schedule that breaks an invariant.
type Violation struct {
	Rule   string   // the invariant's name
	Detail string   // what was seen
	Seed   uint64   // the schedule's seed
	Trace  []string // what happened, step by step (the shrunk schedule)
	Steps  []string // the shrunk schedule's choices
}

// String gives the rule broken, its detail and the shrunk schedule's trace, one step a line.
func (v *Violation) String() string {
	return fmt.Sprintf("%s: %s\nschedule (seed %d, shrunk to %d steps):\n%s", v.Rule, v.Detail, v.Seed, len(v.Steps), strings.Join(v.Trace, "\n"))
}

// Explorer runs schedules.
type Explorer struct {
	opt    Options
	be     backend
	states map[uint64]struct{}
}

// New returns an Explorer on miniredis, or on the redis-server at opt.Addr.
func New(opt Options) (*Explorer, error) {
	if opt.Steps == 0 {
		opt.Steps = 40
	}
	if opt.Seed == 0 {
		opt.Seed = 1
	}
	var be backend
	if opt.Addr != "" {
		be = newServer(opt.Addr)
		if opt.Lease == 0 {
			opt.Lease = time.Minute
		}
	} else {
		m, err := newMini()
		if err != nil {
			return nil, err
		}
		be = m
		if opt.Lease == 0 {
			opt.Lease = time.Second
		}
	}
	return &Explorer{opt: opt, be: be, states: map[uint64]struct{}{}}, nil
}

// Close stops the explorer's server.
func (e *Explorer) Close() { e.be.close() }

// Run explores schedules until budget has passed, max schedules ran (0: no limit), a
// violation was found (then shrunk), or ctx ended.
//
// The search is guided by the states it reaches, as a coverage-guided fuzzer is by the code
// it covers: a schedule that reached states never seen before joins a corpus, and most new
// schedules replay a prefix of one from the corpus and walk on at random from there. One in
// ten replays a seed situation (seedCorpus) whole, since a prefix cut short of one seldom
// gets there. Schedule i draws its choices from seed Seed+i, so a run is the same every time.
func (e *Explorer) Run(ctx context.Context, budget time.Duration, maxSchedules int) (Report, error) {
	var rep Report
	type entry struct {
		seed uint64 // its swarm
		keys []string
	}
	var corpus []entry
	for _, keys := range seedCorpus {
		corpus = append(corpus, entry{0, keys}) // 0: in the schedule's own swarm
	}
	for _, k := range e.opt.Corpus {
		corpus = append(corpus, entry{k.Seed, k.Steps})
	}
	until := time.Now().Add(budget)
	for i := 0; (maxSchedules == 0 || i < maxSchedules) && time.Now().Before(until) && ctx.Err() == nil; i++ {
		walk := rand.New(rand.NewPCG(e.opt.Seed+uint64(i), 0x9e3779b97f4a7c15))
		seed, prefix := e.opt.Seed+uint64(i), []string(nil)
		switch x := walk.IntN(10); {
		case x == 0: // a seed situation whole: a walk from a prefix cut short of it seldom gets there
			prefix = seedCorpus[walk.IntN(len(seedCorpus))]
		case x < 6 && len(corpus) > 0:
			c := corpus[walk.IntN(len(corpus))]
			prefix = c.keys[:walk.IntN(len(c.keys)+1)]
			if c.seed != 0 {
				seed = c.seed
			}
		}
		before := len(e.states)
		w, err := e.play(seed, prefix, walk)
		if err != nil {
			return rep, err
		}
		rep.Schedules++
		rep.Steps += w.step
		rep.Reached.Add(w.reach)
		if w.violation != nil {
			rep.Violation = e.shrink(seed, w)
			break
		}
		if len(e.states) > before {
			if len(corpus) == maxCorpus {
				corpus[walk.IntN(maxCorpus)] = entry{seed, w.chosen}
			} else {
				corpus = append(corpus, entry{seed, w.chosen})
			}
		}
	}
	rep.States = len(e.states)
	return rep, nil
}

// maxCorpus is how many schedules the corpus keeps.
const maxCorpus = 2000

// seedCorpus are the situations a search starts from besides the empty one, as a fuzzer's
// seed inputs: a holder; a holder with a goroutine of its own waiting; each with another
// process waiting, before and after the hand-off limit; a yield check on its way; a copy of
// the take of a tenure its process counted lost, arriving as the process waits again; a copy
// of a take arriving after an empty restart, and a renewal of its tenure after it; a release
// lost, with its retry's first try, under a tenure an empty restart wiped, the process leaving
// meanwhile (naming the release) and the retry trying again; two such releases of one key
// retried at once, as a newer take of the process runs; a copy of a TryLock's take refused
// after an empty restart, before its holder unlocks; a copy of a take refused as stale while
// its holding's release is retried. Random walks go on from their
// prefixes, each time in the swarm of the schedule that replays it.
var seedCorpus = func() [][]string {
	hold := []string{"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A1", "the reply to A1 arrives"}
	local := append([]string{"A: a goroutine calls Lock"}, hold...)
	other := []string{"B: a goroutine calls Lock", "B: the first waiter asks Redis", "Redis runs B1", "the reply to B1 arrives"}
	limit := []string{"100ms pass"}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	check := []string{"A: the owner unlocks", "A: the first waiter takes the free tenure"}
	// A's tenure counted lost while Redis still holds it (its renewal ran, its reply was
	// lost, the lease ran out), its goroutine waiting again with a newer attempt, and a copy
	// of the tenure's own take on the wire.
	copied := []string{"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A1 and a copy stays on the wire", "the reply to A1 arrives"}
	lost := cat([]string{"A: a goroutine calls Lock"}, copied, []string{"500ms pass", "250ms pass", "A: the expander renews", "Redis runs A2",
		"the reply to A2 is lost", "250ms pass", "A: the first waiter asks Redis", "Redis runs A4", "Redis runs A1'"})
	// Redis restarts empty under A's tenure; B takes the key and lets it go; the copy of A's
	// take takes it anew; A's expander renews.
	wiped := cat(copied, []string{"Redis restarts empty"}, other, []string{"B: the owner unlocks", "Redis runs B2", "Redis runs A1'",
		"500ms pass", "250ms pass", "A: the expander renews", "Redis runs A2"})
	// Redis restarts empty under A's tenure and B takes the key; A's relocking release is
	// lost, and so is its retry's first try; A leaves, naming the release (the key holds B's);
	// the retry tries again.
	unreleased := cat(hold, []string{"Redis restarts empty"}, other, []string{"A: the owner unlocks, expecting to lock again (relock)",
		"A2 is lost on the way", "the reply to A2 arrives", "A3 is lost on the way", "the reply to A3 arrives", "Redis runs A4",
		"A: gives back pa-1 again", "Redis runs A5"})
	// Two empty restarts each wipe a holding of A whose release goes unanswered, the older
	// retry's first try lost too; A gives its first attempt back again and takes the key with a
	// third, naming both retried releases.
	twice := cat(hold, []string{"Redis restarts empty", "A: the owner unlocks", "A stops waiting for A2", "A2 is lost on the way",
		"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A4", "the reply to A4 arrives",
		"Redis restarts empty", "A: the owner unlocks", "A stops waiting for A5", "A5 is lost on the way",
		"A stops waiting for A3", "A3 is lost on the way", "A: gives back pa-1 again",
		"A: a goroutine calls Lock", "A: the first waiter asks Redis", "Redis runs A8"})
	// A's TryLock takes the key, a copy of it on the wire; Redis restarts empty and B takes
	// the key; the copy is refused; A unlocks.
	refused := []string{"A: a goroutine calls TryLock", "Redis runs A1 and a copy stays on the wire", "the reply to A1 arrives",
		"Redis restarts empty", "B: a goroutine calls Lock", "B: the first waiter asks Redis", "Redis runs B1", "the reply to B1 arrives",
		"Redis runs A1'", "A: the owner unlocks", "Redis runs A2", "the reply to A2 arrives"}
	// A's release goes unanswered (retried) and A asks again, in line behind its own holding;
	// the copy of the holding's take is refused as stale; the release runs, and its retry.
	stale := cat(copied, []string{"A: the owner unlocks", "A stops waiting for A2", "A: a goroutine calls Lock",
		"A: the first waiter asks Redis", "Redis runs A4", "Redis runs A1'", "Redis runs A2", "Redis runs A3", "the reply to A3 arrives"})
	return [][]string{hold, local, cat(hold, other), cat(local, other), cat(local, limit), cat(local, other, limit),
		cat(local, limit, check), lost, wiped, unreleased, twice, refused, stale}
}()

// Add adds o's counts to r's.
func (r *Reach) Add(o Reach) {
	r.StaleOwnTakes += o.StaleOwnTakes
	r.RenewalsOfRetaken += o.RenewalsOfRetaken
	r.UnreleasedLost += o.UnreleasedLost
	r.UnreleasedLostTogether += o.UnreleasedLostTogether
	r.CountsSetAgain += o.CountsSetAgain
}

// Replay plays one schedule again: the swarm of seed, and the choices keys.
func (e *Explorer) Replay(seed uint64, keys []string) (*Violation, []string, error) {
	w, err := e.play(seed, keys, nil)
	if err != nil {
		return nil, nil, err
	}
	if w.violation != nil {
		w.violation.Seed, w.violation.Trace, w.violation.Steps = seed, w.trace, w.chosen
	}
	return w.violation, w.trace, nil
}

// swarm is a schedule's configuration: which faults and events it may use, and how often.
//
// Process actions, time, the operator and restarts are chosen step by step with the weights of
// the swarm. The network is planned instead: as a request is sent, it is given its fate —
// delivered promptly, late (after up to lateMax more steps), run and sent again later (a copy),
// or lost — and so is each reply as Redis answers. A random walk then delivers what is due in
// its turn. So a copy held back for twenty steps, while other processes go on, is as likely as
// one delivered at once: chosen step by step, it almost never would be.
//
// A third of the swarms hold requests, replies and messages back for up to a hundred steps
// instead of twenty, a quarter walk three times as long, and a quarter of those that restart
// Redis do so ten times as often: a copy can then come back after several tenures, or across
// several empty restarts. (These draws come after the others, so that a kept schedule's swarm
// is what it was.)
type swarm struct {
	procs   int
	handOff time.Duration
	weights [nKinds]float64
	ticks   []time.Duration

	late, copies, drop   float64 // the chances of a request's fates
	lateReply, loseReply float64 // and of a reply's
	lateMax              int     // how many steps at most a late request, reply or message is held back
	long                 bool    // the walk takes three times the Options' steps
}

type kind uint8

const (
	kProc   kind = iota // a process goes on: asks, unlocks, passes, renews, gives back
	kWant               // a goroutine calls Lock
	kNet                // what the network plan makes due
	kGiveUp             // a waiter or caller gives up
	kTick
	kForce
	kRestart
	kCrash
	kClose
	kExtend
	kTry
	kMixed  // a second handle with another lease
	kRelock // an Unlock that stands in line again
	nKinds
)

// A walk picks a kind by its weight first, then one of the actions of that kind: a kind with
// many actions (many requests on the wire) does not crowd out the others.
func newSwarm(r *rand.Rand, owned bool, lease time.Duration) swarm {
	sw := swarm{procs: 2 + r.IntN(2)}
	if r.IntN(3) > 0 {
		sw.handOff = lease / 10
	}
	base := [nKinds]float64{kProc: 5, kWant: 1.5, kNet: 5, kGiveUp: 0.5, kTick: 1, kForce: 0.2, kRestart: 0.1, kCrash: 0.1,
		kClose: 0.1, kExtend: 0.5, kTry: 0.3, kMixed: 0.3, kRelock: 2}
	for k := range base {
		sw.weights[k] = base[k]
		// Each optional kind is left out of a third of the schedules (swarm testing): a
		// schedule without crashes goes deeper into what copies do, and so on.
		if kind(k) >= kGiveUp && r.IntN(3) == 0 {
			sw.weights[k] = 0
		}
	}
	if !owned {
		sw.weights[kTick] = 0
	}
	chance := func(p float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return p * (0.25 + 1.5*r.Float64())
	}
	sw.late, sw.copies, sw.drop = chance(0.15), chance(0.15), chance(0.04)
	sw.lateReply, sw.loseReply = chance(0.15), chance(0.05)
	sw.ticks = []time.Duration{time.Millisecond, lease / 10, lease / 4, lease / 2, lease}
	sw.lateMax = 20
	if r.IntN(3) == 0 {
		sw.lateMax = 100
	}
	sw.long = r.IntN(4) == 0
	if r.IntN(4) == 0 {
		sw.weights[kRestart] *= 10
	}
	return sw
}

// plan gives a request sent now its fate, during a random walk.
func (w *world) plan(r *request) {
	if w.rng == nil {
		return
	}
	x := w.rng.Float64()
	switch {
	case x < w.sw.drop:
		r.fate = fateDrop
	case x < w.sw.drop+w.sw.copies:
		r.fate, r.copyDelay = fateCopy, w.later()-w.step
	}
	if w.rng.Float64() < w.sw.late {
		r.due = w.later()
	}
}

// later is the step a late request, reply or message is due at, during a random walk: from
// the next step to the swarm's lateMax steps on.
func (w *world) later() int { return w.step + 1 + w.rng.IntN(w.sw.lateMax) }

// planReply gives a reply its fate, during a random walk.
func (w *world) planReply(rp *reply) {
	if w.rng == nil {
		return
	}
	if w.rng.Float64() < w.sw.loseReply {
		rp.lost = true
	}
	if w.rng.Float64() < w.sw.lateReply {
		rp.due = w.later()
	}
}

// action is one thing a schedule may do next.
type action struct {
	key    string
	kind   kind
	weight float64
	do     func()
}

func (w *world) enabled() []action {
	var acts []action
	add := func(k kind, key string, weight float64, do func()) {
		if w.sw.weights[k] == 0 {
			weight = 0 // left out of this swarm (still possible when replaying choices)
		}
		acts = append(acts, action{key: key, kind: k, weight: weight, do: do})
	}
	lease := w.opt.Lease
	now := w.now()
	for _, p := range w.procs {
		if p.closed && !p.dead {
			if p.owner != nil {
				add(kProc, p.name+": Close tells the owner", 1, p.tellOwner)
			}
			for i, g := range p.giveBacks { // Close waits for them
				add(kProc, p.name+": gives back "+g.locker+" again", 1, func() { p.retryGiveBack(i) })
			}
		}
		if !p.live() {
			continue
		}
		if len(p.waiters) < 2 {
			add(kWant, p.name+": a goroutine calls Lock", 1, func() { p.want(lease) })
			add(kMixed, p.name+": a goroutine calls Lock on a handle of twice the lease", 1, func() { p.want(2 * lease) })
		}
		if len(p.waiters) > 0 {
			add(kGiveUp, p.name+": the first waiter gives up", 1, p.giveUp)
		}
		if p.phase == idle && len(p.waiters) > 0 {
			add(kProc, p.name+": the first waiter asks Redis", 1, p.ask) // (or the poller has it ask)
		}
		if p.phase == idle && !p.tryer && p.owner == nil {
			add(kTry, p.name+": a goroutine calls TryLock", 1, p.try)
		}
		if p.owner != nil && p.phase == held {
			add(kProc, p.name+": the owner unlocks", 1, p.unlock)
			if p.w.sw.handOff > 0 {
				add(kRelock, p.name+": the owner unlocks, expecting to lock again (relock)", 1, p.relock)
			}
			if p.extending == nil {
				add(kExtend, p.name+": the owner extends to twice the lease", 1, func() { p.extend(2 * lease) })
				add(kExtend, p.name+": the owner extends to half the lease", 1, func() { p.extend(lease / 2) })
			}
		}
		if p.lingering {
			add(kProc, p.name+": the linger ends", 0.3, p.endLinger)
		}
		if p.phase == free && len(p.waiters) > 0 {
			add(kProc, p.name+": the first waiter takes the free tenure", 1, p.take)
		}
		if t := p.ten; t != nil && !t.over && t.expanding == nil && p.phase != releasing && !now.Before(t.until.Add(-t.lease/4)) {
			add(kProc, p.name+": the expander renews", 1, p.expand)
		}
		for i, g := range p.giveBacks {
			add(kProc, p.name+": gives back "+g.locker+" again", 1, func() { p.retryGiveBack(i) })
		}
		add(kCrash, p.name+": crashes", 1, p.crash)
		add(kClose, p.name+": closes", 1, p.close)
	}
	// The network: every variant stays possible (for replaying choices), but a walk gives
	// weight only to what the plan made due.
	for i, r := range w.flight {
		due := r.due <= w.step
		weight := func(f fate) float64 {
			if due && r.fate == f {
				return 1
			}
			return 0
		}
		add(kNet, "Redis runs "+r.id+copyTag(r), weight(fatePrompt), func() { w.deliver(i, false) })
		add(kNet, "Redis runs "+r.id+copyTag(r)+" and a copy stays on the wire", weight(fateCopy), func() { w.deliver(i, true) })
		add(kNet, r.id+copyTag(r)+" is lost on the way", weight(fateDrop), func() { w.drop(i) })
		if r.awaited && r.p != nil {
			add(kGiveUp, r.p.name+" stops waiting for "+r.id, 0.3, func() { w.stopWaiting(r) })
		}
	}
	first := map[*proc]bool{} // a process hears its channel's messages in the order they were published
	for i, n := range w.msgs {
		if first[n.to] {
			continue
		}
		first[n.to] = true
		due := 0.0
		if n.due <= w.step {
			due = 1
		}
		lost, heard := 0.0, due
		if n.lost {
			lost, heard = due, 0
		}
		add(kNet, n.to.name+" hears "+n.what, heard, func() { w.hear(i, false) })
		add(kNet, n.to.name+" does not hear "+n.what, lost, func() { w.hear(i, true) })
	}
	for i, rp := range w.replies {
		due := 0.0
		if rp.due <= w.step {
			due = 1
		}
		lost, heard := 0.0, due
		if rp.lost {
			lost, heard = due, 0
		}
		add(kNet, "the reply to "+rp.r.id+" arrives", heard, func() { w.receive(i, false) })
		add(kNet, "the reply to "+rp.r.id+" is lost", lost, func() { w.receive(i, true) })
	}
	for _, d := range w.sw.ticks {
		add(kTick, fmt.Sprintf("%v pass", d), 1, func() { w.tick(d) })
	}
	add(kForce, "the operator force-releases the holder it sees", 1, w.force)
	add(kRestart, "Redis restarts empty", 1, w.restart)
	return acts
}

func copyTag(r *request) string {
	if r.copy {
		return "'"
	}
	return ""
}

// stopWaiting: r's caller gives up (its context ends) before the reply; r may still run.
func (w *world) stopWaiting(r *request) {
	w.note("%s stops waiting for %s", r.p.name, r.id)
	r.awaited = false
	for i, rp := range w.replies {
		if rp.r == r {
			w.replies = append(w.replies[:i:i], w.replies[i+1:]...)
			break
		}
	}
	r.p.onReply(r, outcome{err: errTimeout})
}

// play runs one schedule in the swarm of seed: the choices keys (each skipped when it is not
// possible at its turn), then, with walk, random choices up to the schedule's length.
func (e *Explorer) play(seed uint64, keys []string, walk *rand.Rand) (*world, error) {
	e.be.reset()
	cfg, err := domain.NewDLockConfig("EXPLORE", "key", e.opt.Lease)
	if err != nil {
		return nil, err
	}
	w := &world{opt: e.opt, be: e.be, cfg: cfg, forced: map[string]int{}, forcedBy: map[string]bool{}, ended: map[string]end{},
		gone: map[string]bool{}, forcedAt: map[string]time.Time{}, revivals: map[string]bool{}, entries: map[string]entry{},
		tokens: map[uint64]string{}, states: e.states}
	w.sw = newSwarm(rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), e.be.owned(), e.opt.Lease)
	mk := func(mark string) (*processor.RedisLockProcessor, error) {
		return processor.NewRedisLockProcessor(e.be.client(), processor.Options{Publish: true, Mark: mark, Scripts: e.opt.Scripts, GapEvery: e.opt.GapEvery, GapWindow: e.opt.GapWindow})
	}
	if w.op, err = mk(""); err != nil {
		return nil, err
	}
	for i := 0; i < w.sw.procs; i++ {
		name := string(rune('A' + i))
		pr, err := mk("p" + strings.ToLower(name) + "-")
		if err != nil {
			return nil, err
		}
		p := &proc{w: w, name: name, mark: "p" + strings.ToLower(name) + "-", pr: pr, heardFrom: map[string]bool{}}
		if seed>>(8+i)&1 == 1 { // (bits of the seed, not draws: the swarm's draws stay as they were)
			p.unlisten, p.listening = e.be.listen(processor.ProcessChannel(cfg, p.mark))
		}
		p.originOnRelease = seed>>(12+i)&1 == 1
		w.procs = append(w.procs, p)
	}
	listen := ""
	for _, p := range w.procs {
		if p.listening {
			listen += " " + p.name
		}
	}
	w.note("%d processes; hand-off limit %v; lease %v; listening on their channels:%s", w.sw.procs, w.sw.handOff, e.opt.Lease, cmp.Or(listen, " none"))

	w.rng = walk // plans the network for every request, the replayed ones' included
	for i := 0; w.violation == nil; i++ {
		var a *action
		acts := w.enabled()
		switch {
		case i < len(keys):
			for j := range acts {
				if acts[j].key == keys[i] {
					a = &acts[j]
					break
				}
			}
			if a == nil {
				continue
			}
		case walk != nil && len(w.chosen) < w.steps():
			if a = pick(walk, acts, w.sw.weights); a == nil {
				break
			}
		}
		if a == nil {
			break
		}
		w.step++
		w.chosen = append(w.chosen, a.key)
		a.do()
		if err := w.observe(); err != nil {
			return nil, err
		}
	}
	if w.violation == nil {
		w.drain()
	}
	if w.violation == nil {
		w.residue()
	}
	return w, nil
}

// steps is how long a random walk goes on before everyone leaves.
func (w *world) steps() int {
	if w.sw.long {
		return 3 * w.opt.Steps
	}
	return w.opt.Steps
}

// pick chooses a kind by the swarm's weights among the kinds with an action of positive
// weight, then an action of that kind by the actions' own weights.
func pick(rng *rand.Rand, acts []action, weights [nKinds]float64) *action {
	var in [nKinds]float64 // the weight of each kind's actions
	total := 0.0
	for _, a := range acts {
		if a.weight > 0 {
			if in[a.kind] == 0 {
				total += weights[a.kind]
			}
			in[a.kind] += a.weight
		}
	}
	if total == 0 {
		return nil
	}
	x := rng.Float64() * total
	k := kind(0)
	for ; k < nKinds-1; k++ {
		if in[k] > 0 {
			if x -= weights[k]; x < 0 {
				break
			}
		}
	}
	for in[k] == 0 { // rounding left x at the end
		k--
	}
	y := rng.Float64() * in[k]
	var last *action
	for i := range acts {
		if acts[i].kind == k && acts[i].weight > 0 {
			last = &acts[i]
			if y -= acts[i].weight; y < 0 {
				return last
			}
		}
	}
	return last
}

// observe reads the server, checks the invariants and counts the state.
func (w *world) observe() error {
	s, err := w.be.snapshot()
	if err != nil {
		return err
	}
	w.check(s)
	w.checkKept(s, w.lastWant)
	w.lastWant = s.keys[processor.WantKey(w.cfg)].hash
	w.states[w.stateHash(s)] = struct{}{}
	return nil
}

// drain: everyone leaves. Owners unlock, waiters give up, every request runs in order and
// every reply is heard, until nothing is left to do.
func (w *world) drain() {
	w.note("everyone leaves; every request runs and every reply is heard")
	for round := 0; round < 1000 && w.violation == nil; round++ {
		w.step++
		for _, p := range w.procs {
			if p.dead {
				continue
			}
			if p.closed && p.owner != nil {
				p.tellOwner()
			}
			for len(p.giveBacks) > 0 {
				p.retryGiveBack(0)
			}
			if !p.live() {
				continue
			}
			if p.owner != nil && p.phase == held {
				p.unlock()
			}
			for len(p.waiters) > 0 {
				p.giveUp()
			}
			if p.lingering {
				p.endLinger() // (its timer runs out)
			}
			for len(p.giveBacks) > 0 {
				p.retryGiveBack(0)
			}
		}
		switch {
		case len(w.flight) > 0:
			w.deliver(0, false)
		case len(w.replies) > 0:
			w.receive(0, false)
		case len(w.msgs) > 0:
			w.hear(0, false)
		default:
			return
		}
		if err := w.observe(); err != nil {
			w.fail(ruleResidue, "snapshot: %v", err)
		}
	}
	if w.violation == nil {
		w.fail(ruleResidue, "everyone left, but requests kept coming")
	}
}

// shrink makes a failing schedule as short as it can while it still breaks the same rule.
func (e *Explorer) shrink(seed uint64, w *world) *Violation {
	rule := w.violation.Rule
	keys := w.chosen
	best := w
	tries := 0
	for size := len(keys) / 2; size >= 1 && tries < 3000; {
		shrunk := false
		for i := 0; i+size <= len(keys) && tries < 3000; i += size {
			cand := append(append([]string{}, keys[:i]...), keys[i+size:]...)
			tries++
			cw, err := e.play(seed, cand, nil)
			if err != nil || cw.violation == nil || cw.violation.Rule != rule {
				continue
			}
			keys, best, shrunk = cw.chosen, cw, true
			break
		}
		if !shrunk {
			size /= 2
		}
	}
	v := best.violation
	v.Seed, v.Trace, v.Steps = seed, best.trace, keys
	return v
}
