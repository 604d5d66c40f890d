package dcgmbridge

import (
	"bytes"
	"encoding/csv"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

var update = flag.Bool("update", false, "rewrite rules/canonical.rules.yml and docs/metrics.md from the catalogue")

// fixturesDir holds the exporter fixtures (testdata/README.md gives their
// sources).
func fixturesDir(t testing.TB) string {
	t.Helper()
	const dir = "testdata"
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("fixtures not found: %v", err)
	}
	return dir
}

func newTestCatalogue(t testing.TB) *Catalogue {
	t.Helper()
	c, err := NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCommittedArtefacts checks that the committed rule file and metric docs
// are what the catalogue generates, so neither can drift from the code.
func TestCommittedArtefacts(t *testing.T) {
	c := newTestCatalogue(t)
	cfg := DefaultRulesConfig()
	rulesYAML, err := c.RulesYAML(cfg)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := c.MetricsDoc(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want []byte
	}{
		{filepath.Join("..", "rules", "canonical.rules.yml"), rulesYAML},
		{filepath.Join("..", "docs", "metrics.md"), doc},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			if *update {
				if err := os.WriteFile(tc.path, tc.want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("%s is stale: run go test ./dcgmbridge -run TestCommittedArtefacts -update", tc.path)
			}
		})
	}
}

func TestRulesLoadWithRulefmtAndParser(t *testing.T) {
	c := newTestCatalogue(t)
	for name, cfg := range map[string]RulesConfig{
		"by pod":      DefaultRulesConfig(),
		"by host+gpu": func() RulesConfig { c := DefaultRulesConfig(); c.Joins = JoinByHostGPU(); return c }(),
		"with bpftrace": func() RulesConfig {
			c := DefaultRulesConfig()
			c.NetworkHistograms = []HistogramSource{{Name: "bpftrace_tcpaccept_usecs", Scale: 1e6, Sparse: true}}
			return c
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			groups, err := c.RuleGroups(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(groups.Groups) != 1 || len(groups.Groups[0].Rules) != len(c.Canonical) {
				t.Fatalf("want 1 group with %d rules, got %+v", len(c.Canonical), groups)
			}
			p := parser.NewParser(parser.Options{})
			for _, r := range groups.Groups[0].Rules {
				if !strings.HasPrefix(r.Record, "strata:") {
					t.Errorf("rule %s is not strata:-prefixed", r.Record)
				}
				if r.Labels["strata_cause"] == "" || r.Labels["strata_felt"] == "" {
					t.Errorf("rule %s lacks an axis label: %v", r.Record, r.Labels)
				}
				if _, err := p.ParseExpr(r.Expr); err != nil {
					t.Errorf("rule %s: %v", r.Record, err)
				}
				for _, want := range cfg.Joins.On {
					if strings.Contains(r.Record, "serving_gpu") && !strings.Contains(r.Expr, want) {
						t.Errorf("join rule %s does not join on %s", r.Record, want)
					}
				}
			}
			if _, err := c.RecordingRules(cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRulesConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*RulesConfig)
		want string
	}{
		{"join label not in gpu", func(c *RulesConfig) { c.Joins.On = []string{"model_name"} }, "must be in both"},
		{"empty serving", func(c *RulesConfig) { c.Joins.Serving = nil }, "serving labels are empty"},
		{"le as label", func(c *RulesConfig) { c.Joins.Host = []string{"le"} }, "not usable"},
		{"zero window", func(c *RulesConfig) { c.RateWindow = 0 }, "rate window"},
		{"bad histogram", func(c *RulesConfig) { c.NetworkHistograms = []HistogramSource{{Name: "a-b"}} }, "not a valid metric name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultRulesConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
	if err := DefaultRulesConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestFieldCatalogueMatchesFixture checks the embedded field table against the
// extracted dcgm_fields.h list and every field named by dcgm-exporter's CSVs.
func TestFieldCatalogueMatchesFixture(t *testing.T) {
	c := newTestCatalogue(t)
	dir := fixturesDir(t)
	f, err := os.Open(filepath.Join(dir, "dcgm_field_ids.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs)-1 != len(c.Fields) {
		t.Errorf("fixture has %d fields, catalogue %d", len(recs)-1, len(c.Fields))
	}
	for _, rec := range recs[1:] {
		id, err := strconv.Atoi(rec[2])
		if err != nil {
			t.Fatal(err)
		}
		got, ok := c.Field(id)
		if !ok {
			t.Errorf("field %d (%s) missing", id, rec[0])
			continue
		}
		if got.Legacy != rec[0] || got.DCGM46 != rec[1] {
			t.Errorf("field %d: got %s/%s, fixture %s/%s", id, got.Legacy, got.DCGM46, rec[0], rec[1])
		}
		for _, n := range got.Names() {
			if back, _ := c.FieldByName(n); back.ID != id {
				t.Errorf("name %s resolves to %d, want %d", n, back.ID, id)
			}
		}
	}
	// Every enabled field of the exporter CSVs that DCGM's header lists must
	// carry the exporter's type (the 1.x CSV uses lowercase names).
	for _, name := range []string{"dcgm-exporter_default-counters.csv", "dcgm-exporter_dcp-metrics-included.csv", "dcgm-exporter_1.x-compatibility-metrics.csv"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			known := 0
			for line := range strings.SplitSeq(string(b), "\n") {
				line = strings.TrimSpace(line)
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				parts := strings.Split(line, ",")
				field, typ := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
				got, ok := c.FieldByName(field)
				if !ok {
					continue // fields outside dcgm_field_ids.csv are stored as-is
				}
				known++
				if got.Type != typ && (got.ID < 1009 || got.ID > 1010) { // PCIe bytes: counter in 1.x, gauge since
					t.Errorf("%s: exporter type %s, catalogue %s", field, typ, got.Type)
				}
			}
			if known == 0 {
				t.Fatal("no field of the CSV is in the catalogue")
			}
		})
	}
}

func TestLookup(t *testing.T) {
	c := newTestCatalogue(t)
	for _, tc := range []struct {
		name, want string
	}{
		{"vllm:kv_cache_usage_perc", "strata:kv_cache_usage:ratio"},
		{"vllm:gpu_cache_usage_perc", "strata:kv_cache_usage:ratio"},
		{"vllm:time_to_first_token_seconds_bucket", "strata:ttft_seconds:p99"},
		{"DCGM_FI_PROF_SM_UTIL_RATIO", "strata:gpu_sm_active:ratio"},
		{"dcgm_gpu_utilization", "strata:gpu_sm_active:ratio"},
		{"ebpf_exporter_accept_latency_seconds_count", "strata:network_latency_seconds:p99"},
		{"sglang:token_usage", "strata:kv_cache_usage:ratio"},
		{"nv_inference_queue_duration_us", `strata:latency_seconds:component{component="queue"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var all []string
			for _, m := range c.Lookup(tc.name) {
				all = append(all, m.Canonical...)
			}
			if !strings.Contains(strings.Join(all, " "), tc.want) {
				t.Fatalf("%s maps to %v, want %s", tc.name, all, tc.want)
			}
		})
	}
	if got := c.Lookup("vllm:iteration_tokens_total"); len(got) != 1 || got[0].Type != "histogram" {
		t.Fatalf("iteration_tokens_total: %+v", got)
	}
	if got := c.Lookup("no_such_metric"); got != nil {
		t.Fatalf("unknown metric: %+v", got)
	}
}
