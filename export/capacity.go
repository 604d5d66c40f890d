package export

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// PresetCapacity is the capacity-planning preset.
const PresetCapacity = "capacity"

// CapacityConfig tunes the capacity preset.
type CapacityConfig struct {
	// ForecastDays is how far the linear trend of peak demand is drawn
	// past the last step (0: 90): no further, for a group, than its
	// history reaches back from the last step.
	ForecastDays int
}

// Job is a prepared export: a Plan, or the capacity preset.
type Job interface {
	Columns() []Column
	// Run writes the rows to w (it does not close w).
	Run(ctx context.Context, w RowWriter, progress func(done, total int)) error
	// HasChart reports whether WriteChart draws anything (after Run).
	HasChart() bool
	WriteChart(w io.Writer) error
}

// HasChart implements Job: a plain export has no chart.
func (p *Plan) HasChart() bool { return false }

// WriteChart implements Job.
func (p *Plan) WriteChart(io.Writer) error {
	return fmt.Errorf("%w: only the capacity preset draws a chart", ErrBadRequest)
}

// Prepare returns the job req asks for: the capacity preset, or a Plan.
func (e *Exporter) Prepare(ctx context.Context, req Request, cfg CapacityConfig) (Job, error) {
	switch req.Preset {
	case "":
		return e.Plan(ctx, req)
	case PresetCapacity:
		return e.Capacity(ctx, req, cfg)
	}
	return nil, fmt.Errorf("%w: unknown preset %q (capacity)", ErrBadRequest, req.Preset)
}

// The capacity preset's source metrics (vLLM V1 and DCGM names; the
// simulator's and the real exporters').
const (
	capSM      = "DCGM_FI_PROF_SM_ACTIVE"
	capTokens  = "vllm:generation_tokens_total"
	capReqs    = "vllm:request_success_total"
	capTTFT    = "vllm:time_to_first_token_seconds_bucket"
	capTPOT    = "vllm:request_time_per_output_token_seconds_bucket"
	capKV      = "vllm:kv_cache_usage_perc"
	capPower   = "DCGM_FI_DEV_POWER_VIOLATION"
	capThermal = "DCGM_FI_DEV_THERMAL_VIOLATION"
)

// Capacity is the capacity-planning preset: per GPU model and served model
// (a GPU serves the model of the vLLM pod it is assigned to, joined on
// namespace and pod), per step, the columns of capacityColumns, then a
// linear trend of peak demand drawn ForecastDays past the last step. The
// table is small (one row per pair and step) and held until the trend is
// known; the chart is drawn from it. req's Queries and By must be empty.
func (e *Exporter) Capacity(ctx context.Context, req Request, cfg CapacityConfig) (*CapacityJob, error) {
	if len(req.Queries) > 0 || len(req.By) > 0 {
		return nil, fmt.Errorf("%w: the capacity preset chooses its own metrics and groups: give no selector and no --by", ErrBadRequest)
	}
	if cfg.ForecastDays <= 0 {
		cfg.ForecastDays = 90
	}
	if !req.To.After(req.From) {
		return nil, fmt.Errorf("%w: --to must be after --from", ErrBadRequest)
	}
	st, err := parseStep(req.Step, req.Location)
	if err != nil {
		return nil, err
	}
	qs := []*query{
		{alias: "sm", name: capSM, kind: KindGauge},
		{alias: "tok", name: capTokens, kind: KindCounter},
		{alias: "req", name: capReqs, kind: KindCounter, slotPeak: true},
		{alias: "ttft", name: capTTFT, kind: KindHistogram, optional: true},
		{alias: "tpot", name: capTPOT, kind: KindHistogram, optional: true},
		{alias: "kv", name: capKV, kind: KindGauge, optional: true},
		{alias: "pviol", name: capPower, kind: KindCounter, optional: true},
		{alias: "tviol", name: capThermal, kind: KindCounter, optional: true},
	}
	for _, q := range qs {
		q.text = q.name
		q.matchers = withName(nil, q.name)
	}
	// The pods' GPU models and served models, to join GPUs to models.
	plain, err := e.plan(ctx, req, st, nil, nil, func(labels.Labels) (groupKey, bool) { return "", true })
	if err != nil {
		return nil, err
	}
	lo, hi := plain.steps[0].start, plain.steps[len(plain.steps)-1].end-1
	gpuModel, served := map[string]string{}, map[string]string{}
	for _, t := range plain.avail {
		for name, dst := range map[string]map[string]string{capSM: gpuModel, capReqs: served} {
			ls, err := t.src.SelectLabels(ctx, lo, hi, withName(nil, name)...)
			if err != nil {
				return nil, err
			}
			for _, l := range ls {
				if pod := podOf(l); pod != "" {
					if name == capSM {
						dst[pod] = l.Get("modelName")
					} else {
						dst[pod] = l.Get("model_name")
					}
				}
			}
		}
	}
	groupOf := func(l labels.Labels) (groupKey, bool) {
		pod := podOf(l)
		if gm := l.Get("modelName"); gm != "" || l.Has("gpu") {
			return groupKey(gm + "\xff" + served[pod]), true
		}
		return groupKey(gpuModel[pod] + "\xff" + l.Get("model_name")), true
	}
	p, err := e.plan(ctx, req, st, qs, []string{"gpu_model", "served_model"}, groupOf)
	if err != nil {
		return nil, err
	}
	loc := req.Location
	if loc == nil {
		loc = time.UTC
	}
	return &CapacityJob{plan: p, cfg: cfg, st: st, loc: loc}, nil
}

