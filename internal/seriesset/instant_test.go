package seriesset

import (
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestInstant: the sample the engine's instant selector takes: the latest
// at or before ts, within the lookback (left-open), none after a stale
// marker.
func TestInstant(t *testing.T) {
	stale := math.Float64frombits(value.StaleNaN)
	ts, vs := []int64{10, 20, 30, 50}, []float64{1, 2, stale, 5}
	it := storage.NewMemoizedEmptyIterator(15)
	for _, c := range []struct {
		ts   int64
		v    float64
		ok   bool
		name string
	}{
		{5, 0, false, "before the first sample"},
		{10, 1, true, "on a sample"},
		{24, 2, true, "the one before, within the lookback"},
		{25, 2, true, "the lookback's edge, still in"},
		{35, 0, false, "after a stale marker"},
		{50, 5, true, "on the sample after it"},
		{64, 5, true, "past the last sample, within the lookback"},
		{65, 0, false, "the lookback is left-open"},
	} {
		it.Reset(&floats{ts: ts, vs: vs, i: -1})
		v, ok, hist, err := Instant(it, c.ts, 15)
		if err != nil || hist || ok != c.ok || ok && v != c.v {
			t.Errorf("%s: Instant at %d = %v %v %v %v, want %v %v", c.name, c.ts, v, ok, hist, err, c.v, c.ok)
		}
	}
}

type msTime = int64

// floats iterates float samples.
type floats struct {
	ts []int64
	vs []float64
	i  int
}

func (f *floats) Next() chunkenc.ValueType {
	if f.i+1 >= len(f.ts) {
		f.i = len(f.ts)
		return chunkenc.ValNone
	}
	f.i++
	return chunkenc.ValFloat
}

// Seek's parameter type says it is no io.Seeker (go vet's stdmethods).
func (f *floats) Seek(t msTime) chunkenc.ValueType {
	f.i = max(f.i, 0)
	for f.i < len(f.ts) && f.ts[f.i] < t {
		f.i++
	}
	if f.i >= len(f.ts) {
		return chunkenc.ValNone
	}
	return chunkenc.ValFloat
}

func (f *floats) At() (int64, float64) { return f.ts[f.i], f.vs[f.i] }
func (f *floats) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	return f.ts[f.i], nil
}

func (f *floats) AtFloatHistogram(*histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return f.ts[f.i], nil
}
func (f *floats) AtT() int64  { return f.ts[f.i] }
func (f *floats) AtST() int64 { return 0 }
func (f *floats) Err() error  { return nil }
