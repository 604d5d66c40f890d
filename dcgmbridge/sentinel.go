package dcgmbridge

import "strings"

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

// Sentinel reports whether the sample (metric name, value) is a DCGM blank
// sentinel and, if so, the field to count it under: the field's legacy name,
// or "other" for a DCGM name outside the catalogue.
func (c *Catalogue) Sentinel(name string, v float64) (field string, ok bool) {
	if v < DCGMFP64Blank || !isDCGMName(name) {
		return "", false
	}
	f, known := c.FieldByName(name)
	if !IsDCGMSentinel(f, known, v) {
		return "", false
	}
	if known {
		return f.Legacy, true
	}
	return "other", true
}
