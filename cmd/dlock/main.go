package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// The exit statuses of dlock (see the package documentation). exec passes its command's own
// status through as well, so a command that exits with one of these numbers is ambiguous; a
// script that cares reads dlock's one-line message on stderr.
const (
	exitOK          = 0
	exitError       = 1   // anything not listed below
	exitUsage       = 2   // bad command line, including an invalid lock type, target or lease
	exitUnavailable = 69  // EX_UNAVAILABLE: Redis unreachable, not serving (OOM, LOADING, ...) or not answering within --timeout
	exitNotObtained = 75  // EX_TEMPFAIL: exec or lock did not obtain the lock within --wait (the default of --conflict-exit-code)
	exitLost        = 76  // exec or lock: the lock was lost while held
	exitNoPerm      = 77  // EX_NOPERM: Redis refused the user or password, or a command (ACL)
	exitCannotExec  = 126 // exec: the command was found but could not be started
	exitNotFound    = 127 // exec: the command was not found
)

// command is one subcommand of dlock.
type command struct {
	name    string
	summary string // one line for the top-level usage
	// usage is the synopsis and description printed by "dlock NAME --help", before the flags.
	usage string
	// define defines the command's flags on fs and returns the function that runs it.
	define func(fs *flagSet) runner
}

// runner runs a command with its arguments (those after its name); it returns nil or an
// error that carries the exit status (see exitCode).
type runner func(out cli, args []string) error

// cli is where a command writes: its standard output and standard error.
type cli struct {
	stdout, stderr io.Writer
}

// commands lists the subcommands in the order the usage shows them.
func commands() []*command {
	return []*command{execCommand(), lockCommand(), statusCommand(), releaseCommand(), demoCommand(), versionCommand()}
}

// main runs dlock and exits with the status run returns.
func main() {
	// go-redis logs failed dials on stderr by itself; dlock reports errors in its own words.
	redis.SetLogger(&logging.VoidLogger{})
	// A reader of dlock's output or errors that went away makes a write fail rather than kill
	// dlock (Go dies of SIGPIPE on standard output and error): a held lock is still released,
	// a command run under it still stopped when it is lost, and the exit status still says what
	// happened. (Notify, not Ignore, which a command that exec runs would inherit.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// SIGQUIT (Ctrl-\) ends every command as exec and lock end on it (they handle it
	// themselves: exec passes it on, lock releases), with 128+SIGQUIT and not the runtime's
	// goroutine dump, whose exit status 2 would read as a usage error.
	if len(os.Args) < 2 || os.Args[1] != "exec" && os.Args[1] != "lock" {
		quit := make(chan os.Signal, 1)
		signal.Notify(quit, syscall.SIGQUIT)
		go func() {
			<-quit
			os.Exit(128 + int(syscall.SIGQUIT))
		}()
	}
	os.Exit(run(os.Args[1:], cli{stdout: os.Stdout, stderr: os.Stderr}))
}

// run runs dlock with args (without the program name) and returns its exit status.
func run(args []string, out cli) int {
	if len(args) == 0 {
		return usageError(out, "dlock", "", errors.New("no command given"))
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		// "dlock --help COMMAND" reads its arguments as "dlock help COMMAND" does, rather than
		// ignoring them.
		prefix := "dlock"
		if name == "help" {
			prefix = "dlock help"
		}
		if len(args) > 2 {
			return usageError(out, prefix, "", fmt.Errorf("unexpected argument %q", args[2]))
		}
		if len(args) > 1 {
			switch args[1] {
			case "-h", "-help", "--help", "help": // the usage of help is dlock's
				return usageShown(out, prefix, topUsage(out.stdout))
			}
			if c := lookup(args[1]); c != nil {
				fs := newFlagSet(c.name)
				c.define(fs)
				return usageShown(out, prefix, commandUsage(out.stdout, c, fs))
			}
			return usageError(out, prefix, "", fmt.Errorf("unknown command %q", args[1]))
		}
		return usageShown(out, "dlock", topUsage(out.stdout))
	}
	if name == "--version" || name == "-version" {
		name = "version" // (its arguments are args[1:], as a command's)
	}
	c := lookup(name)
	switch {
	case c == nil && isFlag(name):
		return usageError(out, "dlock", "", fmt.Errorf("flag %s before the command: flags follow it (dlock COMMAND [flags] ARGS...)", name))
	case c == nil:
		return usageError(out, "dlock", "", fmt.Errorf("unknown command %q", name))
	}
	fs := newFlagSet(c.name)
	err := c.define(fs)(out, args[1:])
	if errors.Is(err, errHelp) {
		return usageShown(out, "dlock "+name, commandUsage(out.stdout, c, fs))
	}
	code := exitCode(err)
	var es *exitStatus
	switch {
	case err == nil:
	case errors.As(err, &es) && es.err == nil: // exec's command status: nothing to add
	case code == exitUsage:
		return usageError(out, "dlock "+name, name, err)
	default:
		fmt.Fprintf(out.stderr, "dlock %s: %s\n", name, plain(err))
	}
	return code
}

