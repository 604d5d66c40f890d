package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

// BenchmarkThanosQuerier30d: a 30-day range query (1 h steps) over 1,000
// GPU series held in the hour tier, against one Strata holding them all and
// through Thanos Querier over two Strata shards holding half each. Compare
// the two sub-benchmarks' ns/op (one run). Thanos is built as in
// TestThanosQuerierEndToEnd (or taken from STRATA_E2E_THANOS).
func BenchmarkThanosQuerier30d(b *testing.B) {
	dir := b.TempDir()
	thanos := os.Getenv("STRATA_E2E_THANOS")
	if thanos == "" {
		thanos = buildThanos(b, dir)
	}
	const series, days = 1000, 30
	end := time.Now().Truncate(24 * time.Hour)
	start := end.Add(-days * 24 * time.Hour)
	write := func(name string, keep func(s int) bool) string {
		d := filepath.Join(dir, name)
		cfg := tiers.DefaultHourConfig(filepath.Join(d, "hour"))
		r, err := tiers.OpenRollup(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), time.Now)
		if err != nil {
			b.Fatal(err)
		}
		for day := start; day.Before(end); day = day.Add(24 * time.Hour) {
			var sws []tiers.SeriesWindows
			for s := range series {
				if !keep(s) {
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
			slices.SortFunc(sws, func(a, b tiers.SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
			if err := r.WritePartition(day.UnixMilli(), sws); err != nil {
				b.Fatal(err)
			}
		}
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
		cfgFile := filepath.Join(dir, name+".yml")
		body := "rules:\n  canonical: false\nself_scrape:\n  enabled: false\ndiagnose:\n  enabled: false\nglobal:\n  external_labels:\n    shard: " + name + "\n"
		if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
			b.Fatal(err)
		}
		return d
	}
	node := func(name string, keep func(int) bool) *strataProc {
		d := write(name, keep)
		return startStrata(b, d, "--config.file="+filepath.Join(dir, name+".yml"), "--grpc.listen-address=127.0.0.1:0")
	}
	single := node("single", func(int) bool { return true })
	s0 := node("s0", func(s int) bool { return s%2 == 0 })
	s1 := node("s1", func(s int) bool { return s%2 == 1 })
	q := startThanosQuery(b, thanos, dir, grpcAddr(b, s0), grpcAddr(b, s1))
	waitStores(b, q, 2)

	v := url.Values{"query": {`avg by (host) (gpu_temp)`}, "start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(end.Unix() - 1)}, "step": {"3600"}}
	run := func(b *testing.B, base string) {
		for b.Loop() {
			res, _ := promQuery(b, base+"/api/v1/query_range", v)
			if m, ok := res.(model.Matrix); !ok || len(m) != series/8 || len(m[0].Values) < days*24-1 {
				b.Fatalf("got %v, want %d series of %d points (the first step precedes the first window)", short(res), series/8, days*24-1)
			}
		}
	}
	b.Run("single-strata", func(b *testing.B) { run(b, "http://"+single.addr) })
	b.Run("thanos-two-shards", func(b *testing.B) { run(b, q) })
}
