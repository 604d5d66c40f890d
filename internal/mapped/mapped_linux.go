//go:build linux

package mapped

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Supported reports whether Release does anything on this platform.
const Supported = true

// ReleaseBehind drops the process's mappings of b's pages from done up to
// off (both rounded down to a page) and returns the new done, for a reader
// that goes through a file mapping once (backfill's spool). b is a
// read-only shared file mapping that starts on a page: MADV_DONTNEED only
// removes page-table entries there, the data stays in the page cache.
func ReleaseBehind(b []byte, done, off int) int {
	page := os.Getpagesize()
	off -= off % page
	if off <= done {
		return done
	}
	if unix.Madvise(b[done:off], unix.MADV_DONTNEED) != nil {
		return done // kept mapped: only the resident set is larger
	}
	return off
}

// Release drops the mappings of every shared, read-only file mapping of a
// file under one of dirs (matched by path in /proc/self/maps, read once)
// and returns how many bytes of address space it advised and how many
// mappings.
func Release(dirs ...string) (bytesAdvised int64, mappings int, err error) {
	return advise(unix.MADV_DONTNEED, dirs)
}

// advise gives advice to every shared, read-only file mapping of a file
// under one of dirs, and returns the bytes of address space advised and how
// many mappings. A range unmapped since /proc/self/maps was read is skipped.
func advise(advice uintptr, dirs []string) (bytesAdvised int64, mappings int, err error) {
	if len(dirs) == 0 {
		return 0, 0, nil
	}
	regions, err := regionsUnder("/proc/self/maps", dirs...)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range regions {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, advice); e != 0 {
			// ENOMEM: the range was unmapped since /proc/self/maps was read.
			if e == unix.ENOMEM {
				continue
			}
			return bytesAdvised, mappings, fmt.Errorf("madvise %#x-%#x: %w", r.start, r.end, e)
		}
		bytesAdvised += int64(r.end - r.start) //nolint:gosec // address ranges fit
		mappings++
	}
	return bytesAdvised, mappings, nil
}

// PageOut asks the kernel to reclaim the pages of every shared, read-only
// file mapping of a file under one of dirs (MADV_PAGEOUT, Linux 5.4): they
// leave the resident set and, mapped by no other process, the page cache,
// so the next read of them goes to the disk. Unlike Release it is safe
// while the mappings may be unmapped: a range unmapped and reused in
// between (anonymous memory, another file) only has its pages paged out,
// never its contents lost. It returns the bytes of address space advised;
// on a kernel without MADV_PAGEOUT it advises nothing.
func PageOut(dirs ...string) (bytesAdvised int64, err error) {
	n, _, err := advise(unix.MADV_PAGEOUT, dirs)
	if errors.Is(err, unix.EINVAL) { // a kernel before 5.4
		return n, nil
	}
	return n, err
}

type region struct{ start, end uintptr }

// regionsUnder reads a maps file (proc(5)) and returns the shared,
// read-only file mappings of files under one of dirs.
func regionsUnder(mapsPath string, dirs ...string) ([]region, error) {
	prefixes := make([][]byte, len(dirs))
	for i, dir := range dirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		prefixes[i] = []byte(filepath.Clean(abs) + string(filepath.Separator))
	}
	f, err := os.Open(mapsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read only
	var out []region
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		r, path, ok := parseMapping(sc.Bytes())
		if !ok {
			continue
		}
		for _, prefix := range prefixes {
			if bytes.HasPrefix(path, prefix) {
				out = append(out, r)
				break
			}
		}
	}
	return out, sc.Err()
}

// parseLine parses "start-end perms offset dev inode path" and keeps the
// line when perms is "r--s" (read only, shared) and path is under prefix.
func parseLine(line, prefix []byte) (region, bool) {
	r, path, ok := parseMapping(line)
	return r, ok && bytes.HasPrefix(path, prefix)
}

// parseMapping parses "start-end perms offset dev inode path" and returns
// the range and the path when perms is "r--s" (read only, shared).
func parseMapping(line []byte) (region, []byte, bool) {
	fields := bytes.Fields(line)
	if len(fields) < 6 || string(fields[1]) != "r--s" {
		return region{}, nil, false
	}
	path := bytes.Join(fields[5:], []byte(" "))
	lo, hi, ok := bytes.Cut(fields[0], []byte("-"))
	if !ok {
		return region{}, nil, false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return region{}, nil, false
	}
	return region{start: uintptr(start), end: uintptr(end)}, path, true
}

// SharedResident returns the process's resident file-backed and shared
// memory in bytes (RssFile plus RssShmem: the "shared" field of
// /proc/self/statm), which pages read through file mappings raise. It is
// a read of one short file, cheap enough to poll every 100 ms.
func SharedResident() (int64, error) {
	var buf [128]byte
	f, err := os.Open("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	n, err := f.Read(buf[:])
	_ = f.Close()
	if err != nil {
		return 0, fmt.Errorf("read /proc/self/statm: %w", err)
	}
	// size resident shared text lib data dt, in pages
	fields := bytes.Fields(buf[:n])
	if len(fields) < 3 {
		return 0, fmt.Errorf("/proc/self/statm: %q: want at least 3 fields", buf[:n])
	}
	pages, err := strconv.ParseInt(string(fields[2]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/self/statm: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}
