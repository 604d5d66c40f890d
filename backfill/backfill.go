// Package backfill writes historical samples straight into Strata's tiers:
// the part that the raw tier's head can still take goes into raw (and reaches
// the rollups through the downsample pipeline), everything older is rolled up
// in memory into minute partitions and, from those, hour partitions; what of
// it lies within the raw retention also goes into raw as TSDB blocks beside
// the head, so an imported day is queryable at full resolution. It is how
// weeks of history are imported (the `strata backfill` command) and how
// tests get weeks of data in seconds.
//
// Data flow: text exposition / series -> backfill -> tiers (raw, minute, hour).
package backfill

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// Sample is one float sample (stale markers included).
type Sample struct {
	T int64 // ms since the epoch
	V float64
}

// HistogramSample is one native histogram sample: exactly one of H and FH
// is set.
type HistogramSample struct {
	T  int64 // ms since the epoch
	H  *histogram.Histogram
	FH *histogram.FloatHistogram
}

// Series is one series and its samples. Run sorts the samples by time and
// keeps the last of samples sharing a timestamp.
type Series struct {
	Labels  labels.Labels
	Samples []Sample
	// Histograms are the series' native histogram samples. Like live ones
	// they go to the raw tier only (the rollup tiers hold floats): those
	// older than the raw retention are dropped and counted. A float sample
	// at a timestamp a histogram sample holds is dropped.
	Histograms []HistogramSample
}

// span is the time of the series' first and last sample of either kind.
func (s Series) span() (first, last int64) {
	first, last = math.MaxInt64, math.MinInt64
	if n := len(s.Samples); n > 0 {
		first, last = s.Samples[0].T, s.Samples[n-1].T
	}
	if n := len(s.Histograms); n > 0 {
		first, last = min(first, s.Histograms[0].T), max(last, s.Histograms[n-1].T)
	}
	return first, last
}

// Config configures a backfill.
type Config struct {
	// KindOf types each series for its rollup windows, as the rollup
	// pipeline does (downsample.Config.KindOf; nil makes every series a
	// counter). Give both the same typing: the windows a backfill writes must
	// be those the pipeline would have written.
	KindOf downsample.KindFunc
	// ProgressFile records what is done (partitions written, how far raw was
	// filled) so that an interrupted backfill resumes where it stopped. Empty
	// disables resuming (partitions that exist are still never rewritten).
	ProgressFile string
	// InputID identifies the history RunSliced imports, for the progress
	// of its raw tier's reach (Run fingerprints the series it is given;
	// RunSliced never holds them all): the same string for the same
	// history, as Spool.Fingerprint gives for files. Empty keeps no
	// progress for that part: a rerun imports it again, writing its raw
	// blocks again (the TSDB merges their samples) and skipping the
	// partitions that exist.
	InputID string
	// RawRetention is the raw tier's retention: samples older than
	// now-RawRetention never go to raw.
	RawRetention time.Duration
	// HourRetention is the hour tier's retention: older samples are skipped.
	HourRetention time.Duration
	// MaxFutureSkew is how far past Now a sample may lie: later ones are
	// dropped and counted (Progress.FutureSamples), as the remote-write
	// receiver refuses them (remote_write.max_future_skew). In the raw
	// tier's head a sample an hour ahead would make every live sample more
	// than half a block duration behind it too old until the clock caught
	// up. Zero (or less) sets no limit.
	MaxFutureSkew time.Duration
	// BatchSize is the number of samples per raw commit.
	BatchSize int
	// TempDir is where the hour tier's build keeps its temporary runs (a
	// day's hour windows, in files: downsample.BuildHourPartition); empty
	// is os.TempDir(). strata backfill uses the server's rollup spill
	// directory, which strata serve empties on start.
	TempDir string
	// Now is the clock.
	Now func() time.Time
}

// clock is the time now by c.Now, or the wall clock without it.
func (c Config) clock() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// DefaultConfig returns the tiers' default retentions, the receiver's
// default future skew (10 minutes), 10,000-sample raw commits and the wall
// clock.
func DefaultConfig() Config {
	return Config{RawRetention: 24 * time.Hour, HourRetention: 365 * 24 * time.Hour, MaxFutureSkew: 10 * time.Minute, BatchSize: 10_000, Now: time.Now}
}

// Targets are the tiers a backfill writes. Raw may be nil: then every sample
// goes into rollup partitions.
type Targets struct {
	Raw *tiers.Raw
	// RawAppendable, when set, is what samples for raw are appended through
	// (Raw still gives the raw tier's bounds). Pass the pipeline's Tee when a
	// downsample pipeline fed by it runs in the same process: appends that
	// bypass the tee would be missing from its minute partitions.
	RawAppendable storage.AppendableV2
	Minute        downsample.MinuteTier
	Hour          downsample.PartitionWriter
}

