package tiers_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/query"
	"github.com/strata-dev/strata/tiers"
)

// fleetSeries is one series of the GPU-fleet mix used for size figures: 60 %
// DCGM-like gauges (slow integers, noisy floats), 40 % vLLM-like counters
// and classic-histogram buckets, with realistic label sets.
type fleetSeries struct {
	lbls labels.Labels
	kind int // 0 slow int gauge, 1 noisy float gauge, 2 counter, 3 float counter (histogram _sum)
	rng  *rand.Rand
	v    float64
	inc  int
}

func fleetMix(n int) []*fleetSeries {
	out := make([]*fleetSeries, n)
	dcgm := n * 6 / 10
	dcgmNames := []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_MEM_COPY_UTIL"}
	dcgmKind := []int{0, 1, 1, 0, 0, 0}
	les := []string{"0.3", "0.5", "0.8", "1", "1.5", "2", "2.5", "5", "10", "15", "20", "+Inf"}
	for i := range out {
		s := &fleetSeries{rng: rand.New(rand.NewPCG(uint64(i), 7))} //nolint:gosec // deterministic test data
		if i < dcgm {
			gpu, m := i/6, i%6
			node := gpu / 8
			s.lbls = labels.FromStrings("__name__", dcgmNames[m], "gpu", fmt.Sprint(gpu%8), "UUID", fmt.Sprintf("GPU-%08x-1c2d-4e5f-a6b7-%012x", gpu*2654435761, gpu),
				"Hostname", fmt.Sprintf("gpu-node-%03d", node), "instance", fmt.Sprintf("10.0.%d.%d:9400", node/250, node%250), "job", "dcgm-exporter",
				"modelName", "NVIDIA H100 80GB HBM3", "device", fmt.Sprintf("nvidia%d", gpu%8), "pci_bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+gpu%8))
			s.kind = dcgmKind[m]
			s.v = float64(s.rng.IntN(80)) + 10
			if m == 4 {
				s.v = 40000 + float64(s.rng.IntN(30000))
			}
			s.inc = m
		} else {
			j := i - dcgm
			inst, m := j/16, j%16
			base := []string{"model_name", "meta-llama/Llama-3.1-70B-Instruct", "engine", "0", "instance", fmt.Sprintf("10.1.%d.%d:8000", inst/250, inst%250), "job", "vllm"}
			switch {
			case m < 12:
				s.lbls = labels.FromStrings(append([]string{"__name__", "vllm:e2e_request_latency_seconds_bucket", "le", les[m]}, base...)...)
				s.kind, s.inc = 2, 2+m
			case m == 12:
				s.lbls = labels.FromStrings(append([]string{"__name__", "vllm:e2e_request_latency_seconds_sum"}, base...)...)
				s.kind = 3
			case m == 13:
				s.lbls = labels.FromStrings(append([]string{"__name__", "vllm:e2e_request_latency_seconds_count"}, base...)...)
				s.kind, s.inc = 2, 14
			case m == 14:
				s.lbls = labels.FromStrings(append([]string{"__name__", "vllm:request_success_total"}, base...)...)
				s.kind, s.inc = 2, 14
			default:
				s.lbls = labels.FromStrings(append([]string{"__name__", "vllm:generation_tokens_total"}, base...)...)
				s.kind, s.inc = 2, 4000
			}
		}
		out[i] = s
	}
	return out
}

// next advances the series by one sampling interval of step seconds.
func (s *fleetSeries) next(step float64) float64 {
	switch s.kind {
	case 0: // integer gauge that moves now and then
		if s.rng.Float64() < 0.05*step {
			s.v = max(0, s.v+float64(s.rng.IntN(7)-3))
		}
	case 1: // noisy float: power in W with mW resolution, SM activity ratio
		if s.inc == 2 {
			s.v = math.Round(s.rng.Float64()*1e6) / 1e6
		} else {
			s.v = math.Round((350+40*s.rng.NormFloat64())*1000) / 1000
		}
	case 2:
		if s.rng.Float64() < 1e-5*step {
			s.v = 0 // a restart
		}
		s.v += float64(s.rng.IntN(s.inc*int(step) + 1))
	case 3:
		s.v += s.rng.ExpFloat64() * step
	}
	return s.v
}

// TestRollupSizeRatios measures bytes per raw sample of raw TSDB blocks and
// of minute and hour Parquet files for the same 2,000-series fleet mix at 1 s
// and 15 s sampling, and logs where the bytes of each file go, per column. It
// asserts the targets of issue 3: at 1 s minute <= raw/8 and hour <=
// raw/300; at 15 s minute <= raw and hour <= raw/50. The windows are made as
// the pipeline makes them, each series typed by the metric catalogue: the
// DCGM series are catalogue gauges, whose windows record no resets, which is
// what brings the 15 s hour file under raw/50 (its noisy gauges' doubles do
// not compress). The figures and the analysis are in docs/format/minute.md.
func TestRollupSizeRatios(t *testing.T) {
	if testing.Short() {
		t.Skip("generates tens of millions of samples")
	}
	const nSeries = 2000
	cases := []struct {
		name           string
		step           time.Duration
		rawHours       int
		maxMin, maxHou float64 // the targets, asserted: bytes per raw sample as ratios to raw's
	}{
		{"1s", time.Second, 2, 1.0 / 8, 1.0 / 300},
		{"15s", 15 * time.Second, 6, 1, 1.0 / 50},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stepMs := tc.step.Milliseconds()
			rawEnd := testT0 + int64(tc.rawHours)*hourMs
			// Raw: append the first rawHours in time order, then cut a block.
			// The targets are ratios to Prometheus' own blocks (XOR chunks):
			// the raw tier's XOR2 chunks were 0.98x their bytes here.
			cfg := tiers.DefaultRawConfig(t.TempDir())
			cfg.Retention = 30 * 24 * time.Hour
			cfg.SampleRecordsV2 = false
			raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = raw.Close() }()
			gens := fleetMix(nSeries)
			var rawSamples int64
			for ts := testT0; ts < rawEnd; ts += stepMs {
				app := raw.Appender(context.Background())
				for _, g := range gens {
					if _, err := app.Append(0, g.lbls, ts, g.next(tc.step.Seconds())); err != nil {
						t.Fatal(err)
					}
					rawSamples++
				}
				if err := app.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			if err := raw.DB().CompactHead(tsdb.NewRangeHead(raw.DB().Head(), testT0, rawEnd-1)); err != nil {
				t.Fatal(err)
			}
			var rawBytes int64
			for _, b := range raw.DB().Blocks() {
				rawBytes += dirBytes(t, b.Dir())
			}
			// Rollups: the same generators, replayed per series over a whole
			// day; minute partitions for the raw hours, one hour partition
			// for the day.
			minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
			hour := openTestRollup(t, tiers.DefaultHourConfig(t.TempDir()), nil)
			minuteParts := make([][]tiers.SeriesWindows, tc.rawHours)
			var hourSeries []tiers.SeriesWindows
			gens = fleetMix(nSeries)
			buf := make([]chunks.Sample, 0, dayMs/stepMs)
			for _, g := range gens {
				buf = buf[:0]
				for ts := testT0; ts < testT0+dayMs; ts += stepMs {
					buf = append(buf, sample{ts, g.next(tc.step.Seconds())})
				}
				mws, _, err := downsample.AppendWindows(nil, storage.NewListSeries(g.lbls, buf).Iterator(nil), downsample.MinuteRes, testT0, testT0+dayMs, catalogueKind(t, g.lbls))
				if err != nil {
					t.Fatal(err)
				}
				for h := range minuteParts {
					lo := h * 60
					minuteParts[h] = append(minuteParts[h], tiers.SeriesWindows{Labels: g.lbls, Windows: mws[lo : lo+60]})
				}
				hourSeries = append(hourSeries, tiers.SeriesWindows{Labels: g.lbls, Windows: downsample.Coarsen(nil, mws, downsample.HourRes, catalogueKind(t, g.lbls))})
			}
			t0 := time.Now()
			for h, p := range minuteParts {
				if err := minute.WritePartition(testT0+int64(h)*hourMs, p); err != nil {
					t.Fatal(err)
				}
			}
			minuteWrite := time.Since(t0)
			t0 = time.Now()
			if err := hour.WritePartition(testT0, hourSeries); err != nil {
				t.Fatal(err)
			}
			hourWrite := time.Since(t0)
			var minuteBytes int64
			for _, p := range minute.Partitions() {
				minuteBytes += p.Bytes
			}
			hourBytes := hour.Partitions()[0].Bytes
			daySamples := int64(nSeries) * (dayMs / stepMs)
			rawBPS := float64(rawBytes) / float64(rawSamples)
			minBPS := float64(minuteBytes) / float64(rawSamples)
			hourBPS := float64(hourBytes) / float64(daySamples)
			t.Logf("%s sampling, %d series: raw %.3f B/sample (%d samples, %d B); minute %.4f B/raw sample = %.3fx raw = 1/%.2f of raw (%d B for %d h); hour %.5f B/raw sample = 1/%.1f of raw (%d B for 24 h)",
				tc.name, nSeries, rawBPS, rawSamples, rawBytes, minBPS, minBPS/rawBPS, rawBPS/minBPS, minuteBytes, tc.rawHours, hourBPS, rawBPS/hourBPS, hourBytes)
			t.Logf("%s write time (WritePartition, incl. fsync): minute %v for %d files (%v per file), hour %v", tc.name, minuteWrite.Round(time.Millisecond), tc.rawHours, (minuteWrite / time.Duration(tc.rawHours)).Round(time.Millisecond), hourWrite.Round(time.Millisecond))
			logColumnBytes(t, tc.name+" minute (first file)", minute.Partitions()[0].Path)
			logColumnBytes(t, tc.name+" hour", hour.Partitions()[0].Path)
			if minBPS > rawBPS*tc.maxMin {
				t.Errorf("minute tier %.4f B/sample = %.3fx raw exceeds the target %.3fx", minBPS, minBPS/rawBPS, tc.maxMin)
			}
			if hourBPS > rawBPS*tc.maxHou {
				t.Errorf("hour tier %.5f B/sample = 1/%.1f of raw exceeds the target 1/%.0f", hourBPS, rawBPS/hourBPS, 1/tc.maxHou)
			}
		})
	}
}

