package tiers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/parallel"
)

// Select returns the series matching all matchers that have windows starting
// in [mint, maxt], each with those windows in ascending order, the series
// sorted by labels. Windows of one series from several partitions are
// concatenated.
//
// Only the partitions overlapping the range are opened. Within a file a row
// group is skipped when its start-time statistics miss the range, or when a
// metric-name equality matcher is absent from the row group's name statistics
// or bloom filter. Only the columns needed to rebuild windows are decoded (the
// curated label columns are for analysts and are never read here).
func (r *Rollup) Select(ctx context.Context, mint, maxt int64, matchers ...*labels.Matcher) ([]SeriesWindows, error) {
	sel, err := r.selectColumns(ctx, mint, maxt, matchers, selectOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]SeriesWindows, len(sel))
	for i, s := range sel {
		out[i] = SeriesWindows{Labels: s.lbls, Windows: s.ws.appendTo(make([]Window, 0, s.ws.Len()))}
	}
	return out, nil
}

// SelectLabels returns the label sets of the series matching all matchers
// that have windows in partitions overlapping [mint, maxt] (partition
// granularity: it reads only the series_id and labels columns). For label
// name/value APIs.
func (r *Rollup) SelectLabels(ctx context.Context, mint, maxt int64, matchers ...*labels.Matcher) ([]labels.Labels, error) {
	sel, err := r.selectColumns(ctx, mint, maxt, matchers, selectOptions{labelsOnly: true})
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	out := make([]labels.Labels, len(sel))
	for i, s := range sel {
		out[i] = s.lbls
	}
	return out, nil
}

// colSet is a set of aggregate columns. last_ts is always read: a window's
// start is derived from it.
type colSet uint16

const (
	colFirstT colSet = 1 << iota
	colLastT
	colCount
	colSum
	colMin
	colMax
	colFirst
	colLast
	colIncrease
	colResets
	colStale

	colAll = colFirstT | colLastT | colCount | colSum | colMin | colMax | colFirst | colLast | colIncrease | colResets | colStale
)

type selectOptions struct {
	need colSet // aggregate columns to decode (0: all); the others read as zero
	// thinStep > 0 keeps, per series, only the latest window before each
	// evaluation time thinOrigin + k*thinStep (plain selectors at a coarse
	// step see no other).
	thinStep, thinOrigin int64
	maxWindows           int  // bound on windows held in memory (0: none)
	labelsOnly           bool // series only, no windows
}

// selectedSeries is one series a select found, with its windows.
type selectedSeries struct {
	lbls labels.Labels
	ws   windowSeq
}

// selectColumns reads the partitions overlapping [mint, maxt] and returns the
// matching series sorted by labels.
//
// The partitions are split into GOMAXPROCS contiguous time ranges read in
// parallel. Each reader appends a series' kept windows, column by column and
// only the columns the query needs, to that series' own block (through a
// cache-sized batch, see fileReader.batch), so a series
// ends with one block per reader, in time order, and its windows lie
// contiguously in memory: the engine then walks each series in a tight loop
// (scattering a series over hundreds of per-file blocks cost a cache and TLB
// miss per file, 40 % of a 365-day query's evaluation).
func (r *Rollup) selectColumns(ctx context.Context, mint, maxt int64, matchers []*labels.Matcher, opts selectOptions) ([]selectedSeries, error) {
	r.mu.RLock()
	closed := r.closed
	r.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if opts.need == 0 {
		opts.need = colAll
	}
	opts.need = derivationInputs(opts.need | colLastT)
	res := r.cfg.Resolution.Milliseconds()
	q := newRollupQuery(mint, maxt, res, matchers, opts)
	parts := r.partitionsOverlapping(mint, maxt)
	workers := min(parallel.Budget(ctx), len(parts))
	readers := make([]*fileReader, workers)
	errs := make([]error, workers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range readers {
		lo, hi := w*len(parts)/workers, (w+1)*len(parts)/workers
		fr := newFileReader(q)
		readers[w] = fr
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				fr.filesLeft = hi - i
				err := fr.readFile(ctx, r.files, parts[i])
				if err != nil && !errors.Is(err, os.ErrNotExist) { // a file deleted by retention after we listed it is skipped
					errs[w] = err
					cancel()
					return
				}
			}
			fr.flush()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, ErrTooManyWindows) {
			err = fmt.Errorf("%w: more than %d", ErrTooManyWindows, opts.maxWindows)
		}
		return nil, fmt.Errorf("select %s tier: %w", r.cfg.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("select %s tier: %w", r.cfg.Name, err)
	}
	return mergeReaders(readers, opts.labelsOnly), nil
}

