package downsample

import (
	"bufio"
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"os"
	"slices"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/binio"
	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// BuildHourPartition writes the hour partition of day d (ms, UTC midnight)
// from the minute tier's windows of that day, replacing an existing one: hour
// windows are always derived from minute windows, never from raw data. A day
// without any minute partition is not written and series is -1. kindOf types
// the series as the minute windows were typed (Config.KindOf).
//
// With a minute tier that reads a partition one series at a time and an hour
// tier that writes one so (*tiers.Rollup both), memory does not grow with
// the day: each minute partition is read once, each series' windows of the
// hour merged into its hour window as it is read, and the hour's windows
// written in partition order to a temporary run in tmpDir (os.TempDir() if
// empty; snappy-compressed, about 60 bytes a window besides the labels); the
// day's runs are then merged into the partition, series by series. Holding
// the day's minute windows instead took 182 bytes of heap for each (13 GB
// for a day of 50,000 series, 131 GB at 500,000: docs/rollups.md, "The hour
// tier's build"). Other tiers are read whole, as before.
func BuildHourPartition(ctx context.Context, minute MinuteTier, hour PartitionWriter, d int64, kindOf KindFunc, tmpDir string) (series, windows int, err error) {
	if d != timegrid.Floor(d, DayLen) {
		return -1, 0, fmt.Errorf("hour partition start %d is not a UTC midnight", d)
	}
	hours := minuteHours(minute, d)
	if len(hours) == 0 {
		return -1, 0, nil
	}
	pr, okR := minute.(partitionSeriesReader)
	sw, okW := hour.(seriesPartitionWriter)
	if !okR || !okW {
		return buildHourInMemory(ctx, minute, hour, d, kindOf)
	}
	b := hourBuild{kindOf: kindOf, dir: tmpDir}
	defer func() { err = errors.Join(err, b.remove()) }()
	for _, h := range hours {
		if err := b.addHour(ctx, pr, h); err != nil {
			return -1, 0, fmt.Errorf("read minute windows of %s: %w", fmtTime(h), err)
		}
	}
	merged := func(yield func(tiers.SeriesWindows, error) bool) {
		for s, err := range b.merge() {
			if err == nil {
				series++
				windows += len(s.Windows)
				err = ctx.Err() // the merge is minutes at 500,000 series
			}
			if !yield(s, err) || err != nil {
				return
			}
		}
	}
	if err := sw.WritePartitionSeries(d, merged, tiers.WriteOptions{}); err != nil {
		return -1, 0, fmt.Errorf("write hour partition %s: %w", fmtTime(d), err)
	}
	return series, windows, nil
}

// minuteHours returns the starts of day d's minute partitions, ascending.
func minuteHours(minute PartitionWriter, d int64) []int64 {
	var hours []int64
	for h := d; h < d+DayLen; h += HourRes {
		if minute.HasPartition(h) {
			hours = append(hours, h)
		}
	}
	return hours
}

// partitionSeriesReader is a minute tier that reads a partition one series
// at a time (*tiers.Rollup).
type partitionSeriesReader interface {
	PartitionSeries(ctx context.Context, start int64) iter.Seq2[tiers.SeriesWindows, error]
}

// buildHourInMemory is BuildHourPartition holding the day's minute windows.
func buildHourInMemory(ctx context.Context, minute MinuteTier, hour PartitionWriter, d int64, kindOf KindFunc) (series, windows int, err error) {
	minutes, err := minute.Select(ctx, d, d+DayLen-1)
	if err != nil {
		return -1, 0, fmt.Errorf("read minute windows of %s: %w", fmtTime(d), err)
	}
	out := make([]tiers.SeriesWindows, 0, len(minutes))
	for _, s := range minutes {
		ws := s.Windows
		if !slices.IsSortedFunc(ws, func(a, b tiers.Window) int { return cmp.Compare(a.Start, b.Start) }) {
			ws = slices.Clone(ws)
			slices.SortFunc(ws, func(a, b tiers.Window) int { return cmp.Compare(a.Start, b.Start) })
		}
		hours := Coarsen(nil, ws, HourRes, kindOf.Of(s.Labels))
		windows += len(hours)
		out = append(out, tiers.SeriesWindows{Labels: s.Labels, Windows: hours})
	}
	sortSeries(out)
	if err := hour.WritePartition(d, out); err != nil {
		return -1, 0, fmt.Errorf("write hour partition %s: %w", fmtTime(d), err)
	}
	return len(out), windows, nil
}

// hourBuild is a day's hour partition being built: one run a minute
// partition, each the hour windows of that hour's series in partition
// order.
type hourBuild struct {
	kindOf KindFunc
	dir    string
	runs   []*os.File
	// group is the series read with the same metric name and SeriesID as
	// the last (a hash collision): a partition may hold them in any order,
	// a run holds them by their labels, as the merge compares them.
	group []groupedSeries
	buf   []byte
	hw    []tiers.Window // addHour's
}

type groupedSeries struct {
	lset labels.Labels
	w    tiers.Window
}

// addHour writes the run of hour h's minute partition.
func (b *hourBuild) addHour(ctx context.Context, pr partitionSeriesReader, h int64) (err error) {
	if b.dir != "" && len(b.runs) == 0 {
		if err := os.MkdirAll(b.dir, 0o750); err != nil {
			return fmt.Errorf("create hour build directory: %w", err)
		}
	}
	f, err := os.CreateTemp(b.dir, "hour-build-*"+spillSuffix)
	if err != nil {
		return fmt.Errorf("create hour build run: %w", err)
	}
	b.runs = append(b.runs, f)
	zw := snappy.NewBufferedWriter(f)
	var (
		name string
		id   int64
	)
	b.group = b.group[:0]
	for s, err := range pr.PartitionSeries(ctx, h) {
		if err != nil {
			return err
		}
		if len(s.Windows) == 0 {
			continue
		}
		hw := Coarsen(b.hw[:0], s.Windows, HourRes, b.kindOf.Of(s.Labels))
		b.hw = hw
		if len(hw) != 1 || hw[0].Start != h {
			return fmt.Errorf("series %s: minute windows outside hour %s", s.Labels, fmtTime(h))
		}
		n, sid := s.Labels.Get(model.MetricNameLabel), tiers.SeriesID(s.Labels)
		if len(b.group) > 0 && (n != name || sid != id) {
			if err := b.flushGroup(zw); err != nil {
				return err
			}
		}
		name, id = n, sid
		b.group = append(b.group, groupedSeries{s.Labels, hw[0]})
	}
	if err := b.flushGroup(zw); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write hour build run: %w", err)
	}
	return nil
}

