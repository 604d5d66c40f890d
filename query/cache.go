package query

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/stats"
)

// CacheSource is what the range-query results cache needs to know of the
// data it caches answers over (tiers.Stitched).
type CacheSource interface {
	// Generation changes whenever data a query may read could have changed
	// other than by samples appended at or after the freshness horizon (now
	// minus the cache's freshness): a late sample, a block or partition
	// written, compacted or deleted. Two equal generations mean that every
	// answer over data older than the horizon is the same.
	Generation() uint64
	// RawFrom is the oldest time (ms) from which no tier but raw serves
	// any part of a selection of a step at most maxStep (ms). Answers over
	// rollups are not cached.
	RawFrom(maxStep int64) int64
	// Derived reports whether a selection with these matchers may read
	// series that are not appended as samples but derived later (the
	// diagnosis engine's minute-only baselines): their answers may change
	// without a change of Generation.
	Derived(ms []*labels.Matcher) bool
}

// WithResultsCache caches range query results over src (see
// Config.ResultsCacheSize). Without it no result is cached.
func WithResultsCache(src CacheSource) Option {
	return func(o *options) { o.cache = src }
}

// cacheEngine keeps the steps of range query results that can no longer
// change and evaluates only the steps after them when the query comes again,
// as a dashboard that refreshes every few seconds asks it: a one-hour panel
// evaluates its last minutes instead of its hour. Thanos and Cortex put this
// in a query-frontend in front of the store, VictoriaMetrics in its rollup
// result cache; Prometheus has none.
//
// A step is final when every sample its evaluation reads is older than the
// freshness horizon (now minus freshness): samples appended from then on
// only reach later steps. What else could change a final step (a late
// sample appended behind the horizon, a block compacted or deleted, a rollup
// partition written) changes the source's Generation, and an entry of
// another generation is never used. The answer is the whole query's, step
// for step: the engine evaluates each step of a range query on its own, so
// the cached steps and the evaluated ones join exactly as the split
// engine's parts do (splitEngine). Only what is certain to hold is cached:
//   - queries whose every selection no tier but raw serves (RawFrom:
//     data newer than raw's start with a step too fine for the minute
//     tier, or newer than the rollup tiers' newest partition), none
//     reading a derived series;
//   - queries naming no absolute time and no part of the range: no @, no
//     duration expression, none of start(), end(), range();
//   - answers without warnings or infos (an annotation cannot be split by
//     step) and evaluated without a change of generation.
//
// Safe for concurrent use.
type cacheEngine struct {
	promql.QueryEngine // evaluates what the cache does not hold (the split engine)
	parser             parser.Parser
	src                CacheSource
	freshness          time.Duration
	lookback           time.Duration // the engine's default lookback delta
	subqueryStep       time.Duration // the step of a subquery written without one
	maxBytes           int64
	maxSamples         int
	now                func() time.Time

	mu      sync.Mutex
	entries map[cacheKey]*list.Element // of *cacheEntry
	lru     list.List                  // most recently used first
	bytes   int64

	hits, partial, misses, bypassed prometheus.Counter
	stepsServed                     prometheus.Counter
	size, held                      prometheus.Gauge
}

// cacheKey names the answers one entry may hold: the same query string,
// step, lookback delta and grid (start modulo step).
type cacheKey struct {
	qs       string
	step     int64
	phase    int64
	lookback time.Duration
}

// cacheEntry is the final steps [start, end] of a query's answer.
type cacheEntry struct {
	key        cacheKey
	start, end int64
	generation uint64
	mat        promql.Matrix // owned by the entry: never pooled
	bytes      int64
}

