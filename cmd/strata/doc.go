// Command strata is the Strata server and its tools:
//
//   - strata serve (serve.go, the default command) wires every package: the
//     tiers (tiers.go), the rollup pipeline and its tee, the remote-write
//     receiver, the query API, rule evaluation (rules.go) and scraping
//     (scrape.go) on one HTTP server, and shuts them down in order;
//   - strata backfill (backfill.go) imports history into the tiers;
//   - strata simulate (simulate.go) runs the simulated inference cluster;
//   - strata bench run and compare (bench.go) drive and measure a load.
//
// All flag and configuration-file parsing lives here: config.go and
// default.yml (the configuration and its embedded default), flags.go (flags
// that override configuration keys), status.go (what /api/v1/status/config
// and /flags show) and version.go (what --version shows). The packages it
// wires take typed configurations, a *slog.Logger and a
// prometheus.Registerer. docs/architecture.md describes the whole.
package main
