package rulegen

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/internal/seriesset"
)

// RenamingQueryable wraps q for the internal form of the canonical rules
// (PushDownRenames): a Select carrying RenameLabel or BelowLabel matchers
// selects with the other matchers and returns each series with the listed
// label copies made and its samples at or above the bound turned into stale
// markers. Selects without them pass through unchanged, so the operator's
// rules can run on the same Queryable.
func RenamingQueryable(q storage.Queryable) storage.Queryable {
	return renamingQueryable{q}
}

type renamingQueryable struct{ q storage.Queryable }

func (r renamingQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := r.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return renamingQuerier{q}, nil
}

type renamingQuerier struct{ storage.Querier }

func (r renamingQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	if len(ms) == 1 && ms[0].Name == SharedLabel && ms[0].Type == labels.MatchEqual {
		return selectShared(ctx, sortSeries, ms[0].Value)
	}
	if !slices.ContainsFunc(ms, isInternal) {
		return r.Querier.Select(ctx, sortSeries, hints, ms...)
	}
	set := &renamingSet{b: labels.NewBuilder(labels.EmptyLabels()), below: math.NaN()}
	rest := make([]*labels.Matcher, 0, len(ms))
	for _, m := range ms {
		switch {
		case !isInternal(m):
			rest = append(rest, m)
		case m.Name == RenameLabel:
			c, ok := parseCopies(m.Value)
			if !ok {
				return storage.EmptySeriesSet()
			}
			set.copies = append(set.copies, c...)
		default:
			v, err := strconv.ParseFloat(m.Value, 64)
			if err != nil || math.IsNaN(v) {
				return storage.EmptySeriesSet()
			}
			if math.IsNaN(set.below) || v < set.below {
				set.below = v
			}
		}
	}
	// Copies can change the order of series; sort after them.
	set.SeriesSet = r.Querier.Select(ctx, sortSeries && len(set.copies) == 0, hints, rest...)
	if !sortSeries || len(set.copies) == 0 {
		return set
	}
	return seriesset.Sorted(set)
}

func isInternal(m *labels.Matcher) bool {
	return (m.Name == RenameLabel || m.Name == BelowLabel) && m.Type == labels.MatchEqual
}

// renamingSet makes the label copies on every series of a SeriesSet and
// bounds its samples.
type renamingSet struct {
	storage.SeriesSet
	copies []labelCopy
	below  float64 // NaN: no bound
	b      *labels.Builder
}

func (s *renamingSet) At() storage.Series {
	sr := s.SeriesSet.At()
	lset := sr.Labels()
	changed := false
	if len(s.copies) > 0 {
		s.b.Reset(lset)
		for _, c := range s.copies {
			// label_replace(..., c.To, "$1", c.From, "(.+)"): only a
			// non-empty value matches the regex.
			if v := s.b.Get(c.From); v != "" && s.b.Get(c.To) != v {
				s.b.Set(c.To, v)
				changed = true
			}
		}
		if changed {
			lset = s.b.Labels()
		}
	}
	if !changed && math.IsNaN(s.below) {
		return sr
	}
	return &internalSeries{Series: sr, lset: lset, below: s.below}
}

// internalSeries is a series with copied labels and, unless below is NaN,
// every sample not below it read as a stale marker.
type internalSeries struct {
	storage.Series
	lset  labels.Labels
	below float64
}

func (s *internalSeries) Labels() labels.Labels { return s.lset }

func (s *internalSeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	if math.IsNaN(s.below) {
		return s.Series.Iterator(it)
	}
	if bi, ok := it.(*belowIterator); ok {
		bi.Iterator = s.Series.Iterator(bi.Iterator)
		bi.below = s.below
		return bi
	}
	return &belowIterator{Iterator: s.Series.Iterator(it), below: s.below}
}

// belowIterator reads every sample that is not below the bound (a histogram
// too: a comparison with a number drops it) as a float stale marker: an
// instant selector then has no value at a step whose latest sample in the
// lookback fails `< below`, which is what the comparison does.
type belowIterator struct {
	chunkenc.Iterator
	below float64
	stale bool // the current sample reads as a stale marker
}

