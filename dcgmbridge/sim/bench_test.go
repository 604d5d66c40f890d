package sim

import (
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// cpuSeconds is this process' user+system CPU time. The benchmarks report it
// per simulated week next to wall time, because the build machines are
// shared and wall time there mostly measures the neighbours.
func cpuSeconds(tb testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkStepHour measures one simulated hour of the default 4 x 8 cluster
// (32 vLLM instances) at 1 s ticks; a week is 168 of these.
func BenchmarkStepHour(b *testing.B) {
	b.ReportAllocs()
	c, err := New(Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	h := 0
	cpu0 := cpuSeconds(b)
	for b.Loop() {
		h++
		c.Step(c.Config().Start.Add(time.Duration(h) * time.Hour))
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(h)*168, "wall-s/simweek")
	b.ReportMetric((cpuSeconds(b)-cpu0)/float64(h)*168, "cpu-s/simweek")
}

// BenchmarkBackfillHour15s measures Backfill of one hour at a 15 s step for
// the default cluster (model at 1 s ticks), counting emitted samples.
func BenchmarkBackfillHour15s(b *testing.B) {
	b.ReportAllocs()
	c, err := New(Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	from := c.Config().Start
	n, h := 0, 0
	cpu0 := cpuSeconds(b)
	for b.Loop() {
		to := from.Add(time.Hour - 15*time.Second)
		if err := c.Backfill(from, to, 15*time.Second, func(_ labels.Labels, _ int64, _ float64) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		from = to.Add(15 * time.Second)
		h++
	}
	cpu := cpuSeconds(b) - cpu0
	b.ReportMetric(float64(n)/cpu, "samples/cpu-s")
	b.ReportMetric(b.Elapsed().Seconds()/float64(h)*168, "wall-s/simweek")
	b.ReportMetric(cpu/float64(h)*168, "cpu-s/simweek")
}

// BenchmarkExposition measures rendering one vLLM /metrics page.
func BenchmarkExposition(b *testing.B) {
	b.ReportAllocs()
	c, err := New(Config{Nodes: 1, GPUsPerNode: 1, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	c.Step(c.Config().Start.Add(time.Hour))
	var sink countingWriter
	for b.Loop() {
		if err := c.WriteExposition(&sink, "/gpu-node-0/vllm/8000/metrics"); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(sink.n / int64(b.N))
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
