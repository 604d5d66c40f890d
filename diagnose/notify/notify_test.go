package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/diagnose/diagtest"
)

func firing(id string, conf float64) diagnose.Diagnosis {
	return diagnose.Diagnosis{ID: id, Cause: "power_cap", State: diagnose.StateFiring, Confidence: conf, Rule: "PowerCap",
		Start: diagtest.Start, Entities: diagnose.Entities{Host: "h", GPU: "1"}}
}

// TestWebhookNeverBlocks: a webhook that hangs or fails never blocks the
// engine's Update; deliveries are retried, then counted as failed, and
// events beyond the queue are dropped and counted.
func TestWebhookNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer hang.Close()
	defer close(release)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	// The timeout leaves a loaded machine time to reach the handler: a
	// post that times out before it does is not counted in calls (50 ms
	// failed so beside make test's other half and a benchmark).
	w := NewWebhook(diagnose.WebhookConfig{URL: hang.URL, MinConfidence: 0.5, MaxRetries: 1, Timeout: model.Duration(500 * time.Millisecond)}, m, diagtest.QuietLogger(), time.Millisecond)
	defer w.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 3000 {
			w.Update(diagnose.Update{Changed: []diagnose.Diagnosis{firing(fmt.Sprint("d-", i), 0.9)}})
		}
		// Below the confidence: never sent.
		w.Update(diagnose.Update{Changed: []diagnose.Diagnosis{firing("d-low", 0.1)}})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Update blocked on a hanging webhook")
	}
	if dropped := testutil.ToFloat64(m.dropped.WithLabelValues("webhook")); dropped < 1000 {
		t.Errorf("%v events dropped, want the overflow of the 1000-event queue counted", dropped)
	}
	for i := 0; i < 1000 && testutil.ToFloat64(m.failed.WithLabelValues("webhook")) < 2; i++ {
		time.Sleep(10 * time.Millisecond) // deliveries time out after 500 ms; bounded wait
	}
	if failed := testutil.ToFloat64(m.failed.WithLabelValues("webhook")); failed < 2 {
		t.Errorf("%v deliveries counted failed", failed)
	}
	if c := calls.Load(); c < 4 {
		t.Errorf("%d calls: each failed delivery is retried once", c)
	}
}

// TestWebhookBody: the firing and resolved events carry the diagnosis JSON.
func TestWebhookBody(t *testing.T) {
	var mu sync.Mutex
	var got []WebhookEvent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev WebhookEvent
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			t.Error(err)
		}
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}))
	defer srv.Close()
	w := NewWebhook(diagnose.WebhookConfig{URL: srv.URL, Causes: []string{"power_cap"}}, NewMetrics(prometheus.NewRegistry()), diagtest.QuietLogger(), time.Millisecond)
	d := firing("d-1", 0.9)
	w.Update(diagnose.Update{Changed: []diagnose.Diagnosis{d}})
	w.Update(diagnose.Update{Changed: []diagnose.Diagnosis{d}}) // an update: no second firing event
	other := firing("d-2", 0.9)
	other.Cause = "thermal_throttle"
	w.Update(diagnose.Update{Changed: []diagnose.Diagnosis{other}}) // not a cause of this hook
	end := d.Start.Add(time.Hour)
	d.State, d.End = diagnose.StateResolved, &end
	w.Update(diagnose.Update{Changed: []diagnose.Diagnosis{d}})
	for i := 0; i < 500; i++ {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.Stop()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Event != "firing" || got[1].Event != "resolved" || got[0].Diagnosis.ID != "d-1" || got[1].Diagnosis.End == nil {
		t.Fatalf("events: %+v", got)
	}
}

// TestAlertmanagerDownNeverBlocks: with the Alertmanager unreachable, the
// sink's Update returns at once (Prometheus' notifier queues and counts).
func TestAlertmanagerDownNeverBlocks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there any more
	am, err := NewAlertmanager(alertingTo(addr), labels.EmptyLabels(), &url.URL{Scheme: "http", Host: "strata"}, diagtest.QuietLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer am.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			am.Update(diagnose.Update{Open: []diagnose.Diagnosis{firing(fmt.Sprint("d-", i), 0.9)}})
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Update blocked on an unreachable Alertmanager")
	}
}

func alertingTo(addr string) config.AlertingConfig {
	amc := config.DefaultAlertmanagerConfig
	amc.ServiceDiscoveryConfigs = discovery.Configs{discovery.StaticConfig{{Targets: []model.LabelSet{{model.AddressLabel: model.LabelValue(addr)}}, Source: "0"}}}
	amc.Timeout = model.Duration(2 * time.Second)
	return config.AlertingConfig{AlertmanagerConfigs: config.AlertmanagerConfigs{&amc}}
}

