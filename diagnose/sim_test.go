package diagnose

import (
	"log/slog"
	"testing"
	"time"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose/diagtest"
	"github.com/strata-dev/strata/tiers"
)

var simStart = diagtest.Start

func quietLogger() *slog.Logger { return diagtest.QuietLogger() }

func smallCluster(faults ...sim.FaultSpec) sim.Config { return diagtest.SmallCluster(faults...) }

func openTiers(t testing.TB, dir string) (minute, hour *tiers.Rollup) {
	return diagtest.OpenTiers(t, dir)
}

func simHistory(t testing.TB, cfg sim.Config, to time.Time) *tiers.Rollup {
	return diagtest.SimHistory(t, cfg, to)
}

// fourHours simulates the small cluster with faults for four hours from
// simStart and returns its minute tier and the end.
func fourHours(t testing.TB, faults ...sim.FaultSpec) (*tiers.Rollup, time.Time) {
	end := simStart.Add(4 * time.Hour)
	return simHistory(t, smallCluster(faults...), end), end
}

func gpu(i int) *int { return diagtest.GPU(i) }
