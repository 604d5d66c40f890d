package storeapi

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// samplesPerChunk is how many float samples a chunk a Series answer sends
// holds at most. Prometheus' TSDB cuts its chunks at 120, but any length up
// to 65,535 is a valid XOR chunk (the count is 16 bits), and a longer chunk
// costs fewer bytes (each chunk starts with a whole timestamp and value)
// and the Querier fewer chunk iterators.
const samplesPerChunk = 480

// xorEncoder writes float samples as Prometheus XOR chunks
// (chunkenc.EncXOR: Gorilla's delta-of-delta timestamps and XORed values),
// byte for byte what chunkenc's appender writes
// (TestXOREncoderMatchesChunkenc), into one buffer shared by the chunks of
// a Series message: chunkenc grows a buffer per chunk, a bit at a time,
// which cost a node answering the StoreAPI a third of its CPU over rollups.
// Not safe for concurrent use.
type xorEncoder struct {
	buf   []byte // the chunks written so far; the current one starts at start
	start int
	acc   uint64 // bits not yet in buf, from the most significant
	nacc  int    // bits in acc (< 64)
	n     int    // samples in the current chunk
	minT  int64

	t                 int64
	v                 float64
	tDelta            uint64
	leading, trailing uint8
}

// begin starts a chunk at the end of buf.
func (e *xorEncoder) begin() {
	e.start = len(e.buf)
	e.buf = append(e.buf, 0, 0) // the sample count, set by end
	e.acc, e.nacc, e.n = 0, 0, 0
	e.leading, e.trailing = 0xff, 0
}

// end finishes the current chunk and returns its bytes (a slice of buf,
// valid until buf is reset) and time range.
func (e *xorEncoder) end() (data []byte, minT, maxT int64) {
	for e.nacc > 0 {
		e.buf = append(e.buf, byte(e.acc>>56))
		e.acc <<= 8
		e.nacc -= 8
	}
	e.acc, e.nacc = 0, 0
	binary.BigEndian.PutUint16(e.buf[e.start:], uint16(e.n))
	return e.buf[e.start:len(e.buf):len(e.buf)], e.minT, e.t
}

// writeBits writes the n (<= 64) low bits of u, the most significant first.
func (e *xorEncoder) writeBits(u uint64, n int) {
	if n < 64 {
		u &= 1<<n - 1
	}
	free := 64 - e.nacc
	if n < free {
		e.acc |= u << (free - n)
		e.nacc += n
		return
	}
	// Fill acc, write it out, keep the rest.
	rest := n - free
	e.buf = binary.BigEndian.AppendUint64(e.buf, e.acc|u>>rest)
	if rest == 0 {
		e.acc, e.nacc = 0, 0
		return
	}
	e.acc, e.nacc = u<<(64-rest), rest
}

func (e *xorEncoder) writeBit(b bool) {
	if b {
		e.writeBits(1, 1)
	} else {
		e.writeBits(0, 1)
	}
}

// append adds a sample, later than the last; the chunk holds at most
// 65,535.
func (e *xorEncoder) append(t int64, v float64) {
	var tDelta uint64
	var vb [binary.MaxVarintLen64]byte
	switch e.n {
	case 0:
		e.minT = t
		for _, b := range vb[:binary.PutVarint(vb[:], t)] {
			e.writeBits(uint64(b), 8)
		}
		e.writeBits(math.Float64bits(v), 64)
	case 1:
		tDelta = uint64(t - e.t)
		for _, b := range vb[:binary.PutUvarint(vb[:], tDelta)] {
			e.writeBits(uint64(b), 8)
		}
		e.writeValue(v)
	default:
		tDelta = uint64(t - e.t)
		dod := int64(tDelta - e.tDelta)
		switch {
		case dod == 0:
			e.writeBit(false)
		case bitRange(dod, 14):
			e.writeBits(0b10, 2)
			e.writeBits(uint64(dod), 14)
		case bitRange(dod, 17):
			e.writeBits(0b110, 3)
			e.writeBits(uint64(dod), 17)
		case bitRange(dod, 20):
			e.writeBits(0b1110, 4)
			e.writeBits(uint64(dod), 20)
		default:
			e.writeBits(0b1111, 4)
			e.writeBits(uint64(dod), 64)
		}
		e.writeValue(v)
	}
	e.t, e.v, e.tDelta = t, v, tDelta
	e.n++
}

// bitRange reports whether x fits the nbits-bit bucket of the
// delta-of-delta encoding (chunkenc's bitRange).
func bitRange(x int64, nbits uint8) bool {
	return -((1<<(nbits-1))-1) <= x && x <= 1<<(nbits-1)
}

// writeValue writes v XORed with the previous value, reusing the previous
// leading and trailing zero counts where they fit (chunkenc's xorWrite).
func (e *xorEncoder) writeValue(v float64) {
	delta := math.Float64bits(v) ^ math.Float64bits(e.v)
	if delta == 0 {
		e.writeBit(false)
		return
	}
	leading := uint8(bits.LeadingZeros64(delta))
	trailing := uint8(bits.TrailingZeros64(delta))
	if leading >= 32 {
		leading = 31 // five bits
	}
	if e.leading != 0xff && leading >= e.leading && trailing >= e.trailing {
		e.writeBits(0b10, 2)
		e.writeBits(delta>>e.trailing, 64-int(e.leading)-int(e.trailing))
		return
	}
	e.leading, e.trailing = leading, trailing
	sigbits := 64 - leading - trailing
	// 0b11, five bits of leading zeros, six of significant bits (64 is
	// written as 0: there is never 0 of them).
	e.writeBits(0b11<<11|uint64(leading)<<6|uint64(sigbits&0x3f), 13)
	e.writeBits(delta>>trailing, int(sigbits))
}
