package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dlockgo/dlock/domain"
)

// errHelp reports that --help (or -h) was asked for: the usage goes to stdout, status 0.
var errHelp = errors.New("help requested")

// value is a flag's value: Set parses one argument and says, in a few words, what is wrong
// with a bad one; String is the default the usage shows ("" for none).
type value interface {
	Set(s string) error
	String() string
}

// flagDef is one flag: its names, how the usage shows it, and its value.
type flagDef struct {
	long  string // name after "--"
	short string // one letter after "-", or ""
	arg   string // placeholder for the value, "" for a boolean flag
	usage string
	val   value
	seen  bool // given on the command line
}

// flagSet is a command's flags. It parses them GNU-style, mixed with positional arguments:
// --name VALUE, --name=VALUE, -x VALUE, -xVALUE, and (as Go's flag package did) -name VALUE;
// its errors name flags as the usage shows them (--lease, -w).
type flagSet struct {
	defs []*flagDef // in the order the usage shows them

	// checkPos, if set, checks the positional arguments once they are read (before any
	// other usage error about the arguments).
	checkPos func(pos []string) error

	// elsewhere, by a flag's name without its dashes: what to say of a flag this command
	// does not take but another does
	elsewhere map[string]string
}

// newFlagSet returns an empty flagSet for the command name.
func newFlagSet(string) *flagSet { return &flagSet{} }

// define adds a flag and returns it.
func (f *flagSet) define(long, short, arg, usage string, v value) *flagDef {
	d := &flagDef{long: long, short: short, arg: arg, usage: usage, val: v}
	f.defs = append(f.defs, d)
	return d
}

// String defines a string flag with no default.
func (f *flagSet) String(name, arg, usage string) *string {
	v := new(stringValue)
	f.define(name, "", arg, usage, v)
	return (*string)(v)
}

// Duration defines a time.Duration flag of 0 or more.
func (f *flagSet) Duration(name string, def time.Duration, usage string) *time.Duration {
	v := &durationValue{d: def}
	f.define(name, "", "D", usage, v)
	return &v.d
}

// Lease defines a lease flag: a duration within the library's bounds.
func (f *flagSet) Lease(name string, def time.Duration, usage string) *time.Duration {
	v := &leaseValue{durationValue{d: def}}
	f.define(name, "", "D", usage, v)
	return &v.d
}

// Int defines an int flag of min to max.
func (f *flagSet) Int(name string, def int, min, max int64, usage string) *int {
	v := &intValue{n: def, min: min, max: max}
	f.define(name, "", "N", usage, v)
	return &v.n
}

// Bool defines a boolean flag; short may be "".
func (f *flagSet) Bool(name, short, usage string) *bool {
	v := new(boolValue)
	f.define(name, short, "", usage, v)
	return (*bool)(v)
}

// Var defines a flag with a custom value; short may be "".
func (f *flagSet) Var(v value, name, short, arg, usage string) *flagDef {
	return f.define(name, short, arg, usage, v)
}

// hasFlags reports whether any flag is defined.
func (f *flagSet) hasFlags() bool { return len(f.defs) > 0 }

// printFlags writes each flag: -x, --name ARG, then its usage and its default if any,
// wrapped to fit 96 columns.
func (f *flagSet) printFlags(w io.Writer) {
	const indent, width = 30, 96
	for _, d := range f.defs {
		left := "    --" + d.long
		if d.short != "" {
			left = "-" + d.short + ", --" + d.long
		}
		if d.arg != "" {
			left += " " + d.arg
		}
		words := strings.Fields(d.usage)
		if def := d.val.String(); d.arg != "" && def != "" && def != "0" {
			words = append(words, "(default "+def+")") // kept on one line
		}
		line := "  " + left
		if len(line) >= indent-1 {
			fmt.Fprintln(w, line)
			line = ""
		}
		for _, word := range words {
			switch {
			case len(line) < indent:
				line += strings.Repeat(" ", indent-len(line)) + word
			case len(line)+1+len(word) > width:
				fmt.Fprintln(w, line)
				line = strings.Repeat(" ", indent) + word
			default:
				line += " " + word
			}
		}
		fmt.Fprintln(w, line)
	}
}

// name is how messages name d: as the usage shows it.
func (d *flagDef) name() string { return "--" + d.long }

