package downsample

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

// hourBuildDay is the UTC midnight the hour build tests write.
var hourBuildDay = time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()

func openHourBuildTiers(tb testing.TB) (minute, hour *tiers.Rollup) {
	tb.Helper()
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(tb.TempDir()), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		tb.Fatal(err)
	}
	hour, err = tiers.OpenRollup(tiers.DefaultHourConfig(tb.TempDir()), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = minute.Close(); _ = hour.Close() })
	return minute, hour
}

// writeMinuteDay writes the minute partitions of the day's hours that keep
// keeps, n series each (those i%hours... of them present in the hour that
// present says), with windows every minute of the hour.
func writeMinuteDay(tb testing.TB, minute *tiers.Rollup, d int64, n int, present func(i int, h int64) bool, value func(i int, t int64) float64) {
	tb.Helper()
	for h := d; h < d+DayLen; h += HourRes {
		var series []tiers.SeriesWindows
		for i := range n {
			if !present(i, h) {
				continue
			}
			lset := labels.FromStrings("__name__", []string{"vllm:prompt_tokens_total", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"}[i%3],
				"Hostname", fmt.Sprintf("node-%04d", i/8), "gpu", fmt.Sprint(i%8))
			ws := make([]tiers.Window, 0, 60)
			for s := h; s < h+HourRes; s += MinuteRes {
				if (i+int(s/MinuteRes))%17 == 0 {
					continue // a minute without samples
				}
				first, last := value(i, s), value(i, s+45_000)
				w := tiers.Window{Start: s, FirstT: s + 1_000, LastT: s + 46_000, Count: 4, Sum: 2 * (first + last), Min: min(first, last), Max: max(first, last), First: first, Last: last, Increase: last - first}
				if last < first {
					w.Resets, w.Increase = 1, last
				}
				w.Stale = (i+int(s/MinuteRes))%97 == 0
				ws = append(ws, w)
			}
			series = append(series, tiers.SeriesWindows{Labels: lset, Windows: ws})
		}
		if len(series) == 0 {
			continue
		}
		if err := minute.WritePartition(h, series); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestBuildHourPartitionStreams: the day's hour partition built from the
// minute partitions one series at a time is the file built from the day's
// windows held whole, byte for byte: counters with resets, gauges,
// stale and missing minutes, series that come and go during the day, hours
// without a partition, special values.
func TestBuildHourPartitionStreams(t *testing.T) {
	minute, streamed := openHourBuildTiers(t)
	_, whole := openHourBuildTiers(t)
	d := hourBuildDay
	writeMinuteDay(t, minute, d, 240,
		func(i int, h int64) bool {
			hr := int((h - d) / HourRes)
			return hr != 5 && hr != 6 && (i%5 != 0 || hr < 12) && (i%7 != 0 || hr > 3)
		},
		func(i int, t int64) float64 {
			switch {
			case i%3 == 0: // a counter, reset every 40 minutes
				return float64(t%(40*MinuteRes)) / 1000 * float64(i%11+1)
			case i == 4 && t%(13*MinuteRes) < MinuteRes:
				return math.NaN()
			case i == 10:
				return math.Inf(1)
			default:
				return 50 + 40*math.Sin(float64(t)/3.6e6+float64(i))
			}
		})
	kind := GaugesByName(func(name string) bool { return strings.HasPrefix(name, "DCGM_") })
	tmp := t.TempDir()
	series, windows, err := BuildHourPartition(context.Background(), minute, streamed, d, kind, tmp)
	if err != nil {
		t.Fatal(err)
	}
	wantSeries, wantWindows, err := buildHourInMemory(context.Background(), minute, whole, d, kind)
	if err != nil {
		t.Fatal(err)
	}
	if series != wantSeries || windows != wantWindows || series == 0 {
		t.Fatalf("%d series and %d windows, want %d and %d", series, windows, wantSeries, wantWindows)
	}
	got, err := os.ReadFile(streamed.Partitions()[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(whole.Partitions()[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("streamed hour partition (%d bytes) differs from the one built whole (%d bytes)", len(got), len(want))
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Fatalf("temporary runs left: %d (%v)", len(left), err)
	}
	// A day without minute partitions is not written.
	if series, _, err := BuildHourPartition(context.Background(), minute, streamed, d+DayLen, kind, tmp); err != nil || series != -1 {
		t.Fatalf("empty day: %d series, %v; want -1, nil", series, err)
	}
}

// cancelAfter is a minute tier that cancels a context once n of its
// partitions have been read whole.
type cancelAfter struct {
	*tiers.Rollup
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) PartitionSeries(ctx context.Context, start int64) iter.Seq2[tiers.SeriesWindows, error] {
	return func(yield func(tiers.SeriesWindows, error) bool) {
		for s, err := range c.Rollup.PartitionSeries(ctx, start) {
			if !yield(s, err) {
				return
			}
		}
		if c.n--; c.n == 0 {
			c.cancel()
		}
	}
}

// TestBuildHourPartitionCancel: a build cancelled while it reads the minute
// partitions or while it merges its runs (the pipeline's Close) writes no
// partition, leaves no run and says it was cancelled.
func TestBuildHourPartitionCancel(t *testing.T) {
	minute, _ := openHourBuildTiers(t)
	d := hourBuildDay
	writeMinuteDay(t, minute, d, 40, func(int, int64) bool { return true }, func(i int, t int64) float64 { return float64(t/1000 + int64(i)) })
	for _, tc := range []struct {
		name  string
		reads int
	}{{"reading", 3}, {"merging", 24}} {
		t.Run(tc.name, func(t *testing.T) {
			_, hour := openHourBuildTiers(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tmp := t.TempDir()
			_, _, err := BuildHourPartition(ctx, &cancelAfter{minute, tc.reads, cancel}, hour, d, nil, tmp)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled", err)
			}
			if hour.HasPartition(d) {
				t.Error("a cancelled build wrote its partition")
			}
			if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
				t.Errorf("temporary runs left: %d (%v)", len(left), err)
			}
		})
	}
}

// BenchmarkBuildHourPartition: the heap the day's hour build holds above
// what the process held before it, per minute window of the day read
// (peak-heap-B/window, sampled every 5 ms), for 2,000 series: streamed
// (BuildHourPartition) and, for comparison, with the day's windows held
// whole (buildHourInMemory, the build before stop 43).
func BenchmarkBuildHourPartition(b *testing.B) {
	minute, _ := openHourBuildTiers(b)
	n := 2000
	writeMinuteDay(b, minute, hourBuildDay, n, func(int, int64) bool { return true },
		func(i int, t int64) float64 { return 50 + 40*math.Sin(float64(t)/3.6e6+float64(i)) })
	read := 0
	for _, p := range minute.Partitions() {
		read += int(p.Rows)
	}
	for _, c := range []struct {
		name  string
		build func(hour *tiers.Rollup, tmp string) error
	}{
		{"streamed", func(hour *tiers.Rollup, tmp string) error {
			_, _, err := BuildHourPartition(context.Background(), minute, hour, hourBuildDay, nil, tmp)
			return err
		}},
		{"whole", func(hour *tiers.Rollup, _ string) error {
			_, _, err := buildHourInMemory(context.Background(), minute, hour, hourBuildDay, nil)
			return err
		}},
	} {
		b.Run("build="+c.name, func(b *testing.B) {
			_, hour := openHourBuildTiers(b)
			tmp := b.TempDir()
			var worst uint64
			for b.Loop() {
				peak, err := peakHeap(func() error { return c.build(hour, tmp) })
				if err != nil {
					b.Fatal(err)
				}
				worst = max(worst, peak)
			}
			b.ReportMetric(float64(worst)/float64(read), "peak-heap-B/window")
		})
	}
}

// peakHeap runs f and returns the most heap it held above what was live
// before it (sampled every 5 ms).
func peakHeap(f func() error) (uint64, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	err := f()
	close(stop)
	<-done
	return peak.Load() - min(base, peak.Load()), err
}
