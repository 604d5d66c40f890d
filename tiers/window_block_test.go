package tiers

import (
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
