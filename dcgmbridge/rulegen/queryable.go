package rulegen

import (
	"context"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// RenamingQueryable wraps q for the internal form of the canonical rules
// (PushDownRenames): a Select carrying RenameLabel matchers selects with the
// other matchers and returns each series with the listed label copies made.
// Selects without it pass through unchanged, so the operator's rules can run
// on the same Queryable.
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
	var copies []labelCopy
	rest := ms
	if slices.ContainsFunc(ms, isRename) {
		rest = make([]*labels.Matcher, 0, len(ms))
		for _, m := range ms {
			if !isRename(m) {
				rest = append(rest, m)
				continue
			}
			c, ok := parseCopies(m.Value)
			if !ok {
				return storage.EmptySeriesSet()
			}
			copies = append(copies, c...)
		}
	}
	if len(copies) == 0 {
		return r.Querier.Select(ctx, sortSeries, hints, rest...)
	}
	// Copies can change the order of series; sort after them.
	set := &renamingSet{SeriesSet: r.Querier.Select(ctx, false, hints, rest...), copies: copies, b: labels.NewBuilder(labels.EmptyLabels())}
	if !sortSeries {
		return set
	}
	var all []storage.Series
	for set.Next() {
		all = append(all, set.At())
	}
	if err := set.Err(); err != nil {
		return storage.ErrSeriesSet(err)
	}
	slices.SortFunc(all, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return &sortedSet{series: all, warnings: set.Warnings()}
}

func isRename(m *labels.Matcher) bool {
	return m.Name == RenameLabel && m.Type == labels.MatchEqual
}

// renamingSet makes the label copies on every series of a SeriesSet.
type renamingSet struct {
	storage.SeriesSet
	copies []labelCopy
	b      *labels.Builder
}

func (s *renamingSet) At() storage.Series {
	sr := s.SeriesSet.At()
	lset := sr.Labels()
	changed := false
	s.b.Reset(lset)
	for _, c := range s.copies {
		// label_replace(..., c.To, "$1", c.From, "(.+)"): only a non-empty
		// value matches the regex.
		if v := s.b.Get(c.From); v != "" && s.b.Get(c.To) != v {
			s.b.Set(c.To, v)
			changed = true
		}
	}
	if !changed {
		return sr
	}
	return renamedSeries{Series: sr, lset: s.b.Labels()}
}

type renamedSeries struct {
	storage.Series
	lset labels.Labels
}

func (s renamedSeries) Labels() labels.Labels { return s.lset }

// sortedSet is a materialised, sorted SeriesSet.
type sortedSet struct {
	series   []storage.Series
	i        int
	warnings annotations.Annotations
}

func (s *sortedSet) Next() bool {
	if s.i >= len(s.series) {
		return false
	}
	s.i++
	return true
}

func (s *sortedSet) At() storage.Series                { return s.series[s.i-1] }
func (s *sortedSet) Err() error                        { return nil }
func (s *sortedSet) Warnings() annotations.Annotations { return s.warnings }
