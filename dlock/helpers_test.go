package dlock_test

// The hooks and helpers the tests of this package share: waiting for a condition, counting
// and recognising commands (by script name), playing the network between a client and Redis
// (a request kept on the wire, a reply lost or late, a copy delivered again), a guard that
// records who holds what, and servers and clusters of a test's own.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/domain"
	"github.com/dlockgo/dlock/internal/faultproxy"
	"github.com/dlockgo/dlock/internal/redistest"
	"github.com/dlockgo/dlock/processor"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"
)

// waitFor polls cond until it holds, failing t after 15 s (a hang, not a slow machine).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 15s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// recv receives from ch, failing t after 15 s.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: nothing within 15s", what)
		var zero T
		return zero
	}
}

// commands returns how many commands the server has processed (a script counts once).
func commands(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no total_commands_processed in INFO")
	return 0
}

// commandsB is commands, for benchmarks.
func commandsB(t testing.TB, c *redis.Client) int64 { return commands(t, c) }

// preload loads the scripts, so that every script call is one EVALSHA that runs.
func preload(t testing.TB, c *redis.Client) {
	t.Helper()
	p, err := processor.NewRedisLockProcessor(c, processor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// checkNoSecondOwner fails t if another process (lb, another Generator) can take the key
// while l's holding owned still believes it holds it.
func checkNoSecondOwner(t testing.TB, l *dlock.DistributedReentrantLock, owned context.Context, lb *dlock.DistributedReentrantLock) {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	st, serr := lb.State(ctx)
	t.Logf("state before: holder %q, lease left %v, waiting %v (%v); owner context %v",
		st.Holder, st.LeaseLeft, st.Waiting, serr, context.Cause(owned))
	ob, ok, err := lb.TryLock(ctx)
	if err != nil && !errors.Is(err, dlock.ErrOptimisticLocking) {
		t.Fatalf("TryLock: %v", err)
	}
	if ok {
		defer ob.Unlock() //nolint:errcheck
		if owned.Err() == nil && l.HoldCount(owned) > 0 {
			t.Fatalf("two owners: another process took the key while the first still holds it (HoldCount %d, owner context live)", l.HoldCount(owned))
		}
	}
}

// key returns l's Redis key.
func key(l *dlock.DistributedReentrantLock) string { return l.Config().UniqueKey() }

// fmtCause describes a context's state: "live", or its cause.
func fmtCause(ctx context.Context) string {
	if ctx.Err() == nil {
		return "live"
	}
	return context.Cause(ctx).Error()
}

// wire is a go-redis hook that plays the network between a client and Redis for the scripts
// the library sends (found by name, processor.ScriptName): it keeps a copy of every script
// request, so a test can deliver one again later (a client's retry, a duplicated packet), and
// it can keep requests "on the wire": the caller gets a timeout at once, as after a lost
// reply, and the request reaches Redis only when the test lets it.
type wire struct {
	t *testing.T

	mu      sync.Mutex
	sent    []sentCmd
	next    redis.ProcessHook           // the rest of the client's chain, once a command went through
	holdFor map[string]int              // script name -> how many of its next requests to keep on the wire
	held    []sentCmd                   // kept on the wire, not yet delivered
	fire    map[string]func(args []any) // told of a script's request before it is sent
	stallN  map[string]int              // script name -> how many of its next requests to stall
	stalled int                         // requests stalled now
	go_     chan struct{}               // closed to let the stalled requests go on
}

// sentCmd is one script request: its script's name and arguments.
type sentCmd struct {
	name string
	args []any
}

// arg returns the argument name of c, a script sent by EVALSHA or EVAL, as the prelude's
// table A names it ("" when c does not carry it).
func (c sentCmd) arg(t *testing.T, name string) string {
	t.Helper()
	src := processor.Sources()["prelude"]
	at := strings.Index(src, "\n    "+name+" = ARGV[")
	if at < 0 {
		t.Fatalf("the prelude names no argument %q", name)
	}
	rest := src[at+len("\n    "+name+" = ARGV["):]
	i, err := strconv.Atoi(rest[:strings.IndexByte(rest, ']')])
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := strconv.Atoi(fmt.Sprint(c.args[2])) // EVALSHA, its SHA, the key count, the keys, then ARGV
	if j := 3 + keys + i - 1; j < len(c.args) {
		return fmt.Sprint(c.args[j])
	}
	return ""
}

// newWire puts a wire in front of c.
func newWire(t *testing.T, c *redis.Client) *wire {
	w := &wire{t: t, holdFor: map[string]int{}, fire: map[string]func([]any){}, stallN: map[string]int{}, go_: make(chan struct{})}
	c.AddHook(w)
	return w
}

func (w *wire) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *wire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (w *wire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := processor.ScriptName(cmd.Args())
		if name == "" {
			return next(ctx, cmd)
		}
		args := append([]any(nil), cmd.Args()...)
		w.mu.Lock()
		w.next = next
		w.sent = append(w.sent, sentCmd{name, args})
		f := w.fire[name]
		hold := w.holdFor[name] > 0
		if hold {
			w.holdFor[name]--
			w.held = append(w.held, sentCmd{name, args})
		}
		stall := !hold && w.stallN[name] > 0
		var goOn chan struct{}
		if stall {
			w.stallN[name]--
			w.stalled++
			goOn = w.go_
		}
		w.mu.Unlock()
		if stall {
			<-goOn // the caller waits: its reply comes when the test lets the request go on
		}
		if f != nil {
			f(args)
		}
		if hold {
			cmd.SetErr(errors.New("i/o timeout (injected: the request is still on its way)"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// stall keeps the next n requests of script name (and their callers) waiting until unstall:
// their replies then come after whatever happened meanwhile.
func (w *wire) stall(name string, n int) {
	w.mu.Lock()
	w.stallN[name] += n
	w.mu.Unlock()
}

// stalledCount returns how many requests stall now.
func (w *wire) stalledCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stalled
}

// unstall lets the stalled requests go on to Redis.
func (w *wire) unstall() {
	w.mu.Lock()
	close(w.go_)
	w.go_, w.stalled = make(chan struct{}), 0
	w.mu.Unlock()
}

// hold keeps the next n requests of script name on the wire.
func (w *wire) hold(name string, n int) {
	w.mu.Lock()
	w.holdFor[name] += n
	w.mu.Unlock()
}

// onSend runs f with the arguments of every request of script name, before it is sent.
func (w *wire) onSend(name string, f func(args []any)) {
	w.mu.Lock()
	w.fire[name] = f
	w.mu.Unlock()
}

// heldCount returns how many requests are on the wire.
func (w *wire) heldCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held)
}

// deliverHeld lets every request on the wire reach Redis now, in the order they were sent,
// and waits for their replies (which nobody reads).
func (w *wire) deliverHeld() {
	w.mu.Lock()
	held := w.held
	w.held = nil
	w.mu.Unlock()
	for _, c := range held {
		w.send(c)
	}
}

// copies returns the requests of the given scripts sent so far (all scripts when none is
// named), in order.
func (w *wire) copies(names ...string) []sentCmd {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sentCmd
	for _, c := range w.sent {
		if len(names) == 0 || slices.Contains(names, c.name) {
			out = append(out, c)
		}
	}
	return out
}

// send delivers a copy of c to Redis, past the wire (it is neither kept nor recorded), and
// waits for its reply.
func (w *wire) send(c sentCmd) {
	w.mu.Lock()
	next := w.next
	w.mu.Unlock()
	cmd := redis.NewCmd(context.Background(), c.args...)
	if err := next(context.Background(), cmd); err != nil && !errors.Is(err, redis.Nil) {
		w.t.Logf("copy of %s: %v", c.name, err)
	}
}

// replayLatestFirst sends again every script request w has seen, the latest first: the
// earliest (the acquiring request) arrives last, as a copy held up longest would.
func replayLatestFirst(w *wire) {
	cs := w.copies()
	for i := len(cs) - 1; i >= 0; i-- {
		w.send(cs[i])
	}
}

// counter is a go-redis hook that counts the commands a client sends, and the scripts by name.
type counter struct {
	n       atomic.Int64
	mu      sync.Mutex
	scripts map[string]int
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		if name := processor.ScriptName(cmd.Args()); name != "" {
			c.mu.Lock()
			if c.scripts == nil {
				c.scripts = map[string]int{}
			}
			c.scripts[name]++
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func (c *counter) script(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scripts[name]
}

// String lists the scripts counted so far (background work may still send some).
func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.scripts)
}

// unanswered returns a hook under which, once on is set, Redis does not answer the next
// script named name ("" for any script) before the request's context ends, and the client
// returns only a little after that (as one that does not honour the context at once); the
// hook clears on.
func unanswered(name string, on *atomic.Bool) fnHook {
	return fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		script := processor.ScriptName(cmd.Args())
		if script == "" || name != "" && script != name || !on.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}}
}

// fnHook wraps every command with f.
type fnHook struct {
	f func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error
}

func (h fnHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h fnHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h.f(ctx, cmd, next) }
}

