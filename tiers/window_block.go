package tiers

import (
	"slices"
	"sort"

	"github.com/strata-dev/strata/internal/timegrid"
)

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

// windowBlock is windows in columns: only the columns a query needs (the
// others are nil, and a Window read from the block holds zero in them). A
// window's start is its last sample's time rounded down to the resolution.
type windowBlock struct {
	res int64
	// cols is the columns the block holds (last_ts and the stale rows
	// always): a reader that needs others must not read it
	// (windowSeq.holds).
	cols                                 colSet
	firstT, lastT, count                 []int64
	sum, min, max, first, last, increase []float64
	resets                               []int32
	// staleRows are the rows whose Stale is true, ascending (series end
	// rarely: a column of flags would cost a byte per window).
	staleRows []int32
}

func newWindowBlock(res int64, need colSet, capacity int) *windowBlock {
	b := &windowBlock{res: res, cols: need | colLastT | colStale}
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

// sharedBlocks is blocks that many series' windows go into one after the
// other, one block being filled per set of columns: the minute view's open
// windows (openCollector) and the series a file reader first meets in its
// last file (fileReader.keepRun). A block of its own a series, whose ten
// column headers (288 bytes) outweighed the few windows each held, was 40 %
// of the diagnosis engine's snapshot. Blocks grow from sharedBlockMin rows
// to sharedBlockMax, each new one twice the last: a small snapshot
// allocates little, a large one blocks of 600 KB, the last one partly
// filled.
type sharedBlocks []*windowBlock

const (
	sharedBlockMin = 256
	sharedBlockMax = 8192
)

// room returns the block being filled with the columns need (with last_ts
// and the stale rows, as newWindowBlock makes them) that has room for rows
// more rows, starting a new one when the last is full.
func (s *sharedBlocks) room(res int64, need colSet, rows int) *windowBlock {
	cols := need | colLastT | colStale
	k := slices.IndexFunc(*s, func(b *windowBlock) bool { return b.cols == cols })
	if k >= 0 && len((*s)[k].lastT)+rows <= cap((*s)[k].lastT) {
		return (*s)[k]
	}
	n := sharedBlockMin
	if k >= 0 {
		n = min(2*cap((*s)[k].lastT), sharedBlockMax)
	} else {
		k = len(*s)
		*s = append(*s, nil)
	}
	(*s)[k] = newWindowBlock(res, need, max(n, rows))
	return (*s)[k]
}

func alloc[T any](s *[]T, ok bool, capacity int) {
	if ok {
		*s = make([]T, 0, capacity)
	}
}

// reserve makes room for n more rows in every column b holds. A column it
// grows at least doubles, so that a batch filled row group by row group
// copies each row a bounded number of times.
func (b *windowBlock) reserve(n int) {
	grow(&b.firstT, n)
	grow(&b.lastT, n)
	grow(&b.count, n)
	grow(&b.sum, n)
	grow(&b.min, n)
	grow(&b.max, n)
	grow(&b.first, n)
	grow(&b.last, n)
	grow(&b.increase, n)
	grow(&b.resets, n)
}

func grow[T any](s *[]T, n int) {
	if *s != nil && cap(*s)-len(*s) < n {
		*s = slices.Grow(*s, max(n, cap(*s)))
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
func (b *windowBlock) startOf(t int64) int64 { return timegrid.Floor(t, b.res) }

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

// tail returns s[base:], or nil for a nil column.
func tail[T any](s []T, base int) []T {
	if s == nil {
		return nil
	}
	return s[base:]
}

// trunc empties s keeping its capacity (nil stays nil).
func trunc[T any](s []T) []T { return s[:0:cap(s)] }

// windowSeq is one series' windows in ascending start order: rows of one
// or more blocks (one per reader), read through an index. Its methods take
// a block hint (the caller's cursor) so that sequential reads find their
// block in O(1).
//
// A block may hold many series' windows one after the other: the minute
// view's open windows share one block instead of a block per series, whose
// column headers alone (300 bytes) outweighed the one or few windows each
// held. Most sequences lie in one block (a series read only from the open
// windows, or from one reader): they are held inline, 24 bytes, where the
// block, end and offset slices of the general form took 96.
type windowSeq struct {
	// blk's rows [off, off+n) are the windows when more is nil (blk nil:
	// none).
	blk    *windowBlock
	off, n int32
	more   *seqBlocks
}

// seqBlocks is a windowSeq over several blocks: one segment a block, in
// one slice (56 bytes in two allocations for two blocks, where three
// slices of block, end and offset took 128 in four; a series read both
// from a partition and from the open windows has two blocks: 39.5 MB of
// the diagnosis engine's snapshot at 500,000 series in the minutes after
// an hour's flush, docs/bench.md, stop 38).
type seqBlocks struct{ segs []seqSeg }

// seqSeg is rows [off, off+n) of blk, n the difference of its end and the
// previous segment's.
type seqSeg struct {
	blk *windowBlock
	off int32 // the row of blk where the windows start
	end int32 // windows in this segment and those before it
}

// seqOf is the sequence of every row of b.
func seqOf(b *windowBlock) windowSeq {
	return windowSeq{blk: b, n: int32(len(b.lastT))} //nolint:gosec // block rows fit
}

// Len is the number of windows.
func (s *windowSeq) Len() int {
	if s.more == nil {
		return int(s.n)
	}
	return int(s.more.segs[len(s.more.segs)-1].end)
}

// blocks is the number of blocks the windows lie in.
func (s *windowSeq) blocks() int {
	switch {
	case s.more != nil:
		return len(s.more.segs)
	case s.blk != nil:
		return 1
	}
	return 0
}

// block returns block k and the rows [off, off+n) of it the windows are.
func (s *windowSeq) block(k int) (b *windowBlock, off, n int) {
	if s.more == nil {
		return s.blk, int(s.off), int(s.n)
	}
	segs := s.more.segs
	if k > 0 {
		n = -int(segs[k-1].end)
	}
	return segs[k].blk, int(segs[k].off), n + int(segs[k].end)
}

// add appends rows [off, off+n) of b (n > 0) after the windows. The
// general form's segments are s's own: add extends them in place.
func (s *windowSeq) add(b *windowBlock, off, n int) {
	switch {
	case s.more != nil:
		m := s.more
		m.segs = append(m.segs, seqSeg{blk: b, off: int32(off), end: m.segs[len(m.segs)-1].end + int32(n)}) //nolint:gosec // block rows fit
	case s.blk == nil:
		*s = windowSeq{blk: b, off: int32(off), n: int32(n)} //nolint:gosec // block rows fit
	default:
		*s = windowSeq{more: &seqBlocks{segs: []seqSeg{
			{blk: s.blk, off: s.off, end: s.n},
			{blk: b, off: int32(off), end: s.n + int32(n)}, //nolint:gosec // block rows fit
		}}}
	}
}

// locate returns the block holding window i and its row, starting from the
// block *hint and updating it.
func (s *windowSeq) locate(i int, hint *int) (*windowBlock, int) {
	if s.more == nil {
		return s.blk, int(s.off) + i
	}
	segs := s.more.segs
	end := func(k int) int { return int(segs[k].end) }
	k := *hint
	if k >= len(segs) || i >= end(k) || (k > 0 && i < end(k-1)) {
		if k+1 < len(segs) && i >= end(k) && i < end(k+1) {
			k++
		} else {
			k = sort.Search(len(segs), func(j int) bool { return end(j) > i })
		}
		*hint = k
	}
	base := 0
	if k > 0 {
		base = end(k - 1)
	}
	return segs[k].blk, i - base + int(segs[k].off)
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

// holds reports whether every block of s holds every column of need.
func (s *windowSeq) holds(need colSet) bool { return s.cols()&need == need }

// cols is the columns every block of s holds.
func (s *windowSeq) cols() colSet {
	c := colAll
	for k := range s.blocks() {
		b, _, _ := s.block(k)
		c &= b.cols
	}
	return c
}

// appendTo appends every window to dst.
func (s *windowSeq) appendTo(dst []Window) []Window {
	for k := range s.blocks() {
		b, off, n := s.block(k)
		for row := off; row < off+n; row++ {
			var w Window
			b.window(row, &w)
			dst = append(dst, w)
		}
	}
	return dst
}
