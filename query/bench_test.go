package query

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
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
