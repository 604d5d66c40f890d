package tiers_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/tiers"
)

// TestRollupSetsCorruptPartitionsAside: a partition file whose footer is
// cut off no longer keeps the tier from opening, and one whose page fails
// its checksum no longer fails every query over its hour: both are moved to
// corrupt/, queries answer without them (with a warning through Stitched),
// and a partition written again for the hour ends the warning. A read-only
// tier skips the file and leaves it where it is.
func TestRollupSetsCorruptPartitionsAside(t *testing.T) {
	dir := t.TempDir()
	lbls := labels.FromStrings("__name__", "m", "job", "j")
	cfg := tiers.DefaultMinuteConfig(dir)
	r, err := tiers.OpenRollup(cfg, quietLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hours := []int64{testT0, testT0 + hourMs, testT0 + 2*hourMs}
	for i, h := range hours {
		if err := r.WritePartition(h, []tiers.SeriesWindows{{Labels: lbls, Windows: sampleWindows(h, 60, float64(100*i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	name := func(h int64) string { return "p-" + time.UnixMilli(h).UTC().Format("20060102T1504Z") + ".parquet" }
	// Hour 1: its footer cut off. Hour 2: the last byte of its "last"
	// column's page flipped (its footer intact).
	truncated := filepath.Join(dir, name(hours[1]))
	st, err := os.Stat(truncated)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(truncated, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	flipped := filepath.Join(dir, name(hours[2]))
	flipLastColumnByte(t, flipped, "last")

	ro, err := tiers.OpenRollup(tiers.RollupConfig{Name: "minute", Dir: dir, Resolution: time.Minute, PartitionLength: time.Hour, ReadOnly: true}, quietLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatalf("a read-only tier with a corrupt partition: %v", err)
	}
	if n := len(ro.Partitions()); n != 2 {
		t.Errorf("the read-only tier lists %d partitions, want the 2 intact ones", n)
	}
	_ = ro.Close()
	if _, err := os.Stat(truncated); err != nil {
		t.Fatalf("a read-only tier moved the corrupt file: %v", err)
	}

	reg := prometheus.NewRegistry()
	r, err = tiers.OpenRollup(cfg, quietLogger(), reg, nil)
	if err != nil {
		t.Fatalf("open with a corrupt partition: %v", err)
	}
	defer r.Close()
	if r.HasPartition(hours[1]) {
		t.Fatal("the partition whose footer is cut off is listed")
	}
	if _, err := os.Stat(filepath.Join(dir, tiers.CorruptDir, name(hours[1]))); err != nil {
		t.Fatalf("not set aside: %v", err)
	}
	got, err := r.Select(context.Background(), testT0, testT0+3*hourMs-1)
	if err != nil {
		t.Fatalf("a select over a partition whose page is corrupt: %v", err)
	}
	if len(got) != 1 || len(got[0].Windows) != 60 || got[0].Windows[0].Start != hours[0] {
		t.Fatalf("select answered %+v, want hour 0's 60 windows", got)
	}
	if r.HasPartition(hours[2]) {
		t.Fatal("the partition whose page is corrupt is still listed")
	}
	if want := []int64{hours[1], hours[2]}; !slices.Equal(r.CorruptPartitions(testT0, testT0+3*hourMs-1), want) {
		t.Fatalf("corrupt partitions %v, want %v", r.CorruptPartitions(testT0, testT0+3*hourMs-1), want)
	}
	if n := counterValue(t, reg, "strata_tiers_corrupt_partitions_total"); n != 2 {
		t.Errorf("strata_tiers_corrupt_partitions_total = %v, want 2", n)
	}

	warnings := func() string {
		t.Helper()
		q, err := tiers.NewStitched(nil, r, nil).Querier(testT0, testT0+3*hourMs-1)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
		for set.Next() {
		}
		if err := set.Err(); err != nil {
			t.Fatal(err)
		}
		var ws []string
		for _, w := range set.Warnings() {
			ws = append(ws, w.Error())
		}
		return strings.Join(ws, "\n")
	}
	if w := warnings(); strings.Count(w, "was corrupt and is set aside") != 2 {
		t.Fatalf("warnings %q, want one for each partition set aside", w)
	}

	// Written again (a backfill of the source): no longer missing.
	if err := r.WritePartition(hours[1], []tiers.SeriesWindows{{Labels: lbls, Windows: sampleWindows(hours[1], 60, 100)}}); err != nil {
		t.Fatal(err)
	}
	if w := warnings(); strings.Count(w, "was corrupt") != 1 || !strings.Contains(w, time.UnixMilli(hours[2]).UTC().Format(time.RFC3339)) {
		t.Fatalf("after hour 1 was written again, warnings %q, want hour 2's only", w)
	}
	r.Close()
	// After a restart the file set aside still warns.
	r2 := openTestRollup(t, cfg, nil)
	if got := r2.CorruptPartitions(testT0, testT0+3*hourMs-1); !slices.Equal(got, []int64{hours[2]}) {
		t.Fatalf("after a restart, corrupt partitions %v, want hour 2", got)
	}
}

// flipLastColumnByte inverts the last byte of column col's chunk in the
// first row group of the Parquet file at path: page data, not its header,
// so the page fails its checksum.
func flipLastColumnByte(t *testing.T, path, col string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pf, err := parquet.OpenFile(f, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	leaf, ok := pf.Schema().Lookup(col)
	if !ok {
		t.Fatalf("no column %q", col)
	}
	md := pf.Metadata().RowGroups[0].Columns[leaf.ColumnIndex].MetaData
	start := md.DataPageOffset
	if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < start {
		start = md.DictionaryPageOffset
	}
	at := start + md.TotalCompressedSize - 1
	b[at] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// counterValue is the value of the registered counter name's one series.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRawSetsCorruptBlocksAside: a raw block whose index is cut short no
// longer keeps the raw tier from opening (the TSDB's "corrupted block"): it
// is moved to corrupt/, counted, and the other blocks' samples are read as
// before, the tier's metrics registered once on the same registry.
func TestRawSetsCorruptBlocksAside(t *testing.T) {
	dir := t.TempDir()
	const step = 15_000
	var blocks []string
	for b := range 3 {
		var xs []chunks.Sample
		for ts := testT0 + int64(b)*hourMs; ts < testT0+int64(b+1)*hourMs; ts += step {
			xs = append(xs, sample{t: ts, f: float64(b)})
		}
		id, err := tsdb.CreateBlock([]storage.Series{storage.NewListSeries(labels.FromStrings("__name__", "m"), xs)}, dir, 2*hourMs, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, id)
	}
	index := filepath.Join(blocks[1], "index")
	if err := os.Truncate(index, 1000); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(dir), quietLogger(), reg)
	if err != nil {
		t.Fatalf("open with a corrupt block: %v", err)
	}
	defer raw.Close()
	if _, err := os.Stat(filepath.Join(dir, tiers.CorruptDir, filepath.Base(blocks[1]), "index")); err != nil {
		t.Fatalf("the corrupt block was not set aside: %v", err)
	}
	q, err := raw.Querier(testT0, testT0+3*hourMs)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	n := 0
	for set.Next() {
		it := set.At().Iterator(nil)
		for it.Next() != chunkenc.ValNone {
			if _, v := it.At(); v == 1 {
				t.Fatal("a sample of the block set aside was read")
			}
			n++
		}
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	if want := 2 * int(hourMs/step); n != want {
		t.Errorf("read %d samples, want the two intact blocks' %d", n, want)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "corrupt_blocks_set_aside" {
			found = mf.GetMetric()[0].GetGauge().GetValue() == 1
		}
	}
	if !found {
		t.Error("corrupt_blocks_set_aside is not 1")
	}
}

// TestRawLockedLeavesBlocks: a raw tier another process has open (its
// lock held) is not opened, and none of its blocks is moved, even one that
// would not open: it is the holder's (a second strata serve or a strata
// backfill started by mistake moved a block the running server served).
func TestRawLockedLeavesBlocks(t *testing.T) {
	dir := t.TempDir()
	var xs []chunks.Sample
	for ts := testT0; ts < testT0+hourMs; ts += 15_000 {
		xs = append(xs, sample{t: ts, f: 1})
	}
	id, err := tsdb.CreateBlock([]storage.Series{storage.NewListSeries(labels.FromStrings("__name__", "m"), xs)}, dir, 2*hourMs, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	holder, err := tiers.OpenRaw(tiers.DefaultRawConfig(dir), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	// The block no longer opens on its own (its meta.json gone), as a
	// block the holder is in the middle of changing might not.
	if err := os.Remove(filepath.Join(id, "meta.json")); err != nil {
		t.Fatal(err)
	}
	_, err = tiers.OpenRaw(tiers.DefaultRawConfig(dir), quietLogger(), prometheus.NewRegistry())
	if _, serr := os.Stat(id); serr != nil {
		t.Fatalf("the held tier's block was moved: %v (open: %v)", serr, err)
	}
	if err == nil || !strings.Contains(err.Error(), "another process has the raw tier open") {
		t.Fatalf("a second open of a held tier: %v", err)
	}
}
