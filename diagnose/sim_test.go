package diagnose

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/backfill"
	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/tiers"
)

// simStart is the simulator's default start (a Monday, 00:00 UTC).
var simStart = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// smallCluster is the tests' cluster: one node of four GPUs, one vLLM
// instance each, all telemetry fields, seeded.
func smallCluster(faults ...sim.FaultSpec) sim.Config {
	return sim.Config{Seed: 11, Nodes: 1, GPUsPerNode: 4, Start: simStart, Faults: faults}
}

func openTiers(t testing.TB, dir string) (minute, hour *tiers.Rollup) {
	t.Helper()
	var err error
	minute, err = tiers.OpenRollup(tiers.DefaultMinuteConfig(dir+"/minute"), quietLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = minute.Close() })
	hour, err = tiers.OpenRollup(tiers.DefaultHourConfig(dir+"/hour"), quietLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hour.Close() })
	return minute, hour
}

// simHistory runs the simulator over [cfg.Start, to) at 15 s steps and
// imports it with the backfill package (no raw tier: every sample goes to
// minute partitions, as history imported by `strata backfill` does) into a
// fresh data directory, and returns its minute tier.
func simHistory(t testing.TB, cfg sim.Config, to time.Time) *tiers.Rollup {
	t.Helper()
	c, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	idx := map[uint64]int{}
	var input []backfill.Series
	err = c.Backfill(cfg.Start, to, 15*time.Second, func(l labels.Labels, ts int64, v float64) error {
		h := l.Hash()
		i, ok := idx[h]
		if !ok {
			i = len(input)
			idx[h] = i
			input = append(input, backfill.Series{Labels: l})
		}
		input[i].Samples = append(input[i].Samples, backfill.Sample{T: ts, V: v})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	minute, hour := openTiers(t, t.TempDir())
	bcfg := backfill.DefaultConfig()
	bcfg.Now = func() time.Time { return to }
	if _, err := backfill.Run(context.Background(), bcfg, input, backfill.Targets{Minute: minute, Hour: hour}, nil); err != nil {
		t.Fatal(err)
	}
	return minute
}

func gpu(i int) *int { return &i }
