package diagnose

import (
	"os"

	"golang.org/x/sys/unix"
)

const arenaSupported = true

// mapChunk allocates the file's bytes [off, off+n) (fallocate: a full disk
// fails here, not in a later write through the mapping) and maps them
// shared, so that writes go to the page cache.
func mapChunk(f *os.File, off int64, n int) ([]byte, error) {
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, 0, off, int64(n)); err != nil {
		return nil, err
	}
	return unix.Mmap(fd, off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// dropPages unmaps c's resident pages from the process; a shared file
// mapping's contents are kept (the next access maps them in again).
func dropPages(c []byte) error { return unix.Madvise(c, unix.MADV_DONTNEED) }

func unmapChunk(c []byte) error { return unix.Munmap(c) }
