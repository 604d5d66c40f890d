package storeapi

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/prometheus/prometheus/util/kahansum"
	"github.com/thanos-io/thanos/pkg/api/query/querypb"

	"github.com/strata-dev/strata/internal/promqlast"
)

// A distributed Thanos Querier pushes `avg by (x) (sel)` down as two
// requests, `sum by (x, <external labels>) (sel)` and `count by (...)
// (sel)`, sent at once. Evaluated by the engine, each evaluates sel: for
// every series, the sample each step selects (what a shard spends most of
// its CPU on). A pushed aggregation is evaluated instead as sel once, its
// matrix shared by the requests running at the same time (graceCache), and
// the aggregation computed over it here, the engine's way: the same
// operations, on the same samples, in the order the engine takes them, so
// the answers are the engine's to the bit (TestPushedAggregationsExact; a
// NaN's payload aside, which depends on the compiler and no API shows).
//
// Only range queries of the form `op by (labels) (selector)` with op sum,
// count, min or max over float samples take this path; anything else (a
// histogram in the matrix, a series twice) is evaluated by the engine as
// written. A long range query the engine splits in parts (the query
// package's splitEngine) selects once a part; each part aggregates in its
// select's order, and every select lists the series in one order (the
// tiers'), so any order that keeps each select's (mergeOrders) is each
// part's order at each of its steps.

// pushedAggregation is a query this file evaluates.
type pushedAggregation struct {
	op       parser.ItemType
	grouping []string // sorted
	selector string   // the inner selector, as the engine parses it
	fusable  bool     // the fused path can answer it (fused.go)
}

// recogniser parses queries to recognise pushed aggregations. A query it
// cannot parse (syntax the engine's parser enables only) is the engine's.
var recogniser = parser.NewParser(parser.Options{})

// aggregationOf recognises a pushed aggregation.
func aggregationOf(query string) (pushedAggregation, bool) {
	expr, err := recogniser.ParseExpr(query)
	if err != nil {
		return pushedAggregation{}, false
	}
	agg, ok := promqlast.Unparen(expr).(*parser.AggregateExpr)
	if !ok || agg.Without || agg.Param != nil {
		return pushedAggregation{}, false
	}
	switch agg.Op {
	case parser.SUM, parser.COUNT, parser.MIN, parser.MAX:
	default:
		return pushedAggregation{}, false
	}
	vs, ok := promqlast.Unparen(agg.Expr).(*parser.VectorSelector)
	if !ok {
		return pushedAggregation{}, false
	}
	grouping := slices.Clone(agg.Grouping)
	slices.Sort(grouping)
	return pushedAggregation{op: agg.Op, grouping: grouping, selector: vs.String(), fusable: fusable(vs)}, true
}

// evalKey is what makes two requests' selectors evaluate alike: the
// selector, the steps, the lookback, and what the request's view of the
// node depends on (the replica labels dropped, the query shard).
type evalKey struct {
	selector         string
	start, end, step int64
	lookback         time.Duration
	drop             string
	shard            string
}

// selectorMatrix is a selector's evaluation: its matrix, in the order the
// engine's select returned the series (the order the engine aggregates
// them in). The matrix's memory is the engine's until qry is closed.
type selectorMatrix struct {
	qry      promql.Query
	mat      promql.Matrix
	warnings annotations.Annotations
	stats    *querypb.QueryStats
}

func closeSelectorMatrix(m *selectorMatrix) {
	if m != nil && m.qry != nil {
		m.qry.Close()
	}
}

// errNotAggregable: the selector's evaluation cannot be aggregated here;
// the engine evaluates the request as written.
var errNotAggregable = errors.New("not aggregated from the selector's matrix")

// aggregationExec evaluates a pushed aggregation by a fused pass
// (fused.go), else from its selector's shared matrix, or with fallback
// where neither can.
func (qs *QueryServer) aggregationExec(a pushedAggregation, ev evaluation, start, end time.Time, step time.Duration, fallback execFunc) execFunc {
	evaluated := qs.evaluatedExec(a, ev, start, end, step, fallback)
	if !a.fusable || qs.fused.max == 0 {
		return evaluated
	}
	return qs.fusedExec(a, ev, start, end, step, evaluated)
}

// fallsBack reports whether a shared evaluation's error err sends a
// request (first: the one that ran it) to its own fallback: the shared
// path cannot answer it, or the evaluation stopped at the first request's
// own timeout or cancellation, not this one's.
func fallsBack(ctx context.Context, err error, first bool) bool {
	var timeout promql.ErrQueryTimeout
	var canceled promql.ErrQueryCanceled
	switch {
	case errors.Is(err, errNotAggregable), errors.Is(err, errGiveUp):
		return true
	case !first && ctx.Err() == nil && (errors.As(err, &timeout) || errors.As(err, &canceled)):
		return true
	}
	return false
}

