package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesWholeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new content")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "new content" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(entries))
	}
}

func TestFailedWriteLeavesOldFileAndNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		_, _ = w.Write([]byte("half"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the writer's error", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("a failed write changed the file to %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("a failed write left %d entries, want only the old file", len(entries))
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	if err := WriteFile(filepath.Join(t.TempDir(), "no", "such", "file"), nil); err == nil {
		t.Fatal("no error for a missing directory")
	}
}

func TestCreateStreamsAndCommits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p-1.parquet")
	if err := WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path, ".tmp-*.parquet")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Abort() }()
	for _, chunk := range []string{"new ", "content ", "in parts"} {
		if _, err := io.WriteString(f, chunk); err != nil {
			t.Fatal(err)
		}
	}
	// Until Commit, readers see the old content; the data is in a
	// temporary file named after the pattern.
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("before Commit the file holds %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 || !strings.HasPrefix(entries[0].Name(), ".tmp-") || !strings.HasSuffix(entries[0].Name(), ".parquet") {
		t.Fatalf("while writing, the directory holds %v, want the file and one .tmp-*.parquet", names(entries))
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new content in parts" || f.Size() != int64(len(b)) {
		t.Fatalf("after Commit the file holds %q, Size %d", b, f.Size())
	}
	if err := f.Abort(); err != nil {
		t.Fatalf("Abort after Commit: %v", err)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("a second Commit succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "new content in parts" {
		t.Fatalf("Abort after Commit changed the file to %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("after Commit the directory holds %v, want only the file", names(entries))
	}
}

func TestAbortLeavesOldFileAndNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("an aborted write changed the file to %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("an aborted write left %v", names(entries))
	}
}

// TestFailedCommitRemovesTemp: a rename that fails (the target is a
// directory) leaves the target as it was and no temporary file.
func TestFailedCommitRemovesTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := os.Mkdir(path, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "inside"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Create(path, ".tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err == nil {
		t.Fatal("renaming over a directory succeeded")
	}
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		t.Fatalf("the target changed: %v, %v", st, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("a failed Commit left %v", names(entries))
	}
}

func names(entries []os.DirEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Name()
	}
	return out
}

// TestStatIsTheCommittedFile: Stat before Commit describes the file then
// at path, and not the one a later write puts there.
func TestStatIsTheCommittedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.parquet")
	write := func(data string) os.FileInfo {
		t.Helper()
		f, err := Create(path, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Commit(); err != nil {
			t.Fatal(err)
		}
		return st
	}
	first := write("first")
	now, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(first, now) {
		t.Fatal("Stat before Commit is not the file at path")
	}
	write("second")
	if now, err = os.Stat(path); err != nil || os.SameFile(first, now) {
		t.Fatalf("the replaced file is the same file (err %v)", err)
	}
}

// TestOpenReadOutlivesThePath: a descriptor OpenRead returned before Commit
// reads what was written after the rename, and after the path is removed
// (the bucket cache's eviction, racing a fetch).
func TestOpenReadOutlivesThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.parquet")
	f, err := Create(path, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("written")); err != nil {
		t.Fatal(err)
	}
	rd, err := f.OpenRead()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(rd); err != nil || string(b) != "written" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := f.OpenRead(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("OpenRead after Commit: %v, want os.ErrClosed", err)
	}
}
