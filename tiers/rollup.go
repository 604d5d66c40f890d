package tiers

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/atomicfile"
)

// RollupConfig configures a minute or hour rollup tier.
type RollupConfig struct {
	// Name is the tier's name in metrics, logs and the status API ("minute",
	// "hour"). Empty means "minute" for a 1 m resolution, "hour" for 1 h, else
	// the resolution itself.
	Name string
	// Dir holds the tier's Parquet partition files (one directory per tier).
	Dir string
	// Resolution is the window length: 1 m for the minute tier, 1 h for the hour tier.
	Resolution time.Duration
	// PartitionLength is the time one file covers: 1 h for the minute tier, 24 h
	// for the hour tier. It must be a multiple of Resolution.
	PartitionLength time.Duration
	// Retention: partitions whose end is older than now-Retention are deleted
	// by ApplyRetention. Zero keeps everything.
	Retention time.Duration
	// RowsPerRowGroup bounds a Parquet row group (0 means 32768). Smaller row
	// groups prune better by metric name; larger ones have less footer overhead.
	RowsPerRowGroup int64
	// OpenFiles is how many partition files a tier keeps open with their
	// footers parsed, for queries (least recently used evicted). 0 means
	// 1024 (the default retention of either tier), at most a quarter of the
	// process's open-file limit; negative keeps none open.
	OpenFiles int
	// OpenFilesBytes bounds, besides OpenFiles, what the open files' parsed
	// footers hold in memory, estimated at four times their size on disk
	// (a footer grows with the series a partition holds). 0 means 128 MiB;
	// negative, no bound but OpenFiles. A file over the bound alone is
	// read without being kept.
	OpenFilesBytes int64
	// SeriesRuns writes each file's series runs into its metadata (see
	// seriesRunsKey), so that queries need not decode the series_id column.
	// On for the minute tier, whose queries read many rows per series; off
	// for the hour tier, whose files it would grow by ~3.5 %.
	SeriesRuns bool
	// Zstd is the zstd level the tier's files are written at: the better
	// level (the zero value) for the minute tier, the best for the hour
	// tier, whose size target needs it (see betterCodec). Any zstd reader
	// decodes either.
	Zstd ZstdLevel
	// ReadOnly opens an existing tier for queries only, beside a running
	// `strata serve` that writes it: no directory is created, leftover
	// temporary files (the writer's, in progress) are left alone, and
	// WritePartition and ApplyRetention fail with ErrReadOnly. The
	// partitions are those present at open.
	ReadOnly bool
	// Remote, when set, keeps the tier's partitions in object storage and
	// only a bounded cache of them locally (see RemoteConfig).
	Remote *RemoteConfig
}

// ZstdLevel is a rollup tier's zstd level (RollupConfig.Zstd).
type ZstdLevel int

const (
	// ZstdBetter is zstd's better level (SpeedBetterCompression).
	ZstdBetter ZstdLevel = iota
	// ZstdBest is zstd's best level (SpeedBestCompression).
	ZstdBest
)

// DefaultMinuteConfig is the minute tier: 1 m windows, one file per UTC hour, 30 d.
func DefaultMinuteConfig(dir string) RollupConfig {
	return RollupConfig{Name: "minute", Dir: dir, Resolution: time.Minute, PartitionLength: time.Hour, Retention: 30 * 24 * time.Hour, SeriesRuns: true}
}

// DefaultHourConfig is the hour tier: 1 h windows, one file per UTC day, 365 d.
func DefaultHourConfig(dir string) RollupConfig {
	return RollupConfig{Name: "hour", Dir: dir, Resolution: time.Hour, PartitionLength: 24 * time.Hour, Retention: 365 * 24 * time.Hour, Zstd: ZstdBest}
}

// PartitionInfo describes one partition file.
type PartitionInfo struct {
	Start int64  `json:"start"` // ms, inclusive
	End   int64  `json:"end"`   // ms, exclusive
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
	Path  string `json:"-"`
}

