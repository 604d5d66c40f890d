package tiers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/strata-dev/strata/internal/mapped"
	"github.com/strata-dev/strata/tiers"
)

// openRawMonth opens a raw tier in dir that keeps 30 days, so that nothing
// a test writes expires, with blocks of block (0: the TSDB's 2 h).
func openRawMonth(t *testing.T, dir string, block time.Duration) *tiers.Raw {
	t.Helper()
	cfg := tiers.DefaultRawConfig(dir)
	cfg.Retention = 30 * 24 * time.Hour
	cfg.BlockDuration = block
	raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestRawBounds checks the raw tier's bounds at the block boundary: the
// newest sample is the same whether it is in the head, in a block (whose
// MaxTime is one past it), or in a block only, after a restart whose WAL
// holds nothing. The status API and the downsample pipeline both read it.
func TestRawBounds(t *testing.T) {
	dir := t.TempDir()
	// Blocks of 2 h hold the test's two hours and a minute in one block.
	open := func() *tiers.Raw { return openRawMonth(t, dir, 2*time.Hour) }
	raw := open()
	defer func() { _ = raw.Close() }()
	if _, _, ok := raw.Bounds(); ok {
		t.Fatal("an empty raw tier has bounds")
	}
	first, last := testT0+1_000, testT0+2*hourMs+59_999
	app := raw.Appender(context.Background())
	for ts := first; ts <= last; ts += 15_000 {
		if _, err := app.Append(0, labels.FromStrings("__name__", "m"), ts, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := app.Append(0, labels.FromStrings("__name__", "m"), last, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, raw *tiers.Raw) {
		t.Helper()
		mint, maxt, ok := raw.Bounds()
		if !ok || mint != first || maxt != last {
			t.Errorf("%s: bounds [%d, %d] %v, want [%d, %d]", what, mint, maxt, ok, first, last)
		}
		st := tiers.NewStitched(raw, nil, nil).Status().Tiers[0]
		if st.Tier != tiers.TierRaw || st.Empty || st.MinTime != first || st.MaxTime != last {
			t.Errorf("%s: status %+v, want raw [%d, %d]", what, st, first, last)
		}
	}
	check("head", raw)

	if err := raw.DB().CompactHead(tsdb.NewRangeHead(raw.DB().Head(), first, last)); err != nil {
		t.Fatal(err)
	}
	blocks := raw.DB().Blocks()
	if len(blocks) != 1 || blocks[0].Meta().MaxTime != last+1 {
		t.Fatalf("compaction made %d blocks, want one ending (exclusive) at %d", len(blocks), last+1)
	}
	check("block", raw)

	// A restart whose WAL holds nothing: only the block knows the data.
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
		t.Fatal(err)
	}
	raw = open()
	if n := raw.DB().Head().NumSeries(); n != 0 {
		t.Fatalf("the head holds %d series after a restart without WAL", n)
	}
	check("block only", raw)
}

// TestRawBoundsOutOfOrderBlock: a block compacted from the out-of-order head
// says in its meta.json that it covers its whole block range, up to two hours
// past its newest sample. Bounds must still give the newest sample: the
// rollup pipeline's watermark follows it, and a watermark from the block
// range finalised minutes whose samples had not arrived (rollups lost them).
func TestRawBoundsOutOfOrderBlock(t *testing.T) {
	dir := t.TempDir()
	open := func() *tiers.Raw { return openRawMonth(t, dir, time.Hour) }
	raw := open()
	defer func() { _ = raw.Close() }()

	// In order past three hours, so that the head is compactable, then one
	// out-of-order sample five minutes behind the newest: its block range is
	// [2h, 4h).
	first, last := testT0, testT0+3*hourMs+30*minMs
	ooo := last - 5*minMs
	app := raw.Appender(context.Background())
	for ts := first; ts <= last; ts += 15_000 {
		if _, err := app.Append(0, labels.FromStrings("__name__", "m"), ts, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := app.Append(0, labels.FromStrings("__name__", "o"), last, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	app = raw.Appender(context.Background())
	if _, err := app.Append(0, labels.FromStrings("__name__", "o"), ooo, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := raw.DB().Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	var oooBlock bool
	for _, b := range raw.DB().Blocks() {
		m := b.Meta()
		if m.Compaction.FromOutOfOrder() {
			oooBlock = true
			if m.MaxTime-1 <= last {
				t.Fatalf("the out-of-order block ends at %d, not past the newest sample %d: the test shows nothing", m.MaxTime, last)
			}
		}
	}
	if !oooBlock {
		t.Fatal("compaction wrote no out-of-order block")
	}
	if mint, maxt, ok := raw.Bounds(); !ok || mint != first || maxt != last {
		t.Errorf("with the head: bounds [%d, %d] %v, want [%d, %d]", mint, maxt, ok, first, last)
	}

	// A restart whose WAL and WBL hold nothing: the blocks alone know the
	// data, and the newest sample is the out-of-order one.
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"wal", "wbl"} {
		if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	raw = open()
	if mint, maxt, ok := raw.Bounds(); !ok || mint != first || maxt != ooo {
		t.Errorf("blocks only: bounds [%d, %d] %v, want [%d, %d]", mint, maxt, ok, first, ooo)
	}
}

// rawWALBytes appends series x steps samples (at 1 s, each series' value
// value(series, step)) to a raw tier configured by cfg, checks that every
// sample replays from the WAL after a restart, and returns the WAL's bytes.
func rawWALBytes(t *testing.T, series, steps int, value func(s, step int) float64, cfg func(*tiers.RawConfig)) int64 {
	t.Helper()
	dir := t.TempDir()
	c := tiers.DefaultRawConfig(dir)
	cfg(&c)
	raw, err := tiers.OpenRaw(c, quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for step := range steps {
		app := raw.Appender(context.Background())
		for i := range series {
			ls := labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_TEMP", "Hostname", "node-0042.cluster.example",
				"gpu", strconv.Itoa(i%8), "pod", "vllm-engine-"+strconv.Itoa(i/8))
			if _, err := app.Append(0, ls, testT0+int64(step)*1_000, value(i, step)); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	// Replay: every sample comes back from the WAL.
	raw, err = tiers.OpenRaw(c, quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if got := countRawSamples(t, raw, "DCGM_FI_DEV_GPU_TEMP"); got != series*steps {
		t.Fatalf("%d samples replayed, want %d", got, series*steps)
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	var n int64
	entries, err := os.ReadDir(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}

// countRawSamples counts the float samples of metric name in raw.
func countRawSamples(t *testing.T, raw *tiers.Raw, name string) int {
	t.Helper()
	got := 0
	eachRawSample(t, raw, name, func(int64, float64) { got++ })
	return got
}

// eachRawSample calls fn with every float sample of metric name in raw,
// series by series, each in time order.
func eachRawSample(t *testing.T, raw *tiers.Raw, name string, fn func(ts int64, v float64)) {
	t.Helper()
	q, err := raw.Querier(0, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", name))
	for ss.Next() {
		it := ss.At().Iterator(nil)
		for it.Next() != chunkenc.ValNone {
			fn(it.At())
		}
	}
	if err := errors.Join(ss.Err(), q.Close()); err != nil {
		t.Fatal(err)
	}
}

// TestRawWALCompression: the default configuration compresses the WAL, as
// Prometheus does by default; the same appends take far fewer WAL bytes than
// with WALCompression off, zstd fewer than snappy, and a zstd WAL replays
// every sample after a restart.
func TestRawWALCompression(t *testing.T) {
	const series, steps = 500, 100
	temp := func(s, _ int) float64 { return float64(40 + s%7) }
	walBytes := func(c compression.Type) int64 {
		return rawWALBytes(t, series, steps, temp, func(cfg *tiers.RawConfig) { cfg.WALCompression = c })
	}
	def, off := walBytes(tiers.DefaultRawConfig("").WALCompression), walBytes(compression.None)
	snappy, zstd := walBytes(compression.Snappy), walBytes(compression.Zstd)
	if def*10 > off*8 {
		t.Fatalf("WAL with the default (compressed) configuration: %d bytes, uncompressed %d: want at most 80%%", def, off)
	}
	if zstd >= snappy {
		t.Fatalf("WAL bytes: zstd %d, snappy %d: want zstd smaller", zstd, snappy)
	}
	t.Logf("WAL bytes: %d default, %d snappy, %d zstd, %d uncompressed", def, snappy, zstd, off)
	if _, err := tiers.OpenRaw(tiers.RawConfig{Dir: t.TempDir(), Retention: time.Hour, WALCompression: "lz4"}, quietLogger(), nil); err == nil {
		t.Error("an unknown WAL compression was accepted")
	}
}

// TestRawSampleRecordsV2: the default configuration writes the WAL's samples
// as SamplesV2 records, which take fewer bytes than the original records
// for the same appends (values a GPU exporter sends: whole numbers, and
// power in W with mW resolution) and replay every sample.
func TestRawSampleRecordsV2(t *testing.T) {
	const series, steps = 500, 100
	value := func(s, step int) float64 {
		if s%2 == 0 {
			return float64(40 + (s+step/30)%7)
		}
		return float64(250_000+(s*7919+step*104_729)%50_000) / 1000
	}
	walBytes := func(v2 bool) int64 {
		return rawWALBytes(t, series, steps, value, func(cfg *tiers.RawConfig) { cfg.SampleRecordsV2 = v2 })
	}
	def, v1, v2 := walBytes(tiers.DefaultRawConfig("").SampleRecordsV2), walBytes(false), walBytes(true)
	if def != v2 {
		t.Errorf("WAL bytes: default %d, SamplesV2 %d: want the default to write SamplesV2 records", def, v2)
	}
	if v2*10 > v1*9 {
		t.Fatalf("WAL bytes: SamplesV2 %d, Samples %d: want at most 90%%", v2, v1)
	}
	t.Logf("WAL bytes: %d SamplesV2, %d Samples (%.2fx)", v2, v1, float64(v2)/float64(v1))
}

// TestRawSampleRecordsChange: a raw tier written with the original sample
// records and XOR chunks (WAL, head chunks and a block), then with
// SamplesV2 records and XOR2 chunks, then opened with the original again,
// as upgrading and going back do, reads every sample under either setting.
func TestRawSampleRecordsChange(t *testing.T) {
	dir := t.TempDir()
	const series, perRun = 10, 300 // 300 samples: full chunks, head-chunk files
	ls := func(s int) labels.Labels { return labels.FromStrings("__name__", "m", "s", strconv.Itoa(s)) }
	steps := []bool{false, true, false}
	for i, v2 := range steps {
		cfg := tiers.DefaultRawConfig(dir)
		cfg.Retention = 30 * 24 * time.Hour
		cfg.SampleRecordsV2 = v2
		raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := countRawSamples(t, raw, "m"), i*series*perRun; got != want {
			t.Fatalf("run %d (SamplesV2 %v): %d samples read back, want %d", i, v2, got, want)
		}
		for j := range perRun {
			app := raw.Appender(context.Background())
			for s := range series {
				ts := testT0 + int64(i*perRun+j)*15_000
				if _, err := app.Append(0, ls(s), ts, float64(i*perRun+j)+float64(s)/1000); err != nil {
					t.Fatal(err)
				}
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			// A block of the first run's samples, in XOR chunks.
			if err := raw.DB().CompactHead(tsdb.NewRangeHead(raw.DB().Head(), testT0, testT0+perRun*15_000/2)); err != nil {
				t.Fatal(err)
			}
		}
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, v2 := range []bool{false, true} {
		cfg := tiers.DefaultRawConfig(dir)
		cfg.Retention = 30 * 24 * time.Hour
		cfg.SampleRecordsV2 = v2
		raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if got, want := countRawSamples(t, raw, "m"), len(steps)*series*perRun; got != want {
			t.Errorf("opened with SamplesV2 %v: %d samples, want %d", v2, got, want)
		}
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRawReleaseChunkPages: releasing the head chunk files' page mappings
// leaves every sample readable, and does nothing once the tier is closed.
func TestRawReleaseChunkPages(t *testing.T) {
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	const n = 1000 // chunks are cut every 120 samples
	app := raw.Appender(context.Background())
	for i := range n {
		for s := range 10 {
			if _, err := app.Append(0, labels.FromStrings("__name__", "m", "s", strconv.Itoa(s)), testT0+int64(i)*1000, float64(i*s)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	sum := func() (float64, int) {
		q, err := raw.Querier(testT0, testT0+n*1000)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
		total, count := 0.0, 0
		for ss.Next() {
			it := ss.At().Iterator(nil)
			for it.Next() != 0 {
				_, v := it.At()
				total += v
				count++
			}
		}
		if ss.Err() != nil {
			t.Fatal(ss.Err())
		}
		return total, count
	}
	raw.DB().ForceHeadMMap() // cut chunks go to chunks_head/ (the TSDB does it every minute)
	want, wantN := sum()
	released, err := raw.ReleaseChunkPages()
	if err != nil {
		t.Fatal(err)
	}
	if released == 0 && runtime.GOOS == "linux" {
		t.Error("no chunk file mapping released")
	}
	if got, gotN := sum(); got != want || gotN != wantN || wantN != 10*n {
		t.Errorf("after release: %d samples summing to %g, want %d summing to %g (%d appended)", gotN, got, wantN, want, 10*n)
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	if released, err := raw.ReleaseChunkPages(); released != 0 || err != nil {
		t.Errorf("after Close: released %d (%v)", released, err)
	}
}

// TestRawChunkMmapInterval: the head moves its full chunks out of the Go
// heap into its chunk files at the configured interval, not the TSDB's
// minute: at a high sample rate a minute of full chunks was the largest
// item of the heap. (The interval is the TSDB's smallest, 1 s; the wait is
// bounded at 20 s, where a minute's timer would not have fired.)
func TestRawChunkMmapInterval(t *testing.T) {
	cfg := tiers.DefaultRawConfig(t.TempDir())
	if cfg.ChunkMmapInterval <= 0 || cfg.ChunkMmapInterval >= time.Minute {
		t.Fatalf("default ChunkMmapInterval %s; want under the TSDB's minute", cfg.ChunkMmapInterval)
	}
	cfg.ChunkMmapInterval = time.Second
	reg := prometheus.NewRegistry()
	raw, err := tiers.OpenRaw(cfg, quietLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	app := raw.Appender(context.Background())
	for i := range 1000 { // chunks are cut every 120 samples
		if _, err := app.Append(0, labels.FromStrings("__name__", "m"), testT0+int64(i)*1000, float64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	mmapped := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "prometheus_tsdb_mmap_chunks_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	deadline := time.Now().Add(20 * time.Second)
	for mmapped() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no full chunk written to the chunk files within 20 s at a 1 s interval")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRawWALCompressionChange: a WAL written partly with snappy and partly
// with zstd (the compression changed between two runs, as upgrading to the
// zstd default does) replays every sample under either setting.
func TestRawWALCompressionChange(t *testing.T) {
	dir := t.TempDir()
	ls := labels.FromStrings("__name__", "m", "s", "1")
	steps := []compression.Type{compression.Snappy, compression.Zstd}
	for i, c := range steps {
		cfg := tiers.DefaultRawConfig(dir)
		cfg.WALCompression = c
		raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		app := raw.Appender(context.Background())
		for j := range 100 {
			if _, err := app.Append(0, ls, testT0+int64(i*100+j)*1000, float64(i*100+j)); err != nil {
				t.Fatal(err)
			}
		}
		if err := errors.Join(app.Commit(), raw.Close()); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range steps {
		cfg := tiers.DefaultRawConfig(dir)
		cfg.WALCompression = c
		raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		q, err := raw.Querier(testT0, testT0+1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		var got []float64
		ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
		for ss.Next() {
			it := ss.At().Iterator(nil)
			for it.Next() != chunkenc.ValNone {
				_, v := it.At()
				got = append(got, v)
			}
		}
		if err := errors.Join(ss.Err(), q.Close(), raw.Close()); err != nil {
			t.Fatal(err)
		}
		if len(got) != 200 || got[0] != 0 || got[199] != 199 {
			t.Fatalf("replayed under %s: %d samples (%v...), want 0..199", c, len(got), got[:min(3, len(got))])
		}
	}
}

// TestRawChunksForRemoteRead: the raw tier's own chunks are XOR2 by
// default, and the stitched view (what strata serve's remote read and
// StoreAPI answer from) hands out XOR chunks of the same samples, which
// every remote-read client decodes, not only those that know XOR2.
func TestRawChunksForRemoteRead(t *testing.T) {
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	const n = 300
	app := raw.Appender(context.Background())
	for i := range n {
		if _, err := app.Append(0, labels.FromStrings("__name__", "m"), testT0+int64(i)*15_000, float64(i)/3); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	encodings := func(q storage.ChunkQueryable) (map[chunkenc.Encoding]int, int) {
		cq, err := q.ChunkQuerier(testT0, testT0+n*15_000)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cq.Close() }()
		got, samples := map[chunkenc.Encoding]int{}, 0
		ss := cq.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
		for ss.Next() {
			it := ss.At().Iterator(nil)
			for it.Next() {
				got[it.At().Chunk.Encoding()]++
				samples += it.At().Chunk.NumSamples()
			}
		}
		if err := ss.Err(); err != nil {
			t.Fatal(err)
		}
		return got, samples
	}
	if got, samples := encodings(raw); got[chunkenc.EncXOR2] == 0 || len(got) != 1 || samples != n {
		t.Errorf("raw tier chunks: %v, %d samples; want XOR2 only, %d samples", got, samples, n)
	}
	if got, samples := encodings(tiers.NewStitched(raw, nil, nil)); got[chunkenc.EncXOR] == 0 || len(got) != 1 || samples != n {
		t.Errorf("stitched view chunks: %v, %d samples; want XOR only, %d samples", got, samples, n)
	}
}

// TestRawCompactionToggleLogs: the TSDB logs every toggle of its
// compactions at info level, and ReleaseChunkPages toggles them each time
// it runs (up to every 10 ms in strata serve); the raw tier drops those
// lines at every level,
// and only those.
func TestRawCompactionToggleLogs(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		cfg := tiers.DefaultRawConfig(t.TempDir())
		raw, err := tiers.OpenRaw(cfg, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level})), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		raw.DB().DisableCompactions()
		raw.DB().EnableCompactions()
		if _, err := raw.ReleaseChunkPages(); err != nil {
			t.Fatal(err)
		}
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if strings.Contains(out, `msg="Compactions`) {
			t.Errorf("at level %v the log has compaction toggles:\n%s", level, out)
		}
		if !strings.Contains(out, "level=INFO") || !strings.Contains(out, "tier=raw") {
			t.Errorf("at level %v the raw tier's other info lines are gone too:\n%s", level, out)
		}
	}
}

// BenchmarkRawReleaseChunkPages is the fixed cost of one release (the
// pages it drops cost what the reads mapped, whenever it runs): reading
// /proc/self/maps, advising the chunk files' ranges, holding compactions
// off. strata serve pays it when its mapped.Trigger fires (cmd/strata,
// chunkPageReleaseGrowth).
func BenchmarkRawReleaseChunkPages(b *testing.B) {
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	app := raw.Appender(context.Background())
	for i := range 600 { // five chunks a series
		for s := range 1000 {
			if _, err := app.Append(0, labels.FromStrings("__name__", "m", "s", strconv.Itoa(s)), testT0+int64(i)*1000, float64(i*s)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
	raw.DB().ForceHeadMMap()
	b.ResetTimer()
	for b.Loop() {
		if _, err := raw.ReleaseChunkPages(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawReleaseChunkPagesBlocks is the same fixed cost with a day of
// blocks behind the head (what a raw tier holds at its retention: blocks
// of an hour merged three at a time), whose chunk and index files a
// release advises too, a block reader held on each.
func BenchmarkRawReleaseChunkPagesBlocks(b *testing.B) {
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	app := raw.Appender(context.Background())
	for ts := testT0; ts < testT0+25*3_600_000; ts += 60_000 {
		for s := range 1000 {
			if _, err := app.Append(0, labels.FromStrings("__name__", "m", "s", strconv.Itoa(s)), ts, float64(s)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
	raw.DB().ForceHeadMMap()
	if err := raw.DB().Compact(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := raw.ReleaseChunkPages(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(raw.DB().Blocks())), "blocks")
}

// BenchmarkReleaseUnderReads measures how many bytes of the head's chunk
// file reads keep mapped (above the process' file-backed resident set
// before them) while a mapped.Trigger releases them as strata serve does:
// 100,000 series have each just cut a chunk of random values (about 84 MiB
// of chunk file, as every series cuts one at the raw tier's block
// boundary), and a reader reads the series' last two minutes in passes
// every 3 s, as the canonical rules do every 15 s. The reader is a loop
// that reads every series as the querier hands it out, in passes spread
// over about 1.5 s (reader=paced); PromQL's engine evaluating rate(m[2m])
// over every series (reader=engine); or rate() over a tenth of them,
// spread across the file, as a rule reads one metric of many
// (reader=sparse). Each iteration is a 6-second window; MiB-mapped-max is
// the most seen, sampled every 2 ms. The fixed 15 s period keeps the whole
// file mapped; no poll bounds the sparse reader, each of whose reads maps
// a whole large folio of the page cache (docs/bench.md, stop 65).
func BenchmarkReleaseUnderReads(b *testing.B) {
	if !mapped.Supported {
		b.Skip("no page release on this platform")
	}
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	const n = 100_000
	rng := rand.New(rand.NewPCG(1, 2))
	ls := make([]labels.Labels, n)
	for s := range ls {
		ls[s] = labels.FromStrings("__name__", "m", "s", strconv.Itoa(s))
	}
	const samples = 125 // one chunk cut (120) and the head chunk's first
	for i := range samples {
		app := raw.Appender(context.Background())
		for _, l := range ls {
			if _, err := app.Append(0, l, testT0+int64(i)*15000, rng.Float64()); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	raw.DB().ForceHeadMMap()
	end := testT0 + (samples-1)*15000
	paced := func(ctx context.Context) {
		q, err := raw.Querier(end-2*60000, end)
		if err != nil {
			b.Error(err)
			return
		}
		defer q.Close()
		ss := q.Select(ctx, false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
		for k := 0; ss.Next(); k++ {
			if k%2000 == 0 {
				time.Sleep(30 * time.Millisecond)
			}
			it := ss.At().Iterator(nil)
			for it.Next() != 0 {
			}
		}
	}
	ng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e9, Timeout: time.Minute})
	evaluate := func(expr string) func(context.Context) {
		return func(ctx context.Context) {
			q, err := ng.NewInstantQuery(ctx, raw, nil, expr, time.UnixMilli(end))
			if err != nil {
				b.Error(err)
				return
			}
			defer q.Close()
			if res := q.Exec(ctx); res.Err != nil && ctx.Err() == nil {
				b.Error(res.Err)
			}
		}
	}
	for _, reader := range []struct {
		name string
		read func(context.Context)
	}{{"paced", paced}, {"engine", evaluate("rate(m[2m])")}, {"sparse", evaluate(`rate(m{s=~".*7"}[2m])`)}} {
		for _, c := range []struct {
			name string
			tr   mapped.Trigger
		}{
			{"period=15s", mapped.Trigger{Every: 15 * time.Second, Poll: 100 * time.Millisecond}},
			{"poll=100ms", mapped.Trigger{Grow: 8 << 20, Every: 15 * time.Second, Poll: 100 * time.Millisecond}},
			{"poll=100ms,burst=10ms", mapped.Trigger{Grow: 8 << 20, Every: 15 * time.Second, Poll: 100 * time.Millisecond, BurstPoll: 10 * time.Millisecond, Burst: 2 * time.Second}},
		} {
			b.Run("reader="+reader.name+"/"+c.name, func(b *testing.B) {
				var most, releases int64
				for b.Loop() {
					if _, err := raw.ReleaseChunkPages(); err != nil {
						b.Fatal(err)
					}
					base, err := mapped.SharedResident()
					if err != nil {
						b.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
					var wg sync.WaitGroup
					wg.Go(func() {
						for ctx.Err() == nil {
							pass := time.Now()
							reader.read(ctx)
							time.Sleep(3*time.Second - time.Since(pass))
						}
					})
					wg.Go(func() {
						for ctx.Err() == nil {
							if cur, err := mapped.SharedResident(); err == nil {
								most = max(most, cur-base)
							}
							time.Sleep(2 * time.Millisecond)
						}
					})
					tr := c.tr
					wg.Go(func() {
						tr.Run(ctx, func() {
							if _, err := raw.ReleaseChunkPages(); err != nil {
								b.Error(err)
							}
							releases++
						})
					})
					wg.Wait()
					cancel()
				}
				b.ReportMetric(float64(most)/(1<<20), "MiB-mapped-max")
				b.ReportMetric(float64(releases)/float64(b.N), "releases/op")
			})
		}
	}
}
