package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlockgo/dlock/domain"

	"github.com/dlockgo/dlock/dlock"
)

var statusUsage = `
usage: dlock status [flags] TYPE TARGET

Shows the lock TYPE/TARGET as Redis sees it, read in one round trip that changes nothing:
whether it is held and by whom (a locker is <ip>-<pid>-<nonce>-<n>: the process that holds
it), how long its lease lasts unless renewed, its fencing counter, and every process waiting
in line that a release would grant the lock to, first in line first (not one that died, or
stopped renewing its place, whose place Redis keeps until it expires).

With --json it prints one JSON object with these fields (durations in milliseconds):
  type, target, key     the lock's name and Redis key
  held                  true while an acquisition holds the key
  holder                the holder's locker, "" when free
  mine                  always false here (this tool holds nothing)
  reserved_for          always "" (a release grants the key to the next process at once; the
                        field stays for scripts that read it)
  lease_left_ms         how long the holding lasts unless renewed; 0 when free, and for
                        a key without expiry (not written by dlock)
  fence                 the last fencing token handed out for the key (0 once expired)
  waiting               the locker prefixes of the processes waiting in line that a release
                        would grant the lock to, first in line first: a list, [] when none
  local_waiters         always false here (this tool waits for nothing)

With --shared or --exclusive (the read-write lock TYPE/TARGET) or --semaphore K (the
semaphore TYPE/TARGET) it shows that lock instead: its holdings (a process's read-hold or
write-hold, or its permits), each with its locker, permits, fencing token and lease left, and
the processes waiting in line with what they wait for. --json then prints:
  type, target, key     the lock's name and unique key
  kind                  "rw" or "sem"
  permits               a semaphore's permit count (Redis's while in use); 0 for "rw"
  holds                 [{locker, permits, write, token, lease_left_ms}]
  waiting               [{process, permits, write}], first in line first
                        (a holding's or waiter's permits: a semaphore's; 1 for "rw", read
                        or write)
  fence                 the last fencing token reserved: a write-hold reserves a block of
                        them, so it may be above every token a writer has had
A read-write lock asked for with --semaphore, or a semaphore with --shared or --exclusive, is
refused as exec and release refuse it (status 2), while Redis keeps what the lock is.

JSON strings are Unicode: in a field that is not valid UTF-8 (a target so named, a key set by
hand) --json writes each invalid byte as U+FFFD, and says on standard error which fields it
could not give byte for byte; the text form shows them as they are. A holder or waiting
process there with control characters or bytes that are not UTF-8 (a key set by hand) is
shown quoted as a Go string, "\x1b...".

When the state cannot be read (Redis unreachable, a refusal), nothing is written to standard
output, --json or not: the error is one line of text on standard error, and the exit status
says what failed.
` + redisHelp + `
exit status:
  0        the state was read (whether held or not)
  69       Redis unreachable, not serving (out of memory, loading, read-only), not the
           kind the address names (Sentinels, Cluster, one server), or no answer within
           --timeout
  77       Redis refused the user or password, or a command (ACL)
  2        usage error (a read-write lock asked for as a semaphore, or the other way
           round, too); 1 any other error
`

// statusCommand is "dlock status".
func statusCommand() *command {
	return &command{
		name:    "status",
		summary: "show whether a lock is held, by whom and for how long",
		usage:   statusUsage,
		define: func(fs *flagSet) runner {
			asJSON := fs.Bool("json", "", "print one JSON object")
			kind := addKindFlags(fs, false)
			r := addRedisFlags(fs, redisDefaultDoc)
			return func(out cli, args []string) error {
				pos, _, err := fs.parse(args, 2, false)
				if err != nil {
					return err
				}
				if err := kind.check(); err != nil {
					return err
				}
				if kind.named() {
					return sharedStatus(out, r, kind, *asJSON, pos[0], pos[1])
				}
				return status(out, r, *asJSON, pos[0], pos[1])
			}
		},
	}
}

// lockStatus is the JSON form of a dlock.State; its field names are part of the interface.
type lockStatus struct {
	Type         string   `json:"type"`
	Target       string   `json:"target"`
	Key          string   `json:"key"`
	Held         bool     `json:"held"`
	Holder       string   `json:"holder"`
	Mine         bool     `json:"mine"`
	ReservedFor  string   `json:"reserved_for"` // always "": keys are granted, no longer reserved (kept for scripts that read it)
	LeaseLeftMS  int64    `json:"lease_left_ms"`
	Fence        uint64   `json:"fence"`
	Waiting      []string `json:"waiting"`
	LocalWaiters bool     `json:"local_waiters"`
}

