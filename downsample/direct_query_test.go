package downsample

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// TestDirectSeriesQueried: series written as direct series (the diagnosis
// engine's baselines) answer PromQL through the stitched view exactly as
// the same samples written to raw through the tee (the write-back before
// direct series) do, a copy in raw (written before the upgrade) ignored:
// at the raw tier's range, across the minute tier's
// partitions and the raw boundary, instant and range, by name and by a
// selector without one, and in the label APIs.
func TestDirectSeriesQueried(t *testing.T) {
	raw := openTestRaw(t)
	mcfg := tiers.DefaultMinuteConfig(t.TempDir())
	mcfg.Retention = 0
	minute, err := tiers.OpenRollup(mcfg, promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { minute.Close() })
	start := testStart
	clock := &testClock{t: time.UnixMilli(start)}
	const (
		direct = "strata:baseline:median"
		ref    = "ref:baseline:median" // the same samples, through raw
	)
	ctx := context.Background()
	end := start + 3*HourRes + 20*MinuteRes
	gone := start + 2*HourRes + 50*MinuteRes // gpu 0 stops: a stale marker
	// Until the upgrade (a restart), the direct name is written to raw, as
	// before direct series.
	upgrade := start + 2*HourRes + 30*MinuteRes
	valueAt := func(i int, at int64) (float64, bool) {
		if i == 0 && at > gone {
			return math.Float64frombits(value.StaleNaN), at == gone+MinuteRes
		}
		return directValue(i, at), true
	}
	feed := func(p *Pipeline, from, to int64) {
		tee, dir := p.Tee(raw), p.Direct()
		for at := from + 15_000; at <= to; at += 15_000 {
			rapp, dapp := tee.AppenderV2(ctx), dir.AppenderV2(ctx)
			add := func(app storage.AppenderV2, ls labels.Labels, v float64) {
				if _, err := app.Append(0, ls, 0, at, v, nil, nil, storage.AppendV2Options{}); err != nil {
					t.Fatal(err)
				}
			}
			add(rapp, labelsFor("up", "job", "x"), 1)
			for i := range 3 {
				if v, ok := valueAt(i, at); ok && at%MinuteRes == 0 {
					if at <= upgrade {
						add(rapp, labelsFor(direct, "metric", "gpu_util", "gpu", fmt.Sprint(i)), v)
					} else {
						add(dapp, labelsFor(direct, "metric", "gpu_util", "gpu", fmt.Sprint(i)), v)
					}
					add(rapp, labelsFor(ref, "metric", "gpu_util", "gpu", fmt.Sprint(i)), v)
				}
			}
			if err := rapp.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := dapp.Commit(); err != nil {
				t.Fatal(err)
			}
			clock.t = time.UnixMilli(at)
			if err := p.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	p0, err := New(testConfig(), raw, minute, newMemTier(HourRes, DayLen), promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	feed(p0, start, upgrade)
	if err := p0.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := New(testConfig(), raw, minute, newMemTier(HourRes, DayLen), promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	// The engine's start-up read-back writes again the minutes of the hours
	// not in a partition.
	_, hi, _ := minute.Bounds()
	app := p.Direct().AppenderV2(ctx)
	for at := hi; at <= upgrade; at += MinuteRes {
		for i := range 3 {
			if v, ok := valueAt(i, at); ok {
				if _, err := app.Append(0, labelsFor(direct, "metric", "gpu_util", "gpu", fmt.Sprint(i)), 0, at, v, nil, nil, storage.AppendV2Options{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	feed(p, upgrade, end)
	if _, hi, ok := minute.Bounds(); !ok || hi < start+2*HourRes {
		t.Fatalf("the minute tier should hold two hours: %d %v", hi, ok)
	}
	// A series of the direct name that raw alone holds (written past the
	// tee, as no build does): the stitched view leaves raw's copies of a
	// minute-only name out, so it must not show.
	rapp := raw.AppenderV2(ctx)
	for at := end - 25*MinuteRes; at <= end; at += 15_000 { // within the raw tier's in-order window
		if _, err := rapp.Append(0, labelsFor(direct, "metric", "gpu_util", "gpu", "7"), 0, at, -1, nil, nil, storage.AppendV2Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rapp.Commit(); err != nil {
		t.Fatal(err)
	}
	st := tiers.NewStitched(raw, minute, nil, tiers.WithMinuteOnlyNames([]string{direct}, p.DirectWindows()))
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		Parser: parser.NewParser(parser.Options{})})

	// run evaluates expr (with NAME for the metric name) for both names and
	// compares the results, metric names dropped.
	run := func(expr string, from, to int64, step time.Duration) {
		t.Helper()
		var got [2]string
		for i, name := range []string{direct, ref} {
			var q promql.Query
			var err error
			e := strings.ReplaceAll(expr, "NAME", name)
			if step == 0 {
				q, err = engine.NewInstantQuery(ctx, st, nil, e, time.UnixMilli(to))
			} else {
				q, err = engine.NewRangeQuery(ctx, st, nil, e, time.UnixMilli(from), time.UnixMilli(to), step)
			}
			if err != nil {
				t.Fatal(err)
			}
			res := q.Exec(ctx)
			if res.Err != nil {
				t.Fatalf("%s: %v", e, res.Err)
			}
			got[i] = resultString(res.Value)
			q.Close()
		}
		if got[0] != got[1] {
			t.Errorf("%s over [%s, %s] step %s:\ndirect: %s\nraw:    %s", expr, fmtTime(from), fmtTime(to), step, got[0], got[1])
		}
		if got[0] == "" || got[0] == "[]" {
			t.Errorf("%s over [%s, %s] step %s: empty", expr, fmtTime(from), fmtTime(to), step)
		}
	}
	exprs := []string{`NAME`, `max(NAME{metric="gpu_util"})`, `clamp_min(min(NAME{metric="gpu_util"}), 0)`, `NAME{gpu="1"}`,
		`max_over_time(NAME[5m])`, `last_over_time(NAME[10m])`}
	// Evaluation times on whole minutes: between a series' last sample and
	// its stale marker a minute later, the minute tier ends it 1 ms after
	// the sample (docs/format/minute.md, "Querying"), raw at the marker.
	now := end
	for _, e := range exprs {
		run(e, 0, now, 0)                                    // instant, the newest minute (not final yet)
		run(e, 0, gone, 0)                                   // instant, gpu 0's last sample
		run(e, 0, gone+MinuteRes, 0)                         // instant, gpu 0's stale marker
		run(e, now-HourRes, now, time.Minute)                // the last hour: raw's range
		run(e, start, now, 5*time.Minute)                    // the minute tier's partitions, then raw
		run(e, start+HourRes+30*MinuteRes, now, time.Minute) // across the newest partition's end
	}

	// A selector without a name finds them, once.
	q, err := st.Querier(now-HourRes, now)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	set := q.Select(ctx, true, &storage.SelectHints{Start: now - HourRes, End: now}, labels.MustNewMatcher(labels.MatchEqual, "gpu", "1"))
	var names []string
	for set.Next() {
		names = append(names, set.At().Labels().Get(model.MetricNameLabel))
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{ref, direct}; !slices.Equal(names, want) {
		t.Errorf("{gpu=\"1\"}: %v, want %v", names, want)
	}
	// Nor raw's series of the direct name.
	if set := q.Select(ctx, true, &storage.SelectHints{Start: now - HourRes, End: now}, labels.MustNewMatcher(labels.MatchEqual, "gpu", "7")); set.Next() {
		t.Errorf("{gpu=\"7\"}: raw's %s", set.At().Labels())
	}
	vals, _, err := q.LabelValues(ctx, model.MetricNameLabel, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(vals, direct) {
		t.Errorf("label values of __name__ over the last hour: %v, no %s", vals, direct)
	}
	vals, _, err = q.LabelValues(ctx, "gpu", nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, direct))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vals, []string{"0", "1", "2"}) {
		t.Errorf("label values of gpu for %s: %v", direct, vals)
	}
}

// resultString prints a PromQL result with metric names dropped, series
// sorted by labels.
func resultString(v parser.Value) string {
	var lines []string
	switch r := v.(type) {
	case promql.Vector:
		for _, s := range r {
			lines = append(lines, fmt.Sprintf("%s %d %v", withoutName(s.Metric), s.T, s.F))
		}
	case promql.Matrix:
		for _, s := range r {
			var b strings.Builder
			fmt.Fprintf(&b, "%s", withoutName(s.Metric))
			for _, f := range s.Floats {
				fmt.Fprintf(&b, " %d:%v", f.T, f.F)
			}
			lines = append(lines, b.String())
		}
	default:
		return v.String()
	}
	slices.Sort(lines)
	return "[" + strings.Join(lines, "\n") + "]"
}

func withoutName(l labels.Labels) labels.Labels {
	return labels.NewBuilder(l).Del(model.MetricNameLabel).Labels()
}
