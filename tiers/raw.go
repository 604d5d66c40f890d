package tiers

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/strata-dev/strata/internal/mapped"
)

// RawConfig configures the raw (per-second) tier.
type RawConfig struct {
	// Dir holds the TSDB blocks and the WAL.
	Dir string
	// Retention is how long raw samples are kept (24 h by default).
	Retention time.Duration
	// OutOfOrderWindow is how far behind the newest sample of the tier a sample may
	// still be appended. Older samples are rejected with storage.ErrTooOldSample.
	OutOfOrderWindow time.Duration
	// WALCompression is how WAL records are compressed: compression.Snappy
	// (the default, as Prometheus'), compression.Zstd or compression.None
	// ("" is None). On the paced 10,000-series load zstd wrote 0.79x
	// snappy's WAL bytes for about 5% more of Strata's CPU, but Prometheus'
	// WAL encoder keeps a zstd encoder per GOMAXPROCS with a 16 MiB history
	// each (32 MiB of heap on 2 cores), so it is not the default. Each
	// record says how it was compressed, so a WAL written with one replays
	// under another.
	WALCompression compression.Type
	// SampleRecordsV2 writes the WAL's samples as the TSDB's SamplesV2
	// records (and native histograms as their V2 records: Prometheus'
	// st-storage feature, replayed by Prometheus 3.11 and later) instead of
	// its original ones: each sample's series reference is a delta to the
	// previous sample's rather than to the record's first, which snappy
	// compresses to 0.7x the bytes (docs/format/raw.md). The TSDB needs the
	// XOR2 float chunk encoding with them (stable since 3.15); histogram
	// chunks keep their encodings. No start timestamp is stored. A WAL or
	// block written either way is read either way.
	SampleRecordsV2 bool
	// ChunkMmapInterval is how often the head writes its full chunks to
	// its chunk files (chunks_head/) and drops them from the Go heap
	// (10 s; 0 is the TSDB's default, a minute, which Prometheus runs
	// with). The head holds every chunk it has filled since the last pass:
	// at an unpaced 250,000 samples/s that was up to about 95 MB of heap, the
	// largest item at the peak, and the collector lets the heap grow half
	// as much again. A pass finds the series with full chunks from a counter
	// per stripe, so it costs little when none are. The same timer reloads
	// the blocks directory, a listing of the tier's blocks.
	ChunkMmapInterval time.Duration
	// StripeSize is how many stripes the head's series maps are cut into
	// (a lock, a map by reference and a map by label hash each), a power of
	// two; 0 is the TSDB's default, 16,384, which Prometheus runs with. The
	// default here is 8,192: at the paced 50,000 series the stripes of the
	// TSDB's default held 81 bytes per series more (4 MB of fixed maps and
	// padded locks; BenchmarkRawHeadStripes). Fewer stripes save little
	// more (4,096: 15 bytes) and make each stripe's map larger than Go's
	// small-map size: in a paced run at 4,096 the head's lookups by
	// reference took twice the CPU of 16,384's.
	StripeSize int
	// Isolation makes every commit (a remote-write request's samples) show
	// in queries all at once or not at all, as in Prometheus, where a
	// commit is one scrape. It is off by default, as in Cortex's and
	// Mimir's ingesters: a remote-write sender cuts a scrape's samples
	// into requests by series and sends them at once on several shards, so
	// no commit here is a scrape, and the guarantee buys nothing. It costs
	// every head series a ring of append IDs (64 bytes once the series has
	// an append) and every commit and head read the bookkeeping
	// (BenchmarkRawHeadIsolation).
	Isolation bool
	// SamplesPerChunk is the number of samples the head aims to put in a
	// chunk (0: the TSDB's 120). Each chunk the head cuts leaves a
	// reference in memory (40 bytes) until the head compacts, up to 1.5
	// BlockDurations later: at one sample a second, 120 makes 45 of them a
	// series with blocks of an hour (90 with the TSDB's 2 h); more
	// samples per chunk make fewer, and a longer open chunk.
	SamplesPerChunk int
	// BlockDuration is the span of the blocks the head is compacted into
	// (0: the TSDB's 2 h, Prometheus' --storage.tsdb.min-block-duration).
	// The head compacts once it spans 1.5 times this, so it also bounds what
	// the head holds in memory: each chunk the head has cut since its last
	// compaction keeps a 40-byte reference, a series at one sample a second
	// one every 2 minutes, and the WAL the head replays after a restart.
	// Samples are accepted in order up to half of it behind the newest
	// (older ones only within OutOfOrderWindow).
	BlockDuration time.Duration
	// BlockChunkSegmentSize is the most bytes of chunks one file of a
	// block holds (0: BlockChunkSegmentSize). A block's write preallocates
	// each file at this size (fallocate) before it truncates it to what
	// it holds, so a compaction needs this much free disk whatever the
	// block's size.
	BlockChunkSegmentSize int64
}

