package tiers_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/tiers"
)

// fakeOpen is an OpenWindowSource holding fixed windows.
type fakeOpen struct{ series []tiers.SeriesWindows }

func (f *fakeOpen) VisitOpenWindows(mint, maxt int64, sink tiers.OpenWindowSink, ms ...*labels.Matcher) {
	type sel struct {
		lbls labels.Labels
		ws   []tiers.Window
	}
	var out []sel
	for _, s := range f.series {
		ok := true
		for _, m := range ms {
			ok = ok && m.Matches(s.Labels.Get(m.Name))
		}
		if !ok {
			continue
		}
		from, ok := sink.Want(s.Labels)
		if !ok {
			continue
		}
		var ws []tiers.Window
		for _, w := range s.Windows {
			if w.Start >= max(mint, from) && w.Start <= maxt {
				ws = append(ws, w)
			}
		}
		if len(ws) > 0 {
			out = append(out, sel{s.Labels, ws})
		}
	}
	for _, s := range slices.Backward(out) { // any order: the sink sorts
		sink.Series(s.lbls, s.ws)
	}
}

// randomWorkload is hours of 15 s samples (jittered) for a few counters with
// random resets, gauges, a classic histogram and a series that ends with a
// stale marker and comes back, all with random gaps.
func randomWorkload(rng *rand.Rand, start int64, hours int) []testSeries {
	end := start + int64(hours)*hourMs
	gen := func(lbls labels.Labels, next func(prev float64) float64, first float64) testSeries {
		s := testSeries{lbls: lbls}
		v := first
		for t := start; t < end; t += 15_000 {
			if rng.IntN(200) == 0 { // a gap of 1-8 minutes, sometimes ended by a stale marker
				if rng.IntN(2) == 0 {
					s.samples = append(s.samples, sample{t + 1, staleNaN})
				}
				t += int64(1+rng.IntN(8)) * minMs
				continue
			}
			v = next(v)
			s.samples = append(s.samples, sample{t + int64(rng.IntN(3000)), v})
		}
		return s
	}
	counter := func(rate float64) func(float64) float64 {
		return func(prev float64) float64 {
			if rng.IntN(150) == 0 {
				return rng.Float64() * rate // restart
			}
			return prev + rng.Float64()*rate
		}
	}
	gauge := func(prev float64) float64 { return math.Max(0, prev+rng.NormFloat64()*0.05) }
	var out []testSeries
	for i := range 3 {
		inst := "i" + strconv.Itoa(i)
		out = append(out,
			gen(labels.FromStrings(model.MetricNameLabel, "req_total", "instance", inst), counter(20), 0),
			gen(labels.FromStrings(model.MetricNameLabel, "hits_total", "instance", inst), counter(5), 0),
			gen(labels.FromStrings(model.MetricNameLabel, "DCGM_FI_PROF_SM_ACTIVE", "instance", inst), gauge, 0.6),
			gen(labels.FromStrings(model.MetricNameLabel, "DCGM_FI_DEV_XID_ERRORS", "instance", inst), func(float64) float64 {
				if rng.IntN(300) == 0 {
					return 79
				}
				return 0
			}, 0),
		)
		// A classic histogram: cumulative buckets from one stream of observations.
		les := []float64{0.1, 0.5, 1, 5, math.Inf(1)}
		buckets := make([]testSeries, len(les))
		for k, le := range les {
			buckets[k].lbls = labels.FromStrings(model.MetricNameLabel, "lat_seconds_bucket", "instance", inst, "le", strconv.FormatFloat(le, 'g', -1, 64))
		}
		counts := make([]float64, len(les))
		for t := start; t < end; t += 15_000 {
			if rng.IntN(300) == 0 {
				clear(counts)
			}
			for range rng.IntN(20) {
				x := rng.ExpFloat64()
				for k, le := range les {
					if x <= le {
						counts[k]++
					}
				}
			}
			for k := range les {
				buckets[k].samples = append(buckets[k].samples, sample{t, counts[k]})
			}
		}
		out = append(out, buckets...)
	}
	return out
}

