//go:build !(linux || darwin || freebsd)

package diskspace

import "errors"

// Supported: this platform's free space is not read; New returns no guard.
const Supported = false

func freeBytes(string) (uint64, error) {
	return 0, errors.New("free disk space is not read on this platform")
}
