package diagnose

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ReplayChunk is the most minutes of windows a chunked read (Replay, and
// the baselines' read-back at start) loads at once.
const ReplayChunk = 6 * time.Hour

// chunkWindows bounds the windows a chunked read holds at once: a chunk is
// shorter than ReplayChunk where the series the rules read would make it
// hold more. Six hours of 500,000 series are 180 million windows, more than
// 10 GB (docs/diagnosis.md, "Memory of the read-back"); 4 Mi windows are
// about 64 MB of the columns the default rules read (16 bytes a window at
// 500,000 series), besides the range queries' points. A var for tests.
var chunkWindows = 4 << 20

// firstChunk is the minutes a chunked read loads before it knows how many
// series the rules read: the smallest chunk.
const firstChunk = 10 * time.Minute

// nextChunk returns how many minutes the chunk after one that read series
// series loads: ReplayChunk, or as many as keep chunkWindows windows
// (counting the need's windows read before each chunk), at least
// firstChunk.
func (e *Engine) nextChunk(series int) time.Duration {
	c := ReplayChunk
	if series > 0 {
		c = min(c, time.Duration(chunkWindows/series)*time.Minute-time.Duration(e.need)*time.Millisecond)
	}
	return max(c.Truncate(time.Minute), firstChunk)
}

// Replay evaluates the minutes of [from, to] over the minute tier o.Minute
// exactly as a live engine does, starting Warmup earlier, and returns the
// diagnoses that overlap [from, to], in start order. A diagnosis still open
// at to is reported firing. o.Open, o.WriteBack, o.Baselines and o.Sinks are ignored
// (a replay writes nothing and notifies no one).
func Replay(ctx context.Context, cfg Config, o Options, from, to time.Time) ([]Diagnosis, error) {
	if !from.Before(to) {
		return nil, fmt.Errorf("replay range: from %s is not before to %s", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	o.Open, o.WriteBack, o.Baselines, o.Sinks = nil, nil, nil, nil
	o.BaselineReadOnly = true // a server may be writing them
	e, err := New(cfg, o)
	if err != nil {
		return nil, err
	}
	return e.replay(ctx, from, to, true)
}

// replay evaluates the range; fast enables the range-query fast path
// (fastpath.go) when the rules allow it.
func (e *Engine) replay(ctx context.Context, from, to time.Time, fast bool) ([]Diagnosis, error) {
	e.chunk = firstChunk
	if fast && fastPathSafe(e.groups) {
		e.precomp = newPrecomputed()
	}
	first := from.Add(-e.warmup).Truncate(minute)
	last := to.Truncate(minute)
	for t := first; !t.After(last); t = t.Add(minute) {
		if err := e.evalMinute(ctx, t, t.Before(from)); err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return nil, err
			}
			return nil, fmt.Errorf("replay minute %s: %w", t.UTC().Format(time.RFC3339), err)
		}
	}
	if p := e.ahead; p != nil {
		<-p.done // the read ahead past the range
		e.ahead = nil
	}
	var out []Diagnosis
	for _, d := range e.Diagnoses() {
		if d.Overlaps(from, to) {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b Diagnosis) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// MarkSource is the rollup pipeline as the live engine follows it;
// *downsample.Pipeline implements it.
type MarkSource interface {
	// Mark is the end (ms, exclusive) of the minute windows computed so far,
	// and false before the first tick computed any.
	Mark() (int64, bool)
	// MarkAdvanced is signalled (without blocking the pipeline) after each
	// tick that advanced the mark.
	MarkAdvanced() <-chan struct{}
}

// ReadHolder is a MarkSource whose finished hours wait for the engine's
// reads (*downsample.Pipeline: HoldReads): Run tells it, before each
// minute, the start of the minute's snapshot (the minute less e.need),
// so that an hour's partition is written once the engine has read the
// hour's last minutes from the open windows, and the engine never opens
// the new file.
type ReadHolder interface {
	HoldReads(t int64)
	ReleaseReads()
}

// maxReadHold bounds the reach the engine holds the pipeline's hours for:
// the pipeline waits at most downsample.DefaultDirectGrace (30 minutes)
// past an hour's flush time, so a longer reach (a custom rule reading the
// minute data over half an hour) would delay every write by the grace and
// still read the file. The default rules' snapshots start 9 minutes back
// (their longest range, 3 minutes, the lookback and a minute;
// TestRunHoldsReads).
const maxReadHold = 20 * time.Minute

// readHoldIdle is how long Run keeps its hold while the mark stands still.
// The mark advances a minute every minute while the fleet sends; one that
// stopped (or a one-off load) leaves the watermark where it was, the
// engine's next minutes never come, and the hour they held would wait for
// them until new data arrived.
var readHoldIdle = 2 * time.Minute

// Run is the live loop: it waits for the pipeline's first mark, warms up
// over the Warmup before it (so that `for` state and ranges are rebuilt
// after a restart: the same minutes a replay would evaluate), then evaluates
// every minute as soon as its windows are final, until ctx ends. A minute
// that fails (minute data unreadable) is retried at the next signal. When
// src is a ReadHolder, each minute holds the open windows it reads.
func (e *Engine) Run(ctx context.Context, src MarkSource) error {
	var next time.Time
	live := time.Time{} // first minute not part of the warm-up
	holder, _ := src.(ReadHolder)
	if e.need > maxReadHold.Milliseconds() {
		holder = nil
	}
	if holder != nil {
		defer holder.ReleaseReads()
	}
	defer e.stopReadBack()
	for {
		if mark, ok := src.Mark(); ok {
			end := time.UnixMilli(mark).Truncate(minute) // minutes t with t+1m <= mark
			if next.IsZero() {
				live = end.Add(-minute)
				next = live.Add(-e.warmup)
				e.logger.Info("diagnosis engine warming up", "from", next.UTC().Format(time.RFC3339), "minutes", int(e.warmup/minute))
			}
			e.upTo(src, holder, next)
			if e.base != nil && (e.beside || !e.base.booted) {
				planned := next
				err := e.readBackToLive(ctx, src, &live, &next)
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					// It goes on from the chunk that failed (bootstrap).
					e.m.failures.Inc()
					e.logger.Error("reading the baselines back failed; retrying", "err", err)
					if !e.waitMark(ctx, src, holder) {
						return nil
					}
					continue
				}
				if !next.Equal(planned) {
					e.upTo(src, holder, next)
				}
				if mark, ok := src.Mark(); ok {
					end = time.UnixMilli(mark).Truncate(minute)
				}
			}
			for ; next.Add(minute).Compare(end) <= 0; next = next.Add(minute) {
				if ctx.Err() != nil {
					return nil
				}
				if err := e.evalMinute(ctx, next, next.Before(live)); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					e.logger.Error("diagnosis evaluation failed; retrying", "minute", next.UTC().Format(time.RFC3339), "err", err)
					break
				}
				e.upTo(src, holder, next.Add(minute))
				if e.bg != nil && e.bg.finished() {
					// The read-back beside has ended: on with it.
					next = next.Add(minute)
					break
				}
			}
		}
		if !e.waitMark(ctx, src, holder) {
			return nil
		}
	}
}

// readBackToLive reads the baselines' history back up to *next, the
// warm-up's first minute. At fleet scale that takes hours (a first start
// over a store without checkpoints, or after a change of the signals'
// rules: 33 minutes for a day of 500,000 series), and an engine that
// waited for it diagnosed nothing meanwhile, then evaluated as live every
// minute that had passed. So the read-back runs beside: when it has not
// ended within readBackCatchUp, the warm-up moves to the live edge (the
// minutes between are read into the baselines, not evaluated: like a
// Prometheus whose rules do not run while it is down, their recorded
// series and diagnoses are not made), and the engine evaluates from there
// without baselines, as a new install does, while the read-back goes on
// (beside: the read-back owns the tracker). Each time it ends it goes on
// to the live loop's next minute, beside again while the last leg took
// longer than readBackCatchUp, else here, after which the minutes have
// their baselines again. A read-back that ends within readBackCatchUp is
// caught up however far the mark moved: a restart from a checkpoint, a
// small fleet's four weeks, and a feed of past data faster than the clock
// (the tests' simulated fleets) are evaluated whole, as a replay would.
func (e *Engine) readBackToLive(ctx context.Context, src MarkSource, live, next *time.Time) error {
	if !e.beside {
		e.startReadBack(ctx, *next)
		if ended, err := e.bg.wait(ctx, readBackCatchUp); ended {
			e.bg = nil
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		e.beside = true
		e.m.beside.Set(1)
		newLive := *live
		if mark, ok := src.Mark(); ok && time.UnixMilli(mark).Truncate(minute).Add(-minute).After(newLive) {
			newLive = time.UnixMilli(mark).Truncate(minute).Add(-minute)
		}
		e.logger.Info("the baselines' read-back outlasted its start: evaluating from the live edge without baselines while it goes on",
			"live was", live.UTC().Format(time.RFC3339), "live", newLive.UTC().Format(time.RFC3339),
			"minutes not evaluated", int(newLive.Sub(*live)/minute))
		e.m.skipped.Add(float64(newLive.Sub(*live) / minute))
		*live, *next = newLive, newLive.Add(-e.warmup)
		return nil
	}
	if e.bg == nil {
		// A leg failed: the next goes on from the tracker's last minute,
		// the failed chunk's start (newReadBack), as a leg after one that
		// ended does.
		e.startReadBack(ctx, *next)
		return nil
	}
	if !e.bg.finished() {
		return nil
	}
	err, leg, to := e.bg.err, time.Since(e.bg.start), e.bg.tm
	e.bg = nil
	if err != nil {
		return err
	}
	if to.Equal(*next) {
		return e.caughtUp()
	}
	e.base.booted = false
	if leg > readBackCatchUp {
		e.startReadBack(ctx, *next)
		return nil
	}
	if err := e.bootstrap(ctx, next.UnixMilli()); err != nil {
		return err
	}
	return e.caughtUp()
}

// caughtUp ends a read-back beside live evaluation: the tracker has read
// every minute before the next one evaluated, which has its baselines.
func (e *Engine) caughtUp() error {
	e.beside = false
	e.m.beside.Set(0)
	e.logger.Info("the baselines are read back: the minutes from now on have them", "series", e.base.len())
	return nil
}

// readBackCatchUp is how long the baselines' read-back may take before the
// engine evaluates beside it, from the live edge (readBackToLive): a
// read-back of minutes (a restart's, from its checkpoint; a small fleet's
// four weeks) is caught up as before. A variable for tests.
var readBackCatchUp = 15 * time.Minute

// bgReadBack is a read-back of the baselines running in a goroutine of its
// own (bootstrap before minute tm).
type bgReadBack struct {
	tm    time.Time
	start time.Time
	done  chan struct{}
	err   error
}

// startReadBack starts bootstrap before minute tm in a goroutine.
func (e *Engine) startReadBack(ctx context.Context, tm time.Time) {
	b := &bgReadBack{tm: tm, start: time.Now(), done: make(chan struct{})}
	e.bg = b
	go func() {
		defer close(b.done)
		b.err = e.bootstrap(ctx, tm.UnixMilli())
	}()
}

// finished reports whether the read-back has ended.
func (b *bgReadBack) finished() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for the read-back to end, and returns whether it
// ended (false when ctx ended first, or d passed) and its error.
func (b *bgReadBack) wait(ctx context.Context, d time.Duration) (bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.done:
		return true, b.err
	case <-t.C:
	case <-ctx.Done():
	}
	if b.finished() {
		return true, b.err
	}
	return false, nil
}

// stopReadBack waits for a read-back running beside to end (Run's ctx
// has ended, and it with it): the tracker is the engine's again.
func (e *Engine) stopReadBack() {
	if e.bg != nil {
		<-e.bg.done
		e.bg = nil
	}
}

// upTo records that next is the first minute not evaluated: a holder
// holds the open windows from where next's snapshot starts, and
// strata_diagnose_lag_seconds is how far next trails src's mark now. The
// mark moves while minutes are evaluated: measured against the mark a
// batch of minutes started from, an engine that fell further behind with
// every minute showed no lag.
func (e *Engine) upTo(src MarkSource, holder ReadHolder, next time.Time) {
	if holder != nil {
		holder.HoldReads(next.UnixMilli() - e.need)
	}
	if mark, ok := src.Mark(); ok {
		e.m.lag.Set(max(0, time.UnixMilli(mark).Truncate(minute).Sub(next).Seconds()))
	}
}

// waitMark waits for src's mark to advance, or a read-back running beside
// to end (the live loop goes on with it at once), and reports false if ctx
// ends first. A holder's hold is released once the mark has stood still
// for readHoldIdle (Run holds again at its next minute).
func (e *Engine) waitMark(ctx context.Context, src MarkSource, holder ReadHolder) bool {
	var ended <-chan struct{} // nil: never
	if e.bg != nil {
		ended = e.bg.done
	}
	var idle <-chan time.Time
	if holder != nil {
		t := time.NewTimer(readHoldIdle)
		defer t.Stop()
		idle = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-src.MarkAdvanced():
			return true
		case <-ended:
			return true
		case <-idle:
			holder.ReleaseReads()
			idle = nil
		}
	}
}
