package remotewrite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/storage"
)

// Response headers. The *-Written counts belong to RW 2.0 and are sent only
// on 2.0 requests, as Prometheus' own receiver does (client_golang's
// exp/api/remote leaves them out for 1.0): a Prometheus 3 sender that sees
// them on a 1.0 response trusts them, so a 0 there would count every sample
// of a successful request as failed, while without them it counts the
// request's samples as written.
const (
	headerSamplesWritten    = "X-Prometheus-Remote-Write-Samples-Written"
	headerHistogramsWritten = "X-Prometheus-Remote-Write-Histograms-Written"
	headerExemplarsWritten  = "X-Prometheus-Remote-Write-Exemplars-Written"
	headerVersion           = "X-Prometheus-Remote-Write-Version"
)

// Content types of the two protocol versions.
const (
	contentTypeProtobuf = "application/x-protobuf"
	protoV1             = "prometheus.WriteRequest"
	protoV2             = "io.prometheus.write.v2.Request"
)

// Config configures the Handler. DefaultConfig gives the values documented on
// each field; zero values are replaced by those defaults in NewHandler, so a
// limit cannot be switched off by forgetting it.
type Config struct {
	// Limits is the per-series validation, shared with the scraper. Defaults:
	// 64 labels per series (Mimir's max_label_names_per_series is 30, VM has
	// no default limit; inference exporters such as dcgm-exporter with
	// Kubernetes labels reach ~25), label names of 1 KiB, label values of
	// 4 KiB (VM's -maxLabelValueLen; Mimir allows 2 KiB), and a future skew
	// of 10 minutes (Prometheus' maxAheadTime).
	Limits Limits
	// MaxCompressedBytes bounds the request body as sent (32 MiB, like
	// VictoriaMetrics' -maxInsertRequestSize). Larger bodies get 413 before
	// they are read when Content-Length says so, or as soon as they prove so.
	MaxCompressedBytes int
	// MaxDecompressedBytes bounds the snappy-decoded body (128 MiB). It is
	// checked against the length the snappy header announces, before the
	// output buffer is allocated. Prometheus sends at most ~2,000 series per
	// request (a few MiB), so this only stops abuse.
	MaxDecompressedBytes int
	// MaxInflightRequests bounds requests being decoded or appended at once
	// (64). Past it the handler answers 429 without reading the body.
	MaxInflightRequests int
	// MaxActiveRequests bounds the admitted requests that decompress, decode
	// and append at once (0: twice GOMAXPROCS, at least 4, as
	// VictoriaMetrics' -maxConcurrentInserts). The others wait, holding only
	// their compressed body, up to MaxQueueWait: a decoded request holds
	// several times its compressed size (the decompressed body, the decoded
	// series, the append's scratch space), and more of them at once than
	// there are cores to run them only adds memory, not throughput.
	MaxActiveRequests int
	// MaxQueueWait is how long an admitted request waits for one of the
	// MaxActiveRequests before it gets 429 with Retry-After (10 s, a third
	// of Prometheus' default remote-write timeout).
	MaxQueueWait time.Duration
	// MaxInflightBytes bounds the sum over in-flight requests of compressed
	// plus decompressed body bytes (512 MiB). A request whose Content-Length
	// is unknown reserves MaxCompressedBytes until its body is read. Past the
	// bound the handler answers 429, so receiver memory for bodies stays
	// under this figure.
	MaxInflightBytes int64
	// MaxHeapBytes is the live Go heap (as the last garbage collection
	// found it) past which the handler answers 429 with Retry-After without
	// reading the body, whatever the in-flight bounds allow: memory that the
	// head, caches and pending work keep is not bounded by the requests in
	// flight, and appending more when it is near the limit would end in an
	// out-of-memory kill, losing what the WAL has not synced. 0 means
	// DefaultHeapLimitRatio of the Go runtime's soft memory limit
	// (GOMEMLIMIT) as NewHandler finds it, and no gate when none is set;
	// negative switches the gate off.
	MaxHeapBytes int64
	// StorageGate, when set, is asked before every write request's body is
	// read; while it returns an error (the storage's disk is nearly full,
	// internal/diskspace) the request gets 503 with Retry-After and that
	// error: remote-write senders and OTLP exporters retry a 503, so what
	// they hold waits for the space instead of being dropped.
	StorageGate func() error
	// RetryAfter is the mean Retry-After the handler sends with 429 while
	// every request in flight waits for an active slot (5 s). Each 429
	// gets its own, in whole seconds (at least 1): half of RetryAfter with
	// no request waiting, growing to all of it with MaxInflightRequests
	// waiting, times a random factor between 0.5 and 1.5, so at most 1.5
	// times RetryAfter (8 s by default). With one fixed value, every sender
	// refused in the same second came back in the same second.
	RetryAfter time.Duration
	// MaxErrorBodyBytes caps the response body of a 400 (4 KiB): a request
	// with 10,000 bad series must not produce a 10,000-line answer.
	MaxErrorBodyBytes int
	// IngestSTZeroSample, when set (default), appends a zero sample at a
	// sample's start timestamp (RW 2.0 Sample.start_timestamp, or the legacy
	// TimeSeries.created_timestamp) before the sample, like Prometheus'
	// created-timestamp-zero-ingestion: rate() over a counter that started
	// inside the range then sees its first increase. It is best effort and
	// never rejects the sample it belongs to.
	IngestSTZeroSample bool
	// SeriesCacheSize bounds the cache from label set to series reference
	// that spares re-building label sets and re-hashing them in the TSDB for
	// series seen before: the most series one of its two generations holds
	// (4,194,304, about 50 bytes each besides the labels the head keeps;
	// negative disables it). Within it a generation holds StorageSeries
	// plus an eighth, at least 65,536.
	SeriesCacheSize int
	// StorageSeries returns the number of series the storage holds (the raw
	// tier's head), read when a generation of the series cache fills: the
	// cache then holds the whole fleet, so series that arrive in rotation
	// still find their entry when they come back. nil: every generation
	// holds SeriesCacheSize.
	StorageSeries func() int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Limits:               DefaultLimits(),
		MaxCompressedBytes:   32 << 20,
		MaxDecompressedBytes: 128 << 20,
		MaxInflightRequests:  64,
		MaxInflightBytes:     512 << 20,
		MaxQueueWait:         10 * time.Second,
		RetryAfter:           5 * time.Second,
		MaxErrorBodyBytes:    4 << 10,
		IngestSTZeroSample:   true,
		SeriesCacheSize:      1 << 22,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Limits = c.Limits.WithDefaults()
	if c.MaxCompressedBytes <= 0 {
		c.MaxCompressedBytes = d.MaxCompressedBytes
	}
	if c.MaxDecompressedBytes <= 0 {
		c.MaxDecompressedBytes = d.MaxDecompressedBytes
	}
	if c.MaxInflightRequests <= 0 {
		c.MaxInflightRequests = d.MaxInflightRequests
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = d.MaxInflightBytes
	}
	if c.MaxActiveRequests <= 0 {
		c.MaxActiveRequests = max(4, 2*runtime.GOMAXPROCS(0))
	}
	if c.MaxQueueWait <= 0 {
		c.MaxQueueWait = d.MaxQueueWait
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = d.RetryAfter
	}
	if c.MaxHeapBytes == 0 {
		c.MaxHeapBytes = heapLimitFromRuntime()
	}
	if c.MaxErrorBodyBytes <= 0 {
		c.MaxErrorBodyBytes = d.MaxErrorBodyBytes
	}
	if c.SeriesCacheSize == 0 {
		c.SeriesCacheSize = d.SeriesCacheSize
	}
	return c
}

