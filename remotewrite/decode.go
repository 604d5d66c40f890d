package remotewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/VictoriaMetrics/easyproto"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
)

// ErrBadProtobuf is wrapped by every decoding error: the body is not a valid
// encoding of the message the Content-Type announced.
var ErrBadProtobuf = errors.New("bad protobuf")

// Label is one label as found in the request. Name and Value are views into
// the decompressed request buffer (or, for RW 2.0, into its symbols): they are
// valid only until the Decoder is reset or reused, and must be copied or
// interned before they are kept (new series, metadata, exemplars).
type Label struct {
	Name, Value string
}

// Sample is one float sample. StartTimestamp is 0 when the sender did not set
// one (RW 1.0 never does).
type Sample struct {
	Value          float64
	Timestamp      int64
	StartTimestamp int64
}

// Histogram is one native histogram sample. Exactly one of H and FH is set,
// following the wire's count_int / count_float oneof. Unlike everything else
// the Decoder returns, H and FH are freshly allocated and owned by the caller:
// the TSDB head keeps a pointer to the last histogram of each series, so they
// must never be recycled.
type Histogram struct {
	Timestamp      int64
	StartTimestamp int64
	H              *histogram.Histogram
	FH             *histogram.FloatHistogram
}

// Exemplar is one exemplar; Labels are views like Series.Labels.
type Exemplar struct {
	Labels    []Label
	Value     float64
	Timestamp int64
	// Err is set when an RW 2.0 label reference of the exemplar is bad: the
	// exemplar is dropped, its series is not.
	Err error
}

// Metadata is a metric family's type, unit and help. Strings are views.
type Metadata struct {
	Type model.MetricType
	Unit string
	Help string
}

// IsEmpty reports whether nothing was sent.
func (m Metadata) IsEmpty() bool {
	return (m.Type == "" || m.Type == model.MetricTypeUnknown) && m.Unit == "" && m.Help == ""
}

// FamilyMetadata is an RW 1.0 WriteRequest.metadata entry.
type FamilyMetadata struct {
	Family string
	Metadata
}

// Series is one decoded time series. Labels are in wire order (not necessarily
// sorted, not yet validated).
type Series struct {
	Labels     []Label
	Samples    []Sample
	Histograms []Histogram
	Exemplars  []Exemplar
	// Metadata is RW 2.0's per-series metadata, empty for RW 1.0.
	Metadata Metadata
	// CreatedTimestamp is the pre-rc.4 RW 2.0 TimeSeries.created_timestamp
	// (field 6), still sent by Prometheus <= 3.8 and the compliance suite. The
	// handler uses it as the start timestamp of samples that carry none.
	CreatedTimestamp int64
	// Err is set when an RW 2.0 symbol reference of the series (labels or
	// metadata) is odd-length or out of range: the series
	// is invalid but the rest of the request is not.
	Err error
}

// Request is a decoded RW 1.0 or 2.0 request in one shape.
type Request struct {
	Series []Series
	// Metadata is RW 1.0's WriteRequest.metadata (RW 2.0 carries metadata per
	// series instead).
	Metadata []FamilyMetadata
	// Symbols is the RW 2.0 symbol table, views into the buffer.
	Symbols []string
}

// Decoder decodes remote-write protobuf bodies without reflection and, in the
// steady state, without allocating per sample: every label, sample and
// exemplar lands in slices the Decoder keeps between requests, and strings are
// zero-copy views into the input buffer. So the input buffer must not change
// while the returned Request is in use, and the Request is only valid until
// the next Decode or Reset call. Only native histograms are allocated anew
// (see Histogram).
//
// A Decoder is not safe for concurrent use; the Handler keeps a sync.Pool of
// them.
type Decoder struct {
	req       Request
	labels    []Label
	exLabels  []Label
	samples   []Sample
	hists     []Histogram
	exemplars []Exemplar
	refs      []uint32
	rawSeries [][]byte
}

