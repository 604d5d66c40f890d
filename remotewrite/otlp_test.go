package remotewrite

import (
	"bytes"
	"compress/gzip"
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/strata-dev/strata/tiers"
)

// otlpMetrics is what an OpenTelemetry SDK or collector exports for one vLLM
// pod: a gauge, a cumulative counter, an explicit-bucket and an exponential
// histogram, and, when withDelta, a delta sum (which Prometheus refuses
// without its delta feature flags).
func otlpMetrics(withDelta bool) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "vllm")
	rm.Resource().Attributes().PutStr("service.instance.id", "pod-a")
	rm.Resource().Attributes().PutStr("k8s.namespace.name", "inference")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	ts := func(d time.Duration) pcommon.Timestamp { return pcommon.NewTimestampFromTime(base.Add(d)) }

	m := ms.AppendEmpty()
	m.SetName("vllm.kv_cache.usage")
	m.SetUnit("1")
	m.SetDescription("KV-cache usage.")
	gauge := m.SetEmptyGauge()
	for i, v := range []float64{0.25, 0.5, 0.75} {
		dp := gauge.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts(time.Duration(i) * 10 * time.Second))
		dp.SetDoubleValue(v)
		dp.Attributes().PutStr("gpu", "0")
	}

	m = ms.AppendEmpty()
	m.SetName("vllm.requests")
	m.SetUnit("{request}")
	sum := m.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i, v := range []int64{5, 9} {
		dp := sum.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(ts(-time.Minute))
		dp.SetTimestamp(ts(time.Duration(i) * 10 * time.Second))
		dp.SetIntValue(v)
		if i == 1 {
			ex := dp.Exemplars().AppendEmpty()
			ex.SetTimestamp(ts(5 * time.Second))
			ex.SetIntValue(1)
			ex.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
		}
	}

	m = ms.AppendEmpty()
	m.SetName("vllm.e2e_latency")
	m.SetUnit("s")
	hist := m.SetEmptyHistogram()
	hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	hp := hist.DataPoints().AppendEmpty()
	hp.SetTimestamp(ts(0))
	hp.ExplicitBounds().FromRaw([]float64{0.1, 1})
	hp.BucketCounts().FromRaw([]uint64{1, 2, 3})
	hp.SetCount(6)
	hp.SetSum(4.5)

	m = ms.AppendEmpty()
	m.SetName("vllm.ttft")
	m.SetUnit("s")
	eh := m.SetEmptyExponentialHistogram()
	eh.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	ep := eh.DataPoints().AppendEmpty()
	ep.SetTimestamp(ts(0))
	ep.SetScale(0)
	ep.SetCount(3)
	ep.SetSum(3.5)
	ep.SetZeroCount(1)
	ep.Positive().SetOffset(0)
	ep.Positive().BucketCounts().FromRaw([]uint64{1, 1})

	if withDelta {
		m = ms.AppendEmpty()
		m.SetName("vllm.deltas")
		ds := m.SetEmptySum()
		ds.SetIsMonotonic(true)
		ds.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
		dp := ds.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts(0))
		dp.SetIntValue(1)
	}
	return md
}

// newOTLP is an OTLP receiver writing through h, with Prometheus' default
// translation, a 5-minute lookback and a day's time window, as opts change
// them; closed when the test ends.
func newOTLP(t testing.TB, h *Handler, reg prometheus.Registerer, opts ...func(*OTLPConfig)) *OTLPHandler {
	t.Helper()
	oc := OTLPConfig{Translation: config.DefaultOTLPConfig, LookbackDelta: 5 * time.Minute, MaxAge: 24 * time.Hour}
	for _, f := range opts {
		f(&oc)
	}
	o, err := NewOTLPHandler(h, oc, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := o.Close(); err != nil {
			t.Error(err)
		}
	})
	return o
}

// onlyDelta is an export of one delta sum, "deltas", which a receiver that
// does not convert deltas cannot translate: nothing of it can be written.
func onlyDelta() pmetric.Metrics {
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("deltas")
	ds := m.SetEmptySum()
	ds.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	dp := ds.DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.NewTimestampFromTime(base))
	dp.SetIntValue(1)
	return md
}

