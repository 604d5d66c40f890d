package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/remotewrite"
)

// Kind is what a scrape target exports; it sets defaults (dcgm-exporter
// collects every 30 s) and the warnings given at load.
type Kind string

// Target kinds.
const (
	KindDCGM    Kind = "dcgm"
	KindVLLM    Kind = "vllm"
	KindEBPF    Kind = "ebpf"
	KindGeneric Kind = "generic"
)

// DCGMCollectInterval is dcgm-exporter's default collection interval (-c 30000):
// scraping it faster only repeats values.
const DCGMCollectInterval = 30 * time.Second

// Target is one endpoint to scrape.
type Target struct {
	// Name becomes the job label.
	Name string `yaml:"name"`
	// URL of the /metrics endpoint (http or https); its host:port becomes the
	// instance label.
	URL  string `yaml:"url"`
	Kind Kind   `yaml:"kind"`
	// Interval between scrapes. Default 15s (30s for dcgm).
	Interval time.Duration `yaml:"interval"`
	// Timeout of one scrape; at most Interval. Default 10s (or Interval if shorter).
	Timeout time.Duration `yaml:"timeout"`
	// Labels are added to every series of the target (for example namespace
	// and pod, so the canonical rules can join vLLM to DCGM).
	Labels map[string]string `yaml:"labels"`
}

// Config is the `sources:` section of Strata's configuration.
type Config struct {
	Targets []Target `yaml:"targets"`
	// BodyLimit caps one response body, in bytes. Default 16 MiB.
	BodyLimit int64 `yaml:"body_limit"`
	// SampleLimit caps the samples of one scrape. Default 200000.
	SampleLimit int `yaml:"sample_limit"`
	// LineLimit caps one exposition line, in bytes. Default 64 KiB.
	LineLimit int `yaml:"line_limit"`
	// Limits is the per-series validation every scraped series passes: the
	// remote-write receiver's (remotewrite.Config.Limits), so that data
	// arriving either way passes the same checks. Zero fields get the
	// receiver's defaults; the checks that take no limit (non-empty, valid
	// UTF-8, unique label names, a __name__) always apply.
	Limits remotewrite.Limits `yaml:"-"`
}

// Defaults of Config and Target.
const (
	DefaultBodyLimit      = 16 << 20
	DefaultSampleLimit    = 200_000
	DefaultLineLimit      = 64 << 10
	DefaultScrapeInterval = 15 * time.Second
	DefaultScrapeTimeout  = 10 * time.Second
)

// ErrInvalidSources is wrapped by every Config validation error.
var ErrInvalidSources = errors.New("invalid sources config")

// withDefaults returns the config with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.BodyLimit == 0 {
		c.BodyLimit = DefaultBodyLimit
	}
	if c.SampleLimit == 0 {
		c.SampleLimit = DefaultSampleLimit
	}
	if c.LineLimit == 0 {
		c.LineLimit = DefaultLineLimit
	}
	c.Limits = c.Limits.WithDefaults()
	targets := make([]Target, len(c.Targets))
	for i, t := range c.Targets {
		if t.Kind == "" {
			t.Kind = KindGeneric
		}
		if t.Interval == 0 {
			t.Interval = DefaultScrapeInterval
			if t.Kind == KindDCGM {
				t.Interval = DCGMCollectInterval
			}
		}
		if t.Timeout == 0 {
			t.Timeout = min(DefaultScrapeTimeout, t.Interval)
		}
		targets[i] = t
	}
	c.Targets = targets
	return c
}

