package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/httputil"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/export"
	"github.com/strata-dev/strata/internal/diskspace"
	"github.com/strata-dev/strata/internal/mapped"
	"github.com/strata-dev/strata/query"
	"github.com/strata-dev/strata/remotewrite"
	"github.com/strata-dev/strata/storeapi"
	"github.com/strata-dev/strata/tiers"
)

type serveCommand struct {
	app        *kingpin.Application
	cmd        *kingpin.CmdClause
	configFile string
	logConfig  *promslog.Config
	flags      *overrides
	memory     memoryPolicy
}

func newServeCommand(app *kingpin.Application) *serveCommand {
	s := &serveCommand{
		app:       app,
		cmd:       app.Command("serve", "Run the remote-write receiver, the tiers and the Prometheus HTTP API.").Default(),
		logConfig: &promslog.Config{},
	}
	s.cmd.Flag("config.file", "Strata configuration file, read over the embedded default (see docs/configuration.md).").StringVar(&s.configFile)
	s.memory.flags(s.cmd, "")
	s.cmd.Flag("runtime.heap-pacer", "Lower the Go runtime's soft memory limit to --runtime.heap-pacer.headroom above the lowest live heap of the last 16 garbage collections, so that a collection during a burst (the diagnosis engine's minute, a rule's query) does not raise the heap's goal; only while GOGC alone would collect at most every 3 s (a paced fleet, not heavy ingest) and no query has run for 30 s (a dashboard's queries are collected at GOGC's goal); never above GOMEMLIMIT or --auto-gomemlimit's limit.").
		Default("true").BoolVar(&s.memory.pacer)
	s.cmd.Flag("runtime.heap-pacer.headroom", "Share of the baseline live heap the heap pacer lets the heap grow by between collections (GOGC's is GOGC/100, and it is never more): lower holds the heap closer to the live heap for more collections.").
		Default(strconv.FormatFloat(defaultPacerHeadroom, 'g', -1, 64)).Float64Var(&s.memory.pacerHeadroom)
	s.cmd.Flag("runtime.heap-pacer.interval", "Collection interval the heap pacer's headroom holds at: where the allocation rate would make collections at --runtime.heap-pacer.headroom come every T above it (a large heap allocated slowly), the headroom is sqrt(interval / T) of it, at least half, so that they come every sqrt(interval x T); 0 keeps the headroom at any rate (more memory, less CPU on a large paced fleet).").
		Default(defaultPacerInterval.String()).DurationVar(&s.memory.pacerInterval)
	s.cmd.Flag("runtime.heap-pacer.rise", "Time constant with which a rise of the allocation rate reaches the heap pacer (its headroom, and whether it steps aside for heavy ingest): a burst shorter than this (an hour's flush) is collected more often rather than given more heap; a fall is followed at once; 0 follows the last 16 collections' rate at once.").
		Default(defaultPacerRise.String()).DurationVar(&s.memory.pacerRise)
	o := &overrides{cmd: s.cmd}
	s.flags = o
	o.string("storage.path", "Directory holding every tier. (default: data)",
		func(c *Config) *string { return &c.Storage.Path })
	o.duration("storage.raw.retention", "How long per-second samples are kept. (default: 24h)",
		func(c *Config) *model.Duration { return &c.Storage.Raw.Retention })
	o.string("storage.raw.wal-compression", "How the raw tier's write-ahead log is compressed: snappy, zstd or none. (default: snappy)",
		func(c *Config) *string { return &c.Storage.Raw.WALCompression })
	o.string("storage.raw.wal-sample-records", "How the raw tier's write-ahead log records samples: v2 (SamplesV2 records, XOR2 chunks; read by Prometheus 3.15 and later) or v1 (Prometheus' default). (default: v2)",
		func(c *Config) *string { return &c.Storage.Raw.WALSampleRecords })
	o.int("storage.raw.samples-per-chunk", "Samples the raw tier's head aims to put in a chunk (Prometheus' --storage.tsdb.samples-per-chunk). (default: 120)",
		func(c *Config) *int { return &c.Storage.Raw.SamplesPerChunk })
	o.duration("storage.raw.block-duration", "Span of the raw tier's blocks; the head compacts at 1.5 times it (Prometheus' --storage.tsdb.min-block-duration). (default: 1h)",
		func(c *Config) *model.Duration { return &c.Storage.Raw.BlockDuration })
	o.duration("storage.minute.retention", "How long minute rollups are kept. (default: 30d)",
		func(c *Config) *model.Duration { return &c.Storage.Minute.Retention })
	o.duration("storage.hour.retention", "How long hourly rollups are kept. (default: 365d)",
		func(c *Config) *model.Duration { return &c.Storage.Hour.Retention })
	o.string("objstore.config-file", "objstore.yml (Thanos' format) putting the minute and hour tiers in object storage; empty: local disk. (default: none)",
		func(c *Config) *string { return &c.Storage.ObjStore.ConfigFile })
	o.bytes("storage.min-free-bytes", "Free disk space below which remote write, OTLP and scrapes are refused with 503 until it is back above it and a tenth; 0: no check. (default: 256MiB)",
		func(c *Config) *ByteSize { return &c.Storage.MinFreeBytes })
	o.duration("storage.out-of-order-time-window", "How far behind the newest sample a late sample is accepted; also the rollups' allowed lateness. (default: 10m)",
		func(c *Config) *model.Duration { return &c.Storage.OutOfOrderWindow })
	o.string("web.listen-address", "Address to listen on for the API, remote write and /metrics. (default: :9201)",
		func(c *Config) *string { return &c.Web.ListenAddress })
	o.string("web.config.file", "Path to a web configuration file enabling TLS and basic auth (exporter-toolkit format).",
		func(c *Config) *string { return &c.Web.ConfigFile })
	o.bool("web.enable-pprof", "Serve /debug/pprof for profiling.",
		func(c *Config) *bool { return &c.Web.EnablePprof })
	o.bool("web.enable-admin-api", "Enable the admin API: POST /api/v1/admin/tsdb/snapshot (a copy of every tier under <storage.path>/snapshots/).",
		func(c *Config) *bool { return &c.Web.EnableAdminAPI })
	o.bool("web.enable-lifecycle", "Enable shutdown and reload via HTTP request (POST /-/quit, POST /-/reload).",
		func(c *Config) *bool { return &c.Web.EnableLifecycle })
	o.duration("web.read-timeout", "Maximum time to read a request, body included. (default: 5m)",
		func(c *Config) *model.Duration { return &c.Web.ReadTimeout })
	o.string("web.external-url", "The URL under which Strata is externally reachable (for example, if Strata is served via a reverse proxy): the base of the links in the alerts it sends; if it has a path, every endpoint is served under it. (default: http://<hostname>:<port>)",
		func(c *Config) *string { return &c.Web.ExternalURL })
	o.string("web.route-prefix", "Prefix for the internal routes of web endpoints. (default: the path of --web.external-url)",
		func(c *Config) *string { return &c.Web.RoutePrefix })
	o.string("web.cors.origin", `Regex for CORS origin. It is fully anchored. Example: 'https?://(domain1|domain2)\.com'. (default: .*)`,
		func(c *Config) *string { return &c.Web.CORSOrigin })
	addRemoteWriteFlags(o)
	addRemoteReadFlags(o)
	addQueryFlags(o)
	addGRPCFlags(o)
	promslogflag.AddFlags(app, s.logConfig)
	return s
}

