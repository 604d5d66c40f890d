package tiers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// Select returns the series matching all matchers that have windows starting
// in [mint, maxt], each with those windows in ascending order, the series
// sorted by labels. Windows of one series from several partitions are
// concatenated.
//
// Only the partitions overlapping the range are opened. Within a file a row
// group is skipped when its start-time statistics miss the range, or when a
// metric-name equality matcher is absent from the row group's name statistics
// or bloom filter. Only the columns needed to rebuild windows are decoded (the
// curated label columns are for analysts and are never read here).
func (r *Rollup) Select(ctx context.Context, mint, maxt int64, matchers ...*labels.Matcher) ([]SeriesWindows, error) {
	return r.selectColumns(ctx, mint, maxt, nil, matchers, 0, 0, 0)
}

// selectColumns is Select decoding only the named aggregate columns (nil: all);
// the others read as zero in the returned windows, except those the null
// rules of schema version 2 read to fill in the named ones (derivationInputs).
//
// thinStep > 0 keeps per series only the latest window before each time
// thinOrigin + k*thinStep.
func (r *Rollup) selectColumns(ctx context.Context, mint, maxt int64, need map[string]bool, matchers []*labels.Matcher, thinStep, thinOrigin int64, maxWindows int) ([]SeriesWindows, error) {
	r.mu.RLock()
	closed := r.closed
	r.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	sel := newRollupSelector(mint, maxt, matchers)
	sel.need = derivationInputs(need)
	sel.thinStep, sel.thinOrigin = thinStep, thinOrigin
	sel.maxWindows = maxWindows
	parts := r.partitionsOverlapping(mint, maxt)
	res := r.cfg.Resolution.Milliseconds()
	expect := min(int64(len(parts))*r.cfg.PartitionLength.Milliseconds(), satAdd(maxt-mint, res)) / max(res, thinStep)
	sel.capHint = int(min(expect+1, 1<<20))
	for _, p := range parts {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("select %s tier: %w", r.cfg.Name, err)
		}
		if err := sel.readFile(ctx, p.Path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // deleted by retention after we listed it
			}
			return nil, fmt.Errorf("select %s tier: %w", r.cfg.Name, err)
		}
	}
	return sel.result(), nil
}

// SelectLabels returns the label sets of the series matching all matchers
// that have windows in partitions overlapping [mint, maxt] (partition
// granularity: it reads only the labels column). For label name/value APIs.
func (r *Rollup) SelectLabels(ctx context.Context, mint, maxt int64, matchers ...*labels.Matcher) ([]labels.Labels, error) {
	sel := newRollupSelector(mint, maxt, matchers)
	sel.labelsOnly = true
	for _, p := range r.partitionsOverlapping(mint, maxt) {
		if err := sel.readFile(ctx, p.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("select %s tier labels: %w", r.cfg.Name, err)
		}
	}
	out := make([]labels.Labels, 0, len(sel.series))
	for _, sw := range sel.series {
		out = append(out, sw.Labels)
	}
	return out, nil
}

// rollupSelector accumulates one Select's series across files.
type rollupSelector struct {
	mint, maxt int64
	matchers   []*labels.Matcher
	nameEq     *parquet.Value // metric name equality matcher, for pruning
	nameEqStr  string
	labelsOnly bool
	need       map[string]bool // aggregate columns to decode; nil: all
	// thinStep > 0 keeps, per series, only the latest window before each
	// evaluation time thinOrigin + k*thinStep (plain selectors at a coarse step).
	thinStep, thinOrigin int64
	capHint              int // expected windows per series, to size slices once
	maxWindows, nWindows int // bound on windows held in memory (0: none)

	// byKey maps the `labels` column text to an index into series, or -1
	// when the series does not match.
	byKey map[string]int32
	// byID maps series_id to the same index as byKey, or idAmbiguous when
	// two label sets share the id (a hash collision: rows are then mapped
	// by their labels).
	byID   map[int64]int32
	ids    []int64
	series []SeriesWindows

	// column buffers reused across row groups
	idx                                []int32
	start, firstT, lastT, count        []int64
	sum, mn, mx, first, last, increase []float64
	resets                             []int32
	stale                              []bool
	values                             []parquet.Value
	// null flags of the double columns (parquet_derive.go)
	sumNull, mnNull, mxNull, firstNull, lastNull, incNull []bool
}

func newRollupSelector(mint, maxt int64, ms []*labels.Matcher) *rollupSelector {
	s := &rollupSelector{mint: mint, maxt: maxt, matchers: ms, byKey: map[string]int32{}, byID: map[int64]int32{}}
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			v := parquet.ByteArrayValue([]byte(m.Value))
			s.nameEq, s.nameEqStr = &v, m.Value
		}
	}
	return s
}

