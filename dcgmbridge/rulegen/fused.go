package rulegen

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/kahansum"

	"github.com/strata-dev/strata/internal/promqlast"
	"github.com/strata-dev/strata/internal/seriesset"
)

// The fused pass. Most aggregations of the canonical rules are an
// aggregation of one selector, `op by (labels) (sel)`, or of its rate,
// `sum by (le, labels) (rate(sel[2m]))` under histogram_quantile. The engine
// evaluates them node by node: the selector's matrix (every series' labels
// and points), the rate's (every series' labels again, without the name),
// then the aggregation's groups, outputs and maps, each sized to its input:
// about 2 KB and 16 allocations per input series per node (docs/bench.md),
// although most groups hold one or two series. A fused pass reads the
// selector's series and adds each one's value straight into its group: per
// series it allocates nothing but what storage hands out.
//
// It computes what the engine computes, to the bit: the series come from
// the same select (the engine's hints, the same Queryable under the
// internal form's RenamingQueryable, whose label copies and bound the pass
// applies itself, in the same order), each series' value is chosen as the
// engine's instant selector
// chooses it (vectorSelectorSingle: the lookback, stale markers) or
// computed as the engine's rate computes it (extrapolatedRate over the
// range's float samples, stale markers dropped), and the groups take the
// same values in the same order, in the engine's accumulators (aggregation:
// Kahan sums, the mean that turns incremental on overflow, NaN in max and
// min), ordered as the engine orders them (by the first series that has a
// value). Not fused, and evaluated by the engine instead: a selector whose
// series hold a native histogram in what the pass reads (errNotFused), and
// every shape but the two above. The engine's sample limit is not applied:
// a pass holds one sample at a time (the range of one series for a rate).
// A histogram_quantile of a fused bucket sum is computed from it too
// (fusedQuantile).
//
// The engine must not use start timestamps in rate (EngineOpts and
// QueryOpts UseStartTimestamps: Strata never sets them), and the pass reads
// each sample's value only.

// errNotFused says a fused pass met what it does not compute (a native
// histogram); the engine evaluates the aggregation instead.
var errNotFused = errors.New("rulegen: not fusable")

// fusedAgg is an aggregation the memo evaluates in a fused pass.
type fusedAgg struct {
	op       parser.ItemType
	grouping []string // sorted, as the engine sorts it, without repeats
	// matchers are the selector's, but for its internal ones (RenameLabel,
	// BelowLabel): the pass does what RenamingQueryable does for them,
	// copies (only into the grouping labels, and only to tell the groups
	// apart) and below (NaN: none), without a label set a series.
	matchers []*labels.Matcher
	copies   []labelCopy
	below    float64
	// names are the label names the pass reads of a series, sorted: the
	// grouping's and the copies', at the indices in at.
	names []string
	at    struct{ grouping, from, to []int }
	// rateRange is the range of rate(vs[range]); 0: vs is an instant
	// selector.
	rateRange time.Duration
	// le is the index of le in grouping when the pass is a bucket sum its
	// quantiles read (quantileOf), -1 otherwise: such a pass returns
	// bucketSums, not a vector.
	le int
	// groups is how many groups the last pass had: the next one's
	// capacity, so that a pass does not grow its groups step by step;
	// hists the same for a bucket sum's histograms.
	groups, hists atomic.Int64
}