// Handler is the remote-write receiver: an http.Handler for POST
// /api/v1/write that accepts RW 1.0 and 2.0, validates and bounds what it
// receives and appends it to the raw tier. It is safe for concurrent use.
type Handler struct {
	cfg    Config
	app    storage.AppendableV2
	meta   *MetadataStore
	logger *slog.Logger
	now    func() time.Time
	cache  *seriesCache
	// directKeys: the series cache's keys are encoded straight from the
	// label views (appendLabelKey), because they are the labels package's
	// own encoding (labelKeysMatch).
	directKeys bool

	inflightReqs  atomic.Int64
	inflightBytes atomic.Int64
	// jitter returns a number in [0, 1) for retryAfterSeconds (rand.Float64;
	// tests replace it).
	jitter func() float64
	// liveHeap reads the live heap for the MaxHeapBytes gate (readLiveHeap;
	// tests replace it).
	liveHeap func() uint64

	active chan struct{} // one token per request decoding or appending
	bodies sync.Pool     // *bodyBuffer
	pool   sync.Pool     // *requestState

	m handlerMetrics
}

type handlerMetrics struct {
	requests      *prometheus.CounterVec
	rejected      *prometheus.CounterVec
	samples       prometheus.Counter
	histograms    prometheus.Counter
	exemplars     prometheus.Counter
	written       *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	inflightReqs  prometheus.GaugeFunc
	inflightBytes prometheus.GaugeFunc
	active        prometheus.GaugeFunc
	heapLimit     prometheus.Gauge
	cacheHits     prometheus.Counter
	cacheMisses   prometheus.Counter
}

