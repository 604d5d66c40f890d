package storeapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/thanos-io/thanos/pkg/api/query/querypb"

	"github.com/strata-dev/strata/query"
)

// exactSeries is a queryable of series whose sums depend on the order they
// are added in (values over 30 orders of magnitude, and ±1e308, which
// overflow or cancel by their order), with gaps, NaN, ±Inf and stale
// markers, listed in no sorted order (the engine aggregates in
// the select's order), including a pair whose order the external labels
// reverse ({host="h0"} sorts before {host="h0",rack="r"}; with shard="1"
// added, rack sorts before shard).
func exactSeries(t0, n int64) listQueryable {
	r := rand.New(rand.NewPCG(1, 2))
	var out []storage.Series
	add := func(l labels.Labels) {
		var ss []chunks.Sample
		for i := range n {
			ts := t0 + i*15_000
			switch k := r.IntN(40); {
			case k < 4:
				continue // a gap
			case k == 4:
				ss = append(ss, fsample{ts, math.Float64frombits(value.StaleNaN)})
			case k == 5:
				ss = append(ss, fsample{ts, math.NaN()})
			case k == 6:
				ss = append(ss, fsample{ts, math.Inf(1 - 2*r.IntN(2))})
			case k < 10:
				// Two of these overflow to ±Inf or cancel, by their order.
				ss = append(ss, fsample{ts, 1e308 * float64(1-2*r.IntN(2))})
			default:
				ss = append(ss, fsample{ts, r.NormFloat64() * math.Pow(10, float64(r.IntN(30)-10))})
			}
		}
		out = append(out, storage.NewListSeries(l, ss))
	}
	add(labels.FromStrings("__name__", "m", "host", "h0"))
	add(labels.FromStrings("__name__", "m", "host", "h0", "rack", "r"))
	for i := range 90 {
		add(labels.FromStrings("__name__", "m", "host", fmt.Sprintf("h%d", i%3), "gpu", fmt.Sprint(i), "replica", "a"))
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return listQueryable{out}
}

// sameFloat reports whether two floats are the same to the bit, or both
// NaN: which NaN an operation on two NaNs returns depends on the order the
// compiler puts its operands in (it differs in race builds), and no API
// tells NaNs apart (JSON writes "NaN").
func sameFloat(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || math.IsNaN(a) && math.IsNaN(b)
}

// queryServerOver serves the Query API of a shard-1 node over data.
func queryServerOver(t *testing.T, data storage.Queryable) (*Server, *promql.Engine, querypb.QueryClient) {
	t.Helper()
	s, err := New(shardConfig(), nil, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	engine := newEngine(0)
	qs := NewQueryServer(s, engine, data)
	t.Cleanup(qs.Close)
	return s, engine, querypb.NewQueryClient(serve(t, s, qs))
}

// TestPushedAggregationsExact: sum, count, min and max by a selector,
// evaluated from the selector's shared matrix, equal to the bit what the
// engine answers evaluating the same requests on its own, alone and as
// pairs sent at once (as a distributed Querier sends an avg's sum and
// count); and the data is such that aggregating in another order than the
// engine's would answer differently.
func TestPushedAggregationsExact(t *testing.T) {
	const t0, n = int64(1_000_000), int64(240)
	data := exactSeries(t0, n)
	s, engine, c := queryServerOver(t, data)
	drop := dropSet([]string{"replica"})
	view := &externalQueryable{q: data, s: s, ext: s.externalLabels(drop), drop: drop}
	start, end, step := time.UnixMilli(t0), time.UnixMilli(t0+n*15_000), 30*time.Second

	want := func(query string) promql.Matrix {
		t.Helper()
		return engineRange(t, engine, view, query, start, end, step)
	}
	check := func(query string, got queryAnswer) {
		t.Helper()
		sameMatrix(t, query, got, want(query))
	}
	ask := func(query string) queryAnswer {
		a, err := queryRange(t, c, &querypb.QueryRangeRequest{
			Query: query, StartTimeSeconds: start.Unix(), EndTimeSeconds: end.Unix(),
			IntervalSeconds: int64(step / time.Second), ReplicaLabels: []string{"replica"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	shared0, fused0 := testutil.ToFloat64(s.queryEvaluationsShared), testutil.ToFloat64(s.queryAggregationsFused)
	for _, grouping := range []string{"by (host, shard)", "by ()", "by (gpu)", "by (rack)"} {
		for _, op := range []string{"sum", "count", "min", "max"} {
			query := fmt.Sprintf("%s %s (m)", op, grouping)
			check(query, ask(query))
		}
		// An avg's halves, at once: one evaluates, the other aggregates its
		// matrix.
		pair := []string{"sum " + grouping + " (m)", "count " + grouping + " (m)"}
		answers := make([]queryAnswer, 2)
		var wg sync.WaitGroup
		for i, q := range pair {
			wg.Go(func() { answers[i] = ask(q) })
		}
		wg.Wait()
		for i, q := range pair {
			check(q, answers[i])
		}
	}
	if testutil.ToFloat64(s.queryEvaluationsShared) == shared0 {
		t.Error("no aggregation was computed from another request's evaluation")
	}
	if got := testutil.ToFloat64(s.queryAggregationsFused) - fused0; got != 4*6 {
		t.Errorf("%v aggregations answered by the fused path, want all %d", got, 4*6)
	}

	// The test can tell the order apart: the sums aggregated in label order
	// differ from the engine's somewhere.
	inner := want("m")
	sort.Sort(inner)
	a, ok := aggregationOf("sum by (host, shard) (m)")
	if !ok {
		t.Fatal("not recognised")
	}
	sorted := aggregate(a, inner, t0, t0+n*15_000, step.Milliseconds())
	w := want("sum by (host, shard) (m)")
	differ := false
	for i := range w {
		for j := range w[i].Floats {
			differ = differ || !sameFloat(w[i].Floats[j].F, sorted[i].Floats[j].F)
		}
	}
	if !differ {
		t.Error("summing in label order answers as the engine does: the data cannot tell a wrong order")
	}
}

// TestPushedAggregationFallsBack: what the pushed path cannot aggregate
// (native histograms, aggregations it does not know) the engine
// evaluates as written.
func TestPushedAggregationFallsBack(t *testing.T) {
	h := &histogram.Histogram{Count: 3, Sum: 2, Schema: 0, PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{3}}
	hs := storage.NewListSeries(labels.FromStrings("__name__", "m", "host", "h9"), []chunks.Sample{hsample{1_000_000, h}, hsample{1_015_000, h}})
	data := exactSeries(1_000_000, 8)
	data.series = append(data.series, hs)
	s, engine, c := queryServerOver(t, data)
	for _, query := range []string{"sum by (host) (m)", "count by (host) (m)", "avg by (host) (m)", "sum without (gpu) (m)"} {
		got, err := queryRange(t, c, &querypb.QueryRangeRequest{Query: query, StartTimeSeconds: 1000, EndTimeSeconds: 1120, IntervalSeconds: 15})
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		w := engineRange(t, engine, &externalQueryable{q: data, s: s, ext: s.externalLabels(nil)}, query, time.Unix(1000, 0), time.Unix(1120, 0), 15*time.Second)
		if len(got.series) != len(w) {
			t.Fatalf("%s: %d series, want %d", query, len(got.series), len(w))
		}
		for i, ws := range w {
			g := got.series[i]
			if len(g.Samples) != len(ws.Floats) || len(g.Histograms) != len(ws.Histograms) {
				t.Fatalf("%s %s: %d floats and %d histograms, want %d and %d", query, ws.Metric, len(g.Samples), len(g.Histograms), len(ws.Floats), len(ws.Histograms))
			}
			for j, p := range ws.Floats {
				if !sameFloat(g.Samples[j].Value, p.F) {
					t.Fatalf("%s %s: sample %d is %v, want %v", query, ws.Metric, j, g.Samples[j].Value, p.F)
				}
			}
		}
	}
	if _, ok := aggregationOf("sum by (host) (m)"); !ok {
		t.Error("sum by (host) (m) not recognised")
	}
	for _, q := range []string{"avg by (host) (m)", "sum without (gpu) (m)", "sum by (host) (rate(m[1m]))", "topk(2, m)", "sum(m) / 2"} {
		if _, ok := aggregationOf(q); ok {
			t.Errorf("%s recognised as a pushed aggregation", q)
		}
	}
}

// hsample is a native histogram sample.
type hsample struct {
	t int64
	h *histogram.Histogram
}

func (s hsample) T() int64                      { return s.t }
func (s hsample) ST() int64                     { return 0 }
func (s hsample) F() float64                    { return 0 }
func (s hsample) H() *histogram.Histogram       { return s.h }
func (s hsample) FH() *histogram.FloatHistogram { return nil }
func (s hsample) Copy() chunks.Sample           { return hsample{s.t, s.h.Copy()} }
func (s hsample) Type() chunkenc.ValueType      { return chunkenc.ValHistogram }

// chunklessQueryable is a queryable the query package's API takes (it
// serves no remote read here).
type chunklessQueryable struct{ storage.Queryable }

func (chunklessQueryable) ChunkQuerier(int64, int64) (storage.ChunkQuerier, error) {
	return nil, errors.New("no chunk querier")
}

// TestPushedAggregationsSplit: over the query package's engine, which
// splits a long range query in parts that select each on their own, the
// pushed aggregations are answered by a fused pass a part (the selector's
// evaluation, the path they fall back to, merges the parts' orders) and
// answer the engine's answer to the bit.
func TestPushedAggregationsSplit(t *testing.T) {
	const t0, n = int64(1_000_000), int64(300)
	data := exactSeries(t0, n)
	cfg := query.DefaultConfig()
	cfg.SplitParallelism = 2
	api, err := query.New(cfg, chunklessQueryable{data}, nil, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	s, err := New(shardConfig(), nil, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	qs := NewQueryServer(s, api.Engine(), data)
	t.Cleanup(qs.Close)
	c := querypb.NewQueryClient(serve(t, s, qs))
	drop := dropSet([]string{"replica"})
	view := &externalQueryable{q: data, s: s, ext: s.externalLabels(drop), drop: drop}
	// 4,501 steps of 1 s: split in two parts of at least 1,000.
	start, end, step := time.UnixMilli(t0), time.UnixMilli(t0+n*15_000), time.Second

	// The selector's evaluation is aggregated, not handed to the engine.
	rec := &orderRecorder{q: view}
	qry, err := api.Engine().NewRangeQuery(context.Background(), rec, nil, "m", start, end, step)
	if err != nil {
		t.Fatal(err)
	}
	if res := qry.Exec(context.Background()); res.Err != nil {
		t.Fatal(res.Err)
	}
	qry.Close()
	if got := len(rec.result()); got != 2 {
		t.Fatalf("%d selects, want one a part of 2", got)
	}
	m, err := qs.evalSelector(context.Background(), view, promql.NewPrometheusQueryOpts(false, 0, nil), "m", start, end, step)
	closeSelectorMatrix(m)
	if err != nil {
		t.Fatalf("the split selector's evaluation: %v", err)
	}

	// The fused path runs a pass a part.
	agg, _ := aggregationOf("sum by (host, shard) (m)")
	r, err := qs.fuse(context.Background(), view, promql.NewPrometheusQueryOpts(false, 0, nil), agg, "sum by (host, shard) (m)", start, end, step)
	if err != nil {
		t.Fatalf("the split fused pass: %v", err)
	}
	if len(r.parts) != 2 || r.parts[0].first != 0 || r.parts[1].first != r.parts[0].n || r.parts[1].first+r.parts[1].n != 4501 {
		t.Fatalf("fused parts %+v, want two covering the 4,501 steps", r.parts)
	}
	fused0 := testutil.ToFloat64(s.queryAggregationsFused)

	engine := newEngine(0) // unsplit: the split engine's answers are its
	for _, op := range []string{"sum", "count", "min", "max"} {
		expr := op + " by (host, shard) (m)"
		got, err := queryRange(t, c, &querypb.QueryRangeRequest{
			Query: expr, StartTimeSeconds: start.Unix(), EndTimeSeconds: end.Unix(), IntervalSeconds: 1, ReplicaLabels: []string{"replica"},
		})
		if err != nil {
			t.Fatal(err)
		}
		w := engineRange(t, engine, view, expr, start, end, step)
		if len(got.series) != len(w) {
			t.Fatalf("%s: %d series, want %d", expr, len(got.series), len(w))
		}
		for i, ws := range w {
			g := got.series[i]
			if len(g.Samples) != len(ws.Floats) {
				t.Fatalf("%s %s: %d samples, want %d", expr, ws.Metric, len(g.Samples), len(ws.Floats))
			}
			for j, p := range ws.Floats {
				if gs := g.Samples[j]; gs.Timestamp != p.T || !sameFloat(gs.Value, p.F) {
					t.Fatalf("%s %s: sample %d is %v@%d, want %v@%d", expr, ws.Metric, j, gs.Value, gs.Timestamp, p.F, p.T)
				}
			}
		}
	}
	if got := testutil.ToFloat64(s.queryAggregationsFused) - fused0; got != 4 {
		t.Errorf("%v aggregations fused, want 4", got)
	}
}

// TestMergeOrders: the merged order keeps every list's; lists that disagree
// or repeat a series have none.
func TestMergeOrders(t *testing.T) {
	l := func(names ...string) []labels.Labels {
		out := make([]labels.Labels, len(names))
		for i, n := range names {
			out[i] = labels.FromStrings("s", n)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		lists [][]labels.Labels
		ok    bool
	}{
		{"one", [][]labels.Labels{l("b", "a")}, true},
		{"overlapping", [][]labels.Labels{l("c", "a", "d"), l("c", "b", "d", "e")}, true},
		{"disjoint", [][]labels.Labels{l("b", "a"), l("d", "c")}, true},
		{"none", nil, true},
		{"disagree", [][]labels.Labels{l("a", "b"), l("b", "a")}, false},
		{"twice", [][]labels.Labels{l("a", "b", "a"), l("c")}, false},
	} {
		got, ok := mergeOrders(tc.lists)
		if ok != tc.ok {
			t.Fatalf("%s: merged %v, want %v", tc.name, ok, tc.ok)
		}
		if !ok {
			continue
		}
		pos := map[string]int{}
		for i, g := range got {
			pos[g.String()] = i
		}
		for _, list := range tc.lists {
			for i := 1; i < len(list); i++ {
				if pos[list[i-1].String()] >= pos[list[i].String()] {
					t.Errorf("%s: %v does not keep %v", tc.name, got, list)
				}
			}
		}
	}
}

// engineRange is the engine's answer to a range query over q, the reference
// the pushed aggregations are held to. The query is closed when the test
// ends, so the matrix stays valid.
func engineRange(t *testing.T, engine promql.QueryEngine, q storage.Queryable, query string, start, end time.Time, step time.Duration) promql.Matrix {
	t.Helper()
	qry, err := engine.NewRangeQuery(context.Background(), q, nil, query, start, end, step)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qry.Close)
	res := qry.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return res.Value.(promql.Matrix)
}

// BenchmarkAggregate: aggregating one shard's matrix for the 30-day
// benchmark (500 series, 720 steps of 1 h, 125 groups of 4 series, as
// `op by (host, shard) (gpu_temp)`), the work a node does per pushed
// aggregation once the selector is evaluated.
func BenchmarkAggregate(b *testing.B) {
	const series, steps, step = 500, 720, int64(3_600_000)
	start := int64(1_700_000_000_000)
	mat := make(promql.Matrix, series)
	for s := range mat {
		mat[s].Metric = labels.FromStrings("__name__", "gpu_temp", "gpu", fmt.Sprint(s%4), "host", fmt.Sprintf("node-%03d", s/4), "shard", "0")
		for k := range steps {
			mat[s].Floats = append(mat[s].Floats, promql.FPoint{T: start + int64(k)*step, F: float64(40 + (s+k)%30)})
		}
	}
	for _, op := range []string{"sum", "count", "max"} {
		a, ok := aggregationOf(op + " by (host, shard) (gpu_temp)")
		if !ok {
			b.Fatal("not recognised")
		}
		b.Run(op, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if out := aggregate(a, mat, start, start+(steps-1)*step, step); len(out) != series/4 {
					b.Fatalf("%d series", len(out))
				}
			}
		})
	}
}
