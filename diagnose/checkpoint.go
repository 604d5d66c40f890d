package diagnose

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/internal/binio"
)

// The baselines' checkpoints (docs/format/baseline-checkpoint.md).
//
// Without them a start reads the baselines' history back from the minute
// tier: four weeks of every tracked signal, evaluated minute by minute,
// which takes hours at fleet scale (27-48 h for 500,000 series;
// docs/diagnosis.md). The tracker's state is a pure function of the
// minutes it has processed, so a start may instead load the state a
// previous run had after some minute and read back only the minutes after
// it. Two kinds of file hold that state:
//
//   - an hour's summaries (hour-<hour>.sum): the median and MAD of every
//     tracked series' minutes of that hour, written once when the tracker
//     passes the hour. They are most of the state (one summary an hour, a
//     ring of four weeks a series) and never change once written.
//   - a state file (state-<hour>.ckpt): everything else the tracker holds
//     after the last minute before that hour (each series' labels and
//     current baseline, its seasonal baselines of the last hours, its
//     replica flags), written at the same time. Only the last few are kept.
//
// A start loads the newest state file that is usable (same signals, rules
// and hours held, see fingerprints; every summary file it needs present
// and whole; one at or before the first minute whose baselines it writes
// again comes first), then the summaries of the hours a baseline may read,
// then reads back the minutes from the state's hour as it would have from
// the history's start. A file that is missing, torn or from another
// configuration is never an error of the engine: the start falls back to
// an older state, then to the whole read-back.

// checkpointVersion is the files' format version; a change to the format or
// to what the tracker computes from a minute changes it. Version 1 files
// (one fingerprint of everything) are still read.
const checkpointVersion = 2

// The files' magic: seven bytes naming the kind, then the version.
var (
	summaryMagic = [7]byte{'S', 'T', 'R', 'B', 'S', 'U', 'M'}
	stateMagic   = [7]byte{'S', 'T', 'R', 'B', 'C', 'K', 'P'}
)

// fingerprints identify what a checkpoint was computed with.
type fingerprints struct {
	// data is what the summaries and the state's shape depend on: the
	// format, the signals' rules and lookback, the history and the
	// level-shift hours (which hours the tracker holds). A file with
	// another is never used.
	data uint64
	// params are the parameters the baselines are computed with from the
	// summaries (k, min_history, sigma_floor, the signals' floors). A live
	// start restores a state computed with others and applies its own from
	// then on, as a changed recording rule applies from its next
	// evaluation: tuning k costs no read-back of four weeks (hours at
	// fleet scale). A replay (read-only) does not: what it computes must
	// be what a server with its configuration would have.
	params uint64
	// v1 is the one fingerprint of version-1 files, data and params
	// together.
	v1 uint64
}

// flagIncomplete marks a version-1 summary file that left out series whose
// labels share a hash with another tracked series (a 64-bit collision): a
// state that needs the hour is not used. Version 2 lists such series by
// their labels instead.
const flagIncomplete = 1

// checkpointer writes the tracker's checkpoints into dir.
type checkpointer struct {
	dir string
	// fp identifies what the tracker computes.
	fp fingerprints
	// keep is how many state files are kept: a start needs one at or
	// before its first evaluated minute, which trails the newest by the
	// warm-up.
	keep   int
	logger *slog.Logger
	// lastHour is the last hour a summary file was written for (0: none
	// this run).
	lastHour int64
	// lastState is the hour of the last state written or loaded: a
	// tracker restored from it passes its hour again without writing.
	lastState int64
	// readOnly: restore, never write (replay).
	readOnly bool
	m        checkpointMetrics
}

type checkpointMetrics struct {
	writes, failures prometheus.Counter
	duration         prometheus.Gauge
	bytes            prometheus.Gauge
}