// logColumnBytes logs where the bytes of one Parquet file go: the compressed
// size of each column (dictionary and data pages with their headers, summed
// over row groups, from the file's metadata) and what is outside the column
// chunks (page index, bloom filter, footer).
func logColumnBytes(t testing.TB, what, path string) {
	t.Helper()
	f, err := os.Open(path) //nolint:gosec // a test's own temp file
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	type col struct {
		name  string
		bytes int64
		enc   []string
	}
	var cols []col
	idx := map[string]int{}
	var inChunks int64
	for _, rg := range pf.Metadata().RowGroups {
		for _, c := range rg.Columns {
			name := strings.Join(c.MetaData.PathInSchema, ".")
			i, ok := idx[name]
			if !ok {
				i = len(cols)
				idx[name] = i
				cols = append(cols, col{name: name})
				for _, e := range c.MetaData.Encoding {
					cols[i].enc = append(cols[i].enc, e.String())
				}
			}
			cols[i].bytes += c.MetaData.TotalCompressedSize
			inChunks += c.MetaData.TotalCompressedSize
		}
	}
	rows := pf.NumRows()
	slices.SortStableFunc(cols, func(a, b col) int { return int(b.bytes - a.bytes) })
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d B, %d rows, %d row groups, %.2f B/row; per column (compressed B, B/row, encodings):", what, st.Size(), rows, len(pf.RowGroups()), float64(st.Size())/float64(rows))
	for _, c := range cols {
		fmt.Fprintf(&sb, "\n    %-12s %9d %7.3f  %s", c.name, c.bytes, float64(c.bytes)/float64(rows), strings.Join(c.enc, ","))
	}
	fmt.Fprintf(&sb, "\n    %-12s %9d %7.3f", "(page index, bloom filter, footer)", st.Size()-inChunks, float64(st.Size()-inChunks)/float64(rows))
	t.Log(sb.String())
}

func dirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writeSyntheticTier fills a rollup tier with nSeries gauge series of windows
// for days days (one window per resolution step), straight from a formula:
// the query benchmarks measure reading and PromQL, not the rollup pipeline.
// The values are full-precision sines (the worst case for compression), or
// with integers whole percentages, which is what DCGM reports for
// DCGM_FI_DEV_GPU_UTIL.
func writeSyntheticTier(b *testing.B, r *tiers.Rollup, nSeries, days int, integers bool) {
	b.Helper()
	cfg := r.Config()
	res, plen := cfg.Resolution.Milliseconds(), cfg.PartitionLength.Milliseconds()
	lbls := make([]labels.Labels, nSeries)
	for i := range lbls {
		lbls[i] = labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "gpu", fmt.Sprint(i%8), "Hostname", fmt.Sprintf("gpu-node-%03d", i/8), "job", "dcgm-exporter")
	}
	for p := testT0; p < testT0+int64(days)*dayMs; p += plen {
		series := make([]tiers.SeriesWindows, nSeries)
		for i := range series {
			ws := make([]tiers.Window, 0, plen/res)
			for s := p; s < p+plen; s += res {
				v := 50 + 40*math.Sin(float64(s)/3.6e6+float64(i))
				if integers {
					v = math.Round(v)
				}
				ws = append(ws, tiers.Window{Start: s, FirstT: s, LastT: s + res - 1000, Count: uint32(res / 1000), Sum: v * float64(res/1000), Min: v - 5, Max: v + 5, First: v - 1, Last: v})
			}
			series[i] = tiers.SeriesWindows{Labels: lbls[i], Windows: ws}
		}
		if err := r.WritePartition(p, series); err != nil {
			b.Fatal(err)
		}
	}
}

