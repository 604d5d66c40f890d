package bench

import (
	"math"

	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// This file holds the metric shapes the generator emits: names, types, labels
// and bucket edges as the real exporters expose them (vLLM V1's
// vllm/v1/metrics/loggers.py, dcgm-exporter's etc/default-counters.csv and
// internal/pkg/rendermetrics, cloudflare/ebpf_exporter's
// examples/biolatency.yaml and accept-latency.yaml), and value models that
// make compression realistic: gauges drift and jitter, counters grow by
// Poisson amounts, histograms fill their buckets from a log-normal latency
// distribution.

type metricKind uint8

const (
	kindGauge metricKind = iota
	kindCounter
	kindHistogram
)

// metadataType is the RW 2.0 metadata type sent with every series of a family.
func (k metricKind) metadataType() writev2.Metadata_MetricType {
	switch k {
	case kindCounter:
		return writev2.Metadata_METRIC_TYPE_COUNTER
	case kindHistogram:
		return writev2.Metadata_METRIC_TYPE_HISTOGRAM
	default:
		return writev2.Metadata_METRIC_TYPE_GAUGE
	}
}

// gaugeModel is a bounded random walk (the slow drift) plus per-sample noise,
// rounded to a number of decimals: DCGM prints integers for clocks,
// temperatures and utilisation, so their samples repeat often, as in reality.
type gaugeModel struct {
	min, max     float64
	drift, noise float64 // standard deviations per step
	decimals     int     // -1 keeps full float precision
}

// family is one metric family of a shape.
type family struct {
	name string
	help string
	unit string
	kind metricKind
	// extra are constant labels that split a family, such as finished_reason.
	extra [][2]string

	gauge gaugeModel
	// rate is the mean counter increase (counters) or the mean number of
	// observations (histograms) per second.
	rate float64
	// bounds are a histogram's bucket upper edges without +Inf; observations
	// are log-normal with median exp(mu) and shape sigma.
	bounds    []float64
	mu, sigma float64
	// probs and mids are derived from bounds: the chance an observation lands
	// in each bucket (the last is +Inf) and the value it adds to _sum.
	probs, mids []float64
}

// seriesCount is how many series one instance of the family produces.
func (f *family) seriesCount() int {
	if f.kind == kindHistogram {
		return len(f.bounds) + 3 // buckets, +Inf, _sum, _count
	}
	return 1
}

// prepare derives probs and mids from the bucket edges.
func (f *family) prepare() {
	if f.kind != kindHistogram {
		return
	}
	cdf := func(x float64) float64 {
		return 0.5 * math.Erfc(-(math.Log(x)-f.mu)/(f.sigma*math.Sqrt2))
	}
	n := len(f.bounds)
	f.probs = make([]float64, n+1)
	f.mids = make([]float64, n+1)
	prev, lo := 0.0, 0.0
	for i, b := range f.bounds {
		c := cdf(b)
		f.probs[i] = c - prev
		prev = c
		if lo == 0 {
			f.mids[i] = b / 2
		} else {
			f.mids[i] = math.Sqrt(lo * b)
		}
		lo = b
	}
	f.probs[n] = 1 - prev
	f.mids[n] = 2 * lo
}

func lognormalMedian(median float64) float64 { return math.Log(median) }

// Bucket edges from sources.md.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	reqBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// exp2Buckets is ebpf_exporter's exp2 bucket type: le = 2^i × multiplier for
// i in [0, maxKey].
func exp2Buckets(maxKey int, multiplier float64) []float64 {
	b := make([]float64, maxKey+1)
	for i := range b {
		b[i] = math.Ldexp(1, i) * multiplier
	}
	return b
}

// shape is a kind of unit (a GPU, a vLLM engine, a host's eBPF exporter) and
// the families every unit of that kind exposes.
type shape struct {
	name     string
	families []*family
}

func (s *shape) seriesPerUnit() int {
	n := 0
	for _, f := range s.families {
		n += f.seriesCount()
	}
	return n
}

// The three shapes. They are built fresh per generator because prepare writes
// derived fields.
func dcgmShape() *shape {
	g := func(name, help string, m gaugeModel) *family {
		return &family{name: name, help: help, kind: kindGauge, gauge: m}
	}
	return &shape{name: "dcgm", families: []*family{
		g("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", gaugeModel{1410, 1980, 15, 0, 0}),
		g("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", gaugeModel{2619, 2619, 0, 0, 0}),
		g("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", gaugeModel{35, 85, 0.3, 0.4, 0}),
		g("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", gaugeModel{30, 85, 0.3, 0.4, 0}),
		g("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", gaugeModel{70, 700, 8, 12, 3}),
		g("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", gaugeModel{0, 100, 3, 4, 0}),
		g("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", gaugeModel{0, 100, 2, 3, 0}),
		g("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", gaugeModel{1000, 80000, 50, 0, 0}),
		g("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", gaugeModel{1000, 80000, 50, 0, 0}),
		g("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", gaugeModel{0, 1, 0.02, 0.03, 6}),
		g("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", gaugeModel{0, 1, 0.02, 0.03, 6}),
		g("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.", gaugeModel{0, 1, 0.02, 0.03, 6}),
		g("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", gaugeModel{0, 2e9, 2e7, 5e7, 0}),
		g("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", gaugeModel{0, 2e9, 2e7, 5e7, 0}),
		{name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", help: "Total energy consumption since boot (in mJ).", kind: kindCounter, rate: 400000},
		{name: "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", help: "Total number of PCIe retries.", kind: kindCounter, rate: 0.001},
	}}
}

func vllmShape() *shape {
	h := func(name string, bounds []float64, rate, median, sigma float64) *family {
		return &family{name: name, kind: kindHistogram, unit: "seconds", bounds: bounds, rate: rate, mu: lognormalMedian(median), sigma: sigma}
	}
	c := func(name string, rate float64, extra ...[2]string) *family {
		return &family{name: name, kind: kindCounter, rate: rate, extra: extra}
	}
	return &shape{name: "vllm", families: []*family{
		{name: "vllm:num_requests_running", help: "Number of requests in model execution batches.", kind: kindGauge, gauge: gaugeModel{0, 256, 4, 2, 0}},
		{name: "vllm:num_requests_waiting", help: "Number of requests waiting to be processed.", kind: kindGauge, gauge: gaugeModel{0, 50, 1, 1, 0}},
		{name: "vllm:kv_cache_usage_perc", help: "KV-cache usage. 1 means 100 percent usage.", kind: kindGauge, gauge: gaugeModel{0, 1, 0.01, 0.005, -1}},
		c("vllm:prompt_tokens_total", 2000),
		c("vllm:generation_tokens_total", 600),
		c("vllm:num_preemptions_total", 0.05),
		c("vllm:prefix_cache_queries_total", 2000),
		c("vllm:prefix_cache_hits_total", 900),
		c("vllm:request_success_total", 4, [2]string{"finished_reason", "stop"}),
		c("vllm:request_success_total", 0.5, [2]string{"finished_reason", "length"}),
		c("vllm:request_success_total", 0.05, [2]string{"finished_reason", "abort"}),
		h("vllm:time_to_first_token_seconds", ttftBuckets, 4, 0.15, 1.0),
		h("vllm:inter_token_latency_seconds", itlBuckets, 600, 0.03, 0.5),
		h("vllm:e2e_request_latency_seconds", reqBuckets, 4, 8, 0.8),
		h("vllm:request_queue_time_seconds", reqBuckets, 4, 0.05, 1.5),
	}}
}

func ebpfShape() *shape {
	h := func(name string, bounds []float64, rate, median, sigma float64, extra ...[2]string) *family {
		return &family{name: name, kind: kindHistogram, unit: "seconds", bounds: bounds, rate: rate, mu: lognormalMedian(median), sigma: sigma, extra: extra}
	}
	return &shape{name: "ebpf", families: []*family{
		h("ebpf_exporter_bio_latency_seconds", exp2Buckets(27, 1e-6), 300, 200e-6, 1.2, [2]string{"device", "nvme0n1"}, [2]string{"operation", "read"}),
		h("ebpf_exporter_bio_latency_seconds", exp2Buckets(27, 1e-6), 150, 500e-6, 1.2, [2]string{"device", "nvme0n1"}, [2]string{"operation", "write"}),
		h("ebpf_exporter_accept_latency_seconds", exp2Buckets(26, 1e-6), 20, 50e-6, 1.5, [2]string{"port", "8000"}),
	}}
}
