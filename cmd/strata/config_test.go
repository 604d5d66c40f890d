package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
)

func TestLoadConfigDefault(t *testing.T) {
	cfg, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatalf("embedded default does not validate: %v", err)
	}
	if got := cfg.Web.ListenAddress; got != ":9201" {
		t.Errorf("listen address = %q, want :9201", got)
	}
	if got := time.Duration(cfg.Storage.Raw.Retention); got != 24*time.Hour {
		t.Errorf("raw retention = %s, want 24h", got)
	}
	if got := int64(cfg.RemoteWrite.MaxBodyBytes); got != 32<<20 {
		t.Errorf("max body = %d, want 32 MiB", got)
	}
}

func TestLoadConfigOverlay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(path, []byte("storage:\n  raw:\n    retention: 2h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(cfg.Storage.Raw.Retention); got != 2*time.Hour {
		t.Errorf("raw retention = %s, want the file's 2h", got)
	}
	if got := time.Duration(cfg.Storage.Minute.Retention); got != 30*24*time.Hour {
		t.Errorf("minute retention = %s, want the default 30d kept", got)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "storage:\n  retention: 1d\n", "field retention not found"},
		{"bad duration", "storage:\n  raw:\n    retention: soon\n", "soon"},
		{"bad size", "remote_write:\n  max_body_bytes: lots\n", "invalid size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "strata.yml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := loadConfig(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := loadConfig(filepath.Join(t.TempDir(), "missing.yml")); err == nil {
		t.Fatal("missing config file: no error")
	}
}

func TestValidate(t *testing.T) {
	cfg, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Storage.OutOfOrderWindow = cfg.Storage.Raw.Retention
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "out_of_order_time_window") {
		t.Fatalf("validate = %v, want an out-of-order window error", err)
	}
	cfg, err = loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Storage.Raw.WALCompression != "snappy" || cfg.RemoteWrite.MaxHeapBytes != 0 {
		t.Fatalf("defaults: WAL compression %q, max heap bytes %d", cfg.Storage.Raw.WALCompression, cfg.RemoteWrite.MaxHeapBytes)
	}
	cfg.Storage.Raw.WALCompression = "lz4"
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "wal_compression") {
		t.Fatalf("validate = %v, want a WAL compression error", err)
	}
	cfg, err = loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Storage.Raw.WALSampleRecords != "v2" {
		t.Fatalf("defaults: WAL sample records %q, want v2", cfg.Storage.Raw.WALSampleRecords)
	}
	cfg.Storage.Raw.WALSampleRecords = "v3"
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "wal_sample_records") {
		t.Fatalf("validate = %v, want a WAL sample records error", err)
	}

	// The raw blocks: an hour by default; whole minutes from 10m to 24h,
	// at most the raw retention.
	cfg, err = loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(cfg.Storage.Raw.BlockDuration); d != time.Hour {
		t.Fatalf("defaults: raw block duration %s, want 1h", d)
	}
	for _, d := range []time.Duration{0, 5 * time.Minute, 90 * time.Second, 25 * time.Hour, 13 * time.Hour} {
		c := cfg
		c.Storage.Raw.BlockDuration = model.Duration(d)
		c.Storage.Raw.Retention = model.Duration(12 * time.Hour)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "block_duration") {
			t.Errorf("block duration %s: validate = %v, want an error naming block_duration", d, err)
		}
	}
	for _, d := range []time.Duration{10 * time.Minute, 2 * time.Hour, 12 * time.Hour} {
		c := cfg
		c.Storage.Raw.BlockDuration = model.Duration(d)
		c.Storage.Raw.Retention = model.Duration(12 * time.Hour)
		if err := c.validate(); err != nil {
			t.Errorf("block duration %s: %v", d, err)
		}
	}

	// OTLP delta temporality: refused by default, its limits positive.
	cfg, err = loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if rw := cfg.RemoteWrite; rw.OTLPDeltaToCumulative || rw.OTLPDeltaMaxStreams != 250_000 || time.Duration(rw.OTLPDeltaMaxStale) != 5*time.Minute {
		t.Fatalf("defaults: OTLP delta %v, %d streams, stale after %s", rw.OTLPDeltaToCumulative, rw.OTLPDeltaMaxStreams, rw.OTLPDeltaMaxStale)
	}
	for want, edit := range map[string]func(*Config){
		"otlp_delta_max_streams": func(c *Config) { c.RemoteWrite.OTLPDeltaMaxStreams = 0 },
		"otlp_delta_max_stale":   func(c *Config) { c.RemoteWrite.OTLPDeltaMaxStale = 0 },
	} {
		c := cfg
		edit(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate = %v, want an error naming %s", err, want)
		}
	}
}