// Progress is reported after every partition and every raw commit.
type Progress struct {
	Phase             string // "minute", "hour", "raw blocks" or "raw"
	Done, Total       int    // units of the current phase (partitions, or samples for raw)
	PartitionsWritten int
	PartitionsSkipped int // existing partitions, never overwritten (minute tier)
	RawSamples        int // samples appended to raw so far
	// RawBlockSamples are the samples written into raw blocks behind the
	// head; an open raw tier serves them after its next block reload (within
	// a minute), a restarted one at once.
	RawBlockSamples int
	DroppedSamples  int // older than the hour tier's retention, or rejected by raw
	// RefusedRawSamples are the samples at or after the cutoff that raw's
	// head refused and that are no gap samples (RawGapSamples): behind what
	// it accepts (in order up to half a block duration behind its newest
	// sample, or within the out-of-order window) among their series' raw
	// samples, or another value at a timestamp raw holds (the live one is
	// kept). Also in DroppedSamples.
	RefusedRawSamples int
	// RawGapSamples are the samples at or after the cutoff that raw's head
	// refused where raw holds none of their series (gap.go): before a
	// series' first sample, after its last, or in a hole between two. They
	// are written into raw blocks beside the head instead, and the minute
	// partitions of their hours that existed are written again
	// (PartitionsRewritten).
	RawGapSamples       int
	PartitionsRewritten int
	// HistogramSamples are the native histogram samples written to raw, in
	// the head or in blocks (also in RawSamples or RawBlockSamples).
	HistogramSamples int
	// DroppedHistogramSamples are the native histogram samples older than
	// the raw retention, which no tier takes, or too far in the future
	// (also in DroppedSamples).
	DroppedHistogramSamples int
	// FutureSamples are the samples more than Config.MaxFutureSkew past
	// the clock, not imported (also in DroppedSamples).
	FutureSamples int
	// ConflictingSamples are the samples of the input left out for another
	// value of their series at their timestamp, later in the input (the
	// last is kept), as when two sources' series lack the labels that
	// tell them apart (also in DroppedSamples). A repeat of the same value
	// is not one.
	ConflictingSamples int
}

// Result is the final Progress.
type Result = Progress

// Errors.
var (
	// ErrProgressMismatch means the progress file belongs to an unfinished
	// backfill of another input.
	ErrProgressMismatch = errors.New("progress file was written by an unfinished backfill of other input")
	// ErrProgressDamaged means the progress file does not parse (the
	// file system damaged it: it is replaced atomically); resuming from it
	// is impossible, and running the same command again meets it again.
	ErrProgressDamaged = errors.New("progress file is damaged")
)

// progressState is the on-disk progress file (JSON, replaced atomically).
type progressState struct {
	Input   string  `json:"input"` // fingerprint of the input, so a resume uses the same data
	Cutoff  int64   `json:"cutoff"`
	Minute  []int64 `json:"minute_partitions"`
	Hour    []int64 `json:"hour_partitions"`
	RawMark int64   `json:"raw_mark"` // samples with T < RawMark are committed to raw
	RawDone bool    `json:"raw_done"`
	// Complete marks a backfill that finished: a run of the same input
	// has nothing to do, one of another input starts afresh (an
	// unfinished one's file refuses another input: ErrProgressMismatch).
	Complete bool `json:"complete,omitempty"`
	// RawBlocks are the starts of the raw block ranges written (RawBlockRange
	// each) for history behind the cutoff.
	RawBlocks []int64 `json:"raw_blocks"`
	// RawBlockRange is the span of the raw blocks in milliseconds: the raw
	// tier's block duration when the first run started. A file without it
	// was written when every backfilled block spanned legacyRawBlockRange.
	RawBlockRange int64 `json:"raw_block_range,omitempty"`
	// From and To are the range [From, To) RunSliced was asked to import
	// (none for Run), so that a rerun of an import asked for relative to
	// now can resume the same range (Unfinished).
	From int64 `json:"from,omitempty"`
	To   int64 `json:"to,omitempty"`
	// Rewritten are the hours whose minute partitions (the live
	// pipeline's) were written again with gap samples (gap.go): a resume
	// builds their days' hour partitions, which the run it resumes may
	// not have reached.
	Rewritten []int64 `json:"rewritten_partitions,omitempty"`
}

// UnfinishedImport is what the progress file of an unfinished RunSliced
// records of its input.
type UnfinishedImport struct {
	Input    string // Config.InputID
	From, To int64  // the range it was asked to import
}

// Unfinished returns what the progress file at path records of an
// unfinished RunSliced import (ok is false without one: no file, a
// finished import, or one of Run's): a command that resolves a range
// relative to now can resume that import's range rather than read
// another.
func Unfinished(path string) (u UnfinishedImport, ok bool, err error) {
	st, err := loadProgress(path)
	if errors.Is(err, os.ErrNotExist) {
		return u, false, nil
	}
	if err != nil || st.Complete || st.To <= st.From {
		return u, false, err
	}
	return UnfinishedImport{Input: st.Input, From: st.From, To: st.To}, true, nil
}

// legacyRawBlockRange is the span of the raw blocks written before the
// progress file recorded it. Since then each raw block written for history
// behind the head spans the raw tier's block duration
// (storage.raw.block_duration), so that its compactor merges them as it
// merges the head's, aligned to it as promtool's create-blocks-from aligns
// its blocks.
const legacyRawBlockRange = 2 * time.Hour

