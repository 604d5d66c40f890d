package diagnose

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

const waiting = "strata:requests_waiting"

var tStart = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC).UnixMilli() // a Monday

func testBaselineConfig() BaselineConfig {
	c := DefaultBaselineConfig()
	c.History = model.Duration(10 * 24 * time.Hour)
	c.MinHistory = model.Duration(7 * 24 * time.Hour)
	c.Signals = []string{waiting}
	return c
}

func podSeries(pod, modelName string) labels.Labels {
	return labels.FromStrings(model.MetricNameLabel, waiting, "namespace", "ns", "pod", pod, "model_name", modelName)
}

// diurnal is a daily cycle around level (trough at 04:00) with
// deterministic noise of about ±5 %.
func diurnal(ts int64, level float64, seed uint64) float64 {
	h := float64(ts%(24*hourMs)) / float64(hourMs)
	x := uint64(ts/minute.Milliseconds())*0x9e3779b97f4a7c15 + seed*0xbf58476d1ce4e5b9
	x ^= x >> 31
	noise := float64(x%1000)/1000 - 0.5
	return level * (1 + 0.5*math.Sin(2*math.Pi*(h-10)/24) + 0.1*noise)
}

type point struct {
	med, sig, z float64
	src         baselineSource
	ok          bool
}

// feed runs tracker tr over the minutes [from, to) of the given series
// (value function per series) and returns what it said at each minute
// from record on.
func feed(tr *tracker, from, to, record int64, series map[string]func(int64) (float64, bool)) map[int64]map[string]point {
	out := map[int64]map[string]point{}
	for ts := from; ts < to; ts += minute.Milliseconds() {
		var vals []sampleAt
		for pod, f := range series {
			if v, ok := f(ts); ok {
				vals = append(vals, sampleAt{podSeries(pod, "m"), v})
			}
		}
		tr.minute(ts, map[string][]sampleAt{waiting: vals})
		if ts < record {
			continue
		}
		m := map[string]point{}
		for pod := range series {
			for _, s := range tr.lookup(waiting, Entities{Namespace: "ns", Pod: pod}) {
				if s.lastT != ts {
					continue
				}
				med, sig, src, ok := s.current()
				m[pod] = point{med, sig, s.zscore(s.x), src, ok}
			}
		}
		out[ts] = m
	}
	return out
}

func steady(level float64, seed uint64) func(int64) (float64, bool) {
	return func(ts int64) (float64, bool) { return diurnal(ts, level, seed), true }
}

// TestBaselineIndependentOfStart: a tracker that has run for days and one
// started at an odd minute of the last day, after reading back its history
// (as bootstrap does), give identical baselines at every minute from then
// on: the baseline at T depends on the signal before T's hour, not on
// where evaluation started. With one day of history the same hour of the
// last 7 days reaches further back than the history read back, and a
// tracker that has run for longer may not use more.
func TestBaselineIndependentOfStart(t *testing.T) {
	oneDay := testBaselineConfig()
	oneDay.History, oneDay.MinHistory = model.Duration(24*time.Hour), model.Duration(24*time.Hour)
	for _, tc := range []struct {
		name string
		cfg  BaselineConfig
		days int64 // the late tracker starts on day days+1
		src  baselineSource
	}{
		{"ten days", testBaselineConfig(), 11, sourceHourOfWeek},
		{"one day", oneDay, 4, sourceSameHour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			series := map[string]func(int64) (float64, bool){"a": steady(40, 1), "b": steady(40, 2), "c": steady(40, 3)}
			start := tStart + tc.days*24*hourMs + 7*hourMs + 17*minute.Milliseconds()
			end := start + 26*hourMs
			full := feed(fileTracker(t, tc.cfg), tStart, end, start, series)
			late := fileTracker(t, tc.cfg)
			from := floorDiv(start, hourMs)*hourMs - late.readBack().Milliseconds()
			got := feed(late, from, end, start, series)
			n := 0
			for ts, want := range full {
				for pod, w := range want {
					if g := got[ts][pod]; g != w {
						t.Fatalf("%s pod %s: started late %+v, ran from the beginning %+v", time.UnixMilli(ts).UTC(), pod, g, w)
					}
					if !w.ok || w.src != tc.src {
						t.Fatalf("%s pod %s: no %s baseline after %d days: %+v", time.UnixMilli(ts).UTC(), pod, tc.src, tc.days, w)
					}
					n++
				}
			}
			if n < 3*26*60 {
				t.Fatalf("compared %d points", n)
			}
		})
	}
}

