package main

import (
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/backfill"
)

// TestDropLabels: --remote-read.drop-label removes the labels from every
// series read, and refuses to merge series that only they told apart.
func TestDropLabels(t *testing.T) {
	read := func() []backfill.Series {
		return []backfill.Series{
			{Labels: labels.FromStrings("__name__", "up", "cluster", "eu", "instance", "a", "replica", "1")},
			{Labels: labels.FromStrings("__name__", "up", "cluster", "eu", "instance", "b", "replica", "1")},
			{Labels: labels.FromStrings("__name__", "up", "instance", "c")},
		}
	}
	got, err := dropLabels(read(), []string{"cluster", "replica", "absent"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{__name__="up", instance="a"}`, `{__name__="up", instance="b"}`, `{__name__="up", instance="c"}`}
	for i, s := range got {
		if s.Labels.String() != want[i] {
			t.Errorf("series %d: %s, want %s", i, s.Labels, want[i])
		}
	}
	if same, err := dropLabels(read(), nil); err != nil || same[0].Labels.Get("cluster") != "eu" {
		t.Errorf("dropping no label changed the series: %v, %v", same, err)
	}

	_, err = dropLabels(read(), []string{"instance"})
	if err == nil || !strings.Contains(err.Error(), `instance="a"`) || !strings.Contains(err.Error(), `instance="b"`) {
		t.Errorf("dropping the label that tells two series apart: %v, want an error naming both", err)
	}
}