// Run imports series into the tiers:
//
//   - Samples at or after the cutoff go to the raw tier in time order, so the
//     raw tier accepts them and the downsample pipeline rolls them up. The
//     cutoff is the hour that holds raw's oldest sample when raw has data
//     (rollup partitions from there on belong to the pipeline), else the
//     hour a block duration before now (emptyRawCutoff).
//   - Older samples are rolled up in memory into minute partitions, one per
//     hour, with the same window algorithm as the pipeline. A minute
//     partition that already exists is never overwritten: it is final.
//   - Each day that is entirely before the cutoff, or whose remaining minute
//     partitions exist, gets its hour partition (re)built from the minute
//     tier, as the pipeline does.
//   - Samples before the cutoff but within the raw retention also go to raw,
//     as TSDB blocks of the raw tier's block duration, aligned to it,
//     written into its directory atomically, as `promtool tsdb
//     create-blocks-from openmetrics` writes them. An open raw tier loads
//     them at its next block reload (every minute) and `strata serve` at
//     start; they may overlap the head, which the TSDB merges at query time
//     and compacts vertically.
//
// Native histogram samples go to raw only, in the head or in blocks, and
// are dropped when older than the raw retention.
//
// Run is resumable through cfg.ProgressFile and reports progress to
// progress (which may be nil). All input is held in memory (16 bytes per
// float sample); RunSliced reads it a slice at a time.
func Run(ctx context.Context, cfg Config, input []Series, t Targets, progress func(Progress)) (Result, error) {
	series, conflicts := normalize(input, math.MinInt64, math.MaxInt64)
	if len(series) == 0 {
		if t.Minute == nil || t.Hour == nil {
			return Result{}, errNoRollupTiers
		}
		return Result{}, nil
	}
	im, err := newImporter(ctx, cfg, t, fingerprint(series), progress)
	if err != nil {
		return Result{}, err
	}
	im.res.ConflictingSamples += conflicts
	im.res.DroppedSamples += conflicts
	im.countDropped(series, math.MinInt64, math.MaxInt64)
	series = cutAfter(series, im.newest)
	// mint and maxt span every sample; fmint and fmaxt the float samples,
	// which alone reach the rollup tiers.
	mint, maxt := int64(math.MaxInt64), int64(math.MinInt64)
	fmint, fmaxt := mint, maxt
	for _, s := range series {
		first, last := s.span()
		mint, maxt = min(mint, first), max(maxt, last)
		if n := len(s.Samples); n > 0 {
			fmint, fmaxt = min(fmint, s.Samples[0].T), max(fmaxt, s.Samples[n-1].T)
		}
	}

	// Minute partitions below the cutoff.
	first := max(timegrid.Floor(fmint, downsample.HourRes), im.oldest)
	last := min(im.cutoff, fmaxt+1) // exclusive
	total := 0
	if last > first {
		total = int((last - first + downsample.HourRes - 1) / downsample.HourRes)
	}
	for i, h := 0, first; h < last; i, h = i+1, h+downsample.HourRes {
		if err := im.minutePartition(series, h); err != nil {
			return im.res, err
		}
		im.report("minute", i+1, total)
	}

	// Hour partitions of the days touched.
	if err := im.hourPartitions(math.MaxInt64, func(done, total int) { im.report("hour", done, total) }); err != nil {
		return im.res, err
	}

	// History behind the cutoff but within the raw retention: raw blocks.
	if from, to := max(mint, im.rawFrom), min(im.cutoff, maxt+1); from < to {
		span := im.st.RawBlockRange
		first := timegrid.Floor(from, span)
		total := int((to - first + span - 1) / span)
		for i, b := 0, first; b < to; i, b = i+1, b+span {
			if err := im.rawBlock(series, b, max(b, from), min(b+span, to)); err != nil {
				return im.res, err
			}
			im.report("raw blocks", i+1, total)
		}
	}

	// The rest into raw, in time order.
	if t.Raw != nil && !im.st.RawDone && maxt >= im.cutoff {
		if err := im.head(series, math.MinInt64, math.MaxInt64, func(done, total int) { im.report("raw", done, total) }); err != nil {
			return im.res, err
		}
		// The days of the minute partitions head wrote again (gap.go).
		if err := im.hourPartitions(math.MaxInt64, func(done, total int) { im.report("hour", done, total) }); err != nil {
			return im.res, err
		}
	}
	return im.res, im.finish()
}

var errNoRollupTiers = errors.New("backfill needs the minute and hour tiers")

// importer writes history into the tiers one unit at a time (an hour's
// minute partition, a block range's raw block, the head's samples of a
// time range, a day's hour partition) and records each unit done in its
// progress file, so that a rerun of the same input resumes after it. Run
// gives it all of the input at once, RunSliced the raw tier's reach a
// slice at a time.
type importer struct {
	ctx      context.Context
	cfg      Config
	t        Targets
	progress func(Progress)
	st       progressState
	res      Result
	// cutoff is the hour from which samples go to raw's head (kept from the
	// first run of an input: raw has grown since); oldest the first time
	// a tier keeps; rawFrom the first raw blocks take (math.MaxInt64
	// without raw or its retention); histFrom the first a native histogram
	// has a tier for; newest the last time imported (futureLimit).
	cutoff, oldest, rawFrom, histFrom, newest int64
	// days are the days whose minute partitions this import wrote and whose
	// hour partitions are still to be built.
	days map[int64]bool
}

// newImporter fixes the cutoff and resumes the progress recorded for
// input in cfg.ProgressFile; an empty input keeps no progress.
func newImporter(ctx context.Context, cfg Config, t Targets, input string, progress func(Progress)) (*importer, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 10_000
	}
	if t.Minute == nil || t.Hour == nil {
		return nil, errNoRollupTiers
	}
	if progress == nil {
		progress = func(Progress) {}
	}
	if input == "" {
		cfg.ProgressFile = ""
	}
	im := &importer{ctx: ctx, cfg: cfg, t: t, progress: progress, oldest: Horizon(cfg), rawFrom: math.MaxInt64, newest: futureLimit(cfg), days: map[int64]bool{}}
	now := cfg.Now().UnixMilli()
	cutoff := int64(math.MaxInt64)
	if t.Raw != nil {
		if rawMin, _, ok := t.Raw.Bounds(); ok {
			cutoff = timegrid.Floor(rawMin, downsample.HourRes)
		} else {
			cutoff = emptyRawCutoff(now, cfg.RawRetention, t.Raw.BlockDuration())
		}
		if cfg.RawRetention > 0 {
			im.rawFrom = now - cfg.RawRetention.Milliseconds()
		}
	}

	st := progressState{Input: input, Cutoff: cutoff, RawMark: math.MinInt64}
	if t.Raw != nil {
		st.RawBlockRange = t.Raw.BlockDuration().Milliseconds()
	}
	if cfg.ProgressFile != "" {
		prev, err := loadProgress(cfg.ProgressFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, err
		case prev.Input != st.Input && prev.Complete:
			// The last backfill finished: this is another one.
		case prev.Input != st.Input:
			return nil, fmt.Errorf("resume from %s: %w", cfg.ProgressFile, ErrProgressMismatch)
		default:
			st = prev // keep the first run's cutoff: raw has grown since
			switch {
			case prev.RawBlockRange != 0:
			case len(prev.RawBlocks) > 0:
				// Written before the range was recorded: the blocks it
				// lists span the legacy range, and a resume goes on with it
				// so that it writes none of their samples twice.
				st.RawBlockRange = legacyRawBlockRange.Milliseconds()
			case t.Raw != nil:
				st.RawBlockRange = t.Raw.BlockDuration().Milliseconds()
			}
		}
	}
	im.st, im.cutoff = st, st.Cutoff
	for _, h := range st.Rewritten {
		im.days[timegrid.Floor(h, downsample.DayLen)] = true
	}
	// Raw blocks start at rawFrom; the head takes everything from the
	// cutoff. A histogram before both has no tier.
	im.histFrom = min(im.rawFrom, im.cutoff)
	return im, nil
}

func (im *importer) save() error {
	if im.cfg.ProgressFile == "" {
		return nil
	}
	return saveProgress(im.cfg.ProgressFile, im.st)
}

// report reports the import's counts, at done of total units of phase.
func (im *importer) report(phase string, done, total int) {
	im.res.Phase, im.res.Done, im.res.Total = phase, done, total
	im.progress(im.res)
}

// finish records the import complete.
func (im *importer) finish() error {
	im.st.Complete = true
	return im.save()
}

// countDropped counts the samples of series in [from, to) that are not
// imported: floats older than the hour tier's retention, native histograms
// older than the raw retention, and samples too far in the future.
func (im *importer) countDropped(series []Series, from, to int64) {
	for _, s := range series {
		for _, x := range s.Samples {
			if x.T < from || x.T >= to {
				continue
			}
			switch {
			case x.T < im.oldest:
				im.res.DroppedSamples++
			case x.T > im.newest:
				im.res.DroppedSamples++
				im.res.FutureSamples++
			}
		}
		for _, x := range s.Histograms {
			if x.T < from || x.T >= to || x.T >= im.histFrom && x.T <= im.newest {
				continue
			}
			im.res.DroppedSamples++
			im.res.DroppedHistogramSamples++
			if x.T > im.newest {
				im.res.FutureSamples++
			}
		}
	}
}

// cutAfter cuts the samples after t off series, whose samples are in time
// order, in place, and drops the series left empty.
func cutAfter(series []Series, t int64) []Series {
	out := series[:0]
	for _, s := range series {
		i, _ := slices.BinarySearchFunc(s.Samples, t+1, func(x Sample, t int64) int { return cmp.Compare(x.T, t) })
		j, _ := slices.BinarySearchFunc(s.Histograms, t+1, func(x HistogramSample, t int64) int { return cmp.Compare(x.T, t) })
		s.Samples, s.Histograms = s.Samples[:i], s.Histograms[:j]
		if i+j > 0 {
			out = append(out, s)
		}
	}
	return out
}

// futureLimit is the newest time a backfill imports: cfg.MaxFutureSkew
// past its clock (math.MaxInt64 without a limit).
func futureLimit(cfg Config) int64 {
	if cfg.MaxFutureSkew <= 0 {
		return math.MaxInt64
	}
	return cfg.clock().Add(cfg.MaxFutureSkew).UnixMilli()
}

// minutePartition writes hour h's minute partition from series, which
// hold its samples and those StaleLookahead after it, unless the progress
// file records it or the minute tier has it (never overwritten).
func (im *importer) minutePartition(series []Series, h int64) error {
	if err := im.ctx.Err(); err != nil {
		return err
	}
	switch {
	case slices.Contains(im.st.Minute, h):
		im.days[timegrid.Floor(h, downsample.DayLen)] = true
	case im.t.Minute.HasPartition(h):
		im.res.PartitionsSkipped++
	default:
		windows, err := minuteWindows(series, h, im.cfg.KindOf)
		if err != nil {
			return err
		}
		if len(windows) > 0 {
			if err := im.t.Minute.WritePartition(h, windows); err != nil {
				return fmt.Errorf("backfill minute partition %s: %w", time.UnixMilli(h).UTC().Format(time.RFC3339), err)
			}
			im.res.PartitionsWritten++
			im.days[timegrid.Floor(h, downsample.DayLen)] = true
		}
		im.st.Minute = append(im.st.Minute, h)
		return im.save()
	}
	return nil
}

// hourPartitions (re)builds, oldest first, the hour partition of every
// day in im.days that ends at or before before, when the minute tier
// holds the whole day (dayComplete), and reports after each day.
func (im *importer) hourPartitions(before int64, report func(done, total int)) error {
	var ds []int64
	for d := range im.days {
		if d+downsample.DayLen <= before {
			ds = append(ds, d)
		}
	}
	slices.Sort(ds)
	for i, d := range ds {
		if err := im.ctx.Err(); err != nil {
			return err
		}
		delete(im.days, d)
		if !slices.Contains(im.st.Hour, d) && dayComplete(im.t.Minute, d, im.cutoff) {
			if _, _, err := downsample.BuildHourPartition(im.ctx, im.t.Minute, im.t.Hour, d, im.cfg.KindOf, im.cfg.TempDir); err != nil {
				return fmt.Errorf("backfill: %w", err)
			}
			im.res.PartitionsWritten++
			im.st.Hour = append(im.st.Hour, d)
			if err := im.save(); err != nil {
				return err
			}
		}
		report(i+1, len(ds))
	}
	return nil
}

// rawBlock writes the samples of series in [from, to), within the raw
// block range that starts at b, as one block in raw's directory, unless
// the progress file records b.
func (im *importer) rawBlock(series []Series, b, from, to int64) error {
	if err := im.ctx.Err(); err != nil {
		return err
	}
	if slices.Contains(im.st.RawBlocks, b) {
		return nil
	}
	n, nh, err := writeRawBlock(im.ctx, series, im.t.Raw.DB().Dir(), im.st.RawBlockRange, from, to)
	if err != nil {
		return fmt.Errorf("backfill raw block %s: %w", time.UnixMilli(b).UTC().Format(time.RFC3339), err)
	}
	im.res.RawBlockSamples += n
	im.res.HistogramSamples += nh
	im.st.RawBlocks = append(im.st.RawBlocks, b)
	return im.save()
}

// Horizon is the oldest time a backfill keeps: the start of the day the
// hour tier's retention reaches back to (math.MinInt64 without a retention).
// No tier would keep older samples.
func Horizon(cfg Config) int64 {
	if cfg.HourRetention <= 0 {
		return math.MinInt64
	}
	return timegrid.Floor(cfg.clock().UnixMilli()-cfg.HourRetention.Milliseconds(), downsample.DayLen)
}

// emptyRawCutoff is the cutoff for a raw tier without data: the hour a
// block duration before now (the head holds up to 1.5 block durations
// live), never before the raw retention. History before it goes into raw
// blocks written directly; appended to the head, it was written to the
// WAL and compacted again by the TSDB as the appends went.
func emptyRawCutoff(now int64, retention, block time.Duration) int64 {
	return max(timegrid.Ceil(now-retention.Milliseconds(), downsample.HourRes), timegrid.Floor(now-block.Milliseconds(), downsample.HourRes))
}

// dayComplete reports whether day d's hour partition can be built: every
// hour of d is either before the cutoff (backfilled) or has its minute
// partition (the pipeline's).
func dayComplete(minute downsample.MinuteTier, d, cutoff int64) bool {
	for h := d; h < d+downsample.DayLen; h += downsample.HourRes {
		if h >= cutoff && !minute.HasPartition(h) {
			return false
		}
	}
	return true
}

// minuteWindows computes hour h's minute windows for every series.
func minuteWindows(series []Series, h int64, kindOf downsample.KindFunc) ([]tiers.SeriesWindows, error) {
	var out []tiers.SeriesWindows
	for _, s := range series {
		i, _ := slices.BinarySearchFunc(s.Samples, h, func(x Sample, t int64) int { return cmp.Compare(x.T, t) })
		if i == len(s.Samples) || s.Samples[i].T >= h+downsample.HourRes {
			continue
		}
		ws, _, err := downsample.AppendWindows(nil, storage.NewListSeriesIterator(samplesView(s.Samples[i:])), downsample.MinuteRes, h, h+downsample.HourRes, kindOf.Of(s.Labels))
		if err != nil {
			return nil, fmt.Errorf("roll up %s: %w", s.Labels, err)
		}
		if len(ws) > 0 {
			out = append(out, tiers.SeriesWindows{Labels: s.Labels, Windows: ws})
		}
	}
	return out, nil
}

// cursor is one series' position in a time-ordered walk of its float (i)
// and histogram (j) samples, which normalize leaves no timestamp in common.
type cursor struct {
	s    *Series
	i, j int
	// k orders cursors at the same time (cursorHeap): series come in the
	// same order at every timestamp, which Stream's lookup predicts.
	k int
	// at is t(), kept: a heap of cursors reads it a few dozen times a
	// sample.
	at int64
}

// cursorAt returns a cursor on s's first samples at or after t.
func cursorAt(s *Series, t int64) cursor {
	i, _ := slices.BinarySearchFunc(s.Samples, t, func(x Sample, t int64) int { return cmp.Compare(x.T, t) })
	j, _ := slices.BinarySearchFunc(s.Histograms, t, func(x HistogramSample, t int64) int { return cmp.Compare(x.T, t) })
	c := cursor{s: s, i: i, j: j}
	c.at = c.peek()
	return c
}

// t is the time of the cursor's sample; math.MaxInt64 when it has none.
func (c *cursor) t() int64 { return c.at }

func (c *cursor) peek() int64 {
	t := int64(math.MaxInt64)
	if c.i < len(c.s.Samples) {
		t = c.s.Samples[c.i].T
	}
	if c.j < len(c.s.Histograms) {
		t = min(t, c.s.Histograms[c.j].T)
	}
	return t
}

// next returns the cursor's sample (a float when h and fh are nil) and
// moves past it; ok is false when there is none left.
func (c *cursor) next() (t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, ok bool) {
	hasF, hasH := c.i < len(c.s.Samples), c.j < len(c.s.Histograms)
	switch {
	case hasH && (!hasF || c.s.Histograms[c.j].T < c.s.Samples[c.i].T):
		x := c.s.Histograms[c.j]
		c.j++
		c.at = c.peek()
		return x.T, 0, x.H, x.FH, true
	case hasF:
		x := c.s.Samples[c.i]
		c.i++
		c.at = c.peek()
		return x.T, x.V, nil, nil, true
	}
	return 0, 0, nil, nil, false
}

// left is the number of samples after the cursor.
func (c *cursor) left() int { return len(c.s.Samples) - c.i + len(c.s.Histograms) - c.j }

type cursorHeap []*cursor

