package tiers

import (
	"math"
	"slices"
	"sort"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

const (
	valHistogram      = chunkenc.ValHistogram
	valFloatHistogram = chunkenc.ValFloatHistogram
)

// aggMode says which synthetic samples a window becomes.
type aggMode int

const (
	// modeLast: Last at LastT (plain selectors, last_over_time, aggregation
	// operators and every function not listed below). Last rather than the
	// window average because a plain selector over raw data also returns the
	// latest sample, a gauge's last value is a value the series really had,
	// and sum()/max() across series then never mixes averages with raw values
	// at a tier boundary.
	modeLast    aggMode = iota
	modeMin             // min_over_time: Min at LastT
	modeMax             // max_over_time: Max at LastT
	modeSum             // sum_over_time: Sum at LastT
	modeAvg             // avg/quantile/stddev/stdvar_over_time: Sum/Count at LastT
	modeCount           // count_over_time: Count evenly spaced samples in [FirstT, LastT]
	modeCounter         // rate & co: the real counter values with synthetic resets
	modeDelta           // delta, idelta, deriv, changes: First at FirstT, Last at LastT
)

func modeForFunc(fn string) aggMode {
	switch fn {
	case "min_over_time":
		return modeMin
	case "max_over_time":
		return modeMax
	case "sum_over_time":
		return modeSum
	case "avg_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time", "mad_over_time":
		return modeAvg
	case "count_over_time":
		return modeCount
	case "rate", "irate", "increase", "resets", "xrate", "xincrease":
		return modeCounter
	case "delta", "idelta", "deriv", "changes", "predict_linear", "xdelta":
		return modeDelta
	}
	return modeLast
}

// seriesPart is the piece of a stitched series served by one tier: either a
// raw series or a rollup series' windows, clamped to [lo, hi).
type seriesPart struct {
	raw     storage.Series
	windows windowSeq
	mode    aggMode
	res     int64 // window length, ms
	fill    int64 // repeat Last every fill ms (0: never)
	// fillStep > 0: repeat Last at the evaluation times fillOrigin+k*fillStep
	// instead (range queries, whose steps are known).
	fillStep, fillOrigin int64
	// lookback is the engine's lookback delta: an evaluation time less than
	// lookback after LastT sees Last anyway and needs no repeat.
	lookback int64
	interp   int64 // counter windows without resets: samples per window, interpolated (<= 1: ends only)
	// cover: the shortest range of the min/max_over_time the samples
	// serve (0: any), over which a window's boundary First that the
	// previous window's extreme covers is left out
	// (windowIter.firstCovered).
	cover  int64
	lo, hi int64
}

type stitchedSeries struct {
	lbls  labels.Labels
	parts []seriesPart
}

// Iterator implements storage.Series. It reuses reuse, the iterator of a
// series the caller is done with (the engine passes each series' iterator
// on to the next), down to the raw tier's iterator inside it, as the TSDB's
// series do: a select of many series then allocates iterators once, not
// once per series.
func (s *stitchedSeries) Iterator(reuse chunkenc.Iterator) chunkenc.Iterator {
	if len(s.parts) == 1 {
		return s.parts[0].iterator(reuse) // one tier: no concatenation to do
	}
	it, ok := reuse.(*stitchedIter)
	if !ok {
		it = &stitchedIter{}
	}
	it.cur = 0
	for len(it.parts) < len(s.parts) {
		it.parts = append(it.parts, nil)
	}
	it.parts = it.parts[:len(s.parts)]
	for i := range s.parts {
		it.parts[i] = s.parts[i].iterator(it.parts[i])
	}
	return it
}

// iterator returns the part's iterator, reusing reuse when it is one of
// the same kind.
func (p *seriesPart) iterator(reuse chunkenc.Iterator) chunkenc.Iterator {
	if p.raw != nil {
		r, ok := reuse.(*rawPartIter)
		if !ok {
			// Another store's iterator (or none) may still serve the
			// raw series.
			return &rawPartIter{it: p.raw.Iterator(reuse), lo: p.lo, hi: p.hi}
		}
		*r = rawPartIter{it: p.raw.Iterator(r.it), lo: p.lo, hi: p.hi}
		return r
	}
	w, ok := reuse.(*windowIter)
	if !ok {
		return &windowIter{p: p, n: p.windows.Len(), i: -1}
	}
	*w = windowIter{p: p, n: p.windows.Len(), i: -1, pts: w.pts[:0]}
	return w
}

// stitchedIter concatenates the parts' iterators; parts cover disjoint,
// ascending time ranges, so the result is strictly increasing in time.
type stitchedIter struct {
	parts []chunkenc.Iterator
	cur   int
}

func (s *stitchedIter) Next() chunkenc.ValueType {
	for s.cur < len(s.parts) {
		if vt := s.parts[s.cur].Next(); vt != chunkenc.ValNone {
			return vt
		}
		if s.parts[s.cur].Err() != nil {
			return chunkenc.ValNone
		}
		s.cur++
	}
	return chunkenc.ValNone
}

func (s *stitchedIter) Seek(t msTime) chunkenc.ValueType {
	for s.cur < len(s.parts) {
		if vt := s.parts[s.cur].Seek(t); vt != chunkenc.ValNone {
			return vt
		}
		if s.parts[s.cur].Err() != nil {
			return chunkenc.ValNone
		}
		s.cur++
	}
	return chunkenc.ValNone
}

func (s *stitchedIter) part() chunkenc.Iterator { return s.parts[min(s.cur, len(s.parts)-1)] }

func (s *stitchedIter) At() (int64, float64) { return s.part().At() }
func (s *stitchedIter) AtHistogram(h *histogram.Histogram) (int64, *histogram.Histogram) {
	return s.part().AtHistogram(h)
}

func (s *stitchedIter) AtFloatHistogram(h *histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return s.part().AtFloatHistogram(h)
}
func (s *stitchedIter) AtT() int64  { return s.part().AtT() }
func (s *stitchedIter) AtST() int64 { return s.part().AtST() }
func (s *stitchedIter) Err() error {
	if s.cur < len(s.parts) {
		return s.parts[s.cur].Err()
	}
	return nil
}

// rawPartIter clamps a raw series iterator to [lo, hi).
type rawPartIter struct {
	it            chunkenc.Iterator
	lo, hi        int64
	started, done bool
	cur           chunkenc.ValueType
}

func (r *rawPartIter) check(vt chunkenc.ValueType) chunkenc.ValueType {
	if vt == chunkenc.ValNone || r.it.AtT() >= r.hi {
		r.done, r.cur = true, chunkenc.ValNone
		return chunkenc.ValNone
	}
	r.cur = vt
	return vt
}

func (r *rawPartIter) Next() chunkenc.ValueType {
	if r.done {
		return chunkenc.ValNone
	}
	if !r.started {
		r.started = true
		return r.check(r.it.Seek(r.lo))
	}
	return r.check(r.it.Next())
}

func (r *rawPartIter) Seek(t msTime) chunkenc.ValueType {
	if r.done {
		return chunkenc.ValNone
	}
	if r.started && r.it.AtT() >= t {
		return r.cur
	}
	r.started = true
	return r.check(r.it.Seek(max(t, r.lo)))
}

func (r *rawPartIter) At() (int64, float64) { return r.it.At() }
func (r *rawPartIter) AtHistogram(h *histogram.Histogram) (int64, *histogram.Histogram) {
	return r.it.AtHistogram(h)
}

func (r *rawPartIter) AtFloatHistogram(h *histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return r.it.AtFloatHistogram(h)
}
func (r *rawPartIter) AtT() int64  { return r.it.AtT() }
func (r *rawPartIter) AtST() int64 { return 0 }
func (r *rawPartIter) Err() error  { return r.it.Err() }

// msTime is a millisecond timestamp. It names the parameter of the
// iterators' Seek methods: go vet's stdmethods check mistakes any
// Seek(int64) for a broken io.Seeker, and an alias keeps the signature
// identical to chunkenc.Iterator's while telling vet it is not one.
type msTime = int64

type point struct {
	t int64
	v float64
}

// windowIter yields the synthetic samples of a rollup part, window by window.
type windowIter struct {
	p   *seriesPart
	n   int     // windows in the part
	i   int     // current window
	run int     // block hint for p.windows
	pts []point // current window's samples (when not from loadOne)
	np  int     // samples in the current window
	j   int     // current sample, < np
	// ct, cv is the current sample (a copy of pts[j], or loadOne's sample).
	ct int64
	cv float64
	// cur and next are the current window and, when filling, the one after.
	cur, next Window
	evalT     int64 // loadOne's last evaluation time needing a repeat (0: none yet)
}

func (w *windowIter) load(i int) {
	w.i, w.j = i, 0
	if w.loadOne(i) {
		return
	}
	w.p.windows.at(i, &w.run, &w.cur)
	var next *Window
	if w.p.fill > 0 && i+1 < w.n { // only filling looks ahead
		hint := w.run
		w.p.windows.at(i+1, &hint, &w.next)
		next = &w.next
	}
	w.pts = windowPoints(w.pts[:0], &w.cur, next, w.p)
	// The first and last windows may straddle the part's bounds (a query
	// starting mid-window): keep only samples inside [lo, hi).
	if first, last := w.pts[0].t, w.pts[len(w.pts)-1].t; first < w.p.lo || last >= w.p.hi {
		w.pts = slices.DeleteFunc(w.pts, func(pt point) bool { return pt.t < w.p.lo || pt.t >= w.p.hi })
	}
	w.np = len(w.pts)
	if w.np > 0 {
		w.ct, w.cv = w.pts[0].t, w.pts[0].v
	}
}

// setSample makes sample j of the current window (loaded by the general
// path when j > 0) the current sample.
func (w *windowIter) setSample(j int) {
	if j != w.j {
		w.j = j
		w.ct, w.cv = w.pts[j].t, w.pts[j].v
	}
}

// loadOne is load's fast path for the common case of a window that becomes
// exactly one sample: a single-sample mode, not stale, inside [lo, hi), and
// no repeat of Last due before the next evaluation time; or, for min and
// max, the two samples of a window whose first sample lies on its start
// (boundaryFirst), both inside [lo, hi). It reports false (nothing done)
// otherwise.
func (w *windowIter) loadOne(i int) bool {
	p := w.p
	switch p.mode {
	case modeLast, modeMin, modeMax, modeSum, modeAvg:
	default:
		return false
	}
	b, row := p.windows.locate(i, &w.run)
	t := b.lastT[row]
	if t < p.lo || t >= p.hi || b.isStale(row) {
		return false
	}
	first := false // min/max: First at FirstT too (boundaryFirst)
	if b.firstT != nil && p.mode != modeLast && p.mode != modeAvg {
		if ft := b.firstT[row]; ft == b.startOf(t) && t > ft {
			if p.mode != modeMin && p.mode != modeMax || ft < p.lo {
				return false // two samples (splitsFirst), or one cut by lo
			}
			first = !w.firstCovered(i, b, row)
		}
	}
	if p.fill > 0 && p.fillStep <= 0 {
		// Last repeated every fill ms after LastT (windowPoints), while
		// before the next window's last sample, the window's end plus a
		// window, and hi: none when the first repeat is already at or past
		// one of them (a StoreAPI request over the hour tier with the
		// Querier's 1 h lookback: the next window's LastT is at most an
		// hour later).
		if t+p.fill < min(b.startOf(t)+2*p.res, p.hi) {
			if i+1 >= w.n {
				return false
			}
			hint := w.run
			nb, nrow := p.windows.locate(i+1, &hint)
			if t+p.fill < nb.lastT[nrow] {
				return false
			}
		}
	} else if p.fill > 0 {
		// The first evaluation time that would need a repeat of Last,
		// found by stepping the previous window's forward (windows ascend,
		// so this is usually one addition, not a division).
		from := max(t+1, t+p.lookback)
		if w.evalT == 0 || w.evalT-p.fillStep >= from || from-w.evalT > 4*p.fillStep {
			w.evalT = gridAtOrAfter(from, p.fillOrigin, p.fillStep)
		}
		for w.evalT < from {
			w.evalT += p.fillStep
		}
		if w.evalT < min(b.startOf(t)+2*p.res, p.hi) {
			return false
		}
	}
	var v float64
	switch p.mode {
	case modeMin:
		v = b.min[row]
	case modeMax:
		v = b.max[row]
	case modeSum:
		v = b.sum[row]
	case modeAvg:
		v = b.sum[row] / float64(b.count[row])
	default:
		v = b.last[row]
	}
	if first {
		w.pts = append(w.pts[:0], point{b.firstT[row], b.first[row]}, point{t, v})
		w.np = 2
		w.ct, w.cv = w.pts[0].t, w.pts[0].v
		return true
	}
	w.np = 1
	w.ct, w.cv = t, v
	return true
}

// firstCovered reports whether window i's First (row of b), emitted at
// the window's start for min/max_over_time (boundaryFirst), can be left out
// without changing any answer over ranges of at least p.cover. A range
// holding First either ends at or after the window's LastT, and then holds
// its Max (Min) too, which is at least First (at most); or it ends before
// LastT, and then it holds the previous window's LastT, where that
// window's Max (Min) is emitted, whenever the two LastTs are at most
// p.cover apart. So First is left out where the previous window's extreme
// covers it. Clock-aligned scrapes put First on every window's start: this
// halves the samples a 30-day max_over_time reads, and those a StoreAPI
// request's MAX (MIN) sends. NaN compares false: such a First stays.
func (w *windowIter) firstCovered(i int, b *windowBlock, row int) bool {
	p := w.p
	if p.cover <= 0 || i == 0 {
		return false
	}
	hint := w.run
	pb, prow := p.windows.locate(i-1, &hint)
	pt := pb.lastT[prow]
	if pt < p.lo || b.lastT[row]-pt > p.cover || pb.isStale(prow) {
		return false
	}
	if p.mode == modeMax {
		return pb.max[prow] >= b.first[row]
	}
	return pb.min[prow] <= b.first[row]
}

func (w *windowIter) Next() chunkenc.ValueType {
	if w.i >= w.n {
		return chunkenc.ValNone
	}
	if w.i >= 0 && w.j+1 < w.np {
		w.setSample(w.j + 1)
		return chunkenc.ValFloat
	}
	for {
		if w.i+1 >= w.n {
			w.i = w.n
			return chunkenc.ValNone
		}
		w.load(w.i + 1)
		if w.np > 0 {
			return chunkenc.ValFloat
		}
	}
}

func (w *windowIter) Seek(t msTime) chunkenc.ValueType {
	if w.i >= w.n {
		return chunkenc.ValNone
	}
	if w.i >= 0 && w.j < w.np && w.ct >= t {
		return chunkenc.ValFloat
	}
	// Every sample of window k lies before Start+span: span is the window
	// length, or two with fill (Last is repeated into the next window's slot).
	span := w.p.res
	if w.p.fill > 0 {
		span *= 2
	}
	ws := &w.p.windows
	from := max(w.i, 0)
	k := from
	// Queries seek forward step by step: try the next window before a binary search.
	switch {
	case ws.startAt(from, &w.run)+span > t:
	case from+1 < w.n && ws.startAt(from+1, &w.run)+span > t:
		k = from + 1
	default:
		hint := w.run
		k = from + sort.Search(w.n-from, func(n int) bool { return ws.startAt(from+n, &hint)+span > t })
	}
	for ; k < w.n; k++ {
		if k != w.i {
			w.load(k)
		}
		for j := w.j; j < w.np; j++ {
			w.setSample(j)
			if w.ct >= t {
				return chunkenc.ValFloat
			}
		}
	}
	w.i = w.n
	return chunkenc.ValNone
}

func (w *windowIter) At() (int64, float64) { return w.ct, w.cv }
func (w *windowIter) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	return w.ct, nil
}

