package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/dcgmbridge/rulegen"
	"github.com/strata-dev/strata/diagnose"
)

type apiRule struct {
	Name           string    `json:"name"`
	Query          string    `json:"query"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	EvaluationTime float64   `json:"evaluationTime"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

type apiRuleGroup struct {
	Name           string    `json:"name"`
	Interval       float64   `json:"interval"`
	EvaluationTime float64   `json:"evaluationTime"`
	LastEvaluation time.Time `json:"lastEvaluation"`
	Rules          []apiRule `json:"rules"`
}

// TestRulesAPIShowsExportedForm: /api/v1/rules lists the canonical rules
// with the expressions of the rule file the server writes (the exported
// form, which a user can paste into a query), not the internal form it
// evaluates, and with the live state of their evaluation.
func TestRulesAPIShowsExportedForm(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(cfgPath, []byte("rules:\n  canonical_interval: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	start := time.Now()
	p := startStrata(t, data, "--config.file="+cfgPath)

	// The first evaluation comes within an interval of the start: poll
	// (bounded) until every rule has been evaluated.
	var canonical, signals *apiRuleGroup
	var all []apiRuleGroup
	for i := 0; i < 150; i++ {
		all = getRuleGroups(t, p)
		canonical, signals = nil, nil
		for gi := range all {
			switch all[gi].Name {
			case "strata_canonical":
				canonical = &all[gi]
			case diagnose.SignalsGroup:
				signals = &all[gi]
			}
		}
		if canonical != nil && evaluatedSince(canonical, start) && signals != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if canonical == nil || !evaluatedSince(canonical, start) || signals == nil {
		t.Fatalf("within 15 s, the canonical group was not evaluated (%+v) or the diagnosis signals were not listed (%v)", canonical, signals != nil)
	}
	p0 := parser.NewParser(parser.Options{})
	file, errs := rulefmt.ParseFile(filepath.Join(data, "rules", "canonical.rules.yml"), false, model.UTF8Validation, p0, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var want []apiRule
	for _, r := range file.Groups[0].Rules {
		e, err := p0.ParseExpr(r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, apiRule{Name: r.Record, Query: e.String()})
	}

	if canonical.Interval != 1 || canonical.EvaluationTime <= 0 {
		t.Errorf("group interval %g s, evaluation time %g s: want 1 s and the last evaluation's", canonical.Interval, canonical.EvaluationTime)
	}
	if len(canonical.Rules) != len(want) {
		t.Fatalf("%d rules listed, the file has %d", len(canonical.Rules), len(want))
	}
	for i, r := range canonical.Rules {
		if r.Name != want[i].Name || r.Query != want[i].Query {
			t.Errorf("rule %d: listed %s\n  %s\nthe file has %s\n  %s", i, r.Name, r.Query, want[i].Name, want[i].Query)
		}
		if r.Health != "ok" || r.LastError != "" || r.EvaluationTime <= 0 {
			t.Errorf("rule %s: health %q, last error %q, evaluation time %g: want a healthy evaluation", r.Name, r.Health, r.LastError, r.EvaluationTime)
		}
	}
	// No group (the diagnosis engine's signals included) shows the
	// internal form's matchers, which select nothing in a user's query.
	for _, g := range all {
		for _, r := range g.Rules {
			if strings.Contains(r.Query, rulegen.RenameLabel) || strings.Contains(r.Query, rulegen.BelowLabel) {
				t.Errorf("group %s, rule %s lists the internal form: %s", g.Name, r.Name, r.Query)
			}
		}
	}
}

// evaluatedSince reports whether g and each of its rules were last
// evaluated after start.
func evaluatedSince(g *apiRuleGroup, start time.Time) bool {
	if g.LastEvaluation.Before(start) || len(g.Rules) == 0 {
		return false
	}
	for _, r := range g.Rules {
		if r.LastEvaluation.Before(start) {
			return false
		}
	}
	return true
}

func getRuleGroups(t *testing.T, p *strataProc) []apiRuleGroup {
	t.Helper()
	resp, err := http.Get(p.url("/api/v1/rules")) //nolint:noctx // test
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Groups []apiRuleGroup `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("/api/v1/rules: %d %s %v", resp.StatusCode, body.Status, err)
	}
	return body.Data.Groups
}

// TestExpandRuleFiles: rules.files' patterns are globs, as Prometheus'
// rule_files, expanded in name order; a glob matching nothing loads
// nothing, a plain path that does not exist is an error naming it.
func TestExpandRuleFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.yml", "a.yml", "c.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("groups: []\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := expandRuleFiles([]string{filepath.Join(dir, "*.yml"), filepath.Join(dir, "c.yaml"), filepath.Join(dir, "none", "*.yml")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "a.yml"), filepath.Join(dir, "b.yml"), filepath.Join(dir, "c.yaml")}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	missing := filepath.Join(dir, "missing.yml")
	if _, err := expandRuleFiles([]string{missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a missing plain path: %v", err)
	}
	if _, err := expandRuleFiles([]string{filepath.Join(dir, "[")}); err == nil {
		t.Fatal("a bad pattern: no error")
	}
}
