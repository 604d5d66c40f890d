package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/strata-dev/strata/internal/atomicfile"
)

// DashboardQuery is one panel of the dashboard whose latency bench measures.
type DashboardQuery struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
}

// DefaultDashboard is the canonical panel set of an inference fleet, written
// against the series the generator sends, so every panel returns data.
func DefaultDashboard() []DashboardQuery {
	return []DashboardQuery{
		{"ttft_p99", `histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`},
		{"itl_p50", `histogram_quantile(0.5, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[5m])))`},
		{"gpu_util", `avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)`},
		{"gpu_power", `sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)`},
		{"kv_cache", `max by (pod) (vllm:kv_cache_usage_perc)`},
		{"token_throughput", `sum(rate(vllm:generation_tokens_total[5m]))`},
		{"queue_waiting", `sum by (model_name) (vllm:num_requests_waiting)`},
		{"preemptions", `sum(rate(vllm:num_preemptions_total[5m]))`},
		{"disk_latency_p99", `histogram_quantile(0.99, sum by (le, device) (rate(ebpf_exporter_bio_latency_seconds_bucket[5m])))`},
	}
}

// DefaultQueryRanges are the dashboard time ranges measured.
func DefaultQueryRanges() []time.Duration {
	return []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour}
}

// queryPoints is the number of points per panel: Grafana asks for about one
// point per pixel column of a panel.
const queryPoints = 250

// StepFor is the query_range step for a range: range/250 to the
// millisecond, so that the last evaluation falls on the range's end. A step
// truncated to whole seconds (345 s for 24h) leaves the newest 150 s of a
// 24h panel unevaluated, and a fresh receiver's panels came back empty.
func StepFor(r time.Duration) time.Duration {
	return max(time.Millisecond, (r / queryPoints).Truncate(time.Millisecond))
}

// RangeLatency is the latency of the dashboard at one range.
type RangeLatency struct {
	Range        string  `json:"range"`
	RangeSeconds float64 `json:"range_seconds"`
	StepSeconds  float64 `json:"step_seconds"`
	// P50Seconds and P99Seconds are over every execution of every panel.
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
	Executions int     `json:"executions"`
	Errors     int     `json:"errors"`
	// Empty counts executions that returned no series at all.
	Empty    int            `json:"empty"`
	PerQuery []QueryLatency `json:"per_query"`
	// ServerCPUSeconds is the CPU time the server process used while this
	// range's queries ran (its background work included), when its PID is
	// known; with CPUPerQuerySeconds, that over the executions. Unlike the
	// latency it hardly depends on what else the machine runs.
	ServerCPUSeconds   float64 `json:"server_cpu_seconds,omitempty"`
	CPUPerQuerySeconds float64 `json:"cpu_per_query_seconds,omitempty"`
}

// QueryLatency is one panel's latency at one range.
type QueryLatency struct {
	Name       string  `json:"name"`
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
}

// queryConfig is what runQueries needs.
type queryConfig struct {
	url                string
	username, password string
	queries            []DashboardQuery
	ranges             []time.Duration
	repeats            int
	timeout            time.Duration
	end                time.Time
}

// runQueries runs every panel at every range repeats times through the
// Prometheus HTTP API and returns the latency per range. A failing query is
// counted, not fatal: a receiver without PromQL (or without a panel's
// functions) still gets its ingest figures.
func runQueries(ctx context.Context, qc queryConfig) ([]RangeLatency, []string, error) {
	lat, errs, err := MeasureDashboards(ctx, []DashboardTarget{{URL: qc.url, End: qc.end, Username: qc.username, Password: qc.password}},
		qc.queries, qc.ranges, qc.repeats, qc.timeout)
	if err != nil {
		return nil, nil, err
	}
	return lat[0], errs[0], nil
}

// DashboardTarget is one receiver MeasureDashboards queries.
type DashboardTarget struct {
	Name string
	// URL is the base of its Prometheus HTTP API (scheme://host).
	URL string
	// End is where every range ends: the newest sample the target was sent.
	End                time.Time
	Username, Password string
	// PID, when not 0, is the server's process, whose CPU time per range
	// is measured from ProcRoot (default /proc).
	PID      int
	ProcRoot string
}

