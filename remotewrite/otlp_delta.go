package remotewrite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	deltatocumulative "github.com/open-telemetry/opentelemetry-collector-contrib/processor/deltatocumulativeprocessor"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// reasonDeltaDropped counts the delta data points the conversion to
// cumulative dropped (out of order or sent again, older than their
// stream's start, past the stream limit).
const reasonDeltaDropped = "otlp_delta_dropped"

// The processor's own telemetry, which deltaConverter's Collect turns into
// Strata's metrics.
const (
	d2cDatapoints = "otelcol_deltatocumulative_datapoints"
	d2cTracked    = "otelcol_deltatocumulative_streams_tracked"
)

// deltaConverter turns OTLP sums and histograms (explicit and exponential)
// of delta temporality into cumulative ones, keeping each stream's running
// total in memory. It is the OpenTelemetry Collector's deltatocumulative
// processor, which Prometheus' otlp-deltatocumulative feature runs the same
// way, with its stream limit and staleness from the configuration and its
// telemetry read into Strata's metrics.
//
// A stream is a metric of a resource and scope with one set of attributes.
// Its first point is taken as it is; each later one adds to the total,
// keeps the stream's start time and moves its timestamp. A point stamped no
// later than the stream's last (sent again after a retry, or out of order)
// is dropped, as is one that starts before the stream did; so is a new
// stream's point once the limit's streams are tracked. A stream without a
// point for the staleness period is forgotten, and its next point starts a
// new total, which PromQL reads as a counter reset (as it does a restart,
// which forgets every stream).
type deltaConverter struct {
	proc   processor.Metrics
	reader *sdkmetric.ManualReader

	streamsDesc, pointsDesc *prometheus.Desc
}

// deltaSink is where the converter's next consumer leaves the converted
// metrics of one call (passed in its context: calls run concurrently).
type deltaSink struct {
	md pmetric.Metrics
	ok bool
}

type deltaSinkKey struct{}

func newDeltaConverter(maxStreams int, maxStale time.Duration) (*deltaConverter, error) {
	if maxStreams <= 0 {
		return nil, fmt.Errorf("OTLP delta conversion: the stream limit must be positive, got %d", maxStreams)
	}
	if maxStale <= 0 {
		return nil, fmt.Errorf("OTLP delta conversion: the staleness period must be positive, got %s", maxStale)
	}
	reader := sdkmetric.NewManualReader()
	fac := deltatocumulative.NewFactory()
	cfg, ok := fac.CreateDefaultConfig().(*deltatocumulative.Config)
	if !ok {
		return nil, errors.New("OTLP delta conversion: unexpected deltatocumulative configuration type")
	}
	cfg.MaxStreams = maxStreams
	cfg.MaxStale = maxStale
	set := processor.Settings{
		ID:                component.NewID(fac.Type()),
		TelemetrySettings: component.TelemetrySettings{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))},
	}
	next, err := consumer.NewMetrics(func(ctx context.Context, md pmetric.Metrics) error {
		if s, ok := ctx.Value(deltaSinkKey{}).(*deltaSink); ok {
			s.md, s.ok = md, true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	proc, err := fac.CreateMetrics(context.Background(), set, cfg, next)
	if err != nil {
		return nil, fmt.Errorf("OTLP delta conversion: %w", err)
	}
	// Start runs the staleness sweep (once a minute) until Shutdown.
	if err := proc.Start(context.Background(), nil); err != nil {
		return nil, fmt.Errorf("OTLP delta conversion: %w", err)
	}
	return &deltaConverter{
		proc:   proc,
		reader: reader,
		streamsDesc: prometheus.NewDesc("strata_otlp_delta_streams",
			"Delta streams whose running totals the OTLP receiver holds to convert them to cumulative (remote_write.otlp_delta_max_streams bounds them).", nil, nil),
		pointsDesc: prometheus.NewDesc("strata_otlp_delta_datapoints_total",
			"Delta data points of the OTLP receiver's conversion to cumulative, by result: ok, or the reason one was dropped (out_of_order, older_start, stream_limit).", []string{"result"}, nil),
	}, nil
}

// convert returns md with its delta metrics made cumulative (md itself,
// changed in place, or empty when nothing of it is left).
func (d *deltaConverter) convert(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	var sink deltaSink
	if err := d.proc.ConsumeMetrics(context.WithValue(ctx, deltaSinkKey{}, &sink), md); err != nil {
		return md, err
	}
	if !sink.ok { // every metric was dropped
		return pmetric.NewMetrics(), nil
	}
	return sink.md, nil
}

// close stops the staleness sweep.
func (d *deltaConverter) close() error {
	return d.proc.Shutdown(context.Background())
}

func (d *deltaConverter) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.streamsDesc
	ch <- d.pointsDesc
}

func (d *deltaConverter) Collect(ch chan<- prometheus.Metric) {
	var rm metricdata.ResourceMetrics
	if err := d.reader.Collect(context.Background(), &rm); err != nil {
		return
	}
	streams := 0.0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			switch m.Name {
			case d2cTracked:
				for _, p := range sum.DataPoints {
					streams += float64(p.Value)
				}
			case d2cDatapoints:
				for _, p := range sum.DataPoints {
					v, _ := p.Attributes.Value("error")
					ch <- prometheus.MustNewConstMetric(d.pointsDesc, prometheus.CounterValue, float64(p.Value), deltaResult(v))
				}
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(d.streamsDesc, prometheus.GaugeValue, streams)
}

// deltaResult names what the processor's "error" attribute says of a data
// point: the type of the error that dropped it, or "limit".
func deltaResult(v attribute.Value) string {
	switch s := v.AsString(); s {
	case "":
		return "ok"
	case "limit":
		return "stream_limit"
	case "delta.ErrOutOfOrder":
		return "out_of_order"
	case "delta.ErrOlderStart":
		return "older_start"
	default:
		return strings.ToLower(strings.TrimPrefix(s, "*"))
	}
}

// hasDelta reports whether md holds a metric of delta temporality.
func hasDelta(md pmetric.Metrics) bool {
	found := false
	eachMetric(md, func(m pmetric.Metric) {
		if !found && temporality(m) == pmetric.AggregationTemporalityDelta {
			found = true
		}
	})
	return found
}

func temporality(m pmetric.Metric) pmetric.AggregationTemporality {
	switch m.Type() {
	case pmetric.MetricTypeSum:
		return m.Sum().AggregationTemporality()
	case pmetric.MetricTypeHistogram:
		return m.Histogram().AggregationTemporality()
	case pmetric.MetricTypeExponentialHistogram:
		return m.ExponentialHistogram().AggregationTemporality()
	}
	return pmetric.AggregationTemporalityUnspecified
}
