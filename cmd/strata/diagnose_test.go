package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/diagnose/diagtest"
)

// runStrataOut runs the strata binary and returns its stdout, stderr and error.
func runStrataOut(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(strataBinary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), errb.String(), err
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("strata %v did not finish", args)
	}
	return "", "", nil
}

// TestDiagnoseBadRange: a malformed or inverted time range is a clear error.
func TestDiagnoseBadRange(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from=yesterday"}, "--from: invalid time \"yesterday\""},
		{[]string{"--from=-1h", "--to=2026-13-01T00:00:00Z"}, "--to: invalid time"},
		{[]string{"--from=-1h", "--to=-2h"}, "is not before --to"},
		{[]string{"--format=xml"}, "table,json"},
	} {
		_, stderr, err := runStrataOut(t, append([]string{"diagnose", "--storage.path=" + dir}, tc.args...)...)
		if err == nil || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: err %v, stderr %q, want it to mention %q", tc.args, err, stderr, tc.want)
		}
	}
}

// TestDiagnoseWarnsPastMinuteTier: a replay over a range the minute tier
// does not reach says so, on stderr, beside an answer that is still there.
func TestDiagnoseWarnsPastMinuteTier(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "minute"), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runStrataOut(t, "diagnose", "--storage.path="+dir, "--from=-1h")
	if err != nil || !strings.Contains(stdout, "No diagnoses in this range.") ||
		!strings.Contains(stderr, "the minute tier holds nothing yet") || !strings.Contains(stderr, "--url") {
		t.Fatalf("err %v\nstdout %s\nstderr %s", err, stdout, stderr)
	}
}

// TestDiagnoseReplaysImportedHistory: `strata diagnose --storage.path`
// replays history imported into the minute tier (as `strata backfill`
// does) and prints the fault's diagnosis, as JSON lines and as a table.
func TestDiagnoseReplaysImportedHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates three hours")
	}
	dir := t.TempDir()
	onset := diagtest.Start.Add(2*time.Hour + 30*time.Minute)
	c, err := sim.New(diagtest.SmallCluster(sim.FaultSpec{Kind: sim.KindSpecDecodeDrift, Node: 0, GPU: diagtest.GPU(3), Start: onset, Duration: 20 * time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	minute, hour := diagtest.OpenTiers(t, dir)
	diagtest.Import(t, c, diagtest.Start, onset.Add(40*time.Minute), minute, hour)
	_ = minute.Close()
	_ = hour.Close()
	rng := []string{"--from=" + onset.Add(-10*time.Minute).Format(time.RFC3339), "--to=" + onset.Add(40*time.Minute).Format(time.RFC3339)}
	out, stderr, err := runStrataOut(t, append([]string{"diagnose", "--storage.path=" + dir, "--format=json"}, rng...)...)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var ds []diagnose.Diagnosis
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var d diagnose.Diagnosis
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, sc.Text())
		}
		ds = append(ds, d)
	}
	if len(ds) != 1 || ds[0].Cause != "draft_model_drift" || len(ds[0].Evidence) == 0 || len(ds[0].Actions) == 0 || ds[0].ID == "" {
		t.Fatalf("diagnoses: %s", out)
	}
	table, stderr, err := runStrataOut(t, append([]string{"diagnose", "--storage.path=" + dir}, rng...)...)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	for _, want := range []string{ds[0].ID, "draft_model_drift", "evidence: strata:spec_decode_acceptance:ratio", "action: "} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestDiagnoseAPIAndCLIBesideServe: with strata serve running, the
// diagnosis APIs answer, /api/v1/rules lists the diagnosis groups, and
// `strata diagnose` works both against the data directory (read-only: it
// never takes the TSDB lock) and against the server's URL.
func TestDiagnoseAPIAndCLIBesideServe(t *testing.T) {
	dir := t.TempDir()
	p := startStrata(t, dir)
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(p.url(path)) //nolint:noctx // test
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return resp.StatusCode, body
	}
	if code, body := get("/api/v1/diagnoses"); code != http.StatusOK || body["status"] != "success" {
		t.Errorf("diagnoses: %d %v", code, body)
	}
	if code, body := get("/api/v1/diagnoses?state=bogus"); code != http.StatusBadRequest || !strings.Contains(body["error"].(string), "state") {
		t.Errorf("bad filter: %d %v", code, body)
	}
	if code, _ := get("/api/v1/diagnoses/d-0000000000000000"); code != http.StatusNotFound {
		t.Errorf("unknown id: %d", code)
	}
	// The engine starts just after the server reports ready: poll (bounded).
	names := map[string]bool{}
	for i := 0; i < 100 && !names[diagnose.SignalsGroup]; i++ {
		code, body := get("/api/v1/rules")
		if code != http.StatusOK {
			t.Fatalf("rules: %d %v", code, body)
		}
		for _, g := range body["data"].(map[string]any)["groups"].([]any) {
			names[g.(map[string]any)["name"].(string)] = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{"strata_canonical", diagnose.SignalsGroup, "strata_diagnose_memory", "strata_diagnose_symptoms"} {
		if !names[want] {
			t.Errorf("/api/v1/rules lacks group %s: %v", want, names)
		}
	}
	if code, body := get("/api/v1/alerts"); code != http.StatusOK || body["status"] != "success" {
		t.Errorf("alerts: %d %v", code, body)
	}
	out, stderr, err := runStrataOut(t, "diagnose", "--storage.path="+dir, "--from=-1h")
	if err != nil || !strings.Contains(out, "No diagnoses") {
		t.Errorf("diagnose beside serve: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err = runStrataOut(t, "diagnose", "--url="+p.url(""), "--from=-1h", "--format=json")
	if err != nil || out != "" {
		t.Errorf("diagnose --url: %v\n%s%s", err, out, stderr)
	}
}

// TestServeRejectsBadDiagnosisConfig: an invalid operator rule file and an
// unknown key stop serve at start with the file and line.
func TestServeRejectsBadDiagnosisConfig(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "mine.yml")
	if err := os.WriteFile(rules, []byte("groups:\n  - name: mine\n    rules:\n      - alert: Broken\n        expr: sum(rate(x[5m])\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ cfg, want string }{
		"bad rule":    {"diagnose:\n  rule_files: [" + rules + "]\n", "mine.yml: 5:15: group \"mine\""},
		"unknown key": {"diagnose:\n  enabled: true\n  rule_file: []\n", "line 3: field rule_file not found"},
		"bad slo":     {"diagnose:\n  rate_window: 1m\n", "rate_window must be at least 3m"},
		"alerting":    {"alerting:\n  alertmanagers:\n    - schema: http\n", "field schema not found"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "strata.yml")
			if err := os.WriteFile(cfg, []byte(tc.cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			_, stderr, err := runStrataOut(t, "serve", "--config.file="+cfg, "--storage.path="+filepath.Join(t.TempDir(), "data"), "--web.listen-address=127.0.0.1:0")
			if err == nil || !strings.Contains(stderr, tc.want) {
				t.Errorf("err %v, stderr %q, want it to mention %q", err, stderr, tc.want)
			}
		})
	}
}
