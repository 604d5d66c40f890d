package main

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.* from the current output")

// TestStatusYAMLDefault pins /api/v1/status/config for the embedded default
// (testdata/status-config-default.golden.yml; -update rewrites it), and
// checks it reads back as the same configuration.
func TestStatusYAMLDefault(t *testing.T) {
	cfg, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	got, err := cfg.statusYAML()
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "status-config-default.golden.yml")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("status YAML differs from %s (go test -run TestStatusYAMLDefault -update rewrites it)\n got:\n%s", golden, got)
	}
	path := filepath.Join(t.TempDir(), "strata.yml")
	if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := loadConfig(path)
	if err != nil {
		t.Fatalf("the status YAML is not a valid configuration file: %v", err)
	}
	if again, err := back.statusYAML(); err != nil || again != got {
		t.Errorf("the status YAML does not read back as the same configuration: %v\n%s", err, again)
	}
}

func TestMaskSecrets(t *testing.T) {
	in := `
sources:
  targets:
    - url: http://scraper:s3cr3t@gpu-node-1:9400/metrics
      labels: {pod: vllm-0}
    - url: http://vllm-0:8000/metrics
  basic_auth:
    username: scraper
    password: s3cr3t
    password_file: /etc/strata/password
  authorization:
    credentials: abc
    credentials_file: /etc/strata/token
  bearer_token: xyz
  oauth2:
    client_secret: shh
    client_secret_file: ""
  tokens: [a, b]
  empty_password: ""
`
	want := `sources:
  targets:
    - url: http://scraper:xxxxx@gpu-node-1:9400/metrics
      labels: {pod: vllm-0}
    - url: http://vllm-0:8000/metrics
  basic_auth:
    username: scraper
    password: <secret>
    password_file: /etc/strata/password
  authorization:
    credentials: <secret>
    credentials_file: /etc/strata/token
  bearer_token: <secret>
  oauth2:
    client_secret: <secret>
    client_secret_file: ""
  tokens: [<secret>, <secret>]
  empty_password: ""
`
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(in), &doc); err != nil {
		t.Fatal(err)
	}
	maskSecrets(&doc, false)
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Errorf("masked:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestStatusFlags: /api/v1/status/flags lists every visible flag of strata
// serve and of the application with its effective value, whether it came
// from the command line, the configuration file or the embedded default.
func TestStatusFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "strata.yml")
	if err := os.WriteFile(file, []byte("query:\n  timeout: 1m\nweb:\n  cors_origin: https://grafana\\.example\\.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCLI()
	if _, err := c.app.Parse([]string{"serve", "--config.file=" + file, "--storage.path=/srv/strata", "--storage.remote.read-max-bytes-in-frame=2097152", "--log.level=debug"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(c.serve.configFile)
	if err != nil {
		t.Fatal(err)
	}
	c.serve.flags.applyTo(&cfg)
	got := statusFlags(c.app, c.serve.cmd.FullCommand(), c.serve.flags, &cfg)
	for name, want := range map[string]string{
		"config.file":                            file,
		"storage.path":                           "/srv/strata",                   // flag
		"query.timeout":                          "1m",                            // file
		"web.cors.origin":                        `https://grafana\.example\.com`, // file
		"web.listen-address":                     ":9201",                         // embedded default
		"storage.remote.read-max-bytes-in-frame": "2MiB",                          // flag, in the configuration's unit
		"storage.remote.read-sample-limit":       "50000000",
		"log.level":                              "debug", // the application's own
		"web.enable-pprof":                       "false",
	} {
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
	if _, ok := got["help-long"]; ok {
		t.Error("hidden flag help-long listed")
	}
	if _, ok := got["sim.config"]; ok {
		t.Error("a flag of strata simulate is listed for strata serve")
	}
	// Every visible flag of serve is there.
	for _, cmd := range c.app.Model().Commands {
		if cmd.Name != "serve" {
			continue
		}
		for _, f := range cmd.Flags {
			if _, ok := got[f.Name]; !ok && !f.Hidden {
				t.Errorf("flag %s missing", f.Name)
			}
		}
	}
}

// TestStatusEndpoints: strata serve answers /api/v1/status/config and
// /api/v1/status/flags with its effective configuration and flags,
// /api/v1/status/runtimeinfo with its process's (GOGC in force, the tiers'
// retention) and /api/v1/status/tsdb with its raw head's statistics (the
// chunk count read from the raw TSDB's own metrics).
func TestStatusEndpoints(t *testing.T) {
	file := filepath.Join(t.TempDir(), "strata.yml")
	if err := os.WriteFile(file, []byte("query:\n  max_samples: 1234567\nself_scrape:\n  interval: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, t.TempDir(), "--config.file="+file, "--query.max-concurrency=7")

	var cfgReply struct {
		Status string `json:"status"`
		Data   struct {
			YAML string `json:"yaml"`
		} `json:"data"`
	}
	getJSON(t, p.url("/api/v1/status/config"), &cfgReply)
	var served Config
	if err := yaml.Unmarshal([]byte(cfgReply.Data.YAML), &served); err != nil {
		t.Fatalf("status/config YAML: %v\n%s", err, cfgReply.Data.YAML)
	}
	if served.Query.MaxSamples != 1234567 || served.Query.MaxConcurrency != 7 || served.Web.ListenAddress != "127.0.0.1:0" {
		t.Errorf("status/config: max_samples %d (file: 1234567), max_concurrency %d (flag: 7), listen_address %q (flag)",
			served.Query.MaxSamples, served.Query.MaxConcurrency, served.Web.ListenAddress)
	}

	var flagsReply struct {
		Status string            `json:"status"`
		Data   map[string]string `json:"data"`
	}
	getJSON(t, p.url("/api/v1/status/flags"), &flagsReply)
	if f := flagsReply.Data; f["query.max-samples"] != "1234567" || f["query.max-concurrency"] != "7" || f["config.file"] != file {
		t.Errorf("status/flags = %v", f)
	}

	var rtReply struct {
		Data struct {
			GOGC             string `json:"GOGC"`
			GOMAXPROCS       int    `json:"GOMAXPROCS"`
			StorageRetention string `json:"storageRetention"`
			StartTime        string `json:"startTime"`
		} `json:"data"`
	}
	getJSON(t, p.url("/api/v1/status/runtimeinfo"), &rtReply)
	wantGOGC := os.Getenv("GOGC")
	if wantGOGC == "" {
		wantGOGC = "50" // --runtime.gogc's default
	}
	if rt := rtReply.Data; rt.GOGC != wantGOGC || rt.GOMAXPROCS < 1 || rt.StorageRetention != "1d raw, 30d minute, 1y hour" || rt.StartTime == "" {
		t.Errorf("status/runtimeinfo = %+v, want GOGC %s and the default retentions", rt, wantGOGC)
	}
	var tsdbReply struct {
		Data struct {
			HeadStats struct {
				NumSeries  uint64 `json:"numSeries"`
				ChunkCount int64  `json:"chunkCount"`
			} `json:"headStats"`
		} `json:"data"`
	}
	getJSON(t, p.url("/api/v1/status/tsdb"), &tsdbReply)
	// Prometheus' handler reports an int64 NaN (a negative count) when it
	// finds no prometheus_tsdb_head_chunks.
	if hs := tsdbReply.Data.HeadStats; hs.ChunkCount < 0 {
		t.Errorf("status/tsdb head stats %+v: the head's chunk count was not found", hs)
	}

	// /federate: the self-scrape's up series, once scraped, in the text
	// format; a bad selector is a 400.
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(p.url("/federate?match[]=up"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /federate: %s %s", resp.Status, b)
		}
		if body = string(b); strings.Contains(body, "up{") {
			break
		}
	}
	if !strings.Contains(body, "# TYPE up untyped\nup{") || !strings.Contains(body, `job="strata"`) {
		t.Errorf("GET /federate?match[]=up: %q, want the self-scrape's up", body)
	}
	if resp, err := http.Get(p.url("/federate?match[]=%7B")); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /federate with a bad selector: %s, want 400", resp.Status)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s, Content-Type %q", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