// registerCacheMetrics exposes the series cache's size and hit rate.
func (m *handlerMetrics) registerCacheMetrics(f promauto.Factory, c *seriesCache) {
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_remotewrite_series_cache_series",
		Help: "Series in the remote-write series cache (both generations).",
	}, func() float64 { held, _ := c.stats(); return float64(held) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_remotewrite_series_cache_capacity_series",
		Help: "Series one generation of the remote-write series cache holds before it turns over: the raw head's series plus an eighth, within remote_write.series_cache_size.",
	}, func() float64 { _, capacity := c.stats(); return float64(capacity) })
	lookups := f.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_remotewrite_series_cache_lookups_total",
		Help: "Series looked up in the remote-write series cache, by result (hit: appended by reference without building its labels; miss).",
	}, []string{"result"})
	m.cacheHits = lookups.WithLabelValues("hit")
	m.cacheMisses = lookups.WithLabelValues("miss")
}

// bodyBuffer is the pooled compressed body of a request, held while it
// waits for an active slot.
type bodyBuffer struct{ b []byte }

// requestState is the pooled memory of one active request: its decompressed
// body, the decoder and the append scratch space.
type requestState struct {
	decompressed []byte
	dec          Decoder
	ws           writeState
	otlp         []byte // a gzipped OTLP body, decompressed
}

