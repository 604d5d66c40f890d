package remotewrite

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/metadata"
)

func gaugeMeta(help string) Metadata {
	return Metadata{Type: model.MetricTypeGauge, Help: help}
}

func wantHelp(t *testing.T, s *MetadataStore, family, help string) {
	t.Helper()
	got := s.Metadata(family)[family]
	if len(got) != 1 || got[0] != (metadata.Metadata{Type: model.MetricTypeGauge, Help: help}) {
		t.Fatalf("%s: %+v, want gauge %q", family, got, help)
	}
}

// TestMetadataStoreSyncSurvivesKill: what Sync logged is there after a
// reopen without Save or Close (the process was killed), and an unsynced
// change is not.
func TestMetadataStoreSyncSurvivesKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metadata.json")
	s, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".log"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Sync without changes created the log: %v", err)
	}
	s.Set("a", gaugeMeta("one"))
	s.Set("b", gaugeMeta("b"))
	s.Set("a", gaugeMeta("two"))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.Set("a", gaugeMeta("three")) // never synced: lost with the process
	s.Set("c", gaugeMeta("c"))

	s2, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	wantHelp(t, s2, "a", "two")
	wantHelp(t, s2, "b", "b")
	if got := s2.Metadata("c"); len(got) != 0 {
		t.Fatalf("unsynced family c came back: %+v", got)
	}
	// The reopened store writes what the log replayed into its snapshot.
	if err := s2.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".log"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Save left the log: %v", err)
	}
	s3, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	wantHelp(t, s3, "a", "two")
	wantHelp(t, s3, "b", "b")
}

// TestMetadataStoreTornLog: a crash in the middle of a log write leaves a
// line without its newline; the records before it are replayed, and the
// next records start on a line of their own.
func TestMetadataStoreTornLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metadata.json")
	s, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Set("a", gaugeMeta("one"))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path+".log", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"family":"torn","type":"gau`); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatalf("a torn last record must not stop the server: %v", err)
	}
	wantHelp(t, s2, "a", "one")
	if got := s2.Metadata("torn"); len(got) != 0 {
		t.Fatalf("torn record replayed: %+v", got)
	}
	if s2.Len() != 1 {
		t.Fatalf("%d families, want 1", s2.Len())
	}
	// A corrupt record before the end is an error, not silently skipped.
	if err := os.WriteFile(path+".log", []byte("not json\n{\"family\":\"a\",\"type\":\"gauge\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMetadataStore(path); err == nil {
		t.Fatal("a corrupt record in the middle of the log was accepted")
	}
}

// TestMetadataStoreSaveFoldsLog: a Save after Syncs leaves only the
// snapshot; later changes go to a fresh log, replayed over the snapshot.
func TestMetadataStoreSaveFoldsLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metadata.json")
	s, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Set("a", gaugeMeta("one"))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s.Set("b", gaugeMeta("b")) // pending at Save: the snapshot holds it
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".log"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Save left the log: %v", err)
	}
	if err := s.Sync(); err != nil { // nothing pending after the Save
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".log"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Sync after Save wrote the log again: %v", err)
	}
	s.Set("a", gaugeMeta("two"))
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatal(err)
	}
	wantHelp(t, s2, "a", "two")
	wantHelp(t, s2, "b", "b")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".log"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Close left the log: %v", err)
	}
}

// TestMetadataStoreBytesAndDrops: past its maximum the store drops new families,
// counts them, and its byte estimate follows what it holds.
func TestMetadataStoreBytesAndDrops(t *testing.T) {
	s := NewMetadataStore(2)
	s.Set("a", gaugeMeta("aa"))
	s.Set("b", gaugeMeta("bb"))
	b0 := s.Bytes()
	if _, ok := s.Set("c", gaugeMeta("cc")); ok {
		t.Fatal("a third family was stored in a store of two")
	}
	if s.Len() != 2 || s.Dropped() != 1 || s.Bytes() != b0 {
		t.Fatalf("len %d, dropped %d, bytes %d (was %d)", s.Len(), s.Dropped(), s.Bytes(), b0)
	}
	s.Set("a", gaugeMeta("a longer help text"))
	if got, want := s.Bytes()-b0, int64(len("a longer help text")-len("aa")); got != want {
		t.Fatalf("bytes grew by %d, want %d", got, want)
	}
}
