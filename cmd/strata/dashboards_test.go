package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose"
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

// TestDashboardBaselineBands: the baseline bands need an hour of history, more
// than TestDashboardsReturnData pushes, so their data is checked where the
// engine writes them (diagnose's TestLiveEqualsReplay writes the baselines
// back to the raw tier); here every band names, in its metric label, a signal
// the engine tracks by default, and reads the k it writes, so a renamed
// signal cannot leave an empty band behind.
func TestDashboardBaselineBands(t *testing.T) {
	bands := 0
	for _, q := range dashboardQueries(t, "../../dashboards") {
		if !strings.Contains(q.expr, "strata:baseline:") {
			continue
		}
		bands++
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(q.expr)
		if err != nil {
			t.Fatalf("%s / %s: %v", q.dashboard, q.panel, err)
		}
		for _, vs := range parser.ExtractSelectors(expr) {
			var name, metric string
			for _, m := range vs {
				switch m.Name {
				case model.MetricNameLabel:
					name = m.Value
				case "metric":
					if m.Type != labels.MatchEqual {
						t.Errorf("%s / %s: metric label matched with %s, want =", q.dashboard, q.panel, m.Type)
					}
					metric = m.Value
				}
			}
			switch name {
			case "strata:baseline:median", "strata:baseline:sigma":
				if _, ok := diagnose.DefaultBaselineSignals[metric]; !ok {
					t.Errorf("%s / %s: %s{metric=%q} is not a signal the engine tracks by default", q.dashboard, q.panel, name, metric)
				}
			case "strata:baseline:k":
			default:
				if strings.HasPrefix(name, "strata:baseline:") {
					t.Errorf("%s / %s: %s is not a series the engine writes", q.dashboard, q.panel, name)
				}
			}
		}
	}
	if bands < 8 {
		t.Errorf("%d baseline band queries, want the upper and lower band on four panels", bands)
	}
}

// TestDashboardLinks: a panel's data link that reads a label of its series
// (${__field.labels.<name>}) has queries that keep that label, and every
// variable a link uses is defined: the Diagnoses panel's link to a
// diagnosis' page needs the id label and the Strata URL.
func TestDashboardLinks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("../../dashboards", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	labelRef := regexp.MustCompile(`\$\{__field\.labels\.([a-zA-Z_][a-zA-Z0-9_]*)\}`)
	varRef := regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)\}`)
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Templating struct {
				List []struct {
					Name string `json:"name"`
				} `json:"list"`
			} `json:"templating"`
			Panels []struct {
				Title       string `json:"title"`
				FieldConfig struct {
					Defaults struct {
						Links []struct {
							URL string `json:"url"`
						} `json:"links"`
					} `json:"defaults"`
				} `json:"fieldConfig"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		vars := map[string]bool{}
		for _, v := range d.Templating.List {
			vars[v.Name] = true
		}
		for _, p := range d.Panels {
			for _, l := range p.FieldConfig.Defaults.Links {
				links++
				for _, m := range varRef.FindAllStringSubmatch(l.URL, -1) {
					if !vars[m[1]] {
						t.Errorf("%s / %s: link %s uses the undefined variable %s", f, p.Title, l.URL, m[1])
					}
				}
				for _, m := range labelRef.FindAllStringSubmatch(l.URL, -1) {
					for _, tg := range p.Targets {
						expr, err := parser.NewParser(parser.Options{}).ParseExpr(strings.NewReplacer(`"$model"`, `".*"`).Replace(tg.Expr))
						if err != nil {
							t.Fatal(err)
						}
						if agg, ok := expr.(*parser.AggregateExpr); ok && (agg.Without == slices.Contains(agg.Grouping, m[1])) {
							t.Errorf("%s / %s: link %s reads the label %s, which %q drops", f, p.Title, l.URL, m[1], tg.Expr)
						}
					}
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no data link in the dashboards")
	}
}