// server is a running `strata serve`: the tiers, the HTTP API and their wiring.
type server struct {
	cfg      Config
	logger   *slog.Logger
	reg      *prometheus.Registry
	raw      *tiers.Raw
	minute   *tiers.Rollup
	hour     *tiers.Rollup
	rollup   *downsample.Pipeline
	stitched *tiers.Stitched
	rawApp   storage.AppendableV2 // the raw tier through the rollup pipeline's tee
	disk     *diskspace.Guard     // refuses writes while the disk is nearly full; nil: no check
	meta     *remotewrite.MetadataStore
	write    *remotewrite.Handler
	otlp     *remotewrite.OTLPHandler
	api      *query.API
	targets  *scrapeTargets        // the scraper's targets, for /api/v1/targets
	export   http.Handler          // GET /api/v1/export
	federate http.Handler          // GET /federate
	rules    *ruleSources          // /api/v1/rules and /api/v1/alerts
	ams      *alertmanagers        // /api/v1/alertmanagers
	diag     *diagSource           // /api/v1/diagnoses
	queried  atomic.Int64          // when a query or remote read last started or ended (Unix ns)
	arc      *archiveSource        // the case archive, for /api/v1/diagnoses/{id}/feedback
	store    *storeapi.Server      // the Thanos StoreAPI; nil when grpc.listen_address is empty
	queryAPI *storeapi.QueryServer // the Thanos Query API; nil when off (grpc.query_api)
	ready    atomic.Bool
	// reloadRules loads the operator's rule files again (SIGHUP); nil
	// until the rule manager has started.
	reloadRules atomic.Pointer[func(files []string) error]
	// reload and quit serve POST /-/reload and POST /-/quit when
	// web.enable_lifecycle is on: a reloader's reload, and the shutdown
	// (false: one was already requested). nil: the endpoints answer 503.
	reload func() error
	quit   func() bool
	snapMu sync.Mutex // one snapshot at a time
	// ext is the external URL (web.external_url), set when serve listens.
	ext    *url.URL
	closer []func() error // run in reverse order on shutdown
}

