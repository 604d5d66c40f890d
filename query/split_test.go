package query

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/stats"
)

// splitTestSteps is the length, in 15 s steps, of the split tests' range.
const splitTestSteps = 3000

// newSplitTest fills a raw tier with x{i="0"} over splitTestSteps samples
// and, in the second half only, two series that differ by label i alone
// (dup{i="1"}, dup{i="2"}); it returns the plain engine and a splitting one
// (two parts of at least 1,000 steps) over it.
func newSplitTest(t *testing.T, cfg Config) (storage.Queryable, promql.QueryEngine, *splitEngine) {
	t.Helper()
	raw := openTestRaw(t)
	app := raw.Appender(context.Background())
	for i := range splitTestSteps {
		ts := t0 + int64(i)*testStep
		if _, err := app.Append(0, labels.FromStrings("__name__", "x", "i", "0"), ts, float64(i)); err != nil {
			t.Fatal(err)
		}
		if i >= splitTestSteps/2 {
			for _, v := range []string{"1", "2"} {
				if _, err := app.Append(0, labels.FromStrings("__name__", "dup", "i", v), ts, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	api, err := New(cfg, raw, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	return raw, api.engine, &splitEngine{QueryEngine: api.engine, parser: parser.NewParser(cfg.parserOptions()), parts: 2, minSteps: minStepsPerPart, maxSamples: cfg.MaxSamples}
}

func runRange(t *testing.T, e promql.QueryEngine, q storage.Queryable, opts promql.QueryOpts, qs string, steps int) (*promql.Result, promql.Query) {
	t.Helper()
	qry, err := e.NewRangeQuery(context.Background(), q, opts, qs, time.UnixMilli(t0), time.UnixMilli(t0+int64(steps-1)*testStep), testStep*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qry.Close)
	return qry.Exec(context.Background()), qry
}

func TestSplitEngineSplitsOnlyWhatItMay(t *testing.T) {
	q, _, split := newSplitTest(t, DefaultConfig())
	for _, tc := range []struct {
		qs    string
		steps int
		parts int // 0: not split
	}{
		{"x", splitTestSteps, 2},
		{"rate(x[5m])", splitTestSteps, 2},
		{"x", 1999, 0}, // a part would get fewer than 1,000 steps
		{"x @ start()", splitTestSteps, 0},
		{"max_over_time(x[10m:1m] @ end())", splitTestSteps, 0},
		{"x offset range()", splitTestSteps, 0},
		{"x @ 1700000000", splitTestSteps, 2}, // a fixed time means the same in every part
	} {
		_, qry := runRange(t, split, q, nil, tc.qs, tc.steps)
		sq, ok := qry.(*splitQuery)
		switch {
		case tc.parts == 0 && ok:
			t.Errorf("%s over %d steps was split into %d parts", tc.qs, tc.steps, len(sq.parts))
		case tc.parts > 0 && (!ok || len(sq.parts) != tc.parts):
			t.Errorf("%s over %d steps: split %v, want %d parts", tc.qs, tc.steps, ok, tc.parts)
		}
	}
}

// TestSplitEngineMatchesEngine: results, the error of a part and the
// per-step statistics are those of the unsplit query.
func TestSplitEngineMatchesEngine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EnablePerStepStats = true
	q, engine, split := newSplitTest(t, cfg)
	opts := promql.NewPrometheusQueryOpts(true, 0, nil)
	for _, qs := range []string{"x", "rate(x[5m])", "sum(dup)", "dup", "timestamp(x)", "x @ 1700010000", "max_over_time(x[30m:1m])"} {
		want, _ := runRange(t, engine, q, opts, qs, splitTestSteps)
		got, gotQry := runRange(t, split, q, opts, qs, splitTestSteps)
		if want.Err != nil || got.Err != nil {
			t.Fatalf("%s: errors %v / %v", qs, want.Err, got.Err)
		}
		if want.String() != got.String() {
			t.Errorf("%s: split result differs:\n%.300s\nwant\n%.300s", qs, got.String(), want.String())
		}
		ws, gs := engineStats(t, engine, q, opts, qs), gotQry.Stats().Samples
		if gs.TotalSamples != ws.TotalSamples || len(gs.TotalSamplesPerStep) != len(ws.TotalSamplesPerStep) {
			t.Errorf("%s: split stats %d samples over %d steps, want %d over %d", qs, gs.TotalSamples, len(gs.TotalSamplesPerStep), ws.TotalSamples, len(ws.TotalSamplesPerStep))
			continue
		}
		for i := range ws.TotalSamplesPerStep {
			if gs.TotalSamplesPerStep[i] != ws.TotalSamplesPerStep[i] {
				t.Errorf("%s: step %d: %d samples, want %d", qs, i, gs.TotalSamplesPerStep[i], ws.TotalSamplesPerStep[i])
				break
			}
		}
	}
	// dup{i="1"} and dup{i="2"} collide once i is dropped: only in the
	// second part, whose error must be the query's.
	const bad = `label_replace(dup, "i", "", "i", ".*")`
	want, _ := runRange(t, engine, q, nil, bad, splitTestSteps)
	got, _ := runRange(t, split, q, nil, bad, splitTestSteps)
	if want.Err == nil || got.Err == nil || want.Err.Error() != got.Err.Error() {
		t.Errorf("%s: split error %v, want %v", bad, got.Err, want.Err)
	}
}

func engineStats(t *testing.T, e promql.QueryEngine, q storage.Queryable, opts promql.QueryOpts, qs string) *stats.QuerySamples {
	t.Helper()
	_, qry := runRange(t, e, q, opts, qs, splitTestSteps)
	return qry.Stats().Samples
}

// TestSplitEngineSampleLimit: parts that each fit the sample limit but
// together do not fail as the whole query does.
func TestSplitEngineSampleLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSamples = splitTestSteps - 100
	q, engine, split := newSplitTest(t, cfg)
	want, _ := runRange(t, engine, q, nil, "x", splitTestSteps)
	got, _ := runRange(t, split, q, nil, "x", splitTestSteps)
	var tooMany promql.ErrTooManySamples
	if !errors.As(want.Err, &tooMany) || !errors.As(got.Err, &tooMany) {
		t.Fatalf("errors %v (split) and %v (whole), want both too many samples", got.Err, want.Err)
	}
}

// TestSplitEnginePartSizes: parts differ by at most one step and none is
// shorter than the minimum, so none is a one-step (instant) evaluation.
func TestSplitEnginePartSizes(t *testing.T) {
	q, _, split := newSplitTest(t, DefaultConfig())
	split.parts, split.minSteps = 3, 2
	_, qry := runRange(t, split, q, nil, "x", 7)
	sq, ok := qry.(*splitQuery)
	if !ok || len(sq.parts) != 3 {
		t.Fatalf("7 steps not split into 3 parts")
	}
	next := time.UnixMilli(t0)
	for i, p := range sq.parts {
		st := p.Statement().(*parser.EvalStmt)
		steps := int(st.End.Sub(st.Start)/st.Interval) + 1
		if !st.Start.Equal(next) || steps < 2 || steps > 3 {
			t.Errorf("part %d: %s to %s (%d steps), want from %s and 2-3 steps", i, st.Start, st.End, steps, next)
		}
		next = st.End.Add(st.Interval)
	}
	if want := time.UnixMilli(t0 + 7*testStep); !next.Equal(want) {
		t.Errorf("parts end before %s, want %s", next, want)
	}
}
