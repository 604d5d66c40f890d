package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/tiers"
)

// benchYear is the first day of the benchmarks' year of history.
var benchYear = time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)

// benchDataDir returns a data directory written by write: a temporary one,
// or $STRATA_EXPORT_BENCH_DIR/name, written once and kept for later runs
// (the year takes a minute or more to write).
func benchDataDir(b *testing.B, name string, write func(*testing.B, string)) string {
	b.Helper()
	root := os.Getenv("STRATA_EXPORT_BENCH_DIR")
	if root == "" {
		dir := b.TempDir()
		write(b, dir)
		return dir
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return dir
	}
	if err := os.RemoveAll(dir); err != nil {
		b.Fatal(err)
	}
	write(b, dir)
	if err := os.WriteFile(filepath.Join(dir, "complete"), nil, 0o600); err != nil {
		b.Fatal(err)
	}
	return dir
}

// runMeasured runs the strata binary and returns its wall time, its CPU
// time (user and system) and peak RSS in MiB (the child's own, from
// wait4's rusage: what the export alone costs; the CPU time says what the
// wall time would be on an idle machine when other work shares the cores).
func runMeasured(b *testing.B, args ...string) (wall, cpu time.Duration, rssMiB float64) {
	b.Helper()
	cmd := exec.Command(strataBinary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("strata %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	wall = time.Since(start)
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		b.Fatal("no rusage")
	}
	cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return wall, cpu, float64(ru.Maxrss) / 1024 // KiB on Linux
}

// writeYearOfHours writes 365 hour partitions of 1,000 GPU-utilisation
// series (125 hosts x 8 GPUs, full-precision values) into dir/hour.
func writeYearOfHours(b *testing.B, dir string) {
	b.Helper()
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), promslog.NewNopLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = hour.Close() }()
	for d := range 365 {
		start := benchYear.AddDate(0, 0, d).UnixMilli()
		sws := make([]tiers.SeriesWindows, 0, 1000)
		for s := range 1000 {
			sw := tiers.SeriesWindows{Labels: labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL",
				"Hostname", fmt.Sprintf("gpu-node-%03d", s/8), "gpu", fmt.Sprint(s%8), "modelName", "NVIDIA H100 80GB HBM3"),
				Windows: make([]tiers.Window, 24)}
			for h := range 24 {
				ws := start + int64(h)*time.Hour.Milliseconds()
				phase := float64(s) + float64(ws)/float64(24*time.Hour.Milliseconds())*2*math.Pi
				v := 50 + 40*math.Sin(phase)
				sw.Windows[h] = tiers.Window{Start: ws, FirstT: ws, LastT: ws + 3_585_000, Count: 240,
					Sum: 240*v + math.Cos(phase), Min: v - 7.25 - math.Sin(3*phase), Max: v + 6.5 + math.Cos(5*phase), First: v - 1.5*math.Sin(2*phase), Last: v + 0.75*math.Cos(phase)}
			}
			sws = append(sws, sw)
		}
		if err := hour.WritePartition(start, sws); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExportYearHourly: strata export of 365 days x 1,000 series at an
// hourly step, one group per series (8.76 M rows), as a separate process:
// wall time and its peak RSS (targets: under 10 s, under 500 MiB). The
// hour files are written once before the timer (about a minute).
//
//	go test -run '^$' -bench BenchmarkExportYearHourly -benchtime 1x ./cmd/strata/
func BenchmarkExportYearHourly(b *testing.B) {
	dir := benchDataDir(b, "year-1000", writeYearOfHours)
	out := b.TempDir()
	for _, format := range []string{"parquet", "csv"} {
		b.Run(format, func(b *testing.B) {
			var wall, cpu time.Duration
			rss := 0.0
			for b.Loop() {
				w, c, r := runMeasured(b, "export", "--storage.path="+dir, "--from="+benchYear.Format(time.RFC3339),
					"--to="+benchYear.AddDate(0, 0, 365).Format(time.RFC3339), "--step=1h", "--by=Hostname,gpu",
					"--force", "--output="+filepath.Join(out, "year."+format), "DCGM_FI_DEV_GPU_UTIL")
				wall, cpu, rss = wall+w, cpu+c, max(rss, r)
			}
			st, err := os.Stat(filepath.Join(out, "year."+format))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(wall.Seconds()/float64(b.N), "wall-s/export")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/export")
			b.ReportMetric(rss, "peak-rss-MiB")
			b.ReportMetric(float64(st.Size())/(1<<20), "output-MiB")
		})
	}
}

