// Package storeapi serves the Thanos StoreAPI (Info, Series, LabelNames,
// LabelValues; the gRPC protocol of github.com/thanos-io/thanos' storepb and
// infopb) over Strata's stitched tiers, so that a Thanos Querier in front of
// several Strata nodes queries them as one system: it fans a PromQL query out
// to every node, merges the answers and deduplicates HA replicas by their
// external labels.
//
// It also serves Thanos' Query API (querypb: Query, QueryRange; QueryServer),
// which a Querier in distributed mode pushes subqueries down to: Strata
// evaluates them with its own PromQL engine (the query package's) over the
// stitched tiers, so that rollups are read as a single Strata reads them,
// and sends only the result series. The engine sees each series with the
// external labels added and the request's replica labels removed, as the
// distributed engine needs to merge partial aggregates and deduplicate HA
// pairs (docs/scale-out.md, "Two modes"). Requests whose selects read alike
// (the sum and the count a distributed Querier splits an avg into) share one
// read of the tiers within a grace period, one request iterating it at a
// time (shared.go), and range queries of
// the form `sum|count|min|max by (labels) (selector)` evaluate the selector
// once for all of them and aggregate its matrix as the engine would, to the
// bit (aggregate.go).
//
// Data flow: Thanos Querier -> storeapi -> tiers (Stitched), or -> the
// query package's engine -> tiers. It sits beside the query package, which
// serves the same tiers over Prometheus' HTTP API.
//
// What a Series answer holds (docs/scale-out.md, "What the StoreAPI sends"):
//
//   - every series with the node's external labels added (they win over a
//     series label of the same name, as in Thanos), minus the labels the
//     request lists in without_replica_labels, sorted by the result;
//   - its samples as XOR chunks in AggrChunk.Raw, at most samplesPerChunk
//     (480) samples a chunk, written by xorEncoder (histogram chunks of at
//     most 120 for native histograms, by chunkenc). Over the minute and
//     hour tiers these are the stitched view's synthetic samples for the
//     PromQL function the request implies (QueryHints.Func when the client
//     sends it, else the aggregates Thanos asks for: COUNTER is rate-like,
//     MIN min_over_time, MAX max_over_time, SUM sum_over_time, COUNT+SUM
//     every other function and plain selectors, and COUNT, which count,
//     count_values and count_over_time all send, the plain selectors'
//     samples, so that count_over_time counts windows), so that the
//     Querier's engine computes what a single Strata would (but for
//     count_over_time, docs/scale-out.md). Thanos' downsampled AggrChunk (count/sum/min/max/counter) is
//     not used: the Querier turns COUNT+SUM into per-window averages, which
//     would make plain selectors over rollups differ from a single Strata's
//     (the stitched view serves each window's last value there);
//   - the coarsest tier is chosen by max_resolution_window (Thanos'
//     auto-downsampling sends step/5): minute windows when it is at least a
//     minute, hour windows when at least an hour, where those tiers hold the
//     range; 0 serves raw wherever raw still holds data.
//
// Limits: Query API requests take the engine's limits (concurrency,
// timeout, samples) and at most 11,000 steps; a query that does not parse
// or evaluate, or a string result, fails with a gRPC status
// (InvalidArgument, ResourceExhausted, DeadlineExceeded, Unimplemented).
// StoreAPI requests: at most MaxConcurrency requests run at once (others wait for a
// slot until their deadline), and a Series request that selects more than
// MaxSeries series or MaxSamples samples fails with ResourceExhausted and a
// message naming the limit; each rejection is counted in
// strata_storeapi_rejected_total{reason}.
package storeapi
