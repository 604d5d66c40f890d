package query

import (
	"sync"

	"github.com/prometheus/prometheus/promql/parser"
)

// maxPinned bounds the expressions a PinnedExprs holds: past it, Pin keeps
// nothing more and those strings are parsed at every use, as any other.
const maxPinned = 4096

// PinnedExprs is the engine's parser.Parser. The query strings pinned in it
// (the canonical rules' internal forms, evaluated every rules interval) are
// parsed once, when pinned: ParseExpr of such a string returns a copy of its
// tree instead of lexing and parsing it again, and of compiling its regular
// expression matchers again. Every other string is parsed as the wrapped
// parser parses it.
//
// The copy is a new node for every node of the tree, because the engine
// writes into the tree it evaluates (the @ and offset it resolves, the step
// invariant wrappers it inserts, the series each selector selected), and
// two evaluations of one string may run at once; what it never writes is
// shared: label matchers, functions, the vector matching of a binary
// operation.
//
// Safe for concurrent use.
type PinnedExprs struct {
	parser.Parser
	mu    sync.RWMutex
	exprs map[string]parser.Expr
	// pinAll pins every string ParseExpr parses (tests: every query of a
	// suite then runs on a copy).
	pinAll bool
}

// NewPinnedExprs returns a PinnedExprs parsing with p, with nothing pinned.
func NewPinnedExprs(p parser.Parser) *PinnedExprs {
	return &PinnedExprs{Parser: p, exprs: map[string]parser.Expr{}}
}

// Pin parses qs and keeps its tree for ParseExpr. A string that does not
// parse is not kept (ParseExpr then reports its error at each use).
func (c *PinnedExprs) Pin(qs string) {
	c.mu.RLock()
	_, ok := c.exprs[qs]
	n := len(c.exprs)
	c.mu.RUnlock()
	if ok || n >= maxPinned {
		return
	}
	e, err := c.Parser.ParseExpr(qs)
	if err != nil {
		return
	}
	c.mu.Lock()
	if len(c.exprs) < maxPinned {
		c.exprs[qs] = e
	}
	c.mu.Unlock()
}

// Unpin drops qs: it is parsed at every use again.
func (c *PinnedExprs) Unpin(qs string) {
	c.mu.Lock()
	delete(c.exprs, qs)
	c.mu.Unlock()
}

// Len returns how many strings are pinned.
func (c *PinnedExprs) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.exprs)
}

// ParseExpr implements parser.Parser.
func (c *PinnedExprs) ParseExpr(qs string) (parser.Expr, error) {
	if c.pinAll {
		c.Pin(qs)
	}
	c.mu.RLock()
	e, ok := c.exprs[qs]
	c.mu.RUnlock()
	if ok {
		if cp, ok := copyExpr(e); ok {
			return cp, nil
		}
	}
	return c.Parser.ParseExpr(qs)
}

// copyExpr returns a copy of e with a new node for every node (see
// PinnedExprs), or false when e holds a node type it does not know.
func copyExpr(e parser.Expr) (parser.Expr, bool) {
	ok := true
	var cp func(parser.Expr) parser.Expr
	cpDuration := func(d *parser.DurationExpr) *parser.DurationExpr {
		if d == nil {
			return nil
		}
		c := *d
		if d.LHS != nil {
			c.LHS = cp(d.LHS)
		}
		if d.RHS != nil {
			c.RHS = cp(d.RHS)
		}
		return &c
	}
	cp = func(e parser.Expr) parser.Expr {
		switch n := e.(type) {
		case nil:
			return nil
		case *parser.AggregateExpr:
			c := *n
			c.Expr, c.Param = cp(n.Expr), cp(n.Param)
			return &c
		case *parser.BinaryExpr:
			c := *n
			c.LHS, c.RHS = cp(n.LHS), cp(n.RHS)
			return &c
		case *parser.Call:
			c := *n
			if n.Args != nil {
				c.Args = make(parser.Expressions, len(n.Args))
				for i, a := range n.Args {
					c.Args[i] = cp(a)
				}
			}
			return &c
		case *parser.DurationExpr:
			return cpDuration(n)
		case *parser.MatrixSelector:
			c := *n
			c.VectorSelector, c.RangeExpr = cp(n.VectorSelector), cpDuration(n.RangeExpr)
			return &c
		case *parser.SubqueryExpr:
			c := *n
			c.Expr = cp(n.Expr)
			c.RangeExpr, c.OriginalOffsetExpr, c.StepExpr = cpDuration(n.RangeExpr), cpDuration(n.OriginalOffsetExpr), cpDuration(n.StepExpr)
			return &c
		case *parser.NumberLiteral:
			c := *n
			return &c
		case *parser.ParenExpr:
			c := *n
			c.Expr = cp(n.Expr)
			return &c
		case *parser.StringLiteral:
			c := *n
			return &c
		case *parser.UnaryExpr:
			c := *n
			c.Expr = cp(n.Expr)
			return &c
		case *parser.StepInvariantExpr:
			c := *n
			c.Expr = cp(n.Expr)
			return &c
		case *parser.VectorSelector:
			c := *n
			c.OriginalOffsetExpr = cpDuration(n.OriginalOffsetExpr)
			c.UnexpandedSeriesSet, c.Series = nil, nil
			return &c
		default:
			ok = false
			return e
		}
	}
	out := cp(e)
	return out, ok
}
