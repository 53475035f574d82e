package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/dlock"
	"github.com/dlockgo/dlock/processor"
)

var execUsage = `
usage: dlock exec [flags] TYPE TARGET [--] COMMAND [ARG...]

Runs COMMAND while holding the lock TYPE/TARGET (Redis key DLOCK_<TYPE>_<TARGET>), as
flock(1) does with a file: it waits for the lock (at most --wait; -n: not at all), starts
COMMAND, keeps the lease renewed while COMMAND runs, and releases the lock when COMMAND exits.
Flags may come before or after TYPE TARGET; "--" ends them (needed when COMMAND starts with
"-"). When the lock is not obtained COMMAND does not run and dlock exits 75, or the status
--conflict-exit-code gives (as flock -E). A Redis that does not answer at the start is an
error (69) at once; a wait that began goes on through a Redis outage, for as long as --wait
allows (by default until Redis answers again); the first failure is told on standard error.

With --shared (-s) COMMAND holds the read side of the read-write lock TYPE/TARGET, beside any
number of other readers; with --exclusive (-x) its write side, alone (readers and writers of
one resource use these two, not the plain lock, which is another lock). With --semaphore K
--permits N it holds N permits (default 1) of the semaphore TYPE/TARGET of K permits: at most
K permits are out across all processes.

COMMAND runs in a process group of its own, and signals go to the whole group:
  - SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to dlock are passed on to COMMAND, followed by
    SIGCONT, so that a stopped COMMAND acts on them (as kill(1) does for a stopped job). While
    dlock is still waiting for the lock they end the wait instead: nothing runs, exit status
    128+signal.
  - If the lock is lost while COMMAND runs (its key deleted or taken, say by "dlock release
    --force", or renewals failing until the lease ran out), dlock sends SIGTERM (and
    SIGCONT), then SIGKILL after --grace, kills what is left of the group once COMMAND has
    exited, and exits 76 whatever COMMAND's own status.
When dlock runs in the foreground of a terminal (its standard input), COMMAND's group is made
the terminal's foreground group, so it can read the terminal and Ctrl-C reaches it directly.
Ctrl-Z stops COMMAND and dlock both, giving the shell its terminal back; fg or bg goes on with
both (the lock is not renewed while dlock is stopped: found lost as it goes on, it is handled
as above). Without a shell to go on with them (dlock leads its session), COMMAND goes on at once.
If dlock itself is killed with SIGKILL, COMMAND goes on unguarded and the lock expires when
its lease runs out. When COMMAND exits the lock is released: what it left running in the
background goes on without the lock (unlike flock(1)); wait for such jobs inside COMMAND.

COMMAND's environment adds:
  DLOCK_KEY             the lock's Redis key
  DLOCK_FENCING_TOKEN   this acquisition's fencing token: larger than every token handed out
                        before for the key; give it to stores that reject stale writers
  DLOCK_TYPE            the lock type
  DLOCK_TARGET          the lock target (trimmed)
` + redisHelp + `
exit status:
  N        COMMAND exited with N; 128+S when it was killed by signal S
  75       the lock was not obtained within --wait, or at once with -n (COMMAND did not
           run); --conflict-exit-code changes it (0: and dlock says nothing)
  76       the lock was lost while COMMAND ran (COMMAND was stopped), or found lost at the
           release once COMMAND had exited (it may have run without the lock)
  69       Redis unreachable, not serving (out of memory, loading, read-only), not the
           kind the address names (Sentinels, Cluster, one server), or no answer within
           --timeout
  77       Redis refused the user or password, or a command (ACL)
  126/127  COMMAND could not be started / was not found
  2        usage error; 1 any other error
`

// Defaults of exec's flags.
const (
	defaultLease = 30 * time.Second
	defaultGrace = 10 * time.Second
)

// forwarded are the signals exec passes on to its command (and that end its wait for the
// lock).
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// waitFlags are the flags that say how long exec and lock wait, and how they exit when they
// give up: flock's -n, -w and -E.
type waitFlags struct {
	nonblock *bool
	wait     waitValue
	waitDef  *flagDef // tells whether --wait was given
	conflict intValue // an exit status
}