func (s *rollupSelector) result() []SeriesWindows {
	out := make([]SeriesWindows, 0, len(s.series))
	for _, sw := range s.series {
		if len(sw.Windows) > 0 {
			slices.SortFunc(sw.Windows, func(a, b Window) int { return cmpInt64(a.Start, b.Start) })
			out = append(out, sw)
		}
	}
	slices.SortFunc(out, func(a, b SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
	return out
}

func (s *rollupSelector) readFile(ctx context.Context, path string) (err error) {
	f, err := os.Open(path) //nolint:gosec // path comes from the tier's own listing
	if err != nil {
		return fmt.Errorf("open partition: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat partition: %w", err)
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true))
	if err != nil {
		return fmt.Errorf("open parquet file %s: %w", path, err)
	}
	if _, err := schemaVersion(pf.Lookup("strata.schema_version")); err != nil {
		return fmt.Errorf("partition %s: %w", path, err)
	}
	cols, err := lookupColumns(pf.Schema())
	if err != nil {
		return fmt.Errorf("partition %s: %w", path, err)
	}
	for _, rg := range pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.readRowGroup(rg, cols); err != nil {
			return fmt.Errorf("partition %s: %w", path, err)
		}
	}
	return nil
}

type rollupColumns struct {
	name, labels, seriesID, start, firstT, lastT, count, sum, min, max, first, last, increase, resets, stale int
}

func lookupColumns(sch *parquet.Schema) (rollupColumns, error) {
	var c rollupColumns
	for _, x := range []struct {
		name string
		dst  *int
	}{
		{"metric_name", &c.name}, {"labels", &c.labels}, {"series_id", &c.seriesID}, {"start", &c.start}, {"first_ts", &c.firstT}, {"last_ts", &c.lastT},
		{"count", &c.count}, {"sum", &c.sum}, {"min", &c.min}, {"max", &c.max}, {"first", &c.first}, {"last", &c.last},
		{"increase", &c.increase}, {"resets", &c.resets}, {"stale", &c.stale},
	} {
		leaf, ok := sch.Lookup(x.name)
		if !ok {
			return c, fmt.Errorf("column %q missing", x.name)
		}
		*x.dst = leaf.ColumnIndex
	}
	return c, nil
}

// skipRowGroup uses the row group's statistics and bloom filter.
func (s *rollupSelector) skipRowGroup(rg parquet.RowGroup, c rollupColumns) bool {
	chunks := rg.ColumnChunks()
	if fc, ok := chunks[c.start].(*parquet.FileColumnChunk); ok {
		if lo, hi, ok := fc.Bounds(); ok && (hi.Int64() < s.mint || lo.Int64() > s.maxt) {
			return true
		}
	}
	if s.nameEq == nil {
		return false
	}
	if fc, ok := chunks[c.name].(*parquet.FileColumnChunk); ok {
		if lo, hi, ok := fc.Bounds(); ok && (string(lo.ByteArray()) > s.nameEqStr || string(hi.ByteArray()) < s.nameEqStr) {
			return true
		}
		if bf := fc.BloomFilter(); bf != nil {
			if found, err := bf.Check(*s.nameEq); err == nil && !found {
				return true
			}
		}
	}
	return false
}

