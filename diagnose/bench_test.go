package diagnose

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose/diagtest"
	"github.com/strata-dev/strata/tiers"
)

// benchCluster is the reference cluster: 4 nodes x 8 GPUs, one vLLM
// instance per GPU, with a few faults so that diagnoses open and close.
func benchCluster(days int) sim.Config {
	cfg := sim.Config{Seed: 5, Start: simStart}
	cfg.Faults = sim.GenerateFaults(cfg.Defaults(), simStart.Add(3*time.Hour), simStart.Add(time.Duration(days)*24*time.Hour), 4*days, 9)
	return cfg
}

// benchData writes days of the reference cluster's history into a minute
// tier, six hours at a time through the backfill package, and returns the
// minute tier. STRATA_DIAGNOSE_BENCH_DIR keeps the data between runs (it
// takes minutes to simulate a fortnight).
func benchData(b *testing.B, days int) *tiers.Rollup {
	b.Helper()
	dir := os.Getenv("STRATA_DIAGNOSE_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else {
		dir = filepath.Join(dir, time.Duration(days*24*int(time.Hour)).String())
	}
	done := filepath.Join(dir, "complete")
	minute, hour := openTiers(b, dir)
	if _, err := os.Stat(done); err == nil {
		return minute
	}
	cfg := benchCluster(days)
	c, err := sim.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	end := simStart.Add(time.Duration(days) * 24 * time.Hour)
	for from := simStart; from.Before(end); from = from.Add(6 * time.Hour) {
		diagtest.Import(b, c, from, from.Add(6*time.Hour), minute, hour)
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	return minute
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLiveMinute is the live cost of the default pack on the 4x8
// cluster at steady state: one minute evaluated, its windows read afresh
// (from disk here; live reads the newest from the pipeline's memory).
// cpu-s/minute is the figure to compare with 5 % of a core (3 CPU-s per
// minute).
// Both baseline modes run, so that the baselines' cost is a ratio of one run.
func BenchmarkLiveMinute(b *testing.B) {
	minute := benchData(b, 1)
	for _, mode := range []string{BaselineStatic, BaselineSeasonal} {
		b.Run("mode="+mode, func(b *testing.B) { benchLiveMinute(b, minute, modeConfig(mode)) })
	}
}

func modeConfig(mode string) Config {
	cfg := DefaultConfig()
	cfg.Baseline.Mode = mode
	return cfg
}

func benchLiveMinute(b *testing.B, minute *tiers.Rollup, cfg Config) {
	e, err := New(cfg, Options{Minute: minute, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	t := simStart.Add(4 * time.Hour)
	for range int((e.Warmup() + time.Minute) / time.Minute) { // warm up, untimed
		if err := e.EvalMinute(ctx, t); err != nil {
			b.Fatal(err)
		}
		t = t.Add(time.Minute)
	}
	b.ReportAllocs()
	b.Logf("after warm-up at %s: %d series", t.Format(time.RFC3339), e.snapSeries)
	cpu0 := processCPU(b)
	n := 0
	for b.Loop() {
		if err := e.EvalMinute(ctx, t); err != nil {
			b.Fatal(err)
		}
		t = t.Add(time.Minute)
		n++
	}
	b.ReportMetric((processCPU(b)-cpu0).Seconds()/float64(n), "cpu-s/minute")
	b.ReportMetric(float64(e.snapSeries), "series")
}

// BenchmarkReplay14Days replays a fortnight of the 4x8 cluster (the issue's
// target: under 2 minutes on the 2-core machine).
func BenchmarkReplay14Days(b *testing.B) {
	days := 14
	if os.Getenv("STRATA_DIAGNOSE_BENCH_DAYS") == "1" {
		days = 1
	}
	var minute *tiers.Rollup
	replayDays := days
	if n, err := strconv.Atoi(os.Getenv("STRATA_DIAGNOSE_REPLAY_DAYS")); err == nil && n > 0 {
		// Replay the first n days of a fortnight still being written
		// (STRATA_DIAGNOSE_BENCH_DIR), read-only beside its writer.
		cfg := tiers.DefaultMinuteConfig(filepath.Join(os.Getenv("STRATA_DIAGNOSE_BENCH_DIR"), "336h0m0s", "minute"))
		cfg.ReadOnly, cfg.Retention = true, 0
		r, err := tiers.OpenRollup(cfg, diagtest.QuietLogger(), prometheus.NewRegistry(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		minute, replayDays = r, n
	} else {
		minute = benchData(b, days)
	}
	from := simStart.Add(3 * time.Hour)
	to := simStart.Add(time.Duration(replayDays)*24*time.Hour - time.Minute)
	for _, mode := range []string{BaselineStatic, BaselineSeasonal} {
		b.Run("mode="+mode, func(b *testing.B) { benchReplay(b, minute, modeConfig(mode), from, to) })
	}
}

func benchReplay(b *testing.B, minute *tiers.Rollup, cfg Config, from, to time.Time) {
	for b.Loop() {
		cpu0 := processCPU(b)
		start := time.Now()
		ds, err := Replay(context.Background(), cfg, Options{Minute: minute, Registerer: prometheus.NewRegistry()}, from, to)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "wall-s")
		b.ReportMetric((processCPU(b) - cpu0).Seconds(), "cpu-s")
		b.ReportMetric(float64(len(ds)), "diagnoses")
		b.ReportMetric(to.Sub(from).Minutes(), "minutes")
	}
}

// BenchmarkReplayLastHour replays the last hour of a day of the 4x8
// cluster: with baselines, the day before it is read back first (the cost
// of a short `strata diagnose --from=-1h` over a store with history).
func BenchmarkReplayLastHour(b *testing.B) {
	minute := benchData(b, 1)
	to := simStart.Add(24*time.Hour - time.Minute)
	from := to.Add(-time.Hour)
	for _, mode := range []string{BaselineStatic, BaselineSeasonal} {
		b.Run("mode="+mode, func(b *testing.B) { benchReplay(b, minute, modeConfig(mode), from, to) })
	}
}
