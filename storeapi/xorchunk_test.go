package storeapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/thanos-io/thanos/pkg/store/storepb"
)

// chunkencBytes is what Prometheus' XOR appender writes for the samples.
func chunkencBytes(t testing.TB, ts []int64, vs []float64) []byte {
	t.Helper()
	c := chunkenc.NewXORChunk()
	app, err := c.Appender()
	if err != nil {
		t.Fatal(err)
	}
	for i := range ts {
		app.Append(0, ts[i], vs[i])
	}
	return c.Bytes()
}

// encodeAll writes the samples as one chunk after some bytes already in
// the buffer (as the chunks of a message share it).
func encodeAll(ts []int64, vs []float64) []byte {
	e := xorEncoder{buf: []byte{0xaa, 0xbb, 0xcc}}
	e.begin()
	for i := range ts {
		e.append(ts[i], vs[i])
	}
	data, _, _ := e.end()
	return data
}

// checkXOR compares the encoder's chunk with chunkenc's, and reads it back.
func checkXOR(t *testing.T, name string, ts []int64, vs []float64) {
	t.Helper()
	want := chunkencBytes(t, ts, vs)
	got := encodeAll(ts, vs)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from chunkenc's %d (first at %d)", name, len(got), len(want), firstDiff(got, want))
	}
	c, err := chunkenc.FromData(chunkenc.EncXOR, got)
	if err != nil {
		t.Fatal(err)
	}
	it := c.Iterator(nil)
	for i := 0; it.Next() == chunkenc.ValFloat; i++ {
		gt, gv := it.At()
		if gt != ts[i] || math.Float64bits(gv) != math.Float64bits(vs[i]) {
			t.Fatalf("%s: sample %d read back as %v@%d, want %v@%d", name, i, gv, gt, vs[i], ts[i])
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestXOREncoderMatchesChunkenc: the encoder writes chunkenc's XOR chunks
// byte for byte, for regular and irregular timestamps (every
// delta-of-delta bucket), values that repeat, change in few bits, or in
// all (NaN, stale markers, infinities), and chunks of 1 to 65,535 samples.
func TestXOREncoderMatchesChunkenc(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	gen := func(n int, step func(i int) int64, val func(i int) float64) ([]int64, []float64) {
		ts, vs := make([]int64, n), make([]float64, n)
		t0 := int64(1767225600000) - int64(r.IntN(1e9))
		for i := range n {
			ts[i] = t0
			t0 += step(i)
			vs[i] = val(i)
		}
		return ts, vs
	}
	specials := []float64{math.NaN(), math.Float64frombits(value.StaleNaN), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), math.MaxFloat64, math.SmallestNonzeroFloat64}
	for _, tc := range []struct {
		name string
		n    int
		step func(i int) int64
		val  func(i int) float64
	}{
		{"one sample", 1, func(int) int64 { return 15_000 }, func(int) float64 { return 42 }},
		{"two samples", 2, func(int) int64 { return 15_000 }, func(int) float64 { return r.Float64() }},
		{"regular, constant", 480, func(int) int64 { return 3_600_000 }, func(int) float64 { return 40 }},
		{"regular, gauge", 480, func(int) int64 { return 3_600_000 }, func(i int) float64 { return float64(40 + i%30) }},
		{"a window's first and last (alternating)", 480, func(i int) int64 { return []int64{3_599_000, 1_000}[i%2] }, func(i int) float64 { return float64(40 + i%7) }},
		{"jittered scrapes", 1000, func(int) int64 { return 15_000 + int64(r.IntN(200)) - 100 }, func(i int) float64 { return float64(i) * 1.5 }},
		{"every bucket", 2000, func(int) int64 { return []int64{1, 1 << 12, 1 << 15, 1 << 18, 1 << 30, 1 << 40}[r.IntN(6)] }, func(int) float64 { return r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20)) }},
		{"specials", 300, func(int) int64 { return 1_000 }, func(int) float64 { return specials[r.IntN(len(specials))] }},
		{"counter", 4000, func(int) int64 { return 60_000 }, func(i int) float64 { return float64(i * i) }},
		{"the most a chunk holds", math.MaxUint16, func(int) int64 { return 15_000 }, func(int) float64 { return float64(r.IntN(100)) }},
	} {
		ts, vs := gen(tc.n, tc.step, tc.val)
		checkXOR(t, tc.name, ts, vs)
	}
}