func TestExternalLabelsAndGRPC(t *testing.T) {
	cfg, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Global.ExternalLabels = map[string]string{"shard": "0", "replica": "a"}
	sc, err := cfg.storeAPI()
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.ExternalLabels.String(); got != `{replica="a", shard="0"}` {
		t.Errorf("external labels %s", got)
	}
	if sc.MaxConcurrency != 20 || sc.MaxSeries != 1_000_000 || sc.MaxSamples != 100_000_000 || sc.QuerierLookbackDelta != 0 || !sc.QuerierDynamicLookback {
		t.Errorf("StoreAPI limits %+v, want the documented defaults", sc)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"empty value", func(c *Config) { c.Global.ExternalLabels = map[string]string{"shard": ""} }, "empty value"},
		{"metric name", func(c *Config) { c.Global.ExternalLabels = map[string]string{"__name__": "x"} }, "invalid label name"},
		{"concurrency", func(c *Config) { c.GRPC.MaxConcurrency = 0 }, "grpc.max_concurrency"},
		{"negative limit", func(c *Config) { c.GRPC.MaxSeries = -1 }, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.edit(&c)
			if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestByteSizeSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
	}{
		{"1048576", 1 << 20}, // a plain number of bytes, as Prometheus' flags take
		{"1MiB", 1 << 20},
		{"32MiB", 32 << 20},
	} {
		var b ByteSize
		if err := b.Set(tc.in); err != nil || b != tc.want {
			t.Errorf("Set(%q) = %d, %v; want %d", tc.in, b, err, tc.want)
		}
	}
	var b ByteSize
	if err := b.Set("lots"); err == nil {
		t.Error(`Set("lots"): no error`)
	}
}

