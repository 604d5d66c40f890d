package diagnose

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/rulegen"
)

// opaqueQueryable hides the scratch store's type, so that narrowed selects
// filter the store's answer (as over the minute data and the store merged)
// instead of asking it for the kept series only.
type opaqueQueryable struct{ storage.Queryable }

func (o opaqueQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := o.Queryable.Querier(mint, maxt)
	return struct{ storage.Querier }{q}, err
}

// TestAndChainMatchesEngine: each and-chain rule of the default pack,
// evaluated by its plan over a store of z-scores of which some pass the
// thresholds (stale markers, gaps and series of one pod on two GPUs among
// them), is the engine's vector of the whole rule, element for element,
// whether the store narrows its selects itself or its answer is filtered.
func TestAndChainMatchesEngine(t *testing.T) {
	minute, _ := openTiers(t, t.TempDir())
	e, err := New(modeConfig(BaselineSeasonal), Options{Minute: minute, Registerer: prometheus.NewRegistry(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.andPlans) == 0 {
		t.Fatal("no and-chain rule in the default pack")
	}
	rng := rand.New(rand.NewPCG(4, 4))
	at := simStart.Add(time.Hour)
	app := e.scratch.AppenderV2(context.Background())
	add := func(l labels.Labels, ts time.Time, v float64) {
		if _, err := app.Append(0, l, 0, ts.UnixMilli(), v, nil, nil, storage.AppendV2Options{}); err != nil {
			t.Fatal(err)
		}
	}
	add(labels.FromStrings(model.MetricNameLabel, BaselineKSeries), at, 3)
	for i := range 400 {
		for g := range 2 {
			base := []string{"metric", fmt.Sprint("strata:m", i%7), "pod", fmt.Sprint("p", i), "UUID", fmt.Sprint("GPU-", i, "-", g)}
			z := labels.FromStrings(append(base, model.MetricNameLabel, AnomalyZScoreSeries)...)
			avg := labels.FromStrings(append(base, model.MetricNameLabel, "strata:anomaly:zscore:avg3m")...)
			level := rng.NormFloat64() * 2.5
			for m := 15; m >= 0; m-- {
				if rng.IntN(20) == 0 {
					continue // a gap
				}
				ts := at.Add(-time.Duration(m) * time.Minute)
				zv, av := level+rng.NormFloat64(), level+rng.NormFloat64()/2
				if m == 0 && rng.IntN(15) == 0 {
					zv = math.Float64frombits(value.StaleNaN)
				}
				add(z, ts, zv)
				add(avg, ts, av)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for qs, p := range e.andPlans {
		e.query = e.scratch
		want, err := rules.EngineQueryFunc(e.promql, rulegen.RenamingQueryable(e.scratch))(ctx, qs, at)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) < 3 {
			t.Fatalf("%s: %d elements: the store passes too few thresholds to compare", qs, len(want))
		}
		for _, q := range []storage.Queryable{e.scratch, opaqueQueryable{e.scratch}} {
			e.query = q
			got, err := e.queryAnd(ctx, p, qs, at)
			if err != nil {
				t.Fatal(err)
			}
			if !sameVector(got, want) {
				t.Errorf("%s over %T:\n%v\nwant\n%v", qs, q, got, want)
			}
		}
	}
}

func sameVector(a, b promql.Vector) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !labels.Equal(a[i].Metric, b[i].Metric) || a[i].T != b[i].T || math.Float64bits(a[i].F) != math.Float64bits(b[i].F) {
			return false
		}
	}
	return true
}
