// Package rulegen renders the canonical model of package dcgmbridge into
// Prometheus recording rules: one rule per canonical series, its sources
// joined with `or on(<level labels>)` in order of preference, label aliases
// copied onto their current spelling, and the aggregation and join labels of
// Config. It also renders docs/metrics.md, so the documentation is generated
// from the same catalogue as the rules.
//
// Data flow: dcgmbridge (catalogue) -> rulegen -> a rule file
// (<storage.path>/rules/canonical.rules.yml, written by cmd/strata at start)
// -> Prometheus' rules.Manager, which evaluates it over the tiers and appends
// the canonical series to the raw tier. The committed rules/canonical.rules.yml
// and docs/metrics.md are this package's output for DefaultConfig;
// TestCommittedArtefacts keeps them current (-update rewrites them).
package rulegen
