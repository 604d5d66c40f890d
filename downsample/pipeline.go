package downsample

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/internal/binio"
	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// Source is the raw tier as the pipeline reads it: samples through a
// storage.Queryable, and the time range it holds. *tiers.Raw implements it.
type Source interface {
	storage.Queryable
	// Bounds returns the oldest and the newest sample timestamp (ms, both
	// inclusive) the tier holds, and false when it is empty.
	Bounds() (mint, maxt int64, ok bool)
}

var _ Source = (*tiers.Raw)(nil)

// PartitionWriter is a rollup tier as the pipeline writes it; *tiers.Rollup
// implements it. WritePartition must be atomic (a partition either exists
// complete or not at all) and must replace an existing partition; an empty
// series list must still create the partition, so that HasPartition reports
// the partition final. Both methods must be safe for concurrent use with the
// tier's readers.
type PartitionWriter interface {
	WritePartition(start int64, series []tiers.SeriesWindows) error
	HasPartition(start int64) bool
}

// MinuteTier is the minute tier: written by the pipeline and read back to
// build hour windows (never from raw data, which may be gone). *tiers.Rollup
// implements it. Select returns every series with windows starting in
// [mint, maxt] (maxt inclusive), each series once, windows ascending.
type MinuteTier interface {
	PartitionWriter
	Select(ctx context.Context, mint, maxt int64, matchers ...*labels.Matcher) ([]tiers.SeriesWindows, error)
}

// Config configures the pipeline.
type Config struct {
	// KindOf types each series as a counter or a gauge (see Kind). nil makes
	// every series a counter; cmd/strata passes the metric catalogue's
	// typing (GaugesByName(dcgmbridge.Catalogue.IsGauge)).
	KindOf KindFunc
	// Lateness is how far behind the raw tier's newest sample a sample may
	// still arrive and must reach the rollups: the raw tier's out-of-order
	// window. Minute windows are computed once the watermark (newest raw
	// sample - Lateness) has passed their end, so they are final when made.
	Lateness time.Duration
	// Interval is how often Run ticks. Each tick computes the minutes that
	// became final, so the computed windows trail the watermark by at most
	// about one minute plus Interval.
	Interval time.Duration
	// MinuteRetention is the minute tier's retention. On start, hour
	// partitions are rebuilt only for days whose minute partitions are all
	// still retained (a day partly deleted would give short hours).
	MinuteRetention time.Duration
	// SpillDir is where the open hours' minute windows wait for their
	// partition (one file per hour, in the page cache rather than the
	// heap); files left there by a previous process are removed by New.
	// Empty keeps them in memory.
	SpillDir string
	// SparseInterval is the sample interval at and above which a series'
	// minute windows are not spilled: the readers of the open hours (the
	// flush, VisitOpenWindows) recompute them from raw, which costs about
	// what reading them from the spill does, while the spill would cost
	// about what the raw samples do (docs/rollups.md, "Memory"). Zero is
	// DefaultSparseInterval; negative spills every series.
	SparseInterval time.Duration
	// DirectGrace, when positive, holds an hour's partition until the
	// direct series' writer (Direct) has written a sample past the hour,
	// or the watermark is DirectGrace past the hour's flush time: after a
	// restart the diagnosis engine writes again the baselines the crash
	// lost (diagnose/bootstrap.go), and an hour flushed from raw before
	// it does would be written without them. Within the same grace the
	// partition also waits for the open windows' reader to leave the hour
	// (HoldReads). Zero never waits.
	DirectGrace time.Duration
}

// DefaultDirectGrace is Config.DirectGrace for a pipeline with a direct
// writer: the diagnosis engine's start-up read-back and warm-up take
// minutes at 500,000 series.
const DefaultDirectGrace = 30 * time.Minute

// DefaultConfig returns the defaults: 10 m lateness (the raw tier's default
// out-of-order window), a 15 s tick and the minute tier's 30 d retention.
func DefaultConfig() Config {
	return Config{Lateness: 10 * time.Minute, Interval: 15 * time.Second, MinuteRetention: 30 * 24 * time.Hour}
}

