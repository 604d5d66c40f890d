package rulestale

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/rules"
)

// Metrics returns the rule group metrics rules.NewGroupMetrics(reg) would,
// registered with reg (when not nil), for rules.ManagerOptions.Metrics. Its
// prometheus_rule_group_last_evaluation_samples gauge counts each
// placeholder Group.Eval counts as the size of the result it stands for, so
// the gauge shows what Prometheus' would: the samples the rules returned.
func (tr *Tracker) Metrics(reg prometheus.Registerer) *rules.Metrics {
	m := rules.NewGroupMetrics(nil)
	ch := make(chan *prometheus.Desc, 1)
	m.GroupSamples.Describe(ch)
	desc := <-ch
	m.GroupSamples = &prometheus.GaugeVec{MetricVec: prometheus.NewMetricVec(desc, func(lvs ...string) prometheus.Metric {
		return &samplesGauge{tr: tr, desc: desc, lvs: lvs}
	})}
	if reg != nil {
		reg.MustRegister(
			m.EvalDuration,
			m.EvalDurationHistogram,
			m.IterationDuration,
			m.IterationDurationHistogram,
			m.IterationsMissed,
			m.IterationsScheduled,
			m.EvalTotal,
			m.EvalFailures,
			m.GroupInterval,
			m.GroupLastEvalTime,
			m.GroupLastDuration,
			m.GroupLastRuleDurationSum,
			m.GroupLastRestoreDuration,
			m.GroupRules,
			m.GroupSamples,
		)
	}
	return m
}

// samplesGauge is one group's prometheus_rule_group_last_evaluation_samples.
// Group.Eval sets it once, at its end, to the number of samples its rules
// returned; Set adds what the evaluation's placeholders stood for.
type samplesGauge struct {
	tr   *Tracker
	desc *prometheus.Desc
	lvs  []string // rule_group
	bits atomic.Uint64
}

var _ prometheus.Gauge = (*samplesGauge)(nil)

func (g *samplesGauge) Set(v float64) {
	if len(g.lvs) == 1 {
		g.tr.mu.Lock()
		if it := g.tr.iters[g.lvs[0]]; it != nil {
			v += float64(it.delta)
			it.delta = 0
		}
		g.tr.mu.Unlock()
	}
	g.bits.Store(math.Float64bits(v))
}

func (g *samplesGauge) Add(v float64) {
	for {
		old := g.bits.Load()
		if g.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (g *samplesGauge) Inc()          { g.Add(1) }
func (g *samplesGauge) Dec()          { g.Add(-1) }
func (g *samplesGauge) Sub(v float64) { g.Add(-v) }
func (g *samplesGauge) SetToCurrentTime() {
	g.bits.Store(math.Float64bits(float64(time.Now().UnixNano()) / 1e9))
}

func (g *samplesGauge) Desc() *prometheus.Desc { return g.desc }

func (g *samplesGauge) Write(out *dto.Metric) error {
	m, err := prometheus.NewConstMetric(g.desc, prometheus.GaugeValue, math.Float64frombits(g.bits.Load()), g.lvs...)
	if err != nil {
		return err
	}
	return m.Write(out)
}

func (g *samplesGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *samplesGauge) Collect(ch chan<- prometheus.Metric) { ch <- g }