// config reads the configuration: the embedded default, the file, the
// flags given.
func (s *serveCommand) config() (Config, error) {
	cfg, err := loadConfig(s.configFile)
	if err != nil {
		return Config{}, err
	}
	s.flags.applyTo(&cfg)
	if err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

func (s *serveCommand) run() error {
	cfg, err := s.config()
	if err != nil {
		return err
	}
	cfg.flags = statusFlags(s.app, s.cmd.FullCommand(), s.flags, &cfg)
	logger := promslog.New(s.logConfig)
	if err := s.memory.apply(memorySources{root: "/"}, logger); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// POST /-/quit (web.enable_lifecycle) ends the server as SIGTERM does.
	ctx, quit := context.WithCancel(ctx)
	defer quit()
	// SIGHUP reloads the rule files and the alerting section, as it does
	// Prometheus' (Go's default for it ends the process, which an operator
	// used to Prometheus does not expect); one during the start waits for
	// it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	srv, err := startServer(cfg, logger)
	if err != nil {
		return err
	}
	// After startServer: the remote-write handler's heap gate has read the
	// configured limit, not the pacer's. It paces until the server has
	// closed, not until the signal: the closers' work (the rollup
	// pipeline's last tick, which may write an hour's partition) ran under
	// GOGC's goal alone, and a shutdown at 500,000 series took the RSS
	// from 1,546 to 2,349 MiB (docs/bench.md, stop 42).
	paceCtx, stopPacing := context.WithCancel(context.Background())
	defer stopPacing()
	go s.memory.paceHeap(paceCtx, srv.reg, srv.queriedRecently)
	r := newReloader(s, srv)
	srv.reload = r.reload
	var quitting atomic.Bool
	srv.quit = func() bool {
		if quitting.Swap(true) {
			return false
		}
		srv.logger.Warn("termination requested through POST /-/quit; shutting down")
		quit()
		return true
	}
	go r.onHangup(ctx, hup)
	return srv.serve(ctx)
}

func startServer(cfg Config, logger *slog.Logger) (srv *server, err error) {
	// The PromQL engine times each stage of a query (queue, prepare, eval,
	// sort) with a span from OpenTelemetry's global tracer, and Strata
	// exports no traces. Without a provider that tracer allocates every
	// span (about 30 allocations, 3 KB, per dashboard query, a fifteenth of
	// what its evaluation allocates); the no-op provider, which Prometheus
	// installs when tracing is off, does not.
	otel.SetTracerProvider(noop.NewTracerProvider())
	start := time.Now().UTC()
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("strata"),
	)
	srv = &server{cfg: cfg, logger: logger, reg: reg, rules: &ruleSources{}, ams: &alertmanagers{}, diag: &diagSource{}, arc: &archiveSource{}}
	// On error the returned srv is nil, so the deferred cleanup closes what
	// was opened through its own reference.
	opened := srv
	defer func() {
		if err != nil {
			err = errors.Join(err, opened.close())
		}
	}()

	if err := os.MkdirAll(cfg.Storage.Path, 0o750); err != nil {
		return nil, fmt.Errorf("create storage path: %w", err)
	}
	st, err := openTiers(cfg, logger, prometheus.WrapRegistererWithPrefix(rawMetricPrefix, reg), reg)
	if err != nil {
		return nil, err
	}
	srv.raw, srv.minute, srv.hour = st.raw, st.minute, st.hour
	srv.closer = append(srv.closer, st.close)
	// The raw tier's directory too, in case it is a mount of its own.
	srv.disk = diskspace.New(int64(cfg.Storage.MinFreeBytes), []string{cfg.Storage.Path, srv.raw.DB().Dir()},
		logger.With("component", "diskspace"), reg)
	removeLeftoverSpools(filepath.Join(cfg.Storage.Path, rollupSpillDir), "", logger)
	dsCfg := downsample.DefaultConfig()
	dsCfg.Lateness = time.Duration(cfg.Storage.OutOfOrderWindow)
	dsCfg.MinuteRetention = time.Duration(cfg.Storage.Minute.Retention)
	// The open hours' minute windows wait in files (the page cache), not
	// the heap: docs/rollups.md, "Memory".
	dsCfg.SpillDir = filepath.Join(cfg.Storage.Path, rollupSpillDir)
	if cfg.Diagnose.Enabled {
		// An hour waits for the engine's baselines, which it writes again
		// after a restart (docs/diagnosis.md, "Baseline series").
		dsCfg.DirectGrace = downsample.DefaultDirectGrace
	}
	if dsCfg.KindOf, err = rollupTyping(); err != nil {
		return nil, err
	}
	srv.rollup, err = downsample.New(dsCfg, srv.raw, srv.minute, srv.hour, logger, reg, time.Now)
	if err != nil {
		return nil, err
	}
	// Closed before the tiers it writes (closers run in reverse order).
	srv.closer = append(srv.closer, srv.rollup.Close)
	// Every writer of the raw tier appends through the pipeline's tee, which
	// hands committed samples to the rollups so they need not re-read raw.
	srv.rawApp = srv.rollup.Tee(srv.raw)

	srv.meta, err = remotewrite.OpenMetadataStore(filepath.Join(cfg.Storage.Path, "metadata.json"))
	if err != nil {
		return nil, err
	}
	if err := srv.meta.Recovered(); err != nil {
		logger.Error("remote-write metadata was corrupt and is set aside", "err", err)
	}
	srv.meta.RegisterMetrics(reg)
	srv.closer = append(srv.closer, srv.meta.Close)
	rwCfg := cfg.remoteWrite()
	// The series cache holds the whole fleet: the raw head's series.
	rwCfg.StorageSeries = srv.raw.HeadSeries
	if srv.disk != nil {
		rwCfg.StorageGate = srv.disk.Err
	}
	srv.write, err = remotewrite.NewHandler(rwCfg, srv.rawApp, srv.meta, logger.With("component", "remotewrite"), reg, time.Now)
	if err != nil {
		return nil, err
	}
	otlpCfg, err := cfg.otlpConfig()
	if err != nil {
		return nil, err
	}
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		return nil, err
	}
	srv.otlp, err = remotewrite.NewOTLPHandler(srv.write, remotewrite.OTLPConfig{
		Translation:       otlpCfg,
		LookbackDelta:     time.Duration(cfg.Query.LookbackDelta),
		MaxAge:            time.Duration(cfg.Storage.Raw.Retention),
		Names:             otlpNames(cat, otlpCfg),
		DeltaToCumulative: cfg.RemoteWrite.OTLPDeltaToCumulative,
		DeltaMaxStreams:   cfg.RemoteWrite.OTLPDeltaMaxStreams,
		DeltaMaxStale:     time.Duration(cfg.RemoteWrite.OTLPDeltaMaxStale),
	}, reg)
	if err != nil {
		return nil, err
	}
	srv.closer = append(srv.closer, srv.otlp.Close)

	stitchOpts := []tiers.StitchOption{tiers.WithLookbackDelta(time.Duration(cfg.Query.LookbackDelta))}
	if cfg.Diagnose.Enabled {
		// The engine writes its baselines to the minute tier alone (diagnose.go).
		stitchOpts = append(stitchOpts, tiers.WithMinuteOnlyNames(diagnose.BaselineSeriesNames(), srv.rollup.DirectWindows()))
	}
	srv.stitched = tiers.NewStitched(srv.raw, srv.minute, srv.hour, stitchOpts...)
	if err := srv.stitched.RegisterMetrics(reg); err != nil {
		return nil, err
	}
	srv.targets = &scrapeTargets{}
	ext, err := cfg.externalLabels()
	if err != nil {
		return nil, err
	}
	qcfg := cfg.query()
	qcfg.ExternalLabels = ext
	qcfg.Rules, qcfg.Alertmanagers = srv.rules, srv.ams
	if qcfg.ConfigYAML, err = cfg.statusYAML(); err != nil {
		return nil, err
	}
	qcfg.Flags = cfg.flags
	extURL, err := cfg.externalURL(cfg.Web.ListenAddress)
	if err != nil {
		return nil, err
	}
	if qcfg.ResultsCacheSize > 0 {
		srv.raw.TrackLateAppends(qcfg.ResultsCacheFreshness, nil)
	}
	srv.api, err = query.New(qcfg, srv.stitched, srv.meta, logger.With("component", "query"), reg,
		query.WithResultsCache(srv.stitched),
		query.WithTargets(srv.targets, cfg.Web.ListenAddress, extURL),
		query.WithRawStatus(srv.raw, reg, rawMetricPrefix),
		query.WithRuntimeInfo(runtimeInfo(cfg, start, reg)),
		query.WithQueryActivity(srv.markQueried))
	if err != nil {
		return nil, err
	}
	srv.closer = append(srv.closer, srv.api.Close)
	srv.federate = httputil.CompressionHandler{Handler: query.NewFederation(srv.stitched, srv.api.PinnedExprs(), ext,
		time.Duration(cfg.Query.LookbackDelta), time.Now, logger.With("component", "federate"), reg)}
	ex, _, err := openExporter(cfg, logger, srv.minute, srv.hour, srv.api.Engine(), srv.meta)
	if err != nil {
		return nil, err
	}
	srv.export = export.NewHandler(ex, export.CapacityConfig{}, logger.With("component", "export"), time.Now)
	if cfg.GRPC.ListenAddress != "" {
		scfg, err := cfg.storeAPI()
		if err != nil {
			return nil, err
		}
		if srv.store, err = storeapi.New(scfg, srv.stitched, logger.With("component", "storeapi"), reg); err != nil {
			return nil, err
		}
		if cfg.GRPC.QueryAPI {
			srv.queryAPI = storeapi.NewQueryServer(srv.store, srv.api.Engine(), srv.stitched)
			if scfg.ExternalLabels.IsEmpty() {
				logger.Warn("the Query API is served without external labels: a distributed Thanos Querier over several nodes needs labels that tell them apart (global.external_labels), or it takes their answers for duplicates")
			}
		}
	}
	if cfg.Diagnose.Enabled {
		if _, err := srv.openArchive(logger.With("component", "diagnose")); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	s.api.Register(mux)
	mux.Handle("/api/v1/write", s.write)
	mux.Handle("/api/v1/otlp/v1/metrics", s.otlp)
	mux.Handle("GET /api/v1/status/tiers", tiers.NewStatusHandler(s.stitched))
	mux.Handle("GET /api/v1/export", s.export)
	mux.Handle("GET /federate", s.federate)
	mux.Handle("/api/v1/admin/tsdb/snapshot", s.snapshotHandler())
	diag := diagnose.NewHandler(s.diag, time.Now)
	mux.Handle("GET /api/v1/diagnoses", diag)
	mux.Handle("GET /api/v1/diagnoses/{id}", diag)
	mux.Handle("POST /api/v1/diagnoses/{id}/feedback", s.arc)
	mux.HandleFunc("GET /diagnoses/{id}", diagnosisPage(s.diag, s.base))
	mux.HandleFunc("GET /diagnoses", diagnosesPage(s.diag, s.cfg.Diagnose.Enabled))
	mux.Handle("GET /graph", graphPage(mux))
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = fmt.Fprintln(w, "Strata is Healthy.")
	})
	s.lifecycle(mux)
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, "Strata is not ready.")
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = fmt.Fprintln(w, "Strata is Ready.")
	})
	if s.cfg.Web.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "Strata: Prometheus remote write at /api/v1/write, the Prometheus HTTP API at /api/v1/, metrics at /metrics, the diagnoses at /diagnoses.")
	})
	return mux
}

