package rulegen

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
)

// TestLocalPlansMatchEngine evaluates every canonical rule over the faulty
// fleet (and GPUs the guards drop: SM activity 0 at a utilisation above
// 50) at each of faultyTimes, and, for each plan evaluated without the
// engine (local.go), requires the same samples in the same order, values to
// the bit, as the engine's evaluation of the plan over the same memo. Every
// kind of node must have been compared with a non-empty result.
func TestLocalPlansMatchEngine(t *testing.T) {
	e := newEvalEnv(t)
	fleet := mixedFleet(t, e, 8000)
	// GPUs the guards judge: SM activity 0 (or NaN) at utilisations on
	// both sides of 50, in pairs told apart by their UUID alone.
	for i := range 8 {
		for _, uuid := range []string{"GPU-a", "GPU-b"} {
			util, sm := 35+5*float64(i), 0.0
			if uuid == "GPU-b" {
				util = 100 - util
			}
			if i%3 == 2 {
				sm = math.NaN()
			}
			for _, s := range []struct {
				name string
				v    float64
			}{{"DCGM_FI_PROF_SM_ACTIVE", sm}, {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", sm}, {"DCGM_FI_PROF_DRAM_ACTIVE", sm}, {"DCGM_FI_DEV_GPU_UTIL", util}} {
				lset := labels.FromStrings("__name__", s.name, "Hostname", "judged", "gpu", fmt.Sprint(i), "UUID", uuid, "pod", "p", "namespace", "n")
				fleet = append(fleet, fleetSeries{lset: lset, from: s.v, to: s.v})
			}
		}
	}
	e.appendFaultyFleet(fleet)
	forms, exprs := canonicalForms(t, e)
	const lookback = 5 * time.Minute
	qf := forms.QueryFunc(e.engine, e.raw, lookback)
	engine := rules.EngineQueryFunc(e.engine, RenamingQueryable(newestFirst(e.raw, lookback, NewestWindow)))
	rq := RenamingQueryable(e.raw)
	covered := map[string]int{}
	for _, ts := range faultyTimes {
		memo := &sharedMemo{vals: map[int]memoValue{}} // keeps every result
		ctx := context.WithValue(t.Context(), memoKey{}, memo)
		for _, qs := range exprs {
			// The rule as QueryFunc evaluates it fills the memo.
			if _, err := qf(ctx, qs, ts); err != nil {
				t.Fatalf("%s at %s: %v", qs, ts, err)
			}
			form, shared, _ := forms.form(qs)
			absent, err := form.lookup(ctx, rq, ts, lookback)
			if err != nil {
				t.Fatal(err)
			}
			p := form.plan(absent)
			if p.local == nil || slices.ContainsFunc(p.ids, func(id int) bool { return shared[id].fresh }) {
				continue
			}
			got, ok := p.local.eval(memo, ts.UnixMilli())
			if !ok {
				t.Fatalf("%s at %s: left to the engine", p.sharing, ts)
			}
			want, err := engine(ctx, p.sharing, ts)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := vectorBits(got), vectorBits(want); g != w {
				t.Errorf("%s at %s:\nlocal  %s\nengine %s", p.sharing, ts, g, w)
			}
			countNodes(p.local, memo, ts.UnixMilli(), covered)
		}
	}
	for _, kind := range []string{"and", "or", "unless", "unless dropping", "==", ">", "/", "label_replace"} {
		if covered[kind] < 3 {
			t.Errorf("%s: %d non-empty results compared (%v)", kind, covered[kind], covered)
		}
	}
}

// countNodes counts the nodes of n by kind whose result is not empty, and
// the `unless` nodes that dropped a sample.
func countNodes(n localNode, m *sharedMemo, ts int64, covered map[string]int) {
	v, _ := n.eval(m, ts)
	switch n := n.(type) {
	case setOp:
		if len(v) > 0 {
			covered[n.op.String()]++
		}
		if l, _ := n.lhs.eval(m, ts); n.op == parser.LUNLESS && len(v) < len(l) {
			covered["unless dropping"]++
		}
		countNodes(n.lhs, m, ts, covered)
		countNodes(n.rhs, m, ts, covered)
	case scalarOp:
		if len(v) > 0 {
			covered[n.op.String()]++
		}
		countNodes(n.in, m, ts, covered)
	case labelReplace:
		if len(v) > 0 {
			covered["label_replace"]++
		}
		countNodes(n.in, m, ts, covered)
	}
}

// TestLocalLeavesHistograms: a memo result holding a histogram (a native
// histogram's aggregation, which the engine evaluated) leaves the plan to
// the engine.
func TestLocalLeavesHistograms(t *testing.T) {
	m := &sharedMemo{vals: map[int]memoValue{
		0: {vec: promql.Vector{{Metric: labels.FromStrings("pod", "a"), F: 1}}},
		1: {vec: promql.Vector{{Metric: labels.FromStrings("pod", "b"), H: &histogram.FloatHistogram{Count: 1, Sum: 1}}}},
	}}
	or := setOp{op: parser.LOR, lhs: memoRead{id: 0}, rhs: memoRead{id: 1}, sig: signature(&parser.VectorMatching{Card: parser.CardManyToMany, On: true, MatchingLabels: []string{"pod"}})}
	if v, ok := or.eval(m, 0); ok {
		t.Fatalf("evaluated over a histogram: %v", v)
	}
	if v, ok := (memoRead{id: 0}).eval(m, 0); !ok || len(v) != 1 {
		t.Fatalf("floats alone: %v, %v", v, ok)
	}
}
