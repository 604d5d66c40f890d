package bench

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTarget is a whole receiver: remote write, the query API (one panel
// fails, to check errors are counted, not fatal), /metrics with a rollup lag
// and a stored-samples counter (1,000 at the start, then two stored per
// sample received, as if it stored a sample of its own beside each), and
// /debug/pprof/profile. It writes to dir so disk growth can be measured.
func fakeTarget(t *testing.T, dir string) (*httptest.Server, *fakeReceiver, *atomic.Int64) {
	t.Helper()
	rcv := newFakeReceiver(t)
	var queries atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/write", func(w http.ResponseWriter, r *http.Request) {
		rcv.ServeHTTP(w, r)
		f, err := os.OpenFile(filepath.Join(dir, "wal"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = f.Write(make([]byte, 1000))
			_ = f.Close()
		}
	})
	mux.HandleFunc("/api/v1/query_range", func(w http.ResponseWriter, r *http.Request) {
		queries.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.FormValue("query"), "ebpf_exporter") {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"status":"error","errorType":"execution","error":"scripted failure"}`))
			return
		}
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"Hostname":"gpu-node-0000"},"values":[[1700000000,"1.5"]]}]}}`))
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		rcv.mu.Lock()
		stored := 1000 + 2*rcv.samples
		rcv.mu.Unlock()
		_, _ = w.Write([]byte("# TYPE strata_downsample_lag_seconds gauge\nstrata_downsample_lag_seconds{tier=\"minute\"} 42.5\nstrata_downsample_lag_seconds{tier=\"hour\"} 1800\n" +
			"# TYPE strata_raw_prometheus_tsdb_head_samples_appended_total counter\n" +
			"strata_raw_prometheus_tsdb_head_samples_appended_total{type=\"float\"} " + strconv.Itoa(stored-10) + "\n" +
			"strata_raw_prometheus_tsdb_head_samples_appended_total{type=\"histogram\"} 10\n" +
			"# TYPE prometheus_tsdb_head_samples_appended_total counter\nprometheus_tsdb_head_samples_appended_total 7\n"))
	})
	mux.HandleFunc("/debug/pprof/profile", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("fake profile for " + r.FormValue("seconds") + "s"))
	})
	mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("fake heap profile"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, rcv, &queries
}

func testScenario(t *testing.T) (Scenario, *fakeReceiver, *atomic.Int64) {
	t.Helper()
	dir := t.TempDir()
	srv, rcv, queries := fakeTarget(t, dir)
	ns := &noSleep{}
	return Scenario{
		Name: "fake",
		Load: LoadConfig{
			URL: srv.URL + "/api/v1/write", Series: 1500, BatchSize: 500, Concurrency: 2,
			MaxRequests: 12, Duration: 30 * time.Second, sleep: ns.sleep,
		},
		Repeats:            3,
		PID:                os.Getpid(), // the test process is the server here
		ProcSampleInterval: 10 * time.Millisecond,
		TierDirs:           map[string]string{"raw": dir},
		QueryRanges:        []time.Duration{time.Hour, 24 * time.Hour},
		QueryRepeats:       2,
		CPUProfilePath:     filepath.Join(t.TempDir(), "cpu.pprof"),
		CPUProfileSeconds:  1,
		HeapProfilePath:    filepath.Join(t.TempDir(), "heap.pprof"),
	}, rcv, queries
}

