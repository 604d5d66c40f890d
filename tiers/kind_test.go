package tiers_test

import (
	"sync"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/downsample"
)

var catalogue = sync.OnceValues(dcgmbridge.NewCatalogue)

// catalogueKind types a series for its rollup windows as strata serve does
// (downsample.Config.KindOf): a gauge when the metric catalogue types its name
// gauge, a counter otherwise.
func catalogueKind(t testing.TB, lbls labels.Labels) downsample.Kind {
	t.Helper()
	cat, err := catalogue()
	if err != nil {
		t.Fatal(err)
	}
	return downsample.GaugesByName(cat.IsGauge).Of(lbls)
}
