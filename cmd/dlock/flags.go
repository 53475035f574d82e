package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// errHelp reports that --help (or -h) was asked for: the usage goes to stdout, status 0.
var errHelp = errors.New("help requested")

// flagSet is a flag.FlagSet that remembers the order and placeholders of its flags, prints
// them as --name VALUE, and parses flags mixed with positional arguments (parse).
type flagSet struct {
	fs    *flag.FlagSet
	order []flagDoc // in the order they were defined
}

// flagDoc is how the usage shows one flag.
type flagDoc struct {
	name string
	arg  string // placeholder for the value, "" for a boolean flag
}

// newFlagSet returns an empty flagSet for the command name; it prints nothing by itself.
func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{fs: fs}
}

// String defines a string flag.
func (f *flagSet) String(name, arg, value, usage string) *string {
	f.order = append(f.order, flagDoc{name, arg})
	return f.fs.String(name, value, usage)
}

// Duration defines a time.Duration flag.
func (f *flagSet) Duration(name string, value time.Duration, usage string) *time.Duration {
	f.order = append(f.order, flagDoc{name, "D"})
	return f.fs.Duration(name, value, usage)
}

// Int defines an int flag.
func (f *flagSet) Int(name string, value int, usage string) *int {
	f.order = append(f.order, flagDoc{name, "N"})
	return f.fs.Int(name, value, usage)
}

// Bool defines a boolean flag.
func (f *flagSet) Bool(name string, usage string) *bool {
	f.order = append(f.order, flagDoc{name, ""})
	return f.fs.Bool(name, false, usage)
}

// Var defines a flag with a custom value.
func (f *flagSet) Var(v flag.Value, name, arg, usage string) {
	f.order = append(f.order, flagDoc{name, arg})
	f.fs.Var(v, name, usage)
}

// hasFlags reports whether any flag is defined.
func (f *flagSet) hasFlags() bool { return len(f.order) > 0 }

// printFlags writes one line per flag: --name ARG, its usage and its default when it has one.
func (f *flagSet) printFlags(w io.Writer) {
	for _, d := range f.order {
		fl := f.fs.Lookup(d.name)
		left := "--" + d.name
		if d.arg != "" {
			left += " " + d.arg
		}
		line := fmt.Sprintf("  %-18s %s", left, fl.Usage)
		if d.arg != "" && fl.DefValue != "" && fl.DefValue != "0" {
			line += " (default " + fl.DefValue + ")"
		}
		fmt.Fprintln(w, line)
	}
}

// parse parses args: flags anywhere before "--" or before the command, npos positional
// arguments, and, if withCommand, a command made of everything after them. The command
// starts after a "--", or at the first argument after the positional ones that is not a flag
// (so "exec T X ls -l" runs ls -l, as flock does). Without withCommand, arguments beyond npos
// are a usage error, as are fewer than npos. -h, -help and --help anywhere a flag may stand
// return errHelp.
func (f *flagSet) parse(args []string, npos int, withCommand bool) (pos, cmd []string, err error) {
	rest := args
	flags := true // still reading flags: no "--" seen yet
	for {
		if flags {
			if err := f.fs.Parse(rest); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return nil, nil, errHelp
				}
				return nil, nil, withStatus(exitUsage, err)
			}
			used := len(rest) - f.fs.NArg()
			if used > 0 && rest[used-1] == "--" {
				flags = false
			}
			rest = f.fs.Args()
		}
		if len(pos) == npos || len(rest) == 0 {
			break
		}
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	if len(pos) < npos {
		return nil, nil, usageErrorf("%d arguments expected, got %d", npos, len(pos))
	}
	if withCommand {
		if len(rest) == 0 {
			return nil, nil, usageErrorf("no command given")
		}
		return pos, rest, nil
	}
	if len(rest) > 0 {
		return nil, nil, usageErrorf("unexpected argument %q", rest[0])
	}
	return pos, nil, nil
}

// waitFlag is the value of exec's --wait: a duration, or "forever" (stored as a negative
// duration).
type waitFlag struct{ d time.Duration }

// forever is the waitFlag value that waits without a bound.
const forever = time.Duration(-1)

// String returns the wait as --wait accepts it.
func (w *waitFlag) String() string {
	if w == nil || w.d < 0 {
		return "forever"
	}
	return w.d.String()
}

// Set parses a --wait argument: "forever" or a duration of 0 or more.
func (w *waitFlag) Set(s string) error {
	if strings.EqualFold(s, "forever") {
		w.d = forever
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New(`a duration (such as 10s, 0 to try once) or "forever"`)
	}
	if d < 0 {
		return errors.New("negative duration")
	}
	w.d = d
	return nil
}
