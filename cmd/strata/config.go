package main

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/units"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"gopkg.in/yaml.v3"

	"github.com/strata-dev/strata/dcgmbridge/rulegen"
	"github.com/strata-dev/strata/dcgmbridge/scrape"
	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/diagnose/archive"
	"github.com/strata-dev/strata/diagnose/notify"
	"github.com/strata-dev/strata/query"
	"github.com/strata-dev/strata/remotewrite"
	"github.com/strata-dev/strata/storeapi"
)

//go:embed default.yml
var defaultConfigYAML []byte

// Config is `strata serve`'s configuration: the embedded default.yml, then the
// --config.file over it, then flags set on the command line. docs/configuration.md
// documents every key.
type Config struct {
	Global      GlobalConfig      `yaml:"global"`
	Storage     StorageConfig     `yaml:"storage"`
	Web         WebConfig         `yaml:"web"`
	RemoteWrite RemoteWriteConfig `yaml:"remote_write"`
	RemoteRead  RemoteReadConfig  `yaml:"remote_read"`
	Query       QueryConfig       `yaml:"query"`
	GRPC        GRPCConfig        `yaml:"grpc"`
	Rules       RulesConfig       `yaml:"rules"`
	SelfScrape  SelfScrapeConfig  `yaml:"self_scrape"`
	Sources     scrape.Config     `yaml:"sources"`
	Diagnose    DiagnoseSection   `yaml:"diagnose"`
	// Alerting is Prometheus' `alerting:` section, parsed by Prometheus'
	// configuration code (see alertingConfig).
	Alerting yaml.Node `yaml:"alerting"`
	// OTLP is Prometheus' `otlp:` section (how OTLP metrics become
	// series), parsed by Prometheus' configuration code (see otlpConfig).
	OTLP yaml.Node `yaml:"otlp"`

	// flags are the command line's flags and their effective values, for
	// /api/v1/status/flags (statusFlags); not part of the file.
	flags map[string]string
	// dir is the configuration file's directory ("": none), against which
	// the paths Prometheus reads relative to its configuration file are
	// resolved (relativeToFile).
	dir string
}

// DiagnoseSection is the `diagnose:` section: the engine's configuration
// and, under `archive:`, the case archive's (docs/configuration.md).
type DiagnoseSection struct {
	diagnose.Config `yaml:",inline"`
	Archive         archive.Config `yaml:"archive"`
}

// GlobalConfig holds what identifies this node among others, as in
// Prometheus' `global:` section.
type GlobalConfig struct {
	// ExternalLabels tell a Thanos Querier in front of several Strata nodes
	// which node (shard, replica) a series comes from (docs/scale-out.md);
	// /federate and remote read add them too, as Prometheus does.
	ExternalLabels map[string]string `yaml:"external_labels"`
}

// GRPCConfig is the Thanos StoreAPI endpoint (storeapi package).
type GRPCConfig struct {
	// ListenAddress enables the StoreAPI; empty leaves it off.
	ListenAddress string `yaml:"listen_address"`
	// TLS as Thanos components take it: cert and key enable TLS, client_ca
	// requires client certificates signed by it.
	TLSCert     string `yaml:"tls_cert"`
	TLSKey      string `yaml:"tls_key"`
	TLSClientCA string `yaml:"tls_client_ca"`
	// MaxConcurrency bounds the StoreAPI requests served at once; MaxSeries
	// and MaxSamples bound one Series request (0: no bound).
	MaxConcurrency int `yaml:"max_concurrency"`
	MaxSeries      int `yaml:"max_series"`
	MaxSamples     int `yaml:"max_samples"`
	// QuerierLookbackDelta and QuerierDynamicLookbackDelta repeat the Thanos
	// Querier's --query.lookback-delta and --query.dynamic-lookback-delta,
	// so that plain selectors over the hour tier send only the samples the
	// Querier's lookback needs (docs/scale-out.md).
	QuerierLookbackDelta        model.Duration `yaml:"querier_lookback_delta"`
	QuerierDynamicLookbackDelta bool           `yaml:"querier_dynamic_lookback_delta"`
	// QueryAPI also serves Thanos' Query API on the same address, for a
	// Querier in distributed mode (--query.mode=distributed).
	QueryAPI bool `yaml:"query_api"`
}