// status prints the state of typ/target.
func status(out cli, r redisFlags, asJSON bool, typ, target string) error {
	c, l, err := inspect(r, typ, target)
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := c.ctx()
	defer cancel()
	st, err := l.State(ctx)
	if err != nil {
		return c.classify(err)
	}
	if !st.Held() && len(st.Waiting) == 0 {
		tellOtherKind(out.stderr, st.Config, c.otherKind(st.Config, false))
	}
	if asJSON {
		cfg := st.Config
		fields := []string{"type", string(cfg.LockType()), "target", cfg.LockTarget(), "key", cfg.UniqueKey(), "holder", st.Holder}
		for i, w := range st.Waiting {
			fields = append(fields, fmt.Sprintf("waiting[%d]", i), w)
		}
		if err := printStatusJSON(out.stdout, st); err != nil {
			return err
		}
		tellNotUTF8(out.stderr, fields...)
		return nil
	}
	return printStatus(out.stdout, st)
}

// shown returns a locker read from Redis as text for a person: as it is, or quoted as a Go
// string when it holds a control character or bytes that are not UTF-8 (a key set by hand),
// which would otherwise forge lines or drive the terminal.
func shown(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// tellOtherKind says on w that cfg's lock, free, has a namesake of another kind (other, from
// conn.otherKind; nothing for "").
func tellOtherKind(w io.Writer, cfg domain.DLockConfig, other string) {
	if other != "" {
		fmt.Fprintf(w, "dlock status: %s is free as asked; but %s\n", shown(string(cfg.LockType())+"/"+cfg.LockTarget()), other)
	}
}

// tellNotUTF8 says on w which of the named strings (name, value, name, value, ...) are not
// valid UTF-8: JSON strings are Unicode, and encoding/json writes each invalid byte as U+FFFD,
// so those fields of status --json are not the bytes Redis holds.
func tellNotUTF8(w io.Writer, named ...string) {
	var bad []string
	for i := 0; i+1 < len(named); i += 2 {
		if !utf8.ValidString(named[i+1]) {
			bad = append(bad, named[i])
		}
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "dlock status: %s not valid UTF-8: the JSON shows each invalid byte as U+FFFD, not the bytes Redis holds (the text form shows them as they are)\n",
			strings.Join(bad, ", "))
	}
}

// sharedJSON is the JSON form of a dlock.SharedState; its field names are part of the interface.
type sharedJSON struct {
	Type    string           `json:"type"`
	Target  string           `json:"target"`
	Key     string           `json:"key"`
	Kind    string           `json:"kind"`
	Permits int64            `json:"permits"`
	Holds   []sharedHoldJSON `json:"holds"`
	Waiting []sharedWaitJSON `json:"waiting"`
	Fence   uint64           `json:"fence"`
}

type sharedHoldJSON struct {
	Locker      string `json:"locker"`
	Permits     int64  `json:"permits"`
	Write       bool   `json:"write"`
	Token       uint64 `json:"token"`
	LeaseLeftMS int64  `json:"lease_left_ms"`
}

type sharedWaitJSON struct {
	Process string `json:"process"`
	Permits int64  `json:"permits"`
	Write   bool   `json:"write"`
}

// sharedKeys names the Redis keys of cfg's read-write lock or semaphore, for an operator: it
// keeps none under cfg's own key.
func sharedKeys(cfg domain.DLockConfig) string { return cfg.SideKey("shared:*") }

