package tiers

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestWindowIterFastPaths: the iterator (loadOne's fast paths where they
// apply, load's general path elsewhere) yields the samples windowPoints
// gives each window, kept inside [lo, hi), for a plain selector's windows
// repeated every fill ms without a step (a remote engine's lookback: the
// StoreAPI), and for min_over_time's and max_over_time's (First at FirstT
// where it lies on the window's start, and the minimum or maximum at
// LastT): windows whose last sample is early (a repeat due before the next
// window's), gaps of whole windows, stale windows, the last window, parts
// cut by lo and hi, and windows split over blocks (the next window in
// another one).
func TestWindowIterFastPaths(t *testing.T) {
	const res = int64(3_600_000)
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 600 {
		mode := []aggMode{modeLast, modeMin, modeMax}[round%3]
		// The windows, in two or three blocks.
		var ws []Window
		start := int64(1_000) * res
		for range 10 + r.IntN(40) {
			start += res * int64(1+r.IntN(3)/2*r.IntN(3)) // mostly the next window, sometimes a gap
			last := start + res - 1_000
			switch r.IntN(6) {
			case 0:
				last = start + int64(r.IntN(int(res))) // early, anywhere in the window
			case 1:
				last = start // a single sample at the start
			}
			first := start
			if r.IntN(3) == 0 {
				first += int64(r.IntN(int(last-start) + 1)) // not on the start
			}
			v := r.NormFloat64()
			ws = append(ws, Window{Start: start, FirstT: first, LastT: last, Count: 60, Sum: 60 * v, Min: v - 1, Max: v + 1, First: r.NormFloat64(), Last: v, Stale: r.IntN(10) == 0})
		}
		seq := randomBlocks(r, ws, res, mode)
		fill := []int64{res, res / 2, 2 * res, res - 1, res + 1}[r.IntN(5)]
		if mode != modeLast {
			fill = 0 // only plain selectors repeat Last
		}
		p := &seriesPart{windows: seq, mode: mode, res: res, fill: fill, lookback: fill,
			lo: math.MinInt64, hi: math.MaxInt64}
		if r.IntN(2) == 0 {
			p.lo = ws[0].Start + int64(r.IntN(int(2*res)))
			p.hi = ws[len(ws)-1].Start + res - int64(r.IntN(int(3*res)))
		}

		var want []point
		for i := range ws {
			var next *Window
			if i+1 < len(ws) {
				next = &ws[i+1]
			}
			for _, pt := range windowPoints(nil, &ws[i], next, p) {
				if pt.t >= p.lo && pt.t < p.hi {
					want = append(want, pt)
				}
			}
		}
		it := p.iterator(nil)
		var got []point
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			got = append(got, point{ts, v})
		}
		if len(got) != len(want) {
			t.Fatalf("round %d (mode %d, fill %d): %d samples, want %d:\n%v\n%v", round, mode, fill, len(got), len(want), got, want)
		}
		for i := range want {
			if got[i].t != want[i].t || math.Float64bits(got[i].v) != math.Float64bits(want[i].v) {
				t.Fatalf("round %d (mode %d, fill %d): sample %d is %v, want %v", round, mode, fill, i, got[i], want[i])
			}
		}
		// Seek finds the first sample at or after a time, from a fresh
		// iterator and forward from the last one.
		it = p.iterator(it)
		if len(want) == 0 {
			continue
		}
		ats := make([]int64, 5)
		for j := range ats {
			ats[j] = want[0].t + int64(r.IntN(int(want[len(want)-1].t-want[0].t+1)))
		}
		slices.Sort(ats)
		k := 0
		for _, at := range ats {
			for want[k].t < at {
				k++
			}
			if it.Seek(at) != chunkenc.ValFloat {
				t.Fatalf("round %d: Seek(%d) found nothing, want %v", round, at, want[k])
			}
			if ts, v := it.At(); ts != want[k].t || math.Float64bits(v) != math.Float64bits(want[k].v) {
				t.Fatalf("round %d: Seek(%d) is %d %v, want %v", round, at, ts, v, want[k])
			}
		}
	}
}

// randomBlocks holds ws in a windowSeq of blocks of random lengths, with
// the columns mode reads (Last, or First, Min and Max).
func randomBlocks(r *rand.Rand, ws []Window, res int64, mode aggMode) windowSeq {
	seq := windowSeq{}
	for lo := 0; lo < len(ws); {
		hi := min(len(ws), lo+1+r.IntN(len(ws)))
		b := newWindowBlock(res, columnsFor(mode), hi-lo)
		for i, w := range ws[lo:hi] {
			b.lastT = append(b.lastT, w.LastT)
			switch mode {
			case modeLast:
				b.last = append(b.last, w.Last)
			default:
				b.firstT = append(b.firstT, w.FirstT)
				b.first = append(b.first, w.First)
				b.min = append(b.min, w.Min)
				b.max = append(b.max, w.Max)
			}
			if w.Stale {
				b.staleRows = append(b.staleRows, int32(i)) //nolint:gosec // small
			}
		}
		seq.add(b, 0, hi-lo)
		lo = hi
	}
	return seq
}
