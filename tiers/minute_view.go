package tiers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/strata-dev/strata/internal/timegrid"
)

// OpenWindowSource is the rollup pipeline's minute windows that are computed
// (final) but not yet flushed to a partition file; *downsample.Pipeline
// implements it.
type OpenWindowSource interface {
	// OpenWindowsIn returns copies of the in-memory minute windows starting
	// in [mint, maxt] of the series matching every matcher, sorted by
	// labels, each series' windows ascending. It must be safe for concurrent
	// use with the pipeline.
	OpenWindowsIn(mint, maxt int64, matchers ...*labels.Matcher) []SeriesWindows
}

// MinuteView is the minute windows only, as a storage.Queryable: the minute
// tier's partitions on disk merged with the pipeline's open (in-memory,
// not yet flushed) windows. It is what the diagnosis engine reads, so that a
// live evaluation at minute T and a replay of the same minute long after (raw
// data gone, or history imported by a backfill) see exactly the same data.
//
// Windows become synthetic samples per PromQL function exactly as in
// Stitched (docs/format/minute.md, "Querying"); since a minute is shorter
// than the engine's lookback delta, plain selectors need no repeated samples.
// Open windows are read before the disk, and a window found in both is taken
// from the disk: a partition flushed between the two reads is then read from
// its file and nothing is lost.
//
// MinuteView is safe for concurrent use.
type MinuteView struct {
	minute *Rollup
	open   OpenWindowSource
	hidden func(metricName string) bool
}

// MinuteViewOption configures a MinuteView.
type MinuteViewOption func(*MinuteView)

// WithHiddenNames hides every series whose metric name hide reports true:
// the diagnosis engine hides the series it writes itself (its recording
// rules' names, ALERTS ...), which in live mode also reach the minute tier and
// would otherwise be read twice.
func WithHiddenNames(hide func(metricName string) bool) MinuteViewOption {
	return func(v *MinuteView) { v.hidden = hide }
}

// NewMinuteView returns the minute view over minute (required) and open
// (nil: the disk only).
func NewMinuteView(minute *Rollup, open OpenWindowSource, opts ...MinuteViewOption) *MinuteView {
	v := &MinuteView{minute: minute, open: open}
	for _, o := range opts {
		o(v)
	}
	return v
}

// Resolution is the window length, in milliseconds.
func (v *MinuteView) Resolution() int64 { return v.minute.cfg.Resolution.Milliseconds() }

// Querier implements storage.Queryable.
func (v *MinuteView) Querier(mint, maxt int64) (storage.Querier, error) {
	return &minuteQuerier{v: v, mint: mint, maxt: maxt}, nil
}

// Snapshot loads the windows starting in [mint, maxt] of every (not hidden)
// series matching the matchers (none: every series) into memory, once, for
// many queries that all fall inside that range: the diagnosis engine
// evaluates dozens of expressions per minute, and replay evaluates
// thousands of minutes per snapshot. Queries of other series find nothing.
func (v *MinuteView) Snapshot(ctx context.Context, mint, maxt int64, matchers ...*labels.Matcher) (*MinuteSnapshot, error) {
	if len(matchers) == 0 {
		matchers = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")}
	}
	series, err := v.selectSeries(ctx, mint, maxt, matchers)
	if err != nil {
		return nil, err
	}
	s := &MinuteSnapshot{res: v.Resolution(), mint: timegrid.Floor(mint, v.Resolution()), maxt: maxt, series: series, byName: map[string][]int{}}
	for i, ser := range series {
		name := ser.lbls.Get(model.MetricNameLabel)
		s.byName[name] = append(s.byName[name], i)
	}
	return s, nil
}

// selectSeries returns the matching series with windows starting in
// [floor(mint), maxt], open windows merged in, hidden names left out.
func (v *MinuteView) selectSeries(ctx context.Context, mint, maxt int64, ms []*labels.Matcher) ([]selectedSeries, error) {
	res := v.Resolution()
	lo := timegrid.Floor(mint, res)
	if v.hidesAll(ms) {
		return nil, nil
	}
	var open []SeriesWindows
	if v.open != nil {
		open = v.open.OpenWindowsIn(lo, maxt, ms...) // before the disk: see MinuteView
	}
	disk, err := v.minute.selectColumns(ctx, lo, maxt, ms, selectOptions{need: colAll})
	if err != nil {
		return nil, err
	}
	out := mergeOpen(disk, open, res, lo, maxt)
	if v.hidden != nil {
		out = slices.DeleteFunc(out, func(s selectedSeries) bool { return v.hidden(s.lbls.Get(model.MetricNameLabel)) })
	}
	return out, nil
}

