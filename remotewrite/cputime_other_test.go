//go:build !unix

package remotewrite

import "time"

// processCPU is not available here; benchmarks then skip the CPU metric.
func processCPU() time.Duration { return 0 }