func podOf(l labels.Labels) string {
	pod := l.Get("pod")
	if pod == "" {
		return ""
	}
	return l.Get("namespace") + "/" + pod
}

// CapacityJob is a prepared capacity preset.
type CapacityJob struct {
	plan *Plan
	cfg  CapacityConfig
	st   stepper
	loc  *time.Location
	rows [][]Cell // after Run, with the trend and forecast rows
}

// The capacity table's columns (docs/format/export.md, "Capacity preset").
var capacityColumns = []Column{
	{Name: "gpu_model", Type: ColString, Help: "DCGM modelName of the GPUs"},
	{Name: "served_model", Type: ColString, Help: "vLLM model_name the GPUs serve (joined on namespace and pod)"},
	{Name: "step_start", Type: ColTime},
	{Name: "step_end", Type: ColTime},
	{Name: "tier", Type: ColString},
	{Name: "row_kind", Type: ColString, Help: "observed, or forecast (the linear trend only)"},
	{Name: "gpus", Type: ColInt, Unit: "GPUs", Help: "GPUs with SM activity in the step"},
	{Name: "coverage", Type: ColFloat, Unit: "fraction 0-1", Help: "SM activity windows with data / (GPUs x windows in the step)"},
	{Name: "sm_active_peak", Type: ColFloat, Unit: "ratio 0-1", Help: "highest SM activity sample of any GPU"},
	{Name: "sm_active_p95", Type: ColFloat, Unit: "ratio 0-1", Help: "sustained: 95th percentile of the GPUs' window averages"},
	{Name: "tokens_per_second_per_gpu", Type: ColFloat, Unit: "tokens/s/GPU", Help: "generated tokens over the step / seconds / gpus"},
	{Name: "requests_per_second", Type: ColFloat, Unit: "requests/s", Help: "finished requests over the step / seconds"},
	{Name: "requests_per_second_peak", Type: ColFloat, Unit: "requests/s", Help: "busiest window (minute or hour) of the step: peak demand"},
	{Name: "ttft_p99_seconds", Type: ColFloat, Unit: "s", Help: "99th percentile time to first token, from the histogram's bucket increases"},
	{Name: "tpot_p99_seconds", Type: ColFloat, Unit: "s", Help: "99th percentile time per output token, from the histogram's bucket increases"},
	{Name: "kv_cache_peak", Type: ColFloat, Unit: "ratio 0-1", Help: "highest KV-cache usage sample"},
	{Name: "throttled_fraction", Type: ColFloat, Unit: "fraction 0-1", Help: "power plus thermal violation time / (seconds x gpus), at most 1"},
	{Name: "headroom", Type: ColFloat, Unit: "fraction", Help: "1 / max(sm_active_peak, kv_cache_peak) - 1"},
	{Name: "headroom_limited_by", Type: ColString, Help: "sm_active or kv_cache: the resource that sets headroom"},
	{Name: "requests_per_second_peak_trend", Type: ColFloat, Unit: "requests/s", Help: "least-squares line through requests_per_second_peak, extended ForecastDays (a linear extrapolation, not a prediction)"},
}

// Columns implements Job.
func (c *CapacityJob) Columns() []Column { return capacityColumns }

// HasChart implements Job.
func (c *CapacityJob) HasChart() bool { return true }

