package export_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/export"
	"github.com/strata-dev/strata/tiers"
)

func near(got, want float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

// TestExportMatchesPromQL: every column of an export equals what PromQL
// over the same tiers gives for the same step, evaluated at the step's end
// less 1 ms (PromQL ranges are left-open: (end-1ms-step, end-1ms] is the
// step [start, end)), with the queries docs/format/export.md states: hourly
// steps from the minute tier and daily steps from both tiers, groups of
// several series, counter resets inside a step and exactly on a day
// boundary.
func TestExportMatchesPromQL(t *testing.T) {
	const days = 3
	tt := buildTiers(t, knownWorkload(days), days, t0+2*dayMs)
	e := tt.exporter()
	eng := newEngine()
	q := tiers.NewStitched(nil, tt.minute, tt.hour)
	cases := []struct {
		name     string
		from, to int64
		step     string
		stepDur  string
		wantTier func(start int64) string
	}{
		{"daily", t0, t0 + days*dayMs, "1d", "1d", func(s int64) string {
			if s >= t0+2*dayMs {
				return "minute"
			}
			return "hour"
		}},
		{"hourly from the minute tier", t0 + 2*dayMs, t0 + 2*dayMs + 6*hourMs, "1h", "1h", func(int64) string { return "minute" }},
		{"hourly from the hour tier", t0 + dayMs - 3*hourMs, t0 + dayMs + 3*hourMs, "1h", "1h", func(int64) string { return "hour" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gauges := runExport(t, e, export.Request{From: time.UnixMilli(c.from), To: time.UnixMilli(c.to), Step: c.step,
				Queries: []string{"util=DCGM_FI_DEV_GPU_UTIL"}, By: []string{"modelName"}})
			perGPU := runExport(t, e, export.Request{From: time.UnixMilli(c.from), To: time.UnixMilli(c.to), Step: c.step,
				Queries: []string{"util=DCGM_FI_DEV_GPU_UTIL"}, By: []string{"Hostname", "gpu"}})
			vllm := runExport(t, e, export.Request{From: time.UnixMilli(c.from), To: time.UnixMilli(c.to), Step: c.step,
				Queries: []string{"vllm:generation_tokens_total", "ttft=vllm:time_to_first_token_seconds"}, By: []string{"model_name"}})
			checks := []struct {
				tb    *table
				by    string
				col   string
				promq string
			}{
				{gauges, "modelName", "util_avg", `sum by (modelName) (sum_over_time(DCGM_FI_DEV_GPU_UTIL[%[1]s])) / sum by (modelName) (count_over_time(DCGM_FI_DEV_GPU_UTIL[%[1]s]))`},
				{gauges, "modelName", "util_min", `min by (modelName) (min_over_time(DCGM_FI_DEV_GPU_UTIL[%[1]s]))`},
				{gauges, "modelName", "util_max", `max by (modelName) (max_over_time(DCGM_FI_DEV_GPU_UTIL[%[1]s]))`},
				{gauges, "modelName", "util_last", `avg by (modelName) (last_over_time(DCGM_FI_DEV_GPU_UTIL[%[1]s]))`},
				{perGPU, "Hostname,gpu", "util_p50", `max by (Hostname, gpu) (quantile_over_time(0.5, DCGM_FI_DEV_GPU_UTIL[%[1]s]))`},
				{perGPU, "Hostname,gpu", "util_p95", `max by (Hostname, gpu) (quantile_over_time(0.95, DCGM_FI_DEV_GPU_UTIL[%[1]s]))`},
				{perGPU, "Hostname,gpu", "util_p99", `max by (Hostname, gpu) (quantile_over_time(0.99, DCGM_FI_DEV_GPU_UTIL[%[1]s]))`},
				{vllm, "model_name", "vllm_generation_tokens_total_increase", `sum by (model_name) (increase(vllm:generation_tokens_total[%[1]s] anchored))`},
				{vllm, "model_name", "vllm_generation_tokens_total_rate", `sum by (model_name) (rate(vllm:generation_tokens_total[%[1]s] anchored))`},
				{vllm, "model_name", "ttft_p99", `histogram_quantile(0.99, sum by (le, model_name) (increase(vllm:time_to_first_token_seconds_bucket[%[1]s] anchored)))`},
				{vllm, "model_name", "ttft_p50", `histogram_quantile(0.5, sum by (le, model_name) (increase(vllm:time_to_first_token_seconds_bucket[%[1]s] anchored)))`},
				{vllm, "model_name", "ttft_count", `sum by (model_name) (increase(vllm:time_to_first_token_seconds_bucket{le="+Inf"}[%[1]s] anchored))`},
			}
			for _, ck := range checks {
				start, end, tier := ck.tb.col(t, "step_start"), ck.tb.col(t, "step_end"), ck.tb.col(t, "tier")
				vi := ck.tb.col(t, ck.col)
				by := strings.Split(ck.by, ",")
				compared := 0
				for _, row := range ck.tb.rows {
					if want := c.wantTier(row[start].I); row[tier].S != want {
						t.Fatalf("%s at %s served by %s, want %s", ck.col, time.UnixMilli(row[start].I).UTC(), row[tier].S, want)
					}
					if row[end].I-row[start].I != map[string]int64{"1d": dayMs, "1h": hourMs}[c.step] {
						t.Fatalf("step %d..%d", row[start].I, row[end].I)
					}
					want := instant(t, eng, q, fmt.Sprintf(ck.promq, c.stepDur), row[end].I-1)
					lb := labels.NewBuilder(labels.EmptyLabels())
					for i, b := range by {
						lb.Set(b, row[ck.tb.col(t, by[i])].S)
					}
					w, ok := want[lb.Labels().String()]
					if !ok {
						t.Fatalf("%s: PromQL has no %s at %s: %v", ck.col, lb.Labels(), time.UnixMilli(row[end].I-1).UTC(), want)
					}
					got := row[vi]
					if got.Null || !near(got.F, w) {
						t.Errorf("%s %s at %s: export %v, PromQL %v", ck.col, lb.Labels(), time.UnixMilli(row[start].I).UTC(), got, w)
					}
					compared++
				}
				if compared == 0 {
					t.Fatalf("%s: no rows", ck.col)
				}
			}
		})
	}
}

// TestExportCoverage: a group that lost data for part of a step says so
// in its coverage, and a step no tier holds is a row with coverage 0.
func TestExportCoverage(t *testing.T) {
	ss := knownWorkload(2)
	// GPU 1 of gpu-node-0 is silent from 06:00 to 12:00 on the first day.
	for i, s := range ss {
		if s.lbls.Get("Hostname") == "gpu-node-0" && s.lbls.Get("gpu") == "1" {
			var kept []sample
			for _, smp := range s.samples {
				if smp.t < t0+6*hourMs || smp.t >= t0+12*hourMs {
					kept = append(kept, smp)
				}
			}
			ss[i].samples = kept
		}
	}
	tt := buildTiers(t, ss, 2, t0+2*dayMs)
	tb := runExport(t, tt.exporter(), export.Request{From: time.UnixMilli(t0), To: time.UnixMilli(t0 + 3*dayMs), Step: "1d",
		Queries: []string{"DCGM_FI_DEV_GPU_UTIL"}, By: []string{"Hostname"}})
	host, start, cov, n := tb.col(t, "Hostname"), tb.col(t, "step_start"), tb.col(t, "DCGM_FI_DEV_GPU_UTIL_coverage"), tb.col(t, "DCGM_FI_DEV_GPU_UTIL_series")
	want := map[string]float64{
		"gpu-node-0@0": 1 - 0.25/2, "gpu-node-1@0": 1,
		"gpu-node-0@1": 1, "gpu-node-1@1": 1,
		"gpu-node-0@2": 0, "gpu-node-1@2": 0, // the third day: no tier holds it
	}
	if len(tb.rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(tb.rows), len(want))
	}
	for _, r := range tb.rows {
		k := fmt.Sprintf("%s@%d", r[host].S, (r[start].I-t0)/dayMs)
		if math.Abs(r[cov].F-want[k]) > 1e-12 {
			t.Errorf("%s: coverage %g, want %g (%d series)", k, r[cov].F, want[k], r[n].I)
		}
	}
}

