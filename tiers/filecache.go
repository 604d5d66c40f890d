package tiers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/parquet-go/parquet-go"
)

// openFile is a partition file kept open with its footer parsed. Opening a
// Parquet file costs more than reading a minute partition's few needed
// columns would suggest: parquet-go decodes the footer's thrift and builds the
// schema, ~0.3 ms per file, so a 30-day query over 720 minute partitions
// spent 8 % of its CPU in OpenFile. Partitions are immutable (a rewrite is a
// new file renamed over the old one), so a parsed footer stays valid for as
// long as its descriptor is open, even after the path is replaced or deleted.
type openFile struct {
	f    *os.File
	pf   *parquet.File
	cols rollupColumns
	// runs is per row group, from the file's metadata (nil if it has
	// none), parsed on first need (seriesRuns): a reader with the file's
	// series table needs none.
	runsOnce sync.Once
	runs     [][]seriesRun
	runsErr  error
	refs     int    // readers holding it, plus one while it is in the cache
	used     uint64 // fileCache.clock at the last acquire
	// weight is what the parsed footer holds in memory, estimated from its
	// size on disk (footerWeight), against fileCache.maxBytes.
	weight int64
	info   os.FileInfo // nil for a file opened elsewhere than openPartition
	// table is the series table of the partition this process wrote last
	// (seriesTable), when this is that file; matched is whether it was
	// looked for. Both are guarded by fileCache.mu.
	table   *fileTable
	matched bool
}

// fileCache holds up to max open partition files of one tier, whose parsed
// footers weigh at most maxBytes together, evicting the least recently
// used. Readers acquire a file and release it when done; a file evicted,
// replaced or deleted while a reader holds it is closed when that reader
// releases it.
type fileCache struct {
	mu       sync.Mutex
	max      int
	maxBytes int64 // <= 0: no bound but max
	bytes    int64 // the cached files' weights
	clock    uint64
	files    map[int64]*openFile // by partition start
	closed   bool                // after close, files are opened per reader only
	// drops counts drops per partition start: a file opened before its
	// partition was rewritten must not be cached after the rewrite dropped
	// the old entry (it would serve the old data until evicted).
	drops map[int64]uint64
	// fetch, when set, brings a partition file missing locally (a tier in
	// object storage whose local copy was evicted) back before it is
	// opened; touch tells that tier's cache a partition was read.
	fetch func(PartitionInfo) (*openFile, error)
	touch func(start int64)
	// latest is the series table of the partition written last (nil:
	// none kept), for the files that are that partition's.
	latest *seriesTable
}

// defaultOpenFiles bounds the cache when the configuration does not: enough
// for the default retention of either tier (720 minute or 365 hour
// partitions), and at most a quarter of the process's file descriptor limit,
// so that a low limit is left for sockets and the TSDB.
func defaultOpenFiles(cfg RollupConfig) int {
	switch {
	case cfg.OpenFiles < 0:
		return 0 // none kept: every query opens the files it reads
	case cfg.OpenFiles > 0:
		return cfg.OpenFiles
	}
	n := 1024
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/4 < uint64(n) {
		n = int(rl.Cur / 4) //nolint:gosec // below 1024
	}
	return n
}

// defaultOpenFileBytes bounds the memory of the cached files' parsed
// footers when the configuration does not. A footer grows with the series
// a partition holds (each series' run, row groups' statistics): a minute
// partition of 500,000 series held 47 MB parsed (an 11.6 MB footer), and
// the diagnosis engine opens each hour's when it is written, so with a
// bound of files alone the cache grew by that much every hour
// (docs/bench.md, stop 38). A minute partition of 10,000 series weighs
// about 1 MB: 128 of them fit.
const defaultOpenFileBytes = 128 << 20

func defaultOpenFilesBytes(cfg RollupConfig) int64 {
	if cfg.OpenFilesBytes == 0 {
		return defaultOpenFileBytes
	}
	return cfg.OpenFilesBytes
}