func (w *windowIter) AtFloatHistogram(*histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return w.ct, nil
}
func (w *windowIter) AtT() int64  { return w.ct }
func (w *windowIter) AtST() int64 { return 0 }
func (w *windowIter) Err() error  { return nil }

// windowPoints appends window w's synthetic samples (strictly increasing in
// time, all within [w.Start, w.Start+2*res) and p's [lo, hi)) to dst.
func windowPoints(dst []point, w *Window, next *Window, p *seriesPart) []point {
	switch p.mode {
	case modeMin:
		dst = append(boundaryFirst(dst, w), point{w.LastT, w.Min})
	case modeMax:
		dst = append(boundaryFirst(dst, w), point{w.LastT, w.Max})
	case modeSum:
		if splitsFirst(w) && !math.IsInf(w.First, 0) && !math.IsInf(w.Sum, 0) {
			// First where it was, the rest of the sum at LastT: a range
			// starting at the window's start drops First as raw drops it.
			dst = append(dst, point{w.FirstT, w.First}, point{w.LastT, w.Sum - w.First})
			break
		}
		dst = append(dst, point{w.LastT, w.Sum})
	case modeAvg:
		dst = append(dst, point{w.LastT, w.Sum / float64(w.Count)})
	case modeCount:
		dst = evenlySpaced(dst, w.FirstT, w.LastT, int64(w.Count), w.Sum/float64(w.Count))
	case modeDelta:
		if w.Count > 1 && w.LastT > w.FirstT {
			dst = append(dst, point{w.FirstT, w.First})
		}
		dst = append(dst, point{w.LastT, w.Last})
	case modeCounter:
		dst = counterPoints(dst, w, p.interp)
	default:
		dst = append(dst, point{w.LastT, w.Last})
		if !w.Stale && p.fill > 0 {
			limit := min(w.Start+2*p.res, p.hi)
			if next != nil {
				limit = min(limit, next.LastT)
			}
			if p.fillStep > 0 {
				// Evaluation times before LastT+lookback see Last itself.
				for t := gridAtOrAfter(max(w.LastT+1, w.LastT+p.lookback), p.fillOrigin, p.fillStep); t < limit; t += p.fillStep {
					dst = append(dst, point{t, w.Last})
				}
			} else {
				for t := w.LastT + p.fill; t < limit; t += p.fill {
					dst = append(dst, point{t, w.Last})
				}
			}
		}
	}
	// A stale marker after Last ends the series for plain selectors (the raw
	// tier had one somewhere between LastT and the window end).
	if w.Stale && w.LastT+1 < w.Start+p.res && w.LastT+1 < p.hi && dst[len(dst)-1].t == w.LastT {
		dst = append(dst, point{w.LastT + 1, math.Float64frombits(value.StaleNaN)})
	}
	return dst
}

