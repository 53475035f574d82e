package main

import (
	"fmt"
	"io"
	"strings"
)

var releaseUsage = `
usage: dlock release --force --holder LOCKER [flags] TYPE TARGET
       dlock release --force --any [flags] TYPE TARGET
       dlock release --force (--holder LOCKER | --any) (--shared | --exclusive | --semaphore K) [flags] TYPE TARGET

Deletes the lock TYPE/TARGET, held by someone else, and wakes the processes that wait for it,
as a release does. It is an operator's last resort for a lock stuck in an incident: the
holder is not asked. The holder learns of the loss at its next renewal (within three
quarters of its lease) or release; until then two processes may act as owners, so only
fencing tokens checked downstream keep their writes apart. A "dlock exec" holder stops its
command when it learns of the loss and exits 76, as does a "dlock lock"; a command that ends
before then ran to its end, and its exec exits 76 as it finds the lock lost at release.

Say what to remove:
  --holder LOCKER   the holding of LOCKER, as "dlock status" shows it (or "dlock lock" printed
                    it as DLOCK_HOLDER). The key is let go only if it still holds LOCKER, in
                    one step in Redis: if the holder released meanwhile and another process
                    acquired, nothing is removed. Safe to repeat.
  --any             whoever holds the lock now: dlock reads the holder (as status does) and
                    removes that holding, if it still holds the key. The risk: the holder it
                    reads may be a healthy one that acquired a moment ago, after the stuck one
                    went; it is removed all the same, and goes on as owner until its next
                    renewal, so two processes may act as owners until then. Fencing tokens
                    are the defence. Prefer --holder after looking with "dlock status".

With --shared or --exclusive (the read-write lock TYPE/TARGET) or --semaphore K (the
semaphore TYPE/TARGET), it removes one holding of that lock: --holder names it, as "dlock
status" with the same flag lists it (a process's read-hold, its write-hold, or its permits);
--any removes every holding listed then. Either way the removed lockers are settled: no late
copy of their process's requests takes them back. The processes in line are told, as on a
release.

It prints the holder it removed, or that it found no such holder (already gone, or a name that
never held the lock; the lock free, or held by another locker, which is left alone); both exit 0 (1 when that cannot be written: it is
said on standard error instead). Without --force, or without one of --holder and --any,
release refuses with a usage error (status 2).
` + redisHelp + `
exit status:
  0        removed, or nothing to remove (the message says which)
  69       Redis unreachable, not serving (out of memory, loading, read-only), not the
           kind the address names (Sentinels, Cluster, one server), or no answer within
           --timeout
  77       Redis refused the user or password, or a command (ACL)
  2        usage error; 1 any other error (standard output could not be written, too)
`

// releaseCommand is "dlock release".
func releaseCommand() *command {
	return &command{
		name:    "release",
		summary: "delete a lock held by someone else (--force: an operator's last resort)",
		usage:   releaseUsage,
		define: func(fs *flagSet) runner {
			force := fs.Bool("force", "", "really delete the lock (required)")
			holder := new(string)
			holderDef := fs.Var((*stringValue)(holder), "holder", "", "LOCKER", `remove the holding of LOCKER only (as "dlock status" shows it); safe to repeat (a repeat removes nothing, and says the holder was not found)`)
			anyHolder := fs.Bool("any", "", "remove whoever holds the lock now (see the risk above)")
			kind := addKindFlags(fs, false)
			r := addRedisFlags(fs, redisDefaultDoc)
			return func(out cli, args []string) error {
				pos, _, err := fs.parse(args, 2, false)
				if err != nil {
					return err
				}
				switch {
				case !*force:
					return usageErrorf("refusing without --force: deleting a lock that someone holds is an operator's last resort " +
						"(the holder goes on until its next renewal, so two may act as owners); look with \"dlock status\" first")
				case holderDef.seen && strings.TrimSpace(*holder) == "": // ("$HOLDER" unset in a script: not "no --holder")
					return usageErrorf("--holder is empty: give the LOCKER to remove (as \"dlock status\" shows it)")
				case *holder != "" && *anyHolder:
					return usageErrorf("give --holder LOCKER or --any, not both")
				case *holder == "" && !*anyHolder:
					return usageErrorf("say what to remove: --holder LOCKER (as \"dlock status\" shows it; removes only that holding) " +
						"or --any (whoever holds it now, perhaps a healthy holder that just acquired)")
				}
				if err := kind.check(); err != nil {
					return err
				}
				if kind.named() {
					return releaseShared(out, r, kind, *holder, pos[0], pos[1])
				}
				return release(out, r, *holder, pos[0], pos[1])
			}
		},
	}
}