// NewHandler returns a receiver appending into app (the raw tier: *tiers.Raw
// implements storage.AppendableV2; exemplars are stored when its appenders
// implement storage.ExemplarAppenderV2, as the TSDB's do). meta keeps metric
// metadata; nil gives a private in-memory store. now is the clock used for the
// future-skew limit (nil means time.Now). Metrics are registered on reg.
func NewHandler(cfg Config, app storage.AppendableV2, meta *MetadataStore, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*Handler, error) {
	if app == nil {
		return nil, errors.New("new remote-write handler: nil appendable")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	if meta == nil {
		meta = NewMetadataStore(0)
	}
	cfg = cfg.withDefaults()
	h := &Handler{
		cfg:      cfg,
		app:      app,
		meta:     meta,
		logger:   logger,
		now:      now,
		jitter:   rand.Float64,
		liveHeap: readLiveHeap,
	}
	if cfg.SeriesCacheSize > 0 {
		h.cache = newSeriesCache(cfg.SeriesCacheSize, cfg.StorageSeries)
		h.directKeys = labelKeysMatch()
	}
	h.active = make(chan struct{}, cfg.MaxActiveRequests)
	h.bodies.New = func() any { return &bodyBuffer{} }
	h.pool.New = func() any { return &requestState{} }

	f := promauto.With(reg)
	h.m = handlerMetrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_remotewrite_requests_total",
			Help: "Remote-write requests by protocol version and HTTP status code.",
		}, []string{"version", "code"}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_remotewrite_rejected_total",
			Help: "Rejections by reason. Request-level reasons (body_too_large, decompressed_too_large, bad_snappy, bad_protobuf, overload, queue_timeout, heap_limit, unsupported_media_type) count requests; the others count samples, histograms or exemplars not written (a series rejected without any counts as one).",
		}, []string{"reason"}),
		samples: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_remotewrite_samples_total",
			Help: "Float samples received (decoded), written or not.",
		}),
		histograms: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_remotewrite_histograms_total",
			Help: "Native histogram samples received (decoded), written or not.",
		}),
		exemplars: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_remotewrite_exemplars_total",
			Help: "Exemplars received (decoded), written or not.",
		}),
		written: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_remotewrite_written_total",
			Help: "Elements committed to the raw tier, by kind (sample, histogram, exemplar).",
		}, []string{"kind"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:                        "strata_remotewrite_request_duration_seconds",
			Help:                        "Time to handle a remote-write request, from headers to response.",
			Buckets:                     []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
			NativeHistogramBucketFactor: 1.1,
		}, []string{"version"}),
		inflightReqs: f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "strata_remotewrite_inflight_requests",
			Help: "Remote-write requests being handled.",
		}, func() float64 { return float64(h.inflightReqs.Load()) }),
		inflightBytes: f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "strata_remotewrite_inflight_bytes",
			Help: "Body bytes (compressed plus decompressed) reserved by in-flight requests.",
		}, func() float64 { return float64(h.inflightBytes.Load()) }),
		active: f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "strata_remotewrite_active_requests",
			Help: "Remote-write requests decoding or appending (at most max_active_requests); the other in-flight ones wait for a slot.",
		}, func() float64 { return float64(len(h.active)) }),
		heapLimit: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_remotewrite_heap_limit_bytes",
			Help: "Live Go heap past which remote writes get 429 (rejected_total{reason=\"heap_limit\"}); 0: no such gate.",
		}),
	}
	if h.cache != nil {
		h.m.registerCacheMetrics(f, h.cache)
	}
	h.m.heapLimit.Set(float64(max(cfg.MaxHeapBytes, 0)))
	for _, r := range rejectionReasons {
		h.m.rejected.WithLabelValues(r)
	}
	return h, nil
}

// Limits returns the series validation the handler applies, for the scraper
// (scrape.Config.Limits).
func (h *Handler) Limits() Limits { return h.cfg.Limits }

// protoVersion is the protocol of a request, as chosen by its Content-Type.
type protoVersion int

const (
	versionUnknown protoVersion = iota
	version1
	version2
)

func (v protoVersion) label() string {
	if v == version2 {
		return "2.0"
	}
	return "1.0"
}

// parseContentType maps a Content-Type to a protocol version, following the
// RW 2.0 spec: the header, not the body, chooses the schema.
func parseContentType(ct string) (protoVersion, error) {
	switch ct {
	case "", contentTypeProtobuf, contentTypeProtobuf + ";proto=" + protoV1:
		return version1, nil
	case contentTypeProtobuf + ";proto=" + protoV2:
		return version2, nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return versionUnknown, fmt.Errorf("unsupported Content-Type %q: %w", ct, err)
	}
	if mt != contentTypeProtobuf {
		return versionUnknown, fmt.Errorf("unsupported Content-Type %q, want %s", ct, contentTypeProtobuf)
	}
	switch params["proto"] {
	case "", protoV1:
		return version1, nil
	case protoV2:
		return version2, nil
	}
	return versionUnknown, fmt.Errorf("unsupported protobuf message %q, want %s or %s", params["proto"], protoV1, protoV2)
}

