package dcgmbridge

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Level says which label set a canonical series is aggregated to: the join
// configuration (rulegen.Joins) gives the labels of each level.
type Level string

// The aggregation levels.
const (
	LevelGPU     Level = "gpu"     // one series per GPU (DCGM)
	LevelServing Level = "serving" // one series per serving instance and model (vLLM, SGLang, TGI, Triton)
	LevelHost    Level = "host"    // one series per host (eBPF exporters)
)

// TermKind is the recipe that turns one source metric into a canonical value;
// package rulegen renders each kind into PromQL.
type TermKind int

// The recipes.
const (
	// TermGauge aggregates a gauge (Agg by level) and divides it by Scale.
	TermGauge TermKind = iota
	// TermRate is the per-second rate of a counter, summed by level.
	TermRate
	// TermRatio is rate(Metric{Match}) / sum of rate(Den...), divided by Scale.
	TermRatio
	// TermQuantile is histogram_quantile(Quantile) over buckets summed by level.
	TermQuantile
	// TermSparseQuantile computes the quantile per series and keeps the worst:
	// bpftrace_exporter emits a different le set per series, so buckets of
	// different series must never be summed.
	TermSparseQuantile
	// TermHistMean is rate(_sum) / rate(_count) of a histogram.
	TermHistMean
	// TermFieldsRate sums the per-second rates of several DCGM counters
	// (FieldIDs), divided by Scale and clamped to 1.
	TermFieldsRate
	// TermClockEventBits is 1 when the DCGM clock-event-reason bitmask has a
	// power or thermal slowdown bit set.
	TermClockEventBits
	// TermJoin projects a GPU-level canonical series (Metric) onto the serving
	// series of Den[0], joined by the join labels.
	TermJoin
	// TermResidual is Metric minus the sum of the Den canonical series
	// (clamped at 0): the part of end-to-end latency no component explains.
	TermResidual
)

// Term is one way of computing a canonical series from one source. A canonical
// metric's terms are joined with `or on(level labels)`, so the first term that
// yields a value for a label set wins: that is how a fallback chain and a
// version rename are both expressed.
type Term struct {
	Source Source
	Kind   TermKind
	// Metric is the exposed metric (histogram family name for quantiles), or the
	// canonical series for TermJoin and TermResidual.
	Metric string
	// FieldIDs select DCGM fields by ID (every spelling of the field matches).
	FieldIDs []int
	// Match is extra label matchers for Metric, e.g. finished_reason="abort".
	Match string
	// Den are the denominator metrics of a ratio, summed.
	Den      []string
	Scale    float64
	Agg      string
	Quantile float64
	// Tag, when set, is written to the strata_source label, so a reader can tell
	// which link of a fallback chain produced the value (degraded confidence).
	Tag string
	// StuckGuard drops a DCGM profiling value of 0 while GPU_UTIL (field 203) is
	// above 50%: profiling fields can get stuck at 0 (dcgm-exporter #662).
	StuckGuard bool
	Versions   string
	Unit       string
	Note       string
}

// DisplayName is the series name with its fixed labels, as the docs show it.
func (cm CanonicalMetric) DisplayName() string {
	if len(cm.Labels) == 0 {
		return cm.Name
	}
	keys := slices.Sorted(maps.Keys(cm.Labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, cm.Labels[k])
	}
	return cm.Name + "{" + strings.Join(parts, ",") + "}"
}

// sourceType is the Prometheus type the term reads.
func (t Term) sourceType() string {
	switch t.Kind {
	case TermGauge, TermClockEventBits:
		return "gauge"
	case TermQuantile, TermSparseQuantile, TermHistMean:
		return "histogram"
	default:
		return "counter"
	}
}

// CanonicalMetric is one series of Strata's canonical model, recorded by a
// Prometheus recording rule. The diagnosis rules read these names only, so an
// upstream rename is one Term in this table.
type CanonicalMetric struct {
	Name  string
	Help  string
	Unit  string
	Cause Cause
	Felt  Felt
	Level Level
	// Labels are fixed labels the rule adds (the latency component).
	Labels map[string]string
	// Fallback documents the chain of Terms in words.
	Fallback string
	Terms    []Term
}

// FieldGPUUtil is DCGM_FI_DEV_GPU_UTIL, which a Term's StuckGuard compares
// against.
const FieldGPUUtil = 203

const (
	fieldMemCopyUtil      = 204
	fieldClockEvents      = 112
	fieldPowerViolation   = 240
	fieldThermalViolation = 241
	fieldGREngineActive   = 1001
	fieldSMActive         = 1002
	fieldDRAMActive       = 1005
)

