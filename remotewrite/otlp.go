package remotewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	otlpconv "github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// versionOTLP is the version label of the receiver's request metrics
// (strata_remotewrite_requests_total, _request_duration_seconds) for OTLP.
const versionOTLP = "otlp"

// Rejection reasons of the OTLP receiver: a metric the translator refused;
// a request whose translation passed its memory budget.
const (
	reasonUntranslated       = "otlp_untranslated"
	reasonTranslatedTooLarge = "otlp_translated_too_large"
)

// errOverBudget stops the translation of a request past its budget.
var errOverBudget = errors.New("the translated request is over its memory budget")

// OTLP/HTTP content types (the OTLP specification's binary and JSON
// encodings).
const (
	otlpProtobuf = "application/x-protobuf"
	otlpJSON     = "application/json"
)

// OTLPHandler receives OpenTelemetry metrics over OTLP/HTTP (POST
// /api/v1/otlp/v1/metrics, as Prometheus serves it). Prometheus' own
// translator turns them into series (names, units and suffixes, resource
// attributes into target_info and promoted labels, histograms as classic
// or native ones), and from there they take the remote-write path: the
// same admission (429 with Retry-After under overload or memory pressure),
// body limits, label limits, series cache, metadata store and appends
// into the raw tier, so the rollups and the diagnosis engine see them as
// they see remote write. Delta temporality is refused per metric (as
// Prometheus does without its delta feature flags), or converted to
// cumulative in memory when OTLPConfig.DeltaToCumulative asks (as
// Prometheus' otlp-deltatocumulative feature does; see deltaConverter).
//
// Data points older than maxAge (the raw tier's retention) or further
// ahead than the future-skew limit are refused before translation, unlike
// Prometheus: the translator writes a target_info sample every half
// lookback delta from a resource's earliest point to its latest, so one
// point stamped 0 (unset) beside a current one would make millions.
//
// Replies follow the OTLP/HTTP specification: 200 with an
// ExportMetricsServiceResponse in the request's encoding, whose
// partial_success counts the samples refused (and one for each metric
// that could not be translated) and names the first reasons; 400 with a
// google.rpc.Status when nothing could be written because the request was
// bad; 429 and 503 (retryable, with Retry-After) under overload or a
// storage failure; 413 and 415 for a body too large or of an unsupported
// type or encoding.
type OTLPHandler struct {
	h          *Handler
	maxAge     time.Duration
	names      map[string]string
	settings   otlpconv.Settings
	converters sync.Pool // *otlpconv.PrometheusConverter
	collectors sync.Pool // *otlpCollector
	warnings   *prometheus.CounterVec
	delta      *deltaConverter // nil: delta temporality refused
}

// OTLPConfig configures an OTLPHandler.
type OTLPConfig struct {
	// Translation is Prometheus' otlp: configuration section (translation
	// strategy, promoted resource attributes, ...).
	Translation config.OTLPConfig
	// LookbackDelta is the query lookback delta, which spaces the
	// target_info samples as Prometheus spaces them.
	LookbackDelta time.Duration
	// MaxAge: data points older than this are refused (0: none are).
	MaxAge time.Duration
	// Names maps a series name the translation makes to the name stored
	// instead: cmd/strata maps what Prometheus' translator makes of the
	// names its catalogue knows (a dcgm-exporter counter without _total
	// gains one) back to the names their exporters expose, which the
	// canonical rules and the diagnosis engine read.
	Names map[string]string
	// DeltaToCumulative converts sums and histograms of delta temporality
	// to cumulative ones in memory, tracking at most DeltaMaxStreams
	// streams and forgetting one without a point for DeltaMaxStale; when
	// false they are refused per metric.
	DeltaToCumulative bool
	DeltaMaxStreams   int
	DeltaMaxStale     time.Duration
}