// routed serves h under prefix (web.route_prefix; "" serves it as it is),
// as Prometheus' router does: the root redirects to the prefix, any other
// path outside it is a 404.
func routed(prefix string, h http.Handler) http.Handler {
	if prefix == "" {
		return h
	}
	strip := http.StripPrefix(prefix, h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case strings.HasPrefix(p, prefix+"/"):
			strip.ServeHTTP(w, r)
		case p == "/" || p == prefix:
			http.Redirect(w, r, prefix+"/", http.StatusFound)
		default:
			http.Error(w, fmt.Sprintf("404 page not found: Strata serves its endpoints under %s/ (web.route_prefix)", prefix), http.StatusNotFound)
		}
	})
}

func (s *server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
}

// serve listens until ctx ends (SIGINT or SIGTERM), then shuts down gracefully:
// it stops accepting requests, lets those in flight finish, and closes the tiers
// so that everything acknowledged is flushed.
func (s *server) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln, err := net.Listen("tcp", s.cfg.Web.ListenAddress)
	if err != nil {
		return errors.Join(fmt.Errorf("listen on %s: %w", s.cfg.Web.ListenAddress, err), s.close())
	}
	ext, err := s.cfg.externalURL(ln.Addr().String())
	if err != nil {
		_ = ln.Close()
		return errors.Join(err, s.close())
	}
	prefix := s.cfg.routePrefix(ext)
	s.ext = ext
	httpSrv := &http.Server{
		Handler:           routed(prefix, s.handler()),
		ReadTimeout:       time.Duration(s.cfg.Web.ReadTimeout),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelError),
	}
	webFlags := &web.FlagConfig{
		WebListenAddresses: &[]string{s.cfg.Web.ListenAddress},
		WebSystemdSocket:   new(bool),
		WebConfigFile:      &s.cfg.Web.ConfigFile,
	}
	errc := make(chan error, 3) // HTTP, StoreAPI, OTLP gRPC
	stopGRPC, err := s.serveGRPC(errc)
	if err != nil {
		_ = ln.Close()
		return errors.Join(err, s.close())
	}
	go func() { errc <- web.Serve(ln, httpSrv, webFlags, s.logger) }()
	s.ready.Store(true)
	s.logger.Info("Strata started", "address", ln.Addr().String(), "route_prefix", prefix+"/", "external_url", ext.String(), "storage", s.cfg.Storage.Path)
	go s.saveMetadataEvery(ctx, time.Minute)
	if err := s.startBackground(ctx, ln.Addr().String(), ext); err != nil {
		cancel()
		stopGRPC()
		_ = httpSrv.Close()
		return errors.Join(err, s.close())
	}
	rollupDone := make(chan struct{})
	go func() {
		defer close(rollupDone)
		if err := s.rollup.Run(ctx); err != nil {
			s.logger.Error("rollup pipeline stopped", "err", err)
		}
	}()
	go s.applyRetentionEvery(ctx, 10*time.Minute)
	if s.disk != nil {
		go every(ctx, time.Second, s.disk.Check)
	}
	releaseDone := make(chan struct{})
	go func() {
		defer close(releaseDone)
		s.releaseChunkPages(ctx)
	}()

	var serveErr error
	select {
	case <-ctx.Done():
		s.logger.Info("shutting down")
	case serveErr = <-errc:
		if errors.Is(serveErr, http.ErrServerClosed) {
			serveErr = nil
		}
	}
	s.ready.Store(false)
	cancel()
	<-rollupDone
	<-releaseDone
	stopGRPC() // before the tiers close
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		serveErr = errors.Join(serveErr, fmt.Errorf("shut down http server: %w", err))
	}
	serveErr = errors.Join(serveErr, s.close())
	if serveErr == nil {
		s.logger.Info("Strata stopped cleanly")
	}
	return serveErr
}

