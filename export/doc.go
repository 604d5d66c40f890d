// Package export turns the rollup tiers into capacity-planning tables: one
// row per group (the values of chosen labels) and step (an hour, a day or a
// week in a time zone), with per-metric statistics chosen by the metric's
// type (gauges: avg, min, max, p50/p95/p99 of the window averages, last;
// counters: reset-aware increase and average rate; classic histograms:
// p50/p95/p99 from bucket increases and the count), the tier that served
// the step and the fraction of the step that had data. The columns, their
// units and the PromQL and DuckDB that give the same numbers are in
// docs/format/export.md.
//
// Where it sits: it reads the minute and hour tiers (tiers.Rollup, opened
// read-only by strata export so that it can run beside strata serve, or
// strata serve's own tiers for GET /api/v1/export) and writes Parquet, CSV
// or JSON lines as it goes: rows are written step by step, so a year of a
// thousand series is never held whole (Run). The capacity preset
// (capacity.go) is a fixed set of columns over the GPU and vLLM metrics,
// with headroom, a linear forecast of peak demand and a PNG chart.
//
// Files: request.go (what an export asks for, and its validation), kind.go
// (how a metric's type is decided), export.go (the plan: steps, tiers,
// series, columns), run.go (reading windows step by step, the statistics,
// rows handed to the writer on a second goroutine), format.go (the
// writers), http.go (the API handler), capacity.go and chart.go (the
// preset).
package export
