package remotewrite

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/tiers"
)

const (
	ctV1 = "application/x-protobuf"
	ctV2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
)

// base is the fixed "now" of the handler tests: the TSDB accepts any time for
// an empty head, so no test depends on the wall clock.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type testEnv struct {
	h   *Handler
	raw *tiers.Raw
	reg *prometheus.Registry
}

func newTestEnv(t testing.TB, cfg Config) *testEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.DiscardHandler)
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := raw.Close(); err != nil {
			t.Error(err)
		}
	})
	h, err := NewHandler(cfg, raw, NewMetadataStore(0), logger, reg, func() time.Time { return base })
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{h: h, raw: raw, reg: reg}
}

func encodeV1(t testing.TB, wr *prompb.WriteRequest) []byte {
	t.Helper()
	b, err := wr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, b)
}

func encodeV2(t testing.TB, req *writev2.Request) []byte {
	t.Helper()
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, b)
}

func (e *testEnv) post(body []byte, contentType, encoding string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/write", bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	if encoding != "" {
		r.Header.Set("Content-Encoding", encoding)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

type point struct {
	t int64
	v float64
	h *histogram.FloatHistogram
}

// read returns every series whose __name__ is name, keyed by its label string.
func (e *testEnv) read(t *testing.T, name string) map[string][]point {
	t.Helper()
	q, err := e.raw.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, name))
	out := map[string][]point{}
	var it chunkenc.Iterator
	for ss.Next() {
		s := ss.At()
		it = s.Iterator(it)
		var pts []point
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				ts, v := it.At()
				pts = append(pts, point{t: ts, v: v})
			case chunkenc.ValHistogram, chunkenc.ValFloatHistogram:
				ts, fh := it.AtFloatHistogram(nil)
				pts = append(pts, point{t: ts, h: fh})
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		out[s.Labels().String()] = pts
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func series(name string, kv []string, samples ...prompb.Sample) prompb.TimeSeries {
	ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: name}}, Samples: samples}
	for i := 0; i < len(kv); i += 2 {
		ts.Labels = append(ts.Labels, prompb.Label{Name: kv[i], Value: kv[i+1]})
	}
	return ts
}

func ms(d time.Duration) int64 { return base.Add(d).UnixMilli() }

// checkNoWritten asserts a RW 1.0 response carries none of the RW 2.0
// *-Written headers: a Prometheus 3 sender takes any of them as the written
// counts, so a 0 would make it count a successful request's samples as failed.
func checkNoWritten(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	for _, h := range []string{headerSamplesWritten, headerHistogramsWritten, headerExemplarsWritten} {
		if v, ok := w.Header()[h]; ok {
			t.Errorf("RW 1.0 response carries %s: %q", h, v)
		}
	}
}

func checkWritten(t *testing.T, w *httptest.ResponseRecorder, samples, histograms, exemplars string) {
	t.Helper()
	for _, c := range []struct{ h, want string }{
		{headerSamplesWritten, samples}, {headerHistogramsWritten, histograms}, {headerExemplarsWritten, exemplars},
	} {
		if got := w.Header().Get(c.h); got != c.want {
			t.Errorf("%s = %q, want %q", c.h, got, c.want)
		}
	}
}

