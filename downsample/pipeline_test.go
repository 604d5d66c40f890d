package downsample

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// memTier is an in-memory rollup tier with the contract of tiers.Rollup:
// atomic partitions, HasPartition, Select over [mint, maxt]. It survives a
// pipeline "crash" the way files on disk do.
type memTier struct {
	mu     sync.Mutex
	length int64
	res    int64
	parts  map[int64][]tiers.SeriesWindows
	writes int
	fail   func(start int64) error // injected write failure
}

func newMemTier(res, length int64) *memTier {
	return &memTier{res: res, length: length, parts: map[int64][]tiers.SeriesWindows{}}
}

func (m *memTier) WritePartition(start int64, series []tiers.SeriesWindows) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		if err := m.fail(start); err != nil {
			return err
		}
	}
	if start%m.length != 0 {
		return fmt.Errorf("misaligned partition %d", start)
	}
	cp := make([]tiers.SeriesWindows, 0, len(series))
	for _, s := range series {
		for _, w := range s.Windows {
			if w.Start < start || w.Start >= start+m.length || w.Start%m.res != 0 || w.Count == 0 {
				return fmt.Errorf("partition %d: bad window %+v of %s", start, w, s.Labels)
			}
		}
		if len(s.Windows) > 0 {
			cp = append(cp, tiers.SeriesWindows{Labels: s.Labels, Windows: slices.Clone(s.Windows)})
		}
	}
	m.parts[start] = cp
	m.writes++
	return nil
}

func (m *memTier) HasPartition(start int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.parts[start]
	return ok
}

func (m *memTier) Select(_ context.Context, mint, maxt int64, ms ...*labels.Matcher) ([]tiers.SeriesWindows, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byKey := map[string]*tiers.SeriesWindows{}
	for start, series := range m.parts {
		if start > maxt || start+m.length <= mint {
			continue
		}
	next:
		for _, s := range series {
			for _, mt := range ms {
				if !mt.Matches(s.Labels.Get(mt.Name)) {
					continue next
				}
			}
			e := byKey[s.Labels.String()]
			if e == nil {
				e = &tiers.SeriesWindows{Labels: s.Labels}
				byKey[s.Labels.String()] = e
			}
			for _, w := range s.Windows {
				if w.Start >= mint && w.Start <= maxt {
					e.Windows = append(e.Windows, w)
				}
			}
		}
	}
	var out []tiers.SeriesWindows
	for _, e := range byKey {
		if len(e.Windows) == 0 {
			continue
		}
		slices.SortFunc(e.Windows, func(a, b tiers.Window) int { return cmp.Compare(a.Start, b.Start) })
		out = append(out, *e)
	}
	sortSeries(out)
	return out, nil
}

func (m *memTier) writeCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writes
}

// delivery is one sample and when the sender delivers it.
type delivery struct {
	series int
	t      int64
	v      float64
	at     int64
}

// workload is a deterministic fleet-like mix: gauges, counters with resets
// inside windows and exactly on minute and hour boundaries, classic
// histogram buckets, a series with gaps and stale markers, a gauge with NaN,
// a sender lagging by more than the lateness (accepted in order by raw), and
// out-of-order samples within the out-of-order window. All values are
// integers (or NaN), so sums are exact and any difference is a logic error.
type workload struct {
	labels     []labels.Labels
	samples    [][]fs // per series, ascending t: what raw ends up holding
	deliveries []delivery
	start, end int64
	via        storage.AppendableV2 // when set, deliver appends through it (a Tee)
}

