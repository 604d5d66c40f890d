package remotewrite

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/metadata"

	"github.com/strata-dev/strata/internal/atomicfile"
)

// DefaultMaxMetadataFamilies bounds a MetadataStore opened by
// OpenMetadataStore. An inference fleet exposes a few thousand metric
// families; 100k leaves room for label-rich exporters while keeping the store
// under ~20 MiB even with long help texts.
const DefaultMaxMetadataFamilies = 100_000

// metadataFileVersion is the "version" field of the JSON file (see
// docs/format/remote-write-metadata.md).
const metadataFileVersion = 1

// maxMetadataLogBytes is how large the change log may grow before Sync folds
// it into the snapshot.
const maxMetadataLogBytes = 16 << 20

// MetadataStore keeps the latest type, unit and help per metric family name,
// fed by RW 1.0 WriteRequest.metadata and RW 2.0 per-series metadata, and
// served by /api/v1/metadata. It is bounded: once it holds its maximum number
// of families, metadata for new families is dropped (existing ones are still
// updated). It is safe for concurrent use. Strings handed to it are copied
// only when they change, so the steady state (same metadata every request)
// does not allocate.
//
// A store with a path is durable in two files (docs/format/remote-write-metadata.md):
// a snapshot that Save replaces, and a change log that Sync appends the
// changes since the last Sync to. The remote-write handler calls Sync before
// it acknowledges a request, so that acknowledged metadata survives a kill -9
// as the samples in the TSDB's WAL do (written, not fsynced).
type MetadataStore struct {
	path string
	max  int

	mu       sync.RWMutex
	families map[string]metadata.Metadata
	bytes    int64    // the families' name, unit and help bytes
	dirty    bool     // changed since the last snapshot
	pending  []string // families changed since the last Sync (path != "" only)
	queued   map[string]struct{}
	dropped  uint64

	// recovered says what OpenMetadataStore set aside (Recovered).
	recovered []error

	logMu   sync.Mutex // serializes Sync and Save; guards log and logSize
	log     *os.File   // the change log, opened by the first Sync
	logSize int64
	logBuf  []byte
}

// NewMetadataStore returns an empty in-memory store holding at most
// maxFamilies families (<= 0 means DefaultMaxMetadataFamilies). Save is a
// no-op for it.
func NewMetadataStore(maxFamilies int) *MetadataStore {
	if maxFamilies <= 0 {
		maxFamilies = DefaultMaxMetadataFamilies
	}
	return &MetadataStore{max: maxFamilies, families: make(map[string]metadata.Metadata), queued: map[string]struct{}{}}
}

// metadataFile is the on-disk form.
type metadataFile struct {
	Version  int                      `json:"version"`
	Families map[string]metadataEntry `json:"families"`
}

type metadataEntry struct {
	Type string `json:"type"`
	Unit string `json:"unit,omitempty"`
	Help string `json:"help,omitempty"`
}

// metadataLogRecord is one line of the change log.
type metadataLogRecord struct {
	Family string `json:"family"`
	metadataEntry
}

// logPath is the change log beside the snapshot.
func (s *MetadataStore) logPath() string { return s.path + ".log" }

// OpenMetadataStore loads the store saved at path, or starts an empty one if
// the file does not exist. Save writes it back to path. An empty path gives an
// in-memory store.
//
// A snapshot that does not parse, or a change log with a bad record before
// its last, is renamed to <name>.corrupt and left out (what the log held
// before its bad record is kept), rather than keeping the server from
// starting: metadata is help text and types that senders send again
// (Prometheus every minute). Recovered says what was set aside. An I/O
// error, or a snapshot of another version (a newer Strata's), still fails.
func OpenMetadataStore(path string) (*MetadataStore, error) {
	return openMetadataStore(path, true)
}

// ReadMetadataStore is OpenMetadataStore for a reader beside the server
// that writes the store (strata export): it never moves a file, and a
// corrupt one is an error.
func ReadMetadataStore(path string) (*MetadataStore, error) {
	return openMetadataStore(path, false)
}

