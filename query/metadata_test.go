package query

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/metadata"
)

func TestSelectMetadata(t *testing.T) {
	counter := metadata.Metadata{Type: model.MetricTypeCounter, Help: "c"}
	gaugeA := metadata.Metadata{Type: model.MetricTypeGauge, Help: "a"}
	gaugeB := metadata.Metadata{Type: model.MetricTypeGauge, Help: "b"}
	src := fakeMetadata{
		"b_total": {counter, counter}, // the same metadata from two senders
		"a":       {gaugeA, gaugeB},
		"empty":   {},
	}
	for _, tc := range []struct {
		name                  string
		metric                string
		limit, limitPerMetric int
		want                  map[string][]metadata.Metadata
	}{
		{"all, duplicates collapse", "", -1, -1, map[string][]metadata.Metadata{"a": {gaugeA, gaugeB}, "b_total": {counter}}},
		{"one metric", "a", -1, -1, map[string][]metadata.Metadata{"a": {gaugeA, gaugeB}}},
		{"unknown metric", "nope", -1, -1, map[string][]metadata.Metadata{}},
		{"limit keeps families in name order", "", 1, -1, map[string][]metadata.Metadata{"a": {gaugeA, gaugeB}}},
		{"limit zero is empty", "", 0, -1, map[string][]metadata.Metadata{}},
		{"limit per metric", "", -1, 1, map[string][]metadata.Metadata{"a": {gaugeA}, "b_total": {counter}}},
		{"limit per metric zero means none", "", -1, 0, map[string][]metadata.Metadata{"a": {gaugeA, gaugeB}, "b_total": {counter}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := selectMetadata(src, tc.metric, tc.limit, tc.limitPerMetric)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
		})
	}
	t.Run("no source", func(t *testing.T) {
		if got := selectMetadata(nil, "", -1, -1); len(got) != 0 {
			t.Errorf("got %v", got)
		}
	})
}