// addWaitFlags defines -n, -w and -E on fs.
func addWaitFlags(fs *flagSet) *waitFlags {
	w := &waitFlags{wait: waitValue{forever}, conflict: intValue{n: exitNotObtained, max: 255}}
	w.nonblock = fs.Bool("nonblock", "n", "fail at once if the lock is held (one attempt, as flock -n)")
	w.waitDef = fs.Var(&w.wait, "wait", "w", "SECONDS",
		`how long to wait for the lock: seconds (as flock -w; 0 tries once, else at least 1ms, and it bounds the first attempt too: a wait shorter than an attempt's round trip to Redis obtains nothing), a duration such as 1m, or "forever"; then, if the wait ran out, up to --timeout more to tell a busy lock from a Redis that fails, and, if Redis failed, up to --timeout more to give back what the last attempt may have taken`)
	fs.Var(&w.conflict, "conflict-exit-code", "E", "N", "exit status when the lock is not obtained (as flock -E)")
	return w
}

// duration returns how long to wait: 0 for one attempt, forever (negative) for no bound.
func (w *waitFlags) duration() (time.Duration, error) {
	if *w.nonblock {
		if w.waitDef.seen && w.wait.d != 0 {
			return 0, usageErrorf("-n (--nonblock) and --wait %v contradict each other: -n makes one attempt", w.wait.String())
		}
		return 0, nil
	}
	return w.wait.d, nil
}

// execOpts are the flags of exec.
type execOpts struct {
	kind  *kindFlags
	wait  *waitFlags
	lease *time.Duration
	grace *time.Duration
	redis redisFlags
}

// execCommand is "dlock exec".
func execCommand() *command {
	return &command{
		name:    "exec",
		summary: "run a command while holding a lock",
		usage:   execUsage,
		define: func(fs *flagSet) runner {
			var o execOpts
			o.wait = addWaitFlags(fs)
			o.kind = addKindFlags(fs, true)
			o.lease = fs.Lease("lease", defaultLease, "lease of the lock, renewed at 3/4 of it while held")
			o.grace = fs.Duration("grace", defaultGrace, "after a lost lock, time between SIGTERM and SIGKILL")
			o.redis = addRedisFlags(fs, redisDefaultDoc)
			return func(out cli, args []string) error {
				pos, argv, err := fs.parse(args, 2, true)
				if err != nil {
					return err
				}
				return execute(out, o, pos[0], pos[1], argv)
			}
		},
	}
}

// lockName names a lock in messages: TYPE/TARGET.
func lockName(l guarded) string {
	cfg := l.Config()
	return fmt.Sprintf("%s/%s", cfg.LockType(), cfg.LockTarget())
}

// execute runs argv under typ/target's lock and returns the exit status as an error (nil for
// a command that exited 0).
func execute(out cli, o execOpts, typ, target string, argv []string) error {
	wait, err := o.wait.duration()
	if err != nil {
		return err
	}
	if _, err := o.redis.endpoint(defaultRedis); err != nil {
		return err
	}
	path, err := exec.LookPath(argv[0])
	if errors.Is(err, exec.ErrDot) { // (found by a PATH entry that is not absolute, "." say: a shell, and flock(1), run it)
		path, err = filepath.Abs(path)
	}
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return withStatus(exitNotFound, fmt.Errorf("command %q not found", argv[0]))
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err
		}
		return withStatus(exitCannotExec, fmt.Errorf("cannot run %q: %v", argv[0], err))
	}
	c, l, err := o.kind.open(o.redis, typ, target, *o.lease)
	if err != nil {
		return err
	}
	defer c.close()

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	owned, err := acquire(c, l, wait, o.wait.conflict.n, sigs, out.stderr, "exec")
	if err != nil {
		return err
	}
	token, ok := l.FencingToken(owned)
	if !ok { // lost already
		return withStatus(exitLost, fmt.Errorf("lock %s lost before the command started: %s", lockName(l), c.lossCause(owned)))
	}
	cfg := l.Config()
	term := foregroundTerminal()
	command := func(path string, argv ...string) *exec.Cmd {
		cmd := exec.Command(path, argv[1:]...)
		cmd.Args[0] = argv[0]
		cmd.Env = append(os.Environ(),
			"DLOCK_KEY="+cfg.UniqueKey(),
			"DLOCK_FENCING_TOKEN="+strconv.FormatUint(token, 10),
			"DLOCK_TYPE="+string(cfg.LockType()),
			"DLOCK_TARGET="+cfg.LockTarget(),
		)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out.stdout, out.stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: term, Ctty: 0}
		return cmd
	}
	cmd := command(path, argv...)
	err = cmd.Start()
	if errors.Is(err, syscall.ENOEXEC) { // a script without "#!": the shell runs it, as execvp(3) (and so flock(1)) does
		cmd = command("/bin/sh", append([]string{"sh", path}, argv[1:]...)...)
		err = cmd.Start()
	}
	if err != nil {
		if err := unlock(c, l, owned); err != nil && !errors.Is(err, dlock.ErrLockLost) {
			fmt.Fprintf(out.stderr, "dlock exec: %v\n", err)
		}
		if errors.Is(err, syscall.ENOENT) { // (LookPath found the file: what is missing is the interpreter its "#!" line names)
			err = fmt.Errorf("cannot run %q: the interpreter its first line (#!) names was not found", argv[0])
		}
		return withStatus(exitCannotExec, err)
	}
	// In a terminal: the command stopped or went on (SIGCHLD), or a stop came to dlock
	// (SIGTSTP: a Ctrl-Z as dlock still had the terminal, or a kill).
	var stops chan os.Signal
	if term {
		defer takeTerminal()
		stops = make(chan os.Signal, 2)
		signal.Notify(stops, syscall.SIGCHLD, syscall.SIGTSTP)
		defer signal.Stop(stops)
	}
	return supervise(out, c, l, owned, cmd, sigs, stops, *o.grace)
}

