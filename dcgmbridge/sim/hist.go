package sim

import "math"

// hist is a classic Prometheus histogram kept as per-bucket (not cumulative)
// counts, so an observation costs one bucket search; the cumulative view is
// computed only when a sample is rendered. Counts are floats because the model
// observes fractional token counts per tick; they are floored when exposed,
// which keeps every bucket, _count and +Inf integral and monotonic.
type hist struct {
	bounds []float64 // upper bounds, ascending, without +Inf
	counts []float64 // len(bounds)+1; the last is the +Inf overflow
	sum    float64
}

func newHist(bounds []float64) *hist {
	return &hist{bounds: bounds, counts: make([]float64, len(bounds)+1)}
}

// observe records n observations of value v.
func (h *hist) observe(v, n float64) {
	if n <= 0 {
		return
	}
	// First bound >= v (le is inclusive). A linear scan beats a binary
	// search here: the bucket lists are short and most observations land in
	// the first few buckets, so the branch is predictable (measured with
	// BenchmarkStepHour).
	i := 0
	for i < len(h.bounds) && h.bounds[i] < v {
		i++
	}
	h.counts[i] += n
	h.sum += v * n
}

// spread observes n values around v: a quarter at lo*v, half at v and a
// quarter at hi*v. It gives the buckets a plausible width without sampling
// every observation, which keeps a week of per-second ticks cheap.
func (h *hist) spread(v, n, lo, hi float64) {
	h.observe(v*lo, n*0.25)
	h.observe(v, n*0.5)
	h.observe(v*hi, n*0.25)
}

// fillCumulative writes floor(cumulative count) for every bucket including
// +Inf into dst, which must have len(bounds)+1 elements. The +Inf value is
// also the exposed _count, so the two always agree.
func (h *hist) fillCumulative(dst []float64) {
	c := 0.0
	for i, v := range h.counts {
		c += v
		dst[i] = math.Floor(c + 1e-9)
	}
}