// RulesConfig selects the recording rules Strata evaluates.
type RulesConfig struct {
	Canonical           bool           `yaml:"canonical"`
	CanonicalInterval   model.Duration `yaml:"canonical_interval"`
	CanonicalRateWindow model.Duration `yaml:"canonical_rate_window"`
	CanonicalJoin       string         `yaml:"canonical_join"`
	Files               []string       `yaml:"files"`
}

// SelfScrapeConfig makes Strata store its own metrics.
type SelfScrapeConfig struct {
	Enabled  bool           `yaml:"enabled"`
	Interval model.Duration `yaml:"interval"`
}

// StorageConfig places the tiers and sets their retention.
type StorageConfig struct {
	Path             string         `yaml:"path"`
	OutOfOrderWindow model.Duration `yaml:"out_of_order_time_window"`
	// MinFreeBytes: writes are refused (503) while the storage's disk has
	// less free space (internal/diskspace); 0 switches the check off.
	MinFreeBytes ByteSize       `yaml:"min_free_bytes"`
	Raw          RawTierConfig  `yaml:"raw"`
	Minute       TierConfig     `yaml:"minute"`
	Hour         TierConfig     `yaml:"hour"`
	ObjStore     ObjStoreConfig `yaml:"objstore"`
}

// ObjStoreConfig puts the minute and hour tiers in object storage.
type ObjStoreConfig struct {
	// ConfigFile is an objstore.yml (Thanos' format); empty keeps the
	// rollup tiers on local disk only.
	ConfigFile string `yaml:"config_file"`
	// LocalCacheBytes bounds the uploaded partition files each rollup tier
	// keeps on local disk.
	LocalCacheBytes ByteSize `yaml:"local_cache_bytes"`
	// PendingWarnBytes: files waiting for upload beyond this are warned
	// about at each failed attempt.
	PendingWarnBytes ByteSize `yaml:"pending_warn_bytes"`
}

// RawTierConfig is the raw tier's retention, WAL compression and sample
// records, and isolation.
type RawTierConfig struct {
	Retention model.Duration `yaml:"retention"`
	// WALCompression: tiers.RawConfig.WALCompression (snappy, zstd or none).
	WALCompression string `yaml:"wal_compression"`
	// WALSampleRecords: v2 sets tiers.RawConfig.SampleRecordsV2, v1
	// writes the TSDB's original sample records (Prometheus' default).
	WALSampleRecords string `yaml:"wal_sample_records"`
	// Isolation: tiers.RawConfig.Isolation.
	Isolation bool `yaml:"isolation"`
	// SamplesPerChunk: tiers.RawConfig.SamplesPerChunk.
	SamplesPerChunk int `yaml:"samples_per_chunk"`
	// BlockDuration: tiers.RawConfig.BlockDuration.
	BlockDuration model.Duration `yaml:"block_duration"`
}

// TierConfig is one tier's retention.
type TierConfig struct {
	Retention model.Duration `yaml:"retention"`
}

// WebConfig is the HTTP server's configuration.
type WebConfig struct {
	ListenAddress string `yaml:"listen_address"`
	ConfigFile    string `yaml:"config_file"`
	EnablePprof   bool   `yaml:"enable_pprof"`
	// EnableLifecycle serves POST /-/reload and /-/quit, as Prometheus'
	// --web.enable-lifecycle.
	EnableLifecycle bool `yaml:"enable_lifecycle"`
	// EnableAdminAPI serves POST /api/v1/admin/tsdb/snapshot, as
	// Prometheus' --web.enable-admin-api.
	EnableAdminAPI bool           `yaml:"enable_admin_api"`
	ReadTimeout    model.Duration `yaml:"read_timeout"`
	// CORSOrigin: query.Config.CORSOrigin.
	CORSOrigin string `yaml:"cors_origin"`
	// ExternalURL is where users reach Strata (behind a reverse proxy,
	// say), as Prometheus' --web.external-url: the base of the links in
	// the alerts it sends and of $externalURL; empty: http://<host
	// name>:<listen port>. Its path is the default RoutePrefix.
	ExternalURL string `yaml:"external_url"`
	// RoutePrefix is the path under which every endpoint is served, as
	// Prometheus' --web.route-prefix; empty: the external URL's path.
	RoutePrefix string `yaml:"route_prefix"`
}

