package downsample

import "github.com/strata-dev/strata/tiers"

// FromRaw adapts the raw tier to a Source.
func FromRaw(r *tiers.Raw) Source { return rawSource{r} }

type rawSource struct{ *tiers.Raw }

// Bounds returns the raw tier's oldest and newest sample time. The newest is
// the head's, which survives restarts through the WAL; when the head holds
// nothing (all data compacted into blocks, WAL empty) it falls back to the
// newest block's end.
func (r rawSource) Bounds() (mint, maxt int64, ok bool) {
	mint, ok = r.MinTime()
	if !ok {
		return 0, 0, false
	}
	maxt = r.DB().Head().MaxTime()
	if blocks := r.DB().Blocks(); len(blocks) > 0 {
		maxt = max(maxt, blocks[len(blocks)-1].Meta().MaxTime-1) // block MaxTime is exclusive
	}
	return mint, maxt, true
}
