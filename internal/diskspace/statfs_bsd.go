//go:build darwin || freebsd

package diskspace

import "syscall"

// blockSize is the unit of f_bavail: the fundamental block size.
func blockSize(st *syscall.Statfs_t) uint64 {
	return uint64(st.Bsize) //nolint:gosec,unconvert // its type differs by platform; a block size is positive
}