// Reset forgets the last request, keeping the memory for the next one. It
// clears the string views so the pooled Decoder does not pin the last
// request's buffer.
func (d *Decoder) Reset() {
	clear(d.req.Series)
	clear(d.req.Metadata)
	clear(d.req.Symbols)
	d.req = Request{Series: d.req.Series[:0], Metadata: d.req.Metadata[:0], Symbols: d.req.Symbols[:0]}
	clear(d.labels)
	d.labels = d.labels[:0]
	clear(d.exLabels)
	d.exLabels = d.exLabels[:0]
	d.samples = d.samples[:0]
	clear(d.hists)
	d.hists = d.hists[:0]
	clear(d.exemplars)
	d.exemplars = d.exemplars[:0]
	d.refs = d.refs[:0]
	clear(d.rawSeries)
	d.rawSeries = d.rawSeries[:0]
}

// reuse forgets the last request like Reset, but leaves its string views
// (labels, symbols, metadata) in the slices' spare capacity instead of
// clearing them: for a caller that keeps the input buffer together with the
// Decoder, as the handler's pooled request state does, they pin nothing the
// pool does not keep anyway, and clearing every label view of a request
// (30,000 at 2,000 series) took about 2% of the server's CPU in the
// 100,000-series profile. Histograms and exemplars, which point to memory
// of their own, are cleared. A caller that replaces the buffer calls unpin.
func (d *Decoder) reuse() {
	d.req = Request{Series: d.req.Series[:0], Metadata: d.req.Metadata[:0], Symbols: d.req.Symbols[:0]}
	d.labels = d.labels[:0]
	d.exLabels = d.exLabels[:0]
	d.samples = d.samples[:0]
	clear(d.hists)
	d.hists = d.hists[:0]
	clear(d.exemplars)
	d.exemplars = d.exemplars[:0]
	d.refs = d.refs[:0]
	d.rawSeries = d.rawSeries[:0]
}

// unpin clears every view the Decoder's slices hold, in their whole
// capacity: after reuse, before the input buffer is replaced, so the old
// buffer can be collected.
func (d *Decoder) unpin() {
	clear(d.req.Series[:cap(d.req.Series)])
	clear(d.req.Metadata[:cap(d.req.Metadata)])
	clear(d.req.Symbols[:cap(d.req.Symbols)])
	clear(d.labels[:cap(d.labels)])
	clear(d.exLabels[:cap(d.exLabels)])
	clear(d.rawSeries[:cap(d.rawSeries)])
}

// bytesView returns b as a string without a copy, as easyproto's
// FieldContext.String does: the string is valid only while b's memory is
// unchanged, which for a view into the request buffer is until the Decoder is
// reused (see Decoder).
func bytesView(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func protoErr(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadProtobuf, what, err)
	}
	return fmt.Errorf("%w: %s", ErrBadProtobuf, what)
}

// DecodeV1 decodes a prometheus.WriteRequest (RW 1.0, including Prometheus'
// exemplars, native histograms and metadata extensions).
func (d *Decoder) DecodeV1(buf []byte) (*Request, error) {
	d.Reset()
	if cap(d.req.Series) == 0 {
		d.sizeV1(buf)
	}
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return nil, protoErr("read WriteRequest field", err)
		}
		switch fc.FieldNum {
		case 1:
			data, ok := fc.MessageData()
			if !ok {
				return nil, protoErr("WriteRequest.timeseries is not a message", nil)
			}
			if err := d.decodeSeriesV1(data); err != nil {
				return nil, err
			}
		case 3:
			data, ok := fc.MessageData()
			if !ok {
				return nil, protoErr("WriteRequest.metadata is not a message", nil)
			}
			m, err := decodeMetadataV1(data)
			if err != nil {
				return nil, err
			}
			d.req.Metadata = append(d.req.Metadata, m)
		}
	}
	return &d.req, nil
}

