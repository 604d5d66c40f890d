package export_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/export"
	"github.com/strata-dev/strata/tiers"
)

const (
	minMs  = int64(60_000)
	hourMs = 60 * minMs
	dayMs  = 24 * hourMs
)

// t0 is a Monday, 2026-01-05T00:00Z.
var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC).UnixMilli()

type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Copy() chunks.Sample           { return s }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }

type series struct {
	lbls    labels.Labels
	samples []sample
}

// knownWorkload is days of 15 s samples from t0: GPU utilisation gauges on
// two hosts of two GPU models, vLLM generation-token counters with resets
// (one exactly at a day boundary), and a TTFT classic histogram.
func knownWorkload(days int) []series {
	const step = 15_000
	end := t0 + int64(days)*dayMs
	rng := rand.New(rand.NewPCG(7, 14))
	var out []series
	for h, model := range []string{"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"} {
		host := fmt.Sprintf("gpu-node-%d", h)
		for g := range 2 {
			s := series{lbls: labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", host, "gpu", fmt.Sprint(g), "modelName", model)}
			for t := t0; t < end; t += step {
				v := math.Round(50 + 40*math.Sin(2*math.Pi*float64(t%dayMs)/float64(dayMs)+float64(g)) + 5*rng.Float64())
				s.samples = append(s.samples, sample{t, v})
			}
			out = append(out, s)
		}
	}
	for i, model := range []string{"llama", "qwen"} {
		s := series{lbls: labels.FromStrings("__name__", "vllm:generation_tokens_total", "instance", fmt.Sprintf("gpu-node-%d:8000", i), "model_name", model)}
		v := 0.0
		for t := t0; t < end; t += step {
			if t == t0+dayMs || t == t0+dayMs+5*hourMs+30*minMs+15_000 {
				v = 0 // a restart exactly at a day boundary, and one inside a day
			}
			v += float64(200 + rng.IntN(100*(i+1)))
			s.samples = append(s.samples, sample{t, v})
		}
		out = append(out, s)
	}
	les := []string{"0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"}
	bounds := []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, math.Inf(1)}
	for i, model := range []string{"llama", "qwen"} {
		hs := make([]series, len(les))
		for j, le := range les {
			hs[j].lbls = labels.FromStrings("__name__", "vllm:time_to_first_token_seconds_bucket", "instance", fmt.Sprintf("gpu-node-%d:8000", i), "le", le, "model_name", model)
		}
		counts := make([]float64, len(les))
		for t := t0; t < end; t += step {
			for range rng.IntN(6) {
				lat := rng.ExpFloat64() * (0.1 + 0.05*float64(i)) * (1 + 0.5*math.Sin(2*math.Pi*float64(t%dayMs)/float64(dayMs)))
				for j, b := range bounds {
					if lat <= b {
						counts[j]++
					}
				}
			}
			for j := range les {
				hs[j].samples = append(hs[j].samples, sample{t, counts[j]})
			}
		}
		out = append(out, hs...)
	}
	return out
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var catalogue = func() *dcgmbridge.Catalogue {
	c, err := dcgmbridge.NewCatalogue()
	if err != nil {
		panic(err)
	}
	return c
}()

// testTiers holds a workload's minute windows for the hours in
// [minuteFrom, end) and its hour windows for every day, as the pipeline
// would have written them.
type testTiers struct {
	minute, hour *tiers.Rollup
	end          int64
}

func buildTiers(t testing.TB, ss []series, days int, minuteFrom int64) *testTiers {
	t.Helper()
	end := t0 + int64(days)*dayMs
	open := func(cfg tiers.RollupConfig) *tiers.Rollup {
		r, err := tiers.OpenRollup(cfg, quietLogger(), prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	tt := &testTiers{minute: open(tiers.DefaultMinuteConfig(t.TempDir())), hour: open(tiers.DefaultHourConfig(t.TempDir())), end: end}
	kindOf := downsample.GaugesByName(catalogue.IsGauge)
	minutePart := map[int64][]tiers.SeriesWindows{}
	hourPart := map[int64][]tiers.SeriesWindows{}
	add := func(parts map[int64][]tiers.SeriesWindows, p int64, l labels.Labels, w tiers.Window) {
		ps := parts[p]
		if len(ps) == 0 || !labels.Equal(ps[len(ps)-1].Labels, l) {
			ps = append(ps, tiers.SeriesWindows{Labels: l})
		}
		ps[len(ps)-1].Windows = append(ps[len(ps)-1].Windows, w)
		parts[p] = ps
	}
	for _, s := range ss {
		cs := make([]chunks.Sample, len(s.samples))
		for i, smp := range s.samples {
			cs[i] = smp
		}
		kind := kindOf.Of(s.lbls)
		mws, _, err := downsample.AppendWindows(nil, storage.NewListSeries(s.lbls, cs).Iterator(nil), downsample.MinuteRes, t0, end, kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range mws {
			if w.Start >= minuteFrom {
				add(minutePart, w.Start-w.Start%hourMs, s.lbls, w)
			}
		}
		for _, w := range downsample.Coarsen(nil, mws, downsample.HourRes, kind) {
			add(hourPart, w.Start-w.Start%dayMs, s.lbls, w)
		}
	}
	for p, sws := range minutePart {
		if err := tt.minute.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
	for p, sws := range hourPart {
		if err := tt.hour.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
	return tt
}

func newEngine() *promql.Engine {
	return promql.NewEngine(promql.EngineOpts{
		Logger: quietLogger(), MaxSamples: 50_000_000, Timeout: time.Minute,
		LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true,
	})
}

func (tt *testTiers) exporter() *export.Exporter {
	return export.New(export.Config{
		Minute: tt.minute, Hour: tt.hour,
		Typing:    export.Typing{Catalogue: catalogue.TypeOf},
		Engine:    newEngine(),
		Queryable: tiers.NewStitched(nil, tt.minute, tt.hour),
	})
}

// table is an export held in memory, for tests.
type table struct {
	cols []export.Column
	rows [][]export.Cell
}

func (tb *table) WriteRow(r []export.Cell) error {
	tb.rows = append(tb.rows, slices.Clone(r))
	return nil
}
func (tb *table) Close() error { return nil }

func (tb *table) col(t testing.TB, name string) int {
	t.Helper()
	i := slices.IndexFunc(tb.cols, func(c export.Column) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no column %s in %v", name, tb.cols)
	}
	return i
}

func runExport(t testing.TB, e *export.Exporter, req export.Request) *table {
	t.Helper()
	p, err := e.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	tb := &table{cols: p.Columns()}
	if err := p.Run(context.Background(), tb, nil); err != nil {
		t.Fatal(err)
	}
	return tb
}

// instant evaluates qs at ts over q and returns the values by the labels'
// string form.
func instant(t testing.TB, eng *promql.Engine, q storage.Queryable, qs string, ts int64) map[string]float64 {
	t.Helper()
	qry, err := eng.NewInstantQuery(context.Background(), q, nil, qs, time.UnixMilli(ts))
	if err != nil {
		t.Fatal(err)
	}
	defer qry.Close()
	res := qry.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", qs, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, s := range v {
		out[s.Metric.String()] = s.F
	}
	return out
}
