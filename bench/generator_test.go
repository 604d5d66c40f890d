package bench

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

func testGenerator(t *testing.T, cfg LoadConfig) *generator {
	t.Helper()
	cfg.URL = "http://127.0.0.1:1/api/v1/write"
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	g, err := newGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGeneratorSeriesCount(t *testing.T) {
	for _, tc := range []struct {
		name   string
		series int
		mix    Mix
	}{
		{"default mix 10k", 10000, Mix{}},
		{"default mix 2k", 2000, Mix{}},
		{"dcgm only", 1600, Mix{DCGM: 1}},
		{"vllm only", 5000, Mix{VLLM: 1}},
		{"ebpf only", 930, Mix{EBPF: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := testGenerator(t, LoadConfig{Series: tc.series, Mix: tc.mix})
			got := len(g.series)
			// Rounding to whole units costs at most half a unit per shape.
			tol := 0
			for _, s := range g.shapes {
				tol += s.seriesPerUnit()
			}
			if math.Abs(float64(got-tc.series)) > float64(tol) {
				t.Fatalf("got %d series, want about %d (±%d)", got, tc.series, tol)
			}
			sum := 0
			for _, u := range g.units {
				sum += u.count
			}
			if sum != got {
				t.Fatalf("units hold %d series, generator %d", sum, got)
			}
			seen := map[string]bool{}
			for i, s := range g.series {
				if s.lset.Get(model.MetricNameLabel) == "" {
					t.Fatalf("series %d has no name", i)
				}
				if !labelsSorted(s.pb) {
					t.Fatalf("series %d labels not sorted: %v", i, s.lset)
				}
				k := s.lset.String()
				if seen[k] {
					t.Fatalf("duplicate series %s", k)
				}
				seen[k] = true
			}
		})
	}
}

func TestGeneratorMixExcludesShape(t *testing.T) {
	g := testGenerator(t, LoadConfig{Series: 3000, Mix: Mix{DCGM: 1, VLLM: 1}})
	for _, s := range g.series {
		if strings.HasPrefix(s.lset.Get(model.MetricNameLabel), "ebpf_") {
			t.Fatalf("ebpf series %s with a zero ebpf share", s.lset)
		}
	}
}

func TestGeneratorExtraLabels(t *testing.T) {
	g := testGenerator(t, LoadConfig{Series: 500, ExtraLabels: 3, LabelValueLength: 40})
	for _, s := range g.series {
		for i := range 3 {
			v := s.lset.Get("extra_label_" + strconv.Itoa(i))
			if len(v) != 40 {
				t.Fatalf("extra_label_%d = %q: want 40 chars", i, v)
			}
		}
	}
}

// TestGeneratorValues advances every unit for many rounds and checks what a
// receiver and PromQL rely on: counters never fall, histogram buckets are
// cumulative in le and over time, +Inf equals _count, gauges stay in range
// and are not constant (so compression is exercised).
func TestGeneratorValues(t *testing.T) {
	g := testGenerator(t, LoadConfig{Series: 3000})
	prev := make(map[*group][]float64)
	varied := map[string]bool{}
	for round := range 300 {
		for _, u := range g.units {
			u.advance(1)
			for _, gr := range u.groups {
				f := gr.fam
				switch f.kind {
				case kindGauge:
					v := gr.vals[0]
					if v < f.gauge.min || v > f.gauge.max {
						t.Fatalf("%s = %g outside [%g, %g]", f.name, v, f.gauge.min, f.gauge.max)
					}
				case kindHistogram:
					n := len(f.bounds)
					for i := 1; i <= n; i++ {
						if gr.vals[i] < gr.vals[i-1] {
							t.Fatalf("%s round %d: bucket %d = %g < bucket %d = %g", f.name, round, i, gr.vals[i], i-1, gr.vals[i-1])
						}
					}
					if gr.vals[n] != gr.vals[n+2] {
						t.Fatalf("%s: +Inf bucket %g != _count %g", f.name, gr.vals[n], gr.vals[n+2])
					}
				}
				if p, ok := prev[gr]; ok {
					for i := range gr.vals {
						if gr.vals[i] != p[i] {
							varied[f.name] = true
						}
						if f.kind != kindGauge && gr.vals[i] < p[i] {
							t.Fatalf("%s series %d fell from %g to %g", f.name, i, p[i], gr.vals[i])
						}
					}
				}
				prev[gr] = append(prev[gr][:0], gr.vals...)
			}
		}
	}
	for _, name := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds", "ebpf_exporter_bio_latency_seconds"} {
		if !varied[name] {
			t.Errorf("%s never changed over 300 rounds", name)
		}
	}
}

func TestGeneratorChurn(t *testing.T) {
	g := testGenerator(t, LoadConfig{Series: 2000, Mix: Mix{VLLM: 1}})
	u := g.units[0]
	for range 10 {
		u.advance(1)
	}
	before := g.series[u.first].lset.Copy()
	var counter *group
	for _, gr := range u.groups {
		if gr.fam.kind == kindCounter {
			counter = gr
			break
		}
	}
	if counter.vals[0] == 0 {
		t.Fatal("counter did not grow before churn")
	}
	if !g.maybeChurn(u, 100) {
		t.Fatal("churn at 100% did not churn")
	}
	after := g.series[u.first].lset
	if labels.Equal(before, after) {
		t.Fatalf("churn kept labels %s", before)
	}
	if before.Get("pod") == after.Get("pod") {
		t.Fatalf("churn kept pod %q", before.Get("pod"))
	}
	for _, gr := range u.groups {
		if gr.fam.kind == kindCounter && gr.level != 0 {
			t.Fatalf("%s did not restart after churn", gr.fam.name)
		}
	}
	if g.maybeChurn(u, 0) {
		t.Fatal("churn at 0% churned")
	}
}

func TestPoissonMean(t *testing.T) {
	g := testGenerator(t, LoadConfig{Series: 100})
	r := g.units[0].rng
	for _, lambda := range []float64{0.05, 3, 29, 600, 400000} {
		t.Run(strconv.FormatFloat(lambda, 'g', -1, 64), func(t *testing.T) {
			const n = 20000
			sum := 0.0
			for range n {
				v := poisson(r, lambda)
				if v < 0 || v != math.Trunc(v) {
					t.Fatalf("poisson(%g) = %g: want a non-negative integer", lambda, v)
				}
				sum += v
			}
			mean := sum / n
			// Five standard errors of the mean.
			if tol := 5 * math.Sqrt(lambda/n); math.Abs(mean-lambda) > tol {
				t.Fatalf("mean %g, want %g ± %g", mean, lambda, tol)
			}
		})
	}
}

func TestReflect(t *testing.T) {
	for _, tc := range []struct{ v, lo, hi, want float64 }{
		{5, 0, 10, 5}, {-2, 0, 10, 2}, {12, 0, 10, 8}, {25, 0, 10, 5}, {7, 3, 3, 3},
	} {
		if got := reflectInto(tc.v, tc.lo, tc.hi); got != tc.want {
			t.Errorf("reflectInto(%g, %g, %g) = %g, want %g", tc.v, tc.lo, tc.hi, got, tc.want)
		}
	}
}
