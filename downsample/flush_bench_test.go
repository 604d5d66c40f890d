package downsample

import (
	"context"
	"fmt"
	iofs "io/fs"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// BenchmarkFlushHour measures the CPU of writing one hour's minute partition
// (the Parquet minute tier) with the tee, against the CPU the same hour
// took to ingest through the tee into the raw tier (the TSDB head and WAL;
// a server's ingest also decodes remote-write requests, so its share is
// smaller than flush/ingest says). At 15 s the series are sparse: the
// default flush computes their windows from raw, spill-all reads them
// from the spill (Config.SparseInterval < 0: every series spilled, as
// before sparse series were left out). At 1 s every series is dense and
// both read the spill.
//
//	go test -run XXX -bench BenchmarkFlushHour -benchtime 3x ./downsample/
func BenchmarkFlushHour(b *testing.B) {
	for _, n := range []int{10_000, 50_000} {
		for _, iv := range []int64{15_000, 1000} {
			for _, mode := range []struct {
				name   string
				sparse time.Duration
			}{{"default", 0}, {"spill-all", -1}} {
				if iv == 1000 && mode.sparse < 0 {
					continue // every 1 s series is dense: the same flush
				}
				b.Run(fmt.Sprintf("series=%d/interval=%ds/%s", n, iv/1000, mode.name), func(b *testing.B) {
					benchFlushHour(b, n, iv, mode.sparse)
				})
			}
		}
	}
}

func benchFlushHour(b *testing.B, n int, iv int64, sparse time.Duration) {
	ctx := context.Background()
	f := newFleet(n)
	raw := openBenchRaw(b)
	minuteDir := b.TempDir()
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(minuteDir), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { minute.Close() })
	cfg := testConfig()
	cfg.SpillDir, cfg.SparseInterval = b.TempDir(), sparse
	p, err := New(cfg, raw, minute, newMemTier(HourRes, DayLen), nil, nil, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	tee := p.Tee(raw)
	h := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	sp, err := p.spillFor(h)
	if err != nil {
		b.Fatal(err)
	}
	// The hour, and the first samples of the next, which close its last
	// windows; the tick's drain once a minute.
	cpu0 := processCPU(b)
	for t := h; t <= h+HourRes; t += iv {
		app := tee.AppenderV2(ctx)
		for i, l := range f.labels {
			if _, err := app.Append(0, l, 0, t, f.next(i), nil, nil, storage.AppendV2Options{}); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
		if t > h && (t-h)%MinuteRes == 0 {
			p.mark = t
			if err := p.drainTee(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	ingest := processCPU(b) - cpu0
	samples := float64(n) * float64(HourRes/iv)

	b.ReportAllocs()
	written := p.m.windows.WithLabelValues("minute")
	runtime.GC()
	cpu1 := processCPU(b)
	peak := watchHeap()
	for b.Loop() {
		w0 := testutil.ToFloat64(written)
		if err := p.writeTeeHour(ctx, h, sp); err != nil {
			b.Fatal(err)
		}
		if got := testutil.ToFloat64(written) - w0; got != float64(n*60) {
			b.Fatalf("%v windows written, want %d", got, n*60)
		}
	}
	flush := (processCPU(b) - cpu1) / time.Duration(b.N)
	b.ReportMetric(float64(peak()), "peak-heap-B")
	b.ReportMetric(float64(dirBytes(b, minuteDir, ".parquet")), "partition-B")
	b.ReportMetric(flush.Seconds(), "cpu-s/flush")
	b.ReportMetric(float64(flush)/float64(ingest), "flush/ingest")
	b.ReportMetric(ingest.Seconds(), "ingest-cpu-s/hour")
	b.ReportMetric(float64(ingest.Nanoseconds())/samples, "ingest-cpu-ns/sample")
	b.ReportMetric(float64(sp.size), "spill-bytes")
}

// watchHeap samples the heap's live and not yet swept objects every
// millisecond until the returned func is called, which returns the largest
// sample less the first: how far a flush raised the heap. Sampled, it can
// miss a peak shorter than a millisecond.
func watchHeap() func() uint64 {
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { rtmetrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var most uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				most = max(most, read())
			}
		}
	})
	return func() uint64 {
		close(stop)
		wg.Wait()
		return max(most, base) - base
	}
}

// dirBytes is the size of the files under dir whose names end in suffix.
func dirBytes(tb testing.TB, dir, suffix string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(path string, d iofs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, suffix) {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