// mergeReaders joins the readers' series by their label text. Readers cover
// ascending time ranges, so each series' blocks are already in time order.
func mergeReaders(readers []*fileReader, labelsOnly bool) []selectedSeries {
	byKey := map[string]int{}
	var out []selectedSeries
	for _, fr := range readers {
		for _, ls := range fr.series {
			n := 0
			if ls.blk != nil {
				n = len(ls.blk.lastT)
			}
			if n == 0 && !labelsOnly {
				continue
			}
			gi, ok := byKey[ls.key]
			if !ok {
				gi = len(out)
				byKey[ls.key] = gi
				out = append(out, selectedSeries{lbls: ls.lbls})
			}
			if n > 0 {
				ws := &out[gi].ws
				ws.blocks = append(ws.blocks, ls.blk)
				ws.ends = append(ws.ends, ws.Len()+n)
			}
		}
	}
	slices.SortFunc(out, func(a, b selectedSeries) int { return labels.Compare(a.lbls, b.lbls) })
	return out
}

// windowBlock is windows in columns: only the columns a query needs (the
// others are nil and read as zero). A window's start is its last sample's
// time rounded down to the resolution.
type windowBlock struct {
	res                                  int64
	firstT, lastT, count                 []int64
	sum, min, max, first, last, increase []float64
	resets                               []int32
	// staleRows are the rows whose Stale is true, ascending (series end
	// rarely: a column of flags would cost a byte per window).
	staleRows []int32
}

func newWindowBlock(res int64, need colSet, capacity int) *windowBlock {
	b := &windowBlock{res: res}
	alloc(&b.firstT, need&colFirstT != 0, capacity)
	alloc(&b.lastT, true, capacity)
	alloc(&b.count, need&colCount != 0, capacity)
	alloc(&b.sum, need&colSum != 0, capacity)
	alloc(&b.min, need&colMin != 0, capacity)
	alloc(&b.max, need&colMax != 0, capacity)
	alloc(&b.first, need&colFirst != 0, capacity)
	alloc(&b.last, need&colLast != 0, capacity)
	alloc(&b.increase, need&colIncrease != 0, capacity)
	alloc(&b.resets, need&colResets != 0, capacity)
	return b
}

func alloc[T any](s *[]T, ok bool, capacity int) {
	if ok {
		*s = make([]T, 0, capacity)
	}
}

// appendRows appends rows [lo, hi) of the decoded columns src to b (b's
// columns are a subset of src's).
func (b *windowBlock) appendRows(src *windowBlock, lo, hi int) {
	b.lastT = append(b.lastT, src.lastT[lo:hi]...)
	appendCol(&b.firstT, src.firstT, lo, hi)
	appendCol(&b.count, src.count, lo, hi)
	appendCol(&b.sum, src.sum, lo, hi)
	appendCol(&b.min, src.min, lo, hi)
	appendCol(&b.max, src.max, lo, hi)
	appendCol(&b.first, src.first, lo, hi)
	appendCol(&b.last, src.last, lo, hi)
	appendCol(&b.increase, src.increase, lo, hi)
	appendCol(&b.resets, src.resets, lo, hi)
	if len(src.staleRows) > 0 {
		base := int32(len(b.lastT) - (hi - lo))                                                         //nolint:gosec // block rows fit
		k := sort.Search(len(src.staleRows), func(k int) bool { return src.staleRows[k] >= int32(lo) }) //nolint:gosec // as above
		for ; k < len(src.staleRows) && src.staleRows[k] < int32(hi); k++ {                             //nolint:gosec // as above
			b.staleRows = append(b.staleRows, base+src.staleRows[k]-int32(lo)) //nolint:gosec // as above
		}
	}
}

