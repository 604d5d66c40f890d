package rulegen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
)

// faultyScrapes is how many 15 s scrapes appendFaultyFleet appends, from t0.
const faultyScrapes = 13

// faultyTimes are evaluation times over appendFaultyFleet's fleet: on
// scrapes, between them, and after the last one (within the lookback, at its
// edge, past it).
var faultyTimes = []time.Time{
	t0.Add(time.Minute), t0.Add(90 * time.Second), t0.Add(127 * time.Second), t0.Add(3 * time.Minute),
	t0.Add(4 * time.Minute), t0.Add(8 * time.Minute), t0.Add(8*time.Minute + time.Millisecond),
}

// The faults of appendFaultyFleet's series, in the order each family's
// series take them.
const (
	faultNone     = iota
	faultOverflow // near the largest float: an average of two overflows
	faultNaN
	faultStale // a stale marker, then a gap, then samples again
	faultReset // a counter reset
	faultGap
	faultPosInf
	faultNegInf
	faultEnd  // ends with a stale marker
	faultLate // starts late
	faults
)

// appendFaultyFleet appends a 15 s scrape sequence of fleet from t0 in
// which the series of each family take every fault in turn. Every serving
// series gets a second data-parallel rank (engine label "1") with the next
// fault (or an overflow too), so sums, averages and maxima add several
// series per group, faulty ones among clean ones.
func (e *evalEnv) appendFaultyFleet(fleet []fleetSeries) {
	e.t.Helper()
	type faulty struct {
		fleetSeries
		fault int
	}
	var all []faulty
	seen := map[string]int{}
	for _, s := range fleet {
		name := s.lset.Get("__name__")
		fault := seen[name] % faults
		seen[name]++
		all = append(all, faulty{s, fault})
		if s.lset.Has("model_name") {
			b := labels.NewBuilder(s.lset)
			b.Set("engine", "1")
			next := (fault + 1) % faults
			if fault == faultOverflow {
				next = faultOverflow
			}
			all = append(all, faulty{fleetSeries{lset: b.Labels(), from: s.from*1.37 + 1e-3, to: s.to*1.37 + 0.1}, next})
		}
	}
	stale := math.Float64frombits(value.StaleNaN)
	for k := range faultyScrapes {
		ts := t0.Add(time.Duration(k) * 15 * time.Second).UnixMilli()
		app := e.raw.Appender(context.Background())
		for _, s := range all {
			v := s.from + (s.to-s.from)*float64(k)/(faultyScrapes-1)
			switch s.fault {
			case faultOverflow:
				if k >= 10 {
					v = 1.7e308
				}
			case faultNaN:
				if k == 4 || k == faultyScrapes-1 {
					v = math.NaN()
				}
			case faultStale:
				switch {
				case k == 5:
					v = stale
				case k > 5 && k < 8:
					continue
				}
			case faultReset:
				if k >= 6 {
					v *= 0.1
				}
			case faultGap:
				if k >= 3 && k <= 6 {
					continue
				}
			case faultPosInf:
				if k == 7 {
					v = math.Inf(1)
				}
			case faultNegInf:
				if k == 2 {
					v = math.Inf(-1)
				}
			case faultEnd:
				if k == faultyScrapes-1 {
					v = stale
				}
			case faultLate:
				if k < 9 {
					continue
				}
			}
			if _, err := app.Append(0, s.lset, ts, v); err != nil {
				e.t.Fatalf("append %s: %v", s.lset, err)
			}
		}
		if err := app.Commit(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// canonicalForms is the internal forms of the canonical recording rules
// (rate window 1m) over e's catalogue, and the rules' queries.
func canonicalForms(t *testing.T, e *evalEnv) (*InternalForms, []string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.RateWindow = time.Minute
	rs, err := RecordingRules(e.cat, cfg)
	if err != nil {
		t.Fatal(err)
	}
	forms := NewInternalForms()
	exprs := make([]string, len(rs))
	for i, r := range rs {
		exprs[i] = r.Query().String()
	}
	if err := forms.Set(parser.NewParser(parser.Options{}), exprs); err != nil {
		t.Fatal(err)
	}
	return forms, exprs
}

// TestFusedPassMatchesEngine evaluates every aggregation of the canonical
// rules that a fused pass computes both ways, the pass and the engine, over
// the same storage at each of faultyTimes, and requires the same series in
// the same order with the same values to the bit; and the same for every
// histogram_quantile of fused bucket sums (in any order: the engine's is a
// map's).
func TestFusedPassMatchesEngine(t *testing.T) {
	e := newEvalEnv(t)
	e.appendFaultyFleet(mixedFleet(t, e, 8000))
	forms, _ := canonicalForms(t, e)
	const lookback = 5 * time.Minute
	nq := newestFirst(e.raw, lookback, NewestWindow)
	q := RenamingQueryable(nq)
	covered := map[string]int{} // shape -> non-empty results compared
	sc := &passScratch{}        // every pass reuses the last one's scratch, as in an evaluation
	for id, m := range forms.shared {
		fa := m.fused
		if fa == nil {
			continue
		}
		shape := fa.op.String()
		if fa.rateRange > 0 {
			shape += " of rate"
		}
		for _, ts := range faultyTimes {
			got, err := fa.eval(t.Context(), nq, ts, lookback, sc)
			if err != nil {
				t.Fatalf("%s at %s: %v", forms.shared[id].query, ts, err)
			}
			want := e.queryOver(q, forms.shared[id].query, ts)
			if g, w := vectorBits(got.vector()), vectorBits(want); g != w {
				t.Errorf("%s at %s:\nfused  %s\nengine %s", forms.shared[id].query, ts, g, w)
			}
			if len(want) > 0 {
				covered[shape]++
			}
		}
	}
	// The quantiles of fused bucket sums, in the engine's order (a map's:
	// compared sorted).
	for _, m := range forms.shared {
		fq := m.quantile
		if fq == nil {
			continue
		}
		for _, ts := range faultyTimes {
			in, err := forms.shared[fq.of].fused.eval(t.Context(), nq, ts, lookback, sc)
			if err != nil {
				t.Fatal(err)
			}
			if in.sums == nil {
				t.Fatalf("%s at %s: the bucket sum's pass returned no bucketSums", m.query, ts)
			}
			want := e.queryOver(q, m.query, ts)
			slices.SortFunc(want, func(a, b promql.Sample) int { return labels.Compare(a.Metric, b.Metric) })
			// From the pass's bucket sums, and from their vector (a
			// bucket sum the engine evaluated).
			for _, from := range []memoValue{in, {vec: in.vector()}} {
				got, ok := fq.eval(from)
				if !ok {
					t.Fatalf("%s at %s: left to the engine", m.query, ts)
				}
				slices.SortFunc(got, func(a, b promql.Sample) int { return labels.Compare(a.Metric, b.Metric) })
				if g, w := vectorBits(got), vectorBits(want); g != w {
					t.Errorf("%s at %s (sums %v):\nfused  %s\nengine %s", m.query, ts, from.sums != nil, g, w)
				}
			}
			if len(want) > 0 {
				covered["histogram_quantile"]++
			}
		}
	}
	for _, shape := range []string{"avg", "max", "sum", "sum of rate", "histogram_quantile"} {
		if covered[shape] < 5 {
			t.Errorf("%s: %d non-empty results compared: the fleet does not exercise it", shape, covered[shape])
		}
	}
}

// TestFusedPassUntrimmed: a fused pass selects untrimmed, so the head hands
// it samples outside the range the engine reads (before the lookback, after
// the evaluation time); it must still take what the engine takes. Series
// whose gap is longer than the lookback, evaluated inside the gap, at its
// edges and a millisecond either side of a sample.
func TestFusedPassUntrimmed(t *testing.T) {
	e := newEvalEnv(t)
	const lookback = 5 * time.Minute
	// pod a: every 15 s for a minute, nothing for ten, every 15 s again;
	// pod b: the same a minute later; pod c: one sample only.
	app := e.raw.Appender(context.Background())
	for _, s := range []struct {
		pod   string
		start time.Duration
	}{{"a", 0}, {"b", time.Minute}} {
		for _, d := range []time.Duration{0, 15 * time.Second, 30 * time.Second, 45 * time.Second, time.Minute, 11 * time.Minute, 11*time.Minute + 15*time.Second} {
			ts := t0.Add(s.start + d)
			for _, name := range []string{"gauge", "counter_total"} {
				if _, err := app.Append(0, labels.FromStrings("__name__", name, "pod", s.pod), ts.UnixMilli(), float64(d/time.Second)+1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if _, err := app.Append(0, labels.FromStrings("__name__", "gauge", "pod", "c"), t0.Add(3*time.Minute).UnixMilli(), 7); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	nq := newestFirst(e.raw, lookback, NewestWindow)
	q := RenamingQueryable(nq)
	nonEmpty := 0
	for _, qs := range []string{`sum by (pod) (gauge)`, `max by (pod) (gauge)`, `sum by (pod) (rate(counter_total[2m]))`} {
		expr, err := p.ParseExpr(qs)
		if err != nil {
			t.Fatal(err)
		}
		fa := fusable(expr.(*parser.AggregateExpr))
		if fa == nil {
			t.Fatalf("%s: not fusable", qs)
		}
		for _, at := range []time.Duration{time.Minute, 2 * time.Minute, 6 * time.Minute, 6*time.Minute + time.Millisecond, 7*time.Minute - time.Millisecond, 7 * time.Minute, 7*time.Minute + time.Millisecond, 8 * time.Minute, 11*time.Minute - time.Millisecond, 11 * time.Minute, 12*time.Minute - time.Millisecond} {
			ts := t0.Add(at)
			got, err := fa.eval(t.Context(), nq, ts, lookback, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := e.queryOver(q, qs, ts)
			if g, w := vectorBits(got.vector()), vectorBits(want); g != w {
				t.Errorf("%s at +%s:\nfused  %s\nengine %s", qs, at, g, w)
			}
			nonEmpty += len(want)
		}
	}
	if nonEmpty < 20 {
		t.Fatalf("only %d samples compared", nonEmpty)
	}
}

// TestFusedPassLeavesHistograms: a selector whose series hold native
// histograms is left to the engine.
func TestFusedPassLeavesHistograms(t *testing.T) {
	e := newEvalEnv(t)
	appendNHCB(t, e, "vllm_v1_t0_healthy.prom", t0)
	appendNHCB(t, e, "vllm_v1_t1_kv_storm.prom", t1)
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(`sum by (pod) (rate(vllm:time_to_first_token_seconds[2m]))`)
	if err != nil {
		t.Fatal(err)
	}
	fa := fusable(expr.(*parser.AggregateExpr))
	if fa == nil {
		t.Fatal("not fusable")
	}
	if _, err := fa.eval(t.Context(), e.raw, t1, 5*time.Minute, nil); !errors.Is(err, errNotFused) {
		t.Fatalf("got %v, want errNotFused", err)
	}
}

// TestFusedRulesMatchExported evaluates the canonical rule group as a
// Prometheus does (the exported form, every node by the engine) and as
// `strata serve` does (internal forms, the memo, the fused passes) over the
// faulty fleet at each of faultyTimes, and requires the same recorded
// series, values (to the bit) and stale markers.
func TestFusedRulesMatchExported(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RateWindow = time.Minute
	var got [2]map[string]string
	for i, internal := range []bool{false, true} {
		e := newEvalEnv(t)
		e.internal = internal
		e.appendFaultyFleet(mixedFleet(t, e, 8000))
		for _, ts := range faultyTimes {
			e.evalRules(cfg, ts)
		}
		got[i] = e.recordedBetween(faultyTimes[0], faultyTimes[len(faultyTimes)-1])
	}
	if len(got[0]) < 1000 {
		t.Fatalf("only %d recorded samples: the fleet does not exercise the rules", len(got[0]))
	}
	sameRecorded(t, got[0], got[1])
}

// vectorBits prints a vector's samples in order with their values' bits.
func vectorBits(v promql.Vector) string {
	var b strings.Builder
	for _, s := range v {
		fmt.Fprintf(&b, "%s@%d=%x", s.Metric, s.T, math.Float64bits(s.F))
		if s.H != nil {
			fmt.Fprintf(&b, "+histogram %s", s.H)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestMemoDropsAfterLastReader evaluates the canonical group over the faulty
// fleet as EvalIterationFunc does and requires that the memo evaluated each
// shared subexpression once (none dropped before its last reader) and holds
// nothing once the group is done (each dropped after it), with the same
// recorded series as a memo that keeps everything.
func TestMemoDropsAfterLastReader(t *testing.T) {
	var recorded [2]map[string]string
	for i, ordered := range []bool{true, false} {
		e := newEvalEnv(t)
		e.appendFaultyFleet(mixedFleet(t, e, 8000))
		g := e.group(DefaultConfig(), true)
		evaluated := 0
		for _, ts := range faultyTimes {
			m := newSharedMemo()
			m.ordered = ordered
			rules.DefaultEvalIterationFunc(context.WithValue(t.Context(), memoKey{}, m), g.Group, ts)
			for _, r := range g.Rules() {
				if err := r.LastError(); err != nil {
					t.Fatalf("rule %s: %v", r.Name(), err)
				}
			}
			for id, n := range m.evals {
				if n > 1 {
					t.Errorf("at %s: %s evaluated %d times", ts, g.forms.shared[id].query, n)
				}
			}
			evaluated += len(m.evals)
			if ordered && len(m.vals) > 0 {
				for id := range m.vals {
					t.Errorf("at %s: %s kept after its last reader", ts, g.forms.shared[id].query)
				}
			}
		}
		if evaluated < 10*len(faultyTimes) {
			t.Fatalf("only %d shared subexpressions evaluated", evaluated)
		}
		recorded[i] = e.recordedBetween(faultyTimes[0], faultyTimes[len(faultyTimes)-1])
	}
	sameRecorded(t, recorded[0], recorded[1])
}