// cpuSeconds is the target's CPU time so far; 0 without a PID or when it
// cannot be read (the figure is then left out).
func (t DashboardTarget) cpuSeconds() (float64, bool) {
	if t.PID == 0 {
		return 0, false
	}
	root := t.ProcRoot
	if root == "" {
		root = "/proc"
	}
	ps, err := ReadProc(root, t.PID)
	if err != nil {
		return 0, false
	}
	return ps.CPUSeconds, true
}

// MeasureDashboards runs every panel at every range repeats times on each
// target and returns each target's latency per range (and its failed
// queries), in the order of targets. The targets are measured interleaved:
// each execution of a panel runs on every target in turn, and the target
// that goes first rotates from one execution to the next. Whatever else
// the machine does during the measurement then slows every target alike,
// which measuring one target after the other cannot promise on a shared
// machine. A failing query is counted, not fatal.
func MeasureDashboards(ctx context.Context, targets []DashboardTarget, queries []DashboardQuery, ranges []time.Duration, repeats int, timeout time.Duration) ([][]RangeLatency, [][]string, error) {
	apis := make([]v1.API, len(targets))
	for i, t := range targets {
		client, err := api.NewClient(api.Config{Address: t.URL, RoundTripper: basicAuth(t.Username, t.Password, api.DefaultRoundTripper)})
		if err != nil {
			return nil, nil, fmt.Errorf("query client for %s: %w", t.URL, err)
		}
		apis[i] = v1.NewAPI(client)
	}
	out := make([][]RangeLatency, len(targets))
	errs := make([][]string, len(targets))
	turn := 0
	for _, r := range ranges {
		step := StepFor(r)
		rls := make([]RangeLatency, len(targets))
		all := make([][]float64, len(targets))
		cpu0 := make([]float64, len(targets))
		for i := range rls {
			rls[i] = RangeLatency{Range: model.Duration(r).String(), RangeSeconds: r.Seconds(), StepSeconds: step.Seconds()}
			cpu0[i], _ = targets[i].cpuSeconds()
		}
		for _, q := range queries {
			lat := make([][]float64, len(targets))
			for range repeats {
				for k := range targets {
					i := (k + turn) % len(targets)
					if err := ctx.Err(); err != nil {
						return nil, errs, err
					}
					rl := &rls[i]
					qctx, cancel := context.WithTimeout(ctx, timeout)
					began := time.Now()
					val, _, _, err := apis[i].QueryRange(qctx, q.Expr, v1.Range{Start: targets[i].End.Add(-r), End: targets[i].End, Step: step})
					d := time.Since(began).Seconds()
					cancel()
					rl.Executions++
					if err != nil {
						rl.Errors++
						if len(errs[i]) < maxErrors {
							errs[i] = append(errs[i], fmt.Sprintf("%s over %s: %v", q.Name, rl.Range, err))
						}
						continue
					}
					if m, ok := val.(model.Matrix); ok && len(m) == 0 {
						rl.Empty++
					}
					lat[i] = append(lat[i], d)
				}
				turn++
			}
			for i := range targets {
				all[i] = append(all[i], lat[i]...)
				rls[i].PerQuery = append(rls[i].PerQuery, QueryLatency{Name: q.Name, P50Seconds: quantile(lat[i], 0.5), P99Seconds: quantile(lat[i], 0.99)})
			}
		}
		for i := range targets {
			rls[i].P50Seconds, rls[i].P99Seconds = quantile(all[i], 0.5), quantile(all[i], 0.99)
			if cpu1, ok := targets[i].cpuSeconds(); ok && rls[i].Executions > 0 {
				rls[i].ServerCPUSeconds = cpu1 - cpu0[i]
				rls[i].CPUPerQuerySeconds = rls[i].ServerCPUSeconds / float64(rls[i].Executions)
			}
			out[i] = append(out[i], rls[i])
		}
	}
	return out, errs, nil
}

// rollupLagMetric is the downsample package's freshness gauge.
const rollupLagMetric = "strata_downsample_lag_seconds"