// BlockChunkSegmentSize is the raw tier's default size of a block's chunk
// files: 64 MiB, where Prometheus' TSDB preallocates 512 MiB. With 512 MiB
// a compaction on a disk with less free failed ("preallocate: no space
// left on device") while storage.min_free_bytes' 256 MiB still let
// ingestion go on, so the head grew until the disk was full; at 64 MiB a
// compaction goes on while ingestion is refused. A block of more chunks
// has more files: the paced 500,000-series benchmark's first block (125 M
// samples, 492 MiB of chunks) eight.
const BlockChunkSegmentSize = 64 << 20

// DefaultRawConfig returns the raw tier's defaults: 24 h retention, a 10 minute
// out-of-order window and blocks of an hour.
func DefaultRawConfig(dir string) RawConfig {
	return RawConfig{Dir: dir, Retention: 24 * time.Hour, OutOfOrderWindow: 10 * time.Minute, WALCompression: compression.Snappy,
		SampleRecordsV2: true, ChunkMmapInterval: 10 * time.Second, StripeSize: 8192, BlockDuration: time.Hour}
}

// MaxExemplars is the size of the raw tier's exemplar storage, one circular
// buffer of exemplars as Prometheus' (storage.exemplars.max_exemplars, whose
// default it is).
const MaxExemplars = 100_000

// Raw is the per-second tier: a Prometheus TSDB with its write-ahead log.
//
// Durability: an appender's Commit writes the samples' WAL records to the
// operating system (write(2)) before it returns, so once Commit has returned the
// samples survive the process being killed (kill -9) and are replayed on the next
// Open; a torn record at the WAL's tail is repaired on Open. The WAL is fsynced
// when a segment is cut (every 128 MiB) and on Close, as in Prometheus: a power
// loss or kernel crash can lose what was written since the last fsync.
//
// Raw is safe for concurrent use.
type Raw struct {
	db    *tsdb.DB
	cfg   RawConfig
	stats *tsdb.DBStats // the WAL replay's progress (WALReplayStatus)

	// oooBounds caches the sample bounds of out-of-order blocks, whose
	// meta.json gives their block range instead (see Bounds), by ULID.
	oooMu     sync.Mutex
	oooBounds map[ulid.ULID][2]int64

	mu     sync.Mutex // ReleaseChunkPages against Close
	closed bool

	// compactor releases the page mappings its compactions read; nil
	// where mapped.Release does nothing.
	compactor *releasingCompactor

	// exemplarsSized is set once the exemplar storage has its MaxExemplars
	// entries. It holds none while no exemplar has arrived: the buffer is
	// allocated whole (64 bytes an entry, 6.4 MB), and a fleet that sends no
	// exemplars would pay for it anyway. Until then the tier's appenders
	// size it before they take the first exemplar (sizeExemplars).
	exemplarsSized atomic.Bool
	exemplarsOnce  sync.Once

	// lateAfter (ns; 0: not tracked) is how far behind now a sample must be
	// for its commit to count in lateCommits (TrackLateAppends).
	lateAfter   atomic.Int64
	lateCommits atomic.Uint64
	lateNow     func() time.Time // set once, before any append
}

