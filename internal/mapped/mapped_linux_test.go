//go:build linux

package mapped

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mapFile writes size bytes of a pattern to a file under dir and maps it
// shared and read-only, as the TSDB maps its head chunk files.
func mapFile(t *testing.T, dir string, size int) ([]byte, []byte) {
	t.Helper()
	want := bytes.Repeat([]byte("strata chunk bytes "), size/19+1)[:size]
	p := filepath.Join(dir, "000001")
	if err := os.WriteFile(p, want, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b, want
}

// residentKiB returns the Rss of the mapping that starts at addr
// (/proc/self/smaps).
func residentKiB(t *testing.T, b []byte) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := strconv.FormatUint(uint64(uintptr(unsafePointer(b))), 16)
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			lo, _, _ := strings.Cut(fields[0], "-")
			in = strings.TrimLeft(lo, "0") == strings.TrimLeft(start, "0")
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			n, err := strconv.Atoi(strings.Fields(line)[1])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("mapping not found in /proc/self/smaps")
	return 0
}

func touch(b []byte) (sum int) {
	for i := 0; i < len(b); i += 4096 {
		sum += int(b[i])
	}
	return sum
}

// TestReleaseDropsMappingsKeepsData: after Release, the pages of a mapped
// file under the directory no longer count in the resident set, the
// mapping still reads the same bytes, and a mapping elsewhere keeps its
// pages.
func TestReleaseDropsMappingsKeepsData(t *testing.T) {
	const size = 8 << 20
	dir, other := t.TempDir(), t.TempDir()
	b, want := mapFile(t, dir, size)
	o, _ := mapFile(t, other, size)
	if touch(b) == 0 || touch(o) == 0 {
		t.Fatal("read nothing")
	}
	if got := residentKiB(t, b); got < size>>10/2 {
		t.Fatalf("only %d KiB resident after reading %d KiB", got, size>>10)
	}
	n, maps, err := Release(dir)
	if err != nil {
		t.Fatal(err)
	}
	if maps != 1 || n != size {
		t.Errorf("advised %d bytes in %d mappings, want %d in 1", n, maps, size)
	}
	if got := residentKiB(t, b); got > 64 {
		t.Errorf("%d KiB still resident after Release", got)
	}
	if got := residentKiB(t, o); got < size>>10/2 {
		t.Errorf("the mapping outside dir lost its pages: %d KiB resident", got)
	}
	if !bytes.Equal(b, want) {
		t.Error("the mapping reads different bytes after Release")
	}
}

// TestPageOutDropsPagesKeepsData: after PageOut the pages of a mapped file
// under the directory leave the resident set (on a kernel with
// MADV_PAGEOUT), the mapping reads the same bytes, and an anonymous
// mapping it is given by mistake keeps its contents.
func TestPageOutDropsPagesKeepsData(t *testing.T) {
	const size = 8 << 20
	dir, other := t.TempDir(), t.TempDir()
	b, want := mapFile(t, dir, size)
	o, _ := mapFile(t, other, size)
	if touch(b) == 0 || touch(o) == 0 {
		t.Fatal("read nothing")
	}
	n, err := PageOut(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Skip("the kernel has no MADV_PAGEOUT")
	}
	if got := residentKiB(t, b); got > size>>10/4 {
		t.Errorf("%d KiB of %d still resident after PageOut", got, size>>10)
	}
	if got := residentKiB(t, o); got < size>>10/2 {
		t.Errorf("the mapping outside dir lost its pages: %d KiB resident", got)
	}
	if !bytes.Equal(b, want) {
		t.Error("the mapping reads different bytes after PageOut")
	}
	// What makes it safe where Release is not: anonymous memory at a
	// reused address keeps its contents.
	anon, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(anon)
	copy(anon, want)
	if err := unix.Madvise(anon, unix.MADV_PAGEOUT); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(anon, want) {
		t.Error("anonymous memory lost its contents to MADV_PAGEOUT")
	}
}

// TestReleaseSeveralDirs: one Release drops the mappings under each of the
// directories it is given, and only those.
func TestReleaseSeveralDirs(t *testing.T) {
	const size = 4 << 20
	d1, d2, other := t.TempDir(), t.TempDir(), t.TempDir()
	b1, _ := mapFile(t, d1, size)
	b2, _ := mapFile(t, d2, size)
	o, _ := mapFile(t, other, size)
	if touch(b1) == 0 || touch(b2) == 0 || touch(o) == 0 {
		t.Fatal("read nothing")
	}
	n, maps, err := Release(d1, d2)
	if err != nil {
		t.Fatal(err)
	}
	if maps != 2 || n != 2*size {
		t.Errorf("advised %d bytes in %d mappings, want %d in 2", n, maps, 2*size)
	}
	if r1, r2 := residentKiB(t, b1), residentKiB(t, b2); r1 > 64 || r2 > 64 {
		t.Errorf("%d and %d KiB still resident after Release", r1, r2)
	}
	if got := residentKiB(t, o); got < size>>10/2 {
		t.Errorf("the mapping outside both lost its pages: %d KiB resident", got)
	}
	if n, maps, err := Release(); n != 0 || maps != 0 || err != nil {
		t.Errorf("Release of no directory: %d bytes, %d mappings, %v", n, maps, err)
	}
}

func TestParseLine(t *testing.T) {
	prefix := []byte("/data/raw/chunks_head/")
	for line, want := range map[string]bool{
		"7f0000000000-7f0008000000 r--s 00000000 fd:01 1234 /data/raw/chunks_head/000001":           true,
		"7f0000000000-7f0008000000 r--s 00000000 fd:01 1234 /data/raw/chunks_head/000001 (deleted)": true,
		"7f0000000000-7f0008000000 r--p 00000000 fd:01 1234 /data/raw/chunks_head/000001":           false,
		"7f0000000000-7f0008000000 rw-s 00000000 fd:01 1234 /data/raw/chunks_head/000001":           false,
		"7f0000000000-7f0008000000 r--s 00000000 fd:01 1234 /data/raw/wal/000001":                   false,
		"7f0000000000-7f0008000000 rw-p 00000000 00:00 0":                                           false,
	} {
		if _, ok := parseLine([]byte(line), prefix); ok != want {
			t.Errorf("%q: kept %v, want %v", line, ok, want)
		}
	}
}

// TestSharedResident: reading a shared file mapping raises the process's
// shared resident set, and Release takes it back down.
func TestSharedResident(t *testing.T) {
	dir := t.TempDir()
	b, _ := mapFile(t, dir, 32<<20)
	before, err := SharedResident()
	if err != nil {
		t.Fatal(err)
	}
	if touch(b) == 0 {
		t.Fatal("read nothing")
	}
	read, err := SharedResident()
	if err != nil {
		t.Fatal(err)
	}
	if read-before < 24<<20 {
		t.Fatalf("reading a 32 MiB mapping raised the shared resident set by %d bytes (from %d)", read-before, before)
	}
	if _, _, err := Release(dir); err != nil {
		t.Fatal(err)
	}
	after, err := SharedResident()
	if err != nil {
		t.Fatal(err)
	}
	if read-after < 24<<20 {
		t.Fatalf("Release took the shared resident set from %d to %d bytes only", read, after)
	}
}

func BenchmarkSharedResident(b *testing.B) {
	for b.Loop() {
		if _, err := SharedResident(); err != nil {
			b.Fatal(err)
		}
	}
}