func genWorkload(start, end, step int64) *workload {
	w := &workload{start: start, end: end}
	add := func(l labels.Labels) int {
		w.labels = append(w.labels, l)
		w.samples = append(w.samples, nil)
		return len(w.labels) - 1
	}
	var gauges, counters, buckets []int
	for g := range 4 {
		gauges = append(gauges, add(labelsFor("DCGM_FI_DEV_GPU_UTIL", "gpu", fmt.Sprint(g), "Hostname", "node-1")))
	}
	for _, pod := range []string{"a", "b"} {
		counters = append(counters, add(labelsFor("vllm:request_success_total", "pod", pod)))
	}
	for _, le := range []string{"0.1", "1", "+Inf"} {
		buckets = append(buckets, add(labelsFor("vllm:time_to_first_token_seconds_bucket", "le", le)))
	}
	flappy := add(labelsFor("flappy_gauge"))
	nanGauge := add(labelsFor("nan_gauge"))
	lagging := add(labelsFor("lagging_total", "instance", "slow-sender"))
	ooo := add(labelsFor("ooo_gauge"))

	cval := make([]float64, len(w.labels))
	bucketVal := [3]float64{}
	for k, t := int64(0), start; t < end; k, t = k+1, t+step {
		emit := func(s int, v float64, at int64) {
			w.samples[s] = append(w.samples[s], fs{t, v})
			w.deliveries = append(w.deliveries, delivery{series: s, t: t, v: v, at: at})
		}
		for i, s := range gauges {
			emit(s, float64((int64(i)*7+k*13)%100), t)
		}
		for i, s := range counters {
			switch {
			case t%HourRes == 0 && i == 0:
				cval[s] = 1 // reset exactly on an hour boundary
			case t%(17*MinuteRes) == 0:
				cval[s] = 0 // reset exactly on a minute boundary
			case k%97 == 41:
				cval[s] = 2 // reset inside a window
			default:
				cval[s] += float64(k%5 + int64(i))
			}
			emit(s, cval[s], t)
		}
		inc := float64(k % 3)
		bucketVal[0] += inc
		bucketVal[1] += inc + float64(k%2)
		bucketVal[2] += inc + float64(k%2) + 1
		if t%(5*HourRes) == 3*MinuteRes { // the exporter restarted
			bucketVal = [3]float64{}
		}
		for i, s := range buckets {
			emit(s, bucketVal[i], t)
		}
		// flappy: absent 7 minutes of every 2 hours, ended by a stale marker.
		if phase := (t - start) % (2 * HourRes); phase < 7*MinuteRes {
			if phase < step {
				emit(flappy, math.Float64frombits(staleMarkerBits), t)
			}
		} else {
			emit(flappy, float64(k%11), t)
		}
		if k%53 == 7 {
			emit(nanGauge, math.NaN(), t)
		} else {
			emit(nanGauge, float64(k%17), t)
		}
		cval[lagging] += float64(k % 4)
		if k%211 == 100 {
			cval[lagging] = 0
		}
		emit(lagging, cval[lagging], t+12*MinuteRes) // delivered 12 minutes late: more than the lateness
		if k%9 == 4 {
			emit(ooo, float64(k%23), t+4*MinuteRes) // out of order, within the OOO window
		} else {
			emit(ooo, float64(k%23), t)
		}
	}
	slices.SortStableFunc(w.deliveries, func(a, b delivery) int { return cmp.Compare(a.at, b.at) })
	return w
}

const staleMarkerBits = 0x7ff0000000000002

// deliver appends every delivery with at in (from, to] to raw, through
// w.via (a Tee) when set.
func (w *workload) deliver(t *testing.T, raw *tiers.Raw, from, to int64) {
	t.Helper()
	i, _ := slices.BinarySearchFunc(w.deliveries, from+1, func(d delivery, at int64) int { return cmp.Compare(d.at, at) })
	var target storage.AppendableV2 = raw
	if w.via != nil {
		target = w.via
	}
	app := target.AppenderV2(context.Background())
	for ; i < len(w.deliveries) && w.deliveries[i].at <= to; i++ {
		d := w.deliveries[i]
		if _, err := app.Append(0, w.labels[d.series], 0, d.t, d.v, nil, nil, storage.AppendV2Options{}); err != nil {
			t.Fatalf("append %s @%d: %v", w.labels[d.series], d.t, err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
}

// reference computes the windows of [from, to) of every series straight from
// the workload's samples (not through raw), at resolution res.
func (w *workload) reference(t *testing.T, res, from, to int64) []tiers.SeriesWindows {
	t.Helper()
	var out []tiers.SeriesWindows
	for i, l := range w.labels {
		ws, _, err := AppendWindows(nil, iterOf(w.samples[i]).Iterator(nil), res, from, to, testKindOf(l))
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) > 0 {
			out = append(out, tiers.SeriesWindows{Labels: l, Windows: ws})
		}
	}
	sortSeries(out)
	return out
}

func checkSeries(t *testing.T, what string, got, want []tiers.SeriesWindows) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d series, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if !labels.Equal(got[i].Labels, want[i].Labels) {
			t.Errorf("%s: series %d is %s, want %s", what, i, got[i].Labels, want[i].Labels)
			return
		}
		if len(got[i].Windows) != len(want[i].Windows) {
			t.Errorf("%s %s: %d windows, want %d", what, got[i].Labels, len(got[i].Windows), len(want[i].Windows))
			continue
		}
		for j := range got[i].Windows {
			g, w := got[i].Windows[j], want[i].Windows[j]
			if math.IsNaN(g.Increase) && math.IsNaN(g.Sum) && math.IsNaN(w.Sum) {
				// A NaN sample that is a minute's first or last makes that
				// minute's Increase NaN, and so the merged hour's, where
				// PromQL over the raw hour skips a NaN that is not at the
				// hour's ends (documented in docs/rollups.md). Only a series
				// holding NaN (so Sum is NaN) may differ, and only there.
				g.Increase = w.Increase
			}
			if !windowsEqual(g, w) {
				t.Errorf("%s %s window %d:\n got %+v\nwant %+v", what, got[i].Labels, j, got[i].Windows[j], want[i].Windows[j])
				break
			}
		}
	}
}

