package dcgmbridge

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// DCGM's "blank" values (dcgm_structs.h): a field that is not supported, not
// found or not permitted reads as a blank sentinel. Current dcgm-exporter drops
// them; older ones printed them as numbers (the README sample shows
// DCGM_FI_DEV_MEMORY_TEMP 9223372036854775794, DCGM_INT64_NOT_SUPPORTED).
const (
	// DCGMInt64Blank is DCGM_INT64_BLANK (0x7ffffffffffffff0); every int64 at or
	// above it is a sentinel. As a float64 it rounds to 2^63.
	DCGMInt64Blank = float64(0x7ffffffffffffff0)
	// DCGMFP64Blank is DCGM_FP64_BLANK; every double at or above it is a sentinel.
	DCGMFP64Blank = 140737488355328.0
)

// IsDCGMSentinel reports whether v, a value of DCGM field f, is a blank
// sentinel rather than a measurement. int64 fields (counters) use the int64
// rule only: a real counter may legitimately pass 1.4e14 (NVLink bytes), never
// 9.2e18. For gauges and unknown fields the double rule applies too; unknown
// fields only match the four double sentinels themselves (BLANK .. BLANK+3).
func IsDCGMSentinel(f Field, known bool, v float64) bool {
	switch {
	case v >= DCGMInt64Blank:
		return true
	case known && f.Type == "gauge":
		return v >= DCGMFP64Blank
	default:
		return v >= DCGMFP64Blank && v < DCGMFP64Blank+4
	}
}

// isDCGMName reports whether a metric name comes from dcgm-exporter.
func isDCGMName(name string) bool {
	return strings.HasPrefix(name, "DCGM_") || strings.HasPrefix(name, "dcgm_")
}

// SentinelFilter drops DCGM sentinel values and counts them per field in
// strata_dcgmbridge_sentinel_dropped_total{field}. It is safe for concurrent
// use; the remote-write receiver may share it with the scraper.
type SentinelFilter struct {
	cat     *Catalogue
	dropped *prometheus.CounterVec
}

// NewSentinelFilter registers the drop counter with reg.
func NewSentinelFilter(cat *Catalogue, reg prometheus.Registerer) *SentinelFilter {
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
	if v < DCGMFP64Blank || !isDCGMName(name) {
		return "", false
	}
	f, known := s.cat.FieldByName(name)
	if !IsDCGMSentinel(f, known, v) {
		return "", false
	}
	if known {
		return f.Legacy, true
	}
	return "other", true
}

func (s *SentinelFilter) count(field string, n int) {
	s.dropped.WithLabelValues(field).Add(float64(n))
}