func newCacheEngine(inner promql.QueryEngine, p parser.Parser, src CacheSource, cfg Config, reg prometheus.Registerer) *cacheEngine {
	e := &cacheEngine{
		QueryEngine: inner, parser: p, src: src,
		freshness: cfg.ResultsCacheFreshness, lookback: cfg.LookbackDelta, subqueryStep: cfg.NoStepSubqueryInterval,
		maxBytes: cfg.ResultsCacheSize, maxSamples: cfg.MaxSamples,
		now:     time.Now,
		entries: map[cacheKey]*list.Element{},
	}
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_query_results_cache_lookups_total",
		Help: "Range queries looked up in the results cache, by result: hit (every step from the cache), partial (the older steps from the cache, the newer evaluated), miss (a cacheable query evaluated whole), bypass (a query the cache does not hold: see docs/api.md).",
	}, []string{"result"})
	e.hits, e.partial = lookups.WithLabelValues("hit"), lookups.WithLabelValues("partial")
	e.misses, e.bypassed = lookups.WithLabelValues("miss"), lookups.WithLabelValues("bypass")
	e.stepsServed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "strata_query_results_cache_steps_served_total",
		Help: "Steps of range queries answered from the results cache instead of evaluated.",
	})
	e.size = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "strata_query_results_cache_bytes",
		Help: "Estimated bytes the range-query results cache holds (at most --query.results-cache-size).",
	})
	e.held = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "strata_query_results_cache_entries",
		Help: "Range query answers the results cache holds.",
	})
	if reg != nil {
		reg.MustRegister(lookups, e.stepsServed, e.size, e.held)
	}
	return e
}

// cachePlan is what the cache decided for one range query.
type cachePlan struct {
	key            cacheKey
	start, end     int64 // the query's steps (ms)
	step           int64
	lastFinal      int64 // the newest final step (< start: none)
	generation     uint64
	cached         promql.Matrix // the entry's steps [start, cachedEnd]
	cachedEnd      int64         // < start: none from the cache
	servedByCached int64         // steps the cache answers
}

// NewRangeQuery implements promql.QueryEngine.
func (e *cacheEngine) NewRangeQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, start, end time.Time, interval time.Duration) (promql.Query, error) {
	plan, ok := e.plan(opts, qs, start, end, interval)
	if !ok {
		e.bypassed.Inc()
		return e.QueryEngine.NewRangeQuery(ctx, q, opts, qs, start, end, interval)
	}
	cq := &cachedQuery{e: e, plan: plan, qs: qs, start: start, end: end, interval: interval}
	if plan.cachedEnd < plan.end {
		from := start
		if plan.cachedEnd >= plan.start {
			from = time.UnixMilli(plan.cachedEnd + plan.step)
		}
		fresh, err := e.QueryEngine.NewRangeQuery(ctx, q, opts, qs, from, end, interval)
		if err != nil {
			return nil, err
		}
		cq.fresh = fresh
	}
	return cq, nil
}

