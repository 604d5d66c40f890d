package tiers_test

import (
	"context"
	"math"
	"runtime"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// TestRawExemplarsSizedOnFirst checks that the exemplar storage holds no
// buffer until an exemplar arrives, then Prometheus' 100,000, that the
// first exemplar is kept, and that exemplars in the WAL survive a restart.
func TestRawExemplarsSizedOnFirst(t *testing.T) {
	dir := t.TempDir()
	open := func() (*tiers.Raw, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(dir), quietLogger(), reg)
		if err != nil {
			t.Fatal(err)
		}
		return raw, reg
	}
	maxExemplars := func(reg *prometheus.Registry) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "prometheus_tsdb_exemplar_max_exemplars" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no prometheus_tsdb_exemplar_max_exemplars")
		return 0
	}
	stored := func(raw *tiers.Raw) []exemplar.QueryResult {
		t.Helper()
		q, err := raw.ExemplarQuerier(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		res, err := q.Select(math.MinInt64, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "requests_total")})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	raw, reg := open()
	ls := labels.FromStrings(model.MetricNameLabel, "requests_total", "job", "api")
	app := raw.AppenderV2(context.Background())
	ref, err := app.Append(0, ls, 0, 1000, 1, nil, nil, storage.AppendV2Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := maxExemplars(reg); got != 0 {
		t.Fatalf("exemplar storage of %v before any exemplar, want 0", got)
	}

	app = raw.AppenderV2(context.Background())
	if _, ok := app.(storage.GetRef); !ok {
		t.Fatal("the raw tier's appender does not implement storage.GetRef")
	}
	if _, err := app.Append(ref, ls, 0, 2000, 2, nil, nil, storage.AppendV2Options{}); err != nil {
		t.Fatal(err)
	}
	ex, ok := app.(storage.ExemplarAppenderV2)
	if !ok {
		t.Fatal("the raw tier's appender does not implement storage.ExemplarAppenderV2")
	}
	e := exemplar.Exemplar{Labels: labels.FromStrings("trace_id", "abc"), Value: 2, Ts: 2000, HasTs: true}
	if _, err := ex.AppendExemplars(ref, ls, []exemplar.Exemplar{e}); err != nil {
		t.Fatal(err)
	}
	// Through the options too (scrapes pass exemplars that way).
	e2 := exemplar.Exemplar{Labels: labels.FromStrings("trace_id", "def"), Value: 3, Ts: 3000, HasTs: true}
	if _, err := app.Append(ref, ls, 0, 3000, 3, nil, nil, storage.AppendV2Options{Exemplars: []exemplar.Exemplar{e2}}); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := maxExemplars(reg); got != tiers.MaxExemplars {
		t.Fatalf("exemplar storage of %v after the first exemplar, want %d", got, tiers.MaxExemplars)
	}
	if res := stored(raw); len(res) != 1 || len(res[0].Exemplars) != 2 {
		t.Fatalf("stored %v, want the two exemplars", res)
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}

	raw, reg = open()
	defer raw.Close()
	if got := maxExemplars(reg); got != tiers.MaxExemplars {
		t.Fatalf("exemplar storage of %v after a restart with exemplars in the WAL, want %d", got, tiers.MaxExemplars)
	}
	if res := stored(raw); len(res) != 1 || len(res[0].Exemplars) != 2 {
		t.Fatalf("after the restart: stored %v, want the two exemplars", res)
	}
}

// BenchmarkOpenRawHeap measures the heap an empty raw tier holds once open:
// what a fleet pays before its first series.
func BenchmarkOpenRawHeap(b *testing.B) {
	var held float64
	for b.Loop() {
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m0)
		raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(b.TempDir()), quietLogger(), nil)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		held += float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
		if err := raw.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(held/float64(b.N)/(1<<20), "held-MiB")
}

// TestRawExemplarsSizedConcurrently: appenders that bring the first
// exemplars at once all keep theirs (run under the race detector by make
// test).
func TestRawExemplarsSizedConcurrently(t *testing.T) {
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), quietLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	const writers = 4
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			ls := labels.FromStrings(model.MetricNameLabel, "requests_total", "writer", strconv.Itoa(w))
			e := exemplar.Exemplar{Labels: labels.FromStrings("trace_id", strconv.Itoa(w)), Value: 1, Ts: 1000, HasTs: true}
			app := raw.AppenderV2(context.Background())
			_, err := app.Append(0, ls, 0, 1000, 1, nil, nil, storage.AppendV2Options{Exemplars: []exemplar.Exemplar{e}})
			if err == nil {
				err = app.Commit()
			}
			errs <- err
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	q, err := raw.ExemplarQuerier(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Select(math.MinInt64, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "requests_total")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != writers {
		t.Fatalf("exemplars of %d series stored, want %d", len(res), writers)
	}
}
