// Package diagtest builds the data the diagnosis engine's tests and
// benchmarks run on: the simulator's history imported into a fresh minute
// tier exactly as `strata backfill` imports old history. It is for tests
// (issue 12's benchmark builds its cases with it too).
package diagtest

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/backfill"
	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/tiers"
)

// Start is the simulator's default start (Monday 2026-01-05, 00:00 UTC).
var Start = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// QuietLogger discards everything.
func QuietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// SmallCluster is one node of four GPUs (one vLLM instance each), seeded,
// starting at Start, with the given faults.
func SmallCluster(faults ...sim.FaultSpec) sim.Config {
	return sim.Config{Seed: 11, Nodes: 1, GPUsPerNode: 4, Start: Start, Faults: faults}
}

// GPU returns a pointer to i, for sim.FaultSpec.GPU.
func GPU(i int) *int { return &i }

// OpenTiers opens (creating) the minute and hour tiers under dir; they are
// closed when the test ends.
func OpenTiers(tb testing.TB, dir string) (minute, hour *tiers.Rollup) {
	tb.Helper()
	var err error
	minute, err = tiers.OpenRollup(tiers.DefaultMinuteConfig(filepath.Join(dir, "minute")), QuietLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = minute.Close() })
	hour, err = tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), QuietLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = hour.Close() })
	return minute, hour
}

// Import runs the simulator c over [from, to) at 15 s steps and imports it
// with the backfill package (no raw tier: every sample goes to minute
// partitions, as history imported by `strata backfill` does). Consecutive
// calls must use hour-aligned bounds: a minute partition, once written, is
// final, so samples at `to` itself are left to the next call.
func Import(tb testing.TB, c *sim.Cluster, from, to time.Time, minute, hour *tiers.Rollup) {
	tb.Helper()
	idx := map[uint64]int{}
	var input []backfill.Series
	end := to.UnixMilli()
	err := c.Backfill(from, to, 15*time.Second, func(l labels.Labels, ts int64, v float64) error {
		if ts >= end {
			return nil
		}
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
		tb.Fatal(err)
	}
	bcfg := backfill.DefaultConfig()
	bcfg.Now = func() time.Time { return to }
	if _, err := backfill.Run(context.Background(), bcfg, input, backfill.Targets{Minute: minute, Hour: hour}, nil); err != nil {
		tb.Fatal(err)
	}
}

// SimHistory simulates cfg from its start to `to` into a fresh data
// directory and returns its minute tier.
func SimHistory(tb testing.TB, cfg sim.Config, to time.Time) *tiers.Rollup {
	tb.Helper()
	c, err := sim.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	minute, hour := OpenTiers(tb, tb.TempDir())
	Import(tb, c, cfg.Start, to, minute, hour)
	return minute
}