// hidesAll reports whether a metric-name equality matcher names a hidden series.
func (v *MinuteView) hidesAll(ms []*labels.Matcher) bool {
	if v.hidden == nil {
		return false
	}
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual && v.hidden(m.Value) {
			return true
		}
	}
	return false
}

// mergeOpen merges the open windows (starting in [lo, maxt]) into the disk
// series (both sorted by labels), preferring the disk's window of a start.
func mergeOpen(disk []selectedSeries, open []SeriesWindows, res, lo, maxt int64) []selectedSeries {
	if len(open) == 0 {
		return disk
	}
	// Every open series' windows go into one shared block (see windowSeq).
	total := 0
	for j := range open {
		total += len(clampWindows(open[j].Windows, lo, maxt))
	}
	shared := newWindowBlock(res, colAll, total)
	// The open-only series' one-block sequences, from three allocations.
	blocks, ends, offs := make([]*windowBlock, len(open)), make([]int, len(open)), make([]int, len(open))
	out := make([]selectedSeries, 0, len(disk)+len(open))
	i, j := 0, 0
	for i < len(disk) || j < len(open) {
		var c int
		switch {
		case i == len(disk):
			c = 1
		case j == len(open):
			c = -1
		default:
			c = labels.Compare(disk[i].lbls, open[j].Labels)
		}
		switch {
		case c < 0:
			out = append(out, disk[i])
			i++
		case c > 0:
			if ws := clampWindows(open[j].Windows, lo, maxt); len(ws) > 0 {
				blocks[j], ends[j], offs[j] = shared, len(ws), len(shared.lastT)
				appendWindows(shared, ws)
				out = append(out, selectedSeries{lbls: open[j].Labels, ws: windowSeq{blocks: blocks[j : j+1 : j+1], ends: ends[j : j+1 : j+1], offs: offs[j : j+1 : j+1]}})
			}
			j++
		default:
			out = append(out, selectedSeries{lbls: disk[i].lbls, ws: mergeSeq(disk[i].ws, clampWindows(open[j].Windows, lo, maxt), res, shared)})
			i++
			j++
		}
	}
	return out
}

func clampWindows(ws []Window, lo, maxt int64) []Window {
	a := sort.Search(len(ws), func(k int) bool { return ws[k].Start >= lo })
	b := sort.Search(len(ws), func(k int) bool { return ws[k].Start > maxt })
	return ws[a:max(a, b)]
}

// mergeSeq adds the open windows whose start the disk sequence lacks (the
// ones after the disk's last window go into shared).
func mergeSeq(disk windowSeq, open []Window, res int64, shared *windowBlock) windowSeq {
	n := disk.Len()
	hint := 0
	last := int64(-1 << 62)
	if n > 0 {
		last = disk.startAt(n-1, &hint)
	}
	var after, inside []Window
	for _, w := range open {
		switch {
		case w.Start > last:
			after = append(after, w)
		default:
			k := sort.Search(n, func(k int) bool { h := 0; return disk.startAt(k, &h) >= w.Start })
			if h := 0; k == n || disk.startAt(k, &h) != w.Start {
				inside = append(inside, w)
			}
		}
	}
	if len(inside) > 0 {
		// Not seen in practice (open hours are never older than flushed
		// ones); kept correct by rebuilding the whole sequence.
		all := append(disk.appendTo(make([]Window, 0, n+len(open))), inside...)
		all = append(all, after...)
		slices.SortFunc(all, func(a, b Window) int { return cmp.Compare(a.Start, b.Start) })
		return seqOf(blockFromWindows(res, all))
	}
	if len(after) == 0 {
		return disk
	}
	out := windowSeq{blocks: slices.Clone(disk.blocks), ends: slices.Clone(disk.ends), offs: slices.Clone(disk.offs)}
	if out.offs == nil {
		out.offs = make([]int, len(out.blocks), len(out.blocks)+1)
	}
	out.offs = append(out.offs, len(shared.lastT))
	appendWindows(shared, after)
	out.blocks = append(out.blocks, shared)
	out.ends = append(out.ends, n+len(after))
	return out
}

