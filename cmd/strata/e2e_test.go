package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/prometheus/prometheus/storage/remote"
	"golang.org/x/crypto/bcrypt"
)

func TestServeLifecycle(t *testing.T) {
	p := startStrata(t, t.TempDir())
	for path, want := range map[string]int{"/-/healthy": 200, "/-/ready": 200, "/metrics": 200, "/": 200} {
		resp, err := http.Get(p.url(path))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d: %s", path, resp.StatusCode, want, body)
		}
		if path == "/metrics" && !strings.Contains(string(body), "strata_build_info") {
			t.Errorf("/metrics lacks strata_build_info")
		}
	}
	p.stop()
	if !strings.Contains(p.output(), "Strata stopped cleanly") {
		t.Errorf("no clean-stop log line after SIGTERM:\n%s", p.output())
	}
}

// newWriteClient is Prometheus' own remote-write client, as used by its queue manager.
func newWriteClient(t testing.TB, p *strataProc, msg remoteapi.WriteMessageType) remote.WriteClient {
	t.Helper()
	u, err := url.Parse(p.url("/api/v1/write"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := remote.NewWriteClient("e2e", &remote.ClientConfig{
		URL:           &config_util.URL{URL: u},
		Timeout:       model.Duration(30 * time.Second),
		WriteProtoMsg: msg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newAPIClient(t testing.TB, p *strataProc) promv1.API {
	t.Helper()
	c, err := api.NewClient(api.Config{Address: "http://" + p.addr})
	if err != nil {
		t.Fatal(err)
	}
	return promv1.NewAPI(c)
}

type testSeries struct {
	lbls    labels.Labels
	samples []prompb.Sample
	typ     model.MetricType
	help    string
}

func encodeV1(t testing.TB, series []testSeries) []byte {
	t.Helper()
	req := &prompb.WriteRequest{}
	for _, s := range series {
		ts := prompb.TimeSeries{Samples: s.samples}
		s.lbls.Range(func(l labels.Label) { ts.Labels = append(ts.Labels, prompb.Label{Name: l.Name, Value: l.Value}) })
		req.Timeseries = append(req.Timeseries, ts)
		if s.help != "" {
			req.Metadata = append(req.Metadata, prompb.MetricMetadata{
				MetricFamilyName: s.lbls.Get(model.MetricNameLabel),
				Type:             prompb.FromMetadataType(s.typ),
				Help:             s.help,
			})
		}
	}
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, raw)
}

func encodeV2(t testing.TB, series []testSeries) []byte {
	t.Helper()
	st := writev2.NewSymbolTable()
	req := &writev2.Request{}
	for _, s := range series {
		ts := writev2.TimeSeries{LabelsRefs: st.SymbolizeLabels(s.lbls, nil)}
		for _, smp := range s.samples {
			ts.Samples = append(ts.Samples, writev2.Sample{Value: smp.Value, Timestamp: smp.Timestamp})
		}
		ts.Metadata = writev2.Metadata{Type: writev2.FromMetadataType(s.typ), HelpRef: st.Symbolize(s.help)}
		req.Timeseries = append(req.Timeseries, ts)
	}
	req.Symbols = st.Symbols()
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, raw)
}

// TestRemoteWriteAndQueryEndToEnd writes with Prometheus' remote-write client (RW
// 1.0 and 2.0) to a running strata serve and reads back with the official Go
// API client: every value must come back exactly.
func TestRemoteWriteAndQueryEndToEnd(t *testing.T) {
	p := startStrata(t, t.TempDir())
	ctx := context.Background()
	base := time.Now().Add(-5 * time.Minute).Truncate(time.Second)
	ms := func(d time.Duration) int64 { return base.Add(d).UnixMilli() }

	for _, tc := range []struct {
		name   string
		msg    remoteapi.WriteMessageType
		encode func(testing.TB, []testSeries) []byte
	}{
		{"rw1", remoteapi.WriteV1MessageType, encodeV1},
		{"rw2", remoteapi.WriteV2MessageType, encodeV2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			metric := "e2e_requests_total_" + tc.name
			series := []testSeries{
				{
					lbls:    labels.FromStrings("__name__", metric, "job", "vllm", "instance", "a:8000"),
					samples: []prompb.Sample{{Value: 1, Timestamp: ms(0)}, {Value: 2.5, Timestamp: ms(15 * time.Second)}, {Value: 4, Timestamp: ms(30 * time.Second)}},
					typ:     model.MetricTypeCounter, help: "Requests served.",
				},
				{
					lbls:    labels.FromStrings("__name__", metric, "job", "vllm", "instance", "b:8000"),
					samples: []prompb.Sample{{Value: 10, Timestamp: ms(0)}, {Value: 20, Timestamp: ms(15 * time.Second)}, {Value: 30, Timestamp: ms(30 * time.Second)}},
					typ:     model.MetricTypeCounter, help: "Requests served.",
				},
			}
			stats, err := newWriteClient(t, p, tc.msg).Store(ctx, tc.encode(t, series), 0)
			if err != nil {
				t.Fatalf("store: %v", err)
			}
			if tc.msg == remoteapi.WriteV2MessageType && (!stats.Confirmed || stats.Samples != 6) {
				t.Errorf("RW2 written stats = %+v, want 6 samples confirmed", stats)
			}

			client := newAPIClient(t, p)
			v, _, _, err := client.Query(ctx, fmt.Sprintf(`%s{instance="a:8000"}`, metric), base.Add(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			vec, ok := v.(model.Vector)
			if !ok || len(vec) != 1 || vec[0].Value != 4 {
				t.Fatalf("instant query = %v, want one sample of value 4", v)
			}

			v, _, _, err = client.QueryRange(ctx, fmt.Sprintf(`sum(%s)`, metric), promv1.Range{Start: base, End: base.Add(30 * time.Second), Step: 15 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			m, ok := v.(model.Matrix)
			if !ok || len(m) != 1 {
				t.Fatalf("range query = %v, want one series", v)
			}
			want := []model.SampleValue{11, 22.5, 34}
			if len(m[0].Values) != len(want) {
				t.Fatalf("range query points = %v, want %v", m[0].Values, want)
			}
			for i, pt := range m[0].Values {
				if pt.Value != want[i] || !pt.Timestamp.Time().Equal(base.Add(time.Duration(i)*15*time.Second)) {
					t.Errorf("point %d = %v@%v, want %v@%v", i, pt.Value, pt.Timestamp.Time(), want[i], base.Add(time.Duration(i)*15*time.Second))
				}
			}

			sets, _, _, err := client.Series(ctx, []string{metric}, base.Add(-time.Minute), base.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if len(sets) != 2 {
				t.Errorf("series = %v, want 2", sets)
			}
			names, _, _, err := client.LabelNames(ctx, []string{metric}, base.Add(-time.Minute), base.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if len(names) != 3 || names[0] != "__name__" || names[1] != "instance" || names[2] != "job" {
				t.Errorf("label names = %v", names)
			}
			values, _, _, err := client.LabelValues(ctx, "instance", []string{metric}, base.Add(-time.Minute), base.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if len(values) != 2 || values[0] != "a:8000" || values[1] != "b:8000" {
				t.Errorf("label values = %v", values)
			}
			md, err := client.Metadata(ctx, metric, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := md[metric]; len(got) != 1 || got[0].Type != promv1.MetricTypeCounter || got[0].Help != "Requests served." {
				t.Errorf("metadata = %+v", md)
			}
		})
	}
}

// TestCrashKill9 kills strata with SIGKILL in the middle of a bounded write load,
// restarts it on the same directory and checks that every sample acknowledged
// with a 2xx is queryable.
func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped under -short")
	}
	dir := t.TempDir()
	p := startStrata(t, dir)
	client := newWriteClient(t, p, remoteapi.WriteV1MessageType)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const nSeries = 50
	start := time.Now().Add(-2 * time.Minute).Truncate(time.Second)
	acked := map[string][]float64{} // series name -> values acknowledged, value == step index
	type result struct {
		step int
		err  error
	}
	results := make(chan result)
	go func() {
		defer close(results)
		for step := 0; step < 100_000 && ctx.Err() == nil; step++ {
			var series []testSeries
			for s := range nSeries {
				series = append(series, testSeries{
					lbls:    labels.FromStrings("__name__", "crash_test_value", "series", fmt.Sprint(s)),
					samples: []prompb.Sample{{Value: float64(step), Timestamp: start.Add(time.Duration(step) * 10 * time.Millisecond).UnixMilli()}},
				})
			}
			_, err := client.Store(ctx, encodeV1(t, series), 0)
			results <- result{step, err}
			if err != nil {
				return
			}
		}
	}()
	killed := false
	lastAcked := -1
	for r := range results {
		if r.err != nil {
			if !killed {
				t.Fatalf("store before the kill: %v", r.err)
			}
			continue
		}
		lastAcked = r.step
		for s := range nSeries {
			acked[fmt.Sprint(s)] = append(acked[fmt.Sprint(s)], float64(r.step))
		}
		if !killed && r.step == 300 {
			// Kill while the sender goroutine is already sending the next request.
			go p.kill()
			killed = true
		}
	}
	if !killed || lastAcked < 300 {
		t.Fatalf("load ended before the kill (last acked step %d)", lastAcked)
	}
	t.Logf("killed strata after %d acknowledged requests", lastAcked+1)

	p2 := startStrata(t, dir)
	api := newAPIClient(t, p2)
	end := start.Add(time.Duration(lastAcked+10) * 10 * time.Millisecond)
	v, _, _, err := api.Query(context.Background(), `crash_test_value[10m]`, end)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		t.Fatalf("query returned %T", v)
	}
	got := map[string]map[float64]bool{}
	for _, s := range m {
		vals := map[float64]bool{}
		for _, pt := range s.Values {
			vals[float64(pt.Value)] = true
		}
		got[string(s.Metric["series"])] = vals
	}
	missing := 0
	for name, vals := range acked {
		for _, v := range vals {
			if !got[name][v] {
				missing++
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged samples missing after kill -9 and restart", missing)
	}
}

// TestWebConfigAuth: with --web.config.file, every endpoint needs the password.
func TestWebConfigAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	webCfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webCfg, []byte("basic_auth_users:\n  oncall: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrataAuth(t, filepath.Join(dir, "data"), "oncall", "s3cret", "--web.config.file="+webCfg)
	for _, path := range []string{"/api/v1/write", "/api/v1/query?query=up", "/metrics", "/api/v1/labels", "/api/v1/diagnoses/d-0/feedback"} {
		method := http.MethodGet
		if path == "/api/v1/write" || strings.HasSuffix(path, "/feedback") {
			method = http.MethodPost
		}
		for _, tc := range []struct {
			user, pass string
			want       int
		}{{"", "", 401}, {"oncall", "wrong", 401}} {
			req, _ := http.NewRequest(method, p.url(path), strings.NewReader(""))
			if tc.user != "" {
				req.SetBasicAuth(tc.user, tc.pass)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s as %q = %d, want %d", method, path, tc.user, resp.StatusCode, tc.want)
			}
		}
		req, _ := http.NewRequest(method, p.url(path), strings.NewReader(""))
		req.SetBasicAuth("oncall", "s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("%s %s with the right password = 401", method, path)
		}
	}
}

// TestTornWALTail: a WAL whose last record was cut short (a crash in the
// middle of a write) is repaired on start, not fatal, and the samples written
// well before the torn record are still there.
func TestTornWALTail(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped under -short")
	}
	dir := t.TempDir()
	p := startStrata(t, dir)
	client := newWriteClient(t, p, remoteapi.WriteV1MessageType)
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	const requests = 100
	for step := range requests {
		series := []testSeries{{
			lbls:    labels.FromStrings("__name__", "torn_wal_value"),
			samples: []prompb.Sample{{Value: float64(step), Timestamp: start.Add(time.Duration(step) * 100 * time.Millisecond).UnixMilli()}},
		}}
		if _, err := client.Store(context.Background(), encodeV1(t, series), 0); err != nil {
			t.Fatal(err)
		}
	}
	p.kill()

	segs, err := filepath.Glob(filepath.Join(dir, "raw", "wal", "0*"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no WAL segment in %s: %v", dir, err)
	}
	last := segs[len(segs)-1]
	st, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < 64 {
		t.Fatalf("WAL segment %s has only %d bytes", last, st.Size())
	}
	if err := os.Truncate(last, st.Size()-7); err != nil {
		t.Fatal(err)
	}

	p2 := startStrata(t, dir)
	v, _, _, err := newAPIClient(t, p2).Query(context.Background(), `count_over_time(torn_wal_value[10m])`, start.Add(requests*100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	vec, ok := v.(model.Vector)
	// The torn record may have held the last request's sample (or a
	// self-scrape): everything before it must be there.
	if !ok || len(vec) != 1 || vec[0].Value < requests-1 {
		t.Fatalf("after repairing a torn WAL tail: %v samples, want at least %d", v, requests-1)
	}
	if !strings.Contains(p2.output(), "WAL") {
		t.Logf("server log:\n%s", p2.output())
	}
}

// TestOperatorRuleFiles: rule files from the configuration are evaluated,
// recording and alerting rules alike, without an Alertmanager.
func TestOperatorRuleFiles(t *testing.T) {
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "ops.rules.yml")
	rulesYAML := `groups:
  - name: ops
    interval: 1s
    rules:
      - record: ops:one
        expr: vector(1)
      - alert: AlwaysFiring
        expr: vector(1) > 0
        labels: {severity: none}
`
	if err := os.WriteFile(rulesPath, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(cfgPath, []byte("rules:\n  canonical: false\n  files: ["+rulesPath+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, filepath.Join(dir, "data"), "--config.file="+cfgPath)
	client := newAPIClient(t, p)
	deadline := time.Now().Add(30 * time.Second)
	for _, q := range []string{`ops:one`, `ALERTS{alertname="AlwaysFiring"}`} {
		for {
			v, _, _, err := client.Query(context.Background(), q, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if vec, ok := v.(model.Vector); ok && len(vec) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never appeared:\n%s", q, p.output())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
