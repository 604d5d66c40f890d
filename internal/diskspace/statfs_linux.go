package diskspace

import "syscall"

// blockSize is the unit of f_bavail: the fragment size on Linux.
func blockSize(st *syscall.Statfs_t) uint64 {
	if st.Frsize > 0 {
		return uint64(st.Frsize)
	}
	return uint64(st.Bsize) //nolint:gosec // a block size is positive
}