// NewOTLPHandler returns an OTLP receiver that writes through h. Close
// stops it.
func NewOTLPHandler(h *Handler, oc OTLPConfig, reg prometheus.Registerer) (*OTLPHandler, error) {
	var delta *deltaConverter
	if oc.DeltaToCumulative {
		var err error
		if delta, err = newDeltaConverter(oc.DeltaMaxStreams, oc.DeltaMaxStale); err != nil {
			return nil, err
		}
		if err := reg.Register(delta); err != nil {
			_ = delta.close()
			return nil, err
		}
	}
	f := promauto.With(reg)
	cfg := oc.Translation
	o := &OTLPHandler{
		delta:  delta,
		h:      h,
		maxAge: oc.MaxAge,
		names:  oc.Names,
		settings: otlpconv.Settings{
			AddMetricSuffixes:                    cfg.TranslationStrategy.ShouldAddSuffixes(),
			AllowUTF8:                            !cfg.TranslationStrategy.ShouldEscape(),
			PromoteResourceAttributes:            otlpconv.NewPromoteResourceAttributes(cfg),
			KeepIdentifyingResourceAttributes:    cfg.KeepIdentifyingResourceAttributes,
			ConvertHistogramsToNHCB:              cfg.ConvertHistogramsToNHCB,
			PromoteScopeMetadata:                 cfg.PromoteScopeMetadata,
			LookbackDelta:                        oc.LookbackDelta,
			LabelNameUnderscoreSanitization:      cfg.LabelNameUnderscoreSanitization,
			LabelNamePreserveMultipleUnderscores: cfg.LabelNamePreserveMultipleUnderscores,
		},
		warnings: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_otlp_translation_warnings_total",
			Help: "Warnings of the OTLP translation (empty data points dropped, colliding attribute names, ...), by category.",
		}, []string{"category"}),
	}
	o.converters.New = func() any { return otlpconv.NewPrometheusConverter(nil) }
	o.collectors.New = func() any { return &otlpCollector{names: o.names} }
	return o, nil
}

// Close stops the delta conversion's staleness sweep, if it runs.
func (o *OTLPHandler) Close() error {
	if o.delta == nil {
		return nil
	}
	return o.delta.close()
}

func (o *OTLPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := o.h
	start := h.now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		o.fail(w, false, http.StatusMethodNotAllowed, "", errors.New("OTLP export requires POST"))
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	asJSON := mt == otlpJSON
	if mt != otlpProtobuf && !asJSON {
		o.fail(w, false, http.StatusUnsupportedMediaType, ReasonUnsupportedMedia,
			fmt.Errorf("unsupported Content-Type %q: OTLP/HTTP sends %s or %s", r.Header.Get("Content-Type"), otlpProtobuf, otlpJSON))
		return
	}
	ce := r.Header.Get("Content-Encoding")
	gzipped := strings.EqualFold(ce, "gzip")
	if ce != "" && !gzipped {
		o.fail(w, asJSON, http.StatusUnsupportedMediaType, ReasonUnsupportedMedia, fmt.Errorf("unsupported Content-Encoding %q, want gzip or none", ce))
		return
	}
	defer func() { h.m.duration.WithLabelValues(versionOTLP).Observe(h.now().Sub(start).Seconds()) }()

	// Admission as for remote write, before the body is read.
	adm, e := h.admitBody(r.ContentLength)
	if e != nil {
		o.fail(w, asJSON, e.code, e.reason, e.err)
		return
	}
	defer adm.release()
	body := h.bodies.Get().(*bodyBuffer)
	defer h.bodies.Put(body)
	if e := h.readRequestBody(r, body); e != nil {
		o.fail(w, asJSON, e.code, e.reason, e.err)
		return
	}
	var err error
	if !h.acquire(r.Context()) {
		o.fail(w, asJSON, http.StatusTooManyRequests, ReasonQueueTimeout, queueTimeoutError(h))
		return
	}
	defer func() { <-h.active }()
	bufs := h.pool.Get().(*requestState)
	defer h.pool.Put(bufs)
	raw := body.b
	if gzipped {
		// An active slot bounds the decompressed bytes held at once, as
		// for snappy bodies.
		if raw, err = gunzip(bufs.otlp[:0], body.b, h.cfg.MaxDecompressedBytes); err != nil {
			if errors.Is(err, ErrDecompressedTooLarge) {
				o.fail(w, asJSON, http.StatusRequestEntityTooLarge, ReasonDecompressedTooLarge, err)
			} else {
				o.fail(w, asJSON, http.StatusBadRequest, "bad_gzip", err)
			}
			return
		}
		bufs.otlp = raw
	}
	req := pmetricotlp.NewExportRequest()
	if asJSON {
		err = req.UnmarshalJSON(raw)
	} else {
		err = req.UnmarshalProto(raw)
	}
	if err != nil {
		o.fail(w, asJSON, http.StatusBadRequest, ReasonBadProtobuf, fmt.Errorf("decode OTLP metrics export request: %w", err))
		return
	}

	resp, e := o.export(r.Context(), req.Metrics(), &bufs.ws)
	if e != nil {
		o.fail(w, asJSON, e.code, e.reason, e.err)
		return
	}
	var b []byte
	if asJSON {
		b, err = resp.MarshalJSON()
	} else {
		b, err = resp.MarshalProto()
	}
	if err != nil {
		o.fail(w, asJSON, http.StatusInternalServerError, "", fmt.Errorf("encode the response: %w", err))
		return
	}
	o.reply(w, asJSON, http.StatusOK, b)
}

