package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// rawMetricPrefix is the prefix of the raw TSDB's own metrics
// (strata_raw_prometheus_tsdb_*).
const rawMetricPrefix = "strata_raw_"

// runtimeInfo is /api/v1/status/runtimeinfo in Prometheus' format, read at
// each request: the process's start, whether the last reload (SIGHUP or
// POST /-/reload: the rule files and the alerting section) succeeded and
// when the last one that did happened (the start until then; from the
// reloader's metrics), working directory, host, goroutines, GOMAXPROCS,
// the soft memory limit in force (the heap pacer moves it), GOGC in force,
// GODEBUG, the three tiers' retention, and the raw TSDB's WAL corruptions.
func runtimeInfo(cfg Config, start time.Time, gatherer prometheus.Gatherer) func() (v1.RuntimeInfo, error) {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = "<error retrieving current working directory>" // Prometheus' words
	}
	retention := fmt.Sprintf("%s raw, %s minute, %s hour",
		cfg.Storage.Raw.Retention, cfg.Storage.Minute.Retention, cfg.Storage.Hour.Retention)
	return func() (v1.RuntimeInfo, error) {
		st := v1.RuntimeInfo{
			StartTime:           start,
			CWD:                 cwd,
			ServerTime:          time.Now().UTC(),
			ReloadConfigSuccess: true,
			LastConfigTime:      start,
			GoroutineCount:      runtime.NumGoroutine(),
			GOMAXPROCS:          runtime.GOMAXPROCS(0),
			GOMEMLIMIT:          debug.SetMemoryLimit(-1),
			GOGC:                gogcInForce(),
			GODEBUG:             os.Getenv("GODEBUG"),
			StorageRetention:    retention,
		}
		host, err := os.Hostname()
		if err != nil {
			return st, fmt.Errorf("error getting hostname: %w", err)
		}
		st.Hostname = host
		mfs, err := gatherer.Gather()
		if err != nil {
			return st, fmt.Errorf("error gathering runtime status: %w", err)
		}
		for _, mf := range mfs {
			if len(mf.GetMetric()) == 0 {
				continue
			}
			m := mf.GetMetric()[0]
			switch mf.GetName() {
			case rawMetricPrefix + "prometheus_tsdb_wal_corruptions_total":
				st.CorruptionCount = int64(m.GetCounter().GetValue())
			case "strata_config_last_reload_successful":
				st.ReloadConfigSuccess = m.GetGauge().GetValue() == 1
			case "strata_config_last_reload_success_timestamp_seconds":
				st.LastConfigTime = time.UnixMilli(int64(m.GetGauge().GetValue() * 1000)).UTC()
			}
		}
		return st, nil
	}
}

// gogcInForce is the collector's GOGC as the runtime has it ("off" when
// disabled), whether it came from the environment or --runtime.gogc.
func gogcInForce() string {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return os.Getenv("GOGC")
	}
	v := s[0].Value.Uint64()
	if v > 1<<62 { // GOGC=off reads as the largest percentage
		return "off"
	}
	return strconv.FormatUint(v, 10)
}
