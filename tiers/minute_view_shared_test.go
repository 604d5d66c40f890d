package tiers

import (
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// TestMergeOpenSharedBlock: open windows collected into one shared block read
// back exactly as given, per series, with stale flags on the right rows,
// whether a series is open only or continues a disk sequence (whose own
// blocks keep their rows), and the shared block is one allocation of
// columns for all of them.
func TestMergeOpenSharedBlock(t *testing.T) {
	const res = 60_000
	win := func(start int64, v float64, stale bool) Window {
		return Window{Start: start, FirstT: start + 1_000, LastT: start + 59_000, Count: 4, Sum: 4 * v, Min: v - 1, Max: v + 1,
			First: v - 1, Last: v, Increase: 1, Resets: 1, Stale: stale}
	}
	diskWs := []Window{win(0, 1, false), win(res, 2, true)}
	disk := []selectedSeries{{lbls: labels.FromStrings("s", "b"), ws: seqOf(blockFromWindows(res, diskWs))}}
	open := []SeriesWindows{
		{Labels: labels.FromStrings("s", "a"), Windows: []Window{win(2*res, 3, false), win(3*res, 4, true)}},
		{Labels: labels.FromStrings("s", "b"), Windows: []Window{win(res, 9, false), win(2*res, 5, false), win(3*res, 6, true)}},
		{Labels: labels.FromStrings("s", "c"), Windows: []Window{win(3*res, 7, true)}},
	}
	c := openCollector{res: res}
	c.Reserve(len(open), 6)
	for _, s := range open {
		c.Series(s.Labels, s.Windows)
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
		last := s.ws.blocks[len(s.ws.blocks)-1]
		if shared == nil {
			shared = last
		} else if last != shared {
			t.Errorf("series %s has a block of its own", name)
		}
	}
	// b's first open window is held but not read: the disk has its start.
	if n := len(shared.lastT); n != 6 || cap(shared.lastT) != 6 {
		t.Errorf("shared block holds %d rows (capacity %d), want 6 (a: 2, b: 3, c: 1), copied once into the reserved columns", n, cap(shared.lastT))
	}
}
