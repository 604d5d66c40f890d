package rulegen

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"

	"github.com/strata-dev/strata/dcgmbridge"
)

// Joins says which labels identify a series at each level of the canonical
// model and how serving series (vLLM, ...) meet GPU series (DCGM). The labels
// are rendered into the rules' `by (...)` and `on (...)` clauses.
type Joins struct {
	// Serving labels are kept on serving-level series. Default: job, instance,
	// namespace, pod, model_name. The engine label (vLLM data-parallel rank) is
	// summed away so that V0 (no engine label) and V1 give the same label set.
	Serving []string `yaml:"serving"`
	// GPU labels are kept on GPU-level series. Default: hostname, gpu, UUID,
	// modelName, namespace, pod (the DCGM label aliases are applied first).
	GPU []string `yaml:"gpu"`
	// Host labels are kept on host-level (eBPF) series. Default: job, instance.
	Host []string `yaml:"host"`
	// On joins serving to GPU series; it must be a subset of both Serving and
	// GPU. Default: namespace, pod (Kubernetes attribution by dcgm-exporter).
	// Use hostname, gpu when each serving target carries those labels instead.
	On []string `yaml:"on"`
}

// JoinByPod is the default join: DCGM's Kubernetes pod attribution.
func JoinByPod() Joins {
	return Joins{
		Serving: []string{"job", "instance", "namespace", "pod", "model_name"},
		GPU:     []string{"hostname", "gpu", "UUID", "modelName", "namespace", "pod"},
		Host:    []string{"job", "instance"},
		On:      []string{"namespace", "pod"},
	}
}

// JoinByHostGPU joins by host and GPU index, for fleets without Kubernetes
// where each serving target is labelled with hostname and gpu.
func JoinByHostGPU() Joins {
	return Joins{
		Serving: []string{"job", "instance", "hostname", "gpu", "model_name"},
		GPU:     []string{"hostname", "gpu", "UUID", "modelName"},
		Host:    []string{"job", "instance"},
		On:      []string{"hostname", "gpu"},
	}
}

// joinsByHostToo reports whether the serving-to-GPU join gets the host
// fallback (renderer.hostJoin): the join labels are not host labels
// themselves, the GPU level keeps hostname and the serving level instance.
func joinsByHostToo(j Joins) bool {
	return !slices.Contains(j.On, "hostname") && !slices.Contains(j.Serving, "hostname") &&
		slices.Contains(j.GPU, "hostname") && slices.Contains(j.Serving, "instance")
}

// hostJoin is the serving-to-GPU join of the serving targets that carry
// none of the join labels (vLLM run outside Kubernetes, scraped by
// static_configs): such a target is served by the GPUs of the host in its
// instance label (up to the port) when it is the only such target of that
// host, as one vLLM per node spanning the node's GPUs is. Where a host runs
// several, which GPUs serve which is not in the data, and nothing is
// joined: give the targets the join labels instead (docs/metrics.md).
func (r renderer) hostJoin(t dcgmbridge.Term, l dcgmbridge.Level) string {
	absent := make([]string, len(r.cfg.Joins.On))
	for i, lbl := range r.cfg.Joins.On {
		absent[i] = lbl + `=""`
	}
	none := "{" + strings.Join(absent, ", ") + "}"
	targets := fmt.Sprintf(`label_replace(group %s (%s%s), "hostname", "$1", "instance", "(.+):[0-9]+")`, r.byClause(l), t.Den[0], none)
	// The GPUs without the join labels: all of a node's outside Kubernetes,
	// and none but idle ones inside it, where this costs nothing.
	return fmt.Sprintf("sum without (hostname) (avg by (hostname) (%s%s) * on(hostname) group_right() (%s and on(hostname) count by (hostname) (%s) == 1))", t.Metric, none, targets, targets)
}

