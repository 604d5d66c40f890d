package storeapi

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/prometheus/prometheus/util/kahansum"
	"github.com/thanos-io/thanos/pkg/api/query/querypb"
	"github.com/thanos-io/thanos/pkg/store/storepb/prompb"

	"github.com/strata-dev/strata/internal/seriesset"
)

// The fused path. Evaluating a pushed aggregation's selector (aggregate.go)
// builds the engine's matrix: for every series, the sample each step
// selects; the aggregation then reads it again, step by step. The fused
// path does both in one pass and builds no matrix: for each series, in the
// order the select returns them, it selects the sample of each step as the
// engine does (the same iterator, storage.MemoizedSeriesIterator, sought to
// each step: the lookback, stale markers, and whatever samples the stitched
// tiers make of their windows) and adds it straight into its group's
// accumulator for that step. Each accumulator receives the same samples in
// the same order as the engine's aggregation (which goes step by step, each
// step's series in the select's order), so the answers are the engine's to
// the bit.
//
// The engine itself runs the request, over a queryable whose selects do
// this work and hand the engine no series: the engine's own hints, querier
// range, timeout and concurrency gate apply, and a range query the query
// package's engine splits in parts runs one fused pass a part (each part's
// steps, in its own select's order). The accumulators of `sum` and `count`
// are computed together, so the two halves of a distributed avg share one
// pass (graceCache, as shared evaluations are shared); min and max each
// have their own.
//
// Not fused, and evaluated as before (aggregate.go): selectors with an
// offset or an @ modifier (anchored or smoothed ones too), a native
// histogram among the samples selected, and aggregations whose groups times
// steps exceed maxFusedCells.

// maxFusedCells bounds a fused pass's accumulators (groups times steps, 24
// bytes each: 96 MiB). Past it, the selector's evaluation path answers,
// under the engine's sample limit.
const maxFusedCells = 4 << 20

// fusable reports whether a selector's samples are what the fused path
// selects: those at each step's time, not offset nor pinned.
func fusable(vs *parser.VectorSelector) bool {
	return vs.OriginalOffset == 0 && vs.OriginalOffsetExpr == nil && vs.Timestamp == nil && vs.StartOrEnd == 0 &&
		!vs.Anchored && !vs.Smoothed
}

// fusedFamily is the accumulators an op is answered from: sum's and
// count's are computed together.
func fusedFamily(op parser.ItemType) parser.ItemType {
	if op == parser.COUNT {
		return parser.SUM
	}
	return op
}

// fusedKey is what makes two requests' fused passes alike.
type fusedKey struct {
	evalKey
	grouping string
	family   parser.ItemType
}

// fusedAcc is one group's accumulator at one step: value (sum's running
// sum, or min's or max's value) with sum's compensation, and the samples
// added (0: none yet).
type fusedAcc struct {
	value, comp float64
	count       float64
}

// fusedPart is one select's pass: its steps first..first+n-1 (indices into
// the query's steps) and its groups' accumulators, group-major.
type fusedPart struct {
	first, n int
	groups   []labels.Labels
	acc      [][]fusedAcc // acc[g][k]: group g at step first+k
	points   int64        // samples selected
	warnings annotations.Annotations
}

// fusedResult is a fused pass over a query's steps.
type fusedResult struct {
	start, step int64
	parts       []*fusedPart
	warnings    annotations.Annotations
	stats       *querypb.QueryStats
}

// fuser runs a request's fused passes: one per select the engine makes.
type fuser struct {
	family           parser.ItemType
	grouping         []string // sorted
	start, end, step int64
	lookback         int64

	mu    sync.Mutex
	parts []*fusedPart
}

// fusedExec answers a pushed aggregation from a fused pass, shared by the
// requests running at the same time that need the same one, or with
// fallback where the pass cannot.
func (qs *QueryServer) fusedExec(a pushedAggregation, ev evaluation, start, end time.Time, step time.Duration, fallback execFunc) execFunc {
	return func(ctx context.Context, q storage.Queryable, opts promql.QueryOpts) (result, error) {
		drop := slices.Clone(ev.replicaLabels)
		slices.Sort(drop)
		key := fusedKey{
			evalKey: evalKey{
				selector: a.selector, start: start.UnixMilli(), end: end.UnixMilli(), step: step.Milliseconds(),
				lookback: opts.LookbackDelta(), drop: join(drop), shard: ev.shard.String(),
			},
			grouping: join(a.grouping), family: fusedFamily(a.op),
		}
		var (
			r   *fusedResult
			err error
		)
		e, first := qs.fused.acquire(key)
		if e == nil {
			// As many passes held as may be: one of its own, not shared.
			first = true
			r, err = qs.fuse(ctx, q, opts, a, ev.query, start, end, step)
		} else {
			defer qs.fused.release(e)
			if first {
				qs.fused.finish(e)(qs.fuse(ctx, q, opts, a, ev.query, start, end, step))
			}
			r, err = qs.fused.wait(ctx, e, first)
		}
		if err != nil {
			if fallsBack(ctx, err, first) {
				return fallback(ctx, q, opts)
			}
			return result{}, err
		}
		qs.s.queryAggregationsFused.Inc()
		return result{series: r.series(a.op), warnings: maps.Clone(r.warnings), stats: r.stats}, nil
	}
}