// OpenRaw opens (or creates) the raw tier in cfg.Dir, replaying and repairing its
// WAL. The caller MUST call Close.
func OpenRaw(cfg RawConfig, logger *slog.Logger, reg prometheus.Registerer) (*Raw, error) {
	if cfg.Retention <= 0 {
		return nil, fmt.Errorf("raw tier retention must be positive, got %s", cfg.Retention)
	}
	if cfg.OutOfOrderWindow < 0 {
		return nil, fmt.Errorf("out-of-order window must not be negative, got %s", cfg.OutOfOrderWindow)
	}
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = cfg.Retention.Milliseconds()
	opts.OutOfOrderTimeWindow = cfg.OutOfOrderWindow.Milliseconds()
	opts.EnableExemplarStorage = true
	opts.MaxExemplars = MaxExemplars
	opts.EnableMetadataWALRecords = true
	opts.IsolationDisabled = !cfg.Isolation
	if cfg.StripeSize < 0 || cfg.StripeSize&(cfg.StripeSize-1) != 0 {
		return nil, fmt.Errorf("raw tier stripe size must be a power of two, got %d", cfg.StripeSize)
	}
	if cfg.StripeSize > 0 {
		opts.StripeSize = cfg.StripeSize
	}
	if cfg.ChunkMmapInterval > 0 {
		opts.BlockReloadInterval = cfg.ChunkMmapInterval
	}
	// tsdb.DefaultOptions leaves the WAL uncompressed (Prometheus' own
	// default, snappy, is set by its command line), which made the WAL, all a
	// young store holds, about 1.6x Prometheus' bytes per sample.
	switch cfg.WALCompression {
	case "", compression.None:
		opts.WALCompression = compression.None
	case compression.Snappy, compression.Zstd:
		opts.WALCompression = cfg.WALCompression
	default:
		return nil, fmt.Errorf("raw tier WAL compression %q: want %s, %s or %s", cfg.WALCompression, compression.Snappy, compression.Zstd, compression.None)
	}
	if cfg.SamplesPerChunk > 0 {
		opts.SamplesPerChunk = cfg.SamplesPerChunk
	}
	if cfg.BlockDuration > 0 {
		opts.MinBlockDuration = cfg.BlockDuration.Milliseconds()
	}
	opts.MaxBlockChunkSegmentSize = cmp.Or(cfg.BlockChunkSegmentSize, BlockChunkSegmentSize)
	if cfg.SampleRecordsV2 {
		opts.EnableSTStorage = true
		opts.FloatChunkEncoding = chunkenc.EncXOR2
	}
	// Blocks are merged three at a time, into blocks of at most 3 h and a
	// quarter of the retention: a read of a day across 24 blocks of an hour
	// took 1.37-1.46x the CPU of one across 12 of 2 h, across 3 h blocks
	// 1.03-1.10x (BenchmarkRawQueryBlockDuration). Longer blocks would only
	// delay deletion. Blocks of 2 h (the TSDB's) are not merged, as before.
	opts.MaxBlockDuration = max(opts.MinBlockDuration,
		min(3*opts.MinBlockDuration, 3*time.Hour.Milliseconds(), cfg.Retention.Milliseconds()/4))
	tierLogger := slog.New(logFilter{logger.With("tier", "raw").Handler()})
	var compactor *releasingCompactor
	opts.NewCompactorFunc = newReleasingCompactor(cfg.Dir, tierLogger, &compactor)
	stats := tsdb.NewDBStats()
	db, aside, err := openRawSettingAside(cfg.Dir, func() (*tsdb.DB, error) {
		if reg == nil {
			return tsdb.Open(cfg.Dir, tierLogger, nil, opts, stats)
		}
		// A failed open is tried again: what it registered is taken back.
		tr := &trackingRegisterer{Registerer: reg}
		db, err := tsdb.Open(cfg.Dir, tierLogger, tr, opts, stats)
		if err != nil {
			tr.unregisterAll()
		}
		return db, err
	}, tierLogger)
	if err != nil {
		return nil, fmt.Errorf("open raw tier %s: %w", cfg.Dir, err)
	}
	r := &Raw{db: db, cfg: cfg, stats: stats, oooBounds: map[ulid.ULID][2]int64{}, compactor: compactor}
	promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name: "corrupt_blocks_set_aside",
		Help: "Raw blocks found corrupt and moved to the tier's corrupt/ directory when it opened.",
	}).Set(float64(len(aside)))
	// The WAL is replayed into a storage of the full size, so exemplars
	// written before a restart are kept; only an empty one is given up.
	if err := r.releaseEmptyExemplars(); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return r, nil
}

