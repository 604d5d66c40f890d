package sim

import (
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestConfigYAML decodes the documented example (docs/simulator.md) with the
// YAML library strata's config loader uses.
func TestConfigYAML(t *testing.T) {
	src := `
seed: 42
nodes: 2
gpus_per_node: 4
models: [meta-llama/Llama-3.1-8B-Instruct, Qwen/Qwen3-32B]
vllm_version: v0
dcgm_fields: full
start: 2026-01-05T00:00:00Z
tick: 1s
faults:
  - kind: kv_cache_eviction_storm
    node: 0
    gpu: 3
    at: 2h
    duration: 20m
    params: {prompt_scale: 6}
  - kind: network_delay
    node: 1
    start: 2026-01-05T03:00:00Z
    duration: 10m
`
	var cfg Config
	if err := yaml.Unmarshal([]byte(src), &cfg); err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gt := c.GroundTruth()
	if len(gt) != 2 || *gt[0].Target.GPU != 3 || gt[0].End.Sub(gt[0].Start) != 20*time.Minute || gt[0].Params["prompt_scale"] != 6 ||
		gt[1].Start.Hour() != 3 || gt[1].Target.Node != "gpu-node-1" || c.Config().VLLMVersion != "v0" || len(c.Config().Models) != 2 {
		t.Errorf("decoded config %+v, ground truth %+v", c.Config(), gt)
	}
}
