package mapped

import (
	"context"
	"time"
)

// Trigger decides when to Release: once the process's shared resident set
// (SharedResident) has grown by Grow bytes since the last release, and at
// least every Every. Polled often, it keeps the pages reads keep mapped
// near Grow plus what one poll interval's reads map (near, not under: the
// reads go on while a release runs; BenchmarkReleaseUnderReads in tiers),
// where a fixed period lets them reach what a whole period's reads map: at
// the TSDB's block boundary every series of the head cuts its chunk, and
// the reads of the next minutes map every page of the chunks just written
// (128 MiB at 500,000 series) within a second or two.
//
// The caller polls every Poll (which must be positive), and every
// BurstPoll for Burst after a release that growth made due: reads that
// mapped Grow within a poll interval are mapping fast, and at 100 ms a
// single evaluation still mapped most of such a file between two polls.
//
// Growth that a release does not take back (another file mapping read in,
// the binary's own pages) costs one release: the baseline is the shared
// resident set right after it.
type Trigger struct {
	Grow            int64
	Every           time.Duration
	Poll, BurstPoll time.Duration
	Burst           time.Duration
	// Hold, when set, defers a due release while it returns true: reads
	// that come back to the same pages within seconds (a dashboard's
	// queries) would only map them again.
	Hold func(now time.Time) bool

	base       int64     // the shared resident set after the last release
	last       time.Time // the last release (zero: none yet)
	grown      bool      // the last due poll was due by growth
	burstUntil time.Time // poll every BurstPoll until then
}

// Due reports whether a release is due at now, with the shared resident
// set at cur bytes (0 where it cannot be read: then only Every counts).
func (t *Trigger) Due(now time.Time, cur int64) bool {
	if t.last.IsZero() {
		t.last, t.base = now, cur
		return false
	}
	t.grown = cur > 0 && t.Grow > 0 && cur-t.base >= t.Grow
	return t.grown || now.Sub(t.last) >= t.Every
}

// Released records a release at now, after which the shared resident set
// was cur bytes.
func (t *Trigger) Released(now time.Time, cur int64) {
	t.last, t.base = now, cur
	if t.grown {
		t.burstUntil = now.Add(t.Burst)
	}
}

// Interval is how long to wait at now before the next poll.
func (t *Trigger) Interval(now time.Time) time.Duration {
	if t.BurstPoll > 0 && now.Before(t.burstUntil) {
		return t.BurstPoll
	}
	return t.Poll
}

// Run polls SharedResident and calls release whenever a release is due,
// until ctx is done.
func (t *Trigger) Run(ctx context.Context, release func()) {
	shared := func() int64 {
		n, err := SharedResident()
		if err != nil {
			return 0 // by time alone
		}
		return n
	}
	t.Due(time.Now(), shared()) // the baseline
	timer := time.NewTimer(t.Interval(time.Now()))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if now := time.Now(); t.Due(now, shared()) && (t.Hold == nil || !t.Hold(now)) {
			release()
			t.Released(time.Now(), shared())
		}
		timer.Reset(t.Interval(time.Now()))
	}
}
