package remotewrite

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// TestOTLPFromTheGoSDK: OpenTelemetry's own Go SDK and its OTLP/HTTP
// exporter (gzip on, as deployments set it) export to the receiver, as an
// instrumented service would: the export succeeds, and the counter,
// gauge and histogram are stored under Prometheus' OTLP names with the
// resource's service as job and instance.
func TestOTLPFromTheGoSDK(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	e.h.now = time.Now // the SDK stamps points with the wall clock
	o := newOTLP(t, e.h, e.reg)
	srv := httptest.NewServer(o)
	defer srv.Close()

	ctx := context.Background()
	exp, err := otlpmetrichttp.New(ctx,
		otlpmetrichttp.WithEndpointURL(srv.URL+"/api/v1/otlp/v1/metrics"),
		otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "router"), attribute.String("service.instance.id", "router-0"))
	reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader))
	meter := mp.Meter("strata-test")
	requests, err := meter.Int64Counter("router.requests", metric.WithUnit("{request}"))
	if err != nil {
		t.Fatal(err)
	}
	latency, err := meter.Float64Histogram("router.latency", metric.WithUnit("s"))
	if err != nil {
		t.Fatal(err)
	}
	inflight, err := meter.Int64Gauge("router.inflight")
	if err != nil {
		t.Fatal(err)
	}
	model1 := attribute.String("model", "llama")
	requests.Add(ctx, 3, metric.WithAttributes(model1))
	latency.Record(ctx, 0.2, metric.WithAttributes(model1))
	latency.Record(ctx, 1.5, metric.WithAttributes(model1))
	inflight.Record(ctx, 4, metric.WithAttributes(model1))
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatalf("the SDK's export failed: %v", err)
	}
	if err := mp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	const id = `instance="router-0", job="router", model="llama"`
	if got := e.read(t, "router_requests_total"); len(got[`{__name__="router_requests_total", `+id+`}`]) == 0 {
		t.Errorf("router_requests_total: %v", got)
	}
	if got := e.read(t, "router_inflight"); len(got[`{__name__="router_inflight", `+id+`}`]) == 0 {
		t.Errorf("router_inflight: %v", got)
	}
	got := e.read(t, "router_latency_seconds_count")
	if pts := got[`{__name__="router_latency_seconds_count", `+id+`}`]; len(pts) == 0 || pts[len(pts)-1].v != 2 {
		t.Errorf("router_latency_seconds_count: %v, want 2", got)
	}
	buckets := e.read(t, "router_latency_seconds_bucket")
	if len(buckets) < 10 {
		t.Errorf("router_latency_seconds_bucket: %d series, want the SDK's default boundaries", len(buckets))
	}
	for ls := range buckets {
		if !strings.Contains(ls, `le="`) {
			t.Errorf("bucket series without le: %s", ls)
		}
	}
	if m := e.h.meta.Metadata("router_requests_total")["router_requests_total"]; len(m) != 1 || m[0].Type != model.MetricTypeCounter {
		t.Errorf("metadata of router_requests_total: %+v", m)
	}
}