// Pipeline builds minute windows from the raw tier and hour windows from the
// minute tier, continuously and behind a watermark. It keeps the windows of
// the current, unflushed hour in memory only: no rollup WAL is needed because
// every partition without a file is recomputed from the finer tier after a
// restart (see docs/rollups.md).
//
// Tick, Run, Close and the appenders Tee returns are safe for concurrent
// use; ticks are serialized. The caller MUST call Close, before closing the
// tiers.
type Pipeline struct {
	cfg    Config
	src    Source
	minute MinuteTier
	hour   PartitionWriter
	logger *slog.Logger
	now    func() time.Time
	m      metrics

	tickMu sync.Mutex // serializes Tick and Close
	// commitMu orders the tee's commits with the tick's watermark: a commit
	// holds it shared from the raw commit until its samples are folded, the
	// tick exclusively while it reads the raw tier's newest time, so every
	// sample that time counts is folded before the minutes it makes final
	// are drained.
	commitMu sync.RWMutex
	started  bool
	closed   bool
	mark     int64 // end (ms, exclusive) of the minutes computed so far
	dayMark  int64 // start of the first day whose hour partition may still be missing

	tap teeState // the series the appenders Tee returns fold samples for

	// spillMu guards spills and their blocks. Readers (OpenWindowsIn) hold
	// it for reading while they read a spill; the tick holds it for writing
	// only to add a block, or to drop a spill and then forget the series
	// no spill refers to any more (so a reader never sees a slot reused).
	spillMu sync.RWMutex
	spills  map[int64]*hourSpill // open hours' windows by hour start
	encBuf  []byte               // block encoding scratch, used by the tick

	sparseAfter int64 // Config.SparseInterval in ms; 0: every series is spilled

	pubMark atomic.Int64  // mark as of the last tick, for Mark (notify.go)
	markCh  chan struct{} // MarkAdvanced

	// The hour partitions' builds run beside the tick, one day at a time:
	// a day of 500,000 series is minutes of work, which inside the tick
	// held the minute windows, the flushes and the mark (docs/rollups.md,
	// "The hour tier's build"). building, buildFails and buildRetry are
	// guarded by tickMu; Close cancels buildCtx.
	building    *dayBuild
	buildCtx    context.Context
	buildCancel context.CancelFunc
	buildFails  int       // failed builds in a row
	buildRetry  time.Time // no build starts before (p.now) after a failure
}

// buildBackoff is how long the ticks wait to start a build again after
// fails failed builds in a row: a tick's interval, doubled with each
// failure, at most an hour. A build that fails every time (a corrupt minute
// partition, a full disk) read the whole day again every tick, as
// Prometheus' compaction would without its backoff.
func (p *Pipeline) buildBackoff(fails int) time.Duration {
	return min(p.cfg.Interval<<min(fails-1, 20), time.Hour)
}

// dayBuild is a day's hour partition being built beside the tick. Its
// results are set before done is closed.
type dayBuild struct {
	day             int64
	done            chan struct{}
	series, windows int
	took            time.Duration
	err             error
}

type metrics struct {
	lag        prometheus.Gauge
	watermark  prometheus.Gauge
	flushed    prometheus.Gauge
	windows    *prometheus.CounterVec
	partitions *prometheus.CounterVec
	samples    prometheus.Counter
	late       prometheus.Counter
	outOfOrder prometheus.Counter
	recomputed prometheus.Counter
	forgotten  prometheus.Counter
	histograms prometheus.Counter
	errors     prometheus.Counter
	buildTime  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) metrics {
	f := promauto.With(reg)
	return metrics{
		lag: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_downsample_lag_seconds",
			Help: "How far the computed minute windows (in memory or on disk) trail the watermark (newest raw sample minus the allowed lateness).",
		}),
		watermark: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_downsample_watermark_timestamp_seconds",
			Help: "The watermark: newest raw sample time minus the allowed lateness.",
		}),
		flushed: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_downsample_flushed_timestamp_seconds",
			Help: "End of the newest minute partition written to disk.",
		}),
		windows: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_downsample_windows_total",
			Help: "Rollup windows written to a tier's partitions.",
		}, []string{"tier"}),
		partitions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_downsample_partitions_written_total",
			Help: "Rollup partitions written (including partitions recomputed after a restart).",
		}, []string{"tier"}),
		samples: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_downsample_samples_total",
			Help: "Raw float samples aggregated into minute windows (incremental and flush-time reads both count).",
		}),
		late: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_downsample_late_samples_total",
			Help: "Samples that arrived after their minute was final (behind the watermark): their window is folded again, or recomputed from raw, and replaces the one computed.",
		}),
		outOfOrder: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_downsample_out_of_order_samples_total",
			Help: "Samples the tee could not fold in order (out of order for their series, or older than the tee): the minutes they change are recomputed from raw for their series.",
		}),
		recomputed: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_downsample_recomputed_series_total",
			Help: "Per-series recomputes of minute windows from raw, for out-of-order samples.",
		}),
		forgotten: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_downsample_series_forgotten_total",
			Help: "Series the tee stopped tracking after an hour without samples (their slot is reused).",
		}),
		histograms: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_downsample_native_histogram_samples_skipped_total",
			Help: "Native histogram samples not rolled up: native histograms are served from the raw tier only.",
		}),
		errors: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_downsample_errors_total",
			Help: "Ticks that failed (reading raw, or writing or reading a rollup tier); the next tick retries.",
		}),
		buildTime: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_downsample_hour_build_duration_seconds",
			Help: "How long the last hour partition (a day's hour windows, built from its minute partitions beside the tick) took to build.",
		}),
	}
}