// Validate checks the configuration (after defaults) and returns every
// problem found, each naming the target.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSources}, args...)...))
	}
	if c.BodyLimit < 0 || c.SampleLimit < 0 || c.LineLimit < 0 {
		bad("limits must not be negative")
	}
	names := map[string]bool{}
	for i, t := range c.Targets {
		id := fmt.Sprintf("target %d (%q)", i, t.Name)
		switch {
		case t.Name == "":
			bad("target %d: name is empty", i)
		case names[t.Name]:
			bad("%s: duplicate name", id)
		}
		names[t.Name] = true
		u, err := url.Parse(t.URL)
		switch {
		case err != nil:
			bad("%s: url: %v", id, err)
		case u.Scheme != "http" && u.Scheme != "https":
			bad("%s: url %q must be http or https", id, t.URL)
		case u.Host == "":
			bad("%s: url %q has no host", id, t.URL)
		}
		switch t.Kind {
		case KindDCGM, KindVLLM, KindEBPF, KindGeneric:
		default:
			bad("%s: kind %q is not one of dcgm, vllm, ebpf, generic", id, t.Kind)
		}
		if t.Interval <= 0 {
			bad("%s: interval must be positive", id)
		}
		if t.Timeout <= 0 || t.Timeout > t.Interval {
			bad("%s: timeout %s must be positive and at most the interval %s", id, t.Timeout, t.Interval)
		}
		for k := range t.Labels {
			if !model.LegacyValidation.IsValidLabelName(k) || k == model.MetricNameLabel || k == "job" || k == "instance" {
				bad("%s: label %q cannot be set", id, k)
			}
		}
	}
	return errors.Join(errs...)
}

// Warnings returns configuration that is valid but wasteful, for the log at
// config load: a dcgm target scraped faster than dcgm-exporter collects
// (-c 30000 by default) only stores repeated values.
func (c Config) Warnings() []string {
	var out []string
	for _, t := range c.withDefaults().Targets {
		if t.Kind == KindDCGM && t.Interval < DCGMCollectInterval {
			out = append(out, fmt.Sprintf("sources: target %q (dcgm) is scraped every %s, faster than dcgm-exporter's default collect interval %s: scrapes in between repeat the same values",
				t.Name, t.Interval, DCGMCollectInterval))
		}
	}
	return out
}

// scrapeMetrics are the scraper's own metrics.
type scrapeMetrics struct {
	failures *prometheus.CounterVec
	scrapes  *prometheus.CounterVec
	samples  *prometheus.CounterVec
}

// Scraper scrapes the configured targets and appends their samples, after the
// same series validation as remote write (Config.Limits), to an Appendable
// (the raw tier). Each target gets Prometheus' health series (up,
// scrape_duration_seconds, scrape_samples_scraped) and stale markers when its
// series disappear; Targets reports each target's latest scrape.
//
// A body is parsed and checked completely before anything is appended; a
// broken or hostile body appends nothing but the health series (up = 0) and
// is counted in strata_dcgmbridge_scrape_failures_total{target,reason}.
//
// Run may be called once; Close stops it and MUST be called.
type Scraper struct {
	cfg     Config
	app     storage.AppendableV2
	meta    MetadataStore // nil: the expositions' metadata is not kept
	gate    func() error  // nil: always scrape (WithStorageGate)
	logger  *slog.Logger
	now     func() time.Time
	client  *http.Client
	parser  *ExpositionParser
	metrics scrapeMetrics
	loops   []*scrapeLoop

	// stop is cancelled by Close; done is closed when Run returns.
	stop    context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	started bool
	done    chan struct{}
}

// Option adjusts a Scraper.
type Option func(*Scraper)

// MetadataStore keeps the metadata of the scraped families, as the
// remote-write receiver keeps what senders send (remotewrite.MetadataStore,
// which /api/v1/metadata answers from).
type MetadataStore interface {
	Set(family string, m remotewrite.Metadata) (metadata.Metadata, bool)
	Sync() error
}

// WithMetadata keeps each successful scrape's metadata (# TYPE, # HELP,
// # UNIT of its families) in store, as Prometheus keeps its targets'.
func WithMetadata(store MetadataStore) Option {
	return func(s *Scraper) { s.meta = store }
}

// WithStorageGate skips every scrape while gate returns an error (the
// storage's disk nearly full, internal/diskspace): nothing is fetched or
// appended, not even the health series, and the target's status shows the
// error; the failure is counted with reason remotewrite.ReasonDiskSpace.
// A scrape is a sample of the present, so a skipped one is a gap, as a
// Prometheus that cannot append leaves.
func WithStorageGate(gate func() error) Option {
	return func(s *Scraper) { s.gate = gate }
}

// WithHTTPClient replaces the HTTP client (TLS, proxies). Timeouts are still
// set per scrape.
func WithHTTPClient(c *http.Client) Option {
	return func(s *Scraper) { s.client = c }
}

