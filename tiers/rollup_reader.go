package tiers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/zeebo/xxh3"

	"github.com/strata-dev/strata/internal/labelshare"
	"github.com/strata-dev/strata/internal/seriesset"
)

// textKey stands for a series' `labels` column text within one select:
// its 128-bit XXH3 hash. The text itself, kept as a map key by every
// reader, was the largest part of a select over many series: 207 MB at
// 500,000 series, a third of the diagnosis engine's minute snapshot in the
// ten minutes after each hour's minute partition was written
// (docs/bench.md, stop 37). Two of a select's series take each other's
// windows only if their texts' hashes collide in all 128 bits: about one
// chance in 10^27 among a million series.
type textKey = xxh3.Uint128

// keyOf returns text's textKey.
func keyOf(text []byte) textKey { return xxh3.Hash128(text) }

// localSeries is a series one file reader found.
type localSeries struct {
	key  textKey // its labels column text's
	lbls labels.Labels
	// blk's rows [off, off+n) are its kept windows (blk nil: none yet).
	// A block of its own holds only them (off 0); a shared one
	// (fileReader.shared) other series' too.
	blk    *windowBlock
	off, n int32
	shared bool
	// skip is how many windows after the query's first start the series'
	// first kept one starts (selectOptions.seriesFrom; 0: none skipped).
	// It fits in the padding after shared.
	skip int32
}

// fileReader reads a contiguous range of files for one worker of a select,
// keeping its own series table and decode buffers.
type fileReader struct {
	q         *rollupQuery
	filesLeft int // files left in this reader's range, the current one included
	// byKey maps the `labels` column text (its textKey) to an index into
	// series, or -1 when the series does not match.
	byKey map[textKey]int32
	// byID maps series_id to the same index as byKey, or idAmbiguous when
	// two label sets share the id (a hash collision: rows are then mapped
	// by their labels).
	byID   map[int64]int32
	series []localSeries
	// keyed says the reader's range holds more than one file: a series
	// admitted from a file's series table (indexByTable) is then entered
	// in byKey too, for the next files. A reader of one file (the
	// diagnosis engine's, after an hour's partition is written) needs no
	// map of the file's series.
	keyed bool
	// ord maps the runs of ordOf's file to series indexes (ordUnknown:
	// not met yet; -1: not matching).
	ord    []int32
	ordOf  *fileTable
	labels labelsDecoder     // admit's
	share  labelshare.Finder // admit's, over q.opts.shared

	// buffers reused across row groups
	ids     []int64
	idx     []int32
	rowRuns []rowRun // the current row group's series runs
	keep    []int32
	stale   []bool        // decoded stale column of the current row group
	nulls   windowColumns // null flags of the double columns, indexed like the batch
	values  []parquet.Value

	// batch holds the kept rows of the last row groups in file order, and
	// batchRuns which series each run of them belongs to. Copying rows into
	// their series' blocks a batch at a time (a blocked transpose) writes
	// each block sequentially from a source that is still in cache; copying
	// every row group straight into a thousand blocks cost a cache miss per
	// series and column per file.
	batch *windowBlock
	spare *windowBlock // the pooled buffers batch's columns come from (batchPool)
	// shared is the blocks being filled with the windows of series first
	// met in the reader's last file, one per set of columns (see flush).
	shared     sharedBlocks
	batchRuns  []batchRun
	sortedRuns []batchRun // flush's buffers
	runCounts  []int32
}

// batchRun is rows [lo, hi) of a reader's batch, all of series si, read
// when filesLeft files were left in the reader's range.
type batchRun struct{ si, lo, hi, filesLeft int32 }

// defaultBatchRows is the batch size that triggers a flush: a few MB, to
// stay in cache.
const defaultBatchRows = 1 << 17

func newFileReader(q *rollupQuery) *fileReader {
	return &fileReader{q: q, series: make([]localSeries, 0, q.opts.seriesHint), share: labelshare.Finder{Src: q.opts.shared}}
}

// maps makes byKey and byID, the first time a file's labels are read.
func (fr *fileReader) maps() {
	if fr.byKey == nil {
		n := fr.q.opts.seriesHint
		fr.byKey, fr.byID = make(map[textKey]int32, n), make(map[int64]int32, n)
	}
}

func (fr *fileReader) readFile(ctx context.Context, files *fileCache, p PartitionInfo) (err error) {
	of, err := files.acquire(p)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, files.release(of)) }()
	tab := files.tableOf(of)
	var runs [][]seriesRun
	if tab == nil {
		if runs, err = of.seriesRuns(); err != nil {
			return asCorrupt(fmt.Errorf("partition %s: %w", p.Path, err), p.Path, of.info)
		}
	}
	for i, rg := range of.pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var rgRuns []seriesRun
		var at rowGroupAt
		switch {
		case tab != nil:
			at = rowGroupAt{tab, tab.first[i], tab.skip[i]}
		case runs != nil:
			rgRuns = runs[i]
		}
		if err := fr.readRowGroup(rg, of.cols, rgRuns, at); err != nil {
			return asCorrupt(fmt.Errorf("partition %s: %w", p.Path, err), p.Path, of.info)
		}
	}
	return nil
}

type rollupColumns struct {
	name, labels, seriesID, start, firstT, lastT, count, sum, min, max, first, last, increase, resets, stale int
}

func lookupColumns(sch *parquet.Schema) (rollupColumns, error) {
	var c rollupColumns
	for _, x := range []struct {
		name string
		dst  *int
	}{
		{"metric_name", &c.name}, {"labels", &c.labels}, {"series_id", &c.seriesID}, {"start", &c.start}, {"first_ts", &c.firstT}, {"last_ts", &c.lastT},
		{"count", &c.count}, {"sum", &c.sum}, {"min", &c.min}, {"max", &c.max}, {"first", &c.first}, {"last", &c.last},
		{"increase", &c.increase}, {"resets", &c.resets}, {"stale", &c.stale},
	} {
		leaf, ok := sch.Lookup(x.name)
		if !ok {
			return c, fmt.Errorf("column %q missing", x.name)
		}
		*x.dst = leaf.ColumnIndex
	}
	return c, nil
}

// allFalse reports whether a boolean column chunk's statistics say it holds
// only false (the stale column of a row group where no series ended).
func allFalse(cc parquet.ColumnChunk) bool {
	fc, ok := cc.(*parquet.FileColumnChunk)
	if !ok {
		return false
	}
	_, hi, ok := fc.Bounds()
	return ok && !hi.IsNull() && !hi.Boolean()
}

// readRowGroup reads one row group: which series its rows belong to
// (indexRows), which rows the query keeps (from last_ts alone), then the
// kept rows' other columns into the batch (decodeAggregates). runs are its
// series runs from the file's metadata, or nil to read them from the
// series_id column; at places them in the file's series table, if it has
// one.
func (fr *fileReader) readRowGroup(rg parquet.RowGroup, c rollupColumns, runs []seriesRun, at rowGroupAt) error {
	q := fr.q
	if q.skipRowGroup(rg, c) {
		return nil
	}
	chunks := rg.ColumnChunks()
	n := int(rg.NumRows())
	matched, err := fr.indexRows(chunks, c, runs, at, n)
	if err != nil || !matched || q.opts.labelsOnly {
		return err
	}
	need := q.decode
	thin := q.opts.thinStep > 0
	// Columns are decoded straight into the batch, after its rows; the rows
	// not kept are then squeezed out in place. The batch grows with what is
	// kept, up to batchRows+n: a select that keeps a few windows (a panel's
	// first minute from the minute tier) allocates one row group's rows,
	// not a full batch.
	if fr.batch == nil {
		fr.spare = q.batches.get()
		fr.batch = fr.spare.view(q.res, need, n)
	}
	b := fr.batch
	b.reserve(n)
	base := len(b.lastT)
	// last_ts decides which rows are kept (a window's start is derived
	// from it: WritePartition checks it lies inside the window, so the
	// start column is never decoded); the other columns are decoded only if
	// some row is kept.
	if b.lastT, err = readInt64s(chunks[c.lastT], "last_ts", n, b.lastT, &fr.values); err != nil {
		return err
	}
	lastT := b.lastT[base:]
	keep := fr.keep[:0]
	batchRuns := fr.batchRuns
	for _, r := range fr.rowRuns {
		if r.si < 0 {
			continue
		}
		from := len(keep)
		keep = q.keepRows(keep, lastT, int(r.lo), int(r.hi), q.loT+int64(fr.series[r.si].skip)*q.res, thin)
		if len(keep) > from {
			// Kept rows are squeezed together below: this run's are
			// batch rows base+from .. base+len(keep).
			batchRuns = append(batchRuns, batchRun{si: r.si, lo: int32(base + from), hi: int32(base + len(keep)), filesLeft: int32(fr.filesLeft)}) //nolint:gosec // batch rows fit
		}
	}
	fr.keep = keep
	if len(keep) == 0 {
		b.lastT = b.lastT[:base]
		return nil
	}
	if mw := q.opts.maxWindows; mw > 0 && q.nWindows.Add(int64(len(keep))) > int64(mw) {
		return ErrTooManyWindows
	}
	anyStale, err := fr.decodeAggregates(chunks, c, n, base)
	if err != nil {
		return err
	}
	if len(keep) < n { // squeeze out the rows not kept (keep is ascending: in place)
		b.compact(base, keep)
	}
	if anyStale {
		for k, row := range keep {
			if fr.stale[row] {
				b.staleRows = append(b.staleRows, int32(base+k)) //nolint:gosec // batch rows fit
			}
		}
	}
	fr.batchRuns = batchRuns
	if len(b.lastT) >= q.opts.batchRows {
		fr.flush()
	}
	return nil
}

// indexRows maps the row group's n rows to the reader's series, into
// fr.rowRuns, and reports whether any row belongs to a matching series (a
// row group without any is not decoded further). The series ids (hashes of
// the labels) come from the file's series runs, else from the series_id
// column: when every id in the row group is already known from an earlier
// row group or file, the labels column is not read at all; nor is it when
// the file's series table (at) names the runs' series.
func (fr *fileReader) indexRows(chunks []parquet.ColumnChunk, c rollupColumns, runs []seriesRun, at rowGroupAt, n int) (matched bool, err error) {
	if at.t != nil {
		fr.rowRuns, matched = fr.indexByTable(at, n, fr.rowRuns[:0])
		return matched, nil
	}
	fr.maps()
	known := false
	if runs != nil {
		fr.rowRuns, matched, known = fr.indexByRuns(runs, fr.rowRuns[:0])
	} else {
		if fr.ids, err = readInt64s(chunks[c.seriesID], "series_id", n, fr.ids[:0], &fr.values); err != nil {
			return false, err
		}
		fr.rowRuns, matched, known = fr.indexByID(fr.rowRuns[:0])
	}
	if known {
		return matched, nil
	}
	// fr.ids now holds the n ids (from the series_id column, or expanded
	// from the runs by indexByRuns), one per row as the labels are.
	if fr.idx, matched, err = fr.readSeriesIndex(chunks[c.labels], n, fr.idx[:0]); err != nil {
		return false, err
	}
	fr.learnIDs(fr.idx)
	fr.rowRuns = runsOf(fr.idx, fr.rowRuns[:0])
	return matched, nil
}

// decodeAggregates appends the row group's n rows of every column the
// batch holds but last_ts (already decoded) to the batch, whose rows of
// this row group start at base, fills in the aggregates schema version 2
// leaves null, and decodes the stale column into fr.stale; anyStale is
// false when no row is stale (fr.stale is then not set).
func (fr *fileReader) decodeAggregates(chunks []parquet.ColumnChunk, c rollupColumns, n, base int) (anyStale bool, err error) {
	b := fr.batch
	for _, x := range []struct {
		name string
		col  int
		dst  *[]int64
	}{{"first_ts", c.firstT, &b.firstT}, {"count", c.count, &b.count}} {
		if *x.dst == nil {
			continue
		}
		if *x.dst, err = readInt64s(chunks[x.col], x.name, n, *x.dst, &fr.values); err != nil {
			return false, err
		}
	}
	// Schema version 2 leaves derivable aggregates null: decode the null
	// flags too (indexed like the batch) and fill the values in from the
	// rules (parquet_derive.go) before rows are squeezed out.
	nulls := &fr.nulls
	for _, x := range []struct {
		name string
		col  int
		dst  *[]float64
		null *[]bool
	}{{"sum", c.sum, &b.sum, &nulls.SumNull}, {"min", c.min, &b.min, &nulls.MinNull}, {"max", c.max, &b.max, &nulls.MaxNull}, {"first", c.first, &b.first, &nulls.FirstNull}, {"last", c.last, &b.last, &nulls.LastNull}, {"increase", c.increase, &b.increase, &nulls.IncNull}} {
		if *x.dst == nil {
			*x.null = nil
			continue
		}
		*x.null = slices.Grow((*x.null)[:0], base+n)[:base]
		if *x.dst, *x.null, err = readNullableDoubles(chunks[x.col], x.name, n, *x.dst, *x.null, &fr.values); err != nil {
			return false, err
		}
	}
	if err := deriveWindowColumns(windowColumns{
		Count: tail(b.count, base), Sum: tail(b.sum, base), Min: tail(b.min, base), Max: tail(b.max, base),
		First: tail(b.first, base), Last: tail(b.last, base), Inc: tail(b.increase, base),
		SumNull: tail(nulls.SumNull, base), MinNull: tail(nulls.MinNull, base), MaxNull: tail(nulls.MaxNull, base),
		FirstNull: tail(nulls.FirstNull, base), LastNull: tail(nulls.LastNull, base), IncNull: tail(nulls.IncNull, base),
	}); err != nil {
		return false, err
	}
	if b.resets != nil {
		if b.resets, err = readInt32s(chunks[c.resets], "resets", n, b.resets, &fr.values); err != nil {
			return false, err
		}
	}
	if fr.q.decode&colStale != 0 && !allFalse(chunks[c.stale]) { // else no series ended in this row group: nothing to decode
		if fr.stale, err = readBools(chunks[c.stale], "stale", n, fr.stale[:0], &fr.values); err != nil {
			return false, err
		}
		anyStale = slices.Contains(fr.stale, true)
	}
	return anyStale, nil
}

// flush copies the batch's rows into their series' blocks, series by series
// (a stable sort keeps each series' runs in time order), and empties it.
func (fr *fileReader) flush() {
	if fr.batch == nil || len(fr.batchRuns) == 0 {
		return
	}
	// A counting sort by series, stable: each series' runs stay in time order.
	counts := fr.runCounts[:0]
	counts = slices.Grow(counts, len(fr.series)+1)[:len(fr.series)+1]
	clear(counts)
	for _, r := range fr.batchRuns {
		counts[r.si+1]++
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	sorted := slices.Grow(fr.sortedRuns[:0], len(fr.batchRuns))[:len(fr.batchRuns)]
	for _, r := range fr.batchRuns {
		sorted[counts[r.si]] = r
		counts[r.si]++
	}
	fr.runCounts, fr.sortedRuns = counts, sorted
	for _, r := range sorted {
		fr.keepRun(&fr.series[r.si], r)
	}
	fr.batchRuns = fr.batchRuns[:0]
	b := fr.batch
	b.firstT, b.lastT, b.count = trunc(b.firstT), trunc(b.lastT), trunc(b.count)
	b.sum, b.min, b.max, b.first, b.last, b.increase = trunc(b.sum), trunc(b.min), trunc(b.max), trunc(b.first), trunc(b.last), trunc(b.increase)
	b.resets, b.staleRows = trunc(b.resets), trunc(b.staleRows)
}

// keepRun copies run r of the batch into its series' windows.
//
// A series first met in the reader's last file goes into the blocks shared
// with the other series met there (sharedBlocks): the diagnosis engine's
// snapshot reads ten minutes of 500,000 series from one partition in the
// ten minutes after each hour's is written. A series read from more files
// gets a block of its own, sized for the rest of the reader's range, so
// that a long query walks its windows in one place (see selectColumns); so
// does a shared series whose next rows do not follow its last ones in
// their block (a series whose rows a batch boundary split lands on its
// block's last rows: those are extended when they fit).
func (fr *fileReader) keepRun(ls *localSeries, r batchRun) {
	rows := int(r.hi - r.lo)
	if ls.blk == nil {
		need := fr.q.opts.need
		if f := fr.q.opts.seriesNeed; f != nil {
			need &= f(ls.lbls)
		}
		if r.filesLeft <= 1 {
			ls.blk, ls.shared = fr.shared.room(fr.q.res, need, rows), true
			ls.off = int32(len(ls.blk.lastT)) //nolint:gosec // block rows fit
		} else {
			// Sized for this density over the rest of the reader's range:
			// exact for a series present throughout, grown by append else.
			ls.blk = newWindowBlock(fr.q.res, need, rows*int(r.filesLeft))
		}
	} else if ls.shared && (int(ls.off+ls.n) != len(ls.blk.lastT) || len(ls.blk.lastT)+rows > cap(ls.blk.lastT)) {
		own := newWindowBlock(fr.q.res, ls.blk.cols, int(ls.n)+rows*int(max(r.filesLeft, 1)))
		own.appendRows(ls.blk, int(ls.off), int(ls.off+ls.n))
		ls.blk, ls.off, ls.shared = own, 0, false
	}
	ls.blk.appendRows(fr.batch, int(r.lo), int(r.hi))
	ls.n += int32(rows) //nolint:gosec // block rows fit
}

// batchPool keeps the file readers' batches between selects. A batch is
// scratch space (flush copies its rows into the series' own blocks) that a
// reader grows row group by row group to defaultBatchRows rows and more:
// allocating and growing it afresh for every select was a quarter of a
// shard's CPU answering 30-day queries through Thanos (the copies of
// growing slices, and zeroing the new memory).
//
// Pooled is a windowBlock holding every column buffer any select has used;
// a select takes the columns it needs from it (windowBlock.view) and gives
// them back, grown, with putBack. A batch goes back only once its reader
// has flushed: nothing refers to its rows after.
type batchPool struct{ p sync.Pool }

func (bp *batchPool) get() *windowBlock {
	if b, ok := bp.p.Get().(*windowBlock); ok {
		return b
	}
	return &windowBlock{}
}

// putBack returns a reader's batch buffers to the pool.
func (bp *batchPool) putBack(fr *fileReader) {
	if fr.spare == nil {
		return
	}
	fr.spare.keep(fr.batch)
	bp.p.Put(fr.spare)
	fr.spare, fr.batch = nil, nil
}

// view is a batch of the need columns (the others nil, as newWindowBlock
// makes them) over b's buffers, emptied; a column b has no buffer for
// gets one of capacity rows.
func (b *windowBlock) view(res int64, need colSet, capacity int) *windowBlock {
	v := &windowBlock{res: res, cols: need | colLastT | colStale, staleRows: b.staleRows[:0]}
	take(&v.firstT, b.firstT, need&colFirstT != 0, capacity)
	take(&v.lastT, b.lastT, true, capacity)
	take(&v.count, b.count, need&colCount != 0, capacity)
	take(&v.sum, b.sum, need&colSum != 0, capacity)
	take(&v.min, b.min, need&colMin != 0, capacity)
	take(&v.max, b.max, need&colMax != 0, capacity)
	take(&v.first, b.first, need&colFirst != 0, capacity)
	take(&v.last, b.last, need&colLast != 0, capacity)
	take(&v.increase, b.increase, need&colIncrease != 0, capacity)
	take(&v.resets, b.resets, need&colResets != 0, capacity)
	return v
}

func take[T any](dst *[]T, buf []T, ok bool, capacity int) {
	switch {
	case !ok:
	case buf != nil:
		*dst = buf[:0]
	default:
		*dst = make([]T, 0, capacity)
	}
}

// keep takes v's column buffers (a view of b, grown since) into b.
func (b *windowBlock) keep(v *windowBlock) {
	if v == nil {
		return
	}
	keepCol(&b.firstT, v.firstT)
	keepCol(&b.lastT, v.lastT)
	keepCol(&b.count, v.count)
	keepCol(&b.sum, v.sum)
	keepCol(&b.min, v.min)
	keepCol(&b.max, v.max)
	keepCol(&b.first, v.first)
	keepCol(&b.last, v.last)
	keepCol(&b.increase, v.increase)
	keepCol(&b.resets, v.resets)
	keepCol(&b.staleRows, v.staleRows)
}

func keepCol[T any](dst *[]T, buf []T) {
	if buf != nil {
		*dst = buf[:0]
	}
}

const idAmbiguous = int32(-2)

// rowRun is rows [lo, hi) of a row group, all of series si (-1: a series
// the query does not match).
type rowRun struct{ si, lo, hi int32 }

// indexByID maps the row group's rows to series through fr.ids alone,
// appending a run per series to dst; known is false when some id is not
// known yet (or ambiguous), and the labels column must be read.
func (fr *fileReader) indexByID(dst []rowRun) (runs []rowRun, matched, known bool) {
	for i := 0; i < len(fr.ids); {
		id := fr.ids[i]
		si, ok := fr.byID[id]
		if !ok || si == idAmbiguous {
			return dst[:0], false, false
		}
		matched = matched || si >= 0
		j := i + 1 // rows of one series are adjacent
		for j < len(fr.ids) && fr.ids[j] == id {
			j++
		}
		dst = append(dst, rowRun{si: si, lo: int32(i), hi: int32(j)}) //nolint:gosec // a row group's rows fit
		i = j
	}
	return dst, matched, true
}

// runsOf turns a row-by-row series index into runs.
func runsOf(idx []int32, dst []rowRun) []rowRun {
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && idx[j] == idx[i] {
			j++
		}
		dst = append(dst, rowRun{si: idx[i], lo: int32(i), hi: int32(j)}) //nolint:gosec // a row group's rows fit
		i = j
	}
	return dst
}

