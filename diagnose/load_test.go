package diagnose

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/rules"

	"github.com/strata-dev/strata/tiers"
)

func emptyMinute(t *testing.T) *tiers.Rollup {
	t.Helper()
	r, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(t.TempDir()), quietLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// TestBadRulesAreClearErrors: invalid operator rules stop the engine with
// an error naming the file and, where rulefmt knows it, the line.
func TestBadRulesAreClearErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string { return writeRuleFile(t, dir, name, body) }
	cases := []struct {
		name string
		cfg  func(*Config)
		want []string
	}{
		{"bad expression", func(c *Config) {
			c.RuleFiles = []string{write("bad.yml", "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: rate(x[5m]\n")}
		}, []string{"bad.yml", "5:", "parse error"}},
		{"unknown key", func(c *Config) {
			c.RuleFiles = []string{write("key.yml", "groups:\n  - name: g\n    rulez: []\n")}
		}, []string{"key.yml", "line 3", "rulez"}},
		{"interval", func(c *Config) {
			c.RuleFiles = []string{write("iv.yml", "groups:\n  - name: g\n    interval: 5m\n    rules:\n      - record: r\n        expr: vector(1)\n")}
		}, []string{"iv.yml", `group "g"`, "interval must be 1m"}},
		{"cause without diagnosis", func(c *Config) {
			c.RuleFiles = []string{write("cause.yml", "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: vector(1)\n        labels:\n          alert_type: cause\n")}
		}, []string{"cause.yml", "needs a diagnosis label"}},
		{"bad actions", func(c *Config) {
			c.RuleFiles = []string{write("act.yml", "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: vector(1)\n        labels: {alert_type: cause, diagnosis: mine}\n        annotations:\n          actions: 'not: [a list'\n")}
		}, []string{"act.yml", "annotation actions"}},
		{"glob matches nothing", func(c *Config) { c.RuleFiles = []string{filepath.Join(dir, "none-*.yml")} }, []string{"matches no file"}},
		{"disabled rule unknown", func(c *Config) { c.DisabledRules = []string{"KVCacheEvictionStrom"} }, []string{"KVCacheEvictionStrom", "not in the default pack"}},
		{"runbook of an unknown alert", func(c *Config) { c.RunbookURLs = map[string]string{"PowerCapp": "https://x"} }, []string{"PowerCapp", "not in the default pack"}},
		{"group defined twice", func(c *Config) {
			c.RuleFiles = []string{write("dup.yml", "groups:\n  - name: strata_diagnose_memory\n    rules:\n      - record: r\n        expr: vector(1)\n")}
		}, []string{"dup.yml", "strata_diagnose_memory", "also defined"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			_, err := New(cfg, Options{Minute: emptyMinute(t)})
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalidRules) {
				t.Errorf("error %v does not wrap ErrInvalidRules", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestDisabledRulesAndOperatorFiles: a disabled default rule is gone, an
// operator file's groups are evaluated after the pack, and the engine hides
// every name it records from the minute view.
func TestDisabledRulesAndOperatorFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mine.yml")
	if err := os.WriteFile(p, []byte("groups:\n  - name: mine\n    rules:\n      - record: my:signal\n        expr: vector(1)\n      - alert: Mine\n        expr: my:signal > 0\n        labels: {alert_type: cause, diagnosis: my_cause}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DisabledRules = []string{"UnderBatchedGPU", "strata:gpu_sm_clock:ratio"}
	cfg.RunbookURLs = map[string]string{"PowerCap": "https://wiki.example/power"}
	cfg.RuleFiles = []string{p}
	e, err := New(cfg, Options{Minute: emptyMinute(t)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range e.RuleGroups() {
		for _, r := range g.Rules() {
			names = append(names, r.Name())
			if ar, ok := r.(*rules.AlertingRule); ok && ar.Name() == "PowerCap" && ar.Annotations().Get("runbook_url") != "https://wiki.example/power" {
				t.Errorf("PowerCap runbook_url %q", ar.Annotations().Get("runbook_url"))
			}
		}
	}
	if contains(names, "UnderBatchedGPU") || contains(names, "strata:gpu_sm_clock:ratio") {
		t.Error("a disabled rule is still loaded")
	}
	if !contains(names, "Mine") || !contains(names, "KVCacheEvictionStorm") || names[len(names)-1] != "Mine" {
		t.Errorf("rules in evaluation order: %v", names)
	}
	for _, n := range []string{"my:signal", "strata:kv_cache_usage:ratio", "strata:slo:ttft_seconds:p99", "ALERTS", DiagnosisSeries, "strata:baseline:median"} {
		if !e.isHidden(n) {
			t.Errorf("%s is not hidden from the minute view", n)
		}
	}
	if e.isHidden("vllm:num_requests_waiting") {
		t.Error("a source metric is hidden")
	}
	if e.Warmup() < 2*time.Hour {
		t.Errorf("warm-up %s: the pack reads 2h of its own clock signal", e.Warmup())
	}
}

// TestFastPathSafety: the replay fast path is refused for rules whose range
// evaluation could differ from minute-by-minute evaluation.
func TestFastPathSafety(t *testing.T) {
	for name, tc := range map[string]struct {
		rules string
		safe  bool
	}{
		"plain":         {"      - record: a:x\n        expr: vector(1)\n      - alert: A\n        expr: a:x > 0\n", true},
		"reads later":   {"      - alert: A\n        expr: b:x > 0\n      - record: b:x\n        expr: vector(1)\n", false},
		"reads ALERTS":  {"      - alert: A\n        expr: count(ALERTS) > 0\n", false},
		"regex ALERTS":  {"      - alert: A\n        expr: count({__name__=~\"ALERT.*\"}) > 0\n", false},
		"at start":      {"      - alert: A\n        expr: up @ start() > 0\n", false},
		"regex sources": {"      - alert: A\n        expr: count({__name__=~\"DCGM_.*\"}) > 0\n", true},
		"regex records": {"      - record: a:x\n        expr: vector(1)\n      - alert: A\n        expr: count({__name__=~\"a:.*\"}) > 0\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "r.yml")
			if err := os.WriteFile(p, []byte("groups:\n  - name: g\n    rules:\n"+tc.rules), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.DefaultPack = false
			cfg.RuleFiles = []string{p}
			e, err := New(cfg, Options{Minute: emptyMinute(t)})
			if err != nil {
				t.Fatal(err)
			}
			if got := fastPathSafe(e.groups); got != tc.safe {
				t.Errorf("fastPathSafe = %v, want %v", got, tc.safe)
			}
		})
	}
	e, err := New(DefaultConfig(), Options{Minute: emptyMinute(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !fastPathSafe(e.groups) {
		t.Error("the default pack does not qualify for the fast path")
	}
}

// TestReadSet: snapshots load only the metric names the rules and their
// evidence queries read, and everything when a selector has no name.
func TestReadSet(t *testing.T) {
	e, err := New(DefaultConfig(), Options{Minute: emptyMinute(t)})
	if err != nil {
		t.Fatal(err)
	}
	if e.reads == nil {
		t.Fatal("the default pack loads every series")
	}
	for name, want := range map[string]bool{
		"vllm:kv_cache_usage_perc": true, "DCGM_FI_DEV_GPU_TEMP": true, "DCGM_FI_PROF_SM_ACTIVE": true,
		"vllm:time_to_first_token_seconds_bucket": true, "ebpf_exporter_accept_latency_seconds_bucket": true,
		"DCGM_FI_DEV_ENC_UTIL": false, "vllm:request_params_n_bucket": false, "strata:kv_cache_usage:ratio": false,
	} {
		if got := e.reads.Matches(name); got != want {
			t.Errorf("%s read: %v, want %v", name, got, want)
		}
	}
	p := filepath.Join(t.TempDir(), "r.yml")
	if err := os.WriteFile(p, []byte("groups:\n  - name: g\n    rules:\n      - record: r:x\n        expr: count({job=\"vllm\"})\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RuleFiles = []string{p}
	if e, err = New(cfg, Options{Minute: emptyMinute(t)}); err != nil {
		t.Fatal(err)
	}
	if e.reads != nil {
		t.Error("a selector without a metric name must load every series")
	}
}

// TestEngineRulesPinned: the string queryFunc hands to the engine for each
// rule (the signals' internal form, any other rule's expression) is pinned
// in the engine's parser, so a minute's evaluation parses none of them.
func TestEngineRulesPinned(t *testing.T) {
	e, err := New(DefaultConfig(), Options{Minute: emptyMinute(t)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range e.RuleGroups() {
		for _, r := range g.Rules() {
			n++
			qs := e.forms.Internal(r.Query().String())
			if !e.pinned.Pinned(qs) {
				t.Errorf("group %s, rule %s: %q not pinned", g.Name(), r.Name(), qs)
			}
		}
	}
	if n == 0 {
		t.Fatal("the default engine has no rules")
	}
}

// TestLastDataGroup: the live minute drops its snapshot after the last
// group that reads the minute data; a later group, an evidence query or a
// template's query that reads it keeps the snapshot for them.
func TestLastDataGroup(t *testing.T) {
	minute, _ := openTiers(t, t.TempDir())
	dir := t.TempDir()
	write := func(name, body string) string { return writeRuleFile(t, dir, name, body) }
	const own = "groups:\n  - name: own\n    rules:\n      - record: own:x\n        expr: strata:gpu_power_watts * 2\n"
	for _, c := range []struct {
		name, file string
		want       func(e *Engine) int
	}{
		{"default pack: the signals", "", func(*Engine) int { return 0 }},
		{"a group of recorded series only", own, func(*Engine) int { return 0 }},
		{"a group reading the minute data", "groups:\n  - name: raw\n    rules:\n      - record: own:temp\n        expr: max(DCGM_FI_DEV_GPU_TEMP)\n",
			func(e *Engine) int { return len(e.groups) - 1 }},
		{"a selector of no one name", "groups:\n  - name: any\n    rules:\n      - record: own:any\n        expr: count({__name__=~\"strata:.+\"})\n",
			func(e *Engine) int { return len(e.groups) - 1 }},
		{"evidence reading the minute data", "groups:\n  - name: ev\n    rules:\n      - alert: A\n        expr: strata:gpu_power_watts > 1000\n        annotations:\n          evidence: |\n            - metric: t\n              query: 'max(DCGM_FI_DEV_GPU_TEMP{gpu=\"{{ $labels.gpu }}\"})'\n",
			func(e *Engine) int { return len(e.groups) }},
		{"a template's query", "groups:\n  - name: tq\n    rules:\n      - alert: A\n        expr: strata:gpu_power_watts > 1000\n        annotations:\n          summary: '{{ with query \"up\" }}{{ . }}{{ end }}'\n",
			func(e *Engine) int { return len(e.groups) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if c.file != "" {
				cfg.RuleFiles = []string{write(strings.ReplaceAll(c.name, " ", "_")+".yml", c.file)}
			}
			e, err := New(cfg, Options{Minute: minute})
			if err != nil {
				t.Fatal(err)
			}
			if e.groups[0] != e.signalsGroup {
				t.Fatalf("first group %s, want the signals", e.groups[0].Name())
			}
			if want := c.want(e); e.lastData != want {
				t.Errorf("last group reading the minute data %d, want %d (%d groups)", e.lastData, want, len(e.groups))
			}
		})
	}
}

// writeRuleFile writes body to dir/name and returns its path.
func writeRuleFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