func TestRunScenario(t *testing.T) {
	sc, rcv, queries := testScenario(t)
	rep, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 3 || rep.SchemaVersion != ReportSchemaVersion {
		t.Fatalf("%d runs, schema %d", len(rep.Runs), rep.SchemaVersion)
	}
	if rcv.ooo != 0 {
		t.Fatalf("%d out-of-order samples across repetitions", rcv.ooo)
	}
	// Kernels from 4.5 on give RSS by kind.
	st, _ := os.ReadFile("/proc/self/status")
	hasAnon := bytes.Contains(st, []byte("RssAnon:"))
	var accepted int64
	for i, rr := range rep.Runs {
		accepted += rr.Load.SamplesAccepted
		if rr.Server == nil || rr.Server.PeakRSSBytes <= 0 || rr.Server.RSSPerActiveSeriesBytes <= 0 ||
			rr.Server.SteadyRSSBytes <= 0 || len(rr.Server.RSSTimeline) < 2 {
			t.Fatalf("run %d: no server figures: %+v", i, rr.Server)
		}
		if hasAnon &&
			(rr.Server.SteadyRSSAnonBytes <= 0 || rr.Server.PeakRSSAnonBytes <= 0 || rr.Server.SteadyRSSAnonBytes > rr.Server.SteadyRSSBytes) {
			t.Fatalf("run %d: anonymous RSS steady %g peak %d, want above 0 and within the RSS %g", i,
				rr.Server.SteadyRSSAnonBytes, rr.Server.PeakRSSAnonBytes, rr.Server.SteadyRSSBytes)
		}
		if rr.RollupLagSeconds == nil || *rr.RollupLagSeconds != 1800 {
			t.Fatalf("run %d: rollup lag %v, want the max over tiers, 1800", i, rr.RollupLagSeconds)
		}
		if len(rr.Disk) != 1 || rr.Disk[0].BytesPerSample <= 0 {
			t.Fatalf("run %d: disk %+v", i, rr.Disk)
		}
		// Two stored per sample sent since the scenario began (the counter's
		// start subtracted): half the bytes per stored sample.
		if rr.StoredSamples != 2*accepted || rr.StoredSamplesMetric != storedSampleMetrics[0] ||
			math.Abs(rr.Disk[0].BytesPerStoredSample-rr.Disk[0].BytesPerSample/2) > 1e-9 {
			t.Fatalf("run %d: stored %d (%s) after %d sent, disk %+v", i, rr.StoredSamples, rr.StoredSamplesMetric, accepted, rr.Disk[0])
		}
		if len(rr.Queries) != 2 || rr.Queries[0].Executions != len(DefaultDashboard())*2 {
			t.Fatalf("run %d: queries %+v", i, rr.Queries)
		}
		if rr.Queries[0].Errors != 2 || len(rr.QueryErrors) == 0 {
			t.Fatalf("run %d: the failing panel gave %d errors (%v), want 2", i, rr.Queries[0].Errors, rr.QueryErrors)
		}
	}
	if int64(rcv.samples) != accepted {
		t.Fatalf("receiver stored %d samples, runs accepted %d", rcv.samples, accepted)
	}
	if got, want := queries.Load(), int64(3*2*2*len(DefaultDashboard())); got != want {
		t.Fatalf("target answered %d queries, want %d", got, want)
	}
	s := rep.Summary
	if s.AcceptedSamplesPerSecond.N != 3 || s.AcceptedSamplesPerSecond.Median <= 0 ||
		s.AcceptedSamplesPerSecond.Min > s.AcceptedSamplesPerSecond.Median || s.AcceptedSamplesPerSecond.Max < s.AcceptedSamplesPerSecond.Median {
		t.Fatalf("throughput figure %+v", s.AcceptedSamplesPerSecond)
	}
	if s.RollupLagSeconds.Median != 1800 || len(s.QueryLatency) != 2 || s.DiskBytesPerSample["raw"].N != 3 ||
		s.DiskBytesPerStoredSample["raw"].N != 3 || s.StoredPerSentSample.Median != 2 {
		t.Fatalf("summary %+v", s)
	}
	prof, err := os.ReadFile(sc.CPUProfilePath)
	if err != nil || string(prof) != "fake profile for 1s" {
		t.Fatalf("profile %q, %v", prof, err)
	}
	if heap, err := os.ReadFile(sc.HeapProfilePath); err != nil || string(heap) != "fake heap profile" {
		t.Fatalf("heap profile %q, %v", heap, err)
	}

	// JSON round trip.
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `"password"`) {
		t.Fatal("report JSON holds a password field")
	}
	back, err := ReadReport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalise(back), normalise(rep)) {
		t.Fatalf("JSON round trip changed the report:\n%+v\n%+v", back.Summary, rep.Summary)
	}

	// Markdown and charts.
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Bench report: fake", "| accepted samples/s |", "server CPU-seconds per million samples", "server CPU cores used", "steady-state RSS per active series", "## Server per run", "dashboard latency p99, 1h", "rollup lag", "samples stored per sample sent", "disk bytes per stored sample, raw", "scripted failure"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if hasAnon && !strings.Contains(md.String(), "steady-state anonymous RSS") {
		t.Errorf("markdown lacks the anonymous RSS:\n%s", md.String())
	}
	dir := t.TempDir()
	paths, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 5 { // JSON, markdown, throughput, memory, query latency
		t.Fatalf("files %v", paths)
	}
	saved, err := LoadReport(paths[0])
	if err != nil || !reflect.DeepEqual(normalise(saved), normalise(rep)) {
		t.Fatalf("saved report differs (%v)", err)
	}
	for _, p := range paths[2:] {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("%s is not a PNG (%v)", p, err)
		}
	}
}

