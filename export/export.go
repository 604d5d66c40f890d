package export

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// Tier is a rollup tier as an export reads it; *tiers.Rollup is one.
type Tier interface {
	// Select returns the matching series with their windows starting in
	// [mint, maxt], sorted by labels.
	Select(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) ([]tiers.SeriesWindows, error)
	// SelectLabels returns the label sets of the matching series with
	// windows in partitions overlapping [mint, maxt].
	SelectLabels(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) ([]labels.Labels, error)
	Partitions() []tiers.PartitionInfo
	Config() tiers.RollupConfig
}

// Config is what an Exporter reads.
type Config struct {
	// Minute and Hour are the rollup tiers; either may be nil.
	Minute, Hour Tier
	// Typing decides each metric's kind (kind.go).
	Typing Typing
	// Engine and Queryable evaluate PromQL expressions (Queryable: the
	// rollup tiers as PromQL reads them, tiers.NewStitched). Without them
	// a request with an expression is refused.
	Engine    promql.QueryEngine
	Queryable storage.Queryable
	// MaxSteps bounds the steps of one export (0: 100,000, eleven years of
	// hours).
	MaxSteps int
	// ChunkWindows bounds one read of a tier, in windows per series (0:
	// 168, a week of hour windows; the minute tier reads at most 360
	// minutes): what an export holds besides the open steps' statistics.
	ChunkWindows int
}

// Exporter plans and runs exports. It is safe for concurrent use.
type Exporter struct{ cfg Config }

// New returns an Exporter over cfg's tiers.
func New(cfg Config) *Exporter {
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 100_000
	}
	if cfg.ChunkWindows <= 0 {
		cfg.ChunkWindows = 168
	}
	return &Exporter{cfg: cfg}
}

// tierInfo is one tier's name, resolution and the ranges its partitions hold.
type tierInfo struct {
	name  string
	src   Tier
	res   int64
	parts []span // merged, ascending
}

func (t *tierInfo) covered(s span) int64 {
	var n int64
	for _, p := range t.parts {
		lo, hi := max(p.start, s.start), min(p.end, s.end)
		if lo < hi {
			n += hi - lo
		}
	}
	return n
}