// httpError is a response decided before anything was written to storage.
type httpError struct {
	code   int
	reason string
	err    error
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	w.Header().Set(headerVersion, "2.0.0")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "remote write requires POST", http.StatusMethodNotAllowed)
		h.m.requests.WithLabelValues("unknown", "405").Inc()
		return
	}
	// Headers first: a 415 must not depend on reading or decoding the body.
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "snappy") {
		h.reject(w, versionUnknown, httpError{http.StatusUnsupportedMediaType, ReasonUnsupportedMedia,
			fmt.Errorf("unsupported Content-Encoding %q, want snappy", ce)})
		return
	}
	ver, err := parseContentType(r.Header.Get("Content-Type"))
	if err != nil {
		h.reject(w, versionUnknown, httpError{http.StatusUnsupportedMediaType, ReasonUnsupportedMedia, err})
		return
	}
	defer func() { h.m.duration.WithLabelValues(ver.label()).Observe(h.now().Sub(start).Seconds()) }()

	adm, e := h.admitBody(r.ContentLength)
	if e != nil {
		if retryable(e.code) {
			h.setRetryAfter(w)
		}
		h.reject(w, ver, *e)
		return
	}
	defer adm.release()
	body := h.bodies.Get().(*bodyBuffer)
	defer h.bodies.Put(body)
	if e := h.readRequestBody(r, body); e != nil {
		h.reject(w, ver, *e)
		return
	}
	// Exchange the reservation for the real sizes.
	n, err := decodedLen(body.b, h.cfg.MaxDecompressedBytes)
	if err != nil {
		if errors.Is(err, ErrDecompressedTooLarge) {
			h.reject(w, ver, httpError{http.StatusRequestEntityTooLarge, ReasonDecompressedTooLarge, err})
		} else {
			h.reject(w, ver, httpError{http.StatusBadRequest, ReasonBadSnappy, err})
		}
		return
	}
	if !adm.resize(int64(len(body.b) + n)) {
		h.overload(w, ver)
		return
	}

	// Decompress, decode and append with at most MaxActiveRequests at once.
	if !h.acquire(r.Context()) {
		h.setRetryAfter(w)
		h.reject(w, ver, httpError{http.StatusTooManyRequests, ReasonQueueTimeout,
			fmt.Errorf("waited %s for one of %d active remote-write slots, retry later", h.cfg.MaxQueueWait, h.cfg.MaxActiveRequests)})
		return
	}
	defer func() { <-h.active }()
	bufs := h.pool.Get().(*requestState)
	defer func() {
		// The decoder's views point into bufs.decompressed, pooled with it.
		bufs.dec.reuse()
		h.pool.Put(bufs)
	}()
	if cap(bufs.decompressed) < n {
		// decompress replaces the buffer: the views into the old one go.
		bufs.dec.unpin()
	}
	bufs.decompressed, err = decompress(bufs.decompressed, body.b, n)
	if err != nil {
		h.reject(w, ver, httpError{http.StatusBadRequest, ReasonBadSnappy, err})
		return
	}

	dec := &bufs.dec
	var req *Request
	if ver == version2 {
		req, err = dec.DecodeV2(bufs.decompressed)
	} else {
		req, err = dec.DecodeV1(bufs.decompressed)
	}
	if err != nil {
		h.reject(w, ver, httpError{http.StatusBadRequest, ReasonBadProtobuf, err})
		return
	}
	res := h.write(r.Context(), ver, req, &bufs.ws)
	h.respond(w, ver, res)
}

// admission is an admitted request's hold on the in-flight bounds.
type admission struct {
	h       *Handler
	reserve int64 // body bytes held
}