// HistogramSource is an extra latency histogram (for example a
// bpftrace_exporter script) fed into the network-latency series.
type HistogramSource struct {
	// Name is the histogram family name, without _bucket.
	Name string `yaml:"name"`
	// Scale divides the bucket edges' unit into seconds (1e6 for microseconds).
	Scale float64 `yaml:"scale"`
	// Sparse is true for exporters that emit a different le set per series
	// (bpftrace_exporter): quantiles are then taken per series.
	Sparse bool `yaml:"sparse"`
}

// Config configures the canonical recording rules.
type Config struct {
	// GroupName of the rule group. Default "strata_canonical".
	GroupName string `yaml:"group_name"`
	// Interval between evaluations. Default 15s.
	Interval time.Duration `yaml:"interval"`
	// RateWindow is the range of every rate(). Default 2m: at least four
	// samples of a 30 s dcgm-exporter and enough for a 60 s scrape.
	RateWindow time.Duration `yaml:"rate_window"`
	Joins      Joins         `yaml:"joins"`
	// NetworkHistograms are extra histograms for strata:network_latency_seconds:p99.
	NetworkHistograms []HistogramSource `yaml:"network_histograms"`
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{GroupName: "strata_canonical", Interval: 15 * time.Second, RateWindow: 2 * time.Minute, Joins: JoinByPod()}
}

// Validation errors of Config.
var (
	ErrBadJoin = errors.New("invalid joins")
)

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.GroupName == "" {
		return errors.New("rules group name is empty")
	}
	if c.Interval <= 0 {
		return fmt.Errorf("rules interval must be positive, got %s", c.Interval)
	}
	if c.RateWindow <= 0 {
		return fmt.Errorf("rules rate window must be positive, got %s", c.RateWindow)
	}
	j := c.Joins
	for name, set := range map[string][]string{"serving": j.Serving, "gpu": j.GPU, "host": j.Host, "on": j.On} {
		if len(set) == 0 {
			return fmt.Errorf("%w: %s labels are empty", ErrBadJoin, name)
		}
		for _, l := range set {
			if !model.LegacyValidation.IsValidLabelName(l) || l == "le" || l == model.MetricNameLabel {
				return fmt.Errorf("%w: %s label %q is not usable", ErrBadJoin, name, l)
			}
		}
	}
	for _, l := range j.On {
		if !slices.Contains(j.Serving, l) || !slices.Contains(j.GPU, l) {
			return fmt.Errorf("%w: join label %q must be in both serving %v and gpu %v", ErrBadJoin, l, j.Serving, j.GPU)
		}
	}
	for _, h := range c.NetworkHistograms {
		if !model.LegacyValidation.IsValidMetricName(h.Name) {
			return fmt.Errorf("network histogram %q is not a valid metric name", h.Name)
		}
		if h.Scale < 0 {
			return fmt.Errorf("network histogram %s: negative scale", h.Name)
		}
	}
	return nil
}

// Rule is one rendered recording rule.
type Rule struct {
	Record string
	Expr   string
	Labels map[string]string
	// Canonical is the catalogue entry the rule records.
	Canonical dcgmbridge.CanonicalMetric
}

// Render renders the canonical recording rules of cat for cfg, in evaluation
// order.
func Render(cat *dcgmbridge.Catalogue, cfg Config) ([]Rule, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := renderer{cat: cat, cfg: cfg, window: model.Duration(cfg.RateWindow).String()}
	out := make([]Rule, 0, len(cat.Canonical))
	for _, cm := range cat.Canonical {
		terms := cm.Terms
		if cm.Name == "strata:network_latency_seconds:p99" {
			for _, h := range cfg.NetworkHistograms {
				k := dcgmbridge.TermQuantile
				if h.Sparse {
					k = dcgmbridge.TermSparseQuantile
				}
				terms = append(slices.Clip(terms), dcgmbridge.Term{Source: dcgmbridge.SourceBPFTrace, Kind: k, Metric: h.Name, Quantile: 0.99, Scale: h.Scale})
			}
		}
		parts := make([]string, 0, len(terms))
		for _, t := range terms {
			e, err := r.term(cm, t)
			if err != nil {
				return nil, fmt.Errorf("canonical %s: %w", cm.Name, err)
			}
			parts = append(parts, e)
		}
		expr := parts[0]
		if len(parts) > 1 {
			expr = strings.Join(parts, "\nor on("+strings.Join(r.by(cm.Level), ", ")+")\n")
		}
		lbls := map[string]string{"strata_cause": string(cm.Cause), "strata_felt": string(cm.Felt)}
		maps.Copy(lbls, cm.Labels)
		out = append(out, Rule{Record: cm.Name, Expr: expr, Labels: lbls, Canonical: cm})
	}
	return out, nil
}