// TestBaselineFollowsTheDailyCycle: the baseline at the trough is the
// trough, not the daily mean, so the trough is no anomaly, while a value
// at the peak's level at the trough is.
func TestBaselineFollowsTheDailyCycle(t *testing.T) {
	series := map[string]func(int64) (float64, bool){"a": steady(40, 1)}
	trough := tStart + 8*24*hourMs + 4*hourMs
	got := feed(fileTracker(t, testBaselineConfig()), tStart, trough+hourMs, trough, series)
	p := got[trough+30*minute.Milliseconds()]["a"]
	if !p.ok || math.Abs(p.z) > 2 {
		t.Fatalf("the trough deviates: %+v", p)
	}
	if z := (60 - p.med) / p.sig; z < 10 {
		t.Fatalf("a peak-level value at the trough is only %.1f sigma out (%+v)", z, p)
	}
}

// TestBaselineLeavesIncidentsOut: an incident at the same hour on one of
// the past days (the queue at ten times its level) moves neither the
// median nor the sigma of that hour's baseline much; the exclusion is one
// pass over the candidate hours.
func TestBaselineLeavesIncidentsOut(t *testing.T) {
	cfg := testBaselineConfig()
	cfg.MinHistory = model.Duration(14 * 24 * time.Hour) // the same hour of the last days
	at := tStart + 6*24*hourMs + 14*hourMs
	clean := map[string]func(int64) (float64, bool){"a": steady(40, 1)}
	incident := map[string]func(int64) (float64, bool){"a": func(ts int64) (float64, bool) {
		v := diurnal(ts, 40, 1)
		if ts >= at-2*24*hourMs && ts < at-2*24*hourMs+hourMs {
			v *= 10
		}
		return v, true
	}}
	probe := at + 5*minute.Milliseconds()
	c := feed(fileTracker(t, cfg), tStart, probe+minute.Milliseconds(), probe, clean)[probe]["a"]
	i := feed(fileTracker(t, cfg), tStart, probe+minute.Milliseconds(), probe, incident)[probe]["a"]
	if c.src != sourceSameHour || i.src != sourceSameHour {
		t.Fatalf("sources %s, %s", c.src, i.src)
	}
	if math.Abs(i.med-c.med) > 0.05*c.med || i.sig > 1.5*c.sig {
		t.Fatalf("the incident hour moved the baseline: clean %+v, with the incident %+v", c, i)
	}
}

// TestBaselineAdoptsALevelShift: a queue that doubles for good is an
// anomaly at first, and the new normal once it has held beyond k sigma for
// level_shift_after.
func TestBaselineAdoptsALevelShift(t *testing.T) {
	cfg := testBaselineConfig()
	shift := tStart + 8*24*hourMs + 12*hourMs
	series := map[string]func(int64) (float64, bool){"a": func(ts int64) (float64, bool) {
		v := diurnal(ts, 40, 1)
		if ts >= shift {
			v *= 2
		}
		return v, true
	}}
	got := feed(fileTracker(t, cfg), tStart, shift+6*hourMs, shift, series)
	if p := got[shift+90*minute.Milliseconds()]["a"]; p.z < cfg.K {
		t.Fatalf("90 minutes after the shift: z = %.1f, want beyond k", p.z)
	}
	after := shift + time.Duration(cfg.LevelShiftAfter).Milliseconds() + hourMs + 30*minute.Milliseconds()
	if p := got[after]["a"]; math.Abs(p.z) >= cfg.K-1 {
		t.Fatalf("after level_shift_after the shift is still an anomaly: %+v", p)
	}
}

