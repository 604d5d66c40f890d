package export_test

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/export"
)

// simHistory is days of a small simulated cluster (two GPUs, each serving
// its own model, every DCGM field) at 15 s from t0.
func simHistory(t testing.TB, days int) []series {
	t.Helper()
	c, err := sim.New(sim.Config{Seed: 3, Nodes: 1, GPUsPerNode: 2, Models: []string{"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"}, DCGMFields: "full"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"DCGM_FI_PROF_SM_ACTIVE": true, "vllm:generation_tokens_total": true, "vllm:request_success_total": true,
		"vllm:time_to_first_token_seconds_bucket": true, "vllm:request_time_per_output_token_seconds_bucket": true,
		"vllm:kv_cache_usage_perc": true, "DCGM_FI_DEV_POWER_VIOLATION": true, "DCGM_FI_DEV_THERMAL_VIOLATION": true}
	idx := map[string]int{}
	var out []series
	from := time.UnixMilli(t0)
	err = c.Backfill(from, from.Add(time.Duration(days)*24*time.Hour-15*time.Second), 15*time.Second, func(l labels.Labels, ts int64, v float64) error {
		if !want[l.Get("__name__")] || value.IsStaleNaN(v) {
			return nil
		}
		k := l.String()
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, series{lbls: l})
		}
		out[i].samples = append(out[i].samples, sample{ts, v})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rawIncrease is the reset-aware increase of samples over [from, to),
// counting the step from the last sample before from, and per window of
// res the increase of the steps ending in it.
func rawIncrease(ss []sample, from, to, res int64) (float64, map[int64]float64) {
	total, per := 0.0, map[int64]float64{}
	for i := 1; i < len(ss); i++ {
		t := ss[i].t
		if t < from || t >= to {
			continue
		}
		d := ss[i].f - ss[i-1].f
		if d < 0 {
			d = ss[i].f
		}
		total += d
		per[t-t%res] += d
	}
	return total, per
}

// TestCapacityPresetMatchesHandComputed: on simulator history, every figure
// of the capacity preset equals the same figure computed from the raw
// samples by the rules docs/format/export.md states.
func TestCapacityPresetMatchesHandComputed(t *testing.T) {
	const days = 2
	ss := simHistory(t, days)
	tt := buildTiers(t, ss, days, t0+dayMs)
	job, err := tt.exporter().Prepare(context.Background(), export.Request{
		From: time.UnixMilli(t0), To: time.UnixMilli(t0 + days*dayMs), Step: "1d", Preset: export.PresetCapacity}, export.CapacityConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tb := &table{cols: job.Columns()}
	if err := job.Run(context.Background(), tb, nil); err != nil {
		t.Fatal(err)
	}
	// The pods' served models, to group the GPUs.
	served := map[string]string{}
	for _, s := range ss {
		if m := s.lbls.Get("model_name"); m != "" {
			served[s.lbls.Get("pod")] = m
		}
	}
	groupOf := func(l labels.Labels) string {
		if l.Has("modelName") {
			return l.Get("modelName") + "|" + served[l.Get("pod")]
		}
		return "NVIDIA H100 80GB HBM3|" + l.Get("model_name")
	}
	col := func(name string) int { return tb.col(t, name) }
	observed := 0
	for _, r := range tb.rows {
		if r[col("row_kind")].S != "observed" {
			continue
		}
		observed++
		g := r[col("gpu_model")].S + "|" + r[col("served_model")].S
		from, to := r[col("step_start")].I, r[col("step_end")].I
		res := hourMs
		if r[col("tier")].S == "minute" {
			res = minMs
		}
		secs := float64(to-from) / 1000
		var gpus, smPeak, kvPeak, tokens, reqs, viol float64
		smPeak, kvPeak = math.Inf(-1), math.Inf(-1)
		var smAvgs []float64
		reqSlots := map[int64]float64{}
		buckets := map[string]map[float64]float64{}
		for _, s := range ss {
			if groupOf(s.lbls) != g {
				continue
			}
			name := s.lbls.Get("__name__")
			switch name {
			case "DCGM_FI_PROF_SM_ACTIVE":
				gpus++
				sums, counts := map[int64]float64{}, map[int64]float64{}
				for _, smp := range s.samples {
					if smp.t >= from && smp.t < to {
						smPeak = max(smPeak, smp.f)
						sums[smp.t-smp.t%res] += smp.f
						counts[smp.t-smp.t%res]++
					}
				}
				for w, sum := range sums {
					smAvgs = append(smAvgs, sum/counts[w])
				}
			case "vllm:kv_cache_usage_perc":
				for _, smp := range s.samples {
					if smp.t >= from && smp.t < to {
						kvPeak = max(kvPeak, smp.f)
					}
				}
			case "vllm:generation_tokens_total":
				inc, _ := rawIncrease(s.samples, from, to, res)
				tokens += inc
			case "vllm:request_success_total":
				inc, per := rawIncrease(s.samples, from, to, res)
				reqs += inc
				for w, v := range per {
					reqSlots[w] += v
				}
			case "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION":
				inc, _ := rawIncrease(s.samples, from, to, res)
				viol += inc
			default: // histogram buckets
				inc, _ := rawIncrease(s.samples, from, to, res)
				le, err := parseLe(s.lbls.Get("le"))
				if err != nil {
					t.Fatal(err)
				}
				if buckets[name] == nil {
					buckets[name] = map[float64]float64{}
				}
				buckets[name][le] += inc
			}
		}
		peak := 0.0
		for _, v := range reqSlots {
			peak = max(peak, v/(float64(res)/1000))
		}
		sort.Float64s(smAvgs)
		p99 := func(name string) float64 {
			var bs promql.Buckets
			for le, c := range buckets[name] {
				bs = append(bs, promql.Bucket{UpperBound: le, Count: c})
			}
			v, _, _, _, _, _ := promql.BucketQuantile(0.99, bs)
			return v
		}
		want := map[string]float64{
			"gpus":                      gpus,
			"sm_active_peak":            smPeak,
			"sm_active_p95":             quantile95(smAvgs),
			"tokens_per_second_per_gpu": tokens / secs / gpus,
			"requests_per_second":       reqs / secs,
			"requests_per_second_peak":  peak,
			"ttft_p99_seconds":          p99("vllm:time_to_first_token_seconds_bucket"),
			"tpot_p99_seconds":          p99("vllm:request_time_per_output_token_seconds_bucket"),
			"kv_cache_peak":             kvPeak,
			"throttled_fraction":        min(viol/1e9/(secs*gpus), 1),
			"headroom":                  1/max(smPeak, kvPeak) - 1,
		}
		for name, w := range want {
			c := r[col(name)]
			got := c.F
			if name == "gpus" {
				got = float64(c.I)
			}
			if c.Null || !near(got, w) {
				t.Errorf("%s day %d %s: preset %v, hand-computed %v", g, (from-t0)/dayMs, name, c, w)
			}
		}
		if w, l := r[col("headroom")].F, r[col("headroom_limited_by")].S; w < 0 || (l != "sm_active" && l != "kv_cache") {
			t.Errorf("%s: headroom %g limited by %q", g, w, l)
		}
	}
	if observed != days*2 {
		t.Fatalf("%d observed rows, want %d (2 days x 2 served models)", observed, days*2)
	}
	forecast := slices.IndexFunc(tb.rows, func(r []export.Cell) bool { return r[col("row_kind")].S == "forecast" })
	if forecast < 0 || len(tb.rows)-observed != 90*2 {
		t.Fatalf("%d forecast rows, want 90 days x 2", len(tb.rows)-observed)
	}
	var buf bytes.Buffer
	if err := job.WriteChart(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil || img.Bounds().Dx() < 500 {
		t.Fatalf("chart: %v", err)
	}
}

// TestCapacityForecastOncePerGroup: a range whose first steps have no
// requests (before the history) has one forecast row a group and step; a
// group was listed again for each of those steps, and its forecast written
// as many times (29 copies of 90 days in a 20-hour import's 2-day export).
// The trend goes on no further than the history reaches back.
func TestCapacityForecastOncePerGroup(t *testing.T) {
	const days = 2
	ss := simHistory(t, days)
	tt := buildTiers(t, ss, days, t0+dayMs)
	job, err := tt.exporter().Prepare(context.Background(), export.Request{
		From: time.UnixMilli(t0 - 3*dayMs), To: time.UnixMilli(t0 + days*dayMs), Step: "1d", Preset: export.PresetCapacity}, export.CapacityConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tb := &table{cols: job.Columns()}
	if err := job.Run(context.Background(), tb, nil); err != nil {
		t.Fatal(err)
	}
	col := func(name string) int { return tb.col(t, name) }
	groups := map[string]bool{}
	forecasts := map[string]int{}
	extended := map[string]int{}
	for _, r := range tb.rows {
		g := r[col("gpu_model")].S + "|" + r[col("served_model")].S
		groups[g] = true
		if r[col("row_kind")].S == "forecast" {
			// Two days of history: the line goes two days on, no further.
			if c := r[col("requests_per_second_peak_trend")]; !c.Null {
				extended[g]++
				if r[col("step_start")].I >= t0+4*dayMs {
					t.Fatalf("%s: the trend extended to %s, past the two days the history spans", g, time.UnixMilli(r[col("step_start")].I).UTC())
				}
			}
			k := g + "|" + strconv.FormatInt(r[col("step_start")].I, 10)
			forecasts[k]++
			if forecasts[k] > 1 {
				t.Fatalf("%d forecast rows for %s", forecasts[k], k)
			}
		}
	}
	if len(forecasts) != 90*len(groups) {
		t.Fatalf("%d forecast rows for %d groups, want 90 days each", len(forecasts), len(groups))
	}
	for g := range groups {
		if extended[g] != 2 {
			t.Errorf("%s: the trend on %d forecast days, want the 2 its history spans", g, extended[g])
		}
	}
}

func quantile95(sorted []float64) float64 {
	rank := 0.95 * float64(len(sorted)-1)
	lo := math.Floor(rank)
	hi := math.Min(float64(len(sorted)-1), lo+1)
	w := rank - lo
	return sorted[int(lo)]*(1-w) + sorted[int(hi)]*w
}

func parseLe(s string) (float64, error) {
	if s == "+Inf" {
		return math.Inf(1), nil
	}
	return strconv.ParseFloat(s, 64)
}