// RemoteWriteConfig bounds what the receiver accepts.
type RemoteWriteConfig struct {
	MaxBodyBytes         ByteSize       `yaml:"max_body_bytes"`
	MaxDecompressedBytes ByteSize       `yaml:"max_decompressed_bytes"`
	MaxLabelsPerSeries   int            `yaml:"max_labels_per_series"`
	MaxLabelNameLength   int            `yaml:"max_label_name_length"`
	MaxLabelValueLength  int            `yaml:"max_label_value_length"`
	MaxFutureSkew        model.Duration `yaml:"max_future_skew"`
	MaxInflightRequests  int            `yaml:"max_inflight_requests"`
	MaxInflightBytes     ByteSize       `yaml:"max_inflight_bytes"`
	// MaxActiveRequests and MaxQueueWait: remotewrite.Config's (0: twice
	// GOMAXPROCS, at least 4; 10s).
	MaxActiveRequests int            `yaml:"max_active_requests"`
	MaxQueueWait      model.Duration `yaml:"max_queue_wait"`
	// MaxHeapBytes: remotewrite.Config.MaxHeapBytes (0: 80% of GOMEMLIMIT,
	// negative: no gate).
	MaxHeapBytes ByteSize `yaml:"max_heap_bytes"`
	// SeriesCacheSize: remotewrite.Config.SeriesCacheSize (the most series
	// a generation of the series cache holds; negative: no cache).
	SeriesCacheSize int `yaml:"series_cache_size"`
	// OTLPDeltaToCumulative, OTLPDeltaMaxStreams and OTLPDeltaMaxStale:
	// remotewrite.OTLPConfig's DeltaToCumulative, DeltaMaxStreams and
	// DeltaMaxStale (the OTLP receiver's delta temporality).
	OTLPDeltaToCumulative bool           `yaml:"otlp_delta_to_cumulative"`
	OTLPDeltaMaxStreams   int            `yaml:"otlp_delta_max_streams"`
	OTLPDeltaMaxStale     model.Duration `yaml:"otlp_delta_max_stale"`
	// OTLPGRPCListenAddress serves the OTLP receiver over gRPC too
	// (remotewrite.OTLPHandler.RegisterGRPC); empty leaves it off.
	OTLPGRPCListenAddress string `yaml:"otlp_grpc_listen_address"`
}

// RemoteReadConfig bounds the remote-read endpoint (/api/v1/read), as
// Prometheus' --storage.remote.read-* flags do.
type RemoteReadConfig struct {
	SampleLimit     int      `yaml:"sample_limit"`
	ConcurrentLimit int      `yaml:"concurrent_limit"`
	MaxBytesInFrame ByteSize `yaml:"max_bytes_in_frame"`
}

// QueryConfig bounds the PromQL engine.
type QueryConfig struct {
	Timeout        model.Duration `yaml:"timeout"`
	MaxSamples     int            `yaml:"max_samples"`
	MaxConcurrency int            `yaml:"max_concurrency"`
	LookbackDelta  model.Duration `yaml:"lookback_delta"`
	// SplitParallelism: see query.Config.SplitParallelism.
	SplitParallelism int `yaml:"split_parallelism"`
	// ResultsCacheSize and ResultsCacheFreshness: see
	// query.Config.ResultsCacheSize and ResultsCacheFreshness.
	ResultsCacheSize      ByteSize       `yaml:"results_cache_size"`
	ResultsCacheFreshness model.Duration `yaml:"results_cache_freshness"`
}