// releaseEmptyExemplars sizes the exemplar storage for nothing when it holds
// no exemplar, until the first one arrives.
func (r *Raw) releaseEmptyExemplars() error {
	q, err := r.db.ExemplarQuerier(context.Background())
	if err != nil {
		return fmt.Errorf("raw tier exemplars: %w", err)
	}
	res, err := q.Select(math.MinInt64, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".*")})
	if err != nil {
		return fmt.Errorf("raw tier exemplars: %w", err)
	}
	if len(res) > 0 {
		r.exemplarsSized.Store(true)
		return nil
	}
	r.resizeExemplars(0)
	return nil
}

// sizeExemplars gives the exemplar storage its MaxExemplars entries, once.
func (r *Raw) sizeExemplars() {
	r.exemplarsOnce.Do(func() {
		r.resizeExemplars(MaxExemplars)
		r.exemplarsSized.Store(true)
	})
}

// resizeExemplars resizes the head's exemplar storage to n exemplars, as
// Prometheus does on a configuration reload; the head's out-of-order window,
// which the same call sets, stays what the tier was opened with.
func (r *Raw) resizeExemplars(n int64) {
	var c config.Config
	c.StorageConfig.TSDBConfig = &config.TSDBConfig{OutOfOrderTimeWindow: r.cfg.OutOfOrderWindow.Milliseconds()}
	c.StorageConfig.ExemplarsConfig = &config.ExemplarsConfig{MaxExemplars: n}
	r.db.Head().ApplyConfig(&c, nil)
}

// Config returns the configuration the tier was opened with.
func (r *Raw) Config() RawConfig { return r.cfg }

// BlockDuration returns the span of the blocks the head is compacted into:
// RawConfig.BlockDuration, or the TSDB's default when that is 0.
func (r *Raw) BlockDuration() time.Duration {
	if r.cfg.BlockDuration > 0 {
		return r.cfg.BlockDuration
	}
	return time.Duration(tsdb.DefaultBlockDuration) * time.Millisecond
}

// HeadSeries returns the number of series in the head (what the
// remote-write receiver's series cache sizes itself to).
func (r *Raw) HeadSeries() int { return int(r.db.Head().NumSeries()) }

// Stats is the head's statistics and its postings' cardinality by
// statsByLabelName, the top limit of each (/api/v1/status/tsdb).
func (r *Raw) Stats(statsByLabelName string, limit int) (*tsdb.Stats, error) {
	return r.db.Head().Stats(statsByLabelName, limit), nil
}

// WALReplayStatus is the WAL replay's progress: the segments' range and the
// one replayed last (/api/v1/status/walreplay). OpenRaw returns after the
// replay, so a server answers with the finished replay's.
func (r *Raw) WALReplayStatus() (tsdb.WALReplayStatus, error) {
	return r.stats.Head.WALReplayStatus.GetWALReplayStatus(), nil
}

// BlockMetas are the persisted blocks' metadata (/api/v1/status/tsdb/blocks).
func (r *Raw) BlockMetas() ([]tsdb.BlockMeta, error) { return r.db.BlockMetas(), nil }

// DB returns the underlying TSDB, for the receiver's appends and for stats.
func (r *Raw) DB() *tsdb.DB { return r.db }