func newFileCache(maxFiles int, maxBytes int64) *fileCache {
	return &fileCache{max: maxFiles, maxBytes: maxBytes, files: map[int64]*openFile{}, drops: map[int64]uint64{}}
}

// acquire returns partition p's open file; the caller must release it.
func (c *fileCache) acquire(p PartitionInfo) (*openFile, error) {
	if c.touch != nil {
		c.touch(p.Start)
	}
	of, drops := c.lookup(p.Start)
	if of == nil {
		var err error
		of, err = openPartition(p.Path)
		if errors.Is(err, fs.ErrNotExist) && c.fetch != nil {
			of, err = c.fetch(p)
		}
		if err != nil {
			return nil, err
		}
		of = c.insert(p.Start, of, drops)
	}
	c.attachTable(p.Start, of)
	return of, nil
}

// setLatest keeps t, the table of the partition just written, in place of
// the previous one.
func (c *fileCache) setLatest(t *seriesTable) {
	c.mu.Lock()
	c.latest = t
	c.forgetTables()
	c.mu.Unlock()
}

// takeLatest forgets the latest series table and returns its runs, a
// size hint for the next.
func (c *fileCache) takeLatest() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if c.latest != nil {
		n = len(c.latest.ids)
	}
	c.latest = nil
	c.forgetTables()
	return n
}

// forgetTables drops the tables of the cached files that are not the
// latest, so that one table is kept; c.mu is held. A file a reader holds
// but the cache does not keeps its table until released.
func (c *fileCache) forgetTables() {
	for _, of := range c.files {
		if of.table != nil && of.table.seriesTable != c.latest {
			of.table = nil
		}
	}
}

// attachTable gives of, a file of partition start, the latest series table
// if it describes that very file (the same file on disk, and its series
// runs agree: matchTable), once per open file.
func (c *fileCache) attachTable(start int64, of *openFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if of.matched {
		return
	}
	of.matched = true
	if t := c.latest; t != nil && t.start == start && of.info != nil && t.file != nil && os.SameFile(t.file, of.info) {
		runs, _ := of.pf.Lookup(seriesRunsKey)
		rgs := of.pf.RowGroups()
		rows := make([]int64, len(rgs))
		for i, rg := range rgs {
			rows[i] = rg.NumRows()
		}
		of.table = matchTable(t, runs, rows)
	}
}

// tableOf is of's series table, or nil.
func (c *fileCache) tableOf(of *openFile) *fileTable {
	c.mu.Lock()
	defer c.mu.Unlock()
	return of.table
}

// lookup returns the cached file of partition start, referenced, or nil
// and the partition's drop count, for insert.
func (c *fileCache) lookup(start int64) (*openFile, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if of, ok := c.files[start]; ok {
		of.refs++
		c.clock++
		of.used = c.clock
		return of, 0
	}
	return nil, c.drops[start]
}

// insert caches of, just opened for partition start, unless the partition
// was dropped since lookup returned drops, and returns the file the caller
// holds (of, or the one another reader cached meanwhile).
func (c *fileCache) insert(start int64, of *openFile, drops uint64) *openFile {
	of.refs = 1
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max <= 0 || c.closed || c.drops[start] != drops {
		return of
	}
	if cur, ok := c.files[start]; ok { // opened concurrently: keep the cached one
		of.refs = 0
		_ = of.f.Close()
		cur.refs++
		return cur
	}
	if c.maxBytes > 0 && of.weight > c.maxBytes {
		return of // alone over the bound: read, not kept
	}
	for len(c.files) >= c.max || c.maxBytes > 0 && len(c.files) > 0 && c.bytes+of.weight > c.maxBytes {
		c.evictOldest()
	}
	of.refs++ // the cache's reference
	c.clock++
	of.used = c.clock
	c.files[start] = of
	c.bytes += of.weight
	return of
}

// release gives back a file from acquire.
func (c *fileCache) release(of *openFile) error {
	c.mu.Lock()
	of.refs--
	done := of.refs == 0
	c.mu.Unlock()
	if done {
		return of.f.Close()
	}
	return nil
}

