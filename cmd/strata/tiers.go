package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/thanos-io/objstore"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/bucket"
	"github.com/strata-dev/strata/tiers"
)

// storageTiers are the three stores under storage.path, as `strata serve`
// and `strata backfill` open them.
type storageTiers struct {
	raw          *tiers.Raw
	minute, hour *tiers.Rollup
	bucket       objstore.Bucket // nil: rollups on local disk only
}

// rollupSpillDir is the storage directory of the rollup pipeline's
// temporary files (its spills, the hour tier's build runs), which strata
// serve empties on start.
const rollupSpillDir = "rollup-spill"

// openTiers opens the raw, minute and hour tiers with the configuration's
// retentions; the raw tier's metrics go to rawReg, the rollups' to reg. On
// error it closes what it opened. The caller MUST call close.
// rawDir is the raw tier's directory under the storage path.
func rawDir(cfg Config) string { return filepath.Join(cfg.Storage.Path, "raw") }

func openTiers(cfg Config, logger *slog.Logger, rawReg, reg prometheus.Registerer) (t storageTiers, err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, t.close())
		}
	}()
	rawCfg := tiers.DefaultRawConfig(rawDir(cfg))
	rawCfg.Retention = time.Duration(cfg.Storage.Raw.Retention)
	rawCfg.OutOfOrderWindow = time.Duration(cfg.Storage.OutOfOrderWindow)
	rawCfg.WALCompression = cfg.Storage.Raw.WALCompression
	rawCfg.SampleRecordsV2 = cfg.Storage.Raw.WALSampleRecords == "v2"
	rawCfg.Isolation = cfg.Storage.Raw.Isolation
	rawCfg.SamplesPerChunk = cfg.Storage.Raw.SamplesPerChunk
	rawCfg.BlockDuration = time.Duration(cfg.Storage.Raw.BlockDuration)
	if t.raw, err = tiers.OpenRaw(rawCfg, logger, rawReg); err != nil {
		return t, err
	}
	var remote *tiers.RemoteConfig
	if oc := cfg.Storage.ObjStore; oc.ConfigFile != "" {
		conf, err := os.ReadFile(oc.ConfigFile)
		if err != nil {
			return t, fmt.Errorf("read objstore configuration: %w", err)
		}
		if t.bucket, err = bucket.Open(context.Background(), conf, logger.With("component", "objstore")); err != nil {
			return t, err
		}
		remote = &tiers.RemoteConfig{Bucket: t.bucket, CacheBytes: int64(oc.LocalCacheBytes), PendingWarnBytes: int64(oc.PendingWarnBytes)}
	}
	minuteCfg := tiers.DefaultMinuteConfig(filepath.Join(cfg.Storage.Path, "minute"))
	minuteCfg.Remote = remote
	minuteCfg.Retention = time.Duration(cfg.Storage.Minute.Retention)
	if t.minute, err = tiers.OpenRollup(minuteCfg, logger, reg, time.Now); err != nil {
		return t, err
	}
	// The series table kept for the partition written last holds the
	// head's label sets, not copies.
	t.minute.ShareLabels(t.raw)
	hourCfg := tiers.DefaultHourConfig(filepath.Join(cfg.Storage.Path, "hour"))
	hourCfg.Retention = time.Duration(cfg.Storage.Hour.Retention)
	hourCfg.Remote = remote
	if t.hour, err = tiers.OpenRollup(hourCfg, logger, reg, time.Now); err != nil {
		return t, err
	}
	return t, nil
}

// close closes the tiers that are open, the finest last.
func (t storageTiers) close() error {
	var errs []error
	if t.hour != nil {
		errs = append(errs, t.hour.Close())
	}
	if t.minute != nil {
		errs = append(errs, t.minute.Close())
	}
	if t.raw != nil {
		errs = append(errs, t.raw.Close())
	}
	if t.bucket != nil {
		errs = append(errs, t.bucket.Close())
	}
	return errors.Join(errs...)
}

// rollupTyping types each series for its rollup windows from the metric
// catalogue (a gauge's windows record no counter resets). strata serve's
// pipeline and strata backfill use it alike, so both write the same windows.
func rollupTyping() (downsample.KindFunc, error) {
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		return nil, err
	}
	return downsample.GaugesByName(cat.IsGauge), nil
}