// fuse runs the request's query in the engine over a queryable whose
// selects are fused passes, and returns the passes.
func (qs *QueryServer) fuse(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, a pushedAggregation, query string, start, end time.Time, step time.Duration) (*fusedResult, error) {
	lookback := opts.LookbackDelta()
	if lookback <= 0 {
		var err error
		if lookback, err = qs.engineLookback(ctx); err != nil {
			return nil, err
		}
	}
	f := &fuser{
		family: fusedFamily(a.op), grouping: a.grouping,
		start: start.UnixMilli(), end: end.UnixMilli(), step: step.Milliseconds(), lookback: lookback.Milliseconds(),
	}
	qry, err := qs.engine.NewRangeQuery(ctx, &fusingQueryable{q: q, f: f}, opts, query, start, end, step)
	if err != nil {
		return nil, err
	}
	res := qry.Exec(ctx)
	qry.Close()
	if res.Err != nil {
		return nil, res.Err
	}
	if m, ok := res.Value.(promql.Matrix); !ok || len(m) > 0 {
		return nil, errNotAggregable // the engine saw series the passes did not take
	}
	return f.result(res.Warnings)
}

// engineLookback is the engine's default lookback delta, read once from the
// select of an instant query (Start is the query's time minus the lookback,
// plus 1 ms).
func (qs *QueryServer) engineLookback(ctx context.Context) (time.Duration, error) {
	qs.lookbackMu.Lock()
	defer qs.lookbackMu.Unlock()
	if qs.lookback > 0 {
		return qs.lookback, nil
	}
	const at = int64(1) << 40
	rec := &hintsRecorder{}
	qry, err := qs.engine.NewInstantQuery(ctx, rec, promql.NewPrometheusQueryOpts(false, 0, nil), "strata_lookback_probe", time.UnixMilli(at))
	if err != nil {
		return 0, err
	}
	res := qry.Exec(ctx)
	qry.Close()
	if res.Err != nil {
		return 0, res.Err
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.hints) != 1 || rec.hints[0] == nil || at-rec.hints[0].Start+1 <= 0 {
		return 0, errNotAggregable
	}
	qs.lookback = time.Duration(at-rec.hints[0].Start+1) * time.Millisecond
	return qs.lookback, nil
}

// hintsRecorder records its selects' hints and returns no series.
type hintsRecorder struct {
	mu    sync.Mutex
	hints []*storage.SelectHints
}

func (r *hintsRecorder) Querier(int64, int64) (storage.Querier, error) { return r, nil }

func (r *hintsRecorder) Select(_ context.Context, _ bool, hints *storage.SelectHints, _ ...*labels.Matcher) storage.SeriesSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	var h *storage.SelectHints
	if hints != nil {
		c := *hints
		h = &c
	}
	r.hints = append(r.hints, h)
	return storage.EmptySeriesSet()
}

func (r *hintsRecorder) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (r *hintsRecorder) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (r *hintsRecorder) Close() error { return nil }

// fusingQueryable is q with every select a fused pass: the engine gets no
// series.
type fusingQueryable struct {
	q storage.Queryable
	f *fuser
}

func (fq *fusingQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := fq.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return &fusingQuerier{Querier: q, f: fq.f}, nil
}

type fusingQuerier struct {
	storage.Querier
	f *fuser
}

func (q *fusingQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	if err := q.f.pass(ctx, q.Querier, sortSeries, hints, ms); err != nil {
		return storage.ErrSeriesSet(err)
	}
	return storage.EmptySeriesSet()
}

// pass runs one select's fused pass. The select covers the steps from its
// hints' Start plus the lookback (less 1 ms) to its End (which need not be
// a step), as the engine asks for them (getTimeRangesForSelector).
func (f *fuser) pass(ctx context.Context, q storage.Querier, sortSeries bool, hints *storage.SelectHints, ms []*labels.Matcher) error {
	if hints == nil || hints.Range != 0 || hints.Step != f.step || f.step <= 0 {
		return errNotAggregable
	}
	firstT := hints.Start + f.lookback - 1
	if firstT < f.start || hints.End > f.end || hints.End < firstT || (firstT-f.start)%f.step != 0 {
		return errNotAggregable
	}
	p := &fusedPart{first: int((firstT - f.start) / f.step), n: int((hints.End-firstT)/f.step) + 1}
	set := q.Select(ctx, sortSeries, hints, ms...)
	var (
		index = map[string]int{}
		lb    = labels.NewBuilder(labels.EmptyLabels())
		buf   []byte
		chk   chunkenc.Iterator
		it    = storage.NewMemoizedEmptyIterator(f.lookback)
	)
	for set.Next() {
		if err := ctx.Err(); err != nil {
			return contextErr(err)
		}
		s := set.At()
		l := s.Labels()
		buf = l.BytesWithLabels(buf[:0], f.grouping...)
		g, ok := index[string(buf)]
		if !ok {
			if (len(p.groups)+1)*p.n > maxFusedCells {
				return errNotAggregable
			}
			g = len(p.groups)
			index[string(buf)] = g
			lb.Reset(l)
			lb.Keep(f.grouping...)
			p.groups = append(p.groups, lb.Labels())
			p.acc = append(p.acc, make([]fusedAcc, p.n))
		}
		chk = s.Iterator(chk)
		it.Reset(chk)
		if err := f.walk(it, p, p.acc[g], firstT); err != nil {
			return err
		}
	}
	if err := set.Err(); err != nil {
		return err
	}
	p.warnings = set.Warnings()
	f.mu.Lock()
	f.parts = append(f.parts, p)
	f.mu.Unlock()
	return nil
}

