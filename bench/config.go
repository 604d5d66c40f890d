package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/strata-dev/strata/internal/rwclient"
)

// Timestamp clocks of LoadConfig.Timestamps.
const (
	TimestampsWallclock = "wallclock"
	TimestampsInterval  = "interval"
)

// Protocol is the remote-write protocol version the load generator speaks.
type Protocol string

// The protocols. V1 is what every receiver accepts; V2 adds a per-request
// symbol table and metadata per series; OTLP is OpenTelemetry's OTLP/HTTP
// (binary, gzipped; every series a gauge data point: see encodeOTLP), sent
// to a receiver's OTLP path (Strata's and Prometheus'
// /api/v1/otlp/v1/metrics, VictoriaMetrics' /opentelemetry/v1/metrics).
const (
	ProtocolV1   Protocol = "v1"
	ProtocolV2   Protocol = "v2"
	ProtocolOTLP Protocol = "otlp"
)

// Mix is the share of series given to each source shape. The shares need not
// add up to one: they are normalised. A zero share leaves the shape out.
type Mix struct {
	// DCGM is dcgm-exporter's per-GPU gauges (and two counters) at 1 Hz.
	DCGM float64 `json:"dcgm"`
	// VLLM is vLLM V1's per-engine gauges, counters and classic histograms.
	VLLM float64 `json:"vllm"`
	// EBPF is cloudflare/ebpf_exporter's exp2 latency histograms per host.
	EBPF float64 `json:"ebpf"`
}

