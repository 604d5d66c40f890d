// Package seriesset holds the storage helpers Strata's queryable wrappers
// and fused passes share: a set over series already read, the sort a
// wrapper owes its caller when it changes the series' labels, and the
// sample the engine's instant selector takes of a series (Instant).
package seriesset

import (
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// List returns a SeriesSet over series, in their order, with warnings.
func List(series []storage.Series, warnings annotations.Annotations) storage.SeriesSet {
	return &list{series: series, i: -1, warnings: warnings}
}

// Sorted reads set whole and returns its series sorted by labels, with its
// error and warnings: for a wrapper whose label changes can break the order a
// sorted Select promises.
func Sorted(set storage.SeriesSet) storage.SeriesSet {
	var all []storage.Series
	for set.Next() {
		all = append(all, set.At())
	}
	if err := set.Err(); err != nil {
		return storage.ErrSeriesSet(err)
	}
	slices.SortFunc(all, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	return List(all, set.Warnings())
}

type list struct {
	series   []storage.Series
	i        int
	warnings annotations.Annotations
}

func (s *list) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *list) At() storage.Series                { return s.series[s.i] }
func (s *list) Err() error                        { return nil }
func (s *list) Warnings() annotations.Annotations { return s.warnings }

// MatchAll reports whether lset satisfies every matcher of ms, as a
// select's series must (a missing label matches as the empty value).
func MatchAll(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}
