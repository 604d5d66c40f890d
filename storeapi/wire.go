package storeapi

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/thanos-io/thanos/pkg/store/storepb/prompb"
)

// The Query API's answers are most of a distributed query's work on a node
// after the tiers' read: 125 series of 721 samples a request for a 30-day
// aggregation at 1 h steps. gogoproto sizes a series three times before it
// writes it (the batcher's frame bound, the codec's buffer, the oneof's
// MarshalTo), through a call a sample each time; wireMessage writes the
// same bytes after one sizing pass, which the batcher's bound shares.
//
// QueryResponse and QueryRangeResponse have the same fields: a series is
// field 2 (timeseries), a batch field 4 (timeseries_batch, whose series are
// its field 1). A series is its labels (field 1: name 1, value 2), then its
// samples (field 2: value 1 as a fixed64, timestamp 2 as a varint), each
// field left out where it is zero, as proto3 and gogoproto do.
// TestWireMessageEqualsGogo holds the bytes to gogoproto's.

// wireMessage is a response already encoded: gogoCodec sends its bytes as
// they are.
type wireMessage []byte

const (
	tagSeries = 2<<3 | 2 // QueryResponse.timeseries, QueryRangeResponse.timeseries
	tagBatch  = 4<<3 | 2 // ...timeseries_batch
	tagInner  = 1<<3 | 2 // TimeSeriesBatch.series, TimeSeries.labels, Label.name
	tagSample = 2<<3 | 2 // TimeSeries.samples
	tagValue  = 2<<3 | 2 // Label.value
	tagFloat  = 1<<3 | 1 // Sample.value
	tagTime   = 2 << 3   // Sample.timestamp (wire type 0, a varint)
)

// wireSize is the encoded size of a series' message body, and false when
// wireMessage cannot encode it (exemplars or histograms: gogoproto does).
func wireSize(s *prompb.TimeSeries) (int, bool) {
	if len(s.Exemplars) > 0 || len(s.Histograms) > 0 {
		return 0, false
	}
	n := 0
	for _, l := range s.Labels {
		n += field(labelSize(l.Name, l.Value))
	}
	for _, x := range s.Samples {
		n += field(sampleSize(x))
	}
	return n, true
}

// encodeSeries is the message of one series (batch false) or of a batch,
// each series of the size wireSize gave (sizes[i] for series[i]).
func encodeSeries(series []*prompb.TimeSeries, sizes []int, batch bool) wireMessage {
	body := 0
	for _, n := range sizes {
		body += field(n)
	}
	total := body
	if batch {
		total = field(body)
	}
	b := make([]byte, 0, total)
	if batch {
		b = append(b, tagBatch)
		b = binary.AppendUvarint(b, uint64(body))
	}
	for i, s := range series {
		if batch {
			b = append(b, tagInner)
		} else {
			b = append(b, tagSeries)
		}
		b = binary.AppendUvarint(b, uint64(sizes[i]))
		for _, l := range s.Labels {
			b = append(b, tagInner)
			b = binary.AppendUvarint(b, uint64(labelSize(l.Name, l.Value)))
			if l.Name != "" {
				b = append(b, tagInner)
				b = binary.AppendUvarint(b, uint64(len(l.Name)))
				b = append(b, l.Name...)
			}
			if l.Value != "" {
				b = append(b, tagValue)
				b = binary.AppendUvarint(b, uint64(len(l.Value)))
				b = append(b, l.Value...)
			}
		}
		for _, x := range s.Samples {
			b = append(b, tagSample, byte(sampleSize(x))) // a sample is at most 20 bytes
			if x.Value != 0 {
				b = append(b, tagFloat)
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x.Value))
			}
			if x.Timestamp != 0 {
				b = append(b, tagTime)
				b = binary.AppendUvarint(b, uint64(x.Timestamp)) //nolint:gosec // two's complement, as protobuf's int64
			}
		}
	}
	return b
}

// field is the size of a length-delimited field whose body is n bytes.
func field(n int) int { return 1 + uvarintSize(uint64(n)) + n } //nolint:gosec // n is a size

func labelSize(name, value string) int {
	n := 0
	if name != "" {
		n += field(len(name))
	}
	if value != "" {
		n += field(len(value))
	}
	return n
}

func sampleSize(x prompb.Sample) int {
	n := 0
	if x.Value != 0 {
		n += 9
	}
	if x.Timestamp != 0 {
		n += 1 + uvarintSize(uint64(x.Timestamp)) //nolint:gosec // two's complement, as protobuf's int64
	}
	return n
}

func uvarintSize(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }
