package diagnose

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Config is the `diagnose:` section of Strata's configuration
// (docs/configuration.md).
type Config struct {
	// Enabled turns the engine on in `strata serve`.
	Enabled bool `yaml:"enabled"`
	// DefaultPack loads the embedded default rule pack (diagnose/rules).
	DefaultPack bool `yaml:"default_pack"`
	// RuleFiles are the operator's rule files (globs), Prometheus format.
	RuleFiles []string `yaml:"rule_files"`
	// DisabledRules are alert or record names of the default pack to leave out.
	DisabledRules []string `yaml:"disabled_rules"`
	// RunbookURLs replace the runbook_url placeholder of default-pack alerts,
	// by alert name.
	RunbookURLs map[string]string `yaml:"runbook_urls"`
	// RateWindow is the range of every rate() of the signals, at least three
	// minute windows.
	RateWindow model.Duration `yaml:"rate_window"`
	// Warmup is how far before the first reported minute evaluation starts,
	// so that `for`, keep_firing_for and range selectors have their history.
	// 0 computes it from the rules (at least 1h).
	Warmup model.Duration `yaml:"warmup"`
	// ScratchRetention is how long the engine keeps its own recorded series
	// in memory (the longest range a rule reads of them, and more).
	ScratchRetention model.Duration `yaml:"scratch_retention"`
	// SLO are the latency and error objectives the symptom rules compare with.
	SLO SLOConfig `yaml:"slo"`
	// Hooks are optional actions on diagnoses.
	Hooks HooksConfig `yaml:"hooks"`
	// Baseline configures the robust baselines and the seasonal thresholds
	// (docs/diagnosis.md, "Baselines").
	Baseline BaselineConfig `yaml:"baseline"`
}

// Baseline modes.
const (
	// BaselineSeasonal computes robust per-hour-of-week baselines of the
	// tracked signals; rules compare with them.
	BaselineSeasonal = "seasonal"
	// BaselineStatic computes none: the rules' static thresholds alone
	// decide (the comparison the benchmark draws).
	BaselineStatic = "static"
)

// BaselineConfig is `diagnose.baseline`.
type BaselineConfig struct {
	// Mode is seasonal (baselines computed, the default) or static.
	Mode string `yaml:"mode"`
	// K is the deviation, in robust sigma, beyond which a signal is
	// anomalous (rules read it as strata:baseline:k); the two-pass outlier
	// rejection and the level-shift test use it too.
	K float64 `yaml:"k"`
	// History is how far back the hourly summaries go: the hour-of-week
	// baseline uses the same hour of every week in it.
	History model.Duration `yaml:"history"`
	// MinHistory is how many weeks of the same hour-of-week (as a duration)
	// a series needs before its hour-of-week baseline is used; with less,
	// it falls back to the same hour of the last days, the last hours, or
	// the model's other replicas at the same minute.
	MinHistory model.Duration `yaml:"min_history"`
	// LevelShiftAfter is how long a signal must stay beyond k sigma, in the
	// same direction, before the shifted level becomes its new normal (a
	// deploy that changed it for good).
	LevelShiftAfter model.Duration `yaml:"level_shift_after"`
	// SigmaFloor is the smallest sigma as a fraction of the baseline's
	// median (each signal also has an absolute floor), so that a signal
	// that barely moves does not make tiny changes anomalous.
	SigmaFloor float64 `yaml:"sigma_floor"`
	// Signals are the canonical signals tracked (empty: DefaultBaselineSignals).
	Signals []string `yaml:"signals"`
	// WriteBackZScore writes strata:anomaly:zscore back (to the minute tier)
	// beside the median and sigma. Off by default: the rules read the
	// z-score from the engine's own store, a dashboard can compute it from
	// the median and sigma, and written back it is a third of the
	// baseline series the write-back holds (about 50 MB of heap at 500,000
	// active series, docs/diagnosis.md).
	WriteBackZScore bool `yaml:"write_back_zscore"`
}

// SLOConfig holds the default objectives and per-model overrides.
type SLOConfig struct {
	Default SLO            `yaml:"default"`
	Models  map[string]SLO `yaml:"models"`
}

// SLO is one model's objectives on P99s and the error ratio. In a per-model
// entry a zero field keeps the default.
type SLO struct {
	TTFTP99    model.Duration `yaml:"ttft_p99"`
	TPOTP99    model.Duration `yaml:"tpot_p99"`
	E2EP99     model.Duration `yaml:"e2e_p99"`
	ErrorRatio float64        `yaml:"error_ratio"`
}

// HooksConfig configures the hooks; all are off by default.
type HooksConfig struct {
	Webhooks  []WebhookConfig  `yaml:"webhooks"`
	Profilers []ProfilerConfig `yaml:"profilers"`
}

