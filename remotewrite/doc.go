// Package remotewrite is the HTTP receiver for Prometheus Remote-Write 1.0 and
// 2.0: content negotiation, bounded snappy decoding, a pooled zero-copy
// protobuf decoder, validation, limits and the status codes the specs
// require. OTLP/HTTP metrics (otlp.go) are translated by Prometheus'
// translator into the same write path. It appends what it accepts into the raw tier through a
// storage.AppendableV2 and keeps metric metadata for /api/v1/metadata.
//
// Data flow: sender -> remotewrite -> tiers (raw).
//
// Where things are: the decoder (decode.go, decode_v2.go) turns a
// decompressed body into views of the request buffer; body.go bounds reading
// and decompression; handler.go decides status codes and applies
// backpressure; write.go validates and appends in one transaction; cache.go
// remembers series references; metadata.go keeps and persists metadata;
// limits.go is the per-series validation the scraper (dcgmbridge/scrape) shares.
// docs/api-remote-write.md is the receiver's contract.
package remotewrite
