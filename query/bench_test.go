package query

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

// benchRequest serves one request through the full HTTP stack of the API
// (routing, parameter parsing, engine, JSON) over the filled raw tier.
func benchRequest(b *testing.B, path string, params url.Values) {
	raw := openTestRaw(b)
	fillTestRaw(b, raw)
	_, mux := newTestAPI(b, DefaultConfig(), raw)
	target := path + "?" + params.Encode()
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != http.StatusOK {
		b.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	b.SetBytes(int64(rec.Body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}

func BenchmarkInstantQuery(b *testing.B) {
	benchRequest(b, "/api/v1/query", url.Values{
		"query": {"sum by (code) (rate(http_requests_total[5m]))"},
		"time":  {unixSec(t0 + 600_000)},
	})
}

func BenchmarkRangeQuery(b *testing.B) {
	benchRequest(b, "/api/v1/query_range", url.Values{
		"query": {"rate(http_requests_total[1m])"},
		"start": {unixSec(t0)}, "end": {unixSec(t0 + 600_000)}, "step": {"15s"},
	})
}

func BenchmarkSeries(b *testing.B) {
	benchRequest(b, "/api/v1/series", url.Values{"match[]": {`{job="vllm"}`}})
}

func BenchmarkMetadata(b *testing.B) {
	benchRequest(b, "/api/v1/metadata", nil)
}

// dashboardPanels are panels of bench.DefaultDashboard (the dashboard
// `strata bench` measures), over the series fillDashboardRaw writes.
var dashboardPanels = []struct{ name, expr string }{
	{"ttft_p99", `histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`},
	{"gpu_util", `avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)`},
	{"token_throughput", `sum(rate(vllm:generation_tokens_total[5m]))`},
}

// dashboardHour is the range of the dashboard benchmark's data and panels.
const dashboardHour = int64(3_600_000)

// fillDashboardRaw writes an hour of a small inference fleet, one sample
// every 10 s from t0: 16 vLLM pods with a 12-bucket time-to-first-token
// histogram and a token counter, and 8 hosts of 8 GPUs with their
// utilisation.
func fillDashboardRaw(tb testing.TB, raw *tiers.Raw) {
	tb.Helper()
	type series struct {
		lset labels.Labels
		val  func(i int) float64
	}
	var all []series
	les := []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "1", "+Inf"}
	for p := range 16 {
		pod := fmt.Sprintf("vllm-%02d", p)
		for b, le := range les {
			all = append(all, series{labels.FromStrings("__name__", "vllm:time_to_first_token_seconds_bucket",
				"job", "vllm", "pod", pod, "model_name", "llama-3-70b", "le", le),
				func(i int) float64 { return float64(i * (b + 1) * (p + 3)) }})
		}
		all = append(all, series{labels.FromStrings("__name__", "vllm:generation_tokens_total",
			"job", "vllm", "pod", pod, "model_name", "llama-3-70b"),
			func(i int) float64 { return float64(i * 900 * (p + 1)) }})
	}
	for h := range 8 {
		for g := range 8 {
			all = append(all, series{labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL",
				"job", "dcgm", "Hostname", fmt.Sprintf("gpu-node-%02d", h), "gpu", strconv.Itoa(g)),
				func(i int) float64 { return float64((i*7 + h*13 + g) % 101) }})
		}
	}
	const step = 10_000
	for i := range int(dashboardHour/step) + 1 {
		app := raw.Appender(context.Background())
		for _, s := range all {
			if _, err := app.Append(0, s.lset, t0+int64(i)*step, s.val(i)); err != nil {
				tb.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkDashboardPanel serves the dashboard's panels over an hour, as
// `strata bench` asks for them (250 points, gzip accepted, as Grafana and
// Go's HTTP client ask), through the full API handler over the stitched
// view of the raw tier, which is what `strata serve` answers them with.
// Its allocations per query are what the dashboard's garbage collection
// scales with.
func BenchmarkDashboardPanel(b *testing.B) {
	raw := openTestRaw(b)
	fillDashboardRaw(b, raw)
	_, mux := newTestAPI(b, DefaultConfig(), tiers.NewStitched(raw, nil, nil))
	for _, p := range dashboardPanels {
		b.Run(p.name, func(b *testing.B) {
			target := "/api/v1/query_range?" + url.Values{
				"query": {p.expr},
				"start": {unixSec(t0)}, "end": {unixSec(t0 + dashboardHour)}, "step": {"14.4"},
			}.Encode()
			serve := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodGet, target, nil)
				req.Header.Set("Accept-Encoding", "gzip")
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
				return rec
			}
			serve() // the engine's and the pool's first allocations
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}