// export writes the metrics of an admitted, decoded export request (over
// HTTP or gRPC), with ws the write path's scratch state, and returns the
// response to send, or why the request was refused whole (the HTTP status
// it gets; a gRPC export gets that status's gRPC code). What it refuses
// within the request is counted; a refusal whole is counted by fail or
// refusal.
func (o *OTLPHandler) export(ctx context.Context, md pmetric.Metrics, ws *writeState) (pmetricotlp.ExportResponse, *httpError) {
	h := o.h
	now := h.now()
	lo, hi := pcommon.Timestamp(0), pcommon.Timestamp(math.MaxUint64)
	if o.maxAge > 0 {
		lo = pcommon.NewTimestampFromTime(now.Add(-o.maxAge))
	}
	if newest := h.cfg.Limits.newestAllowed(now); newest < math.MaxInt64 {
		hi = pcommon.NewTimestampFromTime(time.UnixMilli(newest + 1))
	}
	var ref refused
	ref.outside = dropOutside(md, lo, hi)
	if ref.outside > 0 {
		h.m.rejected.WithLabelValues(ReasonTooOld).Add(float64(ref.outside))
	}
	if hasDelta(md) {
		if o.delta == nil {
			ref.deltaRefused = true
		} else {
			before := md.DataPointCount()
			var err error
			if md, err = o.delta.convert(ctx, md); err != nil {
				return pmetricotlp.ExportResponse{}, &httpError{code: http.StatusInternalServerError, err: fmt.Errorf("convert delta temporality to cumulative: %w", err)}
			}
			if ref.deltaDropped = before - md.DataPointCount(); ref.deltaDropped > 0 {
				h.m.rejected.WithLabelValues(reasonDeltaDropped).Add(float64(ref.deltaDropped))
			}
		}
	}

	col := o.collectors.Get().(*otlpCollector)
	// The translation may make far more than it was sent (a series per
	// bucket, target_info every half lookback delta): it may take twice
	// what a decompressed body may.
	col.budget = 2 * int64(h.cfg.MaxDecompressedBytes)
	col.grow(translatedSize(md))
	defer func() {
		col.reset()
		o.collectors.Put(col)
	}()
	conv := o.converters.Get().(*otlpconv.PrometheusConverter)
	conv.Reset(col)
	annots, terr := conv.FromMetrics(ctx, md, o.settings)
	conv.Reset(nil)
	o.converters.Put(conv)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return pmetricotlp.ExportResponse{}, &httpError{code: http.StatusServiceUnavailable, reason: "canceled", err: ctxErr}
	}
	if col.budget < 0 {
		return pmetricotlp.ExportResponse{}, &httpError{code: http.StatusRequestEntityTooLarge, reason: reasonTranslatedTooLarge,
			err: fmt.Errorf("the request translates into more than %d bytes of series (twice max_decompressed_bytes): send smaller batches", 2*h.cfg.MaxDecompressedBytes)}
	}
	for category, n := range otlpconv.CountWarningsByCategory(annots) {
		o.warnings.WithLabelValues(string(category)).Add(float64(n))
	}
	if ws, _ := annots.AsStrings("", 0, 0); len(ws) > 0 {
		h.logger.Debug("OTLP translation warnings", "warnings", ws)
	}
	ref.untranslated = unjoin(terr)
	if len(ref.untranslated) > 0 {
		h.m.rejected.WithLabelValues(reasonUntranslated).Add(float64(len(ref.untranslated)))
	}
	return o.response(h.write(ctx, version2, &col.req, ws), &ref)
}

// refused is what an OTLP request lost before its series were written:
// data points outside the time window, delta data points the conversion
// dropped, and metrics the translator refused (one error each; among them
// those of delta temporality when deltaRefused).
type refused struct {
	outside, deltaDropped int
	untranslated          []error
	deltaRefused          bool
}

// translatedSize estimates what the translation of md makes: series (a
// sample each; a target_info a resource) and their labels, the data
// points' attributes plus the name, job, instance and le or quantile.
// The collector sizes its slices by it once, rather than growing them from
// the pool's (often empty, after a collection) a doubling at a time.
func translatedSize(md pmetric.Metrics) (series, lbls int) {
	add := func(n, attrs int) {
		series += n
		lbls += n * (attrs + 4)
	}
	for _, rm := range md.ResourceMetrics().All() {
		add(1, rm.Resource().Attributes().Len()) // target_info
	}
	eachMetric(md, func(m pmetric.Metric) {
		switch m.Type() {
		case pmetric.MetricTypeGauge:
			for _, p := range m.Gauge().DataPoints().All() {
				add(1, p.Attributes().Len())
			}
		case pmetric.MetricTypeSum:
			for _, p := range m.Sum().DataPoints().All() {
				add(1, p.Attributes().Len())
			}
		case pmetric.MetricTypeHistogram:
			for _, p := range m.Histogram().DataPoints().All() {
				add(p.BucketCounts().Len()+2, p.Attributes().Len())
			}
		case pmetric.MetricTypeExponentialHistogram:
			for _, p := range m.ExponentialHistogram().DataPoints().All() {
				add(1, p.Attributes().Len())
			}
		case pmetric.MetricTypeSummary:
			for _, p := range m.Summary().DataPoints().All() {
				add(p.QuantileValues().Len()+2, p.Attributes().Len())
			}
		}
	})
	// A little room for what the estimate misses: growing by a doubling
	// at the end copies everything.
	return series + series/16, lbls + lbls/16
}

// dropOutside removes the data points stamped before lo or at or after hi
// and returns how many it removed.
func dropOutside(md pmetric.Metrics, lo, hi pcommon.Timestamp) int {
	n := 0
	out := func(t pcommon.Timestamp) bool {
		if t < lo || t >= hi {
			n++
			return true
		}
		return false
	}
	eachMetric(md, func(m pmetric.Metric) {
		switch m.Type() {
		case pmetric.MetricTypeGauge:
			m.Gauge().DataPoints().RemoveIf(func(p pmetric.NumberDataPoint) bool { return out(p.Timestamp()) })
		case pmetric.MetricTypeSum:
			m.Sum().DataPoints().RemoveIf(func(p pmetric.NumberDataPoint) bool { return out(p.Timestamp()) })
		case pmetric.MetricTypeHistogram:
			m.Histogram().DataPoints().RemoveIf(func(p pmetric.HistogramDataPoint) bool { return out(p.Timestamp()) })
		case pmetric.MetricTypeExponentialHistogram:
			m.ExponentialHistogram().DataPoints().RemoveIf(func(p pmetric.ExponentialHistogramDataPoint) bool { return out(p.Timestamp()) })
		case pmetric.MetricTypeSummary:
			m.Summary().DataPoints().RemoveIf(func(p pmetric.SummaryDataPoint) bool { return out(p.Timestamp()) })
		}
	})
	return n
}

