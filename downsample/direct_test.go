package downsample

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// directFeed drives a pipeline as strata serve does: a raw series through
// the tee every 15 s (it moves the watermark) and, once a minute, direct
// series stamped at the newest raw time, as the diagnosis engine stamps
// its baselines (T + the lateness + a minute, about now).
type directFeed struct {
	t       *testing.T
	raw     *tiers.Raw
	clock   *testClock
	series  []labels.Labels
	written map[string][]tiers.Window // every direct window, as written
	// goneAt: the series' stale marker time (its last window is then
	// Stale); 0: never.
	goneAt map[string]int64
}

func newDirectFeed(t *testing.T, raw *tiers.Raw, clock *testClock, n int) *directFeed {
	f := &directFeed{t: t, raw: raw, clock: clock, written: map[string][]tiers.Window{}, goneAt: map[string]int64{}}
	for i := range n {
		f.series = append(f.series, labelsFor("strata:baseline:median", "metric", "gpu_util", "gpu", fmt.Sprint(i)))
	}
	return f
}

// directValue is series i's value at t: distinct, and not a whole number.
func directValue(i int, t int64) float64 { return float64(i) + float64(t/MinuteRes%1000)/7 }

// run feeds (from, to] in 15 s steps, ticking p after each; write false
// feeds the raw series only (the direct writer is down); p nil feeds raw
// alone (the server is down, its senders are not). stopAt: series 0
// stops there, with a stale marker at its next minute.
func (f *directFeed) run(p *Pipeline, from, to int64, write bool, stopAt int64) {
	f.t.Helper()
	ctx := context.Background()
	var tee, direct storage.AppendableV2 = f.raw, nil
	if p != nil {
		tee, direct = p.Tee(f.raw), p.Direct()
	}
	for t := from + 15_000; t <= to; t += 15_000 {
		app := tee.AppenderV2(ctx)
		if _, err := app.Append(0, labelsFor("up", "job", "x"), 0, t, 1, nil, nil, storage.AppendV2Options{}); err != nil {
			f.t.Fatal(err)
		}
		if err := app.Commit(); err != nil {
			f.t.Fatal(err)
		}
		if write && t%MinuteRes == 0 {
			f.writeMinute(direct, t, stopAt)
		}
		f.clock.t = time.UnixMilli(t)
		if p == nil {
			continue
		}
		if err := p.Tick(ctx); err != nil {
			f.t.Fatal(err)
		}
	}
}

// writeMinute writes every direct series' sample at t.
func (f *directFeed) writeMinute(direct storage.AppendableV2, t, stopAt int64) {
	app := direct.AppenderV2(context.Background())
	for i, ls := range f.series {
		k := ls.String()
		v := directValue(i, t)
		if i == 0 && stopAt != 0 && t > stopAt {
			if f.goneAt[k] != 0 {
				continue
			}
			f.goneAt[k] = t
			v = math.Float64frombits(value.StaleNaN)
			ws := f.written[k]
			ws[len(ws)-1].Stale = true
		} else {
			f.written[k] = upsert(f.written[k], tiers.Window{Start: timegrid.Floor(t, MinuteRes), FirstT: t, LastT: t, Count: 1,
				Sum: v, Min: v, Max: v, First: v, Last: v})
		}
		if _, err := app.Append(0, ls, 0, t, v, nil, nil, storage.AppendV2Options{}); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		f.t.Fatal(err)
	}
}

// upsert puts w in ws (ascending by start), replacing a window of its minute.
func upsert(ws []tiers.Window, w tiers.Window) []tiers.Window {
	i, found := slices.BinarySearchFunc(ws, w.Start, func(x tiers.Window, t int64) int { return cmp.Compare(x.Start, t) })
	if found {
		ws[i] = w
		return ws
	}
	return slices.Insert(ws, i, w)
}

// check compares the minute tier's windows of the direct series in the
// hours [from, to) with what was written.
func (f *directFeed) check(minute *memTier, from, to int64) {
	f.t.Helper()
	got, err := minute.Select(context.Background(), from, to-1, labels.MustNewMatcher(labels.MatchEqual, "__name__", "strata:baseline:median"))
	if err != nil {
		f.t.Fatal(err)
	}
	byKey := map[string][]tiers.Window{}
	for _, s := range got {
		byKey[s.Labels.String()] = s.Windows
	}
	for _, ls := range f.series {
		k := ls.String()
		var want []tiers.Window
		for _, w := range f.written[k] {
			if w.Start >= from && w.Start < to {
				want = append(want, w)
			}
		}
		checkSeries(f.t, "direct "+k, []tiers.SeriesWindows{{Labels: ls, Windows: byKey[k]}}, []tiers.SeriesWindows{{Labels: ls, Windows: want}})
	}
}

