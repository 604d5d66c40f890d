package tiers

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go/compress/zstd"
)

// TestKeptZstdSameBytes: keptZstd writes the bytes parquet-go's zstd codec
// writes at the same level for pages up to its window, and reads them back,
// from several goroutines at once.
func TestKeptZstdSameBytes(t *testing.T) {
	kept := newKeptZstd(zstd.SpeedBetterCompression, rollupWindow)
	ref := &zstd.Codec{Level: zstd.SpeedBetterCompression}
	rng := rand.New(rand.NewPCG(5, 6)) //nolint:gosec // test data
	var pages [][]byte
	for n := range 24 {
		p := make([]byte, 1<<(8+n%8))
		for i := range p {
			p[i] = byte(rng.IntN(4 + 60*(n%3))) // more or less compressible
		}
		pages = append(pages, p)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(pages); i += 2 {
				want, _ := ref.Encode(nil, pages[i])
				got, err := kept.Encode(nil, pages[i])
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("page %d: %d bytes (%v), parquet-go's codec %d", i, len(got), err, len(want))
					continue
				}
				back, err := kept.Decode(nil, got)
				if err != nil || !bytes.Equal(back, pages[i]) {
					t.Errorf("page %d does not decode back (%v)", i, err)
				}
			}
		})
	}
	wg.Wait()
	if kept.encoders.kept() == 0 || kept.decoders.kept() == 0 {
		t.Errorf("kept %d encoders and %d decoders after use, want some", kept.encoders.kept(), kept.decoders.kept())
	}
}

// TestKeptListIdle: a kept list keeps what is put back while it is taken
// from, bounded, and drops it all once a whole idle period passed without a
// get.
func TestKeptListIdle(t *testing.T) {
	made, dropped := 0, 0
	l := newKeptList(func() (*int, error) { made++; return new(int), nil }, func(*int) { dropped++ })
	var fire []func()
	l.after = func(f func()) { fire = append(fire, f) }
	next := func() func() { // the timer armed last, fired now
		t.Helper()
		if len(fire) != 1 {
			t.Fatalf("%d timers armed, want 1", len(fire))
		}
		f := fire[0]
		fire = fire[:0]
		return f
	}
	v, _ := l.get()
	l.put(v)
	v, _ = l.get() // taken again within the period
	l.put(v)
	next()()
	if made != 1 || l.kept() != 1 || dropped != 0 {
		t.Fatalf("after a busy period: made %d, kept %d, dropped %d; want 1, 1, 0", made, l.kept(), dropped)
	}
	next()() // a period without a get
	if l.kept() != 0 || dropped != 1 || len(fire) != 0 {
		t.Fatalf("after an idle period: kept %d, dropped %d, %d timers; want 0, 1, 0", l.kept(), dropped, len(fire))
	}
	// Past keptCodecs at once, the surplus is dropped when put back.
	var out []*int
	for range keptCodecs + 3 {
		v, _ := l.get()
		out = append(out, v)
	}
	for _, v := range out {
		l.put(v)
	}
	if l.kept() != keptCodecs || dropped != 4 {
		t.Fatalf("kept %d, dropped %d; want %d, 4", l.kept(), dropped, keptCodecs)
	}
	next()() // no get since they were put back
	if l.kept() != 0 || dropped != 4+keptCodecs {
		t.Fatalf("after idle: kept %d, dropped %d", l.kept(), dropped)
	}
}
