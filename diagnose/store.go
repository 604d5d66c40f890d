package diagnose

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/strata-dev/strata/internal/seriesset"
)

// scratch is the engine's own in-memory store of the series its rules
// record (signals, SLOs, ALERTS ...), bounded in time by truncate. Rules read
// it together with the minute view. A sample appended again at the same
// timestamp replaces the old one (replay's fast path materialises a
// recording rule's results before the group evaluation appends them again).
//
// It is safe for concurrent use; appenders buffer until Commit.
type scratch struct {
	mu sync.RWMutex
	// series holds the series by labels hash; the rare second series of a
	// hash goes to collided. A slice per hash (map[uint64][]*scratchSeries)
	// cost an 8-byte allocation and a 24-byte map value per series: 3.1 MB
	// of the 6.1 MB the store's series took at 50,000 active series.
	series   map[uint64]*scratchSeries
	collided map[uint64][]*scratchSeries
	byName   map[string][]*scratchSeries
	// irr holds the timestamps of the irregular series (scratchSeries).
	irr map[*scratchSeries][]int64
	// spans are selectWhere's buffers of the series a select takes, kept
	// from select to select: one allocated a select, sized by the
	// candidates, was 70 MB of garbage a minute at 500,000 active series,
	// most of it for selects of one signal's baselines
	// (`{metric="..."}`) among every tracked series'.
	spans sync.Pool // *[]selectSpan
	// gen changes whenever truncate forgets a series, so that a writer
	// holding *scratchSeries handles (scratchHandle) looks them up again.
	gen uint64
}

// scratchSeries is one series' samples, in time order. The engine writes
// every series at whole minutes, one sample a minute while the series
// lasts, so a series whose samples are a minute apart (the i-th at t0 +
// i·scratchStep) keeps no timestamps: they were half of the store's sample
// bytes (8 of 16 a sample, in arrays of the capacity a series' keep grew
// them to). Any other series (a gap, a sample off the minute, an inserted
// one) has t0 irregular and its timestamps in the store's irr, until
// truncation leaves it regular again: a field of their own would have
// moved every series from the 48-byte size class to 64.
type scratchSeries struct {
	lbls labels.Labels
	t0   int64     // the first sample's timestamp, or irregular
	vs   []float64 // the samples' values
}

// scratchStep is the spacing of a regular series' samples: the engine's
// evaluation interval.
const scratchStep = int64(60_000)

// irregular is t0 of a series whose timestamps are in scratch.irr (a
// regular series starting at this time is kept as irregular).
const irregular = math.MinInt64

// times is e's timestamps when it is irregular, nil when regular: what
// the series' methods take as ts.
func (s *scratch) times(e *scratchSeries) []int64 {
	if e.t0 != irregular {
		return nil
	}
	return s.irr[e]
}

// at is the timestamp of sample i (ts: scratch.times).
func (e *scratchSeries) at(ts []int64, i int) int64 {
	if e.t0 == irregular {
		return ts[i]
	}
	return e.t0 + int64(i)*scratchStep
}

// search is the index of the first sample at or after t (len(vs) when none).
func (e *scratchSeries) search(ts []int64, t int64) int {
	n := len(e.vs)
	if e.t0 == irregular {
		return sort.Search(n, func(i int) bool { return ts[i] >= t })
	}
	switch {
	case n == 0 || t <= e.t0:
		return 0
	case t > e.at(nil, n-1):
		return n
	}
	return int((t - e.t0 + scratchStep - 1) / scratchStep) // t0 < t <= the last: no overflow
}

// after is the index of the first sample after t (len(vs) when none).
func (e *scratchSeries) after(ts []int64, t int64) int {
	if t == math.MaxInt64 {
		return len(e.vs)
	}
	return e.search(ts, t+1)
}

// index is the index of the sample at exactly t, false when none.
func (e *scratchSeries) index(ts []int64, t int64) (int, bool) {
	n := len(e.vs)
	if n == 0 {
		return 0, false
	}
	if e.t0 != irregular {
		if t < e.t0 || t > e.at(nil, n-1) || (t-e.t0)%scratchStep != 0 {
			return 0, false
		}
		return int((t - e.t0) / scratchStep), true
	}
	i := n - 1
	if ts[i] != t {
		i = sort.Search(n, func(i int) bool { return ts[i] >= t })
		if i == n || ts[i] != t {
			return 0, false
		}
	}
	return i, true
}

