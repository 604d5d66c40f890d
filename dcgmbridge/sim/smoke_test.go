package sim

import (
	"testing"
	"time"
)

func TestSmokePrint(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 1})
	for _, h := range []time.Duration{4 * time.Hour, 10 * time.Hour, 16 * time.Hour} {
		c.Step(at(c, h))
		p := parseText(t, scrape(t, c, "/gpu-node-0/vllm/8000/metrics"), "text/plain")
		d := parseText(t, scrape(t, c, "/gpu-node-0/dcgm/metrics"), "text/plain")
		t.Logf("%v running=%v waiting=%v kv=%v gen=%v success=%v ttftsum/count=%v sm=%v util=%v power=%v temp=%v clock=%v", h,
			p.value(t, "vllm:num_requests_running"), p.value(t, "vllm:num_requests_waiting"), p.value(t, "vllm:kv_cache_usage_perc"),
			p.value(t, "vllm:generation_tokens_total"), p.value(t, "vllm:request_success_total", "finished_reason", "stop"),
			p.value(t, "vllm:time_to_first_token_seconds_sum")/p.value(t, "vllm:time_to_first_token_seconds_count"),
			d.value(t, "DCGM_FI_PROF_SM_ACTIVE", "gpu", "0"), d.value(t, "DCGM_FI_DEV_GPU_UTIL", "gpu", "0"), d.value(t, "DCGM_FI_DEV_POWER_USAGE", "gpu", "0"),
			d.value(t, "DCGM_FI_DEV_GPU_TEMP", "gpu", "0"), d.value(t, "DCGM_FI_DEV_SM_CLOCK", "gpu", "0"))
	}
	t.Logf("%s", scrape(t, c, "/gpu-node-0/vllm/8000/metrics")[:1500])
}
