package diagnose

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/tiers"
)

// readReach is how far back from the minute evaluated the rules and
// evidence queries read the minute data of each metric name, so that a
// snapshot holds of each series only the windows its readers can reach: a
// name read through rate(...[3m]) needs the last 4 windows and one read by
// a plain selector the lookback's 6, where every series held the 10 of the
// longest reach plus the lookback (e.need).
//
// A selector reaches back by its range and offset and those of the
// subqueries around it, plus the lookback delta where PromQL adds it (a
// plain selector, an anchored or smoothed range): what
// promql.getTimeRangesForSelector selects. A selector with an @ modifier
// (or inside a subquery with one) reaches anywhere.
//
// It also holds which window columns the selectors read of each name
// (selectorColumns), so that a snapshot loads only those: a name read
// through rate needs 8 of the 11, one read by a plain selector 3.
type readReach struct {
	by []nameReach
}

// nameReach is a selector's name matcher, how far back it reads and the
// window columns it reads.
type nameReach struct {
	m    *labels.Matcher
	back time.Duration // math.MaxInt64: anywhere
	cols tiers.WindowColumns
}

// newReadReach derives the reaches from the expressions the engine
// evaluates; nil (every window of the snapshot) when some expression
// cannot be parsed or a selector of the minute data has no name (readSet
// is nil then too).
func newReadReach(exprs []parser.Expr, recorded map[string]bool, lookback time.Duration) *readReach {
	r := &readReach{}
	all := false
	for _, expr := range exprs {
		if expr == nil {
			return nil
		}
		cols := selectorColumns(expr)
		walkSelectorNodes(expr, func(vs *parser.VectorSelector, back time.Duration, pinned, matrix bool) {
			if pinned || vs.Timestamp != nil || vs.StartOrEnd != 0 {
				back = math.MaxInt64
			} else if !matrix || vs.Anchored || vs.Smoothed {
				back += lookback
			}
			back = max(back, 0)
			named := false
			for _, m := range vs.LabelMatchers {
				if m.Name != model.MetricNameLabel || (m.Type != labels.MatchEqual && m.Type != labels.MatchRegexp) {
					continue
				}
				named = true
				if m.Type == labels.MatchEqual && recorded[m.Value] {
					continue // the scratch store's, not the minute data's
				}
				r.by = append(r.by, nameReach{m: m, back: back, cols: cols[vs]})
			}
			all = all || !named
		})
	}
	if all {
		return nil
	}
	return r
}

// of is how far back (ms) the readers of metric name reach: the longest of
// the selectors whose name matcher matches it, and unknown (MaxInt64) for a
// name none matches.
func (r *readReach) of(name string) int64 {
	back, found := time.Duration(0), false
	for _, nr := range r.by {
		if nr.m.Matches(name) {
			back, found = max(back, nr.back), true
		}
	}
	if !found || back == math.MaxInt64 {
		return math.MaxInt64
	}
	return back.Milliseconds()
}

// selectorColumns maps each vector selector of expr to the window columns
// its selects may read. PromQL hints a select with the function or
// aggregation nearest around its selector (SelectHints.Func), and the
// minute view reads the columns that function's samples are made of
// (tiers.ColumnsForFunc). Every function around a selector counts, and
// none (a binary operation in between): the internal form the engine
// evaluates (rulegen) drops calls and operations around selectors, so its
// nearest function is one of those or none.
func selectorColumns(expr parser.Expr) map[*parser.VectorSelector]tiers.WindowColumns {
	out := map[*parser.VectorSelector]tiers.WindowColumns{}
	parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		cols := tiers.ColumnsForFunc("")
		for _, p := range path {
			switch x := p.(type) {
			case *parser.Call:
				cols |= tiers.ColumnsForFunc(x.Func.Name)
			case *parser.AggregateExpr:
				cols |= tiers.ColumnsForFunc(x.Op.String())
			}
		}
		out[vs] = cols
		return nil
	})
	return out
}

// columns is the window columns the readers of metric name read: those of
// every selector whose name matcher matches it, and every column for a
// name none matches.
func (r *readReach) columns(name string) tiers.WindowColumns {
	var cols tiers.WindowColumns
	found := false
	for _, nr := range r.by {
		if nr.m.Matches(name) {
			cols, found = cols|nr.cols, true
		}
	}
	if !found {
		return tiers.AllWindowColumns
	}
	return cols
}

// reads returns what a snapshot whose first minute evaluated is first
// holds of each metric name (the zero value, everything, for a nil r): its
// windows from fromFunc, the columns its selectors read.
func (r *readReach) reads(first int64) tiers.SnapshotReads {
	if r == nil {
		return tiers.SnapshotReads{}
	}
	var mu sync.Mutex // the minute tier's readers ask in parallel
	seen := map[string]tiers.WindowColumns{}
	return tiers.SnapshotReads{
		From: r.fromFunc(first),
		Columns: func(name string) tiers.WindowColumns {
			mu.Lock()
			defer mu.Unlock()
			cols, ok := seen[name]
			if !ok {
				cols = r.columns(name)
				seen[name] = cols
			}
			return cols
		},
	}
}

// fromFunc returns, for a snapshot whose first minute evaluated is first,
// the earliest window start read of each metric name (nil: all of them).
// The returned func is for one snapshot's reading goroutine.
func (r *readReach) fromFunc(first int64) func(string) int64 {
	if r == nil {
		return nil
	}
	seen := map[string]int64{}
	return func(name string) int64 {
		from, ok := seen[name]
		if !ok {
			from = math.MinInt64
			if back := r.of(name); back != math.MaxInt64 {
				from = first - back
			}
			seen[name] = from
		}
		return from
	}
}
