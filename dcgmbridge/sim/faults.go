package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Kind names a fault or decoy. A fault kind is the value of the diagnosis
// label that the diagnosis rule for that fault sets on its alert (for example
// kv_cache_eviction_storm, request_queue_backlog, under_batched_gpu,
// draft_model_drift), so a scorer can compare a firing alert's diagnosis label
// with the ground truth directly.
type Kind string

// Faults: each one changes the metrics a diagnosis rule reads.
const (
	KindKVCacheStorm      Kind = "kv_cache_eviction_storm"
	KindQueueBacklog      Kind = "request_queue_backlog"
	KindUnderBatched      Kind = "under_batched_gpu"
	KindSpecDecodeDrift   Kind = "draft_model_drift"
	KindPowerCap          Kind = "power_cap"
	KindThermalThrottle   Kind = "thermal_throttle"
	KindXIDGPULost        Kind = "xid_gpu_lost"
	KindPrefixCacheDrop   Kind = "prefix_cache_collapse"
	KindNetworkDelay      Kind = "network_delay"
	KindBenignSpike       Kind = "benign_traffic_spike"
	KindDeploy            Kind = "deploy"
	KindScrapeGap         Kind = "scrape_gap"
	KindIdleReplica       Kind = "idle_replica"
	defaultDeployDowntime      = 45 * time.Second
)

// kindInfo is the static description of one kind: whether it is a decoy,
// what it targets, its default parameters and the metric a rule should find
// it by (the ground truth's root_metric).
type kindInfo struct {
	decoy      bool
	scope      scope
	params     map[string]float64
	rootMetric string
}

type scope uint8

const (
	scopeInstance       scope = iota // the vLLM instance serving Target.GPU
	scopeGPU                         // one GPU
	scopeNode                        // one node
	scopeNodeOrInstance              // a whole node, or one instance when GPU is set
)

// kinds returns the catalogue; a function rather than a package variable so
// that no caller can mutate shared state.
func kinds() map[Kind]kindInfo {
	return map[Kind]kindInfo{
		KindKVCacheStorm:    {scope: scopeInstance, params: map[string]float64{"prompt_scale": 4, "output_scale": 6, "arrival_scale": 1.2}, rootMetric: "vllm:kv_cache_usage_perc"},
		KindQueueBacklog:    {scope: scopeInstance, params: map[string]float64{"load_factor": 6}, rootMetric: "vllm:num_requests_waiting"},
		KindUnderBatched:    {scope: scopeInstance, params: map[string]float64{"max_num_seqs": 2, "load_factor": 0.2}, rootMetric: "DCGM_FI_PROF_SM_ACTIVE"},
		KindSpecDecodeDrift: {scope: scopeInstance, params: map[string]float64{"acceptance_rate": 0.08}, rootMetric: "vllm:spec_decode_num_accepted_tokens_total"},
		KindPowerCap:        {scope: scopeGPU, params: map[string]float64{"limit_watts": 300}, rootMetric: "DCGM_FI_DEV_POWER_USAGE"},
		KindThermalThrottle: {scope: scopeGPU, params: map[string]float64{"temp_offset_c": 35}, rootMetric: "DCGM_FI_DEV_GPU_TEMP"},
		KindXIDGPULost:      {scope: scopeGPU, params: map[string]float64{"xid": 79}, rootMetric: "DCGM_FI_DEV_XID_ERRORS"},
		KindPrefixCacheDrop: {scope: scopeInstance, params: map[string]float64{"hit_rate": 0.02}, rootMetric: "vllm:prefix_cache_hits_total"},
		KindNetworkDelay:    {scope: scopeNode, params: map[string]float64{"delay_ms": 50, "retransmit_factor": 20}, rootMetric: "ebpf_exporter_accept_latency_seconds"},
		KindBenignSpike:     {decoy: true, scope: scopeInstance, params: map[string]float64{"arrival_scale": 1.5}, rootMetric: ""},
		KindDeploy:          {decoy: true, scope: scopeInstance, params: map[string]float64{"itl_scale": 1.1, "output_scale": 1.0}, rootMetric: ""},
		KindScrapeGap:       {decoy: true, scope: scopeNodeOrInstance, params: map[string]float64{}, rootMetric: ""},
		KindIdleReplica:     {decoy: true, scope: scopeInstance, params: map[string]float64{}, rootMetric: ""},
	}
}

