package backfill

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/fileutil"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/mapped"
	"github.com/strata-dev/strata/internal/timegrid"
)

// Spool holds text input, parsed once, on disk by the hour of its samples,
// for RunSliced to read back a slice at a time (Spool.Read is its
// ReadFunc): a file of the Prometheus text format or OpenMetrics, as
// `promtool tsdb dump-openmetrics` writes it, lists each series' samples
// together, so no part of the history can be rolled up before the whole
// file is read. The spool keeps every series' labels in memory and 20 bytes
// a sample in its directory; a file is read through a read-only mapping,
// let go of as the parser moves on.
//
// A Spool is filled (AddFile, AddText) and then read (Read); it is not safe
// for concurrent use.
type Spool struct {
	dir    string
	series labelIndex
	hours  map[int64]*spoolHour

	buffered int // bytes the hours' buffers hold allocated
	// An hour's buffer is written when it reaches hourBuffer bytes; all of
	// them are written and let go of when together they hold bufferLimit:
	// a file that spans a year sweeps 8,760 hours series after series.
	hourBuffer, bufferLimit int
	samples                 int
	mint, maxt              int64
}

// spoolHour is an hour's file and the records not yet written to it.
type spoolHour struct {
	buf     []byte
	samples int
}

const (
	spoolRecord     = 20       // series index (uint32), time (int64), value (float64 bits)
	spoolHourBuffer = 32 << 10 // Spool.hourBuffer's default
	spoolBuffered   = 64 << 20 // Spool.bufferLimit's default
)

// spoolPrefix begins the name of every spool's directory.
const spoolPrefix = "backfill-spool-"

// NewSpool returns an empty spool in a new directory under dir (os.TempDir
// when empty); Close removes it.
func NewSpool(dir string) (*Spool, error) {
	d, err := os.MkdirTemp(dir, spoolPrefix)
	if err != nil {
		return nil, fmt.Errorf("backfill spool: %w", err)
	}
	return &Spool{dir: d, hours: map[int64]*spoolHour{},
		hourBuffer: spoolHourBuffer, bufferLimit: spoolBuffered, mint: math.MaxInt64, maxt: math.MinInt64}, nil
}