func (t *tierInfo) describe() string {
	if len(t.parts) == 0 {
		return fmt.Sprintf("the %s tier holds nothing", t.name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the %s tier holds ", t.name)
	for i, p := range t.parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s to %s", fmtTime(p.start), fmtTime(p.end))
	}
	return b.String()
}

func fmtTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

func newTierInfo(name string, src Tier) *tierInfo {
	if src == nil {
		return nil
	}
	t := &tierInfo{name: name, src: src, res: src.Config().Resolution.Milliseconds()}
	for _, p := range src.Partitions() {
		if n := len(t.parts); n > 0 && t.parts[n-1].end == p.Start {
			t.parts[n-1].end = p.End
			continue
		}
		t.parts = append(t.parts, span{p.Start, p.End})
	}
	return t
}

// Plan is a validated export: its columns are known and Run writes its rows.
type Plan struct {
	e       *Exporter
	req     Request
	queries []*query
	steps   []span
	tiers   []*tierInfo // per step
	avail   []*tierInfo // the tiers there are
	columns []Column
	// groups known before running (from the selectors' series), sorted.
	groups []groupKey
	// groupCols name the group's columns (req.By, or the preset's);
	// groupOf gives a series' group (false: the series is left out).
	groupCols []string
	groupOf   func(labels.Labels) (groupKey, bool)
}

// groupKey is the group-by labels' values joined by \xff.
type groupKey string

func (g groupKey) values(n int) []string {
	if n == 0 {
		return nil
	}
	return strings.Split(string(g), "\xff")
}

func keyOf(l labels.Labels, by []string) groupKey {
	if len(by) == 0 {
		return ""
	}
	vals := make([]string, len(by))
	for i, b := range by {
		vals[i] = l.Get(b)
	}
	return groupKey(strings.Join(vals, "\xff"))
}

// Plan checks req against the tiers: the step against the tier holding
// each part of the range, the range against what the tiers hold, every
// selector and group-by label against the series there. The errors wrap
// ErrBadRequest and say what the tiers hold.
func (e *Exporter) Plan(ctx context.Context, req Request) (*Plan, error) {
	if req.Preset != "" {
		return nil, fmt.Errorf("%w: preset %q is run by Capacity, not Plan", ErrBadRequest, req.Preset)
	}
	if !req.To.After(req.From) {
		return nil, fmt.Errorf("%w: --to (%s) must be after --from (%s)", ErrBadRequest, req.To.Format(time.RFC3339), req.From.Format(time.RFC3339))
	}
	if err := checkBy(req.By); err != nil {
		return nil, err
	}
	st, err := parseStep(req.Step, req.Location)
	if err != nil {
		return nil, err
	}
	qs, err := parseQueries(req.Queries)
	if err != nil {
		return nil, err
	}
	return e.plan(ctx, req, st, qs, req.By, nil)
}

// plan is Plan with the queries parsed and, for the preset, its own groups.
func (e *Exporter) plan(ctx context.Context, req Request, st stepper, qs []*query, groupCols []string, groupOf func(labels.Labels) (groupKey, bool)) (*Plan, error) {
	if groupOf == nil {
		by := req.By
		groupOf = func(l labels.Labels) (groupKey, bool) { return keyOf(l, by), true }
	}
	p := &Plan{e: e, req: req, queries: qs, steps: st.steps(req.From.UnixMilli(), req.To.UnixMilli()), groupCols: groupCols, groupOf: groupOf}
	if len(p.steps) > e.cfg.MaxSteps {
		return nil, fmt.Errorf("%w: %d steps of %s, more than %d: use a coarser step or a shorter range", ErrBadRequest, len(p.steps), req.Step, e.cfg.MaxSteps)
	}
	if err := p.chooseTiers(st); err != nil {
		return nil, err
	}
	for _, q := range p.queries {
		if q.expr != nil && (e.cfg.Engine == nil || e.cfg.Queryable == nil) {
			return nil, fmt.Errorf("%w: %q: this export cannot evaluate PromQL expressions", ErrBadRequest, q.text)
		}
	}
	if err := p.resolveSeries(ctx); err != nil {
		return nil, err
	}
	p.columns = p.makeColumns()
	return p, nil
}

// chooseTiers gives each step the tier that serves it: the minute tier
// when its partitions cover the whole step, else the hour tier when its
// do, else whichever covers more of it (the coverage column shows the
// rest). A step must be a whole number of its tier's windows.
func (p *Plan) chooseTiers(st stepper) error {
	minute, hour := newTierInfo(tiers.TierMinute, p.e.cfg.Minute), newTierInfo(tiers.TierHour, p.e.cfg.Hour)
	var avail []*tierInfo
	for _, t := range []*tierInfo{minute, hour} {
		if t != nil {
			avail = append(avail, t)
		}
	}
	p.avail = avail
	held := func() string {
		var parts []string
		for _, t := range avail {
			parts = append(parts, t.describe())
		}
		if len(parts) == 0 {
			return "no rollup tier is configured"
		}
		return strings.Join(parts, "; ")
	}
	p.tiers = make([]*tierInfo, len(p.steps))
	anyData := false
	for i, s := range p.steps {
		var best *tierInfo
		var bestN int64
		for _, t := range avail {
			n := t.covered(s)
			if n == s.end-s.start {
				best, bestN = t, n
				break
			}
			if n > bestN {
				best, bestN = t, n
			}
		}
		if best == nil {
			// Nothing holds this step: serve it from the tier nearest in
			// resolution that could (its rows say coverage 0).
			if len(avail) == 0 {
				return fmt.Errorf("%w: %s", ErrOutOfRange, held())
			}
			best = avail[len(avail)-1]
			for _, t := range avail {
				if st.minLength() >= t.res && (s.end-s.start)%t.res == 0 {
					best = t
					break
				}
			}
		} else {
			anyData = true
		}
		if s.end-s.start < best.res || (st.fixed > 0 && st.fixed%best.res != 0) {
			return fmt.Errorf("%w: step %s is finer than the %s tier's %s windows that hold %s to %s (%s)",
				ErrStepTooFine, p.req.Step, best.name, time.Duration(best.res)*time.Millisecond, fmtTime(s.start), fmtTime(s.end), held())
		}
		p.tiers[i] = best
	}
	if !anyData {
		return fmt.Errorf("%w: nothing is held from %s to %s: %s", ErrOutOfRange, fmtTime(p.steps[0].start), fmtTime(p.steps[len(p.steps)-1].end), held())
	}
	return nil
}

// resolveSeries finds each selector's series (and kind), the groups, and
// checks the group-by labels.
func (p *Plan) resolveSeries(ctx context.Context) error {
	lo, hi := p.steps[0].start, p.steps[len(p.steps)-1].end-1
	used := map[*tierInfo]bool{}
	for _, t := range p.tiers {
		used[t] = true
	}
	groups := map[groupKey]bool{}
	labelSeen := map[string]bool{}
	anySelector := false
	for _, q := range p.queries {
		if q.expr != nil {
			continue
		}
		anySelector = true
		q.kind = p.e.cfg.Typing.kindOf(q.name)
		find := func(ms []*labels.Matcher) ([]labels.Labels, error) {
			var out []labels.Labels
			for t := range used {
				ls, err := t.src.SelectLabels(ctx, lo, hi, ms...)
				if err != nil {
					return nil, fmt.Errorf("export %s: %w", q.text, err)
				}
				out = append(out, ls...)
			}
			return out, nil
		}
		series, err := find(q.matchers)
		if err != nil {
			return err
		}
		if len(series) == 0 && q.kind != KindHistogram {
			// A histogram's family name: its _bucket series.
			bucket := withName(q.matchers, q.name+"_bucket")
			if bs, err := find(bucket); err != nil {
				return err
			} else if len(bs) > 0 {
				q.matchers, q.name, q.kind, series = bucket, q.name+"_bucket", KindHistogram, bs
			}
		}
		if len(series) == 0 && q.optional {
			continue
		}
		if len(series) == 0 {
			all, err := find(withName(nil, q.name))
			if err != nil {
				return err
			}
			if len(all) == 0 {
				return fmt.Errorf("%w: no series named %s from %s to %s", ErrUnknownSelector, q.name, fmtTime(lo), fmtTime(hi+1))
			}
			return fmt.Errorf("%w: %s matches none of the %d series of %s from %s to %s", ErrEmpty, q.text, len(all), q.name, fmtTime(lo), fmtTime(hi+1))
		}
		if q.kind == KindHistogram && !slices.ContainsFunc(series, func(l labels.Labels) bool { return l.Has(model.BucketLabel) }) {
			q.kind = KindCounter // a _bucket name without buckets: only its own increase
		}
		for _, l := range series {
			if g, ok := p.groupOf(l); ok {
				groups[g] = true
			}
			for _, b := range p.req.By {
				if l.Has(b) {
					labelSeen[b] = true
				}
			}
		}
	}
	if anySelector && p.req.Preset == "" {
		for _, b := range p.req.By {
			if !labelSeen[b] {
				return fmt.Errorf("%w: no selected series has label %q", ErrUnknownLabel, b)
			}
		}
	}
	for g := range groups {
		p.groups = append(p.groups, g)
	}
	slices.Sort(p.groups)
	return nil
}

func withName(ms []*labels.Matcher, name string) []*labels.Matcher {
	out := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, name)}
	for _, m := range ms {
		if m.Name != model.MetricNameLabel {
			out = append(out, m)
		}
	}
	return out
}

