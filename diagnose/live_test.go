package diagnose

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/rulegen"
	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/tiers"
)

// recorder is a Sink keeping what the live engine reported.
type recorder struct {
	mu        sync.Mutex
	e         *Engine
	firstLive time.Time
	cutoff    time.Time
	atCutoff  []Diagnosis
	last      time.Time
}

func (r *recorder) Update(u Update) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !u.WarmingUp && r.firstLive.IsZero() {
		r.firstLive = u.T
	}
	if u.T.Equal(r.cutoff) {
		r.atCutoff = r.e.Diagnoses()
	}
	r.last = u.T
}

func (r *recorder) lastT() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// livePipeline is an in-process `strata serve` data path: a raw tier, the
// rollup pipeline fed through its tee, and the engine following its mark
// with write-back into the raw tier.
type livePipeline struct {
	raw      *tiers.Raw
	minute   *tiers.Rollup
	pipe     *downsample.Pipeline
	app      storage.AppendableV2
	clock    time.Time
	clockMu  sync.Mutex
	engine   *Engine
	rec      *recorder
	cancel   context.CancelFunc
	finished chan struct{}
	from     int64 // feed skips samples before (ms): fed before a restart
}

func newLivePipeline(t *testing.T, cfg Config, cutoff time.Time, sinks ...Sink) *livePipeline {
	t.Helper()
	raw, minute, hour := openLiveTiers(t)
	return newLivePipelineOn(t, cfg, cutoff, raw, minute, hour, sinks...)
}

// openLiveTiers opens a raw, a minute and an hour tier in a new directory.
func openLiveTiers(t *testing.T) (*tiers.Raw, *tiers.Rollup, *tiers.Rollup) {
	t.Helper()
	dir := t.TempDir()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(dir+"/raw"), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	minute, hour := openTiers(t, dir)
	return raw, minute, hour
}

