package diagnose

import (
	"math"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
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
type readReach struct {
	by []nameReach
}

// nameReach is a selector's name matcher and how far back it reads.
type nameReach struct {
	m    *labels.Matcher
	back time.Duration // math.MaxInt64: anywhere
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
				r.by = append(r.by, nameReach{m: m, back: back})
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
