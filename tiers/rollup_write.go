package tiers

import (
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/internal/labelshare"
)

// SeriesID is the series_id a partition file stores for a series: the
// labels' stable hash. Files hold their series in ascending (metric name,
// SeriesID) order (docs/format/minute.md), which is the order
// WritePartitionSeries takes them in.
func SeriesID(lbls labels.Labels) int64 {
	return int64(labels.StableHash(lbls)) //nolint:gosec // a hash: the sign bit is just another bit; signed because Trino/Spark mishandle UINT64
}

// ComparePartitionOrder orders two series as partition files do: by metric
// name, then SeriesID (given as ida and idb, so that a caller sorting many
// series computes each hash once), then, only for hash ties, by labels.
// WritePartitionSeries accepts series in this order.
func ComparePartitionOrder(a labels.Labels, ida int64, b labels.Labels, idb int64) int {
	if c := strings.Compare(a.Get(model.MetricNameLabel), b.Get(model.MetricNameLabel)); c != 0 {
		return c
	}
	switch {
	case ida < idb:
		return -1
	case ida > idb:
		return 1
	}
	return labels.Compare(a, b)
}

// WritePartition writes the partition starting at start (ms, a multiple of
// the partition length) holding series' windows, replacing any existing file.
// The file is written to a temporary name, fsynced, renamed and the directory
// fsynced; on any error the temporary file is removed and an existing
// partition is left untouched. Series without windows are skipped; an empty
// partition is still written so that HasPartition reports it done.
//
// WritePartition sorts series itself; WritePartitionSeries writes series
// that come sorted without holding them all.
func (r *Rollup) WritePartition(start int64, series []SeriesWindows) error {
	type item struct {
		s  *SeriesWindows
		id int64
	}
	items := make([]item, 0, len(series))
	for i := range series {
		items = append(items, item{&series[i], SeriesID(series[i].Labels)})
	}
	slices.SortFunc(items, func(a, b item) int { return ComparePartitionOrder(a.s.Labels, a.id, b.s.Labels, b.id) })
	return r.WritePartitionSeries(start, func(yield func(SeriesWindows, error) bool) {
		for _, it := range items {
			if !yield(*it.s, nil) {
				return
			}
		}
	}, WriteOptions{})
}

// WriteOptions are one partition write's options; the zero value is
// WritePartition's.
type WriteOptions struct {
	// NoSeriesTable keeps no series table (seriesTable) of the partition,
	// for a write that its one frequent reader will not read: the
	// diagnosis engine, off, or whose minutes the pipeline waited for
	// (downsample.Pipeline.HoldReads). The table of the partition written
	// before goes all the same; the file's readers decode its labels, as
	// they do every older file's.
	NoSeriesTable bool
}