func histQuantile(src Source, name string, q float64, versions, note string) Term {
	return Term{Source: src, Kind: TermQuantile, Metric: name, Quantile: q, Versions: versions, Unit: "seconds", Note: note}
}

func latencyQuantile(name, help string, q float64, cause Cause, families []Term) CanonicalMetric {
	terms := make([]Term, len(families))
	for i, f := range families {
		f.Quantile = q
		terms[i] = f
	}
	return CanonicalMetric{Name: name, Help: help, Unit: "seconds", Cause: cause, Felt: FeltLatency, Level: LevelServing, Terms: terms}
}

func ttftFamilies() []Term {
	return []Term{
		histQuantile(SourceVLLMV1, "vllm:time_to_first_token_seconds", 0, "all (V0 buckets end at 10 s)", ""),
		histQuantile(SourceSGLang, "sglang:time_to_first_token_seconds", 0, "all", ""),
		histQuantile(SourceTRTLLM, "trtllm_time_to_first_token_seconds", 0, "all", "name seen only in third-party tables"),
	}
}

func tpotFamilies() []Term {
	return []Term{
		histQuantile(SourceVLLMV1, "vllm:request_time_per_output_token_seconds", 0, "0.12+", "per-request mean TPOT; preferred"),
		histQuantile(SourceVLLMV1, "vllm:inter_token_latency_seconds", 0, "0.11+", "per-token observations"),
		histQuantile(SourceVLLMV0, "vllm:time_per_output_token_seconds", 0, "V0 - 0.12 (hidden), removed 0.13", "deprecated in 0.11"),
		histQuantile(SourceSGLang, "sglang:inter_token_latency_seconds", 0, "all", ""),
		histQuantile(SourceTGI, "tgi_request_mean_time_per_token_duration", 0, "all", "per-request mean; seconds without unit suffix"),
	}
}

func e2eFamilies() []Term {
	return []Term{
		histQuantile(SourceVLLMV1, "vllm:e2e_request_latency_seconds", 0, "all (V0 buckets end at 60 s)", ""),
		histQuantile(SourceSGLang, "sglang:e2e_request_latency_seconds", 0, "all", ""),
		histQuantile(SourceTGI, "tgi_request_duration", 0, "all", "seconds without unit suffix"),
	}
}

func queueFamilies() []Term {
	return []Term{
		histQuantile(SourceVLLMV1, "vllm:request_queue_time_seconds", 0, "V1 0.8+", "time in WAITING: the backlog signal"),
		histQuantile(SourceSGLang, "sglang:queue_time_seconds", 0, "all", ""),
		histQuantile(SourceTGI, "tgi_request_queue_duration", 0, "all", "seconds without unit suffix"),
	}
}

func histMean(src Source, name, versions, note string) Term {
	return Term{Source: src, Kind: TermHistMean, Metric: name, Versions: versions, Unit: "seconds", Note: note}
}