// acquire takes l: TryLock when wait is 0, else Lock bounded by wait (not at all when wait is
// forever). A signal from sigs ends the wait (status 128+signal); a lock held elsewhere until
// the wait ends is status conflict. The first Redis failure while it waits is told on stderr,
// in a line starting "dlock NAME: " (name is the command's).
func acquire(c *conn, l guarded, wait time.Duration, conflict int, sigs <-chan os.Signal, stderr io.Writer, name string) (*dlock.Owner, error) {
	var (
		ctx    context.Context
		cancel context.CancelFunc
	)
	switch {
	case wait == 0:
		ctx, cancel = c.ctx()
	case wait < 0:
		ctx, cancel = context.WithCancel(context.Background())
	default:
		ctx, cancel = context.WithTimeout(context.Background(), wait)
	}
	defer cancel()
	type result struct {
		owned *dlock.Owner
		held  bool // by someone else: TryLock's false
		err   error
		first bool // the answer to the first attempt
	}
	done := make(chan result, 1)
	go func() {
		if wait == 0 {
			owned, ok, err := l.TryLock(ctx)
			done <- result{owned, !ok && err == nil, err, true}
			return
		}
		// The wait's first failure is told from its first attempt on: what the library does in
		// the background after it (giving back an attempt whose outcome is unknown: a release)
		// must not be the failure told.
		c.notice.waiting(stderr, name, lockName(l))
		defer c.notice.waiting(nil, "", "")
		c.notice.firstAttempt(true)
		// One attempt first: Lock waits through Redis failures, a refusal (ACL) included,
		// which no wait mends; nor does it mend a single server that is a replica as the wait
		// begins (a mistyped address). (Later, READONLY may be a managed failover behind one
		// address: the wait goes on.)
		tctx, tcancel := context.WithTimeout(ctx, c.timeout) // (within --wait, and ended by a signal)
		owned, ok, err := l.TryLock(tctx)
		tcancel()
		c.notice.firstAttempt(false)
		if ok || refused(err) || c.ep.kind == "" && readOnly(err) {
			done <- result{owned, false, err, true}
			return
		}
		owned, err = l.Lock(ctx)
		done <- result{owned, false, err, false}
	}()
	var r result
	select {
	case r = <-done:
	case s := <-sigs:
		cancel()
		if r = <-done; r.err == nil && !r.held {
			_ = unlock(c, l, r.owned)
		}
		return nil, withStatus(128+signum(s), fmt.Errorf("%v while waiting for lock %s: gave up, nothing held", s, lockName(l)))
	}
	switch {
	case r.err == nil && !r.held:
		return r.owned, nil
	case refused(r.err):
		return nil, c.classify(r.err)
	case r.first && (c.ep.kind == "" && readOnly(r.err) || replyStarts(r.err, "OOM")):
		// A replica named as the server: it refused every write; or a server out of memory,
		// which refuses a script at its first write: nothing is held or in line there, and
		// nothing need be given back before the exit (Close would try until --timeout). (A
		// copy of the request that go-redis sent before, after a network error, may have
		// written when memory was still free: the key is then held for a lease, as after a
		// crash.)
		c.quick = true
		return nil, c.classify(r.err)
	case r.held || wait != 0 && errors.Is(r.err, dlock.ErrNotObtained) && errors.Is(r.err, context.DeadlineExceeded):
		// (-n: a TryLock whose --timeout ran out on its way got no answer: Redis's fault, below)
		// Lock keeps waiting through Redis failures: tell an outage from a busy lock, within
		// one --timeout more.
		dctx, dcancel := c.ctx()
		defer dcancel()
		if err := c.pingWithin(dctx); err != nil {
			return nil, err
		}
		held := heldBy(dctx, l)
		// A Redis that answers but serves no write (a replica: READONLY; out of memory, ...)
		// is not a busy lock either, when the last attempt failed so and nobody holds it.
		var pe *dlock.RedisProcessError
		if held == "" && errors.As(r.err, &pe) && isRedisReply(pe.Err) && notServing(strings.TrimSpace(pe.Err.Error())) {
			return nil, redisFailure(c.ep, c.timeout, pe)
		}
		// Nor is a key whose server cannot be reached: a Cluster's shard down, while the
		// ping above went to another shard's master, which answered.
		if held == "" {
			if err := pingShard(dctx, c.client, l.Config().UniqueKey()); err != nil {
				return nil, redisFailure(c.ep, c.timeout, err)
			}
		}
		within := "within --wait " + wait.String()
		if wait == 0 {
			within = "in one attempt (-n, --wait 0)"
		}
		switch {
		case held != "":
		case r.held: // (held at the attempt, let go before the look)
			held = ": no holder found when looked again (let go since)"
		case pe != nil:
			held = fmt.Sprintf(": no other holder found (the last attempt failed: %v)", pe.Err)
		default:
			held = ": no other holder found (let go as the wait ran out, or the wait was shorter than an attempt's round trip to Redis)"
		}
		if conflict == exitOK {
			return nil, withStatus(exitOK, nil) // -E 0: "held elsewhere" is a success, said by nothing (cron mails what is said)
		}
		return nil, withStatus(conflict, fmt.Errorf("lock %s not obtained %s%s", lockName(l), within, held))
	}
	return nil, c.classify(r.err)
}

