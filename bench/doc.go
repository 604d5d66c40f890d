// Package bench drives a realistic, bounded remote-write (or OTLP) load at any
// receiver (Strata, Prometheus, VictoriaMetrics) and measures what users pay
// (CPU, memory, disk) and get (throughput, query latency, rollup freshness).
//
// It sits outside the data flow: it is a client of a receiver's
// /api/v1/write (or OTLP path), of its Prometheus HTTP API and of its /metrics, and it reads
// the server process from /proc and its data directories from disk. `strata
// bench` wires it; docs/bench.md describes the load, the figures and how to
// run it.
//
// The files: shapes.go (the DCGM, vLLM and eBPF metric families and value
// models), generator.go (the series set and its values), encode.go (RW 1.0
// and 2.0 and OTLP request bodies), load.go (RunLoad: senders, pacing, Prometheus-style
// backoff, counting), proc.go (/proc and directory sizes), query.go
// (dashboard latency, rollup lag, CPU profile), scenario.go (Run: repetitions
// and per-run measurement), report.go (Report, JSON, markdown, Compare) and
// chart.go (PNG charts).
package bench
