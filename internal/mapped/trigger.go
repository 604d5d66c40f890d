package mapped

import "time"

// Trigger decides when to Release: once the process's shared resident set
// (SharedResident) has grown by Grow bytes since the last release, and at
// least every Every. Polled often (strata serve: every 100 ms), it bounds
// the pages reads keep mapped by Grow plus what one poll interval's reads
// map, where a fixed period bounds them by what a whole period's reads map:
// at the TSDB's 2-hour boundary every series of the head cuts its chunk,
// and the reads of the next minutes map every page of the chunks just
// written (128 MiB at 500,000 series) within a few seconds.
//
// Growth that a release does not take back (another file mapping read in,
// the binary's own pages) costs one release: the baseline is the shared
// resident set right after it.
type Trigger struct {
	Grow  int64
	Every time.Duration

	base int64     // the shared resident set after the last release
	last time.Time // the last release (zero: none yet)
}

// Due reports whether a release is due at now, with the shared resident
// set at cur bytes (0 where it cannot be read: then only Every counts).
func (t *Trigger) Due(now time.Time, cur int64) bool {
	if t.last.IsZero() {
		t.last, t.base = now, cur
		return false
	}
	return now.Sub(t.last) >= t.Every || (cur > 0 && t.Grow > 0 && cur-t.base >= t.Grow)
}

// Released records a release at now, after which the shared resident set
// was cur bytes.
func (t *Trigger) Released(now time.Time, cur int64) {
	t.last, t.base = now, cur
}