func postOTLP(h http.Handler, body []byte, contentType, encoding string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/otlp/v1/metrics", bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	if encoding != "" {
		r.Header.Set("Content-Encoding", encoding)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func otlpBody(t testing.TB, md pmetric.Metrics, asJSON bool) []byte {
	t.Helper()
	req := pmetricotlp.NewExportRequestFromMetrics(md)
	var b []byte
	var err error
	if asJSON {
		b, err = req.MarshalJSON()
	} else {
		b, err = req.MarshalProto()
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// exportResponse decodes a 200's ExportMetricsServiceResponse.
func exportResponse(t testing.TB, w *httptest.ResponseRecorder, asJSON bool) pmetricotlp.ExportResponse {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
	}
	resp := pmetricotlp.NewExportResponse()
	var err error
	if asJSON {
		err = resp.UnmarshalJSON(w.Body.Bytes())
	} else {
		err = resp.UnmarshalProto(w.Body.Bytes())
	}
	if err != nil {
		t.Fatalf("response %q is not an ExportMetricsServiceResponse: %v", w.Body, err)
	}
	return resp
}

// status decodes an error reply's google.rpc.Status.
func status(t *testing.T, w *httptest.ResponseRecorder, code int, asJSON bool) *spb.Status {
	t.Helper()
	if w.Code != code {
		t.Fatalf("status %d, want %d: %s", w.Code, code, w.Body)
	}
	var st spb.Status
	var err error
	if asJSON {
		err = protojson.Unmarshal(w.Body.Bytes(), &st)
	} else {
		err = proto.Unmarshal(w.Body.Bytes(), &st)
	}
	if err != nil || st.Message == "" {
		t.Fatalf("body %q is not a google.rpc.Status with a message: %v", w.Body, err)
	}
	return &st
}

// TestOTLP: OTLP metrics, in both encodings, land in the raw tier as
// Prometheus' OTLP receiver would name and label them, with their metadata;
// a metric that cannot be translated is refused as a partial success.
func TestOTLP(t *testing.T) {
	for _, tc := range []struct {
		name     string
		asJSON   bool
		encoding string
	}{{"protobuf", false, ""}, {"json-gzip", true, "gzip"}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, DefaultConfig())
			o := newOTLP(t, e.h, e.reg)
			body := otlpBody(t, otlpMetrics(true), tc.asJSON)
			if tc.encoding == "gzip" {
				body = gzipped(t, body)
			}
			ct := otlpProtobuf
			if tc.asJSON {
				ct = otlpJSON
			}
			w := postOTLP(o, body, ct, tc.encoding)
			resp := exportResponse(t, w, tc.asJSON)
			if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 1 || !strings.Contains(ps.ErrorMessage(), `"vllm.deltas"`) {
				t.Errorf("partial success %d %q, want the delta sum refused", ps.RejectedDataPoints(), ps.ErrorMessage())
			}
			if got := w.Header().Get("Content-Type"); got != ct {
				t.Errorf("Content-Type %q, want %q", got, ct)
			}

			const id = `instance="pod-a", job="vllm"`
			want := map[string]map[string][]point{
				"vllm_kv_cache_usage_ratio": {`{__name__="vllm_kv_cache_usage_ratio", gpu="0", ` + id + `}`: {{t: ms(0), v: 0.25}, {t: ms(10 * time.Second), v: 0.5}, {t: ms(20 * time.Second), v: 0.75}}},
				"vllm_requests_total":       {`{__name__="vllm_requests_total", ` + id + `}`: {{t: ms(-time.Minute), v: 0}, {t: ms(0), v: 5}, {t: ms(10 * time.Second), v: 9}}}, // a zero at the start time, as remote write's start timestamps get
				"vllm_e2e_latency_seconds_bucket": {
					`{__name__="vllm_e2e_latency_seconds_bucket", ` + id + `, le="0.1"}`:  {{t: ms(0), v: 1}},
					`{__name__="vllm_e2e_latency_seconds_bucket", ` + id + `, le="1"}`:    {{t: ms(0), v: 3}},
					`{__name__="vllm_e2e_latency_seconds_bucket", ` + id + `, le="+Inf"}`: {{t: ms(0), v: 6}},
				},
				"vllm_e2e_latency_seconds_sum": {`{__name__="vllm_e2e_latency_seconds_sum", ` + id + `}`: {{t: ms(0), v: 4.5}}},
			}
			for name, w := range want {
				if got := e.read(t, name); !equalPoints(got, w) {
					t.Errorf("%s:\n got %v\nwant %v", name, got, w)
				}
			}
			ttft := e.read(t, "vllm_ttft_seconds")
			pts := ttft[`{__name__="vllm_ttft_seconds", `+id+`}`]
			if len(pts) != 1 || pts[0].h == nil || pts[0].h.Count != 3 || pts[0].h.Sum != 3.5 || pts[0].h.ZeroCount != 1 {
				t.Errorf("vllm_ttft_seconds: %v, want one native histogram of count 3, sum 3.5", ttft)
			}
			eq, err := e.raw.ExemplarQuerier(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			exs, err := eq.Select(math.MinInt64, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "vllm_requests_total")})
			if err != nil {
				t.Fatal(err)
			}
			if len(exs) != 1 || len(exs[0].Exemplars) != 1 || exs[0].Exemplars[0].Labels.Get("trace_id") != "0102030405060708090a0b0c0d0e0f10" {
				t.Errorf("exemplars of vllm_requests_total: %+v, want the one with its trace id", exs)
			}
			if ti := e.read(t, "target_info"); len(ti[`{__name__="target_info", `+id+`, k8s_namespace_name="inference"}`]) == 0 {
				t.Errorf("target_info: %v, want the resource's k8s.namespace.name", ti)
			}
			for family, typ := range map[string]model.MetricType{
				"vllm_kv_cache_usage_ratio": model.MetricTypeGauge,
				"vllm_requests_total":       model.MetricTypeCounter,
				"vllm_e2e_latency_seconds":  model.MetricTypeHistogram,
			} {
				if m := e.h.meta.Metadata(family)[family]; len(m) != 1 || m[0].Type != typ {
					t.Errorf("metadata of %s: %+v, want type %s", family, m, typ)
				}
			}
			if m := e.h.meta.Metadata("vllm_kv_cache_usage_ratio")["vllm_kv_cache_usage_ratio"]; len(m) != 1 || m[0].Help != "KV-cache usage." {
				t.Errorf("metadata of vllm_kv_cache_usage_ratio: %+v, want its description as help", m)
			}
			if n := testutil.ToFloat64(e.h.m.requests.WithLabelValues(versionOTLP, "200")); n != 1 {
				t.Errorf("strata_remotewrite_requests_total{version=otlp,code=200} = %v, want 1", n)
			}
			if n := testutil.ToFloat64(e.h.m.rejected.WithLabelValues(reasonUntranslated)); n != 1 {
				t.Errorf("strata_remotewrite_rejected_total{reason=otlp_untranslated} = %v, want 1", n)
			}
		})
	}
}

