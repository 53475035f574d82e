package explore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/domain"
	dlerrors "github.com/dlockgo/dlock/errors"
	"github.com/dlockgo/dlock/processor"
)

// SharedOptions configures RunShared, the explorer of the read-write lock's and the
// semaphore's script (shared.lua).
type SharedOptions struct {
	Kind    processor.Kind    // KindRW or KindSem
	Permits int64             // a semaphore's k. Default 2
	Lease   time.Duration     // default 1 s
	Steps   int               // a schedule's length before everyone lets go. Default 40
	Procs   int               // simulated processes. Default 3
	Scripts map[string]string // mutants (processor.Options.Scripts)
	Seed    uint64            // the first schedule's seed. Default 1
	// LongLease, when set, is the lease of the first process's handle (the others use Lease):
	// processes that configure the lock's type with different leases.
	LongLease time.Duration
}

// RunShared explores schedules of shared.lua's requests from a few simulated processes, each
// request run by Redis in order, late (up to the settled lockers' life), twice, or never,
// its reply heard or lost, while the explorer's clock (miniredis) lets leases run out,
// processes start or stop listening on their channels (a subscription made, or dropped as its
// process dies), an operator forces holdings out or changes a semaphore's count (lowered
// below what is held, or raised again), and Redis restarts empty (in a third of the
// schedules) with requests on their way. After every step it checks:
//
//   - permits: the permits of the holdings Redis keeps never exceed k;
//   - beliefs: the permits the processes believe they hold (each from the send time of the
//     request that last found it held, for one lease) never exceed k — for a read-write lock,
//     a writer never beside anyone — leaving out holdings an operator forced to go, or an
//     empty restart wiped, whose processes learn of it at their next renewal;
//   - settled: a locker whose release (or failed try, or replaced holding, or force) ran never
//     holds again, whatever copy of a take arrives late — but after an empty restart, which
//     forgets the settled lockers (a request from before it may take permits again, held for
//     their lease, unrenewed: the documented window);
//   - restart told: no renewal (or refill, release, downgrade) of a holding an empty restart
//     wiped, run after it, answers that the holding is still there (renewed, released, or
//     replaced by the downgrade): a late copy of its take may have taken it anew, under the
//     same locker, while others held the permits in between; the request names the token the
//     holding was taken with (origin), as the library's do, and learns of the loss; nor does
//     such a release answer settled (let go by a copy of it) when no copy of it ran before
//     (a late copy of the holding's take, refused after the restart, settled its locker), or
//     after a copy of it answered gone, which would hide the loss when the gone answer was
//     the one lost;
//   - false loss: no release or renewal answers gone while Redis keeps the holding it names
//     (held as it runs, with the token it names), nor a copy of a release sent before one of
//     its locker let the holding go, within the settled mark's life and no empty restart
//     since (the released answer may be the one lost): its process would count a loss that
//     did not happen;
//   - permits once: a copy of a count change that ran changes the count no more — but one
//     that runs after an empty restart, which forgets that the change ran, sets its count
//     again: the known gap of SetPermits, exempt here (and noted in the schedule);
//   - force answered: a copy of an operator's force that removed its holding answers settled
//     (removed by it), not gone, unless Redis restarted empty since it was sent; and no force
//     answers settled unless a copy of it removed its holding;
//   - tokens: every new holding's fencing token is above every earlier one's;
//   - line-order: a take that succeeds fits, under the count Redis keeps, with what every live
//     entry ahead of its process asks, and only a take of more than the count is refused for
//     it — never a downgrade (live: its process listened on its channel when it last renewed the entry and
//     listens still, or did not and renewed it within a third of its lease);
//   - line-dead: after a request ran, no entry of a process that listened when it last
//     renewed it and does not now is left in line, but the request's own process's;
//   - line-serve: a waiting take is put in line only when it does not fit, under the count, with
//     what is held and what every live entry ahead of its process asks (a take of a process
//     that stopped listening since its entry said it listened renews it as of long ago: its
//     process may have died with the take on its way, and counts from its next);
//   - kept in line: the line entry of the attempt a process waits with (its last take with
//     wait, not given up) leaves the line, or gives way to an older attempt of its process,
//     only when that attempt is served (Redis holds its locker) or ended (a release of it ran,
//     or its take was refused as asking more than the count), its entry expired, or its
//     process died as far as Redis can tell;
//
// and at the end, once every process let go of all it holds or asked for, that no holding is
// left and that every key expires.
func RunShared(ctx context.Context, opt SharedOptions, budget time.Duration, maxSchedules int) (Report, error) {
	opt = opt.withDefaults()
	be, err := newMini()
	if err != nil {
		return Report{}, err
	}
	defer be.close()
	var rep Report
	deadline := time.Now().Add(budget)
	for i := 0; (maxSchedules == 0 || i < maxSchedules) && time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		seed := opt.Seed + uint64(i)
		sw, err := playShared(be, opt, seed)
		if err != nil {
			return rep, err
		}
		rep.Schedules++
		rep.Steps += sw.steps
		rep.Reached.Add(sw.reach)
		if sw.violation != nil {
			rep.Violation = sw.violation
			return rep, nil
		}
	}
	return rep, nil
}

