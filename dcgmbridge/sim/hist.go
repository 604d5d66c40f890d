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

// Bucket layouts of the real exporters: vLLM V1's vllm/v1/metrics/loggers.py
// (https://github.com/vllm-project/vllm, 0.11/0.12 era), V0's
// vllm/engine/metrics.py (shorter latency buckets), and ebpf_exporter's exp2
// bucket type (https://github.com/cloudflare/ebpf_exporter, README
// "Histograms"). ../testdata holds captures of each.
func bucketsTTFTv1() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
}

func bucketsITLv1() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
}

func bucketsRequestLatency() []float64 {
	return []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
}

func bucketsIterationTokens() []float64 {
	return []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
}

func bucketsParamsN() []float64 { return []float64{1, 2, 5, 10, 20} }

// buckets125 is vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, ...
// up to the largest value not above max.
func buckets125(maxValue float64) []float64 {
	var out []float64
	for m := 1.0; ; m *= 10 {
		for _, f := range []float64{1, 2, 5} {
			if f*m > maxValue {
				return out
			}
			out = append(out, f*m)
		}
	}
}

func bucketsTTFTv0() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
}

func bucketsTPOTv0() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
}

func bucketsE2Ev0() []float64 {
	return []float64{1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}
}

// bucketsExp2 is ebpf_exporter's exp2 layout: le = 2^i * multiplier for i in
// [minExp, maxExp].
func bucketsExp2(minExp, maxExp int, multiplier float64) []float64 {
	out := make([]float64, 0, maxExp-minExp+1)
	for i := minExp; i <= maxExp; i++ {
		out = append(out, math.Ldexp(1, i)*multiplier)
	}
	return out
}
