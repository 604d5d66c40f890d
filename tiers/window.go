package tiers

import "github.com/prometheus/prometheus/model/labels"

// Window is one series' aggregates over the half-open window [Start, Start+res)
// of a rollup tier (res is one minute or one hour). It is the unit the
// downsample package produces and the minute and hour tiers store; its on-disk
// form is described in docs/format/.
//
// Only float samples count (NaN included, as PromQL's *_over_time count it);
// stale markers end a run of samples but are not aggregated (see Stale). A
// window with no float sample is not stored.
//
// Counter semantics follow Prometheus: a sample lower than the one before it is
// a counter reset, after which the counter restarts from zero. Increase and
// Resets cover the steps between consecutive samples inside the window; the step
// from the previous window's Last to this window's First is not in either, so
// that a reader holding two adjacent windows can see a reset exactly at the
// boundary (First < previous Last) and never counts it twice. A reader uses
// Increase and Resets only for counter functions. For a series the metric
// catalogue types gauge (downsample.Config.KindOf) there are no resets: Resets is 0 and
// Increase is Last - First, so drops inside a gauge's window are not recorded
// (drops between windows still are, as First below the previous Last).
type Window struct {
	Start  int64 // window start, ms since the epoch, aligned to the resolution
	FirstT int64 // timestamp of the first float sample in the window, ms
	LastT  int64 // timestamp of the last float sample in the window, ms
	Count  uint32
	Sum    float64
	Min    float64
	Max    float64
	First  float64 // value of the first sample
	Last   float64 // value of the last sample
	// Increase is the reset-adjusted increase from First to Last, computed as
	// PromQL does: Last - First plus the value before each reset.
	Increase float64
	Resets   uint32 // counter resets between First and Last
	// Stale is true when the sample after Last is a stale marker at most
	// downsample.StaleLookahead (5 m) later, even in a later, empty window: the
	// series ended there and a reader must not extend Last by lookback. (A
	// marker usually lands in the next minute, so "inside the window" would
	// lose it and hours built from minutes would disagree with minutes.)
	Stale bool
}

// SeriesWindows is one series and its windows, in ascending Start order.
type SeriesWindows struct {
	Labels  labels.Labels
	Windows []Window
}