// TestDirectSeries: direct series reach the minute tier's partitions
// exactly as written (one sample, one window; the stale marker after a
// series' last sample marks its window), never the raw tier, and are
// visible to DirectWindows after the tick that follows their write, long
// before the watermark passes them.
func TestDirectSeries(t *testing.T) {
	raw := openTestRaw(t)
	minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
	start := testStart
	clock := &testClock{t: time.UnixMilli(start)}
	p, err := New(testConfig(), raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	f := newDirectFeed(t, raw, clock, 5)
	stopAt := start + 90*MinuteRes
	f.run(p, start, start+2*HourRes+30*MinuteRes, true, stopAt)

	// Visible at once: the newest minute written, ten minutes ahead of the mark.
	last := timegrid.Floor(clock.t.UnixMilli(), MinuteRes)
	if mark, _ := p.Mark(); mark > last-5*MinuteRes {
		t.Fatalf("mark %s is not behind the newest direct minute %s", fmtTime(mark), fmtTime(last))
	}
	var c windowCopies
	p.DirectWindows().VisitOpenWindows(last, last, &c)
	if len(c.out) != len(f.series)-1 {
		t.Fatalf("DirectWindows at the newest minute: %d series, want %d", len(c.out), len(f.series)-1)
	}
	// Only direct series: the raw series' open windows are not handed over.
	c = windowCopies{}
	p.DirectWindows().VisitOpenWindows(start, last, &c, labels.MustNewMatcher(labels.MatchEqual, "__name__", "up"))
	if len(c.out) != 0 {
		t.Fatalf("DirectWindows handed over %d raw series", len(c.out))
	}
	// Not among the open windows the diagnosis engine reads (VisitOpenWindows).
	for _, sw := range p.OpenWindowsIn(start, last) {
		if sw.Labels.Get("__name__") == "strata:baseline:median" {
			t.Fatalf("VisitOpenWindows handed over a direct series: %s", sw.Labels)
		}
	}
	// Never in raw.
	q, err := raw.Querier(start, last+MinuteRes)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "strata:baseline:median")); set.Next() {
		t.Fatalf("a direct series is in the raw tier: %s", set.At().Labels())
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	f.check(minute, start, start+2*HourRes)
	if f.goneAt[f.series[0].String()] == 0 {
		t.Fatal("series 0 was never marked stale")
	}
}

// newGracePipelineParts opens what a pipeline with a direct writer is made
// of, as strata serve configures it (Config.DirectGrace), its clock at
// testStart.
func newGracePipelineParts(t *testing.T) (*tiers.Raw, *memTier, *memTier, *testClock, Config) {
	t.Helper()
	cfg := testConfig()
	cfg.DirectGrace = DefaultDirectGrace
	return openTestRaw(t), newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), &testClock{t: time.UnixMilli(testStart)}, cfg
}