// fusable returns the fused pass for a, or nil when a is not one of its
// shapes: sum, avg, min, max, count or group, by labels, of a plain
// selector or of rate over one.
func fusable(a *parser.AggregateExpr) *fusedAgg {
	if a.Without || a.Param != nil {
		return nil
	}
	switch a.Op {
	case parser.SUM, parser.AVG, parser.MIN, parser.MAX, parser.COUNT, parser.GROUP:
	default:
		return nil
	}
	// The engine groups a rate by its labels without the name: a
	// reserved label in the grouping would tell the two apart.
	if slices.ContainsFunc(a.Grouping, func(l string) bool { return strings.HasPrefix(l, "__") }) {
		return nil
	}
	f := &fusedAgg{op: a.Op, grouping: slices.Compact(slices.Sorted(slices.Values(a.Grouping))), below: math.NaN()}
	var vs *parser.VectorSelector
	switch n := promqlast.Unparen(a.Expr).(type) {
	case *parser.VectorSelector:
		vs = n
	case *parser.Call:
		if n.Func.Name != "rate" || len(n.Args) != 1 {
			return nil
		}
		ms, ok := n.Args[0].(*parser.MatrixSelector)
		if !ok {
			return nil
		}
		if vs, ok = ms.VectorSelector.(*parser.VectorSelector); !ok {
			return nil
		}
		f.rateRange = ms.Range
	default:
		return nil
	}
	if vs.OriginalOffset != 0 || vs.OriginalOffsetExpr != nil || vs.Timestamp != nil || vs.StartOrEnd != 0 || vs.Anchored || vs.Smoothed {
		return nil
	}
	// The internal matchers as renamingQuerier.Select reads them; a
	// selector it would answer with nothing is left to the engine.
	for _, m := range vs.LabelMatchers {
		switch {
		case m.Name == SharedLabel:
			return nil
		case !isInternal(m):
			f.matchers = append(f.matchers, m)
		case m.Name == RenameLabel:
			c, ok := parseCopies(m.Value)
			if !ok {
				return nil
			}
			f.copies = append(f.copies, c...)
		default:
			v, err := strconv.ParseFloat(m.Value, 64)
			if err != nil || math.IsNaN(v) || f.rateRange > 0 {
				return nil
			}
			if math.IsNaN(f.below) || v < f.below {
				f.below = v
			}
		}
	}
	f.names = slices.Clone(f.grouping)
	for _, c := range f.copies {
		f.names = append(f.names, c.From, c.To)
	}
	slices.Sort(f.names)
	f.names = slices.Compact(f.names)
	index := func(name string) int { i, _ := slices.BinarySearch(f.names, name); return i }
	f.le = -1
	if quantileOf(f) {
		f.le = slices.Index(f.grouping, model.BucketLabel)
	}
	for _, g := range f.grouping {
		f.at.grouping = append(f.at.grouping, index(g))
	}
	for _, c := range f.copies {
		f.at.from, f.at.to = append(f.at.from, index(c.From)), append(f.at.to, index(c.To))
	}
	return f
}

// hints are the engine's for the selector of an instant query at ts
// (populateSeries, getTimeRangesForSelector): what the storage underneath
// (the stitched tiers) chooses its data by. The select is not trimmed to
// its range: rangePoints keeps to a rate's range, and instantValue reads
// the newest sample at or before ts and rejects one not newer than
// ts-lookback, as the trimmed range would. Untrimmed, the head hands out
// each series without the deletion intervals that trim it (its open chunk
// always reaches past ts, its first one mostly before the lookback): two
// allocations a series fewer, and a chunk iterator read directly instead of
// through the intervals' iterator. Untrimmed, a select reads no sample
// another tier serves in the query's range: the stitched view bounds a raw
// part it stitches to a rollup tier itself (rawPartIter), and a range the
// raw tier serves alone starts at the query's start or at the raw tier's
// oldest sample (Stitched.plan).
func (f *fusedAgg) hints(ts int64, lookback time.Duration) *storage.SelectHints {
	h := &storage.SelectHints{End: ts, Func: f.op.String(), By: true, Grouping: f.grouping, DisableTrimming: true}
	if f.rateRange > 0 {
		h.Start = ts - f.rateRange.Milliseconds() + 1
		h.Range = f.rateRange.Milliseconds()
		h.Func = "rate"
		return h
	}
	h.Start = ts - lookback.Milliseconds() + 1
	return h
}

// group is one group's accumulator: the engine's groupedAggregation for
// floats.
type group struct {
	value, mean, kahanC   float64
	count                 float64
	incrementalMean, seen bool
}

// passScratch holds what a fused pass needs only while it runs, its groups'
// accumulators and their index, for the next pass of the same group
// evaluation (sharedMemo.takeScratch): the passes of one evaluation, about
// fifty, then allocate them once instead of each.
type passScratch struct {
	groups []group
	index  map[uint64]int
	// hindex is a bucket sum's histograms' index, les its le values by
	// the series' spelling (bucketSums).
	hindex map[uint64]int32
	les    map[string]bucketBound
}

