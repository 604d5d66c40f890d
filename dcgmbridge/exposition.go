package dcgmbridge

import (
	"fmt"
	"math"
	"slices"
)

// Family is the shape of one metric family as its exporter exposes it: the
// name and what its HELP and TYPE lines say, the label names of its series
// and a histogram's bucket edges. The simulator (package sim) renders these
// shapes and the load generator (package bench) sends them, so each family is
// defined once, here; NewCatalogue checks every family's type against the
// catalogue's entries for the name.
type Family struct {
	Name string
	// Type is the TYPE line's word: counter, gauge or histogram.
	Type string
	Help string
	// Labels are the label names of the family's series, sorted, without le
	// and without the exporter's optional labels (Exposition.Optional).
	Labels []string
	// Buckets are a histogram's upper bucket edges, ascending, without +Inf.
	Buckets []float64
}

// Exposition is everything one exporter exposes: its families in the order
// the exporter prints them.
type Exposition struct {
	Source Source
	// Optional are labels the exporter adds to some series only:
	// dcgm-exporter's Kubernetes attribution of a GPU to the pod using it.
	Optional []string
	Families []Family
}

// Family returns the family named name.
func (e Exposition) Family(name string) (Family, bool) {
	for _, f := range e.Families {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

// Exposition returns the exposition of src: vLLM V1 (0.11/0.12 names,
// max_model_len 32768), vLLM V0, dcgm-exporter (every field the simulator
// knows: the default-counters.csv set, then the profiling fields a custom CSV
// enables, then the throttling fields) or ebpf_exporter (the example configs
// accept-latency, biolatency, softirq-latency-net-rx and tcp-retransmit).
// The second result is false for a source without one.
func (c *Catalogue) Exposition(src Source) (Exposition, bool) {
	for _, e := range c.expositions {
		if e.Source == src {
			return cloneExposition(e), true
		}
	}
	return Exposition{}, false
}

// cloneExposition returns a deep copy, so a caller cannot change the
// catalogue's tables.
func cloneExposition(e Exposition) Exposition {
	e.Optional = slices.Clone(e.Optional)
	fams := make([]Family, len(e.Families))
	for i, f := range e.Families {
		f.Labels = slices.Clone(f.Labels)
		f.Buckets = slices.Clone(f.Buckets)
		fams[i] = f
	}
	e.Families = fams
	return e
}

// expositions builds the exporters' shapes; DCGM families take their type
// from the field table.
func (c *Catalogue) buildExpositions() ([]Exposition, error) {
	dcgm, err := c.dcgmExposition()
	if err != nil {
		return nil, err
	}
	out := []Exposition{vllmV1Exposition(), vllmV0Exposition(), dcgm, ebpfExposition()}
	for _, e := range out {
		for _, f := range e.Families {
			if err := c.checkFamily(f); err != nil {
				return nil, fmt.Errorf("%s exposition: %w", e.Source, err)
			}
		}
	}
	return out, nil
}

// checkFamily reports a family whose type differs from the catalogue's
// entries for its name.
func (c *Catalogue) checkFamily(f Family) error {
	if fd, ok := c.FieldByName(f.Name); ok && fd.Type != f.Type {
		return fmt.Errorf("family %s is a %s, DCGM field %d a %s", f.Name, f.Type, fd.ID, fd.Type)
	}
	for _, m := range c.Metrics {
		if m.Name == f.Name && m.Type != f.Type {
			return fmt.Errorf("family %s is a %s, the catalogue's %s entry a %s", f.Name, f.Type, m.Source, m.Type)
		}
	}
	return nil
}

// VLLMTokenBuckets is vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10,
// 20, 50, ... up to the largest value not above maxValue, the edges of its
// token-count histograms.
func VLLMTokenBuckets(maxValue float64) []float64 {
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

// Exp2Buckets is ebpf_exporter's exp2 bucket type: le = 2^i * multiplier for
// i in [minExp, maxExp] (bucket_min, bucket_max and bucket_multiplier of its
// configs).
func Exp2Buckets(minExp, maxExp int, multiplier float64) []float64 {
	out := make([]float64, 0, maxExp-minExp+1)
	for i := minExp; i <= maxExp; i++ {
		out = append(out, math.Ldexp(1, i)*multiplier)
	}
	return out
}

// withLabels returns sorted label names: base plus extra.
func withLabels(base []string, extra ...string) []string {
	out := append(slices.Clone(base), extra...)
	slices.Sort(out)
	return out
}

// vllmV1Exposition is vLLM V1's exposition (vllm/v1/metrics/loggers.py and
// vllm/v1/spec_decode/metrics.py, 0.11/0.12 era, https://github.com/vllm-project/vllm),
// with max_model_len 32768. time_per_output_token_seconds is shown only with
// --show-hidden-metrics-for-version=0.11 on 0.12.
func vllmV1Exposition() Exposition {
	base := []string{"engine", "model_name"}
	g := func(name, help string, extra ...string) Family {
		return Family{Name: name, Type: "gauge", Help: help, Labels: withLabels(base, extra...)}
	}
	c := func(name, help string, extra ...string) Family {
		return Family{Name: name, Type: "counter", Help: help, Labels: withLabels(base, extra...)}
	}
	h := func(name, help string, buckets []float64) Family {
		return Family{Name: name, Type: "histogram", Help: help, Labels: withLabels(base), Buckets: buckets}
	}
	tokens := VLLMTokenBuckets(32768)
	ttft := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itl := []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	latency := []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	return Exposition{Source: SourceVLLMV1, Families: []Family{
		g("vllm:num_requests_running", "Number of requests in model execution batches."),
		g("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		g("vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.", "sleep_state"),
		g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		c("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		c("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		c("vllm:external_prefix_cache_queries_total", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens."),
		c("vllm:external_prefix_cache_hits_total", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens."),
		c("vllm:mm_cache_queries_total", "Multi-modal cache queries, in terms of number of queried items."),
		c("vllm:mm_cache_hits_total", "Multi-modal cache hits, in terms of number of cached items."),
		c("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
		c("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		c("vllm:generation_tokens_total", "Number of generation tokens processed."),
		c("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason"),
		h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens),
		h("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens),
		h("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}),
		h("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", tokens),
		h("vllm:request_params_n", "Histogram of the n request parameter.", []float64{1, 2, 5, 10, 20}),
		h("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens),
		h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft),
		h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl),
		h("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.", itl),
		h("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itl),
		h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latency),
		h("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", latency),
		h("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", latency),
		h("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", latency),
		h("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", latency),
		c("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts."),
		c("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens."),
		c("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens."),
		c("vllm:spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position.", "position"),
		{Name: "vllm:cache_config_info", Type: "gauge", Help: "Information of the LLMEngine CacheConfig", Labels: withLabels(nil,
			"block_size", "cache_dtype", "calculate_kv_scales", "cpu_offload_gb", "enable_prefix_caching", "engine",
			"gpu_memory_utilization", "is_attention_free", "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
			"prefix_caching_hash_algo", "sliding_window", "swap_space", "swap_space_bytes")},
	}}
}

// vllmV0Exposition is the legacy V0 engine's exposition (vllm/engine/metrics.py,
// https://github.com/vllm-project/vllm): the old names and shorter latency
// buckets, and no engine label. The HELP typo "Speulative" is vLLM's.
func vllmV0Exposition() Exposition {
	base := []string{"model_name"}
	g := func(name, help string) Family {
		return Family{Name: name, Type: "gauge", Help: help, Labels: withLabels(base)}
	}
	c := func(name, help string, extra ...string) Family {
		return Family{Name: name, Type: "counter", Help: help, Labels: withLabels(base, extra...)}
	}
	h := func(name, help string, buckets []float64) Family {
		return Family{Name: name, Type: "histogram", Help: help, Labels: withLabels(base), Buckets: buckets}
	}
	return Exposition{Source: SourceVLLMV0, Families: []Family{
		g("vllm:num_requests_running", "Number of requests currently running on GPU."),
		g("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		g("vllm:num_requests_swapped", "Number of requests swapped to CPU."),
		g("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage."),
		g("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage."),
		g("vllm:spec_decode_draft_acceptance_rate", "Speulative token acceptance rate."),
		g("vllm:spec_decode_efficiency", "Speculative decoding system efficiency."),
		g("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s."),
		g("vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s."),
		c("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
		c("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		c("vllm:generation_tokens_total", "Number of generation tokens processed."),
		c("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens."),
		c("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens."),
		c("vllm:spec_decode_num_emitted_tokens_total", "Number of emitted tokens."),
		c("vllm:request_success_total", "Count of successfully processed requests.", "finished_reason"),
		h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}),
		h("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}),
		h("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", []float64{1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}),
	}}
}

// dcgmExposition is dcgm-exporter's exposition (etc/default-counters.csv and
// internal/pkg/rendermetrics, https://github.com/NVIDIA/dcgm-exporter): every
// field family has the same labels, XID_ERRORS adds err_code and err_msg, and
// a GPU attributed to a pod also gets container, namespace and pod. Types come
// from the field table.
func (c *Catalogue) dcgmExposition() (Exposition, error) {
	base := []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
	fields := []struct{ name, help string }{
		// default-counters.csv, in its order.
		{"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."},
		{"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."},
		{"DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C)."},
		{"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."},
		{"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ)."},
		{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries."},
		{"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."},
		{"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."},
		{"DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %)."},
		{"DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %)."},
		{"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."},
		{"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."},
		{"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."},
		{"DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB)."},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total number of NVLink bandwidth counters for all lanes."},
		{"DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU License status"},
		{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors"},
		{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors"},
		{"DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed"},
		{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."},
		{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active."},
		{"DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data."},
		{"DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second."},
		{"DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second."},
		// Profiling fields a custom CSV enables.
		{"DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned."},
		{"DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM."},
		{"DCGM_FI_PROF_NVLINK_TX_BYTES", "The total number of bytes of active NvLink tx (transmit) data including both header and payload."},
		{"DCGM_FI_PROF_NVLINK_RX_BYTES", "The total number of bytes of active NvLink rx (read) data including both header and payload."},
		// Throttling fields.
		{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*)."},
		{"DCGM_FI_DEV_POWER_VIOLATION", "Throttling duration due to power constraints (in ns)."},
		{"DCGM_FI_DEV_THERMAL_VIOLATION", "Throttling duration due to thermal constraints (in ns)."},
	}
	e := Exposition{Source: SourceDCGM, Optional: []string{"container", "namespace", "pod"}}
	for _, fd := range fields {
		f, ok := c.FieldByName(fd.name)
		if !ok {
			return Exposition{}, fmt.Errorf("dcgm-exporter family %s is not a known DCGM field", fd.name)
		}
		lbls := withLabels(base)
		if fd.name == "DCGM_FI_DEV_XID_ERRORS" {
			lbls = withLabels(base, "err_code", "err_msg")
		}
		e.Families = append(e.Families, Family{Name: fd.name, Type: f.Type, Help: fd.help, Labels: lbls})
	}
	return e, nil
}

// ebpfExposition is ebpf_exporter's exposition for the example configs
// accept-latency, biolatency, softirq-latency-net-rx and tcp-retransmit
// (https://github.com/cloudflare/ebpf_exporter, examples/), in
// client_golang's order (sorted by name). Every name gets the exporter's
// ebpf_exporter_ prefix.
func ebpfExposition() Exposition {
	return Exposition{Source: SourceEBPF, Families: []Family{
		{Name: "ebpf_exporter_accept_latency_seconds", Type: "histogram", Help: "Latency histogram for how long sockets sit in accept queue", Labels: []string{"port"}, Buckets: Exp2Buckets(0, 26, 1e-6)},
		{Name: "ebpf_exporter_bio_latency_seconds", Type: "histogram", Help: "Block IO latency histogram", Labels: []string{"device", "operation"}, Buckets: Exp2Buckets(0, 27, 1e-6)},
		{Name: "ebpf_exporter_enabled_configs", Type: "gauge", Help: "The set of enabled configs", Labels: []string{"name"}},
		{Name: "ebpf_exporter_softirq_raised_total", Type: "counter", Help: "Total number of times NET_RX softirq were raised"},
		{Name: "ebpf_exporter_softirq_serviced_total", Type: "counter", Help: "Total number of times NET_RX softirq were serviced"},
		{Name: "ebpf_exporter_softirq_wait_seconds", Type: "histogram", Help: "Latency histogram for how long it takes from NET_RX softirq raise to entry aka wait time", Buckets: Exp2Buckets(0, 31, 1e-9)},
		{Name: "ebpf_exporter_tcp_retransmit_ipv4_packets_total", Type: "counter", Help: "Total count of IPv4 TCP retransmissions", Labels: []string{"local_ip", "main_port", "peer_ip", "type"}},
	}}
}
