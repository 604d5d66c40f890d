package remotewrite

import (
	"context"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"google.golang.org/protobuf/encoding/protowire"
)

// v2req builds an RW 2.0 request; series are given as label pairs.
type v2req struct {
	st  writev2.SymbolsTable
	req writev2.Request
}

func newV2() *v2req { return &v2req{st: writev2.NewSymbolTable()} }

func (b *v2req) refs(kv ...string) []uint32 {
	out := make([]uint32, 0, len(kv))
	for _, s := range kv {
		out = append(out, b.st.Symbolize(s))
	}
	return out
}

func (b *v2req) add(ts writev2.TimeSeries) *v2req {
	b.req.Timeseries = append(b.req.Timeseries, ts)
	return b
}

func (b *v2req) encode(t testing.TB) []byte {
	b.req.Symbols = b.st.Symbols()
	return encodeV2(t, &b.req)
}

func TestHandlerV2(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	// Unsorted label refs, as the compliance suite sends them (it ranges over a map).
	b := newV2()
	b.add(writev2.TimeSeries{
		LabelsRefs: b.refs("zone", "z", "__name__", "v2_metric", "app", "a"),
		Samples:    []writev2.Sample{{Value: 1, Timestamp: ms(0)}, {Value: 2, Timestamp: ms(time.Second)}},
		Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: b.st.Symbolize("A gauge."), UnitRef: b.st.Symbolize("bytes")},
	})
	w := env.post(b.encode(t), ctV2, "snappy")
	if w.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	checkWritten(t, w, "2", "0", "0")
	got := env.read(t, "v2_metric")
	if pts := got[`{__name__="v2_metric", app="a", zone="z"}`]; len(pts) != 2 || pts[1].v != 2 {
		t.Fatalf("stored %v", got)
	}
	md := env.h.meta.Metadata("v2_metric")["v2_metric"]
	if len(md) != 1 || md[0].Type != model.MetricTypeGauge || md[0].Help != "A gauge." || md[0].Unit != "bytes" {
		t.Fatalf("metadata %v", md)
	}

	cases := []struct {
		name       string
		build      func(b *v2req)
		code       int
		written    [3]string
		msg        string
		msgContain string
	}{
		{
			name: "bad label ref",
			build: func(b *v2req) {
				b.add(writev2.TimeSeries{LabelsRefs: []uint32{b.st.Symbolize("__name__"), 99}, Samples: []writev2.Sample{{Value: 1, Timestamp: ms(0)}}})
			},
			code: 400, written: [3]string{"0", "0", "0"},
			msg: "1 of 1 samples, histograms and exemplars rejected: series #0: bad symbol reference: label reference pair (1, 99), the table has 2 symbols",
		},
		{
			name: "odd label refs",
			build: func(b *v2req) {
				b.add(writev2.TimeSeries{LabelsRefs: []uint32{b.st.Symbolize("__name__")}, Samples: []writev2.Sample{{Value: 1, Timestamp: ms(0)}}})
			},
			code: 400, written: [3]string{"0", "0", "0"},
			msg: "1 of 1 samples, histograms and exemplars rejected: series #0: bad symbol reference: odd number of label references (1)",
		},
		{
			name: "bad help ref",
			build: func(b *v2req) {
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "m"), Samples: []writev2.Sample{{Value: 1, Timestamp: ms(0)}},
					Metadata: writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: 77}})
			},
			code: 400, written: [3]string{"0", "0", "0"},
			msg: "1 of 1 samples, histograms and exemplars rejected: series #0: metadata help: bad symbol reference: 77, the table has 3 symbols",
		},
		{
			name: "neither samples nor histograms",
			build: func(b *v2req) {
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "empty")})
			},
			code: 400, written: [3]string{"0", "0", "0"},
			msg: `0 of 0 samples, histograms and exemplars rejected: series {__name__="empty"}: TimeSeries must contain at least one sample or histogram`,
		},
		{
			name: "one bad series among good ones",
			build: func(b *v2req) {
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "ok1"), Samples: []writev2.Sample{{Value: 1, Timestamp: ms(0)}}})
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("job", "noname"), Samples: []writev2.Sample{{Value: 1, Timestamp: ms(0)}, {Value: 2, Timestamp: ms(time.Second)}}})
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "ok2"), Samples: []writev2.Sample{{Value: 1, Timestamp: ms(0)}}})
			},
			code: 400, written: [3]string{"2", "0", "0"},
			msg: `2 of 4 samples, histograms and exemplars rejected: series {job="noname"}: invalid labels: missing or empty __name__`,
		},
		{
			name: "utf8 names and dots",
			build: func(b *v2req) {
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "my.metric name", "ключ", "v\nw"), Samples: []writev2.Sample{{Value: math.Inf(1), Timestamp: ms(0)}}})
			},
			code: 204, written: [3]string{"1", "0", "0"},
		},
		{
			name: "exemplars stored and counted",
			build: func(b *v2req) {
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "with_ex"),
					Samples: []writev2.Sample{{Value: 5, Timestamp: ms(0)}},
					Exemplars: []writev2.Exemplar{
						{LabelsRefs: b.refs("trace_id", "abc"), Value: 0.5, Timestamp: ms(0)},
						{Value: 0.7, Timestamp: ms(-time.Second)},
					}})
			},
			code: 204, written: [3]string{"1", "0", "2"},
		},
		{
			name: "bad exemplar ref",
			build: func(b *v2req) {
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "with_bad_ex"),
					Samples:   []writev2.Sample{{Value: 5, Timestamp: ms(0)}},
					Exemplars: []writev2.Exemplar{{LabelsRefs: []uint32{1}, Value: 0.5, Timestamp: ms(0)}}})
			},
			code: 400, written: [3]string{"1", "0", "0"},
			msg: `1 of 2 samples, histograms and exemplars rejected: series {__name__="with_bad_ex"}: exemplar labels: bad symbol reference: odd number of label references (1)`,
		},
		{
			name: "native histograms",
			build: func(b *v2req) {
				h := &histogram.Histogram{Count: 3, Sum: 4.5, Schema: 0, ZeroThreshold: 0.001, ZeroCount: 1,
					PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{1, 0}}
				fh := h.ToFloat(nil)
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "nh"), Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, ms(0), h)}})
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "nfh"), Histograms: []writev2.Histogram{writev2.FromFloatHistogram(0, ms(0), fh)}})
			},
			code: 204, written: [3]string{"0", "2", "0"},
		},
		{
			name: "bad count histogram",
			build: func(b *v2req) {
				h := &histogram.Histogram{Count: 1, Sum: 4.5, Schema: 0,
					PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{5, 0}}
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "bad_nh"), Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, ms(0), h)}})
			},
			code: 400, written: [3]string{"0", "0", "0"},
			msgContain: "10 observations found in buckets, but the Count field is 1",
		},
		{
			name: "samples and histograms together",
			build: func(b *v2req) {
				h := &histogram.Histogram{Count: 0, Schema: 0}
				b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "mixed"), Samples: []writev2.Sample{{Value: 1, Timestamp: ms(0)}},
					Histograms: []writev2.Histogram{writev2.FromIntHistogram(0, ms(0), h)}})
			},
			code: 400, written: [3]string{"0", "0", "0"},
			msg: `2 of 2 samples, histograms and exemplars rejected: series {__name__="mixed"}: TimeSeries must not contain both samples and histograms`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newV2()
			tc.build(b)
			w := env.post(b.encode(t), ctV2, "snappy")
			body := strings.TrimSuffix(w.Body.String(), "\n")
			if w.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.code, body)
			}
			checkWritten(t, w, tc.written[0], tc.written[1], tc.written[2])
			if tc.msg != "" && body != tc.msg {
				t.Errorf("body\n got %q\nwant %q", body, tc.msg)
			}
			if tc.msgContain != "" && !strings.Contains(body, tc.msgContain) {
				t.Errorf("body %q does not contain %q", body, tc.msgContain)
			}
			if pts := env.read(t, "v2_metric")[`{__name__="v2_metric", app="a", zone="z"}`]; len(pts) != 2 {
				t.Fatalf("accepted data changed: %v", pts)
			}
		})
	}

	if got := env.read(t, "nh"); len(got[`{__name__="nh"}`]) != 1 || got[`{__name__="nh"}`][0].h == nil || got[`{__name__="nh"}`][0].h.Count != 3 {
		t.Errorf("native histogram not stored: %v", got)
	}
	if got := env.read(t, "nfh"); len(got[`{__name__="nfh"}`]) != 1 {
		t.Errorf("float native histogram not stored: %v", got)
	}
	if got := env.read(t, "my.metric name"); len(got) != 1 {
		t.Errorf("UTF-8 series not stored: %v", got)
	}
	eq, err := env.raw.ExemplarQuerier(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := eq.Select(math.MinInt64, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "with_ex")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || len(res[0].Exemplars) != 2 || res[0].Exemplars[1].Labels.Get("trace_id") != "abc" {
		t.Errorf("exemplars: %+v", res)
	}
}