func openMetadataStore(path string, setAsideCorrupt bool) (*MetadataStore, error) {
	s := NewMetadataStore(DefaultMaxMetadataFamilies)
	if path == "" {
		return s, nil
	}
	s.path = path
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read metadata store: %w", err)
	default:
		var f metadataFile
		if err := json.Unmarshal(data, &f); err != nil {
			if !setAsideCorrupt {
				return nil, fmt.Errorf("parse metadata store %s: %w", path, err)
			}
			if aerr := setAside(path); aerr != nil {
				return nil, fmt.Errorf("parse metadata store %s: %w (setting it aside failed: %w)", path, err, aerr)
			}
			s.recovered = append(s.recovered, fmt.Errorf("metadata store %s did not parse (%w): moved to %s.corrupt; senders send their metadata again", path, err, path))
			break
		}
		if f.Version != metadataFileVersion {
			return nil, fmt.Errorf("metadata store %s: unsupported version %d", path, f.Version)
		}
		for name, e := range f.Families {
			s.put(name, metadata.Metadata{Type: model.MetricType(e.Type), Unit: e.Unit, Help: e.Help})
		}
	}
	replayed, err := s.replayLog()
	if bad := (*badLogRecordError)(nil); errors.As(err, &bad) && setAsideCorrupt {
		if aerr := setAside(s.logPath()); aerr != nil {
			return nil, fmt.Errorf("%w (setting it aside failed: %w)", err, aerr)
		}
		s.recovered = append(s.recovered, fmt.Errorf("%w: moved to %s.corrupt, the %d records before it kept", err, s.logPath(), replayed))
	} else if err != nil {
		return nil, err
	}
	// What the log added is not in the snapshot yet: the next Save writes it.
	// After a recovery too: the snapshot then holds what was kept.
	s.dirty = replayed > 0 || len(s.recovered) > 0
	return s, nil
}

// Recovered returns what OpenMetadataStore found corrupt and set aside, for
// the log; nil when nothing was.
func (s *MetadataStore) Recovered() error { return errors.Join(s.recovered...) }

// badLogRecordError is a change log's record that does not parse, before
// its last line.
type badLogRecordError struct{ err error }

func (e *badLogRecordError) Error() string { return e.err.Error() }
func (e *badLogRecordError) Unwrap() error { return e.err }

// setAside renames the file at path to path.corrupt (replacing an older one).
func setAside(path string) error {
	return os.Rename(path, path+".corrupt")
}

// replayLog applies the change log's records in order. A torn last line (a
// crash in the middle of a write) ends the replay; a bad line before the
// end is an error.
func (s *MetadataStore) replayLog() (int, error) {
	f, err := os.Open(s.logPath())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read metadata log: %w", err)
	}
	defer f.Close() //nolint:errcheck // read only
	r := bufio.NewReader(f)
	n := 0
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return n, nil // a line without its newline was not written whole
		}
		if err != nil {
			return n, fmt.Errorf("read metadata log: %w", err)
		}
		var rec metadataLogRecord
		if err := json.Unmarshal(line, &rec); err != nil || rec.Family == "" {
			return n, &badLogRecordError{fmt.Errorf("parse metadata log %s, record %d: %w", s.logPath(), n+1, errors.Join(err, errors.New("bad record")))}
		}
		s.put(rec.Family, metadata.Metadata{Type: model.MetricType(rec.Type), Unit: rec.Unit, Help: rec.Help})
		n++
	}
}

// put stores m for family without the checks of Set, within the bound.
// Called with mu held or before the store is shared.
func (s *MetadataStore) put(family string, m metadata.Metadata) bool {
	cur, ok := s.families[family]
	if !ok && len(s.families) >= s.max {
		s.dropped++
		return false
	}
	if ok {
		s.bytes -= entryBytes(family, cur)
	}
	s.families[family] = m
	s.bytes += entryBytes(family, m)
	return true
}

// entryBytes is what one family costs in the store: its strings and the
// map entry (two string headers and the metadata struct, roughly).
func entryBytes(family string, m metadata.Metadata) int64 {
	return int64(len(family)+len(m.Type)+len(m.Unit)+len(m.Help)) + 96
}