// learnIDs records the series index of each row's id after a labels-based mapping.
func (fr *fileReader) learnIDs(idx []int32) {
	for i, id := range fr.ids {
		si, ok := fr.byID[id]
		switch {
		case !ok:
			fr.byID[id] = idx[i]
		case si != idx[i]:
			fr.byID[id] = idAmbiguous
		}
	}
}

// readSeriesIndex maps each of the rows of the labels column to a series
// index (-1 when it does not match). Rows of one series are adjacent, so the
// label text is compared to the previous row's before any map lookup.
func (fr *fileReader) readSeriesIndex(cc parquet.ColumnChunk, rows int, dst []int32) ([]int32, bool, error) {
	matched := false
	var prev []byte
	prevIdx := int32(-1)
	err := readPages(cc, "labels", rows, func(p parquet.Page) (int, error) {
		return readValues(p.Values(), int(p.NumValues()), &fr.values, func(vs []parquet.Value) error {
			for _, v := range vs {
				b := v.ByteArray()
				if prev == nil || string(b) != string(prev) {
					k := keyOf(b)
					si, ok := fr.byKey[k]
					if !ok {
						var err error
						if si, err = fr.admit(b, k); err != nil {
							return err
						}
					}
					prev, prevIdx = append(prev[:0], b...), si
				}
				if prevIdx >= 0 {
					matched = true
				}
				dst = append(dst, prevIdx)
			}
			return nil
		})
	})
	return dst, matched, err
}

