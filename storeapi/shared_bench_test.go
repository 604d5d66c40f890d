package storeapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/thanos-io/thanos/pkg/api/query/querypb"
	"github.com/thanos-io/thanos/pkg/store/storepb"

	"github.com/strata-dev/strata/tiers"
)

// BenchmarkQueryAPIAvgHalves: the two requests a distributed Thanos
// Querier sends a node for `avg by (host) (gpu_temp)` over 30 days of the
// hour tier (500 series, 1 h steps: one shard of BenchmarkThanosQuerier30d,
// 125 hosts of 4 GPUs), `sum by (host, shard)` and `count by (host, shard)`, at once:
// fused, one fused pass for both (fused.go, what a node does);
// shared-evaluation, the selector evaluated once and both aggregated from
// its matrix (aggregate.go, what a node did before); shared-read, each evaluated
// by the engine over one shared tier read; unshared, each its own read and
// evaluation. cpu-s/op is the process's user and system CPU per pair (the
// client's decoding included, alike in all), from getrusage.
func BenchmarkQueryAPIAvgHalves(b *testing.B) {
	const series = 500
	stitched, start, end := benchShard(b, series)
	s, err := New(shardConfig(), stitched, quiet(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"fused", "shared-evaluation", "shared-read", "unshared"} {
		b.Run(name, func(b *testing.B) {
			qs := NewQueryServer(s, newEngine(0), stitched)
			switch name {
			case "unshared":
				qs.shared.cache.max = 0 // every select reads on its own
				fallthrough
			case "shared-read":
				qs.evals.max = 0 // the engine evaluates each request
				fallthrough
			case "shared-evaluation":
				qs.fused.max = 0 // no fused pass
			}
			b.Cleanup(qs.Close)
			c := querypb.NewQueryClient(serve(b, s, qs))
			// Each pair's range is an hour (a step) earlier than the last
			// one's: what a node keeps for its grace period serves only its
			// own pair.
			pair := func(i int) {
				shift := -int64(i) * 3600
				var wg sync.WaitGroup
				for _, agg := range []string{"sum", "count"} {
					wg.Go(func() {
						a, err := queryRange(b, c, &querypb.QueryRangeRequest{
							Query: agg + ` by (host, shard) (gpu_temp)`, StartTimeSeconds: start.Unix() + shift, EndTimeSeconds: end.Unix() - 1 + shift,
							IntervalSeconds: 3600, ReplicaLabels: []string{"replica"},
						})
						if err != nil || len(a.series) != 2*series/8 {
							b.Errorf("%s: %d series, %v", agg, len(a.series), err)
						}
					})
				}
				wg.Wait()
			}
			pair(5) // the partition files opened
			cpu0 := processCPU(b)
			for i := 0; b.Loop(); i++ {
				pair(i)
			}
			b.ReportMetric((processCPU(b)-cpu0).Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// benchShard writes one shard's half of BenchmarkThanosQuerier30d's data
// (series of its 2*series, 30 days of hour windows) and returns the tiers
// and the data's time range.
func benchShard(b *testing.B, series int) (*tiers.Stitched, time.Time, time.Time) {
	const days = 30
	dir := b.TempDir()
	end := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	start := end.Add(-days * 24 * time.Hour)
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), quiet(), prometheus.NewRegistry(), func() time.Time { return end })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = hour.Close() })
	for day := start; day.Before(end); day = day.Add(24 * time.Hour) {
		var sws []tiers.SeriesWindows
		for s := range 2 * series {
			if s%2 == 1 {
				continue // the other shard's
			}
			sw := tiers.SeriesWindows{Labels: labels.FromStrings("__name__", "gpu_temp", "gpu", fmt.Sprint(s%8), "host", fmt.Sprintf("node-%03d", s/8))}
			for h := range 24 {
				st := day.Add(time.Duration(h) * time.Hour).UnixMilli()
				v := float64(40 + (s+h)%30)
				sw.Windows = append(sw.Windows, tiers.Window{Start: st, FirstT: st, LastT: st + 3_599_000, Count: 240, Sum: 240 * v, Min: v - 2, Max: v + 2, First: v, Last: v})
			}
			sws = append(sws, sw)
		}
		sortWindows(sws)
		if err := hour.WritePartition(day.UnixMilli(), sws); err != nil {
			b.Fatal(err)
		}
	}
	return tiers.NewStitched(nil, nil, hour), start, end
}

// BenchmarkSeriesHour30d: what a StoreAPI-mode Querier asks a node for over
// 30 days of the hour tier (BenchmarkThanosQuerier30d's shard of 500
// series, max_resolution_window 12 m as for 1 h steps): the COUNT and SUM
// aggregates of a plain selector, sum or avg (each window's last value),
// and the MAX of max or max_over_time (each window's maximum, and its first
// sample where it lies on the window's start), and the COUNT of count
// or count_over_time (each window's last value). Reports the chunks, samples
// and bytes a request sends, and the node's CPU (with the client's
// decoding) per request.
func BenchmarkSeriesHour30d(b *testing.B) {
	stitched, start, end := benchShard(b, 500)
	s, err := New(shardConfig(), stitched, quiet(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	c := storepb.NewStoreClient(serve(b, s, nil))
	for _, tc := range []struct {
		name  string
		aggrs []storepb.Aggr
	}{
		{"count+sum", []storepb.Aggr{storepb.Aggr_COUNT, storepb.Aggr_SUM}},
		{"max", []storepb.Aggr{storepb.Aggr_MAX}},
		{"count", []storepb.Aggr{storepb.Aggr_COUNT}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := &storepb.SeriesRequest{
				MinTime: start.UnixMilli() - time.Hour.Milliseconds(), MaxTime: end.UnixMilli(), Matchers: []storepb.LabelMatcher{eq("__name__", "gpu_temp")},
				MaxResolutionWindow: (12 * time.Minute).Milliseconds(), Aggregates: tc.aggrs, ResponseBatchSize: 64, WithoutReplicaLabels: []string{"replica"},
			}
			var chunks, samples, size int
			cpu0 := processCPU(b)
			for b.Loop() {
				stream, err := c.Series(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					r, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					size += r.Size()
					if r.GetBatch() == nil {
						continue
					}
					for _, sr := range r.GetBatch().Series {
						for _, ch := range sr.Chunks {
							chunks++
							samples += int(binary.BigEndian.Uint16(ch.Raw.Data))
						}
					}
				}
			}
			n := float64(b.N)
			b.ReportMetric((processCPU(b)-cpu0).Seconds()/n, "cpu-s/op")
			b.ReportMetric(float64(chunks)/n, "chunks/op")
			b.ReportMetric(float64(samples)/n, "samples/op")
			b.ReportMetric(float64(size)/n, "bytes-sent/op")
		})
	}
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