func (o SharedOptions) withDefaults() SharedOptions {
	if o.Kind == "" {
		o.Kind = processor.KindSem
	}
	if o.Permits == 0 {
		o.Permits = 2
	}
	if o.Kind == processor.KindRW {
		o.Permits = processor.RWPermits
	}
	if o.Lease == 0 {
		o.Lease = time.Second
	}
	if o.Steps == 0 {
		o.Steps = 40
	}
	if o.Procs == 0 {
		o.Procs = 3
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// sworld is one schedule of RunShared.
type sworld struct {
	be        *mini
	opt       SharedOptions
	cfg       domain.DLockConfig
	spec      processor.Shared
	procs     []*sproc
	op        *sproc // an operator: it forces holdings go
	flight    []*sreq
	ran       map[string]bool      // lockers settled by a request that ran
	gone      map[string]bool      // lockers a release of which answered gone, since the last restart
	letGo     map[string]time.Time // when a release of each locker answered released (let its holding go), since the last restart
	forced    map[string]bool      // lockers an operator's force removed: their processes may believe on until told
	tokens    map[string]uint64    // each holding's token, as first seen
	handed    map[string]uint64    // the last token a holding handed out, as its release (or downgrade) declared it
	trace     []string
	steps     int
	violation *Violation
	seed      uint64
	// heard is, for each process, what Redis heard of it as a waiting take last wrote its
	// line entry: when, and whether the process listened on its channel then.
	heard map[string]heardOf
	// lastLine is the line after the step before (checkKept): each process in it, its WANT
	// value.
	lastLine map[string]string
	// ended are the lockers a request of their own process ended as it ran: a release (or
	// a release's first half) of it, or a take of it refused as asking more than the count.
	ended map[string]bool
	// restarts counts the empty restarts so far (a request remembers how many came before it
	// was sent); leaked are the lockers a request sent before one made a holding of after it
	// (the documented window: held for its lease, unrenewed); changes are the count changes
	// that ran, by their locker: how many restarts came before the first ran.
	restarts int
	forces   int // the operator's forces sent so far (each one's name counts them)
	leaked   map[string]bool
	changes  map[string]int
	reach    Reach
}

type heardOf struct {
	at       time.Time
	listened bool
}

// sproc is a simulated process: what it believes it holds, and what it asked for unheard.
type sproc struct {
	name    string
	p       *processor.RedisLockProcessor
	seq     int
	holds   map[string]*belief // lockers it believes it holds
	unknown map[string]bool    // lockers whose take went unanswered: to give back
	letting map[string]bool    // lockers whose release has not run yet (the library sends it again)
	gaveUp  map[string]bool    // lockers it sent a release for: a late reply for them is ignored
	downs   map[string]down    // downgrades whose reply went unheard, by their locker: sent again
	// listening says the process is subscribed to its channel of the lock (Redis counts it);
	// unlisten ends that. listens says the process counts itself heard, as the library's
	// does: from its subscription until an answer says Redis does not hear it (a subscription
	// that drops, or a death, goes unnoticed till then). Its takes that stand in line say so
	// (processor.TakeRequest.Listening).
	listening, listens bool
	unlisten           func()
	cfg                domain.DLockConfig // its handle's (lease)
	// waitsWith is the locker of the last take with wait it sent (alone, or after a release):
	// the attempt it waits with, as the library's process waits with one attempt at a time.
	waitsWith string
}

// down is a downgrade: the holding it replaces and the permits it keeps (a write-hold's 1, or
// part of a semaphore's holding).
type down struct {
	old    string
	n      int64
	origin uint64  // the token old was taken with (its belief's)
	hold   *belief // old's belief
}

type belief struct {
	n     int64
	valid time.Time
	token uint64 // its first token (a write-hold's writers had the next ones of its block)
	// refills are the first tokens of the blocks refills reserved for a write-hold, as their
	// replies were heard: its writers may go on into them.
	refills []uint64
	// wiped says an empty restart wiped the holding since it was taken: no renewal that runs
	// after it may renew it (restart told).
	wiped bool
}

// sreq is a request in flight.
type sreq struct {
	p      *sproc
	op     string // take, renew, refill, release, down, force
	locker string
	n      int64
	wait   bool
	old    string // down: the holding it replaces ...
	origin uint64 // ... and the token that holding was taken with (release: the one it lets go)
	next   string // release: the locker of the take, with wait, that runs right after it (SharedReleaseThenTake), n its permits
	from   int64  // permits: the count the operator saw, which the change replaces (n the new one)
	last   uint64 // release, down: the last token the write-hold let go handed out ...
	end    uint64 // ... and its block's end (0: nothing to give back)
	sent   time.Time
	gen    int     // the empty restarts before it was sent
	hold   *belief // renew, refill, release, down: the belief of the holding it names (origin its token)
	// listening: a take with wait, or a release with next, says its process counts itself
	// heard (sproc.listens as it was sent)
	listening bool
	// request is a force's name, the same in every copy of it; removed says a copy of it
	// removed its holding
	request string
	removed bool
}

func (r *sreq) String() string {
	switch r.op {
	case "take":
		return fmt.Sprintf("%s take %s n=%d wait=%v", r.p.name, r.locker, r.n, r.wait)
	case "down":
		return fmt.Sprintf("%s downgrade %s -> %s n=%d", r.p.name, r.old, r.locker, r.n)
	case "release":
		if r.next != "" {
			return fmt.Sprintf("%s release %s then take %s n=%d wait=true", r.p.name, r.locker, r.next, r.n)
		}
	case "permits":
		return fmt.Sprintf("%s permits %s %d -> %d", r.p.name, r.locker, r.from, r.n)
	}
	return fmt.Sprintf("%s %s %s", r.p.name, r.op, r.locker)
}

func playShared(be *mini, opt SharedOptions, seed uint64) (*sworld, error) {
	be.reset()
	cfg, err := domain.NewDLockConfig("EXPLORE", "shared", opt.Lease)
	if err != nil {
		return nil, err
	}
	w := &sworld{be: be, opt: opt, cfg: cfg, spec: processor.Shared{Kind: opt.Kind, Permits: opt.Permits},
		ran: map[string]bool{}, gone: map[string]bool{}, letGo: map[string]time.Time{}, forced: map[string]bool{}, tokens: map[string]uint64{}, handed: map[string]uint64{}, seed: seed,
		heard: map[string]heardOf{}, ended: map[string]bool{}, leaked: map[string]bool{}, changes: map[string]int{}}
	for i := range opt.Procs + 1 {
		name := string(rune('A'+i)) + "-"
		if i == opt.Procs {
			name = "OP-"
		}
		p, err := processor.NewRedisLockProcessor(be.client(), processor.Options{Publish: true, Mark: name, Scripts: opt.Scripts})
		if err != nil {
			return nil, err
		}
		sp := &sproc{name: name, p: p, holds: map[string]*belief{}, unknown: map[string]bool{}, letting: map[string]bool{}, gaveUp: map[string]bool{}, downs: map[string]down{}, cfg: cfg}
		if i == 0 && opt.LongLease > 0 {
			sp.cfg, _ = cfg.WithLease(opt.LongLease)
		}
		if i == opt.Procs {
			w.op = sp
		} else {
			w.procs = append(w.procs, sp)
		}
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	for _, p := range w.procs {
		if rng.IntN(2) == 0 {
			w.listen(p)
		}
	}
	defer func() {
		for _, p := range w.procs {
			if p.listening {
				p.unlisten()
			}
		}
	}()
	// Empty restarts draw from a stream of their own: a schedule that does not restart is the
	// one its seed made before restarts were explored (the kept seeds stay what they were).
	rr := rand.New(rand.NewPCG(seed^0x7e57a27, seed))
	every := 0 // (a restart's chance each step is 1/every; 0 for none)
	if rr.IntN(3) == 0 {
		every = 10 + rr.IntN(40)
	}
	for w.steps = 0; w.steps < opt.Steps && w.violation == nil; w.steps++ {
		if every > 0 && rr.IntN(every) == 0 {
			w.restart()
			w.check()
		}
		w.step(rng)
		w.check()
	}
	if w.violation == nil {
		w.finish()
	}
	return w, nil
}

func (w *sworld) now() time.Time { return w.be.now() }

func (w *sworld) note(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%6dms ", w.now().Sub(epoch).Milliseconds())+fmt.Sprintf(format, args...))
}

func (w *sworld) fail(rule, format string, args ...any) {
	if w.violation != nil {
		return
	}
	w.violation = &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...), Seed: w.seed, Trace: w.trace}
}

func (p *sproc) locker() string {
	p.seq++
	return p.name + strconv.Itoa(p.seq)
}

// step takes one random step: a process sends a request, Redis runs one in flight (maybe
// keeping a copy for later), one is lost, or time passes.
func (w *sworld) step(rng *rand.Rand) {
	p := w.procs[rng.IntN(len(w.procs))]
	switch c := rng.IntN(100); {
	case c < 22:
		// (broader than the library, whose read-write lock's process asks while it holds only
		// for a writer behind its own read-holds)
		n := int64(1 + rng.IntN(int(min(w.opt.Permits, 3))))
		if w.opt.Kind == processor.KindRW && rng.IntN(3) == 0 {
			n = processor.RWPermits
		}
		w.send(&sreq{p: p, op: "take", locker: p.locker(), n: n, wait: rng.IntN(2) == 0})
	case c < 30 && len(p.holds) > 0:
		l := pickKey(rng, p.holds)
		op := "renew"
		if b := p.holds[l]; b.n == processor.RWPermits && b.token != 0 && rng.IntN(2) == 0 {
			op = "refill" // a renewal that reserves a block more for the write-hold's writers
		}
		// (naming the token its holding was taken with, as the library's renewals do)
		w.send(&sreq{p: p, op: op, locker: l, origin: p.holds[l].token, hold: p.holds[l]})
	case c < 40 && len(p.holds) > 0:
		l := pickKey(rng, p.holds)
		// (naming the holding it believes, as its renewals do)
		r := &sreq{p: p, op: "release", locker: l, origin: p.holds[l].token, hold: p.holds[l]}
		if rng.IntN(2) == 0 { // it stands in line again as it lets go (SharedReleaseThenTake)
			r.next, r.n = p.locker(), int64(1+rng.IntN(int(min(w.opt.Permits, 3))))
			if w.opt.Kind == processor.KindRW && rng.IntN(2) == 0 {
				r.n = processor.RWPermits
			}
		}
		w.usedOf(rng, l, p.holds[l], r)
		delete(p.holds, l) // it stops using the permits as it sends the release
		w.send(r)
		for nl, d := range p.downs {
			if d.old == l { // and gives back what an unresolved downgrade of it may have taken
				delete(p.downs, nl)
				w.send(&sreq{p: p, op: "release", locker: nl})
			}
		}
	case c < 45 && len(p.unknown) > 0:
		l := pickKey(rng, p.unknown)
		delete(p.unknown, l)
		delete(p.holds, l)
		w.send(&sreq{p: p, op: "release", locker: l})
	case c < 50 && len(p.downs) > 0:
		l := pickKey(rng, p.downs)
		d := p.downs[l]
		w.send(&sreq{p: p, op: "down", locker: l, n: d.n, old: d.old, origin: d.origin, hold: d.hold}) // the same request again (giving nothing back: its first may have)
	case c < 50:
		// a write-hold turns into a read-hold; a semaphore's holding keeps part of its permits
		for _, l := range slices.Sorted(maps.Keys(p.holds)) {
			if b := p.holds[l]; b.n == processor.RWPermits || w.opt.Kind == processor.KindSem && b.n > 1 {
				r := &sreq{p: p, op: "down", n: 1, old: l, origin: b.token, hold: b}
				if w.opt.Kind == processor.KindSem {
					r.n = 1 + rng.Int64N(b.n-1)
				}
				w.usedOf(rng, l, b, r)
				b.n = r.n // it stops using the rest as it sends the downgrade
				r.locker = p.locker()
				p.downs[r.locker] = down{l, r.n, b.token, b} // unresolved until its reply is heard
				w.send(r)
				break
			}
		}
	case c < 82 && len(w.flight) > 0:
		i := rng.IntN(len(w.flight))
		r := w.flight[i]
		if rng.IntN(4) != 0 { // else a copy stays on its way: it runs again later
			w.flight = slices.Delete(w.flight, i, i+1)
		}
		w.deliver(r, rng.IntN(5) != 0)
	case c < 86 && len(w.flight) > 0:
		i := rng.IntN(len(w.flight))
		w.note("lost before Redis: %v", w.flight[i])
		w.flight = slices.Delete(w.flight, i, i+1)
	case c < 88 && p.listening:
		p.unlisten() // its subscription drops: it died, or its connection failed
		p.listening = false
		w.note("%s stops listening", p.name)
	case c < 88:
		w.listen(p)
	case c < 89:
		// an operator removes a holding it read (the reading may be stale by the time it runs)
		if held, _ := w.held(); len(held) > 0 {
			w.forces++
			w.send(&sreq{p: w.op, op: "force", locker: pickKey(rng, held), request: "op" + strconv.Itoa(w.forces)})
		}
	case c < 91 && w.opt.Kind == processor.KindSem:
		// an operator changes the count from the one it read (a copy that runs late, or after
		// another change, changes nothing): lowered below what is held, or raised again
		w.send(&sreq{p: w.op, op: "permits", locker: w.op.locker(), from: w.count(), n: 1 + rng.Int64N(w.opt.Permits)})
	default:
		ds := []time.Duration{time.Millisecond, w.opt.Lease / 4, w.opt.Lease / 2, w.opt.Lease + time.Millisecond}
		if w.opt.LongLease > 0 {
			ds = append(ds, w.opt.LongLease+time.Millisecond)
		}
		d := ds[rng.IntN(len(ds))]
		before, _ := w.held()
		w.be.advance(d)
		w.note("%v pass", d)
		after, _ := w.held()
		for l := range before {
			if _, ok := after[l]; !ok {
				w.ran[l] = true // its lease ran out: settled
			}
		}
		w.forget()
	}
}

// restart empties Redis (a restart with nothing persisted, or a failover to an empty replica)
// while requests are on their way. Subscriptions are made again at once (the library's
// clients resubscribe). Every holding is gone, and what Redis settled is forgotten.
func (w *sworld) restart() {
	w.be.flush()
	w.be.advance(time.Millisecond) // a restart takes time: the server clock moves on
	w.restarts++
	w.note("Redis restarts empty")
	for _, p := range w.procs {
		for _, b := range p.holds {
			b.wiped = true
		}
	}
	w.ran, w.gone, w.letGo, w.tokens, w.heard, w.lastLine = map[string]bool{}, map[string]bool{}, map[string]time.Time{}, map[string]uint64{}, map[string]heardOf{}, nil
}

// listen subscribes p to its channel of the lock.
func (w *sworld) listen(p *sproc) {
	stop, _ := w.be.listen(processor.SharedChannel(w.cfg, p.name))
	p.unlisten, p.listening, p.listens = stop, true, true
	w.note("%s listens", p.name)
}

func pickKey[V any](rng *rand.Rand, m map[string]V) string {
	keys := slices.Sorted(maps.Keys(m))
	return keys[rng.IntN(len(keys))]
}

func (w *sworld) send(r *sreq) {
	r.sent, r.gen = w.now(), w.restarts
	switch {
	case r.op == "take" && r.wait:
		r.p.waitsWith, r.listening = r.locker, r.p.listens
	case r.op == "release" && r.next != "":
		r.p.waitsWith, r.listening = r.next, r.p.listens
	}
	if r.op == "release" {
		r.p.letting[r.locker] = true
		r.p.gaveUp[r.locker] = true
	}
	w.flight = append(w.flight, r)
	w.note("send: %v", r)
}

// forget drops what no copy can still be: requests as old as the settled lockers' life (a
// client gives up on a request long before), and beliefs whose lease ran out.
func (w *sworld) forget() {
	w.flight = slices.DeleteFunc(w.flight, func(r *sreq) bool { return w.now().Sub(r.sent) >= r.p.p.MarkLife(r.p.cfg) })
	for _, p := range w.procs {
		for l, b := range p.holds {
			if !w.now().Before(b.valid) {
				delete(p.holds, l)
				p.unknown[l] = true // (its process gives it back once it knows it lost it)
				for nl, d := range p.downs {
					if d.old == l {
						delete(p.downs, nl)
						p.unknown[nl] = true
					}
				}
			}
		}
	}
}

// deliver runs r in Redis and, if heard, applies its reply to its process's beliefs.
func (w *sworld) deliver(r *sreq, heard bool) {
	ctx := context.Background()
	p := r.p
	if r.hold != nil && r.hold.wiped {
		if held, _ := w.held(); held != nil {
			if _, ok := held[cmp.Or(r.old, r.locker)]; ok {
				w.reach.RenewalsOfRetaken++ // (its take's late copy took it anew)
			}
		}
	}
	switch r.op {
	case "take", "down":
		before, _ := w.held()
		line := w.line()
		res, err := p.p.SharedTake(ctx, p.cfg, w.spec, processor.TakeRequest{Locker: r.locker, N: r.n, Wait: r.wait, Listening: r.listening, Replaces: r.old, Origin: r.origin, Tokens: w.block(r.n), Last: r.last, BlockEnd: r.end})
		if w.tooMany(r, r.locker, err) {
			return
		}
		if err != nil {
			w.fail("error", "%v: %v", r, err)
			return
		}
		w.note("ran: %v -> %v (heard %v)", r, res.Outcome, heard)
		w.told(r, r.op == "down" && res.Outcome == processor.Taken, "kept part of")
		w.leak(r, r.locker)
		w.took(r, res, heard, before, line)
	case "renew", "refill":
		tokens := 0
		if r.op == "refill" {
			tokens = w.block(processor.RWPermits)
		}
		before, _ := w.held()
		res, err := p.p.SharedRenewOf(ctx, p.cfg, w.spec, r.locker, r.origin, tokens)
		if err != nil {
			w.fail("error", "%v: %v", r, err)
			return
		}
		w.note("ran: %v -> %v %d (heard %v)", r, res.Outcome, res.Token, heard)
		w.told(r, res.Outcome == processor.Renewed, "renewed")
		w.noFalseLoss(r, res.Outcome, before)
		w.noDeadEntry(p)
		if b := p.holds[r.locker]; heard && b != nil {
			if res.Outcome == processor.Renewed {
				b.valid = later(b.valid, r.sent.Add(p.cfg.Lease()))
				if res.Token != 0 {
					b.refills = append(b.refills, res.Token)
					end := res.Token + uint64(tokens) - 1
					w.handed[r.locker] = max(w.handed[r.locker], end) // (its writers may use the whole block)
				}
			} else {
				delete(p.holds, r.locker)
			}
		}
	case "permits":
		was := w.count()
		changed, now, err := p.p.ChangePermits(ctx, w.cfg, r.locker, r.from, r.n)
		if err != nil {
			w.fail("error", "%v: %v", r, err)
			return
		}
		w.note("ran: %v -> changed %v (count %d)", r, changed, now)
		first, ran := w.changes[r.locker]
		w.changes[r.locker] = w.restarts
		switch k := w.count(); {
		case !ran || k == was:
		case first < w.restarts:
			// Exempt: the known gap (SetPermits's doc, processor.ChangePermits): an empty
			// restart forgot that the change ran, so its late copy finds the count it names
			// (the processes' own k, as Redis keeps none) and sets its own again.
			w.note("  (the count went from %d to %d again: a change's copy after an empty restart, the known gap)", was, k)
			w.reach.CountsSetAgain++
		default:
			w.fail("permits once", "a copy of %v, which ran before, changed the count from %d to %d", r, was, k)
		}
	case "force":
		res, err := p.p.SharedForceAs(ctx, p.cfg, w.spec, r.locker, r.request)
		if err != nil {
			w.fail("error", "%v: %v", r, err)
			return
		}
		w.note("ran: %v -> %v", r, res.Outcome)
		w.noDeadEntry(p)
		switch {
		case res.Outcome == processor.Released:
			w.ran[r.locker], w.forced[r.locker] = true, true
			r.removed = true
		case res.Outcome == processor.Settled && !r.removed:
			w.fail("force answered", "%v answered settled (removed by a copy of it) though no copy of it removed %s", r, r.locker)
		case res.Outcome == processor.Gone && r.removed && r.gen == w.restarts:
			// (no restart since it was sent, so none since a copy of it removed the holding;
			// and it runs within its mark life of its sending, as every request here does)
			w.fail("force answered", "%v, a copy of a force that removed %s, answered gone: its caller would be told nothing was removed", r, r.locker)
		}
	case "release":
		if r.next != "" {
			before, _ := w.held()
			line := w.line()
			res, err := p.p.SharedReleaseThenTake(ctx, p.cfg, w.spec, r.locker, r.origin, r.last, r.end, processor.TakeRequest{Locker: r.next, N: r.n, Listening: r.listening, Tokens: w.block(r.n)})
			if w.tooMany(r, r.next, err) { // (the release ran)
				w.ran[r.locker], w.ended[r.locker] = true, true
				delete(p.letting, r.locker)
				return
			}
			if err != nil {
				w.fail("error", "%v: %v", r, err)
				return
			}
			w.note("ran: %v -> %v then %v (heard %v)", r, res.Let, res.Outcome, heard)
			w.toldLet(r, res.Let)
			w.noFalseLoss(r, res.Let, before)
			w.ran[r.locker], w.ended[r.locker] = true, true
			delete(p.letting, r.locker)
			delete(before, r.locker) // (let go before the take ran)
			take := &sreq{p: p, op: "take", locker: r.next, n: r.n, wait: true, sent: r.sent, gen: r.gen, listening: r.listening}
			w.leak(take, r.next)
			w.took(take, res, heard, before, line)
			return
		}
		before, _ := w.held()
		res, err := p.p.SharedReleaseOf(ctx, p.cfg, w.spec, r.locker, r.origin, r.last, r.end)
		if err != nil {
			w.fail("error", "%v: %v", r, err)
			return
		}
		w.note("ran: %v -> %v", r, res.Outcome)
		w.toldLet(r, res.Outcome)
		w.noFalseLoss(r, res.Outcome, before)
		w.noDeadEntry(p)
		w.ran[r.locker], w.ended[r.locker] = true, true
		delete(p.letting, r.locker)
	}
}

// told checks, as Redis answers r, that a request naming a holding an empty restart wiped
// (r.hold, taken with the token r.origin) did not find it still there (kept): a late copy of
// the holding's take may have taken it anew after the restart, under the same locker, while
// others held the permits in between; the process must learn of the loss (restart told). A
// request that names no token (0: unknown) is not checked.
func (w *sworld) told(r *sreq, kept bool, what string) {
	if kept && r.hold != nil && r.hold.wiped && r.origin != 0 {
		w.fail("restart told", "%v %s %s, though Redis restarted empty after it was taken (token %d): its process is not told of the loss",
			r, what, cmp.Or(r.old, r.locker), r.origin)
	}
}

// toldLet checks told for r, a release that Redis ran with the outcome let: it found the
// holding (released), or settled — which reads as let go by a copy of it that ran before, and
// would hide the loss when none had (a late copy of the holding's take, refused after the
// restart, settled its locker), or when the copy that ran answered gone and its reply was the
// one lost. (A release sent after the holding's lease ran out by its process's clock is not
// checked: its process counts the holding lost already.)
func (w *sworld) toldLet(r *sreq, let processor.Outcome) {
	unlet := !w.ended[r.locker] && r.hold != nil && r.sent.Before(r.hold.valid)
	w.told(r, let == processor.Released || let == processor.Settled && (w.gone[r.locker] || unlet), "let go")
	if let == processor.Gone {
		w.gone[r.locker] = true
	}
}

// noFalseLoss checks, as Redis answers r, a release or renewal, with let, that it did not
// answer gone while Redis still kept the holding it names (held before it ran, with the token
// it names, or under its locker when it names none): its process would count a loss that did
// not happen (false loss).
func (w *sworld) noFalseLoss(r *sreq, let processor.Outcome, before map[string][2]uint64) {
	if h, ok := before[r.locker]; ok && let == processor.Gone && (r.origin == 0 || h[1] == r.origin) {
		w.fail("false loss", "%v answered gone, though Redis kept %s's holding (token %d) until it ran", r, r.locker, h[1])
	}
	// (and a copy of a release, sent before one of its locker let the holding go and run within
	// the settled mark's life, no empty restart since, answers settled: gone would tell its
	// process a loss that did not happen when the released answer was the one lost. A release
	// sent later — a give-back of a holding a downgrade found gone — is not checked: its
	// process counts it lost already, and the mark may have run out.)
	if at, ok := w.letGo[r.locker]; ok && r.op == "release" && let == processor.Gone && !r.sent.After(at) && w.now().Sub(at) < r.p.p.MarkLife(r.p.cfg) {
		w.fail("false loss", "%v answered gone, though a release of %s let its holding go before it was sent (no empty restart since)", r, r.locker)
	}
	if r.op == "release" && let == processor.Released {
		w.letGo[r.locker] = w.now()
	}
}

// leak records that r, sent before an empty restart, made a holding of locker after it: the
// documented window (held for its lease, unrenewed), left out of the residue.
func (w *sworld) leak(r *sreq, locker string) {
	if r.gen == w.restarts {
		return
	}
	if held, _ := w.held(); held != nil {
		if _, ok := held[locker]; ok {
			w.leaked[locker] = true
		}
	}
}

// took applies the answer to r, a take (or downgrade) that Redis ran, found before held
// and line, to its process's beliefs, and checks that it took permits in line order.
func (w *sworld) took(r *sreq, res processor.SharedResult, heard bool, before map[string][2]uint64, line sline) {
	p := r.p
	_, repeat := before[r.locker]
	if res.Outcome == processor.Held && !r.wait {
		w.ran[r.locker] = true
	}
	if res.Outcome == processor.Taken && r.old != "" {
		w.ran[r.old] = true
	}
	if res.Outcome == processor.Held && r.wait {
		e, inLine := line.entry(p.name)
		if inLine && e.locker != r.locker {
			w.ran[e.locker] = true // the attempt this one took the place of in line
		}
		h := heardOf{w.now(), p.listening}
		if prev, ok := w.heard[p.name]; !p.listening && (r.listening || ok && inLine && prev.listened) {
			h.at = time.Time{} // (it may have died with this take on its way: it counts from its next that says it is not heard)
		}
		w.heard[p.name] = h
		if heard && (res.Heard || r.listening) {
			p.listens = res.Heard // (the library's: the answer tells whether Redis hears it)
		}
		if r.old == "" {
			// served when there is room: put in line only when what is held and what every
			// live entry ahead of its process asks leave too little
			var sum uint64
			for _, b := range before {
				sum += b[0]
			}
			if k, ahead := w.count(), line.ahead(p.name); sum+ahead+uint64(r.n) <= uint64(k) {
				w.fail("line-serve", "%v was put in line though it fits: %d held and %d asked ahead of it, of %d", r, sum, ahead, k)
			}
		}
	}
	w.noDeadEntry(p)
	if res.Outcome == processor.Taken && !repeat && r.old == "" {
		// served in order: what is held now, and what every live entry ahead of this
		// process in line asks, fit in k
		after, _ := w.held()
		var sum uint64
		for _, h := range after {
			sum += h[0]
		}
		if k, ahead := w.count(), line.ahead(p.name); sum+ahead > uint64(k) {
			w.fail("line-order", "%v took permits past the line or the count: %d held and %d asked ahead of it, of %d", r, sum, ahead, k)
		}
	}
	if p.gaveUp[r.locker] {
		return // (the library forgot the attempt when it let it go)
	}
	if !heard {
		if p.holds[r.locker] != nil {
			return // a copy of a take it heard already
		}
		if r.old != "" {
			return // unresolved: sent again
		}
		if res.Outcome == processor.Taken || r.wait {
			p.unknown[r.locker] = true
		}
		return
	}
	switch res.Outcome {
	case processor.Taken:
		if b := p.holds[r.locker]; b != nil { // a copy of a take it heard already
			b.valid = later(b.valid, r.sent.Add(p.cfg.Lease()))
			return
		}
		p.holds[r.locker] = &belief{n: r.n, valid: r.sent.Add(p.cfg.Lease()), token: res.Token}
		delete(p.unknown, r.locker)
		if r.old != "" {
			delete(p.holds, r.old)
			delete(p.downs, r.locker)
		}
	case processor.Held:
		if r.wait {
			p.unknown[r.locker] = true // in line: given back if never taken
		}
	default:
		if r.old != "" { // the write-hold was gone: lost
			delete(p.downs, r.locker)
			delete(p.holds, r.old)
			p.unknown[r.old] = true
		}
	}
}

// tooMany reports whether err is Redis refusing r's take of locker for asking more permits than
// a lowered count, as it must only for a take of more than the count that replaces nothing: the
// take is settled, and its process's waiter fails (nothing to give back). Any other refusal is
// a failure (a downgrade fits whatever the count).
func (w *sworld) tooMany(r *sreq, locker string, err error) bool {
	if !errors.Is(err, dlerrors.ErrInvalidConfig) {
		return false
	}
	if k := w.count(); r.op == "down" || r.n <= k {
		w.fail("error", "%v refused under a count of %d: %v", r, k, err)
		return true
	}
	w.note("ran: %v -> refused: more than the count", r)
	w.ran[locker] = true
	w.ended[locker] = true
	delete(r.p.unknown, locker)
	return true
}

// count returns the count Redis keeps (a semaphore's k: the operator's last change that ran, or
// the configured one once every key expired and a take made them again).
func (w *sworld) count() int64 {
	in, err := w.op.p.SharedInspect(context.Background(), w.cfg, w.spec)
	if err != nil {
		w.fail("error", "inspect: %v", err)
		return w.opt.Permits
	}
	return in.Permits
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sline is the Redis line as a request found it: live entries in order.
type sline []sentry

type sentry struct {
	owner, locker string
	n             uint64
	counts        bool // a take counts it ahead: its process lives, as far as Redis can tell
	dead          bool // its process listened when it last renewed it and does not now
}

// line reads the live entries of the line, first first.
func (w *sworld) line() sline {
	ctx := context.Background()
	keys := processor.SharedKeys(w.cfg)
	c := w.be.client()
	owners, _ := c.ZRange(ctx, keys[2], 0, -1).Result()
	var out sline
	for _, o := range owners {
		v, err := c.HGet(ctx, keys[3], o).Result()
		if err != nil {
			continue
		}
		parts := strings.SplitN(v, "|", 3)
		if len(parts) != 3 {
			continue
		}
		n, _ := strconv.ParseUint(parts[0], 10, 64)
		exp, _ := strconv.ParseInt(parts[1], 10, 64)
		if exp < w.now().UnixMilli() {
			continue
		}
		e := sentry{owner: o, locker: parts[2], n: n, counts: true}
		if h, ok := w.heard[o]; ok {
			listens := w.listens(o)
			e.dead = h.listened && !listens
			e.counts = (h.listened && listens) || (!h.listened && w.now().Sub(h.at).Milliseconds() <= w.leaseOf(o).Milliseconds()/3)
		}
		out = append(out, e)
	}
	return out
}

func (l sline) entry(owner string) (sentry, bool) {
	for _, e := range l {
		if e.owner == owner {
			return e, true
		}
	}
	return sentry{}, false
}

// ahead returns the permits asked by the entries before owner's (all when it is not in line).
func (l sline) ahead(owner string) uint64 {
	var sum uint64
	for _, e := range l {
		if e.owner == owner {
			break
		}
		if e.counts {
			sum += e.n
		}
	}
	return sum
}

// listens reports whether the process named owner listens on its channel now.
func (w *sworld) listens(owner string) bool {
	for _, p := range w.procs {
		if p.name == owner {
			return p.listening
		}
	}
	return false
}

// noDeadEntry checks, after a request of p ran, that the line holds no entry of a process that
// listened on its channel when it last renewed it and does not now (it died), but p's own.
func (w *sworld) noDeadEntry(p *sproc) {
	for _, e := range w.line() {
		if e.dead && e.owner != p.name {
			w.fail("line-dead", "%s's entry is still in line after %s's request ran: it listened when it renewed it, and does not now", e.owner, p.name)
		}
	}
}

// usedOf decides, as its process lets the write-hold l (b) go with r, how far its writers got
// (at random): into which of its blocks (the first, or one a refill reserved), and how many
// of that block's tokens they used. It puts in r what the release gives back — the last
// token handed out and the end of the block it is in, as the library sends them — and from
// then on no token of l above that last counts as handed out.
func (w *sworld) usedOf(rng *rand.Rand, l string, b *belief, r *sreq) {
	if b == nil || b.token == 0 || b.n != processor.RWPermits {
		return
	}
	block := uint64(w.block(b.n))
	if i := rng.IntN(len(b.refills) + 1); i > 0 {
		first := b.refills[i-1]
		r.last, r.end = first+uint64(rng.IntN(int(block))), first+block-1
	} else {
		r.last, r.end = b.token-1+uint64(rng.IntN(int(block)+1)), b.token+block-1
	}
	w.handed[l] = r.last
}

// block is how many fencing tokens a take of n permits reserves: a write-hold's serve several
// writers in turn (dlock's writeBlock; a smaller one here).
func (w *sworld) block(n int64) int {
	if w.opt.Kind == processor.KindRW && n == processor.RWPermits {
		return 3
	}
	return 1
}

// held reads the holdings Redis keeps and that have not run out: locker -> permits, token.
func (w *sworld) held() (map[string][2]uint64, error) {
	ctx := context.Background()
	keys := processor.SharedKeys(w.cfg)
	c := w.be.client()
	all, err := c.HGetAll(ctx, keys[0]).Result()
	if err != nil {
		return nil, err
	}
	out := map[string][2]uint64{}
	nowMs := float64(w.now().UnixMilli())
	for l, v := range all {
		exp, err := c.ZScore(ctx, keys[1], l).Result()
		if err == redis.Nil || (err == nil && exp < nowMs) {
			continue
		}
		if err != nil {
			return nil, err
		}
		parts := strings.SplitN(v, "|", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("holding %s = %q", l, v)
		}
		n, _ := strconv.ParseUint(parts[0], 10, 64)
		tok, _ := strconv.ParseUint(parts[1], 10, 64)
		out[l] = [2]uint64{n, tok}
	}
	return out, nil
}

// maxHanded returns the largest token handed out by the holdings seen so far, and whose.
func (w *sworld) maxHanded() (uint64, string) {
	var top uint64
	by := ""
	for l, t := range w.handed {
		if t > top || (t == top && l < by) {
			top, by = t, l
		}
	}
	return top, by
}

func (w *sworld) check() {
	held, err := w.held()
	if err != nil {
		w.fail("error", "%v", err)
		return
	}
	var sum uint64
	for _, l := range slices.Sorted(maps.Keys(held)) {
		h := held[l]
		sum += h[0]
		if w.ran[l] {
			w.fail("settled", "%s holds %d permits after a request that settled it ran", l, h[0])
		}
		if tok, seen := w.tokens[l]; !seen {
			if top, by := w.maxHanded(); h[1] <= top {
				w.fail("tokens", "%s's token %d is not above %d, handed out before by %s", l, h[1], top, by)
			}
			w.tokens[l] = h[1]
			// (its writers may use its whole block; a holding taken anew after an empty restart
			// has a block of its own)
			w.handed[l] = max(w.handed[l], h[1]+uint64(w.block(int64(h[0])))-1)
		} else if tok != h[1] {
			w.fail("tokens", "%s's token changed from %d to %d", l, tok, h[1])
		}
	}
	if sum > uint64(w.opt.Permits) {
		w.fail("permits", "Redis keeps %d permits of %d: %v", sum, w.opt.Permits, held)
	}
	var believed int64
	var who []string
	for _, p := range w.procs {
		for l, b := range p.holds {
			if w.now().Before(b.valid) && !w.forced[l] && !w.forcedDown(p, l) && !b.wiped {
				believed += b.n
				who = append(who, fmt.Sprintf("%s(%d)", l, b.n))
			}
		}
	}
	if believed > w.opt.Permits {
		w.fail("beliefs", "processes believe they hold %d permits of %d: %v", believed, w.opt.Permits, who)
	}
	w.checkKept()
}

// checkKept checks, after every step, that the line entry of the attempt a process waits with
// stays in the line (or gives way to a newer attempt of its process) unless the step served
// it (Redis holds its locker now), ended it (a release of it, or its take refused as asking
// more than the count), its entry expired, or its process died as far as Redis can tell (it
// listened when it last renewed the entry and does not now). A late copy of an older take of
// the process — an attempt it gave up, whose give-back has not run — must not take its place,
// settling the attempt it waits with: the process would ask again with a settled attempt, and
// lose its place in line as the give-back runs.
func (w *sworld) checkKept() {
	ctx := context.Background()
	keys := processor.SharedKeys(w.cfg)
	c := w.be.client()
	cur := map[string]string{}
	owners, _ := c.ZRange(ctx, keys[2], 0, -1).Result()
	for _, o := range owners {
		if v, err := c.HGet(ctx, keys[3], o).Result(); err == nil {
			cur[o] = v
		}
	}
	prev := w.lastLine
	w.lastLine = cur
	for _, p := range w.procs {
		v, ok := prev[p.name]
		if !ok || p.waitsWith == "" {
			continue
		}
		_, exp, l := wantOf(v)
		if l != p.waitsWith || p.gaveUp[l] || exp <= w.now().UnixMilli() || w.ended[l] {
			continue
		}
		if held, _ := c.HExists(ctx, keys[0], l).Result(); held {
			continue // served
		}
		if now, ok := cur[p.name]; ok {
			if _, _, nl := wantOf(now); p.number(nl) >= p.number(l) {
				continue
			}
			w.fail("kept in line", "%s waits with %s, but its entry in line waits with %s now", p.name, l, wantLocker(now))
			continue
		}
		if h, ok := w.heard[p.name]; ok && h.listened && !p.listening {
			continue // dropped as dead
		}
		w.fail("kept in line", "%s waits with %s, whose entry left the line though it was neither served nor ended", p.name, l)
	}
}

// wantOf parses a WANT value: the permits asked, when the entry expires (server ms), its locker.
func wantOf(v string) (n uint64, expires int64, locker string) {
	parts := strings.SplitN(v, "|", 3)
	if len(parts) != 3 {
		return 0, 0, ""
	}
	n, _ = strconv.ParseUint(parts[0], 10, 64)
	expires, _ = strconv.ParseInt(parts[1], 10, 64)
	return n, expires, parts[2]
}

func wantLocker(v string) string {
	_, _, l := wantOf(v)
	return l
}

// number returns the sequence number of locker if it is one of p's, else -1.
func (p *sproc) number(locker string) int {
	seq, ok := strings.CutPrefix(locker, p.name)
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(seq)
	if err != nil {
		return -1
	}
	return n
}

// forcedDown reports whether an operator forced the holding that p's unresolved downgrade of
// l took: p believes it holds l (as downgraded) until the downgrade's reply tells it otherwise,
// and so believes on in a holding an operator forced to go.
func (w *sworld) forcedDown(p *sproc, l string) bool {
	for nl, d := range p.downs {
		if d.old == l && w.forced[nl] {
			return true
		}
	}
	return false
}

// finish lets every process give back all it holds or asked for, runs what is still on its
// way, and checks that nothing is held and that every key expires.
func (w *sworld) finish() {
	for len(w.flight) > 0 && w.violation == nil {
		r := w.flight[0]
		w.flight = w.flight[1:]
		w.deliver(r, true)
		w.check()
	}
	for _, p := range w.procs {
		for _, l := range slices.Sorted(maps.Keys(p.holds)) {
			w.deliver(&sreq{p: p, op: "release", locker: l, sent: w.now()}, true)
		}
		for _, l := range slices.Sorted(maps.Keys(p.unknown)) {
			w.deliver(&sreq{p: p, op: "release", locker: l, sent: w.now()}, true)
		}
		for _, l := range slices.Sorted(maps.Keys(p.downs)) {
			w.deliver(&sreq{p: p, op: "release", locker: l, sent: w.now()}, true)
		}
		p.downs = map[string]down{}
		for _, l := range slices.Sorted(maps.Keys(p.letting)) {
			w.deliver(&sreq{p: p, op: "release", locker: l, sent: w.now()}, true)
		}
		p.holds, p.unknown = map[string]*belief{}, map[string]bool{}
	}
	w.check()
	if held, err := w.held(); err == nil {
		maps.DeleteFunc(held, func(l string, _ [2]uint64) bool { return w.leaked[l] }) // (they run out with their lease)
		if len(held) > 0 {
			w.fail("residue", "holdings left after every process let go: %v", held)
		}
	}
	longest := max(w.opt.Lease, w.opt.LongLease)
	lc, _ := w.cfg.WithLease(longest)
	life := max(w.procs[0].p.MarkLife(lc), processor.FenceTTL(lc), processor.EntryTTL(lc), 8*longest) // (8: a forced locker's)
	w.be.advance(life + longest + time.Second)
	if keys := w.be.m.Keys(); len(keys) > 0 && w.violation == nil {
		w.fail("residue", "keys left after every lease and mark ran out: %v", keys)
	}
}

// SharedMutants are shared.lua with one guard broken; RunShared must find each.
var SharedMutants = []Mutant{
	{"a copy of a force that removed its holding answers gone (shared.lua does not mark the removal)", "shared",
		"        settle(A.locker .. '|removed|' .. A.request, kept)\n", ""},
	{"a force answers that a copy of it removed its holding when another request did (shared.lua does not name the request)", "shared",
		"            if A.request ~= '' and settled(A.locker .. '|removed|' .. A.request) then", "            if settled(A.locker .. '|forced') then"},
	{"a copy of a held locker's take marks it forced (a copy of its release that ran answers gone: a false loss)", "shared",
		"        if mine then -- a copy of a take that was answered: the same holding, renewed\n",
		"        if mine then -- a copy of a take that was answered: the same holding, renewed\n            settle(A.locker .. '|forced')\n"},
	{"a release of a holding Redis kept answers gone (its process counts a loss that did not happen)", "shared",
		"        if h then\n            return {1}", "        if h then\n            return {0}"},
	{"a downgrade naming its holding's token is refused as one taken anew (the tokens not compared)", "shared",
		"            if old and A.origin ~= '' and old.token ~= A.origin and old.owner == A.owner then",
		"            if old and A.origin ~= '' and old.owner == A.owner then"},
	{"a settled locker takes permits again (take ignores GONE)", "shared",
		"        if settled(A.locker) then\n            if freed then wake(k) end", "        if false then\n            if freed then wake(k) end"},
	{"a take counts no permits already held", "shared",
		"local sum, owners = used(A.replaces)", "local _, owners = used(A.replaces)\n    local sum = 0"},
	{"a release does not settle its locker", "shared",
		"        settle(A.locker)\n        if h then", "        if h then"},
	{"a holding let go (expired, replaced or forced) is not settled", "shared",
		"    redis.call('zrem', EXP, locker)\n    settle(locker, until_ms)", "    redis.call('zrem', EXP, locker)"},
	{"a failed try is not settled", "shared",
		"        if A.wait ~= '1' then\n            refuse(A.locker)", "        if A.wait ~= '1' then"},
	{"a take passes the line (the permits asked ahead are not counted)", "shared",
		"        local fits = shrinks or sum + ahead(A.owner) + n <= k", "        local fits = shrinks or sum + n <= k"},
	{"the attempt a waiting take replaces in line is not settled", "shared",
		"        refuse(e.locker) -- the attempt this one takes the place of", "        -- (not settled)"},
	{"a forced holding is not settled (its late take takes it back)", "shared",
		"        unhold(A.locker, kept)\n        wake(k)", "        redis.call('hdel', HELD, A.locker)\n        redis.call('zrem', EXP, A.locker)\n        wake(k)"},
	{"tokens repeat (the counter is not raised)", "shared",
		"    redis.call('set', FENCE, string.format('%.0f', first + math.max(tonumber(n) or 1, 1) - 1))\n", ""},
	{"a write-hold's block is not reserved (its writers' tokens repeat)", "shared",
		"first + math.max(tonumber(n) or 1, 1) - 1", "first"},
	{"a refill reserves no block (its writers' tokens repeat)", "shared",
		"            first = string.format('%.0f', reserve(A.tokens))", "            first = string.format('%.0f', tonumber(redis.call('get', FENCE) or '0') + 1)"},
	{"a write-hold gives back a token its writers used", "shared",
		"        redis.call('set', FENCE, A.last)", "        redis.call('set', FENCE, string.format('%.0f', tonumber(A.last) - 1))"},
	{"a fresh entry of a process that does not listen is passed over", "shared",
		"NOW_MS - e.renewed <= math.floor(e.lease / 3)", "false"},
	{"an entry of a process that listens is passed over once it is a third of a lease old", "shared",
		"return not e.renewed or e.listened or", "return not e.renewed or"},
	{"a dead process's entry stays in line", "shared",
		"        elseif (owner ~= A.owner or A.op == 'force') and died(e) then", "        elseif false then"},
	{"a dead process's late take counts it ahead (its entry renewed as of now)", "shared",
		"            if heard == false and (A.listening == '1' or (e and e.listened)) then", "            if false then"},
	{"a dead process's late take that says it counts itself heard counts it ahead (the claim ignored)", "shared",
		"(A.listening == '1' or (e and e.listened))", "(e and e.listened)"},
	{"a take that fits exactly is put in line", "shared",
		"        local fits = shrinks or sum + ahead(A.owner) + n <= k", "        local fits = shrinks or sum + ahead(A.owner) + n < k"},
	{"a copy of a take that ran is refused under a lowered count (its holding settled)", "shared",
		"and not shrinks and not mine and", "and not shrinks and"},
	{"a late copy of an older take takes the place in line of the attempt its process waits with (no stale-copy check)", "shared",
		"stale = e and e.locker ~= A.locker and older(A.locker, e.locker)", "stale = false"},
	{"a renewal after an empty restart renews a holding taken anew under its locker (shared.lua's renew ignores origin)", "shared",
		"        if mine and A.origin ~= '' and mine.token ~= A.origin then", "        if false then"},
	{"a release after an empty restart lets go of a holding taken anew under its locker as its own (shared.lua's release ignores origin)", "shared",
		"        if h and A.origin ~= '' and h.token ~= A.origin then", "        if false then"},
	{"a copy of a count change that ran changes the count again (permits ignores its settled locker)", "shared",
		"        if A.locker ~= '' and settled(A.locker) then", "        if false then"},
	{"a copy of a release that found its holding lost by an empty restart answers settled (let go), hiding the loss", "shared",
		"        if not h and not was then", "        if false then"},
	{"a refused take's locker is not remembered as lost (the release of a holding an empty restart wiped answers settled, hiding the loss)", "shared",
		"    if not settled(locker) then\n        settle(locker .. '|forced')\n    end\n", ""},
}

// leaseOf is the lease of the process named owner's handle.
func (w *sworld) leaseOf(owner string) time.Duration {
	for _, p := range w.procs {
		if p.name == owner {
			return p.cfg.Lease()
		}
	}
	return w.opt.Lease
}
