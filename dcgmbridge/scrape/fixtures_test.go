package scrape

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"go.yaml.in/yaml/v3"

	"github.com/strata-dev/strata/dcgmbridge"
)

// fixtureCase says what one fixture must parse into.
type fixtureCase struct {
	// canonical series the fixture's metrics feed (checked via the catalogue).
	canonical []string
	// check runs extra assertions on the parsed exposition (.prom files).
	check func(t *testing.T, c *dcgmbridge.Catalogue, exp *Exposition)
}

func fixtureCases() map[string]fixtureCase {
	dcgm := []string{"strata:gpu_sm_active:ratio", "strata:gpu_memory_bandwidth_active:ratio"}
	return map[string]fixtureCase{
		"dcgm_exporter_default_k8s.prom":   {canonical: dcgm, check: checkDCGMExposition(false)},
		"dcgm_exporter_profiling_k8s.prom": {canonical: dcgm, check: checkDCGMExposition(true)},
		"vllm_v1_t0_healthy.prom": {canonical: []string{
			"strata:kv_cache_usage:ratio", "strata:ttft_seconds:p99", "strata:tpot_seconds:p99", "strata:e2e_latency_seconds:p99",
			"strata:queue_time_seconds:p99", "strata:requests:rate", "strata:generation_tokens:rate", "strata:request_errors:ratio",
			"strata:prefix_cache_hit:ratio", "strata:preemptions:rate", "strata:spec_decode_acceptance:ratio",
			`strata:latency_seconds:component{component="prefill"}`, `strata:latency_seconds:component{component="decode"}`,
		}, check: checkEveryNameKnown},
		"vllm_v1_t1_kv_storm.prom": {canonical: []string{"strata:kv_cache_usage:ratio", "strata:requests_waiting"}, check: checkEveryNameKnown},
		"vllm_v0_legacy.prom": {canonical: []string{
			"strata:kv_cache_usage:ratio", "strata:ttft_seconds:p99", "strata:tpot_seconds:p99", "strata:spec_decode_acceptance:ratio",
		}, check: checkEveryNameKnown},
		"ebpf_exporter/bio_latency_exposition.prom": {check: func(t *testing.T, c *dcgmbridge.Catalogue, exp *Exposition) {
			les := map[string]bool{}
			for _, s := range exp.Samples {
				if le := s.Labels.Get("le"); le != "" {
					les[le] = true
				}
			}
			if !les["1e-06"] || !les["134.217728"] || len(les) != 29 { // 28 exp2 edges + Inf
				t.Errorf("exp2 edges: got %d: %v", len(les), les)
			}
			checkEveryNameKnown(t, c, exp)
		}},
		"bpftrace_exporter/histmap.metrics": {check: func(t *testing.T, c *dcgmbridge.Catalogue, exp *Exposition) {
			perKey := map[string][]string{}
			for _, s := range exp.Samples {
				if strings.HasSuffix(s.Labels.Get("__name__"), "_bucket") {
					perKey[s.Labels.Get("key")] = append(perKey[s.Labels.Get("key")], s.Labels.Get("le"))
				}
			}
			// Sparse: each key has its own le set, both kept (le normalised to
			// the OpenMetrics float form, as Prometheus stores it).
			if !slices.Equal(perKey["0"], []string{"3.0", "7.0", "15.0", "+Inf"}) || !slices.Equal(perKey["1"], []string{"31.0", "+Inf"}) {
				t.Errorf("sparse buckets: %v", perKey)
			}
		}},
		"dcgm_field_ids.csv":                          {canonical: dcgm},
		"dcgm-exporter_default-counters.csv":          {canonical: dcgm},
		"dcgm-exporter_dcp-metrics-included.csv":      {canonical: dcgm},
		"dcgm-exporter_1.x-compatibility-metrics.csv": {canonical: dcgm},
		"ebpf_exporter/accept-latency.yaml":           {canonical: []string{"strata:network_latency_seconds:p99"}},
		"ebpf_exporter/biolatency.yaml":               {},
		"ebpf_exporter/sock-trace.yaml":               {},
		"ebpf_exporter/softirq-latency-net-rx.yaml":   {},
		"ebpf_exporter/tcp-retransmit.yaml":           {},
		"ebpf_exporter/tcp-syn-backlog-exp2zero.yaml": {},
		"ebpf_exporter/tcp-syn-backlog.yaml":          {},
		"ebpf_exporter/udp-drops.yaml":                {},
		"ebpf_exporter/unix-socket-backlog.yaml":      {},
	}
}

// TestFixtures parses every fixture and checks the canonical series its
// metrics map to. A fixture without a case fails the test, so new fixtures
// cannot go unchecked.
func TestFixtures(t *testing.T) {
	dir := fixturesDir(t)
	cases := fixtureCases()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "README.md" {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCatalogue(t)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			tc, ok := cases[f]
			if !ok {
				t.Fatalf("fixture %s has no test case", f)
			}
			body, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			switch {
			case strings.HasSuffix(f, ".prom") || strings.HasSuffix(f, ".metrics"):
				p := &ExpositionParser{Sentinels: NewSentinelFilter(c, prometheus.NewRegistry()), Limits: ParseLimits{MaxSamples: DefaultSampleLimit, MaxLineBytes: DefaultLineLimit}}
				exp, err := p.Parse(body, "text/plain; version=0.0.4", labels.FromStrings("job", "fixture", "instance", "x:1"), t0)
				if err != nil {
					t.Fatal(err)
				}
				if len(exp.Samples) == 0 {
					t.Fatal("no samples")
				}
				for _, s := range exp.Samples {
					names = append(names, s.Labels.Get("__name__"))
				}
				if tc.check != nil {
					tc.check(t, c, exp)
				}
			case strings.HasSuffix(f, ".csv"):
				names = csvFieldNames(t, f, body)
			case strings.HasSuffix(f, ".yaml"):
				names = ebpfConfigNames(t, body)
				for _, n := range names {
					if len(c.Lookup(n)) == 0 {
						t.Errorf("ebpf_exporter metric %s is not in the catalogue", n)
					}
				}
			default:
				t.Fatalf("unknown fixture kind %s", f)
			}
			got := map[string]bool{}
			for _, n := range names {
				for _, m := range c.Lookup(n) {
					for _, cn := range m.Canonical {
						got[cn] = true
					}
				}
			}
			for _, want := range tc.canonical {
				if !got[want] {
					t.Errorf("no metric of %s maps to %s (maps to %v)", f, want, got)
				}
			}
		})
	}
}

