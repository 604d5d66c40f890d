package remotewrite

import (
	"errors"
	"fmt"
	"io"

	"github.com/golang/snappy"
)

// Body errors; the handler maps each to a status code and a rejection reason.
var (
	ErrBodyTooLarge         = errors.New("request body too large")
	ErrDecompressedTooLarge = errors.New("decompressed body too large")
	ErrBadSnappy            = errors.New("bad snappy block")
)

// readBody reads at most limit bytes of r into buf (reused, grown as needed)
// and fails with ErrBodyTooLarge as soon as the body proves longer, so a
// sender cannot make us buffer more than limit bytes. sizeHint is the
// Content-Length when known (-1 otherwise).
func readBody(r io.Reader, buf []byte, sizeHint int64, limit int) ([]byte, error) {
	if sizeHint > int64(limit) {
		return buf[:0], fmt.Errorf("%w: %d bytes, the limit is %d", ErrBodyTooLarge, sizeHint, limit)
	}
	want := 512
	if sizeHint > 0 {
		want = int(sizeHint) + 1 // +1 so the EOF is seen without growing
	}
	if cap(buf) < want {
		buf = make([]byte, 0, want)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			if len(buf) > limit {
				break
			}
			// Grow geometrically, but never beyond limit+1: one byte past
			// the limit is enough to know the body is too large.
			nb := make([]byte, len(buf), min(2*cap(buf)+512, limit+1))
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return buf, fmt.Errorf("read request body: %w", err)
		}
	}
	if len(buf) > limit {
		return buf, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, limit)
	}
	return buf, nil
}

// decodedLen returns the uncompressed length a snappy block announces in its
// header, checked against limit before anything is allocated: a 20-byte body
// may claim 4 GiB.
func decodedLen(src []byte, limit int) (int, error) {
	n, err := snappy.DecodedLen(src)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadSnappy, err)
	}
	if n > limit {
		return n, fmt.Errorf("%w: the snappy header announces %d bytes, the limit is %d", ErrDecompressedTooLarge, n, limit)
	}
	return n, nil
}

// decompress decodes the snappy block src into dst (reused when it has room
// for n = decodedLen(src) bytes).
func decompress(dst, src []byte, n int) ([]byte, error) {
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	out, err := snappy.Decode(dst[:n], src)
	if err != nil {
		return dst[:0], fmt.Errorf("%w: %w", ErrBadSnappy, err)
	}
	return out, nil
}