// normalise drops what JSON cannot carry (the clock) and monotonic clock
// readings, so reports compare by value.
func normalise(r Report) Report {
	r.Load.Now = nil
	r.Load.sleep = nil
	r.Started = r.Started.Round(0)
	for i := range r.Runs {
		r.Runs[i].Load.Started = r.Runs[i].Load.Started.Round(0).UTC()
	}
	r.Started = r.Started.UTC()
	return r
}

func TestReadReportRejectsOtherSchema(t *testing.T) {
	if _, err := ReadReport(strings.NewReader(`{"schema_version": 99}`)); err == nil {
		t.Fatal("accepted schema version 99")
	}
	if _, err := ReadReport(strings.NewReader(`{`)); err == nil {
		t.Fatal("accepted broken JSON")
	}
}

func TestCompare(t *testing.T) {
	fig := func(v float64) Figure { return Figure{Median: v, Min: v, Max: v, N: 3} }
	a := Report{Name: "prometheus", Summary: Summary{
		AcceptedSamplesPerSecond:    fig(100000),
		CPUSecondsPerMillionSamples: fig(10),
		PeakRSSBytes:                fig(1 << 30),
		RollupLagSeconds:            Figure{}, // not measured on a: no row
		QueryLatency:                []RangeFigure{{Range: "1h", P50Seconds: fig(0.010), P99Seconds: fig(0.1)}},
	}}
	b := Report{Name: "strata", Summary: Summary{
		AcceptedSamplesPerSecond:    fig(200000),
		CPUSecondsPerMillionSamples: fig(20),
		PeakRSSBytes:                fig(1 << 30),
		RollupLagSeconds:            fig(30),
		QueryLatency:                []RangeFigure{{Range: "1h", P50Seconds: fig(0.005), P99Seconds: fig(0.1)}},
	}}
	out := Compare(a, b)
	for _, want := range []string{
		"| figure | prometheus | strata | strata / prometheus | |",
		"| accepted samples/s | 100000 | 200000 | 2.00x | better |",
		"| server CPU-seconds per million samples | 10.00 s | 20.00 s | 2.00x | worse |",
		"| peak RSS | 1.00 GiB | 1.00 GiB | 1.00x | same |",
		"| dashboard latency p50, 1h | 10.0 ms | 5.0 ms | 0.50x | better |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("compare lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rollup lag") {
		t.Errorf("compare shows a figure a did not measure:\n%s", out)
	}

	// Three reports: the last against each of the others; a figure only
	// one baseline measured shows "-" for the other.
	vm := Report{Name: "victoriametrics", Summary: Summary{
		AcceptedSamplesPerSecond: fig(400000),
		PeakRSSBytes:             fig(1 << 29),
	}}
	out = Compare(a, vm, b)
	for _, want := range []string{
		"| figure | prometheus | victoriametrics | strata | strata / prometheus | | strata / victoriametrics | |",
		"| accepted samples/s | 100000 | 400000 | 200000 | 2.00x | better | 0.50x | worse |",
		"| peak RSS | 1.00 GiB | 512.0 MiB | 1.00 GiB | 1.00x | same | 2.00x | worse |",
		"| server CPU-seconds per million samples | 10.00 s | - | 20.00 s | 2.00x | worse | - | |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("three-way compare lacks %q:\n%s", want, out)
		}
	}
}

