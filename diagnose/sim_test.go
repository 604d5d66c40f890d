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

func gpu(i int) *int { return diagtest.GPU(i) }
