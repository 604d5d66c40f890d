package backfill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

const (
	minute = downsample.MinuteRes
	hour   = downsample.HourRes
	day    = downsample.DayLen
)

// testKindOf types history's series as the metric catalogue that cmd/strata
// wires in does: DCGM_FI_DEV_GPU_UTIL is a gauge, the others are counters.
var testKindOf = downsample.GaugesByName(func(name string) bool { return name == "DCGM_FI_DEV_GPU_UTIL" })

// testConfig is DefaultConfig with testKindOf.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.KindOf = testKindOf
	return cfg
}

// history is days of 30 s samples: gauges, counters with resets (some exactly
// on hour boundaries) and a series that goes stale for a while every 5 hours.
func history(start, end int64) []Series {
	mk := func(name string, kv ...string) labels.Labels {
		return labels.FromStrings(append([]string{model.MetricNameLabel, name}, kv...)...)
	}
	out := []Series{
		{Labels: mk("DCGM_FI_DEV_GPU_UTIL", "gpu", "0")},
		{Labels: mk("DCGM_FI_DEV_GPU_UTIL", "gpu", "1")},
		{Labels: mk("vllm:request_success_total", "pod", "a")},
		{Labels: mk("vllm:request_success_total", "pod", "b")},
		{Labels: mk("flappy")},
	}
	var c0, c1 float64
	for k, t := int64(0), start; t < end; k, t = k+1, t+30_000 {
		out[0].Samples = append(out[0].Samples, Sample{t, float64(k * 7 % 100)})
		out[1].Samples = append(out[1].Samples, Sample{t, float64(k * 3 % 100)})
		c0 += float64(k % 5)
		if t%(7*hour) == 0 {
			c0 = 0 // reset exactly on an hour boundary
		}
		c1 += 2
		if k%331 == 100 {
			c1 = 1
		}
		out[2].Samples = append(out[2].Samples, Sample{t, c0})
		out[3].Samples = append(out[3].Samples, Sample{t, c1})
		switch phase := (t - start) % (5 * hour); {
		case phase < 10*minute:
			if phase < 30_000 {
				out[4].Samples = append(out[4].Samples, Sample{t, math.Float64frombits(value.StaleNaN)})
			}
		default:
			out[4].Samples = append(out[4].Samples, Sample{t, float64(k % 13)})
		}
	}
	return out
}

type env struct {
	raw          *tiers.Raw
	minute, hour *tiers.Rollup
}

func openEnv(t *testing.T, withRaw bool) env {
	t.Helper()
	var e env
	var err error
	if withRaw {
		cfg := tiers.DefaultRawConfig(t.TempDir())
		cfg.Retention = 30 * 24 * time.Hour
		if e.raw, err = tiers.OpenRaw(cfg, promslog.NewNopLogger(), nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.raw.Close() })
	}
	if e.minute, err = tiers.OpenRollup(tiers.DefaultMinuteConfig(t.TempDir()), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.minute.Close() })
	if e.hour, err = tiers.OpenRollup(tiers.DefaultHourConfig(t.TempDir()), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.hour.Close() })
	return e
}

func (e env) targets() Targets { return Targets{Raw: e.raw, Minute: e.minute, Hour: e.hour} }

// reference computes the windows of [from, to) at res straight from input.
func reference(t *testing.T, input []Series, res, from, to int64) []tiers.SeriesWindows {
	t.Helper()
	var out []tiers.SeriesWindows
	for _, s := range normalized(input) {
		ws, _, err := downsample.AppendWindows(nil, storage.NewListSeriesIterator(samplesView(s.Samples)), res, from, to, testKindOf.Of(s.Labels))
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) > 0 {
			out = append(out, tiers.SeriesWindows{Labels: s.Labels, Windows: ws})
		}
	}
	return out
}

