package diagnose

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/tiers"
)

// fleetSignals is one minute of n tracked signal series shaped like the
// canonical vLLM signals of a fleet (a pod per GPU, 64 pods per model),
// spread over four signals.
func fleetSignals(n int, ts int64) map[string][]sampleAt { return fleetSignalsOf(n, 64, ts) }

// fleetSignalsOf is fleetSignals with perModel pods per model.
func fleetSignalsOf(n, perModel int, ts int64) map[string][]sampleAt {
	names := []string{"strata:requests_running", "strata:requests_waiting", "strata:kv_cache_usage:ratio", "strata:ttft_seconds:p99"}
	vals := map[string][]sampleAt{}
	for i := range n {
		name := names[i%len(names)]
		pod := i / len(names)
		l := labels.FromStrings(model.MetricNameLabel, name, "instance", "10.0."+strconv.Itoa(pod/250)+"."+strconv.Itoa(pod%250)+":8000",
			"model_name", "model-"+strconv.Itoa(pod/perModel), "namespace", "inference", "pod", "vllm-"+strconv.Itoa(pod), "strata_cause", "serving")
		vals[name] = append(vals[name], sampleAt{l, diurnal(ts, 10, uint64(i))})
	}
	return vals
}

func heapLive() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkTrackerSeriesBytes is the heap the baseline tracker and its
// scratch series hold per tracked series: after its first minute
// (first-B/series), and after 61 minutes (hour-B/series: a finished hour's
// summary, the new hour's baseline, the scratch's kept samples); and per
// tracked series that has no baseline at its first minute (a model with
// two replicas, no history: none-B/series). The signal labels are the
// caller's (the scratch store's) and are not counted.
func BenchmarkTrackerSeriesBytes(b *testing.B) {
	const n = 10_000
	cfg := DefaultBaselineConfig()
	var first, hour, none float64
	for b.Loop() {
		b.StopTimer()
		pairs := fleetSignalsOf(n, 2, tStart)
		b.StartTimer()
		before := heapLive()
		tr := fileTracker(b, cfg)
		sc := newScratch()
		tr.minute(tStart, pairs, sc)
		none = float64(heapLive()-before) / n
		runtime.KeepAlive(tr)
		runtime.KeepAlive(sc)
		runtime.KeepAlive(pairs)
		b.StopTimer()
		minutes := make([]map[string][]sampleAt, 61)
		for i := range minutes {
			minutes[i] = fleetSignals(n, tStart+int64(i)*minute.Milliseconds())
		}
		// What the default pack keeps of each (TestScratchKeepDefaultPack),
		// truncated every minute as the engine does.
		keep := map[string]int64{BaselineMedianSeries: 6 * minute.Milliseconds(), BaselineSigmaSeries: 6 * minute.Milliseconds(),
			AnomalyZScoreSeries: 9 * minute.Milliseconds(), BaselineKSeries: 6 * minute.Milliseconds()}
		b.StartTimer()
		before = heapLive()
		tr = fileTracker(b, cfg)
		sc = newScratch()
		for i, vals := range minutes {
			ts := tStart + int64(i)*minute.Milliseconds()
			tr.minute(ts, vals, sc)
			sc.truncateBy(func(name string) int64 { return ts - keep[name] })
			if i == 0 {
				first = float64(heapLive()-before) / n
			}
		}
		hour = float64(heapLive()-before) / n
		runtime.KeepAlive(tr)
		runtime.KeepAlive(sc)
		runtime.KeepAlive(minutes)
	}
	b.ReportMetric(first, "first-B/series")
	b.ReportMetric(hour, "hour-B/series")
	b.ReportMetric(none, "none-B/series")
}

// BenchmarkTrackerFourWeeks is the heap the baseline tracker holds per
// tracked series once it has seen every minute of 30 days (4w-B/series:
// the hourly summaries' ring at its full length, the seasonal baselines,
// this hour's minute values, the state), and the process' CPU per minute
// over those days (cpu-ns/minute: the minute's values made, every series
// observed, and at each hour's first minute the summaries written and the
// baselines read from the ring). The signal labels are the caller's and
// are not counted. ring=file keeps the rings' pages in a ring file, as the
// engine does (4w-file-B/series: the file's bytes, in the page cache, not
// the heap), ring=heap on the heap.
func BenchmarkTrackerFourWeeks(b *testing.B) {
	for _, where := range []string{"heap", "file"} {
		b.Run("ring="+where, func(b *testing.B) { benchTrackerFourWeeks(b, where == "file") })
	}
}

func benchTrackerFourWeeks(b *testing.B, ringFile bool) {
	const n = 1_000
	const minutes = 30 * 24 * 60
	cfg := DefaultBaselineConfig()
	vals := fleetSignals(n, tStart)
	seeds := map[string][]uint64{}
	for name, list := range vals {
		for _, sa := range list {
			seeds[name] = append(seeds[name], sa.lbls.Hash())
		}
	}
	var perSeries, fileBytes float64
	cpu0 := processCPU(b)
	for b.Loop() {
		before := heapLive()
		tr := newTracker(cfg, nil)
		if ringFile {
			tr = fileTracker(b, cfg)
		}
		for i := range minutes {
			ts := tStart + int64(i)*minute.Milliseconds()
			for name, list := range vals {
				for j := range list {
					list[j].v = diurnal(ts, 10, seeds[name][j])
				}
			}
			tr.minute(ts, vals)
		}
		perSeries = float64(heapLive()-before) / float64(tr.len())
		if tr.arena != nil {
			fileBytes = float64(tr.arena.inFile.Load()) * float64(ringPageBytes) / float64(tr.len())
		}
		runtime.KeepAlive(tr)
	}
	b.ReportMetric(perSeries, "4w-B/series")
	b.ReportMetric(fileBytes, "4w-file-B/series")
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N*minutes), "cpu-ns/minute")
}