func (s *rollupSelector) readRowGroup(rg parquet.RowGroup, c rollupColumns) error {
	if s.skipRowGroup(rg, c) {
		return nil
	}
	chunks := rg.ColumnChunks()
	// Which rows belong to matching series, first; a row group without any
	// is not decoded further. series_id (a hash of the labels) is cheap to
	// decode: when every id in the row group is already known from an
	// earlier row group or file, the labels column is not read at all.
	var err error
	if s.ids, err = readInt64s(chunks[c.seriesID], s.ids[:0], &s.values); err != nil {
		return fmt.Errorf("read series_id: %w", err)
	}
	idx, matched, known := s.indexByID(s.idx[:0])
	if !known {
		if idx, matched, err = s.readSeriesIndex(chunks[c.labels], s.idx[:0]); err != nil {
			return fmt.Errorf("read labels column: %w", err)
		}
		if len(idx) != len(s.ids) {
			return fmt.Errorf("labels column has %d rows, series_id %d", len(idx), len(s.ids))
		}
		s.learnIDs(idx)
	}
	s.idx = idx
	if !matched || s.labelsOnly {
		return nil
	}
	n := len(s.idx)
	// Columns a query does not need are not decoded; they read as zero.
	zero := func(col string) bool { return s.need != nil && !s.need[col] }
	for _, x := range []struct {
		name string
		col  int
		dst  *[]int64
	}{{"start", c.start, &s.start}, {"first_ts", c.firstT, &s.firstT}, {"last_ts", c.lastT, &s.lastT}, {"count", c.count, &s.count}} {
		if x.name != "start" && zero(x.name) {
			*x.dst = zeroed(*x.dst, n)
			continue
		}
		if *x.dst, err = readInt64s(chunks[x.col], (*x.dst)[:0], &s.values); err != nil {
			return fmt.Errorf("read %s: %w", x.name, err)
		}
	}
	for _, x := range []struct {
		name string
		col  int
		dst  *[]float64
		null *[]bool
	}{{"sum", c.sum, &s.sum, &s.sumNull}, {"min", c.min, &s.mn, &s.mnNull}, {"max", c.max, &s.mx, &s.mxNull}, {"first", c.first, &s.first, &s.firstNull}, {"last", c.last, &s.last, &s.lastNull}, {"increase", c.increase, &s.increase, &s.incNull}} {
		if zero(x.name) {
			*x.dst, *x.null = zeroed(*x.dst, n), (*x.null)[:0]
			continue
		}
		if *x.dst, *x.null, err = readNullableDoubles(chunks[x.col], (*x.dst)[:0], (*x.null)[:0], &s.values); err != nil {
			return fmt.Errorf("read %s: %w", x.name, err)
		}
	}
	if err := deriveWindowColumns(windowColumns{Count: s.count, Sum: s.sum, Min: s.mn, Max: s.mx, First: s.first, Last: s.last, Inc: s.increase,
		SumNull: s.sumNull, MinNull: s.mnNull, MaxNull: s.mxNull, FirstNull: s.firstNull, LastNull: s.lastNull, IncNull: s.incNull}); err != nil {
		return err
	}
	if zero("resets") {
		s.resets = zeroed(s.resets, n)
	} else if s.resets, err = readInt32s(chunks[c.resets], s.resets[:0], &s.values); err != nil {
		return fmt.Errorf("read resets: %w", err)
	}
	if zero("stale") {
		s.stale = zeroed(s.stale, n)
	} else if s.stale, err = readBools(chunks[c.stale], s.stale[:0], &s.values); err != nil {
		return fmt.Errorf("read stale: %w", err)
	}
	for _, l := range []int{len(s.start), len(s.firstT), len(s.lastT), len(s.count), len(s.sum), len(s.mn), len(s.mx), len(s.first), len(s.last), len(s.increase), len(s.resets), len(s.stale)} {
		if l != n {
			return fmt.Errorf("column lengths differ: %d vs %d", l, n)
		}
	}
	for i, si := range s.idx {
		if si < 0 || s.start[i] < s.mint || s.start[i] > s.maxt {
			continue
		}
		sw := &s.series[si]
		w := Window{
			Start: s.start[i], FirstT: s.firstT[i], LastT: s.lastT[i], Count: uint32(s.count[i]), //nolint:gosec // written from a uint32
			Sum: s.sum[i], Min: s.mn[i], Max: s.mx[i], First: s.first[i], Last: s.last[i],
			Increase: s.increase[i], Resets: uint32(max(s.resets[i], 0)), Stale: s.stale[i],
		}
		if sw.Windows == nil && s.capHint > 0 {
			sw.Windows = make([]Window, 0, s.capHint)
		}
		// Thinning: of the windows whose last sample falls before the same
		// evaluation step, only the latest can be seen by a plain selector.
		if n := len(sw.Windows); s.thinStep > 0 && n > 0 && s.evalStep(sw.Windows[n-1].LastT) == s.evalStep(w.LastT) && w.Start > sw.Windows[n-1].Start {
			sw.Windows[n-1] = w
			continue
		}
		if s.maxWindows > 0 && s.nWindows >= s.maxWindows {
			return fmt.Errorf("%w: more than %d", ErrTooManyWindows, s.maxWindows)
		}
		s.nWindows++
		sw.Windows = append(sw.Windows, w)
	}
	return nil
}

const idAmbiguous = int32(-2)

// indexByID maps rows to series indexes through s.ids alone; known is false
// when some id is new or ambiguous and the labels column must be read.
func (s *rollupSelector) indexByID(dst []int32) (idx []int32, matched, known bool) {
	prevID, prevIdx := int64(0), int32(-1)
	for i, id := range s.ids {
		if i == 0 || id != prevID {
			si, ok := s.byID[id]
			if !ok || si == idAmbiguous {
				return dst, false, false
			}
			prevID, prevIdx = id, si
		}
		if prevIdx >= 0 {
			matched = true
		}
		dst = append(dst, prevIdx)
	}
	return dst, matched, true
}

// learnIDs records the series index of each row's id after a labels-based mapping.
func (s *rollupSelector) learnIDs(idx []int32) {
	for i, id := range s.ids {
		si, ok := s.byID[id]
		switch {
		case !ok:
			s.byID[id] = idx[i]
		case si != idx[i]:
			s.byID[id] = idAmbiguous
		}
	}
}