// drop removes partition start from the cache (rewritten or deleted); the
// file is closed once no reader holds it.
func (c *fileCache) drop(start int64) error {
	c.mu.Lock()
	c.drops[start]++
	of, ok := c.files[start]
	if !ok {
		c.mu.Unlock()
		return nil
	}
	delete(c.files, start)
	c.bytes -= of.weight
	c.mu.Unlock()
	return c.release(of)
}

// close empties the cache for good (Rollup.Close).
func (c *fileCache) close() error {
	c.mu.Lock()
	c.closed = true
	starts := make([]int64, 0, len(c.files))
	for s := range c.files {
		starts = append(starts, s)
	}
	c.mu.Unlock()
	var errs []error
	for _, s := range starts {
		errs = append(errs, c.drop(s))
	}
	return errors.Join(errs...)
}

// evictOldest removes the least recently used file; c.mu is held. A linear
// scan: evictions happen only when queries touch more partitions than the
// cache holds, and then cost far less than the footers they parse.
func (c *fileCache) evictOldest() {
	var (
		oldest int64
		of     *openFile
	)
	for s, f := range c.files {
		if of == nil || f.used < of.used {
			oldest, of = s, f
		}
	}
	delete(c.files, oldest)
	c.bytes -= of.weight
	of.refs--
	if of.refs == 0 {
		_ = of.f.Close()
	}
}

// len is the number of cached files (tests and metrics).
func (c *fileCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.files)
}

// weight is the cached files' weights (tests and metrics).
func (c *fileCache) weight() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// footerWeight estimates what a footer of n bytes on disk holds once
// parsed: parquet-go's decoded metadata, the key-value values it keeps,
// and the series runs decoded from them (seriesRuns: unless a series table
// serves the file). A minute partition of 500,000 series: an 11.6 MB
// footer, 47 MB in the heap profile.
func footerWeight(n int64) int64 { return 4 * n }

// openPartition opens a partition file and parses its footer.
func openPartition(path string) (of *openFile, err error) {
	f, err := os.Open(path) //nolint:gosec // path comes from the tier's own listing
	if err != nil {
		return nil, fmt.Errorf("open partition: %w", err)
	}
	return openPartitionFile(f, path)
}

// openPartitionFile is openPartition of a file already open (f, named path
// in errors); it takes f, closing it on an error.
func openPartitionFile(f *os.File, path string) (of *openFile, err error) {
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat partition: %w", err)
	}
	// 64 KiB reads instead of parquet-go's 4 KiB: a minute file's column
	// chunk is a few hundred KB, read in a few syscalls instead of a hundred.
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.ReadBufferSize(64<<10))
	if err != nil {
		// The file opened: its bytes are what is wrong.
		return nil, footerError(fmt.Errorf("open parquet file %s: %w", path, err), path, st)
	}
	if _, err := schemaVersion(pf.Lookup("strata.schema_version")); err != nil {
		return nil, fmt.Errorf("partition %s: %w", path, err)
	}
	cols, err := lookupColumns(pf.Schema())
	if err != nil {
		return nil, fmt.Errorf("partition %s: %w", path, err)
	}
	// A Parquet file ends with its footer's length and "PAR1".
	var tail [8]byte
	if _, err := f.ReadAt(tail[:], st.Size()-8); err != nil {
		return nil, fmt.Errorf("partition %s: read footer length: %w", path, err)
	}
	weight := footerWeight(int64(binary.LittleEndian.Uint32(tail[:4])))
	return &openFile{f: f, pf: pf, cols: cols, weight: weight, info: st}, nil
}

// seriesRuns is the file's series runs per row group (rowGroupRuns), nil
// if it has none, parsed the first time they are asked for.
func (of *openFile) seriesRuns() ([][]seriesRun, error) {
	of.runsOnce.Do(func() { of.runs, of.runsErr = rowGroupRuns(of.pf) })
	return of.runs, of.runsErr
}
