package diagnose

// Fingerprint summarises the state of a diagnosis' entity at its start, for
// case matching (docs/diagnosis.md, "Case archive"): the canonical signals'
// values and, when baselines exist, their robust deviations, and one
// deviation per dimension of the four-dimension model.
type Fingerprint struct {
	// Signals are the canonical signals' values at the start, by name.
	Signals map[string]float64 `json:"signals"`
	// Deviations are the signals' robust z-scores against their baselines;
	// empty until baselines are configured.
	Deviations map[string]float64 `json:"deviations,omitempty"`
	// Dimensions is the largest |deviation| per dimension (compute, memory,
	// network, scheduling).
	Dimensions map[string]float64 `json:"dimensions,omitempty"`
}

// Archive receives every diagnosis as it opens, updates and resolves, and
// finds past cases similar to a fingerprint. The case archive of issue 12
// implements it; the engine's default is NopArchive.
//
// Record and Similar are called from the engine's evaluation goroutine: they
// must be quick (queue any slow work) and must not retain d's slices.
type Archive interface {
	Record(d Diagnosis, fp Fingerprint)
	Similar(fp Fingerprint, k int) []SimilarCase
}

// NopArchive keeps nothing and finds nothing.
type NopArchive struct{}

// Record implements Archive.
func (NopArchive) Record(Diagnosis, Fingerprint) {}

// Similar implements Archive.
func (NopArchive) Similar(Fingerprint, int) []SimilarCase { return nil }
