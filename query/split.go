package query

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/prometheus/prometheus/util/stats"

	"github.com/strata-dev/strata/internal/parallel"
)

// minStepsPerPart is the fewest evaluation steps a part of a split range
// query gets: below it, the fixed cost of a part (parsing, selecting from
// every tier, one more partition file at the boundary) outweighs running it
// on another core. A dashboard's 6-hour panel at a 15 s step (1,440 steps)
// stays whole; a 30-day panel at 5 m (8,640 steps) is split.
const minStepsPerPart = 1000

// splitEngine evaluates a long range query as consecutive parts of its
// steps, in parallel, and joins the results. Prometheus evaluates a range
// query on one goroutine, so a query that reads a month of rollups used one
// core for its evaluation however many the machine has; Thanos and Cortex
// split by time in a separate query-frontend, Strata does it in process.
//
// A range query's value at each step depends only on the data its selectors
// see from that step, so the parts' results are exactly the whole query's
// split by step. The exceptions are the @ start() and @ end() modifiers,
// which name the whole range: such queries are not split. Instant queries
// (and so rule evaluation) never are.
type splitEngine struct {
	promql.QueryEngine
	parser     parser.Parser
	parts      int   // most parts a query is split into
	minSteps   int64 // fewest steps per part (minStepsPerPart; tests lower it)
	maxSamples int
}

// NewRangeQuery implements promql.QueryEngine.
func (e *splitEngine) NewRangeQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, start, end time.Time, interval time.Duration) (promql.Query, error) {
	steps := int64(0)
	if interval > 0 && !end.Before(start) {
		steps = int64(end.Sub(start)/interval) + 1
	}
	// Two steps at least: a part of one step would be an instant query, whose
	// step() is 0.
	n := min(int64(e.parts), steps/max(e.minSteps, 2))
	if n < 2 || !e.splittable(qs) {
		return e.QueryEngine.NewRangeQuery(ctx, q, opts, qs, start, end, interval)
	}
	sq := &splitQuery{qs: qs, start: start, end: end, interval: interval, maxSamples: e.maxSamples}
	for k := range n { // part k: steps [k*steps/n, (k+1)*steps/n), sizes within one of each other
		first, last := k*steps/n, (k+1)*steps/n-1
		part, err := e.QueryEngine.NewRangeQuery(ctx, q, opts, qs, start.Add(time.Duration(first)*interval), start.Add(time.Duration(last)*interval), interval)
		if err != nil {
			sq.Close()
			return nil, err
		}
		sq.parts = append(sq.parts, part)
	}
	return sq, nil
}

// splittable reports whether qs parses and names nothing of the whole
// range: neither @ start() nor @ end(), nor the duration function range(),
// nor the functions start(), end() and range().
// A query that does not parse is left to the engine, which reports the
// error as it always does.
func (e *splitEngine) splittable(qs string) bool {
	expr, err := e.parser.ParseExpr(qs)
	if err != nil {
		return false
	}
	ok := true
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			ok = ok && n.StartOrEnd == 0 && !usesRange(n.OriginalOffsetExpr)
		case *parser.MatrixSelector:
			ok = ok && !usesRange(n.RangeExpr)
		case *parser.SubqueryExpr:
			ok = ok && n.StartOrEnd == 0 && !usesRange(n.RangeExpr) && !usesRange(n.StepExpr) && !usesRange(n.OriginalOffsetExpr)
		case *parser.DurationExpr:
			ok = ok && !usesRange(n)
		case *parser.Call:
			// The experimental query-context functions, folded into
			// numbers from the whole range before evaluation.
			switch n.Func.Name {
			case "start", "end", "range":
				ok = false
			}
		}
		return nil
	})
	return ok
}

// usesRange reports whether a duration expression calls range(), the
// query's whole range.
func usesRange(d *parser.DurationExpr) bool {
	if d == nil {
		return false
	}
	if d.Op == parser.RANGE {
		return true
	}
	l, _ := d.LHS.(*parser.DurationExpr)
	r, _ := d.RHS.(*parser.DurationExpr)
	return usesRange(l) || usesRange(r)
}

// splitQuery is a range query run as parts, each a range query over
// consecutive steps.
type splitQuery struct {
	qs         string
	start, end time.Time
	interval   time.Duration
	maxSamples int
	parts      []promql.Query
	slowest    int // the part whose timers Stats reports
}

// Exec runs the parts in parallel and joins their matrices series by
// series. The first part (in time order) that fails fails the query, with
// that part's error and the warnings gathered so far.
func (q *splitQuery) Exec(ctx context.Context) *promql.Result {
	results := make([]*promql.Result, len(q.parts))
	took := make([]time.Duration, len(q.parts))
	// The parts run at once: each reads with its share of the CPUs.
	ctx = parallel.WithBudget(ctx, parallel.Budget(ctx)/len(q.parts))
	var wg sync.WaitGroup
	for i, p := range q.parts {
		wg.Go(func() {
			t0 := time.Now()
			results[i] = p.Exec(ctx)
			took[i] = time.Since(t0)
			if results[i].Err != nil {
				for _, other := range q.parts {
					other.Cancel()
				}
			}
		})
	}
	wg.Wait()
	q.slowest = 0
	for i := range took {
		if took[i] > took[q.slowest] {
			q.slowest = i
		}
	}
	var warnings annotations.Annotations
	for _, r := range results {
		warnings.Merge(r.Warnings)
	}
	for _, r := range results {
		if r.Err != nil {
			// A part canceled because another failed reports a
			// cancellation; report the failure itself.
			var canceled promql.ErrQueryCanceled
			if errors.As(r.Err, &canceled) {
				continue
			}
			return &promql.Result{Err: r.Err, Warnings: warnings}
		}
	}
	for _, r := range results {
		if r.Err != nil {
			return &promql.Result{Err: r.Err, Warnings: warnings}
		}
	}
	mat, err := joinMatrices(results, q.maxSamples)
	if err != nil {
		return &promql.Result{Err: err, Warnings: warnings}
	}
	return &promql.Result{Value: mat, Warnings: warnings}
}