// YAML renders the canonical rules of cat as a Prometheus rule file (promtool
// check rules accepts it), for rules.Manager or for a Prometheus in front of
// Strata.
func YAML(cat *dcgmbridge.Catalogue, cfg Config) ([]byte, error) {
	rs, err := Render(cat, cfg)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Code generated by dcgmbridge/rulegen from the dcgmbridge catalogue; DO NOT EDIT.\n")
	b.WriteString("# Regenerate: go test ./dcgmbridge/rulegen -run TestCommittedArtefacts -update\n")
	b.WriteString("# Canonical inference metrics (docs/metrics.md), every source version mapped by `or`.\n")
	b.WriteString("groups:\n")
	fmt.Fprintf(&b, "  - name: %s\n", cfg.GroupName)
	fmt.Fprintf(&b, "    interval: %s\n", model.Duration(cfg.Interval))
	b.WriteString("    rules:\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "      # %s Cause: %s. Felt: %s.\n", r.Canonical.Help, r.Canonical.Cause, r.Canonical.Felt)
		fmt.Fprintf(&b, "      - record: %s\n", r.Record)
		b.WriteString("        expr: |-\n")
		for line := range strings.SplitSeq(r.Expr, "\n") {
			b.WriteString("          " + line + "\n")
		}
		b.WriteString("        labels:\n")
		for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
			fmt.Fprintf(&b, "          %s: %s\n", k, strconv.Quote(r.Labels[k]))
		}
	}
	return b.Bytes(), nil
}

// Groups renders and parses the canonical rules of cat exactly as Prometheus
// loads a rule file.
func Groups(cat *dcgmbridge.Catalogue, cfg Config) (*rulefmt.RuleGroups, error) {
	y, err := YAML(cat, cfg)
	if err != nil {
		return nil, err
	}
	groups, errs := rulefmt.Parse(y, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, fmt.Errorf("parse canonical rules: %w", errors.Join(errs...))
	}
	return groups, nil
}

// RecordingRules returns the canonical rules of cat ready for rules.NewGroup,
// in evaluation order (a later rule reads earlier rules' output of the same
// evaluation).
func RecordingRules(cat *dcgmbridge.Catalogue, cfg Config) ([]rules.Rule, error) {
	groups, err := Groups(cat, cfg)
	if err != nil {
		return nil, err
	}
	p := parser.NewParser(parser.Options{})
	var out []rules.Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				return nil, fmt.Errorf("parse rule %s: %w", r.Record, err)
			}
			out = append(out, rules.NewRecordingRule(r.Record, expr, labels.FromMap(r.Labels)))
		}
	}
	return out, nil
}

// sentinelFloor: DCGM gauges at or above DCGM_FP64_BLANK are "blank / not
// supported" markers, never measurements (dcgmbridge.DCGMFP64Blank); the rules
// ignore any that reached storage by remote write.
const sentinelFloor = "140737488355328"

type renderer struct {
	cat    *dcgmbridge.Catalogue
	cfg    Config
	window string
}

func (r renderer) by(l dcgmbridge.Level) []string {
	switch l {
	case dcgmbridge.LevelGPU:
		return r.cfg.Joins.GPU
	case dcgmbridge.LevelHost:
		return r.cfg.Joins.Host
	default:
		return r.cfg.Joins.Serving
	}
}

func (r renderer) byClause(l dcgmbridge.Level, extra ...string) string {
	return "by (" + strings.Join(append(extra, r.by(l)...), ", ") + ")"
}

