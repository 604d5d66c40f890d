package query

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
	"github.com/prometheus/prometheus/web"

	"github.com/strata-dev/strata/tiers"
)

// promLocalStorage is the raw tier's TSDB as Prometheus' web handler takes
// its local storage.
type promLocalStorage struct {
	*tsdb.DB
	raw *tiers.Raw
}

func (s promLocalStorage) Stats(name string, limit int) (*tsdb.Stats, error) {
	return s.raw.Stats(name, limit)
}
func (s promLocalStorage) WALReplayStatus() (tsdb.WALReplayStatus, error) {
	return s.raw.WALReplayStatus()
}
func (s promLocalStorage) BlockMetas() ([]tsdb.BlockMeta, error) { return s.raw.BlockMetas() }
func (s promLocalStorage) StartTime() (int64, error)             { return s.DB.StartTime() }

// TestFederationEqualsPrometheus: Strata's /federate answers, byte for
// byte, what Prometheus' own /federate answers over the same TSDB and
// external labels, for selectors that take floats, a stale series, series
// with and without an instance label, native histograms with exponential
// and custom buckets, two selectors selecting one series, none, in the
// text and the protobuf formats; a bad selector is a 400 for both.
func TestFederationEqualsPrometheus(t *testing.T) {
	raw := openTestRaw(t)
	now := time.Now()
	ts := now.Add(-time.Minute).UnixMilli()
	app := raw.Appender(context.Background())
	add := func(lbls labels.Labels, vs ...float64) {
		t.Helper()
		for i, v := range vs {
			if _, err := app.Append(0, lbls, ts-int64(len(vs)-1-i)*15_000, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(labels.FromStrings("__name__", "strata:gpu_utilization:ratio", "hostname", "n1", "gpu", "0", "instance", "n1:9400"), 0.5, 0.75)
	add(labels.FromStrings("__name__", "strata:gpu_utilization:ratio", "hostname", "n1", "gpu", "1"), 0.25)
	add(labels.FromStrings("__name__", "strata:requests_waiting", "pod", "a", "region", "inner"), 3)
	add(labels.FromStrings("__name__", "gone", "pod", "a"), 1, math.Float64frombits(value.StaleNaN))
	if _, err := app.Append(0, labels.FromStrings("__name__", "old", "pod", "a"), now.Add(-20*time.Minute).UnixMilli(), 1); err != nil {
		t.Fatal(err)
	}
	exp := tsdbutil.GenerateTestHistogram(3)
	if _, err := app.AppendHistogram(0, labels.FromStrings("__name__", "ttft_seconds", "pod", "a"), ts, exp, nil); err != nil {
		t.Fatal(err)
	}
	nhcb := &histogram.Histogram{Schema: histogram.CustomBucketsSchema, Count: 6, Sum: 2.5, CustomValues: []float64{0.1, 0.5, 1},
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 3}}, PositiveBuckets: []int64{1, 1, 1}}
	if _, err := app.AppendHistogram(0, labels.FromStrings("__name__", "itl_seconds", "pod", "a"), ts, nhcb, nil); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	external := labels.FromStrings("region", "eu", "replica", "a")

	// Prometheus' own handler, over the same TSDB.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ext, _ := url.Parse("http://" + ln.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	prom := web.New(slog.New(slog.DiscardHandler), &web.Options{
		Context: ctx, LocalStorage: promLocalStorage{raw.DB(), raw}, Storage: promLocalStorage{raw.DB(), raw},
		ExemplarStorage: raw.DB(), LookbackDelta: 5 * time.Minute, ExternalURL: ext, RoutePrefix: "/", ListenAddresses: []string{ln.Addr().String()},
		Version: &web.PrometheusVersion{}, Flags: map[string]string{}, Gatherer: prometheus.NewRegistry(), Registerer: prometheus.NewRegistry(),
	})
	if err := prom.ApplyConfig(&config.Config{GlobalConfig: config.GlobalConfig{ExternalLabels: external}}); err != nil {
		t.Fatal(err)
	}
	prom.SetReady(web.Ready)
	go func() { _ = prom.Run(ctx, []net.Listener{ln}, "") }()

	strata := httptest.NewServer(NewFederation(raw, parser.NewParser(parser.Options{}), external, 5*time.Minute, time.Now, slog.New(slog.DiscardHandler), prometheus.NewRegistry()))
	t.Cleanup(strata.Close)

	get := func(base, query, accept string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/federate?"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		for range 50 { // Prometheus' listener starts in its goroutine
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
		}
		t.Fatalf("GET %s: no answer", base)
		return 0, "", ""
	}
	m := func(sels ...string) string {
		v := url.Values{}
		for _, s := range sels {
			v.Add("match[]", s)
		}
		return v.Encode()
	}
	protobuf := "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
	for _, tc := range []struct{ query, accept string }{
		{m(`{__name__=~".+"}`), ""},
		{m(`{__name__=~".+"}`), protobuf},
		{m(`{__name__=~"strata:.*"}`, `strata:gpu_utilization:ratio{gpu="0"}`), ""},
		{m(`gone`, `old`), ""},
		{m(`ttft_seconds`, `itl_seconds`), protobuf},
		{m(`itl_seconds`), "text/plain"},
		{"", ""},
		{m(`{`), ""},
	} {
		wantCode, wantType, want := get("http://"+ln.Addr().String(), tc.query, tc.accept)
		code, typ, got := get(strata.URL, tc.query, tc.accept)
		if code != wantCode || typ != wantType || got != want {
			t.Errorf("GET /federate?%s (Accept %q):\nStrata %d %s\n%q\nPrometheus %d %s\n%q", tc.query, tc.accept, code, typ, got, wantCode, wantType, want)
		}
	}
	_, _, body := get(strata.URL, m(`{__name__=~".+"}`), "")
	for _, want := range []string{`gpu="1",hostname="n1",instance="",region="eu",replica="a"} 0.25`, `region="inner"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the text answer lacks %s:\n%s", want, body)
		}
	}
}
