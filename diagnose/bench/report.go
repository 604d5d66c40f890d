package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/internal/chart"
)

// Report file names written by WriteFiles.
const (
	JSONReportFile     = "report.json"
	MarkdownReportFile = "report.md"
)

// WriteFiles writes report.json, report.md and, per split, the confusion
// matrix and the time-to-detect distribution as PNG into dir (created if
// missing), and returns the paths written.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create report dir: %w", err)
	}
	jp := filepath.Join(dir, JSONReportFile)
	if err := atomicfile.Write(jp, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}); err != nil {
		return nil, err
	}
	mp := filepath.Join(dir, MarkdownReportFile)
	if err := atomicfile.Write(mp, r.WriteMarkdown); err != nil {
		return nil, err
	}
	paths := []string{jp, mp}
	for _, s := range r.Splits {
		cp := filepath.Join(dir, s.Name+"_confusion.png")
		if err := chart.SavePNGSize(confusionPlot(s), cp, 8*vg.Inch, 6*vg.Inch); err != nil {
			return nil, err
		}
		tp := filepath.Join(dir, s.Name+"_ttd.png")
		p, err := ttdPlot(s)
		if err != nil {
			return nil, err
		}
		if err := chart.SavePNG(p, tp); err != nil {
			return nil, err
		}
		paths = append(paths, cp, tp)
	}
	return paths, nil
}

func pct(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }

// WriteMarkdown writes the human-readable report.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	form := "full"
	if r.Short {
		form = "short (CI)"
	}
	fmt.Fprintf(&b, "# Diagnosis benchmark (%s form)\n\n", form)
	fmt.Fprintf(&b, "Started %s on %s/%s, %d CPUs: %.0f s wall, %.0f s CPU. Rules: %s.\n\n",
		r.Started.Format("2006-01-02 15:04 UTC"), r.Host.GOOS, r.Host.GOARCH, r.Host.CPUs, r.Wall, r.CPU, r.Thresholds)
	if r.MaxHistory != "" {
		fmt.Fprintf(&b, "**Quick run: every history shortened to at most %s** (`--max-history`); the false diagnoses per fault-free day cover that history only.\n\n", r.MaxHistory)
	}
	b.WriteString("| split | faults | detected | cause top-1 | cause top-3 | entity top-1 | entity top-3 | unknown | TTD mean | TTD p95 | within 3 min | false / fault-free day | decoy-caused | other false | ECE | nearest case right |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Splits {
		c := s.Scores
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %.0f s | %.0f s | %s | %.2f (%d in %.1f d) | %d of %d decoys | %d | %.3f | %s |\n",
			s.Name, c.Faults, pct(c.DetectionRate), pct(c.CauseAcc1), pct(c.CauseAcc3), pct(c.EntityAcc1), pct(c.EntityAcc3),
			pct(c.UnknownRate), c.TTDMean, c.TTDP95, pct(c.TTDWithin3m), c.FalsePerDay, c.FalseHistory, c.HistoryDays,
			c.FalseDecoy, c.Decoys, c.FalseIncident, c.ECE, pct(c.NearestAcc))
	}
	for _, s := range r.Splits {
		if c := s.Scores; c.StaticFalseHistory >= 0 {
			fmt.Fprintf(&b, "\nStatic thresholds in place of the baselines, split %s: %.2f false diagnoses per fault-free day (%d in %.1f d), against %.2f with baselines.\n",
				s.Name, c.StaticFalsePerDay, c.StaticFalseHistory, c.HistoryDays, c.FalsePerDay)
		}
	}
	if f := r.Feedback; f != nil {
		fmt.Fprintf(&b, "\nFeedback: the tuning split's archive (%d cases, verdicts from the ground truth) reranks the held-out split's diagnoses: cause top-1 %s before, %s after (%d of %d faults changed).\n",
			f.TuningCases, pct(f.Before), pct(f.After), f.Changed, f.Faults)
	}
	for _, s := range r.Splits {
		fmt.Fprintf(&b, "\n## Split %s\n\n%s\n\n", s.Name, strings.TrimSpace(s.Purpose))
		b.WriteString("| scenario | GPUs | history days | incident hours | incidents | decoys | samples | diagnoses | sim s | write s | generate s | replay s | score s | CPU s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, sc := range s.Scenarios {
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %d | %d | %d | %d | %.0f | %.0f | %.0f | %.0f | %.1f | %.0f |\n",
				sc.Name, sc.GPUs, sc.Days, sc.PeriodH, sc.Incidents, sc.Decoys, sc.Samples, sc.Diagnoses,
				sc.SimSeconds, sc.WriteSeconds, sc.GenerateSeconds, sc.ReplaySeconds, sc.ScoreSeconds, sc.CPUSeconds)
		}
		b.WriteString("\n| by | faults | detected | cause top-1 | cause top-3 | entity top-1 | TTD mean | within 3 min |\n|---|---|---|---|---|---|---|---|\n")
		row := func(name string, c Scores) {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %.0f s | %s |\n", name, c.Faults, pct(c.DetectionRate), pct(c.CauseAcc1), pct(c.CauseAcc3), pct(c.EntityAcc1), c.TTDMean, pct(c.TTDWithin3m))
		}
		for _, k := range sortedKeys(s.PerKind) {
			row(k, s.PerKind[k])
		}
		for _, k := range sortedKeys(s.PerVariant) {
			row("variant "+k, s.PerVariant[k])
		}
		if s.Concurrent.Faults > 0 {
			row("two faults at once", s.Concurrent)
		}
		b.WriteString("\nReliability of the confidence (every diagnosis; correct = attributed to a fault of its cause):\n\n| confidence | diagnoses | stated | observed |\n|---|---|---|---|\n")
		for _, k := range s.Reliability {
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f |\n", k.Range, k.N, k.Stated, k.Observed)
		}
		fmt.Fprintf(&b, "\nExpected calibration error %.3f.\n", s.Scores.ECE)
		if c := s.Calibration; c != nil {
			fmt.Fprintf(&b, "\nThe map these %d diagnoses call for (isotonic regression of right against stated, knots of at least %d diagnoses): stated -> observed `%s`; from the engine's raw score, the table to ship (`calibration` in diagnose/assemble.go) when fitted on the tuning split: `%s`.\n",
				c.Diagnoses, minCalibrationBlock, goLiteral(c.Stated), goLiteral(c.Raw))
		}
		var wrong []FaultOutcome
		for _, o := range s.Faults {
			if !o.CauseTop1 {
				wrong = append(wrong, o)
			}
		}
		if len(wrong) > 0 {
			b.WriteString("\nFaults not named top-1:\n\n| scenario | kind | variant | target | start | answer | candidates | entity |\n|---|---|---|---|---|---|---|---|\n")
			for _, o := range wrong {
				ans := "missed"
				if o.Detected {
					ans = o.Cause
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", o.Scenario, o.Kind, o.Variant, o.Target, o.Start.Format("Mon 15:04"), ans, strings.Join(firstN(o.Candidates, 3), ", "), o.Entity)
			}
		}
		if len(s.False) > 0 {
			b.WriteString("\nFalse diagnoses:\n\n| scenario | where | cause | entity | start | confidence | decoy |\n|---|---|---|---|---|---|---|\n")
			for _, f := range s.False {
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.2f | %s |\n", f.Scenario, f.Where, f.Cause, f.Entity, f.Start.Format("Mon 01-02 15:04"), f.Confidence, f.Decoy)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// confusionPlot is a heat map of the confusion matrix: true kinds as rows,
// diagnosed causes (and unknown, missed) as columns, cell shade and count.
func confusionPlot(s SplitReport) *plot.Plot {
	c := s.Confusion
	p := plot.New()
	p.Title.Text = "Confusion matrix (primary answer): split " + s.Name
	p.X.Label.Text = "diagnosed cause"
	p.Y.Label.Text = "injected fault"
	maxN := 1
	for _, row := range c.Counts {
		for _, n := range row {
			maxN = max(maxN, n)
		}
	}
	nr, nc := len(c.Kinds), len(c.Causes)
	for i, row := range c.Counts {
		for j, n := range row {
			y := float64(nr - 1 - i)
			shade := uint8(255 - int(200*float64(n)/float64(maxN)))
			col := color.RGBA{R: shade, G: shade, B: 255, A: 255}
			if i == j && n > 0 {
				col = color.RGBA{R: shade, G: 255, B: shade, A: 255}
			}
			poly, err := plotter.NewPolygon(plotter.XYs{{X: float64(j) - 0.5, Y: y - 0.5}, {X: float64(j) + 0.5, Y: y - 0.5}, {X: float64(j) + 0.5, Y: y + 0.5}, {X: float64(j) - 0.5, Y: y + 0.5}})
			if err != nil {
				continue
			}
			poly.Color = col
			poly.LineStyle.Color = color.Gray{Y: 200}
			p.Add(poly)
			if n > 0 {
				l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(j), Y: y}}, Labels: []string{strconv.Itoa(n)}})
				if err == nil {
					l.Offset.X = -vg.Points(3)
					l.Offset.Y = -vg.Points(4)
					p.Add(l)
				}
			}
		}
	}
	p.X.Min, p.X.Max = -0.5, float64(nc)-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(nr)-0.5
	xt := make([]plot.Tick, nc)
	for j, name := range c.Causes {
		xt[j] = plot.Tick{Value: float64(j), Label: abbrev(name)}
	}
	yt := make([]plot.Tick, nr)
	for i, name := range c.Kinds {
		yt[i] = plot.Tick{Value: float64(nr - 1 - i), Label: abbrev(name)}
	}
	p.X.Tick.Marker = plot.ConstantTicks(xt)
	p.Y.Tick.Marker = plot.ConstantTicks(yt)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = -1
	return p
}

