package rulegen

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/dcgmbridge/scrape"
	"github.com/strata-dev/strata/query"
	"github.com/strata-dev/strata/tiers"
)

// evalEnv is a raw tier with fixtures loaded and the canonical rules.
type evalEnv struct {
	t      testing.TB
	raw    *tiers.Raw
	engine *promql.Engine
	cat    *dcgmbridge.Catalogue
	parser *scrape.ExpositionParser
	// internal evaluates the rules in their internal form (PushDownRenames).
	internal bool
	// pinned is the engine's parser, as `strata serve` has it; noPin
	// leaves the internal forms unpinned there (parsed at each evaluation).
	pinned *query.PinnedExprs
	noPin  bool
	pinIn  ExprPinner // where the forms pin (nil: pinned)
}

func newEvalEnv(t testing.TB) *evalEnv {
	t.Helper()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := raw.Close(); err != nil {
			t.Error(err)
		}
	})
	cat := newTestCatalogue(t)
	pinned := query.NewPinnedExprs(parser.NewParser(parser.Options{}))
	return &evalEnv{
		t:      t,
		raw:    raw,
		cat:    cat,
		engine: promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute, Parser: pinned}),
		pinned: pinned,
		parser: &scrape.ExpositionParser{Sentinels: scrape.NewSentinelFilter(cat, prometheus.NewRegistry())},
	}
}

// parseFixture parses a fixture (or body, when fixture is "") for target.
func (e *evalEnv) parseFixture(fixture string, target []string) []scrape.Sample {
	e.t.Helper()
	body := readFixture(e.t, fixture)
	exp, err := e.parser.Parse(body, "text/plain; version=0.0.4", labels.FromStrings(target...), t0)
	if err != nil {
		e.t.Fatalf("parse %s: %v", fixture, err)
	}
	return exp.Samples
}

