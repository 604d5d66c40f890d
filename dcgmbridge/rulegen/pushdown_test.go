package rulegen

import (
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// TestPushDownRenames pins which expressions the internal form rewrites:
// only copies over label-preserving expressions, and only a plain
// selector compared with a number.
func TestPushDownRenames(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"copy over rate", `label_replace(rate(x[2m]), "hostname", "$1", "Hostname", "(.+)")`,
			`rate(x{__strata_rename__="Hostname>hostname"}[2m])`},
		{"chain in application order", `label_replace(label_replace(x, "hostname", "$1", "pod", "(.+)"), "pod", "$1", "pod_name", "(.+)")`,
			`x{__strata_rename__="pod>hostname,pod_name>pod"}`},
		{"copy and blank filter", `max by (hostname) (label_replace(x < 10, "hostname", "$1", "Hostname", "(.+)"))`,
			`max by (hostname) (x{__strata_below__="10",__strata_rename__="Hostname>hostname"})`},
		{"other label_replace stays", `label_replace(label_replace(x, "f", "1", "", ""), "hostname", "$1", "Hostname", "(.+)")`,
			`label_replace(x{__strata_rename__="Hostname>hostname"}, "f", "1", "", "")`},
		{"aggregation under the copy", `label_replace(sum by (Hostname) (x), "hostname", "$1", "Hostname", "(.+)")`,
			`label_replace(sum by (Hostname) (x), "hostname", "$1", "Hostname", "(.+)")`},
		{"matching on labels under the copy", `label_replace(x * on (a) y, "hostname", "$1", "Hostname", "(.+)")`,
			`label_replace(x * on (a) y, "hostname", "$1", "Hostname", "(.+)")`},
		{"a copy reading a copied label is a chain", `label_replace(label_replace(x, "h", "$1", "hostname", "(.+)"), "hostname", "$1", "Hostname", "(.+)")`,
			`x{__strata_rename__="hostname>h,Hostname>hostname"}`},
		{"label_replace reading a copied label", `label_replace(label_replace(x, "h", "x$1", "hostname", "(.+)"), "hostname", "$1", "Hostname", "(.+)")`,
			`label_replace(label_replace(x, "h", "x$1", "hostname", "(.+)"), "hostname", "$1", "Hostname", "(.+)")`},
		{"not a plain copy", `label_replace(x, "hostname", "$1", "Hostname", "(.*)")`,
			`label_replace(x, "hostname", "$1", "Hostname", "(.*)")`},
		{"bool comparison", `x < bool 10`, `x < bool 10`},
		{"number on the left", `10 > x`, `10 > x`},
		{"comparison of a rate", `rate(x[1m]) < 10`, `rate(x[1m]) < 10`},
		{"comparison of two selectors", `x < y`, `x < y`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Internal(parser.NewParser(parser.Options{}), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestRenamingQueryableSorted checks a sorted Select: the copies can change
// the order, so the wrapper sorts after making them.
func TestRenamingQueryableSorted(t *testing.T) {
	e := newEvalEnv(t)
	app := e.raw.Appender(t.Context())
	for _, ls := range []labels.Labels{
		labels.FromStrings("__name__", "x", "UUID", "zz"),
		labels.FromStrings("__name__", "x", "uuid", "z"),
	} {
		if _, err := app.Append(0, ls, t0.UnixMilli(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	q, err := RenamingQueryable(e.raw).Querier(t0.UnixMilli(), t0.UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	set := q.Select(t.Context(), true, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"),
		labels.MustNewMatcher(labels.MatchEqual, RenameLabel, "uuid>UUID"))
	var got []string
	for set.Next() {
		got = append(got, set.At().Labels().Get("UUID"))
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	// Stored order puts UUID="zz" first (UUID sorts before __name__); with
	// uuid copied onto UUID the other series, UUID="z", comes first.
	if want := []string{"z", "zz"}; !slices.Equal(got, want) {
		t.Errorf("UUID order %v, want %v", got, want)
	}
}
