package storeapi

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/thanos-io/thanos/pkg/api/query/querypb"
	"github.com/thanos-io/thanos/pkg/store/labelpb"
	"github.com/thanos-io/thanos/pkg/store/storepb/prompb"
)

// TestWireMessageEqualsGogo: encodeSeries writes, for random series (labels
// with long and empty names and values, samples with zero, negative zero,
// NaN, infinite and random values at zero, negative and large
// timestamps), the bytes gogoproto marshals for the same QueryResponse and
// QueryRangeResponse, one series a message and in batches; series with
// exemplars or histograms are left to gogoproto.
func TestWireMessageEqualsGogo(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 51))
	values := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 1, -1, 0.1, math.MaxFloat64, math.SmallestNonzeroFloat64}
	times := []int64{0, -1, 1, 127, 128, math.MaxInt64, math.MinInt64, 1_772_323_200_000}
	str := func() string {
		switch rng.IntN(4) {
		case 0:
			return ""
		case 1:
			return strings.Repeat("x", 100+rng.IntN(300)) // a two-byte length
		}
		return strings.Repeat("ab", rng.IntN(8))
	}
	series := func() *prompb.TimeSeries {
		s := &prompb.TimeSeries{}
		for range rng.IntN(6) {
			s.Labels = append(s.Labels, labelpb.ZLabel{Name: str(), Value: str()})
		}
		for range rng.IntN(40) {
			x := prompb.Sample{Value: values[rng.IntN(len(values))], Timestamp: times[rng.IntN(len(times))]}
			if rng.IntN(2) == 0 {
				x.Value = rng.NormFloat64() * 1e6
			}
			if rng.IntN(2) == 0 {
				x.Timestamp = rng.Int64() - math.MaxInt64/2
			}
			s.Samples = append(s.Samples, x)
		}
		return s
	}
	mustMarshal := func(m interface{ Marshal() ([]byte, error) }) []byte {
		b, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for round := range 500 {
		batch := make([]*prompb.TimeSeries, 1+rng.IntN(5))
		sizes := make([]int, len(batch))
		for i := range batch {
			batch[i] = series()
			n, ok := wireSize(batch[i])
			if !ok {
				t.Fatalf("round %d: a series of floats has no wire size", round)
			}
			sizes[i] = n
			if want := batch[i].Size(); n != want {
				t.Fatalf("round %d: wireSize %d, gogoproto's %d", round, n, want)
			}
		}
		one := encodeSeries(batch[:1], sizes[:1], false)
		if want := mustMarshal(querypb.NewQueryRangeResponse(batch[0])); !bytes.Equal(one, want) {
			t.Fatalf("round %d: a QueryRangeResponse's series:\n got %x\nwant %x", round, []byte(one), want)
		}
		if want := mustMarshal(querypb.NewQueryResponse(batch[0])); !bytes.Equal(one, want) {
			t.Fatalf("round %d: a QueryResponse's series:\n got %x\nwant %x", round, []byte(one), want)
		}
		all := encodeSeries(batch, sizes, true)
		if want := mustMarshal(querypb.NewQueryRangeBatchResponse(batch)); !bytes.Equal(all, want) {
			t.Fatalf("round %d: a QueryRangeResponse's batch of %d:\n got %x\nwant %x", round, len(batch), []byte(all), want)
		}
		if want := mustMarshal(querypb.NewQueryBatchResponse(batch)); !bytes.Equal(all, want) {
			t.Fatalf("round %d: a QueryResponse's batch of %d:\n got %x\nwant %x", round, len(batch), []byte(all), want)
		}
		if got, err := Codec().Marshal(all); err != nil || !bytes.Equal(got, all) {
			t.Fatalf("round %d: the codec changed an encoded message (%v)", round, err)
		}
	}
	for _, s := range []*prompb.TimeSeries{
		{Samples: []prompb.Sample{{Value: 1, Timestamp: 1}}, Histograms: []prompb.Histogram{{Timestamp: 2}}},
		{Samples: []prompb.Sample{{Value: 1, Timestamp: 1}}, Exemplars: []prompb.Exemplar{{Value: 1, Timestamp: 1}}},
	} {
		if _, ok := wireSize(s); ok {
			t.Errorf("a series with histograms or exemplars has a wire size: gogoproto must encode it")
		}
	}
}

// TestSeriesBatcherEncodes: the batcher gives send the wire sizes of a
// batch of float series, and none for a batch holding a series with a
// histogram, which gogoproto encodes; frames are bounded either way.
func TestSeriesBatcherEncodes(t *testing.T) {
	floats := &prompb.TimeSeries{Labels: []labelpb.ZLabel{{Name: "a", Value: "b"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: 1000}}}
	hist := &prompb.TimeSeries{Histograms: []prompb.Histogram{{Timestamp: 1000}}}
	type sent struct {
		n     int
		sizes []int
	}
	var got []sent
	b := seriesBatcher{size: 2, send: func(s []*prompb.TimeSeries, sizes []int) error {
		got = append(got, sent{len(s), append([]int(nil), sizes...)})
		return nil
	}}
	for _, s := range []*prompb.TimeSeries{floats, floats, floats, hist, floats} {
		if err := b.add(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.flush(); err != nil {
		t.Fatal(err)
	}
	n, _ := wireSize(floats)
	want := []sent{{2, []int{n, n}}, {2, nil}, {1, []int{n}}}
	if len(got) != len(want) {
		t.Fatalf("sent %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].n != want[i].n || !slicesEqual(got[i].sizes, want[i].sizes) {
			t.Fatalf("sent %+v, want %+v", got, want)
		}
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