// eachMetric calls fn for every metric of md.
func eachMetric(md pmetric.Metrics, fn func(pmetric.Metric)) {
	for _, rm := range md.ResourceMetrics().All() {
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				fn(m)
			}
		}
	}
}

// response is the reply to a request whose series were written (or
// refused) by Handler.write, after what ref counts was refused before.
func (o *OTLPHandler) response(res *writeResult, ref *refused) (pmetricotlp.ExportResponse, *httpError) {
	h := o.h
	if res.fatal != nil {
		h.logger.Error("OTLP append failed, request rolled back", "err", res.fatal)
		return pmetricotlp.ExportResponse{}, &httpError{code: http.StatusServiceUnavailable, err: fmt.Errorf("store samples: %w", res.fatal)}
	}
	h.m.written.WithLabelValues("sample").Add(float64(res.samples))
	h.m.written.WithLabelValues("histogram").Add(float64(res.histograms))
	h.m.written.WithLabelValues("exemplar").Add(float64(res.exemplars))
	untranslated := ref.untranslated
	rejected := res.rejected + ref.outside + ref.deltaDropped + len(untranslated)
	var msg string
	if rejected > 0 {
		var b strings.Builder
		sep := func() {
			if b.Len() > 0 {
				b.WriteString("; ")
			}
		}
		if ref.outside > 0 {
			fmt.Fprintf(&b, "%d data points older than %s or more than %s ahead refused", ref.outside, model.Duration(o.maxAge), model.Duration(h.cfg.Limits.MaxFutureSkew))
		}
		if ref.deltaDropped > 0 {
			sep()
			fmt.Fprintf(&b, "%d delta data points dropped by the conversion to cumulative (stamped no later than their stream's last point, e.g. sent again; starting before their stream; or a new stream beyond remote_write.otlp_delta_max_streams)", ref.deltaDropped)
		}
		if ref.deltaRefused && len(untranslated) > 0 {
			sep()
			b.WriteString("delta temporality is refused unless remote_write.otlp_delta_to_cumulative converts it (or a Collector's deltatocumulative processor does)")
		}
		for i, err := range untranslated {
			sep()
			if i == 3 {
				fmt.Fprintf(&b, "and %d more metrics not translated", len(untranslated)-i)
				break
			}
			b.WriteString(err.Error())
		}
		if res.rejectedCount() > 0 {
			sep()
			b.WriteString(res.message(h.cfg.MaxErrorBodyBytes))
		}
		msg = strings.ToValidUTF8(b.String(), "\uFFFD") // a proto3 string
		if len(msg) > h.cfg.MaxErrorBodyBytes {
			msg = strings.ToValidUTF8(msg[:h.cfg.MaxErrorBodyBytes], "") + " [truncated]"
		}
		h.logger.Debug("OTLP request partly refused", "msg", msg)
	}
	if rejected > 0 && res.samples+res.histograms+res.exemplars == 0 {
		// Nothing of it could be written: permanent, not to be retried.
		return pmetricotlp.ExportResponse{}, &httpError{code: http.StatusBadRequest, err: errors.New(msg)}
	}
	resp := pmetricotlp.NewExportResponse()
	if rejected > 0 {
		resp.PartialSuccess().SetRejectedDataPoints(int64(rejected))
		resp.PartialSuccess().SetErrorMessage(msg)
	}
	return resp, nil
}

