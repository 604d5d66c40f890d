package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
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

// TestSighupReloadsRuleFiles: SIGHUP loads the rule files again, as it
// does Prometheus' (Go's default ended the process): a group added to a
// file is evaluated, a file that does not parse leaves the running rules
// and says so in strata_config_last_reload_successful, and the server
// stays up throughout.
func TestSighupReloadsRuleFiles(t *testing.T) {
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "own.yml")
	group := func(name string) string {
		return "  - name: " + name + "\n    interval: 1s\n    rules:\n      - record: e2e:" + name + "\n        expr: vector(1)\n"
	}
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(rulesFile, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("groups:\n" + group("first"))
	cfgFile := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(cfgFile, []byte("rules:\n  files: ["+rulesFile+"]\ndiagnose:\n  enabled: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, filepath.Join(dir, "data"), "--config.file="+cfgFile)
	defer p.stop()
	groups := func() []string {
		t.Helper()
		var body struct {
			Data struct {
				Groups []struct {
					Name string `json:"name"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(p.get("/api/v1/rules")), &body); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range body.Data.Groups {
			out = append(out, g.Name)
		}
		return out
	}
	reloaded := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(p.get("/metrics"), "strata_config_last_reload_successful "+want) {
			if time.Now().After(deadline) {
				t.Fatalf("strata_config_last_reload_successful never %s; output:\n%s", want, p.output())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(groups(), "first") {
		if time.Now().After(deadline) {
			t.Fatalf("groups 30 s after the start: %v", groups())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if gs := groups(); slices.Contains(gs, "second") {
		t.Fatalf("groups at start: %v", gs)
	}
	write("groups:\n" + group("first") + group("second"))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for !slices.Contains(groups(), "second") {
		if time.Now().After(deadline) {
			t.Fatalf("the group added is not loaded 30 s after SIGHUP: %v; output:\n%s", groups(), p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	reloaded("1")

	write("groups: [this is not a rule file")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reloaded("0")
	if gs := groups(); !slices.Contains(gs, "first") || !slices.Contains(gs, "second") {
		t.Fatalf("a failed reload changed the groups: %v", gs)
	}
}