// benchmarkRangeQuery runs qs through the engine `strata serve` answers
// with (query.New's: long range queries split over GOMAXPROCS parts) and,
// as engine=single, through Prometheus' engine alone.
func benchmarkRangeQuery(b *testing.B, s *tiers.Stitched, qs string, start, end int64, step time.Duration, wantSeries int) {
	b.Helper()
	api, err := query.New(query.DefaultConfig(), s, nil, quietLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = api.Close() }()
	// One query first, untimed, as a dashboard's earlier refresh: the
	// partitions' footers are then cached (both engines read through the
	// same tiers), so that neither engine's figure includes opening them.
	runRangeQuery(b, newTestEngine(), s, qs, start, end, step, wantSeries)
	for _, e := range []struct {
		name   string
		engine promql.QueryEngine
	}{{"split", api.Engine()}, {"single", newTestEngine()}} {
		b.Run("engine="+e.name, func(b *testing.B) { benchmarkEngine(b, e.engine, s, qs, start, end, step, wantSeries) })
	}
}

func benchmarkEngine(b *testing.B, engine promql.QueryEngine, s *tiers.Stitched, qs string, start, end int64, step time.Duration, wantSeries int) {
	b.ReportAllocs()
	// CPU time (all goroutines, from getrusage) besides wall time: on a
	// shared machine wall time includes waiting for a core.
	cpu0 := processCPU(b)
	for b.Loop() {
		runRangeQuery(b, engine, s, qs, start, end, step, wantSeries)
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

func runRangeQuery(b *testing.B, engine promql.QueryEngine, s *tiers.Stitched, qs string, start, end int64, step time.Duration, wantSeries int) {
	b.Helper()
	qry, err := engine.NewRangeQuery(context.Background(), s, nil, qs, time.UnixMilli(start), time.UnixMilli(end), step)
	if err != nil {
		b.Fatal(err)
	}
	defer qry.Close()
	res := qry.Exec(context.Background())
	if res.Err != nil {
		b.Fatal(res.Err)
	}
	m, err := res.Matrix()
	if err != nil {
		b.Fatal(err)
	}
	if len(m) != wantSeries || len(m[0].Floats) == 0 {
		b.Fatalf("got %d series", len(m))
	}
}

func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkQueryMinuteTier30d: a 30-day range query at a 5 m step over 1,000
// series served by the minute tier (720 hourly partition files), with
// full-precision values (the worst case) and with integer percentages.
func BenchmarkQueryMinuteTier30d(b *testing.B) {
	for _, integers := range []bool{false, true} {
		b.Run(map[bool]string{false: "values=sines", true: "values=integers"}[integers], func(b *testing.B) {
			minute := openTestRollup(b, tiers.DefaultMinuteConfig(b.TempDir()), nil)
			writeSyntheticTier(b, minute, 1000, 30, integers)
			s := tiers.NewStitched(nil, minute, nil)
			benchmarkRangeQuery(b, s, `DCGM_FI_DEV_GPU_UTIL`, testT0+5*minMs, testT0+30*dayMs, 5*time.Minute, 1000)
		})
	}
}

// BenchmarkQueryHourTier365d: a 365-day range query at a 1 h step over 1,000
// series served by the hour tier (365 daily partition files).
func BenchmarkQueryHourTier365d(b *testing.B) {
	hour := openTestRollup(b, tiers.DefaultHourConfig(b.TempDir()), nil)
	writeSyntheticTier(b, hour, 1000, 365, false)
	s := tiers.NewStitched(nil, nil, hour)
	benchmarkRangeQuery(b, s, `DCGM_FI_DEV_GPU_UTIL`, testT0+hourMs, testT0+365*dayMs, time.Hour, 1000)
}

// BenchmarkQueryHourTierMaxOverTime30d: max_over_time over a 1 h range at
// 1 h steps for 30 days of 1,000 series in the hour tier, whose windows'
// first samples lie on their starts (clock-aligned scrapes).
func BenchmarkQueryHourTierMaxOverTime30d(b *testing.B) {
	hour := openTestRollup(b, tiers.DefaultHourConfig(b.TempDir()), nil)
	writeSyntheticTier(b, hour, 1000, 30, false)
	s := tiers.NewStitched(nil, nil, hour)
	benchmarkRangeQuery(b, s, `max_over_time(DCGM_FI_DEV_GPU_UTIL[1h])`, testT0+hourMs, testT0+30*dayMs, time.Hour, 1000)
}

// BenchmarkRollupSelectHourPartition: decoding one day of hour windows for 2,000 series.
func BenchmarkRollupSelectHourPartition(b *testing.B) {
	hour := openTestRollup(b, tiers.DefaultHourConfig(b.TempDir()), nil)
	writeSyntheticTier(b, hour, 2000, 1, false)
	b.ReportAllocs()
	for b.Loop() {
		got, err := hour.Select(context.Background(), testT0, testT0+dayMs)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != 2000 {
			b.Fatalf("got %d series", len(got))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(2000*24), "ns/window")
}

// BenchmarkQueryRawTierDay is what the rollup tiers' 30-day and 365-day
// queries stand against: the same selector answered by Prometheus' engine
// (one goroutine, as Prometheus evaluates a range query) over raw
// per-second samples in a TSDB block, one day of 100 series. A plain
// selector's cost is one Seek per series and step, each decoding up to one
// chunk, so it is linear in series x days at a fixed step: the benchmark
// reports that cost scaled to the rollup benchmarks' 1,000 series over 30
// days at a 5 m step (raw-30d-s/op) and over 365 days at a 1 h step
// (raw-365d-s/op), which is what Prometheus would take over raw data of
// the same range.
func BenchmarkQueryRawTierDay(b *testing.B) {
	const nSeries, scaleSeries = 100, 1000
	dir := b.TempDir()
	w, err := tsdb.NewBlockWriter(quietLogger(), dir, 2*dayMs)
	if err != nil {
		b.Fatal(err)
	}
	app := w.Appender(context.Background())
	for i := range nSeries {
		l := labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "gpu", fmt.Sprint(i%8), "Hostname", fmt.Sprintf("gpu-node-%03d", i/8), "job", "dcgm-exporter")
		var ref storage.SeriesRef
		for t := testT0; t < testT0+dayMs; t += 1000 {
			if ref, err = app.Append(ref, l, t, 50+40*math.Sin(float64(t)/3.6e6+float64(i))); err != nil {
				b.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil { // one series per commit keeps the appender's buffer small
			b.Fatal(err)
		}
		app = w.Appender(context.Background())
	}
	if _, err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	db, err := tsdb.OpenDBReadOnly(dir, "", quietLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	q := storage.QueryableFunc(func(mint, maxt int64) (storage.Querier, error) { return db.Querier(mint, maxt) })
	for _, c := range []struct {
		name   string
		step   time.Duration
		days   int
		metric string
	}{{"step=5m", 5 * time.Minute, 30, "raw-30d-s/op"}, {"step=1h", time.Hour, 365, "raw-365d-s/op"}} {
		b.Run(c.name, func(b *testing.B) {
			engine := newTestEngine()
			start, end := testT0+c.step.Milliseconds(), testT0+dayMs-1000
			cpu0 := processCPU(b)
			for b.Loop() {
				qry, err := engine.NewRangeQuery(context.Background(), q, nil, `DCGM_FI_DEV_GPU_UTIL`, time.UnixMilli(start), time.UnixMilli(end), c.step)
				if err != nil {
					b.Fatal(err)
				}
				res := qry.Exec(context.Background())
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				if m, err := res.Matrix(); err != nil || len(m) != nSeries {
					b.Fatalf("got %d series, err %v", len(m), err)
				}
				qry.Close()
			}
			perOp := b.Elapsed().Seconds() / float64(b.N)
			cpuPerOp := (processCPU(b) - cpu0).Seconds() / float64(b.N)
			scale := float64(scaleSeries) / nSeries * float64(c.days)
			b.ReportMetric(perOp*scale, c.metric)
			b.ReportMetric(cpuPerOp*scale, "cpu-"+c.metric)
		})
	}
}