// buildHours waits for the hour partitions of the finished days, which the
// ticks build in the background (Pipeline.BuildHours).
func buildHours(t *testing.T, p *Pipeline) {
	t.Helper()
	if err := p.BuildHours(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// readableTier is a rollup tier as the checks read it back.
type readableTier interface {
	HasPartition(start int64) bool
	Select(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) ([]tiers.SeriesWindows, error)
}

func readPartition(t *testing.T, tier readableTier, start, length int64) []tiers.SeriesWindows {
	t.Helper()
	got, err := tier.Select(context.Background(), start, start+length-1)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkTiers checks every partition that must exist once the watermark is at
// wm against a from-scratch computation from the workload's samples: nothing
// missing, nothing counted twice.
func checkTiers(t *testing.T, w *workload, minute, hour readableTier, wm int64) {
	t.Helper()
	var lastMinute int64
	for h := timegrid.Floor(w.start, HourRes); flushable(h, wm); h += HourRes {
		if !minute.HasPartition(h) {
			t.Errorf("minute partition %s missing at watermark %s", fmtTime(h), fmtTime(wm))
			continue
		}
		checkSeries(t, "minute "+fmtTime(h), readPartition(t, minute, h, HourRes), w.reference(t, MinuteRes, h, h+HourRes))
		lastMinute = h + HourRes
	}
	if lastMinute == 0 {
		t.Fatal("no minute partition to check")
	}
	for d := timegrid.Floor(w.start, DayLen); d+DayLen <= lastMinute; d += DayLen {
		if !hour.HasPartition(d) {
			t.Errorf("hour partition %s missing", fmtTime(d))
			continue
		}
		// Straight from raw samples at hour resolution, not by merging: this
		// also checks that merging minutes equals computing hours directly.
		checkSeries(t, "hour "+fmtTime(d), readPartition(t, hour, d, DayLen), w.reference(t, HourRes, d, d+DayLen))
	}
}

type readableWriter interface {
	readableTier
	PartitionWriter
}

type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

func openTestRaw(t *testing.T) *tiers.Raw {
	t.Helper()
	cfg := tiers.DefaultRawConfig(t.TempDir())
	cfg.Retention = 7 * 24 * time.Hour // nothing expires during the test
	raw, err := tiers.OpenRaw(cfg, promslog.NewNopLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return raw
}

var testStart = time.Date(2026, 1, 10, 20, 0, 0, 0, time.UTC).UnixMilli()

// run delivers the workload in 30 s batches from (from, to], ticking after
// each batch, and checks the lag bound after every tick. After each batch it
// compacts the raw tier as the TSDB's background loop would when it next
// runs (the head into a block once it spans 3 h, then the out-of-order
// head), so that the ticks see blocks at the same points in every run.
func run(t *testing.T, p *Pipeline, raw *tiers.Raw, w *workload, clock *testClock, from, to int64, checkLag bool) error {
	t.Helper()
	const batch = 30 * 1000
	var firstErr error
	for at := from; at < to; at += batch {
		w.deliver(t, raw, at, min(at+batch, to))
		if err := raw.DB().Compact(context.Background()); err != nil {
			t.Fatal(err)
		}
		clock.t = time.UnixMilli(min(at+batch, to))
		if err := p.Tick(context.Background()); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if lag := testutil.ToFloat64(p.m.lag); checkLag && lag > 120 {
			t.Fatalf("lag %.0fs at %s exceeds two minutes", lag, fmtTime(at))
		}
	}
	return firstErr
}

func TestPipelineIncremental(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 30 hours of ingest")
	}
	testPipelineIncremental(t, 30*HourRes)
}

// TestPipelineIncrementalShort is the CI-sized version: 4 hours across a
// day boundary.
func TestPipelineIncrementalShort(t *testing.T) {
	testPipelineIncremental(t, 4*HourRes+20*MinuteRes)
}

// TestPipelineParquetTiers runs the pipeline into the real Parquet minute
// and hour tiers (tiers.OpenRollup) and checks what they read back.
func TestPipelineParquetTiers(t *testing.T) {
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(t.TempDir()), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { minute.Close() })
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(t.TempDir()), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hour.Close() })
	testPipelineIncrementalWith(t, 4*HourRes+20*MinuteRes, minute, hour)
}