// readSeriesIndex maps each row of the labels column to a series index (-1
// when it does not match). Rows of one series are adjacent, so the label text
// is compared to the previous row's before any map lookup.
func (s *rollupSelector) readSeriesIndex(cc parquet.ColumnChunk, dst []int32) ([]int32, bool, error) {
	pages := cc.Pages()
	defer func() { _ = pages.Close() }()
	matched := false
	var prev []byte
	prevIdx := int32(-1)
	buf := s.values[:cap(s.values)]
	if len(buf) < 1024 {
		buf = make([]parquet.Value, 1024)
		s.values = buf
	}
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return dst, matched, nil
		}
		if err != nil {
			return dst, matched, err
		}
		vr := p.Values()
		for {
			n, err := vr.ReadValues(buf)
			for _, v := range buf[:n] {
				b := v.ByteArray()
				if prev == nil || string(b) != string(prev) {
					si, ok := s.byKey[string(b)]
					if !ok {
						var aerr error
						if si, aerr = s.admit(string(b)); aerr != nil {
							parquet.Release(p)
							return dst, matched, aerr
						}
					}
					prev, prevIdx = append(prev[:0], b...), si
				}
				if prevIdx >= 0 {
					matched = true
				}
				dst = append(dst, prevIdx)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(p)
				return dst, matched, err
			}
		}
		parquet.Release(p)
	}
}

// admit decodes a series' labels the first time they are seen and checks the matchers.
func (s *rollupSelector) admit(key string) (int32, error) {
	lbls, err := decodeLabels([]byte(key))
	if err != nil {
		return -1, err
	}
	si := int32(-1)
	if matchesAll(lbls, s.matchers) {
		si = int32(len(s.series)) //nolint:gosec // bounded by the number of series
		s.series = append(s.series, SeriesWindows{Labels: lbls})
	}
	s.byKey[key] = si
	return si, nil
}

func matchesAll(lbls labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lbls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// readColumn decodes one column chunk with the typed fast path when the page
// offers it, else value by value.
func readColumn[T any](cc parquet.ColumnChunk, dst []T, vals *[]parquet.Value, fast func(parquet.ValueReader, []T) (int, error, bool), conv func(parquet.Value) T) ([]T, error) {
	pages := cc.Pages()
	defer func() { _ = pages.Close() }()
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
		nv := int(p.NumValues())
		vr := p.Values()
		base := len(dst)
		dst = slices.Grow(dst, nv)[:base+nv]
		got := 0
		for got < nv {
			n, rerr, ok := fast(vr, dst[base+got:])
			if !ok {
				buf := (*vals)[:cap(*vals)]
				if len(buf) == 0 {
					buf = make([]parquet.Value, 1024)
					*vals = buf
				}
				if len(buf) > nv-got {
					buf = buf[:nv-got]
				}
				n, rerr = vr.ReadValues(buf)
				for i, v := range buf[:n] {
					dst[base+got+i] = conv(v)
				}
			}
			got += n
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				parquet.Release(p)
				return dst, rerr
			}
			if n == 0 {
				parquet.Release(p)
				return dst, errors.New("page read made no progress")
			}
		}
		parquet.Release(p)
		dst = dst[:base+got]
	}
}

func readInt64s(cc parquet.ColumnChunk, dst []int64, vals *[]parquet.Value) ([]int64, error) {
	return readColumn(cc, dst, vals, func(vr parquet.ValueReader, b []int64) (int, error, bool) {
		r, ok := vr.(parquet.Int64Reader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadInt64s(b)
		return n, err, true
	}, parquet.Value.Int64)
}

func readInt32s(cc parquet.ColumnChunk, dst []int32, vals *[]parquet.Value) ([]int32, error) {
	return readColumn(cc, dst, vals, func(vr parquet.ValueReader, b []int32) (int, error, bool) {
		r, ok := vr.(parquet.Int32Reader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadInt32s(b)
		return n, err, true
	}, parquet.Value.Int32)
}

func readBools(cc parquet.ColumnChunk, dst []bool, vals *[]parquet.Value) ([]bool, error) {
	return readColumn(cc, dst, vals, func(vr parquet.ValueReader, b []bool) (int, error, bool) {
		r, ok := vr.(parquet.BooleanReader)
		if !ok {
			return 0, nil, false
		}
		n, err := r.ReadBooleans(b)
		return n, err, true
	}, parquet.Value.Boolean)
}

// evalStep returns the index of the first evaluation time at or after t.
func (s *rollupSelector) evalStep(t int64) int64 {
	d := t - s.thinOrigin
	if d <= 0 {
		return d / s.thinStep
	}
	return (d + s.thinStep - 1) / s.thinStep
}

func zeroed[T any](s []T, n int) []T {
	s = slices.Grow(s[:0], n)[:n]
	clear(s)
	return s
}
