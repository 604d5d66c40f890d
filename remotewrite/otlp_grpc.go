package remotewrite

import (
	"context"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	_ "google.golang.org/grpc/encoding/gzip" // OTLP exporters compress with gzip by default
)

// versionOTLPGRPC is the version label of the request metrics for OTLP
// over gRPC (their code label is the HTTP status the same refusal gets
// over HTTP).
const versionOTLPGRPC = "otlp_grpc"

// RegisterGRPC registers the receiver as OTLP's metrics service
// (opentelemetry.proto.collector.metrics.v1.MetricsService/Export) on s:
// what an OpenTelemetry SDK's or Collector's `otlp` exporter sends by
// default, where Prometheus serves OTLP over HTTP only. An export takes the
// same path as over HTTP (admission, time window, delta conversion,
// translation, write) and gets the same answers, as gRPC statuses (OTLP's
// mapping): partial success in the response, INVALID_ARGUMENT for a request
// nothing of which could be written, RESOURCE_EXHAUSTED with RetryInfo
// under overload (retried) and without it for a request too large (not
// retried), UNAVAILABLE with RetryInfo when storage fails.
//
// gRPC decodes a request before the receiver sees it, so s should bound a
// message's size (grpc.MaxRecvMsgSize; cmd/strata sets it to
// max_decompressed_bytes), and the admission reserves max_body_bytes of
// the in-flight bytes for each request, as for an HTTP body without a
// Content-Length.
func (o *OTLPHandler) RegisterGRPC(s *grpc.Server) {
	pmetricotlp.RegisterGRPCServer(s, &otlpGRPC{o: o})
}

type otlpGRPC struct {
	pmetricotlp.UnimplementedGRPCServer
	o *OTLPHandler
}

func (g *otlpGRPC) Export(ctx context.Context, req pmetricotlp.ExportRequest) (resp pmetricotlp.ExportResponse, err error) {
	o, h := g.o, g.o.h
	start := h.now()
	code := http.StatusOK
	defer func() {
		// gRPC does not recover a handler's panic: it would end the
		// process. The translation is third-party code fed by senders.
		if p := recover(); p != nil {
			h.logger.Error("OTLP gRPC export panicked", "panic", p, "stack", string(debug.Stack()))
			code = http.StatusInternalServerError
			resp, err = pmetricotlp.ExportResponse{}, grpcstatus.Errorf(codes.Internal, "internal error handling the export: %v", p)
		}
		h.m.duration.WithLabelValues(versionOTLPGRPC).Observe(h.now().Sub(start).Seconds())
		h.m.requests.WithLabelValues(versionOTLPGRPC, strconv.Itoa(code)).Inc()
	}()
	refuse := func(e *httpError) (pmetricotlp.ExportResponse, error) {
		code = e.code
		st := o.refusal(e.code, e.reason, e.err)
		if retryable(e.code) {
			delay := time.Duration(h.retryAfterSeconds()) * time.Second
			if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err == nil {
				st = d
			}
		}
		return pmetricotlp.ExportResponse{}, st.Err()
	}

	adm, e := h.admitBody(-1)
	if e != nil {
		return refuse(e)
	}
	defer adm.release()
	if !h.acquire(ctx) {
		if ctx.Err() != nil {
			return refuse(&httpError{code: http.StatusServiceUnavailable, reason: "canceled", err: ctx.Err()})
		}
		return refuse(&httpError{code: http.StatusTooManyRequests, reason: ReasonQueueTimeout, err: queueTimeoutError(h)})
	}
	defer func() { <-h.active }()
	bufs := h.pool.Get().(*requestState)
	defer h.pool.Put(bufs)
	resp, e = o.export(ctx, req.Metrics(), &bufs.ws)
	if e != nil {
		return refuse(e)
	}
	return resp, nil
}