// viewQueries are the PromQL shapes the diagnosis pack uses over minute data.
var viewQueries = []string{
	`req_total`,
	`rate(req_total[3m])`,
	`increase(req_total[5m])`,
	`sum by (instance) (rate(hits_total[3m])) / (sum by (instance) (rate(req_total[3m])) > 0)`,
	`histogram_quantile(0.99, sum by (instance, le) (rate(lat_seconds_bucket[3m])))`,
	`avg by (instance) (DCGM_FI_PROF_SM_ACTIVE)`,
	`max_over_time(DCGM_FI_PROF_SM_ACTIVE[5m])`,
	`min_over_time(DCGM_FI_PROF_SM_ACTIVE[10m])`,
	`avg_over_time(DCGM_FI_PROF_SM_ACTIVE[15m])`,
	`last_over_time(DCGM_FI_PROF_SM_ACTIVE[3m])`,
	`changes(DCGM_FI_DEV_XID_ERRORS[5m]) > 0 or max_over_time(DCGM_FI_DEV_XID_ERRORS[5m]) > 0`,
	`count_over_time(req_total[3m])`,
	`absent_over_time(DCGM_FI_PROF_SM_ACTIVE[3m])`,
	`resets(req_total[10m])`,
	`DCGM_FI_PROF_SM_ACTIVE < 0.6 and on (instance) rate(req_total[3m]) > 0`,
	`label_replace(clamp_max(rate(req_total[3m]) / 10, 1), "strata_source", "x", "", "")`,
}

func newEngineForView() *promql.Engine {
	return promql.NewEngine(promql.EngineOpts{Logger: quietLogger(), MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
}

func instant(t *testing.T, e *promql.Engine, q storage.Queryable, qs string, ts int64) promql.Vector {
	t.Helper()
	qry, err := e.NewInstantQuery(context.Background(), q, nil, qs, time.UnixMilli(ts))
	if err != nil {
		t.Fatal(err)
	}
	defer qry.Close()
	res := qry.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s at %d: %v", qs, ts, res.Err)
	}
	switch v := res.Value.(type) {
	case promql.Vector:
		out := make(promql.Vector, len(v)) // Close recycles v
		for i, s := range v {
			out[i] = promql.Sample{Metric: s.Metric.Copy(), T: s.T, F: s.F}
		}
		return out
	case promql.Scalar:
		return promql.Vector{{T: v.T, F: v.V}}
	}
	t.Fatalf("%s: unexpected %T", qs, res.Value)
	return nil
}

func rangeQ(t *testing.T, e *promql.Engine, q storage.Queryable, qs string, start, end int64) promql.Matrix {
	t.Helper()
	qry, err := e.NewRangeQuery(context.Background(), q, nil, qs, time.UnixMilli(start), time.UnixMilli(end), time.Minute)
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
	// Close returns the result's slices to the engine's pools: copy them.
	out := make(promql.Matrix, len(m))
	for i, s := range m {
		out[i] = promql.Series{Metric: s.Metric.Copy(), Floats: slices.Clone(s.Floats)}
	}
	return out
}

// stepAt is the range result's vector at ts.
func stepAt(m promql.Matrix, ts int64) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m {
		for _, p := range s.Floats {
			if p.T == ts {
				out[s.Metric.String()] = p.F
			}
		}
	}
	return out
}

func vecMap(v promql.Vector) map[string]float64 {
	out := map[string]float64{}
	for _, s := range v {
		out[s.Metric.String()] = s.F
	}
	return out
}

func sameBits(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || (math.Float64bits(x) != math.Float64bits(y) && !(math.IsNaN(x) && math.IsNaN(y))) {
			return false
		}
	}
	return true
}