// TestDirectSeriesRestart: a crash loses the open hours' direct windows
// (the spill is not read again); written again after the restart, as the
// diagnosis engine's start-up read-back writes its baselines again, they
// reach the partitions complete.
//
// The crash comes after the end of an hour not yet written (its flush
// waits for the lateness and 5 minutes), and the server is down until that
// hour is final: with Config.DirectGrace its partition waits for the
// writer, which writes past it; without, the first tick would write it
// from raw alone.
func TestDirectSeriesRestart(t *testing.T) {
	raw, minute, hour, clock, cfg := newGracePipelineParts(t)
	start := testStart
	p1, err := New(cfg, raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	f := newDirectFeed(t, raw, clock, 3)
	crashAt := start + 2*HourRes + 5*MinuteRes
	f.run(p1, start, crashAt, true, 0)
	if !minute.HasPartition(start) || minute.HasPartition(start+HourRes) {
		t.Fatal("the crash must come with the first hour written and the second open")
	}
	// Crash: p1 is dropped without Close; down until the second hour is final.
	downUntil := crashAt + 15*MinuteRes
	f.run(nil, crashAt, downUntil, false, 0)
	p2, err := New(cfg, raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	clock.t = time.UnixMilli(downUntil)
	if err := p2.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The writer writes again what the minute tier does not hold.
	direct := p2.Direct()
	for m := start + HourRes; m <= downUntil; m += MinuteRes {
		f.writeMinute(direct, m, 0)
	}
	f.run(p2, downUntil, start+3*HourRes+20*MinuteRes, true, 0)
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
	f.check(minute, start, start+3*HourRes)
}

// TestFlushWaitsForReadHold: with Config.DirectGrace, an hour's partition
// waits while the open windows' reader (the diagnosis engine) holds a
// window of the hour (HoldReads); it is written at the first tick after the
// hold leaves the hour, whole, and at the grace's end if the hold never
// does. Released (ReleaseReads), an hour is written at its flush time.
func TestFlushWaitsForReadHold(t *testing.T) {
	raw, minute, hour, clock, cfg := newGracePipelineParts(t)
	start := testStart
	written := &optsTier{memTier: minute, opts: map[int64]tiers.WriteOptions{}}
	p, err := New(cfg, raw, written, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	f := newDirectFeed(t, raw, clock, 3)
	// flushAt is when hour h is flushable: the newest sample the lateness
	// and StaleLookahead past its end.
	flushAt := func(h int64) int64 { return h + HourRes + StaleLookahead + cfg.Lateness.Milliseconds() }
	p.HoldReads(start + HourRes - MinuteRes) // the hour's last minute
	at := flushAt(start) + 10*MinuteRes
	f.run(p, start, at, true, 0)
	if minute.HasPartition(start) {
		t.Fatal("the first hour was written while its last minute was held")
	}
	p.HoldReads(start + HourRes)
	f.run(p, at, at+15_000, true, 0)
	if !minute.HasPartition(start) {
		t.Fatal("the first hour was not written at the tick after the hold left it")
	}
	f.check(minute, start, start+HourRes)

	// Held inside the second hour for good: written at the grace's end.
	p.HoldReads(start + HourRes + 30*MinuteRes)
	graceEnd := flushAt(start+HourRes) + cfg.DirectGrace.Milliseconds()
	f.run(p, at+15_000, graceEnd-15_000, true, 0)
	if minute.HasPartition(start + HourRes) {
		t.Fatal("the second hour was written within the grace while held")
	}
	f.run(p, graceEnd-15_000, graceEnd, true, 0)
	if !minute.HasPartition(start + HourRes) {
		t.Fatal("the second hour was not written at the grace's end")
	}

	// Released: the third hour is written at its flush time (the direct
	// writer is past it).
	p.ReleaseReads()
	f.run(p, graceEnd, flushAt(start+2*HourRes), true, 0)
	if !minute.HasPartition(start + 2*HourRes) {
		t.Fatal("the third hour was not written at its flush time after the hold was released")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	f.check(minute, start, start+3*HourRes)
	// A series table only for the hours whose reads were still held (the
	// second), or with no hold (the third): the first was written once
	// the reader had left it.
	for i, want := range []bool{true, false, false} {
		if got := written.opts[start+int64(i)*HourRes].NoSeriesTable; got != want {
			t.Errorf("hour %d written with NoSeriesTable %v, want %v", i, got, want)
		}
	}
}

// TestNoReaderNoSeriesTable: a pipeline that waits for no reader
// (DirectGrace zero: strata serve without the diagnosis engine) writes its
// partitions without a series table.
func TestNoReaderNoSeriesTable(t *testing.T) {
	raw, minute, hour, clock, cfg := newGracePipelineParts(t)
	cfg.DirectGrace = 0
	written := &optsTier{memTier: minute, opts: map[int64]tiers.WriteOptions{}}
	p, err := New(cfg, raw, written, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	f := newDirectFeed(t, raw, clock, 2)
	f.run(p, testStart, testStart+HourRes+StaleLookahead+cfg.Lateness.Milliseconds()+MinuteRes, true, 0)
	o, ok := written.opts[testStart]
	if !ok || !o.NoSeriesTable {
		t.Fatalf("the first hour written %v, with NoSeriesTable %v; want true, true", ok, o.NoSeriesTable)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// optsTier is a memTier written one series at a time, which records each
// partition's write options.
type optsTier struct {
	*memTier
	opts map[int64]tiers.WriteOptions
}

func (o *optsTier) WritePartitionSeries(start int64, series iter.Seq2[tiers.SeriesWindows, error], opts tiers.WriteOptions) error {
	var all []tiers.SeriesWindows
	for s, err := range series {
		if err != nil {
			return err
		}
		all = append(all, tiers.SeriesWindows{Labels: s.Labels, Windows: slices.Clone(s.Windows)})
	}
	o.opts[start] = opts
	return o.WritePartition(start, all)
}
