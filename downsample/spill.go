package downsample

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/binio"
	"github.com/strata-dev/strata/tiers"
)

// An open hour's minute windows wait for their partition in a spill: an
// append-only file (or, without Config.SpillDir, a byte slice) of blocks,
// each written at one tick and holding records sorted in partition order.
// The heap then holds one builder per series, not an hour of windows per
// series, and the partition is written by merging the blocks, one series at
// a time (docs/rollups.md, "Memory").
//
// A record is a window of one series, named by its tee slot or, for windows
// read from raw, by its labels (followed by that series' windows). A later
// block's window of a series and minute replaces an earlier one, and so does
// a later record within a block: that is how a window re-emitted with more
// samples, or recomputed from raw, supersedes the first one. A spill is never
// read after a restart: the open hours are recomputed from raw then. The
// format is docs/format/rollup-spill.md.

// spillFile is the storage of one hour's spill.
type spillFile interface {
	io.ReaderAt
	io.WriterAt
	// remove closes and deletes the spill.
	remove() error
}

// memSpill is a spill in memory, for pipelines without Config.SpillDir.
type memSpill struct {
	mu sync.RWMutex
	b  []byte
}

func (m *memSpill) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memSpill) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.b = append(m.b[:off], p...)
	return len(p), nil
}

func (m *memSpill) remove() error {
	m.mu.Lock()
	m.b = nil
	m.mu.Unlock()
	return nil
}

// fileSpill is a spill file in Config.SpillDir. Its pages live in the
// operating system's page cache, not in the process's heap.
type fileSpill struct{ *os.File }

func (f fileSpill) remove() error {
	return errors.Join(f.Close(), os.Remove(f.Name()))
}

const spillSuffix = ".windows"

// cleanSpillDir creates dir and removes spills a previous process left.
func cleanSpillDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create rollup spill directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read rollup spill directory: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), spillSuffix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove leftover rollup spill: %w", err)
			}
		}
	}
	return nil
}

// hourSpill is the spill of the minute partition starting at start. Blocks
// are appended by the tick only; blocks and size are guarded by
// Pipeline.spillMu.
type hourSpill struct {
	start  int64
	f      spillFile
	size   int64
	blocks []spillBlock
	// reread is set when windows of the hour were lost (a spill write
	// failed): the partition is then recomputed from raw.
	reread bool
}

type spillBlock struct {
	off, len           int64
	records            int
	inline             bool // records name series by labels, not by slot
	direct             bool // records of direct series only (direct.go)
	minStart, maxStart int64
}

// spillHeader starts every spill: the format and its version
// (docs/format/rollup-spill.md). Version 1 files had no header; like any
// spill a previous process left, files of every version are removed on
// start.
const spillHeader = "strata rollup spill v3\n"

// newSpill opens an empty spill for hour h.
func (p *Pipeline) newSpill(h int64, suffix string) (*hourSpill, error) {
	var f spillFile = &memSpill{}
	if p.cfg.SpillDir != "" {
		of, err := os.Create(filepath.Join(p.cfg.SpillDir, strconv.FormatInt(h, 10)+suffix+spillSuffix))
		if err != nil {
			return nil, fmt.Errorf("create rollup spill: %w", err)
		}
		f = fileSpill{of}
	}
	if _, err := f.WriteAt([]byte(spillHeader), 0); err != nil {
		return nil, errors.Join(fmt.Errorf("write rollup spill: %w", err), f.remove())
	}
	return &hourSpill{start: h, f: f, size: int64(len(spillHeader))}, nil
}

// spillEntry is a minute window of the tee's series in slot, 72 bytes
// instead of a tiers.Window's 88 and the slot's 8: the tee's pending windows
// hold one for every series at each minute boundary, in a buffer the tick
// reuses. A minute window's sample count, resets and sample offsets are
// below 60,000 (a series has one sample per millisecond at most), so they
// take 16 bits each.
type spillEntry struct {
	start                                int64
	sum, min, max, first, last, increase float64
	slot                                 uint32
	count, resets                        uint16
	firstOff, lastOff                    uint16
	stale                                bool
}

