package downsample

import (
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

func labelsFor(name string, kv ...string) labels.Labels {
	return labels.FromStrings(append([]string{model.MetricNameLabel, name}, kv...)...)
}

// tsample is a chunks.Sample for storage.NewListSeries.
type tsample struct {
	t int64
	f float64
	h *histogram.Histogram
}

func (s tsample) T() int64                      { return s.t }
func (s tsample) ST() int64                     { return 0 }
func (s tsample) F() float64                    { return s.f }
func (s tsample) H() *histogram.Histogram       { return s.h }
func (s tsample) FH() *histogram.FloatHistogram { return nil }
func (s tsample) Copy() chunks.Sample           { return s }
func (s tsample) Type() chunkenc.ValueType {
	if s.h != nil {
		return chunkenc.ValHistogram
	}
	return chunkenc.ValFloat
}
