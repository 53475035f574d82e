package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// dlockREADME is the R of DLock against the traditional lock that Baidu DLock's README
// publishes, by thread count.
var dlockREADME = plotter.XYs{{X: 8, Y: 1.01}, {X: 32, Y: 1.45}, {X: 64, Y: 1.67}, {X: 104, Y: 1.74}, {X: 112, Y: 1.74}, {X: 128, Y: 1.71}}

// drawPlots writes, for each process count of the trip rows, efficiency and R against
// concurrency (trip_efficiency_pN.png, trip_r_pN.png) into dir, and the hot and cross rows
// against the peers (hot_tps.png, cross_tps.png, cross_wait_p99.png).
func drawPlots(rows []Row, dir string) error {
	if err := drawPeerPlots(rows, dir); err != nil {
		return err
	}
	tps := tripTPS(rows)
	for _, procs := range procsIn(rows, "trip") {
		eff := newPlot(fmt.Sprintf("trip (10 ms work, 60 ms lease), %d process(es): efficiency", procs), "efficiency = TPS × 10 ms")
		rp := newPlot(fmt.Sprintf("trip, %d process(es): R = TPS / TPS(tradition)", procs), "R")
		effMin, rMax := 0.8, 2.0
		var ticks []plot.Tick
		for i, name := range allImpls {
			var e, r plotter.XYs
			for _, row := range rows {
				if row.Scenario == "trip" && row.Procs == procs && row.Impl == name {
					e = append(e, plotter.XY{X: float64(row.Goroutines), Y: row.Efficiency})
					effMin = min(effMin, row.Efficiency-0.02)
					if v := ratio(tps, row); v > 0 {
						r = append(r, plotter.XY{X: float64(row.Goroutines), Y: v})
						rMax = max(rMax, v+0.1)
					}
					if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == float64(row.Goroutines) }) {
						ticks = append(ticks, plot.Tick{Value: float64(row.Goroutines), Label: fmt.Sprint(row.Goroutines)})
					}
				}
			}
			if err := addLine(eff, name, i, e); err != nil {
				return err
			}
			if err := addLine(rp, name, i, r); err != nil {
				return err
			}
		}
		ref, err := plotter.NewLine(dlockREADME)
		if err != nil {
			return err
		}
		ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		rp.Add(ref)
		rp.Legend.Add("DLock README (Java)", ref)
		eff.Y.Min, eff.Y.Max = max(effMin, 0), 1.0
		rp.Y.Min, rp.Y.Max = 0, rMax
		eff.X.Tick.Marker, rp.X.Tick.Marker = plot.ConstantTicks(ticks), plot.ConstantTicks(ticks)
		eff.Legend.Top, eff.Legend.Left = false, false
		rp.Legend.Top, rp.Legend.Left = false, false
		for name, p := range map[string]*plot.Plot{"efficiency": eff, "r": rp} {
			if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, fmt.Sprintf("trip_%s_p%d.png", name, procs))); err != nil {
				return err
			}
		}
	}
	return nil
}

func newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrency (goroutines over all processes)"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	return p
}