// release removes holder's holding of typ/target ("" for whoever holds it) and prints what
// it removed.
func release(out cli, r redisFlags, holder, typ, target string) (err error) {
	c, l, err := inspect(r, typ, target)
	if err != nil {
		return err
	}
	defer c.close()
	var said []string // what it did, written at the end
	say := func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) }
	defer func() { err = tell(out.stdout, said, err) }()
	cfg := l.Config()
	name := fmt.Sprintf("%s/%s (key %s)", cfg.LockType(), cfg.LockTarget(), cfg.UniqueKey())
	victim := holder
	if holder == "" { // --any
		ctx, cancel := c.ctx() // (--timeout bounds each call)
		st, err := l.State(ctx)
		cancel()
		if err != nil {
			return c.classify(err)
		}
		if st.Holder == "" {
			say("%s is not held: nothing removed%s", name, besides(c.otherKind(cfg, false)))
			return nil
		}
		victim = st.Holder
	}
	ctx, cancel := c.ctx()
	removed, err := l.ForceRelease(ctx, victim)
	cancel()
	if err != nil {
		return c.classify(err)
	}
	if removed {
		say("released %s: removed holder %s", name, shown(victim))
		return nil
	}
	// Say what is there instead; a failure to look is no failure of the release.
	ctx, cancel = c.ctx()
	defer cancel()
	st, err := l.State(ctx)
	switch {
	case err != nil:
		say("%s: holder %s not found (already gone, or it never held the lock): nothing removed", name, shown(victim))
	case st.Holder == "":
		say("%s: holder %s not found (already gone, or it never held the lock); the lock is not held: nothing removed%s", name, shown(victim), besides(c.otherKind(cfg, false)))
	default:
		say("%s: holder %s not found (already gone, or it never held the lock); the lock is held by %s, left alone: nothing removed",
			name, shown(victim), shown(st.Holder))
	}
	return nil
}

// releaseShared removes holder's holding of typ/target's read-write lock or semaphore (every
// holding, for "") and prints what it removed.
func releaseShared(out cli, r redisFlags, kind *kindFlags, holder, typ, target string) (err error) {
	c, g, err := kind.open(r, typ, target, inspectLease)
	if err != nil {
		return err
	}
	defer c.close()
	var said []string // what it did, written at the end
	say := func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) }
	defer func() { err = tell(out.stdout, said, err) }()
	cfg := g.Config()
	name := fmt.Sprintf("%s/%s (keys %s)", cfg.LockType(), cfg.LockTarget(), sharedKeys(cfg))
	victims := []string{holder}
	if holder == "" { // --any
		ctx, cancel := c.ctx() // (--timeout bounds each call)
		st, err := g.shared(ctx)
		cancel()
		if err != nil {
			return c.classify(err)
		}
		if len(st.Holds) == 0 {
			say("%s is not held: nothing removed%s", name, besides(c.otherKind(cfg, true)))
			return nil
		}
		victims = victims[:0]
		for _, h := range st.Holds {
			victims = append(victims, h.Locker)
		}
	}
	for _, v := range victims {
		ctx, cancel := c.ctx()
		removed, err := g.force(ctx, v)
		cancel()
		if err != nil {
			return c.classify(err)
		}
		if removed {
			say("released %s: removed holder %s", name, shown(v))
		} else {
			say("%s: holder %s not found (already gone, or it never held the lock): nothing removed%s", name, shown(v), besides(c.otherKind(cfg, true)))
		}
	}
	return nil
}

// besides returns a note on a lock of another kind for the end of a line ("" for none).
func besides(other string) string {
	if other == "" {
		return ""
	}
	return "; but " + other
}

// tell writes what release did, lines, at once, and returns err (the release's outcome). When
// they cannot be written, the operator learns what was done from the error instead (status 1,
// or err's when the release failed too).
func tell(w io.Writer, lines []string, err error) error {
	if len(lines) == 0 {
		return err
	}
	_, werr := io.WriteString(w, strings.Join(lines, "\n")+"\n")
	switch {
	case werr == nil:
		return err
	case err != nil:
		return withStatus(exitCode(err), fmt.Errorf("%s (not written to standard output: %s); then: %s", strings.Join(lines, "; "), plain(werr), plain(err)))
	}
	return withStatus(exitError, fmt.Errorf("%s (not written to standard output: %s)", strings.Join(lines, "; "), plain(werr)))
}
