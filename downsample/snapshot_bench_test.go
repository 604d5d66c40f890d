package downsample

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// BenchmarkMinuteViewSnapshotPipeline is the diagnosis engine's live read:
// a minute view's snapshot of the last 9 minutes of every series from the
// pipeline's open windows (2,000 series, 12 minutes of 15 s samples, nothing
// flushed). B/op is what one snapshot allocates (the pipeline's reading and
// the view's block), the bytes the engine's evaluation starts from: of
// every window of the 9 minutes, or of those a rate over 3m or a plain
// selector (the lookback, 5m) reaches, with every column or only those the
// function reads.
func BenchmarkMinuteViewSnapshotPipeline(b *testing.B) {
	for _, mode := range []struct {
		name   string
		sparse time.Duration
	}{
		// 15 s series are sparse: their windows are computed from raw.
		{"sparse-from-raw", 0},
		// Every series spilled (Config.SparseInterval < 0).
		{"spilled", -1},
	} {
		b.Run(mode.name, func(b *testing.B) { benchSnapshotPipeline(b, mode.sparse) })
	}
}

func benchSnapshotPipeline(b *testing.B, sparse time.Duration) {
	const series, minutes = 2000, 12
	f := newFleet(series)
	raw := openBenchRaw(b)
	cfg := testConfig()
	cfg.SparseInterval = sparse
	p, err := New(cfg, raw, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), nil, nil, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	tee := p.Tee(raw)
	ctx := context.Background()
	start := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	if _, err := p.spillFor(start); err != nil { // as the tick's extendRaw does
		b.Fatal(err)
	}
	for s := range minutes * 4 {
		app := tee.AppenderV2(ctx)
		t := start + int64(s)*15_000
		for i, l := range f.labels {
			if _, err := app.Append(0, l, 0, t, f.next(i), nil, nil, storage.AppendV2Options{}); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
		if (s+1)%4 == 0 { // a minute became final
			p.mark = t + 15_000
			if err := p.drainTee(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	p.publishMark()
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(b.TempDir()), slog.New(slog.DiscardHandler), prometheus.NewRegistry(), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	defer minute.Close()
	v := tiers.NewMinuteView(minute, p)
	mark, _ := p.Mark()
	first := mark // the minute the snapshot is evaluated at
	rate3m := func(string) int64 { return first - 3*MinuteRes }
	lookback5m := func(string) int64 { return first - 5*MinuteRes }
	for _, c := range []struct {
		name  string
		reads tiers.SnapshotReads
	}{
		{"reach=all", tiers.SnapshotReads{}}, // every window of the 9 minutes
		{"reach=rate3m", tiers.SnapshotReads{From: rate3m}},
		{"reach=lookback5m", tiers.SnapshotReads{From: lookback5m}},
		// Only the columns rate reads, or a plain selector.
		{"reach=rate3m/cols=rate", tiers.SnapshotReads{From: rate3m, Columns: func(string) tiers.WindowColumns { return tiers.ColumnsForFunc("rate") }}},
		{"reach=lookback5m/cols=plain", tiers.SnapshotReads{From: lookback5m, Columns: func(string) tiers.WindowColumns { return tiers.ColumnsForFunc("") }}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				s, err := v.SnapshotFor(ctx, first-10*MinuteRes, first-MinuteRes, c.reads)
				if err != nil || s.Series() != series {
					b.Fatal(s.Series(), err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
