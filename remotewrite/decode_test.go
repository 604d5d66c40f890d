package remotewrite

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

var updateFuzzSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite testdata/fuzz/FuzzDecode from the seed requests")

// expectV1 converts what prompb decoded into the Request our decoder must
// produce.
func expectV1(wr *prompb.WriteRequest) *Request {
	req := &Request{}
	for _, ts := range wr.Timeseries {
		var s Series
		for _, l := range ts.Labels {
			s.Labels = append(s.Labels, Label{Name: l.Name, Value: l.Value})
		}
		for _, smp := range ts.Samples {
			s.Samples = append(s.Samples, Sample{Value: smp.Value, Timestamp: smp.Timestamp})
		}
		for _, e := range ts.Exemplars {
			ex := Exemplar{Value: e.Value, Timestamp: e.Timestamp}
			for _, l := range e.Labels {
				ex.Labels = append(ex.Labels, Label{Name: l.Name, Value: l.Value})
			}
			s.Exemplars = append(s.Exemplars, ex)
		}
		for _, hp := range ts.Histograms {
			h := Histogram{Timestamp: hp.Timestamp}
			if hp.IsFloatHistogram() {
				h.FH = hp.ToFloatHistogram()
			} else {
				h.H = hp.ToIntHistogram()
			}
			s.Histograms = append(s.Histograms, h)
		}
		req.Series = append(req.Series, s)
	}
	for _, m := range wr.Metadata {
		req.Metadata = append(req.Metadata, FamilyMetadata{Family: m.MetricFamilyName,
			Metadata: Metadata{Type: metricTypeFromProto(int32(m.Type)), Help: m.Help, Unit: m.Unit}})
	}
	return req
}

// expectV2 resolves a prompb-decoded RW 2.0 request independently of the
// decoder: our decoder must agree with prompb plus the spec's symbol rules.
func expectV2(r *writev2.Request) *Request {
	req := &Request{Symbols: r.Symbols}
	sym := func(ref uint32) (string, bool) {
		if int(ref) < len(r.Symbols) {
			return r.Symbols[ref], true
		}
		return "", ref == 0
	}
	resolve := func(refs []uint32) ([]Label, bool) {
		if len(refs)%2 != 0 {
			return nil, false
		}
		var out []Label
		for i := 0; i < len(refs); i += 2 {
			if int(refs[i]) >= len(r.Symbols) || int(refs[i+1]) >= len(r.Symbols) {
				return nil, false
			}
			out = append(out, Label{Name: r.Symbols[refs[i]], Value: r.Symbols[refs[i+1]]})
		}
		return out, true
	}
	bad := errors.New("bad")
	for _, ts := range r.Timeseries {
		s := Series{Metadata: Metadata{Type: metricTypeFromProto(int32(ts.Metadata.Type))}}
		lbls, ok := resolve(ts.LabelsRefs)
		if !ok {
			s.Err = bad
		} else {
			s.Labels = lbls
			help, ok1 := sym(ts.Metadata.HelpRef)
			unit, ok2 := sym(ts.Metadata.UnitRef)
			if !ok1 || !ok2 {
				s.Err = bad
			} else {
				s.Metadata.Help, s.Metadata.Unit = help, unit
			}
		}
		for _, smp := range ts.Samples {
			s.Samples = append(s.Samples, Sample{Value: smp.Value, Timestamp: smp.Timestamp, StartTimestamp: smp.StartTimestamp})
		}
		for _, e := range ts.Exemplars {
			ex := Exemplar{Value: e.Value, Timestamp: e.Timestamp}
			if l, ok := resolve(e.LabelsRefs); ok {
				ex.Labels = l
			} else {
				ex.Err = bad
			}
			s.Exemplars = append(s.Exemplars, ex)
		}
		for _, hp := range ts.Histograms {
			h := Histogram{Timestamp: hp.Timestamp, StartTimestamp: hp.StartTimestamp}
			if hp.IsFloatHistogram() {
				h.FH = hp.ToFloatHistogram()
			} else {
				h.H = hp.ToIntHistogram()
			}
			s.Histograms = append(s.Histograms, h)
		}
		req.Series = append(req.Series, s)
	}
	return req
}