// TestOTLPBadRequests: every refusal is a google.rpc.Status in the request's
// encoding with the status OTLP/HTTP gives it, and writes nothing.
func TestOTLPBadRequests(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	o := newOTLP(t, e.h, e.reg)
	small := DefaultConfig()
	small.MaxDecompressedBytes = 1 << 10
	es := newTestEnv(t, small)
	oSmall := newOTLP(t, es.h, es.reg)

	st := status(t, postOTLP(o, []byte("x"), "text/plain", ""), http.StatusUnsupportedMediaType, false)
	if !strings.Contains(st.Message, "Content-Type") {
		t.Errorf("415 message %q does not name the Content-Type", st.Message)
	}
	status(t, postOTLP(o, otlpBody(t, otlpMetrics(false), false), otlpProtobuf, "br"), http.StatusUnsupportedMediaType, false)
	status(t, postOTLP(o, []byte{0xff, 0xff, 0xff}, otlpProtobuf, ""), http.StatusBadRequest, false)
	status(t, postOTLP(o, []byte(`{"resourceMetrics": 7}`), otlpJSON, ""), http.StatusBadRequest, true)
	status(t, postOTLP(o, []byte("not gzip"), otlpProtobuf, "gzip"), http.StatusBadRequest, false)
	st = status(t, postOTLP(oSmall, gzipped(t, make([]byte, 4<<10)), otlpProtobuf, "gzip"), http.StatusRequestEntityTooLarge, false)
	if !strings.Contains(st.Message, "1024") {
		t.Errorf("413 message %q does not give the limit", st.Message)
	}
	r := httptest.NewRequest(http.MethodGet, "/api/v1/otlp/v1/metrics", nil)
	w := httptest.NewRecorder()
	o.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
		t.Errorf("GET: %d, Allow %q; want 405 and POST", w.Code, w.Header().Get("Allow"))
	}

	// Only a metric that cannot be translated: nothing to write, a 400.
	st = status(t, postOTLP(o, otlpBody(t, onlyDelta(), false), otlpProtobuf, ""), http.StatusBadRequest, false)
	if !strings.Contains(st.Message, `"deltas"`) || !strings.Contains(st.Message, "otlp_delta_to_cumulative") {
		t.Errorf("400 message %q does not name the metric and the option converting it", st.Message)
	}
	if got := e.read(t, "deltas"); len(got) != 0 {
		t.Errorf("deltas written: %v", got)
	}

	// A series over the label limits is refused; the rest is written.
	md := otlpMetrics(false)
	rm := md.ResourceMetrics().At(0)
	g := rm.ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints().At(0)
	g.Attributes().PutStr("huge", strings.Repeat("x", DefaultConfig().Limits.MaxLabelValueLength+1))
	resp := exportResponse(t, postOTLP(o, otlpBody(t, md, false), otlpProtobuf, ""), false)
	if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 1 || !strings.Contains(ps.ErrorMessage(), "huge") {
		t.Errorf("partial success %d %q, want the long label's sample refused", ps.RejectedDataPoints(), ps.ErrorMessage())
	}
	if got := e.read(t, "vllm_requests_total"); len(got) != 1 {
		t.Errorf("vllm_requests_total beside the refused series: %v", got)
	}
}

