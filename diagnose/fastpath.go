package diagnose

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/rulegen"
)

// precomputed is replay's fast path (docs/diagnosis.md, "Replay"): at the
// start of each chunk of minutes, every rule's expression is evaluated once
// as a range query (step 1m) over the chunk, in evaluation order, and each
// recording rule's results are written into the scratch store for the whole
// chunk (stale markers included, as Group.Eval writes them) before the next
// rule's range query reads them. The per-minute group evaluation then runs
// as always, its QueryFunc answering from the range results.
//
// This equals instant evaluation because an instant query at t equals the
// range query's step at t over the same data (tiers.TestMinuteViewInstantEqualsRangeStep
// for the minute view; the scratch store is plain samples), and the scratch
// store holds, for every t, exactly the samples the instant path would have
// written by then. TestReplayFastPathEqualsInstant checks the result.
type precomputed struct {
	byExpr map[string]map[int64]promql.Vector
	// prev is, per recording rule, the label sets it returned at the last
	// minute materialised: the stale markers of the next chunk's first
	// minute depend on it. Sorted by hash (then labels), each the label set
	// the scratch store keeps for the series: a map keyed by a string copy
	// of each set's bytes, as Group.Eval keeps it, with the set built at
	// the last minute as its value, held two more copies of every recorded
	// series' labels.
	prev map[rules.Rule][]hashedLabels
	// ready is true when every rule of the chunk was precomputed: groups of
	// recording rules then need no per-minute evaluation. notReady says
	// why not (the rule and its error), for a caller that cannot fall back.
	ready    bool
	notReady error
}

func newPrecomputed() *precomputed {
	return &precomputed{prev: map[rules.Rule][]hashedLabels{}}
}

// fastPathSafe reports whether every expression can be evaluated ahead of
// the minute: none reads a series the engine writes only while it evaluates
// minute by minute (ALERTS, ALERTS_FOR_STATE, strata_diagnosis), none reads
// a recorded series through a regular expression on the name, none reads
// a series recorded by a rule evaluated after it (that reads the previous
// minute's value, which the chunk's range query would not see yet), and none
// uses @ start() / @ end(), which differ between instant and range queries.
func fastPathSafe(groups []*rules.Group) bool {
	safe := true
	later := map[string]bool{} // names recorded at or after the current rule
	recordedNames := map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if rr, ok := r.(*rules.RecordingRule); ok {
				later[rr.Name()] = true
				recordedNames[rr.Name()] = true
			}
		}
	}
	for _, n := range baselineNames {
		recordedNames[n] = true
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			parser.Inspect(r.Query(), func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					if later[vs.Name] {
						safe = false
					}
					if vs.Name == "ALERTS" || vs.Name == "ALERTS_FOR_STATE" || vs.Name == DiagnosisSeries || vs.StartOrEnd != 0 {
						safe = false
					}
					for _, m := range vs.LabelMatchers {
						if m.Name != model.MetricNameLabel || m.Type == labels.MatchEqual {
							continue
						}
						if m.Matches("ALERTS") || m.Matches("ALERTS_FOR_STATE") || m.Matches(DiagnosisSeries) {
							safe = false // matches a series written minute by minute
						}
						for name := range recordedNames {
							if m.Matches(name) {
								safe = false // the ordering of the chunk's range queries goes by name
							}
						}
					}
				}
				if sq, ok := n.(*parser.SubqueryExpr); ok && sq.StartOrEnd != 0 {
					safe = false
				}
				return nil
			})
			if rr, ok := r.(*rules.RecordingRule); ok {
				delete(later, rr.Name())
			}
		}
	}
	return safe
}

func (p *precomputed) at(qs string, t time.Time) (promql.Vector, bool) {
	m, ok := p.byExpr[qs]
	if !ok {
		return nil, false
	}
	// A copy: RecordingRule.Eval rewrites its samples' labels in place.
	return slices.Clone(m[t.UnixMilli()]), true
}

// passItem is one step of a pass over a chunk: a rule of a group, or (r
// nil) the baseline step, which reads the signals recorded before it and
// writes the baseline series the rules after it read.
type passItem struct {
	g *rules.Group
	r rules.Rule
}

