package rulegen

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"
)

// NewestWindow is how much of the lookback newestFirst reads first: a
// minute holds the newest sample of a series scraped every minute or
// faster, and one chunk (120 samples) of a 1 Hz series.
const NewestWindow = time.Minute

// newestFirst wraps q for instant queries: an instant selector (no range,
// no step, the engine's lookback wide) yields, of each series, only the
// newest sample in the lookback, but the engine reads it by seeking from the
// lookback's start, so every chunk of the lookback is read and decoded: 5
// minutes of a 1 Hz series are three chunks, of an unpaced one seventy,
// for one sample. newestFirst selects the last `recent` of the lookback
// first and reads each series from there; only a series with no sample in
// it (a slower exporter, a series that stopped) is read over the whole
// lookback. Every other select passes through unchanged.
//
// The answer is the same: the newest sample in (t - lookback, t] is the
// newest in (t - recent, t] whenever that holds one (a stale marker
// included). The cost is a second index lookup per instant selector, and a
// second read of the newest chunk of each series that has no sample in
// `recent`. It pays only where the lookback spans several chunks (a chunk
// holds 120 samples: series sampled every 2.5 s or faster), so a selector
// most of whose series had no sample in `recent` at its last evaluation,
// or whose series' first sample in it came more than newestMaxOffset after
// its start on average (half their interval: sampled every 3 s or slower),
// reads the whole lookback directly for its next newestSkip evaluations,
// then tries again.
func newestFirst(q storage.Queryable, lookback, recent time.Duration) storage.Queryable {
	return newestQueryable{q: q, lookback: lookback.Milliseconds(), recent: recent.Milliseconds(), stats: &newestStats{bySel: map[uint64]*selectorStats{}}}
}

// newestMaxOffset is the mean delay (ms) from the start of the recent
// window to each series' first sample in it above which reading recent
// first does not pay (see newestFirst).
const newestMaxOffset = 1500

// newestSkip is how many evaluations a selector whose series mostly had no
// sample in the recent window reads the whole lookback directly.
const newestSkip = 16

// maxNewestSelectors bounds the selectors whose hits newestFirst counts;
// past it, a new selector always reads recent first.
const maxNewestSelectors = 4096

type newestQueryable struct {
	q                storage.Queryable
	lookback, recent int64 // ms
	stats            *newestStats
}

func (n newestQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := n.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return newestQuerier{Querier: q, n: n}, nil
}

type newestQuerier struct {
	storage.Querier
	n newestQueryable
}

// newestStats holds, by selector (its matchers), how its series were read
// at its last evaluations.
type newestStats struct {
	mu    sync.Mutex
	bySel map[uint64]*selectorStats
}

type selectorStats struct {
	// hits and misses count the series read from the recent window and
	// those read over the whole lookback since the last decision; offsets
	// sums the hits' delays (ms) from the window's start to their first
	// sample in it.
	hits, misses, offsets atomic.Int64
	skip                  atomic.Int64 // evaluations left that read the whole lookback directly
}

// of returns the stats of the selector ms, or nil past maxNewestSelectors.
// Selectors are told apart by a hash of their matchers: two that collide
// share their stats, which only decides how they are read.
func (s *newestStats) of(ms []*labels.Matcher) *selectorStats {
	k := uint64(14695981039346656037) // FNV-1a, without an allocation
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			k = (k ^ uint64(s[i])) * 1099511628211
		}
		k = (k ^ 0xff) * 1099511628211
	}
	for _, m := range ms {
		add(m.Name)
		k = (k ^ uint64(m.Type)) * 1099511628211
		add(m.Value)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.bySel[k]
	if !ok && len(s.bySel) < maxNewestSelectors {
		st = &selectorStats{}
		s.bySel[k] = st
	}
	return st
}

// direct reports whether this evaluation of the selector reads the whole
// lookback directly, deciding from the series read since the last decision.
func (st *selectorStats) direct() bool {
	if st == nil {
		return false
	}
	if st.skip.Load() > 0 {
		st.skip.Add(-1)
		return true
	}
	hits, misses, offsets := st.hits.Swap(0), st.misses.Swap(0), st.offsets.Swap(0)
	if misses > hits || hits > 0 && offsets/hits > newestMaxOffset {
		st.skip.Store(newestSkip - 1)
		return true
	}
	return false
}