// splitsFirst reports whether a window's first sample lies exactly on its
// start (as scrapes aligned to the clock put it) and is not its only
// sample. A PromQL range ending at that time (left-open, right-closed:
// (t-range, t]) includes the sample, while the window it belongs to starts
// there and lies outside the range; so min/max/sum_over_time emit it at its
// own time too (boundaryFirst), where a range ending at the boundary finds
// it, as raw data has it.
func splitsFirst(w *Window) bool {
	return w.FirstT == w.Start && w.LastT > w.FirstT
}

// boundaryFirst appends First at FirstT when splitsFirst says a range ending
// at the window's start must see it. The window's Min (Max), emitted at
// LastT, includes it too: harmless, it is one of the window's samples.
func boundaryFirst(dst []point, w *Window) []point {
	if splitsFirst(w) {
		dst = append(dst, point{w.FirstT, w.First})
	}
	return dst
}

// evenlySpaced appends n samples of value v spread over [from, to]. Raw
// samples have distinct millisecond timestamps, so to-from >= n-1 and the
// timestamps are distinct.
func evenlySpaced(dst []point, from, to, n int64, v float64) []point {
	if n <= 1 || to <= from {
		return append(dst, point{to, v})
	}
	n = min(n, to-from+1)
	for j := range n {
		dst = append(dst, point{from + j*(to-from)/(n-1), v})
	}
	return dst
}

