package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose"
)

// TestSplitsAreComplete: the committed splits load, and hold what the
// benchmark promises: at least 14 days of history for a 4 x 8 cluster, at
// least 50 incidents across every fault kind several times, every decoy
// kind, faults at once, the night trough and a weekend in the tuning split;
// a variant of every kind, and every variant, in the held-out split.
func TestSplitsAreComplete(t *testing.T) {
	tuning, err := LoadSplit(SplitTuning)
	if err != nil {
		t.Fatal(err)
	}
	main := tuning.Scenarios[0]
	if main.Cluster.Nodes*main.Cluster.GPUsPerNode != 32 || main.History.D() < 14*24*time.Hour {
		t.Errorf("tuning main: %d GPUs, %s of history", main.Cluster.Nodes*main.Cluster.GPUsPerNode, main.History.D())
	}
	kinds := map[sim.Kind]int{}
	faults, night, weekend, pairs := 0, 0, 0, 0
	for _, in := range main.Incidents {
		kinds[in.Kind]++
		if !isDecoy(in.Kind) {
			faults++
			at := main.Start().Add(in.At.D())
			night += b2i(at.Hour() >= 2 && at.Hour() < 6)
			weekend += b2i(at.Weekday() == time.Saturday || at.Weekday() == time.Sunday)
		}
		pairs += b2i(in.WithPrevious)
	}
	if faults < 50 {
		t.Errorf("tuning: %d faults, want at least 50", faults)
	}
	for _, c := range diagnose.Causes {
		if kinds[sim.Kind(c)] < 3 {
			t.Errorf("tuning: %d incidents of %s, want several", kinds[sim.Kind(c)], c)
		}
	}
	for _, d := range []sim.Kind{sim.KindBenignSpike, sim.KindDeploy, sim.KindScrapeGap, sim.KindIdleReplica} {
		if kinds[d] == 0 {
			t.Errorf("tuning: no %s decoy", d)
		}
	}
	if night < 3 || weekend < 3 || pairs < 1 {
		t.Errorf("tuning: %d faults at night, %d at a weekend, %d related pairs", night, weekend, pairs)
	}

	held, err := LoadSplit(SplitHeldout)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(held.Purpose, "Never used for tuning") {
		t.Error("the held-out split does not say it is never used for tuning")
	}
	variantKinds := map[string]map[sim.Kind]bool{}
	allKinds := map[sim.Kind]bool{}
	for _, sc := range held.Scenarios {
		if sc.Cluster.Seed == main.Cluster.Seed {
			t.Errorf("held-out scenario %s reuses the tuning seed", sc.Name)
		}
		for _, in := range sc.Incidents {
			if in.Variant != "" {
				if variantKinds[in.Variant] == nil {
					variantKinds[in.Variant] = map[sim.Kind]bool{}
				}
				variantKinds[in.Variant][in.Kind] = true
				allKinds[in.Kind] = true
			}
		}
	}
	for _, v := range Variants {
		if len(variantKinds[v]) == 0 {
			t.Errorf("held-out: no %s incident", v)
		}
	}
	for _, c := range diagnose.Causes {
		if !allKinds[sim.Kind(c)] {
			t.Errorf("held-out: no variant of %s", c)
		}
	}
	for _, s := range []Split{tuning, held} {
		if len(s.Short) == 0 {
			t.Errorf("split %s has no short form", s.Name)
		}
	}
}

// TestSplitValidation: the checks the scoring relies on reject bad splits
// with a message naming the problem.
func TestSplitValidation(t *testing.T) {
	base := `name: x
scenarios:
  - name: s
    cluster: {seed: 1, nodes: 1, gpus_per_node: 4}
    history: 1d
    history_step: 15s
    period: 2h
    step: 1s
    incidents:
`
	cases := map[string]string{
		"too close":     "      - {kind: power_cap, node: 0, gpu: 1, at: 10m, duration: 10m}\n      - {kind: thermal_throttle, node: 0, gpu: 2, at: 30m, duration: 10m}\n",
		"after period":  "      - {kind: power_cap, node: 0, gpu: 1, at: 1h55m, duration: 10m}\n",
		"bad variant":   "      - {kind: power_cap, node: 0, gpu: 1, at: 10m, duration: 10m, variant: louder}\n",
		"unknown field": "      - {kind: power_cap, node: 0, gpu: 1, at: 10m, duration: 10m, colour: red}\n",
		"bad gpu":       "      - {kind: power_cap, node: 0, gpu: 9, at: 10m, duration: 10m}\n",
	}
	want := map[string]string{"too close": "less than 20m0s apart", "after period": "ends after the period", "bad variant": "unknown variant", "unknown field": "colour", "bad gpu": "out of range"}
	for name, inc := range cases {
		_, err := ParseSplit([]byte(base + inc))
		if err == nil || !strings.Contains(err.Error(), want[name]) {
			t.Errorf("%s: %v, want an error with %q", name, err, want[name])
		}
	}
	ok := base + "      - {kind: power_cap, node: 0, gpu: 1, at: 10m, duration: 10m}\n      - {kind: request_queue_backlog, node: 0, gpu: 1, at: 15m, duration: 10m, with_previous: true}\n"
	if _, err := ParseSplit([]byte(ok)); err != nil {
		t.Errorf("a related pair was refused: %v", err)
	}
	s, _ := ParseSplit([]byte(base))
	short := s.Scenarios[0].withHistory(3 * time.Hour)
	if !short.Start().Equal(s.Scenarios[0].Start()) || short.History.D() != 3*time.Hour {
		t.Errorf("a shortened history moved the incident period: %s, was %s", short.Start(), s.Scenarios[0].Start())
	}
	if got := s.Scenarios[0].plan(); len(got) != 2 || !slices.IsSortedFunc(got, func(a, b span) int { return a.from.Compare(b.from) }) {
		t.Errorf("plan %+v", got)
	}
}
