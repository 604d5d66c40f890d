package tiers

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// TestMergeOpenSharedBlock: open windows collected into one shared block read
// back exactly as given, per series, with stale flags on the right rows,
// whether a series is open only or continues a disk sequence (whose own
// blocks keep their rows), in label order whatever order they came in, and
// the shared block is one allocation of columns for all of them.
func TestMergeOpenSharedBlock(t *testing.T) {
	const res = 60_000
	win := func(start int64, v float64, stale bool) Window {
		return Window{Start: start, FirstT: start + 1_000, LastT: start + 59_000, Count: 4, Sum: 4 * v, Min: v - 1, Max: v + 1,
			First: v - 1, Last: v, Increase: 1, Resets: 1, Stale: stale}
	}
	diskWs := []Window{win(0, 1, false), win(res, 2, true)}
	disk := []selectedSeries{{lbls: labels.FromStrings("s", "b"), ws: seqOf(blockFromWindows(res, colAll, diskWs))}}
	open := []SeriesWindows{
		{Labels: labels.FromStrings("s", "a"), Windows: []Window{win(2*res, 3, false), win(3*res, 4, true)}},
		{Labels: labels.FromStrings("s", "b"), Windows: []Window{win(res, 9, false), win(2*res, 5, false), win(3*res, 6, true)}},
		{Labels: labels.FromStrings("s", "c"), Windows: []Window{win(3*res, 7, true)}},
	}
	c := openCollector{res: res}
	for _, i := range []int{2, 0, 1} { // a source hands series over in any order
		c.Series(open[i].Labels, open[i].Windows)
	}
	got := mergeOpen(disk, &c)
	want := map[string][]Window{
		"a": open[0].Windows,
		"b": append(slices.Clone(diskWs), open[1].Windows[1:]...), // the disk's window of a start wins
		"c": open[2].Windows,
	}
	if len(got) != len(want) {
		t.Fatalf("%d series, want %d", len(got), len(want))
	}
	var shared *windowBlock
	for _, s := range got {
		name := s.lbls.Get("s")
		ws := s.ws.appendTo(nil)
		if !slices.Equal(ws, want[name]) {
			t.Errorf("series %s: appendTo\n%+v\nwant\n%+v", name, ws, want[name])
		}
		hint := 0
		for i := range s.ws.Len() {
			var w Window
			s.ws.at(i, &hint, &w)
			if w != want[name][i] {
				t.Errorf("series %s window %d: %+v, want %+v", name, i, w, want[name][i])
			}
		}
		last, _, _ := s.ws.block(s.ws.blocks() - 1)
		if shared == nil {
			shared = last
		} else if last != shared {
			t.Errorf("series %s has a block of its own", name)
		}
	}
	// b's first open window is held but not read: the disk has its start.
	if n := len(shared.lastT); n != 6 || cap(shared.lastT) != sharedBlockMin {
		t.Errorf("shared block holds %d rows (capacity %d), want 6 (a: 2, b: 3, c: 1), copied once into a block of %d", n, cap(shared.lastT), sharedBlockMin)
	}
}

// TestOpenCollectorBlocks: series handed over in any order, more than one
// block holds, each read back whole and exactly once, in label order, its
// rows contiguous in one block; the blocks double from sharedBlockMin to
// sharedBlockMax and every one but the last is filled but for less than a
// series' windows.
func TestOpenCollectorBlocks(t *testing.T) {
	const res, series = 60_000, 5000
	c := openCollector{res: res}
	want := map[string][]Window{}
	for k := range series {
		i := (k * 7919) % series // not in label order
		name := fmt.Sprintf("s%05d", i)
		ws := make([]Window, 1+i%9)
		for j := range ws {
			start := int64(j) * res
			ws[j] = Window{Start: start, FirstT: start, LastT: start + 59_000, Count: 1, Sum: float64(i), Last: float64(j), Stale: j == 3}
		}
		want[name] = ws
		c.Series(labels.FromStrings("s", name), ws)
	}
	got := mergeOpen(nil, &c)
	if len(got) != series {
		t.Fatalf("%d series, want %d", len(got), series)
	}
	blocks := map[*windowBlock]bool{}
	for k, s := range got {
		if k > 0 && labels.Compare(got[k-1].lbls, s.lbls) >= 0 {
			t.Fatalf("series %d (%s) not after %s", k, s.lbls, got[k-1].lbls)
		}
		if s.ws.blocks() != 1 {
			t.Fatalf("%s: %d blocks", s.lbls, s.ws.blocks())
		}
		b, _, _ := s.ws.block(0)
		blocks[b] = true
		name := s.lbls.Get("s")
		if ws := s.ws.appendTo(nil); !slices.Equal(ws, want[name]) {
			t.Errorf("%s: %+v, want %+v", name, ws, want[name])
		}
		delete(want, name)
	}
	if len(want) != 0 {
		t.Errorf("%d series not read back", len(want))
	}
	rows, capacity := 0, 0
	for b := range blocks {
		rows, capacity = rows+len(b.lastT), capacity+cap(b.lastT)
		if cap(b.lastT) > sharedBlockMax || cap(b.lastT) < sharedBlockMin {
			t.Errorf("a block of %d rows", cap(b.lastT))
		}
		if !slices.Contains(c.cur, b) && cap(b.lastT)-len(b.lastT) >= 9 {
			t.Errorf("a full block has %d of %d rows free", cap(b.lastT)-len(b.lastT), cap(b.lastT))
		}
	}
	if capacity-rows > sharedBlockMax+len(blocks)*9 {
		t.Errorf("blocks hold %d rows for %d windows", capacity, rows)
	}
}