// fail answers with an error: a google.rpc.Status in the request's
// encoding, as OTLP/HTTP asks of every 4xx and 5xx, with Retry-After when
// the sender should retry. reason, when set, is counted among the
// receiver's rejections.
func (o *OTLPHandler) fail(w http.ResponseWriter, asJSON bool, code int, reason string, err error) {
	if retryable(code) {
		o.h.setRetryAfter(w)
	}
	st := o.refusal(code, reason, err).Proto()
	var b []byte
	if asJSON {
		b, _ = protojson.Marshal(st)
	} else {
		b, _ = proto.Marshal(st)
	}
	o.reply(w, asJSON, code, b)
}

func (o *OTLPHandler) reply(w http.ResponseWriter, asJSON bool, code int, b []byte) {
	ct := otlpProtobuf
	if asJSON {
		ct = otlpJSON
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
	o.h.m.requests.WithLabelValues(versionOTLP, strconv.Itoa(code)).Inc()
}

// refusal counts and logs a request refused whole with the HTTP status
// code and returns the status OTLP answers it with: in the body over HTTP,
// as the error over gRPC.
func (o *OTLPHandler) refusal(code int, reason string, err error) *grpcstatus.Status {
	if reason != "" {
		o.h.m.rejected.WithLabelValues(reason).Inc()
	}
	o.h.logger.Debug("OTLP request refused", "code", code, "reason", reason, "err", err)
	// A proto3 string must be UTF-8, or neither encoding marshals it (the
	// body would be empty); a decode error may quote the body's bytes.
	return grpcstatus.New(grpcCode(code), strings.ToValidUTF8(err.Error(), "\uFFFD"))
}

// retryable reports whether a refusal with the HTTP status code is one the
// sender retries after a delay (Retry-After, gRPC's RetryInfo): overload
// and a storage failure.
func retryable(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// queueTimeoutError says why a request waited in vain for an active slot.
func queueTimeoutError(h *Handler) error {
	return fmt.Errorf("waited %s for one of %d active write slots, retry later", h.cfg.MaxQueueWait, h.cfg.MaxActiveRequests)
}

// grpcCode is the status code a google.rpc.Status carries for an HTTP
// status (the gRPC-HTTP mapping).
func grpcCode(code int) codes.Code {
	switch code {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusUnsupportedMediaType, http.StatusMethodNotAllowed:
		return codes.Unimplemented
	}
	return codes.Internal
}

// gzipReaders keeps gzip readers (and their decompressors' tables, tens of
// KB each) from request to request.
var gzipReaders sync.Pool // *gzip.Reader

// gunzip decompresses src into dst, refusing more than limit bytes. It
// uses klauspost/compress' gzip, which inflates faster than the standard
// library's (its decompression took 5 % of strata serve's CPU under an OTLP
// load with the standard library's).
func gunzip(dst, src []byte, limit int) ([]byte, error) {
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(src))
	} else {
		err = zr.Reset(bytes.NewReader(src))
	}
	if err != nil {
		return dst, fmt.Errorf("gzip: %w", err)
	}
	defer gzipReaders.Put(zr)
	out := bytes.NewBuffer(dst)
	n, err := out.ReadFrom(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return out.Bytes(), fmt.Errorf("gzip: %w", err)
	}
	if n > int64(limit) {
		return out.Bytes(), fmt.Errorf("%w: more than %d bytes", ErrDecompressedTooLarge, limit)
	}
	return out.Bytes(), nil
}

// unjoin returns the errors errors.Join put together (the translator's,
// one a metric or resource), or err alone.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// otlpCollector is the storage.AppenderV2 the translator appends to: it
// gathers the series into a Request for Handler.write, the points of one
// series (which the translator appends in a row) into one Series. Labels
// and float samples live in slices kept between requests, each Series
// viewing its part, as the Decoder's do.
type otlpCollector struct {
	names   map[string]string // OTLPConfig.Names
	budget  int64             // bytes the request may still take; negative: over, appends refused
	req     Request
	labels  []Label
	samples []Sample
	exLbls  []Label
	last    labels.Labels
	from    int // where the last Series' samples start in samples
}

var _ storage.AppenderV2 = (*otlpCollector)(nil)

