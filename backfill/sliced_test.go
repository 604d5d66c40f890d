package backfill

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// sliceReader serves input as a remote-read source does: each series with
// samples in [from, to), those samples only. It records the ranges read.
type sliceReader struct {
	input []Series
	reads [][2]int64
}

func (r *sliceReader) read(_ context.Context, from, to int64) ([]Series, error) {
	r.reads = append(r.reads, [2]int64{from, to})
	var out []Series
	for _, s := range r.input {
		c := Series{Labels: s.Labels}
		for _, x := range s.Samples {
			if x.T >= from && x.T < to {
				c.Samples = append(c.Samples, x)
			}
		}
		for _, x := range s.Histograms {
			if x.T >= from && x.T < to {
				c.Histograms = append(c.Histograms, x)
			}
		}
		if len(c.Samples)+len(c.Histograms) > 0 {
			out = append(out, c)
		}
	}
	return out, nil
}

// slicedInput is streamInput with series that test the stream's end: one
// whose stale marker comes within StaleLookahead after it (the window
// before it ends stale in Run), and native histograms on both sides of it.
func slicedInput(start, end, streamEnd int64) []Series {
	in := streamInput(start, end)
	stale := math.Float64frombits(value.StaleNaN)
	hist := Series{Labels: labels.FromStrings(model.MetricNameLabel, "hist_across")}
	for i, ts := 0, streamEnd-3*hour; ts < streamEnd+3*hour; i, ts = i+1, ts+5*minute {
		hist.Histograms = append(hist.Histograms, HistogramSample{T: ts, H: testHistogram(i)})
	}
	// A float at one of the histograms' timestamps: the histogram is kept.
	hist.Samples = []Sample{{streamEnd + 2*hour, 1}}
	return append(in,
		Series{Labels: labels.FromStrings(model.MetricNameLabel, "stale_at_stream_end"), Samples: []Sample{{streamEnd - 40_000, 1}, {streamEnd + 3*minute, stale}, {streamEnd + 2*hour, 2}}},
		hist,
		// Other values at a timestamp (the last kept): slicedConflicts of
		// them, before the stream's end, at it, and on an hour (a slice's
		// end, read again by the next slice); a repeat is none.
		Series{Labels: labels.FromStrings(model.MetricNameLabel, "conflicting"), Samples: []Sample{
			{streamEnd - 2*hour, 1}, {streamEnd - 2*hour, 2},
			{streamEnd - hour, 3}, {streamEnd - hour, 3},
			{streamEnd, 7}, {streamEnd, 8},
			{streamEnd + hour, 4}, {streamEnd + hour, 5}, {streamEnd + hour, 6},
		}})
}

// slicedConflicts is the number of samples slicedInput leaves out for
// another value at their timestamp: streamInput's repeated series' one,
// the float beside a histogram, the conflicting series' four.
const slicedConflicts = 6

