package storeapi

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/thanos-io/thanos/pkg/store/storepb"

	"github.com/strata-dev/strata/tiers"
)

func TestScratchDiag(t *testing.T) {
	const series, days = 500, 30
	dir := t.TempDir()
	end := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	start := end.Add(-days * 24 * time.Hour)
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), quiet(), prometheus.NewRegistry(), func() time.Time { return end })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hour.Close() })
	for day := start; day.Before(end); day = day.Add(24 * time.Hour) {
		var sws []tiers.SeriesWindows
		for s := range 2 * series {
			if s%2 == 1 {
				continue
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
			t.Fatal(err)
		}
	}
	stitched := tiers.NewStitched(nil, nil, hour)
	s, err := New(shardConfig(), stitched, quiet(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := storepb.NewStoreClient(serve(t, s, nil))
	for _, aggrs := range [][]storepb.Aggr{{storepb.Aggr_COUNT, storepb.Aggr_SUM}, {storepb.Aggr_MAX}, {storepb.Aggr_MIN}, {storepb.Aggr_COUNT}} {
		req := &storepb.SeriesRequest{MinTime: start.UnixMilli() - 3600_000, MaxTime: end.UnixMilli(), Matchers: []storepb.LabelMatcher{{Type: storepb.LabelMatcher_EQ, Name: "__name__", Value: "gpu_temp"}},
			MaxResolutionWindow: 720_000, Aggregates: aggrs, ResponseBatchSize: 64, WithoutReplicaLabels: []string{"replica"}}
		t0 := time.Now()
		st, err := c.Series(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var nser, nchunks, bytes, samples, msgs int
		for {
			r, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			msgs++
			bytes += r.Size()
			var ss []*storepb.Series
			if r.GetSeries() != nil {
				ss = append(ss, r.GetSeries())
			}
			if b := r.GetBatch(); b != nil {
				ss = append(ss, b.Series...)
			}
			for _, x := range ss {
				nser++
				for _, ch := range x.Chunks {
					nchunks++
					samples += int(ch.Raw.Data[0])<<8 | int(ch.Raw.Data[1])
				}
			}
		}
		t.Logf("%v: %s msgs %d series %d chunks %d bytes %d samples %d", aggrs, time.Since(t0), msgs, nser, nchunks, bytes, samples)
	}
}
