package query

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
)

// fakeTargets is a scraper's view with a target that is up, one that is
// down and one not scraped yet.
type fakeTargets []ActiveTarget

func (f fakeTargets) ActiveTargets() []ActiveTarget { return append([]ActiveTarget(nil), f...) }

func testTargets() fakeTargets {
	scraped := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return fakeTargets{
		{
			Pool: "dcgm", URL: "http://10.0.0.7:9400/metrics",
			Labels:   labels.FromStrings("job", "dcgm", "instance", "10.0.0.7:9400"),
			Interval: 30 * time.Second, Timeout: 10 * time.Second,
			LastScrape: scraped, LastScrapeDuration: 42 * time.Millisecond,
		},
		{
			Pool: "vllm", URL: "http://127.0.0.1:8000/metrics?format=text",
			Labels:     labels.FromStrings("job", "vllm", "instance", "127.0.0.1:8000", "namespace", "inference", "pod", "vllm-0"),
			Discovered: labels.FromStrings("namespace", "inference", "pod", "vllm-0"),
			Interval:   15 * time.Second, Timeout: 10 * time.Second,
			LastScrape: scraped.Add(5 * time.Second), LastScrapeDuration: 3 * time.Millisecond,
			LastError: errors.New("scrape vllm: HTTP status 503 Service Unavailable"),
		},
		{
			Pool: "vllm-b", URL: "https://10.0.0.9:8000/metrics",
			Labels:   labels.FromStrings("job", "vllm-b", "instance", "10.0.0.9:8000"),
			Interval: 15 * time.Second, Timeout: 5 * time.Second,
		},
	}
}

// TestTargetsGolden checks /api/v1/targets against the files in testdata:
// Prometheus' format (activeTargets with health up, down and unknown, empty
// droppedTargets), its state and scrapePool parameters, and a localhost
// target's globalUrl.
func TestTargetsGolden(t *testing.T) {
	raw := openTestRaw(t)
	api, err := New(DefaultConfig(), raw, testMetadata(), slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		WithTargets(testTargets(), "0.0.0.0:9201", &url.URL{Scheme: "http", Host: "strata.example:9201"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := api.Close(); err != nil {
			t.Error(err)
		}
	})
	mux := http.NewServeMux()
	api.Register(mux)
	for _, tc := range []struct {
		name     string
		path     string
		params   url.Values
		wantCode int
	}{
		{"targets", "/api/v1/targets", nil, http.StatusOK},
		{"targets_state_active", "/api/v1/targets", url.Values{"state": {"active"}}, http.StatusOK},
		{"targets_state_dropped", "/api/v1/targets", url.Values{"state": {"dropped"}}, http.StatusOK},
		{"targets_scrape_pool", "/api/v1/targets", url.Values{"scrapePool": {"vllm"}}, http.StatusOK},
		{"error_not_found_targets_metadata", "/api/v1/targets/metadata", nil, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, newRequest(t, http.MethodGet, tc.path, tc.params))
			if rec.Code != tc.wantCode {
				t.Fatalf("status %d, want %d; body %s", rec.Code, tc.wantCode, rec.Body)
			}
			checkGolden(t, tc.name, rec.Body.Bytes())
		})
	}

	// What a dashboard reads, decoded: one health per state.
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, newRequest(t, http.MethodGet, "/api/v1/targets", nil))
	var resp struct {
		Data struct {
			Active []struct {
				ScrapePool string            `json:"scrapePool"`
				Health     string            `json:"health"`
				LastError  string            `json:"lastError"`
				Labels     map[string]string `json:"labels"`
				GlobalURL  string            `json:"globalUrl"`
			} `json:"activeTargets"`
			Dropped []any `json:"droppedTargets"`
		} `json:"data"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	health := map[string]string{}
	for _, a := range resp.Data.Active {
		health[a.ScrapePool] = a.Health
	}
	if health["dcgm"] != "up" || health["vllm"] != "down" || health["vllm-b"] != "unknown" || resp.Data.Dropped == nil {
		t.Errorf("health %v, dropped %v", health, resp.Data.Dropped)
	}
}
