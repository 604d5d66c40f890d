package main

import (
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/downsample"
)

// TestRollupTyping checks the typing serve and backfill give the rollups: the
// metric catalogue's gauges are gauges, everything else is a counter.
func TestRollupTyping(t *testing.T) {
	kindOf, err := rollupTyping()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]downsample.Kind{
		"DCGM_FI_DEV_GPU_UTIL":       downsample.KindGauge,
		"vllm:kv_cache_usage_perc":   downsample.KindGauge,
		"vllm:request_success_total": downsample.KindCounter,
		"node_memory_MemFree_bytes":  downsample.KindCounter,
	} {
		if got := kindOf.Of(labels.FromStrings("__name__", name, "job", "x")); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
