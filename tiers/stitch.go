package tiers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/strata-dev/strata/internal/timegrid"
)

// Stitched is the one storage.SampleAndChunkQueryable the query path reads:
// raw data where the raw tier still holds it, minute windows before that, hour
// windows before that, one series across all three with no gap and no
// overlap. Windows are turned back into synthetic samples chosen per PromQL
// function (SelectHints.Func) so that the upstream engine computes, over the
// synthetic samples, what it would have computed over the raw ones; the
// mapping and its tolerances are in docs/format/minute.md ("Querying").
//
// Stitched is safe for concurrent use.
type Stitched struct {
	raw          *Raw
	minute, hour *Rollup
	lookback     time.Duration
	maxWindows   int // bound on the rollup windows one Select holds (0: none)
	// minuteOnly names the series the minute tier alone holds (sorted),
	// their windows not yet in a partition read from open: see
	// WithMinuteOnlyNames.
	minuteOnly []string
	// minuteOnlyName matches the minute-only names: built once.
	minuteOnlyName *labels.Matcher
	open           OpenWindowSource
}

// StitchOption configures a Stitched.
type StitchOption func(*Stitched)

// WithLookbackDelta tells the stitched view the PromQL engine's lookback
// delta (default 5 m), so that it can fill tiers coarser than the lookback
// with repeated samples and plain selectors over the hour tier have no gaps.
func WithLookbackDelta(d time.Duration) StitchOption {
	return func(s *Stitched) {
		if d > 0 {
			s.lookback = d
		}
	}
}

// WithMinuteOnlyNames tells the stitched view that the series of these
// metric names are written to the minute tier only, never to raw: the
// diagnosis engine's baselines (downsample.Pipeline.Direct). They are served
// from the minute tier wherever raw would serve other series, its
// partitions and, for the minutes not yet in one, open's windows; a copy
// in the raw tier (written before they moved) is not read. A select whose
// metric-name matchers reject every one of these names costs what it cost
// without them (the raw-only fast path included).
func WithMinuteOnlyNames(names []string, open OpenWindowSource) StitchOption {
	return func(s *Stitched) {
		s.minuteOnly = slices.Sorted(slices.Values(names))
		alts := make([]string, len(s.minuteOnly))
		for i, n := range s.minuteOnly {
			alts[i] = regexp.QuoteMeta(n)
		}
		// Quoted names always compile.
		s.minuteOnlyName = labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, strings.Join(alts, "|"))
		s.open = open
	}
}

