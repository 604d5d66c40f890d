// Package timegrid rounds millisecond timestamps to a grid of fixed steps:
// the window starts of the rollup tiers (a minute, an hour), their
// partitions (an hour, a day) and a range query's evaluation times. The
// downsample pipeline, the backfill and the tiers' reader all align through
// it, so a window the pipeline writes starts where the reader looks for it,
// before the epoch too (PromQL accepts negative timestamps).
package timegrid

import "math"

// Floor returns the largest multiple of step at or below t (ms; step > 0),
// for negative t too: Floor(-1, 60_000) is -60_000. Where that multiple is
// below math.MinInt64 (t within a step of it) it returns math.MinInt64,
// which is still at or below t: callers use Floor as an inclusive lower
// bound.
func Floor(t, step int64) int64 {
	m := t % step // Go's remainder has t's sign: t-m rounds toward zero
	switch {
	case m >= 0:
		return t - m
	case t-m < math.MinInt64+step:
		return math.MinInt64
	}
	return t - m - step
}

// Ceil returns the smallest multiple of step at or above t (ms; step > 0).
// Where that multiple is above math.MaxInt64 it returns math.MaxInt64.
func Ceil(t, step int64) int64 {
	m := t % step
	switch {
	case m <= 0:
		return t - m
	case t-m > math.MaxInt64-step:
		return math.MaxInt64
	}
	return t - m + step
}
