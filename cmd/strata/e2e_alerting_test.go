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
// nowhere. The alert carries global.external_labels, which the rule's
// templates read as $externalLabels, and links to --web.external-url, as
// Prometheus' does, to a page that shows the expression's value; the URL's
// path is the prefix every endpoint is served under.
// testAlert is an alert as Alertmanager's v2 API receives it.
type testAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	GeneratorURL string            `json:"generatorURL"`
}

// fakeAlertmanager serves Alertmanager's POST /api/v2/alerts and returns
// the last alert it received named name (nil: none yet).
func fakeAlertmanager(t *testing.T) (am *httptest.Server, last func(name string) *testAlert) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []testAlert
	)
	am = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v2/alerts" {
			http.NotFound(w, r)
			return
		}
		var as []testAlert
		if err := json.NewDecoder(r.Body).Decode(&as); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, as...)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(am.Close)
	return am, func(name string) *testAlert {
		mu.Lock()
		defer mu.Unlock()
		for i := len(got) - 1; i >= 0; i-- {
			if got[i].Labels["alertname"] == name {
				a := got[i]
				return &a
			}
		}
		return nil
	}
}

func TestAlertingRulesReachAlertmanager(t *testing.T) {
	am, last := fakeAlertmanager(t)

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
          origin: "{{ $externalLabels.cluster }}"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(cfgFile, []byte(`global:
  external_labels:
    cluster: e2e-cluster
rules:
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
	const ext = "https://strata.example.com/oncall"
	p := startStrata(t, filepath.Join(dir, "data"), "--config.file="+cfgFile, "--web.external-url="+ext+"/")
	defer p.stop()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]int{"/oncall/-/ready": 200, "/oncall/api/v1/rules": 200, "/api/v1/rules": 404, "/": 302, "/oncall": 302} {
		resp, err := noRedirect.Get(p.url(path)) //nolint:noctx // test client of a loopback server
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s under the route prefix /oncall: %d, want %d", path, resp.StatusCode, want)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if a := last("E2EAlwaysFiring"); a != nil {
			if a.Labels["severity"] != "page" || a.Annotations["summary"] != "always firing" ||
				a.Labels["cluster"] != "e2e-cluster" || a.Annotations["origin"] != "e2e-cluster" ||
				!strings.HasPrefix(a.GeneratorURL, ext+"/graph?g0.expr=") {
				t.Fatalf("alert %+v", *a)
			}
			// The link opens a page with the expression's value.
			if page := p.get("/oncall" + strings.TrimPrefix(a.GeneratorURL, ext)); !strings.Contains(page, "vector(1) &gt; 0") || !strings.Contains(page, ">1<") {
				t.Fatalf("the alert's link %s opens:\n%s", a.GeneratorURL, page)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no alert of the rule reached the Alertmanager in 60 s; server output:\n%s", p.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestReloadRuleFiles: SIGHUP and POST /-/reload (--web.enable-lifecycle)
// load the rule files again, as they do Prometheus' (Go's default for
// SIGHUP ended the process): a group added to a file is evaluated, a file
// that does not parse leaves the running rules and says so (the reload's
// 500, strata_config_last_reload_successful, runtimeinfo's
// reloadConfigSuccess), the server stays up throughout, and POST /-/quit
// ends it cleanly. rules.files is a glob, as Prometheus' rule_files: a
// file added to the directory loads at the next reload. A reload also
// applies the alerting section: an Alertmanager added receives the alerts
// of a server started without one.
func TestReloadRuleFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rules"), 0o750); err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(dir, "rules", "own.yml")
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
	cfgBody := "rules:\n  files: [" + filepath.Join(dir, "rules", "*.yml") + "]\ndiagnose:\n  enabled: false\n"
	if err := os.WriteFile(cfgFile, []byte(cfgBody), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, filepath.Join(dir, "data"), "--config.file="+cfgFile, "--web.enable-lifecycle")
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

	// POST /-/reload answers when the reload is done; the glob finds a
	// file added.
	write("groups:\n" + group("first"))
	if err := os.WriteFile(filepath.Join(dir, "rules", "added.yml"), []byte("groups:\n"+group("third")), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := p.post("/-/reload", "", ""); code != http.StatusOK {
		t.Fatalf("POST /-/reload: %d %s", code, body)
	}
	if gs := groups(); slices.Contains(gs, "second") || !slices.Contains(gs, "third") {
		t.Fatalf("groups after POST /-/reload: %v", gs)
	}
	reloaded("1")
	write("groups: [this is not a rule file")
	if code, body := p.post("/-/reload", "", ""); code != http.StatusInternalServerError || !strings.Contains(body, "failed to reload config") || !strings.Contains(body, "own.yml") {
		t.Fatalf("POST /-/reload of a bad rule file: %d %s", code, body)
	}
	reloaded("0")
	if info := p.get("/api/v1/status/runtimeinfo"); !strings.Contains(info, `"reloadConfigSuccess":false`) {
		t.Fatalf("runtimeinfo after a failed reload: %s", info)
	}
	if gs := groups(); !slices.Contains(gs, "first") || !slices.Contains(gs, "third") {
		t.Fatalf("a failed reload changed the groups: %v", gs)
	}

	// An Alertmanager added by a reload receives the alerts.
	am, last := fakeAlertmanager(t)
	write("groups:\n" + group("first") + "  - name: alerts\n    interval: 1s\n    rules:\n      - alert: E2EReloaded\n        expr: vector(1)\n")
	if err := os.WriteFile(cfgFile, []byte(cfgBody+"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [\""+strings.TrimPrefix(am.URL, "http://")+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := p.post("/-/reload", "", ""); code != http.StatusOK {
		t.Fatalf("POST /-/reload adding an Alertmanager: %d %s", code, body)
	}
	deadline = time.Now().Add(60 * time.Second)
	for last("E2EReloaded") == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no alert reached the Alertmanager added by the reload in 60 s; /api/v1/alertmanagers: %s\noutput:\n%s", p.get("/api/v1/alertmanagers"), p.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ams := p.get("/api/v1/alertmanagers"); !strings.Contains(ams, strings.TrimPrefix(am.URL, "http://")) {
		t.Errorf("/api/v1/alertmanagers after the reload: %s", ams)
	}

	if code, body := p.post("/-/quit", "", ""); code != http.StatusOK || !strings.Contains(body, "Goodbye") {
		t.Fatalf("POST /-/quit: %d %s", code, body)
	}
	p.wait(60 * time.Second)
	if !p.cmd.ProcessState.Success() || !strings.Contains(p.output(), "Strata stopped cleanly") {
		t.Fatalf("strata exited with %v after POST /-/quit:\n%s", p.cmd.ProcessState, p.output())
	}
}

// TestLifecycleEndpoints: /-/reload and /-/quit answer as Prometheus'
// do without --web.enable-lifecycle (403) and to a GET (405), and neither
// reloads nor quits then.
func TestLifecycleEndpoints(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		var reloads, quits int
		s := &server{reload: func() error { reloads++; return nil }, quit: func() bool { quits++; return true }}
		s.cfg.Web.EnableLifecycle = enabled
		mux := http.NewServeMux()
		s.lifecycle(mux)
		for _, path := range []string{"/-/reload", "/-/quit"} {
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut} {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
				want := http.StatusOK
				switch {
				case method == http.MethodGet:
					want = http.StatusMethodNotAllowed
				case !enabled:
					want = http.StatusForbidden
				}
				if rec.Code != want {
					t.Errorf("lifecycle %v: %s %s: %d %q, want %d", enabled, method, path, rec.Code, rec.Body.String(), want)
				}
			}
		}
		if want := map[bool]int{false: 0, true: 2}[enabled]; reloads != want || quits != want {
			t.Errorf("lifecycle %v: %d reloads and %d quits, want %d", enabled, reloads, quits, want)
		}
	}
	s := &server{quit: func() bool { return false }}
	s.cfg.Web.EnableLifecycle = true
	mux := http.NewServeMux()
	s.lifecycle(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/-/quit", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a second quit: %d %q", rec.Code, rec.Body.String())
	}
}