// readOnly reports whether err carries Redis's READONLY reply: the server is a replica.
func readOnly(err error) bool { return replyStarts(err, "READONLY") }

// replyStarts reports whether err carries Redis's error reply with the given code.
func replyStarts(err error, code string) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(strings.TrimSpace(re.Error()), code+" ")
}

// refused reports whether err carries a refusal that no wait mends: Redis refused the user or
// a command (ACL, inside a script too), does not know a command (not a Redis server), or
// sent the request to another node of a Cluster (a single server's client was given a node).
func refused(err error) bool {
	var pe *dlock.RedisProcessError
	if !errors.As(err, &pe) {
		return false
	}
	return refusedCause(pe.Err)
}

// refusedCause is refused for the cause of a failure, as a dlock.RedisErrorEvent carries it.
func refusedCause(err error) bool {
	_, moved := redis.IsMovedError(err)
	return moved || processor.Refused(err)
}

// pingShard pings the master that serves key, on a Cluster client (nil for other clients).
func pingShard(ctx context.Context, client redis.UniversalClient, key string) error {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return err
	}
	return node.Ping(ctx).Err()
}

// heldBy says who holds l, for the "not obtained" message; "" if that cannot be learnt.
func heldBy(ctx context.Context, l guarded) string {
	if h := l.holders(ctx); h != "" {
		return ": held by " + h
	}
	return ""
}

