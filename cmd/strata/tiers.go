package main

import (
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/tiers"
)

// storageTiers are the three stores under storage.path, as `strata serve`
// and `strata backfill` open them.
type storageTiers struct {
	raw          *tiers.Raw
	minute, hour *tiers.Rollup
}

// openTiers opens the raw, minute and hour tiers with the configuration's
// retentions; the raw tier's metrics go to rawReg, the rollups' to reg. On
// error it closes what it opened. The caller MUST call close.
func openTiers(cfg Config, logger *slog.Logger, rawReg, reg prometheus.Registerer) (t storageTiers, err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, t.close())
		}
	}()
	rawCfg := tiers.DefaultRawConfig(filepath.Join(cfg.Storage.Path, "raw"))
	rawCfg.Retention = time.Duration(cfg.Storage.Raw.Retention)
	rawCfg.OutOfOrderWindow = time.Duration(cfg.Storage.OutOfOrderWindow)
	if t.raw, err = tiers.OpenRaw(rawCfg, logger, rawReg); err != nil {
		return t, err
	}
	minuteCfg := tiers.DefaultMinuteConfig(filepath.Join(cfg.Storage.Path, "minute"))
	minuteCfg.Retention = time.Duration(cfg.Storage.Minute.Retention)
	if t.minute, err = tiers.OpenRollup(minuteCfg, logger, reg, time.Now); err != nil {
		return t, err
	}
	hourCfg := tiers.DefaultHourConfig(filepath.Join(cfg.Storage.Path, "hour"))
	hourCfg.Retention = time.Duration(cfg.Storage.Hour.Retention)
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