// ProfilerConfig asks a profiler agent (URL: the operator's, on the node or
// in the cluster; it runs Nsight Systems, the PyTorch profiler, ...) for one
// short profiling window on the pod of a diagnosis where the rollup evidence
// stops: once per diagnosis of Causes (all when empty) that reaches
// MinConfidence, at most once per MinInterval per pod, never for a model
// whose tightest latency objective (TTFT, TPOT or e2e P99 in slo) is under
// MinLatencySLO (a profiler adds 10-20 % latency), and scheduled in the
// model's quietest hour of the day over the last seven days. Strata sends
// the request (JSON, docs/diagnosis.md) at once with the window's bounds; the
// agent starts the profiler at not_before.
type ProfilerConfig struct {
	URL           string   `yaml:"url"`
	Causes        []string `yaml:"causes"`
	MinConfidence float64  `yaml:"min_confidence"`
	// Tool names the profiler for the agent (nsys, torch, ...); passed along.
	Tool string `yaml:"tool"`
	// Duration of the profiling window: 1m to 10m, default 5m.
	Duration model.Duration `yaml:"duration"`
	// MinLatencySLO: no profile for a model with a latency objective under
	// it. Default 100ms.
	MinLatencySLO model.Duration `yaml:"min_latency_slo"`
	// MinInterval between two profiles of one pod. Default 24h.
	MinInterval model.Duration `yaml:"min_interval"`
	Timeout     model.Duration `yaml:"timeout"`
	// MaxRetries bounds the retries of one delivery (exponential backoff
	// from 1 s); 0 means 5.
	MaxRetries int `yaml:"max_retries"`
}

// ProfilerDefaults returns p with its zero fields set to their defaults.
func (p ProfilerConfig) ProfilerDefaults() ProfilerConfig {
	if p.Duration == 0 {
		p.Duration = model.Duration(5 * time.Minute)
	}
	if p.MinLatencySLO == 0 {
		p.MinLatencySLO = model.Duration(100 * time.Millisecond)
	}
	if p.MinInterval == 0 {
		p.MinInterval = model.Duration(24 * time.Hour)
	}
	if p.Timeout <= 0 {
		p.Timeout = model.Duration(10 * time.Second)
	}
	if p.MaxRetries <= 0 {
		p.MaxRetries = 5
	}
	return p
}

// TightestLatencySLO is the smallest of model m's TTFT, TPOT and e2e P99
// objectives.
func (c SLOConfig) TightestLatencySLO(m string) time.Duration {
	s := c.forModel(m)
	return min(time.Duration(s.TTFTP99), time.Duration(s.TPOTP99), time.Duration(s.E2EP99))
}

// WebhookConfig posts a diagnosis (JSON, docs/diagnosis.md) to URL when a
// diagnosis of one of Causes (all when empty) reaches MinConfidence, once
// per diagnosis, and again when it resolves.
type WebhookConfig struct {
	URL           string         `yaml:"url"`
	Causes        []string       `yaml:"causes"`
	MinConfidence float64        `yaml:"min_confidence"`
	Timeout       model.Duration `yaml:"timeout"`
	// MaxRetries bounds the retries of one delivery (exponential backoff
	// from 1 s); 0 means 5.
	MaxRetries int `yaml:"max_retries"`
}

// DefaultConfig is the documented default: off, default pack on, 3m rates,
// warm-up computed, 3h scratch, SLOs TTFT P99 2s, TPOT P99 100ms, e2e P99
// 60s, errors 1%.
func DefaultConfig() Config {
	return Config{
		DefaultPack:      true,
		RateWindow:       model.Duration(3 * time.Minute),
		ScratchRetention: model.Duration(3 * time.Hour),
		SLO: SLOConfig{Default: SLO{
			TTFTP99: model.Duration(2 * time.Second), TPOTP99: model.Duration(100 * time.Millisecond),
			E2EP99: model.Duration(60 * time.Second), ErrorRatio: 0.01,
		}},
		Baseline: DefaultBaselineConfig(),
	}
}

// DefaultBaselineConfig is seasonal baselines, k = 3, 28 days of history,
// the hour-of-week baseline from two weeks on, a level shift adopted after
// 3 hours, sigma at least 2 % of the median.
func DefaultBaselineConfig() BaselineConfig {
	return BaselineConfig{
		Mode: BaselineSeasonal, K: 3, History: model.Duration(28 * 24 * time.Hour),
		MinHistory: model.Duration(14 * 24 * time.Hour), LevelShiftAfter: model.Duration(3 * time.Hour),
		SigmaFloor: 0.02,
	}
}