// plan decides whether the query is cacheable and what of it the cache
// holds.
func (e *cacheEngine) plan(opts promql.QueryOpts, qs string, start, end time.Time, interval time.Duration) (cachePlan, bool) {
	// The engine evaluates at whole milliseconds from start, its
	// sub-millisecond part dropped (the API takes times as float seconds):
	// so does the cache. A step of a fraction of a millisecond is left to
	// the engine.
	step := interval.Milliseconds()
	s, en := start.UnixMilli(), end.UnixMilli()
	if step <= 0 || en < s || interval != time.Duration(step)*time.Millisecond {
		return cachePlan{}, false
	}
	lookback := e.lookback
	if opts != nil && opts.LookbackDelta() > 0 {
		lookback = opts.LookbackDelta()
	}
	behind, ahead, maxStep, ok := e.reach(qs, lookback)
	if !ok {
		return cachePlan{}, false
	}
	// Read the generation before the bounds and the data: a change after
	// it makes the answer unstorable (cachedQuery.Exec), never wrong.
	gen := e.src.Generation()
	if s-behind < e.src.RawFrom(max(step, maxStep)) {
		return cachePlan{}, false
	}
	horizon := e.now().UnixMilli() - e.freshness.Milliseconds()
	p := cachePlan{
		key:        cacheKey{qs: qs, step: step, phase: ((s % step) + step) % step, lookback: lookback},
		start:      s,
		end:        en,
		step:       step,
		generation: gen,
		lastFinal:  s - step,
		cachedEnd:  s - step,
	}
	// A step t is final when everything it reads is older than the
	// horizon: t+ahead < horizon.
	if last := horizon - ahead - 1; last >= s {
		p.lastFinal = s + (last-s)/step*step
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	el, found := e.entries[p.key]
	if !found {
		return p, true
	}
	ent := el.Value.(*cacheEntry)
	if ent.generation != gen {
		e.drop(el)
		return p, true
	}
	if ent.start > s || ent.end < s {
		return p, true
	}
	e.lru.MoveToFront(el)
	p.cachedEnd = min(ent.end, en)
	p.cached = sliceMatrix(ent.mat, s, p.cachedEnd)
	p.servedByCached = (p.cachedEnd-s)/step + 1
	return p, true
}

// reach returns how far before and after a step the query reads data (ms)
// and the longest of its subqueries' steps, and false when the query is not
// cacheable: it does not parse, names an absolute time or a part of the
// range, uses a duration expression, or may read a derived series.
func (e *cacheEngine) reach(qs string, lookback time.Duration) (behind, ahead, maxStep int64, ok bool) {
	expr, err := e.parser.ParseExpr(qs)
	if err != nil {
		return 0, 0, 0, false
	}
	ok = true
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			ok = ok && n.Timestamp == nil && n.StartOrEnd == 0 && n.OriginalOffsetExpr == nil && !e.src.Derived(n.LabelMatchers)
		case *parser.MatrixSelector:
			ok = ok && n.RangeExpr == nil
		case *parser.SubqueryExpr:
			ok = ok && n.Timestamp == nil && n.StartOrEnd == 0 && n.RangeExpr == nil && n.StepExpr == nil && n.OriginalOffsetExpr == nil
			step := n.Step
			if step == 0 {
				step = e.subqueryStep
			}
			maxStep = max(maxStep, step.Milliseconds())
		case *parser.DurationExpr:
			ok = false
		case *parser.Call:
			switch n.Func.Name {
			case "start", "end", "range":
				ok = false
			}
		}
		return nil
	})
	if !ok {
		return 0, 0, 0, false
	}
	// The data one step at time 0 reads, as the engine computes it for its
	// queriers.
	mint, maxt := promql.FindMinMaxTime(&parser.EvalStmt{Expr: expr, Start: time.UnixMilli(0), End: time.UnixMilli(0), LookbackDelta: lookback})
	if mint > maxt { // no selector: a constant expression
		return 0, 0, maxStep, true
	}
	return max(-mint, 0), max(maxt, 0), maxStep, true
}

// drop removes an entry; e.mu held.
func (e *cacheEngine) drop(el *list.Element) {
	ent := e.lru.Remove(el).(*cacheEntry)
	delete(e.entries, ent.key)
	e.bytes -= ent.bytes
	e.size.Set(float64(e.bytes))
	e.held.Set(float64(len(e.entries)))
}

// store keeps the final steps [p.start, p.lastFinal] of the answer mat,
// copied, unless the generation changed while it was evaluated.
func (e *cacheEngine) store(p cachePlan, mat promql.Matrix) {
	if p.lastFinal < p.start || e.src.Generation() != p.generation {
		return
	}
	last := min(p.lastFinal, p.end)
	if p.cachedEnd >= last { // nothing new to keep
		return
	}
	kept, bytes := copyMatrix(mat, p.start, last)
	bytes += int64(len(p.key.qs)) + 128
	if bytes > e.maxBytes/4 { // one answer may not take the cache
		return
	}
	ent := &cacheEntry{key: p.key, start: p.start, end: last, generation: p.generation, mat: kept, bytes: bytes}
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.entries[p.key]; ok {
		old := el.Value.(*cacheEntry)
		if old.generation == p.generation && old.start <= p.start && old.end >= last {
			return // another query stored as much meanwhile
		}
		e.drop(el)
	}
	e.entries[p.key] = e.lru.PushFront(ent)
	e.bytes += bytes
	for e.bytes > e.maxBytes {
		e.drop(e.lru.Back())
	}
	e.size.Set(float64(e.bytes))
	e.held.Set(float64(len(e.entries)))
}

// sliceMatrix returns the points of m at [from, to], sharing m's slices;
// series without a point there are left out.
func sliceMatrix(m promql.Matrix, from, to int64) promql.Matrix {
	out := make(promql.Matrix, 0, len(m))
	for _, s := range m {
		fs := pointsIn(s.Floats, from, to, func(p promql.FPoint) int64 { return p.T })
		hs := pointsIn(s.Histograms, from, to, func(p promql.HPoint) int64 { return p.T })
		if len(fs) == 0 && len(hs) == 0 {
			continue
		}
		out = append(out, promql.Series{Metric: s.Metric, Floats: fs, Histograms: hs, DropName: s.DropName})
	}
	return out
}