func (h cursorHeap) Len() int { return len(h) }
func (h cursorHeap) Less(i, j int) bool {
	ti, tj := h[i].at, h[j].at
	return ti < tj || ti == tj && h[i].k < h[j].k
}
func (h cursorHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// head appends the samples of series in [from, to) at or after the cutoff
// (and the resume mark) to raw in time order across series, committing
// every BatchSize samples and recording the mark after each commit; the
// last commit marks everything before to as in raw.
func (im *importer) head(series []Series, from, to int64, report func(done, total int)) error {
	var raw storage.AppendableV2 = im.t.Raw
	if im.t.RawAppendable != nil {
		raw = im.t.RawAppendable
	}
	from = max(from, im.cutoff, im.st.RawMark)
	h := cursorHeap{}
	total := 0
	for i := range series {
		c := cursorAt(&series[i], from)
		c.k = i
		if c.t() < to {
			h = append(h, &c)
			total += c.left() // at most: the samples after to are not appended
		}
	}
	heap.Init(&h)
	ctx := im.ctx
	// Raw's spans of the input's series around [from, to) (spanMargin),
	// read before any append, tell gap samples from the refused (gap.go).
	// Only where raw holds samples there, and not when the samples go
	// through a pipeline's tee in this process: its open hours would not
	// see the gap samples' blocks.
	var spans map[int]*span
	g := gaps{from: math.MaxInt64}
	fillGaps := false
	if rawMin, rawMax, ok := im.t.Raw.Bounds(); ok && im.t.RawAppendable == nil && rawMax >= from && rawMin < to && total > 0 {
		lo, hi := max(from, rawMin)-spanMargin, min(to, rawMax+1)
		if hi < math.MaxInt64-spanMargin {
			hi += spanMargin
		}
		q, err := im.t.Raw.Querier(lo, hi-1)
		if err != nil {
			return err
		}
		spans, err = rawSpans(ctx, q, series, lo, hi)
		if err = errors.Join(err, q.Close()); err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
		fillGaps = true
	}
	app := raw.AppenderV2(ctx)
	n, done := 0, 0
	commit := func(mark int64) error {
		if err := app.Commit(); err != nil {
			return fmt.Errorf("backfill raw commit: %w", err)
		}
		// Gap samples are written when the call ends: until then a resume
		// must read them again.
		im.st.RawMark = min(mark, g.from)
		if err := im.save(); err != nil {
			return err
		}
		report(done, total)
		app = raw.AppenderV2(ctx)
		n = 0
		return ctx.Err()
	}
	for h.Len() > 0 {
		c := h[0]
		// Commit only between timestamps, so the mark means "everything
		// before it is in raw" and a resume never skips half a timestamp.
		if t := c.t(); n >= im.cfg.BatchSize && t > im.st.RawMark {
			if err := commit(t); err != nil {
				return errors.Join(err, app.Rollback())
			}
		}
		t, v, hist, fhist, _ := c.next()
		_, err := app.Append(0, c.s.Labels, 0, t, v, hist, fhist, storage.AppendV2Options{})
		behind := errors.Is(err, storage.ErrTooOldSample) || errors.Is(err, storage.ErrOutOfBounds) || errors.Is(err, storage.ErrOutOfOrderSample)
		switch {
		case err == nil:
			im.res.RawSamples++
			if hist != nil || fhist != nil {
				im.res.HistogramSamples++
			}
		case behind && fillGaps && isGap(spans, c.k, t):
			g.add(series, c.k, t, v, hist, fhist)
		case behind || errors.Is(err, storage.ErrDuplicateSampleForTimestamp):
			// Behind what the head takes where raw holds the series, or
			// another value at a timestamp raw holds: the live one stays.
			im.res.DroppedSamples++
			im.res.RefusedRawSamples++
			if hist != nil || fhist != nil {
				im.res.DroppedHistogramSamples++
			}
		default:
			return errors.Join(fmt.Errorf("backfill raw append %s: %w", c.s.Labels, err), app.Rollback())
		}
		n++
		done++
		if c.t() < to {
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	// The last commit holds the mark at the first gap sample, if any; the
	// gap samples are written after it, so that the minute partitions
	// written again read every sample this call appended.
	if err := commit(to); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if len(g.series) > 0 {
		if err := im.fill(series, &g, from, to); err != nil {
			return err
		}
		im.st.RawMark = to
	}
	if to == math.MaxInt64 {
		im.st.RawDone = true
	}
	return im.save()
}

// blockCommit is how many samples writeRawBlock appends to its block's head
// between commits, as promtool's create-blocks-from does (its
// maxSamplesInAppender): an appender holds its samples until the commit,
// and a block's in one commit made the appender's buffers grow to the
// block's size, copied at every growth (a day of 2,000 series of 15 s:
// writeRawBlock took 8.5 CPU-s in a backfill whose heap was small enough
// to be collected often, and the appender's pooled buffers with it).
const blockCommit = 5000

// writeRawBlock writes the samples in [from, to), within one range of span
// milliseconds, as one block in dir and returns how many it holds, and how
// many of them are native histograms (none written when there are none).
func writeRawBlock(ctx context.Context, series []Series, dir string, span, from, to int64) (n, nh int, err error) {
	// Twice the span, as promtool gives it: the writer's head refuses a
	// sample half its chunk range behind the newest it holds, and a commit
	// of one series' samples to the range's end comes before the next
	// series' from its start. The block spans the samples written.
	w, err := newBlockWriter(dir, 2*span)
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, w.close()) }()
	app := w.AppenderV2(ctx)
	for i := range series {
		c := cursorAt(&series[i], from)
		var ref storage.SeriesRef
		for c.t() < to {
			t, v, h, fh, _ := c.next()
			if ref, err = app.Append(ref, c.s.Labels, 0, t, v, h, fh, storage.AppendV2Options{}); err != nil {
				return 0, 0, errors.Join(fmt.Errorf("%s: %w", c.s.Labels, err), app.Rollback())
			}
			n++
			if h != nil || fh != nil {
				nh++
			}
			if n%blockCommit == 0 {
				if err := app.Commit(); err != nil {
					return 0, 0, err
				}
				app = w.AppenderV2(ctx)
			}
		}
	}
	if err := app.Commit(); err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, nil
	}
	return n, nh, w.flush(ctx)
}

// blockWriter is tsdb.BlockWriter with the raw tier's chunk files
// (tiers.BlockChunkSegmentSize): Prometheus' writer preallocates 512 MiB
// for a block's first chunk file, so a backfill of a few megabytes failed
// on a disk with less free ("preallocate: no space left on device").
type blockWriter struct {
	dir       string
	span      int64
	head      *tsdb.Head
	chunkTemp string
}

func newBlockWriter(dir string, span int64) (*blockWriter, error) {
	tmp, err := os.MkdirTemp("", "strata-backfill-head")
	if err != nil {
		return nil, fmt.Errorf("backfill block writer: %w", err)
	}
	opts := tsdb.DefaultHeadOptions()
	opts.ChunkRange = span
	opts.ChunkDirRoot = tmp
	h, err := tsdb.NewHead(nil, slog.New(slog.DiscardHandler), nil, nil, opts, tsdb.NewHeadStats())
	if err == nil {
		err = h.Init(math.MinInt64)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("backfill block writer: %w", err), os.RemoveAll(tmp))
	}
	return &blockWriter{dir: dir, span: span, head: h, chunkTemp: tmp}, nil
}

func (w *blockWriter) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return w.head.AppenderV2(ctx)
}