// TestHandlerV1 runs requests against one receiver in order; after each one
// the data of the first (good) request must still be readable.
func TestHandlerV1(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	good := encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		series("good", []string{"job", "a"}, prompb.Sample{Timestamp: ms(0), Value: 1}, prompb.Sample{Timestamp: ms(time.Second), Value: 2}),
	}})
	w := env.post(good, ctV1, "snappy")
	if w.Code != http.StatusNoContent {
		t.Fatalf("good request: %d %s", w.Code, w.Body)
	}
	checkNoWritten(t, w)
	wantGood := map[string][]point{`{__name__="good", job="a"}`: {{t: ms(0), v: 1}, {t: ms(time.Second), v: 2}}}

	hugeClaim := []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14} // varint 4 GiB - 1
	cases := []struct {
		name        string
		body        []byte
		contentType string
		encoding    string
		code        int
		msg         string // exact body (without the trailing newline) when set
		msgPrefix   string
	}{
		{
			name: "truncated snappy", body: good[:len(good)-3], contentType: ctV1, encoding: "snappy",
			code: 400, msg: "bad snappy block: snappy: corrupt input",
		},
		{
			name: "garbage protobuf", body: snappy.Encode(nil, []byte{0x0a, 0xff, 0xff, 0xff, 0x0f, 1}), contentType: ctV1, encoding: "snappy",
			code: 400, msg: "bad protobuf: read WriteRequest field: cannot read data for field #1 from 1 bytes; need at least 33554431 bytes",
		},
		{
			name: "huge claimed decompressed length", body: hugeClaim, contentType: ctV1, encoding: "snappy",
			code: 413, msg: "decompressed body too large: the snappy header announces 4294967295 bytes, the limit is 134217728",
		},
		{
			name: "wrong content type", body: good, contentType: "application/json", encoding: "snappy",
			code: 415, msg: `unsupported Content-Type "application/json", want application/x-protobuf`,
		},
		{
			name: "unknown proto", body: good, contentType: "application/x-protobuf;proto=foo.Bar", encoding: "snappy",
			code: 415, msg: `unsupported protobuf message "foo.Bar", want prometheus.WriteRequest or io.prometheus.write.v2.Request`,
		},
		{
			name: "wrong content encoding", body: good, contentType: ctV1, encoding: "gzip",
			code: 415, msg: `unsupported Content-Encoding "gzip", want snappy`,
		},
		{
			name: "duplicate labels", contentType: ctV1, encoding: "snappy",
			body: encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				series("dup", []string{"job", "a", "job", "b"}, prompb.Sample{Timestamp: ms(0), Value: 1}),
			}}),
			code: 400, msg: `1 of 1 samples, histograms and exemplars rejected: series {__name__="dup", job="a", job="b"}: invalid labels: duplicate label name "job"`,
		},
		{
			name: "empty label name", contentType: ctV1, encoding: "snappy",
			body: encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				series("noname", []string{"", "x"}, prompb.Sample{Timestamp: ms(0), Value: 1}),
			}}),
			code: 400, msg: `1 of 1 samples, histograms and exemplars rejected: series {="x", __name__="noname"}: invalid labels: empty label name`,
		},
		{
			name: "missing metric name", contentType: ctV1, encoding: "snappy",
			body: encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				{Labels: []prompb.Label{{Name: "job", Value: "x"}}, Samples: []prompb.Sample{{Timestamp: ms(0), Value: 1}}},
			}}),
			code: 400, msg: `1 of 1 samples, histograms and exemplars rejected: series {job="x"}: invalid labels: missing or empty __name__`,
		},
		{
			name: "invalid utf8", contentType: ctV1, encoding: "snappy",
			body: encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				series("utf", []string{"job", "\xff"}, prompb.Sample{Timestamp: ms(0), Value: 1}),
			}}),
			code: 400, msg: `1 of 1 samples, histograms and exemplars rejected: series {__name__="utf", job="\xff"}: invalid labels: value of label "job" is not valid UTF-8`,
		},
		{
			name: "too far in the future", contentType: ctV1, encoding: "snappy",
			body: encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				series("future", nil, prompb.Sample{Timestamp: ms(11 * time.Minute), Value: 1}),
			}}),
			code: 400, msg: `1 of 1 samples, histograms and exemplars rejected: series {__name__="future"}: timestamp too far in the future: 2026-03-01T12:11:00Z is more than 10m0s ahead of the receiver's clock`,
		},
		{
			name: "too old", contentType: ctV1, encoding: "snappy",
			body: encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				series("good", []string{"job", "a"}, prompb.Sample{Timestamp: ms(-2 * time.Hour), Value: 1}),
			}}),
			code: 400, msgPrefix: `1 of 1 samples, histograms and exemplars rejected: series {__name__="good", job="a"} at 1772359200000: too old sample`,
		},
		{
			name: "duplicate timestamp with another value", contentType: ctV1, encoding: "snappy",
			body: encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				series("good", []string{"job", "a"}, prompb.Sample{Timestamp: ms(time.Second), Value: 3}),
			}}),
			code: 400, msgPrefix: `1 of 1 samples, histograms and exemplars rejected: series {__name__="good", job="a"} at 1772366401000: duplicate sample for timestamp`,
		},
		{
			name: "exact duplicate is idempotent", body: good, contentType: ctV1, encoding: "snappy", code: 204,
		},
		{
			name: "body too large", contentType: ctV1, encoding: "snappy", body: make([]byte, 32<<20+1),
			code: 413, msg: "request body too large: Content-Length 33554433, the limit is 33554432",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := env.post(tc.body, tc.contentType, tc.encoding)
			if w.Code != tc.code {
				t.Fatalf("status %d, want %d; body %q", w.Code, tc.code, w.Body)
			}
			body := strings.TrimSuffix(w.Body.String(), "\n")
			if tc.msg != "" && body != tc.msg {
				t.Errorf("body\n got %q\nwant %q", body, tc.msg)
			}
			if tc.msgPrefix != "" && !strings.HasPrefix(body, tc.msgPrefix) {
				t.Errorf("body\n got %q\nwant prefix %q", body, tc.msgPrefix)
			}
			checkNoWritten(t, w)
			if got := env.read(t, "good"); !equalPoints(got, wantGood) {
				t.Fatalf("accepted data changed: %v", got)
			}
		})
	}
	for _, name := range []string{"dup", "noname", "utf", "future"} {
		if got := env.read(t, name); len(got) != 0 {
			t.Errorf("rejected series %s was stored: %v", name, got)
		}
	}
	if got := testutil.ToFloat64(env.h.m.rejected.WithLabelValues(ReasonTooOld)); got != 1 {
		t.Errorf("rejected_total{reason=too_old} = %v, want 1", got)
	}
}