// TestBaselineFallbacks: a young series gets its baseline from the other
// replicas of its model at the same minute, then from its last hours,
// then from the same hour of the last days, then from the hour of the week.
func TestBaselineFallbacks(t *testing.T) {
	cfg := testBaselineConfig()
	born := tStart + 30*minute.Milliseconds()
	series := map[string]func(int64) (float64, bool){
		"a": steady(40, 1), "b": steady(40, 2),
		"young": func(ts int64) (float64, bool) { return diurnal(ts, 40, 3), ts >= born },
		// A replica of another model only says nothing about model m's.
		"lone": steady(40, 4),
	}
	tr := fileTracker(t, cfg)
	end := tStart + 8*24*hourMs
	got := feed(tr, tStart, end, tStart, series)
	for _, c := range []struct {
		at   int64
		pod  string
		want baselineSource
	}{
		{born + 5*minute.Milliseconds(), "young", sourceReplicas},
		{tStart + 2*hourMs + 10*minute.Milliseconds(), "young", sourceReplicas},
		{tStart + 30*hourMs, "young", sourceSameHour},
		{tStart + 7*24*hourMs + 5*hourMs, "young", sourceHourOfWeek},
	} {
		if p := got[c.at][c.pod]; !p.ok || p.src != c.want || math.Abs(p.z) > 4 {
			t.Errorf("%s at %s: %+v, want a %s baseline", c.pod, time.UnixMilli(c.at).UTC().Format(time.RFC3339), p, c.want)
		}
	}

	// Alone (no replica of its model), a young series has no baseline in
	// its first hour and its last hours' one after.
	lone := fileTracker(t, cfg)
	got = feed(lone, tStart, tStart+3*hourMs, tStart, map[string]func(int64) (float64, bool){"x": steady(40, 5)})
	if p := got[tStart+30*minute.Milliseconds()]["x"]; p.ok {
		t.Errorf("a baseline in the series' first hour: %+v", p)
	}
	if p := got[tStart+2*hourMs+30*minute.Milliseconds()]["x"]; !p.ok || p.src != sourceRecent {
		t.Errorf("after two hours: %+v, want a last-hours baseline", p)
	}
}

