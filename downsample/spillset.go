package downsample

import (
	"cmp"
	"context"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/seriesset"
	"github.com/strata-dev/strata/tiers"
)

// The spill holds only the windows of dense series (docs/rollups.md,
// "Memory"). A series whose samples come DefaultSparseInterval or more
// apart costs as much in the spill as in the raw tier's WAL (a window of
// four 15 s samples takes about what those four samples take), and its
// windows are cheap to recompute: the tee marks it sparse when it hands
// over a window and stops spilling it, for as long as it keeps its slot.
// Readers of the open hours (the flush, VisitOpenWindows) take a dense
// series' windows from the spill and compute every other series' from the
// raw tier, which holds every sample of the open hours: the results are
// the same windows either way, bit for bit.
//
// Only the change from dense to sparse is allowed: a sparse series'
// windows were never spilled, so a series made dense again would miss
// them, whereas a series made sparse merely has windows in the spill that
// readers no longer take.

// DefaultSparseInterval is the sample interval at and above which a series'
// minute windows are recomputed from raw instead of spilled
// (Config.SparseInterval).
const DefaultSparseInterval = 5 * 1000 // ms

// sparseRate reports whether the window that b holds, whose next sample is
// at t, comes from a series sampled every interval ms or less often.
func sparseRate(b *builder, t, interval int64) bool {
	if b.count >= 2 {
		return int64(b.lastOff-b.firstOff) >= interval*int64(b.count-1)
	}
	return t-b.lastT() >= interval
}

// spillSet is which series readers take from the spill: the tee's series
// that have windows in the open hours, dense or not, by SeriesID. A series
// is taken from the spill only if every slot with its labels is dense (a
// series whose raw reference changed may have two slots). Everything else
// (sparse series, series the tee does not know: the minutes before it was
// installed) is computed from raw.
type spillSet struct {
	entries []spillSetEntry // by id
	sparse  bool            // some series in entries is sparse
	teeFrom int64           // minutes before this were read from raw, for every series
}

type spillSetEntry struct {
	id     int64
	lset   labels.Labels
	sparse bool
}

// spillSet returns, for readers of the hours from oldest on of the series
// matching ms, which series the spill holds whole; nil without the tee
// (the spill then holds every series). Its labels are the slots', copied
// under the tee's lock: a sparse series' slot may be reused while the set
// is read. A series not matching ms is not in the set: readers pass it by.
func (p *Pipeline) spillSet(oldest int64, ms ...*labels.Matcher) *spillSet {
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	if !p.tap.enabled {
		return nil
	}
	// Sized once: the set is built for every flush and every minute the
	// diagnosis engine reads, and growing it by appends at 60,000 series
	// allocated about 13 MB a minute (docs/bench.md, s10-minute). Every
	// slot's entry, for the engine's names alone, was 25 MB a minute
	// (and its sort) at 785,000 tee series: a set for matchers is sized
	// as the last one was.
	size := p.tap.series.live()
	if len(ms) > 0 {
		size = min(size, p.tap.matched+p.tap.matched/8)
	}
	s := &spillSet{teeFrom: p.tap.from, entries: make([]spillSetEntry, 0, size)}
	for i := range p.tap.series.n {
		st := p.tap.series.at(i)
		if st.lset.IsEmpty() || !st.hasWindowsFrom(oldest) || !seriesset.MatchAll(st.lset, ms) {
			continue
		}
		s.entries = append(s.entries, spillSetEntry{id: st.id, lset: st.lset, sparse: st.sparse})
		s.sparse = s.sparse || st.sparse
	}
	if len(ms) > 0 {
		p.tap.matched = len(s.entries)
	}
	slices.SortFunc(s.entries, func(a, b spillSetEntry) int { return cmp.Compare(a.id, b.id) })
	return s
}

// holds reports whether every window of the series (id is its SeriesID)
// in the open hours is in the spill.
func (s *spillSet) holds(lset labels.Labels, id int64) bool {
	held, _ := s.find(lset, id)
	return held
}

// find is holds, and the tee's labels of the series (empty when it has no
// slot for it): the raw tier's own (Pipeline.labelsOf), which a reader may
// keep instead of a copy.
func (s *spillSet) find(lset labels.Labels, id int64) (held bool, own labels.Labels) {
	if s == nil {
		return true, labels.EmptyLabels()
	}
	i, _ := slices.BinarySearchFunc(s.entries, id, func(e spillSetEntry, id int64) int { return cmp.Compare(e.id, id) })
	found := false
	for ; i < len(s.entries) && s.entries[i].id == id; i++ {
		e := &s.entries[i]
		if !labels.Equal(e.lset, lset) {
			continue
		}
		own = e.lset
		if e.sparse {
			return false, own
		}
		found = true
	}
	return found, own
}

// needRaw reports whether minutes from `from` on may have windows that only
// raw gives back: some series is sparse, or those minutes were read from
// raw before the tee (their spill records are every series', and a reader
// takes only the dense series').
func (s *spillSet) needRaw(from int64) bool {
	return s != nil && (s.sparse || from < s.teeFrom)
}

// walkRawBacked computes from raw the minute windows in [from, to) of the
// series matching ms (none: every series) that set does not hold, and calls
// fn with each that has some. start, when set, gives each series' first
// minute to compute (false: skip it); its lset is valid during the call,
// own is the tee's labels of the series (empty when the tee has no slot
// for it), which stay valid.
func walkRawBacked(ctx context.Context, q storage.Queryable, set *spillSet, from, to int64, kindOf KindFunc, ms []*labels.Matcher,
	start func(lset, own labels.Labels) (int64, bool), fn func(lset labels.Labels, ws []tiers.Window),
) (Stats, error) {
	first := func(lset labels.Labels) (int64, bool) {
		held, own := set.find(lset, tiers.SeriesID(lset))
		if held {
			return 0, false
		}
		if start == nil {
			return from, true
		}
		return start(lset, own)
	}
	return walkWindows(ctx, q, MinuteRes, from, to, kindOf, ms, first, fn)
}
