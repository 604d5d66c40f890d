// Package archive is the diagnosis case archive: every diagnosis the engine
// makes (package diagnose, through its Archive hook), with a fingerprint of
// the situation at its start and the operators' verdicts, kept in a SQLite
// database in the data directory (diagnoses.db). It answers the engine's
// similar-case search, takes feedback (POST
// /api/v1/diagnoses/{id}/feedback), reranks a new diagnosis' candidates by
// the verdicts on its similar cases (Rerank, bounded), and exports and
// imports cases as JSON lines so a fleet can share them.
//
// Data flow: diagnose.Engine -> Record / Similar -> SQLite (durable) and
// the in-memory vector index (search); operators -> Feedback -> verdicts.
// docs/diagnosis-archive.md documents the schema, the fingerprint layout,
// the similarity and the adjustment.
package archive
