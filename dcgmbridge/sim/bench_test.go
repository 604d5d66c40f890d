package sim

import (
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// BenchmarkStepHour measures one simulated hour of the default 4 x 8 cluster
// at 1 s ticks; a week is 168 of these.
func BenchmarkStepHour(b *testing.B) {
	b.ReportAllocs()
	c, err := New(Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	h := 0
	for b.Loop() {
		h++
		c.Step(c.Config().Start.Add(time.Duration(h) * time.Hour))
	}
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(h)*168, "s/simweek")
}

// BenchmarkBackfillHour15s measures Backfill of one hour at a 15 s step for
// the default cluster, counting emitted samples.
func BenchmarkBackfillHour15s(b *testing.B) {
	b.ReportAllocs()
	c, err := New(Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	from := c.Config().Start
	n, h := 0, 0
	for b.Loop() {
		to := from.Add(time.Hour - 15*time.Second)
		if err := c.Backfill(from, to, 15*time.Second, func(_ labels.Labels, _ int64, _ float64) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		from = to.Add(15 * time.Second)
		h++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(h)*168, "s/simweek")
}
