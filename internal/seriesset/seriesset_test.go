package seriesset

import (
	"errors"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

func series(names ...string) []storage.Series {
	out := make([]storage.Series, len(names))
	for i, n := range names {
		out[i] = storage.NewListSeries(labels.FromStrings("__name__", n), nil)
	}
	return out
}

func names(t *testing.T, set storage.SeriesSet) []string {
	t.Helper()
	var out []string
	for set.Next() {
		out = append(out, set.At().Labels().Get("__name__"))
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSortedSortsAndKeepsWarnings(t *testing.T) {
	var w annotations.Annotations
	w.Add(errors.New("partial"))
	got := Sorted(List(series("c", "a", "b"), w))
	if n := names(t, got); len(n) != 3 || n[0] != "a" || n[1] != "b" || n[2] != "c" {
		t.Fatalf("sorted = %v, want [a b c]", n)
	}
	if len(got.Warnings()) != 1 {
		t.Fatalf("warnings = %v, want the one given", got.Warnings())
	}
}

func TestSortedPassesTheError(t *testing.T) {
	want := errors.New("read failed")
	if err := Sorted(storage.ErrSeriesSet(want)).Err(); !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}

func TestListEmpty(t *testing.T) {
	if n := names(t, List(nil, nil)); len(n) != 0 {
		t.Fatalf("empty list yields %v", n)
	}
}
