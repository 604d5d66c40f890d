package downsample

import (
	"math"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/tiers"
)

// testKindOf types the test workloads' DCGM gauges as gauges and every other
// series as a counter, as the metric catalogue that cmd/strata wires in does
// for these names.
var testKindOf = GaugesByName(func(name string) bool {
	switch name {
	case "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP":
		return true
	}
	return false
})

// testConfig is DefaultConfig with testKindOf.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.KindOf = testKindOf
	return cfg
}

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

// openWindows returns copies of the minute windows computed but not yet
// flushed (the current hour, and the previous one until its flush), sorted
// by labels, each series' windows ascending.
func (p *Pipeline) openWindows() []tiers.SeriesWindows {
	return p.OpenWindowsIn(math.MinInt64, math.MaxInt64)
}