func csvFieldNames(t *testing.T, name string, body []byte) []string {
	t.Helper()
	var out []string
	for i, line := range strings.Split(string(body), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line == "" || (name == "dcgm_field_ids.csv" && i == 0) {
			continue
		}
		out = append(out, strings.TrimSpace(strings.Split(line, ",")[0]))
	}
	return out
}

// ebpfConfigNames returns the exposed names of an ebpf_exporter config's
// metrics (the exporter prefixes every name with ebpf_exporter_).
func ebpfConfigNames(t *testing.T, body []byte) []string {
	t.Helper()
	var cfg struct {
		Metrics struct {
			Counters   []struct{ Name string } `yaml:"counters"`
			Histograms []struct {
				Name       string `yaml:"name"`
				BucketType string `yaml:"bucket_type"`
			} `yaml:"histograms"`
		} `yaml:"metrics"`
	}
	if err := yaml.Unmarshal(body, &cfg); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cfg.Metrics.Counters {
		out = append(out, "ebpf_exporter_"+c.Name)
	}
	for _, h := range cfg.Metrics.Histograms {
		switch h.BucketType {
		case "exp2", "exp2zero", "linear", "fixed":
		default:
			t.Errorf("histogram %s: unknown bucket type %q", h.Name, h.BucketType)
		}
		out = append(out, "ebpf_exporter_"+h.Name+"_bucket")
	}
	return out
}

// checkEveryNameKnown requires the catalogue to know every metric of a vLLM or
// eBPF exposition: an unknown name would be a rename the catalogue missed.
func checkEveryNameKnown(t *testing.T, c *dcgmbridge.Catalogue, exp *Exposition) {
	t.Helper()
	for _, s := range exp.Samples {
		if n := s.Labels.Get("__name__"); len(c.Lookup(n)) == 0 {
			t.Errorf("%s is not in the catalogue", n)
		}
	}
}

func checkDCGMExposition(profiling bool) func(t *testing.T, c *dcgmbridge.Catalogue, exp *Exposition) {
	return func(t *testing.T, c *dcgmbridge.Catalogue, exp *Exposition) {
		hasSM := false
		for _, s := range exp.Samples {
			n := s.Labels.Get("__name__")
			if _, ok := c.FieldByName(n); !ok {
				t.Errorf("DCGM metric %s has no field id", n)
			}
			if s.Labels.Get("Hostname") == "" || s.Labels.Get("UUID") == "" {
				t.Errorf("%s lacks Hostname/UUID: %s", n, s.Labels)
			}
			hasSM = hasSM || n == "DCGM_FI_PROF_SM_ACTIVE"
		}
		if hasSM != profiling {
			t.Errorf("SM_ACTIVE present = %v, want %v", hasSM, profiling)
		}
		if len(exp.Sentinels) != 0 {
			t.Errorf("unexpected sentinels %v", exp.Sentinels)
		}
	}
}

func TestSentinels(t *testing.T) {
	c := newTestCatalogue(t)
	reg := prometheus.NewRegistry()
	f := NewSentinelFilter(c, reg)
	for _, tc := range []struct {
		name string
		v    float64
		keep bool
	}{
		{"DCGM_FI_DEV_MEMORY_TEMP", 9223372036854775794, false}, // dcgm-exporter README sample
		{"DCGM_FI_DEV_GPU_TEMP", dcgmbridge.DCGMFP64Blank, false},
		{"DCGM_FI_DEV_POWER_USAGE", dcgmbridge.DCGMFP64Blank + 2, false},
		{"DCGM_FI_DEV_POWER_USAGE", 512.6, true},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 2e14, true}, // a counter may pass 1.4e14
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 9.3e18, false},
		{"DCGM_FI_CUSTOM_THING", dcgmbridge.DCGMFP64Blank + 1, false},
		{"DCGM_FI_CUSTOM_THING", 3e14, true},
		{"vllm:num_requests_running", 9.3e18, true}, // not DCGM
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.Keep(tc.name, tc.v); got != tc.keep {
				t.Fatalf("Keep(%s, %g) = %v", tc.name, tc.v, got)
			}
		})
	}
	if got := testutil.ToFloat64(f.dropped.WithLabelValues("DCGM_FI_DEV_MEMORY_TEMP")); got != 1 {
		t.Errorf("dropped{field=DCGM_FI_DEV_MEMORY_TEMP} = %g", got)
	}
	if got := testutil.ToFloat64(f.dropped.WithLabelValues("other")); got != 1 {
		t.Errorf("dropped{field=other} = %g", got)
	}
}