// TestRunSlicedEqualsRun: three days of history up to an empty raw tier,
// imported by RunSliced in slices of 90 minutes (not aligned to the hours)
// and of a day, give exactly the minute and hour partitions, raw samples
// (blocks and head) and counts of Run given everything at once, and no
// read spans more than a slice and the windows' lookahead
// (checkSliceReads).
func TestRunSlicedEqualsRun(t *testing.T) {
	now := histEnd + 15*minute
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	end := timegrid.Floor(now-24*hour, hour)
	input := slicedInput(histStart, histEnd, end)

	open := func(t *testing.T, block time.Duration) env {
		e := openEnv(t, true)
		rc := e.raw.Config()
		rc.BlockDuration = block
		e.raw = still(reopenRawConfig(t, e.raw, rc))
		return e
	}
	// Run given everything, once for each raw block duration.
	type reference struct {
		env
		want Result
	}
	refs := map[time.Duration]reference{}
	for _, block := range []time.Duration{time.Hour, 3 * time.Hour} {
		ref := open(t, block)
		want, err := Run(context.Background(), cfg, input, ref.targets(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if want.DroppedHistogramSamples == 0 || want.HistogramSamples == 0 || want.RawBlockSamples == 0 || want.RawSamples == 0 {
			t.Fatalf("the reference import does not reach every part: %+v", want)
		}
		if want.ConflictingSamples != slicedConflicts {
			t.Fatalf("Run counted %d conflicting samples, want %d", want.ConflictingSamples, slicedConflicts)
		}
		ref.raw = still(reopenRaw(t, ref.raw)) // loads the blocks
		refs[block] = reference{ref, want}
	}

	for _, c := range []struct{ slice, block time.Duration }{
		{90 * time.Minute, time.Hour},
		{24 * time.Hour, time.Hour},
		// Raw blocks longer than a slice: a slice is read to the end of
		// the block that starts in it.
		{time.Hour, 3 * time.Hour},
	} {
		t.Run(fmt.Sprintf("slice=%s,block=%s", c.slice, c.block), func(t *testing.T) {
			ref, want := refs[c.block].env, refs[c.block].want
			e := open(t, c.block)
			if got := StreamEnd(cfg, e.targets()); got != end {
				t.Fatalf("StreamEnd = %s, want %s", fmtMs(got), fmtMs(end))
			}
			r := &sliceReader{input: input}
			var phases []string
			got, err := RunSliced(context.Background(), cfg, r.read, histStart, histEnd, c.slice, e.targets(), func(p Progress) {
				if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
					phases = append(phases, p.Phase)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if phases[0] != "stream" || !allOf(phases, "minute", "hour", "raw blocks", "raw") {
				t.Errorf("phases %v", phases)
			}
			got.Phase, got.Done, got.Total = want.Phase, want.Done, want.Total
			if got != want {
				t.Errorf("RunSliced\n%+v\nRun\n%+v", got, want)
			}
			checkSliceReads(t, r.reads, histStart, end, histEnd, c.slice, c.block)
			sameTiers(t, ref, &e)
		})
	}
}

// sameTiers checks that got's tiers hold what want's hold: the same
// partitions, and raw the same samples in blocks of the same ranges. It
// reopens got's raw tier, to load the blocks written beside it; want's must
// be reopened already.
func sameTiers(t *testing.T, want env, got *env) {
	t.Helper()
	sameRollups(t, want, *got)
	got.raw = still(reopenRaw(t, got.raw))
	if a, b := rawDump(t, want.raw), rawDump(t, got.raw); a != b {
		t.Errorf("raw holds\n%.2000s\nwant\n%.2000s", b, a)
	}
	if a, b := blockRanges(want.raw), blockRanges(got.raw); !slices.Equal(a, b) {
		t.Errorf("raw blocks %v, want %v", b, a)
	}
}

// still stops raw's compactions and returns raw: the TSDB merges blocks
// a minute after it opens, which would make the blocks of two imports
// differ by how long a test took.
func still(raw *tiers.Raw) *tiers.Raw {
	raw.DB().DisableCompactions()
	return raw
}

// blockRanges are the time ranges of raw's blocks.
func blockRanges(raw *tiers.Raw) []string {
	var out []string
	for _, b := range raw.DB().Blocks() {
		out = append(out, fmtMs(b.Meta().MinTime)+"/"+fmtMs(b.Meta().MaxTime))
	}
	slices.Sort(out)
	return out
}

// checkSliceReads checks the ranges RunSliced read of [from, to), whose
// stream ends at end: the stream's slices are consecutive and at most a
// slice long, the last one StaleLookahead past the end; the raw tier's
// reach is read from the end to to in slices of whole hours (at least
// one), each starting where the one before ended and read to
// StaleLookahead past its end, or at most to the end of a raw block
// (block long) that starts in it.
func checkSliceReads(t *testing.T, reads [][2]int64, from, end, to int64, slice, block time.Duration) {
	t.Helper()
	i := 0
	for ; i < len(reads) && reads[i][0] < end; i++ {
		rd := reads[i]
		if i == 0 && rd[0] != from {
			t.Errorf("the first read starts at %s, want %s", fmtMs(rd[0]), fmtMs(from))
		}
		if rd[1]-rd[0] > slice.Milliseconds()+downsample.StaleLookahead || i > 0 && rd[0] != reads[i-1][1] {
			t.Errorf("stream read %d: %s to %s after %v", i, fmtMs(rd[0]), fmtMs(rd[1]), reads[:i])
		}
	}
	if i == 0 || reads[i-1][1] != end+downsample.StaleLookahead {
		t.Errorf("the stream's reads %v do not end StaleLookahead past %s", reads[:i], fmtMs(end))
	}
	if i == len(reads) {
		t.Fatal("the raw tier's reach was not read")
	}
	step := max(timegrid.Floor(slice.Milliseconds(), hour), hour)
	a := end
	for j, rd := range reads[i:] {
		b := min(a+step, to)
		lo, hi := min(b+downsample.StaleLookahead, to), min(max(b+downsample.StaleLookahead, a+block.Milliseconds()), to)
		if rd[0] != a || rd[1] < lo || rd[1] > hi {
			t.Errorf("reach read %d: %s to %s, want from %s to %s-%s", j, fmtMs(rd[0]), fmtMs(rd[1]), fmtMs(a), fmtMs(lo), fmtMs(hi))
		}
		a = b
	}
	if a != to {
		t.Errorf("the reach's reads end at %s, want %s", fmtMs(a), fmtMs(to))
	}
}

func allOf(have []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// TestRunSlicedWithoutRaw: with no raw tier everything is streamed, and
// nothing is read twice.
func TestRunSlicedWithoutRaw(t *testing.T) {
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(histEnd) }
	input := streamInput(histStart, histEnd)
	ref := openEnv(t, false)
	want, err := Run(context.Background(), cfg, input, ref.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := openEnv(t, false)
	r := &sliceReader{input: input}
	got, err := RunSliced(context.Background(), cfg, r.read, histStart, histEnd, 5*time.Hour, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.PartitionsWritten != want.PartitionsWritten || got.DroppedSamples != want.DroppedSamples {
		t.Errorf("RunSliced %+v, Run %+v", got, want)
	}
	if len(r.reads) != int((histEnd-histStart+5*hour-1)/(5*hour)) || r.reads[len(r.reads)-1][1] != histEnd {
		t.Errorf("reads %v", r.reads)
	}
	sameRollups(t, ref, e)
}

// TestRunSlicedSkipsBeyondHourRetention: history older than the hour
// tier's retention is not read at all.
func TestRunSlicedSkipsBeyondHourRetention(t *testing.T) {
	cfg := testConfig()
	cfg.HourRetention = 2 * 24 * time.Hour
	cfg.Now = func() time.Time { return time.UnixMilli(histEnd) }
	e := openEnv(t, false)
	r := &sliceReader{input: history(histStart, histEnd)}
	if _, err := RunSliced(context.Background(), cfg, r.read, histStart-30*day, histEnd, 6*time.Hour, e.targets(), nil); err != nil {
		t.Fatal(err)
	}
	oldest := timegrid.Floor(histEnd-2*day, day)
	if len(r.reads) == 0 || r.reads[0][0] != oldest {
		t.Errorf("reads %v, want the first from %s", r.reads, fmtMs(oldest))
	}
	if ps := starts(e.minute); len(ps) == 0 || ps[0] != oldest {
		t.Errorf("minute partitions %v, want the first at %s", ps, fmtMs(oldest))
	}
	// Nothing to read at all.
	r.reads = nil
	if res, err := RunSliced(context.Background(), cfg, r.read, histStart-30*day, histStart-20*day, time.Hour, e.targets(), nil); err != nil || len(r.reads) != 0 || res.PartitionsWritten != 0 {
		t.Errorf("a range beyond the retention: %+v, %v, %d reads", res, err, len(r.reads))
	}
}

// rawDump is every sample raw holds, as text, series in label order.
func rawDump(t *testing.T, raw *tiers.Raw) string {
	t.Helper()
	q, err := raw.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+"))
	out := ""
	for set.Next() {
		out += set.At().Labels().String() + ":"
		it := set.At().Iterator(nil)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			ts := it.AtT()
			if vt == chunkenc.ValFloat {
				_, v := it.At()
				out += fmt.Sprintf(" %d=%x", ts, math.Float64bits(v))
			} else {
				_, h := it.AtFloatHistogram(nil)
				out += fmt.Sprintf(" %d=%s", ts, h)
			}
		}
		out += "\n"
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// TestRunSlicedReadError: a slice that cannot be read ends the backfill
// with its error, after the partitions of the slices before it; a rerun
// skips those and writes the rest.
func TestRunSlicedReadError(t *testing.T) {
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(histEnd) }
	input := history(histStart, histEnd)
	e := openEnv(t, false)
	r := &sliceReader{input: input}
	failing := func(ctx context.Context, from, to int64) ([]Series, error) {
		if len(r.reads) == 20 {
			return nil, errors.New("source down")
		}
		return r.read(ctx, from, to)
	}
	res, err := RunSliced(context.Background(), cfg, failing, histStart, histEnd, time.Hour, e.targets(), nil)
	if err == nil || !strings.Contains(err.Error(), "source down") {
		t.Fatalf("RunSliced = %v, want the read's error", err)
	}
	if len(r.reads) != 20 || res.PartitionsWritten == 0 {
		t.Errorf("%d reads, %d partitions written before the error", len(r.reads), res.PartitionsWritten)
	}
	again, err := RunSliced(context.Background(), cfg, (&sliceReader{input: input}).read, histStart, histEnd, time.Hour, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.PartitionsSkipped == 0 || again.PartitionsWritten == 0 {
		t.Errorf("rerun: %+v, want the first run's partitions skipped and the rest written", again)
	}
	ref := openEnv(t, false)
	if _, err := Run(context.Background(), cfg, input, ref.targets(), nil); err != nil {
		t.Fatal(err)
	}
	sameRollups(t, ref, e)
}

// TestRunSlicedResumesReach: an import whose source fails part-way
// through the raw tier's reach resumes, under the same InputID, after the
// last slice it finished: those slices are not read again, no raw block is
// written twice, and the tiers end as one uninterrupted import leaves them.
// The same input again reads nothing of the reach; another input is
// refused while one is unfinished.
func TestRunSlicedResumesReach(t *testing.T) {
	now := histEnd + 15*minute
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	end := timegrid.Floor(now-24*hour, hour)
	input := slicedInput(histStart, histEnd, end)

	ref := openEnv(t, true)
	still(ref.raw)
	if _, err := RunSliced(context.Background(), cfg, (&sliceReader{input: input}).read, histStart, histEnd, time.Hour, ref.targets(), nil); err != nil {
		t.Fatal(err)
	}
	ref.raw = still(reopenRaw(t, ref.raw))

	e := openEnv(t, true)
	still(e.raw)
	cfg.ProgressFile = filepath.Join(t.TempDir(), "progress.json")
	cfg.InputID = "input-a"
	failAt := end + 10*hour
	r := &sliceReader{input: input}
	failing := func(ctx context.Context, from, to int64) ([]Series, error) {
		if from == failAt {
			return nil, errors.New("source down")
		}
		return r.read(ctx, from, to)
	}
	if _, err := RunSliced(context.Background(), cfg, failing, histStart, histEnd, time.Hour, e.targets(), nil); err == nil || !strings.Contains(err.Error(), "source down") {
		t.Fatalf("RunSliced = %v, want the read's error", err)
	}
	if u, ok, err := Unfinished(cfg.ProgressFile); err != nil || !ok || u != (UnfinishedImport{"input-a", histStart, histEnd}) {
		t.Errorf("Unfinished = %+v, %v, %v; want input-a over the range asked", u, ok, err)
	}
	other := cfg
	other.InputID = "input-b"
	if _, err := RunSliced(context.Background(), other, r.read, histStart, histEnd, time.Hour, e.targets(), nil); !errors.Is(err, ErrProgressMismatch) {
		t.Errorf("another input while one is unfinished: %v, want ErrProgressMismatch", err)
	}

	r.reads = nil
	if _, err := RunSliced(context.Background(), cfg, r.read, histStart, histEnd, time.Hour, e.targets(), nil); err != nil {
		t.Fatal(err)
	}
	var reach [][2]int64
	for _, rd := range r.reads {
		if rd[0] >= end {
			reach = append(reach, rd)
		}
	}
	if len(reach) == 0 || reach[0][0] != failAt {
		t.Errorf("the resumed reach read %v, want from %s on", reach, fmtMs(failAt))
	}
	sameTiers(t, ref, &e)

	if _, ok, err := Unfinished(cfg.ProgressFile); ok || err != nil {
		t.Errorf("Unfinished after the import finished: %v, %v", ok, err)
	}
	r.reads = nil
	if _, err := RunSliced(context.Background(), cfg, r.read, histStart, histEnd, time.Hour, e.targets(), nil); err != nil {
		t.Fatal(err)
	}
	for _, rd := range r.reads {
		if rd[0] >= end {
			t.Errorf("a finished import read %s to %s of the reach again", fmtMs(rd[0]), fmtMs(rd[1]))
		}
	}
}
