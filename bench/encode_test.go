package bench

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

func labelsSorted(ls []prompb.Label) bool {
	for i := 1; i < len(ls); i++ {
		if ls[i-1].Name >= ls[i].Name {
			return false
		}
	}
	return true
}

// decodedSample is one sample as a receiver sees it.
type decodedSample struct {
	lset labels.Labels
	t    int64
	v    float64
	typ  writev2.Metadata_MetricType // v2 only
}

// decodeBody decodes a snappy-compressed request of either protocol, the way
// a receiver does.
func decodeBody(proto Protocol, body []byte) ([]decodedSample, error) {
	if proto == ProtocolOTLP {
		return decodeOTLP(body)
	}
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	var out []decodedSample
	if proto == ProtocolV2 {
		var req writev2.Request
		if err := req.Unmarshal(raw); err != nil {
			return nil, fmt.Errorf("unmarshal v2: %w", err)
		}
		if len(req.Symbols) == 0 || req.Symbols[0] != "" {
			return nil, fmt.Errorf("symbols must start with the empty string")
		}
		b := labels.NewScratchBuilder(16)
		for _, ts := range req.Timeseries {
			ls, err := ts.ToLabels(&b, req.Symbols)
			if err != nil {
				return nil, fmt.Errorf("labels: %w", err)
			}
			for _, s := range ts.Samples {
				out = append(out, decodedSample{lset: ls, t: s.Timestamp, v: s.Value, typ: ts.Metadata.Type})
			}
		}
		return out, nil
	}
	var req prompb.WriteRequest
	if err := req.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("unmarshal v1: %w", err)
	}
	for _, ts := range req.Timeseries {
		b := labels.NewScratchBuilder(len(ts.Labels))
		for _, l := range ts.Labels {
			b.Add(l.Name, l.Value)
		}
		ls := b.Labels()
		for _, s := range ts.Samples {
			out = append(out, decodedSample{lset: ls, t: s.Timestamp, v: s.Value})
		}
	}
	return out, nil
}

// decodeOTLP decodes a gzipped OTLP export of gauges into samples, the
// metric's name as __name__ and the attributes as the other labels, in
// the order of the body (grouped by name).
func decodeOTLP(body []byte) ([]decodedSample, error) {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	req := pmetricotlp.NewExportRequest()
	if err := req.UnmarshalProto(raw); err != nil {
		return nil, fmt.Errorf("unmarshal otlp: %w", err)
	}
	var out []decodedSample
	for _, rm := range req.Metrics().ResourceMetrics().All() {
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				if m.Type() != pmetric.MetricTypeGauge {
					return nil, fmt.Errorf("metric %s is a %s, want a gauge", m.Name(), m.Type())
				}
				for _, dp := range m.Gauge().DataPoints().All() {
					b := labels.NewScratchBuilder(dp.Attributes().Len() + 1)
					b.Add(model.MetricNameLabel, m.Name())
					for k, v := range dp.Attributes().All() {
						b.Add(k, v.Str())
					}
					b.Sort()
					out = append(out, decodedSample{lset: b.Labels(), t: int64(dp.Timestamp()) / 1e6, v: dp.DoubleValue()})
				}
			}
		}
	}
	return out, nil
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, proto := range []Protocol{ProtocolV1, ProtocolV2, ProtocolOTLP} {
		t.Run(string(proto), func(t *testing.T) {
			g := testGenerator(t, LoadConfig{Series: 3000})
			enc := newEncoder(proto)
			// Two rounds in one batch: the same series twice, in order.
			var batch []sampleRef
			for r := range 2 {
				for _, u := range g.units {
					u.advance(1)
					for _, gr := range u.groups {
						for j, v := range gr.vals {
							batch = append(batch, sampleRef{ref: int32(gr.first + j), t: int64(1000 + r*1000), v: v})
						}
					}
				}
			}
			// Encode twice with the same encoder: buffers are reused.
			for range 2 {
				body, err := enc.encode(g.series, batch)
				if err != nil {
					t.Fatal(err)
				}
				got, err := decodeBody(proto, body)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(batch) {
					t.Fatalf("decoded %d samples, sent %d", len(got), len(batch))
				}
				want := batch
				if proto == ProtocolOTLP {
					// Grouped by metric name: compare in (labels, time) order.
					want = slices.Clone(batch)
					slices.SortStableFunc(want, func(a, b sampleRef) int {
						return cmp.Or(labels.Compare(g.series[a.ref].lset, g.series[b.ref].lset), cmp.Compare(a.t, b.t))
					})
					slices.SortStableFunc(got, func(a, b decodedSample) int {
						return cmp.Or(labels.Compare(a.lset, b.lset), cmp.Compare(a.t, b.t))
					})
				}
				for i, s := range want {
					d := g.series[s.ref]
					if !labels.Equal(got[i].lset, d.lset) || got[i].t != s.t || got[i].v != s.v {
						t.Fatalf("sample %d: got %s %d %g, want %s %d %g", i, got[i].lset, got[i].t, got[i].v, d.lset, s.t, s.v)
					}
					if proto == ProtocolV2 && got[i].typ != d.fam.kind.metadataType() {
						t.Fatalf("sample %d: metadata type %v, want %v", i, got[i].typ, d.fam.kind.metadataType())
					}
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, proto := range []Protocol{ProtocolV1, ProtocolV2, ProtocolOTLP} {
		b.Run(string(proto), func(b *testing.B) {
			cfg := LoadConfig{URL: "http://127.0.0.1:1/api/v1/write", Series: 10000}.withDefaults()
			g, err := newGenerator(cfg)
			if err != nil {
				b.Fatal(err)
			}
			enc := newEncoder(proto)
			batch := make([]sampleRef, 0, DefaultBatchSize)
			for i := range DefaultBatchSize {
				batch = append(batch, sampleRef{ref: int32(i * 3 % len(g.series)), t: int64(i), v: float64(i) * 1.5})
			}
			body, err := enc.encode(g.series, batch)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := enc.encode(g.series, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/DefaultBatchSize, "ns/sample")
		})
	}
}

func BenchmarkAdvance(b *testing.B) {
	cfg := LoadConfig{URL: "http://127.0.0.1:1/api/v1/write", Series: 10000}.withDefaults()
	g, err := newGenerator(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, u := range g.units {
			u.advance(1)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(g.series)), "ns/sample")
}
