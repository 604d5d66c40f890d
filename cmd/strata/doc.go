// Command strata is the Strata server and its tools: `strata serve` runs the
// remote-write receiver, the tiers and the query API; other subcommands
// (backfill, export, simulate, bench) arrive with their issues.
//
// All flag and configuration-file parsing lives here; the packages it wires
// take typed configurations, a *slog.Logger and a prometheus.Registerer.
package main