// eval runs the fused pass at t over q, which must be what the engine reads
// under RenamingQueryable (newestFirst), with the engine's lookback. sc,
// when not nil, is reused for the pass's groups. A bucket sum (f.le >= 0)
// answers with its bucketSums, any other pass with its vector.
func (f *fusedAgg) eval(ctx context.Context, q storage.Queryable, t time.Time, lookback time.Duration, sc *passScratch) (_ memoValue, err error) {
	ts := t.UnixMilli()
	hints := f.hints(ts, lookback)
	querier, err := q.Querier(hints.Start, hints.End)
	if err != nil {
		return memoValue{}, err
	}
	defer func() { err = errors.Join(err, querier.Close()) }()
	set := querier.Select(ctx, false, hints, f.matchers...)
	hint := int(f.groups.Load())
	if sc == nil {
		sc = &passScratch{}
	}
	if sc.index == nil {
		sc.index = make(map[uint64]int, hint)
	}
	clear(sc.index)
	var (
		// out holds each group's labels as it is found, its value at
		// the end; a bucket sum's sums hold its buckets instead.
		out    promql.Vector
		sums   *bucketSums
		groups = slices.Grow(sc.groups[:0], hint)
		index  = sc.index
		buf    = make([]byte, 0, 1024)
		vals   = make([]string, len(f.grouping))
		read   = make([]string, len(f.names))
		sb     = labels.NewScratchBuilder(len(f.grouping))
		chk    chunkenc.Iterator
		it     = storage.NewMemoizedEmptyIterator(lookback.Milliseconds())
		points []fpoint
	)
	if f.le >= 0 {
		sums = sc.newSums(ts, hint, int(f.hists.Load()))
	} else {
		out = make(promql.Vector, 0, hint)
	}
	for set.Next() {
		if err := ctx.Err(); err != nil {
			return memoValue{}, err
		}
		s := set.At()
		chk = s.Iterator(chk)
		var (
			v  float64
			ok bool
		)
		if f.rateRange > 0 {
			points, err = rangePoints(chk, ts-f.rateRange.Milliseconds(), ts, points[:0])
			if err != nil {
				return memoValue{}, err
			}
			v, ok = rate(points, ts, f.rateRange)
		} else {
			it.Reset(chk)
			if v, ok, err = instantValue(it, ts, lookback.Milliseconds(), f.below); err != nil {
				return memoValue{}, err
			}
		}
		if !ok {
			continue
		}
		f.groupValues(s.Labels(), read, vals)
		buf = buf[:0]
		for _, v := range vals {
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		}
		key := xxhash.Sum64(buf)
		gi, seen := index[key]
		if !seen {
			gi = len(groups)
			index[key] = gi
			groups = append(groups, group{})
			if sums != nil {
				sums.add(f, sc, vals, buf, &sb)
			} else {
				out = append(out, promql.Sample{Metric: f.groupLabels(vals, -1, &sb), T: ts})
			}
		}
		f.add(&groups[gi], v)
	}
	sc.groups = groups
	if err := set.Err(); err != nil {
		return memoValue{}, err
	}
	f.groups.Store(int64(len(groups)))
	if sums != nil {
		f.hists.Store(int64(len(sums.hists)))
		for i := range groups {
			sums.buckets[i].f = f.result(&groups[i])
		}
		return memoValue{sums: sums}, nil
	}
	for i := range groups {
		out[i].F = f.result(&groups[i])
	}
	return memoValue{vec: out}, nil
}

// groupLabels is the label set of a group whose grouping labels' values
// are vals (empty: absent), but for the one at index skip (-1: none).
func (f *fusedAgg) groupLabels(vals []string, skip int, sb *labels.ScratchBuilder) labels.Labels {
	sb.Reset()
	for i, v := range vals {
		if v != "" && i != skip {
			sb.Add(f.grouping[i], v)
		}
	}
	return sb.Labels()
}

// groupValues sets vals to the values of f's grouping labels (empty:
// absent) in the series lset once the copies are made, as renamingSet.At
// makes them: each in turn, where its source is set and its target differs.
// read is a buffer for the values of f.names. The engine tells groups apart
// by a hash of their labels, the pass by a hash of these values: the same
// groups.
func (f *fusedAgg) groupValues(lset labels.Labels, read, vals []string) {
	clear(read)
	j := 0
	lset.Range(func(l labels.Label) {
		for j < len(f.names) && f.names[j] < l.Name {
			j++
		}
		if j < len(f.names) && f.names[j] == l.Name {
			read[j] = l.Value
		}
	})
	for i := range f.copies {
		if v := read[f.at.from[i]]; v != "" && read[f.at.to[i]] != v {
			read[f.at.to[i]] = v
		}
	}
	for i, k := range f.at.grouping {
		vals[i] = read[k]
	}
}