// storedSampleMetrics are, by receiver, the counter of every sample its
// storage appended, whichever way it came (remote write, Strata's self-scrape
// and recording rules): the first one a target exposes is read.
var storedSampleMetrics = []string{
	"strata_raw_prometheus_tsdb_head_samples_appended_total", // Strata's raw tier
	"prometheus_tsdb_head_samples_appended_total",            // Prometheus
	"vm_rows_added_to_storage_total",                         // VictoriaMetrics
}

// receiverMetrics is what one scrape of the target's /metrics told.
type receiverMetrics struct {
	rollupLag   float64
	hasLag      bool
	stored      float64 // samples the storage appended since it started
	hasStored   bool
	storedTotal string // the metric stored was read from
}

// readReceiverMetrics scrapes metricsURL for the rollup lag (the largest
// strata_downsample_lag_seconds over its tiers; Prometheus and
// VictoriaMetrics have none) and the stored samples.
func readReceiverMetrics(ctx context.Context, client *http.Client, metricsURL, user, pass string) (receiverMetrics, error) {
	fams, err := scrapeMetrics(ctx, client, metricsURL, user, pass)
	if err != nil {
		return receiverMetrics{}, err
	}
	var m receiverMetrics
	m.rollupLag, m.hasLag = rollupLagOf(fams)
	m.stored, m.storedTotal, m.hasStored = storedSamplesOf(fams)
	return m, nil
}

// storedSamplesOf sums the first of storedSampleMetrics found over its
// label sets (Prometheus splits it by sample type).
func storedSamplesOf(fams map[string]*dto.MetricFamily) (float64, string, bool) {
	for _, name := range storedSampleMetrics {
		mf, found := fams[name]
		if !found || len(mf.GetMetric()) == 0 {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			} else {
				sum += m.GetUntyped().GetValue()
			}
		}
		return sum, name, true
	}
	return 0, "", false
}

// scrapeMetrics fetches and parses a text exposition.
func scrapeMetrics(ctx context.Context, client *http.Client, metricsURL, user, pass string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("build metrics request: %w", err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: HTTP %d", metricsURL, resp.StatusCode)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

// parseRollupLag finds the largest strata_downsample_lag_seconds sample in a
// text exposition.
func parseRollupLag(r io.Reader) (float64, bool, error) {
	fams, err := parseMetrics(r)
	if err != nil {
		return 0, false, err
	}
	lag, ok := rollupLagOf(fams)
	return lag, ok, nil
}

func rollupLagOf(fams map[string]*dto.MetricFamily) (float64, bool) {
	mf, found := fams[rollupLagMetric]
	if !found || len(mf.GetMetric()) == 0 {
		return 0, false
	}
	lag := math.Inf(-1)
	for _, m := range mf.GetMetric() {
		v := m.GetGauge().GetValue()
		if m.GetGauge() == nil {
			v = m.GetUntyped().GetValue()
		}
		lag = math.Max(lag, v)
	}
	return lag, true
}

// captureCPUProfile fetches the target's /debug/pprof/profile for the given
// number of seconds and writes it to path (temp file, then rename).
func captureCPUProfile(ctx context.Context, client *http.Client, baseURL, user, pass string, seconds int, path string) error {
	return captureProfile(ctx, client, baseURL+"/debug/pprof/profile?seconds="+strconv.Itoa(seconds), user, pass, path)
}

// captureProfile fetches a pprof profile from u and writes it to path.
func captureProfile(ctx context.Context, client *http.Client, u, user, pass, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return fmt.Errorf("build profile request: %w", err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch %s: HTTP %d (is /debug/pprof enabled on the server?)", u, resp.StatusCode)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := io.Copy(w, resp.Body)
		return err
	})
}

// baseOf is scheme://host of a URL: where the query API, /metrics and
// /debug/pprof of a remote-write target live.
func baseOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", raw, err)
	}
	return u.Scheme + "://" + u.Host, nil
}

// basicAuth wraps rt with HTTP basic auth when user is set.
func basicAuth(user, pass string, rt http.RoundTripper) http.RoundTripper {
	if user == "" {
		return rt
	}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.SetBasicAuth(user, pass)
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
