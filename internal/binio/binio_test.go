package binio

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// TestRoundTrip: what the Append functions and binary's appenders write
// reads back field by field; a short read keeps its first error, wrapped
// around Corrupt, and later reads return zero values.
func TestRoundTrip(t *testing.T) {
	lset := labels.FromStrings("__name__", "up", "job", "a")
	b := AppendLabels(nil, lset)
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = append(b, 7)
	b = binary.LittleEndian.AppendUint32(b, 0xdeadbeef)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(2.5))
	b = AppendStr(b, "tail")
	corrupt := errors.New("corrupt")
	d := &Reader{R: bufio.NewReader(bytes.NewReader(b)), Corrupt: corrupt}
	var sb labels.ScratchBuilder
	if got := d.Labels(&sb); !labels.Equal(got, lset) {
		t.Errorf("labels %s, want %s", got, lset)
	}
	if u, v, c, w, f, s := d.Uvarint(), d.Varint(), d.Byte(), d.U32(), d.F64(), d.Str(); u != 300 || v != -5 || c != 7 || w != 0xdeadbeef || f != 2.5 || s != "tail" || d.Err != nil {
		t.Fatalf("read %d %d %d %#x %v %q (%v)", u, v, c, w, f, s, d.Err)
	}
	if x := d.U64(); x != 0 || !errors.Is(d.Err, corrupt) {
		t.Fatalf("read past the end: %d, %v", x, d.Err)
	}
	first := d.Err
	if d.Uvarint() != 0 || d.Str() != "" || d.Err != first { //nolint:errorlint // the same error value, not one wrapping it
		t.Fatalf("reads after an error: %v", d.Err)
	}
	big := &Reader{R: bufio.NewReader(bytes.NewReader(binary.AppendUvarint(nil, MaxString+1)))}
	if big.Str() != "" || big.Err == nil {
		t.Fatal("a string over MaxString was read")
	}
}