// supervise waits for cmd to exit while passing on sigs and watching the lock; it stops cmd
// if the lock is lost, then releases the lock and returns the exit status.
func supervise(out cli, c *conn, l guarded, owned *dlock.Owner, cmd *exec.Cmd, sigs, stops <-chan os.Signal, grace time.Duration) error {
	pgid := cmd.Process.Pid // Setpgid with Pgid 0: the group is named after the command
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the status is in cmd.ProcessState
		close(exited)
	}()
	var (
		loss    = owned.Done()
		kill    <-chan time.Time
		lost    bool
		stopped string // what dlock did to the command after the loss
	)
	for running := true; running; {
		select {
		case s := <-sigs:
			signalGroup(pgid, s.(syscall.Signal))
			continueGroup(pgid)
		case s := <-stops:
			switch {
			case s == syscall.SIGTSTP:
				signalGroup(pgid, syscall.SIGTSTP) // the command stops first (then SIGCHLD)
			case isStopped(pgid): // (Ctrl-Z: a terminal's stop goes to its foreground group, the command's)
				suspend(pgid)
			}
		case <-loss:
			loss, lost = nil, true
			signalGroup(pgid, syscall.SIGTERM) // first: nothing may delay it
			continueGroup(pgid)
			fmt.Fprintf(out.stderr, "dlock exec: lock %s lost while the command ran: %s; SIGTERM sent, SIGKILL after %v\n",
				lockName(l), c.lossCause(owned), grace)
			stopped = "SIGTERM sent"
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(out.stderr, "dlock exec: the command did not exit within --grace %v; sending SIGKILL\n", grace)
			signalGroup(pgid, syscall.SIGKILL)
			stopped = "SIGKILL sent after --grace"
		case <-exited:
			running = false
		}
	}
	code := commandStatus(cmd.ProcessState)
	if lost {
		signalGroup(pgid, syscall.SIGKILL) // whatever the command left behind in its group
		_ = unlock(c, l, owned)
		return withStatus(exitLost, fmt.Errorf("lock %s was lost; the command was stopped (%s) and exited with status %d", lockName(l), stopped, code))
	}
	if owned.Err() != nil { // lost as the command exited: it may have run unguarded
		return withStatus(exitLost, fmt.Errorf("lock %s was lost while the command ran: %s (the command exited with status %d)",
			lockName(l), c.lossCause(owned), code))
	}
	switch err := unlock(c, l, owned); {
	case errors.Is(err, dlock.ErrLockLost):
		return withStatus(exitLost, fmt.Errorf("lock %s was found lost at release, so the command may have run without it: %s (the command exited with status %d)",
			lockName(l), c.lostReason(err), code))
	case err != nil:
		fmt.Fprintf(out.stderr, "dlock exec: %v\n", err)
	}
	if code == 0 {
		return nil
	}
	return withStatus(code, nil)
}

// unlock releases owned, waiting at most --timeout. It returns nil, an error matching
// dlock.ErrLockLost when the release found the lock lost, or an error saying the release
// failed (the key then expires with its lease), with status 69 or 77.
func unlock(c *conn, l guarded, owned *dlock.Owner) error {
	done := make(chan error, 1)
	go func() { done <- owned.Unlock() }()
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-t.C:
		err = context.DeadlineExceeded
	}
	if err == nil || errors.Is(err, dlock.ErrLockLost) {
		return err
	}
	f := redisFailure(c.ep, c.timeout, err)
	return withStatus(exitCode(f), fmt.Errorf("could not release lock %s: %s; it expires when its lease (%v) runs out",
		lockName(l), plain(f), l.Config().Lease()))
}

// lossCause says why owned ended: the cause of its cancellation, without the library's
// prefixes ("released by force (ForceRelease)", "the lease ran out without a successful
// renewal").
func (c *conn) lossCause(owned *dlock.Owner) string {
	return c.lostReason(context.Cause(owned))
}

// lostReason says why a lock was lost, err being the loss (matching dlock.ErrLockLost), or nil
// when the key was found held by another process before the library knew of the loss.
func (c *conn) lostReason(err error) string {
	if err == nil {
		return "the key is held by another process"
	}
	msg := strings.TrimPrefix(plain(err), "lock lost: ")
	// The callers' messages say "found lost at release" already.
	if msg = strings.TrimPrefix(msg, "found at release"); msg == "" {
		msg = "the lock had been lost before"
	}
	msg = strings.TrimPrefix(msg, ": ")
	// The library names the lock's key at the end; the message names the lock already.
	if i := strings.LastIndex(msg, " (lock DLOCK_"); i >= 0 && strings.HasSuffix(msg, ")") {
		msg = msg[:i]
	}
	// The library's optimistic-locking detail names the script and the locker: noise here.
	msg, _, _ = strings.Cut(msg, ": "+plain(dlock.ErrOptimisticLocking))
	// Renewals that found no answer before their deadline may have found no connection: say
	// where and why (Redis down, refusing).
	if errors.Is(err, context.DeadlineExceeded) {
		if f := c.ep.failure(c.timeout); f != nil {
			msg += " (" + f.Error() + ")"
		}
	}
	return msg
}

// signalGroup sends sig to the process group pgid; a group already gone is no error.
func signalGroup(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
}

// continueGroup continues the group pgid after a signal that should end it: a command stopped
// (kill -STOP, or a background job that read the terminal and got SIGTTIN) acts on a signal
// only once continued, and would otherwise keep the lock for as long as it stays stopped. So
// kill(1) does for a stopped job, and timeout(1) for the command it signals.
func continueGroup(pgid int) { signalGroup(pgid, syscall.SIGCONT) }

// signum returns the number of s, a syscall.Signal.
func signum(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 0
}

// commandStatus is the status a shell would report for ps: the exit code, or 128+signal.
func commandStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
