package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/remotewrite"
	"github.com/strata-dev/strata/tiers"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fixturesDir holds the exporter fixtures of package dcgmbridge
// (../testdata/README.md gives their sources).
func fixturesDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("..", "testdata")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("fixtures not found: %v", err)
	}
	return dir
}

func newTestCatalogue(t testing.TB) *dcgmbridge.Catalogue {
	t.Helper()
	c, err := dcgmbridge.NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeClock is an injected clock that tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// bodyServer serves whatever body is currently set, on 127.0.0.1.
type bodyServer struct {
	*httptest.Server
	mu     sync.Mutex
	body   []byte
	status int
	ctype  string
}

func newBodyServer(t *testing.T, body []byte) *bodyServer {
	t.Helper()
	s := &bodyServer{body: body, status: http.StatusOK, ctype: "text/plain; version=0.0.4; charset=utf-8"}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		body, status, ctype := s.body, s.status, s.ctype
		s.mu.Unlock()
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *bodyServer) set(body []byte, status int) {
	s.mu.Lock()
	s.body, s.status = body, status
	s.mu.Unlock()
}

type scrapeEnv struct {
	raw   *tiers.Raw
	clock *fakeClock
	logs  *bytes.Buffer
}

func newScrapeEnv(t *testing.T) *scrapeEnv {
	t.Helper()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := raw.Close(); err != nil {
			t.Error(err)
		}
	})
	return &scrapeEnv{raw: raw, clock: &fakeClock{t: t0}, logs: &bytes.Buffer{}}
}

