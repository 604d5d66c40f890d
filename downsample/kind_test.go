package downsample

import (
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

func TestGaugesByName(t *testing.T) {
	kindOf := GaugesByName(func(name string) bool { return name == "g" })
	for _, tc := range []struct {
		lbls labels.Labels
		want Kind
	}{
		{labelsFor("g", "instance", "a"), KindGauge},
		{labelsFor("c_total"), KindCounter},
		{labels.FromStrings("instance", "g"), KindCounter}, // no metric name
	} {
		if got := kindOf(tc.lbls); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.lbls, got, tc.want)
		}
	}
	// Without a typing every series is a counter.
	if got := KindFunc(nil).Of(labelsFor("g")); got != KindCounter {
		t.Errorf("nil KindFunc: %v, want counter", got)
	}
}

// TestGaugeWindows: a gauge's windows record no resets, for drops
// inside a window, at a minute boundary and at an hour boundary; Increase is
// exactly Last - First (bit for bit: the rollup files store it as a null
// then), in minute windows and in hours merged from them. The same samples
// under a counter's name keep counter semantics.
func TestGaugeWindows(t *testing.T) {
	negZero := math.Copysign(0, -1)
	samples := []fs{
		{0, 0}, {15_000, 350.5}, {30_000, 120.25}, {40_000, 300}, {50_000, 10}, // two drops inside minute 0
		{m, 0}, {m + 15_000, 100}, {m + 30_000, negZero}, // drops at the minute boundary and inside; First +0, Last -0
		{HourRes - 15_000, 400}, {HourRes, 90}, {HourRes + 15_000, 80}, // a drop at the hour boundary, one after it
	}
	gauge, counter := KindGauge, KindCounter
	sameBits := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
	checkGauge := func(what string, ws []tiers.Window) {
		t.Helper()
		for _, w := range ws {
			if w.Resets != 0 || !sameBits(w.Increase, w.Last-w.First) {
				t.Errorf("%s window %s: Resets %d, Increase %v (bits %x), want 0 and Last-First = %v (bits %x)",
					what, fmtTime(w.Start), w.Resets, w.Increase, math.Float64bits(w.Increase), w.Last-w.First, math.Float64bits(w.Last-w.First))
			}
		}
	}
	minutes, _, err := AppendWindows(nil, iterOf(samples).Iterator(nil), MinuteRes, math.MinInt64, math.MaxInt64, gauge)
	if err != nil {
		t.Fatal(err)
	}
	if len(minutes) != 4 {
		t.Fatalf("%d minute windows, want 4", len(minutes))
	}
	checkGauge("minute", minutes)
	if w := minutes[1]; !sameBits(w.Increase, negZero) {
		t.Errorf("minute 1: Increase %v, want -0 (Last - First = -0 - +0)", w.Increase)
	}
	hours := Coarsen(nil, minutes, HourRes, gauge)
	if len(hours) != 2 {
		t.Fatalf("%d hour windows, want 2", len(hours))
	}
	checkGauge("hour", hours)
	if w := hours[0]; w.First != 0 || w.Last != 400 || w.Increase != 400 {
		t.Errorf("hour 0: %+v, want First 0, Last 400, Increase 400", w)
	}
	// A minute window written with counter semantics (by an older release)
	// merges into a gauge hour without resets all the same.
	old, _, err := AppendWindows(nil, iterOf(samples).Iterator(nil), MinuteRes, math.MinInt64, math.MaxInt64, counter)
	if err != nil {
		t.Fatal(err)
	}
	checkGauge("hour from counter minutes", Coarsen(nil, old, HourRes, gauge))

	// The counter keeps every reset: two inside minute 0, one at the minute
	// boundary, one inside minute 1, one at the hour boundary, one after it.
	if got := old[0]; got.Resets != 2 || got.Increase != 10-0+350.5+300 {
		t.Errorf("counter minute 0: Resets %d, Increase %v", got.Resets, got.Increase)
	}
	ch := Coarsen(nil, old, HourRes, counter)
	if ch[0].Resets != 4 || ch[1].Resets != 1 {
		t.Errorf("counter hours: Resets %d and %d, want 4 and 1", ch[0].Resets, ch[1].Resets)
	}
}
