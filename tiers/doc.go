// Package tiers owns Strata's three stores (raw per-second data in a
// Prometheus TSDB with its WAL, minute rollups, hourly Parquet rollups),
// their retention, and the stitched storage.Queryable that the query path
// reads through.
//
// Data flow: remotewrite -> tiers (raw) -> downsample -> tiers (minute, hour);
// query reads all three through one Queryable.
package tiers