// add adds v to g as the engine's aggregation does for a float.
func (f *fusedAgg) add(g *group, v float64) {
	if !g.seen {
		g.seen, g.value, g.mean, g.count = true, v, v, 1
		if f.op == parser.GROUP {
			g.value = 1
		}
		return
	}
	switch f.op {
	case parser.SUM:
		g.value, g.kahanC = kahansum.Inc(v, g.value, g.kahanC)
	case parser.AVG:
		g.count++
		if !g.incrementalMean {
			newV, newC := kahansum.Inc(v, g.value, g.kahanC)
			if !math.IsInf(newV, 0) {
				g.value, g.kahanC = newV, newC
				break
			}
			// The sum would overflow: the engine turns to the
			// incremental mean from here on.
			g.incrementalMean = true
			g.mean = g.value / (g.count - 1)
			g.kahanC /= g.count - 1
		}
		q := (g.count - 1) / g.count
		g.mean, g.kahanC = kahansum.Inc(v/g.count, q*g.mean, q*g.kahanC)
	case parser.MAX:
		if g.value < v || math.IsNaN(g.value) {
			g.value = v
		}
	case parser.MIN:
		if g.value > v || math.IsNaN(g.value) {
			g.value = v
		}
	case parser.COUNT:
		g.count++
	}
}

// result is g's value as the engine's aggregation ends it.
func (f *fusedAgg) result(g *group) float64 {
	switch f.op {
	case parser.AVG:
		if g.incrementalMean {
			return g.mean + g.kahanC
		}
		return g.value/g.count + g.kahanC/g.count
	case parser.COUNT:
		return g.count
	case parser.SUM:
		return g.value + g.kahanC
	}
	return g.value
}

// instantValue is the value the engine's instant selector takes of a series
// at ts (vectorSelectorSingle), and whether it has one; errNotFused when
// that is a native histogram. Unless below is NaN, a value not below it is
// none, and so is a histogram (belowIterator reads both as stale markers).
func instantValue(it *storage.MemoizedSeriesIterator, ts, lookback int64, below float64) (float64, bool, error) {
	v, ok, hist, err := seriesset.Instant(it, ts, lookback)
	bounded := !math.IsNaN(below)
	switch {
	case err != nil:
		return 0, false, err
	case hist && !bounded:
		return 0, false, errNotFused
	case !ok || bounded && !(v < below):
		return 0, false, nil
	}
	return v, true, nil
}

// fpoint is a float sample.
type fpoint struct {
	t int64
	f float64
}

// rangePoints appends to points the float samples of it in (mint, maxt],
// stale markers left out, as the engine's matrix selector reads them;
// errNotFused when a native histogram is among them.
func rangePoints(it chunkenc.Iterator, mint, maxt int64, points []fpoint) ([]fpoint, error) {
	for vt := it.Seek(mint + 1); vt != chunkenc.ValNone; vt = it.Next() {
		if it.AtT() > maxt {
			break
		}
		if vt != chunkenc.ValFloat {
			return nil, errNotFused
		}
		t, f := it.At()
		if t <= mint || value.IsStaleNaN(f) {
			continue
		}
		points = append(points, fpoint{t, f})
	}
	return points, it.Err()
}

// rate is the engine's rate of a counter's samples in the range r ending at
// ts (extrapolatedRate, floats, no start timestamps), and whether there is
// one (two samples or more).
func rate(points []fpoint, ts int64, r time.Duration) (float64, bool) {
	if len(points) < 2 {
		return 0, false
	}
	var (
		rangeStart         = ts - r.Milliseconds()
		rangeEnd           = ts
		numSamplesMinusOne = len(points) - 1
		firstT             = points[0].t
		lastT              = points[numSamplesMinusOne].t
		resultFloat        = points[numSamplesMinusOne].f - points[0].f
	)
	for i, curr := range points[1:] {
		if prev := points[i]; curr.f < prev.f {
			resultFloat += prev.f
		}
	}
	durationToStart := float64(firstT-rangeStart) / 1000
	durationToEnd := float64(rangeEnd-lastT) / 1000
	sampledInterval := float64(lastT-firstT) / 1000
	averageDurationBetweenSamples := sampledInterval / float64(numSamplesMinusOne)
	extrapolationThreshold := averageDurationBetweenSamples * 1.1
	if durationToStart >= extrapolationThreshold {
		durationToStart = averageDurationBetweenSamples / 2
	}
	// A counter is not extrapolated below zero.
	durationToZero := durationToStart
	if resultFloat > 0 && points[0].f >= 0 {
		durationToZero = sampledInterval * (points[0].f / resultFloat)
	}
	if durationToZero < durationToStart {
		durationToStart = durationToZero
	}
	if durationToEnd >= extrapolationThreshold {
		durationToEnd = averageDurationBetweenSamples / 2
	}
	factor := 1.0
	if sampledInterval != 0 {
		factor = (sampledInterval + durationToStart + durationToEnd) / sampledInterval
	}
	factor /= r.Seconds()
	return resultFloat * factor, true
}

