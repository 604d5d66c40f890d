package rulegen

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/internal/promqlast"
)

// RenameLabel is the matcher the internal form of the canonical rules puts
// on a selector whose series must be read with label spellings copied
// (Hostname onto hostname, ...): its value lists the copies in order, as
// "Hostname>hostname,uuid>UUID". Only a Queryable from RenamingQueryable
// understands it; any other storage selects nothing through it.
const RenameLabel = "__strata_rename__"

// BelowLabel is the matcher the internal form puts on a selector that was
// compared with a number (`sel < 140737488355328`, the DCGM blank sentinel
// filter): RenamingQueryable turns every sample not below the value into a
// stale marker, so the selector yields no value at a step where the
// comparison would have dropped the series, and the same value where it
// would have kept it.
const BelowLabel = "__strata_below__"

// labelCopy is one label_replace(e, To, "$1", From, "(.+)"): when From is
// set, To takes its value; From stays.
type labelCopy struct{ From, To string }

// PushDownRenames rewrites expr into the internal form: every chain of
// label_replace calls that only copies one label's value onto another name
// (the alias chains rulegen wraps around each source selector) is removed, and
// the selectors under it carry a RenameLabel matcher instead, so the copy is
// made once per series as storage hands it to the engine rather than by each
// label_replace call over a whole vector. A chain is pushed down only when
// everything between it and its selectors keeps each series' labels as they
// are (rate, comparisons with a number, arithmetic matched on all labels,
// `or`, label_replace of other labels); otherwise it stays.
//
// The result is the same as the exported form's, series for series, unless
// two series of one selector differ only in a label that a copy overwrites
// (one carries hostname="a" and Hostname="b", another hostname="c" and
// Hostname="b"): label_replace merges or rejects such a pair, the internal
// form keeps both. expr is modified in place and returned.
func PushDownRenames(expr parser.Expr) parser.Expr {
	return pushDown(expr)
}

func pushDown(e parser.Expr) parser.Expr {
	if vs, ok := belowFilter(e); ok {
		return vs
	}
	if copies, inner, ok := copyChain(e); ok && transparent(inner, copies) {
		inner = pushDown(inner)
		markSelectors(inner, copies)
		return inner
	}
	switch n := e.(type) {
	case *parser.AggregateExpr:
		n.Expr = pushDown(n.Expr)
		if n.Param != nil {
			n.Param = pushDown(n.Param)
		}
	case *parser.BinaryExpr:
		n.LHS, n.RHS = pushDown(n.LHS), pushDown(n.RHS)
	case *parser.Call:
		for i, a := range n.Args {
			n.Args[i] = pushDown(a)
		}
	case *parser.ParenExpr:
		n.Expr = pushDown(n.Expr)
	case *parser.UnaryExpr:
		n.Expr = pushDown(n.Expr)
	case *parser.SubqueryExpr:
		n.Expr = pushDown(n.Expr)
	case *parser.StepInvariantExpr:
		n.Expr = pushDown(n.Expr)
	}
	return e
}

// belowFilter rewrites `sel < number` (a plain instant selector compared
// with a number literal, no bool) into sel with a BelowLabel matcher.
func belowFilter(e parser.Expr) (*parser.VectorSelector, bool) {
	b, ok := e.(*parser.BinaryExpr)
	if !ok || b.Op != parser.LSS || b.ReturnBool {
		return nil, false
	}
	vs, ok := promqlast.Unparen(b.LHS).(*parser.VectorSelector)
	if !ok || slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool { return m.Name == BelowLabel }) {
		return nil, false
	}
	n, ok := promqlast.Unparen(b.RHS).(*parser.NumberLiteral)
	if !ok || math.IsNaN(n.Val) {
		return nil, false
	}
	vs.LabelMatchers = append(vs.LabelMatchers, labels.MustNewMatcher(labels.MatchEqual, BelowLabel, strconv.FormatFloat(n.Val, 'g', -1, 64)))
	return vs, true
}

// copyChain unwraps nested label copies around an expression; copies are in
// the order label_replace applies them (innermost first).
func copyChain(e parser.Expr) (copies []labelCopy, inner parser.Expr, ok bool) {
	inner = e
	for {
		c, arg, isCopy := labelCopyCall(inner)
		if !isCopy {
			break
		}
		copies = append(copies, c)
		inner = arg
	}
	slices.Reverse(copies)
	return copies, inner, len(copies) > 0
}

// labelCopyCall matches label_replace(arg, "To", "$1", "From", "(.+)") with
// legacy label names (the RenameLabel value separates them by '>' and ',').
func labelCopyCall(e parser.Expr) (labelCopy, parser.Expr, bool) {
	call, ok := e.(*parser.Call)
	if !ok || call.Func.Name != "label_replace" || len(call.Args) != 5 {
		return labelCopy{}, nil, false
	}
	var s [4]string
	for i := range s {
		lit, ok := call.Args[i+1].(*parser.StringLiteral)
		if !ok {
			return labelCopy{}, nil, false
		}
		s[i] = lit.Val
	}
	to, repl, from, regex := s[0], s[1], s[2], s[3]
	if repl != "$1" || regex != "(.+)" || from == to ||
		!model.LegacyValidation.IsValidLabelName(from) || !model.LegacyValidation.IsValidLabelName(to) ||
		from == model.MetricNameLabel || to == model.MetricNameLabel {
		return labelCopy{}, nil, false
	}
	return labelCopy{From: from, To: to}, call.Args[0], true
}