// Set records m as the latest metadata of family and returns the stored copy
// (whose strings outlive the request) and whether it was stored. family and
// m's strings may be views into a request buffer: they are copied when new.
// Empty metadata (unknown type, no unit, no help) is ignored.
func (s *MetadataStore) Set(family string, m Metadata) (metadata.Metadata, bool) {
	if family == "" || m.IsEmpty() {
		return metadata.Metadata{}, false
	}
	if m.Type == "" {
		m.Type = model.MetricTypeUnknown
	}
	s.mu.RLock()
	cur, ok := s.families[family]
	s.mu.RUnlock()
	if ok && cur.Type == m.Type && cur.Unit == m.Unit && cur.Help == m.Help {
		return cur, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok = s.families[family]
	if ok && cur.Type == m.Type && cur.Unit == m.Unit && cur.Help == m.Help {
		return cur, true // set by a concurrent request meanwhile
	}
	// Reuse unchanged strings so only what changed is copied.
	next := metadata.Metadata{Type: m.Type, Unit: cur.Unit, Help: cur.Help}
	if next.Unit != m.Unit {
		next.Unit = strings.Clone(m.Unit)
	}
	if next.Help != m.Help {
		next.Help = strings.Clone(m.Help)
	}
	if !ok {
		family = strings.Clone(family)
	}
	if !s.put(family, next) {
		return metadata.Metadata{}, false
	}
	s.dirty = true
	if s.path != "" {
		if _, queued := s.queued[family]; !queued {
			s.queued[family] = struct{}{}
			s.pending = append(s.pending, family)
		}
	}
	return next, true
}

// Sync appends the families changed since the last Sync to the change log
// (written, not fsynced: it survives the process being killed, like the
// TSDB's WAL). Concurrent callers share one write: when Sync returns, every
// change made before it was called is in the log. It is a no-op when
// nothing changed, and for a store without a path. When the log has grown
// past 16 MiB, Sync folds it into the snapshot (Save).
func (s *MetadataStore) Sync() error {
	if s.path == "" {
		return nil
	}
	s.mu.RLock()
	n := len(s.pending)
	s.mu.RUnlock()
	if n == 0 {
		return nil
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if err := s.syncLocked(); err != nil {
		return err
	}
	if s.logSize > maxMetadataLogBytes {
		return s.saveLocked()
	}
	return nil
}

// syncLocked writes the pending changes to the log. Called with logMu held.
func (s *MetadataStore) syncLocked() error {
	s.mu.Lock()
	buf, pending, err := s.takePending()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.writeLog(buf, pending)
}

// takePending encodes the pending changes as log records and clears them.
// Called with mu held.
func (s *MetadataStore) takePending() (buf []byte, pending []string, err error) {
	buf = s.logBuf[:0]
	for _, family := range s.pending {
		m, ok := s.families[family]
		if !ok {
			continue
		}
		b, err := json.Marshal(metadataLogRecord{Family: family, metadataEntry: metadataEntry{Type: string(m.Type), Unit: m.Unit, Help: m.Help}})
		if err != nil {
			return nil, nil, fmt.Errorf("encode metadata log record: %w", err)
		}
		buf = append(append(buf, b...), '\n')
	}
	pending = slices.Clone(s.pending)
	s.pending = s.pending[:0]
	clear(s.queued)
	return buf, pending, nil
}

// writeLog appends encoded records (of the families pending) to the log,
// opening it first. On error the families are pending again. Called with
// logMu held.
func (s *MetadataStore) writeLog(buf []byte, pending []string) error {
	if len(buf) == 0 {
		return nil
	}
	s.logBuf = buf
	if s.log == nil {
		f, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			s.requeue(pending)
			return fmt.Errorf("open metadata log: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			s.requeue(pending)
			return errors.Join(fmt.Errorf("open metadata log: %w", err), f.Close())
		}
		s.log, s.logSize = f, st.Size()
	}
	if _, err := s.log.Write(buf); err != nil {
		// A partial line is skipped by the replay only at the end: end it,
		// so that the next records start on a line of their own.
		s.requeue(pending)
		return errors.Join(fmt.Errorf("write metadata log: %w", err), s.closeLogLocked(true))
	}
	s.logSize += int64(len(buf))
	return nil
}

// requeue puts families back in pending after a failed log write.
func (s *MetadataStore) requeue(families []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range families {
		if _, ok := s.queued[f]; !ok {
			s.queued[f] = struct{}{}
			s.pending = append(s.pending, f)
		}
	}
}

// closeLogLocked closes the log; with torn set it first ends a possibly
// torn line, so that later records start on a line of their own.
func (s *MetadataStore) closeLogLocked(torn bool) error {
	if s.log == nil {
		return nil
	}
	var err error
	if torn {
		_, err = s.log.Write([]byte{'\n'})
	}
	err = errors.Join(err, s.log.Close())
	s.log = nil
	return err
}

// Metadata returns the metadata of metric, or of every family when metric is
// "", in the shape of Prometheus' /api/v1/metadata (one entry per family: the
// latest one). The returned map is the caller's.
func (s *MetadataStore) Metadata(metric string) map[string][]metadata.Metadata {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if metric != "" {
		m, ok := s.families[metric]
		if !ok {
			return map[string][]metadata.Metadata{}
		}
		return map[string][]metadata.Metadata{metric: {m}}
	}
	out := make(map[string][]metadata.Metadata, len(s.families))
	for name, m := range s.families {
		out[name] = []metadata.Metadata{m}
	}
	return out
}

// Len returns the number of families held.
func (s *MetadataStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.families)
}

// Dropped returns how many updates for new families were dropped because the
// store was full.
func (s *MetadataStore) Dropped() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dropped
}

