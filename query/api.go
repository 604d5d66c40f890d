package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/route"
	"github.com/prometheus/common/version"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/httputil"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// apiPrefix is where every route of the package lives.
const apiPrefix = "/api/v1"

// servedRoutes are the Prometheus API v1 routes Strata answers with
// Prometheus' own handlers; /targets is served too when the API has a
// TargetSource (WithTargets), /rules and /alerts when it has rules,
// /alertmanagers when it has a notifier, /status/tsdb, /status/tsdb/blocks
// and /status/walreplay when it has the raw tier's status (WithRawStatus),
// /status/runtimeinfo with WithRuntimeInfo. Everything else under /api/v1/
// (admin, targets/metadata, ...) depends on parts of Prometheus that Strata
// does not have and gets a JSON 404 instead of reaching a handler whose
// retriever is nil. /api/v1/metadata and /api/v1/status/config are served by
// this package (metadata.go, status.go): Strata's metadata is what remote
// write sends and what its own scrapes read (the remotewrite package's store),
// not a scrape manager's targets, and its configuration is not Prometheus'.
var servedRoutes = []string{
	"/query",
	"/query_range",
	"/query_exemplars",
	"/series",
	"/labels",
	"/label/{name}/values",
	"/status/buildinfo",
	"/status/flags",
	"/format_query",
	"/parse_query",
	"/read",
}

// API is Strata's Prometheus HTTP API v1: PromQL queries, series, labels,
// metadata, build info and remote read over one storage.SampleAndChunkQueryable.
//
// The handlers are Prometheus' own (web/api/v1), so the JSON, status codes,
// parameters and error messages are Prometheus'; API wires them to Strata's
// storage, limits and metadata and keeps every route Strata cannot serve out.
//
// API is safe for concurrent use. The caller MUST call Close when done, after
// the HTTP server has stopped.
type API struct {
	engine   *promql.Engine
	split    *splitEngine // engine, splitting long range queries
	pinned   *PinnedExprs // engine's parser
	router   *route.Router
	metadata http.Handler
	config   http.Handler
	notFound http.Handler
	targets  bool     // /targets is served
	routes   []string // servedRoutes, plus rules and alerts when configured
}

