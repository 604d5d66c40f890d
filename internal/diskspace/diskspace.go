// Package diskspace stops a store's ingestion before its disk fills.
//
// Prometheus' TSDB panics when a head chunk cannot be written for want of
// space ("no space left on device", in the background goroutine that writes
// full head chunks), and panics again on every restart while the WAL it
// replays needs chunk space that is not there: a full disk is a crash loop.
// VictoriaMetrics turns read-only below -storage.minFreeDiskSpaceBytes
// instead. A Guard does the same for Strata: polled every second, it says
// when the free space of the filesystems holding the store is below a
// minimum, and the writers (remote write, OTLP, the scraper) refuse with a
// retryable error until it is back above the minimum and a tenth. What the
// store holds in memory when ingestion stops (the head's open chunks, a
// compaction's output) must fit in the minimum.
package diskspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// ErrLow is what Guard.Err wraps while writes are refused.
var ErrLow = errors.New("disk space low")

// Guard watches the free bytes of the filesystems holding paths.
// Its methods are safe for concurrent use; a nil Guard never refuses.
type Guard struct {
	paths  []string
	min    uint64 // refuse below
	resume uint64 // accept again from
	free   func(path string) (uint64, error)
	logger *slog.Logger

	low      atomic.Bool
	lastFree atomic.Uint64
	// failing: the last poll could not read a path's free space.
	failing atomic.Bool

	freeBytes prometheus.Gauge
	refusing  prometheus.Gauge
}

// New returns a Guard refusing writes while any of paths' filesystems has
// fewer than minFree bytes available to the process (statfs' f_bavail),
// and accepting them again once every one has minFree plus a tenth (so that
// a disk hovering at the bound does not switch on and off every second).
// It returns nil (no guard) when minFree is not positive or the platform
// cannot tell free space. It polls once before returning.
func New(minFree int64, paths []string, logger *slog.Logger, reg prometheus.Registerer) *Guard {
	if minFree <= 0 || !Supported {
		return nil
	}
	return newGuard(uint64(minFree), paths, freeBytes, logger, reg)
}

func newGuard(minFree uint64, paths []string, free func(string) (uint64, error), logger *slog.Logger, reg prometheus.Registerer) *Guard {
	f := promauto.With(reg)
	g := &Guard{
		paths:  paths,
		min:    minFree,
		resume: minFree + minFree/10,
		free:   free,
		logger: logger,
		freeBytes: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_storage_free_bytes",
			Help: "Bytes available on the fullest filesystem holding the storage path, at the last poll.",
		}),
		refusing: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_storage_disk_space_low",
			Help: "1 while writes are refused because the storage's free disk space is below storage.min_free_bytes.",
		}),
	}
	f.NewGauge(prometheus.GaugeOpts{
		Name: "strata_storage_min_free_bytes",
		Help: "Free disk space below which writes are refused (storage.min_free_bytes).",
	}).Set(float64(minFree))
	g.Check()
	return g
}

// Err returns nil while writes may go on, and an error wrapping ErrLow
// that names the free space and the minimum while they must not. It reads
// what the last poll found: an atomic load, no system call.
func (g *Guard) Err() error {
	if g == nil || !g.low.Load() {
		return nil
	}
	return fmt.Errorf("%w: %d bytes free on the storage's disk, under the %d bytes (storage.min_free_bytes) kept for what is already accepted; writes are refused until %d bytes are free, retry later",
		ErrLow, g.lastFree.Load(), g.min, g.resume)
}

// Check polls the free space once and switches the refusal on or off. A
// path whose free space cannot be read does not switch it (logged once
// until it can be read again).
func (g *Guard) Check() {
	if g == nil {
		return
	}
	least, ok := uint64(0), false
	for _, p := range g.paths {
		n, err := g.free(p)
		if err != nil {
			if !g.failing.Swap(true) {
				g.logger.Warn("cannot read the storage's free disk space", "path", p, "err", err)
			}
			return
		}
		if !ok || n < least {
			least, ok = n, true
		}
	}
	if !ok {
		return
	}
	g.failing.Store(false)
	g.lastFree.Store(least)
	g.freeBytes.Set(float64(least))
	switch {
	case !g.low.Load() && least < g.min:
		g.low.Store(true)
		g.refusing.Set(1)
		g.logger.Error("disk space low: refusing writes (remote write, OTLP, scrapes) until space is freed",
			"free_bytes", least, "min_free_bytes", g.min, "resume_at_bytes", g.resume)
	case g.low.Load() && least >= g.resume:
		g.low.Store(false)
		g.refusing.Set(0)
		g.logger.Info("disk space recovered: accepting writes again", "free_bytes", least, "min_free_bytes", g.min)
	}
}

// Watch returns a context derived from ctx that is cancelled, with an
// error wrapping ErrLow as its cause (context.Cause), when a poll every period
// finds the free space below the minimum, or at once if the last poll did:
// for a writer that stops rather than refuses, as strata backfill does. Its
// CancelFunc stops the polling; call it when the work is done. A nil
// Guard's context is cancelled only with ctx.
func (g *Guard) Watch(ctx context.Context, period time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if g == nil {
		return ctx, func() { cancel(nil) }
	}
	if g.low.Load() {
		cancel(g.stopped())
		return ctx, func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				g.Check()
				if g.low.Load() {
					cancel(g.stopped())
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil); <-done }
}

// stopped is Watch's cause: a writer that stops is not refused, to retry.
func (g *Guard) stopped() error {
	return fmt.Errorf("%w: %d bytes free on the storage's disk, under storage.min_free_bytes (%d)", ErrLow, g.lastFree.Load(), g.min)
}