// sizeV1 sizes a new Decoder's series, labels and samples for the RW 1.0
// request in buf, counted in a pass over its fields: grown by append instead
// (by a quarter at a time past 256 elements), a request of 2,000 series of
// 11 labels allocated 4.7 MB in them for the 1.1 MB they end at, and
// every request state the collector drops from the handler's pool is made
// again. A Decoder that has decoded a request keeps its slices and does not
// count again. A malformed buf stops the count; DecodeV1 reports it.
func (d *Decoder) sizeV1(buf []byte) {
	var series, lbls, samples int
	var fc, sc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			break
		}
		if fc.FieldNum != 1 {
			continue
		}
		data, ok := fc.MessageData()
		if !ok {
			break
		}
		series++
		for len(data) > 0 {
			// The fast path of decodeSeriesV1: a label or sample of
			// less than 128 bytes.
			if len(data) >= 2 && (data[0] == labelsTag || data[0] == samplesTag) && data[1] < 0x80 {
				if end := 2 + int(data[1]); end <= len(data) {
					if data[0] == labelsTag {
						lbls++
					} else {
						samples++
					}
					data = data[end:]
					continue
				}
			}
			if data, err = sc.NextField(data); err != nil {
				break
			}
			switch sc.FieldNum {
			case 1:
				lbls++
			case 2:
				samples++
			}
		}
	}
	d.req.Series = slices.Grow(d.req.Series, series)
	d.labels = slices.Grow(d.labels, lbls)
	d.samples = slices.Grow(d.samples, samples)
}

func (d *Decoder) decodeSeriesV1(buf []byte) error {
	var s Series
	lStart, sStart, hStart, eStart := len(d.labels), len(d.samples), len(d.hists), len(d.exemplars)
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		// A label or sample of less than 128 bytes, its tag and length
		// one byte each, as every label and sample of a typical series
		// is: read without NextField's general decoding of tag and
		// length.
		if len(buf) >= 2 && buf[0] == labelsTag && buf[1] < 0x80 {
			if end := 2 + int(buf[1]); end <= len(buf) {
				lb, err := decodeLabel(buf[2:end])
				if err != nil {
					return err
				}
				d.labels = append(d.labels, lb)
				buf = buf[end:]
				continue
			}
		}
		if len(buf) >= 2 && buf[0] == samplesTag && buf[1] < 0x80 {
			if end := 2 + int(buf[1]); end <= len(buf) {
				smp, err := decodeSample(buf[2:end])
				if err != nil {
					return err
				}
				d.samples = append(d.samples, smp)
				buf = buf[end:]
				continue
			}
		}
		if buf, err = fc.NextField(buf); err != nil {
			return protoErr("read TimeSeries field", err)
		}
		switch fc.FieldNum {
		case 1:
			data, ok := fc.MessageData()
			if !ok {
				return protoErr("TimeSeries.labels is not a message", nil)
			}
			lb, err := decodeLabel(data)
			if err != nil {
				return err
			}
			d.labels = append(d.labels, lb)
		case 2:
			data, ok := fc.MessageData()
			if !ok {
				return protoErr("TimeSeries.samples is not a message", nil)
			}
			smp, err := decodeSample(data)
			if err != nil {
				return err
			}
			d.samples = append(d.samples, smp)
		case 3:
			data, ok := fc.MessageData()
			if !ok {
				return protoErr("TimeSeries.exemplars is not a message", nil)
			}
			if err := d.decodeExemplarV1(data); err != nil {
				return err
			}
		case 4:
			data, ok := fc.MessageData()
			if !ok {
				return protoErr("TimeSeries.histograms is not a message", nil)
			}
			h, err := decodeHistogram(data)
			if err != nil {
				return err
			}
			d.hists = append(d.hists, h)
		}
	}
	s.Labels = d.labels[lStart:len(d.labels):len(d.labels)]
	s.Samples = d.samples[sStart:len(d.samples):len(d.samples)]
	s.Histograms = d.hists[hStart:len(d.hists):len(d.hists)]
	s.Exemplars = d.exemplars[eStart:len(d.exemplars):len(d.exemplars)]
	d.req.Series = append(d.req.Series, s)
	return nil
}

// Protobuf tags (field number << 3 | wire type 2, length-delimited) of
// TimeSeries.labels and .samples, and of Label.name and Label.value.
const (
	labelsTag     = 1<<3 | 2
	samplesTag    = 2<<3 | 2
	labelNameTag  = 1<<3 | 2
	labelValueTag = 2<<3 | 2
)