func (h fnHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type delayHook struct {
	match func(args []any) bool
	delay time.Duration
	seen  *atomic.Int32 // counts the delayed replies
}

func (h delayHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Err() == nil && h.match(cmd.Args()) {
			h.seen.Add(1)
			time.Sleep(h.delay) // the reply is late; the script already ran
		}
		return err
	}
}

func (h delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isSharedTake reports whether a command is shared.lua's take (an ask, a downgrade, a shrink).
func isSharedTake(args []any) bool { return sharedArg(args, "op") == "take" }

// loseThenHoldTakes adds a hook to c: once armed is set to 1, the next shared.lua take that
// replaces a holding (a downgrade, a shrink) runs and its reply is lost (armed becomes 2); every
// take after it is held back until open is called (deferred by the test, before its Generators
// close), so the process's outcome of the first stays unknown. (A take that asks for more,
// decided before the test armed the hook and sent after, is not the one lost: the replacing
// take would then be held back before it ran.)
func loseThenHoldTakes(c *redis.Client) (armed *atomic.Int32, open func()) {
	armed = new(atomic.Int32)
	gate := make(chan struct{})
	c.AddHook(fnHook{f: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if !isSharedTake(cmd.Args()) {
			return next(ctx, cmd)
		}
		switch armed.Load() {
		case 1:
			if sharedArg(cmd.Args(), "replaces") == "" { // (not a replacing take)
				return next(ctx, cmd)
			}
			err := next(ctx, cmd)
			if err == nil {
				armed.Store(2)
				err = errors.New("i/o timeout (reply lost)") // the take ran; its reply is lost
				cmd.SetErr(err)
			}
			return err
		case 2:
			select { // sent again: held back, its outcome stays unknown
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}})
	return armed, func() { close(gate) }
}

// unlockInBackground unlocks owner on a goroutine of its own — a writer's Unlock waits for its
// downgrade's answer, which the test may hold back — and returns the channel of its error.
func unlockInBackground(l *dlock.RWLock, owner *dlock.Owner) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Unlock(owner) }()
	return done
}

// readerOfADowngrade takes l's write side, then a read of its owner's, and lets the write go
// (unlockInBackground): the holding shrinks to the read by a downgrade, sent once armed is set
// to 1 (the hooks that lose its reply watch it). It returns the read's owner and the write's
// Unlock's error channel.
func readerOfADowngrade(t *testing.T, ctx context.Context, l *dlock.RWLock, armed *atomic.Int32) (*dlock.Owner, <-chan error) {
	t.Helper()
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.RLock(w) // a read of the write owner's: no request yet
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(1)
	return r, unlockInBackground(l, w) // the holding shrinks to the read: the downgrade is sent
}

type lostReplyHook struct{ match func(args []any) bool }

func (h lostReplyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h lostReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && h.match(cmd.Args()) {
			err = errors.New("i/o timeout (reply lost)") // the script ran; the reply is lost
			cmd.SetErr(err)
		}
		return err
	}
}

func (h lostReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type slowHook struct {
	match func(args []any) bool
	delay time.Duration
	seen  atomic.Int64 // matching commands
	probe atomic.Int64 // poll.lua calls
}

func (h *slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if scriptIs("poll")(cmd.Args()) {
			h.probe.Add(1)
		}
		if h.match(cmd.Args()) {
			h.seen.Add(1)
			time.Sleep(h.delay) // slow on its way to Redis
		}
		return next(ctx, cmd)
	}
}

func (h *slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// rgGen returns a generator ("a process") on a fresh client of server s (srv if nil), with hook
// h (if not nil) on that client. Generator, hook and client are closed, in that order, when t
// ends.
func rgGen(t testing.TB, s *redistest.Server, h *faultHook, opts ...dlock.Option) *dlock.Generator {
	t.Helper()
	if s == nil {
		s = srv
	}
	c := s.Client()
	if h != nil {
		c.AddHook(h)
	}
	g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithDefaultLease(time.Second)}, opts...)...)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Logf("Close: %v", err)
		}
		if h != nil {
			h.wait()
		}
		c.Close()
	})
	return g
}

// rawClient returns a plain client on srv, closed when t ends.
func rawClient(t testing.TB) *redis.Client {
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	return c
}

// lockKey is the Redis key of a lock: DLOCK_<type>_<target>.
func rgLockKey(typ, target string) string { return "DLOCK_" + typ + "_" + target }

// rgTarget is a lock target unique to the test (and round).
func rgTarget(t testing.TB, round int) string {
	return strings.ReplaceAll(t.Name(), "/", ".") + "." + fmt.Sprint(round)
}

func mustGen(t testing.TB, g *dlock.Generator, typ, target string, lease time.Duration) *dlock.DistributedReentrantLock {
	t.Helper()
	l, err := g.GenWithLease(typ, target, lease)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func rgBG() context.Context { return context.Background() }

// rgCtx returns a context with timeout d, cancelled when t ends.
func rgCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(rgBG(), d)
	t.Cleanup(cancel)
	return ctx
}

