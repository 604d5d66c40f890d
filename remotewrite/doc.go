// Package remotewrite is the HTTP receiver for Prometheus Remote-Write 1.0 and
// 2.0: content negotiation, bounded snappy decoding, a pooled zero-copy
// protobuf decoder, validation, limits and the status codes the specs
// require. It appends what it accepts into the raw tier through a
// storage.Appendable and keeps metric metadata for /api/v1/metadata.
//
// Data flow: sender -> remotewrite -> tiers (raw).
package remotewrite
