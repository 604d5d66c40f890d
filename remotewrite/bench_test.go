package remotewrite

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/s2"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/strata-dev/strata/tiers"
)

// benchLabels are avalanche-like series: a metric name shared by 20 series, a
// series id and eight constant labels (a typical exporter series has 8-12).
func benchLabels(i int) []string {
	kv := []string{"__name__", "avalanche_metric_mmmmm_" + strconv.Itoa(i/20), "series_id", strconv.Itoa(i), "cycle_id", "0"}
	for k := range 8 {
		kv = append(kv, fmt.Sprintf("label_key_kkkkk_%d", k), fmt.Sprintf("label_val_vvvvv_%d", k))
	}
	return kv
}

func benchRequestV1(nSeries, nSamples int) *prompb.WriteRequest {
	wr := &prompb.WriteRequest{}
	for i := range nSeries {
		kv := benchLabels(i)
		ts := prompb.TimeSeries{}
		for j := 0; j < len(kv); j += 2 {
			ts.Labels = append(ts.Labels, prompb.Label{Name: kv[j], Value: kv[j+1]})
		}
		for j := range nSamples {
			ts.Samples = append(ts.Samples, prompb.Sample{Value: float64(i*j) + 0.5, Timestamp: base.UnixMilli() + int64(j)*1000})
		}
		wr.Timeseries = append(wr.Timeseries, ts)
	}
	return wr
}

func benchRequestV2(nSeries, nSamples int) *writev2.Request {
	st := writev2.NewSymbolTable()
	req := &writev2.Request{}
	for i := range nSeries {
		kv := benchLabels(i)
		ts := writev2.TimeSeries{Metadata: writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: st.Symbolize("An avalanche gauge.")}}
		for _, s := range kv {
			ts.LabelsRefs = append(ts.LabelsRefs, st.Symbolize(s))
		}
		for j := range nSamples {
			ts.Samples = append(ts.Samples, writev2.Sample{Value: float64(i*j) + 0.5, Timestamp: base.UnixMilli() + int64(j)*1000})
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	req.Symbols = st.Symbols()
	return req
}

const benchSamples = 2000

// reportSamples reports throughput per wall-clock second and, where the
// platform tells, per CPU-second of the whole process (see processCPU).
func reportSamples(b *testing.B, samples int, cpu time.Duration) {
	b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "samples/s")
	if cpu > 0 {
		b.ReportMetric(float64(samples)/cpu.Seconds(), "samples/cpu-s")
	}
}

// BenchmarkDecodeV1 compares our decoder with prompb's generated Unmarshal on
// the same 2,000-series, one-sample-each request (Prometheus' default
// max_samples_per_send).
func BenchmarkDecodeV1(b *testing.B) {
	data, err := benchRequestV1(benchSamples, 1).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("strata", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		var d Decoder
		cpu0 := processCPU()
		for b.Loop() {
			if _, err := d.DecodeV1(data); err != nil {
				b.Fatal(err)
			}
		}
		reportSamples(b, benchSamples*b.N, processCPU()-cpu0)
	})
	b.Run("prompb", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		cpu0 := processCPU()
		for b.Loop() {
			var wr prompb.WriteRequest
			if err := wr.Unmarshal(data); err != nil {
				b.Fatal(err)
			}
		}
		reportSamples(b, benchSamples*b.N, processCPU()-cpu0)
	})
}

// BenchmarkDecodeV2 is BenchmarkDecodeV1 for RW 2.0; ours includes resolving
// every label reference, prompb's does not (it leaves refs unresolved).
func BenchmarkDecodeV2(b *testing.B) {
	data, err := benchRequestV2(benchSamples, 1).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("strata", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		var d Decoder
		cpu0 := processCPU()
		for b.Loop() {
			if _, err := d.DecodeV2(data); err != nil {
				b.Fatal(err)
			}
		}
		reportSamples(b, benchSamples*b.N, processCPU()-cpu0)
	})
	b.Run("prompb", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		cpu0 := processCPU()
		for b.Loop() {
			var req writev2.Request
			if err := req.Unmarshal(data); err != nil {
				b.Fatal(err)
			}
		}
		reportSamples(b, benchSamples*b.N, processCPU()-cpu0)
	})
}

// BenchmarkDecodeAppend measures the receiver's whole path for one request:
// HTTP handler, snappy, decode, validation, append and commit into a real
// TSDB head (WAL on). 10,000 series are written in five requests of 2,000;
// every round moves time on by 1 s so each append is a new sample. The
// series cache is measured on and off.
func BenchmarkDecodeAppend(b *testing.B) {
	const groups = 5
	for _, cache := range []bool{true, false} {
		b.Run(fmt.Sprintf("cache=%v", cache), func(b *testing.B) {
			raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), slog.New(slog.DiscardHandler), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := raw.Close(); err != nil {
					b.Error(err)
				}
			}()
			cfg := DefaultConfig()
			if !cache {
				cfg.SeriesCacheSize = -1
			}
			var clock time.Time
			h, err := NewHandler(cfg, raw, nil, nil, nil, func() time.Time { return clock })
			if err != nil {
				b.Fatal(err)
			}
			// One template per group; each round rewrites the timestamps.
			tmpl := make([]*prompb.WriteRequest, groups)
			for g := range groups {
				tmpl[g] = benchRequestV1(benchSamples*groups, 1)
				tmpl[g].Timeseries = tmpl[g].Timeseries[g*benchSamples : (g+1)*benchSamples]
			}
			var raw0 []byte
			var body []byte
			// One warm-up round creates the 10,000 series, so the loop
			// measures the steady state (known series, new samples).
			prepare := func(ts int64, g int) (*http.Request, *httptest.ResponseRecorder) {
				for k := range tmpl[g].Timeseries {
					tmpl[g].Timeseries[k].Samples[0].Timestamp = ts
				}
				raw0, _ = tmpl[g].Marshal()
				body = snappy.Encode(body[:0], raw0)
				clock = time.UnixMilli(ts)
				r := httptest.NewRequest(http.MethodPost, "/api/v1/write", &sliceReader{b: body})
				r.Header.Set("Content-Type", ctV1)
				r.Header.Set("Content-Encoding", "snappy")
				r.ContentLength = int64(len(body))
				return r, httptest.NewRecorder()
			}
			for g := range groups {
				r, w := prepare(base.UnixMilli(), g)
				if h.ServeHTTP(w, r); w.Code != 204 {
					b.Fatalf("warm-up: %d %s", w.Code, w.Body)
				}
			}
			i := groups
			var cpu time.Duration
			b.ReportAllocs()
			for b.Loop() {
				g, round := i%groups, i/groups
				i++
				b.StopTimer()
				r, w := prepare(base.UnixMilli()+int64(round)*1000, g)
				b.StartTimer()
				cpu0 := processCPU()
				h.ServeHTTP(w, r)
				cpu += processCPU() - cpu0
				if w.Code != 204 {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			reportSamples(b, benchSamples*b.N, cpu)
		})
	}
}

type sliceReader struct{ b []byte }

func (s *sliceReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

func (s *sliceReader) Close() error { return nil }

// BenchmarkSnappyDecode compares golang/snappy (used) with klauspost's s2,
// which decodes the same block format, on a 2,000-sample request.
func BenchmarkSnappyDecode(b *testing.B) {
	data, err := benchRequestV1(benchSamples, 1).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	comp := snappy.Encode(nil, data)
	dst := make([]byte, len(data))
	b.Run("golang-snappy", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := snappy.Decode(dst, comp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("s2", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := s2.Decode(dst, comp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