// startBackground starts what needs the listening address: rule evaluation
// and scraping (Strata's own /metrics included). ext is the external URL
// (web.external_url), the base of the alerts' links and $externalURL.
func (s *server) startBackground(ctx context.Context, addr string, ext *url.URL) error {
	am, err := s.startAlertmanagers(ext)
	if err != nil {
		return err
	}
	mgr, stopRules, reload, err := startRules(ctx, s.cfg, s.api.Engine(), s.api.PinnedExprs(), s.stitched, s.rawApp, am, ext,
		s.logger.With("component", "rules"), prometheus.WrapRegistererWithPrefix("strata_rules_", s.reg))
	if err != nil {
		return err
	}
	s.reloadRules.Store(&reload)
	s.closer = append(s.closer, func() error { stopRules(); return nil })
	s.rules.set(mgr, nil)
	if err := s.startDiagnose(ctx, ext); err != nil {
		return err
	}
	return s.startScraper(ctx, addr)
}

// saveMetadataEvery folds the remote-write metadata's change log into its
// snapshot periodically (Close does too). Acknowledged metadata is durable
// without it: the handler logs it before the 2xx.
func (s *server) saveMetadataEvery(ctx context.Context, period time.Duration) {
	every(ctx, period, func() {
		if err := s.meta.Save(); err != nil {
			s.logger.Error("save metadata", "err", err)
		}
	})
}

