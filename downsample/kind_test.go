package downsample

import (
	"math"
	"testing"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/tiers"
)

func TestKindOf(t *testing.T) {
	cases := []struct {
		name string
		want Kind
	}{
		// A DCGM gauge no canonical series uses: known from the field list only.
		{"DCGM_FI_DEV_POWER_USAGE", KindGauge},
		{"DCGM_FI_DEV_GPU_UTIL", KindGauge},
		{"DCGM_FI_PROF_SM_ACTIVE", KindGauge},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", KindCounter},
		{"DCGM_FI_DRIVER_VERSION", KindCounter}, // a DCGM "label" field
		{"vllm:num_requests_running", KindGauge},
		{"vllm:request_success_total", KindCounter},
		{"vllm:e2e_request_latency_seconds_bucket", KindCounter},
		{"vllm:e2e_request_latency_seconds_sum", KindCounter},
		{"vllm:e2e_request_latency_seconds_count", KindCounter},
		{"vllm:e2e_request_latency_seconds", KindCounter}, // the histogram family name
		{"vllm:num_requests_running_count", KindCounter},  // a gauge's name plus a histogram suffix
		{"node_memory_MemFree_bytes", KindCounter},        // a gauge, but not in the catalogue
		{"", KindCounter},
	}
	for _, tc := range cases {
		if got := KindOf(labelsFor(tc.name, "instance", "a")); got != tc.want {
			t.Errorf("KindOf(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestKindOfCatalogue checks KindOf against the catalogue entry by entry: a
// name is a gauge exactly when no entry for it says anything but gauge.
func TestKindOfCatalogue(t *testing.T) {
	c, err := dcgmbridge.NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]map[string]bool{}
	note := func(name, typ string) {
		if types[name] == nil {
			types[name] = map[string]bool{}
		}
		types[name][typ] = true
	}
	for _, f := range c.Fields {
		for _, n := range f.Names() {
			note(n, f.Type)
		}
	}
	for _, m := range c.Metrics {
		note(m.Name, m.Type)
	}
	gauges := 0
	for name, ts := range types {
		want := KindCounter
		if len(ts) == 1 && ts["gauge"] {
			want = KindGauge
			gauges++
		}
		if got := KindOf(labelsFor(name)); got != want {
			t.Errorf("KindOf(%q) = %v, want %v (catalogue types %v)", name, got, want, ts)
		}
		// A histogram suffix on a listed name gives an unlisted name (the
		// listed ones are checked above): a counter, whatever name's type.
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if _, listed := types[name+suffix]; listed {
				continue
			}
			if got := KindOf(labelsFor(name + suffix)); got != KindCounter {
				t.Errorf("KindOf(%q) = %v, want counter", name+suffix, got)
			}
		}
	}
	if gauges < 40 {
		t.Errorf("only %d gauge names in the catalogue", gauges)
	}
}

// TestGaugeWindows: a catalogue gauge's windows record no resets, for drops
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
	gauge, counter := KindOf(labelsFor("DCGM_FI_DEV_POWER_USAGE")), KindOf(labelsFor("vllm:request_success_total"))
	if gauge != KindGauge || counter != KindCounter {
		t.Fatalf("kinds %v, %v", gauge, counter)
	}
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
