package sim

import (
	"errors"
	"fmt"
	"time"
)

// Config describes the simulated cluster. The zero value of every field means
// "use the default" (see Defaults), so a YAML file only lists what it changes.
type Config struct {
	// Seed makes a run reproducible: the same seed, configuration and Step
	// times give byte-identical metrics.
	Seed uint64 `yaml:"seed"`
	// Nodes and GPUsPerNode size the cluster (default 4 x 8).
	Nodes       int `yaml:"nodes"`
	GPUsPerNode int `yaml:"gpus_per_node"`
	// GPUsPerInstance is the tensor-parallel size of each vLLM instance; it
	// must divide GPUsPerNode (default 1: one instance per GPU).
	GPUsPerInstance int `yaml:"gpus_per_instance"`
	// Models are the served model names, assigned to instances round-robin.
	Models []string `yaml:"models"`
	// VLLMVersion selects the exposed names: "v1" (0.11+ names, the default)
	// or "v0" (legacy names: gpu_cache_usage_perc, num_requests_swapped, ...).
	VLLMVersion string `yaml:"vllm_version"`
	// VLLMShowDeprecated adds the V1 series that 0.11 still shows but marks
	// deprecated (vllm:time_per_output_token_seconds, the same per-token
	// observations as inter_token_latency_seconds), as
	// --show-hidden-metrics-for-version=0.11 does in 0.12. Rules written
	// against the old name need it.
	VLLMShowDeprecated bool `yaml:"vllm_show_deprecated"`
	// BareMetal runs the fleet outside Kubernetes, scraped by
	// static_configs: no series carries namespace, pod or container, and
	// dcgm-exporter attributes no GPU to a pod. A replica is known by its
	// job and instance only. The ground truth still names the pod.
	BareMetal bool `yaml:"bare_metal"`
	// DCGMFields selects the dcgm-exporter field set: "default" (the shipped
	// default-counters.csv), "profiling" (adds SM_ACTIVE, SM_OCCUPANCY and
	// NVLink bytes; the default here) or "full" (profiling plus clock-event
	// reasons and power/thermal violation counters).
	DCGMFields string `yaml:"dcgm_fields"`
	// GPUModel is the modelName label of dcgm-exporter.
	GPUModel string `yaml:"gpu_model"`
	// Start is the simulated time of the first state. The default is a fixed
	// Monday so that runs never depend on the wall clock.
	Start time.Time `yaml:"start"`
	// Tick is the model's integration step (default 1s, at most 1s). Step
	// and Backfill advance the model in whole ticks aligned to Start; a
	// coarser output step (Backfill's step, Push's interval) does not change
	// it.
	Tick time.Duration `yaml:"tick"`

	// PeakRequestRate is each instance's mean arrival rate in requests per
	// second at the daily peak on a weekday (default 14, about 65% of an
	// instance's capacity with the default engine parameters).
	PeakRequestRate float64 `yaml:"peak_request_rate"`
	// MaxNumSeqs is vLLM's max_num_seqs: the continuous-batching limit
	// (default 128).
	MaxNumSeqs int `yaml:"max_num_seqs"`
	// NumGPUBlocks and BlockSize size the KV cache per instance in blocks of
	// BlockSize tokens (default 8192 x 16).
	NumGPUBlocks int `yaml:"num_gpu_blocks"`
	BlockSize    int `yaml:"block_size"`
	// PrefillTokensPerSecond is the prefill throughput of one GPU at full
	// clock (default 24000); a TP instance scales it by its GPU count.
	PrefillTokensPerSecond float64 `yaml:"prefill_tokens_per_second"`
	// DecodeStepSeconds and DecodeStepPerSeqSeconds give the duration of one
	// decode iteration for a batch of b sequences: base + b*perSeq
	// (defaults 0.010 and 0.00012 s).
	DecodeStepSeconds       float64 `yaml:"decode_step_seconds"`
	DecodeStepPerSeqSeconds float64 `yaml:"decode_step_per_seq_seconds"`
	// MeanPromptTokens and MeanOutputTokens are the means of the log-normal
	// request size distributions (defaults 890 and 226).
	MeanPromptTokens float64 `yaml:"mean_prompt_tokens"`
	MeanOutputTokens float64 `yaml:"mean_output_tokens"`
	// PrefixHitRate is the fraction of prompt tokens served from the prefix
	// cache (default 0.375).
	PrefixHitRate float64 `yaml:"prefix_hit_rate"`
	// SpeculativeTokens is the draft length k (default 3; negative disables
	// speculative decoding) and AcceptanceRate the fraction of draft tokens
	// accepted (default 0.62), the ratio accepted/draft that vLLM's counters
	// give; the per-position acceptance is derived from it.
	SpeculativeTokens int     `yaml:"num_speculative_tokens"`
	AcceptanceRate    float64 `yaml:"acceptance_rate"`
	// RequestTimeout aborts requests that waited longer than this (default
	// 10m), which keeps memory bounded under a sustained backlog and shows up
	// as finished_reason="abort".
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// PowerLimitWatts is the board power limit (default 700).
	PowerLimitWatts float64 `yaml:"power_limit_watts"`

	// Faults are the injected faults and decoys; each becomes one ground-truth
	// record.
	Faults []FaultSpec `yaml:"faults"`
}

