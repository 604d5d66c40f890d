// Package query serves the Prometheus HTTP API v1 (query, query_range,
// series, labels, metadata, remote read, ...) with the upstream PromQL engine
// over the tiers' stitched storage.Queryable, so Grafana and promtool work
// unchanged.
//
// Data flow: client -> query -> tiers.
package query
