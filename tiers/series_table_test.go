package tiers

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/labelshare"
	"github.com/strata-dev/strata/internal/parallel"
)

// runsValue is the seriesRunsKey value of runs, as the writer makes it.
func runsValue(runs ...seriesRun) string {
	var b []byte
	for _, r := range runs {
		b = appendSeriesRun(b, r.id, int(r.rows))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// TestMatchTable: a table's runs are placed in each row group, a run cut
// by row group boundaries (series 7's, over three groups) or two series
// with one id (3) included; a table that disagrees with the file, in its
// runs or its rows, is not used.
func TestMatchTable(t *testing.T) {
	table := &seriesTable{ids: []int64{7, 3, 3, 9}, rows: []int32{5, 4, 2, 1}}
	same := runsValue(seriesRun{7, 5}, seriesRun{3, 4}, seriesRun{3, 2}, seriesRun{9, 1})
	for _, c := range []struct {
		groups      []int64
		first, skip []int32
	}{
		{[]int64{4, 4, 4}, []int32{0, 0, 1}, []int32{0, 4, 3}},
		{[]int64{2, 2, 2, 2, 2, 2}, []int32{0, 0, 0, 1, 1, 2}, []int32{0, 2, 4, 1, 3, 1}},
		{[]int64{0, 12, 0}, []int32{0, 0, 4}, []int32{0, 0, 0}}, // empty groups (their first is never read)
		{[]int64{12}, []int32{0}, []int32{0}},
	} {
		ft := matchTable(table, same, c.groups)
		if ft == nil {
			t.Fatalf("groups %v: no table", c.groups)
		}
		if !slices.Equal(ft.first, c.first) || !slices.Equal(ft.skip, c.skip) {
			t.Fatalf("groups %v: first %v skip %v, want %v %v", c.groups, ft.first, ft.skip, c.first, c.skip)
		}
	}
	for _, c := range []struct {
		runs   string
		groups []int64
	}{
		{runsValue(seriesRun{7, 5}, seriesRun{3, 4}, seriesRun{4, 2}, seriesRun{9, 1}), []int64{12}},                  // another id
		{runsValue(seriesRun{7, 6}, seriesRun{3, 3}, seriesRun{3, 2}, seriesRun{9, 1}), []int64{12}},                  // other rows
		{runsValue(seriesRun{7, 5}, seriesRun{3, 4}, seriesRun{3, 2}), []int64{11}},                                   // fewer runs
		{runsValue(seriesRun{7, 5}, seriesRun{3, 4}, seriesRun{3, 2}, seriesRun{9, 1}, seriesRun{9, 1}), []int64{13}}, // more runs
		{same, []int64{4, 4, 3}}, // fewer rows in the file
		{same, []int64{4, 4, 5}}, // more
		{same[:len(same)-8], []int64{12}},
		{"not base64!", []int64{12}},
		{"", []int64{12}}, // a file without runs
	} {
		if ft := matchTable(table, c.runs, c.groups); ft != nil {
			t.Fatalf("runs %q, groups %v: a table %v, want none", c.runs, c.groups, ft.first)
		}
	}
	if matchTable(nil, same, []int64{12}) != nil {
		t.Fatal("a file's runs without a table")
	}
}

const tableT0 = int64(1_767_225_600_000) // 2026-01-01T00:00:00Z, an hour's start

// tableSeries is n series of two metrics, series i with (i*7)%60+1 minute
// windows of the hour at start (some stale), for a partition written with
// small row groups so that runs span several.
func tableSeries(start int64, n int, seed float64) []SeriesWindows {
	out := make([]SeriesWindows, 0, n)
	for i := range n {
		var ws []Window
		for m := range (i*7)%60 + 1 {
			s := start + int64(m)*60_000
			v := seed + float64(i) + float64(m)/8
			ws = append(ws, Window{Start: s, FirstT: s, LastT: s + 45_000, Count: 4, Sum: 4 * v, Min: v - 1, Max: v + 1, First: v, Last: v, Increase: float64(m), Stale: m == 3 && i%5 == 0})
		}
		out = append(out, SeriesWindows{Labels: labels.FromStrings("__name__", []string{"vllm:num_requests_running", "DCGM_FI_DEV_GPU_UTIL"}[i%2],
			"instance", fmt.Sprintf("10.0.0.%d:8000", i), "job", "vllm"), Windows: ws})
	}
	return out
}

func openTableRollup(t *testing.T, dir string) *Rollup {
	t.Helper()
	cfg := DefaultMinuteConfig(dir)
	cfg.RowsPerRowGroup = 16
	r, err := OpenRollup(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// selectAll is what r's select of [mint, maxt] returns, by series.
func selectAll(t *testing.T, ctx context.Context, r *Rollup, mint, maxt int64, opts selectOptions, ms ...*labels.Matcher) map[string][]Window {
	t.Helper()
	sel, err := r.selectColumns(ctx, mint, maxt, ms, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]Window{}
	for _, s := range sel {
		out[s.lbls.String()] = s.ws.appendTo(nil)
	}
	return out
}

// TestSeriesTableSelect: selects through the series table of the
// partition written last return what a reader decoding the file's labels
// returns (the same directory opened again, as after a restart), for one
// file and for a reader of two (the table's file first or last), and a
// rewritten partition's new table is used, not the old one.
func TestSeriesTableSelect(t *testing.T) {
	dir := t.TempDir()
	r := openTableRollup(t, dir)
	hour := int64(3_600_000)
	// The later hour first: the table is then the earlier hour's, read
	// before a file without one.
	for _, c := range []struct {
		start int64
		seed  float64
	}{{tableT0 + hour, 1000}, {tableT0, 0}} {
		if err := r.WritePartition(c.start, tableSeries(c.start, 60, c.seed)); err != nil {
			t.Fatal(err)
		}
	}
	tableOf := func(r *Rollup, start int64) *fileTable {
		t.Helper()
		p := r.Partitions()[slices.IndexFunc(r.Partitions(), func(p PartitionInfo) bool { return p.Start == start })]
		of, err := r.files.acquire(p)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.files.release(of) }()
		return r.files.tableOf(of)
	}
	check := func(name string) {
		t.Helper()
		last := tableT0
		if name == "later hour" {
			last = tableT0 + hour
		}
		if tableOf(r, last) == nil || tableOf(r, tableT0+tableT0+hour-last) != nil {
			t.Fatalf("%s: the table is not the last written partition's alone", name)
		}
		again := openTableRollup(t, dir) // no table: every file's labels decoded
		if tableOf(again, tableT0) != nil {
			t.Fatalf("%s: a reopened tier has a table", name)
		}
		for _, ms := range [][]*labels.Matcher{
			nil,
			{labels.MustNewMatcher(labels.MatchEqual, "__name__", "DCGM_FI_DEV_GPU_UTIL")},
			{labels.MustNewMatcher(labels.MatchRegexp, "instance", "10.0.0.[1-3].*")},
			{labels.MustNewMatcher(labels.MatchEqual, "__name__", "none")},
		} {
			for _, budget := range []int{1, 2} { // 1: one reader of both files
				ctx := parallel.WithBudget(context.Background(), budget)
				for _, span := range [][2]int64{{tableT0, tableT0 + hour - 1}, {tableT0 + 20*60_000, tableT0 + hour + 30*60_000}, {tableT0, tableT0 + 2*hour}} {
					for _, opts := range []selectOptions{{need: colAll}, {need: colAll, batchRows: 7}, {need: colLast | colCount}, {labelsOnly: true}} {
						want := selectAll(t, ctx, again, span[0], span[1], opts, ms...)
						got := selectAll(t, ctx, r, span[0], span[1], opts, ms...)
						if len(got) != len(want) {
							t.Fatalf("%s %v budget %d span %v: %d series, want %d", name, ms, budget, span, len(got), len(want))
						}
						for k, w := range want {
							if g, ok := got[k]; !ok || !slices.Equal(g, w) {
								t.Fatalf("%s %v budget %d span %v: %s\n got %v\nwant %v", name, ms, budget, span, k, g, w)
							}
						}
					}
				}
			}
		}
		_ = again.Close()
	}
	check("written")
	// A reader with the table never parsed that file's runs; the other
	// file's were parsed for its readers.
	parsed := func(start int64) bool {
		r.files.mu.Lock()
		defer r.files.mu.Unlock()
		of, ok := r.files.files[start]
		if !ok {
			t.Fatalf("partition %d not cached", start)
		}
		return of.runs != nil
	}
	if parsed(tableT0) || !parsed(tableT0+hour) {
		t.Fatalf("runs parsed: the table's file %v, the other %v; want false, true", parsed(tableT0), parsed(tableT0+hour))
	}
	// The earlier hour rewritten with other series: its new table.
	if err := r.WritePartition(tableT0, tableSeries(tableT0, 45, 500)); err != nil {
		t.Fatal(err)
	}
	check("rewritten")
	got := selectAll(t, context.Background(), r, tableT0, tableT0+hour-1, selectOptions{need: colAll})
	if len(got) != 45 {
		t.Fatalf("after the rewrite %d series, want 45", len(got))
	}
	// The later hour rewritten: the table's file is now the last of a
	// reader's range, after one without.
	if err := r.WritePartition(tableT0+hour, tableSeries(tableT0+hour, 50, 2000)); err != nil {
		t.Fatal(err)
	}
	// The earlier hour's cached file no longer holds the table it had:
	// one table is kept, the latest.
	r.files.mu.Lock()
	of, ok := r.files.files[tableT0]
	kept := ok && of.table != nil
	r.files.mu.Unlock()
	if !ok || kept {
		t.Fatalf("earlier hour cached %v, its old table kept %v", ok, kept)
	}
	check("later hour")
	if !parsed(tableT0) || parsed(tableT0+hour) {
		t.Fatalf("runs parsed: the earlier hour's (no table now) %v, the table's %v; want true, false", parsed(tableT0), parsed(tableT0+hour))
	}
}

// TestWriteWithoutSeriesTable: a write with NoSeriesTable keeps no table,
// and drops the one of the partition written before; the file reads as
// one written with a table does.
func TestWriteWithoutSeriesTable(t *testing.T) {
	r := openTableRollup(t, t.TempDir())
	hour := int64(3_600_000)
	if err := r.WritePartition(tableT0, tableSeries(tableT0, 40, 0)); err != nil {
		t.Fatal(err)
	}
	latest := func() *seriesTable {
		r.files.mu.Lock()
		defer r.files.mu.Unlock()
		return r.files.latest
	}
	if latest() == nil {
		t.Fatal("WritePartition kept no table")
	}
	want := selectAll(t, context.Background(), r, tableT0, tableT0+2*hour, selectOptions{need: colAll})
	series := tableSeries(tableT0+hour, 50, 1000)
	slices.SortFunc(series, func(a, b SeriesWindows) int {
		return ComparePartitionOrder(a.Labels, SeriesID(a.Labels), b.Labels, SeriesID(b.Labels))
	})
	in := func(yield func(SeriesWindows, error) bool) {
		for _, s := range series {
			if !yield(s, nil) {
				return
			}
		}
	}
	if err := r.WritePartitionSeries(tableT0+hour, in, WriteOptions{NoSeriesTable: true}); err != nil {
		t.Fatal(err)
	}
	if tb := latest(); tb != nil {
		t.Fatalf("a table kept for partition %d", tb.start)
	}
	got := selectAll(t, context.Background(), r, tableT0, tableT0+2*hour, selectOptions{need: colAll})
	for _, s := range series {
		want[s.Labels.String()] = append(want[s.Labels.String()], s.Windows...)
	}
	if len(got) != len(want) {
		t.Fatalf("%d series, want %d", len(got), len(want))
	}
	for k, w := range want {
		if g := got[k]; !slices.Equal(g, w) {
			t.Fatalf("%s\n got %v\nwant %v", k, g, w)
		}
	}
}

// TestTableBuilderShares: the table keeps the shared store's label set
// where it holds the series, else the one the writer was given; neither
// is copied.
func TestTableBuilderShares(t *testing.T) {
	raw, err := OpenRaw(DefaultRawConfig(t.TempDir()), slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	held := labels.FromStrings("__name__", "m", "instance", "held")
	app := raw.Appender(context.Background())
	if _, err := app.Append(0, held, tableT0, 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	gr := raw.AppenderV2(context.Background())
	_, headHeld := gr.(storage.GetRef).GetRef(held, held.Hash())
	_ = gr.Rollback()
	other := labels.FromStrings("__name__", "m", "instance", "other")
	given := []labels.Labels{held.Copy(), other, held.Copy()}
	for _, c := range []struct {
		name   string
		shared labelshare.Finder
		want   []labels.Labels // the very sets kept
	}{
		{"shared", labelshare.Finder{Src: raw}, []labels.Labels{headHeld, other, headHeld}},
		{"alone", labelshare.Finder{}, given},
	} {
		b := newTableBuilder(0, 0, c.shared)
		for i, l := range given {
			b.add(fmt.Sprint(i), int64(i), 1, b.held(l))
		}
		b.close()
		tab := b.t
		if tab.shared != (c.shared.Src != nil) || len(tab.lbls) != len(given) {
			t.Fatalf("%s: table %+v", c.name, tab)
		}
		for i, want := range c.want {
			if !sameData(tab.lbls[i], want) {
				t.Fatalf("%s: run %d keeps %s, not the set wanted", c.name, i, tab.lbls[i])
			}
		}
	}
}

// sameData reports whether two label sets are the same bytes in memory,
// not equal copies.
func sameData(a, b labels.Labels) bool {
	return labels.Equal(a, b) && unsafe.StringData(*(*string)(unsafe.Pointer(&a))) == unsafe.StringData(*(*string)(unsafe.Pointer(&b)))
}
