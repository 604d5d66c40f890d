// Package dcgmbridge is Strata's catalogue of the exporters it understands and
// its canonical inference-performance model, as pure data and functions: the
// DCGM fields keyed by field ID (every spelling under which DCGM and
// dcgm-exporter expose them), the metric names of vLLM (V0 and V1), SGLang,
// TGI, Triton / TRT-LLM and the eBPF exporters with their types and versions,
// the label spellings that changed between releases, the canonical series
// computed from them (each with its fallback chain of sources), DCGM's blank
// sentinels, and which metric names are gauges. It holds no state, starts no
// goroutine and registers no metric.
//
// Data flow: nothing flows through it; it is read by the packages that do.
// rulegen renders the canonical model into recording rules (exporters ->
// tiers -> canonical rules -> tiers); scrape drops DCGM sentinels while
// scraping; cmd/strata types rollup windows (downsample) with IsGauge; sim
// and bench take their exporters' family shapes from it.
//
// The sub-packages: rulegen (canonical recording rules and docs/metrics.md),
// scrape (the scraper of `sources:` targets), sim (a simulated cluster). The
// exporter captures the tests read are in testdata, with their public
// sources in testdata/README.md.
package dcgmbridge