// joinMatrices concatenates the parts' series by label set, in part order
// (the parts cover consecutive steps), and sorts the result as the engine
// sorts a range query's. Each part kept within the engine's sample limit on
// its own; the joined result must too, as the whole query would have had to.
func joinMatrices(results []*promql.Result, maxSamples int) (promql.Matrix, error) {
	mats := make([]promql.Matrix, len(results))
	points := 0
	for i, r := range results {
		m, err := r.Matrix()
		if err != nil {
			return nil, fmt.Errorf("split range query: %w", err)
		}
		mats[i] = m
		for _, s := range m {
			points += len(s.Floats) + len(s.Histograms)
		}
	}
	if points > maxSamples {
		return nil, promql.ErrTooManySamples("query execution")
	}
	// Each part's matrix is sorted by labels, as the result must be: merge
	// them, counting each series' points first so that it is copied once
	// into a slice of the right size.
	type piece struct{ part, idx int }
	var (
		out    promql.Matrix
		pieces [][]piece
		next   = make([]int, len(mats))
	)
	for {
		var lowest labels.Labels
		found := false
		for p, m := range mats {
			if next[p] < len(m) && (!found || labels.Compare(m[next[p]].Metric, lowest) < 0) {
				lowest, found = m[next[p]].Metric, true
			}
		}
		if !found {
			break
		}
		var ps []piece
		for p, m := range mats {
			if next[p] < len(m) && labels.Equal(m[next[p]].Metric, lowest) {
				ps = append(ps, piece{p, next[p]})
				next[p]++
			}
		}
		out = append(out, promql.Series{Metric: lowest})
		pieces = append(pieces, ps)
	}
	for i, ps := range pieces {
		if len(ps) == 1 { // in one part only: its slices as they are
			s := mats[ps[0].part][ps[0].idx]
			out[i].Floats, out[i].Histograms = s.Floats, s.Histograms
			continue
		}
		nf, nh := 0, 0
		for _, pc := range ps {
			s := &mats[pc.part][pc.idx]
			nf, nh = nf+len(s.Floats), nh+len(s.Histograms)
		}
		if nf > 0 {
			out[i].Floats = make([]promql.FPoint, 0, nf)
		}
		if nh > 0 {
			out[i].Histograms = make([]promql.HPoint, 0, nh)
		}
		for _, pc := range ps {
			s := &mats[pc.part][pc.idx]
			out[i].Floats = append(out[i].Floats, s.Floats...)
			out[i].Histograms = append(out[i].Histograms, s.Histograms...)
		}
	}
	return out, nil
}

// Close implements promql.Query.
func (q *splitQuery) Close() {
	for _, p := range q.parts {
		p.Close()
	}
}

// Statement implements promql.Query: the whole range's statement.
func (q *splitQuery) Statement() parser.Statement {
	return wholeRange(q.parts[0].Statement(), q.start, q.end)
}

// wholeRange returns st, the statement of a part of a range query, over
// the whole range [start, end].
func wholeRange(st parser.Statement, start, end time.Time) parser.Statement {
	if es, ok := st.(*parser.EvalStmt); ok {
		whole := *es
		whole.Start, whole.End = start, end
		return &whole
	}
	return st
}

// Stats implements promql.Query: the timers of the part that took longest
// (the parts run at once, so it set the query's latency) and the samples of
// all parts, per step in step order when per-step statistics are on.
func (q *splitQuery) Stats() *stats.Statistics {
	slow := q.parts[q.slowest].Stats()
	if slow == nil {
		return nil
	}
	var samples *stats.QuerySamples
	for _, p := range q.parts {
		s := p.Stats()
		if s == nil || s.Samples == nil {
			continue
		}
		ps := s.Samples
		if samples == nil {
			samples = stats.NewQuerySamples(ps.EnablePerStepStats)
			samples.InitStepTracking(q.start.UnixMilli(), q.end.UnixMilli(), q.interval.Milliseconds())
		}
		for i, v := range ps.TotalSamplesPerStep {
			samples.TotalSamplesPerStep[stepIndex(ps, i, samples)] += v
		}
		for i, v := range ps.SamplesReadPerStep {
			samples.SamplesReadPerStep[stepIndex(ps, i, samples)] += v
		}
		samples.TotalSamples += ps.TotalSamples
		samples.SamplesRead += ps.SamplesRead
		samples.TotalSeries += ps.TotalSeries
		samples.UpdatePeak(ps.PeakSamples)
	}
	return &stats.Statistics{Timers: slow.Timers, Samples: samples}
}

// stepIndex maps step i of part statistics ps to the whole query's step.
func stepIndex(ps *stats.QuerySamples, i int, whole *stats.QuerySamples) int {
	return int((ps.StartTimestamp + int64(i)*ps.Interval - whole.StartTimestamp) / whole.Interval)
}

// Cancel implements promql.Query.
func (q *splitQuery) Cancel() {
	for _, p := range q.parts {
		p.Cancel()
	}
}

// String implements promql.Query.
func (q *splitQuery) String() string { return q.qs }
