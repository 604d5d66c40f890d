//go:build linux || darwin || freebsd

package diskspace

import "syscall"

// Supported: free space is read with statfs(2).
const Supported = true

// freeBytes returns the bytes available to an unprivileged process on the
// filesystem holding path (f_bavail, not f_bfree: ext4 reserves 5 % for
// root, and a store running as root that filled them would leave the
// host's other services none).
func freeBytes(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * blockSize(&st), nil //nolint:unconvert // Bavail's type differs by platform
}