// lookup finds the flag an argument names: "--name", "-name" or "-x". For "-xVALUE" it
// returns the flag x and the attached value.
func (f *flagSet) lookup(arg string) (d *flagDef, shown, attached string, hasAttached bool) {
	body := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	if name, v, ok := strings.Cut(body, "="); ok {
		body, attached, hasAttached = name, v, true
	}
	for _, d := range f.defs {
		if d.long == body || (d.short != "" && d.short == body && !strings.HasPrefix(arg, "--")) {
			shown = "--" + d.long
			if d.short == body && d.long != body {
				shown = "-" + d.short
			}
			return d, shown, attached, hasAttached
		}
	}
	// -w5, -E3: a short flag with its value attached.
	if !strings.HasPrefix(arg, "--") && len(arg) > 2 {
		for _, d := range f.defs {
			if d.short != "" && d.arg != "" && arg[1:2] == d.short {
				return d, "-" + d.short, arg[2:], true
			}
		}
	}
	return nil, "", "", false
}

// isFlag reports whether arg stands for a flag (or "--"), not an argument.
func isFlag(arg string) bool { return len(arg) > 1 && arg[0] == '-' }

// parseFlag parses the flag at args[0] and returns how many arguments it used.
func (f *flagSet) parseFlag(args []string) (int, error) {
	arg := args[0]
	switch arg {
	case "-h", "-help", "--help":
		return 0, errHelp
	}
	d, shown, v, hasV := f.lookup(arg)
	if d == nil {
		name := strings.SplitN(arg, "=", 2)[0]
		if why, ok := f.elsewhere[strings.TrimLeft(name, "-")]; ok {
			return 0, usageErrorf("unknown flag %s: %s", name, why)
		}
		return 0, usageErrorf("unknown flag %s", name)
	}
	used := 1
	if d.arg == "" { // boolean
		if hasV {
			if _, err := strconv.ParseBool(v); err != nil {
				return 0, usageErrorf("invalid %s=%q: %s takes no value", shown, v, shown)
			}
		} else {
			v = "true"
		}
	} else if !hasV {
		if len(args) < 2 {
			return 0, usageErrorf("%s needs a value (%s)", shown, d.arg)
		}
		v, used = args[1], 2
	}
	if err := d.val.Set(v); err != nil {
		return 0, usageErrorf("invalid %s %q: %v", shown, v, err)
	}
	d.seen = true
	return used, nil
}

// parse parses args: flags anywhere before "--" or before the command, npos positional
// arguments, and, if withCommand, a command made of everything after them. The command
// starts after a "--", or at the first argument after the positional ones that is not a flag
// (so "exec T X ls -l" runs ls -l, as flock does), or after a "--" right after the
// positional ones when a "--" before them ended the flags ("exec -- -T X -- ls"). Without
// withCommand, arguments beyond npos are a usage error, as are fewer than npos. -h, -help and
// --help anywhere a flag may stand return errHelp.
func (f *flagSet) parse(args []string, npos int, withCommand bool) (pos, cmd []string, err error) {
	rest := args
	flags := true  // still reading flags: no "--" seen yet
	early := false // a "--" ended the flags before the positional arguments were all read
	for len(rest) > 0 {
		arg := rest[0]
		switch {
		case flags && arg == "--":
			flags, early, rest = false, len(pos) < npos, rest[1:]
			continue
		case flags && isFlag(arg):
			n, err := f.parseFlag(rest)
			if err != nil {
				return nil, nil, err
			}
			rest = rest[n:]
			continue
		}
		if len(pos) == npos {
			if withCommand && early && arg == "--" { // (the usage's "[--] COMMAND")
				rest = rest[1:]
			}
			break
		}
		pos, rest = append(pos, arg), rest[1:]
	}
	if f.checkPos != nil {
		if err := f.checkPos(pos); err != nil {
			return nil, nil, err
		}
	}
	if len(pos) < npos {
		return nil, nil, usageErrorf("%d arguments expected (TYPE TARGET), got %d", npos, len(pos))
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

// stringValue is a string flag.
type stringValue string

func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }
func (s *stringValue) String() string     { return string(*s) }

// boolValue is a boolean flag.
type boolValue bool

func (b *boolValue) Set(v string) error {
	x, err := strconv.ParseBool(v)
	*b = boolValue(x)
	return err
}
func (b *boolValue) String() string { return "" }

// intValue is an int flag of min to max (which an int holds).
type intValue struct {
	n        int
	min, max int64
}

func (i *intValue) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 0)
	switch {
	case err == nil && n < i.min, errors.Is(err, strconv.ErrRange) && strings.HasPrefix(v, "-"):
		return fmt.Errorf("too small (at least %d)", i.min)
	case err == nil && n > i.max, errors.Is(err, strconv.ErrRange):
		return fmt.Errorf("too large (at most %d)", i.max)
	case err != nil:
		return errors.New("not a whole number")
	}
	i.n = int(n)
	return nil
}
func (i *intValue) String() string { return strconv.Itoa(i.n) }