// every calls fn once a period until ctx is done.
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// applyRetentionEvery deletes rollup partitions past their tier's retention.
// (The raw TSDB applies its own retention when it compacts.)
func (s *server) applyRetentionEvery(ctx context.Context, period time.Duration) {
	apply := func() {
		for _, tier := range []*tiers.Rollup{s.minute, s.hour} {
			if n, err := tier.ApplyRetention(); err != nil {
				s.logger.Error("apply rollup retention", "tier", tier.Config().Name, "err", err)
			} else if n > 0 {
				s.logger.Info("deleted rollup partitions past retention", "tier", tier.Config().Name, "partitions", n)
			}
		}
	}
	apply()
	every(ctx, period, apply)
}

// The raw head's chunk file pages that reads mapped are released once the
// process's shared resident set has grown by chunkPageReleaseGrowth since
// the last release, and at least every chunkPageReleasePeriod; it is
// polled every chunkPageReleaseCheck, and every chunkPageReleaseBurstCheck
// for chunkPageReleaseBurst after a release growth made due.
//
// The canonical rules read the last two minutes of every series they use
// every 15 s, and the diagnosis engine's minute reads the windows of the
// last minutes of every sparse series from raw. Every series of the head
// cuts its chunk at once at the raw tier's block boundaries (every UTC
// hour with storage.raw.block_duration's default; the TSDB's default is
// two hours) and, on a fleet whose series all started together, every 120
// samples; for minutes after such a cut the reads read the old chunks back
// through the mapping. One touch maps a whole large folio of the page
// cache (1-2 MiB on ext4 here, whatever the madvise advice), so a walk
// maps about 12 KiB a series read: the chunk file just written (128 MiB at
// 500,000 series) within a second. A release every 15 s alone kept that
// mapped for most of six minutes at 500,000 series of 15 s and made
// Strata's peak; polled every 100 ms, one evaluation still mapped most of
// it between two polls (docs/bench.md, stop 36); polled every 10 ms, or
// also each time the raw tier's queriers had handed out 512 series (tried
// in stop 37 and reverted), the chunk files were still mapped up to 134
// and 197 MB at once after a cut at 500,000 series (docs/bench.md, stop
// 37), and so they were with a signal every 512 series read (stop 65,
// reverted): a rule reads one metric's series, spread across the files,
// and each read maps a whole folio, so no poll bounds it
// (BenchmarkReleaseUnderReads reader=sparse); only fewer reads of cut
// chunks, or smaller folios, would. A poll costs about 20 us
// (BenchmarkSharedResident), a release 0.1-0.4 ms
// (BenchmarkRawReleaseChunkPages); the next reads map again what they
// touch.
//
// While the server is queried (queriedRecently) no release is made.
const (
	chunkPageReleaseCheck      = 100 * time.Millisecond
	chunkPageReleaseBurstCheck = 10 * time.Millisecond
	chunkPageReleaseBurst      = 2 * time.Second
	chunkPageReleaseGrowth     = 8 << 20
	chunkPageReleasePeriod     = 15 * time.Second
)

