// Package atomicfile writes files so that a reader, or a restart after a
// crash, sees either the old content or the new, never half of it: the data
// goes to a temporary file in the same directory, which is fsynced, renamed
// over the target, and the directory fsynced. A failed write removes its
// temporary file. Small files are written whole (Write, WriteFile); large
// ones, such as the tiers' Parquet partitions, are streamed (Create).
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File is a file being written atomically, returned by Create. Writes go to
// its temporary file; Commit puts them in place, Abort throws them away.
// The caller MUST call Commit or Abort (Abort after Commit does nothing, so
// a deferred Abort is the usual cleanup). A File is not safe for concurrent
// use.
type File struct {
	path   string
	f      *os.File
	size   int64
	closed bool // f is closed
	done   bool // the temporary file is gone: renamed by Commit or removed
}

// Create starts replacing path, whose directory must exist. The temporary
// file is created in that directory, named after pattern as
// os.CreateTemp names it; an empty pattern means "."+base(path)+".tmp*".
// A caller that removes leftover temporary files after a crash chooses a
// pattern it recognises.
func Create(path, pattern string) (*File, error) {
	if pattern == "" {
		pattern = "." + filepath.Base(path) + ".tmp*"
	}
	f, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return nil, fmt.Errorf("create temporary file for %s: %w", path, err)
	}
	return &File{path: path, f: f}, nil
}

// Write writes to the temporary file.
func (f *File) Write(p []byte) (int, error) {
	n, err := f.f.Write(p)
	f.size += int64(n)
	return n, err
}

// Size returns the bytes written so far: after Commit, the file's size.
func (f *File) Size() int64 { return f.size }

// Stat describes the file being written, which after Commit is the file at
// path (a rename keeps the file; os.SameFile tells it from a later
// replacement). It must be called before Commit or Abort.
func (f *File) Stat() (os.FileInfo, error) { return f.f.Stat() }

// OpenRead opens the file being written for reading. The descriptor reads
// the same file after Commit renames it (and after the name is removed),
// so a caller that must read what it wrote, while others may replace or
// remove path, opens it before Commit. It must be called before Commit or
// Abort; the caller closes the descriptor.
func (f *File) OpenRead() (*os.File, error) {
	if f.done {
		return nil, fmt.Errorf("open %s: %w", f.path, os.ErrClosed)
	}
	return os.Open(f.f.Name())
}

// Commit fsyncs and closes the temporary file, renames it over path and
// fsyncs the directory. On an error up to the rename, the temporary file is
// removed and path is left as it was. An error fsyncing the directory comes
// after the rename: path then holds the new content but its durability is
// in doubt, and the caller should write it again.
func (f *File) Commit() error {
	if f.done {
		return fmt.Errorf("commit %s: %w", f.path, os.ErrClosed)
	}
	if err := f.f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("sync %s: %w", f.path, err), f.Abort())
	}
	f.closed = true
	if err := f.f.Close(); err != nil {
		return errors.Join(fmt.Errorf("close %s: %w", f.path, err), f.Abort())
	}
	if err := os.Rename(f.f.Name(), f.path); err != nil {
		return errors.Join(fmt.Errorf("rename into %s: %w", f.path, err), f.Abort())
	}
	f.done = true
	if err := SyncDir(filepath.Dir(f.path)); err != nil {
		return fmt.Errorf("after replacing %s: %w", f.path, err)
	}
	return nil
}

// Abort closes and removes the temporary file, leaving path as it was. It
// does nothing after Commit or a previous Abort.
func (f *File) Abort() error {
	if f.done {
		return nil
	}
	f.done = true
	var err error
	if !f.closed {
		f.closed = true
		err = f.f.Close()
	}
	return errors.Join(err, os.Remove(f.f.Name()))
}

// SyncDir fsyncs directory dir, so that the names created, renamed or
// removed in it survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // a directory the caller writes in
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	if err := errors.Join(d.Sync(), d.Close()); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// Write creates or replaces path with what write writes. The directory must exist.
func Write(path string, write func(io.Writer) error) (err error) {
	f, err := Create(path, "")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Abort())
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Commit()
}

// WriteFile is Write for data already in memory.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(data))
		return err
	})
}
