package tiers

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/strata-dev/strata/internal/atomicfile"
)

// CorruptDir is the directory, inside a rollup tier's, where partition files
// found corrupt are moved (quarantined).
const CorruptDir = "corrupt"

// corruptPartitionError is a partition file whose bytes are bad: its footer
// does not parse, or a page fails its checksum or header checks. An I/O
// error (the disk or the file system failing) is not one.
type corruptPartitionError struct {
	path string
	info os.FileInfo // the file found corrupt; nil: unknown
	err  error
}

func (e *corruptPartitionError) Error() string { return e.err.Error() }
func (e *corruptPartitionError) Unwrap() error { return e.err }

// footerError is the error of a partition file that opened but whose footer
// did not parse: a corruptPartitionError, unless the operating system
// failed the read (an errno: EIO, EISDIR, ...), which is not the bytes'
// fault and leaves the file in place.
func footerError(err error, path string, info os.FileInfo) error {
	if errno := syscall.Errno(0); errors.As(err, &errno) {
		return err
	}
	return &corruptPartitionError{path: path, info: info, err: err}
}

// asCorrupt returns err as a corruptPartitionError of the file at path
// (info) when it says a page of it is corrupt, and err itself otherwise.
func asCorrupt(err error, path string, info os.FileInfo) error {
	var ce *corruptPartitionError
	if err == nil || errors.As(err, &ce) || !errors.Is(err, parquet.ErrCorrupted) {
		return err
	}
	return &corruptPartitionError{path: path, info: info, err: err}
}

// A rollup tier sets corrupt partition files aside instead of failing on
// them: before, one truncated or bit-flipped file kept strata serve from
// starting at all (the tier would not open: ingestion down for one hour's
// rollups), and one that went bad later failed every query over its hour
// and stalled the diagnosis engine, which retried reading it. Prometheus
// refuses to start on a corrupt block in the same way, and its users delete
// the block by hand. A partition found corrupt when the tier opens, or by a
// read (a page's checksum), is moved to CorruptDir and left out: queries
// over its hour answer without it, with a warning (Stitched), until a
// partition is written for that hour again (a backfill of the source). The
// file is kept for inspection; nothing deletes it.
//
// A read-only tier (beside the server that writes it) and a tier whose
// partitions live in a bucket leave the file where it is: the first skips
// it at open and fails reads of it as before, the second fails reads of it
// as before (the bucket's copy is the partition).

// quarantine moves the partition file e names to CorruptDir and drops it
// from the tier; it reports whether it did. A rewrite of the partition that
// replaced the file since it was read is left in place (its file is not the
// one found corrupt) and reported as not moved.
func (r *Rollup) quarantine(e *corruptPartitionError) bool {
	if r.cfg.ReadOnly || r.remote != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	start, found := int64(0), false
	for s, p := range r.parts {
		if p.Path == e.path {
			start, found = s, true
			break
		}
	}
	if !found || r.closed {
		return false
	}
	dst, err := r.moveAside(e.path, e.info)
	if err != nil || dst == "" {
		if err != nil {
			r.logger.Error("cannot set a corrupt partition file aside", "path", e.path, "err", err)
		}
		return false
	}
	delete(r.parts, start)
	r.generation.Add(1)
	if err := r.files.drop(start); err != nil {
		r.logger.Warn("close corrupt partition file", "path", e.path, "err", err)
	}
	r.noteCorrupt(start, dst, e)
	return true
}

// setAsideIfCorrupt quarantines the partition err says is corrupt, if it
// does.
func (r *Rollup) setAsideIfCorrupt(err error) {
	if ce := (*corruptPartitionError)(nil); errors.As(err, &ce) {
		r.quarantine(ce)
	}
}

// moveAside renames the file at path into CorruptDir and returns its new
// path; "" when the file there is no longer info (a rewrite replaced it:
// it is moved back).
func (r *Rollup) moveAside(path string, info os.FileInfo) (string, error) {
	dir := filepath.Join(r.cfg.Dir, CorruptDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, filepath.Base(path))
	if err := os.Rename(path, dst); err != nil {
		return "", err
	}
	if info != nil {
		if st, err := os.Stat(dst); err == nil && !os.SameFile(st, info) {
			if err := os.Rename(dst, path); err != nil {
				return "", fmt.Errorf("move a rewritten partition back: %w", err)
			}
			return "", nil
		}
	}
	if err := atomicfile.SyncDir(r.cfg.Dir); err != nil {
		r.logger.Warn("sync the tier's directory after setting a corrupt partition aside", "err", err)
	}
	return dst, nil
}