// TestMinuteViewInstantEqualsRangeStep is the property the diagnosis
// engine's replay fast path rests on: over the minute view, an instant query
// at t gives exactly (bit for bit) the range query's step at t, for random
// windows with counter resets, gaps and stale markers, for every function
// the rule pack uses, through the view, its snapshot, and with the newest
// hour only in the pipeline's open windows.
func TestMinuteViewInstantEqualsRangeStep(t *testing.T) {
	hours := 4
	seeds := []uint64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	engine := newEngineForView()
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			series := randomWorkload(rng, testT0, hours)
			minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
			diskOnly := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
			open := &fakeOpen{}
			lastHour := testT0 + int64(hours-1)*hourMs
			parts := map[int64][]tiers.SeriesWindows{}
			slices.SortFunc(series, func(a, b testSeries) int { return labels.Compare(a.lbls, b.lbls) })
			for _, s := range series {
				ws := s.minuteWindows(t, testT0, testT0+int64(hours)*hourMs)
				var openWs []tiers.Window
				for _, w := range ws {
					p := w.Start - w.Start%hourMs
					ps := parts[p]
					if len(ps) == 0 || !labels.Equal(ps[len(ps)-1].Labels, s.lbls) {
						ps = append(ps, tiers.SeriesWindows{Labels: s.lbls})
					}
					ps[len(ps)-1].Windows = append(ps[len(ps)-1].Windows, w)
					parts[p] = ps
					// The pipeline still holds the last two hours: one of them
					// is flushed already (the race the view must absorb).
					if p >= lastHour-hourMs {
						openWs = append(openWs, w)
					}
				}
				if len(openWs) > 0 {
					open.series = append(open.series, tiers.SeriesWindows{Labels: s.lbls, Windows: openWs})
				}
			}
			for p, sws := range parts {
				if err := diskOnly.WritePartition(p, sws); err != nil {
					t.Fatal(err)
				}
				if p < lastHour {
					if err := minute.WritePartition(p, sws); err != nil {
						t.Fatal(err)
					}
				}
			}
			live := tiers.NewMinuteView(minute, open)
			replay := tiers.NewMinuteView(diskOnly, nil)
			from, to := testT0+20*minMs, testT0+int64(hours)*hourMs-minMs
			snap, err := live.Snapshot(context.Background(), from-30*minMs, to)
			if err != nil {
				t.Fatal(err)
			}
			times := []int64{from, to, lastHour, lastHour - minMs}
			for range 12 {
				times = append(times, from+int64(rng.IntN(int((to-from)/minMs)))*minMs)
			}
			for _, qs := range viewQueries {
				m := rangeQ(t, engine, replay, qs, from, to)
				nonEmpty := 0
				for _, ts := range times {
					want := stepAt(m, ts)
					nonEmpty += len(want)
					for name, q := range map[string]storage.Queryable{"replay": replay, "live": live, "snapshot": snap} {
						if got := vecMap(instant(t, engine, q, qs, ts)); !sameBits(got, want) {
							t.Errorf("%s at %s (%s): instant %v, range step %v", qs, time.UnixMilli(ts).UTC().Format(time.RFC3339), name, got, want)
						}
					}
				}
				if nonEmpty == 0 && qs != viewQueries[12] {
					t.Errorf("%s: no result at any time; the property is vacuous", qs)
				}
				if ms := rangeQ(t, engine, snap, qs, from, to); !slices.EqualFunc(ms, m, func(a, b promql.Series) bool {
					return labels.Equal(a.Metric, b.Metric) && slices.EqualFunc(a.Floats, b.Floats, func(x, y promql.FPoint) bool {
						return x.T == y.T && (math.Float64bits(x.F) == math.Float64bits(y.F) || math.IsNaN(x.F) && math.IsNaN(y.F))
					})
				}) {
					t.Errorf("%s: range query over the snapshot differs from the disk: %s", qs, firstDiff(ms, m))
				}
			}
		})
	}
}

// TestMinuteViewHidesNames checks the engine's own series never come back
// through the view, and that a snapshot refuses queries before its range.
func TestMinuteViewHidesNames(t *testing.T) {
	minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
	mk := func(name string) tiers.SeriesWindows {
		return tiers.SeriesWindows{Labels: labels.FromStrings(model.MetricNameLabel, name), Windows: []tiers.Window{{Start: testT0, FirstT: testT0, LastT: testT0 + 30_000, Count: 2, Sum: 2, Min: 1, Max: 1, First: 1, Last: 1}}}
	}
	if err := minute.WritePartition(testT0, []tiers.SeriesWindows{mk("ALERTS"), mk("up")}); err != nil {
		t.Fatal(err)
	}
	v := tiers.NewMinuteView(minute, &fakeOpen{series: []tiers.SeriesWindows{mk("strata:x")}}, tiers.WithHiddenNames(func(n string) bool { return n == "ALERTS" || n == "strata:x" }))
	e := newEngineForView()
	for qs, want := range map[string]int{`ALERTS`: 0, `{__name__=~".+"}`: 1, `up`: 1, `strata:x`: 0} {
		if got := len(instant(t, e, v, qs, testT0+minMs)); got != want {
			t.Errorf("%s: %d series, want %d", qs, got, want)
		}
	}
	snap, err := v.Snapshot(context.Background(), testT0, testT0+hourMs)
	if err != nil {
		t.Fatal(err)
	}
	q, err := snap.Querier(testT0-minMs, testT0)
	if err != nil {
		t.Fatal(err)
	}
	if set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "up")); set.Next() || !errors.Is(set.Err(), tiers.ErrOutsideSnapshot) {
		t.Errorf("snapshot answered a select before its range: %v", set.Err())
	}
	if set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "strata:x")); set.Next() || set.Err() != nil {
		t.Errorf("a select of a hidden name failed: %v", set.Err())
	}
}