// ByteSize is a size in bytes that YAML and flags may write as "32MiB".
type ByteSize int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	return b.Set(n.Value)
}

// MarshalYAML implements yaml.Marshaler.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// Set parses a size such as "32MiB" or a plain number of bytes (kingpin.Value).
func (b *ByteSize) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*b = ByteSize(n)
		return nil
	}
	v, err := units.ParseBase2Bytes(s)
	if err != nil {
		return fmt.Errorf("invalid size %q: %w", s, err)
	}
	*b = ByteSize(v)
	return nil
}

func (b ByteSize) String() string { return units.Base2Bytes(b).String() }

// loadConfig returns the embedded default with the file at path (if any) read
// over it. Unknown keys are errors, so a typo does not silently keep a default.
// loadOfflineConfig is the configuration of a command that works on a data
// directory beside (or without) a server: loadConfig's, with
// --storage.path when given, validated.
func loadOfflineConfig(path, storagePath string) (Config, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return Config{}, err
	}
	if storagePath != "" {
		cfg.Storage.Path = storagePath
	}
	if err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

func loadConfig(path string) (Config, error) {
	var cfg Config
	if err := decodeStrict(bytes.NewReader(defaultConfigYAML), &cfg); err != nil {
		return Config{}, fmt.Errorf("embedded default configuration: %w", err)
	}
	if path == "" {
		return cfg, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("open config file: %w", err)
	}
	defer f.Close() //nolint:errcheck // read-only file; a close error cannot lose data
	if err := decodeStrict(f, &cfg); err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	cfg.dir = filepath.Dir(path)
	cfg.relativeToFile()
	return cfg, nil
}

// relativeToFile resolves the rule files' relative paths (rules.files,
// diagnose.rule_files) against the configuration file's directory, as
// Prometheus resolves its rule_files (and, in alertingConfig, the
// alerting section's files); the settings that are flags in Prometheus
// (storage.path, web.config_file, ...) stay relative to the working
// directory.
func (c *Config) relativeToFile() {
	for _, files := range []*[]string{&c.Rules.Files, &c.Diagnose.RuleFiles} {
		if len(*files) == 0 {
			continue
		}
		out := make([]string, len(*files))
		for i, f := range *files {
			out[i] = f
			if f != "" && !filepath.IsAbs(f) {
				out[i] = filepath.Join(c.dir, f)
			}
		}
		*files = out
	}
}