// NewStitched returns the stitched view over the three tiers. minute and hour
// may be nil (that tier is then empty).
//
// One Select holds at most 20,000,000 rollup windows in memory (16 bytes
// each for a plain selector, 52 for rate-like functions); a query past that
// fails with ErrTooManyWindows instead of exhausting memory.
//
// A coarse-step query is served from a coarser tier where one holds its
// range (Thanos' rule: the coarsest tier whose resolution is at most
// step/5, capped at range/2 for rate-like functions).
func NewStitched(raw *Raw, minute, hour *Rollup, opts ...StitchOption) *Stitched {
	s := &Stitched{raw: raw, minute: minute, hour: hour, lookback: 5 * time.Minute, maxWindows: 20_000_000}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Tier names as they appear in annotations, metrics and the status API.
const (
	TierRaw    = "raw"
	TierMinute = "minute"
	TierHour   = "hour"
)

// Querier implements storage.Queryable.
func (s *Stitched) Querier(mint, maxt int64) (storage.Querier, error) {
	return &stitchedQuerier{s: s, mint: mint, maxt: maxt, maxRes: -1}, nil
}

// ResolutionQuerier is Querier for a caller that states the coarsest window
// (ms) its selects may be served from, as a Thanos StoreAPI request does
// (MaxResolutionWindow), instead of the view deriving it from the hints'
// step (step/5). 0 keeps every tier's default range: raw where raw holds
// data. The hints' Func and Range still choose the synthetic samples.
//
// lookback > 0 is the lookback delta of the engine that will evaluate the
// samples, when it is not the view's own (a Thanos Querier's, which widens
// it for coarse resolutions). Plain selectors over a tier coarser than half
// of it then repeat a window's Last only where the next window's last sample
// is more than lookback later (every lookback, the fewest repeats that leave
// no gap), instead of every lookback/2.
func (s *Stitched) ResolutionQuerier(mint, maxt, maxResolution int64, lookback time.Duration) storage.Querier {
	return &stitchedQuerier{s: s, mint: mint, maxt: maxt, maxRes: max(maxResolution, 0), lookback: lookback}
}

// Generation implements query.CacheSource: it changes whenever a tier's
// data older than the raw tier's late-append horizon (Raw.TrackLateAppends)
// may have changed.
func (s *Stitched) Generation() uint64 {
	var g uint64
	if s.raw != nil {
		g = s.raw.Generation()
	}
	// The rollup tiers' counters only grow: a change of either changes the
	// sum's hash.
	return g ^ (s.minute.Generation()*0x9E3779B97F4A7C15 + s.hour.Generation()*0xC2B2AE3D27D4EB4F)
}

// RawFrom implements query.CacheSource: the oldest time from which plan
// gives no tier but raw any part of a select of a step at most maxStep
// (ms). A rollup tier serves only where it holds a partition, so nothing
// after the newest partition's end (math.MinInt64 when both rollup tiers
// are empty); raw serves from its start, and a step of five minute windows
// or more (maxResolution) has the minute tier serve up to the end of its
// newest partition instead.
func (s *Stitched) RawFrom(maxStep int64) int64 {
	rollupEnd := int64(math.MinInt64)
	_, mHi, mOK := tierBounds(s.minute)
	if mOK {
		rollupEnd = mHi
	}
	if _, hHi, ok := tierBounds(s.hour); ok {
		rollupEnd = max(rollupEnd, hHi)
	}
	if rollupEnd == math.MinInt64 {
		return rollupEnd
	}
	from := s.rawStart()
	if mOK && maxStep/5 >= tierRes(s.minute, time.Minute) && mHi > from {
		from = mHi
	}
	return min(from, rollupEnd)
}

// Derived implements query.CacheSource: whether the matchers may select a
// minute-only series (WithMinuteOnlyNames), whose minutes not yet in a
// partition are read from windows the diagnosis engine writes after them.
func (s *Stitched) Derived(ms []*labels.Matcher) bool {
	minuteOnly, _ := s.selectsMinuteOnly(ms)
	return minuteOnly
}

// MinTime returns the oldest time any tier holds data for (ms), and false
// when every tier is empty.
func (s *Stitched) MinTime() (int64, bool) {
	mint, ok := int64(math.MaxInt64), false
	if s.raw != nil {
		if lo, _, rok := s.raw.Bounds(); rok {
			mint, ok = lo, true
		}
	}
	for _, r := range []*Rollup{s.minute, s.hour} {
		if lo, _, rok := tierBounds(r); rok {
			mint, ok = min(mint, lo), true
		}
	}
	return mint, ok
}

// ExemplarQuerier implements storage.ExemplarQueryable: exemplars are
// kept by the raw tier alone (its TSDB's circular exemplar storage), so a
// stitched view answers /api/v1/query_exemplars from it. Without it the
// API stood in an empty storage and answered no exemplar ever written.
func (s *Stitched) ExemplarQuerier(ctx context.Context) (storage.ExemplarQuerier, error) {
	if s.raw == nil {
		return noExemplars{}, nil
	}
	return s.raw.ExemplarQuerier(ctx)
}

// noExemplars is the exemplar querier of a view without a raw tier.
type noExemplars struct{}

func (noExemplars) Select(int64, int64, ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	return []exemplar.QueryResult{}, nil
}

// ChunkQuerier implements storage.ChunkQueryable by encoding the stitched
// samples (plain-selector mapping: Last per window) into XOR chunks, so remote
// read sees the same series as PromQL's plain selectors.
func (s *Stitched) ChunkQuerier(mint, maxt int64) (storage.ChunkQuerier, error) {
	return &stitchedChunkQuerier{q: &stitchedQuerier{s: s, mint: mint, maxt: maxt, maxRes: -1}}, nil
}

// segment is a half-open time range [lo, hi) served by one tier.
type segment struct {
	tier   string
	lo, hi int64
}

// rawStart is the oldest time the raw tier serves. When the minute tier holds
// the window that raw's oldest sample falls in and partitions older than that
// sample's hour, raw's data of that window is partly gone (deleted by
// retention, or never there: history backfilled into the rollups only), so raw
// serves from that sample rounded up to a whole minute and the minute tier's
// windows never overlap it. Otherwise raw serves from its oldest sample: the
// minute tier, if it holds that window, rolled it up from these very samples
// (a fresh store whose first hour is final), and rounding up would hand the
// first partial minute to the minute tier, one sample a window for plain
// selectors and remote read instead of the raw samples.
func (s *Stitched) rawStart() int64 {
	if s.raw == nil {
		return math.MaxInt64
	}
	mint, _, ok := s.raw.Bounds()
	if !ok {
		return math.MaxInt64
	}
	up := timegrid.Ceil(mint, time.Minute.Milliseconds())
	if mLo, mHi, ok := tierBounds(s.minute); ok && mHi >= up && mLo < timegrid.Floor(mint, time.Hour.Milliseconds()) {
		return up
	}
	return mint
}

// gridAtOrAfter returns the first time origin + k*step (k any integer) at or
// after t: the first evaluation time of a range query that sees t.
func gridAtOrAfter(t, origin, step int64) int64 {
	return origin + timegrid.Ceil(t-origin, step)
}

func tierBounds(r *Rollup) (int64, int64, bool) {
	if r == nil {
		return 0, 0, false
	}
	return r.Bounds()
}

func tierRes(r *Rollup, def time.Duration) int64 {
	if r == nil {
		return def.Milliseconds()
	}
	return r.cfg.Resolution.Milliseconds()
}

// maxResolution is the coarsest window (ms) a selector may be served from
// (Thanos' auto-downsampling): step/5, capped at range/2 for rate-like
// functions so that a range always holds at least two windows.
func maxResolution(h *storage.SelectHints) int64 {
	if h == nil || h.Step <= 0 {
		return 0
	}
	r := h.Step / 5
	if h.Range > 0 && rateLike(h.Func) {
		r = min(r, h.Range/2)
	}
	return r
}

func rateLike(f string) bool {
	switch f {
	case "rate", "irate", "increase", "delta", "idelta", "deriv", "predict_linear", "holt_winters",
		"double_exponential_smoothing", "xrate", "xincrease", "xdelta", "resets", "changes":
		return true
	}
	return false
}

// plan splits [mint, maxt] into per-tier segments, oldest first. By default
// raw serves [rawStart, ∞), minute [oldest minute partition, rawStart) and
// hour the rest; with a coarse enough step the coarser tier extends up to the
// end of its newest partition and the finer tier serves only what follows.
// A rollup tier's segment is left out when that tier holds no partition in
// it, so a range the raw tier covers (a fresh store, or a dashboard over the
// last hours) plans raw alone and never opens a rollup.
//
// maxRes is the coarsest window (ms) a selector may be served from:
// maxResolution of the select hints, or what a StoreAPI request states.
func (s *Stitched) plan(mint, maxt, maxRes int64) []segment {
	rawLo := s.rawStart()
	mLo, mHi, mOK := tierBounds(s.minute)
	hLo, hHi, hOK := tierBounds(s.hour)
	rawFrom := rawLo
	if mOK && maxRes >= tierRes(s.minute, time.Minute) && mHi > rawFrom {
		rawFrom = mHi
	}
	if !mOK {
		mLo = rawFrom
	}
	minuteFrom := min(mLo, rawFrom)
	if hOK && maxRes >= tierRes(s.hour, time.Hour) && hHi > minuteFrom {
		minuteFrom = min(hHi, rawFrom)
	}
	all := []segment{{TierHour, math.MinInt64, minuteFrom}, {TierMinute, minuteFrom, rawFrom}, {TierRaw, rawFrom, math.MaxInt64}}
	var out []segment
	for _, sg := range all {
		lo, hi := max(sg.lo, mint), min(sg.hi, satAdd(maxt, 1))
		if lo >= hi {
			continue
		}
		// Rollup bounds are partition starts and ends: a segment that ends
		// before the first partition starts or starts at or after the last
		// one ends holds no window.
		switch sg.tier {
		case TierMinute:
			if !mOK || hi <= mLo || lo >= mHi {
				continue
			}
		case TierHour:
			if !hOK || hi <= hLo || lo >= hHi {
				continue
			}
		}
		out = append(out, segment{sg.tier, lo, hi})
	}
	return out
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

type stitchedQuerier struct {
	s          *Stitched
	mint, maxt int64
	// maxRes >= 0 fixes the coarsest window a Select may be served from
	// (ResolutionQuerier); -1 derives it from the select hints.
	maxRes int64
	// lookback > 0 is a remote engine's lookback delta (ResolutionQuerier).
	lookback time.Duration
	rawQs    []storage.Querier
}

// Select implements storage.Querier. Series are returned sorted when the
// range spans tiers or sortSeries is set.
//
// A range the raw tier alone serves is answered by the raw tier's own
// querier, series and iterators as they are: it costs what the same query
// costs Prometheus, and carries no tier annotation.
func (q *stitchedQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, matchers ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = max(mint, hints.Start), min(maxt, hints.End)
	}
	if mint > maxt {
		return storage.EmptySeriesSet()
	}
	maxRes := q.maxRes
	if maxRes < 0 {
		maxRes = maxResolution(hints)
	}
	segs := q.s.plan(mint, maxt, maxRes)
	minuteOnly, rawToo := q.s.selectsMinuteOnly(matchers)
	if len(segs) == 1 && segs[0].tier == TierRaw && !minuteOnly {
		return q.selectRawOnly(ctx, sortSeries, segs[0], hints, matchers)
	}
	fn := ""
	if hints != nil {
		fn = hints.Func
	}
	mode := modeForFunc(fn)
	var annots annotations.Annotations
	var lists [][]*stitchedSeries
	var served []string
	for _, sg := range segs {
		var list []*stitchedSeries
		var err error
		switch sg.tier {
		case TierRaw:
			if rawToo {
				list, err = q.selectRaw(ctx, sg, hints, mint, matchers, &annots)
			}
			if err == nil && minuteOnly {
				// The minute-only series are the minute tier's here: raw's
				// copies are left out, the minute tier's series join.
				list = slices.DeleteFunc(list, func(s *stitchedSeries) bool { return q.s.isMinuteOnly(s.lbls.Get(model.MetricNameLabel)) })
				var mo []*stitchedSeries
				if mo, err = q.selectMinuteOnly(ctx, sg, mode, hints, matchers); err == nil && len(mo) > 0 {
					served = append(served, TierMinute)
					lists = append(lists, mo)
				}
			}
		case TierMinute:
			list, err = q.selectRollup(ctx, q.s.minute, sg, mode, hints, matchers)
		case TierHour:
			list, err = q.selectRollup(ctx, q.s.hour, sg, mode, hints, matchers)
		}
		if err != nil {
			return storage.ErrSeriesSet(err)
		}
		switch {
		case sg.tier == TierMinute, sg.tier == TierRaw && minuteOnly:
			warnCorrupt(&annots, q.s.minute, sg)
		case sg.tier == TierHour:
			warnCorrupt(&annots, q.s.hour, sg)
		}
		if len(list) > 0 {
			served = append(served, sg.tier)
			lists = append(lists, list)
		}
	}
	// Only an answer a rollup tier took part in says which tiers served it:
	// raw data alone is what Prometheus would answer, without a note.
	if len(served) > 1 || len(served) == 1 && served[0] != TierRaw {
		annots.Add(fmt.Errorf("%w: strata: served by tiers %s", annotations.PromQLInfo, strings.Join(served, ",")))
		if mode == modeAvg {
			annots.Add(fmt.Errorf("%w: strata: %s over rollup tiers is computed from per-window averages and is approximate", annotations.PromQLInfo, fn))
		}
	}
	return &stitchedSet{series: mergeSorted(lists), annots: annots}
}

// warnCorrupt adds a warning for each partition of r in the segment that was
// set aside as corrupt: the answer lacks its windows.
func warnCorrupt(annots *annotations.Annotations, r *Rollup, sg segment) {
	if r == nil {
		return
	}
	for _, s := range r.CorruptPartitions(sg.lo, sg.hi-1) {
		annots.Add(fmt.Errorf("%w: strata: the %s tier's partition of %s was corrupt and is set aside in %s: its windows are missing from this answer",
			annotations.PromQLWarning, r.cfg.Name, time.UnixMilli(s).UTC().Format(time.RFC3339), filepath.Join(r.cfg.Dir, CorruptDir)))
	}
}

// selectRawOnly answers a select whose range only the raw tier serves.
func (q *stitchedQuerier) selectRawOnly(ctx context.Context, sortSeries bool, sg segment, hints *storage.SelectHints, ms []*labels.Matcher) storage.SeriesSet {
	rq, err := q.s.raw.Querier(sg.lo, sg.hi-1)
	if err != nil {
		return storage.ErrSeriesSet(fmt.Errorf("query raw tier: %w", err))
	}
	q.rawQs = append(q.rawQs, rq)
	var h storage.SelectHints
	if hints != nil {
		h = *hints
	}
	h.Start, h.End = sg.lo, sg.hi-1
	return rq.Select(ctx, sortSeries, &h, ms...)
}

// selectRaw returns the raw tier's series in the segment.
func (q *stitchedQuerier) selectRaw(ctx context.Context, sg segment, hints *storage.SelectHints, qmint int64, ms []*labels.Matcher, annots *annotations.Annotations) ([]*stitchedSeries, error) {
	rq, err := q.s.raw.Querier(sg.lo, sg.hi-1)
	if err != nil {
		return nil, fmt.Errorf("query raw tier: %w", err)
	}
	q.rawQs = append(q.rawQs, rq)
	var h storage.SelectHints
	if hints != nil {
		h = *hints
	}
	h.Start, h.End = sg.lo, sg.hi-1
	set := rq.Select(ctx, true, &h, ms...)
	var (
		out   []*stitchedSeries
		probe chunkenc.Iterator // one iterator for every series' probe
		noted bool
	)
	for set.Next() {
		sr := set.At()
		if !noted && qmint < sg.lo && startsWithHistogram(sr, &probe) {
			annots.Add(fmt.Errorf("%w: strata: native histograms are kept in the raw tier only; %s has no data before %s", annotations.PromQLInfo, sr.Labels().Get(model.MetricNameLabel), time.UnixMilli(sg.lo).UTC().Format(time.RFC3339)))
			noted = true
		}
		out = append(out, &stitchedSeries{lbls: sr.Labels(), parts: []seriesPart{{raw: sr, lo: sg.lo, hi: sg.hi}}})
	}
	annots.Merge(set.Warnings())
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("query raw tier: %w", err)
	}
	return out, nil
}