// New builds the PromQL engine with cfg's limits and the API over q. meta
// serves /api/v1/metadata; nil means no metadata is known (the endpoint
// answers an empty object). If q also implements storage.ExemplarQueryable,
// /api/v1/query_exemplars answers from it.
//
// Annotations returned by q's queriers (warnings, and infos wrapped with
// annotations.PromQLInfo) reach the response's "warnings" and "infos" fields.
// with adds optional parts (WithTargets).
func New(cfg Config, q storage.SampleAndChunkQueryable, meta MetadataSource, logger *slog.Logger, reg prometheus.Registerer, with ...Option) (*API, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("query config: %w", err)
	}
	if q == nil {
		return nil, errors.New("query API needs a queryable")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var o options
	for _, opt := range with {
		opt(&o)
	}
	cors, err := cfg.corsRegexp()
	if err != nil {
		return nil, err
	}
	factory := promauto.With(reg)
	requests := factory.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_query_http_requests_total",
		Help: "HTTP requests to the query API, by handler and status code.",
	}, []string{"handler", "code"})
	duration := factory.NewHistogramVec(prometheus.HistogramOpts{
		Name:                        "strata_query_http_request_duration_seconds",
		Help:                        "Latency of the query API's HTTP requests, by handler.",
		Buckets:                     prometheus.DefBuckets,
		NativeHistogramBucketFactor: 1.1,
	}, []string{"handler"})
	rejected := factory.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_query_rejected_total",
		Help: "Queries and requests the query API refused, by reason.",
	}, []string{"reason"})
	waiting := factory.NewGauge(prometheus.GaugeOpts{
		Name: "strata_query_queue_waiting",
		Help: "Queries waiting for one of the --query.max-concurrency slots.",
	})

	promqlParser := parser.NewParser(cfg.parserOptions())
	pinned := NewPinnedExprs(promqlParser)
	opts := promql.EngineOpts{
		Logger:        logger.With("component", "query engine"),
		Reg:           reg,
		MaxSamples:    cfg.MaxSamples,
		Timeout:       cfg.Timeout,
		LookbackDelta: cfg.LookbackDelta,
		NoStepSubqueryIntervalFn: func(int64) int64 {
			return cfg.NoStepSubqueryInterval.Milliseconds()
		},
		// On in Prometheus since v2.33 and not switchable there.
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
		EnablePerStepStats:       cfg.EnablePerStepStats,
		EnableDelayedNameRemoval: cfg.EnableDelayedNameRemoval,
		Parser:                   pinned,
	}
	if cfg.MaxConcurrency > 0 {
		opts.ActiveQueryTracker = newQueryGate(cfg.MaxConcurrency, cfg.Timeout, rejected, waiting)
	}
	engine := promql.NewEngine(opts)
	parts := cfg.SplitParallelism
	if parts == 0 {
		parts = runtime.GOMAXPROCS(0)
	}
	split := &splitEngine{QueryEngine: engine, parser: promqlParser, parts: parts, minSteps: minStepsPerPart, maxSamples: cfg.MaxSamples}
	// The API's range queries go through the results cache when there is
	// one; rules and everything else that takes Engine() evaluate instant
	// queries, which it never holds.
	var ranged promql.QueryEngine = split
	if o.cache != nil && cfg.ResultsCacheSize > 0 {
		ranged = newCacheEngine(split, promqlParser, o.cache, cfg, reg)
	}

	var exemplars storage.ExemplarQueryable
	if eq, ok := q.(storage.ExemplarQueryable); ok {
		exemplars = eq
	} else {
		exemplars = emptyExemplars{}
	}
	flags := cfg.Flags
	if flags == nil {
		flags = map[string]string{}
	}
	promCfg := config.Config{GlobalConfig: config.GlobalConfig{ExternalLabels: cfg.ExternalLabels}}
	buildInfo := &v1.PrometheusVersion{
		Version:   version.Version,
		Revision:  version.Revision,
		Branch:    version.Branch,
		BuildUser: version.BuildUser,
		BuildDate: version.BuildDate,
		GoVersion: runtime.Version(),
	}
	// Prometheus' API is built with everything Strata lacks left nil; those
	// routes are never reachable (see servedRoutes and Register).
	routes := slices.Clone(servedRoutes)
	var rr func(context.Context) v1.RulesRetriever
	if cfg.Rules != nil {
		rr = func(context.Context) v1.RulesRetriever { return cfg.Rules }
		routes = append(routes, "/rules", "/alerts")
	}
	var ar func(context.Context) v1.AlertmanagerRetriever
	if cfg.Alertmanagers != nil {
		ar = func(context.Context) v1.AlertmanagerRetriever { return cfg.Alertmanagers }
		routes = append(routes, "/alertmanagers")
	}
	var (
		db       v1.TSDBAdminStats
		gatherer prometheus.Gatherer
	)
	if o.raw != nil {
		db, gatherer = tsdbAdmin{o.raw}, headChunksGatherer{metrics: o.rawMetrics, prefix: o.rawPrefix}
		routes = append(routes, "/status/tsdb", "/status/tsdb/blocks", "/status/walreplay")
	}
	if o.runtimeInfo != nil {
		routes = append(routes, "/status/runtimeinfo")
	}
	papi := v1.NewAPI(
		ranged, q, nil, exemplars,
		nil, o.targetRetriever(), ar, // scrape pools, targets, alertmanagers
		func() config.Config { return promCfg },
		flags, o.globalURLOptions(),
		func(f http.HandlerFunc) http.HandlerFunc { return f }, // always ready
		db, "", false, // the raw tier's status, no TSDB admin API
		false, 0, // no search API
		logger.With("component", "api"),
		rr,
		cfg.RemoteReadSampleLimit, cfg.RemoteReadConcurrency, cfg.RemoteReadMaxBytesInFrame,
		false, cors, o.runtimeInfo, buildInfo,
		nil, nil, // no notifications
		gatherer, reg, nil,
		false, nil, // remote write is served by the remotewrite package
		false, false, false, // no OTLP
		cfg.LookbackDelta,
		false, false, nil, nil,
		v1.OpenAPIOptions{}, promqlParser,
		false, cfg.Timeout,
	)

	instrument := func(handler string, h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
			h(rec, r)
			requests.WithLabelValues(handler, strconv.Itoa(rec.code)).Inc()
			duration.WithLabelValues(handler).Observe(time.Since(start).Seconds())
		}
	}
	// Every route Prometheus compresses is compressed from pooled encoders
	// instead (compressors); remote read, whose streamed frames are
	// snappy-encoded, never is.
	comp := &compressors{}
	router := route.New().WithInstrumentation(func(handler string, h http.HandlerFunc) http.HandlerFunc {
		if handler != "/read" {
			h = comp.wrap(h)
		}
		switch handler {
		case "/query", "/query_range", "/read":
			h = o.readsData(h)
		}
		return instrument(handler, h)
	}).WithPrefix(apiPrefix)
	papi.Register(router)

	metaHandler := metadataHandler(meta, cors, logger)
	return &API{
		engine:   engine,
		split:    split,
		pinned:   pinned,
		router:   router,
		routes:   routes,
		metadata: instrument(apiPrefix+"/metadata", comp.wrap(httputil.CompressionHandler{Handler: metaHandler}.ServeHTTP)),
		targets:  o.targets != nil,
		config: instrument(apiPrefix+"/status/config",
			comp.wrap(httputil.CompressionHandler{Handler: statusConfigHandler(cfg.ConfigYAML, cors, logger)}.ServeHTTP)),
		notFound: instrument(apiPrefix+"/*unsupported", func(w http.ResponseWriter, r *http.Request) {
			rejected.WithLabelValues("unsupported_endpoint").Inc()
			httputil.SetCORS(w, cors, r)
			writeError(w, logger, http.StatusNotFound, "not_found",
				fmt.Sprintf("endpoint %s is not served by Strata", r.URL.Path))
		}),
	}, nil
}