// labelPreserving functions map each input series to at most one output
// series with the same labels (bar the metric name), so copying labels before
// or after them gives the same series.
var labelPreserving = map[string]bool{
	"rate": true, "irate": true, "increase": true, "delta": true, "idelta": true,
	"floor": true, "ceil": true, "abs": true, "clamp": true, "clamp_max": true, "clamp_min": true,
}

// transparent reports whether copying labels on e's selectors gives the same
// result as copying them on e's result.
func transparent(e parser.Expr, copies []labelCopy) bool {
	switch n := e.(type) {
	case *parser.VectorSelector:
		return !slices.ContainsFunc(n.LabelMatchers, func(m *labels.Matcher) bool { return m.Name == RenameLabel })
	case *parser.MatrixSelector:
		return transparent(n.VectorSelector, copies)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return true
	case *parser.ParenExpr:
		return transparent(n.Expr, copies)
	case *parser.StepInvariantExpr:
		return transparent(n.Expr, copies)
	case *parser.UnaryExpr:
		return transparent(n.Expr, copies)
	case *parser.Call:
		if n.Func.Name == "label_replace" {
			// Another label's replace commutes with the copies when it
			// neither reads nor writes a label they touch.
			dst, src := stringArg(n.Args[1]), stringArg(n.Args[3])
			for _, c := range copies {
				if dst == c.From || dst == c.To || src == c.From || src == c.To {
					return false
				}
			}
			return transparent(n.Args[0], copies)
		}
		if !labelPreserving[n.Func.Name] {
			return false
		}
		for _, a := range n.Args {
			if !transparent(a, copies) {
				return false
			}
		}
		return true
	case *parser.BinaryExpr:
		if m := n.VectorMatching; m != nil && (m.On || len(m.MatchingLabels) > 0 || len(m.Include) > 0 ||
			(m.Card != parser.CardOneToOne && m.Card != parser.CardManyToMany)) {
			return false
		}
		return transparent(n.LHS, copies) && transparent(n.RHS, copies)
	default:
		return false
	}
}

func stringArg(e parser.Expr) string {
	if s, ok := e.(*parser.StringLiteral); ok {
		return s.Val
	}
	return "\x00" // not a literal: matches no label name
}

func markSelectors(e parser.Expr, copies []labelCopy) {
	parts := make([]string, len(copies))
	for i, c := range copies {
		parts[i] = c.From + ">" + c.To
	}
	m := labels.MustNewMatcher(labels.MatchEqual, RenameLabel, strings.Join(parts, ","))
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			vs.LabelMatchers = append(vs.LabelMatchers, m)
		}
		return nil
	})
}

// parseCopies reads a RenameLabel value.
func parseCopies(v string) ([]labelCopy, bool) {
	var out []labelCopy
	for part := range strings.SplitSeq(v, ",") {
		from, to, ok := strings.Cut(part, ">")
		if !ok || from == "" || to == "" {
			return nil, false
		}
		out = append(out, labelCopy{From: from, To: to})
	}
	return out, len(out) > 0
}

// Internal returns the internal form (PushDownRenames) of a PromQL
// expression, for evaluation through RenamingQueryable.
func Internal(p parser.Parser, expr string) (string, error) {
	e, err := p.ParseExpr(expr)
	if err != nil {
		return "", err
	}
	return PushDownRenames(e).String(), nil
}

// Loader is a rules.GroupLoader that loads rule files as Prometheus does.
// The rules of the file at Canonical keep their exported form (what
// /api/v1/rules shows) and their internal form goes into Forms, whose
// QueryFunc evaluates it in their place; with Forms nil they are handed over
// in the internal form instead (Internal), for a QueryFunc that reads through
// RenamingQueryable. The file itself stays in the exported form, valid for
// any Prometheus.
type Loader struct {
	// Canonical is the path of the canonical rule file.
	Canonical string
	// Forms receives the canonical rules' internal forms at each load.
	Forms  *InternalForms
	Parser parser.Parser
	Logger *slog.Logger
}

// Load parses the rule file at identifier.
func (l Loader) Load(identifier string, ignoreUnknownFields bool, scheme model.ValidationScheme) (*rulefmt.RuleGroups, []error) {
	groups, errs := rulefmt.ParseFile(identifier, ignoreUnknownFields, scheme, l.Parser, l.Logger)
	if len(errs) > 0 || identifier != l.Canonical {
		return groups, errs
	}
	var exprs []string
	for gi := range groups.Groups {
		rs := groups.Groups[gi].Rules
		for ri := range rs {
			if l.Forms != nil {
				exprs = append(exprs, rs[ri].Expr)
				continue
			}
			expr, err := Internal(l.Parser, rs[ri].Expr)
			if err != nil {
				return nil, []error{fmt.Errorf("%s: rule %s: %w", identifier, rs[ri].Record, err)}
			}
			rs[ri].Expr = expr
		}
	}
	if l.Forms != nil {
		if err := l.Forms.Set(l.Parser, exprs); err != nil {
			return nil, []error{fmt.Errorf("%s: %w", identifier, err)}
		}
	}
	return groups, nil
}

// Parse parses one rule expression.
func (l Loader) Parse(query string) (parser.Expr, error) { return l.Parser.ParseExpr(query) }
