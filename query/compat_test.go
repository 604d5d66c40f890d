package query

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"testing"

	"github.com/grafana/regexp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/route"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// TestMatchesPrometheus sends the same requests to Strata's API and to
// Prometheus' own web/api/v1, built as cmd/prometheus builds it, over the same
// raw tier, and requires byte-identical replies. For /api/v1/metadata, which
// Strata serves from remote-write metadata, Prometheus reads the same metadata
// from scrape targets.
func TestMatchesPrometheus(t *testing.T) {
	raw := openTestRaw(t)
	fillTestRaw(t, raw)
	meta := fakeMetadata{
		"http_requests_total":       {{Type: model.MetricTypeCounter, Help: "Requests served."}},
		"vllm:num_requests_running": {{Type: model.MetricTypeGauge, Help: "Requests running on the GPU."}},
		"vllm:request_latency":      {{Type: model.MetricTypeHistogram, Help: "Latency.", Unit: "seconds"}},
	}
	flags := map[string]string{"config.file": "strata.yml", "query.timeout": "2m", "web.cors.origin": ".*"}
	cfg := DefaultConfig()
	cfg.ConfigYAML = config.DefaultConfig.String() // what the reference serves
	cfg.Flags = flags
	strata, err := New(cfg, raw, meta, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { strata.Close() })
	strataMux := http.NewServeMux()
	strata.Register(strataMux)
	reference := newPrometheusAPI(t, raw, meta, flags)

	at := unixSec(t0 + 600_000)
	rangeParams := url.Values{
		"query": {"rate(http_requests_total[1m])"},
		"start": {unixSec(t0)}, "end": {at}, "step": {"1m"},
	}
	for _, tc := range []struct {
		name, method, path string
		params             url.Values
	}{
		{"instant", http.MethodGet, "/api/v1/query", url.Values{"query": {"sum by (code) (rate(http_requests_total[5m]))"}, "time": {at}}},
		{"instant post", http.MethodPost, "/api/v1/query", url.Values{"query": {"http_requests_total"}, "time": {at}}},
		{"instant with limit", http.MethodGet, "/api/v1/query", url.Values{"query": {"http_requests_total"}, "time": {at}, "limit": {"1"}}},
		{"instant string", http.MethodGet, "/api/v1/query", url.Values{"query": {`"strata"`}, "time": {at}}},
		{"instant matrix", http.MethodGet, "/api/v1/query", url.Values{"query": {"vllm:num_requests_running[1m]"}, "time": {at}}},
		{"info annotation", http.MethodGet, "/api/v1/query", url.Values{"query": {"rate(vllm:num_requests_running[5m])"}, "time": {at}}},
		{"range", http.MethodGet, "/api/v1/query_range", rangeParams},
		{"range post", http.MethodPost, "/api/v1/query_range", rangeParams},
		{"bad query", http.MethodGet, "/api/v1/query", url.Values{"query": {"rate(x[5m]"}}},
		{"bad time", http.MethodGet, "/api/v1/query", url.Values{"query": {"x"}, "time": {"yesterday"}}},
		{"bad step", http.MethodGet, "/api/v1/query_range", url.Values{"query": {"x"}, "start": {"0"}, "end": {"10"}, "step": {"-1"}}},
		{"end before start", http.MethodGet, "/api/v1/query_range", url.Values{"query": {"x"}, "start": {"10"}, "end": {"0"}, "step": {"1"}}},
		{"execution error", http.MethodGet, "/api/v1/query", url.Values{"query": {`label_replace(http_requests_total, "code", "x", "", "")`}, "time": {at}}},
		{"series", http.MethodGet, "/api/v1/series", url.Values{"match[]": {"http_requests_total", "vllm:num_requests_running"}}},
		{"series post", http.MethodPost, "/api/v1/series", url.Values{"match[]": {`{code="500"}`}, "start": {unixSec(t0)}, "end": {at}}},
		{"series bad matcher", http.MethodGet, "/api/v1/series", url.Values{"match[]": {`{code=~"("}`}}},
		{"labels", http.MethodGet, "/api/v1/labels", nil},
		{"labels limit", http.MethodGet, "/api/v1/labels", url.Values{"limit": {"2"}}},
		{"label values", http.MethodGet, "/api/v1/label/job/values", nil},
		{"label values matched", http.MethodGet, "/api/v1/label/__name__/values", url.Values{"match[]": {`{model="llama"}`}}},
		{"metadata", http.MethodGet, "/api/v1/metadata", nil},
		{"metadata metric", http.MethodGet, "/api/v1/metadata", url.Values{"metric": {"vllm:request_latency"}}},
		{"metadata limit per metric", http.MethodGet, "/api/v1/metadata", url.Values{"limit_per_metric": {"1"}}},
		{"metadata limit zero", http.MethodGet, "/api/v1/metadata", url.Values{"limit": {"0"}}},
		{"metadata bad limit", http.MethodGet, "/api/v1/metadata", url.Values{"limit": {"a"}}},
		{"buildinfo", http.MethodGet, "/api/v1/status/buildinfo", nil},
		{"status config", http.MethodGet, "/api/v1/status/config", nil},
		{"status flags", http.MethodGet, "/api/v1/status/flags", nil},
		{"format query", http.MethodPost, "/api/v1/format_query", url.Values{"query": {"avg without(instance)(up)"}}},
		{"exemplars", http.MethodGet, "/api/v1/query_exemplars", url.Values{"query": {"http_requests_total"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := httptest.NewRecorder()
			strataMux.ServeHTTP(got, newRequest(t, tc.method, tc.path, tc.params))
			want := httptest.NewRecorder()
			reference.ServeHTTP(want, newRequest(t, tc.method, tc.path, tc.params))
			if got.Code != want.Code {
				t.Errorf("status %d, Prometheus %d", got.Code, want.Code)
			}
			if g, w := got.Header().Get("Content-Type"), want.Header().Get("Content-Type"); g != w {
				t.Errorf("Content-Type %q, Prometheus %q", g, w)
			}
			if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
				t.Errorf("body differs\n    strata: %s\nprometheus: %s", got.Body, want.Body)
			}
		})
	}
}

