package remotewrite

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

// deltaRequest is the i-th of a series of delta exports from one pod: a
// monotonic sum (requests), a non-monotonic one (a queue's change), an
// explicit-bucket and an exponential histogram, each over the 10 s that end
// at base-(2-i)*10s, and a cumulative counter beside them.
func deltaRequest(i int) pmetric.Metrics {
	ts := func(d time.Duration) pcommon.Timestamp { return pcommon.NewTimestampFromTime(base.Add(d)) }
	end := time.Duration(i-2) * 10 * time.Second
	start, stamp := ts(end-10*time.Second), ts(end)
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "vllm")
	rm.Resource().Attributes().PutStr("service.instance.id", "pod-a")
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()

	m := ms.AppendEmpty()
	m.SetName("requests")
	s := m.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	dp := s.DataPoints().AppendEmpty()
	dp.SetStartTimestamp(start)
	dp.SetTimestamp(stamp)
	dp.SetIntValue([]int64{5, 3, 4}[i])

	m = ms.AppendEmpty()
	m.SetName("queue_change")
	s = m.SetEmptySum()
	s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	dp = s.DataPoints().AppendEmpty()
	dp.SetStartTimestamp(start)
	dp.SetTimestamp(stamp)
	dp.SetDoubleValue([]float64{2, -1, 3}[i])

	m = ms.AppendEmpty()
	m.SetName("latency")
	m.SetUnit("s")
	h := m.SetEmptyHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	hp := h.DataPoints().AppendEmpty()
	hp.SetStartTimestamp(start)
	hp.SetTimestamp(stamp)
	hp.ExplicitBounds().FromRaw([]float64{1})
	counts := [][]uint64{{1, 1}, {0, 2}, {3, 0}}[i]
	hp.BucketCounts().FromRaw(counts)
	hp.SetCount(counts[0] + counts[1])
	hp.SetSum([]float64{2.5, 4, 1.5}[i])

	m = ms.AppendEmpty()
	m.SetName("ttft")
	m.SetUnit("s")
	eh := m.SetEmptyExponentialHistogram()
	eh.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	ep := eh.DataPoints().AppendEmpty()
	ep.SetStartTimestamp(start)
	ep.SetTimestamp(stamp)
	ep.SetScale(0)
	ep.Positive().SetOffset(0)
	ecounts := [][]uint64{{1}, {0, 1}, {2, 0}}[i]
	ep.Positive().BucketCounts().FromRaw(ecounts)
	n := uint64(0)
	for _, c := range ecounts {
		n += c
	}
	ep.SetCount(n)
	ep.SetSum(float64(n))

	m = ms.AppendEmpty()
	m.SetName("tokens")
	s = m.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp = s.DataPoints().AppendEmpty()
	dp.SetStartTimestamp(ts(-20 * time.Minute))
	dp.SetTimestamp(stamp)
	dp.SetIntValue(int64(100 * (i + 1)))
	return md
}

