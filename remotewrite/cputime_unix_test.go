//go:build unix

package remotewrite

import (
	"syscall"
	"time"
)

// processCPU returns the user plus system CPU time the process has used.
// Benchmarks report samples per CPU-second from it because the shared build
// machines are loaded: wall-clock ns/op measures the load, CPU time measures
// the code.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