// usageError prints a usage error in two lines, what is wrong and where the usage is, and
// returns the usage status. prefix starts the first line; command is "" for dlock itself.
func usageError(out cli, prefix, command string, err error) int {
	fmt.Fprintf(out.stderr, "%s: %s\n", prefix, plain(err))
	if command == "" {
		fmt.Fprintln(out.stderr, "run 'dlock --help' for usage")
	} else {
		fmt.Fprintf(out.stderr, "run 'dlock %s --help' for usage\n", command)
	}
	return exitUsage
}

// usageShown returns the exit status of a usage written with err: 0 when written; when not,
// the status of an unwritten output (see unwritten), its message printed after prefix.
func usageShown(out cli, prefix string, err error) int {
	if err == nil {
		return exitOK
	}
	err = unwritten(err)
	if msg := (err.(*exitStatus)).err; msg != nil {
		fmt.Fprintf(out.stderr, "%s: %s\n", prefix, plain(msg))
	}
	return exitCode(err)
}

// unwritten is the error for output that could not be written (err, the write's): to a closed
// pipe (dlock ... | head), 128+SIGPIPE and nothing said, as SIGPIPE ends a program; else
// (a full disk) status 1 saying so.
func unwritten(err error) error {
	if errors.Is(err, syscall.EPIPE) {
		return withStatus(128+int(syscall.SIGPIPE), nil)
	}
	return withStatus(exitError, fmt.Errorf("cannot write to standard output: %s", plain(err)))
}

// lookup returns the command called name, or nil.
func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// topUsage prints the usage of dlock itself and returns the write's error.
func topUsage(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`usage: dlock COMMAND [flags] ARGS...

dlock takes distributed locks kept in Redis (github.com/dlockgo/dlock) from the shell:
it runs a command while holding a lock, holds a lock until signalled, shows a lock's state,
and releases a stuck lock.

commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	b.WriteString(`  help      show a command's usage: dlock help COMMAND (or dlock COMMAND --help)

A lock is named by TYPE and TARGET, as in the library: its Redis key is DLOCK_<TYPE>_<TARGET>,
so "dlock exec DEPLOY prod -- ..." and a Go program calling gen.Gen("DEPLOY", "prod") share it.

Redis is --redis ADDR, else $DLOCK_REDIS, else $REDIS_URL, else localhost:6379. ADDR is
HOST:PORT, a redis://[USER]:PASSWORD@HOST:PORT/DB URL (rediss:// for TLS), Cluster nodes
HOST:PORT,HOST:PORT (or one with --cluster), or Sentinels with --sentinel-master NAME; see
"dlock exec --help". Prefer the environment for a password: a command line is visible to
other users of the machine.

exit status:
  0        success (exec: the command's own status, see below)
  1        any other error (status, release, demo, version, help: output that could not be
           written)
  2        usage error: bad command, flags or Redis address, invalid TYPE, TARGET or lease
  69       Redis unreachable, not serving (out of memory, loading, read-only), not the
           kind the address names (Sentinels, Cluster, one server), or no answer within
           --timeout
  75       exec, lock: the lock was not obtained within --wait (or -n); --conflict-exit-code
           changes it (0: and dlock says nothing)
  76       exec, lock: the lock was lost while held (exec: the command was stopped)
  77       Redis refused the user or password, or a command (ACL)
  126      exec: the command could not be started
  127      exec: the command was not found
  128+S    exec, lock: signal S came while waiting for the lock (nothing run or held);
           demo, version, help: 141 when nobody reads their output (a closed pipe)
  N        exec: the command exited with N (128+S when it was killed by signal S)
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// commandUsage prints the usage of c, with the flags of fs, and returns the write's error.
func commandUsage(w io.Writer, c *command, fs *flagSet) error {
	var b strings.Builder
	b.WriteString(strings.TrimLeft(c.usage, "\n"))
	if fs.hasFlags() {
		b.WriteString("\nflags:\n")
		fs.printFlags(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// exitStatus is an error that carries the exit status it calls for. err, when not nil, is
// printed on stderr; a nil err exits silently (exec passing on its command's status).
type exitStatus struct {
	code int
	err  error
}

// Error returns the message, or "exit status N" for a silent status.
func (e *exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// Unwrap returns the error the status was given for.
func (e *exitStatus) Unwrap() error { return e.err }

// withStatus returns err with the exit status code.
func withStatus(code int, err error) error { return &exitStatus{code: code, err: err} }

// usageErrorf returns a usage error (exit status 2).
func usageErrorf(format string, args ...any) error {
	return withStatus(exitUsage, fmt.Errorf(format, args...))
}

// exitCode returns the exit status err calls for: 0 for nil, the status it carries, else 1.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var es *exitStatus
	if errors.As(err, &es) {
		return es.code
	}
	return exitError
}