// withCreatedTimestamp appends the pre-rc.4 TimeSeries.created_timestamp
// (field 6) to every series of a marshalled request, as Prometheus <= 3.8 and
// the compliance suite send it. prompb no longer has the field.
func withCreatedTimestamp(t *testing.T, req *writev2.Request, ct int64) []byte {
	t.Helper()
	var out []byte
	for _, s := range req.Symbols {
		out = protowire.AppendTag(out, 4, protowire.BytesType)
		out = protowire.AppendString(out, s)
	}
	for i := range req.Timeseries {
		ts, err := req.Timeseries[i].Marshal()
		if err != nil {
			t.Fatal(err)
		}
		ts = protowire.AppendTag(ts, 6, protowire.VarintType)
		ts = protowire.AppendVarint(ts, uint64(ct))
		out = protowire.AppendTag(out, 5, protowire.BytesType)
		out = protowire.AppendBytes(out, ts)
	}
	return snappy.Encode(nil, out)
}

func TestHandlerStartTimestamps(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	counter := writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER}

	// rc.4: Sample.start_timestamp (field 3).
	b := newV2()
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "c_new_total"), Metadata: counter,
		Samples: []writev2.Sample{{Value: 10, Timestamp: ms(0), StartTimestamp: ms(-30 * time.Second)}, {Value: 12, Timestamp: ms(15 * time.Second), StartTimestamp: ms(-30 * time.Second)}}})
	w := env.post(b.encode(t), ctV2, "snappy")
	if w.Code != 204 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	checkWritten(t, w, "2", "0", "0") // the zero sample is ours, not the sender's
	want := []point{{t: ms(-30 * time.Second), v: 0}, {t: ms(0), v: 10}, {t: ms(15 * time.Second), v: 12}}
	if got := env.read(t, "c_new_total")[`{__name__="c_new_total"}`]; !equalPoints(map[string][]point{"": got}, map[string][]point{"": want}) {
		t.Errorf("field 3: stored %v, want %v", got, want)
	}

	// Legacy TimeSeries.created_timestamp (field 6).
	b = newV2()
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("__name__", "c_old_total"), Metadata: counter,
		Samples: []writev2.Sample{{Value: 7, Timestamp: ms(0)}}})
	b.req.Symbols = b.st.Symbols()
	w = env.post(withCreatedTimestamp(t, &b.req, ms(-time.Minute)), ctV2, "snappy")
	if w.Code != 204 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	want = []point{{t: ms(-time.Minute), v: 0}, {t: ms(0), v: 7}}
	if got := env.read(t, "c_old_total")[`{__name__="c_old_total"}`]; !equalPoints(map[string][]point{"": got}, map[string][]point{"": want}) {
		t.Errorf("field 6: stored %v, want %v", got, want)
	}

	// Resending the same request is idempotent (the zero sample is an exact
	// duplicate or out of order, never an error).
	if w := env.post(withCreatedTimestamp(t, &b.req, ms(-time.Minute)), ctV2, "snappy"); w.Code != 204 {
		t.Fatalf("resend: %d %s", w.Code, w.Body)
	}
}

