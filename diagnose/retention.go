package diagnose

import (
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// scratchKeep is how long the scratch store keeps each of the engine's own
// series, by name: what the rules and evidence queries read of it back
// from the minute being evaluated (range, offset and subquery included),
// plus the lookback and a minute, and never more than scratch_retention.
//
// The store kept every series for scratch_retention (3h): 180 samples of
// each of the about 50,000 series the engine records at 50,000 active
// series (16 bytes a sample: 140 MB after three hours), although only four
// names are read over more than 15 minutes, and the baseline series (three
// per tracked series) over 3 minutes at most. Over a four-hour replay of
// the small simulated cluster the store held 83,462 samples at the end
// before, 6,788 now (TestScratchKeepEqualsFullRetention logs both).
//
// All: every name keeps scratch_retention, when a selector could read a
// recorded name without naming it (a regular expression on the name, no
// name, an @ modifier) or an evidence query cannot be parsed.
type scratchKeep struct {
	byName map[string]int64 // ms
	def    int64            // names no rule reads
	all    bool
	ret    int64
}

// keepFor is how far back from the minute evaluated series name is kept.
func (k *scratchKeep) keepFor(name string) int64 {
	if k.all {
		return k.ret
	}
	if d, ok := k.byName[name]; ok {
		return d
	}
	return k.def
}

// newScratchKeep derives the keeps from the expressions the engine
// evaluates (rules and evidence queries) and the names it records.
func newScratchKeep(exprs []parser.Expr, recorded map[string]bool, lookback, retention time.Duration) *scratchKeep {
	k := &scratchKeep{byName: map[string]int64{}, ret: retention.Milliseconds()}
	k.def = min(k.ret, (lookback + minute).Milliseconds())
	note := func(vs *parser.VectorSelector, back time.Duration, pinned bool) {
		if pinned || vs.Timestamp != nil || vs.StartOrEnd != 0 {
			k.all = true
			return
		}
		named := false
		for _, m := range vs.LabelMatchers {
			if m.Name != model.MetricNameLabel {
				continue
			}
			if m.Type == labels.MatchEqual {
				named = true
				continue
			}
			for n := range recorded {
				if m.Matches(n) {
					k.all = true
				}
			}
		}
		if !named {
			// Without an equality on the name only the matchers above
			// decide; none on the name at all matches everything.
			hasName := false
			for _, m := range vs.LabelMatchers {
				hasName = hasName || m.Name == model.MetricNameLabel
			}
			if !hasName {
				k.all = true
			}
			return
		}
		if !recorded[vs.Name] {
			return
		}
		d := min(k.ret, (max(back, 0) + lookback + minute).Milliseconds())
		k.byName[vs.Name] = max(k.byName[vs.Name], d, k.def)
	}
	for _, e := range exprs {
		if e == nil {
			k.all = true
			continue
		}
		walkSelectors(e, note)
	}
	return k
}

// engineExprs parses every rule expression and evidence query of files (a
// nil entry for one that does not parse).
func engineExprs(files []ruleFile) []parser.Expr {
	var exprs []parser.Expr
	p := newParser()
	for _, f := range files {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					expr = nil
				}
				exprs = append(exprs, expr)
				for _, ev := range parseEvidence(r.Annotations["evidence"]) {
					// Template actions become a placeholder: they sit in label values.
					q := templateAction.ReplaceAllString(ev.Query, "x")
					if q == "" {
						continue
					}
					expr, err := p.ParseExpr(q)
					if err != nil {
						expr = nil
					}
					exprs = append(exprs, expr)
				}
			}
		}
	}
	return exprs
}
