package remotewrite

import (
	"errors"
	"fmt"
	"slices"

	"github.com/VictoriaMetrics/easyproto"
	"github.com/prometheus/common/model"
)

// errBadRef is wrapped into Series.Err for symbol-reference problems.
var errBadRef = errors.New("bad symbol reference")

// DecodeV2 decodes an io.prometheus.write.v2.Request. Symbol references are
// resolved into Series.Labels, Series.Metadata and Exemplar.Labels; a series
// with a bad reference gets Series.Err instead of failing the whole request,
// because the spec lets a receiver write the valid part. The symbols table may
// appear anywhere in the message, so series are decoded after it is known.
func (d *Decoder) DecodeV2(buf []byte) (*Request, error) {
	d.Reset()
	if cap(d.req.Series) == 0 {
		d.sizeV2(buf)
	}
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return nil, protoErr("read Request field", err)
		}
		switch fc.FieldNum {
		case 4:
			sym, ok := fc.String()
			if !ok {
				return nil, protoErr("Request.symbols is not a string", nil)
			}
			d.req.Symbols = append(d.req.Symbols, sym)
		case 5:
			data, ok := fc.MessageData()
			if !ok {
				return nil, protoErr("Request.timeseries is not a message", nil)
			}
			d.rawSeries = append(d.rawSeries, data)
		}
	}
	for _, data := range d.rawSeries {
		if err := d.decodeSeriesV2(data); err != nil {
			return nil, err
		}
	}
	return &d.req, nil
}

// sizeV2 is sizeV1 for an RW 2.0 request: a new Decoder's symbols, series,
// labels (half the label references) and samples are made at the request's
// size, counted in a pass over its fields.
func (d *Decoder) sizeV2(buf []byte) {
	var symbols, series, refs, samples int
	var fc, sc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			break
		}
		if fc.FieldNum == 4 {
			symbols++
			continue
		}
		if fc.FieldNum != 5 {
			continue
		}
		data, ok := fc.MessageData()
		if !ok {
			break
		}
		series++
		for len(data) > 0 {
			if data, err = sc.NextField(data); err != nil {
				break
			}
			switch sc.FieldNum {
			case 1:
				if packed, ok := sc.MessageData(); ok {
					// Packed varints: each ends at a byte below 0x80.
					for _, c := range packed {
						if c < 0x80 {
							refs++
						}
					}
				} else {
					refs++
				}
			case 2:
				samples++
			}
		}
	}
	d.req.Symbols = slices.Grow(d.req.Symbols, symbols)
	d.rawSeries = slices.Grow(d.rawSeries, series)
	d.req.Series = slices.Grow(d.req.Series, series)
	d.labels = slices.Grow(d.labels, refs/2)
	d.samples = slices.Grow(d.samples, samples)
}