// startsWithHistogram reports whether sr's first sample is a native
// histogram, reading it with *it (reused, and replaced by the iterator
// used).
func startsWithHistogram(sr storage.Series, it *chunkenc.Iterator) bool {
	*it = sr.Iterator(*it)
	vt := (*it).Next()
	return vt == valHistogram || vt == valFloatHistogram
}

// isMinuteOnly reports whether metric name is one WithMinuteOnlyNames gave.
func (s *Stitched) isMinuteOnly(name string) bool {
	_, found := slices.BinarySearch(s.minuteOnly, name)
	return found
}

// selectsMinuteOnly reports whether the matchers may select a minute-only
// series (every metric-name matcher matches one of the names), and whether
// they may select another series as well (no name equality names one).
func (s *Stitched) selectsMinuteOnly(ms []*labels.Matcher) (minuteOnly, other bool) {
	if len(s.minuteOnly) == 0 {
		return false, true
	}
	other = true
	for _, m := range ms {
		if m.Name != model.MetricNameLabel {
			continue
		}
		if !slices.ContainsFunc(s.minuteOnly, m.Matches) {
			return false, true
		}
		if m.Type == labels.MatchEqual {
			other = false
		}
	}
	return true, other
}

// minuteOnlyMatchers is ms restricted to the minute-only names.
func (s *Stitched) minuteOnlyMatchers(ms []*labels.Matcher) []*labels.Matcher {
	return append(slices.Clip(ms), s.minuteOnlyName)
}