// LoadConfig describes one bounded remote-write load. Every run is bounded both
// by Duration and by MaxRequests: whichever is reached first ends it.
//
// Timestamps follow one of two clocks (Timestamps):
//
//   - "wallclock" (default): each round of samples is stamped with the real
//     clock when it is generated (at least 1 ms after the previous round), and
//     rounds follow each other as fast as the receiver accepts them. This
//     measures capacity and works against any receiver, including one whose
//     head already holds fresh data (Strata scrapes itself), but the spacing
//     between a series' samples is the round time, not Interval.
//   - "interval": samples are exactly Interval apart, starting at
//     now-Backfill. With Backfill 0 the load is real time (Series/Interval
//     samples/s, the realistic 1 Hz fleet; Paced reports it), each sender's
//     units spread evenly over the interval as scrapes are. With a Backfill the generator
//     runs ahead of real time as fast as the receiver accepts, never past the
//     real clock; that only works against a receiver that accepts in-order
//     samples that old (a fresh Prometheus, VictoriaMetrics), not against one
//     whose head is already at "now". Once caught up with the real clock it
//     paces itself; LoadResult.PacedSeconds says how long it waited, because a
//     paced run measures the schedule, not the receiver.
type LoadConfig struct {
	// URL is the full remote-write endpoint, e.g. http://127.0.0.1:9090/api/v1/write.
	URL string `json:"url"`
	// Protocol is v1 (default), v2 or otlp.
	Protocol Protocol `json:"protocol"`
	// Series is the target number of active series (default 10,000); the real
	// count is rounded to whole GPUs, engines and hosts and is reported.
	Series int `json:"series"`
	// Mix splits Series between the source shapes (default 0.4/0.45/0.15).
	Mix Mix `json:"mix"`
	// ExtraLabels adds that many constant labels per unit (default 0), like
	// avalanche's --label-count, to study label-size cost.
	ExtraLabels int `json:"extra_labels"`
	// LabelValueLength is the length of each extra label value (default 16).
	LabelValueLength int `json:"label_value_length"`
	// ChurnPercent is the share of GPUs and vLLM engines whose pod is replaced
	// (new series, counters restart) every ChurnInterval of simulated time
	// (default 0: steady state).
	ChurnPercent float64 `json:"churn_percent"`
	// ChurnInterval is the simulated time between churn events (default 10m).
	ChurnInterval time.Duration `json:"churn_interval"`
	// BatchSize is the number of samples per request (default 2,000, as
	// Prometheus' max_samples_per_send).
	BatchSize int `json:"batch_size"`
	// BatchDeadline is how long, in sample time, a partly filled batch
	// waits for more samples before it is sent anyway (default 5s, as
	// Prometheus' batch_send_deadline); it matters for paced loads, where a
	// sender may fill a batch slower than that.
	BatchDeadline time.Duration `json:"batch_deadline"`
	// Rate, with "wallclock" timestamps, caps the samples offered per second
	// over all senders (0: as fast as the receiver accepts). Each sender
	// sends its share, Rate/Concurrency, on its own schedule; retries are
	// not counted against it, and a sender that the receiver held back more
	// than a second does not burst to catch up. With Concurrency above the
	// receiver's in-flight limit and Rate above its capacity, this is an
	// overload: the offered rate stays fixed while the receiver refuses what
	// it cannot take (docs/bench.md, "Overload").
	Rate float64 `json:"rate,omitempty"`
	// Concurrency is the number of senders, each owning a fixed share of the
	// series, like Prometheus' shards (default 4).
	Concurrency int `json:"concurrency"`
	// Timestamps is "wallclock" (default) or "interval"; see above.
	Timestamps string `json:"timestamps"`
	// Interval is the time between two samples of a series with "interval"
	// timestamps (default 1s); it also scales counter and histogram rates.
	Interval time.Duration `json:"interval"`
	// Backfill is how far behind the real clock "interval" timestamps start
	// when StartTime is zero (default 0: real time).
	Backfill time.Duration `json:"backfill"`
	// StartTime is the earliest timestamp of the run; zero means
	// now-Backfill. Run sets it so that repeated runs continue each series in
	// order.
	StartTime time.Time `json:"start_time"`
	// Duration bounds the run in real time (default 1m).
	Duration time.Duration `json:"duration"`
	// MaxRequests bounds the number of HTTP requests, retries included
	// (default 100,000; for a Paced load twice its schedule's requests, if
	// more).
	MaxRequests int `json:"max_requests"`
	// Username and Password enable HTTP basic auth when Username is set.
	Username string `json:"username,omitempty"`
	Password string `json:"-"`
	// Seed makes the values reproducible (default 1).
	Seed uint64 `json:"seed"`
	// MinBackoff and MaxBackoff bound the retry backoff on 429 and 5xx
	// (defaults 30ms and 5s, as Prometheus' queue manager).
	MinBackoff time.Duration `json:"min_backoff"`
	MaxBackoff time.Duration `json:"max_backoff"`
	// Timeout is the per-request HTTP timeout (default 30s).
	Timeout time.Duration `json:"timeout"`

	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time `json:"-"`
	// sleep waits for d or until ctx ends; tests replace it so that backoff
	// and pacing never wait on the wall clock.
	sleep func(ctx context.Context, d time.Duration) error
}

// Defaults of LoadConfig, exported so that `strata bench` flags show them.
const (
	DefaultSeries           = 10000
	DefaultBatchSize        = 2000
	DefaultBatchDeadline    = 5 * time.Second
	DefaultConcurrency      = 4
	DefaultInterval         = time.Second
	DefaultDuration         = time.Minute
	DefaultMaxRequests      = 100000
	DefaultLabelValueLength = 16
	DefaultChurnInterval    = 10 * time.Minute
	DefaultMinBackoff       = 30 * time.Millisecond
	DefaultMaxBackoff       = 5 * time.Second
	DefaultTimeout          = 30 * time.Second
)

// DefaultMix is the default share of series per source shape.
func DefaultMix() Mix { return Mix{DCGM: 0.4, VLLM: 0.45, EBPF: 0.15} }