// canonicalMetrics is the canonical model. Order matters: rules are evaluated in
// this order within one group, so a join or residual comes after its inputs.
func canonicalMetrics() []CanonicalMetric {
	return []CanonicalMetric{
		// GPU level (DCGM).
		{
			Name: "strata:gpu_sm_active:ratio", Help: "Fraction of cycles in which an SM has at least one warp assigned (0-1).",
			Unit: "ratio", Cause: CauseCompute, Felt: FeltUtilisation, Level: LevelGPU,
			Fallback: "PROF_SM_ACTIVE (1002, off by default) -> PROF_GR_ENGINE_ACTIVE (1001) -> DEV_GPU_UTIL (203) / 100; strata_source names the link used. A profiling value of 0 while GPU_UTIL > 50% is taken as stuck (dcgm-exporter #662) and skipped. GPU_UTIL reads 100% as soon as any kernel runs: low confidence.",
			Terms: []Term{
				{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{fieldSMActive}, Agg: "avg", Tag: "sm_active", StuckGuard: true, Versions: "custom CSV only", Unit: "ratio"},
				{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{fieldGREngineActive}, Agg: "avg", Tag: "gr_engine_active", StuckGuard: true, Versions: "default CSV", Unit: "ratio"},
				{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{FieldGPUUtil}, Agg: "avg", Scale: 100, Tag: "gpu_util", Versions: "default CSV", Unit: "percent", Note: "DCGM 4.6 spelling GPU_UTIL_RATIO is assumed to keep the 0-100 scale of the exporter help text (unverified)"},
			},
		},
		{
			Name: "strata:gpu_memory_bandwidth_active:ratio", Help: "Fraction of cycles the device memory interface is busy (0-1).",
			Unit: "ratio", Cause: CauseMemory, Felt: FeltUtilisation, Level: LevelGPU,
			Fallback: "PROF_DRAM_ACTIVE (1005; skipped when stuck at 0 while GPU_UTIL > 50%) -> DEV_MEM_COPY_UTIL (204) / 100.",
			Terms: []Term{
				{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{fieldDRAMActive}, Agg: "avg", Tag: "dram_active", StuckGuard: true, Versions: "default CSV", Unit: "ratio"},
				{Source: SourceDCGM, Kind: TermGauge, FieldIDs: []int{fieldMemCopyUtil}, Agg: "avg", Scale: 100, Tag: "mem_copy_util", Versions: "default CSV", Unit: "percent"},
			},
		},
		{
			Name: "strata:gpu_throttled:ratio", Help: "Fraction of time the GPU clocks were held down by a power or thermal limit (0-1).",
			Unit: "ratio", Cause: CauseCompute, Felt: FeltThroughput, Level: LevelGPU,
			Fallback: "rate(POWER_VIOLATION 240 + THERMAL_VIOLATION 241, ns) / 1e9 -> CLOCKS_EVENT_REASONS (112) power/thermal bits set (0 or 1). Both are off in the default CSV.",
			Terms: []Term{
				{Source: SourceDCGM, Kind: TermFieldsRate, FieldIDs: []int{fieldPowerViolation, fieldThermalViolation}, Scale: 1e9, Tag: "violation_counters", Versions: "custom CSV", Unit: "nanoseconds"},
				{Source: SourceDCGM, Kind: TermClockEventBits, FieldIDs: []int{fieldClockEvents}, Tag: "clock_event_reasons", Versions: "custom CSV", Unit: "bitmask", Note: "bits SW_POWER_CAP 0x4, HW_SLOWDOWN 0x8, SW_THERMAL 0x20, HW_THERMAL 0x40, HW_POWER_BRAKE 0x80"},
			},
		},
		// Serving level.
		latencyQuantile("strata:ttft_seconds:p50", "Median time to first token.", 0.5, CauseScheduling, ttftFamilies()),
		latencyQuantile("strata:ttft_seconds:p99", "99th percentile time to first token.", 0.99, CauseScheduling, ttftFamilies()),
		latencyQuantile("strata:tpot_seconds:p99", "99th percentile time per output token (decode speed).", 0.99, CauseCompute, tpotFamilies()),
		latencyQuantile("strata:e2e_latency_seconds:p99", "99th percentile end-to-end request latency.", 0.99, CauseScheduling, e2eFamilies()),
		latencyQuantile("strata:queue_time_seconds:p99", "99th percentile time a request waits before it is scheduled.", 0.99, CauseScheduling, queueFamilies()),
		{
			Name: "strata:e2e_latency_seconds:mean", Help: "Mean end-to-end request latency: the total the latency components stack up to.",
			Unit: "seconds", Cause: CauseScheduling, Felt: FeltLatency, Level: LevelServing,
			Terms: []Term{
				histMean(SourceVLLMV1, "vllm:e2e_request_latency_seconds", "all", ""),
				histMean(SourceSGLang, "sglang:e2e_request_latency_seconds", "all", ""),
				histMean(SourceTGI, "tgi_request_duration", "all", ""),
				{Source: SourceTriton, Kind: TermRatio, Metric: "nv_inference_request_duration_us", Den: []string{"nv_inference_request_success", "nv_inference_request_failure"}, Scale: 1e6, Versions: "all", Unit: "microseconds", Note: "cumulative microsecond counter, not a histogram"},
			},
		},
		{
			Name: "strata:latency_seconds:component", Labels: map[string]string{"component": "queue"},
			Help: "Mean time per request spent waiting in the queue (latency decomposition).",
			Unit: "seconds", Cause: CauseScheduling, Felt: FeltLatency, Level: LevelServing,
			Terms: []Term{
				histMean(SourceVLLMV1, "vllm:request_queue_time_seconds", "V1 0.8+", ""),
				histMean(SourceSGLang, "sglang:queue_time_seconds", "all", ""),
				histMean(SourceTGI, "tgi_request_queue_duration", "all", ""),
				{Source: SourceTriton, Kind: TermRatio, Metric: "nv_inference_queue_duration_us", Den: []string{"nv_inference_request_success", "nv_inference_request_failure"}, Scale: 1e6, Versions: "all", Unit: "microseconds", Note: "cumulative microsecond counter"},
			},
		},
		{
			Name: "strata:latency_seconds:component", Labels: map[string]string{"component": "prefill"},
			Help: "Mean time per request spent in prefill (latency decomposition).",
			Unit: "seconds", Cause: CauseCompute, Felt: FeltLatency, Level: LevelServing,
			Terms: []Term{
				histMean(SourceVLLMV1, "vllm:request_prefill_time_seconds", "V1 0.9+", ""),
			},
		},
		{
			Name: "strata:latency_seconds:component", Labels: map[string]string{"component": "decode"},
			Help: "Mean time per request spent in decode (latency decomposition).",
			Unit: "seconds", Cause: CauseCompute, Felt: FeltLatency, Level: LevelServing,
			Terms: []Term{
				histMean(SourceVLLMV1, "vllm:request_decode_time_seconds", "V1 0.9+", ""),
			},
		},
		{
			Name: "strata:latency_seconds:component", Labels: map[string]string{"component": "other"},
			Help: "Mean end-to-end latency not explained by queue, prefill and decode (API server, detokenisation), so the components stack up to strata:e2e_latency_seconds:mean.",
			Unit: "seconds", Cause: CauseScheduling, Felt: FeltLatency, Level: LevelServing,
			Terms: []Term{
				{Kind: TermResidual, Metric: "strata:e2e_latency_seconds:mean", Den: []string{`strata:latency_seconds:component{component=~"queue|prefill|decode"}`}},
			},
		},
		{
			Name: "strata:requests_waiting", Help: "Requests waiting to be scheduled.",
			Unit: "requests", Cause: CauseScheduling, Felt: FeltLatency, Level: LevelServing,
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermGauge, Metric: "vllm:num_requests_waiting", Agg: "sum", Versions: "all", Unit: "requests"},
				{Source: SourceSGLang, Kind: TermGauge, Metric: "sglang:num_queue_reqs", Agg: "sum", Versions: "all", Unit: "requests"},
				{Source: SourceTGI, Kind: TermGauge, Metric: "tgi_queue_size", Agg: "sum", Versions: "all", Unit: "requests"},
				{Source: SourceTriton, Kind: TermGauge, Metric: "nv_inference_pending_request_count", Agg: "sum", Versions: "all", Unit: "requests"},
				{Source: SourceTRTLLM, Kind: TermGauge, Metric: "trtllm_num_requests_waiting", Agg: "sum", Versions: "all", Unit: "requests"},
			},
		},
		{
			Name: "strata:requests_running", Help: "Requests in the running batch.",
			Unit: "requests", Cause: CauseScheduling, Felt: FeltUtilisation, Level: LevelServing,
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermGauge, Metric: "vllm:num_requests_running", Agg: "sum", Versions: "all", Unit: "requests"},
				{Source: SourceSGLang, Kind: TermGauge, Metric: "sglang:num_running_reqs", Agg: "sum", Versions: "all", Unit: "requests"},
				{Source: SourceTGI, Kind: TermGauge, Metric: "tgi_batch_current_size", Agg: "sum", Versions: "all", Unit: "requests"},
				{Source: SourceTRTLLM, Kind: TermGauge, Metric: "trtllm_num_requests_running", Agg: "sum", Versions: "all", Unit: "requests"},
			},
		},
		{
			Name: "strata:requests:rate", Help: "Finished requests per second.",
			Unit: "requests_per_second", Cause: CauseScheduling, Felt: FeltThroughput, Level: LevelServing,
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermRate, Metric: "vllm:request_success_total", Versions: "all", Unit: "requests", Note: "all finished_reason values"},
				{Source: SourceSGLang, Kind: TermRate, Metric: "sglang:num_requests_total", Versions: "all", Unit: "requests"},
				{Source: SourceTGI, Kind: TermRate, Metric: "tgi_request_count", Versions: "all", Unit: "requests"},
				{Source: SourceTriton, Kind: TermRate, Metric: "nv_inference_request_success", Versions: "all", Unit: "requests"},
			},
		},
		{
			Name: "strata:generation_tokens:rate", Help: "Generated (decode) tokens per second.",
			Unit: "tokens_per_second", Cause: CauseCompute, Felt: FeltThroughput, Level: LevelServing,
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermRate, Metric: "vllm:generation_tokens_total", Versions: "all", Unit: "tokens"},
				{Source: SourceSGLang, Kind: TermRate, Metric: "sglang:generation_tokens_total", Versions: "all", Unit: "tokens"},
				{Source: SourceTGI, Kind: TermRate, Metric: "tgi_request_generated_tokens_sum", Versions: "all", Unit: "tokens", Note: "_sum of the per-request histogram"},
			},
		},
		{
			Name: "strata:prompt_tokens:rate", Help: "Prompt (prefill) tokens per second.",
			Unit: "tokens_per_second", Cause: CauseCompute, Felt: FeltThroughput, Level: LevelServing,
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermRate, Metric: "vllm:prompt_tokens_total", Versions: "all", Unit: "tokens"},
				{Source: SourceSGLang, Kind: TermRate, Metric: "sglang:prompt_tokens_total", Versions: "all", Unit: "tokens"},
				{Source: SourceTGI, Kind: TermRate, Metric: "tgi_request_input_length_sum", Versions: "all", Unit: "tokens", Note: "_sum of the per-request histogram"},
			},
		},
		{
			Name: "strata:request_errors:ratio", Help: "Fraction of finished requests that were aborted or failed.",
			Unit: "ratio", Cause: CauseScheduling, Felt: FeltQuality, Level: LevelServing,
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermRatio, Metric: "vllm:request_success_total", Match: `finished_reason="abort"`, Den: []string{"vllm:request_success_total"}, Versions: "V1 (V0 has no abort reason)", Unit: "requests"},
				{Source: SourceSGLang, Kind: TermRatio, Metric: "sglang:num_aborted_requests_total", Den: []string{"sglang:num_requests_total"}, Versions: "all", Unit: "requests"},
				{Source: SourceTriton, Kind: TermRatio, Metric: "nv_inference_request_failure", Den: []string{"nv_inference_request_success", "nv_inference_request_failure"}, Versions: "all", Unit: "requests"},
			},
		},
		{
			Name: "strata:kv_cache_usage:ratio", Help: "KV-cache usage, 0-1 (the worst engine of the instance).",
			Unit: "ratio", Cause: CauseMemory, Felt: FeltUtilisation, Level: LevelServing,
			Fallback: "kv_cache_usage_perc (0.9+) -> gpu_cache_usage_perc (V0 - 0.10) -> SGLang token_usage -> TRT-LLM kv_cache_utilization.",
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermGauge, Metric: "vllm:kv_cache_usage_perc", Agg: "max", Versions: "0.9+", Unit: "ratio", Note: "a fraction despite the _perc suffix"},
				{Source: SourceVLLMV0, Kind: TermGauge, Metric: "vllm:gpu_cache_usage_perc", Agg: "max", Versions: "V0 - 0.10", Unit: "ratio", Note: "deprecated in 0.9"},
				{Source: SourceSGLang, Kind: TermGauge, Metric: "sglang:token_usage", Agg: "max", Versions: "all", Unit: "ratio"},
				{Source: SourceTRTLLM, Kind: TermGauge, Metric: "trtllm_kv_cache_utilization", Agg: "max", Versions: "all", Unit: "ratio"},
			},
		},
		{
			Name: "strata:prefix_cache_hit:ratio", Help: "Prefix-cache hit ratio over the rate window (0-1).",
			Unit: "ratio", Cause: CauseMemory, Felt: FeltLatency, Level: LevelServing,
			Fallback: "prefix_cache_hits/queries (tokens, 0.9+) -> gpu_prefix_cache_hits/queries (blocks, 0.8) -> V0 gauge gpu_prefix_cache_hit_rate -> SGLang cache_hit_rate.",
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermRatio, Metric: "vllm:prefix_cache_hits_total", Den: []string{"vllm:prefix_cache_queries_total"}, Versions: "0.9+", Unit: "tokens"},
				{Source: SourceVLLMV1, Kind: TermRatio, Metric: "vllm:gpu_prefix_cache_hits_total", Den: []string{"vllm:gpu_prefix_cache_queries_total"}, Versions: "0.8 (blocks)", Unit: "blocks", Note: "deprecated in 0.9"},
				{Source: SourceVLLMV0, Kind: TermGauge, Metric: "vllm:gpu_prefix_cache_hit_rate", Agg: "avg", Versions: "V0", Unit: "ratio"},
				{Source: SourceSGLang, Kind: TermGauge, Metric: "sglang:cache_hit_rate", Agg: "avg", Versions: "all", Unit: "ratio"},
			},
		},
		{
			Name: "strata:preemptions:rate", Help: "Requests preempted (KV-cache evictions) per second.",
			Unit: "per_second", Cause: CauseMemory, Felt: FeltLatency, Level: LevelServing,
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermRate, Metric: "vllm:num_preemptions_total", Versions: "all", Unit: "preemptions"},
				{Source: SourceSGLang, Kind: TermRate, Metric: "sglang:num_retracted_requests_total", Versions: "all", Unit: "requests"},
			},
		},
		{
			Name: "strata:spec_decode_acceptance:ratio", Help: "Speculative decoding: accepted draft tokens / proposed draft tokens (0-1).",
			Unit: "ratio", Cause: CauseCompute, Felt: FeltThroughput, Level: LevelServing,
			Fallback: "rate(accepted)/rate(draft) counters (V0 and V1) -> V0 gauge spec_decode_draft_acceptance_rate -> SGLang spec_accept_rate.",
			Terms: []Term{
				{Source: SourceVLLMV1, Kind: TermRatio, Metric: "vllm:spec_decode_num_accepted_tokens_total", Den: []string{"vllm:spec_decode_num_draft_tokens_total"}, Versions: "V0 and V1", Unit: "tokens"},
				{Source: SourceVLLMV0, Kind: TermGauge, Metric: "vllm:spec_decode_draft_acceptance_rate", Agg: "avg", Versions: "V0", Unit: "ratio", Note: "cumulative since start, not windowed"},
				{Source: SourceSGLang, Kind: TermGauge, Metric: "sglang:spec_accept_rate", Agg: "avg", Versions: "all", Unit: "ratio"},
			},
		},
		// Host level (eBPF).
		{
			Name: "strata:network_latency_seconds:p99", Help: "99th percentile time a connection waits in the accept queue, from eBPF.",
			Unit: "seconds", Cause: CauseNetwork, Felt: FeltLatency, Level: LevelHost,
			Fallback: "ebpf_exporter accept-latency (exp2 buckets; _sum may be 0, so only quantiles are used) -> extra histograms from rulegen.Config.NetworkHistograms (bpftrace_exporter sparse buckets: quantile per series, worst kept).",
			Terms: []Term{
				{Source: SourceEBPF, Kind: TermQuantile, Metric: "ebpf_exporter_accept_latency_seconds", Quantile: 0.99, Versions: "examples/accept-latency.yaml", Unit: "seconds", Note: "exp2 buckets 1 us - 67 s"},
			},
		},
		// Joins (after their inputs).
		{
			Name: "strata:serving_gpu_sm_active:ratio", Help: "SM activity of the GPUs serving an instance, on the serving series' labels (join by Joins.On).",
			Unit: "ratio", Cause: CauseCompute, Felt: FeltUtilisation, Level: LevelServing,
			Terms: []Term{{Kind: TermJoin, Metric: "strata:gpu_sm_active:ratio", Den: []string{"strata:generation_tokens:rate"}}},
		},
		{
			Name: "strata:serving_gpu_memory_bandwidth_active:ratio", Help: "Memory-bandwidth activity of the GPUs serving an instance (join by Joins.On).",
			Unit: "ratio", Cause: CauseMemory, Felt: FeltUtilisation, Level: LevelServing,
			Terms: []Term{{Kind: TermJoin, Metric: "strata:gpu_memory_bandwidth_active:ratio", Den: []string{"strata:generation_tokens:rate"}}},
		},
	}
}