// trim gives the values of a regular series an array of their length and
// one more sample, when the one they have is a quarter larger or more. It
// runs when truncation dropped samples, so at a series' steady state: its
// keep and the next minute's sample. Grown by append, a keep of 22 samples
// (21 minutes) held 32, one of 10 held 16; trimmed once, the array keeps
// its size, since each minute's append follows a truncation.
func (e *scratchSeries) trim() {
	n := len(e.vs)
	if n == 0 || cap(e.vs) <= n+1+n/4 || e.t0 == irregular {
		return
	}
	e.vs = append(make([]float64, 0, n+1), e.vs...)
}

// makeIrregular gives regular series e its timestamps.
func (s *scratch) makeIrregular(e *scratchSeries) {
	ts := make([]int64, len(e.vs), cap(e.vs))
	for i := range ts {
		ts[i] = e.at(nil, i)
	}
	e.t0 = irregular
	s.irr[e] = ts
}

// settle drops an irregular series' timestamps when they are a minute
// apart again (truncation dropped the gap or the odd sample).
func (s *scratch) settle(e *scratchSeries) {
	if e.t0 != irregular || len(e.vs) == 0 {
		return
	}
	ts := s.irr[e]
	if ts[0] == irregular {
		return
	}
	for i := 1; i < len(ts); i++ {
		if ts[i-1] > math.MaxInt64-scratchStep || ts[i] != ts[i-1]+scratchStep {
			return
		}
	}
	e.t0 = ts[0]
	delete(s.irr, e)
}

func newScratch() *scratch {
	return &scratch{series: map[uint64]*scratchSeries{}, collided: map[uint64][]*scratchSeries{}, byName: map[string][]*scratchSeries{},
		irr: map[*scratchSeries][]int64{}, spans: sync.Pool{New: func() any { return new([]selectSpan) }}}
}

// selectSpan is a series a select takes, and its samples' indices in range.
type selectSpan struct {
	e      *scratchSeries
	lo, hi int
}

// lookup returns lbls' series, created with lbls itself when new. Every
// label set appended here is built for the sample (a rule's result, a
// stale marker's from the rule group's last results, the fast path's
// builder, a baseline handle's) and never modified after: a copy of each
// new series' labels was 5.5 MB at the first live minute of a
// 50,000-series fleet.
func (s *scratch) lookup(lbls labels.Labels) *scratchSeries {
	return s.lookupHash(lbls.Hash(), lbls)
}

// lookupHash is lookup with lbls' hash given (tests give colliding ones).
func (s *scratch) lookupHash(h uint64, lbls labels.Labels) *scratchSeries {
	if e := s.find(h, lbls); e != nil {
		return e
	}
	e := &scratchSeries{lbls: lbls}
	if _, taken := s.series[h]; taken {
		s.collided[h] = append(s.collided[h], e)
	} else {
		s.series[h] = e
	}
	name := lbls.Get(model.MetricNameLabel)
	s.byName[name] = append(s.byName[name], e)
	return e
}

// shareLabels replaces each label set of hs by the store's own for the
// same series, where it holds one.
func (s *scratch) shareLabels(hs []hashedLabels) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i := range hs {
		if e := s.find(hs[i].h, hs[i].l); e != nil {
			hs[i].l = e.lbls
		}
	}
}

// find returns the series with labels lbls (hash h), nil when none.
func (s *scratch) find(h uint64, lbls labels.Labels) *scratchSeries {
	if e := s.series[h]; e != nil && labels.Equal(e.lbls, lbls) {
		return e
	}
	for _, e := range s.collided[h] {
		if labels.Equal(e.lbls, lbls) {
			return e
		}
	}
	return nil
}

// add inserts or replaces series e's sample at t.
func (s *scratch) add(e *scratchSeries, t int64, v float64) {
	n := len(e.vs)
	if n == 0 {
		delete(s.irr, e)
		e.t0 = t
		e.vs = append(e.vs, v)
		if t == irregular {
			s.irr[e] = []int64{t}
		}
		return
	}
	if e.t0 != irregular {
		last := e.at(nil, n-1)
		if last <= math.MaxInt64-scratchStep && t == last+scratchStep {
			e.vs = append(e.vs, v)
			return
		}
		if i, ok := e.index(nil, t); ok {
			e.vs[i] = v
			return
		}
		s.makeIrregular(e)
	}
	ts := s.irr[e]
	if ts[n-1] < t {
		s.irr[e] = append(ts, t)
		e.vs = append(e.vs, v)
		return
	}
	i := sort.Search(n, func(i int) bool { return ts[i] >= t })
	if ts[i] == t {
		e.vs[i] = v
		return
	}
	s.irr[e] = slices.Insert(ts, i, t)
	e.vs = slices.Insert(e.vs, i, v)
}

// truncate drops samples before mint, and series left empty.
func (s *scratch) truncate(mint int64) {
	s.truncateBy(func(string) int64 { return mint })
}

// truncateBy drops the samples of each series before mintOf(its name), and
// series left empty.
func (s *scratch) truncateBy(mintOf func(name string) int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	emptied := false
	for name, list := range s.byName {
		mint := mintOf(name)
		for _, e := range list {
			ts := s.times(e)
			if i := e.search(ts, mint); i > 0 {
				if ts != nil {
					s.irr[e] = slices.Delete(ts, 0, i)
				} else if i < len(e.vs) {
					e.t0 = e.at(nil, i)
				}
				e.vs = slices.Delete(e.vs, 0, i)
				s.settle(e)
				e.trim()
			}
			emptied = emptied || len(e.vs) == 0
		}
	}
	if !emptied {
		return
	}
	empty := func(e *scratchSeries) bool { return len(e.vs) == 0 }
	for e := range s.irr {
		if empty(e) {
			delete(s.irr, e)
		}
	}
	for h, e := range s.series {
		if empty(e) {
			delete(s.series, h)
		}
	}
	for h, chain := range s.collided {
		chain = slices.DeleteFunc(chain, empty)
		if _, taken := s.series[h]; !taken && len(chain) > 0 {
			s.series[h], chain = chain[0], chain[1:]
		}
		if len(chain) == 0 {
			delete(s.collided, h)
		} else {
			s.collided[h] = chain
		}
	}
	for n, list := range s.byName {
		if list = slices.DeleteFunc(list, empty); len(list) == 0 {
			delete(s.byName, n)
		} else {
			s.byName[n] = list
		}
	}
	// Handles (scratchHandle) to forgotten series look them up again.
	s.gen++
}

// samples is the number of samples held (for the engine's metrics).
func (s *scratch) samples() (series, samples int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, list := range s.byName {
		series += len(list)
		for _, e := range list {
			samples += len(e.vs)
		}
	}
	return series, samples
}

// sampleAt is a series' value at one timestamp.
type sampleAt struct {
	lbls labels.Labels
	v    float64
}

// valuesAt returns the samples of the series named name at exactly t,
// stale markers left out, in no particular order. The labels are the
// store's own: callers must not modify them.
func (s *scratch) valuesAt(name string, t int64) []sampleAt {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []sampleAt
	for _, e := range s.byName[name] {
		i, ok := e.index(s.times(e), t)
		if !ok || value.IsStaleNaN(e.vs[i]) {
			continue
		}
		out = append(out, sampleAt{e.lbls, e.vs[i]})
	}
	return out
}

// eachLatest calls fn, under the store's read lock, with the labels of
// every series whose name keep accepts; when fn returns a non-nil
// function, that is called with the series' last sample in [mint, maxt],
// if it has one and it is not NaN (a stale marker is one): what an
// instant selection of the series reads at maxt with a lookback of
// maxt-mint, without copying their samples. Asked by labels first, the
// caller reads the samples of only the series it wants (their arrays were
// most of the time of a pass over every series). The labels are the
// store's own: fn must not modify them, nor either function call into s.
func (s *scratch) eachLatest(mint, maxt int64, keep func(name string) bool, fn func(lbls labels.Labels) func(v float64)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for name, list := range s.byName {
		if !keep(name) {
			continue
		}
		for _, e := range list {
			take := fn(e.lbls)
			if take == nil {
				continue
			}
			ts := s.times(e)
			hi := e.after(ts, maxt)
			if hi == 0 || e.at(ts, hi-1) < mint || math.IsNaN(e.vs[hi-1]) {
				continue
			}
			take(e.vs[hi-1])
		}
	}
}

// scratchHandle appends to one series without hashing its labels every
// time (the baselines write thousands of samples a minute).
type scratchHandle struct {
	lbls labels.Labels
	s    *scratchSeries
	gen  uint64
}