// TestOTLPTimeWindow: data points older than the raw retention (here a
// point whose timestamp was never set) or beyond the future-skew limit are
// refused before translation, so they neither stretch target_info over
// decades nor reach the store.
func TestOTLPTimeWindow(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	o := newOTLP(t, e.h, e.reg)
	md := otlpMetrics(false)
	gauge := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge()
	gauge.DataPoints().AppendEmpty().SetDoubleValue(1) // timestamp 0
	far := gauge.DataPoints().AppendEmpty()
	far.SetTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Hour)))
	far.SetDoubleValue(2)
	resp := exportResponse(t, postOTLP(o, otlpBody(t, md, false), otlpProtobuf, ""), false)
	if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 2 || !strings.Contains(ps.ErrorMessage(), "2 data points older than 1d or more than 10m ahead") {
		t.Errorf("partial success %d %q, want the two points out of the window refused", ps.RejectedDataPoints(), ps.ErrorMessage())
	}
	if got := e.read(t, "vllm_kv_cache_usage_ratio"); len(got) != 1 || len(got[`{__name__="vllm_kv_cache_usage_ratio", gpu="0", instance="pod-a", job="vllm"}`]) != 3 {
		t.Errorf("vllm_kv_cache_usage_ratio: %v, want the 3 points within the window", got)
	}
	// The resource's points span 20 s: target_info at its start and end.
	ti := e.read(t, "target_info")
	if pts := ti[`{__name__="target_info", instance="pod-a", job="vllm", k8s_namespace_name="inference"}`]; len(ti) != 1 || len(pts) != 2 || pts[0].t != ms(0) || pts[1].t != ms(20*time.Second) {
		t.Errorf("target_info: %v, want samples at the points' first and last time, 20 s apart", ti)
	}
	if n := testutil.ToFloat64(e.h.m.rejected.WithLabelValues(ReasonTooOld)); n != 2 {
		t.Errorf("rejected{reason=too_old} = %v, want 2", n)
	}
}

