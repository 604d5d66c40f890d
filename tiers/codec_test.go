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

// TestCodecWritingReleases: the rollup codec keeps its encoders while any
// file is written with it and drops them once no write followed the last
// one for a while (whatever the order of two writes, and a done called
// twice counts once); a write started meanwhile keeps them; it keeps its
// decoders.
func TestCodecWritingReleases(t *testing.T) {
	c := newRollupCodec(zstd.SpeedFastest)
	var fire []func()
	c.after = func(f func()) { fire = append(fire, f) }
	fireAll := func() {
		for _, f := range fire {
			f()
		}
		fire = fire[:0]
	}
	page := bytes.Repeat([]byte("strata "), 1000)
	incompressible := make([]byte, 4096)
	_, _ = rand.NewChaCha8([32]byte{7, 8}).Read(incompressible)
	encode := func() {
		t.Helper()
		for _, p := range [][]byte{page, incompressible} {
			out, err := c.Encode(nil, p)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := c.Decode(nil, out); err != nil || !bytes.Equal(back, p) {
				t.Fatalf("page does not decode back (%v)", err)
			}
		}
	}
	check := func(when string, encoders bool) {
		t.Helper()
		l, s, d := c.encoders.kept(), c.stored.kept(), c.decoders.kept()
		if (l > 0) != encoders || (s > 0) != encoders || d == 0 {
			t.Fatalf("%s: kept %d and %d encoders and %d decoders; want encoders %v, and decoders", when, l, s, d, encoders)
		}
	}
	first := c.writing()
	encode()
	second := c.writing()
	encode()
	first()
	first() // once only: the second write is still on
	if len(fire) != 0 {
		t.Fatalf("%d releases armed while a write is on, want 0", len(fire))
	}
	second()
	third := c.writing() // starts before the release fires: keeps them
	fireAll()
	check("a write started before the release", true)
	encode()
	third()
	fireAll()
	check("no write since the last one ended", false)
	fourth := c.writing() // encoders made again
	encode()
	fourth()
	fireAll()
	check("after the fourth write", false)
}

// BenchmarkNewEncoder is what dropping a rollup codec's encoders after a
// write costs the next one: an encoder at the codec's level (the minute
// tier's better, the hour tier's best) and window, made and used for one
// page.
func BenchmarkNewEncoder(b *testing.B) {
	page := make([]byte, 64<<10)
	for i := range page {
		page[i] = byte(i * 7 % 251)
	}
	for _, c := range []struct {
		name  string
		level zstd.Level
	}{{"better", zstd.SpeedBetterCompression}, {"best", zstd.SpeedBestCompression}} {
		b.Run("level="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l := newEncoderList(c.level, rollupWindow)
				e, err := l.get()
				if err != nil {
					b.Fatal(err)
				}
				_ = e.EncodeAll(page, nil)
			}
		})
	}
}

// TestPartitionWriteReleasesEncoders: a partition's write arms the rollup
// codec's release of its encoders when it is done.
func TestPartitionWriteReleasesEncoders(t *testing.T) {
	codec := codecFor(DefaultMinuteConfig("").Zstd)
	var fire []func()
	codec.mu.Lock()
	after := codec.after
	codec.after = func(f func()) { fire = append(fire, f) }
	codec.mu.Unlock()
	t.Cleanup(func() {
		codec.mu.Lock()
		codec.after = after
		codec.mu.Unlock()
	})
	r := openTableRollup(t, t.TempDir())
	if err := r.WritePartition(tableT0, tableSeries(tableT0, 40, 1)); err != nil {
		t.Fatal(err)
	}
	if len(fire) != 1 || codec.encoders.kept() == 0 {
		t.Fatalf("%d releases armed by the write, want 1; %d encoders kept, want some", len(fire), codec.encoders.kept())
	}
	fire[0]()
	if l, s := codec.encoders.kept(), codec.stored.kept(); l != 0 || s != 0 {
		t.Fatalf("after the write: kept %d and %d encoders, want none", l, s)
	}
	if got := selectAll(t, t.Context(), r, tableT0, tableT0+3_600_000, selectOptions{}); len(got) != 40 {
		t.Fatalf("read back %d series, want 40", len(got))
	}
}