func (n newestQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	// getTimeRangesForSelector: an instant selector of an instant query
	// reads (t - lookback, t], Start being t - lookback + 1.
	if hints == nil || hints.Step != 0 || hints.Range != 0 || hints.End-hints.Start != n.n.lookback-1 || n.n.recent >= n.n.lookback {
		return n.Querier.Select(ctx, sortSeries, hints, ms...)
	}
	st := n.n.stats.of(ms)
	if st.direct() {
		return n.Querier.Select(ctx, sortSeries, hints, ms...)
	}
	nh := *hints
	nh.Start = hints.End - n.n.recent + 1
	// Trimmed to the recent window whatever the caller asked: a series
	// counts as read from it only for a sample in it.
	nh.DisableTrimming = false
	// The recent select first: a series created between the two is then in
	// the whole one only, and read from it.
	recent := n.Querier.Select(ctx, sortSeries, &nh, ms...)
	whole := n.Querier.Select(ctx, sortSeries, hints, ms...)
	return &newestSet{whole: whole, recent: recent, st: st, from: nh.Start}
}

// newestSet is the whole lookback's series, each read from the recent
// select's series of the same labels when it holds a sample. Both sets come
// from the same index in the same order, the recent one a subsequence of the
// whole one; a recent series that does not line up is simply not used.
type newestSet struct {
	whole, recent storage.SeriesSet
	next          storage.Series // the recent set's series not yet matched
	done          bool           // the recent set is exhausted
	cur           *newestSeries
	st            *selectorStats // nil: not counted
	from          int64          // the recent window's start (ms)
}

func (s *newestSet) Next() bool {
	if !s.whole.Next() {
		return false
	}
	w := s.whole.At()
	s.cur = &newestSeries{Series: w, st: s.st, from: s.from}
	if s.done {
		return true
	}
	if s.next == nil {
		if !s.recent.Next() {
			s.done = true
			return true
		}
		s.next = s.recent.At()
	}
	if labels.Equal(s.next.Labels(), w.Labels()) {
		s.cur.recent = s.next
		s.next = nil
	}
	return true
}

func (s *newestSet) At() storage.Series { return s.cur }

func (s *newestSet) Err() error {
	if err := s.whole.Err(); err != nil {
		return err
	}
	return s.recent.Err()
}

func (s *newestSet) Warnings() annotations.Annotations {
	var ws annotations.Annotations
	ws.Merge(s.whole.Warnings())
	ws.Merge(s.recent.Warnings())
	return ws
}

// newestSeries is a series of the whole lookback with its recent part (nil:
// none).
type newestSeries struct {
	storage.Series
	recent storage.Series
	st     *selectorStats
	from   int64
}

// Iterator reads the recent part when it holds a sample, else the whole
// lookback. The iterator the engine hands back for reuse may be either.
func (s *newestSeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	p, _ := it.(*peekedIterator)
	if p != nil {
		it = p.Iterator
	}
	if s.recent != nil {
		ri := s.recent.Iterator(it)
		if vt := ri.Next(); vt != chunkenc.ValNone {
			if p == nil {
				p = &peekedIterator{}
			}
			*p = peekedIterator{Iterator: ri, first: vt}
			if s.st != nil {
				s.st.hits.Add(1)
				s.st.offsets.Add(ri.AtT() - s.from)
			}
			return p
		}
		if ri.Err() != nil {
			return ri
		}
		it = ri
	}
	if s.st != nil {
		s.st.misses.Add(1)
	}
	return s.Series.Iterator(it)
}

// peekedIterator is an iterator whose first Next was already called (and
// returned first).
type peekedIterator struct {
	chunkenc.Iterator
	first  chunkenc.ValueType
	passed bool // first has been returned
}

func (p *peekedIterator) Next() chunkenc.ValueType {
	if !p.passed {
		p.passed = true
		return p.first
	}
	return p.Iterator.Next()
}

// Seek takes a millisecond timestamp (msTime: see belowIterator.Seek).
func (p *peekedIterator) Seek(t msTime) chunkenc.ValueType {
	if !p.passed {
		p.passed = true
		if p.AtT() >= t {
			return p.first
		}
	}
	return p.Iterator.Seek(t)
}