// flushGroup writes the grouped series to a run, by their labels.
func (b *hourBuild) flushGroup(w io.Writer) error {
	slices.SortFunc(b.group, func(x, y groupedSeries) int { return labels.Compare(x.lset, y.lset) })
	buf := b.buf[:0]
	for _, g := range b.group {
		buf = binio.AppendLabels(buf, g.lset)
		buf = appendHourWindow(buf, g.w)
	}
	b.buf, b.group = buf, b.group[:0]
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write hour build run: %w", err)
	}
	return nil
}

// appendHourWindow encodes w whole: a run's windows are hours, whose
// counts and offsets the spill's minute codec does not bound.
func appendHourWindow(b []byte, w tiers.Window) []byte {
	b = binary.AppendVarint(b, w.Start)
	b = binary.AppendVarint(b, w.FirstT-w.Start)
	b = binary.AppendVarint(b, w.LastT-w.Start)
	b = binary.AppendUvarint(b, uint64(w.Count))
	b = binary.AppendUvarint(b, uint64(w.Resets))
	for _, v := range [...]float64{w.Sum, w.Min, w.Max, w.First, w.Last, w.Increase} {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	stale := byte(0)
	if w.Stale {
		stale = 1
	}
	return append(b, stale)
}

// remove deletes the runs.
func (b *hourBuild) remove() error {
	var errs []error
	for _, f := range b.runs {
		errs = append(errs, f.Close(), os.Remove(f.Name()))
	}
	b.runs = nil
	return errors.Join(errs...)
}

// merge yields the day's series in partition order, each with its hour
// windows ascending (the runs are in hour order). The yielded windows are
// reused for the next series.
func (b *hourBuild) merge() iter.Seq2[tiers.SeriesWindows, error] {
	return func(yield func(tiers.SeriesWindows, error) bool) {
		h := make(cursorHeap[*runCursor], 0, len(b.runs))
		for i, f := range b.runs {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				yield(tiers.SeriesWindows{}, fmt.Errorf("read hour build run: %w", err))
				return
			}
			c := &runCursor{d: newSpillReader(bufio.NewReaderSize(snappy.NewReader(f), 16<<10), windowCodec{}), seq: i}
			if c.next() {
				h = append(h, c)
			} else if err := c.d.Err; err != nil {
				yield(tiers.SeriesWindows{}, err)
				return
			}
		}
		heap.Init(&h)
		var out []tiers.Window
		for len(h) > 0 {
			key := h[0].key
			out = out[:0]
			for len(h) > 0 && labels.Equal(h[0].key.lset, key.lset) {
				c := h[0]
				out = append(out, c.w)
				if c.next() {
					heap.Fix(&h, 0)
					continue
				}
				if err := c.d.Err; err != nil {
					yield(tiers.SeriesWindows{}, err)
					return
				}
				heap.Pop(&h)
			}
			// One window a run, taken in run (hour) order: the heap breaks
			// ties between equal series by run, so out is ascending.
			if !yield(tiers.SeriesWindows{Labels: key.lset, Windows: out}, nil) {
				return
			}
		}
	}
}

// runCursor reads one run's records in order.
type runCursor struct {
	d   spillReader
	seq int // the run's hour, in order
	sb  labels.ScratchBuilder
	key spillKey
	w   tiers.Window
}

// next reads the next record; false at the run's end or on error (d.Err).
func (c *runCursor) next() bool {
	if _, err := c.d.R.Peek(1); err != nil {
		if !errors.Is(err, io.EOF) {
			c.d.Fail(err)
		}
		return false
	}
	c.key.lset = c.d.Labels(&c.sb)
	c.key.name = c.key.lset.Get(model.MetricNameLabel)
	c.key.id = tiers.SeriesID(c.key.lset)
	c.w = c.readWindow()
	return c.d.Err == nil
}

func (c *runCursor) readWindow() tiers.Window {
	d := &c.d
	var w tiers.Window
	w.Start = d.Varint()
	w.FirstT = w.Start + d.Varint()
	w.LastT = w.Start + d.Varint()
	w.Count = uint32(min(d.Uvarint(), math.MaxUint32))  //nolint:gosec // bounded
	w.Resets = uint32(min(d.Uvarint(), math.MaxUint32)) //nolint:gosec // bounded
	for _, v := range [...]*float64{&w.Sum, &w.Min, &w.Max, &w.First, &w.Last, &w.Increase} {
		*v = d.F64()
	}
	w.Stale = d.Byte() == 1
	return w
}

func (c *runCursor) current() (*spillKey, int) { return &c.key, c.seq }