// TestOTLPDeltaToCumulative: with the conversion on, delta sums and
// histograms arrive as the running totals a cumulative exporter would have
// sent, from their stream's start; a request sent again adds nothing and
// its points are counted as refused; cumulative metrics pass unchanged.
func TestOTLPDeltaToCumulative(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	o := newOTLP(t, e.h, e.reg, func(oc *OTLPConfig) {
		oc.DeltaToCumulative, oc.DeltaMaxStreams, oc.DeltaMaxStale = true, 100, 5*time.Minute
	})
	for i := range 3 {
		resp := exportResponse(t, postOTLP(o, otlpBody(t, deltaRequest(i), false), otlpProtobuf, ""), false)
		if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 0 {
			t.Fatalf("request %d: %d refused: %s", i, ps.RejectedDataPoints(), ps.ErrorMessage())
		}
	}
	s := func(d time.Duration) int64 { return ms(d * time.Second) }
	const id = `instance="pod-a", job="vllm"`
	want := map[string]map[string][]point{
		// A counter gets a zero at its start, as remote write's start
		// timestamps do; the start stays the first point's.
		"requests_total": {`{__name__="requests_total", ` + id + `}`: {{t: s(-30), v: 0}, {t: s(-20), v: 5}, {t: s(-10), v: 8}, {t: s(0), v: 12}}},
		"queue_change":   {`{__name__="queue_change", ` + id + `}`: {{t: s(-20), v: 2}, {t: s(-10), v: 1}, {t: s(0), v: 4}}},
		"latency_seconds_bucket": {
			`{__name__="latency_seconds_bucket", ` + id + `, le="1"}`:    {{t: s(-30), v: 0}, {t: s(-20), v: 1}, {t: s(-10), v: 1}, {t: s(0), v: 4}},
			`{__name__="latency_seconds_bucket", ` + id + `, le="+Inf"}`: {{t: s(-30), v: 0}, {t: s(-20), v: 2}, {t: s(-10), v: 4}, {t: s(0), v: 7}},
		},
		"latency_seconds_sum": {`{__name__="latency_seconds_sum", ` + id + `}`: {{t: s(-30), v: 0}, {t: s(-20), v: 2.5}, {t: s(-10), v: 6.5}, {t: s(0), v: 8}}},
		"tokens_total":        {`{__name__="tokens_total", ` + id + `}`: {{t: ms(-20 * time.Minute), v: 0}, {t: s(-20), v: 100}, {t: s(-10), v: 200}, {t: s(0), v: 300}}},
	}
	check := func(when string) {
		t.Helper()
		for name, w := range want {
			if got := e.read(t, name); !equalPoints(got, w) {
				t.Errorf("%s, %s:\n got %v\nwant %v", when, name, got, w)
			}
		}
		var counts []float64
		for _, p := range e.read(t, "ttft_seconds")[`{__name__="ttft_seconds", `+id+`}`] {
			if p.h != nil {
				counts = append(counts, p.h.Count)
			}
		}
		if len(counts) != 4 || counts[0] != 0 || counts[1] != 1 || counts[2] != 2 || counts[3] != 4 {
			t.Errorf("%s, ttft_seconds counts %v, want an empty histogram at the start, then the running totals 1, 2, 4", when, counts)
		}
	}
	check("after three exports")

	// The last export sent again (a retry after a lost response): its
	// delta points are stamped no later than their streams' last, dropped
	// and counted; the cumulative counter's sample is a duplicate the
	// store takes as it is.
	resp := exportResponse(t, postOTLP(o, otlpBody(t, deltaRequest(2), false), otlpProtobuf, ""), false)
	if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 4 || !strings.Contains(ps.ErrorMessage(), "4 delta data points dropped") {
		t.Errorf("export sent again: partial success %d %q, want its 4 delta points dropped", ps.RejectedDataPoints(), ps.ErrorMessage())
	}
	check("after a repeated export")
	if n := testutil.ToFloat64(e.h.m.rejected.WithLabelValues(reasonDeltaDropped)); n != 4 {
		t.Errorf("strata_remotewrite_rejected_total{reason=%q} = %v, want 4", reasonDeltaDropped, n)
	}
	checkDeltaMetrics(t, e.reg, 4, map[string]int{"ok": 12, "out_of_order": 4})
}

// TestOTLPDeltaStreamLimit: past DeltaMaxStreams a new stream's points are
// refused (the partial success says which limit), the streams already
// tracked go on, and the count of tracked streams stays at the limit.
func TestOTLPDeltaStreamLimit(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	o := newOTLP(t, e.h, e.reg, func(oc *OTLPConfig) {
		oc.DeltaToCumulative, oc.DeltaMaxStreams, oc.DeltaMaxStale = true, 2, 5*time.Minute
	})
	export := func(step int) pmetric.Metrics {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "vllm")
		s := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptySum()
		s.SetIsMonotonic(true)
		s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
		for _, gpu := range []string{"0", "1", "2"} {
			dp := s.DataPoints().AppendEmpty()
			dp.SetStartTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Duration(step-1) * time.Second)))
			dp.SetTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Duration(step) * time.Second)))
			dp.SetIntValue(1)
			dp.Attributes().PutStr("gpu", gpu)
		}
		md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).SetName("errors")
		return md
	}
	for step := range 2 {
		resp := exportResponse(t, postOTLP(o, otlpBody(t, export(step), false), otlpProtobuf, ""), false)
		if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 1 || !strings.Contains(ps.ErrorMessage(), "otlp_delta_max_streams") {
			t.Errorf("step %d: partial success %d %q, want the third stream's point refused, naming the limit", step, ps.RejectedDataPoints(), ps.ErrorMessage())
		}
	}
	got := e.read(t, "errors_total")
	if len(got) != 2 {
		t.Fatalf("errors_total: %v, want two streams", got)
	}
	for ls, pts := range got {
		if last := pts[len(pts)-1]; last.v != 2 {
			t.Errorf("%s: last %v, want the running total 2", ls, last)
		}
	}
	checkDeltaMetrics(t, e.reg, 2, map[string]int{"ok": 4, "stream_limit": 2})
	if n := testutil.ToFloat64(e.h.m.rejected.WithLabelValues(reasonDeltaDropped)); n != 2 {
		t.Errorf("strata_remotewrite_rejected_total{reason=%q} = %v, want 2", reasonDeltaDropped, n)
	}
}