func TestHandlerV1MetadataAndExemplars(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	body := encodeV1(t, &prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{{
			Labels:    []prompb.Label{{Name: "__name__", Value: "req_total"}},
			Samples:   []prompb.Sample{{Value: 1, Timestamp: ms(0)}},
			Exemplars: []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "t1"}}, Value: 1, Timestamp: ms(0)}},
		}},
		Metadata: []prompb.MetricMetadata{{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "req", Help: "Requests.", Unit: ""}},
	})
	w := env.post(body, ctV1, "snappy")
	if w.Code != 204 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	checkNoWritten(t, w)
	md := env.h.meta.Metadata("")
	if m := md["req"]; len(m) != 1 || m[0].Type != model.MetricTypeCounter || m[0].Help != "Requests." {
		t.Fatalf("metadata %v", md)
	}
	eq, err := env.raw.ExemplarQuerier(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := eq.Select(math.MinInt64, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "req_total")})
	if err != nil || len(res) != 1 || len(res[0].Exemplars) != 1 {
		t.Fatalf("exemplars %v %v", res, err)
	}
}

func TestMetadataStorePersistence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metadata.json")
	s, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Set("a", Metadata{Type: model.MetricTypeCounter, Help: "A.", Unit: "seconds"})
	s.Set("b", Metadata{Type: model.MetricTypeGauge})
	s.Set("ignored", Metadata{}) // nothing known: not stored
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	// The temp file is gone, the file is whole.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("files after Save: %v", entries)
	}
	s2, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.familyNames(); strings.Join(got, ",") != "a,b" {
		t.Fatalf("families after reopen: %v", got)
	}
	if m := s2.Metadata("a")["a"]; len(m) != 1 || m[0].Help != "A." || m[0].Unit != "seconds" || m[0].Type != model.MetricTypeCounter {
		t.Fatalf("a after reopen: %v", m)
	}
	if m := s2.Metadata("nope"); len(m) != 0 {
		t.Fatalf("unknown metric: %v", m)
	}
	// A corrupt file is not silently an empty store: it is set aside and
	// said so (TestMetadataStoreTornLog).
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	s3, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatalf("corrupt metadata file: %v", err)
	}
	if s3.Recovered() == nil {
		t.Fatal("a corrupt metadata file opened as an empty store, nothing said")
	}
}

