package archive

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/strata-dev/strata/diagnose"
)

// Slot is one position of the fingerprint vector: a canonical signal and
// the dimension of the four-dimension model it belongs to.
type Slot struct {
	Signal    string
	Dimension string
	// Kind says how a raw value becomes a coordinate when the engine gives
	// no robust deviation for the signal (docs/diagnosis-archive.md).
	Kind slotKind
}

type slotKind uint8

const (
	// ratio signals are in [0, 1] already.
	slotRatio slotKind = iota
	// level signals (rates, counts, seconds, watts, degrees) are compared
	// on a log scale: log10(1 + v).
	slotLevel
	// flag signals count as 1 when non-zero (the last XID).
	slotFlag
)

// Layout is the fingerprint vector, version VectorVersion: the canonical
// signals of the diagnosis pack, grouped by dimension, then one coordinate
// per dimension (the engine's largest |deviation| in it, 0 when absent).
// Changing it changes VectorVersion; vectors of another version are never
// compared (import recomputes them from the stored fingerprint).
var Layout = []Slot{
	{"strata:gpu_sm_active:ratio", "compute", slotRatio},
	{"strata:gpu_sm_clock:ratio", "compute", slotRatio},
	{"strata:gpu_power_watts", "compute", slotLevel},
	{"strata:gpu_temperature_celsius", "compute", slotLevel},
	{"strata:gpu_xid:last", "compute", slotFlag},
	{"strata:spec_decode_acceptance:ratio", "compute", slotRatio},
	{"strata:tpot_seconds:p99", "compute", slotLevel},
	{"strata:generation_tokens:rate", "compute", slotLevel},
	{"strata:kv_cache_usage:ratio", "memory", slotRatio},
	{"strata:preemptions:rate", "memory", slotLevel},
	{"strata:prefix_cache_hit:ratio", "memory", slotRatio},
	{"strata:gpu_memory_bandwidth_active:ratio", "memory", slotRatio},
	{"strata:network_latency_seconds:p99", "network", slotLevel},
	{"strata:tcp_retransmits:rate", "network", slotLevel},
	{"strata:requests_waiting", "scheduling", slotLevel},
	{"strata:requests_running", "scheduling", slotLevel},
	{"strata:queue_time_seconds:p99", "scheduling", slotLevel},
	{"strata:requests:rate", "scheduling", slotLevel},
	{"strata:ttft_seconds:p99", "scheduling", slotLevel},
	{"strata:e2e_latency_seconds:p99", "scheduling", slotLevel},
	{"strata:request_errors:ratio", "scheduling", slotRatio},
	{"strata:prompt_tokens:rate", "scheduling", slotLevel},
}

// Dimensions are the four dimensions, in the order of the vector's last
// coordinates.
var Dimensions = []string{"compute", "memory", "network", "scheduling"}

// VectorVersion is the version of Layout.
const VectorVersion = 1

// VectorLen is the length of a fingerprint vector.
var VectorLen = len(Layout) + len(Dimensions)

// deviationScale maps a robust z-score to a coordinate: |z| = 3 (the
// engine's default k) is 1, and coordinates are clipped to ±deviationClip,
// so one wild signal cannot dominate the distance (Bodik et al.'s
// hot/normal/cold, made continuous).
const (
	deviationScale = 3.0
	deviationClip  = 3.0
)

// Vector turns the engine's fingerprint into the fixed-length vector the
// archive compares: for each slot of Layout, the signal's robust deviation
// (z/3, clipped to ±3) when the engine computed one, else its raw value on
// the slot's scale (a ratio as is, a level as log10(1+v), a flag as 0/1);
// an absent signal is 0. Then one coordinate per dimension from
// fp.Dimensions, on the deviation scale.
func Vector(fp diagnose.Fingerprint) []float32 {
	v := make([]float32, VectorLen)
	for i, s := range Layout {
		if z, ok := fp.Deviations[s.Signal]; ok && !math.IsNaN(z) {
			v[i] = float32(clip(z/deviationScale, deviationClip))
			continue
		}
		x, ok := fp.Signals[s.Signal]
		if !ok || math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		switch s.Kind {
		case slotRatio:
			v[i] = float32(clip(x, 1))
		case slotLevel:
			v[i] = float32(math.Log10(1 + math.Max(0, x)))
		case slotFlag:
			if x != 0 {
				v[i] = 1
			}
		}
	}
	for j, d := range Dimensions {
		if z, ok := fp.Dimensions[d]; ok && !math.IsNaN(z) {
			v[len(Layout)+j] = float32(clip(z/deviationScale, deviationClip))
		}
	}
	return v
}

func clip(x, lim float64) float64 { return math.Max(-lim, math.Min(lim, x)) }

// Similarity of two vectors in (0, 1]: 1 / (1 + RMS distance). Identical
// fingerprints are 1; a root-mean-square difference of 0.25 per coordinate
// (a quarter of a 3-sigma deviation, or a quarter of a decade) is 0.8.
func Similarity(a, b []float32) float64 {
	return 1 / (1 + math.Sqrt(sqDist(a, b)/float64(len(a))))
}

func sqDist(a, b []float32) float64 {
	var s float32
	for i := range a {
		d := a[i] - b[i]
		s += d * d
	}
	return float64(s)
}

// encodeVector stores a vector as little-endian float32s.
func encodeVector(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

var errVectorLen = errors.New("stored fingerprint vector has the wrong length")

func decodeVector(b []byte) ([]float32, error) {
	if len(b) != 4*VectorLen {
		return nil, errVectorLen
	}
	v := make([]float32, VectorLen)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}
