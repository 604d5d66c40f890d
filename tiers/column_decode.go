package tiers

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
)

// readPages is the reader's one loop over a column chunk's pages, and its
// one row-count check. It hands each page, in order, to decode, which
// appends the page's values to the caller's slices and returns how many it
// appended; the page is released after. A chunk must decode to exactly rows
// values, one per row of its row group: rows are matched across columns by
// position, so a short or long column would pair one window's aggregates
// with another's.
//
// Errors name the column; decode's are wrapped as "read <name>: ...".
func readPages(cc parquet.ColumnChunk, name string, rows int, decode func(parquet.Page) (int, error)) error {
	pages := cc.Pages()
	defer func() { _ = pages.Close() }()
	got := 0
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		n, err := decode(p)
		parquet.Release(p)
		got += n
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
	}
	if got != rows {
		return fmt.Errorf("column %s has %d rows, want %d", name, got, rows)
	}
	return nil
}

// readValues reads up to n values from vr, value by value, through *vbuf
// (a buffer reused across calls, grown to 1024 values), handing each batch
// to fn. It returns how many it read: n, or fewer where the page ends
// first. It is the fallback for pages without a typed reader
// (dictionary-encoded ones) and the reader of the labels column.
func readValues(vr parquet.ValueReader, n int, vbuf *[]parquet.Value, fn func([]parquet.Value) error) (int, error) {
	buf := (*vbuf)[:cap(*vbuf)]
	if len(buf) < 1024 {
		buf = make([]parquet.Value, 1024)
		*vbuf = buf
	}
	got := 0
	for got < n {
		k, err := vr.ReadValues(buf[:min(len(buf), n-got)])
		if ferr := fn(buf[:k]); ferr != nil {
			return got, ferr
		}
		got += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return got, err
		}
		if k == 0 {
			return got, errors.New("page read made no progress")
		}
	}
	return got, nil
}

// typedReader reads a page's values straight into dst through the page's
// typed reader; ok is false when the page has none.
type typedReader[T any] func(vr parquet.ValueReader, dst []T) (n int, err error, ok bool)

// readColumn appends the values of a required column chunk to dst, through
// the pages' typed reader (fast) where they have one, else value by value
// with conv. See readPages for name and rows.
func readColumn[T any](cc parquet.ColumnChunk, name string, rows int, dst []T, vbuf *[]parquet.Value, fast typedReader[T], conv func(parquet.Value) T) ([]T, error) {
	err := readPages(cc, name, rows, func(p parquet.Page) (int, error) {
		var (
			n   int
			err error
		)
		dst, n, err = appendPageValues(dst, p, vbuf, fast, conv)
		return n, err
	})
	return dst, err
}

// appendPageValues appends page p's values to dst (see readColumn) and
// returns how many.
func appendPageValues[T any](dst []T, p parquet.Page, vbuf *[]parquet.Value, fast typedReader[T], conv func(parquet.Value) T) ([]T, int, error) {
	nv := int(p.NumValues())
	vr := p.Values()
	base := len(dst)
	dst = slices.Grow(dst, nv)[:base+nv]
	got := 0
	for got < nv {
		n, err, ok := fast(vr, dst[base+got:])
		if !ok { // no typed reader: the rest of the page value by value
			k := base + got
			_, err := readValues(vr, nv-got, vbuf, func(vs []parquet.Value) error {
				for _, v := range vs {
					dst[k] = conv(v)
					k++
				}
				return nil
			})
			return dst[:k], k - base, err
		}
		got += n
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return dst[:base+got], got, err
		}
		if n == 0 {
			return dst[:base+got], got, errors.New("page read made no progress")
		}
	}
	return dst[:base+got], got, nil
}