// TestAlertmanagerEndToEnd runs a real Alertmanager (built from
// github.com/prometheus/alertmanager v0.35.0, the module's version): a
// simulated power cap becomes one alert there with the diagnosis labels,
// and the alert resolves after the fault ends.
func TestAlertmanagerEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Alertmanager")
	}
	dir := t.TempDir()
	bin := buildAlertmanager(t, dir)
	cfgPath := filepath.Join(dir, "am.yml")
	if err := os.WriteFile(cfgPath, []byte("route:\n  receiver: none\n  group_wait: 1s\nreceivers:\n  - name: none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfgPath, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	api := "http://" + addr + "/api/v2/alerts"
	waitUp(t, "http://"+addr+"/-/ready")

	// The fault: a power cap on GPU 1 from 02:30 to 02:50; the engine runs
	// minute by minute over the imported history with the sink attached.
	onset := diagtest.Start.Add(2*time.Hour + 30*time.Minute)
	scfg := diagtest.SmallCluster(sim.FaultSpec{Kind: sim.KindPowerCap, Node: 0, GPU: diagtest.GPU(1), Start: onset, Duration: 20 * time.Minute})
	minute := diagtest.SimHistory(t, scfg, onset.Add(45*time.Minute))
	sink, err := NewAlertmanager(alertingTo(addr), labels.EmptyLabels(), &url.URL{Scheme: "http", Host: "strata"}, diagtest.QuietLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Stop()
	e, err := diagnose.New(diagnose.DefaultConfig(), diagnose.Options{Minute: minute, Sinks: []diagnose.Sink{sink}, Logger: diagtest.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	tm := onset.Add(-e.Warmup())
	evalUntil := func(until time.Time) {
		for ; !tm.After(until); tm = tm.Add(time.Minute) {
			if err := e.EvalMinute(context.Background(), tm); err != nil {
				t.Fatal(err)
			}
		}
	}
	evalUntil(onset.Add(10 * time.Minute))
	alerts := pollAlerts(t, api, func(as []amAlert) bool { return len(as) > 0 })
	if len(alerts) != 1 {
		t.Fatalf("%d alerts in Alertmanager, want one: %+v", len(alerts), alerts)
	}
	a := alerts[0]
	for k, v := range map[string]string{"alertname": "PowerCap", "diagnosis": "power_cap", "severity": "warning", "dimension": "compute", "host": "gpu-node-0", "gpu": "1"} {
		if a.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, a.Labels[k], v, a.Labels)
		}
	}
	if a.Status.State != "active" || a.Annotations["summary"] == "" || !strings.Contains(a.Annotations["evidence"], "strata:gpu_sm_clock:ratio") {
		t.Errorf("alert %+v", a)
	}
	if !a.EndsAt.After(time.Now()) {
		t.Errorf("endsAt %s is not in the future: Alertmanager would resolve the alert at once", a.EndsAt)
	}
	// After the fault (and keep_firing_for) the diagnosis resolves, and so
	// does the alert.
	evalUntil(onset.Add(45 * time.Minute))
	pollAlerts(t, api+"?active=true&silenced=false&inhibited=false&unprocessed=false", func(as []amAlert) bool {
		for _, a := range as {
			if a.EndsAt.After(time.Now()) {
				return false
			}
		}
		return true
	})
}

// alertmanagerVersion is the Alertmanager the end-to-end test runs.
const alertmanagerVersion = "v0.35.0"

// buildAlertmanager builds Alertmanager from its module, in a module of
// its own: its dependency versions differ from Strata's (automemlimit), and
// its web UI assets are generated files that the module does not ship, so
// the copy gets a placeholder page.
func buildAlertmanager(t *testing.T, dir string) string {
	t.Helper()
	run := func(wd string, args ...string) []byte {
		cmd := exec.Command("go", args...)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(run(dir, "mod", "download", "-json", "github.com/prometheus/alertmanager@"+alertmanagerVersion), &mod); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "am")
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		t.Fatal(err)
	}
	for _, ui := range []string{"elm", "mantine"} {
		p := filepath.Join(src, "ui", "app", "dist", ui)
		if err := os.MkdirAll(p, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "index.html"), []byte("<html>Alertmanager UI not built</html>"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := filepath.Join(dir, "build")
	if err := os.MkdirAll(b, 0o750); err != nil {
		t.Fatal(err)
	}
	gomod := "module ambuild\n\ngo 1.26.7\n\nrequire github.com/prometheus/alertmanager " + alertmanagerVersion + "\n\nreplace github.com/prometheus/alertmanager => ../am\n"
	tools := "//go:build tools\n\npackage main\n\nimport _ \"github.com/prometheus/alertmanager/cmd/alertmanager\"\n"
	if err := os.WriteFile(filepath.Join(b, "go.mod"), []byte(gomod), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, "tools.go"), []byte(tools), 0o600); err != nil {
		t.Fatal(err)
	}
	run(b, "mod", "tidy")
	bin := filepath.Join(dir, "alertmanager")
	run(b, "build", "-o", bin, "github.com/prometheus/alertmanager/cmd/alertmanager")
	return bin
}

type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	EndsAt      time.Time         `json:"endsAt"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

func waitUp(t *testing.T, u string) {
	t.Helper()
	for range 300 {
		if resp, err := http.Get(u); err == nil { //nolint:noctx // test polling loop
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never became ready", u)
}

// pollAlerts reads Alertmanager's alerts until ok (bounded: 30 s).
func pollAlerts(t *testing.T, u string, ok func([]amAlert) bool) []amAlert {
	t.Helper()
	var as []amAlert
	for range 300 {
		resp, err := http.Get(u) //nolint:noctx // test polling loop
		if err != nil {
			t.Fatal(err)
		}
		as = nil
		err = json.NewDecoder(resp.Body).Decode(&as)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ok(as) {
			return as
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Alertmanager never reached the expected state: %+v", as)
	return nil
}
