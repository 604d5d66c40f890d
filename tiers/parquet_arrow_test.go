package tiers_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

// TestParquetIndependentReader reads a minute partition with the Apache
// arrow-go Parquet implementation (independent of parquet-go, which wrote
// it) and checks what docs/format/minute.md promises: the numbers, the sort
// order, zstd, statistics, the page index, the bloom filter on metric_name
// and the TIMESTAMP(ms) logical type. The numbers are checked as an analyst
// gets them: a null aggregate is replaced by the rule of schema version 2
// (docs/format/hour-parquet.md), written out here independently of Strata's
// reader, and the result must be the window's value bit for bit.
func TestParquetIndependentReader(t *testing.T) {
	dir := t.TempDir()
	cfg := tiers.DefaultMinuteConfig(dir)
	cfg.RowsPerRowGroup = 300 // several row groups, so ordering across them is checked too
	r := openTestRollup(t, cfg, nil)
	w := newWorkload(testT0, 1)
	part := testT0 + 5*hourMs
	want := map[string]map[int64]tiers.Window{} // labels JSON -> start -> window
	var series []tiers.SeriesWindows
	var totalCount int64
	for _, s := range w.series {
		var ws []tiers.Window
		for _, win := range s.minuteWindows(t, w.start, w.end) {
			if win.Start >= part && win.Start < part+hourMs {
				ws = append(ws, win)
			}
		}
		series = append(series, tiers.SeriesWindows{Labels: s.lbls, Windows: ws})
		js, err := json.Marshal(s.lbls)
		if err != nil {
			t.Fatal(err)
		}
		m := map[int64]tiers.Window{}
		for _, win := range ws {
			m[win.Start] = win
			totalCount += int64(win.Count)
		}
		want[string(js)] = m
	}
	if err := r.WritePartition(part, series); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "p-20260105T0500Z.parquet")
	rdr, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rdr.Close() }()
	md := rdr.MetaData()
	nRows := 0
	for _, m := range want {
		nRows += len(m)
	}
	if md.NumRows != int64(nRows) || md.NumRowGroups() < 2 {
		t.Fatalf("rows %d (want %d), row groups %d", md.NumRows, nRows, md.NumRowGroups())
	}
	col := func(name string) int {
		i := md.Schema.ColumnIndexByName(name)
		if i < 0 {
			t.Fatalf("column %s missing", name)
		}
		return i
	}
	if lt, ok := md.Schema.Column(col("start")).LogicalType().(schema.TimestampLogicalType); !ok || lt.TimeUnit() != schema.TimeUnitMillis || !lt.IsAdjustedToUTC() {
		t.Fatalf("start logical type %v", md.Schema.Column(col("start")).LogicalType())
	}
	if v := md.KeyValueMetadata().FindValue("strata.schema_version"); v == nil || *v != "2" {
		t.Fatalf("schema version metadata %v", v)
	}
	// The derivable aggregates are optional columns, everything else required.
	for _, name := range []string{"sum", "min", "max", "first", "increase", "last", "count", "start"} {
		want := int16(0)
		if name != "last" && name != "count" && name != "start" {
			want = 1
		}
		if got := md.Schema.Column(col(name)).MaxDefinitionLevel(); got != want {
			t.Fatalf("column %s: max definition level %d, want %d", name, got, want)
		}
	}

	bloom := rdr.GetBloomFilterReader()
	pageIndex := rdr.GetPageIndexReader()
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		sc := rg.SortingColumns()
		if len(sc) != 3 || int(sc[0].ColumnIdx) != col("metric_name") || int(sc[1].ColumnIdx) != col("series_id") || int(sc[2].ColumnIdx) != col("start") || sc[0].Descending {
			t.Fatalf("row group %d sorting columns %+v", g, sc)
		}
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Compression() != compress.Codecs.Zstd {
				t.Fatalf("row group %d column %s compression %v", g, cc.PathInSchema(), cc.Compression())
			}
		}
		for _, name := range []string{"metric_name", "start", "count", "sum"} {
			cc, err := rg.ColumnChunk(col(name))
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := cc.StatsSet(); !ok || err != nil {
				t.Fatalf("row group %d column %s: no statistics (%v)", g, name, err)
			}
			if cc.GetColumnIndexLocation() == nil || cc.GetOffsetIndexLocation() == nil {
				t.Fatalf("row group %d column %s: no page index", g, name)
			}
		}
		pir, err := pageIndex.RowGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		ci, err := pir.GetColumnIndex(col("start"))
		if err != nil || ci == nil {
			t.Fatalf("row group %d: column index of start unreadable: %v", g, err)
		}
		br, err := bloom.RowGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		bf, err := br.GetColumnBloomFilter(col("metric_name"))
		if err != nil || bf == nil {
			t.Fatalf("row group %d: no bloom filter on metric_name: %v", g, err)
		}
		typed := metadata.TypedBloomFilter[parquet.ByteArray]{BloomFilter: bf}
		if typed.Check(parquet.ByteArray("no_such_metric_anywhere")) {
			t.Errorf("row group %d: bloom filter claims an absent metric", g)
		}
		stats, err := func() (metadata.TypedStatistics, error) {
			cc, err := rg.ColumnChunk(col("metric_name"))
			if err != nil {
				return nil, err
			}
			return cc.Statistics()
		}()
		if err != nil {
			t.Fatal(err)
		}
		if bs, ok := stats.(*metadata.ByteArrayStatistics); ok && bs.HasMinMax() && !typed.Check(bs.Min()) {
			t.Errorf("row group %d: bloom filter misses its own min metric %s", g, bs.Min())
		}
	}

	// The data, through pqarrow.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	tbl, err := pqarrow.ReadTable(context.Background(), f, parquet.NewReaderProperties(memory.DefaultAllocator), pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	strs := func(name string) []string {
		var out []string
		for _, c := range tbl.Column(tbl.Schema().FieldIndices(name)[0]).Data().Chunks() {
			a := c.(*array.String)
			for i := range a.Len() {
				out = append(out, a.Value(i))
			}
		}
		return out
	}
	ints := func(name string) []int64 {
		var out []int64
		for _, c := range tbl.Column(tbl.Schema().FieldIndices(name)[0]).Data().Chunks() {
			switch a := c.(type) {
			case *array.Int64:
				out = append(out, a.Int64Values()...)
			case *array.Int32:
				for _, v := range a.Int32Values() {
					out = append(out, int64(v))
				}
			case *array.Timestamp:
				for _, v := range a.TimestampValues() {
					out = append(out, int64(v))
				}
			default:
				t.Fatalf("column %s: unexpected arrow type %T", name, c)
			}
		}
		return out
	}
	// floats returns a double column and, per row, whether it is null.
	floats := func(name string) ([]float64, []bool) {
		var out []float64
		var null []bool
		for _, c := range tbl.Column(tbl.Schema().FieldIndices(name)[0]).Data().Chunks() {
			a := c.(*array.Float64)
			out = append(out, a.Float64Values()...)
			for i := range a.Len() {
				null = append(null, a.IsNull(i))
			}
		}
		return out, null
	}
	bools := func(name string) []bool {
		var out []bool
		for _, c := range tbl.Column(tbl.Schema().FieldIndices(name)[0]).Data().Chunks() {
			a := c.(*array.Boolean)
			for i := range a.Len() {
				out = append(out, a.Value(i))
			}
		}
		return out
	}
	if typ := tbl.Schema().Field(tbl.Schema().FieldIndices("start")[0]).Type; typ.ID() != arrow.TIMESTAMP {
		t.Fatalf("start read as %s", typ)
	}
	names, lbls, gpus := strs("metric_name"), strs("labels"), tbl.Column(tbl.Schema().FieldIndices("gpu")[0]).Data().Chunks()
	ids, starts, firstTs, lastTs, counts, resets := ints("series_id"), ints("start"), ints("first_ts"), ints("last_ts"), ints("count"), ints("resets")
	sums, sumNull := floats("sum")
	mins, minNull := floats("min")
	maxs, maxNull := floats("max")
	firsts, firstNull := floats("first")
	lasts, lastNull := floats("last")
	incs, incNull := floats("increase")
	stale := bools("stale")
	// The rules of schema version 2, in the order the docs give them.
	nulls := map[string]int{}
	for i := range lasts {
		if lastNull[i] {
			t.Fatalf("row %d: last is null", i)
		}
		if firstNull[i] {
			firsts[i] = lasts[i]
			nulls["first"]++
		}
		if minNull[i] {
			mins[i] = math.Min(firsts[i], lasts[i])
			nulls["min"]++
		}
		if maxNull[i] {
			maxs[i] = math.Max(firsts[i], lasts[i])
			nulls["max"]++
		}
		if incNull[i] {
			incs[i] = lasts[i] - firsts[i]
			nulls["increase"]++
		}
		if sumNull[i] {
			sums[i] = float64(counts[i]) * lasts[i]
			nulls["sum"]++
		}
	}
	// The workload has counters without resets (min, max, increase derived)
	// and gauges that stay flat for a minute (first, sum derived).
	for _, c := range []string{"first", "min", "max", "increase", "sum"} {
		if nulls[c] == 0 {
			t.Errorf("column %s has no nulls: the rule is not exercised", c)
		}
	}
	t.Logf("nulls per column (of %d rows): %v", len(lasts), nulls)
	var sumCount int64
	gpuNulls := 0
	for _, c := range gpus {
		gpuNulls += c.NullN()
	}
	wantNulls := 0
	for i := range names {
		sumCount += counts[i]
		var lm map[string]string
		if err := json.Unmarshal([]byte(lbls[i]), &lm); err != nil {
			t.Fatalf("row %d labels %q: %v", i, lbls[i], err)
		}
		if lm["gpu"] == "" {
			wantNulls++
		}
		if lm["__name__"] != names[i] || ids[i] != int64(labels.StableHash(labels.FromMap(lm))) { //nolint:gosec // same conversion as the writer
			t.Fatalf("row %d: metric %s / series_id %d do not match labels %s", i, names[i], ids[i], lbls[i])
		}
		if i > 0 {
			prev := []any{names[i-1], ids[i-1], starts[i-1]}
			if names[i] < names[i-1] || (names[i] == names[i-1] && (ids[i] < ids[i-1] || (ids[i] == ids[i-1] && starts[i] <= starts[i-1]))) {
				t.Fatalf("row %d out of order after %v", i, prev)
			}
		}
		win, ok := want[lbls[i]][starts[i]]
		if !ok {
			t.Fatalf("row %d: unexpected window %s @ %d", i, lbls[i], starts[i])
		}
		got := tiers.Window{Start: starts[i], FirstT: firstTs[i], LastT: lastTs[i], Count: uint32(counts[i]), Sum: sums[i], Min: mins[i], Max: maxs[i], //nolint:gosec // small
			First: firsts[i], Last: lasts[i], Increase: incs[i], Resets: uint32(resets[i]), Stale: stale[i]} //nolint:gosec // small
		if !sameWindow(got, win) {
			t.Fatalf("row %d: got %+v want %+v", i, got, win)
		}
	}
	if sumCount != totalCount || len(names) != nRows {
		t.Fatalf("sum(count) %d want %d; rows %d want %d", sumCount, totalCount, len(names), nRows)
	}
	if gpuNulls != wantNulls || wantNulls == 0 {
		t.Fatalf("gpu column has %d nulls, want %d (series without the label)", gpuNulls, wantNulls)
	}
}

// sameWindow compares windows field by field, floats by their bits (NaN
// payloads and the sign of zero included).
func sameWindow(a, b tiers.Window) bool {
	f := math.Float64bits
	return a.Start == b.Start && a.FirstT == b.FirstT && a.LastT == b.LastT && a.Count == b.Count &&
		f(a.Sum) == f(b.Sum) && f(a.Min) == f(b.Min) && f(a.Max) == f(b.Max) && f(a.First) == f(b.First) &&
		f(a.Last) == f(b.Last) && f(a.Increase) == f(b.Increase) && a.Resets == b.Resets && a.Stale == b.Stale
}