// addLine draws one implementation with the colour and marker of its place in allImpls.
func addLine(p *plot.Plot, name string, i int, xys plotter.XYs) error {
	if len(xys) == 0 {
		return nil
	}
	slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, s.Color, s.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
	if slices.Contains(ceilings, name) { // not a lock: black and dashed
		l.Color, s.Color = color.Black, color.Black
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

// drawPeerPlots writes the implementations side by side: acquisitions/s of the hot rows by
// process × goroutine layout (hot_tps.png), and acquisitions/s and the p99 wait of the cross
// rows by process count (cross_tps.png, cross_wait_p99.png). A value that is missing (0, as
// in results written before wait_p99_us existed) leaves its point out; a plot with no point
// at all is not written.
func drawPeerPlots(rows []Row, dir string) error {
	type layout struct{ procs, perProc int }
	var layouts []layout // the hot rows' layouts in the order they were run
	for _, r := range rows {
		if r.Scenario == "hot" && r.Procs > 0 {
			if l := (layout{r.Procs, r.Goroutines / r.Procs}); !slices.Contains(layouts, l) {
				layouts = append(layouts, l)
			}
		}
	}
	var hotTicks []plot.Tick
	for i, l := range layouts {
		hotTicks = append(hotTicks, plot.Tick{Value: float64(i), Label: fmt.Sprintf("%d × %d", l.procs, l.perProc)})
	}
	var crossTicks []plot.Tick
	for _, p := range procsIn(rows, "cross") {
		crossTicks = append(crossTicks, plot.Tick{Value: float64(p), Label: strconv.Itoa(p)})
	}
	hot := func(r Row) (float64, bool) {
		i := slices.Index(layouts, layout{r.Procs, r.Goroutines / max(r.Procs, 1)})
		return float64(i), r.Scenario == "hot" && i >= 0
	}
	cross := func(r Row) (float64, bool) { return float64(r.Procs), r.Scenario == "cross" }
	tps := func(r Row) float64 { return r.TPS }
	wait := func(r Row) float64 { return r.WaitP99Us }
	for _, c := range []struct {
		file, title, xlabel, ylabel string
		x                           func(Row) (float64, bool)
		y                           func(Row) float64
		ticks                       []plot.Tick
	}{
		{"hot_tps.png", "hot: Lock/Unlock with no work, one key", "processes × goroutines per process",
			"acquisitions/s", hot, tps, hotTicks},
		{"cross_tps.png", fmt.Sprintf("cross: one goroutine per process, %v hold", crossHold), "processes",
			"acquisitions/s", cross, tps, crossTicks},
		{"cross_wait_p99.png", fmt.Sprintf("cross: p99 wait, from calling Lock to its return (%v hold)", crossHold),
			"processes", "p99 wait (µs)", cross, wait, crossTicks},
	} {
		lines := map[string]plotter.XYs{}
		var ys []float64
		for _, r := range rows {
			x, ok := c.x(r)
			y := c.y(r)
			if !ok || !(y > 0) || math.IsInf(y, 0) {
				continue
			}
			lines[r.Impl] = append(lines[r.Impl], plotter.XY{X: x, Y: y})
			ys = append(ys, y)
		}
		if len(ys) == 0 {
			continue
		}
		p := newPlot(c.title, c.ylabel)
		p.X.Label.Text = c.xlabel
		for i, name := range allImpls {
			if err := addLine(p, name, i, lines[name]); err != nil {
				return err
			}
		}
		p.X.Tick.Marker = plot.ConstantTicks(c.ticks)
		if len(c.ticks) > 0 { // room for the first and last point's marker
			lo, hi := c.ticks[0].Value, c.ticks[len(c.ticks)-1].Value
			if c.file == "hot_tps.png" {
				p.X.Min, p.X.Max = lo-0.3, hi+0.3
			} else {
				p.X.Scale = plot.LogScale{}
				p.X.Min, p.X.Max = lo/1.15, hi*1.15
			}
		}
		lo, hi := slices.Min(ys), slices.Max(ys)
		if hi/lo > 20 { // the implementations differ by orders of magnitude
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
			p.Y.Min, p.Y.Max = lo/1.5, hi*1.5
			p.Y.Label.Text += ", log scale"
		} else {
			p.Y.Min, p.Y.Max = 0, hi*1.1
		}
		if err := saveLegendRight(p, 9*vg.Inch, 5*vg.Inch, filepath.Join(dir, c.file)); err != nil {
			return err
		}
	}
	return nil
}

// saveLegendRight writes p as a PNG of w × h with its legend in a strip to the right of
// the axes, where it can hide no point.
func saveLegendRight(p *plot.Plot, w, h vg.Length, file string) error {
	const strip = 1.3 * vg.Inch
	leg := p.Legend
	p.Legend = plot.NewLegend()
	img := vgimg.New(w, h)
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -strip, 0, 0))
	leg.Top, leg.Left = true, true
	leg.Draw(draw.Crop(dc, w-strip+vg.Points(8), 0, 0, -0.4*vg.Inch))
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// logTicks marks a log axis at 1, 2 and 5 times each power of ten, with unlabelled ticks
// between them.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := int(math.Floor(math.Log10(lo))); math.Pow10(e) <= hi; e++ {
		for m := 1; m < 10; m++ {
			v := float64(m) * math.Pow10(e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