// fix copies aliased label spellings of the source into the canonical one,
// for the labels the level keeps (others are aggregated away anyway).
func (r renderer) fix(l dcgmbridge.Level, src dcgmbridge.Source, expr string) string {
	for _, a := range r.cat.Aliases(src) {
		if !slices.Contains(r.by(l), a.To) {
			continue
		}
		expr = fmt.Sprintf(`label_replace(%s, "%s", "$1", "%s", "(.+)")`, expr, a.To, a.From)
	}
	return expr
}

func withMatch(name, match string) string {
	if match == "" {
		return name
	}
	return name + "{" + match + "}"
}

// fieldSelector selects every spelling of a DCGM field.
func (r renderer) fieldSelector(id int) (string, error) {
	f, ok := r.cat.Field(id)
	if !ok {
		return "", fmt.Errorf("unknown dcgm field %d", id)
	}
	return fmt.Sprintf(`{__name__=~"%s"}`, strings.Join(f.Names(), "|")), nil
}

// fieldRate is the rate of a DCGM counter field; each spelling is rated
// separately (rate drops the name, and two spellings on one series would
// collide), the first spelling present wins.
func (r renderer) fieldRate(id int) (string, error) {
	f, ok := r.cat.Field(id)
	if !ok {
		return "", fmt.Errorf("unknown dcgm field %d", id)
	}
	parts := make([]string, 0, 3)
	for _, n := range f.Names() {
		parts = append(parts, fmt.Sprintf("rate(%s[%s])", n, r.window))
	}
	return "(" + strings.Join(parts, " or ") + ")", nil
}

func (r renderer) sumRate(l dcgmbridge.Level, src dcgmbridge.Source, name string) string {
	return fmt.Sprintf("sum %s (%s)", r.byClause(l), r.fix(l, src, fmt.Sprintf("rate(%s[%s])", name, r.window)))
}

func scaled(expr string, scale float64) string {
	if scale == 0 || scale == 1 {
		return expr
	}
	return fmt.Sprintf("%s / %s", expr, strconv.FormatFloat(scale, 'g', -1, 64))
}

