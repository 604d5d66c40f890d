package query

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/util/httputil"
)

// serveWith serves target through mux with the given Accept-Encoding
// ("" sends none) and returns the recorded response.
func serveWith(t *testing.T, mux http.Handler, target, accept string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if accept != "" {
		req.Header.Set("Accept-Encoding", accept)
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	return rec
}

// decoded returns body with the Content-Encoding of header undone.
func decoded(t *testing.T, header http.Header, body io.Reader) []byte {
	t.Helper()
	r := body
	switch enc := header.Get("Content-Encoding"); enc {
	case "":
	case "gzip":
		gz, err := gzip.NewReader(body)
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		r = gz
	case "deflate":
		zr, err := zlib.NewReader(body)
		if err != nil {
			t.Fatalf("deflate body: %v", err)
		}
		r = zr
	default:
		t.Fatalf("unexpected Content-Encoding %q", enc)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s body: %v", header.Get("Content-Encoding"), err)
	}
	return b
}

// TestResponseCompression checks that the API compresses as Prometheus'
// does, now from pooled encoders: the encoding the client names first,
// the same body once decoded, the same Vary header, and remote read left
// alone.
func TestResponseCompression(t *testing.T) {
	_, mux := newTestAPI(t, DefaultConfig(), filledTestRaw(t))
	targets := map[string]string{
		"query_range": "/api/v1/query_range?" + url.Values{
			"query": {"rate(http_requests_total[1m])"},
			"start": {unixSec(t0)}, "end": {unixSec(t0 + 600_000)}, "step": {"15s"},
		}.Encode(),
		"bad query": "/api/v1/query?query=" + url.QueryEscape("sum("),
		"series":    "/api/v1/series?" + url.Values{"match[]": {`{job="vllm"}`}}.Encode(),
		"metadata":  "/api/v1/metadata",
	}
	for name, target := range targets {
		t.Run(name, func(t *testing.T) {
			plainResp := serveWith(t, mux, target, "")
			plain := decoded(t, plainResp.Header(), plainResp.Body)
			if enc := plainResp.Header().Get("Content-Encoding"); enc != "" {
				t.Fatalf("no encoding accepted, answered %q", enc)
			}
			for _, tc := range []struct{ accept, want string }{
				{"gzip", "gzip"},
				{"deflate", "deflate"},
				{"br, deflate, gzip", "deflate"},
				{"gzip;q=0.5, deflate", "deflate"}, // as Prometheus: an encoding with parameters is not recognised
				{"identity", ""},
			} {
				// Twice: the second response comes from a pooled encoder.
				for range 2 {
					resp := serveWith(t, mux, target, tc.accept)
					if resp.Code != plainResp.Code {
						t.Fatalf("Accept-Encoding %q: status %d, without it %d", tc.accept, resp.Code, plainResp.Code)
					}
					if enc := resp.Header().Get("Content-Encoding"); enc != tc.want {
						t.Fatalf("Accept-Encoding %q: Content-Encoding %q, want %q", tc.accept, enc, tc.want)
					}
					if vary, want := resp.Header().Values("Vary"), plainResp.Header().Values("Vary"); !slices.Equal(vary, want) || slices.Index(vary, "Accept-Encoding") < 0 {
						t.Errorf("Accept-Encoding %q: Vary %q, want %q with Accept-Encoding once", tc.accept, vary, want)
					}
					if cl := resp.Header().Get("Content-Length"); tc.want != "" && cl != "" {
						t.Errorf("Accept-Encoding %q: compressed response with Content-Length %s", tc.accept, cl)
					}
					if got := decoded(t, resp.Header(), resp.Body); !bytes.Equal(got, plain) {
						t.Fatalf("Accept-Encoding %q: body decodes to\n%s\nwant\n%s", tc.accept, got, plain)
					}
				}
			}
		})
	}
}

// TestResponseCompressionConcurrent serves compressed responses from many
// goroutines at once over a real connection: no encoder may be shared by
// two responses (run under -race).
func TestResponseCompressionConcurrent(t *testing.T) {
	_, mux := newTestAPI(t, DefaultConfig(), filledTestRaw(t))
	srv := httptest.NewServer(mux) // 127.0.0.1
	t.Cleanup(srv.Close)
	targets := []string{
		"/api/v1/query_range?" + url.Values{
			"query": {"http_requests_total"},
			"start": {unixSec(t0)}, "end": {unixSec(t0 + 600_000)}, "step": {"15s"},
		}.Encode(),
		"/api/v1/labels",
	}
	want := make([][]byte, len(targets))
	for i, target := range targets {
		rec := serveWith(t, mux, target, "")
		want[i] = decoded(t, rec.Header(), rec.Body)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 20 {
				i := (g + k) % len(targets)
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+targets[i], nil)
				if err != nil {
					t.Error(err)
					return
				}
				// Set explicitly, so that the client leaves the body
				// compressed.
				req.Header.Set("Accept-Encoding", "gzip")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				got := decoded(t, resp.Header, resp.Body)
				if err := resp.Body.Close(); err != nil {
					t.Error(err)
				}
				if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(got, want[i]) {
					t.Errorf("%s: encoding %q, body\n%s\nwant\n%s", targets[i], resp.Header.Get("Content-Encoding"), got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRemoteReadNotCompressed: remote read answers snappy whatever the
// client accepts, as Prometheus does.
func TestRemoteReadNotCompressed(t *testing.T) {
	srv, _ := newTestServer(t, DefaultConfig())
	req := readRequest(t, srv.URL, prompb.ReadRequest_SAMPLES)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "snappy" {
		t.Fatalf("status %d, Content-Encoding %q, want snappy", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
}

// TestCompressorsSameBytes: a pooled encoder writes the bytes a fresh
// encoder writes, on its first use and after, with the headers Prometheus'
// CompressionHandler sets.
func TestCompressorsSameBytes(t *testing.T) {
	body := bytes.Repeat([]byte(`{"metric":{"Hostname":"gpu-node-07"},"values":[[1700000000,"41.5"]]},`), 400)
	inner := httputil.CompressionHandler{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write(body); err != nil {
			t.Error(err)
		}
	})}
	var c compressors
	pooled := c.wrap(inner.ServeHTTP)
	for _, tc := range []struct {
		enc   string
		fresh func(io.Writer) io.WriteCloser
	}{
		{"gzip", func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }},
		{"deflate", func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }},
	} {
		var want bytes.Buffer
		fw := tc.fresh(&want)
		if _, err := fw.Write(body); err != nil {
			t.Fatal(err)
		}
		if err := fw.Close(); err != nil {
			t.Fatal(err)
		}
		prom := serveWith(t, inner, "/", tc.enc)
		for i := range 3 {
			got := serveWith(t, pooled, "/", tc.enc)
			if gotBody := got.Body.Bytes(); !bytes.Equal(gotBody, want.Bytes()) {
				t.Fatalf("%s, response %d: %d bytes differ from a fresh encoder's %d", tc.enc, i, len(gotBody), want.Len())
			}
			for _, h := range []string{"Content-Encoding", "Content-Type", "Vary"} {
				if g, w := got.Header().Values(h), prom.Header().Values(h); !slices.Equal(g, w) {
					t.Errorf("%s, response %d: %s %q, Prometheus' %q", tc.enc, i, h, g, w)
				}
			}
		}
	}
}
