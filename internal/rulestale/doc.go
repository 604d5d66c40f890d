// Package rulestale keeps the staleness state of Prometheus recording rules
// compactly, for rules.Groups that Strata evaluates (the canonical rules'
// manager in cmd/strata, the diagnosis engine's groups).
//
// Prometheus' rules.Group remembers, per rule, every series the rule wrote at
// its last evaluation, so that it can write a stale marker for each series
// that disappears (or whose rule is removed on reload). It keeps each
// series' labels twice: as a string map key and as the value, both rebuilt
// at every evaluation (about 2 x the label bytes plus a map slot per output
// series). That state is unexported and has no setter, so it cannot be
// replaced; a Tracker instead makes it hold one placeholder series per
// recording rule, and keeps the real set itself, 24 bytes per series (a
// label hash and the label set the storage already holds), 32 where the
// storage resolves series references (storage.GetRef: the raw tier): the
// reference it returned, by which the series is appended next time instead
// of by a lookup of its labels.
//
// The mechanism, in rules.Group's own terms. The Tracker wraps the group's
// QueryFunc, AppendableV2, EvalIterationFunc and Metrics:
//
//   - QueryFunc: a recording rule's query is evaluated, its result given the
//     rule's name and labels and checked for duplicate label sets and the
//     group's limit exactly as rules.RecordingRule.Eval does; the result is
//     held by the Tracker under a fresh id, and the rule gets a one-sample
//     vector whose only label names that id (the placeholder).
//   - Group.Eval appends the placeholder; the Tracker's appender recognises
//     it and appends the held result in its place (same samples, same
//     options, same error handling). Group.Eval then stales every
//     placeholder of the rule's previous evaluation (it is not in this
//     one's output): the appender takes that as "the previous set ends at
//     this timestamp" and writes a stale marker, at that timestamp, for each
//     series of the previous set the new result did not write. Commit makes
//     the new set the rule's; a failed commit keeps the previous one, as
//     Group.Eval keeps its map.
//   - Reloads (Group.CopyState) and removed groups (Manager.Update) move or
//     stale the placeholders as they would the series; the appender turns a
//     staled placeholder into stale markers for its whole set, at the
//     timestamp Prometheus chose.
//   - prometheus_rule_group_last_evaluation_samples counts each placeholder
//     as its result's size (Metrics).
//
// So stale markers are written for the same series at the same timestamps
// and in the same appender transactions, and what /api/v1/rules and the rule
// metrics show is what Group.Eval sets. Alerting rules keep Prometheus' own
// state (they are few, and their output is built inside the rule).
//
// The rules must be evaluated one at a time within a group (Prometheus'
// default; Strata never enables concurrent rule evaluation).
package rulestale
