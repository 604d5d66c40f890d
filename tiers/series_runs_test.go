package tiers

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// runsFile writes rows (sorted, as sortedRows returns them) in row groups
// of rowsPerGroup with kv as the strata.series_runs value (none when nil).
func runsFile(t *testing.T, rows []parquetRow, rowsPerGroup int64, kv *string) *parquet.File {
	t.Helper()
	var buf bytes.Buffer
	opts := []parquet.WriterOption{parquet.MaxRowsPerRowGroup(rowsPerGroup)}
	if kv != nil {
		opts = append(opts, parquet.KeyValueMetadata(seriesRunsKey, *kv))
	}
	w := parquet.NewGenericWriter[parquetRow](&buf, opts...)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return pf
}

// encodeSeriesRuns is the seriesRunsKey value for rows, which are sorted
// (sortedRows), as partitionWriter makes it.
func encodeSeriesRuns(rows []parquetRow) string {
	var b []byte
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].SeriesID == rows[i].SeriesID && rows[j].Labels == rows[i].Labels {
			j++
		}
		b = appendSeriesRun(b, rows[i].SeriesID, j-i)
		i = j
	}
	return base64.StdEncoding.EncodeToString(b)
}

func TestSeriesRuns(t *testing.T) {
	// Series 7 (5 rows), 3 (4 rows), 3 again with other labels (a hash
	// collision: its own run), 9 (1 row); row groups of 4 rows cut runs.
	var rows []parquetRow
	for _, s := range []struct {
		id     int64
		labels string
		n      int
	}{{7, "a", 5}, {3, "b", 4}, {3, "c", 2}, {9, "d", 1}} {
		for range s.n {
			rows = append(rows, parquetRow{MetricName: "m", Labels: s.labels, SeriesID: s.id})
		}
	}
	kv := encodeSeriesRuns(rows)
	got, err := rowGroupRuns(runsFile(t, rows, 4, &kv))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]seriesRun{{{7, 4}}, {{7, 1}, {3, 3}}, {{3, 1}, {3, 2}, {9, 1}}}
	if len(got) != len(want) {
		t.Fatalf("%d row groups, want %d: %v", len(got), len(want), got)
	}
	for g := range want {
		if len(got[g]) != len(want[g]) {
			t.Fatalf("row group %d: runs %v, want %v", g, got[g], want[g])
		}
		for i := range want[g] {
			if got[g][i] != want[g][i] {
				t.Fatalf("row group %d: runs %v, want %v", g, got[g], want[g])
			}
		}
	}
	// Row groups of 2 rows: series 7's run spans three of them.
	got, err = rowGroupRuns(runsFile(t, rows, 2, &kv))
	if err != nil {
		t.Fatal(err)
	}
	want = [][]seriesRun{{{7, 2}}, {{7, 2}}, {{7, 1}, {3, 1}}, {{3, 2}}, {{3, 1}, {3, 1}}, {{3, 1}, {9, 1}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("row groups of 2: runs %v, want %v", got, want)
	}
	if got, err := rowGroupRuns(runsFile(t, rows, 4, nil)); got != nil || err != nil {
		t.Fatalf("a file without runs: %v, %v; want nil, nil", got, err)
	}
	run := func(id int64, n int) []byte { return appendSeriesRun(nil, id, n) }
	enc := base64.StdEncoding.EncodeToString
	for name, bad := range map[string]string{
		"not base64":     "!!",
		"truncated run":  enc(run(7, 5)[:6]),
		"too few rows":   enc(run(7, 11)),
		"too many rows":  enc(append(run(7, 11), run(9, 2)...)),
		"zero-row run":   enc(append(run(7, 0), run(9, 12)...)),
		"bad row count":  enc(append(binary.LittleEndian.AppendUint64(nil, 7), 0xff)),
		"more than file": enc(run(7, 13)),
	} {
		if _, err := rowGroupRuns(runsFile(t, rows, 4, &bad)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestStoredZstd: nearly incompressible pages are stored, others compressed
// as before; both decode with parquet-go's own zstd codec, as any reader's.
func TestStoredZstd(t *testing.T) {
	c := bestCodec
	rng := rand.New(rand.NewPCG(3, 4)) //nolint:gosec // test data
	random := make([]byte, 1<<18)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	repetitive := bytes.Repeat([]byte("DCGM_FI_DEV_GPU_UTIL 42\n"), 1<<13)
	// Power in W with mW resolution: compressible to about 0.4, kept compressed.
	milliwatts := make([]byte, 0, 1<<18)
	for i := range 1 << 15 {
		milliwatts = binary.LittleEndian.AppendUint64(milliwatts, math.Float64bits(math.Round((350+40*math.Sin(float64(i)*1.7))*1000)/1000))
	}
	plain := &zstd.Codec{}
	for name, tc := range map[string]struct {
		src      []byte
		maxRatio float64
	}{"random": {random, 1.001}, "repetitive": {repetitive, 0.01}, "milliwatts": {milliwatts, 0.5}} {
		out, err := c.Encode(nil, tc.src)
		if err != nil {
			t.Fatal(err)
		}
		if r := float64(len(out)) / float64(len(tc.src)); r > tc.maxRatio {
			t.Errorf("%s: ratio %.4f, want at most %.4f", name, r, tc.maxRatio)
		}
		back, err := plain.Decode(nil, out)
		if err != nil || !bytes.Equal(back, tc.src) {
			t.Errorf("%s: does not decode back (%v)", name, err)
		}
	}
	// Full-precision doubles: the best level saves a few percent with
	// Huffman-coded literals, under the eighth the codec asks for, so the
	// page is stored instead (and still decodes).
	sines := make([]byte, 0, 1<<18)
	for i := range 1 << 15 {
		sines = binary.LittleEndian.AppendUint64(sines, math.Float64bits(50+40*math.Sin(float64(i)/60)))
	}
	best, err := (&zstd.Codec{Level: zstd.SpeedBestCompression}).Encode(nil, sines)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.Encode(nil, sines)
	if err != nil {
		t.Fatal(err)
	}
	if len(best) >= len(sines)-len(sines)/8 && len(best) < len(sines)*99/100 && len(stored) >= len(sines) {
		if back, err := plain.Decode(nil, stored); err != nil || !bytes.Equal(back, sines) {
			t.Errorf("stored page does not decode back (%v)", err)
		}
	} else {
		t.Errorf("sines: best level %d B, codec %d B, of %d: want best within (7/8, 99/100) of the input and the codec's output stored", len(best), len(stored), len(sines))
	}
}