// Causes are the diagnosis causes of the default pack: the simulator's fault
// kinds.
var Causes = []string{
	"kv_cache_eviction_storm", "request_queue_backlog", "under_batched_gpu", "draft_model_drift",
	"power_cap", "thermal_throttle", "xid_gpu_lost", "prefix_cache_collapse", "network_delay",
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if time.Duration(c.RateWindow) < 3*time.Minute {
		return fmt.Errorf("diagnose rate_window must be at least 3m (three minute windows), got %s", c.RateWindow)
	}
	if c.Warmup < 0 {
		return fmt.Errorf("diagnose warmup must not be negative, got %s", c.Warmup)
	}
	if time.Duration(c.ScratchRetention) < time.Hour {
		return fmt.Errorf("diagnose scratch_retention must be at least 1h, got %s", c.ScratchRetention)
	}
	if err := c.Baseline.validate(); err != nil {
		return err
	}
	if err := c.SLO.Default.validate("default"); err != nil {
		return err
	}
	if c.SLO.Default.TTFTP99 <= 0 || c.SLO.Default.TPOTP99 <= 0 || c.SLO.Default.E2EP99 <= 0 || c.SLO.Default.ErrorRatio <= 0 {
		return errors.New("diagnose slo.default must set ttft_p99, tpot_p99, e2e_p99 and error_ratio")
	}
	for m, s := range c.SLO.Models {
		if m == "" {
			return errors.New("diagnose slo.models: empty model name")
		}
		if err := s.validate(m); err != nil {
			return err
		}
	}
	for i, w := range c.Hooks.Webhooks {
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("diagnose hooks.webhooks[%d]: url %q must be an http or https URL", i, w.URL)
		}
		if w.MinConfidence < 0 || w.MinConfidence > 1 {
			return fmt.Errorf("diagnose hooks.webhooks[%d]: min_confidence must be in [0,1]", i)
		}
		for _, cause := range w.Causes {
			if !slices.Contains(Causes, cause) && cause != CauseUnknown {
				return fmt.Errorf("diagnose hooks.webhooks[%d]: unknown cause %q (known: %v, %s)", i, cause, Causes, CauseUnknown)
			}
		}
		if w.Timeout < 0 || w.MaxRetries < 0 {
			return fmt.Errorf("diagnose hooks.webhooks[%d]: negative timeout or max_retries", i)
		}
	}
	for i, p := range c.Hooks.Profilers {
		if err := p.validate(); err != nil {
			return fmt.Errorf("diagnose hooks.profilers[%d]: %w", i, err)
		}
	}
	return nil
}

func (p ProfilerConfig) validate() error {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q must be an http or https URL", p.URL)
	}
	if p.MinConfidence < 0 || p.MinConfidence > 1 {
		return errors.New("min_confidence must be in [0,1]")
	}
	for _, cause := range p.Causes {
		if !slices.Contains(Causes, cause) {
			return fmt.Errorf("unknown cause %q (known: %v)", cause, Causes)
		}
	}
	if d := time.Duration(p.Duration); d != 0 && (d < time.Minute || d > 10*time.Minute) {
		return fmt.Errorf("duration %s out of range: a profiler costs 10-20 %% latency, so a window is 1m to 10m", p.Duration)
	}
	if p.MinLatencySLO < 0 || p.MinInterval < 0 || p.Timeout < 0 || p.MaxRetries < 0 {
		return errors.New("negative min_latency_slo, min_interval, timeout or max_retries")
	}
	return nil
}

func (b BaselineConfig) validate() error {
	const week = 7 * 24 * time.Hour
	switch {
	case b.Mode != BaselineSeasonal && b.Mode != BaselineStatic:
		return fmt.Errorf("diagnose baseline.mode must be %s or %s, got %q", BaselineSeasonal, BaselineStatic, b.Mode)
	case b.K < 1 || b.K > 20:
		return fmt.Errorf("diagnose baseline.k must be in [1,20] (robust sigma), got %g", b.K)
	case time.Duration(b.History) < 24*time.Hour || time.Duration(b.History) > 8*week:
		return fmt.Errorf("diagnose baseline.history must be between 1d and 8w, got %s", b.History)
	case b.MinHistory < 0 || b.MinHistory > b.History:
		return fmt.Errorf("diagnose baseline.min_history must be between 0 and history (%s), got %s", b.History, b.MinHistory)
	case time.Duration(b.LevelShiftAfter) < time.Hour || time.Duration(b.LevelShiftAfter) > 48*time.Hour:
		return fmt.Errorf("diagnose baseline.level_shift_after must be between 1h and 48h, got %s", b.LevelShiftAfter)
	case b.SigmaFloor < 0 || b.SigmaFloor > 1:
		return fmt.Errorf("diagnose baseline.sigma_floor must be in [0,1], got %g", b.SigmaFloor)
	}
	for _, s := range b.Signals {
		if !strings.HasPrefix(s, "strata:") {
			return fmt.Errorf("diagnose baseline.signals: %q is not a canonical strata: signal", s)
		}
	}
	return nil
}

func (s SLO) validate(name string) error {
	if s.TTFTP99 < 0 || s.TPOTP99 < 0 || s.E2EP99 < 0 || s.ErrorRatio < 0 || s.ErrorRatio > 1 {
		return fmt.Errorf("diagnose slo %s: objectives must be positive and error_ratio in [0,1]", name)
	}
	return nil
}

// forModel is the default with the model's overrides.
func (c SLOConfig) forModel(m string) SLO {
	s := c.Default
	o := c.Models[m]
	if o.TTFTP99 > 0 {
		s.TTFTP99 = o.TTFTP99
	}
	if o.TPOTP99 > 0 {
		s.TPOTP99 = o.TPOTP99
	}
	if o.E2EP99 > 0 {
		s.E2EP99 = o.E2EP99
	}
	if o.ErrorRatio > 0 {
		s.ErrorRatio = o.ErrorRatio
	}
	return s
}