// flush writes what was appended as one block in dir (none when nothing
// was).
func (w *blockWriter) flush(ctx context.Context) error {
	c, err := tsdb.NewLeveledCompactorWithOptions(ctx, nil, slog.New(slog.DiscardHandler), []int64{w.span}, chunkenc.NewPool(),
		tsdb.LeveledCompactorOptions{MaxBlockChunkSegmentSize: tiers.BlockChunkSegmentSize})
	if err != nil {
		return fmt.Errorf("backfill block writer: %w", err)
	}
	// Block ranges are half-open: the block ends one past its newest sample.
	if _, err := c.Write(w.dir, w.head, w.head.MinTime(), w.head.MaxTime()+1, nil); err != nil {
		return fmt.Errorf("compactor write: %w", err)
	}
	return nil
}

func (w *blockWriter) close() error {
	return errors.Join(w.head.Close(), os.RemoveAll(w.chunkTemp))
}

// normalize drops empty series, sorts samples by time and keeps the last of
// samples sharing a timestamp. It sorts series by labels so that the
// fingerprint does not depend on input order. conflicts counts the samples
// in [from, to) it left out for another value at their timestamp (another
// float, a histogram not equal, a float beside a histogram); a repeat of
// the same value is not one.
func normalize(in []Series, from, to int64) (out []Series, conflicts int) {
	out = make([]Series, 0, len(in))
	for _, s := range in {
		if len(s.Samples) == 0 && len(s.Histograms) == 0 {
			continue
		}
		ss, n := sortLast(s.Samples, func(x Sample) int64 { return x.T }, func(x, y Sample) bool {
			return math.Float64bits(x.V) == math.Float64bits(y.V)
		}, from, to)
		hs, m := sortLast(s.Histograms, func(x HistogramSample) int64 { return x.T }, func(x, y HistogramSample) bool {
			switch {
			case x.H != nil && y.H != nil:
				return x.H.Equals(y.H)
			case x.FH != nil && y.FH != nil:
				return x.FH.Equals(y.FH)
			}
			return false
		}, from, to)
		conflicts += n + m
		if len(hs) > 0 && len(ss) > 0 {
			// A float at a histogram's timestamp: the raw tier would take
			// one of the two, so the histogram is kept.
			ss = slices.DeleteFunc(ss, func(x Sample) bool {
				_, found := slices.BinarySearchFunc(hs, x.T, func(h HistogramSample, t int64) int { return cmp.Compare(h.T, t) })
				if found && x.T >= from && x.T < to {
					conflicts++
				}
				return found
			})
		}
		out = append(out, Series{Labels: s.Labels, Samples: ss, Histograms: hs})
	}
	slices.SortFunc(out, func(a, b Series) int { return labels.Compare(a.Labels, b.Labels) })
	return out, conflicts
}

// sortLast returns a sorted copy of xs (by the time t gives) with the last
// of the samples sharing a timestamp, and how many of those it left out in
// [from, to) are not the same as the one kept.
func sortLast[S any](xs []S, t func(S) int64, same func(a, b S) bool, from, to int64) ([]S, int) {
	if len(xs) == 0 {
		return nil, 0
	}
	out := slices.Clone(xs)
	slices.SortStableFunc(out, func(a, b S) int { return cmp.Compare(t(a), t(b)) })
	j, conflicts := 0, 0
	for i := 0; i < len(out); {
		// out[i:k] share a timestamp; the last is kept.
		k := i + 1
		for k < len(out) && t(out[k]) == t(out[i]) {
			k++
		}
		if ts := t(out[i]); ts >= from && ts < to {
			for _, x := range out[i : k-1] {
				if !same(x, out[k-1]) {
					conflicts++
				}
			}
		}
		out[j] = out[k-1]
		j++
		i = k
	}
	return out[:j], conflicts
}

// fingerprint identifies an input by its series, sample counts and time
// range (a float-only input's as before histograms were backfilled, so that
// its progress file still resumes).
func fingerprint(series []Series) string {
	var h uint64 = 14695981039346656037
	mix := func(v uint64) { h = (h ^ v) * 1099511628211 }
	for _, s := range series {
		first, last := s.span()
		mix(s.Labels.Hash())
		mix(uint64(len(s.Samples)))
		mix(uint64(first))
		mix(uint64(last))
		if len(s.Histograms) > 0 {
			mix(uint64(len(s.Histograms)))
		}
	}
	return fmt.Sprintf("%d-series-%016x", len(series), h)
}

func loadProgress(path string) (progressState, error) {
	var st progressState
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("read backfill progress: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: parse %s: %w", ErrProgressDamaged, path, err)
	}
	return st, nil
}

// saveProgress replaces the progress file atomically (temp file, fsync,
// rename), so an interruption leaves the old or the new state, never half.
func saveProgress(path string, st progressState) (err error) {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode backfill progress: %w", err)
	}
	if err := atomicfile.WriteFile(path, b); err != nil {
		return fmt.Errorf("save backfill progress: %w", err)
	}
	return nil
}

// samplesView exposes samples to storage.NewListSeriesIterator, which
// gives the window algorithm the chunkenc.Iterator it reads.
type samplesView []Sample

func (v samplesView) Get(i int) chunks.Sample { return floatSample{t: v[i].T, v: v[i].V} }
func (v samplesView) Len() int                { return len(v) }

type floatSample struct {
	t int64
	v float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.v }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }
