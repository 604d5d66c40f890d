package rulegen

import (
	"github.com/prometheus/prometheus/promql/parser"
)

// yieldsNothingIfArgDoes lists functions whose result is empty when their
// vector or matrix argument (at the given index) is: the functions the
// canonical rules use and their obvious kin. A function missing here (absent,
// vector, scalar, time, ...) is never pruned through.
var yieldsNothingIfArgDoes = map[string]int{
	"rate": 0, "irate": 0, "increase": 0, "delta": 0, "idelta": 0, "deriv": 0,
	"avg_over_time": 0, "max_over_time": 0, "min_over_time": 0, "sum_over_time": 0,
	"count_over_time": 0, "last_over_time": 0, "present_over_time": 0,
	"abs": 0, "ceil": 0, "floor": 0, "round": 0, "clamp": 0, "clamp_max": 0, "clamp_min": 0,
	"label_replace": 0, "label_join": 0, "histogram_quantile": 1,
}

// Prune returns expr with every part that selects nothing removed, and
// whether the whole expression yields nothing. empty reports whether a
// selector matches no series at all over the evaluation's range; a pruned
// expression evaluates to the same samples as expr whenever empty was right:
// `A or B` with B empty is A, `A unless B` is A, and an aggregation, a
// binary operation between vectors other than `or` and `unless`, a
// comparison or arithmetic with a number, and the functions of
// yieldsNothingIfArgDoes yield nothing when an input does. expr is not
// modified: changed nodes are copies.
func Prune(expr parser.Expr, empty func(*parser.VectorSelector) bool) (parser.Expr, bool) {
	switch n := expr.(type) {
	case *parser.VectorSelector:
		return n, empty(n)
	case *parser.MatrixSelector:
		vs, ok := n.VectorSelector.(*parser.VectorSelector)
		return n, ok && empty(vs)
	case *parser.ParenExpr:
		return pruneOperand(n, n.Expr, empty, func(e parser.Expr) parser.Expr { c := *n; c.Expr = e; return &c })
	case *parser.UnaryExpr:
		return pruneOperand(n, n.Expr, empty, func(e parser.Expr) parser.Expr { c := *n; c.Expr = e; return &c })
	case *parser.AggregateExpr:
		return pruneOperand(n, n.Expr, empty, func(e parser.Expr) parser.Expr { c := *n; c.Expr = e; return &c })
	case *parser.SubqueryExpr:
		return pruneOperand(n, n.Expr, empty, func(e parser.Expr) parser.Expr { c := *n; c.Expr = e; return &c })
	case *parser.Call:
		return pruneCall(n, empty)
	case *parser.BinaryExpr:
		return pruneBinary(n, empty)
	default:
		return expr, false
	}
}

// pruneOperand prunes the one operand of n, which yields nothing when its
// operand does; with returns a copy of n over another operand.
func pruneOperand(n, operand parser.Expr, empty func(*parser.VectorSelector) bool, with func(parser.Expr) parser.Expr) (parser.Expr, bool) {
	pruned, none := Prune(operand, empty)
	if none || pruned == operand {
		return n, none
	}
	return with(pruned), false
}

func pruneCall(n *parser.Call, empty func(*parser.VectorSelector) bool) (parser.Expr, bool) {
	var args parser.Expressions
	for i, a := range n.Args {
		pa, none := Prune(a, empty)
		if none {
			if at, ok := yieldsNothingIfArgDoes[n.Func.Name]; ok && at == i {
				return n, true
			}
			// An argument that yields nothing stays as it is for any
			// other function (absent(x) of nothing is 1).
			pa = a
		}
		if pa != a && args == nil {
			args = append(parser.Expressions(nil), n.Args...)
		}
		if args != nil {
			args[i] = pa
		}
	}
	if args == nil {
		return n, false
	}
	c := *n
	c.Args = args
	return &c, false
}

func pruneBinary(n *parser.BinaryExpr, empty func(*parser.VectorSelector) bool) (parser.Expr, bool) {
	l, lNone := Prune(n.LHS, empty)
	r, rNone := Prune(n.RHS, empty)
	lVec, rVec := n.LHS.Type() == parser.ValueTypeVector, n.RHS.Type() == parser.ValueTypeVector
	switch {
	case lVec && rVec && n.Op == parser.LOR:
		switch {
		case lNone && rNone:
			return n, true
		case rNone:
			return l, false
		case lNone:
			return r, false
		}
	case lVec && rVec && n.Op == parser.LUNLESS:
		if lNone {
			return n, true
		}
		if rNone {
			return l, false
		}
	case lVec && rVec:
		// and, arithmetic and comparisons between vectors: only matched
		// pairs yield samples.
		if lNone || rNone {
			return n, true
		}
	case lVec && lNone, rVec && rNone:
		// A vector with a scalar: one sample out per sample in.
		return n, true
	}
	if lNone {
		l = n.LHS
	}
	if rNone {
		r = n.RHS
	}
	if l == n.LHS && r == n.RHS {
		return n, false
	}
	c := *n
	c.LHS, c.RHS = l, r
	return &c, false
}
