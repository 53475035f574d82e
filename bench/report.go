package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// point identifies a trip measurement independently of the implementation.
type point struct{ procs, goroutines int }

// tripTPS indexes trip rows' TPS by implementation and point.
func tripTPS(rows []Row) map[string]map[point]float64 {
	m := map[string]map[point]float64{}
	for _, r := range rows {
		if r.Scenario != "trip" {
			continue
		}
		if m[r.Impl] == nil {
			m[r.Impl] = map[point]float64{}
		}
		m[r.Impl][point{r.Procs, r.Goroutines}] = r.TPS
	}
	return m
}

// ratio returns TPS(r)/TPS(tradition) at r's point, or 0 if tradition was not measured.
func ratio(tps map[string]map[point]float64, r Row) float64 {
	if t := tps["tradition"][point{r.Procs, r.Goroutines}]; t > 0 {
		return r.TPS / t
	}
	return 0
}

// implsIn returns the implementations present in rows, in the usual order.
func implsIn(rows []Row) []string {
	var out []string
	for _, name := range allImpls {
		if slices.ContainsFunc(rows, func(r Row) bool { return r.Impl == name }) {
			out = append(out, name)
		}
	}
	return out
}

func procsIn(rows []Row, scenario string) []int {
	var out []int
	for _, r := range rows {
		if r.Scenario == scenario && !slices.Contains(out, r.Procs) {
			out = append(out, r.Procs)
		}
	}
	slices.Sort(out)
	return out
}