// evaluatedExec evaluates a pushed aggregation from its selector's shared
// matrix, or with fallback where it cannot.
func (qs *QueryServer) evaluatedExec(a pushedAggregation, ev evaluation, start, end time.Time, step time.Duration, fallback execFunc) execFunc {
	return func(ctx context.Context, q storage.Queryable, opts promql.QueryOpts) (result, error) {
		drop := slices.Clone(ev.replicaLabels)
		slices.Sort(drop)
		key := evalKey{
			selector: a.selector, start: start.UnixMilli(), end: end.UnixMilli(), step: step.Milliseconds(),
			lookback: opts.LookbackDelta(), drop: join(drop), shard: ev.shard.String(),
		}
		e, first := qs.evals.acquire(key)
		if e == nil {
			return fallback(ctx, q, opts)
		}
		defer qs.evals.release(e)
		if first {
			qs.evals.finish(e)(qs.evalSelector(ctx, q, opts, a.selector, start, end, step))
		}
		m, err := qs.evals.wait(ctx, e, first)
		if err != nil {
			if fallsBack(ctx, err, first) {
				return fallback(ctx, q, opts)
			}
			return result{}, err
		}
		return result{
			value:    aggregate(a, m.mat, key.start, key.end, key.step),
			warnings: maps.Clone(m.warnings),
			stats:    m.stats,
		}, nil
	}
}

func join(ss []string) string {
	return strings.Join(ss, "\xff")
}

// evalSelector evaluates the selector over [start, end] and orders the
// matrix as the engine's select returned the series. The selector's
// errors are the aggregation's: it reads no fewer samples, and evaluates
// no less.
func (qs *QueryServer) evalSelector(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, selector string, start, end time.Time, step time.Duration) (*selectorMatrix, error) {
	rec := &orderRecorder{q: q}
	qry, err := qs.engine.NewRangeQuery(ctx, rec, opts, selector, start, end, step)
	if err != nil {
		return nil, err
	}
	m := &selectorMatrix{qry: qry}
	res := qry.Exec(ctx)
	if res.Err != nil {
		return m, res.Err
	}
	mat, ok := res.Value.(promql.Matrix)
	order, merged := mergeOrders(rec.result())
	if !ok || !merged {
		return m, errNotAggregable
	}
	// The engine sorts a range query's result by labels; it aggregates in
	// the select's order.
	pos := make(map[uint64]int, len(order))
	for i, l := range order {
		h := l.Hash()
		if _, dup := pos[h]; dup {
			return m, errNotAggregable // a series twice (or a hash collision)
		}
		pos[h] = i
	}
	for _, s := range mat {
		if len(s.Histograms) > 0 {
			return m, errNotAggregable
		}
		if _, ok := pos[s.Metric.Hash()]; !ok {
			return m, errNotAggregable
		}
	}
	sort.SliceStable(mat, func(i, j int) bool { return pos[mat[i].Metric.Hash()] < pos[mat[j].Metric.Hash()] })
	m.mat, m.warnings, m.stats = mat, res.Warnings, &querypb.QueryStats{}
	if st := qry.Stats(); st != nil && st.Samples != nil {
		m.stats.SamplesTotal = st.Samples.TotalSamples
		m.stats.PeakSamples = int64(st.Samples.PeakSamples)
	}
	return m, nil
}

