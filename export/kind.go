package export

import (
	"strings"

	"github.com/prometheus/common/model"

	"github.com/strata-dev/strata/tiers"
)

// Kind is how an export summarises a metric.
type Kind uint8

// The kinds, each with its columns (docs/format/export.md).
const (
	KindGauge     Kind = iota // avg, min, max, p50, p95, p99, last
	KindCounter               // increase, rate
	KindHistogram             // p50, p95, p99, count (a classic histogram's _bucket series)
)

func (k Kind) String() string {
	switch k {
	case KindCounter:
		return "counter"
	case KindHistogram:
		return "histogram"
	}
	return "gauge"
}

// Typing decides a metric's kind. Both functions are optional.
type Typing struct {
	// Catalogue returns the type Strata's metric catalogue gives a name
	// ("gauge", "counter", "histogram"), or "" when it does not know it.
	// cmd/strata builds it from the same catalogue whose gauges the rollups
	// type (dcgmbridge.Catalogue.IsGauge), so an export never calls
	// "gauge" what the rollup windows treated as a counter, or the reverse.
	Catalogue func(name string) string
	// Metadata returns the TYPE remote write reported for a metric family
	// (strata serve's metadata store), or "" when none did.
	Metadata func(family string) model.MetricType
}

// kindOf applies the rule, in this order (docs/format/export.md):
//
//  1. the catalogue's type for the name (for a _bucket series, its family's);
//  2. the remote-write metadata's TYPE for the name, or for its family
//     (the name less _total, _bucket, _count or _sum);
//  3. the name's suffix: _bucket is a classic histogram, _total, _count
//     and _sum are counters (Prometheus' naming conventions, which PromQL's
//     own rate() annotation relies on);
//  4. anything else is a gauge.
//
// A histogram type for a name that is not a _bucket series (its _sum or
// _count) makes it a counter.
func (t Typing) kindOf(name string) Kind {
	if t.Catalogue != nil {
		if k, ok := kindFromType(t.Catalogue(name), name); ok {
			return k
		}
	}
	if t.Metadata != nil {
		for _, fam := range families(name) {
			if k, ok := kindFromType(string(t.Metadata(fam)), name); ok {
				return k
			}
		}
	}
	switch {
	case strings.HasSuffix(name, "_bucket"):
		return KindHistogram
	case strings.HasSuffix(name, "_total"), strings.HasSuffix(name, "_count"), strings.HasSuffix(name, "_sum"):
		return KindCounter
	}
	return KindGauge
}

// fields are the window fields a kind's statistics read (run.go): a
// gauge's sum, count, min, max and last; a counter's or bucket's first,
// last and increase (the reset-aware step from window to window).
func (k Kind) fields() tiers.WindowFields {
	if k == KindGauge {
		return tiers.FieldSum | tiers.FieldCount | tiers.FieldMin | tiers.FieldMax | tiers.FieldLast
	}
	return tiers.FieldFirst | tiers.FieldLast | tiers.FieldIncrease
}

func kindFromType(typ, name string) (Kind, bool) {
	switch model.MetricType(typ) {
	case model.MetricTypeGauge:
		return KindGauge, true
	case model.MetricTypeCounter:
		return KindCounter, true
	case model.MetricTypeHistogram:
		if strings.HasSuffix(name, "_bucket") {
			return KindHistogram, true
		}
		return KindCounter, true
	}
	return 0, false
}

func families(name string) []string {
	out := []string{name}
	for _, suf := range []string{"_total", "_bucket", "_count", "_sum"} {
		if f, ok := strings.CutSuffix(name, suf); ok && f != "" {
			out = append(out, f)
		}
	}
	return out
}