// newSpillEntry returns the entry of minute window w of slot.
func newSpillEntry(slot uint32, w tiers.Window) spillEntry {
	return spillEntry{
		start: w.Start, sum: w.Sum, min: w.Min, max: w.Max, first: w.First, last: w.Last, increase: w.Increase,
		slot:  slot,
		count: uint16(w.Count), resets: uint16(w.Resets), //nolint:gosec // below 60,000 in a minute window
		firstOff: uint16(w.FirstT - w.Start), lastOff: uint16(w.LastT - w.Start), //nolint:gosec // in [0, 60,000)
		stale: w.Stale,
	}
}

// window returns the entry's window.
func (e *spillEntry) window() tiers.Window {
	return tiers.Window{
		Start: e.start, FirstT: e.start + int64(e.firstOff), LastT: e.start + int64(e.lastOff),
		Count: uint32(e.count), Sum: e.sum, Min: e.min, Max: e.max, First: e.first, Last: e.last,
		Increase: e.increase, Resets: uint32(e.resets), Stale: e.stale,
	}
}

// rawSeries is a series' windows read from raw.
type rawSeries struct {
	lset labels.Labels
	id   int64
	ws   []tiers.Window
}

// Window encoding (docs/format/rollup-spill.md, version 3). A window is
// encoded against the block's previous one (windowCodec): one sort of
// series sent in one request shares its minute, offsets and count, and those
// are then left out. Two flag bytes, then the minute, FirstT-Start,
// LastT-FirstT, Count and Resets where the flags do not give them, then Last
// and whichever of First, Min, Max, Sum and Increase the flags do not give
// back exactly (bit for bit), each as a packed float (appendFloat): Last
// against 0 or the previous window's Last, whichever is shorter; First, Min
// and Max against Last; Sum against sumRef; Increase against 0 or Last -
// First, whichever is shorter, unless it is +0, which a flag says.
const (
	flagStale       = 1 << iota
	flagFirstIsLast // First == Last
	flagMinIsFirst
	flagMinIsLast
	flagMaxIsFirst
	flagMaxIsLast
	flagIncDerived // Increase == Last - First
	flagNoResets   // Resets == 0
)

// The second flag byte: fields equal to the previous window's in the block,
// and two that the first byte has no room for.
const (
	flagSameMinute   = 1 << iota
	flagSameFirstOff // FirstT-Start
	flagSameSpan     // LastT-FirstT
	flagSameCount
	flagIncZero  // Increase == +0 (a gauge's), unless flagIncDerived
	flagLastPrev // Last is encoded against the previous window's Last, not 0
	flagIncDiff  // Increase is encoded against Last - First, not 0
	flagsG       = flagSameMinute | flagSameFirstOff | flagSameSpan | flagSameCount | flagIncZero | flagLastPrev | flagIncDiff
)