func (b *belowIterator) Next() chunkenc.ValueType { return b.check(b.Iterator.Next()) }

// Seek takes a millisecond timestamp; the named type keeps vet's io.Seeker
// signature check off chunkenc.Iterator's method.
func (b *belowIterator) Seek(t msTime) chunkenc.ValueType { return b.check(b.Iterator.Seek(t)) }

type msTime = int64

func (b *belowIterator) check(vt chunkenc.ValueType) chunkenc.ValueType {
	switch vt {
	case chunkenc.ValFloat:
		_, v := b.Iterator.At()
		b.stale = !(v < b.below)
	case chunkenc.ValHistogram, chunkenc.ValFloatHistogram:
		b.stale = true
		return chunkenc.ValFloat
	default:
		b.stale = false
	}
	return vt
}

func (b *belowIterator) At() (int64, float64) {
	if b.stale {
		return b.AtT(), math.Float64frombits(value.StaleNaN)
	}
	return b.Iterator.At()
}

func (b *belowIterator) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	panic("rulegen: belowIterator yields floats only")
}

func (b *belowIterator) AtFloatHistogram(*histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	panic("rulegen: belowIterator yields floats only")
}

// selectShared returns a shared subexpression's result from the group
// evaluation's memo (InternalForms.QueryFunc), one series per sample.
func selectShared(ctx context.Context, sortSeries bool, idStr string) storage.SeriesSet {
	memo, _ := ctx.Value(memoKey{}).(*sharedMemo)
	id, err := strconv.Atoi(idStr)
	if memo == nil || err != nil {
		return storage.ErrSeriesSet(fmt.Errorf("rulegen: %s=%q read outside a group evaluation", SharedLabel, idStr))
	}
	v, ok := memo.get(id)
	if !ok {
		return storage.ErrSeriesSet(fmt.Errorf("rulegen: shared subexpression %d not evaluated", id))
	}
	series := make([]storage.Series, len(v))
	ss := make([]sharedSeries, len(v))
	for i := range v {
		ss[i].s = &v[i]
		series[i] = &ss[i]
	}
	if sortSeries {
		slices.SortFunc(series, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	}
	return seriesset.List(series, nil)
}

// sharedSeries is one sample of a shared subexpression's result, read as a
// series. The memo is read by several queries: a histogram is handed out as
// a copy.
type sharedSeries struct{ s *promql.Sample }

func (s *sharedSeries) Labels() labels.Labels { return s.s.Metric }

func (s *sharedSeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	if si, ok := it.(*sharedIterator); ok {
		*si = sharedIterator{s: s.s}
		return si
	}
	return &sharedIterator{s: s.s}
}

// sharedIterator iterates over the one sample of a sharedSeries.
type sharedIterator struct {
	s    *promql.Sample
	done bool // Next has moved past the sample
	at   bool // positioned on the sample
}

func (it *sharedIterator) valueType() chunkenc.ValueType {
	if it.s.H != nil {
		return chunkenc.ValFloatHistogram
	}
	return chunkenc.ValFloat
}

func (it *sharedIterator) Next() chunkenc.ValueType {
	if it.done || it.at {
		it.done, it.at = true, false
		return chunkenc.ValNone
	}
	it.at = true
	return it.valueType()
}

// Seek takes a millisecond timestamp (msTime: see belowIterator.Seek).
func (it *sharedIterator) Seek(t msTime) chunkenc.ValueType {
	if it.done || it.s.T < t {
		it.done, it.at = true, false
		return chunkenc.ValNone
	}
	it.at = true
	return it.valueType()
}

func (it *sharedIterator) At() (int64, float64) { return it.s.T, it.s.F }

func (it *sharedIterator) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	panic("rulegen: a shared subexpression yields float histograms")
}

func (it *sharedIterator) AtFloatHistogram(fh *histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	if fh == nil {
		return it.s.T, it.s.H.Copy()
	}
	it.s.H.CopyTo(fh)
	return it.s.T, fh
}

func (it *sharedIterator) AtT() int64  { return it.s.T }
func (it *sharedIterator) AtST() int64 { return 0 }
func (it *sharedIterator) Err() error  { return nil }
