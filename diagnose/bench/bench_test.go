package bench

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/strata-dev/strata/diagnose"
)

// floors are the short form's minimum scores, set from its measured
// figures (docs/diagnosis-bench.md, "CI floors") with room for one fault:
// a change that loses more than that fails the build.
var floors = map[string]struct {
	detection, causeTop1, causeTop3, entityTop1 float64
	ttdMean, falsePerDay                        float64
	falseDecoy                                  int
}{
	// measured: 12/12 detected and named on the right entity, TTD mean 275 s
	SplitTuning: {detection: 11.0 / 12, causeTop1: 10.0 / 12, causeTop3: 11.0 / 12, entityTop1: 10.0 / 12, ttdMean: 330, falsePerDay: 1, falseDecoy: 1},
	// measured: 9/9 detected and named on the right entity, TTD mean 240 s
	SplitHeldout: {detection: 8.0 / 9, causeTop1: 7.0 / 9, causeTop3: 8.0 / 9, entityTop1: 7.0 / 9, ttdMean: 300, falsePerDay: 1, falseDecoy: 1},
}

// TestShortBenchmark runs the short form of both splits end to end
// (simulate, stream into fresh tiers, replay, score, report) and fails when
// a score falls below its floor.
func TestShortBenchmark(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates and replays about 3 days of a 4-GPU node")
	}
	r, err := Run(context.Background(), Options{Splits: []string{SplitTuning, SplitHeldout}, Short: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	paths, err := r.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 6 {
		t.Errorf("wrote %v, want the JSON, the markdown and two charts per split", paths)
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, JSONReportFile))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Splits) != 2 {
		t.Fatalf("report.json: %v", err)
	}
	if r.Feedback == nil {
		t.Error("no feedback experiment although both splits ran")
	}
	for _, s := range r.Splits {
		f, c := floors[s.Name], s.Scores
		t.Logf("%s: %d faults, detected %.3f, cause top-1 %.3f top-3 %.3f, entity top-1 %.3f, TTD mean %.0f s p95 %.0f s, false/day %.2f, decoy %d, ECE %.3f",
			s.Name, c.Faults, c.DetectionRate, c.CauseAcc1, c.CauseAcc3, c.EntityAcc1, c.TTDMean, c.TTDP95, c.FalsePerDay, c.FalseDecoy, c.ECE)
		if c.Faults == 0 {
			t.Fatalf("%s: no faults scored", s.Name)
		}
		check := func(what string, got, floor float64, higherIsBetter bool) {
			if (higherIsBetter && got < floor-1e-9) || (!higherIsBetter && got > floor+1e-9) {
				t.Errorf("%s: %s %.3f is beyond its floor %.3f", s.Name, what, got, floor)
			}
		}
		check("detection rate", c.DetectionRate, f.detection, true)
		check("cause top-1", c.CauseAcc1, f.causeTop1, true)
		check("cause top-3", c.CauseAcc3, f.causeTop3, true)
		check("entity top-1", c.EntityAcc1, f.entityTop1, true)
		check("mean time to detect (s)", c.TTDMean, f.ttdMean, false)
		check("false diagnoses per fault-free day", c.FalsePerDay, f.falsePerDay, false)
		check("decoy-caused false diagnoses", float64(c.FalseDecoy), float64(f.falseDecoy), false)
	}
}

// TestReuse: a second run over the same data directory reuses the finished
// generation of the same scenario and scores the same; a changed scenario
// is generated afresh.
func TestReuse(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates and replays a small scenario twice")
	}
	s, err := ParseSplit([]byte(`name: x
scenarios:
  - name: s
    cluster: {seed: 3, nodes: 1, gpus_per_node: 2, start: 2026-01-05T00:00:00Z}
    history: 2h
    history_step: 15s
    period: 1h
    step: 5s
    incidents:
      - {kind: power_cap, node: 0, gpu: 1, at: 10m, duration: 15m}
`))
	if err != nil {
		t.Fatal(err)
	}
	sc := s.Scenarios[0]
	dir := t.TempDir()
	ctx := context.Background()
	run := func(sc Scenario) (ScenarioReport, []FaultOutcome) {
		rep, outs, _, _, arc, err := runScenario(ctx, diagnose.DefaultConfig(), sc, dir, true, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := arc.Close(); err != nil {
			t.Fatal(err)
		}
		return rep, outs
	}
	r1, o1 := run(sc)
	r2, o2 := run(sc)
	if r1.Reused || !r2.Reused || r2.Samples != 0 {
		t.Fatalf("reused %v then %v (%d samples)", r1.Reused, r2.Reused, r2.Samples)
	}
	if len(o1) != 1 || !reflect.DeepEqual(o1, o2) {
		t.Fatalf("outcomes differ:\n%+v\n%+v", o1, o2)
	}
	sc.Incidents[0].Duration = Duration(20 * time.Minute)
	if r3, _ := run(sc); r3.Reused {
		t.Fatal("a changed scenario reused the old data")
	}
}
