//go:build race

package tiers

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go/compress/zstd"
)

// TestKeptZstdSameBytes: race builds' codec (keptZstd) writes the bytes
// parquet-go's zstd codec writes at the same level, and reads them back,
// from several goroutines at once.
func TestKeptZstdSameBytes(t *testing.T) {
	kept := rollupCodec.Codec
	if _, ok := kept.(*keptZstd); !ok {
		t.Fatalf("race builds compress with %T, want *keptZstd", kept)
	}
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
}
