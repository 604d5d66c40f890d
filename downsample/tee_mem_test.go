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
// sample near the end of a minute and one in the next, as at each minute
// boundary of a live fleet: 2 s apart for a dense series, which then has an
// open window and one emitted window waiting for the tick; 15 s apart for a
// sparse one (a paced fleet at 15 s, and every series the diagnosis engine
// writes back), which hands no window over and keeps no builder. The
// fleets: every series dense, none, and one in a hundred (a 15 s fleet
// beside Strata's 1 Hz self-scrape, whose windows once sized the buffer
// for every series). Reported per series:
//
//   - held-B/series: heap the tee holds after the samples (its slot, its
//     builder while dense, its reference index, the emitted windows waiting
//     for the tick), the labels shared with the raw tier and so not counted;
//   - tick-B/series: heap the tick allocates to move those windows to the
//     spill (transient, but live at the minute boundary, when every series
//     emits at once);
//   - kept-B/series: heap the tee holds after the tick, until the next
//     minute boundary (the buffer of emitted windows is kept for the next
//     when it is the dense series' size);
//   - slot-B and builder-B: the size of a slot (seriesState) and of a dense
//     series' builder, the parts of held-B/series that stay between minute
//     boundaries.
//
// The raw tier behind the tee holds the series (so the tee shares their
// labels) but is not appended to while measuring.
func BenchmarkTeeBytesPerSeries(b *testing.B) {
	for _, fl := range []struct {
		name       string
		denseEvery int // series i is dense when i % denseEvery == 0; 0: none
	}{{"dense", 1}, {"sparse", 0}, {"mixed", 100}} {
		b.Run(fl.name, func(b *testing.B) { benchTeeBytesPerSeries(b, fl.denseEvery) })
	}
}

func benchTeeBytesPerSeries(b *testing.B, denseEvery int) {
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
	dense := func(i int) bool { return denseEvery > 0 && i%denseEvery == 0 }
	pending := 0
	for i := range series {
		if dense(i) {
			pending++
		}
	}
	var held, tick, kept float64
	for b.Loop() {
		p, err := New(testConfig(), raw, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), nil, nil, time.Now)
		if err != nil {
			b.Fatal(err)
		}
		tee := p.Tee(nopAppendable{})
		var m0, m1, m2, m3 runtime.MemStats
		runtime.GC()
		runtime.GC() // what sync.Pools kept over the first is freed by the second
		runtime.ReadMemStats(&m0)
		for _, side := range []int64{-1, 1} {
			for lo := 0; lo < series; lo += 2000 { // requests of 2,000 samples
				a := tee.AppenderV2(ctx)
				for i := lo; i < min(lo+2000, series); i++ {
					t := start + MinuteRes + side*7500
					if dense(i) {
						t = start + MinuteRes + side*1000
					}
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
		if n := len(p.tap.pending); n != pending {
			b.Fatalf("%d windows waiting for the tick, want %d", n, pending)
		}
		p.mark = start + MinuteRes
		if err := p.drainTee(ctx); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&m2)
		runtime.GC()
		runtime.ReadMemStats(&m3)
		held += float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
		tick += float64(m2.TotalAlloc - m1.TotalAlloc)
		kept += float64(m3.HeapAlloc) - float64(m0.HeapAlloc)
		runtime.KeepAlive(p)
	}
	n := float64(b.N) * series
	b.ReportMetric(held/n, "held-B/series")
	b.ReportMetric(tick/n, "tick-B/series")
	b.ReportMetric(kept/n, "kept-B/series")
	b.ReportMetric(float64(seriesStateBytes), "slot-B")
	b.ReportMetric(float64(builderBytes), "builder-B")
}