func newCheckpointer(dir string, fp fingerprints, keep int, logger *slog.Logger, reg prometheus.Registerer) *checkpointer {
	f := promauto.With(reg)
	return &checkpointer{dir: dir, fp: fp, keep: max(1, keep), logger: logger, m: checkpointMetrics{
		writes:   f.NewCounter(prometheus.CounterOpts{Name: "strata_diagnose_baseline_checkpoints_total", Help: "Hourly checkpoints of the baselines written (an hour's summaries and the tracker's state)."}),
		failures: f.NewCounter(prometheus.CounterOpts{Name: "strata_diagnose_baseline_checkpoint_failures_total", Help: "Hourly checkpoints of the baselines that could not be written; a start reads back from an older one, or the whole history."}),
		duration: f.NewGauge(prometheus.GaugeOpts{Name: "strata_diagnose_baseline_checkpoint_duration_seconds", Help: "How long the last checkpoint of the baselines took to write."}),
		bytes:    f.NewGauge(prometheus.GaugeOpts{Name: "strata_diagnose_baseline_checkpoint_bytes", Help: "Bytes of the baselines' checkpoint files on disk, after the last checkpoint."}),
	}}
}

func hourName(h int64) string {
	return time.Unix(h*3600, 0).UTC().Format("2006-01-02T15")
}

func parseHourName(s string) (int64, bool) {
	t, err := time.Parse("2006-01-02T15", s)
	if err != nil {
		return 0, false
	}
	return t.Unix() / 3600, true
}

func (c *checkpointer) summaryPath(h int64) string {
	return filepath.Join(c.dir, "hour-"+hourName(h)+".sum")
}

func (c *checkpointer) statePath(h int64) string {
	return filepath.Join(c.dir, "state-"+hourName(h)+".ckpt")
}

// checkpoint is called as the tracker passes from hour x, finished, to a
// later one: it writes the summary files of the hours since the last one
// written up to x (those before x the tracker skipped hold no summaries),
// then the state after x. A failure is logged and counted: the engine goes
// on, and a start uses an older state.
func (c *checkpointer) checkpoint(t *tracker, x int64) {
	if c.readOnly || x+1 <= c.lastState {
		return
	}
	if t.len() == 0 {
		// Nothing to restore, and no summaries up to x: a read-back over
		// an empty store (four weeks of empty minutes at a first start)
		// writes no file a minute.
		t.firstHour = x + 1
		return
	}
	start := time.Now()
	if err := c.write(t, x); err != nil {
		c.m.failures.Inc()
		c.logger.Warn("could not checkpoint the baselines; a start will read more of their history back", "hour", hourName(x), "err", err)
		return
	}
	c.lastState = x + 1
	c.m.writes.Inc()
	c.m.duration.Set(time.Since(start).Seconds())
	c.retain(t.hours)
}

func (c *checkpointer) write(t *tracker, x int64) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	from := max(t.firstHour, x-int64(t.hours)+1)
	if c.lastHour != 0 {
		from = max(from, c.lastHour+1)
	}
	for h := from; h <= x; h++ {
		if err := c.writeSummaries(t, h); err != nil {
			return err
		}
		c.lastHour = h
	}
	return writeFileAtomic(c.statePath(x+1), stateMagic, func(w io.Writer) error { return c.encodeState(w, t, (x+1)*hourMs) })
}

