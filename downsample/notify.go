package downsample

import (
	"slices"

	"github.com/prometheus/prometheus/model/labels"

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

// OpenWindowsIn returns copies of the minute windows computed (final) but
// not yet flushed to a partition that start in [mint, maxt], of the series
// matching every matcher, sorted by labels, each series' windows ascending.
// Only windows before the published mark are returned: those are final. The
// diagnosis engine reads the last minutes of every series each minute. It
// implements tiers.OpenWindowSource and is safe for concurrent use with the
// pipeline.
func (p *Pipeline) OpenWindowsIn(mint, maxt int64, matchers ...*labels.Matcher) []tiers.SeriesWindows {
	maxt = min(maxt, p.pubMark.Load()-MinuteRes)
	if mint > maxt {
		return nil
	}
	type acc struct {
		lset labels.Labels
		ws   []orderedWindow
	}
	var (
		accs    []acc
		bySlot  = map[uint32]int{} // index in accs, -1: does not match
		matches = func(lset labels.Labels) bool {
			for _, m := range matchers {
				if !m.Matches(lset.Get(m.Name)) {
					return false
				}
			}
			return true
		}
	)
	p.spillMu.RLock()
	defer p.spillMu.RUnlock()
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
			for c.next() {
				if c.w.Start < mint || c.w.Start > maxt {
					continue
				}
				ow := orderedWindow{w: c.w, seq: i, rec: c.order}
				if blk.inline {
					// Consecutive windows of one inline series share its labels.
					if lastInline < 0 || !labels.Equal(accs[lastInline].lset, c.key.lset) {
						lastInline = -1
						if matches(c.key.lset) {
							accs = append(accs, acc{lset: c.key.lset})
							lastInline = len(accs) - 1
						}
					}
					if lastInline >= 0 {
						accs[lastInline].ws = append(accs[lastInline].ws, ow)
					}
					continue
				}
				k, ok := bySlot[c.slot]
				if !ok {
					k = -1
					if matches(c.key.lset) {
						accs = append(accs, acc{lset: c.key.lset})
						k = len(accs) - 1
					}
					bySlot[c.slot] = k
				}
				if k >= 0 {
					accs[k].ws = append(accs[k].ws, ow)
				}
			}
			if err := c.Err(); err != nil {
				p.logger.Error("read rollup spill", "hour", fmtTime(sp.start), "err", err)
			}
		}
	}
	// A series may be in several accumulators (read from raw, or a new
	// series reference for the same labels): merge them.
	slices.SortStableFunc(accs, func(a, b acc) int { return labels.Compare(a.lset, b.lset) })
	var out []tiers.SeriesWindows
	for i := 0; i < len(accs); {
		j := i + 1
		ws := accs[i].ws
		for ; j < len(accs) && labels.Equal(accs[j].lset, accs[i].lset); j++ {
			ws = append(ws, accs[j].ws...)
		}
		if len(ws) > 0 {
			out = append(out, tiers.SeriesWindows{Labels: accs[i].lset, Windows: latestPerMinute(ws, nil)})
		}
		i = j
	}
	return out
}
