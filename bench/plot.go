package main

import (
	"fmt"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// dlockREADME is the R of DLock against the traditional lock that Baidu DLock's README
// publishes, by thread count.
var dlockREADME = plotter.XYs{{X: 8, Y: 1.01}, {X: 32, Y: 1.45}, {X: 64, Y: 1.67}, {X: 104, Y: 1.74}, {X: 112, Y: 1.74}, {X: 128, Y: 1.71}}

// drawPlots writes, for each process count of the trip rows, efficiency and R against
// concurrency (trip_efficiency_pN.png, trip_r_pN.png) into dir.
func drawPlots(rows []Row, dir string) error {
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
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}