// selectMinuteOnly returns the minute-only series in a segment raw serves,
// from the minute tier's partitions and the open windows.
func (q *stitchedQuerier) selectMinuteOnly(ctx context.Context, sg segment, mode aggMode, hints *storage.SelectHints, ms []*labels.Matcher) ([]*stitchedSeries, error) {
	if q.s.minute == nil {
		return nil, nil
	}
	ms = q.s.minuteOnlyMatchers(ms)
	res := q.s.minute.cfg.Resolution.Milliseconds()
	return q.selectWindows(sg, mode, hints, res, func(from, to int64, opts selectOptions) ([]selectedSeries, error) {
		open := openCollector{res: res, lo: from}
		if q.s.open != nil {
			q.s.open.VisitOpenWindows(from, to, &open, ms...) // before the disk: see MinuteView
		}
		disk, err := q.s.minute.selectColumns(ctx, from, to, ms, opts)
		if err != nil {
			return nil, err
		}
		return mergeOpen(disk, &open), nil
	})
}

// selectRollup returns a rollup tier's series in the segment, with their windows.
func (q *stitchedQuerier) selectRollup(ctx context.Context, r *Rollup, sg segment, mode aggMode, hints *storage.SelectHints, ms []*labels.Matcher) ([]*stitchedSeries, error) {
	if r == nil {
		return nil, nil
	}
	return q.selectWindows(sg, mode, hints, r.cfg.Resolution.Milliseconds(), func(from, to int64, opts selectOptions) ([]selectedSeries, error) {
		return r.selectColumns(ctx, from, to, ms, opts)
	})
}

