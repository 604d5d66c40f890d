package downsample

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/prometheus/storage"
)

// BenchmarkTeeBytesPerSeries measures the heap the tee adds per series of a
// steady fleet (issue 13's memory per active series): every series sends one
// sample at the end of a minute and one in the next, so every series has an
// open window and one emitted window waiting for the tick, as at each minute
// boundary of a live fleet. Reported per series:
//
//   - held-B/series: heap the tee holds after the samples (its slot, its
//     reference index, the emitted windows waiting for the tick), the
//     labels shared with the raw tier and so not counted;
//   - tick-B/series: heap the tick allocates to move those windows to the
//     spill (transient, but live at the minute boundary, when every series
//     emits at once);
//   - slot-B: the size of a slot (seriesState), the part of held-B/series
//     that stays between minute boundaries.
//
// The raw tier behind the tee holds the series (so the tee shares their
// labels) but is not appended to while measuring.
func BenchmarkTeeBytesPerSeries(b *testing.B) {
	const series = 100_000
	f := newFleet(series)
	raw := openBenchRaw(b)
	ctx := context.Background()
	start := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	refs := make([]storage.SeriesRef, series)
	app := raw.Appender(ctx)
	for i, l := range f.labels {
		r, err := app.Append(0, l, start-MinuteRes, f.next(i))
		if err != nil {
			b.Fatal(err)
		}
		refs[i] = r
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
	var held, tick float64
	for b.Loop() {
		p, err := New(testConfig(), raw, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), nil, nil, time.Now)
		if err != nil {
			b.Fatal(err)
		}
		tee := p.Tee(nopAppendable{})
		var m0, m1, m2 runtime.MemStats
		runtime.GC()
		runtime.GC() // what sync.Pools kept over the first is freed by the second
		runtime.ReadMemStats(&m0)
		for _, t := range []int64{start + 59_000, start + MinuteRes + 1000} {
			for lo := 0; lo < series; lo += 2000 { // requests of 2,000 samples
				a := tee.AppenderV2(ctx)
				for i := lo; i < min(lo+2000, series); i++ {
					if _, err := a.Append(refs[i], f.labels[i], 0, t, f.next(i), nil, nil, storage.AppendV2Options{}); err != nil {
						b.Fatal(err)
					}
				}
				if err := a.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		if n := len(p.tap.pending); n != series {
			b.Fatalf("%d windows waiting for the tick, want %d", n, series)
		}
		p.mark = start + MinuteRes
		if err := p.drainTee(ctx); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&m2)
		held += float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
		tick += float64(m2.TotalAlloc - m1.TotalAlloc)
		runtime.KeepAlive(p)
	}
	n := float64(b.N) * series
	b.ReportMetric(held/n, "held-B/series")
	b.ReportMetric(tick/n, "tick-B/series")
	b.ReportMetric(float64(seriesStateBytes), "slot-B")
}
