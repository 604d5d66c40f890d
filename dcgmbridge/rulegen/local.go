package rulegen

import (
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/internal/promqlast"
)

// The local evaluation of a plan. Once the memo holds a plan's shared
// subexpressions, what is left of most canonical rules combines their
// results: the DCGM guards (`A unless on(g) (A == 0 and on(g) U > 50)`),
// the `or on(g)` chains between sources, the tags
// (`label_replace(X, "strata_source", "sm_active", "", "")`), the scales
// (`X / 100`). The engine evaluates each of those nodes as a matrix read
// back from the memo, with label sets and maps sized to its input: at
// 500,000 series a third of an evaluation's bytes (docs/bench.md). A plan
// made of nothing else is evaluated here instead, over the memo's vectors,
// as the engine evaluates an instant query (rangeEval's instant path,
// VectorAnd, VectorOr, VectorUnless, VectorscalarBinop, evalLabelReplace):
// the same samples with the same labels and values, in the same order.
//
// It reads only memo results whose labels hold no reserved name (the
// aggregations by labels: their results have no metric name to drop, so
// the engine's name handling, delayed or not, changes nothing) and floats:
// a histogram in an input, or an output the engine would refuse (two
// samples whose label sets hash alike), leaves the query to the engine,
// which then answers or fails as it does. The engine's sample limit is not
// applied, as in the fused passes.

// localNode is a node of a locally evaluated plan. eval returns its
// result at ts over m in a vector of its own, or false where the engine
// must evaluate the query.
type localNode interface {
	eval(m *sharedMemo, ts int64) (promql.Vector, bool)
}

// local returns e's local evaluation, or nil when e holds anything but
// memo reads of plain aggregations and the operations above. e is a
// pruned expression of form, whose shared nodes read the memo.
func (form *internalForm) local(e parser.Expr) localNode {
	if id, ok := form.shared[e]; ok {
		if !plainLabels(e) {
			return nil
		}
		return memoRead{id: id}
	}
	switch n := e.(type) {
	case *parser.ParenExpr:
		return form.local(n.Expr)
	case *parser.BinaryExpr:
		return form.localBinary(n)
	case *parser.Call:
		return form.localLabelReplace(n)
	}
	return nil
}

func (form *internalForm) localBinary(n *parser.BinaryExpr) localNode {
	lt, rt := n.LHS.Type(), n.RHS.Type()
	switch {
	case lt == parser.ValueTypeVector && rt == parser.ValueTypeVector:
		vm := n.VectorMatching
		if !n.Op.IsSetOperator() || vm == nil || vm.Card != parser.CardManyToMany {
			return nil
		}
		lhs, rhs := form.local(n.LHS), form.local(n.RHS)
		if lhs == nil || rhs == nil {
			return nil
		}
		return setOp{op: n.Op, lhs: lhs, rhs: rhs, sig: signature(vm)}
	case lt == parser.ValueTypeVector && rt == parser.ValueTypeScalar && !n.ReturnBool:
		return form.localScalar(n)
	}
	return nil
}

// localScalar accepts `vector op number` (what the canonical rules write:
// the number on the right, comparisons without bool).
func (form *internalForm) localScalar(n *parser.BinaryExpr) localNode {
	lit, ok := promqlast.Unparen(n.RHS).(*parser.NumberLiteral)
	if !ok {
		return nil
	}
	if _, _, ok := floatBinop(n.Op, 0, 0); !ok {
		return nil
	}
	in := form.local(n.LHS)
	if in == nil {
		return nil
	}
	return scalarOp{op: n.Op, in: in, num: lit.Val}
}

// localLabelReplace accepts label_replace with literal arguments that the
// engine would accept.
func (form *internalForm) localLabelReplace(c *parser.Call) localNode {
	if c.Func.Name != "label_replace" || len(c.Args) != 5 {
		return nil
	}
	var args [4]string
	for i := range args {
		s, ok := promqlast.Unparen(c.Args[i+1]).(*parser.StringLiteral)
		if !ok {
			return nil
		}
		args[i] = s.Val
	}
	re, err := regexp.Compile("^(?s:" + args[3] + ")$")
	if err != nil || !model.UTF8Validation.IsValidLabelName(args[0]) {
		return nil
	}
	in := form.local(c.Args[0])
	if in == nil {
		return nil
	}
	return labelReplace{in: in, dst: args[0], repl: args[1], src: args[2], re: re}
}

// plainLabels reports whether e's results carry no reserved label: an
// aggregation by labels none of which is reserved, or a quantile of one.
func plainLabels(e parser.Expr) bool {
	if c, ok := e.(*parser.Call); ok {
		_, a, ok := quantileCall(c)
		return ok && plainLabels(a)
	}
	a, ok := e.(*parser.AggregateExpr)
	if !ok || a.Without {
		return false
	}
	switch a.Op {
	case parser.SUM, parser.AVG, parser.MIN, parser.MAX, parser.COUNT, parser.GROUP, parser.STDDEV, parser.STDVAR, parser.QUANTILE:
	default:
		return false // topk and kin keep their inputs' labels, count_values adds one
	}
	return !slices.ContainsFunc(a.Grouping, func(l string) bool { return strings.HasPrefix(l, "__") })
}

// memoRead is a memo result as the engine's selector of it reads it:
// stale markers skipped, floats only.
type memoRead struct{ id int }