// Appender implements storage.Appendable.
func (r *Raw) Appender(ctx context.Context) storage.Appender {
	app := r.db.Appender(ctx)
	if !r.exemplarsSized.Load() {
		app = exemplarSizingAppender{Appender: app, r: r}
	}
	if d := r.lateAfter.Load(); d > 0 {
		app = &lateAppender{Appender: app, r: r, before: r.lateNow().Add(-time.Duration(d)).UnixMilli()}
	}
	return app
}

// AppenderV2 implements storage.AppendableV2. Its appenders implement
// storage.ExemplarAppenderV2 and storage.GetRef.
func (r *Raw) AppenderV2(ctx context.Context) storage.AppenderV2 {
	app := r.db.AppenderV2(ctx)
	ex, isEx := app.(storage.ExemplarAppenderV2)
	gr, isRef := app.(storage.GetRef)
	if !isEx || !isRef {
		return app
	}
	if !r.exemplarsSized.Load() {
		ex = exemplarSizingAppenderV2{ExemplarAppenderV2: ex, gr: gr, r: r}
	}
	if d := r.lateAfter.Load(); d > 0 {
		return &lateAppenderV2{ExemplarAppenderV2: ex, gr: gr, r: r, before: r.lateNow().Add(-time.Duration(d)).UnixMilli()}
	}
	return ex
}

// TrackLateAppends makes Generation change after every commit that
// appended a sample older than d before now() when the appender was taken
// (d of 0 or less: not tracked, the default; now nil: time.Now). The query
// API's results cache keeps the steps of answers older than its freshness
// and must learn when one may have changed; a sample appended behind the
// horizon is the only way new data reaches them. Call it before the first
// append.
func (r *Raw) TrackLateAppends(d time.Duration, now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	r.lateNow = now
	r.lateAfter.Store(int64(max(d, 0)))
}

// Generation changes whenever the data older than TrackLateAppends'
// horizon may have changed: a late sample was committed, or the set of
// blocks changed (a compaction, a block written by backfill, retention).
// The head's own truncation follows a compaction.
func (r *Raw) Generation() uint64 {
	h := xxhash.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], r.lateCommits.Load())
	_, _ = h.Write(b[:])
	for _, blk := range r.db.Blocks() {
		u := blk.Meta().ULID
		_, _ = h.Write(u[:])
	}
	return h.Sum64()
}

// lateAppender and lateAppenderV2 count, at their commit, whether they
// appended a sample older than before (TrackLateAppends). A sample the
// storage refused is not counted.
type lateAppender struct {
	storage.Appender
	r      *Raw
	before int64
	late   bool
}

func (a *lateAppender) note(t int64, err error) {
	if t < a.before && err == nil {
		a.late = true
	}
}

func (a *lateAppender) Append(ref storage.SeriesRef, l labels.Labels, t int64, v float64) (storage.SeriesRef, error) {
	ref, err := a.Appender.Append(ref, l, t, v)
	a.note(t, err)
	return ref, err
}

func (a *lateAppender) AppendHistogram(ref storage.SeriesRef, l labels.Labels, t int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (storage.SeriesRef, error) {
	ref, err := a.Appender.AppendHistogram(ref, l, t, h, fh)
	a.note(t, err)
	return ref, err
}

func (a *lateAppender) AppendSTZeroSample(ref storage.SeriesRef, l labels.Labels, t, st int64) (storage.SeriesRef, error) {
	ref, err := a.Appender.AppendSTZeroSample(ref, l, t, st)
	a.note(st, err)
	return ref, err
}

func (a *lateAppender) AppendHistogramSTZeroSample(ref storage.SeriesRef, l labels.Labels, t, st int64, h *histogram.Histogram, fh *histogram.FloatHistogram) (storage.SeriesRef, error) {
	ref, err := a.Appender.AppendHistogramSTZeroSample(ref, l, t, st, h, fh)
	a.note(st, err)
	return ref, err
}

func (a *lateAppender) Commit() error {
	err := a.Appender.Commit()
	if a.late {
		// Counted after the samples are readable, failed or not: a
		// generation read before they were is then a different one.
		a.r.lateCommits.Add(1)
	}
	return err
}

type lateAppenderV2 struct {
	storage.ExemplarAppenderV2
	gr     storage.GetRef
	r      *Raw
	before int64
	late   bool
}

func (a *lateAppenderV2) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	ref, err := a.ExemplarAppenderV2.Append(ref, ls, st, t, v, h, fh, opts)
	if t < a.before && (err == nil || errors.As(err, new(*storage.AppendPartialError))) {
		a.late = true
	}
	return ref, err
}

