package remotewrite

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	// A corrupt record before the end is not silently skipped: the log is
	// set aside, what came before it kept, and said so.
	if err := os.WriteFile(path+".log", []byte("{\"family\":\"b\",\"type\":\"gauge\",\"help\":\"two\"}\nnot json\n{\"family\":\"c\",\"type\":\"gauge\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s3, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatalf("a corrupt record in the middle of the log stopped the server: %v", err)
	}
	if err := s3.Recovered(); err == nil || !strings.Contains(err.Error(), "record 2") {
		t.Fatalf("Recovered() = %v, want the bad record named", err)
	}
	wantHelp(t, s3, "b", "two")
	if s3.Len() != 1 {
		t.Fatalf("%d families after the bad record, want the 1 before it", s3.Len())
	}
	if _, err := os.Stat(path + ".log.corrupt"); err != nil {
		t.Fatalf("the corrupt log was not set aside: %v", err)
	}
	// What was kept reaches the snapshot; a snapshot that does not parse is
	// set aside in the same way, the log after it replayed.
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	wantHelp(t, reopen(t, path), "b", "two")
	if err := os.WriteFile(path, []byte(`{"version":1,"families":{"b":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".log", []byte("{\"family\":\"d\",\"type\":\"gauge\",\"help\":\"three\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s4, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatalf("a snapshot that does not parse stopped the server: %v", err)
	}
	if s4.Recovered() == nil || s4.Len() != 1 {
		t.Fatalf("after a corrupt snapshot: Recovered() = %v, %d families, want the log's 1", s4.Recovered(), s4.Len())
	}
	wantHelp(t, s4, "d", "three")
	if _, err := os.Stat(path + ".corrupt"); err != nil {
		t.Fatalf("the corrupt snapshot was not set aside: %v", err)
	}
	// A reader beside the server never moves a corrupt file.
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMetadataStore(path); err == nil {
		t.Fatal("ReadMetadataStore opened a corrupt snapshot")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "{" {
		t.Fatalf("ReadMetadataStore moved the snapshot: %q, %v", b, err)
	}
	// A snapshot of another version (a newer Strata's) still fails.
	if err := os.WriteFile(path, []byte(`{"version":99,"families":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMetadataStore(path); err == nil {
		t.Fatal("a snapshot of another version was accepted")
	}
}

// reopen opens the store at path, failing the test on an error or a
// recovery.
func reopen(t *testing.T, path string) *MetadataStore {
	t.Helper()
	s, err := OpenMetadataStore(path)
	if err != nil {
		t.Fatalf("reopen %s: %v", path, err)
	}
	if err := s.Recovered(); err != nil {
		t.Fatalf("reopen %s recovered: %v", path, err)
	}
	return s
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