// counterPoints rebuilds a counter window from its real first and last
// samples. With r resets inside the window it emits
//
//	First, First+a, First+a+d, 0, d, 0, ..., d, 0, Last     (r peaks, each followed by a drop to 0)
//
// with d = (Increase-Last-a)/r, so PromQL sees exactly r resets and a
// reset-adjusted increase of a + r·d + Last = Increase. The ends are the
// real first and last samples, so a reset at a window boundary (First below
// the previous window's Last) and the step across the boundary are seen as
// in raw data, and the series joins raw data at the tier boundary seamlessly.
//
// The second sample, First+a, sits where the window's second raw sample
// was if the series was scraped at a regular interval (FirstT plus the
// window's average sample interval), with a the window's average increase
// per interval. A range whose left edge is exactly the window's start
// (PromQL ranges are left-open: an hour-aligned range over hour windows)
// excludes First, as it excludes the raw sample there, and then starts at
// that second sample, where raw data starts too: the engine extrapolates
// to the range's start over one scrape interval in both, and the two
// answers differ only by how far the real second sample was from the
// window's average increase (docs/format/hour-parquet.md, "Agreement with
// raw data").
//
// Without resets, samples linearly interpolated between the ends are added
// (interp per window in all), so that a range that cuts a window still
// starts with a sample close to its left edge: PromQL extrapolates a rate
// to the range's start only when the first sample is within 1.1 average
// sample intervals of it. Not when Last < First: that is a gauge's window
// (no resets recorded, see Window), where every interpolated step down would
// count as one more reset; First and Last alone show the one drop the
// window is known to hold.
func counterPoints(dst []point, w *Window, interp int64) []point {
	dst = append(dst, point{w.FirstT, w.First})
	if w.Count <= 1 || w.LastT <= w.FirstT {
		return dst
	}
	span := w.LastT - w.FirstT
	// Raw samples have distinct millisecond times: at most span intervals.
	gaps := min(int64(w.Count)-1, span)
	r := int64(w.Resets)
	if r == 0 {
		if w.Last < w.First {
			return append(dst, point{w.LastT, w.Last})
		}
		return linearPoints(dst, w, gaps, interp)
	}
	lo, a := w.FirstT, 0.0 // the synthetic resets lie strictly between lo and LastT
	if gaps >= 2 {
		lo = w.FirstT + span/gaps
		a = min(max(w.Increase/float64(gaps), 0), max(w.Increase-w.Last, 0))
		dst = append(dst, point{lo, w.First + a})
	}
	r = min(r, (w.LastT-lo-1)/2)
	if r > 0 {
		d := max(w.Increase-w.Last-a, 0) / float64(r)
		for j := range 2 * r {
			t := lo + (j+1)*(w.LastT-lo)/(2*r+1)
			v := 0.0
			switch {
			case j == 0:
				v = w.First + a + d
			case j%2 == 0:
				v = d
			}
			dst = append(dst, point{t, v})
		}
	}
	return append(dst, point{w.LastT, w.Last})
}