var cmpOpts = []cmp.Option{
	cmpopts.EquateEmpty(),
	cmpopts.EquateNaNs(),
	cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) }),
}

func seedV1() *prompb.WriteRequest {
	h := &histogram.Histogram{Count: 5, Sum: 12.5, Schema: 1, ZeroThreshold: 0.01, ZeroCount: 1,
		PositiveSpans: []histogram.Span{{Offset: -1, Length: 2}, {Offset: 3, Length: 1}}, PositiveBuckets: []int64{1, 1, -1},
		NegativeSpans: []histogram.Span{{Offset: 0, Length: 1}}, NegativeBuckets: []int64{1}}
	return &prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{
			{
				Labels:    []prompb.Label{{Name: "__name__", Value: "http_requests_total"}, {Name: "job", Value: "api"}, {Name: "code", Value: "200"}},
				Samples:   []prompb.Sample{{Value: 1, Timestamp: 1000}, {Value: math.Float64frombits(value.StaleNaN), Timestamp: 2000}, {Value: math.Inf(-1), Timestamp: -5}},
				Exemplars: []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "abc"}}, Value: 0.3, Timestamp: 999}},
			},
			{
				Labels:     []prompb.Label{{Name: "__name__", Value: "latency"}},
				Histograms: []prompb.Histogram{prompb.FromIntHistogram(3000, h), prompb.FromFloatHistogram(4000, h.ToFloat(nil))},
			},
			{Labels: []prompb.Label{{Name: "__name__", Value: "ünïcode"}}},
		},
		Metadata: []prompb.MetricMetadata{
			{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "http_requests", Help: "Requests.", Unit: "requests"},
			{Type: prompb.MetricMetadata_STATESET, MetricFamilyName: "s"},
		},
	}
}

func seedV2() *writev2.Request {
	st := writev2.NewSymbolTable()
	h := &histogram.Histogram{Count: 2, Sum: 1, Schema: histogram.CustomBucketsSchema,
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{1, 0}, CustomValues: []float64{0.5, 1}}
	ts := []writev2.TimeSeries{
		{
			LabelsRefs: []uint32{st.Symbolize("job"), st.Symbolize("api"), st.Symbolize("__name__"), st.Symbolize("up")},
			Samples:    []writev2.Sample{{Value: 1, Timestamp: 1000, StartTimestamp: 500}, {Value: math.NaN(), Timestamp: 2000}},
			Exemplars:  []writev2.Exemplar{{LabelsRefs: []uint32{st.Symbolize("trace_id"), st.Symbolize("x")}, Value: 2, Timestamp: 1000}},
			Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: st.Symbolize("Up."), UnitRef: st.Symbolize("")},
		},
		{
			LabelsRefs: []uint32{st.Symbolize("__name__"), st.Symbolize("nhcb")},
			Histograms: []writev2.Histogram{writev2.FromIntHistogram(100, 2000, h), writev2.FromFloatHistogram(0, 3000, h.ToFloat(nil))},
		},
		{LabelsRefs: []uint32{1, 200}, Samples: []writev2.Sample{{Value: 1, Timestamp: 1}}},               // bad ref
		{LabelsRefs: []uint32{1}, Exemplars: []writev2.Exemplar{{LabelsRefs: []uint32{5}, Timestamp: 1}}}, // odd refs
	}
	return &writev2.Request{Symbols: st.Symbols(), Timeseries: ts}
}

func TestDecodeV1MatchesPrompb(t *testing.T) {
	cases := map[string]*prompb.WriteRequest{
		"empty": {},
		"seed":  seedV1(),
		"bench": benchRequestV1(50, 3),
		// Labels past the decoder's short-label path: a label message of
		// 128 bytes or more, a name or value of 128 or more, an empty
		// value (not on the wire), fields in the other order.
		"long and odd labels": {Timeseries: []prompb.TimeSeries{{
			Labels: []prompb.Label{
				{Name: "__name__", Value: "m"}, {Name: "a", Value: strings.Repeat("v", 125)},
				{Name: "b", Value: strings.Repeat("v", 128)}, {Name: strings.Repeat("n", 200), Value: "x"},
				{Name: "empty", Value: ""}, {Name: "", Value: "nameless"},
			},
			Samples: []prompb.Sample{{Value: 1, Timestamp: 1}},
		}}},
	}
	var d Decoder
	for name, wr := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := wr.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.DecodeV1(data)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(expectV1(wr), got, cmpOpts...); diff != "" {
				t.Fatalf("decode differs from prompb (-prompb +ours):\n%s", diff)
			}
		})
	}
}

