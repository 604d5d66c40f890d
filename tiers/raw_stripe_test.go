package tiers_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// BenchmarkRawHeadStripes measures what the head's series stripes cost at
// the paced fleet's 50,000 series, by stripe size (RawConfig.StripeSize;
// 16,384 is the TSDB's and Prometheus' default, 8,192 the raw tier's):
// held-B/series is the heap the open tier holds after
// one sample of every series, in requests of 2,000, over what the empty
// process held (the stripes' fixed maps and locks included); ns/sample is
// the time of the appends by reference that follow (five more samples of
// every series, the remote-write cache's path, in an order unrelated to the
// references), with a new series' append (its hash stripe) in the first
// round only.
func BenchmarkRawHeadStripes(b *testing.B) {
	for _, stripes := range []int{16384, 8192, 4096, 2048, 1024} {
		b.Run("stripes="+strconv.Itoa(stripes), func(b *testing.B) {
			benchRawHead(b, func(cfg *tiers.RawConfig) { cfg.StripeSize = stripes })
		})
	}
}

// BenchmarkRawHeadIsolation measures what the TSDB's isolation costs
// (RawConfig.Isolation: off by default, on in Prometheus), as
// BenchmarkRawHeadStripes measures the stripes: the heap held per series
// (each series' ring of append IDs) and the appends' time and CPU (the
// append IDs each commit registers and clears).
func BenchmarkRawHeadIsolation(b *testing.B) {
	for _, on := range []bool{true, false} {
		b.Run("isolation="+strconv.FormatBool(on), func(b *testing.B) {
			benchRawHead(b, func(cfg *tiers.RawConfig) { cfg.Isolation = on })
		})
	}
}

// BenchmarkRawSampleRecords measures what the WAL's SamplesV2 records and
// the XOR2 chunks they need cost (RawConfig.SampleRecordsV2: on by
// default, off in Prometheus), as BenchmarkRawHeadStripes measures the
// stripes: the heap held per series and the appends' time and CPU (the
// records' encoding, the chunks' appends).
func BenchmarkRawSampleRecords(b *testing.B) {
	for _, v2 := range []bool{true, false} {
		b.Run("v2="+strconv.FormatBool(v2), func(b *testing.B) {
			benchRawHead(b, func(cfg *tiers.RawConfig) { cfg.SampleRecordsV2 = v2 })
		})
	}
}

// benchRawHead opens a raw tier with the defaults that set changes, and
// reports what 50,000 series cost it: held-B/series is the heap the open
// tier holds after one sample of every series, in requests of 2,000, over
// what the empty process held; the append figures are those of the five
// rounds of appends by reference that follow.
func benchRawHead(b *testing.B, set func(*tiers.RawConfig)) {
	const series = 50_000
	lsets := make([]labels.Labels, series)
	for i := range lsets {
		lsets[i] = labels.FromStrings("__name__", "node_cpu_seconds_total", "cluster", "c1",
			"instance", "host-"+strconv.Itoa(i/100)+":9100", "job", "node", "cpu", strconv.Itoa(i%100),
			"mode", "user", "region", "eu-west-1", "zone", "eu-west-1a", "env", "prod", "team", "infra")
	}
	// The appends by reference come in an order unrelated to the
	// references, as a fleet's senders interleave the series.
	order := rand.New(rand.NewPCG(1, 2)).Perm(series)
	var held, appendNs, appendCPU float64
	for b.Loop() {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m0)
		cfg := tiers.DefaultRawConfig(b.TempDir())
		set(&cfg)
		raw, err := tiers.OpenRaw(cfg, quietLogger(), nil)
		if err != nil {
			b.Fatal(err)
		}
		refs := make([]storage.SeriesRef, series)
		ctx := context.Background()
		for lo := 0; lo < series; lo += 2000 {
			app := raw.AppenderV2(ctx)
			for i := lo; i < lo+2000; i++ {
				if refs[i], err = app.Append(0, lsets[i], 0, 1000, float64(i), nil, nil, storage.AppendV2Options{}); err != nil {
					b.Fatal(err)
				}
			}
			if err := app.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		held += float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
		start, cpu0 := time.Now(), processCPU(b)
		for round := int64(1); round <= 5; round++ {
			for lo := 0; lo < series; lo += 2000 {
				app := raw.AppenderV2(ctx)
				for _, i := range order[lo : lo+2000] {
					if _, err := app.Append(refs[i], lsets[i], 0, 1000+round*1000, float64(i), nil, nil, storage.AppendV2Options{}); err != nil {
						b.Fatal(err)
					}
				}
				if err := app.Commit(); err != nil {
					b.Fatal(err)
				}
			}
		}
		appendNs += float64(time.Since(start))
		appendCPU += float64(processCPU(b) - cpu0)
		runtime.KeepAlive(refs)
		if err := raw.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(held/float64(b.N)/series, "held-B/series")
	b.ReportMetric(appendNs/float64(b.N)/(5*series), "append-ns/sample")
	b.ReportMetric(appendCPU/float64(b.N)/(5*series), "append-cpu-ns/sample")
}

// TestRawStripeSize: a stripe size that is not a power of two is refused
// with a clear error (the TSDB masks references with size-1), and the
// default opens.
func TestRawStripeSize(t *testing.T) {
	for _, n := range []int{-1, 3, 1000} {
		cfg := tiers.DefaultRawConfig(t.TempDir())
		cfg.StripeSize = n
		if raw, err := tiers.OpenRaw(cfg, quietLogger(), nil); err == nil {
			raw.Close()
			t.Errorf("stripe size %d: opened, want an error", n)
		}
	}
	for _, n := range []int{0, 1, 8192} {
		cfg := tiers.DefaultRawConfig(t.TempDir())
		cfg.StripeSize = n
		raw, err := tiers.OpenRaw(cfg, quietLogger(), nil)
		if err != nil {
			t.Fatalf("stripe size %d: %v", n, err)
		}
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRawSamplesPerChunk: RawConfig.SamplesPerChunk reaches the head: ten
// minutes of one sample a second make chunks of about that many samples
// (the TSDB's 120 by default, the same as 0), so 300 make under half as
// many chunks as 120.
func TestRawSamplesPerChunk(t *testing.T) {
	got := map[int]int{}
	for _, perChunk := range []int{0, 120, 300} {
		cfg := tiers.DefaultRawConfig(t.TempDir())
		cfg.SamplesPerChunk = perChunk
		raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		lbls := labels.FromStrings("__name__", "x")
		t0 := time.Now().Add(-time.Hour).Truncate(2 * time.Hour).UnixMilli()
		app := raw.Appender(context.Background())
		var ref storage.SeriesRef
		for i := range int64(600) {
			if ref, err = app.Append(ref, lbls, t0+i*1000, float64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		q, err := raw.ChunkQuerier(t0, t0+600_000)
		if err != nil {
			t.Fatal(err)
		}
		set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
		chunks := 0
		for set.Next() {
			for it := set.At().Iterator(nil); it.Next(); {
				chunks++
			}
		}
		if err := set.Err(); err != nil {
			t.Fatal(err)
		}
		_ = q.Close()
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}
		got[perChunk] = chunks
	}
	if got[0] != got[120] || got[0] < 4 || 2*got[300] >= got[120] {
		t.Errorf("600 samples of 1 Hz, chunks by samples a chunk: %v", got)
	}
}