// fusedQuantile is histogram_quantile(q, a) of classic buckets, where a
// is a fused `sum by (le, ...)` the memo holds (of, its id): the bucket sums
// the engine would read back from the memo, grouped by their labels but le
// as funcHistogramQuantile groups them (the same buckets in the same
// order), and each group's quantile from the engine's own BucketQuantile.
// The engine orders its result by a map's iteration; this one orders it by
// the groups' first buckets, one of the engine's orders.
type fusedQuantile struct {
	q  float64
	of int
}

// quantileCall matches histogram_quantile(<number>, <aggregation>).
func quantileCall(c *parser.Call) (float64, *parser.AggregateExpr, bool) {
	if c.Func.Name != "histogram_quantile" || len(c.Args) != 2 {
		return 0, nil, false
	}
	q, ok := promqlast.Unparen(c.Args[0]).(*parser.NumberLiteral)
	if !ok {
		return 0, nil, false
	}
	a, ok := promqlast.Unparen(c.Args[1]).(*parser.AggregateExpr)
	return q.Val, a, ok
}

// quantileOf reports whether a fusedQuantile can read f's result: sums by
// le of floats.
func quantileOf(f *fusedAgg) bool {
	return f != nil && f.op == parser.SUM && slices.Contains(f.grouping, model.BucketLabel)
}

// eval is the quantile of the bucket sums in, and false where in holds a
// native histogram (the engine's evaluation of a, where the fused pass
// could not) and the engine must answer.
func (fq *fusedQuantile) eval(in memoValue) (promql.Vector, bool) {
	if in.sums != nil {
		return fq.ofSums(in.sums), true
	}
	return fq.ofVector(in.vec)
}

// ofVector is the quantile of bucket sums the engine computed: grouped by
// their labels but le.
func (fq *fusedQuantile) ofVector(in promql.Vector) (promql.Vector, bool) {
	type histogram struct {
		metric  labels.Labels
		buckets promql.Buckets
	}
	var (
		order []*histogram
		index = map[string]*histogram{}
		buf   []byte
		lb    = labels.NewBuilder(labels.EmptyLabels())
	)
	for _, s := range in {
		if s.H != nil {
			return nil, false
		}
		le := s.Metric.Get(model.BucketLabel)
		upperBound, err := strconv.ParseFloat(le, 64)
		if err != nil || math.IsNaN(upperBound) {
			continue // the engine warns and skips it
		}
		buf = s.Metric.BytesWithoutLabels(buf, model.BucketLabel)
		h, ok := index[string(buf)]
		if !ok {
			lb.Reset(s.Metric)
			lb.Del(model.BucketLabel)
			h = &histogram{metric: lb.Labels()}
			index[string(buf)] = h
			order = append(order, h)
		}
		h.buckets = append(h.buckets, promql.Bucket{UpperBound: upperBound, Count: s.F})
	}
	out := make(promql.Vector, len(order))
	for i, h := range order {
		v, _, _, _, _, _ := promql.BucketQuantile(fq.q, h.buckets)
		var ts int64
		if len(in) > 0 {
			ts = in[0].T
		}
		out[i] = promql.Sample{Metric: h.metric, T: ts, F: v}
	}
	return out, true
}

// bucketSums is a fused bucket sum, `sum by (le, ...)`, as its quantiles
// read it: each group's le and value, and the label set of its histogram
// (its labels but le), built once a histogram. The engine's result holds a
// label set a bucket, which the quantile reads only to take le off again:
// at 500,000 series about 210,000 of them an evaluation, most of what the
// memo held while the canonical rules ran (docs/bench.md, s16-peak). The
// vector is built only for a reader that is not a quantile (vector).
type bucketSums struct {
	ts    int64
	hists []labels.Labels
	// buckets are the groups, in the pass's order (the engine's).
	buckets []bucketSum
}