// TestOTLPOverload: under memory pressure the receiver answers 429 with
// Retry-After before reading the body, as for remote write.
func TestOTLPOverload(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxHeapBytes = 1 << 20
	e := newTestEnv(t, cfg)
	e.h.liveHeap = func() uint64 { return 2 << 20 }
	o := newOTLP(t, e.h, e.reg)
	w := postOTLP(o, otlpBody(t, otlpMetrics(false), false), otlpProtobuf, "")
	status(t, w, http.StatusTooManyRequests, false)
	if w.Header().Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if got := e.read(t, "vllm_requests_total"); len(got) != 0 {
		t.Errorf("written under memory pressure: %v", got)
	}
}

// BenchmarkOTLPAppend is BenchmarkDecodeAppend's load through the OTLP
// receiver: 10,000 gauge series (benchLabels' names, 20 data points a
// metric, the other labels as attributes) in five gzipped protobuf
// requests of 2,000 data points, as an OpenTelemetry Collector's otlphttp
// exporter sends them, into a real TSDB head, every round 1 s later.
func BenchmarkOTLPAppend(b *testing.B) {
	const groups = 5
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := raw.Close(); err != nil {
			b.Error(err)
		}
	}()
	var clock time.Time
	h, err := NewHandler(DefaultConfig(), raw, nil, nil, nil, func() time.Time { return clock })
	if err != nil {
		b.Fatal(err)
	}
	o := newOTLP(b, h, prometheus.NewRegistry())
	request := func(g int, ts int64) []byte {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "bench")
		ms := rm.ScopeMetrics().AppendEmpty().Metrics()
		var dps pmetric.NumberDataPointSlice
		for i := g * benchSamples; i < (g+1)*benchSamples; i++ {
			kv := benchLabels(i)
			if i%20 == 0 || i == g*benchSamples {
				m := ms.AppendEmpty()
				m.SetName(kv[1])
				dps = m.SetEmptyGauge().DataPoints()
			}
			dp := dps.AppendEmpty()
			dp.SetTimestamp(pcommon.Timestamp(ts * 1e6))
			dp.SetDoubleValue(float64(i) + 0.5)
			for j := 2; j < len(kv); j += 2 {
				dp.Attributes().PutStr(kv[j], kv[j+1])
			}
		}
		body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		_ = zw.Close()
		return buf.Bytes()
	}
	post := func(body []byte) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/otlp/v1/metrics", &sliceReader{b: body})
		r.Header.Set("Content-Type", otlpProtobuf)
		r.Header.Set("Content-Encoding", "gzip")
		r.ContentLength = int64(len(body))
		w := httptest.NewRecorder()
		o.ServeHTTP(w, r)
		return w
	}
	clock = base
	for g := range groups {
		if w := post(request(g, base.UnixMilli())); w.Code != http.StatusOK || exportResponse(b, w, false).PartialSuccess().RejectedDataPoints() != 0 {
			b.Fatalf("warm-up: %d %s", w.Code, w.Body)
		}
	}
	loopRequests(b, groups, func(g int, ts int64) func() {
		body := request(g, ts)
		clock = time.UnixMilli(ts)
		return func() {
			if w := post(body); w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	})
}

// TestOTLPNativeHistogramsWithCustomBuckets: with Prometheus'
// convert_histograms_to_nhcb, an explicit-bucket histogram arrives as one
// native histogram with custom buckets, which the write path validates and
// stores like remote write's.
func TestOTLPNativeHistogramsWithCustomBuckets(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	cfg := config.DefaultOTLPConfig
	cfg.ConvertHistogramsToNHCB = true
	o := newOTLP(t, e.h, e.reg, func(oc *OTLPConfig) { oc.Translation = cfg })
	resp := exportResponse(t, postOTLP(o, otlpBody(t, otlpMetrics(false), false), otlpProtobuf, ""), false)
	if n := resp.PartialSuccess().RejectedDataPoints(); n != 0 {
		t.Fatalf("%d refused: %s", n, resp.PartialSuccess().ErrorMessage())
	}
	if got := e.read(t, "vllm_e2e_latency_seconds_bucket"); len(got) != 0 {
		t.Errorf("classic buckets written: %v", got)
	}
	got := e.read(t, "vllm_e2e_latency_seconds")
	pts := got[`{__name__="vllm_e2e_latency_seconds", instance="pod-a", job="vllm"}`]
	if len(pts) != 1 || pts[0].h == nil || pts[0].h.Count != 6 || pts[0].h.Sum != 4.5 || len(pts[0].h.CustomValues) != 2 {
		t.Fatalf("vllm_e2e_latency_seconds: %v, want one histogram with custom bounds 0.1 and 1, count 6, sum 4.5", got)
	}
}

