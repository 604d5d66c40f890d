package downsample

import (
	"context"
	"maps"
	"math"
	"slices"

	"github.com/prometheus/prometheus/model/labels"

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
// matching every matcher: Reserve once, then Series for each series in label
// order with its windows ascending, in a buffer reused for the next series.
// Only windows before the published mark are handed over: those are final.
// The diagnosis engine reads the last minutes of every series each minute
// and copies them once, into its snapshot's block. It implements
// tiers.OpenWindowSource and is safe for concurrent use with the pipeline
// (sink runs with the spills' read lock held, so it must not call back into
// the pipeline).
func (p *Pipeline) VisitOpenWindows(mint, maxt int64, sink tiers.OpenWindowSink, matchers ...*labels.Matcher) {
	maxt = min(maxt, p.pubMark.Load()-MinuteRes)
	if mint > maxt {
		return
	}
	type acc struct {
		lset labels.Labels
		from int64 // the sink's earliest start wanted
		ws   []orderedWindow
	}
	var (
		accs []acc
		// bySlot is the index in accs of a spilled series (-1: not
		// wanted).
		bySlot = map[uint32]int{}
		// want appends an accumulator for lset if the matchers select it
		// and the sink wants it, and returns its index (-1: none).
		want = func(lset labels.Labels) int {
			for _, m := range matchers {
				if !m.Matches(lset.Get(m.Name)) {
					return -1
				}
			}
			from, ok := sink.Want(lset)
			if !ok || from > maxt {
				return -1
			}
			from = max(from, mint)
			// Sized for a window a minute, which a live series has, so
			// that appends do not regrow it: growing by doubling
			// allocated 3.4 times the windows (16 for 9 of them, 31
			// in all); at most 16 up front, for long ranges of sparse
			// series.
			n := int64(16)
			if from > maxt-n*MinuteRes {
				n = (maxt-from)/MinuteRes + 1
			}
			accs = append(accs, acc{lset: lset, from: from, ws: make([]orderedWindow, 0, n)})
			return len(accs) - 1
		}
	)
	p.spillMu.RLock()
	defer p.spillMu.RUnlock()
	oldest := int64(math.MaxInt64)
	for h := range p.spills {
		oldest = min(oldest, h)
	}
	// Which series the spill holds whole; the others are computed from
	// raw below (spillset.go). Taken after the mark was read: every
	// window before it was spilled by the tick that published it.
	set := p.spillSet(max(oldest, timegrid.Floor(mint, HourRes)))
	for _, sp := range p.spills {
		if sp.start+HourRes <= mint || sp.start > maxt {
			continue
		}
		for i, blk := range sp.blocks {
			if blk.maxStart < mint || blk.minStart > maxt {
				continue
			}
			c := p.newCursor(sp, i, 32<<10)
			lastInline := -1
			var lastLabels labels.Labels
			for c.next() {
				if c.w.Start < mint || c.w.Start > maxt {
					continue
				}
				var k int
				if blk.inline {
					// Consecutive windows of one inline series share its labels.
					if lastLabels.IsEmpty() || !labels.Equal(lastLabels, c.key.lset) {
						lastLabels, lastInline = c.key.lset, -1
						if set.holds(c.key.lset, c.key.id) {
							lastInline = want(c.key.lset)
						}
					}
					k = lastInline
				} else {
					var ok bool
					if k, ok = bySlot[c.slot]; !ok {
						k = -1
						if set.holds(c.key.lset, c.key.id) {
							k = want(c.key.lset)
						}
						bySlot[c.slot] = k
					}
				}
				if k >= 0 && c.w.Start >= accs[k].from {
					accs[k].ws = append(accs[k].ws, orderedWindow{w: c.w, seq: i, rec: c.order})
				}
			}
			if err := c.Err(); err != nil {
				p.logger.Error("read rollup spill", "hour", fmtTime(sp.start), "err", err)
			}
		}
	}
	// The series the spill does not hold whole, from raw: one read per open
	// hour, for the minutes of [mint, maxt] in it.
	for _, h := range slices.Sorted(maps.Keys(p.spills)) {
		from, to := max(timegrid.Ceil(mint, MinuteRes), h), min(timegrid.Floor(maxt, MinuteRes)+MinuteRes, h+HourRes)
		if from >= to || !set.needRaw(from) {
			continue
		}
		seq := len(p.spills[h].blocks) // after the spill's blocks
		_, err := walkRawBacked(context.Background(), p.src, set, from, to, p.cfg.KindOf, matchers,
			func(lset labels.Labels) (int64, bool) {
				k := want(lset)
				if k < 0 {
					return 0, false
				}
				accs[k].lset = lset.Copy() // lset may point into a block's index
				return timegrid.Ceil(accs[k].from, MinuteRes), true
			},
			func(_ labels.Labels, ws []tiers.Window) {
				a := &accs[len(accs)-1] // the series start just accepted
				for i, w := range ws {
					a.ws = append(a.ws, orderedWindow{w: w, seq: seq, rec: i})
				}
			})
		if err != nil {
			p.logger.Error("read open windows from raw", "hour", fmtTime(h), "err", err)
		}
	}
	// A series may be in several accumulators (read from raw, or a new
	// series reference for the same labels): merge them.
	slices.SortStableFunc(accs, func(a, b acc) int { return labels.Compare(a.lset, b.lset) })
	total := 0
	for _, a := range accs {
		total += len(a.ws)
	}
	sink.Reserve(len(accs), total)
	var buf []tiers.Window
	for i := 0; i < len(accs); {
		j := i + 1
		ws := accs[i].ws
		for ; j < len(accs) && labels.Equal(accs[j].lset, accs[i].lset); j++ {
			ws = append(ws, accs[j].ws...)
		}
		if len(ws) > 0 {
			buf = latestPerMinute(ws, buf[:0])
			sink.Series(accs[i].lset, buf)
		}
		// What is handed over is the sink's: a collection while the rest
		// is handed over need not keep it.
		for k := i; k < j; k++ {
			accs[k].ws = nil
		}
		i = j
	}
}

// OpenWindowsIn returns copies of what VisitOpenWindows hands over, sorted
// by labels, each series' windows ascending.
func (p *Pipeline) OpenWindowsIn(mint, maxt int64, matchers ...*labels.Matcher) []tiers.SeriesWindows {
	var c windowCopies
	p.VisitOpenWindows(mint, maxt, &c, matchers...)
	return c.out
}

// windowCopies is an OpenWindowSink keeping a copy of every series' windows.
type windowCopies struct{ out []tiers.SeriesWindows }

func (c *windowCopies) Want(labels.Labels) (int64, bool) { return math.MinInt64, true }

func (c *windowCopies) Reserve(series, _ int) { c.out = make([]tiers.SeriesWindows, 0, series) }

func (c *windowCopies) Series(lset labels.Labels, ws []tiers.Window) {
	c.out = append(c.out, tiers.SeriesWindows{Labels: lset, Windows: slices.Clone(ws)})
}
