package promqlast

import (
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

func TestUnparen(t *testing.T) {
	for in, want := range map[string]string{
		"((x))":           "x",
		"(sum(x))":        "sum(x)",
		"x":               "x",
		"(x) + (y)":       "(x) + (y)",
		"((rate(x[1m])))": "rate(x[1m])",
	} {
		e, err := parser.NewParser(parser.Options{}).ParseExpr(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := Unparen(e).String(); got != want {
			t.Errorf("Unparen(%s) = %s, want %s", in, got, want)
		}
	}
}