func opt(v float64, format string) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// printTables writes the rows as Markdown tables: per process count a summary of efficiency
// and R and a detailed trip table, then hot and handoff.
func printTables(w io.Writer, rows []Row) {
	tps := tripTPS(rows)
	impls := implsIn(rows)
	for _, procs := range procsIn(rows, "trip") {
		var trip []Row
		for _, r := range rows {
			if r.Scenario == "trip" && r.Procs == procs {
				trip = append(trip, r)
			}
		}
		var concs []int
		for _, r := range trip {
			if !slices.Contains(concs, r.Goroutines) {
				concs = append(concs, r.Goroutines)
			}
		}
		slices.Sort(concs)
		fmt.Fprintf(w, "\n#### trip, %d process(es): efficiency (R = TPS / TPS of tradition)\n\n", procs)
		fmt.Fprintf(w, "| goroutines | %s |\n|---:|%s\n", strings.Join(impls, " | "), strings.Repeat("---:|", len(impls)))
		for _, c := range concs {
			cells := make([]string, len(impls))
			for i, name := range impls {
				cells[i] = "–"
				for _, r := range trip {
					if r.Impl == name && r.Goroutines == c {
						cells[i] = fmt.Sprintf("%.3f (%s)", r.Efficiency, opt(ratio(tps, r), "%.2f"))
					}
				}
			}
			fmt.Fprintf(w, "| %d | %s |\n", c, strings.Join(cells, " | "))
		}
		fmt.Fprintf(w, "\n#### trip, %d process(es): detail\n\n", procs)
		fmt.Fprintln(w, "| goroutines | impl | TPS | efficiency | R | cmds/acq | redis calls/acq | min–max/goroutine | min–max/process | errors | retries | overlaps |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range concs {
			for _, r := range trip {
				if r.Goroutines == c {
					fmt.Fprintf(w, "| %d | %s | %.1f | %.3f | %s | %.2f | %.2f | %d–%d | %d–%d | %d | %d | %d |\n",
						c, r.Impl, r.TPS, r.Efficiency, opt(ratio(tps, r), "%.2f"), r.CmdsPerAcq, r.RedisCallsPerAcq,
						r.MinPerGoroutine, r.MaxPerGoroutine, r.MinPerProc, r.MaxPerProc, r.Errors, r.Retries, r.Overlaps)
				}
			}
		}
	}
	var hot, cross, handoff, family []Row
	for _, r := range rows {
		switch r.Scenario {
		case "rw", "sem":
			family = append(family, r)
		case "hot":
			hot = append(hot, r)
		case "cross":
			cross = append(cross, r)
		case "handoff":
			handoff = append(handoff, r)
		}
	}
	if len(hot) > 0 {
		fmt.Fprintln(w, "\n#### hot: Lock/Unlock with no work")
		fmt.Fprintln(w, "\n| processes × goroutines | impl | acquisitions/s | cmds/acq | redis calls/acq | min–max/goroutine | min–max/process | errors | retries | overlaps |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range hot {
			fmt.Fprintf(w, "| %d × %d | %s | %.0f | %.2f | %.2f | %d–%d | %d–%d | %d | %d | %d |\n", r.Procs, r.Goroutines/max(r.Procs, 1),
				r.Impl, r.TPS, r.CmdsPerAcq, r.RedisCallsPerAcq, r.MinPerGoroutine, r.MaxPerGoroutine,
				r.MinPerProc, r.MaxPerProc, r.Errors, r.Retries, r.Overlaps)
		}
	}
	if len(cross) > 0 {
		fmt.Fprintln(w, "\n#### cross: one goroutine per process, a short hold (every acquisition goes from process to process)")
		fmt.Fprintln(w, "\n| processes | impl | acquisitions/s | wait p99 µs | cmds/acq | redis calls/acq | min–max/process | errors | retries | overlaps |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range cross {
			fmt.Fprintf(w, "| %d | %s | %.0f | %s | %.2f | %.2f | %d–%d | %d | %d | %d |\n", r.Procs, r.Impl, r.TPS, opt(r.WaitP99Us, "%.0f"),
				r.CmdsPerAcq, r.RedisCallsPerAcq, r.MinPerProc, r.MaxPerProc, r.Errors, r.Retries, r.Overlaps)
		}
	}
	if len(family) > 0 {
		fmt.Fprintln(w, "\n#### rw and sem: the lock family (rw: 95 % reads; sem: 4 permits; the hold spent waiting)")
		fmt.Fprintln(w, "\n| scenario | processes × goroutines | impl | acquisitions/s | wait p99 µs | cmds/acq | redis calls/acq | min–max/goroutine | min–max/process | errors | overlaps |")
		fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range family {
			fmt.Fprintf(w, "| %s | %d × %d | %s | %.0f | %s | %.2f | %.2f | %d–%d | %d–%d | %d | %d |\n", r.Scenario, r.Procs, r.Goroutines/max(r.Procs, 1),
				r.Impl, r.TPS, opt(r.WaitP99Us, "%.0f"), r.CmdsPerAcq, r.RedisCallsPerAcq, r.MinPerGoroutine, r.MaxPerGoroutine,
				r.MinPerProc, r.MaxPerProc, r.Errors, r.Overlaps)
		}
	}
	if len(handoff) > 0 {
		fmt.Fprintln(w, "\n#### handoff: Unlock in one process to Lock returning in the other")
		fmt.Fprintln(w, "\n| impl | hand-offs | p50 µs | p99 µs | mean µs | max µs | idle RTT p50 µs | p50 / idle RTT | cmds/acq | redis calls/acq | errors | retries |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range handoff {
			var x float64
			if r.RTTIdleP50Us > 0 {
				x = r.HandoffP50Us / r.RTTIdleP50Us
			}
			fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %s | %s | %.2f | %.2f | %d | %d |\n", r.Impl, r.Handoffs,
				r.HandoffP50Us, r.HandoffP99Us, r.HandoffMeanUs, r.HandoffMaxUs, opt(r.RTTIdleP50Us, "%.0f"), opt(x, "%.2f"),
				r.CmdsPerAcq, r.RedisCallsPerAcq, r.Errors, r.Retries)
		}
	}
	for _, r := range rows {
		if r.FirstErr != "" {
			fmt.Fprintf(w, "\nfirst error of %s %s procs=%d goroutines=%d: %s\n", r.Scenario, r.Impl, r.Procs, r.Goroutines, r.FirstErr)
		}
	}
}
