package remotewrite

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
)

// DefaultHeapLimitRatio is the share of the Go runtime's soft memory limit
// (GOMEMLIMIT, which strata serve sets from the container's or machine's
// memory) that the live heap may reach before the handler answers 429. Past
// about this point the garbage collector runs nearly back to back to hold
// the limit: appending more would only trade CPU for memory until the
// process is killed.
const DefaultHeapLimitRatio = 0.8

// liveHeapMetric is the heap the last garbage collection found reachable:
// what the process keeps, without the garbage a collection is about to
// free, so the gate does not flap with the collector's cycle.
const liveHeapMetric = "/gc/heap/live:bytes"

// heapLimitFromRuntime returns DefaultHeapLimitRatio of the runtime's soft
// memory limit, or 0 (no gate) when none is set.
func heapLimitFromRuntime() int64 {
	limit := debug.SetMemoryLimit(-1) // -1 reads the limit without changing it
	if limit <= 0 || limit == math.MaxInt64 {
		return 0
	}
	return int64(float64(limit) * DefaultHeapLimitRatio)
}

// readLiveHeap returns the live heap bytes after the last garbage
// collection. runtime/metrics reads it without stopping the world.
func readLiveHeap() uint64 {
	var s [1]metrics.Sample
	s[0].Name = liveHeapMetric
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
