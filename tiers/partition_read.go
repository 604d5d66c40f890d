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
// its windows ascending. It reads the file a batch of rows at a time and
// holds one series' windows, not the partition's: for a reader of every
// series of a partition, such as the hour tier's build from a day of
// minute partitions, where Select would hold every window of the range
// (182 bytes each in the heap: 13 GB for a day of 50,000 series).
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
			yield(SeriesWindows{}, err)
			return
		}
		pr := partitionReader{cols: of.cols}
		err = pr.read(ctx, of.pf, yield)
		if rerr := r.files.release(of); err == nil {
			err = rerr
		}
		if err != nil && !errors.Is(err, errStopped) {
			yield(SeriesWindows{}, fmt.Errorf("read %s partition %s: %w", r.cfg.Name, fmtPartition(start), err))
		}
	}
}

// errStopped ends a partitionReader whose consumer stopped.
var errStopped = errors.New("stopped")

// partitionReader turns a file's rows into its series, in row order.
type partitionReader struct {
	cols rollupColumns
	// The series being collected: its labels column text, id and windows.
	text string
	id   int64
	ws   []Window
}

// partitionReadRows is how many rows partitionReader reads at once.
const partitionReadRows = 1024

func (pr *partitionReader) read(ctx context.Context, pf *parquet.File, yield func(SeriesWindows, error) bool) error {
	buf := make([]parquet.Row, partitionReadRows)
	for _, rg := range pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := pr.readRowGroup(rg, buf, yield); err != nil {
			return err
		}
	}
	return pr.flush(yield)
}

func (pr *partitionReader) readRowGroup(rg parquet.RowGroup, buf []parquet.Row, yield func(SeriesWindows, error) bool) (err error) {
	rows := rg.Rows()
	defer func() { err = errors.Join(err, rows.Close()) }()
	for {
		n, rerr := rows.ReadRows(buf)
		for _, row := range buf[:n] {
			if err := pr.add(row, yield); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// add appends row's window to the series being collected, or yields that
// series first when row starts another.
func (pr *partitionReader) add(row parquet.Row, yield func(SeriesWindows, error) bool) error {
	c := &pr.cols
	if len(row) <= max(c.labels, c.seriesID, c.start, c.firstT, c.lastT, c.count, c.sum, c.min, c.max, c.first, c.last, c.increase, c.resets, c.stale) {
		return fmt.Errorf("row of %d columns", len(row))
	}
	text, id := row[c.labels].ByteArray(), row[c.seriesID].Int64()
	if len(pr.ws) > 0 && (id != pr.id || string(text) != pr.text) {
		if err := pr.flush(yield); err != nil {
			return err
		}
	}
	if len(pr.ws) == 0 {
		pr.text, pr.id = string(text), id
	}
	w, err := rowWindow(row, c)
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
func rowWindow(row parquet.Row, c *rollupColumns) (Window, error) {
	if row[c.last].IsNull() {
		return Window{}, errors.New("column last has a null")
	}
	count := row[c.count].Int64()
	w := Window{
		Start: row[c.start].Int64(), FirstT: row[c.firstT].Int64(), LastT: row[c.lastT].Int64(),
		Count:  uint32(count), //nolint:gosec // written from a uint32
		Last:   row[c.last].Double(),
		Resets: uint32(max(row[c.resets].Int32(), 0)),
		Stale:  row[c.stale].Boolean(),
	}
	or := func(v parquet.Value, rule func() float64) float64 {
		if v.IsNull() {
			return rule()
		}
		return v.Double()
	}
	w.First = or(row[c.first], func() float64 { return ruleFirst(w.Last) })
	w.Min = or(row[c.min], func() float64 { return ruleMin(w.First, w.Last) })
	w.Max = or(row[c.max], func() float64 { return ruleMax(w.First, w.Last) })
	w.Increase = or(row[c.increase], func() float64 { return ruleIncrease(w.First, w.Last) })
	w.Sum = or(row[c.sum], func() float64 { return ruleSum(count, w.Last) })
	return w, nil
}