// Errors returned by the rollup store.
var (
	// ErrMisaligned is returned for a partition start that is not a multiple of
	// the partition length, or a window outside its partition.
	ErrMisaligned = errors.New("misaligned partition or window")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("rollup tier closed")
	// ErrTooManyWindows is returned when a query would hold more rollup
	// windows in memory than the stitched view allows (20,000,000, see
	// NewStitched).
	ErrTooManyWindows = errors.New("query selects too many rollup windows")
	// ErrReadOnly is returned by the writing methods of a read-only tier.
	ErrReadOnly = errors.New("rollup tier opened read-only")
)

const (
	partitionPrefix = "p-"
	partitionSuffix = ".parquet"
	partitionTime   = "20060102T1504Z"
	tempPrefix      = ".tmp-"
)

// Rollup is a minute or hour tier: immutable Parquet files, one per partition
// (docs/format/minute.md, docs/format/hour-parquet.md). A file that exists is
// final (the downsample pipeline writes a partition only once it is complete),
// and rewriting one replaces it atomically.
//
// Rollup is safe for concurrent use. Readers hold no lock while reading a
// file: a file replaced or deleted meanwhile stays readable through the open
// descriptor (POSIX semantics).
type Rollup struct {
	cfg    RollupConfig
	logger *slog.Logger
	now    func() time.Time

	mu    sync.RWMutex
	parts map[int64]PartitionInfo
	// generation counts the changes of parts (Generation).
	generation atomic.Uint64
	closed     bool
	files      *fileCache
	remote     *remote // nil: local disk only
	// batches are the selects' scratch batches (rollup_reader.go).
	batches batchPool
	// shared is where a written partition's series table takes its label
	// sets from (ShareLabels; nil: copies).
	shared storage.AppendableV2

	written        prometheus.Counter
	writeErrors    prometheus.Counter
	retentionDrops prometheus.Counter

	// corrupt holds the partitions set aside as corrupt (quarantine.go)
	// and not written again: start -> where the file went.
	corrupt      map[int64]string
	corruptFound prometheus.Counter
}

