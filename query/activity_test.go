package query

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestQueryActivity: WithQueryActivity's function is called when an
// instant query, a range query or a remote read starts and when it ends
// (twice per request, failed ones included), and not for requests that
// read no series data.
func TestQueryActivity(t *testing.T) {
	var calls atomic.Int64
	_, mux := newTestAPI(t, DefaultConfig(), openTestRaw(t), WithQueryActivity(func() { calls.Add(1) }))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for _, c := range []struct {
		method, path, body string
		want               int64
	}{
		{"GET", "/api/v1/query?query=up&time=1800000000", "", 2},
		{"POST", "/api/v1/query_range", url.Values{"query": {"up"}, "start": {"1800000000"}, "end": {"1800000600"}, "step": {"60"}}.Encode(), 2},
		{"GET", "/api/v1/query_range?query=up(", "", 2}, // a 400: it came, it ended
		{"POST", "/api/v1/read", "not a read request", 2},
		{"GET", "/api/v1/labels", "", 0},
		{"GET", "/api/v1/series?match[]=up", "", 0},
		{"GET", "/api/v1/status/buildinfo", "", 0},
	} {
		calls.Store(0)
		req, err := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.method == "POST" && c.body != "" && !strings.HasSuffix(c.path, "/read") {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := calls.Load(); got != c.want {
			t.Errorf("%s %s (%d): %d calls, want %d", c.method, c.path, resp.StatusCode, got, c.want)
		}
	}
}
