package tiers

import (
	"sync"
	"time"

	kzstd "github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
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
	*keptZstd // zstd at the codec's level
	stored    *keptList[kzstd.Encoder]

	mu      sync.Mutex
	writers int    // files being written: see writing
	started uint64 // writes ever started
	// after runs f once encodersIdle has passed (time.AfterFunc; tests
	// fire it themselves).
	after func(f func())
}

// newRollupCodec is the rollup tiers' storedZstd: zstd at level, and the
// stored frames, both with rollupWindow.
func newRollupCodec(level zstd.Level) *storedZstd {
	// The fastest level without entropy coding finds a few matches at most
	// in such a page; its literals are stored as they are.
	return &storedZstd{keptZstd: newKeptZstd(level, rollupWindow),
		stored: newEncoderList(kzstd.SpeedFastest, rollupWindow, kzstd.WithNoEntropyCompression(true)),
		after:  func(f func()) { time.AfterFunc(encodersIdle, f) }}
}

// writing marks a file being written with c until the returned func is
// called. Once no file has been written for encodersIdle, c drops the
// encoders it keeps, instead of keptIdle after their last use: the
// diagnosis engine read an hour's partition within seconds of its write,
// and an encoder at zstd's best level (the minute tier's then; the hour
// tier's now) holds 34 MB (40 MB with the stored frames' encoder) that the
// heap kept through that read (docs/bench.md, stop 41). Writes that follow
// each other closer than that, as a backfill's do, share them: a new
// encoder at the best level costs 12-22 ms and 38 MB of allocation, at the
// better level 7 ms and 6.8 MB (BenchmarkNewEncoder). The decoders stay: readers use them.
func (c *storedZstd) writing() (done func()) {
	c.mu.Lock()
	c.writers++
	c.started++
	c.mu.Unlock()
	var once sync.Once
	return func() { once.Do(c.written) }
}

// written ends one write of writing's; the last one arms the release.
func (c *storedZstd) written() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writers--
	if c.writers > 0 {
		return
	}
	started := c.started
	c.after(func() {
		c.mu.Lock()
		idle := c.writers == 0 && c.started == started
		c.mu.Unlock()
		if idle {
			c.encoders.release()
			c.stored.release()
		}
	})
}

// encodersIdle is how long after its last write the rollup codec keeps its
// encoders.
const encodersIdle = time.Second

// Encode implements compress.Codec.
func (c *storedZstd) Encode(dst, src []byte) ([]byte, error) {
	out, err := c.keptZstd.Encode(dst, src)
	if err != nil || len(out) < len(src)-len(src)/8 {
		return out, err
	}
	e, err := c.stored.get()
	if err != nil {
		panic(err) // only for invalid options, which these are not
	}
	out = e.EncodeAll(src, out[:0])
	c.stored.put(e)
	return out, nil
}

var _ compress.Codec = (*storedZstd)(nil)

// keptZstd is parquet-go's zstd codec (the same frames, decoded by any zstd
// reader) with its encoders and decoders kept in lists of its own, which
// drop what they keep once unused for keptIdle, instead of in sync.Pools.
//
// An encoder at zstd's best level holds 34 MB of match tables, and a
// sync.Pool drops what it keeps at every other garbage collection: while
// the minute tier wrote an hour's partition of 500,000 series, collections
// came every few seconds, each pair of them dropped the encoder and the
// next page made a new one, and the heap held two of them and three
// histories (117 MB) in the minutes when Strata's memory peaks. Kept, one
// encoder serves a whole file; dropped after keptIdle, it costs nothing
// between the hourly writes. Race builds also need the lists: the detector
// makes a sync.Pool drop a quarter of what is put back.
type keptZstd struct {
	encoders *keptList[kzstd.Encoder]
	decoders *keptList[kzstd.Decoder]
}

// keptCodecs bounds the encoders (and decoders) a keptZstd keeps: more than
// the writers and readers of a test at once.
const keptCodecs = 16

// keptIdle is how long a keptZstd keeps an encoder or decoder nobody took.
const keptIdle = 10 * time.Second

