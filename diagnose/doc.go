// Package diagnose is Strata's diagnosis engine: Prometheus alerting rules
// evaluated over the minute windows only (tiers.MinuteView), once per
// finished minute, that name the root cause of an inference slowdown with
// evidence, confidence and actions.
//
// Data flow. The rollup pipeline (package downsample) computes minute
// windows behind its watermark and tells the engine how far it got (its
// mark). The engine evaluates every minute T with T+1m <= mark, in order, in
// its own goroutine: the signals group (the canonical expressions of package
// dcgmbridge rendered at minute resolution), the operator's SLO series, the
// default rule pack (diagnose/rules) and the operator's rule files, each a
// Prometheus rules.Group evaluated with Group.Eval(ctx, T), so the alert
// state machine (pending, firing, for, keep_firing_for, resolved) is
// Prometheus' own. Recording-rule results go to a bounded in-memory scratch
// store that the next rules read together with the minute view. After each
// minute the firing alerts are assembled into Diagnoses: related alerts are
// grouped by entity, a causal graph decides which cause is the root and
// which alerts are its symptoms, and the diagnosis gets a confidence and a
// ranked list of candidate causes.
//
// Because only finished minute windows are read, a replay of old data
// (Replay, `strata diagnose`) gives exactly the diagnoses the live run gave:
// docs/diagnosis.md explains the timing, the rules, the causal graph, the
// confidence and the JSON.
package diagnose