func decodeStrict(r io.Reader, cfg *Config) error {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// validate checks what the packages cannot check alone.
func (c Config) validate() error {
	var errs []error
	if c.Storage.Path == "" {
		errs = append(errs, errors.New("storage.path must not be empty"))
	}
	positive := func(name string, d model.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, d))
		}
	}
	positive("storage.raw.retention", c.Storage.Raw.Retention)
	positive("storage.minute.retention", c.Storage.Minute.Retention)
	positive("storage.hour.retention", c.Storage.Hour.Retention)
	switch c.Storage.Raw.WALCompression {
	case "snappy", "zstd", "none":
	default:
		errs = append(errs, fmt.Errorf("storage.raw.wal_compression must be snappy, zstd or none, got %q", c.Storage.Raw.WALCompression))
	}
	if n := c.Storage.Raw.SamplesPerChunk; n < 10 || n > 10_000 {
		errs = append(errs, fmt.Errorf("storage.raw.samples_per_chunk must be from 10 to 10000, got %d", n))
	}
	if d := time.Duration(c.Storage.Raw.BlockDuration); d < 10*time.Minute || d > 24*time.Hour || d%time.Minute != 0 {
		errs = append(errs, fmt.Errorf("storage.raw.block_duration must be whole minutes from 10m to 24h, got %s", c.Storage.Raw.BlockDuration))
	} else if d > time.Duration(c.Storage.Raw.Retention) {
		errs = append(errs, fmt.Errorf("storage.raw.block_duration (%s) must not be longer than storage.raw.retention (%s)", c.Storage.Raw.BlockDuration, c.Storage.Raw.Retention))
	}
	switch c.Storage.Raw.WALSampleRecords {
	case "v1", "v2":
	default:
		errs = append(errs, fmt.Errorf("storage.raw.wal_sample_records must be v1 or v2, got %q", c.Storage.Raw.WALSampleRecords))
	}
	if c.Storage.MinFreeBytes < 0 {
		errs = append(errs, fmt.Errorf("storage.min_free_bytes must not be negative (0 switches the check off), got %d", c.Storage.MinFreeBytes))
	}
	if c.Storage.OutOfOrderWindow < 0 {
		errs = append(errs, fmt.Errorf("storage.out_of_order_time_window must not be negative, got %s", c.Storage.OutOfOrderWindow))
	}
	if time.Duration(c.Storage.OutOfOrderWindow) >= time.Duration(c.Storage.Raw.Retention) {
		errs = append(errs, errors.New("storage.out_of_order_time_window must be shorter than storage.raw.retention: rollups are built from raw data before it expires"))
	}
	if err := c.Sources.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.canonicalRules(); err != nil {
		errs = append(errs, err)
	}
	if c.Diagnose.Archive.Retention < 0 {
		errs = append(errs, fmt.Errorf("diagnose.archive.retention must not be negative, got %s", c.Diagnose.Archive.Retention))
	}
	if err := c.Diagnose.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.otlpConfig(); err != nil {
		errs = append(errs, err)
	}
	if c.RemoteWrite.OTLPDeltaMaxStreams <= 0 {
		errs = append(errs, fmt.Errorf("remote_write.otlp_delta_max_streams must be positive, got %d", c.RemoteWrite.OTLPDeltaMaxStreams))
	}
	positive("remote_write.otlp_delta_max_stale", c.RemoteWrite.OTLPDeltaMaxStale)
	if ac, err := c.alertingConfig(); err != nil {
		errs = append(errs, err)
	} else if _, err := notify.StaticGroups(ac); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.storeAPI(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.externalURL(c.Web.ListenAddress); err != nil {
		errs = append(errs, err)
	}
	if c.SelfScrape.Enabled && c.SelfScrape.Interval <= 0 {
		errs = append(errs, fmt.Errorf("self_scrape.interval must be positive, got %s", c.SelfScrape.Interval))
	}
	return errors.Join(errs...)
}

// canonicalRules maps the rules section onto the canonical rule generator's
// configuration.
func (c Config) canonicalRules() (rulegen.Config, error) {
	rc := rulegen.DefaultConfig()
	rc.Interval = time.Duration(c.Rules.CanonicalInterval)
	rc.RateWindow = time.Duration(c.Rules.CanonicalRateWindow)
	switch c.Rules.CanonicalJoin {
	case "pod", "":
		rc.Joins = rulegen.JoinByPod()
	case "host_gpu":
		rc.Joins = rulegen.JoinByHostGPU()
	default:
		return rc, fmt.Errorf("rules.canonical_join must be pod or host_gpu, got %q", c.Rules.CanonicalJoin)
	}
	if err := rc.Validate(); err != nil {
		return rc, fmt.Errorf("rules: %w", err)
	}
	return rc, nil
}

// remoteWrite maps the configuration onto the receiver's.
func (c Config) remoteWrite() remotewrite.Config {
	rw := remotewrite.DefaultConfig()
	rw.Limits.MaxLabelsPerSeries = c.RemoteWrite.MaxLabelsPerSeries
	rw.Limits.MaxLabelNameLength = c.RemoteWrite.MaxLabelNameLength
	rw.Limits.MaxLabelValueLength = c.RemoteWrite.MaxLabelValueLength
	rw.Limits.MaxFutureSkew = time.Duration(c.RemoteWrite.MaxFutureSkew)
	rw.MaxCompressedBytes = int(c.RemoteWrite.MaxBodyBytes)
	rw.MaxDecompressedBytes = int(c.RemoteWrite.MaxDecompressedBytes)
	rw.MaxInflightRequests = c.RemoteWrite.MaxInflightRequests
	rw.MaxInflightBytes = int64(c.RemoteWrite.MaxInflightBytes)
	rw.MaxHeapBytes = int64(c.RemoteWrite.MaxHeapBytes)
	rw.MaxActiveRequests = c.RemoteWrite.MaxActiveRequests
	rw.MaxQueueWait = time.Duration(c.RemoteWrite.MaxQueueWait)
	rw.SeriesCacheSize = c.RemoteWrite.SeriesCacheSize
	return rw
}