// pass is what compute evaluates: the items in order, over a queryable
// (minute data and the store the results go to), into a scratch store.
type pass struct {
	items []passItem
	q     storage.Queryable
	sc    *scratch
}

// items lists the engine's rules in evaluation order, with the baseline
// step after the signals group when baselines are on.
func (e *Engine) items() []passItem {
	var all []passItem
	for _, g := range e.groups {
		for _, r := range g.Rules() {
			all = append(all, passItem{g, r})
		}
		if e.tracking() != nil && g == e.signalsGroup {
			all = append(all, passItem{g: g})
		}
	}
	return all
}

// compute evaluates the pass over the minutes [from, to] (ms). A rule
// whose range query fails is left to instant evaluation, and so is every
// rule after it (they may read its results); ready tells whether all ran.
//
// Consecutive rules that do not read what an earlier one of them records
// form a batch whose range queries run in parallel (one per CPU); the
// batch's recording rules are then materialised in rule order, before the
// next batch reads them. The baseline step is a batch of its own.
func (p *precomputed) compute(ctx context.Context, e *Engine, ps pass, from, to int64) error {
	p.byExpr = map[string]map[int64]promql.Vector{}
	p.ready, p.notReady = false, nil
	all := ps.items
	for start := 0; start < len(all); {
		if all[start].r == nil {
			e.baselineRange(ps.sc, from, to)
			start++
			continue
		}
		// The batch: rules up to the first one reading a name recorded in it.
		recorded := map[string]bool{}
		end := start
		for ; end < len(all) && all[end].r != nil; end++ {
			if end > start && readsAny(all[end].r.Query(), recorded) {
				break
			}
			if rr, ok := all[end].r.(*rules.RecordingRule); ok {
				recorded[rr.Name()] = true
			}
		}
		batch := all[start:end]
		type result struct {
			vecs map[int64]promql.Vector
			err  error
		}
		results := make([]result, len(batch))
		sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
		var wg sync.WaitGroup
		for i, it := range batch {
			qs := it.r.Query().String()
			if _, done := p.byExpr[qs]; done {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				results[i].vecs, results[i].err = e.rangeVectors(ctx, ps.q, qs, from, to)
			}()
		}
		wg.Wait()
		for i, it := range batch {
			qs := it.r.Query().String()
			if results[i].err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				e.logger.Debug("fast path: rule left to instant evaluation", "rule", it.r.Name(), "err", results[i].err)
				p.notReady = fmt.Errorf("rule %s: %w", it.r.Name(), results[i].err)
				return nil
			}
			if results[i].vecs != nil {
				p.byExpr[qs] = results[i].vecs
			}
			if rr, ok := it.r.(*rules.RecordingRule); ok {
				if err := p.materialise(ctx, ps.sc, it.g, rr, from, to); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					delete(p.byExpr, qs) // e.g. duplicate label sets at some minute: instant from here on
					p.notReady = fmt.Errorf("rule %s: %w", it.r.Name(), err)
					return nil
				}
			}
		}
		start = end
	}
	p.ready = true
	return nil
}

// readsAny reports whether expr selects one of the names.
func readsAny(expr parser.Expr, names map[string]bool) bool {
	found := false
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && names[vs.Name] {
			found = true
		}
		return nil
	})
	return found
}

// rangeVectors runs qs as a range query over the minute data and the
// scratch store and returns its vector at every step.
func (e *Engine) rangeVectors(ctx context.Context, qy storage.Queryable, qs string, from, to int64) (map[int64]promql.Vector, error) {
	q, err := e.promql.NewRangeQuery(ctx, rulegen.RenamingQueryable(qy), nil, e.forms.Internal(qs), time.UnixMilli(from), time.UnixMilli(to), minute)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, res.Err
	}
	m, ok := res.Value.(promql.Matrix)
	if !ok {
		return nil, errors.New("not a range vector result")
	}
	// Each step's vector is made at its size: grown by append, the steps'
	// vectors (500,000 series in a read-back's chunk at fleet scale) held
	// up to a quarter more than their samples (small ones twice) and
	// allocated several times their size as garbage on the way.
	n := map[int64]int{}
	for _, s := range m {
		if len(s.Histograms) > 0 {
			return nil, errors.New("histogram results are evaluated instantly")
		}
		for _, pt := range s.Floats {
			n[pt.T]++
		}
	}
	out := make(map[int64]promql.Vector, len(n))
	for t, c := range n {
		out[t] = make(promql.Vector, 0, c)
	}
	for _, s := range m {
		lbls := s.Metric.Copy() // Close recycles the result
		for _, pt := range s.Floats {
			out[pt.T] = append(out[pt.T], promql.Sample{Metric: lbls, T: pt.T, F: pt.F})
		}
	}
	return out, nil
}