func (a *lateAppenderV2) GetRef(lset labels.Labels, hash uint64) (storage.SeriesRef, labels.Labels) {
	return a.gr.GetRef(lset, hash)
}

func (a *lateAppenderV2) Commit() error {
	err := a.ExemplarAppenderV2.Commit()
	if a.late {
		a.r.lateCommits.Add(1)
	}
	return err
}

// exemplarSizingAppender and exemplarSizingAppenderV2 are the raw tier's
// appenders while its exemplar storage holds nothing: they size it before
// the first exemplar goes in (see Raw.exemplarsSized).
type exemplarSizingAppender struct {
	storage.Appender
	r *Raw
}

func (a exemplarSizingAppender) AppendExemplar(ref storage.SeriesRef, l labels.Labels, e exemplar.Exemplar) (storage.SeriesRef, error) {
	a.r.sizeExemplars()
	return a.Appender.AppendExemplar(ref, l, e)
}

type exemplarSizingAppenderV2 struct {
	storage.ExemplarAppenderV2
	gr storage.GetRef
	r  *Raw
}

func (a exemplarSizingAppenderV2) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	if len(opts.Exemplars) > 0 {
		a.r.sizeExemplars()
	}
	return a.ExemplarAppenderV2.Append(ref, ls, st, t, v, h, fh, opts)
}

func (a exemplarSizingAppenderV2) AppendExemplars(ref storage.SeriesRef, ls labels.Labels, es []exemplar.Exemplar) (storage.SeriesRef, error) {
	a.r.sizeExemplars()
	return a.ExemplarAppenderV2.AppendExemplars(ref, ls, es)
}

func (a exemplarSizingAppenderV2) GetRef(lset labels.Labels, hash uint64) (storage.SeriesRef, labels.Labels) {
	return a.gr.GetRef(lset, hash)
}

// Querier implements storage.Queryable.
func (r *Raw) Querier(mint, maxt int64) (storage.Querier, error) { return r.db.Querier(mint, maxt) }

// ChunkQuerier implements storage.ChunkQueryable.
func (r *Raw) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	return r.db.ChunkQuerier(mint, maxt)
}

// ExemplarQuerier implements storage.ExemplarQueryable.
func (r *Raw) ExemplarQuerier(ctx context.Context) (storage.ExemplarQuerier, error) {
	return r.db.ExemplarQuerier(ctx)
}

// SeriesLabels returns the labels the head holds for ref (a reference its
// appenders returned), sharing their memory rather than copying them: the
// rollup tee keeps them for as long as it tracks the series. False when the
// head does not hold the series.
func (r *Raw) SeriesLabels(ref storage.SeriesRef) (labels.Labels, bool) {
	ir, err := r.db.Head().Index()
	if err != nil {
		return labels.EmptyLabels(), false
	}
	defer ir.Close() //nolint:errcheck // the head's index reader has nothing to release
	var b labels.ScratchBuilder
	if err := ir.Series(ref, &b, nil); err != nil {
		return labels.EmptyLabels(), false
	}
	return b.Labels(), true
}

