package tiers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/parallel"
)

// TestSelectColumnsMatchesWindows checks the column-block reader against the
// windows written: many partitions read by several readers, series that come
// and go, stale windows, small row groups, batches flushed every few rows,
// every column subset the stitched querier decodes, and plain-selector
// thinning.
func TestSelectColumnsMatchesWindows(t *testing.T) {
	// Files with their series runs in the metadata (the minute tier's) and
	// without (the hour tier's, and files written before runs existed).
	for _, runs := range []bool{true, false} {
		t.Run(fmt.Sprintf("series runs=%v", runs), func(t *testing.T) { testSelectColumnsMatchesWindows(t, runs) })
	}
}

func testSelectColumnsMatchesWindows(t *testing.T, seriesRuns bool) {
	const batchRows = 7 // flush in the middle of row groups and files
	cfg := DefaultMinuteConfig(t.TempDir())
	cfg.RowsPerRowGroup = 23 // series span row groups; row groups are pruned by their statistics
	cfg.SeriesRuns = seriesRuns
	r := openRollupForTest(t, cfg, nil)
	const nSeries, nParts = 9, 6
	res, plen := cfg.Resolution.Milliseconds(), cfg.PartitionLength.Milliseconds()
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string][]Window{}
	lbls := make([]labels.Labels, nSeries)
	for i := range lbls {
		lbls[i] = labels.FromStrings("__name__", fmt.Sprintf("m%d", i%3), "i", fmt.Sprint(i))
	}
	for p := range nParts {
		start := deriveT0 + int64(p)*plen
		var series []SeriesWindows
		for i, l := range lbls {
			if (i+p)%4 == 0 { // absent from this partition
				continue
			}
			var ws []Window
			for s := start; s < start+plen; s += res {
				if rng.IntN(5) == 0 { // a gap
					continue
				}
				first := float64(rng.IntN(100))
				last := first + float64(rng.IntN(10))
				w := Window{
					Start: s, FirstT: s + int64(rng.IntN(1000)), Count: uint32(1 + rng.IntN(60)),
					Sum: float64(rng.IntN(1000)) + 0.5, Min: first - 1, Max: last + 1, First: first, Last: last,
					Increase: last - first + float64(rng.IntN(3)), Resets: uint32(rng.IntN(2)), Stale: rng.IntN(10) == 0,
				}
				w.LastT = w.FirstT + int64(rng.IntN(int(res-(w.FirstT-s))))
				ws = append(ws, w)
			}
			series = append(series, SeriesWindows{Labels: l, Windows: ws})
			want[l.String()] = append(want[l.String()], ws...)
		}
		if err := r.WritePartition(start, series); err != nil {
			t.Fatal(err)
		}
	}
	mint, maxt := deriveT0+7*res, deriveT0+int64(nParts)*plen-11*res // not aligned to partitions
	inRange := func(ws []Window) []Window {
		var out []Window
		for _, w := range ws {
			if w.Start >= mint && w.Start <= maxt {
				out = append(out, w)
			}
		}
		return out
	}
	// checkSelected compares each selected series' windows with those
	// written, projected onto the columns a select of need decodes.
	checkSelected := func(t *testing.T, sel []selectedSeries, need colSet) {
		t.Helper()
		for _, s := range sel {
			exp, got := inRange(want[s.lbls.String()]), s.ws.appendTo(nil)
			if len(got) != len(exp) {
				t.Fatalf("%s: %d windows, want %d", s.lbls, len(got), len(exp))
			}
			for k := range got {
				if e := projectWindow(exp[k], need|colLastT); got[k] != e {
					t.Fatalf("%s window %d:\n got %+v\nwant %+v", s.lbls, k, got[k], e)
				}
			}
		}
	}
	for mode := modeLast; mode <= modeDelta; mode++ {
		need := columnsFor(mode)
		t.Run(fmt.Sprintf("mode %d", mode), func(t *testing.T) {
			sel, err := r.selectColumns(context.Background(), mint, maxt, nil, selectOptions{need: need, batchRows: batchRows})
			if err != nil {
				t.Fatal(err)
			}
			if len(sel) != nSeries {
				t.Fatalf("%d series, want %d", len(sel), nSeries)
			}
			checkSelected(t, sel, need)
		})
	}
	t.Run("matchers", func(t *testing.T) {
		// Two of the nine series: row groups where only some rows match.
		sel, err := r.selectColumns(context.Background(), mint, maxt, []*labels.Matcher{
			labels.MustNewMatcher(labels.MatchEqual, "__name__", "m1"), labels.MustNewMatcher(labels.MatchNotEqual, "i", "4"),
		}, selectOptions{need: colAll, batchRows: batchRows})
		if err != nil {
			t.Fatal(err)
		}
		if len(sel) != 2 {
			t.Fatalf("%d series, want 2", len(sel))
		}
		checkSelected(t, sel, colAll)
	})
	t.Run("thinned", func(t *testing.T) {
		step, origin := 7*res, mint+3*res
		sel, err := r.selectColumns(context.Background(), mint, maxt, nil, selectOptions{need: columnsFor(modeLast), thinStep: step, thinOrigin: origin, batchRows: batchRows})
		if err != nil {
			t.Fatal(err)
		}
		bucket := func(lt int64) int64 { // first evaluation time at or after lt
			d := lt - origin
			k := d / step
			if d > 0 && d%step != 0 {
				k++
			}
			return k
		}
		for _, s := range sel {
			// Of the windows whose last sample precedes the same evaluation
			// time, the latest; the reader may keep more at partition and
			// reader boundaries, never fewer, and never a wrong one.
			exp := inRange(want[s.lbls.String()])
			latest := map[int64]Window{}
			for _, w := range exp {
				latest[bucket(w.LastT)] = w
			}
			got := s.ws.appendTo(nil)
			seen := map[int64]bool{}
			for _, g := range got {
				seen[bucket(g.LastT)] = true
			}
			for b, w := range latest {
				if !seen[b] {
					t.Fatalf("%s: no window for step %d (want last_ts %d)", s.lbls, b, w.LastT)
				}
			}
			for k, g := range got {
				if k+1 < len(got) && bucket(got[k+1].LastT) == bucket(g.LastT) {
					continue // a boundary duplicate: the later one wins in the iterator
				}
				if l := latest[bucket(g.LastT)]; l.LastT != g.LastT || l.Last != g.Last || l.Stale != g.Stale {
					t.Fatalf("%s: step %d kept last_ts %d, want the latest %d", s.lbls, bucket(g.LastT), g.LastT, l.LastT)
				}
			}
		}
	})
	// The export's two sets: a gauge's and a counter's.
	fieldSets := []WindowFields{FieldSum | FieldCount | FieldMin | FieldMax | FieldLast, FieldFirst | FieldLast | FieldIncrease}
	checkFields := func(f WindowFields) error {
		got, err := r.SelectFields(context.Background(), mint, maxt, f)
		if err != nil {
			return err
		}
		if len(got) != nSeries {
			return fmt.Errorf("fields %b: %d series, want %d", f, len(got), nSeries)
		}
		for _, sw := range got {
			exp := inRange(want[sw.Labels.String()])
			if len(sw.Windows) != len(exp) {
				return fmt.Errorf("fields %b, %s: %d windows, want %d", f, sw.Labels, len(sw.Windows), len(exp))
			}
			for k, w := range sw.Windows {
				if e := projectWindow(exp[k], colSet(f)|colLastT); w != e {
					return fmt.Errorf("fields %b, %s window %d:\n got %+v\nwant %+v", f, sw.Labels, k, w, e)
				}
			}
		}
		return nil
	}
	t.Run("SelectFields", func(t *testing.T) {
		for _, f := range fieldSets {
			if err := checkFields(f); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("concurrent selects", func(t *testing.T) {
		// Selects of other columns at once, through the tier's pool of
		// batches: none sees another's rows or columns.
		errs := make(chan error, 8)
		var wg sync.WaitGroup
		for i := range cap(errs) {
			wg.Go(func() { errs <- checkFields(fieldSets[i%len(fieldSets)]) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("labels only", func(t *testing.T) {
		got, err := r.SelectLabels(context.Background(), mint, maxt, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m1"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("%d series for m1, want 3", len(got))
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := r.selectColumns(ctx, mint, maxt, nil, selectOptions{batchRows: batchRows}); err == nil {
			t.Fatal("a cancelled select succeeded")
		}
	})
}

// projectWindow zeroes the fields of w a select decoding only cols leaves zero.
func projectWindow(w Window, cols colSet) Window {
	out := Window{Start: w.Start, LastT: w.LastT}
	if cols&colFirstT != 0 {
		out.FirstT = w.FirstT
	}
	if cols&colCount != 0 {
		out.Count = w.Count
	}
	if cols&colSum != 0 {
		out.Sum = w.Sum
	}
	if cols&colMin != 0 {
		out.Min = w.Min
	}
	if cols&colMax != 0 {
		out.Max = w.Max
	}
	if cols&colFirst != 0 {
		out.First = w.First
	}
	if cols&colLast != 0 {
		out.Last = w.Last
	}
	if cols&colIncrease != 0 {
		out.Increase = w.Increase
	}
	if cols&colResets != 0 {
		out.Resets = w.Resets
	}
	if cols&colStale != 0 {
		out.Stale = w.Stale
	}
	return out
}

// TestSelectNamePassesOverOtherMetrics: a name equality matcher passes
// over other metrics' series undecoded (fileReader.admit) and still finds
// every series of its metric, whatever the other labels' values hold (a
// value quoting another name; names JSON escapes).
func TestSelectNamePassesOverOtherMetrics(t *testing.T) {
	cfg := DefaultHourConfig(t.TempDir())
	r := openRollupForTest(t, cfg, nil)
	res := cfg.Resolution.Milliseconds()
	series := []labels.Labels{
		labels.FromStrings("__name__", "a", "v", `"__name__":"b"`),
		labels.FromStrings("__name__", "b"),
		labels.FromStrings("__name__", "b", "x", `"__name__":"a"`),
		labels.FromStrings("__name__", "a<b&c", "v", `"__name__":"a"`),
		labels.FromStrings("__name__", "ab"),
	}
	var sws []SeriesWindows
	for _, l := range series {
		sws = append(sws, SeriesWindows{Labels: l, Windows: []Window{{Start: deriveT0, FirstT: deriveT0, LastT: deriveT0 + res/2, Count: 2, Sum: 3, Min: 1, Max: 2, First: 1, Last: 2, Increase: 1}}})
	}
	slices.SortFunc(sws, func(x, y SeriesWindows) int { return labels.Compare(x.Labels, y.Labels) })
	if err := r.WritePartition(deriveT0, sws); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"a": 1, "b": 2, "a<b&c": 1, "ab": 1, "c": 0} {
		got, err := r.Select(context.Background(), deriveT0, deriveT0+res, labels.MustNewMatcher(labels.MatchEqual, "__name__", name))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Errorf("__name__=%q: %d series, want %d: %v", name, len(got), want, got)
		}
		for _, sw := range got {
			if sw.Labels.Get("__name__") != name {
				t.Errorf("__name__=%q: selected %s", name, sw.Labels)
			}
		}
	}
}

// TestSelectSharedBlocks: series first met in a reader's last file share
// blocks (fileReader.keepRun); with many series of an hour of windows and
// small batches, series are split across batches, the shared blocks fill
// (a continued series then moves to a block of its own), and series met
// in earlier files keep their own. Every series reads back the windows
// written, whatever the columns.
func TestSelectSharedBlocks(t *testing.T) {
	cfg := DefaultMinuteConfig(t.TempDir())
	cfg.RowsPerRowGroup = 97
	r := openRollupForTest(t, cfg, nil)
	const nSeries, nParts = 40, 3
	res, plen := cfg.Resolution.Milliseconds(), cfg.PartitionLength.Milliseconds()
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[string][]Window{}
	for p := range nParts {
		start := deriveT0 + int64(p)*plen
		var series []SeriesWindows
		for i := range nSeries {
			if (i+p)%3 == 0 {
				continue // absent: some series are first met in a reader's last file
			}
			l := labels.FromStrings("__name__", fmt.Sprintf("m%d", i%4), "i", fmt.Sprint(i))
			var ws []Window
			for s := start; s < start+plen; s += res {
				v := float64(rng.IntN(1000))
				ws = append(ws, Window{Start: s, FirstT: s + 1, LastT: s + 2 + int64(rng.IntN(1000)), Count: uint32(1 + rng.IntN(60)),
					Sum: v * 2, Min: v - 1, Max: v + 1, First: v, Last: v + 0.5, Increase: 0.5, Resets: uint32(rng.IntN(2)), Stale: rng.IntN(17) == 0})
			}
			series = append(series, SeriesWindows{Labels: l, Windows: ws})
			want[l.String()] = append(want[l.String()], ws...)
		}
		if err := r.WritePartition(start, series); err != nil {
			t.Fatal(err)
		}
	}
	mint, maxt := deriveT0, deriveT0+int64(nParts)*plen-1
	for _, batchRows := range []int{31, 200, defaultBatchRows} {
		for _, need := range []colSet{colAll, columnsFor(modeLast)} {
			sel, err := r.selectColumns(context.Background(), mint, maxt, nil, selectOptions{need: need, batchRows: batchRows})
			if err != nil {
				t.Fatal(err)
			}
			if len(sel) != nSeries {
				t.Fatalf("batch %d: %d series, want %d", batchRows, len(sel), nSeries)
			}
			for _, s := range sel {
				exp, got := want[s.lbls.String()], s.ws.appendTo(nil)
				if len(got) != len(exp) {
					t.Fatalf("batch %d, %s: %d windows, want %d", batchRows, s.lbls, len(got), len(exp))
				}
				for k := range got {
					if e := projectWindow(exp[k], need|colLastT); got[k] != e {
						t.Fatalf("batch %d, %s window %d:\n got %+v\nwant %+v", batchRows, s.lbls, k, got[k], e)
					}
				}
			}
		}
	}
}

// TestKeepRunSharedNotContiguous: a series sharing a block whose next
// rows would not follow its last ones there (another series' rows came
// between: a file whose series' rows are not contiguous) moves to a block
// of its own, and neither series' windows change.
func TestKeepRunSharedNotContiguous(t *testing.T) {
	const res = 60_000
	fr := newFileReader(newRollupQuery(0, 1<<40, res, nil, selectOptions{need: colAll}))
	fr.batch = newWindowBlock(res, colAll, 16)
	var ws []Window
	for i := range 7 {
		s := int64(i) * res
		ws = append(ws, Window{Start: s, LastT: s + 5, Count: 1, Sum: float64(i), Last: float64(i), Stale: i == 4})
	}
	appendWindows(fr.batch, ws)
	fr.series = []localSeries{{key: keyOf([]byte("a")), lbls: labels.FromStrings("s", "a")}, {key: keyOf([]byte("b")), lbls: labels.FromStrings("s", "b")}}
	// a's rows 0-2, b's 3-4, a's 5-6, all read from the reader's last file.
	for _, r := range []batchRun{{si: 0, lo: 0, hi: 3, filesLeft: 1}, {si: 1, lo: 3, hi: 5, filesLeft: 1}, {si: 0, lo: 5, hi: 7, filesLeft: 1}} {
		fr.keepRun(&fr.series[r.si], r)
	}
	if a, b := fr.series[0], fr.series[1]; !b.shared || a.shared || a.blk == b.blk {
		t.Fatalf("a shared %v, b shared %v, same block %v: want a moved to its own block", a.shared, b.shared, a.blk == b.blk)
	}
	sel := mergeReaders([]*fileReader{fr}, false)
	wantOf := map[string][]Window{`{s="a"}`: {ws[0], ws[1], ws[2], ws[5], ws[6]}, `{s="b"}`: {ws[3], ws[4]}}
	for _, s := range sel {
		if got := s.ws.appendTo(nil); !slices.Equal(got, wantOf[s.lbls.String()]) {
			t.Fatalf("%s:\n got %+v\nwant %+v", s.lbls, got, wantOf[s.lbls.String()])
		}
	}
}

// TestSkipOf: a series keeps its windows from the one holding its from, as
// the open windows' collector keeps them; none when from is past the
// query; all when from is before the query or the span overflows.
func TestSkipOf(t *testing.T) {
	const res = 60_000
	mint, maxt := int64(10*res), int64(20*res)
	for _, c := range []struct {
		from int64
		want int32
	}{
		{math.MinInt64, 0},
		{mint - 1, 0},
		{mint, 0},
		{mint + res/2, 0}, // inside the first window: it is kept
		{mint + res, 1},
		{mint + 3*res + 1, 3},
		{maxt, 10},
		{math.MaxInt64, 11}, // past the last window: none kept
	} {
		q := newRollupQuery(mint, maxt, res, nil, selectOptions{seriesFrom: func(labels.Labels) int64 { return c.from }})
		if got := q.skipOf(labels.EmptyLabels()); got != c.want {
			t.Errorf("from %d: skip %d, want %d", c.from, got, c.want)
		}
	}
	q := newRollupQuery(math.MinInt64+1, 0, res, nil, selectOptions{seriesFrom: func(labels.Labels) int64 { return -1 }})
	if got := q.skipOf(labels.EmptyLabels()); got != 0 {
		t.Errorf("a span past int32's windows: skip %d, want 0", got)
	}
}

// TestSelectColumnsNamesFailedPartition: a select over partitions read in
// parallel, one of which cannot be read (the system fails the read: a
// directory in its file's place), fails naming that partition, without the
// "context canceled" of the readers its failure stopped. (A file whose
// bytes are corrupt is set aside instead: TestRollupSetsCorruptPartitionsAside.)
func TestSelectColumnsNamesFailedPartition(t *testing.T) {
	cfg := DefaultMinuteConfig(t.TempDir())
	r := openRollupForTest(t, cfg, nil)
	res, plen := cfg.Resolution.Milliseconds(), cfg.PartitionLength.Milliseconds()
	l := labels.FromStrings("__name__", "m", "i", "0")
	const nParts = 24
	for p := range nParts {
		start := deriveT0 + int64(p)*plen
		var ws []Window
		for s := start; s < start+plen; s += res {
			ws = append(ws, Window{Start: s, FirstT: s, LastT: s, Count: 1, Sum: 1, Min: 1, Max: 1, First: 1, Last: 1})
		}
		if err := r.WritePartition(start, []SeriesWindows{{Labels: l, Windows: ws}}); err != nil {
			t.Fatal(err)
		}
	}
	bad := r.Partitions()[0] // the first reader fails while the others read
	if err := os.Remove(bad.Path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(bad.Path, 0o750); err != nil {
		t.Fatal(err)
	}
	ctx := parallel.WithBudget(context.Background(), 4) // readers that the failure stops
	_, err := r.selectColumns(ctx, deriveT0, deriveT0+nParts*plen, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")}, selectOptions{})
	if err == nil {
		t.Fatal("a select over an unreadable partition file did not fail")
	}
	if !strings.Contains(err.Error(), bad.Path) {
		t.Errorf("the error does not name the partition %s: %v", bad.Path, err)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("the error carries the stopped readers' cancellation: %v", err)
	}
}