// queryHold is how long after a query the server counts as queried
// (queriedRecently).
const queryHold = 30 * time.Second

// markQueried records that a request reading series data (an instant or
// range query, a remote read, a StoreAPI or Query API stream) started or
// ended now.
func (s *server) markQueried() { s.queried.Store(time.Now().UnixNano()) }

// queriedRecently reports whether such a request ran within queryHold of
// now. A dashboard asks its panels again every few seconds over the same
// hours, so while it does the server spends memory as Prometheus does to
// answer them: the raw head's chunk pages the queries map stay mapped (a
// release made each query map all of its chunks again, with a page fault
// each), and the heap pacer steps aside for GOGC's goal (its tighter goal
// collected the queries' garbage more often). Measured with 70 minutes of
// 10,000 series of 1 s, the server CPU of a 1 h dashboard fell from
// 1.22-1.30x Prometheus' to 0.86-1.13x, and with the pages kept alone that
// of a 1 d dashboard served from raw from 1.02-1.34x to 0.95-0.98x
// (docs/bench.md, stop 67). The rules, the
// diagnosis engine and ingestion do not count: a server that nobody
// queries keeps both as before.
func (s *server) queriedRecently(now time.Time) bool {
	return now.Sub(time.Unix(0, s.queried.Load())) < queryHold
}

// releaseChunkPages drops the process's mappings of the raw head's chunk
// file pages and of the raw blocks' files (tiers.Raw.ReleaseChunkPages)
// when a mapped.Trigger says so: without it every chunk a rule or query
// read stayed in the resident set until the head's truncation (or the
// block's deletion), growing it by what was written (docs/rollups.md,
// "Memory").
func (s *server) releaseChunkPages(ctx context.Context) {
	tr := mapped.Trigger{
		Grow: chunkPageReleaseGrowth, Every: chunkPageReleasePeriod,
		Poll: chunkPageReleaseCheck, BurstPoll: chunkPageReleaseBurstCheck, Burst: chunkPageReleaseBurst,
		Hold: s.queriedRecently,
	}
	tr.Run(ctx, func() {
		if _, err := s.raw.ReleaseChunkPages(); err != nil {
			s.logger.Warn("release raw chunk pages", "err", err)
		}
	})
}

func (s *server) close() error {
	var errs []error
	for i := len(s.closer) - 1; i >= 0; i-- {
		errs = append(errs, s.closer[i]())
	}
	s.closer = nil
	return errors.Join(errs...)
}

