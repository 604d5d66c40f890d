// Package downsample builds rollup windows continuously: minute windows from
// raw data while it still exists, hour windows from minute windows, behind a
// watermark that lets late samples (within the out-of-order window) reach
// the rollups. It is crash-safe and idempotent.
//
// Data flow: tiers (raw) -> downsample -> tiers (minute, hour).
package downsample