// Bounds returns the oldest and the newest sample time (ms) the tier holds,
// both inclusive, and false when it is empty. It is the one place that
// turns the TSDB's time ranges into sample times:
//   - a block's MaxTime is exclusive, one past its newest sample (the TSDB's
//     meta.json), so a block contributes MaxTime-1;
//   - except a block compacted from the out-of-order head: its meta.json
//     holds the whole block range it was cut to ([10:00, 12:00) for
//     out-of-order samples of 10:55), up to two hours past its newest
//     sample, so its bounds are read from its index (once per block);
//   - the head's MaxTime is its newest sample, inclusive, while it holds
//     series. A head without series (all of it compacted into blocks, or
//     opened after a restart with an empty WAL) keeps the time it was
//     truncated to, the newest block's MaxTime, which is no sample: it
//     contributes nothing.
//
// The rollup pipeline's watermark is the newest sample: a block range taken
// for it would finalise minutes whose samples have not arrived yet.
func (r *Raw) Bounds() (mint, maxt int64, ok bool) {
	mint, maxt = math.MaxInt64, math.MinInt64
	if h := r.db.Head(); h.NumSeries() > 0 {
		mint, maxt = h.MinTime(), h.MaxTime()
	}
	blocks := r.db.Blocks()
	ooo := 0
	for _, b := range blocks {
		m := b.Meta()
		bmin, bmax := m.MinTime, m.MaxTime-1
		if m.Compaction.FromOutOfOrder() {
			bmin, bmax = r.oooBlockBounds(b)
			ooo++
		}
		mint, maxt = min(mint, bmin), max(maxt, bmax)
	}
	r.forgetOOOBounds(blocks, ooo)
	if mint > maxt {
		return 0, 0, false
	}
	return mint, maxt, true
}

// oooBlockBounds returns the oldest and newest sample time of an
// out-of-order block from its chunks' time ranges, which the index holds;
// the block's range when the index cannot be read (never more than it).
func (r *Raw) oooBlockBounds(b *tsdb.Block) (mint, maxt int64) {
	m := b.Meta()
	r.oooMu.Lock()
	defer r.oooMu.Unlock()
	if bs, ok := r.oooBounds[m.ULID]; ok {
		return bs[0], bs[1]
	}
	mint, maxt = m.MinTime, m.MaxTime-1
	if bmin, bmax, err := indexBounds(b); err == nil {
		mint, maxt = bmin, bmax
		r.oooBounds[m.ULID] = [2]int64{mint, maxt}
	}
	return mint, maxt
}

// indexBounds scans a block's index for the time range of its chunks.
func indexBounds(b *tsdb.Block) (mint, maxt int64, err error) {
	ir, err := b.Index()
	if err != nil {
		return 0, 0, err
	}
	defer ir.Close() //nolint:errcheck // a read-only reader
	name, value := index.AllPostingsKey()
	p, err := ir.Postings(context.Background(), name, value)
	if err != nil {
		return 0, 0, err
	}
	mint, maxt = math.MaxInt64, math.MinInt64
	var (
		sb   labels.ScratchBuilder
		chks []chunks.Meta
	)
	for p.Next() {
		if err := ir.Series(p.At(), &sb, &chks); err != nil {
			return 0, 0, err
		}
		for _, c := range chks {
			mint, maxt = min(mint, c.MinTime), max(maxt, c.MaxTime)
		}
	}
	if err := p.Err(); err != nil {
		return 0, 0, err
	}
	if mint > maxt {
		return 0, 0, errors.New("block without chunks")
	}
	return mint, maxt, nil
}

// forgetOOOBounds drops the cached bounds of blocks the TSDB no longer has
// (deleted by retention or compacted into others). ooo is how many of
// blocks are out-of-order blocks: while the cache holds no more entries,
// nothing is gone.
func (r *Raw) forgetOOOBounds(blocks []*tsdb.Block, ooo int) {
	r.oooMu.Lock()
	defer r.oooMu.Unlock()
	if len(r.oooBounds) <= ooo {
		return
	}
	live := make(map[ulid.ULID]bool, len(blocks))
	for _, b := range blocks {
		live[b.Meta().ULID] = true
	}
	for id := range r.oooBounds {
		if !live[id] {
			delete(r.oooBounds, id)
		}
	}
}

