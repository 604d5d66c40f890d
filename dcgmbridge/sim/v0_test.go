package sim

import (
	"testing"
	"time"
)

// TestV0Signatures checks that the legacy names carry the same faults:
// gpu_cache_usage_perc for the storm and the acceptance-rate gauge for draft
// drift.
func TestV0Signatures(t *testing.T) {
	onset := 2 * time.Hour
	cases := []struct {
		kind  Kind
		check func(t *testing.T, before, during snapshot, peakKV float64)
	}{
		{KindKVCacheStorm, func(t *testing.T, b, d snapshot, peakKV float64) {
			if peakKV < 0.95 {
				t.Errorf("peak gpu_cache_usage_perc %v", peakKV)
			}
			if d.v(t, "vllm:num_preemptions_total") <= b.v(t, "vllm:num_preemptions_total") {
				t.Error("no preemptions")
			}
		}},
		{KindSpecDecodeDrift, func(t *testing.T, b, d snapshot, _ float64) {
			if a := b.v(t, "vllm:spec_decode_draft_acceptance_rate"); a < 0.4 {
				t.Errorf("acceptance gauge %v before", a)
			}
			if a := d.v(t, "vllm:spec_decode_draft_acceptance_rate"); a > 0.1 {
				t.Errorf("acceptance gauge %v during drift", a)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.kind), func(t *testing.T) {
			c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 11, VLLMVersion: "v0",
				Faults: []FaultSpec{{Kind: tc.kind, GPU: intp(1), At: onset, Duration: 20 * time.Minute}}})
			b := take(t, c, at(c, onset-time.Second))
			peak := 0.0
			for s := 5 * time.Minute; s <= 15*time.Minute; s += 30 * time.Second {
				peak = max(peak, take(t, c, at(c, onset+s)).v(t, "vllm:gpu_cache_usage_perc"))
			}
			tc.check(t, b, take(t, c, at(c, onset+15*time.Minute)), peak)
		})
	}
}

// TestTensorParallelInstance checks a 2-GPU instance: one vLLM target per
// GPU pair, both GPUs attributed to its pod and NVLink traffic between them.
func TestTensorParallelInstance(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 4, GPUsPerInstance: 2, Seed: 3, DCGMFields: "profiling"})
	c.Step(at(c, 10*time.Hour))
	n := 0
	for _, tg := range c.Targets() {
		if tg.Job == JobVLLM {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d vLLM targets for 4 GPUs at TP 2", n)
	}
	d := parseText(t, scrape(t, c, dcgmPath), "text/plain")
	for _, g := range []string{"0", "1"} {
		if v := d.value(t, "DCGM_FI_PROF_NVLINK_TX_BYTES", "gpu", g); v <= 0 {
			t.Errorf("GPU %s: no NVLink traffic in a TP instance", g)
		}
	}
	var pods []string
	for _, l := range d.byName["DCGM_FI_DEV_GPU_UTIL"] {
		pods = append(pods, l.Get("pod"))
	}
	if pods[0] != pods[1] || pods[1] == pods[2] {
		t.Errorf("pod attribution %v: GPUs 0,1 share one pod, 2,3 another", pods)
	}
}
