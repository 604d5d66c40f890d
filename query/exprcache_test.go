package query

import (
	"log/slog"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// TestPromQLAcceptancePinned runs Prometheus' PromQL test suite with every
// query string pinned in the engine's parser as it is first parsed: each
// evaluation runs on a copy of the pinned tree, and the suite's results,
// annotations and errors must be what it expects of a fresh parse.
func TestPromQLAcceptancePinned(t *testing.T) {
	api, err := New(acceptanceConfig(), openTestRaw(t), nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := api.Close(); err != nil {
			t.Error(err)
		}
	})
	api.pinned.pinAll = true
	promqltest.RunBuiltinTestsWithStorage(skippingTB{T: t, skips: promqlSkips}, api.Engine(), newRawTestStorage)
	if api.pinned.Len() == 0 {
		t.Fatal("nothing was pinned")
	}
}

// TestPinnedExprsCopies: ParseExpr of a pinned string returns a tree equal
// to a fresh parse's, made of new nodes, so that what the engine writes into
// one (resolved offsets, selected series, inserted wrappers) reaches neither
// the pinned tree nor another copy; Unpin parses again.
func TestPinnedExprsCopies(t *testing.T) {
	p := parser.NewParser(parser.Options{EnableExperimentalFunctions: true})
	for _, qs := range []string{
		`sum by (a) (rate(m{a=~"x|y",b!="z"}[5m] offset 1m)) / on (a) group_left (c) max(n @ 100)`,
		`label_replace(-avg_over_time(m[10m:30s] offset 2m), "d", "$1", "a", "(.+)") > bool 3`,
		`histogram_quantile(0.9, sum by (le) (rate(h_bucket[2m]))) or vector(1)`,
		`topk(3, m) unless (count_values("v", m) == 2)`,
		`m[5m] @ start()`, `"s"`, `1 + 2 * (3)`,
	} {
		c := NewPinnedExprs(p)
		c.Pin(qs)
		want, err := p.ParseExpr(qs)
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.ParseExpr(qs)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := c.ParseExpr(qs)
		ref, _ := c.ParseExpr(qs)
		pinned := c.exprs[qs]
		// The copies share the pinned tree's compiled matchers, which a
		// fresh parse compiles anew (DeepEqual tells those apart by their
		// functions): equal to the pinned tree, printed as the fresh one.
		if !reflect.DeepEqual(a, pinned) || a.String() != want.String() || a.Type() != want.Type() {
			t.Errorf("%s: the copy is not the pinned tree:\n%#v\n%#v", qs, a, pinned)
		}
		nodes := map[parser.Node]bool{}
		parser.Inspect(pinned, func(n parser.Node, _ []parser.Node) error {
			if _, isList := n.(parser.Expressions); n != nil && !isList {
				nodes[n] = true
			}
			return nil
		})
		parser.Inspect(a, func(n parser.Node, _ []parser.Node) error {
			if _, isList := n.(parser.Expressions); n != nil && !isList && nodes[n] {
				t.Errorf("%s: node %s shared with the pinned tree", qs, n)
			}
			return nil
		})
		// What the engine writes into a copy stays there.
		parser.Inspect(a, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				vs.Offset, vs.SkipHistogramBuckets = 12345, true
			}
			if call, ok := n.(*parser.Call); ok && len(call.Args) > 0 {
				call.Args[0] = &parser.NumberLiteral{Val: 7}
			}
			return nil
		})
		if !reflect.DeepEqual(b, ref) || !reflect.DeepEqual(pinned, ref) {
			t.Errorf("%s: a write into one copy reached another or the pinned tree", qs)
		}
		c.Unpin(qs)
		if c.Len() != 0 {
			t.Errorf("%s: %d pinned after Unpin", qs, c.Len())
		}
	}
	// A string that does not parse is not pinned, and reports its error.
	c := NewPinnedExprs(p)
	c.Pin(`sum(`)
	if _, err := c.ParseExpr(`sum(`); err == nil || c.Len() != 0 {
		t.Errorf("a bad string: error %v, %d pinned", err, c.Len())
	}
}
