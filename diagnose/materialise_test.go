package diagnose

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
)

// TestMaterialiseStaleMarkers: the fast path writes a recording rule's
// results as Group.Eval would minute by minute, a stale marker at the
// first minute a series is missing (also across two chunks, and where
// a series' place in the result moves), whether or not a minute has the
// series of the one before.
func TestMaterialiseStaleMarkers(t *testing.T) {
	const name = "rec:x"
	expr, err := newParser().ParseExpr(`x`)
	if err != nil {
		t.Fatal(err)
	}
	rr := rules.NewRecordingRule(name, expr, labels.FromStrings("rule", "r"))
	g := rules.NewGroup(rules.GroupOptions{Name: "g", Interval: time.Minute, Rules: []rules.Rule{rr}, Opts: &rules.ManagerOptions{}})
	in := map[string]labels.Labels{}
	for _, s := range []string{"a", "b", "c"} {
		in[s] = labels.FromStrings("__name__", "x", "s", s)
	}
	// The series each minute returns, in result order; two chunks.
	steps := [][]string{{"a", "b"}, {"a", "b"}, {"a", "b"}, {"a"}, {"a", "b"}, {"a", "b", "c"}, {"a", "b", "c"}, {"b", "c"}, {"b", "c"}, {"c"}, {}, {}, {"a"}}
	chunks := [][2]int{{0, 8}, {9, 12}}
	sc, p := newScratch(), newPrecomputed()
	m := minute.Milliseconds()
	for _, c := range chunks {
		vecs := map[int64]promql.Vector{}
		for i := c[0]; i <= c[1]; i++ {
			for _, s := range steps[i] {
				vecs[int64(i)*m] = append(vecs[int64(i)*m], promql.Sample{Metric: in[s], T: int64(i) * m, F: float64(i)})
			}
		}
		p.byExpr = map[string]map[int64]promql.Vector{expr.String(): vecs}
		if err := p.materialise(context.Background(), sc, g, rr, int64(c[0])*m, int64(c[1])*m); err != nil {
			t.Fatal(err)
		}
	}
	// What each series holds: its value, or S for a stale marker, a minute.
	got := map[string]string{}
	for _, e := range sc.byName[name] {
		var b strings.Builder
		ts := sc.times(e)
		for i, v := range e.vs {
			fmt.Fprintf(&b, "%d:", e.at(ts, i)/m)
			if value.IsStaleNaN(v) {
				b.WriteString("S ")
			} else {
				fmt.Fprintf(&b, "%v ", v)
			}
		}
		got[e.lbls.String()] = b.String()
	}
	want := map[string]string{}
	for _, s := range []string{"a", "b", "c"} {
		var b strings.Builder
		was := false
		for i, ss := range steps {
			is := slices.Contains(ss, s)
			switch {
			case is:
				fmt.Fprintf(&b, "%d:%d ", i, i)
			case was:
				fmt.Fprintf(&b, "%d:S ", i)
			}
			was = is
		}
		want[fmt.Sprintf(`{__name__="%s", rule="r", s="%s"}`, name, s)] = b.String()
	}
	if !maps.Equal(got, want) {
		t.Fatalf("materialised:\n%v\nwant:\n%v", got, want)
	}
}