// Kinds lists every fault and decoy kind, sorted.
func Kinds() []Kind {
	var out []Kind
	for k := range kinds() {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// FaultSpec is one configured fault or decoy.
type FaultSpec struct {
	Kind Kind `yaml:"kind"`
	// Node is the node index; GPU the GPU index on it. For instance-scoped
	// kinds the fault hits the vLLM instance serving that GPU. GPU may be
	// omitted for node-scoped kinds (network_delay, scrape_gap of a node).
	Node int  `yaml:"node"`
	GPU  *int `yaml:"gpu"`
	// Start is the fault's onset; when zero, Config.Start + At is used.
	Start time.Time     `yaml:"start"`
	At    time.Duration `yaml:"at"`
	// Duration is how long the fault lasts. For a deploy it is the restart
	// downtime (default 45s); the level shift stays afterwards.
	Duration time.Duration `yaml:"duration"`
	// Params override the kind's default parameters (see docs/simulator.md).
	Params map[string]float64 `yaml:"params"`
}

func (f FaultSpec) validate(cfg Config) error {
	info, ok := kinds()[f.Kind]
	if !ok {
		return fmt.Errorf("unknown kind %q", f.Kind)
	}
	if f.Node < 0 || f.Node >= cfg.Nodes {
		return fmt.Errorf("%s: node %d out of range [0, %d)", f.Kind, f.Node, cfg.Nodes)
	}
	if f.GPU != nil && (*f.GPU < 0 || *f.GPU >= cfg.GPUsPerNode) {
		return fmt.Errorf("%s: gpu %d out of range [0, %d)", f.Kind, *f.GPU, cfg.GPUsPerNode)
	}
	if f.GPU == nil && (info.scope == scopeInstance || info.scope == scopeGPU) {
		return fmt.Errorf("%s: gpu is required", f.Kind)
	}
	if f.Duration < 0 || (f.Duration == 0 && f.Kind != KindDeploy) {
		return fmt.Errorf("%s: duration must be positive", f.Kind)
	}
	for k := range f.Params {
		if _, ok := info.params[k]; !ok {
			return fmt.Errorf("%s: unknown parameter %q", f.Kind, k)
		}
	}
	return nil
}

// Fault is one ground-truth record: what was injected, where and when. It is
// written as one JSON line per fault (see WriteGroundTruth).
type Fault struct {
	Kind  Kind `json:"kind"`
	Decoy bool `json:"decoy"`
	// Target names the entity with every label a rule could group by.
	Target FaultTarget `json:"target"`
	Start  time.Time   `json:"start"`
	End    time.Time   `json:"end"`
	// Params are the effective parameters (defaults merged with overrides).
	Params map[string]float64 `json:"params"`
	// RootMetric is the metric a diagnosis should name as evidence; empty for
	// decoys.
	RootMetric string `json:"root_metric,omitempty"`
}

// FaultTarget identifies the faulty entity. Instance-scoped faults carry the
// vLLM instance's scrape address, pod and model; GPU-scoped faults the GPU's
// index and UUID; node-scoped faults only the node.
type FaultTarget struct {
	Node      string `json:"node"`
	GPU       *int   `json:"gpu,omitempty"`
	UUID      string `json:"uuid,omitempty"`
	Instance  string `json:"instance,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Model     string `json:"model,omitempty"`
}

// activeFault is a fault resolved against the topology, in model seconds.
type activeFault struct {
	Fault
	info       kindInfo
	start, end float64 // seconds since Config.Start
	node       int
	gpu        int // -1 when node-wide
	inst       *instance
	started    bool
}

func (a *activeFault) param(name string) float64 { return a.Params[name] }

// WriteGroundTruth writes the faults as JSON lines, in onset order.
func WriteGroundTruth(w io.Writer, faults []Fault) error {
	enc := json.NewEncoder(w)
	for _, f := range faults {
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("write ground truth: %w", err)
		}
	}
	return nil
}
