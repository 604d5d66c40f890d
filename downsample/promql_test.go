package downsample

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/tiers"
)

// TestWindowsAgreeWithPromQL checks the claim the window semantics are built
// on: each minute window's aggregate equals what the PromQL engine returns
// for the matching *_over_time function over the same raw samples (range
// selectors are left-open, so x[1m] evaluated at Start+59.999 s selects
// exactly [Start, Start+1m)). The workload has NaN, stale markers, gaps,
// resets inside windows and on boundaries, and out-of-order samples.
//
// resets() over a gauge is a misuse (PromQL's resets, rate and increase are
// for counters), and a catalogue gauge's windows deliberately record no
// resets (KindGauge): for those series the test checks Resets is 0 instead
// of comparing with PromQL. Every other series, counters and series of
// unknown kind alike, is compared exactly.
func TestWindowsAgreeWithPromQL(t *testing.T) {
	start := testStart
	w := genWorkload(start, start+HourRes, 10_000)
	raw := openTestRaw(t)
	w.deliver(t, raw, start-1, w.deliveries[len(w.deliveries)-1].at)

	series, _, err := computeWindows(context.Background(), raw, MinuteRes, start, start+HourRes, testKindOf)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]map[int64]tiers.Window{}
	for _, s := range series {
		m := map[int64]tiers.Window{}
		for _, win := range s.Windows {
			m[win.Start+MinuteRes-1] = win
		}
		byKey[s.Labels.String()] = m
	}

	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		Parser: parser.NewParser(parser.Options{EnableExperimentalFunctions: true}), // ts_of_*, first_over_time
	})
	checks := []struct {
		fn    string
		field func(tiers.Window) float64
	}{
		{"count_over_time", func(w tiers.Window) float64 { return float64(w.Count) }},
		{"sum_over_time", func(w tiers.Window) float64 { return w.Sum }},
		{"min_over_time", func(w tiers.Window) float64 { return w.Min }},
		{"max_over_time", func(w tiers.Window) float64 { return w.Max }},
		{"first_over_time", func(w tiers.Window) float64 { return w.First }},
		{"last_over_time", func(w tiers.Window) float64 { return w.Last }},
		{"resets", func(w tiers.Window) float64 { return float64(w.Resets) }},
		{"ts_of_first_over_time", func(w tiers.Window) float64 { return float64(w.FirstT) / 1000 }},
		{"ts_of_last_over_time", func(w tiers.Window) float64 { return float64(w.LastT) / 1000 }},
	}
	for _, c := range checks {
		t.Run(c.fn, func(t *testing.T) {
			points, gauges := 0, 0
			for _, l := range w.labels {
				if c.fn == "resets" && testKindOf(l) == KindGauge {
					for _, win := range byKey[l.String()] {
						if win.Resets != 0 {
							t.Errorf("%s gauge window %s: Resets %d, want 0", l, fmtTime(win.Start), win.Resets)
						}
					}
					gauges++
					continue
				}
				// One series per query: *_over_time drops the metric name, and
				// several workload series differ only by it.
				sel := make([]string, 0, l.Len())
				l.Range(func(lb labels.Label) { sel = append(sel, fmt.Sprintf("%s=%q", lb.Name, lb.Value)) })
				qs := fmt.Sprintf("%s({%s}[1m])", c.fn, strings.Join(sel, ","))
				q, err := engine.NewRangeQuery(context.Background(), raw, nil, qs,
					time.UnixMilli(start+MinuteRes-1), time.UnixMilli(start+HourRes-1), time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				res := q.Exec(context.Background())
				if res.Err != nil {
					t.Fatal(res.Err)
				}
				mat, err := res.Matrix()
				if err != nil {
					t.Fatal(err)
				}
				wins := byKey[l.String()]
				n := 0
				for _, s := range mat {
					for _, p := range s.Floats {
						n++
						win, ok := wins[p.T]
						if !ok {
							t.Errorf("%s @%s: PromQL has %v, no window", qs, fmtTime(p.T), p.F)
							continue
						}
						if got := c.field(win); !sameFloat(got, p.F) {
							t.Errorf("%s @%s: window %v, PromQL %v", qs, fmtTime(p.T), got, p.F)
						}
					}
				}
				q.Close()
				if n != len(wins) {
					t.Errorf("%s: PromQL returned %d points, there are %d windows", qs, n, len(wins))
				}
				points += n
			}
			if points == 0 {
				t.Fatal("nothing compared")
			}
			if c.fn == "resets" && gauges == 0 {
				t.Fatal("the workload has no catalogue gauge")
			}
		})
	}
}
