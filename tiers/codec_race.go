//go:build race

package tiers

import (
	kzstd "github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// Under the race detector zstd's best level is about 3x slower again than
// its better level (measured on TestStitchedMatchesRaw: 70 s against 23 s),
// which made the race run of make test take over six minutes for each of
// tiers and backfill. Race builds (tests only: nothing ships one) write the
// rollup files at the better level instead. The files are equally valid and
// read back identically; only their size differs, and size is measured by
// TestRollupSizeRatios, which runs without the race detector.
//
// They also keep their encoders in a free list of their own (keptZstd):
// parquet-go's zstd codec keeps them in a sync.Pool, which race builds make
// drop a quarter of what is put back, so that a quarter of the pages written
// made a new encoder, megabytes of match tables allocated and cleared under
// the detector. TestSelectColumnsMatchesWindows (row groups of 23 rows:
// thousands of pages) took 37-67 s under the race detector against 0.4 s
// without it. The encoders are made with parquet-go's options: the bytes
// written are the same.
func init() {
	rollupCodec = newStoredZstdOver(&keptZstd{
		level:    zstd.SpeedBetterCompression,
		encoders: make(freeList[kzstd.Encoder], keptCodecs),
		decoders: make(freeList[kzstd.Decoder], keptCodecs),
	})
}

// keptZstd is parquet-go's zstd.Codec with its encoders and decoders kept
// in free lists instead of sync.Pools.
type keptZstd struct {
	level    zstd.Level
	encoders freeList[kzstd.Encoder]
	decoders freeList[kzstd.Decoder]
}

// keptCodecs bounds the encoders (and decoders) a keptZstd keeps: more than
// the writers and readers of a test at once.
const keptCodecs = 16

// freeList keeps up to its capacity of *T for reuse.
type freeList[T any] chan *T

// get returns a kept *T, or a new one from mk.
func (l freeList[T]) get(mk func() (*T, error)) (*T, error) {
	select {
	case v := <-l:
		return v, nil
	default:
		return mk()
	}
}

// put keeps v, and reports false when the list is full.
func (l freeList[T]) put(v *T) bool {
	select {
	case l <- v:
		return true
	default:
		return false
	}
}

func (c *keptZstd) String() string { return "ZSTD" }

func (c *keptZstd) CompressionCodec() format.CompressionCodec { return format.Zstd }

func (c *keptZstd) Encode(dst, src []byte) ([]byte, error) {
	e, err := c.encoders.get(func() (*kzstd.Encoder, error) {
		return kzstd.NewWriter(nil, kzstd.WithEncoderConcurrency(1), kzstd.WithEncoderLevel(c.level),
			kzstd.WithZeroFrames(true), kzstd.WithEncoderCRC(false))
	})
	if err != nil {
		panic(err) // only for invalid options, which these are not
	}
	out := e.EncodeAll(src, dst[:0])
	c.encoders.put(e)
	return out, nil
}

func (c *keptZstd) Decode(dst, src []byte) ([]byte, error) {
	d, err := c.decoders.get(func() (*kzstd.Decoder, error) { return kzstd.NewReader(nil, kzstd.WithDecoderConcurrency(1)) })
	if err != nil {
		return dst[:0], err
	}
	out, err := d.DecodeAll(src, dst[:0])
	if !c.decoders.put(d) {
		d.Close()
	}
	return out, err
}
