package tiers

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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
