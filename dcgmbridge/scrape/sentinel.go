package scrape

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/strata-dev/strata/dcgmbridge"
)

// SentinelFilter drops DCGM sentinel values (dcgmbridge.IsDCGMSentinel) and
// counts them per field in strata_dcgmbridge_sentinel_dropped_total{field}. It
// is safe for concurrent use.
type SentinelFilter struct {
	cat     *dcgmbridge.Catalogue
	dropped *prometheus.CounterVec
}

// NewSentinelFilter registers the drop counter with reg.
func NewSentinelFilter(cat *dcgmbridge.Catalogue, reg prometheus.Registerer) *SentinelFilter {
	return &SentinelFilter{
		cat: cat,
		dropped: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "strata_dcgmbridge_sentinel_dropped_total",
			Help: "DCGM blank / not-supported sentinel values dropped, by field (legacy name, or \"other\" for fields outside the catalogue).",
		}, []string{"field"}),
	}
}

// Keep reports whether the sample (metric name, value) should be stored; a
// DCGM sentinel is counted and not kept.
func (s *SentinelFilter) Keep(name string, v float64) bool {
	field, drop := s.classify(name, v)
	if drop {
		s.count(field, 1)
	}
	return !drop
}

// classify reports whether (name, v) is a sentinel and the field label to
// count it under, without counting: the scraper counts only once a body is
// accepted.
func (s *SentinelFilter) classify(name string, v float64) (field string, drop bool) {
	return s.cat.Sentinel(name, v)
}

func (s *SentinelFilter) count(field string, n int) {
	s.dropped.WithLabelValues(field).Add(float64(n))
}
