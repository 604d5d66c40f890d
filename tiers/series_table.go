package tiers

import (
	"os"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/zeebo/xxh3"

	"github.com/strata-dev/strata/internal/labelshare"
)

// seriesTable is the series of the partition file this process wrote
// last, one entry per series run (seriesRunsKey), in row order: what a
// file reader otherwise learns from the file's labels column.
//
// The diagnosis engine's snapshot reads the newest minute partition every
// minute for as long as its reach covers the hour: at 500,000 series, each
// of those reads decoded every series' labels (the labels column's
// dictionary pages, 59 MB) and built maps from the text and the id of each
// to its series (80 MB), in the minutes just after the hour's write, when
// Strata's memory peaks (docs/bench.md, stops 39 and 40). The writer has every
// series' labels at hand; kept here, a reader of that file maps each run to
// its series through the run's position, and decodes no labels.
//
// Since the hour's write waits for the engine's minutes to leave the hour
// (downsample.Pipeline.HoldReads), the engine reads the new file only when
// it lags by more than the pipeline's grace, and the pipeline asks for no
// table when the engine has left the hour (WriteOptions.NoSeriesTable): it
// held 36.8 MB all hour in stop 42's run at 500,000 series (the fleet's
// series runs and the engine's baselines') for the file's other readers
// alone (the stitched view's baseline series, the StoreAPI's minute-tier
// reads), who read every older file without one (docs/bench.md, stop 43).
// With the engine off no table is kept either; with a custom rule reaching
// too far back for the pipeline to wait (diagnose.Engine.Run), or a write
// at the end of the pipeline's grace (the engine lagging), it is.
//
// One table is kept, the last written partition's: the one the engine
// reads. It adds about 44 bytes a series run: its label
// sets are the raw tier's head's (Rollup.ShareLabels) where the head holds
// the series, else those the writer was given, which the process holds
// anyway (the rollup tee's, for the engine's baselines, which only the
// minute tier keeps). A copy of each that the head did not hold cost 81 MB
// at 500,000 series, for 270,000 baseline series.
type seriesTable struct {
	start int64
	file  os.FileInfo // the file written; a reader uses the table only for the same file (os.SameFile)
	keys  []textKey   // the labels column text's, as fileReader.byKey is keyed
	ids   []int64
	rows  []int32 // each run's rows
	lbls  []labels.Labels
	// shared says the label sets were looked up in a shared store: a
	// reader sharing labels (selectOptions.shared, the same raw head in
	// strata serve) need not look them up again.
	shared bool
}

// tableBuilder collects a seriesTable as partitionWriter writes runs.
type tableBuilder struct {
	t     *seriesTable
	share labelshare.Finder
}

// newTableBuilder starts a table of about hint runs taking label sets from
// shared where it holds them.
func newTableBuilder(start int64, hint int, shared labelshare.Finder) *tableBuilder {
	return &tableBuilder{share: shared, t: &seriesTable{start: start, shared: shared.Src != nil,
		keys: make([]textKey, 0, hint), ids: make([]int64, 0, hint), rows: make([]int32, 0, hint), lbls: make([]labels.Labels, 0, hint)}}
}

// held is the label set the table keeps for lbls, a series the writer was
// just given: the shared store's, else lbls.
func (b *tableBuilder) held(lbls labels.Labels) labels.Labels {
	if h, ok := b.share.Find(lbls); ok {
		return h
	}
	return lbls
}

// add appends a run of rows of the series whose labels column text is
// text, and whose label set held returned.
func (b *tableBuilder) add(text string, id int64, rows int, held labels.Labels) {
	t := b.t
	t.keys = append(t.keys, xxh3.HashString128(text))
	t.ids = append(t.ids, id)
	t.rows = append(t.rows, int32(rows)) //nolint:gosec // a partition's windows of one series
	t.lbls = append(t.lbls, held)
}

// close releases the shared store.
func (b *tableBuilder) close() { b.share.Close() }

// fileTable is a seriesTable matched to one open file's row groups.
type fileTable struct {
	*seriesTable
	// first is, per row group, the table's run its first rows belong to,
	// and skip how many rows of that run earlier row groups hold: a run
	// cut at a row group boundary goes on in the next.
	first, skip []int32
}

// matchTable matches t to a file of the same partition, whose
// seriesRunsKey value is runs and whose row groups hold groupRows rows, or
// returns nil if they disagree: the file's runs must be the table's (ids
// and rows), in order. It reads the value as it goes: a reader with the
// table never parses the file's runs (rowGroupRuns: 12 MB at 500,000
// series, allocated when the diagnosis engine first reads the hour's new
// partition, in the minute Strata's memory peaks; docs/bench.md, stop 41).
func matchTable(t *seriesTable, runs string, groupRows []int64) *fileTable {
	if t == nil || runs == "" {
		return nil
	}
	rr := newRunsReader(runs)
	for o := range t.ids {
		r, ok, err := rr.next()
		if err != nil || !ok || r.id != t.ids[o] || r.rows != int64(t.rows[o]) {
			return nil
		}
	}
	if _, more, err := rr.next(); more || err != nil { // more runs than the table's
		return nil
	}
	ft := &fileTable{seriesTable: t, first: make([]int32, len(groupRows)), skip: make([]int32, len(groupRows))}
	o, done := 0, int64(0) // the table's current run, and its rows in earlier groups
	for i, left := range groupRows {
		ft.first[i], ft.skip[i] = int32(o), int32(done) //nolint:gosec // runs and rows fit int32 (table rows are int32 each)
		for left > 0 {
			if o == len(t.rows) {
				return nil
			}
			take := min(left, int64(t.rows[o])-done)
			left -= take
			done += take
			if done == int64(t.rows[o]) {
				o, done = o+1, 0
			}
		}
	}
	if o != len(t.rows) {
		return nil
	}
	return ft
}