// Register adds every route of the API to mux, under /api/v1/. A request to
// any other path under /api/v1/ gets a Prometheus-style JSON 404, so routes
// registered on mux by others (for example /api/v1/write) must be more
// specific patterns than "/api/v1/", which every exact path is.
func (a *API) Register(mux *http.ServeMux) {
	for _, p := range a.routes {
		mux.Handle(apiPrefix+p, a.router)
	}
	if a.targets {
		mux.Handle(apiPrefix+"/targets", a.router)
	}
	mux.Handle(apiPrefix+"/metadata", a.metadata)
	mux.Handle(apiPrefix+"/status/config", a.config)
	mux.Handle(apiPrefix+"/", a.notFound)
}

// Engine returns the PromQL engine the HTTP API uses, with the limits of the
// Config (long range queries split, see Config.SplitParallelism), for other
// components that evaluate PromQL (the rule evaluator). Queries they run share
// the --query.max-concurrency slots with the HTTP API.
func (a *API) Engine() promql.QueryEngine { return a.split }

// PinnedExprs returns the engine's parser, in which a component that runs
// the same query strings over and over (the rule evaluator) pins them so
// that Engine parses each once.
func (a *API) PinnedExprs() *PinnedExprs { return a.pinned }

// Close stops the engine. Queries already running finish; none may be started
// afterwards.
func (a *API) Close() error {
	if err := a.engine.Close(); err != nil {
		return fmt.Errorf("close query engine: %w", err)
	}
	return nil
}

// errorResponse is the body of every error reply, field for field
// Prometheus' v1.Response for status "error".
type errorResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
}

// writeError answers as Prometheus' API does for an error: application/json,
// {"status":"error","errorType":...,"error":...}.
func writeError(w http.ResponseWriter, logger *slog.Logger, code int, errorType, msg string) {
	b, err := json.Marshal(errorResponse{Status: "error", ErrorType: errorType, Error: msg})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if _, err := w.Write(b); err != nil {
		logger.Debug("write error response", "err", err)
	}
}

// statusRecorder keeps the status code for the request counter. It forwards
// Flush because streamed remote read flushes every frame.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// emptyExemplars stands in when the storage keeps no exemplars, so that
// /api/v1/query_exemplars answers an empty list as Prometheus does with
// exemplar storage disabled.
type emptyExemplars struct{}

func (emptyExemplars) ExemplarQuerier(context.Context) (storage.ExemplarQuerier, error) {
	return emptyExemplars{}, nil
}

func (emptyExemplars) Select(int64, int64, ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	return []exemplar.QueryResult{}, nil // [] as Prometheus answers, not null
}

// WithQueryActivity calls f when a request that reads series data (an
// instant or range query, a remote read) starts and when it ends: strata
// serve keeps the raw chunk pages such requests map while they keep coming
// (its chunk page release).
func WithQueryActivity(f func()) Option {
	return func(o *options) { o.activity = f }
}

// readsData wraps a handler of requests that read series data with the
// WithQueryActivity calls.
func (o *options) readsData(h http.HandlerFunc) http.HandlerFunc {
	if o.activity == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		o.activity()
		defer o.activity()
		h(w, r)
	}
}
