package query

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// RawStatus is the raw tier as Prometheus' TSDB status endpoints read it
// (tiers.Raw): /api/v1/status/tsdb (the head's cardinality, top limit by
// metric name, label name and label pair), /status/tsdb/blocks (the
// persisted blocks) and /status/walreplay.
type RawStatus interface {
	Stats(statsByLabelName string, limit int) (*tsdb.Stats, error)
	WALReplayStatus() (tsdb.WALReplayStatus, error)
	BlockMetas() ([]tsdb.BlockMeta, error)
}

// headChunksMetric is the family Prometheus' /api/v1/status/tsdb handler
// reads the head's chunk count from.
const headChunksMetric = "prometheus_tsdb_head_chunks"

// WithRawStatus serves /api/v1/status/tsdb, /api/v1/status/tsdb/blocks and
// /api/v1/status/walreplay from src with Prometheus' own handlers (their
// parameters, limits and JSON). metrics holds the raw TSDB's own metrics
// under prefix (Strata registers them as strata_raw_prometheus_tsdb_*): the
// head's chunk count is read from there, as Prometheus reads its own.
// Without it these endpoints answer 404.
func WithRawStatus(src RawStatus, metrics prometheus.Gatherer, prefix string) Option {
	return func(o *options) {
		o.raw, o.rawMetrics, o.rawPrefix = src, metrics, prefix
	}
}

// WithRuntimeInfo serves /api/v1/status/runtimeinfo with what fn returns, in
// Prometheus' format. Without it the endpoint answers 404.
func WithRuntimeInfo(fn func() (v1.RuntimeInfo, error)) Option {
	return func(o *options) { o.runtimeInfo = fn }
}

// errAdminDisabled: Strata serves none of the TSDB admin API (delete
// series, clean tombstones, snapshot); its routes answer 404 and Prometheus'
// handlers, built with the admin API off, never call these.
var errAdminDisabled = errors.New("the TSDB admin API is not served by Strata")

// tsdbAdmin is v1.TSDBAdminStats over a RawStatus.
type tsdbAdmin struct{ RawStatus }

func (tsdbAdmin) CleanTombstones() error { return errAdminDisabled }
func (tsdbAdmin) Delete(context.Context, int64, int64, ...*labels.Matcher) error {
	return errAdminDisabled
}
func (tsdbAdmin) Snapshot(string, bool) error { return errAdminDisabled }

// headChunksGatherer is the gatherer Prometheus' API reads: the raw TSDB's
// prometheus_tsdb_head_chunks, found under its prefix in metrics.
type headChunksGatherer struct {
	metrics prometheus.Gatherer
	prefix  string
}

func (g headChunksGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.metrics.Gather()
	for _, mf := range mfs {
		if mf.GetName() == g.prefix+headChunksMetric {
			name := headChunksMetric
			return []*dto.MetricFamily{{Name: &name, Help: mf.Help, Type: mf.Type, Metric: mf.Metric}}, err
		}
	}
	return nil, err
}
