package remotewrite

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"

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

// MetadataStore keeps the latest type, unit and help per metric family name,
// fed by RW 1.0 WriteRequest.metadata and RW 2.0 per-series metadata, and
// served by /api/v1/metadata. It is bounded: once it holds its maximum number
// of families, metadata for new families is dropped (existing ones are still
// updated). It is safe for concurrent use. Strings handed to it are copied
// only when they change, so the steady state (same metadata every request)
// does not allocate.
type MetadataStore struct {
	path string
	max  int

	mu       sync.RWMutex
	families map[string]metadata.Metadata
	dirty    bool
	dropped  uint64
}

// NewMetadataStore returns an empty in-memory store holding at most
// maxFamilies families (<= 0 means DefaultMaxMetadataFamilies). Save is a
// no-op for it.
func NewMetadataStore(maxFamilies int) *MetadataStore {
	if maxFamilies <= 0 {
		maxFamilies = DefaultMaxMetadataFamilies
	}
	return &MetadataStore{max: maxFamilies, families: make(map[string]metadata.Metadata)}
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

// OpenMetadataStore loads the store saved at path, or starts an empty one if
// the file does not exist. Save writes it back to path. An empty path gives an
// in-memory store.
func OpenMetadataStore(path string) (*MetadataStore, error) {
	s := NewMetadataStore(DefaultMaxMetadataFamilies)
	if path == "" {
		return s, nil
	}
	s.path = path
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read metadata store: %w", err)
	}
	var f metadataFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse metadata store %s: %w", path, err)
	}
	if f.Version != metadataFileVersion {
		return nil, fmt.Errorf("metadata store %s: unsupported version %d", path, f.Version)
	}
	for name, e := range f.Families {
		if len(s.families) >= s.max {
			break
		}
		s.families[name] = metadata.Metadata{Type: model.MetricType(e.Type), Unit: e.Unit, Help: e.Help}
	}
	return s, nil
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
	if !ok && len(s.families) >= s.max {
		s.dropped++
		return metadata.Metadata{}, false
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
	s.families[family] = next
	s.dirty = true
	return next, true
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
// leaves either the old or the new file, never half of one.
func (s *MetadataStore) Save() (err error) {
	if s.path == "" {
		return nil
	}
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
	s.mu.Unlock()
	defer func() {
		if err != nil {
			s.mu.Lock()
			s.dirty = true
			s.mu.Unlock()
		}
	}()

	data, err := json.Marshal(f) // map keys are sorted: the file is deterministic
	if err != nil {
		return fmt.Errorf("encode metadata store: %w", err)
	}
	if err := atomicfile.WriteFile(s.path, data); err != nil {
		return fmt.Errorf("save metadata store: %w", err)
	}
	return nil
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