func (c *otlpCollector) Append(_ storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	if c.budget < 0 {
		return 0, errOverBudget
	}
	isHist := h != nil || fh != nil
	n := len(c.req.Series)
	newSeries := n == 0 || !labels.Equal(c.last, ls) || (len(c.req.Series[n-1].Histograms) > 0) != isHist
	// What it holds: a sample (or a histogram and its buckets), and for a
	// new series its Series and label views (their strings are the
	// translator's).
	cost := int64(unsafe.Sizeof(Sample{}))
	if isHist {
		cost = int64(unsafe.Sizeof(Histogram{}) + unsafe.Sizeof(histogram.FloatHistogram{}))
		if h != nil {
			cost += int64(8*len(h.PositiveBuckets) + 8*len(h.NegativeBuckets) + 8*len(h.CustomValues))
		} else {
			cost += int64(8*len(fh.PositiveBuckets) + 8*len(fh.NegativeBuckets) + 8*len(fh.CustomValues))
		}
	}
	if newSeries {
		cost += int64(unsafe.Sizeof(Series{})) + int64(ls.Len())*int64(unsafe.Sizeof(Label{}))
	}
	if c.budget -= cost; c.budget < 0 {
		return 0, errOverBudget
	}
	if newSeries {
		from := len(c.labels)
		ls.Range(func(l labels.Label) {
			if l.Name == model.MetricNameLabel {
				if n, ok := c.names[l.Value]; ok {
					l.Value = n
				}
			}
			c.labels = append(c.labels, Label{Name: l.Name, Value: l.Value})
		})
		c.req.Series = append(c.req.Series, Series{Labels: c.labels[from:len(c.labels):len(c.labels)]})
		c.last, c.from = ls, len(c.samples)
		n++
	}
	s := &c.req.Series[n-1]
	if s.Metadata.IsEmpty() {
		s.Metadata = Metadata{Type: opts.Metadata.Type, Unit: opts.Metadata.Unit, Help: opts.Metadata.Help}
	}
	if isHist {
		s.Histograms = append(s.Histograms, Histogram{Timestamp: t, StartTimestamp: st, H: h, FH: fh})
	} else {
		// The last Series' samples are the tail of c.samples.
		c.samples = append(c.samples, Sample{Value: v, Timestamp: t, StartTimestamp: st})
		s.Samples = c.samples[c.from:len(c.samples):len(c.samples)]
	}
	for _, e := range opts.Exemplars {
		from := len(c.exLbls)
		e.Labels.Range(func(l labels.Label) { c.exLbls = append(c.exLbls, Label{Name: l.Name, Value: l.Value}) })
		s.Exemplars = append(s.Exemplars, Exemplar{Labels: c.exLbls[from:len(c.exLbls):len(c.exLbls)], Value: e.Value, Timestamp: e.Ts})
	}
	return 0, nil
}

// Commit and Rollback do nothing: Handler.write appends what was collected
// in a transaction of its own.
func (*otlpCollector) Commit() error   { return nil }
func (*otlpCollector) Rollback() error { return nil }

// grow makes room for series float series and lbls label views at once,
// when that fits in the budget (a request that would not is refused as
// its appends pass the budget; it is not sized for first).
func (c *otlpCollector) grow(series, lbls int) {
	if int64(series)*int64(unsafe.Sizeof(Series{})+unsafe.Sizeof(Sample{}))+int64(lbls)*int64(unsafe.Sizeof(Label{})) > c.budget {
		return
	}
	c.req.Series = slices.Grow(c.req.Series, series)
	c.samples = slices.Grow(c.samples, series)
	c.labels = slices.Grow(c.labels, lbls)
}

// reset empties the collector for its next request, keeping its memory.
func (c *otlpCollector) reset() {
	clear(c.req.Series) // drop the histograms and strings they hold
	c.req.Series = c.req.Series[:0]
	clear(c.labels)
	c.labels = c.labels[:0]
	c.samples = c.samples[:0]
	clear(c.exLbls)
	c.exLbls = c.exLbls[:0]
	c.last = labels.EmptyLabels()
}