func seqOf(b *windowBlock) windowSeq {
	return windowSeq{blocks: []*windowBlock{b}, ends: []int{len(b.lastT)}}
}

// blockFromWindows holds ws (ascending) in a block with every column.
func blockFromWindows(res int64, ws []Window) *windowBlock {
	b := newWindowBlock(res, colAll, len(ws))
	appendWindows(b, ws)
	return b
}

// appendWindows appends ws as rows of b (every column).
func appendWindows(b *windowBlock, ws []Window) {
	for _, w := range ws {
		b.firstT = append(b.firstT, w.FirstT)
		b.lastT = append(b.lastT, w.LastT)
		b.count = append(b.count, int64(w.Count))
		b.sum = append(b.sum, w.Sum)
		b.min = append(b.min, w.Min)
		b.max = append(b.max, w.Max)
		b.first = append(b.first, w.First)
		b.last = append(b.last, w.Last)
		b.increase = append(b.increase, w.Increase)
		b.resets = append(b.resets, int32(min(w.Resets, 1<<31-1))) //nolint:gosec // clamped
		if w.Stale {
			b.staleRows = append(b.staleRows, int32(len(b.lastT)-1)) //nolint:gosec // block rows fit
		}
	}
}

// minutePart turns one series' windows into the synthetic samples PromQL
// reads for the selector's function, over [lo, hi).
func minutePart(ws windowSeq, res int64, hints *storage.SelectHints, lo, hi int64) seriesPart {
	fn := ""
	var rng int64
	if hints != nil {
		fn, rng = hints.Func, hints.Range
	}
	mode := modeForFunc(fn)
	interp := int64(1)
	if mode == modeCounter && rng > 0 {
		interp = min(max(res*12/rng, 1), 12) // as Stitched: see selectRollup
	}
	return seriesPart{windows: ws, mode: mode, res: res, interp: interp, lo: lo, hi: hi}
}

func seriesSetOf(series []selectedSeries, res int64, hints *storage.SelectHints, mint, maxt int64) storage.SeriesSet {
	out := make([]*stitchedSeries, 0, len(series))
	for _, s := range series {
		out = append(out, &stitchedSeries{lbls: s.lbls, parts: []seriesPart{minutePart(s.ws, res, hints, mint, satAdd(maxt, 1))}})
	}
	return &stitchedSet{series: out}
}

type minuteQuerier struct {
	v          *MinuteView
	mint, maxt int64
}

// Select implements storage.Querier; series are always sorted.
func (q *minuteQuerier) Select(ctx context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = max(mint, hints.Start), min(maxt, hints.End)
	}
	if mint > maxt {
		return storage.EmptySeriesSet()
	}
	series, err := q.v.selectSeries(ctx, mint, maxt, ms)
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	return seriesSetOf(series, q.v.Resolution(), hints, mint, maxt)
}

func (q *minuteQuerier) labelSets(ctx context.Context, ms []*labels.Matcher) ([]labels.Labels, error) {
	if len(ms) == 0 {
		ms = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")}
	}
	series, err := q.v.selectSeries(ctx, q.mint, q.maxt, ms)
	if err != nil {
		return nil, err
	}
	out := make([]labels.Labels, len(series))
	for i, s := range series {
		out[i] = s.lbls
	}
	return out, nil
}

// LabelValues implements storage.Querier.
func (q *minuteQuerier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	sets, err := q.labelSets(ctx, ms)
	if err != nil {
		return nil, nil, err
	}
	return distinct(sets, hints, func(l labels.Labels, add func(string)) {
		if v := l.Get(name); v != "" {
			add(v)
		}
	}), nil, nil
}

// LabelNames implements storage.Querier.
func (q *minuteQuerier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	sets, err := q.labelSets(ctx, ms)
	if err != nil {
		return nil, nil, err
	}
	return distinct(sets, hints, func(l labels.Labels, add func(string)) {
		l.Range(func(lb labels.Label) { add(lb.Name) })
	}), nil, nil
}