// writeFileAtomic writes a checkpoint file through internal/atomicfile (a
// crash leaves the old file or the new one, never a torn one): magic, then
// the body in one zstd frame with its checksum.
func writeFileAtomic(path string, magic [7]byte, body func(io.Writer) error) error {
	f, err := atomicfile.Create(path, filepath.Base(path)+tmpSuffix+"*")
	if err != nil {
		return err
	}
	defer func() { _ = f.Abort() }()
	bw := bufio.NewWriterSize(f, 256<<10)
	if _, err := bw.Write(append(magic[:], checkpointVersion)); err != nil {
		return err
	}
	zw, err := zstd.NewWriter(bw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	if err != nil {
		return err
	}
	zb := bufio.NewWriterSize(zw, 64<<10)
	if err := body(zb); err != nil {
		_ = zw.Close()
		return err
	}
	if err := zb.Flush(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Commit()
}

// tmpSuffix marks a checkpoint file being written; retain removes those a
// crash left.
const tmpSuffix = ".tmp"

// enc appends the fields of a file's body to w.
type enc struct {
	w   io.Writer
	buf []byte
	err error
}

func (e *enc) flush() {
	if e.err == nil && len(e.buf) > 0 {
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

func (e *enc) uvarint(x uint64) { e.buf = binary.AppendUvarint(e.buf, x) }
func (e *enc) varint(x int64)   { e.buf = binary.AppendVarint(e.buf, x) }
func (e *enc) u64(x uint64)     { e.buf = binary.LittleEndian.AppendUint64(e.buf, x) }
func (e *enc) u32(x uint32)     { e.buf = binary.LittleEndian.AppendUint32(e.buf, x) }
func (e *enc) f64(x float64)    { e.u64(math.Float64bits(x)) }
func (e *enc) byte(b byte)      { e.buf = append(e.buf, b) }

// writeSummaries writes hour h's summaries: every tracked series with one,
// by label hash, in increasing hash order, then those whose label hash
// another tracked series shares, by hash and labels, in that order.
func (c *checkpointer) writeSummaries(t *tracker, h int64) error {
	type entry struct {
		hash uint64
		x    summary
		s    *bseries // a colliding series
	}
	var es, collided []entry
	for hash, s := range t.series {
		if s.next != nil {
			for ; s != nil; s = s.next {
				if x, ok := s.ring.at(h); ok {
					collided = append(collided, entry{hash, x, s})
				}
			}
			continue
		}
		if x, ok := s.ring.at(h); ok {
			es = append(es, entry{hash, x, nil})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.hash, b.hash) })
	slices.SortFunc(collided, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), labels.Compare(a.s.lbls, b.s.lbls))
	})
	return writeFileAtomic(c.summaryPath(h), summaryMagic, func(w io.Writer) error {
		e := &enc{w: w}
		e.u64(c.fp.data)
		e.varint(h)
		e.u32(0)
		e.uvarint(uint64(len(es)))
		prev := uint64(0)
		for i, x := range es {
			e.uvarint(x.hash - prev)
			prev = x.hash
			e.u32(math.Float32bits(x.x.m))
			e.u32(math.Float32bits(x.x.d))
			if i%4096 == 4095 {
				e.flush()
			}
		}
		e.uvarint(uint64(len(collided)))
		for _, x := range collided {
			e.u64(x.hash)
			e.buf = binio.AppendLabels(e.buf, x.s.lbls)
			e.u32(math.Float32bits(x.x.m))
			e.u32(math.Float32bits(x.x.d))
		}
		e.flush()
		return e.err
	})
}

// encodeState writes the tracker's state before minute next (ms: next
// hour's start): every tracked series but its ring (the summary files) and
// its current hour's values (none: the tracker finished the hour).
func (c *checkpointer) encodeState(w io.Writer, t *tracker, next int64) error {
	e := &enc{w: w}
	e.u64(c.fp.data)
	e.u64(c.fp.params)
	e.varint(next)
	e.varint(t.done)
	e.varint(t.lastGC)
	e.varint(t.firstHour)
	e.uvarint(uint64(t.len()))
	for _, name := range slices.Sorted(maps.Keys(t.byMetric)) {
		for _, s := range t.byMetric[name] {
			if len(s.cur) > 0 {
				return fmt.Errorf("series %s holds an unfinished hour", s.lbls)
			}
			e.buf = binio.AppendLabels(e.buf, s.lbls)
			e.varint(s.hour)
			e.varint(s.lastT)
			e.varint(s.lastOut)
			e.f64(s.x)
			e.f64(s.med)
			e.f64(s.sig)
			e.f64(s.recMed)
			e.f64(s.recSig)
			e.f64(s.recNoise)
			e.byte(byte(s.src))
			var fl byte
			if s.hasRec {
				fl |= 1
			}
			if s.out != nil {
				fl |= 2
			}
			e.byte(fl)
			for _, r := range s.repl {
				e.uvarint(r)
			}
			for i := range s.srcHour {
				e.varint(int64(s.srcHour[i]))
				e.byte(byte(s.srcOf[i]))
			}
			e.uvarint(uint64(len(s.seas)))
			for _, x := range s.seas {
				e.varint(int64(x.hour))
				e.f64(x.m)
				e.f64(x.sig)
			}
			if len(e.buf) > 32<<10 {
				e.flush()
			}
		}
	}
	e.flush()
	return e.err
}