// selectWindows returns the series read selects, windows of res, as the
// segment's parts.
func (q *stitchedQuerier) selectWindows(sg segment, mode aggMode, hints *storage.SelectHints, res int64, read func(from, to int64, opts selectOptions) ([]selectedSeries, error)) ([]*stitchedSeries, error) {
	lookback := q.s.lookback.Milliseconds()
	if q.lookback > 0 {
		lookback = q.lookback.Milliseconds()
	}
	var rng, thinStep, thinOrigin int64
	if hints != nil {
		rng = hints.Range
		if mode == modeLast && rng == 0 && hints.Step > res {
			// A plain selector evaluated every Step (the engine selects from
			// start-lookback+1) sees only the latest window before each step.
			thinStep, thinOrigin = hints.Step, hints.Start-1+lookback
		}
	}
	fill := int64(0)
	switch {
	case rng != 0 || mode != modeLast:
	case q.lookback > 0 && 2*res > lookback:
		// A remote engine's lookback, known exactly: a sample at t is seen
		// by evaluation times in [t, t+lookback) (the lookback is
		// left-open), so a repeat every lookback leaves no gap, and two
		// windows' last samples (at most 2*res apart) need one only when
		// they are further apart than that.
		fill = max(lookback, 1)
	case q.lookback == 0 && res > lookback:
		// Plain selectors: repeat each window's last value often enough that
		// every evaluation step finds one within the lookback delta.
		fill = max(lookback/2, 1)
	}
	// Tier boundaries are aligned to the resolution, but a query's start need
	// not be: the window holding lo is read too and its samples before lo
	// are dropped by the iterator. Where Last is repeated, the window before
	// it is read as well: its repeats fill the evaluation times between lo
	// and the next window's last sample (a range starting at 10:37 over the
	// hour tier sees the 09:00 window's value at 10:37, as at later steps).
	from := timegrid.Floor(sg.lo, res)
	if fill > 0 && from >= math.MinInt64+res {
		from -= res
	}
	sel, err := read(from, sg.hi-1, selectOptions{
		need: columnsFor(mode), thinStep: thinStep, thinOrigin: thinOrigin, maxWindows: q.s.maxWindows,
	})
	if err != nil {
		return nil, err
	}
	var fillStep, fillOrigin int64
	if fill > 0 && hints != nil && hints.Step > 0 {
		// The evaluation times are known: repeat Last exactly at them.
		fillStep, fillOrigin = hints.Step, hints.Start-1+lookback
	}
	interp := int64(1)
	if mode == modeCounter && rng > 0 {
		// About a dozen samples per range: enough for PromQL's extrapolation
		// to cover the range's edges, few enough to keep long ranges cheap.
		interp = min(max(res*12/rng, 1), 12)
	}
	// The shortest range min/max_over_time's samples serve, over which a
	// boundary First the previous window's extreme covers is left out: the
	// query's range; none for a subquery's steps (a Step without a Range),
	// which see the samples as instant values; a window for a StoreAPI
	// request (neither), whose MAX (MIN) names max_over_time and max(...)
	// alike and no range: that is what Thanos' own downsampled blocks
	// serve, one sample a window (docs/scale-out.md).
	var cover int64
	if mode == modeMin || mode == modeMax {
		switch {
		case rng > 0:
			cover = rng
		case hints == nil || hints.Step == 0:
			cover = res
		}
	}
	out := make([]*stitchedSeries, 0, len(sel))
	for _, s := range sel {
		out = append(out, &stitchedSeries{lbls: s.lbls, parts: []seriesPart{{
			windows: s.ws, mode: mode, res: res, fill: fill, fillStep: fillStep, fillOrigin: fillOrigin, lookback: lookback, interp: interp, lo: sg.lo, hi: sg.hi,
			cover: cover,
		}}})
	}
	return out, nil
}

