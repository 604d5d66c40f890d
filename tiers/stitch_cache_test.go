package tiers_test

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

// TestStitchedRawFrom: a step too fine for the minute tier is served by raw
// from raw's first whole minute; a coarse one by the minute tier up to the
// end of its newest partition, which the results cache must then not hold.
func TestStitchedRawFrom(t *testing.T) {
	f := sharedStitchFixture(t)
	_, mHi, ok := f.minute.Bounds()
	if !ok || mHi <= f.rawMin {
		t.Fatalf("the fixture's minute tier ends at %d, want past raw's start %d", mHi, f.rawMin)
	}
	for _, tc := range []struct {
		step time.Duration
		want int64
	}{
		{15 * time.Second, f.rawMin},
		{299 * time.Second, f.rawMin},
		{5 * time.Minute, mHi},
		{time.Hour, mHi},
	} {
		if got := f.stitched.RawFrom(tc.step.Milliseconds()); got != tc.want {
			t.Errorf("RawFrom(%s) = %d, want %d", tc.step, got-testT0, tc.want-testT0)
		}
	}
	// Without rollups, raw serves everything there is.
	if got := tiers.NewStitched(f.raw, nil, nil).RawFrom(time.Hour.Milliseconds()); got != math.MinInt64 {
		t.Errorf("RawFrom without rollup tiers = %d, want math.MinInt64", got)
	}
	if a, b := f.stitched.Generation(), f.stitched.Generation(); a != b {
		t.Errorf("the generation changed with nothing written: %d, %d", a, b)
	}
}

// TestRollupGeneration: a partition written or deleted by retention
// changes the tier's generation.
func TestRollupGeneration(t *testing.T) {
	now := time.UnixMilli(testT0 + 400*24*hourMs) // past any retention
	r, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(t.TempDir()), quietLogger(), prometheus.NewRegistry(), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	g0 := r.Generation()
	sw := []tiers.SeriesWindows{{Labels: labels.FromStrings("__name__", "m"), Windows: []tiers.Window{{Start: testT0, Count: 1, Sum: 1, Min: 1, Max: 1, First: 1, Last: 1, FirstT: testT0, LastT: testT0}}}}
	if err := r.WritePartition(testT0, sw); err != nil {
		t.Fatal(err)
	}
	g1 := r.Generation()
	if g1 == g0 {
		t.Error("writing a partition left the generation")
	}
	if n, err := r.ApplyRetention(); err != nil || n != 1 {
		t.Fatalf("retention deleted %d partitions (%v), want 1", n, err)
	}
	if r.Generation() == g1 {
		t.Error("deleting a partition left the generation")
	}
}
