package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/dlockgo/dlock/dlock"
)

var lockUsage = `
usage: dlock lock [flags] TYPE TARGET

Takes the lock (the mutex) TYPE/TARGET and holds it, its lease renewed, until dlock gets SIGINT,
SIGTERM, SIGHUP or SIGQUIT; then it releases the lock and exits 0 (as "etcdctl lock" without a
command; the read-write lock and the semaphore are held by "dlock exec" around a command). It
waits for the lock as exec does (--wait, -n, --conflict-exit-code). Once the lock is held it
prints one line on standard output, for a script to read:

  DLOCK_KEY=DLOCK_<TYPE>_<TARGET> DLOCK_HOLDER=<locker> DLOCK_FENCING_TOKEN=<n>

A key with characters a shell treats specially (a space, ; $ ' and so on) is printed in single
quotes, so the line is always safe to eval. DLOCK_HOLDER is the locker "dlock status" shows and "dlock release --force --holder" takes;
DLOCK_FENCING_TOKEN is larger than every token handed out before for the key. A script can
hold a lock across several steps (dlock holds it until signalled, whatever became of the script
that started it: the trap releases it when the script exits early):

  coproc dlock lock --wait 30 DEPLOY prod
  trap 'kill "$COPROC_PID" 2>/dev/null' EXIT
  read -r line <&"${COPROC[0]}" || exit 75   # dlock exited: not obtained (see its message)
  eval "$line"                               # sets DLOCK_KEY, DLOCK_HOLDER, DLOCK_FENCING_TOKEN
  ./step1 && ./step2
  kill "$COPROC_PID"; wait "$COPROC_PID"     # releases the lock; 76 if it had been lost

If the lock is lost while held (its key deleted or taken, or renewals failing until the lease
ran out), dlock says so on standard error and exits 76 as soon as it learns of it: at once
when the lease runs out, and at the next renewal (within three quarters of the lease) when
another deleted the key. Whoever acts under the lock must watch for that (a script: wait on
dlock's process). If dlock is killed with SIGKILL, the lock expires when its lease runs out.
` + redisHelp + `
exit status:
  0        the lock was held, and released after SIGINT, SIGTERM, SIGHUP or SIGQUIT
  75       the lock was not obtained within --wait, or at once with -n; --conflict-exit-code
           changes it (0: and dlock says nothing)
  76       the lock was lost while held (or found lost at the release)
  128+S    signal S came while still waiting: nothing is held
  69       Redis unreachable, not serving (out of memory, loading, read-only), not the
           kind the address names (Sentinels, Cluster, one server), or no answer within
           --timeout
  77       Redis refused the user or password, or a command (ACL)
  2        usage error; 1 any other error
`

// released are the signals that end a "dlock lock" (and its wait): exec's forwarded ones, so
// that SIGQUIT (Ctrl-\) too releases the lock rather than dump goroutines and leave it held.
var released = forwarded

// lockOpts are the flags of lock.
type lockOpts struct {
	wait  *waitFlags
	lease *time.Duration
	redis redisFlags
}

// lockCommand is "dlock lock".
func lockCommand() *command {
	return &command{
		name:    "lock",
		summary: "take a lock and hold it until signalled (SIGINT, SIGTERM)",
		usage:   lockUsage,
		define: func(fs *flagSet) runner {
			var o lockOpts
			o.wait = addWaitFlags(fs)
			o.lease = fs.Lease("lease", defaultLease, "lease of the lock, renewed at 3/4 of it while held")
			o.redis = addRedisFlags(fs, redisDefaultDoc)
			fs.elsewhere = map[string]string{}
			for _, name := range []string{"s", "shared", "x", "exclusive", "semaphore", "permits"} {
				fs.elsewhere[name] = "lock holds the mutex only; for the read-write lock or the semaphore, run the command under it with dlock exec"
			}
			return func(out cli, args []string) error {
				pos, _, err := fs.parse(args, 2, false)
				if err != nil {
					return err
				}
				return hold(out, o, pos[0], pos[1])
			}
		},
	}
}

// hold takes typ/target's lock, prints the line that names the holding, and holds the lock
// until a signal (exit 0 after the release) or its loss (76).
func hold(out cli, o lockOpts, typ, target string) error {
	wait, err := o.wait.duration()
	if err != nil {
		return err
	}
	c, l, err := open(o.redis, typ, target, *o.lease)
	if err != nil {
		return err
	}
	defer c.close()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, released...)
	defer signal.Stop(sigs)

	g := mutexLock(l)
	owned, err := acquire(c, g, wait, o.wait.conflict.n, sigs, out.stderr, "lock")
	if err != nil {
		return err
	}
	token, ok := l.FencingToken(owned)
	holder, herr := holderOf(c, l)
	switch {
	case !ok || herr == nil && holder == "":
		return withStatus(exitLost, fmt.Errorf("lock %s lost as soon as it was taken: %s", lockName(g), c.lossCause(owned)))
	case herr != nil:
		_ = unlock(c, g, owned)
		return herr
	}
	cfg := l.Config()
	if _, err := fmt.Fprintf(out.stdout, "DLOCK_KEY=%s DLOCK_HOLDER=%s DLOCK_FENCING_TOKEN=%d\n", shellQuote(cfg.UniqueKey()), shellQuote(holder), token); err != nil {
		_ = unlock(c, g, owned)
		return fmt.Errorf("cannot write to standard output (%v): lock %s released", err, lockName(g))
	}
	select {
	case <-sigs:
	case <-owned.Done():
		return withStatus(exitLost, fmt.Errorf("lock %s lost while held: %s", lockName(g), c.lossCause(owned)))
	}
	if err := unlock(c, g, owned); errors.Is(err, dlock.ErrLockLost) {
		return withStatus(exitLost, fmt.Errorf("lock %s was found lost at release: %s", lockName(g), c.lostReason(err)))
	} else if err != nil {
		return err
	}
	return nil
}

// shellQuote returns s as one word of a POSIX shell, so that the line lock prints can be
// given to eval: s itself when it holds only characters no shell treats specially (every
// key of a plain type and target), else s in single quotes, each single quote in it written
// as quote, backslash, quote, quote (closing the quoting, adding the quote, opening again).
func shellQuote(s string) string {
	plain := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.,:/@%+=", r))
	}) < 0
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// holderOf returns the locker of the holding of l by this process: Redis's holder when it is
// this Generator's, "" when someone else holds the key (ours was lost). The library's Owner
// does not tell its locker, so it is read back with State.
func holderOf(c *conn, l *dlock.DistributedReentrantLock) (string, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	st, err := l.State(ctx)
	if err != nil {
		return "", c.classify(err)
	}
	if !st.Mine {
		return "", nil
	}
	return st.Holder, nil
}
