// Package dcgmbridge maps DCGM, vLLM (V0 and V1), SGLang, TGI, Triton and
// eBPF exporter metrics onto Strata's canonical inference-performance model,
// and scrapes those sources when no Prometheus sits in front of Strata.
//
// Data flow: exporters -> dcgmbridge (scrape) -> tiers (raw); rollups ->
// canonical recording rules -> tiers.
package dcgmbridge
