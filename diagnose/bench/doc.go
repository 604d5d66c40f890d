// Package bench is the diagnosis benchmark (`strata diagnose bench`): it
// generates scenarios from the simulator (weeks of fault-free history, then
// incidents and decoys), streams them straight into a fresh data
// directory's minute and hour tiers, replays the diagnosis engine over them
// (diagnose.Replay) with the case archive attached, and scores the
// diagnoses against the simulator's ground-truth log: top-1 and top-3
// accuracy of cause and entity, detection rate and time, false diagnoses
// per fault-free day, the unknown rate, the calibration of the confidence
// and the archive's nearest-case accuracy. The splits it runs are files in
// splits/ (docs/diagnosis-bench.md).
//
// Data flow: sim -> backfill.Stream -> tiers (minute, hour) ->
// diagnose.Replay -> score -> report (markdown, JSON, PNG).
package bench