// checkDeltaMetrics compares the conversion's metrics in reg with the
// streams tracked and the data points by result.
func checkDeltaMetrics(t *testing.T, reg prometheus.Gatherer, streams int, points map[string]int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# HELP strata_otlp_delta_datapoints_total Delta data points of the OTLP receiver's conversion to cumulative, by result: ok, or the reason one was dropped (out_of_order, older_start, stream_limit).\n")
	b.WriteString("# TYPE strata_otlp_delta_datapoints_total counter\n")
	for _, result := range slices.Sorted(maps.Keys(points)) {
		fmt.Fprintf(&b, "strata_otlp_delta_datapoints_total{result=%q} %d\n", result, points[result])
	}
	b.WriteString("# HELP strata_otlp_delta_streams Delta streams whose running totals the OTLP receiver holds to convert them to cumulative (remote_write.otlp_delta_max_streams bounds them).\n")
	b.WriteString("# TYPE strata_otlp_delta_streams gauge\n")
	fmt.Fprintf(&b, "strata_otlp_delta_streams %d\n", streams)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(b.String()), "strata_otlp_delta_datapoints_total", "strata_otlp_delta_streams"); err != nil {
		t.Error(err)
	}
}

// TestOTLPDeltaConfig: the conversion refuses a limit or a staleness period
// that is not positive.
func TestOTLPDeltaConfig(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	for _, oc := range []OTLPConfig{
		{DeltaToCumulative: true, DeltaMaxStreams: 0, DeltaMaxStale: time.Minute},
		{DeltaToCumulative: true, DeltaMaxStreams: 10, DeltaMaxStale: 0},
	} {
		if _, err := NewOTLPHandler(e.h, oc, e.reg); err == nil {
			t.Errorf("%+v: no error", oc)
		}
	}
}

// BenchmarkOTLPDeltaStreams: the conversion's memory a tracked stream (a
// delta sum point with six attributes, as a pod's per-GPU counter has) and
// its CPU a point, over requests of 1,000 points.
func BenchmarkOTLPDeltaStreams(b *testing.B) {
	const streams, perRequest = 20_000, 1_000
	bodies := make([][]byte, 0, streams/perRequest)
	for r := range streams / perRequest {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "vllm")
		rm.Resource().Attributes().PutStr("service.instance.id", fmt.Sprintf("pod-%d", r))
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("generation_tokens")
		s := m.SetEmptySum()
		s.SetIsMonotonic(true)
		s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
		for i := range perRequest {
			dp := s.DataPoints().AppendEmpty()
			dp.SetIntValue(int64(i))
			for _, k := range []string{"model_name", "engine", "gpu", "node", "zone"} {
				dp.Attributes().PutStr(k, fmt.Sprintf("%s-%d", k, i%97))
			}
			dp.Attributes().PutStr("stream", strconv.Itoa(i))
		}
		bodies = append(bodies, otlpBody(b, md, false))
	}
	stamp := func(body []byte, step int) []byte {
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			b.Fatal(err)
		}
		for _, dp := range req.Metrics().ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Sum().DataPoints().All() {
			dp.SetStartTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Duration(step-1) * time.Second)))
			dp.SetTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Duration(step) * time.Second)))
		}
		out, err := req.MarshalProto()
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	d, err := newDeltaConverter(streams, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer d.close()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	for step := range b.N {
		for _, body := range bodies {
			b.StopTimer()
			req := pmetricotlp.NewExportRequest()
			if err := req.UnmarshalProto(stamp(body, step+1)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := d.convert(context.Background(), req.Metrics()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc)/streams, "heap-B/stream")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streams), "ns/point")
}