// New validates cfg and prepares one loop per target. It logs a warning for a
// dcgm target scraped faster than dcgm-exporter collects.
func New(cfg Config, app storage.AppendableV2, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time, opts ...Option) (*Scraper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		return nil, err
	}
	f := promauto.With(reg)
	s := &Scraper{
		cfg:    cfg,
		app:    app,
		logger: logger,
		now:    now,
		client: &http.Client{},
		parser: &ExpositionParser{
			Limits:    ParseLimits{MaxSamples: cfg.SampleLimit, MaxLineBytes: cfg.LineLimit},
			Series:    cfg.Limits,
			Sentinels: NewSentinelFilter(cat, reg),
		},
		metrics: scrapeMetrics{
			failures: f.NewCounterVec(prometheus.CounterOpts{
				Name: "strata_dcgmbridge_scrape_failures_total",
				Help: "Scrapes that appended nothing, by target and reason.",
			}, []string{"target", "reason"}),
			scrapes: f.NewCounterVec(prometheus.CounterOpts{
				Name: "strata_dcgmbridge_scrapes_total",
				Help: "Scrapes attempted, by target.",
			}, []string{"target"}),
			samples: f.NewCounterVec(prometheus.CounterOpts{
				Name: "strata_dcgmbridge_scraped_samples_total",
				Help: "Samples appended from scrapes, by target.",
			}, []string{"target"}),
		},
		done: make(chan struct{}),
	}
	s.stop, s.cancel = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	for _, w := range cfg.Warnings() {
		logger.Warn(w)
	}
	for _, t := range cfg.Targets {
		s.loops = append(s.loops, newScrapeLoop(s, t))
	}
	return s, nil
}

// Run scrapes every target on its interval until ctx is done or Close is
// called. It returns after every loop has stopped and written its final
// stale markers.
func (s *Scraper) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("scraper already running")
	}
	s.started = true
	s.mu.Unlock()
	defer close(s.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWatch := context.AfterFunc(s.stop, cancel)
	defer stopWatch()
	var wg sync.WaitGroup
	for _, l := range s.loops {
		wg.Go(func() { l.run(ctx) })
	}
	wg.Wait()
	return nil
}

// Close stops Run (if running) and waits for it.
func (s *Scraper) Close() error {
	s.cancel()
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		<-s.done
	}
	return nil
}

// TargetStatus is a target and the outcome of its latest scrape.
type TargetStatus struct {
	// Target is as configured, with the defaults applied.
	Target Target
	// Labels are the labels the target adds to its series: job, instance
	// and Target.Labels.
	Labels labels.Labels
	// LastScrape is when the latest scrape started; zero before the first.
	LastScrape         time.Time
	LastScrapeDuration time.Duration
	// LastError is why the latest scrape failed, nil after a success.
	LastError error
}

// Targets returns every target's status, in configuration order. It is safe
// to call while Run scrapes.
func (s *Scraper) Targets() []TargetStatus {
	out := make([]TargetStatus, len(s.loops))
	for i, l := range s.loops {
		l.mu.Lock()
		out[i] = TargetStatus{Target: l.t, Labels: l.target, LastScrape: l.lastScrape, LastScrapeDuration: l.lastDuration, LastError: l.lastErr}
		l.mu.Unlock()
	}
	return out
}

// ScrapeOnce scrapes every target once, in order, at now(). It is what Run
// does on each tick, exposed for tests and for `strata` one-shot imports.
func (s *Scraper) ScrapeOnce(ctx context.Context) {
	for _, l := range s.loops {
		l.scrape(ctx)
	}
}

// scrapeLoop is one target's state: the series of its last successful
// scrape, for staleness, and the outcome of its latest scrape.
type scrapeLoop struct {
	s      *Scraper
	t      Target
	target labels.Labels // job, instance and the configured labels
	prev   map[uint64]labels.Labels

	mu           sync.Mutex // guards the fields below, read by Targets
	lastScrape   time.Time
	lastDuration time.Duration
	lastErr      error
}

