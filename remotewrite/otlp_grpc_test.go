package remotewrite

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/storage"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	grpcstatus "google.golang.org/grpc/status"
)

// otlpGRPCClient serves o over gRPC on a loopback port and returns the
// client the Collector's otlp exporter uses (pdata's), sending gzip as the
// exporter does by default.
func otlpGRPCClient(t *testing.T, o *OTLPHandler) pmetricotlp.GRPCClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	o.RegisterGRPC(s)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.UseCompressor(gzip.Name)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return pmetricotlp.NewGRPCClient(cc)
}

// TestOTLPGRPC: an export over gRPC is written as one over HTTP is, with
// its partial success in the response; one nothing of which can be written
// is INVALID_ARGUMENT (not retried); one refused under memory pressure is
// RESOURCE_EXHAUSTED with a RetryInfo (retried after its delay).
func TestOTLPGRPC(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxHeapBytes = 1 << 20
	e := newTestEnv(t, cfg)
	heap := uint64(0)
	e.h.liveHeap = func() uint64 { return heap }
	o := newOTLP(t, e.h, e.reg)
	client := otlpGRPCClient(t, o)
	ctx := context.Background()

	resp, err := client.Export(ctx, pmetricotlp.NewExportRequestFromMetrics(otlpMetrics(true)))
	if err != nil {
		t.Fatal(err)
	}
	if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 1 || !strings.Contains(ps.ErrorMessage(), `"vllm.deltas"`) {
		t.Errorf("partial success %d %q, want the delta sum refused", ps.RejectedDataPoints(), ps.ErrorMessage())
	}
	const id = `instance="pod-a", job="vllm"`
	if got := e.read(t, "vllm_requests_total"); len(got[`{__name__="vllm_requests_total", `+id+`}`]) != 3 {
		t.Errorf("vllm_requests_total: %v, want the counter's samples", got)
	}
	if got := e.read(t, "vllm_ttft_seconds"); len(got) != 1 {
		t.Errorf("vllm_ttft_seconds: %v, want the exponential histogram", got)
	}

	_, err = client.Export(ctx, pmetricotlp.NewExportRequestFromMetrics(onlyDelta()))
	if st := grpcstatus.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `"deltas"`) || len(st.Details()) != 0 {
		t.Errorf("nothing writable: %v, want INVALID_ARGUMENT naming the metric, without RetryInfo", err)
	}

	heap = 2 << 20
	_, err = client.Export(ctx, pmetricotlp.NewExportRequestFromMetrics(otlpMetrics(false)))
	st := grpcstatus.Convert(err)
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if st.Code() != codes.ResourceExhausted || retry == nil || retry.GetRetryDelay().AsDuration() < time.Second {
		t.Errorf("under memory pressure: %v (details %v), want RESOURCE_EXHAUSTED with a RetryInfo of a second or more", err, st.Details())
	}
	for code, want := range map[string]float64{"200": 1, "400": 1, "429": 1} {
		if n := testutil.ToFloat64(e.h.m.requests.WithLabelValues(versionOTLPGRPC, code)); n != want {
			t.Errorf("strata_remotewrite_requests_total{version=%q,code=%q} = %v, want %v", versionOTLPGRPC, code, n, want)
		}
	}
}

// panicAppendable panics when asked for an appender, as a bug below the
// receiver would.
type panicAppendable struct{}

func (panicAppendable) AppenderV2(context.Context) storage.AppenderV2 { panic("boom") }

// TestOTLPGRPCPanic: a panic while handling an export (gRPC would let it
// end the process) becomes an INTERNAL status, and the server goes on
// serving.
func TestOTLPGRPCPanic(t *testing.T) {
	h, err := NewHandler(DefaultConfig(), panicAppendable{}, NewMetadataStore(0), slog.New(slog.DiscardHandler), prometheus.NewRegistry(), func() time.Time { return base })
	if err != nil {
		t.Fatal(err)
	}
	client := otlpGRPCClient(t, newOTLP(t, h, prometheus.NewRegistry()))
	for range 2 {
		_, err := client.Export(context.Background(), pmetricotlp.NewExportRequestFromMetrics(otlpMetrics(false)))
		if st := grpcstatus.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "boom") {
			t.Fatalf("export: %v, want INTERNAL naming the panic", err)
		}
	}
}
