package main

import (
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/otlptranslator"
	promconfig "github.com/prometheus/prometheus/config"

	"github.com/strata-dev/strata/dcgmbridge"
)

// otlpNames maps what Prometheus' OTLP translator, configured by oc, makes
// of the metric names the catalogue knows back to those names, for the
// OTLP receiver (remotewrite.OTLPConfig.Names). A Collector that scrapes
// dcgm-exporter, vLLM or the other sources with its prometheus receiver
// and exports OTLP hands over each family under its exposed name (or,
// with the Collector's name normalisation, without its _total) and its
// type; with suffixes on, the translator appends _total to a counter that
// lacks it (DCGM_FI_DEV_POWER_VIOLATION_total) or moves it
// (dcgm_total_energy_consumption becomes dcgm_energy_consumption_total),
// and the canonical rules and the diagnosis engine, which read the exposed
// names, would not see the series. A translated name that is itself a
// catalogue name is never mapped.
func otlpNames(cat *dcgmbridge.Catalogue, oc promconfig.OTLPConfig) map[string]string {
	namer := otlptranslator.MetricNamer{WithMetricSuffixes: oc.TranslationStrategy.ShouldAddSuffixes(), UTF8Allowed: !oc.TranslationStrategy.ShouldEscape()}
	known := map[string]string{} // exposed name: type
	for _, m := range cat.Metrics {
		known[m.Name] = m.Type
	}
	for _, f := range cat.Fields {
		for _, n := range f.Names() {
			known[n] = f.Type
		}
	}
	out := map[string]string{}
	add := func(from, to string) {
		if _, ok := known[from]; !ok && from != to {
			out[from] = to
		}
	}
	for name, typ := range known {
		if !model.LegacyValidation.IsValidMetricName(name) {
			continue // a pattern, such as bpftrace_<script>_<var>
		}
		var ot otlptranslator.MetricType
		switch typ {
		case "counter":
			ot = otlptranslator.MetricTypeMonotonicCounter
		case "gauge":
			ot = otlptranslator.MetricTypeGauge
		case "histogram":
			ot = otlptranslator.MetricTypeHistogram
		default:
			continue // DCGM's label-only fields
		}
		for _, sent := range []string{name, strings.TrimSuffix(name, "_total")} {
			got, err := namer.Build(otlptranslator.Metric{Name: sent, Type: ot})
			if err != nil {
				continue
			}
			if ot == otlptranslator.MetricTypeHistogram {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					add(got+suffix, name+suffix)
				}
				continue
			}
			add(got, name)
		}
	}
	return out
}
