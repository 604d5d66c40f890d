package query

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzAPI sends arbitrary paths under /api/v1/ and query strings to the API.
// Whatever arrives, the server must not panic (no route may reach a handler
// whose Prometheus retriever is nil) and every JSON reply must be valid JSON
// with a Prometheus status.
func FuzzAPI(f *testing.F) {
	for _, seed := range []struct{ path, query string }{
		{"query", "query=up&time=1"},
		{"query_range", "query=rate(x[5m])&start=0&end=100&step=10"},
		{"series", "match[]={job=\"a\"}"},
		{"label/job/values", "match[]=up"},
		{"metadata", "limit=1&limit_per_metric=-1&metric=up"},
		{"targets", ""},
		{"rules", "type=alert"},
		{"admin/tsdb/delete_series", "match[]=up"},
		{"status/tsdb", ""},
		{"query_exemplars", "query=up"},
		{"format_query", "query=sum(up)"},
		{"parse_query", "query=sum(up)"},
		{"features", ""},
		{"notifications/live", ""},
	} {
		f.Add(seed.path, seed.query)
	}
	raw := openTestRaw(f)
	fillTestRaw(f, raw)
	_, mux := newTestAPI(f, DefaultConfig(), raw)
	f.Fuzz(func(t *testing.T, path, query string) {
		target := "/api/v1/" + strings.TrimLeft(path, "/")
		if strings.ContainsAny(target, " ?#\x00\r\n\t") || !strings.HasPrefix(target, "/api/v1/") {
			t.Skip()
		}
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			req, err := http.NewRequest(method, target+"?"+query, nil)
			if err != nil {
				t.Skip()
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Header().Get("Content-Type") != "application/json" {
				continue // 405s, redirects and remote read replies are not JSON
			}
			var resp struct {
				Status string `json:"status"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatalf("%s %s?%s: invalid JSON (%v): %s", method, target, query, err, rec.Body)
			}
			if resp.Status != "success" && resp.Status != "error" {
				t.Fatalf("%s %s?%s: status %q", method, target, query, resp.Status)
			}
		}
	})
}