var _ MinuteTier = (*tiers.Rollup)(nil)

func testPipelineIncremental(t *testing.T, span int64) {
	testPipelineIncrementalWith(t, span, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen))
}

// TestPipelineTee ingests through Tee: the open hour's minutes come from the
// committed samples, raw is read only to flush partitions, and the result
// is the same as when reading raw.
func TestPipelineTee(t *testing.T) {
	testPipelineIncrementalWith(t, 4*HourRes+20*MinuteRes, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), withTee)
}

func withTee(p *Pipeline, w *workload, raw *tiers.Raw) { w.via = p.Tee(raw) }

// TestPipelineTeeNoRawReads: when every series' samples arrive in order
// (the lagging sender's too, later than the lateness), the tee folds them
// all and raw is never read, not even to flush a partition.
func TestPipelineTeeNoRawReads(t *testing.T) {
	testPipelineIncrementalWith(t, 3*HourRes, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), withoutOutOfOrder, spillEverySeries, withTee)
}

// spillEverySeries spills the windows of every series, as
// Config.SparseInterval < 0 does: the workload's 10 s series are sparse.
func spillEverySeries(p *Pipeline, _ *workload, _ *tiers.Raw) { p.sparseAfter = 0 }

// withoutOutOfOrder delivers the out-of-order series' samples in order.
func withoutOutOfOrder(_ *Pipeline, w *workload, _ *tiers.Raw) {
	for i, l := range w.labels {
		if l.Get(model.MetricNameLabel) != "ooo_gauge" {
			continue
		}
		for j := range w.deliveries {
			if d := &w.deliveries[j]; d.series == i {
				d.at = d.t
			}
		}
	}
	slices.SortStableFunc(w.deliveries, func(a, b delivery) int { return cmp.Compare(a.at, b.at) })
}

// countingSource counts raw queries.
type countingSource struct {
	Source
	mu      sync.Mutex
	queries int
}

func (c *countingSource) Querier(mint, maxt int64) (storage.Querier, error) {
	c.mu.Lock()
	c.queries++
	c.mu.Unlock()
	return c.Source.Querier(mint, maxt)
}