// pointsIn returns the run of ps (in time order) at [from, to].
func pointsIn[P any](ps []P, from, to int64, ts func(P) int64) []P {
	i := 0
	for i < len(ps) && ts(ps[i]) < from {
		i++
	}
	j := i
	for j < len(ps) && ts(ps[j]) <= to {
		j++
	}
	if i == j {
		return nil
	}
	return ps[i:j:j]
}

// copyMatrix copies the points of m at [from, to] into new slices (the
// engine returns a query's slices to its pools when the query is closed)
// and estimates the bytes the copy holds.
func copyMatrix(m promql.Matrix, from, to int64) (promql.Matrix, int64) {
	view := sliceMatrix(m, from, to)
	var bytes int64
	for i := range view {
		s := &view[i]
		s.Floats = append([]promql.FPoint(nil), s.Floats...)
		hs := make([]promql.HPoint, len(s.Histograms))
		for k, h := range s.Histograms {
			hs[k] = promql.HPoint{T: h.T, H: h.H.Copy()}
			bytes += int64(h.H.Size())
		}
		if len(hs) == 0 {
			hs = nil
		}
		s.Histograms = hs
		bytes += 64 + int64(s.Metric.ByteSize()) + int64(len(s.Floats))*16 + int64(len(s.Histograms))*16
	}
	return view, bytes
}

// cachedQuery is a range query answered from the cache's steps and, after
// them, an evaluation of the rest.
type cachedQuery struct {
	e          *cacheEngine
	plan       cachePlan
	qs         string
	start, end time.Time
	interval   time.Duration
	fresh      promql.Query // nil: every step from the cache
}

// Exec implements promql.Query.
func (q *cachedQuery) Exec(ctx context.Context) *promql.Result {
	p := q.plan
	if q.fresh == nil {
		q.e.hits.Inc()
		q.e.stepsServed.Add(float64(p.servedByCached))
		return &promql.Result{Value: p.cached}
	}
	res := q.fresh.Exec(ctx)
	if res.Err != nil {
		return res
	}
	mat, err := res.Matrix()
	if err != nil {
		return res
	}
	if p.servedByCached > 0 {
		q.e.partial.Inc()
		q.e.stepsServed.Add(float64(p.servedByCached))
		if mat, err = joinMatrices([]*promql.Result{{Value: p.cached}, {Value: mat}}, q.e.maxSamples); err != nil {
			return &promql.Result{Err: err, Warnings: res.Warnings}
		}
	} else {
		q.e.misses.Inc()
	}
	if len(res.Warnings) == 0 {
		q.e.store(p, mat)
	}
	return &promql.Result{Value: mat, Warnings: res.Warnings}
}

// Close implements promql.Query. The cache's own slices are never pooled.
func (q *cachedQuery) Close() {
	if q.fresh != nil {
		q.fresh.Close()
	}
}

// Statement implements promql.Query: the whole range's statement.
func (q *cachedQuery) Statement() parser.Statement {
	if q.fresh == nil {
		expr, err := q.e.parser.ParseExpr(q.qs)
		if err != nil {
			return nil
		}
		return &parser.EvalStmt{Expr: expr, Start: q.start, End: q.end, Interval: q.interval}
	}
	return wholeRange(q.fresh.Statement(), q.start, q.end)
}

// Stats implements promql.Query: those of the evaluated steps (none when
// the cache answered every step).
func (q *cachedQuery) Stats() *stats.Statistics {
	if q.fresh == nil {
		return &stats.Statistics{Timers: stats.NewQueryTimers(), Samples: stats.NewQuerySamples(false)}
	}
	return q.fresh.Stats()
}

// Cancel implements promql.Query.
func (q *cachedQuery) Cancel() {
	if q.fresh != nil {
		q.fresh.Cancel()
	}
}

// String implements promql.Query.
func (q *cachedQuery) String() string { return q.qs }