// BenchmarkHourBaseline is one series' baseline of an hour computed from
// a ring holding 30 days of summaries: the ring's reads (the same hour of
// four weeks, the level shift's last hours) and the robust median.
func BenchmarkHourBaseline(b *testing.B) {
	tr := fileTracker(b, DefaultBaselineConfig())
	s := tr.get(podSeries("a", "m"))
	h0 := floorDiv(tStart, hourMs)
	const hours = 30 * 24
	for h := h0; h < h0+hours; h++ {
		for m := range int64(60) {
			s.cur = append(s.cur, float32(diurnal(h*hourMs+m*minute.Milliseconds(), 40, 1)))
		}
		tr.buf = s.finish(h, tr.hours, tr.arena, tr.buf)
	}
	b.ReportAllocs()
	i := int64(0)
	for b.Loop() {
		tr.hourBaseline(s, h0+hours+i%24)
		i++
	}
}

// BenchmarkWriteBackSeriesBytes is the heap each written-back baseline
// series costs: n tracked series (all with a baseline from their replicas)
// whose median and sigma go through the live write-back (tracker.write,
// writeBackSink) for a number of minutes, the pipeline ticking each minute
// (a raw series through the tee moves its watermark). to=raw writes them
// to a tiers.Raw behind the pipeline's tee (Options.WriteBack, before
// direct series): a head series and a tee slot each; to=minute to the
// pipeline's direct series (Options.Baselines, strata serve's): a tee slot
// and builder each. B/series is the heap held after the last minute over
// the heap before the first write-back, per series written back; the
// labels are not in it (the tracker made them before, and the head and
// the tee share them): labels-B/series is what they take.
func BenchmarkWriteBackSeriesBytes(b *testing.B) {
	const n = 10_000
	for _, to := range []string{"raw", "minute"} {
		for _, minutes := range []int{1, 10} {
			b.Run(fmt.Sprint("to=", to, "/minutes=", minutes), func(b *testing.B) {
				var perSeries, lbls float64
				for b.Loop() {
					b.StopTimer()
					perSeries, lbls = writeBackSeriesBytes(b, n, minutes, to == "minute")
					b.StartTimer()
				}
				b.ReportMetric(perSeries, "B/series")
				b.ReportMetric(lbls, "labels-B/series")
			})
		}
	}
}

func writeBackSeriesBytes(b *testing.B, n, minutes int, direct bool) (perSeries, lbls float64) {
	dir := b.TempDir()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(dir+"/raw"), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.Close() })
	minuteTier, hourTier := openTiers(b, dir)
	clock := time.UnixMilli(tStart)
	dcfg := downsample.DefaultConfig()
	dcfg.SpillDir = dir + "/rollup-spill" // as strata serve: the open hours' windows in files
	pipe, err := downsample.New(dcfg, raw, minuteTier, hourTier, quietLogger(), prometheus.NewRegistry(),
		func() time.Time { return clock })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pipe.Close() })
	tee := pipe.Tee(raw)
	e := &Engine{cfg: DefaultConfig(), o: Options{WriteBack: tee, WriteBackDelay: 11 * time.Minute}, logger: quietLogger()}
	if direct {
		e.o.Baselines = pipe.Direct()
	}
	up := labels.FromStrings(model.MetricNameLabel, "up")

	tr := fileTracker(b, DefaultBaselineConfig())
	sc := newScratch()
	tr.minute(tStart, fleetSignals(n, tStart), sc) // the baselines and their label sets
	written := 0
	var lblBytes uint64
	for _, s := range tr.seen {
		if s.out != nil {
			written += 2
			lblBytes += s.out[0].lbls.ByteSize() + s.out[1].lbls.ByteSize()
		}
	}
	if written != 2*n {
		b.Fatalf("%d series to write back, want %d", written, 2*n)
	}
	before := heapLive()
	ctx := context.Background()
	for i := range minutes {
		ts := tStart + int64(i)*minute.Milliseconds()
		tr.write(ts, []baselineSink{writeBackSink{e}})
		clock = time.UnixMilli(ts + e.o.WriteBackDelay.Milliseconds())
		app := tee.AppenderV2(ctx)
		if _, err := app.Append(0, up, 0, clock.UnixMilli(), 1, nil, nil, storage.AppendV2Options{}); err != nil {
			b.Fatal(err)
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
		if err := pipe.Tick(ctx); err != nil {
			b.Fatal(err)
		}
	}
	perSeries = float64(heapLive()-before) / float64(written)
	want := written + 2 // and strata:baseline:k, and up
	if direct {
		want = 1
	}
	if got := raw.HeadSeries(); got != want {
		b.Fatalf("%d raw head series, want %d", got, want)
	}
	runtime.KeepAlive(tr)
	runtime.KeepAlive(sc)
	return perSeries, float64(lblBytes) / float64(written)
}