// admitBody applies the admission every write request passes before its
// body is read (an HTTP request's Content-Length, or -1: unknown, which
// reserves MaxCompressedBytes): its declared size, the storage gate
// (refused while the disk is nearly full), the heap gate (refused while
// memory is short), then the bounds on requests and body bytes in
// flight. A refusal is an httpError; a 429 or 503 goes out with
// Retry-After. An admission must be released.
func (h *Handler) admitBody(length int64) (admission, *httpError) {
	if length > int64(h.cfg.MaxCompressedBytes) {
		return admission{}, &httpError{http.StatusRequestEntityTooLarge, ReasonBodyTooLarge,
			fmt.Errorf("%w: Content-Length %d, the limit is %d", ErrBodyTooLarge, length, h.cfg.MaxCompressedBytes)}
	}
	if h.cfg.StorageGate != nil {
		if err := h.cfg.StorageGate(); err != nil {
			return admission{}, &httpError{http.StatusServiceUnavailable, ReasonDiskSpace, err}
		}
	}
	if h.cfg.MaxHeapBytes > 0 {
		if live := h.liveHeap(); live > uint64(h.cfg.MaxHeapBytes) {
			return admission{}, &httpError{http.StatusTooManyRequests, ReasonHeapLimit,
				fmt.Errorf("memory pressure: live heap %d bytes is over the receiver's bound of %d, retry later", live, h.cfg.MaxHeapBytes)}
		}
	}
	reserve := length
	if reserve < 0 {
		reserve = int64(h.cfg.MaxCompressedBytes)
	}
	if !h.admit(reserve) {
		return admission{}, &httpError{http.StatusTooManyRequests, ReasonOverload, errInflight}
	}
	return admission{h: h, reserve: reserve}, nil
}

// resize exchanges the reservation for need bytes; false, the reservation
// kept, when that would pass the bound on bytes in flight.
func (a *admission) resize(need int64) bool {
	if !a.h.addBytes(need-a.reserve, need) {
		return false
	}
	a.reserve = need
	return true
}

func (a *admission) release() {
	a.h.inflightReqs.Add(-1)
	a.h.inflightBytes.Add(-a.reserve)
}

// readRequestBody reads an admitted request's body into body, within
// MaxCompressedBytes.
func (h *Handler) readRequestBody(r *http.Request, body *bodyBuffer) *httpError {
	var err error
	body.b, err = readBody(r.Body, body.b, r.ContentLength, h.cfg.MaxCompressedBytes)
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		return &httpError{http.StatusRequestEntityTooLarge, ReasonBodyTooLarge, err}
	case err != nil:
		return &httpError{http.StatusBadRequest, "read_error", err}
	}
	return nil
}