func equalPoints(a, b map[string][]point) bool {
	if len(a) != len(b) {
		return false
	}
	for k, pa := range a {
		pb := b[k]
		if len(pa) != len(pb) {
			return false
		}
		for i := range pa {
			if pa[i].t != pb[i].t || math.Float64bits(pa[i].v) != math.Float64bits(pb[i].v) {
				return false
			}
		}
	}
	return true
}

func TestHandlerMethodNotAllowed(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	w := httptest.NewRecorder()
	env.h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/write", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
		t.Fatalf("GET: %d, Allow %q", w.Code, w.Header().Get("Allow"))
	}
}

func TestHandlerHugeClaimDoesNotAllocate(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	body := []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14} // 4 GiB - 1
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if w := env.post(body, ctV1, "snappy"); w.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
		t.Fatalf("10 requests claiming 4 GiB allocated %d bytes", d)
	}
	// The same with a limit above the claim's real size: the claim still
	// fails against the limit, never against the allocator.
	allocs := testing.AllocsPerRun(20, func() { env.post(body, ctV1, "snappy") })
	if allocs > 60 {
		t.Fatalf("%.0f allocations per rejected request", allocs)
	}
}

func TestHandlerSpecialValues(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	stale := math.Float64frombits(value.StaleNaN)
	body := encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		// Unsorted labels: accepted and stored sorted.
		{Labels: []prompb.Label{{Name: "zone", Value: "z"}, {Name: "__name__", Value: "special"}, {Name: "app", Value: "a"}},
			Samples: []prompb.Sample{
				{Timestamp: ms(0), Value: math.NaN()},
				{Timestamp: ms(1 * time.Second), Value: math.Inf(1)},
				{Timestamp: ms(2 * time.Second), Value: math.Inf(-1)},
				{Timestamp: ms(3 * time.Second), Value: stale},
			}},
	}})
	if w := env.post(body, "", ""); w.Code != http.StatusNoContent { // empty headers: a "yolo" 1.0 client
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	got := env.read(t, "special")
	pts, ok := got[`{__name__="special", app="a", zone="z"}`]
	if !ok || len(pts) != 4 {
		t.Fatalf("stored %v", got)
	}
	if !math.IsNaN(pts[0].v) || value.IsStaleNaN(pts[0].v) || !math.IsInf(pts[1].v, 1) || !math.IsInf(pts[2].v, -1) {
		t.Errorf("special values: %v", pts)
	}
	if math.Float64bits(pts[3].v) != value.StaleNaN {
		t.Errorf("stale marker stored as %#x, want %#x", math.Float64bits(pts[3].v), value.StaleNaN)
	}
}