// rgWaitUntil polls cond until it holds or d passes; it reports whether it held.
func rgWaitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// becomesFree reports whether l (another generator's handle) gets the lock with TryLock within
// d; it lets it go again at once.
func becomesFree(t testing.TB, l *dlock.DistributedReentrantLock, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		owned, ok, err := l.TryLock(rgBG())
		if ok {
			if err := l.Unlock(owned); err != nil {
				t.Errorf("Unlock after the freedom probe: %v", err)
			}
			return true
		}
		if err != nil {
			t.Logf("freedom probe: TryLock: %v", err)
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holderOf describes what Redis holds under key, for failure messages.
func holderOf(c *redis.Client, key string) string {
	v, err := c.Get(rgBG(), key).Result()
	if err != nil {
		return fmt.Sprintf("(GET: %v)", err)
	}
	return fmt.Sprintf("%q with PTTL %v", v, c.PTTL(rgBG(), key).Val())
}

// recv waits for a value on ch for at most d.
func rgRecv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
	var zero T
	return zero
}

// lockAsync runs l.Lock(ctx) in a goroutine and sends its Owner (nil after an error, which
// fails the test).
func lockAsync(t testing.TB, l *dlock.DistributedReentrantLock, ctx context.Context) <-chan *dlock.Owner {
	got := make(chan *dlock.Owner, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	return got
}

// lockBriefly runs l.Lock with a deadline of d in a goroutine, unlocks at once what it got,
// and sends the Lock's error.
func lockBriefly(l *dlock.DistributedReentrantLock, ctx context.Context, d time.Duration) <-chan error {
	got := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		o, err := l.Lock(lctx)
		if err == nil {
			_ = o.Unlock()
		}
		got <- err
	}()
	return got
}

type rgLockResult struct {
	owned context.Context
	err   error
	at    time.Time
}

// rgLockAsync runs l.Lock(ctx) in a goroutine.
func rgLockAsync(l *dlock.DistributedReentrantLock, ctx context.Context) <-chan rgLockResult {
	ch := make(chan rgLockResult, 1)
	go func() {
		o, err := l.Lock(ctx)
		ch <- rgLockResult{o, err, time.Now()}
	}()
	return ch
}

type faultMode int32

const (
	passThrough faultMode = iota
	// loseReply lets the command run on Redis, then returns a network timeout to the caller.
	loseReply
	// holdOnWire holds the command until the caller's context ends (at most holdCap), returns
	// the context's error (or a timeout) to the caller, and runs the command on Redis `late`
	// after that, as a request stuck in the network that arrives after the caller gave up.
	holdOnWire
	// slowReply holds the command until the caller's context ends (at most holdCap), waits
	// `late` more, then runs it on Redis and returns Redis's real reply to the caller: a
	// reply that comes after the caller's deadline.
	slowReply
)

// holdCap bounds how long holdOnWire waits for the caller's context to end.
const holdCap = 2 * time.Second

// injectedTimeout is a net.Error timeout.
type injectedTimeout struct{}

func (injectedTimeout) Error() string { return "i/o timeout (injected by faultHook)" }

func (injectedTimeout) Timeout() bool { return true }

func (injectedTimeout) Temporary() bool { return true }

// faultHook affects, once armed, the first EVALSHA/EVAL sent after arming whose first key
// (Args()[3]) is the armed key, then disarms. It also counts the script calls on the watched
// key, and can delay every command of its client.
type faultHook struct {
	late atomic.Int64 // nanoseconds; see holdOnWire and slowReply

	mode  atomic.Int32
	key   atomic.Pointer[string]
	delay atomic.Int64 // nanoseconds every command waits before it is sent

	seen    atomic.Int64  // EVALSHA/EVAL calls on key that got an answer
	fired   chan struct{} // one value per faulted command (after its fault)
	lateRun chan error    // the outcome of a held command's late run on Redis

	wg sync.WaitGroup
}

func newFaultHook() *faultHook {
	h := &faultHook{fired: make(chan struct{}, 16), lateRun: make(chan error, 16)}
	h.setLate(200 * time.Millisecond)
	return h
}

func (h *faultHook) setLate(d time.Duration) { h.late.Store(int64(d)) }

// watch sets the key whose script calls are counted (and faulted when armed).
func (h *faultHook) watch(key string) { h.key.Store(&key) }

// arm faults the next script call on key.
func (h *faultHook) arm(mode faultMode, key string) {
	h.watch(key)
	h.mode.Store(int32(mode))
}

func (h *faultHook) disarm() { h.mode.Store(int32(passThrough)) }

func (h *faultHook) setDelay(d time.Duration) { h.delay.Store(int64(d)) }

func (h *faultHook) wait() { h.wg.Wait() }

func (h *faultHook) scriptOnKey(cmd redis.Cmder) bool {
	k := h.key.Load()
	if k == nil {
		return false
	}
	args := cmd.Args()
	if len(args) < 4 {
		return false
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	return (name == "evalsha" || name == "eval") && fmt.Sprint(args[3]) == *k
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if d := h.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		return next(ctx, cmds)
	}
}

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d := h.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		if !h.scriptOnKey(cmd) {
			return next(ctx, cmd)
		}
		m := faultMode(h.mode.Load())
		if m == passThrough || !h.mode.CompareAndSwap(int32(m), int32(passThrough)) {
			err := next(ctx, cmd)
			h.seen.Add(1)
			return err
		}
		switch m {
		case loseReply:
			err := next(ctx, cmd)
			h.seen.Add(1)
			if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				h.mode.Store(int32(loseReply)) // nothing ran; go-redis retries with EVAL: fault that
				return err
			}
			h.fired <- struct{}{}
			return injectedTimeout{}
		case holdOnWire:
			h.wg.Add(1) // before fired: a test that heard it may wait for the copy
			h.fired <- struct{}{}
			select {
			case <-ctx.Done():
			case <-time.After(holdCap):
			}
			clone := redis.NewCmd(context.WithoutCancel(ctx), cmd.Args()...)
			go func() {
				defer h.wg.Done()
				time.Sleep(time.Duration(h.late.Load()))
				err := next(context.WithoutCancel(ctx), clone)
				if err == nil {
					err = clone.Err()
				}
				h.lateRun <- err
			}()
			if err := ctx.Err(); err != nil {
				return err
			}
			return injectedTimeout{}
		case slowReply:
			h.fired <- struct{}{}
			select {
			case <-ctx.Done():
			case <-time.After(holdCap):
			}
			time.Sleep(time.Duration(h.late.Load()))
			err := next(context.WithoutCancel(ctx), cmd)
			h.lateRun <- err
			return err
		}
		return next(ctx, cmd)
	}
}

// awaitLateRun waits for the held command to have run on Redis and fails t if it did not
// really run (which would make the test vacuous).
func (h *faultHook) awaitLateRun(t testing.TB) {
	t.Helper()
	err := rgRecv(t, h.lateRun, 10*time.Second, "the held command's late run")
	if err != nil && (strings.HasPrefix(err.Error(), "NOSCRIPT") || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("setup: the held command did not run on Redis: %v", err)
	}
}

// awaitTry waits (at most 2 s) until the hook has seen an answered lock-script call on its key
// beyond since. It only orders events (a waiter has asked Redis once), so a miss is logged.
func awaitTry(t testing.TB, h *faultHook, since int64) {
	t.Helper()
	if !rgWaitUntil(2*time.Second, func() bool { return h.seen.Load() > since }) {
		t.Logf("no script call on the key seen from the waiting generator; going on")
	}
}

