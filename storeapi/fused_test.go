package storeapi

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/thanos-io/thanos/pkg/api/query/querypb"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/tiers"
)

// sameMatrix fails the test unless got is want to the bit: the same series
// in the same order, the same samples.
func sameMatrix(t *testing.T, query string, got queryAnswer, want promql.Matrix) {
	t.Helper()
	if len(got.series) != len(want) {
		t.Fatalf("%s: %d series, want %d", query, len(got.series), len(want))
	}
	for i, ws := range want {
		g := got.series[i]
		if gl := PromLabels(g.Labels); !labels.Equal(gl, ws.Metric) {
			t.Fatalf("%s: series %d is %s, want %s", query, i, gl, ws.Metric)
		}
		if len(g.Samples) != len(ws.Floats) {
			t.Fatalf("%s %s: %d samples, want %d", query, ws.Metric, len(g.Samples), len(ws.Floats))
		}
		for j, p := range ws.Floats {
			if gs := g.Samples[j]; gs.Timestamp != p.T || !sameFloat(gs.Value, p.F) {
				t.Fatalf("%s %s: sample %d is %v@%d, want %v@%d", query, ws.Metric, j, gs.Value, gs.Timestamp, p.F, p.T)
			}
		}
	}
}

// tieredFixture is two days of 12 gauges held by the three tiers one after
// the other: the hour tier the first day, the minute tier the second day's
// first 20 hours, the raw tier its last 4. The samples (every 15 s) have
// gaps, stale markers followed by silences, NaN, ±Inf, values over 30
// orders of magnitude and ±1e308 (whose sums overflow or cancel by their
// order), so the windows hold all of that too.
func tieredFixture(t *testing.T) *tiers.Stitched {
	t.Helper()
	dir := t.TempDir()
	const rawFrom, minuteFrom = t0 + dayMs + 20*hourMs, t0 + dayMs
	end := t0 + 2*dayMs
	now := func() time.Time { return time.UnixMilli(end) }
	rawCfg := tiers.DefaultRawConfig(filepath.Join(dir, "raw"))
	rawCfg.Retention = 365 * 24 * time.Hour
	raw, err := tiers.OpenRaw(rawCfg, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(filepath.Join(dir, "minute")), quiet(), prometheus.NewRegistry(), now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = minute.Close() })
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), quiet(), prometheus.NewRegistry(), now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hour.Close() })

	r := rand.New(rand.NewPCG(3, 4))
	app := raw.Appender(context.Background())
	minutePart := map[int64][]tiers.SeriesWindows{}
	var hourPart []tiers.SeriesWindows
	for i := range 12 {
		l := labels.FromStrings("__name__", "m", "host", fmt.Sprintf("h%d", i%3), "gpu", fmt.Sprint(i))
		if i%5 == 0 {
			l = labels.FromStrings("__name__", "m", "host", fmt.Sprintf("h%d", i%3), "gpu", fmt.Sprint(i), "rack", "r")
		}
		var ss []chunks.Sample
		for ts := t0 + int64(i)*1000; ts < end; ts += 15_000 {
			switch k := r.IntN(2000); {
			case k < 3:
				ts += int64(r.IntN(40)) * 60_000 // a silence
				continue
			case k < 6:
				ss = append(ss, fsample{ts, math.Float64frombits(value.StaleNaN)})
				ts += int64(r.IntN(20)) * 60_000
				continue
			case k < 8:
				ss = append(ss, fsample{ts, math.NaN()})
			case k < 10:
				ss = append(ss, fsample{ts, math.Inf(1 - 2*r.IntN(2))})
			case k < 60:
				ss = append(ss, fsample{ts, 1e308 * float64(1-2*r.IntN(2))})
			default:
				ss = append(ss, fsample{ts, r.NormFloat64() * math.Pow(10, float64(r.IntN(30)-10))})
			}
		}
		for _, s := range ss {
			if s.T() < rawFrom {
				continue
			}
			if _, err := app.Append(0, l, s.T(), s.F()); err != nil {
				t.Fatal(err)
			}
		}
		it := storage.NewListSeries(l, ss).Iterator(nil)
		mws, _, err := downsample.AppendWindows(nil, it, downsample.MinuteRes, minuteFrom, rawFrom, downsample.KindGauge)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range mws {
			p := w.Start - w.Start%hourMs
			minutePart[p] = appendWindow(minutePart[p], l, w)
		}
		dws, _, err := downsample.AppendWindows(nil, storage.NewListSeries(l, ss).Iterator(nil), downsample.MinuteRes, t0, minuteFrom, downsample.KindGauge)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range downsample.Coarsen(nil, dws, downsample.HourRes, downsample.KindGauge) {
			hourPart = appendWindow(hourPart, l, w)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	for p, sws := range minutePart {
		sortWindows(sws)
		if err := minute.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
	sortWindows(hourPart)
	if err := hour.WritePartition(t0, hourPart); err != nil {
		t.Fatal(err)
	}
	return tiers.NewStitched(raw, minute, hour)
}

// TestFusedAggregationsAcrossTiers: sum, count, min and max by a selector,
// answered by the fused path over ranges that cross the hour, minute and
// raw tiers, with steps not aligned to the windows, equal to the bit what
// the engine answers evaluating the requests itself, alone and as an avg's
// two halves at once; and with the warnings and sample statistics of the
// path before it (the selector's evaluation, aggregated).
func TestFusedAggregationsAcrossTiers(t *testing.T) {
	data := tieredFixture(t)
	s, err := New(shardConfig(), nil, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	engine := newEngine(0)
	fused := NewQueryServer(s, engine, data)
	t.Cleanup(fused.Close)
	evaluated := NewQueryServer(s, engine, data)
	evaluated.fused.max = 0 // the path before: the selector's evaluation, aggregated
	t.Cleanup(evaluated.Close)
	fc, ec := querypb.NewQueryClient(serve(t, s, fused)), querypb.NewQueryClient(serve(t, s, evaluated))
	drop := dropSet([]string{"replica"})
	view := &externalQueryable{q: data, s: s, ext: s.externalLabels(drop), drop: drop}

	for _, tc := range []struct {
		name       string
		start, end int64 // s
		step       int64 // s
		tiers      string
	}{
		{"three tiers, 433 s steps", t0/1000 + 17, (t0+2*dayMs)/1000 - 1, 433, "hour,minute,raw"},
		{"three tiers, 2 h steps", t0/1000 + 3*3600 + 13, (t0+2*dayMs)/1000 + 3600, 7213, "hour,minute,raw"},
		{"minute and raw, 47 s steps", (t0+dayMs)/1000 + 18*3600 + 29, (t0+2*dayMs)/1000 - 600, 47, "minute,raw"},
		{"hour and minute, 1 h steps", t0/1000 + 1800, (t0+dayMs)/1000 + 5*3600, 3600, "hour,minute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, end, step := time.Unix(tc.start, 0), time.Unix(tc.end, 0), time.Duration(tc.step)*time.Second
			ask := func(c querypb.QueryClient, query string) queryAnswer {
				t.Helper()
				a, err := queryRange(t, c, &querypb.QueryRangeRequest{
					Query: query, StartTimeSeconds: tc.start, EndTimeSeconds: tc.end, IntervalSeconds: tc.step, ReplicaLabels: []string{"replica"},
				})
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			check := func(query string, got queryAnswer) {
				t.Helper()
				sameMatrix(t, query, got, engineRange(t, engine, view, query, start, end, step))
				before := ask(ec, query)
				if !slices.Equal(got.warnings, before.warnings) {
					t.Errorf("%s: warnings %q, the evaluation's %q", query, got.warnings, before.warnings)
				}
				if got.stats.SamplesTotal != before.stats.SamplesTotal || got.stats.PeakSamples != before.stats.PeakSamples {
					t.Errorf("%s: statistics %v, the evaluation's %v", query, got.stats, before.stats)
				}
			}
			// The range crosses the tiers it is meant to.
			qry, err := engine.NewRangeQuery(context.Background(), view, nil, "sum(m)", start, end, step)
			if err != nil {
				t.Fatal(err)
			}
			res := qry.Exec(context.Background())
			qry.Close()
			_, infos := res.Warnings.AsStrings("", 0, 0)
			if want := "served by tiers " + tc.tiers; res.Err != nil || !slices.ContainsFunc(infos, func(w string) bool { return strings.HasSuffix(w, want) }) {
				t.Fatalf("%v %q, want a note %q", res.Err, infos, want)
			}
			fused0 := testutil.ToFloat64(s.queryAggregationsFused)
			for _, grouping := range []string{"by (host, shard)", "by ()", "by (gpu)", "by (rack)"} {
				for _, op := range []string{"sum", "count", "min", "max"} {
					query := fmt.Sprintf("%s %s (m)", op, grouping)
					check(query, ask(fc, query))
				}
				pair := []string{"sum " + grouping + " (m)", "count " + grouping + " (m)"}
				answers := make([]queryAnswer, 2)
				var wg sync.WaitGroup
				for i, q := range pair {
					wg.Go(func() { answers[i] = ask(fc, q) })
				}
				wg.Wait()
				for i, q := range pair {
					check(q, answers[i])
				}
			}
			if got := testutil.ToFloat64(s.queryAggregationsFused) - fused0; got != 4*6 {
				t.Errorf("%v aggregations fused, want %d", got, 4*6)
			}
		})
	}
}

// TestFusedFallsBack: what the fused path does not cover (an offset, an @
// modifier, a native histogram selected, more accumulators than
// maxFusedCells allows) is answered as before, the engine's answer.
func TestFusedFallsBack(t *testing.T) {
	const t0, n = int64(1_000_000), int64(240)
	data := exactSeries(t0, n)
	s, engine, c := queryServerOver(t, data)
	drop := dropSet([]string{"replica"})
	view := &externalQueryable{q: data, s: s, ext: s.externalLabels(drop), drop: drop}
	start, end, step := time.UnixMilli(t0), time.UnixMilli(t0+n*15_000), 30*time.Second
	fused0 := testutil.ToFloat64(s.queryAggregationsFused)
	for _, query := range []string{"sum by (host) (m offset 1m)", "max by (gpu) (m offset 90s)", "count by (host) (m offset 2m)"} {
		a, ok := aggregationOf(query)
		if !ok || a.fusable {
			t.Fatalf("%s: recognised %v, fusable %v", query, ok, a.fusable)
		}
		got, err := queryRange(t, c, &querypb.QueryRangeRequest{
			Query: query, StartTimeSeconds: start.Unix(), EndTimeSeconds: end.Unix(), IntervalSeconds: 30, ReplicaLabels: []string{"replica"},
		})
		if err != nil {
			t.Fatal(err)
		}
		sameMatrix(t, query, got, engineRange(t, engine, view, query, start, end, step))
	}
	if got := testutil.ToFloat64(s.queryAggregationsFused) - fused0; got != 0 {
		t.Errorf("%v aggregations fused, want none", got)
	}
}

// TestFusedCellsBound: a fused pass whose groups times steps pass
// maxFusedCells gives way to the selector's evaluation, which answers.
func TestFusedCellsBound(t *testing.T) {
	// 4,000 series, each its own group, over 1,100 steps: 4.4M cells.
	var series []storage.Series
	for i := range 4000 {
		series = append(series, storage.NewListSeries(labels.FromStrings("__name__", "m", "i", fmt.Sprint(i)), []chunks.Sample{fsample{1_000_000, float64(i)}}))
	}
	data := listQueryable{series}
	s, engine, c := queryServerOver(t, data)
	view := &externalQueryable{q: data, s: s, ext: s.externalLabels(nil)}
	query := "sum by (i) (m)"
	got, err := queryRange(t, c, &querypb.QueryRangeRequest{Query: query, StartTimeSeconds: 1000, EndTimeSeconds: 1000 + 1099, IntervalSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	sameMatrix(t, query, got, engineRange(t, engine, view, query, time.Unix(1000, 0), time.Unix(2099, 0), time.Second))
	if n := testutil.ToFloat64(s.queryAggregationsFused); n != 0 {
		t.Errorf("%v aggregations fused past the bound", n)
	}
}

// BenchmarkFusedPair: what a node computes for the two halves of a
// distributed `avg by (host) (gpu_temp)` over 30 days of the hour tier at
// 1 h steps (one shard of BenchmarkThanosQuerier30d: 500 series, 125 groups
// of 4), once the tiers are read (the select's series are held in memory,
// as a shared select holds them): fused, one fused pass and both answers
// from it; evaluated, the selector's evaluation and the sum and the count
// aggregated from its matrix (the path before). The tier read and the gRPC
// answer, alike in both, are left out. cpu-s/op is the process's CPU per
// pair (getrusage).
func BenchmarkFusedPair(b *testing.B) {
	stitched, start, end := benchShard(b, 500)
	end = end.Add(-time.Second)
	step := time.Hour
	const lookback = 5 * time.Minute
	// The series the engine's select gets, read once.
	q, err := stitched.Querier(start.Add(-lookback).UnixMilli()+1, end.UnixMilli())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	set := q.Select(context.Background(), false, &storage.SelectHints{
		Start: start.Add(-lookback).UnixMilli() + 1, End: end.UnixMilli(), Step: step.Milliseconds(), Func: "sum", By: true, Grouping: []string{"host", "shard"},
	}, labels.MustNewMatcher(labels.MatchEqual, "__name__", "gpu_temp"))
	var held []storage.Series
	for set.Next() {
		held = append(held, set.At())
	}
	if set.Err() != nil || len(held) != 500 {
		b.Fatalf("%d series, %v", len(held), set.Err())
	}
	s, err := New(shardConfig(), nil, quiet(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	drop := dropSet([]string{"replica"})
	view := &externalQueryable{q: listQueryable{held}, s: s, ext: s.externalLabels(drop), drop: drop}
	qs := NewQueryServer(s, newEngine(0), view)
	defer qs.Close()
	opts := promql.NewPrometheusQueryOpts(false, 0, nil)
	sum, _ := aggregationOf("sum by (host, shard) (gpu_temp)")
	count, _ := aggregationOf("count by (host, shard) (gpu_temp)")
	b.Run("fused", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU(b)
		defer func() { b.ReportMetric((processCPU(b)-cpu0).Seconds()/float64(b.N), "cpu-s/op") }()
		for b.Loop() {
			r, err := qs.fuse(context.Background(), view, opts, sum, "sum by (host, shard) (gpu_temp)", start, end, step)
			if err != nil {
				b.Fatal(err)
			}
			if len(r.series(parser.SUM)) != 125 || len(r.series(parser.COUNT)) != 125 {
				b.Fatal("not 125 groups")
			}
		}
	})
	b.Run("evaluated", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU(b)
		defer func() { b.ReportMetric((processCPU(b)-cpu0).Seconds()/float64(b.N), "cpu-s/op") }()
		for b.Loop() {
			m, err := qs.evalSelector(context.Background(), view, opts, "gpu_temp", start, end, step)
			if err != nil {
				b.Fatal(err)
			}
			s1 := aggregate(sum, m.mat, start.UnixMilli(), end.UnixMilli(), step.Milliseconds())
			s2 := aggregate(count, m.mat, start.UnixMilli(), end.UnixMilli(), step.Milliseconds())
			if len(s1) != 125 || len(s2) != 125 {
				b.Fatal("not 125 groups")
			}
			for _, x := range []promql.Matrix{s1, s2} {
				if _, err := resultSeries(x); err != nil {
					b.Fatal(err)
				}
			}
			closeSelectorMatrix(m)
		}
	})
}

// TestFusedLookbackChecked: a fused pass whose idea of the engine's
// lookback is wrong by whole steps would select the wrong steps; its parts
// then do not cover the query's steps, and the request is answered as
// before, the engine's answer.
func TestFusedLookbackChecked(t *testing.T) {
	const t0, n = int64(1_000_000), int64(240)
	data := exactSeries(t0, n)
	s, err := New(shardConfig(), nil, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	engine := newEngine(0) // lookback 5 m
	qs := NewQueryServer(s, engine, data)
	t.Cleanup(qs.Close)
	qs.lookback = 10 * time.Minute // as if read wrong
	c := querypb.NewQueryClient(serve(t, s, qs))
	view := &externalQueryable{q: data, s: s, ext: s.externalLabels(nil)}
	start, end, step := time.UnixMilli(t0), time.UnixMilli(t0+n*15_000), 5*time.Minute
	query := "sum by (host) (m)"
	got, err := queryRange(t, c, &querypb.QueryRangeRequest{Query: query, StartTimeSeconds: start.Unix(), EndTimeSeconds: end.Unix(), IntervalSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	sameMatrix(t, query, got, engineRange(t, engine, view, query, start, end, step))
	if n := testutil.ToFloat64(s.queryAggregationsFused); n != 0 {
		t.Errorf("%v aggregations fused with the wrong lookback", n)
	}
	qs.lookback = 0 // read from the engine again
	if _, err := queryRange(t, c, &querypb.QueryRangeRequest{Query: query, StartTimeSeconds: start.Unix(), EndTimeSeconds: end.Unix(), IntervalSeconds: 300}); err != nil {
		t.Fatal(err)
	}
	if qs.lookback != 5*time.Minute || testutil.ToFloat64(s.queryAggregationsFused) != 1 {
		t.Errorf("lookback read as %v, %v aggregations fused; want 5m and 1", qs.lookback, testutil.ToFloat64(s.queryAggregationsFused))
	}
}