func TestBaselineConfigValidation(t *testing.T) {
	for _, mut := range []func(*BaselineConfig){
		func(c *BaselineConfig) { c.Mode = "dynamic" },
		func(c *BaselineConfig) { c.K = 0.5 },
		func(c *BaselineConfig) { c.History = model.Duration(time.Hour) },
		func(c *BaselineConfig) { c.MinHistory = c.History + 1 },
		func(c *BaselineConfig) { c.LevelShiftAfter = model.Duration(time.Minute) },
		func(c *BaselineConfig) { c.Signals = []string{"vllm:num_requests_waiting"} },
	} {
		c := DefaultBaselineConfig()
		mut(&c)
		if c.validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := DefaultBaselineConfig().validate(); err != nil {
		t.Fatal(err)
	}
}

func TestEvidenceStrength(t *testing.T) {
	th := func(v float64) *float64 { return &v }
	base := evidenceBase{med: 0.7, sig: 0.05, src: sourceHourOfWeek, ok: true}
	for _, c := range []struct {
		name         string
		sp           evidenceSpec
		peak         float64
		b            evidenceBase
		past, static bool
		st           float64
	}{
		{"an XID past a zero threshold is an event", evidenceSpec{Op: ">", Threshold: th(0)}, 79, evidenceBase{}, true, true, 1},
		{"half past a threshold", evidenceSpec{Op: ">", Threshold: th(100)}, 150, evidenceBase{}, true, true, 0.5},
		{"not past", evidenceSpec{Op: ">", Threshold: th(100)}, 90, evidenceBase{}, false, false, 0},
		// 0.7 -> 0.25 is 9 sigma down: (9-3)/6 = 1.
		{"far below its baseline", evidenceSpec{Op: "<"}, 0.25, base, true, false, 1},
		// 0.7 -> 0.5 is 4 sigma down: (4-3)/6.
		{"just beyond k sigma", evidenceSpec{Op: "<"}, 0.5, base, true, false, 1.0 / 6},
		{"within k sigma", evidenceSpec{Op: "<"}, 0.6, base, false, false, 0},
		{"beyond k sigma the wrong way", evidenceSpec{Op: ">"}, 0.25, base, false, false, 0},
	} {
		past, static, st := itemStrength(c.sp, c.peak, c.b, 3)
		if past != c.past || static != c.static || math.Abs(st-c.st) > 1e-9 {
			t.Errorf("%s: past %v static %v strength %.3f, want %v %v %.3f", c.name, past, static, st, c.past, c.static, c.st)
		}
	}
	if sourceQuality(base) != 1 || sourceQuality(evidenceBase{ok: true, src: sourceReplicas}) >= 1 || sourceQuality(evidenceBase{}) >= 1 {
		t.Error("a young or missing baseline is trusted as much as weeks of history")
	}
}

// TestCalibrationTable: the calibration table maps raw scores in [0, 1]
// onto confidences in [0, 1], strictly increasing (so that it keeps the
// order of any two diagnoses' confidences), through its knots, clamped
// outside [0, 1].
func TestCalibrationTable(t *testing.T) {
	k := calibration
	if len(k) < 2 || k[0][0] != 0 || k[len(k)-1][0] != 1 {
		t.Fatalf("calibration %v: want knots from raw score 0 to 1", k)
	}
	for i := range k {
		if k[i][1] < 0 || k[i][1] > 1 {
			t.Errorf("knot %v: confidence outside [0, 1]", k[i])
		}
		if i > 0 && (k[i][0] <= k[i-1][0] || k[i][1] <= k[i-1][1]) {
			t.Errorf("knots %v, %v: not strictly increasing", k[i-1], k[i])
		}
		if got := calibrate(k[i][0]); math.Abs(got-k[i][1]) > 1e-12 {
			t.Errorf("calibrate(%v) = %v, want the knot's %v", k[i][0], got, k[i][1])
		}
	}
	if calibrate(2) != k[len(k)-1][1] || calibrate(-1) != k[0][1] {
		t.Error("calibration is not clamped outside [0, 1]")
	}
	for x := 0.0; x < 1; x += 0.001 {
		if calibrate(x+0.001) <= calibrate(x) {
			t.Fatalf("calibrate(%.3f) = %v is not above calibrate(%.3f) = %v", x+0.001, calibrate(x+0.001), x, calibrate(x))
		}
	}
}

// TestHourRingPages: only the pages written are allocated, and the page
// table (26 pages for the default 676 hours) with the first of them.
func TestHourRingPages(t *testing.T) {
	var r hourRing
	const h = 500_000
	if _, ok := r.at(h); ok || r.pages != nil {
		t.Fatalf("a new ring reads hour %d, holds %d pages", h, len(r.pages))
	}
	r.set(h, 676, summary{m: 1, d: 2}, nil)
	if len(r.pages) != 26 || r.len() != 702 {
		t.Fatalf("%d pages, %d slots for 676 hours", len(r.pages), r.len())
	}
	if got, ok := r.at(h); !ok || got != (summary{m: 1, d: 2}) {
		t.Errorf("at(h) = %+v, %v", got, ok)
	}
	if _, ok := r.at(h + 1); ok {
		t.Error("an unwritten slot reads back")
	}
	allocated := 0
	for _, p := range r.pages {
		if p != nil {
			allocated++
		}
	}
	if allocated != 1 {
		t.Errorf("%d pages allocated after one write", allocated)
	}
}

// TestHourRingGaps: over series that skip hours, days, about a lap and
// several laps, after each write every hour of the hours asked for
// before the next write (the written hour and the hours-2 before it)
// reads back exactly when it was written, with its summary, and no hour
// reads back that was not written or was overwritten. The hours asked for
// include those whose ring is the bound exactly (677: 702 slots) and one
// hour more (678: 729).
// The pages come from the heap and from a ring file.
func TestHourRingGaps(t *testing.T) {
	for _, hours := range []int{676, 677, 678, 244, 28} {
		for _, where := range []string{"heap", "file"} {
			t.Run(strconv.Itoa(hours)+"/"+where, func(t *testing.T) { testHourRingGaps(t, hours, where == "file") })
		}
	}
}

func testHourRingGaps(t *testing.T, hours int, file bool) {
	var arena *pageArena
	if file {
		arena = testArena(t)
	}
	rng := rand.New(rand.NewPCG(uint64(hours), 13))
	var r hourRing
	written := map[int64]summary{}
	h := int64(500_000 + rng.IntN(1000))
	for i := range 6000 {
		x := summary{m: float32(i), d: float32(h % 997)}
		r.set(h, hours, x, arena)
		if i%50 == 0 {
			arena.release() // the file's pages read back from the page cache
		}
		written[h] = x
		for a := h - r.len() - ringSlots; a <= h+ringSlots; a++ {
			got, ok := r.at(a)
			want, was := written[a]
			switch {
			case a > h-int64(hours)+1 && (ok != was || got != want):
				t.Fatalf("after hour %d: hour %d (%d back) reads %+v, %v; written %+v, %v", h, a, h-a, got, ok, want, was)
			case ok && (!was || got != want):
				t.Fatalf("after hour %d: hour %d (%d back) reads %+v, written %+v, %v", h, a, h-a, got, want, was)
			}
		}
		n := r.len()
		switch p := rng.IntN(100); {
		case p < 60:
			h++
		case p < 75:
			h += 2 + rng.Int64N(30)
		case p < 85:
			h += 24 * (1 + rng.Int64N(6))
		case p < 95: // about a lap: a page's slots of two laps
			h += n - 2*ringSlots + rng.Int64N(4*ringSlots)
		default:
			h += n*(1+rng.Int64N(3)) + rng.Int64N(ringSlots)
		}
	}
}

// TestRingPageSize: a page of the hourly ring fills its size class
// (BenchmarkTrackerFourWeeks: 26 of them per tracked series after four
// weeks).
func TestRingPageSize(t *testing.T) {
	if n := unsafe.Sizeof(ringPage{}); n != 224 {
		t.Errorf("ringPage is %d bytes, not the 224-byte size class", n)
	}
}

// TestTrackerSeriesSize: a tracked series' state fits the 320-byte size
// class (BenchmarkTrackerSeriesBytes counts it 13,600 times at 50,000
// active series).
func TestTrackerSeriesSize(t *testing.T) {
	if n := unsafe.Sizeof(bseries{}); n > 320 {
		t.Errorf("bseries is %d bytes, over the 320-byte size class", n)
	}
}

// TestReplicasEqualTheDirectMedian: the replica baseline computed once per
// group (sorted values, order statistics at shifted indices) equals, to
// the bit, the median and MAD of each series' other replicas collected
// and sorted one series at a time, as the tracker computed it before:
// groups of every size, repeated values, zeros of both signs, and series
// absent at the minute.
func TestReplicasEqualTheDirectMedian(t *testing.T) {
	// direct is the tracker's former computation, kept as the reference.
	direct := func(tr *tracker, s *bseries, ts int64) (float64, float64, bool) {
		var vs []float64
		for _, p := range tr.byMetric[s.metric] {
			if p != s && p.peer == s.peer && p.lastT == ts {
				vs = append(vs, p.x)
			}
		}
		if len(vs) < minReplicas {
			return 0, 0, false
		}
		m := median(vs)
		return m, mad(vs, m), true
	}
	rng := uint64(7)
	next := func(n int) int {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n)) //nolint:gosec // n is small and positive
	}
	const ts = int64(60_000)
	for round := range 300 {
		tr := fileTracker(t, testBaselineConfig())
		var seen []*bseries
		groups := 1 + next(4)
		for i := range 1 + next(40) {
			s := &bseries{metric: waiting, peer: string(rune('a' + next(groups))), lastT: ts}
			switch next(6) {
			case 0:
				s.x = float64(next(3)) // ties
			case 1:
				s.x = math.Copysign(0, -1)
			case 2:
				s.lastT = ts - 60_000 // not at this minute
			default:
				s.x = float64(next(1000))/7 - 50
			}
			s.lbls = labels.FromStrings(model.MetricNameLabel, waiting, "i", string(rune('A'+i)))
			tr.byMetric[waiting] = append(tr.byMetric[waiting], s)
			if s.lastT == ts {
				seen = append(seen, s)
			}
		}
		peers := newPeerValues(seen, tr.byMetric)
		for _, s := range seen {
			wm, wd, wok := direct(tr, s, ts)
			m, d, ok := peers.others(s)
			if ok != wok || math.Float64bits(m) != math.Float64bits(wm) || math.Float64bits(d) != math.Float64bits(wd) {
				t.Fatalf("round %d, series %s (%v in group %s): got %v %v %v, want %v %v %v", round, s.lbls, s.x, s.peer, m, d, ok, wm, wd, wok)
			}
		}
	}
}

