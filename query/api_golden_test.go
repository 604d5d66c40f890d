package query

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/storage"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current responses")

// goldenCase is one HTTP request and the reply it must get, byte for byte, from
// testdata/<name>.golden.json.
type goldenCase struct {
	name     string
	method   string
	path     string
	params   url.Values
	config   func(*Config)
	storage  func(storage.SampleAndChunkQueryable) storage.SampleAndChunkQueryable
	before   func(t *testing.T, api *API) // e.g. take every query slot
	canceled bool                         // send the request with a canceled context
	wantCode int
}

func goldenCases() []goldenCase {
	at := unixSec(t0 + 600_000)
	rangeParams := url.Values{
		"query": {"vllm:num_requests_running"},
		"start": {unixSec(t0)}, "end": {unixSec(t0 + 120_000)}, "step": {"30s"},
	}
	return []goldenCase{
		{name: "query_instant", method: http.MethodGet, path: "/api/v1/query",
			params:   url.Values{"query": {"sum by (code) (rate(http_requests_total[5m]))"}, "time": {at}},
			wantCode: http.StatusOK},
		{name: "query_instant_post", method: http.MethodPost, path: "/api/v1/query",
			params:   url.Values{"query": {"http_requests_total"}, "time": {at}},
			wantCode: http.StatusOK},
		{name: "query_scalar", method: http.MethodGet, path: "/api/v1/query",
			params:   url.Values{"query": {"1 + 2"}, "time": {at}},
			wantCode: http.StatusOK},
		{name: "query_range", method: http.MethodGet, path: "/api/v1/query_range",
			params: rangeParams, wantCode: http.StatusOK},
		{name: "query_range_post", method: http.MethodPost, path: "/api/v1/query_range",
			params: rangeParams, wantCode: http.StatusOK},
		{name: "error_bad_query", method: http.MethodGet, path: "/api/v1/query",
			params:   url.Values{"query": {"sum(rate(http_requests_total[5m])"}, "time": {at}},
			wantCode: http.StatusBadRequest},
		{name: "error_bad_step", method: http.MethodGet, path: "/api/v1/query_range",
			params:   url.Values{"query": {"up"}, "start": {unixSec(t0)}, "end": {unixSec(t0 + 60_000)}, "step": {"0"}},
			wantCode: http.StatusBadRequest},
		{name: "error_too_many_points", method: http.MethodGet, path: "/api/v1/query_range",
			params:   url.Values{"query": {"up"}, "start": {"0"}, "end": {"100000"}, "step": {"1"}},
			wantCode: http.StatusBadRequest},
		{name: "error_too_many_samples", method: http.MethodGet, path: "/api/v1/query",
			params:   url.Values{"query": {"http_requests_total[10m]"}, "time": {at}},
			config:   func(c *Config) { c.MaxSamples = 10 },
			wantCode: http.StatusUnprocessableEntity},
		{name: "error_execution", method: http.MethodGet, path: "/api/v1/query",
			params:   url.Values{"query": {`label_replace(http_requests_total, "code", "x", "job", ".*")`}, "time": {at}},
			wantCode: http.StatusUnprocessableEntity},
		{name: "error_timeout_in_queue", method: http.MethodGet, path: "/api/v1/query",
			params: url.Values{"query": {"http_requests_total"}, "time": {at}, "timeout": {"50ms"}},
			config: func(c *Config) { c.MaxConcurrency = 1 },
			before: func(t *testing.T, api *API) {
				release, err := api.engine.AcquireQuerySlot(t.Context(), "held by the test")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(release)
			},
			wantCode: http.StatusServiceUnavailable},
		// Prometheus 3 answers a query whose client went away 499 (nginx's
		// "client closed request"), not 503.
		{name: "error_canceled", method: http.MethodGet, path: "/api/v1/query",
			params: url.Values{"query": {"http_requests_total"}, "time": {at}}, canceled: true,
			wantCode: 499},
		{name: "query_storage_annotations", method: http.MethodGet, path: "/api/v1/query",
			params:   url.Values{"query": {"sum(http_requests_total)"}, "time": {at}},
			storage:  withAnnotations,
			wantCode: http.StatusOK},
		{name: "series", method: http.MethodGet, path: "/api/v1/series",
			params:   url.Values{"match[]": {"http_requests_total"}, "start": {unixSec(t0)}, "end": {at}},
			wantCode: http.StatusOK},
		{name: "series_post", method: http.MethodPost, path: "/api/v1/series",
			params:   url.Values{"match[]": {`{job="vllm",code!="200"}`}},
			wantCode: http.StatusOK},
		{name: "series_limit", method: http.MethodGet, path: "/api/v1/series",
			params:   url.Values{"match[]": {`{job="vllm"}`}, "limit": {"2"}},
			wantCode: http.StatusOK},
		{name: "error_series_no_match", method: http.MethodGet, path: "/api/v1/series",
			wantCode: http.StatusBadRequest},
		{name: "series_storage_annotations", method: http.MethodGet, path: "/api/v1/series",
			params:   url.Values{"match[]": {"http_requests_total"}},
			storage:  withAnnotations,
			wantCode: http.StatusOK},
		{name: "labels", method: http.MethodGet, path: "/api/v1/labels",
			wantCode: http.StatusOK},
		{name: "labels_match", method: http.MethodPost, path: "/api/v1/labels",
			params:   url.Values{"match[]": {"vllm:num_requests_running"}},
			wantCode: http.StatusOK},
		{name: "label_values", method: http.MethodGet, path: "/api/v1/label/code/values",
			wantCode: http.StatusOK},
		{name: "label_values_name", method: http.MethodGet, path: "/api/v1/label/__name__/values",
			wantCode: http.StatusOK},
		{name: "label_values_unknown", method: http.MethodGet, path: "/api/v1/label/nope/values",
			wantCode: http.StatusOK},
		{name: "error_label_values_bad_name", method: http.MethodGet, path: "/api/v1/label/%ff/values",
			wantCode: http.StatusBadRequest},
		{name: "metadata", method: http.MethodGet, path: "/api/v1/metadata",
			wantCode: http.StatusOK},
		{name: "metadata_limit", method: http.MethodGet, path: "/api/v1/metadata",
			params: url.Values{"limit": {"2"}}, wantCode: http.StatusOK},
		{name: "metadata_limit_zero", method: http.MethodGet, path: "/api/v1/metadata",
			params: url.Values{"limit": {"0"}}, wantCode: http.StatusOK},
		{name: "metadata_limit_per_metric", method: http.MethodGet, path: "/api/v1/metadata",
			params: url.Values{"limit_per_metric": {"1"}}, wantCode: http.StatusOK},
		{name: "metadata_metric", method: http.MethodGet, path: "/api/v1/metadata",
			params: url.Values{"metric": {"vllm:num_requests_running"}}, wantCode: http.StatusOK},
		{name: "metadata_metric_unknown", method: http.MethodGet, path: "/api/v1/metadata",
			params: url.Values{"metric": {"nope"}}, wantCode: http.StatusOK},
		{name: "error_metadata_bad_limit", method: http.MethodGet, path: "/api/v1/metadata",
			params: url.Values{"limit": {"ten"}}, wantCode: http.StatusBadRequest},
		{name: "error_metadata_bad_limit_per_metric", method: http.MethodGet, path: "/api/v1/metadata",
			params: url.Values{"limit_per_metric": {"x"}}, wantCode: http.StatusBadRequest},
		{name: "buildinfo", method: http.MethodGet, path: "/api/v1/status/buildinfo",
			wantCode: http.StatusOK},
		{name: "format_query", method: http.MethodGet, path: "/api/v1/format_query",
			params:   url.Values{"query": {"sum by(code)(rate(http_requests_total{job='vllm'}[5m]))"}},
			wantCode: http.StatusOK},
		{name: "error_format_query", method: http.MethodGet, path: "/api/v1/format_query",
			params:   url.Values{"query": {"sum by(code"}},
			wantCode: http.StatusBadRequest},
		{name: "query_exemplars", method: http.MethodGet, path: "/api/v1/query_exemplars",
			params:   url.Values{"query": {"http_requests_total"}, "start": {unixSec(t0)}, "end": {at}},
			wantCode: http.StatusOK},
		{name: "error_not_found_targets", method: http.MethodGet, path: "/api/v1/targets",
			wantCode: http.StatusNotFound},
		{name: "error_not_found_admin", method: http.MethodPost, path: "/api/v1/admin/tsdb/snapshot",
			wantCode: http.StatusNotFound},
		{name: "error_not_found_status_tsdb", method: http.MethodGet, path: "/api/v1/status/tsdb",
			wantCode: http.StatusNotFound},
		{name: "status_config", method: http.MethodGet, path: "/api/v1/status/config",
			config: func(c *Config) {
				c.ConfigYAML = "storage:\n  path: data\nsources:\n  targets:\n    - url: http://user:<secret>@gpu-node-1:9400/metrics\n"
			},
			wantCode: http.StatusOK},
		{name: "status_flags", method: http.MethodGet, path: "/api/v1/status/flags",
			config: func(c *Config) {
				c.Flags = map[string]string{"storage.path": "data", "web.cors.origin": ".*", "log.level": "info"}
			},
			wantCode: http.StatusOK},
	}
}