// acquire takes an active slot, waiting at most MaxQueueWait; false when
// the wait ran out or the sender went away (ctx ended).
func (h *Handler) acquire(ctx context.Context) bool {
	select {
	case h.active <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(h.cfg.MaxQueueWait)
	defer t.Stop()
	select {
	case h.active <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// admit reserves one request slot and bytes, or reports overload.
func (h *Handler) admit(bytes int64) bool {
	if !addBounded(&h.inflightReqs, 1, int64(h.cfg.MaxInflightRequests), 0) {
		return false
	}
	// A request alone in flight is always admitted, so that a body larger
	// than MaxInflightBytes (but within the size limits) is not refused
	// forever.
	if !h.addBytes(bytes, bytes) {
		h.inflightReqs.Add(-1)
		return false
	}
	return true
}

// addBytes adds delta to the bytes in flight of a request that then holds
// own, unless that passes MaxInflightBytes while other requests hold bytes
// too; it reports whether it added.
func (h *Handler) addBytes(delta, own int64) bool {
	return addBounded(&h.inflightBytes, delta, h.cfg.MaxInflightBytes, own)
}

// addBounded adds delta to v unless delta is positive and the sum passes
// bound and is not alone (the sum a caller holding everything would make):
// the counter never passes its bound, not even for a moment, as an add
// taken back after the check did (a gauge read then, or a request
// refused for it, saw bytes nobody held).
func addBounded(v *atomic.Int64, delta, bound, alone int64) bool {
	for {
		cur := v.Load()
		sum := cur + delta
		if delta > 0 && sum > bound && sum != alone {
			return false
		}
		if v.CompareAndSwap(cur, sum) {
			return true
		}
	}
}

// retryAfterSeconds returns the Retry-After of one 429 (see
// Config.RetryAfter): longer the more admitted requests wait for an active
// slot, and jittered, so that the senders refused together come back
// spread over several seconds instead of all at once.
func (h *Handler) retryAfterSeconds() int64 {
	waiting := max(h.inflightReqs.Load()-int64(len(h.active)), 0)
	queue := min(float64(waiting)/float64(h.cfg.MaxInflightRequests), 1)
	d := h.cfg.RetryAfter.Seconds() * (0.5 + queue/2) * (0.5 + h.jitter())
	return max(int64(math.Round(d)), 1)
}

func (h *Handler) setRetryAfter(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.FormatInt(h.retryAfterSeconds(), 10))
}

func (h *Handler) overload(w http.ResponseWriter, ver protoVersion) {
	h.setRetryAfter(w)
	h.reject(w, ver, httpError{http.StatusTooManyRequests, ReasonOverload, errInflight})
}

// errInflight refuses a request over the bounds on requests and bytes in
// flight.
var errInflight = errors.New("too many write requests or bytes in flight, retry later")

// reject answers a request that wrote nothing.
func (h *Handler) reject(w http.ResponseWriter, ver protoVersion, e httpError) {
	h.m.rejected.WithLabelValues(e.reason).Inc()
	h.logger.Debug("remote-write request rejected", "code", e.code, "reason", e.reason, "err", e.err)
	if ver == version2 {
		setWritten(w, 0, 0, 0)
	}
	http.Error(w, e.err.Error(), e.code)
	v := "unknown"
	if ver != versionUnknown {
		v = ver.label()
	}
	h.m.requests.WithLabelValues(v, strconv.Itoa(e.code)).Inc()
}

func setWritten(w http.ResponseWriter, samples, histograms, exemplars int) {
	hd := w.Header()
	hd.Set(headerSamplesWritten, strconv.Itoa(samples))
	hd.Set(headerHistogramsWritten, strconv.Itoa(histograms))
	hd.Set(headerExemplarsWritten, strconv.Itoa(exemplars))
}

func (h *Handler) respond(w http.ResponseWriter, ver protoVersion, res *writeResult) {
	code := http.StatusNoContent
	var body string
	switch {
	case res.fatal != nil:
		code = http.StatusInternalServerError
		body = "store samples: " + res.fatal.Error()
		h.logger.Error("remote-write append failed, request rolled back", "err", res.fatal)
	case res.rejectedCount() > 0:
		code = http.StatusBadRequest
		body = res.message(h.cfg.MaxErrorBodyBytes)
		h.logger.Debug("remote-write request partly rejected", "msg", body)
	}
	switch {
	case ver != version2:
		// RW 1.0: no counts (see headerSamplesWritten).
	case res.fatal != nil:
		setWritten(w, 0, 0, 0) // rolled back
	default:
		setWritten(w, res.samples, res.histograms, res.exemplars)
	}
	if res.fatal == nil {
		h.m.written.WithLabelValues("sample").Add(float64(res.samples))
		h.m.written.WithLabelValues("histogram").Add(float64(res.histograms))
		h.m.written.WithLabelValues("exemplar").Add(float64(res.exemplars))
	}
	h.m.requests.WithLabelValues(ver.label(), strconv.Itoa(code)).Inc()
	if code == http.StatusNoContent {
		w.WriteHeader(code)
		return
	}
	http.Error(w, body, code)
}

// isHistogramValidationError reports a native-histogram validation failure
// from the TSDB (a client error, unlike other append errors).
func isHistogramValidationError(err error) bool {
	var e histogram.Error
	return errors.As(err, &e)
}
