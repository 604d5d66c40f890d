package tiers

import (
	kzstd "github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// storedZstd is the zstd codec both tiers write with: zstd at level, except
// that a page it shrinks by less than an eighth is written as a zstd frame
// of stored blocks (no entropy coding) instead. Any zstd reader decodes
// both; a stored frame decodes at memory speed, ten times faster than a
// Huffman-coded one, and a nearly incompressible page (full-precision
// doubles) is where zstd costs a query most for the fewest bytes saved: on
// a column of such values it saved 6.6 % and decoded at 0.7 GB/s against 7
// GB/s stored (docs/format/minute.md, "Query cost").
type storedZstd struct {
	compress.Codec // zstd at the codec's level
	stored         *kzstd.Encoder
}

func newStoredZstd(level zstd.Level) *storedZstd {
	return newStoredZstdOver(&zstd.Codec{Level: level})
}

// newStoredZstdOver is newStoredZstd with level, the zstd codec that
// compresses the pages kept compressed.
func newStoredZstdOver(level compress.Codec) *storedZstd {
	// The fastest level without entropy coding finds a few matches at most
	// in such a page; its literals are stored as they are.
	enc, err := kzstd.NewWriter(nil, kzstd.WithEncoderLevel(kzstd.SpeedFastest), kzstd.WithNoEntropyCompression(true),
		kzstd.WithZeroFrames(true), kzstd.WithEncoderCRC(false)) // as parquet-go's codec: pages have their own CRC
	if err != nil {
		panic(err) // only for invalid options, which these are not
	}
	return &storedZstd{Codec: level, stored: enc}
}

// Encode implements compress.Codec.
func (c *storedZstd) Encode(dst, src []byte) ([]byte, error) {
	out, err := c.Codec.Encode(dst, src)
	if err != nil || len(out) < len(src)-len(src)/8 {
		return out, err
	}
	return c.stored.EncodeAll(src, out[:0]), nil
}

var _ compress.Codec = (*storedZstd)(nil)