func testPipelineIncrementalWith(t *testing.T, span int64, minute MinuteTier, hour readableWriter, opts ...func(*Pipeline, *workload, *tiers.Raw)) {
	start := testStart + 2*HourRes // 22:00, so 4h crosses midnight
	w := genWorkload(start, start+span, 10_000)
	raw := openTestRaw(t)
	clock := &testClock{t: time.UnixMilli(start)}
	reg := prometheus.NewRegistry()
	src := &countingSource{Source: raw}
	p, err := New(testConfig(), src, minute, hour, promslog.NewNopLogger(), reg, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(p, w, raw)
	}
	if err := run(t, p, raw, w, clock, start-1, w.deliveries[len(w.deliveries)-1].at, true); err != nil {
		t.Fatal(err)
	}
	_, rawMax, _ := raw.Bounds()
	wm := rawMax - DefaultConfig().Lateness.Milliseconds()

	// The open hour is in memory and equals the reference so far.
	open := p.openWindows()
	if len(open) == 0 {
		t.Fatal("no open windows")
	}
	from := open[0].Windows[0].Start
	from = timegrid.Floor(from, HourRes)
	for _, s := range open {
		for _, win := range s.Windows {
			if win.Start+MinuteRes > p.mark {
				t.Fatalf("window %+v past the computed mark %s", win, fmtTime(p.mark))
			}
		}
	}
	// Only the lagging sender may miss samples in memory: they are picked up at flush.
	var openNoLag, refNoLag []tiers.SeriesWindows
	for _, s := range open {
		if s.Labels.Get("instance") != "slow-sender" {
			openNoLag = append(openNoLag, s)
		}
	}
	for _, s := range w.reference(t, MinuteRes, from, p.mark) {
		if s.Labels.Get("instance") != "slow-sender" {
			refNoLag = append(refNoLag, s)
		}
	}
	checkSeries(t, "open windows", openNoLag, refNoLag)

	buildHours(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	checkTiers(t, w, minute, hour, wm)
	lagging := false
	for i, l := range w.labels {
		lagging = lagging || (l.Get("instance") == "slow-sender" && len(w.samples[i]) > 0)
	}
	switch late := testutil.ToFloat64(p.m.late); {
	case lagging && late == 0:
		t.Error("the lagging sender's samples were not counted as late")
	case !lagging && late != 0:
		t.Errorf("%v late samples without a lagging sender", late)
	}
	outOfOrder := testutil.ToFloat64(p.m.outOfOrder) > 0
	spillAll := p.sparseAfter == 0
	if w.via != nil && spillAll && !outOfOrder && src.queries != 0 {
		t.Errorf("the tee folded every sample in order, yet raw was queried %d times", src.queries)
	}
	minutesComputed := int((p.mark - start) / MinuteRes)
	if w.via != nil {
		// Raw is read only to recompute the series with out-of-order
		// samples (one querier per tick for all of them), never per
		// minute; when the series are sparse, also once per partition
		// flushed and once per open hour openWindows read.
		recomputed := int(testutil.ToFloat64(p.m.recomputed))
		allowed := recomputed
		if !spillAll {
			allowed += int(testutil.ToFloat64(p.m.partitions.WithLabelValues("minute"))) + 3
		}
		if src.queries > allowed {
			t.Errorf("with the tee, raw was queried %d times for %d per-series recomputes", src.queries, recomputed)
		}
	} else if hours := minutesComputed / 60; src.queries < hours {
		// Without the tee every minute comes from raw; how many minutes one
		// query covers depends on how far the watermark moved per tick, so
		// only a floor of one read per hour computed is asserted.
		t.Errorf("raw queried %d times for %d minutes (%d hours)", src.queries, minutesComputed, hours)
	}
	if n := testutil.ToFloat64(p.m.partitions.WithLabelValues("hour")); n < 1 {
		t.Errorf("%v hour partitions written, want at least one (the run crosses midnight)", n)
	}
	if err := p.Tick(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Tick after Close = %v, want ErrClosed", err)
	}
}

// TestPipelineCrashRecovery runs the pipeline over a deterministic workload,
// makes a partition write fail, "crashes" (drops the pipeline without Close,
// losing its in-memory windows), keeps ingesting, restarts a new pipeline on
// the same tiers and checks that every minute and hour window equals a
// from-scratch computation: nothing missing, nothing counted twice.
func TestPipelineCrashRecovery(t *testing.T) {
	span := 28 * HourRes
	if testing.Short() {
		span = 5 * HourRes
	}
	start := testStart + 2*HourRes
	w := genWorkload(start, start+span, 10_000)
	raw := openTestRaw(t)
	minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
	clock := &testClock{t: time.UnixMilli(start)}

	p1, err := New(testConfig(), raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	crashAt := start + span/2 + 17*MinuteRes
	failing := start + HourRes // this partition's first write fails ("disk full")
	failed := false
	minute.fail = func(s int64) error {
		if s == failing && !failed {
			failed = true
			return errors.New("disk full")
		}
		return nil
	}
	if err := run(t, p1, raw, w, clock, start-1, crashAt, false); err == nil {
		t.Fatal("the injected write failure did not surface from Tick")
	}
	if n := testutil.ToFloat64(p1.m.errors); n == 0 {
		t.Error("errors_total not incremented")
	}
	if !minute.HasPartition(failing) {
		t.Error("the failed partition was not retried by a later tick")
	}
	if len(p1.openWindows()) == 0 {
		t.Fatal("the crash must lose in-memory windows; there were none")
	}
	writesBefore := minute.writeCount()
	// Crash: p1 is dropped without Close. Ingest goes on while it is down.
	end := w.deliveries[len(w.deliveries)-1].at
	downUntil := crashAt + 3*HourRes
	w.deliver(t, raw, crashAt, downUntil)
	clock.t = time.UnixMilli(downUntil)

	p2, err := New(testConfig(), raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Recovery wrote only what was missing: partitions on disk were not rewritten.
	_, rawMax, _ := raw.Bounds()
	wm := rawMax - DefaultConfig().Lateness.Milliseconds()
	wantNew := 0
	for h := timegrid.Floor(crashAt, HourRes); flushable(h, wm); h += HourRes {
		wantNew++
	}
	if got := minute.writeCount() - writesBefore; got != wantNew {
		t.Errorf("recovery wrote %d minute partitions, want %d (the ones missing)", got, wantNew)
	}
	if err := run(t, p2, raw, w, clock, downUntil, end, true); err != nil {
		t.Fatal(err)
	}
	buildHours(t, p2)
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
	_, rawMax, _ = raw.Bounds()
	checkTiers(t, w, minute, hour, rawMax-DefaultConfig().Lateness.Milliseconds())

	// A third start over complete tiers is a no-op: idempotent.
	minuteWrites, hourWrites := minute.writeCount(), hour.writeCount()
	p3, err := New(testConfig(), raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := p3.Close(); err != nil {
		t.Fatal(err)
	}
	if minute.writeCount() != minuteWrites || hour.writeCount() != hourWrites {
		t.Errorf("a restart over complete tiers rewrote partitions: minute %d->%d, hour %d->%d",
			minuteWrites, minute.writeCount(), hourWrites, hour.writeCount())
	}
}

// TestHourRebuiltFromMinuteTier deletes an hour partition and checks that a
// new pipeline rebuilds it from the minute tier alone, raw data being gone.
func TestHourRebuiltFromMinuteTier(t *testing.T) {
	start := testStart + 2*HourRes
	w := genWorkload(start, start+3*HourRes, 10_000)
	minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
	for h := timegrid.Floor(start, HourRes); h < w.end; h += HourRes {
		if err := minute.WritePartition(h, w.reference(t, MinuteRes, h, h+HourRes)); err != nil {
			t.Fatal(err)
		}
	}
	day := timegrid.Floor(start, DayLen)
	clock := &testClock{t: time.UnixMilli(w.end)}
	emptyRaw := openTestRaw(t)
	// Raw holds only a sample far later, as if everything older had expired.
	app := emptyRaw.Appender(context.Background())
	if _, err := app.Append(0, labelsFor("late_start"), w.end+3*DayLen, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	p, err := New(testConfig(), emptyRaw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	buildHours(t, p)
	for _, d := range []int64{day, day + DayLen} { // the workload crosses midnight
		if !hour.HasPartition(d) {
			t.Fatalf("hour partition %s not rebuilt from the minute tier", fmtTime(d))
		}
		checkSeries(t, "rebuilt hour "+fmtTime(d), readPartition(t, hour, d, DayLen), w.reference(t, HourRes, d, d+DayLen))
	}
	if hour.HasPartition(day + 2*DayLen) {
		t.Error("an hour partition was written for a day with no minute partition")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// gatedTier is a minute tier whose reads of a whole day (the hour build's)
// wait for gate to close, or for their context: a day's build at fleet
// scale takes minutes.
type gatedTier struct {
	*memTier
	gate    chan struct{}
	entered chan int64 // the day of each build that reached the gate
}

func (g *gatedTier) Select(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) ([]tiers.SeriesWindows, error) {
	if maxt-mint+1 == DayLen {
		select {
		case g.entered <- mint:
		default:
		}
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.memTier.Select(ctx, mint, maxt, ms...)
}

// TestHourBuildBesideTick: a day's hour partition is built beside the
// ticks, which go on computing and writing minute partitions meanwhile; one
// day is built at a time; Close cancels a running build, which the next
// start builds again.
func TestHourBuildBesideTick(t *testing.T) {
	start := testStart + 2*HourRes
	w := genWorkload(start, start+3*HourRes, 10_000) // crosses midnight
	mem := newMemTier(MinuteRes, HourRes)
	for h := timegrid.Floor(start, HourRes); h < w.end; h += HourRes {
		if err := mem.WritePartition(h, w.reference(t, MinuteRes, h, h+HourRes)); err != nil {
			t.Fatal(err)
		}
	}
	day := timegrid.Floor(start, DayLen)
	minute := &gatedTier{memTier: mem, gate: make(chan struct{}), entered: make(chan int64, 8)}
	hour := newMemTier(HourRes, DayLen)
	// Raw holds one series from a later hour on, as if the workload's
	// samples had expired; it is delivered in two parts.
	raw := openTestRaw(t)
	later := timegrid.Floor(w.end, HourRes) + 2*DayLen
	lset := labelsFor("after_midnight_total", "instance", "a")
	deliver := func(from, to int64) {
		t.Helper()
		app := raw.Appender(context.Background())
		for ts := from; ts < to; ts += 15_000 {
			if _, err := app.Append(0, lset, ts, float64(ts/1000)); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	deliver(later, later+40*MinuteRes)
	clock := &testClock{t: time.UnixMilli(w.end)}
	p, err := New(testConfig(), raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	// A tick or Close that waits for the gated build never returns: fail
	// after a bound far beyond their work here instead of hanging.
	returns := func(what string, fn func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(time.Minute):
			close(minute.gate)
			t.Fatalf("%s waited for the hour partition's build", what)
		}
	}
	tick := func() { t.Helper(); returns("Tick", func() error { return p.Tick(context.Background()) }) }
	tick()
	select {
	case got := <-minute.entered:
		if got != day {
			t.Fatalf("the first build is of %s, want %s", fmtTime(got), fmtTime(day))
		}
	case <-time.After(time.Minute):
		t.Fatal("the first tick started no hour partition build")
	}
	// The build waits at the gate; the ticks go on, and start no other.
	tick()
	deliver(later+40*MinuteRes, later+HourRes+StaleLookahead+DefaultConfig().Lateness.Milliseconds()+5*MinuteRes)
	tick()
	if !minute.HasPartition(later) {
		t.Error("a tick did not write a final minute partition while an hour partition was being built")
	}
	if mark, ok := p.Mark(); !ok || mark < later+HourRes {
		t.Errorf("the mark is %s while an hour partition was being built, want at least %s", fmtTime(mark), fmtTime(later+HourRes))
	}
	select {
	case d := <-minute.entered:
		t.Fatalf("a second build (%s) started while the first ran", fmtTime(d))
	default:
	}
	if hour.HasPartition(day) || hour.HasPartition(day+DayLen) {
		t.Fatal("an hour partition was written while its build waited")
	}

	// Close cancels the running build: no partition, no error, no run left.
	returns("Close with a build running", p.Close)
	if hour.HasPartition(day) {
		t.Fatal("the cancelled build wrote its partition")
	}

	// The next start builds both days, one after the other.
	close(minute.gate)
	p2, err := New(testConfig(), raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	buildHours(t, p2)
	for _, d := range []int64{day, day + DayLen} {
		if !hour.HasPartition(d) {
			t.Fatalf("hour partition %s not built after the restart", fmtTime(d))
		}
		checkSeries(t, "hour "+fmtTime(d), readPartition(t, hour, d, DayLen), w.reference(t, HourRes, d, d+DayLen))
	}
	if n := testutil.ToFloat64(p2.m.partitions.WithLabelValues("hour")); n != 2 {
		t.Errorf("hour partitions counted: %v, want 2", n)
	}
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHourBuildBackoff: a failed hour partition build is the collecting
// tick's error and is not started again before its backoff (a tick's
// interval, doubling with each failure in a row, at most an hour); then it
// is, and a success resets the backoff.
func TestHourBuildBackoff(t *testing.T) {
	start := testStart + 2*HourRes
	w := genWorkload(start, start+2*HourRes, 2_000) // 22:00-24:00: one day
	minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
	for h := timegrid.Floor(start, HourRes); h < w.end; h += HourRes {
		if err := minute.WritePartition(h, w.reference(t, MinuteRes, h, h+HourRes)); err != nil {
			t.Fatal(err)
		}
	}
	day := timegrid.Floor(start, DayLen)
	failing := true
	hour.fail = func(int64) error {
		if failing {
			return errors.New("no space left on device")
		}
		return nil
	}
	raw := openTestRaw(t)
	app := raw.Appender(context.Background())
	if _, err := app.Append(0, labelsFor("later"), w.end+DayLen, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	clock := &testClock{t: time.UnixMilli(w.end)}
	cfg := testConfig()
	p, err := New(cfg, raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// tickUntil ticks until the build a tick started has been collected.
	tickUntil := func() error {
		t.Helper()
		for range 1000 {
			err := p.Tick(context.Background())
			p.tickMu.Lock()
			idle := p.building == nil
			p.tickMu.Unlock()
			if err != nil || idle {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatal("the hour partition's build did not end")
		return nil
	}
	if err := tickUntil(); err == nil || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), "built again in 15s") {
		t.Fatalf("the failed build's tick: %v", err)
	}
	failing = false
	clock.t = clock.t.Add(cfg.Interval - time.Second)
	if err := p.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.building != nil || hour.HasPartition(day) {
		t.Fatal("a build started again before its backoff")
	}
	clock.t = clock.t.Add(time.Second)
	if err := tickUntil(); err != nil {
		t.Fatal(err)
	}
	if !hour.HasPartition(day) || p.buildFails != 0 {
		t.Fatalf("after the backoff: partition %v, failures in a row %d", hour.HasPartition(day), p.buildFails)
	}
	for fails, want := range map[int]time.Duration{1: 15 * time.Second, 2: 30 * time.Second, 3: time.Minute, 8: 32 * time.Minute, 9: time.Hour, 100: time.Hour} {
		if got := p.buildBackoff(fails); got != want {
			t.Errorf("backoff after %d failures: %s, want %s", fails, got, want)
		}
	}
}

func TestNewValidates(t *testing.T) {
	raw := openTestRaw(t)
	minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
	now := time.Now
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"negative lateness", func(c *Config) { c.Lateness = -time.Second }},
		{"zero interval", func(c *Config) { c.Interval = 0 }},
		{"minute retention under a day", func(c *Config) { c.MinuteRetention = time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(&cfg)
			if _, err := New(cfg, raw, minute, hour, nil, prometheus.NewRegistry(), now); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

func TestEmptyRawIsANoOp(t *testing.T) {
	raw := openTestRaw(t)
	minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
	p, err := New(testConfig(), raw, minute, hour, nil, prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if minute.writeCount() != 0 || hour.writeCount() != 0 {
		t.Fatal("wrote partitions with an empty raw tier")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRunStops checks that Run returns when its context is cancelled. In a
// synctest bubble Run's ticker runs on the bubble's clock: once every
// goroutine of the bubble is blocked, Run has returned or never will.
func TestRunStops(t *testing.T) {
	raw := openTestRaw(t)
	synctest.Test(t, func(t *testing.T) {
		minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
		p, err := New(testConfig(), raw, minute, hour, nil, prometheus.NewRegistry(), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Run did not return after cancel")
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// failingSource fails the raw query number failAt.
type failingSource struct {
	Source
	n, failAt int
}

func (f *failingSource) Querier(mint, maxt int64) (storage.Querier, error) {
	f.n++
	if f.n == f.failAt {
		return nil, errors.New("injected raw read failure")
	}
	return f.Source.Querier(mint, maxt)
}

// TestPipelineReadFailure makes one incremental raw read fail and checks that
// the pipeline neither loses nor duplicates windows.
func TestPipelineReadFailure(t *testing.T) {
	start := testStart + 2*HourRes
	w := genWorkload(start, start+2*HourRes+30*MinuteRes, 10_000)
	raw := openTestRaw(t)
	minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
	clock := &testClock{t: time.UnixMilli(start)}
	src := &failingSource{Source: raw, failAt: 40}
	p, err := New(testConfig(), src, minute, hour, nil, prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	end := w.deliveries[len(w.deliveries)-1].at
	if err := run(t, p, raw, w, clock, start-1, end, false); err == nil {
		t.Fatal("the injected failure did not surface")
	}
	for _, s := range p.openWindows() {
		for i := 1; i < len(s.Windows); i++ {
			if s.Windows[i].Start <= s.Windows[i-1].Start {
				t.Fatalf("%s: duplicate or unordered open windows after a failed read", s.Labels)
			}
		}
	}
	_, rawMax, _ := raw.Bounds()
	buildHours(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	checkTiers(t, w, minute, hour, rawMax-DefaultConfig().Lateness.Milliseconds())
}