// TestDecodeLabelLayouts: a Label message in any field order, with a
// repeated or unknown field, decodes as protobuf says (the last value of a
// field wins), whether or not it has the short layout the decoder reads
// without the general field loop.
func TestDecodeLabelLayouts(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  []byte
		want Label
	}{
		{"name then value", []byte{0x0a, 1, 'a', 0x12, 1, 'b'}, Label{"a", "b"}},
		{"value then name", []byte{0x12, 1, 'b', 0x0a, 1, 'a'}, Label{"a", "b"}},
		{"name only", []byte{0x0a, 1, 'a'}, Label{"a", ""}},
		{"empty name", []byte{0x0a, 0, 0x12, 1, 'b'}, Label{"", "b"}},
		{"value repeated", []byte{0x0a, 1, 'a', 0x12, 1, 'b', 0x12, 1, 'c'}, Label{"a", "c"}},
		{"unknown field after", []byte{0x0a, 1, 'a', 0x12, 1, 'b', 0x18, 1}, Label{"a", "b"}},
		{"long value", append([]byte{0x0a, 1, 'a', 0x12, 0x80, 0x01}, strings.Repeat("v", 128)...), Label{"a", strings.Repeat("v", 128)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeLabel(tc.msg)
			if err != nil || got != tc.want {
				t.Fatalf("decodeLabel = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := decodeLabel([]byte{0x0a, 5, 'a'}); err == nil {
		t.Fatal("a name longer than its message decoded without an error")
	}
}

// TestDecodeSampleLayouts: a Sample message decodes as protobuf says
// whether or not it has the layout the decoder reads without the general
// field loop (value, then timestamp, nothing else).
func TestDecodeSampleLayouts(t *testing.T) {
	value := func(v float64) []byte {
		return binary.LittleEndian.AppendUint64([]byte{0x09}, math.Float64bits(v))
	}
	ts := func(t int64) []byte { return binary.AppendUvarint([]byte{0x10}, uint64(t)) }
	cat := slices.Concat[[]byte]
	for _, tc := range []struct {
		name string
		msg  []byte
		want Sample
	}{
		{"value then timestamp", cat(value(1.5), ts(1000)), Sample{Value: 1.5, Timestamp: 1000}},
		{"negative timestamp", cat(value(-2), ts(-5)), Sample{Value: -2, Timestamp: -5}},
		{"timestamp then value", cat(ts(1000), value(1.5)), Sample{Value: 1.5, Timestamp: 1000}},
		{"zero value left out", ts(7), Sample{Timestamp: 7}},
		{"start timestamp", cat(value(1), ts(2000), []byte{0x18}, binary.AppendUvarint(nil, 1000)), Sample{Value: 1, Timestamp: 2000, StartTimestamp: 1000}},
		{"timestamp repeated", cat(value(1), ts(1), ts(2)), Sample{Value: 1, Timestamp: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeSample(tc.msg)
			if err != nil || got != tc.want {
				t.Fatalf("decodeSample = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := decodeSample(cat(value(1), []byte{0x10, 0x80})); err == nil {
		t.Fatal("a cut timestamp varint decoded without an error")
	}
}

func TestDecodeV2MatchesPrompb(t *testing.T) {
	cases := map[string]*writev2.Request{
		"empty": {},
		"seed":  seedV2(),
		"bench": benchRequestV2(50, 3),
	}
	var d Decoder
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := req.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.DecodeV2(data)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(expectV2(req), got, cmpOpts...); diff != "" {
				t.Fatalf("decode differs from prompb (-prompb +ours):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name string
		v2   bool
		data []byte
		msg  string
	}{
		{"truncated length", false, []byte{0x0a, 0x05, 1}, "bad protobuf: read WriteRequest field: cannot read field from 1 bytes; need at least 5 bytes"},
		{"timeseries not a message", false, []byte{0x08, 0x01}, "bad protobuf: WriteRequest.timeseries is not a message"},
		{"sample value wrong type", false, []byte{0x0a, 0x04, 0x12, 0x02, 0x08, 0x01}, "bad protobuf: Sample field 1 has the wrong type"},
		{"bad wire type", false, []byte{0x0f}, "bad protobuf: read WriteRequest field: unknown wireType=7"},
		{"v2 symbols not a string", true, []byte{0x20, 0x01}, "bad protobuf: Request.symbols is not a string"},
		{"v2 truncated series", true, []byte{0x2a, 0x03, 0x0a}, "bad protobuf: read Request field: cannot read field from 1 bytes; need at least 3 bytes"},
	}
	var d Decoder
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.v2 {
				_, err = d.DecodeV2(tc.data)
			} else {
				_, err = d.DecodeV1(tc.data)
			}
			if !errors.Is(err, ErrBadProtobuf) || err.Error() != tc.msg {
				t.Fatalf("error %v, want %q", err, tc.msg)
			}
		})
	}
}

// TestDecodeSteadyStateAllocs: once the pooled slices have grown, decoding
// allocates nothing for float samples, whatever their number.
func TestDecodeSteadyStateAllocs(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			var data []byte
			var err error
			if v2 {
				data, err = benchRequestV2(2000, 1).Marshal()
			} else {
				data, err = benchRequestV1(2000, 1).Marshal()
			}
			if err != nil {
				t.Fatal(err)
			}
			var d Decoder
			decode := func() {
				if v2 {
					_, err = d.DecodeV2(data)
				} else {
					_, err = d.DecodeV1(data)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			decode()
			if allocs := testing.AllocsPerRun(20, decode); allocs != 0 {
				t.Fatalf("steady-state decode of 2,000 samples allocated %.0f times", allocs)
			}
		})
	}
}

// TestDecoderReuseUnpin: a Decoder reused without clearing its views
// (reuse, as the handler does between requests on the same buffer) decodes
// the next request exactly, and unpin leaves no view into the old buffer
// anywhere in its slices' capacity, so a replaced buffer can be collected.
func TestDecoderReuseUnpin(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			encode := func(n int) []byte {
				var data []byte
				var err error
				if v2 {
					data, err = benchRequestV2(n, 1).Marshal()
				} else {
					data, err = benchRequestV1(n, 1).Marshal()
				}
				if err != nil {
					t.Fatal(err)
				}
				return data
			}
			decode := func(d *Decoder, data []byte) *Request {
				var req *Request
				var err error
				if v2 {
					req, err = d.DecodeV2(data)
				} else {
					req, err = d.DecodeV1(data)
				}
				if err != nil {
					t.Fatal(err)
				}
				return req
			}
			var d, fresh Decoder
			decode(&d, encode(50))
			d.reuse()
			small := encode(20)
			got, want := decode(&d, small), decode(&fresh, small)
			if len(got.Series) != len(want.Series) {
				t.Fatalf("after reuse: %d series, want %d", len(got.Series), len(want.Series))
			}
			for i := range got.Series {
				if !slices.Equal(got.Series[i].Labels, want.Series[i].Labels) || !slices.Equal(got.Series[i].Samples, want.Series[i].Samples) {
					t.Fatalf("after reuse, series %d: %v %v; want %v %v", i, got.Series[i].Labels, got.Series[i].Samples, want.Series[i].Labels, want.Series[i].Samples)
				}
			}
			d.reuse()
			d.unpin()
			for i, l := range d.labels[:cap(d.labels)] {
				if l != (Label{}) {
					t.Fatalf("label view %d still set after unpin: %v", i, l)
				}
			}
			for i, s := range d.req.Series[:cap(d.req.Series)] {
				if s.Labels != nil || s.Metadata != (Metadata{}) {
					t.Fatalf("series %d still holds views after unpin", i)
				}
			}
			for i, sym := range d.req.Symbols[:cap(d.req.Symbols)] {
				if sym != "" {
					t.Fatalf("symbol %d still set after unpin", i)
				}
			}
		})
	}
}

func TestMetricTypeFromProto(t *testing.T) {
	for v, want := range map[int32]model.MetricType{0: model.MetricTypeUnknown, 1: model.MetricTypeCounter, 7: model.MetricTypeStateset, 99: model.MetricTypeUnknown} {
		if got := metricTypeFromProto(v); got != want {
			t.Errorf("%d: %s, want %s", v, got, want)
		}
	}
}

// FuzzDecode feeds arbitrary bytes to both decoders. Invariants: no panic,
// and whenever prompb (Prometheus' own generated code) accepts the input, our
// decoder accepts prompb's canonical re-encoding of it and decodes the same
// request.
func FuzzDecode(f *testing.F) {
	for _, wr := range []*prompb.WriteRequest{{}, seedV1(), benchRequestV1(3, 2)} {
		b, err := wr.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(false, b)
	}
	for _, req := range []*writev2.Request{{}, seedV2(), benchRequestV2(3, 2)} {
		b, err := req.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(true, b)
	}
	f.Add(false, []byte{0x0a, 0x80})
	f.Add(true, []byte{0x2a, 0x02, 0x0a, 0xff})

	var d Decoder
	f.Fuzz(func(t *testing.T, v2 bool, data []byte) {
		if v2 {
			_, _ = d.DecodeV2(data) // must not panic
			var req writev2.Request
			if req.Unmarshal(data) != nil {
				return
			}
			dropUnknownFields(reflect.ValueOf(&req))
			canon, err := req.Marshal()
			if err != nil {
				return
			}
			got, err := d.DecodeV2(canon)
			if err != nil {
				t.Fatalf("prompb accepts the request, we do not: %v", err)
			}
			if diff := cmp.Diff(expectV2(&req), got, cmpOpts...); diff != "" {
				t.Fatalf("decode differs from prompb (-prompb +ours):\n%s", diff)
			}
			return
		}
		_, _ = d.DecodeV1(data)
		var wr prompb.WriteRequest
		if wr.Unmarshal(data) != nil {
			return
		}
		dropUnknownFields(reflect.ValueOf(&wr))
		canon, err := wr.Marshal()
		if err != nil {
			return
		}
		got, err := d.DecodeV1(canon)
		if err != nil {
			t.Fatalf("prompb accepts the request, we do not: %v", err)
		}
		if diff := cmp.Diff(expectV1(&wr), got, cmpOpts...); diff != "" {
			t.Fatalf("decode differs from prompb (-prompb +ours):\n%s", diff)
		}
	})
}

// dropUnknownFields clears gogo's XXX_unrecognized everywhere in v. prompb
// keeps unknown fields and re-marshals them, including deprecated proto2
// groups (wire types 3 and 4), which proto3 senders never produce and our
// decoder rejects as bad protobuf; the invariant is about the messages
// senders can actually send.
func dropUnknownFields(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			dropUnknownFields(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			dropUnknownFields(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			if v.Type().Field(i).Name == "XXX_unrecognized" {
				f.SetBytes(nil)
				continue
			}
			if f.CanSet() {
				dropUnknownFields(f)
			}
		}
	}
}

// TestWriteFuzzSeeds regenerates the committed seed corpus from real
// prompb-marshalled requests: go test -run TestWriteFuzzSeeds -update-fuzz-seeds.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*updateFuzzSeeds {
		t.Skip("run with -update-fuzz-seeds to rewrite testdata/fuzz/FuzzDecode")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, v2 bool, b []byte) {
		content := fmt.Sprintf("go test fuzz v1\nbool(%v)\n[]byte(%q)\n", v2, b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, wr := range map[string]*prompb.WriteRequest{"v1_seed": seedV1(), "v1_bench": benchRequestV1(5, 2)} {
		b, err := wr.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		write(name, false, b)
	}
	for name, req := range map[string]*writev2.Request{"v2_seed": seedV2(), "v2_bench": benchRequestV2(5, 2)} {
		b, err := req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		write(name, true, b)
	}
	write("v1_truncated", false, []byte{0x0a, 0x10, 0x0a, 0x05, 0x0a, 0x01})
	write("v2_bad_refs", true, []byte{0x22, 0x00, 0x2a, 0x04, 0x0a, 0x02, 0x01, 0x07})
}

// TestDecodeV1SizesNewDecoder: a new Decoder's series, labels and samples
// are made at the request's size at once (sizeV1), not grown by append past
// it, and what it decodes is the same as a used Decoder's; a truncated body
// is still refused.
func TestDecodeV1SizesNewDecoder(t *testing.T) {
	wr := benchRequestV1(2000, 2)
	wr.Timeseries[7].Labels = append(wr.Timeseries[7].Labels, prompb.Label{Name: "long", Value: strings.Repeat("v", 300)})
	buf, err := wr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var d Decoder
	req, err := d.DecodeV1(buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Series) != 2000 || len(d.samples) != 4000 || cap(d.req.Series) > 2000+2000/16 || cap(d.labels) > len(d.labels)+len(d.labels)/16 || cap(d.samples) > 4000+4000/16 {
		t.Fatalf("series %d (cap %d), labels %d (cap %d), samples %d (cap %d): want each at its size",
			len(req.Series), cap(d.req.Series), len(d.labels), cap(d.labels), len(d.samples), cap(d.samples))
	}
	// The Decoder itself, its series, labels and samples, one allocation
	// each; grown by append, each took one per growth step.
	if n := testing.AllocsPerRun(5, func() {
		var d Decoder
		if _, err := d.DecodeV1(buf); err != nil {
			t.Fatal(err)
		}
	}); n > 10 {
		t.Fatalf("a new Decoder made %v allocations, want at most 10 (made 4, 6 under the race detector)", n)
	}
	var used Decoder
	if _, err := used.DecodeV1(buf[:len(buf)/2]); err == nil {
		t.Fatal("a truncated body decoded")
	}
	again, err := used.DecodeV1(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req, again) {
		t.Fatal("a new Decoder and a used one decode the same body differently")
	}
	var fresh Decoder
	if _, err := fresh.DecodeV1(buf[:len(buf)-3]); err == nil {
		t.Fatal("a truncated body decoded by a new Decoder")
	}
}

// TestDecodeV2SizesNewDecoder: as TestDecodeV1SizesNewDecoder for RW 2.0.
func TestDecodeV2SizesNewDecoder(t *testing.T) {
	buf, err := benchRequestV2(2000, 2).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var d Decoder
	req, err := d.DecodeV2(buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Series) != 2000 || len(d.samples) != 4000 || cap(d.req.Series) > 2000+2000/16 || cap(d.labels) > len(d.labels)+len(d.labels)/16 ||
		cap(d.samples) > 4000+4000/16 || cap(d.req.Symbols) > len(d.req.Symbols)+8192/16 { // large slices are rounded up to 8 KiB
		t.Fatalf("series %d (cap %d), labels %d (cap %d), samples %d (cap %d), symbols %d (cap %d): want each at its size",
			len(req.Series), cap(d.req.Series), len(d.labels), cap(d.labels), len(d.samples), cap(d.samples), len(d.req.Symbols), cap(d.req.Symbols))
	}
	// The Decoder, its symbols, series views, series, labels, samples and
	// a series' label references: grown by append, they took 80.
	if n := testing.AllocsPerRun(5, func() {
		var d Decoder
		if _, err := d.DecodeV2(buf); err != nil {
			t.Fatal(err)
		}
	}); n > 24 {
		t.Fatalf("a new Decoder made %v allocations, want at most 24 (made 10, 15 under the race detector; 80 grown by append)", n)
	}
	var used Decoder
	if _, err := used.DecodeV2(buf[:len(buf)/2]); err == nil {
		t.Fatal("a truncated body decoded")
	}
	again, err := used.DecodeV2(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req, again) {
		t.Fatal("a new Decoder and a used one decode the same body differently")
	}
}
