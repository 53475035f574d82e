package main

import (
	"errors"
	"fmt"
)

const releaseUsage = `
usage: dlock release --force [flags] TYPE TARGET

Deletes the lock TYPE/TARGET whoever holds it, and wakes the processes that wait for it, as a
release does. It is an operator's last resort for a lock stuck in an incident: the holder is
not asked. The holder learns of the loss at its next renewal (within three quarters of its
lease) or release; until then two processes may act as owners, so only fencing tokens checked
downstream keep their writes apart. A "dlock exec" holder stops its command and exits 76.

--force is required: without it release refuses (exit status 2). It prints the locker it
removed, or that the lock was free.
`

// releaseCommand is "dlock release".
func releaseCommand() *command {
	return &command{
		name:    "release",
		summary: "delete a lock whoever holds it (--force: an operator's last resort)",
		usage:   releaseUsage,
		define: func(fs *flagSet) runner {
			r := addRedisFlags(fs)
			force := fs.Bool("force", "really delete the lock (required)")
			return func(out cli, args []string) error {
				pos, _, err := fs.parse(args, 2, false)
				if err != nil {
					return err
				}
				if !*force {
					return withStatus(exitUsage, errors.New("refusing without --force: deleting a lock that someone holds is an operator's last resort "+
						"(the holder goes on until its next renewal, so two may act as owners); check it with \"dlock status\" first"))
				}
				return release(out, r, pos[0], pos[1])
			}
		},
	}
}

// release deletes typ/target's key and prints what it removed.
func release(out cli, r redisFlags, typ, target string) error {
	c, l, err := inspect(r, typ, target)
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := c.ctx()
	defer cancel()
	st, err := l.State(ctx)
	if err != nil {
		return classify(c.addr, c.timeout, err)
	}
	cfg := l.Config()
	name := fmt.Sprintf("%s/%s (key %s)", cfg.LockType(), cfg.LockTarget(), cfg.UniqueKey())
	if st.Holder == "" {
		fmt.Fprintf(out.stdout, "%s was free: nothing removed\n", name)
		return nil
	}
	removed, err := l.ForceRelease(ctx, st.Holder)
	if err != nil {
		return classify(c.addr, c.timeout, err)
	}
	if !removed {
		fmt.Fprintf(out.stdout, "%s changed hands meanwhile (holder %s is gone): nothing removed\n", name, st.Holder)
		return nil
	}
	fmt.Fprintf(out.stdout, "released %s: removed holder %s\n", name, st.Holder)
	return nil
}
