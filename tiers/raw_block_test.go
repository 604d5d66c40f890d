package tiers_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/tiers"
)

// TestRawBlockDuration: RawConfig.BlockDuration reaches the TSDB. An hour
// and three quarters of one sample a second spans more than 1.5 times an
// hour and less than 1.5 times two, so a head of 1 h blocks compacts its
// first hour into a block of that span and one of the TSDB's 2 h (the
// same as 0) compacts nothing; every sample reads back either way.
func TestRawBlockDuration(t *testing.T) {
	for _, tc := range []struct {
		block  time.Duration
		blocks int
	}{{0, 0}, {2 * time.Hour, 0}, {time.Hour, 1}} { // 0: the TSDB's own default
		t.Run(tc.block.String(), func(t *testing.T) {
			raw := openRawMonth(t, t.TempDir(), tc.block)
			defer raw.Close()
			lbls := labels.FromStrings("__name__", "x")
			t0 := time.Now().Add(-3 * time.Hour).Truncate(2 * time.Hour).UnixMilli()
			const n = 105 * 60
			app := raw.Appender(context.Background())
			var ref storage.SeriesRef
			var err error
			for i := range int64(n) {
				if ref, err = app.Append(ref, lbls, t0+i*1000, float64(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := raw.DB().Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
			blocks := raw.DB().Blocks()
			if len(blocks) != tc.blocks {
				t.Fatalf("%d blocks after compaction, want %d", len(blocks), tc.blocks)
			}
			for _, b := range blocks {
				if span := b.Meta().MaxTime - b.Meta().MinTime; span != time.Hour.Milliseconds() {
					t.Errorf("block spans %s, want 1h", time.Duration(span)*time.Millisecond)
				}
			}
			got := 0
			eachRawSample(t, raw, "x", func(ts int64, v float64) {
				if ts != t0+int64(got)*1000 || v != float64(got) {
					t.Fatalf("sample %d: (%d, %g), want (%d, %d)", got, ts, v, t0+int64(got)*1000, got)
				}
				got++
			})
			if got != n {
				t.Errorf("read back %d samples, want %d", got, n)
			}
		})
	}
}

// BenchmarkRawHeadBlockDuration measures what the head holds between its
// compactions, by block duration (RawConfig.BlockDuration; 2 h is the
// TSDB's and Prometheus' default): 2,000 series get one sample a second,
// in requests of a second's samples, through six hours of sample time
// appended as fast as they go. Every ten minutes of it the head writes its
// full chunks to disk (as its timer does), the TSDB compacts what it can,
// and the heap is read after a collection. held-B/series is that heap over
// what the empty tier held, its mean and its highest over the last three
// hours (the head's sawtooth: one 40-byte chunk reference a series every
// two minutes until the head compacts at 1.5 block durations); cpu-ns/sample
// is the process CPU of appending and compacting.
func BenchmarkRawHeadBlockDuration(b *testing.B) {
	for _, d := range []time.Duration{2 * time.Hour, time.Hour, 30 * time.Minute} {
		b.Run("block="+d.String(), func(b *testing.B) {
			benchRawHeadSpan(b, d)
		})
	}
}

func benchRawHeadSpan(b *testing.B, block time.Duration) {
	const (
		series = 2000
		hours  = 6
		mark   = 600 // seconds of sample time between measurements
	)
	lsets := make([]labels.Labels, series)
	for i := range lsets {
		lsets[i] = labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "cluster", "c1",
			"Hostname", "gpu-node-"+strconv.Itoa(i/8), "gpu", strconv.Itoa(i%8), "job", "dcgm")
	}
	var meanHeld, peakHeld, cpu float64
	for b.Loop() {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		base := float64(m.HeapAlloc)
		cfg := tiers.DefaultRawConfig(b.TempDir())
		cfg.BlockDuration = block
		cfg.ChunkMmapInterval = time.Second
		raw, err := tiers.OpenRaw(cfg, quietLogger(), nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		refs := make([]storage.SeriesRef, series)
		t0 := time.Now().Add(-hours * time.Hour).Truncate(time.Hour).UnixMilli()
		var cpuUsed time.Duration
		var sum, peak, samples, n float64
		for s := range int64(hours * 3600) {
			if s%mark == 0 && s > 0 {
				// The mmap timer runs on the wall clock; let it pass once.
				time.Sleep(cfg.ChunkMmapInterval + 200*time.Millisecond)
				c0 := processCPU(b)
				if err := raw.DB().Compact(ctx); err != nil {
					b.Fatal(err)
				}
				cpuUsed += processCPU(b) - c0
				if s >= hours*3600/2 {
					runtime.GC()
					runtime.GC()
					runtime.ReadMemStats(&m)
					held := float64(m.HeapAlloc) - base
					sum += held
					peak = max(peak, held)
					n++
				}
			}
			c0 := processCPU(b)
			app := raw.AppenderV2(ctx)
			for i := range refs {
				if refs[i], err = app.Append(refs[i], lsets[i], 0, t0+s*1000, float64(s+int64(i)), nil, nil, storage.AppendV2Options{}); err != nil {
					b.Fatal(err)
				}
			}
			if err := app.Commit(); err != nil {
				b.Fatal(err)
			}
			cpuUsed += processCPU(b) - c0
			samples += series
		}
		meanHeld += sum / n / series
		peakHeld += peak / series
		cpu += float64(cpuUsed) / samples
		runtime.KeepAlive(refs)
		if err := raw.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(meanHeld/float64(b.N), "mean-held-B/series")
	b.ReportMetric(peakHeld/float64(b.N), "peak-held-B/series")
	b.ReportMetric(cpu/float64(b.N), "cpu-ns/sample")
}

// BenchmarkRawQueryBlockDuration measures what shorter blocks cost a read
// of the raw tier's whole day (a dashboard's 24 h range): 1,000 series of
// one sample every 15 s over 24 h, compacted into blocks of each duration
// (at 1 h merged three at a time into 3 h; 2 h blocks are not merged:
// the blocks metric), then every op selects all of them over the
// day and reads every sample, as the query engine does for a range query;
// cpu-ns/op is the process CPU of that (the machine's other load aside).
func BenchmarkRawQueryBlockDuration(b *testing.B) {
	for _, d := range []time.Duration{2 * time.Hour, time.Hour} {
		b.Run("block="+d.String(), func(b *testing.B) {
			const series, step = 1000, int64(15_000)
			cfg := tiers.DefaultRawConfig(b.TempDir())
			cfg.BlockDuration = d
			raw, err := tiers.OpenRaw(cfg, quietLogger(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			ctx := context.Background()
			t0 := time.Now().Add(-24 * time.Hour).Truncate(time.Hour).UnixMilli()
			t1 := t0 + 24*time.Hour.Milliseconds()
			refs := make([]storage.SeriesRef, series)
			for ts := t0; ts < t1; ts += step {
				app := raw.AppenderV2(ctx)
				for i := range refs {
					lset := labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", "gpu-node-"+strconv.Itoa(i/8), "gpu", strconv.Itoa(i%8))
					if refs[i], err = app.Append(refs[i], lset, 0, ts, float64(ts/step+int64(i)), nil, nil, storage.AppendV2Options{}); err != nil {
						b.Fatal(err)
					}
				}
				if err := app.Commit(); err != nil {
					b.Fatal(err)
				}
				if ts%(10*60_000) == 0 {
					if err := raw.DB().Compact(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			blocks := len(raw.DB().Blocks())
			m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "DCGM_FI_DEV_GPU_UTIL")
			want := series * int((t1-t0)/step)
			cpu0 := processCPU(b)
			for b.Loop() {
				q, err := raw.Querier(t0, t1)
				if err != nil {
					b.Fatal(err)
				}
				got := 0
				set := q.Select(ctx, false, nil, m)
				var it chunkenc.Iterator
				for set.Next() {
					it = set.At().Iterator(it)
					for it.Next() != chunkenc.ValNone {
						got++
					}
				}
				if err := set.Err(); err != nil {
					b.Fatal(err)
				}
				_ = q.Close()
				if got != want {
					b.Fatalf("read %d samples, want %d", got, want)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(blocks), "blocks")
		})
	}
}

// TestRawBlockDurationChange: a raw tier written with blocks of 2 h (the
// TSDB's, Strata's before stop 55) opens with blocks of an hour and goes
// on: the head compacts into hour blocks after the 2 h ones, the merges
// into 3 h leave alone a 2 h block that crosses a 3 h boundary, no two
// blocks overlap, and every sample reads back once.
func TestRawBlockDurationChange(t *testing.T) {
	dir := t.TempDir()
	lbls := labels.FromStrings("__name__", "x")
	t0 := time.Now().Add(-14 * time.Hour).Truncate(6 * time.Hour).UnixMilli()
	const step = int64(10_000)
	next := t0
	write := func(block time.Duration, until int64) {
		t.Helper()
		raw := openRawMonth(t, dir, block)
		defer raw.Close()
		var ref storage.SeriesRef
		var err error
		for ; next < until; next += step {
			app := raw.Appender(context.Background())
			if ref, err = app.Append(ref, lbls, next, float64(next)); err != nil {
				t.Fatal(err)
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
			if next%(10*60_000) == 0 {
				if err := raw.DB().Compact(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	hour := time.Hour.Milliseconds()
	write(2*time.Hour, t0+7*hour) // blocks [0, 2 h) and [2 h, 4 h), the head from 4 h
	write(time.Hour, t0+13*hour)

	raw := openRawMonth(t, dir, time.Hour)
	defer raw.Close()
	if err := raw.DB().Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	var spans []string
	prevMax := int64(math.MinInt64)
	for _, b := range raw.DB().Blocks() {
		m := b.Meta()
		spans = append(spans, fmt.Sprintf("%dh+%dh", (m.MinTime-t0)/hour, (m.MaxTime-m.MinTime)/hour))
		if m.MinTime < prevMax {
			t.Errorf("block at %d overlaps the one before (ending %d)", m.MinTime, prevMax)
		}
		prevMax = m.MaxTime
	}
	if !slices.Contains(spans, "2h+2h") || !slices.Contains(spans, "6h+3h") {
		t.Errorf("blocks %v: want the 2 h block across 3 h left alone and a 3 h merge of hour blocks", spans)
	}
	want := t0
	eachRawSample(t, raw, "x", func(ts int64, _ float64) {
		if ts != want {
			t.Fatalf("sample at %d, want %d", ts, want)
		}
		want += step
	})
	if want != next {
		t.Errorf("read up to %d, want %d", want, next)
	}
	t.Logf("blocks: %v", spans)
}

// TestRawBlockChunkSegmentSize: RawConfig.BlockChunkSegmentSize reaches the
// compactor: a block of more chunks than one file holds has several, none
// over the size (each preallocated at it), and its samples read back.
func TestRawBlockChunkSegmentSize(t *testing.T) {
	const segment = 16 << 10
	cfg := tiers.DefaultRawConfig(t.TempDir())
	cfg.Retention = 30 * 24 * time.Hour
	cfg.BlockChunkSegmentSize = segment
	raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	const series, n = 100, 105 * 60
	t0 := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).UnixMilli()
	app := raw.Appender(context.Background())
	for s := range series {
		lbls := labels.FromStrings("__name__", "x", "s", strconv.Itoa(s))
		var ref storage.SeriesRef
		for i := range int64(n) {
			if ref, err = app.Append(ref, lbls, t0+i*1000, float64(i*int64(s))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := raw.DB().Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	blocks := raw.DB().Blocks()
	if len(blocks) != 1 {
		t.Fatalf("%d blocks, want the first hour's", len(blocks))
	}
	files, err := os.ReadDir(filepath.Join(blocks[0].Dir(), "chunks"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("%d chunk files for %d series' hour at %d bytes a file", len(files), series, segment)
	}
	for _, f := range files {
		if info, err := f.Info(); err != nil || info.Size() > segment {
			t.Fatalf("chunk file %s: %v bytes (%v), over %d", f.Name(), info.Size(), err, segment)
		}
	}
	got := 0
	eachRawSample(t, raw, "x", func(int64, float64) { got++ })
	if got != series*n {
		t.Fatalf("read back %d samples, want %d", got, series*n)
	}
}
