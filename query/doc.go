// Package query serves the Prometheus HTTP API v1 (query, query_range,
// series, labels, label values, metadata, build info, format_query, exemplars
// and remote read) with the upstream PromQL engine over any
// storage.SampleAndChunkQueryable: the raw tier today, the stitched
// raw/minute/hour queryable later. Grafana, promtool and client_golang work
// unchanged.
//
// Data flow: client -> query -> tiers.
//
// The handlers are Prometheus' own (web/api/v1), so replies are Prometheus'
// byte for byte; this package chooses which routes are reachable (everything
// that needs rules or the TSDB admin API answers a JSON 404; /api/v1/targets
// is served from a TargetSource, the scraper's view, when given one),
// serves /api/v1/metadata from remote-write metadata (MetadataSource), and
// builds the engine with Strata's limits: timeout, max samples, lookback and a
// concurrency gate that queues queries until their timeout. The endpoints,
// limits and flags are documented in docs/api.md.
package query
