package export

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql"

	"github.com/strata-dev/strata/tiers"
)

// Run writes the plan's rows to w, step by step: a step's rows are written
// once its last window has been read, so memory holds one chunk of windows
// (chunkLength: one read of the tier for every step it spans) and the open
// steps' statistics, never the whole result. progress (may be nil) is
// called after each step with the steps done. Run does not close w.
func (p *Plan) Run(ctx context.Context, w RowWriter, progress func(done, total int)) (err error) {
	// Rows are encoded on a second goroutine (Parquet's encoding costs as
	// much as computing them); progress is called there too, after the
	// step's rows are written, so that a caller flushing its writer in it
	// never races the writes.
	out := newAsyncRows(w, len(p.columns), func(done int) {
		if progress != nil {
			progress(done, len(p.steps))
		}
	})
	defer func() {
		// A write error comes back from send and from close: once.
		if cerr := out.close(); cerr != nil && !errors.Is(err, cerr) {
			err = errors.Join(err, cerr)
		}
	}()
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
		state.first, state.next, state.series = i, i, 0
		for c := p.steps[i].start; c < p.steps[j-1].end; {
			end := min(p.steps[j-1].end, c+p.chunkLength(t.res, state.series))
			if err := state.readChunk(ctx, t, span{c, end}); err != nil {
				return err
			}
			c = end
			// Close the steps that end in the chunks read so far.
			for state.next < j && p.steps[state.next].end <= c {
				if err := state.closeStep(state.next, out); err != nil {
					return err
				}
				state.next++
				if err := out.stepDone(state.next); err != nil {
					return err
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

// asyncRows hands rows to a goroutine that writes them to w, in batches.
type asyncRows struct {
	w        RowWriter
	ncols    int
	progress func(done int)
	cur      rowBatch
	ch       chan rowBatch
	free     chan []Cell
	done     chan struct{}
	err      error // the writer's, read after done is closed
}

type rowBatch struct {
	cells []Cell
	steps int // steps done once these rows are written (0: none)
}

const asyncBatchRows = 1024

func newAsyncRows(w RowWriter, ncols int, progress func(int)) *asyncRows {
	a := &asyncRows{w: w, ncols: ncols, progress: progress, ch: make(chan rowBatch, 4), free: make(chan []Cell, 6), done: make(chan struct{})}
	go a.loop()
	return a
}

func (a *asyncRows) loop() {
	// On the writer's first error the loop ends: send then returns it, so
	// the export stops (a client gone, a full disk) instead of computing
	// rows nobody writes.
	defer close(a.done)
	for b := range a.ch {
		for r := 0; r+a.ncols <= len(b.cells); r += a.ncols {
			if a.err = a.w.WriteRow(b.cells[r : r+a.ncols]); a.err != nil {
				return
			}
		}
		if b.steps > 0 {
			a.progress(b.steps)
		}
		select {
		case a.free <- b.cells[:0]:
		default:
		}
	}
}

// WriteRow copies row into the current batch.
func (a *asyncRows) WriteRow(row []Cell) error {
	if a.cur.cells == nil {
		select {
		case a.cur.cells = <-a.free:
		default:
			a.cur.cells = make([]Cell, 0, asyncBatchRows*a.ncols)
		}
	}
	a.cur.cells = append(a.cur.cells, row...)
	if len(a.cur.cells) >= asyncBatchRows*a.ncols {
		return a.send()
	}
	return nil
}

func (a *asyncRows) Close() error { return nil }

// stepDone sends the rows so far, to be followed by progress(done).
func (a *asyncRows) stepDone(done int) error {
	a.cur.steps = done
	return a.send()
}

func (a *asyncRows) send() error {
	select {
	case <-a.done:
		return a.err
	case a.ch <- a.cur:
	}
	a.cur = rowBatch{}
	return nil
}

// close waits for the writer and returns its error.
func (a *asyncRows) close() error {
	close(a.ch)
	<-a.done
	return a.err
}

// stepAcc is one open step's statistics: per query, per group index.
type stepAcc struct{ q [][]accum }

// runState holds what Run carries from chunk to chunk and step to step.
type runState struct {
	p    *Plan
	open map[int]*stepAcc // open steps by index
	free []*stepAcc       // closed steps' statistics, for reuse
	// first: the first step of the tier run being read; next: the next
	// step to close
	first, next int
	// series is the most series a selector's read of the tier being
	// read has returned: chunkLength sizes the next read by it.
	series int
	// counters and histograms: each series' last value, for the step
	// across window (and chunk, and step) boundaries
	prevLast []map[uint64]float64
	// groups seen so far (the selectors', plus any an expression adds):
	// their index, and the indexes in key order (nil when one was added)
	gidx   map[groupKey]int
	gkeys  []groupKey
	gcells [][]Cell // per group index, its group-by columns' cells
	sorted []int
	row    []Cell
}

func newRunState(p *Plan) *runState {
	s := &runState{p: p, gidx: map[groupKey]int{}, open: map[int]*stepAcc{}}
	for _, g := range p.groups {
		s.groupIndex(g)
	}
	for range p.queries {
		s.prevLast = append(s.prevLast, map[uint64]float64{})
	}
	return s
}

func (s *runState) groupIndex(g groupKey) int {
	i, ok := s.gidx[g]
	if !ok {
		i = len(s.gkeys)
		s.gidx[g] = i
		s.gkeys = append(s.gkeys, g)
		var cells []Cell
		for _, v := range g.values(len(s.p.groupCols)) {
			cells = append(cells, Cell{S: v})
		}
		s.gcells = append(s.gcells, cells)
		s.sorted = nil
	}
	return i
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
			sel, err := src.src.SelectFields(ctx, from-src.res, from-1, tiers.FieldLast, q.matchers...)
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

// acc returns step k's statistics of query qi for group index gi.
func (s *runState) acc(k, qi, gi int) *accum {
	st := s.open[k]
	if st == nil {
		if n := len(s.free); n > 0 {
			st, s.free = s.free[n-1], s.free[:n-1]
		} else {
			st = &stepAcc{q: make([][]accum, len(s.p.queries))}
		}
		s.open[k] = st
	}
	q := st.q[qi]
	for len(q) <= gi {
		q = append(q, accum{})
	}
	st.q[qi] = q
	return &q[gi]
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
		sel, err := t.src.SelectFields(ctx, c.start, c.end-1, q.kind.fields(), q.matchers...)
		if err != nil {
			return fmt.Errorf("export %s: %w", q.text, err)
		}
		s.series = max(s.series, len(sel))
		for _, sw := range sel {
			g, ok := s.p.groupOf(sw.Labels)
			if !ok {
				continue
			}
			gi := s.groupIndex(g)
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
				a := s.acc(k, qi, gi)
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
		gi := s.groupIndex(g)
		for len(pts) > 0 {
			k := s.stepOf(pts[0].T + 1 - t.res)
			n := 1
			if k >= 0 {
				for n < len(pts) && pts[n].T+1-t.res < s.p.steps[k].end {
					n++
				}
				s.acc(k, qi, gi).addPoints(h, pts[:n])
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

// closeStep writes step k's rows, one per group in group order, and keeps
// its statistics' memory for the next step.
func (s *runState) closeStep(k int, w RowWriter) error {
	st, t := s.p.steps[k], s.p.tiers[k]
	slots := float64((st.end - st.start) / t.res)
	sa := s.open[k]
	delete(s.open, k)
	if s.sorted == nil {
		s.sorted = make([]int, len(s.gkeys))
		for i := range s.sorted {
			s.sorted[i] = i
		}
		slices.SortFunc(s.sorted, func(a, b int) int {
			switch {
			case s.gkeys[a] < s.gkeys[b]:
				return -1
			case s.gkeys[a] > s.gkeys[b]:
				return 1
			}
			return 0
		})
	}
	var empty accum
	for _, gi := range s.sorted {
		row := s.row[:0]
		row = append(row, s.gcells[gi]...)
		row = append(row, Cell{I: st.start}, Cell{I: st.end}, Cell{S: t.name})
		for qi, q := range s.p.queries {
			a := &empty
			if sa != nil && gi < len(sa.q[qi]) {
				a = &sa.q[qi][gi]
			}
			row = a.appendCells(row, q, slots, st, t.res)
		}
		s.row = row
		if err := w.WriteRow(row); err != nil {
			return err
		}
	}
	if sa != nil {
		for qi := range sa.q {
			for i := range sa.q[qi] {
				sa.q[qi][i].reset()
			}
		}
		s.free = append(s.free, sa)
	}
	return nil
}

// accum is one group's statistics over one step for one query. Its zero
// value is empty; reset empties it keeping its memory.
type accum struct {
	used    bool
	windows int      // windows (or evaluation points) with data
	series  []uint64 // series seen, repeated once per read (for a histogram: its +Inf buckets)
	// gauges and expressions
	sum, count float64
	min, max   float64
	// the window averages, and per read the series' last sample
	avgs oneOrMore[float64]
	last oneOrMore[lastValue]
	// counters
	increase float64
	slots    map[int64]float64 // window start -> the group's increase in it (query.slotPeak)
	// histograms: increase per upper bound
	buckets map[float64]float64
	// expressions: evaluation times with a value
	points map[int64]struct{}
}

type lastValue struct {
	h uint64
	t int64
	v float64
}

func (a *accum) use() {
	if !a.used {
		a.used, a.min, a.max = true, math.Inf(1), math.Inf(-1)
	}
}

func (a *accum) reset() {
	*a = accum{series: a.series[:0], avgs: a.avgs.emptied(), last: a.last.emptied(), slots: a.slots, buckets: a.buckets, points: a.points}
	clear(a.slots)
	clear(a.buckets)
	clear(a.points)
}

func (a *accum) addGauge(h uint64, ws []tiers.Window) {
	if len(ws) == 0 {
		return
	}
	a.use()
	a.series = append(a.series, h)
	for i := range ws {
		w := &ws[i]
		a.windows++
		a.sum += w.Sum
		a.count += float64(w.Count)
		a.min = min(a.min, w.Min)
		a.max = max(a.max, w.Max)
		a.avgs.add(w.Sum / float64(w.Count))
	}
	lw := &ws[len(ws)-1]
	a.last.add(lastValue{h, lw.LastT, lw.Last})
}

// oneOrMore is a list whose first element is held inline, the slice used
// from the second on: closing a step of one window per group (an hourly
// export) then reads nothing beside the accums, which lie side by side (a
// slice of its own per group cost a cache miss per row).
type oneOrMore[T any] struct {
	n     int
	first T
	all   []T // every element once there are two
}

func (l *oneOrMore[T]) add(v T) {
	switch l.n {
	case 0:
		l.first = v
	case 1:
		l.all = append(l.all[:0], l.first, v)
	default:
		l.all = append(l.all, v)
	}
	l.n++
}

// items returns the elements, the only one in one when there is one.
func (l *oneOrMore[T]) items(one *[1]T) []T {
	switch l.n {
	case 0:
		return nil
	case 1:
		one[0] = l.first
		return one[:]
	}
	return l.all
}

// emptied is an empty list that keeps l's slice for reuse.
func (l *oneOrMore[T]) emptied() oneOrMore[T] { return oneOrMore[T]{all: l.all[:0]} }

// sortedAvgs returns the window averages sorted (in one the caller passes
// when there is a single one).
func (a *accum) sortedAvgs(one *[1]float64) []float64 {
	avgs := a.avgs.items(one)
	slices.Sort(avgs)
	return avgs
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
	a.use()
	a.series = append(a.series, h)
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
	a.use()
	if math.IsInf(le, 1) {
		a.series = append(a.series, h)
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
	a.use()
	a.series = append(a.series, h)
	if a.points == nil {
		a.points = map[int64]struct{}{}
	}
	for _, pt := range pts {
		a.points[pt.T] = struct{}{}
		a.sum += pt.F
		a.count++
		a.min = min(a.min, pt.F)
		a.max = max(a.max, pt.F)
		a.avgs.add(pt.F)
	}
	lp := pts[len(pts)-1]
	a.last.add(lastValue{h, lp.T, lp.F})
}

// distinctSeries counts the distinct hashes in a.series (sorting it).
func (a *accum) distinctSeries() int {
	if len(a.series) <= 1 {
		return len(a.series)
	}
	slices.Sort(a.series)
	return len(slices.Compact(a.series))
}

// lastMean is the mean over the series of each one's latest last sample.
func (a *accum) lastMean() float64 {
	var one [1]lastValue
	last := a.last.items(&one)
	switch len(last) {
	case 0:
		return math.NaN()
	case 1:
		return last[0].v
	}
	slices.SortFunc(last, func(x, y lastValue) int {
		if x.h != y.h {
			if x.h < y.h {
				return -1
			}
			return 1
		}
		return int(x.t - y.t)
	})
	sum, n := 0.0, 0
	for i, lv := range last {
		if i+1 == len(last) || last[i+1].h != lv.h {
			sum += lv.v
			n++
		}
	}
	return sum / float64(n)
}

var null = Cell{Null: true}

func num(v float64) Cell {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return null
	}
	return Cell{F: v}
}

// appendCells appends the query's columns for this group and step.
func (a *accum) appendCells(row []Cell, q *query, slots float64, st span, res int64) []Cell {
	nSeries := a.distinctSeries()
	if !a.used || nSeries == 0 {
		row = append(row, Cell{I: 0}, Cell{F: 0})
		for range len(statsOf(q)) {
			row = append(row, null)
		}
		return row
	}
	cov := float64(a.windows) / (float64(nSeries) * slots)
	if q.expr != nil {
		cov = float64(len(a.points)) / slots
	}
	row = append(row, Cell{I: int64(nSeries)}, Cell{F: min(cov, 1)})
	switch {
	case q.expr != nil || q.kind == KindGauge:
		var one [1]float64
		avgs := a.sortedAvgs(&one)
		row = append(row, num(a.sum/a.count), num(a.min), num(a.max),
			num(quantile(0.5, avgs)), num(quantile(0.95, avgs)), num(quantile(0.99, avgs)),
			num(a.lastMean()))
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
