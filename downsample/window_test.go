package downsample

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

var staleNaN = math.Float64frombits(value.StaleNaN)

type fs struct {
	t int64
	v float64
}

func iterOf(samples []fs) storage.Series {
	cs := make([]chunks.Sample, 0, len(samples))
	for _, s := range samples {
		cs = append(cs, tsample{t: s.t, f: s.v})
	}
	return storage.NewListSeries(labelsFor("x"), cs)
}

// sameFloat treats two NaNs as equal (and distinguishes nothing else).
func sameFloat(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b
}

func windowsEqual(a, b tiers.Window) bool {
	return a.Start == b.Start && a.FirstT == b.FirstT && a.LastT == b.LastT &&
		a.Count == b.Count && a.Resets == b.Resets && a.Stale == b.Stale &&
		sameFloat(a.Sum, b.Sum) && sameFloat(a.Min, b.Min) && sameFloat(a.Max, b.Max) &&
		sameFloat(a.First, b.First) && sameFloat(a.Last, b.Last) && sameFloat(a.Increase, b.Increase)
}

const m = MinuteRes

func TestAppendWindows(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name    string
		samples []fs
		want    []tiers.Window
		stats   Stats
	}{
		{
			name:    "single sample",
			samples: []fs{{5_000, 7}},
			want:    []tiers.Window{{Start: 0, FirstT: 5_000, LastT: 5_000, Count: 1, Sum: 7, Min: 7, Max: 7, First: 7, Last: 7}},
			stats:   Stats{Floats: 1},
		},
		{
			// A series of unknown kind is a counter: its drops are resets.
			name:    "unknown kind going down counts resets",
			samples: []fs{{0, 3}, {15_000, 1}, {30_000, 4}, {45_000, 2}},
			want: []tiers.Window{{Start: 0, FirstT: 0, LastT: 45_000, Count: 4, Sum: 10, Min: 1, Max: 4, First: 3, Last: 2,
				Increase: 2 - 3 + 3 + 4, Resets: 2}},
			stats: Stats{Floats: 4},
		},
		{
			name:    "counter reset inside a window",
			samples: []fs{{0, 10}, {20_000, 15}, {40_000, 2}, {59_999, 5}},
			want: []tiers.Window{{Start: 0, FirstT: 0, LastT: 59_999, Count: 4, Sum: 32, Min: 2, Max: 15, First: 10, Last: 5,
				Increase: 5 + 2 + 3, Resets: 1}},
			stats: Stats{Floats: 4},
		},
		{
			name:    "counter reset exactly at a minute boundary stays between windows",
			samples: []fs{{30_000, 10}, {59_999, 12}, {m, 1}, {m + 30_000, 4}},
			want: []tiers.Window{
				{Start: 0, FirstT: 30_000, LastT: 59_999, Count: 2, Sum: 22, Min: 10, Max: 12, First: 10, Last: 12, Increase: 2},
				{Start: m, FirstT: m, LastT: m + 30_000, Count: 2, Sum: 5, Min: 1, Max: 4, First: 1, Last: 4, Increase: 3},
			},
			stats: Stats{Floats: 4},
		},
		{
			name:    "gap leaves no window for empty minutes",
			samples: []fs{{1_000, 1}, {3*m + 1_000, 2}},
			want: []tiers.Window{
				{Start: 0, FirstT: 1_000, LastT: 1_000, Count: 1, Sum: 1, Min: 1, Max: 1, First: 1, Last: 1},
				{Start: 3 * m, FirstT: 3*m + 1_000, LastT: 3*m + 1_000, Count: 1, Sum: 2, Min: 2, Max: 2, First: 2, Last: 2},
			},
			stats: Stats{Floats: 2},
		},
		{
			name:    "stale marker after the last sample marks the window stale",
			samples: []fs{{0, 1}, {10_000, 2}, {20_000, staleNaN}},
			want: []tiers.Window{{Start: 0, FirstT: 0, LastT: 10_000, Count: 2, Sum: 3, Min: 1, Max: 2, First: 1, Last: 2,
				Increase: 1, Stale: true}},
			stats: Stats{Floats: 2, Stale: 1},
		},
		{
			name:    "sample after a stale marker clears stale and continues the counter",
			samples: []fs{{0, 5}, {10_000, staleNaN}, {20_000, 3}},
			want: []tiers.Window{{Start: 0, FirstT: 0, LastT: 20_000, Count: 2, Sum: 8, Min: 3, Max: 5, First: 5, Last: 3,
				Increase: 3, Resets: 1}},
			stats: Stats{Floats: 2, Stale: 1},
		},
		{
			name:    "stale marker alone in the next minute produces no window and marks the previous one",
			samples: []fs{{0, 5}, {m + 1, staleNaN}},
			want:    []tiers.Window{{Start: 0, FirstT: 0, LastT: 0, Count: 1, Sum: 5, Min: 5, Max: 5, First: 5, Last: 5, Stale: true}},
			stats:   Stats{Floats: 1, Stale: 1},
		},
		{
			name:    "stale marker later than the lookahead does not mark",
			samples: []fs{{0, 5}, {StaleLookahead + 1, staleNaN}},
			want:    []tiers.Window{{Start: 0, FirstT: 0, LastT: 0, Count: 1, Sum: 5, Min: 5, Max: 5, First: 5, Last: 5}},
			stats:   Stats{Floats: 1, Stale: 1},
		},
		{
			name:    "series restarting after a stale marker keeps the earlier window stale",
			samples: []fs{{0, 5}, {1_000, staleNaN}, {m, 1}},
			want: []tiers.Window{
				{Start: 0, FirstT: 0, LastT: 0, Count: 1, Sum: 5, Min: 5, Max: 5, First: 5, Last: 5, Stale: true},
				{Start: m, FirstT: m, LastT: m, Count: 1, Sum: 1, Min: 1, Max: 1, First: 1, Last: 1},
			},
			stats: Stats{Floats: 2, Stale: 1},
		},
		{
			name:    "NaN counts, poisons sum, is skipped by min and max",
			samples: []fs{{0, nan}, {10_000, 4}, {20_000, 2}, {30_000, nan}},
			want: []tiers.Window{{Start: 0, FirstT: 0, LastT: 30_000, Count: 4, Sum: nan, Min: 2, Max: 4, First: nan, Last: nan,
				Increase: nan, Resets: 1}},
			stats: Stats{Floats: 4},
		},
		{
			name:    "NaN between counter samples does not poison the increase (as in PromQL)",
			samples: []fs{{0, 1}, {10_000, nan}, {20_000, 5}},
			want: []tiers.Window{{Start: 0, FirstT: 0, LastT: 20_000, Count: 3, Sum: nan, Min: 1, Max: 5, First: 1, Last: 5,
				Increase: 4}},
			stats: Stats{Floats: 3},
		},
		{
			name:    "all NaN",
			samples: []fs{{0, nan}, {1, nan}},
			want: []tiers.Window{{Start: 0, FirstT: 0, LastT: 1, Count: 2, Sum: nan, Min: nan, Max: nan, First: nan, Last: nan,
				Increase: nan}},
			stats: Stats{Floats: 2},
		},
		{
			name:    "samples before the epoch align down",
			samples: []fs{{-1, 2}, {0, 3}},
			want: []tiers.Window{
				{Start: -m, FirstT: -1, LastT: -1, Count: 1, Sum: 2, Min: 2, Max: 2, First: 2, Last: 2},
				{Start: 0, FirstT: 0, LastT: 0, Count: 1, Sum: 3, Min: 3, Max: 3, First: 3, Last: 3},
			},
			stats: Stats{Floats: 2},
		},
		{
			name:    "infinities",
			samples: []fs{{0, math.Inf(1)}, {1, 1}},
			want: []tiers.Window{{Start: 0, FirstT: 0, LastT: 1, Count: 2, Sum: math.Inf(1), Min: 1, Max: math.Inf(1),
				First: math.Inf(1), Last: 1, Increase: 1 - math.Inf(1) + math.Inf(1), Resets: 1}},
			stats: Stats{Floats: 2},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, st, err := AppendWindows(nil, iterOf(tc.samples).Iterator(nil), MinuteRes, math.MinInt64, math.MaxInt64, KindCounter)
			if err != nil {
				t.Fatal(err)
			}
			if st != tc.stats {
				t.Errorf("stats = %+v, want %+v", st, tc.stats)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d windows %+v, want %d %+v", len(got), got, len(tc.want), tc.want)
			}
			for i := range got {
				if !windowsEqual(got[i], tc.want[i]) {
					t.Errorf("window %d:\n got %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestAppendWindowsBounds(t *testing.T) {
	samples := []fs{{0, 1}, {m, 2}, {2 * m, 3}, {3*m + 1, staleNaN}, {3*m + 2, 4}}
	got, st, err := AppendWindows(nil, iterOf(samples).Iterator(nil), MinuteRes, m, 3*m, KindCounter)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Start != m || got[1].Start != 2*m || st.Floats != 2 {
		t.Fatalf("got %+v (%+v), want the windows at 1m and 2m only", got, st)
	}
	if !got[1].Stale {
		t.Errorf("a stale marker just past maxt must mark the last window stale: %+v", got[1])
	}
}

func TestAppendWindowsSkipsNativeHistograms(t *testing.T) {
	h := &histogram.Histogram{Count: 3, Sum: 1.5, Schema: 0, ZeroThreshold: 0.001, ZeroCount: 3}
	s := storage.NewListSeries(labelsFor("h"), []chunks.Sample{
		tsample{t: 0, h: h}, tsample{t: 1000, h: h},
	})
	got, st, err := AppendWindows(nil, s.Iterator(nil), MinuteRes, math.MinInt64, math.MaxInt64, KindCounter)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || st.Histograms != 2 {
		t.Fatalf("got %+v %+v, want no windows and 2 skipped histograms", got, st)
	}
}

func TestMerge(t *testing.T) {
	cases := []struct {
		name    string
		samples []fs
	}{
		{"reset exactly at a minute boundary", []fs{{30_000, 10}, {59_999, 12}, {m, 1}, {m + 30_000, 4}}},
		{"reset exactly at an hour boundary", []fs{{HourRes - 1000, 100}, {HourRes, 3}, {HourRes + 1000, 4}}},
		{"reset inside and across", []fs{{0, 5}, {1000, 1}, {m, 0}, {m + 1, 7}, {2 * m, 8}, {5 * m, 2}}},
		{"stale marker at the end", []fs{{0, 5}, {m, 6}, {m + 1, staleNaN}}},
		{"stale marker in the middle", []fs{{0, 5}, {1, staleNaN}, {m, 6}}},
		{"equal values at the boundary", []fs{{0, 5}, {m, 5}}},
		{"single window", []fs{{0, 5}}},
		{"gaps", []fs{{0, 1}, {10 * m, 2}, {50 * m, 1}}},
	}
	for _, kind := range []Kind{KindCounter, KindGauge} {
		for _, tc := range cases {
			t.Run(kind.String()+"/"+tc.name, func(t *testing.T) {
				checkMergeEqualsDirect(t, tc.samples, kind)
			})
		}
	}
}

// checkMergeEqualsDirect checks that hour windows built from minute windows
// equal hour windows computed from the raw samples directly.
func checkMergeEqualsDirect(t *testing.T, samples []fs, kind Kind) {
	t.Helper()
	minutes, _, err := AppendWindows(nil, iterOf(samples).Iterator(nil), MinuteRes, math.MinInt64, math.MaxInt64, kind)
	if err != nil {
		t.Fatal(err)
	}
	direct, _, err := AppendWindows(nil, iterOf(samples).Iterator(nil), HourRes, math.MinInt64, math.MaxInt64, kind)
	if err != nil {
		t.Fatal(err)
	}
	merged := Coarsen(nil, minutes, HourRes, kind)
	if len(merged) != len(direct) {
		t.Fatalf("merged %d hour windows, direct %d", len(merged), len(direct))
	}
	for i := range merged {
		if !windowsEqual(merged[i], direct[i]) {
			t.Errorf("hour %d:\nmerged %+v\ndirect %+v", i, merged[i], direct[i])
		}
	}
}

func TestMergeEmpty(t *testing.T) {
	if w := Merge(nil, KindCounter); w.Count != 0 {
		t.Fatalf("Merge(nil) = %+v, want the zero window", w)
	}
}

// TestMergeRandom checks minute->hour merging against direct hour windows on
// random integer-valued series (integers keep sums exact, so any difference
// is a logic error, not rounding), with resets, stale markers and gaps placed
// anywhere, including exactly on minute and hour boundaries.
func TestMergeRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		var samples []fs
		ts := int64(rng.IntN(int(HourRes)))
		v := float64(rng.IntN(100))
		for range 1 + rng.IntN(400) {
			switch rng.IntN(20) {
			case 0:
				ts = timegrid.Floor(ts, MinuteRes) + MinuteRes // exactly on a boundary
			case 1:
				ts += int64(rng.IntN(int(3 * HourRes))) // long gap
			default:
				ts += 1 + int64(rng.IntN(30_000))
			}
			switch rng.IntN(25) {
			case 0:
				samples = append(samples, fs{ts, staleNaN})
				continue
			case 1:
				v = float64(rng.IntN(5)) // counter reset
			default:
				v += float64(rng.IntN(10))
			}
			samples = append(samples, fs{ts, v})
		}
		for _, kind := range []Kind{KindCounter, KindGauge} {
			t.Run(kind.String()+"/"+strconv.Itoa(i), func(t *testing.T) {
				checkMergeEqualsDirect(t, samples, kind)
			})
		}
	}
}

func BenchmarkAppendWindows(b *testing.B) {
	const n = 1 << 16
	cs := make([]chunks.Sample, n)
	v := 0.0
	for i := range cs {
		v += float64(i % 7)
		if i%5000 == 0 {
			v = 0
		}
		cs[i] = tsample{t: int64(i) * 1000, f: v}
	}
	s := storage.NewListSeries(labelsFor("x"), cs)
	var dst []tiers.Window
	b.ReportAllocs()
	for b.Loop() {
		var err error
		dst, _, err = AppendWindows(dst[:0], s.Iterator(nil), MinuteRes, math.MinInt64, math.MaxInt64, KindCounter)
		if err != nil {
			b.Fatal(err)
		}
	}
	if len(dst) != n/60+1 {
		b.Fatalf("got %d windows", len(dst))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
}

// TestAppendWindowsResolutionBounds: a builder keeps the window length and
// its samples' offsets in 32 bits, so a resolution past 2^32-1 ms (49 days)
// is refused with an error, as one that is not positive is, and the longest
// one taken still gives exact offsets.
func TestAppendWindowsResolutionBounds(t *testing.T) {
	samples := []fs{{1000, 1}, {int64(maxRes) - 1, 3}, {int64(maxRes) + 5, 2}}
	for _, res := range []int64{0, -1, int64(maxRes) + 1, math.MaxInt64} {
		if _, _, err := AppendWindows(nil, iterOf(samples).Iterator(nil), res, math.MinInt64, math.MaxInt64, KindGauge); err == nil {
			t.Errorf("resolution %d: no error", res)
		}
	}
	got, _, err := AppendWindows(nil, iterOf(samples).Iterator(nil), int64(maxRes), math.MinInt64, math.MaxInt64, KindGauge)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Start != 0 || got[0].FirstT != 1000 || got[0].LastT != int64(maxRes)-1 || got[0].Count != 2 ||
		got[1].Start != int64(maxRes) || got[1].FirstT != int64(maxRes)+5 || got[1].LastT != int64(maxRes)+5 {
		t.Errorf("windows %+v", got)
	}
}
