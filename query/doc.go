// Package query serves the Prometheus HTTP API v1 (query, query_range,
// series, labels, label values, metadata, exemplars, format_query,
// parse_query, status/buildinfo, status/config, status/flags and remote
// read) with the upstream PromQL engine over one
// storage.SampleAndChunkQueryable: in `strata serve`, the stitched view of
// the raw, minute and hour tiers (tiers.Stitched). Grafana, promtool and
// client_golang work unchanged.
//
// Data flow: client -> query -> tiers (Stitched). The rule evaluator of
// `strata serve` also runs its PromQL through Engine.
//
// The handlers are Prometheus' own (web/api/v1), so replies are Prometheus'
// byte for byte. This package chooses which routes are reachable (/rules,
// /alerts and /alertmanagers when the caller gives rules and a notifier,
// /targets when it gives a TargetSource, the scraper's view; the TSDB admin
// API answers a JSON 404); serves /api/v1/metadata from remote-write metadata
// (MetadataSource) and /api/v1/status/config from the YAML its caller gives
// (status.go); builds the engine with Strata's limits: timeout, max samples,
// lookback and a concurrency gate that queues queries until their timeout
// (gate.go); splits long range queries by their steps into parts
// evaluated in parallel (split.go); and keeps the final steps of range
// query answers, so that a refreshed dashboard evaluates only its newest
// steps (cache.go, WithResultsCache). The endpoints, limits and flags are
// documented in docs/api.md.
package query