// sharedStatus prints the state of typ/target's read-write lock or semaphore.
func sharedStatus(out cli, r redisFlags, kind *kindFlags, asJSON bool, typ, target string) error {
	c, g, err := kind.open(r, typ, target, inspectLease)
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := c.ctx()
	defer cancel()
	st, err := g.shared(ctx)
	if err != nil {
		return c.classify(err)
	}
	cfg := g.Config()
	if len(st.Holds) == 0 && len(st.Waiting) == 0 {
		tellOtherKind(out.stderr, cfg, c.otherKind(cfg, true))
	}
	j := sharedJSON{Type: string(cfg.LockType()), Target: cfg.LockTarget(), Key: cfg.UniqueKey(), Kind: st.Kind,
		Permits: st.Permits, Fence: st.Fence, Holds: []sharedHoldJSON{}, Waiting: []sharedWaitJSON{}}
	// A read-write lock's holding or waiter counts 1, a write too: the library reports a
	// write's internal weight (processor.RWPermits), which is no count of anything.
	permits := func(n int64) int64 {
		if st.Kind == "rw" {
			return 1
		}
		return n
	}
	for _, h := range st.Holds {
		j.Holds = append(j.Holds, sharedHoldJSON{h.Locker, permits(h.Permits), h.Write, h.Token, h.TTL.Milliseconds()})
	}
	for _, w := range st.Waiting {
		j.Waiting = append(j.Waiting, sharedWaitJSON{w.Process, permits(w.Permits), w.Write})
	}
	if asJSON {
		fields := []string{"type", j.Type, "target", j.Target, "key", j.Key}
		for i, h := range j.Holds {
			fields = append(fields, fmt.Sprintf("holds[%d].locker", i), h.Locker)
		}
		for i, q := range j.Waiting {
			fields = append(fields, fmt.Sprintf("waiting[%d].process", i), q.Process)
		}
		if err := json.NewEncoder(out.stdout).Encode(j); err != nil {
			return err
		}
		tellNotUTF8(out.stderr, fields...)
		return nil
	}
	w := new(strings.Builder) // written at once, so that a failed write is told (as --json's)
	name := "read-write lock"
	if st.Kind == "sem" {
		name = "semaphore of " + nPermits(st.Permits)
	}
	fmt.Fprintf(w, "lock:        %s/%s (%s, keys %s)\n", cfg.LockType(), cfg.LockTarget(), name, sharedKeys(cfg))
	if len(st.Holds) == 0 {
		fmt.Fprintf(w, "state:       free\n")
	}
	for _, h := range j.Holds {
		what := nPermits(h.Permits)
		if st.Kind == "rw" {
			what = map[bool]string{true: "write", false: "read"}[h.Write]
		}
		fmt.Fprintf(w, "holding:     %s (%s), token %d, lease left %v\n", shown(h.Locker), what, h.Token, time.Duration(h.LeaseLeftMS)*time.Millisecond)
	}
	for i, q := range j.Waiting {
		what := nPermits(q.Permits)
		if st.Kind == "rw" {
			what = map[bool]string{true: "write", false: "read"}[q.Write]
		}
		fmt.Fprintf(w, "waiting:     %d. %s (%s)\n", i+1, shown(q.Process), what)
	}
	if st.Fence > 0 {
		fmt.Fprintf(w, "fence:       %d (the last fencing token reserved)\n", st.Fence)
	}
	_, err = io.WriteString(out.stdout, w.String())
	return err
}

// printStatusJSON writes st as one lockStatus object on one line.
func printStatusJSON(w io.Writer, st dlock.State) error {
	cfg := st.Config
	return json.NewEncoder(w).Encode(lockStatus{
		Type:         string(cfg.LockType()),
		Target:       cfg.LockTarget(),
		Key:          cfg.UniqueKey(),
		Held:         st.Held(),
		Holder:       st.Holder,
		Mine:         st.Mine,
		LeaseLeftMS:  st.LeaseLeft.Milliseconds(),
		Fence:        st.Fence,
		Waiting:      append([]string{}, st.Waiting...), // [] rather than null when none
		LocalWaiters: st.LocalWaiters,
	})
}

// printStatus writes st for a person to read, at once; it returns the write's error.
func printStatus(out io.Writer, st dlock.State) error {
	w := new(strings.Builder)
	cfg := st.Config
	fmt.Fprintf(w, "lock:        %s/%s (key %s)\n", cfg.LockType(), cfg.LockTarget(), cfg.UniqueKey())
	switch {
	case st.Held():
		fmt.Fprintf(w, "state:       held\nholder:      %s\n", shown(st.Holder))
	default:
		fmt.Fprintf(w, "state:       free\n")
	}
	switch {
	case st.LeaseLeft > 0:
		fmt.Fprintf(w, "lease left:  %v\n", st.LeaseLeft.Round(time.Millisecond))
	case st.Held(): // (State's LeaseLeft is 0 for a key without expiry)
		fmt.Fprintf(w, "lease left:  none: the key has no expiry (not set by dlock); it never comes free by itself\n")
	}
	if st.Fence > 0 {
		fmt.Fprintf(w, "fence:       %d (the last fencing token handed out)\n", st.Fence)
	} else {
		fmt.Fprintf(w, "fence:       none kept (it expires two leases after its last use; the next token still exceeds every earlier one, as it starts from the server's clock)\n")
	}
	switch len(st.Waiting) {
	case 0:
		fmt.Fprintf(w, "waiting:     none recorded\n")
	case 1:
		fmt.Fprintf(w, "waiting:     1 process: %s\n", shown(st.Waiting[0]))
	default:
		fmt.Fprintf(w, "waiting:     %d processes, first in line first:\n", len(st.Waiting))
		for i, p := range st.Waiting {
			fmt.Fprintf(w, "             %d. %s\n", i+1, shown(p))
		}
	}
	_, err := io.WriteString(out, w.String())
	return err
}