// mergeSorted merges per-tier series lists (each sorted by labels, oldest
// tier first) into one list, concatenating the parts of a series found in
// several tiers in tier order.
func mergeSorted(lists [][]*stitchedSeries) []*stitchedSeries {
	switch len(lists) {
	case 0:
		return nil
	case 1:
		return lists[0]
	}
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]*stitchedSeries, 0, n)
	pos := make([]int, len(lists))
	for {
		var best *stitchedSeries
		for i, l := range lists {
			if pos[i] < len(l) && (best == nil || labels.Compare(l[pos[i]].lbls, best.lbls) < 0) {
				best = l[pos[i]]
			}
		}
		if best == nil {
			return out
		}
		merged := &stitchedSeries{lbls: best.lbls}
		for i, l := range lists {
			if pos[i] < len(l) && labels.Equal(l[pos[i]].lbls, best.lbls) {
				merged.parts = append(merged.parts, l[pos[i]].parts...)
				pos[i]++
			}
		}
		out = append(out, merged)
	}
}

// LabelValues implements storage.Querier over all tiers.
func (q *stitchedQuerier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return q.labelQuery(ctx, func(rq storage.Querier) ([]string, annotations.Annotations, error) {
		return rq.LabelValues(ctx, name, hints, matchers...)
	}, func(l labels.Labels, add func(string)) {
		if v := l.Get(name); v != "" {
			add(v)
		}
	}, hints, matchers)
}

