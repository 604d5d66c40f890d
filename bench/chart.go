package bench

import (
	"fmt"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/strata-dev/strata/internal/chart"
)

// Chart file names written by WriteCharts.
const (
	ThroughputChart   = "throughput.png"
	QueryLatencyChart = "query_latency.png"
)

// WriteCharts writes the report's PNG charts into dir and returns their
// paths: accepted samples/s over time (one line per repetition) and, when
// queries ran, dashboard latency p50 and p99 per range (log scale).
func (r Report) WriteCharts(dir string) ([]string, error) {
	var paths []string
	p, err := r.throughputPlot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, ThroughputChart)
	if err := chart.SavePNG(p, path); err != nil {
		return nil, err
	}
	paths = append(paths, path)
	if len(r.Summary.QueryLatency) == 0 {
		return paths, nil
	}
	if p, err = r.queryPlot(); err != nil {
		return nil, err
	}
	path = filepath.Join(dir, QueryLatencyChart)
	if err := chart.SavePNG(p, path); err != nil {
		return nil, err
	}
	return append(paths, path), nil
}

func (r Report) throughputPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Accepted samples/s: " + r.Name
	p.X.Label.Text = "seconds into the run"
	p.Y.Label.Text = "samples/s"
	p.Y.Min = 0
	p.Legend.Top = true
	for i, rr := range r.Runs {
		xys := make(plotter.XYs, len(rr.Load.Timeline))
		for j, pt := range rr.Load.Timeline {
			xys[j] = plotter.XY{X: pt.Seconds, Y: pt.SamplesPerSecond}
		}
		if len(xys) == 0 {
			continue
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("throughput line: %w", err)
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("run %d", i+1), line)
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

func (r Report) queryPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Dashboard query latency (median over runs): " + r.Name
	p.Y.Label.Text = "seconds (log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	// Lines with points rather than bars: bars start at zero, which a log
	// axis cannot show.
	p50 := make(plotter.XYs, 0, len(r.Summary.QueryLatency))
	p99 := make(plotter.XYs, 0, len(r.Summary.QueryLatency))
	names := make([]string, 0, len(r.Summary.QueryLatency))
	lo := math.Inf(1)
	for i, q := range r.Summary.QueryLatency {
		// A microsecond floor keeps a zero (unmeasured) value on the axis.
		a, b := max(q.P50Seconds.Median, 1e-6), max(q.P99Seconds.Median, 1e-6)
		p50 = append(p50, plotter.XY{X: float64(i), Y: a})
		p99 = append(p99, plotter.XY{X: float64(i), Y: b})
		lo = math.Min(lo, math.Min(a, b))
		names = append(names, q.Range)
	}
	for i, xys := range []plotter.XYs{p50, p99} {
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("latency line: %w", err)
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add([]string{"p50", "p99"}[i], line, points)
	}
	p.NominalX(names...)
	p.X.Label.Text = "dashboard range"
	p.Y.Min = lo / 2
	return p, nil
}
