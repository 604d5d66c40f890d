package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/dcgmbridge/sim"
)

// dashboardQuery is one PromQL target of a Grafana panel.
type dashboardQuery struct {
	dashboard, panel, expr string
}

// dashboardQueries extracts every PromQL target of the dashboards in dir, with
// the template variables replaced by what Grafana sends for "All".
func dashboardQueries(t *testing.T, dir string) []dashboardQuery {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", dir, err)
	}
	var out []dashboardQuery
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Title  string `json:"title"`
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
			Annotations struct {
				List []struct {
					Name string `json:"name"`
					Expr string `json:"expr"`
				} `json:"list"`
			} `json:"annotations"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", d.Title, p.Title)
			}
			for _, tg := range p.Targets {
				expr := strings.NewReplacer(`"$model"`, `".*"`).Replace(tg.Expr)
				out = append(out, dashboardQuery{d.Title, p.Title, expr})
			}
		}
		for _, a := range d.Annotations.List {
			if a.Expr != "" {
				expr := strings.NewReplacer(`"$model"`, `".*"`).Replace(a.Expr)
				out = append(out, dashboardQuery{d.Title, "annotation " + a.Name, expr})
			}
		}
	}
	return out
}

func TestDashboardQueriesParse(t *testing.T) {
	for _, q := range dashboardQueries(t, "../../dashboards") {
		if strings.Contains(q.expr, "$") {
			t.Errorf("%s / %s: unreplaced template variable in %q", q.dashboard, q.panel, q.expr)
		}
		if _, err := parser.NewParser(parser.Options{}).ParseExpr(q.expr); err != nil {
			t.Errorf("%s / %s: %q does not parse: %v", q.dashboard, q.panel, q.expr, err)
		}
	}
}

// TestDashboardsReturnData feeds a running strata serve with a simulated
// cluster (remote write, as a Prometheus in front of it would) with one
// injected fault and checks that every dashboard query returns data: the
// canonical rules turned the simulator's vLLM, DCGM and eBPF series into
// strata: series, Strata's own metrics were self-scraped, and the diagnosis
// engine wrote its diagnosis of the fault back (the Diagnoses panel and
// annotations). The baseline bands need an hour of history, more than this
// test pushes: TestDashboardBaselineBands checks them.
func TestDashboardsReturnData(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end dashboard test: skipped under -short")
	}
	queries := dashboardQueries(t, "../../dashboards")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "strata.yml")
	cfgYAML := "rules:\n  canonical_interval: 1s\nself_scrape:\n  interval: 1s\n"
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, filepath.Join(dir, "data"), "--config.file="+cfgPath)

	// Twenty minutes of history up to now, pushed as fast as Strata takes it.
	now := time.Now()
	gpu := 0
	cluster, err := sim.New(sim.Config{Seed: 7, Nodes: 1, GPUsPerNode: 2, DCGMFields: "full", Start: now.Add(-20 * time.Minute).Truncate(time.Second),
		Faults: []sim.FaultSpec{{Kind: sim.KindKVCacheStorm, Node: 0, GPU: &gpu, At: 2 * time.Minute, Duration: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stats, err := cluster.PushWith(ctx, sim.PushOptions{URL: p.url("/api/v1/write"), Interval: 5 * time.Second, Duration: 20 * time.Minute})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if stats.SamplesDropped > 0 {
		t.Fatalf("strata refused %d simulated samples", stats.SamplesDropped)
	}

	client := newAPIClient(t, p)
	pending := map[string]dashboardQuery{}
	for _, q := range queries {
		if !strings.Contains(q.expr, "strata:baseline:") {
			pending[q.expr] = q
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		for expr := range pending {
			v, _, _, err := client.Query(ctx, expr, time.Now())
			if err != nil {
				t.Fatalf("%q: %v", expr, err)
			}
			if vec, ok := v.(model.Vector); ok && len(vec) > 0 {
				delete(pending, expr)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	var missing []string
	for _, q := range pending {
		missing = append(missing, fmt.Sprintf("%s / %s: %s", q.dashboard, q.panel, q.expr))
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d of %d dashboard queries returned no data:\n%s", len(missing), len(queries), strings.Join(missing, "\n"))
	}
}