// linearPoints appends the samples after First of a counter window without
// resets: values on the straight line from First to Last. With few samples
// in the window (gaps sample intervals, at most interp+1) they are at the
// times a regular scrape had them; otherwise at the second raw sample's
// time (FirstT plus the average interval, see counterPoints) and at interp-1
// evenly spaced times, then Last.
func linearPoints(dst []point, w *Window, gaps, interp int64) []point {
	span := w.LastT - w.FirstT
	at := func(t int64) point {
		return point{t, w.First + (w.Last-w.First)*float64(t-w.FirstT)/float64(span)}
	}
	if gaps <= interp+1 {
		for k := int64(1); k < gaps; k++ {
			dst = append(dst, at(w.FirstT+k*span/gaps))
		}
		return append(dst, point{w.LastT, w.Last})
	}
	second := w.FirstT + span/gaps
	dst = append(dst, at(second))
	for j := int64(1); j < interp; j++ {
		if t := w.FirstT + j*span/interp; t > second {
			dst = append(dst, at(t))
		}
	}
	return append(dst, point{w.LastT, w.Last})
}

// columnsFor lists the aggregate columns a mode's samples are made of, so a
// query decodes only those (plus the series and start columns).
func columnsFor(mode aggMode) colSet {
	cols := colLastT | colStale
	switch mode {
	case modeMin:
		cols |= colMin | colFirstT | colFirst
	case modeMax:
		cols |= colMax | colFirstT | colFirst
	case modeSum:
		cols |= colSum | colFirstT | colFirst
	case modeAvg:
		cols |= colSum | colCount
	case modeCount:
		cols |= colFirstT | colCount | colSum
	case modeCounter:
		cols |= colFirstT | colCount | colFirst | colLast | colIncrease | colResets
	case modeDelta:
		cols |= colFirstT | colCount | colFirst | colLast
	default:
		cols |= colLast
	}
	return cols
}
