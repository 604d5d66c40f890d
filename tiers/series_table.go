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
// One table is kept, the last written partition's: the one the engine
// reads. It adds about 44 bytes a series (22 MB at 500,000): its label
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
	// first is, per row group, the run of the table its first rows
	// belong to: run j of row group i (openFile.runs) is the table's
	// first[i]+j.
	first []int32
}

// matchTable matches t to the runs of an open file (openFile.runs) of the
// same partition, or returns nil if they disagree: runs split at row group
// boundaries, so each row group's runs are consecutive runs of the table,
// the first of them perhaps the rest of the previous group's last.
func matchTable(t *seriesTable, runs [][]seriesRun) *fileTable {
	if t == nil || runs == nil {
		return nil
	}
	ft := &fileTable{seriesTable: t, first: make([]int32, len(runs))}
	o, left := -1, int64(0) // the table's current run, and its rows not met yet
	for i, rg := range runs {
		for j, r := range rg {
			if left == 0 {
				o++
				if o == len(t.ids) {
					return nil
				}
				left = int64(t.rows[o])
			}
			if j == 0 {
				ft.first[i] = int32(o) //nolint:gosec // runs fit int32 (table rows are int32 each)
			}
			if r.id != t.ids[o] || r.rows > left {
				return nil
			}
			left -= r.rows
		}
	}
	if left != 0 || o != len(t.ids)-1 {
		return nil
	}
	return ft
}