// commitSizes is a write-back appendable that records how many samples
// each commit held.
type commitSizes struct {
	commits []int
	labels  map[string]float64
}

func (c *commitSizes) AppenderV2(context.Context) storage.AppenderV2 {
	return &commitSizesApp{c: c}
}

type commitSizesApp struct {
	c *commitSizes
	n int
	p map[string]float64
}

func (a *commitSizesApp) Append(_ storage.SeriesRef, ls labels.Labels, _, _ int64, v float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	if a.p == nil {
		a.p = map[string]float64{}
	}
	a.n++
	a.p[ls.String()] = v
	return 0, nil
}

func (a *commitSizesApp) Commit() error {
	a.c.commits = append(a.c.commits, a.n)
	maps.Copy(a.c.labels, a.p)
	return nil
}

func (a *commitSizesApp) Rollback() error { return nil }

// TestBaselineWriteBackInBatches: a minute's baseline series reach the
// write-back store, every one of them, in commits of at most writeBackBatch
// samples (one commit of a large fleet's first minute held every new
// series' records at once).
func TestBaselineWriteBackInBatches(t *testing.T) {
	store := &commitSizes{labels: map[string]float64{}}
	e := &Engine{o: Options{WriteBack: store, WriteBackDelay: time.Minute}, logger: slog.New(slog.DiscardHandler)}
	n := 2*writeBackBatch + 10
	hs := make([]*scratchHandle, n)
	vs := make([]float64, n)
	for i := range hs {
		hs[i] = &scratchHandle{lbls: labels.FromStrings(model.MetricNameLabel, BaselineMedianSeries, "i", strconv.Itoa(i))}
		vs[i] = float64(i)
	}
	writeBackSink{e}.appendDirect(tStart, hs, vs)
	if want := []int{writeBackBatch, writeBackBatch, 10}; !slices.Equal(store.commits, want) {
		t.Errorf("commits of %v samples, want %v", store.commits, want)
	}
	if len(store.labels) != n {
		t.Fatalf("%d series written back, want %d", len(store.labels), n)
	}
	for i, h := range hs {
		if v := store.labels[h.lbls.String()]; v != float64(i) {
			t.Errorf("%s = %v, want %d", h.lbls, v, i)
		}
	}
}

