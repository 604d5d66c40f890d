package tiers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// BenchmarkTableFileFirstRead is the read of a partition's minutes by a
// reader that opens its file, as the diagnosis engine's first read of an
// hour's new partition does (20,000 series of 60 minutes): each iteration
// drops the file from the cache, so the footer is parsed and the series
// table matched again.
func BenchmarkTableFileFirstRead(b *testing.B) {
	const n = 20_000
	r, err := OpenRollup(DefaultMinuteConfig(b.TempDir()), slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	series := make([]SeriesWindows, n)
	for i := range series {
		ws := make([]Window, 0, 60)
		for m := range int64(60) {
			s := tableT0 + m*60_000
			v := float64(i%97) + float64(m)
			ws = append(ws, Window{Start: s, FirstT: s, LastT: s + 45_000, Count: 4, Sum: 4 * v, Min: v, Max: v, First: v, Last: v})
		}
		series[i] = SeriesWindows{Labels: labels.FromStrings("__name__", "vllm:num_requests_running",
			"instance", fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250), "job", "vllm", "pod", fmt.Sprintf("vllm-%05d", i/4)), Windows: ws}
	}
	if err := r.WritePartition(tableT0, series); err != nil {
		b.Fatal(err)
	}
	ms := []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "pod", "vllm-0000.")}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.files.drop(tableT0); err != nil {
			b.Fatal(err)
		}
		sel, err := r.selectColumns(context.Background(), tableT0+55*60_000, tableT0+3_600_000-1, ms, selectOptions{need: colLast})
		if err != nil || len(sel) != 40 {
			b.Fatalf("%d series (%v), want 40", len(sel), err)
		}
	}
}