// withDefaults returns c with every zero field set to its default.
func (c LoadConfig) withDefaults() LoadConfig {
	if c.Protocol == "" {
		c.Protocol = ProtocolV1
	}
	if c.Series == 0 {
		c.Series = DefaultSeries
	}
	if c.Mix == (Mix{}) {
		c.Mix = DefaultMix()
	}
	if c.LabelValueLength == 0 {
		c.LabelValueLength = DefaultLabelValueLength
	}
	if c.ChurnInterval == 0 {
		c.ChurnInterval = DefaultChurnInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchDeadline == 0 {
		c.BatchDeadline = DefaultBatchDeadline
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timestamps == "" {
		c.Timestamps = TimestampsWallclock
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = DefaultMaxRequests
		if c.Paced() {
			// A paced run's requests follow its schedule: each interval
			// every sender's batches of its share of the series. Twice
			// that leaves room for retries, so the bound ends a run whose
			// receiver keeps refusing, never one that keeps up before
			// its Duration.
			perRound := (c.Series+c.BatchSize-1)/c.BatchSize + c.Concurrency
			rounds := int((c.Duration + c.Interval - 1) / c.Interval)
			c.MaxRequests = max(DefaultMaxRequests, 2*perRound*rounds)
		}
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.sleep == nil {
		c.sleep = rwclient.Sleep
	}
	return c
}

// Paced reports whether the load is a real-time fleet: "interval"
// timestamps starting at the real clock, so every series sends one sample per
// Interval and the senders wait for the clock. Its throughput is the
// schedule's (Series/Interval), and what it measures is the receiver's cost
// of a steady fleet: CPU cores, memory and disk.
func (c LoadConfig) Paced() bool {
	return c.Timestamps == TimestampsInterval && c.Backfill == 0
}

// Validation errors of LoadConfig.
var (
	// ErrBadConfig wraps every LoadConfig or Scenario validation failure.
	ErrBadConfig = errors.New("bad bench config")
)

// validate checks a config that already has its defaults.
func (c LoadConfig) validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return fmt.Errorf("%w: no target URL", ErrBadConfig)
	case err != nil:
		return fmt.Errorf("%w: target URL: %w", ErrBadConfig, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: target URL %q: scheme must be http or https", ErrBadConfig, c.URL)
	case c.Timestamps != TimestampsWallclock && c.Timestamps != TimestampsInterval:
		return fmt.Errorf("%w: timestamps %q: want wallclock or interval", ErrBadConfig, c.Timestamps)
	case c.Protocol != ProtocolV1 && c.Protocol != ProtocolV2 && c.Protocol != ProtocolOTLP:
		return fmt.Errorf("%w: protocol %q: want v1, v2 or otlp", ErrBadConfig, c.Protocol)
	case c.Series < 0, c.BatchSize < 0, c.Concurrency < 0, c.MaxRequests < 0, c.ExtraLabels < 0, c.LabelValueLength < 0:
		return fmt.Errorf("%w: counts must not be negative", ErrBadConfig)
	case c.Rate < 0 || (c.Rate > 0 && c.Timestamps != TimestampsWallclock):
		return fmt.Errorf("%w: rate %g: want a positive samples/s with wallclock timestamps (a paced load's rate is its series over its interval)", ErrBadConfig, c.Rate)
	case c.Mix.DCGM < 0 || c.Mix.VLLM < 0 || c.Mix.EBPF < 0:
		return fmt.Errorf("%w: mix shares must not be negative", ErrBadConfig)
	case c.ChurnPercent < 0 || c.ChurnPercent > 100:
		return fmt.Errorf("%w: churn percent %g: want 0-100", ErrBadConfig, c.ChurnPercent)
	case c.Interval < time.Millisecond:
		return fmt.Errorf("%w: interval %s: want at least 1ms", ErrBadConfig, c.Interval)
	case c.Duration < 0 || c.Backfill < 0 || c.BatchDeadline < 0 || c.Timeout < 0 || c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("%w: durations must not be negative and max backoff must be at least min backoff", ErrBadConfig)
	}
	return nil
}
