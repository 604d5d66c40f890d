package diagnose

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// testArena is a ring file in tb's temporary directory, as the engine
// keeps one in the storage directory (nil where the platform has none:
// the heap), closed when the test ends.
func testArena(tb testing.TB) *pageArena {
	a := openTestArena(tb)
	if a != nil {
		tb.Cleanup(a.close)
	}
	return a
}

func openTestArena(tb testing.TB) *pageArena {
	a, err := newPageArena(tb.TempDir())
	if errors.Is(err, errNoArena) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// fileTracker is newTracker with its rings in a ring file, which the
// tracker closes once it is unreachable (as the engine's does).
func fileTracker(tb testing.TB, cfg BaselineConfig) *tracker {
	return newTracker(cfg, openTestArena(tb))
}

// TestPageArena: pages come from the file, zeroed, across chunks; what
// they hold reads back after release drops them from memory; a forgotten
// ring's pages are reused zeroed; heap pages (a nil arena) are counted
// apart. Many rings' writes interleave as a tracker's do.
func TestPageArena(t *testing.T) {
	a := testArena(t)
	if a == nil {
		t.Skip("no ring file on this platform")
	}
	const hours = 676
	perChunk := arenaChunk / ringPageBytes
	rings := make([]hourRing, perChunk/20) // 26 pages each when full: over two chunks
	want := make([]map[int64]summary, len(rings))
	rng := rand.New(rand.NewPCG(7, 11))
	h0 := int64(480_000)
	for h := h0; h < h0+hours; h++ {
		for i := range rings {
			if want[i] == nil {
				want[i] = map[int64]summary{}
			}
			if rng.IntN(4) == 0 {
				continue
			}
			x := summary{m: float32(rng.NormFloat64()), d: float32(h)}
			rings[i].set(h, hours, x, a)
			want[i][h] = x
		}
		if h%97 == 0 {
			a.release()
		}
	}
	if len(a.chunks) < 2 {
		t.Fatalf("%d chunks for %d rings of 26 pages", len(a.chunks), len(rings))
	}
	if got := a.inFile.Load(); got != int64(len(rings)*26) || a.inHeap.Load() != 0 {
		t.Fatalf("%d pages in the file, %d on the heap; want %d, 0", got, a.inHeap.Load(), len(rings)*26)
	}
	a.release()
	check := func() {
		t.Helper()
		for i := range rings {
			for h := h0; h < h0+hours; h++ {
				got, ok := rings[i].at(h)
				x, was := want[i][h]
				if ok != was || got != x {
					t.Fatalf("ring %d hour %d: %+v, %v; want %+v, %v", i, h, got, ok, x, was)
				}
			}
		}
	}
	check()

	// Forget every other ring: a new ring takes their pages, zeroed.
	for i := 0; i < len(rings); i += 2 {
		a.put(rings[i].pages)
		rings[i], want[i] = hourRing{}, map[int64]summary{}
	}
	chunks := len(a.chunks)
	for i := 0; i < len(rings); i += 2 {
		for h := h0 + hours; h < h0+hours+30; h++ {
			x := summary{m: float32(i), d: float32(h)}
			rings[i].set(h, hours, x, a)
			want[i][h] = x
		}
	}
	if len(a.chunks) != chunks {
		t.Errorf("the file grew from %d to %d chunks with freed pages to reuse", chunks, len(a.chunks))
	}
	a.release()
	check()
	for i := 0; i < len(rings); i += 2 {
		for h := h0; h < h0+hours; h++ {
			if _, ok := rings[i].at(h); ok {
				t.Fatalf("ring %d, new, reads hour %d of the ring whose page it took", i, h)
			}
		}
	}

	var heap *pageArena
	p := heap.page()
	heap.put([]*ringPage{p})
	if a.holds(p) {
		t.Error("a heap page is taken for one of the file's")
	}
}

// TestPageArenaFailed: an arena whose file could not be made hands out
// heap pages and counts them.
func TestPageArenaFailed(t *testing.T) {
	a, err := newPageArena(t.TempDir() + "/missing")
	if err == nil {
		t.Fatal("no error for a directory that does not exist")
	}
	var r hourRing
	r.set(500_000, 676, summary{m: 1}, a)
	a.release()
	if got, ok := r.at(500_000); !ok || got.m != 1 || a.inHeap.Load() != 1 || a.inFile.Load() != 0 {
		t.Fatalf("read %+v, %v; %d pages on the heap, %d in the file", got, ok, a.inHeap.Load(), a.inFile.Load())
	}
	a.put(r.pages)
	if a.inHeap.Load() != 0 {
		t.Errorf("%d heap pages after the ring was forgotten", a.inHeap.Load())
	}
	a.close()
}