func TestMetadataStoreBounded(t *testing.T) {
	s := NewMetadataStore(2)
	for _, f := range []string{"a", "b", "c"} {
		s.Set(f, Metadata{Type: model.MetricTypeGauge})
	}
	if s.Len() != 2 || s.Dropped() != 1 {
		t.Fatalf("len %d dropped %d", s.Len(), s.Dropped())
	}
	// Existing families are still updated when full.
	s.Set("a", Metadata{Type: model.MetricTypeCounter})
	if m := s.Metadata("a")["a"]; m[0].Type != model.MetricTypeCounter {
		t.Fatalf("update when full: %v", m)
	}
	// The steady state does not allocate.
	name, help := "a", "help"
	s.Set(name, Metadata{Type: model.MetricTypeCounter, Help: help})
	if allocs := testing.AllocsPerRun(100, func() { s.Set(name, Metadata{Type: model.MetricTypeCounter, Help: help}) }); allocs != 0 {
		t.Fatalf("unchanged Set allocated %.0f times", allocs)
	}
}

// TestHandlerV2MetadataRuns: a request's runs of series of one family (a
// histogram's buckets, sum and count) store that family's metadata as
// each series does, the last series' metadata winning within a request and
// from one request to the next.
func TestHandlerV2MetadataRuns(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	post := func(at time.Duration, helps ...string) {
		t.Helper()
		b := newV2()
		names := []string{"h_bucket", "h_bucket", "h_sum", "h_count", "g", "h_count"}
		for i, help := range helps {
			typ := writev2.Metadata_METRIC_TYPE_HISTOGRAM
			if names[i] == "g" {
				typ = writev2.Metadata_METRIC_TYPE_GAUGE
			}
			b.add(writev2.TimeSeries{
				LabelsRefs: b.refs("__name__", names[i], "le", strconv.Itoa(i)),
				Samples:    []writev2.Sample{{Value: 1, Timestamp: ms(at)}},
				Metadata:   writev2.Metadata{Type: typ, HelpRef: b.st.Symbolize(help)},
			})
		}
		if w := env.post(b.encode(t), ctV2, "snappy"); w.Code != http.StatusNoContent {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	help := func(family string) string {
		md := env.h.meta.Metadata(family)[family]
		if len(md) != 1 {
			t.Fatalf("metadata of %s: %v", family, md)
		}
		return md[0].Help
	}
	post(0, "Latency.", "Latency.", "Latency.", "Latency.", "A gauge.", "Changed.")
	if h, g := help("h"), help("g"); h != "Changed." || g != "A gauge." {
		t.Fatalf("after the first request h %q, g %q; want \"Changed.\", \"A gauge.\"", h, g)
	}
	post(time.Second, "Latency.", "Latency.")
	if h := help("h"); h != "Latency." {
		t.Fatalf("after the second request h %q, want \"Latency.\"", h)
	}
}