// TestTrackerHashCollisions: tracked series whose labels share a hash are
// each found, and gc forgets exactly the ones not seen for the history.
func TestTrackerHashCollisions(t *testing.T) {
	tr := fileTracker(t, testBaselineConfig())
	const h = 7
	var ss []*bseries
	for _, pod := range []string{"a", "b", "c"} {
		s := tr.getHash(h, podSeries(pod, "m"))
		s.lastT = tStart
		ss = append(ss, s)
	}
	for i, s := range ss {
		if got := tr.getHash(h, s.lbls); got != s {
			t.Fatalf("series %d: got another series", i)
		}
	}
	ss[1].lastT = tStart + int64(tr.hours+1)*hourMs // "b" stays
	tr.gc(tStart + int64(tr.hours)*hourMs + 1)
	if n := tr.len(); n != 1 {
		t.Fatalf("%d series after gc, want 1", n)
	}
	if tr.getHash(h, ss[1].lbls) != ss[1] {
		t.Fatal("the kept series was lost")
	}
	if tr.getHash(h, ss[0].lbls) == ss[0] {
		t.Fatal("a forgotten series was found")
	}
}

// TestNoBaselineWritesNothing: a series with no baseline (no history, too
// few replicas) gets no baseline series, in the scratch store or written
// back, and no label sets for them; its replicas' series are written once
// a third replica appears.
func TestNoBaselineWritesNothing(t *testing.T) {
	tr := fileTracker(t, testBaselineConfig())
	sc := newScratch()
	store := &commitSizes{labels: map[string]float64{}}
	e := &Engine{o: Options{WriteBack: store, WriteBackDelay: time.Minute}, logger: slog.New(slog.DiscardHandler)}
	pods := []string{"a", "b"}
	minuteOf := func(ts int64) map[string][]sampleAt {
		var v []sampleAt
		for i, p := range pods {
			v = append(v, sampleAt{podSeries(p, "m"), float64(i + 1)})
		}
		return map[string][]sampleAt{waiting: v}
	}
	tr.minute(tStart, minuteOf(tStart), sc, writeBackSink{e})
	for _, s := range tr.byMetric[waiting] {
		if s.out != nil {
			t.Errorf("%s: baseline series made without a baseline", s.lbls)
		}
	}
	if n, _ := sc.samples(); n != 1 { // strata:baseline:k alone
		t.Errorf("%d scratch series, want 1 (strata:baseline:k)", n)
	}
	if len(store.labels) != 1 {
		t.Errorf("written back: %v, want strata:baseline:k alone", store.labels)
	}
	pods = append(pods, "c")
	ts := tStart + minute.Milliseconds()
	tr.minute(ts, minuteOf(ts), sc, writeBackSink{e})
	if n, _ := sc.samples(); n != 1+3*3 {
		t.Errorf("%d scratch series, want 10", n)
	}
	if len(store.labels) != 1+3*2 { // median and sigma: no z-scores by default
		t.Errorf("%d series written back, want 7", len(store.labels))
	}
	for _, s := range tr.byMetric[waiting] {
		if _, _, _, _, ok := sc.baselineAt(s, ts); !ok {
			t.Errorf("%s: no baseline at the second minute", s.lbls)
		}
		if _, _, _, _, ok := sc.baselineAt(s, tStart); ok {
			t.Errorf("%s: a baseline at the first minute", s.lbls)
		}
	}
}

