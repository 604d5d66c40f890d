package diagnose

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/rulegen"
	"github.com/strata-dev/strata/internal/promqlast"
)

// An and-chain is a rule `L and R1 and ... and Rn` (plain `and`: no on,
// ignoring or group modifiers), such as the pack's anomaly rules, whose
// operands read every tracked series' z-score. PromQL evaluates every
// operand over all of its series, although `and` keeps only L's elements
// whose labels but the name match an element of each R: at 500,000 series
// the anomaly rules were the engine's largest after the signals, most of it
// per-series work on series they then drop. The engine evaluates L alone
// first, then the rule with the selects of every operand's per-series part
// reading only the series whose labels but the name are among L's: a
// series outside them cannot reach the result, since each operation
// between such a selector and the chain keeps a series' labels but the
// name. The result is the same vector, element for element.

// andPlan is how the engine evaluates an and-chain rule.
type andPlan struct {
	// first is L's query string.
	first string
	// filtered holds the selectors (by selectorKey) whose series are
	// narrowed to L's labels: each occurs only in per-series positions.
	filtered map[string]bool
}

// planAnd returns the plan for expr, nil when it is not an and-chain with
// a selector to narrow.
func planAnd(expr parser.Expr) *andPlan {
	operands := andOperands(expr)
	if len(operands) < 2 {
		return nil
	}
	per, other := map[string]bool{}, map[string]bool{}
	for _, op := range operands {
		perSeries(op, per, other)
	}
	p := &andPlan{first: operands[0].String(), filtered: map[string]bool{}}
	for k := range per {
		if !other[k] {
			p.filtered[k] = true
		}
	}
	if len(p.filtered) == 0 {
		return nil
	}
	return p
}

// andOperands returns the operands of an and-chain, leftmost first, or nil.
func andOperands(expr parser.Expr) []parser.Expr {
	b, ok := promqlast.Unparen(expr).(*parser.BinaryExpr)
	if !ok || b.Op != parser.LAND || !plainMatching(b.VectorMatching) {
		return nil
	}
	left := andOperands(b.LHS)
	if left == nil {
		left = []parser.Expr{b.LHS}
	}
	return append(left, b.RHS)
}

func plainMatching(m *parser.VectorMatching) bool {
	return m != nil && m.Card == parser.CardManyToMany && !m.On && len(m.MatchingLabels) == 0 && len(m.Include) == 0
}

// perSeriesFuncs map each series of their range-vector argument to one
// element with its labels but the name, reading no other series.
var perSeriesFuncs = map[string]bool{
	"avg_over_time": true, "min_over_time": true, "max_over_time": true, "sum_over_time": true,
	"count_over_time": true, "last_over_time": true,
}

// perSeries adds to per the selectors of n reached through per-series
// operations only (a comparison or arithmetic with a scalar, a function of
// perSeriesFuncs, parentheses), named by one equality on the name (no
// two series of one selector then differ by the name alone), and to other
// every other selector of n.
func perSeries(n parser.Expr, per, other map[string]bool) {
	switch x := n.(type) {
	case *parser.ParenExpr:
		perSeries(x.Expr, per, other)
		return
	case *parser.VectorSelector:
		if x.Timestamp == nil && x.StartOrEnd == 0 && namedExactly(x) {
			per[selectorKey(x.LabelMatchers)] = true
			return
		}
	case *parser.Call:
		if perSeriesFuncs[x.Func.Name] && len(x.Args) == 1 {
			if ms, ok := x.Args[0].(*parser.MatrixSelector); ok {
				if vs, ok := ms.VectorSelector.(*parser.VectorSelector); ok {
					perSeries(vs, per, other)
					return
				}
			}
		}
	case *parser.BinaryExpr:
		lt, rt := x.LHS.Type(), x.RHS.Type()
		switch {
		case lt == parser.ValueTypeVector && rt == parser.ValueTypeScalar:
			perSeries(x.LHS, per, other)
			allSelectors(x.RHS, other)
			return
		case lt == parser.ValueTypeScalar && rt == parser.ValueTypeVector:
			allSelectors(x.LHS, other)
			perSeries(x.RHS, per, other)
			return
		}
	}
	allSelectors(n, other)
}

// allSelectors adds every selector of n to set.
func allSelectors(n parser.Node, set map[string]bool) {
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			set[selectorKey(vs.LabelMatchers)] = true
		}
		return nil
	})
}

func namedExactly(vs *parser.VectorSelector) bool {
	return slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
		return m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual
	})
}

// selectorKey names a selector by its matchers, as a select receives them.
func selectorKey(ms []*labels.Matcher) string {
	ss := make([]string, len(ms))
	for i, m := range ms {
		ss[i] = m.String()
	}
	slices.Sort(ss)
	return strings.Join(ss, ",")
}

// queryAnd evaluates the and-chain rule qs by plan p at t (see andPlan).
func (e *Engine) queryAnd(ctx context.Context, p *andPlan, qs string, t time.Time) (promql.Vector, error) {
	run := func(q storage.Queryable, qs string) (promql.Vector, error) {
		return rules.EngineQueryFunc(e.promql, rulegen.RenamingQueryable(q))(ctx, qs, t)
	}
	first, err := run(e.query, p.first)
	if err != nil {
		return run(e.query, qs) // the rule's own error, if any
	}
	keep := make(map[uint64]struct{}, len(first))
	var buf []byte
	for _, s := range first {
		var h uint64
		h, buf = s.Metric.HashWithoutLabels(buf)
		keep[h] = struct{}{}
	}
	return run(narrowedQueryable{q: e.query, filtered: p.filtered, keep: keep}, qs)
}

// narrowedQueryable is q with the selects of the filtered selectors
// keeping only the series whose labels but the name hash into keep (a
// hash shared by another label set keeps a series more: the rule's own
// `and` then drops it).
type narrowedQueryable struct {
	q        storage.Queryable
	filtered map[string]bool
	keep     map[uint64]struct{}
}

func (n narrowedQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := n.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return narrowedQuerier{Querier: q, n: n}, nil
}

type narrowedQuerier struct {
	storage.Querier
	n narrowedQueryable
}

func (q narrowedQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	if !q.n.filtered[selectorKey(ms)] {
		return q.Querier.Select(ctx, sortSeries, hints, ms...)
	}
	var buf []byte
	keep := func(l labels.Labels) bool {
		var h uint64
		h, buf = l.HashWithoutLabels(buf)
		_, ok := q.n.keep[h]
		return ok
	}
	// The scratch store (what the rules after the signals read, live)
	// copies the samples of the series kept only.
	if sq, ok := q.Querier.(*scratchQuerier); ok {
		return sq.selectWhere(hints, keep, ms...)
	}
	return &narrowedSet{SeriesSet: q.Querier.Select(ctx, sortSeries, hints, ms...), keep: keep}
}

type narrowedSet struct {
	storage.SeriesSet
	keep func(labels.Labels) bool
}

func (s *narrowedSet) Next() bool {
	for s.SeriesSet.Next() {
		if s.keep(s.At().Labels()) {
			return true
		}
	}
	return false
}