func same(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

func checkPartition(t *testing.T, what string, tier *tiers.Rollup, start, length int64, want []tiers.SeriesWindows) {
	t.Helper()
	if !tier.HasPartition(start) {
		t.Errorf("%s: partition missing", what)
		return
	}
	got, err := tier.Select(context.Background(), start, start+length-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d series, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if !labels.Equal(got[i].Labels, want[i].Labels) || len(got[i].Windows) != len(want[i].Windows) {
			t.Errorf("%s: series %d %s with %d windows, want %s with %d", what, i, got[i].Labels, len(got[i].Windows), want[i].Labels, len(want[i].Windows))
			continue
		}
		for j, g := range got[i].Windows {
			w := want[i].Windows[j]
			if g.Start != w.Start || g.FirstT != w.FirstT || g.LastT != w.LastT || g.Count != w.Count || g.Resets != w.Resets ||
				g.Stale != w.Stale || !same(g.Sum, w.Sum) || !same(g.Min, w.Min) || !same(g.Max, w.Max) ||
				!same(g.First, w.First) || !same(g.Last, w.Last) || !same(g.Increase, w.Increase) {
				t.Errorf("%s %s window %d:\n got %+v\nwant %+v", what, got[i].Labels, j, g, w)
				break
			}
		}
	}
}

// countRaw counts raw's samples at or after from. Tests that count what went
// into the head pass the cutoff: the blocks a backfill writes behind it are
// served only after the TSDB's next block reload (once a minute), so
// counting them would depend on the test's speed.
func countRaw(t *testing.T, raw *tiers.Raw, from int64) int {
	t.Helper()
	q, err := raw.Querier(from, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+"))
	n := 0
	for set.Next() {
		it := set.At().Iterator(nil)
		for it.Next() != 0 {
			n++
		}
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

var (
	histStart = time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC).UnixMilli()
	histEnd   = histStart + 3*day + 2*hour
)

// TestBackfillThenPipeline backfills three days of history (the last day
// into raw), then lets the downsample pipeline roll up what went into raw,
// and checks every minute and hour partition against a from-scratch
// computation.
func TestBackfillThenPipeline(t *testing.T) {
	t.Run("raw", func(t *testing.T) { testBackfillThenPipeline(t, false) })
	// The pipeline runs in the same process, fed by its Tee, and the backfill
	// appends to raw through the tee.
	t.Run("tee", func(t *testing.T) { testBackfillThenPipeline(t, true) })
}

func testBackfillThenPipeline(t *testing.T, viaTee bool) {
	input := history(histStart, histEnd)
	e := openEnv(t, true)
	cfg := testConfig()
	now := histEnd + 15*minute
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	dsCfg := downsample.DefaultConfig()
	dsCfg.KindOf = testKindOf
	p, err := downsample.New(dsCfg, e.raw, e.minute, e.hour, nil, prometheus.NewRegistry(), cfg.Now)
	if err != nil {
		t.Fatal(err)
	}
	targets := e.targets()
	if viaTee {
		targets.RawAppendable = p.Tee(e.raw)
	}
	var phases []string
	res, err := Run(context.Background(), cfg, input, targets, func(p Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
		if p.Done > p.Total {
			t.Errorf("progress %d/%d", p.Done, p.Total)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(phases) != "[minute hour raw blocks raw]" {
		t.Errorf("phases %v", phases)
	}
	// Raw is empty: the head takes what it holds live, from the hour a
	// block duration (an hour) before now; the rest of the retention goes
	// into blocks.
	cutoff := timegrid.Floor(now-hour, hour)
	wantRaw, wantBlocks := 0, 0
	for _, s := range normalized(input) {
		for _, x := range s.Samples {
			switch {
			case x.T >= cutoff:
				wantRaw++
			case x.T >= now-24*hour:
				wantBlocks++
			}
		}
	}
	if got := countRaw(t, e.raw, cutoff); res.RawSamples != wantRaw || got != wantRaw {
		t.Errorf("raw holds %d samples from the cutoff (reported %d), want %d", got, res.RawSamples, wantRaw)
	}
	if res.RawBlockSamples != wantBlocks {
		t.Errorf("%d samples in raw blocks, want the %d of the retention before the cutoff", res.RawBlockSamples, wantBlocks)
	}
	if h := e.raw.DB().Head(); h.MinTime() < cutoff {
		t.Errorf("the head starts at %s, before the cutoff %s", fmtMs(h.MinTime()), fmtMs(cutoff))
	}
	for h := timegrid.Floor(histStart, hour); h < cutoff; h += hour {
		checkPartition(t, "minute "+time.UnixMilli(h).UTC().String(), e.minute, h, hour, reference(t, input, minute, h, h+hour))
	}
	if e.minute.HasPartition(cutoff) {
		t.Error("backfill wrote a minute partition at or after the cutoff: it belongs to the pipeline")
	}

	// The pipeline takes over from raw.
	if err := p.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.BuildHours(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	lastFlushable := timegrid.Floor(histEnd-10*minute-downsample.StaleLookahead, hour) - hour
	for h := timegrid.Floor(histStart, hour); h <= lastFlushable; h += hour {
		checkPartition(t, "minute "+time.UnixMilli(h).UTC().String(), e.minute, h, hour, reference(t, input, minute, h, h+hour))
	}
	for d := timegrid.Floor(histStart, day); d+day <= lastFlushable; d += day {
		checkPartition(t, "hour "+time.UnixMilli(d).UTC().String(), e.hour, d, day, reference(t, input, hour, d, d+day))
	}
}

// TestBackfillResume interrupts a backfill twice (once while writing
// partitions, once while filling raw), resumes it from its progress file and
// checks the result equals an uninterrupted backfill's.
func TestBackfillResume(t *testing.T) {
	input := history(histStart, histEnd)
	now := histEnd + 15*minute
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	cfg.BatchSize = 500

	clean := openEnv(t, true)
	want, err := Run(context.Background(), cfg, input, clean.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}

	e := openEnv(t, true)
	cfg.ProgressFile = filepath.Join(t.TempDir(), "progress.json")
	for _, stop := range []func(Progress) bool{
		func(p Progress) bool { return p.Phase == "minute" && p.Done == 20 },
		func(p Progress) bool { return p.Phase == "raw" && p.Done > 0 && p.Done < p.Total },
	} {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := Run(ctx, cfg, input, e.targets(), func(p Progress) {
			if stop(p) {
				cancel()
			}
		})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted run returned %v, want context.Canceled", err)
		}
	}
	// An unfinished backfill's progress file refuses another input.
	other := history(histStart, histEnd-hour)
	if _, err := Run(context.Background(), cfg, other, e.targets(), nil); !errors.Is(err, ErrProgressMismatch) {
		t.Errorf("another input while one is unfinished = %v, want ErrProgressMismatch", err)
	}
	if _, err := Run(context.Background(), cfg, input, e.targets(), nil); err != nil {
		t.Fatal(err)
	}
	cutoff := timegrid.Floor(now-hour, hour)
	if got, wantN := countRaw(t, e.raw, cutoff), countRaw(t, clean.raw, cutoff); got != wantN {
		t.Errorf("resumed backfill put %d samples in raw, uninterrupted %d", got, wantN)
	}
	if want.RawSamples == 0 || want.PartitionsWritten == 0 {
		t.Fatalf("nothing backfilled: %+v", want)
	}
	for _, p := range clean.minute.Partitions() {
		got, _ := clean.minute.Select(context.Background(), p.Start, p.End-1)
		checkPartition(t, "resumed minute", e.minute, p.Start, hour, got)
	}
	for _, p := range clean.hour.Partitions() {
		got, _ := clean.hour.Select(context.Background(), p.Start, p.End-1)
		checkPartition(t, "resumed hour", e.hour, p.Start, day, got)
	}
	if len(e.minute.Partitions()) != len(clean.minute.Partitions()) || len(e.hour.Partitions()) != len(clean.hour.Partitions()) {
		t.Errorf("resumed run has %d/%d partitions, uninterrupted %d/%d", len(e.minute.Partitions()), len(e.hour.Partitions()),
			len(clean.minute.Partitions()), len(clean.hour.Partitions()))
	}

	// The same input again has nothing to do; once it is finished,
	// another input is another backfill, with a progress file of its own.
	again, err := Run(context.Background(), cfg, input, e.targets(), nil)
	if err != nil || again.PartitionsWritten != 0 || again.RawSamples != 0 || again.RawBlockSamples != 0 {
		t.Errorf("the finished input again: %+v, %v; want nothing written", again, err)
	}
	next := []Series{{Labels: labels.FromStrings(model.MetricNameLabel, "next_import"), Samples: []Sample{{histStart - 5*hour, 1}, {histStart - 5*hour + minute, 2}}}}
	res, err := Run(context.Background(), cfg, next, e.targets(), nil)
	if err != nil || res.PartitionsWritten == 0 {
		t.Fatalf("another input after a finished one: %+v, %v", res, err)
	}
	if st, err := loadProgress(cfg.ProgressFile); err != nil || st.Input != fingerprint(normalized(next)) || !st.Complete {
		t.Errorf("progress file after the second import: %+v, %v", st, err)
	}
}

// TestBackfillNeverOverwrites checks that an existing minute partition (the
// live pipeline's, or an earlier import's) is left alone.
func TestBackfillNeverOverwrites(t *testing.T) {
	input := history(histStart, histStart+3*hour)
	e := openEnv(t, false)
	existing := []tiers.SeriesWindows{{
		Labels:  labels.FromStrings(model.MetricNameLabel, "already_there"),
		Windows: []tiers.Window{{Start: histStart + hour, FirstT: histStart + hour, LastT: histStart + hour, Count: 1, Sum: 1, Min: 1, Max: 1, First: 1, Last: 1}},
	}}
	if err := e.minute.WritePartition(histStart+hour, existing); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(histStart + 4*hour) }
	res, err := Run(context.Background(), cfg, input, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.PartitionsSkipped != 1 {
		t.Errorf("skipped %d partitions, want 1", res.PartitionsSkipped)
	}
	checkPartition(t, "existing", e.minute, histStart+hour, hour, existing)
	checkPartition(t, "backfilled", e.minute, histStart, hour, reference(t, input, minute, histStart, histStart+hour))
}

func TestBackfillDropsBeyondHourRetention(t *testing.T) {
	input := history(histStart, histStart+2*hour)
	e := openEnv(t, false)
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(histStart + 400*day) }
	res, err := Run(context.Background(), cfg, input, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.PartitionsWritten != 0 || res.DroppedSamples == 0 {
		t.Errorf("data older than the hour retention: %+v, want everything dropped", res)
	}
}

// TestBackfillRawBlocks: a raw tier that already holds the last half hour
// (a server ran), then 30 hours of history backfilled up to it: the part
// within the raw retention behind the head goes into raw as blocks, so after
// a restart raw answers 20 hours back with exactly the input's samples;
// nothing older than the retention is in raw; a resumed run writes no block
// twice.
func TestBackfillRawBlocks(t *testing.T) {
	e := openEnv(t, true)
	now := histEnd
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	cfg.ProgressFile = filepath.Join(t.TempDir(), "progress.json")
	all := history(now-30*hour, now)
	past, wantBlocks := appendLive(t, e.raw, all, now)

	res, err := Run(context.Background(), cfg, past, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.RawBlockSamples != wantBlocks {
		t.Fatalf("RawBlockSamples = %d, want the %d behind the head within the retention", res.RawBlockSamples, wantBlocks)
	}
	// Each block spans at most the raw tier's block duration (an hour),
	// aligned to it, as the head's own blocks do.
	span := e.raw.BlockDuration().Milliseconds()
	metas := writtenBlocks(t, e.raw)
	if len(metas) == 0 {
		t.Fatal("no raw block written")
	}
	for _, m := range metas {
		if m.Compaction.Level == 1 && timegrid.Floor(m.MinTime, span) != timegrid.Floor(m.MaxTime-1, span) {
			t.Errorf("block %s spans %s to %s, more than one range of %s", m.ULID, time.UnixMilli(m.MinTime).UTC(), time.UnixMilli(m.MaxTime).UTC(), e.raw.BlockDuration())
		}
	}

	// A restart loads the blocks.
	raw := reopenRaw(t, e.raw)

	// Every sample of the 20 minutes ending 20 hours back, exactly.
	from, to := now-20*hour-20*minute, now-20*hour
	q, err := raw.Querier(from, to)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]Sample{}
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+"))
	for set.Next() {
		it := set.At().Iterator(nil)
		for it.Next() != 0 {
			ts, v := it.At()
			got[set.At().Labels().String()] = append(got[set.At().Labels().String()], Sample{ts, v})
		}
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil { // before raw.Close, which waits for readers
		t.Fatal(err)
	}
	for _, s := range normalized(all) {
		var want []Sample
		for _, x := range s.Samples {
			if x.T >= from && x.T <= to {
				want = append(want, x)
			}
		}
		g := got[s.Labels.String()]
		if len(g) != len(want) {
			t.Errorf("%s: %d samples in raw 20h back, want %d", s.Labels, len(g), len(want))
			continue
		}
		for i := range want {
			if g[i].T != want[i].T || math.Float64bits(g[i].V) != math.Float64bits(want[i].V) {
				t.Errorf("%s sample %d: got %v, want %v", s.Labels, i, g[i], want[i])
				break
			}
		}
	}
	if mint, _, ok := raw.Bounds(); !ok || mint < now-24*hour {
		t.Errorf("raw starts at %s, want within the 24h retention (from %s)", time.UnixMilli(mint).UTC(), time.UnixMilli(now-24*hour).UTC())
	}

	// Resuming writes no block again.
	blocks := len(raw.DB().Blocks())
	raw2 := reopenRaw(t, raw)
	e.raw = raw2
	res2, err := Run(context.Background(), cfg, past, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res2.RawBlockSamples != 0 || res2.RawSamples != 0 || res2.PartitionsWritten != 0 {
		t.Errorf("resumed run wrote %d samples in raw blocks, %d in the head and %d partitions, want none", res2.RawBlockSamples, res2.RawSamples, res2.PartitionsWritten)
	}
	if n := len(raw2.DB().Blocks()); n != blocks {
		t.Errorf("%d raw blocks after the resumed run, want %d", n, blocks)
	}
}

// appendLive appends all's samples of the last half hour before now to raw,
// as a server that ran would have, and returns the rest (the history to
// backfill) and how many of its samples belong in raw blocks: those behind
// the hour that holds raw's oldest sample, within the 24 h retention.
func appendLive(t *testing.T, raw *tiers.Raw, all []Series, now int64) (past []Series, inBlocks int) {
	t.Helper()
	app := raw.AppenderV2(context.Background())
	for _, s := range all {
		i := len(s.Samples)
		for i > 0 && s.Samples[i-1].T >= now-30*minute {
			i--
		}
		past = append(past, Series{Labels: s.Labels, Samples: s.Samples[:i]})
		for _, x := range s.Samples[i:] {
			if _, err := app.Append(0, s.Labels, 0, x.T, x.V, nil, nil, storage.AppendV2Options{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	cutoff := timegrid.Floor(now-30*minute, hour)
	for _, s := range normalized(past) {
		for _, x := range s.Samples {
			if x.T >= now-24*hour && x.T < cutoff {
				inBlocks++
			}
		}
	}
	return past, inBlocks
}

// writtenBlocks reads the meta.json of every block in raw's directory,
// loaded by the TSDB or not yet.
func writtenBlocks(t *testing.T, raw *tiers.Raw) []tsdb.BlockMeta {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(raw.DB().Dir(), "*", "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	var metas []tsdb.BlockMeta
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m tsdb.BlockMeta
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		metas = append(metas, m)
	}
	return metas
}

// TestBackfillRawBlocksResumeRange: a resume goes on with the span of the
// raw blocks its first run wrote, whatever block duration the raw tier has
// been reopened with; so does one whose progress file predates the recorded
// span (every block of 2 h then). No sample is written into two blocks.
func TestBackfillRawBlocksResumeRange(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%t", legacy), func(t *testing.T) {
			e := openEnv(t, true)
			two := e.raw.Config()
			two.BlockDuration = 2 * time.Hour
			e.raw = reopenRawConfig(t, e.raw, two)
			now := histEnd
			cfg := testConfig()
			cfg.Now = func() time.Time { return time.UnixMilli(now) }
			cfg.ProgressFile = filepath.Join(t.TempDir(), "progress.json")
			past, wantBlocks := appendLive(t, e.raw, history(now-30*hour, now), now)

			// The first run stops after its third raw block.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res1, err := Run(ctx, cfg, past, e.targets(), func(p Progress) {
				if p.Phase == "raw blocks" && p.Done == 3 {
					cancel()
				}
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("first run: %v, want it cancelled", err)
			}
			if res1.RawBlockSamples == 0 || res1.RawBlockSamples >= wantBlocks {
				t.Fatalf("first run wrote %d samples into raw blocks, want some of %d", res1.RawBlockSamples, wantBlocks)
			}
			if legacy {
				b, err := os.ReadFile(cfg.ProgressFile)
				if err != nil {
					t.Fatal(err)
				}
				var st map[string]any
				d := json.NewDecoder(bytes.NewReader(b))
				d.UseNumber() // the int64 marks exactly
				if err := d.Decode(&st); err != nil {
					t.Fatal(err)
				}
				if st["raw_block_range"] != json.Number(fmt.Sprint(2*hour)) {
					t.Fatalf("progress file records raw_block_range %v, want %d", st["raw_block_range"], 2*hour)
				}
				delete(st, "raw_block_range")
				if b, err = json.Marshal(st); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(cfg.ProgressFile, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}

			// Resumed with blocks of an hour.
			one := e.raw.Config()
			one.BlockDuration = time.Hour
			e.raw = reopenRawConfig(t, e.raw, one)
			res2, err := Run(context.Background(), cfg, past, e.targets(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := res1.RawBlockSamples + res2.RawBlockSamples; got != wantBlocks {
				t.Errorf("the two runs wrote %d samples into raw blocks, want %d", got, wantBlocks)
			}
			// The history of the cutoff's hour before the live samples
			// is written into a block marked out of order (gap.go).
			inBlocks, inGap := 0, 0
			for _, m := range writtenBlocks(t, e.raw) {
				if m.Compaction.FromOutOfOrder() {
					inGap += int(m.Stats.NumSamples)
				} else {
					inBlocks += int(m.Stats.NumSamples)
				}
			}
			wantGap := 0
			for _, s := range normalized(past) {
				for _, x := range s.Samples {
					if x.T >= timegrid.Floor(now-30*minute, hour) {
						wantGap++
					}
				}
			}
			if inBlocks != wantBlocks || inGap != wantGap || res2.RawGapSamples != wantGap {
				t.Errorf("the raw blocks hold %d samples and the gap blocks %d (counted %d), want %d and %d", inBlocks, inGap, res2.RawGapSamples, wantBlocks, wantGap)
			}
		})
	}
}

// reopenRaw closes raw and opens its directory again with the same
// configuration, as a restart does: the new one has loaded the blocks a
// backfill wrote.
func reopenRaw(t *testing.T, raw *tiers.Raw) *tiers.Raw {
	t.Helper()
	return reopenRawConfig(t, raw, raw.Config())
}

// reopenRawConfig closes raw and opens its directory with cfg.
func reopenRawConfig(t *testing.T, raw *tiers.Raw, cfg tiers.RawConfig) *tiers.Raw {
	t.Helper()
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := tiers.OpenRaw(cfg, promslog.NewNopLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// testHistogram is the i-th sample of a growing native histogram counter.
func testHistogram(i int) *histogram.Histogram {
	n := uint64(i + 1)
	return &histogram.Histogram{Count: 2*n + 1, ZeroCount: 1, ZeroThreshold: 0.001, Sum: float64(i),
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{int64(n), 0}}
}

// TestBackfillHistograms: native histograms, integer and float, over 30
// hours up to a raw tier that holds the last half hour: those within the raw
// retention go to raw (as blocks behind the head, into the head after it)
// and come back exactly after a restart; older ones are dropped and
// counted; none reach a rollup partition; a float at a histogram's
// timestamp gives way to it; a resumed run writes nothing again.
func TestBackfillHistograms(t *testing.T) {
	e := openEnv(t, true)
	now := histEnd
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	cfg.ProgressFile = filepath.Join(t.TempDir(), "progress.json")
	app := e.raw.AppenderV2(context.Background())
	if _, err := app.Append(0, labels.FromStrings(model.MetricNameLabel, "live"), 0, now-30*minute, 1, nil, nil, storage.AppendV2Options{}); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	ints := Series{Labels: labels.FromStrings(model.MetricNameLabel, "h_int")}
	floats := Series{Labels: labels.FromStrings(model.MetricNameLabel, "h_float")}
	mixed := Series{Labels: labels.FromStrings(model.MetricNameLabel, "mixed")}
	for i, ts := 0, now-30*hour; ts < now; i, ts = i+1, ts+time.Minute.Milliseconds() {
		ints.Histograms = append(ints.Histograms, HistogramSample{T: ts, H: testHistogram(i)})
		floats.Histograms = append(floats.Histograms, HistogramSample{T: ts, FH: testHistogram(2 * i).ToFloat(nil)})
		// mixed: floats every minute, a histogram every tenth minute at
		// the same time as a float.
		mixed.Samples = append(mixed.Samples, Sample{ts, float64(i)})
		if i%10 == 0 {
			mixed.Histograms = append(mixed.Histograms, HistogramSample{T: ts, H: testHistogram(i)})
		}
	}
	input := []Series{ints, floats, mixed}
	res, err := Run(context.Background(), cfg, input, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var kept, dropped int
	for _, s := range input {
		for _, x := range s.Histograms {
			if x.T >= now-24*hour {
				kept++
			} else {
				dropped++
			}
		}
	}
	if res.HistogramSamples != kept || res.DroppedHistogramSamples != dropped {
		t.Fatalf("histogram samples written %d, dropped %d; want %d and %d", res.HistogramSamples, res.DroppedHistogramSamples, kept, dropped)
	}

	// No rollup partition holds a histogram series; mixed's floats other
	// than those at a histogram's timestamp are rolled up.
	h := timegrid.Floor(now-27*hour, hour)
	got, err := e.minute.Select(context.Background(), h, h+hour-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Labels.Get(model.MetricNameLabel) != "mixed" {
		t.Fatalf("minute partition %s holds %d series, want mixed only", time.UnixMilli(h).UTC(), len(got))
	}
	var count uint32
	for _, w := range got[0].Windows {
		count += w.Count
	}
	if count != 54 {
		t.Errorf("mixed's floats rolled up in an hour: %d, want 54 (60 less the 6 at a histogram's timestamp)", count)
	}

	// A restart loads the blocks: raw holds every kept sample, exactly.
	raw := reopenRaw(t, e.raw)
	q, err := raw.Querier(now-30*hour, now)
	if err != nil {
		t.Fatal(err)
	}
	type point struct {
		t  int64
		v  float64
		fh *histogram.FloatHistogram
	}
	read := map[string][]point{}
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "h_.*|mixed"))
	for set.Next() {
		it := set.At().Iterator(nil)
		name := set.At().Labels().Get(model.MetricNameLabel)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			var p point
			switch vt {
			case chunkenc.ValFloat:
				p.t, p.v = it.At()
			default:
				p.t, p.fh = it.AtFloatHistogram(nil)
			}
			read[name] = append(read[name], p)
		}
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(read["mixed"]); n != 24*60 {
		t.Errorf("mixed has %d samples in raw, want one a minute for 24 hours (%d)", n, 24*60)
	}
	for _, s := range normalized(input) {
		var want []point
		c := cursorAt(&s, now-24*hour)
		for {
			ts, v, h, fh, ok := c.next()
			if !ok {
				break
			}
			if h != nil {
				fh = h.ToFloat(nil)
			}
			want = append(want, point{ts, v, fh})
		}
		name := s.Labels.Get(model.MetricNameLabel)
		g := read[name]
		if len(g) != len(want) {
			t.Errorf("%s: %d samples in raw, want %d", name, len(g), len(want))
			continue
		}
		for i := range want {
			w := want[i]
			if g[i].t != w.t || (w.fh == nil) != (g[i].fh == nil) || w.fh == nil && g[i].v != w.v || w.fh != nil && !g[i].fh.Equals(w.fh) {
				t.Errorf("%s sample %d: got %d %v %v, want %d %v %v", name, i, g[i].t, g[i].v, g[i].fh, w.t, w.v, w.fh)
				break
			}
		}
	}

	// Resuming writes nothing again.
	e.raw = raw
	res2, err := Run(context.Background(), cfg, input, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res2.RawBlockSamples != 0 || res2.RawSamples != 0 || res2.HistogramSamples != 0 || res2.PartitionsWritten != 0 {
		t.Errorf("resumed run wrote %+v, want nothing", res2)
	}
}

// TestBackfillCountsGapSamples: a raw tier whose only sample is now, and
// history of the hour and three quarters before it: the hour behind the
// cutoff (now's hour) goes into blocks and a minute partition; of the 45
// minutes from the cutoff, the 15 beyond the head's reach back for a new
// series (half its block duration) are refused by the head and, raw
// holding nothing of the series, written into a block beside it and
// counted as gap samples (until 2026-12-07 they were dropped); the rest is
// appended.
func TestBackfillCountsGapSamples(t *testing.T) {
	e := openEnv(t, true)
	now := timegrid.Floor(histEnd, hour) + 45*minute
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	app := e.raw.AppenderV2(context.Background())
	if _, err := app.Append(0, labels.FromStrings(model.MetricNameLabel, "live"), 0, now, 1, nil, nil, storage.AppendV2Options{}); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	x := Series{Labels: labels.FromStrings(model.MetricNameLabel, "x")}
	for ts := now - 105*minute; ts < now; ts += minute {
		x.Samples = append(x.Samples, Sample{ts, float64(ts)})
	}
	res, err := Run(context.Background(), cfg, []Series{x}, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Cutoff: the hour of raw's oldest sample (now). Behind it: 60 minutes.
	// From it, the head takes what is at most 30 minutes behind now.
	if res.RawBlockSamples != 60 || res.RawGapSamples != 15 || res.RefusedRawSamples != 0 || res.DroppedSamples != 0 || res.RawSamples != 30 {
		t.Errorf("blocks %d, gap %d, refused %d, dropped %d, appended %d; want 60, 15, 0, 0, 30",
			res.RawBlockSamples, res.RawGapSamples, res.RefusedRawSamples, res.DroppedSamples, res.RawSamples)
	}
}

// TestBackfillDropsFutureSamples: history whose last samples lie more than
// MaxFutureSkew past the clock (a source's skewed clock, times written in
// the wrong zone) has those samples dropped and counted, by Run and by
// RunSliced alike, and the raw tier still takes a live sample at now
// afterwards. In the head, a sample an hour ahead made every live sample
// more than half a block duration behind it too old.
func TestBackfillDropsFutureSamples(t *testing.T) {
	now := timegrid.Floor(histEnd, hour) + 20*minute
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	cfg.MaxFutureSkew = 10 * time.Minute
	x := Series{Labels: labels.FromStrings(model.MetricNameLabel, "x")}
	for ts := now - 3*hour; ts <= now+2*hour; ts += minute {
		x.Samples = append(x.Samples, Sample{ts, float64(ts)})
	}
	h := Series{Labels: labels.FromStrings(model.MetricNameLabel, "h")}
	for i, ts := 0, now-30*minute; ts <= now+30*minute; i, ts = i+1, ts+5*minute {
		h.Histograms = append(h.Histograms, HistogramSample{T: ts, H: testHistogram(i)})
	}
	input := []Series{x, h}
	const future = 110 + 4 // x: now+11m..now+2h; h: now+15m..now+30m
	for _, sliced := range []bool{false, true} {
		t.Run(fmt.Sprintf("sliced=%v", sliced), func(t *testing.T) {
			e := openEnv(t, true)
			var res Result
			var err error
			if sliced {
				r := &sliceReader{input: input}
				res, err = RunSliced(context.Background(), cfg, r.read, now-3*hour, now+2*hour+1, time.Hour, e.targets(), nil)
			} else {
				res, err = Run(context.Background(), cfg, input, e.targets(), nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.FutureSamples != future || res.DroppedSamples != future || res.DroppedHistogramSamples != 4 {
				t.Errorf("future %d, dropped %d (histograms %d); want %d, %d (4)", res.FutureSamples, res.DroppedSamples, res.DroppedHistogramSamples, future, future)
			}
			if _, maxt, _ := e.raw.Bounds(); maxt > now+10*minute {
				t.Errorf("raw holds a sample at %s, past now+10m", fmtMs(maxt))
			}
			app := e.raw.AppenderV2(context.Background())
			if _, err := app.Append(0, labels.FromStrings(model.MetricNameLabel, "live"), 0, now+time.Minute.Milliseconds(), 1, nil, nil, storage.AppendV2Options{}); err != nil {
				t.Errorf("a live sample after the backfill: %v", err)
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDamagedProgressFile: a progress file that does not parse is reported
// as damaged (the command says to remove it), not as an import to resume.
func TestDamagedProgressFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backfill.progress.json")
	if err := os.WriteFile(path, []byte("garbage{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadProgress(path); !errors.Is(err, ErrProgressDamaged) {
		t.Fatalf("loadProgress = %v, want ErrProgressDamaged", err)
	}
	if _, _, err := Unfinished(path); !errors.Is(err, ErrProgressDamaged) {
		t.Fatalf("Unfinished = %v, want ErrProgressDamaged", err)
	}
}

// normalized is normalize over all time, its conflicts left out.
func normalized(in []Series) []Series {
	out, _ := normalize(in, math.MinInt64, math.MaxInt64)
	return out
}