// sourceMetrics lists metrics Strata understands that feed no canonical series
// (or feed one only through a diagnosis rule), so the catalogue and docs say
// what each is. Metrics read by a canonical Term are added by the catalogue.
func sourceMetrics() []SourceMetric {
	return []SourceMetric{
		{Name: "vllm:num_requests_waiting_by_reason", Source: SourceVLLMV1, Versions: "newest", Type: "gauge", Unit: "requests", Note: "reason=capacity|deferred; sum equals num_requests_waiting"},
		{Name: "vllm:num_requests_swapped", Source: SourceVLLMV0, Versions: "V0", Type: "gauge", Unit: "requests", Note: "removed in V1; KV swap-out signal"},
		{Name: "vllm:cpu_cache_usage_perc", Source: SourceVLLMV0, Versions: "V0", Type: "gauge", Unit: "ratio"},
		{Name: "vllm:avg_prompt_throughput_toks_per_s", Source: SourceVLLMV0, Versions: "V0", Type: "gauge", Unit: "tokens_per_second", Note: "removed in 0.8; Strata uses the counters"},
		{Name: "vllm:avg_generation_throughput_toks_per_s", Source: SourceVLLMV0, Versions: "V0", Type: "gauge", Unit: "tokens_per_second", Note: "removed in 0.8; Strata uses the counters"},
		{Name: "vllm:spec_decode_efficiency", Source: SourceVLLMV0, Versions: "V0", Type: "gauge", Unit: "ratio"},
		{Name: "vllm:spec_decode_num_emitted_tokens_total", Source: SourceVLLMV0, Versions: "V0", Type: "counter", Unit: "tokens"},
		{Name: "vllm:spec_decode_num_drafts_total", Source: SourceVLLMV1, Versions: "0.9+", Type: "counter", Unit: "drafts", Note: "mean acceptance length = 1 + rate(accepted)/rate(drafts)"},
		{Name: "vllm:spec_decode_num_accepted_tokens_per_pos_total", Source: SourceVLLMV1, Versions: "0.9+", Type: "counter", Unit: "tokens", Note: "position label; per-position rate = per_pos/num_drafts"},
		{Name: "vllm:engine_sleep_state", Source: SourceVLLMV1, Versions: "0.12+", Type: "gauge", Unit: "state"},
		{Name: "vllm:external_prefix_cache_queries_total", Source: SourceVLLMV1, Versions: "0.12+", Type: "counter", Unit: "tokens"},
		{Name: "vllm:external_prefix_cache_hits_total", Source: SourceVLLMV1, Versions: "0.12+", Type: "counter", Unit: "tokens"},
		{Name: "vllm:mm_cache_queries_total", Source: SourceVLLMV1, Versions: "0.10+", Type: "counter", Unit: "items"},
		{Name: "vllm:mm_cache_hits_total", Source: SourceVLLMV1, Versions: "0.10+", Type: "counter", Unit: "items"},
		{Name: "vllm:corrupted_requests_total", Source: SourceVLLMV1, Versions: "with VLLM_COMPUTE_NANS_IN_LOGITS", Type: "counter", Unit: "requests"},
		{Name: "vllm:request_prompt_tokens", Source: SourceVLLMV1, Versions: "all", Type: "histogram", Unit: "tokens", Note: "1-2-5 buckets up to max_model_len"},
		{Name: "vllm:request_generation_tokens", Source: SourceVLLMV1, Versions: "all", Type: "histogram", Unit: "tokens"},
		{Name: "vllm:iteration_tokens_total", Source: SourceVLLMV1, Versions: "V1", Type: "histogram", Unit: "tokens", Note: "a histogram whose family name ends in _total"},
		{Name: "vllm:request_max_num_generation_tokens", Source: SourceVLLMV1, Versions: "V1", Type: "histogram", Unit: "tokens"},
		{Name: "vllm:request_params_n", Source: SourceVLLMV1, Versions: "V1", Type: "histogram", Unit: "count"},
		{Name: "vllm:request_params_max_tokens", Source: SourceVLLMV1, Versions: "V1", Type: "histogram", Unit: "tokens"},
		{Name: "vllm:request_inference_time_seconds", Source: SourceVLLMV1, Versions: "V1", Type: "histogram", Unit: "seconds", Note: "prefill + decode"},
		{Name: "vllm:time_per_prefill_token_request_seconds", Source: SourceVLLMV1, Versions: "~0.10 only", Type: "histogram", Unit: "seconds"},
		{Name: "vllm:kv_block_idle_before_evict_seconds", Source: SourceVLLMV1, Versions: "0.12+ with --kv-cache-metrics", Type: "histogram", Unit: "seconds", Note: "eviction-storm evidence when enabled"},
		{Name: "vllm:time_in_queue_requests", Source: SourceVLLMV0, Versions: "deprecated", Type: "histogram", Unit: "seconds", Note: "duplicate of request_queue_time_seconds"},
		{Name: "vllm:cache_config_info", Source: SourceVLLMV1, Versions: "all", Type: "gauge", Unit: "info", Note: "value 1; labels carry the cache configuration"},
		{Name: "vllm:lora_requests_info", Source: SourceVLLMV1, Versions: "all", Type: "gauge", Unit: "unix_seconds", Note: "no model_name or engine label"},
		{Name: "sglang:num_used_tokens", Source: SourceSGLang, Versions: "all", Type: "gauge", Unit: "tokens"},
		{Name: "sglang:max_total_num_tokens", Source: SourceSGLang, Versions: "all", Type: "gauge", Unit: "tokens"},
		{Name: "sglang:cached_tokens_total", Source: SourceSGLang, Versions: "all", Type: "counter", Unit: "tokens"},
		{Name: "sglang:gen_throughput", Source: SourceSGLang, Versions: "all", Type: "gauge", Unit: "tokens_per_second"},
		{Name: "sglang:spec_accept_length", Source: SourceSGLang, Versions: "all", Type: "gauge", Unit: "tokens"},
		{Name: "sglang:num_retracted_reqs", Source: SourceSGLang, Versions: "all", Type: "gauge", Unit: "requests"},
		{Name: "sglang:per_stage_req_latency_seconds", Source: SourceSGLang, Versions: "all", Type: "histogram", Unit: "seconds", Note: "stage label; stage names not verified, not decomposed yet"},
		{Name: "sglang:utilization", Source: SourceSGLang, Versions: "all", Type: "gauge", Unit: "ratio"},
		{Name: "tgi_request_success", Source: SourceTGI, Versions: "all", Type: "counter", Unit: "requests"},
		{Name: "tgi_batch_forward_duration", Source: SourceTGI, Versions: "all", Type: "histogram", Unit: "seconds", Note: "method=prefill|decode"},
		{Name: "tgi_request_skipped_tokens", Source: SourceTGI, Versions: "all", Type: "histogram", Unit: "tokens"},
		{Name: "nv_inference_compute_infer_duration_us", Source: SourceTriton, Versions: "all", Type: "counter", Unit: "microseconds"},
		{Name: "nv_inference_first_response_histogram_ms", Source: SourceTriton, Versions: "opt-in", Type: "histogram", Unit: "milliseconds", Note: "first response, not first token"},
		{Name: "nv_gpu_utilization", Source: SourceTriton, Versions: "all", Type: "gauge", Unit: "ratio"},
		{Name: "nv_trt_llm_kv_cache_block_metrics", Source: SourceTriton, Versions: "TRT-LLM backend", Type: "gauge", Unit: "mixed", Note: `kv_cache_block_type="fraction" is KV usage`},
		{Name: "ebpf_exporter_bio_latency_seconds", Source: SourceEBPF, Versions: "examples/biolatency.yaml", Type: "histogram", Unit: "seconds", Note: "exp2 buckets; _sum has float noise"},
		{Name: "ebpf_exporter_tcp_syn_backlog", Source: SourceEBPF, Versions: "examples/tcp-syn-backlog*.yaml", Type: "histogram", Unit: "connections", Note: "linear or exp2zero buckets"},
		{Name: "ebpf_exporter_tcp_retransmit_ipv4_packets_total", Source: SourceEBPF, Versions: "examples/tcp-retransmit.yaml", Type: "counter", Unit: "packets"},
		{Name: "ebpf_exporter_tcp_retransmit_ipv6_packets_total", Source: SourceEBPF, Versions: "examples/tcp-retransmit.yaml", Type: "counter", Unit: "packets"},
		{Name: "ebpf_exporter_softirq_wait_seconds", Source: SourceEBPF, Versions: "examples/softirq-latency-net-rx.yaml", Type: "histogram", Unit: "seconds"},
		{Name: "ebpf_exporter_softirq_runtime_seconds", Source: SourceEBPF, Versions: "examples/softirq-latency-net-rx.yaml", Type: "histogram", Unit: "seconds"},
		{Name: "ebpf_exporter_softirq_raised_total", Source: SourceEBPF, Versions: "examples/softirq-latency-net-rx.yaml", Type: "counter", Unit: "softirqs"},
		{Name: "ebpf_exporter_softirq_serviced_total", Source: SourceEBPF, Versions: "examples/softirq-latency-net-rx.yaml", Type: "counter", Unit: "softirqs"},
		{Name: "ebpf_exporter_udp_fail_queue_rcv_skbs_total", Source: SourceEBPF, Versions: "examples/udp-drops.yaml", Type: "counter", Unit: "packets"},
		{Name: "ebpf_exporter_unix_socket_backlog", Source: SourceEBPF, Versions: "examples/unix-socket-backlog.yaml", Type: "histogram", Unit: "connections"},
		{Name: "ebpf_exporter_kfree_skb_total", Source: SourceEBPF, Versions: "examples/kfree_skb.yaml", Type: "counter", Unit: "packets"},
		{Name: "bpftrace_<script>_<var>", Source: SourceBPFTrace, Versions: "all", Type: "histogram", Unit: "script-defined", Note: "sparse log2 buckets (own le set per series), _sum = -1; map to network latency with rulegen.Config.NetworkHistograms"},
	}
}