// cutShort arms mode on key and runs call under a context of 20 ms, so that its attempt gives
// up with the faulted request on its way; it returns once the fault was hit. A call sends
// nothing once its context has ended: on a loaded machine 20 ms may pass before the first
// request, and the call is made again with a longer context (200 ms, then a second).
func (h *faultHook) cutShort(t testing.TB, mode faultMode, key string, call func(ctx context.Context)) {
	t.Helper()
	for _, d := range []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, time.Second} {
		h.arm(mode, key)
		ctx, cancel := context.WithTimeout(rgBG(), d)
		call(ctx)
		cancel()
		select {
		case <-h.fired:
			return
		case <-time.After(time.Second): // (a request handed to the client as the call returned)
		}
		h.disarm()
		select {
		case <-h.fired: // (disarmed just after it was hit)
			return
		default:
		}
		t.Logf("the call sent nothing within %v: again with a longer context", d)
	}
	t.Fatal("setup: the fault hook was never hit (no lock script call on the key)")
}

func (h *faultHook) mustHaveFired(t testing.TB) {
	t.Helper()
	select {
	case <-h.fired:
	case <-time.After(5 * time.Second):
		t.Fatal("setup: the fault hook was never hit (no lock script call on the key)")
	}
}

type rgStay struct {
	key, who string
	owned    context.Context
	tok      uint64
	hasTok   bool
}

type rgGuard struct {
	t      testing.TB
	mu     sync.Mutex
	in     map[string][]*rgStay
	max    map[string]uint64
	n      map[string]int
	errors int
}

func newRgGuard(t testing.TB) *rgGuard {
	return &rgGuard{t: t, in: map[string][]*rgStay{}, max: map[string]uint64{}, n: map[string]int{}}
}

func (g *rgGuard) fail(format string, args ...any) {
	g.errors++
	if g.errors <= 10 {
		g.t.Errorf(format, args...)
	}
}

// enter records that who acquired key with owned. It fails the test when another holder of
// key is inside with its owner context alive (neither released, lost nor closed), when the
// token equals a present holder's, and when the token is not larger than every earlier one.
func (g *rgGuard) enter(key, who string, l *dlock.DistributedReentrantLock, owned context.Context) *rgStay {
	s := &rgStay{key: key, who: who, owned: owned}
	s.tok, s.hasTok = l.FencingToken(owned)
	alive := owned.Err() == nil
	if alive && !s.hasTok {
		g.t.Errorf("%s: %s holds %s but FencingToken says it does not", key, who, key)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n[key]++
	for _, o := range g.in[key] {
		if o.owned.Err() == nil {
			g.fail("%s: %s acquired (token %d) while %s holds it (token %d) with a live owner context", key, who, s.tok, o.who, o.tok)
		}
		if s.hasTok && o.hasTok && o.tok == s.tok {
			g.fail("%s: %s and %s hold with the same fencing token %d", key, who, o.who, s.tok)
		}
	}
	if s.hasTok && alive && len(g.in[key]) == 0 && s.tok <= g.max[key] {
		g.fail("%s: %s got fencing token %d, not larger than an earlier %d", key, who, s.tok, g.max[key])
	}
	if s.tok > g.max[key] {
		g.max[key] = s.tok
	}
	g.in[key] = append(g.in[key], s)
	return s
}

func (g *rgGuard) leave(s *rgStay) {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := g.in[s.key]
	for i, o := range in {
		if o == s {
			g.in[s.key] = append(in[:i:i], in[i+1:]...)
			return
		}
	}
}

func (g *rgGuard) count(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[key]
}

// soakFor is how long the exclusion soaks run: 3 s, or DLOCK_SOAK (a Go duration).
func soakFor(t testing.TB) time.Duration {
	v := os.Getenv("DLOCK_SOAK")
	if v == "" {
		return 3 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Logf("DLOCK_SOAK=%q is not a Go duration; soaking 30s", v)
		return 30 * time.Second
	}
	return d
}

// checkPTTL checks that key's remaining time to live right after an acquisition with lease is
// at least half of it (Lock never returns with less), and, for an acquisition that took the
// key from Redis (fresh), at most the lease. (A pass within a process after a longer lease
// renews with the new one, which never shortens what Redis holds: the key may live longer.)
func checkPTTL(t testing.TB, c *redis.Client, key string, lease time.Duration, fresh bool, what string) {
	t.Helper()
	pttl, err := c.PTTL(rgBG(), key).Result()
	if err != nil {
		t.Errorf("%s: PTTL: %v", what, err)
		return
	}
	if pttl <= lease/2 || (fresh && pttl > lease) {
		t.Errorf("%s: key %s has PTTL %v right after the acquisition, want at least half the handle's lease %v (fresh: %v)",
			what, key, pttl, lease, fresh)
	}
}

// holdUnovertaken holds owned for 1.5 s while other (another generator's handle) tries Lock
// with a 2 s deadline: other must not get the lock before owned is unlocked.
func holdUnovertaken(t *testing.T, l *dlock.DistributedReentrantLock, owned context.Context, other *dlock.DistributedReentrantLock) {
	t.Helper()
	var releasing atomic.Bool
	octx, cancel := context.WithTimeout(rgBG(), 2*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		o, err := other.Lock(octx)
		if err == nil {
			if !releasing.Load() && owned.Err() == nil {
				err = fmt.Errorf("another generator took the lock while its holder (owner context alive) held it")
			}
			_ = other.Unlock(o)
		} else if errors.Is(err, dlock.ErrNotObtained) {
			err = nil
		}
		got <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	if owned.Err() != nil {
		t.Errorf("the holder's owner context ended while it held: %v", context.Cause(owned))
	}
	releasing.Store(true)
	if err := l.Unlock(owned); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if err := rgRecv(t, got, 10*time.Second, "the other generator's Lock"); err != nil {
		t.Error(err)
	}
}

// loseIt overwrites key so that the next renewal finds it taken.
func loseIt(t testing.TB, c *redis.Client, key string) {
	t.Helper()
	if err := c.Set(rgBG(), key, "someone-else", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(rgBG(), key) })
}

// checkLost checks every answer about a lost holding.
func checkLost(t testing.TB, l *dlock.DistributedReentrantLock, owned context.Context) {
	t.Helper()
	if owned.Err() == nil {
		t.Errorf("owner context not done after the loss")
	}
	if cause := context.Cause(owned); !errors.Is(cause, dlock.ErrLockLost) {
		t.Errorf("context.Cause(owned) = %v, want ErrLockLost", cause)
	}
	if n := l.HoldCount(owned); n != 0 {
		t.Errorf("HoldCount(owned) = %d after the loss, want 0", n)
	}
	if tok, ok := l.FencingToken(owned); ok {
		t.Errorf("FencingToken(owned) = %d, true after the loss, want ok == false", tok)
	}
	if o, err := l.Lock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Lock(owned) = %v after the loss, want ErrLockLost", err)
		if err == nil && o != nil {
			_ = l.Unlock(o)
		}
	}
	if o, ok, err := l.TryLock(owned); o != nil || ok || !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("TryLock(owned) = (%v, %v, %v) after the loss, want (nil, false, ErrLockLost)", o, ok, err)
		if ok {
			_ = l.Unlock(o)
		}
	}
	if n := l.HoldCount(owned); n != 0 {
		t.Errorf("HoldCount(owned) = %d after the loss and the calls above, want 0", n)
	}
	if err := l.Unlock(owned); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock(owned) = %v after the loss, want ErrLockLost", err)
	}
}

type rgCtxKey struct{}