// TestOTLPDeltaConcurrent: exports converted at once, each its own
// stream's steps in order, give every stream its whole running total.
func TestOTLPDeltaConcurrent(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	o := newOTLP(t, e.h, e.reg, func(oc *OTLPConfig) {
		oc.DeltaToCumulative, oc.DeltaMaxStreams, oc.DeltaMaxStale = true, 100, 5*time.Minute
	})
	const pods, steps = 4, 20
	var wg sync.WaitGroup
	for pod := range pods {
		wg.Go(func() {
			for step := range steps {
				md := pmetric.NewMetrics()
				rm := md.ResourceMetrics().AppendEmpty()
				rm.Resource().Attributes().PutStr("service.name", "vllm")
				rm.Resource().Attributes().PutStr("service.instance.id", fmt.Sprintf("pod-%d", pod))
				m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
				m.SetName("requests")
				s := m.SetEmptySum()
				s.SetIsMonotonic(true)
				s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
				dp := s.DataPoints().AppendEmpty()
				dp.SetStartTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Duration(step-steps) * time.Second)))
				dp.SetTimestamp(pcommon.NewTimestampFromTime(base.Add(time.Duration(step-steps+1) * time.Second)))
				dp.SetIntValue(1)
				if w := postOTLP(o, otlpBody(t, md, false), otlpProtobuf, ""); w.Code != 200 {
					t.Errorf("pod %d step %d: %d %s", pod, step, w.Code, w.Body)
				}
			}
		})
	}
	wg.Wait()
	got := e.read(t, "requests_total")
	if len(got) != pods {
		t.Fatalf("requests_total: %d series, want %d", len(got), pods)
	}
	for ls, pts := range got {
		if last := pts[len(pts)-1]; last.v != steps {
			t.Errorf("%s: last %v, want %d", ls, last, steps)
		}
	}
}

// FuzzOTLP posts arbitrary bodies, protobuf or JSON, to a receiver that
// converts deltas. Invariants: no panic; the reply is 200 with an
// ExportMetricsServiceResponse or a 4xx with a google.rpc.Status, in the
// request's encoding; a 200 only for a body that decodes.
func FuzzOTLP(f *testing.F) {
	e := newTestEnv(f, DefaultConfig())
	o := newOTLP(f, e.h, e.reg, func(oc *OTLPConfig) {
		oc.DeltaToCumulative, oc.DeltaMaxStreams, oc.DeltaMaxStale = true, 1000, 5*time.Minute
	})
	seeds := []pmetric.Metrics{otlpMetrics(true), deltaRequest(0), deltaRequest(1), deltaRequest(2), pmetric.NewMetrics()}
	for _, md := range seeds {
		for _, asJSON := range []bool{false, true} {
			f.Add(asJSON, otlpBody(f, md, asJSON))
		}
	}
	f.Fuzz(func(t *testing.T, asJSON bool, data []byte) {
		ct := otlpProtobuf
		if asJSON {
			ct = otlpJSON
		}
		w := postOTLP(o, data, ct, "")
		if got := w.Header().Get("Content-Type"); got != ct {
			t.Fatalf("%d with Content-Type %q, want %q", w.Code, got, ct)
		}
		switch w.Code {
		case http.StatusOK:
			resp := exportResponse(t, w, asJSON)
			req := pmetricotlp.NewExportRequest()
			var err error
			if asJSON {
				err = req.UnmarshalJSON(data)
			} else {
				err = req.UnmarshalProto(data)
			}
			if err != nil {
				t.Fatalf("200 for a body the decoder refuses: %v", err)
			}
			if n := resp.PartialSuccess().RejectedDataPoints(); n < 0 {
				t.Fatalf("rejected_data_points %d", n)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			status(t, w, w.Code, asJSON)
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	})
}