// isStale reports row i's Stale.
func (b *windowBlock) isStale(i int) bool {
	if len(b.staleRows) == 0 {
		return false
	}
	k := sort.Search(len(b.staleRows), func(k int) bool { return int(b.staleRows[k]) >= i })
	return k < len(b.staleRows) && int(b.staleRows[k]) == i
}

func appendCol[T any](dst *[]T, src []T, lo, hi int) {
	if *dst != nil {
		*dst = append(*dst, src[lo:hi]...)
	}
}

// startOf returns the start of the window holding t.
func (b *windowBlock) startOf(t int64) int64 { return floorTo(t, b.res) }

// window sets *w to row i. Only the block's columns are written: a caller
// reusing w for rows of blocks with the same columns (one query's) sees the
// others stay zero.
func (b *windowBlock) window(i int, w *Window) {
	w.LastT = b.lastT[i]
	w.Start = b.startOf(w.LastT)
	if b.firstT != nil {
		w.FirstT = b.firstT[i]
	}
	if b.count != nil {
		w.Count = uint32(b.count[i]) //nolint:gosec // written from a uint32
	}
	if b.sum != nil {
		w.Sum = b.sum[i]
	}
	if b.min != nil {
		w.Min = b.min[i]
	}
	if b.max != nil {
		w.Max = b.max[i]
	}
	if b.first != nil {
		w.First = b.first[i]
	}
	if b.last != nil {
		w.Last = b.last[i]
	}
	if b.increase != nil {
		w.Increase = b.increase[i]
	}
	if b.resets != nil {
		w.Resets = uint32(max(b.resets[i], 0))
	}
	w.Stale = b.isStale(i)
}

// windowSeq is one series' windows in ascending start order: whole blocks
// (one per reader), read through an index. Its methods take a block hint
// (the caller's cursor) so that sequential reads find their block in O(1).
type windowSeq struct {
	blocks []*windowBlock
	ends   []int // ends[k]: windows in blocks[:k+1]
}

// Len is the number of windows.
func (s *windowSeq) Len() int {
	if len(s.ends) == 0 {
		return 0
	}
	return s.ends[len(s.ends)-1]
}

// locate returns the block holding window i and its row, starting from the
// block *hint and updating it.
func (s *windowSeq) locate(i int, hint *int) (*windowBlock, int) {
	k := *hint
	if k >= len(s.blocks) || i >= s.ends[k] || (k > 0 && i < s.ends[k-1]) {
		if k+1 < len(s.blocks) && i >= s.ends[k] && i < s.ends[k+1] {
			k++
		} else {
			k = sort.SearchInts(s.ends, i+1)
		}
		*hint = k
	}
	base := 0
	if k > 0 {
		base = s.ends[k-1]
	}
	return s.blocks[k], i - base
}

// at sets *w to window i (see windowBlock.window).
func (s *windowSeq) at(i int, hint *int, w *Window) {
	b, row := s.locate(i, hint)
	b.window(row, w)
}

// startAt returns window i's start.
func (s *windowSeq) startAt(i int, hint *int) int64 {
	b, row := s.locate(i, hint)
	return b.startOf(b.lastT[row])
}

// appendTo appends every window to dst.
func (s *windowSeq) appendTo(dst []Window) []Window {
	for _, b := range s.blocks {
		for row := range b.lastT {
			var w Window
			b.window(row, &w)
			dst = append(dst, w)
		}
	}
	return dst
}

// rollupQuery is what every file reader of one select shares.
type rollupQuery struct {
	mint, maxt int64
	res        int64 // the tier's resolution, ms
	// loT, hiT: a window starts in [mint, maxt] iff its last sample's
	// time is in [loT, hiT).
	loT, hiT  int64
	matchers  []*labels.Matcher
	nameEq    *parquet.Value // metric name equality matcher, for pruning
	nameEqStr string
	opts      selectOptions
	nWindows  atomic.Int64 // windows kept so far, against opts.maxWindows
}

func newRollupQuery(mint, maxt, res int64, ms []*labels.Matcher, opts selectOptions) *rollupQuery {
	q := &rollupQuery{mint: mint, maxt: maxt, res: res, matchers: ms, opts: opts}
	q.loT = math.MinInt64
	if mint > math.MinInt64+res {
		if q.loT = floorTo(mint, res); q.loT < mint {
			q.loT += res
		}
	}
	q.hiT = satAdd(floorTo(maxt, res), res)
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			v := parquet.ByteArrayValue([]byte(m.Value))
			q.nameEq, q.nameEqStr = &v, m.Value
		}
	}
	return q
}

// localSeries is a series one file reader found.
type localSeries struct {
	key  string // the labels column text
	lbls labels.Labels
	blk  *windowBlock // its kept windows (nil: none yet)
}

// fileReader reads a contiguous range of files for one worker of a select,
// keeping its own series table and decode buffers.
type fileReader struct {
	q         *rollupQuery
	filesLeft int // files left in this reader's range, the current one included
	// byKey maps the `labels` column text to an index into series, or -1
	// when the series does not match.
	byKey map[string]int32
	// byID maps series_id to the same index as byKey, or idAmbiguous when
	// two label sets share the id (a hash collision: rows are then mapped
	// by their labels).
	byID   map[int64]int32
	series []localSeries

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
	batch      *windowBlock
	batchRuns  []batchRun
	sortedRuns []batchRun // flush's buffers
	runCounts  []int32
}

// batchRun is rows [lo, hi) of a reader's batch, all of series si, read
// when filesLeft files were left in the reader's range.
type batchRun struct{ si, lo, hi, filesLeft int32 }

// batchRows is the batch size that triggers a flush: a few MB, to stay in
// cache. A variable so that tests can make it small.
var batchRows = 1 << 17

func newFileReader(q *rollupQuery) *fileReader {
	return &fileReader{q: q, byKey: map[string]int32{}, byID: map[int64]int32{}}
}

