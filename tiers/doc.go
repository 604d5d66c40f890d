// Package tiers holds Strata's three stores and the view that reads them as
// one:
//
//   - the raw tier (Raw): per-second samples in a Prometheus TSDB with its
//     WAL, appended by remote write, scrapes and recording rules (through the
//     downsample pipeline's tee) and by strata backfill;
//   - the minute and hour rollup tiers (Rollup): one immutable Parquet file
//     per partition (an hour of minute windows, a day of hour windows),
//     written whole and atomically by the downsample pipeline and the
//     backfill, deleted whole by retention (docs/format/minute.md,
//     docs/format/hour-parquet.md);
//   - Stitched, the storage.Queryable the PromQL engine reads: raw where raw
//     still holds data, minute windows before that, hour windows before
//     that, one series across the three, each window turned back into the
//     synthetic samples that make the engine's function (SelectHints.Func)
//     compute what it would have computed over the raw samples;
//   - the tiers' status: /api/v1/status/tiers and the strata_tier_* gauges.
//
// Data flow: remotewrite, scrapes and rules -> tiers (raw) -> downsample ->
// tiers (minute, hour); query reads all three through Stitched.
//
// Files: raw.go (the raw tier); rollup.go (a rollup tier: its files,
// writes, retention); parquet_schema.go, parquet_derive.go (the row layout
// and the aggregates stored as null), series_runs.go, codec.go (what a file
// holds besides rows); the rollup reader: rollup_select.go (Select, and
// which row groups and rows a query keeps), rollup_reader.go (one worker's
// file and row-group reader), column_decode.go (decoding column chunks),
// window_block.go (the windows it returns, held in columns), filecache.go
// (open files with parsed footers); stitch.go and stitch_iter.go (the
// stitched view); status.go.
package tiers
