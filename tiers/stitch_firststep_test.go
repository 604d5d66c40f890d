package tiers_test

import (
	"testing"
	"time"
)

// TestStitchedPlainSelectorFirstStep: a plain selector evaluated at coarse
// steps over the hour tier has a value at the range's first step whatever
// minute the range starts at, as at every later step: the first step sees
// the latest window ended before it, like the steps after it.
func TestStitchedPlainSelectorFirstStep(t *testing.T) {
	f := sharedStitchFixture(t)
	for _, off := range []int64{0, 2 * minMs, 37 * minMs, 59 * minMs} {
		start := testT0 + 4*hourMs + off
		end := start + 18*hourMs
		got, _ := f.rangeQuery(t, f.stitched, `DCGM_FI_DEV_GPU_TEMP{gpu!="3"}`, start, end, 6*time.Hour)
		if len(got) != 3 {
			t.Fatalf("start +%dm: %d series, want 3", off/minMs, len(got))
		}
		for _, s := range got {
			if len(s.Floats) != 4 || s.Floats[0].T != start {
				t.Errorf("start +%dm: %s has %d steps, first at %s; want 4 from %s", off/minMs, s.Metric, len(s.Floats), time.UnixMilli(s.Floats[0].T).UTC(), time.UnixMilli(start).UTC())
			}
		}
	}
}
