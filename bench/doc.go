// Package bench drives a realistic, bounded remote-write load at any
// receiver (Strata, Prometheus, VictoriaMetrics) and measures what users pay
// (CPU, memory, disk) and get (throughput, query latency, rollup freshness).
package bench