// retain keeps the states a start may restore and the summaries they need
// (a state before hour c needs those of the hours - 1 hours before c).
func (c *checkpointer) retain(hours int) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	var states []int64
	for _, de := range ents {
		if h, ok := fileHour(de.Name(), "state-", ".ckpt"); ok {
			states = append(states, h)
		} else if strings.Contains(de.Name(), tmpSuffix) {
			c.remove(de.Name()) // a write a crash interrupted
		}
	}
	slices.Sort(states)
	for len(states) > c.keep {
		c.remove(filepath.Base(c.statePath(states[0])))
		states = states[1:]
	}
	var size int64
	for _, de := range ents {
		name := de.Name()
		if h, ok := fileHour(name, "hour-", ".sum"); ok && (len(states) == 0 || h < states[0]-int64(hours)+1) {
			c.remove(name)
			continue
		}
		if h, ok := fileHour(name, "state-", ".ckpt"); ok && h < states[0] {
			continue
		}
		if fi, err := de.Info(); err == nil {
			size += fi.Size()
		}
	}
	c.m.bytes.Set(float64(size))
}

func (c *checkpointer) remove(name string) {
	if err := os.Remove(filepath.Join(c.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.logger.Warn("could not remove a baseline checkpoint file", "file", name, "err", err)
	}
}

func fileHour(name, prefix, suffix string) (int64, bool) {
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	return parseHourName(strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix))
}

// restore loads into t, which has processed nothing, the newest usable
// state after minute notBefore and at or before minute notAfter, with the
// summaries its baselines may read; states at or before minute prefer come
// first. It returns the first minute t has not processed (false: nothing
// usable; t is as it was, and why is logged).
func (c *checkpointer) restore(t *tracker, notBefore, notAfter, prefer int64) (int64, bool) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			c.logger.Warn("could not read the baselines' checkpoints", "err", err)
		}
		return 0, false
	}
	var states []int64
	for _, de := range ents {
		if h, ok := fileHour(de.Name(), "state-", ".ckpt"); ok && h*hourMs <= notAfter && h*hourMs > notBefore {
			states = append(states, h)
		}
	}
	slices.Sort(states)
	slices.Reverse(states)
	slices.SortStableFunc(states, func(a, b int64) int {
		pa, pb := a*hourMs <= prefer, b*hourMs <= prefer
		switch {
		case pa && !pb:
			return -1
		case pb && !pa:
			return 1
		}
		return 0
	})
	for _, h := range states {
		otherParams, err := c.load(t, h)
		if err == nil {
			c.lastHour, c.lastState = h-1, h
			if otherParams {
				c.logger.Info("the baseline parameters (k, min_history, sigma_floor) changed since the checkpoint: the restored baselines were computed with the old ones, the new ones apply from now on; remove the directory to read the whole history back with them",
					"dir", c.dir, "state", filepath.Base(c.statePath(h)))
			}
			return h * hourMs, true
		}
		t.reset()
		c.logger.Warn("not using a checkpoint of the baselines", "state", filepath.Base(c.statePath(h)), "err", err)
	}
	return 0, false
}

// end checks that the body ends here, and so that the zstd frame's
// checksum was verified.
func end(d *binio.Reader) error {
	if d.Err != nil {
		return d.Err
	}
	if _, err := d.R.ReadByte(); err != io.EOF {
		if err == nil {
			return errors.New("bytes after the end")
		}
		return err
	}
	return nil
}

