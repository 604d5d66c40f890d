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
	known := catalogueMetrics(cat)
	out := map[string]string{}
	add := func(from, to string) {
		if _, ok := known[from]; !ok && from != to {
			out[from] = to
		}
	}
	for name, typ := range known {
		ot, ok := otlpMetricType(name, typ)
		if !ok {
			continue
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

// catalogueMetrics is every metric name the catalogue knows, its source
// metrics' and its DCGM fields' under each spelling, with its type.
func catalogueMetrics(cat *dcgmbridge.Catalogue) map[string]string {
	known := map[string]string{}
	for _, m := range cat.Metrics {
		known[m.Name] = m.Type
	}
	for _, f := range cat.Fields {
		for _, n := range f.Names() {
			known[n] = f.Type
		}
	}
	return known
}

// otlpMetricType is the OTLP type a Collector's prometheus receiver gives a
// catalogue metric of type typ; false for what it cannot hand over: DCGM's
// label-only fields, and patterns such as bpftrace_<script>_<var>.
func otlpMetricType(name, typ string) (otlptranslator.MetricType, bool) {
	if !model.LegacyValidation.IsValidMetricName(name) {
		return 0, false
	}
	switch typ {
	case "counter":
		return otlptranslator.MetricTypeMonotonicCounter, true
	case "gauge":
		return otlptranslator.MetricTypeGauge, true
	case "histogram":
		return otlptranslator.MetricTypeHistogram, true
	}
	return 0, false
}
