package tiers

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"
)

// Schema version 2 of the rollup files (docs/format/hour-parquet.md, "Derived
// aggregates") leaves an aggregate null when a rule over other columns of the
// same row gives it back bit for bit. The rules, applied in this order (min,
// max and increase use first after its own rule):
//
//	first    = last                 (ruleFirst)
//	min      = LEAST(first, last)   (ruleMin)
//	max      = GREATEST(first, last) (ruleMax)
//	increase = last - first         (ruleIncrease)
//	sum      = count * last         (ruleSum)
//
// `last` and every other column are never null. The writer (nullAggregates)
// stores a null only where the rule's result has exactly the bits of the true
// value, and only where every value involved is finite, so that a SQL engine
// applying the same rule (the DuckDB view in the docs) gets the same number:
// engines disagree on NaN ordering and some raise errors on overflow. The
// reader (deriveWindowColumns) therefore applies a rule to every null without
// further checks. Version-1 files have no nulls; the same read path serves both.
//
// What each rule saves on the size test's fleet (docs/format/minute.md): min,
// max and increase are null for counter windows without a reset (and for
// gauge windows whose extremes are their first or last sample); first and sum
// are null for windows with one sample or a constant value (scrape intervals
// of a minute or more).

// The rules. Each returns the value a null aggregate stands for.

// ruleFirst is first when it is null: the last sample's value.
func ruleFirst(last float64) float64 { return last }

// ruleMin is min when it is null: the smaller of first and last.
func ruleMin(first, last float64) float64 {
	if last < first {
		return last
	}
	return first
}

// ruleMax is max when it is null: the larger of first and last.
func ruleMax(first, last float64) float64 {
	if last > first {
		return last
	}
	return first
}

// ruleIncrease is increase when it is null: last - first (a window without a
// reset, where the reset-adjusted increase is the plain difference).
func ruleIncrease(first, last float64) float64 { return last - first }

// ruleSum is sum when it is null: count times last (one sample, or a
// constant value whose sum is exact).
func ruleSum(count int64, last float64) float64 { return float64(count) * last }

// nullMask says which derivable aggregates of a row are written as null.
type nullMask uint8

const (
	nullFirst nullMask = 1 << iota
	nullMin
	nullMax
	nullIncrease
	nullSum
)

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func sameBits(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// nullAggregates returns the aggregates of w that the writer leaves null: those
// whose rule gives bit-identical values from the stored columns. A rule is
// used only when its inputs and the true value are all finite (no NaN, no
// ±Inf) and, for min and max, when first and last are not a +0 and a -0 (the
// SQL LEAST and GREATEST of two equal values may return either).
func nullAggregates(w Window) nullMask {
	var m nullMask
	if !finite(w.Last) {
		return 0
	}
	if sameBits(w.First, ruleFirst(w.Last)) {
		m |= nullFirst
	}
	if finite(w.First) { // the reader's first: the true one, or last when null (same bits)
		zeros := w.First == w.Last && !sameBits(w.First, w.Last)
		if !zeros && finite(w.Min) && sameBits(w.Min, ruleMin(w.First, w.Last)) {
			m |= nullMin
		}
		if !zeros && finite(w.Max) && sameBits(w.Max, ruleMax(w.First, w.Last)) {
			m |= nullMax
		}
		if finite(w.Increase) && sameBits(w.Increase, ruleIncrease(w.First, w.Last)) {
			m |= nullIncrease
		}
	}
	if finite(w.Sum) && sameBits(w.Sum, ruleSum(int64(w.Count), w.Last)) {
		m |= nullSum
	}
	return m
}

// schemaVersion returns the schema version of a rollup file from its
// "strata.schema_version" key/value metadata (ok false: the key is absent,
// read as version 1, the first). It refuses a version newer than this build
// writes (parquetSchemaVersion) and anything that is not a version number:
// such a file may hold columns or rules this reader does not know.
func schemaVersion(v string, ok bool) (int, error) {
	newest, _ := strconv.Atoi(parquetSchemaVersion)
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("unknown schema version %q", v)
	}
	if n > newest {
		return 0, fmt.Errorf("schema version %d is newer than this build reads (%d)", n, newest)
	}
	return n, nil
}

// derivationInputs returns need (the aggregate columns a query decodes) plus
// the columns the rules read to fill in nulls of the needed ones: first needs
// last; min, max and increase need first and last; sum needs count and last.
// The caller decodes the returned set; the extra columns hold real values
// afterwards, not zeros.
func derivationInputs(need colSet) colSet {
	if need&(colMin|colMax|colIncrease) != 0 {
		need |= colFirst
	}
	if need&colFirst != 0 {
		need |= colLast
	}
	if need&colSum != 0 {
		need |= colCount | colLast
	}
	return need
}