func firstDiff(a, b promql.Matrix) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d series vs %d", len(a), len(b))
	}
	for i := range a {
		if !labels.Equal(a[i].Metric, b[i].Metric) {
			return fmt.Sprintf("series %s vs %s", a[i].Metric, b[i].Metric)
		}
		if len(a[i].Floats) != len(b[i].Floats) {
			return fmt.Sprintf("%s: %d points vs %d (first %v vs %v)", a[i].Metric, len(a[i].Floats), len(b[i].Floats), a[i].Floats[0], b[i].Floats[0])
		}
		for j := range a[i].Floats {
			if a[i].Floats[j] != b[i].Floats[j] {
				return fmt.Sprintf("%s: %v vs %v", a[i].Metric, a[i].Floats[j], b[i].Floats[j])
			}
		}
	}
	return "?"
}

// BenchmarkMinuteViewSnapshotOpen: the diagnosis engine's snapshot of a
// fleet's open windows at its first minutes (10,000 series, one window
// each, nothing flushed yet): bytes per snapshot are what the engine holds
// while it evaluates.
func BenchmarkMinuteViewSnapshotOpen(b *testing.B) {
	minute := openTestRollup(b, tiers.DefaultMinuteConfig(b.TempDir()), nil)
	open := &fakeOpen{}
	for i := range 10_000 {
		open.series = append(open.series, tiers.SeriesWindows{
			Labels:  labels.FromStrings(model.MetricNameLabel, "up", "instance", strconv.Itoa(i)),
			Windows: []tiers.Window{{Start: testT0, FirstT: testT0, LastT: testT0 + 30_000, Count: 2, Sum: 2, Min: 1, Max: 1, First: 1, Last: 1}},
		})
	}
	v := tiers.NewMinuteView(minute, open)
	b.ReportAllocs()
	for b.Loop() {
		s, err := v.Snapshot(context.Background(), testT0-5*minMs, testT0)
		if err != nil || s.Series() != 10_000 {
			b.Fatal(s.Series(), err)
		}
	}
}

