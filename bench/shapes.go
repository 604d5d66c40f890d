package bench

import (
	"fmt"
	"math"

	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/strata-dev/strata/dcgmbridge"
)

// This file holds what the generator emits: a subset of the families of
// dcgm-exporter, vLLM V1 and ebpf_exporter, whose names, types, HELP, label
// names and bucket edges come from the metric catalogue (dcgmbridge's
// exposition shapes, the ones the simulator renders too), and value models
// that make compression realistic: gauges drift and jitter, counters grow by
// Poisson amounts, histograms fill their buckets from a log-normal latency
// distribution.
//
// RW 2.0 metadata carries the HELP of the DCGM families and of the vLLM
// gauges, and the unit "seconds" of the histograms; the other families go
// without, as in the runs docs/bench.md reports (the metadata is part of each
// request's size).

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

// family is one metric family of a shape: its name, kind and buckets from the
// catalogue, the metadata sent with it, and its value model.
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

// kindOf maps a family's TYPE onto the generator's kinds.
func kindOf(f dcgmbridge.Family) (metricKind, error) {
	switch f.Type {
	case "gauge":
		return kindGauge, nil
	case "counter":
		return kindCounter, nil
	case "histogram":
		return kindHistogram, nil
	}
	return 0, fmt.Errorf("family %q: type %q", f.Name, f.Type)
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

// shapeBuilder takes the families of one exporter from the catalogue; the
// first family it cannot find is its error.
type shapeBuilder struct {
	exp dcgmbridge.Exposition
	err error
}

func newShapeBuilder(cat *dcgmbridge.Catalogue, src dcgmbridge.Source) *shapeBuilder {
	exp, ok := cat.Exposition(src)
	b := &shapeBuilder{exp: exp}
	if !ok {
		b.err = fmt.Errorf("the catalogue has no %s exposition", src)
	}
	return b
}

// family returns a generator family for the catalogue family name; help says
// whether its HELP goes into the metadata.
func (b *shapeBuilder) family(name string, help bool) *family {
	f, ok := b.exp.Family(name)
	if !ok && b.err == nil {
		b.err = fmt.Errorf("family %s is not in the catalogue's %s exposition", name, b.exp.Source)
	}
	k, err := kindOf(f)
	if err != nil && b.err == nil {
		b.err = err
	}
	out := &family{name: f.Name, kind: k, bounds: f.Buckets}
	if help {
		out.help = f.Help
	}
	if k == kindHistogram {
		out.unit = "seconds"
	}
	return out
}

// newShapes builds the three shapes. They are built fresh per generator
// because prepare writes derived fields.
func newShapes(cat *dcgmbridge.Catalogue) ([]*shape, error) {
	var out []*shape
	for _, build := range []func(*dcgmbridge.Catalogue) (*shape, error){dcgmShape, vllmShape, ebpfShape} {
		s, err := build(cat)
		if err != nil {
			return nil, fmt.Errorf("bench shapes: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}

func dcgmShape(cat *dcgmbridge.Catalogue) (*shape, error) {
	b := newShapeBuilder(cat, dcgmbridge.SourceDCGM)
	g := func(name string, m gaugeModel) *family {
		f := b.family(name, true)
		f.gauge = m
		return f
	}
	c := func(name string, rate float64) *family {
		f := b.family(name, true)
		f.rate = rate
		return f
	}
	s := &shape{name: "dcgm", families: []*family{
		g("DCGM_FI_DEV_SM_CLOCK", gaugeModel{1410, 1980, 15, 0, 0}),
		g("DCGM_FI_DEV_MEM_CLOCK", gaugeModel{2619, 2619, 0, 0, 0}),
		g("DCGM_FI_DEV_MEMORY_TEMP", gaugeModel{35, 85, 0.3, 0.4, 0}),
		g("DCGM_FI_DEV_GPU_TEMP", gaugeModel{30, 85, 0.3, 0.4, 0}),
		g("DCGM_FI_DEV_POWER_USAGE", gaugeModel{70, 700, 8, 12, 3}),
		g("DCGM_FI_DEV_GPU_UTIL", gaugeModel{0, 100, 3, 4, 0}),
		g("DCGM_FI_DEV_MEM_COPY_UTIL", gaugeModel{0, 100, 2, 3, 0}),
		g("DCGM_FI_DEV_FB_FREE", gaugeModel{1000, 80000, 50, 0, 0}),
		g("DCGM_FI_DEV_FB_USED", gaugeModel{1000, 80000, 50, 0, 0}),
		g("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gaugeModel{0, 1, 0.02, 0.03, 6}),
		g("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gaugeModel{0, 1, 0.02, 0.03, 6}),
		g("DCGM_FI_PROF_DRAM_ACTIVE", gaugeModel{0, 1, 0.02, 0.03, 6}),
		g("DCGM_FI_PROF_PCIE_TX_BYTES", gaugeModel{0, 2e9, 2e7, 5e7, 0}),
		g("DCGM_FI_PROF_PCIE_RX_BYTES", gaugeModel{0, 2e9, 2e7, 5e7, 0}),
		c("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 400000),
		c("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0.001),
	}}
	return s, b.err
}

func vllmShape(cat *dcgmbridge.Catalogue) (*shape, error) {
	b := newShapeBuilder(cat, dcgmbridge.SourceVLLMV1)
	g := func(name string, m gaugeModel) *family {
		f := b.family(name, true)
		f.gauge = m
		return f
	}
	h := func(name string, rate, median, sigma float64) *family {
		f := b.family(name, false)
		f.rate, f.mu, f.sigma = rate, lognormalMedian(median), sigma
		return f
	}
	c := func(name string, rate float64, extra ...[2]string) *family {
		f := b.family(name, false)
		f.rate, f.extra = rate, extra
		return f
	}
	s := &shape{name: "vllm", families: []*family{
		g("vllm:num_requests_running", gaugeModel{0, 256, 4, 2, 0}),
		g("vllm:num_requests_waiting", gaugeModel{0, 50, 1, 1, 0}),
		g("vllm:kv_cache_usage_perc", gaugeModel{0, 1, 0.01, 0.005, -1}),
		c("vllm:prompt_tokens_total", 2000),
		c("vllm:generation_tokens_total", 600),
		c("vllm:num_preemptions_total", 0.05),
		c("vllm:prefix_cache_queries_total", 2000),
		c("vllm:prefix_cache_hits_total", 900),
		c("vllm:request_success_total", 4, [2]string{"finished_reason", "stop"}),
		c("vllm:request_success_total", 0.5, [2]string{"finished_reason", "length"}),
		c("vllm:request_success_total", 0.05, [2]string{"finished_reason", "abort"}),
		h("vllm:time_to_first_token_seconds", 4, 0.15, 1.0),
		h("vllm:inter_token_latency_seconds", 600, 0.03, 0.5),
		h("vllm:e2e_request_latency_seconds", 4, 8, 0.8),
		h("vllm:request_queue_time_seconds", 4, 0.05, 1.5),
	}}
	return s, b.err
}

func ebpfShape(cat *dcgmbridge.Catalogue) (*shape, error) {
	b := newShapeBuilder(cat, dcgmbridge.SourceEBPF)
	h := func(name string, rate, median, sigma float64, extra ...[2]string) *family {
		f := b.family(name, false)
		f.rate, f.mu, f.sigma, f.extra = rate, lognormalMedian(median), sigma, extra
		return f
	}
	s := &shape{name: "ebpf", families: []*family{
		h("ebpf_exporter_bio_latency_seconds", 300, 200e-6, 1.2, [2]string{"device", "nvme0n1"}, [2]string{"operation", "read"}),
		h("ebpf_exporter_bio_latency_seconds", 150, 500e-6, 1.2, [2]string{"device", "nvme0n1"}, [2]string{"operation", "write"}),
		h("ebpf_exporter_accept_latency_seconds", 20, 50e-6, 1.5, [2]string{"port", "8000"}),
	}}
	return s, b.err
}