// TestCompareDashboardOverDifferentData: a receiver that accepted 3x the
// samples answers its dashboard over 3x the data, so Compare does not call
// its latency worse (or better); within 10% it compares as usual.
func TestCompareDashboardOverDifferentData(t *testing.T) {
	fig := func(v float64) Figure { return Figure{Median: v, Min: v, Max: v, N: 1} }
	report := func(name string, accepted int64, p50 float64) Report {
		return Report{Name: name, Runs: []RunResult{{Load: LoadResult{SamplesAccepted: accepted}}}, Summary: Summary{
			AcceptedSamplesPerSecond: fig(float64(accepted) / 20),
			QueryLatency:             []RangeFigure{{Range: "1h", P50Seconds: fig(p50), P99Seconds: fig(p50 * 10)}},
		}}
	}
	prom := report("prometheus", 1_000_000, 0.010)
	out := Compare(prom, report("strata", 3_000_000, 0.030))
	for _, want := range []string{
		"| accepted samples/s | 50000 | 150000 | 3.00x | better |",
		"| dashboard latency p50, 1h | 10.0 ms | 30.0 ms | 3.00x | not comparable: strata held 3.00x the samples |",
		"| dashboard latency p99, 1h | 100.0 ms | 300.0 ms | 3.00x | not comparable: strata held 3.00x the samples |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("compare lacks %q:\n%s", want, out)
		}
	}
	out = Compare(prom, report("strata", 1_050_000, 0.030))
	if want := "| dashboard latency p50, 1h | 10.0 ms | 30.0 ms | 3.00x | worse |"; !strings.Contains(out, want) {
		t.Errorf("compare over the same data lacks %q:\n%s", want, out)
	}
}

func TestQuantileAndFigure(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{nil, 0.5, 0}, {[]float64{3}, 0.99, 3}, {[]float64{1, 2, 3, 4}, 0.5, 2.5},
		{[]float64{5, 1, 3}, 0.5, 3}, {[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99, 9.91},
	} {
		if got := quantile(tc.xs, tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("quantile(%v, %g) = %g, want %g", tc.xs, tc.q, got, tc.want)
		}
	}
	f := figureOf([]float64{7, 1, 4})
	if f != (Figure{Median: 4, Min: 1, Max: 7, N: 3}) {
		t.Fatalf("figure %+v", f)
	}
}

func TestStepFor(t *testing.T) {
	for _, r := range DefaultQueryRanges() {
		step := StepFor(r)
		// The last evaluation, start + k*step, must be the end itself.
		if n := r / step; n*step != r || n != queryPoints {
			t.Errorf("range %s: step %s gives %d points ending %s before the end", r, step, n, r-n*step)
		}
	}
	if got := StepFor(time.Minute); got != 240*time.Millisecond {
		t.Errorf("StepFor(1m) = %s", got)
	}
}

func TestParseRollupLag(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		want   float64
		wantOK bool
	}{
		{"absent", "# TYPE up gauge\nup 1\n", 0, false},
		{"single", "strata_downsample_lag_seconds 12\n", 12, true},
		{"max over tiers", "# TYPE strata_downsample_lag_seconds gauge\nstrata_downsample_lag_seconds{tier=\"minute\"} 61\nstrata_downsample_lag_seconds{tier=\"hour\"} 7\n", 61, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := parseRollupLag(strings.NewReader(tc.in))
			if err != nil || ok != tc.wantOK || got != tc.want {
				t.Fatalf("got %g %v %v, want %g %v", got, ok, err, tc.want, tc.wantOK)
			}
		})
	}
}

func FuzzParseRollupLag(f *testing.F) {
	f.Add("strata_downsample_lag_seconds{tier=\"minute\"} 61\n")
	f.Add("# TYPE strata_downsample_lag_seconds histogram\nstrata_downsample_lag_seconds_bucket{le=\"+Inf\"} 1\n")
	f.Fuzz(func(t *testing.T, s string) {
		lag, ok, err := parseRollupLag(strings.NewReader(s))
		if err != nil && ok {
			t.Fatalf("ok with error %v", err)
		}
		if !ok && lag != 0 {
			t.Fatalf("lag %g without the metric", lag)
		}
	})
}

func TestRunScenarioBadTargets(t *testing.T) {
	sc, _, _ := testScenario(t)
	bad := sc
	bad.PID = 1 << 30
	if _, err := Run(context.Background(), bad); err == nil {
		t.Error("ran against a missing server process")
	}
	bad = sc
	bad.TierDirs = map[string]string{"raw": filepath.Join(t.TempDir(), "missing")}
	if _, err := Run(context.Background(), bad); err == nil {
		t.Error("ran with a missing tier directory")
	}
}