// BenchmarkMinuteViewSnapshotPartition: the diagnosis engine's snapshot in
// the ten minutes after an hour's minute partition is written, when the
// windows it reaches are read from the file: 20,000 series of vLLM-shaped
// label sets (eight labels), an hour of windows each, the last ten minutes
// read. B/op is what a select of that many series allocates (the series'
// label text and labels, the readers' maps, the windows kept), about 25
// times less than the 500,000 series that made Strata's peak
// (docs/bench.md, stop 37).
func BenchmarkMinuteViewSnapshotPartition(b *testing.B) {
	const n = 20_000
	minute := openTestRollup(b, tiers.DefaultMinuteConfig(b.TempDir()), nil)
	series := make([]tiers.SeriesWindows, n)
	for i := range series {
		ws := make([]tiers.Window, 0, 60)
		for s := testT0; s < testT0+60*minMs; s += minMs {
			v := float64(i%97) + float64((s-testT0)/minMs)
			ws = append(ws, tiers.Window{Start: s, FirstT: s, LastT: s + 45_000, Count: 4, Sum: 4 * v, Min: v, Max: v, First: v, Last: v})
		}
		series[i] = tiers.SeriesWindows{Labels: labels.FromStrings(model.MetricNameLabel, "vllm:num_requests_running",
			"engine", "0", "instance", fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250), "job", "vllm",
			"model_name", "meta-llama/Llama-3.1-8B-Instruct", "namespace", "inference",
			"pod", fmt.Sprintf("vllm-llama-8b-7c9d5-%05d", i/4), "replica", strconv.Itoa(i%4)), Windows: ws}
	}
	if err := minute.WritePartition(testT0, series); err != nil {
		b.Fatal(err)
	}
	// The next hour's first two minutes, still in memory: a series read
	// from both is a sequence of two blocks.
	open := &fakeOpen{}
	for _, sw := range series {
		var ws []tiers.Window
		for s := testT0 + 60*minMs; s < testT0+62*minMs; s += minMs {
			ws = append(ws, tiers.Window{Start: s, FirstT: s, LastT: s + 45_000, Count: 4, Sum: 4, Min: 1, Max: 1, First: 1, Last: 1})
		}
		open.series = append(open.series, tiers.SeriesWindows{Labels: sw.Labels, Windows: ws})
	}
	// The raw head holding every series, whose label sets a view with
	// WithSharedLabels takes (as the engine's does) instead of its own.
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.Close() })
	app := raw.Appender(context.Background())
	for _, sw := range series {
		if _, err := app.Append(0, sw.Labels, testT0+60*minMs, 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
	end := testT0 + 60*minMs - 1
	plain := tiers.SnapshotReads{Columns: func(string) tiers.WindowColumns { return tiers.ColumnsForFunc("") }}
	reach := tiers.SnapshotReads{Columns: plain.Columns, From: func(string) int64 { return end + 2*minMs - 5*minMs }}
	for _, c := range []struct {
		name  string
		view  *tiers.MinuteView
		reads tiers.SnapshotReads
		to    int64
	}{
		{"all", tiers.NewMinuteView(minute, &fakeOpen{}), tiers.SnapshotReads{}, end},
		// The columns a plain selector reads, as the engine's rules read
		// most metrics.
		{"plain", tiers.NewMinuteView(minute, &fakeOpen{}), plain, end},
		// And the open windows after the partition, as in the minutes
		// after an hour's flush.
		{"plain+open", tiers.NewMinuteView(minute, open), plain, end + 2*minMs},
		// And each series cut to a rule's reach of five minutes, as the
		// engine reads most metrics.
		{"plain+open+reach", tiers.NewMinuteView(minute, open), reach, end + 2*minMs},
		// And the raw head's label sets, as the engine's view takes them.
		{"plain+open+reach+shared", tiers.NewMinuteView(minute, open, tiers.WithSharedLabels(raw)), reach, end + 2*minMs},
	} {
		b.Run(c.name, func(b *testing.B) {
			snap := func() *tiers.MinuteSnapshot {
				s, err := c.view.SnapshotFor(context.Background(), end-10*minMs, c.to, c.reads)
				if err != nil || s.Series() != n {
					b.Fatal(s.Series(), err)
				}
				return s
			}
			// held-B is what the snapshot keeps once taken (what the
			// engine holds while it evaluates): the heap in use with it
			// against without it, after a first snapshot has opened the
			// file, and two collections each (the second empties the
			// readers' batch pool).
			var before, after runtime.MemStats
			snap()
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := snap()
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(s)
			b.ReportAllocs()
			for b.Loop() {
				snap()
			}
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "held-B") // after the loop, which resets reported metrics
		})
	}
}

