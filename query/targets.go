package query

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/scrape"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// TargetSource is the scraper's live view of its targets, served by
// /api/v1/targets. It is the consumer side of the scraper (package
// dcgmbridge/scrape, adapted in cmd/strata).
//
// ActiveTargets returns every target with the outcome of its latest scrape.
// The returned slice belongs to the caller. Implementations must be safe for
// concurrent use.
type TargetSource interface {
	ActiveTargets() []ActiveTarget
}

// ActiveTarget is one scrape target and its latest scrape.
type ActiveTarget struct {
	// Pool is the scrape pool the target belongs to (Prometheus' job_name).
	Pool string
	// URL is the URL scraped.
	URL string
	// Labels are the labels the target adds to its series (job, instance
	// and configured ones); Discovered are the configured ones alone
	// (Prometheus' static_configs labels).
	Labels     labels.Labels
	Discovered labels.Labels
	Interval   time.Duration
	Timeout    time.Duration
	// LastScrape is when the latest scrape started, zero before the first:
	// the target's health is "unknown" until then.
	LastScrape         time.Time
	LastScrapeDuration time.Duration
	// LastError is why the latest scrape failed, nil when it succeeded.
	LastError error
}

// Option adds an optional part to the API.
type Option func(*options)

type options struct {
	targets       TargetSource
	listenAddress string
	external      *url.URL

	raw         RawStatus // WithRawStatus
	rawMetrics  prometheus.Gatherer
	rawPrefix   string
	runtimeInfo func() (v1.RuntimeInfo, error) // WithRuntimeInfo
	cache       CacheSource                    // WithResultsCache
	activity    func()                         // WithQueryActivity
}

// WithTargets serves /api/v1/targets from src, in Prometheus' format and with
// its parameters (state, scrapePool), from Prometheus' own handler. Without
// it the endpoint answers 404. listenAddress is Strata's listen address and
// external the URL clients reach it at: like Prometheus with its
// --web.listen-address and --web.external-url, the globalUrl of a target on
// localhost names external's scheme and host instead.
func WithTargets(src TargetSource, listenAddress string, external *url.URL) Option {
	return func(o *options) {
		o.targets, o.listenAddress, o.external = src, listenAddress, external
	}
}

// sourceRetriever adapts a TargetSource to Prometheus' v1.TargetRetriever,
// building the scrape.Target objects its /api/v1/targets handler reads from
// the source's plain data at every request.
type sourceRetriever struct {
	src TargetSource
}

var errNoScrapePool = errors.New("scrape pool configuration is not served by Strata")

func (r sourceRetriever) TargetsActive() map[string][]*scrape.Target {
	out := map[string][]*scrape.Target{}
	for _, t := range r.src.ActiveTargets() {
		out[t.Pool] = append(out[t.Pool], promTarget(t))
	}
	return out
}

// TargetsDropped is empty: Strata's targets are static, nothing relabels
// them away.
func (sourceRetriever) TargetsDropped() map[string][]*scrape.Target {
	return map[string][]*scrape.Target{}
}

// TargetsDroppedCounts gives every pool a count of 0, as Prometheus does for
// a pool that dropped nothing.
func (r sourceRetriever) TargetsDroppedCounts() map[string]int {
	out := map[string]int{}
	for _, t := range r.src.ActiveTargets() {
		out[t.Pool] = 0
	}
	return out
}

func (sourceRetriever) ScrapePoolConfig(pool string) (*config.ScrapeConfig, error) {
	return nil, fmt.Errorf("%s: %w", pool, errNoScrapePool)
}

// promTarget builds the scrape.Target Prometheus would hold for t: the same
// labels (with the reserved ones its URL is made of), the scrape
// configuration its discovered labels come from, and t's latest scrape.
func promTarget(t ActiveTarget) *scrape.Target {
	u, err := url.Parse(t.URL)
	if err != nil {
		u = &url.URL{}
	}
	cfg := &config.ScrapeConfig{
		JobName:        t.Pool,
		ScrapeInterval: model.Duration(t.Interval),
		ScrapeTimeout:  model.Duration(t.Timeout),
		MetricsPath:    u.Path,
		Scheme:         u.Scheme,
		Params:         u.Query(),
	}
	b := labels.NewBuilder(t.Labels)
	b.Set(model.AddressLabel, u.Host)
	b.Set(model.SchemeLabel, u.Scheme)
	b.Set(model.MetricsPathLabel, u.Path)
	b.Set(model.ScrapeIntervalLabel, cfg.ScrapeInterval.String())
	b.Set(model.ScrapeTimeoutLabel, cfg.ScrapeTimeout.String())
	tgLabels := model.LabelSet{}
	t.Discovered.Range(func(l labels.Label) { tgLabels[model.LabelName(l.Name)] = model.LabelValue(l.Value) })
	st := scrape.NewTarget(b.Labels(), cfg, model.LabelSet{model.AddressLabel: model.LabelValue(u.Host)}, tgLabels)
	if !t.LastScrape.IsZero() {
		st.Report(t.LastScrape, t.LastScrapeDuration, t.LastError)
	}
	return st
}

// targetRetriever is v1.NewAPI's target retriever: nil without a source.
func (o options) targetRetriever() func(context.Context) v1.TargetRetriever {
	if o.targets == nil {
		return nil
	}
	r := sourceRetriever{src: o.targets}
	return func(context.Context) v1.TargetRetriever { return r }
}

// globalURLOptions is how v1.NewAPI derives a target's globalUrl.
func (o options) globalURLOptions() v1.GlobalURLOptions {
	if o.external == nil { // no WithTargets
		return v1.GlobalURLOptions{ListenAddress: o.listenAddress, Scheme: "http"}
	}
	return v1.GlobalURLOptions{ListenAddress: o.listenAddress, Host: o.external.Host, Scheme: o.external.Scheme}
}
