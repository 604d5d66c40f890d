package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/strata-dev/strata/dcgmbridge/sim"
)

// TestScrapeSimulatedCluster: strata serve scrapes a simulated cluster's
// dcgm-exporter, vLLM and ebpf_exporter endpoints through its sources
// section, marks every target up, stores their series and turns them into
// canonical series with its recording rules.
func TestScrapeSimulatedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("scrape end-to-end: skipped under -short")
	}
	cluster, err := sim.New(sim.Config{Seed: 3, Nodes: 1, GPUsPerNode: 2, Start: time.Now().Add(-time.Minute).Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for path, h := range cluster.Handlers(time.Now) {
		mux.Handle(path, h)
	}
	exporters := httptest.NewServer(mux) // 127.0.0.1
	defer exporters.Close()

	var cfg strings.Builder
	cfg.WriteString("rules:\n  canonical_interval: 1s\nsources:\n  targets:\n")
	targets := cluster.Targets()
	for i, tg := range targets {
		kind := "generic"
		switch {
		case strings.Contains(tg.Path, "/dcgm/"):
			kind = "dcgm"
		case strings.Contains(tg.Path, "/vllm/"):
			kind = "vllm"
		case strings.Contains(tg.Path, "/ebpf/"):
			kind = "ebpf"
		}
		fmt.Fprintf(&cfg, "    - {name: %s-%d, kind: %s, url: %q, interval: 1s}\n", tg.Job, i, kind, exporters.URL+tg.Path)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, filepath.Join(dir, "data"), "--config.file="+cfgPath)
	client := newAPIClient(t, p)
	ctx := context.Background()

	want := map[string]func(model.Vector) bool{
		// Every simulated target scraped and up (self-scrape adds job="strata").
		fmt.Sprintf(`count(up{job!="strata"} == 1) == %d`, len(targets)): func(v model.Vector) bool { return len(v) == 1 },
		`count(DCGM_FI_DEV_GPU_UTIL)`:                                    func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 2 },
		`count(vllm:kv_cache_usage_perc)`:                                func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 2 },
		`count(strata:gpu_sm_active:ratio)`:                              func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 2 },
		`count(strata:kv_cache_usage:ratio)`:                             func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 2 },
		`sum(strata_dcgmbridge_scrape_failures_total)`:                   func(v model.Vector) bool { return len(v) == 0 || v[0].Value == 0 },
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(want) > 0 && time.Now().Before(deadline) {
		for q, ok := range want {
			v, _, _, err := client.Query(ctx, q, time.Now())
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if vec, isVec := v.(model.Vector); isVec && ok(vec) {
				delete(want, q)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	for q := range want {
		v, _, _, _ := client.Query(ctx, q, time.Now())
		t.Errorf("%s never held; last answer %v", q, v)
	}

	// /api/v1/targets, read by client_golang as Grafana and promtool read
	// it: every source and the self-scrape, healthy, in its own pool.
	res, err := client.Targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]promv1.HealthStatus{}
	for _, a := range res.Active {
		pools[a.ScrapePool] = a.Health
		if a.Health == promv1.HealthGood && (a.LastScrape.IsZero() || a.ScrapeURL == "" || a.Labels["job"] != model.LabelValue(a.ScrapePool)) {
			t.Errorf("target %+v", a)
		}
	}
	for i, tg := range targets {
		if pool := fmt.Sprintf("%s-%d", tg.Job, i); pools[pool] != promv1.HealthGood {
			t.Errorf("target %s: health %q", pool, pools[pool])
		}
	}
	if len(pools) != len(targets)+1 || len(res.Dropped) != 0 {
		t.Errorf("active pools %v (want the %d sources and strata), dropped %v", pools, len(targets), res.Dropped)
	}
}