// TestOTLPNames: OTLPConfig.Names renames a translated series, metadata
// included; other series keep the translator's name.
func TestOTLPNames(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	o := newOTLP(t, e.h, e.reg, func(oc *OTLPConfig) {
		oc.Names = map[string]string{"vllm_requests_total": "vllm_requests"}
	})
	exportResponse(t, postOTLP(o, otlpBody(t, otlpMetrics(false), false), otlpProtobuf, ""), false)
	if got := e.read(t, "vllm_requests_total"); len(got) != 0 {
		t.Errorf("vllm_requests_total written: %v", got)
	}
	if got := e.read(t, "vllm_requests"); len(got[`{__name__="vllm_requests", instance="pod-a", job="vllm"}`]) != 3 {
		t.Errorf("vllm_requests: %v, want the counter's three samples under its new name", got)
	}
	if got := e.read(t, "vllm_kv_cache_usage_ratio"); len(got) != 1 {
		t.Errorf("vllm_kv_cache_usage_ratio: %v, want it under the translator's name", got)
	}
	if m := e.h.meta.Metadata("vllm_requests")["vllm_requests"]; len(m) != 1 || m[0].Type != model.MetricTypeCounter {
		t.Errorf("metadata of vllm_requests: %+v", m)
	}
}

// TestOTLPTranslationBudget: a request whose translation would take more
// than twice max_decompressed_bytes (here explicit-bucket histograms, each
// point a series per bucket) is refused with a 413, and nothing of it is
// written.
func TestOTLPTranslationBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxDecompressedBytes = 256 << 10
	e := newTestEnv(t, cfg)
	o := newOTLP(t, e.h, e.reg)
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "vllm")
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("wide")
	hist := m.SetEmptyHistogram()
	hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	bounds := make([]float64, 100)
	counts := make([]uint64, 101)
	for i := range bounds {
		bounds[i] = float64(i + 1)
	}
	for p := range 60 {
		dp := hist.DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(base))
		dp.Attributes().PutStr("pod", strconv.Itoa(p))
		dp.ExplicitBounds().FromRaw(bounds)
		dp.BucketCounts().FromRaw(counts)
	}
	body := otlpBody(t, md, false)
	if len(body) > cfg.MaxDecompressedBytes/2 {
		t.Fatalf("the body, %d bytes, is not well within max_decompressed_bytes", len(body))
	}
	st := status(t, postOTLP(o, body, otlpProtobuf, ""), http.StatusRequestEntityTooLarge, false)
	if !strings.Contains(st.Message, "smaller batches") {
		t.Errorf("413 message %q", st.Message)
	}
	if got := e.read(t, "wide_bucket"); len(got) != 0 {
		t.Errorf("%d series written", len(got))
	}
	// The same points in batches of ten are taken.
	for from := 0; from < 60; from += 10 {
		part := pmetric.NewMetrics()
		md.CopyTo(part)
		dps := part.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Histogram().DataPoints()
		i := 0
		dps.RemoveIf(func(pmetric.HistogramDataPoint) bool { i++; return i <= from || i > from+10 })
		exportResponse(t, postOTLP(o, otlpBody(t, part, false), otlpProtobuf, ""), false)
	}
	if got := e.read(t, "wide_bucket"); len(got) != 60*101 {
		t.Errorf("%d bucket series written in batches, want %d", len(got), 60*101)
	}
}
