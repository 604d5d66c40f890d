// Package downsample builds the rollup tiers' windows: minute windows from
// the raw tier, hour windows from the minute tier (never from raw, which may
// be gone by then).
//
// Pipeline runs for the life of strata serve, behind a watermark: the newest
// raw sample minus the raw tier's out-of-order window, so that a minute is
// computed once, when no sample can still land in it. Tee hands it every
// float sample the raw tier commits, and the open hour's minutes are
// computed from those in memory; an hour that received a sample after its
// minute was computed is re-read from raw before its partition is written.
// There is no rollup WAL: after a crash, every partition without a file is
// recomputed from the finer tier (docs/rollups.md).
//
// The window arithmetic (AppendWindows, Coarsen) and BuildHourPartition are
// also what strata backfill uses for history older than the raw retention.
//
// Data flow: tiers (raw) -> downsample -> tiers (minute, hour).
package downsample