// WritePartitionSeries is WritePartition for series that come one at a
// time, in partition order (ComparePartitionOrder; series whose name and
// SeriesID are equal may come in any order), each series once with its
// windows ascending. It holds one row group and one series' rows in memory,
// not the partition: the pipeline writes an hour of windows of every series
// this way. A yielded series' windows need only stay valid until the next
// series is requested; its label set may be kept (until the next partition
// is written: see seriesTable), as a storage keeps the label sets it is
// given, so it must not change after. An error yielded by series, or
// series out of order, aborts the write and leaves nothing behind.
func (r *Rollup) WritePartitionSeries(start int64, series iter.Seq2[SeriesWindows, error], opts WriteOptions) (err error) {
	if r.cfg.ReadOnly {
		return ErrReadOnly
	}
	defer func() {
		if err != nil {
			r.writeErrors.Inc()
		}
	}()
	length := r.cfg.PartitionLength.Milliseconds()
	if start%length != 0 {
		return fmt.Errorf("write %s partition %d: %w", r.cfg.Name, start, ErrMisaligned)
	}
	r.mu.RLock()
	closed := r.closed
	r.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	final := filepath.Join(r.cfg.Dir, partitionName(start))
	if r.remote != nil {
		// Pending before the file is replaced, so that the local cache
		// never evicts the new file before it is uploaded.
		r.remote.written(start, 0)
		defer func() {
			if err != nil {
				r.remote.forget(start)
			}
		}()
	}
	codec := codecFor(r.cfg.Zstd)
	done := codec.writing()
	defer done()
	f, err := atomicfile.Create(final, tempPrefix+"*"+partitionSuffix)
	if err != nil {
		return fmt.Errorf("write %s partition %s: %w", r.cfg.Name, fmtPartition(start), err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Abort())
		}
	}()
	pw := &partitionWriter{
		w:     parquet.NewGenericWriter[parquetRow](f, parquetWriterOptions(codec, r.cfg.RowsPerRowGroup, r.cfg.Resolution.String())...),
		start: start, length: length, res: r.cfg.Resolution.Milliseconds(),
	}
	if r.cfg.SeriesRuns {
		// The last table is of an older partition (the engine has long
		// stopped reading it) or of this one, about to be replaced: it goes
		// now, not after this one is built beside it.
		hint := r.files.takeLatest()
		if !opts.NoSeriesTable {
			r.mu.RLock()
			shared := r.shared
			r.mu.RUnlock()
			pw.table = newTableBuilder(start, hint, labelshare.Finder{Src: shared})
			defer pw.table.close()
		}
	}
	for s, serr := range series {
		if serr != nil {
			return fmt.Errorf("write %s partition %s: %w", r.cfg.Name, fmtPartition(start), serr)
		}
		if err := pw.add(s); err != nil {
			return fmt.Errorf("write %s partition %s: %w", r.cfg.Name, fmtPartition(start), err)
		}
	}
	if err := pw.flushGroup(); err != nil {
		return fmt.Errorf("write %s partition %s: %w", r.cfg.Name, fmtPartition(start), err)
	}
	if r.cfg.SeriesRuns {
		pw.w.SetKeyValueMetadata(seriesRunsKey, base64.StdEncoding.EncodeToString(pw.runs))
	}
	if err := pw.w.Close(); err != nil {
		return fmt.Errorf("write %s partition %s: close parquet writer: %w", r.cfg.Name, fmtPartition(start), err)
	}
	// The file as written, which the rename keeps: a later write of the
	// partition is another file.
	written, statErr := f.Stat()
	// An error fsyncing the directory comes after the rename: the file is
	// in place but may not survive a crash. It is reported so that the
	// caller retries (the rewrite is idempotent).
	if err := f.Commit(); err != nil {
		return fmt.Errorf("write %s partition %s: %w", r.cfg.Name, fmtPartition(start), err)
	}
	if pw.table != nil {
		// Before the partition is listed: a reader that finds it opens
		// the file the table describes.
		if statErr == nil {
			pw.table.t.file = written
			r.files.setLatest(pw.table.t)
		}
		// Else no table: readers decode the file's labels.
	}
	r.mu.Lock()
	r.parts[start] = PartitionInfo{Start: start, End: start + length, Rows: pw.rows, Bytes: f.Size(), Path: final}
	delete(r.corrupt, start) // written again: nothing is missing any more
	r.generation.Add(1)
	r.mu.Unlock()
	r.written.Inc()
	if r.remote != nil {
		r.remote.written(start, f.Size())
	}
	// A query holding the replaced file keeps reading it; new ones open this one.
	if err := r.files.drop(start); err != nil {
		r.logger.Warn("close replaced partition file", "err", err)
	}
	return nil
}

func fmtPartition(start int64) string { return time.UnixMilli(start).UTC().Format(time.RFC3339) }

// partitionWriter turns series, in partition order, into rows. It holds the
// series of one group with equal metric name and series_id (almost always a
// single series) until the next group starts: within a group, series are
// ordered by the labels column, as sortedRows orders them.
type partitionWriter struct {
	w                  *parquet.GenericWriter[parquetRow]
	start, length, res int64

	group    []groupSeries
	wins     []Window // windows of the group's series
	rowBuf   []parquetRow
	aggBuf   []float64
	runs     []byte        // the seriesRunsKey value, before base64
	table    *tableBuilder // nil: no seriesTable kept
	rows     int64
	havePrev bool
	prevName string
	prevID   int64
}