// windowColumns are the decoded aggregate columns of one row group, one entry
// per row, and the null flags of the columns version 2 may leave null. A null
// slice that is empty means the column has no null (a version-1 file, or a
// column not decoded); otherwise it has one flag per row. The value at a null
// row is ignored and overwritten.
//
// LastNull is for the reader's checks only: `last` is never null, and a null
// there is an error.
type windowColumns struct {
	Count                           []int64
	Sum, Min, Max, First, Last, Inc []float64
	SumNull, MinNull, MaxNull       []bool
	FirstNull, LastNull, IncNull    []bool
}

// deriveWindowColumns fills every null aggregate in c with its rule's value,
// in place: first, then min, max, increase (from first and last) and sum
// (from count and last). Columns without nulls are left as they are, so a
// version-1 row group passes through unchanged. The inputs of a rule must be decoded wherever its
// output has nulls (decode derivationInputs(need)); it returns an error when a
// null slice or an input column has the wrong length, which is how a missing
// input shows.
func deriveWindowColumns(c windowColumns) error {
	n := len(c.Last)
	if slices.Contains(c.LastNull, true) {
		return errors.New("column last has nulls")
	}
	for _, x := range []struct {
		name string
		vals []float64
		null []bool
	}{{"sum", c.Sum, c.SumNull}, {"min", c.Min, c.MinNull}, {"max", c.Max, c.MaxNull}, {"first", c.First, c.FirstNull}, {"increase", c.Inc, c.IncNull}} {
		if len(x.null) != 0 && (len(x.null) != n || len(x.vals) != n) {
			return fmt.Errorf("derive %s: %d values, %d null flags, last has %d rows", x.name, len(x.vals), len(x.null), n)
		}
	}
	for i, null := range c.FirstNull {
		if null {
			c.First[i] = ruleFirst(c.Last[i])
		}
	}
	if len(c.MinNull)+len(c.MaxNull)+len(c.IncNull) > 0 && len(c.First) != n {
		return fmt.Errorf("derive min, max or increase: first has %d rows, last %d", len(c.First), n)
	}
	for i, null := range c.MinNull {
		if null {
			c.Min[i] = ruleMin(c.First[i], c.Last[i])
		}
	}
	for i, null := range c.MaxNull {
		if null {
			c.Max[i] = ruleMax(c.First[i], c.Last[i])
		}
	}
	for i, null := range c.IncNull {
		if null {
			c.Inc[i] = ruleIncrease(c.First[i], c.Last[i])
		}
	}
	if len(c.SumNull) > 0 && len(c.Count) != n {
		return fmt.Errorf("derive sum: count has %d rows, last %d", len(c.Count), n)
	}
	for i, null := range c.SumNull {
		if null {
			c.Sum[i] = ruleSum(c.Count[i], c.Last[i])
		}
	}
	return nil
}

// readNullableDoubles decodes a top-level DOUBLE column chunk, required or
// optional, appending one value and one null flag per row to vals and null
// (a null row gets the value 0). It reads the page buffers directly (the
// definition levels and the non-null values) and falls back to value-by-value
// reading, through vbuf, for pages it cannot (dictionary-encoded ones). For a
// column without nulls, null gets all false; the caller may pass null[:0] of
// a reused slice.
func readNullableDoubles(cc parquet.ColumnChunk, vals []float64, null []bool, vbuf *[]parquet.Value) ([]float64, []bool, error) {
	pages := cc.Pages()
	defer func() { _ = pages.Close() }()
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return vals, null, nil
		}
		if err != nil {
			return vals, null, err
		}
		vals, null, err = appendNullableDoubles(p, vals, null, vbuf)
		parquet.Release(p)
		if err != nil {
			return vals, null, err
		}
	}
}

func appendNullableDoubles(p parquet.Page, vals []float64, null []bool, vbuf *[]parquet.Value) ([]float64, []bool, error) {
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
				return vals, null, fmt.Errorf("page has %d rows but %d values", n, len(present))
			}
			copy(dst, present)
			clear(dnull)
			return vals, null, nil
		}
		if len(levels) != n {
			return vals, null, fmt.Errorf("page has %d rows but %d definition levels", n, len(levels))
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
				return vals, null, fmt.Errorf("page row %d: definition level %d with %d of %d values read", i, l, j, len(present))
			}
		}
		if j != len(present) {
			return vals, null, fmt.Errorf("page has %d values, %d rows not null", len(present), j)
		}
		return vals, null, nil
	}
	buf := (*vbuf)[:cap(*vbuf)]
	if len(buf) == 0 {
		buf = make([]parquet.Value, 1024)
		*vbuf = buf
	}
	vr := p.Values()
	got := 0
	for got < n {
		k, err := vr.ReadValues(buf[:min(len(buf), n-got)])
		for i, v := range buf[:k] {
			if v.IsNull() {
				dst[got+i], dnull[got+i] = 0, true
			} else {
				dst[got+i], dnull[got+i] = v.Double(), false
			}
		}
		got += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return vals, null, err
		}
		if k == 0 {
			return vals, null, errors.New("page read made no progress")
		}
	}
	if got != n {
		return vals, null, fmt.Errorf("page has %d rows, read %d", n, got)
	}
	return vals, null, nil
}