// Save writes the store to its path if it changed since the last Save: to a
// temporary file that is fsynced and then renamed over the old one, so a crash
// leaves either the old or the new file, never half of one. The change log is
// then emptied: the snapshot holds everything it did.
func (s *MetadataStore) Save() error {
	if s.path == "" {
		return nil
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.saveLocked()
}

// Close saves the store and closes its change log.
func (s *MetadataStore) Close() error {
	if s.path == "" {
		return nil
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return errors.Join(s.saveLocked(), s.closeLogLocked(false))
}

// saveLocked is Save with logMu held: no Sync runs meanwhile. The changes
// not logged yet are logged first, from the same state as the snapshot: a
// crash after the snapshot is in place but before the log is removed then
// replays, for every family, the value the snapshot holds last.
func (s *MetadataStore) saveLocked() (err error) {
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	f := metadataFile{Version: metadataFileVersion, Families: make(map[string]metadataEntry, len(s.families))}
	for name, m := range s.families {
		f.Families[name] = metadataEntry{Type: string(m.Type), Unit: m.Unit, Help: m.Help}
	}
	s.dirty = false // a concurrent Set after this point marks it dirty again
	buf, pending, err := s.takePending()
	s.mu.Unlock()
	defer func() {
		if err != nil {
			s.mu.Lock()
			s.dirty = true
			s.mu.Unlock()
		}
	}()
	if err != nil {
		return err
	}
	if err := s.writeLog(buf, pending); err != nil {
		return err
	}

	data, err := json.Marshal(f) // map keys are sorted: the file is deterministic
	if err != nil {
		return fmt.Errorf("encode metadata store: %w", err)
	}
	if err := atomicfile.WriteFile(s.path, data); err != nil {
		return fmt.Errorf("save metadata store: %w", err)
	}
	if err := s.closeLogLocked(false); err != nil {
		return fmt.Errorf("close metadata log: %w", err)
	}
	if err := os.Remove(s.logPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove metadata log: %w", err)
	}
	s.logSize = 0
	return nil
}

// RegisterMetrics exposes the store's size and its drops on reg.
func (s *MetadataStore) RegisterMetrics(reg prometheus.Registerer) {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_remotewrite_metadata_families",
		Help: "Metric families the remote-write metadata store holds (at most 100,000).",
	}, func() float64 { return float64(s.Len()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_remotewrite_metadata_bytes",
		Help: "Estimated memory of the remote-write metadata store: its strings and map entries.",
	}, func() float64 { return float64(s.Bytes()) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "strata_remotewrite_metadata_dropped_total",
		Help: "Metadata updates for new metric families dropped because the store was full.",
	}, func() float64 { return float64(s.Dropped()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_remotewrite_metadata_log_bytes",
		Help: "Size of the metadata change log not yet folded into the snapshot.",
	}, func() float64 {
		s.logMu.Lock()
		defer s.logMu.Unlock()
		return float64(s.logSize)
	})
}

// Bytes estimates the store's memory: its strings and map entries.
func (s *MetadataStore) Bytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.bytes
}

// familyNames returns the sorted family names, for tests and debugging.
func (s *MetadataStore) familyNames() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.families))
	for n := range s.families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
