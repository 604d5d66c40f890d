package tiers_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// TestResolutionQuerierRemoteLookback: a plain selector over the hour tier
// for an engine with a one-hour lookback (a Thanos Querier's at coarse
// resolutions) gets each window's last sample and a repeat only where the
// next window's last sample is more than an hour later, and that engine
// answers at every step what a single Strata (5 m lookback, the view's own
// repeats) answers.
func TestResolutionQuerierRemoteLookback(t *testing.T) {
	hour := openTestRollup(t, tiers.DefaultHourConfig(t.TempDir()), nil)
	sw := tiers.SeriesWindows{Labels: labels.FromStrings("__name__", "gpu_temp", "gpu", "0")}
	const early = 5 // this window's last sample is 10 minutes in: 1h50m before the next one's
	for h := range int64(24) {
		st := testT0 + h*hourMs
		last := st + hourMs - 1000
		if h == early {
			last = st + 10*minMs
		}
		v := float64(40 + h)
		sw.Windows = append(sw.Windows, tiers.Window{Start: st, FirstT: st, LastT: last, Count: 60, Sum: 60 * v, Min: v, Max: v, First: v, Last: v})
	}
	if err := hour.WritePartition(testT0, []tiers.SeriesWindows{sw}); err != nil {
		t.Fatal(err)
	}
	s := tiers.NewStitched(nil, nil, hour)

	q := s.ResolutionQuerier(testT0, testT0+dayMs, hourMs, time.Hour)
	set := q.Select(context.Background(), true, &storage.SelectHints{Start: testT0, End: testT0 + dayMs}, labels.MustNewMatcher(labels.MatchEqual, "__name__", "gpu_temp"))
	var ts []int64
	for set.Next() {
		it := set.At().Iterator(nil)
		for it.Next() != 0 {
			ts = append(ts, it.AtT())
		}
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	_ = q.Close()
	if want := 24 + 1; len(ts) != want {
		t.Errorf("%d samples, want %d (one a window, one repeat after the early window): %v", len(ts), want, ts)
	}

	remote := storage.QueryableFunc(func(mint, maxt int64) (storage.Querier, error) {
		return s.ResolutionQuerier(mint, maxt, hourMs, time.Hour), nil
	})
	engine := func(lookback time.Duration) *promql.Engine {
		return promql.NewEngine(promql.EngineOpts{Logger: quietLogger(), MaxSamples: 1_000_000, Timeout: time.Minute, LookbackDelta: lookback})
	}
	run := func(e *promql.Engine, qa storage.Queryable) promql.Matrix {
		qry, err := e.NewRangeQuery(context.Background(), qa, nil, `gpu_temp`, time.UnixMilli(testT0+hourMs), time.UnixMilli(testT0+dayMs), 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer qry.Close()
		res := qry.Exec(context.Background())
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		m, err := res.Matrix()
		if err != nil {
			t.Fatal(err)
		}
		out := make(promql.Matrix, len(m))
		for i, sr := range m {
			out[i] = promql.Series{Metric: sr.Metric, Floats: append([]promql.FPoint(nil), sr.Floats...)}
		}
		return out
	}
	got, want := run(engine(time.Hour), remote), run(engine(5*time.Minute), s)
	if len(want) != 1 || len(want[0].Floats) != 23*6+1 {
		t.Fatalf("single Strata: %v, want one series with a value at each of %d steps", want, 23*6+1)
	}
	if len(got) != 1 || len(got[0].Floats) != len(want[0].Floats) {
		t.Fatalf("through the remote lookback: %v, want %v", got, want)
	}
	for i, p := range want[0].Floats {
		if g := got[0].Floats[i]; g != p {
			t.Errorf("step %d: %v, want %v", i, g, p)
		}
	}
}