// Run implements Job: it computes every step, fits the trend, then writes
// the observed rows and the forecast rows.
func (c *CapacityJob) Run(ctx context.Context, w RowWriter, progress func(done, total int)) error {
	in := &table{cols: c.plan.columns}
	if err := c.plan.Run(ctx, in, progress); err != nil {
		return err
	}
	col := func(name string) int {
		i := slices.IndexFunc(in.cols, func(c Column) bool { return c.Name == name })
		if i < 0 {
			panic("capacity: no internal column " + name) // the columns are this file's own
		}
		return i
	}
	f := func(r []Cell, name string) float64 {
		v := r[col(name)]
		if v.Null {
			return math.NaN()
		}
		return v.F
	}
	c.rows = c.rows[:0]
	type obs struct{ x, y float64 }
	fits := map[string][]obs{}
	var groups []string
	for _, r := range in.rows {
		gpus := float64(r[col("sm_series")].I)
		secs := float64(r[col("step_end")].I-r[col("step_start")].I) / 1000
		smPeak := f(r, "sm_max")
		kvPeak := f(r, "kv_max")
		headroom, limit := math.NaN(), ""
		if u := maxIgnoringNaN(smPeak, kvPeak); u > 0 {
			headroom = 1/u - 1
			limit = "sm_active"
			if kvPeak > smPeak || math.IsNaN(smPeak) {
				limit = "kv_cache"
			}
		}
		throttled := math.NaN()
		if v := sumIgnoringNaN(f(r, "pviol_increase"), f(r, "tviol_increase")); !math.IsNaN(v) && gpus > 0 {
			throttled = min(v/1e9/(secs*gpus), 1)
		}
		perGPU := math.NaN()
		if gpus > 0 {
			perGPU = f(r, "tok_increase") / secs / gpus
		}
		out := []Cell{
			r[0], r[1], r[2], r[3], r[4], {S: "observed"},
			{I: r[col("sm_series")].I}, r[col("sm_coverage")],
			num(smPeak), num(f(r, "sm_p95")), num(perGPU),
			num(f(r, "req_rate")), num(f(r, "req_peak_rate")),
			num(f(r, "ttft_p99")), num(f(r, "tpot_p99")), num(kvPeak), num(throttled),
			num(headroom), {S: limit}, null,
		}
		c.rows = append(c.rows, out)
		g := r[0].S + "\xff" + r[1].S
		if _, seen := fits[g]; !seen {
			groups = append(groups, g)
			fits[g] = nil
		}
		if y := f(r, "req_peak_rate"); !math.IsNaN(y) {
			fits[g] = append(fits[g], obs{float64(r[2].I), y})
		}
	}
	// The trend: least squares per group, over the steps' starts.
	trend := map[string][2]float64{}
	for g, pts := range fits {
		xs, ys := make([]float64, len(pts)), make([]float64, len(pts))
		for i, p := range pts {
			xs[i], ys[i] = p.x, p.y
		}
		if a, b, ok := linearFit(xs, ys); ok {
			trend[g] = [2]float64{a, b}
		}
	}
	at := func(g string, x float64) Cell {
		ab, ok := trend[g]
		if !ok {
			return null
		}
		return num(math.Max(ab[0]+ab[1]*x, 0))
	}
	last := int64(math.MinInt64)
	for _, r := range c.rows {
		r[len(r)-1] = at(r[0].S+"\xff"+r[1].S, float64(r[2].I))
		last = max(last, r[3].I)
	}
	slices.Sort(groups)
	horizon := last + int64(c.cfg.ForecastDays)*24*time.Hour.Milliseconds()
	// A group's line is extended no further than its history reaches back:
	// 20 hours of a diurnal ramp drawn over 90 days said 40 times the
	// demand.
	reach := map[string]int64{}
	for g, pts := range fits {
		if len(pts) > 0 {
			first := slices.MinFunc(pts, func(a, b obs) int { return cmp.Compare(a.x, b.x) }).x
			reach[g] = last + (last - int64(first))
		}
	}
	for _, s := range c.st.steps(last, horizon) {
		for _, g := range groups {
			vals := strings.SplitN(g, "\xff", 2)
			r := []Cell{{S: vals[0]}, {S: vals[1]}, {I: s.start}, {I: s.end}, {S: ""}, {S: "forecast"}, {I: 0}}
			for range len(capacityColumns) - len(r) - 1 {
				r = append(r, null)
			}
			r[len(capacityColumns)-2] = Cell{S: ""}
			if s.start < reach[g] {
				r = append(r, at(g, float64(s.start)))
			} else {
				r = append(r, null)
			}
			c.rows = append(c.rows, r)
		}
	}
	for _, r := range c.rows {
		if err := w.WriteRow(r); err != nil {
			return err
		}
	}
	return nil
}

// linearFit returns a and b of the least-squares line y = a + b·x, and
// false with fewer than two distinct x.
func linearFit(xs, ys []float64) (a, b float64, ok bool) {
	n := float64(len(xs))
	if n < 2 {
		return 0, 0, false
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, 0, false
	}
	b = sxy / sxx
	return my - b*mx, b, true
}

func maxIgnoringNaN(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return math.Max(a, b)
}

func sumIgnoringNaN(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return a + b
}

// table holds rows in memory (the preset's intermediate table).
type table struct {
	cols []Column
	rows [][]Cell
}

func (t *table) WriteRow(r []Cell) error { t.rows = append(t.rows, slices.Clone(r)); return nil }
func (t *table) Close() error            { return nil }