func distinct(sets []labels.Labels, hints *storage.LabelHints, each func(labels.Labels, func(string))) []string {
	seen := map[string]struct{}{}
	for _, l := range sets {
		each(l, func(s string) { seen[s] = struct{}{} })
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	slices.Sort(out)
	if hints != nil && hints.Limit > 0 && len(out) > hints.Limit {
		out = out[:hints.Limit]
	}
	return out
}

// Close implements storage.Querier.
func (q *minuteQuerier) Close() error { return nil }

// ErrOutsideSnapshot is returned by a MinuteSnapshot's selects that find
// series but reach before the range it holds: the caller sized the snapshot
// too small, and answering from it would silently miss data. (A select that
// finds no series, such as one of the diagnosis engine's own hidden names,
// may reach anywhere.)
var ErrOutsideSnapshot = errors.New("query reaches before the minute snapshot")

// MinuteSnapshot is a MinuteView's windows of a time range, held in memory;
// it is a storage.Queryable for queries inside that range (selecting series
// before it is an error, ErrOutsideSnapshot; later data does not exist in
// it). It is immutable and safe for concurrent use.
type MinuteSnapshot struct {
	res, mint, maxt int64
	series          []selectedSeries // sorted by labels
	byName          map[string][]int
}

// Range returns the window starts the snapshot covers, [mint, maxt] in ms.
func (s *MinuteSnapshot) Range() (mint, maxt int64) { return s.mint, s.maxt }

// Series is the number of series held.
func (s *MinuteSnapshot) Series() int { return len(s.series) }

// Querier implements storage.Queryable.
func (s *MinuteSnapshot) Querier(mint, maxt int64) (storage.Querier, error) {
	return &snapshotQuerier{s: s, mint: mint, maxt: maxt}, nil
}

type snapshotQuerier struct {
	s          *MinuteSnapshot
	mint, maxt int64
}

// matching returns the series matching every matcher, in label order.
func (q *snapshotQuerier) matching(ms []*labels.Matcher) []selectedSeries {
	var cand []int
	byName := false
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			cand, byName = q.s.byName[m.Value], true
			break
		}
	}
	var out []selectedSeries
	check := func(i int) {
		if matchesAll(q.s.series[i].lbls, ms) {
			out = append(out, q.s.series[i])
		}
	}
	if byName {
		for _, i := range cand {
			check(i)
		}
		return out
	}
	for i := range q.s.series {
		check(i)
	}
	return out
}

// Select implements storage.Querier; series are always sorted.
func (q *snapshotQuerier) Select(_ context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = max(mint, hints.Start), min(maxt, hints.End)
	}
	if mint > maxt {
		return storage.EmptySeriesSet()
	}
	found := q.matching(ms)
	if len(found) > 0 && mint < q.s.mint {
		return storage.ErrSeriesSet(fmt.Errorf("%w: select from %s, snapshot from %s", ErrOutsideSnapshot,
			time.UnixMilli(mint).UTC().Format(time.RFC3339), time.UnixMilli(q.s.mint).UTC().Format(time.RFC3339)))
	}
	return seriesSetOf(found, q.s.res, hints, mint, maxt)
}

// LabelValues implements storage.Querier.
func (q *snapshotQuerier) LabelValues(_ context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return distinct(q.labelSets(ms), hints, func(l labels.Labels, add func(string)) {
		if v := l.Get(name); v != "" {
			add(v)
		}
	}), nil, nil
}

// LabelNames implements storage.Querier.
func (q *snapshotQuerier) LabelNames(_ context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return distinct(q.labelSets(ms), hints, func(l labels.Labels, add func(string)) {
		l.Range(func(lb labels.Label) { add(lb.Name) })
	}), nil, nil
}

func (q *snapshotQuerier) labelSets(ms []*labels.Matcher) []labels.Labels {
	sel := q.matching(ms)
	out := make([]labels.Labels, len(sel))
	for i, s := range sel {
		out[i] = s.lbls
	}
	return out
}

// Close implements storage.Querier.
func (q *snapshotQuerier) Close() error { return nil }
