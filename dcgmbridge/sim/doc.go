// Package sim is a deterministic simulator of a vLLM inference cluster: nodes
// of GPUs, vLLM instances with a queueing, continuous-batching, KV-cache,
// prefix-cache and speculative-decoding model, the DCGM fields the load drives,
// and eBPF network-latency histograms.
//
// It exists so that Strata can be demonstrated, tested and benchmarked without
// a GPU: the simulated exporters render the same metric names, labels, types
// and histogram buckets as dcgm-exporter, vLLM (V1 or V0 names) and
// cloudflare/ebpf_exporter, and injected faults leave a ground-truth log that
// the diagnosis rules can be scored against.
//
// Data flow: sim -> /metrics handlers (scraped by Prometheus or
// dcgmbridge/scrape), or sim -> remote write (Push) -> remotewrite -> tiers,
// or sim -> Backfill -> tiers for weeks of history in minutes.
//
// Time is always an input: the model never reads the wall clock, and the same
// seed and the same Step times give byte-identical output. docs/simulator.md
// describes the model, its parameters, the faults and the ground-truth format.
package sim