// openFile opens a checkpoint file, checks its magic and gives body its
// version.
func openFile(path string, magic [7]byte, body func(d *binio.Reader, version byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	br := bufio.NewReaderSize(f, 256<<10)
	var m [8]byte
	if _, err := io.ReadFull(br, m[:]); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if [7]byte(m[:7]) != magic || m[7] < 1 || m[7] > checkpointVersion {
		return fmt.Errorf("%s: not a checkpoint file of this kind and version", filepath.Base(path))
	}
	zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		return err
	}
	defer zr.Close()
	d := &binio.Reader{R: bufio.NewReaderSize(zr, 64<<10)}
	if err := body(d, m[7]); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := end(d); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// load reads state file c (the state before hour c) into t, then the
// summaries of the hours a baseline after it may read. It reports whether
// the state was computed with other baseline parameters.
func (c *checkpointer) load(t *tracker, ch int64) (otherParams bool, err error) {
	err = openFile(c.statePath(ch), stateMagic, func(d *binio.Reader, version byte) error {
		var err error
		if otherParams, err = c.checkState(d, version); err != nil {
			return err
		}
		if next := d.Varint(); d.Err == nil && next != ch*hourMs {
			return fmt.Errorf("holds the state before %s, not before its hour", fmtMs(next))
		}
		done, lastGC, firstHour := d.Varint(), d.Varint(), d.Varint()
		n := d.Uvarint()
		var b labels.ScratchBuilder
		for i := uint64(0); i < n && d.Err == nil; i++ {
			lbls := d.Labels(&b)
			if d.Err != nil {
				break
			}
			h := lbls.Hash()
			s := t.getHash(h, lbls)
			if s.hour != 0 || s.lastT != 0 {
				return fmt.Errorf("series %s twice", lbls)
			}
			s.hour, s.lastT, s.lastOut = d.Varint(), d.Varint(), d.Varint()
			s.x, s.med, s.sig, s.recMed, s.recSig, s.recNoise = d.F64(), d.F64(), d.F64(), d.F64(), d.F64(), d.F64()
			s.src = baselineSource(d.Byte())
			fl := d.Byte()
			s.hasRec = fl&1 != 0
			if fl&2 != 0 && s.lastOut == ch*hourMs-minute.Milliseconds() {
				// Its stale markers at the state's minute need its baseline
				// series; any other series makes them when it next has a
				// baseline (three label sets, 675 bytes a series: 27 MB for
				// 40,002 series gone before the state).
				s.outputs()
			}
			for k := range s.repl {
				s.repl[k] = d.Uvarint()
			}
			for k := range s.srcHour {
				s.srcHour[k] = int32(d.Varint())
				s.srcOf[k] = baselineSource(d.Byte())
			}
			if ns := d.Uvarint(); ns > 0 && d.Err == nil {
				if ns != uint64(t.shiftN+1) {
					return fmt.Errorf("%d seasonal baselines a series, not %d", ns, t.shiftN+1)
				}
				s.seas = make([]seasonal, ns)
				for k := range s.seas {
					s.seas[k] = seasonal{hour: int32(d.Varint()), m: d.F64(), sig: d.F64()}
				}
			}
		}
		if d.Err != nil {
			return d.Err
		}
		if done >= ch*hourMs || done < firstHour*hourMs {
			return fmt.Errorf("last minute %s outside its hours", fmtMs(done))
		}
		t.done, t.started, t.lastGC, t.firstHour = done, true, lastGC, firstHour
		return nil
	})
	if err != nil {
		return false, err
	}
	for h := max(t.firstHour, ch-int64(t.hours)+1); h < ch; h++ {
		if err := c.loadSummaries(t, h); err != nil {
			return false, err
		}
	}
	return otherParams, nil
}

var errOtherData = errors.New("written with other signal rules, lookback, history or level_shift_after")

// checkState reads a state file's fingerprints and reports whether it was
// computed with other parameters (params): a live start takes such a
// state, a read-only one does not.
func (c *checkpointer) checkState(d *binio.Reader, version byte) (otherParams bool, err error) {
	if version == 1 {
		if fp := d.U64(); d.Err == nil && fp != c.fp.v1 {
			return false, errors.New("a version-1 file written with another baseline configuration or other signal rules")
		}
		return false, d.Err
	}
	data, params := d.U64(), d.U64()
	switch {
	case d.Err != nil:
		return false, d.Err
	case data != c.fp.data:
		return false, errOtherData
	case params != c.fp.params && c.readOnly:
		return false, errors.New("written with other baseline parameters (k, min_history, sigma_floor): a replay restores only its own")
	}
	return params != c.fp.params, nil
}

// loadSummaries puts hour h's summaries in the rings of the series t
// tracks (those it has forgotten since are left out). A series whose label
// hash another tracked series has come to share since the hour was written
// cannot be told from it by the hash: both go without that hour's summary
// (a 64-bit collision; none has been seen), the rest is restored.
func (c *checkpointer) loadSummaries(t *tracker, h int64) error {
	return openFile(c.summaryPath(h), summaryMagic, func(d *binio.Reader, version byte) error {
		want := c.fp.data
		if version == 1 {
			want = c.fp.v1
		}
		if fp := d.U64(); d.Err == nil && fp != want {
			return errOtherData
		}
		if fh := d.Varint(); d.Err == nil && fh != h {
			return fmt.Errorf("holds hour %s", hourName(fh))
		}
		if fl := d.U32(); d.Err == nil && fl&flagIncomplete != 0 {
			return errors.New("leaves out series whose label hashes collide")
		}
		n := d.Uvarint()
		hash := uint64(0)
		for i := uint64(0); i < n && d.Err == nil; i++ {
			hash += d.Uvarint()
			x := summary{m: math.Float32frombits(d.U32()), d: math.Float32frombits(d.U32())}
			if d.Err != nil {
				break
			}
			s := t.series[hash]
			if s == nil {
				continue
			}
			if s.next != nil {
				c.logger.Warn("two tracked series share a label hash: neither gets this hour's summary from the checkpoint", "hour", hourName(h), "series", s.lbls)
				continue
			}
			s.ring.set(h, t.hours, x, t.arena)
		}
		if version == 1 {
			return d.Err
		}
		var b labels.ScratchBuilder
		n = d.Uvarint()
		for i := uint64(0); i < n && d.Err == nil; i++ {
			hash, lbls := d.U64(), d.Labels(&b)
			x := summary{m: math.Float32frombits(d.U32()), d: math.Float32frombits(d.U32())}
			if d.Err != nil {
				break
			}
			for s := t.series[hash]; s != nil; s = s.next {
				if labels.Equal(s.lbls, lbls) {
					s.ring.set(h, t.hours, x, t.arena)
					break
				}
			}
		}
		return d.Err
	})
}

// reset forgets every series (a checkpoint that failed to load part way).
func (t *tracker) reset() {
	for _, list := range t.byMetric {
		for _, s := range list {
			t.arena.put(s.ring.pages)
		}
	}
	clear(t.series)
	clear(t.byMetric)
	t.done, t.started, t.lastGC, t.firstHour = 0, false, 0, 0
}

// baselineFingerprints identify what a tracker computes from the minute
// data: the rules that record its signals (with the lookback they are
// evaluated with) and the hours it holds (data), and the parameters of its
// baselines (params).
func (e *Engine) baselineFingerprints() fingerprints {
	c := e.cfg.Baseline
	var data, params, v1 strings.Builder
	fmt.Fprintf(&data, "v%d history=%v shift=%v lookback=%v\n", checkpointVersion, c.History, c.LevelShiftAfter, e.lookback)
	fmt.Fprintf(&params, "k=%v min=%v floor=%v\n", c.K, c.MinHistory, c.SigmaFloor)
	// Version 1's, for its files.
	fmt.Fprintf(&v1, "v1 k=%v history=%v min=%v shift=%v floor=%v lookback=%v\n",
		c.K, c.History, c.MinHistory, c.LevelShiftAfter, c.SigmaFloor, e.lookback)
	for _, n := range e.base.names {
		fmt.Fprintf(&data, "signal %s\n", n)
		fmt.Fprintf(&params, "signal %s floor=%v\n", n, e.base.floors[n])
		fmt.Fprintf(&v1, "signal %s floor=%v\n", n, e.base.floors[n])
	}
	for _, it := range e.bootstrapItems() {
		r := fmt.Sprintf("rule %s %s %s\n", it.r.Name(), it.r.Labels(), it.r.Query())
		data.WriteString(r)
		v1.WriteString(r)
	}
	return fingerprints{data: fnv64(data.String()), params: fnv64(params.String()), v1: fnv64(v1.String())}
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// DropBaselineCheckpoints removes from dir (a live engine's BaselineDir)
// the checkpoints that minute data from minT (ms) on would change: the
// states after minT and the summaries of the hours from minT's. `strata
// backfill` calls it before it writes history, so that the next start
// reads the backfilled minutes back instead of restoring baselines that
// never saw them. It returns how many files it removed.
func DropBaselineCheckpoints(dir string, minT int64) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, de := range ents {
		h, ok := fileHour(de.Name(), "state-", ".ckpt")
		if !ok {
			if h, ok = fileHour(de.Name(), "hour-", ".sum"); ok {
				h++ // the hour's summaries change with any minute of it
			}
		}
		if !ok || h*hourMs <= minT {
			continue
		}
		if err := os.Remove(filepath.Join(dir, de.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}
