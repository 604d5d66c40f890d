package diagnose

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	defaultrules "github.com/strata-dev/strata/diagnose/rules"
)

// TestAnomalyMeanRecordedBeyondBand checks the shipped pack's anomaly rules
// against the same rules recording the three-minute mean of every tracked
// series: the pack records strata:anomaly:zscore:avg3m only where it lies
// beyond k - 1 sigma, and strata:anomaly:high and strata:anomaly:low must
// be the same at every minute, series for series and value for value, for
// any k. The z-scores wander, jump beyond k in either direction for a few
// minutes, hover about k - 1 and k, and disappear for minutes at a time
// (a series without a baseline writes none).
func TestAnomalyMeanRecordedBeyondBand(t *testing.T) {
	b, err := fs.ReadFile(defaultrules.FS, "derived.yml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseRuleFile("derived.yml", b)
	if err != nil {
		t.Fatal(err)
	}
	var shipped []rules.Rule
	var full []rules.Rule
	for _, g := range f.groups {
		for _, r := range g.Rules {
			if r.Record == "" || r.Record == "strata:gpu_sm_clock:ratio" {
				continue
			}
			expr, err := newParser().ParseExpr(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			shipped = append(shipped, rules.NewRecordingRule(r.Record, expr, labels.EmptyLabels()))
			if r.Record == "strata:anomaly:zscore:avg3m" {
				expr, err = newParser().ParseExpr("avg_over_time(strata:anomaly:zscore[3m])")
				if err != nil {
					t.Fatal(err)
				}
			}
			full = append(full, rules.NewRecordingRule(r.Record, expr, labels.EmptyLabels()))
		}
	}
	if len(shipped) != 3 {
		t.Fatalf("derived.yml: %d anomaly rules, want avg3m, high and low", len(shipped))
	}
	for _, k := range []float64{3, 2, 1, 0.5} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("k=%v/seed=%d", k, seed), func(t *testing.T) {
				compareAnomalyRules(t, shipped, full, k, seed)
			})
		}
	}
}

func compareAnomalyRules(t *testing.T, shipped, full []rules.Rule, k float64, seed uint64) {
	const series, minutes = 40, 150
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e7, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	ctx := context.Background()
	type side struct {
		st *scratch
		g  *rules.Group
	}
	mk := func(rs []rules.Rule) side {
		st := newScratch()
		opts := &rules.ManagerOptions{QueryFunc: rules.EngineQueryFunc(eng, st), AppendableV2: st, Context: ctx}
		return side{st, rules.NewGroup(rules.GroupOptions{Name: "derived", File: "derived.yml", Interval: time.Minute, Opts: opts, Rules: rs})}
	}
	a, f := mk(shipped), mk(full)
	zs := make([]float64, series)
	burst := make([]int, series) // minutes left in a burst
	level := make([]float64, series)
	gone := make([]int, series) // minutes left without a z-score
	var fired, sparse, every int
	for m := range minutes {
		ts := tStart + int64(m)*minute.Milliseconds()
		for _, sd := range []side{a, f} {
			app := sd.st.AppenderV2(ctx)
			if _, err := app.Append(0, labels.FromStrings(model.MetricNameLabel, BaselineKSeries), 0, ts, k, nil, nil, storage.AppendV2Options{}); err != nil {
				t.Fatal(err)
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		for i := range series {
			switch {
			case gone[i] > 0:
				gone[i]--
				continue
			case rng.IntN(60) == 0:
				gone[i] = 1 + rng.IntN(8)
				continue
			}
			switch {
			case burst[i] > 0:
				burst[i]--
				zs[i] = level[i] + rng.NormFloat64()*0.7
			case rng.IntN(25) == 0:
				burst[i] = 2 + rng.IntN(12)
				level[i] = (k + rng.Float64()*3) * float64(1-2*rng.IntN(2))
				zs[i] = level[i]
			case i%5 == 0:
				// Hovering about the thresholds.
				zs[i] = (k - 1 + rng.Float64()*1.2) * float64(1-2*rng.IntN(2))
			default:
				zs[i] = 0.8*zs[i] + rng.NormFloat64()*0.6
			}
			l := labels.FromStrings(model.MetricNameLabel, AnomalyZScoreSeries, "metric", "strata:requests_waiting", "namespace", "ns", "pod", fmt.Sprint("p", i))
			for _, sd := range []side{a, f} {
				app := sd.st.AppenderV2(ctx)
				if _, err := app.Append(0, l, 0, ts, zs[i], nil, nil, storage.AppendV2Options{}); err != nil {
					t.Fatal(err)
				}
				if err := app.Commit(); err != nil {
					t.Fatal(err)
				}
			}
		}
		at := time.UnixMilli(ts)
		a.g.Eval(ctx, at)
		f.g.Eval(ctx, at)
		for _, r := range append(a.g.Rules(), f.g.Rules()...) {
			if err := r.LastError(); err != nil {
				t.Fatalf("minute %d: %s: %v", m, r.Name(), err)
			}
		}
		for _, name := range []string{"strata:anomaly:high", "strata:anomaly:low"} {
			got, want := instant(t, eng, a.st, name, at), instant(t, eng, f.st, name, at)
			if !slices.EqualFunc(got, want, func(x, y promql.Sample) bool {
				return labels.Equal(x.Metric, y.Metric) && math.Float64bits(x.F) == math.Float64bits(y.F)
			}) {
				t.Fatalf("minute %d, %s:\n got %v\nwant %v", m, name, got, want)
			}
			fired += len(got)
		}
		sparse += len(instant(t, eng, a.st, "strata:anomaly:zscore:avg3m", at))
		every += len(instant(t, eng, f.st, "strata:anomaly:zscore:avg3m", at))
	}
	// The comparison means something only if anomalies were found, and
	// the pack's rule records fewer means than the full one.
	if fired == 0 {
		t.Fatal("no anomaly in the whole run")
	}
	if k >= 2 && sparse >= every {
		t.Fatalf("the pack recorded %d means over the run, the full rule %d", sparse, every)
	}
	t.Logf("anomalies %d, means recorded %d of %d", fired, sparse, every)
}

func instant(t *testing.T, eng *promql.Engine, q storage.Queryable, expr string, at time.Time) promql.Vector {
	t.Helper()
	qry, err := eng.NewInstantQuery(context.Background(), q, nil, expr, at)
	if err != nil {
		t.Fatal(err)
	}
	defer qry.Close()
	res := qry.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(v, func(x, y promql.Sample) int { return labels.Compare(x.Metric, y.Metric) })
	return v
}