// externalURL is web.external_url, or, when it is empty, Prometheus'
// default: http://<this host's name>:<listen's port>. listen is the
// address listened on (the port the kernel chose for port 0). The path
// has no trailing slash.
func (c Config) externalURL(listen string) (*url.URL, error) {
	raw := c.Web.ExternalURL
	if raw == "" {
		return &url.URL{Scheme: "http", Host: externalHost(listen)}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("web.external_url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("web.external_url %q must be an absolute http or https URL, such as https://strata.example.com/strata", raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u, nil
}

// routePrefix is the path every endpoint is served under: web.route_prefix
// or the external URL's path, "" for the root, else starting with a slash
// and without a trailing one.
func (c Config) routePrefix(ext *url.URL) string {
	p := c.Web.RoutePrefix
	if p == "" {
		p = ext.Path
	}
	p = strings.Trim(p, "/")
	if p == "" {
		return ""
	}
	return "/" + p
}

// externalLabels returns global.external_labels as labels.
func (c Config) externalLabels() (labels.Labels, error) {
	ls := labels.FromMap(c.Global.ExternalLabels)
	err := ls.Validate(func(l labels.Label) error {
		if !model.UTF8Validation.IsValidLabelName(l.Name) || l.Name == model.MetricNameLabel {
			return fmt.Errorf("global.external_labels: invalid label name %q", l.Name)
		}
		if l.Value == "" {
			return fmt.Errorf("global.external_labels: label %q has an empty value", l.Name)
		}
		return nil
	})
	return ls, err
}

// storeAPI maps the configuration onto the StoreAPI server's.
func (c Config) storeAPI() (storeapi.Config, error) {
	sc := storeapi.DefaultConfig()
	ext, err := c.externalLabels()
	if err != nil {
		return sc, err
	}
	sc.ExternalLabels = ext
	if c.GRPC.MaxConcurrency <= 0 {
		return sc, fmt.Errorf("grpc.max_concurrency must be positive, got %d", c.GRPC.MaxConcurrency)
	}
	if c.GRPC.MaxSeries < 0 || c.GRPC.MaxSamples < 0 {
		return sc, errors.New("grpc.max_series and grpc.max_samples must not be negative")
	}
	sc.MaxConcurrency, sc.MaxSeries, sc.MaxSamples = c.GRPC.MaxConcurrency, c.GRPC.MaxSeries, c.GRPC.MaxSamples
	sc.QuerierLookbackDelta, sc.QuerierDynamicLookback = time.Duration(c.GRPC.QuerierLookbackDelta), c.GRPC.QuerierDynamicLookbackDelta
	return sc, nil
}

// query maps the configuration onto the query API's.
func (c Config) query() query.Config {
	q := query.DefaultConfig()
	q.Timeout = time.Duration(c.Query.Timeout)
	q.MaxSamples = c.Query.MaxSamples
	q.MaxConcurrency = c.Query.MaxConcurrency
	q.LookbackDelta = time.Duration(c.Query.LookbackDelta)
	q.SplitParallelism = c.Query.SplitParallelism
	q.ResultsCacheSize = int64(c.Query.ResultsCacheSize)
	q.ResultsCacheFreshness = time.Duration(c.Query.ResultsCacheFreshness)
	q.RemoteReadSampleLimit = c.RemoteRead.SampleLimit
	q.RemoteReadConcurrency = c.RemoteRead.ConcurrentLimit
	q.RemoteReadMaxBytesInFrame = int(c.RemoteRead.MaxBytesInFrame)
	q.CORSOrigin = c.Web.CORSOrigin
	return q
}
