package remotewrite

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/grpc"
)

// TestOTLPFromTheGoSDK: OpenTelemetry's own Go SDK and its OTLP
// exporters, over HTTP and over gRPC (gzip on, as deployments set it),
// export to the receiver as an instrumented service would: the export
// succeeds, and the counter, gauge and histogram are stored under
// Prometheus' OTLP names with the resource's service as job and instance.
func TestOTLPFromTheGoSDK(t *testing.T) {
	for _, transport := range []string{"http", "grpc"} {
		t.Run(transport, func(t *testing.T) {
			e := newTestEnv(t, DefaultConfig())
			e.h.now = time.Now // the SDK stamps points with the wall clock
			o := newOTLP(t, e.h, e.reg)
			mp := sdkProvider(t, sdkExporter(t, o, transport, nil))
			ctx := context.Background()
			requests, latency, inflight := sdkInstruments(t, mp)
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
		})
	}
}

// TestOTLPDeltaFromTheGoSDK: the Go SDK set to delta temporality (as a
// deployment preferring deltas sets it) exports three collections over
// gRPC to a receiver converting deltas: the counter and the histogram are
// stored as their running totals, as a cumulative SDK would have sent
// them.
func TestOTLPDeltaFromTheGoSDK(t *testing.T) {
	e := newTestEnv(t, DefaultConfig())
	e.h.now = time.Now
	o := newOTLP(t, e.h, e.reg, func(oc *OTLPConfig) {
		oc.DeltaToCumulative, oc.DeltaMaxStreams, oc.DeltaMaxStale = true, 100, 5*time.Minute
	})
	delta := func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.DeltaTemporality }
	mp := sdkProvider(t, sdkExporter(t, o, "grpc", delta))
	ctx := context.Background()
	requests, latency, _ := sdkInstruments(t, mp)
	model1 := attribute.String("model", "llama")
	for _, n := range []int64{3, 4, 5} {
		requests.Add(ctx, n, metric.WithAttributes(model1))
		latency.Record(ctx, 0.2, metric.WithAttributes(model1))
		if err := mp.ForceFlush(ctx); err != nil {
			t.Fatalf("the SDK's export failed: %v", err)
		}
		time.Sleep(2 * time.Millisecond) // each collection its own millisecond
	}
	if err := mp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	const id = `instance="router-0", job="router", model="llama"`
	last := func(name string) float64 {
		t.Helper()
		pts := e.read(t, name)[`{__name__="`+name+`", `+id+`}`]
		if len(pts) == 0 {
			t.Fatalf("%s: not stored", name)
		}
		return pts[len(pts)-1].v
	}
	if got := last("router_requests_total"); got != 12 {
		t.Errorf("router_requests_total ends at %v, want the running total 12", got)
	}
	if got := last("router_latency_seconds_count"); got != 3 {
		t.Errorf("router_latency_seconds_count ends at %v, want 3", got)
	}
}

// sdkExporter is the Go SDK's OTLP metric exporter over transport ("http"
// or "grpc", gzipped) to o, served on a loopback port; temporality, when
// set, chooses each instrument's temporality.
func sdkExporter(t *testing.T, o *OTLPHandler, transport string, temporality sdkmetric.TemporalitySelector) sdkmetric.Exporter {
	t.Helper()
	ctx := context.Background()
	var (
		exp sdkmetric.Exporter
		err error
	)
	switch transport {
	case "http":
		srv := httptest.NewServer(o)
		t.Cleanup(srv.Close)
		opts := []otlpmetrichttp.Option{
			otlpmetrichttp.WithEndpointURL(srv.URL + "/api/v1/otlp/v1/metrics"),
			otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression),
		}
		if temporality != nil {
			opts = append(opts, otlpmetrichttp.WithTemporalitySelector(temporality))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	case "grpc":
		ln, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			t.Fatal(lerr)
		}
		s := grpc.NewServer()
		o.RegisterGRPC(s)
		go func() { _ = s.Serve(ln) }()
		t.Cleanup(s.Stop)
		opts := []otlpmetricgrpc.Option{
			otlpmetricgrpc.WithEndpoint(ln.Addr().String()),
			otlpmetricgrpc.WithInsecure(),
			otlpmetricgrpc.WithCompressor("gzip"),
		}
		if temporality != nil {
			opts = append(opts, otlpmetricgrpc.WithTemporalitySelector(temporality))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

// sdkProvider is a meter provider of a "router" service exporting through
// exp when flushed (its periodic export an hour away).
func sdkProvider(t *testing.T, exp sdkmetric.Exporter) *sdkmetric.MeterProvider {
	t.Helper()
	res := resource.NewSchemaless(attribute.String("service.name", "router"), attribute.String("service.instance.id", "router-0"))
	reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))
	return sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader))
}

// sdkInstruments are a router's request counter, latency histogram and
// in-flight gauge.
func sdkInstruments(t *testing.T, mp *sdkmetric.MeterProvider) (metric.Int64Counter, metric.Float64Histogram, metric.Int64Gauge) {
	t.Helper()
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
	return requests, latency, inflight
}