func ownRedis(t *testing.T) *redistest.Server {
	t.Helper()
	s, err := redistest.StartReal()
	if err != nil {
		if redistest.Required() {
			t.Fatal(err)
		}
		t.Skipf("needs a redis-server of its own: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// keysOf lists the keys s holds (SCAN skips expired ones).
func keysOf(t testing.TB, c *redis.Client) []string {
	t.Helper()
	var all []string
	var cursor uint64
	for {
		keys, next, err := c.Scan(rgBG(), cursor, "*", 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, keys...)
		if cursor = next; cursor == 0 {
			return all
		}
	}
}

func expectEmpty(t *testing.T, c *redis.Client, within time.Duration) {
	t.Helper()
	var left []string
	if rgWaitUntil(within, func() bool { left = keysOf(t, c); return len(left) == 0 }) {
		return
	}
	show := left
	if len(show) > 5 {
		show = show[:5]
	}
	var desc []string
	for _, k := range show {
		desc = append(desc, fmt.Sprintf("%s (PTTL %v)", k, c.PTTL(rgBG(), k).Val()))
	}
	t.Fatalf("%d keys left %v after everything was closed, e.g. %s", len(left), within, strings.Join(desc, ", "))
}

// ownServer starts a redis-server of the test's own, which it may kill and restart.
func ownServer(t *testing.T) *redistest.Server {
	s, err := redistest.StartReal()
	if err != nil {
		if redistest.Required() {
			t.Fatal(err)
		}
		t.Skipf("needs a redis-server it can restart: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

type recorder struct {
	dlock.NopObserver
	mu        sync.Mutex
	acquired  []dlock.AcquireEvent
	released  []dlock.ReleaseEvent
	lost      []dlock.LossEvent
	redisErrs []dlock.RedisErrorEvent
}

func (r *recorder) Acquired(e dlock.AcquireEvent) {
	r.mu.Lock()
	r.acquired = append(r.acquired, e)
	r.mu.Unlock()
}

// hows returns how each acquisition recorded was served, in order.
func (r *recorder) hows() []dlock.How {
	r.mu.Lock()
	defer r.mu.Unlock()
	var hows []dlock.How
	for _, e := range r.acquired {
		hows = append(hows, e.How)
	}
	return hows
}

func (r *recorder) Released(e dlock.ReleaseEvent) {
	r.mu.Lock()
	r.released = append(r.released, e)
	r.mu.Unlock()
}

func (r *recorder) Lost(e dlock.LossEvent) { r.mu.Lock(); r.lost = append(r.lost, e); r.mu.Unlock() }

func (r *recorder) RedisError(e dlock.RedisErrorEvent) {
	r.mu.Lock()
	r.redisErrs = append(r.redisErrs, e)
	r.mu.Unlock()
}

type howRecorder struct {
	dlock.NopObserver
	mu  sync.Mutex
	how []dlock.How
}

func (r *howRecorder) Acquired(e dlock.AcquireEvent) {
	r.mu.Lock()
	r.how = append(r.how, e.How)
	r.mu.Unlock()
}

// contend runs goroutines × rounds lock trips on handles from gens and fails on overlap.
func contend(t *testing.T, gens []*dlock.Generator, typ string, goroutines, rounds int, hold time.Duration) {
	t.Helper()
	var inside, done atomic.Int64
	var wg sync.WaitGroup
	ctx := ctxT(t, 2*time.Minute)
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, _ := gens[i%len(gens)].Gen(typ, target(t))
			for r := 0; r < rounds; r++ {
				owned, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two owners at once")
				}
				time.Sleep(hold)
				inside.Add(-1)
				done.Add(1)
				if err := l.Unlock(owned); err != nil {
					t.Error(err)
				}
			}
		}(i)
	}
	wg.Wait()
	if done.Load() != int64(goroutines*rounds) {
		t.Fatalf("%d trips, want %d", done.Load(), goroutines*rounds)
	}
	for _, g := range gens {
		settled(t, g)
	}
}

// settled waits until g keeps no lock state and no subscription: unsubscribing runs in the
// background, after the last waiter left. The bound (5 s) only turns a leak into a failure.
func settled(t *testing.T, g *dlock.Generator) {
	t.Helper()
	for i := 0; g.InUse() != 0 || g.Subscribed() != 0; i++ {
		if i == 500 {
			t.Fatalf("left behind: %d states, %d subscriptions", g.InUse(), g.Subscribed())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockOnce locks and unlocks l in a goroutine and reports the outcome.
func lockOnce(ctx context.Context, l *dlock.DistributedReentrantLock) <-chan error {
	got := make(chan error, 1)
	go func() {
		o, err := l.Lock(ctx)
		if err == nil {
			err = l.Unlock(o)
		}
		got <- err
	}()
	return got
}

// sentThrough counts the requests of the script named name that p passes to Redis by EVALSHA
// (as a process sends each after its first). It sets p's shaper, which delays nothing.
func sentThrough(p *faultproxy.Proxy, name string) *atomic.Int64 {
	var n atomic.Int64
	p.SetShaper(func(toTarget bool, chunk []byte) time.Duration {
		const verb = "evalsha\r\n$40\r\n"
		if i := bytes.Index(chunk, []byte(verb)) + len(verb); toTarget && i >= len(verb) && len(chunk) >= i+40 &&
			processor.ScriptName([]any{"evalsha", string(chunk[i : i+40])}) == name {
			n.Add(1)
		}
		return 0
	})
	return &n
}

// stormSize is the number of waiters in the cancellation storm: 2000 by default, 10000 (as the
// fault-injection issue asks) with DLOCK_SOAK set.
func stormSize() int {
	if os.Getenv("DLOCK_SOAK") != "" {
		return 10000
	}
	return 2000
}

// scriptIs matches the commands that run the script name (processor.ScriptName).
func scriptIs(name string) func(args []any) bool {
	return func(args []any) bool { return processor.ScriptName(args) == name }
}

// proxiedGen returns a Generator whose client, of options (given the proxy's address), reaches
// Redis through a fault proxy, with a lease of a second unless opts say otherwise, and the
// proxy. When t ends the proxy stops delaying and dropping, and all of them are closed.
func proxiedGen(t testing.TB, options func(addr string) *redis.Options, opts ...dlock.Option) (*dlock.Generator, *redis.Client, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(options(p.Addr()))
	g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithDefaultLease(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.SetLatency(0)
		p.Blackhole(false)
		_ = g.Close(context.Background())
		_ = c.Close()
		_ = p.Close()
	})
	return g, c, p
}

// partitionable returns a Generator whose client reaches Redis through a fault proxy, and the
// proxy: its Blackhole is a partition. The client waits a minute to dial and to read, so a
// request that nothing else bounds is held that long. The client has one connection made
// before any partition. When t ends the partition heals and all of them are closed.
func partitionable(t testing.TB, opts ...dlock.Option) (*dlock.Generator, *faultproxy.Proxy) {
	t.Helper()
	g, c, p := proxiedGen(t, func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, DialTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	}, opts...)
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return g, p
}

// sharedLock is a lock as one process makes it: its configuration, the holder's acquisition,
// the dying waiter's and that of the process behind it. A read-write lock or a semaphore
// leaves line and channel nil (its shared line); a mutex sets them: line returns the
// processes in line, channel the one a process in line listens on.
type sharedLock struct {
	cfg                domain.DLockConfig
	hold, dead, behind func(ctx context.Context) (*dlock.Owner, error)
	line               func(ctx context.Context) []string
	channel            func(entry string) string
}

// deadWaiterIsPassedOver checks that a waiting process that dies (its connections to Redis
// close, as with kill -9) holds up nobody: it listens on its channel as it renews its line
// entry, dies, and as the holder lets go the process behind it is served, rather than once the
// dead one's entry expired (a lease after its last renewal). mk makes the lock in a process
// (Generator).
func deadWaiterIsPassedOver(t *testing.T, mk func(g *dlock.Generator) sharedLock) {
	const lease = 30 * time.Second // (a waiter renews its entry every sixth of it)
	ctx := ctxT(t, 2*lease)
	raw := rawClient(t)
	gh, _ := newGen(t, dlock.WithDefaultLease(lease))
	h := mk(gh)
	held, err := h.hold(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := processor.SharedKeys(h.cfg)
	shared := h.line == nil
	if shared {
		h.line = func(ctx context.Context) []string { return raw.ZRange(ctx, keys[2], 0, -1).Val() }
		h.channel = func(entry string) string { return processor.SharedChannel(h.cfg, entry) }
	}
	cd := srv.Client() // the dying process's own connections
	gd, err := dlock.NewGenerator(cd, dlock.WithDefaultLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gd.Close(closeCtx) // (its client is closed: it gives back nothing)
	}()
	d := mk(gd)
	go func() { _, _ = d.dead(ctx) }() // (ends with gd)
	var owner, channel string
	waitFor(t, func() bool {
		line := h.line(ctx)
		if len(line) != 1 {
			return false
		}
		owner, channel = line[0], h.channel(line[0])
		n, err := raw.PubSubNumSub(ctx, channel).Result()
		return err == nil && n[channel] > 0
	})
	if shared { // it renews its entry while it listens (its next ask, at most a sixth of the lease away)
		entry := raw.HGet(ctx, keys[3], owner).Val()
		waitFor(t, func() bool { return raw.HGet(ctx, keys[3], owner).Val() != entry })
	}
	gb, _ := newGen(t, dlock.WithDefaultLease(lease))
	b := mk(gb)
	served := make(chan error, 1)
	go func() {
		o, err := b.behind(ctx)
		if err == nil {
			err = o.Unlock()
		}
		served <- err
	}()
	waitFor(t, func() bool { return len(h.line(ctx)) == 2 })
	_ = cd.Close() // the waiting process dies: Redis drops its subscription with the connection
	waitFor(t, func() bool {
		n, err := raw.PubSubNumSub(ctx, channel).Result()
		return err == nil && n[channel] == 0
	})
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(lease / 3): // (a hang made a failure: the dead entry lives up to a lease)
		t.Fatal("the process behind a dead waiter was not served once the holder let go")
	}
}

// sharedArg returns the argument name of a, a request of shared.lua sent by EVALSHA or EVAL (a
// command's arguments as go-redis holds them), as the script's table A names it; "" for any
// other command, or when a does not carry it.
func sharedArg(a []any, name string) string {
	if processor.ScriptName(a) != "shared" {
		return ""
	}
	src := processor.Sources()["shared"]
	marker := "\n    " + name + " = ARGV["
	at := strings.Index(src, marker)
	if at < 0 {
		panic("shared.lua names no argument " + name)
	}
	rest := src[at+len(marker):]
	i, err := strconv.Atoi(rest[:strings.IndexByte(rest, ']')])
	if err != nil {
		panic(err)
	}
	keys, _ := strconv.Atoi(fmt.Sprint(a[2])) // EVALSHA, its SHA, the key count, the keys, then ARGV
	if j := 3 + keys + i - 1; j < len(a) {
		return fmt.Sprint(a[j])
	}
	return ""
}

// unstallAll lets every stalled request go on and stalls no more.
func (w *wire) unstallAll() {
	w.mu.Lock()
	clear(w.stallN)
	w.mu.Unlock()
	w.unstall()
}

// mustLock locks l or fails t.
func mustLock(t testing.TB, l *dlock.DistributedReentrantLock, ctx context.Context) *dlock.Owner {
	t.Helper()
	o, err := l.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return o
}

// stateOf reads l's State or fails t.
func stateOf(t testing.TB, l *dlock.DistributedReentrantLock) dlock.State {
	t.Helper()
	s, err := l.State(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return s
}

// notYet fails t if ch already has a value: what must not have happened yet. The pause only
// gives a defect the chance to show.
func notYet[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	select {
	case v := <-ch:
		t.Fatalf("%s: %v", what, v)
	default:
	}
}

// everyKind returns a mutex, a semaphore (of k permits) and a read-write lock of g, in that key
// order, named by tg.
func everyKind(t testing.TB, g *dlock.Generator, tg string, k int) (*dlock.DistributedReentrantLock, *dlock.Semaphore, *dlock.RWLock) {
	t.Helper()
	sem, err := g.GenSemaphore("PMB", tg, k)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := g.GenRW("PMC", tg)
	if err != nil {
		t.Fatal(err)
	}
	return mustGen(t, g, "PMA", tg, 5*time.Second), sem, rw
}

// chaosHook plays a faulty network for the library's writes (every script but the read-only
// inspection), pct percent of them: a copy delivered again at once or up to two leases
// later (a client's retry, a duplicated packet), a reply lost after the script ran (the
// caller sees a timeout), a request kept on the wire (the caller sees a timeout at once, and
// Redis runs it up to two leases later), or a request slowed on its way (so that a later one
// overtakes it). match, if set, narrows what it touches.
type chaosHook struct {
	lease time.Duration
	pct   int
	match func(args []any) bool

	mu    sync.Mutex
	rng   *rand.Rand
	stop  bool            // under mu; once set, nothing more is faulted
	wg    sync.WaitGroup  // copies on their way; Add only under mu while !stop, so never beside Wait
	count [5]atomic.Int64 // by fault
}

// The faults of a chaosHook.
const (
	chaosDupNow = iota
	chaosDupLater
	chaosLostReply
	chaosOnWire
	chaosSlow
)

func newChaosHook(lease time.Duration, pct int, seed uint64) *chaosHook {
	return &chaosHook{lease: lease, pct: pct, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (h *chaosHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *chaosHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// draw returns the fault for a request (-1 for none) and a delay within two leases. A fault
// that sends a copy later counts the copy in wg before it returns.
func (h *chaosHook) draw() (int, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop || h.rng.IntN(100) >= h.pct {
		return -1, 0
	}
	fault := h.rng.IntN(5)
	if fault == chaosDupLater || fault == chaosOnWire {
		h.wg.Add(1)
	}
	return fault, time.Duration(h.rng.Int64N(int64(2 * h.lease)))
}

func (h *chaosHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := processor.ScriptName(cmd.Args())
		if name == "" || name == "inspect" || (h.match != nil && !h.match(cmd.Args())) {
			return next(ctx, cmd)
		}
		fault, delay := h.draw()
		if fault < 0 {
			return next(ctx, cmd)
		}
		h.count[fault].Add(1)
		args := append([]any(nil), cmd.Args()...)
		later := func(d time.Duration) { // draw counted it in wg
			go func() {
				defer h.wg.Done()
				time.Sleep(d)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = next(ctx, redis.NewCmd(ctx, args...))
			}()
		}
		switch fault {
		case chaosDupNow:
			err := next(ctx, cmd)
			c := redis.NewCmd(context.WithoutCancel(ctx), args...)
			_ = next(context.WithoutCancel(ctx), c)
			return err
		case chaosDupLater:
			err := next(ctx, cmd)
			later(delay)
			return err
		case chaosLostReply:
			if err := next(ctx, cmd); err != nil {
				return err
			}
			cmd.SetErr(injectedTimeout{})
			return cmd.Err()
		case chaosOnWire:
			later(delay)
			cmd.SetErr(injectedTimeout{})
			return cmd.Err()
		default: // slowed on its way: a later request may reach Redis first
			time.Sleep(delay / 4)
			return next(ctx, cmd)
		}
	}
}

// setPct sets the share of writes faulted from now on.
func (h *chaosHook) setPct(pct int) {
	h.mu.Lock()
	h.pct = pct
	h.mu.Unlock()
}

// quiet stops the faults and waits for every copy still on its way.
func (h *chaosHook) quiet() {
	h.mu.Lock()
	h.stop = true
	h.mu.Unlock()
	h.wg.Wait()
}

func (h *chaosHook) String() string {
	return fmt.Sprintf("dup at once %d, dup later %d, reply lost %d, kept on the wire %d, slowed %d",
		h.count[0].Load(), h.count[1].Load(), h.count[2].Load(), h.count[3].Load(), h.count[4].Load())
}

// chaosGen returns a Generator ("a process") on a client of its own behind h. When t ends the
// Generator is closed, h's copies delivered, and the client closed.
func chaosGen(t testing.TB, h *chaosHook, opts ...dlock.Option) *dlock.Generator {
	t.Helper()
	c := srv.Client()
	c.AddHook(h)
	g, err := dlock.NewGenerator(c, append([]dlock.Option{dlock.WithDefaultLease(h.lease)}, opts...)...)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		h.quiet()
		c.Close()
	})
	return g
}

// documentedErr reports whether err is one of the errors the library documents for a call
// that failed: a sentinel, or a *RedisProcessError.
func documentedErr(err error) bool {
	var rpe *dlock.RedisProcessError
	return errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrLockLost) || errors.Is(err, dlock.ErrClosed) ||
		errors.Is(err, dlock.ErrInvalidConfig) || errors.Is(err, dlock.ErrNotHeld) || errors.As(err, &rpe) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// keysWithoutTTL lists the keys c holds that have no time to live.
func keysWithoutTTL(t testing.TB, c *redis.Client) []string {
	t.Helper()
	var out []string
	for _, k := range keysOf(t, c) {
		if c.PTTL(context.Background(), k).Val() == -1 {
			out = append(out, k)
		}
	}
	return out
}

// keptThrough waits d while o holds, and reports whether o held all along. A holding may lapse
// when the whole process stops running for longer than its renewal's spare time (a quarter of
// the lease, less the drift allowance: README's first Limit), as on a machine loaded far past
// its CPUs; such a loss — one that a stall of the process's timers at least a fifth of the
// lease long came before — is logged and reported as false. Any other end of o fails the test.
func keptThrough(t testing.TB, o *dlock.Owner, d, lease time.Duration, what string) bool {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	end := time.After(d)
	last, worst := time.Now(), time.Duration(0)
	for {
		select {
		case <-tick.C:
			worst, last = max(worst, time.Since(last)), time.Now()
		case <-end:
			return true
		case <-o.Done():
			if g := max(worst, time.Since(last)); errors.Is(context.Cause(o), dlock.ErrLockLost) && g >= lease/5 {
				t.Logf("%s: lost in a stall of the process of %v (lease %v): %v", what, g, lease, context.Cause(o))
				return false
			}
			t.Fatalf("%s: the holding ended while held: %v", what, context.Cause(o))
		}
	}
}

// stallProofLease is the lease of tests that never wait for one to run out: a stall of the
// process of seconds (a machine loaded far past its CPUs) does not run it out, so it changes
// nothing they check, where a second's lease would be lost and fail their Unlock.
const stallProofLease = 10 * time.Second

// stallWatch records, until its test ends, the stalls of this process: the gaps in which a
// 5 ms ticker did not run (a machine loaded far past its CPUs ran nothing of the process). A
// holding's lease may run out in a stall of a fifth of the lease or more (README's first
// Limit), and the library then rightly reports the holding lost, or a request whose answer
// came after the lease or after its bound. Tests excuse such a failure where a stall explains
// it (excused), and fail on it otherwise; tests whose counts of requests depend on the process
// keeping up bound them by what its stalls explain (count).
type stallWatch struct {
	mu   sync.Mutex
	last time.Time       // the ticker's last run
	gaps []time.Duration // the gaps over 20 ms
	ends []time.Time     // when each ended
}

// watchStalls starts a stallWatch, stopped when t ends.
func watchStalls(t testing.TB) *stallWatch {
	w := &stallWatch{last: time.Now()}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				now := time.Now()
				w.mu.Lock()
				if g := now.Sub(w.last); g > 20*time.Millisecond {
					w.gaps, w.ends = append(w.gaps, g), append(w.ends, now)
				}
				w.last = now
				w.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return w
}

// count returns how many stalls longer than gap were seen.
func (w *stallWatch) count(gap time.Duration) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, g := range w.gaps {
		if g > gap {
			n++
		}
	}
	return n
}

// longest returns the longest stall that ended after since, the one going on included (the
// ticker may not have run since the caller did).
func (w *stallWatch) longest(since time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := time.Since(w.last)
	for i, g := range w.gaps {
		if w.ends[i].After(since) {
			d = max(d, g)
		}
	}
	return d
}

// excused reports whether err, a failure of a step of a holding whose Lock began at since (its
// Unlock, or a request made while it held), is one that a stall of the process explains, and
// logs it then: the holding lost (ErrLockLost), or a request not answered in time (a
// *RedisProcessError: no reply before the lease ran out, none within the family's bound of a
// third of the lease, a context's deadline), with a stall of at least a fifth of the lease seen
// since. Any other failure, and these without such a stall, are not excused.
func (w *stallWatch) excused(t testing.TB, err error, since time.Time, lease time.Duration, what string) bool {
	t.Helper()
	if !stallErr(err) {
		return false
	}
	g := w.longest(since)
	if g < lease/5 {
		return false
	}
	t.Logf("%s: %v, after a stall of the process of %v (lease %v)", what, err, g.Round(time.Millisecond), lease)
	return true
}

// stallErr reports whether err is one that a holding's lease run out in a stall gives: the
// holding lost, or a request not answered in time (each of a MultiLock's joined errors so).
func stallErr(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok && fmt.Sprintf("%T", err) == "*errors.joinError" {
		return !slices.ContainsFunc(j.Unwrap(), func(e error) bool { return !stallErr(e) })
	}
	var rpe *dlock.RedisProcessError
	return errors.Is(err, dlock.ErrLockLost) || errors.As(err, &rpe) &&
		(errors.Is(err, dlock.ErrLateReply) || errors.Is(err, dlock.ErrUnanswered) || errors.Is(err, context.DeadlineExceeded))
}

// holderProcess takes the lock typ/target with lease in another process (this test binary run
// again: runHolder) and returns once it holds it; unlock lets it go there and returns what
// that process's Unlock returned. A holder whose renewals must not stall with the test's own
// process (one stopped or starved a moment on a loaded machine), where a short lease is what
// the test is about: the key it holds looks, to the processes here, as it would behind any
// holder of that lease.
func holderProcess(t *testing.T, typ, target string, lease time.Duration) (unlock func() error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DLOCK_TEST_HOLDER=1", "DLOCK_TEST_ADDR="+srv.Addr,
		"DLOCK_TEST_TYPE="+typ, "DLOCK_TEST_TARGET="+target, "DLOCK_TEST_LEASE="+lease.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		in.Close()
		select {
		case <-lines:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
		for range lines {
		}
		_ = cmd.Wait()
	})
	if l, ok := <-lines; !ok || l != "held" {
		t.Fatalf("the holder process: %q, want held", l)
	}
	return func() error {
		if _, err := fmt.Fprintln(in, "unlock"); err != nil {
			return err
		}
		l, ok := <-lines
		switch {
		case !ok:
			return errors.New("the holder process ended without unlocking")
		case l == "unlocked":
			return nil
		case l == "lost":
			return dlock.ErrLockLost
		}
		return errors.New("the holder process's Unlock: " + l)
	}
}

// runHolder is the test binary run by holderProcess: it holds the lock it is told to, says
// "held", and lets it go at the first line on its standard input (or its end), saying
// "unlocked", "lost" (ErrLockLost) or the error.
func runHolder() int {
	lease, err := time.ParseDuration(os.Getenv("DLOCK_TEST_LEASE"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	c := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	defer c.Close()
	g, err := dlock.NewGenerator(c, dlock.WithDefaultLease(lease))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer g.Close(context.Background()) //nolint:errcheck
	l, err := g.Gen(os.Getenv("DLOCK_TEST_TYPE"), os.Getenv("DLOCK_TEST_TARGET"))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := l.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	fmt.Println("held")
	bufio.NewScanner(os.Stdin).Scan()
	switch err := l.Unlock(o); {
	case err == nil:
		fmt.Println("unlocked")
	case errors.Is(err, dlock.ErrLockLost):
		fmt.Println("lost")
	default:
		fmt.Println(err)
	}
	return 0
}

// noLossTold fails t if the Observer rec was told of a loss, or a loss of the lock family was
// logged at Warn (logs), since the test began: why names what makes it no loss.
func noLossTold(t testing.TB, rec *recorder, logs *zapobserver.ObservedLogs, why string) {
	t.Helper()
	rec.mu.Lock()
	lost := slices.Clone(rec.lost)
	rec.mu.Unlock()
	if len(lost) != 0 {
		t.Fatalf("the Observer was told of %d losses (%+v); want none: %s", len(lost), lost, why)
	}
	if n := logs.FilterMessage("dlock: shared holding lost").Len(); n != 0 {
		t.Fatalf("%d warnings of a loss; want none: %s", n, why)
	}
}

// lossesBeforeRelease returns the losses the Observer rec was told of, and how often "dlock:
// lock lost before release" was logged at Warn (logs) for key k, naming the locker: what a
// release that found the key gone or another's reports.
func lossesBeforeRelease(rec *recorder, logs *zapobserver.ObservedLogs, k string) ([]dlock.LossEvent, int) {
	rec.mu.Lock()
	lost := slices.Clone(rec.lost)
	rec.mu.Unlock()
	return lost, namingLocker(logs.FilterMessage("dlock: lock lost before release").FilterField(zap.String("key", k))).Len()
}

// namingLocker keeps the entries of logs that name a locker.
func namingLocker(logs *zapobserver.ObservedLogs) *zapobserver.ObservedLogs {
	return logs.Filter(func(e zapobserver.LoggedEntry) bool {
		l, ok := e.ContextMap()["locker"].(string)
		return ok && l != ""
	})
}

// wipeScriptKeys deletes, through admin, the keys a script command (EVALSHA sha numkeys
// keys... args...) names: the lock's keys removed behind its back, as by an operator or an
// empty restart of Redis.
func wipeScriptKeys(ctx context.Context, admin *redis.Client, args []any) {
	n, _ := strconv.Atoi(fmt.Sprint(args[2]))
	for _, k := range args[3 : 3+n] {
		admin.Del(ctx, fmt.Sprint(k))
	}
}

// reply returns the reply a command of the client's holds, for a script's command whatever
// its type (the processor sends scripts as a type of its own that embeds *redis.Cmd).
func reply(cmd redis.Cmder) (any, bool) {
	c, ok := cmd.(interface{ Val() any })
	if !ok {
		return nil, false
	}
	return c.Val(), true
}

// replyList is reply as a list (a script's reply is one).
func replyList(cmd redis.Cmder) ([]any, bool) {
	v, _ := reply(cmd)
	l, ok := v.([]any)
	return l, ok
}

// redisView describes, for a failure's message, what Redis holds for the lock key lk (every key
// named after it: value, or type, and PTTL) and Redis's clock against token, the fencing token
// of a holding taken at took (by this process's clock): a token taken from the server's clock
// (no counter ahead of it) is that clock in µs as it ran the take.
func redisView(c *redis.Client, lk string, token uint64, took time.Time) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	since := time.Since(took)
	var b strings.Builder
	if now, err := c.Time(ctx).Result(); err != nil {
		fmt.Fprintf(&b, "TIME: %v\n", err)
	} else {
		us := uint64(now.UnixMicro())
		fmt.Fprintf(&b, "server TIME %d µs; token %d; server clock since the token %v; this process's clock since the Lock returned %v\n",
			us, token, time.Duration(int64(us)-int64(token))*time.Microsecond, since)
	}
	keys, err := c.Keys(ctx, "*"+lk+"*").Result()
	if err != nil {
		fmt.Fprintf(&b, "KEYS: %v\n", err)
	}
	if len(keys) == 0 {
		b.WriteString("no key named after the lock\n")
	}
	slices.Sort(keys)
	for _, k := range keys {
		typ := c.Type(ctx, k).Val()
		v := "<" + typ + ">"
		switch typ {
		case "string":
			v = c.Get(ctx, k).Val()
		case "hash":
			v = fmt.Sprint(c.HGetAll(ctx, k).Val())
		case "zset":
			v = fmt.Sprint(c.ZRangeWithScores(ctx, k, 0, -1).Val())
		}
		fmt.Fprintf(&b, "%s = %q (PTTL %v)\n", k, v, c.PTTL(ctx, k).Val())
	}
	return b.String()
}

// lastInLineAsksSeldom counts the asks of the last of the processes in line (asks, each one's
// count) for three seconds behind h, a holding of a short lease (300 ms), and fails t when
// they came at the holder's pace: one a backPace (667 ms), and three more for the edges and a
// renewal run late under load. It returns true when h ran out (Err counts it lost once its
// lease ran out by this process's clock) before the count, or during it with a count over the
// bound: the last in line may have moved up, and nothing was counted behind a short lease.
func lastInLineAsksSeldom(t *testing.T, asks []*atomic.Int64, h *dlock.Owner) (lost bool) {
	t.Helper()
	if h.Err() != nil {
		return true
	}
	last := asks[len(asks)-1]
	before := last.Load()
	start := time.Now()
	time.Sleep(3 * time.Second)
	elapsed := time.Since(start)
	n := last.Load() - before
	t.Logf("the last in line asked %d times in %v (the others %d and %d in all)", n, elapsed, asks[0].Load(), asks[1].Load())
	if bound := 3 + int64(elapsed/(2*time.Second/3)); n > bound {
		if h.Err() != nil {
			return true
		}
		t.Errorf("the last process in line asked %d times in %v behind a 300 ms lease, want at most %d", n, elapsed, bound)
	}
	return false
}