// AddFile parses the file at path into the spool: OpenMetrics when its name
// ends in .om or .openmetrics or its content in "# EOF", else the
// Prometheus text format; gzip-compressed when its name ends in .gz (it is
// then decompressed into the spool's directory first, and removed after).
// read, when set, is told how many bytes of the file have been parsed, now
// and then. A cancelled ctx ends the parse.
func (s *Spool) AddFile(ctx context.Context, path string, read func(done, size int)) (err error) {
	info, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("read backfill input: %w", err)
	case !info.Mode().IsRegular():
		return fmt.Errorf("read backfill input: %s is not a regular file", path)
	}
	name, text := path, path
	if strings.EqualFold(filepath.Ext(path), ".gz") {
		name = strings.TrimSuffix(path, filepath.Ext(path))
		if text, err = s.gunzip(ctx, path); err != nil {
			return fmt.Errorf("read backfill input %s: %w", path, err)
		}
		defer func() { err = errors.Join(err, os.Remove(text)) }()
		if info, err = os.Stat(text); err != nil {
			return fmt.Errorf("read backfill input %s: %w", path, err)
		}
	}
	var b []byte
	if info.Size() > 0 { // an empty file cannot be mapped
		var f *fileutil.MmapFile
		if f, err = fileutil.OpenMmapFile(text); err != nil {
			return fmt.Errorf("read backfill input %s: %w", path, err)
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		b = f.Bytes()
	}
	ct := "text/plain"
	if ext := strings.ToLower(filepath.Ext(name)); ext == ".om" || ext == ".openmetrics" || bytes.HasSuffix(bytes.TrimSpace(tail(b, 64)), []byte("# EOF")) {
		ct = "application/openmetrics-text"
	}
	released := 0
	err = parseText(b, ct, s, func(off int) error {
		// Pages behind the parser are not read again: they leave the
		// process's resident set (the page cache keeps them).
		released = mapped.ReleaseBehind(b, released, off)
		if read != nil {
			read(off, len(b))
		}
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if read != nil {
		read(len(b), len(b))
	}
	return nil
}

// gunzip decompresses the file at path into a file of the spool's
// directory and returns its path.
func (s *Spool) gunzip(ctx context.Context, path string) (out string, err error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer in.Close() //nolint:errcheck // read only
	zr, err := gzip.NewReader(bufio.NewReaderSize(in, 1<<20))
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(s.dir, "input-*.txt")
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, rerr := zr.Read(buf)
		if _, err := f.Write(buf[:n]); err != nil {
			return "", err
		}
		if errors.Is(rerr, io.EOF) {
			return f.Name(), nil
		}
		if rerr != nil {
			return "", rerr
		}
	}
}

// tail returns the last n bytes of b at most.
func tail(b []byte, n int) []byte { return b[max(len(b)-n, 0):] }

// AddText parses b (ParseText's formats) into the spool.
func (s *Spool) AddText(b []byte, contentType string) error {
	return parseText(b, contentType, s, nil)
}

func (s *Spool) seriesIndex(lset labels.Labels) int {
	i := s.series.index(lset)
	if i > math.MaxUint32 {
		panic("backfill spool: too many series") // 4 billion label sets do not fit in memory anyway
	}
	return i
}

func (s *Spool) sample(i int, t int64, v float64) error {
	hr := timegrid.Floor(t, downsample.HourRes)
	h := s.hours[hr]
	if h == nil {
		h = &spoolHour{}
		s.hours[hr] = h
	}
	c := cap(h.buf)
	h.buf = binary.LittleEndian.AppendUint32(h.buf, uint32(i))
	h.buf = binary.LittleEndian.AppendUint64(h.buf, uint64(t))
	h.buf = binary.LittleEndian.AppendUint64(h.buf, math.Float64bits(v))
	h.samples++
	s.samples++
	s.buffered += cap(h.buf) - c
	s.mint, s.maxt = min(s.mint, t), max(s.maxt, t)
	switch {
	case len(h.buf) >= s.hourBuffer:
		return s.write(hr, h)
	case s.buffered >= s.bufferLimit:
		return s.flush()
	}
	return nil
}

// flush writes every hour's buffered records to its file and lets go of
// the buffers.
func (s *Spool) flush() error {
	for hr, h := range s.hours {
		if err := s.write(hr, h); err != nil {
			return err
		}
		h.buf = nil
	}
	s.buffered = 0
	return nil
}

// write appends the hour's buffered records to its file.
func (s *Spool) write(hr int64, h *spoolHour) error {
	if len(h.buf) == 0 {
		return nil
	}
	f, err := os.OpenFile(s.path(hr), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("backfill spool: %w", err)
	}
	_, err = f.Write(h.buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("backfill spool: %w", err)
	}
	h.buf = h.buf[:0]
	return nil
}

func (s *Spool) path(hr int64) string {
	return filepath.Join(s.dir, strconv.FormatInt(hr, 10))
}

// Fingerprint identifies the spooled input for a backfill's progress file
// (Config.InputID): its series, in any order, and how many samples each
// hour holds.
func (s *Spool) Fingerprint() string {
	hashes := make([]uint64, len(s.series.sets))
	for i, l := range s.series.sets {
		hashes[i] = l.Hash()
	}
	slices.Sort(hashes)
	hours := slices.Sorted(maps.Keys(s.hours))
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	for _, x := range hashes {
		put(x)
	}
	for _, hr := range hours {
		put(uint64(hr))
		put(uint64(s.hours[hr].samples))
	}
	return fmt.Sprintf("spool-%d-series-%d-samples-%016x", len(hashes), s.samples, h.Sum64())
}

// Series is the number of series added.
func (s *Spool) Series() int { return len(s.series.sets) }

// Samples is the number of samples added.
func (s *Spool) Samples() int { return s.samples }

// Range returns the time of the first and the last sample added (ok is
// false when there is none).
func (s *Spool) Range() (mint, maxt int64, ok bool) {
	return s.mint, s.maxt, s.samples > 0
}

// SamplesBefore is the number of samples added before t, an hour's start.
func (s *Spool) SamplesBefore(t int64) int {
	n := 0
	for hr, h := range s.hours {
		if hr < t {
			n += h.samples
		}
	}
	return n
}

// Read returns the samples of [from, to) (a ReadFunc): every series with a
// sample in the range, its samples in the order they were added.
func (s *Spool) Read(ctx context.Context, from, to int64) ([]Series, error) {
	if err := s.flush(); err != nil {
		return nil, err
	}
	at := map[uint32]int{} // series index -> position in out
	var out []Series
	rec := make([]byte, spoolRecord)
	for hr := timegrid.Floor(from, downsample.HourRes); hr < to; hr += downsample.HourRes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s.hours[hr] == nil {
			continue
		}
		f, err := os.Open(s.path(hr))
		if err != nil {
			return nil, fmt.Errorf("backfill spool: %w", err)
		}
		r := bufio.NewReaderSize(f, 256<<10)
		for {
			if _, err = io.ReadFull(r, rec); err != nil {
				break
			}
			t := int64(binary.LittleEndian.Uint64(rec[4:]))
			if t < from || t >= to {
				continue
			}
			i := binary.LittleEndian.Uint32(rec)
			p, ok := at[i]
			if !ok {
				p = len(out)
				at[i] = p
				out = append(out, Series{Labels: s.series.sets[i]})
			}
			out[p].Samples = append(out[p].Samples, Sample{T: t, V: math.Float64frombits(binary.LittleEndian.Uint64(rec[12:]))})
		}
		_ = f.Close()
		if !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("backfill spool %s: %w", s.path(hr), err)
		}
	}
	return out, nil
}

// Close removes the spool's directory.
func (s *Spool) Close() error {
	return os.RemoveAll(s.dir)
}

// Dir is the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// RemoveSpools removes the spools' directories in dir but keep (empty:
// none kept), the leftovers of imports killed before Close, and returns how
// many it removed and their bytes. strata serve and strata backfill call it
// once they hold the store's raw tier (its lock): a backfill parses its
// files into its spool before it takes that lock, and one whose spool is
// removed meanwhile fails on its next write, as it would have failed on
// the lock.
func RemoveSpools(dir, keep string) (n int, bytes int64, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("backfill spools: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spoolPrefix) || keep != "" && filepath.Clean(p) == filepath.Clean(keep) {
			continue
		}
		_ = filepath.WalkDir(p, func(_ string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if info, err := d.Info(); err == nil {
					bytes += info.Size()
				}
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			return n, bytes, fmt.Errorf("remove a backfill's leftover spool: %w", err)
		}
		n++
	}
	return n, bytes, nil
}