// namesSink counts the baseline series a sink is given, by name.
type namesSink struct {
	z     bool
	names map[string]int
}

func (n *namesSink) appendDirect(_ int64, hs []*scratchHandle, _ []float64) {
	for _, h := range hs {
		n.names[h.lbls.Get(model.MetricNameLabel)]++
	}
}

func (n *namesSink) zscores() bool { return n.z }

// TestBaselineZScoreWriteBack: the engine's own store gets every baseline
// series of a minute; the write-back gets the z-scores only with
// diagnose.baseline.write_back_zscore, and the median, sigma and k always.
func TestBaselineZScoreWriteBack(t *testing.T) {
	series := map[string]func(int64) (float64, bool){"a": steady(10, 1), "b": steady(10, 2), "c": steady(10, 3)}
	ts := tStart + 10*minute.Milliseconds()
	for _, withZ := range []bool{false, true} {
		tr := fileTracker(t, testBaselineConfig())
		feed(tr, tStart, ts, math.MaxInt64, series)
		var vals []sampleAt
		for pod, f := range series {
			v, _ := f(ts)
			vals = append(vals, sampleAt{podSeries(pod, "m"), v})
		}
		own := &namesSink{z: true, names: map[string]int{}}
		store := &commitSizes{labels: map[string]float64{}}
		cfg := DefaultConfig()
		cfg.Baseline.WriteBackZScore = withZ
		e := &Engine{cfg: cfg, o: Options{WriteBack: store, WriteBackDelay: time.Minute}, logger: slog.New(slog.DiscardHandler)}
		tr.minute(ts, map[string][]sampleAt{waiting: vals}, own, writeBackSink{e})

		want := map[string]int{BaselineMedianSeries: 3, BaselineSigmaSeries: 3, AnomalyZScoreSeries: 3, BaselineKSeries: 1}
		if !maps.Equal(own.names, want) {
			t.Fatalf("engine's store got %v, want %v", own.names, want)
		}
		if !withZ {
			delete(want, AnomalyZScoreSeries)
		}
		back := map[string]int{}
		for ls := range store.labels {
			// The series' String(): {__name__="<name>", ...}.
			name, _, _ := strings.Cut(strings.TrimPrefix(ls, `{__name__="`), `"`)
			back[name]++
		}
		if !maps.Equal(back, want) {
			t.Errorf("write_back_zscore %v: written back %v, want %v", withZ, back, want)
		}
	}
}
