package rulegen

import (
	"maps"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// countingPinner records what is pinned.
type countingPinner struct {
	pinned map[string]bool
	pins   int
}

func (c *countingPinner) Pin(qs string)   { c.pinned[qs] = true; c.pins++ }
func (c *countingPinner) Unpin(qs string) { delete(c.pinned, qs) }

// TestInternalFormsPin: every string an evaluation of the canonical group
// hands to the engine is pinned in its parser, each once however many
// evaluations run, and a new Set (a reload) unpins what the old set pinned.
func TestInternalFormsPin(t *testing.T) {
	e := newEvalEnv(t)
	e.appendFleet(mixedFleet(t, e, 2000))
	pinner := &countingPinner{pinned: map[string]bool{}}
	e.pinIn = pinner
	g := e.group(DefaultConfig(), true)
	if got, want := len(pinner.pinned), len(g.forms.shared); got != want || want == 0 {
		t.Errorf("after Set, %d strings pinned, want the %d shared subexpressions", got, want)
	}
	rs := g.Rules()
	exprs := make([]string, len(rs))
	for i, r := range rs {
		exprs[i] = r.Query().String()
	}
	g.eval(t1)
	after1 := pinner.pins
	g.eval(t1)
	g.eval(t1.Add(15e9))
	if pinner.pins != after1 {
		t.Errorf("%d pins after one evaluation, %d after three: the same plans were pinned again", after1, pinner.pins)
	}
	// Everything pinned is a plan's string or a shared subexpression.
	want := map[string]bool{}
	for _, s := range g.forms.shared {
		want[s.query] = true
	}
	for _, form := range g.forms.byExported {
		for _, p := range form.plans {
			for _, s := range p.strings() {
				want[s] = true
			}
		}
	}
	if !maps.Equal(pinner.pinned, want) {
		t.Errorf("pinned %d strings, the plans and shared subexpressions are %d", len(pinner.pinned), len(want))
	}
	if len(want) <= len(g.forms.shared) {
		t.Errorf("no plan was pinned: %d strings", len(want))
	}
	for _, r := range rs {
		if err := r.LastError(); err != nil {
			t.Fatalf("rule %s: %v", r.Name(), err)
		}
	}
	// A reload with one rule fewer: only its shared subexpressions stay.
	if err := g.forms.Set(parser.NewParser(parser.Options{}), exprs[1:]); err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(maps.Keys(pinner.pinned)), slices.Sorted(slices.Values(queries(g.forms.shared))); !slices.Equal(got, want) {
		t.Errorf("after a reload, pinned %d strings, want the %d shared subexpressions", len(got), len(want))
	}
}