// newPrometheusAPI builds Prometheus' API over q with the engine options of
// cmd/prometheus (Prometheus 3 defaults), metadata served by one scrape
// target per metric family, and flags as its command-line flags.
func newPrometheusAPI(t *testing.T, q storage.SampleAndChunkQueryable, meta fakeMetadata, flags map[string]string) http.Handler {
	t.Helper()
	cfg := DefaultConfig()
	p := parser.NewParser(parser.Options{})
	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples:               cfg.MaxSamples,
		Timeout:                  cfg.Timeout,
		LookbackDelta:            cfg.LookbackDelta,
		NoStepSubqueryIntervalFn: func(int64) int64 { return 60_000 },
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
		Parser:                   p,
	})
	t.Cleanup(func() { engine.Close() })
	var targets []*scrape.Target
	for name, ms := range meta {
		tg := scrape.NewTarget(labels.FromStrings("instance", name), &config.ScrapeConfig{}, nil, nil)
		tg.SetMetadataStore(metadataStore{family: name, md: ms[0]})
		targets = append(targets, tg)
	}
	eq, ok := q.(storage.ExemplarQueryable)
	if !ok {
		t.Fatal("test storage keeps no exemplars")
	}
	api := v1.NewAPI(engine, q, nil, eq, nil,
		func(context.Context) v1.TargetRetriever { return targetRetriever{"strata": targets} },
		nil, func() config.Config { return config.DefaultConfig }, flags, v1.GlobalURLOptions{},
		func(f http.HandlerFunc) http.HandlerFunc { return f },
		nil, "", false, false, 0, slog.New(slog.DiscardHandler), nil,
		cfg.RemoteReadSampleLimit, cfg.RemoteReadConcurrency, cfg.RemoteReadMaxBytesInFrame,
		false, regexp.MustCompile(".*"), nil,
		&v1.PrometheusVersion{GoVersion: runtime.Version()},
		nil, nil, nil, prometheus.NewRegistry(), nil, false, nil, false, false, false,
		cfg.LookbackDelta, false, false, nil, nil, v1.OpenAPIOptions{}, p, false, cfg.Timeout)
	r := route.New().WithPrefix("/api/v1")
	api.Register(r)
	return r
}

type targetRetriever map[string][]*scrape.Target

func (tr targetRetriever) TargetsActive() map[string][]*scrape.Target  { return tr }
func (tr targetRetriever) TargetsDropped() map[string][]*scrape.Target { return nil }
func (tr targetRetriever) TargetsDroppedCounts() map[string]int        { return nil }
func (tr targetRetriever) ScrapePoolConfig(string) (*config.ScrapeConfig, error) {
	return &config.ScrapeConfig{}, nil
}

// metadataStore is one target's scrape cache holding one metric family.
type metadataStore struct {
	family string
	md     metadata.Metadata
}

func (s metadataStore) ListMetadata() []scrape.MetricMetadata {
	return []scrape.MetricMetadata{{MetricFamily: s.family, Type: s.md.Type, Help: s.md.Help, Unit: s.md.Unit}}
}

func (s metadataStore) GetMetadata(mf string) (scrape.MetricMetadata, bool) {
	if mf != s.family {
		return scrape.MetricMetadata{}, false
	}
	return s.ListMetadata()[0], true
}

func (s metadataStore) SizeMetadata() int   { return len(s.md.Help) + len(s.md.Unit) + len(s.md.Type) }
func (s metadataStore) LengthMetadata() int { return 1 }