// TestOTLPConfig: the otlp: section is Prometheus' own, its defaults where
// it is absent or silent, its errors refused by validate.
func TestOTLPConfig(t *testing.T) {
	cfg, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	oc, err := cfg.otlpConfig()
	if err != nil || oc.TranslationStrategy != promconfig.DefaultOTLPConfig.TranslationStrategy {
		t.Fatalf("default otlp = %+v, %v; want Prometheus' default", oc, err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"otlp:\n  translation_strategy: NoTranslation\n  promote_resource_attributes: [k8s.pod.name]\n", ""},
		{"otlp:\n  translation_strategy: Sideways\n", "Sideways"},
		{"otlp:\n  promote_all_resource_attributes: true\n  promote_resource_attributes: [a]\n", "promote_all_resource_attributes"},
	} {
		path := filepath.Join(t.TempDir(), "strata.yml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadConfig(path)
		if err == nil {
			err = cfg.validate()
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one naming %q", tc.yaml, err, tc.want)
		case tc.want == "":
			oc, _ := cfg.otlpConfig()
			if string(oc.TranslationStrategy) != "NoTranslation" || len(oc.PromoteResourceAttributes) != 1 {
				t.Errorf("%q: %+v", tc.yaml, oc)
			}
		}
	}
}

// TestExternalURLAndRoutePrefix: web.external_url and web.route_prefix as
// Prometheus reads --web.external-url and --web.route-prefix.
func TestExternalURLAndRoutePrefix(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	for _, c := range []struct {
		ext, prefix       string
		wantURL, wantPref string
		wantErr           bool
	}{
		{wantURL: "http://" + net.JoinHostPort(host, "9201")},
		{ext: "https://strata.example.com/", wantURL: "https://strata.example.com"},
		{ext: "https://strata.example.com/a/b/", wantURL: "https://strata.example.com/a/b", wantPref: "/a/b"},
		{ext: "https://strata.example.com/a", prefix: "/", wantURL: "https://strata.example.com/a"},
		{ext: "https://strata.example.com", prefix: "inner/", wantURL: "https://strata.example.com", wantPref: "/inner"},
		{ext: "strata.example.com/a", wantErr: true},
		{ext: "ftp://strata.example.com", wantErr: true},
		{ext: "http://%zz", wantErr: true},
	} {
		var cfg Config
		cfg.Web.ExternalURL, cfg.Web.RoutePrefix = c.ext, c.prefix
		u, err := cfg.externalURL("[::]:9201")
		if c.wantErr {
			if err == nil || !strings.Contains(err.Error(), "web.external_url") {
				t.Errorf("%q: error %v, want one naming web.external_url", c.ext, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.ext, err)
			continue
		}
		if u.String() != c.wantURL || cfg.routePrefix(u) != c.wantPref {
			t.Errorf("%q, %q: %s and prefix %q, want %s and %q", c.ext, c.prefix, u, cfg.routePrefix(u), c.wantURL, c.wantPref)
		}
	}
}

// TestRouted: under a route prefix the endpoints are served below it, the
// root and the bare prefix redirect, anything else is a 404.
func TestRouted(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "inner "+r.URL.Path) })
	for _, c := range []struct {
		prefix, path string
		code         int
		body         string
	}{
		{"", "/api/v1/query", 200, "inner /api/v1/query"},
		{"/strata", "/strata/api/v1/query", 200, "inner /api/v1/query"},
		{"/strata", "/strata/", 200, "inner /"},
		{"/strata", "/strata", 302, ""},
		{"/strata", "/", 302, ""},
		{"/strata", "/api/v1/query", 404, "under /strata/"},
		{"/strata", "/strataX/api", 404, "under /strata/"},
	} {
		rec := httptest.NewRecorder()
		routed(c.prefix, inner).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.body) {
			t.Errorf("prefix %q, %s: %d %q", c.prefix, c.path, rec.Code, rec.Body.String())
		}
		if c.code == 302 && rec.Header().Get("Location") != c.prefix+"/" {
			t.Errorf("prefix %q, %s: redirected to %q", c.prefix, c.path, rec.Header().Get("Location"))
		}
	}
}

// TestPathsRelativeToConfigFile: the rule files (rules.files,
// diagnose.rule_files) and the alerting section's files are read relative
// to the configuration file's directory, as Prometheus reads rule_files and
// its sections' files; storage.path and the other settings that are flags
// in Prometheus stay relative to the working directory.
func TestPathsRelativeToConfigFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(path, []byte(`storage:
  path: data
web:
  config_file: web.yml
rules:
  files: [rules/*.yml, /abs/own.yml]
diagnose:
  rule_files: [diagnosis/*.yml]
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["am:9093"]
      tls_config:
        ca_file: ca.pem
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "rules/*.yml"), "/abs/own.yml"}; !slices.Equal(cfg.Rules.Files, want) {
		t.Errorf("rules.files = %v, want %v", cfg.Rules.Files, want)
	}
	if want := []string{filepath.Join(dir, "diagnosis/*.yml")}; !slices.Equal(cfg.Diagnose.RuleFiles, want) {
		t.Errorf("diagnose.rule_files = %v, want %v", cfg.Diagnose.RuleFiles, want)
	}
	if cfg.Storage.Path != "data" || cfg.Web.ConfigFile != "web.yml" {
		t.Errorf("storage.path %q and web.config_file %q changed; they stay relative to the working directory", cfg.Storage.Path, cfg.Web.ConfigFile)
	}
	ac, err := cfg.alertingConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got := ac.AlertmanagerConfigs[0].HTTPClientConfig.TLSConfig.CAFile; got != filepath.Join(dir, "ca.pem") {
		t.Errorf("alerting's ca_file = %q, want it under %s", got, dir)
	}
}
