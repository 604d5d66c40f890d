package seriesset

import (
	"math"

	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Instant is the float the engine's instant selector takes of a series at
// ts (promql's vectorSelectorSingle): its latest sample at or before ts, if
// newer than ts-lookback and not a stale marker. ok is false when there is
// none; hist is true instead when that sample is a native histogram, which
// a caller that computes floats only must leave to the engine. Fused passes
// that add each series' value straight into an aggregation (storeapi's,
// rulegen's) select with it, so that they select as the engine does.
func Instant(it *storage.MemoizedSeriesIterator, ts, lookback int64) (v float64, ok, hist bool, err error) {
	var t int64
	switch it.Seek(ts) {
	case chunkenc.ValNone:
		if err := it.Err(); err != nil {
			return 0, false, false, err
		}
		t = math.MaxInt64 // none at or after ts: the one before, if any
	case chunkenc.ValFloat:
		t, v = it.At()
	default:
		if t = it.AtT(); t <= ts {
			return 0, false, true, nil
		}
	}
	if t > ts {
		_, pt, pv, fh, found := it.PeekPrev()
		if !found || pt <= ts-lookback {
			return 0, false, false, nil
		}
		if fh != nil {
			return 0, false, true, nil
		}
		v = pv
	}
	if value.IsStaleNaN(v) {
		return 0, false, false, nil
	}
	return v, true, false, nil
}
