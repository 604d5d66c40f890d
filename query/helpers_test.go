package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/strata-dev/strata/tiers"
)

// t0 is the first sample of the test data set: 2023-11-14T22:13:20Z.
const t0 = int64(1_700_000_000_000)

// testStep is the scrape interval of the test data set.
const testStep = 15_000

// testSamples is how many samples each test series holds (10 minutes).
const testSamples = 41

// openTestRaw opens a raw tier in a temp dir, closed when the test ends.
func openTestRaw(tb testing.TB) *tiers.Raw {
	tb.Helper()
	cfg := tiers.DefaultRawConfig(tb.TempDir())
	raw, err := tiers.OpenRaw(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	// The tests here query what they appended; none tests the TSDB's
	// compactions. Left on, the split tests' 12.5 hours of samples were
	// compacted into a block in the background while the first queries
	// read the head, and CI's race detector once flagged the TSDB's merge
	// querier reading the block and the head at once during it (stop 61).
	raw.DB().DisableCompactions()
	tb.Cleanup(func() {
		if err := raw.Close(); err != nil {
			tb.Error(err)
		}
	})
	return raw
}

// fillTestRaw writes the test data set through the tier's appender:
//
//	http_requests_total{code="200",instance="a",job="vllm"}  10*i
//	http_requests_total{code="500",instance="a",job="vllm"}  i
//	vllm:num_requests_running{instance="a",job="vllm",model="llama"}  i%5
//
// for i in [0, testSamples), one sample every 15 s from t0.
func fillTestRaw(tb testing.TB, raw *tiers.Raw) {
	tb.Helper()
	series := []struct {
		lset labels.Labels
		val  func(i int) float64
	}{
		{labels.FromStrings("__name__", "http_requests_total", "code", "200", "instance", "a", "job", "vllm"), func(i int) float64 { return float64(10 * i) }},
		{labels.FromStrings("__name__", "http_requests_total", "code", "500", "instance", "a", "job", "vllm"), func(i int) float64 { return float64(i) }},
		{labels.FromStrings("__name__", "vllm:num_requests_running", "instance", "a", "job", "vllm", "model", "llama"), func(i int) float64 { return float64(i % 5) }},
	}
	app := raw.Appender(context.Background())
	for i := range testSamples {
		for _, s := range series {
			if _, err := app.Append(0, s.lset, t0+int64(i)*testStep, s.val(i)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// filledTestRaw is a raw tier holding the test data set (fillTestRaw).
func filledTestRaw(tb testing.TB) *tiers.Raw {
	tb.Helper()
	raw := openTestRaw(tb)
	fillTestRaw(tb, raw)
	return raw
}

// fakeMetadata is a MetadataSource over a fixed map, as the remotewrite
// package's store would hold it.
type fakeMetadata map[string][]metadata.Metadata

func (f fakeMetadata) Metadata(metric string) map[string][]metadata.Metadata {
	out := map[string][]metadata.Metadata{}
	for name, ms := range f {
		if metric == "" || metric == name {
			out[name] = append([]metadata.Metadata(nil), ms...)
		}
	}
	return out
}

func testMetadata() fakeMetadata {
	return fakeMetadata{
		"http_requests_total": {
			{Type: model.MetricTypeCounter, Help: "Requests served, by status code.", Unit: ""},
		},
		"vllm:num_requests_running": {
			{Type: model.MetricTypeGauge, Help: "Number of requests currently running on GPU.", Unit: ""},
			{Type: model.MetricTypeGauge, Help: "Requests running on the GPU.", Unit: ""},
		},
		"vllm:e2e_request_latency_seconds": {
			{Type: model.MetricTypeHistogram, Help: "End to end request latency.", Unit: "seconds"},
		},
	}
}

// newTestAPI builds the API over q with cfg and returns a mux serving it.
func newTestAPI(tb testing.TB, cfg Config, q storage.SampleAndChunkQueryable, with ...Option) (*API, *http.ServeMux) {
	tb.Helper()
	api, err := New(cfg, q, testMetadata(), slog.New(slog.DiscardHandler), prometheus.NewRegistry(), with...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := api.Close(); err != nil {
			tb.Error(err)
		}
	})
	mux := http.NewServeMux()
	api.Register(mux)
	return api, mux
}

// newTestServer serves a fresh API over a filled raw tier on 127.0.0.1.
func newTestServer(tb testing.TB, cfg Config) (*httptest.Server, *tiers.Raw) {
	tb.Helper()
	raw := openTestRaw(tb)
	fillTestRaw(tb, raw)
	_, mux := newTestAPI(tb, cfg, raw)
	srv := httptest.NewServer(mux) // httptest listens on 127.0.0.1
	tb.Cleanup(srv.Close)
	return srv, raw
}

// unixSec formats a test timestamp (ms) as the API's seconds parameter.
func unixSec(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

// annotatedQueryable stands in for the stitched three-tier storage, which
// tells the user through annotations which tiers answered: every Select and
// every label call adds one warning and one info.
type annotatedQueryable struct {
	storage.SampleAndChunkQueryable
}

func withAnnotations(q storage.SampleAndChunkQueryable) storage.SampleAndChunkQueryable {
	return annotatedQueryable{q}
}

var (
	errTestTierWarning = errors.New("minute tier is catching up: results after 12:00 may be incomplete")
	errTestTierInfo    = fmt.Errorf("%w: served by tiers raw, minute", annotations.PromQLInfo)
)

func testAnnotations() annotations.Annotations {
	a := annotations.New()
	a.Add(errTestTierWarning)
	a.Add(errTestTierInfo)
	return *a
}

func (q annotatedQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	inner, err := q.SampleAndChunkQueryable.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return annotatedQuerier{inner}, nil
}

type annotatedQuerier struct{ storage.Querier }

func (q annotatedQuerier) Select(ctx context.Context, sorted bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	return annotatedSeriesSet{q.Querier.Select(ctx, sorted, hints, ms...)}
}

func (q annotatedQuerier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	names, annots, err := q.Querier.LabelNames(ctx, hints, ms...)
	return names, annots.Merge(testAnnotations()), err
}

func (q annotatedQuerier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	vals, annots, err := q.Querier.LabelValues(ctx, name, hints, ms...)
	return vals, annots.Merge(testAnnotations()), err
}

type annotatedSeriesSet struct{ storage.SeriesSet }

func (s annotatedSeriesSet) Warnings() annotations.Annotations {
	annots := s.SeriesSet.Warnings()
	return annots.Merge(testAnnotations())
}
