package bench

import (
	"bytes"
	"compress/gzip"
	"fmt"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

// Wire headers of the protocols (remote-write spec 1.0 and 2.0, OTLP/HTTP
// in binary protobuf, which has no version header).
const (
	contentTypeV1 = "application/x-protobuf"
	contentTypeV2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
	versionV1     = "0.1.0"
	versionV2     = "2.0.0"
)

// sampleRef is one pending sample: a series index into generator.series.
type sampleRef struct {
	ref int32
	t   int64
	v   float64
}

// encoder turns a batch into a snappy-compressed request body. Each sender
// owns one and reuses its buffers; the returned body is valid until the next
// encode call.
type encoder struct {
	proto     Protocol
	v1        prompb.WriteRequest
	v1Samples []prompb.Sample
	v2        writev2.Request
	v2Samples []writev2.Sample
	symbols   writev2.SymbolsTable
	refs      []uint32
	offs      []int
	raw, comp []byte
	// OTLP: the metric of each name in the batch, and the gzip stream.
	otlpMetrics map[string]pmetric.NumberDataPointSlice
	gz          *gzip.Writer
	gzBuf       bytes.Buffer
}

func newEncoder(p Protocol) *encoder {
	return &encoder{proto: p, symbols: writev2.NewSymbolTable()}
}

func (e *encoder) contentType() string {
	if e.proto == ProtocolV2 {
		return contentTypeV2
	}
	return contentTypeV1 // OTLP's binary encoding too
}

func (e *encoder) version() string {
	switch e.proto {
	case ProtocolV2:
		return versionV2
	case ProtocolOTLP:
		return ""
	}
	return versionV1
}

func (e *encoder) contentEncoding() string {
	if e.proto == ProtocolOTLP {
		return "gzip"
	}
	return "snappy"
}

// encode marshals batch (samples of series) and compresses it with snappy's
// block format, as both remote-write versions require, or gzip for OTLP.
// Each sample is its own TimeSeries entry, as a Prometheus shard sends a
// series that appears twice in one batch.
func (e *encoder) encode(series []seriesDesc, batch []sampleRef) ([]byte, error) {
	if e.proto == ProtocolOTLP {
		return e.encodeOTLP(series, batch)
	}
	var (
		size int
		err  error
	)
	if e.proto == ProtocolV2 {
		size, err = e.marshalV2(series, batch)
	} else {
		size, err = e.marshalV1(series, batch)
	}
	if err != nil {
		return nil, fmt.Errorf("marshal %s request: %w", e.proto, err)
	}
	e.comp = snappy.Encode(e.comp[:cap(e.comp)], e.raw[:size])
	return e.comp, nil
}

func (e *encoder) grow(size int) {
	if cap(e.raw) < size {
		e.raw = make([]byte, size*5/4)
	}
}

func (e *encoder) marshalV1(series []seriesDesc, batch []sampleRef) (int, error) {
	e.v1Samples = e.v1Samples[:0]
	for _, s := range batch {
		e.v1Samples = append(e.v1Samples, prompb.Sample{Value: s.v, Timestamp: s.t})
	}
	ts := e.v1.Timeseries[:0]
	for i, s := range batch {
		ts = append(ts, prompb.TimeSeries{Labels: series[s.ref].pb, Samples: e.v1Samples[i : i+1 : i+1]})
	}
	e.v1.Timeseries = ts
	size := e.v1.Size()
	e.grow(size)
	return e.v1.MarshalToSizedBuffer(e.raw[:size])
}

func (e *encoder) marshalV2(series []seriesDesc, batch []sampleRef) (int, error) {
	e.symbols.Reset()
	e.refs, e.offs = e.refs[:0], e.offs[:0]
	e.v2Samples = e.v2Samples[:0]
	// First pass: symbolise into one flat slice; slices into it are taken
	// only once it has stopped growing.
	for _, s := range batch {
		d := &series[s.ref]
		e.offs = append(e.offs, len(e.refs))
		for _, l := range d.pb {
			e.refs = append(e.refs, e.symbols.Symbolize(l.Name), e.symbols.Symbolize(l.Value))
		}
		e.v2Samples = append(e.v2Samples, writev2.Sample{Value: s.v, Timestamp: s.t})
	}
	ts := e.v2.Timeseries[:0]
	for i, s := range batch {
		d := &series[s.ref]
		end := len(e.refs)
		if i+1 < len(e.offs) {
			end = e.offs[i+1]
		}
		md := writev2.Metadata{Type: d.fam.kind.metadataType()}
		if d.fam.help != "" {
			md.HelpRef = e.symbols.Symbolize(d.fam.help)
		}
		if d.fam.unit != "" {
			md.UnitRef = e.symbols.Symbolize(d.fam.unit)
		}
		ts = append(ts, writev2.TimeSeries{
			LabelsRefs: e.refs[e.offs[i]:end:end],
			Samples:    e.v2Samples[i : i+1 : i+1],
			Metadata:   md,
		})
	}
	e.v2.Timeseries = ts
	e.v2.Symbols = e.symbols.Symbols()
	size := e.v2.Size()
	e.grow(size)
	return e.v2.MarshalToSizedBuffer(e.raw[:size])
}

// encodeOTLP marshals batch as an OTLP metrics export, gzipped: one resource
// and scope, a gauge metric for each series name in the batch (its HELP as
// description) with a data point per sample whose attributes are the
// series' other labels. Every series is a gauge, bucket series of
// histograms included, so that any receiver's translation (Prometheus' adds
// no suffix to a gauge without a unit) stores the same series under the
// same names as remote write does, and the dashboards' queries read both
// alike; an exporter's counters and histograms would be sums and
// histograms, which translate to other names. gzip runs at its fastest
// level, sparing the load generator's CPU (it shares the machine).
func (e *encoder) encodeOTLP(series []seriesDesc, batch []sampleRef) ([]byte, error) {
	if e.otlpMetrics == nil {
		e.otlpMetrics = map[string]pmetric.NumberDataPointSlice{}
	}
	clear(e.otlpMetrics)
	md := pmetric.NewMetrics()
	sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
	sm.Scope().SetName("strata-bench")
	for _, s := range batch {
		d := &series[s.ref]
		name := d.lset.Get(model.MetricNameLabel)
		dps, ok := e.otlpMetrics[name]
		if !ok {
			m := sm.Metrics().AppendEmpty()
			m.SetName(name)
			m.SetDescription(d.fam.help)
			dps = m.SetEmptyGauge().DataPoints()
			e.otlpMetrics[name] = dps
		}
		dp := dps.AppendEmpty()
		dp.SetTimestamp(pcommon.Timestamp(s.t * 1e6))
		dp.SetDoubleValue(s.v)
		attrs := dp.Attributes()
		attrs.EnsureCapacity(len(d.pb) - 1)
		for _, l := range d.pb {
			if l.Name != model.MetricNameLabel {
				attrs.PutStr(l.Name, l.Value)
			}
		}
	}
	raw, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		return nil, fmt.Errorf("marshal otlp request: %w", err)
	}
	e.gzBuf.Reset()
	if e.gz == nil {
		e.gz, _ = gzip.NewWriterLevel(&e.gzBuf, gzip.BestSpeed)
	} else {
		e.gz.Reset(&e.gzBuf)
	}
	if _, err := e.gz.Write(raw); err != nil {
		return nil, err
	}
	if err := e.gz.Close(); err != nil {
		return nil, err
	}
	return e.gzBuf.Bytes(), nil
}