// newKeptZstd is a keptZstd at level whose encoders' window is window (0:
// zstd's default, 8 MiB). The window sizes an encoder's history buffer
// (twice the window); a page is one frame, at most about the writer's 1 MiB
// page buffer (a dictionary page at most DictionaryMaxBytes), so a longer
// window finds nothing more in it.
func newKeptZstd(level zstd.Level, window int) *keptZstd {
	return &keptZstd{encoders: newEncoderList(level, window),
		decoders: newKeptList(func() (*kzstd.Decoder, error) { return kzstd.NewReader(nil, kzstd.WithDecoderConcurrency(1)) },
			func(d *kzstd.Decoder) { d.Close() })}
}

// newEncoderList is a list of encoders at level with window (0: zstd's
// default) and opts, each for one goroutine at a time, made with parquet-go's
// options: frames without a checksum (pages have their own CRC).
func newEncoderList(level kzstd.EncoderLevel, window int, opts ...kzstd.EOption) *keptList[kzstd.Encoder] {
	opts = append(opts, kzstd.WithEncoderConcurrency(1), kzstd.WithEncoderLevel(level),
		kzstd.WithZeroFrames(true), kzstd.WithEncoderCRC(false))
	if window > 0 {
		opts = append(opts, kzstd.WithWindowSize(window))
	}
	return newKeptList(func() (*kzstd.Encoder, error) { return kzstd.NewWriter(nil, opts...) }, func(*kzstd.Encoder) {})
}

func (c *keptZstd) String() string { return "ZSTD" }

func (c *keptZstd) CompressionCodec() format.CompressionCodec { return format.Zstd }

func (c *keptZstd) Encode(dst, src []byte) ([]byte, error) {
	e, err := c.encoders.get()
	if err != nil {
		panic(err) // only for invalid options, which these are not
	}
	out := e.EncodeAll(src, dst[:0])
	c.encoders.put(e)
	return out, nil
}

func (c *keptZstd) Decode(dst, src []byte) ([]byte, error) {
	d, err := c.decoders.get()
	if err != nil {
		return dst[:0], err
	}
	out, err := d.DecodeAll(src, dst[:0])
	c.decoders.put(d)
	return out, err
}

// keptList keeps up to keptCodecs *T for reuse, and drops them all once
// none was taken for keptIdle.
type keptList[T any] struct {
	mk   func() (*T, error)
	drop func(*T) // releases one not kept
	mu   sync.Mutex
	free []*T
	// taken counts gets; armed is whether a timer will look at it (the
	// list is dropped when it has not changed for keptIdle).
	taken uint64
	armed bool
	// after runs f once keptIdle has passed (time.AfterFunc; tests fire
	// it themselves).
	after func(f func())
}

func newKeptList[T any](mk func() (*T, error), drop func(*T)) *keptList[T] {
	return &keptList[T]{mk: mk, drop: drop, after: func(f func()) { time.AfterFunc(keptIdle, f) }}
}

// get returns a kept *T, or a new one.
func (l *keptList[T]) get() (*T, error) {
	l.mu.Lock()
	l.taken++
	if n := len(l.free); n > 0 {
		v := l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
		l.mu.Unlock()
		return v, nil
	}
	l.mu.Unlock()
	return l.mk()
}

// put keeps v, or drops it when the list is full.
func (l *keptList[T]) put(v *T) {
	l.mu.Lock()
	full := len(l.free) == keptCodecs
	if !full {
		l.free = append(l.free, v)
	}
	if !l.armed {
		l.armed = true
		l.afterIdle(l.taken)
	}
	l.mu.Unlock()
	if full {
		l.drop(v)
	}
}

// afterIdle drops the kept ones in keptIdle if none is taken until then,
// and else looks again keptIdle later. l.mu is held.
func (l *keptList[T]) afterIdle(taken uint64) {
	l.after(func() {
		l.mu.Lock()
		if l.taken != taken {
			l.afterIdle(l.taken)
			l.mu.Unlock()
			return
		}
		free := l.free
		l.free, l.armed = nil, false
		l.mu.Unlock()
		for _, v := range free {
			l.drop(v)
		}
	})
}

// release drops the kept ones now. One taken meanwhile is kept when put
// back, as ever.
func (l *keptList[T]) release() {
	l.mu.Lock()
	free := l.free
	l.free = nil
	l.mu.Unlock()
	for _, v := range free {
		l.drop(v)
	}
}

// kept is how many the list keeps now.
func (l *keptList[T]) kept() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.free)
}
