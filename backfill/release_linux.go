package backfill

import (
	"os"

	"golang.org/x/sys/unix"
)

// releaseBehind drops the process's mappings of b's pages from done up to
// off (both rounded down to a page) and returns the new done. b is a
// read-only shared file mapping that starts on a page: MADV_DONTNEED only
// removes page-table entries there, the data stays in the page cache.
func releaseBehind(b []byte, done, off int) int {
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
