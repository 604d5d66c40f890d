package tiers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/strata-dev/strata/internal/seriesset"
	"github.com/strata-dev/strata/internal/timegrid"
)

// OpenWindowSource is the rollup pipeline's minute windows that are computed
// (final) but not yet flushed to a partition file; *downsample.Pipeline
// implements it.
type OpenWindowSource interface {
	// VisitOpenWindows hands sink the in-memory minute windows starting in
	// [mint, maxt] of the series matching every matcher: Series once for
	// each series, in any order. It must be safe for concurrent use with
	// the pipeline.
	VisitOpenWindows(mint, maxt int64, sink OpenWindowSink, matchers ...*labels.Matcher)
}

// OpenWindowSink receives an OpenWindowSource's windows, so that a reader
// copies them once, where it keeps them, instead of receiving a copy to copy
// again, and a source need not hold every series' windows to hand them over
// in label order: the sink orders them.
type OpenWindowSink interface {
	// Want is asked once for each series the matchers select, before its
	// windows are read: whether they are wanted, and the earliest start
	// wanted (earlier windows are not read).
	Want(lset labels.Labels) (from int64, ok bool)
	// Series is one series' windows, ascending by start; a series comes at
	// most once. ws is the source's buffer, reused once Series returns:
	// copy what is kept.
	Series(lset labels.Labels, ws []Window)
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
	// opened is how many open series the last SnapshotFrom collected: the
	// next one sizes its list for that many (the engine's snapshot reads
	// about the same series every minute), instead of growing it by
	// doubling.
	opened atomic.Int64
	shared storage.AppendableV2 // WithSharedLabels
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

// WithSharedLabels makes the series a snapshot reads from the minute
// tier's files take their label sets from src when it holds an equal one
// (the raw tier's head, through its appenders' storage.GetRef; nothing is
// appended), instead of a copy decoded from the file: at 500,000 series
// the copies were about 100 MB, held by the diagnosis engine's snapshot in
// the ten minutes after each hour's minute partition is written, while the
// head held the same label sets. The series read from memory share the
// rollup tee's, which are the head's already.
func WithSharedLabels(src storage.AppendableV2) MinuteViewOption {
	return func(v *MinuteView) { v.shared = src }
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
	return v.SnapshotFrom(ctx, mint, maxt, nil, matchers...)
}

// SnapshotFrom is Snapshot, keeping of each series' windows only those
// starting at or after from(its metric name) (nil: mint): a reader that
// knows how far back it reads each metric (the diagnosis engine: its rules'
// ranges) holds no more, whether the windows are in memory or already
// flushed to disk. Queries that reach before from find the series without
// those windows: the caller sizes from.
func (v *MinuteView) SnapshotFrom(ctx context.Context, mint, maxt int64, from func(metricName string) int64, matchers ...*labels.Matcher) (*MinuteSnapshot, error) {
	return v.SnapshotFor(ctx, mint, maxt, SnapshotReads{From: from}, matchers...)
}

// SnapshotReads is what a snapshot's reader reads of each metric name, so
// that the snapshot holds no more (the diagnosis engine derives it from its
// rules' expressions). The zero value reads everything.
type SnapshotReads struct {
	// From is the earliest window start read (nil: mint), as SnapshotFrom
	// takes it. It is called from the goroutines reading the snapshot, one
	// at a time.
	From func(metricName string) int64
	// Columns is the window columns the selects of the name read (nil:
	// every column): a snapshot select that needs another fails with
	// ErrColumnNotLoaded rather than read it as zero. It must be safe for
	// concurrent use (the minute tier's readers call it in parallel).
	Columns func(metricName string) WindowColumns
}

// WindowColumns is a set of a window's aggregates, as a snapshot holds them.
type WindowColumns colSet

// AllWindowColumns is every column.
const AllWindowColumns = WindowColumns(colAll)

// ColumnsForFunc is the columns a select reads when its hints' Func is fn
// (storage.SelectHints: the function or aggregation around the selector,
// "" for none), as the minute view turns windows into samples for it.
func ColumnsForFunc(fn string) WindowColumns { return WindowColumns(columnsFor(modeForFunc(fn))) }

// ErrColumnNotLoaded is returned by a MinuteSnapshot's select whose
// function reads a window column the snapshot did not load for a series
// it finds (SnapshotReads.Columns left it out): the caller's columns are
// wrong, and answering would read the column as zero.
var ErrColumnNotLoaded = errors.New("query reads a window column the minute snapshot did not load")

// SnapshotFor is Snapshot, holding only what reads says its reader reads.
func (v *MinuteView) SnapshotFor(ctx context.Context, mint, maxt int64, reads SnapshotReads, matchers ...*labels.Matcher) (*MinuteSnapshot, error) {
	if len(matchers) == 0 {
		matchers = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")}
	}
	series, err := v.selectSeries(ctx, mint, maxt, matchers, reads)
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
// [floor(mint), maxt], open windows merged in (from floor(reads.From(name))
// when set), of each only reads.Columns(name) when set, hidden names left
// out.
func (v *MinuteView) selectSeries(ctx context.Context, mint, maxt int64, ms []*labels.Matcher, reads SnapshotReads) ([]selectedSeries, error) {
	res := v.Resolution()
	lo := timegrid.Floor(mint, res)
	if v.hidesAll(ms) {
		return nil, nil
	}
	open := openCollector{res: res, lo: lo, hidden: v.hidden, from: reads.From, cols: reads.Columns}
	if v.open != nil {
		// The sizing hint is SnapshotFrom's (the diagnosis engine's
		// minute, the same matchers every minute): other selects'
		// matchers differ from one to the next.
		if n := v.opened.Load(); n > 0 && reads.From != nil {
			open.series = make([]openRows, 0, n+n/16)
		}
		v.open.VisitOpenWindows(lo, maxt, &open, ms...) // before the disk: see MinuteView
		if reads.From != nil {
			v.opened.Store(int64(len(open.series)))
		}
	}
	opts := selectOptions{need: colAll, shared: v.shared}
	if cols := reads.Columns; cols != nil {
		opts.seriesNeed = func(l labels.Labels) colSet { return colSet(cols(l.Get(model.MetricNameLabel))) }
	}
	if from := reads.From; from != nil {
		// The engine's snapshot finds on disk about the series it found
		// open: every series has windows in both but for the first minutes
		// of an hour, and series that ended in the last.
		opts.seriesHint = len(open.series)
		// The disk's windows are cut as the open ones: after an hour's
		// partition is written, the engine's snapshot read all of its
		// reach's windows of every series from the file (three times those
		// it reads from the open windows before, at 500,000 series).
		var mu sync.Mutex // the readers ask in parallel; From is for one goroutine
		opts.seriesFrom = func(l labels.Labels) int64 {
			mu.Lock()
			defer mu.Unlock()
			return from(l.Get(model.MetricNameLabel))
		}
	}
	disk, err := v.minute.selectColumns(ctx, lo, maxt, ms, opts)
	if err != nil {
		return nil, err
	}
	out := mergeOpen(disk, &open)
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

// openCollector is selectSeries' OpenWindowSink: the open series' windows
// go once into shared blocks (see windowSeq), a series' rows contiguous in
// one block, where the selected series read them.
type openCollector struct {
	res, lo int64
	hidden  func(metricName string) bool
	from    func(metricName string) int64
	cols    func(metricName string) WindowColumns // nil: every column
	// cur is the blocks being filled, one per set of columns (a snapshot's
	// readers read a few sets).
	cur    sharedBlocks
	series []openRows // as handed over; sorted by labels by mergeOpen
}

// openRows is an open series' windows: rows [off, off+n) of blk.
type openRows struct {
	lbls   labels.Labels
	blk    *windowBlock
	off, n int
}

func (c *openCollector) Want(lset labels.Labels) (int64, bool) {
	name := lset.Get(model.MetricNameLabel)
	if c.hidden != nil && c.hidden(name) {
		return 0, false
	}
	if c.from == nil {
		return c.lo, true
	}
	return max(c.lo, timegrid.Floor(c.from(name), c.res)), true
}

func (c *openCollector) Series(lset labels.Labels, ws []Window) {
	if len(ws) == 0 {
		return
	}
	need := colAll
	if c.cols != nil {
		need = colSet(c.cols(lset.Get(model.MetricNameLabel))) | colLastT | colStale
	}
	b := c.cur.room(c.res, need, len(ws))
	c.series = append(c.series, openRows{lbls: lset, blk: b, off: len(b.lastT), n: len(ws)})
	appendWindows(b, ws)
}

// mergeOpen merges the open windows into the disk series (sorted by
// labels), preferring the disk's window of a start. The open windows stay
// in the collector's blocks: a series reads its rows there.
func mergeOpen(disk []selectedSeries, open *openCollector) []selectedSeries {
	if len(open.series) == 0 {
		return disk
	}
	slices.SortFunc(open.series, func(a, b openRows) int { return labels.Compare(a.lbls, b.lbls) })
	n := len(open.series)
	out := make([]selectedSeries, 0, len(disk)+n)
	i, j := 0, 0
	for i < len(disk) || j < n {
		var c int
		switch {
		case i == len(disk):
			c = 1
		case j == n:
			c = -1
		default:
			c = labels.Compare(disk[i].lbls, open.series[j].lbls)
		}
		switch {
		case c < 0:
			out = append(out, disk[i])
			i++
		case c > 0:
			o := open.series[j]
			s := selectedSeries{lbls: o.lbls}
			s.ws.add(o.blk, o.off, o.n)
			out = append(out, s)
			j++
		default:
			out = append(out, selectedSeries{lbls: disk[i].lbls, ws: mergeSeq(disk[i].ws, open.series[j])})
			i++
			j++
		}
	}
	return out
}

// mergeSeq adds the open windows (rows o of o.blk) whose start the disk
// sequence lacks; the ones after the disk's last window are read where they
// are. disk's slices may be extended in place: the disk series is not read
// after.
func mergeSeq(disk windowSeq, o openRows) windowSeq {
	shared := o.blk
	n := disk.Len()
	hint := 0
	last := int64(-1 << 62)
	if n > 0 {
		last = disk.startAt(n-1, &hint)
	}
	startOf := func(row int) int64 { return shared.startOf(shared.lastT[row]) }
	// The open rows ascend: those after the disk's last window are a suffix.
	k := o.off + sort.Search(o.n, func(r int) bool { return startOf(o.off+r) > last })
	var inside []Window
	for row := o.off; row < k; row++ {
		s := startOf(row)
		d := sort.Search(n, func(d int) bool { h := 0; return disk.startAt(d, &h) >= s })
		if h := 0; d == n || disk.startAt(d, &h) != s {
			var w Window
			shared.window(row, &w)
			inside = append(inside, w)
		}
	}
	after := o.off + o.n - k
	if len(inside) > 0 {
		// Not seen in practice (open hours are never older than flushed
		// ones); kept correct by rebuilding the whole sequence.
		all := append(disk.appendTo(make([]Window, 0, n+len(inside)+after)), inside...)
		for row := k; row < o.off+o.n; row++ {
			var w Window
			shared.window(row, &w)
			all = append(all, w)
		}
		slices.SortFunc(all, func(a, b Window) int { return cmp.Compare(a.Start, b.Start) })
		return seqOf(blockFromWindows(shared.res, disk.cols()&shared.cols, all))
	}
	if after > 0 {
		disk.add(shared, k, after)
	}
	return disk
}

// blockFromWindows holds ws (ascending) in a block of the columns cols.
func blockFromWindows(res int64, cols colSet, ws []Window) *windowBlock {
	b := newWindowBlock(res, cols, len(ws))
	appendWindows(b, ws)
	return b
}

// appendWindows appends ws as rows of b (the columns b holds).
func appendWindows(b *windowBlock, ws []Window) {
	for _, w := range ws {
		b.lastT = append(b.lastT, w.LastT)
		appendIf(&b.firstT, w.FirstT)
		appendIf(&b.count, int64(w.Count))
		appendIf(&b.sum, w.Sum)
		appendIf(&b.min, w.Min)
		appendIf(&b.max, w.Max)
		appendIf(&b.first, w.First)
		appendIf(&b.last, w.Last)
		appendIf(&b.increase, w.Increase)
		appendIf(&b.resets, int32(min(w.Resets, 1<<31-1))) //nolint:gosec // clamped
		if w.Stale {
			b.staleRows = append(b.staleRows, int32(len(b.lastT)-1)) //nolint:gosec // block rows fit
		}
	}
}

// appendIf appends v to a column the block holds (a nil one it does not).
func appendIf[T any](col *[]T, v T) {
	if *col != nil {
		*col = append(*col, v)
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
	series, err := q.v.selectSeries(ctx, mint, maxt, ms, SnapshotReads{})
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	return seriesSetOf(series, q.v.Resolution(), hints, mint, maxt)
}

func (q *minuteQuerier) labelSets(ctx context.Context, ms []*labels.Matcher) ([]labels.Labels, error) {
	if len(ms) == 0 {
		ms = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")}
	}
	series, err := q.v.selectSeries(ctx, q.mint, q.maxt, ms, SnapshotReads{})
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

// matching returns the indexes of the series matching every matcher, in
// label order (ascending: the snapshot's series are sorted). A select reads
// only the series of the names its name matcher matches (the snapshot holds
// a few hundred names and tens of thousands of series).
func (q *snapshotQuerier) matching(ms []*labels.Matcher) []int32 {
	var name *labels.Matcher
	for _, m := range ms {
		if m.Name != model.MetricNameLabel {
			continue
		}
		if m.Type == labels.MatchEqual {
			name = m
			break
		}
		if name == nil && m.Type == labels.MatchRegexp {
			name = m
		}
	}
	var out []int32
	check := func(i int) {
		if seriesset.MatchAll(q.s.series[i].lbls, ms) {
			out = append(out, int32(i)) //nolint:gosec // a snapshot's series fit
		}
	}
	switch {
	case name != nil && name.Type == labels.MatchEqual:
		cand := q.s.byName[name.Value]
		out = make([]int32, 0, len(cand))
		for _, i := range cand {
			check(i)
		}
	case name != nil:
		n := 0
		for v, cand := range q.s.byName {
			if name.Matches(v) {
				n += len(cand)
			}
		}
		out = make([]int32, 0, n)
		for v, cand := range q.s.byName {
			if name.Matches(v) {
				for _, i := range cand {
					check(i)
				}
			}
		}
		slices.Sort(out)
	default:
		for i := range q.s.series {
			check(i)
		}
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
	set := &snapshotSet{part: minutePart(windowSeq{}, q.s.res, hints, mint, satAdd(maxt, 1)), series: make([]snapshotSeries, len(found))}
	need := columnsFor(set.part.mode)
	for k, i := range found {
		sel := &q.s.series[i]
		if !sel.ws.holds(need) {
			fn := ""
			if hints != nil {
				fn = hints.Func
			}
			return storage.ErrSeriesSet(fmt.Errorf("%w: %s of %s", ErrColumnNotLoaded, cmp.Or(fn, "a plain selector"), sel.lbls.Get(model.MetricNameLabel)))
		}
		set.series[k] = snapshotSeries{sel: sel, part: &set.part}
	}
	return set
}

// snapshotSet is a snapshot select's series: each points at the
// snapshot's series and at the part parameters the select shares (the
// function's mode, the range), 16 bytes a series, where a stitched series
// with its own part took 250; the windows are read where the snapshot
// holds them. The diagnosis engine selects tens of thousands of series a
// minute this way.
type snapshotSet struct {
	part   seriesPart // windows unset: each series' own
	series []snapshotSeries
	i      int
}

func (s *snapshotSet) Next() bool {
	if s.i >= len(s.series) {
		return false
	}
	s.i++
	return true
}
func (s *snapshotSet) At() storage.Series                { return &s.series[s.i-1] }
func (s *snapshotSet) Err() error                        { return nil }
func (s *snapshotSet) Warnings() annotations.Annotations { return nil }

type snapshotSeries struct {
	sel  *selectedSeries
	part *seriesPart
}

func (s *snapshotSeries) Labels() labels.Labels { return s.sel.lbls }

// Iterator implements storage.Series, reusing reuse when it is a snapshot
// series' iterator (the engine passes each series' on to the next).
func (s *snapshotSeries) Iterator(reuse chunkenc.Iterator) chunkenc.Iterator {
	it, ok := reuse.(*snapshotIter)
	if !ok {
		it = &snapshotIter{}
	}
	it.part = *s.part
	it.part.windows = s.sel.ws
	it.windowIter = windowIter{p: &it.part, n: it.part.windows.Len(), i: -1, pts: it.pts[:0]}
	return it
}

// snapshotIter is a windowIter over its own copy of the part.
type snapshotIter struct {
	windowIter
	part seriesPart
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
	for k, i := range sel {
		out[k] = q.s.series[i].lbls
	}
	return out
}

// Close implements storage.Querier.
func (q *snapshotQuerier) Close() error { return nil }
