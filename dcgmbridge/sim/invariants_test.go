package sim

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// TestExpositionInvariants runs a small cluster through a random fault mix
// and checks, every 5 minutes of model time, what any Prometheus consumer
// relies on: buckets cumulative and monotonic, +Inf equal to _count, and
// counters never decreasing except across a process restart.
func TestExpositionInvariants(t *testing.T) {
	cfg := Config{Nodes: 1, GPUsPerNode: 2, Seed: 21, DCGMFields: "full"}
	from := cfg.Defaults().Start
	cfg.Faults = GenerateFaults(cfg, from, from.Add(6*time.Hour), 12, 3)
	c := mustNew(t, cfg)
	prev := map[string]float64{} // counter series -> last value
	restarts := func(at time.Time) bool {
		for _, f := range c.GroundTruth() {
			if (f.Kind == KindDeploy || f.Kind == KindXIDGPULost) && !f.Start.After(at) && f.End.Add(10*time.Minute).After(at) {
				return true
			}
		}
		return false
	}
	for step := 5 * time.Minute; step <= 6*time.Hour; step += 5 * time.Minute {
		now := from.Add(step)
		c.Step(now)
		for _, tg := range c.Targets() {
			var sb strings.Builder
			if err := c.WriteExposition(&sb, tg.Path); err != nil {
				continue // down or in a scrape gap
			}
			p := parseText(t, []byte(sb.String()), "text/plain")
			checkHistograms(t, p, now)
			for family, typ := range p.types {
				if typ != "counter" {
					continue
				}
				for _, l := range p.byName[family] {
					key := tg.Path + l.String()
					v := p.samples[l.String()]
					if v < 0 || math.IsNaN(v) {
						t.Errorf("%s at %s: counter value %v", key, now, v)
					}
					if old, ok := prev[key]; ok && v < old && !restarts(now) {
						t.Errorf("%s at %s: counter went %v -> %v without a restart", key, now, old, v)
					}
					prev[key] = v
				}
			}
		}
	}
}

func checkHistograms(t *testing.T, p parsed, now time.Time) {
	t.Helper()
	for family, typ := range p.types {
		if typ != "histogram" {
			continue
		}
		// Group buckets by their labels without le.
		type series struct {
			les  []float64
			vals []float64
		}
		groups := map[string]*series{}
		for _, l := range p.byName[family+"_bucket"] {
			le, err := strconv.ParseFloat(l.Get(labels.BucketLabel), 64)
			if err != nil {
				t.Fatalf("%s: le %q", family, l.Get(labels.BucketLabel))
			}
			key := labels.NewBuilder(l).Del(labels.BucketLabel, model.MetricNameLabel).Labels().String()
			g := groups[key]
			if g == nil {
				g = &series{}
				groups[key] = g
			}
			g.les = append(g.les, le)
			g.vals = append(g.vals, p.samples[l.String()])
		}
		for key, g := range groups {
			for i := 1; i < len(g.vals); i++ {
				if g.les[i] <= g.les[i-1] || g.vals[i] < g.vals[i-1] {
					t.Errorf("%s%s at %s: bucket %v=%v after %v=%v", family, key, now, g.les[i], g.vals[i], g.les[i-1], g.vals[i-1])
				}
			}
			var count float64
			for _, l := range p.byName[family+"_count"] {
				if labels.NewBuilder(l).Del(model.MetricNameLabel).Labels().String() == key {
					count = p.samples[l.String()]
				}
			}
			if last := g.vals[len(g.vals)-1]; !math.IsInf(g.les[len(g.les)-1], 1) || last != count {
				t.Errorf("%s%s at %s: +Inf bucket %v, _count %v", family, key, now, last, count)
			}
		}
	}
}