// LabelNames implements storage.Querier over all tiers.
func (q *stitchedQuerier) LabelNames(ctx context.Context, hints *storage.LabelHints, matchers ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return q.labelQuery(ctx, func(rq storage.Querier) ([]string, annotations.Annotations, error) {
		return rq.LabelNames(ctx, hints, matchers...)
	}, func(l labels.Labels, add func(string)) {
		l.Range(func(lb labels.Label) { add(lb.Name) })
	}, hints, matchers)
}

func (q *stitchedQuerier) labelQuery(ctx context.Context, fromRaw func(storage.Querier) ([]string, annotations.Annotations, error), fromLabels func(labels.Labels, func(string)), hints *storage.LabelHints, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]struct{}{}
	add := func(v string) { seen[v] = struct{}{} }
	var annots annotations.Annotations
	minuteOnly, rawToo := q.s.selectsMinuteOnly(ms)
	for _, sg := range q.s.plan(q.mint, q.maxt, 0) {
		switch sg.tier {
		case TierRaw:
			rq, err := q.s.raw.Querier(sg.lo, sg.hi-1)
			if err != nil {
				return nil, nil, fmt.Errorf("query raw tier: %w", err)
			}
			q.rawQs = append(q.rawQs, rq)
			// Matchers that name a minute-only series leave raw out: its
			// copies of them (an older build's) are not theirs, as in
			// Select. Other matchers ask raw as they are, so that its
			// label index answers them without a matcher added; copies of
			// a minute-only name are then among its answers.
			if rawToo {
				vals, a, err := fromRaw(rq)
				if err != nil {
					return nil, nil, err
				}
				annots.Merge(a)
				for _, v := range vals {
					add(v)
				}
			}
			if minuteOnly {
				if err := q.minuteOnlyLabels(ctx, sg, ms, func(l labels.Labels) { fromLabels(l, add) }); err != nil {
					return nil, nil, err
				}
			}
		default:
			r := q.s.minute
			if sg.tier == TierHour {
				r = q.s.hour
			}
			if r == nil {
				continue
			}
			lbls, err := r.SelectLabels(ctx, sg.lo, sg.hi-1, ms...)
			if err != nil {
				return nil, nil, err
			}
			for _, l := range lbls {
				fromLabels(l, add)
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	if hints != nil && hints.Limit > 0 && len(out) > hints.Limit {
		out = out[:hints.Limit]
	}
	return out, annots, nil
}

// minuteOnlyLabels calls fn with the label sets of the minute-only series
// ms selects in a segment raw serves (the caller knows ms may select one).
func (q *stitchedQuerier) minuteOnlyLabels(ctx context.Context, sg segment, ms []*labels.Matcher, fn func(labels.Labels)) error {
	if q.s.minute == nil {
		return nil
	}
	ms = q.s.minuteOnlyMatchers(ms)
	if q.s.open != nil {
		q.s.open.VisitOpenWindows(sg.lo, sg.hi-1, labelSink(fn), ms...)
	}
	lbls, err := q.s.minute.SelectLabels(ctx, sg.lo, sg.hi-1, ms...)
	if err != nil {
		return err
	}
	for _, l := range lbls {
		fn(l)
	}
	return nil
}

// labelSink is an OpenWindowSink that takes the label sets only.
type labelSink func(labels.Labels)

func (f labelSink) Want(lset labels.Labels) (int64, bool) { f(lset); return 0, false }
func (f labelSink) Series(labels.Labels, []Window)        {}

// Close implements storage.Querier.
func (q *stitchedQuerier) Close() error {
	var errs []error
	for _, rq := range q.rawQs {
		errs = append(errs, rq.Close())
	}
	q.rawQs = nil
	return errors.Join(errs...)
}

// stitchedSet is a storage.SeriesSet over already-merged series.
type stitchedSet struct {
	series []*stitchedSeries
	i      int
	annots annotations.Annotations
}

func (s *stitchedSet) Next() bool {
	if s.i >= len(s.series) {
		return false
	}
	s.i++
	return true
}
func (s *stitchedSet) At() storage.Series                { return s.series[s.i-1] }
func (s *stitchedSet) Err() error                        { return nil }
func (s *stitchedSet) Warnings() annotations.Annotations { return s.annots }
func (s *stitchedSeries) Labels() labels.Labels          { return s.lbls }

type stitchedChunkQuerier struct{ q *stitchedQuerier }

func (c *stitchedChunkQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.ChunkSeriesSet {
	return storage.NewSeriesSetToChunkSet(c.q.Select(ctx, sortSeries, hints, ms...))
}

func (c *stitchedChunkQuerier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return c.q.LabelValues(ctx, name, hints, ms...)
}

func (c *stitchedChunkQuerier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return c.q.LabelNames(ctx, hints, ms...)
}

func (c *stitchedChunkQuerier) Close() error { return c.q.Close() }
