// Package scrape is Strata's own scraper, for fleets with no Prometheus in
// front of Strata: it scrapes the `sources:` targets (dcgm-exporter, vLLM,
// ebpf_exporter or any Prometheus text or OpenMetrics endpoint) on their
// intervals, parses and checks each body completely before appending any of
// it, applies the remote-write receiver's series validation
// (remotewrite.Limits), drops DCGM blank sentinels, and writes Prometheus'
// health series and stale markers. It is an HTTP client with its own
// configuration (Config), bounds (body, line and sample limits, timeouts) and
// metrics (strata_dcgmbridge_scrape*).
//
// Data flow: exporters -> scrape -> tiers (raw), through the rollup
// pipeline's tee; Scraper.Targets feeds /api/v1/targets (package query).
// docs/scraping.md documents the configuration and the failure reasons.
package scrape
