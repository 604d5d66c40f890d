package downsample

import (
	"container/heap"
	"context"
	"maps"
	"math"
	"slices"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/seriesset"
	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// The diagnosis engine follows the pipeline's mark: it evaluates a minute
// once every window that can hold a sample at or before it is final.

// Mark returns the end (ms, exclusive) of the minute windows computed so
// far, in memory or on disk, and false before the first tick. Safe for
// concurrent use with Tick.
func (p *Pipeline) Mark() (int64, bool) {
	m := p.pubMark.Load()
	return m, m != 0
}

// MarkAdvanced returns a channel signalled after each tick that advanced the
// mark. The signal never blocks the pipeline: a reader that falls behind
// gets one pending signal, and reads Mark for how far to go.
func (p *Pipeline) MarkAdvanced() <-chan struct{} { return p.markCh }

// publishMark makes the mark visible to Mark and signals MarkAdvanced.
func (p *Pipeline) publishMark() {
	if p.pubMark.Swap(p.mark) != p.mark {
		select {
		case p.markCh <- struct{}{}:
		default:
		}
	}
}

// VisitOpenWindows hands sink the minute windows computed (final) but not
// yet flushed to a partition that start in [mint, maxt], of the series
// matching every matcher (not the direct series: DirectWindows): Series
// once for each series with windows, in no particular order, its windows
// ascending, in a buffer reused for the next series. Only windows before
// the published mark are handed over: those are final. The diagnosis
// engine reads the last minutes of every series each minute and copies
// them once, into its snapshot's blocks. It implements
// tiers.OpenWindowSource and is safe for concurrent use with the pipeline
// (sink runs with the spills' read lock held, so it must not call back into
// the pipeline).
//
// The spilled series stream: the blocks in range are merged by series key
// (each block's records are in key order), so a series' windows are handed
// over as soon as its last record is read and what is held at once is one
// series' windows, not every series' (which cost 180 bytes a window
// allocated each minute, as much again as the sink's copy). The series
// computed from raw stream too, one read over the open hours, with the
// tee's labels of them (rawSpans, keptLabels).
func (p *Pipeline) VisitOpenWindows(mint, maxt int64, sink tiers.OpenWindowSink, matchers ...*labels.Matcher) {
	maxt = min(maxt, p.pubMark.Load()-MinuteRes)
	if mint > maxt {
		return
	}
	// want reports whether the matchers select lset and the sink wants
	// it, and the earliest start wanted.
	want := func(lset labels.Labels) (int64, bool) {
		if !seriesset.MatchAll(lset, matchers) {
			return 0, false
		}
		from, ok := sink.Want(lset)
		if !ok || from > maxt {
			return 0, false
		}
		return max(from, mint), true
	}
	p.spillMu.RLock()
	defer p.spillMu.RUnlock()
	oldest := int64(math.MaxInt64)
	for h := range p.spills {
		oldest = min(oldest, h)
	}
	// Which series the spill holds whole; the others are computed from
	// raw below (spillset.go). Taken after the mark was read: every
	// window before it was spilled by the tick that published it.
	set := p.spillSet(max(oldest, timegrid.Floor(mint, HourRes)), matchers...)
	// Not the direct series' blocks: DirectWindows reads those. Decoded
	// to be skipped, they were every baseline's windows of the engine's
	// reach, each minute.
	out := spilledSeries{sink: sink}
	p.visitBlocks(mint, maxt, func(b *spillBlock) bool { return !b.direct }, func(key *spillKey) (int64, bool) {
		if !set.holds(key.lset, key.id) {
			return 0, false
		}
		return want(key.lset)
	}, out.add, out.done)
	// The series the spill does not hold whole, from raw: one read per run
	// of consecutive open hours, for the minutes of [mint, maxt] in it.
	spans := p.rawSpans(mint, maxt, set, want)
	if len(spans) == 1 {
		// Each series is read once: handed over as it is read, as the
		// spilled ones are. Held until the walk's end, every series'
		// windows were 107 MB at 500,000 series read from raw, beside
		// their labels (docs/bench.md).
		var own labels.Labels
		p.walkOpenRaw(set, spans[0], matchers, func(lset, o labels.Labels) (int64, bool) {
			f, ok := want(lset)
			if !ok {
				return 0, false
			}
			own = keptLabels(lset, o)
			return timegrid.Ceil(f, MinuteRes), true
		}, func(_ labels.Labels, ws []tiers.Window) {
			sink.Series(own, ws)
		})
		return
	}
	// A series read from two runs is handed over once, its windows merged.
	type acc struct {
		lset labels.Labels
		from int64 // the sink's earliest start wanted
		ws   []tiers.Window
	}
	var (
		accs   []acc
		byHash map[uint64][]int // accs by label hash, once a second run is read
	)
	for n, sp := range spans {
		if n == 1 {
			byHash = make(map[uint64][]int, len(accs))
			for i := range accs {
				k := accs[i].lset.Hash()
				byHash[k] = append(byHash[k], i)
			}
		}
		cur := -1
		p.walkOpenRaw(set, sp, matchers,
			func(lset, own labels.Labels) (int64, bool) {
				f, ok := want(lset)
				if !ok {
					return 0, false
				}
				cur = -1
				if byHash != nil {
					for _, i := range byHash[lset.Hash()] {
						if labels.Equal(accs[i].lset, lset) {
							cur = i
						}
					}
				}
				if cur < 0 {
					accs = append(accs, acc{lset: keptLabels(lset, own), from: f})
					cur = len(accs) - 1
					if byHash != nil {
						k := lset.Hash()
						byHash[k] = append(byHash[k], cur)
					}
				}
				return timegrid.Ceil(accs[cur].from, MinuteRes), true
			},
			func(_ labels.Labels, ws []tiers.Window) {
				accs[cur].ws = append(accs[cur].ws, ws...) // the runs ascend
			})
	}
	for i := range accs {
		if len(accs[i].ws) > 0 {
			sink.Series(accs[i].lset, accs[i].ws)
		}
		accs[i].ws = nil // the sink's now: a collection while the rest is handed over need not keep it
	}
}

// spilledSeries hands the series visitBlocks reads to sink, each once its
// records are read: the latest window of each minute.
type spilledSeries struct {
	sink tiers.OpenWindowSink
	ws   []orderedWindow
	buf  []tiers.Window
}

func (s *spilledSeries) add(_ *spillKey, c *blockCursor) {
	s.ws = append(s.ws, orderedWindow{w: c.w, seq: c.seq, rec: c.order})
}

func (s *spilledSeries) done(key *spillKey) {
	if len(s.ws) > 0 {
		s.buf = latestPerMinute(s.ws, s.buf[:0])
		s.sink.Series(key.lset, s.buf)
		s.ws = s.ws[:0]
	}
}

// rawSpan is a run of consecutive open hours read from raw at once:
// minutes [from, to).
type rawSpan struct{ from, to int64 }

// rawSpans returns the minutes of [mint, maxt] that VisitOpenWindows reads
// from raw, by open hour, consecutive hours joined: a minute window never
// spans two hours, so one walk over two hours computes the windows two
// walks would, and meets each series once.
func (p *Pipeline) rawSpans(mint, maxt int64, set *spillSet, want func(labels.Labels) (int64, bool)) []rawSpan {
	var spans []rawSpan
	for _, h := range slices.Sorted(maps.Keys(p.spills)) {
		from, to := max(timegrid.Ceil(mint, MinuteRes), h), min(timegrid.Floor(maxt, MinuteRes)+MinuteRes, h+HourRes)
		if from >= to || !set.needRaw(from) || !p.sparseWanted(set, from, want) {
			continue
		}
		if n := len(spans); n > 0 && spans[n-1].to == from {
			spans[n-1].to = to
			continue
		}
		spans = append(spans, rawSpan{from: from, to: to})
	}
	return spans
}

// walkOpenRaw is walkRawBacked over a span, for VisitOpenWindows (its
// errors logged: the reader gets what was read).
func (p *Pipeline) walkOpenRaw(set *spillSet, sp rawSpan, ms []*labels.Matcher, start func(lset, own labels.Labels) (int64, bool), fn func(labels.Labels, []tiers.Window)) {
	if _, err := walkRawBacked(context.Background(), p.src, set, sp.from, sp.to, p.cfg.KindOf, ms, start, fn); err != nil {
		p.logger.Error("read open windows from raw", "from", fmtTime(sp.from), "err", err)
	}
}

// keptLabels returns labels equal to lset that a sink may keep: the tee's
// (own, the raw head's: shared, where a copy of every series' was half the
// engine's snapshot at 500,000 series read from raw), else a copy (lset
// may point into a block's index).
func keptLabels(lset, own labels.Labels) labels.Labels {
	if own.IsEmpty() {
		return lset.Copy()
	}
	return own
}

// visitBlocks merges the spill blocks that blocks keeps (nil: all) with
// windows starting in [mint, maxt], of every open hour, by series key: for
// each series, want is asked
// once (false: its records are skipped), each record of the series starting
// in [from, maxt] goes to add, then done is called. Run with spillMu held
// for reading.
func (p *Pipeline) visitBlocks(mint, maxt int64, blocks func(*spillBlock) bool, want func(*spillKey) (int64, bool), add func(*spillKey, *blockCursor), done func(*spillKey)) {
	var h cursorHeap[*blockCursor]
	for _, sp := range p.spills {
		if sp.start+HourRes <= mint || sp.start > maxt {
			continue
		}
		for i := range sp.blocks {
			blk := &sp.blocks[i]
			if blk.maxStart < mint || blk.minStart > maxt || blocks != nil && !blocks(blk) {
				continue
			}
			// A window's start is in its hour's spill only, so the
			// blocks' indexes in their hour order those of a start.
			c := p.newCursor(sp, i, 8<<10)
			if c.next() {
				h = append(h, c)
			} else if err := c.Err(); err != nil {
				p.logger.Error("read rollup spill", "hour", fmtTime(sp.start), "err", err)
			}
		}
	}
	heap.Init(&h)
	var key spillKey // one for the whole merge: the callbacks take its address
	for len(h) > 0 {
		key = h[0].key
		from, ok := want(&key)
		for len(h) > 0 && h[0].key.id == key.id && h[0].key.name == key.name && labels.Equal(h[0].key.lset, key.lset) {
			c := h[0]
			if ok && c.w.Start >= from && c.w.Start <= maxt {
				add(&key, c)
			}
			if c.next() {
				heap.Fix(&h, 0)
				continue
			}
			if err := c.Err(); err != nil {
				p.logger.Error("read rollup spill", "err", err)
			}
			heap.Pop(&h)
		}
		if ok {
			done(&key)
		}
	}
}

// sparseWanted reports whether a series read from raw from minute from on
// may be wanted: the tee knew no series then (every series is read from
// raw), or one of its sparse series is wanted. A diagnosis engine reading a
// 1 Hz fleet wants none (its own series, the sparse ones, are hidden from
// it), and the raw read would select every series it reads only to skip
// them.
func (p *Pipeline) sparseWanted(set *spillSet, from int64, want func(labels.Labels) (int64, bool)) bool {
	if set == nil || from < set.teeFrom {
		return true
	}
	for i := range set.entries {
		if e := &set.entries[i]; e.sparse {
			if _, ok := want(e.lset); ok {
				return true
			}
		}
	}
	return false
}

// OpenWindowsIn returns copies of what VisitOpenWindows hands over, sorted
// by labels, each series' windows ascending.
func (p *Pipeline) OpenWindowsIn(mint, maxt int64, matchers ...*labels.Matcher) []tiers.SeriesWindows {
	var c windowCopies
	p.VisitOpenWindows(mint, maxt, &c, matchers...)
	slices.SortFunc(c.out, func(a, b tiers.SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
	return c.out
}

// windowCopies is an OpenWindowSink keeping a copy of every series' windows.
type windowCopies struct{ out []tiers.SeriesWindows }

func (c *windowCopies) Want(labels.Labels) (int64, bool) { return math.MinInt64, true }

func (c *windowCopies) Series(lset labels.Labels, ws []tiers.Window) {
	c.out = append(c.out, tiers.SeriesWindows{Labels: lset, Windows: slices.Clone(ws)})
}