func (d *Decoder) decodeSeriesV2(buf []byte) error {
	var s Series
	lStart, sStart, hStart, eStart := len(d.labels), len(d.samples), len(d.hists), len(d.exemplars)
	refStart := len(d.refs)
	var (
		helpRef, unitRef uint32
		fc               easyproto.FieldContext
		err              error
	)
	s.Metadata.Type = model.MetricTypeUnknown
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return protoErr("read TimeSeries field", err)
		}
		ok := true
		switch fc.FieldNum {
		case 1:
			d.refs, ok = fc.UnpackUint32s(d.refs)
		case 2:
			var data []byte
			if data, ok = fc.MessageData(); ok {
				smp, err := decodeSample(data)
				if err != nil {
					return err
				}
				d.samples = append(d.samples, smp)
			}
		case 3:
			var data []byte
			if data, ok = fc.MessageData(); ok {
				h, err := decodeHistogram(data)
				if err != nil {
					return err
				}
				d.hists = append(d.hists, h)
			}
		case 4:
			var data []byte
			if data, ok = fc.MessageData(); ok {
				if err := d.decodeExemplarV2(data); err != nil {
					return err
				}
			}
		case 5:
			var data []byte
			if data, ok = fc.MessageData(); ok {
				var typ int32
				if typ, helpRef, unitRef, err = decodeMetadataV2(data); err != nil {
					return err
				}
				s.Metadata.Type = metricTypeFromProto(typ)
			}
		case 6:
			s.CreatedTimestamp, ok = fc.Int64()
		}
		if !ok {
			return protoErr(fmt.Sprintf("TimeSeries field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	if s.Err == nil {
		s.Err = d.resolveLabels(d.refs[refStart:], &d.labels)
	}
	if s.Err == nil {
		if s.Metadata.Help, err = d.symbol(helpRef); err != nil {
			s.Err = fmt.Errorf("metadata help: %w", err)
		} else if s.Metadata.Unit, err = d.symbol(unitRef); err != nil {
			s.Err = fmt.Errorf("metadata unit: %w", err)
		}
	}
	d.refs = d.refs[:refStart]
	s.Labels = d.labels[lStart:len(d.labels):len(d.labels)]
	s.Samples = d.samples[sStart:len(d.samples):len(d.samples)]
	s.Histograms = d.hists[hStart:len(d.hists):len(d.hists)]
	s.Exemplars = d.exemplars[eStart:len(d.exemplars):len(d.exemplars)]
	d.req.Series = append(d.req.Series, s)
	return nil
}

func (d *Decoder) symbol(ref uint32) (string, error) {
	if int(ref) >= len(d.req.Symbols) {
		if ref == 0 {
			return "", nil // an empty table: ref 0 can only mean ""
		}
		return "", fmt.Errorf("%w: %d, the table has %d symbols", errBadRef, ref, len(d.req.Symbols))
	}
	return d.req.Symbols[ref], nil
}

// resolveLabels appends the labels named by name/value reference pairs to dst.
func (d *Decoder) resolveLabels(refs []uint32, dst *[]Label) error {
	if len(refs)%2 != 0 {
		return fmt.Errorf("%w: odd number of label references (%d)", errBadRef, len(refs))
	}
	n := uint32(len(d.req.Symbols))
	for i := 0; i < len(refs); i += 2 {
		nr, vr := refs[i], refs[i+1]
		if nr >= n || vr >= n {
			return fmt.Errorf("%w: label reference pair (%d, %d), the table has %d symbols", errBadRef, nr, vr, n)
		}
		*dst = append(*dst, Label{Name: d.req.Symbols[nr], Value: d.req.Symbols[vr]})
	}
	return nil
}

func (d *Decoder) decodeExemplarV2(buf []byte) error {
	var e Exemplar
	refStart := len(d.refs)
	var fc easyproto.FieldContext
	var err error
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return protoErr("read Exemplar field", err)
		}
		ok := true
		switch fc.FieldNum {
		case 1:
			d.refs, ok = fc.UnpackUint32s(d.refs)
		case 2:
			e.Value, ok = fc.Double()
		case 3:
			e.Timestamp, ok = fc.Int64()
		}
		if !ok {
			return protoErr(fmt.Sprintf("Exemplar field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	start := len(d.exLabels)
	if err := d.resolveLabels(d.refs[refStart:], &d.exLabels); err != nil {
		e.Err = fmt.Errorf("exemplar labels: %w", err)
		d.exLabels = d.exLabels[:start]
	}
	d.refs = d.refs[:refStart]
	e.Labels = d.exLabels[start:len(d.exLabels):len(d.exLabels)]
	d.exemplars = append(d.exemplars, e)
	return nil
}

func decodeMetadataV2(buf []byte) (typ int32, helpRef, unitRef uint32, err error) {
	var fc easyproto.FieldContext
	for len(buf) > 0 {
		if buf, err = fc.NextField(buf); err != nil {
			return 0, 0, 0, protoErr("read Metadata field", err)
		}
		ok := true
		switch fc.FieldNum {
		case 1:
			typ, ok = fc.Enum()
		case 3:
			helpRef, ok = fc.Uint32()
		case 4:
			unitRef, ok = fc.Uint32()
		}
		if !ok {
			return 0, 0, 0, protoErr(fmt.Sprintf("Metadata field %d has the wrong type", fc.FieldNum), nil)
		}
	}
	return typ, helpRef, unitRef, nil
}