// TestGolden checks every endpoint's reply, success and error, against the
// files in testdata. Run with -update to rewrite them after a deliberate change
// and review the diff.
func TestGolden(t *testing.T) {
	raw := openTestRaw(t)
	fillTestRaw(t, raw)
	// Building an API costs about half a second (Prometheus' OpenAPI spec), so
	// the cases with the default setup share one.
	defaultAPI, defaultMux := newTestAPI(t, DefaultConfig(), raw)
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			api, mux := defaultAPI, defaultMux
			if tc.config != nil || tc.storage != nil || tc.before != nil {
				cfg := DefaultConfig()
				if tc.config != nil {
					tc.config(&cfg)
				}
				var q storage.SampleAndChunkQueryable = raw
				if tc.storage != nil {
					q = tc.storage(q)
				}
				api, mux = newTestAPI(t, cfg, q)
			}
			if tc.before != nil {
				tc.before(t, api)
			}
			req := newRequest(t, tc.method, tc.path, tc.params)
			if tc.canceled {
				ctx, cancel := context.WithCancel(req.Context())
				cancel()
				req = req.WithContext(ctx)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)

			if rec.Code != tc.wantCode {
				t.Errorf("status %d, want %d; body %s", rec.Code, tc.wantCode, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			// The build's Go version is the only field that changes from one
			// toolchain to the next.
			body := bytes.ReplaceAll(rec.Body.Bytes(), []byte(`"`+runtime.Version()+`"`), []byte(`"GOVERSION"`))
			checkGolden(t, tc.name, body)
		})
	}
}

func newRequest(t *testing.T, method, path string, params url.Values) *http.Request {
	t.Helper()
	if method == http.MethodPost {
		req := httptest.NewRequest(method, path, strings.NewReader(params.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return req
	}
	if len(params) > 0 {
		path += "?" + params.Encode()
	}
	return httptest.NewRequest(method, path, nil)
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("reply differs from %s\n got: %s\nwant: %s", path, got, want)
	}
}