// hashedLabels is a label set and its hash.
type hashedLabels struct {
	h uint64
	l labels.Labels
}

func compareHashed(a, b hashedLabels) int {
	if a.h != b.h {
		return cmp.Compare(a.h, b.h)
	}
	return labels.Compare(a.l, b.l)
}

// materialise writes a recording rule's results for [from, to] into the
// scratch store, with the stale markers Group.Eval would write for series
// that disappear.
func (p *precomputed) materialise(ctx context.Context, sc *scratch, g *rules.Group, rr *rules.RecordingRule, from, to int64) error {
	prev := p.prev[rr]
	app := sc.AppenderV2(ctx)
	vecs := p.byExpr[rr.Query().String()]
	lb := labels.NewBuilder(labels.EmptyLabels())
	stale := math.Float64frombits(value.StaleNaN)
	// A range query's steps list its series in one order, with the same
	// label sets (rangeVectors), so a step that has the series of the one
	// before takes their recorded label sets from it, and its sorted set
	// (prev) is that step's: checked already, and nothing went stale.
	// Built, hashed, sorted and merged at every step, they were more than
	// half of the read-back's materialising (500,000 series in 10-minute
	// chunks).
	var out, outBefore []hashedLabels
	for t := from; t <= to; t += minute.Milliseconds() {
		// What RecordingRule.Eval returns at t: the name and the rule's
		// labels set on each sample.
		vec, before := vecs[t], vecs[t-minute.Milliseconds()] // none before from: another chunk's
		out = slices.Grow(out[:0], len(vec))
		same := t > from && len(vec) == len(before)
		for i, s := range vec {
			if t > from && i < len(before) && labels.Equal(before[i].Metric, s.Metric) {
				out = append(out, outBefore[i])
				continue
			}
			same = false
			lb.Reset(s.Metric)
			lb.Set(model.MetricNameLabel, rr.Name())
			rr.Labels().Range(func(l labels.Label) { lb.Set(l.Name, l.Value) })
			l := lb.Labels()
			out = append(out, hashedLabels{l.Hash(), l})
		}
		out, outBefore = outBefore, out
		// Appended in the result's order; a duplicate label set or a
		// result over the limit rolls the chunk back.
		for i, s := range vec {
			if _, err := app.Append(0, outBefore[i].l, 0, t, s.F, nil, nil, storage.AppendV2Options{}); err != nil {
				_ = app.Rollback()
				return err
			}
		}
		if same {
			continue
		}
		cur := slices.Clone(outBefore)
		slices.SortFunc(cur, compareHashed)
		for i := 1; i < len(cur); i++ {
			if cur[i].h == cur[i-1].h && labels.Equal(cur[i].l, cur[i-1].l) {
				_ = app.Rollback()
				return rules.ErrDuplicateRecordingLabelSet
			}
		}
		if limit := g.Limit(); limit > 0 && len(cur) > limit {
			_ = app.Rollback()
			return errors.New("recording rule over its limit")
		}
		// A stale marker for each series of the previous minute this one
		// did not return (both sorted: one merge).
		j := 0
		for _, x := range prev {
			for j < len(cur) && compareHashed(cur[j], x) < 0 {
				j++
			}
			if j < len(cur) && compareHashed(cur[j], x) == 0 {
				continue
			}
			if _, err := app.Append(0, x.l, 0, t, stale, nil, nil, storage.AppendV2Options{}); err != nil {
				_ = app.Rollback()
				return err
			}
		}
		prev = cur
	}
	if err := app.Commit(); err != nil {
		return err
	}
	// The label sets kept for the next chunk are the scratch store's own
	// (the series' first), not the ones built for this chunk's last
	// minute: a copy of every recorded series' labels less.
	sc.shareLabels(prev)
	p.prev[rr] = prev
	return nil
}
