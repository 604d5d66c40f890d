package diagnose

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/strata-dev/strata/dcgmbridge/sim"
)

// faultAt is when the tests' faults start: 02:30 UTC, near the night trough,
// with enough history before it for every rule's ranges.
const faultAt = 2*time.Hour + 30*time.Minute

// replaySim simulates the small cluster with the given faults until end,
// imports it and replays [from, end].
func replaySim(t *testing.T, from, end time.Time, faults ...sim.FaultSpec) ([]Diagnosis, sim.Fault) {
	t.Helper()
	cfg := smallCluster(faults...)
	minute := simHistory(t, cfg, end)
	c, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := Replay(context.Background(), DefaultConfig(), Options{Minute: minute, Logger: quietLogger()}, from, end)
	if err != nil {
		t.Fatal(err)
	}
	var gt sim.Fault
	if g := c.GroundTruth(); len(g) > 0 {
		gt = g[0]
	}
	return ds, gt
}

func describe(ds []Diagnosis) string {
	s := ""
	for _, d := range ds {
		end := "open"
		if d.End != nil {
			end = d.End.Format("15:04")
		}
		s += fmt.Sprintf("\n  %s %s %s-%s %+v", d.ID, d.Cause, d.Start.Format("15:04"), end, d.Entities)
	}
	return s
}

// onEntity reports whether d names the ground truth's target.
func onEntity(d Diagnosis, gt sim.Fault) bool {
	e := d.Entities
	switch gt.Kind {
	case sim.KindNetworkDelay:
		return e.Host == gt.Target.Node && e.Pod == ""
	case sim.KindPowerCap, sim.KindThermalThrottle, sim.KindXIDGPULost:
		return e.UUID == gt.Target.UUID
	default:
		return e.Pod == gt.Target.Pod && e.Namespace == gt.Target.Namespace
	}
}

// TestFaultsAreDiagnosed: for every fault kind of the simulator, the fault,
// imported as history and replayed, yields exactly one diagnosis, of that
// cause, on the right entity, starting within 3 minutes of the onset and
// ending after the fault ends.
func TestFaultsAreDiagnosed(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates and replays 13 scenarios")
	}
	for _, kind := range Causes {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			onset := simStart.Add(faultAt)
			dur := 20 * time.Minute
			ds, gt := replaySim(t, onset.Add(-20*time.Minute), onset.Add(dur+25*time.Minute),
				sim.FaultSpec{Kind: sim.Kind(kind), Node: 0, GPU: gpu(1), At: faultAt, Duration: dur})
			if len(ds) != 1 {
				t.Fatalf("%d diagnoses, want exactly one %s:%s", len(ds), kind, describe(ds))
			}
			d := ds[0]
			if d.Cause != kind {
				t.Fatalf("diagnosed %s, want %s:%s", d.Cause, kind, describe(ds))
			}
			if !onEntity(d, gt) {
				t.Errorf("diagnosis on %+v, fault on %+v", d.Entities, gt.Target)
			}
			if d.Start.Before(onset) || d.Start.After(onset.Add(3*time.Minute)) {
				t.Errorf("diagnosis starts at %s, onset %s: not within 3 minutes", d.Start.Format(time.RFC3339), onset.Format(time.RFC3339))
			}
			if d.End != nil && !d.End.After(gt.End) {
				t.Errorf("diagnosis ends at %s, before the fault ends (%s)", d.End.Format(time.RFC3339), gt.End.Format(time.RFC3339))
			}
			if d.Confidence <= 0 || d.Confidence > 1 || len(d.Evidence) == 0 || len(d.Actions) == 0 || d.Candidates[0].Cause != kind {
				t.Errorf("incomplete diagnosis: confidence %v, %d evidence, %d actions, candidates %v", d.Confidence, len(d.Evidence), len(d.Actions), d.Candidates)
			}
			for _, ev := range d.Evidence {
				if ev.Value == nil && ev.Threshold != nil {
					t.Errorf("evidence %s has no value (query %s)", ev.Metric, ev.Query)
				}
			}
		})
	}
}

// TestDecoysAreNotDiagnosed: a benign spike, a deploy, a scrape gap and an
// idle replica produce no diagnosis at all.
func TestDecoysAreNotDiagnosed(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates and replays 4 scenarios")
	}
	decoys := map[sim.Kind]time.Duration{
		sim.KindBenignSpike: 4 * time.Minute, sim.KindDeploy: 45 * time.Second,
		sim.KindScrapeGap: 3 * time.Minute, sim.KindIdleReplica: time.Hour,
	}
	for kind, dur := range decoys {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			onset := simStart.Add(faultAt)
			ds, _ := replaySim(t, onset.Add(-20*time.Minute), onset.Add(dur+25*time.Minute),
				sim.FaultSpec{Kind: kind, Node: 0, GPU: gpu(1), At: faultAt, Duration: dur})
			if len(ds) != 0 {
				t.Fatalf("decoy %s diagnosed:%s", kind, describe(ds))
			}
		})
	}
}

// TestHealthyNightIsQuiet: a fault-free night, through the 04:00 trough
// where a healthy GPU's SM activity dips to about 0.55, yields nothing
// (the under-batched rule must not fire).
func TestHealthyNightIsQuiet(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates and replays six hours")
	}
	ds, _ := replaySim(t, simStart.Add(2*time.Hour+15*time.Minute), simStart.Add(6*time.Hour))
	if len(ds) != 0 {
		t.Fatalf("a healthy night was diagnosed:%s", describe(ds))
	}
}

// TestOneDayOfHistory: a cluster installed the day before (one day of
// history, so the baselines come from the same hour yesterday) diagnoses
// faults through its second night's trough, and nothing else.
func TestOneDayOfHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 29 hours")
	}
	day := 24 * time.Hour
	faults := []sim.FaultSpec{
		{Kind: sim.KindUnderBatched, Node: 0, GPU: gpu(1), At: day + faultAt, Duration: 20 * time.Minute},
		{Kind: sim.KindKVCacheStorm, Node: 0, GPU: gpu(2), At: day + faultAt + 10*time.Minute, Duration: 20 * time.Minute},
		{Kind: sim.KindPowerCap, Node: 0, GPU: gpu(3), At: day + faultAt + 50*time.Minute, Duration: 20 * time.Minute},
	}
	cfg := smallCluster(faults...)
	end := simStart.Add(day + 5*time.Hour)
	minute := simHistory(t, cfg, end)
	c, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := Replay(context.Background(), DefaultConfig(), Options{Minute: minute, Logger: quietLogger()}, simStart.Add(day+time.Hour), end)
	if err != nil {
		t.Fatal(err)
	}
	gt := c.GroundTruth()
	if len(ds) != len(gt) {
		t.Fatalf("%d diagnoses for %d faults:%s", len(ds), len(gt), describe(ds))
	}
	for _, f := range gt {
		found := false
		for _, d := range ds {
			if d.Cause != string(f.Kind) || !onEntity(d, f) {
				continue
			}
			found = true
			if late := d.Start.Sub(f.Start); late > 3*time.Minute || late < -2*time.Minute {
				t.Errorf("%s diagnosed %s after its onset", f.Kind, late)
			}
			src := ""
			for _, ev := range d.Evidence {
				if ev.BaselineSource != "" {
					src = ev.BaselineSource
					break
				}
			}
			if src != "same_hour_recent_days" {
				t.Errorf("%s: evidence baseline source %q, want the same hour of the last day", f.Kind, src)
			}
		}
		if !found {
			t.Errorf("%s on %s not diagnosed:%s", f.Kind, f.Target.Pod, describe(ds))
		}
	}
}