// nameKeyJSON opens the metric name's member in the labels column (JSON
// as encoding/json writes it: no spaces, and a quote inside a string is
// escaped, so this text is only ever the __name__ key's).
const nameKeyJSON = `"__name__":`

// admit decodes a series' labels the first time they are seen and checks
// the matchers. A series of another metric than a name equality matcher's
// is passed over undecoded (a select of one metric reads row groups
// holding many; decoding every series' labels was most of the CPU of
// strata export's capacity preset).
func (fr *fileReader) admit(text []byte, key textKey) (int32, error) {
	if nk := fr.q.nameEqJSON; nk != "" && bytes.Contains(text, []byte(nameKeyJSON)) && !bytes.Contains(text, []byte(nk)) {
		fr.byKey[key] = -1
		return -1, nil
	}
	lbls, err := fr.labels.peek(text)
	if err != nil {
		return -1, err
	}
	si := int32(-1)
	if seriesset.MatchAll(lbls, fr.q.matchers) {
		if held, ok := fr.share.Find(lbls); ok {
			lbls = held // no copy of its own
		} else {
			lbls = fr.labels.keep(lbls)
		}
		si = fr.add(key, lbls)
	}
	fr.byKey[key] = si
	return si, nil
}

// add appends a matching series to the reader's and returns its index.
func (fr *fileReader) add(key textKey, lbls labels.Labels) int32 {
	si := int32(len(fr.series)) //nolint:gosec // bounded by the number of series
	fr.series = append(fr.series, localSeries{key: key, lbls: lbls, skip: fr.q.skipOf(lbls)})
	return si
}

// rowGroupAt is a row group's place in its file's series table: its
// first rows are the table's run first, less the skip rows of it that
// earlier row groups hold (t nil: no table).
type rowGroupAt struct {
	t           *fileTable
	first, skip int32
}

// ordUnknown marks a table run whose series the reader has not met yet.
const ordUnknown = int32(-2)

// indexByTable is indexByRuns for the n rows of a row group whose file
// has a series table: they are the table's runs from at.first on (less
// at.skip rows of the first), each run's series checked against the
// matchers the first time the reader meets it.
func (fr *fileReader) indexByTable(at rowGroupAt, n int, dst []rowRun) (out []rowRun, matched bool) {
	t := at.t
	if fr.ordOf != t {
		fr.ordOf = t
		fr.ord = slices.Grow(fr.ord[:0], len(t.ids))[:len(t.ids)]
		for i := range fr.ord {
			fr.ord[i] = ordUnknown
		}
	}
	skip := at.skip
	for o, row := int(at.first), int32(0); row < int32(n); o++ { //nolint:gosec // a row group's rows fit
		rows := min(t.rows[o]-skip, int32(n)-row) //nolint:gosec // as above
		skip = 0
		si := fr.ord[o]
		if si == ordUnknown {
			si = fr.admitHeld(t.keys[o], t.lbls[o], !t.shared)
			fr.ord[o] = si
		}
		matched = matched || si >= 0
		dst = append(dst, rowRun{si: si, lo: row, hi: row + rows})
		row += rows
	}
	return dst, matched
}

// admitHeld is admit for a label set the reader need not copy (a series
// table's), whose text's key is known; lookup says the table did not look
// it up in a shared store, which the select's may hold.
func (fr *fileReader) admitHeld(key textKey, lbls labels.Labels, lookup bool) int32 {
	if fr.keyed {
		fr.maps()
		if si, ok := fr.byKey[key]; ok {
			return si
		}
	}
	si := int32(-1)
	if seriesset.MatchAll(lbls, fr.q.matchers) {
		if lookup {
			if held, ok := fr.share.Find(lbls); ok {
				lbls = held
			}
		}
		si = fr.add(key, lbls)
	}
	if fr.keyed {
		fr.byKey[key] = si
	}
	return si
}
