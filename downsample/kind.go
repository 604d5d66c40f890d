package downsample

import (
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
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

// KindFunc returns the kind of the series with labels lbls (Config.KindOf).
//
// The answer must depend on nothing but lbls and what is compiled into the
// binary, never on remote-write metadata or on when a sample arrived: windows
// recomputed from raw after a crash must equal the windows the tee wrote. A
// typing change in a later release changes only the partitions written after
// it. A nil KindFunc makes every series a counter.
type KindFunc func(lbls labels.Labels) Kind

// Of returns f(lbls), or KindCounter when f is nil.
func (f KindFunc) Of(lbls labels.Labels) Kind {
	if f == nil {
		return KindCounter
	}
	return f(lbls)
}

// GaugesByName returns the KindFunc that makes a series a gauge when isGauge
// says so of its metric name, and a counter otherwise. cmd/strata passes the
// metric catalogue's dcgmbridge.Catalogue.IsGauge.
func GaugesByName(isGauge func(name string) bool) KindFunc {
	return func(lbls labels.Labels) Kind {
		if isGauge(lbls.Get(model.MetricNameLabel)) {
			return KindGauge
		}
		return KindCounter
	}
}
