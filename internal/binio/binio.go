// Package binio reads and writes the fields of Strata's own binary files
// (the rollup spill, the hour build's runs, the baselines' checkpoints):
// varints, little-endian fixed-size numbers, length-prefixed strings and
// label sets. A Reader streams from a bufio.Reader and keeps its first
// error: later reads return zero values, so a decoder checks Err once
// after a record instead of after every field.
package binio

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
)

// MaxString bounds a string a Reader reads: a torn or foreign file must
// not make it allocate without bound.
const MaxString = 1 << 20

// Reader reads fields from R. Err is the first error; Corrupt, when set,
// is wrapped around it (errors.Is(r.Err, Corrupt) tells a bad file).
type Reader struct {
	R       *bufio.Reader
	Err     error
	Corrupt error
	tmp     []byte
	fixed   [8]byte
}

// Fail records err (annotated) unless an error is already recorded.
func (d *Reader) Fail(err error) {
	if d.Err != nil || err == nil {
		return
	}
	if d.Corrupt != nil {
		err = fmt.Errorf("%w: %w", d.Corrupt, err)
	}
	d.Err = err
}

// Uvarint reads an unsigned varint.
func (d *Reader) Uvarint() uint64 { return readVar(d, binary.ReadUvarint) }

// Varint reads a zig-zag varint.
func (d *Reader) Varint() int64 { return readVar(d, binary.ReadVarint) }

func readVar[T any](d *Reader, read func(io.ByteReader) (T, error)) T {
	var v T
	if d.Err != nil {
		return v
	}
	v, err := read(d.R)
	d.Fail(err)
	return v
}

// Byte reads one byte.
func (d *Reader) Byte() byte {
	if d.Err != nil {
		return 0
	}
	c, err := d.R.ReadByte()
	d.Fail(err)
	return c
}

// fixedLE reads n (at most 8) bytes, little-endian, as a uint64.
func (d *Reader) fixedLE(n int) uint64 {
	b := d.fixed[:8]
	clear(b)
	if d.Err != nil {
		return 0
	}
	if _, err := io.ReadFull(d.R, b[:n]); err != nil {
		d.Fail(err)
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// U32 reads a little-endian uint32.
func (d *Reader) U32() uint32 { return uint32(d.fixedLE(4)) } //nolint:gosec // four bytes

// U64 reads a little-endian uint64.
func (d *Reader) U64() uint64 { return d.fixedLE(8) }

// F64 reads a float64's little-endian bits.
func (d *Reader) F64() float64 { return math.Float64frombits(d.fixedLE(8)) }

// Str reads a string AppendStr wrote (at most MaxString bytes).
func (d *Reader) Str() string {
	n := d.Uvarint()
	if d.Err != nil {
		return ""
	}
	if n > MaxString {
		d.Fail(fmt.Errorf("a string of %d bytes", n))
		return ""
	}
	d.tmp = slices.Grow(d.tmp[:0], int(n))[:n]
	if _, err := io.ReadFull(d.R, d.tmp); err != nil {
		d.Fail(err)
		return ""
	}
	return string(d.tmp)
}

// Labels reads a label set AppendLabels wrote, through sb.
func (d *Reader) Labels(sb *labels.ScratchBuilder) labels.Labels {
	n := d.Uvarint()
	sb.Reset()
	for i := uint64(0); i < n && d.Err == nil; i++ {
		name := d.Str()
		sb.Add(name, d.Str())
	}
	return sb.Labels()
}

// AppendStr appends s, its length first.
func AppendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendLabels appends lset: its length, then each name and value.
func AppendLabels(b []byte, lset labels.Labels) []byte {
	b = binary.AppendUvarint(b, uint64(lset.Len()))
	lset.Range(func(l labels.Label) {
		b = AppendStr(b, l.Name)
		b = AppendStr(b, l.Value)
	})
	return b
}