func readInt64s(cc parquet.ColumnChunk, name string, rows int, dst []int64, vbuf *[]parquet.Value) ([]int64, error) {
	return readColumn(cc, name, rows, dst, vbuf, func(vr parquet.ValueReader, b []int64) (int, error, bool) {
		r, ok := vr.(parquet.Int64Reader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadInt64s(b)
		return n, err, true
	}, parquet.Value.Int64)
}

func readInt32s(cc parquet.ColumnChunk, name string, rows int, dst []int32, vbuf *[]parquet.Value) ([]int32, error) {
	return readColumn(cc, name, rows, dst, vbuf, func(vr parquet.ValueReader, b []int32) (int, error, bool) {
		r, ok := vr.(parquet.Int32Reader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadInt32s(b)
		return n, err, true
	}, parquet.Value.Int32)
}

func readBools(cc parquet.ColumnChunk, name string, rows int, dst []bool, vbuf *[]parquet.Value) ([]bool, error) {
	return readColumn(cc, name, rows, dst, vbuf, func(vr parquet.ValueReader, b []bool) (int, error, bool) {
		r, ok := vr.(parquet.BooleanReader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadBooleans(b)
		return n, err, true
	}, parquet.Value.Boolean)
}

// readNullableDoubles decodes a top-level DOUBLE column chunk, required or
// optional, appending one value and one null flag per row to vals and null
// (a null row gets the value 0). It reads the page buffers directly (the
// definition levels and the non-null values) and falls back to value-by-value
// reading, through vbuf, for pages it cannot (dictionary-encoded ones). For a
// column without nulls, null gets all false; the caller may pass null[:0] of
// a reused slice. See readPages for name and rows.
func readNullableDoubles(cc parquet.ColumnChunk, name string, rows int, vals []float64, null []bool, vbuf *[]parquet.Value) ([]float64, []bool, error) {
	err := readPages(cc, name, rows, func(p parquet.Page) (int, error) {
		var (
			n   int
			err error
		)
		vals, null, n, err = appendNullableDoubles(p, vals, null, vbuf)
		return n, err
	})
	return vals, null, err
}

// appendNullableDoubles appends page p's rows to vals and null (see
// readNullableDoubles) and returns how many.
func appendNullableDoubles(p parquet.Page, vals []float64, null []bool, vbuf *[]parquet.Value) ([]float64, []bool, int, error) {
	n := int(p.NumValues())
	base := len(vals)
	vals = slices.Grow(vals, n)[:base+n]
	null = slices.Grow(null, n)[:base+n]
	dst, dnull := vals[base:], null[base:]
	if data := p.Data(); p.Dictionary() == nil && data.Kind() == encoding.Double {
		present := data.Double()
		levels := p.DefinitionLevels()
		if len(levels) == 0 { // a required column
			if len(present) != n {
				return vals[:base], null[:base], 0, fmt.Errorf("page has %d rows but %d values", n, len(present))
			}
			copy(dst, present)
			clear(dnull)
			return vals, null, n, nil
		}
		if len(levels) != n {
			return vals[:base], null[:base], 0, fmt.Errorf("page has %d rows but %d definition levels", n, len(levels))
		}
		j := 0
		for i, l := range levels {
			switch {
			case l == 0:
				dst[i], dnull[i] = 0, true
			case l == 1 && j < len(present):
				dst[i], dnull[i] = present[j], false
				j++
			default:
				return vals[:base], null[:base], 0, fmt.Errorf("page row %d: definition level %d with %d of %d values read", i, l, j, len(present))
			}
		}
		if j != len(present) {
			return vals[:base], null[:base], 0, fmt.Errorf("page has %d values, %d rows not null", len(present), j)
		}
		return vals, null, n, nil
	}
	k := 0
	got, err := readValues(p.Values(), n, vbuf, func(vs []parquet.Value) error {
		for _, v := range vs {
			if v.IsNull() {
				dst[k], dnull[k] = 0, true
			} else {
				dst[k], dnull[k] = v.Double(), false
			}
			k++
		}
		return nil
	})
	return vals[:base+got], null[:base+got], got, err
}