// valueOf is the handle's series' sample at exactly t (stale markers are
// no sample).
func (s *scratch) valueOf(h *scratchHandle, t int64) (float64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := h.s
	if e == nil || h.gen != s.gen {
		if e = s.find(h.lbls.Hash(), h.lbls); e == nil {
			return 0, false
		}
	}
	i, ok := e.index(s.times(e), t)
	if !ok || value.IsStaleNaN(e.vs[i]) {
		return 0, false
	}
	return e.vs[i], true
}

// zscores: the engine's own store keeps the z-scores, which the derived
// anomaly rules read.
func (s *scratch) zscores() bool { return true }

// appendDirect writes samples at once (no Commit), under one lock.
func (s *scratch) appendDirect(t int64, hs []*scratchHandle, vs []float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, h := range hs {
		if h.s == nil || h.gen != s.gen {
			h.s, h.gen = s.lookup(h.lbls), s.gen
		}
		s.add(h.s, t, vs[i])
	}
}

// AppenderV2 implements storage.AppendableV2.
func (s *scratch) AppenderV2(context.Context) storage.AppenderV2 { return &scratchAppender{s: s} }

type pending struct {
	lbls labels.Labels
	t    int64
	v    float64
}

type scratchAppender struct {
	s   *scratch
	buf []pending
}

func (a *scratchAppender) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	if h != nil || fh != nil {
		return 0, storage.ErrNativeHistogramsDisabled // rules over minute windows never produce histograms
	}
	a.buf = append(a.buf, pending{ls, t, v})
	return storage.SeriesRef(ls.Hash()), nil
}

func (a *scratchAppender) Commit() error {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	for _, p := range a.buf {
		a.s.add(a.s.lookup(p.lbls), p.t, p.v)
	}
	a.buf = nil
	return nil
}

func (a *scratchAppender) Rollback() error { a.buf = nil; return nil }

// Querier implements storage.Queryable. Series are copied at Select, so a
// query never sees a later append.
func (s *scratch) Querier(mint, maxt int64) (storage.Querier, error) {
	return &scratchQuerier{s: s, mint: mint, maxt: maxt}, nil
}

type scratchQuerier struct {
	s          *scratch
	mint, maxt int64
}

// candidates are the series of the names the matchers' metric-name
// matcher accepts (every series without one). Collecting every series for
// a regular expression on the name was 17 MB of garbage a minute at
// 50,000 active series.
func (q *scratchQuerier) candidates(ms []*labels.Matcher) []*scratchSeries {
	var byName *labels.Matcher
	for _, m := range ms {
		if m.Name == model.MetricNameLabel {
			if m.Type == labels.MatchEqual {
				return q.s.byName[m.Value]
			}
			byName = m
		}
	}
	var all []*scratchSeries
	for name, l := range q.s.byName {
		if byName == nil || byName.Matches(name) {
			all = append(all, l...)
		}
	}
	return all
}

func (q *scratchQuerier) Select(_ context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	return q.selectWhere(hints, nil, ms...)
}

// selectWhere is Select of the series keep accepts besides the matchers
// (nil: every one): the others' samples are not copied.
func (q *scratchQuerier) selectWhere(hints *storage.SelectHints, keep func(labels.Labels) bool, ms ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = max(mint, hints.Start), min(maxt, hints.End)
	}
	// The samples in range are copied (appends, truncation and replaced
	// samples change the series in place once the lock is released), but
	// into two arrays shared by the selected series, which themselves are
	// one array: a handful of allocations a select instead of three per
	// series (a rule's select of every tracked signal series is 13,600 of
	// them at 50,000 active series, in the engine's minute, whose burst of
	// garbage sets the collector's heap goal). A regular series' timestamps
	// are not copied: its first one says them all.
	q.s.mu.RLock()
	cands := q.candidates(ms)
	sp := q.s.spans.Get().(*[]selectSpan)
	spans := (*sp)[:0]
	total, nts := 0, 0
	for _, e := range cands {
		if !seriesset.MatchAll(e.lbls, ms) || keep != nil && !keep(e.lbls) {
			continue
		}
		ets := q.s.times(e)
		lo, hi := e.search(ets, mint), e.after(ets, maxt)
		if lo >= hi {
			continue
		}
		spans = append(spans, selectSpan{e, lo, hi})
		total += hi - lo
		if ets != nil {
			nts += hi - lo
		}
	}
	var ts []int64
	if nts > 0 {
		ts = make([]int64, 0, nts)
	}
	vs := make([]float64, 0, total)
	list := make([]listSeries, len(spans))
	for i, sp := range spans {
		a := len(vs)
		vs = append(vs, sp.e.vs[sp.lo:sp.hi]...)
		// Full slice expressions: no series can grow into the next one's.
		list[i] = listSeries{lbls: sp.e.lbls, vs: vs[a:len(vs):len(vs)]}
		if ets := q.s.times(sp.e); ets != nil {
			b := len(ts)
			ts = append(ts, ets[sp.lo:sp.hi]...)
			list[i].ts = ts[b:len(ts):len(ts)]
		} else {
			list[i].t0 = sp.e.at(nil, sp.lo)
		}
	}
	q.s.mu.RUnlock()
	clear(spans) // no series kept reachable from the pool
	*sp = spans[:0]
	q.s.spans.Put(sp)
	slices.SortFunc(list, func(a, b listSeries) int { return labels.Compare(a.lbls, b.lbls) })
	return &listSet{series: list}
}

