//go:build race

package tiers

// Under the race detector zstd's best level is about 3x slower again than
// its better level (measured on TestStitchedMatchesRaw: 70 s against 23 s),
// which made the race run of make test take over six minutes for each of
// tiers and backfill. Race builds (tests only: nothing ships one) write the
// hour tier's files at the better level too, as the minute tier's always
// are. The files are equally valid and read back identically; only their
// size differs, and size is measured by TestRollupSizeRatios, which runs
// without the race detector.
func init() {
	bestCodec = betterCodec
}