func (e *scrapeEnv) scraper(t *testing.T, cfg Config, opts ...Option) *Scraper {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(e.logs, nil))
	s, err := New(cfg, e.raw, logger, prometheus.NewRegistry(), e.clock.now, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// series returns every series matching the selector with its samples.
func (e *scrapeEnv) series(t *testing.T, matchers ...*labels.Matcher) map[string][]float64 {
	t.Helper()
	q, err := e.raw.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), true, nil, matchers...)
	out := map[string][]float64{}
	for ss.Next() {
		s := ss.At()
		it := s.Iterator(nil)
		var vs []float64
		for it.Next() == chunkenc.ValFloat {
			_, v := it.At()
			vs = append(vs, v)
		}
		out[s.Labels().String()] = vs
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func nameIs(n string) *labels.Matcher { return labels.MustNewMatcher(labels.MatchEqual, "__name__", n) }

func lastValue(t *testing.T, m map[string][]float64) float64 {
	t.Helper()
	if len(m) != 1 {
		t.Fatalf("want one series, got %v", m)
	}
	for _, vs := range m {
		return vs[len(vs)-1]
	}
	return math.NaN()
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestScrapeFixturesEndToEnd serves every exposition fixture over HTTP and
// scrapes it into a raw tier: samples, health series, sentinels, staleness.
func TestScrapeFixturesEndToEnd(t *testing.T) {
	e := newScrapeEnv(t)
	dcgmBody := readFixture(t, "dcgm_exporter_profiling_k8s.prom")
	// An old exporter leaking a "not supported" sentinel (dcgm-exporter README).
	sentinel := `DCGM_FI_DEV_MEMORY_TEMP{gpu="2",UUID="GPU-x",device="nvidia2",modelName="H100",Hostname="gpu-node-a17"} 9223372036854775794` + "\n"
	dcgm := newBodyServer(t, append(bytes.Clone(dcgmBody), sentinel...))
	vllm := newBodyServer(t, readFixture(t, "vllm_v1_t0_healthy.prom"))
	ebpf := newBodyServer(t, readFixture(t, "ebpf_exporter/bio_latency_exposition.prom"))
	bpft := newBodyServer(t, readFixture(t, "bpftrace_exporter/histmap.metrics"))
	bpft.ctype = "application/openmetrics-text; version=1.0.0; charset=utf-8"
	// Served as OpenMetrics (what bpftrace_exporter speaks): no blank lines, # EOF.
	bpft.set(append(bytes.TrimLeft(readFixture(t, "bpftrace_exporter/histmap.metrics"), "\n"), "# EOF\n"...), http.StatusOK)
	s := e.scraper(t, Config{Targets: []Target{
		{Name: "dcgm", URL: dcgm.URL + "/metrics", Kind: KindDCGM},
		{Name: "vllm", URL: vllm.URL + "/metrics", Kind: KindVLLM, Labels: map[string]string{"namespace": "inference", "pod": "vllm-0"}},
		{Name: "ebpf", URL: ebpf.URL + "/metrics", Kind: KindEBPF},
		{Name: "bpftrace", URL: bpft.URL + "/metrics", Kind: KindGeneric},
	}})
	s.ScrapeOnce(context.Background())

	for _, job := range []string{"dcgm", "vllm", "ebpf", "bpftrace"} {
		up := lastValue(t, e.series(t, nameIs("up"), labels.MustNewMatcher(labels.MatchEqual, "job", job)))
		if up != 1 {
			t.Errorf("up{job=%s} = %g; logs:\n%s", job, up, e.logs)
		}
	}
	n := lastValue(t, e.series(t, nameIs("scrape_samples_scraped"), labels.MustNewMatcher(labels.MatchEqual, "job", "vllm")))
	if got := len(e.series(t, labels.MustNewMatcher(labels.MatchRegexp, "__name__", "vllm:.+"))); float64(got) != n || n == 0 {
		t.Errorf("vllm: %d series stored, scrape_samples_scraped %g", got, n)
	}
	kv := e.series(t, nameIs("vllm:kv_cache_usage_perc"))
	for k, vs := range kv {
		if !strings.Contains(k, `pod="vllm-0"`) || !strings.Contains(k, `instance="127.0.0.1:`) || vs[0] != 0.412 {
			t.Errorf("kv usage series %s %v", k, vs)
		}
	}
	if len(e.series(t, nameIs("DCGM_FI_DEV_MEMORY_TEMP"), labels.MustNewMatcher(labels.MatchEqual, "gpu", "2"))) != 0 {
		t.Error("sentinel value stored")
	}
	if got := testutil.ToFloat64(s.parser.Sentinels.dropped.WithLabelValues("DCGM_FI_DEV_MEMORY_TEMP")); got != 1 {
		t.Errorf("sentinel counter %g", got)
	}
	if got := len(e.series(t, nameIs("bpftrace_histmap_h_bucket"))); got != 6 {
		t.Errorf("sparse bpftrace buckets: %d series", got)
	}

	// Second scrape: a series vanished, so it gets a stale marker.
	e.clock.advance(15 * time.Second)
	var kept []string
	for line := range strings.SplitSeq(string(dcgmBody), "\n") {
		if !strings.HasPrefix(line, "DCGM_FI_DEV_SM_CLOCK{") {
			kept = append(kept, line)
		}
	}
	dcgm.set([]byte(strings.Join(kept, "\n")), http.StatusOK)
	s.ScrapeOnce(context.Background())
	for k, vs := range e.series(t, nameIs("DCGM_FI_DEV_SM_CLOCK")) {
		if len(vs) != 2 || !value.IsStaleNaN(vs[1]) {
			t.Errorf("%s: want a value then a stale marker, got %v", k, vs)
		}
	}
	for k, vs := range e.series(t, nameIs("DCGM_FI_DEV_GPU_TEMP")) {
		if len(vs) != 2 || value.IsStaleNaN(vs[1]) {
			t.Errorf("%s: still exposed, got %v", k, vs)
		}
	}

	// Third scrape: the target fails; it is down and every series ends.
	e.clock.advance(15 * time.Second)
	vllm.set([]byte("oops"), http.StatusInternalServerError)
	s.ScrapeOnce(context.Background())
	if up := lastValue(t, e.series(t, nameIs("up"), labels.MustNewMatcher(labels.MatchEqual, "job", "vllm"))); up != 0 {
		t.Errorf("up after HTTP 500 = %g", up)
	}
	for k, vs := range e.series(t, nameIs("vllm:kv_cache_usage_perc")) {
		if !value.IsStaleNaN(vs[len(vs)-1]) {
			t.Errorf("%s not marked stale after a failed scrape: %v", k, vs)
		}
	}
	if got := testutil.ToFloat64(s.metrics.failures.WithLabelValues("vllm", ReasonHTTP)); got != 1 {
		t.Errorf("failures{vllm,http_error} = %g", got)
	}
}

// TestScrapeHostile serves broken and hostile expositions: each is counted
// with its reason, the target is down, and nothing of the body is stored.
func TestScrapeHostile(t *testing.T) {
	good := "# TYPE ok_metric gauge\nok_metric 1\n"
	var many string
	for i := range 20 {
		many += fmt.Sprintf("many_metric{i=\"%d\"} 1\n", i)
	}
	for _, tc := range []struct {
		name   string
		body   string
		status int
		limits func(*Config)
		opts   []Option
		reason string
	}{
		{name: "huge line", body: good + "big{l=\"" + strings.Repeat("a", 5000) + "\"} 1\n", limits: func(c *Config) { c.LineLimit = 4096 }, reason: ReasonLineTooLong},
		{name: "escape eats the closing quote", body: good + "bad{l=\"\\\"} 1\n", reason: ReasonParse},
		{name: "unterminated label", body: good + "bad{l=\"x} 1\n", reason: ReasonParse},
		{name: "not a number", body: good + "bad 1x\n", reason: ReasonParse},
		{name: "duplicate series", body: good + "dup{a=\"1\"} 1\ndup{a=\"1\"} 2\n", reason: ReasonDuplicateSeries},
		{name: "type declared twice", body: good + "# TYPE t counter\nt 1\n# TYPE t gauge\n", reason: ReasonWrongType},
		{name: "negative counter", body: good + "# TYPE c_total counter\nc_total -5\n", reason: ReasonWrongType},
		{name: "bucket without le", body: good + "# TYPE h histogram\nh_bucket{x=\"1\"} 1\nh_count 1\nh_sum 1\n", reason: ReasonWrongType},
		{name: "unknown type", body: "# TYPE t banana\nt 1\n", reason: ReasonParse},
		{name: "too many samples", body: good + many, limits: func(c *Config) { c.SampleLimit = 10 }, reason: ReasonTooManySamples},
		{name: "body too large", body: good + many, limits: func(c *Config) { c.BodyLimit = 64 }, reason: ReasonBodyTooLarge},
		{name: "label value over the remote-write limit", body: good + "long{l=\"" + strings.Repeat("v", 300) + "\"} 1\n",
			limits: func(c *Config) { c.Limits.MaxLabelValueLength = 256 }, reason: remotewrite.ReasonLabelValueTooLong},
		{name: "invalid utf-8 label", body: good + "u{l=\"\xff\"} 1\n", reason: ReasonParse},
		{name: "too many labels for remote write", body: good + "w{a=\"1\",b=\"2\",c=\"3\",d=\"4\"} 1\n",
			limits: func(c *Config) { c.Limits.MaxLabelsPerSeries = 5 }, reason: remotewrite.ReasonTooManyLabels},
		{name: "http 503", body: good, status: http.StatusServiceUnavailable, reason: ReasonHTTP},
		// With no limits configured the receiver's defaults and its structural
		// checks still apply.
		{name: "label value over the default remote-write limit", body: good + "long{l=\"" + strings.Repeat("v", 4097) + "\"} 1\n", reason: remotewrite.ReasonLabelValueTooLong},
		{name: "exposed exported_job and job give a repeated label name", body: good + "x{exported_job=\"a\",job=\"b\"} 1\n", reason: remotewrite.ReasonDuplicateLabel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newScrapeEnv(t)
			srv := newBodyServer(t, []byte(tc.body))
			if tc.status != 0 {
				srv.set([]byte(tc.body), tc.status)
			}
			cfg := Config{Targets: []Target{{Name: "hostile", URL: srv.URL + "/metrics"}}}
			if tc.limits != nil {
				tc.limits(&cfg)
			}
			s := e.scraper(t, cfg, tc.opts...)
			s.ScrapeOnce(context.Background())
			if got := testutil.ToFloat64(s.metrics.failures.WithLabelValues("hostile", tc.reason)); got != 1 {
				t.Errorf("failures{reason=%s} = %g; logs:\n%s", tc.reason, got, e.logs)
			}
			if up := lastValue(t, e.series(t, nameIs("up"))); up != 0 {
				t.Errorf("up = %g", up)
			}
			// Nothing but the three health series was appended.
			all := e.series(t, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
			if len(all) != 3 {
				t.Errorf("stored %d series, want only the 3 health series: %v", len(all), all)
			}
		})
	}
}

// TestScrapeTimeout runs in a synctest bubble: the target never answers, and
// the scrape's 100 ms timeout passes on the bubble's clock, at once.
func TestScrapeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The target hangs until the request is canceled; it is served in
		// memory, as a network connection would leave the bubble.
		hang := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		})
		logs := &bytes.Buffer{}
		app := &memAppendable{}
		s, err := New(Config{Targets: []Target{{Name: "slow", URL: "http://127.0.0.1:9/metrics", Interval: time.Second, Timeout: 100 * time.Millisecond}}},
			app, slog.New(slog.NewTextHandler(logs, nil)), prometheus.NewRegistry(), time.Now, WithHTTPClient(&http.Client{Transport: hang}))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		s.ScrapeOnce(context.Background())
		if got := testutil.ToFloat64(s.metrics.failures.WithLabelValues("slow", ReasonTimeout)); got != 1 {
			t.Errorf("timeout failures = %g; logs:\n%s", got, logs)
		}
		if waited := time.Since(start); waited != 100*time.Millisecond {
			t.Errorf("the scrape gave up after %s, want the 100ms timeout", waited)
		}
		if up, ok := app.last("up"); !ok || up != 0 {
			t.Errorf("up = %g (stored %v)", up, ok)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestScrapeStorageGate: while the storage gate refuses, a scrape fetches
// and appends nothing, and its target's status and failure count say why;
// once it lets them through, scrapes append again.
func TestScrapeStorageGate(t *testing.T) {
	fetched := 0
	target := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		fetched++
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; version=0.0.4"}},
			Body: io.NopCloser(strings.NewReader("gated_metric 1\n")), Request: r}, nil
	})
	gateErr := errors.New("disk space low: 10 bytes free")
	full := true
	app := &memAppendable{}
	s, err := New(Config{Targets: []Target{{Name: "t", URL: "http://127.0.0.1:9/metrics", Interval: time.Second, Timeout: time.Second}}},
		app, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), time.Now, WithHTTPClient(&http.Client{Transport: target}),
		WithStorageGate(func() error {
			if full {
				return gateErr
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.ScrapeOnce(context.Background())
	if _, ok := app.last("up"); ok || fetched != 0 {
		t.Fatalf("a gated scrape fetched %d times, stored up: %v", fetched, ok)
	}
	if st := s.Targets(); len(st) != 1 || !errors.Is(st[0].LastError, gateErr) {
		t.Fatalf("target status %+v, want the gate's error", st)
	}
	if got := testutil.ToFloat64(s.metrics.failures.WithLabelValues("t", remotewrite.ReasonDiskSpace)); got != 1 {
		t.Errorf("disk_space_low failures = %g, want 1", got)
	}
	full = false
	s.ScrapeOnce(context.Background())
	if v, ok := app.last("gated_metric"); !ok || v != 1 || fetched != 1 {
		t.Fatalf("after the gate opened: gated_metric %g (stored %v), fetched %d times", v, ok, fetched)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// memAppendable keeps committed float samples in memory, by metric name.
type memAppendable struct {
	mu      sync.Mutex
	samples map[string][]float64
}

func (m *memAppendable) AppenderV2(context.Context) storage.AppenderV2 { return &memAppender{m: m} }

// last returns the newest committed value of the metric name.
func (m *memAppendable) last(name string) (float64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.samples[name]
	if len(vs) == 0 {
		return 0, false
	}
	return vs[len(vs)-1], true
}

type memAppender struct {
	m       *memAppendable
	pending []labels.Labels
	values  []float64
}

func (a *memAppender) Append(_ storage.SeriesRef, ls labels.Labels, _, _ int64, v float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AOptions) (storage.SeriesRef, error) {
	a.pending, a.values = append(a.pending, ls), append(a.values, v)
	return storage.SeriesRef(ls.Hash()), nil
}

func (a *memAppender) Commit() error {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	if a.m.samples == nil {
		a.m.samples = map[string][]float64{}
	}
	for i, ls := range a.pending {
		name := ls.Get("__name__")
		a.m.samples[name] = append(a.m.samples[name], a.values[i])
	}
	return nil
}

func (a *memAppender) Rollback() error { return nil }

// commitSignal appends through next and signals every commit of it.
type commitSignal struct {
	next      storage.AppendableV2
	committed chan struct{}
}

func (c *commitSignal) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return &signalAppender{AppenderV2: c.next.AppenderV2(ctx), committed: c.committed}
}

type signalAppender struct {
	storage.AppenderV2
	committed chan<- struct{}
}

func (a *signalAppender) Commit() error {
	err := a.AppenderV2.Commit()
	a.committed <- struct{}{}
	return err
}

func TestConfigValidate(t *testing.T) {
	ok := Target{Name: "a", URL: "http://127.0.0.1:9400/metrics", Kind: KindDCGM}
	for _, tc := range []struct {
		name    string
		targets []Target
		want    string
	}{
		{"empty name", []Target{{URL: ok.URL}}, "name is empty"},
		{"duplicate name", []Target{ok, ok}, "duplicate name"},
		{"bad scheme", []Target{{Name: "a", URL: "ftp://x/metrics"}}, "must be http or https"},
		{"no host", []Target{{Name: "a", URL: "http:///metrics"}}, "has no host"},
		{"bad kind", []Target{{Name: "a", URL: ok.URL, Kind: "prometheus"}}, "is not one of"},
		{"timeout over interval", []Target{{Name: "a", URL: ok.URL, Interval: time.Second, Timeout: 2 * time.Second}}, "at most the interval"},
		{"reserved label", []Target{{Name: "a", URL: ok.URL, Labels: map[string]string{"job": "x"}}}, "cannot be set"},
		{"invalid label", []Target{{Name: "a", URL: ok.URL, Labels: map[string]string{"a-b": "x"}}}, "cannot be set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Config{Targets: tc.targets}.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
	if err := (Config{Targets: []Target{ok}}).Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (Config{Targets: []Target{ok}}).withDefaults().Targets[0]; got.Interval != DCGMCollectInterval || got.Timeout != DefaultScrapeTimeout {
		t.Errorf("dcgm defaults: %+v", got)
	}
}

func TestDCGMFastScrapeWarning(t *testing.T) {
	e := newScrapeEnv(t)
	e.scraper(t, Config{Targets: []Target{{Name: "dcgm", URL: "http://127.0.0.1:9400/metrics", Kind: KindDCGM, Interval: 5 * time.Second, Timeout: time.Second}}})
	if !strings.Contains(e.logs.String(), "faster than dcgm-exporter") || !strings.Contains(e.logs.String(), `target \"dcgm\"`) {
		t.Fatalf("no warning in logs:\n%s", e.logs)
	}
	e.logs.Reset()
	e.scraper(t, Config{Targets: []Target{{Name: "vllm", URL: "http://127.0.0.1:8000/metrics", Kind: KindVLLM, Interval: 5 * time.Second, Timeout: time.Second}}})
	if strings.Contains(e.logs.String(), "faster than") {
		t.Fatalf("warning for a vLLM target:\n%s", e.logs)
	}
}

// TestRunAndClose runs the loop, waits for the first scrape's two commits
// (its samples, then its health series), closes, and checks that Close ends
// the target's series with stale markers.
func TestRunAndClose(t *testing.T) {
	e := newScrapeEnv(t)
	srv := newBodyServer(t, []byte("# TYPE g gauge\ng 1\n"))
	app := &commitSignal{next: e.raw, committed: make(chan struct{}, 8)}
	s, err := New(Config{Targets: []Target{{Name: "t", URL: srv.URL, Interval: time.Hour}}}, app,
		slog.New(slog.NewTextHandler(e.logs, nil)), prometheus.NewRegistry(), e.clock.now)
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(context.Background()) }()
	for range 2 {
		select {
		case <-app.committed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no scrape committed within 10 s; logs:\n%s", e.logs)
		}
	}
	e.clock.advance(time.Second)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	vs := e.series(t, nameIs("g"))
	if len(vs) != 1 {
		t.Fatalf("series %v", vs)
	}
	for k, v := range vs {
		if len(v) != 2 || v[0] != 1 || !value.IsStaleNaN(v[1]) {
			t.Errorf("%s: %v", k, v)
		}
	}
}

func FuzzParseExposition(f *testing.F) {
	for _, name := range []string{"vllm_v0_legacy.prom", "bpftrace_exporter/histmap.metrics"} {
		b, err := os.ReadFile(filepath.Join(fixturesDir(f), name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "text/plain")
	}
	f.Add([]byte("# TYPE a counter\na_total 1\n# EOF\n"), "application/openmetrics-text; version=1.0.0")
	f.Add([]byte("a{b=\"\\\"\"} 1\n"), "")
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		f.Fatal(err)
	}
	p := &ExpositionParser{Limits: ParseLimits{MaxSamples: 1000, MaxLineBytes: 4096}, Sentinels: NewSentinelFilter(cat, prometheus.NewRegistry()), Series: remotewrite.Limits{MaxLabelValueLength: 1024}}
	target := labels.FromStrings("job", "fuzz", "instance", "x:1")
	f.Fuzz(func(t *testing.T, body []byte, ctype string) {
		exp, err := p.Parse(body, ctype, target, t0)
		if err != nil {
			if RejectReason(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		seen := map[uint64]bool{}
		for _, s := range exp.Samples {
			if s.Labels.Get("job") != "fuzz" || s.Labels.Get("__name__") == "" {
				t.Fatalf("bad labels %s", s.Labels)
			}
			if seen[s.Labels.Hash()] {
				t.Fatalf("duplicate %s accepted", s.Labels)
			}
			seen[s.Labels.Hash()] = true
		}
	})
}

func BenchmarkParseVLLMExposition(b *testing.B) {
	body, err := os.ReadFile(filepath.Join(fixturesDir(b), "vllm_v1_t1_kv_storm.prom"))
	if err != nil {
		b.Fatal(err)
	}
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		b.Fatal(err)
	}
	p := &ExpositionParser{Limits: ParseLimits{MaxSamples: DefaultSampleLimit, MaxLineBytes: DefaultLineLimit}, Sentinels: NewSentinelFilter(cat, prometheus.NewRegistry()), Series: remotewrite.DefaultLimits()}
	target := labels.FromStrings("job", "vllm", "instance", "10.0.0.5:8000", "namespace", "inference", "pod", "p")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		exp, err := p.Parse(body, "text/plain; version=0.0.4", target, t0)
		if err != nil {
			b.Fatal(err)
		}
		n = len(exp.Samples)
	}
	b.ReportMetric(float64(n), "samples/op")
}

func BenchmarkScrapeDCGMIntoRawTier(b *testing.B) {
	body, err := os.ReadFile(filepath.Join(fixturesDir(b), "dcgm_exporter_profiling_k8s.prom"))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	clock := &fakeClock{t: time.Now()}
	s, err := New(Config{Targets: []Target{{Name: "dcgm", URL: srv.URL, Kind: KindDCGM}}}, raw, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), clock.now)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		clock.advance(time.Second)
		s.ScrapeOnce(context.Background())
	}
	if got := testutil.ToFloat64(s.metrics.failures.WithLabelValues("dcgm", ReasonAppend)); got != 0 {
		b.Fatalf("%g append failures", got)
	}
}

func TestTargetLabelsWinOverExposedLabels(t *testing.T) {
	p := &ExpositionParser{}
	exp, err := p.Parse([]byte("m{job=\"inner\",pod=\"a\"} 1\n"), "", labels.FromStrings("job", "outer", "instance", "h:1", "pod", "b"), t0)
	if err != nil {
		t.Fatal(err)
	}
	want := labels.FromStrings("__name__", "m", "exported_job", "inner", "exported_pod", "a", "instance", "h:1", "job", "outer", "pod", "b")
	if len(exp.Samples) != 1 || !labels.Equal(exp.Samples[0].Labels, want) {
		t.Fatalf("got %v, want %v", exp.Samples, want)
	}
}

// TestTargetsReportScrapes checks what /api/v1/targets is built from: each
// target's latest scrape, unknown before the first, with the failure's
// error and the target's labels.
func TestTargetsReportScrapes(t *testing.T) {
	e := newScrapeEnv(t)
	ok := newBodyServer(t, []byte("# TYPE g gauge\ng 1\n"))
	bad := newBodyServer(t, nil)
	bad.set([]byte("oops"), http.StatusServiceUnavailable)
	s := e.scraper(t, Config{Targets: []Target{
		{Name: "ok", URL: ok.URL + "/metrics", Labels: map[string]string{"pod": "p"}},
		{Name: "bad", URL: bad.URL + "/metrics", Kind: KindDCGM},
	}})
	before := s.Targets()
	if len(before) != 2 || !before[0].LastScrape.IsZero() || before[1].Target.Interval != DCGMCollectInterval {
		t.Fatalf("before any scrape: %+v", before)
	}
	e.clock.advance(time.Second)
	s.ScrapeOnce(context.Background())
	got := s.Targets()
	if got[0].LastError != nil || !got[0].LastScrape.Equal(e.clock.now()) || got[0].Labels.Get("pod") != "p" || got[0].Labels.Get("job") != "ok" {
		t.Errorf("ok target: %+v", got[0])
	}
	if got[1].LastError == nil || !strings.Contains(got[1].LastError.Error(), "503") || got[1].LastScrape.IsZero() {
		t.Errorf("bad target: %+v", got[1])
	}
}

// TestScrapeKeepsMetadata: a scrape's # TYPE, # HELP and # UNIT lines
// (Prometheus text and OpenMetrics) reach the metadata store that
// /api/v1/metadata answers from, and survive a reopening of it; a failed
// scrape changes nothing, a changed help replaces the old one.
func TestScrapeKeepsMetadata(t *testing.T) {
	p := &ExpositionParser{}
	om := "# TYPE vllm:prompt_tokens counter\n# HELP vllm:prompt_tokens Prefill tokens processed.\n# UNIT vllm:prompt_tokens tokens\nvllm:prompt_tokens_total 7\n# EOF\n"
	exp, err := p.Parse([]byte(om), "application/openmetrics-text; version=1.0.0", labels.EmptyLabels(), t0)
	if err != nil {
		t.Fatal(err)
	}
	want := remotewrite.Metadata{Type: model.MetricTypeCounter, Help: "Prefill tokens processed.", Unit: "tokens"}
	if got := exp.Metadata["vllm:prompt_tokens"]; len(exp.Metadata) != 1 || got != want {
		t.Fatalf("OpenMetrics metadata %v, want vllm:prompt_tokens %+v", exp.Metadata, want)
	}

	e := newScrapeEnv(t)
	path := filepath.Join(t.TempDir(), "metadata.json")
	store, err := remotewrite.OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	body := "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 41\n# TYPE untyped_help_only untyped\nuntyped_help_only 1\n"
	srv := newBodyServer(t, []byte(body))
	s := e.scraper(t, Config{Targets: []Target{{Name: "dcgm", URL: srv.URL, Kind: KindGeneric}}}, WithMetadata(store))
	s.ScrapeOnce(context.Background())
	check := func(st *remotewrite.MetadataStore, family string, want metadata.Metadata) {
		t.Helper()
		got := st.Metadata(family)[family]
		if len(got) != 1 || got[0] != want {
			t.Errorf("metadata of %s: %v, want %+v", family, got, want)
		}
	}
	temp := metadata.Metadata{Type: model.MetricTypeGauge, Help: "GPU temperature (in C)."}
	check(store, "DCGM_FI_DEV_GPU_TEMP", temp)
	if got := store.Metadata("untyped_help_only"); len(got) != 0 {
		t.Errorf("an untyped family with no help or unit is empty metadata, kept as %v", got)
	}

	srv.set([]byte("not an exposition {"), http.StatusOK)
	e.clock.advance(15 * time.Second)
	s.ScrapeOnce(context.Background())
	check(store, "DCGM_FI_DEV_GPU_TEMP", temp)

	srv.set([]byte("# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature, degrees C.\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 42\n"), http.StatusOK)
	e.clock.advance(15 * time.Second)
	s.ScrapeOnce(context.Background())
	temp.Help = "GPU temperature, degrees C."
	check(store, "DCGM_FI_DEV_GPU_TEMP", temp)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := remotewrite.OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	check(again, "DCGM_FI_DEV_GPU_TEMP", temp)
}