func TestHandlerPartialWrite(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	var samples []prompb.Sample
	for i := range 10 {
		samples = append(samples, prompb.Sample{Timestamp: ms(time.Duration(i) * time.Second), Value: float64(i)})
	}
	if w := env.post(encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{series("p", nil, samples[9])}}), ctV1, "snappy"); w.Code != 204 {
		t.Fatal(w.Code, w.Body)
	}
	// Two samples far behind the head (beyond the 10 m out-of-order window)
	// and eight new ones in another series.
	old := []prompb.Sample{{Timestamp: ms(-time.Hour), Value: 1}, {Timestamp: ms(-2 * time.Hour), Value: 2}}
	body := encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		series("p", nil, old...), series("q", nil, samples[:8]...),
	}})
	w := env.post(body, ctV1, "snappy")
	if w.Code != http.StatusBadRequest {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if !strings.HasPrefix(w.Body.String(), "2 of 10 samples, histograms and exemplars rejected: series {__name__=\"p\"} at ") {
		t.Errorf("body %q", w.Body)
	}
	if got := env.read(t, "q"); len(got[`{__name__="q"}`]) != 8 {
		t.Errorf("valid part not committed: %v", got)
	}
}

func TestHandlerErrorBodyCapped(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxErrorBodyBytes = 200
	env := newTestEnv(t, cfg)
	var tss []prompb.TimeSeries
	for range 50 {
		tss = append(tss, prompb.TimeSeries{Labels: []prompb.Label{{Name: "job", Value: strings.Repeat("x", 100)}}, Samples: []prompb.Sample{{Timestamp: ms(0)}}})
	}
	w := env.post(encodeV1(t, &prompb.WriteRequest{Timeseries: tss}), ctV1, "snappy")
	body := strings.TrimSuffix(w.Body.String(), "\n")
	if w.Code != 400 || len(body) > 200 || !strings.HasPrefix(body, "50 of 50 samples") || !strings.HasSuffix(body, " [truncated]") {
		t.Fatalf("%d %q (%d bytes)", w.Code, body, len(body))
	}
}

// blockingReader blocks its first Read until release is closed.
type blockingReader struct {
	started chan struct{}
	release chan struct{}
	r       io.Reader
}

func (b *blockingReader) Read(p []byte) (int, error) {
	select {
	case <-b.started:
	default:
		close(b.started)
	}
	<-b.release
	return b.r.Read(p)
}

