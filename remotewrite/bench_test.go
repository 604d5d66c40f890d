package remotewrite

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/s2"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage"

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
	return benchRequestV2Range(0, nSeries, nSamples)
}

// benchRequestV2Range is a request of the series from up to to, with its own
// symbol table, as each request of a sender has.
func benchRequestV2Range(from, to, nSamples int) *writev2.Request {
	st := writev2.NewSymbolTable()
	req := &writev2.Request{}
	for i := from; i < to; i++ {
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
// series cache is measured on and off, and with the raw tier counting late
// appends for the query results cache (`strata serve`'s default) and not.
func BenchmarkDecodeAppend(b *testing.B) {
	const groups = 5
	for _, v := range []struct{ cache, tracked bool }{{true, false}, {false, false}, {true, true}} {
		cache := v.cache
		name := fmt.Sprintf("cache=%v", cache)
		if v.tracked {
			name += "/late=tracked"
		}
		b.Run(name, func(b *testing.B) {
			raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), slog.New(slog.DiscardHandler), nil)
			if err != nil {
				b.Fatal(err)
			}
			var clock time.Time
			if v.tracked {
				raw.TrackLateAppends(5*time.Minute, func() time.Time { return clock })
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
			loopRequests(b, groups, func(g int, ts int64) func() {
				r, w := prepare(ts, g)
				return func() {
					if h.ServeHTTP(w, r); w.Code != 204 {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}

// loopRequests is the loop of a benchmark that sends groups requests of
// benchSamples samples a round, each round 1 s later than the last: prepare
// builds group g's request stamped ts untimed and returns the timed part,
// which serves it (and fails the benchmark on a bad reply). The first round
// is the caller's warm-up. It reports samples per wall-clock and, where
// the platform tells, per CPU-second of the timed parts.
func loopRequests(b *testing.B, groups int, prepare func(g int, ts int64) func()) {
	i := groups
	var cpu time.Duration
	b.ReportAllocs()
	for b.Loop() {
		g, round := i%groups, i/groups
		i++
		b.StopTimer()
		serve := prepare(g, base.UnixMilli()+int64(round)*1000)
		b.StartTimer()
		cpu0 := processCPU()
		serve()
		cpu += processCPU() - cpu0
	}
	reportSamples(b, benchSamples*b.N, cpu)
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

// nopAppendable is a storage that keeps nothing: it hands out a new reference
// for a series appended without one and returns a known reference as is, so
// BenchmarkWrite measures the handler's own per-series work (label lookup,
// validation, the series cache) without the TSDB's.
type nopAppendable struct{ next atomic.Uint64 }

func (n *nopAppendable) AppenderV2(context.Context) storage.AppenderV2 { return nopAppender{n} }

type nopAppender struct{ n *nopAppendable }

func (a nopAppender) Append(ref storage.SeriesRef, _ labels.Labels, _, _ int64, _ float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	if ref == 0 {
		ref = storage.SeriesRef(a.n.next.Add(1))
	}
	return ref, nil
}
func (nopAppender) Commit() error   { return nil }
func (nopAppender) Rollback() error { return nil }

// BenchmarkWrite measures Handler.write on decoded RW 1.0 and 2.0 requests of
// series that are all known (in the series cache), 100,000 series in
// requests of 2,000, into a storage that does nothing: what the handler
// itself costs per sample between decoding and the TSDB.
func BenchmarkWrite(b *testing.B) {
	const series = 100000
	for _, ver := range []protoVersion{version1, version2} {
		b.Run("v"+ver.label(), func(b *testing.B) {
			var clock time.Time
			h, err := NewHandler(DefaultConfig(), &nopAppendable{}, nil, nil, nil, func() time.Time { return clock })
			if err != nil {
				b.Fatal(err)
			}
			clock = base
			benchWriteLoop(b, h, ver, benchDecodedRequests(b, ver, series))
		})
	}
}

// BenchmarkWriteRotation is BenchmarkWrite's RW 1.0 case for a fleet of
// 500,000 series sent in rotation (each series once per round, in the same
// order, as a fleet scraped every 15 s sends them), with the series cache's
// generations fixed at 131,072 series (what they were before they followed
// the storage's series count: no series is still cached when it comes
// back) and sized to the storage's series count. Run it with at least
// -benchtime=250x (one rotation).
func BenchmarkWriteRotation(b *testing.B) {
	const series = 500000
	reqs := benchDecodedRequests(b, version1, series)
	for _, sized := range []bool{false, true} {
		name := "cache=fixed-131072"
		if sized {
			name = "cache=fleet"
		}
		b.Run(name, func(b *testing.B) {
			na := &nopAppendable{}
			cfg := DefaultConfig()
			if sized {
				cfg.StorageSeries = func() int { return int(na.next.Load()) }
			} else {
				cfg.SeriesCacheSize = 131072
			}
			h, err := NewHandler(cfg, na, nil, nil, nil, func() time.Time { return base })
			if err != nil {
				b.Fatal(err)
			}
			benchWriteLoop(b, h, version1, reqs)
		})
	}
}

// benchDecodedRequests returns series benchLabels series decoded from
// requests of benchSamples series, one sample each.
func benchDecodedRequests(b *testing.B, ver protoVersion, series int) []*Request {
	var reqs []*Request
	v1 := benchRequestV1(series, 1)
	for g := 0; g < series; g += benchSamples {
		var (
			data []byte
			err  error
		)
		if ver == version1 {
			wr := *v1
			wr.Timeseries = v1.Timeseries[g : g+benchSamples]
			data, err = wr.Marshal()
		} else {
			data, err = benchRequestV2Range(g, g+benchSamples, 1).Marshal()
		}
		if err != nil {
			b.Fatal(err)
		}
		var d Decoder
		var req *Request
		if ver == version1 {
			req, err = d.DecodeV1(data)
		} else {
			req, err = d.DecodeV2(data)
		}
		if err != nil {
			b.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// benchWriteLoop writes every request once (warm-up: the series enter the
// cache), then the requests in turn in the measured loop, and reports the
// process' CPU time per sample.
func benchWriteLoop(b *testing.B, h *Handler, ver protoVersion, reqs []*Request) {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/write", http.NoBody)
	var st writeState
	for _, req := range reqs {
		if res := h.write(r.Context(), ver, req, &st); res.rejectedCount() > 0 || res.fatal != nil {
			b.Fatalf("warm-up: %s", res.message(1000))
		}
	}
	runtime.GC() // not the setup's garbage in the measured CPU time
	b.ReportAllocs()
	i := 0
	cpu0 := processCPU()
	for b.Loop() {
		if res := h.write(r.Context(), ver, reqs[i%len(reqs)], &st); res.samples != benchSamples {
			b.Fatalf("wrote %d samples: %s", res.samples, res.message(1000))
		}
		i++
	}
	// CPU time, not wall time: on a shared machine the wall clock
	// measures the neighbours.
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*benchSamples), "cpu-ns/sample")
	}
}

// BenchmarkServePacedGC serves requests of 2,000 series (RW 1.0, known
// series, a storage that keeps nothing) as a paced fleet sends them: mostly
// one at a time, every 16th request with three others at once, and the
// collector running every 64 requests (at 25 requests a second, the paced
// 50,000-series load, the server collected every 2-6 s). What it reports
// per op (1.19 requests) is what the handler allocates anew: the request
// states of the sync.Pool that the collector dropped while idle, made again
// at the next overlap (54-58 KB; 17 KB with the states kept in fixed slots,
// which a paced run showed did not lower the peak and kept 6-10 MiB more:
// docs/bench.md, "what makes the paced peak").
func BenchmarkServePacedGC(b *testing.B) {
	serve := knownSeriesServer(b)
	runtime.GC()
	b.ReportAllocs()
	i, requests := 0, 0
	for b.Loop() {
		requests++
		if i%16 == 0 {
			requests += 3
			var wg sync.WaitGroup
			for k := range 3 {
				wg.Go(func() { serve(i + 1 + k) })
			}
			serve(i)
			wg.Wait()
		} else {
			serve(i)
		}
		if i%64 == 63 {
			runtime.GC()
		}
		i++
	}
	b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
}

// knownSeriesServer returns a handler's serve function over requests of
// 2,000 series each (RW 1.0, 10,000 series in all, one sample each), every
// series already in its cache; serve(i) sends request i modulo 5.
func knownSeriesServer(b *testing.B) (serve func(i int)) {
	b.Helper()
	const series = 10000
	v1 := benchRequestV1(series, 1)
	var bodies [][]byte
	for g := 0; g < series; g += benchSamples {
		wr := *v1
		wr.Timeseries = v1.Timeseries[g : g+benchSamples]
		data, err := wr.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, snappy.Encode(nil, data))
	}
	h, err := NewHandler(DefaultConfig(), &nopAppendable{}, nil, nil, nil, func() time.Time { return base })
	if err != nil {
		b.Fatal(err)
	}
	serve = func(i int) {
		body := bodies[i%len(bodies)]
		r := httptest.NewRequest(http.MethodPost, "/api/v1/write", &sliceReader{b: body})
		r.Header.Set("Content-Type", ctV1)
		r.Header.Set("Content-Encoding", "snappy")
		r.ContentLength = int64(len(body))
		w := httptest.NewRecorder()
		if h.ServeHTTP(w, r); w.Code != http.StatusNoContent {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	for i := range bodies { // the series enter the cache
		serve(i)
	}
	return serve
}

// BenchmarkServeColdState serves requests of 2,000 known series (RW 1.0,
// as BenchmarkServePacedGC) with the pooled request states dropped before
// each (two collections: the pool's victim cache survives one), so every
// request makes its state anew: B/op is what a state the collector dropped
// costs to make again (its buffers as they grow to the request, and what
// every request allocates), and held-B what the state keeps in the pool
// afterwards.
func BenchmarkServeColdState(b *testing.B) {
	serve := knownSeriesServer(b)
	b.ReportAllocs()
	var held float64
	i := 0
	for b.Loop() {
		b.StopTimer()
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m0)
		b.StartTimer()
		serve(i)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		held += float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
		b.StartTimer()
		i++
	}
	b.ReportMetric(held/float64(b.N), "held-B")
}
