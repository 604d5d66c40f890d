package rulegen

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
)

// TestPrune pins what Prune drops when the selectors of `absent*` match
// nothing, and that it never drops through a function that makes something
// out of nothing.
func TestPrune(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"or keeps the side that has series", `a or absent1`, `a`},
		{"or on the left", `absent1 or on (x) a`, `a`},
		{"or of nothing", `absent1 or absent2`, ``},
		{"unless nothing", `a unless absent1`, `a`},
		{"nothing unless", `absent1 unless a`, ``},
		{"and", `a and absent1`, ``},
		{"arithmetic between vectors", `a / on (x) group_left () absent1`, ``},
		{"comparison with a number", `absent1 > 50`, ``},
		{"number on the left", `100 * absent1`, ``},
		{"aggregation", `sum by (x) (rate(absent1[2m]))`, ``},
		{"quantile", `histogram_quantile(0.99, sum by (le) (rate(absent1[2m]))) or on (x) b`, `b`},
		{"nested alternatives", `(a / (absent1 > 0)) or on (x) (b or on (x) absent2) or on (x) absent3`, `(b)`},
		{"paren kept", `sum((a or absent1))`, `sum((a))`},
		{"label_replace", `label_replace(absent1, "y", "1", "", "") or a`, `a`},
		{"absent makes something of nothing", `absent(absent1)`, `absent(absent1)`},
		{"vector makes something of nothing", `absent1 or vector(1)`, `vector(1)`},
		{"scalar of nothing is NaN", `a * scalar(absent1)`, `a * scalar(absent1)`},
		{"inside absent", `absent(absent1 or absent2)`, `absent(absent1 or absent2)`},
		{"inside absent, one side", `absent(a or absent2)`, `absent(a)`},
		{"nothing to prune", `sum(rate(a[1m])) / sum(b)`, `sum(rate(a[1m])) / sum(b)`},
		{"subquery", `max_over_time(absent1[5m:1m]) or a`, `a`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := parser.NewParser(parser.Options{}).ParseExpr(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			before := in.String()
			got, none := Prune(in, func(vs *parser.VectorSelector) bool { return strings.HasPrefix(vs.Name, "absent") })
			if in.String() != before {
				t.Errorf("Prune modified its input: %s", in)
			}
			if none != (tc.want == "") {
				t.Fatalf("yields nothing = %v, want %v (%s)", none, tc.want == "", got)
			}
			if !none && got.String() != tc.want {
				t.Errorf("pruned to %s, want %s", got, tc.want)
			}
		})
	}
}

// hidingQueryable hides the series whose name matches hide while hiding is
// set, as if the fleet had never sent them (or the head had dropped them).
type hidingQueryable struct {
	storage.Queryable
	hide   *regexp.Regexp
	hiding *bool
}

func (h hidingQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := h.Queryable.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return hidingQuerier{q, h}, nil
}

type hidingQuerier struct {
	storage.Querier
	h hidingQueryable
}

func (q hidingQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	set := q.Querier.Select(ctx, sortSeries, hints, ms...)
	if !*q.h.hiding {
		return set
	}
	return &hidingSet{SeriesSet: set, hide: q.h.hide}
}

type hidingSet struct {
	storage.SeriesSet
	hide *regexp.Regexp
}

func (s *hidingSet) Next() bool {
	for s.SeriesSet.Next() {
		if !s.hide.MatchString(s.At().Labels().Get(model.MetricNameLabel)) {
			return true
		}
	}
	return false
}

// TestSkippedRulesFollowTheirInputs evaluates the canonical rules as `strata
// serve` does (internal form, parts without series skipped) and as a
// Prometheus would (exported form) while the vLLM series are absent, then
// present, then absent again: both must record the same samples and the same
// staleness markers, and the skipping one must start recording when its
// input appears and mark its series stale when the input goes.
func TestSkippedRulesFollowTheirInputs(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RateWindow = time.Minute
	steps := []struct {
		at     time.Time
		hiding bool
	}{{t0.Add(15 * time.Second), true}, {t0.Add(45 * time.Second), false}, {t1, true}}
	var got [2]map[string]string
	for i, internal := range []bool{false, true} {
		e := newEvalEnv(t)
		e.appendFleet(mixedFleet(t, e, 2000))
		hiding := false
		g := e.groupOver(cfg, internal, hidingQueryable{e.raw, regexp.MustCompile("^vllm:"), &hiding})
		for _, s := range steps {
			hiding = s.hiding
			g.eval(s.at)
			for _, r := range g.Rules() {
				if err := r.LastError(); err != nil {
					t.Fatalf("rule %s at %s: %v", r.Name(), s.at, err)
				}
			}
		}
		got[i] = e.recorded()
	}
	internal := got[1]
	sameRecorded(t, got[0], internal)
	// The serving series: none while vLLM is absent, a value when it
	// appears, a staleness marker when it goes.
	stale := fmt.Sprintf("%x", value.StaleNaN)
	var values, markers int
	for k, v := range internal {
		if !strings.HasPrefix(k, "strata:kv_cache_usage:ratio ") {
			continue
		}
		switch {
		case strings.HasSuffix(k, fmt.Sprintf("@%d", steps[0].at.UnixMilli())):
			t.Errorf("recorded %s while its input was absent", k)
		case strings.HasSuffix(k, fmt.Sprintf("@%d", steps[1].at.UnixMilli())) && v != stale && !math.IsNaN(parseBits(t, v)):
			values++
		case strings.HasSuffix(k, fmt.Sprintf("@%d", steps[2].at.UnixMilli())) && v == stale:
			markers++
		}
	}
	if values == 0 || markers != values {
		t.Errorf("kv cache usage: %d values when vLLM appeared, %d staleness markers when it went; want as many, at least one", values, markers)
	}
}

func parseBits(t *testing.T, hex string) float64 {
	t.Helper()
	var bits uint64
	if _, err := fmt.Sscanf(hex, "%x", &bits); err != nil {
		t.Fatal(err)
	}
	return math.Float64frombits(bits)
}