// TestExportErrors: each request the tiers cannot answer gets an error
// that says why, and what the tiers hold where that matters.
func TestExportErrors(t *testing.T) {
	tt := buildTiers(t, knownWorkload(2), 2, t0+dayMs)
	e := tt.exporter()
	day := func(d int64) time.Time { return time.UnixMilli(t0 + d*dayMs) }
	cases := []struct {
		name string
		req  export.Request
		err  error
		says []string
	}{
		{"unknown selector", export.Request{From: day(0), To: day(1), Step: "1h", Queries: []string{"no_such_metric"}}, export.ErrUnknownSelector, []string{"no_such_metric"}},
		{"empty", export.Request{From: day(0), To: day(1), Step: "1h", Queries: []string{`DCGM_FI_DEV_GPU_UTIL{gpu="9"}`}}, export.ErrEmpty, []string{"none of the 4 series"}},
		{"unknown label", export.Request{From: day(0), To: day(1), Step: "1h", Queries: []string{"DCGM_FI_DEV_GPU_UTIL"}, By: []string{"pod"}}, export.ErrUnknownLabel, []string{`"pod"`}},
		{"step too fine", export.Request{From: day(0), To: day(1), Step: "15m", Queries: []string{"DCGM_FI_DEV_GPU_UTIL"}}, export.ErrStepTooFine, []string{"hour tier", "minute tier holds 2026-01-06T00:00:00Z"}},
		{"beyond retention", export.Request{From: day(-40), To: day(-30), Step: "1d", Queries: []string{"DCGM_FI_DEV_GPU_UTIL"}}, export.ErrOutOfRange, []string{"hour tier holds 2026-01-05T00:00:00Z to 2026-01-07T00:00:00Z"}},
		{"bad step", export.Request{From: day(0), To: day(1), Step: "90s", Queries: []string{"DCGM_FI_DEV_GPU_UTIL"}}, export.ErrBadRequest, []string{"90s"}},
		{"range selector", export.Request{From: day(0), To: day(1), Step: "1h", Queries: []string{"DCGM_FI_DEV_GPU_UTIL[5m]"}}, export.ErrBadRequest, []string{"range"}},
		{"regex name", export.Request{From: day(0), To: day(1), Step: "1h", Queries: []string{`{__name__=~"DCGM.*"}`}}, export.ErrBadRequest, []string{"one metric name"}},
		{"duplicate alias", export.Request{From: day(0), To: day(1), Step: "1h", Queries: []string{"a=DCGM_FI_DEV_GPU_UTIL", "a=vllm:generation_tokens_total"}}, export.ErrBadRequest, []string{`"a"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Plan(context.Background(), c.req)
			if !errors.Is(err, c.err) || !errors.Is(err, export.ErrBadRequest) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// TestExportExpression: a PromQL expression is evaluated at each window of
// the serving tier and summarised like a gauge.
func TestExportExpression(t *testing.T) {
	tt := buildTiers(t, knownWorkload(2), 2, t0+dayMs)
	tb := runExport(t, tt.exporter(), export.Request{From: time.UnixMilli(t0), To: time.UnixMilli(t0 + 2*dayMs), Step: "1d",
		Queries: []string{`busy=avg by (modelName) (DCGM_FI_DEV_GPU_UTIL) / 100`, "DCGM_FI_DEV_GPU_UTIL"}, By: []string{"modelName"}})
	if len(tb.rows) != 4 {
		t.Fatalf("%d rows, want 2 days x 2 GPU models", len(tb.rows))
	}
	busy, util, cov := tb.col(t, "busy_max"), tb.col(t, "DCGM_FI_DEV_GPU_UTIL_max"), tb.col(t, "busy_coverage")
	for _, r := range tb.rows {
		if r[busy].Null || r[busy].F <= 0 || r[busy].F > r[util].F/100+1e-9 || r[cov].F != 1 {
			t.Errorf("row %v: busy_max %v, util max %v, coverage %v", r[:2], r[busy], r[util], r[cov])
		}
	}
}

// failingWriter refuses every row, counting the calls.
type failingWriter struct{ calls int }

var errDiskFull = errors.New("disk full")

func (f *failingWriter) WriteRow([]export.Cell) error { f.calls++; return errDiskFull }
func (f *failingWriter) Close() error                 { return nil }

// TestRunStopsOnWriteError: the writer's first error ends the export and is
// returned once (Run writes on a second goroutine), with no row written
// after it.
func TestRunStopsOnWriteError(t *testing.T) {
	const days = 2
	tt := buildTiers(t, knownWorkload(days), days, t0+days*dayMs)
	p, err := tt.exporter().Plan(context.Background(), export.Request{From: time.UnixMilli(t0), To: time.UnixMilli(t0 + days*dayMs),
		Step: "1h", Queries: []string{"DCGM_FI_DEV_GPU_UTIL"}, By: []string{"Hostname", "gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	w := &failingWriter{}
	err = p.Run(context.Background(), w, func(done, _ int) { steps = done })
	if !errors.Is(err, errDiskFull) || err.Error() != errDiskFull.Error() {
		t.Fatalf("Run: %v, want %v once", err, errDiskFull)
	}
	if w.calls != 1 || steps != 0 {
		t.Errorf("%d rows written and %d steps reported after the writer failed, want 1 and 0", w.calls, steps)
	}
}

// TestExportDayInTimeZone: a 1d step in Asia/Tokyo runs from midnight to
// midnight there (15:00 to 15:00 UTC), and its figures are PromQL's over
// that day, not over a UTC day.
func TestExportDayInTimeZone(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	const days = 3
	tt := buildTiers(t, knownWorkload(days), days, t0+days*dayMs)
	from := time.Date(2026, 1, 6, 0, 0, 0, 0, tokyo)
	tb := runExport(t, tt.exporter(), export.Request{From: from, To: from.AddDate(0, 0, 1), Step: "1d", Location: tokyo,
		Queries: []string{"util=DCGM_FI_DEV_GPU_UTIL", "tokens=vllm:generation_tokens_total"}})
	if len(tb.rows) != 1 {
		t.Fatalf("%d rows, want one day", len(tb.rows))
	}
	row := tb.rows[0]
	if start, end := row[tb.col(t, "step_start")].I, row[tb.col(t, "step_end")].I; start != t0+15*hourMs || end != start+dayMs {
		t.Fatalf("step %s to %s, want 2026-01-05T15:00Z to 2026-01-06T15:00Z", fmtUTC(start), fmtUTC(end))
	}
	if cov := row[tb.col(t, "util_coverage")].F; cov != 1 {
		t.Errorf("coverage %g, want 1", cov)
	}
	at := t0 + 15*hourMs + dayMs - 1
	eng, q := newEngine(), tiers.NewStitched(nil, tt.minute, tt.hour)
	for col, qs := range map[string]string{
		"util_avg":        `sum(sum_over_time(DCGM_FI_DEV_GPU_UTIL[1d])) / sum(count_over_time(DCGM_FI_DEV_GPU_UTIL[1d]))`,
		"util_max":        `max(max_over_time(DCGM_FI_DEV_GPU_UTIL[1d]))`,
		"tokens_increase": `sum(increase(vllm:generation_tokens_total[1d] anchored))`,
	} {
		want := instant(t, eng, q, qs, at)["{}"]
		if got := row[tb.col(t, col)]; got.Null || !near(got.F, want) {
			t.Errorf("%s: export %v, PromQL over the Tokyo day %v", col, got, want)
		}
	}
}

func fmtUTC(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// widestRead is a tier that records the most windows a series could have
// in one of its reads.
type widestRead struct {
	export.Tier
	widest int64
}

func (w *widestRead) SelectFields(ctx context.Context, mint, maxt int64, fields tiers.WindowFields, ms ...*labels.Matcher) ([]tiers.SeriesWindows, error) {
	w.widest = max(w.widest, (maxt-mint+1)/w.Config().Resolution.Milliseconds())
	return w.Tier.SelectFields(ctx, mint, maxt, fields, ms...)
}

// TestExportReadWindows: an export whose reads are cut to the fewest
// windows a series (as where a selector matches hundreds of thousands of
// series: Config.ReadWindows) writes, cell for cell, the rows of one whose
// reads hold up to a week of hours (six hours of minutes) a series.
func TestExportReadWindows(t *testing.T) {
	const days = 3
	tt := buildTiers(t, knownWorkload(days), days, t0+2*dayMs)
	run := func(readWindows int) (*table, int64, int64) {
		minute, hour := &widestRead{Tier: tt.minute}, &widestRead{Tier: tt.hour}
		e := export.New(export.Config{Minute: minute, Hour: hour, Typing: export.Typing{Catalogue: catalogue.TypeOf}, ReadWindows: readWindows})
		tb := runExport(t, e, export.Request{From: time.UnixMilli(t0), To: time.UnixMilli(t0 + days*dayMs), Step: "1h",
			Queries: []string{"util=DCGM_FI_DEV_GPU_UTIL", "vllm:generation_tokens_total", "ttft=vllm:time_to_first_token_seconds"},
			By:      []string{"Hostname"}})
		return tb, minute.widest, hour.widest
	}
	whole, wm, wh := run(0)
	cut, cm, ch := run(1)
	if wm <= 6 || wh <= 6 || cm != 6 || ch != 6 {
		t.Fatalf("widest reads: minute %d and %d windows a series, hour %d and %d; want more than 6, then 6", wm, cm, wh, ch)
	}
	if len(whole.rows) < 50 || len(cut.rows) != len(whole.rows) {
		t.Fatalf("%d rows cut, %d whole", len(cut.rows), len(whole.rows))
	}
	for i := range whole.rows {
		if fmt.Sprint(cut.rows[i]) != fmt.Sprint(whole.rows[i]) {
			t.Fatalf("row %d:\n cut %v\nwhole %v", i, cut.rows[i], whole.rows[i])
		}
	}
}
