package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAlertingRulesReachAlertmanager: an alerting rule of the operator's
// rule files (rules.files) fires and its alert reaches the `alerting:`
// section's Alertmanager, as Prometheus sends it (Alertmanager's v2 API,
// the rule's labels and annotations, a generator URL), with the diagnosis
// engine off: before, the rules were evaluated and their alerts sent
// nowhere.
func TestAlertingRulesReachAlertmanager(t *testing.T) {
	type alert struct {
		Labels       map[string]string `json:"labels"`
		Annotations  map[string]string `json:"annotations"`
		GeneratorURL string            `json:"generatorURL"`
	}
	var (
		mu  sync.Mutex
		got []alert
	)
	am := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v2/alerts" {
			http.NotFound(w, r)
			return
		}
		var as []alert
		if err := json.NewDecoder(r.Body).Decode(&as); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, as...)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer am.Close()

	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "alerts.yml")
	if err := os.WriteFile(rulesFile, []byte(`groups:
  - name: e2e
    interval: 1s
    rules:
      - alert: E2EAlwaysFiring
        expr: vector(1) > 0
        labels:
          severity: page
        annotations:
          summary: always firing
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(cfgFile, []byte(`rules:
  files: [`+rulesFile+`]
diagnose:
  enabled: false
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["`+strings.TrimPrefix(am.URL, "http://")+`"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, filepath.Join(dir, "data"), "--config.file="+cfgFile)
	defer p.stop()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		var a *alert
		for i := range got {
			if got[i].Labels["alertname"] == "E2EAlwaysFiring" {
				a = &got[i]
			}
		}
		mu.Unlock()
		if a != nil {
			if a.Labels["severity"] != "page" || a.Annotations["summary"] != "always firing" ||
				!strings.Contains(a.GeneratorURL, "/graph?g0.expr=") || !strings.HasPrefix(a.GeneratorURL, p.url("")) {
				t.Fatalf("alert %+v", *a)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no alert of the rule reached the Alertmanager in 60 s; server output:\n%s", p.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
