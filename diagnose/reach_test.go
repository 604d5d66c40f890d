package diagnose

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
)

// TestReadReach: how far back each name is read, as PromQL selects it: a
// range without the lookback, a plain selector with it, offsets and
// subqueries added, the longest reader winning, an @ modifier reaching
// anywhere, and no reach (every window) once a selector has no name.
func TestReadReach(t *testing.T) {
	const lookback = 5 * time.Minute
	p := newParser()
	parse := func(qs ...string) []parser.Expr {
		var out []parser.Expr
		for _, q := range qs {
			e, err := p.ParseExpr(q)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		return out
	}
	r := newReadReach(parse(
		`rate(req_total[3m])`,
		`temp > 80`,
		`max_over_time(temp[2m] offset 1m)`,
		`rate(late_total[3m] offset 10m)`,
		`max_over_time(rate(sub_total[1m])[10m:1m])`,
		`{__name__=~"dcgm_.+"}`,
		`rate(dcgm_x_total[2m])`,
		`pinned @ 100`,
		`strata:recorded[1h]`,
	), map[string]bool{"strata:recorded": true}, lookback)
	for name, want := range map[string]time.Duration{
		"req_total":    3 * time.Minute,
		"temp":         lookback, // longer than 2m + 1m
		"late_total":   13 * time.Minute,
		"sub_total":    11 * time.Minute,
		"dcgm_x_total": lookback, // the regular expression's plain selector
		"dcgm_temp":    lookback,
	} {
		if got := r.of(name); got != want.Milliseconds() {
			t.Errorf("%s: reach %s, want %s", name, time.Duration(got)*time.Millisecond, want)
		}
	}
	for _, name := range []string{"pinned", "unread", "strata:recorded"} {
		if got := r.of(name); got != math.MaxInt64 {
			t.Errorf("%s: reach %d ms, want every window", name, got)
		}
	}
	if from := r.fromFunc(1_000_000); from("req_total") != 1_000_000-(3*time.Minute).Milliseconds() || from("pinned") != math.MinInt64 {
		t.Errorf("fromFunc: req_total from %d, pinned from %d", from("req_total"), from("pinned"))
	}
	if r := newReadReach(parse(`rate(req_total[3m])`, `{job="x"}`), nil, lookback); r != nil {
		t.Error("a selector without a name: reach set, want none (every window)")
	}
	if r := newReadReach([]parser.Expr{nil}, nil, lookback); r != nil {
		t.Error("an expression that does not parse: reach set, want none (every window)")
	}
}
