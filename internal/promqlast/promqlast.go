// Package promqlast holds small helpers over PromQL's syntax tree that
// several of Strata's evaluators (the canonical rules' internal forms, the
// Query API's pushed aggregations, the diagnosis engine's and-chains)
// need alike.
package promqlast

import "github.com/prometheus/prometheus/promql/parser"

// Unparen returns e without the parentheses around it, as the engine's own
// unwrapParenExpr does.
func Unparen(e parser.Expr) parser.Expr {
	for {
		p, ok := e.(*parser.ParenExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}
