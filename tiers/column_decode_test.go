package tiers

import (
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// TestReadColumnRowCount decodes required columns over several pages,
// through the typed readers (plain pages) and value by value (dictionary
// pages), and checks the one row-count check: a chunk that does not hold
// exactly the row group's rows is an error naming the column.
func TestReadColumnRowCount(t *testing.T) {
	type row struct {
		Plain int64 `parquet:"plain,plain"`
		Dict  int64 `parquet:"dict,dict"`
		I32   int32 `parquet:"i32,plain"`
		Bool  bool  `parquet:"b"`
	}
	const n = 5000
	rows := make([]row, n)
	for i := range rows {
		rows[i] = row{Plain: int64(i) * 1_000, Dict: int64(i % 7), I32: int32(i % 1000), Bool: i%3 == 0}
	}
	var buf strings.Builder
	w := parquet.NewGenericWriter[row](&buf, parquet.PageBufferSize(2048))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.String()
	pf, err := parquet.OpenFile(strings.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(pf.RowGroups()) != 1 {
		t.Fatalf("%d row groups, want 1", len(pf.RowGroups()))
	}
	chunks := pf.RowGroups()[0].ColumnChunks()
	if pages := countPages(t, chunks[0]); pages < 3 {
		t.Fatalf("the plain column has %d pages, want several", pages)
	}
	var vbuf []parquet.Value
	field := func(f func(row) int64) []int64 {
		out := make([]int64, n)
		for i, r := range rows {
			out[i] = f(r)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		col  int
		want []int64
	}{
		{"plain", 0, field(func(r row) int64 { return r.Plain })},
		{"dict", 1, field(func(r row) int64 { return r.Dict })},
	} {
		prefix := []int64{-1, -2} // decoding appends
		got, err := readInt64s(chunks[tc.col], tc.name, n, slices.Clone(prefix), &vbuf)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(got, append(prefix, tc.want...)) {
			t.Fatalf("%s: decoded values differ", tc.name)
		}
		for _, rows := range []int{n - 1, n + 1} {
			_, err := readInt64s(chunks[tc.col], tc.name, rows, nil, &vbuf)
			if want := "column " + tc.name + " has 5000 rows, want "; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s read as %d rows: err %v, want %q", tc.name, rows, err, want)
			}
		}
	}
	i32, err := readInt32s(chunks[2], "i32", n, nil, &vbuf)
	if err != nil || len(i32) != n || i32[1234] != 234 {
		t.Fatalf("i32: %d values, err %v", len(i32), err)
	}
	bools, err := readBools(chunks[3], "b", n, nil, &vbuf)
	if err != nil || len(bools) != n || !bools[3] || bools[4] {
		t.Fatalf("b: %d values, err %v", len(bools), err)
	}
	if _, err := readBools(chunks[3], "b", n+1, nil, &vbuf); err == nil {
		t.Fatal("a bool column one row short was accepted")
	}
}

func countPages(t *testing.T, cc parquet.ColumnChunk) int {
	t.Helper()
	pages := 0
	if err := readPages(cc, "count", int(cc.NumValues()), func(p parquet.Page) (int, error) {
		pages++
		return int(p.NumValues()), nil
	}); err != nil {
		t.Fatal(err)
	}
	return pages
}
