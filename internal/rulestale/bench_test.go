package rulestale

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
)

// headStore keeps each series' labels as first appended (a TSDB head keeps
// the label set that created the series); samples are dropped.
type headStore struct{ series map[uint64]labels.Labels }

func (h *headStore) AppenderV2(context.Context) storage.AppenderV2 { return headApp{h} }

type headApp struct{ h *headStore }

func (a headApp) Append(_ storage.SeriesRef, l labels.Labels, _, _ int64, _ float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	k := l.Hash()
	if _, ok := a.h.series[k]; !ok {
		a.h.series[k] = l
	}
	return storage.SeriesRef(k), nil
}
func (headApp) Commit() error   { return nil }
func (headApp) Rollback() error { return nil }

// BenchmarkStaleState evaluates recording rules (output labels like the
// canonical rules' outputs, 1% of the series replaced at each evaluation)
// with Prometheus' own state and with a Tracker. It reports
// the heap the group's state keeps between evaluations (state-B/series:
// with the group, its rules and the Tracker dropped, the storage and the
// inputs kept) and what an evaluation costs.
func BenchmarkStaleState(b *testing.B) {
	// One rule with 50,000 output series (the canonical group's biggest
	// outputs are the fleet's GPUs), and 40 rules with 25 each (the
	// diagnosis engine's and an operator's small rules: the Tracker's cost
	// per rule).
	for _, shape := range []struct {
		name          string
		rules, series int
	}{{"50000-series", 1, 50000}, {"40x25-series", 40, 25}} {
		for _, tracked := range []bool{false, true} {
			name := shape.name + "/prometheus"
			if tracked {
				name = shape.name + "/tracker"
			}
			b.Run(name, func(b *testing.B) { benchStaleState(b, tracked, shape.rules, shape.series) })
		}
	}
}

func benchStaleState(b *testing.B, tracked bool, nRules, n int) {
	in := make([]labels.Labels, n+n/100*1000)
	for i := range in {
		in[i] = labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", fmt.Sprintf("node-%04d", i/8),
			"UUID", fmt.Sprintf("GPU-%08x-1c2d-4e5f-8a9b-%012x", i, i*7919), "cluster", "prod-a", "gpu", fmt.Sprint(i%8),
			"instance", fmt.Sprintf("10.1.%d.%d:9400", i/2048%256, i/8%256), "job", "dcgm", "modelName", "NVIDIA H100 80GB HBM3")
	}
	step := 0
	query := func(_ context.Context, _ string, t time.Time) (promql.Vector, error) {
		vec := make(promql.Vector, n)
		off := step * n / 100
		for i := range vec {
			vec[i] = promql.Sample{T: t.UnixMilli(), F: float64(i), Metric: in[(off+i)%len(in)]}
		}
		return vec, nil
	}
	st := &headStore{series: map[uint64]labels.Labels{}}
	opts := &rules.ManagerOptions{QueryFunc: query, AppendableV2: st, Context: context.Background()}
	iter := rules.DefaultEvalIterationFunc
	if tracked {
		tr := New()
		opts.QueryFunc, opts.AppendableV2, opts.Metrics = tr.QueryFunc(query), tr.Appendable(st), tr.Metrics(nil)
		iter = tr.EvalIterationFunc(nil)
	}
	var rs []rules.Rule
	for i := range nRules {
		rs = append(rs, rules.NewRecordingRule(fmt.Sprintf("gpu:util:avg%d", i), mustParse(b, "x"), labels.FromStrings("source", "canonical")))
	}
	g := rules.NewGroup(rules.GroupOptions{Name: "g", File: "f", Interval: time.Minute, Opts: opts, Rules: rs})
	ctx := context.Background()
	eval := func() {
		step++
		iter(ctx, g, time.Unix(int64(step)*15, 0))
		if err := g.Rules()[0].LastError(); err != nil {
			b.Fatal(err)
		}
	}
	eval()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		eval()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
	withGroup := heapInUse()
	runtime.KeepAlive(g)
	g, opts, iter = nil, nil, nil
	without := heapInUse()
	runtime.KeepAlive(st)
	runtime.KeepAlive(in)
	b.ReportMetric(float64(withGroup-without)/float64(n*nRules), "state-B/series")
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// cpuTime is the user and system CPU time the process has used (the
// machine is shared: CPU time, not wall time, is the figure).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