// durationValue is a duration flag of 0 or more, written with a unit.
type durationValue struct{ d time.Duration }

func (d *durationValue) Set(v string) error {
	x, err := parseDuration(v)
	if err != nil {
		return err
	}
	d.d = x
	return nil
}
func (d *durationValue) String() string { return d.d.String() }

// durationSyntax matches what time.ParseDuration reads, whatever the size: a duration that
// matches and is refused all the same is too long for a time.Duration (over 2562047h).
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// errTooLong is parseDuration's error for a duration beyond time.Duration's range.
var errTooLong = errors.New("too long: a duration is at most 2562047h (about 292 years)")

// parseDuration parses a Go duration of 0 or more and explains a bad one.
func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil && durationSyntax.MatchString(v) && strings.HasPrefix(v, "-"):
		return 0, errors.New("must not be negative")
	case err != nil && durationSyntax.MatchString(v):
		return 0, errTooLong
	case err != nil && strings.Contains(err.Error(), "missing unit"):
		return 0, errors.New("a duration needs a unit, e.g. 30s")
	case err != nil:
		return 0, errors.New("not a duration: a number and a unit, e.g. 500ms, 30s or 2m")
	case d < 0:
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

// leaseValue is a lease: a duration the library accepts.
type leaseValue struct{ durationValue }

func (l *leaseValue) Set(v string) error {
	err := l.durationValue.Set(v)
	if err != nil && !errors.Is(err, errTooLong) {
		return err
	}
	if err != nil || domain.ValidateLease(l.d) != nil {
		return fmt.Errorf("a lease must be from %v to %v (7 days), in whole milliseconds", domain.MinLease, shortDuration(domain.MaxLease))
	}
	return nil
}

// shortDuration writes d without trailing zero units: 168h, not 168h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// waitValue is --wait: seconds (a plain number, as flock -w), a Go duration, or "forever"
// (stored as a negative duration).
type waitValue struct{ d time.Duration }

// forever is the waitValue that waits without a bound.
const forever = time.Duration(-1)

func (w *waitValue) String() string {
	if w.d < 0 {
		return "forever"
	}
	return w.d.String()
}

func (w *waitValue) Set(s string) error {
	if strings.EqualFold(s, "forever") {
		w.d = forever
		return nil
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(secs) {
			return errors.New("seconds must be a number, 0 or more")
		}
		if secs < 0 {
			return errors.New("seconds must be 0 or more")
		}
		if secs > float64(math.MaxInt64/int64(time.Second)) {
			return errors.New(`too many seconds (use "forever")`)
		}
		if secs > 0 && secs < minWait.Seconds() {
			return errWaitTooShort
		}
		w.d = time.Duration(secs * float64(time.Second))
		return nil
	}
	d, err := parseDuration(s)
	switch {
	case errors.Is(err, errTooLong):
		return errors.New(`too long (use "forever")`)
	case err != nil && durationSyntax.MatchString(s):
		return err // negative
	case err != nil:
		return errors.New(`want seconds (e.g. 10 or 0.5; 0 tries once), a duration (e.g. 1m) or "forever"`)
	case d == 0 && strings.ContainsAny(s, "123456789"):
		return errWaitTooShort // (rounded down to 0: "0.5ns")
	case d > 0 && d < minWait:
		return errWaitTooShort
	}
	w.d = d
	return nil
}

// minWait is the shortest wait but 0: a wait bounds every attempt, the first included, and a
// shorter one would end before any attempt is answered (a sure "not obtained", on a free lock
// too), or be rounded to 0, one attempt, without a word.
const minWait = time.Millisecond

// errWaitTooShort is waitValue's error for a wait shorter than minWait but not 0.
var errWaitTooShort = fmt.Errorf("a wait is 0 (one attempt) or at least %v: no attempt is answered within less", minWait)