func (fr *fileReader) readFile(ctx context.Context, files *fileCache, p PartitionInfo) (err error) {
	of, err := files.acquire(p)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, files.release(of)) }()
	for i, rg := range of.pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var runs []seriesRun
		if of.runs != nil {
			runs = of.runs[i]
		}
		if err := fr.readRowGroup(rg, of.cols, runs); err != nil {
			return fmt.Errorf("partition %s: %w", p.Path, err)
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

// skipRowGroup uses the row group's statistics and bloom filter.
func (q *rollupQuery) skipRowGroup(rg parquet.RowGroup, c rollupColumns) bool {
	chunks := rg.ColumnChunks()
	if fc, ok := chunks[c.start].(*parquet.FileColumnChunk); ok {
		if lo, hi, ok := fc.Bounds(); ok && (hi.Int64() < q.mint || lo.Int64() > q.maxt) {
			return true
		}
	}
	if q.nameEq == nil {
		return false
	}
	if fc, ok := chunks[c.name].(*parquet.FileColumnChunk); ok {
		if lo, hi, ok := fc.Bounds(); ok && (string(lo.ByteArray()) > q.nameEqStr || string(hi.ByteArray()) < q.nameEqStr) {
			return true
		}
		if bf := fc.BloomFilter(); bf != nil {
			if found, err := bf.Check(*q.nameEq); err == nil && !found {
				return true
			}
		}
	}
	return false
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

// readRowGroup reads one row group; runs are its series runs from the
// file's metadata, or nil to read them from the series_id column.
func (fr *fileReader) readRowGroup(rg parquet.RowGroup, c rollupColumns, runs []seriesRun) error {
	q := fr.q
	if q.skipRowGroup(rg, c) {
		return nil
	}
	chunks := rg.ColumnChunks()
	// Which rows belong to matching series, first; a row group without any
	// is not decoded further. The series ids (hashes of the labels) come
	// from the file's series runs, else from the series_id column: when
	// every id in the row group is already known from an earlier row group
	// or file, the labels column is not read at all.
	n := int(rg.NumRows())
	var (
		err            error
		matched, known bool
	)
	if runs != nil {
		fr.rowRuns, matched, known = fr.indexByRuns(runs, fr.rowRuns[:0])
	} else {
		if fr.ids, err = readInt64s(chunks[c.seriesID], fr.ids[:0], &fr.values); err != nil {
			return fmt.Errorf("read series_id: %w", err)
		}
		if len(fr.ids) != n {
			return fmt.Errorf("column series_id has %d rows, want %d", len(fr.ids), n)
		}
		fr.rowRuns, matched, known = fr.indexByID(fr.rowRuns[:0])
	}
	if !known {
		idx, m, err := fr.readSeriesIndex(chunks[c.labels], fr.idx[:0])
		if err != nil {
			return fmt.Errorf("read labels column: %w", err)
		}
		if len(idx) != len(fr.ids) {
			return fmt.Errorf("labels column has %d rows, series_id %d", len(idx), len(fr.ids))
		}
		fr.idx, matched = idx, m
		fr.learnIDs(idx)
		fr.rowRuns = runsOf(idx, fr.rowRuns[:0])
	}
	if !matched || q.opts.labelsOnly {
		return nil
	}
	need := q.opts.need
	thin := q.opts.thinStep > 0
	// Columns are decoded straight into the batch, after its rows; the rows
	// not kept are then squeezed out in place.
	if fr.batch == nil {
		fr.batch = newWindowBlock(q.res, need, batchRows+n)
	}
	b := fr.batch
	base := len(b.lastT)
	// last_ts decides which rows are kept (a window's start is derived
	// from it: WritePartition checks it lies inside the window, so the
	// start column is never decoded); the other columns are decoded only if
	// some row is kept.
	if b.lastT, err = readInt64s(chunks[c.lastT], b.lastT, &fr.values); err != nil {
		return fmt.Errorf("read last_ts: %w", err)
	}
	if len(b.lastT) != base+n {
		return fmt.Errorf("column last_ts has %d rows, want %d", len(b.lastT)-base, n)
	}
	lastT := b.lastT[base:]
	keep := fr.keep[:0]
	batchRuns := fr.batchRuns
	for _, r := range fr.rowRuns {
		if r.si < 0 {
			continue
		}
		from := len(keep)
		keep = q.keepRows(keep, lastT, int(r.lo), int(r.hi), thin)
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
	for _, x := range []struct {
		name string
		col  int
		dst  *[]int64
	}{{"first_ts", c.firstT, &b.firstT}, {"count", c.count, &b.count}} {
		if *x.dst == nil {
			continue
		}
		if *x.dst, err = readInt64s(chunks[x.col], *x.dst, &fr.values); err != nil {
			return fmt.Errorf("read %s: %w", x.name, err)
		}
		if len(*x.dst) != base+n {
			return fmt.Errorf("column %s has %d rows, want %d", x.name, len(*x.dst)-base, n)
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
		if *x.dst, *x.null, err = readNullableDoubles(chunks[x.col], *x.dst, *x.null, &fr.values); err != nil {
			return fmt.Errorf("read %s: %w", x.name, err)
		}
		if len(*x.dst) != base+n || len(*x.null) != base+n {
			return fmt.Errorf("column %s has %d rows, want %d", x.name, len(*x.dst)-base, n)
		}
	}
	if err := deriveWindowColumns(windowColumns{
		Count: tail(b.count, base), Sum: tail(b.sum, base), Min: tail(b.min, base), Max: tail(b.max, base),
		First: tail(b.first, base), Last: tail(b.last, base), Inc: tail(b.increase, base),
		SumNull: tail(nulls.SumNull, base), MinNull: tail(nulls.MinNull, base), MaxNull: tail(nulls.MaxNull, base),
		FirstNull: tail(nulls.FirstNull, base), LastNull: tail(nulls.LastNull, base), IncNull: tail(nulls.IncNull, base),
	}); err != nil {
		return err
	}
	if b.resets != nil {
		if b.resets, err = readInt32s(chunks[c.resets], b.resets, &fr.values); err != nil {
			return fmt.Errorf("read resets: %w", err)
		}
		if len(b.resets) != base+n {
			return fmt.Errorf("column resets has %d rows, want %d", len(b.resets)-base, n)
		}
	}
	anyStale := false
	if need&colStale != 0 && !allFalse(chunks[c.stale]) { // else no series ended in this row group: nothing to decode
		if fr.stale, err = readBools(chunks[c.stale], fr.stale[:0], &fr.values); err != nil {
			return fmt.Errorf("read stale: %w", err)
		}
		if len(fr.stale) != n {
			return fmt.Errorf("column stale has %d rows, want %d", len(fr.stale), n)
		}
		anyStale = slices.Contains(fr.stale, true)
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
	if len(b.lastT) >= batchRows {
		fr.flush()
	}
	return nil
}

// tail returns s[base:], or nil for a nil column.
func tail[T any](s []T, base int) []T {
	if s == nil {
		return nil
	}
	return s[base:]
}

// compact keeps, of the rows from base on, only rows base+keep[k] (ascending).
func (b *windowBlock) compact(base int, keep []int32) {
	b.lastT = compactCol(b.lastT, base, keep)
	b.firstT = compactCol(b.firstT, base, keep)
	b.count = compactCol(b.count, base, keep)
	b.sum = compactCol(b.sum, base, keep)
	b.min = compactCol(b.min, base, keep)
	b.max = compactCol(b.max, base, keep)
	b.first = compactCol(b.first, base, keep)
	b.last = compactCol(b.last, base, keep)
	b.increase = compactCol(b.increase, base, keep)
	b.resets = compactCol(b.resets, base, keep)
}

func compactCol[T any](s []T, base int, keep []int32) []T {
	if s == nil {
		return nil
	}
	d := s[base:]
	for k, i := range keep {
		d[k] = d[i]
	}
	return s[:base+len(keep)]
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
		ls := &fr.series[r.si]
		if ls.blk == nil {
			// Sized for this density over the rest of the reader's range:
			// exact for a series present throughout, grown by append else.
			ls.blk = newWindowBlock(fr.q.res, fr.q.opts.need, int(r.hi-r.lo)*int(max(r.filesLeft, 1)))
		}
		ls.blk.appendRows(fr.batch, int(r.lo), int(r.hi))
	}
	fr.batchRuns = fr.batchRuns[:0]
	b := fr.batch
	b.firstT, b.lastT, b.count = trunc(b.firstT), trunc(b.lastT), trunc(b.count)
	b.sum, b.min, b.max, b.first, b.last, b.increase = trunc(b.sum), trunc(b.min), trunc(b.max), trunc(b.first), trunc(b.last), trunc(b.increase)
	b.resets, b.staleRows = trunc(b.resets), trunc(b.staleRows)
}

// trunc empties s keeping its capacity (nil stays nil).
func trunc[T any](s []T) []T { return s[:0:cap(s)] }

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

// keepRows appends to keep the rows of [lo, hi), one series' rows in time
// order, whose windows the query reads: those with last_ts in [loT, hiT),
// and when thinning only the latest of those before each evaluation step
// (a plain selector sees no other).
func (q *rollupQuery) keepRows(keep []int32, lastT []int64, lo, hi int, thin bool) []int32 {
	for lo < hi && lastT[lo] < q.loT {
		lo++
	}
	for hi > lo && lastT[hi-1] >= q.hiT {
		hi--
	}
	if lo >= hi {
		return keep
	}
	if !thin {
		for i := lo; i < hi; i++ {
			keep = append(keep, int32(i)) //nolint:gosec // a row group's rows fit
		}
		return keep
	}
	step := q.opts.thinStep
	bucketEnd := gridAtOrAfter(lastT[lo], q.opts.thinOrigin, step)
	for i := lo + 1; i < hi; i++ {
		t := lastT[i]
		if t <= bucketEnd {
			continue // a later window before the same step
		}
		keep = append(keep, int32(i-1)) //nolint:gosec // as above
		if t-bucketEnd <= step {
			bucketEnd += step // the next step: no division
		} else {
			bucketEnd = gridAtOrAfter(t, q.opts.thinOrigin, step)
		}
	}
	return append(keep, int32(hi-1)) //nolint:gosec // as above
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

// readSeriesIndex maps each row of the labels column to a series index (-1
// when it does not match). Rows of one series are adjacent, so the label text
// is compared to the previous row's before any map lookup.
func (fr *fileReader) readSeriesIndex(cc parquet.ColumnChunk, dst []int32) ([]int32, bool, error) {
	pages := cc.Pages()
	defer func() { _ = pages.Close() }()
	matched := false
	var prev []byte
	prevIdx := int32(-1)
	buf := fr.values[:cap(fr.values)]
	if len(buf) < 1024 {
		buf = make([]parquet.Value, 1024)
		fr.values = buf
	}
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return dst, matched, nil
		}
		if err != nil {
			return dst, matched, err
		}
		vr := p.Values()
		for {
			n, err := vr.ReadValues(buf)
			for _, v := range buf[:n] {
				b := v.ByteArray()
				if prev == nil || string(b) != string(prev) {
					si, ok := fr.byKey[string(b)]
					if !ok {
						var aerr error
						if si, aerr = fr.admit(string(b)); aerr != nil {
							parquet.Release(p)
							return dst, matched, aerr
						}
					}
					prev, prevIdx = append(prev[:0], b...), si
				}
				if prevIdx >= 0 {
					matched = true
				}
				dst = append(dst, prevIdx)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(p)
				return dst, matched, err
			}
		}
		parquet.Release(p)
	}
}

// admit decodes a series' labels the first time they are seen and checks the matchers.
func (fr *fileReader) admit(key string) (int32, error) {
	lbls, err := decodeLabels([]byte(key))
	if err != nil {
		return -1, err
	}
	si := int32(-1)
	if matchesAll(lbls, fr.q.matchers) {
		si = int32(len(fr.series)) //nolint:gosec // bounded by the number of series
		fr.series = append(fr.series, localSeries{key: key, lbls: lbls})
	}
	fr.byKey[key] = si
	return si, nil
}

func matchesAll(lbls labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lbls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// readColumn decodes one column chunk with the typed fast path when the page
// offers it, else value by value.
func readColumn[T any](cc parquet.ColumnChunk, dst []T, vals *[]parquet.Value, fast func(parquet.ValueReader, []T) (int, error, bool), conv func(parquet.Value) T) ([]T, error) {
	pages := cc.Pages()
	defer func() { _ = pages.Close() }()
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
		nv := int(p.NumValues())
		vr := p.Values()
		base := len(dst)
		dst = slices.Grow(dst, nv)[:base+nv]
		got := 0
		for got < nv {
			n, rerr, ok := fast(vr, dst[base+got:])
			if !ok {
				buf := (*vals)[:cap(*vals)]
				if len(buf) == 0 {
					buf = make([]parquet.Value, 1024)
					*vals = buf
				}
				if len(buf) > nv-got {
					buf = buf[:nv-got]
				}
				n, rerr = vr.ReadValues(buf)
				for i, v := range buf[:n] {
					dst[base+got+i] = conv(v)
				}
			}
			got += n
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				parquet.Release(p)
				return dst, rerr
			}
			if n == 0 {
				parquet.Release(p)
				return dst, errors.New("page read made no progress")
			}
		}
		parquet.Release(p)
		dst = dst[:base+got]
	}
}

func readInt64s(cc parquet.ColumnChunk, dst []int64, vals *[]parquet.Value) ([]int64, error) {
	return readColumn(cc, dst, vals, func(vr parquet.ValueReader, b []int64) (int, error, bool) {
		r, ok := vr.(parquet.Int64Reader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadInt64s(b)
		return n, err, true
	}, parquet.Value.Int64)
}

func readInt32s(cc parquet.ColumnChunk, dst []int32, vals *[]parquet.Value) ([]int32, error) {
	return readColumn(cc, dst, vals, func(vr parquet.ValueReader, b []int32) (int, error, bool) {
		r, ok := vr.(parquet.Int32Reader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadInt32s(b)
		return n, err, true
	}, parquet.Value.Int32)
}

func readBools(cc parquet.ColumnChunk, dst []bool, vals *[]parquet.Value) ([]bool, error) {
	return readColumn(cc, dst, vals, func(vr parquet.ValueReader, b []bool) (int, error, bool) {
		r, ok := vr.(parquet.BooleanReader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadBooleans(b)
		return n, err, true
	}, parquet.Value.Boolean)
}