// TestMinuteSnapshotSharesLabels: with WithSharedLabels, a series a
// snapshot reads from the minute tier's files takes the label set the raw
// head holds for it, not a copy; a series the head does not hold keeps the
// set the partition was written with (the tier's series table); the
// windows are those read without it.
func TestMinuteSnapshotSharesLabels(t *testing.T) {
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	held := labels.FromStrings(model.MetricNameLabel, "temp", "instance", "a")
	other := labels.FromStrings(model.MetricNameLabel, "temp", "instance", "b")
	app := raw.Appender(context.Background())
	if _, err := app.Append(0, held, testT0, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
	if err := minute.WritePartition(testT0, []tiers.SeriesWindows{
		{Labels: held, Windows: sampleWindows(testT0, 10, 1)},
		{Labels: other, Windows: sampleWindows(testT0, 10, 2)},
	}); err != nil {
		t.Fatal(err)
	}
	// The head's own label set, as its appenders' GetRef hands it out.
	gr := raw.AppenderV2(context.Background())
	_, headHeld := gr.(storage.GetRef).GetRef(held, held.Hash())
	_ = gr.Rollback()
	read := func(v *tiers.MinuteView) (map[string]labels.Labels, map[string][]float64) {
		t.Helper()
		snap, err := v.Snapshot(context.Background(), testT0, testT0+10*minMs)
		if err != nil {
			t.Fatal(err)
		}
		q, err := snap.Querier(testT0, testT0+10*minMs)
		if err != nil {
			t.Fatal(err)
		}
		lbls, vals := map[string]labels.Labels{}, map[string][]float64{}
		ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "temp"))
		for ss.Next() {
			l := ss.At().Labels()
			lbls[l.Get("instance")] = l
			it := ss.At().Iterator(nil)
			for it.Next() != chunkenc.ValNone {
				_, f := it.At()
				vals[l.Get("instance")] = append(vals[l.Get("instance")], f)
			}
		}
		if err := ss.Err(); err != nil {
			t.Fatal(err)
		}
		return lbls, vals
	}
	shared, sharedVals := read(tiers.NewMinuteView(minute, nil, tiers.WithSharedLabels(raw)))
	_, ownVals := read(tiers.NewMinuteView(minute, nil))
	if len(shared) != 2 || !labels.Equal(shared["a"], held) || !labels.Equal(shared["b"], other) {
		t.Fatalf("series read: %v", shared)
	}
	if !sameLabelBytes(t, shared["a"], headHeld) {
		t.Error("the series the head holds was read with a copy of its labels")
	}
	// The tier keeps the series table of the partition it wrote last,
	// with the label sets it was given: a series the head does not hold
	// is read with that set, not a copy.
	if !sameLabelBytes(t, shared["b"], other) {
		t.Error("a series the head does not hold was read with a copy of the set written")
	}
	if fmt.Sprint(sharedVals) != fmt.Sprint(ownVals) || len(ownVals["a"]) == 0 {
		t.Errorf("windows with shared labels %v, without %v", sharedVals, ownVals)
	}
}

// sameLabelBytes reports whether a and b are the same label set in memory,
// not two copies (the stringlabels representation: one string).
func sameLabelBytes(t *testing.T, a, b labels.Labels) bool {
	if unsafe.Sizeof(a) != unsafe.Sizeof("") {
		t.Skip("labels are not one string in this build")
	}
	return unsafe.StringData(*(*string)(unsafe.Pointer(&a))) == unsafe.StringData(*(*string)(unsafe.Pointer(&b)))
}

// TestMinuteSnapshotFrom: a snapshot that keeps of each name's windows only
// those from its from answers every query reaching no further back exactly
// as the whole snapshot does, and holds nothing older (a query reaching
// further back sees only the kept windows), whether a series' windows are
// open, on disk or both.
func TestMinuteSnapshotFrom(t *testing.T) {
	minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
	open := &fakeOpen{}
	var disk []tiers.SeriesWindows
	for i := range 6 {
		inst := strconv.Itoa(i)
		for j, name := range []string{"req_total", "temp"} {
			sw := tiers.SeriesWindows{Labels: labels.FromStrings(model.MetricNameLabel, name, "instance", inst), Windows: sampleWindows(testT0, 20, float64(100*j+10*i))}
			switch i % 3 {
			case 0: // open only
				open.series = append(open.series, sw)
			case 1: // flushed
				disk = append(disk, sw)
			default: // flushed up to minute 15, open from 13 (the disk's window of a start wins)
				disk = append(disk, tiers.SeriesWindows{Labels: sw.Labels, Windows: sw.Windows[:15]})
				open.series = append(open.series, tiers.SeriesWindows{Labels: sw.Labels, Windows: sw.Windows[13:]})
			}
		}
	}
	if err := minute.WritePartition(testT0, disk); err != nil {
		t.Fatal(err)
	}
	v := tiers.NewMinuteView(minute, open)
	at := testT0 + 20*minMs // after the last window
	mint, maxt := at-10*minMs, at
	reach := map[string]int64{"req_total": 3 * minMs, "temp": 5 * minMs}
	whole, err := v.Snapshot(context.Background(), mint, maxt)
	if err != nil {
		t.Fatal(err)
	}
	trimmed, err := v.SnapshotFrom(context.Background(), mint, maxt, func(name string) int64 { return at - reach[name] })
	if err != nil {
		t.Fatal(err)
	}
	e := newEngineForView()
	for _, qs := range []string{`rate(req_total[3m])`, `increase(req_total[2m])`, `temp`, `max_over_time(temp[5m])`, `avg_over_time(temp[4m])`, `sum(temp)`} {
		want := vecMap(instant(t, e, whole, qs, at))
		if len(want) == 0 {
			t.Fatalf("%s: no result; the comparison is vacuous", qs)
		}
		if got := vecMap(instant(t, e, trimmed, qs, at)); !sameBits(got, want) {
			t.Errorf("%s: %v from the trimmed snapshot, %v from the whole", qs, got, want)
		}
	}
	// Further back than its reach, a name has only the kept windows (the
	// ones starting from its from): over 9 minutes the trimmed snapshot
	// counts what the whole one counts over the reach alone.
	for _, name := range []string{"req_total", "temp"} {
		long := "count_over_time(" + name + "[9m])"
		short := fmt.Sprintf("count_over_time(%s[%dm])", name, reach[name]/minMs)
		got, want, all := vecMap(instant(t, e, trimmed, long, at)), vecMap(instant(t, e, whole, short, at)), vecMap(instant(t, e, whole, long, at))
		if !sameBits(got, want) || sameBits(got, all) {
			t.Errorf("%s: %v from the trimmed snapshot, want %v (the whole snapshot's over %s; over 9m %v)", long, got, want, short, all)
		}
	}
}