// primeOrder is t, then the plan's other tiers.
func (p *Plan) primeOrder(t *tierInfo) []*tierInfo {
	out := []*tierInfo{t}
	for _, o := range p.avail {
		if o.name != t.name {
			out = append(out, o)
		}
	}
	return out
}

// Columns returns the table's columns, in order.
func (p *Plan) Columns() []Column { return p.columns }

// Steps returns how many steps the export has (for progress).
func (p *Plan) Steps() int { return len(p.steps) }

// chunkLength bounds how much of a tier one read holds in memory: by
// default a week of hour windows, six hours of minute windows (for 1,000
// series: ~17 MB and ~35 MB of windows).
func (p *Plan) chunkLength(res int64) int64 {
	n := int64(p.e.cfg.ChunkWindows)
	if res < time.Hour.Milliseconds() {
		n = min(n, 360)
	}
	return n * res
}

// Run writes the plan's rows to w, step by step: a step's rows are written
// once its last window has been read, so memory holds one chunk of windows
// (chunkLength: one read of the tier for every step it spans) and the open
// steps' statistics, never the whole result. progress (may be nil) is
// called after each step with the steps done. Run does not close w.
func (p *Plan) Run(ctx context.Context, w RowWriter, progress func(done, total int)) error {
	state := newRunState(p)
	i := 0
	for i < len(p.steps) {
		t := p.tiers[i]
		// The run of steps served by the same tier, read chunk by chunk.
		j := i
		for j < len(p.steps) && p.tiers[j] == t {
			j++
		}
		if err := state.prime(ctx, t, p.steps[i].start); err != nil {
			return err
		}
		state.first, state.next = i, i
		for c := p.steps[i].start; c < p.steps[j-1].end; {
			end := min(p.steps[j-1].end, c+p.chunkLength(t.res))
			if err := state.readChunk(ctx, t, span{c, end}); err != nil {
				return err
			}
			c = end
			// Close the steps that end in the chunks read so far.
			for state.next < j && p.steps[state.next].end <= c {
				if err := state.closeStep(state.next, w); err != nil {
					return err
				}
				state.next++
				if progress != nil {
					progress(state.next, len(p.steps))
				}
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}

// runState holds what Run carries from chunk to chunk and step to step.
type runState struct {
	p *Plan
	// open steps' statistics: step index -> per query, per group
	open map[int][]map[groupKey]*accum
	// first: the first step of the tier run being read; next: the next
	// step to close
	first, next int
	// counters and histograms: each series' last value, for the step
	// across window (and chunk, and step) boundaries
	prevLast []map[uint64]float64
	// groups seen so far (selector groups, plus any an expression adds),
	// and the same sorted (nil when a group was added since)
	groups map[groupKey]bool
	sorted []groupKey
}

func newRunState(p *Plan) *runState {
	s := &runState{p: p, groups: map[groupKey]bool{}, open: map[int][]map[groupKey]*accum{}}
	for _, g := range p.groups {
		s.groups[g] = true
	}
	for range p.queries {
		s.prevLast = append(s.prevLast, map[uint64]float64{})
	}
	return s
}

// prime reads, for counters and histograms, the window just before from
// in tier t, so that the first step counts the step from the last sample
// before it to its first (PromQL's anchored increase, docs/format/export.md).
func (s *runState) prime(ctx context.Context, t *tierInfo, from int64) error {
	for qi, q := range s.p.queries {
		if q.expr != nil || q.kind == KindGauge || len(s.prevLast[qi]) > 0 {
			continue
		}
		// The tier that serves the step may start at from (the minute
		// tier's oldest partition): then the window before is the hour
		// tier's.
		for _, src := range s.p.primeOrder(t) {
			sel, err := src.src.Select(ctx, from-src.res, from-1, q.matchers...)
			if err != nil {
				return fmt.Errorf("export %s: %w", q.text, err)
			}
			for _, sw := range sel {
				if n := len(sw.Windows); n > 0 {
					s.prevLast[qi][sw.Labels.Hash()] = sw.Windows[n-1].Last
				}
			}
			if len(s.prevLast[qi]) > 0 {
				break
			}
		}
	}
	return nil
}

// stepOf returns the index of the open step holding time t, from the tier
// run's first step on (-1: none).
func (s *runState) stepOf(t int64) int {
	steps := s.p.steps
	k := s.next + sort.Search(len(steps)-s.next, func(i int) bool { return steps[s.next+i].end > t })
	if k >= len(steps) || steps[k].start > t || s.p.tiers[k] != s.p.tiers[s.first] {
		return -1
	}
	return k
}

func (s *runState) group(k, qi int, g groupKey) *accum {
	st := s.open[k]
	if st == nil {
		st = make([]map[groupKey]*accum, len(s.p.queries))
		for i := range st {
			st[i] = map[groupKey]*accum{}
		}
		s.open[k] = st
	}
	a := st[qi][g]
	if a == nil {
		a = newAccum()
		st[qi][g] = a
		if !s.groups[g] {
			s.groups[g] = true
			s.sorted = nil
		}
	}
	return a
}

// readChunk adds the windows starting in chunk c to the open steps'
// statistics, each window to the step holding its start.
func (s *runState) readChunk(ctx context.Context, t *tierInfo, c span) error {
	for qi, q := range s.p.queries {
		if q.expr != nil {
			if err := s.evalChunk(ctx, qi, q, t, c); err != nil {
				return err
			}
			continue
		}
		sel, err := t.src.Select(ctx, c.start, c.end-1, q.matchers...)
		if err != nil {
			return fmt.Errorf("export %s: %w", q.text, err)
		}
		for _, sw := range sel {
			g, ok := s.p.groupOf(sw.Labels)
			if !ok {
				continue
			}
			h := sw.Labels.Hash()
			le := 0.0
			if q.kind == KindHistogram {
				if le, err = parseLe(sw.Labels.Get(model.BucketLabel)); err != nil {
					continue // a bucket without a readable le is not part of a histogram
				}
			}
			// The series' windows, one run per step.
			ws := sw.Windows
			for len(ws) > 0 {
				k := s.stepOf(ws[0].Start)
				n := 1
				if k >= 0 {
					end := s.p.steps[k].end
					for n < len(ws) && ws[n].Start < end {
						n++
					}
				}
				run := ws[:n]
				ws = ws[n:]
				if k < 0 {
					continue
				}
				a := s.group(k, qi, g)
				switch q.kind {
				case KindGauge:
					a.addGauge(h, run)
				case KindCounter:
					s.prevLast[qi][h] = a.addCounter(h, run, s.prevLast[qi], q.slotPeak)
				case KindHistogram:
					s.prevLast[qi][h] = a.addBucket(h, le, run, s.prevLast[qi])
				}
			}
		}
	}
	return nil
}

// evalChunk evaluates expression q at every window of chunk c and adds the
// values to their steps as a gauge's window averages.
func (s *runState) evalChunk(ctx context.Context, qi int, q *query, t *tierInfo, c span) error {
	eng := s.p.e.cfg.Engine
	// Evaluation at the end of each window (exclusive): the last instant
	// whose ranges see only that window and the ones before it.
	start, end := time.UnixMilli(c.start+t.res-1), time.UnixMilli(c.end-1)
	rq, err := eng.NewRangeQuery(ctx, s.p.e.cfg.Queryable, nil, q.text, start, end, time.Duration(t.res)*time.Millisecond)
	if err != nil {
		return fmt.Errorf("%w: %q: %w", ErrBadRequest, q.text, err)
	}
	defer rq.Close()
	res := rq.Exec(ctx)
	if res.Err != nil {
		return fmt.Errorf("export %s: %w", q.text, res.Err)
	}
	add := func(g groupKey, h uint64, pts []promql.FPoint) {
		for len(pts) > 0 {
			k := s.stepOf(pts[0].T + 1 - t.res)
			n := 1
			if k >= 0 {
				for n < len(pts) && pts[n].T+1-t.res < s.p.steps[k].end {
					n++
				}
				s.group(k, qi, g).addPoints(h, pts[:n])
			}
			pts = pts[n:]
		}
	}
	switch v := res.Value.(type) {
	case promql.Matrix:
		for _, sr := range v {
			if g, ok := s.p.groupOf(sr.Metric); ok {
				add(g, sr.Metric.Hash(), sr.Floats)
			}
		}
	case promql.Scalar:
		add("", 0, []promql.FPoint{{T: v.T, F: v.V}})
	default:
		return fmt.Errorf("%w: %q evaluates to %s", ErrBadRequest, q.text, res.Value.Type())
	}
	return nil
}

// closeStep writes step k's rows, one per group, in group order, and
// forgets its statistics.
func (s *runState) closeStep(k int, w RowWriter) error {
	st, t := s.p.steps[k], s.p.tiers[k]
	slots := float64((st.end - st.start) / t.res)
	accs := s.open[k]
	delete(s.open, k)
	if s.sorted == nil {
		for g := range s.groups {
			s.sorted = append(s.sorted, g)
		}
		slices.Sort(s.sorted)
	}
	row := make([]Cell, 0, len(s.p.columns))
	for _, g := range s.sorted {
		row = row[:0]
		for _, v := range g.values(len(s.p.groupCols)) {
			row = append(row, Cell{S: v})
		}
		row = append(row, Cell{I: st.start}, Cell{I: st.end}, Cell{S: t.name})
		for qi, q := range s.p.queries {
			var a *accum
			if accs != nil {
				a = accs[qi][g]
			}
			row = a.appendCells(row, q, slots, st, t.res)
		}
		if err := w.WriteRow(row); err != nil {
			return err
		}
	}
	return nil
}

// accum is one group's statistics over one step for one query.
type accum struct {
	windows int                 // windows (or evaluation points) with data
	series  map[uint64]struct{} // series seen (for a histogram: its +Inf buckets)
	// gauges and expressions
	sum, count float64
	min, max   float64
	avgs       []float64
	last       map[uint64]lastValue
	// counters
	increase float64
	slots    map[int64]float64 // window start -> the group's increase in it (query.slotPeak)
	// histograms: increase per upper bound
	buckets map[float64]float64
	// expressions: evaluation times with a value
	points map[int64]struct{}
}

type lastValue struct {
	t int64
	v float64
}

func newAccum() *accum {
	return &accum{series: map[uint64]struct{}{}, min: math.Inf(1), max: math.Inf(-1)}
}

func (a *accum) addGauge(h uint64, ws []tiers.Window) {
	if len(ws) == 0 {
		return
	}
	a.series[h] = struct{}{}
	for i := range ws {
		w := &ws[i]
		a.windows++
		a.sum += w.Sum
		a.count += float64(w.Count)
		a.min = min(a.min, w.Min)
		a.max = max(a.max, w.Max)
		a.avgs = append(a.avgs, w.Sum/float64(w.Count))
	}
	if a.last == nil {
		a.last = map[uint64]lastValue{}
	}
	lw := ws[len(ws)-1]
	if lv, ok := a.last[h]; !ok || lw.LastT > lv.t {
		a.last[h] = lastValue{lw.LastT, lw.Last}
	}
}

// counterIncrease returns the reset-aware increase windows ws add to a
// counter whose previous sample was prev (ok false: none), and the last
// value: each window's own increase plus the step from the previous
// window's last sample to its first (a drop is a reset: the new value
// counts whole).
func counterIncrease(ws []tiers.Window, prev float64, ok bool) (float64, float64) {
	inc := 0.0
	for i := range ws {
		w := &ws[i]
		if ok {
			if w.First >= prev {
				inc += w.First - prev
			} else {
				inc += w.First
			}
		}
		inc += w.Increase
		prev, ok = w.Last, true
	}
	return inc, prev
}

func (a *accum) addCounter(h uint64, ws []tiers.Window, prevLast map[uint64]float64, slots bool) float64 {
	prev, ok := prevLast[h]
	if len(ws) == 0 {
		return prev
	}
	a.series[h] = struct{}{}
	a.windows += len(ws)
	if slots {
		if a.slots == nil {
			a.slots = map[int64]float64{}
		}
		p, pok := prev, ok
		for i := range ws {
			inc, last := counterIncrease(ws[i:i+1], p, pok)
			a.slots[ws[i].Start] += inc
			p, pok = last, true
		}
	}
	inc, last := counterIncrease(ws, prev, ok)
	a.increase += inc
	return last
}

func (a *accum) addBucket(h uint64, le float64, ws []tiers.Window, prevLast map[uint64]float64) float64 {
	prev, ok := prevLast[h]
	if len(ws) == 0 {
		return prev
	}
	if math.IsInf(le, 1) {
		a.series[h] = struct{}{}
		a.windows += len(ws)
	}
	inc, last := counterIncrease(ws, prev, ok)
	if a.buckets == nil {
		a.buckets = map[float64]float64{}
	}
	a.buckets[le] += inc
	return last
}

func (a *accum) addPoints(h uint64, pts []promql.FPoint) {
	if len(pts) == 0 {
		return
	}
	a.series[h] = struct{}{}
	if a.points == nil {
		a.points = map[int64]struct{}{}
	}
	if a.last == nil {
		a.last = map[uint64]lastValue{}
	}
	for _, pt := range pts {
		a.points[pt.T] = struct{}{}
		a.sum += pt.F
		a.count++
		a.min = min(a.min, pt.F)
		a.max = max(a.max, pt.F)
		a.avgs = append(a.avgs, pt.F)
	}
	lp := pts[len(pts)-1]
	if lv, ok := a.last[h]; !ok || lp.T > lv.t {
		a.last[h] = lastValue{lp.T, lp.F}
	}
}

var null = Cell{Null: true}

func num(v float64) Cell {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return null
	}
	return Cell{F: v}
}

// appendCells appends the query's columns for this group and step (a is
// nil when the group had no series of the query in the step).
func (a *accum) appendCells(row []Cell, q *query, slots float64, st span, res int64) []Cell {
	n := len(statsOf(q))
	if a == nil || len(a.series) == 0 {
		row = append(row, Cell{I: 0}, Cell{F: 0})
		for range n {
			row = append(row, null)
		}
		return row
	}
	nSeries := float64(len(a.series))
	cov := float64(a.windows) / (nSeries * slots)
	if q.expr != nil {
		cov = float64(len(a.points)) / slots
	}
	row = append(row, Cell{I: int64(len(a.series))}, Cell{F: min(cov, 1)})
	switch {
	case q.expr != nil || q.kind == KindGauge:
		slices.Sort(a.avgs)
		lastSum := 0.0
		for _, lv := range a.last {
			lastSum += lv.v
		}
		row = append(row, num(a.sum/a.count), num(a.min), num(a.max),
			num(quantile(0.5, a.avgs)), num(quantile(0.95, a.avgs)), num(quantile(0.99, a.avgs)),
			num(lastSum/float64(len(a.last))))
	case q.kind == KindCounter:
		secs := float64(st.end-st.start) / 1000
		row = append(row, num(a.increase), num(a.increase/secs))
		if q.slotPeak {
			peak := math.NaN()
			for _, v := range a.slots {
				if math.IsNaN(peak) || v > peak {
					peak = v
				}
			}
			row = append(row, num(peak/(float64(res)/1000)))
		}
	case q.kind == KindHistogram:
		bs := make(promql.Buckets, 0, len(a.buckets))
		for le, c := range a.buckets {
			bs = append(bs, promql.Bucket{UpperBound: le, Count: c})
		}
		count := math.NaN()
		if c, ok := a.buckets[math.Inf(1)]; ok {
			count = c
		}
		for _, qq := range []float64{0.5, 0.95, 0.99} {
			v, _, _, _, _, _ := promql.BucketQuantile(qq, slices.Clone(bs))
			row = append(row, num(v))
		}
		row = append(row, num(count))
	}
	return row
}

// quantile is PromQL's quantile_over_time rule over sorted values: linear
// interpolation between the closest ranks, rank = q·(n-1) (DuckDB's
// quantile_cont).
func quantile(q float64, sorted []float64) float64 {
	n := float64(len(sorted))
	if n == 0 {
		return math.NaN()
	}
	rank := q * (n - 1)
	lower := math.Max(0, math.Floor(rank))
	upper := math.Min(n-1, lower+1)
	weight := rank - math.Floor(rank)
	return sorted[int(lower)]*(1-weight) + sorted[int(upper)]*weight
}

func parseLe(s string) (float64, error) {
	v, err := parseFloat(s)
	if err != nil {
		return 0, errors.New("bad le")
	}
	return v, nil
}

// statsOf returns the statistic columns of a query, after its _series and
// _coverage columns (docs/format/export.md).
func statsOf(q *query) []Column {
	unit := "the metric's unit"
	if q.expr != nil || q.kind == KindGauge {
		return []Column{
			{Name: "avg", Unit: unit, Help: "mean of every sample in the step (sum of sums / sum of counts)"},
			{Name: "min", Unit: unit, Help: "smallest sample"},
			{Name: "max", Unit: unit, Help: "largest sample"},
			{Name: "p50", Unit: unit, Help: "median of the window averages (minute or hour)"},
			{Name: "p95", Unit: unit, Help: "95th percentile of the window averages"},
			{Name: "p99", Unit: unit, Help: "99th percentile of the window averages"},
			{Name: "last", Unit: unit, Help: "mean over the group's series of each one's last sample in the step"},
		}
	}
	if q.kind == KindCounter {
		cols := []Column{
			{Name: "increase", Unit: "the counter's unit", Help: "reset-aware increase over the step, summed over the group's series"},
			{Name: "rate", Unit: "the counter's unit per second", Help: "increase / the step's length in seconds"},
		}
		if q.slotPeak {
			cols = append(cols, Column{Name: "peak_rate", Unit: "the counter's unit per second", Help: "the largest rate of one window (minute or hour), summed over the group's series"})
		}
		return cols
	}
	unit = "the histogram's unit (le)"
	return []Column{
		{Name: "p50", Unit: unit, Help: "median from the buckets' increases (histogram_quantile)"},
		{Name: "p95", Unit: unit, Help: "95th percentile from the buckets' increases"},
		{Name: "p99", Unit: unit, Help: "99th percentile from the buckets' increases"},
		{Name: "count", Unit: "observations", Help: "observations in the step (increase of the +Inf bucket)"},
	}
}

func (p *Plan) makeColumns() []Column {
	var cols []Column
	for _, b := range p.groupCols {
		cols = append(cols, Column{Name: b, Type: ColString, Help: "group-by label (empty where a series lacks it)"})
	}
	cols = append(cols,
		Column{Name: "step_start", Type: ColTime, Help: "start of the step"},
		Column{Name: "step_end", Type: ColTime, Help: "end of the step (exclusive)"},
		Column{Name: "tier", Type: ColString, Help: "the rollup tier that served the step: minute or hour"})
	for _, q := range p.queries {
		cols = append(cols,
			Column{Name: q.alias + "_series", Type: ColInt, Unit: "series", Help: "series of the group with data in the step"},
			Column{Name: q.alias + "_coverage", Type: ColFloat, Unit: "fraction 0-1", Help: "windows with data / (series x windows in the step)"})
		for _, c := range statsOf(q) {
			c.Name = q.alias + "_" + c.Name
			c.Type = ColFloat
			cols = append(cols, c)
		}
	}
	return cols
}