func newScrapeLoop(s *Scraper, t Target) *scrapeLoop {
	u, _ := url.Parse(t.URL) // validated
	m := map[string]string{"job": t.Name, "instance": u.Host}
	for k, v := range t.Labels {
		m[k] = v
	}
	return &scrapeLoop{s: s, t: t, target: labels.FromMap(m), prev: map[uint64]labels.Labels{}}
}

func (l *scrapeLoop) run(ctx context.Context) {
	ticker := time.NewTicker(l.t.Interval)
	defer ticker.Stop()
	for {
		l.scrape(ctx)
		select {
		case <-ctx.Done():
			// Like Prometheus on target removal: end every series explicitly.
			l.markStale(context.WithoutCancel(ctx), l.s.now())
			return
		case <-ticker.C:
		}
	}
}

// scrape performs one scrape and appends its result, or its failure.
func (l *scrapeLoop) scrape(ctx context.Context) {
	start := l.s.now()
	l.s.metrics.scrapes.WithLabelValues(l.t.Name).Inc()
	if l.s.gate != nil {
		if err := l.s.gate(); err != nil {
			l.mu.Lock()
			l.lastScrape, l.lastDuration, l.lastErr = start, 0, fmt.Errorf("scrape %s skipped: %w", l.t.Name, err)
			l.mu.Unlock()
			l.s.metrics.failures.WithLabelValues(l.t.Name, remotewrite.ReasonDiskSpace).Inc()
			return
		}
	}
	exp, reason, err := l.fetch(ctx, start)
	if err == nil {
		if err = l.appendAll(ctx, exp, start); err != nil {
			reason = ReasonAppend
		}
	}
	if err != nil && ctx.Err() != nil {
		return // shutting down: run() writes the final stale markers
	}
	dur := l.s.now().Sub(start)
	l.mu.Lock()
	l.lastScrape, l.lastDuration, l.lastErr = start, dur, err
	l.mu.Unlock()
	n := 0
	up := 1.0
	if err != nil {
		up = 0
		l.s.metrics.failures.WithLabelValues(l.t.Name, reason).Inc()
		l.s.logger.Warn("scrape failed", "target", l.t.Name, "url", l.t.URL, "reason", reason, "err", err)
		// Prometheus marks every series of a failed scrape stale.
		l.markStale(ctx, start)
	} else {
		n = len(exp.Samples)
		l.s.metrics.samples.WithLabelValues(l.t.Name).Add(float64(n))
		for field, c := range exp.Sentinels {
			l.s.parser.Sentinels.count(field, c)
		}
		l.keepMetadata(exp)
	}
	l.appendHealth(ctx, start, up, dur, n)
}

// keepMetadata stores the metadata of a scrape whose samples were appended.
// An unchanged family costs a map lookup under a read lock; a change is
// written to the store's change log at once, as a remote write's is before
// its reply.
func (l *scrapeLoop) keepMetadata(exp *Exposition) {
	if l.s.meta == nil || len(exp.Metadata) == 0 {
		return
	}
	for family, m := range exp.Metadata {
		l.s.meta.Set(family, m)
	}
	if err := l.s.meta.Sync(); err != nil {
		l.s.logger.Warn("store scraped metadata", "target", l.t.Name, "err", err)
	}
}