// abbrev shortens a cause for an axis label.
func abbrev(s string) string {
	r := strings.NewReplacer("kv_cache_eviction_storm", "kv storm", "request_queue_backlog", "backlog", "under_batched_gpu", "under-batched",
		"draft_model_drift", "draft drift", "thermal_throttle", "thermal", "xid_gpu_lost", "xid lost", "prefix_cache_collapse", "prefix collapse",
		"network_delay", "network", "power_cap", "power cap")
	return r.Replace(s)
}

// ttdPlot is the distribution of the time to detect (first firing minute
// minus onset) over the detected faults, in minutes.
func ttdPlot(s SplitReport) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Time to detect: split " + s.Name
	p.X.Label.Text = "minutes after the onset"
	p.Y.Label.Text = "faults"
	var vs plotter.Values
	for _, o := range s.Faults {
		if o.Detected {
			vs = append(vs, o.TTDSeconds/60)
		}
	}
	if len(vs) == 0 {
		return p, nil
	}
	lo, hi := math.Floor(slices.Min(vs)), math.Ceil(slices.Max(vs))
	bins := max(1, int(hi-lo))
	h, err := plotter.NewHist(vs, bins)
	if err != nil {
		return nil, fmt.Errorf("time-to-detect histogram: %w", err)
	}
	p.Add(h)
	line, err := plotter.NewLine(plotter.XYs{{X: DetectionDeadline.Minutes(), Y: 0}, {X: DetectionDeadline.Minutes(), Y: float64(len(vs))}})
	if err == nil {
		line.Color = color.RGBA{R: 200, A: 255}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add("3-minute target", line)
	}
	return p, nil
}
