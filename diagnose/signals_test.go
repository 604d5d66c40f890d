package diagnose

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-dev/strata/dcgmbridge/sim"
)

// TestMinuteMatchesEngine: the signals group evaluated as the canonical
// group is (a memo of shared subexpressions, aggregations of one selector
// in fused passes: evalSignals), and the and-chain rules with their
// operands narrowed to the first one's series (andchain.go), record the
// same series with the same values, to the bit, as the PromQL engine
// evaluating each rule's query whole, minute after minute over a fleet
// with faults; so, through them, do the baselines and the default pack's
// other groups (the whole scratch store is compared, and the anomaly rules
// must have recorded something).
func TestMinuteMatchesEngine(t *testing.T) {
	cfg := sim.Config{Seed: 7, Start: simStart, Nodes: 1, GPUsPerNode: 4}
	end := simStart.Add(30 * time.Minute)
	cfg.Faults = sim.GenerateFaults(cfg, simStart.Add(10*time.Minute), end, 4, 3)
	minute := simHistory(t, cfg, end)
	engine := func() *Engine {
		e, err := New(modeConfig(BaselineSeasonal), Options{Minute: minute, Registerer: prometheus.NewRegistry(), Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	fused, plain := engine(), engine()
	plain.evalSignals, plain.andPlans = plain.evalGroup, nil
	if len(fused.andPlans) == 0 {
		t.Fatal("no and-chain rule in the default pack")
	}
	ctx := context.Background()
	compared, anomalies := 0, 0
	for at := simStart.Add(time.Minute); at.Before(end.Add(-time.Minute)); at = at.Add(time.Minute) {
		for _, e := range []*Engine{fused, plain} {
			if err := e.EvalMinute(ctx, at); err != nil {
				t.Fatal(err)
			}
		}
		compared += sameScratch(t, at, fused.scratch, plain.scratch)
		anomalies = max(anomalies, len(fused.scratch.byName["strata:anomaly:high"])+len(fused.scratch.byName["strata:anomaly:low"]))
	}
	if compared < 10_000 {
		t.Fatalf("%d samples compared: the fleet records too little to compare", compared)
	}
	if anomalies < 2 {
		t.Fatalf("the anomaly rules recorded %d series: the fleet has too few anomalies to compare", anomalies)
	}
}

// sameScratch fails the test unless a and b hold the same series with the
// same samples, to the bit; it returns how many samples it compared.
func sameScratch(t *testing.T, at time.Time, a, b *scratch) int {
	t.Helper()
	n := 0
	if sa, _ := a.samples(); func() bool { sb, _ := b.samples(); return sa != sb }() {
		sb, _ := b.samples()
		t.Fatalf("%s: %d series, want %d", at.Format(time.TimeOnly), sa, sb)
	}
	for _, list := range a.byName {
		for _, ea := range list {
			eb := b.find(ea.lbls.Hash(), ea.lbls)
			if eb == nil {
				t.Fatalf("%s: %s is not in the engine's store", at.Format(time.TimeOnly), ea.lbls)
			}
			if len(ea.vs) != len(eb.vs) {
				t.Fatalf("%s: %s: %d samples, want %d", at.Format(time.TimeOnly), ea.lbls, len(ea.vs), len(eb.vs))
			}
			tsa, tsb := a.times(ea), b.times(eb)
			for i := range ea.vs {
				if ea.at(tsa, i) != eb.at(tsb, i) || math.Float64bits(ea.vs[i]) != math.Float64bits(eb.vs[i]) {
					t.Fatalf("%s: %s: sample %d at %d is %v, want %v at %d", at.Format(time.TimeOnly), ea.lbls, i, ea.at(tsa, i), ea.vs[i], eb.vs[i], eb.at(tsb, i))
				}
			}
			n += len(ea.vs)
		}
	}
	return n
}
