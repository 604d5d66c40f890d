package downsample

import (
	"sync"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/dcgmbridge"
)

// Kind says how a series' windows treat a drop from one sample to the next.
type Kind uint8

const (
	// KindCounter treats a drop as a counter reset: Resets counts it and
	// Increase adds the value before it (PromQL's increase). It is the zero
	// value and the kind of every series whose type is not known: for a
	// counter it is the only correct choice, and for a gauge it only costs
	// space.
	KindCounter Kind = iota
	// KindGauge records no resets: Resets is 0 and Increase is Last - First,
	// which rollup schema v2 stores as a null (docs/format/hour-parquet.md,
	// "Derived aggregates") and resets as a run of zeros. rate,
	// increase and resets are meaningless for a gauge; over rollups they
	// still see every drop between windows but none inside one.
	KindGauge
)

func (k Kind) String() string {
	switch k {
	case KindCounter:
		return "counter"
	case KindGauge:
		return "gauge"
	}
	return "unknown"
}

// KindOf returns the kind of the series lbls from its metric name alone:
// KindGauge when Strata's static metric catalogue (package dcgmbridge) knows
// the name and every source exposing it types it gauge; KindCounter for
// everything else (counters, histogram families and their _bucket, _sum and
// _count series, DCGM "label" fields, unknown names).
//
// The answer depends on nothing but the name and the catalogue compiled into
// the binary, never on remote-write metadata: windows recomputed from raw
// after a crash must equal the windows the tee wrote. A catalogue change in a
// later release changes only the partitions written after it.
func KindOf(lbls labels.Labels) Kind {
	if _, ok := gaugeNames()[lbls.Get(model.MetricNameLabel)]; ok {
		return KindGauge
	}
	return KindCounter
}

// gaugeNames is the set of metric names KindOf calls gauges, built once from
// the immutable catalogue: a map lookup per series instead of
// Catalogue.Lookup's scan of every entry.
//
// Only names the catalogue lists (DCGM fields under every spelling, source
// metrics) can be gauges: for any other name FieldByName finds nothing and
// Lookup finds only a histogram family (a _bucket, _sum or _count series), so
// testing the listed names is testing them all.
var gaugeNames = sync.OnceValue(func() map[string]struct{} {
	c, err := dcgmbridge.NewCatalogue()
	if err != nil {
		// The catalogue is compiled in and checked by dcgmbridge's tests;
		// should it ever fail to build, every series is a counter: the
		// safe default, and still deterministic.
		return nil
	}
	return gaugeNamesOf(c)
})

func gaugeNamesOf(c *dcgmbridge.Catalogue) map[string]struct{} {
	var names []string
	for _, f := range c.Fields {
		names = append(names, f.Names()...)
	}
	for _, m := range c.Metrics {
		names = append(names, m.Name)
	}
	out := map[string]struct{}{}
	for _, n := range names {
		if catalogueGauge(c, n) {
			out[n] = struct{}{}
		}
	}
	return out
}

// catalogueGauge reports whether c knows name and types it gauge wherever it
// knows it: as a DCGM field (whether or not a canonical series uses it) and
// in every source's metric list.
func catalogueGauge(c *dcgmbridge.Catalogue, name string) bool {
	known := false
	if f, ok := c.FieldByName(name); ok {
		if f.Type != "gauge" {
			return false
		}
		known = true
	}
	for _, m := range c.Lookup(name) {
		if m.Type != "gauge" {
			return false
		}
		known = true
	}
	return known
}
