package downsample

import (
	"slices"
	"sort"

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

// OpenWindowsIn is OpenWindows restricted to windows starting in
// [mint, maxt]: the diagnosis engine reads the last minutes of every series
// each minute, not the whole open hour. It implements
// tiers.OpenWindowSource.
func (p *Pipeline) OpenWindowsIn(mint, maxt int64, matchers ...*labels.Matcher) []tiers.SeriesWindows {
	p.bufMu.Lock()
	defer p.bufMu.Unlock()
	byKey := map[uint64]int{}
	var out []tiers.SeriesWindows
	starts := make([]int64, 0, len(p.open))
	for h := range p.open {
		if h+HourRes > mint && h <= maxt {
			starts = append(starts, h)
		}
	}
	slices.Sort(starts)
	for _, h := range starts {
	series:
		for _, s := range p.open[h].all() {
			for _, m := range matchers {
				if !m.Matches(s.Labels.Get(m.Name)) {
					continue series
				}
			}
			lo := sort.Search(len(s.Windows), func(i int) bool { return s.Windows[i].Start >= mint })
			hi := sort.Search(len(s.Windows), func(i int) bool { return s.Windows[i].Start > maxt })
			if lo >= hi {
				continue
			}
			ws := s.Windows[lo:hi]
			// Hash collisions only merge series when labels are equal too.
			key := s.Labels.Hash()
			if i, ok := byKey[key]; ok && labels.Equal(out[i].Labels, s.Labels) {
				out[i].Windows = append(out[i].Windows, ws...)
				continue
			}
			byKey[key] = len(out)
			out = append(out, tiers.SeriesWindows{Labels: s.Labels, Windows: slices.Clone(ws)})
		}
	}
	sortSeries(out)
	return out
}
