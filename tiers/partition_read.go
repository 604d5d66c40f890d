package tiers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	"github.com/parquet-go/parquet-go"
)

// PartitionSeries yields every series of the partition starting at start,
// in the file's order (partition order: ComparePartitionOrder), each with
// its windows ascending. It reads the columns a window needs (not the
// label columns, which the labels column repeats), a batch of values of
// each at a time, and holds one series' windows, not the partition's: for
// a reader of every series of a partition, such as the hour tier's build
// from a day of minute partitions, where Select would hold every window
// of the range (182 bytes each in the heap: 13 GB for a day of 50,000
// series).
//
// A yielded series' windows are valid until the next series is requested;
// its label set may be kept. A partition the tier does not hold yields
// nothing.
func (r *Rollup) PartitionSeries(ctx context.Context, start int64) iter.Seq2[SeriesWindows, error] {
	return func(yield func(SeriesWindows, error) bool) {
		r.mu.RLock()
		p, ok := r.parts[start]
		r.mu.RUnlock()
		if !ok {
			return
		}
		of, err := r.files.acquire(p)
		if err != nil {
			r.setAsideIfCorrupt(err)
			yield(SeriesWindows{}, err)
			return
		}
		pr := partitionReader{cols: of.cols}
		err = pr.read(ctx, of.pf, yield)
		if rerr := r.files.release(of); err == nil {
			err = rerr
		}
		// A corrupt partition fails this read (its consumer, the hour
		// tier's build, tries again) and is set aside for the next.
		if err != nil && !errors.Is(err, errStopped) {
			err = asCorrupt(err, p.Path, of.info)
			r.setAsideIfCorrupt(err)
			yield(SeriesWindows{}, fmt.Errorf("read %s partition %s: %w", r.cfg.Name, fmtPartition(start), err))
		}
	}
}

// errStopped ends a partitionReader whose consumer stopped.
var errStopped = errors.New("stopped")

// partitionReader turns a file's rows into its series, in row order.
type partitionReader struct {
	cols rollupColumns
	vals []columnValues // the columns of rowWindow's row, in its order
	// The series being collected: its labels column text, id and windows.
	text string
	id   int64
	ws   []Window
}

// partitionReadRows is how many values of a column partitionReader reads
// at once.
const partitionReadRows = 1024

func (pr *partitionReader) read(ctx context.Context, pf *parquet.File, yield func(SeriesWindows, error) bool) error {
	c := &pr.cols
	cols := []int{c.labels, c.seriesID, c.start, c.firstT, c.lastT, c.count, c.sum, c.min, c.max, c.first, c.last, c.increase, c.resets, c.stale}
	pr.vals = make([]columnValues, len(cols))
	for i := range pr.vals {
		pr.vals[i].buf = make([]parquet.Value, partitionReadRows)
	}
	for _, rg := range pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := pr.readRowGroup(rg, cols, yield); err != nil {
			return err
		}
	}
	return pr.flush(yield)
}

// columnValues reads one column of a row group a batch of values at a
// time: only the columns a window needs are decoded, not the label columns.
type columnValues struct {
	r     parquet.ColumnChunkValueReader
	buf   []parquet.Value
	at, n int
}

// next is the column's next value. A value read before it may point into a
// page the reader has since released: take each in turn.
func (cv *columnValues) next() (parquet.Value, error) {
	if cv.at == cv.n {
		n, err := cv.r.ReadValues(cv.buf)
		if n == 0 {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return parquet.Value{}, err
		}
		cv.at, cv.n = 0, n
	}
	cv.at++
	return cv.buf[cv.at-1], nil
}

func (pr *partitionReader) readRowGroup(rg parquet.RowGroup, cols []int, yield func(SeriesWindows, error) bool) (err error) {
	chunks := rg.ColumnChunks()
	for i, c := range cols {
		pr.vals[i].r, pr.vals[i].at, pr.vals[i].n = parquet.NewColumnChunkValueReader(chunks[c]), 0, 0
	}
	defer func() {
		for i := range pr.vals {
			err = errors.Join(err, pr.vals[i].r.Close())
		}
	}()
	row := make([]parquet.Value, len(cols))
	for range rg.NumRows() {
		for i := range pr.vals {
			if row[i], err = pr.vals[i].next(); err != nil {
				return fmt.Errorf("column %d: %w", cols[i], err)
			}
		}
		if err := pr.add(row, yield); err != nil {
			return err
		}
	}
	return nil
}

// The places of a window's columns in a row read by readRowGroup.
const (
	vLabels = iota
	vSeriesID
	vStart
	vFirstT
	vLastT
	vCount
	vSum
	vMin
	vMax
	vFirst
	vLast
	vIncrease
	vResets
	vStale
)

// add appends row's window to the series being collected, or yields that
// series first when row starts another.
func (pr *partitionReader) add(row []parquet.Value, yield func(SeriesWindows, error) bool) error {
	text, id := row[vLabels].ByteArray(), row[vSeriesID].Int64()
	if len(pr.ws) > 0 && (id != pr.id || string(text) != pr.text) {
		if err := pr.flush(yield); err != nil {
			return err
		}
	}
	if len(pr.ws) == 0 {
		pr.text, pr.id = string(text), id
	}
	w, err := rowWindow(row)
	if err != nil {
		return err
	}
	pr.ws = append(pr.ws, w)
	return nil
}

// flush yields the series being collected, if any.
func (pr *partitionReader) flush(yield func(SeriesWindows, error) bool) error {
	if len(pr.ws) == 0 {
		return nil
	}
	lbls, err := decodeLabels([]byte(pr.text))
	if err != nil {
		return err
	}
	ok := yield(SeriesWindows{Labels: lbls, Windows: pr.ws}, nil)
	pr.ws = pr.ws[:0]
	if !ok {
		return errStopped
	}
	return nil
}

// rowWindow is the window a row holds, its null aggregates derived by the
// rules of schema version 2 (parquet_derive.go), as the column readers
// derive them (deriveWindowColumns): first, then min, max and increase from
// it, then sum.
func rowWindow(row []parquet.Value) (Window, error) {
	if row[vLast].IsNull() {
		return Window{}, errors.New("column last has a null")
	}
	count := row[vCount].Int64()
	w := Window{
		Start: row[vStart].Int64(), FirstT: row[vFirstT].Int64(), LastT: row[vLastT].Int64(),
		Count:  uint32(count), //nolint:gosec // written from a uint32
		Last:   row[vLast].Double(),
		Resets: uint32(max(row[vResets].Int32(), 0)),
		Stale:  row[vStale].Boolean(),
	}
	or := func(v parquet.Value, rule func() float64) float64 {
		if v.IsNull() {
			return rule()
		}
		return v.Double()
	}
	w.First = or(row[vFirst], func() float64 { return ruleFirst(w.Last) })
	w.Min = or(row[vMin], func() float64 { return ruleMin(w.First, w.Last) })
	w.Max = or(row[vMax], func() float64 { return ruleMax(w.First, w.Last) })
	w.Increase = or(row[vIncrease], func() float64 { return ruleIncrease(w.First, w.Last) })
	w.Sum = or(row[vSum], func() float64 { return ruleSum(count, w.Last) })
	return w, nil
}