// aggregate computes a by (grouping) over mat, whose series are in the
// engine's order, at the steps start, start+step, ..., end (ms), as the
// engine's rangeEvalAgg and aggregation do for floats: step by step, each
// group's first sample its value, then sum by Kahan-Neumaier summation
// (kahansum.Inc, the compensation added at the end), count by counting, max
// and min by comparison (a NaN replaced by any sample). The result is
// sorted by labels, as a range query's.
func aggregate(a pushedAggregation, mat promql.Matrix, start, end, step int64) promql.Matrix {
	var (
		out     promql.Matrix
		groupOf = make([]int, len(mat))
		index   = map[string]int{}
		lb      = labels.NewBuilder(labels.EmptyLabels())
		buf     []byte
	)
	for i, s := range mat {
		lb.Reset(s.Metric)
		lb.Keep(a.grouping...)
		l := lb.Labels()
		buf = l.Bytes(buf)
		g, ok := index[string(buf)]
		if !ok {
			g = len(out)
			index[string(buf)] = g
			out = append(out, promql.Series{Metric: l})
		}
		groupOf[i] = g
	}
	type group struct {
		seen        bool
		value, comp float64 // comp: sum's compensation
		count       float64
	}
	groups := make([]group, len(out))
	cursor := make([]int, len(mat))
	steps := int((end-start)/step) + 1
	for ts := start; ts <= end; ts += step {
		clear(groups)
		for si := range mat {
			pts := mat[si].Floats
			k := cursor[si]
			if k >= len(pts) || pts[k].T != ts {
				continue
			}
			cursor[si]++
			f := pts[k].F
			g := &groups[groupOf[si]]
			if !g.seen {
				*g = group{seen: true, value: f, count: 1}
				continue
			}
			switch a.op {
			case parser.SUM:
				g.value, g.comp = kahansum.Inc(f, g.value, g.comp)
			case parser.COUNT:
				g.count++
			case parser.MAX, parser.MIN:
				g.value = extremum(a.op, g.value, f)
			}
		}
		for gi := range groups {
			g := &groups[gi]
			if !g.seen {
				continue
			}
			v := g.value
			switch a.op {
			case parser.SUM:
				v += g.comp
			case parser.COUNT:
				v = g.count
			}
			if out[gi].Floats == nil {
				out[gi].Floats = make([]promql.FPoint, 0, steps)
			}
			out[gi].Floats = append(out[gi].Floats, promql.FPoint{T: ts, F: v})
		}
	}
	out = slices.DeleteFunc(out, func(s promql.Series) bool { return len(s.Floats) == 0 })
	sort.Sort(out)
	return out
}

// mergeOrders returns an order of every series in the lists that keeps
// each list's order (a topological sort of their successions), false when
// there is none (a series twice in a list, or lists that disagree) or two
// label sets share a hash.
func mergeOrders(lists [][]labels.Labels) ([]labels.Labels, bool) {
	if len(lists) == 1 {
		return lists[0], true
	}
	var (
		ids   = map[uint64]int{}
		nodes []labels.Labels
		next  [][]int
		preds []int
	)
	for _, list := range lists {
		prev := -1
		for _, l := range list {
			h := l.Hash()
			id, ok := ids[h]
			if !ok {
				id = len(nodes)
				ids[h] = id
				nodes, next, preds = append(nodes, l), append(next, nil), append(preds, 0)
			} else if !labels.Equal(nodes[id], l) {
				return nil, false
			}
			if prev >= 0 {
				next[prev] = append(next[prev], id)
				preds[id]++
			}
			prev = id
		}
	}
	var ready []int
	for id := range nodes {
		if preds[id] == 0 {
			ready = append(ready, id)
		}
	}
	out := make([]labels.Labels, 0, len(nodes))
	for len(ready) > 0 {
		id := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		out = append(out, nodes[id])
		for _, n := range next[id] {
			if preds[n]--; preds[n] == 0 {
				ready = append(ready, n)
			}
		}
	}
	return out, len(out) == len(nodes)
}

// orderRecorder records the labels of the series each of its selects
// returns, in their order.
type orderRecorder struct {
	q storage.Queryable

	mu     sync.Mutex
	orders [][]labels.Labels
}

// result is every select's order.
func (r *orderRecorder) result() [][]labels.Labels {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orders
}

func (r *orderRecorder) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := r.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return &recordingQuerier{Querier: q, r: r}, nil
}

type recordingQuerier struct {
	storage.Querier
	r *orderRecorder
}

func (q *recordingQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	q.r.mu.Lock()
	i := len(q.r.orders)
	q.r.orders = append(q.r.orders, nil)
	q.r.mu.Unlock()
	return &recordingSet{SeriesSet: q.Querier.Select(ctx, sortSeries, hints, ms...), r: q.r, i: i}
}

// recordingSet records its series in orders[i].
type recordingSet struct {
	storage.SeriesSet
	r *orderRecorder
	i int
}

func (s *recordingSet) Next() bool {
	if !s.SeriesSet.Next() {
		return false
	}
	s.r.mu.Lock()
	s.r.orders[s.i] = append(s.r.orders[s.i], s.At().Labels())
	s.r.mu.Unlock()
	return true
}

// extremum is the max (op parser.MAX) or min (parser.MIN) of a group's
// value cur and a series' value v, as the engine keeps it: a NaN gives
// way to any value.
func extremum(op parser.ItemType, cur, v float64) float64 {
	if (op == parser.MAX && cur < v) || (op == parser.MIN && cur > v) || math.IsNaN(cur) {
		return v
	}
	return cur
}