// TestMinuteSnapshotColumns: a snapshot that loads of each name only the
// window columns its readers' functions read answers every query of those
// functions exactly as the snapshot of every column does, from disk and
// open windows alike (and a series read from both); a query whose function
// reads a column not loaded fails with ErrColumnNotLoaded instead of
// reading it as zero.
func TestMinuteSnapshotColumns(t *testing.T) {
	minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
	open := &fakeOpen{}
	var disk []tiers.SeriesWindows
	for i := range 2 {
		for _, name := range []string{"req_total", "temp"} {
			l := labels.FromStrings(model.MetricNameLabel, name, "instance", strconv.Itoa(i))
			ws := sampleWindows(testT0+40*minMs, 40, float64(10*i+len(name)))
			switch i {
			case 0: // open only
				open.series = append(open.series, tiers.SeriesWindows{Labels: l, Windows: ws})
			default: // the hour on disk, the next open, the disk's window of a start winning
				disk = append(disk, tiers.SeriesWindows{Labels: l, Windows: ws[:20]})
				open.series = append(open.series, tiers.SeriesWindows{Labels: l, Windows: ws[18:]})
			}
		}
	}
	if err := minute.WritePartition(testT0, disk); err != nil {
		t.Fatal(err)
	}
	v := tiers.NewMinuteView(minute, open)
	at := testT0 + 70*minMs
	mint, maxt := at-30*minMs, at
	cols := map[string]tiers.WindowColumns{
		"req_total": tiers.ColumnsForFunc("rate"),
		"temp":      tiers.ColumnsForFunc("") | tiers.ColumnsForFunc("max_over_time"),
	}
	all, err := v.Snapshot(context.Background(), mint, maxt)
	if err != nil {
		t.Fatal(err)
	}
	pruned, err := v.SnapshotFor(context.Background(), mint, maxt, tiers.SnapshotReads{Columns: func(name string) tiers.WindowColumns { return cols[name] }})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngineForView()
	for _, qs := range []string{
		`rate(req_total[5m])`, `increase(req_total[12m])`, `resets(req_total[15m])`, `sum by (instance) (rate(req_total[3m]))`, `req_total`,
		`temp`, `max(temp)`, `max_over_time(temp[15m])`, `temp > 20`, `timestamp(temp)`,
	} {
		for _, ts := range []int64{at - 10*minMs, at - 61_000, at} {
			want := vecMap(instant(t, e, all, qs, ts))
			if len(want) == 0 {
				t.Fatalf("%s: no result; the comparison is vacuous", qs)
			}
			if got := vecMap(instant(t, e, pruned, qs, ts)); !sameBits(got, want) {
				t.Errorf("%s at %d: %v from the pruned snapshot, %v from every column", qs, ts, got, want)
			}
		}
	}
	for _, qs := range []string{`avg_over_time(temp[5m])`, `min_over_time(temp[5m])`, `count_over_time(req_total[5m])`, `sum_over_time(req_total[5m])`} {
		qry, err := e.NewInstantQuery(context.Background(), pruned, nil, qs, time.UnixMilli(at))
		if err != nil {
			t.Fatal(err)
		}
		if res := qry.Exec(context.Background()); !errors.Is(res.Err, tiers.ErrColumnNotLoaded) {
			t.Errorf("%s: %v, want ErrColumnNotLoaded", qs, res.Err)
		}
		qry.Close()
	}
}