func (q *scratchQuerier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	q.s.mu.RLock()
	defer q.s.mu.RUnlock()
	seen := map[string]struct{}{}
	for _, e := range q.candidates(ms) {
		if v := e.lbls.Get(name); v != "" && seriesset.MatchAll(e.lbls, ms) {
			seen[v] = struct{}{}
		}
	}
	return sortedKeys(seen), nil, nil
}

func (q *scratchQuerier) LabelNames(_ context.Context, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	q.s.mu.RLock()
	defer q.s.mu.RUnlock()
	seen := map[string]struct{}{}
	for _, e := range q.candidates(ms) {
		if seriesset.MatchAll(e.lbls, ms) {
			e.lbls.Range(func(l labels.Label) { seen[l.Name] = struct{}{} })
		}
	}
	return sortedKeys(seen), nil, nil
}

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (q *scratchQuerier) Close() error { return nil }

type listSet struct {
	series []listSeries
	i      int
}

func (s *listSet) Next() bool                        { s.i++; return s.i <= len(s.series) }
func (s *listSet) At() storage.Series                { return &s.series[s.i-1] }
func (s *listSet) Err() error                        { return nil }
func (s *listSet) Warnings() annotations.Annotations { return nil }

// listSeries is a selected series' samples: the i-th at ts[i], or at
// t0 + i·scratchStep when ts is nil (a regular series).
type listSeries struct {
	lbls labels.Labels
	t0   int64
	ts   []int64
	vs   []float64
}

func (s *listSeries) Labels() labels.Labels { return s.lbls }

// at is the timestamp of sample i.
func (s *listSeries) at(i int) int64 {
	if s.ts == nil {
		return s.t0 + int64(i)*scratchStep
	}
	return s.ts[i]
}

// Iterator reuses it when it is one of ours, as PromQL passes the previous
// series' iterator for each series of a select.
func (s *listSeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	if li, ok := it.(*listIter); ok {
		*li = listIter{s: s, i: -1}
		return li
	}
	return &listIter{s: s, i: -1}
}

type listIter struct {
	s *listSeries
	i int
}

func (it *listIter) Next() chunkenc.ValueType {
	if it.i+1 >= len(it.s.vs) {
		it.i = len(it.s.vs)
		return chunkenc.ValNone
	}
	it.i++
	return chunkenc.ValFloat
}

func (it *listIter) Seek(t msTime) chunkenc.ValueType {
	n := len(it.s.vs)
	if it.i >= n {
		return chunkenc.ValNone
	}
	if it.i >= 0 && it.s.at(it.i) >= t {
		return chunkenc.ValFloat
	}
	j := sort.Search(n, func(k int) bool { return it.s.at(k) >= t })
	it.i = max(it.i, j)
	if it.i >= n {
		return chunkenc.ValNone
	}
	return chunkenc.ValFloat
}

func (it *listIter) At() (int64, float64) { return it.s.at(it.i), it.s.vs[it.i] }
func (it *listIter) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	return it.s.at(it.i), nil
}

func (it *listIter) AtFloatHistogram(*histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return it.s.at(it.i), nil
}
func (it *listIter) AtT() int64  { return it.s.at(it.i) }
func (it *listIter) AtST() int64 { return 0 }
func (it *listIter) Err() error  { return nil }

// msTime is a millisecond timestamp; the alias keeps go vet from taking
// Seek for a broken io.Seeker (as in package tiers).
type msTime = int64
