package tiers

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestWindowBlockReserve: reserve makes room in the columns a block holds,
// keeps their rows, leaves the others nil, and at least doubles a column
// it grows (a batch filled row group by row group is not copied per row
// group).
func TestWindowBlockReserve(t *testing.T) {
	b := newWindowBlock(60_000, colLastT|colLast, 0)
	for round, n := range []int{960, 1, 32_768, 100, 32_768} {
		lastT := slices.Clone(b.lastT)
		oldCap := cap(b.last)
		b.reserve(n)
		if !slices.Equal(b.lastT, lastT) {
			t.Fatalf("round %d: reserve changed the rows", round)
		}
		for name, free := range map[string]int{"last_ts": cap(b.lastT) - len(b.lastT), "last": cap(b.last) - len(b.last)} {
			if free < n {
				t.Fatalf("round %d: %s has room for %d rows after reserve(%d)", round, name, free, n)
			}
		}
		if cap(b.last) != oldCap && cap(b.last) < 2*oldCap {
			t.Errorf("round %d: last grew from %d to %d, less than double", round, oldCap, cap(b.last))
		}
		if b.sum != nil || b.firstT != nil || b.resets != nil {
			t.Fatalf("round %d: reserve allocated a column the block does not hold", round)
		}
		for i := range n {
			b.lastT = append(b.lastT, int64(len(b.lastT)+i))
			b.last = append(b.last, float64(i))
		}
	}
}

// TestWindowSeqSegments: a sequence over one to five segments of shared
// blocks (the inline form and the general one) reads back its windows in
// order, by position with a cursor's hint moving forward, backward and at
// random, and block by block.
func TestWindowSeqSegments(t *testing.T) {
	const res = 60_000
	rng := rand.New(rand.NewPCG(5, 6))
	for segs := 1; segs <= 5; segs++ {
		var seq windowSeq
		var want []Window
		start := int64(0)
		for range segs {
			blk := newWindowBlock(res, colAll, 64)
			pad := rng.IntN(4) // other series' rows before this segment's
			n := 1 + rng.IntN(6)
			var ws []Window
			for r := range pad + n {
				start += res
				w := Window{Start: start, LastT: start + 7, Count: 1, Last: float64(start), Stale: rng.IntN(5) == 0}
				ws = append(ws, w)
				if r >= pad {
					want = append(want, w)
				}
			}
			appendWindows(blk, ws)
			seq.add(blk, pad, n)
		}
		if seq.Len() != len(want) || seq.blocks() != segs {
			t.Fatalf("%d segments: Len %d, blocks %d; want %d, %d", segs, seq.Len(), seq.blocks(), len(want), segs)
		}
		if got := seq.appendTo(nil); !slices.Equal(got, want) {
			t.Fatalf("%d segments: appendTo\n got %+v\nwant %+v", segs, got, want)
		}
		hint := 0
		order := append(rng.Perm(len(want)), len(want)-1, 0)
		for i := range want {
			order = append(order, i, len(want)-1-i)
		}
		for _, i := range order {
			var w Window
			seq.at(i, &hint, &w)
			if w != want[i] {
				t.Fatalf("%d segments: window %d is %+v, want %+v", segs, i, w, want[i])
			}
			if st := seq.startAt(i, &hint); st != want[i].Start {
				t.Fatalf("%d segments: start %d is %d, want %d", segs, i, st, want[i].Start)
			}
		}
	}
}