// Defaults returns cfg with every zero field replaced by its default.
func (cfg Config) Defaults() Config {
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setF := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	setInt(&cfg.Nodes, 4)
	setInt(&cfg.GPUsPerNode, 8)
	setInt(&cfg.GPUsPerInstance, 1)
	if len(cfg.Models) == 0 {
		cfg.Models = []string{"meta-llama/Llama-3.1-8B-Instruct"}
	}
	if cfg.VLLMVersion == "" {
		cfg.VLLMVersion = "v1"
	}
	if cfg.DCGMFields == "" {
		cfg.DCGMFields = "profiling"
	}
	if cfg.GPUModel == "" {
		cfg.GPUModel = "NVIDIA H100 80GB HBM3"
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	}
	if cfg.Tick == 0 {
		cfg.Tick = time.Second
	}
	setF(&cfg.PeakRequestRate, 14)
	setInt(&cfg.MaxNumSeqs, 128)
	setInt(&cfg.NumGPUBlocks, 8192)
	setInt(&cfg.BlockSize, 16)
	setF(&cfg.PrefillTokensPerSecond, 24000)
	setF(&cfg.DecodeStepSeconds, 0.010)
	setF(&cfg.DecodeStepPerSeqSeconds, 0.00012)
	setF(&cfg.MeanPromptTokens, 890)
	setF(&cfg.MeanOutputTokens, 226)
	setF(&cfg.PrefixHitRate, 0.375)
	setInt(&cfg.SpeculativeTokens, 3)
	setF(&cfg.AcceptanceRate, 0.62)
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Minute
	}
	setF(&cfg.PowerLimitWatts, 700)
	return cfg
}

// Validate reports the first problem of a defaulted configuration.
func (cfg Config) Validate() error {
	var errs []error
	if cfg.Nodes < 1 || cfg.Nodes > 1024 {
		errs = append(errs, fmt.Errorf("nodes %d out of range [1, 1024]", cfg.Nodes))
	}
	if cfg.GPUsPerNode < 1 || cfg.GPUsPerNode > 64 {
		errs = append(errs, fmt.Errorf("gpus_per_node %d out of range [1, 64]", cfg.GPUsPerNode))
	}
	if cfg.GPUsPerInstance < 1 || cfg.GPUsPerNode%cfg.GPUsPerInstance != 0 {
		errs = append(errs, fmt.Errorf("gpus_per_instance %d must divide gpus_per_node %d", cfg.GPUsPerInstance, cfg.GPUsPerNode))
	}
	if cfg.VLLMVersion != "v1" && cfg.VLLMVersion != "v0" {
		errs = append(errs, fmt.Errorf("vllm_version %q: want v1 or v0", cfg.VLLMVersion))
	}
	switch cfg.DCGMFields {
	case "default", "profiling", "full":
	default:
		errs = append(errs, fmt.Errorf("dcgm_fields %q: want default, profiling or full", cfg.DCGMFields))
	}
	// Admission and completion happen once per tick, so a tick longer than a
	// typical request (about a second) starves the batch: the model is only
	// calibrated up to 1 s.
	if cfg.Tick < time.Millisecond || cfg.Tick > time.Second {
		errs = append(errs, fmt.Errorf("tick %s out of range [1ms, 1s]", cfg.Tick))
	}
	if cfg.PeakRequestRate < 0 {
		errs = append(errs, fmt.Errorf("peak_request_rate %g is negative", cfg.PeakRequestRate))
	}
	if cfg.MaxNumSeqs < 1 || cfg.NumGPUBlocks < 16 || cfg.BlockSize < 1 {
		errs = append(errs, errors.New("max_num_seqs, num_gpu_blocks and block_size must be positive (num_gpu_blocks >= 16)"))
	}
	if cfg.PrefixHitRate < 0 || cfg.PrefixHitRate >= 1 {
		errs = append(errs, fmt.Errorf("prefix_hit_rate %g out of range [0, 1)", cfg.PrefixHitRate))
	}
	if cfg.AcceptanceRate < 0 || cfg.AcceptanceRate > 1 {
		errs = append(errs, fmt.Errorf("acceptance_rate %g out of range [0, 1]", cfg.AcceptanceRate))
	}
	if cfg.SpeculativeTokens > 8 {
		errs = append(errs, fmt.Errorf("num_speculative_tokens %d above 8", cfg.SpeculativeTokens))
	}
	if cfg.MeanPromptTokens < 1 || cfg.MeanOutputTokens < 1 {
		errs = append(errs, errors.New("mean_prompt_tokens and mean_output_tokens must be at least 1"))
	}
	for i, f := range cfg.Faults {
		if err := f.validate(cfg); err != nil {
			errs = append(errs, fmt.Errorf("faults[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