func decodeLabel(buf []byte) (Label, error) {
	// The layout every encoder writes for a short label: the name, then
	// a non-empty value, each under 128 bytes.
	if len(buf) >= 4 && buf[0] == labelNameTag && buf[1] < 0x80 {
		v := 2 + int(buf[1])
		if v+2 <= len(buf) && buf[v] == labelValueTag && buf[v+1] < 0x80 && v+2+int(buf[v+1]) == len(buf) {
			return Label{Name: bytesView(buf[2:v]), Value: bytesView(buf[v+2:])}, nil
		}
	}
	var lb Label
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return lb, protoErr("read Label field", err)
		}
		var ok bool
		switch fc.FieldNum {
		case 1:
			lb.Name, ok = fc.String()
		case 2:
			lb.Value, ok = fc.String()
		default:
			ok = true
		}
		if !ok {
			return lb, protoErr(fmt.Sprintf("Label field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	return lb, nil
}

// Protobuf tags of Sample.value (fixed64) and Sample.timestamp (varint).
const (
	sampleValueTag     = 1<<3 | 1
	sampleTimestampTag = 2 << 3 // wire type 0, varint
)

// decodeSample reads an RW 1.0 or 2.0 Sample (2.0 adds start_timestamp = 3).
func decodeSample(buf []byte) (Sample, error) {
	// The layout every encoder writes for a sample with a non-zero value
	// and timestamp and no start timestamp.
	if len(buf) >= 11 && buf[0] == sampleValueTag && buf[9] == sampleTimestampTag {
		if t, n := binary.Uvarint(buf[10:]); n == len(buf)-10 {
			return Sample{Value: math.Float64frombits(binary.LittleEndian.Uint64(buf[1:9])), Timestamp: int64(t)}, nil
		}
	}
	var s Sample
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return s, protoErr("read Sample field", err)
		}
		var ok bool
		switch fc.FieldNum {
		case 1:
			s.Value, ok = fc.Double()
		case 2:
			s.Timestamp, ok = fc.Int64()
		case 3:
			s.StartTimestamp, ok = fc.Int64()
		default:
			ok = true
		}
		if !ok {
			return s, protoErr(fmt.Sprintf("Sample field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	return s, nil
}

func (d *Decoder) decodeExemplarV1(buf []byte) error {
	var e Exemplar
	start := len(d.exLabels)
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return protoErr("read Exemplar field", err)
		}
		ok := true
		switch fc.FieldNum {
		case 1:
			var data []byte
			if data, ok = fc.MessageData(); ok {
				lb, err := decodeLabel(data)
				if err != nil {
					return err
				}
				d.exLabels = append(d.exLabels, lb)
			}
		case 2:
			e.Value, ok = fc.Double()
		case 3:
			e.Timestamp, ok = fc.Int64()
		}
		if !ok {
			return protoErr(fmt.Sprintf("Exemplar field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	e.Labels = d.exLabels[start:len(d.exLabels):len(d.exLabels)]
	d.exemplars = append(d.exemplars, e)
	return nil
}

// metricTypeFromProto maps the (shared) enum of RW 1.0 MetricMetadata and RW
// 2.0 Metadata to Prometheus' model type; unknown numbers become "unknown".
func metricTypeFromProto(v int32) model.MetricType {
	switch v {
	case 1:
		return model.MetricTypeCounter
	case 2:
		return model.MetricTypeGauge
	case 3:
		return model.MetricTypeHistogram
	case 4:
		return model.MetricTypeGaugeHistogram
	case 5:
		return model.MetricTypeSummary
	case 6:
		return model.MetricTypeInfo
	case 7:
		return model.MetricTypeStateset
	default:
		return model.MetricTypeUnknown
	}
}

func decodeMetadataV1(buf []byte) (FamilyMetadata, error) {
	m := FamilyMetadata{Metadata: Metadata{Type: model.MetricTypeUnknown}}
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return m, protoErr("read MetricMetadata field", err)
		}
		ok := true
		switch fc.FieldNum {
		case 1:
			var t int32
			if t, ok = fc.Enum(); ok {
				m.Type = metricTypeFromProto(t)
			}
		case 2:
			m.Family, ok = fc.String()
		case 4:
			m.Help, ok = fc.String()
		case 5:
			m.Unit, ok = fc.String()
		}
		if !ok {
			return m, protoErr(fmt.Sprintf("MetricMetadata field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	return m, nil
}

// decodeHistogram reads a native histogram of either version (the field
// numbers are the same; 2.0 adds start_timestamp = 17).
func decodeHistogram(buf []byte) (Histogram, error) {
	var (
		out                        Histogram
		isFloat                    bool
		countInt, zeroCountInt     uint64
		countFloat, zeroCountFloat float64
		sum, zeroThreshold         float64
		schema                     int32
		resetHint                  int32
		negSpans, posSpans         []histogram.Span
		negDeltas, posDeltas       []int64
		negCounts, posCounts       []float64
		customValues               []float64
		fc                         easyproto.FieldContext
		err                        error
	)
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return out, protoErr("read Histogram field", err)
		}
		ok := true
		switch fc.FieldNum {
		case 1:
			countInt, ok = fc.Uint64()
			isFloat = false
		case 2:
			countFloat, ok = fc.Double()
			isFloat = true
		case 3:
			sum, ok = fc.Double()
		case 4:
			schema, ok = fc.Sint32()
		case 5:
			zeroThreshold, ok = fc.Double()
		case 6:
			zeroCountInt, ok = fc.Uint64()
		case 7:
			zeroCountFloat, ok = fc.Double()
		case 8, 11:
			var data []byte
			if data, ok = fc.MessageData(); ok {
				sp, err := decodeSpan(data)
				if err != nil {
					return out, err
				}
				if fc.FieldNum == 8 {
					negSpans = append(negSpans, sp)
				} else {
					posSpans = append(posSpans, sp)
				}
			}
		case 9:
			negDeltas, ok = fc.UnpackSint64s(negDeltas)
		case 10:
			negCounts, ok = fc.UnpackDoubles(negCounts)
		case 12:
			posDeltas, ok = fc.UnpackSint64s(posDeltas)
		case 13:
			posCounts, ok = fc.UnpackDoubles(posCounts)
		case 14:
			resetHint, ok = fc.Enum()
		case 15:
			out.Timestamp, ok = fc.Int64()
		case 16:
			customValues, ok = fc.UnpackDoubles(customValues)
		case 17:
			out.StartTimestamp, ok = fc.Int64()
		}
		if !ok {
			return out, protoErr(fmt.Sprintf("Histogram field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	hint := histogram.CounterResetHint(resetHint)
	if isFloat {
		out.FH = &histogram.FloatHistogram{
			CounterResetHint: hint,
			Schema:           schema,
			ZeroThreshold:    zeroThreshold,
			ZeroCount:        zeroCountFloat,
			Count:            countFloat,
			Sum:              sum,
			PositiveSpans:    posSpans,
			PositiveBuckets:  posCounts,
			NegativeSpans:    negSpans,
			NegativeBuckets:  negCounts,
			CustomValues:     customValues,
		}
	} else {
		out.H = &histogram.Histogram{
			CounterResetHint: hint,
			Schema:           schema,
			ZeroThreshold:    zeroThreshold,
			ZeroCount:        zeroCountInt,
			Count:            countInt,
			Sum:              sum,
			PositiveSpans:    posSpans,
			PositiveBuckets:  posDeltas,
			NegativeSpans:    negSpans,
			NegativeBuckets:  negDeltas,
			CustomValues:     customValues,
		}
	}
	return out, nil
}

func decodeSpan(buf []byte) (histogram.Span, error) {
	var sp histogram.Span
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return sp, protoErr("read BucketSpan field", err)
		}
		ok := true
		switch fc.FieldNum {
		case 1:
			sp.Offset, ok = fc.Sint32()
		case 2:
			sp.Length, ok = fc.Uint32()
		}
		if !ok {
			return sp, protoErr(fmt.Sprintf("BucketSpan field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	return sp, nil
}