func addRemoteWriteFlags(o *overrides) {
	o.bytes("remote-write.max-body-bytes", "Largest compressed remote-write request accepted. (default: 32MiB)",
		func(c *Config) *ByteSize { return &c.RemoteWrite.MaxBodyBytes })
	o.bytes("remote-write.max-decompressed-bytes", "Largest decompressed remote-write request accepted, checked before decoding. (default: 128MiB)",
		func(c *Config) *ByteSize { return &c.RemoteWrite.MaxDecompressedBytes })
	o.int("remote-write.max-labels-per-series", "Most labels a series may carry. (default: 64)",
		func(c *Config) *int { return &c.RemoteWrite.MaxLabelsPerSeries })
	o.int("remote-write.max-label-name-length", "Longest label name accepted, in bytes. (default: 1024)",
		func(c *Config) *int { return &c.RemoteWrite.MaxLabelNameLength })
	o.int("remote-write.max-label-value-length", "Longest label value accepted, in bytes. (default: 4096)",
		func(c *Config) *int { return &c.RemoteWrite.MaxLabelValueLength })
	o.duration("remote-write.max-future-skew", "How far in the future a sample's timestamp may be. (default: 10m)",
		func(c *Config) *model.Duration { return &c.RemoteWrite.MaxFutureSkew })
	o.int("remote-write.max-inflight-requests", "Remote-write requests handled at once; more get 429. (default: 64)",
		func(c *Config) *int { return &c.RemoteWrite.MaxInflightRequests })
	o.bytes("remote-write.max-inflight-bytes", "Compressed bytes of remote-write requests handled at once; more get 429. (default: 512MiB)",
		func(c *Config) *ByteSize { return &c.RemoteWrite.MaxInflightBytes })
	o.int("remote-write.max-active-requests", "Remote-write requests that decode and append at once; the other in-flight ones wait. 0: twice the CPUs, at least 4. (default: 0)",
		func(c *Config) *int { return &c.RemoteWrite.MaxActiveRequests })
	o.duration("remote-write.max-queue-wait", "How long an in-flight remote-write request waits to become active before it gets 429. (default: 10s)",
		func(c *Config) *model.Duration { return &c.RemoteWrite.MaxQueueWait })
	o.bytes("remote-write.max-heap-bytes", "Live Go heap past which remote writes get 429 with Retry-After; 0: 80% of GOMEMLIMIT, -1: no such gate. (default: 0)",
		func(c *Config) *ByteSize { return &c.RemoteWrite.MaxHeapBytes })
	o.int("remote-write.series-cache-size", "Most series a generation of the remote-write series cache holds; within it the cache holds the raw head's series plus an eighth. -1: no cache. (default: 4194304)",
		func(c *Config) *int { return &c.RemoteWrite.SeriesCacheSize })
	o.bool("remote-write.otlp-delta-to-cumulative", "Convert OTLP sums and histograms of delta temporality to cumulative in memory (Prometheus' otlp-deltatocumulative feature) instead of refusing them.",
		func(c *Config) *bool { return &c.RemoteWrite.OTLPDeltaToCumulative })
	o.int("remote-write.otlp-delta-max-streams", "Most OTLP delta streams whose running totals are held; a new one beyond is refused. (default: 250000)",
		func(c *Config) *int { return &c.RemoteWrite.OTLPDeltaMaxStreams })
	o.duration("remote-write.otlp-delta-max-stale", "How long an OTLP delta stream without a point keeps its running total. (default: 5m)",
		func(c *Config) *model.Duration { return &c.RemoteWrite.OTLPDeltaMaxStale })
}

func addRemoteReadFlags(o *overrides) {
	o.int("storage.remote.read-sample-limit", "Most samples one sampled (non-streamed) remote read may return; 0 means no limit. (default: 50000000)",
		func(c *Config) *int { return &c.RemoteRead.SampleLimit })
	o.int("storage.remote.read-concurrent-limit", "Remote reads served at once; 0 means no limit. (default: 10)",
		func(c *Config) *int { return &c.RemoteRead.ConcurrentLimit })
	o.bytes("storage.remote.read-max-bytes-in-frame", "Largest frame of a streamed remote read, in bytes or with a unit (1MiB). (default: 1MiB)",
		func(c *Config) *ByteSize { return &c.RemoteRead.MaxBytesInFrame })
}

func addQueryFlags(o *overrides) {
	o.duration("query.timeout", "Maximum time a query may take before it is aborted (503). (default: 2m)",
		func(c *Config) *model.Duration { return &c.Query.Timeout })
	o.int("query.max-samples", "Most samples a query may load into memory (422 beyond). (default: 50000000)",
		func(c *Config) *int { return &c.Query.MaxSamples })
	o.int("query.max-concurrency", "Queries executed at once; others wait until their timeout. (default: 20)",
		func(c *Config) *int { return &c.Query.MaxConcurrency })
	o.duration("query.lookback-delta", "How far back an instant selector looks for a sample. (default: 5m)",
		func(c *Config) *model.Duration { return &c.Query.LookbackDelta })
	o.int("query.split-parallelism", "Parts a range query of 2,000 steps or more is split into, evaluated in parallel; 0 = one per CPU, 1 = never split. (default: 0)",
		func(c *Config) *int { return &c.Query.SplitParallelism })
	o.bytes("query.results-cache-size", "Memory for the steps of range query answers that can no longer change, so that a refreshed dashboard evaluates only its newest steps; 0 turns the cache off. (default: 32MiB)",
		func(c *Config) *ByteSize { return &c.Query.ResultsCacheSize })
	o.duration("query.results-cache-freshness", "How far behind now a step must be for the results cache to keep it; samples arriving later than that empty it of what they may change. (default: 5m)",
		func(c *Config) *model.Duration { return &c.Query.ResultsCacheFreshness })
}