func (r renderer) term(cm dcgmbridge.CanonicalMetric, t dcgmbridge.Term) (string, error) {
	l := cm.Level
	var expr string
	switch t.Kind {
	case dcgmbridge.TermGauge:
		sel := withMatch(t.Metric, t.Match)
		if len(t.FieldIDs) == 1 {
			s, err := r.fieldSelector(t.FieldIDs[0])
			if err != nil {
				return "", err
			}
			sel = s + " < " + sentinelFloor
		}
		expr = scaled(fmt.Sprintf("%s %s (%s)", t.Agg, r.byClause(l), r.fix(l, t.Source, sel)), t.Scale)
		if t.StuckGuard {
			util, err := r.fieldSelector(dcgmbridge.FieldGPUUtil)
			if err != nil {
				return "", err
			}
			on := "on(" + strings.Join(r.by(l), ", ") + ")"
			utilExpr := fmt.Sprintf("%s %s (%s)", "avg", r.byClause(l), r.fix(l, t.Source, util+" < "+sentinelFloor))
			expr = fmt.Sprintf("(%s unless %s (%s == 0 and %s %s > 50))", expr, on, expr, on, utilExpr)
		}
	case dcgmbridge.TermRate:
		expr = r.sumRate(l, t.Source, withMatch(t.Metric, t.Match))
	case dcgmbridge.TermRatio:
		num := r.sumRate(l, t.Source, withMatch(t.Metric, t.Match))
		dens := make([]string, len(t.Den))
		for i, d := range t.Den {
			dens[i] = r.sumRate(l, t.Source, d)
		}
		expr = scaled(fmt.Sprintf("(%s / (%s > 0))", num, strings.Join(dens, " + ")), t.Scale)
	case dcgmbridge.TermQuantile:
		// Classic buckets, or a native histogram (a sender converting classic
		// histograms to NHCB sends one series named after the family).
		q := strconv.FormatFloat(t.Quantile, 'g', -1, 64)
		classic := fmt.Sprintf("histogram_quantile(%s, sum %s (%s))", q, r.byClause(l, "le"), r.fix(l, t.Source, fmt.Sprintf("rate(%s_bucket[%s])", t.Metric, r.window)))
		native := fmt.Sprintf("histogram_quantile(%s, sum %s (%s))", q, r.byClause(l), r.fix(l, t.Source, fmt.Sprintf("rate(%s[%s])", t.Metric, r.window)))
		expr = scaled(fmt.Sprintf("(%s or on(%s) %s)", classic, strings.Join(r.by(l), ", "), native), t.Scale)
	case dcgmbridge.TermSparseQuantile:
		inner := r.fix(l, t.Source, fmt.Sprintf("rate(%s_bucket[%s])", t.Metric, r.window))
		expr = scaled(fmt.Sprintf("max %s (histogram_quantile(%s, %s))", r.byClause(l), strconv.FormatFloat(t.Quantile, 'g', -1, 64), inner), t.Scale)
	case dcgmbridge.TermHistMean:
		expr = fmt.Sprintf("(%s / (%s > 0))", r.sumRate(l, t.Source, t.Metric+"_sum"), r.sumRate(l, t.Source, t.Metric+"_count"))
	case dcgmbridge.TermFieldsRate:
		parts := make([]string, len(t.FieldIDs))
		for i, id := range t.FieldIDs {
			fr, err := r.fieldRate(id)
			if err != nil {
				return "", err
			}
			// A distinct label per field keeps `or` from merging them: sum adds all.
			parts[i] = fmt.Sprintf(`label_replace(%s, "strata_field", "%d", "", "")`, fr, id)
		}
		expr = fmt.Sprintf("clamp_max(%s, 1)", scaled(fmt.Sprintf("sum %s (%s)", r.byClause(l), r.fix(l, t.Source, strings.Join(parts, " or "))), t.Scale))
	case dcgmbridge.TermClockEventBits:
		sel, err := r.fieldSelector(t.FieldIDs[0])
		if err != nil {
			return "", err
		}
		// Bits 0x4|0x8 (power cap, HW slowdown) are floor(v/4) % 4; bits
		// 0x20|0x40|0x80 (SW/HW thermal, power brake) are floor(v/32) % 8.
		v := "(" + sel + " < " + sentinelFloor + ")"
		bits := fmt.Sprintf("clamp_max(floor(%s / 4) %% 4 + floor(%s / 32) %% 8, 1)", v, v)
		expr = fmt.Sprintf("max %s (%s)", r.byClause(l), r.fix(l, t.Source, bits))
	case dcgmbridge.TermJoin:
		// Only series that carry every join label take part: a GPU with no
		// pod attribution must not join a serving target that has no pod label.
		on := strings.Join(r.cfg.Joins.On, ", ")
		present := make([]string, len(r.cfg.Joins.On))
		for i, lbl := range r.cfg.Joins.On {
			present[i] = lbl + `!=""`
		}
		has := "{" + strings.Join(present, ", ") + "}"
		expr = fmt.Sprintf("avg by (%s) (%s%s) * on(%s) group_right() group %s (%s%s)", on, t.Metric, has, on, r.byClause(l), t.Den[0], has)
		if joinsByHostToo(r.cfg.Joins) {
			expr += " or " + r.hostJoin(t, l)
		}
	case dcgmbridge.TermResidual:
		expr = fmt.Sprintf("clamp_min(sum %s (%s) - on(%s) sum %s (%s), 0)", r.byClause(l), t.Metric, strings.Join(r.by(l), ", "), r.byClause(l), t.Den[0])
	default:
		return "", fmt.Errorf("unknown term kind %d", t.Kind)
	}
	if t.Tag != "" {
		expr = fmt.Sprintf(`label_replace(%s, "strata_source", "%s", "", "")`, expr, t.Tag)
	}
	return expr, nil
}