// noteCorrupt records that partition start was set aside to dst (r.mu held
// for writing, or the tier not yet shared).
func (r *Rollup) noteCorrupt(start int64, dst string, cause error) {
	if r.corrupt == nil {
		r.corrupt = map[int64]string{}
	}
	r.corrupt[start] = dst
	r.corruptFound.Inc()
	r.logger.Error("corrupt partition file set aside; its data is left out of queries until the partition is written again",
		"partition", time.UnixMilli(start).UTC().Format(time.RFC3339), "moved_to", dst, "err", cause)
}

// loadCorrupt records the files CorruptDir holds of partitions the tier
// does not hold (set aside before a restart), so that queries over them
// still warn.
func (r *Rollup) loadCorrupt() {
	entries, err := os.ReadDir(filepath.Join(r.cfg.Dir, CorruptDir))
	if err != nil {
		return
	}
	for _, e := range entries {
		start, ok := parsePartitionName(e.Name())
		if _, live := r.parts[start]; !ok || live {
			continue
		}
		if r.corrupt == nil {
			r.corrupt = map[int64]string{}
		}
		r.corrupt[start] = filepath.Join(r.cfg.Dir, CorruptDir, e.Name())
	}
}

// CorruptPartitions returns the starts of the partitions overlapping
// [mint, maxt] that were set aside as corrupt and not written again, in
// ascending order.
func (r *Rollup) CorruptPartitions(mint, maxt int64) []int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []int64
	length := r.cfg.PartitionLength.Milliseconds()
	for s := range r.corrupt {
		if s <= maxt && s+length > mint {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// openRawSettingAside is tsdb.Open of the raw tier in dir, with the blocks
// that do not open set aside: when open fails, every block that does not
// open on its own (its meta.json, index or chunks unreadable or failing
// their checksums) is moved to dir/CorruptDir, logged as an error, and
// open is tried once more. Before, one such block kept strata serve from
// starting (the TSDB's "corrupted block" error, which Prometheus' users
// meet too and answer by deleting the block by hand). A block the system
// fails to read (an errno other than a missing file) stays where it is,
// and open fails as before. It returns the blocks set aside.
func openRawSettingAside(dir string, open func() (*tsdb.DB, error), logger *slog.Logger) (*tsdb.DB, []string, error) {
	db, err := open()
	if err == nil {
		return db, nil, nil
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		// The directory's lock is held: its blocks are another
		// process's, not for this one to judge.
		return nil, nil, fmt.Errorf("%w: another process has the raw tier open (a strata serve or strata backfill of this storage path): stop it first", err)
	}
	entries, rerr := os.ReadDir(dir)
	if rerr != nil {
		return nil, nil, err
	}
	var aside []string
	for _, e := range entries {
		if _, perr := ulid.ParseStrict(e.Name()); perr != nil || !e.IsDir() {
			continue
		}
		bdir := filepath.Join(dir, e.Name())
		b, berr := tsdb.OpenBlock(slog.New(slog.DiscardHandler), bdir, nil, nil)
		if berr == nil {
			_ = b.Close() // read-only: nothing to flush
			continue
		}
		if errno := syscall.Errno(0); errors.As(berr, &errno) && !errors.Is(berr, fs.ErrNotExist) {
			continue
		}
		if merr := os.MkdirAll(filepath.Join(dir, CorruptDir), 0o750); merr != nil {
			return nil, nil, errors.Join(err, merr)
		}
		dst := filepath.Join(dir, CorruptDir, e.Name())
		if merr := os.Rename(bdir, dst); merr != nil {
			return nil, nil, errors.Join(err, fmt.Errorf("set corrupt block %s aside: %w", e.Name(), merr))
		}
		logger.Error("corrupt raw block set aside; its samples are left out of queries", "block", e.Name(), "moved_to", dst, "err", berr)
		aside = append(aside, e.Name())
	}
	if len(aside) == 0 {
		return nil, nil, err
	}
	if serr := atomicfile.SyncDir(dir); serr != nil {
		logger.Warn("sync the raw tier's directory after setting blocks aside", "err", serr)
	}
	db, err = open()
	return db, aside, err
}

// trackingRegisterer registers through Registerer and remembers what it
// registered, so that a tsdb.Open that failed after registering its
// metrics can be tried again on the same registry.
type trackingRegisterer struct {
	prometheus.Registerer
	done []prometheus.Collector
}

func (t *trackingRegisterer) Register(c prometheus.Collector) error {
	if err := t.Registerer.Register(c); err != nil {
		return err
	}
	t.done = append(t.done, c)
	return nil
}

func (t *trackingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

// unregisterAll takes back everything registered through t.
func (t *trackingRegisterer) unregisterAll() {
	for _, c := range t.done {
		t.Unregister(c)
	}
	t.done = nil
}
