package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"gopkg.in/yaml.v3"

	"github.com/strata-dev/strata/backfill"
	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/tiers"
)

// sampleBatch is how many samples the simulator hands to the writer at once.
const sampleBatch = 1 << 15

type sample struct {
	l labels.Labels
	t int64
	v float64
}

// Generated is a scenario written into a data directory.
type Generated struct {
	Minute, Hour *tiers.Rollup
	Truth        []sim.Fault
	Samples      int64
	// SimTime is the simulator's own time (stepping and rendering), Write
	// the rollup and partition writing; they overlap (two goroutines), Wall
	// is the elapsed time of both.
	SimTime, WriteTime, Wall time.Duration
}

// Close closes the tiers.
func (g *Generated) Close() error {
	return errors.Join(g.Minute.Close(), g.Hour.Close())
}

// generate simulates sc and streams its samples straight into the minute and
// hour tiers of a fresh data directory dir (no raw tier: history, as `strata
// backfill` imports it), the simulator and the writer running concurrently.
//
// With reuse, a directory that holds a finished generation of the same
// scenario (its stamp file) is opened as it is.
func generate(ctx context.Context, sc Scenario, dir string, reuse bool, logger *slog.Logger) (*Generated, bool, error) {
	cfg := sc.Cluster
	cfg.Faults = sc.Faults()
	c, err := sim.New(cfg)
	if err != nil {
		return nil, false, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	stamp, err := scenarioStamp(sc)
	if err != nil {
		return nil, false, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, stampFile)); reuse && err == nil && string(b) == stamp {
		g, err := openGenerated(dir, logger)
		if err != nil {
			return nil, false, err
		}
		g.Truth = c.GroundTruth()
		return g, true, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, err
	}
	g, err := openGenerated(dir, logger)
	if err != nil {
		return nil, false, err
	}
	g.Truth = c.GroundTruth()
	if err := g.fill(ctx, c, sc); err != nil {
		return nil, false, errors.Join(err, g.Close())
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, stampFile), []byte(stamp)); err != nil {
		return nil, false, errors.Join(err, g.Close())
	}
	return g, false, nil
}

// stampFile marks a data directory whose generation finished. It holds the
// hash of the scenario, so only the same scenario reuses it.
const stampFile = "scenario.sha256"

func scenarioStamp(sc Scenario) (string, error) {
	b, err := yaml.Marshal(sc)
	if err != nil {
		return "", fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

func openGenerated(dir string, logger *slog.Logger) (*Generated, error) {
	reg := prometheus.NewRegistry()
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(filepath.Join(dir, "minute")), logger, reg, nil)
	if err != nil {
		return nil, err
	}
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), logger, reg, nil)
	if err != nil {
		return nil, errors.Join(err, minute.Close())
	}
	return &Generated{Minute: minute, Hour: hour}, nil
}

func (g *Generated) fill(ctx context.Context, c *sim.Cluster, sc Scenario) error {
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		return err
	}
	bcfg := backfill.DefaultConfig()
	bcfg.KindOf = downsample.GaugesByName(cat.IsGauge)
	bcfg.Now = sc.End // nothing is older than the hour tier's retention
	st, err := backfill.NewStream(ctx, bcfg, backfill.Targets{Minute: g.Minute, Hour: g.Hour})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Four batches circulate between the simulator and the writer.
	batches := make(chan []sample, 4)
	free := make(chan []sample, 4)
	for range 3 {
		free <- make([]sample, 0, sampleBatch)
	}
	simErr := make(chan error, 1)
	start := time.Now()
	go func() {
		defer close(batches)
		t0 := time.Now()
		var writeWait time.Duration
		buf := make([]sample, 0, sampleBatch)
		send := func() error {
			w := time.Now()
			select {
			case batches <- buf:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case buf = <-free:
				buf = buf[:0]
			case <-ctx.Done():
				return ctx.Err()
			}
			writeWait += time.Since(w)
			return nil
		}
		for _, sp := range sc.plan() {
			err := c.Backfill(sp.from, sp.to.Add(-time.Millisecond), sp.step, func(l labels.Labels, t int64, v float64) error {
				buf = append(buf, sample{l, t, v})
				if len(buf) == cap(buf) {
					return send()
				}
				return nil
			})
			if err != nil {
				simErr <- err
				return
			}
		}
		if len(buf) > 0 {
			if err := send(); err != nil {
				simErr <- err
				return
			}
		}
		g.SimTime = time.Since(t0) - writeWait
		simErr <- nil
	}()
	var werr error
	for b := range batches {
		if werr == nil {
			w := time.Now()
			for _, s := range b {
				if werr = st.Append(s.l, s.t, s.v); werr != nil {
					cancel()
					break
				}
			}
			g.Samples += int64(len(b))
			g.WriteTime += time.Since(w)
		}
		free <- b
	}
	serr := <-simErr
	w := time.Now()
	_, cerr := st.Close()
	g.WriteTime += time.Since(w)
	g.Wall = time.Since(start)
	if werr != nil {
		return fmt.Errorf("write scenario %s: %w", sc.Name, werr)
	}
	if serr != nil {
		return fmt.Errorf("simulate scenario %s: %w", sc.Name, serr)
	}
	return cerr
}