// OpenRollup opens (or creates) a rollup tier in cfg.Dir. Leftover temporary
// files of an interrupted write are removed. The caller MUST call Close.
func OpenRollup(cfg RollupConfig, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*Rollup, error) {
	if cfg.Resolution <= 0 || cfg.PartitionLength <= 0 || cfg.PartitionLength%cfg.Resolution != 0 {
		return nil, fmt.Errorf("rollup tier %s: partition length %s must be a positive multiple of resolution %s", cfg.Dir, cfg.PartitionLength, cfg.Resolution)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("rollup tier %s: negative retention %s", cfg.Dir, cfg.Retention)
	}
	if cfg.Name == "" {
		switch cfg.Resolution {
		case time.Minute:
			cfg.Name = "minute"
		case time.Hour:
			cfg.Name = "hour"
		default:
			cfg.Name = cfg.Resolution.String()
		}
	}
	if cfg.RowsPerRowGroup <= 0 {
		cfg.RowsPerRowGroup = 32 << 10
	}
	if now == nil {
		now = time.Now
	}
	if !cfg.ReadOnly {
		if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
			return nil, fmt.Errorf("open rollup tier %s: %w", cfg.Dir, err)
		}
	}
	r := &Rollup{cfg: cfg, logger: logger.With("tier", cfg.Name), now: now, parts: map[int64]PartitionInfo{}, files: newFileCache(defaultOpenFiles(cfg), defaultOpenFilesBytes(cfg))}
	f := promauto.With(reg)
	cl := prometheus.Labels{"tier": cfg.Name}
	r.corruptFound = f.NewCounter(prometheus.CounterOpts{Name: "strata_tiers_corrupt_partitions_total", Help: "Rollup partition files found corrupt (at open, or by a page checksum) and moved to the tier's corrupt/ directory.", ConstLabels: cl})
	entries, err := os.ReadDir(cfg.Dir)
	if err != nil && (!cfg.ReadOnly || !errors.Is(err, os.ErrNotExist)) { // read-only: a missing directory is an empty tier
		return nil, fmt.Errorf("open rollup tier %s: %w", cfg.Dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(cfg.Dir, name)
		if strings.HasPrefix(name, tempPrefix) {
			if cfg.ReadOnly {
				continue
			}
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("remove leftover %s: %w", path, err)
			}
			continue
		}
		start, ok := parsePartitionName(name)
		if !ok {
			continue
		}
		info, err := statPartition(path, start, cfg.PartitionLength.Milliseconds())
		if cfg.ReadOnly && errors.Is(err, os.ErrNotExist) {
			continue // deleted by the writer's retention since we listed it
		}
		if ce := (*corruptPartitionError)(nil); errors.As(err, &ce) {
			if cfg.ReadOnly {
				r.logger.Warn("corrupt partition file skipped", "path", path, "err", err)
				continue
			}
			dst, merr := r.moveAside(path, nil)
			if merr != nil {
				return nil, fmt.Errorf("open rollup tier %s: %w (setting it aside failed: %w)", cfg.Dir, err, merr)
			}
			r.noteCorrupt(start, dst, err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open rollup tier %s: %w", cfg.Dir, err)
		}
		r.parts[start] = info
	}
	r.loadCorrupt()
	if cfg.Remote != nil {
		r.openRemote(reg)
		// A partition whose local copy was set aside is read from the
		// bucket.
		for s := range r.corrupt {
			if _, ok := r.parts[s]; ok {
				delete(r.corrupt, s)
			}
		}
	}
	r.written = f.NewCounter(prometheus.CounterOpts{Name: "strata_tiers_partitions_written_total", Help: "Rollup partition files written (including rewrites).", ConstLabels: cl})
	r.writeErrors = f.NewCounter(prometheus.CounterOpts{Name: "strata_tiers_partition_write_errors_total", Help: "Rollup partition writes that failed and left nothing behind.", ConstLabels: cl})
	r.retentionDrops = f.NewCounter(prometheus.CounterOpts{Name: "strata_tiers_retention_deleted_partitions_total", Help: "Rollup partition files deleted by retention.", ConstLabels: cl})
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_tiers_open_partition_files", Help: "Rollup partition files kept open, footers parsed, for queries.", ConstLabels: cl},
		func() float64 { return float64(r.files.len()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_tiers_open_partition_footer_bytes", Help: "What the open partition files' parsed footers hold in memory, estimated from their size on disk.", ConstLabels: cl},
		func() float64 { return float64(r.files.weight()) })
	return r, nil
}

// Generation changes whenever a partition is written, rewritten, deleted
// or found in the bucket: what a select may read changed.
func (r *Rollup) Generation() uint64 {
	if r == nil {
		return 0
	}
	return r.generation.Load()
}

// Config returns the configuration in effect (with defaults filled in).
func (r *Rollup) Config() RollupConfig { return r.cfg }

func partitionName(start int64) string {
	return partitionPrefix + time.UnixMilli(start).UTC().Format(partitionTime) + partitionSuffix
}

func parsePartitionName(name string) (int64, bool) {
	if !strings.HasPrefix(name, partitionPrefix) || !strings.HasSuffix(name, partitionSuffix) {
		return 0, false
	}
	t, err := time.Parse(partitionTime, strings.TrimSuffix(strings.TrimPrefix(name, partitionPrefix), partitionSuffix))
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

// statPartition reads a file's footer for its row count.
func statPartition(path string, start, length int64) (info PartitionInfo, err error) {
	f, err := os.Open(path) //nolint:gosec // path is built from our own directory listing
	if err != nil {
		return info, fmt.Errorf("open partition: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	st, err := f.Stat()
	if err != nil {
		return info, fmt.Errorf("stat partition: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		// The file opened: its bytes are what is wrong.
		return info, footerError(fmt.Errorf("read partition footer %s: %w", path, err), path, st)
	}
	return PartitionInfo{Start: start, End: start + length, Rows: pf.NumRows(), Bytes: st.Size(), Path: path}, nil
}

// HasPartition reports whether the partition starting at start has been written.
func (r *Rollup) HasPartition(start int64) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.parts[start]
	return ok
}

// Partitions returns the tier's partitions in ascending start order.
func (r *Rollup) Partitions() []PartitionInfo {
	r.mu.RLock()
	out := make([]PartitionInfo, 0, len(r.parts))
	for _, p := range r.parts {
		out = append(out, p)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b PartitionInfo) int { return cmpInt64(a.Start, b.Start) })
	return out
}

// Bounds returns the start of the oldest partition and the end of the newest,
// and false when the tier is empty.
func (r *Rollup) Bounds() (mint, maxt int64, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for s, p := range r.parts {
		if !ok || s < mint {
			mint = s
		}
		if !ok || p.End > maxt {
			maxt = p.End
		}
		ok = true
	}
	return mint, maxt, ok
}

// partitionsOverlapping returns the partitions that hold windows starting in [mint, maxt].
func (r *Rollup) partitionsOverlapping(mint, maxt int64) []PartitionInfo {
	r.mu.RLock()
	var out []PartitionInfo
	for _, p := range r.parts {
		if p.End > mint && p.Start <= maxt {
			out = append(out, p)
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b PartitionInfo) int { return cmpInt64(a.Start, b.Start) })
	return out
}

// ApplyRetention deletes whole partition files whose end is older than
// now-Retention and returns how many it deleted. A zero retention keeps all.
func (r *Rollup) ApplyRetention() (int, error) {
	if r.cfg.ReadOnly {
		return 0, ErrReadOnly
	}
	if r.cfg.Retention == 0 {
		return 0, nil
	}
	cutoff := r.now().Add(-r.cfg.Retention).UnixMilli()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0, ErrClosed
	}
	var errs []error
	var deleted []PartitionInfo
	for s, p := range r.parts {
		if p.End > cutoff {
			continue
		}
		if err := os.Remove(p.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete %s partition %s: %w", r.cfg.Name, p.Path, err))
			continue
		}
		delete(r.parts, s)
		r.generation.Add(1)
		if err := r.files.drop(s); err != nil {
			errs = append(errs, fmt.Errorf("close deleted %s partition %s: %w", r.cfg.Name, p.Path, err))
		}
		deleted = append(deleted, p)
	}
	if len(deleted) > 0 {
		if err := atomicfile.SyncDir(r.cfg.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	r.mu.Unlock()
	n := 0
	for _, p := range deleted {
		if r.remote != nil {
			// Outside the lock: a slow bucket must not stall queries. A
			// partition whose object could not be deleted stays listed
			// (queries download it) and is retried next time.
			if err := r.remote.delete(p.Start); err != nil {
				errs = append(errs, err)
				r.mu.Lock()
				if _, ok := r.parts[p.Start]; !ok {
					r.parts[p.Start] = p
					r.generation.Add(1)
				}
				r.mu.Unlock()
				continue
			}
		}
		n++
		r.retentionDrops.Inc()
	}
	if n > 0 {
		r.logger.Info("retention deleted partitions", "count", n, "cutoff", time.UnixMilli(cutoff).UTC())
	}
	return n, errors.Join(errs...)
}

// ShareLabels makes the series table kept for the partition written last
// (see seriesTable) take its label sets from src, the raw tier's head,
// instead of copies: src's appenders look them up (storage.GetRef) and are
// rolled back. Nothing is appended to src.
func (r *Rollup) ShareLabels(src storage.AppendableV2) {
	r.mu.Lock()
	r.shared = src
	r.mu.Unlock()
}

// Close marks the tier closed and closes the files it keeps open for
// queries (those still being read are closed when their query finishes).
// A tier in object storage first lets pending uploads finish (at most 30 s,
// and not while the bucket fails); what is left is uploaded at the next open.
// Files are always complete on disk, so there is nothing to flush.
func (r *Rollup) Close() error {
	r.mu.Lock()
	closed := r.closed
	r.closed = true
	r.mu.Unlock()
	if r.remote != nil && !closed && !r.cfg.ReadOnly {
		r.remote.close(30 * time.Second)
	}
	return r.files.close()
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
