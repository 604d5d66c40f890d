package main

import (
	"strings"
	"testing"

	"github.com/prometheus/otlptranslator"
	promconfig "github.com/prometheus/prometheus/config"

	"github.com/strata-dev/strata/dcgmbridge"
)

// TestOTLPKeepsCatalogueNames: an OpenTelemetry Collector that scrapes
// vLLM, dcgm-exporter or the other sources with its prometheus receiver and
// exports OTLP to Strata hands over each family under its exposed name
// (or, with its name normalisation, without _total), its type, and no
// unit. Under every translation strategy, Prometheus' translator followed
// by otlpNames must give back exactly the names the catalogue, the
// canonical rules and the diagnosis engine read. The default strategy
// alone changes dozens of them (a counter without _total gains one; the
// test logs how many).
func TestOTLPKeepsCatalogueNames(t *testing.T) {
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	metrics := catalogueMetrics(cat)
	if len(metrics) < 100 {
		t.Fatalf("%d names: the catalogue's tables were not read", len(metrics))
	}
	for _, strategy := range []otlptranslator.TranslationStrategyOption{
		otlptranslator.UnderscoreEscapingWithSuffixes, otlptranslator.UnderscoreEscapingWithoutSuffixes,
		otlptranslator.NoUTF8EscapingWithSuffixes, otlptranslator.NoTranslation,
	} {
		oc := promconfig.DefaultOTLPConfig
		oc.TranslationStrategy = strategy
		names := otlpNames(cat, oc)
		namer := otlptranslator.MetricNamer{WithMetricSuffixes: strategy.ShouldAddSuffixes(), UTF8Allowed: !strategy.ShouldEscape()}
		changed := 0
		for name, typ := range metrics {
			ot, ok := otlpMetricType(name, typ)
			if !ok {
				continue
			}
			sent := []string{name}
			if strategy.ShouldAddSuffixes() {
				// Only suffixes can give a trimmed _total back.
				sent = append(sent, strings.TrimSuffix(name, "_total"))
			}
			for _, s := range sent {
				got, err := namer.Build(otlptranslator.Metric{Name: s, Type: ot})
				if err != nil {
					t.Errorf("%s: %s: %v", strategy, s, err)
					continue
				}
				if got != name && s == name {
					changed++
				}
				want := name
				if typ == "histogram" {
					got, want = got+"_bucket", want+"_bucket"
				}
				if n, ok := names[got]; ok {
					got = n
				}
				if got != want {
					t.Errorf("%s: %s %s sent as %s is stored as %s", strategy, typ, name, s, got)
				}
			}
		}
		if strategy == otlptranslator.UnderscoreEscapingWithSuffixes && changed == 0 {
			t.Errorf("the default strategy changed no name: the test no longer shows what otlpNames is for")
		}
		t.Logf("%s: the translator alone changes %d names, %d mapped back", strategy, changed, len(names))
	}
}