// walk adds the sample a series' iterator selects at each of p's steps
// (from firstT) to acc, that step's accumulator of the series' group, as
// the engine's vectorSelectorSingle selects it and its aggregation adds it.
func (f *fuser) walk(it *storage.MemoizedSeriesIterator, p *fusedPart, acc []fusedAcc, firstT int64) error {
	ts := firstT
	for k := range acc {
		v, ok, hist, err := seriesset.Instant(it, ts, f.lookback)
		switch {
		case err != nil:
			return err
		case hist:
			return errNotAggregable
		}
		ts += f.step
		if !ok {
			continue
		}
		p.points++
		c := &acc[k]
		if c.count == 0 {
			*c = fusedAcc{value: v, count: 1}
			continue
		}
		c.count++
		switch f.family {
		case parser.SUM:
			c.value, c.comp = kahansum.Inc(v, c.value, c.comp)
		case parser.MAX, parser.MIN:
			c.value = extremum(f.family, c.value, v)
		}
	}
	return nil
}

// contextErr is the engine's error for an ended context.
func contextErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return promql.ErrQueryTimeout("expression evaluation")
	}
	return promql.ErrQueryCanceled("expression evaluation")
}

// result checks that the parts cover the query's steps, each step once (a
// lookback other than the engine's would show here), and gathers their
// warnings and sample statistics (those of the selector's evaluation: every
// sample selected, all held at once).
func (f *fuser) result(warnings annotations.Annotations) (*fusedResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := slices.Clone(f.parts)
	slices.SortFunc(parts, func(a, b *fusedPart) int { return a.first - b.first })
	r := &fusedResult{start: f.start, step: f.step, parts: parts, warnings: warnings, stats: &querypb.QueryStats{}}
	next := 0
	for _, p := range parts {
		if p.first != next {
			return nil, errNotAggregable // two selects for the same steps, or steps no select covers
		}
		next = p.first + p.n
		r.warnings.Merge(p.warnings)
		r.stats.SamplesTotal += p.points
	}
	if next != int((f.end-f.start)/f.step)+1 {
		return nil, errNotAggregable
	}
	r.stats.PeakSamples = r.stats.SamplesTotal
	return r, nil
}

// series is op's answer in the Query API's form, sorted by labels as a
// range query's.
func (r *fusedResult) series(op parser.ItemType) []*prompb.TimeSeries {
	type group struct {
		l      labels.Labels
		points int
		accs   [][]fusedAcc // a part's, with its first step
		firsts []int
	}
	var (
		groups []*group
		index  = map[string]*group{}
		buf    []byte
	)
	for _, p := range r.parts {
		for gi, l := range p.groups {
			buf = l.Bytes(buf)
			g := index[string(buf)]
			if g == nil {
				g = &group{l: l}
				index[string(buf)] = g
				groups = append(groups, g)
			}
			for _, c := range p.acc[gi] {
				if c.count > 0 {
					g.points++
				}
			}
			g.accs, g.firsts = append(g.accs, p.acc[gi]), append(g.firsts, p.first)
		}
	}
	groups = slices.DeleteFunc(groups, func(g *group) bool { return g.points == 0 })
	slices.SortFunc(groups, func(a, b *group) int { return labels.Compare(a.l, b.l) })
	out := make([]*prompb.TimeSeries, len(groups))
	for i, g := range groups {
		samples := make([]prompb.Sample, 0, g.points)
		for j, acc := range g.accs {
			for k := range acc {
				c := &acc[k]
				if c.count == 0 {
					continue
				}
				v := c.value
				switch op {
				case parser.SUM:
					v += c.comp
				case parser.COUNT:
					v = c.count
				}
				samples = append(samples, prompb.Sample{Timestamp: r.start + int64(g.firsts[j]+k)*r.step, Value: v})
			}
		}
		out[i] = &prompb.TimeSeries{Labels: ZLabels(g.l), Samples: samples}
	}
	return out
}
