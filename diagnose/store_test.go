package diagnose

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// TestScratchSelectByName: a select with a regular expression on the name
// (the canonical rules' selectors of several spellings of one metric) finds
// exactly the series of the names it matches, as one without a name matcher
// finds every series its other matchers accept.
func TestScratchSelectByName(t *testing.T) {
	sc := newScratch()
	app := sc.AppenderV2(context.Background())
	for _, l := range []labels.Labels{
		labels.FromStrings(model.MetricNameLabel, "a", "pod", "p"),
		labels.FromStrings(model.MetricNameLabel, "ab", "pod", "q"),
		labels.FromStrings(model.MetricNameLabel, "b", "pod", "p"),
	} {
		if _, err := app.Append(0, l, 0, 60_000, 1, nil, nil, storage.AppendV2Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	q, err := sc.Querier(0, 120_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ms   []*labels.Matcher
		want []string
	}{
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "a|b")}, []string{`{__name__="a", pod="p"}`, `{__name__="b", pod="p"}`}},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "a.*"), labels.MustNewMatcher(labels.MatchEqual, "pod", "q")}, []string{`{__name__="ab", pod="q"}`}},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchNotEqual, model.MetricNameLabel, "a")}, []string{`{__name__="ab", pod="q"}`, `{__name__="b", pod="p"}`}},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "pod", "p")}, []string{`{__name__="a", pod="p"}`, `{__name__="b", pod="p"}`}},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "c|d")}, nil},
	} {
		var got []string
		ss := q.Select(context.Background(), true, nil, c.ms...)
		for ss.Next() {
			got = append(got, ss.At().Labels().String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, want %v", c.ms, got, c.want)
		}
	}
}

// TestScratchHashCollisions: series whose labels share a hash are each
// found, and truncation forgets exactly the emptied ones, whichever of them
// held the hash's first place.
func TestScratchHashCollisions(t *testing.T) {
	sc := newScratch()
	const h = 42
	var ls []labels.Labels
	for i, pod := range []string{"a", "b", "c"} {
		l := labels.FromStrings(model.MetricNameLabel, "m", "pod", pod)
		ls = append(ls, l)
		sc.lookupHash(h, l).add(int64(i+1)*60_000, float64(i))
	}
	for i, l := range ls {
		if e := sc.find(h, l); e == nil || e.vs[0] != float64(i) {
			t.Fatalf("series %s not found: %v", l, e)
		}
		if e := sc.lookupHash(h, l); e.vs[0] != float64(i) {
			t.Fatalf("lookup of %s made a new series", l)
		}
	}
	// Forget "a" (the hash's first) and keep "b" and "c".
	sc.truncate(2 * 60_000)
	if sc.find(h, ls[0]) != nil {
		t.Fatal("truncated series still found")
	}
	for _, l := range ls[1:] {
		if sc.find(h, l) == nil {
			t.Fatalf("series %s lost by the truncation", l)
		}
	}
	if n, _ := sc.samples(); n != 2 {
		t.Fatalf("%d series after truncation, want 2", n)
	}
	sc.truncate(4 * 60_000)
	if len(sc.series) != 0 || len(sc.collided) != 0 || len(sc.byName) != 0 {
		t.Fatalf("maps %d/%d/%d after dropping everything", len(sc.series), len(sc.collided), len(sc.byName))
	}
}
