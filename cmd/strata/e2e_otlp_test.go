package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
)

// TestOTLPEndToEnd: an OTLP/HTTP export, as an OpenTelemetry collector's
// otlphttp exporter sends it, to a running strata serve whose otlp:
// section promotes a resource attribute: the series answer PromQL with
// Prometheus' OTLP names and labels (but the catalogue's own names, which
// the translator would change), and their metadata is served. With
// --remote-write.otlp-delta-to-cumulative a delta counter's points arrive
// as its running total.
func TestOTLPEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(cfg, []byte("otlp:\n  promote_resource_attributes: [k8s.pod.name]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, filepath.Join(dir, "data"), "--config.file="+cfg, "--remote-write.otlp-delta-to-cumulative")
	now := time.Now().Truncate(time.Second)

	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "vllm")
	rm.Resource().Attributes().PutStr("service.instance.id", "10.0.0.7:8000")
	rm.Resource().Attributes().PutStr("k8s.pod.name", "vllm-0")
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("vllm.num_requests.waiting")
	m.SetUnit("{request}")
	m.SetDescription("Requests waiting to be scheduled.")
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.NewTimestampFromTime(now))
	dp.SetIntValue(7)
	// A dcgm-exporter counter without _total, as a Collector's prometheus
	// receiver hands it over: Prometheus' translator would add _total, and
	// the canonical rules would not find it.
	m = rm.ScopeMetrics().At(0).Metrics().AppendEmpty()
	m.SetName("DCGM_FI_DEV_POWER_VIOLATION")
	sum := m.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp = sum.DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.NewTimestampFromTime(now))
	dp.SetIntValue(1234)
	// A delta counter, as an SDK preferring delta temporality exports it:
	// two intervals of one stream.
	m = rm.ScopeMetrics().At(0).Metrics().AppendEmpty()
	m.SetName("vllm.prompt_tokens")
	sum = m.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for i, v := range []int64{5, 3} {
		dp = sum.DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Duration(i-2) * 10 * time.Second)))
		dp.SetTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Duration(i-1) * 10 * time.Second)))
		dp.SetIntValue(v)
	}
	body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, p.url("/api/v1/otlp/v1/metrics"), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-protobuf" {
		t.Fatalf("export: %s (%s), want 200 with a protobuf response", resp.Status, resp.Header.Get("Content-Type"))
	}

	client := newAPIClient(t, p)
	v, _, _, err := client.Query(context.Background(), `vllm_num_requests_waiting{job="vllm", instance="10.0.0.7:8000", k8s_pod_name="vllm-0"}`, now)
	if err != nil {
		t.Fatal(err)
	}
	if vec, ok := v.(model.Vector); !ok || len(vec) != 1 || vec[0].Value != 7 {
		t.Fatalf("query = %v, want the exported 7 with the promoted k8s_pod_name", v)
	}
	v, _, _, err = client.Query(context.Background(), `DCGM_FI_DEV_POWER_VIOLATION`, now)
	if err != nil {
		t.Fatal(err)
	}
	if vec, ok := v.(model.Vector); !ok || len(vec) != 1 || vec[0].Value != 1234 {
		t.Errorf("DCGM_FI_DEV_POWER_VIOLATION = %v, want the counter under dcgm-exporter's name", v)
	}
	v, _, _, err = client.Query(context.Background(), `vllm_prompt_tokens_total`, now)
	if err != nil {
		t.Fatal(err)
	}
	if vec, ok := v.(model.Vector); !ok || len(vec) != 1 || vec[0].Value != 8 {
		t.Errorf("vllm_prompt_tokens_total = %v, want the deltas' running total 8", v)
	}
	meta, err := client.Metadata(context.Background(), "vllm_num_requests_waiting", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := meta["vllm_num_requests_waiting"]; len(got) != 1 || got[0].Type != promv1.MetricTypeGauge || got[0].Help != "Requests waiting to be scheduled." {
		t.Errorf("metadata = %+v, want the gauge and its description", meta)
	}
	resp, err = http.Get(p.url("/metrics")) //nolint:noctx // test client of a loopback server
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`strata_remotewrite_requests_total{code="200",version="otlp"} 1`, "strata_otlp_delta_streams 1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestOTLPGRPCBasicAuth: with a web configuration that lists users, the
// OTLP gRPC endpoint, like the HTTP ones, needs the password, sent as the
// "authorization" metadata (the Collector's basicauth extension): without
// it, with a wrong one or for an unknown user the export is refused as
// Unauthenticated and nothing is written. The file is read at each request:
// once it lists no users, no credentials are asked.
func TestOTLPGRPCBasicAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	webCfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webCfg, []byte("basic_auth_users:\n  collector: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrataAuth(t, filepath.Join(dir, "data"), "collector", "s3cret", "--web.config.file="+webCfg,
		"--remote-write.otlp-grpc-listen-address=127.0.0.1:0")
	m := otlpGRPCStartedRe.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("strata did not log its OTLP gRPC address:\n%s", p.output())
	}
	cc, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	now := time.Now().Truncate(time.Second)
	export := func(auth string, v int64) error {
		md := pmetric.NewMetrics()
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "vllm")
		m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		m.SetName("auth.test.value")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Duration(v) * time.Second)))
		dp.SetIntValue(v)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if auth != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		}
		_, err := pmetricotlp.NewGRPCClient(cc).Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md))
		return err
	}
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, tc := range []struct{ name, auth string }{
		{"none", ""},
		{"wrong password", basic("collector", "wrong")},
		{"unknown user", basic("nobody", "s3cret")},
		{"not basic", "Bearer s3cret"},
	} {
		if err := export(tc.auth, 1); grpcstatus.Code(err) != codes.Unauthenticated {
			t.Errorf("export with %s: %v, want Unauthenticated", tc.name, err)
		}
	}
	// Twice: the second is answered from the cache of checks.
	for range 2 {
		if err := export(basic("collector", "s3cret"), 2); err != nil {
			t.Fatalf("export with the password: %v", err)
		}
	}
	if err := os.WriteFile(webCfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := export("", 3); err != nil {
		t.Fatalf("export without users configured: %v", err)
	}

	r, _, _, err := newAPIClient(t, p).QueryRange(context.Background(), `auth_test_value`, promv1.Range{Start: now, End: now.Add(5 * time.Second), Step: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	if mat, ok := r.(model.Matrix); ok && len(mat) == 1 {
		for _, s := range mat[0].Values {
			if len(got) == 0 || got[len(got)-1] != float64(s.Value) {
				got = append(got, float64(s.Value))
			}
		}
	}
	if !slices.Equal(got, []float64{2, 3}) {
		t.Errorf("stored values %v (query %v), want those of the authorised exports, 2 and 3", got, r)
	}
}

var otlpGRPCStartedRe = regexp.MustCompile(`msg="OTLP gRPC receiver started" address=(\S+)`)

// TestOTLPGRPCEndToEnd: with --remote-write.otlp-grpc-listen-address, a
// running strata serve takes an export over OTLP/gRPC, gzipped, from the
// client the Collector's otlp exporter uses, and answers its series
// through PromQL.
func TestOTLPGRPCEndToEnd(t *testing.T) {
	p := startStrata(t, filepath.Join(t.TempDir(), "data"), "--remote-write.otlp-grpc-listen-address=127.0.0.1:0")
	m := otlpGRPCStartedRe.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("strata did not log its OTLP gRPC address:\n%s", p.output())
	}
	cc, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.UseCompressor(gzip.Name)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	now := time.Now().Truncate(time.Second)
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "vllm")
	rm.Resource().Attributes().PutStr("service.instance.id", "10.0.0.8:8000")
	m2 := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m2.SetName("vllm.num_requests.running")
	dp := m2.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(pcommon.NewTimestampFromTime(now))
	dp.SetIntValue(3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := pmetricotlp.NewGRPCClient(cc).Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md))
	if err != nil {
		t.Fatal(err)
	}
	if n := resp.PartialSuccess().RejectedDataPoints(); n != 0 {
		t.Fatalf("%d refused: %s", n, resp.PartialSuccess().ErrorMessage())
	}
	v, _, _, err := newAPIClient(t, p).Query(context.Background(), `vllm_num_requests_running{job="vllm", instance="10.0.0.8:8000"}`, now)
	if err != nil {
		t.Fatal(err)
	}
	if vec, ok := v.(model.Vector); !ok || len(vec) != 1 || vec[0].Value != 3 {
		t.Fatalf("query = %v, want the exported 3", v)
	}
}