// FuzzXOREncoder: any increasing timestamps and any values encode as
// chunkenc encodes them.
func FuzzXOREncoder(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Fuzz(func(t *testing.T, data []byte) {
		var ts []int64
		var vs []float64
		last := int64(-1 << 40)
		for len(data) >= 12 && len(ts) < 2000 {
			d := int64(binary.LittleEndian.Uint32(data)) + 1 // strictly increasing
			last += d
			ts = append(ts, last)
			vs = append(vs, math.Float64frombits(binary.LittleEndian.Uint64(data[4:])))
			data = data[12:]
		}
		if len(ts) == 0 {
			return
		}
		checkXOR(t, "fuzz", ts, vs)
	})
}

// listStore serves fixed series as the stitched tiers.
type listStore struct{ listQueryable }

func (l listStore) ResolutionQuerier(int64, int64, int64, time.Duration) storage.Querier {
	return listQuerier(l.listQueryable)
}
func (l listStore) MinTime() (int64, bool) { return 0, true }

// TestSeriesChunks: a Series answer carries every sample of its series, in
// XOR chunks of at most samplesPerChunk samples, frames of about
// maxFrameBytes (a series of random values spans several), batched or one
// series a message; a series that turns into native histograms sends its
// floats in XOR chunks and the rest in histogram chunks.
func TestSeriesChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var want []gotSeries
	var list []storage.Series
	for i, n := range []int{1, samplesPerChunk, samplesPerChunk + 1, 3000, 150_000} {
		l := labels.FromStrings("__name__", "m", "i", fmt.Sprint(i))
		var ss []chunks.Sample
		var fs []fsample
		for j := range n {
			s := fsample{int64(j)*15_000 + int64(r.IntN(100)), r.NormFloat64()}
			ss, fs = append(ss, s), append(fs, s)
		}
		list = append(list, storage.NewListSeries(l, ss))
		want = append(want, gotSeries{lbls: labels.NewBuilder(l).Set("replica", "a").Set("shard", "1").Labels(), samples: fs})
	}
	h := &histogram.Histogram{Count: 3, Sum: 2, PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []int64{3}}
	mixed := []chunks.Sample{fsample{1000, 1}, fsample{2000, 2}, hsample{3000, h}, hsample{4000, h}}
	list = append(list, storage.NewListSeries(labels.FromStrings("__name__", "m", "i", "mixed"), mixed))
	s, err := New(shardConfig(), listStore{listQueryable{list}}, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := storepb.NewStoreClient(serve(t, s, nil))
	for _, batch := range []int64{0, 64} {
		req := &storepb.SeriesRequest{MinTime: 0, MaxTime: math.MaxInt64, Matchers: []storepb.LabelMatcher{re("i", "[0-9]+")}, ResponseBatchSize: batch}
		got, _, err := series(t, c, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("batch %d: %d series, want %d", batch, len(got), len(want))
		}
		for i := range want {
			if !labels.Equal(got[i].lbls, want[i].lbls) || !slices.EqualFunc(got[i].samples, want[i].samples, func(a, b fsample) bool {
				return a.t == b.t && math.Float64bits(a.f) == math.Float64bits(b.f)
			}) {
				t.Fatalf("batch %d: series %s: %d samples, want %s's %d", batch, got[i].lbls, len(got[i].samples), want[i].lbls, len(want[i].samples))
			}
		}
	}

	// The chunks' sizes and frames, and the mixed series.
	ctx := context.Background()
	stream, err := c.Series(ctx, &storepb.SeriesRequest{MinTime: 0, MaxTime: math.MaxInt64, Matchers: []storepb.LabelMatcher{re("i", "4|mixed")}})
	if err != nil {
		t.Fatal(err)
	}
	var frames4 int
	var encs []storepb.Chunk_Encoding
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sr := resp.GetSeries()
		if PromLabels(sr.Labels).Get("i") == "4" {
			frames4++
			for _, ch := range sr.Chunks {
				if n := int(binary.BigEndian.Uint16(ch.Raw.Data)); n > samplesPerChunk {
					t.Fatalf("a chunk of %d samples", n)
				}
			}
			continue
		}
		for _, ch := range sr.Chunks {
			encs = append(encs, ch.Raw.Type)
		}
	}
	if frames4 < 2 {
		t.Errorf("a series of 150,000 random values in %d frame(s), want several of about %d bytes", frames4, maxFrameBytes)
	}
	if !slices.Equal(encs, []storepb.Chunk_Encoding{storepb.Chunk_XOR, storepb.Chunk_HISTOGRAM}) {
		t.Errorf("the mixed series' chunks: %v, want an XOR chunk then a histogram chunk", encs)
	}
}
