package diagnose

import (
	"context"
	"errors"
	"maps"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/rulegen"
	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/tiers"
)

// TestReadReach: how far back each name is read, as PromQL selects it: a
// range without the lookback, a plain selector with it, offsets and
// subqueries added, the longest reader winning, an @ modifier reaching
// anywhere, and no reach (every window) once a selector has no name.
func TestReadReach(t *testing.T) {
	const lookback = 5 * time.Minute
	p := newParser()
	parse := func(qs ...string) []parser.Expr {
		var out []parser.Expr
		for _, q := range qs {
			e, err := p.ParseExpr(q)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		return out
	}
	r := newReadReach(parse(
		`rate(req_total[3m])`,
		`temp > 80`,
		`max_over_time(temp[2m] offset 1m)`,
		`rate(late_total[3m] offset 10m)`,
		`max_over_time(rate(sub_total[1m])[10m:1m])`,
		`{__name__=~"dcgm_.+"}`,
		`rate(dcgm_x_total[2m])`,
		`pinned @ 100`,
		`strata:recorded[1h]`,
	), map[string]bool{"strata:recorded": true}, lookback)
	for name, want := range map[string]time.Duration{
		"req_total":    3 * time.Minute,
		"temp":         lookback, // longer than 2m + 1m
		"late_total":   13 * time.Minute,
		"sub_total":    11 * time.Minute,
		"dcgm_x_total": lookback, // the regular expression's plain selector
		"dcgm_temp":    lookback,
	} {
		if got := r.of(name); got != want.Milliseconds() {
			t.Errorf("%s: reach %s, want %s", name, time.Duration(got)*time.Millisecond, want)
		}
	}
	for _, name := range []string{"pinned", "unread", "strata:recorded"} {
		if got := r.of(name); got != math.MaxInt64 {
			t.Errorf("%s: reach %d ms, want every window", name, got)
		}
	}
	if from := r.fromFunc(1_000_000); from("req_total") != 1_000_000-(3*time.Minute).Milliseconds() || from("pinned") != math.MinInt64 {
		t.Errorf("fromFunc: req_total from %d, pinned from %d", from("req_total"), from("pinned"))
	}
	if r := newReadReach(parse(`rate(req_total[3m])`, `{job="x"}`), nil, lookback); r != nil {
		t.Error("a selector without a name: reach set, want none (every window)")
	}
	if r := newReadReach([]parser.Expr{nil}, nil, lookback); r != nil {
		t.Error("an expression that does not parse: reach set, want none (every window)")
	}
}

// TestReadColumns: the window columns each name is read with are those of
// every function around its selectors, none but a plain selector's when a
// binary operation stands between, every column for a name no selector
// names.
func TestReadColumns(t *testing.T) {
	p := newParser()
	var exprs []parser.Expr
	for _, q := range []string{
		`sum(rate(req_total[3m])) / sum(rate(req_total[3m] offset 1h))`,
		`max_over_time(temp[5m]) > 80`,
		`avg by (pod) (label_replace(util, "x", "$1", "y", "(.+)"))`,
		`max_over_time((util > 0)[10m:1m])`,
		`{__name__=~"dcgm_.+"}`,
	} {
		e, err := p.ParseExpr(q)
		if err != nil {
			t.Fatal(err)
		}
		exprs = append(exprs, e)
	}
	r := newReadReach(exprs, nil, 5*time.Minute)
	plain := tiers.ColumnsForFunc("")
	for name, want := range map[string]tiers.WindowColumns{
		"req_total": tiers.ColumnsForFunc("rate") | plain,
		"temp":      tiers.ColumnsForFunc("max_over_time") | plain,
		"util":      tiers.ColumnsForFunc("max_over_time") | plain, // under a subquery: the outer function's hint
		"dcgm_temp": plain,
		"unread":    tiers.AllWindowColumns,
	} {
		if got := r.reads(0).Columns(name); got != want {
			t.Errorf("%s: columns %b, want %b", name, got, want)
		}
	}
	if plain == tiers.AllWindowColumns || tiers.ColumnsForFunc("rate") == tiers.AllWindowColumns {
		t.Error("a plain selector or rate reads every column: nothing to prune")
	}
}

// TestCanonicalRulesOverPrunedColumns: every canonical rule evaluated over
// the snapshot the live engine reads (each name's windows cut to its
// reach, only the columns its selectors read) equals its evaluation over
// the snapshot of every window and column, bit for bit, at the newest
// final minute of a live pipeline with a fault running; and the pruned
// snapshot fails a query that reads a column it did not load.
func TestCanonicalRulesOverPrunedColumns(t *testing.T) {
	start := simStart
	scfg := smallCluster(sim.FaultSpec{Kind: sim.KindKVCacheStorm, Node: 0, GPU: gpu(2), At: 15 * time.Minute, Duration: 20 * time.Minute})
	lp := newLivePipeline(t, DefaultConfig(), start.Add(time.Hour))
	lp.feed(t, scfg, start.Add(30*time.Minute))
	e := lp.engine
	ctx := context.Background()
	tm, whole := newestWholeSnapshot(t, lp)
	pruned, err := e.view.SnapshotFor(ctx, tm-e.need, tm, e.reach.reads(tm), e.readMatchers()...)
	if err != nil {
		t.Fatal(err)
	}
	eval := func(q storage.Queryable, qs string) (map[string]uint64, error) {
		v, err := rules.EngineQueryFunc(e.promql, rulegen.RenamingQueryable(mergeQueryable{q, e.scratch}))(ctx, qs, time.UnixMilli(tm))
		out := map[string]uint64{}
		for _, s := range v {
			out[s.Metric.String()] = math.Float64bits(s.F)
		}
		return out, err
	}
	rulesRun, nonEmpty := 0, 0
	for _, g := range e.groups {
		for _, r := range g.Rules() {
			qs := e.forms.Internal(r.Query().String())
			want, err := eval(whole, qs)
			if err != nil {
				t.Fatalf("%s over every column: %v", r.Name(), err)
			}
			got, err := eval(pruned, qs)
			if err != nil {
				t.Errorf("%s over the pruned snapshot: %v", r.Name(), err)
				continue
			}
			rulesRun++
			if len(want) > 0 {
				nonEmpty++
			}
			if !maps.Equal(got, want) {
				t.Errorf("%s: %v over the pruned snapshot, %v over every column", r.Name(), got, want)
			}
		}
	}
	t.Logf("%d rules, %d non-empty", rulesRun, nonEmpty)
	if nonEmpty < rulesRun/4 {
		t.Errorf("only %d of %d rules have a result: the comparison is mostly vacuous", nonEmpty, rulesRun)
	}
	// The signals read their counters through rate, not sum_over_time.
	if _, err := eval(pruned, `sum(sum_over_time(vllm:request_success_total[3m]))`); !errors.Is(err, tiers.ErrColumnNotLoaded) {
		t.Errorf("a column not loaded: %v, want ErrColumnNotLoaded", err)
	}
}

// BenchmarkEngineSnapshotFleet is the live engine's minute snapshot of a
// fleet's open windows (18 nodes x 8 GPUs by default, see fleetNodes),
// what it holds while the minute's rules evaluate: of each series the
// windows its rules reach with every column (reach), or only the columns
// the rules' functions read (reach+columns), read from the spill or from
// the raw tier (read=, see newFleetPipeline). B/op is what one snapshot
// allocates, held-B what it holds once read (the live heap with it less
// the live heap without it).
func BenchmarkEngineSnapshotFleet(b *testing.B) {
	for _, read := range []string{readSpilled, readRaw} {
		b.Run("read="+read, func(b *testing.B) { benchEngineSnapshotFleet(b, newFleetPipeline(b, fleetNodes(), 14, read)) })
	}
}

func benchEngineSnapshotFleet(b *testing.B, fp *fleetPipeline) {
	e, err := New(DefaultConfig(), Options{Minute: fp.minute, Open: fp.pipe, Registerer: prometheus.NewRegistry(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tm := fp.final.UnixMilli()
	reads := e.reach.reads(tm)
	for _, c := range []struct {
		name  string
		reads tiers.SnapshotReads
	}{
		{"reach", tiers.SnapshotReads{From: reads.From}},
		{"reach+columns", reads},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var snap *tiers.MinuteSnapshot
			for b.Loop() {
				if snap, err = e.view.SnapshotFor(ctx, tm-e.need, tm, c.reads, e.readMatchers()...); err != nil {
					b.Fatal(err)
				}
			}
			with := liveHeap()
			b.ReportMetric(float64(snap.Series()), "series")
			runtime.KeepAlive(snap) // dead from here: the next collection frees it
			b.ReportMetric(float64(with-liveHeap()), "held-B")
		})
	}
}

// liveHeap is the bytes of live heap objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