// scrapeSequence appends what a 15 s scrape would have seen between from (at
// t0) and to (at t1): every value moves linearly, so counters stay monotonic
// and the ratio of two counters' increases is the same in every sub-window.
func (e *evalEnv) scrapeSequence(from, to []scrape.Sample) {
	e.t.Helper()
	start := map[uint64]float64{}
	for _, s := range from {
		start[s.Labels.Hash()] = s.Value
	}
	const steps = 4
	for k := 0; k <= steps; k++ {
		ts := t0.Add(time.Duration(k) * time.Minute / steps)
		app := e.raw.Appender(context.Background())
		for _, s := range to {
			v0, ok := start[s.Labels.Hash()]
			if !ok {
				v0 = s.Value
			}
			v := v0 + (s.Value-v0)*float64(k)/steps
			if _, err := app.Append(0, s.Labels, ts.UnixMilli(), v); err != nil {
				e.t.Fatalf("append %s: %v", s.Labels, err)
			}
		}
		if err := app.Commit(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// grown returns samples with every counter-like value (counters, histogram
// buckets, sums and counts) multiplied by f: more traffic, same shape.
func grown(samples []scrape.Sample, f float64) []scrape.Sample {
	out := make([]scrape.Sample, len(samples))
	for i, s := range samples {
		out[i] = s
		name := s.Labels.Get("__name__")
		for _, suf := range []string{"_total", "_sum", "_count", "_bucket"} {
			if strings.HasSuffix(name, suf) {
				out[i].Value = s.Value * f
			}
		}
	}
	return out
}

// evalRules runs the canonical rule group once at ts through Prometheus'
// rules package, appending the results to the raw tier as rules.Manager would.
func (e *evalEnv) evalRules(cfg Config, ts time.Time) {
	e.t.Helper()
	g := e.group(cfg, e.internal)
	g.eval(ts)
	for _, r := range g.Rules() {
		if err := r.LastError(); err != nil {
			e.t.Errorf("rule %s: %v", r.Name(), err)
		}
	}
}

// group builds the canonical rule group over the raw tier: the exported
// form (label_replace chains) as a Prometheus loading the rule file runs it,
// or, internal, as `strata serve` runs it: the same rules evaluated by
// InternalForms.QueryFunc in their internal form.
func (e *evalEnv) group(cfg Config, internal bool) ruleGroup {
	e.t.Helper()
	return e.groupOver(cfg, internal, e.raw)
}

// groupOver is group reading from q.
func (e *evalEnv) groupOver(cfg Config, internal bool, q storage.Queryable) ruleGroup {
	e.t.Helper()
	rs, err := RecordingRules(e.cat, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	qf := rules.EngineQueryFunc(e.engine, q)
	var forms *InternalForms
	if internal {
		forms = NewInternalForms()
		switch {
		case e.pinIn != nil:
			forms.PinIn(e.pinIn)
		case !e.noPin:
			forms.PinIn(e.pinned)
		}
		exprs := make([]string, len(rs))
		for i, r := range rs {
			exprs[i] = r.Query().String()
		}
		if err := forms.Set(parser.NewParser(parser.Options{}), exprs); err != nil {
			e.t.Fatal(err)
		}
		qf = forms.QueryFunc(e.engine, q, 5*time.Minute)
	}
	return ruleGroup{forms: forms, Group: rules.NewGroup(rules.GroupOptions{
		Name: cfg.GroupName, Interval: cfg.Interval, Rules: rs,
		Opts: &rules.ManagerOptions{
			QueryFunc:    qf,
			AppendableV2: e.raw,
			Queryable:    e.raw,
			Context:      context.Background(),
			Logger:       slog.New(slog.DiscardHandler),
			Registerer:   prometheus.NewRegistry(),
		},
	})}
}

// ruleGroup is a canonical rule group and how it is evaluated.
type ruleGroup struct {
	*rules.Group
	// forms evaluates the rules as `strata serve` does; nil: the exported
	// form, as a Prometheus does.
	forms *InternalForms
}

// eval runs one evaluation of the group at ts, as rules.Manager would.
func (g ruleGroup) eval(ts time.Time) {
	if g.forms == nil {
		g.Eval(context.Background(), ts)
		return
	}
	g.forms.EvalIterationFunc(context.Background(), g.Group, ts)
}

func (e *evalEnv) query(q string, ts time.Time) promql.Vector {
	e.t.Helper()
	return e.queryOver(e.raw, q, ts)
}

// queryOver is query reading from sq.
func (e *evalEnv) queryOver(sq storage.Queryable, q string, ts time.Time) promql.Vector {
	e.t.Helper()
	qry, err := e.engine.NewInstantQuery(context.Background(), sq, nil, q, ts)
	if err != nil {
		e.t.Fatal(err)
	}
	defer qry.Close()
	res := qry.Exec(context.Background())
	if res.Err != nil {
		e.t.Fatalf("%s: %v", q, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// one returns the single value of q, failing unless there is exactly one.
func (e *evalEnv) one(q string, ts time.Time) float64 {
	e.t.Helper()
	v := e.query(q, ts)
	if len(v) != 1 {
		e.t.Fatalf("%s: want 1 series, got %d: %v", q, len(v), v)
	}
	return v[0].F
}

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		t.Errorf("%s = %g, want %g ± %g", what, got, want, tol)
	}
}

var (
	t0      = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	t1      = t0.Add(time.Minute)
	v1Pod   = []string{"job", "vllm", "instance", "10.0.0.5:8000", "namespace", "inference", "pod", "vllm-llama31-8b-6d9f7c5b8-x2kqp"}
	v0Pod   = []string{"job", "vllm", "instance", "10.0.0.9:8000", "namespace", "inference", "pod", "vllm-mistral-v0-7f9c"}
	dcgmTgt = []string{"job", "dcgm", "instance", "gpu-node-a17:9400"}
)

// TestCanonicalRulesOnFixtures evaluates the committed rules over the fixtures
// and checks the canonical values a diagnosis would read.
func TestCanonicalRulesOnFixtures(t *testing.T) {
	e := newEvalEnv(t)
	e.scrapeSequence(e.parseFixture("vllm_v1_t0_healthy.prom", v1Pod), e.parseFixture("vllm_v1_t1_kv_storm.prom", v1Pod))
	v0 := e.parseFixture("vllm_v0_legacy.prom", v0Pod)
	e.scrapeSequence(v0, grown(v0, 1.1))
	bare := e.parseFixture("vllm_v1_t0_healthy.prom", []string{"job", "vllm-bare", "instance", "10.0.0.7:8000"})
	e.scrapeSequence(bare, grown(bare, 1.1))
	// Outside Kubernetes on the DCGM fixture's host, the only such target
	// there: the host join gives it that host's GPUs without a pod (GPU 1).
	onHost := e.parseFixture("vllm_v1_t0_healthy.prom", []string{"job", "vllm-host", "instance", "gpu-node-a17:8000"})
	e.scrapeSequence(onHost, grown(onHost, 1.1))
	dcgm := e.parseFixture("dcgm_exporter_profiling_k8s.prom", dcgmTgt)
	e.scrapeSequence(dcgm, dcgm)
	cfg := DefaultConfig()
	// A 1 m window at t1 holds the 15 s samples after t0: the storm minute.
	cfg.RateWindow = time.Minute
	e.evalRules(cfg, t0)
	e.evalRules(cfg, t1)

	v1 := `{pod="vllm-llama31-8b-6d9f7c5b8-x2kqp"}`
	t.Run("kv usage rises to the storm level", func(t *testing.T) {
		near(t, "kv t0", e.one("strata:kv_cache_usage:ratio"+v1, t0), 0.412, 1e-9)
		near(t, "kv t1", e.one("strata:kv_cache_usage:ratio"+v1, t1), 0.9931, 1e-9)
	})
	t.Run("queue time rises from 0.02 s to 6.35 s", func(t *testing.T) {
		near(t, "mean queue t1", e.one(`strata:latency_seconds:component{component="queue",pod="vllm-llama31-8b-6d9f7c5b8-x2kqp"}`, t1), 6.35, 0.05)
		// p99 from the buckets of the t0..t1 increase: at least the mean.
		if p99 := e.one("strata:queue_time_seconds:p99"+v1, t1); p99 < 6.35 {
			t.Errorf("queue p99 %g below the mean", p99)
		}
		near(t, "waiting t1", e.one("strata:requests_waiting"+v1, t1), 64, 0)
	})
	t.Run("acceptance collapses to 0.095", func(t *testing.T) {
		near(t, "acceptance", e.one("strata:spec_decode_acceptance:ratio"+v1, t1), 0.095, 0.005)
	})
	t.Run("prefix hit ratio falls to 0.06", func(t *testing.T) {
		near(t, "prefix hit", e.one("strata:prefix_cache_hit:ratio"+v1, t1), 0.06, 0.005)
	})
	t.Run("preemptions appear", func(t *testing.T) {
		if got := e.one("strata:preemptions:rate"+v1, t1); got <= 0 {
			t.Errorf("preemption rate %g, want > 0", got)
		}
	})
	t.Run("latency components stack up to end-to-end", func(t *testing.T) {
		sum := e.one(`sum(strata:latency_seconds:component`+v1+`)`, t1)
		e2e := e.one("strata:e2e_latency_seconds:mean"+v1, t1)
		near(t, "queue+prefill+decode+other", sum, e2e, 1e-9)
		comps := e.query(`strata:latency_seconds:component`+v1, t1)
		if len(comps) != 4 {
			t.Errorf("want 4 components, got %v", comps)
		}
	})
	t.Run("sm activity comes from SM_ACTIVE when profiling is on", func(t *testing.T) {
		v := e.query(`strata:gpu_sm_active:ratio{gpu="0"}`, t1)
		if len(v) != 1 || v[0].Metric.Get("strata_source") != "sm_active" {
			t.Fatalf("got %v", v)
		}
		near(t, "sm active", v[0].F, 0.871209, 1e-9)
		if hn := v[0].Metric.Get("hostname"); hn != "gpu-node-a17" {
			t.Errorf("Hostname not mapped onto hostname: %v", v[0].Metric)
		}
	})
	t.Run("join puts GPU activity on the serving series", func(t *testing.T) {
		v := e.query(`strata:serving_gpu_sm_active:ratio{job="vllm"}`, t1)
		if len(v) != 1 || v[0].Metric.Get("model_name") != "meta-llama/Llama-3.1-8B-Instruct" {
			t.Fatalf("got %v", v)
		}
		near(t, "joined sm active", v[0].F, 0.871209, 1e-9)
	})
	t.Run("a serving target without pod labels joins no GPU", func(t *testing.T) {
		// GPU 1 has no pod attribution and vllm-bare no pod label: without the
		// presence filter they would join on namespace="", pod="".
		if len(e.query(`strata:generation_tokens:rate{job="vllm-bare"}`, t1)) != 1 {
			t.Fatal("bare target has no serving series")
		}
		if v := e.query(`strata:serving_gpu_sm_active:ratio{job="vllm-bare"}`, t1); len(v) != 0 {
			t.Errorf("unexpected joins: %v", v)
		}
	})
	t.Run("a serving target without pod labels alone on a GPU host joins its unattributed GPUs", func(t *testing.T) {
		v := e.query(`strata:serving_gpu_sm_active:ratio{job="vllm-host"}`, t1)
		if len(v) != 1 || v[0].Metric.Get("instance") != "gpu-node-a17:8000" || v[0].Metric.Has("hostname") {
			t.Fatalf("got %v", v)
		}
		near(t, "GPU 1's sm active", v[0].F, 0, 1e-9)
		if v := e.query(`strata:serving_gpu_sm_active:ratio{pod="vllm-llama31-8b-6d9f7c5b8-x2kqp"}`, t1); len(v) != 1 {
			t.Errorf("the pod's join: %v", v)
		}
	})
	t.Run("every canonical series carries both axes", func(t *testing.T) {
		for _, s := range e.query(`{__name__=~"strata:.+"}`, t1) {
			if s.Metric.Get("strata_cause") == "" || s.Metric.Get("strata_felt") == "" {
				t.Errorf("%s lacks an axis", s.Metric)
			}
		}
	})
	t.Run("V0 and V1 give the same canonical names and label sets", func(t *testing.T) {
		shape := func(pod string) map[string]string {
			out := map[string]string{}
			for _, s := range e.query(`{__name__=~"strata:.+",pod="`+pod+`"}`, t1) {
				out[s.Metric.Get("__name__")+s.Metric.Get("component")] = strings.Join(labelNames(s.Metric), ",")
			}
			return out
		}
		v0, v1 := shape("vllm-mistral-v0-7f9c"), shape("vllm-llama31-8b-6d9f7c5b8-x2kqp")
		for _, name := range []string{
			"strata:kv_cache_usage:ratio", "strata:ttft_seconds:p50", "strata:ttft_seconds:p99",
			"strata:tpot_seconds:p99", "strata:e2e_latency_seconds:p99", "strata:e2e_latency_seconds:mean",
			"strata:requests:rate", "strata:generation_tokens:rate", "strata:prompt_tokens:rate",
			"strata:preemptions:rate", "strata:spec_decode_acceptance:ratio", "strata:requests_waiting", "strata:requests_running",
		} {
			if v0[name] == "" || v0[name] != v1[name] {
				t.Errorf("%s: V0 labels %q, V1 labels %q", name, v0[name], v1[name])
			}
		}
		// V0's acceptance: the windowed counters (61234/88335) win over the
		// cumulative gauge (0.6932).
		near(t, "v0 acceptance", e.one(`strata:spec_decode_acceptance:ratio{pod="vllm-mistral-v0-7f9c"}`, t1), 61234.0/88335, 1e-9)
	})
}

// TestSMActivityFallbackChain checks each link of the chain on the default
// (no profiling SM_ACTIVE) fixture and on edited copies.
func TestSMActivityFallbackChain(t *testing.T) {
	body := readFixture(t, "dcgm_exporter_default_k8s.prom")
	drop := func(prefix string) string {
		var keep []string
		for line := range strings.SplitSeq(string(body), "\n") {
			if !strings.Contains(line, prefix) {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n")
	}
	for _, tc := range []struct {
		name, body, source string
		stuck              bool // GR_ENGINE_ACTIVE of GPU 0 reads 0 (dcgm-exporter #662)
		want               float64
	}{
		{"default CSV uses GR_ENGINE_ACTIVE", string(body), "gr_engine_active", false, 0.962413},
		{"without profiling uses GPU_UTIL/100", drop("DCGM_FI_PROF_"), "gpu_util", false, 0.97},
		{"GR_ENGINE stuck at 0 while busy falls back to GPU_UTIL", string(body), "gpu_util", true, 0.97},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEvalEnv(t)
			exp, err := e.parser.Parse([]byte(tc.body), "", labels.FromStrings(dcgmTgt...), t0)
			if err != nil {
				t.Fatal(err)
			}
			app := e.raw.Appender(context.Background())
			for _, s := range exp.Samples {
				if tc.stuck && s.Labels.Get("__name__") == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" && s.Labels.Get("gpu") == "0" {
					s.Value = 0 // stuck profiling field (dcgm-exporter #662)
				}
				if _, err := app.Append(0, s.Labels, t0.UnixMilli(), s.Value); err != nil {
					t.Fatal(err)
				}
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
			e.evalRules(DefaultConfig(), t0)
			v := e.query(`strata:gpu_sm_active:ratio{gpu="0"}`, t0)
			if len(v) != 1 {
				t.Fatalf("got %v", v)
			}
			if got := v[0].Metric.Get("strata_source"); got != tc.source {
				t.Errorf("strata_source = %s, want %s", got, tc.source)
			}
			near(t, "sm active", v[0].F, tc.want, 1e-9)
			if !slices.Contains(labelNames(v[0].Metric), "pod") {
				t.Errorf("pod attribution lost: %v", v[0].Metric)
			}
		})
	}
}

func labelNames(ls labels.Labels) []string {
	var out []string
	ls.Range(func(l labels.Label) { out = append(out, l.Name) })
	return out
}
