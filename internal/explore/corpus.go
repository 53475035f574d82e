package explore

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Schedule is a schedule kept for later: the swarm it ran in (Seed) and its choices, one
// action key each. Minimal failing schedules are kept in testdata, as a fuzzer keeps its
// crashers: a test replays them, and a search starts from them.
type Schedule struct {
	Name  string // what it shows (a mutant's name)
	Seed  uint64
	Steps []string
}

// Schedule returns the violation's shrunk schedule under name.
func (v *Violation) Schedule(name string) Schedule {
	return Schedule{Name: name, Seed: v.Seed, Steps: v.Steps}
}

// WriteSchedules writes schedules in the text form ReadSchedules reads: for each, a line
// "# <name>", a line "seed <n>", its steps one to a line, and a blank line.
func WriteSchedules(w io.Writer, schedules []Schedule) error {
	for _, s := range schedules {
		if _, err := fmt.Fprintf(w, "# %s\nseed %d\n%s\n\n", s.Name, s.Seed, strings.Join(s.Steps, "\n")); err != nil {
			return err
		}
	}
	return nil
}

// ReadSchedules reads what WriteSchedules wrote.
func ReadSchedules(r io.Reader) ([]Schedule, error) {
	var out []Schedule
	var cur *Schedule
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# "):
			out = append(out, Schedule{Name: strings.TrimPrefix(line, "# ")})
			cur = &out[len(out)-1]
		case cur == nil && line != "":
			return nil, fmt.Errorf("line %d: a schedule starts with a line \"# <name>\"", n)
		case strings.HasPrefix(line, "seed ") && cur.Seed == 0 && len(cur.Steps) == 0:
			seed, err := strconv.ParseUint(strings.TrimPrefix(line, "seed "), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			cur.Seed = seed
		case line == "":
		default:
			cur.Steps = append(cur.Steps, line)
		}
	}
	return out, sc.Err()
}