// writeSimulatedYear writes a year of hour partitions for the capacity
// preset's metrics of the default simulated cluster (4 nodes x 8 GPUs, 32
// vLLM instances, every DCGM field): one simulated day at 15 s, rolled up
// with the pipeline's window code, repeated 365 times with every counter
// continued from the day before (a year of the simulator at 1 s ticks is
// hours of CPU; the files, which are what the preset reads, are the same
// size and shape).
func writeSimulatedYear(b *testing.B, dir string) {
	b.Helper()
	cfg := sim.Config{Seed: 1, DCGMFields: "full", Start: benchYear}
	c, err := sim.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	want := map[string]bool{"DCGM_FI_PROF_SM_ACTIVE": true, "vllm:generation_tokens_total": true, "vllm:request_success_total": true,
		"vllm:time_to_first_token_seconds_bucket": true, "vllm:request_time_per_output_token_seconds_bucket": true,
		"vllm:kv_cache_usage_perc": true, "DCGM_FI_DEV_POWER_VIOLATION": true, "DCGM_FI_DEV_THERMAL_VIOLATION": true}
	type series struct {
		lbls    labels.Labels
		samples []chunks.Sample
	}
	idx := map[string]int{}
	var ss []series
	day := 24 * time.Hour
	err = c.Backfill(benchYear, benchYear.Add(day-15*time.Second), 15*time.Second, func(l labels.Labels, t int64, v float64) error {
		if !want[l.Get("__name__")] || value.IsStaleNaN(v) {
			return nil
		}
		k := l.String()
		i, ok := idx[k]
		if !ok {
			i = len(ss)
			idx[k] = i
			ss = append(ss, series{lbls: l})
		}
		ss[i].samples = append(ss[i].samples, benchSample{t, v})
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		b.Fatal(err)
	}
	kindOf := downsample.GaugesByName(cat.IsGauge)
	dayMs := day.Milliseconds()
	var days [][]tiers.SeriesWindows // per series, one day of hour windows
	for _, s := range ss {
		kind := kindOf.Of(s.lbls)
		mws, _, err := downsample.AppendWindows(nil, storage.NewListSeries(s.lbls, s.samples).Iterator(nil), downsample.MinuteRes, benchYear.UnixMilli(), benchYear.UnixMilli()+dayMs, kind)
		if err != nil {
			b.Fatal(err)
		}
		hws := downsample.Coarsen(nil, mws, downsample.HourRes, kind)
		days = append(days, []tiers.SeriesWindows{{Labels: s.lbls, Windows: hws}})
	}
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), promslog.NewNopLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = hour.Close() }()
	for d := range 365 {
		shift := int64(d) * dayMs
		sws := make([]tiers.SeriesWindows, 0, len(days))
		for _, sd := range days {
			src := sd[0]
			if len(src.Windows) == 0 {
				continue
			}
			offset := 0.0 // counters continue: each day starts where the last ended
			if kindOf.Of(src.Labels) == downsample.KindCounter {
				last := src.Windows[len(src.Windows)-1].Last
				offset = float64(d) * last
			}
			ws := make([]tiers.Window, len(src.Windows))
			for j, w := range src.Windows {
				w.Start, w.FirstT, w.LastT = w.Start+shift, w.FirstT+shift, w.LastT+shift
				if offset != 0 {
					w.First, w.Last, w.Min, w.Max = w.First+offset, w.Last+offset, w.Min+offset, w.Max+offset
					w.Sum += offset * float64(w.Count)
				}
				ws[j] = w
			}
			sws = append(sws, tiers.SeriesWindows{Labels: src.Labels, Windows: ws})
		}
		slices.SortFunc(sws, func(a, b tiers.SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
		if err := hour.WritePartition(benchYear.UnixMilli()+shift, sws); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("simulated cluster: %d series of the preset's metrics, 365 days of hour windows", len(days))
}

// BenchmarkExportCapacityYear: strata export --preset=capacity over a year
// of the 32-GPU simulated cluster at a daily step, as a separate process
// (target: under 30 s).
//
//	go test -run '^$' -bench BenchmarkExportCapacityYear -benchtime 1x ./cmd/strata/
func BenchmarkExportCapacityYear(b *testing.B) {
	dir := benchDataDir(b, "capacity-year", writeSimulatedYear)
	out := b.TempDir()
	for _, step := range []string{"1d", "1h"} {
		b.Run("step="+step, func(b *testing.B) {
			var wall, cpu time.Duration
			rss := 0.0
			for b.Loop() {
				w, c, r := runMeasured(b, "export", "--storage.path="+dir, "--from="+benchYear.Format(time.RFC3339),
					"--to="+benchYear.AddDate(0, 0, 365).Format(time.RFC3339), "--step="+step, "--preset=capacity",
					"--force", "--output="+filepath.Join(out, "capacity.csv"))
				wall, cpu, rss = wall+w, cpu+c, max(rss, r)
			}
			if _, err := os.Stat(filepath.Join(out, "capacity.png")); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(wall.Seconds()/float64(b.N), "wall-s/export")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/export")
			b.ReportMetric(rss, "peak-rss-MiB")
		})
	}
}

// BenchmarkExportInProcess runs the two exports above inside the test
// process, so that go test's -cpuprofile and -memprofile see them (the
// benchmarks above time a separate strata process, which a profile of the
// test binary does not include):
//
//	go test -run '^$' -bench BenchmarkExportInProcess/year -benchtime 1x -cpuprofile cpu.out ./cmd/strata/
func BenchmarkExportInProcess(b *testing.B) {
	from, to := benchYear.Format(time.RFC3339), benchYear.AddDate(0, 0, 365).Format(time.RFC3339)
	b.Run("year", func(b *testing.B) {
		dir := benchDataDir(b, "year-1000", writeYearOfHours)
		c := &exportCommand{storagePath: dir, from: from, to: to, step: "1h", by: []string{"Hostname,gpu"},
			output: filepath.Join(b.TempDir(), "year.parquet"), force: true, noProgress: true, queries: []string{"DCGM_FI_DEV_GPU_UTIL"}}
		b.ReportAllocs()
		for b.Loop() {
			if err := c.run(promslog.NewNopLogger()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("capacity", func(b *testing.B) {
		dir := benchDataDir(b, "capacity-year", writeSimulatedYear)
		c := &exportCommand{storagePath: dir, from: from, to: to, step: "1d", preset: "capacity",
			output: filepath.Join(b.TempDir(), "capacity.csv"), force: true, noProgress: true}
		b.ReportAllocs()
		for b.Loop() {
			if err := c.run(promslog.NewNopLogger()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type benchSample struct {
	t int64
	f float64
}

func (s benchSample) T() int64                      { return s.t }
func (s benchSample) ST() int64                     { return 0 }
func (s benchSample) F() float64                    { return s.f }
func (s benchSample) H() *histogram.Histogram       { return nil }
func (s benchSample) FH() *histogram.FloatHistogram { return nil }
func (s benchSample) Copy() chunks.Sample           { return s }
func (s benchSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