type groupSeries struct {
	tmpl     parquetRow
	from, to int           // its windows: wins[from:to]
	lbls     labels.Labels // for the table: tableBuilder.held's
}

// add checks s and adds it to the current group, writing the group out
// first when s starts another one.
func (pw *partitionWriter) add(s SeriesWindows) error {
	if len(s.Windows) == 0 {
		return nil
	}
	for i, w := range s.Windows {
		if w.Start < pw.start || w.Start >= pw.start+pw.length || w.Start%pw.res != 0 || w.Count == 0 {
			return fmt.Errorf("series %s window %d (count %d): %w", s.Labels, w.Start, w.Count, ErrMisaligned)
		}
		// Readers derive a window's start from last_ts: both sample times
		// must lie inside the window.
		if w.FirstT < w.Start || w.LastT < w.FirstT || w.LastT >= w.Start+pw.res {
			return fmt.Errorf("series %s window %d: first/last sample times %d/%d outside the window: %w", s.Labels, w.Start, w.FirstT, w.LastT, ErrMisaligned)
		}
		if i > 0 && w.Start <= s.Windows[i-1].Start {
			return fmt.Errorf("series %s: windows not in ascending start order at %d", s.Labels, w.Start)
		}
	}
	name := s.Labels.Get(model.MetricNameLabel)
	if name == "" {
		return fmt.Errorf("series %s has no metric name", s.Labels)
	}
	tmpl, err := seriesRowTemplate(s.Labels)
	if err != nil {
		return err
	}
	if pw.havePrev {
		switch c := strings.Compare(name, pw.prevName); {
		case c < 0 || (c == 0 && tmpl.SeriesID < pw.prevID):
			return fmt.Errorf("series %s out of partition order (after metric %q, series_id %d)", s.Labels, pw.prevName, pw.prevID)
		case c > 0 || tmpl.SeriesID != pw.prevID:
			if err := pw.flushGroup(); err != nil {
				return err
			}
		}
	}
	pw.havePrev, pw.prevName, pw.prevID = true, name, tmpl.SeriesID
	from := len(pw.wins)
	pw.wins = append(pw.wins, s.Windows...)
	g := groupSeries{tmpl: tmpl, from: from, to: len(pw.wins)}
	if pw.table != nil {
		g.lbls = pw.table.held(s.Labels)
	}
	pw.group = append(pw.group, g)
	return nil
}

// flushGroup writes the current group's rows and forgets the group.
func (pw *partitionWriter) flushGroup() error {
	if len(pw.group) > 1 {
		slices.SortFunc(pw.group, func(a, b groupSeries) int { return strings.Compare(a.tmpl.Labels, b.tmpl.Labels) })
		for i := 1; i < len(pw.group); i++ {
			if pw.group[i].tmpl.Labels == pw.group[i-1].tmpl.Labels {
				return fmt.Errorf("series %s given twice", pw.group[i].tmpl.Labels)
			}
		}
	}
	for _, g := range pw.group {
		ws := pw.wins[g.from:g.to]
		pw.rowBuf = slices.Grow(pw.rowBuf[:0], len(ws))[:len(ws)]
		pw.aggBuf = slices.Grow(pw.aggBuf[:0], 5*len(ws))[:5*len(ws)]
		for i, w := range ws {
			pw.rowBuf[i] = g.tmpl
			pw.rowBuf[i].fillWindow(w, pw.aggBuf[5*i:5*i+5:5*i+5])
		}
		// The writer copies the values into its column buffers: the row
		// and aggregate buffers are reused for the next series.
		if _, err := pw.w.Write(pw.rowBuf); err != nil {
			return fmt.Errorf("encode rows: %w", err)
		}
		pw.runs = appendSeriesRun(pw.runs, g.tmpl.SeriesID, len(ws))
		pw.rows += int64(len(ws))
		if pw.table != nil {
			pw.table.add(g.tmpl.Labels, g.tmpl.SeriesID, len(ws), g.lbls)
		}
	}
	clear(pw.rowBuf) // drop the label strings
	clear(pw.group)
	pw.group, pw.wins = pw.group[:0], pw.wins[:0]
	return nil
}
