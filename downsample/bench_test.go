package downsample

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// fleet is a GPU-fleet-like mix sampled every second: 60 % DCGM-like noisy
// gauges (power, utilisation, temperature), 40 % vLLM-like counters (with an
// occasional reset).
type fleet struct {
	labels []labels.Labels
	gauge  []bool
	vals   []float64
	rng    *rand.Rand
}

func newFleet(n int) *fleet {
	f := &fleet{rng: rand.New(rand.NewPCG(7, 11))}
	gaugeNames := []string{"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"}
	counterNames := []string{"vllm:generation_tokens_total", "vllm:prompt_tokens_total"}
	for i := range n {
		node := fmt.Sprintf("node-%03d", i/16)
		if i%5 < 3 {
			f.labels = append(f.labels, labelsFor(gaugeNames[i%3], "gpu", fmt.Sprint(i%8), "Hostname", node, "job", "dcgm"))
			f.gauge = append(f.gauge, true)
		} else {
			f.labels = append(f.labels, labelsFor(counterNames[i%2], "pod", fmt.Sprintf("vllm-%d", i), "Hostname", node, "job", "vllm"))
			f.gauge = append(f.gauge, false)
		}
		f.vals = append(f.vals, 0)
	}
	return f
}

func (f *fleet) next(i int) float64 {
	if f.gauge[i] {
		f.vals[i] = 250 + 100*f.rng.Float64()
	} else if f.rng.IntN(100_000) == 0 {
		f.vals[i] = 0
	} else {
		f.vals[i] += float64(f.rng.IntN(400))
	}
	return f.vals[i]
}

// appendSeconds appends secs seconds of the fleet to raw, one commit per
// second (a remote-write request per scrape round).
func (f *fleet) appendSeconds(tb testing.TB, raw *tiers.Raw, from int64, secs int) {
	for s := range secs {
		app := raw.Appender(context.Background())
		t := from + int64(s)*1000
		for i, l := range f.labels {
			if _, err := app.Append(0, l, t, f.next(i)); err != nil {
				tb.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
}

func openBenchRaw(b *testing.B) *tiers.Raw {
	b.Helper()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), promslog.NewNopLogger(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { raw.Close() })
	return raw
}

// BenchmarkRollupMinute measures the rollup CPU per raw sample, to compare
// with BenchmarkIngestRaw (the target is rollup <= 1/4 of ingest). The
// pipeline reads every sample twice: once incrementally, a minute at a time
// behind the watermark, and once when the hour's partition is flushed (the
// re-read that picks up samples that arrived late); its cost per sample is
// the sum of the two sub-benchmarks.
func BenchmarkRollupMinute(b *testing.B) {
	const series = 500
	f := newFleet(series)
	raw := openBenchRaw(b)
	start := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	f.appendSeconds(b, raw, start, 3600)
	samples := float64(series * 3600)
	ctx := context.Background()

	report := func(b *testing.B, cpu0 time.Duration) {
		perSample := float64(b.Elapsed().Nanoseconds()) / (float64(b.N) * samples)
		b.ReportMetric(perSample, "ns/sample")
		b.ReportMetric(1e9/perSample, "samples/s")
		b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/(float64(b.N)*samples), "cpu-ns/sample")
	}
	check := func(b *testing.B, got []tiers.SeriesWindows) {
		if len(got) != series {
			b.Fatalf("got %d series, want %d", len(got), series)
		}
	}
	b.Run("flush-hour", func(b *testing.B) {
		b.ReportAllocs()
		var got []tiers.SeriesWindows
		cpu0 := processCPU(b)
		for b.Loop() {
			var err error
			got, _, err = computeWindows(ctx, raw, MinuteRes, start, start+HourRes, testKindOf)
			if err != nil {
				b.Fatal(err)
			}
		}
		check(b, got)
		if n := len(got[0].Windows); n != 60 {
			b.Fatalf("got %d windows per series, want 60", n)
		}
		report(b, cpu0)
	})
	b.Run("incremental-minutes", func(b *testing.B) {
		p, err := New(testConfig(), raw, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), nil, nil, time.Now)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			if err := p.dropSpill(start); err != nil {
				b.Fatal(err)
			}
			for m := start; m < start+HourRes; m += MinuteRes {
				if err := p.extendRaw(ctx, start, m, m+MinuteRes); err != nil {
					b.Fatal(err)
				}
			}
		}
		p.mark = start + HourRes
		p.publishMark()
		got := p.openWindows()
		check(b, got)
		if n := len(got[0].Windows); n != 60 {
			b.Fatalf("got %d windows per series, want 60", n)
		}
		report(b, cpu0)
	})
}