// bucketSum is one group of a bucket sum.
type bucketSum struct {
	bucketBound
	hist int32 // index in hists
	f    float64
}

// bucketBound is an le value, and its upper bound as the quantile reads
// it (NaN: none, the quantile skips the bucket).
type bucketBound struct {
	le    string
	upper float64
}

// newSums returns an empty bucketSums of the capacities given, its
// histograms' index in sc.
func (sc *passScratch) newSums(ts int64, buckets, hists int) *bucketSums {
	if sc.hindex == nil {
		sc.hindex = make(map[uint64]int32, hists)
		sc.les = map[string]bucketBound{}
	}
	clear(sc.hindex)
	return &bucketSums{ts: ts, hists: make([]labels.Labels, 0, hists), buckets: make([]bucketSum, 0, buckets)}
}

// add adds a group whose grouping values are vals (f.le's included) to b,
// with its histogram (a new one when no group before had the same values
// but le). buf is scratch. The le values are kept once a scratch (a few
// dozen distinct), not as substrings of a series' labels, which would keep
// them in memory with the memo.
func (b *bucketSums) add(f *fusedAgg, sc *passScratch, vals []string, buf []byte, sb *labels.ScratchBuilder) {
	buf = buf[:0]
	for i, v := range vals {
		if i != f.le {
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		}
	}
	key := xxhash.Sum64(buf)
	hi, ok := sc.hindex[key]
	if !ok {
		hi = int32(len(b.hists)) //nolint:gosec // a pass's histograms fit
		sc.hindex[key] = hi
		b.hists = append(b.hists, f.groupLabels(vals, f.le, sb))
	}
	le := vals[f.le]
	bound, ok := sc.les[le]
	if !ok {
		bound = bucketBound{le: strings.Clone(le), upper: math.NaN()}
		// As funcHistogramQuantile reads le; an unparsable one (or none)
		// is skipped, with a warning the rules do not keep.
		if u, err := strconv.ParseFloat(le, 64); err == nil {
			bound.upper = u
		}
		sc.les[bound.le] = bound
	}
	b.buckets = append(b.buckets, bucketSum{bucketBound: bound, hist: hi})
}

// vector is the bucket sum as the engine returns it: a sample a group, in
// order, with its labels (the histogram's and le).
func (b *bucketSums) vector() promql.Vector {
	out := make(promql.Vector, len(b.buckets))
	lb := labels.NewBuilder(labels.EmptyLabels())
	for i, bk := range b.buckets {
		lb.Reset(b.hists[bk.hist])
		if bk.le != "" {
			lb.Set(model.BucketLabel, bk.le)
		}
		out[i] = promql.Sample{Metric: lb.Labels(), T: b.ts, F: bk.f}
	}
	return out
}

// ofSums is the quantile of a fused bucket sum, as ofVector computes it
// from its vector: the histograms in the order of their first bucket with
// an upper bound, each's buckets in the groups' order.
func (fq *fusedQuantile) ofSums(b *bucketSums) promql.Vector {
	var (
		place = make([]int32, len(b.hists)) // a histogram's index in order, +1 (0: none yet)
		count = make([]int32, len(b.hists))
		order []int32
	)
	for _, bk := range b.buckets {
		if math.IsNaN(bk.upper) {
			continue // the engine warns and skips it
		}
		if place[bk.hist] == 0 {
			order = append(order, bk.hist)
			place[bk.hist] = int32(len(order)) //nolint:gosec // a pass's histograms fit
		}
		count[bk.hist]++
	}
	// Every histogram's buckets in one array (BucketQuantile sorts and
	// adjusts them in place: this call's own), each a run of it.
	start := make([]int32, len(order)+1)
	for i, h := range order {
		start[i+1] = start[i] + count[h]
	}
	all := make(promql.Buckets, start[len(order)])
	next := slices.Clone(start[:len(order)])
	for _, bk := range b.buckets {
		if math.IsNaN(bk.upper) {
			continue
		}
		k := place[bk.hist] - 1
		all[next[k]] = promql.Bucket{UpperBound: bk.upper, Count: bk.f}
		next[k]++
	}
	out := make(promql.Vector, len(order))
	for i, h := range order {
		v, _, _, _, _, _ := promql.BucketQuantile(fq.q, all[start[i]:start[i+1]])
		out[i] = promql.Sample{Metric: b.hists[h], T: b.ts, F: v}
	}
	return out
}
