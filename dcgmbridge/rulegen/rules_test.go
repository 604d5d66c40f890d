package rulegen

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/dcgmbridge"
)

var update = flag.Bool("update", false, "rewrite rules/canonical.rules.yml and docs/metrics.md from the catalogue")

// readFixture reads one of the exporter fixtures of package dcgmbridge
// (../testdata/README.md gives their sources).
func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newTestCatalogue(t testing.TB) *dcgmbridge.Catalogue {
	t.Helper()
	c, err := dcgmbridge.NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCommittedArtefacts checks that the committed rule file and metric docs
// are what the catalogue generates, so neither can drift from the code.
func TestCommittedArtefacts(t *testing.T) {
	c := newTestCatalogue(t)
	cfg := DefaultConfig()
	rulesYAML, err := YAML(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := MetricsDoc(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want []byte
	}{
		{filepath.Join("..", "..", "rules", "canonical.rules.yml"), rulesYAML},
		{filepath.Join("..", "..", "docs", "metrics.md"), doc},
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
				t.Fatalf("%s is stale: run go test ./dcgmbridge/rulegen -run TestCommittedArtefacts -update", tc.path)
			}
		})
	}
}

func TestRulesLoadWithRulefmtAndParser(t *testing.T) {
	c := newTestCatalogue(t)
	for name, cfg := range map[string]Config{
		"by pod":      DefaultConfig(),
		"by host+gpu": func() Config { c := DefaultConfig(); c.Joins = JoinByHostGPU(); return c }(),
		"with bpftrace": func() Config {
			c := DefaultConfig()
			c.NetworkHistograms = []HistogramSource{{Name: "bpftrace_tcpaccept_usecs", Scale: 1e6, Sparse: true}}
			return c
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			groups, err := Groups(c, cfg)
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
			if _, err := RecordingRules(c, cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRulesConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"join label not in gpu", func(c *Config) { c.Joins.On = []string{"model_name"} }, "must be in both"},
		{"empty serving", func(c *Config) { c.Joins.Serving = nil }, "serving labels are empty"},
		{"le as label", func(c *Config) { c.Joins.Host = []string{"le"} }, "not usable"},
		{"zero window", func(c *Config) { c.RateWindow = 0 }, "rate window"},
		{"bad histogram", func(c *Config) { c.NetworkHistograms = []HistogramSource{{Name: "a-b"}} }, "not a valid metric name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}
