package tiers_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/tiers"
)

const (
	minMs  = int64(60_000)
	hourMs = 60 * minMs
	dayMs  = 24 * hourMs
)

// sample is a chunks.Sample for storage.NewListSeries.
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Copy() chunks.Sample           { return s }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }

type testSeries struct {
	lbls    labels.Labels
	samples []sample // ascending; stale markers have f = StaleNaN
}

var staleNaN = math.Float64frombits(value.StaleNaN)

// workload is the deterministic multi-day test data set: 15 s sampling over
// three days of GPU gauges (one with gaps ended by stale markers), vLLM-like
// counters with resets inside windows, exactly at minute, hour and tier
// boundaries and two in one minute, and a classic histogram with a reset.
type workload struct {
	start, end int64
	series     []testSeries
}

func newWorkload(start int64, days int) *workload {
	w := &workload{start: start, end: start + int64(days)*dayMs}
	const step = 15_000
	rng := rand.New(rand.NewPCG(1, 2))
	// Gauges.
	for g := range 4 {
		ts := testSeries{lbls: labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_TEMP", "gpu", fmt.Sprint(g), "UUID", fmt.Sprintf("GPU-%04d", g), "instance", "node-1:9400", "job", "dcgm")}
		off := int64(g) * 3750
		gaps := [][2]int64{}
		if g == 3 {
			gaps = [][2]int64{{start + 10*hourMs, start + 11*hourMs + 30*minMs}, {start + 40*hourMs, start + 42*hourMs}}
		}
		phase := float64(g)
	next:
		for t := start + off; t < w.end; t += step {
			for _, gp := range gaps {
				if t >= gp[0] && t < gp[1] {
					if t-gp[0] < step { // the first scrape that finds the series gone
						ts.samples = append(ts.samples, sample{t, staleNaN})
					}
					continue next
				}
			}
			v := 60 + 20*math.Sin(2*math.Pi*float64(t-start)/float64(dayMs)+phase) + 0.3*rng.Float64()
			ts.samples = append(ts.samples, sample{t, v})
		}
		w.series = append(w.series, ts)
	}
	// Counters with resets.
	resets := map[int][]int64{
		0: {start + 12*hourMs + 20*minMs + 26_250, start + 45*hourMs + 10*minMs + 33_750, start + 46*hourMs + 5*minMs + 18_750, start + 46*hourMs + 5*minMs + 48_750, start + 65*hourMs + 3*minMs + 3750},
		1: {start + 14*hourMs + 7*minMs, start + 44*hourMs + 33*minMs, start + 66*hourMs + 1*minMs},
		2: {start + 20*hourMs, start + 50*hourMs},
		3: {start + 30*hourMs, start + 60*hourMs + minMs},
	}
	for c := range 4 {
		ts := testSeries{lbls: labels.FromStrings("__name__", "vllm:request_success_total", "model_name", "llama", "instance", fmt.Sprintf("node-%d:8000", c), "job", "vllm")}
		off := int64(0)
		if c == 0 {
			off = 3750
		}
		v := float64(rng.IntN(1000))
		for t := start + off; t < w.end; t += step {
			if slices.Contains(resets[c], t) {
				v = float64(rng.IntN(3))
			} else {
				v += float64(rng.IntN(20))
			}
			ts.samples = append(ts.samples, sample{t, v})
		}
		w.series = append(w.series, ts)
	}
	// A classic histogram: cumulative buckets, _sum and _count, one reset.
	les := []string{"0.1", "0.5", "1", "2.5", "5", "+Inf"}
	bounds := []float64{0.1, 0.5, 1, 2.5, 5, math.Inf(1)}
	hs := make([]testSeries, len(les)+2)
	base := []string{"model_name", "llama", "instance", "node-0:8000", "job", "vllm"}
	for i, le := range les {
		hs[i].lbls = labels.FromStrings(append([]string{"__name__", "vllm:e2e_request_latency_seconds_bucket", "le", le}, base...)...)
	}
	hs[len(les)].lbls = labels.FromStrings(append([]string{"__name__", "vllm:e2e_request_latency_seconds_sum"}, base...)...)
	hs[len(les)+1].lbls = labels.FromStrings(append([]string{"__name__", "vllm:e2e_request_latency_seconds_count"}, base...)...)
	counts := make([]float64, len(les))
	var sum, count float64
	for t := start + 7500; t < w.end; t += step {
		if t == start+47*hourMs+30*minMs+7500 {
			clear(counts)
			sum, count = 0, 0
		}
		for range rng.IntN(8) {
			// Latency drifts with the time of day, so quantiles move.
			lat := rng.ExpFloat64() * (0.6 + 0.4*math.Sin(2*math.Pi*float64(t-start)/float64(dayMs)))
			for i, b := range bounds {
				if lat <= b {
					counts[i]++
				}
			}
			sum += lat
			count++
		}
		for i := range les {
			hs[i].samples = append(hs[i].samples, sample{t, counts[i]})
		}
		hs[len(les)].samples = append(hs[len(les)].samples, sample{t, sum})
		hs[len(les)+1].samples = append(hs[len(les)+1].samples, sample{t, count})
	}
	w.series = append(w.series, hs...)
	return w
}

// appendTo writes the samples with mint <= t into a raw tier, in time order
// across series (the TSDB rejects samples older than its head's out-of-order window).
func (w *workload) appendTo(t testing.TB, raw *tiers.Raw, mint int64) {
	t.Helper()
	type ref struct {
		s int
		sample
	}
	var all []ref
	for i, s := range w.series {
		for _, smp := range s.samples {
			if smp.t >= mint {
				all = append(all, ref{i, smp})
			}
		}
	}
	slices.SortStableFunc(all, func(a, b ref) int { return int(a.t - b.t) })
	for len(all) > 0 {
		n := min(len(all), 20_000)
		app := raw.Appender(context.Background())
		for _, r := range all[:n] {
			if _, err := app.Append(0, w.series[r.s].lbls, r.t, r.f); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		all = all[n:]
	}
}

// windows computes a series' minute windows over the whole workload with the
// downsample package's production algorithm.
func (s testSeries) minuteWindows(t testing.TB, mint, maxt int64) []tiers.Window {
	t.Helper()
	cs := make([]chunks.Sample, len(s.samples))
	for i, smp := range s.samples {
		cs[i] = smp
	}
	ws, _, err := downsample.AppendWindows(nil, storage.NewListSeries(s.lbls, cs).Iterator(nil), downsample.MinuteRes, mint, maxt, catalogueKind(t, s.lbls))
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// writeRollups writes minute partitions for the hours in [minuteFrom, end)
// and hour partitions for every day of the workload.
func (w *workload) writeRollups(t testing.TB, minute, hour *tiers.Rollup, minuteFrom int64) {
	t.Helper()
	minutePart := map[int64][]tiers.SeriesWindows{}
	hourPart := map[int64][]tiers.SeriesWindows{}
	for _, s := range w.series {
		mws := s.minuteWindows(t, w.start, w.end)
		hws := downsample.Coarsen(nil, mws, downsample.HourRes, catalogueKind(t, s.lbls))
		for _, win := range mws {
			p := win.Start - win.Start%hourMs
			if p < minuteFrom {
				continue
			}
			ps := minutePart[p]
			if len(ps) == 0 || !labels.Equal(ps[len(ps)-1].Labels, s.lbls) {
				ps = append(ps, tiers.SeriesWindows{Labels: s.lbls})
			}
			ps[len(ps)-1].Windows = append(ps[len(ps)-1].Windows, win)
			minutePart[p] = ps
		}
		for _, win := range hws {
			p := win.Start - win.Start%dayMs
			ps := hourPart[p]
			if len(ps) == 0 || !labels.Equal(ps[len(ps)-1].Labels, s.lbls) {
				ps = append(ps, tiers.SeriesWindows{Labels: s.lbls})
			}
			ps[len(ps)-1].Windows = append(ps[len(ps)-1].Windows, win)
			hourPart[p] = ps
		}
	}
	for p, sws := range minutePart {
		if err := minute.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
	for p, sws := range hourPart {
		if err := hour.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
}

type stitchFixture struct {
	w                 *workload
	ref               *tiers.Raw // every sample, the ground truth
	raw               *tiers.Raw // the stitched view's raw tier
	stitched          *tiers.Stitched
	minute, hour      *tiers.Rollup
	minuteCut, rawMin int64
	engine            *promql.Engine
}

// newStitchFixture: hour tier serves [.., T0+30h), minute [T0+30h, T0+60h+1m)
// and raw the rest (its oldest sample is at T0+60h+30s, so raw starts at the
// next whole minute). Its directories and tiers are t's.
func newStitchFixture(t testing.TB) *stitchFixture {
	t.Helper()
	return buildStitchFixture(t, t.TempDir, t.Cleanup)
}

// sharedStitch is the stitch fixture the tests share: building it (three
// days of samples into two raw tiers, 42 minute and 3 hour partitions) took
// 16 s of each test's 17-26 s under the race detector, and the tests only
// read it. TestMain closes it and removes its directory.
var sharedStitch struct {
	once     sync.Once
	f        *stitchFixture
	dir      string
	cleanups []func()
}

// sharedStitchFixture returns the stitch fixture built once for the test
// binary. Callers must not write to its tiers.
func sharedStitchFixture(t testing.TB) *stitchFixture {
	t.Helper()
	sharedStitch.once.Do(func() {
		root, err := os.MkdirTemp("", "tiers-stitch-fixture")
		if err != nil {
			t.Fatal(err)
		}
		sharedStitch.dir = root
		n := 0
		tempDir := func() string {
			n++
			d := filepath.Join(root, strconv.Itoa(n))
			if err := os.Mkdir(d, 0o750); err != nil {
				t.Fatal(err)
			}
			return d
		}
		cleanup := func(f func()) { sharedStitch.cleanups = append(sharedStitch.cleanups, f) }
		sharedStitch.f = buildStitchFixture(t, tempDir, cleanup)
	})
	if sharedStitch.f == nil {
		t.Fatal("the shared stitch fixture failed to build (see the first test that used it)")
	}
	return sharedStitch.f
}

// closeSharedStitch closes the shared fixture's tiers, last opened first,
// and removes its directory.
func closeSharedStitch() {
	for i := len(sharedStitch.cleanups) - 1; i >= 0; i-- {
		sharedStitch.cleanups[i]()
	}
	if sharedStitch.dir != "" {
		_ = os.RemoveAll(sharedStitch.dir)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	closeSharedStitch()
	os.Exit(code)
}

// buildStitchFixture builds the fixture in directories from tempDir,
// registering the tiers' Close with cleanup.
func buildStitchFixture(t testing.TB, tempDir func() string, cleanup func(func())) *stitchFixture {
	t.Helper()
	w := newWorkload(testT0, 3)
	f := &stitchFixture{w: w, minuteCut: testT0 + 30*hourMs, rawMin: testT0 + 60*hourMs + minMs}
	openRaw := func(dir string) *tiers.Raw {
		cfg := tiers.DefaultRawConfig(dir)
		cfg.Retention = 30 * 24 * time.Hour
		r, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		cleanup(func() { _ = r.Close() })
		return r
	}
	openRollup := func(cfg tiers.RollupConfig) *tiers.Rollup {
		r, err := tiers.OpenRollup(cfg, quietLogger(), prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		cleanup(func() { _ = r.Close() })
		return r
	}
	f.ref = openRaw(tempDir())
	w.appendTo(t, f.ref, math.MinInt64)
	raw := openRaw(tempDir())
	w.appendTo(t, raw, testT0+60*hourMs+30_000)
	f.minute = openRollup(tiers.DefaultMinuteConfig(tempDir()))
	f.hour = openRollup(tiers.DefaultHourConfig(tempDir()))
	w.writeRollups(t, f.minute, f.hour, f.minuteCut)
	f.stitched = tiers.NewStitched(raw, f.minute, f.hour)
	f.raw = raw
	f.engine = newTestEngine()
	return f
}

// newTestEngine is a PromQL engine with Prometheus' default options.
func newTestEngine() *promql.Engine {
	return promql.NewEngine(promql.EngineOpts{
		Logger: quietLogger(), MaxSamples: 50_000_000, Timeout: time.Minute,
		LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true,
	})
}

func (f *stitchFixture) rangeQuery(t testing.TB, q storage.Queryable, qs string, start, end int64, step time.Duration) (promql.Matrix, []string) {
	t.Helper()
	qry, err := f.engine.NewRangeQuery(context.Background(), q, nil, qs, time.UnixMilli(start), time.UnixMilli(end), step)
	if err != nil {
		t.Fatal(err)
	}
	defer qry.Close()
	res := qry.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", qs, res.Err)
	}
	m, err := res.Matrix()
	if err != nil {
		t.Fatal(err)
	}
	_, infos := res.Warnings.AsStrings(qs, 0, 0)
	// The engine returns the result's memory to its pools on Close: copy it.
	out := make(promql.Matrix, len(m))
	for i, s := range m {
		out[i] = promql.Series{Metric: s.Metric, Floats: slices.Clone(s.Floats), Histograms: slices.Clone(s.Histograms)}
	}
	return out, infos
}

type tolerance struct {
	rel, abs float64
}

func (tol tolerance) ok(got, want float64) bool {
	if math.IsNaN(got) || math.IsNaN(want) {
		return math.IsNaN(got) && math.IsNaN(want)
	}
	d := math.Abs(got - want)
	return d <= tol.abs || d <= tol.rel*math.Abs(want)
}

// compare checks that got and want hold the same series at the same steps
// with values within tol, and returns the largest relative error seen.
func compare(t *testing.T, got, want promql.Matrix, tol tolerance) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d series, want %d:\n got %v\nwant %v", len(got), len(want), seriesNames(got), seriesNames(want))
	}
	worst := 0.0
	byLabels := map[string]promql.Series{}
	for _, s := range want {
		byLabels[s.Metric.String()] = s
	}
	for _, g := range got {
		w, ok := byLabels[g.Metric.String()]
		if !ok {
			t.Fatalf("unexpected series %s", g.Metric)
		}
		if len(g.Floats) != len(w.Floats) {
			t.Fatalf("%s: %d points, want %d", g.Metric, len(g.Floats), len(w.Floats))
		}
		for i := range g.Floats {
			gp, wp := g.Floats[i], w.Floats[i]
			if gp.T != wp.T {
				t.Fatalf("%s: point %d at %d, want %d", g.Metric, i, gp.T, wp.T)
			}
			if !tol.ok(gp.F, wp.F) {
				t.Errorf("%s at %s: got %g want %g (tolerance %+v)", g.Metric, time.UnixMilli(gp.T).UTC().Format(time.RFC3339), gp.F, wp.F, tol)
			}
			if wp.F != 0 {
				worst = max(worst, math.Abs(gp.F-wp.F)/math.Abs(wp.F))
			}
		}
	}
	return worst
}

func seriesNames(m promql.Matrix) []string {
	var out []string
	for _, s := range m {
		out = append(out, s.Metric.String())
	}
	return out
}

// TestStitchedMatchesRaw runs the same PromQL over the stitched tiers and over
// a raw TSDB holding every sample, in each tier's region, and checks the
// agreement stated in docs/format/minute.md ("Querying").
func TestStitchedMatchesRaw(t *testing.T) {
	f := sharedStitchFixture(t)
	regions := []struct {
		name       string
		start, end int64
		step       time.Duration
		tier       string
	}{
		{"hour", testT0 + 8*hourMs, testT0 + 29*hourMs, time.Hour, "hour"},
		{"minute", testT0 + 32*hourMs, testT0 + 59*hourMs, 10 * time.Minute, "minute"},
		{"raw", testT0 + 63*hourMs, testT0 + 71*hourMs, time.Minute, "raw"},
	}
	type check struct {
		name     string
		stitched string
		raw      string // defaults to stitched
		tol      map[string]tolerance
	}
	exact := tolerance{rel: 1e-9, abs: 1e-9}
	same := map[string]tolerance{"hour": exact, "minute": exact, "raw": exact}
	checks := []check{
		// Windows cover [t-1h, t) where PromQL's range is (t-1h, t]. A
		// sample exactly on the boundary t (GPU 0 is scraped on the
		// minute) is emitted at its own time too, so the range ending
		// there sees it; the one at t-1h is inside the first window's
		// min and max: the answer is raw's over the closed range
		// [t-1h, t], which [1h1ms] selects. sum_over_time emits the
		// boundary sample apart and equals raw exactly.
		{name: "min_over_time", stitched: `min_over_time(DCGM_FI_DEV_GPU_TEMP[1h])`, raw: `min_over_time(DCGM_FI_DEV_GPU_TEMP[1h1ms])`, tol: same},
		{name: "max_over_time", stitched: `max_over_time(DCGM_FI_DEV_GPU_TEMP[1h])`, raw: `max_over_time(DCGM_FI_DEV_GPU_TEMP[1h1ms])`, tol: same},
		{name: "sum_over_time", stitched: `sum_over_time(DCGM_FI_DEV_GPU_TEMP[1h])`, tol: same},
		// count_over_time: the expanded samples start at the real first
		// sample, so the left-open range drops it exactly as raw does.
		{name: "count_over_time", stitched: `count_over_time(DCGM_FI_DEV_GPU_TEMP[1h])`, tol: same},
		// avg over windows is exact while every window in the range has the
		// same sample count; next to a gap it is an average of averages.
		{name: "avg_over_time", stitched: `avg_over_time(DCGM_FI_DEV_GPU_TEMP[1h])`, raw: `avg_over_time(DCGM_FI_DEV_GPU_TEMP[1h] offset 1ms)`,
			tol: map[string]tolerance{"hour": exact, "minute": {rel: 1e-3}, "raw": exact}},
		// resets: internal resets become synthetic drops, boundary resets are
		// real steps: exact.
		{name: "resets", stitched: `resets(vllm:request_success_total[1h])`, tol: same},
		{name: "resets 2h", stitched: `resets(vllm:request_success_total[2h])`, tol: same},
		// rate/increase: the window edges inside the range are lost; the
		// engine's extrapolation covers most of it.
		{name: "rate 2h", stitched: `rate(vllm:request_success_total[2h])`,
			tol: map[string]tolerance{"hour": {rel: 0.06}, "minute": {rel: 0.02}, "raw": exact}},
		{name: "increase 1h", stitched: `increase(vllm:request_success_total[1h])`,
			tol: map[string]tolerance{"minute": {rel: 0.03}, "raw": exact}},
		{name: "sum by job of rate", stitched: `sum by (job) (rate(vllm:request_success_total[2h]))`,
			tol: map[string]tolerance{"hour": {rel: 0.06}, "minute": {rel: 0.02}, "raw": exact}},
		{name: "histogram_quantile", stitched: `histogram_quantile(0.99, rate(vllm:e2e_request_latency_seconds_bucket[2h]))`,
			tol: map[string]tolerance{"hour": {rel: 0.08}, "minute": {rel: 0.03}, "raw": exact}},
	}
	for _, rg := range regions {
		for _, c := range checks {
			tol, ok := c.tol[rg.name]
			if !ok {
				continue
			}
			t.Run(rg.name+"/"+c.name, func(t *testing.T) {
				rawQ := c.raw
				if rawQ == "" || rg.name == "raw" {
					rawQ = c.stitched
				}
				got, infos := f.rangeQuery(t, f.stitched, c.stitched, rg.start, rg.end, rg.step)
				want, _ := f.rangeQuery(t, f.ref, rawQ, rg.start, rg.end, rg.step)
				worst := compare(t, got, want, tol)
				t.Logf("worst relative error %.4g", worst)
				named := slices.ContainsFunc(infos, func(s string) bool { return strings.Contains(s, "served by tiers") })
				switch {
				case rg.tier == "raw" && named:
					// Raw data alone is what Prometheus answers, without a note.
					t.Errorf("infos %q name tiers for a range the raw tier alone served", infos)
				case rg.tier != "raw" && !slices.ContainsFunc(infos, func(s string) bool { return strings.Contains(s, "served by tiers "+rg.tier) }):
					t.Errorf("infos %q do not name tier %s", infos, rg.tier)
				}
			})
		}
	}
}

// TestStitchedGaugeResets: resets() of a gauge is a misuse (a counter
// function), and a catalogue gauge's windows record no resets, so it is not
// compared with raw in TestStitchedMatchesRaw. What it must still do: see the
// drops between windows and at most one drop (a net one) inside a window, so
// never more resets than raw, whatever interpolation the reader adds for a
// short range.
func TestStitchedGaugeResets(t *testing.T) {
	f := sharedStitchFixture(t)
	start, end := testT0+32*hourMs, testT0+59*hourMs
	for _, rng := range []string{"2m", "5m"} {
		t.Run(rng, func(t *testing.T) {
			got, _ := f.rangeQuery(t, f.stitched, `resets(DCGM_FI_DEV_GPU_TEMP[`+rng+`])`, start, end, time.Minute)
			// The same range over raw, not offset: the synthetic samples lie
			// at or between real sample times, so both ranges hold the same
			// real drops.
			want, _ := f.rangeQuery(t, f.ref, `resets(DCGM_FI_DEV_GPU_TEMP[`+rng+`])`, start, end, time.Minute)
			byLabels := map[string]promql.Series{}
			for _, s := range want {
				byLabels[s.Metric.String()] = s
			}
			seen := 0.0
			for _, g := range got {
				w := byLabels[g.Metric.String()]
				rawAt := map[int64]float64{}
				for _, p := range w.Floats {
					rawAt[p.T] = p.F
				}
				for _, p := range g.Floats {
					if r, ok := rawAt[p.T]; !ok || p.F > r {
						t.Fatalf("%s at %s: %g resets over rollups, raw %g", g.Metric, time.UnixMilli(p.T).UTC().Format(time.RFC3339), p.F, r)
					}
					seen += p.F
				}
			}
			if len(got) != 4 || seen == 0 {
				t.Fatalf("%d series, %g resets in all: the drops between and in windows are lost", len(got), seen)
			}
		})
	}
}

// rawValueBounds returns, per series, the min and max raw value in [from, to].
func (f *stitchFixture) rawValueBounds(name string, from, to int64) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, s := range f.w.series {
		if s.lbls.Get("__name__") != name {
			continue
		}
		for _, smp := range s.samples {
			if smp.t < from || smp.t > to || value.IsStaleNaN(smp.f) {
				continue
			}
			k := s.lbls.String()
			b, ok := out[k]
			if !ok {
				b = [2]float64{smp.f, smp.f}
			}
			out[k] = [2]float64{min(b[0], smp.f), max(b[1], smp.f)}
		}
	}
	return out
}

// TestStitchedPlainSelectorsAndSum checks gauges through plain selectors and
// sum() across series: each value is one the series really had within the
// serving tier's resolution plus the lookback, and sum() stays within the
// sum of those bounds (never multiplied by the samples per window).
func TestStitchedPlainSelectorsAndSum(t *testing.T) {
	f := sharedStitchFixture(t)
	const lookback = 5 * minMs
	resAt := func(ts int64) int64 {
		switch {
		case ts < f.minuteCut:
			return hourMs
		case ts < f.rawMin:
			return minMs
		}
		return 0
	}
	start, end := testT0+2*hourMs, testT0+71*hourMs
	got, _ := f.rangeQuery(t, f.stitched, `DCGM_FI_DEV_GPU_TEMP`, start, end, 10*time.Minute)
	if len(got) != 4 {
		t.Fatalf("got %d series, want 4 (one per GPU, stitched across tiers)", len(got))
	}
	for _, s := range got {
		// GPUs 0-2 have no gaps: a value at every step, whichever tier serves it.
		if s.Metric.Get("gpu") != "3" && len(s.Floats) != int((end-start)/(10*minMs))+1 {
			t.Fatalf("%s: %d steps with a value, want %d", s.Metric, len(s.Floats), (end-start)/(10*minMs)+1)
		}
		for _, p := range s.Floats {
			b, ok := f.rawValueBounds("DCGM_FI_DEV_GPU_TEMP", p.T-resAt(p.T)-lookback, p.T)[s.Metric.String()]
			if !ok || p.F < b[0] || p.F > b[1] {
				t.Fatalf("%s at %s = %g, not a value of the last %s (%v)", s.Metric, time.UnixMilli(p.T).UTC(), p.F, time.Duration(resAt(p.T)+lookback)*time.Millisecond, b)
			}
		}
	}
	sums, _ := f.rangeQuery(t, f.stitched, `sum(DCGM_FI_DEV_GPU_TEMP)`, start, end, 10*time.Minute)
	if len(sums) != 1 {
		t.Fatalf("sum: %d series", len(sums))
	}
	for _, p := range sums[0].Floats {
		bounds := f.rawValueBounds("DCGM_FI_DEV_GPU_TEMP", p.T-resAt(p.T)-lookback, p.T)
		lo, hi, biggest := 0.0, 0.0, 0.0
		for _, b := range bounds {
			lo, hi, biggest = lo+b[0], hi+b[1], max(biggest, b[1])
		}
		// A series that went stale within the window (the rollup ends it at
		// its window's last sample, raw a scrape later) contributes to the
		// bounds but not the sum: allow dropping one series.
		if p.F > hi+1e-9 || p.F < lo-biggest-1e-9 {
			t.Fatalf("sum at %s = %g outside [%g, %g]", time.UnixMilli(p.T).UTC(), p.F, lo, hi)
		}
	}
}

// TestStitchedTierBoundaries: a series crossing both tier boundaries comes
// back once, with strictly increasing sample times (no overlap), and a range
// query at a fine step has a value at every step (no gap) where raw has one.
func TestStitchedTierBoundaries(t *testing.T) {
	f := sharedStitchFixture(t)
	q, err := f.stitched.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	for _, fn := range []string{"", "rate", "count_over_time", "max_over_time"} {
		t.Run("samples/"+fn, func(t *testing.T) {
			set := q.Select(context.Background(), true, &storage.SelectHints{Start: testT0, End: testT0 + 72*hourMs, Func: fn, Range: hourMs},
				labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
			n := 0
			var prev labels.Labels
			for set.Next() {
				s := set.At()
				if n > 0 && labels.Compare(prev, s.Labels()) >= 0 {
					t.Fatalf("series out of order or repeated: %s after %s", s.Labels(), prev)
				}
				prev = s.Labels()
				n++
				it := s.Iterator(nil)
				last := int64(math.MinInt64)
				tiersSeen := map[string]bool{}
				for it.Next() != chunkenc.ValNone {
					ts := it.AtT()
					if ts <= last {
						t.Fatalf("%s: sample at %d after %d", s.Labels(), ts, last)
					}
					last = ts
					switch {
					case ts < f.minuteCut:
						tiersSeen["hour"] = true
					case ts < f.rawMin:
						tiersSeen["minute"] = true
					default:
						tiersSeen["raw"] = true
					}
				}
				if err := it.Err(); err != nil {
					t.Fatal(err)
				}
				if len(tiersSeen) != 3 {
					t.Fatalf("%s: samples from tiers %v, want all three", s.Labels(), tiersSeen)
				}
			}
			if err := set.Err(); err != nil {
				t.Fatal(err)
			}
			if n != len(f.w.series) {
				t.Fatalf("got %d series, want %d", n, len(f.w.series))
			}
		})
	}
	boundaries := []struct {
		name       string
		start, end int64
	}{
		{"hour to minute", f.minuteCut - 3*hourMs, f.minuteCut + 3*hourMs},
		{"minute to raw", f.rawMin - 3*hourMs, f.rawMin + 3*hourMs},
	}
	for _, b := range boundaries {
		t.Run("steps/"+b.name, func(t *testing.T) {
			got, _ := f.rangeQuery(t, f.stitched, `vllm:request_success_total`, b.start, b.end, time.Minute)
			want, _ := f.rangeQuery(t, f.ref, `vllm:request_success_total`, b.start, b.end, time.Minute)
			if len(got) != len(want) || len(got) != 4 {
				t.Fatalf("got %d series, want %d", len(got), len(want))
			}
			for i := range got {
				if len(got[i].Floats) != len(want[i].Floats) {
					t.Fatalf("%s: %d steps with a value, raw has %d", got[i].Metric, len(got[i].Floats), len(want[i].Floats))
				}
			}
			// rate over a range spanning the boundary stays continuous.
			gotR, _ := f.rangeQuery(t, f.stitched, `sum(rate(vllm:request_success_total[1h]))`, b.start+hourMs, b.end, 5*time.Minute)
			wantR, _ := f.rangeQuery(t, f.ref, `sum(rate(vllm:request_success_total[1h]))`, b.start+hourMs, b.end, 5*time.Minute)
			tol := tolerance{rel: 0.03}
			if b.name == "hour to minute" {
				tol = tolerance{rel: 0.15} // ranges that start in the hour tier see one point per hour
			}
			worst := compare(t, gotR, wantR, tol)
			t.Logf("worst relative error of sum(rate[1h]) across the boundary: %.4g", worst)
		})
	}
}

// TestStitchedAutoResolution: a coarse step is served from the coarser tier,
// and the reply says so.
func TestStitchedAutoResolution(t *testing.T) {
	f := sharedStitchFixture(t)
	_, infos := f.rangeQuery(t, f.stitched, `DCGM_FI_DEV_GPU_TEMP`, testT0+32*hourMs, testT0+58*hourMs, 10*time.Minute)
	if !slices.ContainsFunc(infos, func(s string) bool { return strings.Contains(s, "served by tiers minute") }) {
		t.Fatalf("fine step: infos %q", infos)
	}
	_, infos = f.rangeQuery(t, f.stitched, `DCGM_FI_DEV_GPU_TEMP`, testT0+32*hourMs, testT0+58*hourMs, 6*time.Hour)
	if !slices.ContainsFunc(infos, func(s string) bool {
		return strings.Contains(s, "served by tiers hour") && !strings.Contains(s, "minute")
	}) {
		t.Fatalf("6h step: infos %q, want the hour tier only", infos)
	}
	// rate's range caps the resolution at range/2: a 1h range never reads hour windows.
	_, infos = f.rangeQuery(t, f.stitched, `rate(vllm:request_success_total[1h])`, testT0+32*hourMs, testT0+58*hourMs, 6*time.Hour)
	if !slices.ContainsFunc(infos, func(s string) bool { return strings.Contains(s, "served by tiers minute") }) {
		t.Fatalf("rate[1h] at 6h step: infos %q, want minute", infos)
	}
	_, infos = f.rangeQuery(t, f.stitched, `quantile_over_time(0.9, DCGM_FI_DEV_GPU_TEMP[1h])`, testT0+32*hourMs, testT0+58*hourMs, time.Hour)
	if !slices.ContainsFunc(infos, func(s string) bool { return strings.Contains(s, "approximate") }) {
		t.Fatalf("quantile_over_time: infos %q, want the approximation note", infos)
	}
}

// TestStitchedSelectAllTime: a select without hints over all of time (as
// remote read may send) reads every tier. The hour segment then starts at
// math.MinInt64, whose window start rounds down past the end of int64: it
// saturates instead of wrapping round to the far future.
func TestStitchedSelectAllTime(t *testing.T) {
	f := sharedStitchFixture(t)
	q, err := f.stitched.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	series, fromHour := 0, 0
	for set.Next() {
		series++
		it := set.At().Iterator(nil)
		for it.Next() != chunkenc.ValNone {
			if it.AtT() < f.minuteCut {
				fromHour++
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if series == 0 || fromHour == 0 {
		t.Fatalf("%d series, %d samples before the minute tier's start: the hour tier was not read", series, fromHour)
	}
}

// TestStitchedRawOnlyRange: over a store whose rollup tiers hold nothing yet
// (a fresh one), a dashboard range that starts before the raw tier's oldest
// sample is the raw tier's answer exactly, with no tier annotation: the
// empty rollup tiers are not planned at all.
func TestStitchedRawOnlyRange(t *testing.T) {
	w := newWorkload(testT0, 1)
	cfg := tiers.DefaultRawConfig(t.TempDir())
	cfg.Retention = 30 * 24 * time.Hour
	raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	w.appendTo(t, raw, testT0+20*hourMs)
	minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
	hour := openTestRollup(t, tiers.DefaultHourConfig(t.TempDir()), nil)
	f := &stitchFixture{w: w, ref: raw, stitched: tiers.NewStitched(raw, minute, hour), engine: newTestEngine()}
	for _, qs := range []string{`DCGM_FI_DEV_GPU_TEMP`, `sum by (job) (rate(vllm:request_success_total[5m]))`, `avg_over_time(DCGM_FI_DEV_GPU_TEMP[10m])`} {
		// Two hours before the oldest raw sample to one hour after it.
		got, infos := f.rangeQuery(t, f.stitched, qs, testT0+18*hourMs, testT0+21*hourMs, time.Minute)
		want, _ := f.rangeQuery(t, raw, qs, testT0+18*hourMs, testT0+21*hourMs, time.Minute)
		if len(want) == 0 {
			t.Fatalf("%s: no data in the raw tier", qs)
		}
		compare(t, got, want, tolerance{})
		if len(infos) > 0 {
			t.Errorf("%s: infos %q for a range the raw tier alone served", qs, infos)
		}
	}
}

// TestStitchedFreshStoreFirstMinute: on a store whose first sample fell
// mid-minute and whose minute tier already holds that first hour (rolled up
// from the raw tier, as the pipeline does once the hour is final), the raw
// tier still serves every sample of that first partial minute. Remote read
// (which sees one sample per window where a rollup tier serves) and PromQL
// both answer what the raw tier alone answers. Rounding the raw tier's start
// up to the whole minute handed that minute to the minute tier, and a
// `strata backfill --remote-read.url` copy of such a store lacked every
// series' first samples but the minute's last.
func TestStitchedFreshStoreFirstMinute(t *testing.T) {
	w := newWorkload(testT0, 1)
	mint := testT0 + 20*hourMs + 20_000 // 20 s into a minute
	fresh := &workload{start: w.start, end: w.end}
	for _, s := range w.series {
		i := slices.IndexFunc(s.samples, func(x sample) bool { return x.t >= mint })
		fresh.series = append(fresh.series, testSeries{lbls: s.lbls, samples: s.samples[i:]})
	}
	raw := openRefRaw(t)
	fresh.appendTo(t, raw, math.MinInt64)
	minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
	hour := openTestRollup(t, tiers.DefaultHourConfig(t.TempDir()), nil)
	fresh.writeRollups(t, minute, hour, testT0+20*hourMs)
	stitched := tiers.NewStitched(raw, minute, hour)
	from, to := mint-hourMs, mint+40*minMs

	t.Run("remote read", func(t *testing.T) {
		read := func(q storage.ChunkQuerier) map[string][]sample {
			defer func() { _ = q.Close() }()
			set := storage.NewSeriesSetFromChunkSeriesSet(q.Select(context.Background(), true, &storage.SelectHints{Start: from, End: to},
				labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")))
			out := map[string][]sample{}
			for set.Next() {
				it := set.At().Iterator(nil)
				for it.Next() != chunkenc.ValNone {
					ts, v := it.At()
					out[set.At().Labels().String()] = append(out[set.At().Labels().String()], sample{ts, v})
				}
				if err := it.Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := set.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		}
		sq, err := stitched.ChunkQuerier(from, to)
		if err != nil {
			t.Fatal(err)
		}
		rq, err := raw.ChunkQuerier(from, to)
		if err != nil {
			t.Fatal(err)
		}
		got, want := read(sq), read(rq)
		if len(want) != len(fresh.series) {
			t.Fatalf("raw tier holds %d series, want %d", len(want), len(fresh.series))
		}
		for name, ws := range want {
			gs := got[name]
			if !slices.EqualFunc(gs, ws, sameSample) {
				n := min(len(gs), len(ws), 5)
				t.Errorf("%s: %d samples, raw has %d; first %v, raw's %v", name, len(gs), len(ws), gs[:n], ws[:n])
			}
		}
	})
	t.Run("promql", func(t *testing.T) {
		f := &stitchFixture{w: fresh, ref: raw, stitched: stitched, engine: newTestEngine()}
		for _, qs := range []string{`DCGM_FI_DEV_GPU_TEMP`, `count_over_time(DCGM_FI_DEV_GPU_TEMP[10m])`, `sum_over_time(vllm:request_success_total[10m])`} {
			got, _ := f.rangeQuery(t, stitched, qs, from, to, 10*time.Second)
			want, _ := f.rangeQuery(t, raw, qs, from, to, 10*time.Second)
			if len(want) == 0 {
				t.Fatalf("%s: no data in the raw tier", qs)
			}
			compare(t, got, want, tolerance{})
		}
	})
}

// TestStitchedIteratorReuse: a stitched series' iterator handed on to
// other series, as the engine hands each series' iterator on to the next,
// yields what a fresh iterator yields, whatever tiers the series before
// came from: two tiers, a rollup tier alone, raw alone.
func TestStitchedIteratorReuse(t *testing.T) {
	f := sharedStitchFixture(t)
	type window struct{ lo, hi int64 }
	var all []storage.Series
	for _, w := range []window{
		{testT0 + 29*hourMs, testT0 + 31*hourMs}, // hour, minute
		{testT0 + 31*hourMs, testT0 + 32*hourMs}, // minute
		{testT0 + 65*hourMs, testT0 + 66*hourMs}, // raw
		{testT0 + 59*hourMs, testT0 + 61*hourMs}, // minute, raw
	} {
		for _, fn := range []string{"", "rate", "max_over_time"} {
			q, err := f.stitched.Querier(w.lo, w.hi)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = q.Close() })
			hints := &storage.SelectHints{Start: w.lo, End: w.hi, Func: fn, Step: 60_000}
			if fn != "" {
				hints.Range = 5 * minMs
			}
			set := q.Select(t.Context(), true, hints, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
			for set.Next() {
				all = append(all, set.At())
			}
			if err := set.Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(it chunkenc.Iterator) []sample {
		var out []sample
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			if vt != chunkenc.ValFloat {
				t.Fatalf("value type %v", vt)
			}
			ts, v := it.At()
			out = append(out, sample{ts, v})
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := make([][]sample, len(all))
	for i, s := range all {
		want[i] = read(s.Iterator(nil))
		if len(want[i]) == 0 {
			t.Fatalf("series %d (%s): no samples", i, s.Labels())
		}
	}
	// Forwards, backwards, and forwards again with the iterator of the
	// last series read, half way through, each time.
	var it chunkenc.Iterator
	order := make([]int, 0, 3*len(all))
	for i := range all {
		order = append(order, i)
	}
	for i := range all {
		order = append(order, len(all)-1-i)
	}
	for i := range all {
		order = append(order, i)
	}
	for k, i := range order {
		it = all[i].Iterator(it)
		if k%2 == 1 { // leave the next reuse a half-read iterator
			got := read(it)
			if !slices.EqualFunc(got, want[i], sameSample) {
				t.Fatalf("series %d (%s), read %d with a reused iterator: %d samples differ from a fresh iterator's %d", i, all[i].Labels(), k, len(got), len(want[i]))
			}
			continue
		}
		if it.Next() == chunkenc.ValNone {
			t.Fatalf("series %d (%s), read %d: empty with a reused iterator", i, all[i].Labels(), k)
		}
		if ts, v := it.At(); !sameSample(sample{ts, v}, want[i][0]) {
			t.Fatalf("series %d (%s), read %d: first sample %v, want %v", i, all[i].Labels(), k, sample{ts, v}, want[i][0])
		}
	}
}

// sameSample compares samples bit for bit (stale markers are NaNs).
func sameSample(a, b sample) bool {
	return a.t == b.t && math.Float64bits(a.f) == math.Float64bits(b.f)
}

// BenchmarkStitchedPanel: a 12-hour panel (250 points) whose first minute
// the minute tier serves and the rest the raw tier, as a panel reaching
// back to where raw begins does (after a restart, when the windows flushed
// on shutdown overlap raw's first minutes, or a day-long panel in steady
// state), against the same query over a raw tier holding all of it, which
// is what Prometheus reads. The difference is what stitching costs.
func BenchmarkStitchedPanel(b *testing.B) {
	f := newStitchFixture(b)
	// Cut the heads' days into blocks now, as a running TSDB would have:
	// otherwise the compaction runs in the background, during the
	// benchmark, and is counted in its allocations.
	for _, r := range []*tiers.Raw{f.ref, f.raw} {
		if err := r.DB().Compact(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	start, end := testT0+60*hourMs, testT0+72*hourMs-minMs
	step := time.Duration(end-start) * time.Millisecond / 250
	for _, qs := range []string{
		`DCGM_FI_DEV_GPU_TEMP`,
		`sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5m]))`,
	} {
		for _, src := range []struct {
			name string
			q    storage.Queryable
		}{{"raw", f.ref}, {"stitched", f.stitched}} {
			b.Run(fmt.Sprintf("query=%s/tiers=%s", strings.Fields(qs)[0], src.name), func(b *testing.B) {
				want, _ := f.rangeQuery(b, src.q, qs, start, end, step)
				if len(want) == 0 {
					b.Fatal("no series")
				}
				b.ReportAllocs()
				for b.Loop() {
					f.rangeQuery(b, src.q, qs, start, end, step)
				}
			})
		}
	}
}

// BenchmarkStitchedRawOnlyMinuteNames: a 6-hour panel the raw tier alone
// serves, over a stitched view without and with minute-only names (the
// diagnosis engine's baselines, WithMinuteOnlyNames): a select whose name
// is not one of them keeps the raw-only fast path, and costs the same.
func BenchmarkStitchedRawOnlyMinuteNames(b *testing.B) {
	f := newStitchFixture(b)
	if err := f.raw.DB().Compact(b.Context()); err != nil {
		b.Fatal(err)
	}
	withNames := tiers.NewStitched(f.raw, f.minute, f.hour,
		tiers.WithMinuteOnlyNames([]string{"strata:baseline:median", "strata:baseline:sigma", "strata:baseline:k"}, nil))
	end := testT0 + 72*hourMs - minMs
	start := end - 6*hourMs
	step := time.Duration(end-start) * time.Millisecond / 250
	for _, src := range []struct {
		name string
		q    storage.Queryable
	}{{"none", f.stitched}, {"baselines", withNames}} {
		b.Run("minute-only="+src.name, func(b *testing.B) {
			if want, _ := f.rangeQuery(b, src.q, `DCGM_FI_DEV_GPU_TEMP`, start, end, step); len(want) == 0 {
				b.Fatal("no series")
			}
			b.ReportAllocs()
			for b.Loop() {
				f.rangeQuery(b, src.q, `DCGM_FI_DEV_GPU_TEMP`, start, end, step)
			}
		})
	}
}