func sameBits(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// windowCodec is the state of one block's window encoding or decoding: the
// previous window's fields that the next one may repeat or be encoded
// against. Its zero value (with h set) starts a block.
type windowCodec struct {
	h                     int64 // the partition's start
	minute                byte
	firstOff, span, count uint64
	last                  float64
	f, g                  byte // the previous window's flag bytes
}

// flagsRepeat, in place of the first flag byte, says that both flag bytes
// are the previous window's. It is no valid first flag byte: Min equals
// First or Last, not both (nor does Max: 0x30).
const flagsRepeat = flagMinIsFirst | flagMinIsLast

// floatLen is how many bytes appendFloat writes for v against ref.
func floatLen(v, ref float64) int {
	x := math.Float64bits(v) ^ math.Float64bits(ref)
	if x == 0 {
		return 1
	}
	return 1 + 8 - bits.LeadingZeros64(x)/8 - bits.TrailingZeros64(x)/8
}

// appendFloat appends v as the bytes of v XOR ref that are not zero at
// either end: a header byte (leading zero bytes << 4 | bytes kept), then the
// bytes kept, least significant first. Integer-valued samples (counters,
// most gauges) end in zero bytes, and First, Min and Max share their sign,
// exponent and top mantissa bits with Last.
func appendFloat(b []byte, v, ref float64) []byte {
	x := math.Float64bits(v) ^ math.Float64bits(ref)
	if x == 0 {
		return append(b, 0)
	}
	lead := bits.LeadingZeros64(x) / 8
	trail := bits.TrailingZeros64(x) / 8
	n := 8 - lead - trail
	b = append(b, byte(lead<<4|n))
	x >>= 8 * trail
	for range n {
		b = append(b, byte(x))
		x >>= 8
	}
	return b
}

func (c *windowCodec) appendWindow(b []byte, w tiers.Window) []byte {
	var f, g byte
	if w.Stale {
		f |= flagStale
	}
	if sameBits(w.First, w.Last) {
		f |= flagFirstIsLast
	}
	switch {
	case sameBits(w.Min, w.First):
		f |= flagMinIsFirst
	case sameBits(w.Min, w.Last):
		f |= flagMinIsLast
	}
	switch {
	case sameBits(w.Max, w.First):
		f |= flagMaxIsFirst
	case sameBits(w.Max, w.Last):
		f |= flagMaxIsLast
	}
	if sameBits(w.Increase, w.Last-w.First) {
		f |= flagIncDerived
	}
	if w.Resets == 0 {
		f |= flagNoResets
	}
	// An increase that is neither Last - First nor 0 (a float counter's sum
	// of deltas, rounded otherwise) shares its top bytes with Last - First
	// unless the window has a reset.
	incRef := 0.0
	switch {
	case f&flagIncDerived != 0:
	case math.Float64bits(w.Increase) == 0:
		g |= flagIncZero
	case floatLen(w.Increase, w.Last-w.First) < floatLen(w.Increase, 0):
		g |= flagIncDiff
		incRef = w.Last - w.First
	}
	// Last against the previous window's (the same metric of another
	// series, as blocks are sorted by name) when that is shorter: such
	// values share their sign, exponent and top bits more often than not.
	lastRef := 0.0
	if floatLen(w.Last, c.last) < floatLen(w.Last, 0) {
		g |= flagLastPrev
		lastRef = c.last
	}
	c.last = w.Last
	minute := byte((w.Start - c.h) / MinuteRes)
	firstOff := uint64(w.FirstT - w.Start) //nolint:gosec // FirstT >= Start
	span := uint64(w.LastT - w.FirstT)     //nolint:gosec // LastT >= FirstT
	count := uint64(w.Count)
	if minute == c.minute {
		g |= flagSameMinute
	}
	if firstOff == c.firstOff {
		g |= flagSameFirstOff
	}
	if span == c.span {
		g |= flagSameSpan
	}
	if count == c.count {
		g |= flagSameCount
	}
	c.minute, c.firstOff, c.span, c.count = minute, firstOff, span, count
	if f == c.f && g == c.g {
		b = append(b, flagsRepeat)
	} else {
		b = append(b, f, g)
	}
	c.f, c.g = f, g
	if g&flagSameMinute == 0 {
		b = append(b, minute)
	}
	if g&flagSameFirstOff == 0 {
		b = binary.AppendUvarint(b, firstOff)
	}
	if g&flagSameSpan == 0 {
		b = binary.AppendUvarint(b, span)
	}
	if g&flagSameCount == 0 {
		b = binary.AppendUvarint(b, count)
	}
	if f&flagNoResets == 0 {
		b = binary.AppendUvarint(b, uint64(w.Resets))
	}
	b = appendFloat(b, w.Last, lastRef)
	if f&flagFirstIsLast == 0 {
		b = appendFloat(b, w.First, w.Last)
	}
	if f&(flagMinIsFirst|flagMinIsLast) == 0 {
		b = appendFloat(b, w.Min, w.Last)
	}
	if f&(flagMaxIsFirst|flagMaxIsLast) == 0 {
		b = appendFloat(b, w.Max, w.Last)
	}
	b = appendFloat(b, w.Sum, sumRef(w))
	if f&flagIncDerived == 0 && g&flagIncZero == 0 {
		b = appendFloat(b, w.Increase, incRef)
	}
	return b
}

var errCorruptSpill = errors.New("corrupt rollup spill")

// spillReader decodes a block.
type spillReader struct {
	binio.Reader
	c windowCodec
}

// newSpillReader reads r, its errors wrapping errCorruptSpill.
func newSpillReader(r *bufio.Reader, c windowCodec) spillReader {
	return spillReader{Reader: binio.Reader{R: r, Corrupt: errCorruptSpill}, c: c}
}

// float reads a float appendFloat wrote against ref.
func (d *spillReader) float(ref float64) float64 {
	hdr := d.Byte()
	if d.Err != nil {
		return 0
	}
	lead, n := int(hdr>>4), int(hdr&0xf)
	if lead+n > 8 {
		d.Fail(fmt.Errorf("float header %#x", hdr))
		return 0
	}
	var x uint64
	for i := range n {
		x |= uint64(d.Byte()) << (8 * i)
	}
	x <<= 8 * (8 - lead - n)
	return math.Float64frombits(x ^ math.Float64bits(ref))
}

func (d *spillReader) window() tiers.Window {
	var w tiers.Window
	c := &d.c
	f := d.Byte()
	var g byte
	switch {
	case f == flagsRepeat:
		f, g = c.f, c.g
	case f&flagsRepeat == flagsRepeat || f&(flagMaxIsFirst|flagMaxIsLast) == flagMaxIsFirst|flagMaxIsLast:
		d.Fail(fmt.Errorf("flags %#x", f))
		return w
	default:
		g = d.Byte()
	}
	if g&^flagsG != 0 {
		d.Fail(fmt.Errorf("flags %#x", g))
		return w
	}
	c.f, c.g = f, g
	if g&flagSameMinute == 0 {
		c.minute = d.Byte()
	}
	if g&flagSameFirstOff == 0 {
		c.firstOff = d.Uvarint()
	}
	if g&flagSameSpan == 0 {
		c.span = d.Uvarint()
	}
	if g&flagSameCount == 0 {
		c.count = d.Uvarint()
	}
	w.Start = c.h + int64(c.minute)*MinuteRes
	w.FirstT = w.Start + int64(c.firstOff) //nolint:gosec // written from an int64 difference
	w.LastT = w.FirstT + int64(c.span)     //nolint:gosec // written from an int64 difference
	w.Count = uint32(c.count)              //nolint:gosec // written from a uint32
	if f&flagNoResets == 0 {
		w.Resets = uint32(d.Uvarint()) //nolint:gosec // written from a uint32
	}
	w.Stale = f&flagStale != 0
	lastRef := 0.0
	if g&flagLastPrev != 0 {
		lastRef = c.last
	}
	w.Last = d.float(lastRef)
	c.last = w.Last
	w.First = w.Last
	if f&flagFirstIsLast == 0 {
		w.First = d.float(w.Last)
	}
	switch {
	case f&flagMinIsFirst != 0:
		w.Min = w.First
	case f&flagMinIsLast != 0:
		w.Min = w.Last
	default:
		w.Min = d.float(w.Last)
	}
	switch {
	case f&flagMaxIsFirst != 0:
		w.Max = w.First
	case f&flagMaxIsLast != 0:
		w.Max = w.Last
	default:
		w.Max = d.float(w.Last)
	}
	w.Sum = d.float(sumRef(w))
	switch {
	case f&flagIncDerived != 0:
		w.Increase = w.Last - w.First
	case g&flagIncZero != 0:
		w.Increase = 0
	case g&flagIncDiff != 0:
		w.Increase = d.float(w.Last - w.First)
	default:
		w.Increase = d.float(0)
	}
	return w
}

// spillKey names a series in partition order.
type spillKey struct {
	lset labels.Labels
	name string
	id   int64
	// direct: a direct series' record (direct.go); not part of the order.
	direct bool
}

func (k *spillKey) compare(o *spillKey) int {
	if c := strings.Compare(k.name, o.name); c != 0 {
		return c
	}
	if c := cmp.Compare(k.id, o.id); c != 0 {
		return c
	}
	return labels.Compare(k.lset, o.lset)
}

// blockCursor reads one block's records in order.
type blockCursor struct {
	d       spillReader
	p       *Pipeline
	blk     spillBlock
	seq     int // the block's index in its hour: later blocks win
	rec     int // records read
	sb      labels.ScratchBuilder
	inlineN uint64 // windows left of the current inline series

	key   spillKey
	slot  uint32 // of the current record, when !blk.inline
	w     tiers.Window
	order int // the record's position in the hour: (seq, rec)

	// keep, when set, tells which series' records next returns; the
	// others are skipped (a reader of the open hours computes them from
	// raw: spillset.go).
	keep func(*spillKey) bool
}

func (p *Pipeline) newCursor(sp *hourSpill, seq int, bufSize int) *blockCursor {
	blk := sp.blocks[seq]
	return &blockCursor{
		d:   newSpillReader(bufio.NewReaderSize(io.NewSectionReader(sp.f, blk.off, blk.len), bufSize), windowCodec{h: sp.start}),
		p:   p,
		blk: blk,
		seq: seq,
	}
}

// next reads the next record (of a series keep keeps); false at the end of
// the block or on error (Err).
func (c *blockCursor) next() bool {
	for c.nextRecord() {
		if c.keep == nil || c.keep(&c.key) {
			return true
		}
	}
	return false
}

// nextRecord reads the next record.
func (c *blockCursor) nextRecord() bool {
	if c.d.Err != nil {
		return false
	}
	if c.blk.inline {
		for c.inlineN == 0 {
			if c.rec == c.blk.records {
				return false
			}
			c.rec++
			c.key.lset = c.d.Labels(&c.sb)
			c.key.name = c.key.lset.Get(model.MetricNameLabel)
			c.key.id = tiers.SeriesID(c.key.lset)
			c.inlineN = c.d.Uvarint()
			if c.d.Err != nil {
				return false
			}
		}
		c.inlineN--
	} else {
		if c.rec == c.blk.records {
			return false
		}
		c.rec++
		s := c.d.Uvarint()
		if c.d.Err != nil {
			return false
		}
		pages := c.p.tap.series.pages.Load()
		if pages == nil || s >= uint64(len(*pages))*slotPageSize {
			c.d.Fail(fmt.Errorf("slot %d", s))
			return false
		}
		c.slot = uint32(s)
		st := &(*pages)[c.slot>>slotPageBits][c.slot&(slotPageSize-1)]
		c.key = spillKey{lset: st.lset, name: st.lset.Get(model.MetricNameLabel), id: st.id, direct: st.direct}
	}
	c.w = c.d.window()
	c.order++
	return c.d.Err == nil
}

func (c *blockCursor) Err() error { return c.d.Err }

// keyedCursor is a cursor over records in partition order: its current
// record's series, and the cursor's place among those merged (a later one
// wins, or comes later).
type keyedCursor interface {
	current() (key *spillKey, seq int)
}

func (c *blockCursor) current() (*spillKey, int) { return &c.key, c.seq }

// cursorHeap orders cursors by their current record's key, then place.
type cursorHeap[C keyedCursor] []C

func (h cursorHeap[C]) Len() int { return len(h) }
func (h cursorHeap[C]) Less(i, j int) bool {
	ki, si := h[i].current()
	kj, sj := h[j].current()
	if c := ki.compare(kj); c != 0 {
		return c < 0
	}
	return si < sj
}
func (h cursorHeap[C]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap[C]) Push(x any)   { *h = append(*h, x.(C)) }
func (h *cursorHeap[C]) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// orderedWindow is a window and where it was read, for last-wins.
type orderedWindow struct {
	w        tiers.Window
	seq, rec int
}

// latestPerMinute sorts ws by start and keeps, per start, the window read
// last. It returns the windows.
func latestPerMinute(ws []orderedWindow, out []tiers.Window) []tiers.Window {
	slices.SortFunc(ws, func(a, b orderedWindow) int {
		if c := cmp.Compare(a.w.Start, b.w.Start); c != 0 {
			return c
		}
		if c := cmp.Compare(a.seq, b.seq); c != 0 {
			return c
		}
		return cmp.Compare(a.rec, b.rec)
	})
	for i, x := range ws {
		if i+1 < len(ws) && ws[i+1].w.Start == x.w.Start {
			continue
		}
		out = append(out, x.w)
	}
	return out
}

// spillSeries merges sp's blocks into its series, in partition order, each
// with its latest window per minute. The yielded windows are reused for the
// next series. Read it with spillMu held for reading, or from the tick.
func (p *Pipeline) spillSeries(sp *hourSpill) iter.Seq2[tiers.SeriesWindows, error] {
	return p.mergeSpills(sp, nil, nil)
}

// mergeSpills is spillSeries over the records of sp that keep keeps (nil:
// all of them) and every record of extra (nil: none), whose blocks count
// as later than sp's.
func (p *Pipeline) mergeSpills(sp *hourSpill, keep func(*spillKey) bool, extra *hourSpill) iter.Seq2[tiers.SeriesWindows, error] {
	return func(yield func(tiers.SeriesWindows, error) bool) {
		h := make(cursorHeap[*blockCursor], 0, len(sp.blocks))
		add := func(s *hourSpill, keep func(*spillKey) bool, base int) bool {
			for i := range s.blocks {
				c := p.newCursor(s, i, 8<<10)
				c.seq, c.keep = base+i, keep
				if c.next() {
					h = append(h, c)
				} else if err := c.Err(); err != nil {
					yield(tiers.SeriesWindows{}, err)
					return false
				}
			}
			return true
		}
		if !add(sp, keep, 0) {
			return
		}
		if extra != nil && !add(extra, nil, len(sp.blocks)) {
			return
		}
		heap.Init(&h)
		var (
			ws  []orderedWindow
			out []tiers.Window
		)
		for len(h) > 0 {
			key := h[0].key
			ws = ws[:0]
			for len(h) > 0 && labels.Equal(h[0].key.lset, key.lset) {
				c := h[0]
				ws = append(ws, orderedWindow{c.w, c.seq, c.order})
				if c.next() {
					heap.Fix(&h, 0)
					continue
				}
				if err := c.Err(); err != nil {
					yield(tiers.SeriesWindows{}, err)
					return
				}
				heap.Pop(&h)
			}
			out = latestPerMinute(ws, out[:0])
			if !yield(tiers.SeriesWindows{Labels: key.lset, Windows: out}, nil) {
				return
			}
		}
	}
}

// writeBlock appends a block of encoded records to sp; the block becomes
// visible to readers once written.
func (p *Pipeline) writeBlock(sp *hourSpill, data []byte, blk spillBlock) error {
	blk.off, blk.len = sp.size, int64(len(data))
	if _, err := sp.f.WriteAt(data, blk.off); err != nil {
		return fmt.Errorf("write rollup spill: %w", err)
	}
	p.spillMu.Lock()
	sp.blocks = append(sp.blocks, blk)
	sp.size += blk.len
	p.spillMu.Unlock()
	return nil
}

// spillFor returns the spill of hour h, creating it. Called by the tick.
func (p *Pipeline) spillFor(h int64) (*hourSpill, error) {
	p.spillMu.RLock()
	sp := p.spills[h]
	p.spillMu.RUnlock()
	if sp != nil {
		return sp, nil
	}
	sp, err := p.newSpill(h, "")
	if err != nil {
		return nil, err
	}
	p.spillMu.Lock()
	p.spills[h] = sp
	p.spillMu.Unlock()
	return sp, nil
}

// dropSpill removes hour h's spill. Called by the tick.
func (p *Pipeline) dropSpill(h int64) error {
	p.spillMu.Lock()
	sp := p.spills[h]
	delete(p.spills, h)
	p.spillMu.Unlock()
	if sp == nil {
		return nil
	}
	if err := sp.f.remove(); err != nil {
		return fmt.Errorf("remove rollup spill: %w", err)
	}
	return nil
}

// sumRef is what Sum is encoded against: the window's count times the mean
// of its first and last value, which shares Sum's top bytes for a counter
// and for most gauges.
func sumRef(w tiers.Window) float64 { return (w.First + w.Last) / 2 * float64(w.Count) }