// BenchmarkRollupTee is the rollup cost when ingest goes through Tee: the
// tee's work in Append and Commit plus computing the minutes from the
// folded samples (one hour of the fleet per iteration), the windows
// encoded into the open hour's spill (in memory here). The raw tier behind
// the tee is a no-op here, so only the rollup's share is measured.
func BenchmarkRollupTee(b *testing.B) {
	const series = 500
	f := newFleet(series)
	raw := openBenchRaw(b)
	p, err := New(testConfig(), raw, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), nil, nil, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	tee := p.Tee(nopAppendable{})
	ctx := context.Background()
	start := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	vals := make([][]float64, series) // generated up front: not part of the cost
	for i := range vals {
		vals[i] = make([]float64, 3600)
		for s := range 3600 {
			vals[i][s] = f.next(i)
		}
	}
	b.ReportAllocs()
	cpu0 := processCPU(b)
	hour := int64(0)
	for b.Loop() {
		h := start + hour*HourRes
		hour++
		for _, h := range p.spillStarts() {
			if err := p.dropSpill(h); err != nil {
				b.Fatal(err)
			}
		}
		for s := range 3600 {
			app := tee.AppenderV2(ctx)
			t := h + int64(s)*1000
			for i, l := range f.labels {
				if _, err := app.Append(storage.SeriesRef(i+1), l, 0, t, vals[i][s], nil, nil, storage.AppendV2Options{}); err != nil {
					b.Fatal(err)
				}
			}
			if err := app.Commit(); err != nil {
				b.Fatal(err)
			}
			if (s+1)%60 == 0 { // a minute became final
				p.mark = t + 1000
				if err := p.drainTee(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	p.publishMark()
	got := p.openWindows()
	if len(got) != series || len(got[0].Windows) != 60 {
		b.Fatalf("got %d series", len(got))
	}
	samples := float64(b.N) * series * 3600
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/samples, "ns/sample")
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/samples, "cpu-ns/sample")
}

// nopAppendable stands for the raw tier in BenchmarkRollupTee: it returns
// the caller's series reference, as the TSDB does for a known series.
type nopAppendable struct{}

func (nopAppendable) AppenderV2(context.Context) storage.AppenderV2 { return nopAppender{} }

type nopAppender struct{}

func (nopAppender) Append(ref storage.SeriesRef, _ labels.Labels, _, _ int64, _ float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	return ref, nil
}
func (nopAppender) Commit() error   { return nil }
func (nopAppender) Rollback() error { return nil }

// BenchmarkIngestRaw is the ingest side of the comparison: appending the same
// fleet's samples to the raw tier (TSDB head and WAL), one commit per second
// of data.
func BenchmarkIngestRaw(b *testing.B) {
	const series = 500
	f := newFleet(series)
	raw := openBenchRaw(b)
	t := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	f.appendSeconds(b, raw, t, 60) // create the series first: steady-state ingest
	t += 60_000
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		f.appendSeconds(b, raw, t, 1)
		t += 1000
	}
	perSample := float64(b.Elapsed().Nanoseconds()) / (float64(b.N) * series)
	b.ReportMetric(perSample, "ns/sample")
	b.ReportMetric(1e9/perSample, "samples/s")
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/(float64(b.N)*series), "cpu-ns/sample")
	if math.IsNaN(perSample) {
		b.Fatal("no samples")
	}
}

// processCPU returns the process's user+system CPU time. On a shared machine
// wall-clock ns/op swings with the other tenants' load; CPU time per sample
// is what the rollup-vs-ingest budget is about. It includes the TSDB's
// background goroutines, which belong to the cost either way.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