func TestHandlerOverload(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInflightRequests = 1
	cfg.RetryAfter = 1500 * time.Millisecond
	env := newTestEnv(t, cfg)
	good := encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{series("ov", nil, prompb.Sample{Timestamp: ms(0), Value: 1})}})

	br := &blockingReader{started: make(chan struct{}), release: make(chan struct{}), r: bytes.NewReader(good)}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/write", br)
	r.Header.Set("Content-Type", ctV1)
	r.ContentLength = int64(len(good))
	done := make(chan int)
	go func() {
		w := httptest.NewRecorder()
		env.h.ServeHTTP(w, r)
		done <- w.Code
	}()
	select {
	case <-br.started:
	case <-time.After(10 * time.Second):
		t.Fatal("first request never started reading")
	}

	// A second request while the first holds the only slot: 429, body unread.
	unread := &countingReader{r: bytes.NewReader(good)}
	r2 := httptest.NewRequest(http.MethodPost, "/api/v1/write", unread)
	r2.Header.Set("Content-Type", ctV1)
	w2 := httptest.NewRecorder()
	env.h.ServeHTTP(w2, r2)
	if w2.Code != http.StatusTooManyRequests || !retryAfterValid(w2.Header().Get("Retry-After"), 2*time.Second) {
		t.Fatalf("second request: %d, Retry-After %q", w2.Code, w2.Header().Get("Retry-After"))
	}
	if unread.n != 0 {
		t.Errorf("overloaded request's body was read (%d bytes)", unread.n)
	}
	close(br.release)
	if code := <-done; code != http.StatusNoContent {
		t.Fatalf("first request: %d", code)
	}
	if got := testutil.ToFloat64(env.h.m.rejected.WithLabelValues(ReasonOverload)); got != 1 {
		t.Errorf("overload rejections %v", got)
	}
	if n, b := env.h.inflightReqs.Load(), env.h.inflightBytes.Load(); n != 0 || b != 0 {
		t.Errorf("in-flight accounting leaked: %d requests, %d bytes", n, b)
	}
	// After the overload the receiver takes requests again.
	if w := env.post(good, ctV1, "snappy"); w.Code != http.StatusNoContent {
		t.Fatalf("after overload: %d %s", w.Code, w.Body)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestHandlerInflightBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInflightBytes = 1 // smaller than any body: only lone requests pass
	env := newTestEnv(t, cfg)
	good := encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{series("ib", nil, prompb.Sample{Timestamp: ms(0), Value: 1})}})
	if w := env.post(good, ctV1, "snappy"); w.Code != http.StatusNoContent {
		t.Fatalf("a lone request must be admitted: %d %s", w.Code, w.Body)
	}
	env.h.inflightBytes.Add(1) // pretend another request holds a byte
	defer env.h.inflightBytes.Add(-1)
	if w := env.post(good, ctV1, "snappy"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("over the byte budget: %d %s", w.Code, w.Body)
	}
}

// TestHandlerConcurrent exercises the pools, the series cache and the
// metadata store from several requests at once (run it with -race).
func TestHandlerConcurrent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SeriesCacheSize = 64 // small: generations turn over during the test
	env := newTestEnv(t, cfg)
	const workers, rounds, perReq = 4, 15, 50
	errs := make(chan error, workers)
	for wk := range workers {
		go func() {
			for round := range rounds {
				b := newV2()
				for i := range perReq {
					b.add(writev2.TimeSeries{
						LabelsRefs: b.refs("__name__", "conc", "worker", strconv.Itoa(wk), "i", strconv.Itoa(i)),
						Samples:    []writev2.Sample{{Value: float64(round), Timestamp: ms(time.Duration(round) * time.Second)}},
						Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: b.st.Symbolize("help " + strconv.Itoa(round%2))},
					})
				}
				if w := env.post(b.encode(t), ctV2, "snappy"); w.Code != http.StatusNoContent {
					errs <- fmt.Errorf("worker %d round %d: %d %s", wk, round, w.Code, w.Body)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := env.read(t, "conc")
	if len(got) != workers*perReq {
		t.Fatalf("%d series stored, want %d", len(got), workers*perReq)
	}
	for k, pts := range got {
		if len(pts) != rounds {
			t.Fatalf("%s: %d samples, want %d", k, len(pts), rounds)
		}
	}
}