// newLivePipelineOn is newLivePipeline over tiers already open (a restart):
// the baselines go to the minute tier alone, and the recorded series take
// the raw head's label sets, as strata serve wires them.
func newLivePipelineOn(t *testing.T, cfg Config, cutoff time.Time, raw *tiers.Raw, minute, hour *tiers.Rollup, sinks ...Sink) *livePipeline {
	t.Helper()
	lp := &livePipeline{raw: raw, minute: minute, finished: make(chan struct{})}
	dcfg := downsample.DefaultConfig()
	dcfg.DirectGrace = downsample.DefaultDirectGrace // as strata serve
	var err error
	lp.pipe, err = downsample.New(dcfg, raw, minute, hour, quietLogger(), prometheus.NewRegistry(), lp.now)
	if err != nil {
		t.Fatal(err)
	}
	lp.app = lp.pipe.Tee(raw)
	lp.rec = &recorder{cutoff: cutoff}
	lp.engine, err = New(cfg, Options{
		Minute: minute, Open: lp.pipe, WriteBack: lp.app, WriteBackDelay: dcfg.Lateness + time.Minute,
		Baselines: lp.pipe.Direct(), Labels: raw,
		Sinks: append([]Sink{lp.rec}, sinks...), Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	lp.rec.e = lp.engine
	ctx, cancel := context.WithCancel(context.Background())
	lp.cancel = cancel
	go func() {
		defer close(lp.finished)
		_ = lp.engine.Run(ctx, lp.pipe)
	}()
	t.Cleanup(func() {
		lp.cancel()
		<-lp.finished
		_ = lp.pipe.Close()
	})
	return lp
}

func (lp *livePipeline) now() time.Time {
	lp.clockMu.Lock()
	defer lp.clockMu.Unlock()
	return lp.clock
}

// feed runs the simulator to end at 15 s steps, appending through the tee
// and ticking the pipeline every simulated minute, then waits until the
// engine has evaluated every final minute.
func (lp *livePipeline) feed(t *testing.T, cfg sim.Config, end time.Time) {
	t.Helper()
	c, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	app := lp.app.AppenderV2(ctx)
	lastTick := cfg.Start
	err = c.Backfill(cfg.Start, end, 15*time.Second, func(l labels.Labels, ts int64, v float64) error {
		if ts < lp.from {
			return nil // fed before a restart
		}
		if now := time.UnixMilli(ts); now.Sub(lastTick) >= time.Minute {
			if err := app.Commit(); err != nil {
				return err
			}
			app = lp.app.AppenderV2(ctx)
			lp.clockMu.Lock()
			lp.clock = now
			lp.clockMu.Unlock()
			lastTick = now
			if err := lp.pipe.Tick(ctx); err != nil {
				return err
			}
		}
		_, err := app.Append(0, l, 0, ts, v, nil, nil, storage.AppendV2Options{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := lp.pipe.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	mark, _ := lp.pipe.Mark()
	want := time.UnixMilli(mark).Add(-time.Minute)
	for i := 0; i < 6000 && lp.rec.lastT().Before(want); i++ {
		time.Sleep(10 * time.Millisecond) // the engine's goroutine catches up; bounded (60 s)
	}
	if got := lp.rec.lastT(); got.Before(want) {
		t.Fatalf("live engine evaluated up to %s, mark wants %s", got.Format(time.RFC3339), want.Format(time.RFC3339))
	}
}

// TestLiveEqualsReplay is the engine's core invariant: the simulator's
// fault pushed through the live data path (raw tier, rollup pipeline, engine
// following the mark, write-back) gives exactly the diagnoses that a replay
// of the same data directory gives afterwards (ids, causes, entities, start,
// end, confidence, evidence: the whole JSON).
func TestLiveEqualsReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates four hours through the live pipeline")
	}
	cutoff := simStart.Add(3*time.Hour + 59*time.Minute) // hour 03 is flushed once the feed reaches 04:20
	scfg := smallCluster(sim.FaultSpec{Kind: sim.KindKVCacheStorm, Node: 0, GPU: gpu(2), At: faultAt, Duration: 20 * time.Minute})
	lp := newLivePipeline(t, DefaultConfig(), cutoff)
	lp.feed(t, scfg, simStart.Add(4*time.Hour+20*time.Minute))
	// The engine's last minutes are spilled, and hour 03, which waited
	// for its baselines (the test's engine lags the feed), is written.
	if err := lp.pipe.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	lp.rec.mu.Lock()
	live, from := lp.rec.atCutoff, lp.rec.firstLive
	lp.rec.mu.Unlock()
	if len(live) == 0 {
		t.Fatal("the live engine diagnosed nothing")
	}
	replayed, err := Replay(context.Background(), DefaultConfig(), Options{Minute: lp.minute, Logger: quietLogger()}, from, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	var liveIn []Diagnosis
	for _, d := range live {
		if d.Overlaps(from, cutoff) {
			liveIn = append(liveIn, d)
		}
	}
	a, _ := json.MarshalIndent(liveIn, "", " ")
	b, _ := json.MarshalIndent(replayed, "", " ")
	if string(a) != string(b) {
		t.Fatalf("live and replay differ:\nlive:\n%s\nreplay:\n%s", a, b)
	}
	if liveIn[0].Cause != string(sim.KindKVCacheStorm) {
		t.Errorf("diagnosed %s", liveIn[0].Cause)
	}
	checkReachTrimmed(t, lp)
	// The baselines were written back to the minute tier, not the raw tier
	// (the test's engine lags the feed by hours: those of the hours written
	// before it caught up are dropped, as late samples are).
	q, err := lp.raw.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// The z-scores stay the engine's (diagnose.baseline.write_back_zscore).
	for _, name := range []string{BaselineMedianSeries, BaselineSigmaSeries, AnomalyZScoreSeries, BaselineKSeries} {
		m := labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, name)
		ss := q.Select(context.Background(), false, nil, m)
		if ss.Next() || ss.Err() != nil {
			t.Errorf("%s written to the raw tier (%v)", name, ss.Err())
		}
		sw, err := lp.minute.Select(context.Background(), 0, math.MaxInt64/2, m)
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for k := range directWindows(lp.pipe, 0) {
			if strings.Contains(k, `__name__="`+name+`"`) {
				open++
			}
		}
		if want := name != AnomalyZScoreSeries; (len(sw)+open > 0) != want {
			t.Errorf("%d %s series in the minute tier's partitions, %d windows not yet", len(sw), name, open)
		}
	}
}

// TestBaselinesAfterRestart: a crash loses the baselines' direct windows
// of the hours not yet in a partition (the pipeline's spill is not read
// again); the restarted engine's start-up read-back writes them again, the
// same values the live engine wrote.
func TestBaselinesAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates four hours through the live pipeline")
	}
	raw, minute, hour := openLiveTiers(t)
	scfg := smallCluster()
	// After the end of hour 03, before its partition (the watermark 5
	// minutes past it): the restart's first ticks find it final, and it
	// waits for the engine (downsample.Config.DirectGrace). The warm-up
	// (30 minutes here; by default 2h15m, which covers what a crash
	// loses unless the server was down for an hour) writes again its
	// last half hour, the read-back what is before. The restart is fed 10
	// minutes: the hour also waits for the engine's minutes to leave it
	// (their snapshots start 9 minutes back: downsample.Pipeline.HoldReads).
	crash := simStart.Add(4*time.Hour + 10*time.Minute)
	cfg := DefaultConfig()
	cfg.Warmup = model.Duration(30 * time.Minute)
	lp1 := newLivePipelineOn(t, cfg, crash, raw, minute, hour)
	lp1.feed(t, scfg, crash)
	if err := lp1.pipe.Tick(context.Background()); err != nil { // spill what the engine wrote since the feed's last tick
		t.Fatal(err)
	}
	_, end, _ := minute.Bounds()
	if end != simStart.Add(3*time.Hour).UnixMilli() {
		t.Fatalf("minute tier up to %s at the crash, want hour 03 open", time.UnixMilli(end).UTC())
	}
	before := directWindows(lp1.pipe, end)
	if len(before) == 0 {
		t.Fatal("no baseline windows past the minute tier's last partition")
	}
	// Crash: the engine stops, the pipeline is dropped without Close.
	lp1.cancel()
	<-lp1.finished
	lp2 := newLivePipelineOn(t, cfg, crash, raw, minute, hour)
	lp2.from = crash.UnixMilli()
	lp2.clock = crash
	lp2.feed(t, scfg, crash.Add(10*time.Minute))
	if err := lp2.pipe.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := directWindows(lp2.pipe, end)
	if _, hi, _ := minute.Bounds(); hi <= end {
		t.Fatal("hour 03 was not written after the restart")
	}
	written, err := minute.Select(context.Background(), end, math.MaxInt64/2, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "strata:baseline:.*"))
	if err != nil {
		t.Fatal(err)
	}
	var c windowMap
	c.out = after
	for _, s := range written {
		c.Series(s.Labels, s.Windows)
	}
	n := 0
	for k, w := range before {
		got, ok := after[k]
		if !ok {
			t.Errorf("%s lost in the restart", k)
			continue
		}
		if got != w {
			t.Errorf("%s: %+v after the restart, %+v before", k, got, w)
		}
		n++
	}
	if n < 100 {
		t.Fatalf("only %d baseline windows compared", n)
	}
}

// directWindows is the pipeline's direct windows (the baselines) starting at
// from or later, by series and start.
func directWindows(p *downsample.Pipeline, from int64) map[string]tiers.Window {
	c := &windowMap{out: map[string]tiers.Window{}}
	p.DirectWindows().VisitOpenWindows(from, math.MaxInt64/2, c)
	return c.out
}

type windowMap struct{ out map[string]tiers.Window }

func (c *windowMap) Want(labels.Labels) (int64, bool) { return math.MinInt64, true }
func (c *windowMap) Series(lset labels.Labels, ws []tiers.Window) {
	for _, w := range ws {
		c.out[lset.String()+"@"+time.UnixMilli(w.Start).UTC().Format(time.RFC3339)] = w
	}
}

// TestReplayFastPathEqualsInstant: replay's range-query fast path gives
// exactly the diagnoses of minute-by-minute instant evaluation (two
// overlapping faults, chunk boundaries inside them).
func TestReplayFastPathEqualsInstant(t *testing.T) {
	if testing.Short() {
		t.Skip("replays four hours twice")
	}
	minute, end := fourHours(t,
		sim.FaultSpec{Kind: sim.KindKVCacheStorm, Node: 0, GPU: gpu(2), At: faultAt, Duration: 40 * time.Minute},
		sim.FaultSpec{Kind: sim.KindThermalThrottle, Node: 0, GPU: gpu(0), At: faultAt + 20*time.Minute, Duration: 30 * time.Minute},
	)
	run := func(fast bool) []byte {
		e, err := New(DefaultConfig(), Options{Minute: minute, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if fast && !fastPathSafe(e.groups) {
			t.Fatal("the default pack does not qualify for the fast path")
		}
		ds, err := e.replay(context.Background(), simStart.Add(2*time.Hour), end, fast)
		if err != nil {
			t.Fatal(err)
		}
		if fast && e.precomp == nil {
			t.Fatal("fast path not used")
		}
		b, _ := json.MarshalIndent(ds, "", " ")
		return b
	}
	fast, instant := run(true), run(false)
	if string(fast) != string(instant) {
		t.Fatalf("fast path and instant evaluation differ:\nfast:\n%s\ninstant:\n%s", fast, instant)
	}
	if len(instant) < 100 {
		t.Fatalf("nothing diagnosed: %s", instant)
	}
}

// TestReplayChunkSizeDoesNotMatter: a replay whose chunks are cut to the
// shortest (as they are where the rules read hundreds of thousands of
// series: nextChunk) gives the diagnoses, baselines included, of one that
// loads six hours at a time; the baselines' read-back is chunked the same
// way.
func TestReplayChunkSizeDoesNotMatter(t *testing.T) {
	if testing.Short() {
		t.Skip("replays four hours twice")
	}
	minute, end := fourHours(t,
		sim.FaultSpec{Kind: sim.KindKVCacheStorm, Node: 0, GPU: gpu(2), At: faultAt, Duration: 40 * time.Minute},
		sim.FaultSpec{Kind: sim.KindPowerCap, Node: 0, GPU: gpu(3), At: faultAt + 25*time.Minute, Duration: 20 * time.Minute},
	)
	run := func(windows int) ([]byte, time.Duration) {
		defer func(w int) { chunkWindows = w }(chunkWindows)
		chunkWindows = windows
		e, err := New(DefaultConfig(), Options{Minute: minute, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ds, err := e.replay(context.Background(), simStart.Add(2*time.Hour+7*time.Minute), end, true)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.MarshalIndent(ds, "", " ")
		return b, e.chunk
	}
	whole, wholeChunk := run(chunkWindows)
	cut, cutChunk := run(1)
	if wholeChunk != ReplayChunk || cutChunk != firstChunk {
		t.Fatalf("chunks of %s and %s, want %s and %s", wholeChunk, cutChunk, ReplayChunk, firstChunk)
	}
	if string(whole) != string(cut) {
		t.Fatalf("six-hour and %s chunks differ:\n%s\n%s", firstChunk, whole, cut)
	}
	if len(whole) < 100 || !strings.Contains(string(whole), `"baseline_source"`) {
		t.Fatalf("nothing diagnosed with a baseline: %s", whole)
	}
}

// TestBootstrapChunkSizeDoesNotMatter: the baselines read back from the
// minute tier at start are the same whether the read-back loads six hours
// at a time or the shortest chunks: every tracked series' state after it,
// to the bit.
func TestBootstrapChunkSizeDoesNotMatter(t *testing.T) {
	if testing.Short() {
		t.Skip("reads back four hours twice")
	}
	minute, end := fourHours(t)
	tm := end.Add(-7 * time.Minute).UnixMilli()
	state := func(windows int) string {
		defer func(w int) { chunkWindows = w }(chunkWindows)
		chunkWindows = windows
		e, err := New(DefaultConfig(), Options{Minute: minute, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.bootstrap(context.Background(), tm); err != nil {
			t.Fatal(err)
		}
		return trackerState(t, e)
	}
	whole, cut := state(chunkWindows), state(1)
	if whole != cut {
		t.Fatalf("six-hour and %s chunks read back different baselines:\n%s\n\n%s", firstChunk, whole, cut)
	}
}

// trackerState is every tracked series' baseline state, to the bit, but
// for what writing its baseline series sets (lastOut, out), which a
// read-back does not write.
func trackerState(t *testing.T, e *Engine) string {
	t.Helper()
	var out []string
	for _, list := range e.base.byMetric {
		for _, s := range list {
			out = append(out, fmt.Sprintf("%s med=%x sig=%x rec=%x/%x/%x/%v src=%d x=%x@%d cur=%v@%d repl=%x srcs=%v/%v seas=%v ring=%s",
				s.lbls, math.Float64bits(s.med), math.Float64bits(s.sig), math.Float64bits(s.recMed), math.Float64bits(s.recSig),
				math.Float64bits(s.recNoise), s.hasRec, s.src, math.Float64bits(s.x), s.lastT, s.cur, s.hour,
				s.repl, s.srcHour, s.srcOf, s.seas, ringState(e.base, s)))
		}
	}
	if len(out) < 50 {
		t.Fatalf("%d tracked series read back", len(out))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// ringState is the summaries a baseline after the tracker's last minute
// may read of s's ring.
func ringState(tr *tracker, s *bseries) string {
	var b strings.Builder
	last := floorDiv(tr.done, hourMs)
	for h := last - int64(tr.hours) + 2; h <= last; h++ {
		if x, ok := s.ring.at(h); ok {
			fmt.Fprintf(&b, "%d:%x/%x ", h, math.Float32bits(x.m), math.Float32bits(x.d))
		}
	}
	return b.String()
}

// failingOpen is an open-window source holding nothing that cancels a
// context at its fail-th read (every snapshot reads it first), and records
// where each read starts.
type failingOpen struct {
	fail   int
	cancel context.CancelFunc
	mu     sync.Mutex // a read-back beside live evaluation reads too
	starts []int64
}

func (f *failingOpen) VisitOpenWindows(mint, _ int64, _ tiers.OpenWindowSink, _ ...*labels.Matcher) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.starts = append(f.starts, mint); len(f.starts) == f.fail {
		f.cancel()
	}
}

// TestBootstrapResumes: a read-back that fails in a chunk goes on from
// that chunk at the next attempt, not from its first minute, and ends with
// the baselines of one that never failed.
func TestBootstrapResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("reads back four hours twice")
	}
	defer func(w int) { chunkWindows = w }(chunkWindows)
	chunkWindows = 1 // 10-minute chunks: about 24 of them
	minute, end := fourHours(t)
	tm := end.Add(-7 * time.Minute).UnixMilli()
	whole, err := New(DefaultConfig(), Options{Minute: minute, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := whole.bootstrap(context.Background(), tm); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := &failingOpen{fail: 6, cancel: cancel}
	e, err := New(DefaultConfig(), Options{Minute: minute, Open: open, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.bootstrap(ctx, tm); err == nil {
		t.Fatal("the read-back did not fail")
	}
	if e.base.booted || e.boot == nil {
		t.Fatal("a failed read-back left no state to resume")
	}
	failed := e.boot.next
	if failed <= e.boot.from {
		t.Fatalf("the read-back failed at its first minute (%s): nothing to resume", fmtMs(failed))
	}
	open.starts, open.fail = nil, 0
	if err := e.bootstrap(context.Background(), tm); err != nil {
		t.Fatal(err)
	}
	if len(open.starts) == 0 || open.starts[0] != failed-e.need {
		t.Fatalf("the second attempt read from %s, want %s (the failed chunk)", fmtMs(open.starts[0]), fmtMs(failed-e.need))
	}
	if got, want := trackerState(t, e), trackerState(t, whole); got != want {
		t.Fatalf("a resumed read-back's baselines differ from one that never failed:\n%s\n\n%s", got, want)
	}
}

// TestReadBackLeft: the read-back's estimate of the time it has left, at
// the pace of the minutes with data read so far: those of the minute
// tier's partitions.
func TestReadBackLeft(t *testing.T) {
	m, h := minute.Milliseconds(), time.Hour.Milliseconds()
	rb := &readBack{from: 0, to: 10*h - m, t0: time.Now().Add(-12 * time.Minute)}
	// Hours 0, 1, 2, 5 and 7 hold data, the others none.
	var parts []tiers.PartitionInfo
	for _, x := range []int64{0, 1, 2, 5, 7} {
		parts = append(parts, tiers.PartitionInfo{Start: x * h, End: (x + 1) * h})
	}
	for _, tc := range []struct {
		at   int64
		want time.Duration
	}{
		{2 * h, 18 * time.Minute},   // 2 hours of data in 12 minutes, 3 ahead (2, 5, 7)
		{4 * h, 8 * time.Minute},    // 3 in 12 minutes, 2 ahead: the empty hours count for nothing (18m if they counted)
		{30 * m, 108 * time.Minute}, // half an hour in 12 minutes, 4.5 ahead
		{0, 0},                      // nothing read yet: no pace to go by
		{9 * h, 0},                  // no data ahead
	} {
		if got := rb.left(tc.at, parts); got != tc.want {
			t.Errorf("at %s: %s left, want %s", time.Duration(tc.at)*time.Millisecond, got, tc.want)
		}
	}
}

// TestNextChunk: six hours where the rules read few series, fewer where a
// chunk would hold more than chunkWindows windows, never below firstChunk.
func TestNextChunk(t *testing.T) {
	e := &Engine{need: (9 * time.Minute).Milliseconds()}
	for _, tc := range []struct {
		series int
		want   time.Duration
	}{
		{0, ReplayChunk},
		{1_000, ReplayChunk},
		{10_000, ReplayChunk},                     // 419 minutes of 4 Mi windows
		{100_000, 41*time.Minute - 9*time.Minute}, // the need's 9 read before
		{500_000, firstChunk},
	} {
		if got := e.nextChunk(tc.series); got != tc.want {
			t.Errorf("%d series: chunk %s, want %s", tc.series, got, tc.want)
		}
	}
}

// TestReplayStartDoesNotMatter: replays that start at different minutes
// (neither on an hour) give the same diagnoses once warmed up: every
// baseline is read back from the minute tier before the first minute, so
// it does not depend on where the run started.
func TestReplayStartDoesNotMatter(t *testing.T) {
	if testing.Short() {
		t.Skip("replays four hours twice")
	}
	at := 3*time.Hour + 12*time.Minute
	minute, end := fourHours(t,
		sim.FaultSpec{Kind: sim.KindUnderBatched, Node: 0, GPU: gpu(1), At: at, Duration: 20 * time.Minute},
		sim.FaultSpec{Kind: sim.KindPowerCap, Node: 0, GPU: gpu(3), At: at + 5*time.Minute, Duration: 20 * time.Minute},
	)
	early, late := simStart.Add(2*time.Hour+7*time.Minute), simStart.Add(2*time.Hour+53*time.Minute)
	a, err := Replay(context.Background(), DefaultConfig(), Options{Minute: minute, Logger: quietLogger()}, early, end)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Replay(context.Background(), DefaultConfig(), Options{Minute: minute, Logger: quietLogger()}, late, end)
	if err != nil {
		t.Fatal(err)
	}
	var aIn []Diagnosis
	for _, d := range a {
		if d.Overlaps(late, end) {
			aIn = append(aIn, d)
		}
	}
	ja, _ := json.MarshalIndent(aIn, "", " ")
	jb, _ := json.MarshalIndent(b, "", " ")
	if string(ja) != string(jb) {
		t.Fatalf("replays from %s and %s differ:\n%s\n%s", early.Format("15:04"), late.Format("15:04"), ja, jb)
	}
	if len(b) < 2 {
		t.Fatalf("expected both faults diagnosed:%s", describe(b))
	}
	withBaseline := false
	for _, d := range b {
		for _, ev := range d.Evidence {
			withBaseline = withBaseline || ev.Baseline != nil
		}
	}
	if !withBaseline {
		t.Fatal("no evidence carries a baseline")
	}
}

// newestWholeSnapshot returns the newest final minute of lp's pipeline and
// a snapshot of every window and column the engine's rules could read up
// to it, failing t when the default rules have no reach (nothing would be
// cut) or the pipeline no mark.
func newestWholeSnapshot(t *testing.T, lp *livePipeline) (int64, *tiers.MinuteSnapshot) {
	t.Helper()
	e := lp.engine
	if e.reach == nil {
		t.Fatal("the default rules have no reach: every window and column is read")
	}
	mark, ok := lp.pipe.Mark()
	if !ok {
		t.Fatal("no mark")
	}
	tm := mark/minute.Milliseconds()*minute.Milliseconds() - minute.Milliseconds()
	whole, err := e.view.Snapshot(context.Background(), tm-e.need, tm, e.readMatchers()...)
	if err != nil {
		t.Fatal(err)
	}
	return tm, whole
}

// checkReachTrimmed: the signals evaluated over a snapshot of the
// pipeline's open windows cut to the rules' reach (what the live engine
// reads) equal those over the whole snapshot, bit for bit, at the newest
// final minute; and the cut snapshot holds fewer windows.
func checkReachTrimmed(t *testing.T, lp *livePipeline) {
	t.Helper()
	e := lp.engine
	ctx := context.Background()
	tm, whole := newestWholeSnapshot(t, lp)
	cut, err := e.view.SnapshotFrom(ctx, tm-e.need, tm, e.reach.fromFunc(tm), e.readMatchers()...)
	if err != nil {
		t.Fatal(err)
	}
	count := func(q storage.Queryable) int {
		v, err := rules.EngineQueryFunc(e.promql, q)(ctx, `sum(count_over_time(vllm:request_success_total[9m]))`, time.UnixMilli(tm))
		if err != nil || len(v) != 1 {
			t.Fatalf("count windows: %v %v", v, err)
		}
		return int(v[0].F)
	}
	if w, c := count(whole), count(cut); c >= w {
		t.Errorf("the cut snapshot counts %d samples, the whole %d: nothing cut", c, w)
	}
	nonEmpty := 0
	for _, r := range e.signalsGroup.Rules() {
		qs := e.forms.Internal(r.Query().String())
		eval := func(q storage.Queryable) map[string]uint64 {
			v, err := rules.EngineQueryFunc(e.promql, rulegen.RenamingQueryable(q))(ctx, qs, time.UnixMilli(tm))
			if err != nil {
				t.Fatalf("%s: %v", qs, err)
			}
			out := map[string]uint64{}
			for _, s := range v {
				out[s.Metric.String()] = math.Float64bits(s.F)
			}
			return out
		}
		want, got := eval(whole), eval(cut)
		nonEmpty += len(want)
		if !maps.Equal(got, want) {
			t.Errorf("%s: %v over the cut snapshot, %v over the whole", r.Name(), got, want)
		}
	}
	if nonEmpty == 0 {
		t.Error("no signal had a value: the comparison is vacuous")
	}
}

// TestLiveSignalsShareRawLabels: live, a series the engine records for the
// first time takes the label set of the raw head's series with the same
// labels (strata serve's canonical rules record the same signals there)
// instead of a copy of its own. A first live run gives the label sets the
// engine records; a second one, over a raw tier that already holds a
// series for each (written before the feed, as the canonical rules would),
// must record every one of them with the head's own label set.
func TestLiveSignalsShareRawLabels(t *testing.T) {
	if unsafe.Sizeof(labels.Labels{}) != unsafe.Sizeof("") {
		t.Skip("labels are not one string in this build")
	}
	scfg := smallCluster()
	end := simStart.Add(40 * time.Minute)
	recorded := func(e *Engine) []labels.Labels {
		e.scratch.mu.RLock()
		defer e.scratch.mu.RUnlock()
		var out []labels.Labels
		for name, list := range e.scratch.byName {
			if !strings.HasPrefix(name, "strata:") || strings.HasPrefix(name, "strata:baseline:") || strings.HasPrefix(name, "strata:anomaly:") {
				continue
			}
			for _, s := range list {
				out = append(out, s.lbls)
			}
		}
		return out
	}
	first := newLivePipeline(t, DefaultConfig(), end)
	first.feed(t, scfg, end)
	sets := recorded(first.engine)
	if len(sets) < 10 {
		t.Fatalf("the engine recorded %d signal series", len(sets))
	}

	raw, minute, hour := openLiveTiers(t)
	app := raw.AppenderV2(context.Background())
	for _, l := range sets {
		if _, err := app.Append(0, l.Copy(), 0, simStart.Add(-time.Minute).UnixMilli(), 1, nil, nil, storage.AppendV2Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	second := newLivePipelineOn(t, DefaultConfig(), end, raw, minute, hour)
	second.feed(t, scfg, end)
	look := raw.AppenderV2(context.Background())
	defer func() { _ = look.Rollback() }()
	gr := look.(storage.GetRef)
	shared, own := 0, 0
	for _, l := range recorded(second.engine) {
		ref, held := gr.GetRef(l, l.Hash())
		if ref == 0 {
			continue
		}
		if unsafe.StringData(*(*string)(unsafe.Pointer(&l))) == unsafe.StringData(*(*string)(unsafe.Pointer(&held))) {
			shared++
		} else {
			own++
		}
	}
	if shared == 0 || own > 0 {
		t.Fatalf("%d recorded series share the raw head's label set, %d have a copy of their own", shared, own)
	}
	t.Logf("%d recorded series share the raw head's label sets", shared)
}