// fetch downloads and parses the body; a non-empty reason goes with an error.
func (l *scrapeLoop) fetch(ctx context.Context, now time.Time) (*Exposition, string, error) {
	ctx, cancel := context.WithTimeout(ctx, l.t.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.t.URL, nil)
	if err != nil {
		return nil, ReasonHTTP, fmt.Errorf("scrape %s: %w", l.t.Name, err)
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1")
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", fmt.Sprintf("%g", l.t.Timeout.Seconds()))
	resp, err := l.s.client.Do(req)
	if err != nil {
		return nil, classifyNetErr(err), fmt.Errorf("scrape %s: %w", l.t.Name, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close() // read-only: a close error loses nothing
	}()
	if resp.StatusCode != http.StatusOK {
		return nil, ReasonHTTP, fmt.Errorf("scrape %s: HTTP status %s", l.t.Name, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, l.s.cfg.BodyLimit+1))
	if err != nil {
		return nil, classifyNetErr(err), fmt.Errorf("scrape %s: read body: %w", l.t.Name, err)
	}
	if int64(len(body)) > l.s.cfg.BodyLimit {
		return nil, ReasonBodyTooLarge, fmt.Errorf("scrape %s: body exceeds %d bytes", l.t.Name, l.s.cfg.BodyLimit)
	}
	exp, err := l.s.parser.Parse(body, resp.Header.Get("Content-Type"), l.target, now)
	if err != nil {
		return nil, RejectReason(err), fmt.Errorf("scrape %s: %w", l.t.Name, err)
	}
	return exp, "", nil
}

func classifyNetErr(err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return ReasonTimeout
	}
	return ReasonHTTP
}

// appendAll appends the scrape and the stale markers of vanished series in
// one transaction: all of it or nothing.
func (l *scrapeLoop) appendAll(ctx context.Context, exp *Exposition, now time.Time) (err error) {
	ts := now.UnixMilli()
	app := l.s.app.AppenderV2(ctx)
	defer func() {
		if err != nil {
			err = errors.Join(err, app.Rollback())
		}
	}()
	cur := make(map[uint64]labels.Labels, len(exp.Samples))
	for _, smp := range exp.Samples {
		if _, err := app.Append(0, smp.Labels, 0, ts, smp.Value, nil, nil, storage.AOptions{}); err != nil {
			return fmt.Errorf("append %s: %w", truncate(smp.Labels.String()), err)
		}
		cur[smp.Labels.Hash()] = smp.Labels
	}
	for h, lset := range l.prev {
		if _, ok := cur[h]; ok {
			continue
		}
		if _, err := app.Append(0, lset, 0, ts, math.Float64frombits(value.StaleNaN), nil, nil, storage.AOptions{}); err != nil && !isStaleAppendIgnorable(err) {
			return fmt.Errorf("append stale marker %s: %w", truncate(lset.String()), err)
		}
	}
	if err := app.Commit(); err != nil {
		return fmt.Errorf("commit scrape: %w", err)
	}
	l.prev = cur
	return nil
}

// markStale ends every series of the last successful scrape.
func (l *scrapeLoop) markStale(ctx context.Context, now time.Time) {
	if len(l.prev) == 0 {
		return
	}
	app := l.s.app.AppenderV2(ctx)
	for _, lset := range l.prev {
		if _, err := app.Append(0, lset, 0, now.UnixMilli(), math.Float64frombits(value.StaleNaN), nil, nil, storage.AOptions{}); err != nil && !isStaleAppendIgnorable(err) {
			l.s.logger.Warn("append stale marker", "target", l.t.Name, "err", err)
		}
	}
	if err := app.Commit(); err != nil {
		l.s.logger.Warn("commit stale markers", "target", l.t.Name, "err", err)
		return
	}
	l.prev = map[uint64]labels.Labels{}
}

// isStaleAppendIgnorable: a stale marker for a series that already moved on
// (out of order, duplicate) is harmless, as Prometheus treats it.
func isStaleAppendIgnorable(err error) bool {
	return errors.Is(err, storage.ErrOutOfOrderSample) || errors.Is(err, storage.ErrDuplicateSampleForTimestamp) || errors.Is(err, storage.ErrTooOldSample)
}

// appendHealth writes up, scrape_duration_seconds and scrape_samples_scraped.
func (l *scrapeLoop) appendHealth(ctx context.Context, now time.Time, up float64, dur time.Duration, samples int) {
	ts := now.UnixMilli()
	app := l.s.app.AppenderV2(ctx)
	b := labels.NewBuilder(l.target)
	for _, m := range []struct {
		name string
		v    float64
	}{
		{"up", up},
		{"scrape_duration_seconds", dur.Seconds()},
		{"scrape_samples_scraped", float64(samples)},
	} {
		b.Set(model.MetricNameLabel, m.name)
		if _, err := app.Append(0, b.Labels(), 0, ts, m.v, nil, nil, storage.AOptions{}); err != nil {
			l.s.logger.Warn("append health series", "target", l.t.Name, "series", m.name, "err", err)
			_ = app.Rollback() // already failing; the warning above says why
			return
		}
	}
	if err := app.Commit(); err != nil {
		l.s.logger.Warn("commit health series", "target", l.t.Name, "err", err)
	}
}
