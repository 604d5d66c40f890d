package query

import (
	"errors"
	"fmt"
	"time"

	"github.com/grafana/regexp"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// Config configures the query API and its PromQL engine. The defaults are
// Prometheus' own flag defaults, so that a dashboard that works against
// Prometheus works against Strata with the same limits.
type Config struct {
	// Timeout is the longest a query may take, queueing included
	// (--query.timeout, 2m). A query over it is answered 503 errorType "timeout".
	Timeout time.Duration
	// MaxSamples is the most samples one query may hold in memory at once
	// (--query.max-samples, 50,000,000). Over it the query fails with 422
	// errorType "execution", as in Prometheus.
	MaxSamples int
	// MaxConcurrency is how many queries run at once (--query.max-concurrency,
	// 20). Further queries wait for a slot until their timeout and then get 503.
	// Zero or less means no limit.
	MaxConcurrency int
	// LookbackDelta is how far back an instant selector looks for a sample
	// (--query.lookback-delta, 5m). Requests may override it with the
	// lookback_delta parameter.
	LookbackDelta time.Duration
	// NoStepSubqueryInterval is the step of a subquery written without one
	// (`x[1h:]`); Prometheus uses its global evaluation interval (1m).
	NoStepSubqueryInterval time.Duration
	// SplitParallelism is how many parts, evaluated in parallel, a long
	// range query is split into by its steps (--query.split-parallelism;
	// 0, the default, means one per CPU, GOMAXPROCS; 1 never splits). A part
	// gets at least 1,000 steps, so short queries run whole.
	SplitParallelism int
	// ResultsCacheSize bounds the range-query results cache, in bytes
	// (--query.results-cache-size, 32 MiB; 0 turns it off). The cache keeps
	// the steps of answers that can no longer change and evaluates only the
	// newer steps when a query comes again (cache.go). It needs
	// WithResultsCache.
	ResultsCacheSize int64
	// ResultsCacheFreshness is how far behind now a step must be for the
	// cache to keep it (--query.results-cache-freshness, 5m): samples
	// arriving later than that are late, and a late sample empties the
	// cache of what it may change.
	ResultsCacheFreshness time.Duration

	// RemoteReadSampleLimit caps the samples one sampled (non-streamed) remote
	// read may return (--storage.remote.read-sample-limit, 5e7; 0 = no limit).
	RemoteReadSampleLimit int
	// RemoteReadConcurrency caps concurrent remote reads
	// (--storage.remote.read-concurrent-limit, 10; 0 = no limit).
	RemoteReadConcurrency int
	// RemoteReadMaxBytesInFrame caps one frame of a streamed remote read
	// (--storage.remote.read-max-bytes-in-frame, 1 MiB).
	RemoteReadMaxBytesInFrame int
	// ExternalLabels are added to every series a remote read returns, and
	// matchers on them are honoured, as Prometheus' global external_labels.
	ExternalLabels labels.Labels

	// Rules, when set, serves /api/v1/rules and /api/v1/alerts with
	// Prometheus' handlers (the rule groups of the canonical rule manager and
	// of the diagnosis engine). It is read at every request.
	Rules v1.RulesRetriever
	// Alertmanagers, when set, serves /api/v1/alertmanagers.
	Alertmanagers v1.AlertmanagerRetriever

	// CORSOrigin is a regular expression, fully anchored, of the origins
	// allowed to call the API from a browser (--web.cors.origin, ".*").
	CORSOrigin string

	// ConfigYAML is what /api/v1/status/config answers: the server's
	// effective configuration as YAML, secrets already masked.
	ConfigYAML string
	// Flags is what /api/v1/status/flags answers: every command-line flag
	// of the server, without its dashes, and its effective value.
	Flags map[string]string

	// The experimental PromQL features below are off by default, as in
	// Prometheus, and map to its --enable-feature values.

	// EnableExperimentalFunctions: promql-experimental-functions.
	EnableExperimentalFunctions bool
	// EnableDelayedNameRemoval: promql-delayed-name-removal.
	EnableDelayedNameRemoval bool
	// EnableBinopFillModifiers: promql-binop-fill-modifiers.
	EnableBinopFillModifiers bool
	// EnableUnquotedUTF8Names: promql-unquoted-utf8-names.
	EnableUnquotedUTF8Names bool
	// EnablePerStepStats: promql-per-step-stats (stats=all on a request).
	EnablePerStepStats bool
}

// DefaultConfig returns Prometheus' defaults for every limit.
func DefaultConfig() Config {
	return Config{
		Timeout:                   2 * time.Minute,
		MaxSamples:                50_000_000,
		MaxConcurrency:            20,
		LookbackDelta:             5 * time.Minute,
		NoStepSubqueryInterval:    time.Minute,
		ResultsCacheSize:          32 << 20,
		ResultsCacheFreshness:     5 * time.Minute,
		RemoteReadSampleLimit:     50_000_000,
		RemoteReadConcurrency:     10,
		RemoteReadMaxBytesInFrame: 1 << 20,
		CORSOrigin:                ".*",
	}
}

// validate rejects settings the engine would misbehave with instead of
// silently replacing them, so that a typo in a flag is noticed at start-up.
func (c Config) validate() error {
	var errs []error
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("query timeout must be positive, got %s", c.Timeout))
	}
	if c.MaxSamples <= 0 {
		errs = append(errs, fmt.Errorf("query max samples must be positive, got %d", c.MaxSamples))
	}
	if c.LookbackDelta <= 0 {
		errs = append(errs, fmt.Errorf("query lookback delta must be positive, got %s", c.LookbackDelta))
	}
	if c.NoStepSubqueryInterval <= 0 {
		errs = append(errs, fmt.Errorf("subquery default step must be positive, got %s", c.NoStepSubqueryInterval))
	}
	if c.ResultsCacheSize < 0 {
		errs = append(errs, fmt.Errorf("query results cache size must not be negative, got %d", c.ResultsCacheSize))
	}
	if c.ResultsCacheSize > 0 && c.ResultsCacheFreshness < time.Second {
		errs = append(errs, fmt.Errorf("query results cache freshness must be at least 1s, got %s", c.ResultsCacheFreshness))
	}
	if c.SplitParallelism < 0 {
		errs = append(errs, fmt.Errorf("query split parallelism must not be negative, got %d", c.SplitParallelism))
	}
	if c.RemoteReadSampleLimit < 0 || c.RemoteReadConcurrency < 0 {
		errs = append(errs, errors.New("remote read limits must not be negative"))
	}
	if c.RemoteReadMaxBytesInFrame <= 0 {
		errs = append(errs, fmt.Errorf("remote read frame size must be positive, got %d", c.RemoteReadMaxBytesInFrame))
	}
	if _, err := c.corsRegexp(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) corsRegexp() (*regexp.Regexp, error) {
	re, err := regexp.Compile("^(?:" + c.CORSOrigin + ")$")
	if err != nil {
		return nil, fmt.Errorf("compile CORS origin %q: %w", c.CORSOrigin, err)
	}
	return re, nil
}

func (c Config) parserOptions() parser.Options {
	return parser.Options{
		EnableExperimentalFunctions: c.EnableExperimentalFunctions,
		EnableBinopFillModifiers:    c.EnableBinopFillModifiers,
		EnableUnquotedUTF8Names:     c.EnableUnquotedUTF8Names,
	}
}
