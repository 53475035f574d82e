// Command dlock takes distributed locks kept in Redis (package github.com/dlockgo/dlock/dlock)
// from the shell: it runs a command while holding a lock, in the manner of flock(1),
// "etcdctl lock" and "consul lock"; shows a lock's state; releases a stuck lock; and shows the
// lock at work.
//
//	dlock exec    [--redis ADDR] [--timeout D] [--lease D] [--wait D] [--grace D] TYPE TARGET [--] COMMAND [ARG...]
//	dlock status  [--redis ADDR] [--timeout D] [--json] TYPE TARGET
//	dlock release --force [--redis ADDR] [--timeout D] TYPE TARGET
//	dlock demo    [--redis ADDR] [--timeout D] [--procs N] [--goroutines N] [--duration D] [--hold D] [--lease D]
//	dlock help [COMMAND]
//
// A lock is named by TYPE and TARGET, as in the library: its Redis key is
// DLOCK_<TYPE>_<TARGET> (the target trimmed of surrounding white space), so a shell script
// using "dlock exec DEPLOY prod" and a Go program using gen.Gen("DEPLOY", "prod") exclude each
// other. Flags may stand before or after TYPE TARGET; "--" ends them. -h or --help on dlock or
// on any command prints its usage on standard output and exits 0.
//
// # Common flags
//
// --redis ADDR is the Redis host:port; it defaults to $DLOCK_REDIS, else localhost:6379 (for
// demo: else an embedded miniredis). --timeout D (default 5s) bounds each Redis call the tool
// makes — the first PING, State, ForceRelease, a single TryLock, the final release and the
// Generator's Close — so dlock never hangs on a Redis that does not answer. An unreachable
// Redis is reported in one line naming the address, with exit status 69.
//
// # exec
//
// exec waits for the lock, at most --wait (default forever; 0 makes one attempt, as flock -n
// does), then runs COMMAND with the lock held, its lease (--lease, default 30s) renewed by the
// library at three quarters of it, and releases the lock when COMMAND exits. The command may
// follow TYPE TARGET without "--" when it does not start with "-" (dlock exec T X ls -l).
//
// COMMAND runs in a process group of its own, and every signal dlock sends goes to that
// whole group, so a shell script's children are reached too:
//   - SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to dlock are passed on to COMMAND, and dlock
//     exits with COMMAND's status. Sent while dlock still waits for the lock, they end the
//     wait: nothing runs, and dlock exits 128+signal.
//   - When the lock is lost while COMMAND runs — its key deleted or taken (dlock release
//     --force, a DEL), or renewals failing until the lease ran out (Redis down) — the owner
//     context ends with a cause matching dlock.ErrLockLost; dlock then sends SIGTERM, and
//     SIGKILL after --grace (default 10s) if COMMAND has not exited; once COMMAND has exited it
//     kills what is left of the group, and exits 76 whatever COMMAND's status. A loss found only
//     at the final release (the command may have run unguarded for part of its run) also
//     exits 76.
//   - When dlock's standard input is a terminal whose foreground process group is dlock's, the
//     command's group is made the foreground group while it runs (as a shell does for a job),
//     so the command can read the terminal and Ctrl-C reaches it directly.
//   - If dlock itself is killed with SIGKILL, nothing can stop COMMAND: it goes on without
//     the lock, which expires when its lease runs out. Fencing tokens are the defence.
//
// COMMAND's environment is dlock's plus:
//
//	DLOCK_KEY             the lock's Redis key, DLOCK_<TYPE>_<TARGET>
//	DLOCK_FENCING_TOKEN   the acquisition's fencing token (decimal): larger than every token
//	                      handed out before for the key; give it to stores that reject
//	                      writes from stale holders (docs/fencing.md)
//	DLOCK_TYPE            the lock type
//	DLOCK_TARGET          the lock target, trimmed
//
// # status
//
// status reads the lock's state in one round trip that changes nothing (lock.State) and prints
// it for a person, or with --json as one JSON object on one line whose field names are stable:
// type, target, key, held, holder, mine, reserved_for, lease_left_ms, fence, waiting,
// local_waiters. Durations are whole milliseconds. mine and local_waiters are always false:
// the tool holds and waits for nothing itself.
//
// # release
//
// release --force deletes the lock's key whoever holds it (lock.ForceRelease) and prints the
// locker it removed, or that the lock was free. It is an operator's last resort: the holder
// is not asked and learns of the loss only at its next renewal, so for up to three quarters of
// its lease two processes may act as owners. Without --force release refuses with a usage
// error.
//
// # demo
//
// demo runs several simulated processes (each its own Redis client and Generator) whose
// goroutines all want one key, with a short critical section, and prints acquisitions,
// throughput, the most waiters seen at once and whether exclusion held. Without --redis and
// $DLOCK_REDIS it starts an embedded miniredis, so it needs nothing installed. With a Redis
// address it checks that Redis answers first: an unreachable Redis is an error (69), never a
// verdict. A run with no acquisitions says so and exits 1, as does an overlap of two owners.
//
// # Exit status
//
//	0        success; for exec, COMMAND exited 0
//	1        any other error (demo: exclusion violated, or no acquisitions)
//	2        usage error: unknown command, bad flags or arguments, invalid TYPE, TARGET or
//	         lease, release without --force
//	69       Redis unreachable, or no answer within --timeout (EX_UNAVAILABLE)
//	75       exec: the lock was not obtained within --wait; COMMAND did not run (EX_TEMPFAIL)
//	76       exec: the lock was lost while COMMAND ran; COMMAND was stopped
//	126      exec: COMMAND was found but could not be run
//	127      exec: COMMAND was not found
//	N        exec: COMMAND exited with N, or was killed by signal S and N is 128+S
//
// exec passes COMMAND's status through, so a command that itself exits 69, 75 or 76 cannot be
// told from dlock's own outcome by the status alone; dlock's own outcomes come with a line on
// standard error starting "dlock exec:".
//
// # Environment
//
//	DLOCK_REDIS   the default of --redis
package main