func (r memoRead) eval(m *sharedMemo, ts int64) (promql.Vector, bool) {
	v, ok := m.get(r.id)
	if !ok {
		return nil, false
	}
	out := make(promql.Vector, 0, len(v))
	for _, s := range v {
		if s.H != nil {
			return nil, false
		}
		if value.IsStaleNaN(s.F) {
			continue
		}
		out = append(out, promql.Sample{Metric: s.Metric, T: ts, F: s.F})
	}
	return out, true
}

// setOp is `and`, `or` or `unless` (VectorAnd, VectorOr, VectorUnless).
type setOp struct {
	op       parser.ItemType
	lhs, rhs localNode
	sig      func(labels.Labels, []byte) []byte
}

// signature is the engine's join signature of vm (rangeEval's sigf).
func signature(vm *parser.VectorMatching) func(labels.Labels, []byte) []byte {
	names := slices.Clone(vm.MatchingLabels)
	if vm.On {
		slices.Sort(names)
		return func(l labels.Labels, b []byte) []byte { return l.BytesWithLabels(b, names...) }
	}
	names = append(names, model.MetricNameLabel, model.MetricTypeLabel, model.MetricUnitLabel)
	slices.Sort(names)
	return func(l labels.Labels, b []byte) []byte { return l.BytesWithoutLabels(b, names...) }
}

func (o setOp) eval(m *sharedMemo, ts int64) (promql.Vector, bool) {
	lhs, ok := o.lhs.eval(m, ts)
	if !ok {
		return nil, false
	}
	rhs, ok := o.rhs.eval(m, ts)
	if !ok {
		return nil, false
	}
	var (
		out promql.Vector
		buf []byte
	)
	if o.op == parser.LOR {
		// The left-hand samples, and the right-hand ones without a match.
		present := o.signatures(lhs)
		out = lhs
		for _, s := range rhs {
			buf = o.sig(s.Metric, buf)
			if _, ok := present[string(buf)]; !ok {
				out = append(out, s)
			}
		}
	} else {
		// The left-hand samples that have (and) or lack (unless) a match.
		present := o.signatures(rhs)
		keep := o.op == parser.LAND
		out = lhs[:0]
		for _, s := range lhs {
			buf = o.sig(s.Metric, buf)
			if _, ok := present[string(buf)]; ok == keep {
				out = append(out, s)
			}
		}
	}
	return out, !out.ContainsSameLabelset()
}

func (o setOp) signatures(v promql.Vector) map[string]struct{} {
	sigs := make(map[string]struct{}, len(v))
	var buf []byte
	for _, s := range v {
		buf = o.sig(s.Metric, buf)
		sigs[string(buf)] = struct{}{}
	}
	return sigs
}

// scalarOp is `vector op number` (VectorscalarBinop): a comparison keeps
// the samples it holds for, with their values; arithmetic changes every
// value.
type scalarOp struct {
	op  parser.ItemType
	in  localNode
	num float64
}

func (o scalarOp) eval(m *sharedMemo, ts int64) (promql.Vector, bool) {
	in, ok := o.in.eval(m, ts)
	if !ok {
		return nil, false
	}
	out := in[:0]
	for _, s := range in {
		f, keep, _ := floatBinop(o.op, s.F, o.num)
		if keep {
			s.F = f
			out = append(out, s)
		}
	}
	return out, !out.ContainsSameLabelset()
}

// floatBinop is the engine's vectorElemBinop for two floats, and false
// for an operator it does not apply to them.
func floatBinop(op parser.ItemType, lhs, rhs float64) (float64, bool, bool) {
	switch op {
	case parser.ADD:
		return lhs + rhs, true, true
	case parser.SUB:
		return lhs - rhs, true, true
	case parser.MUL:
		return lhs * rhs, true, true
	case parser.DIV:
		return lhs / rhs, true, true
	case parser.POW:
		return math.Pow(lhs, rhs), true, true
	case parser.MOD:
		return math.Mod(lhs, rhs), true, true
	case parser.EQLC:
		return lhs, lhs == rhs, true
	case parser.NEQ:
		return lhs, lhs != rhs, true
	case parser.GTR:
		return lhs, lhs > rhs, true
	case parser.LSS:
		return lhs, lhs < rhs, true
	case parser.GTE:
		return lhs, lhs >= rhs, true
	case parser.LTE:
		return lhs, lhs <= rhs, true
	case parser.ATAN2:
		return math.Atan2(lhs, rhs), true, true
	}
	return 0, false, false
}

// labelReplace is label_replace with literal arguments (evalLabelReplace).
type labelReplace struct {
	in             localNode
	dst, repl, src string
	re             *regexp.Regexp
}

func (r labelReplace) eval(m *sharedMemo, ts int64) (promql.Vector, bool) {
	in, ok := r.in.eval(m, ts)
	if !ok {
		return nil, false
	}
	lb := labels.NewBuilder(labels.EmptyLabels())
	for i := range in {
		srcVal := in[i].Metric.Get(r.src)
		if idx := r.re.FindStringSubmatchIndex(srcVal); idx != nil {
			res := r.re.ExpandString(nil, r.repl, srcVal, idx)
			lb.Reset(in[i].Metric)
			lb.Set(r.dst, string(res))
			in[i].Metric = lb.Labels()
		}
	}
	return in, !in.ContainsSameLabelset()
}
