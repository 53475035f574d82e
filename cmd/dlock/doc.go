// Command dlock takes distributed locks kept in Redis (package github.com/dlockgo/dlock/dlock)
// from the shell: it runs a command while holding a lock, in the manner of flock(1),
// "etcdctl lock" and "consul lock"; holds a lock until signalled; shows a lock's state;
// releases a stuck lock; and shows the lock at work.
//
//	dlock exec    [-n | -w SECONDS] [-E N] [--lease D] [--grace D] [KIND [--permits N]] [REDIS] TYPE TARGET [--] COMMAND [ARG...]
//	dlock lock    [-n | -w SECONDS] [-E N] [--lease D] [REDIS] TYPE TARGET
//	dlock status  [--json] [KIND] [REDIS] TYPE TARGET
//	dlock release --force (--holder LOCKER | --any) [KIND] [REDIS] TYPE TARGET
//	dlock demo    [--procs N] [--goroutines N] [--cross-procs N] [--duration D] [--hold D] [--lease D] [--hold-over] [REDIS]
//	dlock version
//	dlock help [COMMAND]
//
//	REDIS is [--redis ADDR] [--cluster] [--sentinel-master NAME] [--timeout D]
//	KIND is  --shared | --exclusive | --semaphore K
//
// A lock is named by TYPE and TARGET, as in the library: its Redis key is
// DLOCK_<TYPE>_<TARGET> (the target trimmed of surrounding white space), so a shell script
// using "dlock exec DEPLOY prod" and a Go program using gen.Gen("DEPLOY", "prod") exclude each
// other. Flags follow the command, before or after TYPE TARGET; "--" ends them. Flags are written
// --name VALUE or --name=VALUE (-name works too); the one-letter ones -n, -w and -E also
// -w VALUE and -wVALUE. -h or --help on dlock or on any command prints its usage on standard
// output and exits 0.
//
// Output that cannot be written is no success: status, release, version, the usage and demo's
// verdict exit 1 when standard output fails (a full disk), saying so in one line on standard
// error (release: with what it removed); the usage, version and demo exit 141 (128+SIGPIPE),
// saying nothing, when its reader has gone (dlock demo | head).
//
// A usage error — an unknown command or flag, a bad value, a bad Redis address, an invalid
// TYPE, TARGET or lease — prints two lines on standard error, what is wrong and where the
// usage is, and exits 2:
//
//	dlock exec: invalid --lease "1": a duration needs a unit, e.g. 30s
//	run 'dlock exec --help' for usage
//
// Every other message is one line starting "dlock COMMAND: ".
//
// # Read-write locks and semaphores
//
// Without KIND a command works on the mutex TYPE/TARGET. exec, status and release also work on
// the read-write lock and the semaphore of that name (gen.GenRW, gen.GenSemaphore), which are
// other locks than the mutex:
//
//	-s, --shared        the read side of the read-write lock TYPE/TARGET: any number of
//	                    holders at once, no writer
//	-x, --exclusive     its write side: no other holder, reader or writer
//	--semaphore K       the semaphore TYPE/TARGET of K permits (K is used while Redis keeps no
//	                    count for it yet): at most K permits out across all processes
//	--permits N         exec only, with --semaphore: the permits to take (default 1; at least 1, at most K)
//
// Only one of the three names the lock; --semaphore 0 and --permits without --semaphore are
// usage errors, and so is, for exec, status and release alike, a read-write lock asked for as
// a semaphore or the other way round while Redis keeps what it is (as long as the lock is in
// use, holdings or not):
//
//	dlock status: DLOCK_DEPLOY_prod is a rw lock in Redis, not a sem
//	run 'dlock status --help' for usage
//
// A lock and a read-write lock or semaphore of one name are two locks, kept apart. status and
// release --force --any that find the one asked for free, while Redis keeps the other, say so
// (status on standard error, release in its line) and which flags ask for it:
//
//	dlock status: DEPLOY/prod is free as asked; but Redis keeps a read-write lock of that name (give --shared or --exclusive)
//
// With KIND, status shows the holdings (a process's read-hold, write-hold or permits, each with
// its locker, permits, fencing token and lease left) and the processes in line with what they
// ask for;
// with --json one object with the fields type, target, key, kind ("rw" or "sem"), permits,
// holds [{locker, permits, write, token, lease_left_ms}], waiting [{process, permits, write}]
// (a holding's or waiter's permits are 1 for a read-write lock, read or write) and fence. release --force --holder removes the holding of that locker, and --any every
// holding status lists.
//
// # Redis
//
// The Redis a command talks to is --redis ADDR, else $DLOCK_REDIS, else $REDIS_URL, else
// localhost:6379 (for demo: else an embedded miniredis). ADDR takes go-redis's forms:
//
//	localhost:6379                          one server
//	redis://[USER]:PASSWORD@HOST:PORT/DB    one server with a password, an ACL user, a database
//	rediss://...                            the same over TLS
//	unix:///run/redis.sock?db=N             one server on a Unix socket
//	HOST:PORT,HOST:PORT,...                 Redis Cluster nodes (seeds; the rest are found)
//	--cluster --redis HOST:PORT             one Cluster node
//	redis://:PASSWORD@HOST:PORT?addr=HOST2:PORT2   Cluster nodes as a URL (database 0 only)
//	--sentinel-master NAME --redis HOST:PORT,...
//	                                        the master NAME that these Sentinels watch
//	redis://SENTINEL:PORT/DB?master_name=NAME&addr=SENTINEL2:PORT&password=PASSWORD
//
// In a URL, each further Cluster node or Sentinel has an addr= of its own (addr=H2:P&addr=H3:P).
// URLs are parsed by go-redis (redis.ParseURL, ParseClusterURL, ParseFailoverURL), so their
// parameters are go-redis's: dial_timeout=3s, read_timeout, client_name, protocol, pool_size,
// skip_verify=true (TLS without checking the certificate), and so on; an unknown parameter is
// a usage error. In a Sentinel URL, as go-redis reads it, a USER:PASSWORD@ before the host is
// the Sentinels' own, and the master's password is the password= parameter (username= its
// user). A password with any of : / ? # @ in it must be percent-encoded (%40 for @). TLS
// checks the server's certificate against the system's CAs; for a private CA set
// SSL_CERT_FILE=ca.pem. A URL with addr= parameters, more than one HOST:PORT, or --cluster is
// a Cluster; master_name= or --sentinel-master is a Sentinel deployment; the two exclude each
// other.
//
// A password on the command line can be read by every user of the machine (ps, /proc), so
// prefer $DLOCK_REDIS or $REDIS_URL for it. No message, help text or error shows a password:
// it appears as xxxxx.
//
// --timeout D (default 5s, at least 1ms) bounds each Redis call the tool makes — the first PING, State,
// ForceRelease, a single TryLock, the final release and the Generator's Close — so dlock never
// hangs on a Redis that does not answer. An unreachable Redis is reported in one line naming it,
// with exit status 69, as is one that answers it is not serving (OOM, LOADING, READONLY, ...)
// and a replica named as the server (status would read its copy, which may be behind);
// a refused password or user (WRONGPASS, NOAUTH) or a command the ACL user may not run (NOPERM)
// with 77; another error reply with 1, such as WRONGTYPE when a key of the lock's name holds a
// value that is not dlock's (no wait mends it: exec and lock do not wait). An address that
// reaches no usable master because it names another kind of server than the flags say is told
// what is wrong, with 69 too: a Cluster node named as a single server (add --cluster), a
// Sentinel named as the server (add --sentinel-master), a server that is not a Sentinel named
// with --sentinel-master, Sentinels that watch no master of that name, a server that is not a
// Cluster node named with --cluster.
//
// # exec
//
// exec waits for the lock, then runs COMMAND with the lock held, its lease (--lease, default
// 30s) renewed by the library at three quarters of it, and releases the lock when COMMAND
// exits. The command may follow TYPE TARGET without "--" when it does not start with "-"
// (dlock exec T X ls -l). As with flock:
//
//	-n, --nonblock             one attempt: fail at once if the lock is held
//	-w, --wait SECONDS         wait at most this long: seconds (10, 0.5; 0 is one attempt),
//	                           a Go duration (1m30s), or "forever" (the default); a wait
//	                           other than 0 is at least 1ms (it bounds the first attempt too:
//	                           a wait shorter than an attempt's round trip obtains nothing)
//	-E, --conflict-exit-code N the exit status when the lock is not obtained (default 75)
//
// When the lock is not obtained COMMAND does not run, and dlock says who holds it. Its status
// is then 75 unless -E says otherwise (-E 0 makes "already running elsewhere" a success, for
// cron jobs, and then dlock says nothing). -n with a --wait other than 0 is a usage error. A
// Redis that does not answer at the start is an error (69) at once; a wait that began goes on
// through a Redis outage, for as long as --wait allows (by default until Redis answers again);
// the first failure is told on standard error, once.
//
// COMMAND runs in a process group of its own, and every signal dlock sends goes to that
// whole group, so a shell script's children are reached too:
//   - SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to dlock are passed on to COMMAND, followed by
//     SIGCONT (so that a stopped COMMAND acts on them, as kill(1) does for a stopped job), and
//     dlock exits with COMMAND's status. Sent while dlock still waits for the lock, they end the
//     wait: nothing runs, and dlock exits 128+signal.
//   - When the lock is lost while COMMAND runs — its key deleted or taken (dlock release
//     --force, a DEL), or renewals failing until the lease ran out (Redis down) — the owner
//     context ends with a cause matching dlock.ErrLockLost; dlock then sends SIGTERM (and
//     SIGCONT), and SIGKILL after --grace (default 10s) if COMMAND has not exited; once COMMAND
//     has exited it kills what is left of the group, and exits 76 whatever COMMAND's status.
//     A loss found only at the final release (the command may have run unguarded for part of
//     its run) also exits 76.
//   - When dlock's standard input is a terminal whose foreground process group is dlock's, the
//     command's group is made the foreground group while it runs (as a shell does for a job),
//     so the command can read the terminal and Ctrl-C reaches it directly. Ctrl-Z stops the
//     command and dlock both, giving the shell its terminal back; fg or bg goes on with both
//     (the lock is not renewed while dlock is stopped: found lost as it goes on, it is handled
//     as above). Without a shell to go on with them (dlock leads its session), the command
//     goes on at once.
//   - If dlock itself is killed with SIGKILL, nothing can stop COMMAND: it goes on without
//     the lock, which expires when its lease runs out. Fencing tokens are the defence.
//   - When COMMAND exits, dlock releases the lock and exits with its status; what COMMAND
//     left running in the background (sh -c 'job & exit 0') goes on without the lock. Unlike
//     flock(1), whose lock such children keep through the descriptor they inherit, the lock
//     guards COMMAND itself: wait for background jobs inside it.
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
// # lock
//
// lock takes the lock as exec does (the same -n, -w, -E and --lease) and holds it, renewed,
// until dlock gets SIGINT, SIGTERM, SIGHUP or SIGQUIT; then it releases the lock and exits 0, as
// "etcdctl lock" does without a command. Once the lock is held it prints one line on standard
// output, and nothing else:
//
//	DLOCK_KEY=DLOCK_DEPLOY_prod DLOCK_HOLDER=10.0.0.7-4121-9f1c2a3b4c5d-1 DLOCK_FENCING_TOKEN=1795521616281480
//
// A key with characters a shell treats specially (a space, ; $ ' and so on) is printed in
// single quotes, so the line is always safe to eval. DLOCK_HOLDER is the locker that status shows and that release --force --holder takes. A
// script can hold the lock across several steps, and learns of a loss by waiting on dlock.
// dlock holds the lock until it is signalled, whatever became of the script that started it:
// the trap releases it when the script exits early (without it, dlock would hold the lock on
// in the background, renewing it):
//
//	coproc dlock lock --wait 30 DEPLOY prod
//	trap 'kill "$COPROC_PID" 2>/dev/null' EXIT   # a script that exits early releases too
//	read -r line <&"${COPROC[0]}" || exit 75     # dlock exited: not obtained (see its message)
//	eval "$line"                                 # DLOCK_KEY, DLOCK_HOLDER, DLOCK_FENCING_TOKEN
//	./step1 && ./step2
//	kill "$COPROC_PID"; wait "$COPROC_PID"       # releases; 76 if the lock had been lost
//
// If the lock is lost while held, lock says so in one line on standard error and exits 76 as
// soon as it learns of it (a key deleted by another: at the next renewal, within three
// quarters of the lease). A signal while it still waits ends the wait with 128+signal,
// nothing held.
//
// # status
//
// status reads the lock's state in one round trip that changes nothing (lock.State) and prints
// it for a person, or with --json as one JSON object on one line whose field names are stable:
// type, target, key, held, holder, mine, reserved_for, lease_left_ms, fence, waiting,
// local_waiters. On an error nothing is written to standard output, --json or not: the error
// is one line on standard error, and the exit status says what failed. Durations are whole
// milliseconds. waiting lists every process waiting in line that a release would grant the
// lock to (their locker prefixes; not one that died or stopped renewing its place), first in
// line first: always a list, [] when none. mine and
// local_waiters are always false: the tool holds and waits for nothing itself. JSON strings
// are Unicode: in a field that is not valid UTF-8 (a target so named, a key set by hand)
// --json writes each invalid byte as U+FFFD, and says on standard error which fields it could
// not give byte for byte; the text form shows them as they are. A holder or waiting process
// with control characters or bytes that are not UTF-8 (a key set by hand) is shown quoted as
// a Go string ("\x1b..."), in status's text and in every message, so that it can neither forge
// lines nor drive the terminal.
//
// # release
//
// release --force lets the lock's key go as a release does (to the first live process in
// line, which is told, or free). It is an operator's last resort: the holder is not asked and learns of the loss only
// at its next renewal, so for up to three quarters of its lease two processes may act as
// owners. It must be told what to remove:
//
//   - --holder LOCKER removes the holding of LOCKER, as status shows it (or lock printed it):
//     the key is let go only if it still holds LOCKER, checked and let go in one step in
//     Redis (lock.ForceRelease). If that holder released meanwhile and another acquired,
//     nothing is removed. Safe to repeat.
//   - --any reads the current holder (lock.State) and removes that holding. The risk: the
//     holder it reads may be a healthy one that acquired a moment ago, after the stuck one
//     went; it is removed all the same and goes on as owner until its next renewal, so two
//     processes may act as owners until then. Fencing tokens are the defence.
//
// release prints the holder it removed, or that it found no such holder (already gone, or a
// name that never held the lock; the lock free, or held by another locker, which is left
// alone); both exit
// 0 (1 when that cannot be written: it is said on standard error instead). Without --force, or
// without one of --holder and --any, it refuses with a usage error.
//
// # demo
//
// demo shows what the lock is for: it runs the same contention on one key twice, once with the
// usual hand-written lock (SET NX PX, a retry every 10ms, a compare-and-delete script to
// release) and once with dlock, in two shapes: "hot", --procs simulated processes (each its own
// Redis client and Generator) of --goroutines goroutines each, and "cross", --cross-procs
// processes of one goroutine each, so that every acquisition goes from process to process.
// Every holder stays --hold in the critical section; the four runs share --duration (10s), and
// a run in which nothing was acquired in its share (a machine far too busy, or --duration
// 40ms) goes on until its first acquisition, at most 30s more, its rate counted over the
// time it took.
// With --hold-over, dlock runs with WithHoldOver(true): a process whose goroutine locks again
// at once keeps the key for it, and passes it on at the hand-off limit (50ms). --procs and --cross-procs are 1 to 1000, --procs × --goroutines at most 10000, --duration
// 4ms to 24h and --hold at most a quarter of it (one run); other values are usage errors. For
// each run it prints acquisitions/s, the commands sent per acquisition (counted by a go-redis
// hook on every client; Pub/Sub traffic is not counted) and the acquisitions of the least and
// the most served process, then whether dlock's exclusion held. Without --redis, $DLOCK_REDIS
// and $REDIS_URL it starts an embedded miniredis, so it needs nothing installed. With a Redis
// named it checks that Redis answers first: an unreachable Redis is an error (69), never a
// verdict, and so is a key or command the ACL user may not use (77; the naive lock uses the
// key dlock-demo:naive:order-42, outside dlock's own keys). A demo in which dlock acquired nothing
// in any of its runs says so and exits 1 (it proved nothing), as does an overlap of two dlock
// owners; a run with no dlock acquisition in its 30s more shows 0.
//
// # version
//
// version (or --version) prints one line: dlock's module version (for a build from a checkout,
// "(devel)" or a pseudo-version naming the commit, with the commit when the build recorded
// one), the library's version when dlock is built within another module, and the Go
// toolchain. It talks to no Redis.
//
// # Exit status
//
//	0        success; for exec, COMMAND exited 0; for lock, released after a signal
//	1        any other error (demo: exclusion violated, or no acquisitions; status,
//	         release, demo, version, help: standard output could not be written)
//	2        usage error: unknown command, bad flags, values or Redis address, invalid TYPE,
//	         TARGET or lease, release without --force or without --holder/--any, a
//	         read-write lock asked for as a semaphore or the other way round, more
//	         --permits than the count Redis keeps for the semaphore
//	69       Redis unreachable, not serving (out of memory, loading, read-only), not the
//	         kind the address names (Sentinels, Cluster, one server), or no answer within
//	         --timeout (EX_UNAVAILABLE)
//	75       exec, lock: the lock was not obtained within --wait, or at once with -n; COMMAND
//	         did not run (EX_TEMPFAIL); -E (--conflict-exit-code) chooses another status
//	76       exec, lock: the lock was lost while held (exec: COMMAND was stopped)
//	77       Redis refused the user or password, or a command to the ACL user (EX_NOPERM)
//	126      exec: COMMAND was found but could not be run
//	127      exec: COMMAND was not found
//	128+S    exec, lock: signal S came while waiting for the lock; status, release, demo,
//	         version, help: SIGQUIT (Ctrl-\) ends them with 131, with no stack dump; demo,
//	         version, help: 141 when standard output is a pipe nobody reads
//	N        exec: COMMAND exited with N, or was killed by signal S and N is 128+S
//
// exec passes COMMAND's status through, so a command that itself exits 69, 75, 76 or 77 cannot
// be told from dlock's own outcome by the status alone (nor can -E's status, which may be any
// of them); dlock's own outcomes come with a line on standard error starting "dlock exec:".
// A release that fails after COMMAND ended (Redis gone) keeps COMMAND's status, and is told on
// standard error: the lock stays held until its lease runs out, so the next run may get 75
// meanwhile. lock, which has no command's status to keep, exits 69 then.
//
// # Environment
//
//	DLOCK_REDIS   the Redis address when --redis is not given (empty counts as unset)
//	REDIS_URL     the Redis address when neither --redis nor DLOCK_REDIS is given
//	SSL_CERT_FILE a CA bundle for rediss:// (Go's standard variable)
package main