// Close flushes and closes the tier: the WAL is synced, nothing acknowledged is lost.
func (r *Raw) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	err := r.db.Close()
	if r.compactor != nil {
		r.compactor.stopAfterWrite() // a compaction's page-outs, now that none runs
	}
	if err != nil {
		return fmt.Errorf("close raw tier: %w", err)
	}
	return nil
}

// logFilter mends two kinds of the TSDB's log lines:
//
//   - it drops "Compactions disabled" and "Compactions enabled", which the
//     TSDB writes at info level on every toggle: the only toggles are
//     ReleaseChunkPages', which holds compactions off for the fraction of a
//     millisecond it runs, at least every 15 s and up to every 100 ms in
//     strata serve (two lines each time, at any level, saying nothing of the
//     store);
//   - it writes a "compaction failed" whose error is a cancellation at info
//     level, as what it is: Close cancels a compaction under way (the head
//     stays in the WAL, the blocks stay as they were, and the compaction
//     runs again at the next start), which the TSDB
//     reports as an error, so that a backfill or a shutdown that went well
//     ended on an ERROR line.
type logFilter struct{ slog.Handler }

func (d logFilter) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level == slog.LevelInfo && (r.Message == "Compactions disabled" || r.Message == "Compactions enabled"):
		return nil
	case r.Level == slog.LevelError && r.Message == "compaction failed" && cancelled(r):
		c := slog.NewRecord(r.Time, slog.LevelInfo, "compaction stopped by close; it runs again at the next start", r.PC)
		r.Attrs(func(a slog.Attr) bool { c.AddAttrs(a); return true })
		r = c
	}
	return d.Handler.Handle(ctx, r)
}

// cancelled reports whether r's "err" is a context cancellation.
func cancelled(r slog.Record) bool {
	var yes bool
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && a.Key == "err" {
			yes = errors.Is(err, context.Canceled)
			return false
		}
		return true
	})
	return yes
}

func (d logFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return logFilter{d.Handler.WithAttrs(as)}
}

func (d logFilter) WithGroup(name string) slog.Handler {
	return logFilter{d.Handler.WithGroup(name)}
}

// ReleaseChunkPages drops this process's page mappings of the head's chunk
// files (chunks_head/), which every read of a cut chunk leaves behind until
// the head is truncated hours later, and of the blocks' chunk and index
// files, which every query over a block leaves behind until the block is
// merged or deleted (up to the retention): one touch maps a whole large
// folio, 2 MiB on ext4, so a query over a day of a hundred series mapped
// most of 24 blocks. The pages stay in the page cache and the next read
// maps them again (internal/mapped). It returns the bytes of address space
// released.
//
// The TSDB unmaps head chunk files only when its compaction truncates the
// head (and on Close): compactions are held off meanwhile, so no range is
// unmapped, and perhaps reused, while it is being advised. A compaction
// due in that time is skipped and runs at the TSDB's next trigger (a
// minute later). A compaction under way is waited for; it releases what
// it reads itself (releasingCompactor). A block unmaps its files when it
// is closed, which waits for its readers: a chunk reader is held on each
// block while its mappings are advised.
func (r *Raw) ReleaseChunkPages() (int64, error) {
	if !mapped.Supported {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, nil
	}
	r.db.DisableCompactions() // waits for a running compaction
	defer r.db.EnableCompactions()
	dirs := []string{filepath.Join(r.db.Dir(), "chunks_head")}
	var held []tsdb.ChunkReader
	for _, b := range r.db.Blocks() {
		cr, err := b.Chunks()
		if err != nil {
			continue // being closed
		}
		held = append(held, cr)
		dirs = append(dirs, b.Dir())
	}
	n, _, err := mapped.Release(dirs...)
	for _, cr := range held {
		_ = cr.Close() // a block reader's Close only counts it out
	}
	if err != nil {
		return n, fmt.Errorf("release raw chunk pages: %w", err)
	}
	return n, nil
}