// New returns a pipeline reading src and writing minute and hour. now is the
// clock (time.Now in production); it decides which days' hour partitions are
// still rebuildable from the minute tier.
func New(cfg Config, src Source, minute MinuteTier, hour PartitionWriter, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*Pipeline, error) {
	if cfg.Lateness < 0 {
		return nil, fmt.Errorf("rollup lateness must not be negative, got %s", cfg.Lateness)
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("rollup interval must be positive, got %s", cfg.Interval)
	}
	if cfg.MinuteRetention < 24*time.Hour {
		return nil, fmt.Errorf("minute retention must be at least a day to build hour partitions, got %s", cfg.MinuteRetention)
	}
	if src == nil || minute == nil || hour == nil || now == nil {
		return nil, errors.New("rollup pipeline needs a source, a minute tier, an hour tier and a clock")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SpillDir != "" {
		if err := cleanSpillDir(cfg.SpillDir); err != nil {
			return nil, err
		}
	}
	p := &Pipeline{
		cfg: cfg, src: src, minute: minute, hour: hour,
		logger: logger.With("component", "downsample"), now: now, m: newMetrics(reg),
		spills: map[int64]*hourSpill{}, markCh: make(chan struct{}, 1),
	}
	p.buildCtx, p.buildCancel = context.WithCancel(context.Background())
	switch {
	case cfg.SparseInterval == 0:
		p.sparseAfter = DefaultSparseInterval
	case cfg.SparseInterval > 0:
		p.sparseAfter = max(1, cfg.SparseInterval.Milliseconds())
	}
	p.registerMemoryMetrics(reg)
	return p, nil
}

// ErrClosed is returned by Tick after Close.
var ErrClosed = errors.New("rollup pipeline closed")

// Run ticks every cfg.Interval until ctx is done. A failed tick is logged and
// counted, and retried at the next tick: partitions are idempotent, so a
// retry never double-counts.
func (p *Pipeline) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if err := p.Tick(ctx); err != nil {
			if errors.Is(err, ErrClosed) {
				return nil
			}
			if ctx.Err() != nil {
				return nil
			}
			p.logger.Error("rollup tick failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick does the work that became possible since the last tick: it computes
// the minute windows that the watermark has passed, flushes each minute
// partition (re-reading its hour from raw first, so late samples are in it)
// and starts building the hour partition of the first finished day without
// one from the minute tier. The build runs beside the ticks, one day at a
// time; a later tick collects it (a failed build is that tick's error, and
// is started again after a backoff: buildBackoff) and starts the next
// day's. BuildHours waits for them.
// The first tick also recovers: it recomputes every partition that has no
// file while its source data still exists.
func (p *Pipeline) Tick(ctx context.Context) error {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if err := p.tick(ctx); err != nil {
		p.m.errors.Inc()
		return err
	}
	return nil
}

func (p *Pipeline) tick(ctx context.Context) error {
	p.commitMu.Lock()
	rawMin, rawMax, ok := p.src.Bounds()
	p.commitMu.Unlock()
	if !ok {
		return nil
	}
	wm := rawMax - p.cfg.Lateness.Milliseconds()
	p.m.watermark.Set(float64(wm) / 1000)
	if !p.started {
		p.mark = timegrid.Floor(rawMin, HourRes)
		p.dayMark = timegrid.Ceil(p.now().Add(-p.cfg.MinuteRetention).UnixMilli(), DayLen)
		p.started = true
	}
	// Raw retention may have removed data this pipeline never saw (it was
	// stopped for longer than raw holds): start at what raw still has.
	if start := timegrid.Floor(rawMin, HourRes); p.mark < start && !p.spillBefore(start) {
		p.logger.Warn("raw data expired before it was rolled up", "from", fmtTime(p.mark), "to", fmtTime(start))
		p.mark = start
	}
	end := timegrid.Floor(wm, MinuteRes) // minutes ending at or before the watermark are final
	for p.mark < end {
		if err := ctx.Err(); err != nil {
			return err
		}
		h := timegrid.Floor(p.mark, HourRes)
		if p.mark == h && p.minute.HasPartition(h) {
			// Written before a restart, or by a backfill: final.
			if err := p.dropSpill(h); err != nil {
				return err
			}
			p.mark = h + HourRes
			continue
		}
		stop := min(end, h+HourRes)
		if p.mark == h && stop == h+HourRes && p.flushReady(h, wm) {
			// Recovery or catch-up: the whole hour is final, read it once.
			if _, err := p.flushFromRaw(ctx, h); err != nil {
				return err
			}
			p.mark = stop
			continue
		}
		if err := p.extendRaw(ctx, h, p.mark, stop); err != nil {
			return err
		}
		p.mark = stop
	}
	// Before the mark is published: the windows of the minutes that became
	// final, recomputed where a sample came out of order, are in the spill.
	if err := p.drainTee(ctx); err != nil {
		return err
	}
	flushed := false
	for _, h := range p.spillStarts() {
		if h+HourRes <= p.mark && p.flushReady(h, wm) {
			if err := p.flushMinutes(ctx, h); err != nil {
				return err
			}
			flushed = true
		}
	}
	if flushed {
		p.forgetIdle()
	}
	p.m.lag.Set(float64(max(0, wm-p.mark)) / 1000)
	p.publishMark()
	return p.buildDays()
}

// flushable reports whether the minute partition of hour h is final at
// watermark wm. It waits StaleLookahead past the hour's end so that a stale
// marker right after the hour can still mark its last windows.
func flushable(h, wm int64) bool { return wm >= h+HourRes+StaleLookahead }

// flushReady is flushable, and the direct series' writer past hour h and
// no read held in it (HoldReads), or Config.DirectGrace gone by.
func (p *Pipeline) flushReady(h, wm int64) bool {
	if !flushable(h, wm) {
		return false
	}
	grace := p.cfg.DirectGrace.Milliseconds()
	if grace <= 0 || wm >= h+HourRes+StaleLookahead+grace {
		return true
	}
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	return p.tap.directMax >= h+HourRes && (!p.tap.holding || p.tap.readHold >= h+HourRes)
}

// HoldReads tells the pipeline that its reader of the open windows (the
// diagnosis engine, whose minute snapshots read the last minutes of every
// series it tracks) reads windows from t (ms) on: with Config.DirectGrace
// set, an hour's partition is not written while t is inside or before the
// hour, until the grace has gone by. The reader then reads the hour from the
// open windows (the spill, or raw) to its last minute, as it did before the
// hour was final, and never from the new file: a file read costs its footer,
// its readers and its series' windows on top of the write's own memory, in
// the minutes after the write when Strata's memory peaked (docs/rollups.md,
// "The hour's write waits for the engine's reads"). One reader holds at a
// time: each call replaces the hold. ReleaseReads drops it.
func (p *Pipeline) HoldReads(t int64) {
	p.tap.mu.Lock()
	p.tap.readHold, p.tap.holding = t, true
	p.tap.mu.Unlock()
}

// ReleaseReads drops the hold HoldReads set (the reader stopped).
func (p *Pipeline) ReleaseReads() {
	p.tap.mu.Lock()
	p.tap.holding = false
	p.tap.mu.Unlock()
}

// unread reports whether no reader of the open windows will read hour h's
// partition once written: none waits (Config.DirectGrace is zero: in
// strata serve, the diagnosis engine is off), or it holds its reads past
// the hour. The write then keeps no series table for such a reader
// (tiers.WriteOptions.NoSeriesTable).
func (p *Pipeline) unread(h int64) bool {
	if p.cfg.DirectGrace <= 0 {
		return true
	}
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	return p.tap.holding && p.tap.readHold >= h+HourRes
}

// spillStarts returns the starts of the hours with a spill, ascending.
func (p *Pipeline) spillStarts() []int64 {
	p.spillMu.RLock()
	defer p.spillMu.RUnlock()
	out := make([]int64, 0, len(p.spills))
	for h := range p.spills {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// spillBefore reports whether an hour before t has a spill.
func (p *Pipeline) spillBefore(t int64) bool {
	starts := p.spillStarts()
	return len(starts) > 0 && starts[0] < t
}

// teeFrom returns the first minute the tee covers, and false without a tee.
func (p *Pipeline) teeFrom() (int64, bool) {
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	return p.tap.from, p.tap.enabled
}

// extendRaw computes the minute windows of [from, to) (inside hour h) that
// the tee does not cover from raw, into hour h's spill. The spill is created
// even when there is nothing to add, so that the hour is flushed.
func (p *Pipeline) extendRaw(ctx context.Context, h, from, to int64) error {
	sp, err := p.spillFor(h)
	if err != nil {
		return err
	}
	if teeFrom, ok := p.teeFrom(); ok {
		to = min(to, max(from, teeFrom))
	}
	if from >= to {
		return nil
	}
	rs := rawSpiller{p: p, sp: sp}
	st, err := walkWindows(ctx, p.src, MinuteRes, from, to, p.cfg.KindOf, nil, nil, rs.add)
	p.m.samples.Add(float64(st.Floats))
	p.m.histograms.Add(float64(st.Histograms))
	if err != nil {
		return err
	}
	return rs.flush()
}

// flushMinutes writes the minute partition of hour h from its spill, or
// from raw when the hour has none or lost windows (a failed spill write).
//
// Without the tee, the hour is always recomputed from raw: that is what
// makes samples that arrived after their minute was computed (a sender
// lagging behind the others by more than the lateness, which the raw tier
// still accepts in order) reach the partition; the spill only tells how
// many such samples there were. With the tee, such samples are folded as
// they commit.
func (p *Pipeline) flushMinutes(ctx context.Context, h int64) error {
	p.spillMu.RLock()
	sp := p.spills[h]
	reread := sp == nil || sp.reread
	p.spillMu.RUnlock()
	if _, tee := p.teeFrom(); !tee && sp != nil {
		var had uint64
		for s, err := range p.spillSeries(sp) {
			if err != nil {
				return fmt.Errorf("read rollup spill %s: %w", fmtTime(h), err)
			}
			for _, w := range s.Windows {
				had += uint64(w.Count)
			}
		}
		st, err := p.flushFromRaw(ctx, h)
		if err != nil {
			return err
		}
		if read := uint64(st.Floats); read > had { //nolint:gosec // a count
			p.m.late.Add(float64(read - had))
		}
		return nil
	}
	if reread {
		_, err := p.flushFromRaw(ctx, h)
		return err
	}
	return p.flushTee(ctx, h, sp)
}

// flushTee writes hour h's minute partition with the tee (writeTeeHour),
// then drops its spill.
func (p *Pipeline) flushTee(ctx context.Context, h int64, sp *hourSpill) error {
	if err := p.writeTeeHour(ctx, h, sp); err != nil {
		return err
	}
	return p.dropSpill(h)
}

// writeTeeHour writes hour h's minute partition from the dense series'
// windows in its spill and the other series' windows computed from raw
// (read once for all of them, through a temporary spill that sorts them
// into partition order). Raw is not read when every series the hour can
// hold is dense.
func (p *Pipeline) writeTeeHour(ctx context.Context, h int64, sp *hourSpill) (err error) {
	set := p.spillSet(h)
	var tmp *hourSpill
	if set.needRaw(h) {
		if tmp, err = p.newSpill(h, ".raw"); err != nil {
			return err
		}
		defer func() {
			if rerr := tmp.f.remove(); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove rollup spill: %w", rerr))
			}
		}()
		rs := rawSpiller{p: p, sp: tmp}
		st, err := walkRawBacked(ctx, p.src, set, h, h+HourRes, p.cfg.KindOf, nil, nil, rs.add)
		p.m.samples.Add(float64(st.Floats))
		p.m.histograms.Add(float64(st.Histograms))
		if err != nil {
			return err
		}
		if err := rs.flush(); err != nil {
			return err
		}
	}
	keep := func(k *spillKey) bool { return set.holds(k.lset, k.id) }
	return p.writeMinutesFrom(h, p.mergeSpills(sp, keep, tmp))
}

// flushFromRaw writes the minute partition of hour h computed from raw (the
// whole hour final: recovery, catch-up or a reread), through a temporary
// spill so that memory stays bounded whatever the series count, and returns
// what it read. The hour's open spill, if any, is superseded and dropped.
func (p *Pipeline) flushFromRaw(ctx context.Context, h int64) (st Stats, err error) {
	tmp, err := p.newSpill(h, ".raw")
	if err != nil {
		return st, err
	}
	defer func() {
		if rerr := tmp.f.remove(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove rollup spill: %w", rerr))
		}
	}()
	rs := rawSpiller{p: p, sp: tmp}
	st, err = walkWindows(ctx, p.src, MinuteRes, h, h+HourRes, p.cfg.KindOf, nil, nil, rs.add)
	p.m.samples.Add(float64(st.Floats))
	p.m.histograms.Add(float64(st.Histograms))
	if err != nil {
		return st, err
	}
	if err := rs.flush(); err != nil {
		return st, err
	}
	// The direct series have no raw samples: their windows are the spill's.
	p.spillMu.RLock()
	sp := p.spills[h]
	p.spillMu.RUnlock()
	if sp != nil && slices.ContainsFunc(sp.blocks, func(b spillBlock) bool { return b.direct }) {
		err = p.writeMinutesFrom(h, p.mergeSpills(sp, func(k *spillKey) bool { return k.direct }, tmp))
	} else {
		err = p.writeMinutes(h, tmp)
	}
	if err != nil {
		return st, err
	}
	return st, p.dropSpill(h)
}

// seriesPartitionWriter is a minute tier that takes a partition one series
// at a time (*tiers.Rollup): the pipeline then never holds an hour of
// windows.
type seriesPartitionWriter interface {
	WritePartitionSeries(start int64, series iter.Seq2[tiers.SeriesWindows, error], opts tiers.WriteOptions) error
}

// writeMinutes writes hour h's minute partition from sp.
func (p *Pipeline) writeMinutes(h int64, sp *hourSpill) error {
	return p.writeMinutesFrom(h, p.spillSeries(sp))
}

// writeMinutesFrom writes hour h's minute partition from its series in
// partition order.
func (p *Pipeline) writeMinutesFrom(h int64, in iter.Seq2[tiers.SeriesWindows, error]) error {
	var nSeries, windows int
	series := func(yield func(tiers.SeriesWindows, error) bool) {
		for s, err := range in {
			if err == nil {
				nSeries++
				windows += len(s.Windows)
			}
			if !yield(s, err) {
				return
			}
		}
	}
	var err error
	if sw, ok := p.minute.(seriesPartitionWriter); ok {
		err = sw.WritePartitionSeries(h, series, tiers.WriteOptions{NoSeriesTable: p.unread(h)})
	} else {
		var all []tiers.SeriesWindows
		for s, serr := range series {
			if serr != nil {
				err = serr
				break
			}
			all = append(all, tiers.SeriesWindows{Labels: s.Labels, Windows: slices.Clone(s.Windows)})
		}
		if err == nil {
			err = p.minute.WritePartition(h, all)
		}
	}
	if err != nil {
		return fmt.Errorf("flush minute partition %s: %w", fmtTime(h), err)
	}
	p.m.partitions.WithLabelValues("minute").Inc()
	p.m.windows.WithLabelValues("minute").Add(float64(windows))
	p.m.flushed.Set(float64(h+HourRes) / 1000)
	p.logger.Debug("minute partition written", "start", fmtTime(h), "series", nSeries, "windows", windows)
	return nil
}

// maxRawBlockWindows bounds the windows read from raw that are held before
// they are written to a spill block (~10 MiB).
const maxRawBlockWindows = 1 << 17

// rawSpiller collects windows read from raw (walkWindows' callback) and
// writes them to a spill in sorted blocks.
type rawSpiller struct {
	p       *Pipeline
	sp      *hourSpill
	series  []rawSeries
	arena   []tiers.Window // the series' windows, reused for the next block
	windows int
	err     error
}

func (r *rawSpiller) add(lset labels.Labels, ws []tiers.Window) {
	if r.err != nil {
		return
	}
	// One arena for the block's windows, not a slice per series: a copy
	// per series was 40 % of the flush's raw read (BenchmarkFlushHour). A
	// series' slice may keep an arena the next append outgrew, until the
	// block is written.
	n := len(r.arena)
	if n+len(ws) > cap(r.arena) {
		// Doubling, not append's quarter: a block's arena of 10 MiB
		// grown by quarters copied itself four times over.
		r.arena = slices.Grow(r.arena, max(n, len(ws), 1024))
	}
	r.arena = append(r.arena, ws...)
	r.series = append(r.series, rawSeries{lset: lset.Copy(), id: tiers.SeriesID(lset), ws: r.arena[n:len(r.arena):len(r.arena)]})
	if r.windows += len(ws); r.windows >= maxRawBlockWindows {
		r.err = r.flush()
	}
}

// flush writes the collected series as one block.
func (r *rawSpiller) flush() error {
	if r.err != nil || len(r.series) == 0 {
		return r.err
	}
	slices.SortFunc(r.series, func(a, b rawSeries) int {
		return tiers.ComparePartitionOrder(a.lset, a.id, b.lset, b.id)
	})
	buf := r.p.encBuf[:0]
	blk := spillBlock{records: len(r.series), inline: true, minStart: math.MaxInt64, maxStart: math.MinInt64}
	enc := windowCodec{h: r.sp.start}
	for _, s := range r.series {
		buf = binio.AppendLabels(buf, s.lset)
		buf = binary.AppendUvarint(buf, uint64(len(s.ws)))
		for _, w := range s.ws {
			buf = enc.appendWindow(buf, w)
			blk.minStart, blk.maxStart = min(blk.minStart, w.Start), max(blk.maxStart, w.Start)
		}
	}
	r.p.encBuf = buf
	clear(r.series)
	r.series, r.windows, r.arena = r.series[:0], 0, r.arena[:0]
	return r.p.writeBlock(r.sp, buf, blk)
}

// buildDays collects the hour partition build that finished since the last
// tick, then starts building the first day whose minute partitions are all
// final and that has no hour partition, unless a build still runs or the
// pipeline is closing. Days without a minute partition (before the tier
// existed) are passed over here. Called with tickMu held.
func (p *Pipeline) buildDays() error {
	if b := p.building; b != nil {
		select {
		case <-b.done:
		default:
			return nil
		}
		if err := p.collect(b); err != nil {
			p.buildFails++
			wait := p.buildBackoff(p.buildFails)
			p.buildRetry = p.now().Add(wait)
			return fmt.Errorf("%w (built again in %s)", err, wait)
		}
	}
	done := p.mark // minute partitions before done are on disk
	if starts := p.spillStarts(); len(starts) > 0 {
		done = min(done, starts[0])
	}
	for d := p.dayMark; d+DayLen <= done; d += DayLen {
		if !p.hour.HasPartition(d) && len(minuteHours(p.minute, d)) > 0 {
			if !p.closed && !p.now().Before(p.buildRetry) {
				p.startBuild(d)
			}
			return nil
		}
		p.dayMark = d + DayLen
	}
	return nil
}

// startBuild starts building day d's hour partition from its minute
// partitions, beside the tick.
func (p *Pipeline) startBuild(d int64) {
	b := &dayBuild{day: d, done: make(chan struct{})}
	p.building = b
	p.logger.Debug("building hour partition", "day", fmtTime(d))
	go func() {
		defer close(b.done)
		began := time.Now()
		b.series, b.windows, b.err = BuildHourPartition(p.buildCtx, p.minute, p.hour, d, p.cfg.KindOf, p.cfg.SpillDir)
		b.took = time.Since(began)
	}()
}

// collect takes the finished build b: a successful one is counted, resets
// the backoff and moves dayMark past its day; a failed one returns its
// error. A day with no minute partition left (before the tier existed) was
// skipped: nothing to count.
func (p *Pipeline) collect(b *dayBuild) error {
	p.building = nil
	if b.err != nil {
		return b.err
	}
	p.buildFails = 0
	p.dayMark = b.day + DayLen
	if b.series < 0 {
		return nil
	}
	p.m.partitions.WithLabelValues("hour").Inc()
	p.m.windows.WithLabelValues("hour").Add(float64(b.windows))
	p.m.buildTime.Set(b.took.Seconds())
	p.logger.Info("hour partition written", "day", fmtTime(b.day), "series", b.series, "windows", b.windows, "took", b.took.Round(time.Millisecond))
	return nil
}

// BuildHours builds the hour partition of every day whose minute partitions
// are all final and that has none, waiting for the build a tick started and
// for each next day's in turn, as the ticks would. It returns the first
// build's error, or ctx's. Ticks wait meanwhile. For tests, and for callers
// that need a finished day's hour partition now.
func (p *Pipeline) BuildHours(ctx context.Context) error {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.closed {
		return ErrClosed
	}
	for {
		if b := p.building; b != nil {
			select {
			case <-b.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		p.buildRetry = time.Time{} // asked for now: no backoff
		if err := p.buildDays(); err != nil {
			return err
		}
		if p.building == nil {
			return nil
		}
	}
}

// stopBuild cancels the running hour partition build and waits for it to
// return. A day whose build was cancelled has no hour partition, and the
// next start builds it from the minute tier, like any day without one.
func (p *Pipeline) stopBuild() error {
	p.buildCancel()
	b := p.building
	if b == nil {
		return nil
	}
	<-b.done
	err := p.collect(b)
	if errors.Is(err, context.Canceled) {
		p.logger.Info("hour partition build stopped by shutdown; it is built again at the next start", "day", fmtTime(b.day))
		return nil
	}
	return err
}

// Close runs a last tick, so that minute partitions that became final are
// written, and stops the pipeline. The windows of the open hour are dropped:
// they are recomputed from raw on the next start. A running hour partition
// build is cancelled (as Prometheus cancels a compaction on shutdown) and no
// other starts: the next start builds the days without one from the minute
// tier. Close does not close the tiers.
func (p *Pipeline) Close() error {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	if err := p.tick(context.Background()); err != nil {
		p.m.errors.Inc()
		errs = append(errs, err)
	}
	if err := p.stopBuild(); err != nil {
		errs = append(errs, err)
	}
	for _, h := range p.spillStarts() {
		if err := p.dropSpill(h); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close rollup pipeline: %w", err)
	}
	return nil
}

// computeWindows reads every series of q in [from, to) and returns their
// windows of resolution res, leaving out series without a float sample, in
// no particular order. It reads StaleLookahead past to, so that a stale
// marker right after the range marks the last window stale (see
// AppendWindows). Labels are copied: they stay valid after the querier closes.
// kindOf types the series (Config.KindOf).
func computeWindows(ctx context.Context, q storage.Queryable, res, from, to int64, kindOf KindFunc) ([]tiers.SeriesWindows, Stats, error) {
	var out []tiers.SeriesWindows
	st, err := walkWindows(ctx, q, res, from, to, kindOf, nil, nil, func(lset labels.Labels, ws []tiers.Window) {
		out = append(out, tiers.SeriesWindows{Labels: lset.Copy(), Windows: slices.Clone(ws)})
	})
	if err != nil {
		return nil, st, err
	}
	return out, st, nil
}

// walkWindows computes the windows of resolution res in [from, to) of the
// series of q matching ms (none: every series) and calls fn with each series
// that has some. first, when set, gives each series' first minute to compute
// (false: skip the series); it is called before the series is read, with
// labels valid during the call. lset and ws are only valid during fn's call:
// ws is reused, and lset may point into a block's index.
func walkWindows(ctx context.Context, q storage.Queryable, res, from, to int64, kindOf KindFunc, ms []*labels.Matcher,
	first func(lset labels.Labels) (int64, bool), fn func(lset labels.Labels, ws []tiers.Window),
) (st Stats, err error) {
	qr, err := q.Querier(from, to+StaleLookahead)
	if err != nil {
		return st, fmt.Errorf("query raw tier: %w", err)
	}
	defer func() {
		if cerr := qr.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close raw querier: %w", cerr))
		}
	}()
	if len(ms) == 0 {
		ms = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")}
	}
	hints := &storage.SelectHints{Start: from, End: to + StaleLookahead, Func: "rollup"}
	set := qr.Select(ctx, false, hints, ms...)
	var (
		it chunkenc.Iterator
		ws []tiers.Window
	)
	for set.Next() {
		s := set.At()
		lset := s.Labels()
		start := from
		if first != nil {
			f, ok := first(lset)
			if !ok || f >= to {
				continue
			}
			start = max(start, f)
		}
		it = s.Iterator(it)
		var sst Stats
		ws, sst, err = AppendWindows(ws[:0], it, res, start, to, kindOf.Of(lset))
		st.add(sst)
		if err != nil {
			return st, fmt.Errorf("roll up series %s: %w", lset, err)
		}
		if len(ws) > 0 {
			fn(lset, ws)
		}
	}
	if err := set.Err(); err != nil {
		return st, fmt.Errorf("select raw series: %w", err)
	}
	return st, nil
}

func sortSeries(series []tiers.SeriesWindows) {
	slices.SortFunc(series, func(a, b tiers.SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
}

func fmtTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }
