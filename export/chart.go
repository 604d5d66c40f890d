package export

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteChart draws the capacity table (after Run) as a PNG of two panels
// sharing the time axis: SM activity (peak and p95) and KV-cache peak per
// GPU model and served model; and peak requests per second with its linear
// trend, dashed where it is the forecast. The trend's legend says it is a
// least-squares extrapolation. The layout follows bench's charts (8 in
// wide, plotutil's palette).
func (c *CapacityJob) WriteChart(w io.Writer) error {
	if len(c.rows) == 0 {
		return fmt.Errorf("%w: the capacity chart needs the table: run it first", ErrBadRequest)
	}
	util, demand := plot.New(), plot.New()
	util.Title.Text = "GPU utilisation per GPU model / served model"
	util.Y.Label.Text = "ratio"
	util.Y.Min, util.Y.Max = 0, 1.05
	demand.Title.Text = fmt.Sprintf("Peak demand, with a linear trend extended as far as its history, at most %d days (least squares: an extrapolation, not a prediction)", c.cfg.ForecastDays)
	demand.Title.TextStyle.Font.Size = vg.Points(10)
	demand.Y.Label.Text = "requests/s (busiest window)"
	demand.Y.Min = 0
	for _, p := range []*plot.Plot{util, demand} {
		p.X.Tick.Marker = plot.TimeTicks{Format: "2006-01-02", Time: func(t float64) time.Time { return time.Unix(int64(t), 0).In(c.loc) }}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(8)
	}
	type series struct {
		smPeak, smP95, kv, peak, trend, forecast plotter.XYs
	}
	byGroup := map[string]*series{}
	var order []string
	for _, r := range c.rows {
		g := r[0].S + " / " + r[1].S
		s := byGroup[g]
		if s == nil {
			s = &series{}
			byGroup[g] = s
			order = append(order, g)
		}
		x := float64(r[2].I) / 1000
		add := func(xy *plotter.XYs, v Cell) {
			if !v.Null && !math.IsNaN(v.F) {
				*xy = append(*xy, plotter.XY{X: x, Y: v.F})
			}
		}
		if r[5].S == "forecast" {
			add(&s.forecast, r[19])
			continue
		}
		add(&s.smPeak, r[8])
		add(&s.smP95, r[9])
		add(&s.kv, r[15])
		add(&s.peak, r[12])
		add(&s.trend, r[19])
	}
	for i, g := range order {
		s := byGroup[g]
		name := strings.Trim(g, " /")
		if name == "" {
			name = "(unlabelled)"
		}
		col := plotutil.Color(i)
		lines := []struct {
			xy    plotter.XYs
			p     *plot.Plot
			label string
			dash  []vg.Length
			width vg.Length
		}{
			{s.smPeak, util, name + ": SM peak", nil, 1.5},
			{s.smP95, util, name + ": SM p95", []vg.Length{vg.Points(4), vg.Points(2)}, 1},
			{s.kv, util, name + ": KV-cache peak", []vg.Length{vg.Points(1), vg.Points(2)}, 1},
			{s.peak, demand, name + ": peak requests/s", nil, 1.5},
			{s.trend, demand, name + ": linear trend", []vg.Length{vg.Points(2), vg.Points(2)}, 1},
			{s.forecast, demand, name + ": trend, forecast", []vg.Length{vg.Points(6), vg.Points(3)}, 1},
		}
		for _, l := range lines {
			if len(l.xy) == 0 {
				continue
			}
			line, err := plotter.NewLine(l.xy)
			if err != nil {
				return fmt.Errorf("capacity chart: %w", err)
			}
			line.Color, line.Dashes, line.Width = col, l.dash, vg.Points(float64(l.width))
			l.p.Add(line)
			l.p.Legend.Add(l.label, line)
		}
	}
	// Both panels share the time axis.
	lo, hi := math.Min(util.X.Min, demand.X.Min), math.Max(util.X.Max, demand.X.Max)
	util.X.Min, util.X.Max, demand.X.Min, demand.X.Max = lo, hi, lo, hi
	const width, height = 10 * vg.Inch, 8 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4), PadY: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{util}, {demand}}, tiles, dc)
	util.Draw(canvases[0][0])
	demand.Draw(canvases[1][0])
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(w); err != nil {
		return fmt.Errorf("write capacity chart: %w", err)
	}
	return nil
}
